/*
 * ops_tree.c - the tree-ensemble kernels of domain ai.onnx.ml: TreeEnsemble (opset 5),
 * TreeEnsembleRegressor and TreeEnsembleClassifier (opsets 1 and 3), traversed exactly, row
 * by row and tree by tree. tree_build.c reads and validates the attributes into one compiled
 * block (tree_internal.h); see exec_internal.h for the prepare/run contract.
 *
 * DESIGN
 * Every row's score per target starts at zero (v5: at base_values) and adds each reached
 * leaf's weights in tree order, in float32; ±Inf compare as ordinary numbers; a NaN feature
 * takes the branch nodes_missing_value_tracks_true names (v1/v3: the true branch also when the
 * comparison holds, as BRANCH_NEQ does for NaN). The kernel walks blocks of 64 rows tree by
 * tree, which keeps that order per row, so the result never depends on the batch.
 *
 * TreeEnsemble v5 carries XGBoost's numerics, so that its models are served bit for bit
 * (server/models/xgboost.c writes this form): LOGISTIC is XGBoost 1.7's common::Sigmoid,
 * 1 / (expf(min(-x, 88.7f)) + 1); SOFTMAX subtracts the row maximum, sums expf terms in
 * double and divides by the float of the sum; AVERAGE divides the leaf sum by the tree count
 * and then adds base_values. Its optional second output holds the scores before the transform.
 *
 * TreeEnsembleRegressor and TreeEnsembleClassifier carry ONNX Runtime's (1.30), the reference
 * these ops are written for: base values are added after the sum (AVERAGE: sum / trees +
 * base); LOGISTIC is 1 / (1 + expf(-|x|)), mirrored for x < 0; SOFTMAX subtracts the maximum,
 * sums expf terms in float and divides; SOFTMAX_ZERO leaves scores within 1e-7 of zero at zero.
 * A one-target regressor takes post_transform NONE only (ONNX Runtime ignores any other, the
 * specification applies it: tree_build.c refuses the ambiguity). The classifier's Z and Y:
 *   several scored classes (TPU__CLS_MULTI): Z the scores after the transform; Y the label of
 *     the first largest score among the classes the row scored (without base values, a class
 *     no reached leaf had a weight for is not scored, and its Z is the transform of 0);
 *   two classes, every weight on one class id (onnxmltools' form for XGBoost and LightGBM
 *     binary models), score s = its sum + the one base value:
 *     LOGISTIC  Z = [σ(-s), σ(s)], Y = label 1 when s > 0
 *     NONE      every weight ≥ 0: Z = [1 - s, s], Y = label 1 when s > 0.5; otherwise
 *               Z = [-s, s], Y = label 1 when s > 0.
 * Where ONNX Runtime 1.30 answers otherwise tpud follows the meaning, and says so here: two
 * classes with weights on both take the larger score's label (ONNX Runtime: class 1 whenever its
 * score is positive); one weighted class id 1 gives Z[0] = 1 - s or σ(-s) (ONNX Runtime: 0 or
 * 0.5); LOGISTIC with non-negative weights labels by σ(s) > 0.5 (ONNX Runtime: s > 0.5).
 *
 * prepare compiles the trees once per model (pc->shared: every bucket's step reads the same
 * block), so run reads nothing of the graph, allocates nothing and always terminates (the
 * trees are checked acyclic). A classifier's step owns a scratch block for a row block's
 * scores.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpu_kernels.h"
#include "tree_internal.h"

/* Rows per block: each tree is walked for a block of rows before the next tree, so its nodes
 * stay in cache while the block's rows (64 x F floats) do too. Every row still adds its trees'
 * leaves in tree order, so the sums are those of a row-by-row walk, bit for bit. */
#define ROW_BLOCK 64

/* A step's params: the ensemble, its own or (pc->shared) the shared program's, which outlives
 * this one; a classifier's scratch (ROW_BLOCK rows of scores and scored flags). */
typedef struct {
  const tpu__trees_t *e;
  tpu__trees_t *owned;
  const tpu__tree_perfect_t *perf; /* the padded layout, NULL when the trees cannot take it */
  void *owned_perf;                /* its block, when this step built it */
  void (*levels)(const tpu__tree_perfect_t *, const float *, size_t, size_t, float *, size_t);
  const tpu__tree_gemm_t *gemm;    /* the path matrices on the engine, NULL when not built */
  tpu__tree_gemm_t *owned_gemm;    /* when this step built them */
  tpu__tree_gemm_run_t *gemm_run;  /* this bucket's plans */
  int strategy;                    /* this bucket's choice (STRAT_*) */
  const char *why_levels, *why_gemm; /* why a strategy is not there */
  float *acc;
  unsigned char *has;
  tpu__shap_t shap;                /* output 3 (contributions): the trees' expected values */
  void *shap_blk, *shap_scratch;
} tree_step_t;

enum { STRAT_WALK = 0, STRAT_LEVELS, STRAT_GEMM, STRAT_COUNT };
static const char *const strat_names[] = {"node walk", "levels", "gemm"};

static void tree_release(void *params) {
  tree_step_t *ts = params;
  tpu__tree_gemm_run_free(ts->gemm_run); /* its plans before the weights they use */
  tpu__tree_gemm_free(ts->owned_gemm);
  free(ts->owned);
  free(ts->owned_perf);
  free(ts->acc);
  free(ts->has);
  free(ts->shap_blk);
  free(ts->shap_scratch);
}

/* ---- the level-by-level layout ---- */

#define LEVELS_MAX_DEPTH 12               /* 4095 inner slots a tree */
#define LEVELS_MAX_BYTES ((size_t)64 << 20) /* per model */

/* The depth of the subtree at encoded node `at` (a leaf: 0), or limit + 1 once it is deeper
 * than limit (so a chain of a million nodes costs no deep recursion). Acyclic trees. */
static int depth_of(const tpu__trees_t *p, int32_t at, int limit) {
  if (at < 0) return 0;
  if (limit <= 0) return 1;
  int l = depth_of(p, p->nodes[at].next[1], limit - 1);
  int r = l > limit - 1 ? l : depth_of(p, p->nodes[at].next[0], limit - 1);
  return 1 + (l > r ? l : r);
}

/* Slot i (level d of D) of tree t's padded arrays from encoded node `at`. */
static void fill(const tpu__trees_t *p, int32_t at, size_t i, int d, int D, int32_t *feat,
                 float *thr, float *lval, size_t inner) {
  if (d == D) {
    lval[i - inner] = p->eweight[p->lfirst[~at]];
    return;
  }
  if (at < 0) { /* a leaf above the last level: every path below ends at it */
    feat[i] = 0;
    thr[i] = 0;
  } else {
    const tpu__tnode_t *n = &p->nodes[at];
    feat[i] = n->feature | (n->missing_true ? INT32_MIN : 0);
    thr[i] = n->split;
  }
  fill(p, at < 0 ? at : p->nodes[at].next[1], 2 * i + 1, d + 1, D, feat, thr, lval, inner);
  fill(p, at < 0 ? at : p->nodes[at].next[0], 2 * i + 2, d + 1, D, feat, thr, lval, inner);
}

/* The padded layout of p in one block (*blk), or NULL when p cannot take it: leaves with other
 * than one weight, a tree whose leaves feed different targets, modes other than all < or all
 * <=, the classifier's per-row scored classes, or too deep or too large (*why says which). */
static tpu__tree_perfect_t *build_levels(const tpu__trees_t *p, void **blk, const char **why) {
  *blk = NULL;
  if (!p->single || p->track) {
    *why = "leaves with several weights";
    return NULL;
  }
  int mode = p->nodes[0].mode;
  for (size_t n = 0; n < p->nnodes; n++)
    if (p->nodes[n].mode != mode || (mode != TPU__TREE_LT && mode != TPU__TREE_LEQ)) {
      *why = "mixed or equality branch modes";
      return NULL;
    }
  int D = 1;
  for (size_t t = 0; t < p->ntrees; t++) {
    int d = depth_of(p, p->roots[t], LEVELS_MAX_DEPTH);
    D = d > D ? d : D;
    if (D > LEVELS_MAX_DEPTH) {
      *why = "deeper than 12 levels";
      return NULL;
    }
  }
  size_t inner = ((size_t)1 << D) - 1;
  size_t bytes = sizeof(tpu__tree_perfect_t) +
                 p->ntrees * (inner * (sizeof(int32_t) + sizeof(float)) +
                              (inner + 1) * sizeof(float) + sizeof(int32_t));
  if (bytes > LEVELS_MAX_BYTES) {
    *why = "padded trees over 64 MiB";
    return NULL;
  }
  unsigned char *b = malloc(bytes);
  if (!b) {
    *why = "out of memory";
    return NULL;
  }
  tpu__tree_perfect_t *pt = (tpu__tree_perfect_t *)b;
  int32_t *feat = (int32_t *)(pt + 1);
  float *thr = (float *)(feat + p->ntrees * inner);
  float *lval = thr + p->ntrees * inner;
  int32_t *target = (int32_t *)(lval + p->ntrees * (inner + 1));
  for (size_t t = 0; t < p->ntrees; t++) {
    /* one target per tree: that of its leaves (all the same, or no padded layout) */
    int32_t tg = -1;
    size_t stack[64], sp = 0;
    int ok = 1;
    if (p->roots[t] < 0) tg = p->etarget[p->lfirst[~p->roots[t]]];
    else stack[sp++] = (size_t)p->roots[t];
    while (sp && ok) {
      const tpu__tnode_t *n = &p->nodes[stack[--sp]];
      for (int c = 0; c < 2; c++) {
        if (n->next[c] >= 0) {
          stack[sp++] = (size_t)n->next[c]; /* depth <= 12: at most 13 pending */
          continue;
        }
        int32_t lt = p->etarget[p->lfirst[~n->next[c]]];
        if (tg >= 0 && lt != tg) ok = 0;
        tg = lt;
      }
    }
    if (!ok) {
      free(b);
      *why = "a tree whose leaves feed different targets";
      return NULL;
    }
    target[t] = tg;
    fill(p, p->roots[t], 0, 0, D, feat + t * inner, thr + t * inner, lval + t * (inner + 1),
         inner);
  }
  *pt = (tpu__tree_perfect_t){.depth = D, .leq = mode == TPU__TREE_LEQ, .ntrees = p->ntrees,
                              .feat = feat, .thr = thr, .lval = lval, .target = target};
  *blk = b;
  return pt;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void walk_rows(const tpu__trees_t *p, const float *x, size_t r0, size_t r1, float *acc,
                      unsigned char *has);

static tpu_status_t accumulate(const tree_step_t *ts, const float *x, size_t r0, size_t r1,
                              float *acc, unsigned char *has);

/* The fastest strategy for `rows`-row batches, measured on rows made of the model's own
 * thresholds (each feature at one of its splits, just below or at it, so rows take the trees'
 * paths rather than one edge): us[s] per row, best of three, for each strategy the trees can
 * take (the others: -1). */
static int measure(tree_step_t *ts, size_t rows, double us[STRAT_COUNT]) {
  const tpu__trees_t *p = ts->e;
  size_t n = rows < 1 ? 1 : rows > 256 ? 256 : rows, w = p->width;
  float *x = malloc(n * w * sizeof *x), *acc = malloc(n * p->ntargets * sizeof *acc);
  unsigned char *has = malloc(n * p->ntargets);
  for (int s = 0; s < STRAT_COUNT; s++) us[s] = -1;
  if (!x || !acc || !has) {
    free(x), free(acc), free(has);
    return STRAT_WALK;
  }
  uint64_t st = 0x9e3779b97f4a7c15ull ^ rows;
  for (size_t i = 0; i < n * w; i++) x[i] = 0;
  for (size_t r = 0; r < n; r++)
    for (size_t k = 0; k < 2 * w + 8; k++) { /* a few nodes' features set to their splits */
      st ^= st << 13, st ^= st >> 7, st ^= st << 17;
      const tpu__tnode_t *nd = &p->nodes[st % p->nnodes];
      x[r * w + (size_t)nd->feature] = (st >> 40) & 1 ? nd->split : nextafterf(nd->split, -INFINITY);
    }
  int best = STRAT_WALK, keep = ts->strategy;
  for (int rep = 0; rep < 3; rep++)
    for (int s = 0; s < STRAT_COUNT; s++) {
      if ((s == STRAT_LEVELS && !ts->perf) || (s == STRAT_GEMM && !ts->gemm_run)) continue;
      ts->strategy = s;
      memset(acc, 0, n * p->ntargets * sizeof *acc);
      double t0 = now_us();
      if (accumulate(ts, x, 0, n, acc, p->track ? has : NULL) != TPU_OK) continue;
      double dt = (now_us() - t0) / (double)n;
      us[s] = us[s] < 0 || dt < us[s] ? dt : us[s];
    }
  ts->strategy = keep;
  for (int s = 0; s < STRAT_COUNT; s++)
    if (us[s] >= 0 && us[s] < us[best]) best = s;
  free(x), free(acc), free(has);
  return best;
}

static const char *const post_names[] = {"", ", softmax", ", logistic", ", softmax_zero"};

static tpu_status_t tree_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (x->dtype != TPU_GRAPH_FP32) return tpu__prep_dtype(pc, x, "FP32");
  size_t width = (size_t)x->dims[1];
  tree_step_t *ts = calloc(1, sizeof *ts);
  if (!ts) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  s->params = ts;
  s->release = tree_release;
  const tree_step_t *sh = pc->shared;
  size_t bytes = 0;
  if (sh && sh->e && sh->e->width == width) { /* validated and copied once per model */
    ts->e = sh->e;
    ts->perf = sh->perf;
    ts->gemm = sh->gemm;
    ts->why_levels = sh->why_levels;
    ts->why_gemm = sh->why_gemm;
  } else {
    tpu_status_t st = tpu__trees_build(pc, width, &ts->owned, &bytes);
    if (st != TPU_OK) return st; /* the program frees params (release, then free) */
    ts->e = ts->owned;
    ts->perf = build_levels(ts->e, &ts->owned_perf, &ts->why_levels);
    if (ts->perf) {
      size_t inner = ((size_t)1 << ts->perf->depth) - 1;
      bytes += ts->e->ntrees * (inner * 8 + (inner + 1) * 4 + 4);
    }
    size_t gb = 0;
    if (tpu__tree_gemm_build(pc->engine, ts->e, &ts->owned_gemm, &gb, &ts->why_gemm) == TPU_OK)
      ts->gemm = ts->owned_gemm;
    bytes += gb;
  }
  const tpu__trees_t *e = ts->e;
  const struct tpu__vec_kernels *vec = tpu__prep_vec(pc);
  ts->levels = vec->tree_perfect ? vec->tree_perfect : tpu__tree_perfect_ref;
  size_t rows = (size_t)x->dims[0];
  if (ts->gemm) {
    size_t pb = 0;
    tpu_status_t st = tpu__tree_gemm_plan(pc->engine, vec, ts->gemm, rows, &ts->gemm_run, &pb,
                                          &s->macs, &s->cycles, &s->slots);
    if (st != TPU_OK)
      return tpu__prep_fail(pc, st, "planning the trees' path products: %s",
                            tpu_strerror(st));
    bytes += pb;
  }
  /* The strategy: TPUD_TREE_STRATEGY=walk, =levels or =gemm forces one (where the trees can
   * take it); otherwise the one measured fastest for this bucket's batch. */
  const char *force = getenv("TPUD_TREE_STRATEGY");
  int forced = -1;
  for (int k = 0; force && k < STRAT_COUNT; k++)
    if (strcmp(force, k == STRAT_WALK ? "walk" : strat_names[k]) == 0) forced = k;
  if (forced == STRAT_LEVELS && !ts->perf) forced = -1;
  if (forced == STRAT_GEMM && !ts->gemm_run) forced = -1;
  double us[STRAT_COUNT] = {-1, -1, -1};
  if (forced >= 0) ts->strategy = forced;
  else if (ts->perf || ts->gemm_run) ts->strategy = measure(ts, rows, us);
  char how[200];
  int at = snprintf(how, sizeof how, "%s", strat_names[ts->strategy]);
  if (ts->strategy == STRAT_LEVELS)
    at += snprintf(how + at, sizeof how - (size_t)at, ", depth %d", ts->perf->depth);
  if (ts->strategy == STRAT_GEMM)
    at += snprintf(how + at, sizeof how - (size_t)at, ", %zu block%s on the engine",
                   tpu__tree_gemm_blocks(ts->gemm), tpu__tree_gemm_blocks(ts->gemm) > 1 ? "s" : "");
  if (forced >= 0) {
    at += snprintf(how + at, sizeof how - (size_t)at, " (TPUD_TREE_STRATEGY)");
  } else if (ts->perf || ts->gemm_run) {
    at += snprintf(how + at, sizeof how - (size_t)at, " (measured us/row:");
    for (int k = 0; k < STRAT_COUNT && at < (int)sizeof how; k++)
      if (us[k] >= 0)
        at += snprintf(how + at, sizeof how - (size_t)at, " %s %.2f", k == STRAT_WALK ? "walk"
                       : strat_names[k], us[k]);
    if (at < (int)sizeof how) at += snprintf(how + at, sizeof how - (size_t)at, ")");
  }
  if (!ts->perf && at < (int)sizeof how)
    at += snprintf(how + at, sizeof how - (size_t)at, "; no levels: %s", ts->why_levels);
  if (!ts->gemm && at < (int)sizeof how)
    snprintf(how + at, sizeof how - (size_t)at, "; no gemm: %s", ts->why_gemm);
  else if (ts->gemm_run && at < (int)sizeof how) /* the array's cost, run or not */
    snprintf(how + at, sizeof how - (size_t)at, "; gemm: %llu array cycles a batch",
             (unsigned long long)s->cycles);
  if (ts->strategy != STRAT_GEMM) { /* the plans of a strategy this bucket does not run */
    tpu__tree_gemm_run_free(ts->gemm_run);
    ts->gemm_run = NULL;
    s->macs = s->cycles = s->slots = 0;
  }
  if (e->kind != TPU__TREE_CLASSIFIER && (s->nout < 1 || !s->out[0]))
    return tpu__prep_fail(pc, TPU_EINVAL, "output 0 (the scores) is required");
  if (e->kind == TPU__TREE_V5 && s->nout > 3 && s->out[3]) { /* contributions */
    tpu_status_t st = tpu__shap_prepare(e, &ts->shap, &ts->shap_blk);
    if (st == TPU_EINVAL)
      return tpu__prep_fail(pc, st, "output 3 (contributions) needs the trees' covers "
                            "(tpud_node_covers, tpud_leaf_covers) and one weight per leaf");
    if (st == TPU_ERANGE)
      return tpu__prep_fail(pc, st, "output 3 (contributions): a tree is deeper than %d "
                            "levels", TPU__SHAP_MAX_DEPTH);
    size_t sb = st == TPU_OK ? tpu__shap_scratch(&ts->shap, width) : 0;
    if (st != TPU_OK || !(ts->shap_scratch = malloc(sb)))
      return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
    bytes += sb + e->ntrees * 8;
  }
  if (e->kind == TPU__TREE_CLASSIFIER) {
    ts->acc = malloc(ROW_BLOCK * e->ntargets * sizeof *ts->acc);
    ts->has = malloc(ROW_BLOCK * e->ntargets);
    if (!ts->acc || !ts->has) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
    bytes += ROW_BLOCK * e->ntargets * (sizeof *ts->acc + 1);
  }
  s->param_bytes = sizeof *ts + bytes;
  snprintf(s->desc, sizeof s->desc, "%zu trees, %zu nodes, %zu leaves, %zu %s%s%s%s: exact, %s",
           e->ntrees, e->nnodes, e->nleaves, e->ntargets,
           e->kind == TPU__TREE_CLASSIFIER ? "classes" : "targets", post_names[e->post],
           e->agg == TPU__TREE_AVERAGE ? ", average" : "", ts->owned ? "" : " (trees shared)",
           how);
  return TPU_OK;
}

/* The leaf a row reaches in the tree rooted at `at` (encoded). */
static inline int32_t leaf_of(const tpu__trees_t *p, int32_t at, const float *row) {
  if (p->all_lt) {
    while (at >= 0) {
      const tpu__tnode_t *n = &p->nodes[at];
      float v = row[n->feature];
      at = n->next[v != v ? n->missing_true : v < n->split];
    }
  } else {
    while (at >= 0) {
      const tpu__tnode_t *n = &p->nodes[at];
      at = n->next[tpu__tree_branch(n, row[n->feature])];
    }
  }
  return ~at;
}

/* Sums rows r0..r1's leaves into acc (nt per row, which the caller initialised), tree by
 * tree; has (may be NULL) gets 1 for every target a row's leaves had an entry for. */
static void walk_rows(const tpu__trees_t *p, const float *x, size_t r0, size_t r1, float *acc,
                      unsigned char *has) {
  size_t nt = p->ntargets;
  for (size_t t = 0; t < p->ntrees; t++)
    for (size_t i = r0; i < r1; i++)
      tpu__tree_add_leaf(p, leaf_of(p, p->roots[t], x + i * p->width), acc + (i - r0) * nt,
                         has ? has + (i - r0) * nt : NULL);
}

/* Rows r0..r1 by the step's strategy (the same sums either way). */
static tpu_status_t accumulate(const tree_step_t *ts, const float *x, size_t r0, size_t r1,
                              float *acc, unsigned char *has) {
  const tpu__trees_t *p = ts->e;
  if (ts->strategy == STRAT_LEVELS)
    ts->levels(ts->perf, x + r0 * p->width, p->width, r1 - r0, acc, p->ntargets);
  else if (ts->strategy == STRAT_GEMM)
    return tpu__tree_gemm_rows(p, ts->gemm_run, x + r0 * p->width, r1 - r0, acc, has);
  else
    walk_rows(p, x, r0, r1, acc, has);
  return TPU_OK;
}

/* ONNX Runtime's transforms (ml_common.h's ComputeLogistic, ComputeSoftmax[Zero]). */
static inline float ort_logistic(float v) {
  float e = 1.0f / (1.0f + expf(-fabsf(v)));
  return v < 0 ? 1.0f - e : e;
}

static void ort_post(int post, float *z, size_t n) {
  if (post == TPU__TREE_POST_LOGISTIC) {
    for (size_t k = 0; k < n; k++) z[k] = ort_logistic(z[k]);
  } else if (post == TPU__TREE_POST_SOFTMAX || post == TPU__TREE_POST_SOFTMAX_ZERO) {
    float mx = -3.40282347e38f, sum = 0;
    for (size_t k = 0; k < n; k++) mx = z[k] > mx ? z[k] : mx;
    for (size_t k = 0; k < n; k++) {
      if (post == TPU__TREE_POST_SOFTMAX_ZERO && z[k] <= 1e-7f && z[k] >= -1e-7f) {
        z[k] = 0;
        continue;
      }
      z[k] = expf(z[k] - mx);
      sum += z[k];
    }
    for (size_t k = 0; k < n; k++) z[k] /= sum;
  }
}

/* TreeEnsemble v5: XGBoost's numerics (see DESIGN). */
/* v5's outputs 2 (each tree's leaf: its tpud_leaf_ids entry, else its index) and 3 (the
 * contributions), each only when asked for (on request: NULL otherwise). */
static void run_explain(const tree_step_t *ts, const float *x, size_t rows, float *leaf,
                        float *contrib) {
  const tpu__trees_t *p = ts->e;
  for (size_t r = 0; leaf && r < rows; r++)
    for (size_t t = 0; t < p->ntrees; t++) {
      int32_t l = leaf_of(p, p->roots[t], x + r * p->width);
      leaf[r * p->ntrees + t] = p->leaf_ids ? (float)p->leaf_ids[l] : (float)l;
    }
  for (size_t r = 0; contrib && r < rows; r++)
    tpu__shap_row(p, &ts->shap, x + r * p->width, contrib + r * p->ntargets * (p->width + 1),
                  ts->shap_scratch);
}

static tpu_status_t run_v5(const tree_step_t *ts, const float *x, size_t rows, float *y,
                           float *raw) {
  const tpu__trees_t *p = ts->e;
  size_t nt = p->ntargets;
  for (size_t r0 = 0; r0 < rows; r0 += ROW_BLOCK) {
    size_t r1 = rows - r0 < ROW_BLOCK ? rows : r0 + ROW_BLOCK;
    for (size_t i = r0; i < r1; i++)
      for (size_t k = 0; k < nt; k++) y[i * nt + k] = p->agg == TPU__TREE_SUM ? p->base[k] : 0;
    tpu_status_t st = accumulate(ts, x, r0, r1, y + r0 * nt, NULL);
    if (st != TPU_OK) return st;
    for (size_t i = r0; i < r1; i++) {
      float *acc = y + i * nt;
      if (p->agg == TPU__TREE_AVERAGE)
        for (size_t k = 0; k < nt; k++) acc[k] = acc[k] / (float)p->ntrees + p->base[k];
      if (raw) memcpy(raw + i * nt, acc, nt * sizeof *acc);
      if (p->post == TPU__TREE_POST_LOGISTIC) {
        for (size_t k = 0; k < nt; k++) { /* std::min(-x, 88.7f): NaN stays NaN */
          float m = 88.7f < -acc[k] ? 88.7f : -acc[k];
          acc[k] = 1.0f / (expf(m) + 1.0f);
        }
      } else if (p->post == TPU__TREE_POST_SOFTMAX) {
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

/* TreeEnsembleRegressor: ONNX Runtime's numerics. */
static tpu_status_t run_regressor(const tree_step_t *ts, const float *x, size_t rows, float *y) {
  const tpu__trees_t *p = ts->e;
  size_t nt = p->ntargets;
  for (size_t r0 = 0; r0 < rows; r0 += ROW_BLOCK) {
    size_t r1 = rows - r0 < ROW_BLOCK ? rows : r0 + ROW_BLOCK;
    memset(y + r0 * nt, 0, (r1 - r0) * nt * sizeof *y);
    tpu_status_t st = accumulate(ts, x, r0, r1, y + r0 * nt, NULL);
    if (st != TPU_OK) return st;
    for (size_t i = r0; i < r1; i++) {
      float *a = y + i * nt;
      for (size_t k = 0; k < nt; k++)
        a[k] = (p->agg == TPU__TREE_AVERAGE ? a[k] / (float)p->ntrees : a[k]) + p->base[k];
      ort_post(p->post, a, nt);
    }
  }
  return TPU_OK;
}

/* TreeEnsembleClassifier: labels into y (may be NULL), scores into z (may be NULL). */
static tpu_status_t run_classifier(const tree_step_t *ts, const float *x, size_t rows,
                                   int64_t *y, float *z) {
  const tpu__trees_t *p = ts->e;
  size_t nt = p->ntargets;
  for (size_t r0 = 0; r0 < rows; r0 += ROW_BLOCK) {
    size_t r1 = rows - r0 < ROW_BLOCK ? rows : r0 + ROW_BLOCK;
    memset(ts->acc, 0, (r1 - r0) * nt * sizeof *ts->acc);
    if (p->track) memset(ts->has, 0, (r1 - r0) * nt);
    tpu_status_t st = accumulate(ts, x, r0, r1, ts->acc, p->track ? ts->has : NULL);
    if (st != TPU_OK) return st;
    for (size_t i = r0; i < r1; i++) {
      float *a = ts->acc + (i - r0) * nt;
      const unsigned char *h = ts->has + (i - r0) * nt;
      int64_t label;
      if (p->cls == TPU__CLS_MULTI) {
        long best = -1;
        for (size_t k = 0; k < nt; k++) {
          a[k] += p->base[k];
          if ((!p->track || h[k]) && (best < 0 || a[k] > a[best])) best = (long)k;
        }
        label = p->labels[best < 0 ? 0 : best];
        ort_post(p->post, a, nt);
      } else {
        float sc = a[p->bin_class] + p->base[p->bin_class];
        if (p->cls == TPU__CLS_BIN_LOGISTIC) {
          a[0] = ort_logistic(-sc);
          a[1] = ort_logistic(sc);
          label = p->labels[sc > 0];
        } else if (p->cls == TPU__CLS_BIN_PROB) {
          a[0] = 1.0f - sc;
          a[1] = sc;
          label = p->labels[sc > 0.5f];
        } else {
          a[0] = -sc;
          a[1] = sc;
          label = p->labels[sc > 0];
        }
      }
      if (y) y[i] = label;
      if (z) memcpy(z + i * nt, a, nt * sizeof *a);
    }
  }
  return TPU_OK;
}

static tpu_status_t tree_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const tree_step_t *ts = s->params;
  const tpu__trees_t *p = ts->e;
  const float *x = s->in[0]->data;
  size_t rows = (size_t)s->in[0]->dims[0];
  void *o0 = s->nout > 0 && s->out[0] ? s->out[0]->data : NULL;
  void *o1 = s->nout > 1 && s->out[1] ? s->out[1]->data : NULL;
  tpu_status_t st;
  switch (p->kind) {
  case TPU__TREE_V5:
    st = run_v5(ts, x, rows, o0, o1);
    if (st == TPU_OK)
      run_explain(ts, x, rows, s->nout > 2 && s->out[2] ? s->out[2]->data : NULL,
                  s->nout > 3 && s->out[3] ? s->out[3]->data : NULL);
    break;
  case TPU__TREE_REGRESSOR: st = run_regressor(ts, x, rows, o0); break;
  default: st = run_classifier(ts, x, rows, o0, o1); break;
  }
  if (st != TPU_OK)
    return tpu__run_fail(rc, st, "engine plan of the trees' paths failed: %s",
                         tpu_strerror(st));
  return TPU_OK;
}

const tpu__kernel_t tpu__kernels_ml[] = {
    {"TreeEnsemble", tree_prepare, tree_run},
    {"TreeEnsembleRegressor", tree_prepare, tree_run},
    {"TreeEnsembleClassifier", tree_prepare, tree_run},
    {NULL, NULL, NULL},
};

const tpu__kernel_t *tpu__graph_kernel_ml(const char *op) {
  for (const tpu__kernel_t *k = tpu__kernels_ml; k->op; k++)
    if (strcmp(k->op, op) == 0) return k;
  return NULL;
}
