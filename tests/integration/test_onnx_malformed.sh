#!/bin/bash
# test_onnx_malformed.sh - every malformed ONNX fixture (tests/data/onnx/malformed, written by
# models/make_malformed_onnx.py) fails to load with a message naming the node, tensor, op or
# field at fault, and tpud keeps serving its good model throughout: at start-up with every case
# in the repository, and while a few are hot-added (--poll-seconds 1) under request load. The
# checks are in onnx_malformed.py; this script builds the repository, starts tpud, and checks
# that it exits 0 on SIGTERM with no crash in its log.
# $1 = build directory, $2 = source directory. Set TPUD_WRAP (e.g. "valgrind -q") to wrap tpud.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
[ -x "$TPUD" ] || { echo "$TPUD not built"; exit 1; }
MAL=$SRC/tests/data/onnx/malformed
[ -f "$MAL/cases.json" ] || { echo "$MAL/cases.json missing (make_malformed_onnx.py)"; exit 1; }

WORK=$(mktemp -d)
PID=
trap 'kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
REPO=$WORK/repo
mkdir -p "$REPO" "$WORK/stage"
cp -r "$SRC/tests/data/onnx/mlp_bn_op13" "$REPO/mlp_bn"
for d in "$MAL"/*/; do
  cp -rP "$d" "$REPO/" # -P: the symlink case's link stays a link
done
# A checkout (or copy) that did not keep the symlink: make it here.
LINK=$REPO/ext_symlink_out/1/w.bin
if [ ! -L "$LINK" ]; then
  echo "note: ext_symlink_out/1/w.bin is not a symlink in the source tree; creating it"
  rm -f "$LINK"
  ln -s /etc/passwd "$LINK"
fi
FAIL=0
# The external-data case made right (added after the cases are checked): tools/model_digest.py
# lists w.bin with its digest in checkpoint.external, and the same files then load and serve.
cp -r "$MAL/ext_unlisted" "$WORK/stage/ext_listed"
/usr/bin/python3 "$SRC/tools/model_digest.py" "$WORK/stage/ext_listed/1" >/dev/null ||
  { echo "FAIL: model_digest.py on ext_listed"; FAIL=1; }
if ! grep -q '"external"' "$WORK/stage/ext_listed/1/model.json"; then
  # without python3-onnx the tool only updates listed files: list it by hand
  SHA=$(sha256sum "$WORK/stage/ext_listed/1/w.bin" | cut -d' ' -f1)
  sed -i "s/\"file\": \"model.onnx\",/\"file\": \"model.onnx\", \"external\": {\"w.bin\": \"$SHA\"},/" \
    "$WORK/stage/ext_listed/1/model.json"
fi

LOG=$WORK/tpud.log
${TPUD_WRAP:-} "$TPUD" --models "$REPO" --port 0 --http-port 0 --io-threads 2 --threads 2 \
  --poll-seconds 1 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
/usr/bin/python3 "$SRC/tests/integration/onnx_malformed.py" --http-port "$HPORT" --pid $PID \
  --src "$SRC" --repo "$REPO" --stage "$WORK/stage" || FAIL=1

# ext_listed serves: ready, and an answer of the right shape from its external weights.
mv "$WORK/stage/ext_listed" "$REPO/ext_listed"
/usr/bin/python3 - "$HPORT" <<'PYEOF' || FAIL=1
import http.client, json, sys, time
port = int(sys.argv[1])
def req(method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read()
deadline = time.time() + 20
while True:
    st, _ = req("GET", "/v2/models/ext_listed/ready")
    if st == 200 or time.time() > deadline:
        break
    time.sleep(0.2)
if st != 200:
    print(f"FAIL: ext_listed (external data with its digest) is not ready: {st}")
    sys.exit(1)
meta = json.loads(req("GET", "/v2/models/ext_listed")[1])
inp = meta["inputs"][0]
k = inp["shape"][1]
st, body = req("POST", "/v2/models/ext_listed/infer", {"inputs": [
    {"name": inp["name"], "datatype": "FP32", "shape": [1, k], "data": [0.5] * k}]})
if st != 200:
    print(f"FAIL: ext_listed infer: {st} {body[:200]!r}")
    sys.exit(1)
print("ok ext_listed: external data listed with its digest loads and answers")
PYEOF

kill -TERM $PID
wait $PID
RC=$?
PID=
[ $RC -eq 0 ] || { echo "FAIL: tpud exited $RC after SIGTERM"; FAIL=1; }
if grep -qiE 'AddressSanitizer|runtime error|segmentation|assert|core dumped' "$LOG"; then
  echo "FAIL: tpud's log shows a crash:"
  grep -iE 'AddressSanitizer|runtime error|segmentation|assert|core dumped' "$LOG" | head -5
  FAIL=1
fi
N=$(grep -c "load failed" "$LOG")
echo "tpud logged $N failed loads"
[ $FAIL -eq 0 ] && echo "PASS" || { echo "--- tpud log (tail)"; tail -20 "$LOG"; }
exit $FAIL
