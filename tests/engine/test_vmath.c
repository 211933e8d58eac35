/*
 * test_vmath.c - the kernel sets' vector math (tpu__vec_kernels_t, engine/kernels/vmath.h)
 * against exact values, against each other and against the epilogue.
 *
 * DESIGN
 * Every set this CPU runs is checked (a set it cannot run is reported as skipped on stdout).
 * Accuracy: each function on a sample of every binary32 region (every 65521st bit pattern from a
 * random start, 40,000 random values in [-20, 20], special values and the branch thresholds of
 * vmath.h with their neighbours) within the bound vmath.h documents (vmath_check.h: vc_bound;
 * the exhaustive figures come from bench/vmath_check). Semantics: NaN, ±Inf, ±0. Tails: every
 * length 1..70 at odd offsets, in place and not, each element's result equal to that element
 * mapped alone, nothing written past n. The avx2 and avx512 sets give the same bits. A fused
 * tanh/gelu/sigmoid epilogue of each set's FP32 GEMM equals its map() of the unfused output,
 * bit for bit. softmax, layernorm and acc_f64 against the ref set's.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"
#include "vmath_check.h"

#define MAX_SETS 8

static size_t sets(const tpu__kernel_set_t **out) {
  size_t n = tpu__kernels_available(out, MAX_SETS);
  static int said;
  if (!said) {
    said = 1;
    static const char *const all[] = {"amx", "avx512", "avx2"};
    for (size_t a = 0; a < 3; a++) {
      int have = 0;
      for (size_t i = 0; i < n; i++) have |= strcmp(out[i]->name, all[a]) == 0;
      if (!have) printf("\n  vmath: kernel set %s skipped (not runnable here)\n", all[a]);
    }
  }
  return n;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double bound_of(const tpu__vec_kernels_t *vec, int f) {
  return vec == &tpu__vec_ref ? VC_REF_BOUND : vc_bound[f];
}

/* Checks x[0..n) for function f; returns the worst error and reports the first violation. */
static double check_values(const tpu__vec_kernels_t *vec, int f, const float *x, size_t n) {
  float *y = malloc(n * sizeof *y);
  CU_ASSERT_FATAL(y != NULL);
  vec->map((tpu__vfn_t)f, x, y, n);
  double worst = 0, bound = bound_of(vec, f);
  int told = 0;
  for (size_t i = 0; i < n; i++) {
    double r = vc_exact((tpu__vfn_t)f, x[i]), e = vc_ulp_err(y[i], r);
    if (e > worst) worst = e;
    if (e > bound && !told) {
      told = 1;
      printf("\n  %s %s(%.9g) = %.9g, exact %.17g: %.2f ulp > %.1f\n", vec->name, vc_names[f],
             (double)x[i], (double)y[i], r, e, bound);
    }
  }
  free(y);
  return worst;
}

static const float specials[] = {0.0f,     -0.0f,     INFINITY,   -INFINITY,  FLT_MIN,
                                 -FLT_MIN, FLT_MAX,   -FLT_MAX,   1e-45f,     -1e-45f,
                                 1e-30f,   -1e-30f,   0.625f,     -0.625f,    1.0f,
                                 -1.0f,    4.0f,      -4.0f,      14.5f,      -14.5f,
                                 0.7f,     -0.7f,     0.70710678f, -0.70710678f, 1.41421356f,
                                 -1.41421356f, 88.72f, 89.0f,     -103.97f,   -104.0f,
                                 -87.33f,  -110.0f,   9.0f,       -9.0f,      30.0f,
                                 -30.0f,   -13.2f,    -14.85f,    3.92f,      -3.92f};

static void test_accuracy(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  enum { NSTRIDE = 65554, NRAND = 40000, NSPEC = sizeof specials / sizeof specials[0] };
  size_t n = NSTRIDE + NRAND + NSPEC * 3;
  float *x = malloc(n * sizeof *x);
  CU_ASSERT_FATAL(x != NULL);
  uint32_t start = (uint32_t)tpu_test_rand_range(0, 65520);
  size_t k = 0;
  for (uint64_t u = start; u < (1ull << 32) && k < NSTRIDE; u += 65521) x[k++] = from_bits((uint32_t)u);
  for (size_t i = 0; i < NRAND; i++) x[k++] = tpu_test_rand_float(-20.0f, 20.0f);
  for (size_t i = 0; i < NSPEC; i++) {
    x[k++] = specials[i];
    x[k++] = nextafterf(specials[i], INFINITY);
    x[k++] = nextafterf(specials[i], -INFINITY);
  }
  for (size_t s = 0; s < nks; s++) {
    int seen = 0;
    for (size_t t = 0; t < s; t++) seen |= ks[t]->vec == ks[s]->vec;
    if (seen) continue;
    for (int f = 0; f < TPU__VF_COUNT; f++) {
      double worst = check_values(ks[s]->vec, f, x, k);
      TPU_ASSERT_SEED(worst <= bound_of(ks[s]->vec, f));
    }
  }
  free(x);
}

/* The input where each function's error peaks over all 2^32 binary32 inputs (bench/vmath_check),
 * and two other bad ones: the bound must hold there, not only on the sample above. Regression:
 * gelu reached 4.996 ulp (now 4.957 at -11.8724508) and gelu_tanh 3.898 while the bounds were 4
 * and 3.5, and test_accuracy failed for about 1 seed in 8 (random values near x = -12). */
static void test_worst_inputs(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  static const float worst[TPU__VF_COUNT][3] = {
      {59.2750053f, 15.6058426f, 4.51083946f},         /* exp 0.988 */
      {0.628309548f, -0.628309548f, 0.633547246f},     /* tanh 1.330 */
      {-4.1572938f, -5.54275513f, -3.46511626f},       /* sigmoid 2.402 */
      {1.00680375f, -1.00680375f, 1.01116347f},        /* erf 1.264 */
      {-11.8724508f, -1.4300015f, -12.6115236f},       /* gelu 4.957 */
      {-2.97750068f, -1.83549309f, -4.1916976f}};      /* gelu_tanh 3.898 */
  for (size_t s = 0; s < nks; s++)
    for (int f = 0; f < TPU__VF_COUNT; f++) {
      double e = check_values(ks[s]->vec, f, worst[f], 3);
      CU_ASSERT(e <= bound_of(ks[s]->vec, f));
    }
}

static void test_special_values(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  const float in[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
  /* per function: results for +Inf, -Inf (NaN in: NaN out, checked for all) */
  const float lim[TPU__VF_COUNT][2] = {
      {INFINITY, 0.0f}, {1.0f, -1.0f}, {1.0f, 0.0f}, {1.0f, -1.0f}, {INFINITY, 0.0f},
      {INFINITY, 0.0f}};
  for (size_t s = 0; s < nks; s++)
    for (int f = 0; f < TPU__VF_COUNT; f++) {
      float y[6];
      ks[s]->vec->map((tpu__vfn_t)f, in, y, 6);
      CU_ASSERT(y[0] != y[0] && y[1] != y[1]);
      CU_ASSERT(y[2] == lim[f][0]);
      CU_ASSERT(y[3] == lim[f][1]);
      if (f == TPU__VF_TANH || f == TPU__VF_ERF || f == TPU__VF_GELU || f == TPU__VF_GELU_TANH) {
        /* odd (or x·Φ): the sign of zero is kept */
        CU_ASSERT(y[4] == 0.0f && !signbit(y[4]));
        CU_ASSERT(y[5] == 0.0f && signbit(y[5]));
      }
      if (y[2] != lim[f][0] || y[3] != lim[f][1])
        printf("\n  %s %s(+-Inf) = %g, %g\n", ks[s]->vec->name, vc_names[f], (double)y[2],
               (double)y[3]);
    }
}

/* Every length 1..70 at offsets 0..2, in place and not: element i's result equals x[i] mapped
 * alone, and the guard after n is untouched. */
static void test_tails(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  float x[80], y[80], one[1];
  for (size_t s = 0; s < nks; s++)
    for (int f = 0; f < TPU__VF_COUNT; f++) {
      size_t bad = 0;
      for (size_t n = 1; n <= 70; n++)
        for (size_t off = 0; off < 3; off++) {
          for (size_t i = 0; i < 80; i++) x[i] = tpu_test_rand_float(-6.0f, 6.0f), y[i] = -7.0f;
          float keep[80];
          memcpy(keep, x, sizeof x);
          ks[s]->vec->map((tpu__vfn_t)f, x + off, y + off, n);
          for (size_t i = 0; i < 80; i++) {
            if (i < off || i >= off + n) {
              bad += y[i] != -7.0f || x[i] != keep[i];
              continue;
            }
            ks[s]->vec->map((tpu__vfn_t)f, &x[i], one, 1);
            bad += memcmp(one, &y[i], 4) != 0;
          }
          ks[s]->vec->map((tpu__vfn_t)f, x + off, x + off, n); /* in place */
          bad += memcmp(x + off, y + off, n * 4) != 0;
          bad += off > 0 && x[off - 1] != keep[off - 1];
          bad += x[off + n] != keep[off + n];
        }
      if (bad) printf("\n  %s %s: %zu tail mismatches\n", ks[s]->vec->name, vc_names[f], bad);
      TPU_ASSERT_SEED(bad == 0);
    }
}

/* avx2 and avx512 evaluate the same operations: the same bits. */
static void test_isas_agree(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  const tpu__vec_kernels_t *v2 = NULL, *v5 = NULL;
  for (size_t s = 0; s < nks; s++) {
    if (strcmp(ks[s]->name, "avx2") == 0) v2 = ks[s]->vec;
    if (strcmp(ks[s]->name, "avx512") == 0) v5 = ks[s]->vec;
  }
  if (!v2 || !v5) {
    printf("\n  vmath: avx2/avx512 agreement skipped (both are not runnable here)\n");
    return;
  }
  enum { N = 200000 };
  float *x = malloc(N * 4), *a = malloc(N * 4), *b = malloc(N * 4);
  CU_ASSERT_FATAL(x && a && b);
  for (size_t i = 0; i < N; i++)
    x[i] = i % 2 ? tpu_test_rand_float(-16.0f, 16.0f) : from_bits((uint32_t)tpu_test_rand());
  for (int f = 0; f < TPU__VF_COUNT; f++) {
    v2->map((tpu__vfn_t)f, x, a, N);
    v5->map((tpu__vfn_t)f, x, b, N);
    size_t bad = 0;
    for (size_t i = 0; i < N; i++) bad += memcmp(&a[i], &b[i], 4) != 0 && (a[i] == a[i] || b[i] == b[i]);
    if (bad) printf("\n  vmath %s: avx2 and avx512 differ in %zu of %d\n", vc_names[f], bad, N);
    TPU_ASSERT_SEED(bad == 0);
  }
  free(x), free(a), free(b);
}

/* A set's FP32 GEMM with a fused gelu/tanh/sigmoid equals its map() of the unfused output. */
static void test_epilogue_is_map(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  const tpu_act_t acts[] = {TPU_ACT_GELU, TPU_ACT_TANH, TPU_ACT_SIGMOID};
  const tpu__vfn_t fns[] = {TPU__VF_GELU, TPU__VF_TANH, TPU__VF_SIGMOID};
  for (size_t s = 0; s < nks; s++) {
    const tpu__dtype_kernels_t *kern = &ks[s]->dt[TPU_DTYPE_FP32];
    size_t m = (size_t)tpu_test_rand_range(1, 40), k = (size_t)tpu_test_rand_range(1, 90);
    size_t n = (size_t)tpu_test_rand_range(1, 100);
    float *a = malloc(m * k * 4), *w = malloc(n * k * 4), *bias = malloc(n * 4);
    float *c0 = malloc(m * n * 4), *c1 = malloc(m * n * 4);
    void *packed = tpu__aligned_alloc(kern->packed_size(k, n));
    size_t wsz = kern->ws_size ? kern->ws_size(k) : 0;
    void *ws = wsz ? tpu__aligned_alloc(wsz) : NULL;
    CU_ASSERT_FATAL(a && w && bias && c0 && c1 && packed && (ws || !wsz));
    for (size_t i = 0; i < m * k; i++) a[i] = tpu_test_rand_float(-1.5f, 1.5f);
    for (size_t i = 0; i < n * k; i++) w[i] = tpu_test_rand_float(-1.0f, 1.0f);
    for (size_t j = 0; j < n; j++) bias[j] = tpu_test_rand_float(-3.0f, 3.0f);
    kern->pack(k, n, w, k, 1, packed);
    tpu__gemm_args_t g = {.m = m, .k = k, .n = n, .a = a, .w = packed, .bias = bias,
                          .act = TPU_ACT_NONE, .out_dtype = TPU_DTYPE_FP32, .c = c0, .ldc = n};
    kern->gemm(&g, 0, m, 0, n, ws);
    for (size_t t = 0; t < 3; t++) {
      g.act = acts[t], g.c = c1;
      kern->gemm(&g, 0, m, 0, n, ws);
      float *want = malloc(m * n * 4);
      CU_ASSERT_FATAL(want != NULL);
      ks[s]->vec->map(fns[t], c0, want, m * n);
      size_t bad = 0;
      for (size_t i = 0; i < m * n; i++) bad += memcmp(&want[i], &c1[i], 4) != 0;
      if (bad)
        printf("\n  %s %s epilogue: %zu of %zu differ from map()\n", ks[s]->name,
               tpu_act_name(acts[t]), bad, m * n);
      TPU_ASSERT_SEED(bad == 0);
      free(want);
    }
    free(a), free(w), free(bias), free(c0), free(c1), free(packed), free(ws);
  }
}

static void test_softmax(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  enum { CAP = 40 * 260 + 1 };
  float *x = malloc(CAP * 4), *want = malloc(CAP * 4), *alone = malloc(300 * 4);
  CU_ASSERT_FATAL(x && want && alone);
  for (size_t s = 0; s < nks; s++) {
    size_t bad = 0;
    for (size_t n = 1; n <= 260; n += (n < 40 ? 1 : 37)) {
      size_t rows = (size_t)tpu_test_rand_range(1, 40);
      for (size_t i = 0; i < rows * n; i++) x[i] = tpu_test_rand_float(-30.0f, 30.0f);
      x[rows * n] = 123.0f;
      memcpy(want, x, rows * n * 4);
      tpu__vec_ref.softmax(want, rows, n);
      /* a row alone gives the same bits as in the batch */
      size_t r1 = (size_t)tpu_test_rand_range(0, (long)rows - 1);
      memcpy(alone, x + r1 * n, n * 4);
      ks[s]->vec->softmax(alone, 1, n);
      ks[s]->vec->softmax(x, rows, n);
      bad += memcmp(alone, x + r1 * n, n * 4) != 0;
      for (size_t i = 0; i < rows * n; i++) /* exp's few ulp, the sum's order: 4 ulp or 1e-44 */
        if (!(fabsf(x[i] - want[i]) <= 4 * 6e-8f * want[i] + 1e-44f)) bad++;
      bad += x[rows * n] != 123.0f;
    }
    /* a NaN anywhere makes its row NaN, as in the reference, and only its row */
    for (size_t n = 3; n <= 20; n += 17) {
      for (size_t i = 0; i < 3 * n; i++) x[i] = (float)(i % 7);
      x[n + 1] = NAN;
      ks[s]->vec->softmax(x, 3, n);
      for (size_t i = 0; i < 3 * n; i++) bad += (i >= n && i < 2 * n) == (x[i] == x[i]);
    }
    if (bad) printf("\n  %s softmax: %zu mismatches\n", ks[s]->name, bad);
    TPU_ASSERT_SEED(bad == 0);
  }
  free(x), free(want), free(alone);
}

static void test_rows(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  enum { N = 203 };
  float x[N], sc[N], b[N], y0[N], y1[N];
  double acc0[N], acc1[N];
  for (size_t s = 0; s < nks; s++) {
    size_t bad = 0;
    for (size_t n = 1; n <= N; n += (n < 34 ? 1 : 29)) {
      for (size_t i = 0; i < n; i++) {
        x[i] = tpu_test_rand_float(-4.0f, 4.0f) + 100.0f * (float)(i % 3 == 0);
        sc[i] = tpu_test_rand_float(0.5f, 2.0f);
        b[i] = tpu_test_rand_float(-1.0f, 1.0f);
        acc0[i] = acc1[i] = tpu_test_rand_float(-1e6f, 1e6f) / 3.0;
      }
      tpu__vec_ref.acc_f64(acc0, x, n);
      ks[s]->vec->acc_f64(acc1, x, n);
      bad += memcmp(acc0, acc1, n * sizeof(double)) != 0; /* bit-identical */
      for (int v = 0; v < 3; v++) {
        const float *scp = v == 1 ? NULL : sc, *bp = v == 2 ? NULL : b;
        double m0, i0, m1, i1;
        tpu__vec_ref.layernorm(x, n, scp, bp, 1e-5, y0, &m0, &i0);
        ks[s]->vec->layernorm(x, n, scp, bp, 1e-5, y1, &m1, &i1);
        bad += fabs(m0 - m1) > 1e-12 * (fabs(m0) + 1) || fabs(i0 - i1) > 1e-12 * i0;
        for (size_t i = 0; i < n; i++) bad += fabsf(y0[i] - y1[i]) > 1e-6f * (fabsf(y0[i]) + 1);
      }
    }
    if (bad) printf("\n  %s acc_f64/layernorm: %zu mismatches\n", ks[s]->name, bad);
    TPU_ASSERT_SEED(bad == 0);
  }
}

/* Each set's INT8 row quantizer (the plans' prologue) equals the reference bit for bit: scales
 * and every byte, over lengths 1..70 and longer rows, rows with exact ties (x / s = k + 0.5),
 * a largest element negative, zero rows, subnormal rows (the scale's step-up), values at ±127
 * after rounding; a NaN or ±Inf anywhere (also in a tail) is TPU_ERANGE from every set, with
 * nothing written. */
static void test_quantize_row(void) {
  const tpu__kernel_set_t *ks[MAX_SETS];
  size_t nks = sets(ks);
  enum { N = 300 };
  float x[N];
  int8_t q0[N + 16], q1[N + 16];
  for (size_t s = 0; s < nks; s++) {
    size_t bad = 0;
    for (int round = 0; round < 400; round++) {
      size_t n = round < 140 ? (size_t)round % 70 + 1 : (size_t)tpu_test_rand_range(71, N);
      int kind = round % 5;
      float amp = kind == 3 ? 1e-40f : tpu_test_rand_float(0.01f, 1000.0f);
      for (size_t i = 0; i < n; i++) {
        x[i] = tpu_test_rand_float(-1.0f, 1.0f) * amp;
        if (kind == 1 && i % 4 == 1) x[i] = x[0] / 127.0f * ((float)(i % 50) + 0.5f); /* ties */
        if (kind == 2) x[i] = 0.0f;
      }
      if (kind == 4) x[n - 1] = -2.0f * amp; /* the largest magnitude negative, in the tail */
      float s0 = -1, s1 = -2;
      memset(q0, 0x55, sizeof q0);
      memset(q1, 0x55, sizeof q1);
      tpu_status_t st0 = tpu__quantize_row(x, n, q0, &s0);
      tpu_status_t st1 = ks[s]->vec->quantize_row(x, n, q1, &s1);
      bad += st0 != TPU_OK || st1 != TPU_OK || memcmp(&s0, &s1, sizeof s0) != 0 ||
             memcmp(q0, q1, sizeof q0) != 0; /* nothing past n either */
      if (round % 7 == 0) { /* one non-finite element */
        static const float nf[3] = {NAN, INFINITY, -INFINITY};
        x[(size_t)round % n] = nf[round % 3];
        memset(q1, 0x55, sizeof q1);
        s1 = -2;
        st1 = ks[s]->vec->quantize_row(x, n, q1, &s1);
        bad += st1 != TPU_ERANGE || s1 != -2 || q1[0] != 0x55;
      }
    }
    if (bad) printf("\n  %s quantize_row: %zu mismatches\n", ks[s]->name, bad);
    TPU_ASSERT_SEED(bad == 0);
  }
}

TPU_TEST_SUITE(engine_vmath,
               {"accuracy", test_accuracy},
               {"worst_inputs", test_worst_inputs},
               {"special_values", test_special_values},
               {"tails", test_tails},
               {"isas_agree", test_isas_agree},
               {"epilogue_is_map", test_epilogue_is_map},
               {"softmax", test_softmax},
               {"rows", test_rows},
               {"quantize_row", test_quantize_row})
