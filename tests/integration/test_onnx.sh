#!/bin/bash
# test_onnx.sh - ONNX models ("format": "onnx") served by the real tpud, checked against the
# PyTorch outputs stored with the fixtures (tests/data/onnx/*/1/reference.safetensors). The
# assertions live in onnx_serving.py (numpy and grpcio only; see its docstring):
#   1. the fixture repository as is (--audit-log): six models READY with the reference check
#      passed, mlp_bn_wrong_op13 FAILED with the reference reason while the others serve
#      (`states`); metadata over HTTP and gRPC, /v2/debug/models, all 1000 reference rows over
#      HTTP JSON, gRPC and the framed protocol (tpuctl) in concurrent requests of 1..64 rows,
#      the "outputs" field, embedding ids out of range, datatype conversion (`serve`); then,
#      tpud stopped, the audit log verified and the digests of a known 2-row fraud request
#      (`audit`).
#   2. hot swap under the reference check (--poll-seconds 1) under a request loop: a wrong
#      version 2, then int8 and bf16 variants of version 1 (`swap`).
# $1 = build directory, $2 = source directory.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports, grpc_stubs
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
HELPER=$SRC/tests/integration/onnx_serving.py
DATA=$SRC/tests/data/onnx
for b in "$TPUD" "$TPUCTL"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
for c in protoc grpc_python_plugin; do
  command -v $c >/dev/null || { echo "$c missing (deploy/deps.sh installs it)"; exit 1; }
done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import grpc, google.protobuf, numpy' 2>/dev/null ||
  { echo "python3-grpcio, -protobuf or -numpy missing (deploy/deps.sh installs them)"; exit 1; }

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }
T0=$SECONDS

GEN=$WORK/gen
mkdir -p "$GEN"
grpc_stubs "$SRC" "$GEN" grpc_service.proto || exit 1

# start REPO [tpud flags...]: tpud on free ports; sets PID, NPORT, HPORT, LOG.
start() {
  local repo=$1
  shift
  LOG=$WORK/tpud.$RANDOM.log
  "$TPUD" --models "$repo" --port 0 --http-port 0 "$@" 2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID || exit 1
}
stop() {
  kill -TERM "$PID" 2>/dev/null
  wait "$PID"
  local rc=$?
  [ $rc = 0 ] || fail "tpud exited $rc after SIGTERM: $(tail -5 "$LOG")"
  PID=
  grep -E "AddressSanitizer|runtime error|Segmentation|assert" "$LOG" && fail "tpud log: see above"
}
helper() { # SUITE [args...]
  local suite=$1
  shift
  $PY "$HELPER" "$suite" --http http://127.0.0.1:$HPORT --target 127.0.0.1:$NPORT --gen "$GEN" \
    --tpuctl "$TPUCTL" --data "$DATA" "$@" || FAIL=1
}

# ---- 1. the fixtures as a repository: states, every protocol, audit ----
echo "-- 1. the fixture repository: states, reference rows over every protocol, audit"
mkdir -p "$WORK/repo"
for d in "$DATA"/*/; do cp -r "$d" "$WORK/repo/"; done
# --strict-readiness=false: mlp_bn_wrong_op13 fails on purpose and the suites check that the
# server stays ready beside it (strict readiness is test_readiness.sh's).
start "$WORK/repo" --poll-seconds 0 --audit-log "$WORK/audit.log" --strict-readiness=false
n=$(grep -c "ready in .*reference check passed: 1000 rows" "$LOG")
[ "$n" = 6 ] && ok "log: six 'ready ... reference check passed' lines" || fail "log: $n ready lines"
grep -q "'mlp_bn_wrong_op13' version 1: load failed: .*reference check failed: output 'probs'" \
  "$LOG" && ok "log: mlp_bn_wrong_op13 load failed on the reference check" ||
  fail "log: no load-failed line for mlp_bn_wrong_op13: $(grep wrong "$LOG")"
helper states
helper serve --audit-want "$WORK/audit-want.json"
stop
helper audit --audit-log "$WORK/audit.log" --audit-want "$WORK/audit-want.json"
echo "-- 1 done ($((SECONDS - T0)) s)"

# ---- 2. hot swap under the reference check ----
# Result recorded when this test was written (fixtures of models/export_onnx_examples.py,
# rtol 1e-4): both the int8 and the bf16 variant of mlp_bn_op13 are refused by the reference
# check: int8 off by up to ~0.6 in a probability (its inputs span column scales 0.05..2500, so
# per-channel weight quantization loses the small columns), bf16 by ~0.02. The helper accepts
# either outcome (READY with the agreement reported, or FAILED with the reference reason).
echo "-- 2. hot swap under the reference check ($((SECONDS - T0)) s)"
mkdir -p "$WORK/swap/m"
cp -r "$DATA/mlp_bn_op13/1" "$WORK/swap/m/1"
start "$WORK/swap" --poll-seconds 1
helper swap --repo "$WORK/swap"
stop
grep -q "model 'm' version 2: load failed: .*reference check failed" "$LOG" &&
  ok "log: version 2 load failed on the reference check" || fail "log: no load-failed line for m/2"

echo "test_onnx: $((SECONDS - T0)) s"
[ $FAIL = 0 ] && echo "test_onnx: all passed" || echo "test_onnx: FAILED"
exit $FAIL
