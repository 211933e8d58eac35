#!/bin/bash
# soak.sh - tpud under mixed traffic for a long time (default 10 minutes), with reloads and
# SIGHUPs, sampling its memory and descriptors; fails unless they end flat.
#
# usage: bench/soak.sh [BUILD_DIR] [SRC_DIR]
# env:   SOAK_SECONDS (default 600), SAMPLE_S (default 5), RATE (open-loop req/s per traffic
#        stream, default 300), OUT (directory for samples.csv and the logs; default a temp dir,
#        kept and printed)
#
# Traffic, all at once, open loop so the load is the same from start to end:
#   - tpubench native and HTTP on model 'digits' (RATE req/s each, 8 connections);
#   - h2load gRPC on 'digits' (RATE req/s; when h2load is installed: deploy/deps.sh bench);
#   - a tpuctl MatMul every second and a tpuctl infer with a bad input (answered
#     INVALID_ARGUMENT) every second;
#   - every 10 s: SIGHUP (rescan the repository, rotate the audit log, reload tokens), and in
#     turn: a new version of 'digits' copied into the repository (picked up by the 1 s poll and
#     swapped in under load), that version removed again, 'matmul' unloaded and loaded again
#     with tpuctl;
#   - a fresh connection churn: 20 short tpuctl calls every 10 s.
# Samples (every SAMPLE_S): VmRSS, VmHWM, open fds, threads, the audit files' bytes.
# Verdict ("flat"), after the traffic stops:
#   - RSS: the median of the last fifth of the run is within 10% (or 2 MiB, whichever is
#     larger) of the median of the second fifth (the first fifth is warm-up: allocator arenas,
#     plan buffers, batcher queues reaching their working size);
#   - fds: back to the idle count measured before the traffic (+-2), once the clients are gone;
#   - no traffic errors (the bad inputs are expected answers, not errors), the server's PID
#     unchanged, and the audit chain verifies across every rotated file.
set -u
BUILD=$(cd "${1:-build}" && pwd)
SRC=$(cd "${2:-.}" && pwd)
TPUD=$BUILD/server/tpud
CTL=$BUILD/client/tpuctl
BENCH=$BUILD/client/tpubench
SOAK_SECONDS=${SOAK_SECONDS:-600}
SAMPLE_S=${SAMPLE_S:-5}
RATE=${RATE:-300}
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
for b in "$TPUD" "$CTL" "$BENCH"; do [ -x "$b" ] || { echo "$b not built" >&2; exit 1; }; done
H2LOAD=$(command -v h2load || true)
[ -n "$H2LOAD" ] || echo "note: h2load missing (deploy/deps.sh bench): no gRPC traffic" >&2

OUT=${OUT:-$(mktemp -d /tmp/tpud-soak.XXXXXX)}
mkdir -p "$OUT/repo"
cp -r "$SRC/models/digits" "$SRC/models/matmul" "$OUT/repo/"
PID=
CLIENTS=()
cleanup() {
  for p in "${CLIENTS[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$PID" ] && kill "$PID" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$TPUD" --models "$OUT/repo" --port 0 --http-port 0 --poll-seconds 1 \
  --audit-log "$OUT/audit.log" --log-level info 2>"$OUT/tpud.log" &
PID=$!
. "$SRC/tests/integration/lib.sh" # tpud_ports
tpud_ports "$OUT/tpud.log" $PID || exit 1
ctl() { "$CTL" --addr 127.0.0.1:$NPORT "$@"; }
sample() { # t phase
  local rss hwm fds thr audit
  rss=$(awk '/^VmRSS/{print $2}' /proc/$PID/status)
  hwm=$(awk '/^VmHWM/{print $2}' /proc/$PID/status)
  fds=$(ls /proc/$PID/fd | wc -l)
  thr=$(awk '/^Threads/{print $2}' /proc/$PID/status)
  audit=$(cat "$OUT"/audit.log* 2>/dev/null | wc -c)
  echo "$1,$2,$rss,$hwm,$fds,$thr,$audit" >> "$OUT/samples.csv"
}
echo "t_s,phase,rss_kb,hwm_kb,fds,threads,audit_bytes" > "$OUT/samples.csv"
sleep 1
IDLE_FDS=$(ls /proc/$PID/fd | wc -l)
sample 0 idle
echo "# $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs;" \
  "soak ${SOAK_SECONDS}s at ${RATE} req/s per stream; output in $OUT"

# ---- traffic ----
"$BENCH" --protocol native --addr 127.0.0.1:$NPORT --model digits -c 8 --rate "$RATE" \
  -d "$SOAK_SECONDS" --warmup 0 --json > "$OUT/native.json" 2>"$OUT/native.err" &
CLIENTS+=($!)
"$BENCH" --protocol http --addr 127.0.0.1:$HPORT --model digits -c 8 --rate "$RATE" \
  -d "$SOAK_SECONDS" --warmup 0 --json > "$OUT/http.json" 2>"$OUT/http.err" &
CLIENTS+=($!)
if [ -n "$H2LOAD" ]; then
  # The gRPC body: a 5-byte prefix and a ModelInferRequest for one row of digits (64 FP32).
  $PY - "$OUT/grpc.body" <<'PYEOF'
import random, struct, sys
def varint(n):
    out = b""
    while True:
        b = n & 0x7F; n >>= 7
        if n: out += bytes([b | 0x80])
        else: return out + bytes([b])
def field(num, payload): return varint(num << 3 | 2) + varint(len(payload)) + payload
tensor = field(1, b"x") + field(2, b"FP32") + field(3, varint(1) + varint(64))
msg = field(1, b"digits") + field(5, tensor) + field(7, struct.pack("<64f", *[random.uniform(0, 16) for _ in range(64)]))
open(sys.argv[1], "wb").write(b"\0" + struct.pack(">I", len(msg)) + msg)
PYEOF
  # --rps paces each of the 8 connections (h2load's -r is connections per second instead).
  "$H2LOAD" -c 8 -m 1 --rps $((RATE / 8)) -D "$SOAK_SECONDS" -d "$OUT/grpc.body" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$NPORT/inference.GRPCInferenceService/ModelInfer" > "$OUT/grpc.out" 2>&1 &
  CLIENTS+=($!)
fi

MM='{"a":{"shape":[8,16],"datatype":"FP32","data":['$(seq -s, 1 128)']},"b":{"shape":[16,4],"datatype":"FP32","data":['$(seq -s, 1 64)']}}'
BAD='{"inputs":[{"name":"x","shape":[1,63],"datatype":"FP32","data":['$(seq -s, 1 63)']}]}'
ADMIN_ERR=0
start=$(date +%s)
next_sample=$SAMPLE_S
tick=0
while :; do
  now=$(( $(date +%s) - start ))
  [ "$now" -ge "$SOAK_SECONDS" ] && break
  kill -0 $PID 2>/dev/null || { echo "FAIL: tpud died"; tail -20 "$OUT/tpud.log"; exit 1; }
  ctl matmul --data "$MM" >/dev/null 2>&1 || { ADMIN_ERR=$((ADMIN_ERR + 1)); echo "matmul failed at ${now}s" >> "$OUT/admin.err"; }
  ctl infer digits --data "$BAD" >/dev/null 2>"$OUT/bad.err"
  grep -q INVALID_ARGUMENT "$OUT/bad.err" || { ADMIN_ERR=$((ADMIN_ERR + 1)); echo "bad input at ${now}s: $(cat "$OUT/bad.err")" >> "$OUT/admin.err"; }
  if [ $((tick % 10)) -eq 0 ]; then
    kill -HUP $PID
    for _ in $(seq 1 20); do ctl health >/dev/null 2>&1 || ADMIN_ERR=$((ADMIN_ERR + 1)); done
    case $(( (tick / 10) % 4 )) in
      0) cp -r "$OUT/repo/digits/1" "$OUT/repo/digits/.v2" && mv "$OUT/repo/digits/.v2" "$OUT/repo/digits/2" ;;
      1) rm -rf "$OUT/repo/digits/2" ;;
      2) ctl unload matmul >/dev/null 2>>"$OUT/admin.err" || ADMIN_ERR=$((ADMIN_ERR + 1)) ;;
      3) ctl load matmul >/dev/null 2>>"$OUT/admin.err" || ADMIN_ERR=$((ADMIN_ERR + 1)) ;;
    esac
  fi
  if [ "$now" -ge "$next_sample" ]; then
    sample "$now" load
    next_sample=$((next_sample + SAMPLE_S))
  fi
  tick=$((tick + 1))
  sleep 1
done
for p in "${CLIENTS[@]}"; do wait "$p"; done
CLIENTS=()
sleep 2
sample "$SOAK_SECONDS" after
END_FDS=$(ls /proc/$PID/fd | wc -l)
kill -0 $PID 2>/dev/null || { echo "FAIL: tpud died"; exit 1; }
kill -TERM $PID
wait $PID
RC=$?
PID=

# ---- verdict ----
$PY - "$OUT" "$IDLE_FDS" "$END_FDS" "$ADMIN_ERR" "$RC" <<'PYEOF'
import csv, json, re, statistics, sys
out, idle_fds, end_fds, admin_err, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [r for r in csv.DictReader(open(out + "/samples.csv")) if r["phase"] == "load"]
fail = []
if len(rows) < 10:
    fail.append("only %d samples under load" % len(rows))
else:
    n = len(rows); fifth = n // 5
    early = statistics.median(int(r["rss_kb"]) for r in rows[fifth:2 * fifth])
    late = statistics.median(int(r["rss_kb"]) for r in rows[n - fifth:])
    allow = max(0.10 * early, 2048)
    print("RSS: second fifth median %.1f MiB, last fifth median %.1f MiB (allowed growth %.1f MiB);"
          " peak %.1f MiB" % (early / 1024, late / 1024, allow / 1024,
                              max(int(r["hwm_kb"]) for r in rows) / 1024))
    if late - early > allow: fail.append("RSS grew %.1f MiB" % ((late - early) / 1024))
    print("fds under load: %d..%d; threads %s" % (min(int(r["fds"]) for r in rows),
          max(int(r["fds"]) for r in rows), sorted(set(r["threads"] for r in rows))))
print("fds idle %d, after the traffic %d" % (idle_fds, end_fds))
if abs(end_fds - idle_fds) > 2: fail.append("fds %d after vs %d idle" % (end_fds, idle_fds))
for proto in ("native", "http"):
    try:
        j = json.load(open("%s/%s.json" % (out, proto)))
        print("%-6s %d requests, %d errors, p50 %.3f ms, p99 %.3f ms" % (proto, j.get("requests", 0),
              j.get("errors", 0), j["latency_ms"]["p50"], j["latency_ms"]["p99"]))
        if j.get("errors", 0): fail.append("%s: %d errors" % (proto, j["errors"]))
    except (OSError, ValueError, KeyError) as e:
        fail.append("%s: no result (%s)" % (proto, e))
try:
    g = open(out + "/grpc.out").read()
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", g)
    s = re.search(r"status codes: (\d+) 2xx", g)
    if m:
        print("grpc   %s requests, %s succeeded, %s failed, %s errored" % m.group(1, 3, 4, 5))
        if int(m.group(4)) or int(m.group(5)): fail.append("grpc: failures")
except OSError:
    pass
if admin_err: fail.append("%d admin/probe calls failed (see admin.err)" % admin_err)
if rc != 0: fail.append("tpud exited %d on SIGTERM" % rc)
print("verdict:", "flat" if not fail else "FAIL: " + "; ".join(fail))
sys.exit(1 if fail else 0)
PYEOF
V=$?
shopt -s nullglob
ROTATED=("$OUT"/audit.log.[0-9]*)
shopt -u nullglob
if "$CTL" audit verify "${ROTATED[@]}" "$OUT/audit.log" > "$OUT/verify.out" 2>&1; then
  echo "audit: $(head -1 "$OUT/verify.out")"
else
  echo "FAIL: audit verify: $(head -3 "$OUT/verify.out")"; V=1
fi
echo "samples: $OUT/samples.csv"
exit $V
