/*
 * test_graph_tree.c - the ai.onnx.ml TreeEnsemble op (engine/graph/ops_tree.c): branch rules
 * with NaN and ±Inf, XGBoost's float32 accumulation, the post transforms, random ensembles
 * against a plain reference traversal at several batch sizes, and the structural refusals
 * (each naming the tree and node).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test.h"

/* An ensemble in TreeEnsemble v5's arrays (see ops_tree.c). */
typedef struct {
  size_t nn, nl, nt, ntargets;
  int64_t feat[512], tid[512], tleaf[512], fid[512], fleaf[512], miss[512], modes[512];
  float split[512];
  int64_t ltarget[512];
  float lw[512];
  int64_t roots[64];
  float base[8];
  int64_t post, agg;
} ens_t;

static void add_ints(tpu_graph_t *g, size_t node, const char *name, const int64_t *v, size_t n) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_INTS, .n = n, .ints = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, node, &a) == TPU_OK);
}

static void add_floats(tpu_graph_t *g, size_t node, const char *name, const float *v, size_t n) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_FLOATS, .n = n, .floats = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, node, &a) == TPU_OK);
}

/* X FP32 [-1, width] -> TreeEnsemble -> "y" and "raw". */
static tpu_graph_t *build(const ens_t *e, int64_t width) {
  tpu_graph_t *g = tg_new();
  int64_t d[2] = {-1, width};
  tg_input(g, "x", TPU_GRAPH_FP32, 2, d);
  const char *in[1] = {"x"}, *out[2] = {"y", "raw"};
  size_t n;
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "trees", "TreeEnsemble", "ai.onnx.ml", 5, 1, in, 2, out,
                                     &n) == TPU_OK);
  add_ints(g, n, "tree_roots", e->roots, e->nt);
  add_ints(g, n, "nodes_featureids", e->feat, e->nn);
  add_floats(g, n, "nodes_splits", e->split, e->nn);
  add_ints(g, n, "nodes_modes", e->modes, e->nn);
  add_ints(g, n, "nodes_truenodeids", e->tid, e->nn);
  add_ints(g, n, "nodes_trueleafs", e->tleaf, e->nn);
  add_ints(g, n, "nodes_falsenodeids", e->fid, e->nn);
  add_ints(g, n, "nodes_falseleafs", e->fleaf, e->nn);
  add_ints(g, n, "nodes_missing_value_tracks_true", e->miss, e->nn);
  add_ints(g, n, "leaf_targetids", e->ltarget, e->nl);
  add_floats(g, n, "leaf_weights", e->lw, e->nl);
  add_floats(g, n, "base_values", e->base, e->ntargets);
  tg_attr_i(g, n, "n_targets", (int64_t)e->ntargets);
  tg_attr_i(g, n, "post_transform", e->post);
  tg_attr_i(g, n, "aggregate_function", e->agg);
  tg_io(g, "x", "y,raw");
  return g;
}

/* Compiles g at `rows` and runs x; fills y and raw (rows x ntargets). */
static void run(tpu_graph_t *g, size_t rows, const float *x, float *y, float *raw) {
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), (int64_t)rows, NULL, &p);
  if (st != TPU_OK) fprintf(stderr, "compile: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
  const void *ins[1] = {x};
  void *outs[2] = {y, raw};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, ins, outs) == TPU_OK);
  tpu_graph_program_free(p);
}

/* Adds node i: feature f, split s, mode m, branches (id, is_leaf), missing to true. */
static void node(ens_t *e, size_t i, int64_t f, float s, int64_t m, int64_t t, int tl, int64_t fl,
                 int fll, int miss) {
  e->feat[i] = f;
  e->split[i] = s;
  e->modes[i] = m;
  e->tid[i] = t;
  e->tleaf[i] = tl;
  e->fid[i] = fl;
  e->fleaf[i] = fll;
  e->miss[i] = miss;
  if (i + 1 > e->nn) e->nn = i + 1;
}

static void leaf(ens_t *e, size_t i, int64_t target, float w) {
  e->ltarget[i] = target;
  e->lw[i] = w;
  if (i + 1 > e->nl) e->nl = i + 1;
}

/* Two trees on two features, XGBoost's rule (BRANCH_LT, x < split is the true branch):
 *   tree 0: n0 x0 < 0.5 (NaN: true) -> n1 | leaf0 1.0;
 *           n1 x1 < -1 (NaN: false) -> leaf1 2 | leaf2 3
 *   tree 1: n2 x1 < 0 (NaN: true) -> leaf3 0.25 | leaf4 -0.25
 * base 0.5. */
static void two_trees(ens_t *e) {
  memset(e, 0, sizeof *e);
  node(e, 0, 0, 0.5f, 1, 1, 0, 0, 1, 1);
  node(e, 1, 1, -1.0f, 1, 1, 1, 2, 1, 0);
  node(e, 2, 1, 0.0f, 1, 3, 1, 4, 1, 1);
  leaf(e, 0, 0, 1.0f);
  leaf(e, 1, 0, 2.0f);
  leaf(e, 2, 0, 3.0f);
  leaf(e, 3, 0, 0.25f);
  leaf(e, 4, 0, -0.25f);
  e->roots[0] = 0;
  e->roots[1] = 2;
  e->nt = 2;
  e->ntargets = 1;
  e->base[0] = 0.5f;
  e->agg = 1; /* SUM */
}

static void test_branches_nan_inf(void) {
  ens_t e;
  two_trees(&e);
  const float nan = NAN, inf = INFINITY;
  const float x[][2] = {
      {0, 0},        /* t0: 0<0.5 -> n1: 0<-1 no -> leaf2 3; t1: 0<0 no -> -0.25 */
      {nan, 0},      /* NaN -> true -> n1 -> 3; -0.25 */
      {1, nan},      /* 1<0.5 no -> leaf0 1; NaN -> true -> 0.25 */
      {0, nan},      /* n1: NaN -> false -> 3; 0.25 */
      {inf, -inf},   /* +Inf compares: false -> 1; -Inf < 0 -> 0.25 */
      {-inf, -inf},  /* true -> n1: -Inf < -1 -> 2; 0.25 */
      {0.5f, -1.0f}, /* equal to the split: not less -> 1; -1 < 0 -> 0.25 */
      {0.4999999f, -1.0000001f}, /* just below: n1 -> 2; 0.25 */
  };
  const float want[] = {0.5f + 3 - 0.25f, 0.5f + 3 - 0.25f, 0.5f + 1 + 0.25f, 0.5f + 3 + 0.25f,
                        0.5f + 1 + 0.25f, 0.5f + 2 + 0.25f, 0.5f + 1 + 0.25f, 0.5f + 2 + 0.25f};
  size_t rows = sizeof want / sizeof want[0];
  tpu_graph_t *g = build(&e, 2);
  float y[8], raw[8];
  run(g, rows, &x[0][0], y, raw);
  for (size_t r = 0; r < rows; r++) {
    CU_ASSERT_EQUAL(y[r], want[r]);
    CU_ASSERT_EQUAL(raw[r], want[r]);
  }
  tpu_graph_free(g);

  /* BRANCH_LEQ: equality takes the true branch; NaN with tracks_true 0 takes false even for
   * NEQ (whose comparison would hold). */
  e.modes[0] = 0;
  e.modes[2] = 5; /* NEQ: x1 != 0 -> 0.25 */
  e.miss[2] = 0;
  g = build(&e, 2);
  const float x2[][2] = {{0.5f, 0}, {0.5f, nan}, {0.6f, 1}};
  run(g, 3, &x2[0][0], y, raw);
  CU_ASSERT_EQUAL(y[0], 0.5f + 3 - 0.25f);
  CU_ASSERT_EQUAL(y[1], 0.5f + 3 - 0.25f);
  CU_ASSERT_EQUAL(y[2], 0.5f + 1 + 0.25f);
  tpu_graph_free(g);
}

static void test_logistic_and_average(void) {
  ens_t e;
  two_trees(&e);
  e.post = 2;
  tpu_graph_t *g = build(&e, 2);
  const float x[2][2] = {{0, 0}, {1, -5}};
  float y[2], raw[2];
  run(g, 2, &x[0][0], y, raw);
  CU_ASSERT_EQUAL(raw[0], 3.25f);
  CU_ASSERT_EQUAL(raw[1], 1.75f);
  for (int r = 0; r < 2; r++)
    CU_ASSERT_DOUBLE_EQUAL(y[r], 1 / (1 + exp(-(double)raw[r])), 1e-7);
  tpu_graph_free(g);
  e.post = 0;
  e.agg = 2; /* MIN: refused */
  g = build(&e, 2);
  tpu_graph_program_t *p = NULL;
  CU_ASSERT_EQUAL(tpu_graph_compile(g, tg_engine(), 1, NULL, &p), TPU_ENOTSUP);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "aggregate_function 2"));
  tpu_graph_free(g);
  e.agg = 0; /* AVERAGE: the leaf sum over the trees, then the base */
  g = build(&e, 2);
  run(g, 2, &x[0][0], y, raw);
  CU_ASSERT_EQUAL(y[0], (3.0f - 0.25f) / 2 + 0.5f);
  tpu_graph_free(g);
}

/* A random ensemble: ntrees trees of up to `depth` levels over `width` features, ntargets
 * targets (each tree feeds one), modes all LT or mixed. */
static void random_ens(ens_t *e, size_t ntrees, int depth, int64_t width, size_t ntargets,
                       int mixed) {
  memset(e, 0, sizeof *e);
  e->agg = 1;
  e->ntargets = ntargets;
  for (size_t k = 0; k < ntargets; k++) e->base[k] = tpu_test_rand_float(-1, 1);
  for (size_t t = 0; t < ntrees; t++) {
    int64_t target = (int64_t)(t % ntargets);
    /* breadth-first: a queue of (node slot, level) */
    size_t q[64], lv[64], head = 0, tail = 0;
    e->roots[t] = (int64_t)e->nn;
    q[tail] = e->nn++;
    lv[tail++] = 0;
    while (head < tail) {
      size_t i = q[head], l = lv[head++];
      int64_t br[2];
      int isleaf[2];
      for (int b = 0; b < 2; b++) {
        if ((int)l + 1 >= depth || tpu_test_rand_range(0, 3) == 0 || tail >= 60) {
          isleaf[b] = 1;
          br[b] = (int64_t)e->nl;
          leaf(e, e->nl, target, tpu_test_rand_float(-0.3f, 0.3f));
        } else {
          isleaf[b] = 0;
          br[b] = (int64_t)e->nn;
          q[tail] = e->nn++;
          lv[tail++] = l + 1;
        }
      }
      node(e, i, tpu_test_rand_range(0, width - 1), tpu_test_rand_float(-1, 1),
           mixed ? tpu_test_rand_range(0, 5) : 1, br[0], isleaf[0], br[1], isleaf[1],
           (int)tpu_test_rand_range(0, 1));
    }
  }
  e->nt = ntrees;
}

/* The plain reference: per row, per tree, from the root, in float32. */
static void reference(const ens_t *e, const float *x, size_t rows, int64_t width, float *out) {
  for (size_t r = 0; r < rows; r++) {
    const float *row = x + r * (size_t)width;
    float *acc = out + r * e->ntargets;
    for (size_t k = 0; k < e->ntargets; k++) acc[k] = e->base[k];
    for (size_t t = 0; t < e->nt; t++) {
      int64_t n = e->roots[t];
      for (;;) {
        float v = row[e->feat[n]], s = e->split[n];
        int yes;
        if (isnan(v)) yes = (int)e->miss[n];
        else if (e->modes[n] == 0) yes = v <= s;
        else if (e->modes[n] == 1) yes = v < s;
        else if (e->modes[n] == 2) yes = v >= s;
        else if (e->modes[n] == 3) yes = v > s;
        else if (e->modes[n] == 4) yes = v == s;
        else yes = v != s;
        int64_t next = yes ? e->tid[n] : e->fid[n];
        if (yes ? e->tleaf[n] : e->fleaf[n]) {
          acc[e->ltarget[next]] += e->lw[next];
          break;
        }
        n = next;
      }
    }
  }
}

static void test_random_against_reference(void) {
  for (int round = 0; round < 6; round++) {
    ens_t e;
    int64_t width = tpu_test_rand_range(1, 9);
    size_t ntargets = (size_t)tpu_test_rand_range(1, 4);
    random_ens(&e, (size_t)tpu_test_rand_range(1, 12), (int)tpu_test_rand_range(1, 6), width,
               ntargets, round % 2);
    size_t rows = round < 3 ? 37 : 150; /* one block of rows, and several (ops_tree.c: 64) */
    float x[150 * 9], want[150 * 4], y[150 * 4], raw[150 * 4];
    for (size_t i = 0; i < rows * (size_t)width; i++) {
      long k = tpu_test_rand_range(0, 19);
      x[i] = k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY
           : k == 3 ? e.split[tpu_test_rand_range(0, (long)e.nn - 1)] /* ties */
                    : tpu_test_rand_float(-1.5f, 1.5f);
    }
    reference(&e, x, rows, width, want);
    e.post = ntargets > 1 ? 1 : 0;
    tpu_graph_t *g = build(&e, width);
    run(g, rows, x, y, raw);
    for (size_t i = 0; i < rows * ntargets; i++) TPU_ASSERT_SEED(raw[i] == want[i]);
    for (size_t r = 0; ntargets > 1 && r < rows; r++) { /* softmax against double */
      double mx = -INFINITY, sum = 0;
      for (size_t k = 0; k < ntargets; k++) mx = fmax(mx, want[r * ntargets + k]);
      for (size_t k = 0; k < ntargets; k++) sum += exp(want[r * ntargets + k] - mx);
      for (size_t k = 0; k < ntargets; k++)
        TPU_ASSERT_SEED(fabs(y[r * ntargets + k] - exp(want[r * ntargets + k] - mx) / sum) <
                        1e-6);
    }
    /* Batch composition does not matter: each row alone gives the same bits. */
    for (size_t r = 0; r < rows; r += 13) {
      float y1[4], raw1[4];
      run(g, 1, x + r * (size_t)width, y1, raw1);
      TPU_ASSERT_SEED(memcmp(raw1, raw + r * ntargets, ntargets * sizeof(float)) == 0);
      TPU_ASSERT_SEED(memcmp(y1, y + r * ntargets, ntargets * sizeof(float)) == 0);
    }
    tpu_graph_free(g);
  }
}

/* A program compiled with opts.share reuses the validated ensemble of the one it shares with
 * (model_graph.c compiles the largest bucket first) and computes the same. */
static void test_shared_between_buckets(void) {
  ens_t e;
  random_ens(&e, 8, 5, 4, 2, 0);
  tpu_graph_t *g = build(&e, 4);
  tpu_graph_program_t *big = NULL, *small = NULL;
  CU_ASSERT_FATAL(tpu_graph_compile(g, tg_engine(), 64, NULL, &big) == TPU_OK);
  tpu_graph_compile_opts_t o = {.precision = TPU_DTYPE_FP32, .share = big};
  CU_ASSERT_FATAL(tpu_graph_compile(g, tg_engine(), 3, &o, &small) == TPU_OK);
  char d[512];
  tpu_graph_program_describe(small, d, sizeof d);
  CU_ASSERT_PTR_NOT_NULL(strstr(d, "8 trees"));
  CU_ASSERT_PTR_NOT_NULL(strstr(d, "(trees shared)"));
  CU_ASSERT(tpu_graph_program_memory(small) < tpu_graph_program_memory(big));
  float x[12], y[6], raw[6], want[6];
  for (int i = 0; i < 12; i++) x[i] = i % 5 == 0 ? NAN : tpu_test_rand_float(-1, 1);
  const void *ins[1] = {x};
  void *outs[2] = {y, raw};
  CU_ASSERT_FATAL(tpu_graph_program_run(small, ins, outs) == TPU_OK);
  reference(&e, x, 3, 4, want);
  for (int i = 0; i < 6; i++) TPU_ASSERT_SEED(raw[i] == want[i]);
  tpu_graph_program_free(small);
  tpu_graph_program_free(big);
  tpu_graph_free(g);
}

/* Compiling e over `width` features fails with st and a message containing `want`. */
static void refused(const ens_t *e, int64_t width, tpu_status_t st, const char *want) {
  tpu_graph_t *g = build(e, width);
  tpu_graph_program_t *p = NULL;
  tpu_status_t got = tpu_graph_compile(g, tg_engine(), 2, NULL, &p);
  CU_ASSERT_EQUAL(got, st);
  CU_ASSERT_PTR_NULL(p);
  if (!strstr(tpu_graph_error(g), want))
    fprintf(stderr, "\nexpected '%s' in: %s\n", want, tpu_graph_error(g));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), want));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "node 'trees' (TreeEnsemble"));
  tpu_graph_free(g);
}

static void test_refusals(void) {
  ens_t e;
  two_trees(&e);
  e.tid[1] = 9; /* a leaf id out of range */
  refused(&e, 2, TPU_EINVAL, "tree 0 node 1: true branch names leaf 9, out of range [0, 5)");
  two_trees(&e);
  e.fid[0] = 7;
  e.fleaf[0] = 0;
  refused(&e, 2, TPU_EINVAL, "tree 0 node 0: false branch names node 7");
  two_trees(&e);
  e.tid[1] = 0; /* n1's true branch back to the root: a cycle */
  e.tleaf[1] = 0;
  refused(&e, 2, TPU_EINVAL, "tree 0 node 1: true branch goes to node 0");
  two_trees(&e);
  e.roots[1] = 1; /* tree 1 starts inside tree 0 */
  refused(&e, 2, TPU_EINVAL, "tree 1: root node 1 is also part of an earlier tree");
  two_trees(&e);
  e.feat[2] = 2; /* feature 2 of a 2-column input */
  refused(&e, 2, TPU_EINVAL, "tree 1 node 2: feature 2 is outside the input's 2 columns");
  two_trees(&e);
  e.roots[1] = 3;
  refused(&e, 2, TPU_EINVAL, "tree 1: root node 3 out of range [0, 3)");
  two_trees(&e);
  e.ltarget[4] = 1;
  refused(&e, 2, TPU_EINVAL, "leaf 4: target id 1 out of range [0, 1)");
  two_trees(&e);
  e.modes[0] = 6;
  refused(&e, 2, TPU_ENOTSUP, "node 0: mode 6 is not supported");
  two_trees(&e);
  e.post = 4;
  refused(&e, 2, TPU_ENOTSUP, "post_transform 4 is not supported");
  two_trees(&e);
  e.tleaf[0] = 2;
  refused(&e, 2, TPU_EINVAL, "tree 0 node 0: true leaf flag is 2");

  /* Arrays of different lengths. */
  two_trees(&e);
  tpu_graph_t *g = tg_new();
  int64_t d[2] = {-1, 2};
  tg_input(g, "x", TPU_GRAPH_FP32, 2, d);
  const char *in[1] = {"x"}, *out[1] = {"y"};
  size_t n;
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "trees", "TreeEnsemble", "ai.onnx.ml", 5, 1, in, 1, out,
                                     &n) == TPU_OK);
  add_ints(g, n, "tree_roots", e.roots, 2);
  add_ints(g, n, "nodes_featureids", e.feat, 3);
  add_floats(g, n, "nodes_splits", e.split, 2);
  add_ints(g, n, "nodes_truenodeids", e.tid, 3);
  add_ints(g, n, "nodes_trueleafs", e.tleaf, 3);
  add_ints(g, n, "nodes_falsenodeids", e.fid, 3);
  add_ints(g, n, "nodes_falseleafs", e.fleaf, 3);
  add_ints(g, n, "leaf_targetids", e.ltarget, 5);
  add_floats(g, n, "leaf_weights", e.lw, 5);
  tg_attr_i(g, n, "n_targets", 1);
  tg_io(g, "x", "y");
  tpu_graph_program_t *p = NULL;
  CU_ASSERT_EQUAL(tpu_graph_compile(g, tg_engine(), 1, NULL, &p), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "node attributes differ in length"));
  tpu_graph_free(g);

  /* Inference: X must be FP32 [N, F]; an unknown ai.onnx.ml op is not supported. */
  g = tg_new();
  int64_t d3[3] = {-1, 2, 2};
  tg_input(g, "x", TPU_GRAPH_FP32, 3, d3);
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "trees", "TreeEnsemble", "ai.onnx.ml", 5, 1, in, 1, out,
                                     &n) == TPU_OK);
  tg_attr_i(g, n, "n_targets", 1);
  tg_io(g, "x", "y");
  CU_ASSERT_EQUAL(tpu_graph_infer(g, 1), TPU_ESHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "expected [N, features]"));
  tpu_graph_free(g);
  g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 2, d);
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "t", "TreeEnsembleRegressor", "ai.onnx.ml", 3, 1, in, 1,
                                     out, &n) == TPU_OK);
  tg_io(g, "x", "y");
  CU_ASSERT_EQUAL(tpu_graph_infer(g, 1), TPU_ENOTSUP);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "ai.onnx.ml.TreeEnsembleRegressor"));
  tpu_graph_free(g);
}

TPU_TEST_SUITE(graph_tree,
               {"branches_nan_inf", test_branches_nan_inf},
               {"logistic_and_average", test_logistic_and_average},
               {"random_against_reference", test_random_against_reference},
               {"shared_between_buckets", test_shared_between_buckets},
               {"refusals", test_refusals})
