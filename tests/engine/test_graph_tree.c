/*
 * test_graph_tree.c - the ai.onnx.ml tree ops (engine/graph/ops_tree.c, tree_build.c):
 * TreeEnsemble v5's branch rules with NaN and ±Inf, XGBoost's float32 accumulation, the post
 * transforms, random ensembles against a plain reference traversal at several batch sizes, the
 * structural refusals (each naming the tree and node); TreeEnsembleRegressor/Classifier v3
 * against the same trees re-encoded (shuffled nodes, several weights per leaf), the
 * classifier's readings of its scores, FP64 thresholds, and v3's refusals.
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

/* The three strategies (ops_tree.c: the node walk, the level-by-level layout, scalar or
 * AVX-512 16 trees at a time, and tree_gemm.c's path products on the engine) give the same
 * bits: ensembles of 16+ trees with a tail, all-< (XGBoost) and all-<= (scikit-learn) modes,
 * NaN and ±Inf rows, several batch sizes (one plan chunk and several); the program says which
 * it runs. */
static void test_strategies_agree(void) {
  for (int round = 0; round < 8; round++) {
    ens_t e;
    int64_t width = tpu_test_rand_range(1, 9);
    size_t ntargets = (size_t)tpu_test_rand_range(1, 3);
    size_t ntrees = round % 2 ? 40 : 19;
    random_ens(&e, ntrees, round % 2 ? 3 : 4, width, ntargets, 0);
    if (round % 4 >= 2)
      for (size_t n = 0; n < e.nn; n++) e.modes[n] = 0; /* BRANCH_LEQ */
    size_t rows = round < 4 ? 37 : 150;
    float x[150 * 9], y[3][150 * 3], raw[3][150 * 3];
    for (size_t i = 0; i < rows * (size_t)width; i++) {
      long k = tpu_test_rand_range(0, 19);
      x[i] = k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY
           : k == 3 ? e.split[tpu_test_rand_range(0, (long)e.nn - 1)]
                    : tpu_test_rand_float(-1.5f, 1.5f);
    }
    e.post = ntargets > 1 ? 1 : 2;
    tpu_graph_t *g = build(&e, width);
    const char *names[3] = {"walk", "levels", "gemm"};
    const char *says[3] = {"node walk", "levels, depth", "gemm, "};
    for (int k = 0; k < 3; k++) {
      setenv("TPUD_TREE_STRATEGY", names[k], 1);
      tpu_graph_program_t *p = NULL;
      CU_ASSERT_FATAL(tpu_graph_compile(g, tg_engine(), (int64_t)rows, NULL, &p) == TPU_OK);
      char d[1024];
      tpu_graph_program_describe(p, d, sizeof d);
      CU_ASSERT_PTR_NOT_NULL(strstr(d, says[k]));
      const void *ins[1] = {x};
      void *outs[2] = {y[k], raw[k]};
      CU_ASSERT_FATAL(tpu_graph_program_run(p, ins, outs) == TPU_OK);
      tpu_graph_program_free(p);
    }
    unsetenv("TPUD_TREE_STRATEGY");
    for (int k = 1; k < 3; k++) {
      TPU_ASSERT_SEED(memcmp(raw[0], raw[k], rows * ntargets * sizeof(float)) == 0);
      TPU_ASSERT_SEED(memcmp(y[0], y[k], rows * ntargets * sizeof(float)) == 0);
    }
    float want[150 * 3];
    reference(&e, x, rows, width, want);
    TPU_ASSERT_SEED(memcmp(raw[1], want, rows * ntargets * sizeof(float)) == 0);
    tpu_graph_free(g);
  }
  /* Equality and mixed modes have no level layout (the program says why), but the path
   * products take any mode: the same bits as the reference, NaN and ±Inf included. */
  for (int round = 0; round < 2; round++) {
    ens_t e;
    random_ens(&e, 20, 3, 4, 2, 1);
    if (round == 0)
      for (size_t n = 0; n < e.nn; n++) e.modes[n] = 4;
    tpu_graph_t *g = build(&e, 4);
    float x[70 * 4], y[70 * 2], raw[70 * 2], want[70 * 2];
    for (size_t i = 0; i < 70 * 4; i++) {
      long k = tpu_test_rand_range(0, 9);
      x[i] = k == 0 ? NAN : k == 1 ? -INFINITY : k < 6 ? e.split[tpu_test_rand_range(0, (long)e.nn - 1)]
                                               : tpu_test_rand_float(-1.5f, 1.5f);
    }
    reference(&e, x, 70, 4, want);
    for (int k = 0; k < 2; k++) {
      if (k) setenv("TPUD_TREE_STRATEGY", "gemm", 1);
      tpu_graph_program_t *p = NULL;
      CU_ASSERT_FATAL(tpu_graph_compile(g, tg_engine(), 70, NULL, &p) == TPU_OK);
      char d[1024];
      tpu_graph_program_describe(p, d, sizeof d);
      CU_ASSERT_PTR_NOT_NULL(strstr(d, "no levels: mixed or equality branch modes"));
      if (k) CU_ASSERT_PTR_NOT_NULL(strstr(d, " on the engine (TPUD_TREE_STRATEGY)"));
      const void *ins[1] = {x};
      void *outs[2] = {y, raw};
      CU_ASSERT_FATAL(tpu_graph_program_run(p, ins, outs) == TPU_OK);
      TPU_ASSERT_SEED(memcmp(raw, want, sizeof want) == 0);
      tpu_graph_program_free(p);
    }
    unsetenv("TPUD_TREE_STRATEGY");
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
  refused(&e, 2, TPU_EINVAL, "tree 0 node 1: true branch goes to tree 0 node 0, which is already in a tree");
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
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "t", "LinearRegressor", "ai.onnx.ml", 1, 1, in, 1,
                                     out, &n) == TPU_OK);
  tg_io(g, "x", "y");
  CU_ASSERT_EQUAL(tpu_graph_infer(g, 1), TPU_ENOTSUP);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "ai.onnx.ml.LinearRegressor"));
  tpu_graph_free(g);
}

/* ---- TreeEnsembleRegressor / TreeEnsembleClassifier (v1, v3) ---- */

/* An ensemble in v3's arrays: nodes named (tree id, node id), leaves among them. */
typedef struct {
  size_t n, nw;
  int64_t tree[1024], node[1024], feat[1024], tid[1024], fid[1024], miss[1024];
  const char *modes[1024];
  float vals[1024];
  double vals64[1024];
  int64_t wtree[1600], wnode[1600], wid[1600];
  float w[1600];
} v3_t;

static v3_t v3a;

static const char *const mode_names[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE",
                                         "BRANCH_GT",  "BRANCH_EQ", "BRANCH_NEQ"};

static void v3_node(v3_t *v, int64_t tree, int64_t node, int64_t feat, const char *mode,
                    float val, int64_t t, int64_t f, int64_t miss) {
  size_t i = v->n++;
  v->tree[i] = tree, v->node[i] = node, v->feat[i] = feat, v->modes[i] = mode;
  v->vals[i] = val, v->vals64[i] = val, v->tid[i] = t, v->fid[i] = f, v->miss[i] = miss;
}

static void v3_weight(v3_t *v, int64_t tree, int64_t node, int64_t id, float w) {
  size_t i = v->nw++;
  v->wtree[i] = tree, v->wnode[i] = node, v->wid[i] = id, v->w[i] = w;
}

/* v5 ensemble e as v3: tree t has id 10 + 3t, branch n node id 100 + 2n, leaf l id 1 + 2l; the
 * roots come first in tree order, every other node after them shuffled across trees; each
 * leaf's weight, and for every third leaf (when there are several targets) a second weight of
 * 0.125 on the next target, in shuffled order. */
static void to_v3(const ens_t *e, v3_t *v) {
  memset(v, 0, sizeof *v);
  int64_t tree_of_node[512], tree_of_leaf[512];
  for (size_t t = 0; t < e->nt; t++) {
    size_t stack[512], sp = 0;
    stack[sp++] = (size_t)e->roots[t];
    while (sp) {
      size_t n = stack[--sp];
      tree_of_node[n] = (int64_t)t;
      if (e->tleaf[n]) tree_of_leaf[e->tid[n]] = (int64_t)t;
      else stack[sp++] = (size_t)e->tid[n];
      if (e->fleaf[n]) tree_of_leaf[e->fid[n]] = (int64_t)t;
      else stack[sp++] = (size_t)e->fid[n];
    }
  }
  size_t order[1024], no = 0;
  for (size_t n = 0; n < e->nn; n++) {
    int root = 0;
    for (size_t t = 0; t < e->nt; t++) root |= e->roots[t] == (int64_t)n;
    if (!root) order[no++] = n;
  }
  for (size_t l = 0; l < e->nl; l++) order[no++] = 1000 + l;
  for (size_t i = no; i > 1; i--) {
    size_t j = (size_t)tpu_test_rand_range(0, (long)i - 1), tmp = order[i - 1];
    order[i - 1] = order[j];
    order[j] = tmp;
  }
  size_t all[1100], na = 0;
  for (size_t t = 0; t < e->nt; t++) all[na++] = (size_t)e->roots[t];
  for (size_t i = 0; i < no; i++) all[na++] = order[i];
  for (size_t i = 0; i < na; i++) {
    if (all[i] >= 1000) {
      size_t l = all[i] - 1000;
      v3_node(v, 10 + 3 * tree_of_leaf[l], 1 + 2 * (int64_t)l, 0, "LEAF", 0, 0, 0, 0);
      continue;
    }
    size_t n = all[i];
    int64_t tid = e->tleaf[n] ? 1 + 2 * e->tid[n] : 100 + 2 * e->tid[n];
    int64_t fid = e->fleaf[n] ? 1 + 2 * e->fid[n] : 100 + 2 * e->fid[n];
    v3_node(v, 10 + 3 * tree_of_node[n], 100 + 2 * (int64_t)n, e->feat[n],
            mode_names[e->modes[n]], e->split[n], tid, fid, e->miss[n]);
  }
  size_t lorder[512];
  for (size_t l = 0; l < e->nl; l++) lorder[l] = l;
  for (size_t i = e->nl; i > 1; i--) {
    size_t j = (size_t)tpu_test_rand_range(0, (long)i - 1), tmp = lorder[i - 1];
    lorder[i - 1] = lorder[j];
    lorder[j] = tmp;
  }
  for (size_t k = 0; k < e->nl; k++) {
    size_t l = lorder[k];
    int64_t t = 10 + 3 * tree_of_leaf[l];
    v3_weight(v, t, 1 + 2 * (int64_t)l, e->ltarget[l], e->lw[l]);
    if (e->ntargets > 1 && l % 3 == 0)
      v3_weight(v, t, 1 + 2 * (int64_t)l, (e->ltarget[l] + 1) % (int64_t)e->ntargets, 0.125f);
  }
}

static void add_strings(tpu_graph_t *g, size_t node, const char *name, const char *const *v,
                        size_t n) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_STRINGS, .n = n, .strings = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, node, &a) == TPU_OK);
}

static void add_str(tpu_graph_t *g, size_t node, const char *name, const char *v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_STRING, .s = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, node, &a) == TPU_OK);
}

/* Options of a v3 graph: nbase base values (NULL: none), the classifier's labels (NULL: a
 * regressor of ntargets), FP64 node values. */
typedef struct {
  const float *base;
  size_t nbase, ntargets;
  const int64_t *labels;
  size_t nlabels;
  const char *post, *agg;
  int fp64;
  int short_weights; /* the weights list one shorter than the ids */
} v3_opts_t;

/* X FP32 [-1, width] -> TreeEnsembleRegressor -> "y", or -> TreeEnsembleClassifier -> "y"
 * (labels), "z" (scores). */
static tpu_graph_t *build_v3(const v3_t *v, int64_t width, const v3_opts_t *o) {
  tpu_graph_t *g = tg_new();
  int64_t d[2] = {-1, width};
  tg_input(g, "x", TPU_GRAPH_FP32, 2, d);
  const char *in[1] = {"x"}, *out[2] = {"y", "z"};
  int clf = o->labels != NULL;
  size_t n;
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "trees", clf ? "TreeEnsembleClassifier"
                                                     : "TreeEnsembleRegressor",
                                     "ai.onnx.ml", 3, 1, in, clf ? 2 : 1, out, &n) == TPU_OK);
  add_ints(g, n, "nodes_treeids", v->tree, v->n);
  add_ints(g, n, "nodes_nodeids", v->node, v->n);
  add_ints(g, n, "nodes_featureids", v->feat, v->n);
  add_strings(g, n, "nodes_modes", v->modes, v->n);
  if (o->fp64) {
    int64_t dims[1] = {(int64_t)v->n};
    tpu_graph_attr_t a = {.name = "nodes_values_as_tensor", .type = TPU_GRAPH_ATTR_TENSOR,
                          .t_dtype = TPU_GRAPH_FP64, .t_rank = 1, .t_dims = dims,
                          .t_data = v->vals64, .t_bytes = v->n * sizeof(double)};
    CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
  } else {
    add_floats(g, n, "nodes_values", v->vals, v->n);
  }
  add_ints(g, n, "nodes_truenodeids", v->tid, v->n);
  add_ints(g, n, "nodes_falsenodeids", v->fid, v->n);
  add_ints(g, n, "nodes_missing_value_tracks_true", v->miss, v->n);
  const char *pre = clf ? "class" : "target";
  char nm[4][32];
  snprintf(nm[0], sizeof nm[0], "%s_treeids", pre);
  snprintf(nm[1], sizeof nm[1], "%s_nodeids", pre);
  snprintf(nm[2], sizeof nm[2], "%s_ids", pre);
  snprintf(nm[3], sizeof nm[3], "%s_weights", pre);
  add_ints(g, n, nm[0], v->wtree, v->nw);
  add_ints(g, n, nm[1], v->wnode, v->nw);
  add_ints(g, n, nm[2], v->wid, v->nw);
  add_floats(g, n, nm[3], v->w, v->nw - (o->short_weights ? 1 : 0));
  if (o->base) add_floats(g, n, "base_values", o->base, o->nbase);
  if (clf) add_ints(g, n, "classlabels_int64s", o->labels, o->nlabels);
  else tg_attr_i(g, n, "n_targets", (int64_t)o->ntargets);
  if (o->post) add_str(g, n, "post_transform", o->post);
  if (o->agg) add_str(g, n, "aggregate_function", o->agg);
  tg_io(g, "x", clf ? "y,z" : "y");
  return g;
}

/* Compiles g at `rows`, runs x into outs[0..1]. Returns the status of compile. */
static tpu_status_t run_v3(tpu_graph_t *g, size_t rows, const float *x, void *o0, void *o1) {
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), (int64_t)rows, NULL, &p);
  if (st != TPU_OK) return st;
  const void *ins[1] = {x};
  void *outs[2] = {o0, o1};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, ins, outs) == TPU_OK);
  tpu_graph_program_free(p);
  return TPU_OK;
}

/* Random ensembles whose weights and base values are multiples of 1/8 (so every sum is exact
 * whatever its order): the v3 regressor, built from the same trees with nodes shuffled and
 * extra weights, gives the v5 sums plus the extra weights' bit for bit, at several batch sizes;
 * AVERAGE divides by the tree count and then adds the base. */
static void test_v3_regressor_matches_v5(void) {
  for (int round = 0; round < 6; round++) {
    ens_t e, e2;
    int64_t width = tpu_test_rand_range(1, 9);
    size_t ntargets = (size_t)tpu_test_rand_range(1, 4);
    random_ens(&e, (size_t)tpu_test_rand_range(1, 12), (int)tpu_test_rand_range(1, 6), width,
               ntargets, 1);
    for (size_t l = 0; l < e.nl; l++) e.lw[l] = (float)tpu_test_rand_range(-3, 3) / 8;
    float base[4];
    for (size_t k = 0; k < ntargets; k++) base[k] = e.base[k] = (float)tpu_test_rand_range(-4, 4) / 8;
    e2 = e; /* the extra weights alone */
    for (size_t l = 0; l < e.nl; l++) {
      e2.ltarget[l] = (e.ltarget[l] + 1) % (int64_t)ntargets;
      e2.lw[l] = ntargets > 1 && l % 3 == 0 ? 0.125f : 0;
    }
    memset(e2.base, 0, sizeof e2.base);
    to_v3(&e, &v3a);
    size_t rows = round < 3 ? 37 : 150;
    float x[150 * 9], want[150 * 4], extra[150 * 4], y[150 * 4], avg[150 * 4];
    for (size_t i = 0; i < rows * (size_t)width; i++) {
      long k = tpu_test_rand_range(0, 19);
      x[i] = k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY
           : k == 3 ? e.split[tpu_test_rand_range(0, (long)e.nn - 1)]
                    : tpu_test_rand_float(-1.5f, 1.5f);
    }
    /* v3 sends NaN down the true branch also where the comparison holds: BRANCH_NEQ */
    for (size_t n = 0; n < e.nn; n++) if (e.modes[n] == 5) e.miss[n] = e2.miss[n] = 1;
    reference(&e, x, rows, width, want);
    reference(&e2, x, rows, width, extra);
    v3_opts_t o = {.base = base, .nbase = ntargets, .ntargets = ntargets};
    tpu_graph_t *g = build_v3(&v3a, width, &o);
    CU_ASSERT_FATAL(run_v3(g, rows, x, y, NULL) == TPU_OK);
    for (size_t i = 0; i < rows * ntargets; i++) TPU_ASSERT_SEED(y[i] == want[i] + extra[i]);
    for (size_t r = 0; r < rows; r += 17) { /* batch composition does not matter */
      float y1[4];
      CU_ASSERT_FATAL(run_v3(g, 1, x + r * (size_t)width, y1, NULL) == TPU_OK);
      TPU_ASSERT_SEED(memcmp(y1, y + r * ntargets, ntargets * sizeof(float)) == 0);
    }
    tpu_graph_free(g);
    o.agg = "AVERAGE";
    g = build_v3(&v3a, width, &o);
    CU_ASSERT_FATAL(run_v3(g, rows, x, avg, NULL) == TPU_OK);
    for (size_t i = 0; i < rows * ntargets; i++) {
      float sum = want[i] - base[i % ntargets] + extra[i];
      TPU_ASSERT_SEED(avg[i] == sum / (float)e.nt + base[i % ntargets]);
    }
    tpu_graph_free(g);
  }
}

/* ONNX Runtime's logistic, as ops_tree.c documents it. */
static float ort_sigmoid(float v) {
  float e = 1.0f / (1.0f + expf(-fabsf(v)));
  return v < 0 ? 1.0f - e : e;
}

/* The classifier's readings (ops_tree.c's DESIGN), on one stump: x0 <= 0.5 to leaf 1, else
 * leaf 2; NaN takes the false branch. */
static void stump(v3_t *v, const int64_t *ids, const float *w1, const float *w2, size_t k) {
  memset(v, 0, sizeof *v);
  v3_node(v, 0, 0, 0, "BRANCH_LEQ", 0.5f, 1, 2, 0);
  v3_node(v, 0, 1, 0, "LEAF", 0, 0, 0, 0);
  v3_node(v, 0, 2, 0, "LEAF", 0, 0, 0, 0);
  for (size_t i = 0; i < k; i++) v3_weight(v, 0, 1, ids[i], w1[i]);
  for (size_t i = 0; i < k; i++) v3_weight(v, 0, 2, ids[i], w2[i]);
}

static void test_v3_classifier(void) {
  const float x[3] = {0.0f, 1.0f, NAN};
  int64_t y[3], labels3[3] = {5, 6, 7}, labels2[2] = {3, 9};
  float z[9];
  /* Three classes, weights on all: Z the scores (+ base), Y the first largest. */
  int64_t ids3[3] = {0, 1, 2};
  float a3[3] = {0.1f, 0.7f, 0.7f}, b3[3] = {0.5f, 0.3f, 0.2f}, base3[3] = {0.1f, 0.2f, 0.3f};
  stump(&v3a, ids3, a3, b3, 3);
  v3_opts_t o = {.labels = labels3, .nlabels = 3};
  tpu_graph_t *g = build_v3(&v3a, 1, &o);
  CU_ASSERT_FATAL(run_v3(g, 3, x, y, z) == TPU_OK);
  CU_ASSERT(y[0] == 6 && y[1] == 5 && y[2] == 5); /* the tie 0.7/0.7 goes to the first */
  for (int k = 0; k < 3; k++) CU_ASSERT(z[k] == a3[k] && z[3 + k] == b3[k] && z[6 + k] == b3[k]);
  tpu_graph_free(g);
  o.base = base3, o.nbase = 3, o.post = "SOFTMAX";
  g = build_v3(&v3a, 1, &o);
  CU_ASSERT_FATAL(run_v3(g, 3, x, y, z) == TPU_OK);
  CU_ASSERT(y[0] == 7 && y[1] == 5);
  for (int r = 0; r < 2; r++) {
    const float *w = r ? b3 : a3;
    double s = 0, m = -INFINITY;
    for (int k = 0; k < 3; k++) m = fmax(m, (double)(w[k] + base3[k]));
    for (int k = 0; k < 3; k++) s += exp((double)(w[k] + base3[k]) - m);
    for (int k = 0; k < 3; k++)
      CU_ASSERT(fabs(z[3 * r + k] - exp((double)(w[k] + base3[k]) - m) / s) < 1e-6);
  }
  tpu_graph_free(g);
  /* Weights on classes 1 and 2 only, no base: class 0 is never scored, so never the label
   * even where the others are negative; SOFTMAX_ZERO leaves its zero at zero. */
  int64_t ids12[2] = {1, 2};
  float a2[2] = {0.2f, -0.7f}, b2[2] = {-0.3f, -0.2f};
  stump(&v3a, ids12, a2, b2, 2);
  o = (v3_opts_t){.labels = labels3, .nlabels = 3, .post = "SOFTMAX_ZERO"};
  g = build_v3(&v3a, 1, &o);
  CU_ASSERT_FATAL(run_v3(g, 3, x, y, z) == TPU_OK);
  CU_ASSERT(y[0] == 6 && y[1] == 7 && y[2] == 7);
  CU_ASSERT(z[0] == 0 && z[3] == 0);
  CU_ASSERT(fabs(z[4] - exp(-0.3) / (exp(-0.3) + exp(-0.2))) < 1e-6);
  tpu_graph_free(g);
  /* Two classes, every weight on class 0 (onnxmltools' binary form): one score s. */
  int64_t id0[1] = {0};
  float m1[1] = {-0.3f}, m2[1] = {0.8f}, base1[1] = {0.2f};
  stump(&v3a, id0, m1, m2, 1);
  o = (v3_opts_t){.labels = labels2, .nlabels = 2, .post = "LOGISTIC", .base = base1, .nbase = 1};
  g = build_v3(&v3a, 1, &o);
  CU_ASSERT_FATAL(run_v3(g, 3, x, y, z) == TPU_OK);
  float s0 = -0.3f + 0.2f, s1 = 0.8f + 0.2f;
  CU_ASSERT(y[0] == 3 && y[1] == 9 && y[2] == 9);
  CU_ASSERT(z[0] == ort_sigmoid(-s0) && z[1] == ort_sigmoid(s0));
  CU_ASSERT(z[2] == ort_sigmoid(-s1) && z[3] == ort_sigmoid(s1));
  tpu_graph_free(g);
  o.post = NULL, o.base = NULL; /* NONE, mixed signs: [-s, s], label by s > 0 */
  g = build_v3(&v3a, 1, &o);
  CU_ASSERT_FATAL(run_v3(g, 3, x, y, z) == TPU_OK);
  CU_ASSERT(y[0] == 3 && y[1] == 9 && z[0] == 0.3f && z[1] == -0.3f && z[3] == 0.8f);
  tpu_graph_free(g);
  float p1[1] = {0.3f}, p2[1] = {0.8f}; /* NONE, probabilities: [1 - s, s], label by s > 0.5 */
  stump(&v3a, id0, p1, p2, 1);
  g = build_v3(&v3a, 1, &o);
  CU_ASSERT_FATAL(run_v3(g, 3, x, y, z) == TPU_OK);
  CU_ASSERT(y[0] == 3 && y[1] == 9 && z[0] == 1.0f - 0.3f && z[1] == 0.3f && z[3] == 0.8f);
  tpu_graph_free(g);
  /* Two classes with weights on both (a random forest): the larger score's label. */
  int64_t ids01[2] = {0, 1};
  float f1[2] = {0.7f, 0.3f}, f2[2] = {0.2f, 0.8f};
  stump(&v3a, ids01, f1, f2, 2);
  g = build_v3(&v3a, 1, &o);
  CU_ASSERT_FATAL(run_v3(g, 3, x, y, z) == TPU_OK);
  CU_ASSERT(y[0] == 3 && y[1] == 9 && z[0] == 0.7f && z[1] == 0.3f);
  tpu_graph_free(g);
}

/* FP64 thresholds (nodes_values_as_tensor) take, for every float input, the branch the double
 * comparison takes: inputs around a threshold no float equals, in every mode. */
static void test_v3_fp64_thresholds(void) {
  const double t = 0.1; /* between two floats */
  float f = (float)t, xs[6] = {nextafterf(f, -1), f, nextafterf(f, 1), -INFINITY, INFINITY,
                               nextafterf(nextafterf(f, -1), -1)};
  for (int m = 0; m < 6; m++) {
    memset(&v3a, 0, sizeof v3a);
    v3_node(&v3a, 0, 0, 0, mode_names[m], 0, 1, 2, 0);
    v3a.vals64[0] = t;
    v3_node(&v3a, 0, 1, 0, "LEAF", 0, 0, 0, 0);
    v3_node(&v3a, 0, 2, 0, "LEAF", 0, 0, 0, 0);
    v3_weight(&v3a, 0, 1, 0, 1.0f);
    v3_weight(&v3a, 0, 2, 0, 2.0f);
    v3_opts_t o = {.ntargets = 1, .fp64 = 1};
    tpu_graph_t *g = build_v3(&v3a, 1, &o);
    float y[6];
    CU_ASSERT_FATAL(run_v3(g, 6, xs, y, NULL) == TPU_OK);
    for (int i = 0; i < 6; i++) {
      double v = xs[i];
      int yes = m == 0 ? v <= t : m == 1 ? v < t : m == 2 ? v >= t : m == 3 ? v > t
              : m == 4 ? v == t : v != t;
      if (y[i] != (yes ? 1.0f : 2.0f))
        fprintf(stderr, "\n  %s x=%.9g: got %g\n", mode_names[m], v, y[i]);
      CU_ASSERT(y[i] == (yes ? 1.0f : 2.0f));
    }
    tpu_graph_free(g);
  }
}

/* Compiling the v3 graph fails with st and a message containing want. */
static void refused_v3(const v3_opts_t *o, tpu_status_t st, const char *want) {
  tpu_graph_t *g = build_v3(&v3a, 1, o);
  tpu_graph_program_t *p = NULL;
  CU_ASSERT_EQUAL(tpu_graph_compile(g, tg_engine(), 2, NULL, &p), st);
  CU_ASSERT_PTR_NULL(p);
  if (!strstr(tpu_graph_error(g), want))
    fprintf(stderr, "\nexpected '%s' in: %s\n", want, tpu_graph_error(g));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), want));
  tpu_graph_free(g);
}

static void test_v3_refusals(void) {
  int64_t ids[1] = {0}, labels2[2] = {0, 1};
  float w1[1] = {1}, w2[1] = {2}, two[2] = {0, 0};
  v3_opts_t reg = {.ntargets = 1};
  stump(&v3a, ids, w1, w2, 1);
  v3a.node[2] = 1; /* tree 0 node 1 twice */
  refused_v3(&reg, TPU_EINVAL, "tree 0 node 1 is defined twice");
  stump(&v3a, ids, w1, w2, 1);
  v3a.fid[0] = 7;
  refused_v3(&reg, TPU_EINVAL, "tree 0 node 0: false branch names node 7, which tree 0 does "
             "not have");
  stump(&v3a, ids, w1, w2, 1);
  v3a.modes[0] = "BRANCH_MEMBER";
  refused_v3(&reg, TPU_ENOTSUP, "tree 0 node 0: mode 'BRANCH_MEMBER' is not supported");
  stump(&v3a, ids, w1, w2, 1);
  v3a.wnode[0] = 0;
  refused_v3(&reg, TPU_EINVAL, "weight 0 names tree 0 node 0, which is a branch, not a leaf");
  stump(&v3a, ids, w1, w2, 1);
  v3a.wtree[1] = 4;
  refused_v3(&reg, TPU_EINVAL, "weight 1 names tree 4 node 2, which the ensemble does not "
             "have");
  stump(&v3a, ids, w1, w2, 1);
  v3a.tid[0] = 0; /* the root's true branch to itself */
  refused_v3(&reg, TPU_EINVAL, "tree 0 node 0: true branch goes to tree 0 node 0");
  stump(&v3a, ids, w1, w2, 1);
  v3a.modes[1] = v3a.modes[2] = "BRANCH_LT";
  v3a.nw = 0;
  refused_v3(&reg, TPU_EINVAL, "tree 0 has no leaves (all its 3 nodes are branches)");
  stump(&v3a, ids, w1, w2, 1);
  v3a.feat[0] = 1;
  refused_v3(&reg, TPU_EINVAL, "tree 0 node 0: feature 1 is outside the input's 1 columns");
  stump(&v3a, ids, w1, w2, 1);
  v3a.wid[0] = 1;
  refused_v3(&reg, TPU_EINVAL, "leaf weight 0: target id 1 out of range [0, 1)");
  stump(&v3a, ids, w1, w2, 1);
  reg.short_weights = 1; /* two weights' ids, one weight */
  refused_v3(&reg, TPU_EINVAL, "leaf weight attributes differ in length");
  reg.short_weights = 0;
  stump(&v3a, ids, w1, w2, 1);
  reg.post = "PROBIT";
  refused_v3(&reg, TPU_ENOTSUP, "post_transform 'PROBIT' is not supported");
  reg.post = "LOGISTIC";
  refused_v3(&reg, TPU_ENOTSUP, "post_transform LOGISTIC on a one-target regressor is "
             "ambiguous");
  reg.post = NULL;
  reg.agg = "MAX";
  refused_v3(&reg, TPU_ENOTSUP, "aggregate_function 'MAX' is not supported");
  reg.agg = NULL;
  reg.base = two, reg.nbase = 2;
  refused_v3(&reg, TPU_EINVAL, "base_values has 2 entries, expected one per target or class");
  v3_opts_t clf = {.labels = labels2, .nlabels = 2, .base = two, .nbase = 2};
  refused_v3(&clf, TPU_ENOTSUP, "weights all go to class 0 takes one base value");
  clf = (v3_opts_t){.labels = labels2, .nlabels = 2, .post = "SOFTMAX"};
  refused_v3(&clf, TPU_ENOTSUP, "one score takes post_transform NONE or LOGISTIC");
  /* String labels: the graph holds no STRING tensors. */
  tpu_graph_t *g = tg_new();
  int64_t d[2] = {-1, 1};
  tg_input(g, "x", TPU_GRAPH_FP32, 2, d);
  const char *in[1] = {"x"}, *out[2] = {"y", "z"}, *names[2] = {"no", "yes"};
  size_t n;
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "t", "TreeEnsembleClassifier", "ai.onnx.ml", 3, 1, in,
                                     2, out, &n) == TPU_OK);
  add_strings(g, n, "classlabels_strings", names, 2);
  tg_io(g, "x", "y,z");
  CU_ASSERT_EQUAL(tpu_graph_infer(g, 1), TPU_ENOTSUP);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "string class labels"));
  tpu_graph_free(g);
}

TPU_TEST_SUITE(graph_tree,
               {"branches_nan_inf", test_branches_nan_inf},
               {"logistic_and_average", test_logistic_and_average},
               {"random_against_reference", test_random_against_reference},
               {"shared_between_buckets", test_shared_between_buckets},
               {"strategies_agree", test_strategies_agree},
               {"refusals", test_refusals},
               {"v3_regressor_matches_v5", test_v3_regressor_matches_v5},
               {"v3_classifier", test_v3_classifier},
               {"v3_fp64_thresholds", test_v3_fp64_thresholds},
               {"v3_refusals", test_v3_refusals})
