/*
 * vec_avx512.h - the vector interface of engine/kernels/vmath.h in AVX-512 (16 binary32 lanes),
 * and the vector math itself (included at the end).
 *
 * DESIGN
 * Needs AVX-512 F and DQ (the avx512 and amx sets require both). Masks are __mmask16; masked
 * loads and stores never touch lanes outside the mask, so tails need no copies.
 */
#ifndef TPU_VEC_AVX512_H
#define TPU_VEC_AVX512_H

#include <immintrin.h>

#include "tpu_kernels.h"

typedef __m512 vf;
typedef __m512d vd;
typedef __mmask16 vmask;
#define VM_W 16

#define VM_INLINE static inline __attribute__((always_inline))

VM_INLINE vf vm_set1(float x) { return _mm512_set1_ps(x); }
VM_INLINE vf vm_add(vf a, vf b) { return _mm512_add_ps(a, b); }
VM_INLINE vf vm_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
VM_INLINE vf vm_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
VM_INLINE vf vm_div(vf a, vf b) { return _mm512_div_ps(a, b); }
VM_INLINE vf vm_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
VM_INLINE vf vm_fnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
VM_INLINE vf vm_min(vf a, vf b) { return _mm512_min_ps(a, b); }
VM_INLINE vf vm_max(vf a, vf b) { return _mm512_max_ps(a, b); }
VM_INLINE vf vm_abs(vf a) { return _mm512_abs_ps(a); }
VM_INLINE vf vm_copysign(vf mag, vf sign) {
  /* 0xca: a ? b : c bit by bit: mag where the constant (0x7fffffff) has a 1, sign elsewhere */
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_set1_epi32(0x7fffffff),
                                                       _mm512_castps_si512(mag),
                                                       _mm512_castps_si512(sign), 0xca));
}
VM_INLINE vmask vm_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
VM_INLINE vmask vm_le(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
VM_INLINE vmask vm_isnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
VM_INLINE vf vm_sel(vmask m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }
VM_INLINE vf vm_round(vf a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VM_INLINE vf vm_ldexp(vf p, vf n) { return _mm512_scalef_ps(p, n); }
VM_INLINE vf vm_loadu(const float *p) { return _mm512_loadu_ps(p); }
VM_INLINE void vm_storeu(float *p, vf v) { _mm512_storeu_ps(p, v); }
VM_INLINE vmask vm_first(size_t cnt) {
  return cnt >= 16 ? (vmask)0xffff : (vmask)((1u << cnt) - 1u);
}
VM_INLINE vmask vm_maskn(size_t cnt) { return vm_first(cnt); }
VM_INLINE vf vm_loadn(const float *p, size_t cnt, float fill) {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), vm_first(cnt), p);
}
VM_INLINE void vm_storen(float *p, vf v, size_t cnt) { _mm512_mask_storeu_ps(p, vm_first(cnt), v); }
VM_INLINE __m512i vm_lanes_by(size_t stride) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32((int)stride));
}
VM_INLINE vf vm_gather(const float *p, size_t stride, size_t cnt) {
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), vm_first(cnt), vm_lanes_by(stride), p, 4);
}
VM_INLINE void vm_scatter(float *p, size_t stride, vf v, size_t cnt) {
  _mm512_mask_i32scatter_ps(p, vm_first(cnt), vm_lanes_by(stride), v, 4);
}
VM_INLINE float vm_hmax(vf a) { return _mm512_reduce_max_ps(a); }
/* The first cnt lanes of v (integer-valued, within int8) as int8. */
VM_INLINE void vm_store_i8n(int8_t *p, vf v, size_t cnt) {
  _mm512_mask_cvtepi32_storeu_epi8(p, vm_first(cnt), _mm512_cvtps_epi32(v));
}

VM_INLINE vd vd_zero(void) { return _mm512_setzero_pd(); }
VM_INLINE vd vd_set1(double x) { return _mm512_set1_pd(x); }
VM_INLINE vd vd_add(vd a, vd b) { return _mm512_add_pd(a, b); }
VM_INLINE vd vd_sub(vd a, vd b) { return _mm512_sub_pd(a, b); }
VM_INLINE vd vd_mul(vd a, vd b) { return _mm512_mul_pd(a, b); }
VM_INLINE vd vd_div(vd a, vd b) { return _mm512_div_pd(a, b); }
VM_INLINE vd vd_loadu(const double *p) { return _mm512_loadu_pd(p); }
VM_INLINE void vd_storeu(double *p, vd v) { _mm512_storeu_pd(p, v); }
VM_INLINE vd vd_lo(vf a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
VM_INLINE vd vd_hi(vf a) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
VM_INLINE vf vd_narrow(vd lo, vd hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}
VM_INLINE double vd_hsum(vd a) {
  __m256d s = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));
  __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

#include "../vmath.h"

#endif /* TPU_VEC_AVX512_H */
