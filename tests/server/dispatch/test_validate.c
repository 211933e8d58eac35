/*
 * test_validate.c - every way an inference or MatMul request can be refused before queueing,
 * plus the happy paths, and a randomized check that valid shapes always pass.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "stats.h"
#include "tpu_engine.h"
#include "tpu_test.h"
#include "validate.h"

static const int64_t in_shape[2] = {-1, 5};
static const int64_t out_shape[2] = {-1, 3};
static const tpu_tensor_spec_t in_spec = {"x", "FP32", in_shape, 2, 0, 0};
static const tpu_tensor_spec_t out_spec = {"probs", "FP32", out_shape, 2, 0, 0};
static const tpu_vmodel_t model = {"model 'm' version 1", &in_spec, 1, &out_spec, 1};

static float data[64];

static tpu_vinput_t raw_input(const int64_t *shape, size_t rank, size_t len) {
  tpu_vinput_t v;
  memset(&v, 0, sizeof v);
  v.name = "x";
  v.datatype = "FP32";
  v.shape = shape;
  v.rank = rank;
  v.has_raw = 1;
  v.raw = data;
  v.raw_len = len;
  return v;
}

static int run(const tpu_vinput_t *in, size_t n, size_t n_raw, const char **outs, size_t nouts,
               tpu_vresult_t *res, char *msg) {
  tpu_vrequest_t r = {in, n, n_raw, outs, nouts};
  return tpu_validate_infer(&model, &r, res, msg, 512);
}

#define EXPECT_FAIL(code_, needle, ...)                                                    \
  do {                                                                                     \
    char msg_[512] = "";                                                                   \
    tpu_vresult_t res_;                                                                    \
    int c_ = run(__VA_ARGS__, &res_, msg_);                                                \
    CU_ASSERT_EQUAL(c_, code_);                                                            \
    if (!strstr(msg_, needle)) printf("\n  message was: %s (wanted '%s')\n", msg_, needle); \
    CU_ASSERT_PTR_NOT_NULL(strstr(msg_, needle));                                         \
  } while (0)

static void test_ok_raw(void) {
  int64_t s[2] = {3, 5};
  tpu_vinput_t in = raw_input(s, 2, 60);
  tpu_vresult_t res;
  char msg[512];
  CU_ASSERT_EQUAL(run(&in, 1, 1, NULL, 0, &res, msg), TPU_CODE_OK);
  CU_ASSERT_EQUAL(res.rows, 3);
  CU_ASSERT_PTR_EQUAL(res.data[0], data);
  CU_ASSERT_EQUAL(res.bytes[0], 60);
  CU_ASSERT_EQUAL(res.want_output[0], 1);
  const char *outs[] = {"probs"};
  CU_ASSERT_EQUAL(run(&in, 1, 1, outs, 1, &res, msg), TPU_CODE_OK);
  int64_t z[2] = {0, 5}; /* an empty batch is valid */
  tpu_vinput_t e = raw_input(z, 2, 0);
  CU_ASSERT_EQUAL(run(&e, 1, 1, NULL, 0, &res, msg), TPU_CODE_OK);
  CU_ASSERT_EQUAL(res.rows, 0);
}

static void test_ok_typed(void) {
  int64_t s[2] = {2, 5};
  tpu_vinput_t in = raw_input(s, 2, 0);
  in.has_raw = 0;
  in.fp32 = data;
  in.n_fp32 = 10;
  tpu_vresult_t res;
  char msg[512];
  CU_ASSERT_EQUAL(run(&in, 1, 0, NULL, 0, &res, msg), TPU_CODE_OK);
  CU_ASSERT_EQUAL(res.rows, 2);
  CU_ASSERT_EQUAL(res.bytes[0], 40);
  in.n_fp32 = 9;
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "needs 10 FP32 values in contents.fp32_contents, got 9",
              &in, 1, 0, NULL, 0);
  in.n_fp32 = 0;
  in.n_other_typed = 10;
  in.other_field = "contents.int_contents";
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "got contents.int_contents", &in, 1, 0, NULL, 0);
  in.n_fp32 = 10; /* typed data alongside raw_input_contents */
  in.n_other_typed = 0;
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "typed contents", &in, 1, 1, NULL, 0);
}

static void test_failures(void) {
  int64_t s35[2] = {3, 5};
  tpu_vinput_t in = raw_input(s35, 2, 56);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "input 'x': shape [3,5] needs 60 bytes of FP32 data, got 56",
              &in, 1, 1, NULL, 0);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "request has no inputs; expected 'x'", &in, 0, 0, NULL, 0);
  in.raw_len = 60;
  tpu_vinput_t two[2] = {in, in};
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "raw_input_contents has 1 entries for 2 inputs", two, 2, 1,
              NULL, 0);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "input 'x': appears more than once", two, 2, 2, NULL, 0);
  tpu_vinput_t y = in;
  y.name = "y";
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "input 'y': model 'm' version 1 has no such input", &y, 1,
              1, NULL, 0);
  tpu_vinput_t dt = in;
  dt.datatype = "INT8";
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "input 'x': datatype INT8, expected FP32", &dt, 1, 1, NULL, 0);
  dt.datatype = "FLOAT";
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "unknown or unsupported datatype 'FLOAT'", &dt, 1, 1, NULL, 0);
  dt.datatype = NULL;
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "datatype ''", &dt, 1, 1, NULL, 0);
  int64_t r9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 5};
  tpu_vinput_t rk = raw_input(r9, 9, 20);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "rank 9 exceeds the maximum of 8", &rk, 1, 1, NULL, 0);
  int64_t r1[1] = {5};
  tpu_vinput_t rk1 = raw_input(r1, 1, 20);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "rank 1, expected rank 2", &rk1, 1, 1, NULL, 0);
  int64_t neg[2] = {-1, 5};
  tpu_vinput_t ng = raw_input(neg, 2, 20);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "dimension 0 is -1; request dimensions must be >= 0", &ng,
              1, 1, NULL, 0);
  int64_t wrong[2] = {3, 4};
  tpu_vinput_t wr = raw_input(wrong, 2, 48);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "dimension 1 must be 5", &wr, 1, 1, NULL, 0);
  int64_t big[2] = {INT64_MAX / 4, 5};
  tpu_vinput_t bg = raw_input(big, 2, 20);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "overflow", &bg, 1, 1, NULL, 0);
  int64_t big2[2] = {(int64_t)1 << 62, 5};
  tpu_vinput_t bg2 = raw_input(big2, 2, 20);
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "overflows 64 bits", &bg2, 1, 1, NULL, 0);
  tpu_vinput_t nodata = raw_input(s35, 2, 0);
  nodata.has_raw = 0;
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "needs 15 FP32 values", &nodata, 1, 0, NULL, 0);
  const char *bad_out[] = {"logits"};
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "output 'logits': model 'm' version 1 has no such output",
              &in, 1, 1, bad_out, 1);
  const char *dup_out[] = {"probs", "probs"};
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "output 'probs': requested more than once", &in, 1, 1,
              dup_out, 2);
}

static void test_missing_and_batch_mismatch(void) {
  static const int64_t a_shape[2] = {-1, 2}, b_shape[2] = {-1, 3};
  tpu_tensor_spec_t specs[2] = {{"a", "FP32", a_shape, 2, 0, 0}, {"b", "BF16", b_shape, 2, 0, 0}};
  tpu_vmodel_t m2 = {"model 'two' version 1", specs, 2, &out_spec, 1};
  int64_t sa[2] = {4, 2}, sb[2] = {5, 3};
  tpu_vinput_t a = raw_input(sa, 2, 32);
  a.name = "a";
  tpu_vinput_t b = raw_input(sb, 2, 30);
  b.name = "b";
  b.datatype = "BF16";
  tpu_vinput_t both[2] = {a, b};
  tpu_vrequest_t r = {both, 2, 2, NULL, 0};
  tpu_vresult_t res;
  char msg[512];
  CU_ASSERT_EQUAL(tpu_validate_infer(&m2, &r, &res, msg, sizeof msg), TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "same batch size"));
  sb[0] = 4;
  both[1].raw_len = 24;
  CU_ASSERT_EQUAL(tpu_validate_infer(&m2, &r, &res, msg, sizeof msg), TPU_CODE_OK);
  CU_ASSERT_EQUAL(res.rows, 4);
  CU_ASSERT_EQUAL(res.input_of[1], 1);
  tpu_vrequest_t only_a = {&a, 1, 1, NULL, 0};
  CU_ASSERT_EQUAL(tpu_validate_infer(&m2, &only_a, &res, msg, sizeof msg), TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "missing input 'b'"));
}

static void test_shape_random(void) {
  /* Random valid shapes always pass and report the exact byte count. */
  for (int it = 0; it < 1000; it++) {
    size_t rank = (size_t)tpu_test_rand_range(0, 8);
    int64_t s[8];
    uint64_t want = 1;
    for (size_t i = 0; i < rank; i++) {
      s[i] = tpu_test_rand_range(0, 9);
      want *= (uint64_t)s[i];
    }
    size_t count, bytes;
    char msg[256];
    TPU_ASSERT_SEED(tpu_validate_shape("t", s, rank, 2, &count, &bytes, msg, sizeof msg) == 0);
    TPU_ASSERT_SEED(count == want && bytes == want * 2);
  }
  int64_t zero_over[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 0}; /* product is 0: fine */
  size_t count, bytes;
  char msg[256];
  CU_ASSERT_EQUAL(tpu_validate_shape("t", zero_over, 3, 4, &count, &bytes, msg, sizeof msg), 0);
  CU_ASSERT_EQUAL(count, 0);
  CU_ASSERT_EQUAL(tpu_validate_dtype_size("BF16"), 2);
  CU_ASSERT_EQUAL(tpu_validate_dtype_size("BYTES"), 0);
}

static void test_matmul(void) {
  int64_t as[2] = {2, 3}, bs[2] = {3, 4}, bad[2] = {4, 4}, r3[3] = {1, 2, 3}, z[2] = {0, 3};
  tpu_vtensor_t a = {as, 2, "FP32", 24, 1, data}, b = {bs, 2, "FP32", 48, 1, data};
  size_t m, k, n;
  int dt;
  char msg[512];
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg), TPU_CODE_OK);
  CU_ASSERT(m == 2 && k == 3 && n == 4 && dt == TPU_DTYPE_FP32);
  tpu_vtensor_t b2 = {bad, 2, "FP32", 64, 1, data};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a, &b2, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "K must match"));
  tpu_vtensor_t b3 = {bs, 2, "INT8", 12, 1, data};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a, &b3, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "same datatype"));
  tpu_vtensor_t a3 = {r3, 3, "FP32", 24, 1, data};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a3, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "expected rank 2"));
  tpu_vtensor_t a_short = {as, 2, "FP32", 20, 1, data};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a_short, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "needs 24 bytes of FP32 data, got 20"));
  tpu_vtensor_t a_fp16 = {as, 2, "FP16", 12, 1, data};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a_fp16, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "expected FP32, BF16 or INT8"));
  tpu_vtensor_t a0 = {z, 2, "FP32", 0, 1, data};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a0, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a, &b, 10, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_RESOURCE_EXHAUSTED);
  tpu_vtensor_t none = {0};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&none, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "tensor 'a' is missing"));
}

/* NaN and infinities are refused in every floating-point input, raw or typed, infer or MatMul,
 * with the element's index; the largest finite values and subnormals pass. */
static void test_nonfinite(void) {
  int64_t s[2] = {3, 5};
  tpu_vinput_t in = raw_input(s, 2, 60);
  tpu_vresult_t res;
  char msg[512];
  data[7] = NAN; /* row 1, column 2 */
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT,
              "input 'x': element [1,2] is NaN; expected finite FP32 values", &in, 1, 1, NULL, 0);
  data[7] = 0;
  data[14] = -INFINITY;
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "element [2,4] is -infinity", &in, 1, 1, NULL, 0);
  data[14] = 0;
  data[0] = INFINITY;
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "element [0,0] is infinity", &in, 1, 1, NULL, 0);
  in.has_raw = 0; /* typed contents.fp32_contents: the same rule */
  in.raw_len = 0;
  in.fp32 = data;
  in.n_fp32 = 15;
  EXPECT_FAIL(TPU_CODE_INVALID_ARGUMENT, "element [0,0] is infinity", &in, 1, 0, NULL, 0);
  data[0] = FLT_MAX;
  data[1] = -FLT_MAX;
  data[2] = FLT_MIN / 4; /* subnormal */
  data[3] = -0.0f;
  CU_ASSERT_EQUAL(run(&in, 1, 0, NULL, 0, &res, msg), TPU_CODE_OK);
  in = raw_input(s, 2, 60);
  CU_ASSERT_EQUAL(run(&in, 1, 1, NULL, 0, &res, msg), TPU_CODE_OK);
  memset(data, 0, sizeof data);

  /* BF16 (a model input of that type), by bits: 0x7f80 is infinity, 0x7fc1 a NaN. */
  static const int64_t b_shape[1] = {-1};
  tpu_tensor_spec_t bspec = {"b", "BF16", b_shape, 1, 0, 0};
  tpu_vmodel_t mb = {"model 'b' version 1", &bspec, 1, &out_spec, 1};
  uint16_t bf[4] = {0x3f80, 0x7f7f, 0xff80, 0x7fc1}; /* 1, max finite, -inf, NaN */
  int64_t s4[1] = {4}, s2[1] = {2};
  tpu_vinput_t bi = {.name = "b", .datatype = "BF16", .shape = s4, .rank = 1, .has_raw = 1,
                     .raw = bf, .raw_len = 8};
  tpu_vrequest_t r = {&bi, 1, 1, NULL, 0};
  CU_ASSERT_EQUAL(tpu_validate_infer(&mb, &r, &res, msg, sizeof msg), TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "input 'b': element [2] is -infinity; expected finite BF16"));
  bi.shape = s2;
  bi.raw_len = 4;
  CU_ASSERT_EQUAL(tpu_validate_infer(&mb, &r, &res, msg, sizeof msg), TPU_CODE_OK);

  /* MatMul operands: FP32 and BF16. */
  int64_t as[2] = {2, 3}, bs[2] = {3, 4};
  float fa[6] = {1, 2, 3, 4, 5, 6}, fb[12] = {0};
  tpu_vtensor_t a = {as, 2, "FP32", 24, 1, fa}, b = {bs, 2, "FP32", 48, 1, fb};
  size_t m, k, n;
  int dt;
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_OK);
  fb[11] = NAN;
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a, &b, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "matmul: tensor 'b': element [2,3] is NaN"));
  uint16_t ba[6] = {0x3f80, 0x3f80, 0x7f80, 0, 0, 0}, bb[12] = {0};
  tpu_vtensor_t a16 = {as, 2, "BF16", 12, 1, ba}, b16 = {bs, 2, "BF16", 24, 1, bb};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a16, &b16, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "matmul: tensor 'a': element [0,2] is infinity"));
  /* INT8 has no such values: any bytes pass. */
  uint8_t ia[6] = {0xff, 0x80, 0x7f, 0, 1, 2}, ib[12] = {0xff};
  tpu_vtensor_t a8 = {as, 2, "INT8", 6, 1, ia}, b8 = {bs, 2, "INT8", 12, 1, ib};
  CU_ASSERT_EQUAL(tpu_validate_matmul(&a8, &b8, 1000, &m, &k, &n, &dt, msg, sizeof msg),
                  TPU_CODE_OK);
}

TPU_TEST_SUITE(server_validate, {"ok_raw", test_ok_raw}, {"ok_typed", test_ok_typed},
               {"failures", test_failures},
               {"missing_and_batch_mismatch", test_missing_and_batch_mismatch},
               {"shape_random", test_shape_random}, {"matmul", test_matmul},
               {"nonfinite", test_nonfinite})
