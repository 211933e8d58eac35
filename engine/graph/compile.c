/*
 * compile.c - a graph inferred for one batch size, compiled into a program: folded constants,
 * fused matmul epilogues, kernels bound per node, one arena planned by liveness.
 *
 * DESIGN
 * tpu_graph_compile works in passes over the nodes in topological order:
 *   1. views: one tpu__xt_t per graph tensor with its inferred dtype and shape. Initializers
 *      point at the graph's bytes; values inference already knows (Constant, Shape and the
 *      integer arithmetic of reshape targets) are copied into the program's constant block.
 *   2. steps: every node whose outputs are not all known gets a step. A node whose inputs are
 *      all constant is folded: prepared and run once now, its outputs kept as constants, and
 *      no step remains (so Transpose/Reshape/Cast of initializers cost nothing per call).
 *   3. fusion: a Gemm or MatMul with constant weights followed by a bias Add of a constant row
 *      vector, then a BatchNormalization over its output channels (folded into the packed
 *      weights and the bias: scale γ/√(σ²+ε), shift β − μ·scale), and then by Relu, Sigmoid, Tanh, exact Gelu (the op, or the five nodes PyTorch
 *      exports for it: x/√2, Erf, +1, x·_, ·0.5) or a last-axis Softmax, where each
 *      intermediate has no other reader and is not a graph output, becomes one step whose
 *      engine plan computes act(A·W + bias) in its epilogue (tpu__prep_t's fuse_bias /
 *      fuse_act).
 *   4. prepare: each remaining step's kernel works out its parameters (and refuses what it
 *      does not take, naming the node and the dtype).
 *   5. memory: each tensor a step writes lives from that step to its last reader (graph outputs
 *      to the end); tensors are placed largest first at the lowest 64-byte aligned offset that
 *      overlaps no placed tensor alive at the same time. Inputs and outputs of one step are
 *      alive together, so a kernel never writes over what it reads.
 * A run sets the graph inputs' views, and the views of graph outputs a step writes, to the
 * caller's buffers (those outputs take no arena bytes and no copy), runs the steps, and copies
 * the graph outputs that are constants or inputs. Programs compiled with opts->share (other
 * batch sizes of one model, which runs one at a time) reuse its packed weights and, when it is
 * big enough, its arena.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

#define ALIGN 64

struct tpu_graph_program {
  const tpu_graph_t *g; /* node names and attributes (the graph outlives its programs) */
  tpu_engine_t *engine;  /* its compute threads rest after the last step (tpu_engine_rest) */
  tpu__xt_t *xt;
  size_t nxt;
  tpu__step_t *steps;
  size_t nsteps;
  long *inputs, *outputs; /* tensor indices */
  size_t ninputs, noutputs;
  int64_t *range_lo, *range_hi; /* per graph input (index ranges; lo > hi: none) */
  unsigned char *arena;
  size_t arena_bytes;
  int arena_owned;        /* 0: the shared program's (opts->share), big enough for both */
  unsigned char **consts; /* owned constant blocks */
  size_t nconsts, const_bytes;
  char err[512];
};

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static void *aligned_block(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, ALIGN, align_up(bytes ? bytes : 1)) != 0) return NULL;
  return p;
}

static void step_release(tpu__step_t *s) {
  if (s->release && s->params) s->release(s->params);
  free(s->params);
  free(s->label);
  free(s->in);
  s->params = NULL;
  s->label = NULL;
  s->in = s->out = NULL;
}

void tpu_graph_program_free(tpu_graph_program_t *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nsteps; i++) step_release(&p->steps[i]);
  free(p->steps);
  for (size_t i = 0; i < p->nconsts; i++) free(p->consts[i]);
  free(p->consts);
  if (p->arena_owned) free(p->arena);
  free(p->xt);
  free(p->inputs);
  free(p->outputs);
  free(p->range_lo);
  free(p->range_hi);
  free(p);
}

/* Keeps a new constant block of `bytes` for tensor t (owned by the program). */
static tpu_status_t const_block(tpu_graph_program_t *p, tpu__xt_t *t) {
  unsigned char **nc = realloc(p->consts, (p->nconsts + 1) * sizeof *nc);
  if (!nc) return TPU_ENOMEM;
  p->consts = nc;
  unsigned char *b = aligned_block(t->bytes);
  if (!b) return TPU_ENOMEM;
  memset(b, 0, align_up(t->bytes ? t->bytes : 1));
  p->consts[p->nconsts++] = b;
  p->const_bytes += align_up(t->bytes ? t->bytes : 1);
  t->data = b;
  t->is_const = 1;
  return TPU_OK;
}

static int is_act_op(const char *op) {
  return strcmp(op, "Relu") == 0 || strcmp(op, "Sigmoid") == 0 || strcmp(op, "Tanh") == 0 ||
         strcmp(op, "Softmax") == 0 || strcmp(op, "Gelu") == 0;
}

typedef struct {
  tpu_graph_t *g;
  tpu_graph_program_t *p;
  float *fold_scale, *fold_shift; /* a BatchNormalization folded by fuse() for prepare() */
  long *readers;  /* per tensor: number of nodes (with steps) reading it */
  long *reader;   /* per tensor: the last such step */
  const tpu_graph_compile_opts_t *opts;
  tpu_engine_t *engine;
} cctx_t;

static tpu_dtype_t node_precision(const cctx_t *c, size_t node) {
  tpu_dtype_t prec = c->opts ? c->opts->precision : TPU_DTYPE_FP32;
  const char *name = c->g->nodes[node].name;
  if (c->opts && name[0])
    for (size_t i = 0; i < c->opts->nfp32_nodes; i++)
      if (c->opts->fp32_nodes[i] && strcmp(c->opts->fp32_nodes[i], name) == 0)
        return TPU_DTYPE_FP32;
  return prec;
}

static tpu_status_t make_step(cctx_t *c, size_t node, tpu__step_t *s) {
  const tpu__gnode_t *nd = &c->g->nodes[node];
  char lb[200];
  memset(s, 0, sizeof *s);
  s->node = node;
  s->op = nd->op;
  s->nin = nd->nin;
  s->nout = nd->nout;
  tpu__graph_node_label(c->g, node, lb, sizeof lb);
  s->label = strdup(lb);
  s->in = calloc(nd->nin + nd->nout + 1, sizeof *s->in);
  if (!s->label || !s->in) return tpu__graph_fail(c->g, TPU_ENOMEM, "%s: out of memory", lb);
  s->out = s->in + nd->nin;
  for (size_t i = 0; i < nd->nin; i++) s->in[i] = nd->in[i] >= 0 ? &c->p->xt[nd->in[i]] : NULL;
  for (size_t i = 0; i < nd->nout; i++)
    s->out[i] = nd->out[i] >= 0 ? &c->p->xt[nd->out[i]] : NULL;
  return TPU_OK;
}

static tpu_status_t prepare(cctx_t *c, tpu__step_t *s, tpu_act_t act, const tpu__xt_t *bias,
                            const float *fold_scale, const float *fold_shift,
                            const double *epsilon) {
  const tpu__gnode_t *nd = &c->g->nodes[s->node];
  /* s->op, not the node's: a fused pattern's step runs another op (ln_rewrite) */
  const tpu__kernel_t *k = !nd->domain[0] ? tpu__graph_kernel(s->op)
                           : strcmp(nd->domain, "ai.onnx.ml") == 0 ? tpu__graph_kernel_ml(nd->op)
                                                                   : NULL;
  tpu__prep_t pc = {.g = c->g, .node = s->node, .label = s->label, .opset = nd->opset,
                    .engine = c->engine, .precision = node_precision(c, s->node),
                    .fuse_act = act, .fuse_bias = bias, .fold_scale = fold_scale,
                    .fold_shift = fold_shift, .fuse_epsilon = epsilon};
  for (size_t i = 0; c->opts && c->opts->calib && i < c->opts->ncalib; i++)
    if (nd->name[0] && c->opts->calib[i].node && strcmp(c->opts->calib[i].node, nd->name) == 0)
      pc.calib = &c->opts->calib[i];
  if (pc.precision != TPU_DTYPE_INT8) pc.calib = NULL;
  pc.observable = c->opts && c->opts->observable;
  const tpu_graph_program_t *sh = c->opts ? c->opts->share : NULL;
  for (size_t i = 0; sh && i < sh->nsteps; i++)
    if (sh->steps[i].node == s->node && sh->steps[i].run == (k ? k->run : NULL))
      pc.shared = sh->steps[i].params;
  if (!k)
    return tpu__prep_fail(&pc, TPU_ENOTSUP, "op '%s' (opset %d) has no kernel", nd->op,
                          nd->opset);
  tpu_status_t st = k->prepare(&pc, s);
  if (st != TPU_OK) return st;
  s->run = k->run;
  return TPU_OK;
}

/* Runs a step whose inputs are all constant, now, into constant blocks. */
static tpu_status_t fold(cctx_t *c, tpu__step_t *s) {
  tpu_status_t st = prepare(c, s, TPU_ACT_NONE, NULL, NULL, NULL, NULL);
  if (st != TPU_OK) return st;
  for (size_t i = 0; i < s->nout; i++)
    if (s->out[i] && (st = const_block(c->p, s->out[i])) != TPU_OK)
      return tpu__graph_fail(c->g, st, "%s: out of memory", s->label);
  tpu__run_ctx_t rc = {.err = c->g->err, .errlen = sizeof c->g->err, .step = s};
  return s->run(&rc, s);
}

/* The single step reading tensor t, or -1 (none, several, or t is a graph output). */
static long sole_reader(const cctx_t *c, long t) {
  if (t < 0 || c->p->xt[t].pinned) return -1;
  return c->readers[t] == 1 ? c->reader[t] : -1;
}

/* A constant that works as a bias of width n: n elements, shape [n] or [1,...,1,n]. */
static int row_bias(const tpu__xt_t *b, size_t n) {
  if (!b || !b->is_const || b->dtype != TPU_GRAPH_FP32 || b->elems != n || b->rank < 1) return 0;
  return (size_t)b->dims[b->rank - 1] == n;
}

/* The one step reading tensor t that is op `op` with t as an input, else -1. */
static long reader_op(const cctx_t *c, long t, const char *op) {
  long r = sole_reader(c, t);
  return r >= 0 && strcmp(c->p->steps[r].op, op) == 0 ? r : -1;
}

/* Whether step s's operand other than tensor t is a constant scalar close to v. */
static int other_is(const cctx_t *c, const tpu__step_t *s, long t, double v) {
  if (s->nin != 2 || !s->in[0] || !s->in[1]) return 0;
  const tpu__xt_t *x = &c->p->xt[t];
  const tpu__xt_t *o = s->in[0] == x ? s->in[1] : s->in[1] == x ? s->in[0] : NULL;
  if (!o || o == x || !o->is_const || o->elems != 1 || o->dtype != TPU_GRAPH_FP32) return 0;
  double got = *(const float *)o->data;
  return got > v - 1e-6 * (v < 0 ? -v : v) - 1e-7 && got < v + 1e-6 * (v < 0 ? -v : v) + 1e-7;
}

/* GELU as exporters spell it (PyTorch's nn.GELU): h/√2 → Erf → +1 → h·_ → ·0.5, the two Muls
 * in either order of operands. h is read by exactly the Div and the first Mul. Returns the
 * last step, marking the others dead, or -1. */
static long gelu_pattern(cctx_t *c, long h, int *dead) {
  tpu_graph_program_t *p = c->p;
  if (h < 0 || p->xt[h].pinned || c->readers[h] != 2) return -1;
  long div = -1, mul = -1;
  for (size_t i = 0; i < p->nsteps; i++) {
    const tpu__step_t *s = &p->steps[i];
    for (size_t k = 0; k < s->nin; k++)
      if (s->in[k] == &p->xt[h]) {
        if (strcmp(s->op, "Div") == 0 && k == 0) div = (long)i;
        else if (strcmp(s->op, "Mul") == 0) mul = (long)i;
      }
  }
  if (div < 0 || mul < 0 || !other_is(c, &p->steps[div], h, 1.4142135623730951)) return -1;
  long t1 = c->g->nodes[p->steps[div].node].out[0];
  long erf = reader_op(c, t1, "Erf");
  if (erf < 0) return -1;
  long t2 = c->g->nodes[p->steps[erf].node].out[0];
  long add = reader_op(c, t2, "Add");
  if (add < 0 || !other_is(c, &p->steps[add], t2, 1.0)) return -1;
  long t3 = c->g->nodes[p->steps[add].node].out[0];
  if (sole_reader(c, t3) != mul) return -1;
  long t4 = c->g->nodes[p->steps[mul].node].out[0];
  long half = reader_op(c, t4, "Mul");
  if (half < 0 || !other_is(c, &p->steps[half], t4, 0.5)) return -1;
  dead[div] = dead[erf] = dead[add] = dead[mul] = dead[half] = 1;
  return half;
}

/* Whether step r is a ReduceMean of its input over the last axis only, keeping it. */
static int mean_last_axis(const cctx_t *c, const tpu__step_t *r) {
  if (strcmp(r->op, "ReduceMean") != 0 || !r->in[0] || r->in[0]->dtype != TPU_GRAPH_FP32 ||
      r->in[0]->rank < 1)
    return 0;
  int rank = r->in[0]->rank;
  const tpu_graph_attr_t *kd = tpu_graph_attr(c->g, r->node, "keepdims");
  if (kd && kd->type == TPU_GRAPH_ATTR_INT && kd->i != 1) return 0;
  int64_t ax;
  const tpu_graph_attr_t *axes = tpu_graph_attr(c->g, r->node, "axes");
  if (axes) {
    if (axes->type != TPU_GRAPH_ATTR_INTS || axes->n != 1) return 0;
    ax = axes->ints[0];
  } else if (r->nin > 1 && r->in[1] && r->in[1]->is_const && r->in[1]->elems == 1 &&
             r->in[1]->dtype == TPU_GRAPH_INT64) { /* opset 18: axes as an input */
    memcpy(&ax, r->in[1]->data, sizeof ax);
  } else {
    return 0;
  }
  return ax == -1 || ax == rank - 1;
}

/* LayerNormalization over the last axis as exporters spell it before opset 17 (PyTorch's
 * nn.LayerNorm): m = ReduceMean(x), d = x - m, v = ReduceMean(d^2), y = d / Sqrt(v + eps), then
 * optionally y·γ and + β with constant [D] rows. Step i is the first ReduceMean; each
 * intermediate has only the reader the pattern names (d: the Pow and the Div). On a match the
 * others are marked dead and *last is the step whose output the fused one writes. */
static int ln_pattern(cctx_t *c, size_t i, int *dead, double *eps, const tpu__xt_t **gamma,
                      const tpu__xt_t **beta, long *last) {
  tpu_graph_program_t *p = c->p;
  const tpu__step_t *rm = &p->steps[i];
  if (!mean_last_axis(c, rm)) return 0;
  const tpu__xt_t *x = rm->in[0];
  size_t width = (size_t)x->dims[x->rank - 1];
  long m = c->g->nodes[rm->node].out[0];
  long sub = reader_op(c, m, "Sub");
  if (sub < 0 || p->steps[sub].in[0] != x || p->steps[sub].in[1] != &p->xt[m]) return 0;
  long d = c->g->nodes[p->steps[sub].node].out[0];
  if (d < 0 || p->xt[d].pinned || c->readers[d] != 2) return 0;
  long pw = -1, div = -1;
  for (size_t k = 0; k < p->nsteps; k++) {
    const tpu__step_t *t = &p->steps[k];
    if (t->nin >= 1 && t->in[0] == &p->xt[d]) {
      if (strcmp(t->op, "Pow") == 0) pw = (long)k;
      else if (strcmp(t->op, "Div") == 0) div = (long)k;
    }
  }
  if (pw < 0 || div < 0 || !other_is(c, &p->steps[pw], d, 2.0)) return 0;
  long sq_in = c->g->nodes[p->steps[pw].node].out[0];
  long rm2 = reader_op(c, sq_in, "ReduceMean");
  if (rm2 < 0 || !mean_last_axis(c, &p->steps[rm2])) return 0;
  long v = c->g->nodes[p->steps[rm2].node].out[0];
  long add = reader_op(c, v, "Add");
  if (add < 0) return 0;
  const tpu__step_t *a = &p->steps[add];
  const tpu__xt_t *e = a->in[0] == &p->xt[v] ? a->in[1] : a->in[0];
  if (!e || !e->is_const || e->elems != 1 || e->dtype != TPU_GRAPH_FP32) return 0;
  float ef = *(const float *)e->data;
  if (!(ef >= 0.0f && ef < 1.0f)) return 0;
  long ve = c->g->nodes[a->node].out[0];
  long sq = reader_op(c, ve, "Sqrt");
  if (sq < 0) return 0;
  long sd = c->g->nodes[p->steps[sq].node].out[0];
  if (sole_reader(c, sd) != div || p->steps[div].in[1] != &p->xt[sd]) return 0;
  long cur = c->g->nodes[p->steps[div].node].out[0], end = div;
  *gamma = *beta = NULL;
  long mul = reader_op(c, cur, "Mul");
  if (mul >= 0) {
    const tpu__step_t *mm = &p->steps[mul];
    const tpu__xt_t *g = mm->in[0] == &p->xt[cur] ? mm->in[1] : mm->in[0];
    if (g && g != &p->xt[cur] && g->is_const && g->dtype == TPU_GRAPH_FP32 && g->rank == 1 &&
        g->elems == width) {
      *gamma = g;
      end = mul;
      cur = c->g->nodes[mm->node].out[0];
      long ab = reader_op(c, cur, "Add");
      if (ab >= 0) {
        const tpu__step_t *aa = &p->steps[ab];
        const tpu__xt_t *b = aa->in[0] == &p->xt[cur] ? aa->in[1] : aa->in[0];
        if (b && b != &p->xt[cur] && b->is_const && b->dtype == TPU_GRAPH_FP32 && b->rank == 1 &&
            b->elems == width) {
          *beta = b;
          end = ab;
        }
      }
    }
  }
  if (p->steps[end].out[0]->elems != x->elems) return 0;
  dead[sub] = dead[pw] = dead[rm2] = dead[add] = dead[sq] = dead[div] = 1;
  if (*gamma) dead[mul] = 1;
  if (*beta) dead[end] = 1;
  *eps = ef;
  *last = end;
  return 1;
}

/* Turns step i (the pattern's first ReduceMean) into one LayerNormalization step. */
static tpu_status_t ln_rewrite(cctx_t *c, size_t i, const tpu__xt_t *gamma,
                               const tpu__xt_t *beta, long last) {
  tpu__step_t *s = &c->p->steps[i];
  tpu__xt_t **io = calloc(3 + 1 + 1, sizeof *io);
  char lb[240];
  snprintf(lb, sizeof lb, "LayerNormalization from %s .. %s", s->label,
           c->p->steps[last].label);
  char *label = strdup(lb);
  if (!io || !label) {
    free(io);
    free(label);
    return tpu__graph_fail(c->g, TPU_ENOMEM, "compile: out of memory");
  }
  io[0] = s->in[0];
  io[1] = (tpu__xt_t *)gamma;
  io[2] = (tpu__xt_t *)beta;
  io[3] = c->p->steps[last].out[0];
  free(s->in);
  free(s->label);
  s->in = io;
  s->out = io + 3;
  s->nin = 3;
  s->nout = 1;
  s->op = "LayerNormalization";
  s->label = label;
  return TPU_OK;
}

/* A BatchNormalization (inference) reading the matmul's [M, N] output `t` as its only reader,
 * with constant FP32 parameters of N channels, folds into the matmul: scale s = γ/√(σ²+ε),
 * shift = β − μ·s, into c->fold_scale/fold_shift. Returns 0 when it did. */
static int bn_fold(cctx_t *c, const tpu__step_t *b, long t, size_t n, const tpu__xt_t *mm_out) {
  if (strcmp(b->op, "BatchNormalization") != 0 || b->nin != 5 || b->in[0] != &c->p->xt[t] ||
      mm_out->rank != 2 || b->in[0]->rank != 2 || mm_out->elems == 0 || n == 0)
    return -1;
  for (size_t k = 1; k < b->nout; k++)
    if (b->out[k]) return -1; /* training outputs wanted */
  for (size_t k = 1; k < 5; k++) {
    const tpu__xt_t *x = b->in[k];
    if (!x || !x->is_const || x->dtype != TPU_GRAPH_FP32 || x->elems != n) return -1;
  }
  const tpu_graph_attr_t *tm = tpu_graph_attr(c->g, b->node, "training_mode");
  if (tm && tm->type == TPU_GRAPH_ATTR_INT && tm->i != 0) return -1;
  const tpu_graph_attr_t *ea = tpu_graph_attr(c->g, b->node, "epsilon");
  double eps = ea && ea->type == TPU_GRAPH_ATTR_FLOAT ? ea->f : 1e-5;
  float *sc = malloc(n * sizeof *sc), *sh = malloc(n * sizeof *sh);
  if (!sc || !sh) {
    free(sc);
    free(sh);
    return -1;
  }
  const float *gamma = b->in[1]->data, *beta = b->in[2]->data, *mean = b->in[3]->data,
              *var = b->in[4]->data;
  for (size_t j = 0; j < n; j++) {
    double sj = gamma[j] / sqrt((double)var[j] + eps);
    sc[j] = (float)sj;
    sh[j] = (float)(beta[j] - mean[j] * sj);
    if (!isfinite(sc[j]) || !isfinite(sh[j])) {
      free(sc);
      free(sh);
      return -1; /* leave a degenerate one to its own kernel */
    }
  }
  free(c->fold_scale);
  free(c->fold_shift);
  c->fold_scale = sc;
  c->fold_shift = sh;
  return 0;
}

/* Fusion (pass 3) for step i: the activation and bias it takes over from the steps after it
 * (marked dead), its output retargeted to the last of them. */
static void fuse(cctx_t *c, size_t i, int *dead, tpu_act_t *act, const tpu__xt_t **bias) {
  tpu__step_t *s = &c->p->steps[i];
  *act = TPU_ACT_NONE;
  *bias = NULL;
  int gemm = strcmp(s->op, "Gemm") == 0;
  if (!gemm && strcmp(s->op, "MatMul") != 0) return;
  if (s->nin < 2 || !s->in[1] || !s->in[1]->is_const || s->in[1]->dtype != TPU_GRAPH_FP32 ||
      s->in[1]->rank != 2 || !s->in[0] || s->in[0]->dtype != TPU_GRAPH_FP32 || s->in[0]->rank < 1)
    return;
  if (gemm && (tpu_graph_attr(c->g, s->node, "transA") &&
               tpu_graph_attr(c->g, s->node, "transA")->i != 0))
    return;
  size_t n = (size_t)s->out[0]->dims[s->out[0]->rank - 1];
  long cur = c->g->nodes[s->node].out[0];
  tpu__step_t *last = s;
  int took_bias = 0;
  if (!gemm || s->nin < 3 || !s->in[2]) { /* a following Add of a row vector is the bias */
    long r = sole_reader(c, cur);
    if (r >= 0 && strcmp(c->p->steps[r].op, "Add") == 0 && c->p->steps[r].nin == 2) {
      tpu__step_t *a = &c->p->steps[r];
      const tpu__xt_t *other = a->in[0] == &c->p->xt[cur] ? a->in[1] : a->in[0];
      if (other != &c->p->xt[cur] && row_bias(other, n) && a->out[0]->elems == s->out[0]->elems) {
        *bias = other;
        dead[r] = 1;
        last = a;
        cur = c->g->nodes[a->node].out[0];
        took_bias = 1;
      }
    }
  }
  if (gemm && s->nin >= 3 && s->in[2] && !row_bias(s->in[2], n) &&
      !(s->in[2]->is_const && s->in[2]->elems == 1))
    return; /* C is added after the product: no activation can join the epilogue */
  (void)took_bias;
  long bn = sole_reader(c, cur);
  if (bn >= 0 && bn_fold(c, &c->p->steps[bn], cur, n, s->out[0]) == 0) {
    dead[bn] = 1;
    last = &c->p->steps[bn];
    s->out[0] = last->out[0];
    cur = c->g->nodes[last->node].out[0];
  }
  long gl = gelu_pattern(c, cur, dead);
  if (gl >= 0) {
    *act = TPU_ACT_GELU;
    s->out[0] = c->p->steps[gl].out[0];
    return;
  }
  long r = sole_reader(c, cur);
  if (r >= 0 && is_act_op(c->p->steps[r].op)) {
    tpu__step_t *a = &c->p->steps[r];
    tpu_act_t want = TPU_ACT_NONE;
    if (strcmp(a->op, "Relu") == 0) want = TPU_ACT_RELU;
    else if (strcmp(a->op, "Sigmoid") == 0) want = TPU_ACT_SIGMOID;
    else if (strcmp(a->op, "Tanh") == 0) want = TPU_ACT_TANH;
    else if (strcmp(a->op, "Gelu") == 0) { /* the exact form only: the engine's GELU */
      const char *ap = "none";
      const tpu_graph_attr_t *at = tpu_graph_attr(c->g, a->node, "approximate");
      if (at && at->type == TPU_GRAPH_ATTR_STRING) ap = at->s;
      if (strcmp(ap, "none") == 0) want = TPU_ACT_GELU;
    } else { /* Softmax over the last axis only, in either opset form */
      const tpu__xt_t *x = a->in[0];
      int opset = c->g->nodes[a->node].opset;
      const tpu_graph_attr_t *ax = tpu_graph_attr(c->g, a->node, "axis");
      int64_t axis = ax ? ax->i : (opset >= 13 ? -1 : 1);
      if (axis < 0) axis += x->rank;
      if (axis == x->rank - 1) want = TPU_ACT_SOFTMAX;
    }
    if (want != TPU_ACT_NONE && a->in[0] == &c->p->xt[cur]) {
      *act = want;
      dead[r] = 1;
      last = a;
    }
  }
  if (last != s) s->out[0] = last->out[0];
}

static int is_int(tpu_graph_dtype_t d) {
  return d == TPU_GRAPH_INT64 || d == TPU_GRAPH_INT32 || d == TPU_GRAPH_INT8 ||
         d == TPU_GRAPH_UINT8;
}

/* Which integer graph inputs feed Gather indices, and the range each must keep to (after
 * pass 2, on the steps as built: one pass, since they are in topological order). */
static tpu_status_t index_ranges(cctx_t *c) {
  tpu_graph_program_t *p = c->p;
  p->range_lo = calloc(p->ninputs + 1, sizeof *p->range_lo);
  p->range_hi = calloc(p->ninputs + 1, sizeof *p->range_hi);
  char *from = calloc(p->nxt + 1, 1);
  if (!p->range_lo || !p->range_hi || !from) {
    free(from);
    return tpu__graph_fail(c->g, TPU_ENOMEM, "compile: out of memory");
  }
  for (size_t i = 0; i < p->ninputs; i++) {
    p->range_lo[i] = 1;
    p->range_hi[i] = 0;
    const tpu__xt_t *in = &p->xt[p->inputs[i]];
    if (!is_int(in->dtype)) continue;
    memset(from, 0, p->nxt);
    from[p->inputs[i]] = 1;
    for (size_t k = 0; k < p->nsteps; k++) {
      const tpu__step_t *s = &p->steps[k];
      long a = s->nin ? c->g->nodes[s->node].in[0] : -1;
      if (strcmp(s->op, "Gather") == 0 && s->nin >= 2 && s->in[0] && s->in[1]) {
        long t = c->g->nodes[s->node].in[1];
        if (t < 0 || !from[t]) continue;
        int64_t axis = tpu__attr_i(&(tpu__prep_t){.g = c->g, .node = s->node}, "axis", 0);
        if (axis < 0) axis += s->in[0]->rank;
        if (axis < 0 || axis >= s->in[0]->rank) continue;
        int64_t d = s->in[0]->dims[axis];
        if (p->range_lo[i] > p->range_hi[i]) {
          p->range_lo[i] = -d;
          p->range_hi[i] = d;
        } else {
          if (-d > p->range_lo[i]) p->range_lo[i] = -d;
          if (d < p->range_hi[i]) p->range_hi[i] = d;
        }
      } else if (a >= 0 && from[a] && s->nout >= 1 && s->out[0] &&
                 (strcmp(s->op, "Identity") == 0 || strcmp(s->op, "Reshape") == 0 ||
                  strcmp(s->op, "Flatten") == 0 || strcmp(s->op, "Squeeze") == 0 ||
                  strcmp(s->op, "Unsqueeze") == 0 ||
                  (strcmp(s->op, "Cast") == 0 && is_int(s->out[0]->dtype)))) {
        from[c->g->nodes[s->node].out[0]] = 1;
      }
    }
  }
  free(from);
  return TPU_OK;
}

int tpu_graph_program_input_range(const tpu_graph_program_t *p, size_t i, int64_t *lo,
                                  int64_t *hi) {
  if (!p || i >= p->ninputs || !p->range_lo || p->range_lo[i] > p->range_hi[i]) return 0;
  if (lo) *lo = p->range_lo[i];
  if (hi) *hi = p->range_hi[i];
  return 1;
}

/* Pass 5: liveness and placement. */
static tpu_status_t plan_memory(cctx_t *c) {
  tpu_graph_program_t *p = c->p;
  size_t n = 0;
  for (size_t t = 0; t < p->nxt; t++) {
    p->xt[t].first = -1;
    p->xt[t].last = -1;
  }
  for (size_t i = 0; i < p->nsteps; i++) {
    tpu__step_t *s = &p->steps[i];
    for (size_t k = 0; k < s->nout; k++) {
      tpu__xt_t *t = s->out[k];
      if (!t || t->is_const) continue;
      if (t->first < 0) t->first = (long)i;
      if (t->last < (long)i) t->last = (long)i;
    }
    for (size_t k = 0; k < s->nin; k++) {
      tpu__xt_t *t = s->in[k];
      if (t && t->first >= 0 && t->last < (long)i) t->last = (long)i;
    }
  }
  /* A graph output a step writes is written straight into the caller's buffer (set per run,
   * like the inputs): no arena bytes, no copy. */
  for (size_t o = 0; o < p->noutputs; o++) {
    tpu__xt_t *t = &p->xt[p->outputs[o]];
    if (t->first >= 0) t->first = -2;
  }
  size_t *order = malloc((p->nxt + 1) * sizeof *order);
  if (!order) return tpu__graph_fail(c->g, TPU_ENOMEM, "compile: out of memory");
  for (size_t t = 0; t < p->nxt; t++)
    if (p->xt[t].first >= 0) order[n++] = t;
  /* Largest first (insertion sort: graphs have hundreds of tensors, not millions). */
  for (size_t i = 1; i < n; i++) {
    size_t v = order[i], j = i;
    while (j > 0 && p->xt[order[j - 1]].bytes < p->xt[v].bytes) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = v;
  }
  size_t top = 0;
  for (size_t i = 0; i < n; i++) {
    tpu__xt_t *t = &p->xt[order[i]];
    size_t need = align_up(t->bytes ? t->bytes : 1), off = 0;
    for (int moved = 1; moved;) {
      moved = 0;
      for (size_t j = 0; j < i; j++) {
        const tpu__xt_t *u = &p->xt[order[j]];
        if (u->last < t->first || t->last < u->first) continue;
        size_t ue = u->offset + align_up(u->bytes ? u->bytes : 1);
        if (off < ue && u->offset < off + need) {
          off = ue;
          moved = 1;
        }
      }
    }
    t->offset = off;
    t->in_arena = 1;
    if (off + need > top) top = off + need;
  }
  free(order);
  p->arena_bytes = top;
  p->arena_bytes = top;
  if (c->opts && c->opts->memory_limit &&
      (uint64_t)top + p->const_bytes > c->opts->memory_limit)
    return tpu__graph_fail(c->g, TPU_ERANGE, "compile: the program needs %zu bytes of "
                           "activations and %zu of constants, above the limit of %llu", top,
                           p->const_bytes, (unsigned long long)c->opts->memory_limit);
  const tpu_graph_program_t *sh = c->opts ? c->opts->share : NULL;
  if (sh && sh->arena && sh->arena_bytes >= top) { /* one program of a model runs at a time */
    p->arena = sh->arena;
  } else {
    p->arena = aligned_block(top);
    if (!p->arena) return tpu__graph_fail(c->g, TPU_ENOMEM, "compile: out of memory (arena)");
    memset(p->arena, 0, align_up(top ? top : 1));
    p->arena_owned = 1;
  }
  for (size_t t = 0; t < p->nxt; t++)
    if (p->xt[t].in_arena) p->xt[t].data = p->arena + p->xt[t].offset;
  return TPU_OK;
}

static tpu_status_t build_views(cctx_t *c) {
  tpu_graph_t *g = c->g;
  tpu_graph_program_t *p = c->p;
  for (size_t i = 0; i < g->ntensors; i++) {
    const tpu__gtensor_t *gt = &g->tensors[i];
    tpu__xt_t *t = &p->xt[i];
    t->name = gt->name;
    t->pinned = 0;
    if (!gt->known) {
      t->rank = -1;
      continue;
    }
    t->dtype = gt->idtype;
    t->rank = gt->irank;
    for (int d = 0; d < gt->irank; d++) t->dims[d] = gt->idims[d];
    if (tpu__graph_count(t->rank, t->dims, tpu_graph_dtype_size(t->dtype), &t->elems,
                         &t->bytes) != TPU_OK)
      return tpu__graph_fail(g, TPU_EOVERFLOW, "tensor '%s' is too large", t->name);
    if (gt->is_init) {
      t->data = gt->data;
      t->is_const = 1;
      t->qdata = gt->qdata;
      t->qscales = gt->qscales;
      t->qaxis = gt->qaxis;
    } else if (gt->val && !gt->is_input) {
      if (gt->vbytes != t->bytes)
        return tpu__graph_fail(g, TPU_EINVAL, "tensor '%s': inferred value has %zu bytes, "
                               "expected %zu", t->name, gt->vbytes, t->bytes);
      if (const_block(p, t) != TPU_OK)
        return tpu__graph_fail(g, TPU_ENOMEM, "compile: out of memory");
      if (t->bytes) memcpy(t->data, gt->val, t->bytes);
    }
  }
  return TPU_OK;
}

tpu_status_t tpu_graph_compile(tpu_graph_t *g, tpu_engine_t *engine, int64_t batch,
                               const tpu_graph_compile_opts_t *opts, tpu_graph_program_t **out) {
  if (!out) return TPU_EINVAL;
  *out = NULL;
  if (!g || !engine) return TPU_EINVAL;
  if (g->released)
    return tpu__graph_fail(g, TPU_EINVAL, "compile: the graph's constants were released");
  if (opts && opts->precision != TPU_DTYPE_FP32 && opts->precision != TPU_DTYPE_BF16 &&
      opts->precision != TPU_DTYPE_INT8)
    return tpu__graph_fail(g, TPU_EINVAL, "compile: precision must be FP32, BF16 or INT8");
  tpu_status_t st = tpu_graph_infer(g, batch);
  if (st != TPU_OK) return st;
  tpu_graph_program_t *p = calloc(1, sizeof *p);
  cctx_t c = {.g = g, .p = p, .opts = opts, .engine = engine};
  int *dead = NULL;
  if (!p) return tpu__graph_fail(g, TPU_ENOMEM, "compile: out of memory");
  p->g = g;
  p->engine = engine;
  p->nxt = g->ntensors;
  p->xt = calloc(p->nxt + 1, sizeof *p->xt);
  p->steps = calloc(g->nnodes + 1, sizeof *p->steps);
  p->inputs = calloc(g->ninputs + 1, sizeof *p->inputs);
  p->outputs = calloc(g->noutputs + 1, sizeof *p->outputs);
  c.readers = calloc(p->nxt + 1, sizeof *c.readers);
  c.reader = calloc(p->nxt + 1, sizeof *c.reader);
  dead = calloc(g->nnodes + 1, sizeof *dead);
  if (!p->xt || !p->steps || !p->inputs || !p->outputs || !c.readers || !c.reader || !dead) {
    st = tpu__graph_fail(g, TPU_ENOMEM, "compile: out of memory");
    goto fail;
  }
  p->ninputs = g->ninputs;
  p->noutputs = g->noutputs;
  memcpy(p->inputs, g->inputs, g->ninputs * sizeof *p->inputs);
  memcpy(p->outputs, g->outputs, g->noutputs * sizeof *p->outputs);
  if ((st = build_views(&c)) != TPU_OK) goto fail;

  /* Pass 2: steps, folding what is constant. */
  for (size_t k = 0; k < g->nnodes; k++) {
    size_t node = g->order[k];
    const tpu__gnode_t *nd = &g->nodes[node];
    int all_known = 1, all_const = 1;
    for (size_t o = 0; o < nd->nout; o++)
      if (nd->out[o] >= 0 && !p->xt[nd->out[o]].is_const) all_known = 0;
    if (all_known) continue; /* inference knew its values */
    for (size_t i = 0; i < nd->nin; i++)
      if (nd->in[i] >= 0 && !p->xt[nd->in[i]].is_const) all_const = 0;
    tpu__step_t *s = &p->steps[p->nsteps];
    if ((st = make_step(&c, node, s)) != TPU_OK) {
      step_release(s);
      goto fail;
    }
    if (all_const) {
      st = fold(&c, s);
      step_release(s);
      if (st != TPU_OK) goto fail;
      continue;
    }
    for (size_t i = 0; i < nd->nin; i++)
      if (nd->in[i] >= 0) {
        c.readers[nd->in[i]]++;
        c.reader[nd->in[i]] = (long)p->nsteps;
      }
    p->nsteps++;
  }
  for (size_t o = 0; o < p->noutputs; o++) p->xt[p->outputs[o]].pinned = 1;
  /* On-request outputs: a tree node writes them, no step reads them, so a run without them
   * only tells that node to skip them (ops_tree.c). */
  for (size_t o = 0; o < p->noutputs; o++) {
    long t = p->outputs[o];
    const tpu__gtensor_t *gt = &g->tensors[t];
    if (!gt->on_request) continue;
    const tpu__gnode_t *pn = gt->producer >= 0 ? &g->nodes[gt->producer] : NULL;
    if (!pn || strcmp(pn->domain, "ai.onnx.ml") != 0 || strncmp(pn->op, "TreeEnsemble", 12) ||
        c.readers[t] > 0) {
      st = tpu__graph_fail(g, TPU_EINVAL, "compile: output '%s' is marked on request, but %s",
                           gt->name, !pn ? "no node writes it"
                           : c.readers[t] > 0 ? "another node reads it"
                                              : "only a tree ensemble's outputs may be");
      goto fail;
    }
  }
  if ((st = index_ranges(&c)) != TPU_OK) goto fail;

  /* Passes 3 and 4: fusion, then prepare. */
  for (size_t i = 0; i < p->nsteps; i++) {
    if (dead[i]) continue;
    tpu_act_t act;
    const tpu__xt_t *bias, *gamma, *beta;
    double eps;
    long last;
    const double *epsilon = NULL;
    if (ln_pattern(&c, i, dead, &eps, &gamma, &beta, &last)) {
      if ((st = ln_rewrite(&c, i, gamma, beta, last)) != TPU_OK) goto fail;
      epsilon = &eps;
    }
    fuse(&c, i, dead, &act, &bias);
    st = prepare(&c, &p->steps[i], act, bias, c.fold_scale, c.fold_shift, epsilon);
    free(c.fold_scale);
    free(c.fold_shift);
    c.fold_scale = c.fold_shift = NULL;
    if (st != TPU_OK) goto fail;
  }
  size_t live = 0;
  for (size_t i = 0; i < p->nsteps; i++) {
    if (dead[i]) {
      step_release(&p->steps[i]);
      continue;
    }
    p->steps[live++] = p->steps[i];
  }
  p->nsteps = live;
  if ((st = plan_memory(&c)) != TPU_OK) goto fail;
  free(dead);
  free(c.readers);
  free(c.reader);
  *out = p;
  return TPU_OK;
fail:
  free(dead);
  free(c.readers);
  free(c.reader);
  tpu_graph_program_free(p);
  return st;
}

static tpu_status_t program_run(tpu_graph_program_t *p, const void *const *inputs,
                                void *const *outputs, tpu_graph_observe_fn observe, void *user);

tpu_status_t tpu_graph_program_run(tpu_graph_program_t *p, const void *const *inputs,
                                   void *const *outputs) {
  return program_run(p, inputs, outputs, NULL, NULL);
}

tpu_status_t tpu_graph_program_observe(tpu_graph_program_t *p, const void *const *inputs,
                                       void *const *outputs, tpu_graph_observe_fn observe,
                                       void *user) {
  if (!observe) return TPU_EINVAL;
  return program_run(p, inputs, outputs, observe, user);
}

static tpu_status_t program_run(tpu_graph_program_t *p, const void *const *inputs,
                                void *const *outputs, tpu_graph_observe_fn observe, void *user) {
  if (!p || (p->ninputs && !inputs) || (p->noutputs && !outputs)) return TPU_EINVAL;
  p->err[0] = 0;
  for (size_t i = 0; i < p->ninputs; i++) {
    if (!inputs[i]) return TPU_EINVAL;
    p->xt[p->inputs[i]].data = (void *)inputs[i];
  }
  for (size_t o = 0; o < p->noutputs; o++) {
    tpu__xt_t *t = &p->xt[p->outputs[o]];
    if (!outputs[o] && !p->g->tensors[p->outputs[o]].on_request) return TPU_EINVAL;
    if (t->first == -2) t->data = outputs[o]; /* NULL: not asked for (on request) */
  }
  tpu__run_ctx_t rc = {.err = p->err, .errlen = sizeof p->err};
  for (size_t i = 0; i < p->nsteps; i++) {
    rc.step = &p->steps[i];
    const tpu__step_t *s = &p->steps[i];
    if (observe && s->obs_w)
      observe(user, p->g->nodes[s->node].name, s->in[0]->data, s->obs_m, s->obs_k, s->obs_w,
              s->obs_layout, s->obs_n);
    tpu_status_t st = p->steps[i].run(&rc, &p->steps[i]);
    if (st != TPU_OK) {
      tpu_engine_rest(p->engine);
      if (!p->err[0]) tpu__run_fail(&rc, st, "%s", tpu_strerror(st));
      return st;
    }
  }
  /* The next job is a whole batch away: the compute threads sleep now rather than spin on cores
   * the I/O threads need to read it (pool.c). */
  tpu_engine_rest(p->engine);
  for (size_t o = 0; o < p->noutputs; o++) { /* constants and inputs passed straight through */
    const tpu__xt_t *t = &p->xt[p->outputs[o]];
    if (t->first != -2 && t->bytes && outputs[o]) memcpy(outputs[o], t->data, t->bytes);
  }
  return TPU_OK;
}

const char *tpu_graph_program_error(const tpu_graph_program_t *p) { return p ? p->err : ""; }

size_t tpu_graph_program_input_count(const tpu_graph_program_t *p) { return p ? p->ninputs : 0; }
size_t tpu_graph_program_output_count(const tpu_graph_program_t *p) {
  return p ? p->noutputs : 0;
}

int tpu_graph_program_output_on_request(const tpu_graph_program_t *p, size_t i) {
  return p && i < p->noutputs && p->g->tensors[p->outputs[i]].on_request;
}

static tpu_status_t io(const tpu_graph_program_t *p, long t, tpu_graph_io_t *out) {
  const tpu__xt_t *x = &p->xt[t];
  *out = (tpu_graph_io_t){x->name, x->dtype, x->rank, x->dims, x->elems, x->bytes};
  return TPU_OK;
}

tpu_status_t tpu_graph_program_input(const tpu_graph_program_t *p, size_t i, tpu_graph_io_t *out) {
  if (!p || !out || i >= p->ninputs) return TPU_EINVAL;
  return io(p, p->inputs[i], out);
}

tpu_status_t tpu_graph_program_output(const tpu_graph_program_t *p, size_t i,
                                      tpu_graph_io_t *out) {
  if (!p || !out || i >= p->noutputs) return TPU_EINVAL;
  return io(p, p->outputs[i], out);
}

void tpu_graph_program_cost(const tpu_graph_program_t *p, uint64_t *macs, uint64_t *cycles,
                            uint64_t *slots) {
  uint64_t m = 0, cy = 0, sl = 0;
  for (size_t i = 0; p && i < p->nsteps; i++) {
    m += p->steps[i].macs;
    cy += p->steps[i].cycles;
    sl += p->steps[i].slots;
  }
  if (macs) *macs = m;
  if (cycles) *cycles = cy;
  if (slots) *slots = sl;
}

uint64_t tpu_graph_program_memory(const tpu_graph_program_t *p) {
  if (!p) return 0;
  uint64_t b = (p->arena_owned ? p->arena_bytes : 0) + p->const_bytes + sizeof *p +
               p->nxt * sizeof *p->xt;
  for (size_t i = 0; i < p->nsteps; i++) b += p->steps[i].param_bytes;
  return b;
}

uint64_t tpu_graph_release_constants(tpu_graph_t *g, const tpu_graph_program_t *const *progs,
                                     size_t n) {
  if (!g || (n && !progs)) return 0;
  char *used = calloc(g->ntensors + 1, 1);
  if (!used) return 0;
  for (size_t k = 0; k < n; k++) {
    const tpu_graph_program_t *p = progs[k];
    for (size_t i = 0; p && i < p->nsteps; i++) {
      const tpu__step_t *s = &p->steps[i];
      /* the step's own views, not its node's inputs: a fused step reads tensors its node does
       * not (ln_rewrite's Scale and B) */
      for (size_t j = 0; j < s->nin; j++)
        if (s->in[j] && !(j < 64 && (s->packed_inputs >> j & 1)))
          used[s->in[j] - p->xt] = 1;
    }
    for (size_t o = 0; p && o < p->noutputs; o++) used[p->outputs[o]] = 1;
  }
  uint64_t freed = 0;
  for (size_t t = 0; t < g->ntensors; t++) {
    tpu__gtensor_t *x = &g->tensors[t];
    if (!x->is_init || used[t] || !x->data) continue;
    freed += x->bytes;
    free(x->data);
    x->data = NULL;
    free(x->qdata);
    x->qdata = NULL;
  }
  free(used);
  tpu__graph_clear_inferred(g); /* inferred values may point at released bytes */
  g->released = 1;
  return freed;
}

size_t tpu_graph_program_step_count(const tpu_graph_program_t *p) { return p ? p->nsteps : 0; }

size_t tpu_graph_program_describe(const tpu_graph_program_t *p, char *buf, size_t len) {
  size_t at = 0;
  if (buf && len) buf[0] = 0;
  for (size_t i = 0; p && i < p->nsteps; i++) {
    const tpu__step_t *s = &p->steps[i];
    char line[400];
    int n = snprintf(line, sizeof line, "%s%s%s\n", s->label, s->desc[0] ? ": " : "", s->desc);
    if (n < 0) continue;
    if (buf && at + (size_t)n < len) memcpy(buf + at, line, (size_t)n + 1);
    else if (buf && at < len)
      buf[at] = 0;
    at += (size_t)n;
  }
  return at;
}
