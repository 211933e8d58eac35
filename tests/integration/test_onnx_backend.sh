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

# The reference as ONNX test data (test_data_set_0/ with input_K.pb and output_K.pb, its digest
# that of the files concatenated): three backend tests as they come, and one whose expected
# output was altered (digest updated): it must be refused by the reference check.
$PY - "$DATA/node" "$WORK/repo" <<'PYEOF' || FAIL=1
import hashlib, json, os, shutil, sys
src, repo = sys.argv[1], sys.argv[2]
def digest(d):
    names = sorted(f for f in os.listdir(d) if f.startswith("input_")) + \
            sorted(f for f in os.listdir(d) if f.startswith("output_"))
    names.sort(key=lambda f: (not f.startswith("input_"), int(f.split("_")[1].split(".")[0])))
    h = hashlib.sha256()
    for f in names:  # each file's size (8 bytes, little-endian), then its bytes
        b = open(os.path.join(d, f), "rb").read()
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()
for test, broken in (("test_add", 0), ("test_gemm_default_no_bias", 0),
                     ("test_softmax_axis_1", 0), ("test_relu", 1)):
    v = os.path.join(repo, ("pbref_bad." if broken else "pbref.") + test, "1")
    os.makedirs(v)
    shutil.copy(os.path.join(src, test, "model.onnx"), v)
    shutil.copytree(os.path.join(src, test, "test_data_set_0"), os.path.join(v, "test_data_set_0"))
    if broken:  # one expected value changed, in place (the raw data's last bytes)
        p = os.path.join(v, "test_data_set_0", "output_0.pb")
        b = bytearray(open(p, "rb").read()); b[-1] ^= 0x40; open(p, "wb").write(bytes(b))
    sha = hashlib.sha256(open(os.path.join(v, "model.onnx"), "rb").read()).hexdigest()
    json.dump({"format": "onnx", "checkpoint": {"file": "model.onnx", "sha256": sha},
               "reference": {"file": "test_data_set_0",
                             "sha256": digest(os.path.join(v, "test_data_set_0")),
                             "rtol": 1e-3, "atol": 1e-7}}, open(os.path.join(v, "model.json"), "w"))
PYEOF
exported=$(ls "$WORK/repo" | grep -vc '^pbref')

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
echo "server: $(grep 'ready in' "$LOG" | grep -vc 'pbref') of $exported exported versions READY after the reference check"
n=$(grep "ready in" "$LOG" | grep -c "model 'pbref\.test_.*reference check passed")
[ "$n" = 3 ] && echo "ok: 3 versions with ONNX test data (.pb) as the reference passed their check" ||
  { echo "FAIL: $n of 3 .pb-reference versions READY"; FAIL=1; }
grep -q "model 'pbref_bad.test_relu' version 1: load failed: .*reference check failed: output" "$LOG" &&
  echo "ok: an altered .pb expected output is refused by the reference check" ||
  { echo "FAIL: the altered .pb reference was not refused:"; grep pbref_bad "$LOG"; FAIL=1; }
$PY "$SRC/tests/integration/onnx_backend_server.py" "$WORK/repo" "$HPORT" || FAIL=1
kill -0 $PID 2>/dev/null || { echo "FAIL: tpud died"; FAIL=1; }
[ $FAIL = 0 ] && echo "test_onnx_backend: ok" || echo "test_onnx_backend: FAILED"
exit $FAIL
