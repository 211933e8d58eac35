/*
 * vec_avx2.h - the vector interface of engine/kernels/vmath.h in AVX2 + FMA (8 binary32 lanes),
 * and the vector math itself (included at the end).
 *
 * DESIGN
 * Masks are all-ones lanes in a __m256. vm_ldexp multiplies by 2^n1 and then 2^n2 (n1 + n2 = n,
 * each a normal power of two): the first product is exact for the p it is given, so the result
 * is rounded once, the same bits as AVX-512's VSCALEFPS. Tails use VMASKMOVPS, which does not
 * touch memory in masked-off lanes.
 */
#ifndef TPU_VEC_AVX2_H
#define TPU_VEC_AVX2_H

#include <immintrin.h>

#include "tpu_kernels.h"

typedef __m256 vf;
typedef __m256d vd;
typedef __m256 vmask;
#define VM_W 8

#define VM_INLINE static inline __attribute__((always_inline))

VM_INLINE vf vm_set1(float x) { return _mm256_set1_ps(x); }
VM_INLINE vf vm_add(vf a, vf b) { return _mm256_add_ps(a, b); }
VM_INLINE vf vm_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
VM_INLINE vf vm_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
VM_INLINE vf vm_div(vf a, vf b) { return _mm256_div_ps(a, b); }
VM_INLINE vf vm_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
VM_INLINE vf vm_fnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
VM_INLINE vf vm_min(vf a, vf b) { return _mm256_min_ps(a, b); }
VM_INLINE vf vm_max(vf a, vf b) { return _mm256_max_ps(a, b); }
VM_INLINE vf vm_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
VM_INLINE vf vm_copysign(vf mag, vf sign) {
  const vf s = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign));
}
VM_INLINE vmask vm_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
VM_INLINE vmask vm_le(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
VM_INLINE vmask vm_isnan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
VM_INLINE vf vm_sel(vmask m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
VM_INLINE vf vm_round(vf a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VM_INLINE vf vm_ldexp(vf p, vf n) {
  __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
  __m256i n2 = _mm256_sub_epi32(ni, n1), bias = _mm256_set1_epi32(127);
  vf s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  vf s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
VM_INLINE vf vm_loadu(const float *p) { return _mm256_loadu_ps(p); }
VM_INLINE void vm_storeu(float *p, vf v) { _mm256_storeu_ps(p, v); }
VM_INLINE __m256i vm_first(size_t cnt) {
  int c = cnt >= 8 ? 8 : (int)cnt;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
VM_INLINE vmask vm_maskn(size_t cnt) { return _mm256_castsi256_ps(vm_first(cnt)); }
VM_INLINE vf vm_loadn(const float *p, size_t cnt, float fill) {
  __m256i m = vm_first(cnt);
  return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
VM_INLINE void vm_storen(float *p, vf v, size_t cnt) { _mm256_maskstore_ps(p, vm_first(cnt), v); }
VM_INLINE vf vm_gather(const float *p, size_t stride, size_t cnt) {
  __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                   _mm256_set1_epi32((int)stride));
  return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, idx, vm_maskn(cnt), 4);
}
VM_INLINE void vm_scatter(float *p, size_t stride, vf v, size_t cnt) { /* AVX2 has none */
  float t[8];
  _mm256_storeu_ps(t, v);
  for (size_t i = 0; i < cnt && i < 8; i++) p[i * stride] = t[i];
}
VM_INLINE float vm_hmax(vf a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
/* The first cnt lanes of v (integer-valued, within int8) as int8. */
VM_INLINE void vm_store_i8n(int8_t *p, vf v, size_t cnt) {
  __m128i lo = _mm256_castsi256_si128(_mm256_cvtps_epi32(v));
  __m128i hi = _mm256_extracti128_si256(_mm256_cvtps_epi32(v), 1);
  __m128i b = _mm_packs_epi16(_mm_packs_epi32(lo, hi), _mm_setzero_si128());
  if (cnt >= 8) {
    _mm_storel_epi64((__m128i *)(void *)p, b);
  } else {
    int8_t t[16];
    _mm_storeu_si128((__m128i *)(void *)t, b);
    memcpy(p, t, cnt);
  }
}

VM_INLINE vd vd_zero(void) { return _mm256_setzero_pd(); }
VM_INLINE vd vd_set1(double x) { return _mm256_set1_pd(x); }
VM_INLINE vd vd_add(vd a, vd b) { return _mm256_add_pd(a, b); }
VM_INLINE vd vd_sub(vd a, vd b) { return _mm256_sub_pd(a, b); }
VM_INLINE vd vd_mul(vd a, vd b) { return _mm256_mul_pd(a, b); }
VM_INLINE vd vd_div(vd a, vd b) { return _mm256_div_pd(a, b); }
VM_INLINE vd vd_loadu(const double *p) { return _mm256_loadu_pd(p); }
VM_INLINE void vd_storeu(double *p, vd v) { _mm256_storeu_pd(p, v); }
VM_INLINE vd vd_lo(vf a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
VM_INLINE vd vd_hi(vf a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }
VM_INLINE vf vd_narrow(vd lo, vd hi) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}
VM_INLINE double vd_hsum(vd a) {
  __m128d t = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

#include "../vmath.h"

#endif /* TPU_VEC_AVX2_H */
