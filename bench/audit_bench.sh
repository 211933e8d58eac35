#!/bin/bash
# audit_bench.sh - the audit log's cost: tpud throughput with tpubench (native, 64 connections,
# closed loop) with the audit log off, on with --audit-fsync interval (the default), with
# --audit-fsync always, and with payload capture (interval plus --payload-dir: "capture", and
# plus --payload-key: "encrypted"). The servers run side by side (idle while another is
# measured) and are measured alternately, REPS rounds of DUR seconds, so drift hits every mode
# alike. Prints the median throughput of each mode and the ratios to "off" (issue 6: interval
# >= 90% of off; issue 21: capture >= 85% of off).
#
# usage: bench/audit_bench.sh [BUILD_DIR] [SRC_DIR]
# env:   DUR (s, default 5), REPS (default 3), CONNS (default 64), PROTO (default native),
#        LOGDIR (where the logs go; default a temporary directory on the same disk as /tmp)
# Client and server share the machine: on a 2-core box the numbers include the client's cost.
set -u
BUILD=${1:-build-aw}
SRC=${2:-.}
TPUD=$BUILD/server/tpud
BENCH=$BUILD/client/tpubench
DUR=${DUR:-5}
REPS=${REPS:-3}
CONNS=${CONNS:-64}
PROTO=${PROTO:-native}
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
for b in "$TPUD" "$BENCH"; do [ -x "$b" ] || { echo "$b not built" >&2; exit 1; }; done

WORK=$(mktemp -d)
LOGDIR=${LOGDIR:-$WORK}
declare -A PIDS PORTS
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT
MODES=${MODES:-off interval always capture encrypted}
openssl rand -hex 32 >"$WORK/payload.key"

for mode in $MODES; do
  log=$WORK/tpud.$mode.log
  args=()
  case $mode in
  interval | always) args=(--audit-log "$LOGDIR/audit.$mode.log" --audit-fsync $mode) ;;
  capture) args=(--audit-log "$LOGDIR/audit.$mode.log" --payload-dir "$LOGDIR/payload.$mode") ;;
  encrypted) args=(--audit-log "$LOGDIR/audit.$mode.log" --payload-dir "$LOGDIR/payload.$mode"
                   --payload-key "$WORK/payload.key") ;;
  esac
  "$TPUD" --models "$SRC/models" --port 0 --http-port 0 --poll-seconds 0 "${args[@]}" 2>"$log" &
  PIDS[$mode]=$!
  for _ in $(seq 1 300); do
    if [ $PROTO = http ]; then
      port=$(sed -n 's/.*tpud listening on 127\.0\.0\.1:\([0-9]*\) (http).*/\1/p' "$log")
    else
      port=$(sed -n 's/.*tpud listening on 127\.0\.0\.1:\([0-9]*\) (native).*/\1/p' "$log")
    fi
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "tpud ($mode) did not start:"; cat "$log"; exit 1; }
  PORTS[$mode]=$port
done

echo "audit log cost: tpubench --protocol $PROTO -c $CONNS, $REPS x ${DUR}s per mode, alternating"
for r in $(seq 1 "$REPS"); do
  for mode in $MODES; do
    "$BENCH" --addr 127.0.0.1:${PORTS[$mode]} --protocol $PROTO -c "$CONNS" -d "$DUR" \
      --warmup 1 --json >"$WORK/r.$mode.$r.json" 2>/dev/null ||
      echo "  (round $r, $mode: some requests failed)"
    $PY -c "import json,sys; j=json.load(open(sys.argv[1])); print(f'  round {sys.argv[2]} {sys.argv[3]:8s} {j[\"throughput_rps\"]:10.0f} req/s')" \
      "$WORK/r.$mode.$r.json" "$r" "$mode"
  done
done
$PY - "$WORK" "$REPS" "$MODES" <<'PYEOF'
import json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
med = {}
for mode in sys.argv[3].split():
    v = [json.load(open(f"{work}/r.{mode}.{r}.json"))["throughput_rps"] for r in range(1, reps + 1)]
    med[mode] = statistics.median(v)
print("median req/s:  " + "   ".join("%s %.0f" % (m, v) for m, v in med.items()))
print("ratio to off:  " + "   ".join("%s %.3f" % (m, v / med["off"]) for m, v in med.items() if m != "off")
      + ("   capture/interval %.3f" % (med["capture"] / med["interval"]) if "capture" in med and "interval" in med else "")
      + "   (goals: interval >= 0.90, capture >= 0.85)")
PYEOF
for mode in interval always capture encrypted; do
  [ -f "$LOGDIR/audit.$mode.log" ] && echo "audit.$mode.log: $(wc -l <"$LOGDIR/audit.$mode.log") records"
  [ -d "$LOGDIR/payload.$mode" ] && echo "payload.$mode: $(cat "$LOGDIR/payload.$mode"/payload.* | wc -c) bytes"
done
