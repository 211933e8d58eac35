/*
 * test_envelope.c - proto/tpu_envelope.c: the method table, encoding, decoding and their errors.
 *
 * Round trips go through the real frame decoder, so each one exercises header, envelope and
 * payload together. Malformed inputs are written by hand with wire.h, never by the encoder under
 * test.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"
#include "tpu_envelope.h"
#include "tpu_test.h"

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

/* ---- sample messages, one request and one response per method ---- */

static ProtobufCMessage *sample_request(int method) {
  static Inference__ServerLiveRequest live = INFERENCE__SERVER_LIVE_REQUEST__INIT;
  static Inference__ServerReadyRequest ready = INFERENCE__SERVER_READY_REQUEST__INIT;
  static Inference__ModelReadyRequest mready = INFERENCE__MODEL_READY_REQUEST__INIT;
  static Inference__ServerMetadataRequest smeta = INFERENCE__SERVER_METADATA_REQUEST__INIT;
  static Inference__ModelMetadataRequest mmeta = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  static Inference__ModelInferRequest infer = INFERENCE__MODEL_INFER_REQUEST__INIT;
  static Inference__ModelInferRequest__InferInputTensor in = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
  static Inference__ModelInferRequest__InferInputTensor *ins[1] = {&in};
  static Inference__ModelInferRequest__InferRequestedOutputTensor out = INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT;
  static Inference__ModelInferRequest__InferRequestedOutputTensor *outs[1] = {&out};
  static Inference__InferParameter prio = INFERENCE__INFER_PARAMETER__INIT;
  static Inference__ModelInferRequest__ParametersEntry pe = INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
  static Inference__ModelInferRequest__ParametersEntry *pes[1] = {&pe};
  static int64_t shape[2] = {2, 3};
  static float x[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
  static ProtobufCBinaryData raw[1];
  static Tpud__ModelLoadRequest load = TPUD__MODEL_LOAD_REQUEST__INIT;
  static Tpud__ModelUnloadRequest unload = TPUD__MODEL_UNLOAD_REQUEST__INIT;
  static Tpud__MatMulRequest mm = TPUD__MAT_MUL_REQUEST__INIT;
  static Tpud__Tensor a = TPUD__TENSOR__INIT, b = TPUD__TENSOR__INIT;
  static int64_t ashape[2] = {2, 3}, bshape[2] = {3, 1};
  static int8_t av[6] = {1, 2, 3, -4, -5, 127}, bv[3] = {-128, 0, 9};
  static Tpud__RepositoryIndexRequest idx = TPUD__REPOSITORY_INDEX_REQUEST__INIT;

  switch (method) {
  case TPUD__METHOD__SERVER_LIVE:
    return &live.base;
  case TPUD__METHOD__SERVER_READY:
    return &ready.base;
  case TPUD__METHOD__MODEL_READY:
    mready.name = "mnist";
    mready.version = "2";
    return &mready.base;
  case TPUD__METHOD__SERVER_METADATA:
    return &smeta.base;
  case TPUD__METHOD__MODEL_METADATA:
    mmeta.name = "mnist";
    return &mmeta.base;
  case TPUD__METHOD__MODEL_INFER:
    in.name = "x";
    in.datatype = "FP32";
    in.n_shape = 2;
    in.shape = shape;
    out.name = "probs";
    prio.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    prio.int64_param = -5;
    pe.key = "priority";
    pe.value = &prio;
    raw[0].data = (uint8_t *)x;
    raw[0].len = sizeof x;
    infer.model_name = "mnist";
    infer.model_version = "1";
    infer.id = "req-42";
    infer.n_parameters = 1;
    infer.parameters = pes;
    infer.n_inputs = 1;
    infer.inputs = ins;
    infer.n_outputs = 1;
    infer.outputs = outs;
    infer.n_raw_input_contents = 1;
    infer.raw_input_contents = raw;
    return &infer.base;
  case TPUD__METHOD__MODEL_LOAD:
    load.name = "mnist";
    load.version = "3";
    return &load.base;
  case TPUD__METHOD__MODEL_UNLOAD:
    unload.name = "mnist";
    return &unload.base;
  case TPUD__METHOD__MATMUL:
    a.n_shape = 2;
    a.shape = ashape;
    a.datatype = "INT8";
    a.data.data = (uint8_t *)av;
    a.data.len = sizeof av;
    b.n_shape = 2;
    b.shape = bshape;
    b.datatype = "INT8";
    b.data.data = (uint8_t *)bv;
    b.data.len = sizeof bv;
    mm.a = &a;
    mm.b = &b;
    return &mm.base;
  case TPUD__METHOD__REPOSITORY_INDEX:
    idx.ready_only = 1;
    return &idx.base;
  case TPUD__METHOD__HEALTH_CHECK: {
    static Grpc__Health__V1__HealthCheckRequest hc = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    hc.service = "digits";
    return &hc.base;
  }
  case TPUD__METHOD__OIP_REPOSITORY_INDEX: {
    static Inference__RepositoryIndexRequest ri = INFERENCE__REPOSITORY_INDEX_REQUEST__INIT;
    ri.ready = 1;
    return &ri.base;
  }
  case TPUD__METHOD__OIP_REPOSITORY_MODEL_LOAD: {
    static Inference__RepositoryModelLoadRequest rl = INFERENCE__REPOSITORY_MODEL_LOAD_REQUEST__INIT;
    rl.model_name = "digits";
    return &rl.base;
  }
  case TPUD__METHOD__OIP_MODEL_CONFIG: {
    static Inference__ModelConfigRequest mc = INFERENCE__MODEL_CONFIG_REQUEST__INIT;
    mc.name = "digits";
    return &mc.base;
  }
  case TPUD__METHOD__OIP_MODEL_STATISTICS: {
    static Inference__ModelStatisticsRequest ms = INFERENCE__MODEL_STATISTICS_REQUEST__INIT;
    ms.name = "digits";
    ms.version = "1";
    return &ms.base;
  }
  case TPUD__METHOD__OIP_REPOSITORY_MODEL_UNLOAD: {
    static Inference__RepositoryModelUnloadRequest ru =
        INFERENCE__REPOSITORY_MODEL_UNLOAD_REQUEST__INIT;
    ru.model_name = "digits";
    return &ru.base;
  }
  default:
    return NULL;
  }
}

static ProtobufCMessage *sample_response(int method) {
  static Inference__ServerLiveResponse live = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  static Inference__ServerReadyResponse ready = INFERENCE__SERVER_READY_RESPONSE__INIT;
  static Inference__ModelReadyResponse mready = INFERENCE__MODEL_READY_RESPONSE__INIT;
  static Inference__ServerMetadataResponse smeta = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
  static char *exts[2] = {"binary_tensor_data", "tpud_matmul"};
  static Inference__ModelMetadataResponse mmeta = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
  static Inference__ModelMetadataResponse__TensorMetadata tin = INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
  static Inference__ModelMetadataResponse__TensorMetadata *tins[1] = {&tin};
  static int64_t tshape[2] = {-1, 64};
  static char *versions[2] = {"1", "2"};
  static Inference__ModelInferResponse infer = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  static Inference__ModelInferResponse__InferOutputTensor o = INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
  static Inference__ModelInferResponse__InferOutputTensor *os[1] = {&o};
  static int64_t oshape[2] = {1, 3};
  static float probs[3] = {0.25f, 0.5f, 0.25f};
  static ProtobufCBinaryData raw[1];
  static Tpud__ModelLoadResponse load = TPUD__MODEL_LOAD_RESPONSE__INIT;
  static Tpud__ModelUnloadResponse unload = TPUD__MODEL_UNLOAD_RESPONSE__INIT;
  static Tpud__MatMulResponse mm = TPUD__MAT_MUL_RESPONSE__INIT;
  static Tpud__Tensor c = TPUD__TENSOR__INIT;
  static int64_t cshape[2] = {2, 1};
  static int32_t cv[2] = {-101, 1665};
  static Tpud__RepositoryIndexResponse idx = TPUD__REPOSITORY_INDEX_RESPONSE__INIT;
  static Tpud__RepositoryIndexResponse__ModelIndex m1 = TPUD__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
  static Tpud__RepositoryIndexResponse__ModelIndex m2 = TPUD__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
  static Tpud__RepositoryIndexResponse__ModelIndex *ms[2] = {&m1, &m2};

  switch (method) {
  case TPUD__METHOD__SERVER_LIVE:
    live.live = 1;
    return &live.base;
  case TPUD__METHOD__SERVER_READY:
    ready.ready = 1;
    return &ready.base;
  case TPUD__METHOD__MODEL_READY:
    mready.ready = 0; /* an all-default message: empty payload */
    return &mready.base;
  case TPUD__METHOD__SERVER_METADATA:
    smeta.name = "tpud";
    smeta.version = "0.1.0";
    smeta.n_extensions = 2;
    smeta.extensions = exts;
    return &smeta.base;
  case TPUD__METHOD__MODEL_METADATA:
    tin.name = "x";
    tin.datatype = "FP32";
    tin.n_shape = 2;
    tin.shape = tshape;
    mmeta.name = "mnist";
    mmeta.n_versions = 2;
    mmeta.versions = versions;
    mmeta.platform = "tpud";
    mmeta.n_inputs = 1;
    mmeta.inputs = tins;
    return &mmeta.base;
  case TPUD__METHOD__MODEL_INFER:
    o.name = "probs";
    o.datatype = "FP32";
    o.n_shape = 2;
    o.shape = oshape;
    raw[0].data = (uint8_t *)probs;
    raw[0].len = sizeof probs;
    infer.model_name = "mnist";
    infer.model_version = "1";
    infer.id = "req-42";
    infer.n_outputs = 1;
    infer.outputs = os;
    infer.n_raw_output_contents = 1;
    infer.raw_output_contents = raw;
    return &infer.base;
  case TPUD__METHOD__MODEL_LOAD:
    load.name = "mnist";
    load.n_versions = 2;
    load.versions = versions;
    return &load.base;
  case TPUD__METHOD__MODEL_UNLOAD:
    unload.name = "mnist";
    unload.n_versions = 1;
    unload.versions = versions;
    return &unload.base;
  case TPUD__METHOD__MATMUL:
    c.n_shape = 2;
    c.shape = cshape;
    c.datatype = "INT32";
    c.data.data = (uint8_t *)cv;
    c.data.len = sizeof cv;
    mm.c = &c;
    mm.systolic_cycles = 385;
    mm.systolic_rows = 128;
    mm.systolic_cols = 128;
    mm.systolic_utilization = 6.0 / (385.0 * 128 * 128);
    mm.compute_us = 3;
    return &mm.base;
  case TPUD__METHOD__REPOSITORY_INDEX:
    m1.name = "mnist";
    m1.version = "1";
    m1.state = TPUD__MODEL_STATE__MODEL_STATE_READY;
    m2.name = "mnist";
    m2.version = "2";
    m2.state = TPUD__MODEL_STATE__MODEL_STATE_FAILED;
    m2.reason = "checkpoint sha256 mismatch";
    idx.n_models = 2;
    idx.models = ms;
    return &idx.base;
  case TPUD__METHOD__HEALTH_CHECK: {
    static Grpc__Health__V1__HealthCheckResponse hr = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    hr.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    return &hr.base;
  }
  case TPUD__METHOD__OIP_REPOSITORY_INDEX: {
    static Inference__RepositoryIndexResponse__ModelIndex mi =
        INFERENCE__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
    static Inference__RepositoryIndexResponse__ModelIndex *mis[] = {&mi};
    static Inference__RepositoryIndexResponse rr = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
    mi.name = "digits";
    mi.version = "1";
    mi.state = "READY";
    rr.n_models = 1;
    rr.models = mis;
    return &rr.base;
  }
  case TPUD__METHOD__OIP_REPOSITORY_MODEL_LOAD: {
    static Inference__RepositoryModelLoadResponse lr = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
    return &lr.base;
  }
  case TPUD__METHOD__OIP_MODEL_CONFIG: {
    static Inference__ModelConfig mcfg = INFERENCE__MODEL_CONFIG__INIT;
    static Inference__ModelConfigResponse cr = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    mcfg.name = "digits";
    mcfg.max_batch_size = 64;
    cr.config = &mcfg;
    return &cr.base;
  }
  case TPUD__METHOD__OIP_MODEL_STATISTICS: {
    static Inference__ModelStatistics st = INFERENCE__MODEL_STATISTICS__INIT;
    static Inference__ModelStatistics *sts[] = {&st};
    static Inference__ModelStatisticsResponse sr = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    st.name = "digits";
    st.version = "1";
    st.inference_count = 9;
    sr.n_model_stats = 1;
    sr.model_stats = sts;
    return &sr.base;
  }
  case TPUD__METHOD__OIP_REPOSITORY_MODEL_UNLOAD: {
    static Inference__RepositoryModelUnloadResponse ur =
        INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
    return &ur.base;
  }
  default:
    return NULL;
  }
}

/* Packs a message into a malloc'd buffer (at least 1 byte, so never NULL). */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *b = malloc(*len ? *len : 1);
  CU_ASSERT_FATAL(b != NULL);
  CU_ASSERT_EQUAL(protobuf_c_message_pack(m, b), *len);
  return b;
}

/* Asserts that `m` packs to exactly want[0..n). */
static int packs_to(const ProtobufCMessage *m, const uint8_t *want, size_t n) {
  size_t len;
  uint8_t *b = pack(m, &len);
  int same = len == n && (n == 0 || memcmp(b, want, n) == 0);
  free(b);
  return same;
}

/* Runs a whole frame through a fresh frame decoder; returns the message view. */
static tpu_frame_t deframe(tpu_frame_decoder_t *d, const uint8_t *frame, size_t len) {
  size_t used = 0;
  tpu_frame_t f = {0};
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, frame, len, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(used, len);
  return f;
}

/* ---- the method table ---- */

static void test_method_table_matches_services(void) {
  const ProtobufCEnumDescriptor *md = &tpud__method__descriptor;
  const ProtobufCServiceDescriptor *oip = &inference__grpcinference_service__descriptor;
  const ProtobufCServiceDescriptor *ext = &tpud__tpud_service__descriptor;
  const ProtobufCServiceDescriptor *health = &grpc__health__v1__health__descriptor;
  CU_ASSERT_STRING_EQUAL(oip->name, "inference.GRPCInferenceService");
  CU_ASSERT_STRING_EQUAL(ext->name, "tpud.TpudService");
  CU_ASSERT_STRING_EQUAL(health->name, "grpc.health.v1.Health");
  unsigned known = 0;
  for (unsigned i = 0; i < md->n_values; i++) {
    int v = md->values[i].value;
    const tpu_method_info_t *info = tpu_envelope_method_info(v);
    if (v == 0) {
      CU_ASSERT_PTR_NULL(info); /* METHOD_UNSPECIFIED */
      continue;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(info);
    CU_ASSERT_EQUAL((int)info->method, v);
    const ProtobufCServiceDescriptor *svc = strcmp(info->service, oip->name) == 0    ? oip
                                            : strcmp(info->service, health->name) == 0 ? health
                                                                                       : ext;
    CU_ASSERT_STRING_EQUAL(svc->name, info->service);
    const ProtobufCMethodDescriptor *m =
        protobuf_c_service_descriptor_get_method_by_name(svc, info->name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_EQUAL(m->input, info->request);
    CU_ASSERT_PTR_EQUAL(m->output, info->response);
    known++;
  }
  /* every rpc of the services has exactly one method number; Health's Watch (a stream) none */
  CU_ASSERT_EQUAL(known, oip->n_methods + ext->n_methods + health->n_methods - 1);
  CU_ASSERT_PTR_NULL(tpu_envelope_method_info(-1));
  CU_ASSERT_PTR_NULL(tpu_envelope_method_info((int)md->n_values));
  CU_ASSERT_PTR_NULL(tpu_envelope_method_info(INT_MAX));
  CU_ASSERT_STRING_EQUAL(tpu_envelope_method_info(TPUD__METHOD__MODEL_INFER)->name, "ModelInfer");
  CU_ASSERT_STRING_EQUAL(tpu_envelope_method_info(TPUD__METHOD__MATMUL)->name, "MatMul");
}

static void test_status_codes_are_grpc(void) {
  static const char *const grpc[17] = {
      "OK",        "CANCELLED",          "UNKNOWN",   "INVALID_ARGUMENT",  "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",     "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  for (int c = 0; c < 17; c++) {
    const char *name = tpu_envelope_code_name(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(name);
    CU_ASSERT_STRING_EQUAL(name, grpc[c]);
  }
  CU_ASSERT_PTR_NULL(tpu_envelope_code_name(17));
  CU_ASSERT_PTR_NULL(tpu_envelope_code_name(-1));
  /* tpu_frame.c maps statuses with its own numeric constants: they must be these codes */
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_OK), TPUD__STATUS_CODE__OK);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_ETOOBIG),
                  TPUD__STATUS_CODE__RESOURCE_EXHAUSTED);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_EPAYLOAD),
                  TPUD__STATUS_CODE__RESOURCE_EXHAUSTED);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_EMETHOD), TPUD__STATUS_CODE__UNIMPLEMENTED);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_ECOMPRESSED),
                  TPUD__STATUS_CODE__UNIMPLEMENTED);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_EDECODE),
                  TPUD__STATUS_CODE__INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_ENOID), TPUD__STATUS_CODE__INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_EINVAL), TPUD__STATUS_CODE__INTERNAL);
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(TPU_PROTO_ECODE), TPUD__STATUS_CODE__UNKNOWN);
}

/* ---- round trips ---- */

static void test_roundtrip_every_method(void) {
  const char *md[] = {"authorization", "Bearer t0k3n", "x-empty", NULL};
  tpu_frame_decoder_t *d = NULL;
  CU_ASSERT_FATAL(tpu_frame_decoder_create(0, &d) == TPU_PROTO_OK);
  for (int m = 1; m <= 16; m++) {
    const tpu_method_info_t *info = tpu_envelope_method_info(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info);
    const ProtobufCMessage *req = sample_request(m), *resp = sample_response(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    CU_ASSERT_PTR_NOT_NULL_FATAL(resp);
    CU_ASSERT_PTR_EQUAL(req->descriptor, info->request);
    CU_ASSERT_PTR_EQUAL(resp->descriptor, info->response);
    size_t req_len, resp_len;
    uint8_t *req_bytes = pack(req, &req_len), *resp_bytes = pack(resp, &resp_len);

    /* request: message form and pre-serialized form encode to the same frame */
    tpu_envelope_request_t r = {.id = 1000u + (uint64_t)m, .method = m,
                                .timeout_us = (uint64_t)m * 250000u, .metadata = md,
                                .n_metadata = 2, .payload_msg = req};
    uint8_t *frame = NULL, buf[4096];
    size_t frame_len = 0, buf_len = 0;
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_request_alloc(&r, &frame, &frame_len, NULL),
                          TPU_PROTO_OK);
    r.payload_msg = NULL;
    r.payload = req_bytes;
    r.payload_len = req_len;
    CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, sizeof buf, &buf_len, NULL),
                    TPU_PROTO_OK);
    CU_ASSERT(buf_len == frame_len && memcmp(buf, frame, frame_len) == 0);

    tpu_frame_t f = deframe(d, frame, frame_len);
    Tpud__RequestEnvelope *env = NULL;
    tpu_proto_error_t err = {0};
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_request(f.data, f.len, SIZE_MAX, &env, &err),
                          TPU_PROTO_OK);
    CU_ASSERT_EQUAL(env->id, 1000u + (uint64_t)m);
    CU_ASSERT_EQUAL((int)env->method, m);
    CU_ASSERT_EQUAL(env->timeout_us, (uint64_t)m * 250000u);
    CU_ASSERT_STRING_EQUAL(tpu_envelope_request_metadata(env, "authorization"), "Bearer t0k3n");
    CU_ASSERT_STRING_EQUAL(tpu_envelope_request_metadata(env, "x-empty"), "");
    CU_ASSERT_PTR_NULL(tpu_envelope_request_metadata(env, "x-missing"));
    CU_ASSERT(env->payload.len == req_len &&
              (req_len == 0 || memcmp(env->payload.data, req_bytes, req_len) == 0));
    ProtobufCMessage *got = NULL;
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_unpack_request_payload(env, &got, NULL), TPU_PROTO_OK);
    CU_ASSERT_PTR_EQUAL(got->descriptor, info->request);
    CU_ASSERT(packs_to(got, req_bytes, req_len));
    protobuf_c_message_free_unpacked(got, NULL);
    tpu_envelope_request_free(env);
    free(frame);

    /* response */
    tpu_envelope_response_t s = {.id = 1000u + (uint64_t)m, .code = TPUD__STATUS_CODE__OK,
                                 .payload_msg = resp};
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_response_alloc(&s, &frame, &frame_len, NULL),
                          TPU_PROTO_OK);
    f = deframe(d, frame, frame_len);
    Tpud__ResponseEnvelope *renv = NULL;
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_response(f.data, f.len, SIZE_MAX, &renv, NULL),
                          TPU_PROTO_OK);
    CU_ASSERT_EQUAL(renv->id, 1000u + (uint64_t)m);
    CU_ASSERT_EQUAL(renv->code, TPUD__STATUS_CODE__OK);
    CU_ASSERT_STRING_EQUAL(renv->message, "");
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_unpack_response_payload(renv, m, &got, NULL),
                          TPU_PROTO_OK);
    CU_ASSERT_PTR_EQUAL(got->descriptor, info->response);
    CU_ASSERT(packs_to(got, resp_bytes, resp_len));
    protobuf_c_message_free_unpacked(got, NULL);
    tpu_envelope_response_free(renv);
    free(frame);
    free(req_bytes);
    free(resp_bytes);
  }
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(d, NULL), TPU_PROTO_OK);
  tpu_frame_decoder_free(d);
}

static void test_error_response_roundtrip(void) {
  tpu_envelope_response_t s = {.id = 77, .code = TPUD__STATUS_CODE__NOT_FOUND,
                               .message = "model 'nope' not found: expected one of mnist"};
  uint8_t buf[256];
  size_t n;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_response(&s, buf, sizeof buf, &n, NULL),
                        TPU_PROTO_OK);
  Tpud__ResponseEnvelope *env = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_response(buf + 5, n - 5, SIZE_MAX, &env, NULL),
                        TPU_PROTO_OK);
  CU_ASSERT_EQUAL(env->id, 77u);
  CU_ASSERT_EQUAL(env->code, TPUD__STATUS_CODE__NOT_FOUND);
  CU_ASSERT_STRING_EQUAL(env->message, s.message);
  CU_ASSERT_EQUAL(env->payload.len, 0u);
  tpu_envelope_response_free(env);
  /* every gRPC code survives the trip */
  for (int c = 0; c <= 16; c++) {
    tpu_envelope_response_t e = {.id = 1, .code = c};
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_response(&e, buf, sizeof buf, &n, NULL),
                          TPU_PROTO_OK);
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_response(buf + 5, n - 5, SIZE_MAX, &env, NULL),
                          TPU_PROTO_OK);
    CU_ASSERT_EQUAL((int)env->code, c);
    tpu_envelope_response_free(env);
  }
}

/* The hand-written encoder must produce exactly what protobuf-c's pack produces. */
static void test_encoding_matches_protobuf_c(void) {
  static const uint8_t payload[] = {0x0a, 0x05, 'm', 'n', 'i', 's', 't', 0x00, 0xff};
  const char *md[] = {"authorization", "Bearer abc", "", "", "k", NULL};

  Tpud__RequestEnvelope__MetadataEntry e[3] = {TPUD__REQUEST_ENVELOPE__METADATA_ENTRY__INIT,
                                               TPUD__REQUEST_ENVELOPE__METADATA_ENTRY__INIT,
                                               TPUD__REQUEST_ENVELOPE__METADATA_ENTRY__INIT};
  Tpud__RequestEnvelope__MetadataEntry *ep[3] = {&e[0], &e[1], &e[2]};
  e[0].key = "authorization";
  e[0].value = "Bearer abc";
  e[1].key = "";
  e[1].value = "";
  e[2].key = "k";
  e[2].value = "";
  Tpud__RequestEnvelope q = TPUD__REQUEST_ENVELOPE__INIT;
  q.id = UINT64_MAX;
  q.method = TPUD__METHOD__REPOSITORY_INDEX;
  q.timeout_us = 1500000;
  q.n_metadata = 3;
  q.metadata = ep;
  q.payload.data = (uint8_t *)payload;
  q.payload.len = sizeof payload;

  tpu_envelope_request_t r = {.id = UINT64_MAX, .method = TPUD__METHOD__REPOSITORY_INDEX,
                              .timeout_us = 1500000, .metadata = md, .n_metadata = 3,
                              .payload = payload, .payload_len = sizeof payload};
  uint8_t buf[512];
  size_t n;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_request(&r, buf, sizeof buf, &n, NULL), TPU_PROTO_OK);
  CU_ASSERT(packs_to(&q.base, buf + 5, n - 5));
  CU_ASSERT_EQUAL(buf[0], 0);
  CU_ASSERT_EQUAL(((size_t)buf[1] << 24 | (size_t)buf[2] << 16 | (size_t)buf[3] << 8 | buf[4]),
                  n - 5);

  /* the same with a minimal request: only id and method */
  Tpud__RequestEnvelope q2 = TPUD__REQUEST_ENVELOPE__INIT;
  q2.id = 1;
  q2.method = TPUD__METHOD__SERVER_LIVE;
  tpu_envelope_request_t r2 = {.id = 1, .method = TPUD__METHOD__SERVER_LIVE};
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_request(&r2, buf, sizeof buf, &n, NULL),
                        TPU_PROTO_OK);
  CU_ASSERT(packs_to(&q2.base, buf + 5, n - 5));
  CU_ASSERT_EQUAL(n, 5u + 4u); /* 08 01 10 01 */

  Tpud__ResponseEnvelope__MetadataEntry re = TPUD__RESPONSE_ENVELOPE__METADATA_ENTRY__INIT;
  Tpud__ResponseEnvelope__MetadataEntry *rep[1] = {&re};
  re.key = "x-batch";
  re.value = "17";
  const char *rmd[] = {"x-batch", "17"};
  Tpud__ResponseEnvelope s = TPUD__RESPONSE_ENVELOPE__INIT;
  s.id = 300;
  s.code = TPUD__STATUS_CODE__UNAUTHENTICATED;
  s.message = "token 'x' is not valid";
  s.payload.data = (uint8_t *)payload;
  s.payload.len = sizeof payload;
  s.n_metadata = 1;
  s.metadata = rep;
  tpu_envelope_response_t t = {.id = 300, .code = TPUD__STATUS_CODE__UNAUTHENTICATED,
                               .message = "token 'x' is not valid", .metadata = rmd,
                               .n_metadata = 1, .payload = payload,
                               .payload_len = sizeof payload};
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_response(&t, buf, sizeof buf, &n, NULL),
                        TPU_PROTO_OK);
  CU_ASSERT(packs_to(&s.base, buf + 5, n - 5));
}

/* Requests pipelined in one buffer, fed in random splits; responses encoded out of order. */
static void test_pipelined_stream(void) {
  uint8_t *stream = NULL;
  size_t total = 0;
  for (int m = 1; m <= 10; m++) {
    tpu_envelope_request_t r = {.id = (uint64_t)m * 11u, .method = m,
                                .payload_msg = sample_request(m)};
    uint8_t *frame;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_request_alloc(&r, &frame, &n, NULL), TPU_PROTO_OK);
    uint8_t *grown = realloc(stream, total + n);
    CU_ASSERT_FATAL(grown != NULL);
    stream = grown;
    memcpy(stream + total, frame, n);
    total += n;
    free(frame);
  }
  tpu_frame_decoder_t *d = NULL;
  CU_ASSERT_FATAL(tpu_frame_decoder_create(0, &d) == TPU_PROTO_OK);
  int next = 1;
  size_t off = 0;
  while (off < total) {
    size_t chunk = (size_t)tpu_test_rand_range(1, 64);
    if (chunk > total - off) chunk = total - off;
    const uint8_t *p = stream + off;
    size_t left = chunk;
    for (;;) {
      size_t used;
      tpu_frame_t f;
      tpu_proto_status_t st = tpu_frame_decoder_feed(d, p, left, &used, &f, NULL);
      p += used;
      left -= used;
      if (st == TPU_PROTO_EAGAIN) break;
      TPU_ASSERT_SEED(st == TPU_PROTO_OK);
      if (st != TPU_PROTO_OK) goto out;
      Tpud__RequestEnvelope *env = NULL;
      TPU_ASSERT_SEED(tpu_envelope_decode_request(f.data, f.len, SIZE_MAX, &env, NULL) ==
                      TPU_PROTO_OK);
      if (!env) goto out;
      TPU_ASSERT_SEED((int)env->method == next && env->id == (uint64_t)next * 11u);
      ProtobufCMessage *msg = NULL;
      TPU_ASSERT_SEED(tpu_envelope_unpack_request_payload(env, &msg, NULL) == TPU_PROTO_OK);
      if (msg) protobuf_c_message_free_unpacked(msg, NULL);
      tpu_envelope_request_free(env);
      next++;
    }
    off += chunk;
  }
out:
  TPU_ASSERT_SEED(next == 11);
  tpu_frame_decoder_free(d);
  free(stream);

  /* responses in reverse order are matched back to their methods by id */
  int method_of_id[111] = {0};
  for (int m = 1; m <= 10; m++) method_of_id[m * 11] = m;
  for (int m = 10; m >= 1; m--) {
    tpu_envelope_response_t s = {.id = (uint64_t)m * 11u, .payload_msg = sample_response(m)};
    uint8_t *frame;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_encode_response_alloc(&s, &frame, &n, NULL),
                          TPU_PROTO_OK);
    Tpud__ResponseEnvelope *env = NULL;
    CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_response(frame + 5, n - 5, SIZE_MAX, &env, NULL),
                          TPU_PROTO_OK);
    CU_ASSERT_FATAL(env->id <= 110);
    ProtobufCMessage *msg = NULL;
    CU_ASSERT_EQUAL(tpu_envelope_unpack_response_payload(env, method_of_id[env->id], &msg, NULL),
                    TPU_PROTO_OK);
    CU_ASSERT(msg && msg->descriptor == sample_response(m)->descriptor);
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    tpu_envelope_response_free(env);
    free(frame);
  }
}

/* ---- encoding errors ---- */

static void test_encode_errors(void) {
  uint8_t buf[256];
  size_t n = 123;
  tpu_proto_error_t err = {0};
  tpu_envelope_request_t r = {.id = 0, .method = TPUD__METHOD__SERVER_LIVE};
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, sizeof buf, &n, &err), TPU_PROTO_ENOID);
  CU_ASSERT(has(err.msg, "non-zero id"));
  CU_ASSERT_EQUAL(n, 0u);
  const int bad_methods[] = {0, 17, -5, INT_MAX};
  for (size_t i = 0; i < 4; i++) {
    r.id = 9;
    r.method = bad_methods[i];
    CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, sizeof buf, &n, &err), TPU_PROTO_EMETHOD);
    CU_ASSERT_EQUAL(err.request_id, 9u);
    CU_ASSERT(has(err.msg, "unknown method"));
  }
  r.method = TPUD__METHOD__SERVER_LIVE;
  const char *bad_md[] = {NULL, "v"};
  r.metadata = bad_md;
  r.n_metadata = 1;
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, sizeof buf, &n, &err), TPU_PROTO_EINVAL);
  CU_ASSERT(has(err.msg, "NULL key"));
  r.metadata = NULL;
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, sizeof buf, &n, &err), TPU_PROTO_EINVAL);
  r.n_metadata = 0;
  r.payload_len = 4; /* payload NULL */
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, sizeof buf, &n, &err), TPU_PROTO_EINVAL);
  r.payload_len = 0;
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(NULL, buf, sizeof buf, &n, NULL), TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, NULL, 10, &n, NULL), TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, sizeof buf, NULL, NULL), TPU_PROTO_EINVAL);
  uint8_t *frame = (uint8_t *)"x";
  r.id = 0;
  CU_ASSERT_EQUAL(tpu_envelope_encode_request_alloc(&r, &frame, &n, &err), TPU_PROTO_ENOID);
  CU_ASSERT_PTR_NULL(frame);
  CU_ASSERT_EQUAL(err.status, TPU_PROTO_ENOID);
  CU_ASSERT_EQUAL(tpu_envelope_encode_request_alloc(NULL, &frame, &n, NULL), TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_envelope_encode_request_alloc(&r, NULL, &n, NULL), TPU_PROTO_EINVAL);

  const int bad_codes[] = {17, -1, 1000};
  for (size_t i = 0; i < 3; i++) {
    tpu_envelope_response_t s = {.id = 5, .code = bad_codes[i]};
    CU_ASSERT_EQUAL(tpu_envelope_encode_response(&s, buf, sizeof buf, &n, &err), TPU_PROTO_ECODE);
    CU_ASSERT_EQUAL(err.request_id, 5u);
    CU_ASSERT(has(err.msg, "0 (OK) to 16"));
    CU_ASSERT_EQUAL(tpu_envelope_encode_response_alloc(&s, &frame, &n, NULL), TPU_PROTO_ECODE);
    CU_ASSERT_PTR_NULL(frame);
  }
  CU_ASSERT_EQUAL(tpu_envelope_encode_response(NULL, buf, sizeof buf, &n, NULL), TPU_PROTO_EINVAL);
}

static void test_encode_buffer_too_small(void) {
  const char *md[] = {"authorization", "Bearer t"};
  tpu_envelope_request_t r = {.id = 3, .method = TPUD__METHOD__MODEL_INFER, .metadata = md,
                              .n_metadata = 1,
                              .payload_msg = sample_request(TPUD__METHOD__MODEL_INFER)};
  size_t need = 0, n = 0;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, NULL, 0, &need, &err), TPU_PROTO_ENOSPC);
  CU_ASSERT(need > 5);
  CU_ASSERT_FATAL(need < 1024);
  uint8_t buf[1024];
  memset(buf, 0xAA, sizeof buf);
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, need - 1, &n, &err), TPU_PROTO_ENOSPC);
  CU_ASSERT_EQUAL(n, need);
  char want[64];
  snprintf(want, sizeof want, "needs %zu bytes", need);
  CU_ASSERT(has(err.msg, want));
  int untouched = 1;
  for (size_t i = 0; i < sizeof buf; i++)
    if (buf[i] != 0xAA) untouched = 0;
  CU_ASSERT(untouched);
  CU_ASSERT_EQUAL(tpu_envelope_encode_request(&r, buf, need, &n, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(n, need);
  CU_ASSERT_EQUAL(buf[need], 0xAA); /* wrote exactly the frame */

  tpu_envelope_response_t s = {.id = 3, .message = "hello"};
  CU_ASSERT_EQUAL(tpu_envelope_encode_response(&s, buf, 6, &n, NULL), TPU_PROTO_ENOSPC);
  CU_ASSERT_EQUAL(n, 5u + 2u + 7u); /* 08 03 | 1a 05 hello */
}

/* ---- decoding errors (inputs written by hand) ---- */

static void test_decode_unknown_method(void) {
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 7);  /* id */
  wire_uint(&w, 2, 99); /* method 99: not a tpud.Method */
  Tpud__RequestEnvelope *env = (Tpud__RequestEnvelope *)1;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, &err), TPU_PROTO_EMETHOD);
  CU_ASSERT_PTR_NULL(env);
  CU_ASSERT_EQUAL(err.request_id, 7u); /* the caller can answer request 7 with UNIMPLEMENTED */
  CU_ASSERT(has(err.msg, "unknown method 99"));
  CU_ASSERT(has(err.msg, "from 1 to 16"));

  wire_t absent = {.n = 0};
  wire_uint(&absent, 1, 8);
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(absent.b, absent.n, SIZE_MAX, &env, &err),
                  TPU_PROTO_EMETHOD);
  CU_ASSERT(has(err.msg, "unknown method 0"));

  wire_t neg = {.n = 0};
  wire_uint(&neg, 1, 9);
  wire_uint(&neg, 2, (uint64_t)-1); /* int32 enum -1, as a 10-byte varint */
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(neg.b, neg.n, SIZE_MAX, &env, &err),
                  TPU_PROTO_EMETHOD);
  CU_ASSERT(has(err.msg, "unknown method -1"));
}

static void test_decode_missing_id(void) {
  wire_t w = {.n = 0};
  wire_uint(&w, 2, TPUD__METHOD__MODEL_INFER);
  Tpud__RequestEnvelope *env = NULL;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, &err), TPU_PROTO_ENOID);
  CU_ASSERT_EQUAL(err.request_id, 0u);
  CU_ASSERT(has(err.msg, "no id"));
  CU_ASSERT(has(err.msg, "non-zero"));
  wire_t z = {.n = 0};
  wire_uint(&z, 1, 0); /* explicit zero */
  wire_uint(&z, 2, TPUD__METHOD__MODEL_INFER);
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(z.b, z.n, SIZE_MAX, &env, &err), TPU_PROTO_ENOID);
  /* a zero-length message is a valid (empty) protobuf, so it is the id that is missing */
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(NULL, 0, SIZE_MAX, &env, &err), TPU_PROTO_ENOID);
  CU_ASSERT_EQUAL(tpu_envelope_decode_request((const uint8_t *)"", 0, SIZE_MAX, &env, &err),
                  TPU_PROTO_ENOID);
  CU_ASSERT_PTR_NULL(env);
}

static void test_decode_garbage(void) {
  static const uint8_t bad_wire_type[] = {0x0f, 0x01};             /* field 1, wire type 7 */
  static const uint8_t field_zero[] = {0x00, 0x01};                /* field number 0 */
  static const uint8_t tag_only[] = {0x08};                        /* id tag, no value */
  static const uint8_t short_bytes[] = {0x08, 0x01, 0x2a, 0x64, 'a', 'b', 'c'}; /* 100 > 3 */
  static const uint8_t truncated_varint[] = {0x08, 0xff, 0xff};
  static const uint8_t text[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  const struct {
    const uint8_t *b;
    size_t n;
  } cases[] = {{bad_wire_type, sizeof bad_wire_type}, {field_zero, sizeof field_zero},
               {tag_only, sizeof tag_only},           {short_bytes, sizeof short_bytes},
               {truncated_varint, sizeof truncated_varint}, {text, sizeof text - 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    Tpud__RequestEnvelope *env = NULL;
    tpu_proto_error_t err = {.request_id = 42};
    CU_ASSERT_EQUAL(tpu_envelope_decode_request(cases[i].b, cases[i].n, SIZE_MAX, &env, &err),
                    TPU_PROTO_EDECODE);
    CU_ASSERT_PTR_NULL(env);
    CU_ASSERT_EQUAL(err.request_id, 0u);
    CU_ASSERT(has(err.msg, "tpud.RequestEnvelope"));
    Tpud__ResponseEnvelope *renv = NULL;
    CU_ASSERT_EQUAL(tpu_envelope_decode_response(cases[i].b, cases[i].n, SIZE_MAX, &renv, &err),
                    TPU_PROTO_EDECODE);
    CU_ASSERT(has(err.msg, "tpud.ResponseEnvelope"));
  }
  /* random bytes: any outcome but a crash or a leak (valgrind run), and never a half-answer */
  for (int i = 0; i < 500; i++) {
    uint8_t b[64];
    size_t n = (size_t)tpu_test_rand_range(0, sizeof b);
    for (size_t j = 0; j < n; j++) b[j] = (uint8_t)tpu_test_rand();
    Tpud__RequestEnvelope *env = NULL;
    tpu_proto_status_t st = tpu_envelope_decode_request(b, n, 16, &env, NULL);
    TPU_ASSERT_SEED((st == TPU_PROTO_OK) == (env != NULL));
    TPU_ASSERT_SEED(st == TPU_PROTO_OK || st == TPU_PROTO_EDECODE || st == TPU_PROTO_ENOID ||
                    st == TPU_PROTO_EMETHOD || st == TPU_PROTO_EPAYLOAD);
    tpu_envelope_request_free(env);
  }
}

static void test_decode_varint_overflow(void) {
  /* an 11-byte varint for the id: longer than any 64-bit value */
  wire_t w = {.n = 0};
  wire_tag(&w, 1, WIRE_VARINT);
  for (int i = 0; i < 10; i++) wire_raw(&w, "\xff", 1);
  wire_raw(&w, "\x01", 1);
  wire_uint(&w, 2, TPUD__METHOD__SERVER_LIVE);
  Tpud__RequestEnvelope *env = NULL;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, &err), TPU_PROTO_EDECODE);
  CU_ASSERT_PTR_NULL(env);
  /* an 11-byte varint as the payload's length */
  wire_t l = {.n = 0};
  wire_uint(&l, 1, 1);
  wire_uint(&l, 2, TPUD__METHOD__SERVER_LIVE);
  wire_tag(&l, 5, WIRE_LEN);
  for (int i = 0; i < 10; i++) wire_raw(&l, "\x80", 1);
  wire_raw(&l, "\x01", 1);
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(l.b, l.n, SIZE_MAX, &env, &err), TPU_PROTO_EDECODE);
  /* a payload length near 2^64 with 10 bytes: fits a varint, not the message */
  wire_t h = {.n = 0};
  wire_uint(&h, 1, 1);
  wire_tag(&h, 5, WIRE_LEN);
  wire_varint(&h, UINT64_MAX);
  wire_raw(&h, "abc", 3);
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(h.b, h.n, SIZE_MAX, &env, &err), TPU_PROTO_EDECODE);
  /* the largest id that does fit (10 bytes) is fine */
  wire_t ok = {.n = 0};
  wire_uint(&ok, 1, UINT64_MAX);
  wire_uint(&ok, 2, TPUD__METHOD__SERVER_LIVE);
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_request(ok.b, ok.n, SIZE_MAX, &env, NULL),
                        TPU_PROTO_OK);
  CU_ASSERT_EQUAL(env->id, UINT64_MAX);
  tpu_envelope_request_free(env);
}

static void test_decode_payload_limit(void) {
  uint8_t payload[100];
  memset(payload, 0x5a, sizeof payload);
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 31);
  wire_uint(&w, 2, TPUD__METHOD__MODEL_INFER);
  wire_bytes(&w, 5, payload, sizeof payload);
  Tpud__RequestEnvelope *env = NULL;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(w.b, w.n, 99, &env, &err), TPU_PROTO_EPAYLOAD);
  CU_ASSERT_PTR_NULL(env);
  CU_ASSERT_EQUAL(err.request_id, 31u);
  CU_ASSERT(has(err.msg, "100 bytes"));
  CU_ASSERT(has(err.msg, "limit of 99 bytes"));
  CU_ASSERT(has(err.msg, "ModelInfer"));
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(w.b, w.n, 100, &env, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(env->payload.len, 100u);
  tpu_envelope_request_free(env);

  wire_t r = {.n = 0};
  wire_uint(&r, 1, 32);
  wire_bytes(&r, 4, payload, sizeof payload);
  Tpud__ResponseEnvelope *renv = NULL;
  CU_ASSERT_EQUAL(tpu_envelope_decode_response(r.b, r.n, 10, &renv, &err), TPU_PROTO_EPAYLOAD);
  CU_ASSERT_EQUAL(err.request_id, 32u);
  CU_ASSERT_PTR_NULL(renv);
}

static void test_decode_forward_compatible(void) {
  /* fields from a newer peer are skipped; a repeated scalar field keeps its last value */
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 5);
  wire_uint(&w, 2, TPUD__METHOD__SERVER_READY);
  wire_uint(&w, 15, 12345);
  wire_str(&w, 14, "future");
  wire_fixed64(&w, 99, 1);
  wire_uint(&w, 1, 6);
  Tpud__RequestEnvelope *env = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(env->id, 6u);
  CU_ASSERT_EQUAL(env->method, TPUD__METHOD__SERVER_READY);
  tpu_envelope_request_free(env);
}

/* A map key given twice on the wire stays two entries (protobuf-c keeps map entries as a
 * repeated field), so the server can see the repetition and refuse it: for credentials, "the
 * last wins" (protobuf) and "the first wins" (a proxy that checked the first) disagree. */
static void test_decode_repeated_metadata_key(void) {
  wire_t a = {.n = 0}, b = {.n = 0}, c = {.n = 0};
  wire_str(&a, 1, "authorization");
  wire_str(&a, 2, "Bearer first");
  wire_str(&b, 1, "authorization");
  wire_str(&b, 2, "Bearer second");
  wire_str(&c, 1, "Authorization"); /* keys are exact: not the same key */
  wire_str(&c, 2, "Bearer third");
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 77);
  wire_uint(&w, 2, TPUD__METHOD__SERVER_LIVE);
  wire_sub(&w, 4, &a);
  wire_sub(&w, 4, &c);
  wire_sub(&w, 4, &b);
  Tpud__RequestEnvelope *env = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(env->n_metadata, 3u);
  CU_ASSERT_EQUAL(tpu_envelope_request_metadata_count(env, "authorization"), 2u);
  CU_ASSERT_EQUAL(tpu_envelope_request_metadata_count(env, "Authorization"), 1u);
  CU_ASSERT_EQUAL(tpu_envelope_request_metadata_count(env, "x-missing"), 0u);
  CU_ASSERT_EQUAL(tpu_envelope_request_metadata_count(env, NULL), 0u);
  CU_ASSERT_STRING_EQUAL(tpu_envelope_request_metadata(env, "authorization"), "Bearer first");
  tpu_envelope_request_free(env);
  CU_ASSERT_EQUAL(tpu_envelope_request_metadata_count(NULL, "authorization"), 0u);
}

static void test_decode_request_fields_by_number(void) {
  /* RequestEnvelope's documented numbers: id 1, method 2, timeout_us 3, metadata 4, payload 5 */
  wire_t entry = {.n = 0};
  wire_str(&entry, 1, "authorization");
  wire_str(&entry, 2, "Bearer z");
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 0x1234567890ull);
  wire_uint(&w, 2, TPUD__METHOD__MATMUL);
  wire_uint(&w, 3, 2500);
  wire_sub(&w, 4, &entry);
  wire_bytes(&w, 5, "\x0a\x00", 2);
  Tpud__RequestEnvelope *env = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(env->id, 0x1234567890ull);
  CU_ASSERT_EQUAL(env->method, TPUD__METHOD__MATMUL);
  CU_ASSERT_EQUAL(env->timeout_us, 2500u);
  CU_ASSERT_STRING_EQUAL(tpu_envelope_request_metadata(env, "authorization"), "Bearer z");
  CU_ASSERT_EQUAL(tpu_envelope_request_metadata_count(env, "authorization"), 1u);
  CU_ASSERT_EQUAL(env->payload.len, 2u);
  tpu_envelope_request_free(env);

  /* ResponseEnvelope: id 1, code 2, message 3, payload 4, metadata 5 */
  wire_t r = {.n = 0};
  wire_uint(&r, 1, 9);
  wire_uint(&r, 2, TPUD__STATUS_CODE__DEADLINE_EXCEEDED);
  wire_str(&r, 3, "deadline of 2500 us exceeded");
  wire_str(&r, 4, "pp");
  wire_sub(&r, 5, &entry);
  Tpud__ResponseEnvelope *renv = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_response(r.b, r.n, SIZE_MAX, &renv, NULL),
                        TPU_PROTO_OK);
  CU_ASSERT_EQUAL(renv->id, 9u);
  CU_ASSERT_EQUAL(renv->code, TPUD__STATUS_CODE__DEADLINE_EXCEEDED);
  CU_ASSERT_STRING_EQUAL(renv->message, "deadline of 2500 us exceeded");
  CU_ASSERT_EQUAL(renv->payload.len, 2u);
  CU_ASSERT_EQUAL_FATAL(renv->n_metadata, 1u);
  CU_ASSERT_STRING_EQUAL(renv->metadata[0]->value, "Bearer z");
  tpu_envelope_response_free(renv);
}

static void test_decode_response_unknown_code(void) {
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 12);
  wire_uint(&w, 2, 17);
  Tpud__ResponseEnvelope *env = NULL;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_envelope_decode_response(w.b, w.n, SIZE_MAX, &env, &err), TPU_PROTO_ECODE);
  CU_ASSERT_PTR_NULL(env);
  CU_ASSERT_EQUAL(err.request_id, 12u);
  CU_ASSERT(has(err.msg, "status code 17"));
  /* id 0 is allowed in responses (a connection-level error) */
  wire_t z = {.n = 0};
  wire_uint(&z, 2, TPUD__STATUS_CODE__INVALID_ARGUMENT);
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_response(z.b, z.n, SIZE_MAX, &env, NULL),
                        TPU_PROTO_OK);
  CU_ASSERT_EQUAL(env->id, 0u);
  tpu_envelope_response_free(env);
  CU_ASSERT_EQUAL(tpu_envelope_decode_response(NULL, 3, SIZE_MAX, &env, NULL), TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_envelope_decode_response(w.b, w.n, SIZE_MAX, NULL, NULL), TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, NULL, NULL), TPU_PROTO_EINVAL);
  tpu_envelope_request_free(NULL);
  tpu_envelope_response_free(NULL);
}

/* Unpacks an infer payload through an envelope; returns the status, err filled. */
static tpu_proto_status_t unpack_infer(const wire_t *payload, tpu_proto_error_t *err) {
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 46);
  wire_uint(&w, 2, TPUD__METHOD__MODEL_INFER);
  wire_bytes(&w, 5, (const char *)payload->b, payload->n);
  Tpud__RequestEnvelope *env = NULL;
  if (tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, NULL) != TPU_PROTO_OK) return -1;
  ProtobufCMessage *msg = NULL;
  tpu_proto_status_t st = tpu_envelope_unpack_request_payload(env, &msg, err);
  if (msg) protobuf_c_message_free_unpacked(msg, NULL);
  tpu_envelope_request_free(env);
  return st;
}

/* proto3 strings: UTF-8 and (tpud's names being C strings) no NUL, at any depth. */
static void test_unpack_checks_strings(void) {
  tpu_proto_error_t err = {0};
  wire_t p = {.n = 0};
  wire_bytes(&p, 1, "digits", 6);
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_OK);
  p.n = 0;
  wire_bytes(&p, 1, "d\xc3\xa9j\xc3\xa0", 6); /* UTF-8 is fine */
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_OK);
  p.n = 0;
  wire_bytes(&p, 1, "digits\0evil", 11);
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_EDECODE);
  CU_ASSERT(has(err.msg, "inference.ModelInferRequest.model_name holds a NUL byte"));
  CU_ASSERT_EQUAL(err.request_id, 46u);
  p.n = 0;
  wire_bytes(&p, 2, "\xff\xfe", 2);
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_EDECODE);
  CU_ASSERT(has(err.msg, "model_version is not valid UTF-8"));
  p.n = 0;
  wire_bytes(&p, 1, "\xc0\xaf", 2); /* overlong '/' */
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_EDECODE);
  /* Nested: an input tensor's name, and a parameters map key. */
  wire_t t = {.n = 0};
  wire_bytes(&t, 1, "x\xed\xa0\x80", 4); /* a surrogate */
  p.n = 0;
  wire_bytes(&p, 1, "digits", 6);
  wire_bytes(&p, 5, (const char *)t.b, t.n);
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_EDECODE);
  CU_ASSERT(has(err.msg, "InferInputTensor.name is not valid UTF-8"));
  wire_t e = {.n = 0};
  wire_bytes(&e, 1, "k\0", 2);
  p.n = 0;
  wire_bytes(&p, 4, (const char *)e.b, e.n);
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_EDECODE);
  CU_ASSERT(has(err.msg, "key holds a NUL byte"));
  /* Bytes fields may hold anything. */
  p.n = 0;
  wire_bytes(&p, 1, "digits", 6);
  wire_bytes(&p, 7, "\0\xff\0\xfe", 4);
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_OK);
  /* Malformed wire data is still protobuf-c's to reject, with its message. */
  p.n = 0;
  wire_bytes(&p, 1, "digits", 6);
  p.b[p.n++] = 0x0a; /* field 1, length 100, 0 bytes follow */
  p.b[p.n++] = 100;
  CU_ASSERT_EQUAL(unpack_infer(&p, &err), TPU_PROTO_EDECODE);
  CU_ASSERT(has(err.msg, "not a valid inference.ModelInferRequest"));
}

static void test_unpack_payload_errors(void) {
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 44);
  wire_uint(&w, 2, TPUD__METHOD__MODEL_INFER);
  wire_bytes(&w, 5, "\xff\xff\xff", 3); /* not a ModelInferRequest */
  Tpud__RequestEnvelope *env = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_request(w.b, w.n, SIZE_MAX, &env, NULL), TPU_PROTO_OK);
  ProtobufCMessage *msg = (ProtobufCMessage *)1;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_envelope_unpack_request_payload(env, &msg, &err), TPU_PROTO_EDECODE);
  CU_ASSERT_PTR_NULL(msg);
  CU_ASSERT_EQUAL(err.request_id, 44u);
  CU_ASSERT(has(err.msg, "ModelInfer"));
  CU_ASSERT(has(err.msg, "inference.ModelInferRequest"));
  CU_ASSERT_EQUAL(tpu_envelope_unpack_request_payload(NULL, &msg, NULL), TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_envelope_unpack_request_payload(env, NULL, NULL), TPU_PROTO_EINVAL);
  tpu_envelope_request_free(env);

  wire_t r = {.n = 0};
  wire_uint(&r, 1, 45);
  wire_bytes(&r, 4, "\x0f", 1);
  Tpud__ResponseEnvelope *renv = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_envelope_decode_response(r.b, r.n, SIZE_MAX, &renv, NULL),
                        TPU_PROTO_OK);
  CU_ASSERT_EQUAL(tpu_envelope_unpack_response_payload(renv, TPUD__METHOD__MATMUL, &msg, &err),
                  TPU_PROTO_EDECODE);
  CU_ASSERT(has(err.msg, "tpud.MatMulResponse"));
  CU_ASSERT_EQUAL(tpu_envelope_unpack_response_payload(renv, 0, &msg, &err), TPU_PROTO_EMETHOD);
  CU_ASSERT_EQUAL(tpu_envelope_unpack_response_payload(renv, 17, &msg, &err), TPU_PROTO_EMETHOD);
  tpu_envelope_response_free(renv);
  CU_ASSERT_PTR_NULL(tpu_envelope_request_metadata(NULL, "k"));
}

TPU_TEST_SUITE(envelope,
               {"unpack_checks_strings", test_unpack_checks_strings},
               {"method_table_matches_services", test_method_table_matches_services},
               {"status_codes_are_grpc", test_status_codes_are_grpc},
               {"roundtrip_every_method", test_roundtrip_every_method},
               {"error_response_roundtrip", test_error_response_roundtrip},
               {"encoding_matches_protobuf_c", test_encoding_matches_protobuf_c},
               {"pipelined_stream", test_pipelined_stream},
               {"encode_errors", test_encode_errors},
               {"encode_buffer_too_small", test_encode_buffer_too_small},
               {"decode_unknown_method", test_decode_unknown_method},
               {"decode_missing_id", test_decode_missing_id},
               {"decode_garbage", test_decode_garbage},
               {"decode_varint_overflow", test_decode_varint_overflow},
               {"decode_payload_limit", test_decode_payload_limit},
               {"decode_forward_compatible", test_decode_forward_compatible},
               {"decode_request_fields_by_number", test_decode_request_fields_by_number},
               {"decode_repeated_metadata_key", test_decode_repeated_metadata_key},
               {"decode_response_unknown_code", test_decode_response_unknown_code},
               {"unpack_payload_errors", test_unpack_payload_errors})
