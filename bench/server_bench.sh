#!/bin/bash
# server_bench.sh - tpud end to end with tpubench: both protocols (native, http) at 1, 8 and 64
# connections, with the model's batching on and off ("off" = a temporary copy of the model with
# max_batch_size 1 and buckets [1]). Prints one table row per cell: the median over REPS runs of
# throughput, p50 and p99.
#
# usage: bench/server_bench.sh [BUILD_DIR] [SRC_DIR]
# env:   DUR (s, default 5), REPS (default 3), CONNS ("1 8 64"), PROTOS ("http native"),
#        MODES ("on off"), IO_THREADS (default 1), THREADS (default 1),
#        SERVER_CPUS / CLIENT_CPUS (taskset lists; default: no pinning), MODEL (default digits)
# Client and server share the machine: on a 2-core box the numbers include the client's cost.
# Measured 2026-11-29 (2 vCPUs shared with other builds, load average ~7: noisy; --threads 1
# --io-threads 1, no pinning; interleaved A/B, 3 s runs, digits, batching on):
#                        before (evhttp, fixed wait)     after (own HTTP/1.1, adaptive batcher)
#   http   1 conn        0.9-1.1k req/s  p50 0.71-0.80 ms  2.4-6.5k req/s  p50 0.06-0.18 ms
#   native 1 conn        1.0-1.2k req/s  p50 0.71-0.76 ms  1.4-3.9k req/s  p50 0.13-0.21 ms
#   http   64 conns      9.1-10.2k req/s p50 5.6-6.6 ms    12.8-14.2k req/s p50 3.8-4.0 ms
#   native 64 conns      19.9-25.1k req/s                  21.4-21.5k req/s (unchanged path; noise)
set -u
BUILD=${1:-build-fast}
SRC=${2:-.}
TPUD=$BUILD/server/tpud
BENCH=$BUILD/client/tpubench
DUR=${DUR:-5}
REPS=${REPS:-3}
CONNS=${CONNS:-"1 8 64"}
PROTOS=${PROTOS:-"http native"}
MODES=${MODES:-"on off"}
MODEL=${MODEL:-digits}
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
for b in "$TPUD" "$BENCH"; do [ -x "$b" ] || { echo "$b not built" >&2; exit 1; }; done
SPIN=; CPIN=
[ -n "${SERVER_CPUS:-}" ] && SPIN="taskset -c $SERVER_CPUS"
[ -n "${CLIENT_CPUS:-}" ] && CPIN="taskset -c $CLIENT_CPUS"

WORK=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT

start() { # start REPO: starts tpud on free ports; sets PID, HPORT, NPORT
  LOG=$WORK/tpud.log
  $SPIN "$TPUD" --models "$1" --port 0 --http-port 0 --io-threads "${IO_THREADS:-1}" \
    --threads "${THREADS:-1}" --poll-seconds 0 --log-level info 2>"$LOG" &
  PID=$!
  HPORT=; NPORT=
  for _ in $(seq 1 200); do
    HPORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) (http).*/\1/p' "$LOG")
    NPORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\) (native).*/\1/p' "$LOG")
    [ -n "$HPORT" ] && [ -n "$NPORT" ] && break
    sleep 0.1
  done
  [ -n "$HPORT" ] || { echo "tpud did not start:" >&2; cat "$LOG" >&2; exit 1; }
}
stop() { kill -TERM $PID; wait $PID; PID=; }


mkdir -p "$WORK/on" "$WORK/off/$MODEL"
cp -r "$SRC/models/$MODEL" "$WORK/on/$MODEL"
cp -r "$SRC/models/$MODEL/1" "$WORK/off/$MODEL/1"
$PY - "$WORK/off/$MODEL/1/model.json" <<'PYEOF'
import json, sys
p = sys.argv[1]; j = json.load(open(p))
j.setdefault("batching", {}).update({"max_batch_size": 1, "buckets": [1]})
json.dump(j, open(p, "w"), indent=1)
PYEOF

printf "%-8s %-8s %5s %12s %9s %9s\n" protocol batching conns "req/s" "p50 ms" "p99 ms"
for mode in $MODES; do
  start "$WORK/$mode"
  for proto in $PROTOS; do
    port=$HPORT; [ "$proto" = native ] && port=$NPORT
    for c in $CONNS; do
      : > "$WORK/runs"
      for _ in $(seq 1 "$REPS"); do
        $CPIN "$BENCH" --protocol "$proto" --addr 127.0.0.1:$port --model "$MODEL" --random-input \
          -c "$c" -d "$DUR" --warmup 1 --json >> "$WORK/runs" 2>/dev/null || echo '{"error":1}' >> "$WORK/runs"
        echo >> "$WORK/runs"
      done
      $PY - "$WORK/runs" "$proto" "$mode" "$c" <<'PYEOF'
import json, statistics, sys
runs = []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line: continue
    try: j = json.loads(line)
    except ValueError: continue
    if "throughput_rps" in j or "requests" in j: runs.append(j)
def med(f):
    v = [f(j) for j in runs]
    return statistics.median(v) if v else float("nan")
rps = med(lambda j: j.get("throughput_rps", j.get("rps", 0)))
p50 = med(lambda j: j["latency_ms"]["p50"]); p99 = med(lambda j: j["latency_ms"]["p99"])
err = sum(j.get("errors", 0) for j in runs)
print("%-8s %-8s %5s %12.0f %9.3f %9.3f%s" % (sys.argv[2], sys.argv[3], sys.argv[4], rps, p50, p99,
      "  (errors %d)" % err if err else ""))
PYEOF
    done
  done
  stop
done
