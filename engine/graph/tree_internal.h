/*
 * tree_internal.h - the compiled form of an ai.onnx.ml tree ensemble, shared by tree_build.c
 * (reads a node's attributes in either encoding, validates them, builds this) and ops_tree.c
 * (runs it). Not installed; the graph code's private interface.
 *
 * DESIGN
 * Two encodings reach the same form:
 *   TreeEnsemble (ai.onnx.ml opset 5): node arrays indexed by node, leaf arrays by leaf,
 *     tree_roots; one target and weight per leaf. XGBoost's loader (server/models/xgboost.c)
 *     writes this form, and its numerics are XGBoost's (see ops_tree.c).
 *   TreeEnsembleRegressor / TreeEnsembleClassifier (opsets 1 and 3): every node named by a
 *     (tree id, node id) pair, modes as strings, leaves among the nodes (mode "LEAF") and their
 *     weights in separate (tree id, node id, target, weight) lists, so a leaf may feed several
 *     targets (a random forest's leaf holds a probability per class). Values come as FLOATS or,
 *     from v3, as FP32 or FP64 tensors (the *_as_tensor attributes). Numerics are ONNX
 *     Runtime's, the reference implementation of these ops (see ops_tree.c).
 * Branch nodes become a compact array whose children are node indices or ~leaf (< 0); each
 * leaf owns entries lfirst[l] .. lfirst[l + 1] of (target, weight). Everything lives in one
 * block, so the kernel reads nothing of the graph at run time.
 */
#ifndef TPU_TREE_INTERNAL_H
#define TPU_TREE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "exec_internal.h"

/* Branch modes: the comparison that sends a value to the true branch. */
enum { TPU__TREE_LEQ = 0, TPU__TREE_LT, TPU__TREE_GTE, TPU__TREE_GT, TPU__TREE_EQ, TPU__TREE_NEQ };
enum { TPU__TREE_AVERAGE = 0, TPU__TREE_SUM = 1 };
enum {
  TPU__TREE_POST_NONE = 0,
  TPU__TREE_POST_SOFTMAX = 1,
  TPU__TREE_POST_LOGISTIC = 2,
  TPU__TREE_POST_SOFTMAX_ZERO = 3
};
/* Which op: its outputs and its numerics. */
enum { TPU__TREE_V5 = 0, TPU__TREE_REGRESSOR, TPU__TREE_CLASSIFIER };
/* How a classifier turns its scores into Z and Y (ops_tree.c says exactly). */
enum {
  TPU__CLS_MULTI = 0,   /* a score per class; Y the first largest scored class */
  TPU__CLS_BIN_LOGISTIC, /* two classes, one score s: Z = [σ(-s), σ(s)], Y = s > 0 */
  TPU__CLS_BIN_PROB,     /* one score, every weight ≥ 0: Z = [1 - s, s], Y = s > 0.5 */
  TPU__CLS_BIN_MARGIN    /* one score, mixed signs: Z = [-s, s], Y = s > 0 */
};

typedef struct {
  int32_t feature;
  float split;
  int32_t next[2]; /* [0] false branch, [1] true branch: a node index, or ~leaf (< 0) */
  uint8_t mode;
  uint8_t missing_true; /* a NaN feature takes the true branch */
} tpu__tnode_t;

/* Which branch a feature value takes at node n: 1 true, 0 false (NaN: the missing branch). */
static inline int tpu__tree_branch(const tpu__tnode_t *n, float v) {
  if (v != v) return n->missing_true;
  switch (n->mode) {
  case TPU__TREE_LEQ: return v <= n->split;
  case TPU__TREE_LT: return v < n->split;
  case TPU__TREE_GTE: return v >= n->split;
  case TPU__TREE_GT: return v > n->split;
  case TPU__TREE_EQ: return v == n->split;
  default: return v != n->split;
  }
}

typedef struct {
  int kind, agg, post, cls;
  int all_lt; /* every node is LT without NEQ's NaN rule: XGBoost's fast loop */
  int single; /* every leaf has exactly one entry (entry l is leaf l's) */
  int track;  /* a classifier whose rows may leave a class unscored: track which are */
  size_t ntrees, nnodes, nleaves, nentries, ntargets, width, nlabels;
  int32_t bin_class; /* TPU__CLS_BIN_*: the class id whose sum is the score */
  const int32_t *roots;       /* ntrees, encoded like next[] */
  const tpu__tnode_t *nodes;  /* nnodes */
  const uint32_t *lfirst;     /* nleaves + 1 */
  const int32_t *etarget;     /* nentries */
  const float *eweight;       /* nentries */
  const float *base;          /* ntargets (zeros when the model gives none) */
  const int64_t *labels;      /* classifier: nlabels class labels */
  /* v5's tpud extensions (NULL when absent): the training cover of every branch node and leaf
   * (XGBoost's sum_hessian), which TreeSHAP weighs paths by, and what the leaf-index output
   * reports for each leaf (XGBoost's node id). */
  const float *ncover, *lcover;
  const int64_t *leaf_ids;
} tpu__trees_t;

/* Adds leaf l's entries to a row's sums a (ntargets floats); h (may be NULL) gets 1 for each
 * target an entry was for. Every strategy adds a row's leaves through this, in tree order. */
static inline void tpu__tree_add_leaf(const tpu__trees_t *p, int32_t l, float *a,
                                      unsigned char *h) {
  if (p->single) {
    a[p->etarget[l]] += p->eweight[l];
    if (h) h[p->etarget[l]] = 1;
    return;
  }
  for (uint32_t k = p->lfirst[l]; k < p->lfirst[l + 1]; k++) {
    a[p->etarget[k]] += p->eweight[k];
    if (h) h[p->etarget[k]] = 1;
  }
}

/* The GEMM strategy (tree_gemm.c): the path matrices of the trees packed on the engine, in
 * blocks of trees that fit one systolic tile, shared by every bucket; and a bucket's plans. */
typedef struct tpu__tree_gemm tpu__tree_gemm_t;
typedef struct tpu__tree_gemm_run tpu__tree_gemm_run_t;

#define TPU__TREE_GEMM_ROWS 64 /* rows of one plan run; longer batches go in chunks */

/* Builds p's path matrices on engine into *out (*bytes held); TPU_ENOTSUP with *why when the
 * trees are too large for the form (a tree of over 65536 branch nodes, over 64 MiB of
 * matrices, over 8M multiply-adds a row), TPU_ENOMEM, or the engine's error. */
tpu_status_t tpu__tree_gemm_build(tpu_engine_t *engine, const tpu__trees_t *p,
                                  tpu__tree_gemm_t **out, size_t *bytes, const char **why);
void tpu__tree_gemm_free(tpu__tree_gemm_t *g); /* accepts NULL; its plans first */
size_t tpu__tree_gemm_blocks(const tpu__tree_gemm_t *g);
/* Plans for batches of `rows` rows (*bytes held), the decisions by vec's tree_decide, and
 * what one such batch costs the modelled array: MACs, cycles, MAC slots. */
struct tpu__vec_kernels;
tpu_status_t tpu__tree_gemm_plan(tpu_engine_t *engine, const struct tpu__vec_kernels *vec,
                                 const tpu__tree_gemm_t *g, size_t rows,
                                 tpu__tree_gemm_run_t **out, size_t *bytes, uint64_t *macs,
                                 uint64_t *cycles, uint64_t *slots);
void tpu__tree_gemm_run_free(tpu__tree_gemm_run_t *r); /* accepts NULL */
/* Adds the leaves rows of x reach to acc (and has, may be NULL) as the node walk does, bit for
 * bit; the engine's error if a plan run fails. One thread at a time per run. */
tpu_status_t tpu__tree_gemm_rows(const tpu__trees_t *p, tpu__tree_gemm_run_t *r,
                                 const float *x, size_t rows, float *acc, unsigned char *has);

/* TreeSHAP (tree_shap.c): the exact per-feature contributions of one row, as XGBoost's
 * pred_contribs computes them. */
typedef struct {
  size_t maxdepth;      /* of any tree */
  const float *mean;    /* ntrees: each tree's expected value (cover-weighted leaf mean) */
  const int32_t *group; /* ntrees: the target its leaves feed */
} tpu__shap_t;

#define TPU__SHAP_MAX_DEPTH 256 /* deeper trees get no contributions (TPU_ERANGE) */

/* The expected values and groups of p's trees into sh (arrays malloc'd in one block, *blk);
 * TPU_ENOMEM, TPU_EINVAL without covers, TPU_ERANGE for a tree deeper than 256 levels. */
tpu_status_t tpu__shap_prepare(const tpu__trees_t *p, tpu__shap_t *sh, void **blk);
/* Scratch bytes one row's call needs (the path buffers and one tree's contributions). */
size_t tpu__shap_scratch(const tpu__shap_t *sh, size_t width);
/* phi (ntargets x (width + 1), zeroed here) gets row's contributions: per target, feature j's
 * in column j and the bias (base value + the trees' expected values) in column width. */
void tpu__shap_row(const tpu__trees_t *p, const tpu__shap_t *sh, const float *row, float *phi,
                   void *scratch);

/* Reads, validates and compiles the tree node being prepared, for an FP32 input of `width`
 * columns. *out is one malloc'd block of *bytes bytes. Fails (tpu__prep_fail) naming the tree
 * and node: arrays of different lengths, ids out of range or repeated, a cycle or shared
 * subtree, a feature at or beyond the input width, a target beyond the outputs, a mode,
 * aggregate or transform it does not take. */
tpu_status_t tpu__trees_build(tpu__prep_t *pc, size_t width, tpu__trees_t **out, size_t *bytes);

#endif /* TPU_TREE_INTERNAL_H */
