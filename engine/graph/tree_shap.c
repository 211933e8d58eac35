/*
 * tree_shap.c - exact per-feature contributions of a tree ensemble (TreeSHAP: Lundberg, Erion
 * and Lee, "Consistent Individualized Feature Attribution for Tree Ensembles", Algorithm 2),
 * computed as XGBoost's CPU predictor computes pred_contribs, in float32 and in its order, so
 * the two agree to rounding.
 *
 * DESIGN
 * Per tree, a depth-first walk keeps the "unique path" of features split on so far, each with
 * the fraction of training cover that flows down the path when the feature is unknown (zero)
 * and whether the row's own value takes the path (one); extending the path updates the
 * permutation weights of every subset size, and at a leaf each feature's share of the leaf
 * value is the path sum with that feature unwound. A feature met twice on a path is unwound
 * first and extended again. Covers are XGBoost's sum_hessian per node (tpud_node_covers,
 * tpud_leaf_covers); a row's hot branch follows the tree's own rule (NaN: the default branch).
 * Per tree the contributions start at zero plus the tree's expected value in the bias column
 * and are then added to the row's totals; the base value is added to the bias last (XGBoost's
 * order). The path buffers, one block of (D + 2)(D + 3) / 2 elements for depth D, are the
 * caller's scratch, so a row allocates nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "tree_internal.h"

typedef struct {
  int32_t feature;
  float zero, one, pweight;
} path_t;

static void extend_path(path_t *u, unsigned d, float zero, float one, int32_t feature) {
  u[d].feature = feature;
  u[d].zero = zero;
  u[d].one = one;
  u[d].pweight = d == 0 ? 1.0f : 0.0f;
  for (int i = (int)d - 1; i >= 0; i--) {
    u[i + 1].pweight += one * u[i].pweight * (float)(i + 1) / (float)(d + 1);
    u[i].pweight = zero * u[i].pweight * (float)(d - (unsigned)i) / (float)(d + 1);
  }
}

static void unwind_path(path_t *u, unsigned d, unsigned at) {
  const float one = u[at].one, zero = u[at].zero;
  float next = u[d].pweight;
  for (int i = (int)d - 1; i >= 0; --i) {
    if (one != 0) {
      const float tmp = u[i].pweight;
      u[i].pweight = next * (float)(d + 1) / ((float)(i + 1) * one);
      next = tmp - u[i].pweight * zero * (float)(d - (unsigned)i) / (float)(d + 1);
    } else {
      u[i].pweight = (u[i].pweight * (float)(d + 1)) / (zero * (float)(d - (unsigned)i));
    }
  }
  for (unsigned i = at; i < d; ++i) {
    u[i].feature = u[i + 1].feature;
    u[i].zero = u[i + 1].zero;
    u[i].one = u[i + 1].one;
  }
}

static float unwound_sum(const path_t *u, unsigned d, unsigned at) {
  const float one = u[at].one, zero = u[at].zero;
  float next = u[d].pweight, total = 0;
  for (int i = (int)d - 1; i >= 0; --i) {
    if (one != 0) {
      const float tmp = next * (float)(d + 1) / ((float)(i + 1) * one);
      total += tmp;
      next = u[i].pweight - tmp * zero * ((float)(d - (unsigned)i) / (float)(d + 1));
    } else if (zero != 0) {
      total += (u[i].pweight / zero) / ((float)(d - (unsigned)i) / (float)(d + 1));
    }
  }
  return total;
}

/* A branch node both of whose branches end in one leaf (a tree that is a single leaf: the
 * loaders give it such a root) is that leaf. */
static int32_t as_leaf(const tpu__trees_t *p, int32_t at) {
  if (at >= 0 && p->nodes[at].next[0] < 0 && p->nodes[at].next[0] == p->nodes[at].next[1])
    return p->nodes[at].next[0];
  return at;
}

static float cover(const tpu__trees_t *p, int32_t at) {
  return at < 0 ? p->lcover[~at] : p->ncover[at];
}

static float leaf_value(const tpu__trees_t *p, int32_t at) { return p->eweight[p->lfirst[~at]]; }

/* XGBoost's FillNodeMeanValue: the cover-weighted mean of the leaves below `at`. */
static float mean_of(const tpu__trees_t *p, int32_t at) {
  at = as_leaf(p, at);
  if (at < 0) return leaf_value(p, at);
  const tpu__tnode_t *n = &p->nodes[at];
  float r = mean_of(p, n->next[1]) * cover(p, n->next[1]);
  r += mean_of(p, n->next[0]) * cover(p, n->next[0]);
  return r / cover(p, at);
}

/* The depth below `at`, or limit + 1 once deeper than limit (bounded recursion). */
static size_t depth_of(const tpu__trees_t *p, int32_t at, size_t limit) {
  at = as_leaf(p, at);
  if (at < 0) return 0;
  if (limit == 0) return 1;
  size_t l = depth_of(p, p->nodes[at].next[1], limit - 1);
  size_t r = l > limit - 1 ? l : depth_of(p, p->nodes[at].next[0], limit - 1);
  return 1 + (l > r ? l : r);
}

static int32_t group_of(const tpu__trees_t *p, int32_t at) {
  while (at >= 0) at = p->nodes[at].next[1];
  return p->etarget[p->lfirst[~at]];
}

tpu_status_t tpu__shap_prepare(const tpu__trees_t *p, tpu__shap_t *sh, void **blk) {
  *blk = NULL;
  if (!p->ncover || !p->lcover || !p->single) return TPU_EINVAL;
  unsigned char *b = malloc(p->ntrees * (sizeof(float) + sizeof(int32_t)) + 1);
  if (!b) return TPU_ENOMEM;
  float *mean = (float *)b;
  int32_t *group = (int32_t *)(mean + p->ntrees);
  size_t maxd = 0;
  for (size_t t = 0; t < p->ntrees; t++) { /* depth first: mean_of and shap recurse */
    size_t d = depth_of(p, p->roots[t], TPU__SHAP_MAX_DEPTH);
    if (d > TPU__SHAP_MAX_DEPTH) {
      free(b);
      return TPU_ERANGE;
    }
    maxd = d > maxd ? d : maxd;
  }
  for (size_t t = 0; t < p->ntrees; t++) {
    mean[t] = mean_of(p, p->roots[t]);
    group[t] = group_of(p, p->roots[t]);
  }
  *sh = (tpu__shap_t){.maxdepth = maxd, .mean = mean, .group = group};
  *blk = b;
  return TPU_OK;
}

size_t tpu__shap_scratch(const tpu__shap_t *sh, size_t width) {
  size_t d = sh->maxdepth + 2;
  return (d + 1) * (d + 2) / 2 * sizeof(path_t) + (width + 1) * sizeof(float);
}

typedef struct {
  const tpu__trees_t *p;
  const float *row;
  float *phi; /* this tree's contributions (width + 1) */
} walk_t;

static void shap(const walk_t *w, int32_t at, unsigned d, path_t *parent, float pzero,
                 float pone, int32_t pfeature) {
  const tpu__trees_t *p = w->p;
  path_t *u = parent + d + 1;
  memcpy(u, parent, (d + 1) * sizeof *u);
  extend_path(u, d, pzero, pone, pfeature);
  at = as_leaf(p, at);
  if (at < 0) {
    const float v = leaf_value(p, at);
    for (unsigned i = 1; i <= d; ++i) {
      const float s = unwound_sum(u, d, i);
      w->phi[u[i].feature] += s * (u[i].one - u[i].zero) * v;
    }
    return;
  }
  const tpu__tnode_t *n = &p->nodes[at];
  const int32_t f = n->feature;
  const int hb = tpu__tree_branch(n, w->row[f]);
  const int32_t hot = n->next[hb], cold = n->next[!hb];
  const float c = cover(p, at), hz = cover(p, hot) / c, cz = cover(p, cold) / c;
  float izero = 1, ione = 1;
  unsigned k = 0;
  for (; k <= d; ++k)
    if (u[k].feature == f) break;
  if (k != d + 1) { /* split on this feature before: undo that to redo it here */
    izero = u[k].zero;
    ione = u[k].one;
    unwind_path(u, d, k);
    d -= 1;
  }
  shap(w, hot, d + 1, u, hz * izero, ione, f);
  shap(w, cold, d + 1, u, cz * izero, 0, f);
}

void tpu__shap_row(const tpu__trees_t *p, const tpu__shap_t *sh, const float *row, float *phi,
                   void *scratch) {
  const size_t cols = p->width + 1;
  /* scratch: the path block, then one tree's contributions */
  size_t d = sh->maxdepth + 2, npath = (d + 1) * (d + 2) / 2;
  path_t *paths = scratch;
  float *tree = (float *)(paths + npath);
  memset(phi, 0, p->ntargets * cols * sizeof *phi);
  walk_t w = {p, row, tree};
  for (size_t t = 0; t < p->ntrees; t++) {
    memset(tree, 0, cols * sizeof *tree);
    tree[p->width] += sh->mean[t];
    shap(&w, p->roots[t], 0, paths, 1, 1, -1);
    float *out = phi + (size_t)sh->group[t] * cols;
    for (size_t j = 0; j < cols; j++) out[j] += tree[j];
  }
  for (size_t g = 0; g < p->ntargets; g++) phi[g * cols + p->width] += p->base[g];
}
