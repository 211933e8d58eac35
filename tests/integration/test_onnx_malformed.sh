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

LOG=$WORK/tpud.log
${TPUD_WRAP:-} "$TPUD" --models "$REPO" --port 0 --http-port 0 --io-threads 2 --threads 2 \
  --poll-seconds 1 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
/usr/bin/python3 "$SRC/tests/integration/onnx_malformed.py" --http-port "$HPORT" --pid $PID \
  --src "$SRC" --repo "$REPO" --stage "$WORK/stage" || FAIL=1

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
