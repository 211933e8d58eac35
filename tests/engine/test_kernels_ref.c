/*
 * test_kernels_ref.c - the reference kernel set (engine/kernels/ref/kernels_ref.c) and the
 * block contract of tpu_kernels.h that every set must keep.
 *
 * DESIGN
 * Calls kernels directly, behind the frame: ref's packed layout is plain [N][K] whatever the
 * source strides, its FP32 sums run p = 0..k-1 in order (so a sequential binary32 loop matches
 * it bit for bit), and packed_size reports overflow as 0. The block contract is checked for
 * every available set: gemm on a tile-aligned block with ldc > n writes exactly that block, with
 * the same bits a full-matrix call produces, and leaves every other element alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

static void test_packed_size(void) {
  const tpu__kernel_set_t *ref = &tpu__kernels_ref;
  CU_ASSERT_EQUAL(ref->dt[TPU_DTYPE_FP32].packed_size(3, 5), 60);
  CU_ASSERT_EQUAL(ref->dt[TPU_DTYPE_BF16].packed_size(3, 5), 30);
  CU_ASSERT_EQUAL(ref->dt[TPU_DTYPE_INT8].packed_size(3, 5), 15);
  CU_ASSERT_EQUAL(ref->dt[TPU_DTYPE_FP32].packed_size(SIZE_MAX / 2, 2), 0);
  CU_ASSERT_EQUAL(ref->dt[TPU_DTYPE_BF16].packed_size(SIZE_MAX / 4, 3), 0);
  CU_ASSERT_EQUAL(ref->dt[TPU_DTYPE_INT8].packed_size(SIZE_MAX, 2), 0);
  CU_ASSERT_STRING_EQUAL(ref->name, "ref");
  CU_ASSERT_EQUAL(ref->cpu, 0);
}

/* Packing [N][K] and [K][N] sources gives the same [N][K] rows. */
static void test_pack_layout(void) {
  enum { K = 7, N = 5 };
  float nk[N * K], kn[K * N], out1[N * K], out2[N * K];
  int8_t q_nk[N * K], q_kn[K * N], q1[N * K], q2[N * K];
  for (int j = 0; j < N; j++)
    for (int p = 0; p < K; p++) {
      nk[j * K + p] = kn[p * N + j] = (float)(j * 100 + p);
      q_nk[j * K + p] = q_kn[p * N + j] = (int8_t)(j * 10 + p);
    }
  const tpu__dtype_kernels_t *f = &tpu__kernels_ref.dt[TPU_DTYPE_FP32];
  const tpu__dtype_kernels_t *i8 = &tpu__kernels_ref.dt[TPU_DTYPE_INT8];
  f->pack(K, N, nk, K, 1, out1);
  f->pack(K, N, kn, 1, N, out2);
  CU_ASSERT(memcmp(out1, nk, sizeof nk) == 0);
  CU_ASSERT(memcmp(out2, nk, sizeof nk) == 0);
  i8->pack(K, N, q_nk, K, 1, q1);
  i8->pack(K, N, q_kn, 1, N, q2);
  CU_ASSERT(memcmp(q1, q_nk, sizeof q1) == 0 && memcmp(q2, q_nk, sizeof q2) == 0);
}

/* ref's FP32 kernel is a sequential binary32 dot product, bit for bit. */
static void test_ref_fp32_order(void) {
  enum { M = 3, K = 257, N = 4 };
  static float a[M * K], w[N * K], c[M * N];
  for (int i = 0; i < M * K; i++) a[i] = tpu_test_rand_float(-1e3f, 1e3f);
  for (int i = 0; i < N * K; i++) w[i] = tpu_test_rand_float(-1e-3f, 1e3f);
  tpu__gemm_args_t g = {.m = M, .k = K, .n = N, .a = a, .w = w, .act = TPU_ACT_NONE,
                        .out_dtype = TPU_DTYPE_FP32, .c = c, .ldc = N};
  tpu__kernels_ref.dt[TPU_DTYPE_FP32].gemm(&g, 0, M, 0, N, NULL);
  size_t bad = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      volatile float acc = 0.0f;
      for (int p = 0; p < K; p++) acc = acc + a[i * K + p] * w[j * K + p];
      bad += memcmp((const void *)&acc, &c[i * N + j], sizeof(float)) != 0;
    }
  TPU_ASSERT_SEED(bad == 0);
}

/* Block contract for one dtype of one set. */
static void check_blocks(const tpu__kernel_set_t *ks, tpu_dtype_t dt, tpu_dtype_t out) {
  const tpu__dtype_kernels_t *kern = &ks->dt[dt];
  size_t m = 2 * kern->mr + 3, k = 37, n = 2 * kern->nr + 5, ldc = n + 3;
  size_t es = tpu_dtype_size(dt), os = tpu_dtype_size(out);
  char *a = malloc(m * k * es), *src = malloc(k * n * es);
  float *as = malloc(m * 4), *ws = malloc(n * 4), *bias = malloc(n * 4);
  void *packed = tpu__aligned_alloc(kern->packed_size(k, n));
  size_t wsz = kern->ws_size ? kern->ws_size(k) : 0;
  void *work = wsz ? tpu__aligned_alloc(wsz) : NULL;
  unsigned char *full = malloc(m * ldc * os), *part = malloc(m * ldc * os);
  CU_ASSERT_FATAL(a && src && as && ws && bias && packed && full && part && (!wsz || work));
  for (size_t i = 0; i < m * k; i++) {
    if (dt == TPU_DTYPE_FP32) ((float *)a)[i] = tpu_test_rand_float(-1, 1);
    if (dt == TPU_DTYPE_BF16) ((uint16_t *)a)[i] = tpu_bf16_from_fp32(tpu_test_rand_float(-1, 1));
    if (dt == TPU_DTYPE_INT8) ((int8_t *)a)[i] = (int8_t)tpu_test_rand_range(-127, 127);
  }
  for (size_t i = 0; i < k * n; i++) {
    if (dt == TPU_DTYPE_FP32) ((float *)src)[i] = tpu_test_rand_float(-1, 1);
    if (dt == TPU_DTYPE_BF16)
      ((uint16_t *)src)[i] = tpu_bf16_from_fp32(tpu_test_rand_float(-1, 1));
    if (dt == TPU_DTYPE_INT8) ((int8_t *)src)[i] = (int8_t)tpu_test_rand_range(-127, 127);
  }
  for (size_t i = 0; i < m; i++) as[i] = tpu_test_rand_float(0.01f, 0.02f);
  for (size_t j = 0; j < n; j++) {
    ws[j] = tpu_test_rand_float(0.01f, 0.02f);
    bias[j] = tpu_test_rand_float(-1, 1);
  }
  kern->pack(k, n, src, k, 1, packed);
  int raw = out == TPU_DTYPE_INT32;
  tpu__gemm_args_t g = {.m = m, .k = k, .n = n, .a = a,
                        .a_scales = dt == TPU_DTYPE_INT8 ? as : NULL, .w = packed,
                        .w_scales = dt == TPU_DTYPE_INT8 ? ws : NULL, .bias = raw ? NULL : bias,
                        .act = raw ? TPU_ACT_NONE : TPU_ACT_TANH, .out_dtype = out,
                        .out_scale = out == TPU_DTYPE_INT8 ? 0.01f : 0.0f, .ldc = ldc};
  memset(full, 0xa5, m * ldc * os);
  g.c = full;
  kern->gemm(&g, 0, m, 0, n, work);
  /* Tile-aligned block that ends at the clipped edge in both directions. */
  size_t m0 = kern->mr, n0 = kern->nr;
  memset(part, 0x5a, m * ldc * os);
  g.c = part;
  kern->gemm(&g, m0, m, n0, n, work);
  size_t bad = 0;
  for (size_t i = 0; i < m; i++)
    for (size_t j = 0; j < ldc; j++) {
      const unsigned char *pf = full + (i * ldc + j) * os, *pp = part + (i * ldc + j) * os;
      int inside = i >= m0 && j >= n0 && j < n;
      for (size_t b = 0; b < os; b++) {
        if (inside) bad += pp[b] != pf[b];
        else bad += pp[b] != 0x5a;
        if (j >= n) bad += pf[b] != 0xa5; /* padding between rows untouched by full run */
      }
    }
  if (bad) printf("\n  set %s dtype %s out %s: %zu bytes wrong\n", ks->name, tpu_dtype_name(dt),
                  tpu_dtype_name(out), bad);
  TPU_ASSERT_SEED(bad == 0);
  free(a), free(src), free(as), free(ws), free(bias), free(packed), free(work);
  free(full), free(part);
}

static void test_block_contract(void) {
  const tpu__kernel_set_t *sets[8];
  size_t n = tpu__kernels_available(sets, 8);
  for (size_t s = 0; s < n && s < 8; s++) {
    check_blocks(sets[s], TPU_DTYPE_FP32, TPU_DTYPE_FP32);
    check_blocks(sets[s], TPU_DTYPE_BF16, TPU_DTYPE_FP32);
    check_blocks(sets[s], TPU_DTYPE_BF16, TPU_DTYPE_BF16);
    check_blocks(sets[s], TPU_DTYPE_INT8, TPU_DTYPE_FP32);
    check_blocks(sets[s], TPU_DTYPE_INT8, TPU_DTYPE_INT8);
    check_blocks(sets[s], TPU_DTYPE_INT8, TPU_DTYPE_INT32);
  }
}

TPU_TEST_SUITE(engine_kernels_ref,
               {"packed_size", test_packed_size},
               {"pack_layout", test_pack_layout},
               {"ref_fp32_order", test_ref_fp32_order},
               {"block_contract", test_block_contract})
