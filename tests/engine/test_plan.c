/*
 * test_plan.c - plans (engine/frame/plan.c): numerics of every compute dtype and epilogue
 * against independent references, threads, statistics, and every error path.
 *
 * DESIGN
 * Each numeric test runs once per kernel set this build and CPU offer (today only "ref"), so a
 * new ISA set is held to the same references the day it lands. Shapes are drawn from 1..300
 * with half of them from {1, 7, 17, 33, 127, 129, 300}, sizes that are not multiples of any
 * tile. References:
 *   INT8   a plain int32 triple loop; INT32 output must match exactly, and so must FP32/INT8
 *          output with no activation or relu (the epilogue contract of tpu_kernels.h, recomputed
 *          here with volatile intermediates so each product rounds to binary32 as specified).
 *   FP32   a float64 triple loop; per element |c - ref| <= 1e-5 · (Σ_p |a_ip·w_jp| + |bias_j|),
 *          the rounding-error bound of a binary32 dot product of length ≤ 300 with headroom.
 *   BF16   the float64 product of the *original* FP32 inputs within 1e-2 · (Σ|a·w| + |bias|)
 *          (each bf16 input is within 2^-9 relative, so the products within ~2^-8), and the
 *          float64 product of the bf16-rounded inputs within the FP32 bound, which catches a
 *          conversion that truncates instead of rounding.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

#define MAX_SETS 8

static const size_t edge_dims[] = {1, 7, 17, 33, 127, 129, 300};

static size_t pick_dim(void) {
  if (tpu_test_rand() & 1) return edge_dims[tpu_test_rand_range(0, 6)];
  return (size_t)tpu_test_rand_range(1, 300);
}

static size_t kernel_sets(const char **names) {
  const tpu__kernel_set_t *sets[MAX_SETS];
  size_t n = tpu__kernels_available(sets, MAX_SETS);
  if (n > MAX_SETS) n = MAX_SETS;
  for (size_t i = 0; i < n; i++) names[i] = sets[i]->name;
  return n;
}

static tpu_engine_t *make_engine(const char *isa, unsigned threads) {
  tpu_engine_config_t cfg = {.threads = threads};
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu__engine_create_isa(&cfg, isa, &e) == TPU_OK);
  return e;
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  CU_ASSERT_FATAL(p != NULL);
  return p;
}

static void fill_floats(float *x, size_t count, float lo, float hi) {
  for (size_t i = 0; i < count; i++) x[i] = tpu_test_rand_float(lo, hi);
}

static void fill_i8(int8_t *x, size_t count) {
  for (size_t i = 0; i < count; i++) x[i] = (int8_t)tpu_test_rand_range(-127, 127);
}

/* Stores [N][K] weights `nk` in `layout` into dst (element size `es`). */
static void to_layout(const void *nk, size_t k, size_t n, size_t es, tpu_layout_t layout,
                      void *dst) {
  const char *s = nk;
  char *d = dst;
  for (size_t j = 0; j < n; j++)
    for (size_t p = 0; p < k; p++) {
      size_t at = layout == TPU_LAYOUT_NK ? j * k + p : p * n + j;
      memcpy(d + at * es, s + (j * k + p) * es, es);
    }
}

static double act_d(tpu_act_t act, double x) {
  switch (act) {
  case TPU_ACT_RELU: return x < 0 ? 0 : x;
  case TPU_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
  case TPU_ACT_TANH: return tanh(x);
  case TPU_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
  default: return x;
  }
}

/* y = act(sum_p a·w + bias) in double, and the error scale Σ|a·w| + |bias|, for [M][N]. */
static void ref_float(size_t m, size_t k, size_t n, const float *a, const float *w_nk,
                      const float *bias, tpu_act_t act, double *y, double *scale) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      double acc = bias ? bias[j] : 0.0, s = bias ? fabs(bias[j]) : 0.0;
      for (size_t p = 0; p < k; p++) {
        double prod = (double)a[i * k + p] * w_nk[j * k + p];
        acc += prod;
        s += fabs(prod);
      }
      y[i * n + j] = act_d(act, acc);
      scale[i * n + j] = s;
    }
}

static void softmax_rows_d(double *y, size_t m, size_t n) {
  for (size_t i = 0; i < m; i++) {
    double mx = y[i * n], sum = 0;
    for (size_t j = 1; j < n; j++) mx = fmax(mx, y[i * n + j]);
    for (size_t j = 0; j < n; j++) sum += y[i * n + j] = exp(y[i * n + j] - mx);
    for (size_t j = 0; j < n; j++) y[i * n + j] /= sum;
  }
}

/* Counts elements with |c - ref| > rel·scale + abs_tol·|ref| + tiny; prints the first. */
static size_t count_bad(const char *what, size_t m, size_t n, const float *c, const double *ref,
                        const double *scale, double rel, double abs_tol) {
  size_t bad = 0;
  for (size_t i = 0; i < m * n; i++) {
    double err = fabs((double)c[i] - ref[i]);
    double tol = rel * (scale ? scale[i] : 1.0) + abs_tol * fabs(ref[i]) + 1e-30;
    if (!(err <= tol)) {
      if (!bad)
        printf("\n  %s [%zu][%zu] of %zux%zu: got %.9g want %.9g (tol %.3g)\n", what, i / n,
               i % n, m, n, c[i], ref[i], tol);
      bad++;
    }
  }
  return bad;
}

/* ---- INT8: exact ---- */

static void ref_i32(size_t m, size_t k, size_t n, const int8_t *a, const int8_t *w_nk,
                    int32_t *c) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      int32_t acc = 0;
      for (size_t p = 0; p < k; p++) acc += (int32_t)a[i * k + p] * w_nk[j * k + p];
      c[i * n + j] = acc;
    }
}

/* The epilogue contract, step by step in binary32. */
static float ref_i8_epilogue(int32_t acc, float as, float ws, const float *bias, size_t j,
                             tpu_act_t act) {
  volatile float y = (float)acc * as;
  y = y * ws;
  if (bias) y = y + bias[j];
  if (act == TPU_ACT_RELU && y < 0) y = 0.0f;
  return y;
}

static int8_t ref_requant(float y, float out_scale) {
  float t = y / out_scale;
  if (t != t) return 0;
  if (t >= 127.0f) return 127;
  if (t <= -127.0f) return -127;
  return (int8_t)rintf(t); /* default rounding mode: to nearest, ties to even */
}

static void check_int8_shape(tpu_engine_t *e, size_t m, size_t k, size_t n, tpu_layout_t layout) {
  int8_t *a = xmalloc(m * k), *w_nk = xmalloc(k * n), *w_src = xmalloc(k * n);
  int8_t *q8 = xmalloc(m * n), *fa_q = xmalloc(m * k);
  int32_t *want = xmalloc(m * n * 4), *c32 = xmalloc(m * n * 4);
  float *ws = xmalloc(n * 4), *as = xmalloc(m * 4), *bias = xmalloc(n * 4);
  float *c = xmalloc(m * n * 4), *fa = xmalloc(m * k * 4), *fa_s = xmalloc(m * 4);
  fill_i8(a, m * k);
  fill_i8(w_nk, k * n);
  /* One -128 in each operand: outside symmetric quantization, but the accumulators must still
   * be exact (the engine bounds K for exactly this case). */
  a[tpu_test_rand_range(0, (long)(m * k) - 1)] = -128;
  w_nk[tpu_test_rand_range(0, (long)(k * n) - 1)] = -128;
  fill_floats(ws, n, 0.001f, 0.05f);
  fill_floats(as, m, 0.001f, 0.05f);
  fill_floats(bias, n, -2.0f, 2.0f);
  to_layout(w_nk, k, n, 1, layout, w_src);
  ref_i32(m, k, n, a, w_nk, want);

  tpu_weights_desc_t d = {.compute = TPU_DTYPE_INT8, .k = k, .n = n, .layout = layout,
                          .src_dtype = TPU_DTYPE_INT8, .src = w_src, .src_scales = ws};
  tpu_weights_t *w = NULL;
  TPU_ASSERT_SEED(tpu_weights_pack(e, &d, &w) == TPU_OK);
  if (!w) goto out;

  /* INT32: raw accumulators. */
  tpu_epilogue_t ep32 = {.out_dtype = TPU_DTYPE_INT32};
  tpu_plan_t *p = NULL;
  TPU_ASSERT_SEED(tpu_plan_create(e, w, m, TPU_DTYPE_INT8, &ep32, &p) == TPU_OK);
  TPU_ASSERT_SEED(tpu_plan_run(p, a, NULL, c32) == TPU_OK);
  size_t bad = 0;
  for (size_t i = 0; i < m * n; i++) bad += c32[i] != want[i];
  if (bad) printf("\n  INT32 %zux%zux%zu layout %d: %zu wrong\n", m, k, n, (int)layout, bad);
  TPU_ASSERT_SEED(bad == 0);
  tpu_plan_free(p);

  /* FP32 output, with and without bias + relu. */
  for (int variant = 0; variant < 2; variant++) {
    tpu_epilogue_t ep = {.bias = variant ? bias : NULL,
                         .act = variant ? TPU_ACT_RELU : TPU_ACT_NONE,
                         .out_dtype = TPU_DTYPE_FP32};
    p = NULL;
    TPU_ASSERT_SEED(tpu_plan_create(e, w, m, TPU_DTYPE_INT8, &ep, &p) == TPU_OK);
    TPU_ASSERT_SEED(tpu_plan_run(p, a, as, c) == TPU_OK);
    bad = 0;
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++) {
        float y = ref_i8_epilogue(want[i * n + j], as[i], ws[j], ep.bias, j, ep.act);
        bad += memcmp(&y, &c[i * n + j], sizeof y) != 0;
      }
    if (bad) printf("\n  INT8->FP32 v%d %zux%zux%zu: %zu differ\n", variant, m, k, n, bad);
    TPU_ASSERT_SEED(bad == 0);
    tpu_plan_free(p);
  }

  /* INT8 output (requantized), bias + relu. out_scale puts typical |y| around a few dozen
   * quanta, and some saturate. */
  tpu_epilogue_t ep8 = {.bias = bias, .act = TPU_ACT_RELU, .out_dtype = TPU_DTYPE_INT8,
                        .out_scale = 0.02f * sqrtf((float)k)};
  p = NULL;
  TPU_ASSERT_SEED(tpu_plan_create(e, w, m, TPU_DTYPE_INT8, &ep8, &p) == TPU_OK);
  TPU_ASSERT_SEED(tpu_plan_run(p, a, as, q8) == TPU_OK);
  bad = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      float y = ref_i8_epilogue(want[i * n + j], as[i], ws[j], bias, j, TPU_ACT_RELU);
      bad += q8[i * n + j] != ref_requant(y, ep8.out_scale);
    }
  if (bad) printf("\n  INT8->INT8 %zux%zux%zu: %zu differ\n", m, k, n, bad);
  TPU_ASSERT_SEED(bad == 0);
  tpu_plan_free(p);

  /* FP32 input: quantized per row inside the plan, exactly as tpu_quantize_rows does. */
  fill_floats(fa, m * k, -3.0f, 3.0f);
  TPU_ASSERT_SEED(tpu_quantize_rows(fa, m, k, fa_q, fa_s) == TPU_OK);
  ref_i32(m, k, n, fa_q, w_nk, want);
  tpu_epilogue_t epb = {.bias = bias, .out_dtype = TPU_DTYPE_FP32};
  p = NULL;
  TPU_ASSERT_SEED(tpu_plan_create(e, w, m, TPU_DTYPE_FP32, &epb, &p) == TPU_OK);
  TPU_ASSERT_SEED(tpu_plan_run(p, fa, NULL, c) == TPU_OK);
  bad = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      float y = ref_i8_epilogue(want[i * n + j], fa_s[i], ws[j], bias, j, TPU_ACT_NONE);
      bad += memcmp(&y, &c[i * n + j], sizeof y) != 0;
    }
  if (bad) printf("\n  FP32->INT8 compute %zux%zux%zu: %zu differ\n", m, k, n, bad);
  TPU_ASSERT_SEED(bad == 0);
  tpu_plan_free(p);
  tpu_weights_free(w);
out:
  free(a), free(w_nk), free(w_src), free(q8), free(fa_q), free(want), free(c32);
  free(ws), free(as), free(bias), free(c), free(fa), free(fa_s);
}

static void test_int8_exact(void) {
  const char *sets[MAX_SETS];
  size_t nsets = kernel_sets(sets);
  for (size_t s = 0; s < nsets; s++) {
    tpu_engine_t *e = make_engine(sets[s], 1);
    /* The edge sizes in every position at least once, then random shapes. */
    check_int8_shape(e, 1, 1, 1, TPU_LAYOUT_NK);
    check_int8_shape(e, 7, 300, 17, TPU_LAYOUT_KN);
    check_int8_shape(e, 33, 127, 129, TPU_LAYOUT_NK);
    check_int8_shape(e, 129, 33, 127, TPU_LAYOUT_KN);
    for (int r = 0; r < 12; r++)
      check_int8_shape(e, pick_dim(), pick_dim(), pick_dim(),
                       r & 1 ? TPU_LAYOUT_KN : TPU_LAYOUT_NK);
    tpu_engine_free(e);
  }
}

/* ---- FP32 and BF16 ---- */

/* Runs a plan of `compute` on FP32 input against double references. */
static void check_float_shape(tpu_engine_t *e, tpu_dtype_t compute, size_t m, size_t k, size_t n,
                              tpu_layout_t layout, tpu_act_t act, int with_bias) {
  float *a = xmalloc(m * k * 4), *w_nk = xmalloc(k * n * 4), *w_src = xmalloc(k * n * 4);
  float *bias = xmalloc(n * 4), *c = xmalloc(m * n * 4);
  float *a_r = xmalloc(m * k * 4), *w_r = xmalloc(k * n * 4); /* bf16-rounded copies */
  double *ref = xmalloc(m * n * 8), *scale = xmalloc(m * n * 8);
  fill_floats(a, m * k, -1.0f, 1.0f);
  fill_floats(w_nk, k * n, -1.0f, 1.0f);
  fill_floats(bias, n, -1.0f, 1.0f);
  to_layout(w_nk, k, n, 4, layout, w_src);
  const float *b = with_bias ? bias : NULL;
  char what[96];
  snprintf(what, sizeof what, "%s %s %s layout %d", tpu_dtype_name(compute), tpu_act_name(act),
           b ? "bias" : "-", (int)layout);

  tpu_weights_desc_t d = {.compute = compute, .k = k, .n = n, .layout = layout,
                          .src_dtype = TPU_DTYPE_FP32, .src = w_src};
  tpu_weights_t *w = NULL;
  tpu_plan_t *p = NULL;
  tpu_epilogue_t ep = {.bias = b, .act = act, .out_dtype = TPU_DTYPE_FP32};
  TPU_ASSERT_SEED(tpu_weights_pack(e, &d, &w) == TPU_OK);
  TPU_ASSERT_SEED(tpu_plan_create(e, w, m, TPU_DTYPE_FP32, &ep, &p) == TPU_OK);
  if (!p) goto out;
  TPU_ASSERT_SEED(tpu_plan_run(p, a, NULL, c) == TPU_OK);
  if (act == TPU_ACT_SOFTMAX) {
    /* Softmax turns the logits' absolute error into relative error of every probability, so
     * it is checked against a float64 softmax of the engine's own logits (a plan without the
     * activation, whose accuracy the other cases check): 1e-5 relative, rows summing to 1. */
    tpu_plan_t *pl = NULL;
    tpu_epilogue_t epl = {.bias = b, .act = TPU_ACT_NONE, .out_dtype = TPU_DTYPE_FP32};
    float *logits = xmalloc(m * n * 4);
    TPU_ASSERT_SEED(tpu_plan_create(e, w, m, TPU_DTYPE_FP32, &epl, &pl) == TPU_OK);
    TPU_ASSERT_SEED(pl && tpu_plan_run(pl, a, NULL, logits) == TPU_OK);
    for (size_t i = 0; i < m * n; i++) ref[i] = logits[i];
    softmax_rows_d(ref, m, n);
    TPU_ASSERT_SEED(count_bad(what, m, n, c, ref, NULL, 0.0, 1e-5) == 0);
    size_t bad = 0;
    for (size_t i = 0; i < m; i++) {
      double sum = 0;
      for (size_t j = 0; j < n; j++) sum += c[i * n + j];
      bad += !(fabs(sum - 1.0) <= 1e-5);
    }
    TPU_ASSERT_SEED(bad == 0);
    tpu_plan_free(pl);
    free(logits);
    goto out;
  }
  /* The activation's slope carries the dot product's error (gelu's is at most 1.13), and the
   * transcendental ones add a few ulps of their own (relative 4e-6). */
  double slope = act == TPU_ACT_GELU ? 1.13 : 1.0;
  double act_rel = act == TPU_ACT_NONE || act == TPU_ACT_RELU ? 0.0 : 4e-6;
  ref_float(m, k, n, a, w_nk, b, act, ref, scale);
  if (compute == TPU_DTYPE_FP32) {
    TPU_ASSERT_SEED(count_bad(what, m, n, c, ref, scale, 1e-5 * slope, act_rel) == 0);
  } else {
    TPU_ASSERT_SEED(count_bad(what, m, n, c, ref, scale, 1e-2 * slope, act_rel) == 0);
    for (size_t i = 0; i < m * k; i++) a_r[i] = tpu_bf16_to_fp32(tpu_bf16_from_fp32(a[i]));
    for (size_t i = 0; i < k * n; i++) w_r[i] = tpu_bf16_to_fp32(tpu_bf16_from_fp32(w_nk[i]));
    ref_float(m, k, n, a_r, w_r, b, act, ref, scale);
    TPU_ASSERT_SEED(count_bad(what, m, n, c, ref, scale, 1e-5 * slope, act_rel) == 0);
  }
out:
  tpu_plan_free(p);
  tpu_weights_free(w);
  free(a), free(w_nk), free(w_src), free(bias), free(c), free(a_r), free(w_r), free(ref);
  free(scale);
}

static void test_fp32_random(void) {
  const char *sets[MAX_SETS];
  size_t nsets = kernel_sets(sets);
  for (size_t s = 0; s < nsets; s++) {
    tpu_engine_t *e = make_engine(sets[s], 1);
    check_float_shape(e, TPU_DTYPE_FP32, 300, 129, 7, TPU_LAYOUT_NK, TPU_ACT_NONE, 0);
    check_float_shape(e, TPU_DTYPE_FP32, 1, 300, 33, TPU_LAYOUT_KN, TPU_ACT_NONE, 1);
    for (int r = 0; r < 10; r++)
      check_float_shape(e, TPU_DTYPE_FP32, pick_dim(), pick_dim(), pick_dim(),
                        r & 1 ? TPU_LAYOUT_KN : TPU_LAYOUT_NK, TPU_ACT_NONE, r & 2);
    tpu_engine_free(e);
  }
}

static void test_bf16_random(void) {
  const char *sets[MAX_SETS];
  size_t nsets = kernel_sets(sets);
  for (size_t s = 0; s < nsets; s++) {
    tpu_engine_t *e = make_engine(sets[s], 1);
    check_float_shape(e, TPU_DTYPE_BF16, 17, 300, 127, TPU_LAYOUT_KN, TPU_ACT_NONE, 1);
    for (int r = 0; r < 8; r++)
      check_float_shape(e, TPU_DTYPE_BF16, pick_dim(), pick_dim(), pick_dim(),
                        r & 1 ? TPU_LAYOUT_KN : TPU_LAYOUT_NK, TPU_ACT_NONE, r & 2);
    tpu_engine_free(e);
  }
}

/* Every activation through the fused epilogue (and softmax through the frame), FP32 and BF16. */
static void test_activations(void) {
  const char *sets[MAX_SETS];
  size_t nsets = kernel_sets(sets);
  for (size_t s = 0; s < nsets; s++) {
    tpu_engine_t *e = make_engine(sets[s], 1);
    for (unsigned act = 0; act < TPU_ACT_COUNT; act++) {
      check_float_shape(e, TPU_DTYPE_FP32, pick_dim() % 40 + 1, pick_dim(), pick_dim(),
                        TPU_LAYOUT_NK, (tpu_act_t)act, 1);
      check_float_shape(e, TPU_DTYPE_BF16, pick_dim() % 40 + 1, pick_dim(), pick_dim(),
                        TPU_LAYOUT_KN, (tpu_act_t)act, 1);
    }
    tpu_engine_free(e);
  }
}

/* BF16 and INT8 outputs, softmax included: each equals converting the FP32 output of the same
 * plan exactly (the store is a pure function of y). */
static void test_output_conversions(void) {
  size_t m = 9, k = 65, n = 31;
  float *a = xmalloc(m * k * 4), *w = xmalloc(k * n * 4), *bias = xmalloc(n * 4);
  float *c32 = xmalloc(m * n * 4);
  uint16_t *c16 = xmalloc(m * n * 2);
  int8_t *c8 = xmalloc(m * n);
  fill_floats(a, m * k, -1, 1);
  fill_floats(w, k * n, -1, 1);
  fill_floats(bias, n, -1, 1);
  tpu_engine_t *e = make_engine(NULL, 1);
  for (unsigned act = 0; act < TPU_ACT_COUNT; act++) {
    /* BF16 compute: FP32 vs BF16 output. */
    tpu_weights_desc_t d = {.compute = TPU_DTYPE_BF16, .k = k, .n = n, .layout = TPU_LAYOUT_NK,
                            .src_dtype = TPU_DTYPE_FP32, .src = w};
    tpu_weights_t *wb = NULL, *wi = NULL;
    tpu_plan_t *p32 = NULL, *p16 = NULL, *pf = NULL, *p8 = NULL;
    tpu_epilogue_t ep = {.bias = bias, .act = (tpu_act_t)act, .out_dtype = TPU_DTYPE_FP32};
    TPU_ASSERT_SEED(tpu_weights_pack(e, &d, &wb) == TPU_OK);
    TPU_ASSERT_SEED(tpu_plan_create(e, wb, m, TPU_DTYPE_FP32, &ep, &p32) == TPU_OK);
    ep.out_dtype = TPU_DTYPE_BF16;
    TPU_ASSERT_SEED(tpu_plan_create(e, wb, m, TPU_DTYPE_FP32, &ep, &p16) == TPU_OK);
    if (p32 && p16) {
      TPU_ASSERT_SEED(tpu_plan_run(p32, a, NULL, c32) == TPU_OK);
      TPU_ASSERT_SEED(tpu_plan_run(p16, a, NULL, c16) == TPU_OK);
      size_t bad = 0;
      for (size_t i = 0; i < m * n; i++) bad += c16[i] != tpu_bf16_from_fp32(c32[i]);
      TPU_ASSERT_SEED(bad == 0);
    }
    /* INT8 compute: FP32 vs requantized INT8 output. */
    d.compute = TPU_DTYPE_INT8;
    tpu_epilogue_t e32 = {.bias = bias, .act = (tpu_act_t)act, .out_dtype = TPU_DTYPE_FP32};
    tpu_epilogue_t e8 = {.bias = bias, .act = (tpu_act_t)act, .out_dtype = TPU_DTYPE_INT8,
                         .out_scale = act == TPU_ACT_SOFTMAX ? 1.0f / 127 : 0.03f};
    TPU_ASSERT_SEED(tpu_weights_pack(e, &d, &wi) == TPU_OK);
    TPU_ASSERT_SEED(tpu_plan_create(e, wi, m, TPU_DTYPE_FP32, &e32, &pf) == TPU_OK);
    TPU_ASSERT_SEED(tpu_plan_create(e, wi, m, TPU_DTYPE_FP32, &e8, &p8) == TPU_OK);
    if (pf && p8) {
      TPU_ASSERT_SEED(tpu_plan_run(pf, a, NULL, c32) == TPU_OK);
      TPU_ASSERT_SEED(tpu_plan_run(p8, a, NULL, c8) == TPU_OK);
      size_t bad = 0;
      for (size_t i = 0; i < m * n; i++) bad += c8[i] != ref_requant(c32[i], e8.out_scale);
      TPU_ASSERT_SEED(bad == 0);
    }
    tpu_plan_free(p32), tpu_plan_free(p16), tpu_plan_free(pf), tpu_plan_free(p8);
    tpu_weights_free(wb), tpu_weights_free(wi);
  }
  tpu_engine_free(e);
  free(a), free(w), free(bias), free(c32), free(c16), free(c8);
}

/* Requantization by hand: ties to even and saturation at ±127 (never -128). */
static void test_requantize_saturation(void) {
  /* K = 1, W = [[1]] with scale 1, A row scale 1: y = a. out_scale 2 turns a into a/2. */
  static const int8_t a[] = {5, 7, -5, -7, 3, 127, -127, -128, 0, 1};
  static const int8_t want2[] = {2, 4, -2, -4, 2, 64, -64, -64, 0, 0};
  const size_t m = sizeof a;
  float as[sizeof a];
  int8_t out[sizeof a];
  for (size_t i = 0; i < m; i++) as[i] = 1.0f;
  int8_t one = 1;
  float one_scale = 1.0f;
  tpu_engine_t *e = make_engine(NULL, 1);
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_INT8, .k = 1, .n = 1, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_INT8, .src = &one, .src_scales = &one_scale};
  tpu_weights_t *w = NULL;
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w) == TPU_OK);
  tpu_epilogue_t ep = {.out_dtype = TPU_DTYPE_INT8, .out_scale = 2.0f};
  tpu_plan_t *p = NULL;
  CU_ASSERT_FATAL(tpu_plan_create(e, w, m, TPU_DTYPE_INT8, &ep, &p) == TPU_OK);
  CU_ASSERT(tpu_plan_run(p, a, as, out) == TPU_OK);
  for (size_t i = 0; i < m; i++) CU_ASSERT_EQUAL(out[i], want2[i]);
  tpu_plan_free(p);

  /* out_scale 0.5: everything beyond ±63.5 saturates to ±127. */
  ep.out_scale = 0.5f;
  CU_ASSERT_FATAL(tpu_plan_create(e, w, m, TPU_DTYPE_INT8, &ep, &p) == TPU_OK);
  CU_ASSERT(tpu_plan_run(p, a, as, out) == TPU_OK);
  static const int8_t want05[] = {10, 14, -10, -14, 6, 127, -127, -127, 0, 2};
  for (size_t i = 0; i < m; i++) CU_ASSERT_EQUAL(out[i], want05[i]);
  tpu_plan_free(p);

  /* y / out_scale, not y · (1/out_scale): 45.5/7 is exactly the tie 6.5 (to even: 6), while
   * 45.5 · fl(1/7) = 6.50000048 would round to 7. */
  static const int8_t a3[] = {91, -91, 21};
  const float half[] = {0.5f, 0.5f, 0.5f};
  ep.out_scale = 7.0f;
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 3, TPU_DTYPE_INT8, &ep, &p) == TPU_OK);
  CU_ASSERT(tpu_plan_run(p, a3, half, out) == TPU_OK);
  CU_ASSERT(out[0] == 6 && out[1] == -6 && out[2] == 2); /* 6.5, -6.5, 1.5 */
  tpu_plan_free(p);

  /* Bias pushes a zero accumulator to ±huge: still clamps. */
  float big = 1e30f;
  tpu_epilogue_t epb = {.bias = &big, .out_dtype = TPU_DTYPE_INT8, .out_scale = 1.0f};
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 1, TPU_DTYPE_INT8, &epb, &p) == TPU_OK);
  int8_t zero = 0;
  CU_ASSERT(tpu_plan_run(p, &zero, as, out) == TPU_OK);
  CU_ASSERT_EQUAL(out[0], 127);
  tpu_plan_free(p);
  big = -1e30f;
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 1, TPU_DTYPE_INT8, &epb, &p) == TPU_OK);
  CU_ASSERT(tpu_plan_run(p, &zero, as, out) == TPU_OK);
  CU_ASSERT_EQUAL(out[0], -127);
  tpu_plan_free(p);
  tpu_weights_free(w);
  tpu_engine_free(e);
}

/* The bias is copied at plan creation: changing the caller's array later changes nothing. */
static void test_bias_copied(void) {
  float w[2] = {1, 2}, bias[2] = {10, 20}, a[1] = {1}, c[2];
  tpu_engine_t *e = make_engine(NULL, 1);
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_FP32, .k = 1, .n = 2, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_FP32, .src = w};
  tpu_weights_t *pw = NULL;
  tpu_plan_t *p = NULL;
  tpu_epilogue_t ep = {.bias = bias, .out_dtype = TPU_DTYPE_FP32};
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &pw) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_create(e, pw, 1, TPU_DTYPE_FP32, &ep, &p) == TPU_OK);
  bias[0] = bias[1] = 1000;
  CU_ASSERT(tpu_plan_run(p, a, NULL, c) == TPU_OK);
  CU_ASSERT_EQUAL(c[0], 11.0f);
  CU_ASSERT_EQUAL(c[1], 22.0f);
  CU_ASSERT_EQUAL(tpu_plan_m(p), 1);
  CU_ASSERT_EQUAL(tpu_plan_m(NULL), 0);
  tpu_plan_free(p);
  tpu_weights_free(pw);
  tpu_engine_free(e);
}

/* ---- threads ---- */

/* Runs one plan of each dtype on `e` and returns the FP32 output bytes (for bitwise compare). */
static void run_all_dtypes(tpu_engine_t *e, size_t m, size_t k, size_t n, const float *a,
                           const float *w, const float *bias, float *out /* 3·m·n */) {
  static const tpu_dtype_t dts[] = {TPU_DTYPE_FP32, TPU_DTYPE_BF16, TPU_DTYPE_INT8};
  for (int t = 0; t < 3; t++) {
    tpu_weights_desc_t d = {.compute = dts[t], .k = k, .n = n, .layout = TPU_LAYOUT_NK,
                            .src_dtype = TPU_DTYPE_FP32, .src = w};
    tpu_weights_t *pw = NULL;
    tpu_plan_t *p = NULL;
    tpu_epilogue_t ep = {.bias = bias, .act = TPU_ACT_GELU, .out_dtype = TPU_DTYPE_FP32};
    TPU_ASSERT_SEED(tpu_weights_pack(e, &d, &pw) == TPU_OK);
    TPU_ASSERT_SEED(tpu_plan_create(e, pw, m, TPU_DTYPE_FP32, &ep, &p) == TPU_OK);
    TPU_ASSERT_SEED(tpu_plan_run(p, a, NULL, out + t * m * n) == TPU_OK);
    tpu_plan_free(p);
    tpu_weights_free(pw);
  }
}

/* Splitting a plan over threads (rows for tall A, columns for a single row) changes no bit. */
static void test_threads_bitwise(void) {
  static const size_t shapes[][3] = {{64, 256, 300}, {1, 2100, 1017}, {5, 700, 701}};
  for (size_t s = 0; s < 3; s++) {
    size_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
    CU_ASSERT((uint64_t)m * k * n >= TPU__PAR_MIN_MACS); /* else this tests nothing */
    float *a = xmalloc(m * k * 4), *w = xmalloc(k * n * 4), *bias = xmalloc(n * 4);
    float *one = xmalloc(3 * m * n * 4), *many = xmalloc(3 * m * n * 4);
    fill_floats(a, m * k, -1, 1);
    fill_floats(w, k * n, -1, 1);
    fill_floats(bias, n, -1, 1);
    tpu_engine_t *e1 = make_engine(NULL, 1);
    run_all_dtypes(e1, m, k, n, a, w, bias, one);
    for (unsigned threads = 2; threads <= 3; threads++) {
      tpu_engine_t *et = make_engine(NULL, threads);
      memset(many, 0xff, 3 * m * n * 4);
      run_all_dtypes(et, m, k, n, a, w, bias, many);
      TPU_ASSERT_SEED(memcmp(one, many, 3 * m * n * 4) == 0);
      tpu_engine_stats_t st;
      CU_ASSERT(tpu_engine_stats(et, &st) == TPU_OK && st.threads == threads && st.calls == 3);
      tpu_engine_free(et);
    }
    tpu_engine_free(e1);
    free(a), free(w), free(bias), free(one), free(many);
  }
}

/* ---- batch invariance (issue 21): a row's output bytes do not depend on its batch ---- */

/* One plan of `m` rows of `pw` with epilogue `ep` over FP32 input `a`; returns the output
 * (FP32, BF16 or INT8 bytes, `es` bytes an element) in `c`. */
static void run_rows(tpu_engine_t *e, const tpu_weights_t *pw, const tpu_epilogue_t *ep, size_t m,
                     const float *a, void *c) {
  tpu_plan_t *p = NULL;
  TPU_ASSERT_SEED(tpu_plan_create(e, pw, m, TPU_DTYPE_FP32, ep, &p) == TPU_OK);
  if (p) TPU_ASSERT_SEED(tpu_plan_run(p, a, NULL, c) == TPU_OK);
  tpu_plan_free(p);
}

/* For one kernel set, dtype, shape and epilogue: every row of a pool computed alone (a 1-row
 * plan) gives the same output bytes as in batches of every size in `ms`, at every position,
 * beside random other rows of the pool, on `e1` (1 thread) and `e2` (2 threads). */
static size_t check_invariant(tpu_engine_t *e1, tpu_engine_t *e2, tpu_dtype_t compute, size_t k,
                              size_t n, tpu_act_t act, tpu_dtype_t out_dtype, const size_t *ms,
                              size_t nms) {
  enum { POOL = 12 };
  size_t es = tpu_dtype_size(out_dtype), mmax = 0, bad = 0;
  for (size_t t = 0; t < nms; t++) mmax = ms[t] > mmax ? ms[t] : mmax;
  float *w = xmalloc(k * n * 4), *bias = xmalloc(n * 4), *pool = xmalloc(POOL * k * 4);
  float *a = xmalloc(mmax * k * 4);
  char *alone = xmalloc(POOL * n * es), *c = xmalloc(mmax * n * es);
  size_t *pick = xmalloc(mmax * sizeof *pick);
  fill_floats(w, k * n, -1, 1);
  fill_floats(bias, n, -1, 1);
  fill_floats(pool, POOL * k, -2, 2);
  tpu_weights_desc_t d = {.compute = compute, .k = k, .n = n, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_FP32, .src = w};
  tpu_epilogue_t ep = {.bias = bias, .act = act, .out_dtype = out_dtype,
                       .out_scale = out_dtype == TPU_DTYPE_INT8 ? 0.05f : 0.0f};
  tpu_weights_t *w1 = NULL, *w2 = NULL;
  TPU_ASSERT_SEED(tpu_weights_pack(e1, &d, &w1) == TPU_OK);
  TPU_ASSERT_SEED(tpu_weights_pack(e2, &d, &w2) == TPU_OK);
  if (!w1 || !w2) goto out;
  tpu_engine_stats_t st;
  const char *isa = tpu_engine_stats(e1, &st) == TPU_OK && st.isa ? st.isa : "?";
  for (size_t r = 0; r < POOL; r++) run_rows(e1, w1, &ep, 1, pool + r * k, alone + r * n * es);
  for (size_t t = 0; t < nms && !bad; t++) {
    size_t m = ms[t];
    for (int threads = 1; threads <= 2; threads++) {
      for (size_t i = 0; i < m; i++) {
        pick[i] = (size_t)tpu_test_rand_range(0, POOL - 1);
        memcpy(a + i * k, pool + pick[i] * k, k * 4);
      }
      memset(c, 0xa5, m * n * es);
      run_rows(threads == 1 ? e1 : e2, threads == 1 ? w1 : w2, &ep, m, a, c);
      for (size_t i = 0; i < m; i++)
        if (memcmp(c + i * n * es, alone + pick[i] * n * es, n * es) != 0) {
          size_t j = 0;
          while (memcmp(c + (i * n + j) * es, alone + (pick[i] * n + j) * es, es) == 0) j++;
          if (!bad)
            printf("\n  %s %s k=%zu n=%zu act=%d out=%s: row %zu of %zu (%d threads) differs "
                   "from alone at column %zu\n",
                   isa, tpu_dtype_name(compute), k, n, (int)act, tpu_dtype_name(out_dtype), i, m,
                   threads, j);
          bad++;
        }
    }
  }
out:
  tpu_weights_free(w1);
  tpu_weights_free(w2);
  free(w), free(bias), free(pool), free(a), free(alone), free(c), free(pick);
  return bad;
}

/* Every kernel set, compute dtype, epilogue and output dtype; shapes with ragged and tail-panel
 * widths, and one past the parallel threshold so that 2 threads split it (by rows for tall
 * batches, by columns for short ones). */
static void test_batch_invariant(void) {
  static const size_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64};
  static const size_t shapes[][2] = {{7, 5}, {33, 100}, {64, 257}, {300, 129}};
  static const size_t big_ms[] = {1, 2, 3, 8, 9, 64};
  static const tpu_dtype_t dts[] = {TPU_DTYPE_FP32, TPU_DTYPE_BF16, TPU_DTYPE_INT8};
  const char *names[MAX_SETS];
  size_t nsets = kernel_sets(names);
  for (size_t s = 0; s < nsets; s++) {
    tpu_engine_t *e1 = make_engine(names[s], 1), *e2 = make_engine(names[s], 2);
    for (int t = 0; t < 3; t++)
      for (int act = 0; act < TPU_ACT_COUNT; act++) {
        tpu_dtype_t out = act % 2 && dts[t] != TPU_DTYPE_FP32 ? dts[t] : TPU_DTYPE_FP32;
        for (size_t sh = 0; sh < 4; sh++)
          TPU_ASSERT_SEED(check_invariant(e1, e2, dts[t], shapes[sh][0], shapes[sh][1],
                                          (tpu_act_t)act, out, ms, 14) == 0);
      }
    /* 64 x 1100 x 1030 > TPU__PAR_MIN_MACS: both engines split it at 64 rows (and columns at
     * 1); 1030 ends in two 32-wide tail panels on avx512. */
    CU_ASSERT((uint64_t)64 * 1100 * 1030 >= TPU__PAR_MIN_MACS);
    for (int t = 0; t < 3; t++)
      TPU_ASSERT_SEED(check_invariant(e1, e2, dts[t], 1100, 1030, TPU_ACT_GELU, TPU_DTYPE_FP32,
                                      big_ms, 6) == 0);
    tpu_engine_free(e1);
    tpu_engine_free(e2);
  }
}

typedef struct {
  tpu_plan_t *plan;
  const float *a;
  const float *want;
  float *c;
  size_t mn;
  int runs, bad;
} runner_t;

static void *runner_main(void *arg) {
  runner_t *r = arg;
  for (int i = 0; i < r->runs; i++) {
    memset(r->c, 0, r->mn * 4);
    if (tpu_plan_run(r->plan, r->a, NULL, r->c) != TPU_OK ||
        memcmp(r->c, r->want, r->mn * 4) != 0)
      r->bad++;
  }
  return NULL;
}

/* Two threads run two plans on one multi-threaded engine at once: one gets the pool, the other
 * computes alone; both stay correct and the statistics count every call. */
static void test_concurrent_plans(void) {
  size_t m = 64, k = 256, n = 128; /* 2.1M MACs: above the parallel threshold */
  CU_ASSERT((uint64_t)m * k * n >= TPU__PAR_MIN_MACS);
  float *a = xmalloc(m * k * 4), *w = xmalloc(k * n * 4), *want = xmalloc(m * n * 4);
  float *c[2] = {xmalloc(m * n * 4), xmalloc(m * n * 4)};
  fill_floats(a, m * k, -1, 1);
  fill_floats(w, k * n, -1, 1);
  tpu_engine_t *e = make_engine(NULL, 2);
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_FP32, .k = k, .n = n, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_FP32, .src = w};
  tpu_weights_t *pw = NULL;
  tpu_plan_t *p[2] = {NULL, NULL};
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &pw) == TPU_OK);
  for (int i = 0; i < 2; i++)
    CU_ASSERT_FATAL(tpu_plan_create(e, pw, m, TPU_DTYPE_FP32, NULL, &p[i]) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_run(p[0], a, NULL, want) == TPU_OK);
  runner_t r[2];
  pthread_t tid[2];
  for (int i = 0; i < 2; i++) {
    r[i] = (runner_t){.plan = p[i], .a = a, .want = want, .c = c[i], .mn = m * n, .runs = 25};
    CU_ASSERT_FATAL(pthread_create(&tid[i], NULL, runner_main, &r[i]) == 0);
  }
  for (int i = 0; i < 2; i++) pthread_join(tid[i], NULL);
  TPU_ASSERT_SEED(r[0].bad == 0 && r[1].bad == 0);
  tpu_engine_stats_t st;
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT_EQUAL(st.calls, 51);
  CU_ASSERT_EQUAL(st.macs, 51 * (uint64_t)m * k * n);
  tpu_plan_free(p[0]), tpu_plan_free(p[1]);
  tpu_weights_free(pw);
  tpu_engine_free(e);
  free(a), free(w), free(want), free(c[0]), free(c[1]);
}

/* ---- statistics ---- */

static uint64_t cycles_formula(uint64_t r, uint64_t c, uint64_t m, uint64_t k, uint64_t n) {
  return ((k + r - 1) / r) * ((n + c - 1) / c) * (2 * r + m + c - 2);
}

static void test_statistics(void) {
  tpu_engine_config_t cfg = {.threads = 1, .systolic_rows = 4, .systolic_cols = 8};
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(&cfg, &e) == TPU_OK);
  float w[10 * 9] = {0}, a[3 * 10] = {0}, c[3 * 9];
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_FP32, .k = 10, .n = 9, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_FP32, .src = w};
  tpu_weights_t *pw = NULL;
  tpu_plan_t *p = NULL;
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &pw) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_create(e, pw, 3, TPU_DTYPE_FP32, NULL, &p) == TPU_OK);
  tpu_engine_stats_t st;
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT_EQUAL(st.calls, 0); /* packing and planning are not calls */
  CU_ASSERT_EQUAL(tpu_engine_stats_utilization(&st), 0.0);
  for (int i = 0; i < 3; i++) CU_ASSERT(tpu_plan_run(p, a, NULL, c) == TPU_OK);
  CU_ASSERT(tpu_plan_run(p, NULL, NULL, c) == TPU_EINVAL); /* failed runs are not counted */
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  uint64_t cyc = cycles_formula(4, 8, 3, 10, 9); /* 3 k-tiles · 2 n-tiles · (8+3+8-2) = 102 */
  CU_ASSERT_EQUAL(cyc, 102);
  CU_ASSERT_EQUAL(st.calls, 3);
  CU_ASSERT_EQUAL(st.macs, 3 * 3 * 10 * 9);
  CU_ASSERT_EQUAL(st.sim_cycles, 3 * cyc);
  CU_ASSERT_EQUAL(st.sim_macs_slots, 3 * cyc * 4 * 8);
  CU_ASSERT_EQUAL(st.systolic_rows, 4);
  CU_ASSERT_EQUAL(st.systolic_cols, 8);
  CU_ASSERT_DOUBLE_EQUAL(tpu_engine_stats_utilization(&st), 270.0 / (102.0 * 32), 1e-12);
  tpu_plan_free(p);
  tpu_weights_free(pw);
  tpu_engine_free(e);
}

/* ---- errors ---- */

static void test_create_errors(void) {
  tpu_engine_t *e = make_engine(NULL, 1);
  float wf[4 * 3] = {0}, bias[3] = {0};
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_FP32, .k = 4, .n = 3, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_FP32, .src = wf};
  tpu_weights_t *w32 = NULL, *w16 = NULL, *w8 = NULL;
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w32) == TPU_OK);
  d.compute = TPU_DTYPE_BF16;
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w16) == TPU_OK);
  d.compute = TPU_DTYPE_INT8;
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w8) == TPU_OK);
  tpu_plan_t *p = (tpu_plan_t *)&p; /* must be reset to NULL on failure */
  const tpu_dtype_t F = TPU_DTYPE_FP32, B = TPU_DTYPE_BF16, I8 = TPU_DTYPE_INT8,
                    I32 = TPU_DTYPE_INT32;

  CU_ASSERT(tpu_plan_create(e, w32, 1, F, NULL, NULL) == TPU_EINVAL);
  CU_ASSERT(tpu_plan_create(NULL, w32, 1, F, NULL, &p) == TPU_EINVAL);
  CU_ASSERT(p == NULL);
  CU_ASSERT(tpu_plan_create(e, NULL, 1, F, NULL, &p) == TPU_EINVAL);
  CU_ASSERT(tpu_plan_create(e, w32, 0, F, NULL, &p) == TPU_EINVAL);
  /* M past the per-dimension limit, M·K past the per-matrix limit, M near SIZE_MAX. */
  CU_ASSERT(tpu_plan_create(e, w32, TPU__MAX_DIM + 1, F, NULL, &p) == TPU_EOVERFLOW);
  CU_ASSERT(tpu_plan_create(e, w32, SIZE_MAX, F, NULL, &p) == TPU_EOVERFLOW);
  {
    tpu_weights_desc_t big = {.compute = TPU_DTYPE_FP32, .k = 1024, .n = 1,
                              .layout = TPU_LAYOUT_NK, .src_dtype = TPU_DTYPE_FP32};
    float *wb = calloc(1024, sizeof *wb);
    tpu_weights_t *pw = NULL;
    big.src = wb;
    CU_ASSERT_FATAL(tpu_weights_pack(e, &big, &pw) == TPU_OK);
    CU_ASSERT(tpu_plan_create(e, pw, TPU__MAX_DIM, F, NULL, &p) == TPU_EOVERFLOW); /* 2^34 */
    tpu_weights_free(pw);
    free(wb);
  }
  /* a_dtype: FP32 or the compute dtype. */
  CU_ASSERT(tpu_plan_create(e, w32, 1, B, NULL, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w32, 1, I8, NULL, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w16, 1, I8, NULL, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w8, 1, B, NULL, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w8, 1, I32, NULL, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w32, 1, (tpu_dtype_t)42, NULL, &p) == TPU_EDTYPE);
  /* Epilogues. */
  tpu_epilogue_t ep = {.out_dtype = F, .act = (tpu_act_t)TPU_ACT_COUNT};
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, &ep, &p) == TPU_EINVAL);
  ep.act = (tpu_act_t)-1;
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, &ep, &p) == TPU_EINVAL);
  ep.act = TPU_ACT_NONE;
  ep.out_dtype = B;
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, &ep, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w8, 1, F, &ep, &p) == TPU_EDTYPE);
  ep.out_dtype = (tpu_dtype_t)7;
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, &ep, &p) == TPU_EDTYPE);
  ep.out_dtype = I32; /* INT8 compute only, raw */
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, &ep, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w16, 1, F, &ep, &p) == TPU_EDTYPE);
  ep.bias = bias;
  CU_ASSERT(tpu_plan_create(e, w8, 1, F, &ep, &p) == TPU_EINVAL);
  ep.bias = NULL;
  ep.act = TPU_ACT_RELU;
  CU_ASSERT(tpu_plan_create(e, w8, 1, F, &ep, &p) == TPU_EINVAL);
  ep.act = TPU_ACT_NONE;
  ep.out_scale = 1.0f;
  CU_ASSERT(tpu_plan_create(e, w8, 1, F, &ep, &p) == TPU_EINVAL);
  ep.out_dtype = F; /* out_scale set for FP32 output: a caller's mistake */
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, &ep, &p) == TPU_EINVAL);
  ep.out_dtype = I8;
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, &ep, &p) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_create(e, w16, 1, F, &ep, &p) == TPU_EDTYPE);
  static const float bad_scales[] = {0.0f, -1.0f, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < 5; i++) {
    ep.out_scale = bad_scales[i];
    CU_ASSERT(tpu_plan_create(e, w8, 1, F, &ep, &p) == TPU_EINVAL);
  }
  CU_ASSERT(p == NULL);
  ep.out_scale = 0.5f;
  CU_ASSERT(tpu_plan_create(e, w8, 1, F, &ep, &p) == TPU_OK);
  tpu_plan_free(p);

  /* Weights packed by another kernel set (faked: a copy of this engine's set). */
  tpu__kernel_set_t other = *e->ks;
  const tpu__kernel_set_t *mine = w32->ks;
  w32->ks = &other;
  CU_ASSERT(tpu_plan_create(e, w32, 1, F, NULL, &p) == TPU_EINVAL);
  w32->ks = mine;

  tpu_weights_free(w32), tpu_weights_free(w16), tpu_weights_free(w8);
  tpu_engine_free(e);
  tpu_plan_free(NULL);
}

static void test_run_errors(void) {
  tpu_engine_t *e = make_engine(NULL, 1);
  float wf[2 * 2] = {1, 2, 3, 4}, a[2 * 2] = {1, 1, 1, 1}, c[4], as[2] = {1, 1};
  int8_t a8[4] = {1, 2, 3, 4};
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_INT8, .k = 2, .n = 2, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_FP32, .src = wf};
  tpu_weights_t *w = NULL;
  tpu_plan_t *pf = NULL, *pi = NULL, *praw = NULL;
  tpu_epilogue_t raw = {.out_dtype = TPU_DTYPE_INT32};
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 2, TPU_DTYPE_FP32, NULL, &pf) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 2, TPU_DTYPE_INT8, NULL, &pi) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 2, TPU_DTYPE_INT8, &raw, &praw) == TPU_OK);

  CU_ASSERT(tpu_plan_run(NULL, a, NULL, c) == TPU_EINVAL);
  CU_ASSERT(tpu_plan_run(pf, NULL, NULL, c) == TPU_EINVAL);
  CU_ASSERT(tpu_plan_run(pf, a, NULL, NULL) == TPU_EINVAL);
  CU_ASSERT(tpu_plan_run(pf, a, NULL, c) == TPU_OK);
  a[3] = NAN; /* FP32 input quantized per row: non-finite is out of range */
  CU_ASSERT(tpu_plan_run(pf, a, NULL, c) == TPU_ERANGE);
  a[3] = INFINITY;
  CU_ASSERT(tpu_plan_run(pf, a, NULL, c) == TPU_ERANGE);
  /* INT8 input needs finite, positive row scales (unless the output is raw INT32). */
  CU_ASSERT(tpu_plan_run(pi, a8, NULL, c) == TPU_EINVAL);
  CU_ASSERT(tpu_plan_run(pi, a8, as, c) == TPU_OK);
  as[1] = 0.0f;
  CU_ASSERT(tpu_plan_run(pi, a8, as, c) == TPU_ERANGE);
  as[1] = NAN;
  CU_ASSERT(tpu_plan_run(pi, a8, as, c) == TPU_ERANGE);
  as[1] = -1.0f;
  CU_ASSERT(tpu_plan_run(pi, a8, as, c) == TPU_ERANGE);
  CU_ASSERT(tpu_plan_run(praw, a8, NULL, c) == TPU_OK);
  tpu_engine_stats_t st;
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT_EQUAL(st.calls, 3);
  tpu_plan_free(pf), tpu_plan_free(pi), tpu_plan_free(praw);
  tpu_weights_free(w);
  tpu_engine_free(e);
}

TPU_TEST_SUITE(engine_plan,
               {"int8_exact", test_int8_exact},
               {"fp32_random", test_fp32_random},
               {"bf16_random", test_bf16_random},
               {"activations", test_activations},
               {"output_conversions", test_output_conversions},
               {"requantize_saturation", test_requantize_saturation},
               {"bias_copied", test_bias_copied},
               {"threads_bitwise", test_threads_bitwise},
               {"batch_invariant", test_batch_invariant},
               {"concurrent_plans", test_concurrent_plans},
               {"statistics", test_statistics},
               {"create_errors", test_create_errors},
               {"run_errors", test_run_errors})
