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
 * Packed layouts. Panels of W = 48 channels from channel 0, except that when n leaves 1..16
 * channels after a whole panel, the last 48 + r channels form two panels of W = 32 (tail_col:
 * no 16-wide panel, whose blocks ran at ~70% of the rate; N = 256, 1024, 4096 end this way).
 * A panel starting at channel S holds channels S..S+W-1 (>= n are zero) and starts at slot
 * S·steps (4-byte slots):
 *   FP32  k steps of W floats: [p][c] = w[S + c][p].
 *   BF16  ceil(k/2) pair steps of W dwords: dword c of step q holds bf16
 *         (w[S+c][2q], w[S+c][2q+1]) (low half first; 0 past k), the pair VDPBF16PS
 *         multiplies with a broadcast pair of A.
 *   INT8  ceil(k/4) quad steps of W dwords: dword c of step q holds the 4 bytes
 *         w[S+c][4q..4q+3] (0 past k), VPDPBUSD's layout; after all panels, one int32 column
 *         sum times 128 per packed channel (see below).
 * A block may start inside a panel at a multiple of 16 channels (the frame splits at multiples
 * of 48, which can fall inside a 32-wide tail panel); the kernel then reads from that offset.
 * Blocks of 1 or 2 rows have too few accumulators to hide the latency of their dependent
 * VFMADD/VDPBF16PS chains; for FP32 and BF16 they take up to 4 whole panels at once (more
 * chains, the same order over k), and INT8 (exact in any order) keeps 4 or 2 partial sums per
 * accumulator (KU) instead. The common epilogues (INT32 out; FP32 out with bias and none/relu)
 * are written inline from the registers, the rest out of line.
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
 * epilogue included (epilogue_avx512.h). Batch invariance: every FP32/BF16 element is one chain
 * over k = 0, 1, ... in order, whatever the block's rows, panels or vectors and wherever the
 * frame splits the plan, and the epilogue works per element; so a row's output bits do not
 * depend on M, the rows beside it or the thread count (test_plan's batch_invariant).
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
#define TW 32                       /* width of the two tail panels (see tail_col) */
#define KU_MAX 4                    /* interleaved partial sums of the 1- and 2-row INT8 kernels */
#define NP_MAX 4                    /* panels a block of WIDE_ROWS rows or fewer takes at once */
#define WIDE_ROWS 2
#define CHUNK_BYTES ((size_t)512 << 10) /* packed weights per column chunk */

#define ALWAYS_INLINE inline __attribute__((always_inline))

static size_t npanels(size_t n) { return (n + NR - 1) / NR; }

/* First column of the 32-wide tail panels, or SIZE_MAX when there are none. When n leaves 1..16
 * columns after at least one whole 48-wide panel, the last 48 + r columns are packed as two
 * panels of 32 instead of a full one and a 16-wide one: a 16-wide block issues 8 products per 9
 * loads and ran at ~70% of the 48-wide rate, a 32-wide one 16 per 10 (N = 256, 1024, 4096 all
 * end this way). */
static ALWAYS_INLINE size_t tail_col(size_t n) {
  size_t r = n % NR;
  return n > NR && r && r <= 16 ? n - r - NR : SIZE_MAX;
}

/* Columns of packed storage: n rounded up to whole panels (a multiple of 16). */
static size_t packed_cols(size_t n) {
  size_t t = tail_col(n);
  return t != SIZE_MAX ? t + 2 * TW : npanels(n) * NR;
}

/* The panel holding column j: its first column and its width (NR, or TW in the tail). */
static ALWAYS_INLINE void panel_of(size_t n, size_t j, size_t *start, size_t *width) {
  size_t t = tail_col(n);
  if (j < t) {
    *start = j / NR * NR;
    *width = NR;
  } else {
    *start = t + (j - t) / TW * TW;
    *width = TW;
  }
}

/* Index, in 4-byte slots, of column c at step s of a layout with `steps` steps per panel: a
 * panel is `steps` rows of `width` slots and starts at slot start·steps (all panels before it
 * are whole). */
static size_t slot_of(size_t n, size_t steps, size_t c, size_t s) {
  size_t start, width;
  panel_of(n, c, &start, &width);
  return start * steps + s * width + (c - start);
}

/* bytes = packed_cols(n) * steps * 4 (+ extra), 0 on overflow. */
static size_t panel_bytes(size_t n, size_t steps, size_t extra) {
  size_t b;
  if (__builtin_mul_overflow(packed_cols(n), steps, &b) || __builtin_mul_overflow(b, 4, &b) ||
      __builtin_add_overflow(b, extra, &b))
    return 0;
  return b;
}

/* Columns per chunk: whole 48-wide panels, at least one, about CHUNK_BYTES of packed weights. */
static size_t chunk_cols(size_t bytes_per_col) {
  size_t panels = bytes_per_col ? CHUNK_BYTES / (bytes_per_col * NR) : 1;
  return (panels ? panels : 1) * NR;
}

/* Partial sums per accumulator of an mr-row INT8 block. A 1-row block has only nv ≤ 3 dependent
 * chains of VPDPBUSD (latency ~4 cycles at 2 per cycle), so it would wait on them instead of on
 * the weight loads; 1- and 2-row blocks keep KU_MAX / mr interleaved sums over k and add them at
 * the end, exact for INT8. (FP32/BF16 must not: a different order would make a row's result
 * depend on its block's size; they take several panels at once instead, see FOR_BLOCKS.) */
#define KU(mr) ((mr) == 1 ? 4 : (mr) == 2 ? 2 : 1)

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

/* The same for blocks of mr <= WIDE_ROWS rows over np = 2..NP_MAX whole panels of nv vectors
 * (nv = 3 for 48-wide panels, 2 for the 32-wide tail pair). */
#define TPU__DISPATCH_WIDE(fn, mr, np, nv, ...)                                            \
  switch ((mr) * 16 + (np) * 4 + (nv)) {                                                  \
  case 1 * 16 + 2 * 4 + 2: fn(1, 2, 2, __VA_ARGS__); break;                                \
  case 1 * 16 + 2 * 4 + 3: fn(1, 2, 3, __VA_ARGS__); break;                                \
  case 1 * 16 + 3 * 4 + 2: fn(1, 3, 2, __VA_ARGS__); break;                                \
  case 1 * 16 + 3 * 4 + 3: fn(1, 3, 3, __VA_ARGS__); break;                                \
  case 1 * 16 + 4 * 4 + 2: fn(1, 4, 2, __VA_ARGS__); break;                                \
  case 1 * 16 + 4 * 4 + 3: fn(1, 4, 3, __VA_ARGS__); break;                                \
  case 2 * 16 + 2 * 4 + 2: fn(2, 2, 2, __VA_ARGS__); break;                                \
  case 2 * 16 + 2 * 4 + 3: fn(2, 2, 3, __VA_ARGS__); break;                                \
  case 2 * 16 + 3 * 4 + 2: fn(2, 3, 2, __VA_ARGS__); break;                                \
  case 2 * 16 + 3 * 4 + 3: fn(2, 3, 3, __VA_ARGS__); break;                                \
  case 2 * 16 + 4 * 4 + 2: fn(2, 4, 2, __VA_ARGS__); break;                                \
  case 2 * 16 + 4 * 4 + 3: fn(2, 4, 3, __VA_ARGS__); break;                                \
  default: break; /* unreachable: FOR_BLOCKS groups only whole 32- or 48-wide panels */      \
  }

/* The general write-out of one register block (every activation and output dtype), kept out
 * of line: the transcendental activations need many registers, and inlined into the
 * micro-kernel they would make GCC spill the accumulators around the loop. The common epilogues (INT32 out; FP32 out
 * with bias and none/relu) are written inline by store_f32 / store_i8 below instead. */
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

/* FP32 y = acc (+ bias) then none/relu, stored as FP32: the contract's epilogue with the same
 * elementary operations as tpu__ep_store16_avx512, inline, so the accumulators never leave
 * their registers. */
static ALWAYS_INLINE void store_fast_f32(const int mr, const int nv, const tpu__gemm_args_t *g,
                                         size_t i0, size_t j0, size_t jn, __m512 y[MR][NV]) {
  const int relu = g->act == TPU_ACT_RELU;
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 3
  for (int v = 0; v < nv; v++) {
    __mmask16 mk = tpu__mask16(jn - 16 * v);
    float *c = (float *)g->c + i0 * g->ldc + j0 + 16 * v;
    __m512 b = g->bias ? _mm512_maskz_loadu_ps(mk, g->bias + j0 + 16 * v) : zero;
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      __m512 x = y[r][v];
      if (g->bias) x = _mm512_add_ps(x, b); /* no bias: no add (-0 + 0 would be +0) */
      if (relu) x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), zero);
      _mm512_mask_storeu_ps(c + r * g->ldc, mk, x);
    }
  }
}

static ALWAYS_INLINE int fast_ep(const tpu__gemm_args_t *g) {
  return g->out_dtype == TPU_DTYPE_FP32 && (g->act == TPU_ACT_NONE || g->act == TPU_ACT_RELU);
}

static ALWAYS_INLINE void store_f32(const int mr, const int nv, const tpu__gemm_args_t *g,
                                    size_t i0, size_t j0, size_t jn, __m512 acc[MR][NV]) {
  if (fast_ep(g)) {
    store_fast_f32(mr, nv, g, i0, j0, jn, acc);
    return;
  }
  __m512 out[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
  write_f32(g, i0, j0, jn, mr, nv, out);
}

static ALWAYS_INLINE void store_i8(const int mr, const int nv, const tpu__gemm_args_t *g,
                                   size_t i0, size_t j0, size_t jn, __m512i acc[MR][NV],
                                   const int32_t *sums) {
  if (g->out_dtype == TPU_DTYPE_INT32) {
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) {
      __m512i corr = _mm512_load_si512(sums + 16 * v);
      __mmask16 mk = tpu__mask16(jn - 16 * v);
      int32_t *c = (int32_t *)g->c + i0 * g->ldc + j0 + 16 * v;
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++)
        _mm512_mask_storeu_epi32(c + r * g->ldc, mk, _mm512_sub_epi32(acc[r][v], corr));
    }
    return;
  }
  if (fast_ep(g)) {
    /* (float)acc · a_scales[i] · w_scales[j], left to right, as tpu__ep_store16_i32_avx512. */
    __m512 y[MR][NV];
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) {
      __m512i corr = _mm512_load_si512(sums + 16 * v);
      __m512 wsc = _mm512_maskz_loadu_ps(tpu__mask16(jn - 16 * v), g->w_scales + j0 + 16 * v);
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++) {
        __m512 x = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][v], corr));
        x = _mm512_mul_ps(x, _mm512_set1_ps(g->a_scales[i0 + r]));
        y[r][v] = _mm512_mul_ps(x, wsc);
      }
    }
    store_fast_f32(mr, nv, g, i0, j0, jn, y);
    return;
  }
  __m512i out[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
    for (int v = 0; v < nv; v++) out[r][v] = acc[r][v];
  write_i32(g, i0, j0, jn, mr, nv, out, sums);
}

/* Panels to take at once from the whole panel [ps, ps + ww): of the run of whole panels of width
 * ww that follows it inside the chunk (up to jc1), at most NP_MAX, and never leaving a single
 * panel behind (5 -> 3 + 2, not 4 + 1) since a lone panel has too few chains. */
static size_t group_panels(size_t n, size_t ps, size_t ww, size_t jc1) {
  size_t run = 1, s, w;
  while (ps + (run + 1) * ww <= jc1) {
    panel_of(n, ps + run * ww, &s, &w);
    if (s != ps + run * ww || w != ww) break;
    run++;
  }
  if (run <= NP_MAX) return run;
  return run % NP_MAX == 1 ? NP_MAX - 1 : NP_MAX;
}

/* Visits the blocks of C[m0..m1)[n0..n1): columns in chunks of about CHUNK_BYTES of weights,
 * then MR-row blocks, then the chunk's panels (a block may start inside a panel, at a multiple
 * of 16 columns, when the frame or a chunk boundary splits one). BODY sees i, mr, j, jn, nv and
 * `wo`, the slot (4-byte unit) of the block's first column at step 0, `ww`, the slots per step
 * of its panel, and `np`: blocks of at most GROUP rows take up to NP_MAX whole panels of the
 * same width at once (the next one at wo + ww·steps), so that they have enough independent
 * accumulators without splitting the sum over k (see ukr_f32); jn then covers all np panels.
 * ROWS(i, mr) runs before each row block's panels. */
#define FOR_BLOCKS(g, m0, m1, n0, n1, steps, GROUP, ROWS, BODY)                              \
  do {                                                                                       \
    /* one block of rows reads W once whatever the chunks: no chunks, wider groups */        \
    size_t nc_ = (m1) - (m0) <= (GROUP) ? (n1) - (n0) : chunk_cols((steps) * 4);             \
    for (size_t jc = (n0); jc < (n1); jc += nc_) {                                           \
      size_t jc1 = (n1) - jc < nc_ ? (n1) : jc + nc_;                                        \
      for (size_t i = (m0); i < (m1); i += MR) {                                             \
        size_t mr = (m1) - i < MR ? (m1) - i : MR;                                           \
        ROWS;                                                                                \
        for (size_t j = jc, je; j < jc1; j = je) {                                           \
          size_t ps, ww, np = 1;                                                             \
          panel_of((g)->n, j, &ps, &ww);                                                     \
          je = ps + ww < jc1 ? ps + ww : jc1;                                                \
          if (mr <= (GROUP) && j == ps && je == ps + ww) {                                   \
            np = group_panels((g)->n, ps, ww, jc1);                                          \
            je = ps + np * ww;                                                               \
          }                                                                                  \
          size_t jn = je - j, nv = (jn - (np - 1) * ww + 15) / 16, wo = ps * (steps) + (j - ps); \
          BODY;                                                                              \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
  } while (0)

/* ================================ FP32 ================================ */

static size_t tpu_packed_size_f32_avx512(size_t k, size_t n) { return panel_bytes(n, k, 0); }

static void tpu_pack_f32_avx512(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                                void *dst) {
  const float *s = src;
  float *d = dst;
  for (size_t c = 0; c < packed_cols(n); c++)
    for (size_t p = 0; p < k; p++) d[slot_of(n, k, c, p)] = c < n ? s[c * sn + p * sk] : 0.0f;
}

/* C[i0..i0+mr)[j0..j0+jn) from A rows i0.. and np panels of ww floats per k step, the first at
 * wp and each next one pstep floats further; nv = ceil(jn' / 16) for the last panel's jn', the
 * others whole. Each element is one chain of FMAs over p = 0..k-1 in order, whatever mr, np and
 * nv: a row's result does not depend on the rows beside it (batch invariance). */
static ALWAYS_INLINE void ukr_f32(const int mr, const int np, const int nv,
                                  const tpu__gemm_args_t *g, size_t i0, size_t j0, size_t jn,
                                  const float *wp, size_t ww, size_t pstep) {
  size_t k = g->k;
  const float *a = (const float *)g->a + i0 * k;
  __m512 acc[NP_MAX][MR][NV];
#pragma GCC unroll 4
  for (int q = 0; q < np; q++)
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) acc[q][r][v] = _mm512_setzero_ps();
  for (size_t p = 0; p < k; p++, wp += ww) {
    if (np == 1) {
      __m512 b[NV];
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) b[v] = _mm512_load_ps(wp + 16 * v);
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++) {
        __m512 av = _mm512_set1_ps(a[r * k + p]);
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[0][r][v] = _mm512_fmadd_ps(av, b[v], acc[0][r][v]);
      }
    } else {
      __m512 av[MR];
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++) av[r] = _mm512_set1_ps(a[r * k + p]);
#pragma GCC unroll 4
      for (int q = 0; q < np; q++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) {
          __m512 bv = _mm512_load_ps(wp + q * pstep + 16 * v);
#pragma GCC unroll 8
          for (int r = 0; r < mr; r++) acc[q][r][v] = _mm512_fmadd_ps(av[r], bv, acc[q][r][v]);
        }
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < np; q++)
    store_f32(mr, nv, g, i0, j0 + q * ww, q == np - 1 ? jn - q * ww : ww, acc[q]);
}

#define UKR_F32(mr, nv, ...) ukr_f32(mr, 1, nv, __VA_ARGS__)
#define UKR_F32_WIDE(mr, np, nv, ...) ukr_f32(mr, np, nv, __VA_ARGS__)

static void tpu_gemm_f32_avx512_8x48(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                     size_t n1, void *ws) {
  (void)ws;
  const float *w = g->w;
  size_t k = g->k;
  FOR_BLOCKS(g, m0, m1, n0, n1, k, WIDE_ROWS, (void)0, {
    if (np == 1) {
      TPU__DISPATCH(UKR_F32, mr, nv, g, i, j, jn, w + wo, ww, 0);
    } else {
      TPU__DISPATCH_WIDE(UKR_F32_WIDE, mr, np, nv, g, i, j, jn, w + wo, ww, ww * k);
    }
  });
}

/* ================================ BF16 ================================ */

static size_t tpu_packed_size_bf16_avx512(size_t k, size_t n) {
  return panel_bytes(n, (k + 1) / 2, 0);
}

static void tpu_pack_bf16_avx512(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                                 void *dst) {
  const uint16_t *s = src;
  uint16_t *d = dst;
  size_t kq = (k + 1) / 2;
  for (size_t c = 0; c < packed_cols(n); c++)
    for (size_t q = 0; q < kq; q++)
      for (size_t h = 0; h < 2; h++) {
        size_t p = 2 * q + h;
        d[2 * slot_of(n, kq, c, q) + h] = c < n && p < k ? s[c * sn + p * sk] : 0;
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

/* As ukr_f32 with pair steps: each panel holds ww dwords (bf16 pairs) per step, the next panel
 * pstep dwords further; one VDPBF16PS chain per element over the pairs in order. */
static ALWAYS_INLINE void ukr_bf16(const int mr, const int np, const int nv,
                                   const tpu__gemm_args_t *g, size_t i0, size_t j0, size_t jn,
                                   const uint16_t *wp, size_t ww, size_t pstep) {
  size_t k = g->k, kq = (k + 1) / 2;
  const uint16_t *a = (const uint16_t *)g->a + i0 * k;
  __m512 acc[NP_MAX][MR][NV];
#pragma GCC unroll 4
  for (int q = 0; q < np; q++)
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) acc[q][r][v] = _mm512_setzero_ps();
  for (size_t s = 0; s < kq; s++, wp += 2 * ww) {
    /* An odd k's last pair is (a, 0): bf16_pair reads no further than the row. */
    if (np == 1) {
      __m512bh b[NV];
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) b[v] = (__m512bh)_mm512_load_si512(wp + 32 * v);
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++) {
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)bf16_pair(a + r * k, s, k));
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[0][r][v] = _mm512_dpbf16_ps(acc[0][r][v], av, b[v]);
      }
    } else {
      __m512bh av[MR];
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++)
        av[r] = (__m512bh)_mm512_set1_epi32((int)bf16_pair(a + r * k, s, k));
#pragma GCC unroll 4
      for (int q = 0; q < np; q++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) {
          __m512bh bv = (__m512bh)_mm512_load_si512(wp + 2 * (q * pstep + 16 * v));
#pragma GCC unroll 8
          for (int r = 0; r < mr; r++)
            acc[q][r][v] = _mm512_dpbf16_ps(acc[q][r][v], av[r], bv);
        }
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < np; q++)
    store_f32(mr, nv, g, i0, j0 + q * ww, q == np - 1 ? jn - q * ww : ww, acc[q]);
}

#define UKR_BF16(mr, nv, ...) ukr_bf16(mr, 1, nv, __VA_ARGS__)
#define UKR_BF16_WIDE(mr, np, nv, ...) ukr_bf16(mr, np, nv, __VA_ARGS__)

static void tpu_gemm_bf16_avx512_8x48(const tpu__gemm_args_t *g, size_t m0, size_t m1,
                                      size_t n0, size_t n1, void *ws) {
  (void)ws;
  const uint16_t *w = g->w;
  size_t kq = (g->k + 1) / 2;
  FOR_BLOCKS(g, m0, m1, n0, n1, kq, WIDE_ROWS, (void)0, {
    if (np == 1) {
      TPU__DISPATCH(UKR_BF16, mr, nv, g, i, j, jn, w + 2 * wo, ww, 0);
    } else {
      TPU__DISPATCH_WIDE(UKR_BF16_WIDE, mr, np, nv, g, i, j, jn, w + 2 * wo, ww, ww * kq);
    }
  });
}

/* ================================ INT8 ================================ */

static size_t tpu_packed_size_i8_avx512(size_t k, size_t n) {
  size_t sums = panel_bytes(n, 1, 0);
  return sums ? panel_bytes(n, (k + 3) / 4, sums) : 0;
}

static void tpu_pack_i8_avx512(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                               void *dst) {
  const int8_t *s = src;
  int8_t *d = dst;
  size_t kq = (k + 3) / 4, nc = packed_cols(n);
  int32_t *sums = (int32_t *)((char *)dst + nc * kq * 4);
  for (size_t c = 0; c < nc; c++) {
    uint32_t sum = 0; /* modulo 2^32, like the accumulators it corrects */
    for (size_t q = 0; q < kq; q++)
      for (size_t h = 0; h < 4; h++) {
        size_t p = 4 * q + h;
        int8_t x = c < n && p < k ? s[c * sn + p * sk] : 0;
        d[4 * slot_of(n, kq, c, q) + h] = x;
        sum += (uint32_t)(int32_t)x;
      }
    sums[c] = (int32_t)(sum * 128u);
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

/* As ukr_f32 with quad steps over the shifted A rows at ap (stride lda): wp holds ww dwords
 * (4 weights each) per step. The partial sums wrap modulo 2^32 like one sum would, so adding
 * them gives the same int32. */
static ALWAYS_INLINE void ukr_i8(const int mr, const int nv, const tpu__gemm_args_t *g,
                                 size_t i0, size_t j0, size_t jn, const int8_t *wp, size_t ww,
                                 const int32_t *sums, const uint8_t *ap, size_t lda) {
  const int ku = KU(mr);
  size_t kq = (g->k + 3) / 4, q = 0;
  __m512i acc[KU_MAX][MR][NV];
#pragma GCC unroll 4
  for (int u = 0; u < ku; u++)
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) acc[u][r][v] = _mm512_setzero_si512();
  for (; q + ku <= kq; q += ku, wp += 4 * ku * ww) {
#pragma GCC unroll 4
    for (int u = 0; u < ku; u++) {
      __m512i b[NV];
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) b[v] = _mm512_load_si512(wp + 4 * (u * ww + 16 * v));
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++) {
        int32_t x;
        memcpy(&x, ap + r * lda + 4 * (q + u), 4);
        __m512i av = _mm512_set1_epi32(x);
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) acc[u][r][v] = _mm512_dpbusd_epi32(acc[u][r][v], av, b[v]);
      }
    }
  }
  for (; q < kq; q++, wp += 4 * ww)
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      int32_t x;
      memcpy(&x, ap + r * lda + 4 * q, 4);
      __m512i av = _mm512_set1_epi32(x);
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++)
        acc[0][r][v] = _mm512_dpbusd_epi32(acc[0][r][v], av, _mm512_load_si512(wp + 64 * v));
    }
#pragma GCC unroll 4
  for (int u = 1; u < ku; u++)
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 3
      for (int v = 0; v < nv; v++) acc[0][r][v] = _mm512_add_epi32(acc[0][r][v], acc[u][r][v]);
  store_i8(mr, nv, g, i0, j0, jn, acc[0], sums);
}

#define UKR_I8(mr, nv, ...) ukr_i8(mr, nv, __VA_ARGS__)

static void tpu_gemm_i8_avx512_8x48(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                    size_t n1, void *ws) {
  size_t k = g->k, kq = (k + 3) / 4, lda = (k + 63) / 64 * 64;
  const int8_t *w = g->w;
  const int32_t *sums = (const int32_t *)(w + packed_cols(g->n) * kq * 4);
  const int8_t *a = g->a;
  uint8_t *ap = ws;
  FOR_BLOCKS(g, m0, m1, n0, n1, kq, 0, shift_rows_i8(a + i * k, k, mr, lda, ap),
             TPU__DISPATCH(UKR_I8, mr, nv, g, i, j, jn, w + 4 * wo, ww, sums + j, ap, lda));
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
    .vec = &tpu__vec_avx512,
};
