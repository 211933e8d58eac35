/*
 * tree_ref.c - the portable level-by-level traversal of a padded tree ensemble (see
 * tpu__tree_perfect_t in tpu_kernels.h), and the GEMM strategy's decisions. Branch-free: the
 * child index and the decision are computed, not branched on, so the cost does not depend on
 * the path a row takes.
 */
#include "tpu_kernels.h"

void tpu__tree_perfect_ref(const tpu__tree_perfect_t *p, const float *x, size_t width,
                           size_t rows, float *acc, size_t nt) {
  size_t inner = ((size_t)1 << p->depth) - 1;
  for (size_t r = 0; r < rows; r++) {
    const float *row = x + r * width;
    float *a = acc + r * nt;
    for (size_t t = 0; t < p->ntrees; t++) {
      const int32_t *f = p->feat + t * inner;
      const float *th = p->thr + t * inner;
      size_t i = 0;
      for (int d = 0; d < p->depth; d++) {
        int32_t fe = f[i];
        float v = row[fe & 0x7fffffff];
        int left = v != v ? fe < 0 : p->leq ? v <= th[i] : v < th[i];
        i = 2 * i + 2 - (size_t)left;
      }
      a[p->target[t]] += p->lval[t * (inner + 1) + (i - inner)];
    }
  }
}

void tpu__tree_decide_ref(const int32_t *feat, const float *thr, size_t n, int leq,
                          const float *row, int8_t *out) {
  for (size_t j = 0; j < n; j++) {
    float v = row[feat[j] & 0x7fffffff];
    int go = leq ? v <= thr[j] : v < thr[j]; /* false for NaN */
    out[j] = (int8_t)(go | ((v != v) & (feat[j] < 0)));
  }
}
