/*
 * ops_tree.c - the tree-ensemble kernel: ONNX ai.onnx.ml TreeEnsemble (opset 5), traversed
 * exactly, row by row and tree by tree. See exec_internal.h for the prepare/run contract.
 *
 * DESIGN
 * The node's attributes follow TreeEnsemble v5 (every array indexed by node or by leaf):
 *   tree_roots            INTS   per tree: the index of its root node
 *   nodes_featureids      INTS   per node: the input column compared
 *   nodes_splits          FLOATS (or an FP32 TENSOR) per node: the threshold
 *   nodes_modes           INTS (or a UINT8 TENSOR) per node: 0 BRANCH_LEQ (x <= t), 1 BRANCH_LT
 *                         (x < t), 2 BRANCH_GTE, 3 BRANCH_GT, 4 BRANCH_EQ, 5 BRANCH_NEQ; true
 *                         means the comparison holds
 *   nodes_truenodeids, nodes_trueleafs, nodes_falsenodeids, nodes_falseleafs   INTS per node:
 *                         where each branch goes; *leafs[i] = 1 says the id is a leaf index
 *   nodes_missing_value_tracks_true  INTS per node (optional, 0): a NaN feature takes the true
 *                         branch when 1, the false branch when 0, whatever the mode
 *   leaf_targetids        INTS per leaf, leaf_weights FLOATS (or FP32 TENSOR) per leaf
 *   n_targets             INT: the width of the output
 *   aggregate_function    INT: 1 SUM (default), 0 AVERAGE (the sum divided by the tree count)
 *   post_transform        INT: 0 NONE (default), 1 SOFTMAX (per row), 2 LOGISTIC
 * plus, from TreeEnsembleRegressor v3 (v5 dropped it, XGBoost needs it), base_values FLOATS
 * (n_targets values, default zeros), and a second, optional output: the scores before
 * post_transform (the raw margins). X is FP32 [N, F]; Y is FP32 [N, n_targets].
 *
 * Numerics are XGBoost's, so that its models are served bit for bit: a row's score per target
 * starts at base_values and adds each tree's leaf weight in tree order, in float32 (XGBoost's
 * CPU predictor accumulates so; the kernel walks blocks of 64 rows tree by tree, which keeps
 * that order per row); ±Inf compare as ordinary numbers; LOGISTIC is XGBoost 1.7's
 * common::Sigmoid, 1 / (expf(min(-x, 88.7f)) + 1) in float (the clamp makes a margin below
 * -88.7 give 3.0e-39, not 0: it changes nothing else, so ONNX forests lose nothing); SOFTMAX subtracts the row maximum, sums expf terms in double and
 * divides by the float of the sum (XGBoost's common::Softmax). AVERAGE (forests from other
 * libraries) divides the leaf sum by the tree count and then adds base_values, as ONNX Runtime
 * does.
 *
 * prepare validates the whole structure once and refuses, naming the tree and node: arrays of
 * different lengths, a root, child or leaf id out of range, a feature id at or beyond the input
 * width, a target id at or beyond n_targets, a node reached twice (a cycle or shared subtree),
 * a mode or transform it does not take. It copies everything into one block (a compact node
 * array whose children are node indices, or ~leaf for a leaf), so run reads nothing of the
 * graph, allocates nothing and always terminates (the trees are checked acyclic).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

enum { MODE_LEQ = 0, MODE_LT, MODE_GTE, MODE_GT, MODE_EQ, MODE_NEQ };
enum { AGG_AVERAGE = 0, AGG_SUM = 1 };
enum { POST_NONE = 0, POST_SOFTMAX = 1, POST_LOGISTIC = 2 };

typedef struct {
  int32_t feature;
  float split;
  int32_t next[2]; /* [0] false branch, [1] true branch: a node index, or ~leaf (< 0) */
  uint8_t mode;
  uint8_t missing_true;
} tnode_t;

typedef struct {
  size_t ntrees, nnodes, nleaves, ntargets, width;
  int agg, post, all_lt; /* all_lt: every node is BRANCH_LT (XGBoost's): the fast loop */
  const int32_t *roots;   /* ntrees, encoded like next[] */
  const tnode_t *nodes;   /* nnodes */
  const int32_t *ltarget; /* nleaves */
  const float *lweight;   /* nleaves */
  const float *base;      /* ntargets */
} tree_p;

/* A step's params: the ensemble, its own or (opts->share) the shared program's, which
 * outlives this one. It does not depend on the batch size. */
typedef struct {
  const tree_p *e;
  tree_p *owned;
} tree_step_t;

static void tree_release(void *params) { free(((tree_step_t *)params)->owned); }

/* An INTS attribute (required or not): *v and *n, or NULL/0 when absent. */
static tpu_status_t get_ints(tpu__prep_t *pc, const char *name, int required,
                             const int64_t **v, size_t *n) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, name);
  *v = NULL;
  *n = 0;
  if (!a) {
    if (!required) return TPU_OK;
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute '%s' is required", name);
  }
  if (a->type != TPU_GRAPH_ATTR_INTS)
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute '%s' must be a list of ints", name);
  *v = a->ints;
  *n = a->n;
  return TPU_OK;
}

/* A FLOATS attribute, or an FP32 TENSOR one of rank ≤ 1. */
static tpu_status_t get_floats(tpu__prep_t *pc, const char *name, int required,
                               const float **v, size_t *n) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, name);
  *v = NULL;
  *n = 0;
  if (!a) {
    if (!required) return TPU_OK;
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute '%s' is required", name);
  }
  if (a->type == TPU_GRAPH_ATTR_FLOATS) {
    *v = a->floats;
    *n = a->n;
    return TPU_OK;
  }
  if (a->type == TPU_GRAPH_ATTR_TENSOR && a->t_dtype == TPU_GRAPH_FP32 && a->t_rank <= 1) {
    *v = a->t_data;
    *n = a->t_bytes / sizeof(float);
    return TPU_OK;
  }
  return tpu__prep_fail(pc, TPU_ENOTSUP, "attribute '%s' must be a list of floats or an FP32 "
                        "tensor", name);
}

/* nodes_modes: INTS, or a UINT8 TENSOR (v5's encoding); absent means all BRANCH_LEQ. */
static tpu_status_t get_modes(tpu__prep_t *pc, size_t nnodes, tnode_t *nodes) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, "nodes_modes");
  for (size_t i = 0; i < nnodes; i++) nodes[i].mode = MODE_LEQ;
  if (!a) return TPU_OK;
  size_t n;
  if (a->type == TPU_GRAPH_ATTR_INTS) n = a->n;
  else if (a->type == TPU_GRAPH_ATTR_TENSOR && a->t_dtype == TPU_GRAPH_UINT8 && a->t_rank <= 1)
    n = a->t_bytes;
  else
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'nodes_modes' must be a list of ints or "
                          "a UINT8 tensor");
  if (n != nnodes)
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'nodes_modes' has %zu entries, expected "
                          "one per node (%zu)", n, nnodes);
  for (size_t i = 0; i < n; i++) {
    int64_t m = a->type == TPU_GRAPH_ATTR_INTS ? a->ints[i]
                                                : ((const uint8_t *)a->t_data)[i];
    if (m < MODE_LEQ || m > MODE_NEQ)
      return tpu__prep_fail(pc, TPU_ENOTSUP, "node %zu: mode %lld is not supported (0 LEQ, "
                            "1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ; set-membership splits are not)",
                            i, (long long)m);
    nodes[i].mode = (uint8_t)m;
  }
  return TPU_OK;
}

/* Encodes branch target `id` (a leaf when is_leaf) or fails naming the tree and node. */
static tpu_status_t encode(tpu__prep_t *pc, size_t tree, size_t node, const char *branch,
                           int64_t id, int64_t is_leaf, size_t nnodes, size_t nleaves,
                           int32_t *out) {
  if (is_leaf != 0 && is_leaf != 1)
    return tpu__prep_fail(pc, TPU_EINVAL, "tree %zu node %zu: %s leaf flag is %lld, expected "
                          "0 or 1", tree, node, branch, (long long)is_leaf);
  size_t lim = is_leaf ? nleaves : nnodes;
  if (id < 0 || (uint64_t)id >= lim)
    return tpu__prep_fail(pc, TPU_EINVAL, "tree %zu node %zu: %s branch names %s %lld, out "
                          "of range [0, %zu)", tree, node, branch, is_leaf ? "leaf" : "node",
                          (long long)id, lim);
  *out = is_leaf ? ~(int32_t)id : (int32_t)id;
  return TPU_OK;
}

/* Validates the node's attributes for an input of `width` columns and copies them into one
 * block (*out, *out_bytes). */
static tpu_status_t tree_build(tpu__prep_t *pc, size_t width, tree_p **out, size_t *out_bytes) {
  const int64_t *roots, *feat, *tid, *tleaf, *fid, *fleaf, *miss, *ltarget;
  size_t nroots, nfeat, ntid, ntleaf, nfid, nfleaf, nmiss, nlt, nsplit, nlw, nbase;
  const float *split, *lw, *base;
  tpu_status_t st;
  if ((st = get_ints(pc, "tree_roots", 1, &roots, &nroots)) != TPU_OK ||
      (st = get_ints(pc, "nodes_featureids", 1, &feat, &nfeat)) != TPU_OK ||
      (st = get_ints(pc, "nodes_truenodeids", 1, &tid, &ntid)) != TPU_OK ||
      (st = get_ints(pc, "nodes_trueleafs", 1, &tleaf, &ntleaf)) != TPU_OK ||
      (st = get_ints(pc, "nodes_falsenodeids", 1, &fid, &nfid)) != TPU_OK ||
      (st = get_ints(pc, "nodes_falseleafs", 1, &fleaf, &nfleaf)) != TPU_OK ||
      (st = get_ints(pc, "nodes_missing_value_tracks_true", 0, &miss, &nmiss)) != TPU_OK ||
      (st = get_ints(pc, "leaf_targetids", 1, &ltarget, &nlt)) != TPU_OK ||
      (st = get_floats(pc, "nodes_splits", 1, &split, &nsplit)) != TPU_OK ||
      (st = get_floats(pc, "leaf_weights", 1, &lw, &nlw)) != TPU_OK ||
      (st = get_floats(pc, "base_values", 0, &base, &nbase)) != TPU_OK)
    return st;
  size_t nn = nfeat, nl = nlt;
  if (nroots == 0) return tpu__prep_fail(pc, TPU_EINVAL, "the ensemble has no trees");
  if (nn == 0 || nl == 0)
    return tpu__prep_fail(pc, TPU_EINVAL, "the ensemble has %zu nodes and %zu leaves; every "
                          "tree needs at least one of each", nn, nl);
  if (nn > INT32_MAX || nl > INT32_MAX || nroots > INT32_MAX)
    return tpu__prep_fail(pc, TPU_ERANGE, "the ensemble has more than 2^31 nodes or leaves");
  if (nsplit != nn || ntid != nn || ntleaf != nn || nfid != nn || nfleaf != nn ||
      (miss && nmiss != nn))
    return tpu__prep_fail(pc, TPU_EINVAL, "node attributes differ in length (featureids %zu, "
                          "splits %zu, truenodeids %zu, trueleafs %zu, falsenodeids %zu, "
                          "falseleafs %zu, missing_value_tracks_true %zu): expected one entry "
                          "per node each", nn, nsplit, ntid, ntleaf, nfid, nfleaf, nmiss);
  if (nlw != nl)
    return tpu__prep_fail(pc, TPU_EINVAL, "leaf_weights has %zu entries, leaf_targetids %zu: "
                          "expected one per leaf each", nlw, nl);
  int64_t ntargets = tpu__attr_i(pc, "n_targets", 0);
  if (ntargets < 1 || ntargets > INT32_MAX)
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'n_targets' is %lld, expected >= 1",
                          (long long)ntargets);
  if (base && nbase != (size_t)ntargets)
    return tpu__prep_fail(pc, TPU_EINVAL, "base_values has %zu entries, expected n_targets "
                          "(%lld)", nbase, (long long)ntargets);
  int64_t agg = tpu__attr_i(pc, "aggregate_function", AGG_SUM);
  int64_t post = tpu__attr_i(pc, "post_transform", POST_NONE);
  if (agg != AGG_SUM && agg != AGG_AVERAGE)
    return tpu__prep_fail(pc, TPU_ENOTSUP, "aggregate_function %lld is not supported (1 SUM, "
                          "0 AVERAGE)", (long long)agg);
  if (post != POST_NONE && post != POST_SOFTMAX && post != POST_LOGISTIC)
    return tpu__prep_fail(pc, TPU_ENOTSUP, "post_transform %lld is not supported (0 NONE, "
                          "1 SOFTMAX, 2 LOGISTIC)", (long long)post);

  size_t bytes = sizeof(tree_p) + nn * sizeof(tnode_t) + nroots * sizeof(int32_t) +
                 nl * (sizeof(int32_t) + sizeof(float)) + (size_t)ntargets * sizeof(float);
  unsigned char *blk = calloc(1, bytes);
  unsigned char *seen = calloc(nn, 1); /* nodes reached from some root */
  size_t *stack = malloc(nn * sizeof *stack);
  if (!blk || !seen || !stack) {
    free(blk), free(seen), free(stack);
    return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory for %zu nodes", nn);
  }
  tree_p *p = (tree_p *)blk;
  tnode_t *nodes = (tnode_t *)(p + 1);
  int32_t *r = (int32_t *)(nodes + nn);
  int32_t *lt = r + nroots;
  float *lwc = (float *)(lt + nl);
  float *bc = lwc + nl;
  *p = (tree_p){.ntrees = nroots, .nnodes = nn, .nleaves = nl, .ntargets = (size_t)ntargets,
                .width = width, .agg = (int)agg, .post = (int)post, .roots = r, .nodes = nodes,
                .ltarget = lt, .lweight = lwc, .base = bc};
  if ((st = get_modes(pc, nn, nodes)) != TPU_OK) goto fail;
  p->all_lt = 1;
  for (size_t i = 0; i < nn; i++) {
    nodes[i].split = split[i];
    nodes[i].missing_true = miss && miss[i];
    if (nodes[i].mode != MODE_LT) p->all_lt = 0;
  }
  for (size_t i = 0; i < nl; i++) {
    if (ltarget[i] < 0 || ltarget[i] >= ntargets) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "leaf %zu: target id %lld out of range [0, %lld)", i,
                          (long long)ltarget[i], (long long)ntargets);
      goto fail;
    }
    lt[i] = (int32_t)ltarget[i];
    lwc[i] = lw[i];
  }
  for (size_t i = 0; base && i < (size_t)ntargets; i++) bc[i] = base[i];
  /* Every tree from its root: ids in range, features in the input, no node reached twice. */
  for (size_t t = 0; t < nroots; t++) {
    if (roots[t] < 0 || (uint64_t)roots[t] >= nn) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "tree %zu: root node %lld out of range [0, %zu)", t,
                          (long long)roots[t], nn);
      goto fail;
    }
    r[t] = (int32_t)roots[t];
    size_t sp = 0;
    if (seen[roots[t]]) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "tree %zu: root node %lld is also part of an "
                          "earlier tree", t, (long long)roots[t]);
      goto fail;
    }
    seen[roots[t]] = 1;
    stack[sp++] = (size_t)roots[t];
    while (sp) {
      size_t n = stack[--sp];
      if (feat[n] < 0 || (uint64_t)feat[n] >= width) {
        st = tpu__prep_fail(pc, TPU_EINVAL, "tree %zu node %zu: feature %lld is outside the "
                            "input's %zu columns", t, n, (long long)feat[n], width);
        goto fail;
      }
      nodes[n].feature = (int32_t)feat[n];
      if ((st = encode(pc, t, n, "false", fid[n], fleaf[n], nn, nl, &nodes[n].next[0])) !=
              TPU_OK ||
          (st = encode(pc, t, n, "true", tid[n], tleaf[n], nn, nl, &nodes[n].next[1])) != TPU_OK)
        goto fail;
      for (int b = 0; b < 2; b++) {
        int32_t c = nodes[n].next[b];
        if (c < 0) continue; /* a leaf (one may end both branches of a node) */
        if (seen[c]) {
          st = tpu__prep_fail(pc, TPU_EINVAL, "tree %zu node %zu: %s branch goes to node %d, "
                              "which is already in a tree (a cycle or a shared subtree)", t, n,
                              b ? "true" : "false", c);
          goto fail;
        }
        seen[c] = 1;
        stack[sp++] = (size_t)c;
      }
    }
  }
  free(seen);
  free(stack);
  *out = p;
  *out_bytes = bytes;
  return TPU_OK;
fail:
  free(blk);
  free(seen);
  free(stack);
  return st;
}

static tpu_status_t tree_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (x->dtype != TPU_GRAPH_FP32) return tpu__prep_dtype(pc, x, "FP32");
  size_t width = (size_t)x->dims[1];
  tree_step_t *ts = calloc(1, sizeof *ts);
  if (!ts) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  s->params = ts;
  s->release = tree_release;
  const tree_step_t *sh = pc->shared;
  if (sh && sh->e && sh->e->width == width) { /* validated and copied once per model */
    ts->e = sh->e;
    s->param_bytes = sizeof *ts;
  } else {
    size_t bytes = 0;
    tpu_status_t st = tree_build(pc, width, &ts->owned, &bytes);
    if (st != TPU_OK) return st; /* the program frees params (release, then free) */
    ts->e = ts->owned;
    s->param_bytes = sizeof *ts + bytes;
  }
  const tree_p *e = ts->e;
  snprintf(s->desc, sizeof s->desc, "%zu trees, %zu nodes, %zu leaves, %zu targets: exact "
           "traversal%s%s%s", e->ntrees, e->nnodes, e->nleaves, e->ntargets,
           e->post == POST_LOGISTIC ? ", logistic" : e->post == POST_SOFTMAX ? ", softmax" : "",
           e->agg == AGG_AVERAGE ? ", average" : "", ts->owned ? "" : " (trees shared)");
  return TPU_OK;
}

/* Which branch a feature value takes at node n: 1 true, 0 false. */
static inline int branch(const tnode_t *n, float v) {
  if (v != v) return n->missing_true;
  switch (n->mode) {
  case MODE_LEQ: return v <= n->split;
  case MODE_LT: return v < n->split;
  case MODE_GTE: return v >= n->split;
  case MODE_GT: return v > n->split;
  case MODE_EQ: return v == n->split;
  default: return v != n->split;
  }
}

/* The leaf a row reaches in the tree rooted at `at` (encoded). */
static inline int32_t leaf_of(const tree_p *p, int32_t at, const float *row) {
  if (p->all_lt) {
    while (at >= 0) {
      const tnode_t *n = &p->nodes[at];
      float v = row[n->feature];
      at = n->next[v != v ? n->missing_true : v < n->split];
    }
  } else {
    while (at >= 0) {
      const tnode_t *n = &p->nodes[at];
      at = n->next[branch(n, row[n->feature])];
    }
  }
  return ~at;
}

/* Rows per block: each tree is walked for a block of rows before the next tree, so its nodes
 * stay in cache while the block's rows (64 x F floats) do too. Every row still adds its trees'
 * leaves in tree order, so the sums are those of a row-by-row walk, bit for bit. */
#define ROW_BLOCK 64

static tpu_status_t tree_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  (void)rc;
  const tree_p *p = ((const tree_step_t *)s->params)->e;
  const float *x = s->in[0]->data;
  float *y = s->out[0]->data;
  float *raw = s->nout > 1 && s->out[1] ? s->out[1]->data : NULL;
  size_t rows = (size_t)s->in[0]->dims[0], nt = p->ntargets;
  for (size_t r0 = 0; r0 < rows; r0 += ROW_BLOCK) {
    size_t r1 = rows - r0 < ROW_BLOCK ? rows : r0 + ROW_BLOCK;
    for (size_t i = r0; i < r1; i++)
      for (size_t k = 0; k < nt; k++) y[i * nt + k] = p->agg == AGG_SUM ? p->base[k] : 0;
    for (size_t t = 0; t < p->ntrees; t++)
      for (size_t i = r0; i < r1; i++) {
        int32_t l = leaf_of(p, p->roots[t], x + i * p->width);
        y[i * nt + (size_t)p->ltarget[l]] += p->lweight[l];
      }
    for (size_t i = r0; i < r1; i++) {
      float *acc = y + i * nt;
      if (p->agg == AGG_AVERAGE)
        for (size_t k = 0; k < nt; k++) acc[k] = acc[k] / (float)p->ntrees + p->base[k];
      if (raw) memcpy(raw + i * nt, acc, nt * sizeof *acc);
      if (p->post == POST_LOGISTIC) {
        for (size_t k = 0; k < nt; k++) { /* std::min(-x, 88.7f): NaN stays NaN */
          float m = 88.7f < -acc[k] ? 88.7f : -acc[k];
          acc[k] = 1.0f / (expf(m) + 1.0f);
        }
      } else if (p->post == POST_SOFTMAX) {
        float mx = acc[0];
        for (size_t k = 1; k < nt; k++) mx = acc[k] > mx ? acc[k] : mx;
        double sum = 0;
        for (size_t k = 0; k < nt; k++) {
          acc[k] = expf(acc[k] - mx);
          sum += acc[k];
        }
        for (size_t k = 0; k < nt; k++) acc[k] /= (float)sum;
      }
    }
  }
  return TPU_OK;
}

const tpu__kernel_t tpu__kernels_ml[] = {
    {"TreeEnsemble", tree_prepare, tree_run},
    {NULL, NULL, NULL},
};

const tpu__kernel_t *tpu__graph_kernel_ml(const char *op) {
  for (const tpu__kernel_t *k = tpu__kernels_ml; k->op; k++)
    if (strcmp(k->op, op) == 0) return k;
  return NULL;
}
