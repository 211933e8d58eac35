/*
 * ops_tensor.c - kernels of the graph's tensor ops: normalization (Softmax, LogSoftmax,
 * LayerNormalization, BatchNormalization), reductions (ReduceSum, ReduceMean, ReduceMax,
 * ArgMax) and data movement (Gather, Concat, Flatten, Reshape, Squeeze, Unsqueeze, Transpose,
 * Shape, Constant). See exec_internal.h for the prepare/run contract.
 *
 * DESIGN
 * Every prepare reduces its op to a few sizes worked out once from the static shapes: an
 * (outer, n, inner) split around the axis an op runs along, a coalesced list of dimensions
 * with input strides (Transpose, Reduce*), per-input byte chunks (Concat). It stores them in
 * one malloc'd block (s->params), with any variable-length tables placed after the header in
 * the same block, so run allocates nothing and free() releases everything. Shapes were checked
 * by infer.c (axes in range, broadcastable operands, matching dims); prepare re-reads the
 * attributes and normalizes axes the same way, and refuses only dtypes and attribute values
 * its kernels do not take.
 *
 * Numerics: FP32 sums, means and variances accumulate in double and round once, so results
 * stay within float rounding of a double reference; softmax subtracts the row maximum first.
 * FP64 goes through the same double code. Integer reductions accumulate in 64-bit unsigned
 * arithmetic (wrapping, like numpy's fixed-width sums, never undefined behaviour).
 *
 * Data-movement kernels see bytes, not numbers: they take every dtype, by element size.
 * Flatten, Reshape, Squeeze and Unsqueeze copy their input whole (the compiler may alias them
 * instead). Gather checks every index before it copies anything: an index outside the axis is
 * TPU_ERANGE naming the indices tensor, the value and the valid range, and nothing is read
 * outside the data tensor. This file never touches a view's data in prepare, except through
 * the graph's inferred constant values (Reduce* axes given as an input).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "tpu_kernels.h"

/* ---- shared helpers ---- */

/* Product of dims[lo, hi). Shapes were checked against overflow by inference. */
static size_t prod(const int64_t *dims, int lo, int hi) {
  size_t p = 1;
  for (int i = lo; i < hi; i++) p *= (size_t)dims[i];
  return p;
}

/* An axis already range-checked by inference, made non-negative. */
static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

static int is_fp(tpu_graph_dtype_t d) { return d == TPU_GRAPH_FP32 || d == TPU_GRAPH_FP64; }

static int is_num(tpu_graph_dtype_t d) {
  return is_fp(d) || d == TPU_GRAPH_INT64 || d == TPU_GRAPH_INT32;
}

/* One zeroed block of `bytes` for s->params, or NULL after failing the prepare. */
static void *params_alloc(tpu__prep_t *pc, tpu__step_t *s, size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    tpu__prep_fail(pc, TPU_ENOMEM, "out of memory for %zu bytes of kernel parameters", bytes);
    return NULL;
  }
  s->params = p;
  s->param_bytes = bytes;
  return p;
}

static void copy_bytes(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
}

/* Input i of the step's node as the graph's tensor info (for values inference knew). */
static tpu_status_t node_input_info(tpu__prep_t *pc, size_t i, tpu_graph_tensor_info_t *info) {
  tpu_graph_node_info_t ni;
  tpu_status_t st = tpu_graph_node(pc->g, pc->node, &ni);
  if (st != TPU_OK) return st;
  if (i >= ni.nin || ni.inputs[i] < 0) return TPU_EINVAL;
  return tpu_graph_tensor(pc->g, (size_t)ni.inputs[i], info);
}

/* ---- Softmax, LogSoftmax ---- */

typedef struct {
  size_t outer, n, inner; /* the op runs over n elements strided by inner */
  int log;                /* LogSoftmax */
  const tpu__vec_kernels_t *vec; /* FP32 Softmax over contiguous rows (inner 1) */
} softmax_p;

static tpu_status_t softmax_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (!is_fp(x->dtype)) return tpu__prep_dtype(pc, x, "FP32 or FP64");
  int old = pc->opset < 13;
  int ax = norm_axis(tpu__attr_i(pc, "axis", old ? 1 : -1), x->rank);
  softmax_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->outer = prod(x->dims, 0, ax);
  /* Before opset 13 the input is coerced to 2-D [outer, rest] and each row is normalized. */
  p->n = old ? prod(x->dims, ax, x->rank) : (size_t)x->dims[ax];
  p->inner = old ? 1 : prod(x->dims, ax + 1, x->rank);
  p->log = strcmp(s->op, "LogSoftmax") == 0;
  p->vec = tpu__prep_vec(pc);
  return TPU_OK;
}

#define SOFTMAX_KERNEL(NAME, T, EXP)                                                         \
  static void NAME(const softmax_p *p, const T *x, T *y) {                                   \
    for (size_t o = 0; o < p->outer; o++)                                                    \
      for (size_t j = 0; j < p->inner; j++) {                                                \
        const T *xr = x + o * p->n * p->inner + j;                                           \
        T *yr = y + o * p->n * p->inner + j;                                                 \
        T mx = xr[0];                                                                        \
        for (size_t k = 1; k < p->n; k++)                                                    \
          if (xr[k * p->inner] > mx || xr[k * p->inner] != xr[k * p->inner])                 \
            mx = xr[k * p->inner];                                                           \
        double sum = 0;                                                                      \
        for (size_t k = 0; k < p->n; k++) sum += (double)EXP(xr[k * p->inner] - mx);         \
        if (p->log) {                                                                        \
          double ls = log(sum);                                                              \
          for (size_t k = 0; k < p->n; k++)                                                  \
            yr[k * p->inner] = (T)((double)(xr[k * p->inner] - mx) - ls);                    \
        } else {                                                                             \
          double inv = 1.0 / sum;                                                            \
          for (size_t k = 0; k < p->n; k++)                                                  \
            yr[k * p->inner] = (T)((double)EXP(xr[k * p->inner] - mx) * inv);                \
        }                                                                                    \
      }                                                                                      \
  }

SOFTMAX_KERNEL(softmax_f32, float, expf)
SOFTMAX_KERNEL(softmax_f64, double, exp)

static tpu_status_t softmax_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const softmax_p *p = s->params;
  if (p->n == 0) return TPU_OK;
  if (s->in[0]->dtype == TPU_GRAPH_FP32 && p->inner == 1 && !p->log) {
    /* the kernel set's softmax: the same rows as SOFTMAX_KERNEL's, exp vectorized */
    float *y = s->out[0]->data;
    memcpy(y, s->in[0]->data, p->outer * p->n * sizeof *y);
    p->vec->softmax(y, p->outer, p->n);
  } else if (s->in[0]->dtype == TPU_GRAPH_FP32) {
    softmax_f32(p, s->in[0]->data, s->out[0]->data);
  } else {
    softmax_f64(p, s->in[0]->data, s->out[0]->data);
  }
  return TPU_OK;
}

/* ---- LayerNormalization ---- */

typedef struct {
  size_t outer, n;       /* outer rows of n normalized elements */
  double eps;
  const size_t *smap;    /* position in a row -> element of Scale; NULL when they coincide */
  const size_t *bmap;    /* likewise for B */
  tpu_graph_dtype_t stash; /* dtype of the Mean and InvStdDev outputs */
  const tpu__vec_kernels_t *vec; /* FP32 rows with Scale and B in row order (no maps) */
} layernorm_p;

/* Elements of a [dims[ax..rank)] row that operand t (broadcast to it) holds at each position:
 * the table, or NULL when t has the row's full shape. Writes the table into `map`. */
static int bcast_map(const tpu__xt_t *x, int ax, const tpu__xt_t *t, size_t *map) {
  int m = x->rank - ax;
  size_t n = prod(x->dims, ax, x->rank);
  if (t->elems == n) return 0;
  size_t stride[TPU_GRAPH_MAX_RANK], idx[TPU_GRAPH_MAX_RANK] = {0};
  size_t st = 1;
  for (int k = m - 1; k >= 0; k--) { /* t's dims align with the row's trailing dims */
    int tk = k - (m - t->rank);
    int64_t td = tk >= 0 ? t->dims[tk] : 1;
    stride[k] = td == 1 ? 0 : st;
    st *= (size_t)td;
  }
  for (size_t pos = 0; pos < n; pos++) {
    size_t off = 0;
    for (int k = 0; k < m; k++) off += idx[k] * stride[k];
    map[pos] = off;
    for (int k = m - 1; k >= 0; k--) {
      if (++idx[k] < (size_t)x->dims[ax + k]) break;
      idx[k] = 0;
    }
  }
  return 1;
}

static tpu_status_t layernorm_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (!is_fp(x->dtype)) return tpu__prep_dtype(pc, x, "FP32 or FP64");
  int ax = norm_axis(tpu__attr_i(pc, "axis", -1), x->rank);
  tpu_graph_dtype_t stash = x->dtype;
  for (size_t i = 1; i < s->nout && i < 3; i++) {
    const tpu__xt_t *o = s->out[i];
    if (!o) continue;
    if (!is_fp(o->dtype))
      return tpu__prep_fail(pc, TPU_ENOTSUP, "output '%s' is %s: this kernel writes Mean and "
                            "InvStdDev as FP32 or FP64 (stash_type 1 or 11)", o->name,
                            tpu_graph_dtype_name(o->dtype));
    stash = o->dtype;
  }
  size_t n = prod(x->dims, ax, x->rank);
  const tpu__xt_t *sc = s->in[1], *b = s->nin > 2 ? s->in[2] : NULL;
  int need_s = sc && sc->elems != n, need_b = b && b->elems != n;
  size_t bytes = sizeof(layernorm_p) + ((size_t)need_s + (size_t)need_b) * n * sizeof(size_t);
  layernorm_p *p = params_alloc(pc, s, bytes);
  if (!p) return TPU_ENOMEM;
  size_t *tab = (size_t *)(p + 1);
  p->outer = prod(x->dims, 0, ax);
  p->n = n;
  p->eps = pc->fuse_epsilon ? *pc->fuse_epsilon : tpu__attr_f(pc, "epsilon", 1e-5f);
  p->stash = stash;
  p->vec = tpu__prep_vec(pc);
  if (need_s) {
    bcast_map(x, ax, sc, tab);
    p->smap = tab;
    tab += n;
  }
  if (need_b) {
    bcast_map(x, ax, b, tab);
    p->bmap = tab;
  }
  return TPU_OK;
}

static void store_fp(void *dst, tpu_graph_dtype_t dt, size_t i, double v) {
  if (dt == TPU_GRAPH_FP32) ((float *)dst)[i] = (float)v;
  else ((double *)dst)[i] = v;
}

#define LAYERNORM_KERNEL(NAME, T)                                                            \
  static void NAME(const layernorm_p *p, const T *x, const T *sc, const T *b, T *y,          \
                   void *mean_out, void *inv_out) {                                          \
    for (size_t o = 0; o < p->outer; o++) {                                                  \
      const T *xr = x + o * p->n;                                                            \
      T *yr = y + o * p->n;                                                                  \
      double sum = 0, var = 0;                                                               \
      for (size_t k = 0; k < p->n; k++) sum += (double)xr[k];                                \
      double mean = sum / (double)p->n;                                                      \
      for (size_t k = 0; k < p->n; k++) {                                                    \
        double d = (double)xr[k] - mean;                                                     \
        var += d * d;                                                                        \
      }                                                                                      \
      double inv = 1.0 / sqrt(var / (double)p->n + p->eps);                                  \
      for (size_t k = 0; k < p->n; k++) {                                                    \
        double v = ((double)xr[k] - mean) * inv;                                             \
        if (sc) v *= (double)sc[p->smap ? p->smap[k] : k];                                   \
        if (b) v += (double)b[p->bmap ? p->bmap[k] : k];                                     \
        yr[k] = (T)v;                                                                        \
      }                                                                                      \
      if (mean_out) store_fp(mean_out, p->stash, o, mean);                                   \
      if (inv_out) store_fp(inv_out, p->stash, o, inv);                                      \
    }                                                                                        \
  }

LAYERNORM_KERNEL(layernorm_f32, float)
LAYERNORM_KERNEL(layernorm_f64, double)

static tpu_status_t layernorm_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const layernorm_p *p = s->params;
  if (p->n == 0) return TPU_OK;
  const tpu__xt_t *sc = s->in[1], *b = s->nin > 2 ? s->in[2] : NULL;
  void *mean = s->nout > 1 && s->out[1] ? s->out[1]->data : NULL;
  void *inv = s->nout > 2 && s->out[2] ? s->out[2]->data : NULL;
  if (s->in[0]->dtype == TPU_GRAPH_FP32 && !p->smap && !p->bmap) {
    const float *x = s->in[0]->data;
    float *y = s->out[0]->data;
    for (size_t o = 0; o < p->outer; o++) {
      double m, iv;
      p->vec->layernorm(x + o * p->n, p->n, sc ? sc->data : NULL, b ? b->data : NULL, p->eps,
                        y + o * p->n, &m, &iv);
      if (mean) store_fp(mean, p->stash, o, m);
      if (inv) store_fp(inv, p->stash, o, iv);
    }
  } else if (s->in[0]->dtype == TPU_GRAPH_FP32) {
    layernorm_f32(p, s->in[0]->data, sc ? sc->data : NULL, b ? b->data : NULL, s->out[0]->data,
                  mean, inv);
  } else {
    layernorm_f64(p, s->in[0]->data, sc ? sc->data : NULL, b ? b->data : NULL, s->out[0]->data,
                  mean, inv);
  }
  return TPU_OK;
}

/* ---- BatchNormalization (inference) ---- */

typedef struct {
  size_t n, c, inner; /* X is [n, c, inner...] */
  double eps;
} batchnorm_p;

static tpu_status_t batchnorm_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (!is_fp(x->dtype)) return tpu__prep_dtype(pc, x, "FP32 or FP64");
  for (size_t i = 1; i < 5; i++)
    if (!is_fp(s->in[i]->dtype)) return tpu__prep_dtype(pc, s->in[i], "FP32 or FP64");
  batchnorm_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->n = (size_t)x->dims[0];
  p->c = (size_t)x->dims[1];
  p->inner = prod(x->dims, 2, x->rank);
  p->eps = tpu__attr_f(pc, "epsilon", 1e-5f);
  return TPU_OK;
}

static double load_fp(const tpu__xt_t *t, size_t i) {
  return t->dtype == TPU_GRAPH_FP32 ? (double)((const float *)t->data)[i]
                                    : ((const double *)t->data)[i];
}

static tpu_status_t batchnorm_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const batchnorm_p *p = s->params;
  int f32 = s->in[0]->dtype == TPU_GRAPH_FP32;
  for (size_t ch = 0; ch < p->c; ch++) {
    /* y = (x - mean) * scale / sqrt(var + eps) + B, per channel */
    double a = load_fp(s->in[1], ch) / sqrt(load_fp(s->in[4], ch) + p->eps);
    double mean = load_fp(s->in[3], ch), bias = load_fp(s->in[2], ch);
    for (size_t b = 0; b < p->n; b++) {
      size_t at = (b * p->c + ch) * p->inner;
      if (f32) {
        const float *x = (const float *)s->in[0]->data + at;
        float *y = (float *)s->out[0]->data + at;
        for (size_t k = 0; k < p->inner; k++) y[k] = (float)(((double)x[k] - mean) * a + bias);
      } else {
        const double *x = (const double *)s->in[0]->data + at;
        double *y = (double *)s->out[0]->data + at;
        for (size_t k = 0; k < p->inner; k++) y[k] = (x[k] - mean) * a + bias;
      }
    }
  }
  return TPU_OK;
}

/* ---- ReduceSum, ReduceMean, ReduceMax ---- */

enum { RED_SUM, RED_MEAN, RED_MAX };

/* The input's dims, coalesced into runs that are all kept or all reduced; the output holds
 * the kept runs in order. Strides in elements of the input. */
typedef struct {
  int kind;
  int copy;            /* noop_with_empty_axes with no axes: the output is the input */
  int nk, nr;          /* kept and reduced runs */
  size_t kdim[TPU_GRAPH_MAX_RANK], kstride[TPU_GRAPH_MAX_RANK];
  size_t rdim[TPU_GRAPH_MAX_RANK], rstride[TPU_GRAPH_MAX_RANK];
  size_t count;        /* elements reduced into each output */
  size_t out_elems;
  /* FP32 fast path: the reduced elements are one block, x viewed as [outer][n][inner] (one
   * reduced run between at most one kept run on each side): rows are summed a whole inner
   * vector at a time into acc, unit stride, instead of one odometer step per element. */
  int block;
  size_t outer, n, inner;
  double *acc;         /* inner doubles, after the struct */
  const tpu__vec_kernels_t *vec; /* acc_f64 for the sums */
} reduce_p;

/* Reads the axes of a Reduce node: an INTS attribute, or (from_input) the constant input 1. */
static tpu_status_t reduce_axes(tpu__prep_t *pc, tpu__step_t *s, int from_input, int64_t *axes,
                                size_t *na) {
  *na = 0;
  if (!from_input) {
    const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, "axes");
    if (!a) return TPU_OK;
    if (a->type != TPU_GRAPH_ATTR_INTS || a->n > TPU_GRAPH_MAX_RANK)
      return tpu__prep_fail(pc, TPU_EINVAL, "attribute 'axes' must be at most %d ints",
                            TPU_GRAPH_MAX_RANK);
    for (size_t i = 0; i < a->n; i++) axes[i] = a->ints[i];
    *na = a->n;
    return TPU_OK;
  }
  if (s->nin < 2 || !s->in[1]) return TPU_OK;
  tpu_graph_tensor_info_t info;
  if (node_input_info(pc, 1, &info) != TPU_OK || !info.data)
    return tpu__prep_fail(pc, TPU_ENOTSUP, "input '%s' (axes) must be a constant known at load",
                          s->in[1]->name);
  size_t es = tpu_graph_dtype_size(info.dtype), cnt = es ? info.bytes / es : 0;
  if ((info.dtype != TPU_GRAPH_INT64 && info.dtype != TPU_GRAPH_INT32) ||
      cnt > TPU_GRAPH_MAX_RANK)
    return tpu__prep_fail(pc, TPU_EINVAL, "input '%s' (axes) must hold at most %d INT64 values",
                          s->in[1]->name, TPU_GRAPH_MAX_RANK);
  for (size_t i = 0; i < cnt; i++) {
    if (info.dtype == TPU_GRAPH_INT64) {
      memcpy(&axes[i], (const char *)info.data + 8 * i, 8);
    } else {
      int32_t v;
      memcpy(&v, (const char *)info.data + 4 * i, 4);
      axes[i] = v;
    }
  }
  *na = cnt;
  return TPU_OK;
}

static tpu_status_t reduce_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (!is_num(x->dtype)) return tpu__prep_dtype(pc, x, "FP32, FP64, INT64 or INT32");
  int kind = strcmp(s->op, "ReduceSum") == 0 ? RED_SUM
             : strcmp(s->op, "ReduceMean") == 0 ? RED_MEAN : RED_MAX;
  int from_input = (kind == RED_SUM && pc->opset >= 13) || pc->opset >= 18;
  int64_t axes[TPU_GRAPH_MAX_RANK];
  size_t na = 0;
  tpu_status_t st = reduce_axes(pc, s, from_input, axes, &na);
  if (st != TPU_OK) return st;
  reduce_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->kind = kind;
  p->out_elems = s->out[0]->elems;
  if (na == 0 && from_input && tpu__attr_i(pc, "noop_with_empty_axes", 0)) {
    p->copy = 1;
    return TPU_OK;
  }
  int red[TPU_GRAPH_MAX_RANK];
  for (int d = 0; d < x->rank; d++) red[d] = na == 0;
  for (size_t i = 0; i < na; i++) red[norm_axis(axes[i], x->rank)] = 1;
  /* Coalesce from the innermost dim out: a run grows while the reduced-ness stays the same. */
  size_t stride = 1;
  int last = -1; /* 0 kept, 1 reduced, -1 none yet */
  size_t kd[TPU_GRAPH_MAX_RANK], ks[TPU_GRAPH_MAX_RANK], rd[TPU_GRAPH_MAX_RANK],
      rs[TPU_GRAPH_MAX_RANK];
  int nk = 0, nr = 0;
  p->count = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    size_t dim = (size_t)x->dims[d];
    if (red[d]) p->count *= dim;
    if (dim != 1) {
      if (red[d]) {
        if (last == 1) rd[nr - 1] *= dim;
        else rd[nr] = dim, rs[nr++] = stride;
      } else {
        if (last == 0) kd[nk - 1] *= dim;
        else kd[nk] = dim, ks[nk++] = stride;
      }
      last = red[d];
    }
    stride *= dim;
  }
  /* Runs were collected innermost first; store them outermost first. */
  for (int i = 0; i < nk; i++) p->kdim[i] = kd[nk - 1 - i], p->kstride[i] = ks[nk - 1 - i];
  for (int i = 0; i < nr; i++) p->rdim[i] = rd[nr - 1 - i], p->rstride[i] = rs[nr - 1 - i];
  p->nk = nk;
  p->nr = nr;
  /* One reduced run with the kept ones only outside it and inside it: the block form. */
  int inner_kept = nk >= 1 && p->kstride[nk - 1] == 1 && nr == 1 && p->rstride[0] != 1;
  if (x->dtype == TPU_GRAPH_FP32 && nr == 1 && nk <= (inner_kept ? 2 : 1) && p->count &&
      p->out_elems) {
    size_t inner = inner_kept ? p->kdim[nk - 1] : 1;
    if (p->rstride[0] == inner) {
      reduce_p copy = *p;
      reduce_p *q = realloc(p, sizeof *p + inner * sizeof(double));
      if (!q) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
      *q = copy;
      s->params = q;
      s->param_bytes = sizeof *q + inner * sizeof(double);
      q->block = 1;
      q->inner = inner;
      q->n = copy.count;
      q->outer = q->out_elems / inner;
      q->acc = (double *)(q + 1);
      q->vec = tpu__prep_vec(pc);
    }
  }
  return TPU_OK;
}

static void reduce_block_f32(const reduce_p *p, const float *x, float *y) {
  double *acc = p->acc;
  for (size_t o = 0; o < p->outer; o++) {
    const float *xo = x + o * p->n * p->inner;
    for (size_t i = 0; i < p->inner; i++) acc[i] = p->kind == RED_MAX ? -INFINITY : 0;
    for (size_t k = 0; k < p->n; k++) {
      const float *row = xo + k * p->inner;
      if (p->kind == RED_MAX) {
        for (size_t i = 0; i < p->inner; i++) {
          double v = row[i];
          if (v > acc[i] || v != v) acc[i] = v; /* a NaN sticks, as in the general kernel */
        }
      } else if (p->inner == 1) {
        acc[0] += row[0]; /* a row sum (reduced last axis): a call per element would dominate */
      } else {
        p->vec->acc_f64(acc, row, p->inner); /* the same additions, vectorized */
      }
    }
    float *yo = y + o * p->inner;
    double scale = p->kind == RED_MEAN ? 1.0 / (double)p->n : 1.0;
    for (size_t i = 0; i < p->inner; i++)
      yo[i] = (float)(p->kind == RED_MEAN ? acc[i] * scale : acc[i]);
  }
}

/* Offset of the next reduced element: advances the odometer idx over p's reduced runs. */
static inline size_t odo_next(size_t *idx, const size_t *dim, const size_t *stride, int n,
                              size_t off) {
  for (int k = n - 1; k >= 0; k--) {
    if (++idx[k] < dim[k]) return off + stride[k];
    off -= (dim[k] - 1) * stride[k];
    idx[k] = 0;
  }
  return off;
}

#define REDUCE_FP_KERNEL(NAME, T)                                                            \
  static void NAME(const reduce_p *p, const T *x, T *y) {                                    \
    size_t kidx[TPU_GRAPH_MAX_RANK] = {0}, base = 0;                                         \
    for (size_t o = 0; o < p->out_elems; o++) {                                              \
      size_t ridx[TPU_GRAPH_MAX_RANK] = {0}, off = base;                                     \
      double acc = p->kind == RED_MAX ? -INFINITY : 0;                                       \
      for (size_t r = 0; r < p->count; r++) {                                                \
        double v = (double)x[off];                                                           \
        if (p->kind != RED_MAX) acc += v;                                                    \
        else if (v > acc || v != v) acc = v; /* a NaN sticks: nothing compares above it */   \
        off = odo_next(ridx, p->rdim, p->rstride, p->nr, off);                               \
      }                                                                                      \
      if (p->kind == RED_MEAN) acc /= (double)p->count;                                      \
      y[o] = (T)acc;                                                                         \
      base = odo_next(kidx, p->kdim, p->kstride, p->nk, base);                               \
    }                                                                                        \
  }

#define REDUCE_INT_KERNEL(NAME, T, TMIN)                                                     \
  static void NAME(const reduce_p *p, const T *x, T *y) {                                    \
    size_t kidx[TPU_GRAPH_MAX_RANK] = {0}, base = 0;                                         \
    for (size_t o = 0; o < p->out_elems; o++) {                                              \
      size_t ridx[TPU_GRAPH_MAX_RANK] = {0}, off = base;                                     \
      uint64_t sum = 0;                                                                      \
      T mx = TMIN;                                                                           \
      for (size_t r = 0; r < p->count; r++) {                                                \
        sum += (uint64_t)(int64_t)x[off];                                                    \
        if (x[off] > mx) mx = x[off];                                                        \
        off = odo_next(ridx, p->rdim, p->rstride, p->nr, off);                               \
      }                                                                                      \
      if (p->kind == RED_MAX) y[o] = mx;                                                     \
      else if (p->kind == RED_SUM || p->count == 0) y[o] = (T)(int64_t)sum;                  \
      else y[o] = (T)((int64_t)sum / (int64_t)p->count); /* truncates, like a cast */        \
      base = odo_next(kidx, p->kdim, p->kstride, p->nk, base);                               \
    }                                                                                        \
  }

REDUCE_FP_KERNEL(reduce_f32, float)
REDUCE_FP_KERNEL(reduce_f64, double)
REDUCE_INT_KERNEL(reduce_i64, int64_t, INT64_MIN)
REDUCE_INT_KERNEL(reduce_i32, int32_t, INT32_MIN)

static tpu_status_t reduce_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const reduce_p *p = s->params;
  const void *x = s->in[0]->data;
  void *y = s->out[0]->data;
  if (p->copy) {
    copy_bytes(y, x, s->out[0]->bytes);
    return TPU_OK;
  }
  switch (s->in[0]->dtype) {
  case TPU_GRAPH_FP32:
    if (p->block) reduce_block_f32(p, x, y);
    else reduce_f32(p, x, y);
    break;
  case TPU_GRAPH_FP64: reduce_f64(p, x, y); break;
  case TPU_GRAPH_INT64: reduce_i64(p, x, y); break;
  default: reduce_i32(p, x, y); break;
  }
  return TPU_OK;
}

/* ---- ArgMax ---- */

typedef struct {
  size_t outer, n, inner;
  int last; /* select_last_index */
} argmax_p;

static tpu_status_t argmax_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (!is_num(x->dtype)) return tpu__prep_dtype(pc, x, "FP32, FP64, INT64 or INT32");
  int ax = norm_axis(tpu__attr_i(pc, "axis", 0), x->rank);
  if (x->rank > 0 && x->dims[ax] == 0 && s->out[0]->elems > 0)
    return tpu__prep_fail(pc, TPU_ESHAPE, "input '%s' has no elements along axis %d: no "
                          "maximum to index", x->name, ax);
  argmax_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->outer = prod(x->dims, 0, ax);
  p->n = x->rank > 0 ? (size_t)x->dims[ax] : 1;
  p->inner = x->rank > 0 ? prod(x->dims, ax + 1, x->rank) : 1;
  p->last = tpu__attr_i(pc, "select_last_index", 0) != 0;
  return TPU_OK;
}

/* NaN counts as the largest value (the first NaN wins, as numpy's argmax has it). */
#define ARGMAX_KERNEL(NAME, T)                                                               \
  static void NAME(const argmax_p *p, const T *x, int64_t *y) {                              \
    for (size_t o = 0; o < p->outer; o++)                                                    \
      for (size_t j = 0; j < p->inner; j++) {                                                \
        const T *xr = x + o * p->n * p->inner + j;                                           \
        size_t best = 0;                                                                     \
        T bv = xr[0];                                                                        \
        for (size_t k = 1; k < p->n && bv == bv; k++) {                                      \
          T v = xr[k * p->inner];                                                            \
          if (v != v || v > bv || (p->last && v == bv)) best = k, bv = v;                    \
        }                                                                                    \
        y[o * p->inner + j] = (int64_t)best;                                                 \
      }                                                                                      \
  }

ARGMAX_KERNEL(argmax_f32, float)
ARGMAX_KERNEL(argmax_f64, double)
ARGMAX_KERNEL(argmax_i64, int64_t)
ARGMAX_KERNEL(argmax_i32, int32_t)

static tpu_status_t argmax_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const argmax_p *p = s->params;
  if (p->n == 0) return TPU_OK;
  const void *x = s->in[0]->data;
  int64_t *y = s->out[0]->data;
  switch (s->in[0]->dtype) {
  case TPU_GRAPH_FP32: argmax_f32(p, x, y); break;
  case TPU_GRAPH_FP64: argmax_f64(p, x, y); break;
  case TPU_GRAPH_INT64: argmax_i64(p, x, y); break;
  default: argmax_i32(p, x, y); break;
  }
  return TPU_OK;
}

/* ---- Gather ---- */

typedef struct {
  size_t outer, n, chunk; /* data is [outer, n, chunk bytes] */
  size_t nidx;
  int axis, idx64;
  char data_shape[200];  /* for messages */
} gather_p;

static tpu_status_t gather_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0], *idx = s->in[1];
  size_t es = tpu_graph_dtype_size(x->dtype);
  if (!es) return tpu__prep_dtype(pc, x, "any dtype with a size");
  if (idx->dtype != TPU_GRAPH_INT64 && idx->dtype != TPU_GRAPH_INT32)
    return tpu__prep_dtype(pc, idx, "INT64 or INT32 indices");
  gather_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->axis = norm_axis(tpu__attr_i(pc, "axis", 0), x->rank);
  p->outer = prod(x->dims, 0, p->axis);
  p->n = (size_t)x->dims[p->axis];
  p->chunk = prod(x->dims, p->axis + 1, x->rank) * es;
  p->nidx = idx->elems;
  p->idx64 = idx->dtype == TPU_GRAPH_INT64;
  tpu__graph_shape_str(x->rank, x->dims, p->data_shape, sizeof p->data_shape);
  return TPU_OK;
}

static int64_t gather_id(const gather_p *p, const void *idx, size_t k) {
  return p->idx64 ? ((const int64_t *)idx)[k] : ((const int32_t *)idx)[k];
}

static tpu_status_t gather_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const gather_p *p = s->params;
  const void *idx = s->in[1]->data;
  int64_t n = (int64_t)p->n;
  /* Check every index before copying anything: no read may leave the data tensor. */
  for (size_t k = 0; k < p->nidx; k++) {
    int64_t id = gather_id(p, idx, k);
    if (id < -n || id >= n) {
      if (n == 0)
        return tpu__run_fail(rc, TPU_ERANGE, "indices '%s' hold %lld at position %zu, but "
                             "axis %d of '%s' %s is empty", s->in[1]->name, (long long)id, k,
                             p->axis, s->in[0]->name, p->data_shape);
      return tpu__run_fail(rc, TPU_ERANGE, "indices '%s' hold %lld at position %zu, outside "
                           "[%lld, %lld] for axis %d of '%s' %s", s->in[1]->name,
                           (long long)id, k, (long long)-n, (long long)(n - 1), p->axis,
                           s->in[0]->name, p->data_shape);
    }
  }
  const unsigned char *x = s->in[0]->data;
  unsigned char *y = s->out[0]->data;
  if (!p->chunk) return TPU_OK;
  for (size_t o = 0; o < p->outer; o++)
    for (size_t k = 0; k < p->nidx; k++) {
      int64_t id = gather_id(p, idx, k);
      if (id < 0) id += n;
      memcpy(y + (o * p->nidx + k) * p->chunk, x + (o * p->n + (size_t)id) * p->chunk,
             p->chunk);
    }
  return TPU_OK;
}

/* ---- Concat ---- */

typedef struct {
  size_t outer, nin;
  size_t chunk[]; /* bytes of input i per outer index */
} concat_p;

static tpu_status_t concat_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  size_t es = tpu_graph_dtype_size(x->dtype);
  if (!es) return tpu__prep_dtype(pc, x, "any dtype with a size");
  int ax = norm_axis(tpu__attr_i(pc, "axis", 0), x->rank);
  concat_p *p = params_alloc(pc, s, sizeof *p + s->nin * sizeof(size_t));
  if (!p) return TPU_ENOMEM;
  p->outer = prod(x->dims, 0, ax);
  p->nin = s->nin;
  for (size_t i = 0; i < s->nin; i++)
    p->chunk[i] = prod(s->in[i]->dims, ax, s->in[i]->rank) * es;
  return TPU_OK;
}

static tpu_status_t concat_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const concat_p *p = s->params;
  unsigned char *y = s->out[0]->data;
  for (size_t o = 0; o < p->outer; o++)
    for (size_t i = 0; i < p->nin; i++) {
      if (!p->chunk[i]) continue;
      memcpy(y, (const unsigned char *)s->in[i]->data + o * p->chunk[i], p->chunk[i]);
      y += p->chunk[i];
    }
  return TPU_OK;
}

/* ---- Flatten, Reshape, Squeeze, Unsqueeze: the same bytes under a new shape ---- */

static tpu_status_t move_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  if (!tpu_graph_dtype_size(s->in[0]->dtype))
    return tpu__prep_dtype(pc, s->in[0], "any dtype with a size");
  if (s->in[0]->bytes != s->out[0]->bytes)
    return tpu__prep_fail(pc, TPU_ESHAPE, "output '%s' has %zu bytes, input '%s' %zu",
                          s->out[0]->name, s->out[0]->bytes, s->in[0]->name, s->in[0]->bytes);
  return TPU_OK;
}

static tpu_status_t move_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  if (s->out[0]->data != s->in[0]->data)
    copy_bytes(s->out[0]->data, s->in[0]->data, s->out[0]->bytes);
  return TPU_OK;
}

/* ---- Transpose ---- */

/* The output walked in order: its dims (coalesced, size-1 dims dropped) and the input stride
 * of each, in elements. When the innermost input stride is 1, rows are copied whole. */
typedef struct {
  int rank;
  size_t es;
  size_t dim[TPU_GRAPH_MAX_RANK], stride[TPU_GRAPH_MAX_RANK];
} transpose_p;

static tpu_status_t transpose_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  size_t es = tpu_graph_dtype_size(x->dtype);
  if (!es) return tpu__prep_dtype(pc, x, "any dtype with a size");
  int r = x->rank;
  int64_t perm[TPU_GRAPH_MAX_RANK];
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, "perm");
  for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  if (a && a->type == TPU_GRAPH_ATTR_INTS && a->n == (size_t)r)
    for (int i = 0; i < r; i++) perm[i] = a->ints[i];
  size_t istride[TPU_GRAPH_MAX_RANK], st = 1;
  for (int i = r - 1; i >= 0; i--) istride[i] = st, st *= (size_t)x->dims[i];
  transpose_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->es = es;
  int n = 0;
  for (int i = 0; i < r; i++) {
    size_t d = (size_t)x->dims[perm[i]], sd = istride[perm[i]];
    if (d == 1) continue;
    /* Output dims k, k+1 walk the input contiguously when stride[k] = stride[k+1] * dim[k+1]. */
    if (n > 0 && p->stride[n - 1] == sd * d) {
      p->dim[n - 1] *= d;
      p->stride[n - 1] = sd;
    } else {
      p->dim[n] = d;
      p->stride[n++] = sd;
    }
  }
  p->rank = n;
  return TPU_OK;
}

#define TRANSPOSE_KERNEL(NAME, T)                                                            \
  static void NAME(const transpose_p *p, const T *x, T *y, size_t elems) {                   \
    size_t idx[TPU_GRAPH_MAX_RANK] = {0}, off = 0;                                           \
    int in = p->rank - 1;                                                                    \
    size_t rows = elems / p->dim[in], len = p->dim[in], step = p->stride[in];                \
    for (size_t row = 0; row < rows; row++) {                                                \
      for (size_t k = 0; k < len; k++) y[k] = x[off + k * step];                             \
      y += len;                                                                              \
      off = odo_next(idx, p->dim, p->stride, in, off);                                       \
    }                                                                                        \
  }

TRANSPOSE_KERNEL(transpose_1, uint8_t)
TRANSPOSE_KERNEL(transpose_2, uint16_t)
TRANSPOSE_KERNEL(transpose_4, uint32_t)
TRANSPOSE_KERNEL(transpose_8, uint64_t)

static tpu_status_t transpose_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const transpose_p *p = s->params;
  size_t elems = s->out[0]->elems;
  const void *x = s->in[0]->data;
  void *y = s->out[0]->data;
  if (!elems) return TPU_OK;
  if (p->rank == 0 || (p->rank == 1 && p->stride[0] == 1)) { /* the order is unchanged */
    memcpy(y, x, s->out[0]->bytes);
    return TPU_OK;
  }
  switch (p->es) {
  case 1: transpose_1(p, x, y, elems); break;
  case 2: transpose_2(p, x, y, elems); break;
  case 4: transpose_4(p, x, y, elems); break;
  default: transpose_8(p, x, y, elems); break;
  }
  return TPU_OK;
}

/* ---- Shape ---- */

typedef struct {
  size_t n;
  int64_t dims[TPU_GRAPH_MAX_RANK];
} shape_p;

static tpu_status_t shape_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  int64_t r = x->rank;
  /* start and end (opset 15) clamp to [0, rank] after adding rank to negatives. The rule in
   * infer.c reads them at every opset; so does this, so the output size always agrees. */
  int64_t start = tpu__attr_i(pc, "start", 0), end = tpu__attr_i(pc, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  size_t n = end > start ? (size_t)(end - start) : 0;
  if (s->out[0]->dtype != TPU_GRAPH_INT64 || s->out[0]->elems != n)
    return tpu__prep_fail(pc, TPU_ESHAPE, "output '%s' should be INT64 with %zu values",
                          s->out[0]->name, n);
  shape_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->n = n;
  for (size_t i = 0; i < n; i++) p->dims[i] = x->dims[(size_t)start + i];
  return TPU_OK;
}

static tpu_status_t shape_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const shape_p *p = s->params;
  copy_bytes(s->out[0]->data, p->dims, p->n * sizeof(int64_t));
  return TPU_OK;
}

/* ---- Constant ---- */

typedef struct {
  const void *src; /* the attribute's bytes, in the graph (which outlives the program) */
  size_t bytes;
} constant_p;

static tpu_status_t constant_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  static const char *const names[] = {"value", "value_float", "value_floats", "value_int",
                                      "value_ints"};
  const tpu_graph_attr_t *a = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !a; i++)
    a = tpu_graph_attr(pc->g, pc->node, names[i]);
  const void *src = NULL;
  size_t bytes = 0;
  if (a) switch (a->type) {
    case TPU_GRAPH_ATTR_TENSOR: src = a->t_data, bytes = a->t_bytes; break;
    case TPU_GRAPH_ATTR_FLOAT: src = &a->f, bytes = sizeof a->f; break;
    case TPU_GRAPH_ATTR_FLOATS: src = a->floats, bytes = a->n * sizeof(float); break;
    case TPU_GRAPH_ATTR_INT: src = &a->i, bytes = sizeof a->i; break;
    case TPU_GRAPH_ATTR_INTS: src = a->ints, bytes = a->n * sizeof(int64_t); break;
    default: a = NULL; break;
    }
  if (!a)
    return tpu__prep_fail(pc, TPU_ENOTSUP, "has no supported value attribute (value, "
                          "value_float(s), value_int(s))");
  if (bytes != s->out[0]->bytes)
    return tpu__prep_fail(pc, TPU_ESHAPE, "attribute '%s' holds %zu bytes, output '%s' needs %zu",
                          a->name, bytes, s->out[0]->name, s->out[0]->bytes);
  constant_p *p = params_alloc(pc, s, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->src = src;
  p->bytes = bytes;
  return TPU_OK;
}

static tpu_status_t constant_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const constant_p *p = s->params;
  copy_bytes(s->out[0]->data, p->src, p->bytes);
  return TPU_OK;
}

const tpu__kernel_t tpu__kernels_tensor[] = {
    {"Softmax", softmax_prepare, softmax_run},
    {"LogSoftmax", softmax_prepare, softmax_run},
    {"LayerNormalization", layernorm_prepare, layernorm_run},
    {"BatchNormalization", batchnorm_prepare, batchnorm_run},
    {"ReduceSum", reduce_prepare, reduce_run},
    {"ReduceMean", reduce_prepare, reduce_run},
    {"ReduceMax", reduce_prepare, reduce_run},
    {"ArgMax", argmax_prepare, argmax_run},
    {"Gather", gather_prepare, gather_run},
    {"Concat", concat_prepare, concat_run},
    {"Flatten", move_prepare, move_run},
    {"Reshape", move_prepare, move_run},
    {"Squeeze", move_prepare, move_run},
    {"Unsqueeze", move_prepare, move_run},
    {"Transpose", transpose_prepare, transpose_run},
    {"Shape", shape_prepare, shape_run},
    {"Constant", constant_prepare, constant_run},
    {NULL, NULL, NULL},
};
