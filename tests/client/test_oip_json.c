/*
 * test_oip_json.c - proto/tpu_oip_json: OIP v2 REST JSON <-> ModelInferRequest/Response.
 *
 * DESIGN
 * Parser tests go from text, with no sockets: every datatype's byte encoding against bytes
 * written out by hand, flat and nested data, each way a body can be wrong with the exact message
 * a user would see, the depth and size limits; then responses to text, exactly, and a randomized
 * round trip (JSON -> raw bytes -> JSON) whose seed is printed on failure.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_oip_json.h"
#include "tpu_proto_int.h"
#include "tpu_test.h"

static char err[512];

static tpu_oip_json_status_t parse(const char *text, Inference__ModelInferRequest **req) {
  err[0] = '\0';
  return tpu_oip_json_infer_request_parse(text, strlen(text), "m", "2", NULL, req, err,
                                          sizeof err);
}

/* Parses a body expected to fail; checks status and that the message contains `want`. */
static void expect_error(const char *text, tpu_oip_json_status_t want_st, const char *want) {
  Inference__ModelInferRequest *req = (Inference__ModelInferRequest *)1;
  tpu_oip_json_status_t st = parse(text, &req);
  CU_ASSERT_EQUAL(st, want_st);
  CU_ASSERT_PTR_NULL(req);
  if (!strstr(err, want)) {
    printf("\n  body: %s\n  want: %s\n  got:  %s\n", text, want, err);
    CU_FAIL("error message does not say what was expected");
  }
}

/* Parses one input of `dtype` with `data` and compares raw bytes to want[0..n). */
static void expect_bytes(const char *dtype, const char *shape, const char *data,
                         const uint8_t *want, size_t n) {
  char body[1024];
  snprintf(body, sizeof body,
           "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"%s\",\"shape\":%s,\"data\":%s}]}", dtype,
           shape, data);
  Inference__ModelInferRequest *req = NULL;
  tpu_oip_json_status_t st = parse(body, &req);
  if (st != TPU_OIP_JSON_OK) printf("\n  %s: %s\n", dtype, err);
  CU_ASSERT_EQUAL_FATAL(st, TPU_OIP_JSON_OK);
  CU_ASSERT_EQUAL(req->n_raw_input_contents, 1);
  CU_ASSERT_STRING_EQUAL(req->inputs[0]->datatype, dtype);
  CU_ASSERT_EQUAL(req->raw_input_contents[0].len, n);
  if (req->raw_input_contents[0].len == n && n)
    CU_ASSERT_EQUAL(memcmp(req->raw_input_contents[0].data, want, n), 0);
  inference__model_infer_request__free_unpacked(req, NULL);
}

static void test_flat_fp32(void) {
  Inference__ModelInferRequest *req = NULL;
  const char *body = "{\"id\":\"req-7\",\"inputs\":[{\"name\":\"x\",\"shape\":[2,3],"
                     "\"datatype\":\"FP32\",\"data\":[1,2.5,-3,0.1,1e3,-0.0]}]}";
  CU_ASSERT_EQUAL_FATAL(parse(body, &req), TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(req->model_name, "m");
  CU_ASSERT_STRING_EQUAL(req->model_version, "2");
  CU_ASSERT_STRING_EQUAL(req->id, "req-7");
  CU_ASSERT_EQUAL_FATAL(req->n_inputs, 1);
  CU_ASSERT_STRING_EQUAL(req->inputs[0]->name, "x");
  CU_ASSERT_EQUAL_FATAL(req->inputs[0]->n_shape, 2);
  CU_ASSERT_EQUAL(req->inputs[0]->shape[0], 2);
  CU_ASSERT_EQUAL(req->inputs[0]->shape[1], 3);
  CU_ASSERT_PTR_NULL(req->inputs[0]->contents); /* raw only, never typed contents */
  CU_ASSERT_EQUAL(req->n_outputs, 0);
  float want[6] = {1, 2.5f, -3, 0.1f, 1e3f, -0.0f};
  CU_ASSERT_EQUAL_FATAL(req->raw_input_contents[0].len, sizeof want);
  CU_ASSERT_EQUAL(memcmp(req->raw_input_contents[0].data, want, sizeof want), 0);
  /* The message is well-formed protobuf: it packs and unpacks to the same bytes. */
  size_t n = inference__model_infer_request__get_packed_size(req);
  uint8_t *buf = malloc(n);
  CU_ASSERT_EQUAL(inference__model_infer_request__pack(req, buf), n);
  Inference__ModelInferRequest *back = inference__model_infer_request__unpack(NULL, n, buf);
  CU_ASSERT_PTR_NOT_NULL_FATAL(back);
  CU_ASSERT_EQUAL(memcmp(back->raw_input_contents[0].data, want, sizeof want), 0);
  inference__model_infer_request__free_unpacked(back, NULL);
  free(buf);
  inference__model_infer_request__free_unpacked(req, NULL);
}

static void test_nested_equals_flat(void) {
  Inference__ModelInferRequest *a = NULL, *b = NULL;
  CU_ASSERT_EQUAL_FATAL(parse("{\"inputs\":[{\"name\":\"x\",\"shape\":[2,2,2],\"datatype\":"
                              "\"INT16\",\"data\":[[[1,2],[3,4]],[[5,6],[7,-8]]]}]}",
                              &a),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_EQUAL_FATAL(parse("{\"inputs\":[{\"name\":\"x\",\"shape\":[2,2,2],\"datatype\":"
                              "\"INT16\",\"data\":[1,2,3,4,5,6,7,-8]}]}",
                              &b),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_EQUAL_FATAL(a->raw_input_contents[0].len, 16);
  CU_ASSERT_EQUAL_FATAL(b->raw_input_contents[0].len, 16);
  CU_ASSERT_EQUAL(memcmp(a->raw_input_contents[0].data, b->raw_input_contents[0].data, 16), 0);
  inference__model_infer_request__free_unpacked(a, NULL);
  inference__model_infer_request__free_unpacked(b, NULL);
}

static void test_dtype_encodings(void) {
  const uint8_t b_bool[] = {1, 0, 1};
  expect_bytes("BOOL", "[3]", "[true,false,true]", b_bool, 3);
  const uint8_t b_u8[] = {0, 255, 7};
  expect_bytes("UINT8", "[3]", "[0,255,7]", b_u8, 3);
  const uint8_t b_u16[] = {0x34, 0x12, 0xff, 0xff};
  expect_bytes("UINT16", "[2]", "[4660,65535]", b_u16, 4);
  const uint8_t b_u32[] = {0x78, 0x56, 0x34, 0x12, 0xff, 0xff, 0xff, 0xff};
  expect_bytes("UINT32", "[2]", "[305419896,4294967295]", b_u32, 8);
  const uint8_t b_u64[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  expect_bytes("UINT64", "[1]", "[9223372036854775807]", b_u64, 8);
  const uint8_t b_i8[] = {0x80, 0x7f, 0xff};
  expect_bytes("INT8", "[3]", "[-128,127,-1]", b_i8, 3);
  const uint8_t b_i16[] = {0x00, 0x80, 0xff, 0x7f};
  expect_bytes("INT16", "[2]", "[-32768,32767]", b_i16, 4);
  const uint8_t b_i32[] = {0x00, 0x00, 0x00, 0x80, 0x02, 0x00, 0x00, 0x00};
  expect_bytes("INT32", "[2]", "[-2147483648,2]", b_i32, 8);
  const uint8_t b_i64[] = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  expect_bytes("INT64", "[1]", "[-2]", b_i64, 8);
  /* FP16: 1.0 = 0x3c00, -2 = 0xc000, 65504 = 0x7bff (max), 2^-24 = 0x0001 (min subnormal),
   * 0.1 = 0x2e66 (rounded to nearest) */
  const uint8_t b_f16[] = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x66, 0x2e};
  expect_bytes("FP16", "[5]", "[1,-2,65504,5.960464477539063e-08,0.1]", b_f16, 10);
  /* BF16: 1.0 = 0x3f80, 3.140625 = 0x4049, 1.00390625 is halfway -> even (0x3f80),
   * 1.01171875 is halfway -> even (0x3f82) */
  const uint8_t b_bf16[] = {0x80, 0x3f, 0x49, 0x40, 0x80, 0x3f, 0x82, 0x3f};
  expect_bytes("BF16", "[4]", "[1,3.140625,1.00390625,1.01171875]", b_bf16, 8);
  const uint8_t b_f32[] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc1};
  expect_bytes("FP32", "[2]", "[1,-10]", b_f32, 8);
  const uint8_t b_f64[] = {0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f};
  expect_bytes("FP64", "[1]", "[0.1]", b_f64, 8);
  const uint8_t b_bytes[] = {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0, 3, 0, 0, 0, 0xc3, 0xa9, '!'};
  expect_bytes("BYTES", "[3]", "[\"hi\",\"\",\"\\u00e9!\"]", b_bytes, sizeof b_bytes);
  /* Zero elements: no bytes at all. */
  expect_bytes("FP32", "[0,4]", "[]", NULL, 0);
  /* Rank 0 (a scalar) holds one element. */
  const uint8_t b_scalar[] = {5, 0, 0, 0};
  expect_bytes("INT32", "[]", "[5]", b_scalar, 4);
}

static void test_value_errors(void) {
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"UINT8\",\"data\":[1,300]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[1]: 300 is out of range for UINT8 [0, 255]");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[-129]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[0]: -129 is out of range for INT8 [-128, 127]");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"UINT32\",\"data\":[-1]}]}",
               TPU_OIP_JSON_INVALID, "-1 is out of range for UINT32");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"INT32\",\"data\":[1.5]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[0]: expected an integer for INT32, got a real");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP16\",\"data\":[70000]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[0]: 70000 is out of range for FP16");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1e39]}]}",
               TPU_OIP_JSON_INVALID, "is out of range for FP32");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"BF16\",\"data\":[1e39]}]}",
               TPU_OIP_JSON_INVALID, "is out of range for BF16");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1,\"2\"]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[1]: expected a number, got a string");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"BOOL\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[0]: expected true or false, got an integer");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[0]: expected a string, got an integer");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1,null]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[1]: expected a number, got null");
  /* Nested too far: a leaf that is an array. */
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1,[2]]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data[1]: expected a number, got an array");
}

static void test_count_errors(void) {
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[3,4],\"datatype\":\"FP32\","
               "\"data\":[1,2,3,4,5,6,7,8,9,10,11]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data: expected 12 numbers for shape [3,4], got 11");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"BYTES\",\"data\":[\"a\"]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data: expected 2 strings for shape [2], got 1");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2,3],\"datatype\":\"FP32\","
               "\"data\":[[1,2,3],[4,5]]}]}",
               TPU_OIP_JSON_INVALID,
               "inputs[0].data[1]: expected 3 elements for dimension 1 of shape [2,3], got 2");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[3,2],\"datatype\":\"FP32\","
               "\"data\":[[1,2],[3,4]]}]}",
               TPU_OIP_JSON_INVALID,
               "inputs[0].data: expected 3 elements for dimension 0 of shape [3,2], got 2");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2,2],\"datatype\":\"FP32\","
               "\"data\":[[1,2],3]}]}",
               TPU_OIP_JSON_INVALID,
               "inputs[0].data[1]: expected an array of 2 elements for dimension 1 of shape [2,2]");
  /* The second input is named in the message, not the first. */
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
               "{\"name\":\"y\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[1].data: expected 2 numbers for shape [2], got 1");
  /* A huge claimed shape is refused by the count check, never allocated. */
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1000000000,1000000000],\"datatype\":"
               "\"FP64\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "expected 1000000000000000000 numbers");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[4294967296,4294967296],\"datatype\":"
               "\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].shape: element count of [4294967296,4294967296] "
                                     "overflows");
}

static void test_structure_errors(void) {
  expect_error("[1,2]", TPU_OIP_JSON_INVALID, "request: expected a JSON object, got an array");
  expect_error("{}", TPU_OIP_JSON_INVALID, "inputs: missing");
  expect_error("{\"inputs\":{}}", TPU_OIP_JSON_INVALID,
               "inputs: expected a non-empty array of tensors, got an object");
  expect_error("{\"inputs\":[]}", TPU_OIP_JSON_INVALID,
               "inputs: expected a non-empty array of tensors, got an empty array");
  expect_error("{\"inputs\":[7]}", TPU_OIP_JSON_INVALID, "inputs[0]: expected an object, got an integer");
  expect_error("{\"inputs\":[{\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].name: missing");
  expect_error("{\"inputs\":[{\"name\":\"\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].name: expected a non-empty string, got an empty string");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].shape: missing");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].datatype: missing");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\"}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].data: missing");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP33\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].datatype: unknown datatype \"FP33\"");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":32,\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].datatype: expected a string, got an integer");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2,-1],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].shape[1]: expected a non-negative integer, got -1");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":\"2\",\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].shape: expected an array of non-negative integers");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1.5],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].shape[0]: expected a non-negative integer, got a real");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":1}]}",
               TPU_OIP_JSON_INVALID,
               "inputs[0].data: expected an array of 1 numbers for shape [1], got an integer");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
               "\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].shape: 17 dimensions, at most 16");
  expect_error("{\"id\":5,\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "id: expected a string, got an integer");
  expect_error("{\"outputs\":{},\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "outputs: expected an array, got an object");
  expect_error("{\"outputs\":[{}],\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "outputs[0].name: missing");
  expect_error("{\"parameters\":{\"a\":[1]},\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":"
               "\"FP32\",\"data\":[1]}]}",
               TPU_OIP_JSON_INVALID, "parameters.a: expected a boolean, number or string, got an array");
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
               "\"parameters\":7}]}",
               TPU_OIP_JSON_INVALID, "inputs[0].parameters: expected an object, got an integer");
}

static void test_syntax_and_limits(void) {
  expect_error("{\"inputs\": [", TPU_OIP_JSON_SYNTAX, "malformed JSON at line 1");
  expect_error("", TPU_OIP_JSON_SYNTAX, "malformed JSON");
  expect_error("{\"id\":\"a\",\"id\":\"b\",\"inputs\":[]}", TPU_OIP_JSON_SYNTAX, "duplicate");
  /* 40 levels of nesting: refused before jansson builds anything. */
  char deep[256] = "{\"inputs\":";
  for (int i = 0; i < 40; i++) strcat(deep, "[");
  for (int i = 0; i < 40; i++) strcat(deep, "]");
  strcat(deep, "}");
  expect_error(deep, TPU_OIP_JSON_TOO_DEEP, "JSON nested deeper than 32 levels");
  /* Brackets inside strings do not count. */
  Inference__ModelInferRequest *req = NULL;
  CU_ASSERT_EQUAL_FATAL(parse("{\"id\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[\","
                        "\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
                        "\"data\":[1]}]}",
                        &req),
                  TPU_OIP_JSON_OK);
  inference__model_infer_request__free_unpacked(req, NULL);
  /* Custom limits. */
  tpu_oip_json_limits_t lim = {.max_depth = 4}; /* the body nests 5 deep */
  const char *body = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,1],\"datatype\":\"FP32\","
                     "\"data\":[[1]]}]}";
  CU_ASSERT_EQUAL(tpu_oip_json_infer_request_parse(body, strlen(body), "m", NULL, &lim, &req, err,
                                                   sizeof err),
                  TPU_OIP_JSON_TOO_DEEP);
  CU_ASSERT_PTR_NULL(req);
  lim.max_depth = 5;
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_infer_request_parse(body, strlen(body), "m", NULL, &lim, &req,
                                                         err, sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(req->model_version, ""); /* NULL version: left empty */
  inference__model_infer_request__free_unpacked(req, NULL);
  tpu_oip_json_limits_t small = {.max_bytes = 10};
  CU_ASSERT_EQUAL(tpu_oip_json_infer_request_parse(body, strlen(body), "m", NULL, &small, &req,
                                                   err, sizeof err),
                  TPU_OIP_JSON_TOO_LARGE);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "exceeds the limit of 10"));
  /* API misuse. */
  CU_ASSERT_EQUAL(tpu_oip_json_infer_request_parse(NULL, 0, "m", NULL, NULL, &req, err, sizeof err),
                  TPU_OIP_JSON_SYNTAX);
  CU_ASSERT_EQUAL(tpu_oip_json_infer_request_parse(body, strlen(body), "m", NULL, NULL, NULL, err,
                                                   sizeof err),
                  TPU_OIP_JSON_INVALID);
  /* A zero-length error buffer is fine. */
  CU_ASSERT_EQUAL(tpu_oip_json_infer_request_parse("{", 1, "m", NULL, NULL, &req, NULL, 0),
                  TPU_OIP_JSON_SYNTAX);
  CU_ASSERT_STRING_EQUAL(tpu_oip_json_strerror(TPU_OIP_JSON_TOO_DEEP), "JSON nested too deeply");
  CU_ASSERT_STRING_EQUAL(tpu_oip_json_strerror((tpu_oip_json_status_t)99), "unknown status");
}

static void test_outputs_and_parameters(void) {
  Inference__ModelInferRequest *req = NULL;
  const char *body =
      "{\"id\":\"\\u00e9t\\u00e9\",\"parameters\":{\"flag\":true,\"n\":-3,\"ratio\":0.5,"
      "\"tag\":\"t\"},\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
      "\"data\":[1],\"parameters\":{\"binary_data_size\":4}}],"
      "\"outputs\":[{\"name\":\"probs\"},{\"name\":\"logits\",\"parameters\":{\"binary_data\":false}}]}";
  CU_ASSERT_EQUAL_FATAL(parse(body, &req), TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(req->id, "\xc3\xa9t\xc3\xa9");
  CU_ASSERT_EQUAL_FATAL(req->n_outputs, 2);
  CU_ASSERT_STRING_EQUAL(req->outputs[0]->name, "probs");
  CU_ASSERT_EQUAL(req->outputs[0]->n_parameters, 0);
  CU_ASSERT_STRING_EQUAL(req->outputs[1]->name, "logits");
  CU_ASSERT_EQUAL_FATAL(req->outputs[1]->n_parameters, 1);
  CU_ASSERT_STRING_EQUAL(req->outputs[1]->parameters[0]->key, "binary_data");
  CU_ASSERT_EQUAL(req->outputs[1]->parameters[0]->value->parameter_choice_case,
                  INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM);
  CU_ASSERT_FALSE(req->outputs[1]->parameters[0]->value->bool_param);
  CU_ASSERT_EQUAL_FATAL(req->inputs[0]->n_parameters, 1);
  CU_ASSERT_EQUAL(req->inputs[0]->parameters[0]->value->int64_param, 4);
  CU_ASSERT_EQUAL_FATAL(req->n_parameters, 4);
  int seen = 0;
  for (size_t i = 0; i < req->n_parameters; i++) {
    const Inference__ModelInferRequest__ParametersEntry *e = req->parameters[i];
    if (strcmp(e->key, "flag") == 0) {
      CU_ASSERT_EQUAL(e->value->parameter_choice_case,
                      INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM);
      CU_ASSERT_TRUE(e->value->bool_param);
      seen |= 1;
    } else if (strcmp(e->key, "n") == 0) {
      CU_ASSERT_EQUAL(e->value->parameter_choice_case,
                      INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM);
      CU_ASSERT_EQUAL(e->value->int64_param, -3);
      seen |= 2;
    } else if (strcmp(e->key, "ratio") == 0) {
      CU_ASSERT_EQUAL(e->value->parameter_choice_case,
                      INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM);
      CU_ASSERT_DOUBLE_EQUAL(e->value->double_param, 0.5, 0);
      seen |= 4;
    } else if (strcmp(e->key, "tag") == 0) {
      CU_ASSERT_EQUAL(e->value->parameter_choice_case,
                      INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM);
      CU_ASSERT_STRING_EQUAL(e->value->string_param, "t");
      seen |= 8;
    }
  }
  CU_ASSERT_EQUAL(seen, 15);
  inference__model_infer_request__free_unpacked(req, NULL);
}

/* ---- responses ---- */

static Inference__ModelInferResponse__InferOutputTensor *out_tensor(const char *name,
                                                                    const char *dtype,
                                                                    int64_t *shape, size_t rank) {
  static Inference__ModelInferResponse__InferOutputTensor pool[8];
  static size_t next;
  Inference__ModelInferResponse__InferOutputTensor *t = &pool[next++ % 8];
  inference__model_infer_response__infer_output_tensor__init(t);
  t->name = (char *)name;
  t->datatype = (char *)dtype;
  t->shape = shape;
  t->n_shape = rank;
  return t;
}

static void expect_format(const Inference__ModelInferResponse *resp, const char *want) {
  char *text = NULL;
  tpu_oip_json_status_t st = tpu_oip_json_infer_response_format(resp, &text, err, sizeof err);
  if (st != TPU_OIP_JSON_OK) printf("\n  %s\n", err);
  CU_ASSERT_EQUAL_FATAL(st, TPU_OIP_JSON_OK);
  if (strcmp(text, want) != 0) {
    printf("\n  want: %s\n  got:  %s\n", want, text);
    CU_FAIL("formatted response differs");
  }
  /* Whatever we print is JSON. */
  json_error_t jerr;
  json_t *j = json_loads(text, 0, &jerr);
  CU_ASSERT_PTR_NOT_NULL(j);
  json_decref(j);
  free(text);
}

static void test_response_raw(void) {
  float f32[3] = {0.1f, 1.0f, -2.5f};
  int64_t i64[2] = {-5, INT64_MAX};
  uint8_t bf16[4] = {0x80, 0x3f, 0x49, 0x40};           /* 1, 3.140625 */
  uint8_t f16[4] = {0x00, 0x3c, 0x01, 0x00};            /* 1, 2^-24 */
  uint8_t b[2] = {1, 0};
  uint8_t bytes[] = {2, 0, 0, 0, 'o', 'k', 3, 0, 0, 0, 'a', '"', '\n'};
  uint8_t u16[4] = {0xff, 0xff, 0x01, 0x00};
  uint8_t i8[2] = {0x80, 0x05};
  double f64[1] = {1e-300};
  int64_t s3[] = {3}, s12[] = {1, 2}, s2[] = {2}, s0[] = {0, 5};
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {
      out_tensor("probs", "FP32", s3, 1), out_tensor("ids", "INT64", s12, 2),
      out_tensor("h", "BF16", s2, 1),     out_tensor("f", "FP16", s2, 1),
      out_tensor("mask", "BOOL", s2, 1),  out_tensor("s", "BYTES", s2, 1),
  };
  ProtobufCBinaryData raw[] = {
      {sizeof f32, (uint8_t *)f32}, {sizeof i64, (uint8_t *)i64}, {4, bf16},
      {4, f16},                     {2, b},                       {sizeof bytes, bytes},
  };
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  resp.model_name = "mlp";
  resp.model_version = "3";
  resp.id = "req-1";
  resp.outputs = outs;
  resp.n_outputs = 6;
  resp.raw_output_contents = raw;
  resp.n_raw_output_contents = 6;
  expect_format(&resp,
                "{\"model_name\":\"mlp\",\"model_version\":\"3\",\"id\":\"req-1\",\"outputs\":["
                "{\"name\":\"probs\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[0.1,1,-2.5]},"
                "{\"name\":\"ids\",\"datatype\":\"INT64\",\"shape\":[1,2],"
                "\"data\":[-5,9223372036854775807]},"
                "{\"name\":\"h\",\"datatype\":\"BF16\",\"shape\":[2],\"data\":[1,3.140625]},"
                "{\"name\":\"f\",\"datatype\":\"FP16\",\"shape\":[2],"
                "\"data\":[1,5.9604645e-08]},"
                "{\"name\":\"mask\",\"datatype\":\"BOOL\",\"shape\":[2],\"data\":[true,false]},"
                "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],"
                "\"data\":[\"ok\",\"a\\\"\\n\"]}]}");

  /* Small integer types, FP64, zero-element tensors, no id and no version. */
  Inference__ModelInferResponse__InferOutputTensor *outs2[] = {
      out_tensor("u", "UINT16", s2, 1), out_tensor("i", "INT8", s2, 1),
      out_tensor("d", "FP64", s3, 0), out_tensor("e", "FP32", s0, 2)};
  ProtobufCBinaryData raw2[] = {{4, u16}, {2, i8}, {8, (uint8_t *)f64}, {0, NULL}};
  Inference__ModelInferResponse r2 = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  r2.model_name = "m";
  r2.outputs = outs2;
  r2.n_outputs = 4;
  r2.raw_output_contents = raw2;
  r2.n_raw_output_contents = 4;
  expect_format(&r2, "{\"model_name\":\"m\",\"outputs\":["
                     "{\"name\":\"u\",\"datatype\":\"UINT16\",\"shape\":[2],\"data\":[65535,1]},"
                     "{\"name\":\"i\",\"datatype\":\"INT8\",\"shape\":[2],\"data\":[-128,5]},"
                     "{\"name\":\"d\",\"datatype\":\"FP64\",\"shape\":[],\"data\":[1e-300]},"
                     "{\"name\":\"e\",\"datatype\":\"FP32\",\"shape\":[0,5],\"data\":[]}]}");
}

static void test_response_contents_and_params(void) {
  float f[2] = {0.25f, -3.4028235e38f};
  int32_t ints[2] = {-7, 8};
  int64_t s2[] = {2};
  Inference__InferTensorContents c1 = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  c1.fp32_contents = f;
  c1.n_fp32_contents = 2;
  Inference__InferTensorContents c2 = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  c2.int_contents = ints;
  c2.n_int_contents = 2;
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {out_tensor("y", "FP32", s2, 1),
                                                              out_tensor("k", "INT16", s2, 1)};
  outs[0]->contents = &c1;
  outs[1]->contents = &c2;
  Inference__InferParameter pv = INFERENCE__INFER_PARAMETER__INIT;
  pv.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
  pv.string_param = "x\ty";
  Inference__ModelInferResponse__ParametersEntry pe =
      INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
  pe.key = "note";
  pe.value = &pv;
  Inference__ModelInferResponse__ParametersEntry *pes[] = {&pe};
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  resp.model_name = "m";
  resp.parameters = pes;
  resp.n_parameters = 1;
  resp.outputs = outs;
  resp.n_outputs = 2;
  expect_format(&resp, "{\"model_name\":\"m\",\"parameters\":{\"note\":\"x\\ty\"},\"outputs\":["
                       "{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[2],"
                       "\"data\":[0.25,-3.4028235e+38]},"
                       "{\"name\":\"k\",\"datatype\":\"INT16\",\"shape\":[2],\"data\":[-7,8]}]}");
  outs[0]->contents = NULL;
  outs[1]->contents = NULL;
}

static void expect_format_error(const Inference__ModelInferResponse *resp, const char *want) {
  char *text = (char *)1;
  CU_ASSERT_EQUAL(tpu_oip_json_infer_response_format(resp, &text, err, sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NULL(text);
  if (!strstr(err, want)) {
    printf("\n  want: %s\n  got:  %s\n", want, err);
    CU_FAIL("error message does not say what was expected");
  }
}

static void test_response_errors(void) {
  float f[3] = {1, 2, 3};
  int64_t s4[] = {4}, s2[] = {2};
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {out_tensor("probs", "FP32", s4, 1),
                                                              out_tensor("b", "FP32", s2, 1)};
  ProtobufCBinaryData raw[] = {{12, (uint8_t *)f}, {8, (uint8_t *)f}};
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  resp.model_name = "m";
  resp.outputs = outs;
  resp.n_outputs = 1;
  resp.raw_output_contents = raw;
  resp.n_raw_output_contents = 1;
  expect_format_error(&resp, "outputs[0] 'probs': shape [4] needs 16 bytes of FP32 data, got 12");
  resp.n_outputs = 2;
  expect_format_error(&resp, "response has 2 outputs but 1 raw_output_contents");
  /* Typed contents that do not match the shape. */
  Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  c.fp32_contents = f;
  c.n_fp32_contents = 3;
  outs[0]->contents = &c;
  resp.n_outputs = 1;
  resp.n_raw_output_contents = 0;
  expect_format_error(&resp, "outputs[0] 'probs': shape [4] needs 4 FP32 elements, contents hold 3");
  outs[0]->datatype = "BF16";
  expect_format_error(&resp, "BF16 data can only travel as raw contents");
  outs[0]->datatype = "F32";
  expect_format_error(&resp, "outputs[0] 'probs': unknown datatype \"F32\"");
  outs[0]->datatype = "BYTES";
  uint8_t bad[] = {5, 0, 0, 0, 'a'};
  ProtobufCBinaryData braw[] = {{sizeof bad, bad}};
  resp.raw_output_contents = braw;
  resp.n_raw_output_contents = 1;
  s4[0] = 1;
  expect_format_error(&resp, "BYTES element 0 claims 5 bytes, 1 remain");
  uint8_t notutf8[] = {1, 0, 0, 0, 0xff};
  braw[0].data = notutf8;
  braw[0].len = sizeof notutf8;
  expect_format_error(&resp, "BYTES element 0 is not valid UTF-8");
  s4[0] = -1;
  outs[0]->datatype = "FP32";
  expect_format_error(&resp, "outputs[0] 'probs': dimension 0 is -1, expected >= 0");
  outs[0]->contents = NULL;
}

/* NaN and infinities have no JSON text (RFC 8259 section 6): formatting fails and names the
 * element, for raw data of every floating-point type, typed contents, a double parameter and a
 * MatMul tensor. Never null (a number silently lost) or a NaN token (not JSON). */
static void test_response_nonfinite(void) {
  float f32[3] = {0.5f, INFINITY, 1};
  uint16_t bf16[2] = {0x3f80, 0x7fc0}, f16[3] = {0x3c00, 0x3c00, 0xfc00}; /* BF16 NaN, FP16 -inf */
  double f64[2] = {1, -INFINITY};
  int64_t s3[] = {3}, s2[] = {2};
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {out_tensor("probs", "FP32", s3, 1)};
  ProtobufCBinaryData raw[] = {{sizeof f32, (uint8_t *)f32}};
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  resp.model_name = "m";
  resp.outputs = outs;
  resp.n_outputs = 1;
  resp.raw_output_contents = raw;
  resp.n_raw_output_contents = 1;
  expect_format_error(&resp, "outputs[0] 'probs': element 1 is infinity, which JSON cannot "
                             "express (RFC 8259 has no NaN or infinity)");
  f32[1] = NAN;
  expect_format_error(&resp, "outputs[0] 'probs': element 1 is NaN");
  f32[1] = -INFINITY;
  expect_format_error(&resp, "element 1 is -infinity");
  outs[0] = out_tensor("h", "BF16", s2, 1);
  raw[0] = (ProtobufCBinaryData){sizeof bf16, (uint8_t *)bf16};
  expect_format_error(&resp, "outputs[0] 'h': element 1 is NaN");
  outs[0] = out_tensor("f", "FP16", s3, 1);
  raw[0] = (ProtobufCBinaryData){sizeof f16, (uint8_t *)f16};
  expect_format_error(&resp, "outputs[0] 'f': element 2 is -infinity");
  outs[0] = out_tensor("d", "FP64", s2, 1);
  raw[0] = (ProtobufCBinaryData){sizeof f64, (uint8_t *)f64};
  expect_format_error(&resp, "outputs[0] 'd': element 1 is -infinity");
  /* Typed contents. */
  float tf[2] = {NAN, 0};
  Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  c.fp32_contents = tf;
  c.n_fp32_contents = 2;
  outs[0] = out_tensor("y", "FP32", s2, 1);
  outs[0]->contents = &c;
  resp.n_raw_output_contents = 0;
  expect_format_error(&resp, "outputs[0] 'y': element 0 is NaN");
  c.n_fp32_contents = 0;
  c.fp64_contents = f64;
  c.n_fp64_contents = 2;
  outs[0]->datatype = "FP64";
  expect_format_error(&resp, "outputs[0] 'y': element 1 is -infinity");
  f64[1] = 2;
  char *text = NULL;
  CU_ASSERT_EQUAL(tpu_oip_json_infer_response_format(&resp, &text, err, sizeof err),
                  TPU_OIP_JSON_OK); /* finite again: formats */
  free(text);
  /* A double parameter. */
  Inference__InferParameter pv = INFERENCE__INFER_PARAMETER__INIT;
  pv.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
  pv.double_param = NAN;
  Inference__ModelInferResponse__ParametersEntry pe =
      INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
  pe.key = "score";
  pe.value = &pv;
  Inference__ModelInferResponse__ParametersEntry *pes[] = {&pe};
  resp.parameters = pes;
  resp.n_parameters = 1;
  expect_format_error(&resp, "parameters: parameter \"score\" is NaN");
  outs[0]->contents = NULL;
  /* A MatMul result tensor. */
  float m[4] = {1, 2, 3, INFINITY};
  int64_t shape[2] = {2, 2};
  text = (char *)1;
  CU_ASSERT_EQUAL(tpu_oip_json_tensor_format("FP32", shape, 2, m, sizeof m, &text, err,
                                             sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NULL(text);
  CU_ASSERT_STRING_EQUAL(err, "tensor: element 3 is infinity, which JSON cannot express "
                              "(RFC 8259 has no NaN or infinity)");
}

/* Random FP32/FP64/INT32 tensors: JSON -> raw bytes -> JSON gives back the same values. */
static void test_random_round_trip(void) {
  for (int iter = 0; iter < 20; iter++) {
    int rows = (int)tpu_test_rand_range(1, 5), cols = (int)tpu_test_rand_range(1, 7);
    int n = rows * cols;
    float *vals = malloc((size_t)n * sizeof *vals);
    char *body = malloc(64 + (size_t)n * 40);
    int off = sprintf(body, "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[%d,%d],"
                            "\"data\":[", rows, cols);
    for (int i = 0; i < n; i++) {
      vals[i] = tpu_test_rand_float(-1e4f, 1e4f) * (tpu_test_rand() % 2 ? 1e-6f : 1.0f);
      off += sprintf(body + off, "%s%.9g", i ? "," : "", (double)vals[i]);
    }
    strcpy(body + off, "]}]}");
    Inference__ModelInferRequest *req = NULL;
    TPU_ASSERT_SEED(parse(body, &req) == TPU_OIP_JSON_OK);
    if (!req) {
      free(body);
      free(vals);
      return;
    }
    TPU_ASSERT_SEED(req->raw_input_contents[0].len == (size_t)n * 4);
    TPU_ASSERT_SEED(memcmp(req->raw_input_contents[0].data, vals, (size_t)n * 4) == 0);

    /* Back out through a response with the same bytes. */
    int64_t shape[2] = {rows, cols};
    Inference__ModelInferResponse__InferOutputTensor *o = out_tensor("y", "FP32", shape, 2);
    Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    resp.model_name = "m";
    resp.outputs = &o;
    resp.n_outputs = 1;
    resp.raw_output_contents = req->raw_input_contents;
    resp.n_raw_output_contents = 1;
    char *text = NULL;
    TPU_ASSERT_SEED(tpu_oip_json_infer_response_format(&resp, &text, err, sizeof err) ==
                    TPU_OIP_JSON_OK);
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    json_t *data = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
    TPU_ASSERT_SEED(json_array_size(data) == (size_t)n);
    for (int i = 0; i < n && i < (int)json_array_size(data); i++)
      TPU_ASSERT_SEED((float)json_number_value(json_array_get(data, (size_t)i)) == vals[i]);
    json_decref(j);
    free(text);
    inference__model_infer_request__free_unpacked(req, NULL);
    free(body);
    free(vals);
  }
}

/* ---- the single-pass fast path against the jansson path ---- */

/* The jansson path alone: load, then build from the tree. */
static tpu_oip_json_status_t parse_slow(const char *text, size_t len,
                                        const tpu_oip_json_limits_t *lim,
                                        Inference__ModelInferRequest **req) {
  json_t *root = NULL;
  *req = NULL;
  tpu_oip_json_status_t st = tpu_oip_json_load(text, len, lim, &root, err, sizeof err);
  if (st != TPU_OIP_JSON_OK) return st;
  st = tpu_oip_json_infer_request_from_json(root, "m", "2", req, err, sizeof err);
  json_decref(root);
  return st;
}

/* Whether two requests pack to the same protobuf bytes. */
static int same_message(const Inference__ModelInferRequest *a,
                        const Inference__ModelInferRequest *b) {
  size_t na = inference__model_infer_request__get_packed_size(a);
  size_t nb = inference__model_infer_request__get_packed_size(b);
  if (na != nb) return 0;
  uint8_t *pa = malloc(na + 1), *pb = malloc(nb + 1);
  inference__model_infer_request__pack(a, pa);
  inference__model_infer_request__pack(b, pb);
  int same = memcmp(pa, pb, na) == 0;
  free(pa);
  free(pb);
  return same;
}

typedef struct {
  char *p;
  size_t len, cap;
} tbuf_t;

__attribute__((format(printf, 2, 3))) static void tb_printf(tbuf_t *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    b->cap = b->cap * 2 + (size_t)n;
    b->p = realloc(b->p, b->cap);
  }
}

static const char *rand_ws(void) {
  static const char *ws[] = {"", "", "", " ", "\n", " \t", "\r\n  "};
  return ws[tpu_test_rand() % (sizeof ws / sizeof ws[0])];
}

/* A random JSON number in one of the forms clients write. */
static void rand_number(tbuf_t *b) {
  double v = tpu_test_rand_float(-1.0f, 1.0f);
  switch (tpu_test_rand() % 12) {
  case 0: tb_printf(b, "%.4f", v); break;
  case 1: tb_printf(b, "%.9g", v * 1e3); break;
  case 2: tb_printf(b, "%.17g", v); break;                 /* 17 digits: strtod fallback */
  case 3: tb_printf(b, "%d", (int)(v * 1000)); break;      /* integer tokens */
  case 4: tb_printf(b, "%.3e", v * 1e-30); break;          /* exponents beyond 10^22 */
  case 5: tb_printf(b, "%.6E", v * 1e30); break;
  case 6: tb_printf(b, "%s", tpu_test_rand() % 2 ? "-0" : "-0.0"); break;
  case 7: tb_printf(b, "%lld", (long long)(v * 9.2e18)); break; /* 19-digit integers */
  case 8: tb_printf(b, "0.%030d1", 0); break;              /* long fraction */
  case 9: tb_printf(b, "%.20f", v * 123456.0); break;
  case 10: tb_printf(b, "%.8e", v * 3e38); break;          /* near FLT_MAX */
  default: tb_printf(b, "%g", v * 100); break;
  }
}

/* A random body the fast path must take; returns it (malloc'd). */
static char *rand_fast_body(size_t *len) {
  tbuf_t b = {malloc(256), 0, 256};
  tb_printf(&b, "%s{", rand_ws());
  int first = 1;
  if (tpu_test_rand() % 2) {
    tb_printf(&b, "%s\"id\"%s:%s\"req-%u\"", rand_ws(), rand_ws(), rand_ws(),
              (unsigned)(tpu_test_rand() % 1000));
    first = 0;
  }
  if (tpu_test_rand() % 3 == 0) {
    tb_printf(&b, "%s\"parameters\":{\"a\":true,\"b\":%d,\"c\":%.5g,\"d\":\"x\xc3\xa9\"}",
              first ? "" : ",", (int)tpu_test_rand_range(-5, 5),
              (double)tpu_test_rand_float(-2, 2));
    first = 0;
  }
  tb_printf(&b, "%s\"inputs\":%s[", first ? "" : ",", rand_ws());
  int nin = (int)tpu_test_rand_range(1, 3);
  for (int i = 0; i < nin; i++) {
    int rank = (int)tpu_test_rand_range(0, 3);
    int64_t dims[3];
    size_t count = 1;
    for (int d = 0; d < rank; d++) {
      dims[d] = tpu_test_rand_range(0, 4);
      count *= (size_t)dims[d];
    }
    tb_printf(&b, "%s{\"name\":\"in%d\",%s\"shape\":[", i ? "," : "", i, rand_ws());
    for (int d = 0; d < rank; d++) tb_printf(&b, "%s%s%lld", d ? "," : "", rand_ws(),
                                             (long long)dims[d]);
    tb_printf(&b, "],\"datatype\":\"FP32\",");
    if (tpu_test_rand() % 3 == 0) tb_printf(&b, "\"parameters\":{},");
    tb_printf(&b, "\"data\":");
    int nested = rank > 1 && count > 0 && tpu_test_rand() % 2;
    if (!nested) {
      tb_printf(&b, "[");
      for (size_t k = 0; k < count; k++) {
        tb_printf(&b, "%s%s", k ? "," : "", rand_ws());
        rand_number(&b);
      }
      tb_printf(&b, "]");
    } else {
      /* Nested, by hand over the 2 or 3 dims. */
      size_t k = 0;
      tb_printf(&b, "[");
      for (int64_t a = 0; a < dims[0]; a++) {
        tb_printf(&b, "%s[", a ? "," : "");
        int64_t nb = dims[1], nc = rank == 3 ? dims[2] : 1;
        for (int64_t c1 = 0; c1 < nb; c1++) {
          if (rank == 3) tb_printf(&b, "%s[", c1 ? "," : "");
          for (int64_t c2 = 0; c2 < nc; c2++) {
            tb_printf(&b, "%s", (rank == 3 ? c2 : c1) ? "," : "");
            rand_number(&b);
            k++;
          }
          if (rank == 3) tb_printf(&b, "]");
        }
        tb_printf(&b, "]%s", rand_ws());
      }
      tb_printf(&b, "]");
    }
    tb_printf(&b, "}");
  }
  tb_printf(&b, "]");
  if (tpu_test_rand() % 3 == 0)
    tb_printf(&b, ",\"outputs\":[{\"name\":\"y\"},{\"parameters\":{\"binary_data\":false},"
                  "\"name\":\"z\"}]");
  tb_printf(&b, "}%s", rand_ws());
  *len = b.len;
  return b.p;
}

static void test_fast_path_equals_jansson(void) {
  for (int iter = 0; iter < 400; iter++) {
    size_t len;
    char *body = rand_fast_body(&len);
    Inference__ModelInferRequest *fast = NULL, *slow = NULL;
    int took = tpu__oip_json_infer_fast(body, len, "m", "2", NULL, NULL, 0, &fast);
    tpu_oip_json_status_t st = parse_slow(body, len, NULL, &slow);
    if (!took || st != TPU_OIP_JSON_OK || !same_message(fast, slow))
      printf("\n  body: %s\n  fast %d, jansson %s: %s\n", body, took, tpu_oip_json_strerror(st),
             err);
    TPU_ASSERT_SEED(took);
    TPU_ASSERT_SEED(st == TPU_OIP_JSON_OK);
    if (fast && slow) TPU_ASSERT_SEED(same_message(fast, slow));
    if (fast) inference__model_infer_request__free_unpacked(fast, NULL);
    if (slow) inference__model_infer_request__free_unpacked(slow, NULL);
    free(body);
  }
  /* Bodies it leaves to jansson, which still takes them. */
  static const char *declined[] = {
      "{\"id\":\"a\\u0062\",\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
      "\"data\":[1]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"INT32\",\"data\":[1]}]}",
      "{\"inputs\":[{\"name\":\"x\",\"data\":[1],\"shape\":[1],\"datatype\":\"FP32\"}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}],"
      "\"extra\":1}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1e39999]}]}",
  };
  for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++) {
    Inference__ModelInferRequest *fast = NULL, *req = NULL;
    CU_ASSERT_FALSE(tpu__oip_json_infer_fast(declined[i], strlen(declined[i]), "m", "2", NULL,
                                             NULL, 0, &fast));
    CU_ASSERT_PTR_NULL(fast);
    tpu_oip_json_status_t st = parse(declined[i], &req);
    CU_ASSERT_EQUAL(st, i == 4 ? TPU_OIP_JSON_SYNTAX : TPU_OIP_JSON_OK);
    if (req) inference__model_infer_request__free_unpacked(req, NULL);
  }
}

/* Binary-tensor requests (a JSON header, then the tensors' bytes): the fast path builds what
 * the jansson path builds, bytes included (NaN and infinities too: raw FP32 is not text), and
 * declines what it must leave to jansson's messages; mutated headers agree or decline. */
static void test_fast_path_binary(void) {
  for (int iter = 0; iter < 1500; iter++) {
    tbuf_t b = {0};
    unsigned char bin[4 * 64 * 3];
    size_t binlen = 0;
    tb_printf(&b, "{%s\"inputs\":[", tpu_test_rand() % 2 ? "\"id\":\"r\"," : "");
    int nin = (int)tpu_test_rand_range(1, 3);
    for (int i = 0; i < nin; i++) {
      size_t rows = (size_t)tpu_test_rand_range(0, 4), w = (size_t)tpu_test_rand_range(1, 16);
      tb_printf(&b, "%s{\"name\":\"in%d\",\"shape\":[%zu,%zu],\"datatype\":\"FP32\","
                "\"parameters\":{%s\"binary_data_size\":%zu}}",
                i ? "," : "", i, rows, w, tpu_test_rand() % 3 ? "" : "\"p\":1,", rows * w * 4);
      for (size_t k = 0; k < rows * w * 4; k++) bin[binlen++] = (unsigned char)tpu_test_rand();
    }
    tb_printf(&b, "]%s}", tpu_test_rand() % 3 ? ""
                          : ",\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}}]");
    size_t hlen = b.len;
    /* Now and then a mutation of the header (agree or decline), or of the section's length. */
    int mutate = tpu_test_rand() % 4 == 0;
    if (mutate && hlen) b.p[tpu_test_rand() % hlen] = "{}[]\":,0159-e "[tpu_test_rand() % 15];
    size_t blen = binlen;
    if (tpu_test_rand() % 8 == 0) blen = binlen ? binlen - 1 : 1; /* short, or bytes left over */
    char *body = malloc(hlen + blen + 1);
    memcpy(body, b.p, hlen);
    memcpy(body + hlen, bin, blen);
    Inference__ModelInferRequest *fast = NULL, *slow = NULL;
    int took = tpu__oip_json_infer_fast(body, hlen, "m", "2", NULL,
                                        (const uint8_t *)body + hlen, blen, &fast);
    tpu_oip_json_status_t st =
        tpu__oip_json_infer_binary_jansson(body, hlen + blen, hlen, "m", "2", NULL, &slow, err,
                                           sizeof err);
    if (took && (st != TPU_OIP_JSON_OK || !same_message(fast, slow)))
      printf("\n  header: %.*s (%zu binary bytes)\n  fast took it; jansson %s: %s\n", (int)hlen,
             b.p, blen, tpu_oip_json_strerror(st), err);
    if (took) {
      TPU_ASSERT_SEED(st == TPU_OIP_JSON_OK);
      if (slow) TPU_ASSERT_SEED(same_message(fast, slow));
    } else {
      TPU_ASSERT_SEED(fast == NULL);
      if (!mutate && blen == binlen) TPU_ASSERT_SEED(0); /* a plain request it should take */
    }
    /* And the public entry point gives the jansson path's answer whichever path ran. */
    Inference__ModelInferRequest *pub = NULL;
    tpu_oip_json_status_t pst = tpu_oip_json_infer_request_parse_binary(
        body, hlen + blen, hlen, "m", "2", NULL, &pub, err, sizeof err);
    TPU_ASSERT_SEED(pst == st);
    if (pub && slow) TPU_ASSERT_SEED(same_message(pub, slow));
    if (pub) inference__model_infer_request__free_unpacked(pub, NULL);
    if (fast) inference__model_infer_request__free_unpacked(fast, NULL);
    if (slow) inference__model_infer_request__free_unpacked(slow, NULL);
    free(body);
    free(b.p);
  }
  /* Left to jansson: both "data" and a size, a size that is not count x 4, a real size. */
  static const char *declined[] = {
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
      "\"parameters\":{\"binary_data_size\":4}}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\","
      "\"parameters\":{\"binary_data_size\":4}}]}",
      "{\"inputs\":[{\"name\":\"x\",\"shape\":[1],\"datatype\":\"FP32\","
      "\"parameters\":{\"binary_data_size\":4.0}}]}",
  };
  static const uint8_t four[8] = {0, 0, 128, 63, 0, 0, 0, 64};
  for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++) {
    Inference__ModelInferRequest *fast = NULL;
    CU_ASSERT_FALSE(tpu__oip_json_infer_fast(declined[i], strlen(declined[i]), "m", "2", NULL,
                                             four, 4, &fast));
    CU_ASSERT_PTR_NULL(fast);
  }
}

/* Mutated bodies: whatever the fast path takes, jansson takes identically; nothing crashes. */
static void test_fast_path_mutations(void) {
  static const char alphabet[] = "{}[]\",:0123456789.-+eE \\tfnu\x80\xc3";
  for (int iter = 0; iter < 3000; iter++) {
    size_t len;
    char *body = rand_fast_body(&len);
    body = realloc(body, len + 16);
    int nmut = (int)tpu_test_rand_range(1, 3);
    for (int m = 0; m < nmut && len > 0; m++) {
      size_t at = (size_t)tpu_test_rand() % len;
      char c = alphabet[tpu_test_rand() % (sizeof alphabet - 1)];
      switch (tpu_test_rand() % 4) {
      case 0: body[at] = c; break;                                      /* replace */
      case 1: memmove(body + at, body + at + 1, len - at - 1); len--; break; /* delete */
      case 2:                                                           /* insert */
        memmove(body + at + 1, body + at, len - at);
        body[at] = c;
        len++;
        break;
      default: len = at; break; /* truncate */
      }
    }
    /* An exact-size copy, so reading one byte past the end is caught by ASan. */
    char *text = malloc(len ? len : 1);
    memcpy(text, body, len);
    Inference__ModelInferRequest *fast = NULL, *slow = NULL;
    int took = tpu__oip_json_infer_fast(text, len, "m", "2", NULL, NULL, 0, &fast);
    tpu_oip_json_status_t st = parse_slow(text, len, NULL, &slow);
    if (took) {
      if (st != TPU_OIP_JSON_OK || !same_message(fast, slow))
        printf("\n  body: %.*s\n  fast took it; jansson %s: %s\n", (int)len, text,
               tpu_oip_json_strerror(st), err);
      TPU_ASSERT_SEED(st == TPU_OIP_JSON_OK);
      if (slow) TPU_ASSERT_SEED(same_message(fast, slow));
    } else {
      TPU_ASSERT_SEED(fast == NULL);
    }
    /* The public entry point agrees with jansson on the status either way. */
    Inference__ModelInferRequest *pub = NULL;
    tpu_oip_json_status_t pst =
        tpu_oip_json_infer_request_parse(text, len, "m", "2", NULL, &pub, err, sizeof err);
    TPU_ASSERT_SEED(pst == st);
    if (pub) inference__model_infer_request__free_unpacked(pub, NULL);
    if (fast) inference__model_infer_request__free_unpacked(fast, NULL);
    if (slow) inference__model_infer_request__free_unpacked(slow, NULL);
    free(text);
    free(body);
  }
}

/* Regression (fuzz_oip_json): nested FP32 data for a shape with a 0 dimension made the fast path
 * compute NULL + 0 on the empty tensor's buffer, undefined behaviour that make test-asan's
 * UBSan turns into a failure here. */
static void test_zero_dim_nested_null_offset(void) {
  Inference__ModelInferRequest *req = NULL;
  CU_ASSERT_EQUAL(parse("{\"inputs\":[{\"name\":\"x\",\"shape\":[2,0],\"datatype\":\"FP32\","
                        "\"data\":[[],[]]}]}",
                        &req),
                  TPU_OIP_JSON_OK);
  CU_ASSERT_PTR_NOT_NULL_FATAL(req);
  CU_ASSERT_EQUAL(req->n_raw_input_contents, 1);
  CU_ASSERT_EQUAL(req->raw_input_contents[0].len, 0);
  inference__model_infer_request__free_unpacked(req, NULL);
  expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[2,0],\"datatype\":\"FP32\","
               "\"data\":[[1,2],[3,4.5]]}]}",
               TPU_OIP_JSON_INVALID, "expected 0 elements for dimension 1 of shape [2,0], got 2");
}

/* ---- tensors (tpuctl matmul) ---- */

static void test_tensor_decode_format(void) {
  json_t *j = json_loads("{\"shape\":[2,2],\"datatype\":\"INT8\",\"data\":[[1,-2],[3,4]]}", 0,
                         NULL);
  tpu_oip_tensor_t t;
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_tensor_decode(j, "a", &t, err, sizeof err), TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(t.datatype, "INT8");
  CU_ASSERT_EQUAL(t.rank, 2);
  CU_ASSERT_EQUAL(t.count, 4);
  CU_ASSERT_EQUAL_FATAL(t.nbytes, 4);
  const uint8_t want[] = {1, 0xfe, 3, 4};
  CU_ASSERT_EQUAL(memcmp(t.data, want, 4), 0);
  tpu_oip_tensor_clear(&t);
  CU_ASSERT_PTR_NULL(t.data);
  tpu_oip_tensor_clear(NULL);
  json_decref(j);

  j = json_loads("{\"shape\":[2,2],\"datatype\":\"FP32\",\"data\":[1,2,3]}", 0, NULL);
  CU_ASSERT_EQUAL(tpu_oip_json_tensor_decode(j, "b", &t, err, sizeof err), TPU_OIP_JSON_INVALID);
  CU_ASSERT_STRING_EQUAL(err, "b.data: expected 4 numbers for shape [2,2], got 3");
  CU_ASSERT_PTR_NULL(t.data);
  json_decref(j);
  CU_ASSERT_EQUAL(tpu_oip_json_tensor_decode(NULL, "a", &t, err, sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_STRING_EQUAL(err, "a: missing");

  int32_t c[4] = {-1, 2, 300000, 4};
  int64_t shape[2] = {2, 2};
  char *text = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_tensor_format("INT32", shape, 2, c, sizeof c, &text, err,
                                                   sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(text, "{\"shape\":[2,2],\"datatype\":\"INT32\",\"data\":[-1,2,300000,4]}");
  free(text);
  CU_ASSERT_EQUAL(tpu_oip_json_tensor_format("INT32", shape, 2, c, 12, &text, err, sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_STRING_EQUAL(err, "tensor: shape [2,2] needs 16 bytes of INT32 data, got 12");
  CU_ASSERT_EQUAL(tpu_oip_json_tensor_format("FP8", shape, 2, c, 4, &text, err, sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NULL(text);

  CU_ASSERT_EQUAL(tpu_oip_datatype_size("BF16"), 2);
  CU_ASSERT_EQUAL(tpu_oip_datatype_size("UINT64"), 8);
  CU_ASSERT_EQUAL(tpu_oip_datatype_size("BYTES"), 0);
  CU_ASSERT_EQUAL(tpu_oip_datatype_size("nope"), 0);
  CU_ASSERT_EQUAL(tpu_oip_datatype_size(NULL), 0);
}

/* ---- Triton's binary tensor extension ---- */

/* Parses json + bin[0..blen) with the JSON's length as the header would give it. */
static tpu_oip_json_status_t parse_bin(const char *json, const void *bin, size_t blen,
                                       Inference__ModelInferRequest **req) {
  size_t jl = strlen(json);
  char *body = malloc(jl + blen + 1);
  memcpy(body, json, jl);
  if (blen) memcpy(body + jl, bin, blen);
  err[0] = '\0';
  tpu_oip_json_status_t st = tpu_oip_json_infer_request_parse_binary(body, jl + blen, jl, "m", "2",
                                                                     NULL, req, err, sizeof err);
  free(body);
  return st;
}

static void expect_bin_error(const char *json, const void *bin, size_t blen, const char *want) {
  Inference__ModelInferRequest *req = (Inference__ModelInferRequest *)1;
  CU_ASSERT_EQUAL(parse_bin(json, bin, blen, &req), TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NULL(req);
  if (!strstr(err, want)) {
    printf("\n  body: %s\n  want: %s\n  got:  %s\n", json, want, err);
    CU_FAIL("error message does not say what was expected");
  }
}

static void test_binary_request(void) {
  /* Two binary inputs (FP32 with NaN and infinity, BYTES) around one JSON input. */
  float x[4] = {1.5f, NAN, INFINITY, -0.0f};
  uint8_t sec[16 + 4 + 2 + 4 + 0];
  memcpy(sec, x, 16);
  memcpy(sec + 16, "\x02\x00\x00\x00" "ab" "\x00\x00\x00\x00", 10);
  const char *json =
      "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,2],"
      "\"parameters\":{\"binary_data_size\":16}},"
      "{\"name\":\"ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[7]},"
      "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],"
      "\"parameters\":{\"binary_data_size\":10}}],"
      "\"parameters\":{\"binary_data_output\":true}}";
  Inference__ModelInferRequest *req = NULL;
  tpu_oip_json_status_t st = parse_bin(json, sec, sizeof sec, &req);
  if (st != TPU_OIP_JSON_OK) printf("\n  %s\n", err);
  CU_ASSERT_EQUAL_FATAL(st, TPU_OIP_JSON_OK);
  CU_ASSERT_EQUAL_FATAL(req->n_raw_input_contents, 3);
  CU_ASSERT_EQUAL(req->raw_input_contents[0].len, 16);
  CU_ASSERT_EQUAL(memcmp(req->raw_input_contents[0].data, x, 16), 0);
  int64_t seven = 7;
  CU_ASSERT_EQUAL(req->raw_input_contents[1].len, 8);
  CU_ASSERT_EQUAL(memcmp(req->raw_input_contents[1].data, &seven, 8), 0);
  CU_ASSERT_EQUAL(req->raw_input_contents[2].len, 10);
  CU_ASSERT_EQUAL(memcmp(req->raw_input_contents[2].data, sec + 16, 10), 0);
  CU_ASSERT_EQUAL(req->inputs[0]->n_shape, 2);
  CU_ASSERT_EQUAL(req->n_parameters, 1);
  inference__model_infer_request__free_unpacked(req, NULL);

  /* An empty tensor takes no bytes; the header with no binary section is fine. */
  req = NULL;
  CU_ASSERT_EQUAL(parse_bin("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[0,4],"
                            "\"parameters\":{\"binary_data_size\":0}}]}",
                            NULL, 0, &req),
                  TPU_OIP_JSON_OK);
  CU_ASSERT_EQUAL(req->raw_input_contents[0].len, 0);
  inference__model_infer_request__free_unpacked(req, NULL);
  req = NULL;
  CU_ASSERT_EQUAL(parse_bin("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"INT8\",\"shape\":[2],"
                            "\"data\":[1,2]}]}",
                            NULL, 0, &req),
                  TPU_OIP_JSON_OK);
  inference__model_infer_request__free_unpacked(req, NULL);
}

static void test_binary_request_errors(void) {
  uint8_t sec[64] = {0};
  const char *fp = "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,2],"
                   "\"parameters\":{\"binary_data_size\":%s}}]}";
  char json[512];
  snprintf(json, sizeof json, fp, "15");
  expect_bin_error(json, sec, 15, "inputs[0].parameters.binary_data_size: 15 bytes, expected 16 "
                                  "for shape [2,2] of FP32 (4 bytes each)");
  snprintf(json, sizeof json, fp, "16");
  expect_bin_error(json, sec, 12, "16 bytes, but only 12 bytes of binary data are left");
  expect_bin_error(json, sec, 20, "binary data: 20 bytes follow the JSON header, but the inputs' "
                                  "binary_data_size parameters account for 16");
  snprintf(json, sizeof json, fp, "-1");
  expect_bin_error(json, sec, 16, "binary_data_size: expected a non-negative integer, got");
  snprintf(json, sizeof json, fp, "\"16\"");
  expect_bin_error(json, sec, 16, "binary_data_size: expected a non-negative integer, got a string");
  /* Both data and a binary size. */
  expect_bin_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
                   "\"parameters\":{\"binary_data_size\":4}}]}",
                   sec, 4, "inputs[0]: has both \"data\" and parameters.binary_data_size");
  /* Bytes with no input to take them. */
  expect_bin_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],"
                   "\"data\":[1]}]}",
                   sec, 4, "binary data: 4 bytes follow the JSON header");
  /* BYTES whose prefixes do not fit the shape. */
  uint8_t b1[] = {3, 0, 0, 0, 'a', 'b', 'c', 9, 0, 0, 0, 'x'};
  expect_bin_error("{\"inputs\":[{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],"
                   "\"parameters\":{\"binary_data_size\":12}}]}",
                   b1, sizeof b1, "inputs[0]: binary BYTES element 1 claims 9 bytes, 1 remain");
  expect_bin_error("{\"inputs\":[{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[1],"
                   "\"parameters\":{\"binary_data_size\":12}}]}",
                   b1, sizeof b1, "5 bytes of binary BYTES data left over after the 1 elements");
  expect_bin_error("{\"inputs\":[{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[3],"
                   "\"parameters\":{\"binary_data_size\":7}}]}",
                   b1, 7, "binary BYTES data ends at element 1 of the 3");
  /* A huge claimed size allocates nothing: it is checked against what was sent. */
  snprintf(json, sizeof json, fp, "9223372036854775807");
  expect_bin_error(json, sec, 16, "9223372036854775807 bytes, but only 16 bytes");
  /* Header beyond the body; and without the header a binary size with no data says so. */
  Inference__ModelInferRequest *req = (Inference__ModelInferRequest *)1;
  CU_ASSERT_EQUAL(tpu_oip_json_infer_request_parse_binary("{}", 2, 3, "m", NULL, NULL, &req, err,
                                                          sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NULL(req);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "Inference-Header-Content-Length: 3 bytes, but the body "
                                     "has only 2"));
  snprintf(json, sizeof json, fp, "16");
  expect_error(json, TPU_OIP_JSON_INVALID,
               "inputs[0].parameters.binary_data_size: the request has no binary data (send the "
               "JSON header's length in Inference-Header-Content-Length");
  /* The JSON part is still JSON, and still limited in depth. */
  expect_bin_error("{\"inputs\":[]}", sec, 4, "inputs: expected a non-empty array");
  Inference__ModelInferRequest *r2 = (Inference__ModelInferRequest *)1;
  CU_ASSERT_EQUAL(tpu_oip_json_infer_request_parse_binary("{\"inputs\":x}\x01", 13, 12, "m", NULL,
                                                          NULL, &r2, err, sizeof err),
                  TPU_OIP_JSON_SYNTAX);
  CU_ASSERT_PTR_NULL(r2);
}

static void test_binary_response(void) {
  float f32[3] = {0.5f, NAN, -INFINITY};
  uint8_t bytes[] = {2, 0, 0, 0, 'o', 'k', 1, 0, 0, 0, 0xff};
  int64_t i64[1] = {-3};
  int64_t s3[] = {3}, s2[] = {2}, s1[] = {1};
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {
      out_tensor("probs", "FP32", s3, 1), out_tensor("ids", "INT64", s1, 1),
      out_tensor("s", "BYTES", s2, 1)};
  /* An output parameter already there keeps its place before the size. */
  Inference__InferParameter pv = INFERENCE__INFER_PARAMETER__INIT;
  pv.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
  pv.int64_param = 2;
  Inference__ModelInferResponse__InferOutputTensor__ParametersEntry pe =
      INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__PARAMETERS_ENTRY__INIT;
  pe.key = "k";
  pe.value = &pv;
  Inference__ModelInferResponse__InferOutputTensor__ParametersEntry *pes[] = {&pe};
  outs[2]->parameters = pes;
  outs[2]->n_parameters = 1;
  ProtobufCBinaryData raw[] = {{sizeof f32, (uint8_t *)f32}, {8, (uint8_t *)i64},
                               {sizeof bytes, bytes}};
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  resp.model_name = "m";
  resp.outputs = outs;
  resp.n_outputs = 3;
  resp.raw_output_contents = raw;
  resp.n_raw_output_contents = 3;
  unsigned char bin[3] = {1, 0, 1};
  char *text = NULL;
  size_t len = 0, jl = 0;
  tpu_oip_json_status_t st =
      tpu_oip_json_infer_response_format_binary(&resp, bin, &text, &len, &jl, err, sizeof err);
  if (st != TPU_OIP_JSON_OK) printf("\n  %s\n", err);
  CU_ASSERT_EQUAL_FATAL(st, TPU_OIP_JSON_OK);
  const char *want = "{\"model_name\":\"m\",\"outputs\":["
                     "{\"name\":\"probs\",\"datatype\":\"FP32\",\"shape\":[3],"
                     "\"parameters\":{\"binary_data_size\":12}},"
                     "{\"name\":\"ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[-3]},"
                     "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],"
                     "\"parameters\":{\"k\":2,\"binary_data_size\":11}}]}";
  CU_ASSERT_EQUAL(jl, strlen(want));
  CU_ASSERT_EQUAL(len, strlen(want) + 12 + 11);
  if (jl != strlen(want) || memcmp(text, want, jl) != 0) {
    printf("\n  want: %s\n  got:  %.*s\n", want, (int)jl, text);
    CU_FAIL("binary response header differs");
  }
  CU_ASSERT_EQUAL(memcmp(text + jl, f32, 12), 0);
  CU_ASSERT_EQUAL(memcmp(text + jl + 12, bytes, 11), 0);
  free(text);

  /* The same answer in JSON fails on the NaN; all flags clear gives exactly the JSON form. */
  unsigned char none[3] = {0, 0, 0};
  text = NULL;
  CU_ASSERT_EQUAL(tpu_oip_json_infer_response_format_binary(&resp, none, &text, &len, &jl, err,
                                                            sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "outputs[0] 'probs': element 1 is NaN"));

  /* A BYTES output whose data does not hold its shape's elements is refused in binary too. */
  int64_t s3b[] = {3};
  outs[2]->shape = s3b;
  text = NULL;
  CU_ASSERT_EQUAL(tpu_oip_json_infer_response_format_binary(&resp, bin, &text, &len, &jl, err,
                                                            sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NULL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "outputs[2] 's': BYTES data ends inside element 2"));
  outs[2]->shape = s2;
  outs[2]->n_parameters = 0;
  outs[2]->parameters = NULL;
}

/* ---- KServe V1 / TF Serving REST predict ---- */

static void test_v1_predict(void) {
  static const int64_t d3[] = {3}, none[] = {0};
  tpu_oip_v1_input_t one[] = {{"x", "FP32", 1, d3}};
  tpu_oip_v1_input_t two[] = {{"num", "FP32", 1, d3}, {"cat", "INT64", 0, none}};
  Inference__ModelInferRequest *q = NULL;
  int col = -1;
  const char *rows = "{\"instances\": [[1, 2, 3], [4, 5, 6.5]]}";
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_v1_predict_parse(rows, strlen(rows), "m", NULL, one, 1, 1,
                                                      NULL, &q, &col, err, sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_EQUAL(col, 0);
  CU_ASSERT_EQUAL(q->n_inputs, 1);
  CU_ASSERT_EQUAL(q->inputs[0]->n_shape, 2);
  CU_ASSERT_EQUAL(q->inputs[0]->shape[0], 2);
  CU_ASSERT_EQUAL(q->inputs[0]->shape[1], 3);
  float want[6] = {1, 2, 3, 4, 5, 6.5f};
  CU_ASSERT_EQUAL(q->raw_input_contents[0].len, 24);
  CU_ASSERT_EQUAL(memcmp(q->raw_input_contents[0].data, want, 24), 0);
  inference__model_infer_request__free_unpacked(q, NULL);

  const char *objs = "{\"instances\": [{\"cat\": 7, \"num\": [1, 2, 3]}, {\"num\": [0, 0, 1], "
                     "\"cat\": -2}], \"signature_name\": \"serving_default\"}";
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_v1_predict_parse(objs, strlen(objs), "m", "2", two, 2, 1,
                                                      NULL, &q, &col, err, sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(q->model_version, "2");
  CU_ASSERT_EQUAL(q->inputs[1]->n_shape, 1);
  CU_ASSERT_EQUAL(q->inputs[1]->shape[0], 2);
  int64_t cats[2] = {7, -2};
  CU_ASSERT_EQUAL(memcmp(q->raw_input_contents[1].data, cats, 16), 0);
  inference__model_infer_request__free_unpacked(q, NULL);

  const char *cols = "{\"inputs\": {\"num\": [[1, 2, 3]], \"cat\": [4]}}";
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_v1_predict_parse(cols, strlen(cols), "m", NULL, two, 2, 1,
                                                      NULL, &q, &col, err, sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_EQUAL(col, 1);
  CU_ASSERT_EQUAL(q->inputs[0]->shape[0], 1);
  inference__model_infer_request__free_unpacked(q, NULL);

  struct {
    const char *body;
    const tpu_oip_v1_input_t *in;
    size_t nin;
    int batched;
    const char *want;
  } bad[] = {
      {"{\"instances\": [[1, 2]]}", one, 1, 1, "instances[0]: expected 3 numbers for shape [3], got 2"},
      {"{\"instances\": [{\"num\": [1, 2, 3]}]}", two, 2, 1, "instances[0]: input 'cat' is missing"},
      {"{\"instances\": [{\"num\": [1, 2, 3], \"cat\": 1, \"z\": 0}]}", two, 2, 1,
       "instances[0]: the model has no input 'z'"},
      {"{\"instances\": [{\"num\": [1, 2, 3], \"cat\": 1.5}]}", two, 2, 1,
       "instances[0].cat: expected an integer for INT64"},
      {"{\"instances\": [[1, 2, 3]]}", two, 2, 1, "instances[0]: expected an object of the model's 2 inputs"},
      {"{\"inputs\": {\"num\": [[1, 2, 3]], \"cat\": [4, 5]}}", two, 2, 1,
       "inputs.cat: 2 rows, but input 'num' has 1"},
      {"{\"inputs\": [[1, 2, 3]]}", two, 2, 1, "inputs: expected an object of the model's 2 inputs"},
      {"{\"instances\": [[1, 2, 3]]}", one, 1, 0, "this model has no batch dimension"},
      {"{\"instances\": [[1, 2, 3]], \"inputs\": [[1, 2, 3]]}", one, 1, 1, "exactly one of"},
      {"{}", one, 1, 1, "exactly one of"},
      {"[1]", one, 1, 1, "expected a JSON object"},
      {"{\"instances\": [[1, 2, 3]], \"signature_name\": \"x\"}", one, 1, 1, "serving_default"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    q = (Inference__ModelInferRequest *)1;
    CU_ASSERT_EQUAL(tpu_oip_json_v1_predict_parse(bad[i].body, strlen(bad[i].body), "m", NULL,
                                                  bad[i].in, bad[i].nin, bad[i].batched, NULL,
                                                  &q, &col, err, sizeof err),
                    TPU_OIP_JSON_INVALID);
    CU_ASSERT_PTR_NULL(q);
    if (!strstr(err, bad[i].want)) {
      printf("\n  body: %s\n  want: %s\n  got:  %s\n", bad[i].body, bad[i].want, err);
      CU_FAIL("V1 error message");
    }
  }

  /* Answers: rows and columns, one output and two. */
  float probs[4] = {0.25f, 0.75f, 1, 0};
  int64_t labels[2] = {1, 0};
  int64_t s22[] = {2, 2}, s2[] = {2};
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {out_tensor("p", "FP32", s22, 2),
                                                              out_tensor("l", "INT64", s2, 1)};
  ProtobufCBinaryData raw[] = {{16, (uint8_t *)probs}, {16, (uint8_t *)labels}};
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  resp.model_name = "m";
  resp.outputs = outs;
  resp.n_outputs = 2;
  resp.raw_output_contents = raw;
  resp.n_raw_output_contents = 2;
  char *text = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_v1_predict_format(&resp, 0, 1, &text, err, sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(text, "{\"predictions\":[{\"p\":[0.25,0.75],\"l\":1},{\"p\":[1,0],\"l\":0}]}");
  free(text);
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_v1_predict_format(&resp, 1, 1, &text, err, sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(text, "{\"outputs\":{\"p\":[[0.25,0.75],[1,0]],\"l\":[1,0]}}");
  free(text);
  resp.n_outputs = resp.n_raw_output_contents = 1;
  CU_ASSERT_EQUAL_FATAL(tpu_oip_json_v1_predict_format(&resp, 0, 1, &text, err, sizeof err),
                        TPU_OIP_JSON_OK);
  CU_ASSERT_STRING_EQUAL(text, "{\"predictions\":[[0.25,0.75],[1,0]]}");
  free(text);
  probs[3] = INFINITY;
  text = NULL;
  CU_ASSERT_EQUAL(tpu_oip_json_v1_predict_format(&resp, 1, 1, &text, err, sizeof err),
                  TPU_OIP_JSON_INVALID);
  CU_ASSERT_PTR_NULL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "outputs[0] 'p': element 3 is infinity"));
}

TPU_TEST_SUITE(oip_json,
               {"flat FP32 request, id echo, packs as protobuf", test_flat_fp32},
               {"nested data equals flat data", test_nested_equals_flat},
               {"every datatype's little-endian encoding", test_dtype_encodings},
               {"element type and range errors", test_value_errors},
               {"element count errors against the shape", test_count_errors},
               {"missing fields and wrong types", test_structure_errors},
               {"syntax, depth and size limits", test_syntax_and_limits},
               {"outputs selection and parameters", test_outputs_and_parameters},
               {"response from raw contents, every datatype", test_response_raw},
               {"response from typed contents and parameters", test_response_contents_and_params},
               {"response with NaN or infinity fails, naming it", test_response_nonfinite},
               {"response errors name the output", test_response_errors},
               {"random FP32 round trip JSON -> bytes -> JSON", test_random_round_trip},
               {"tensor decode and format (matmul)", test_tensor_decode_format},
               {"fast path builds what the jansson path builds", test_fast_path_equals_jansson},
               {"fast path on mutated bodies: agrees or declines", test_fast_path_mutations},
               {"fast path on binary-tensor requests", test_fast_path_binary},
               {"zero_dim_nested_null_offset (fuzz regression)", test_zero_dim_nested_null_offset},
               {"binary tensors: request inputs from the binary section", test_binary_request},
               {"binary tensors: request sizes checked, errors name the input",
                test_binary_request_errors},
               {"binary tensors: response outputs after the JSON header", test_binary_response},
               {"KServe V1 / TF Serving predict: rows, columns, errors, answers", test_v1_predict})
