/*
 * test_grpc.c - proto/tpu_grpc.c: gRPC paths, grpc-timeout, grpc-message encoding and
 * content types, from bytes.
 */
#include <string.h>

#include "tpu_envelope.h"
#include "tpu_grpc.h"
#include "tpu_test.h"

#define B(s) (const uint8_t *)(s), strlen(s)

static void test_paths(void) {
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/inference.GRPCInferenceService/ModelInfer")),
                  TPUD__METHOD__MODEL_INFER);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/inference.GRPCInferenceService/ServerLive")),
                  TPUD__METHOD__SERVER_LIVE);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/tpud.TpudService/MatMul")), TPUD__METHOD__MATMUL);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/tpud.TpudService/ModelLoad")),
                  TPUD__METHOD__MODEL_LOAD);
  /* Every method of the table has a path, and the path maps back to it. */
  for (int m = 1; m < 64; m++) {
    const tpu_method_info_t *info = tpu_envelope_method_info(m);
    if (!info) continue;
    char p[200];
    snprintf(p, sizeof p, "/%s/%s", info->service, info->name);
    CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B(p)), m);
  }
  /* Near misses. */
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/tpud.TpudService/ModelInfer")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/inference.GRPCInferenceService/MatMul")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/inference.GRPCInferenceService/ModelInferX")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/inference.GRPCInferenceService/modelinfer")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("inference.GRPCInferenceService/ModelInfer")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/inference.GRPCInferenceService.ModelInfer")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/inference.GRPCInferenceService/ModelInfer/")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("/")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(B("")), 0);
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(NULL, 10), 0);
  /* A NUL inside the path is not a match of the prefix before it. */
  static const uint8_t nul[] = "/tpud.TpudService/MatMul\0x";
  CU_ASSERT_EQUAL(tpu_grpc_method_of_path(nul, sizeof nul - 1), 0);
}

static void test_timeout(void) {
  uint64_t us = 0;
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("1S"), &us), 0);
  CU_ASSERT_EQUAL(us, 1000000u);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("250m"), &us), 0);
  CU_ASSERT_EQUAL(us, 250000u);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("7u"), &us), 0);
  CU_ASSERT_EQUAL(us, 7u);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("1500n"), &us), 0);
  CU_ASSERT_EQUAL(us, 2u); /* rounded up */
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("2M"), &us), 0);
  CU_ASSERT_EQUAL(us, 120000000u);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("1H"), &us), 0);
  CU_ASSERT_EQUAL(us, 3600000000u);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("99999999H"), &us), 0);
  CU_ASSERT_EQUAL(us, 99999999ull * 3600000000ull);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("0m"), &us), 0);
  CU_ASSERT_EQUAL(us, 1u); /* already expired, not "none" */
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("1n"), &us), 0);
  CU_ASSERT_EQUAL(us, 1u);
  us = 42;
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("123456789S"), &us), -1); /* 9 digits */
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("S"), &us), -1);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("10"), &us), -1);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("10s"), &us), -1);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("-1S"), &us), -1);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B(" 1S"), &us), -1);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B("1 S"), &us), -1);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(B(""), &us), -1);
  CU_ASSERT_EQUAL(tpu_grpc_parse_timeout(NULL, 3, &us), -1);
  CU_ASSERT_EQUAL(us, 42u); /* untouched on failure */
}

static void test_percent(void) {
  char out[64];
  CU_ASSERT_EQUAL(tpu_grpc_percent_encode("model 'x' is not ready", out, sizeof out), 22u);
  CU_ASSERT_STRING_EQUAL(out, "model 'x' is not ready");
  tpu_grpc_percent_encode("100% \xc3\xa9\n", out, sizeof out);
  CU_ASSERT_STRING_EQUAL(out, "100%25 %C3%A9%0A");
  tpu_grpc_percent_encode("", out, sizeof out);
  CU_ASSERT_STRING_EQUAL(out, "");
  tpu_grpc_percent_encode(NULL, out, sizeof out);
  CU_ASSERT_STRING_EQUAL(out, "");
  /* Truncation never splits an escape and always terminates. */
  char small[6], five[5];
  CU_ASSERT_EQUAL(tpu_grpc_percent_encode("ab%cd", small, sizeof small), 5u);
  CU_ASSERT_STRING_EQUAL(small, "ab%25");
  CU_ASSERT_EQUAL(tpu_grpc_percent_encode("ab%cd", five, sizeof five), 2u);
  CU_ASSERT_STRING_EQUAL(five, "ab");
  CU_ASSERT_EQUAL(tpu_grpc_percent_encode("abcdefgh", small, sizeof small), 5u);
  CU_ASSERT_STRING_EQUAL(small, "abcde");
  char one[1] = {'x'};
  CU_ASSERT_EQUAL(tpu_grpc_percent_encode("abc", one, 1), 0u);
  CU_ASSERT_EQUAL(one[0], '\0');
}

static void test_content_type(void) {
  CU_ASSERT(tpu_grpc_content_type_ok(B("application/grpc")));
  CU_ASSERT(tpu_grpc_content_type_ok(B("application/grpc+proto")));
  CU_ASSERT(tpu_grpc_content_type_ok(B("application/grpc;charset=utf-8")));
  CU_ASSERT(!tpu_grpc_content_type_ok(B("application/grpcx")));
  CU_ASSERT(!tpu_grpc_content_type_ok(B("application/json")));
  CU_ASSERT(!tpu_grpc_content_type_ok(B("application/grp")));
  CU_ASSERT(!tpu_grpc_content_type_ok(B("")));
  CU_ASSERT(!tpu_grpc_content_type_ok(NULL, 16));
}

TPU_TEST_SUITE(grpc,
               {"paths", test_paths},
               {"timeout", test_timeout},
               {"percent_encode", test_percent},
               {"content_type", test_content_type})
