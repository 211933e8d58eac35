#!/bin/bash
# test_audit.sh - the audit log end to end against the real tpud: records of requests over both
# protocols (fields, digests recomputed here), admin and lifecycle events, `tpuctl audit verify`
# and the independent audit_verify.py agreeing, tamper detection, kill -9 under load with
# --audit-fsync always (every request a client saw succeed has its record; the chain continues
# after restart), fail-closed on a full disk (a small tmpfs, or a file-size limit when mounting
# is not permitted) and recovery, and SIGHUP rotation keeping the chain; the live log deleted
# (under load, then with SIGHUP, and on a full disk) or moved aside, where nothing answered may
# be silently unrecorded and verify must not call a silent gap OK; and the exact count of lost
# records in the closing line when fail-open meets a full disk.
# $1 = build directory, $2 = source directory.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
BENCH=$BUILD/client/tpubench
for b in "$TPUD" "$TPUCTL" "$BENCH"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
command -v curl >/dev/null || { echo "curl missing"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
VERIFY_PY=$SRC/tests/integration/audit_verify.py

WORK=$(mktemp -d)
PID=
MNT=
MNT2=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
  [ -n "$MNT2" ] && umount "$MNT2" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/repo/digits"
cp -r "$SRC/models/digits/1" "$WORK/repo/digits/1"
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }

# start LOGFILE [tpud flags...]: starts tpud on free ports; sets PID, NPORT, HPORT, URL.
start() {
  local log=$WORK/tpud.$RANDOM.log
  "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 "$@" 2>"$log" &
  PID=$!
  tpud_ports "$log" $PID || exit 1
  URL=http://127.0.0.1:$HPORT
  TPUD_LOG=$log
}
# stop: SIGTERM and wait for exit 0.
stop() {
  kill -TERM "$PID"
  wait "$PID"
  local rc=$?
  [ $rc = 0 ] || fail "tpud exited $rc after SIGTERM: $(tail -5 "$TPUD_LOG")"
  PID=
}
# body ID [VALUE]: an infer request of one row of 64 values.
body() {
  $PY -c "import json,sys; print(json.dumps({'id': sys.argv[1], 'inputs': [{'name': 'x', 'shape': [1, 64], 'datatype': 'FP32', 'data': [float(sys.argv[2])] * 64}]}))" "$1" "${2:-1}"
}
http_infer() { # ID -> prints the HTTP status
  curl -s -o "$WORK/resp" -w '%{http_code}' -m 10 -X POST --data "$(body "$1" "${2:-1}")" \
    "$URL/v2/models/digits/infer"
}

# ---- 1. records of both protocols, events, verify ----
A=$WORK/a
mkdir -p "$A"
"$TPUD" --audit-log /nonexistent/dir/audit.log --models "$WORK/repo" --port 0 --http-port 0 \
  2>"$WORK/bad.log"
rc=$?
[ $rc != 0 ] && grep -q "audit-log /nonexistent/dir/audit.log" "$WORK/bad.log" &&
  ok "an audit log that cannot be opened is a start-up error (exit $rc)" ||
  fail "bad --audit-log: exit $rc: $(cat "$WORK/bad.log")"
"$TPUD" --audit-fsync sometimes 2>"$WORK/bad.log"
[ $? = 2 ] && grep -q "always, interval, never" "$WORK/bad.log" || fail "--audit-fsync sometimes accepted"
"$TPUD" --help | grep -q -- "--audit-fail-open" || fail "--help does not list --audit-fail-open"

start --audit-log "$A/audit.log"
grep -q "audit log $A/audit.log: fsync interval" "$TPUD_LOG" || fail "no start-up line for the audit log"
for i in 1 2 3; do
  [ "$(http_infer "h-$i" "$i")" = 200 ] || fail "http infer h-$i: $(cat "$WORK/resp")"
done
for i in 1 2 3; do
  "$TPUCTL" --addr 127.0.0.1:$NPORT infer digits --data "$(body "n-$i" "$i")" >/dev/null ||
    fail "native infer n-$i"
done
[ "$(curl -s -o "$WORK/resp" -w '%{http_code}' -X POST --data "$(body e-1)" \
  "$URL/v2/models/nope/infer")" = 404 ] || fail "unknown model did not give 404: $(cat "$WORK/resp")"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST --data '{"id":' \
  "$URL/v2/models/digits/infer")" = 400 ] || fail "bad JSON did not give 400"
"$BENCH" --addr 127.0.0.1:$NPORT --protocol native -c 4 -n 200 --warmup 0 >/dev/null ||
  fail "tpubench native"
"$BENCH" --addr 127.0.0.1:$HPORT --protocol http -c 4 -n 200 --warmup 0 >/dev/null ||
  fail "tpubench http"
curl -s "$URL/v2/debug/engine" | $PY -c 'import json, sys; print(json.load(sys.stdin)["isa"])' \
  >"$WORK/isa"
curl -s "$URL/metrics" >"$WORK/metrics"
for m in tpud_audit_records_written_total tpud_audit_records_lost_total tpud_audit_bytes_total \
  tpud_audit_fsyncs_total tpud_audit_failed; do
  grep -q "^$m " "$WORK/metrics" || fail "metric $m missing"
done
grep -q "^tpud_audit_failed 0$" "$WORK/metrics" || fail "tpud_audit_failed is not 0"
stop

$PY - "$A/audit.log" "$SRC" "$WORK/isa" <<'EOF' || fail "record fields"
import hashlib, json, re, struct, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
kinds = [r["kind"] for r in recs]
assert kinds[0] == "config" and "load" in kinds and "start" in kinds and kinds[-1] == "stop", kinds[:5]
assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
load = next(r for r in recs if r["kind"] == "load")
assert load["model"] == "digits" and load["version"] == "1", load
by_id = {r["request_id"]: r for r in recs if r["kind"] == "request" and r["request_id"]}
ckpt = json.load(open(sys.argv[2] + "/models/digits/1/model.json"))["checkpoint"]["sha256"]
isa = open(sys.argv[3]).read().strip()
assert all(r["kernels"] == "" and r["checkpoint_sha256"] == "" for r in recs if r["kind"] != "request")
hexre = re.compile("^[0-9a-f]{64}$")
for proto in "hn":
    for i in (1, 2, 3):
        r = by_id[f"{proto}-{i}"]
        assert r["status"] == "OK" and r["model"] == "digits" and r["version"] == "1", r
        assert re.match(r"^127\.0\.0\.1:\d+$", r["client"]), r
        want = hashlib.sha256(struct.pack("<64f", *([float(i)] * 64))).hexdigest()
        assert r["input_sha256"] == want, (r, want)
        assert hexre.match(r["output_sha256"]) and r["batch_id"] > 0 and r["bucket"] >= 1, r
        assert r["compute_us"] > 0, r
        # the conditions a replay must meet: checkpoint, reference check, kernels, precision
        assert r["checkpoint_sha256"] == ckpt and r["reference"] == "" and r["precision"] == "fp32", r
        assert r["kernels"] == isa, (r, isa)
    # the same input over both protocols: the same digests
for i in (1, 2, 3):
    assert by_id[f"h-{i}"]["output_sha256"] == by_id[f"n-{i}"]["output_sha256"]
e = by_id["e-1"]
assert e["status"] == "NOT_FOUND" and e["model"] == "nope" and e["input_sha256"] == "", e
bad = [r for r in recs if r["kind"] == "request" and r["status"] == "INVALID_ARGUMENT"]
assert bad and bad[0]["model"] == "digits" and bad[0]["output_sha256"] == "", bad
nreq = sum(1 for r in recs if r["kind"] == "request" and r["status"] == "OK")
assert nreq >= 406, nreq  # 6 + 2 x 200 (tpubench warm-up 0)
print(f"records ok: {len(recs)} records, {nreq} OK requests")
EOF
out=$("$TPUCTL" audit verify "$A/audit.log")
rc=$?
n=$(wc -l <"$A/audit.log")
[ $rc = 0 ] && echo "$out" | grep -q "^OK" && echo "$out" | grep -q "$n records" &&
  ok "tpuctl audit verify: $out" || fail "tpuctl audit verify ($rc): $out (expected $n records)"
pyout=$($PY "$VERIFY_PY" "$A/audit.log")
[ $? = 0 ] && [ "$(echo "$pyout" | awk '{print $2}')" = "$n" ] && ok "audit_verify.py: $pyout" ||
  fail "audit_verify.py: $pyout"
$PY "$VERIFY_PY" --head "$A/audit.log.head" "$A/audit.log" >/dev/null || fail "audit_verify.py --head"
"$TPUCTL" audit verify --head "$A/audit.log.head" "$A/audit.log" >/dev/null || fail "verify --head"
"$TPUCTL" audit verify --strict "$A/audit.log" >/dev/null || fail "verify --strict of a complete log"
"$TPUCTL" --help | grep -q "audit verify" || fail "tpuctl --help does not list audit verify"

# ---- 2. tamper: flip one byte in the middle ----
cp "$A/audit.log" "$WORK/tampered.log"
mid=$(( $(wc -l <"$WORK/tampered.log") / 2 ))
$PY - "$WORK/tampered.log" "$mid" <<'EOF'
import sys
p, line = sys.argv[1], int(sys.argv[2])
lines = open(p, "rb").read().split(b"\n")
l = bytearray(lines[line - 1])
i = l.index(b'"client":"') + 12  # a digit of the peer address
l[i] = ord("7") if l[i] != ord("7") else ord("8")
lines[line - 1] = bytes(l)
open(p, "wb").write(b"\n".join(lines))
EOF
out=$("$TPUCTL" audit verify "$WORK/tampered.log" 2>&1)
rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "line $mid" && ok "tamper caught: $out" ||
  fail "tamper at line $mid not named ($rc): $out"
$PY "$VERIFY_PY" "$WORK/tampered.log" >/dev/null && fail "audit_verify.py missed the tamper"

# ---- 3. SIGHUP rotation keeps the chain ----
start --audit-log "$A/audit.log"
[ "$(http_infer r-1)" = 200 ] || fail "infer before SIGHUP"
kill -HUP "$PID"
for _ in $(seq 1 50); do ls "$A"/audit.log.0* >/dev/null 2>&1 && break; sleep 0.1; done
[ "$(http_infer r-2)" = 200 ] || fail "infer after SIGHUP"
stop
rotated=$(ls "$A"/audit.log.0* 2>/dev/null)
[ "$(echo "$rotated" | wc -w)" = 1 ] || fail "expected one rotated file, got: $rotated"
head -1 "$A/audit.log" | grep -q '"kind":"rotate"' || fail "the new file does not start with rotate"
out=$("$TPUCTL" audit verify $rotated "$A/audit.log")
[ $? = 0 ] && ok "rotation: $out" || fail "verify over rotated + current: $out"
$PY "$VERIFY_PY" $rotated "$A/audit.log" >/dev/null || fail "audit_verify.py over rotated files"
"$TPUCTL" audit verify "$A/audit.log" $rotated >/dev/null && fail "verify accepted files out of order"

# ---- 4. kill -9 under load with --audit-fsync always ----
C=$WORK/c
mkdir -p "$C"
start --audit-log "$C/audit.log" --audit-fsync always
$PY - "$HPORT" "$WORK/acked" <<'EOF' &
# 8 keep-alive HTTP clients; each appends the id of every 200 response to its file, until the
# server dies.
import http.client, json, sys, threading
port, out = int(sys.argv[1]), sys.argv[2]
def client(k):
    f = open(f"{out}.{k}", "w", buffering=1)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    i = 0
    while True:
        rid = f"k{k}-{i}"
        body = json.dumps({"id": rid, "inputs": [{"name": "x", "shape": [1, 64],
                           "datatype": "FP32", "data": [i % 7] * 64}]})
        try:
            c.request("POST", "/v2/models/digits/infer", body)
            r = c.getresponse()
            data = r.read()
        except Exception:
            return
        if r.status == 200 and json.loads(data).get("id") == rid:
            f.write(rid + "\n")
        i += 1
ts = [threading.Thread(target=client, args=(k,)) for k in range(8)]
for t in ts: t.start()
for t in ts: t.join()
EOF
LOADPID=$!
sleep 2
kill -9 "$PID"
wait "$PID" 2>/dev/null
PID=
wait $LOADPID
cat "$WORK"/acked.* >"$WORK/acked"
nack=$(wc -l <"$WORK/acked")
[ "$nack" -gt 50 ] || fail "only $nack requests acknowledged before the kill"
$PY - "$C/audit.log" "$WORK/acked" <<'EOF' || fail "acknowledged requests missing from the log"
import json, sys
ids = set()
for l in open(sys.argv[1], "rb").read().split(b"\n"):
    try:
        r = json.loads(l)
    except ValueError:
        continue  # a torn last line
    if r.get("status") == "OK":
        ids.add(r.get("request_id"))
acked = [l.strip() for l in open(sys.argv[2]) if l.strip()]
missing = [a for a in acked if a not in ids]
assert not missing, f"{len(missing)} of {len(acked)} acknowledged ids have no record: {missing[:5]}"
print(f"crash: all {len(acked)} acknowledged requests have their record")
EOF
out=$("$TPUCTL" audit verify --allow-torn "$C/audit.log")
[ $? = 0 ] && ok "after kill -9: $out" || fail "verify --allow-torn after kill -9: $out"
start --audit-log "$C/audit.log" --audit-fsync always
[ "$(http_infer after-crash)" = 200 ] || fail "infer after restart"
stop
out=$("$TPUCTL" audit verify "$C/audit.log")
[ $? = 0 ] && ok "chain continues after restart: $out" || fail "verify after restart: $out"
$PY "$VERIFY_PY" "$C/audit.log" >/dev/null || fail "audit_verify.py after restart"
grep -q '"request_id":"after-crash"' "$C/audit.log" || fail "no record after restart"

# ---- 5. disk full: fail-closed, then recovery ----
D=$WORK/d
mkdir -p "$D"
if mount -t tmpfs -o size=512k tmpfs "$D" 2>/dev/null; then
  MNT=$D
  start --audit-log "$D/audit.log" --audit-head none
  [ "$(http_infer full-0)" = 200 ] || fail "infer before the disk fills"
  dd if=/dev/zero of="$D/filler" bs=4k 2>/dev/null # until ENOSPC
  full() { :; }
  free_space() { rm -f "$D/filler"; }
  how="tmpfs of 512 KiB"
else
  start --audit-log "$D/audit.log" --audit-head none
  [ "$(http_infer full-0)" = 200 ] || fail "infer before the limit"
  prlimit --pid "$PID" --fsize=$(( $(stat -c %s "$D/audit.log") + 10 )) ||
    { echo "cannot set a file-size limit"; exit 1; }
  free_space() { prlimit --pid "$PID" --fsize=unlimited; }
  how="file-size limit (prlimit)"
fi
# Requests until one's record cannot be written (the file's last page may still have room):
# that answer waits (fail-closed) and is released on recovery.
FIRST=
for i in $(seq 1 100); do
  curl -s -o "$WORK/first" -w '%{http_code}' -m 30 -X POST --data "$(body "full-1-$i")" \
    "$URL/v2/models/digits/infer" >"$WORK/first.code" &
  FIRST=$!
  HELD=full-1-$i
  # Held (the log is failing, as the metrics say) or answered; never judged by a timer alone,
  # since a loaded machine may take long to answer.
  held=0
  for _ in $(seq 1 300); do
    kill -0 $FIRST 2>/dev/null || break
    if curl -s "$URL/metrics" | grep -q "^tpud_audit_failed 1$"; then held=1; break; fi
    sleep 0.1
  done
  [ $held = 1 ] && break
  wait $FIRST
  [ "$(cat "$WORK/first.code")" = 200 ] || fail "request before the failure: $(cat "$WORK/first.code")"
  FIRST=
done
[ -n "$FIRST" ] || fail "the log never failed on a full disk"
code=$(http_infer full-2)
[ "$code" = 503 ] && grep -q "audit log cannot be written" "$WORK/resp" &&
  ok "disk full ($how): 503 $(cat "$WORK/resp")" || fail "disk full: status $code: $(cat "$WORK/resp")"
"$TPUCTL" --addr 127.0.0.1:$NPORT infer digits --data "$(body full-3)" >/dev/null 2>"$WORK/err" &&
  fail "native infer succeeded while the log is full" ||
  grep -q "UNAVAILABLE\|audit log cannot be written" "$WORK/err" || fail "native error: $(cat "$WORK/err")"
curl -s "$URL/metrics" | grep -q "^tpud_audit_failed 1$" || fail "tpud_audit_failed is not 1"
free_space
wait $FIRST
[ "$(cat "$WORK/first.code")" = 200 ] && ok "the held response was released after recovery" ||
  fail "held request: $(cat "$WORK/first.code") $(cat "$WORK/first")"
for _ in $(seq 1 50); do
  curl -s "$URL/metrics" | grep -q "^tpud_audit_failed 0$" && break
  sleep 0.1
done
[ "$(http_infer full-4)" = 200 ] && ok "recovered: requests succeed again" ||
  fail "after recovery: $(cat "$WORK/resp")"
stop
out=$("$TPUCTL" audit verify "$D/audit.log")
[ $? = 0 ] && ok "after disk full: $out" || fail "verify after disk full: $out"
$PY "$VERIFY_PY" "$D/audit.log" >/dev/null || fail "audit_verify.py after disk full"
grep -q '"request_id":"'$HELD'","client":"[^"]*","model":"digits","version":"1","input_sha256":"[0-9a-f]\{64\}","output_sha256":"[0-9a-f]\{64\}","status":"OK"' \
  "$D/audit.log" || fail "the held request's record is missing"

# ---- 6. rm of the live log under load (--audit-fsync always), no SIGHUP ----
# Every response is released only after its record is in the file at the path: the records
# of the group written into the unlinked file are written again into a new file there, which
# starts with a gap record naming the seqs that went with the deleted one.
cat >"$WORK/load.py" <<'EOF'
# load.py PORT OUT STOPFILE: 4 keep-alive HTTP clients; each appends the id of every 200
# response to OUT.<k> until STOPFILE exists or the server goes away.
import http.client, json, os, sys, threading
port, out, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def client(k):
    f = open(f"{out}.{k}", "w", buffering=1)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    i = 0
    while not os.path.exists(stop):
        rid = f"{os.path.basename(out)}{k}-{i}"
        body = json.dumps({"id": rid, "inputs": [{"name": "x", "shape": [1, 64],
                           "datatype": "FP32", "data": [i % 5] * 64}]})
        try:
            c.request("POST", "/v2/models/digits/infer", body)
            r = c.getresponse()
            data = r.read()
        except Exception:
            return
        if r.status == 200 and json.loads(data).get("id") == rid:
            f.write(rid + "\n")
        i += 1
ts = [threading.Thread(target=client, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
EOF
# ids LOG...: the request ids of OK request records in the files, one a line.
ids() { cat "$@" | $PY -c "import json,sys
for l in sys.stdin:
    try: r = json.loads(l)
    except ValueError: continue
    if r.get('kind') == 'request' and r.get('status') == 'OK': print(r['request_id'])"; }
E=$WORK/e
mkdir -p "$E"
start --audit-log "$E/audit.log" --audit-fsync always
rm -f "$WORK/stop6"
$PY "$WORK/load.py" "$HPORT" "$WORK/rm" "$WORK/stop6" &
LOADPID=$!
sleep 1
rm "$E/audit.log"
sleep 1
touch "$WORK/stop6"
wait $LOADPID
curl -s "$URL/metrics" >"$WORK/metrics6"
stop
cat "$WORK"/rm.? >"$WORK/acked6"
nack=$(wc -l <"$WORK/acked6")
[ "$nack" -gt 20 ] || fail "rm under load: only $nack requests acknowledged"
if [ ! -s "$E/audit.log" ]; then
  fail "rm under load: no log at the path afterwards: the records went into the deleted file"
else
  head -1 "$E/audit.log" | grep -q '"kind":"gap".*"message":"seq 1\.\.[0-9]* are not in the log: ' ||
    fail "rm under load: the new file does not start with a gap record: $(head -c 300 "$E/audit.log")"
  gap_last=$(head -1 "$E/audit.log" | sed -n 's/.*"message":"seq 1\.\.\([0-9]*\) are not.*/\1/p')
  ids "$E/audit.log" | sort >"$WORK/logged6"
  # Acknowledged requests not in the new file must be among the seqs the gap record names.
  nmiss=$(sort "$WORK/acked6" | comm -23 - "$WORK/logged6" | wc -l)
  nafter=$(sort "$WORK/acked6" | comm -12 - "$WORK/logged6" | wc -l)
  [ -n "$gap_last" ] && [ "$nmiss" -le "$gap_last" ] && [ "$nafter" -gt 0 ] &&
    ok "rm under load: $nack acknowledged, $nafter in the new file, $nmiss among seq 1..$gap_last (the gap record)" ||
    fail "rm under load: $nmiss acknowledged requests missing, gap covers ${gap_last:-?}, $nafter after"
  out=$("$TPUCTL" audit verify "$E/audit.log")
  [ $? = 0 ] && echo "$out" | grep -q "^WARNING: .*gap: seq 1\.\.$gap_last are not in the log" &&
    echo "$out" | grep -q "records missing as 1 gap record says" &&
    ok "verify after rm: $(echo "$out" | tail -1)" || fail "verify after rm: $out"
  $PY "$VERIFY_PY" "$E/audit.log" >/dev/null 2>&1 || fail "audit_verify.py after rm"
fi
grep -q "^tpud_audit_files_deleted_total 1$" "$WORK/metrics6" || fail "tpud_audit_files_deleted_total is not 1"
grep -q "audit log $E/audit.log: the file was deleted while open: seq 1\.\." "$TPUD_LOG" ||
  fail "no error line for the deleted log"

# ---- 7. rm, requests, then SIGHUP (the issue's sequence) ----
start --audit-log "$E/audit7.log"
for i in 1 2 3; do [ "$(http_infer before-rm-$i)" = 200 ] || fail "infer before-rm-$i"; done
rm "$E/audit7.log"
for i in 1 2 3 4 5; do [ "$(http_infer after-rm-$i)" = 200 ] || fail "infer after-rm-$i"; done
kill -HUP "$PID"
for _ in $(seq 1 30); do grep -q "SIGHUP" "$TPUD_LOG" && break; sleep 0.1; done
for i in 1 2 3; do [ "$(http_infer after-hup-$i)" = 200 ] || fail "infer after-hup-$i"; done
stop
lost=
for i in 1 2 3 4 5; do grep -q "\"request_id\":\"after-rm-$i\"" "$E/audit7.log" 2>/dev/null || lost="$lost after-rm-$i"; done
for i in 1 2 3; do grep -q "\"request_id\":\"after-hup-$i\"" "$E/audit7.log" 2>/dev/null || lost="$lost after-hup-$i"; done
[ -z "$lost" ] && ok "rm then SIGHUP: every request answered after the rm is in the log" ||
  fail "rm then SIGHUP: answered but not in the log:$lost"
ls "$E"/audit7.log.0* >/dev/null 2>&1 && fail "rm then SIGHUP: a rotated file appeared: $(ls "$E")"
out=$("$TPUCTL" audit verify "$E/audit7.log" 2>&1)
rc=$?
if [ $rc = 0 ] && ! echo "$out" | grep -q "^WARNING: .*gap: seq 1\.\."; then
  fail "rm then SIGHUP: verify says OK with no gap reported: $out"
else
  [ $rc = 0 ] && ok "rm then SIGHUP: $(echo "$out" | head -1)" || fail "verify after rm + SIGHUP ($rc): $out"
fi
$PY "$VERIFY_PY" "$E/audit7.log" >/dev/null 2>&1 || fail "audit_verify.py after rm + SIGHUP"
out=$("$TPUCTL" audit verify --strict "$E/audit7.log" 2>&1)
rc=$?
[ $rc = 3 ] && echo "$out" | grep -q "^INCOMPLETE (--strict): 1 record states" &&
  ok "rm then SIGHUP: --strict exits 3 (intact, incomplete)" || fail "verify --strict ($rc): $out"

# ---- 8. mv of the log aside (logrotate without copytruncate), then SIGHUP ----
# The records stay whole across the two files, once each; the new file alone starts
# mid-sequence, which verify reports unless told --partial.
start --audit-log "$E/audit8.log" --audit-fsync always
for i in 1 2 3; do [ "$(http_infer mv-a-$i)" = 200 ] || fail "infer mv-a-$i"; done
mv "$E/audit8.log" "$E/aside8.log"
for i in 1 2 3 4; do [ "$(http_infer mv-b-$i)" = 200 ] || fail "infer mv-b-$i"; done
kill -HUP "$PID"
for _ in $(seq 1 30); do grep -q "SIGHUP" "$TPUD_LOG" && break; sleep 0.1; done
for i in 1 2 3; do [ "$(http_infer mv-c-$i)" = 200 ] || fail "infer mv-c-$i"; done
stop
ls "$E"/audit8.log.0* >/dev/null 2>&1 && fail "mv: the SIGHUP after the move rotated again: $(ls "$E")"
dups=$(ids "$E/aside8.log" "$E/audit8.log" | sort | uniq -d)
want="mv-a-1 mv-a-2 mv-a-3 mv-b-1 mv-b-2 mv-b-3 mv-b-4 mv-c-1 mv-c-2 mv-c-3"
have=$(ids "$E/aside8.log" "$E/audit8.log" | grep '^mv-' | sort | tr '\n' ' ')
[ -z "$dups" ] && [ "$have" = "$want " ] && ok "mv aside: each request once across the two files" ||
  fail "mv aside: ids '$have' duplicates '$dups'"
out=$("$TPUCTL" audit verify "$E/aside8.log" "$E/audit8.log")
[ $? = 0 ] && ok "mv aside: both files verify: $out" || fail "mv aside: verify both: $out"
out=$("$TPUCTL" audit verify "$E/audit8.log")
[ $? = 1 ] && echo "$out" | grep -q "^FAULT: .*line 1: missing: the log given starts at seq" &&
  ok "mv aside: the new file alone is reported: $out" ||
  fail "mv aside: the new file alone (starting mid-sequence) was not reported: $out"
"$TPUCTL" audit verify --partial "$E/audit8.log" | grep -q "^OK: .*starts at seq" ||
  fail "mv aside: verify --partial of the new file"
$PY "$VERIFY_PY" "$E/aside8.log" "$E/audit8.log" >/dev/null || fail "audit_verify.py over both files"
$PY "$VERIFY_PY" "$E/audit8.log" >/dev/null 2>&1 && fail "audit_verify.py accepted the new file alone"
$PY "$VERIFY_PY" --partial "$E/audit8.log" >/dev/null || fail "audit_verify.py --partial"

# ---- 9. fail-open on a full disk: the closing line counts every record not written ----
F=$WORK/f
mkdir -p "$F"
if mount -t tmpfs -o size=64k tmpfs "$F" 2>/dev/null; then
  MNT2=$F
  start --audit-log "$F/audit.log" --audit-head none --audit-fail-open --drain-timeout-s 1
  [ "$(http_infer open-0)" = 200 ] || fail "fail-open: infer before the disk fills"
  dd if=/dev/zero of="$F/filler" bs=1k 2>/dev/null # until ENOSPC
  answered=0
  for i in $(seq 1 40); do [ "$(http_infer open-$i)" = 200 ] && answered=$((answered + 1)); done
  curl -s "$URL/metrics" >"$WORK/metrics9"
  stop
  [ $answered = 40 ] || fail "fail-open: only $answered of 40 answered"
  ondisk=$(ids "$F/audit.log" | grep -c '^open-[1-9]')
  stopped=$(grep -c '"kind":"stop"' "$F/audit.log")
  want=$((answered - ondisk + 1 - stopped)) # and the stop record, if it did not fit
  said=$(sed -n 's/.*audit log closed: .*, \([0-9]*\) lost,.*/\1/p' "$TPUD_LOG")
  pending=$(sed -n 's/^tpud_audit_records_pending \([0-9]*\)$/\1/p' "$WORK/metrics9")
  [ "$said" = "$want" ] && [ "$want" -gt 0 ] &&
    ok "fail-open, disk full: $answered answered, $ondisk on disk, closing line says $said lost" ||
    fail "fail-open, disk full: $answered answered, $ondisk on disk, stop on disk $stopped: closing line says '${said:-?}' lost, expected $want"
  [ "$pending" = $((answered - ondisk)) ] || fail "tpud_audit_records_pending is '$pending', expected $((answered - ondisk))"
  grep -q "ERROR audit log closed: .* $said lost" "$TPUD_LOG" || fail "the closing line is not an ERROR"
  "$TPUCTL" audit verify "$F/audit.log" >/dev/null || fail "verify after fail-open on a full disk"

  # ---- 10. the disk full with the log itself; rm of the log frees it ----
  # Fail-closed: a held response waits; rm of the live log cannot free the space while tpud
  # holds the file open, so the retry finds it deleted, starts a new file (gap record) and
  # the held record is written there.
  rm -f "$F/filler" "$F/audit.log"
  start --audit-log "$F/audit.log" --audit-head none
  [ "$(http_infer rmfull-0)" = 200 ] || fail "rm on a full disk: first infer"
  avail=$(df -k --output=avail "$F" | tail -1)
  [ "$avail" -gt 6 ] && dd if=/dev/zero of="$F/filler" bs=1k count=$((avail - 6)) 2>/dev/null
  HELD=
  for i in $(seq 1 100); do
    curl -s -o "$WORK/held" -w '%{http_code}' -m 30 -X POST --data "$(body "rmfull-$i")" \
      "$URL/v2/models/digits/infer" >"$WORK/held.code" &
    HELD=$!
    HELD_ID=rmfull-$i
    held=0
    for _ in $(seq 1 300); do
      kill -0 $HELD 2>/dev/null || break
      if curl -s "$URL/metrics" | grep -q "^tpud_audit_failed 1$"; then held=1; break; fi
      sleep 0.1
    done
    [ $held = 1 ] && break
    wait $HELD
    HELD=
  done
  if [ -z "$HELD" ]; then
    fail "rm on a full disk: the log never filled"
  else
    rm "$F/audit.log"
    wait $HELD
    [ "$(cat "$WORK/held.code")" = 200 ] && ok "rm on a full disk: the held response was released" ||
      fail "rm on a full disk: held request: $(cat "$WORK/held.code") $(cat "$WORK/held")"
    [ "$(http_infer rmfull-after)" = 200 ] || fail "rm on a full disk: infer afterwards: $(cat "$WORK/resp")"
    stop
    grep -q "\"request_id\":\"$HELD_ID\"" "$F/audit.log" 2>/dev/null &&
      grep -q '"request_id":"rmfull-after"' "$F/audit.log" ||
      fail "rm on a full disk: the held or later record is not in the new log"
    out=$("$TPUCTL" audit verify "$F/audit.log" 2>&1)
    [ $? = 0 ] && echo "$out" | grep -q "^WARNING: .*gap: seq 1\.\." &&
      ok "rm on a full disk: $(echo "$out" | tail -1)" || fail "verify after rm on a full disk: $out"
  fi
  [ -n "$PID" ] && { kill -9 "$PID"; wait "$PID" 2>/dev/null; PID=; }
  umount "$F" && MNT2=
else
  echo "skipped: sections 9 and 10 need a tmpfs mount (not permitted here)"
fi

[ $FAIL = 0 ] && echo "PASS: test_audit" || echo "FAILED: test_audit"
exit $FAIL
