/*
 * test_weights.c - packing (engine/frame/weights.c): every accepted source dtype and layout,
 * per-channel quantization, accessors, independence from the source buffer, error paths.
 *
 * DESIGN
 * The packed layout belongs to the kernel set, so weights are read back through the public API:
 * a plan with A = I (K×K identity) yields C[p][j] = W[j][p] as the engine sees it (dequantized
 * for INT8, via FP32 output). That checks the transposition of [K][N] sources and the dtype
 * conversions without knowing any kernel's layout.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

/* C = I·Wᵀ: the [K][N] matrix of the weights as the engine multiplies them. */
static void read_back(tpu_engine_t *e, const tpu_weights_t *w, float *out) {
  size_t k = tpu_weights_k(w);
  tpu_dtype_t dt = tpu_weights_compute(w);
  void *eye = calloc(k * k, tpu_dtype_size(dt));
  float *ones = malloc(k * sizeof *ones);
  CU_ASSERT_FATAL(eye && ones);
  for (size_t p = 0; p < k; p++) {
    ones[p] = 1.0f;
    if (dt == TPU_DTYPE_FP32) ((float *)eye)[p * k + p] = 1.0f;
    if (dt == TPU_DTYPE_BF16) ((uint16_t *)eye)[p * k + p] = 0x3f80;
    if (dt == TPU_DTYPE_INT8) ((int8_t *)eye)[p * k + p] = 1;
  }
  tpu_plan_t *p = NULL;
  CU_ASSERT_FATAL(tpu_plan_create(e, w, k, dt, NULL, &p) == TPU_OK);
  CU_ASSERT(tpu_plan_run(p, eye, ones, out) == TPU_OK);
  tpu_plan_free(p);
  free(eye);
  free(ones);
}

static void test_sources_and_layouts(void) {
  enum { K = 19, N = 13 };
  static float w_nk[N * K], src_f[N * K], out[K * N];
  static uint16_t src_h[N * K];
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  for (size_t i = 0; i < N * K; i++) w_nk[i] = tpu_test_rand_float(-4, 4);
  w_nk[5] = 0.0f;
  for (int layout = 0; layout < 2; layout++) {
    for (size_t j = 0; j < N; j++)
      for (size_t p = 0; p < K; p++) {
        size_t at = layout == TPU_LAYOUT_NK ? j * K + p : p * N + j;
        src_f[at] = w_nk[j * K + p];
        src_h[at] = tpu_bf16_from_fp32(w_nk[j * K + p]);
      }
    for (int compute = 0; compute < 3; compute++)
      for (int srcdt = 0; srcdt < 2; srcdt++) {
        tpu_weights_desc_t d = {.compute = (tpu_dtype_t)compute, .k = K, .n = N,
                                .layout = (tpu_layout_t)layout,
                                .src_dtype = srcdt ? TPU_DTYPE_BF16 : TPU_DTYPE_FP32,
                                .src = srcdt ? (const void *)src_h : (const void *)src_f};
        tpu_weights_t *w = NULL;
        CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w) == TPU_OK);
        CU_ASSERT_EQUAL(tpu_weights_k(w), K);
        CU_ASSERT_EQUAL(tpu_weights_n(w), N);
        CU_ASSERT_EQUAL(tpu_weights_compute(w), (tpu_dtype_t)compute);
        const float *scales = tpu_weights_scales(w);
        CU_ASSERT((compute == TPU_DTYPE_INT8) == (scales != NULL));
        read_back(e, w, out);
        size_t bad = 0;
        for (size_t j = 0; j < N; j++) {
          /* What the source value of W[j][p] is after the source dtype. */
          float amax = 0;
          for (size_t p = 0; p < K; p++) {
            float v = srcdt ? tpu_bf16_to_fp32(tpu_bf16_from_fp32(w_nk[j * K + p]))
                            : w_nk[j * K + p];
            amax = fmaxf(amax, fabsf(v));
          }
          if (scales) bad += scales[j] != amax / 127.0f; /* per output channel */
          for (size_t p = 0; p < K; p++) {
            float v = srcdt ? tpu_bf16_to_fp32(tpu_bf16_from_fp32(w_nk[j * K + p]))
                            : w_nk[j * K + p];
            float got = out[p * N + j], want = v;
            if (compute == TPU_DTYPE_BF16) want = tpu_bf16_to_fp32(tpu_bf16_from_fp32(v));
            if (compute == TPU_DTYPE_INT8) {
              bad += !(fabsf(got - v) <= 0.5f * scales[j] * 1.0001f);
              continue;
            }
            bad += got != want;
          }
        }
        if (bad)
          printf("\n  compute %d src %d layout %d: %zu wrong\n", compute, srcdt, layout, bad);
        TPU_ASSERT_SEED(bad == 0);
        tpu_weights_free(w);
      }
  }
  tpu_engine_free(e);
}

/* INT8 source with caller scales: values and scales are copied, the source can go away. */
static void test_int8_source(void) {
  enum { K = 5, N = 3 };
  int8_t *src = malloc(K * N);
  float *sc = malloc(N * sizeof *sc);
  float out[K * N];
  CU_ASSERT_FATAL(src && sc);
  for (int i = 0; i < K * N; i++) src[i] = (int8_t)(i * 17 - 128); /* -128 .. 110 */
  for (int j = 0; j < N; j++) sc[j] = 0.5f * (float)(j + 1);
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_INT8, .k = K, .n = N, .layout = TPU_LAYOUT_KN,
                          .src_dtype = TPU_DTYPE_INT8, .src = src, .src_scales = sc};
  tpu_weights_t *w = NULL;
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w) == TPU_OK);
  int8_t copy[K * N];
  memcpy(copy, src, sizeof copy);
  memset(src, 0, K * N);
  sc[0] = sc[1] = sc[2] = 99.0f;
  free(src);
  free(sc);
  const float *s = tpu_weights_scales(w);
  CU_ASSERT(s && s[0] == 0.5f && s[1] == 1.0f && s[2] == 1.5f);
  read_back(e, w, out); /* [K][N] = KN source · scale */
  for (int p = 0; p < K; p++)
    for (int j = 0; j < N; j++) CU_ASSERT_EQUAL(out[p * N + j], copy[p * N + j] * s[j]);
  tpu_weights_free(w);
  tpu_engine_free(e);
}

static void test_errors(void) {
  tpu_engine_t *e = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  float wf[6] = {1, 2, 3, 4, 5, 6}, sc[3] = {1, 1, 1};
  int8_t w8[6] = {1, 2, 3, 4, 5, 6};
  tpu_weights_desc_t good = {.compute = TPU_DTYPE_FP32, .k = 2, .n = 3,
                             .layout = TPU_LAYOUT_NK, .src_dtype = TPU_DTYPE_FP32, .src = wf};
  tpu_weights_desc_t d;
  tpu_weights_t *w = (tpu_weights_t *)&w;
#define EXPECT(status) CU_ASSERT(tpu_weights_pack(e, &d, &w) == (status))

  CU_ASSERT(tpu_weights_pack(NULL, &good, &w) == TPU_EINVAL);
  CU_ASSERT(w == NULL);
  CU_ASSERT(tpu_weights_pack(e, NULL, &w) == TPU_EINVAL);
  CU_ASSERT(tpu_weights_pack(e, &good, NULL) == TPU_EINVAL);
  d = good, d.compute = TPU_DTYPE_INT32;
  EXPECT(TPU_EDTYPE);
  d = good, d.compute = (tpu_dtype_t)17;
  EXPECT(TPU_EDTYPE);
  d = good, d.src_dtype = TPU_DTYPE_INT32;
  EXPECT(TPU_EDTYPE);
  d = good, d.src_dtype = (tpu_dtype_t)-2;
  EXPECT(TPU_EDTYPE);
  d = good, d.src_dtype = TPU_DTYPE_INT8, d.src = w8, d.src_scales = sc; /* INT8 -> FP32 */
  EXPECT(TPU_EDTYPE);
  d.compute = TPU_DTYPE_BF16;
  EXPECT(TPU_EDTYPE);
  d.compute = TPU_DTYPE_INT8, d.src_scales = NULL; /* INT8 source needs scales */
  EXPECT(TPU_EINVAL);
  static const float bad_scales[] = {0.0f, -0.5f, NAN, INFINITY};
  for (int i = 0; i < 4; i++) {
    float s2[3] = {1, bad_scales[i], 1};
    d.src_scales = s2;
    EXPECT(TPU_EINVAL);
  }
  d = good, d.src_scales = sc; /* scales with a float source */
  EXPECT(TPU_EINVAL);
  d = good, d.layout = (tpu_layout_t)2;
  EXPECT(TPU_EINVAL);
  d = good, d.src = NULL;
  EXPECT(TPU_EINVAL);
  d = good, d.k = 0;
  EXPECT(TPU_EINVAL);
  d = good, d.n = 0;
  EXPECT(TPU_EINVAL);
  /* Limits are checked before the source is read. */
  d = good, d.k = TPU__MAX_DIM + 1;
  EXPECT(TPU_EOVERFLOW);
  d = good, d.n = SIZE_MAX;
  EXPECT(TPU_EOVERFLOW);
  d = good, d.k = (size_t)1 << 20, d.n = (size_t)1 << 20;
  EXPECT(TPU_EOVERFLOW);
  d = good, d.compute = TPU_DTYPE_INT8, d.k = TPU__MAX_K_INT8 + 1, d.n = 1;
  EXPECT(TPU_EOVERFLOW);
  /* Non-finite float weights cannot be quantized... */
  wf[4] = NAN;
  d = good, d.compute = TPU_DTYPE_INT8;
  EXPECT(TPU_ERANGE);
  wf[4] = -INFINITY;
  EXPECT(TPU_ERANGE);
  CU_ASSERT(w == NULL);
  /* ...but FP32 and BF16 compute carry them like any IEEE value. */
  d.compute = TPU_DTYPE_FP32;
  EXPECT(TPU_OK);
  tpu_weights_free(w);
  d.compute = TPU_DTYPE_BF16;
  EXPECT(TPU_OK);
  tpu_weights_free(w);
#undef EXPECT
  tpu_weights_free(NULL);
  CU_ASSERT_EQUAL(tpu_weights_k(NULL), 0);
  CU_ASSERT_EQUAL(tpu_weights_n(NULL), 0);
  CU_ASSERT_EQUAL(tpu_weights_compute(NULL), TPU_DTYPE_INT32);
  CU_ASSERT(tpu_weights_scales(NULL) == NULL);
  tpu_engine_free(e);
}

/* Sizing before packing (model loads refuse what does not fit): what is held covers the packed
 * payload, the conversion buffers follow the dtypes, bad arguments are refused; plans likewise. */
static void test_memory(void) {
  tpu_engine_t *e;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  size_t held, tr, k = 300, n = 70;
  CU_ASSERT(tpu_weights_memory(e, TPU_DTYPE_FP32, TPU_DTYPE_FP32, k, n, &held, &tr) == TPU_OK);
  CU_ASSERT(held >= k * n * 4);
  CU_ASSERT_EQUAL(tr, 0);
  CU_ASSERT(tpu_weights_memory(e, TPU_DTYPE_BF16, TPU_DTYPE_FP32, k, n, &held, &tr) == TPU_OK);
  CU_ASSERT(held >= k * n * 2);
  CU_ASSERT_EQUAL(tr, k * n * 2);
  CU_ASSERT(tpu_weights_memory(e, TPU_DTYPE_INT8, TPU_DTYPE_FP32, k, n, &held, &tr) == TPU_OK);
  CU_ASSERT(held >= k * n + n * 4); /* and the scales */
  CU_ASSERT_EQUAL(tr, k * n * 5);
  CU_ASSERT(tpu_weights_memory(e, TPU_DTYPE_INT8, TPU_DTYPE_INT8, k, n, &held, &tr) == TPU_OK);
  CU_ASSERT_EQUAL(tr, 0);
  CU_ASSERT(tpu_weights_memory(e, TPU_DTYPE_INT32, TPU_DTYPE_FP32, k, n, &held, &tr) == TPU_EDTYPE);
  CU_ASSERT(tpu_weights_memory(e, TPU_DTYPE_FP32, TPU_DTYPE_FP32, 0, n, &held, &tr) == TPU_EINVAL);
  CU_ASSERT(tpu_weights_memory(NULL, TPU_DTYPE_FP32, TPU_DTYPE_FP32, k, n, &held, &tr) ==
            TPU_EINVAL);
  CU_ASSERT(tpu_weights_memory(e, TPU_DTYPE_FP32, TPU_DTYPE_FP32, (size_t)1 << 40,
                               (size_t)1 << 40, &held, &tr) == TPU_EOVERFLOW);
  size_t p1, p64, pb;
  CU_ASSERT(tpu_plan_memory(e, TPU_DTYPE_INT8, k, n, 1, TPU_DTYPE_FP32, NULL, &p1) == TPU_OK);
  CU_ASSERT(tpu_plan_memory(e, TPU_DTYPE_INT8, k, n, 64, TPU_DTYPE_FP32, NULL, &p64) == TPU_OK);
  CU_ASSERT(p64 >= p1 + 63 * k); /* FP32 rows quantized into the plan's own [m][k] */
  static const float bias;
  tpu_epilogue_t ep = {.bias = &bias, .act = TPU_ACT_NONE, .out_dtype = TPU_DTYPE_FP32};
  CU_ASSERT(tpu_plan_memory(e, TPU_DTYPE_INT8, k, n, 64, TPU_DTYPE_FP32, &ep, &pb) == TPU_OK);
  CU_ASSERT(pb >= p64 + n * 4);
  CU_ASSERT(tpu_plan_memory(e, TPU_DTYPE_INT32, k, n, 1, TPU_DTYPE_FP32, NULL, &p1) == TPU_EDTYPE);
  CU_ASSERT(tpu_plan_memory(e, TPU_DTYPE_FP32, k, n, 0, TPU_DTYPE_FP32, NULL, &p1) != TPU_OK);
  CU_ASSERT(tpu_plan_memory(NULL, TPU_DTYPE_FP32, k, n, 1, TPU_DTYPE_FP32, NULL, &p1) == TPU_EINVAL);
  tpu_engine_free(e);
}

TPU_TEST_SUITE(engine_weights,
               {"memory", test_memory},
               {"sources_and_layouts", test_sources_and_layouts},
               {"int8_source", test_int8_source},
               {"errors", test_errors})
