/*
 * kernels_avx2.c - the AVX2 kernel set ("avx2"): FP32 (FMA) and INT8 (VPMADDWD on int16), 6x16
 * register-blocked micro-kernels with the epilogue fused into the write-out. BF16 is inherited
 * from the set below (ref): AVX2 has no bf16 arithmetic worth a kernel.
 *
 * DESIGN
 * The fast path for x86-64 CPUs without AVX-512. Weight-stationary: pack() lays the weights out
 * once in panels of NR = 16 output channels; the micro-kernel keeps a 6 x 16 block of C in 12
 * ymm accumulators (2 vectors of 8 channels per row). Edge blocks use compile-time
 * specializations with fewer rows / vectors and masked loads and stores.
 *
 * Packed layouts (panel P holds channels 16P..16P+15; channels >= n are zero):
 *   FP32  panel = k steps of 16 floats: [p][c] = w[16P + c][p].
 *   INT8  panel = ceil(k/2) pair steps of 16 dwords: dword c of step q holds the int16 pair
 *         (w[16P+c][2q], w[16P+c][2q+1]) (0 past k), sign-extended at pack time.
 * INT8 uses VPMADDWD (int16 x int16, pairs summed into int32) rather than VPMADDUBSW, whose int16
 * pair sums saturate (255·127·2 > 32767): with int8 operands widened to int16 every pair sum is at
 * most 2·128·128 = 32768, exact in int32, so the accumulators are the reference's exact int32
 * (the frame bounds k). The widened A of a 6-row block goes into the workspace once per block.
 *
 * Epilogue: bias is added with an explicit vector add (no FMA contraction); relu is exact;
 * gelu, tanh and sigmoid are the vector math of engine/kernels/vmath.h (within its documented
 * ulp of the reference, the same bits as the avx512 set's); FP32 output is stored with masked
 * vector stores, BF16 and INT8 output spills 8 lanes and finishes them with the reference's
 * scalar helpers (exact).
 */
#include <immintrin.h>
#include <string.h>

#include "vec_avx2.h"

#define MR 6
#define NR 16
#define NV 2

#define ALWAYS_INLINE inline __attribute__((always_inline))

static size_t npanels(size_t n) { return (n + NR - 1) / NR; }

static size_t panel_bytes(size_t n, size_t steps, size_t step_bytes) {
  size_t b;
  if (__builtin_mul_overflow(npanels(n), steps, &b) || __builtin_mul_overflow(b, step_bytes, &b))
    return 0;
  return b;
}

/* Lane mask (all ones in lanes < cols) for maskload/maskstore. */
static ALWAYS_INLINE __m256i lane_mask(size_t cols) {
  int c = cols >= 8 ? 8 : (int)cols;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* y (before bias) of row i, columns j..j+cols-1 (cols <= 8): bias, activation, store. */
static void store8(const tpu__gemm_args_t *g, size_t i, size_t j, __m256 y, size_t cols) {
  __m256i mk = lane_mask(cols);
  if (g->bias) y = _mm256_add_ps(y, _mm256_maskload_ps(g->bias + j, mk));
  size_t at = i * g->ldc + j;
  if (g->out_dtype == TPU_DTYPE_FP32 && g->act == TPU_ACT_NONE) {
    _mm256_maskstore_ps((float *)g->c + at, mk, y);
    return;
  }
  if (g->out_dtype == TPU_DTYPE_FP32 && g->act == TPU_ACT_RELU) {
    __m256 neg = _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_LT_OQ); /* y < 0 ? 0 : y */
    _mm256_maskstore_ps((float *)g->c + at, mk, _mm256_andnot_ps(neg, y));
    return;
  }
  y = tpu__v_act(g->act, y); /* engine/kernels/vmath.h: the same bits as this set's map() */
  if (g->out_dtype == TPU_DTYPE_FP32) {
    _mm256_maskstore_ps((float *)g->c + at, mk, y);
    return;
  }
  float t[8];
  _mm256_storeu_ps(t, y);
  for (size_t l = 0; l < cols && l < 8; l++) {
    float v = t[l];
    switch (g->out_dtype) {
    case TPU_DTYPE_FP32: ((float *)g->c)[at + l] = v; break;
    case TPU_DTYPE_BF16: ((uint16_t *)g->c)[at + l] = tpu__bf16_rne(v); break;
    case TPU_DTYPE_INT8: ((int8_t *)g->c)[at + l] = tpu__requantize(v, g->out_scale); break;
    case TPU_DTYPE_INT32: break;
    }
  }
}

#define TPU__DISPATCH(fn, mr, nv, ...)                                                       \
  switch ((mr) * 4 + (nv)) {                                                                 \
  case 1 * 4 + 1: fn(1, 1, __VA_ARGS__); break;                                              \
  case 1 * 4 + 2: fn(1, 2, __VA_ARGS__); break;                                              \
  case 2 * 4 + 1: fn(2, 1, __VA_ARGS__); break;                                              \
  case 2 * 4 + 2: fn(2, 2, __VA_ARGS__); break;                                              \
  case 3 * 4 + 1: fn(3, 1, __VA_ARGS__); break;                                              \
  case 3 * 4 + 2: fn(3, 2, __VA_ARGS__); break;                                              \
  case 4 * 4 + 1: fn(4, 1, __VA_ARGS__); break;                                              \
  case 4 * 4 + 2: fn(4, 2, __VA_ARGS__); break;                                              \
  case 5 * 4 + 1: fn(5, 1, __VA_ARGS__); break;                                              \
  case 5 * 4 + 2: fn(5, 2, __VA_ARGS__); break;                                              \
  case 6 * 4 + 1: fn(6, 1, __VA_ARGS__); break;                                              \
  case 6 * 4 + 2: fn(6, 2, __VA_ARGS__); break;                                              \
  default: break; /* unreachable: 1 <= mr <= MR, 1 <= nv <= NV */                            \
  }

/* Write-outs of one register block, out of line so that the micro-kernels keep their
 * accumulators in registers (inlined, the epilogue made GCC spill them). */
static __attribute__((noinline)) void write_f32(const tpu__gemm_args_t *g, size_t i0, size_t j0,
                                                size_t jn, size_t mr, size_t nv,
                                                const __m256 out[MR][NV]) {
  for (size_t r = 0; r < mr; r++)
    for (size_t v = 0; v < nv; v++) store8(g, i0 + r, j0 + 8 * v, out[r][v], jn - 8 * v);
}

static __attribute__((noinline)) void write_i32(const tpu__gemm_args_t *g, size_t i0, size_t j0,
                                                size_t jn, size_t mr, size_t nv,
                                                const __m256i out[MR][NV]) {
  for (size_t r = 0; r < mr; r++)
    for (size_t v = 0; v < nv; v++) {
      size_t i = i0 + r, j = j0 + 8 * v, cols = jn - 8 * v;
      __m256i mk = lane_mask(cols);
      if (g->out_dtype == TPU_DTYPE_INT32) {
        _mm256_maskstore_epi32((int *)g->c + i * g->ldc + j, mk, out[r][v]);
        continue;
      }
      /* (float)acc * a_scales[i] * w_scales[j], left to right, each product rounded. */
      __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(out[r][v]), _mm256_set1_ps(g->a_scales[i]));
      y = _mm256_mul_ps(y, _mm256_maskload_ps(g->w_scales + j, mk));
      store8(g, i, j, y, cols);
    }
}

/* ================================ FP32 ================================ */

static size_t tpu_packed_size_f32_avx2(size_t k, size_t n) {
  return panel_bytes(n, k, NR * sizeof(float));
}

static void tpu_pack_f32_avx2(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                              void *dst) {
  const float *s = src;
  float *d = dst;
  for (size_t pn = 0; pn < npanels(n); pn++)
    for (size_t p = 0; p < k; p++, d += NR)
      for (size_t c = 0; c < NR; c++) {
        size_t j = pn * NR + c;
        d[c] = j < n ? s[j * sn + p * sk] : 0.0f;
      }
}

static ALWAYS_INLINE void ukr_f32(const int mr, const int nv, const tpu__gemm_args_t *g,
                                  size_t i0, size_t j0, size_t jn, const float *wp) {
  size_t k = g->k;
  const float *a = (const float *)g->a + i0 * k;
  __m256 acc[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
  for (size_t p = 0; p < k; p++, wp += NR) {
    __m256 b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) b[v] = _mm256_load_ps(wp + 8 * v);
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
      __m256 av = _mm256_broadcast_ss(a + r * k + p);
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) acc[r][v] = _mm256_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  __m256 out[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
  write_f32(g, i0, j0, jn, mr, nv, out);
}

#define UKR_F32(mr, nv, ...) ukr_f32(mr, nv, __VA_ARGS__)

static void tpu_gemm_f32_avx2_6x16(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                   size_t n1, void *ws) {
  (void)ws;
  size_t k = g->k, panel = k * NR;
  const float *w = g->w;
  for (size_t i = m0; i < m1; i += MR) {
    size_t mr = m1 - i < MR ? m1 - i : MR;
    for (size_t j = n0; j < n1; j += NR) {
      size_t jn = n1 - j < NR ? n1 - j : NR, nv = (jn + 7) / 8;
      TPU__DISPATCH(UKR_F32, mr, nv, g, i, j, jn, w + j / NR * panel)
    }
  }
}

/* ================================ INT8 ================================ */

static size_t tpu_packed_size_i8_avx2(size_t k, size_t n) {
  return panel_bytes(n, (k + 1) / 2, NR * 4);
}

static void tpu_pack_i8_avx2(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                             void *dst) {
  const int8_t *s = src;
  int16_t *d = dst;
  size_t kq = (k + 1) / 2;
  for (size_t pn = 0; pn < npanels(n); pn++)
    for (size_t q = 0; q < kq; q++, d += 2 * NR)
      for (size_t c = 0; c < NR; c++)
        for (size_t h = 0; h < 2; h++) {
          size_t j = pn * NR + c, p = 2 * q + h;
          d[2 * c + h] = j < n && p < k ? s[j * sn + p * sk] : 0;
        }
}

/* Workspace: MR rows of A widened to int16, each padded with zeros to a multiple of 16. */
static size_t a16_stride(size_t k) { return (k + 15) / 16 * 16; }
static size_t tpu_ws_size_i8_avx2(size_t k) { return MR * a16_stride(k) * sizeof(int16_t); }

static void widen_rows_i8(const int8_t *a, size_t k, size_t mr, size_t lda, int16_t *ws) {
  for (size_t r = 0; r < mr; r++) {
    const int8_t *src = a + r * k;
    int16_t *dst = ws + r * lda;
    size_t p = 0;
    for (; p + 16 <= k; p += 16)
      _mm256_store_si256((__m256i *)(dst + p),
                         _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(src + p))));
    for (; p < lda; p++) dst[p] = p < k ? src[p] : 0;
  }
}

static ALWAYS_INLINE void ukr_i8(const int mr, const int nv, const tpu__gemm_args_t *g,
                                 size_t i0, size_t j0, size_t jn, const int16_t *wp,
                                 const int16_t *ap, size_t lda) {
  size_t kq = (g->k + 1) / 2;
  __m256i acc[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_si256();
  for (size_t q = 0; q < kq; q++, wp += 2 * NR) {
    __m256i b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) b[v] = _mm256_load_si256((const __m256i *)(wp + 16 * v));
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
      int32_t x;
      memcpy(&x, ap + r * lda + 2 * q, 4);
      __m256i av = _mm256_set1_epi32(x);
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++)
        acc[r][v] = _mm256_add_epi32(acc[r][v], _mm256_madd_epi16(av, b[v]));
    }
  }
  __m256i out[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
  write_i32(g, i0, j0, jn, mr, nv, out);
}

#define UKR_I8(mr, nv, ...) ukr_i8(mr, nv, __VA_ARGS__)

static void tpu_gemm_i8_avx2_6x16(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                  size_t n1, void *ws) {
  size_t k = g->k, panel = (k + 1) / 2 * 2 * NR, lda = a16_stride(k);
  const int16_t *w = g->w;
  int16_t *ap = ws;
  for (size_t i = m0; i < m1; i += MR) {
    size_t mr = m1 - i < MR ? m1 - i : MR;
    widen_rows_i8((const int8_t *)g->a + i * k, k, mr, lda, ap);
    for (size_t j = n0; j < n1; j += NR) {
      size_t jn = n1 - j < NR ? n1 - j : NR, nv = (jn + 7) / 8;
      TPU__DISPATCH(UKR_I8, mr, nv, g, i, j, jn, w + j / NR * panel, ap, lda)
    }
  }
}

const tpu__kernel_set_t tpu__kernels_avx2 = {
    .name = "avx2",
    .cpu = TPU__CPU_AVX2 | TPU__CPU_FMA | TPU__CPU_F16C,
    .dt =
        {
            [TPU_DTYPE_FP32] = {.name = "tpu_gemm_f32_avx2_6x16",
                                .packed_size = tpu_packed_size_f32_avx2,
                                .pack = tpu_pack_f32_avx2,
                                .ws_size = NULL,
                                .gemm = tpu_gemm_f32_avx2_6x16,
                                .mr = MR,
                                .nr = NR},
            /* BF16 left empty: inherited from the next set below (ref). */
            [TPU_DTYPE_INT8] = {.name = "tpu_gemm_i8_avx2_6x16",
                                .packed_size = tpu_packed_size_i8_avx2,
                                .pack = tpu_pack_i8_avx2,
                                .ws_size = tpu_ws_size_i8_avx2,
                                .gemm = tpu_gemm_i8_avx2_6x16,
                                .mr = MR,
                                .nr = NR},
        },
    .vec = &tpu__vec_avx2,
};
