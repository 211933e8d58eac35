/*
 * systolic.c - the model of an R×C weight-stationary systolic array: its cycle formula and a
 * cycle-stepped simulation of it.
 *
 * DESIGN
 * This file owns the accelerator model the engine's statistics are expressed in. It has two
 * halves that must agree: tpu_systolic_cycles, the closed formula the hot path calls once per
 * plan run, and tpu_systolic_simulate, a slow PE-by-PE simulation that exists only to be the
 * oracle for the formula (and for the INT8 products). The simulation therefore must never call
 * or reuse the formula: it steps registers and counts the cycles it stepped, and the tests
 * compare the two.
 *
 * The simulated array, for each (k-tile, n-tile) pair in turn (k-tiles inner), with k0, n0 the
 * tile's first K and N index:
 *  - Load: the weight registers form R vertical shift registers. Each cycle every row takes the
 *    weights of the row above and row 0 takes the next row from the top edge; rows are fed
 *    bottom-first, so after R cycles PE(r,c) holds W[n0+c][k0+r] (0 beyond K or N).
 *  - Stream: each cycle every PE takes its input register from its left neighbour and its
 *    partial sum from the neighbour above, both as they were at the end of the previous cycle,
 *    and stores in = left.in, psum = above.psum + weight·in. Column 0's left neighbour is the
 *    edge, which feeds row r with a[t-r][k0+r] in streaming cycle t (the skew; 0 beyond K);
 *    row 0's upper neighbour is a constant 0. A partial sum in row R-1 has seen all R products
 *    of its column, so at the end of each cycle the bottom row's sums leave the array and are
 *    added into C (the accumulator memory, outside the array: successive k-tiles accumulate
 *    there without extra cycles). The tile ends in the cycle its last output leaves.
 * Each register carries a tag, the row m of A it belongs to or BUBBLE, so the bottom edge
 * knows which outputs it is receiving and when all M·C of them (padding columns included:
 * the array doesn't know they are padding) have left; nothing decides the tile length but that.
 * The registers are updated in place, sweeping bottom-up and right-to-left, so each PE reads
 * its upper and left neighbours before they are overwritten in the same cycle: the same result
 * as double-buffering, without the second copy.
 *
 * Arithmetic is INT8 × INT8 into INT32 like the MXU. The simulator refuses K > SIM_MAX_K, where
 * a sum could leave int32 (signed overflow is undefined in C, and a wrapped result would be no
 * use as an oracle). It allocates only the R×C register file; it never does I/O.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_engine.h"

/* Largest K whose worst-case dot product, K·(-128)·(-128), still fits in int32. */
#define SIM_MAX_K ((size_t)INT32_MAX / (128 * 128))

/* Tag of a register that holds no data (a bubble). Real rows of A are < m <= SIZE_MAX. */
#define BUBBLE SIZE_MAX

uint64_t tpu_systolic_cycles(unsigned rows, unsigned cols, uint64_t m, uint64_t k, uint64_t n) {
  if (rows == 0 || cols == 0 || m == 0 || k == 0 || n == 0) return 0;
  uint64_t k_tiles = k / rows + (k % rows != 0); /* ceil without the k + rows - 1 overflow */
  uint64_t n_tiles = n / cols + (n % cols != 0);
  /* 2R + C - 2 >= 1 and fits easily: R and C are below 2^32. Only adding M can overflow. */
  uint64_t per_tile = 2 * (uint64_t)rows + cols - 2, tiles, total;
  if (__builtin_add_overflow(per_tile, m, &per_tile)) return 0;
  if (__builtin_mul_overflow(k_tiles, n_tiles, &tiles)) return 0;
  if (__builtin_mul_overflow(tiles, per_tile, &total)) return 0;
  return total;
}

/* One processing element's registers. */
typedef struct {
  int32_t psum;    /* partial sum, passed down next cycle */
  int8_t weight;   /* stationary weight; during loading, a stage of the column's shift register */
  int8_t in;       /* input value, passed right next cycle */
  size_t in_row;   /* row of A the input belongs to, or BUBBLE */
  size_t psum_row; /* row of C the partial sum belongs to, or BUBBLE */
} pe_t;

/* The problem and the array, shared by the per-phase helpers. */
typedef struct {
  size_t rows, cols; /* R, C */
  size_t m, k, n;
  const int8_t *a;    /* [M][K] */
  const int8_t *b_nk; /* [N][K] */
  int32_t *c;         /* [M][N], the accumulator memory */
  pe_t *pe;           /* [R][C] */
  uint64_t cycles;
} sim_t;

/* Advances the cycle counter; -1 if it would overflow uint64. */
static int tick(sim_t *s) { return __builtin_add_overflow(s->cycles, 1, &s->cycles) ? -1 : 0; }

/* Shifts the tile's weights in from the top edge, one array row per cycle. */
static int load_weights(sim_t *s, size_t k0, size_t n0) {
  for (size_t step = 0; step < s->rows; step++) {
    for (size_t r = s->rows - 1; r > 0; r--)
      for (size_t c = 0; c < s->cols; c++)
        s->pe[r * s->cols + c].weight = s->pe[(r - 1) * s->cols + c].weight;
    /* Bottom row first: the row fed at this step ends up rows-1-step rows down. */
    size_t kk = k0 + (s->rows - 1 - step);
    for (size_t c = 0; c < s->cols; c++) {
      size_t nn = n0 + c;
      s->pe[c].weight = kk < s->k && nn < s->n ? s->b_nk[nn * s->k + kk] : 0;
    }
    if (tick(s)) return -1;
  }
  return 0;
}

/* One streaming cycle t (0 = the tile's first). Returns how many valid partial sums the array
 * holds afterwards, so the caller can tell a finished pipeline from a stalled one. */
static size_t stream_step(sim_t *s, size_t k0, size_t t) {
  size_t live = 0;
  for (size_t r = s->rows; r-- > 0;) {
    for (size_t c = s->cols; c-- > 0;) {
      pe_t *p = &s->pe[r * s->cols + c];
      if (c > 0) {
        const pe_t *left = p - 1;
        p->in = left->in;
        p->in_row = left->in_row;
      } else if (t >= r && t - r < s->m) { /* the left edge, skewed by r cycles */
        size_t kk = k0 + r;
        p->in_row = t - r;
        p->in = kk < s->k ? s->a[(t - r) * s->k + kk] : 0;
      } else {
        p->in = 0;
        p->in_row = BUBBLE;
      }
      int32_t above = 0;
      if (r > 0) {
        const pe_t *up = p - s->cols;
        /* The skew exists so that a row's input and the partial sum coming down to meet it
         * belong to the same row of A. */
        assert(up->psum_row == p->in_row);
        above = up->psum;
      }
      if (p->in_row == BUBBLE) {
        p->psum = 0;
        p->psum_row = BUBBLE;
      } else {
        /* The sum holds at most min(r+1, K) non-zero products of magnitude <= 2^14, and
         * K <= SIM_MAX_K, so it cannot overflow. */
        p->psum = above + (int32_t)p->weight * p->in;
        p->psum_row = p->in_row;
        live++;
      }
    }
  }
  return live;
}

/* Runs one tile: load, then stream until all M·C outputs have left the bottom edge. */
static int run_tile(sim_t *s, size_t k0, size_t n0) {
  /* A previous tile leaves its last values in flight toward the edges; in hardware they are
   * discarded there. Clearing them here keeps stale tags from ever reaching the bottom edge. */
  for (size_t i = 0; i < s->rows * s->cols; i++) {
    s->pe[i].psum = 0;
    s->pe[i].in = 0;
    s->pe[i].in_row = BUBBLE;
    s->pe[i].psum_row = BUBBLE;
  }
  if (load_weights(s, k0, n0)) return -1;

  size_t want = s->m * s->cols, got = 0; /* product checked by the caller */
  const pe_t *bottom = &s->pe[(s->rows - 1) * s->cols];
  for (size_t t = 0; got < want; t++) {
    size_t live = stream_step(s, k0, t);
    if (tick(s)) return -1;
    for (size_t c = 0; c < s->cols; c++) {
      if (bottom[c].psum_row == BUBBLE) continue;
      got++;
      if (n0 + c < s->n) /* padding columns' sums (all zero) are dropped */
        s->c[bottom[c].psum_row * s->n + n0 + c] += bottom[c].psum;
    }
    /* Every input injected and nothing left in flight, yet outputs missing: a simulator bug.
     * Stop rather than spin; the assert makes it loud in debug builds. */
    if (live == 0 && t >= s->m + s->rows - 1 && got < want) {
      assert(!"systolic pipeline drained before all outputs left");
      break;
    }
  }
  return 0;
}

tpu_status_t tpu_systolic_simulate(unsigned rows, unsigned cols, size_t m, size_t k, size_t n,
                                   const int8_t *a, const int8_t *b_nk, int32_t *c,
                                   uint64_t *cycles) {
  if (!a || !b_nk || !c || !cycles) return TPU_EINVAL;
  if (rows == 0 || cols == 0 || m == 0 || k == 0 || n == 0) return TPU_EINVAL;
  if (k > SIM_MAX_K) return TPU_EOVERFLOW;

  size_t npe, pe_bytes, mk, nk, mn, c_bytes, want, clock_end;
  if (__builtin_mul_overflow((size_t)rows, (size_t)cols, &npe) ||
      __builtin_mul_overflow(npe, sizeof(pe_t), &pe_bytes) ||
      __builtin_mul_overflow(m, k, &mk) || __builtin_mul_overflow(n, k, &nk) ||
      __builtin_mul_overflow(m, n, &mn) || __builtin_mul_overflow(mn, sizeof(int32_t), &c_bytes) ||
      __builtin_mul_overflow(m, (size_t)cols, &want) ||
      /* the streaming clock t runs to M + R + C - 3 */
      __builtin_add_overflow(m, (size_t)rows, &clock_end) ||
      __builtin_add_overflow(clock_end, (size_t)cols, &clock_end))
    return TPU_EOVERFLOW;

  sim_t s = {.rows = rows, .cols = cols, .m = m, .k = k, .n = n,
             .a = a, .b_nk = b_nk, .c = c, .cycles = 0};
  s.pe = malloc(pe_bytes);
  if (!s.pe) return TPU_ENOMEM;
  memset(c, 0, c_bytes);

  tpu_status_t st = TPU_OK;
  /* k <= SIM_MAX_K and 4·n <= SIZE_MAX, so neither k0 + rows nor n0 + cols can wrap. */
  for (size_t n0 = 0; n0 < n; n0 += cols) {
    for (size_t k0 = 0; k0 < k; k0 += rows) {
      if (run_tile(&s, k0, n0)) {
        st = TPU_EOVERFLOW;
        goto done;
      }
    }
  }
done:
  free(s.pe);
  if (st == TPU_OK) *cycles = s.cycles;
  return st;
}
