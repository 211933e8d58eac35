/*
 * kernels_avx512.c - the AVX-512 kernel set ("avx512"): FP32 (AVX-512F FMA), BF16 (VDPBF16PS)
 * and INT8 (VPDPBUSD), each an 8x48 register-blocked micro-kernel with the epilogue fused into
 * the write-out.
 *
 * DESIGN
 * Weight-stationary: pack() lays the weights out once in panels of NR = 48 output channels, the
 * order the micro-kernel streams them, so the hot loop does one aligned 64-byte load per 16
 * channels and one broadcast of A per row. The micro-kernel keeps an MR x NR = 8 x 48 block of C
 * in 24 zmm accumulators (3 vectors of 16 channels per row); edge blocks use the same code with
 * fewer rows / vectors (compile-time specializations) and masked stores, never a scalar path.
 *
 * Packed layouts (panel P holds channels 48P..48P+47; channels >= n are zero):
 *   FP32  panel = k steps of 48 floats: [p][c] = w[48P + c][p]. 192·k bytes.
 *   BF16  panel = ceil(k/2) pair steps of 48 dwords: dword c of step q holds bf16
 *         (w[48P+c][2q], w[48P+c][2q+1]) (low half first; 0 past k), the pair VDPBF16PS
 *         multiplies with a broadcast pair of A.
 *   INT8  panel = ceil(k/4) quad steps of 48 dwords: dword c of step q holds the 4 bytes
 *         w[48P+c][4q..4q+3] (0 past k), VPDPBUSD's layout; after all panels, npanels·48 int32
 *         column sums times 128 (see below).
 *
 * INT8: VPDPBUSD multiplies unsigned by signed bytes. A is signed, so the kernel feeds A + 128
 * (a XOR 0x80, exact for every int8 including -128) and subtracts 128·Σ_p w[j][p], computed at
 * pack time. The dot products wrap modulo 2^32 inside the instruction (the non-saturating form),
 * and so does the correction; since the true sum fits int32 (the frame bounds k), the wrapped
 * result is exactly the reference's int32. The shifted A of an 8-row block is written once per
 * block into the workspace (padded with zeros to whole quads), so the hot loop reads it with
 * plain 32-bit broadcasts and never reads past a row.
 *
 * Numerics: FP32 and BF16 accumulate in binary32 in another order than ref (allowed by the
 * contract); VDPBF16PS also treats bf16 denormal inputs as zero (no inputs of that size survive
 * bf16 rounding of any realistic activation, and the tests' tolerances hold). INT8 is bit-exact,
 * epilogue included (epilogue_avx512.h).
 *
 * Blocking: columns in chunks whose packed weights fit half of a 1 MiB L2, then 8-row blocks of
 * A, then the chunk's panels; so W is read from L2 once per row block and A from L3 once per
 * chunk. The frame's blocks start at multiples of (MR, NR), so a block starts on a panel.
 */
#include <immintrin.h>
#include <string.h>

#include "epilogue_avx512.h"
#include "tpu_kernels.h"

#define MR 8
#define NR 48
#define NV 3                        /* zmm vectors per row of the register block */
#define CHUNK_BYTES ((size_t)512 << 10) /* packed weights per column chunk */

#define ALWAYS_INLINE inline __attribute__((always_inline))

static size_t npanels(size_t n) { return (n + NR - 1) / NR; }

/* bytes = npanels(n) * steps * step_bytes (+ extra), 0 on overflow. */
static size_t panel_bytes(size_t n, size_t steps, size_t step_bytes, size_t extra) {
  size_t b;
  if (__builtin_mul_overflow(npanels(n), steps, &b) || __builtin_mul_overflow(b, step_bytes, &b) ||
      __builtin_add_overflow(b, extra, &b))
    return 0;
  return b;
}

/* Columns per chunk: whole panels, at least one, about CHUNK_BYTES of packed weights. */
static size_t chunk_cols(size_t panel_size) {
  size_t panels = panel_size ? CHUNK_BYTES / panel_size : 1;
  return (panels ? panels : 1) * NR;
}

/* Expands one micro-kernel call for the runtime (mr, nv) into a compile-time specialization. */
#define TPU__DISPATCH(fn, mr, nv, ...)                                                       \
  switch ((mr) * 4 + (nv)) {                                                                 \
  case 1 * 4 + 1: fn(1, 1, __VA_ARGS__); break;                                              \
  case 1 * 4 + 2: fn(1, 2, __VA_ARGS__); break;                                              \
  case 1 * 4 + 3: fn(1, 3, __VA_ARGS__); break;                                              \
  case 2 * 4 + 1: fn(2, 1, __VA_ARGS__); break;                                              \
  case 2 * 4 + 2: fn(2, 2, __VA_ARGS__); break;                                              \
  case 2 * 4 + 3: fn(2, 3, __VA_ARGS__); break;                                              \
  case 3 * 4 + 1: fn(3, 1, __VA_ARGS__); break;                                              \
  case 3 * 4 + 2: fn(3, 2, __VA_ARGS__); break;                                              \
  case 3 * 4 + 3: fn(3, 3, __VA_ARGS__); break;                                              \
  case 4 * 4 + 1: fn(4, 1, __VA_ARGS__); break;                                              \
  case 4 * 4 + 2: fn(4, 2, __VA_ARGS__); break;                                              \
  case 4 * 4 + 3: fn(4, 3, __VA_ARGS__); break;                                              \
  case 5 * 4 + 1: fn(5, 1, __VA_ARGS__); break;                                              \
  case 5 * 4 + 2: fn(5, 2, __VA_ARGS__); break;                                              \
  case 5 * 4 + 3: fn(5, 3, __VA_ARGS__); break;                                              \
  case 6 * 4 + 1: fn(6, 1, __VA_ARGS__); break;                                              \
  case 6 * 4 + 2: fn(6, 2, __VA_ARGS__); break;                                              \
  case 6 * 4 + 3: fn(6, 3, __VA_ARGS__); break;                                              \
  case 7 * 4 + 1: fn(7, 1, __VA_ARGS__); break;                                              \
  case 7 * 4 + 2: fn(7, 2, __VA_ARGS__); break;                                              \
  case 7 * 4 + 3: fn(7, 3, __VA_ARGS__); break;                                              \
  case 8 * 4 + 1: fn(8, 1, __VA_ARGS__); break;                                              \
  case 8 * 4 + 2: fn(8, 2, __VA_ARGS__); break;                                              \
  case 8 * 4 + 3: fn(8, 3, __VA_ARGS__); break;                                              \
  default: break; /* unreachable: 1 <= mr <= MR, 1 <= nv <= NV */                            \
  }

/* The write-out of one register block, kept out of line so that the micro-kernels' loops hold
 * their accumulators in registers (inlining the epilogue made GCC spill them to the stack). */
static __attribute__((noinline)) void write_f32(const tpu__gemm_args_t *g, size_t i0, size_t j0,
                                                size_t jn, size_t mr, size_t nv,
                                                const __m512 out[MR][NV]) {
  for (size_t r = 0; r < mr; r++)
    for (size_t v = 0; v < nv; v++)
      tpu__ep_store16_avx512(g, i0 + r, j0 + 16 * v, out[r][v], tpu__mask16(jn - 16 * v));
}

/* INT8: subtracts the pack-time correction 128·colsum (sums[0..nv·16)) first. */
static __attribute__((noinline)) void write_i32(const tpu__gemm_args_t *g, size_t i0, size_t j0,
                                                size_t jn, size_t mr, size_t nv,
                                                const __m512i out[MR][NV], const int32_t *sums) {
  for (size_t v = 0; v < nv; v++) {
    __m512i corr = _mm512_load_si512(sums + 16 * v);
    for (size_t r = 0; r < mr; r++)
      tpu__ep_store16_i32_avx512(g, i0 + r, j0 + 16 * v, _mm512_sub_epi32(out[r][v], corr),
                                 tpu__mask16(jn - 16 * v));
  }
}

/* ================================ FP32 ================================ */

static size_t tpu_packed_size_f32_avx512(size_t k, size_t n) {
  return panel_bytes(n, k, NR * sizeof(float), 0);
}

static void tpu_pack_f32_avx512(size_t k, size_t n, const void *src, size_t sn, size_t sk,
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

/* C[i0..i0+mr)[j0..j0+jn) from A rows i0.. and one packed panel; nv = ceil(jn / 16). */
static ALWAYS_INLINE void ukr_f32(const int mr, const int nv, const tpu__gemm_args_t *g,
                                  size_t i0, size_t j0, size_t jn, const float *wp) {
  size_t k = g->k;
  const float *a = (const float *)g->a + i0 * k;
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
  for (size_t p = 0; p < k; p++, wp += NR) {
    __m512 b[NV];
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) b[v] = _mm512_load_ps(wp + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      __m512 av = _mm512_set1_ps(a[r * k + p]);
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  __m512 out[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
  write_f32(g, i0, j0, jn, mr, nv, out);
}

#define UKR_F32(mr, nv, ...) ukr_f32(mr, nv, __VA_ARGS__)

static void tpu_gemm_f32_avx512_8x48(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                     size_t n1, void *ws) {
  (void)ws;
  size_t k = g->k, panel = k * NR, nc = chunk_cols(panel * sizeof(float));
  const float *w = g->w;
  for (size_t jc = n0; jc < n1; jc += nc) {
    size_t jc1 = n1 - jc < nc ? n1 : jc + nc;
    for (size_t i = m0; i < m1; i += MR) {
      size_t mr = m1 - i < MR ? m1 - i : MR;
      for (size_t j = jc; j < jc1; j += NR) {
        size_t jn = jc1 - j < NR ? jc1 - j : NR, nv = (jn + 15) / 16;
        TPU__DISPATCH(UKR_F32, mr, nv, g, i, j, jn, w + j / NR * panel)
      }
    }
  }
}

/* ================================ BF16 ================================ */

static size_t tpu_packed_size_bf16_avx512(size_t k, size_t n) {
  return panel_bytes(n, (k + 1) / 2, NR * 4, 0);
}

static void tpu_pack_bf16_avx512(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                                 void *dst) {
  const uint16_t *s = src;
  uint16_t *d = dst;
  size_t kq = (k + 1) / 2;
  for (size_t pn = 0; pn < npanels(n); pn++)
    for (size_t q = 0; q < kq; q++, d += 2 * NR)
      for (size_t c = 0; c < NR; c++)
        for (size_t h = 0; h < 2; h++) {
          size_t j = pn * NR + c, p = 2 * q + h;
          d[2 * c + h] = j < n && p < k ? s[j * sn + p * sk] : 0;
        }
}

/* Pair q of row `row` of A as a dword (low half element 2q); the odd tail pads with 0. */
static ALWAYS_INLINE uint32_t bf16_pair(const uint16_t *row, size_t q, size_t k) {
  uint32_t x;
  if (2 * q + 1 < k) {
    memcpy(&x, row + 2 * q, 4);
    return x;
  }
  return row[2 * q];
}

static ALWAYS_INLINE void ukr_bf16(const int mr, const int nv, const tpu__gemm_args_t *g,
                                   size_t i0, size_t j0, size_t jn, const uint16_t *wp) {
  size_t k = g->k, kq = (k + 1) / 2, kfull = k / 2;
  const uint16_t *a = (const uint16_t *)g->a + i0 * k;
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
  for (size_t q = 0; q < kq; q++, wp += 2 * NR) {
    __m512bh b[NV];
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) b[v] = (__m512bh)_mm512_load_si512(wp + 32 * v);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      uint32_t x;
      if (q < kfull)
        memcpy(&x, a + r * k + 2 * q, 4);
      else
        x = bf16_pair(a + r * k, q, k);
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)x);
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, b[v]);
    }
  }
  __m512 out[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
  write_f32(g, i0, j0, jn, mr, nv, out);
}

#define UKR_BF16(mr, nv, ...) ukr_bf16(mr, nv, __VA_ARGS__)

static void tpu_gemm_bf16_avx512_8x48(const tpu__gemm_args_t *g, size_t m0, size_t m1,
                                      size_t n0, size_t n1, void *ws) {
  (void)ws;
  size_t k = g->k, panel = (k + 1) / 2 * 2 * NR, nc = chunk_cols(panel * 2);
  const uint16_t *w = g->w;
  for (size_t jc = n0; jc < n1; jc += nc) {
    size_t jc1 = n1 - jc < nc ? n1 : jc + nc;
    for (size_t i = m0; i < m1; i += MR) {
      size_t mr = m1 - i < MR ? m1 - i : MR;
      for (size_t j = jc; j < jc1; j += NR) {
        size_t jn = jc1 - j < NR ? jc1 - j : NR, nv = (jn + 15) / 16;
        TPU__DISPATCH(UKR_BF16, mr, nv, g, i, j, jn, w + j / NR * panel)
      }
    }
  }
}

/* ================================ INT8 ================================ */

static size_t i8_panel_bytes(size_t k) { return (k + 3) / 4 * NR * 4; }

static size_t tpu_packed_size_i8_avx512(size_t k, size_t n) {
  size_t sums = panel_bytes(n, 1, NR * sizeof(int32_t), 0);
  return sums ? panel_bytes(n, (k + 3) / 4, NR * 4, sums) : 0;
}

static void tpu_pack_i8_avx512(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                               void *dst) {
  const int8_t *s = src;
  int8_t *d = dst;
  size_t kq = (k + 3) / 4, np = npanels(n);
  int32_t *sums = (int32_t *)((char *)dst + np * i8_panel_bytes(k));
  for (size_t pn = 0; pn < np; pn++) {
    for (size_t q = 0; q < kq; q++, d += 4 * NR)
      for (size_t c = 0; c < NR; c++)
        for (size_t h = 0; h < 4; h++) {
          size_t j = pn * NR + c, p = 4 * q + h;
          d[4 * c + h] = j < n && p < k ? s[j * sn + p * sk] : 0;
        }
    for (size_t c = 0; c < NR; c++) {
      size_t j = pn * NR + c;
      uint32_t sum = 0; /* modulo 2^32, like the accumulators it corrects */
      for (size_t p = 0; j < n && p < k; p++) sum += (uint32_t)(int32_t)s[j * sn + p * sk];
      sums[j] = (int32_t)(sum * 128u);
    }
  }
}

/* Workspace: MR rows of A + 128, each padded with zeros to whole quads. */
static size_t tpu_ws_size_i8_avx512(size_t k) { return MR * ((k + 63) / 64 * 64); }

/* Rows i..i+mr of A, shifted to unsigned, into ws (row stride lda bytes). */
static void shift_rows_i8(const int8_t *a, size_t k, size_t mr, size_t lda, uint8_t *ws) {
  const __m512i bias = _mm512_set1_epi8((char)0x80);
  for (size_t r = 0; r < mr; r++) {
    const int8_t *src = a + r * k;
    uint8_t *dst = ws + r * lda;
    for (size_t p = 0; p < lda; p += 64) {
      size_t left = k > p ? k - p : 0;
      __mmask64 mk = left >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << left) - 1;
      __m512i x = _mm512_maskz_loadu_epi8(mk, src + p);
      /* Padding stays 0: it meets zero weights, so its value does not matter, only that it is
       * defined. */
      _mm512_store_si512(dst + p, _mm512_maskz_mov_epi8(mk, _mm512_xor_si512(x, bias)));
    }
  }
}

static ALWAYS_INLINE void ukr_i8(const int mr, const int nv, const tpu__gemm_args_t *g,
                                 size_t i0, size_t j0, size_t jn, const int8_t *wp,
                                 const int32_t *sums, const uint8_t *ap, size_t lda) {
  size_t kq = (g->k + 3) / 4;
  __m512i acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_si512();
  for (size_t q = 0; q < kq; q++, wp += 4 * NR) {
    __m512i b[NV];
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) b[v] = _mm512_load_si512(wp + 64 * v);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      int32_t x;
      memcpy(&x, ap + r * lda + 4 * q, 4);
      __m512i av = _mm512_set1_epi32(x);
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, b[v]);
    }
  }
  __m512i out[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
  write_i32(g, i0, j0, jn, mr, nv, out, sums);
}

#define UKR_I8(mr, nv, ...) ukr_i8(mr, nv, __VA_ARGS__)

static void tpu_gemm_i8_avx512_8x48(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                    size_t n1, void *ws) {
  size_t k = g->k, panel = i8_panel_bytes(k), nc = chunk_cols(panel);
  size_t lda = (k + 63) / 64 * 64;
  const int8_t *w = g->w;
  const int32_t *sums = (const int32_t *)(w + npanels(g->n) * panel);
  uint8_t *ap = ws;
  for (size_t jc = n0; jc < n1; jc += nc) {
    size_t jc1 = n1 - jc < nc ? n1 : jc + nc;
    for (size_t i = m0; i < m1; i += MR) {
      size_t mr = m1 - i < MR ? m1 - i : MR;
      shift_rows_i8((const int8_t *)g->a + i * k, k, mr, lda, ap);
      for (size_t j = jc; j < jc1; j += NR) {
        size_t jn = jc1 - j < NR ? jc1 - j : NR, nv = (jn + 15) / 16;
        TPU__DISPATCH(UKR_I8, mr, nv, g, i, j, jn, w + j / NR * panel, sums + j, ap, lda)
      }
    }
  }
}

const tpu__kernel_set_t tpu__kernels_avx512 = {
    .name = "avx512",
    .cpu = TPU__CPU_AVX512F | TPU__CPU_AVX512BW | TPU__CPU_AVX512DQ | TPU__CPU_AVX512VL |
           TPU__CPU_AVX512VNNI | TPU__CPU_AVX512BF16 | TPU__CPU_FMA | TPU__CPU_F16C,
    .dt =
        {
            [TPU_DTYPE_FP32] = {.name = "tpu_gemm_f32_avx512_8x48",
                                .packed_size = tpu_packed_size_f32_avx512,
                                .pack = tpu_pack_f32_avx512,
                                .ws_size = NULL,
                                .gemm = tpu_gemm_f32_avx512_8x48,
                                .mr = MR,
                                .nr = NR},
            [TPU_DTYPE_BF16] = {.name = "tpu_gemm_bf16_avx512_8x48",
                                .packed_size = tpu_packed_size_bf16_avx512,
                                .pack = tpu_pack_bf16_avx512,
                                .ws_size = NULL,
                                .gemm = tpu_gemm_bf16_avx512_8x48,
                                .mr = MR,
                                .nr = NR},
            [TPU_DTYPE_INT8] = {.name = "tpu_gemm_i8_avx512_8x48",
                                .packed_size = tpu_packed_size_i8_avx512,
                                .pack = tpu_pack_i8_avx512,
                                .ws_size = tpu_ws_size_i8_avx512,
                                .gemm = tpu_gemm_i8_avx512_8x48,
                                .mr = MR,
                                .nr = NR},
        },
};
