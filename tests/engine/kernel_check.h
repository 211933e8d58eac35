/*
 * kernel_check.h - one ISA kernel set against the reference set, called directly, on random
 * shapes up to 700 in every dimension and on the edges of every tile size (shared by
 * test_kernels_avx2.c, test_kernels_avx512.c and test_kernels_amx.c).
 *
 * DESIGN
 * Both sets get the same random inputs (INT8 over the full range -128..127, so the u8·s8 bias
 * trick and -128 are exercised; floats in [-1, 1]); the set under test packs them from [N][K] or
 * [K][N] strides, ref from [N][K]. INT8 must be bit-exact in every output (INT32, FP32 and INT8,
 * with bias and relu: the epilogue is elementwise and specified to the bit); with tanh, equal
 * bit for bit to the set's own vector tanh (tpu__vec_kernels_t.map) of the exact
 * pre-activation, and within 4 ulp of the reference's libm tanhf. FP32 and
 * BF16 may sum in another order: |c - c_ref| <= 2e-5 · Σ_p |a·w| (+ one bf16 ulp of |c_ref|
 * for BF16 output, where the two roundings may land on neighbours), with Σ|a·w| from ref on |A|
 * and |W|. A set that this CPU cannot run is reported as skipped on stdout, never passed
 * silently.
 */
#ifndef TPU_KERNEL_CHECK_H
#define TPU_KERNEL_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

static const size_t kc_edges[] = {1,  2,  3,  4,  5,  7,  8,  9,  15,  16,  17,  31,  32, 33,
                                  47, 48, 49, 63, 64, 65, 95, 96, 97, 127, 128, 129, 700};
#define KC_NEDGES (sizeof kc_edges / sizeof kc_edges[0])

static size_t kc_dim(void) {
  if (tpu_test_rand() & 1) return kc_edges[tpu_test_rand_range(0, (long)KC_NEDGES - 1)];
  return (size_t)tpu_test_rand_range(1, 700);
}

static void *kc_alloc(size_t bytes) {
  void *p = tpu__aligned_alloc(bytes ? bytes : 1);
  CU_ASSERT_FATAL(p != NULL);
  return p;
}

/* Packs [N][K] `nk` with `kern`, from [K][N] strides when kn (through a transposed copy). */
static void *kc_pack(const tpu__dtype_kernels_t *kern, size_t k, size_t n, const void *nk,
                     size_t es, int kn) {
  void *dst = kc_alloc(kern->packed_size(k, n));
  if (!kn) {
    kern->pack(k, n, nk, k, 1, dst);
    return dst;
  }
  char *t = kc_alloc(k * n * es);
  for (size_t j = 0; j < n; j++)
    for (size_t p = 0; p < k; p++) memcpy(t + (p * n + j) * es, (const char *)nk + (j * k + p) * es, es);
  kern->pack(k, n, t, 1, n, dst);
  free(t);
  return dst;
}

/* Runs `kern` on the whole of g (with its own packed weights and a workspace). */
static void kc_run(const tpu__dtype_kernels_t *kern, tpu__gemm_args_t g, const void *packed) {
  size_t wsz = kern->ws_size ? kern->ws_size(g.k) : 0;
  void *ws = wsz ? kc_alloc(wsz) : NULL;
  g.w = packed;
  kern->gemm(&g, 0, g.m, 0, g.n, ws);
  free(ws);
}

static size_t kc_cmp_exact(const char *what, const void *x, const void *y, size_t count,
                           size_t es, size_t m, size_t k, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < count; i++)
    if (memcmp((const char *)x + i * es, (const char *)y + i * es, es) != 0) bad++;
  if (bad) printf("\n  %s %zux%zux%zu: %zu of %zu differ\n", what, m, k, n, bad, count);
  return bad;
}

static void kc_check_i8(const tpu__kernel_set_t *ks, size_t m, size_t k, size_t n, int kn,
                        int extreme) {
  const tpu__dtype_kernels_t *ref = &tpu__kernels_ref.dt[TPU_DTYPE_INT8], *kern = &ks->dt[TPU_DTYPE_INT8];
  int8_t *a = kc_alloc(m * k), *w = kc_alloc(k * n), *q1 = kc_alloc(m * n), *q2 = kc_alloc(m * n);
  int32_t *c1 = kc_alloc(m * n * 4), *c2 = kc_alloc(m * n * 4);
  float *as = kc_alloc(m * 4), *wsc = kc_alloc(n * 4), *bias = kc_alloc(n * 4);
  float *f1 = kc_alloc(m * n * 4), *f2 = kc_alloc(m * n * 4);
  for (size_t i = 0; i < m * k; i++) a[i] = extreme ? -128 : (int8_t)tpu_test_rand_range(-128, 127);
  for (size_t i = 0; i < k * n; i++) w[i] = extreme ? -128 : (int8_t)tpu_test_rand_range(-128, 127);
  for (size_t i = 0; i < m; i++) as[i] = tpu_test_rand_float(0.001f, 0.05f);
  for (size_t j = 0; j < n; j++) {
    wsc[j] = tpu_test_rand_float(0.001f, 0.05f);
    bias[j] = tpu_test_rand_float(-2.0f, 2.0f);
  }
  void *pr = kc_pack(ref, k, n, w, 1, 0), *pk = kc_pack(kern, k, n, w, 1, kn);
  char what[80];
  tpu__gemm_args_t g = {.m = m, .k = k, .n = n, .a = a, .act = TPU_ACT_NONE,
                        .out_dtype = TPU_DTYPE_INT32, .ldc = n};
  g.c = c1, kc_run(ref, g, pr);
  g.c = c2, kc_run(kern, g, pk);
  snprintf(what, sizeof what, "%s INT8->INT32%s", ks->name, extreme ? " all -128" : "");
  TPU_ASSERT_SEED(kc_cmp_exact(what, c1, c2, m * n, 4, m, k, n) == 0);

  g.a_scales = as, g.w_scales = wsc;
  for (int v = 0; v < 3; v++) {
    g.bias = v ? bias : NULL;
    g.act = v == 0 ? TPU_ACT_NONE : v == 1 ? TPU_ACT_RELU : TPU_ACT_TANH;
    g.out_dtype = TPU_DTYPE_FP32;
    g.c = f1, kc_run(ref, g, pr);
    g.c = f2, kc_run(kern, g, pk);
    snprintf(what, sizeof what, "%s INT8->FP32 %s", ks->name, tpu_act_name(g.act));
    if (g.act != TPU_ACT_TANH) {
      TPU_ASSERT_SEED(kc_cmp_exact(what, f1, f2, m * n, 4, m, k, n) == 0);
      continue;
    }
    /* tanh is the set's vector math: bit for bit its map() of the exact pre-activation, and
     * within a few ulp of the reference's (libm's tanhf is itself within 2.1). */
    g.act = TPU_ACT_NONE;
    float *pre = kc_alloc(m * n * 4);
    g.c = pre, kc_run(kern, g, pk);
    ks->vec->map(TPU__VF_TANH, pre, pre, m * n);
    TPU_ASSERT_SEED(kc_cmp_exact(what, pre, f2, m * n, 4, m, k, n) == 0);
    size_t far = 0;
    for (size_t i = 0; i < m * n; i++) {
      float d = fabsf(f1[i] - f2[i]), u = nextafterf(fabsf(f1[i]), INFINITY) - fabsf(f1[i]);
      if (d > 4 * u) far++;
    }
    if (far) printf("\n  %s: %zu of %zu differ from ref by > 4 ulp\n", what, far, m * n);
    TPU_ASSERT_SEED(far == 0);
    free(pre);
  }
  g.bias = bias, g.act = TPU_ACT_RELU, g.out_dtype = TPU_DTYPE_INT8;
  g.out_scale = 0.02f * sqrtf((float)k);
  g.c = q1, kc_run(ref, g, pr);
  g.c = q2, kc_run(kern, g, pk);
  snprintf(what, sizeof what, "%s INT8->INT8", ks->name);
  TPU_ASSERT_SEED(kc_cmp_exact(what, q1, q2, m * n, 1, m, k, n) == 0);
  free(a), free(w), free(q1), free(q2), free(c1), free(c2), free(as), free(wsc), free(bias);
  free(f1), free(f2), free(pr), free(pk);
}

/* FP32 or BF16 compute; out FP32, or BF16 for BF16 compute when out_bf16. */
static void kc_check_float(const tpu__kernel_set_t *ks, tpu_dtype_t dt, size_t m, size_t k,
                           size_t n, int kn, int out_bf16) {
  const tpu__dtype_kernels_t *ref = &tpu__kernels_ref.dt[dt], *kern = &ks->dt[dt];
  size_t es = tpu_dtype_size(dt);
  char *a = kc_alloc(m * k * es), *w = kc_alloc(k * n * es);
  char *aa = kc_alloc(m * k * es), *wa = kc_alloc(k * n * es); /* |A|, |W| */
  float *bias = kc_alloc(n * 4), *c1 = kc_alloc(m * n * 4), *c2 = kc_alloc(m * n * 4);
  float *s = kc_alloc(m * n * 4);
  for (size_t i = 0; i < m * k + k * n; i++) {
    float x = tpu_test_rand_float(-1.0f, 1.0f);
    char *dst = i < m * k ? a + i * es : w + (i - m * k) * es;
    char *abs_dst = i < m * k ? aa + i * es : wa + (i - m * k) * es;
    if (dt == TPU_DTYPE_FP32) {
      memcpy(dst, &x, 4);
      x = fabsf(x);
      memcpy(abs_dst, &x, 4);
    } else {
      uint16_t h = tpu_bf16_from_fp32(x), ha = h & 0x7fff;
      memcpy(dst, &h, 2);
      memcpy(abs_dst, &ha, 2);
    }
  }
  for (size_t j = 0; j < n; j++) bias[j] = tpu_test_rand_float(-1.0f, 1.0f);
  void *pr = kc_pack(ref, k, n, w, es, 0), *pk = kc_pack(kern, k, n, w, es, kn);
  void *pa = kc_pack(ref, k, n, wa, es, 0);
  tpu__gemm_args_t g = {.m = m, .k = k, .n = n, .a = aa, .act = TPU_ACT_NONE,
                        .out_dtype = TPU_DTYPE_FP32, .ldc = n, .c = s};
  kc_run(ref, g, pa); /* s = Σ|a·w| */
  g.a = a, g.bias = bias, g.act = TPU_ACT_RELU;
  g.out_dtype = out_bf16 ? TPU_DTYPE_BF16 : TPU_DTYPE_FP32;
  g.c = c1, kc_run(ref, g, pr);
  g.c = c2, kc_run(kern, g, pk);
  size_t bad = 0;
  for (size_t i = 0; i < m * n; i++) {
    double x = out_bf16 ? tpu_bf16_to_fp32(((uint16_t *)c2)[i]) : c2[i];
    double y = out_bf16 ? tpu_bf16_to_fp32(((uint16_t *)c1)[i]) : c1[i];
    double tol = 2e-5 * (s[i] + fabs(bias[i % n])) + (out_bf16 ? fabs(y) / 128 : 0) + 1e-30;
    if (!(fabs(x - y) <= tol)) {
      if (!bad)
        printf("\n  %s %s%s %zux%zux%zu [%zu][%zu]: got %.9g want %.9g (tol %.3g)\n", ks->name,
               tpu_dtype_name(dt), out_bf16 ? "->BF16" : "", m, k, n, i / n, i % n, x, y, tol);
      bad++;
    }
  }
  TPU_ASSERT_SEED(bad == 0);
  free(a), free(w), free(aa), free(wa), free(bias), free(c1), free(c2), free(s);
  free(pr), free(pk), free(pa);
}

/* Runs `kern` block by block the way the frame may split a run: rows at every multiple of
 * 2·mr and columns at every multiple of nr (for avx512's 48-wide panels that cuts inside its
 * 32-wide tail panels at n = 64, 97, 256). */
static void kc_run_blocks(const tpu__dtype_kernels_t *kern, tpu__gemm_args_t g,
                          const void *packed) {
  size_t wsz = kern->ws_size ? kern->ws_size(g.k) : 0, mr = kern->mr * 2, nr = kern->nr;
  void *ws = wsz ? kc_alloc(wsz) : NULL;
  g.w = packed;
  for (size_t i = 0; i < g.m; i += mr)
    for (size_t j = 0; j < g.n; j += nr)
      kern->gemm(&g, i, g.m - i < mr ? g.m : i + mr, j, g.n - j < nr ? g.n : j + nr, ws);
  free(ws);
}

/* Split runs give the same C as whole ones: INT8 against the reference (exact), FP32 and BF16
 * against the same set's whole run (the same row blocks, so the same sums). */
static void kc_check_blocks(const tpu__kernel_set_t *ks, size_t m, size_t k, size_t n) {
  char what[80];
  {
    const tpu__dtype_kernels_t *ref = &tpu__kernels_ref.dt[TPU_DTYPE_INT8];
    const tpu__dtype_kernels_t *kern = &ks->dt[TPU_DTYPE_INT8];
    int8_t *a = kc_alloc(m * k), *w = kc_alloc(k * n);
    int32_t *c1 = kc_alloc(m * n * 4), *c2 = kc_alloc(m * n * 4);
    float *as = kc_alloc(m * 4), *wsc = kc_alloc(n * 4), *bias = kc_alloc(n * 4);
    for (size_t i = 0; i < m * k; i++) a[i] = (int8_t)tpu_test_rand_range(-128, 127);
    for (size_t i = 0; i < k * n; i++) w[i] = (int8_t)tpu_test_rand_range(-128, 127);
    for (size_t i = 0; i < m; i++) as[i] = tpu_test_rand_float(0.001f, 0.05f);
    for (size_t j = 0; j < n; j++) {
      wsc[j] = tpu_test_rand_float(0.001f, 0.05f);
      bias[j] = tpu_test_rand_float(-2.0f, 2.0f);
    }
    void *pr = kc_pack(ref, k, n, w, 1, 0), *pk = kc_pack(kern, k, n, w, 1, 0);
    tpu__gemm_args_t g = {.m = m, .k = k, .n = n, .a = a, .act = TPU_ACT_NONE,
                          .out_dtype = TPU_DTYPE_INT32, .ldc = n};
    g.c = c1, kc_run(ref, g, pr);
    g.c = c2, kc_run_blocks(kern, g, pk);
    snprintf(what, sizeof what, "%s INT8->INT32 in blocks", ks->name);
    TPU_ASSERT_SEED(kc_cmp_exact(what, c1, c2, m * n, 4, m, k, n) == 0);
    g.a_scales = as, g.w_scales = wsc, g.bias = bias, g.act = TPU_ACT_RELU;
    g.out_dtype = TPU_DTYPE_FP32;
    g.c = c1, kc_run(ref, g, pr);
    g.c = c2, kc_run_blocks(kern, g, pk);
    snprintf(what, sizeof what, "%s INT8->FP32 relu in blocks", ks->name);
    TPU_ASSERT_SEED(kc_cmp_exact(what, c1, c2, m * n, 4, m, k, n) == 0);
    free(a), free(w), free(c1), free(c2), free(as), free(wsc), free(bias), free(pr), free(pk);
  }
  for (int d = 0; d < 2; d++) {
    tpu_dtype_t dt = d ? TPU_DTYPE_BF16 : TPU_DTYPE_FP32;
    const tpu__dtype_kernels_t *kern = &ks->dt[dt];
    size_t es = d ? 2 : 4;
    char *a = kc_alloc(m * k * es), *w = kc_alloc(k * n * es);
    float *c1 = kc_alloc(m * n * 4), *c2 = kc_alloc(m * n * 4);
    for (size_t i = 0; i < m * k + k * n; i++) {
      float x = tpu_test_rand_float(-1.0f, 1.0f);
      char *dst = i < m * k ? a + i * es : w + (i - m * k) * es;
      if (d) {
        uint16_t h = tpu__bf16_rne(x);
        memcpy(dst, &h, 2);
      } else {
        memcpy(dst, &x, 4);
      }
    }
    void *pk = kc_pack(kern, k, n, w, es, 0);
    tpu__gemm_args_t g = {.m = m, .k = k, .n = n, .a = a, .act = TPU_ACT_NONE,
                          .out_dtype = TPU_DTYPE_FP32, .ldc = n};
    g.c = c1, kc_run(kern, g, pk);
    g.c = c2, kc_run_blocks(kern, g, pk);
    snprintf(what, sizeof what, "%s %s in blocks", ks->name, tpu_dtype_name(dt));
    TPU_ASSERT_SEED(kc_cmp_exact(what, c1, c2, m * n, 4, m, k, n) == 0);
    free(a), free(w), free(c1), free(c2), free(pk);
  }
}

/* Runs every check on `isa`; returns 0 and prints a line when the set is not available here. */
static int kc_check_set(const char *isa, int rounds) {
  const tpu__kernel_set_t *ks = NULL;
  tpu_status_t st = tpu__kernels_select(isa, &ks);
  if (st != TPU_OK) {
    printf("\n  skipped: set '%s' not available here (%s)\n", isa, tpu_strerror(st));
    return 0;
  }
  /* Edges: every tile boundary in each position, the 700 limit, and -128 everywhere. */
  kc_check_i8(ks, 700, 700, 700, 0, 0);
  kc_check_i8(ks, 17, 700, 97, 1, 1);
  kc_check_i8(ks, 1, 1, 1, 0, 1);
  for (size_t e = 0; e < KC_NEDGES; e++) {
    size_t d = kc_edges[e], o = kc_edges[(e * 7 + 3) % KC_NEDGES];
    kc_check_i8(ks, d, o, 33, e & 1, 0);
    kc_check_i8(ks, 9, d, o, !(e & 1), 0);
    kc_check_float(ks, TPU_DTYPE_FP32, o, 65, d, e & 1, 0);
    kc_check_float(ks, TPU_DTYPE_BF16, d, o, 49, !(e & 1), e & 2);
  }
  kc_check_blocks(ks, 37, 300, 256);
  kc_check_blocks(ks, 9, 33, 64);
  kc_check_blocks(ks, 1, 257, 97);
  kc_check_blocks(ks, 20, 64, 1024);
  kc_check_float(ks, TPU_DTYPE_FP32, 700, 700, 700, 1, 0);
  kc_check_float(ks, TPU_DTYPE_BF16, 700, 700, 700, 0, 1);
  for (int r = 0; r < rounds; r++) {
    size_t m = kc_dim(), k = kc_dim(), n = kc_dim();
    while (m * k * n > ((size_t)40 << 20)) /* keeps the reference's time bounded */
      m = m > 8 ? m / 2 : m, n = n > 8 ? n / 2 : n;
    kc_check_i8(ks, m, k, n, r & 1, 0);
    kc_check_float(ks, TPU_DTYPE_FP32, m, k, n, r & 1, 0);
    kc_check_float(ks, TPU_DTYPE_BF16, m, k, n, !(r & 1), r & 2);
  }
  return 1;
}

#endif /* TPU_KERNEL_CHECK_H */
