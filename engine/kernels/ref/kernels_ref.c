/*
 * kernels_ref.c - the portable reference kernel set ("ref").
 *
 * DESIGN
 * The executable form of the contract in tpu_kernels.h, written for clarity, not speed: packed
 * weights are plain [N][K] rows of the compute dtype, and the micro-kernels compute one element
 * of C at a time (tile 1x1), accumulating p = 0..k-1 in order, then apply the epilogue with the
 * frame's scalar helpers. Every other set is tested against this one. It needs no CPU feature
 * and no workspace, and it is what an engine falls back to.
 *
 * Layout: A row i is a + i*k; packed weight row j is w + j*k; both contiguous in p, so the inner
 * loop streams two rows.
 */
#include "tpu_kernels.h"

/* ---- packing: [N][K] of the compute dtype ---- */

static size_t packed_size_nk(size_t k, size_t n, size_t elem) {
  size_t bytes;
  if (__builtin_mul_overflow(k, n, &bytes) || __builtin_mul_overflow(bytes, elem, &bytes))
    return 0;
  return bytes;
}

static size_t tpu_packed_size_f32_ref(size_t k, size_t n) { return packed_size_nk(k, n, 4); }
static size_t tpu_packed_size_bf16_ref(size_t k, size_t n) { return packed_size_nk(k, n, 2); }
static size_t tpu_packed_size_i8_ref(size_t k, size_t n) { return packed_size_nk(k, n, 1); }

#define TPU__DEFINE_PACK_NK(name, type)                                                   \
  static void name(size_t k, size_t n, const void *src, size_t sn, size_t sk, void *dst) { \
    const type *s = src;                                                                  \
    type *d = dst;                                                                        \
    for (size_t j = 0; j < n; j++)                                                        \
      for (size_t p = 0; p < k; p++) d[j * k + p] = s[j * sn + p * sk];                   \
  }
TPU__DEFINE_PACK_NK(tpu_pack_f32_ref_nk, float)
TPU__DEFINE_PACK_NK(tpu_pack_bf16_ref_nk, uint16_t)
TPU__DEFINE_PACK_NK(tpu_pack_i8_ref_nk, int8_t)
#undef TPU__DEFINE_PACK_NK

/* ---- epilogue: activation and store of one element (everything but INT32 output) ---- */

static inline void store(const tpu__gemm_args_t *g, size_t i, size_t j, float y) {
  if (g->act != TPU_ACT_NONE) y = tpu__act_fp32(g->act, y);
  size_t at = i * g->ldc + j;
  switch (g->out_dtype) {
  case TPU_DTYPE_FP32:
    ((float *)g->c)[at] = y;
    break;
  case TPU_DTYPE_BF16:
    ((uint16_t *)g->c)[at] = tpu__bf16_rne(y);
    break;
  case TPU_DTYPE_INT8:
    ((int8_t *)g->c)[at] = tpu__requantize(y, g->out_scale);
    break;
  case TPU_DTYPE_INT32: /* raw accumulators are stored by the INT8 kernel itself */
    break;
  }
}

/* ---- micro-kernels ---- */

static void tpu_gemm_f32_ref_1x1(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                 size_t n1, void *ws) {
  const float *a = g->a, *w = g->w;
  size_t k = g->k;
  for (size_t i = m0; i < m1; i++)
    for (size_t j = n0; j < n1; j++) {
      const float *ar = a + i * k, *wr = w + j * k;
      float acc = 0.0f;
      for (size_t p = 0; p < k; p++) acc += ar[p] * wr[p];
      store(g, i, j, g->bias ? acc + g->bias[j] : acc);
    }
}

static void tpu_gemm_bf16_ref_1x1(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                  size_t n1, void *ws) {
  const uint16_t *a = g->a, *w = g->w;
  size_t k = g->k;
  for (size_t i = m0; i < m1; i++)
    for (size_t j = n0; j < n1; j++) {
      const uint16_t *ar = a + i * k, *wr = w + j * k;
      float acc = 0.0f;
      /* bf16 × bf16 has at most 16 significant bits: the product is exact in binary32. */
      for (size_t p = 0; p < k; p++) acc += tpu__bf16_widen(ar[p]) * tpu__bf16_widen(wr[p]);
      store(g, i, j, g->bias ? acc + g->bias[j] : acc);
    }
}

static void tpu_gemm_i8_ref_1x1(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                size_t n1, void *ws) {
  const int8_t *a = g->a, *w = g->w;
  size_t k = g->k;
  for (size_t i = m0; i < m1; i++)
    for (size_t j = n0; j < n1; j++) {
      const int8_t *ar = a + i * k, *wr = w + j * k;
      int32_t acc = 0; /* exact: the frame bounds k (TPU__MAX_K_INT8) */
      for (size_t p = 0; p < k; p++) acc += (int32_t)ar[p] * (int32_t)wr[p];
      if (g->out_dtype == TPU_DTYPE_INT32) {
        ((int32_t *)g->c)[i * g->ldc + j] = acc;
        continue;
      }
      float y = (float)acc * g->a_scales[i] * g->w_scales[j];
      store(g, i, j, g->bias ? y + g->bias[j] : y);
    }
}

const tpu__kernel_set_t tpu__kernels_ref = {
    .name = "ref",
    .cpu = 0,
    .dt =
        {
            [TPU_DTYPE_FP32] = {.name = "tpu_gemm_f32_ref_1x1",
                                .packed_size = tpu_packed_size_f32_ref,
                                .pack = tpu_pack_f32_ref_nk,
                                .ws_size = NULL,
                                .gemm = tpu_gemm_f32_ref_1x1,
                                .mr = 1,
                                .nr = 1},
            [TPU_DTYPE_BF16] = {.name = "tpu_gemm_bf16_ref_1x1",
                                .packed_size = tpu_packed_size_bf16_ref,
                                .pack = tpu_pack_bf16_ref_nk,
                                .ws_size = NULL,
                                .gemm = tpu_gemm_bf16_ref_1x1,
                                .mr = 1,
                                .nr = 1},
            [TPU_DTYPE_INT8] = {.name = "tpu_gemm_i8_ref_1x1",
                                .packed_size = tpu_packed_size_i8_ref,
                                .pack = tpu_pack_i8_ref_nk,
                                .ws_size = NULL,
                                .gemm = tpu_gemm_i8_ref_1x1,
                                .mr = 1,
                                .nr = 1},
        },
    .vec = &tpu__vec_ref,
};
