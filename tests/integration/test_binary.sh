#!/bin/bash
# test_binary.sh - Triton's HTTP binary tensor extension (Inference-Header-Content-Length,
# binary_data_size, binary_data, binary_data_output) against the real tpud, on the bundled
# digits and matmul models, the fraud ONNX fixture (two inputs, two outputs, FP32 and INT64) and
# an XGBoost fixture fed NaN and infinities. The checks live in binary_tensors.py (numpy only;
# see its docstring). $1 = build directory, $2 = source directory.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
[ -x "$TPUD" ] || { echo "$TPUD not built"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import numpy' 2>/dev/null || { echo "python3-numpy missing (deploy/deps.sh installs it)"; exit 1; }

WORK=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill -9 $PID 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/digits" "$WORK/repo/matmul" "$WORK/repo/fraud" "$WORK/repo/xgb"
cp -r "$SRC/models/digits/1" "$WORK/repo/digits/1"
cp -r "$SRC/models/matmul/1" "$WORK/repo/matmul/1"
cp -r "$SRC/tests/data/onnx/fraud_op17/1" "$WORK/repo/fraud/1"
cp -r "$SRC/tests/data/xgboost/fraud_d6/1" "$WORK/repo/xgb/1"
LOG=$WORK/tpud.log
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
for _ in $(seq 1 300); do
  [ "$(grep -c "ready in" "$LOG")" -ge 4 ] && break
  sleep 0.1
done
$PY "$SRC/tests/integration/binary_tensors.py" "$HPORT" "$SRC/tests/data/onnx"
rc=$?
if ! kill -0 $PID 2>/dev/null; then
  echo "FAIL: tpud exited during the test"
  tail -20 "$LOG"
  exit 1
fi
kill -TERM $PID
wait $PID
src=$?
PID=
[ $src = 0 ] || { echo "FAIL: tpud exited $src on SIGTERM"; tail -20 "$LOG"; exit 1; }
[ $rc = 0 ] && echo "PASS" || { echo "FAIL"; tail -30 "$LOG"; }
exit $rc
