#!/bin/bash
# test_grpc.sh - gRPC over HTTP/2 on the native port, end to end: stock grpcio clients (Debian's
# python3-grpcio, stubs generated here from proto/ with protoc and grpc_python_plugin) against
# the real tpud. The assertions live in grpc_client.py (one suite per server configuration):
#   1. plaintext h2c (prior knowledge) with --audit-log: every method, infer (raw and typed
#      contents) equal to the HTTP endpoint, MatMul equal to numpy, error statuses,
#      UNIMPLEMENTED, gzip refused, flow control, 320 calls from 8 threads and 300 issued at once
#      (beyond the stream limit) on one channel while tpuctl speaks the framed protocol on the
#      same port, malformed calls on raw HTTP/2 (python3-h2); then the audit records.
#   2. TPUD_ISA=ref --threads 1 (a big MatMul keeps the pool busy): deadlines and cancellation
#      of queued and running calls, counted in /metrics; grpc-timeout enforced by the server
#      (raw HTTP/2, no client reset); SIGTERM drains a running gRPC call and tpud exits 0.
#   3. --max-message-bytes 4096 --tokens: RESOURCE_EXHAUSTED, UNAUTHENTICATED,
#      PERMISSION_DENIED, admin load/unload; Triton's RepositoryIndex/RepositoryModelLoad/
#      RepositoryModelUnload, ModelConfig, ModelStatistics with stubs from Triton's message
#      definitions (written here); server reflection v1 and v1alpha walked end to end.
#   4. TLS with client certificates: ALPN h2 next to tpud/1, a subset of 1, refusals, and the
#      certificate subject as the audit identity.
# $1 = build directory, $2 = source directory.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports, grpc_stubs
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
CLIENT=$SRC/tests/integration/grpc_client.py
for b in "$TPUD" "$TPUCTL"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
for c in openssl protoc grpc_python_plugin; do
  command -v $c >/dev/null || { echo "$c missing (deploy/deps.sh installs it)"; exit 1; }
done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import grpc, google.protobuf, h2, numpy' 2>/dev/null ||
  { echo "python3-grpcio, -protobuf, -h2 or -numpy missing (deploy/deps.sh installs them)"; exit 1; }

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/repo" "$WORK/gen"
cp -r "$SRC/models/digits" "$SRC/models/matmul" "$WORK/repo/"
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }
T0=$SECONDS

# ---- stubs ----
GEN=$WORK/gen
if protoc -I "$SRC/proto" --python_out="$GEN" --grpc_python_out="$GEN" \
  --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
  "$SRC/proto/grpc_service.proto" "$SRC/proto/tpud.proto" 2>"$WORK/protoc.err" &&
  [ -f "$GEN/grpc_service_pb2_grpc.py" ] && [ -f "$GEN/tpud_pb2_grpc.py" ]; then
  ok "Python stubs generated from proto/ with protoc and grpc_python_plugin"
else
  echo "FAIL: protoc: $(cat "$WORK/protoc.err")"
  exit 1
fi

# ---- throwaway PKI: a CA, the server certificate, a client certificate ----
P=$WORK/pki
mkdir -p "$P"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$P/$1.key" 2>/dev/null; }
key ca
openssl req -x509 -new -key "$P/ca.key" -out "$P/ca.pem" -days 2 -subj "/CN=tpud grpc test CA" 2>/dev/null
leaf() { # NAME CN EXT
  key "$1"
  openssl req -new -key "$P/$1.key" -out "$P/$1.csr" -subj "/CN=$2" 2>/dev/null
  printf '%s\n' "$3" >"$P/$1.ext"
  openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.pem" -CAkey "$P/ca.key" -CAcreateserial \
    -out "$P/$1.pem" -days 2 -extfile "$P/$1.ext" 2>/dev/null
}
leaf server localhost "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf alice alice "subjectAltName=email:alice@example.com
extendedKeyUsage=clientAuth"
for f in ca server alice; do [ -s "$P/$f.pem" ] || { echo "could not generate $f.pem"; exit 1; }; done

ADMIN_TOKEN=admin-$RANDOM$RANDOM$RANDOM
INFER_TOKEN=infer-$RANDOM$RANDOM$RANDOM
hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
cat >"$WORK/tokens" <<EOF
token $(hash "$ADMIN_TOKEN") admin ops
token $(hash "$INFER_TOKEN") infer app
EOF

# start [tpud flags...]: starts tpud on free ports (environment in $TPUD_ENV); sets PID, NPORT,
# HPORT, LOG.
TPUD_ENV=
start() {
  LOG=$WORK/tpud.$RANDOM.log
  env $TPUD_ENV "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 "$@" 2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID || exit 1
}
# stop [nokill]: SIGTERM (unless `nokill`: sent already) and wait for exit 0.
stop() {
  [ "${1:-}" = nokill ] || kill -TERM "$PID" 2>/dev/null
  wait "$PID"
  local rc=$?
  [ $rc = 0 ] && ok "tpud exited 0 after SIGTERM" || fail "tpud exited $rc after SIGTERM: $(tail -5 "$LOG")"
  PID=
}
crashed() { # the server log must not show a crash or sanitizer report
  grep -E "AddressSanitizer|runtime error|Segmentation|assert" "$LOG" && fail "tpud log: see above"
}
client() { # SUITE [args...]: runs grpc_client.py against the current server
  local suite=$1
  shift
  $PY "$CLIENT" "$suite" --target 127.0.0.1:$NPORT --gen "$GEN" --src "$SRC" --tpuctl "$TPUCTL" "$@"
  [ $? = 0 ] || FAIL=1
}
ctl() { "$TPUCTL" --addr 127.0.0.1:$NPORT --timeout 5000 "$@"; }

# ---- 1. plaintext h2c: the whole surface, concurrency, framed alongside, audit ----
echo "-- 1. plaintext h2c: the whole surface, concurrency, framed alongside, audit ($((SECONDS - T0)) s)"
start --io-threads 2 --audit-log "$WORK/audit.log"
client basic --http http://127.0.0.1:$HPORT
out=$(ctl health 2>&1) && [ "$out" = ready ] && ok "tpuctl health (framed) after the gRPC suite" ||
  fail "tpuctl health after gRPC: $out"
stop
crashed
client audit --audit-log "$WORK/audit.log"
out=$("$TPUCTL" audit verify "$WORK/audit.log" 2>&1) && ok "tpuctl audit verify: $out" ||
  fail "audit verify: $out"

# ---- 2. deadlines, cancellation, drain (slow reference kernels, one compute thread) ----
echo "-- 2. deadlines, cancellation, drain (slow reference kernels, one compute thread) ($((SECONDS - T0)) s)"
TPUD_ENV="TPUD_ISA=ref"
start --threads 1 --io-threads 1 --auth-open-metrics --drain-timeout-s 60
TPUD_ENV=
grep -q "kernels 'ref'" "$LOG" || fail "TPUD_ISA=ref was not taken: $(grep engine: "$LOG")"
client slow --http http://127.0.0.1:$HPORT --pid $PID
# the suite ends with SIGTERM during a running call; give up on the drain after 30 s
for _ in $(seq 1 300); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
kill -0 $PID 2>/dev/null && { fail "tpud still running 30 s after SIGTERM"; kill -TERM $PID; }
stop nokill
crashed
grep -q "tpud stopped" "$LOG" || fail "no 'tpud stopped' line after the drain"

# ---- 3. message size limit, tokens and roles ----
echo "-- 3. message size limit, tokens and roles ($((SECONDS - T0)) s)"
start --max-message-bytes 4096 --tokens "$WORK/tokens" --auth-open-metrics
client limits --http http://127.0.0.1:$HPORT --admin-token "$ADMIN_TOKEN" \
  --infer-token "$INFER_TOKEN" --max-message-bytes 4096
# Triton's model repository extension over gRPC, with stubs from Triton's own message
# definitions (its grpc_service.proto: field numbers and names), not proto/'s.
mkdir -p "$WORK/triton/proto" "$WORK/tgen"
cat >"$WORK/triton/proto/triton_repo.proto" <<'EOF'
syntax = "proto3";
package inference;
service GRPCInferenceService {
  rpc RepositoryIndex(RepositoryIndexRequest) returns (RepositoryIndexResponse) {}
  rpc RepositoryModelLoad(RepositoryModelLoadRequest) returns (RepositoryModelLoadResponse) {}
  rpc RepositoryModelUnload(RepositoryModelUnloadRequest) returns (RepositoryModelUnloadResponse) {}
  rpc ModelConfig(ModelConfigRequest) returns (ModelConfigResponse) {}
  rpc ModelStatistics(ModelStatisticsRequest) returns (ModelStatisticsResponse) {}
}
enum DataType { TYPE_INVALID = 0; TYPE_BOOL = 1; TYPE_UINT8 = 2; TYPE_UINT16 = 3; TYPE_UINT32 = 4;
  TYPE_UINT64 = 5; TYPE_INT8 = 6; TYPE_INT16 = 7; TYPE_INT32 = 8; TYPE_INT64 = 9; TYPE_FP16 = 10;
  TYPE_FP32 = 11; TYPE_FP64 = 12; TYPE_STRING = 13; TYPE_BF16 = 14; }
message ModelInput { string name = 1; DataType data_type = 2; repeated int64 dims = 4; }
message ModelOutput { string name = 1; DataType data_type = 2; repeated int64 dims = 3;
  string label_filename = 4; }
message ModelDynamicBatching { repeated int32 preferred_batch_size = 1;
  uint64 max_queue_delay_microseconds = 2; }
message ModelConfig { string name = 1; string platform = 2; string backend = 17;
  int32 max_batch_size = 4; repeated ModelInput input = 5; repeated ModelOutput output = 6;
  oneof scheduling_choice { ModelDynamicBatching dynamic_batching = 11; } }
message ModelConfigRequest { string name = 1; string version = 2; }
message ModelConfigResponse { ModelConfig config = 1; }
message StatisticDuration { uint64 count = 1; uint64 ns = 2; }
message InferStatistics { StatisticDuration success = 1; StatisticDuration fail = 2;
  StatisticDuration queue = 3; StatisticDuration compute_input = 4;
  StatisticDuration compute_infer = 5; StatisticDuration compute_output = 6;
  StatisticDuration cache_hit = 7; StatisticDuration cache_miss = 8; }
message InferBatchStatistics { uint64 batch_size = 1; StatisticDuration compute_input = 2;
  StatisticDuration compute_infer = 3; StatisticDuration compute_output = 4; }
message ModelStatistics { string name = 1; string version = 2; uint64 last_inference = 3;
  uint64 inference_count = 4; uint64 execution_count = 5; InferStatistics inference_stats = 6;
  repeated InferBatchStatistics batch_stats = 7; }
message ModelStatisticsRequest { string name = 1; string version = 2; }
message ModelStatisticsResponse { repeated ModelStatistics model_stats = 1; }
message ModelRepositoryParameter {
  oneof parameter_choice { bool bool_param = 1; int64 int64_param = 2; string string_param = 3;
                           bytes bytes_param = 4; }
}
message RepositoryIndexRequest { string repository_name = 1; bool ready = 2; }
message RepositoryIndexResponse {
  message ModelIndex { string name = 1; string version = 2; string state = 3; string reason = 4; }
  repeated ModelIndex models = 1;
}
message RepositoryModelLoadRequest {
  string repository_name = 1; string model_name = 2;
  map<string, ModelRepositoryParameter> parameters = 3;
}
message RepositoryModelLoadResponse {}
message RepositoryModelUnloadRequest {
  string repository_name = 1; string model_name = 2;
  map<string, ModelRepositoryParameter> parameters = 3;
}
message RepositoryModelUnloadResponse {}
EOF
if grpc_stubs "$WORK/triton" "$WORK/tgen" triton_repo.proto; then
  PYTHONPATH=$WORK/tgen $PY - "127.0.0.1:$NPORT" "$ADMIN_TOKEN" "$INFER_TOKEN" <<'EOF'
import sys, grpc, triton_repo_pb2 as pb, triton_repo_pb2_grpc as pbg
target, admin, infer = sys.argv[1:4]
bad = 0
def check(cond, what):
    global bad
    print(("ok: " if cond else "FAIL: ") + what)
    bad += not cond
def code(fn, *a, **k):
    try:
        fn(*a, **k)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name + ": " + e.details()
with grpc.insecure_channel(target) as ch:
    s = pbg.GRPCInferenceServiceStub(ch)
    A = [("authorization", "Bearer " + admin)]
    I = [("authorization", "Bearer " + infer)]
    idx = s.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), metadata=I, timeout=10)
    names = sorted((m.name, m.state) for m in idx.models)
    check(("digits", "READY") in names and all(st == "READY" for _, st in names),
          "RepositoryIndex ready=true (infer token): %s" % names)
    r = code(s.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="digits"),
             metadata=I, timeout=10)
    check(r.startswith("PERMISSION_DENIED"), "RepositoryModelUnload with the infer token: %s" % r)
    req = pb.RepositoryModelUnloadRequest(model_name="digits")
    req.parameters["unload_dependents"].bool_param = True
    r = code(s.RepositoryModelUnload, req, metadata=A, timeout=10)
    check(r == "OK", "RepositoryModelUnload digits (admin, unload_dependents): %s" % r)
    idx = s.RepositoryIndex(pb.RepositoryIndexRequest(), metadata=A, timeout=10)
    st = [m.state for m in idx.models if m.name == "digits"]
    check(st and all(x in ("UNAVAILABLE", "UNLOADING") for x in st),
          "digits after the unload: %s (UNLOADING while its last requests drain)" % st)
    req = pb.RepositoryModelLoadRequest(model_name="digits")
    req.parameters["config"].string_param = "{}"
    r = code(s.RepositoryModelLoad, req, metadata=A, timeout=10)
    check(r.startswith("INVALID_ARGUMENT") and "parameters.config: not supported" in r,
          "RepositoryModelLoad with a config override: %s" % r)
    r = code(s.RepositoryModelLoad, pb.RepositoryModelLoadRequest(repository_name="other",
                                                                  model_name="digits"),
             metadata=A, timeout=10)
    check(r.startswith("NOT_FOUND"), "RepositoryModelLoad from a named repository: %s" % r)
    r = code(s.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="digits"),
             metadata=A, timeout=30)
    check(r == "OK", "RepositoryModelLoad digits (admin): %s" % r)
    idx = s.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), metadata=A, timeout=10)
    check(any(m.name == "digits" and m.state == "READY" for m in idx.models),
          "digits READY again: %s" % [(m.name, m.version, m.state) for m in idx.models])
    r = code(s.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="nope"),
             metadata=A, timeout=10)
    check(r.startswith("NOT_FOUND"), "RepositoryModelLoad of a model not in the repository: %s" % r)
    c = s.ModelConfig(pb.ModelConfigRequest(name="matmul"), metadata=I, timeout=10).config
    check(c.name == "matmul" and c.max_batch_size == 256 and c.input[0].data_type == pb.TYPE_FP32
          and list(c.input[0].dims) == [256] and list(c.dynamic_batching.preferred_batch_size)
          == [1, 16, 64, 256] and c.dynamic_batching.max_queue_delay_microseconds == 200,
          "ModelConfig matmul (Triton's messages): max_batch_size %d, dims %s, preferred %s"
          % (c.max_batch_size, list(c.input[0].dims), list(c.dynamic_batching.preferred_batch_size)))
    st = s.ModelStatistics(pb.ModelStatisticsRequest(), metadata=I, timeout=10).model_stats
    names = sorted(m.name for m in st)
    check(names == ["digits", "matmul"] and all(
        sum(b.compute_infer.count for b in m.batch_stats) == m.execution_count for m in st),
        "ModelStatistics (every model): %s, per-bucket counts add up" % names)
    r = code(s.ModelStatistics, pb.ModelStatisticsRequest(name="nope"), metadata=I, timeout=10)
    check(r.startswith("NOT_FOUND"), "ModelStatistics of an unknown model: %s" % r)
sys.exit(1 if bad else 0)
EOF
  [ $? = 0 ] || FAIL=1
else
  FAIL=1
fi
# Server reflection (grpc.reflection.v1 and v1alpha, stubs from the reflection protocol's own
# definition written here): list every service, resolve every method's message types, build
# the messages from the reflected descriptors alone and call ServerLive and ModelMetadata with
# them, as grpcurl does without .proto files.
mkdir -p "$WORK/refl/proto" "$WORK/rgen"
for pkg in v1 v1alpha; do
  cat >"$WORK/refl/proto/refl_$pkg.proto" <<EOF
syntax = "proto3";
package grpc.reflection.$pkg;
service ServerReflection {
  rpc ServerReflectionInfo(stream ServerReflectionRequest) returns (stream ServerReflectionResponse);
}
message ServerReflectionRequest {
  string host = 1;
  oneof message_request { string file_by_filename = 3; string file_containing_symbol = 4;
    ExtensionRequest file_containing_extension = 5; string all_extension_numbers_of_type = 6;
    string list_services = 7; }
}
message ExtensionRequest { string containing_type = 1; int32 extension_number = 2; }
message ServerReflectionResponse {
  string valid_host = 1;
  ServerReflectionRequest original_request = 2;
  oneof message_response { FileDescriptorResponse file_descriptor_response = 4;
    ExtensionNumberResponse all_extension_numbers_response = 5;
    ListServiceResponse list_services_response = 6; ErrorResponse error_response = 7; }
}
message FileDescriptorResponse { repeated bytes file_descriptor_proto = 1; }
message ExtensionNumberResponse { string base_type_name = 1; repeated int32 extension_number = 2; }
message ListServiceResponse { repeated ServiceResponse service = 1; }
message ServiceResponse { string name = 1; }
message ErrorResponse { int32 error_code = 1; string error_message = 2; }
EOF
done
if grpc_stubs "$WORK/refl" "$WORK/rgen" refl_v1.proto refl_v1alpha.proto; then
  PYTHONPATH=$WORK/rgen $PY - "127.0.0.1:$NPORT" "$INFER_TOKEN" <<'EOF'
import sys, grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
import refl_v1_pb2 as v1, refl_v1_pb2_grpc as v1g, refl_v1alpha_pb2 as va, refl_v1alpha_pb2_grpc as vag
target, token = sys.argv[1:3]
bad = 0
def check(cond, what):
    global bad
    print(("ok: " if cond else "FAIL: ") + what)
    bad += not cond
with grpc.insecure_channel(target) as ch:
    for pb, stubcls, tag in ((v1, v1g.ServerReflectionStub, "v1"),
                             (va, vag.ServerReflectionStub, "v1alpha")):
        stub = stubcls(ch)
        reqs = [pb.ServerReflectionRequest(list_services="")]
        answers = list(stub.ServerReflectionInfo(iter(reqs), timeout=10))
        services = sorted(s.name for s in answers[0].list_services_response.service)
        check({"inference.GRPCInferenceService", "tpud.TpudService", "grpc.health.v1.Health",
               "grpc.reflection.v1.ServerReflection",
               "grpc.reflection.v1alpha.ServerReflection"} <= set(services),
              "%s list_services: %s" % (tag, services))
        # One stream, a request per service, answered in order (a bidirectional stream).
        answers = list(stub.ServerReflectionInfo(
            iter([pb.ServerReflectionRequest(file_containing_symbol=s) for s in services] +
                 [pb.ServerReflectionRequest(file_containing_symbol="inference.NoSuchMessage"),
                  pb.ServerReflectionRequest(file_by_filename="grpc_service.proto")]),
            timeout=10))
        check(len(answers) == len(services) + 2, "%s: %d answers on one stream for %d requests"
              % (tag, len(answers), len(services) + 2))
        pool = descriptor_pool.DescriptorPool()
        files = {}
        for a in answers[:len(services)]:
            for raw in a.file_descriptor_response.file_descriptor_proto:
                fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
                if fdp.name not in files:
                    files[fdp.name] = fdp
                    pool.Add(fdp)
        unresolved = []
        nmethods = 0
        for svc in services:
            sd = pool.FindServiceByName(svc)
            for m in sd.methods:
                nmethods += 1
                for t in (m.input_type, m.output_type):
                    if t.full_name not in [x.full_name for x in t.file.message_types_by_name.values()] \
                            and not pool.FindMessageTypeByName(t.full_name):
                        unresolved.append(t.full_name)
        check(not unresolved and nmethods >= 19,
              "%s: %d methods of %d services, every input and output type resolved from %s"
              % (tag, nmethods, len(services), sorted(files)))
        e = answers[len(services)].error_response
        check(e.error_code == 5 and "inference.NoSuchMessage" in e.error_message,
              "%s: unknown symbol -> error_response %d %s" % (tag, e.error_code, e.error_message))
        check(len(answers[-1].file_descriptor_response.file_descriptor_proto) == 1,
              "%s: file_by_filename grpc_service.proto" % tag)
    # Messages built from the reflected descriptors alone, sent with a generic stub.
    def cls(name):
        d = pool.FindMessageTypeByName(name)
        return message_factory.GetMessageClass(d) if hasattr(message_factory, "GetMessageClass") \
            else message_factory.MessageFactory(pool).GetPrototype(d)
    Req, Resp = cls("inference.ServerLiveRequest"), cls("inference.ServerLiveResponse")
    live = ch.unary_unary("/inference.GRPCInferenceService/ServerLive",
                          request_serializer=Req.SerializeToString,
                          response_deserializer=Resp.FromString)(Req(), timeout=10,
                          metadata=[("authorization", "Bearer " + token)])
    MReq, MResp = cls("inference.ModelMetadataRequest"), cls("inference.ModelMetadataResponse")
    md = ch.unary_unary("/inference.GRPCInferenceService/ModelMetadata",
                        request_serializer=MReq.SerializeToString,
                        response_deserializer=MResp.FromString)(MReq(name="digits"), timeout=10,
                        metadata=[("authorization", "Bearer " + token)])
    check(live.live and md.inputs[0].name == "x",
          "ServerLive and ModelMetadata called with messages from reflection alone: live %s, "
          "digits input %s" % (live.live, md.inputs[0].name))
sys.exit(1 if bad else 0)
EOF
  [ $? = 0 ] || FAIL=1
else
  FAIL=1
fi
stop
crashed

# ---- 4. TLS with client certificates ----
echo "-- 4. TLS with client certificates ($((SECONDS - T0)) s)"
start --tls-cert "$P/server.pem" --tls-key "$P/server.key" --tls-client-ca "$P/ca.pem" \
  --audit-log "$WORK/tls-audit.log"
client tls --http https://127.0.0.1:$HPORT --tls-ca "$P/ca.pem" --tls-cert "$P/alice.pem" \
  --tls-key "$P/alice.key"
out=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$NPORT -CAfile "$P/ca.pem" \
  -cert "$P/alice.pem" -key "$P/alice.key" -alpn h2 2>&1 | tr -d '\0')
echo "$out" | grep -q "ALPN protocol: h2" && ok "s_client offering only h2: the server selects h2" ||
  fail "ALPN h2 not selected: $(echo "$out" | grep -E 'ALPN|New,')"
stop
crashed
client tls-audit --audit-log "$WORK/tls-audit.log"
out=$("$TPUCTL" audit verify "$WORK/tls-audit.log" 2>&1) && ok "tpuctl audit verify (TLS run): $out" ||
  fail "audit verify (TLS run): $out"

echo "test_grpc: $((SECONDS - T0)) s"
[ $FAIL = 0 ] && echo "test_grpc: all passed" || echo "test_grpc: FAILED"
exit $FAIL
