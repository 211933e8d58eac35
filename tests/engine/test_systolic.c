/*
 * test_systolic.c - the systolic array model: tpu_systolic_cycles against hand-worked counts,
 * tpu_systolic_simulate against those counts, against the formula and against a plain triple
 * loop, and both functions' error paths.
 *
 * DESIGN
 * Per (k-tile, n-tile) pair an R×C array costs load R + fill R-1 + stream M + drain C-1 =
 * 2R + M + C - 2 cycles; the hand-worked cases below spell that arithmetic out so a change to
 * the formula has to change a comment someone reads. The random cases draw fresh shapes and
 * data every run (seed printed on failure) and include the int8 extremes -128 and 127.
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_engine.h"
#include "tpu_test.h"

/* C[m][n] = sum_k A[m][k]·B[n][k] in int64, so the reference itself can never overflow. */
static void ref_matmul(size_t m, size_t k, size_t n, const int8_t *a, const int8_t *b_nk,
                       int64_t *c) {
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < n; j++) {
      int64_t acc = 0;
      for (size_t p = 0; p < k; p++) acc += (int64_t)a[i * k + p] * b_nk[j * k + p];
      c[i * n + j] = acc;
    }
}

/* Runs the simulation and checks its product against the reference and its cycle count
 * against the formula. Returns the simulated cycles (0 on failure). */
static uint64_t check_simulation(unsigned rows, unsigned cols, size_t m, size_t k, size_t n,
                                 const int8_t *a, const int8_t *b_nk) {
  int32_t *c = malloc(m * n * sizeof *c);
  int64_t *want = malloc(m * n * sizeof *want);
  CU_ASSERT_FATAL(c != NULL && want != NULL);
  memset(c, 0x5a, m * n * sizeof *c); /* the simulation must overwrite, not accumulate */
  ref_matmul(m, k, n, a, b_nk, want);

  uint64_t cycles = 0;
  tpu_status_t st = tpu_systolic_simulate(rows, cols, m, k, n, a, b_nk, c, &cycles);
  TPU_ASSERT_SEED(st == TPU_OK);
  size_t bad = 0;
  for (size_t i = 0; i < m * n; i++) bad += c[i] != want[i];
  if (bad)
    fprintf(stderr, "\n  R=%u C=%u M=%zu K=%zu N=%zu: %zu of %zu outputs wrong\n", rows, cols, m,
            k, n, bad, m * n);
  TPU_ASSERT_SEED(bad == 0);
  uint64_t formula = tpu_systolic_cycles(rows, cols, m, k, n);
  if (cycles != formula)
    fprintf(stderr, "\n  R=%u C=%u M=%zu K=%zu N=%zu: simulated %llu cycles, formula %llu\n",
            rows, cols, m, k, n, (unsigned long long)cycles, (unsigned long long)formula);
  TPU_ASSERT_SEED(cycles == formula);
  free(c);
  free(want);
  return st == TPU_OK && bad == 0 ? cycles : 0;
}

static void fill_random(int8_t *x, size_t len, int mode) {
  for (size_t i = 0; i < len; i++) {
    switch (mode) {
    case 0: x[i] = (int8_t)tpu_test_rand_range(-128, 127); break;
    case 1: x[i] = tpu_test_rand_range(0, 1) ? 127 : -128; break; /* only the extremes */
    default: x[i] = -128; break; /* the largest products: (-128)·(-128) = 2^14 */
    }
  }
}

/* ---- tpu_systolic_cycles ---- */

static void test_cycles_hand_worked(void) {
  /* R=C=2, M=1, K=2, N=2: one k-tile, one n-tile.
   * load 2 + fill 1 + stream 1 + drain 1 = 2·2 + 1 + 2 - 2 = 5. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 2, 1, 2, 2), 5);
  /* R=C=2, M=3, K=3, N=1: ceil(3/2) = 2 k-tiles × ceil(1/2) = 1 n-tile × (4 + 3 + 2 - 2 = 7)
   * = 14. The second k-tile uses one of two rows and still pays the full 7. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 2, 3, 3, 1), 14);
  /* 1×1 array, M=2, K=3, N=2: 3 k-tiles × 2 n-tiles × (load 1 + stream 2 = 2 + 2 + 1 - 2 = 3)
   * = 18. No fill and no drain with a single PE. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(1, 1, 2, 3, 2), 18);
  /* K and N smaller than the array: R=4, C=8, M=2, K=3, N=5: 1 × 1 × (8 + 2 + 8 - 2) = 16,
   * the same as a full K=4, N=8 tile. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(4, 8, 2, 3, 5), 16);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(4, 8, 2, 4, 8), 16);
  /* Exact multiples: R=2, C=3, M=4, K=4, N=6: 2 k-tiles × 2 n-tiles × (4 + 4 + 3 - 2 = 9)
   * = 36. One more K or N column opens a third tile: K=5 -> 3 × 2 × 9 = 54. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 3, 4, 4, 6), 36);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 3, 4, 5, 6), 54);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 3, 4, 4, 7), 54);
  /* R and C are not interchangeable: load and fill scale with R, drain with C.
   * 3×1: 6 + 1 + 1 - 2 = 6.  1×3: 2 + 1 + 3 - 2 = 4. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(3, 1, 1, 1, 1), 6);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(1, 3, 1, 1, 1), 4);
  /* A TPUv1-sized layer on a 128×128 array: M=256, K=1024, N=1000:
   * 8 k-tiles × ceil(1000/128) = 8 n-tiles × (256 + 256 + 128 - 2 = 638) = 64 × 638 = 40832. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(128, 128, 256, 1024, 1000), 40832);
}

static void test_cycles_zero_and_overflow(void) {
  CU_ASSERT_EQUAL(tpu_systolic_cycles(0, 2, 1, 1, 1), 0);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 0, 1, 1, 1), 0);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 2, 0, 1, 1), 0);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 2, 1, 0, 1), 0);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(2, 2, 1, 1, 0), 0);

  /* Per-tile sum on the edge: 1×1, one tile, M + 1 cycles. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(1, 1, UINT64_MAX - 1, 1, 1), UINT64_MAX);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(1, 1, UINT64_MAX, 1, 1), 0);
  /* Tile count on the edge: 2^32 × 2^32 tiles = 2^64. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(1, 1, 1, 1ULL << 32, 1ULL << 32), 0);
  /* Total on the edge: 2 cycles per tile (1×1, M=1). */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(1, 1, 1, (1ULL << 63) - 1, 1), UINT64_MAX - 1);
  CU_ASSERT_EQUAL(tpu_systolic_cycles(1, 1, 1, 1ULL << 63, 1), 0);
  /* The largest array must not wrap in 32 bits: 2·R + 1 + C - 2 with R = C = 2^32 - 1 is
   * 3·(2^32 - 1) - 1. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(UINT_MAX, UINT_MAX, 1, 1, 1), 3 * (uint64_t)UINT_MAX - 1);
  /* ceil(K/R) at K = 2^64 - 1 = (2^32 - 1)(2^32 + 1): 2^32 + 1 tiles of 2^33 - 2 cycles. */
  CU_ASSERT_EQUAL(tpu_systolic_cycles(UINT_MAX, 1, 1, UINT64_MAX, 1), 0);
}

/* ---- tpu_systolic_simulate ---- */

static void test_simulate_hand_worked(void) {
  int32_t c[6];
  uint64_t cycles;

  /* R=C=2, M=1, K=2, N=2: A = [1 2], B = [[3 4] [5 6]]:
   * C = [1·3 + 2·4, 1·5 + 2·6] = [11 17], in 2·2 + 1 + 2 - 2 = 5 cycles. */
  {
    const int8_t a[] = {1, 2}, b[] = {3, 4, 5, 6};
    CU_ASSERT_EQUAL_FATAL(tpu_systolic_simulate(2, 2, 1, 2, 2, a, b, c, &cycles), TPU_OK);
    CU_ASSERT_EQUAL(c[0], 11);
    CU_ASSERT_EQUAL(c[1], 17);
    CU_ASSERT_EQUAL(cycles, 5);
  }
  /* R=C=2, M=3, K=3, N=1: A = [[1 2 3] [4 5 6] [7 8 9]], B = [[1 -1 2]]:
   * C = [1 - 2 + 6, 4 - 5 + 12, 7 - 8 + 18] = [5 11 17]; k-tile 0 gives [-1 -1 -1] and
   * k-tile 1 adds [6 12 18] in the accumulators. 2 × 1 × (4 + 3 + 2 - 2) = 14 cycles. */
  {
    const int8_t a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, b[] = {1, -1, 2};
    CU_ASSERT_EQUAL_FATAL(tpu_systolic_simulate(2, 2, 3, 3, 1, a, b, c, &cycles), TPU_OK);
    CU_ASSERT_EQUAL(c[0], 5);
    CU_ASSERT_EQUAL(c[1], 11);
    CU_ASSERT_EQUAL(c[2], 17);
    CU_ASSERT_EQUAL(cycles, 14);
  }
  /* 1×1 array, M=2, K=3, N=2: A = [[1 2 3] [-1 0 1]], B = [[1 1 1] [2 0 -1]]:
   * C = [[1+2+3, 2+0-3] [-1+0+1, -2+0-1]] = [[6 -1] [0 -3]],
   * 3 × 2 × (2 + 2 + 1 - 2 = 3) = 18 cycles. */
  {
    const int8_t a[] = {1, 2, 3, -1, 0, 1}, b[] = {1, 1, 1, 2, 0, -1};
    CU_ASSERT_EQUAL_FATAL(tpu_systolic_simulate(1, 1, 2, 3, 2, a, b, c, &cycles), TPU_OK);
    CU_ASSERT_EQUAL(c[0], 6);
    CU_ASSERT_EQUAL(c[1], -1);
    CU_ASSERT_EQUAL(c[2], 0);
    CU_ASSERT_EQUAL(c[3], -3);
    CU_ASSERT_EQUAL(cycles, 18);
  }
  /* K and N smaller than the array: R=4, C=8, M=2, K=3, N=3, A = [[1 2 3] [4 5 6]],
   * B = identity: C = A, in 8 + 2 + 8 - 2 = 16 cycles (padding rows and columns still pay). */
  {
    const int8_t a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    CU_ASSERT_EQUAL_FATAL(tpu_systolic_simulate(4, 8, 2, 3, 3, a, b, c, &cycles), TPU_OK);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(c[i], i + 1);
    CU_ASSERT_EQUAL(cycles, 16);
  }
  /* R ≠ C: a 3×1 array and a 1×3 array on M=K=N=1, 2 · 3 = 6: 6 + 1 + 1 - 2 = 6 cycles and
   * 2 + 1 + 3 - 2 = 4 cycles. */
  {
    const int8_t a[] = {2}, b[] = {3};
    CU_ASSERT_EQUAL_FATAL(tpu_systolic_simulate(3, 1, 1, 1, 1, a, b, c, &cycles), TPU_OK);
    CU_ASSERT_EQUAL(c[0], 6);
    CU_ASSERT_EQUAL(cycles, 6);
    CU_ASSERT_EQUAL_FATAL(tpu_systolic_simulate(1, 3, 1, 1, 1, a, b, c, &cycles), TPU_OK);
    CU_ASSERT_EQUAL(c[0], 6);
    CU_ASSERT_EQUAL(cycles, 4);
  }
}

/* Exact multiples of the array in K and N, checked against the reference: R=2, C=3, M=4,
 * K=4, N=6 -> 2 × 2 × (4 + 4 + 3 - 2 = 9) = 36 cycles. */
static void test_simulate_exact_multiples(void) {
  int8_t a[4 * 4], b[6 * 4];
  fill_random(a, sizeof a, 0);
  fill_random(b, sizeof b, 0);
  CU_ASSERT_EQUAL(check_simulation(2, 3, 4, 4, 6, a, b), 36);
}

/* Random shapes M, K, N in 1..40 on arrays up to 16×16, random data with the extremes mixed
 * in: product equals the triple loop, cycle count equals the formula. */
static void test_simulate_random(void) {
  int8_t *a = malloc(40 * 40), *b = malloc(40 * 40);
  CU_ASSERT_FATAL(a != NULL && b != NULL);
  for (int iter = 0; iter < 400; iter++) {
    unsigned rows = (unsigned)tpu_test_rand_range(1, 16);
    unsigned cols = (unsigned)tpu_test_rand_range(1, 16);
    size_t m = (size_t)tpu_test_rand_range(1, 40), k = (size_t)tpu_test_rand_range(1, 40),
           n = (size_t)tpu_test_rand_range(1, 40);
    fill_random(a, m * k, (int)tpu_test_rand_range(0, 2));
    fill_random(b, n * k, (int)tpu_test_rand_range(0, 2));
    if (!check_simulation(rows, cols, m, k, n, a, b)) break; /* one failure is enough to read */
  }
  free(a);
  free(b);
}

/* The accumulators at their limit: K = 131071 products of (-128)·(-128) = 2^14 sum to
 * 2147467264, just under INT32_MAX; one more K is refused as an overflow. */
static void test_simulate_int32_limit(void) {
  const size_t k = 131071;
  int8_t *a = malloc(k), *b = malloc(2 * k);
  CU_ASSERT_FATAL(a != NULL && b != NULL);
  memset(a, 0x80, k);    /* -128 */
  memset(b, 0x80, k);    /* output 0: -128 · -128 */
  memset(b + k, 127, k); /* output 1: -128 · 127 */
  int32_t c[2];
  uint64_t cycles = 0;
  /* 1×1 array: K k-tiles × 2 n-tiles × (2 + 1 + 1 - 2 = 2) = 4K cycles. */
  CU_ASSERT_EQUAL_FATAL(tpu_systolic_simulate(1, 1, 1, k, 2, a, b, c, &cycles), TPU_OK);
  CU_ASSERT_EQUAL(c[0], 2147467264);
  CU_ASSERT_EQUAL(c[1], -131071 * 16256);
  CU_ASSERT_EQUAL(cycles, 4 * (uint64_t)k);
  cycles = 7;
  CU_ASSERT_EQUAL(tpu_systolic_simulate(1, 1, 1, k + 1, 1, a, b, c, &cycles), TPU_EOVERFLOW);
  CU_ASSERT_EQUAL(cycles, 7);
  free(a);
  free(b);

  /* Many full k-tiles of extremes on a wider array, against the reference. */
  int8_t a2[3 * 1000], b2[5 * 1000];
  fill_random(a2, sizeof a2, 2);
  fill_random(b2, sizeof b2, 1);
  check_simulation(16, 4, 3, 1000, 5, a2, b2);
}

static void test_simulate_errors(void) {
  const int8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4};
  int32_t c[4] = {-1, -1, -1, -1};
  uint64_t cycles = 99;

  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 2, 2, 2, NULL, b, c, &cycles), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 2, 2, 2, a, NULL, c, &cycles), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 2, 2, 2, a, b, NULL, &cycles), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 2, 2, 2, a, b, c, NULL), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(0, 2, 2, 2, 2, a, b, c, &cycles), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 0, 2, 2, 2, a, b, c, &cycles), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 0, 2, 2, a, b, c, &cycles), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 2, 0, 2, a, b, c, &cycles), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 2, 2, 0, a, b, c, &cycles), TPU_EINVAL);

  /* Sizes no buffer could have, rejected before anything is read or written. */
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, SIZE_MAX, 2, 1, a, b, c, &cycles), TPU_EOVERFLOW);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, 1, 2, SIZE_MAX, a, b, c, &cycles), TPU_EOVERFLOW);
  CU_ASSERT_EQUAL(tpu_systolic_simulate(2, 2, SIZE_MAX / 8, 1, 3, a, b, c, &cycles),
                  TPU_EOVERFLOW); /* M·N fits, M·N·4 bytes of C do not */
  /* A register file of (2^32 - 1)^2 PEs does not fit in the address space's byte count. */
  CU_ASSERT_EQUAL(tpu_systolic_simulate(UINT_MAX, UINT_MAX, 1, 1, 1, a, b, c, &cycles),
                  TPU_EOVERFLOW);
  /* A register file of 2^52 PEs has a byte count but no memory. ASan aborts on such requests
   * instead of returning NULL, so this case needs a plain build. */
#if !defined(__SANITIZE_ADDRESS__)
  CU_ASSERT_EQUAL(tpu_systolic_simulate(UINT_MAX, 1u << 20, 1, 1, 1, a, b, c, &cycles),
                  TPU_ENOMEM);
#endif

  /* Failures write neither the count nor C. */
  CU_ASSERT_EQUAL(cycles, 99);
  for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(c[i], -1);
}

TPU_TEST_SUITE(systolic,
               {"cycles_hand_worked", test_cycles_hand_worked},
               {"cycles_zero_and_overflow", test_cycles_zero_and_overflow},
               {"simulate_hand_worked", test_simulate_hand_worked},
               {"simulate_exact_multiples", test_simulate_exact_multiples},
               {"simulate_random", test_simulate_random},
               {"simulate_int32_limit", test_simulate_int32_limit},
               {"simulate_errors", test_simulate_errors})
