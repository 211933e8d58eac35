#!/bin/bash
# test_readiness.sh - --strict-readiness against the real tpud, over HTTP, the framed protocol
# (tpuctl health), gRPC ServerReady (stubs generated here from proto/grpc_service.proto) and the
# gRPC health checking protocol's Check (stubs from the spec's messages, written here):
# a repository with one good and one broken model is not ready under the default (strict),
# ready with --strict-readiness=false; live stays 200 and the good model keeps answering in
# both; under strict, unloading the broken model by request, or fixing its files (SIGHUP),
# makes the server ready. $1 = build directory, $2 = source directory.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports, grpc_stubs
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
for b in "$TPUD" "$TPUCTL"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
for c in curl protoc grpc_python_plugin; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import grpc, google.protobuf' 2>/dev/null ||
  { echo "python3-grpcio or -protobuf missing (deploy/deps.sh installs them)"; exit 1; }

WORK=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }

GEN=$WORK/gen
mkdir -p "$GEN"
grpc_stubs "$SRC" "$GEN" grpc_service.proto || exit 1
# The gRPC health checking protocol's messages as gRPC's doc/health-checking.md gives them, not
# tpud's copy (proto/health.proto): the stubs a probe would use.
mkdir -p "$WORK/hp/proto"
cat >"$WORK/hp/proto/hc.proto" <<'EOF'
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health {
  rpc Check(HealthCheckRequest) returns (HealthCheckResponse);
  rpc Watch(HealthCheckRequest) returns (stream HealthCheckResponse);
}
EOF
grpc_stubs "$WORK/hp" "$GEN" hc.proto || exit 1

# A repository: digits (good) and broken (its model.json declares no layers: load fails).
REPO=$WORK/repo
mkdir -p "$REPO/digits" "$REPO/broken/1"
cp -r "$SRC/models/digits/1" "$REPO/digits/1"
echo '{"inputs": []}' >"$REPO/broken/1/model.json"

start() { # [tpud flags...]: sets PID, NPORT, HPORT, LOG, URL
  LOG=$WORK/tpud.$RANDOM.log
  "$TPUD" --models "$REPO" --port 0 --http-port 0 --poll-seconds 0 "$@" 2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID || exit 1
  URL=http://127.0.0.1:$HPORT
}
stop() {
  kill -TERM "$PID" 2>/dev/null
  wait "$PID"
  local rc=$?
  [ $rc = 0 ] || fail "tpud exited $rc after SIGTERM: $(tail -5 "$LOG")"
  PID=
}
code() { curl -s -o "$WORK/body" -w '%{http_code}' "$URL$1"; }
grpc_ready() { # prints True or False: gRPC inference.GRPCInferenceService/ServerReady
  PYTHONPATH=$GEN $PY - "127.0.0.1:$NPORT" <<'EOF'
import sys, grpc, grpc_service_pb2 as pb, grpc_service_pb2_grpc as pbg
with grpc.insecure_channel(sys.argv[1]) as ch:
    grpc.channel_ready_future(ch).result(timeout=10)
    print(pbg.GRPCInferenceServiceStub(ch).ServerReady(pb.ServerReadyRequest(), timeout=10).ready)
EOF
}
health() { # SERVICE...: grpc.health.v1.Health/Check of each, "SERVING"/"NOT_SERVING"/the code
  PYTHONPATH=$GEN $PY - "127.0.0.1:$NPORT" "$@" <<'EOF'
import sys, grpc, hc_pb2 as pb, hc_pb2_grpc as pbg
out = []
with grpc.insecure_channel(sys.argv[1]) as ch:
    grpc.channel_ready_future(ch).result(timeout=10)
    stub = pbg.HealthStub(ch)
    for svc in sys.argv[2:]:
        try:
            r = stub.Check(pb.HealthCheckRequest(service=svc), timeout=10)
            out.append(pb.HealthCheckResponse.ServingStatus.Name(r.status))
        except grpc.RpcError as e:
            out.append(e.code().name)
print(" ".join(out))
EOF
}
# wait_state MODEL VERSION STATE: until tpuctl models lists it so (10 s).
wait_state() {
  for _ in $(seq 1 100); do
    "$TPUCTL" --addr 127.0.0.1:$NPORT models 2>/dev/null | grep -q "$1.*$2.*$3" && return 0
    sleep 0.1
  done
  fail "$1 version $2 not $3: $("$TPUCTL" --addr 127.0.0.1:$NPORT models 2>&1)"
  return 1
}
# The checks that hold in both modes: live, the good model ready and answering.
others_answer() { # MODE
  [ "$(code /v2/health/live)" = 200 ] && ok "$1: live is 200" || fail "$1: live $(cat "$WORK/body")"
  [ "$(code /v2/models/digits/ready)" = 200 ] && ok "$1: digits ready" ||
    fail "$1: digits/ready: $(cat "$WORK/body")"
  [ "$(code /v2/models/broken/ready)" = 503 ] && ok "$1: broken/ready is 503" ||
    fail "$1: broken/ready: $(cat "$WORK/body")"
  local st
  st=$(curl -s -o "$WORK/infer" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$WORK/x.json" "$URL/v2/models/digits/infer")
  [ "$st" = 200 ] && $PY -c "import json; j = json.load(open('$WORK/infer')); \
assert j['outputs'][0]['shape'] == [1, 10]" && ok "$1: digits infers (200)" ||
    fail "$1: digits infer $st: $(head -c 300 "$WORK/infer")"
}
$PY -c "import json; json.dump({'inputs': [{'name': 'x', 'shape': [1, 64], 'datatype': 'FP32', \
'data': [0.5] * 64}]}, open('$WORK/x.json', 'w'))"

# ---- 1. strict (the default): not ready on every protocol ----
start
wait_state broken 1 FAILED
st=$(code /v2/health/ready)
[ "$st" = 503 ] && $PY -c "import json; j = json.load(open('$WORK/body')); \
assert j['ready'] is False and \"model 'broken' has no ready version (version 1 failed\" in j['error']" &&
  ok "strict: /v2/health/ready is 503 {\"ready\": false, \"error\": names broken}" ||
  fail "strict: ready $st $(cat "$WORK/body")"
r=$(grpc_ready 2>&1)
[ "$r" = False ] && ok "strict: gRPC ServerReady false" || fail "strict: gRPC ServerReady: $r"
r=$(health "" inference.GRPCInferenceService digits broken nosuch 2>&1)
[ "$r" = "NOT_SERVING NOT_SERVING SERVING NOT_SERVING NOT_FOUND" ] &&
  ok "strict: grpc.health.v1 Check: server NOT_SERVING, digits SERVING, broken NOT_SERVING, unknown NOT_FOUND" ||
  fail "strict: health Check: $r"
out=$("$TPUCTL" --addr 127.0.0.1:$NPORT health 2>&1)
[ $? != 0 ] && echo "$out" | grep -q "not ready" && ok "strict: tpuctl health (framed) exits non-zero" ||
  fail "strict: tpuctl health: $out"
code /v2/debug/config >/dev/null
$PY -c "import json; assert json.load(open('$WORK/body'))['strict-readiness'] is True" &&
  ok "strict: /v2/debug/config says strict-readiness true" || fail "debug/config: $(cat "$WORK/body")"
others_answer strict

# Watch (a server stream): the server's status now, then again when it changes; an unknown
# name is SERVICE_UNKNOWN on the stream (not an error, as the protocol says).
PYTHONPATH=$GEN $PY - "127.0.0.1:$NPORT" "$WORK/watch.out" <<'EOF' &
import sys, grpc, hc_pb2 as pb, hc_pb2_grpc as pbg
out = open(sys.argv[2], "w", buffering=1)
with grpc.insecure_channel(sys.argv[1]) as ch:
    stub = pbg.HealthStub(ch)
    try:
        for r in stub.Watch(pb.HealthCheckRequest(service=""), timeout=20):
            out.write(pb.HealthCheckResponse.ServingStatus.Name(r.status) + "\n")
            if r.status == pb.HealthCheckResponse.SERVING:
                break
    except grpc.RpcError as e:
        out.write("error " + e.code().name + "\n")
    r = next(iter(stub.Watch(pb.HealthCheckRequest(service="nosuch"), timeout=10)))
    out.write("nosuch " + pb.HealthCheckResponse.ServingStatus.Name(r.status) + "\n")
EOF
WPID=$!
for _ in $(seq 1 50); do [ -s "$WORK/watch.out" ] && break; sleep 0.1; done
sleep 0.5
# Unloading the broken model by request: it is no longer configured to serve (it still shows
# FAILED, with its reason).
out=$("$TPUCTL" --addr 127.0.0.1:$NPORT unload broken 2>&1) || fail "tpuctl unload broken: $out"
wait $WPID
[ "$(tr '\n' ' ' <"$WORK/watch.out")" = "NOT_SERVING SERVING nosuch SERVICE_UNKNOWN " ] &&
  ok "strict: health Watch streams NOT_SERVING, then SERVING once broken is unloaded; an unknown name SERVICE_UNKNOWN" ||
  fail "strict: health Watch: $(tr '\n' ' ' <"$WORK/watch.out")"
for _ in $(seq 1 50); do [ "$(code /v2/health/ready)" = 200 ] && break; sleep 0.1; done
[ "$(code /v2/health/ready)" = 200 ] && ok "strict: ready (200) once broken is unloaded by request" ||
  fail "strict: after unloading broken: ready $(cat "$WORK/body")"
r=$(health "" tpud.TpudService 2>&1)
[ "$r" = "SERVING SERVING" ] && ok "strict: health Check SERVING once broken is unloaded" ||
  fail "strict: health after the unload: $r"
stop

# Fixing the broken model's files and SIGHUP (rescan): ready once it loads.
start --strict-readiness=true
wait_state broken 1 FAILED
[ "$(code /v2/health/ready)" = 503 ] || fail "--strict-readiness=true: ready $(cat "$WORK/body")"
rm -rf "$REPO/broken/1"
cp -r "$SRC/models/digits/1" "$REPO/broken/1"
kill -HUP $PID
wait_state broken 1 READY
[ "$(code /v2/health/ready)" = 200 ] && [ "$(grpc_ready 2>&1)" = True ] &&
  ok "strict: ready over HTTP and gRPC once the broken model is fixed (SIGHUP)" ||
  fail "strict: after the fix: ready $(cat "$WORK/body")"
stop
rm -rf "$REPO/broken/1"
mkdir -p "$REPO/broken/1"
echo '{"inputs": []}' >"$REPO/broken/1/model.json"

# ---- 2. --strict-readiness=false: ready while one model is ----
start --strict-readiness=false
wait_state broken 1 FAILED
[ "$(code /v2/health/ready)" = 200 ] && [ "$(tr -d ' ' <"$WORK/body")" = '{"ready":true}' ] &&
  ok "off: /v2/health/ready is 200 {\"ready\": true}" || fail "off: ready $(cat "$WORK/body")"
r=$(grpc_ready 2>&1)
[ "$r" = True ] && ok "off: gRPC ServerReady true" || fail "off: gRPC ServerReady: $r"
r=$(health "" broken 2>&1)
[ "$r" = "SERVING NOT_SERVING" ] && ok "off: health Check: server SERVING, broken NOT_SERVING" ||
  fail "off: health Check: $r"
out=$("$TPUCTL" --addr 127.0.0.1:$NPORT health 2>&1) && [ "$out" = ready ] &&
  ok "off: tpuctl health says ready" || fail "off: tpuctl health: $out"
others_answer off
stop

# ---- 3. the option: config file key, bad values ----
echo '{"strict-readiness": false}' >"$WORK/cfg.json"
start --config "$WORK/cfg.json"
wait_state broken 1 FAILED
[ "$(code /v2/health/ready)" = 200 ] && ok "config file {\"strict-readiness\": false}" ||
  fail "config file: ready $(cat "$WORK/body")"
stop
"$TPUD" --models "$REPO" --strict-readiness=maybe 2>"$WORK/err"
[ $? = 2 ] && grep -q "strict-readiness.*switch" "$WORK/err" && ok "--strict-readiness=maybe refused" ||
  fail "bad value: $(cat "$WORK/err")"
"$TPUD" --help | grep -q -- "--strict-readiness" && ok "--help lists --strict-readiness" ||
  fail "--help has no --strict-readiness"

[ $FAIL = 0 ] && echo "test_readiness: all passed" || echo "test_readiness: FAILED"
exit $FAIL
