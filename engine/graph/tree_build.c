/*
 * tree_build.c - an ai.onnx.ml tree node's attributes to the compiled ensemble (see
 * tree_internal.h for the form and the two encodings).
 *
 * DESIGN
 * Both encodings are first brought to one source form (src_t: v5's arrays, plus leaf entry
 * ranges), which assemble() validates and copies. TreeEnsemble v5 attributes are that form
 * already. For v1/v3, nodes are looked up by (tree id, node id) through a sorted index; branch
 * nodes are numbered in array order, leaves likewise; a tree is the set of nodes sharing a
 * tree id, its root the first of them in array order, and trees are summed in the order their
 * roots appear (ONNX Runtime's reading). A tree that is one leaf gets a branch node whose both
 * branches end in it. FP64 thresholds become the float32 threshold that takes the same branch
 * for every float32 input (rounded down for <= and >, up for < and >=; == and != against a
 * value no float32 equals can never hold), so a double-precision model runs exactly on float
 * features; FP64 weights and base values are rounded to float32 (the kernel sums in float32).
 * Messages name a node as the file does: "tree 3 node 7" (v5: indices into the arrays).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tree_internal.h"

/* The ensemble in one form, before validation. Arrays are borrowed (attributes or scratch). */
typedef struct {
  size_t nn, nl, ne, nroots;
  const int64_t *roots, *feat, *tid, *tleaf, *fid, *fleaf, *miss; /* miss may be NULL */
  const float *split;
  const uint8_t *modes;   /* nn */
  const uint32_t *lfirst; /* nl + 1; NULL: one entry per leaf */
  const int64_t *etarget; /* ne */
  const float *eweight;   /* ne */
  const float *base;      /* nbase, may be NULL */
  size_t nbase;
  int64_t ntargets;
  const int64_t *labels; /* classifier: ntargets class labels; NULL otherwise */
  const float *ncover, *lcover; /* v5's tpud_node_covers (nn), tpud_leaf_covers (nl), or NULL */
  const int64_t *leaf_ids;      /* v5's tpud_leaf_ids (nl), or NULL */
  /* v1/v3: the file's ids of branch node n (orig[n] indexes them), for messages */
  const int64_t *tree_ids, *node_ids;
  const size_t *orig;
} src_t;

/* "tree T node N" as the file names them. */
static const char *node_name(const src_t *s, size_t tree, size_t n, char *buf, size_t len) {
  if (s->orig)
    snprintf(buf, len, "tree %lld node %lld", (long long)s->tree_ids[s->orig[n]],
             (long long)s->node_ids[s->orig[n]]);
  else
    snprintf(buf, len, "tree %zu node %zu", tree, n);
  return buf;
}

/* ---- attributes ---- */

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

/* How a double value becomes float: nearest, or the float threshold for a branch mode. */
enum { ROUND_NEAREST = -1 };

static float threshold_f32(double t, int mode) {
  float f = (float)t; /* nearest */
  if (t != t || (double)f == t || mode == ROUND_NEAREST) return f;
  switch (mode) {
  case TPU__TREE_LEQ: /* x <= t  iff  x <= the largest float below t; x > t likewise */
  case TPU__TREE_GT: return (double)f > t ? nextafterf(f, -INFINITY) : f;
  case TPU__TREE_LT: /* x < t  iff  x < the smallest float above t; x >= t likewise */
  case TPU__TREE_GTE: return (double)f < t ? nextafterf(f, INFINITY) : f;
  default: return NAN; /* EQ never holds, NEQ always does: as against NaN */
  }
}

/* A list of floats: the FLOATS attribute `name`, else the FP32/FP64 tensor attribute
 * `tname` (v3's *_as_tensor; NULL for none). *v points into the attribute or, for FP64, into
 * *owned (malloc'd, rounded per modes[i] or to nearest when modes is NULL). */
static tpu_status_t get_floats(tpu__prep_t *pc, const char *name, const char *tname,
                               int required, const uint8_t *modes, const float **v, size_t *n,
                               float **owned) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, name);
  const tpu_graph_attr_t *t = tname ? tpu_graph_attr(pc->g, pc->node, tname) : NULL;
  *v = NULL;
  *n = 0;
  *owned = NULL;
  if (a && t)
    return tpu__prep_fail(pc, TPU_EINVAL, "attributes '%s' and '%s' are both given; expected "
                          "one", name, tname);
  if (a && a->type == TPU_GRAPH_ATTR_FLOATS) {
    *v = a->floats;
    *n = a->n;
    return TPU_OK;
  }
  if (!a) a = t;
  if (!a) {
    if (!required) return TPU_OK;
    if (tname)
      return tpu__prep_fail(pc, TPU_EINVAL, "attribute '%s' (or '%s') is required", name,
                            tname);
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute '%s' is required", name);
  }
  if (a->type == TPU_GRAPH_ATTR_TENSOR && a->t_rank <= 1 && a->t_dtype == TPU_GRAPH_FP32) {
    *v = a->t_data;
    *n = a->t_bytes / sizeof(float);
    return TPU_OK;
  }
  if (a->type == TPU_GRAPH_ATTR_TENSOR && a->t_rank <= 1 && a->t_dtype == TPU_GRAPH_FP64) {
    size_t k = a->t_bytes / sizeof(double);
    float *f = malloc((k ? k : 1) * sizeof *f);
    if (!f) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory for '%s'", a->name);
    const double *d = a->t_data;
    for (size_t i = 0; i < k; i++) f[i] = threshold_f32(d[i], modes ? modes[i] : ROUND_NEAREST);
    *v = *owned = f;
    *n = k;
    return TPU_OK;
  }
  return tpu__prep_fail(pc, TPU_ENOTSUP, "attribute '%s' must be a list of floats or an FP32 "
                        "or FP64 tensor of rank 0 or 1", a->name);
}

/* v5's nodes_modes: INTS, or a UINT8 TENSOR; absent means all BRANCH_LEQ. Into modes[nn]. */
static tpu_status_t get_modes_v5(tpu__prep_t *pc, size_t nn, uint8_t *modes) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, "nodes_modes");
  memset(modes, TPU__TREE_LEQ, nn);
  if (!a) return TPU_OK;
  size_t n;
  if (a->type == TPU_GRAPH_ATTR_INTS) n = a->n;
  else if (a->type == TPU_GRAPH_ATTR_TENSOR && a->t_dtype == TPU_GRAPH_UINT8 && a->t_rank <= 1)
    n = a->t_bytes;
  else
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'nodes_modes' must be a list of ints or "
                          "a UINT8 tensor");
  if (n != nn)
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'nodes_modes' has %zu entries, expected "
                          "one per node (%zu)", n, nn);
  for (size_t i = 0; i < n; i++) {
    int64_t m = a->type == TPU_GRAPH_ATTR_INTS ? a->ints[i]
                                                : ((const uint8_t *)a->t_data)[i];
    if (m < TPU__TREE_LEQ || m > TPU__TREE_NEQ)
      return tpu__prep_fail(pc, TPU_ENOTSUP, "node %zu: mode %lld is not supported (0 LEQ, "
                            "1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ; set-membership splits are not)",
                            i, (long long)m);
    modes[i] = (uint8_t)m;
  }
  return TPU_OK;
}

/* ---- validation and the compiled block ---- */

/* Encodes branch target `id` (a leaf when is_leaf) or fails naming the node. */
static tpu_status_t encode(tpu__prep_t *pc, const src_t *s, size_t tree, size_t node,
                           const char *branch, int64_t id, int64_t is_leaf, int32_t *out) {
  char nm[80];
  if (is_leaf != 0 && is_leaf != 1)
    return tpu__prep_fail(pc, TPU_EINVAL, "%s: %s leaf flag is %lld, expected 0 or 1",
                          node_name(s, tree, node, nm, sizeof nm), branch, (long long)is_leaf);
  size_t lim = is_leaf ? s->nl : s->nn;
  if (id < 0 || (uint64_t)id >= lim)
    return tpu__prep_fail(pc, TPU_EINVAL, "%s: %s branch names %s %lld, out of range [0, %zu)",
                          node_name(s, tree, node, nm, sizeof nm), branch,
                          is_leaf ? "leaf" : "node", (long long)id, lim);
  *out = is_leaf ? ~(int32_t)id : (int32_t)id;
  return TPU_OK;
}

/* Validates src for an input of `width` columns and copies it into one block. */
static tpu_status_t assemble(tpu__prep_t *pc, const src_t *s, size_t width, tpu__trees_t **out,
                             size_t *out_bytes) {
  size_t nn = s->nn, nl = s->nl, ne = s->ne, nt = (size_t)s->ntargets;
  char nm[80];
  if (s->nroots == 0) return tpu__prep_fail(pc, TPU_EINVAL, "the ensemble has no trees");
  if (nn == 0 || nl == 0)
    return tpu__prep_fail(pc, TPU_EINVAL, "the ensemble has %zu nodes and %zu leaves; every "
                          "tree needs at least one of each", nn, nl);
  if (nn > INT32_MAX || nl > INT32_MAX || ne > UINT32_MAX || s->nroots > INT32_MAX)
    return tpu__prep_fail(pc, TPU_ERANGE, "the ensemble has more than 2^31 nodes or leaves");
  if (s->base && s->nbase != nt)
    return tpu__prep_fail(pc, TPU_EINVAL, "base_values has %zu entries, expected one per "
                          "target or class (%zu)", s->nbase, nt);

  size_t bytes = sizeof(tpu__trees_t) + nn * sizeof(tpu__tnode_t) +
                 s->nroots * sizeof(int32_t) + (nl + 1) * sizeof(uint32_t) +
                 ne * (sizeof(int32_t) + sizeof(float)) + nt * sizeof(float) +
                 (s->labels ? nt * sizeof(int64_t) : 0) + (s->leaf_ids ? nl * sizeof(int64_t) : 0) +
                 (s->ncover ? (nn + nl) * sizeof(float) : 0);
  unsigned char *blk = calloc(1, bytes);
  unsigned char *seen = calloc(nn, 1); /* nodes reached from some root */
  size_t *stack = malloc(nn * sizeof *stack);
  tpu_status_t st = TPU_OK;
  if (!blk || !seen || !stack) {
    st = tpu__prep_fail(pc, TPU_ENOMEM, "out of memory for %zu nodes", nn);
    goto done;
  }
  tpu__trees_t *p = (tpu__trees_t *)blk;
  int64_t *lab = (int64_t *)(p + 1); /* first: 8-byte aligned after the header */
  int64_t *lids = lab + (s->labels ? nt : 0);
  tpu__tnode_t *nodes = (tpu__tnode_t *)(lids + (s->leaf_ids ? nl : 0));
  int32_t *r = (int32_t *)(nodes + nn);
  uint32_t *lf = (uint32_t *)(r + s->nroots);
  int32_t *et = (int32_t *)(lf + nl + 1);
  float *ew = (float *)(et + ne);
  float *bc = ew + ne;
  float *cov = bc + nt; /* nn node covers, then nl leaf covers */
  *p = (tpu__trees_t){.ntrees = s->nroots, .nnodes = nn, .nleaves = nl, .nentries = ne,
                      .ntargets = nt, .width = width, .roots = r, .nodes = nodes,
                      .lfirst = lf, .etarget = et, .eweight = ew, .base = bc};
  p->all_lt = 1;
  p->single = 1;
  for (size_t i = 0; i < nn; i++) {
    nodes[i].split = s->split[i];
    nodes[i].mode = s->modes[i];
    nodes[i].missing_true = s->miss && s->miss[i];
    if (nodes[i].mode != TPU__TREE_LT) p->all_lt = 0;
  }
  for (size_t l = 0; l <= nl; l++) lf[l] = s->lfirst ? s->lfirst[l] : (uint32_t)l;
  for (size_t l = 0; l < nl; l++)
    if (lf[l + 1] - lf[l] != 1) p->single = 0;
  for (size_t i = 0; i < ne; i++) {
    if (s->etarget[i] < 0 || s->etarget[i] >= s->ntargets) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "%s %zu: target id %lld out of range [0, %lld)",
                          s->lfirst ? "leaf weight" : "leaf", i, (long long)s->etarget[i],
                          (long long)s->ntargets);
      goto done;
    }
    et[i] = (int32_t)s->etarget[i];
    ew[i] = s->eweight[i];
  }
  for (size_t i = 0; s->base && i < nt; i++) bc[i] = s->base[i];
  if (s->labels) {
    memcpy(lab, s->labels, nt * sizeof *lab);
    p->labels = lab;
    p->nlabels = nt;
  }
  if (s->leaf_ids) {
    memcpy(lids, s->leaf_ids, nl * sizeof *lids);
    p->leaf_ids = lids;
  }
  if (s->ncover) {
    for (size_t i = 0; i < nn; i++) {
      if (!(s->ncover[i] > 0) || !(s->ncover[i] < INFINITY)) {
        st = tpu__prep_fail(pc, TPU_EINVAL, "tpud_node_covers[%zu] is %g: covers must be "
                            "positive and finite", i, (double)s->ncover[i]);
        goto done;
      }
      cov[i] = s->ncover[i];
    }
    for (size_t i = 0; i < nl; i++) {
      if (!(s->lcover[i] >= 0) || !(s->lcover[i] < INFINITY)) {
        st = tpu__prep_fail(pc, TPU_EINVAL, "tpud_leaf_covers[%zu] is %g: covers must be "
                            "non-negative and finite", i, (double)s->lcover[i]);
        goto done;
      }
      cov[nn + i] = s->lcover[i];
    }
    p->ncover = cov;
    p->lcover = cov + nn;
  }
  /* Every tree from its root: ids in range, features in the input, no node reached twice. */
  for (size_t t = 0; t < s->nroots; t++) {
    if (s->roots[t] < 0 || (uint64_t)s->roots[t] >= nn) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "tree %zu: root node %lld out of range [0, %zu)", t,
                          (long long)s->roots[t], nn);
      goto done;
    }
    r[t] = (int32_t)s->roots[t];
    size_t sp = 0;
    if (seen[s->roots[t]]) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "tree %zu: root node %lld is also part of an "
                          "earlier tree", t, (long long)s->roots[t]);
      goto done;
    }
    seen[s->roots[t]] = 1;
    stack[sp++] = (size_t)s->roots[t];
    while (sp) {
      size_t n = stack[--sp];
      if (s->feat[n] < 0 || (uint64_t)s->feat[n] >= width) {
        st = tpu__prep_fail(pc, TPU_EINVAL, "%s: feature %lld is outside the input's %zu "
                            "columns", node_name(s, t, n, nm, sizeof nm),
                            (long long)s->feat[n], width);
        goto done;
      }
      nodes[n].feature = (int32_t)s->feat[n];
      if ((st = encode(pc, s, t, n, "false", s->fid[n], s->fleaf[n], &nodes[n].next[0])) !=
              TPU_OK ||
          (st = encode(pc, s, t, n, "true", s->tid[n], s->tleaf[n], &nodes[n].next[1])) !=
              TPU_OK)
        goto done;
      for (int b = 0; b < 2; b++) {
        int32_t c = nodes[n].next[b];
        if (c < 0) continue; /* a leaf (one may end both branches of a node) */
        if (seen[c]) {
          char cn[80];
          st = tpu__prep_fail(pc, TPU_EINVAL, "%s: %s branch goes to %s, which is already in "
                              "a tree (a cycle or a shared subtree)",
                              node_name(s, t, n, nm, sizeof nm), b ? "true" : "false",
                              node_name(s, t, (size_t)c, cn, sizeof cn));
          goto done;
        }
        seen[c] = 1;
        stack[sp++] = (size_t)c;
      }
    }
  }
  *out = p;
  *out_bytes = bytes;
  blk = NULL;
done:
  free(blk);
  free(seen);
  free(stack);
  return st;
}

/* ---- TreeEnsemble v5 ---- */

static tpu_status_t build_v5(tpu__prep_t *pc, size_t width, tpu__trees_t **out, size_t *bytes) {
  src_t s = {0};
  size_t ntid, ntleaf, nfid, nfleaf, nmiss, nlt, nsplit, nlw;
  float *o1 = NULL, *o2 = NULL, *o3 = NULL, *o4 = NULL, *o5 = NULL;
  uint8_t *modes = NULL;
  tpu_status_t st;
  if ((st = get_ints(pc, "tree_roots", 1, &s.roots, &s.nroots)) != TPU_OK ||
      (st = get_ints(pc, "nodes_featureids", 1, &s.feat, &s.nn)) != TPU_OK ||
      (st = get_ints(pc, "nodes_truenodeids", 1, &s.tid, &ntid)) != TPU_OK ||
      (st = get_ints(pc, "nodes_trueleafs", 1, &s.tleaf, &ntleaf)) != TPU_OK ||
      (st = get_ints(pc, "nodes_falsenodeids", 1, &s.fid, &nfid)) != TPU_OK ||
      (st = get_ints(pc, "nodes_falseleafs", 1, &s.fleaf, &nfleaf)) != TPU_OK ||
      (st = get_ints(pc, "nodes_missing_value_tracks_true", 0, &s.miss, &nmiss)) != TPU_OK ||
      (st = get_ints(pc, "leaf_targetids", 1, &s.etarget, &nlt)) != TPU_OK ||
      (st = get_floats(pc, "nodes_splits", NULL, 1, NULL, &s.split, &nsplit, &o1)) != TPU_OK ||
      (st = get_floats(pc, "leaf_weights", NULL, 1, NULL, &s.eweight, &nlw, &o2)) != TPU_OK ||
      (st = get_floats(pc, "base_values", NULL, 0, NULL, &s.base, &s.nbase, &o3)) != TPU_OK)
    goto done;
  s.nl = s.ne = nlt;
  if (s.nn == 0 || s.nl == 0) { /* assemble says so; the lengths below need nodes */
    st = assemble(pc, &s, width, out, bytes);
    goto done;
  }
  if (nsplit != s.nn || ntid != s.nn || ntleaf != s.nn || nfid != s.nn || nfleaf != s.nn ||
      (s.miss && nmiss != s.nn)) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "node attributes differ in length (featureids %zu, "
                        "splits %zu, truenodeids %zu, trueleafs %zu, falsenodeids %zu, "
                        "falseleafs %zu, missing_value_tracks_true %zu): expected one entry "
                        "per node each", s.nn, nsplit, ntid, ntleaf, nfid, nfleaf, nmiss);
    goto done;
  }
  if (nlw != s.nl) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "leaf_weights has %zu entries, leaf_targetids %zu: "
                        "expected one per leaf each", nlw, s.nl);
    goto done;
  }
  s.ntargets = tpu__attr_i(pc, "n_targets", 0);
  if (s.ntargets < 1 || s.ntargets > INT32_MAX) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "attribute 'n_targets' is %lld, expected >= 1",
                        (long long)s.ntargets);
    goto done;
  }
  int64_t agg = tpu__attr_i(pc, "aggregate_function", TPU__TREE_SUM);
  int64_t post = tpu__attr_i(pc, "post_transform", TPU__TREE_POST_NONE);
  if (agg != TPU__TREE_SUM && agg != TPU__TREE_AVERAGE) {
    st = tpu__prep_fail(pc, TPU_ENOTSUP, "aggregate_function %lld is not supported (1 SUM, "
                        "0 AVERAGE)", (long long)agg);
    goto done;
  }
  if (post != TPU__TREE_POST_NONE && post != TPU__TREE_POST_SOFTMAX &&
      post != TPU__TREE_POST_LOGISTIC) {
    st = tpu__prep_fail(pc, TPU_ENOTSUP, "post_transform %lld is not supported (0 NONE, "
                        "1 SOFTMAX, 2 LOGISTIC)", (long long)post);
    goto done;
  }
  if (!(modes = malloc(s.nn))) {
    st = tpu__prep_fail(pc, TPU_ENOMEM, "out of memory for %zu nodes", s.nn);
    goto done;
  }
  if ((st = get_modes_v5(pc, s.nn, modes)) != TPU_OK) goto done;
  s.modes = modes;
  size_t nnc, nlc, nli;
  if ((st = get_floats(pc, "tpud_node_covers", NULL, 0, NULL, &s.ncover, &nnc, &o4)) != TPU_OK ||
      (st = get_floats(pc, "tpud_leaf_covers", NULL, 0, NULL, &s.lcover, &nlc, &o5)) != TPU_OK ||
      (st = get_ints(pc, "tpud_leaf_ids", 0, &s.leaf_ids, &nli)) != TPU_OK)
    goto done;
  if ((s.ncover || s.lcover) && (!s.ncover || !s.lcover || nnc != s.nn || nlc != s.nl)) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "tpud_node_covers has %zu entries and tpud_leaf_covers "
                        "%zu: expected one per node (%zu) and one per leaf (%zu)", nnc, nlc,
                        s.nn, s.nl);
    goto done;
  }
  if (s.leaf_ids && nli != s.nl) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "tpud_leaf_ids has %zu entries, expected one per leaf "
                        "(%zu)", nli, s.nl);
    goto done;
  }
  if ((st = assemble(pc, &s, width, out, bytes)) != TPU_OK) goto done;
  (*out)->kind = TPU__TREE_V5;
  (*out)->agg = (int)agg;
  (*out)->post = (int)post;
done:
  free(o1), free(o2), free(o3), free(o4), free(o5), free(modes);
  return st;
}

/* ---- TreeEnsembleRegressor / TreeEnsembleClassifier v1, v3 ---- */

/* A node's key: the index sorted by (tree id, node id, array index) finds nodes. */
typedef struct {
  int64_t tree, node;
  size_t idx;
} nkey_t;

static int cmp_key(const void *a, const void *b) {
  const nkey_t *x = a, *y = b;
  if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The array index of node (tree, node), or -1. */
static long find_node(const nkey_t *k, size_t n, int64_t tree, int64_t node) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (k[mid].tree < tree || (k[mid].tree == tree && k[mid].node < node)) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && k[lo].tree == tree && k[lo].node == node ? (long)k[lo].idx : -1;
}

static int mode_of(const char *m) {
  static const char *const names[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE",
                                      "BRANCH_GT",  "BRANCH_EQ", "BRANCH_NEQ"};
  for (int i = 0; i < 6; i++)
    if (strcmp(m, names[i]) == 0) return i;
  return strcmp(m, "LEAF") == 0 ? 6 : -1;
}
#define MODE_LEAF 6

/* The string attribute `name` (default def) as one of names[] (its index), or a refusal. */
static tpu_status_t get_choice(tpu__prep_t *pc, const char *name, const char *def,
                               const char *const *names, size_t n, const char *takes, int *out) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, name);
  const char *v = def;
  if (a) {
    if (a->type != TPU_GRAPH_ATTR_STRING)
      return tpu__prep_fail(pc, TPU_EINVAL, "attribute '%s' must be a string", name);
    v = a->s;
  }
  for (size_t i = 0; i < n; i++)
    if (names[i] && strcmp(v, names[i]) == 0) {
      *out = (int)i;
      return TPU_OK;
    }
  return tpu__prep_fail(pc, TPU_ENOTSUP, "%s '%s' is not supported (%s)", name, v, takes);
}

typedef struct { /* scratch of build_v3, freed together */
  nkey_t *sorted;
  size_t *orig;
  int64_t *bidx, *roots, *feat, *tid, *tleaf, *fid, *fleaf, *miss, *etarget, *tree_ids;
  uint8_t *modes;
  uint32_t *lfirst, *fill;
  float *split, *eweight, *o_values, *o_weights, *o_base;
} v3_tmp_t;

static void v3_free(v3_tmp_t *t) {
  void *p[] = {t->sorted, t->orig, t->bidx, t->roots, t->feat, t->tid, t->tleaf, t->fid,
               t->fleaf, t->miss, t->etarget, t->tree_ids, t->modes, t->lfirst, t->fill,
               t->split, t->eweight, t->o_values, t->o_weights, t->o_base};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

static tpu_status_t build_v3(tpu__prep_t *pc, size_t width, int clf, tpu__trees_t **out,
                             size_t *bytes) {
  const char *pre = clf ? "class" : "target"; /* class_treeids or target_treeids ... */
  char an[4][40];
  snprintf(an[0], sizeof an[0], "%s_treeids", pre);
  snprintf(an[1], sizeof an[1], "%s_nodeids", pre);
  snprintf(an[2], sizeof an[2], "%s_ids", pre);
  snprintf(an[3], sizeof an[3], "%s_weights", pre);
  char wt[48];
  snprintf(wt, sizeof wt, "%s_weights_as_tensor", pre);
  v3_tmp_t t = {0};
  src_t s = {0};
  tpu_status_t st;
  const int64_t *ntree, *nnode, *nfeat, *ntrue, *nfalse, *nmiss, *wtree, *wnode, *wid;
  size_t n, n2, n3, n4, n5, n6, nm, nw, nw2, nw3, nw4, nvals;
  const float *vals, *wts;
  const tpu_graph_attr_t *ma = tpu_graph_attr(pc->g, pc->node, "nodes_modes");
  if ((st = get_ints(pc, "nodes_treeids", 1, &ntree, &n)) != TPU_OK ||
      (st = get_ints(pc, "nodes_nodeids", 1, &nnode, &n2)) != TPU_OK ||
      (st = get_ints(pc, "nodes_featureids", 1, &nfeat, &n3)) != TPU_OK ||
      (st = get_ints(pc, "nodes_truenodeids", 1, &ntrue, &n4)) != TPU_OK ||
      (st = get_ints(pc, "nodes_falsenodeids", 1, &nfalse, &n5)) != TPU_OK ||
      (st = get_ints(pc, "nodes_missing_value_tracks_true", 0, &nmiss, &nm)) != TPU_OK ||
      (st = get_ints(pc, an[0], 1, &wtree, &nw)) != TPU_OK ||
      (st = get_ints(pc, an[1], 1, &wnode, &nw2)) != TPU_OK ||
      (st = get_ints(pc, an[2], 1, &wid, &nw3)) != TPU_OK)
    return st;
  if (!ma) return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'nodes_modes' is required");
  if (ma->type != TPU_GRAPH_ATTR_STRINGS)
    return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'nodes_modes' must be a list of strings");
  n6 = ma->n;
  if (n == 0) return tpu__prep_fail(pc, TPU_EINVAL, "the ensemble has no nodes");
  if (n2 != n || n3 != n || n4 != n || n5 != n || n6 != n || (nmiss && nm != n))
    return tpu__prep_fail(pc, TPU_EINVAL, "node attributes differ in length (treeids %zu, "
                          "nodeids %zu, featureids %zu, truenodeids %zu, falsenodeids %zu, "
                          "modes %zu, missing_value_tracks_true %zu): expected one entry per "
                          "node each", n, n2, n3, n4, n5, n6, nm);
  if (n > INT32_MAX || nw > UINT32_MAX)
    return tpu__prep_fail(pc, TPU_ERANGE, "the ensemble has more than 2^31 nodes or weights");
  if (!(t.modes = malloc(n))) goto nomem;
  for (size_t i = 0; i < n; i++) {
    int m = mode_of(ma->strings[i]);
    if (m < 0) {
      st = tpu__prep_fail(pc, TPU_ENOTSUP, "tree %lld node %lld: mode '%s' is not supported "
                          "(BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, "
                          "BRANCH_NEQ, LEAF)", (long long)ntree[i], (long long)nnode[i],
                          ma->strings[i]);
      goto done;
    }
    t.modes[i] = (uint8_t)m;
  }
  if ((st = get_floats(pc, "nodes_values", "nodes_values_as_tensor", 1, t.modes, &vals, &nvals,
                       &t.o_values)) != TPU_OK ||
      (st = get_floats(pc, an[3], wt, 1, NULL, &wts, &nw4, &t.o_weights)) != TPU_OK ||
      (st = get_floats(pc, "base_values", "base_values_as_tensor", 0, NULL, &s.base, &s.nbase,
                       &t.o_base)) != TPU_OK)
    goto done;
  if (nvals != n) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "nodes_values has %zu entries, expected one per node "
                        "(%zu)", nvals, n);
    goto done;
  }
  if (nw2 != nw || nw3 != nw || nw4 != nw) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "leaf weight attributes differ in length (%s %zu, %s "
                        "%zu, %s %zu, %s %zu): expected one entry per weight each", an[0], nw,
                        an[1], nw2, an[2], nw3, an[3], nw4);
    goto done;
  }

  /* The sorted index: (tree id, node id) pairs must be unique. */
  if (!(t.sorted = malloc(n * sizeof *t.sorted))) goto nomem;
  for (size_t i = 0; i < n; i++) t.sorted[i] = (nkey_t){ntree[i], nnode[i], i};
  qsort(t.sorted, n, sizeof *t.sorted, cmp_key);
  for (size_t k = 1; k < n; k++) {
    size_t a = t.sorted[k - 1].idx, b = t.sorted[k].idx;
    if (ntree[a] == ntree[b] && nnode[a] == nnode[b]) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "tree %lld node %lld is defined twice (entries %zu "
                          "and %zu)", (long long)ntree[a], (long long)nnode[a], a, b);
      goto done;
    }
  }

  /* Number branches and leaves in array order; trees by their first node. A tree whose first
   * node is a leaf is a single leaf: it gets a branch of its own (both ways to the leaf). */
  size_t nb = 0, nl = 0, ntrees = 0;
  if (!(t.bidx = malloc(n * sizeof *t.bidx))) goto nomem;
  for (size_t i = 0; i < n; i++) t.bidx[i] = t.modes[i] == MODE_LEAF ? (int64_t)nl++ : (int64_t)nb++;
  /* The root of each tree: its smallest array index (the first of its run in the index). */
  if (!(t.roots = malloc(n * sizeof *t.roots)) || !(t.tree_ids = malloc(n * sizeof(int64_t))))
    goto nomem;
  for (size_t k = 0; k < n;) { /* runs of one tree id in the sorted index */
    size_t e = k, first = t.sorted[k].idx;
    for (; e < n && t.sorted[e].tree == t.sorted[k].tree; e++)
      if (t.sorted[e].idx < first) first = t.sorted[e].idx;
    t.roots[ntrees] = (int64_t)first; /* an array index for now */
    ntrees++;
    k = e;
  }
  /* trees in the order their roots appear */
  for (size_t a = 1; a < ntrees; a++) { /* insertion sort on array index: ids are distinct */
    int64_t v = t.roots[a];
    size_t b = a;
    while (b > 0 && t.roots[b - 1] > v) {
      t.roots[b] = t.roots[b - 1];
      b--;
    }
    t.roots[b] = v;
  }
  for (size_t k = 0; k < n;) { /* every tree has a leaf (else its branches go round) */
    size_t e = k, leaves = 0;
    for (; e < n && t.sorted[e].tree == t.sorted[k].tree; e++)
      leaves += t.modes[t.sorted[e].idx] == MODE_LEAF;
    if (!leaves) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "tree %lld has no leaves (all its %zu nodes are "
                          "branches)", (long long)t.sorted[k].tree, e - k);
      goto done;
    }
    k = e;
  }
  size_t single = 0; /* trees that are one leaf */
  for (size_t k = 0; k < ntrees; k++) single += t.modes[t.roots[k]] == MODE_LEAF;
  size_t nn = nb + single;
  size_t alloc = nn ? nn : 1;
  if (!(t.feat = malloc(alloc * sizeof(int64_t))) || !(t.tid = malloc(alloc * sizeof(int64_t))) ||
      !(t.tleaf = malloc(alloc * sizeof(int64_t))) || !(t.fid = malloc(alloc * sizeof(int64_t))) ||
      !(t.fleaf = malloc(alloc * sizeof(int64_t))) || !(t.miss = malloc(alloc * sizeof(int64_t))) ||
      !(t.split = malloc(alloc * sizeof(float))) || !(t.orig = malloc(alloc * sizeof(size_t))))
    goto nomem;
  uint8_t *bmodes = malloc(alloc);
  if (!bmodes) goto nomem;
  for (size_t i = 0; i < n; i++) {
    if (t.modes[i] == MODE_LEAF) continue;
    size_t b = (size_t)t.bidx[i];
    t.orig[b] = i;
    t.feat[b] = nfeat[i];
    t.split[b] = vals[i];
    bmodes[b] = t.modes[i];
    /* ONNX Runtime: true when the comparison holds or (tracks_true and NaN); NaN != t holds */
    t.miss[b] = (nmiss && nmiss[i]) || t.modes[i] == TPU__TREE_NEQ;
    const int64_t *kid[2] = {nfalse, ntrue};
    int64_t *dst[2] = {t.fid, t.tid}, *dleaf[2] = {t.fleaf, t.tleaf};
    for (int br = 0; br < 2; br++) {
      long c = find_node(t.sorted, n, ntree[i], kid[br][i]);
      if (c < 0) {
        st = tpu__prep_fail(pc, TPU_EINVAL, "tree %lld node %lld: %s branch names node %lld, "
                            "which tree %lld does not have", (long long)ntree[i],
                            (long long)nnode[i], br ? "true" : "false", (long long)kid[br][i],
                            (long long)ntree[i]);
        free(bmodes);
        goto done;
      }
      dleaf[br][b] = t.modes[c] == MODE_LEAF;
      dst[br][b] = t.bidx[c];
    }
  }
  for (size_t k = 0, extra = nb; k < ntrees; k++) {
    size_t i = (size_t)t.roots[k];
    if (t.modes[i] != MODE_LEAF) {
      t.roots[k] = t.bidx[i];
      continue;
    }
    t.orig[extra] = i; /* a one-leaf tree: a branch that ends in the leaf both ways */
    t.feat[extra] = 0;
    t.split[extra] = 0;
    bmodes[extra] = TPU__TREE_LEQ;
    t.miss[extra] = 0;
    t.fid[extra] = t.tid[extra] = t.bidx[i];
    t.fleaf[extra] = t.tleaf[extra] = 1;
    t.roots[k] = (int64_t)extra++;
  }
  memcpy(t.modes, bmodes, nn); /* n >= nn: branch modes replace node modes */
  free(bmodes);

  /* Leaf entries: each weight names a leaf; a leaf's entries keep the file's order. */
  if (!(t.lfirst = calloc(nl + 1, sizeof *t.lfirst)) ||
      !(t.fill = calloc(nl + 1, sizeof *t.fill)) ||
      !(t.etarget = malloc((nw ? nw : 1) * sizeof *t.etarget)) ||
      !(t.eweight = malloc((nw ? nw : 1) * sizeof *t.eweight)))
    goto nomem;
  for (size_t w = 0; w < nw; w++) {
    long c = find_node(t.sorted, n, wtree[w], wnode[w]);
    if (c < 0) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "weight %zu names tree %lld node %lld, which the "
                          "ensemble does not have", w, (long long)wtree[w], (long long)wnode[w]);
      goto done;
    }
    if (mode_of(ma->strings[c]) != MODE_LEAF) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "weight %zu names tree %lld node %lld, which is a "
                          "branch, not a leaf", w, (long long)wtree[w], (long long)wnode[w]);
      goto done;
    }
    t.lfirst[t.bidx[c] + 1]++;
  }
  for (size_t l = 0; l < nl; l++) t.lfirst[l + 1] += t.lfirst[l];
  for (size_t w = 0; w < nw; w++) {
    long c = find_node(t.sorted, n, wtree[w], wnode[w]);
    size_t l = (size_t)t.bidx[c], at = t.lfirst[l] + t.fill[l]++;
    t.etarget[at] = wid[w];
    t.eweight[at] = wts[w];
  }

  int64_t ntargets;
  const tpu_graph_attr_t *labels = NULL;
  if (clf) {
    labels = tpu_graph_attr(pc->g, pc->node, "classlabels_int64s");
    if (!labels || labels->type != TPU_GRAPH_ATTR_INTS || labels->n < 2) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "attribute 'classlabels_int64s' must list at least "
                          "two class labels");
      goto done;
    }
    ntargets = (int64_t)labels->n;
  } else {
    ntargets = tpu__attr_i(pc, "n_targets", 1);
    if (ntargets < 1 || ntargets > INT32_MAX) {
      st = tpu__prep_fail(pc, TPU_EINVAL, "attribute 'n_targets' is %lld, expected >= 1",
                          (long long)ntargets);
      goto done;
    }
  }
  static const char *const aggs[] = {"AVERAGE", "SUM"};
  static const char *const posts[] = {"NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"};
  int agg = TPU__TREE_SUM, post = TPU__TREE_POST_NONE;
  if (!clf && (st = get_choice(pc, "aggregate_function", "SUM", aggs, 2, "SUM, AVERAGE; MIN "
                               "and MAX are not", &agg)) != TPU_OK)
    goto done;
  if ((st = get_choice(pc, "post_transform", "NONE", posts, 4, "NONE, LOGISTIC, SOFTMAX, "
                       "SOFTMAX_ZERO; PROBIT is not", &post)) != TPU_OK)
    goto done;

  if (!clf && ntargets == 1 && post != TPU__TREE_POST_NONE) {
    st = tpu__prep_fail(pc, TPU_ENOTSUP, "post_transform %s on a one-target regressor is "
                        "ambiguous (ONNX Runtime ignores it, the specification applies it); "
                        "tpud takes NONE here", posts[post]);
    goto done;
  }
  /* The classifier's reading of its scores. */
  int cls = TPU__CLS_MULTI;
  int32_t bin_class = 0;
  if (clf) {
    int64_t first = nw ? wid[0] : 0;
    int one_class = 1, nonneg = 1;
    for (size_t w = 0; w < nw; w++) {
      if (wid[w] != first) one_class = 0;
      if (!(wts[w] >= 0)) nonneg = 0;
    }
    if (ntargets == 2 && one_class && nw) {
      if (s.base && s.nbase != 1) {
        st = tpu__prep_fail(pc, TPU_ENOTSUP, "a two-class ensemble whose weights all go to "
                            "class %lld takes one base value (the score's), got %zu", (long long)first,
                            s.nbase);
        goto done;
      }
      if (post == TPU__TREE_POST_SOFTMAX || post == TPU__TREE_POST_SOFTMAX_ZERO) {
        st = tpu__prep_fail(pc, TPU_ENOTSUP, "a two-class ensemble with one score takes "
                            "post_transform NONE or LOGISTIC, not %s", posts[post]);
        goto done;
      }
      cls = post == TPU__TREE_POST_LOGISTIC ? TPU__CLS_BIN_LOGISTIC
            : nonneg                        ? TPU__CLS_BIN_PROB
                                            : TPU__CLS_BIN_MARGIN;
      bin_class = (int32_t)first;
    }
  }
  if (cls != TPU__CLS_MULTI) { /* the score is one target: its base, if any, goes there */
    s.nbase = s.base ? (size_t)ntargets : 0;
    if (s.base) {
      float b0 = s.base[0];
      free(t.o_base);
      if (!(t.o_base = calloc((size_t)ntargets, sizeof(float)))) goto nomem;
      t.o_base[bin_class >= 0 && bin_class < ntargets ? bin_class : 0] = b0;
      s.base = t.o_base;
    }
  }

  s.nn = nn;
  s.nl = nl;
  s.ne = nw;
  s.nroots = ntrees;
  s.roots = t.roots;
  s.feat = t.feat;
  s.tid = t.tid;
  s.tleaf = t.tleaf;
  s.fid = t.fid;
  s.fleaf = t.fleaf;
  s.miss = t.miss;
  s.split = t.split;
  s.modes = t.modes;
  s.lfirst = t.lfirst;
  s.etarget = t.etarget;
  s.eweight = t.eweight;
  s.ntargets = ntargets;
  s.tree_ids = ntree;
  s.node_ids = nnode;
  s.orig = t.orig;
  s.labels = clf ? labels->ints : NULL;
  if (nl == 0) {
    st = tpu__prep_fail(pc, TPU_EINVAL, "the ensemble has no leaves (no node has mode LEAF)");
    goto done;
  }
  if ((st = assemble(pc, &s, width, out, bytes)) != TPU_OK) goto done;
  tpu__trees_t *p = *out;
  p->kind = clf ? TPU__TREE_CLASSIFIER : TPU__TREE_REGRESSOR;
  p->agg = agg;
  p->post = post;
  p->cls = cls;
  p->bin_class = bin_class;
  p->all_lt = 0; /* v3 nodes take ONNX Runtime's loop (NEQ's NaN rule is in missing_true) */
  /* Without base values a row may leave a class unscored (no leaf it reached has an entry
   * for it): the label is then the largest of the classes it did score, as in ONNX Runtime. */
  p->track = clf && cls == TPU__CLS_MULTI && !s.base;
done:
  v3_free(&t);
  return st;
nomem:
  st = tpu__prep_fail(pc, TPU_ENOMEM, "out of memory for %zu nodes", n);
  goto done;
}

tpu_status_t tpu__trees_build(tpu__prep_t *pc, size_t width, tpu__trees_t **out,
                              size_t *bytes) {
  tpu_graph_node_info_t info;
  *out = NULL;
  *bytes = 0;
  if (tpu_graph_node(pc->g, pc->node, &info) != TPU_OK)
    return tpu__prep_fail(pc, TPU_EINVAL, "no such node");
  if (strcmp(info.op, "TreeEnsembleRegressor") == 0) return build_v3(pc, width, 0, out, bytes);
  if (strcmp(info.op, "TreeEnsembleClassifier") == 0) return build_v3(pc, width, 1, out, bytes);
  return build_v5(pc, width, out, bytes);
}
