#!/bin/bash
# test_bodies.sh - request bodies over HTTP/1.1 against the real tpud, with curl and raw
# sockets: Content-Encoding gzip and deflate (zlib and raw), Transfer-Encoding chunked (curl's,
# and one split into many tiny chunks sent a few bytes at a time), both together, each giving
# the same answer as the plain body; large answers gzipped for curl --compressed; an unknown coding 415 and a truncated gzip 400 on a
# connection that stays usable; a gzip bomb (1 KiB per MiB: 1 GiB of zeros in about 1 MiB)
# 413 with tpud's peak memory growing by less than the limit plus a margin; chunked bodies over
# the limit 413, bad chunk sizes 400, other transfer codings 501. $1 = build directory,
# $2 = source directory.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
[ -x "$TPUD" ] || { echo "$TPUD not built"; exit 1; }
for c in curl gzip; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

WORK=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }

mkdir -p "$WORK/repo/digits"
cp -r "$SRC/models/digits/1" "$WORK/repo/digits/1"
LIMIT=4194304 # --http-max-body-bytes: 4 MiB
LOG=$WORK/tpud.log
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 \
  --http-max-body-bytes $LIMIT 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
URL=http://127.0.0.1:$HPORT/v2/models/digits/infer

# The body: three rows of 64 features; the plain answer is the reference.
$PY - "$WORK" <<'EOF'
import json, random, sys, zlib
random.seed(11)
rows = [[round(random.random() * 16, 3) for _ in range(64)] for _ in range(3)]
body = json.dumps({"id": "b", "inputs": [{"name": "x", "shape": [3, 64], "datatype": "FP32",
                                          "data": rows}]}).encode()
w = sys.argv[1]
open(w + "/body.json", "wb").write(body)
open(w + "/body.zlib", "wb").write(zlib.compress(body))
c = zlib.compressobj(6, zlib.DEFLATED, -15)
open(w + "/body.raw", "wb").write(c.compress(body) + c.flush())
EOF
post() { # OUT [curl args...]: prints the status
  local out=$1
  shift
  curl -s -o "$out" -w '%{http_code}' -H 'Content-Type: application/json' "$@" "$URL"
}
st=$(post "$WORK/plain.out" --data-binary @"$WORK/body.json")
[ "$st" = 200 ] || { fail "plain body: $st $(head -c 300 "$WORK/plain.out")"; exit 1; }
same() { # WHAT FILE STATUS: 200 and the same outputs as the plain body
  if [ "$3" != 200 ]; then fail "$1: status $3: $(head -c 300 "$2")"; return; fi
  $PY -c "import json,sys; a=json.load(open('$WORK/plain.out')); b=json.load(open('$2')); \
sys.exit(0 if a['outputs'] == b['outputs'] else 1)" && ok "$1: 200, the plain body's answer" ||
    fail "$1: answer differs: $(head -c 300 "$2")"
}

# ---- Content-Encoding ----
st=$(gzip -c "$WORK/body.json" | post "$WORK/o" --data-binary @- -H 'Content-Encoding: gzip')
same "gzip (gzip -c | curl)" "$WORK/o" "$st"
st=$(post "$WORK/o" --data-binary @"$WORK/body.zlib" -H 'Content-Encoding: deflate')
same "deflate (zlib)" "$WORK/o" "$st"
st=$(post "$WORK/o" --data-binary @"$WORK/body.raw" -H 'Content-Encoding: deflate')
same "deflate (raw)" "$WORK/o" "$st"
st=$(post "$WORK/o" --data-binary @"$WORK/body.json" -H 'Content-Encoding: identity')
same "identity" "$WORK/o" "$st"

# ---- Transfer-Encoding: chunked ----
st=$(post "$WORK/o" -H 'Transfer-Encoding: chunked' --data-binary @"$WORK/body.json")
same "chunked (curl)" "$WORK/o" "$st"
st=$(gzip -c "$WORK/body.json" | post "$WORK/o" -H 'Transfer-Encoding: chunked' \
  -H 'Content-Encoding: gzip' --data-binary @-)
same "chunked and gzip" "$WORK/o" "$st"

# ---- Accept-Encoding: gzip for large answers (curl --compressed) ----
$PY -c "import json; json.dump({'inputs': [{'name': 'x', 'shape': [64, 64], 'datatype': 'FP32', \
'data': [0.5] * 4096}]}, open('$WORK/big.json', 'w'))"
st=$(curl -s -D "$WORK/h" -o "$WORK/big.plain" -w '%{http_code}' --data-binary @"$WORK/big.json" "$URL")
st2=$(curl -s --compressed -D "$WORK/hz" -o "$WORK/big.z" -w '%{http_code} %{size_download}' \
  --data-binary @"$WORK/big.json" "$URL")
zsize=${st2#* }
[ "$st" = 200 ] && [ "${st2% *}" = 200 ] && grep -qi '^Content-Encoding: gzip' "$WORK/hz" &&
  ! grep -qi '^Content-Encoding' "$WORK/h" && cmp -s "$WORK/big.plain" "$WORK/big.z" &&
  [ "$zsize" -lt "$(stat -c %s "$WORK/big.plain")" ] &&
  ok "curl --compressed: a $(stat -c %s "$WORK/big.plain")-byte answer came as $zsize gzip bytes, the same JSON" ||
  fail "Accept-Encoding gzip: $st / $st2: $(cat "$WORK/hz")"
curl -s --compressed -D "$WORK/hz" -o /dev/null "http://127.0.0.1:$HPORT/v2/health/live"
! grep -qi '^Content-Encoding' "$WORK/hz" && ok "small answers are not compressed" ||
  fail "a small answer was compressed: $(cat "$WORK/hz")"
curl -s -H 'Accept-Encoding: gzip;q=0' -D "$WORK/hz" -o /dev/null --data-binary @"$WORK/big.json" "$URL"
! grep -qi '^Content-Encoding' "$WORK/hz" && ok "Accept-Encoding gzip;q=0: not compressed" ||
  fail "gzip;q=0 answered gzip: $(cat "$WORK/hz")"

# ---- raw sockets: tiny chunks, errors, the connection after them ----
$PY - "$HPORT" "$WORK" "$LIMIT" <<'EOF' || FAIL=1
import gzip, json, socket, sys, time
port, work, limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
body = open(work + "/body.json", "rb").read()
plain = json.load(open(work + "/plain.out"))
bad = 0
def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    return s, s.makefile("rb")
def answer(f):
    line = f.readline()
    if not line: return None, {}, b""
    status = int(line.split()[1])
    h = {}
    while True:
        l = f.readline().strip()
        if not l: break
        k, v = l.decode().split(":", 1)
        h[k.strip().lower()] = v.strip()
    return status, h, f.read(int(h.get("content-length", 0)))
def check(what, cond, detail=""):
    global bad
    print(("ok: " if cond else "FAIL: ") + what + ("" if cond else ": %r" % (detail,)))
    if not cond: bad = 1
HEAD = b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
# Many tiny chunks (1..7 bytes, with extensions and a trailer), sent a few bytes at a time.
wire, i, n = b"", 0, 1
while i < len(body):
    part = body[i:i + n]
    wire += b"%x;n=%d\r\n" % (len(part), n) + part + b"\r\n"
    i += n
    n = n % 7 + 1
wire += b"0\r\nX-Trailer: t\r\n\r\n"
s, f = conn()
msg = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + wire
for k in range(0, len(msg), 997):
    s.sendall(msg[k:k + 997]); time.sleep(0.002)
st, h, b = answer(f)
check("chunked in tiny chunks (1-7 bytes, extensions, a trailer), split sends: 200, the plain answer",
      st == 200 and json.loads(b)["outputs"] == plain["outputs"], (st, b[:200]))
# The same connection, pipelined: an unknown coding (415), a truncated gzip (400), then a
# good gzip request; the connection stays open throughout (the framing was intact).
gz = gzip.compress(body)
reqs = (HEAD + b"Content-Encoding: br\r\nContent-Length: %d\r\n\r\n" % len(body) + body +
        HEAD + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % (len(gz) - 9) + gz[:-9] +
        HEAD + b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" +
        b"%x\r\n" % len(gz) + gz + b"\r\n0\r\n\r\n")
s.sendall(reqs)
st, h, b = answer(f)
check("Content-Encoding: br -> 415 naming it", st == 415 and "'br' is not supported" in json.loads(b)["error"], (st, b))
st, h, b = answer(f)
check("truncated gzip -> 400", st == 400 and "truncated" in json.loads(b)["error"], (st, b))
st, h, b = answer(f)
check("then gzip+chunked on the same connection -> 200", st == 200 and
      json.loads(b)["outputs"] == plain["outputs"], (st, b[:200]))
s.close()
# Errors that end the connection: the status, then EOF.
def refused(what, req, want, text):
    s, f = conn()
    s.sendall(req)
    st, h, b = answer(f)
    eof = f.read() == b""
    check("%s -> %d (%s), connection closed" % (what, want, text),
          st == want and text in json.loads(b)["error"] and eof, (st, b))
    s.close()
refused("chunk size over the limit", HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % (limit + 1),
        413, "chunked request body exceeds the limit of %d bytes" % limit)
refused("chunks adding up over the limit", HEAD + b"Transfer-Encoding: chunked\r\n\r\n" +
        (b"100000\r\n" + b"a" * 0x100000 + b"\r\n") * 4 + b"1\r\n", 413, "exceeds the limit")
refused("bad chunk size", HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
        "expected a hexadecimal chunk size")
# A bare LF or "size junk" in the framing: a strict proxy in front would frame it otherwise.
refused("bare LF after a chunk size", HEAD + b"Transfer-Encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n",
        400, "CRLF")
refused("a chunk size, a space, more digits",
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n1 2\r\n", 400, "extension")
refused("Transfer-Encoding: gzip", HEAD + b"Transfer-Encoding: gzip\r\n\r\n", 501,
        "only chunked is supported")
refused("chunked and Content-Length", HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        400, "together with Content-Length")
sys.exit(bad)
EOF

# ---- the bomb: 1 GiB of zeros, gzip, about 1 MiB on the wire ----
$PY -c "
import zlib
c = zlib.compressobj(9, zlib.DEFLATED, 31)
open('$WORK/bomb.gz', 'wb').write(b''.join(c.compress(bytes(1 << 20)) for _ in range(1024)) + c.flush())"
hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/$PID/status; }
before=$(hwm)
t0=$(date +%s%N)
st=$(post "$WORK/o" --data-binary @"$WORK/bomb.gz" -H 'Content-Encoding: gzip')
ms=$((($(date +%s%N) - t0) / 1000000))
after=$(hwm)
grow=$(((after - before) * 1024))
[ "$st" = 413 ] && grep -q "exceeds the limit of $LIMIT bytes once decoded" "$WORK/o" &&
  ok "gzip bomb ($(stat -c %s "$WORK/bomb.gz") bytes -> 1 GiB): 413 in $ms ms" ||
  fail "gzip bomb: $st $(head -c 300 "$WORK/o")"
[ $grow -lt $((LIMIT * 2 + 8 * 1048576)) ] &&
  ok "bomb: tpud's peak resident memory grew by $((grow / 1024)) KiB (limit $((LIMIT / 1024)) KiB)" ||
  fail "bomb: peak memory grew by $((grow / 1024)) KiB for a $((LIMIT / 1024)) KiB limit"
st=$(post "$WORK/o" -H 'Transfer-Encoding: chunked' -H 'Content-Encoding: gzip' --data-binary @"$WORK/bomb.gz")
[ "$st" = 413 ] && ok "gzip bomb, chunked: 413" || fail "chunked bomb: $st $(head -c 300 "$WORK/o")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/v2/health/live")" = 200 ] &&
  ok "live after all of it" || fail "not live at the end"
kill -TERM $PID
wait $PID
rc=$?
PID=
[ $rc = 0 ] || fail "tpud exited $rc"

[ $FAIL = 0 ] && echo "test_bodies: all passed" || echo "test_bodies: FAILED"
exit $FAIL
