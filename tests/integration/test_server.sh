#!/bin/bash
# test_server.sh - the real tpud over loopback: every scenario of tpud_itest, then a graceful
# SIGTERM whose exit status and logged counters are checked (batches formed under concurrency).
# $1 = build directory, $2 = source directory. Set TPUD_WRAP (e.g. "valgrind -q") to wrap tpud.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
ITEST=$BUILD/tests/integration/tpud_itest
[ -x "$TPUD" ] && [ -x "$ITEST" ] || { echo "tpud or tpud_itest not built"; exit 1; }
[ -f "$SRC/models/digits/1/model.json" ] || { echo "models/digits/1 missing"; exit 1; }

WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/digits" "$WORK/repo/broken/1" "$WORK/repo/broken/notaversion"
cp -r "$SRC/models/digits/1" "$WORK/repo/digits/1"
echo '{"inputs": []}' > "$WORK/repo/broken/1/model.json"
FAIL=0

start() { # start ARGS...: starts tpud, sets PID and PORT
  LOG=$WORK/tpud.$RANDOM.log
  ${TPUD_WRAP:-} "$TPUD" --models "$WORK/repo" --port 0 "$@" 2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID native || exit 1
  PORT=$NPORT
}

stop() { # stop: SIGTERM, expect exit 0
  kill -TERM $PID
  wait $PID
  local rc=$?
  [ $rc -eq 0 ] || { echo "tpud exited $rc after SIGTERM"; FAIL=1; }
  grep -q "tpud stopped" "$LOG" || { echo "no 'tpud stopped' line"; FAIL=1; }
}

run() { # run SCENARIO
  if ! "$ITEST" "$PORT" "$WORK/repo/digits/1" "$1"; then
    echo "scenario $1 failed"; FAIL=1
  fi
}

# The concurrency scenario pipelines 64 x 40 requests of 1-4 rows (up to 10240 rows) at once: the
# queue must hold them all, or a slow build (ASan, valgrind) sees RESOURCE_EXHAUSTED, which is the
# overload scenario's subject, not this one's.
start --io-threads 2 --queue-rows 16384 ${TPUD_THREADS:+--threads $TPUD_THREADS}
grep -q "model 'broken' version 1: load failed" "$LOG" || { echo "broken model not reported"; FAIL=1; }
for s in basic badframes deadline disconnect latency concurrency; do run $s; done
stop
# Batches formed under concurrency: more rows than engine calls.
line=$(grep "stats: model 'digits' version 1:" "$LOG" | tail -1)
echo "$line"
batches=$(echo "$line" | sed -n 's/.* batches=\([0-9]*\).*/\1/p')
rows=$(echo "$line" | sed -n 's/.* rows=\([0-9]*\).*/\1/p')
if [ -z "$batches" ] || [ "$batches" -eq 0 ] || [ $((rows * 10 / batches)) -lt 15 ]; then
  echo "batching did not form batches (rows=$rows batches=$batches)"; FAIL=1
fi
grep -E "ERROR" "$LOG" | grep -v "broken" && { echo "unexpected ERROR lines"; FAIL=1; }

start --queue-rows 64 --threads 1
run overload
stop

# Bad options: exit 2 with a message.
"$TPUD" --no-such-flag 2>"$WORK/err"; rc=$?
[ $rc -eq 2 ] && grep -q "unknown option" "$WORK/err" || { echo "bad flag: rc=$rc"; FAIL=1; }
"$TPUD" --help | grep -q -- "--max-connections" || { echo "--help incomplete"; FAIL=1; }

[ $FAIL -eq 0 ] && echo "test_server: ok"
exit $FAIL
