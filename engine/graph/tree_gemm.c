/*
 * tree_gemm.c - the GEMM strategy for tree ensembles (Hummingbird's, OSDI'20): the trees'
 * paths become an INT8 matrix product run on the engine's systolic array (packed weights and
 * plans as for any dense layer), and the leaves' values are then added exactly as the node walk
 * adds them.
 *
 * DESIGN
 * For every tree, number its branch nodes i (depth first) and its leaves l. Three stages:
 *   1. Decisions: T[r][i] = 1 when row r takes node i's true branch, else 0. Hummingbird gets
 *      the feature values by a one-hot GEMM (X · A); that product is not exact for ±Inf
 *      (Inf · 0 is NaN) nor for NaN, so here it is a gather, compared with the node's own
 *      mode and missing-value rule (tpu__tree_branch): the same decision the walk takes.
 *   2. Paths: P[i][l] = +1 when leaf l lies under node i's true branch, -1 under its false
 *      branch, 0 when node i is not on l's path. (T · P)[r][l] counts the true turns row r
 *      took towards l minus the false turns it took against l's path, which equals D[l], the
 *      number of true turns on l's path, exactly when r reaches l. T and P are INT8, the
 *      accumulators INT32 (small integers: exact on every kernel set), so the engine's INT8
 *      plan computes it with unit scales and raw INT32 output.
 *   3. Leaves: each row's reached leaf of each tree is the column where the product equals D;
 *      its (target, weight) entries are added to the row's sums in tree order. A GEMM with a
 *      leaf-value matrix (Hummingbird's third product) would sum a row's leaves in the kernel's
 *      K-blocking order, which changes float sums; adding them here keeps every row's result
 *      bit for bit that of the walk, whatever the batch.
 * Trees go to the array in blocks: consecutive trees whose path matrices, laid block-diagonal,
 * fit one R x C weight tile (a tree larger than a tile gets a block to itself), so a tile
 * holds as many whole trees as fit and the blocks keep tree order. One plan per block of at
 * most TPU__TREE_GEMM_ROWS rows; longer batches run it per chunk of rows.
 *
 * The strategy costs M·K·N MACs a block where the walk costs a few comparisons a tree: on a
 * CPU it pays only for shallow trees, on a systolic array it is the natural form. ops_tree.c
 * measures it against the other strategies at load and reports the systolic cycles.
 */
#include <stdlib.h>
#include <string.h>

#include "tpu_kernels.h"
#include "tree_internal.h"

#define GEMM_MAX_TREE_NODES 65536          /* branch nodes of one tree: the INT8 K bound */
#define GEMM_MAX_BYTES ((size_t)64 << 20)  /* path matrices of a model */
#define GEMM_MAX_MACS_ROW ((uint64_t)1 << 23) /* per row: beyond, no CPU would choose it */

typedef struct {
  size_t t0, t1; /* trees [t0, t1) */
  size_t r0, c0; /* their first branch row and leaf column (global) */
  size_t k, n;   /* branch rows (at least 1: a block of single-leaf trees gets a zero row) */
  size_t nodes;  /* real branch rows (k or 0) */
  tpu_weights_t *w;
} gblock_t;

struct tpu__tree_gemm {
  size_t nblocks, kmax, nmax, ntrees;
  uint64_t macs_row;
  gblock_t *blocks;
  tpu__tnode_t *sel;  /* per branch row: the node it decides (feature, split, mode, NaN) */
  int32_t *feat;      /* per branch row: its feature, bit 31 set when NaN takes the true branch */
  float *thr;         /* per branch row: its split */
  int uniform;        /* every node x < split (0) or every node x <= split (1); -1 mixed */
  int32_t *dtrue;     /* per leaf column: the true turns on its path */
  int32_t *leaf;      /* per leaf column: the leaf index */
  size_t *tcol;       /* ntrees + 1: tree t's columns are [tcol[t], tcol[t + 1]) */
};

struct tpu__tree_gemm_run {
  const tpu__tree_gemm_t *g;
  size_t m;
  tpu_plan_t **plans; /* nblocks */
  int8_t *a;          /* m x kmax decisions */
  int32_t *c;         /* m x nmax products */
  float *ones;        /* m unit row scales */
  unsigned char *eq;  /* nmax: product == true turns, per column of one row */
  void (*decide)(const int32_t *, const float *, size_t, int, const float *, int8_t *);
};

void tpu__tree_gemm_free(tpu__tree_gemm_t *g) {
  if (!g) return;
  for (size_t b = 0; b < g->nblocks; b++) tpu_weights_free(g->blocks[b].w);
  free(g->blocks);
  free(g->sel);
  free(g->feat);
  free(g->thr);
  free(g->dtrue);
  free(g->leaf);
  free(g->tcol);
  free(g);
}

/* Counts tree t's branch nodes and leaves (the tree is acyclic: tree_build.c checked). */
static void tree_size(const tpu__trees_t *p, size_t t, int32_t *stack, size_t *nodes,
                      size_t *leaves) {
  size_t sp = 0;
  *nodes = 0;
  *leaves = 0;
  stack[sp++] = p->roots[t];
  while (sp) {
    int32_t at = stack[--sp];
    if (at < 0) {
      (*leaves)++;
      continue;
    }
    (*nodes)++;
    stack[sp++] = p->nodes[at].next[0];
    stack[sp++] = p->nodes[at].next[1];
  }
}

/* Tree t's rows from *row and columns from *col (global), its path matrix into block b's KN
 * matrix pm (b->k x b->n, zeroed). Depth first from an explicit stack of (node, depth, turn)
 * triples, true branch first; path[d] is the turn taken at depth d on the way to the node
 * being visited: the branch row local to the block, complemented for the false branch. */
static void tree_fill(const tpu__trees_t *p, tpu__tree_gemm_t *g, size_t t, const gblock_t *b,
                      int8_t *pm, int32_t *stack, int32_t *path, size_t *row, size_t *col) {
  size_t sp = 0;
  stack[sp++] = p->roots[t];
  stack[sp++] = 0;
  stack[sp++] = 0;
  while (sp) {
    int32_t turn = stack[--sp];
    size_t d = (size_t)stack[--sp];
    int32_t at = stack[--sp];
    if (d) path[d - 1] = turn;
    if (at < 0) {
      size_t c = (*col)++;
      int32_t dt = 0;
      for (size_t k = 0; k < d; k++) {
        int32_t e = path[k];
        pm[(size_t)(e < 0 ? ~e : e) * b->n + (c - b->c0)] = (int8_t)(e >= 0 ? 1 : -1);
        dt += e >= 0;
      }
      g->dtrue[c] = dt;
      g->leaf[c] = ~at;
      continue;
    }
    size_t r = (*row)++;
    int32_t local = (int32_t)(r - b->r0);
    g->sel[r] = p->nodes[at];
    stack[sp++] = p->nodes[at].next[0]; /* popped second */
    stack[sp++] = (int32_t)(d + 1);
    stack[sp++] = ~local;
    stack[sp++] = p->nodes[at].next[1];
    stack[sp++] = (int32_t)(d + 1);
    stack[sp++] = local;
  }
}

tpu_status_t tpu__tree_gemm_build(tpu_engine_t *engine, const tpu__trees_t *p,
                                  tpu__tree_gemm_t **out, size_t *bytes, const char **why) {
  *out = NULL;
  *bytes = 0;
  tpu_engine_stats_t es;
  if (!engine || tpu_engine_stats(engine, &es) != TPU_OK) {
    *why = "no engine";
    return TPU_ENOTSUP;
  }
  tpu__tree_gemm_t *g = calloc(1, sizeof *g);
  int32_t *stack = malloc((2 * p->nnodes + 2) * 3 * sizeof *stack);
  int32_t *path = malloc((p->nnodes + 1) * sizeof *path);
  size_t *tn = malloc((p->ntrees + 1) * 2 * sizeof *tn);
  if (!g || !stack || !path || !tn) goto nomem;
  g->ntrees = p->ntrees;
  size_t rows = 0, cols = 0;
  for (size_t t = 0; t < p->ntrees; t++) {
    tree_size(p, t, stack, &tn[2 * t], &tn[2 * t + 1]);
    if (tn[2 * t] > GEMM_MAX_TREE_NODES) {
      *why = "a tree of more than 65536 branch nodes";
      goto refuse;
    }
    rows += tn[2 * t];
    cols += tn[2 * t + 1];
  }
  /* blocks: consecutive trees while their rows and columns fit one R x C tile */
  size_t nb = 0, k = 0, n = 0;
  g->blocks = calloc(p->ntrees ? p->ntrees : 1, sizeof *g->blocks);
  g->sel = malloc((rows ? rows : 1) * sizeof *g->sel);
  g->feat = malloc((rows ? rows : 1) * sizeof *g->feat);
  g->thr = malloc((rows ? rows : 1) * sizeof *g->thr);
  g->dtrue = malloc((cols ? cols : 1) * sizeof *g->dtrue);
  g->leaf = malloc((cols ? cols : 1) * sizeof *g->leaf);
  g->tcol = malloc((p->ntrees + 1) * sizeof *g->tcol);
  if (!g->blocks || !g->sel || !g->feat || !g->thr || !g->dtrue || !g->leaf || !g->tcol)
    goto nomem;
  size_t r_at = 0, c_at = 0, pm_bytes = 0;
  for (size_t t = 0; t < p->ntrees; t++) {
    size_t tk = tn[2 * t], tl = tn[2 * t + 1];
    if (nb == 0 || k + tk > es.systolic_rows || n + tl > es.systolic_cols) {
      g->blocks[nb++] = (gblock_t){.t0 = t, .t1 = t, .r0 = r_at, .c0 = c_at};
      k = n = 0;
    }
    gblock_t *b = &g->blocks[nb - 1];
    b->t1 = t + 1;
    k += tk;
    n += tl;
    b->nodes = k;
    b->k = k ? k : 1;
    b->n = n;
    r_at += tk;
    c_at += tl;
  }
  g->nblocks = nb;
  for (size_t b = 0; b < nb; b++) {
    const gblock_t *bl = &g->blocks[b];
    pm_bytes += bl->k * bl->n;
    g->macs_row += (uint64_t)bl->k * bl->n;
    g->kmax = bl->k > g->kmax ? bl->k : g->kmax;
    g->nmax = bl->n > g->nmax ? bl->n : g->nmax;
  }
  if (pm_bytes > GEMM_MAX_BYTES) {
    *why = "path matrices over 64 MiB";
    goto refuse;
  }
  if (g->macs_row > GEMM_MAX_MACS_ROW) {
    *why = "over 8M multiply-adds a row";
    goto refuse;
  }
  int8_t *pm = malloc(g->kmax * g->nmax);
  float *unit = malloc(g->nmax * sizeof *unit);
  if (!pm || !unit) {
    free(pm), free(unit);
    goto nomem;
  }
  for (size_t j = 0; j < g->nmax; j++) unit[j] = 1.0f;
  size_t row = 0, col = 0;
  tpu_status_t st = TPU_OK;
  for (size_t b = 0; b < nb && st == TPU_OK; b++) {
    gblock_t *bl = &g->blocks[b];
    memset(pm, 0, bl->k * bl->n);
    for (size_t t = bl->t0; t < bl->t1; t++) {
      g->tcol[t] = col;
      tree_fill(p, g, t, bl, pm, stack, path, &row, &col);
    }
    tpu_weights_desc_t d = {.compute = TPU_DTYPE_INT8, .k = bl->k, .n = bl->n,
                            .layout = TPU_LAYOUT_KN, .src_dtype = TPU_DTYPE_INT8, .src = pm,
                            .src_scales = unit};
    st = tpu_weights_pack(engine, &d, &bl->w);
    size_t held = 0, tr = 0;
    tpu_weights_memory(engine, TPU_DTYPE_INT8, TPU_DTYPE_INT8, bl->k, bl->n, &held, &tr);
    *bytes += held;
  }
  g->tcol[p->ntrees] = col;
  g->uniform = rows ? (p->nodes[0].mode == TPU__TREE_LEQ ? 1 : 0) : 0;
  for (size_t j = 0; j < rows; j++) {
    g->feat[j] = g->sel[j].feature | (g->sel[j].missing_true ? INT32_MIN : 0);
    g->thr[j] = g->sel[j].split;
    if (g->sel[j].mode != (g->uniform ? TPU__TREE_LEQ : TPU__TREE_LT)) g->uniform = -1;
  }
  free(pm), free(unit);
  if (st != TPU_OK) {
    *why = st == TPU_ENOMEM ? "out of memory" : "the engine refused a path matrix";
    tpu__tree_gemm_free(g);
    free(stack), free(path), free(tn);
    return st;
  }
  *bytes += sizeof *g + nb * sizeof *g->blocks + rows * sizeof *g->sel +
            rows * 8 + cols * 2 * sizeof(int32_t) + (p->ntrees + 1) * sizeof(size_t);
  free(stack), free(path), free(tn);
  *out = g;
  return TPU_OK;
nomem:
  *why = "out of memory";
  tpu__tree_gemm_free(g);
  free(stack), free(path), free(tn);
  return TPU_ENOMEM;
refuse:
  tpu__tree_gemm_free(g);
  free(stack), free(path), free(tn);
  return TPU_ENOTSUP;
}

size_t tpu__tree_gemm_blocks(const tpu__tree_gemm_t *g) { return g->nblocks; }

void tpu__tree_gemm_run_free(tpu__tree_gemm_run_t *r) {
  if (!r) return;
  for (size_t b = 0; r->plans && b < r->g->nblocks; b++) tpu_plan_free(r->plans[b]);
  free(r->plans);
  free(r->a);
  free(r->c);
  free(r->ones);
  free(r->eq);
  free(r);
}

tpu_status_t tpu__tree_gemm_plan(tpu_engine_t *engine, const tpu__vec_kernels_t *vec,
                                 const tpu__tree_gemm_t *g, size_t rows,
                                 tpu__tree_gemm_run_t **out, size_t *bytes, uint64_t *macs,
                                 uint64_t *cycles, uint64_t *slots) {
  *out = NULL;
  *bytes = 0;
  *macs = *cycles = *slots = 0;
  tpu__tree_gemm_run_t *r = calloc(1, sizeof *r);
  if (!r) return TPU_ENOMEM;
  r->g = g;
  r->m = rows < 1 ? 1 : rows > TPU__TREE_GEMM_ROWS ? TPU__TREE_GEMM_ROWS : rows;
  r->plans = calloc(g->nblocks ? g->nblocks : 1, sizeof *r->plans);
  r->a = malloc(r->m * g->kmax);
  r->c = malloc(r->m * g->nmax * sizeof *r->c);
  r->ones = malloc(r->m * sizeof *r->ones);
  r->eq = malloc(g->nmax);
  r->decide = vec && vec->tree_decide ? vec->tree_decide : tpu__tree_decide_ref;
  if (!r->plans || !r->a || !r->c || !r->ones || !r->eq) {
    tpu__tree_gemm_run_free(r);
    return TPU_ENOMEM;
  }
  for (size_t i = 0; i < r->m; i++) r->ones[i] = 1.0f;
  size_t chunks = rows < 1 ? 1 : (rows + r->m - 1) / r->m;
  tpu_epilogue_t ep = {.out_dtype = TPU_DTYPE_INT32};
  for (size_t b = 0; b < g->nblocks; b++) {
    const gblock_t *bl = &g->blocks[b];
    tpu_status_t st = tpu_plan_create(engine, bl->w, r->m, TPU_DTYPE_INT8, &ep, &r->plans[b]);
    if (st != TPU_OK) {
      tpu__tree_gemm_run_free(r);
      return st;
    }
    uint64_t m = 0, c = 0, s = 0;
    size_t pb = 0;
    tpu_plan_cost(r->plans[b], &m, &c, &s);
    tpu_plan_memory(engine, TPU_DTYPE_INT8, bl->k, bl->n, r->m, TPU_DTYPE_INT8, &ep, &pb);
    *macs += m * chunks;
    *cycles += c * chunks;
    *slots += s * chunks;
    *bytes += pb;
  }
  *bytes += sizeof *r + g->nblocks * sizeof *r->plans + r->m * (g->kmax + g->nmax * 4 + 4) +
            g->nmax;
  *out = r;
  return TPU_OK;
}

/* eq[l] = c[l] == d[l]: a loop the compiler vectorizes (nothing aliases). */
static void mark_equal(const int32_t *restrict c, const int32_t *restrict d, size_t n,
                       unsigned char *restrict eq) {
  for (size_t l = 0; l < n; l++) eq[l] = (unsigned char)(c[l] == d[l]);
}

tpu_status_t tpu__tree_gemm_rows(const tpu__trees_t *p, tpu__tree_gemm_run_t *r,
                                 const float *x, size_t rows, float *acc, unsigned char *has) {
  const tpu__tree_gemm_t *g = r->g;
  const size_t nt = p->ntargets, w = p->width, m = r->m;
  for (size_t q0 = 0; q0 < rows; q0 += m) {
    size_t q = rows - q0 < m ? rows - q0 : m;
    for (size_t b = 0; b < g->nblocks; b++) {
      const gblock_t *bl = &g->blocks[b];
      const tpu__tnode_t *sel = g->sel + bl->r0;
      /* 1. decisions; padding rows (beyond q) and a block's zero row stay 0 */
      memset(r->a, 0, m * bl->k);
      for (size_t i = 0; i < q; i++) {
        const float *row = x + (q0 + i) * w;
        int8_t *a = r->a + i * bl->k;
        if (g->uniform >= 0) {
          r->decide(g->feat + bl->r0, g->thr + bl->r0, bl->nodes, g->uniform, row, a);
        } else {
          for (size_t j = 0; j < bl->nodes; j++)
            a[j] = (int8_t)tpu__tree_branch(&sel[j], row[sel[j].feature]);
        }
      }
      /* 2. paths, on the engine */
      tpu_status_t st = tpu_plan_run(r->plans[b], r->a, r->ones, r->c);
      if (st != TPU_OK) return st;
      /* 3. each tree's reached leaf, its entries added in tree order */
      const int32_t *dt = g->dtrue + bl->c0;
      for (size_t i = 0; i < q; i++) {
        const int32_t *c = r->c + i * bl->n;
        float *a = acc + (q0 + i) * nt;
        unsigned char *h = has ? has + (q0 + i) * nt : NULL;
        mark_equal(c, dt, bl->n, r->eq);
        for (size_t t = bl->t0; t < bl->t1; t++) {
          /* exactly one column of the tree matches; memchr finds it (its last, if none did) */
          size_t l0 = g->tcol[t] - bl->c0, nl = g->tcol[t + 1] - g->tcol[t];
          const unsigned char *f = memchr(r->eq + l0, 1, nl);
          size_t l = f ? (size_t)(f - r->eq) : l0 + nl - 1;
          tpu__tree_add_leaf(p, g->leaf[bl->c0 + l], a, h);
        }
      }
    }
  }
  return TPU_OK;
}
