#!/bin/bash
# test_invariance.sh - batch invariance through the real tpud (issue 21): every model kind
# (dense layers, ONNX graphs with embeddings and LayerNorm, XGBoost trees) in fp32, bf16 and int8,
# with buckets 1, 2, 5, 8, 13, 32, 64. Each row's answer alone is compared bit for bit with its
# answers in requests of every size up to 64 (every bucket, every position, beside random rows)
# and in concurrent requests the batcher merges; then a second tpud with two engine threads (the
# wide model's layers split between them) must give the same bits again (invariance.py).
# $1 = build directory, $2 = source directory.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
HELPER=$SRC/tests/integration/invariance.py
[ -x "$TPUD" ] || { echo "$TPUD not built"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import numpy' 2>/dev/null || { echo "python3-numpy missing (deploy/deps.sh installs it)"; exit 1; }

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }

$PY "$HELPER" repo "$WORK/repo" || { echo "FAIL: could not write the repository"; exit 1; }
MODELS=$(cd "$WORK/repo" && ls -d */ | tr -d / | sort)

for threads in 1 2; do
  LOG=$WORK/tpud.$threads.log
  "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 --threads $threads \
    2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID || exit 1
  for m in $MODELS; do
    for _ in $(seq 600); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/v2/models/$m/ready")" = 200 ] && break
      kill -0 $PID 2>/dev/null || break
      sleep 0.1
    done
  done
  echo "-- tpud --threads $threads"
  $PY "$HELPER" check "$HPORT" "$WORK/alone.json" $MODELS || fail "threads $threads: rows differ"
  kill -TERM $PID
  wait $PID
  rc=$?
  PID=
  [ $rc = 0 ] || fail "tpud --threads $threads exited $rc after SIGTERM: $(tail -5 "$LOG")"
done

[ $FAIL = 0 ] && echo "test_invariance: all passed"
exit $FAIL
