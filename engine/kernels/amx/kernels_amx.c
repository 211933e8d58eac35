/*
 * kernels_amx.c - the AMX kernel set ("amx"): INT8 (TDPBSSD, signed x signed) and BF16
 * (TDPBF16PS), one 16x16 accumulator tile at a time, the epilogue fused into the write-out with
 * the AVX-512 code of the avx512 set. FP32 is inherited from the set below (avx512).
 *
 * DESIGN
 * Written for obvious correctness over speed, from Intel's documented semantics (SDM vol. 2,
 * TDPBSSD / TDPBF16PS / LDTILECFG), because the machines this was written on have no AMX: it is
 * compiled and registered, but only runs where registry.c found the AMX CPUID bits, the XCR0
 * tile state and Linux's permission for tile data (arch_prctl ARCH_REQ_XCOMP_PERM).
 *
 * Tiles (palette 1, configured by each gemm call for its own thread, released on return):
 *   tmm0  C: 16 rows x 64 bytes = 16 x 16 int32 (INT8) or fp32 (BF16)
 *   tmm1  A: 16 rows x 64 bytes = 16 rows x 64 int8, or x 32 bf16, of one K block
 *   tmm2  B: 16 rows x 64 bytes: row r holds, for each of 16 channels c, the 4 int8
 *         w[c][4r..4r+3] (or the 2 bf16 w[c][2r..2r+1]) of that K block, as one dword
 * The instructions compute C[m][c] += Σ_r Σ_e A[m][4r+e]·B[r][4c+e] (int8; the bf16 form pairs
 * e = 0, 1), i.e. C = A·Wᵀ over one K block of 64 int8 / 32 bf16.
 *
 * Packed layout: panels of NR = 16 channels (zero past n); in a panel, K blocks one after
 * another, each the 1 KiB B tile above with the K interleave done at pack time (zero past k), so
 * a tile load is 16 rows of stride 64 bytes.
 *
 * Workspace (per thread): the 64-byte tile configuration, a 1 KiB spill of C, and MR = 16 rows of
 * A copied with their K padded with zeros to whole blocks (rows past the block's end are zero
 * too), so tile loads never read outside the caller's A and padding always meets zero weights.
 *
 * Numerics: INT8 accumulates exactly in int32 (TDPBSSD's sums wrap modulo 2^32, and the true sum
 * fits int32), so it is bit-exact with ref, epilogue included. BF16 accumulates in binary32 in
 * another order than ref and, like VDPBF16PS, treats denormal inputs as zero.
 */
#include <immintrin.h>
#include <string.h>

#include "../avx512/epilogue_avx512.h"
#include "tpu_kernels.h"

#define MR 16
#define NR 16
#define TILE_BYTES 1024 /* 16 rows x 64 bytes */

/* LDTILECFG's 64-byte memory operand (palette 1). */
typedef struct {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16]; /* bytes per row of each tile */
  uint8_t rows[16];
} tile_config_t;
_Static_assert(sizeof(tile_config_t) == 64, "LDTILECFG operand is 64 bytes");

static size_t npanels(size_t n) { return (n + NR - 1) / NR; }

/* K blocks: 64 int8 or 32 bf16 per block (64 bytes of one row). */
static size_t kblocks(size_t k, size_t per_block) { return (k + per_block - 1) / per_block; }

static size_t packed_size(size_t k, size_t n, size_t per_block) {
  size_t b;
  if (__builtin_mul_overflow(npanels(n), kblocks(k, per_block), &b) ||
      __builtin_mul_overflow(b, (size_t)TILE_BYTES, &b))
    return 0;
  return b;
}

static size_t tpu_packed_size_i8_amx(size_t k, size_t n) { return packed_size(k, n, 64); }
static size_t tpu_packed_size_bf16_amx(size_t k, size_t n) { return packed_size(k, n, 32); }

/* Element (j, p) goes to panel j/16, block p/per, row (p%per)/e, byte 4(j%16) + es·(p%e),
 * with e = 4 (int8) or 2 (bf16) elements per dword and es the element size. */
static void pack_tiles(size_t k, size_t n, const void *src, size_t sn, size_t sk, void *dst,
                       size_t es) {
  size_t per = 64 / es, e = 4 / es, kb = kblocks(k, per);
  const char *s = src;
  char *d = dst;
  memset(d, 0, npanels(n) * kb * TILE_BYTES);
  for (size_t j = 0; j < n; j++)
    for (size_t p = 0; p < k; p++) {
      size_t tile = j / NR * kb + p / per, row = p % per / e;
      size_t at = tile * TILE_BYTES + row * 64 + 4 * (j % NR) + es * (p % e);
      memcpy(d + at, s + (j * sn + p * sk) * es, es);
    }
}

static void tpu_pack_i8_amx(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                            void *dst) {
  pack_tiles(k, n, src, sn, sk, dst, 1);
}

static void tpu_pack_bf16_amx(size_t k, size_t n, const void *src, size_t sn, size_t sk,
                              void *dst) {
  pack_tiles(k, n, src, sn, sk, dst, 2);
}

/* Workspace: tile config (64 B), C spill (1 KiB), then MR rows of A of kblocks·64 bytes. */
#define WS_C 64
#define WS_A (64 + TILE_BYTES)
static size_t a_stride(size_t k, size_t es) { return kblocks(k, 64 / es) * 64; }
static size_t tpu_ws_size_i8_amx(size_t k) { return WS_A + MR * a_stride(k, 1); }
static size_t tpu_ws_size_bf16_amx(size_t k) { return WS_A + MR * a_stride(k, 2); }

static void config_tiles(void *ws) {
  tile_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int t = 0; t < 3; t++) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  memcpy(ws, &cfg, sizeof cfg);
  _tile_loadconfig(ws);
}

/* Rows i..i+mr of A (k elements of es bytes) into the workspace, zero-padded to MR x lda. */
static void copy_a(const char *a, size_t k, size_t es, size_t mr, size_t lda, char *dst) {
  for (size_t r = 0; r < MR; r++) {
    size_t bytes = r < mr ? k * es : 0;
    if (bytes) memcpy(dst + r * lda, a + r * k * es, bytes);
    memset(dst + r * lda + bytes, 0, lda - bytes);
  }
}

/* One gemm for either dtype: es = 1 (INT8, TDPBSSD) or 2 (BF16, TDPBF16PS). */
static inline __attribute__((always_inline)) void gemm_amx(const tpu__gemm_args_t *g, size_t m0,
                                                           size_t m1, size_t n0, size_t n1,
                                                           void *ws, const size_t es) {
  size_t k = g->k, lda = a_stride(k, es), kb = lda / 64;
  char *cbuf = (char *)ws + WS_C, *abuf = (char *)ws + WS_A;
  const char *w = g->w;
  config_tiles(ws);
  for (size_t i = m0; i < m1; i += MR) {
    size_t mr = m1 - i < MR ? m1 - i : MR;
    copy_a((const char *)g->a + i * k * es, k, es, mr, lda, abuf);
    for (size_t j = n0; j < n1; j += NR) {
      size_t jn = n1 - j < NR ? n1 - j : NR;
      const char *panel = w + j / NR * kb * TILE_BYTES;
      _tile_zero(0);
      for (size_t b = 0; b < kb; b++) {
        _tile_loadd(1, abuf + b * 64, (long)lda);
        _tile_loadd(2, panel + b * TILE_BYTES, 64);
        if (es == 1)
          _tile_dpbssd(0, 1, 2);
        else
          _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, cbuf, 64);
      __mmask16 mk = tpu__mask16(jn);
      for (size_t r = 0; r < mr; r++) {
        if (es == 1)
          tpu__ep_store16_i32_avx512(g, i + r, j, _mm512_load_si512(cbuf + r * 64), mk);
        else
          tpu__ep_store16_avx512(g, i + r, j, _mm512_load_ps(cbuf + r * 64), mk);
      }
    }
  }
  _tile_release();
}

static void tpu_gemm_i8_amx_16x16(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                  size_t n1, void *ws) {
  gemm_amx(g, m0, m1, n0, n1, ws, 1);
}

static void tpu_gemm_bf16_amx_16x16(const tpu__gemm_args_t *g, size_t m0, size_t m1, size_t n0,
                                    size_t n1, void *ws) {
  gemm_amx(g, m0, m1, n0, n1, ws, 2);
}

const tpu__kernel_set_t tpu__kernels_amx = {
    .name = "amx",
    /* The epilogue is AVX-512 code: require what the avx512 set requires, plus the tiles. */
    .cpu = TPU__CPU_AMX_TILE | TPU__CPU_AMX_INT8 | TPU__CPU_AMX_BF16 | TPU__CPU_AVX512F |
           TPU__CPU_AVX512BW | TPU__CPU_AVX512DQ | TPU__CPU_AVX512VL | TPU__CPU_AVX512VNNI |
           TPU__CPU_AVX512BF16 | TPU__CPU_FMA,
    .dt =
        {
            /* FP32 left empty: inherited from the next usable set below (avx512). */
            [TPU_DTYPE_BF16] = {.name = "tpu_gemm_bf16_amx_16x16",
                                .packed_size = tpu_packed_size_bf16_amx,
                                .pack = tpu_pack_bf16_amx,
                                .ws_size = tpu_ws_size_bf16_amx,
                                .gemm = tpu_gemm_bf16_amx_16x16,
                                .mr = MR,
                                .nr = NR},
            [TPU_DTYPE_INT8] = {.name = "tpu_gemm_i8_amx_16x16",
                                .packed_size = tpu_packed_size_i8_amx,
                                .pack = tpu_pack_i8_amx,
                                .ws_size = tpu_ws_size_i8_amx,
                                .gemm = tpu_gemm_i8_amx_16x16,
                                .mr = MR,
                                .nr = NR},
        },
    .vec = &tpu__vec_avx512, /* the same AVX-512 code as the epilogue */
};
