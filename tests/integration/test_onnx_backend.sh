#!/bin/bash
# test_onnx_backend.sh - ONNX's own backend tests (Debian libonnx-testdata: data/node,
# pytorch-converted, pytorch-operator, simple), twice: in-process (onnx_backend: decode, convert,
# compile, run, compare; "N passed, M failed, K skipped" with the skips grouped by missing op),
# then through the real server: every test that passed is exported as a model version whose
# reference is its own test data, tpud loads them all (the reference check at load runs each
# through the server's model path) and onnx_backend_server.py sends each test's inputs over HTTP
# and compares the answers. Exit 77 (skipped) without the test data. $1 = build dir, $2 = source.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
DATA=/usr/share/libonnx-testdata/data
[ -d "$DATA/node" ] || { echo "no ONNX test data at $DATA (deploy/deps.sh installs libonnx-testdata)"; exit 77; }
RUNNER=$BUILD/tests/integration/onnx_backend
TPUD=$BUILD/server/tpud
for b in "$RUNNER" "$TPUD"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
WORK=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
FAIL=0

"$RUNNER" --xfail "$SRC/tests/integration/onnx_backend_xfail.txt" --export-repo "$WORK/repo" \
  --root "$DATA/node" --root "$DATA/pytorch-converted" --root "$DATA/pytorch-operator" \
  --root "$DATA/simple" >"$WORK/inprocess.txt" 2>&1 || FAIL=1
grep -E "^onnx_backend:|^XFAIL" "$WORK/inprocess.txt"
sed -n '/^skipped (not supported)/,/^refused/p' "$WORK/inprocess.txt" | grep -E '^ +[0-9]+ ' | head -12
[ $FAIL = 0 ] || { echo "FAIL: in-process failures:"; sed -n '/^failures:/,$p' "$WORK/inprocess.txt"; }
exported=$(ls "$WORK/repo" | wc -l)
[ "$exported" -gt 100 ] || { echo "FAIL: only $exported tests exported"; FAIL=1; }

LOG=$WORK/tpud.log
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
# Loads finish before the ports open (start-up loads every version), but wait for the count.
for _ in $(seq 1 100); do
  n=$(grep -c -E "ready in|load failed" "$LOG")
  [ "$n" -ge "$exported" ] && break
  sleep 0.2
done
echo "server: $(grep -c 'ready in' "$LOG") of $exported exported versions READY after the reference check"
$PY "$SRC/tests/integration/onnx_backend_server.py" "$WORK/repo" "$HPORT" || FAIL=1
kill -0 $PID 2>/dev/null || { echo "FAIL: tpud died"; FAIL=1; }
[ $FAIL = 0 ] && echo "test_onnx_backend: ok" || echo "test_onnx_backend: FAILED"
exit $FAIL
