/*
 * tree_avx512.c - level-by-level traversal of a padded tree ensemble with AVX-512 gathers (see
 * tpu__tree_perfect_t in tpu_kernels.h).
 *
 * DESIGN
 * The 16 lanes are 16 trees of one row, so a batch of one row is as fast per row as a large
 * one. Per level: gather the 16 nodes' features (bit 31: NaN goes left) and thresholds, gather
 * the row's values at those features, compare (x < t or x <= t, NaN through the default bit),
 * and step each lane to child 2i+1 or 2i+2. The 16 leaf values are then added to the row's
 * sums one tree after another, so every target's sum is taken in tree order, as the exact
 * traversal does; trees beyond a multiple of 16 go through the portable loop.
 * The GEMM strategy's decisions take 16 branch nodes a vector the same way: gather the row's
 * values at the nodes' features, compare, NaN through the default bit, narrow to bytes.
 */
#include <immintrin.h>

#include "tpu_kernels.h"

void tpu__tree_perfect_avx512(const tpu__tree_perfect_t *p, const float *x, size_t width,
                              size_t rows, float *acc, size_t nt) {
  const size_t inner = ((size_t)1 << p->depth) - 1, full = p->ntrees & ~(size_t)15;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
  const __m512i low31 = _mm512_set1_epi32(0x7fffffff);
  float w[16];
  for (size_t r = 0; r < rows; r++) {
    const float *row = x + r * width;
    float *a = acc + r * nt;
    for (size_t t = 0; t < full; t += 16) {
      /* node arrays of trees t..t+15 start at (t + lane) * inner: offsets from feat + t*inner */
      const int32_t *fb = p->feat + t * inner;
      const float *tb = p->thr + t * inner;
      __m512i base = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)inner));
      __m512i idx = _mm512_setzero_si512();
      for (int d = 0; d < p->depth; d++) {
        __m512i at = _mm512_add_epi32(base, idx);
        __m512i fe = _mm512_i32gather_epi32(at, fb, 4);
        __m512 th = _mm512_i32gather_ps(at, tb, 4);
        __m512 v = _mm512_i32gather_ps(_mm512_and_si512(fe, low31), row, 4);
        __mmask16 go = p->leq ? _mm512_cmp_ps_mask(v, th, _CMP_LE_OQ)
                              : _mm512_cmp_ps_mask(v, th, _CMP_LT_OQ);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        __mmask16 dl = _mm512_movepi32_mask(fe); /* bit 31 */
        go = (__mmask16)(go | (nan & dl));
        idx = _mm512_add_epi32(_mm512_add_epi32(idx, idx), two);
        idx = _mm512_mask_sub_epi32(idx, go, idx, one);
      }
      __m512i slot = _mm512_add_epi32(
          _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)(inner + 1))),
          _mm512_sub_epi32(idx, _mm512_set1_epi32((int)inner)));
      _mm512_storeu_ps(w, _mm512_i32gather_ps(slot, p->lval + t * (inner + 1), 4));
      for (int k = 0; k < 16; k++) a[p->target[t + (size_t)k]] += w[k];
    }
    if (full < p->ntrees) {
      tpu__tree_perfect_t rest = *p;
      rest.ntrees = p->ntrees - full;
      rest.feat = p->feat + full * inner;
      rest.thr = p->thr + full * inner;
      rest.lval = p->lval + full * (inner + 1);
      rest.target = p->target + full;
      tpu__tree_perfect_ref(&rest, row, width, 1, a, nt);
    }
  }
}

void tpu__tree_decide_avx512(const int32_t *feat, const float *thr, size_t n, int leq,
                             const float *row, int8_t *out) {
  const __m512i low31 = _mm512_set1_epi32(0x7fffffff), one = _mm512_set1_epi32(1);
  size_t j = 0;
  for (; j < n; j += 16) {
    __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
    __m512i fe = _mm512_maskz_loadu_epi32(m, feat + j);
    __m512 th = _mm512_maskz_loadu_ps(m, thr + j);
    __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m,
                                        _mm512_and_si512(fe, low31), row, 4);
    __mmask16 go = leq ? _mm512_cmp_ps_mask(v, th, _CMP_LE_OQ)
                       : _mm512_cmp_ps_mask(v, th, _CMP_LT_OQ);
    go = (__mmask16)(go | (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_movepi32_mask(fe)));
    _mm_mask_storeu_epi8(out + j, m, _mm512_cvtepi32_epi8(_mm512_maskz_mov_epi32(go, one)));
  }
}
