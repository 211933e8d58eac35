/*
 * epilogue_avx512.h - the fused epilogue of tpu_kernels.h for 16 columns of one row, in AVX-512.
 *
 * DESIGN
 * Shared by the avx512 and amx kernel sets (both are compiled with AVX-512 F/BW/DQ/VL). Every
 * step is an elementary IEEE operation written as an explicit intrinsic (no a*b + c that GCC
 * could contract into an FMA), so the results are bit-identical to the reference's scalar
 * helpers: bias add, relu as "y < 0 ? 0 : y" (NaN and -0 pass unchanged), BF16 round to nearest
 * even in integer arithmetic (VCVTNEPS2BF16 would flush denormals), INT8 requantization as a true
 * division, RNE rounding and a clamp. gelu, tanh and sigmoid are the vector math of
 * engine/kernels/vmath.h (within the few ulp of tpu__act_fp32 documented there, and
 * bit-identical to the set's map(), so a fused activation equals the graph op).
 *
 * Only columns whose bit is set in `mk` are read (bias) or written (C): the caller passes the
 * mask of columns < n1, so C outside the block is never touched.
 */
#ifndef TPU_EPILOGUE_AVX512_H
#define TPU_EPILOGUE_AVX512_H

#include <immintrin.h>

#include "vec_avx512.h"

/* Column mask for `cols` valid columns of 16 (cols may exceed 16). */
static inline __mmask16 tpu__mask16(size_t cols) {
  return cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1u);
}

/* y (before bias) of row i, columns j..j+15 (those in mk): bias, activation, store. */
static inline void tpu__ep_store16_avx512(const tpu__gemm_args_t *g, size_t i, size_t j, __m512 y,
                                          __mmask16 mk) {
  const __m512 zero = _mm512_setzero_ps();
  if (g->bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mk, g->bias + j));
  switch (g->act) {
  case TPU_ACT_NONE:
    break;
  case TPU_ACT_RELU:
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, zero, _CMP_LT_OQ), zero);
    break;
  default:
    y = tpu__v_act(g->act, y);
    break;
  }
  size_t at = i * g->ldc + j;
  switch (g->out_dtype) {
  case TPU_DTYPE_FP32:
    _mm512_mask_storeu_ps((float *)g->c + at, mk, y);
    break;
  case TPU_DTYPE_BF16: {
    /* tpu__bf16_rne: u + 0x7fff + ((u >> 16) & 1), high half; NaN: (u >> 16) | 0x40. */
    __m512i u = _mm512_castps_si512(y), hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
    r = _mm512_srli_epi32(_mm512_add_epi32(r, _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm512_mask_cvtepi32_storeu_epi16((uint16_t *)g->c + at, mk, r);
    break;
  }
  case TPU_DTYPE_INT8: {
    /* tpu__requantize: sat_i8(y / out_scale); clamping after RNE equals clamping before, as
     * the bounds are integers. NaN gives 0. */
    __m512 t = _mm512_div_ps(y, _mm512_set1_ps(g->out_scale));
    __mmask16 nan = _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q);
    __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    r = _mm512_mask_mov_ps(r, nan, zero);
    _mm512_mask_cvtepi32_storeu_epi8((int8_t *)g->c + at, mk, _mm512_cvtps_epi32(r));
    break;
  }
  case TPU_DTYPE_INT32: /* stored by the INT8 kernels themselves */
    break;
  }
}

/* INT8 compute: acc (exact int32) of row i, columns j.. -> the contract's epilogue, or the raw
 * accumulators for INT32 output. */
static inline void tpu__ep_store16_i32_avx512(const tpu__gemm_args_t *g, size_t i, size_t j,
                                              __m512i acc, __mmask16 mk) {
  if (g->out_dtype == TPU_DTYPE_INT32) {
    _mm512_mask_storeu_epi32((int32_t *)g->c + i * g->ldc + j, mk, acc);
    return;
  }
  /* (float)acc * a_scales[i] * w_scales[j], left to right, each product rounded. */
  __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(g->a_scales[i]));
  y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(mk, g->w_scales + j));
  tpu__ep_store16_avx512(g, i, j, y, mk);
}

#endif /* TPU_EPILOGUE_AVX512_H */
