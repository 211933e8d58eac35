/*
 * xgboost.c - XGBoost JSON models into the graph IR (see xgboost.h for what is taken).
 *
 * DESIGN
 * One pass over the trees in file order builds the TreeEnsemble attributes (ONNX v5 layout:
 * node arrays, leaf arrays, tree_roots). Each tree is walked breadth-first from node 0; node
 * ids are given in the order nodes are first reached, which is also the order their entries
 * are written (FIFO), so a child's id is known when its parent is written. XGBoost's left
 * child is the "true" branch of a BRANCH_LT node (x < split_condition), default_left is
 * missing_value_tracks_true, and a leaf's split_condition is its weight (learning rate
 * included). A tree that is a single leaf becomes one node whose both branches end in it.
 * Nodes XGBoost pruned (deleted, unreachable from the root) are not copied.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_text.h"
#include "xgboost.h"

#define MAX_NODES ((size_t)1 << 30) /* nodes (or leaves) of one ensemble */
#define SHAP_MAX_DEPTH 256 /* deeper trees get no contributions output: the engine's TreeSHAP
                           * bound (engine/graph/tree_internal.h, TPU__SHAP_MAX_DEPTH) */

typedef struct {
  int64_t *v;
  size_t n, cap;
} i64v_t;

typedef struct {
  float *v;
  size_t n, cap;
} f32v_t;

typedef struct {
  i64v_t feat, tid, tleaf, fid, fleaf, miss, modes, roots, ltarget, lid;
  f32v_t split, lweight, ncover, lcover;
  int oom;
  int no_cover; /* some tree lacks a usable sum_hessian: no contributions */
  int too_deep; /* some tree is deeper than contributions go (SHAP_MAX_DEPTH): none either */
} ens_t;

/* Appends x to the growable array a (doubling from 256); out of memory sets e->oom. */
#define PUSH(e, a, x)                                                                        \
  do {                                                                                       \
    if ((a)->n == (a)->cap) {                                                                \
      size_t c_ = (a)->cap ? (a)->cap * 2 : 256;                                             \
      __typeof__((a)->v) nv_ = realloc((a)->v, c_ * sizeof *nv_);                            \
      if (!nv_) {                                                                            \
        (e)->oom = 1;                                                                        \
        break;                                                                               \
      }                                                                                      \
      (a)->v = nv_;                                                                          \
      (a)->cap = c_;                                                                         \
    }                                                                                        \
    (a)->v[(a)->n++] = (x);                                                                  \
  } while (0)

static void pushi(ens_t *e, i64v_t *a, int64_t x) { PUSH(e, a, x); }
static void pushf(ens_t *e, f32v_t *a, float x) { PUSH(e, a, x); }

static void ens_free(ens_t *e) {
  i64v_t *iv[] = {&e->feat, &e->tid,   &e->tleaf, &e->fid,     &e->fleaf,
                  &e->miss, &e->modes, &e->roots, &e->ltarget, &e->lid};
  for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) free(iv[i]->v);
  free(e->split.v);
  free(e->lweight.v);
  free(e->ncover.v);
  free(e->lcover.v);
}

/* A count stored as XGBoost does (a decimal string, "0") or as a JSON integer. */
static int get_count(json_t *o, const char *key, int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return *out >= 0;
  }
  if (!json_is_string(v)) return 0;
  const char *s = json_string_value(v);
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s || *end || x < 0) return 0;
  *out = x;
  return 1;
}

/* A JSON number as XGBoost's float32; 0 when it is none, or overflows binary32 (XGBoost
 * writes its float32 values, so such a number did not come from it). */
static int json_f32(json_t *v, float *out) {
  if (!json_is_number(v)) return 0;
  float f = (float)json_number_value(v);
  if (!isfinite(f)) return 0;
  *out = f;
  return 1;
}

/* An array element as an integer; a boolean only where XGBoost writes one (default_left). */
static int elem_int_or_bool(json_t *a, size_t i, int64_t *out) {
  json_t *v = json_array_get(a, i);
  if (json_is_integer(v)) *out = json_integer_value(v);
  else if (json_is_boolean(v)) *out = json_is_true(v);
  else return 0;
  return 1;
}

static int elem_int(json_t *a, size_t i, int64_t *out) {
  return json_is_integer(json_array_get(a, i)) && elem_int_or_bool(a, i, out);
}

typedef struct {
  const char *name;
  int logit;    /* base margin = logit(base_score) */
  int post;     /* TreeEnsemble post_transform: 0 none, 1 softmax, 2 logistic */
  int classify; /* outputs "probabilities" instead of "prediction" */
  int multi;
} objective_t;

static const objective_t objectives[] = {
    {"binary:logistic", 1, 2, 1, 0},      {"reg:logistic", 1, 2, 0, 0},
    {"binary:logitraw", 0, 0, 0, 0},      {"reg:squarederror", 0, 0, 0, 0},
    {"reg:linear", 0, 0, 0, 0},           {"reg:squaredlogerror", 0, 0, 0, 0},
    {"reg:pseudohubererror", 0, 0, 0, 0}, {"reg:absoluteerror", 0, 0, 0, 0},
    {"multi:softprob", 0, 1, 1, 1},       {"multi:softmax", 0, 1, 1, 1},
};

#define FAIL(st, ...)                                  \
  do {                                                 \
    rc = tpu_errf_ret((st), err, errlen, __VA_ARGS__); \
    goto done;                                         \
  } while (0)

/* One tree (JSON object t, index ti, output group g) appended to e. */
static tpu_status_t add_tree(ens_t *e, json_t *t, size_t ti, int64_t g, int64_t nfeat,
                             char *err, size_t errlen) {
  static const char *const arrays[] = {"left_children", "right_children", "split_indices",
                                       "split_conditions", "default_left"};
  json_t *a[5];
  tpu_status_t rc = TPU_OK;
  int64_t *id = NULL;   /* per JSON node: its node id, ~leaf id, or INT64_MIN (not reached) */
  size_t *queue = NULL;
  if (!json_is_object(t)) FAIL(TPU_EINVAL, "tree %zu: expected an object", ti);
  for (int k = 0; k < 5; k++)
    if (!json_is_array(a[k] = json_object_get(t, arrays[k])))
      FAIL(TPU_EINVAL, "tree %zu: '%s' is missing or not an array", ti, arrays[k]);
  size_t n = json_array_size(a[0]);
  if (n == 0) FAIL(TPU_EINVAL, "tree %zu: has no nodes, so no leaf", ti);
  if (n > MAX_NODES) FAIL(TPU_ENOTSUP, "tree %zu: %zu nodes, more than tpud takes", ti, n);
  for (int k = 1; k < 5; k++)
    if (json_array_size(a[k]) != n)
      FAIL(TPU_EINVAL, "tree %zu: '%s' has %zu entries, 'left_children' %zu: expected one per "
           "node each", ti, arrays[k], json_array_size(a[k]), n);
  json_t *tp = json_object_get(t, "tree_param");
  int64_t nn;
  if (json_is_object(tp) && get_count(tp, "num_nodes", &nn) && (size_t)nn != n)
    FAIL(TPU_EINVAL, "tree %zu: tree_param.num_nodes is %lld but the arrays hold %zu nodes", ti,
         (long long)nn, n);
  int64_t slv;
  if (json_is_object(tp) && get_count(tp, "size_leaf_vector", &slv) && slv > 1)
    FAIL(TPU_ENOTSUP, "tree %zu: vector leaves (size_leaf_vector %lld, multi-target trees) are "
         "not supported", ti, (long long)slv);
  json_t *st = json_object_get(t, "split_type");
  for (size_t i = 0; json_is_array(st) && i < json_array_size(st); i++) {
    int64_t v;
    if (elem_int(st, i, &v) && v != 0)
      FAIL(TPU_ENOTSUP, "tree %zu node %zu: a categorical split (split_type %lld); tpud serves "
           "numerical splits only", ti, i, (long long)v);
  }
  if (!(id = malloc(n * sizeof *id)) || !(queue = malloc(2 * n * sizeof *queue)))
    FAIL(TPU_ENOMEM, "tree %zu: out of memory", ti);
  /* sum_hessian: each node's training cover, which contributions (TreeSHAP) weigh paths by */
  json_t *hess = json_object_get(t, "sum_hessian");
  if (!json_is_array(hess) || json_array_size(hess) != n) e->no_cover = 1;
#define COVER(k)                                                                             \
  do {                                                                                       \
    float c_ = 0;                                                                            \
    if (!e->no_cover && (!json_f32(json_array_get(hess, (k)), &c_) || c_ < 0)) e->no_cover = 1; \
    cov_ = c_;                                                                               \
  } while (0)
  float cov_ = 0;
  for (size_t i = 0; i < n; i++) id[i] = INT64_MIN;
  int64_t l0;
  if (!elem_int(a[0], 0, &l0))
    FAIL(TPU_EINVAL, "tree %zu node 0: left child is not an integer", ti);
  size_t base_node = e->feat.n;
  pushi(e, &e->roots, (int64_t)base_node);
  if (l0 == -1) { /* a single leaf: one node, both branches to it */
    float wv;
    if (!json_f32(json_array_get(a[3], 0), &wv))
      FAIL(TPU_EINVAL, "tree %zu node 0: leaf value is not a finite float32 number", ti);
    int64_t leaf = (int64_t)e->lweight.n;
    pushf(e, &e->lweight, wv);
    pushi(e, &e->ltarget, g);
    pushi(e, &e->lid, 0);
    COVER(0);
    pushf(e, &e->ncover, cov_ > 0 ? cov_ : 1); /* the stand-in root: never weighed */
    pushf(e, &e->lcover, cov_);
    pushi(e, &e->feat, 0);
    pushf(e, &e->split, 0);
    pushi(e, &e->tid, leaf);
    pushi(e, &e->tleaf, 1);
    pushi(e, &e->fid, leaf);
    pushi(e, &e->fleaf, 1);
    pushi(e, &e->miss, 0);
    pushi(e, &e->modes, 1);
    goto done;
  }
  size_t head = 0, tail = 0;
  id[0] = (int64_t)base_node;
  queue[n] = 1; /* queue[n + i]: the depth of queue[i] (levels of branch nodes) */
  queue[tail++] = 0;
  while (head < tail) {
    size_t depth = queue[n + head], k = queue[head++];
    if (depth > SHAP_MAX_DEPTH) e->too_deep = 1;
    int64_t ch[2], feat, dl;
    float split;
    if (!elem_int(a[0], k, &ch[0]) || !elem_int(a[1], k, &ch[1]) ||
        !elem_int(a[2], k, &feat) || !elem_int_or_bool(a[4], k, &dl) ||
        !json_f32(json_array_get(a[3], k), &split))
      FAIL(TPU_EINVAL, "tree %zu node %zu: children, split index and default_left must be "
           "integers and split_condition a finite float32 number", ti, k);
    if (feat >= nfeat)
      FAIL(TPU_EINVAL, "tree %zu node %zu: splits on feature %lld, beyond the model's %lld "
           "input features (learner_model_param.num_feature)", ti, k, (long long)feat,
           (long long)nfeat);
    if (feat < 0)
      FAIL(TPU_EINVAL, "tree %zu node %zu: feature index %lld is negative", ti, k,
           (long long)feat);
    int64_t out[2];
    for (int b = 0; b < 2; b++) {
      int64_t c = ch[b];
      if (c < 0 || (uint64_t)c >= n)
        FAIL(TPU_EINVAL, "tree %zu node %zu: %s child %lld is out of range [0, %zu)", ti, k,
             b ? "right" : "left", (long long)c, n);
      if (id[c] != INT64_MIN || c == 0)
        FAIL(TPU_EINVAL, "tree %zu node %zu: %s child %lld is reached twice (a cycle, or a "
             "node with two parents)", ti, k, b ? "right" : "left", (long long)c);
      int64_t cl, cr;
      if (!elem_int(a[0], (size_t)c, &cl) || !elem_int(a[1], (size_t)c, &cr))
        FAIL(TPU_EINVAL, "tree %zu node %lld: children are not integers", ti, (long long)c);
      if ((cl == -1) != (cr == -1))
        FAIL(TPU_EINVAL, "tree %zu node %lld: one child is -1 (a leaf) and the other %lld: "
             "expected both or neither", ti, (long long)c, (long long)(cl == -1 ? cr : cl));
      if (cl == -1) { /* a leaf */
        float wv;
        if (!json_f32(json_array_get(a[3], (size_t)c), &wv))
          FAIL(TPU_EINVAL, "tree %zu node %lld: leaf value is not a finite float32 number", ti,
               (long long)c);
        out[b] = ~(int64_t)e->lweight.n;
        pushf(e, &e->lweight, wv);
        pushi(e, &e->ltarget, g);
        pushi(e, &e->lid, c);
        COVER((size_t)c);
        pushf(e, &e->lcover, cov_);
      } else {
        out[b] = (int64_t)(base_node + tail);
        queue[n + tail] = depth + 1;
        queue[tail++] = (size_t)c;
      }
      id[c] = out[b];
    }
    /* XGBoost: x < split goes left (true); NaN follows default_left. */
    COVER(k);
    if (!(cov_ > 0)) e->no_cover = 1; /* a split node covers something */
    pushf(e, &e->ncover, cov_);
    pushi(e, &e->feat, feat);
    pushf(e, &e->split, split);
    pushi(e, &e->tid, out[0] < 0 ? ~out[0] : out[0]);
    pushi(e, &e->tleaf, out[0] < 0);
    pushi(e, &e->fid, out[1] < 0 ? ~out[1] : out[1]);
    pushi(e, &e->fleaf, out[1] < 0);
    pushi(e, &e->miss, dl != 0);
    pushi(e, &e->modes, 1);
  }
#undef COVER
done:
  if (rc == TPU_OK && e->oom) rc = tpu_errf_ret(TPU_ENOMEM, err, errlen, "out of memory");
  free(id);
  free(queue);
  return rc;
}

static tpu_status_t graph_fail(tpu_graph_t *g, char *err, size_t errlen) {
  return tpu_errf_ret(TPU_EINVAL, err, errlen, "building the graph: %s", tpu_graph_error(g));
}

tpu_status_t tpu_xgboost_to_graph(const char *json, size_t len, const char *input_name,
                                  tpu_graph_t **out, char *err, size_t errlen) {
  tpu_status_t rc = TPU_OK;
  ens_t e = {0};
  tpu_graph_t *g = NULL;
  json_t *root = NULL;
  if (err && errlen) err[0] = 0;
  if (!out || (!json && len)) return tpu_errf_ret(TPU_EINVAL, err, errlen, "invalid argument");
  *out = NULL;
  if (!input_name) input_name = "input";
  json_error_t jerr;
  if (!(root = json_loadb(json, len, 0, &jerr)))
    FAIL(TPU_EINVAL, "not valid JSON: %s (line %d, column %d); expected an XGBoost model saved "
         "with Booster.save_model(\"m.json\")", jerr.text, jerr.line, jerr.column);
  json_t *learner = json_object_get(root, "learner");
  if (!json_is_object(learner))
    FAIL(TPU_EINVAL, "no 'learner' object: not an XGBoost JSON model (Booster.save_model with "
         "a .json name writes one; .ubj and the old binary format are not read)");
  json_t *gb = json_object_get(learner, "gradient_booster");
  const char *gbn = json_string_value(json_object_get(gb, "name"));
  if (!gbn) FAIL(TPU_EINVAL, "learner.gradient_booster.name is missing");
  if (strcmp(gbn, "gbtree") != 0)
    FAIL(TPU_ENOTSUP, "booster '%s' is not supported (tpud serves \"gbtree\")", gbn);
  const char *objn = json_string_value(json_object_get(json_object_get(learner, "objective"),
                                                       "name"));
  if (!objn) FAIL(TPU_EINVAL, "learner.objective.name is missing");
  const objective_t *obj = NULL;
  for (size_t i = 0; i < sizeof objectives / sizeof objectives[0]; i++)
    if (strcmp(objectives[i].name, objn) == 0) obj = &objectives[i];
  if (!obj)
    FAIL(TPU_ENOTSUP, "objective '%s' is not supported (tpud serves binary:logistic, "
         "binary:logitraw, reg:logistic, reg:squarederror, reg:linear, reg:squaredlogerror, "
         "reg:pseudohubererror, reg:absoluteerror, multi:softprob, multi:softmax)", objn);
  json_t *mp = json_object_get(learner, "learner_model_param");
  int64_t nclass = 0, nfeat = 0, ntarget = 1;
  if (!json_is_object(mp) || !get_count(mp, "num_feature", &nfeat) ||
      !get_count(mp, "num_class", &nclass))
    FAIL(TPU_EINVAL, "learner.learner_model_param: num_feature and num_class must be counts");
  if (json_object_get(mp, "num_target") && (!get_count(mp, "num_target", &ntarget) || ntarget != 1))
    FAIL(TPU_ENOTSUP, "learner_model_param.num_target is not 1: multi-target models are not "
         "supported");
  if (nfeat < 1 || nfeat > (1 << 24))
    FAIL(TPU_EINVAL, "learner_model_param.num_feature is %lld, expected 1 to %d", (long long)nfeat,
         1 << 24);
  if (obj->multi && (nclass < 2 || nclass > 65536))
    FAIL(TPU_EINVAL, "objective '%s' needs learner_model_param.num_class from 2 to 65536, got "
         "%lld", objn, (long long)nclass);
  if (!obj->multi && nclass > 1)
    FAIL(TPU_EINVAL, "objective '%s' with num_class %lld: expected a multi:* objective", objn,
         (long long)nclass);
  int64_t groups = obj->multi ? nclass : 1;
  json_t *bsv = json_object_get(mp, "base_score");
  float bs;
  if (json_is_string(bsv)) {
    char *end;
    const char *s = json_string_value(bsv);
    const char *p = s[0] == '[' ? s + 1 : s; /* later versions write one intercept as "[5E-1]" */
    bs = strtof(p, &end);
    if (end == p || (s[0] == '[' ? strcmp(end, "]") != 0 : *end != 0))
      FAIL(TPU_EINVAL, "learner_model_param.base_score '%s' is not a number", s);
  } else if (json_is_number(bsv)) {
    bs = (float)json_number_value(bsv);
  } else {
    FAIL(TPU_EINVAL, "learner_model_param.base_score is missing");
  }
  float base = bs;
  if (obj->logit) { /* XGBoost's ProbToMargin, in float */
    if (!(bs > 0 && bs < 1))
      FAIL(TPU_EINVAL, "base_score %g: objective '%s' needs a probability in (0, 1)", bs, objn);
    base = -logf(1.0f / bs - 1.0f);
  }
  if (!isfinite(base)) FAIL(TPU_EINVAL, "base_score %g is not finite", bs);

  json_t *model = json_object_get(gb, "model");
  json_t *trees = json_object_get(model, "trees");
  json_t *info = json_object_get(model, "tree_info");
  if (!json_is_array(trees) || !json_is_array(info))
    FAIL(TPU_EINVAL, "learner.gradient_booster.model: 'trees' and 'tree_info' must be arrays");
  size_t nt = json_array_size(trees);
  if (nt == 0) FAIL(TPU_EINVAL, "the model has no trees");
  if (json_array_size(info) != nt)
    FAIL(TPU_EINVAL, "tree_info has %zu entries for %zu trees: expected one per tree",
         json_array_size(info), nt);
  json_t *gp = json_object_get(model, "gbtree_model_param");
  int64_t declared, npar = 1;
  if (json_is_object(gp) && get_count(gp, "num_trees", &declared) && (size_t)declared != nt)
    FAIL(TPU_EINVAL, "gbtree_model_param.num_trees is %lld but 'trees' holds %zu",
         (long long)declared, nt);
  if (json_is_object(gp) && json_object_get(gp, "num_parallel_tree") &&
      (!get_count(gp, "num_parallel_tree", &npar) || npar < 1))
    FAIL(TPU_EINVAL, "gbtree_model_param.num_parallel_tree must be a positive count");
  for (size_t t = 0; t < nt; t++) {
    int64_t grp;
    if (!elem_int(info, t, &grp) || grp < 0 || grp >= groups)
      FAIL(TPU_EINVAL, "tree %zu: tree_info gives it output group %s, expected 0 to %lld", t,
           elem_int(info, t, &grp) ? "out of range" : "that is not an integer",
           (long long)groups - 1);
    json_t *tj = json_array_get(trees, t);
    if ((rc = add_tree(&e, tj, t, grp, nfeat, err, errlen)) != TPU_OK) goto done;
    if (e.feat.n > MAX_NODES || e.lweight.n > MAX_NODES)
      FAIL(TPU_ENOTSUP, "the ensemble has more than 2^30 nodes or leaves");
  }

  /* The graph. */
  if (tpu_graph_new(&g) != TPU_OK) FAIL(TPU_ENOMEM, "out of memory");
  int64_t dims[2] = {TPU_GRAPH_BATCH, nfeat};
  const char *y = obj->classify ? "probabilities" : "prediction";
  /* The node's outputs: the prediction, the margin, and on request each tree's leaf and (with
   * covers) the contributions; the graph's add multi:softmax's label after the margin. */
  const char *nouts_[4] = {y, "margin", "leaf_index", "contributions"};
  int contrib = !e.no_cover && !e.too_deep;
  size_t nnode_out = contrib ? 4 : 3;
  const char *outs[5] = {y, "margin"};
  size_t nouts = 2;
  int with_label = obj->multi && strcmp(objn, "multi:softmax") == 0;
  if (with_label) outs[nouts++] = "label";
  outs[nouts++] = "leaf_index";
  if (contrib) outs[nouts++] = "contributions";
  size_t node;
  if (tpu_graph_add_tensor(g, input_name, TPU_GRAPH_FP32, 2, dims) != TPU_OK ||
      tpu_graph_add_node(g, "trees", "TreeEnsemble", "ai.onnx.ml", 5, 1, &input_name,
                         nnode_out, nouts_, &node) != TPU_OK)
    FAIL(TPU_EINVAL, "building the graph: %s", tpu_graph_error(g));
  float *bv = malloc((size_t)groups * sizeof *bv);
  if (!bv) FAIL(TPU_ENOMEM, "out of memory");
  for (int64_t i = 0; i < groups; i++) bv[i] = base;
  const struct {
    const char *name;
    i64v_t *v;
  } ints[] = {{"tree_roots", &e.roots},
              {"nodes_featureids", &e.feat},
              {"nodes_truenodeids", &e.tid},
              {"nodes_trueleafs", &e.tleaf},
              {"nodes_falsenodeids", &e.fid},
              {"nodes_falseleafs", &e.fleaf},
              {"nodes_missing_value_tracks_true", &e.miss},
              {"nodes_modes", &e.modes},
              {"leaf_targetids", &e.ltarget},
              {"tpud_leaf_ids", &e.lid}};
  int bad = 0;
  for (size_t i = 0; i < sizeof ints / sizeof ints[0] && !bad; i++) {
    tpu_graph_attr_t at = {.name = ints[i].name, .type = TPU_GRAPH_ATTR_INTS,
                           .n = ints[i].v->n, .ints = ints[i].v->v};
    bad = tpu_graph_add_attr(g, node, &at) != TPU_OK;
  }
  tpu_graph_attr_t fa[] = {
      {.name = "nodes_splits", .type = TPU_GRAPH_ATTR_FLOATS, .n = e.split.n, .floats = e.split.v},
      {.name = "leaf_weights", .type = TPU_GRAPH_ATTR_FLOATS, .n = e.lweight.n,
       .floats = e.lweight.v},
      {.name = "base_values", .type = TPU_GRAPH_ATTR_FLOATS, .n = (size_t)groups, .floats = bv},
      {.name = "n_targets", .type = TPU_GRAPH_ATTR_INT, .i = groups},
      {.name = "aggregate_function", .type = TPU_GRAPH_ATTR_INT, .i = 1},
      {.name = "post_transform", .type = TPU_GRAPH_ATTR_INT, .i = obj->post},
      {.name = "tpud_node_covers", .type = TPU_GRAPH_ATTR_FLOATS, .n = e.ncover.n,
       .floats = e.ncover.v},
      {.name = "tpud_leaf_covers", .type = TPU_GRAPH_ATTR_FLOATS, .n = e.lcover.n,
       .floats = e.lcover.v}};
  size_t nfa = sizeof fa / sizeof fa[0] - (e.no_cover ? 2 : 0);
  for (size_t i = 0; i < nfa && !bad; i++) bad = tpu_graph_add_attr(g, node, &fa[i]) != TPU_OK;
  free(bv);
  if (bad) {
    rc = graph_fail(g, err, errlen);
    goto done;
  }
  if (with_label) { /* multi:softmax's predict: the class of largest margin */
    const char *mi = "margin", *lo = "label";
    tpu_graph_attr_t ax = {.name = "axis", .type = TPU_GRAPH_ATTR_INT, .i = 1};
    tpu_graph_attr_t kd = {.name = "keepdims", .type = TPU_GRAPH_ATTR_INT, .i = 0};
    if (tpu_graph_add_node(g, "label", "ArgMax", "", 13, 1, &mi, 1, &lo, &node) != TPU_OK ||
        tpu_graph_add_attr(g, node, &ax) != TPU_OK || tpu_graph_add_attr(g, node, &kd) != TPU_OK) {
      rc = graph_fail(g, err, errlen);
      goto done;
    }
  }
  if (tpu_graph_set_inputs(g, 1, &input_name) != TPU_OK ||
      tpu_graph_set_outputs(g, nouts, outs) != TPU_OK ||
      tpu_graph_set_on_request(g, "leaf_index") != TPU_OK ||
      (contrib && tpu_graph_set_on_request(g, "contributions") != TPU_OK) ||
      tpu_graph_validate(g) != TPU_OK) {
    rc = graph_fail(g, err, errlen);
    goto done;
  }
  (void)npar;
  *out = g;
  g = NULL;
done:
  tpu_graph_free(g);
  ens_free(&e);
  json_decref(root);
  return rc;
}
