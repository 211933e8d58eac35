/*
 * test_oip.c - proto/grpc_service.proto is wire-compatible with the Open Inference Protocol v2.
 *
 * Each message is written by hand from the field numbers of the public specification
 * (kserve/open-inference-protocol, specification/protocol/open_inference_grpc.proto), then
 * decoded with the generated code, and some are packed and compared byte for byte. A renumbered
 * or retyped field in our .proto breaks these tests, not a KServe or Triton client in the field.
 */
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "proto/wire.h"
#include "tpu_test.h"

static int bin_is(const ProtobufCBinaryData *b, const void *want, size_t n) {
  return b->len == n && (n == 0 || memcmp(b->data, want, n) == 0);
}

static void test_names(void) {
  const ProtobufCServiceDescriptor *s = &inference__grpcinference_service__descriptor;
  CU_ASSERT_STRING_EQUAL(s->name, "inference.GRPCInferenceService");
  static const char *const rpcs[] = {"ServerLive",          "ServerReady",   "ModelReady",
                                     "ServerMetadata",      "ModelMetadata", "ModelInfer",
                                     "RepositoryIndex",     "RepositoryModelLoad",
                                     "RepositoryModelUnload", "ModelConfig", "ModelStatistics"};
  static const ProtobufCMessageDescriptor *const in[] = {
      &inference__server_live_request__descriptor,     &inference__server_ready_request__descriptor,
      &inference__model_ready_request__descriptor,     &inference__server_metadata_request__descriptor,
      &inference__model_metadata_request__descriptor,  &inference__model_infer_request__descriptor,
      &inference__repository_index_request__descriptor,
      &inference__repository_model_load_request__descriptor,
      &inference__repository_model_unload_request__descriptor,
      &inference__model_config_request__descriptor,
      &inference__model_statistics_request__descriptor};
  CU_ASSERT_EQUAL_FATAL(s->n_methods, 11u);
  for (unsigned i = 0; i < 11; i++) {
    CU_ASSERT_STRING_EQUAL(s->methods[i].name, rpcs[i]);
    CU_ASSERT_PTR_EQUAL(s->methods[i].input, in[i]);
  }
  CU_ASSERT_STRING_EQUAL(inference__model_infer_request__descriptor.name,
                         "inference.ModelInferRequest");
  CU_ASSERT_STRING_EQUAL(inference__model_infer_request__infer_input_tensor__descriptor.name,
                         "inference.ModelInferRequest.InferInputTensor");
  CU_ASSERT_STRING_EQUAL(
      inference__model_infer_request__infer_requested_output_tensor__descriptor.name,
      "inference.ModelInferRequest.InferRequestedOutputTensor");
  CU_ASSERT_STRING_EQUAL(inference__model_infer_response__infer_output_tensor__descriptor.name,
                         "inference.ModelInferResponse.InferOutputTensor");
  CU_ASSERT_STRING_EQUAL(inference__model_metadata_response__tensor_metadata__descriptor.name,
                         "inference.ModelMetadataResponse.TensorMetadata");
  CU_ASSERT_STRING_EQUAL(inference__infer_parameter__descriptor.name, "inference.InferParameter");
  CU_ASSERT_STRING_EQUAL(inference__infer_tensor_contents__descriptor.name,
                         "inference.InferTensorContents");
}

/* map<string, InferParameter> entry: key = 1, value = 2. */
static void param_entry(wire_t *w, unsigned field, const char *key, const wire_t *value) {
  wire_t e = {.n = 0};
  wire_str(&e, 1, key);
  wire_sub(&e, 2, value);
  wire_sub(w, field, &e);
}

static void test_model_infer_request(void) {
  /* ModelInferRequest: model_name 1, model_version 2, id 3, parameters 4, inputs 5, outputs 6,
   * raw_input_contents 7. InferInputTensor: name 1, datatype 2, shape 3, parameters 4,
   * contents 5. InferRequestedOutputTensor: name 1, parameters 2. */
  wire_t p_seq = {.n = 0}, p_flag = {.n = 0}, p_neg = {.n = 0};
  wire_uint(&p_seq, 5, 1ull << 40); /* uint64_param */
  wire_uint(&p_flag, 1, 1);         /* bool_param */
  wire_uint(&p_neg, 2, (uint64_t)-3); /* int64_param, negative */

  wire_t x = {.n = 0}, xshape = {.n = 0}, xcontents = {.n = 0}, fp32 = {.n = 0};
  wire_str(&x, 1, "x");
  wire_str(&x, 2, "FP32");
  wire_varint(&xshape, 2);
  wire_varint(&xshape, 3);
  wire_sub(&x, 3, &xshape); /* packed, as proto3 writers do */
  param_entry(&x, 4, "binary_data_size", &p_neg);
  uint32_t a = wire_f32_bits(1.5f), b = wire_f32_bits(-2.0f);
  for (int i = 0; i < 4; i++) fp32.b[fp32.n++] = (uint8_t)(a >> (8 * i));
  for (int i = 0; i < 4; i++) fp32.b[fp32.n++] = (uint8_t)(b >> (8 * i));
  wire_sub(&xcontents, 6, &fp32); /* fp32_contents, packed fixed32 */
  wire_sub(&x, 5, &xcontents);

  wire_t y = {.n = 0};
  wire_str(&y, 1, "y");
  wire_str(&y, 2, "INT8");
  wire_uint(&y, 3, 4); /* shape unpacked: parsers must accept both encodings */
  wire_uint(&y, 3, (uint64_t)-1);

  wire_t out = {.n = 0};
  wire_str(&out, 1, "probs");
  param_entry(&out, 2, "classification", &p_flag);

  static const uint8_t raw0[8] = {0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0};
  static const uint8_t raw1[4] = {0xff, 5, 0, 127};
  wire_t w = {.n = 0};
  wire_str(&w, 1, "mnist");
  wire_str(&w, 2, "7");
  wire_str(&w, 3, "req-abc");
  param_entry(&w, 4, "sequence_id", &p_seq);
  param_entry(&w, 4, "flag", &p_flag);
  wire_sub(&w, 5, &x);
  wire_sub(&w, 5, &y);
  wire_sub(&w, 6, &out);
  wire_bytes(&w, 7, raw0, sizeof raw0);
  wire_bytes(&w, 7, raw1, sizeof raw1);

  Inference__ModelInferRequest *r = inference__model_infer_request__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  CU_ASSERT_STRING_EQUAL(r->model_name, "mnist");
  CU_ASSERT_STRING_EQUAL(r->model_version, "7");
  CU_ASSERT_STRING_EQUAL(r->id, "req-abc");
  CU_ASSERT_EQUAL_FATAL(r->n_parameters, 2u);
  CU_ASSERT_STRING_EQUAL(r->parameters[0]->key, "sequence_id");
  CU_ASSERT_EQUAL(r->parameters[0]->value->parameter_choice_case,
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM);
  CU_ASSERT_EQUAL(r->parameters[0]->value->uint64_param, 1ull << 40);
  CU_ASSERT_STRING_EQUAL(r->parameters[1]->key, "flag");
  CU_ASSERT_EQUAL(r->parameters[1]->value->parameter_choice_case,
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM);
  CU_ASSERT(r->parameters[1]->value->bool_param);

  CU_ASSERT_EQUAL_FATAL(r->n_inputs, 2u);
  Inference__ModelInferRequest__InferInputTensor *in0 = r->inputs[0], *in1 = r->inputs[1];
  CU_ASSERT_STRING_EQUAL(in0->name, "x");
  CU_ASSERT_STRING_EQUAL(in0->datatype, "FP32");
  CU_ASSERT_EQUAL_FATAL(in0->n_shape, 2u);
  CU_ASSERT_EQUAL(in0->shape[0], 2);
  CU_ASSERT_EQUAL(in0->shape[1], 3);
  CU_ASSERT_EQUAL_FATAL(in0->n_parameters, 1u);
  CU_ASSERT_STRING_EQUAL(in0->parameters[0]->key, "binary_data_size");
  CU_ASSERT_EQUAL(in0->parameters[0]->value->int64_param, -3);
  CU_ASSERT_PTR_NOT_NULL_FATAL(in0->contents);
  CU_ASSERT_EQUAL_FATAL(in0->contents->n_fp32_contents, 2u);
  CU_ASSERT_EQUAL(in0->contents->fp32_contents[0], 1.5f);
  CU_ASSERT_EQUAL(in0->contents->fp32_contents[1], -2.0f);
  CU_ASSERT_STRING_EQUAL(in1->name, "y");
  CU_ASSERT_STRING_EQUAL(in1->datatype, "INT8");
  CU_ASSERT_EQUAL_FATAL(in1->n_shape, 2u);
  CU_ASSERT_EQUAL(in1->shape[0], 4);
  CU_ASSERT_EQUAL(in1->shape[1], -1);
  CU_ASSERT_PTR_NULL(in1->contents);

  CU_ASSERT_EQUAL_FATAL(r->n_outputs, 1u);
  CU_ASSERT_STRING_EQUAL(r->outputs[0]->name, "probs");
  CU_ASSERT_EQUAL_FATAL(r->outputs[0]->n_parameters, 1u);
  CU_ASSERT_STRING_EQUAL(r->outputs[0]->parameters[0]->key, "classification");

  CU_ASSERT_EQUAL_FATAL(r->n_raw_input_contents, 2u);
  CU_ASSERT(bin_is(&r->raw_input_contents[0], raw0, sizeof raw0));
  CU_ASSERT(bin_is(&r->raw_input_contents[1], raw1, sizeof raw1));
  inference__model_infer_request__free_unpacked(r, NULL);
}

static void test_model_infer_response(void) {
  /* ModelInferResponse: model_name 1, model_version 2, id 3, parameters 4, outputs 5,
   * raw_output_contents 6. InferOutputTensor: name 1, datatype 2, shape 3, parameters 4,
   * contents 5. First decode hand-written bytes... */
  static const uint8_t raw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  wire_t o = {.n = 0}, shape = {.n = 0};
  wire_str(&o, 1, "y");
  wire_str(&o, 2, "FP32");
  wire_varint(&shape, 1);
  wire_varint(&shape, 2);
  wire_sub(&o, 3, &shape);
  wire_t w = {.n = 0};
  wire_str(&w, 1, "m");
  wire_str(&w, 2, "1");
  wire_str(&w, 3, "r");
  wire_sub(&w, 5, &o);
  wire_bytes(&w, 6, raw, sizeof raw);

  Inference__ModelInferResponse *r = inference__model_infer_response__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  CU_ASSERT_STRING_EQUAL(r->model_name, "m");
  CU_ASSERT_STRING_EQUAL(r->model_version, "1");
  CU_ASSERT_STRING_EQUAL(r->id, "r");
  CU_ASSERT_EQUAL_FATAL(r->n_outputs, 1u);
  CU_ASSERT_STRING_EQUAL(r->outputs[0]->name, "y");
  CU_ASSERT_STRING_EQUAL(r->outputs[0]->datatype, "FP32");
  CU_ASSERT_EQUAL_FATAL(r->outputs[0]->n_shape, 2u);
  CU_ASSERT_EQUAL(r->outputs[0]->shape[1], 2);
  CU_ASSERT_EQUAL_FATAL(r->n_raw_output_contents, 1u);
  CU_ASSERT(bin_is(&r->raw_output_contents[0], raw, sizeof raw));
  inference__model_infer_response__free_unpacked(r, NULL);

  /* ...and the other way: what tpud sends packs to exactly those bytes (field order by
   * number, shape packed), which is what a KServe/Triton client parses. */
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  Inference__ModelInferResponse__InferOutputTensor out =
      INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
  Inference__ModelInferResponse__InferOutputTensor *outs[1] = {&out};
  int64_t dims[2] = {1, 2};
  ProtobufCBinaryData raws[1] = {{sizeof raw, (uint8_t *)raw}};
  out.name = "y";
  out.datatype = "FP32";
  out.n_shape = 2;
  out.shape = dims;
  resp.model_name = "m";
  resp.model_version = "1";
  resp.id = "r";
  resp.n_outputs = 1;
  resp.outputs = outs;
  resp.n_raw_output_contents = 1;
  resp.raw_output_contents = raws;
  size_t n = inference__model_infer_response__get_packed_size(&resp);
  CU_ASSERT_EQUAL_FATAL(n, w.n);
  uint8_t *b = malloc(n);
  CU_ASSERT_FATAL(b != NULL);
  inference__model_infer_response__pack(&resp, b);
  CU_ASSERT(memcmp(b, w.b, n) == 0);
  free(b);
}

static void test_infer_parameter(void) {
  /* oneof parameter_choice: bool 1, int64 2, string 3, double 4, uint64 5 */
  wire_t w;
  Inference__InferParameter *p;

  w.n = 0;
  wire_uint(&w, 1, 1);
  p = inference__infer_parameter__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->parameter_choice_case, INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM);
  CU_ASSERT(p->bool_param);
  inference__infer_parameter__free_unpacked(p, NULL);

  w.n = 0;
  wire_uint(&w, 2, (uint64_t)INT64_MIN);
  p = inference__infer_parameter__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->parameter_choice_case,
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM);
  CU_ASSERT_EQUAL(p->int64_param, INT64_MIN);
  inference__infer_parameter__free_unpacked(p, NULL);

  w.n = 0;
  wire_str(&w, 3, "fast");
  p = inference__infer_parameter__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->parameter_choice_case,
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM);
  CU_ASSERT_STRING_EQUAL(p->string_param, "fast");
  inference__infer_parameter__free_unpacked(p, NULL);

  w.n = 0;
  wire_fixed64(&w, 4, wire_f64_bits(0.125));
  p = inference__infer_parameter__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->parameter_choice_case,
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM);
  CU_ASSERT_EQUAL(p->double_param, 0.125);
  inference__infer_parameter__free_unpacked(p, NULL);

  w.n = 0;
  wire_uint(&w, 5, UINT64_MAX);
  p = inference__infer_parameter__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(p->parameter_choice_case,
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM);
  CU_ASSERT_EQUAL(p->uint64_param, UINT64_MAX);
  inference__infer_parameter__free_unpacked(p, NULL);
}

static void test_infer_tensor_contents(void) {
  /* bool 1, int 2, int64 3, uint 4, uint64 5, fp32 6, fp64 7, bytes 8 */
  wire_t w = {.n = 0}, pk = {.n = 0};
  wire_varint(&pk, 1);
  wire_varint(&pk, 0);
  wire_varint(&pk, 1);
  wire_sub(&w, 1, &pk);
  pk.n = 0;
  wire_varint(&pk, (uint64_t)-7); /* int32 -7: sign-extended to 10 bytes */
  wire_varint(&pk, 127);
  wire_sub(&w, 2, &pk);
  wire_uint(&w, 3, (uint64_t)-(1ll << 40)); /* unpacked int64 */
  wire_uint(&w, 4, 4000000000u);
  wire_uint(&w, 5, 1ull << 63);
  wire_fixed32(&w, 6, wire_f32_bits(0.75f)); /* unpacked fixed32 */
  wire_fixed64(&w, 7, wire_f64_bits(-1e300));
  wire_str(&w, 8, "ab");
  wire_str(&w, 8, "");

  Inference__InferTensorContents *c = inference__infer_tensor_contents__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  CU_ASSERT_EQUAL_FATAL(c->n_bool_contents, 3u);
  CU_ASSERT(c->bool_contents[0] && !c->bool_contents[1] && c->bool_contents[2]);
  CU_ASSERT_EQUAL_FATAL(c->n_int_contents, 2u);
  CU_ASSERT_EQUAL(c->int_contents[0], -7);
  CU_ASSERT_EQUAL(c->int_contents[1], 127);
  CU_ASSERT_EQUAL_FATAL(c->n_int64_contents, 1u);
  CU_ASSERT_EQUAL(c->int64_contents[0], -(1ll << 40));
  CU_ASSERT_EQUAL_FATAL(c->n_uint_contents, 1u);
  CU_ASSERT_EQUAL(c->uint_contents[0], 4000000000u);
  CU_ASSERT_EQUAL_FATAL(c->n_uint64_contents, 1u);
  CU_ASSERT_EQUAL(c->uint64_contents[0], 1ull << 63);
  CU_ASSERT_EQUAL_FATAL(c->n_fp32_contents, 1u);
  CU_ASSERT_EQUAL(c->fp32_contents[0], 0.75f);
  CU_ASSERT_EQUAL_FATAL(c->n_fp64_contents, 1u);
  CU_ASSERT_EQUAL(c->fp64_contents[0], -1e300);
  CU_ASSERT_EQUAL_FATAL(c->n_bytes_contents, 2u);
  CU_ASSERT(bin_is(&c->bytes_contents[0], "ab", 2));
  CU_ASSERT_EQUAL(c->bytes_contents[1].len, 0u);
  inference__infer_tensor_contents__free_unpacked(c, NULL);
}

static void test_health_messages(void) {
  wire_t w = {.n = 0};
  wire_uint(&w, 1, 1);
  Inference__ServerLiveResponse *live = inference__server_live_response__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(live);
  CU_ASSERT(live->live);
  inference__server_live_response__free_unpacked(live, NULL);
  Inference__ServerReadyResponse *ready = inference__server_ready_response__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ready);
  CU_ASSERT(ready->ready);
  inference__server_ready_response__free_unpacked(ready, NULL);
  Inference__ModelReadyResponse *mr = inference__model_ready_response__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(mr);
  CU_ASSERT(mr->ready);
  inference__model_ready_response__free_unpacked(mr, NULL);

  /* ModelReadyRequest and ModelMetadataRequest: name 1, version 2 */
  w.n = 0;
  wire_str(&w, 1, "mnist");
  wire_str(&w, 2, "3");
  Inference__ModelReadyRequest *rq = inference__model_ready_request__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(rq);
  CU_ASSERT_STRING_EQUAL(rq->name, "mnist");
  CU_ASSERT_STRING_EQUAL(rq->version, "3");
  inference__model_ready_request__free_unpacked(rq, NULL);
  Inference__ModelMetadataRequest *mq = inference__model_metadata_request__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(mq);
  CU_ASSERT_STRING_EQUAL(mq->name, "mnist");
  CU_ASSERT_STRING_EQUAL(mq->version, "3");
  inference__model_metadata_request__free_unpacked(mq, NULL);

  /* The empty requests parse from zero bytes. */
  Inference__ServerLiveRequest *lq = inference__server_live_request__unpack(NULL, 0, NULL);
  CU_ASSERT_PTR_NOT_NULL(lq);
  inference__server_live_request__free_unpacked(lq, NULL);
}

static void test_metadata_messages(void) {
  /* ServerMetadataResponse: name 1, version 2, extensions 3 */
  wire_t w = {.n = 0};
  wire_str(&w, 1, "tpud");
  wire_str(&w, 2, "0.1.0");
  wire_str(&w, 3, "binary_tensor_data");
  wire_str(&w, 3, "tpud_matmul");
  Inference__ServerMetadataResponse *sm = inference__server_metadata_response__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(sm);
  CU_ASSERT_STRING_EQUAL(sm->name, "tpud");
  CU_ASSERT_STRING_EQUAL(sm->version, "0.1.0");
  CU_ASSERT_EQUAL_FATAL(sm->n_extensions, 2u);
  CU_ASSERT_STRING_EQUAL(sm->extensions[1], "tpud_matmul");
  inference__server_metadata_response__free_unpacked(sm, NULL);

  /* ModelMetadataResponse: name 1, versions 2, platform 3, inputs 4, outputs 5;
   * TensorMetadata: name 1, datatype 2, shape 3 */
  wire_t tin = {.n = 0}, tout = {.n = 0}, shape = {.n = 0};
  wire_str(&tin, 1, "x");
  wire_str(&tin, 2, "FP32");
  wire_varint(&shape, (uint64_t)-1);
  wire_varint(&shape, 64);
  wire_sub(&tin, 3, &shape);
  wire_str(&tout, 1, "probs");
  wire_str(&tout, 2, "FP32");
  w.n = 0;
  wire_str(&w, 1, "mnist");
  wire_str(&w, 2, "1");
  wire_str(&w, 2, "2");
  wire_str(&w, 3, "tpud_safetensors");
  wire_sub(&w, 4, &tin);
  wire_sub(&w, 5, &tout);
  Inference__ModelMetadataResponse *mm = inference__model_metadata_response__unpack(NULL, w.n, w.b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(mm);
  CU_ASSERT_STRING_EQUAL(mm->name, "mnist");
  CU_ASSERT_EQUAL_FATAL(mm->n_versions, 2u);
  CU_ASSERT_STRING_EQUAL(mm->versions[1], "2");
  CU_ASSERT_STRING_EQUAL(mm->platform, "tpud_safetensors");
  CU_ASSERT_EQUAL_FATAL(mm->n_inputs, 1u);
  CU_ASSERT_STRING_EQUAL(mm->inputs[0]->name, "x");
  CU_ASSERT_EQUAL_FATAL(mm->inputs[0]->n_shape, 2u);
  CU_ASSERT_EQUAL(mm->inputs[0]->shape[0], -1);
  CU_ASSERT_EQUAL(mm->inputs[0]->shape[1], 64);
  CU_ASSERT_EQUAL_FATAL(mm->n_outputs, 1u);
  CU_ASSERT_STRING_EQUAL(mm->outputs[0]->name, "probs");
  inference__model_metadata_response__free_unpacked(mm, NULL);
}

TPU_TEST_SUITE(oip,
               {"names", test_names},
               {"model_infer_request", test_model_infer_request},
               {"model_infer_response", test_model_infer_response},
               {"infer_parameter", test_infer_parameter},
               {"infer_tensor_contents", test_infer_tensor_contents},
               {"health_messages", test_health_messages},
               {"metadata_messages", test_metadata_messages})
