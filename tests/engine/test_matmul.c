/*
 * test_matmul.c - tpu_matmul (engine/frame/matmul.c): C = A·B with B [K][N] in each dtype.
 *
 * DESIGN
 * INT8 must equal an int32 triple loop exactly (including -128 operands); FP32 and BF16 are held
 * to |c - ref| <= 1e-5 · Σ_p |a_ip·b_pj| against a float64 triple loop over the values the
 * engine actually multiplies (bf16 products are exact in binary32, so only the binary32
 * accumulation differs). Shapes are random in 1..300 plus the edge sizes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

static size_t pick_dim(void) {
  static const size_t edge[] = {1, 7, 17, 33, 127, 129, 300};
  if (tpu_test_rand() & 1) return edge[tpu_test_rand_range(0, 6)];
  return (size_t)tpu_test_rand_range(1, 300);
}

static void check_shape(tpu_engine_t *e, tpu_dtype_t dt, size_t m, size_t k, size_t n) {
  size_t es = tpu_dtype_size(dt);
  void *a = malloc(m * k * es), *b = malloc(k * n * es), *c = malloc(m * n * 4);
  double *av = malloc(m * k * sizeof *av), *bv = malloc(k * n * sizeof *bv);
  CU_ASSERT_FATAL(a && b && c && av && bv);
  for (size_t i = 0; i < m * k + k * n; i++) {
    int is_a = i < m * k;
    size_t at = is_a ? i : i - m * k;
    void *dst = is_a ? a : b;
    double *val = is_a ? av : bv;
    if (dt == TPU_DTYPE_INT8) {
      int8_t q = (int8_t)tpu_test_rand_range(-128, 127);
      ((int8_t *)dst)[at] = q;
      val[at] = q;
    } else if (dt == TPU_DTYPE_BF16) {
      uint16_t h = tpu_bf16_from_fp32(tpu_test_rand_float(-2, 2));
      ((uint16_t *)dst)[at] = h;
      val[at] = tpu_bf16_to_fp32(h);
    } else {
      float f = tpu_test_rand_float(-2, 2);
      ((float *)dst)[at] = f;
      val[at] = f;
    }
  }
  TPU_ASSERT_SEED(tpu_matmul(e, dt, m, k, n, a, b, c) == TPU_OK);
  size_t bad = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double acc = 0, s = 0;
      for (size_t p = 0; p < k; p++) {
        acc += av[i * k + p] * bv[p * n + j];
        s += fabs(av[i * k + p] * bv[p * n + j]);
      }
      if (dt == TPU_DTYPE_INT8) {
        bad += ((int32_t *)c)[i * n + j] != (int32_t)acc; /* |acc| < 2^53: exact in double */
      } else {
        double got = ((float *)c)[i * n + j];
        bad += !(fabs(got - acc) <= 1e-5 * s + 1e-30);
      }
    }
  if (bad) printf("\n  matmul %s %zux%zux%zu: %zu wrong\n", tpu_dtype_name(dt), m, k, n, bad);
  TPU_ASSERT_SEED(bad == 0);
  free(a), free(b), free(c), free(av), free(bv);
}

static void test_all_dtypes(void) {
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  static const tpu_dtype_t dts[] = {TPU_DTYPE_FP32, TPU_DTYPE_BF16, TPU_DTYPE_INT8};
  for (int t = 0; t < 3; t++) {
    check_shape(e, dts[t], 1, 1, 1);
    check_shape(e, dts[t], 129, 7, 33);
    for (int r = 0; r < 3; r++) check_shape(e, dts[t], pick_dim(), pick_dim(), pick_dim());
  }
  tpu_engine_stats_t st;
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT_EQUAL(st.calls, 15);
  tpu_engine_free(e);
}

/* A hand-checked product: [[1,2,3],[4,5,6]] · [[1,0],[0,1],[1,1]] = [[4,5],[10,11]]. */
static void test_hand_worked(void) {
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  const float af[] = {1, 2, 3, 4, 5, 6}, bf[] = {1, 0, 0, 1, 1, 1};
  const int8_t ai[] = {1, 2, 3, 4, 5, 6}, bi[] = {1, 0, 0, 1, 1, 1};
  uint16_t ah[6], bh[6];
  tpu_bf16_from_fp32_n(ah, af, 6);
  tpu_bf16_from_fp32_n(bh, bf, 6);
  float c[4];
  int32_t ci[4];
  const float want[] = {4, 5, 10, 11};
  CU_ASSERT(tpu_matmul(e, TPU_DTYPE_FP32, 2, 3, 2, af, bf, c) == TPU_OK);
  for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(c[i], want[i]);
  CU_ASSERT(tpu_matmul(e, TPU_DTYPE_BF16, 2, 3, 2, ah, bh, c) == TPU_OK);
  for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(c[i], want[i]);
  CU_ASSERT(tpu_matmul(e, TPU_DTYPE_INT8, 2, 3, 2, ai, bi, ci) == TPU_OK);
  for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(ci[i], (int32_t)want[i]);
  tpu_engine_free(e);
}

static void test_errors(void) {
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  float x[4] = {0}, c[4];
  const tpu_dtype_t F = TPU_DTYPE_FP32;
  CU_ASSERT(tpu_matmul(NULL, F, 1, 1, 1, x, x, c) == TPU_EINVAL);
  CU_ASSERT(tpu_matmul(e, F, 1, 1, 1, NULL, x, c) == TPU_EINVAL);
  CU_ASSERT(tpu_matmul(e, F, 1, 1, 1, x, NULL, c) == TPU_EINVAL);
  CU_ASSERT(tpu_matmul(e, F, 1, 1, 1, x, x, NULL) == TPU_EINVAL);
  CU_ASSERT(tpu_matmul(e, F, 0, 1, 1, x, x, c) == TPU_EINVAL);
  CU_ASSERT(tpu_matmul(e, F, 1, 0, 1, x, x, c) == TPU_EINVAL);
  CU_ASSERT(tpu_matmul(e, F, 1, 1, 0, x, x, c) == TPU_EINVAL);
  CU_ASSERT(tpu_matmul(e, TPU_DTYPE_INT32, 1, 1, 1, x, x, c) == TPU_EDTYPE);
  CU_ASSERT(tpu_matmul(e, (tpu_dtype_t)9, 1, 1, 1, x, x, c) == TPU_EDTYPE);
  /* Checked before any buffer is touched. */
  CU_ASSERT(tpu_matmul(e, F, SIZE_MAX, 2, 1, x, x, c) == TPU_EOVERFLOW);
  CU_ASSERT(tpu_matmul(e, F, 1, TPU__MAX_DIM + 1, 1, x, x, c) == TPU_EOVERFLOW);
  CU_ASSERT(tpu_matmul(e, F, (size_t)1 << 20, (size_t)1 << 20, 1, x, x, c) == TPU_EOVERFLOW);
  CU_ASSERT(tpu_matmul(e, F, 1, (size_t)1 << 23, (size_t)1 << 23, x, x, c) == TPU_EOVERFLOW);
  /* INT8 K beyond what an int32 accumulator holds exactly. */
  CU_ASSERT(tpu_matmul(e, TPU_DTYPE_INT8, 1, TPU__MAX_K_INT8 + 1, 1, x, x, c) == TPU_EOVERFLOW);
  tpu_engine_stats_t st;
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT_EQUAL(st.calls, 0);
  tpu_engine_free(e);
}

TPU_TEST_SUITE(engine_matmul,
               {"all_dtypes", test_all_dtypes},
               {"hand_worked", test_hand_worked},
               {"errors", test_errors})
