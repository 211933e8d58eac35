#!/bin/bash
# test_compat.sh - Triton's HTTP binary tensor extension (Inference-Header-Content-Length,
# binary_data_size, binary_data, binary_data_output) against the real tpud, on the bundled
# digits and matmul models, the fraud ONNX fixture (two inputs, two outputs, FP32 and INT64) and
# an XGBoost fixture fed NaN and infinities; and the classification extension (output parameter
# `classification: K`, labels from model.json "labels") over HTTP and the native protocol, with
# three versions whose labels file is wrong (count, digest, output) refused at load. The HTTP
# checks live in compat.py (numpy only; see its docstring). $1 = build directory,
# $2 = source directory.
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
# digits with class names (Triton's classification extension), and three versions whose labels
# are wrong in a different way each, which must not load.
labels() { # labels DIR OUTPUT [LINES...]: a labels.txt, model.json's "labels" naming it and
  #          its digest from tools/model_digest.py
  local dir=$1 out=$2
  shift 2
  printf '%s\n' "$@" >"$dir/labels.txt"
  $PY - "$dir" "$out" <<'PYEOF'
import json, sys
d, out = sys.argv[1], sys.argv[2]
j = json.load(open(d + "/model.json"))
j["labels"] = {out: {"file": "labels.txt"}}
json.dump(j, open(d + "/model.json", "w"), indent=1)
PYEOF
  $PY "$SRC/tools/model_digest.py" "$dir" >/dev/null || echo "FAIL: model_digest.py $dir"
}
NAMES=(zero one two three four five six seven eight nine)
for m in digitsl bad_count bad_digest bad_output; do
  mkdir -p "$WORK/repo/$m"
  cp -r "$SRC/models/digits/1" "$WORK/repo/$m/1"
done
labels "$WORK/repo/digitsl/1" probs "${NAMES[@]}"
labels "$WORK/repo/bad_count/1" probs "${NAMES[@]:0:9}"
labels "$WORK/repo/bad_digest/1" probs "${NAMES[@]}"
echo ten >>"$WORK/repo/bad_digest/1/labels.txt"
labels "$WORK/repo/bad_output/1" scores "${NAMES[@]}"

LOG=$WORK/tpud.log
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
for _ in $(seq 1 300); do
  [ "$(grep -c "ready in" "$LOG")" -ge 5 ] && [ "$(grep -c "load failed" "$LOG")" -ge 3 ] && break
  sleep 0.1
done
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
expect_failed() { # MODEL TEXT: the version failed to load saying TEXT
  grep -q "model '$1' version 1: load failed: .*$2" "$LOG" && ok "$1: refused: $(grep -o "$2.*" "$LOG" | head -1 | cut -c1-160)" ||
    fail "$1: no load failure saying '$2': $(grep "'$1'" "$LOG" | tail -1)"
}
ok() { echo "ok: $*"; }
expect_failed bad_count "9 labels, but output 'probs' has 10 classes"
expect_failed bad_digest "labels.txt: SHA-256 mismatch"
expect_failed bad_output "labels.scores: the model has no output 'scores' (its outputs: 'probs')"
# The native protocol (tpuctl) takes the same parameter as HTTP.
out=$("$BUILD/client/tpuctl" --addr 127.0.0.1:$NPORT infer digitsl --data '{"inputs": [{"name": "x",
  "shape": [1, 64], "datatype": "FP32", "data": [0,0,5,13,9,1,0,0, 0,0,13,15,10,15,5,0, 0,3,15,2,0,11,8,0,
  0,4,12,0,0,8,8,0, 0,5,8,0,0,9,8,0, 0,4,11,0,1,12,7,0, 0,2,14,5,10,12,0,0, 0,0,6,13,10,0,0,0]}],
  "outputs": [{"name": "probs", "parameters": {"classification": 2}}]}' 2>&1)
echo "$out" | grep -q '"datatype":"BYTES","shape":\[1,2\],"data":\["0.99[0-9e.-]*:0:zero","[0-9e.-]*:[0-9]:[a-z]*"\]' &&
  ok "tpuctl infer (native protocol): classification 2 gives [1,2] BYTES, a zero first" ||
  fail "tpuctl classification: $out"
$PY "$SRC/tests/integration/compat.py" "$HPORT" "$SRC/tests/data/onnx"
rc=$?
[ $FAIL = 0 ] || rc=1
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
