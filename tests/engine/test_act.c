/*
 * test_act.c - activations (engine/frame/act.c): names, each activation against a float64
 * reference, softmax's row sums and stability, NaN/Inf behaviour, and the error paths.
 *
 * DESIGN
 * Tolerance for relu: exact. For gelu, tanh and sigmoid: |y - ref| <= 4e-6·|ref| + 1e-30, a few
 * binary32 ulps (libm's erfcf/tanhf/expf are within ~2 ulps, plus the products around them).
 * Softmax: each element within 1e-5 relative of the float64 softmax, each row summing to 1
 * within 1e-5.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

static double ref_act(tpu_act_t act, double x) {
  switch (act) {
  case TPU_ACT_RELU: return x < 0 ? 0 : x;
  case TPU_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0)); /* = 0.5·x·(1 + erf(x/√2)) */
  case TPU_ACT_TANH: return tanh(x);
  case TPU_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
  default: return x;
  }
}

static void test_names(void) {
  static const char *const names[] = {"none", "relu", "gelu", "tanh", "sigmoid", "softmax"};
  CU_ASSERT_EQUAL(TPU_ACT_COUNT, 6);
  for (unsigned a = 0; a < TPU_ACT_COUNT; a++) {
    tpu_act_t got = TPU_ACT_COUNT;
    CU_ASSERT_STRING_EQUAL(tpu_act_name((tpu_act_t)a), names[a]);
    CU_ASSERT(tpu_act_parse(names[a], &got) == TPU_OK);
    CU_ASSERT_EQUAL(got, a);
  }
  tpu_act_t out = TPU_ACT_RELU;
  CU_ASSERT(tpu_act_name(TPU_ACT_COUNT) == NULL);
  CU_ASSERT(tpu_act_name((tpu_act_t)-1) == NULL);
  CU_ASSERT(tpu_act_parse("GELU", &out) == TPU_EINVAL); /* names are exact, lower case */
  CU_ASSERT(tpu_act_parse("", &out) == TPU_EINVAL);
  CU_ASSERT(tpu_act_parse("relu ", &out) == TPU_EINVAL);
  CU_ASSERT(tpu_act_parse(NULL, &out) == TPU_EINVAL);
  CU_ASSERT(tpu_act_parse("relu", NULL) == TPU_EINVAL);
  CU_ASSERT_EQUAL(out, TPU_ACT_RELU); /* untouched on failure */
}

static void test_elementwise(void) {
  enum { N = 4096 };
  static float x[N], y[N];
  static const tpu_act_t acts[] = {TPU_ACT_NONE, TPU_ACT_RELU, TPU_ACT_GELU, TPU_ACT_TANH,
                                   TPU_ACT_SIGMOID};
  for (size_t t = 0; t < sizeof acts / sizeof acts[0]; t++) {
    for (int i = 0; i < N; i++) x[i] = tpu_test_rand_float(-10.0f, 10.0f);
    /* Points where the functions bend or where cancellation would show. */
    static const float fixed[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-6f, -1e-6f, 3.0f, -3.0f, -5.0f,
                                  -8.0f, 8.0f, 0.5f};
    memcpy(x, fixed, sizeof fixed);
    memcpy(y, x, sizeof x);
    CU_ASSERT_FATAL(tpu_act_apply(acts[t], y, 64, N / 64) == TPU_OK);
    size_t bad = 0;
    double rel = acts[t] == TPU_ACT_NONE || acts[t] == TPU_ACT_RELU ? 0.0 : 4e-6;
    for (int i = 0; i < N; i++) {
      double want = ref_act(acts[t], x[i]);
      if (!(fabs(y[i] - want) <= rel * fabs(want) + 1e-30)) {
        if (!bad)
          printf("\n  %s(%.9g) = %.9g, want %.17g\n", tpu_act_name(acts[t]), x[i], y[i], want);
        bad++;
      }
    }
    TPU_ASSERT_SEED(bad == 0);
  }
}

static void test_special_values(void) {
  float v[6] = {NAN, INFINITY, -INFINITY, -2.0f, 2.0f, 0.0f};
  float y[6];
  memcpy(y, v, sizeof v);
  CU_ASSERT(tpu_act_apply(TPU_ACT_RELU, y, 1, 6) == TPU_OK);
  CU_ASSERT(isnan(y[0]) && y[1] == INFINITY && y[2] == 0.0f && y[3] == 0.0f && y[4] == 2.0f);
  memcpy(y, v, sizeof v);
  CU_ASSERT(tpu_act_apply(TPU_ACT_SIGMOID, y, 6, 1) == TPU_OK);
  CU_ASSERT(isnan(y[0]) && y[1] == 1.0f && y[2] == 0.0f && y[5] == 0.5f);
  memcpy(y, v, sizeof v);
  CU_ASSERT(tpu_act_apply(TPU_ACT_TANH, y, 2, 3) == TPU_OK);
  CU_ASSERT(isnan(y[0]) && y[1] == 1.0f && y[2] == -1.0f);
  memcpy(y, v, sizeof v);
  CU_ASSERT(tpu_act_apply(TPU_ACT_GELU, y, 1, 6) == TPU_OK);
  CU_ASSERT(isnan(y[0]) && y[1] == INFINITY && y[5] == 0.0f);
  /* Large negative inputs: sigmoid must not overflow exp(-x), gelu must not cancel to junk. */
  float neg[2] = {-80.0f, -9.0f}; /* exp(-80) is still a normal float */
  CU_ASSERT(tpu_act_apply(TPU_ACT_SIGMOID, neg, 1, 2) == TPU_OK);
  CU_ASSERT(neg[0] >= 0.0f && fabs(neg[0] - exp(-80.0)) <= 1e-5 * exp(-80.0));
  float g = -9.0f;
  CU_ASSERT(tpu_act_apply(TPU_ACT_GELU, &g, 1, 1) == TPU_OK);
  double want = ref_act(TPU_ACT_GELU, -9.0); /* about -1e-18 */
  CU_ASSERT(fabs(g - want) <= 1e-5 * fabs(want));
}

static void test_softmax(void) {
  enum { ROWS = 23, COLS = 301 };
  static float x[ROWS * COLS], y[ROWS * COLS];
  for (int r = 0; r < ROWS; r++) {
    /* Offsets up to ±1e4: exp without the max subtracted would overflow. */
    float off = r % 3 == 0 ? 1e4f : r % 3 == 1 ? -1e4f : 0.0f;
    for (int c = 0; c < COLS; c++) x[r * COLS + c] = off + tpu_test_rand_float(-20.0f, 20.0f);
  }
  memcpy(y, x, sizeof x);
  CU_ASSERT_FATAL(tpu_act_apply(TPU_ACT_SOFTMAX, y, ROWS, COLS) == TPU_OK);
  size_t bad = 0;
  for (int r = 0; r < ROWS; r++) {
    double mx = -INFINITY, sum = 0, ysum = 0;
    for (int c = 0; c < COLS; c++) mx = fmax(mx, x[r * COLS + c]);
    for (int c = 0; c < COLS; c++) sum += exp((double)x[r * COLS + c] - mx);
    for (int c = 0; c < COLS; c++) {
      double want = exp((double)x[r * COLS + c] - mx) / sum;
      bad += !(fabs(y[r * COLS + c] - want) <= 1e-5 * want + 1e-30);
      ysum += y[r * COLS + c];
    }
    bad += !(fabs(ysum - 1.0) <= 1e-5);
  }
  TPU_ASSERT_SEED(bad == 0);
  /* A row of one element is 1; equal logits share equally. */
  float one = 1234.5f, eq[4] = {3, 3, 3, 3};
  CU_ASSERT(tpu_act_apply(TPU_ACT_SOFTMAX, &one, 1, 1) == TPU_OK);
  CU_ASSERT_EQUAL(one, 1.0f);
  CU_ASSERT(tpu_act_apply(TPU_ACT_SOFTMAX, eq, 1, 4) == TPU_OK);
  CU_ASSERT(eq[0] == 0.25f && eq[3] == 0.25f);
  /* Softmax is per row: rows do not see each other. */
  float two[4] = {0, 0, 1000, 0};
  CU_ASSERT(tpu_act_apply(TPU_ACT_SOFTMAX, two, 2, 2) == TPU_OK);
  CU_ASSERT(two[0] == 0.5f && two[1] == 0.5f && two[2] == 1.0f && two[3] == 0.0f);
}

static void test_errors(void) {
  float x[4] = {1, 2, 3, 4};
  CU_ASSERT(tpu_act_apply(TPU_ACT_RELU, NULL, 1, 4) == TPU_EINVAL);
  CU_ASSERT(tpu_act_apply(TPU_ACT_RELU, x, 0, 4) == TPU_EINVAL);
  CU_ASSERT(tpu_act_apply(TPU_ACT_RELU, x, 1, 0) == TPU_EINVAL);
  CU_ASSERT(tpu_act_apply(TPU_ACT_COUNT, x, 1, 4) == TPU_EINVAL);
  CU_ASSERT(tpu_act_apply((tpu_act_t)-3, x, 1, 4) == TPU_EINVAL);
  CU_ASSERT(tpu_act_apply(TPU_ACT_RELU, x, SIZE_MAX, 2) == TPU_EOVERFLOW);
  CU_ASSERT(x[0] == 1 && x[3] == 4); /* untouched */
  CU_ASSERT(tpu_act_apply(TPU_ACT_NONE, x, 2, 2) == TPU_OK);
  CU_ASSERT(x[0] == 1 && x[3] == 4);
}

TPU_TEST_SUITE(engine_act,
               {"names", test_names},
               {"elementwise", test_elementwise},
               {"special_values", test_special_values},
               {"softmax", test_softmax},
               {"errors", test_errors})
