/*
 * infer.c - dtype and shape inference of a validated graph for one batch size, with ONNX
 * semantics per op and opset.
 *
 * DESIGN
 * Nodes are visited in topological order; each op's rule reads its inputs' inferred dtypes and
 * shapes (and, for operands that must be constant, their values) and sets its outputs'. A rule
 * refuses what it cannot give a static shape to, with a message naming the node and the shapes
 * involved. Values are computed only where a shape depends on them: Constant and Shape outputs,
 * and integer data-movement ops (Identity, Cast between INT32 and INT64, Gather, Concat,
 * Squeeze, Unsqueeze, Reshape, Flatten) on such values, which is how exporters spell a reshape
 * target ("Shape → Gather → Unsqueeze → Concat → Reshape"). Nothing else is evaluated here:
 * folding arithmetic is the compiler's job.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef struct {
  tpu_graph_t *g;
  size_t n;               /* node index */
  const tpu__gnode_t *nd;
  char lb[200];           /* the node's label for messages */
} ctx_t;

#define SHAPE_STR 200

static tpu_status_t cfail(ctx_t *c, tpu_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tpu_status_t cfail(ctx_t *c, tpu_status_t st, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tpu__graph_fail(c->g, st, "%s: %s", c->lb, msg);
}

/* Input i, or NULL when absent (beyond nin, or an empty name). */
static tpu__gtensor_t *in_t(ctx_t *c, size_t i) {
  if (i >= c->nd->nin || c->nd->in[i] < 0) return NULL;
  return &c->g->tensors[c->nd->in[i]];
}

static const char *shp(const tpu__gtensor_t *t, char *buf) {
  return tpu__graph_shape_str(t->irank, t->idims, buf, SHAPE_STR);
}

static int is_float(tpu_graph_dtype_t d) {
  return d == TPU_GRAPH_FP32 || d == TPU_GRAPH_FP16 || d == TPU_GRAPH_BF16 || d == TPU_GRAPH_FP64;
}

/* Checks the count of inputs (present ones among the first `min` required) and outputs. */
static tpu_status_t arity(ctx_t *c, size_t min, size_t max, size_t max_out) {
  if (c->nd->nin < min || c->nd->nin > max) {
    if (min == max) return cfail(c, TPU_EINVAL, "takes %zu inputs, got %zu", min, c->nd->nin);
    return cfail(c, TPU_EINVAL, "takes %zu to %zu inputs, got %zu", min, max, c->nd->nin);
  }
  for (size_t i = 0; i < min; i++)
    if (!in_t(c, i)) return cfail(c, TPU_EINVAL, "input %zu is required but absent", i);
  for (size_t i = max_out; i < c->nd->nout; i++)
    if (c->nd->out[i] >= 0)
      return cfail(c, TPU_ENOTSUP, "has %zu outputs; at most %zu are supported", c->nd->nout,
                   max_out);
  if (c->nd->out[0] < 0) return cfail(c, TPU_EINVAL, "output 0 has no name");
  return TPU_OK;
}

static tpu_status_t need_dtype(ctx_t *c, const tpu__gtensor_t *t, int floats_only) {
  if (t->idtype == TPU_GRAPH_BOOL || (floats_only && !is_float(t->idtype)))
    return cfail(c, TPU_EDTYPE, "input '%s' is %s, expected %s", t->name,
                 tpu_graph_dtype_name(t->idtype), floats_only ? "a float type" : "a number type");
  return TPU_OK;
}

static tpu_status_t same_dtype(ctx_t *c, const tpu__gtensor_t *a, const tpu__gtensor_t *b) {
  if (a->idtype != b->idtype)
    return cfail(c, TPU_EDTYPE, "inputs '%s' (%s) and '%s' (%s) differ in dtype", a->name,
                 tpu_graph_dtype_name(a->idtype), b->name, tpu_graph_dtype_name(b->idtype));
  return TPU_OK;
}

/* Sets output i: dtype, shape, and checks it against what the builder declared. */
static tpu_status_t set_out(ctx_t *c, size_t i, tpu_graph_dtype_t dt, int rank,
                            const int64_t *dims) {
  if (i >= c->nd->nout || c->nd->out[i] < 0) return TPU_OK;
  tpu__gtensor_t *t = &c->g->tensors[c->nd->out[i]];
  char a[SHAPE_STR], b[SHAPE_STR];
  if (rank > TPU_GRAPH_MAX_RANK)
    return cfail(c, TPU_EOVERFLOW, "output '%s' would have rank %d, above the limit of %d",
                 t->name, rank, TPU_GRAPH_MAX_RANK);
  tpu_status_t st = tpu__graph_count(rank, dims, tpu_graph_dtype_size(dt), NULL, NULL);
  if (st != TPU_OK)
    return cfail(c, st, "output '%s' shape %s %s", t->name,
                 tpu__graph_shape_str(rank, dims, a, sizeof a),
                 st == TPU_EOVERFLOW ? "overflows the size limit" : "has a negative dimension");
  if (t->declared) {
    int ok = t->dtype == dt && t->rank == rank;
    for (int d = 0; ok && d < rank; d++) ok = t->dims[d] < 0 || t->dims[d] == dims[d];
    if (!ok)
      return cfail(c, TPU_ESHAPE, "output '%s' is inferred as %s %s but declared %s %s", t->name,
                   tpu_graph_dtype_name(dt), tpu__graph_shape_str(rank, dims, a, sizeof a),
                   tpu_graph_dtype_name(t->dtype),
                   tpu__graph_shape_str(t->rank, t->dims, b, sizeof b));
  }
  t->known = 1;
  t->idtype = dt;
  t->irank = rank;
  for (int d = 0; d < rank; d++) t->idims[d] = dims[d];
  return TPU_OK;
}

static tpu__gtensor_t *out_t(ctx_t *c, size_t i) {
  return i < c->nd->nout && c->nd->out[i] >= 0 ? &c->g->tensors[c->nd->out[i]] : NULL;
}

/* Gives output i an owned value of `bytes` bytes (its dtype and shape are already set). */
static tpu_status_t set_val(ctx_t *c, size_t i, const void *data, size_t bytes) {
  tpu__gtensor_t *t = out_t(c, i);
  if (!t) return TPU_OK;
  void *v = malloc(bytes ? bytes : 1);
  if (!v) return cfail(c, TPU_ENOMEM, "out of memory");
  if (bytes) memcpy(v, data, bytes);
  t->val = v;
  t->vbytes = bytes;
  t->val_owned = 1;
  return TPU_OK;
}

/* ---- attributes ---- */

static tpu_status_t attr_int(ctx_t *c, const char *name, int64_t def, int64_t *v) {
  const tpu_graph_attr_t *a = tpu_graph_attr(c->g, c->n, name);
  *v = def;
  if (!a) return TPU_OK;
  if (a->type != TPU_GRAPH_ATTR_INT)
    return cfail(c, TPU_EINVAL, "attribute '%s' must be an int", name);
  *v = a->i;
  return TPU_OK;
}

static tpu_status_t attr_float(ctx_t *c, const char *name) {
  const tpu_graph_attr_t *a = tpu_graph_attr(c->g, c->n, name);
  if (a && a->type != TPU_GRAPH_ATTR_FLOAT)
    return cfail(c, TPU_EINVAL, "attribute '%s' must be a float", name);
  return TPU_OK;
}

/* INTS attribute `name` into out (at most max); *n = 0 and *present = 0 when absent. */
static tpu_status_t attr_ints(ctx_t *c, const char *name, int64_t *out, size_t max, size_t *n,
                              int *present) {
  const tpu_graph_attr_t *a = tpu_graph_attr(c->g, c->n, name);
  *n = 0;
  *present = a != NULL;
  if (!a) return TPU_OK;
  if (a->type != TPU_GRAPH_ATTR_INTS)
    return cfail(c, TPU_EINVAL, "attribute '%s' must be a list of ints", name);
  if (a->n > max)
    return cfail(c, TPU_EINVAL, "attribute '%s' has %zu values, at most %zu fit", name, a->n, max);
  for (size_t i = 0; i < a->n; i++) out[i] = a->ints[i];
  *n = a->n;
  return TPU_OK;
}

/* The value of input i as integers: it must be known at load (an initializer, a Constant, a
 * Shape), INT64 or INT32, rank ≤ 1 and at most `max` values. */
static tpu_status_t const_ints(ctx_t *c, size_t i, const char *what, int64_t *out, size_t max,
                               size_t *n) {
  const tpu__gtensor_t *t = in_t(c, i);
  if (!t) return cfail(c, TPU_EINVAL, "input %zu (%s) is absent", i, what);
  if (!t->val)
    return cfail(c, TPU_ENOTSUP, "input '%s' (%s) must be a constant known at load (an "
                 "initializer, Constant or Shape), it is computed", t->name, what);
  if (t->idtype != TPU_GRAPH_INT64 && t->idtype != TPU_GRAPH_INT32)
    return cfail(c, TPU_EDTYPE, "input '%s' (%s) is %s, expected INT64", t->name, what,
                 tpu_graph_dtype_name(t->idtype));
  if (t->irank > 1)
    return cfail(c, TPU_ESHAPE, "input '%s' (%s) has rank %d, expected 1", t->name, what,
                 t->irank);
  size_t cnt = t->vbytes / tpu_graph_dtype_size(t->idtype);
  if (cnt > max)
    return cfail(c, TPU_EINVAL, "input '%s' (%s) has %zu values, at most %zu fit", t->name, what,
                 cnt, max);
  for (size_t k = 0; k < cnt; k++) {
    if (t->idtype == TPU_GRAPH_INT64) {
      int64_t v;
      memcpy(&v, (const char *)t->val + 8 * k, 8);
      out[k] = v;
    } else {
      int32_t v;
      memcpy(&v, (const char *)t->val + 4 * k, 4);
      out[k] = v;
    }
  }
  *n = cnt;
  return TPU_OK;
}

/* Normalizes axis against rank r: [-r, r-1] → [0, r-1] (or [-r, r] → [0, r] with inclusive). */
static tpu_status_t norm_axis(ctx_t *c, const char *what, int64_t axis, int r, int inclusive,
                              int *out) {
  int64_t hi = inclusive ? r : r - 1;
  if (axis < -(int64_t)r || axis > hi)
    return cfail(c, TPU_EINVAL, "%s %lld is out of range [%d, %lld] for rank %d", what,
                 (long long)axis, -r, (long long)hi, r);
  *out = (int)(axis < 0 ? axis + r : axis);
  return TPU_OK;
}

/* Normalizes a list of axes; repeats are refused. */
static tpu_status_t norm_axes(ctx_t *c, int64_t *axes, size_t n, int r) {
  for (size_t i = 0; i < n; i++) {
    int a = 0;
    tpu_status_t st = norm_axis(c, "axis", axes[i], r, 0, &a);
    if (st != TPU_OK) return st;
    axes[i] = a;
    for (size_t j = 0; j < i; j++)
      if (axes[j] == a) return cfail(c, TPU_EINVAL, "axis %d is listed twice", a);
  }
  return TPU_OK;
}

/* ---- broadcasting ---- */

/* Numpy broadcasting of (ra, da) with (*r, d) into (*r, d). */
static tpu_status_t bcast(ctx_t *c, const tpu__gtensor_t *ta, int *r, int64_t *d,
                          const char *prev_names) {
  int ra = ta->irank, rb = *r;
  int ro = ra > rb ? ra : rb;
  int64_t o[TPU_GRAPH_MAX_RANK];
  char s1[SHAPE_STR], s2[SHAPE_STR];
  for (int i = 0; i < ro; i++) {
    int64_t x = i - (ro - ra) >= 0 ? ta->idims[i - (ro - ra)] : 1;
    int64_t y = i - (ro - rb) >= 0 ? d[i - (ro - rb)] : 1;
    if (x != y && x != 1 && y != 1)
      return cfail(c, TPU_ESHAPE, "shapes %s of %s and %s of '%s' do not broadcast",
                   tpu__graph_shape_str(rb, d, s1, sizeof s1), prev_names, shp(ta, s2), ta->name);
    o[i] = x == 1 ? y : x;
  }
  for (int i = 0; i < ro; i++) d[i] = o[i];
  *r = ro;
  return TPU_OK;
}

/* All present inputs broadcast together. */
static tpu_status_t bcast_inputs(ctx_t *c, size_t from, int *r, int64_t *d) {
  char names[160] = "";
  int first = 1;
  for (size_t i = from; i < c->nd->nin; i++) {
    const tpu__gtensor_t *t = in_t(c, i);
    if (!t) continue;
    if (first) {
      *r = t->irank;
      for (int k = 0; k < t->irank; k++) d[k] = t->idims[k];
      snprintf(names, sizeof names, "'%s'", t->name);
      first = 0;
      continue;
    }
    tpu_status_t st = bcast(c, t, r, d, names);
    if (st != TPU_OK) return st;
    size_t at = strlen(names);
    snprintf(names + at, sizeof names - at, " and '%s'", t->name);
  }
  return TPU_OK;
}

/* t broadcasts to (r, d) without changing it (ONNX unidirectional broadcasting). */
static tpu_status_t bcast_to(ctx_t *c, const tpu__gtensor_t *t, int r, const int64_t *d,
                             const char *target) {
  char s1[SHAPE_STR], s2[SHAPE_STR];
  int ok = t->irank <= r;
  for (int i = 0; ok && i < t->irank; i++) {
    int64_t x = t->idims[t->irank - 1 - i], y = d[r - 1 - i];
    ok = x == 1 || x == y;
  }
  if (!ok)
    return cfail(c, TPU_ESHAPE, "input '%s' of shape %s does not broadcast to %s %s", t->name,
                 shp(t, s1), target, tpu__graph_shape_str(r, d, s2, sizeof s2));
  return TPU_OK;
}

/* ---- op rules ---- */

static tpu_status_t op_unary(ctx_t *c) {
  const char *op = c->nd->op;
  tpu_status_t st;
  int clip = strcmp(op, "Clip") == 0;
  if ((st = arity(c, 1, clip ? 3 : 1, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  int any = strcmp(op, "Identity") == 0;
  int floats_only = !any && strcmp(op, "Relu") && strcmp(op, "Neg") && strcmp(op, "Abs") && !clip;
  if (!any && (st = need_dtype(c, x, floats_only)) != TPU_OK) return st;
  if (strcmp(op, "LeakyRelu") == 0 && (st = attr_float(c, "alpha")) != TPU_OK) return st;
  if (strcmp(op, "Gelu") == 0) {
    const tpu_graph_attr_t *a = tpu_graph_attr(c->g, c->n, "approximate");
    if (a && (a->type != TPU_GRAPH_ATTR_STRING || (strcmp(a->s, "none") && strcmp(a->s, "tanh"))))
      return cfail(c, TPU_EINVAL, "attribute 'approximate' must be \"none\" or \"tanh\"");
  }
  if (clip) {
    if ((st = attr_float(c, "min")) != TPU_OK || (st = attr_float(c, "max")) != TPU_OK) return st;
    for (size_t i = 1; i < 3; i++) {
      tpu__gtensor_t *b = in_t(c, i);
      if (!b) continue;
      if ((st = same_dtype(c, x, b)) != TPU_OK) return st;
      size_t elems = 0;
      tpu__graph_count(b->irank, b->idims, 1, &elems, NULL);
      if (b->irank > 1 || elems != 1) {
        char s[SHAPE_STR];
        return cfail(c, TPU_ESHAPE, "input '%s' (%s) must be a scalar, got shape %s", b->name,
                     i == 1 ? "min" : "max", shp(b, s));
      }
    }
  }
  if ((st = set_out(c, 0, x->idtype, x->irank, x->idims)) != TPU_OK) return st;
  if (any && x->val) { /* Identity of a value keeps the value (a view: the input outlives it) */
    tpu__gtensor_t *o = out_t(c, 0);
    o->val = x->val;
    o->vbytes = x->vbytes;
  }
  return TPU_OK;
}

static tpu_status_t op_cast(ctx_t *c) {
  tpu_status_t st;
  int64_t to;
  if ((st = arity(c, 1, 1, 1)) != TPU_OK) return st;
  if (!tpu_graph_attr(c->g, c->n, "to"))
    return cfail(c, TPU_EINVAL, "attribute 'to' is required");
  if ((st = attr_int(c, "to", 0, &to)) != TPU_OK) return st;
  tpu_graph_dtype_t dt =
      to < 0 || to > 1000 ? TPU_GRAPH_UNDEFINED : tpu_graph_dtype_from_onnx((int)to);
  if (dt == TPU_GRAPH_UNDEFINED)
    return cfail(c, TPU_EDTYPE, "attribute 'to' is ONNX type %lld, which tpud does not support",
                 (long long)to);
  const tpu__gtensor_t *x = in_t(c, 0);
  if ((st = set_out(c, 0, dt, x->irank, x->idims)) != TPU_OK) return st;
  /* Exporters cast shapes between INT32 and INT64 on their way to a Reshape: keep the value. */
  int ints = (x->idtype == TPU_GRAPH_INT64 || x->idtype == TPU_GRAPH_INT32) &&
             (dt == TPU_GRAPH_INT64 || dt == TPU_GRAPH_INT32);
  if (x->val && ints && x->irank <= 1) {
    int64_t v[64];
    size_t n;
    if (x->vbytes / tpu_graph_dtype_size(x->idtype) > 64) return TPU_OK;
    if ((st = const_ints(c, 0, "value", v, 64, &n)) != TPU_OK) return st;
    if (dt == TPU_GRAPH_INT64) return set_val(c, 0, v, n * 8);
    int32_t w[64];
    for (size_t k = 0; k < n; k++) w[k] = (int32_t)v[k]; /* ONNX Cast truncates likewise */
    return set_val(c, 0, w, n * 4);
  }
  return TPU_OK;
}

static tpu_status_t op_binary(ctx_t *c) {
  const char *op = c->nd->op;
  int variadic = strcmp(op, "Max") == 0 || strcmp(op, "Min") == 0;
  tpu_status_t st;
  if ((st = arity(c, variadic ? 1 : 2, variadic ? TPU__GRAPH_MAX_IO : 2, 1)) != TPU_OK) return st;
  tpu__gtensor_t *a = in_t(c, 0);
  for (size_t i = 0; i < c->nd->nin; i++) {
    tpu__gtensor_t *b = in_t(c, i);
    if (!b) return cfail(c, TPU_EINVAL, "input %zu is absent", i);
    if ((st = need_dtype(c, b, 0)) != TPU_OK) return st;
    if (i > 0 && strcmp(op, "Pow") && (st = same_dtype(c, a, b)) != TPU_OK) return st;
  }
  int r = 0;
  int64_t d[TPU_GRAPH_MAX_RANK];
  if ((st = bcast_inputs(c, 0, &r, d)) != TPU_OK) return st;
  return set_out(c, 0, a->idtype, r, d);
}

static tpu_status_t op_where(ctx_t *c) {
  tpu_status_t st;
  if ((st = arity(c, 3, 3, 1)) != TPU_OK) return st;
  tpu__gtensor_t *cond = in_t(c, 0), *x = in_t(c, 1), *y = in_t(c, 2);
  if (cond->idtype != TPU_GRAPH_BOOL)
    return cfail(c, TPU_EDTYPE, "input '%s' (condition) is %s, expected BOOL", cond->name,
                 tpu_graph_dtype_name(cond->idtype));
  if ((st = same_dtype(c, x, y)) != TPU_OK) return st;
  int r = 0;
  int64_t d[TPU_GRAPH_MAX_RANK];
  if ((st = bcast_inputs(c, 0, &r, d)) != TPU_OK) return st;
  return set_out(c, 0, x->idtype, r, d);
}

/* Dropout runs in inference mode only: output 0 is input 0, the optional mask is all true (BOOL
 * since opset 10, the data's dtype before). Ratio is ignored then; a training_mode known to be
 * true is refused here, one computed at run time is checked by the kernel. */
static tpu_status_t op_dropout(ctx_t *c) {
  tpu_status_t st;
  if ((st = arity(c, 1, 3, 2)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0), *ratio = in_t(c, 1), *train = in_t(c, 2);
  if ((st = need_dtype(c, x, 1)) != TPU_OK) return st;
  if ((st = attr_float(c, "ratio")) != TPU_OK) return st;
  if (ratio && (st = need_dtype(c, ratio, 1)) != TPU_OK) return st;
  if (train) {
    size_t elems = 0;
    tpu__graph_count(train->irank, train->idims, 1, &elems, NULL);
    if (train->idtype != TPU_GRAPH_BOOL)
      return cfail(c, TPU_EDTYPE, "input '%s' (training_mode) is %s, expected BOOL", train->name,
                   tpu_graph_dtype_name(train->idtype));
    if (train->irank > 1 || elems != 1) {
      char s[SHAPE_STR];
      return cfail(c, TPU_ESHAPE, "input '%s' (training_mode) must be a scalar, got shape %s",
                   train->name, shp(train, s));
    }
    if (train->val && train->vbytes >= 1 && ((const unsigned char *)train->val)[0])
      return cfail(c, TPU_ENOTSUP, "input '%s' (training_mode) is true: training mode is not "
                   "supported, only inference", train->name);
  }
  if ((st = set_out(c, 0, x->idtype, x->irank, x->idims)) != TPU_OK) return st;
  return set_out(c, 1, c->nd->opset < 10 ? x->idtype : TPU_GRAPH_BOOL, x->irank, x->idims);
}

static tpu_status_t op_gemm(ctx_t *c) {
  tpu_status_t st;
  int64_t ta, tb;
  char s1[SHAPE_STR], s2[SHAPE_STR];
  if ((st = arity(c, 2, 3, 1)) != TPU_OK) return st;
  if ((st = attr_int(c, "transA", 0, &ta)) != TPU_OK || (st = attr_int(c, "transB", 0, &tb)) ||
      (st = attr_float(c, "alpha")) || (st = attr_float(c, "beta")))
    return st;
  tpu__gtensor_t *a = in_t(c, 0), *b = in_t(c, 1), *cc = in_t(c, 2);
  if ((st = need_dtype(c, a, 0)) != TPU_OK || (st = same_dtype(c, a, b)) != TPU_OK) return st;
  if (cc && (st = same_dtype(c, a, cc)) != TPU_OK) return st;
  if (a->irank != 2 || b->irank != 2)
    return cfail(c, TPU_ESHAPE, "A '%s' %s and B '%s' %s must both be 2-D", a->name, shp(a, s1),
                 b->name, shp(b, s2));
  int64_t m = ta ? a->idims[1] : a->idims[0], k = ta ? a->idims[0] : a->idims[1];
  int64_t kb = tb ? b->idims[1] : b->idims[0], n = tb ? b->idims[0] : b->idims[1];
  if (k != kb)
    return cfail(c, TPU_ESHAPE, "A '%s' %s%s and B '%s' %s%s disagree on K (%lld vs %lld)",
                 a->name, shp(a, s1), ta ? " (transposed)" : "", b->name, shp(b, s2),
                 tb ? " (transposed)" : "", (long long)k, (long long)kb);
  int64_t d[2] = {m, n};
  if (cc && (st = bcast_to(c, cc, 2, d, "the output")) != TPU_OK) return st;
  return set_out(c, 0, a->idtype, 2, d);
}

/* The output shape of numpy.matmul(a, b) into (*rank, d): MatMul, MatMulInteger and
 * QLinearMatMul share it. */
static tpu_status_t matmul_shape(ctx_t *c, const tpu__gtensor_t *a, const tpu__gtensor_t *b,
                                 int *rank, int64_t *d) {
  char s1[SHAPE_STR], s2[SHAPE_STR];
  if (a->irank < 1 || b->irank < 1)
    return cfail(c, TPU_ESHAPE, "inputs '%s' %s and '%s' %s must have rank >= 1", a->name,
                 shp(a, s1), b->name, shp(b, s2));
  /* 1-D operands: A gains a leading 1, B a trailing 1, both dropped from the result. */
  int64_t ad[TPU_GRAPH_MAX_RANK + 1], bd[TPU_GRAPH_MAX_RANK + 1];
  int ar = a->irank, br = b->irank;
  if (ar == 1) {
    ad[0] = 1;
    ad[1] = a->idims[0];
    ar = 2;
  } else {
    memcpy(ad, a->idims, sizeof(int64_t) * (size_t)ar);
  }
  if (br == 1) {
    bd[0] = b->idims[0];
    bd[1] = 1;
    br = 2;
  } else {
    memcpy(bd, b->idims, sizeof(int64_t) * (size_t)br);
  }
  if (ad[ar - 1] != bd[br - 2])
    return cfail(c, TPU_ESHAPE, "inputs '%s' %s and '%s' %s disagree on K (%lld vs %lld)",
                 a->name, shp(a, s1), b->name, shp(b, s2), (long long)ad[ar - 1],
                 (long long)bd[br - 2]);
  int pa = ar - 2, pb = br - 2, ro = pa > pb ? pa : pb;
  for (int i = 0; i < ro; i++) {
    int64_t x = i - (ro - pa) >= 0 ? ad[i - (ro - pa)] : 1;
    int64_t y = i - (ro - pb) >= 0 ? bd[i - (ro - pb)] : 1;
    if (x != y && x != 1 && y != 1)
      return cfail(c, TPU_ESHAPE, "batch dimensions of '%s' %s and '%s' %s do not broadcast",
                   a->name, shp(a, s1), b->name, shp(b, s2));
    d[i] = x == 1 ? y : x;
  }
  int r = ro;
  if (a->irank > 1) d[r++] = ad[ar - 2];
  if (b->irank > 1) d[r++] = bd[br - 1];
  *rank = r;
  return TPU_OK;
}

static tpu_status_t op_matmul(ctx_t *c) {
  tpu_status_t st;
  if ((st = arity(c, 2, 2, 1)) != TPU_OK) return st;
  tpu__gtensor_t *a = in_t(c, 0), *b = in_t(c, 1);
  if ((st = need_dtype(c, a, 0)) != TPU_OK || (st = same_dtype(c, a, b)) != TPU_OK) return st;
  int r = 0;
  int64_t d[TPU_GRAPH_MAX_RANK + 2];
  if ((st = matmul_shape(c, a, b, &r, d)) != TPU_OK) return st;
  return set_out(c, 0, a->idtype, r, d);
}

/* ---- quantization (QuantizeLinear, DequantizeLinear, MatMulInteger, QLinearMatMul) ---- */

static int is_q8(tpu_graph_dtype_t d) { return d == TPU_GRAPH_INT8 || d == TPU_GRAPH_UINT8; }

static size_t elems_of(const tpu__gtensor_t *t) {
  size_t n = 0;
  tpu__graph_count(t->irank, t->idims, 1, &n, NULL);
  return n;
}

static tpu_status_t need_q8(ctx_t *c, const tpu__gtensor_t *t, const char *what) {
  if (!is_q8(t->idtype))
    return cfail(c, TPU_EDTYPE, "input '%s' (%s) is %s, expected INT8 or UINT8", t->name, what,
                 tpu_graph_dtype_name(t->idtype));
  return TPU_OK;
}

static tpu_status_t need_scale(ctx_t *c, const tpu__gtensor_t *t, const char *what) {
  if (!is_float(t->idtype) || t->idtype == TPU_GRAPH_FP64)
    return cfail(c, TPU_EDTYPE, "input '%s' (%s) is %s, expected FP32, FP16 or BF16", t->name,
                 what, tpu_graph_dtype_name(t->idtype));
  return TPU_OK;
}

static tpu_status_t same_shape(ctx_t *c, const tpu__gtensor_t *a, const tpu__gtensor_t *b) {
  char s1[SHAPE_STR], s2[SHAPE_STR];
  int ok = a->irank == b->irank;
  for (int i = 0; ok && i < a->irank; i++) ok = a->idims[i] == b->idims[i];
  if (!ok)
    return cfail(c, TPU_ESHAPE, "zero point '%s' %s must have the shape of scale '%s' %s",
                 b->name, shp(b, s1), a->name, shp(a, s2));
  return TPU_OK;
}

/* The scale (and zero point) of QuantizeLinear/DequantizeLinear against x: one element (per
 * tensor); from opset 13 a 1-D tensor of x's size along `axis` (per axis); from opset 21, with
 * block_size > 0, x's shape with that axis divided by block_size, rounded up (blocked). */
static tpu_status_t ql_params(ctx_t *c, const tpu__gtensor_t *x, const tpu__gtensor_t *scale,
                              const tpu__gtensor_t *zp) {
  tpu_status_t st;
  char s1[SHAPE_STR], s2[SHAPE_STR];
  int64_t axis = 1, block = 0;
  int ax = 0;
  if (zp && (st = same_shape(c, scale, zp)) != TPU_OK) return st;
  if (c->nd->opset >= 13 && (st = attr_int(c, "axis", 1, &axis)) != TPU_OK) return st;
  if (c->nd->opset >= 21 && (st = attr_int(c, "block_size", 0, &block)) != TPU_OK) return st;
  if (block < 0) return cfail(c, TPU_EINVAL, "attribute 'block_size' is %lld, expected >= 0",
                              (long long)block);
  if (block == 0 && scale->irank <= 1 && elems_of(scale) == 1) return TPU_OK; /* per tensor */
  if (c->nd->opset < 13)
    return cfail(c, TPU_ESHAPE, "scale '%s' %s must be a scalar before opset 13", scale->name,
                 shp(scale, s1));
  if (x->irank == 0)
    return cfail(c, TPU_ESHAPE, "scale '%s' %s is per axis but input '%s' is a scalar",
                 scale->name, shp(scale, s1), x->name);
  if ((st = norm_axis(c, "axis", axis, x->irank, 0, &ax)) != TPU_OK) return st;
  if (block == 0) {
    if (scale->irank != 1 || scale->idims[0] != x->idims[ax])
      return cfail(c, TPU_ESHAPE, "scale '%s' %s must be a scalar or 1-D of %lld elements (axis "
                   "%d of input '%s' %s)", scale->name, shp(scale, s1), (long long)x->idims[ax],
                   ax, x->name, shp(x, s2));
    return TPU_OK;
  }
  int ok = scale->irank == x->irank;
  for (int i = 0; ok && i < x->irank; i++)
    ok = scale->idims[i] == (i == ax ? (x->idims[i] + block - 1) / block : x->idims[i]);
  if (!ok)
    return cfail(c, TPU_ESHAPE, "scale '%s' %s does not fit input '%s' %s in blocks of %lld "
                 "along axis %d", scale->name, shp(scale, s1), x->name, shp(x, s2),
                 (long long)block, ax);
  return TPU_OK;
}

static tpu_status_t op_quantize(ctx_t *c) {
  tpu_status_t st;
  int64_t odt = 0;
  if ((st = arity(c, 2, 3, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0), *scale = in_t(c, 1), *zp = in_t(c, 2);
  if (x->idtype != TPU_GRAPH_INT32 && (!is_float(x->idtype) || x->idtype == TPU_GRAPH_FP64))
    return cfail(c, TPU_EDTYPE, "input '%s' is %s, expected FP32, FP16, BF16 or INT32", x->name,
                 tpu_graph_dtype_name(x->idtype));
  if ((st = need_scale(c, scale, "y_scale")) != TPU_OK) return st;
  if (zp && (st = need_q8(c, zp, "y_zero_point")) != TPU_OK) return st;
  if (c->nd->opset >= 21 && (st = attr_int(c, "output_dtype", 0, &odt)) != TPU_OK) return st;
  tpu_graph_dtype_t dt = zp ? zp->idtype : TPU_GRAPH_UINT8;
  if (odt != 0) {
    tpu_graph_dtype_t want = odt < 0 || odt > 1000 ? TPU_GRAPH_UNDEFINED
                                                   : tpu_graph_dtype_from_onnx((int)odt);
    if (!is_q8(want))
      return cfail(c, TPU_ENOTSUP, "attribute 'output_dtype' is ONNX type %lld; tpud quantizes "
                   "to INT8 or UINT8 only", (long long)odt);
    if (zp && want != zp->idtype)
      return cfail(c, TPU_EDTYPE, "attribute 'output_dtype' says %s but zero point '%s' is %s",
                   tpu_graph_dtype_name(want), zp->name, tpu_graph_dtype_name(zp->idtype));
    dt = want;
  }
  if ((st = ql_params(c, x, scale, zp)) != TPU_OK) return st;
  return set_out(c, 0, dt, x->irank, x->idims);
}

static tpu_status_t op_dequantize(ctx_t *c) {
  tpu_status_t st;
  if ((st = arity(c, 2, 3, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0), *scale = in_t(c, 1), *zp = in_t(c, 2);
  if (!is_q8(x->idtype) && x->idtype != TPU_GRAPH_INT32)
    return cfail(c, TPU_EDTYPE, "input '%s' is %s, expected INT8, UINT8 or INT32", x->name,
                 tpu_graph_dtype_name(x->idtype));
  if ((st = need_scale(c, scale, "x_scale")) != TPU_OK) return st;
  if (zp && (st = same_dtype(c, x, zp)) != TPU_OK) return st;
  if ((st = ql_params(c, x, scale, zp)) != TPU_OK) return st;
  return set_out(c, 0, scale->idtype, x->irank, x->idims); /* FP32 before opset 19 */
}

/* A scale or zero point of a matmul operand m (A when row, else B): one element (per tensor),
 * 1-D of M (per row of A) or N (per column of B) elements, or m's shape with K replaced by 1
 * ([..., M, 1] for A, [..., 1, N] for B: per row or column of each batch matrix). */
static tpu_status_t mm_param(ctx_t *c, const tpu__gtensor_t *t, const tpu__gtensor_t *m,
                             int row, const char *what) {
  char s1[SHAPE_STR], s2[SHAPE_STR];
  if (elems_of(t) == 1) return TPU_OK;
  int r = m->irank;
  int64_t len = r < 2 ? 1 : row ? m->idims[r - 2] : m->idims[r - 1];
  if (t->irank == 1 && t->idims[0] == len) return TPU_OK;
  int ok = r >= 2 && t->irank == r;
  for (int i = 0; ok && i < r; i++) ok = t->idims[i] == (i == r - (row ? 1 : 2) ? 1 : m->idims[i]);
  if (!ok)
    return cfail(c, TPU_ESHAPE, "%s '%s' %s must be a scalar, 1-D of %lld elements or %s "
                 "shaped like '%s' %s with K replaced by 1", what, t->name, shp(t, s1),
                 (long long)len, row ? "[..., M, 1]" : "[..., 1, N]", m->name, shp(m, s2));
  return TPU_OK;
}

static tpu_status_t op_matmul_integer(ctx_t *c) {
  tpu_status_t st;
  if ((st = arity(c, 2, 4, 1)) != TPU_OK) return st;
  tpu__gtensor_t *a = in_t(c, 0), *b = in_t(c, 1), *za = in_t(c, 2), *zb = in_t(c, 3);
  if ((st = need_q8(c, a, "A")) != TPU_OK || (st = need_q8(c, b, "B")) != TPU_OK) return st;
  if (za && ((st = same_dtype(c, a, za)) != TPU_OK || (st = mm_param(c, za, a, 1,
                                                                     "a_zero_point"))))
    return st;
  if (zb && ((st = same_dtype(c, b, zb)) != TPU_OK || (st = mm_param(c, zb, b, 0,
                                                                     "b_zero_point"))))
    return st;
  int r = 0;
  int64_t d[TPU_GRAPH_MAX_RANK + 2];
  if ((st = matmul_shape(c, a, b, &r, d)) != TPU_OK) return st;
  return set_out(c, 0, TPU_GRAPH_INT32, r, d);
}

static tpu_status_t op_qlinear_matmul(ctx_t *c) {
  tpu_status_t st;
  char s1[SHAPE_STR];
  if ((st = arity(c, 8, 8, 1)) != TPU_OK) return st;
  tpu__gtensor_t *a = in_t(c, 0), *sa = in_t(c, 1), *za = in_t(c, 2), *b = in_t(c, 3);
  tpu__gtensor_t *sb = in_t(c, 4), *zb = in_t(c, 5), *sy = in_t(c, 6), *zy = in_t(c, 7);
  if ((st = need_q8(c, a, "a")) != TPU_OK || (st = need_q8(c, b, "b")) != TPU_OK ||
      (st = need_q8(c, zy, "y_zero_point")) != TPU_OK)
    return st;
  if ((st = same_dtype(c, a, za)) != TPU_OK || (st = same_dtype(c, b, zb)) != TPU_OK) return st;
  if ((st = need_scale(c, sa, "a_scale")) != TPU_OK ||
      (st = need_scale(c, sb, "b_scale")) != TPU_OK ||
      (st = need_scale(c, sy, "y_scale")) != TPU_OK)
    return st;
  if ((st = same_shape(c, sa, za)) != TPU_OK || (st = same_shape(c, sb, zb)) != TPU_OK ||
      (st = same_shape(c, sy, zy)) != TPU_OK)
    return st;
  if ((st = mm_param(c, sa, a, 1, "a_scale")) != TPU_OK ||
      (st = mm_param(c, sb, b, 0, "b_scale")) != TPU_OK)
    return st;
  if (sy->irank > 1 || elems_of(sy) != 1)
    return cfail(c, TPU_ESHAPE, "y_scale '%s' %s must be a scalar", sy->name, shp(sy, s1));
  int r = 0;
  int64_t d[TPU_GRAPH_MAX_RANK + 2];
  if ((st = matmul_shape(c, a, b, &r, d)) != TPU_OK) return st;
  return set_out(c, 0, zy->idtype, r, d);
}

/* DynamicQuantizeLinear: x (FP32) to UINT8 with a scale and zero point computed from its range;
 * the two are scalars. */
static tpu_status_t op_dynamic_quantize(ctx_t *c) {
  tpu_status_t st;
  if ((st = arity(c, 1, 1, 3)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if (x->idtype != TPU_GRAPH_FP32)
    return cfail(c, TPU_EDTYPE, "input '%s' is %s, expected FP32", x->name,
                 tpu_graph_dtype_name(x->idtype));
  if ((st = set_out(c, 0, TPU_GRAPH_UINT8, x->irank, x->idims)) != TPU_OK) return st;
  if ((st = set_out(c, 1, TPU_GRAPH_FP32, 0, NULL)) != TPU_OK) return st;
  return set_out(c, 2, TPU_GRAPH_UINT8, 0, NULL);
}

static tpu_status_t op_softmax(ctx_t *c) {
  tpu_status_t st;
  int64_t axis;
  int ax = 0;
  if ((st = arity(c, 1, 1, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if ((st = need_dtype(c, x, 1)) != TPU_OK) return st;
  /* Before opset 13 the input is coerced to 2-D at `axis` (default 1) and the result reshaped
   * back; from 13 the op runs along one axis (default -1). Either way the shape is the input's. */
  if ((st = attr_int(c, "axis", c->nd->opset < 13 ? 1 : -1, &axis)) != TPU_OK) return st;
  if (x->irank == 0) return cfail(c, TPU_ESHAPE, "input '%s' is a scalar", x->name);
  if ((st = norm_axis(c, "axis", axis, x->irank, 0, &ax)) != TPU_OK) return st;
  return set_out(c, 0, x->idtype, x->irank, x->idims);
}

static tpu_status_t op_layernorm(ctx_t *c) {
  tpu_status_t st;
  int64_t axis;
  int ax = 0;
  if ((st = arity(c, 2, 3, 3)) != TPU_OK) return st;
  if ((st = attr_float(c, "epsilon")) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if ((st = need_dtype(c, x, 1)) != TPU_OK) return st;
  if ((st = attr_int(c, "axis", -1, &axis)) != TPU_OK) return st;
  if ((st = norm_axis(c, "axis", axis, x->irank, 0, &ax)) != TPU_OK) return st;
  for (size_t i = 1; i < 3; i++) {
    tpu__gtensor_t *p = in_t(c, i);
    if (!p) continue;
    if ((st = same_dtype(c, x, p)) != TPU_OK) return st;
    if ((st = bcast_to(c, p, x->irank - ax, x->idims + ax, "the normalized dimensions"))
        != TPU_OK)
      return st;
  }
  if ((st = set_out(c, 0, x->idtype, x->irank, x->idims)) != TPU_OK) return st;
  int64_t d[TPU_GRAPH_MAX_RANK];
  for (int i = 0; i < x->irank; i++) d[i] = i < ax ? x->idims[i] : 1;
  int64_t stash;
  if ((st = attr_int(c, "stash_type", 1, &stash)) != TPU_OK) return st;
  tpu_graph_dtype_t sdt =
      stash > 1000 ? TPU_GRAPH_UNDEFINED : tpu_graph_dtype_from_onnx((int)stash);
  if (!is_float(sdt)) return cfail(c, TPU_EDTYPE, "attribute 'stash_type' %lld is not a float type",
                                   (long long)stash);
  if ((st = set_out(c, 1, sdt, x->irank, d)) != TPU_OK) return st;
  return set_out(c, 2, sdt, x->irank, d);
}

static tpu_status_t op_batchnorm(ctx_t *c) {
  tpu_status_t st;
  int64_t training;
  char s1[SHAPE_STR];
  if ((st = arity(c, 5, 5, 1)) != TPU_OK) return st;
  if ((st = attr_int(c, "training_mode", 0, &training)) != TPU_OK) return st;
  if ((st = attr_float(c, "epsilon")) != TPU_OK || (st = attr_float(c, "momentum")) != TPU_OK)
    return st;
  if (training) return cfail(c, TPU_ENOTSUP, "training_mode=1 is not supported (inference only)");
  int64_t spatial;
  if ((st = attr_int(c, "spatial", 1, &spatial)) != TPU_OK) return st;
  if (c->nd->opset < 9 && !spatial)
    return cfail(c, TPU_ENOTSUP, "spatial=0 (per-position statistics) is not supported");
  tpu__gtensor_t *x = in_t(c, 0);
  if ((st = need_dtype(c, x, 1)) != TPU_OK) return st;
  if (x->irank < 2)
    return cfail(c, TPU_ESHAPE, "input '%s' %s needs rank >= 2 ([N, C, ...])", x->name, shp(x, s1));
  static const char *const what[] = {"", "scale", "B", "mean", "var"};
  for (size_t i = 1; i < 5; i++) {
    tpu__gtensor_t *p = in_t(c, i);
    if (!is_float(p->idtype))
      return cfail(c, TPU_EDTYPE, "input '%s' (%s) is %s, expected a float type", p->name,
                   what[i], tpu_graph_dtype_name(p->idtype));
    if (p->irank != 1 || p->idims[0] != x->idims[1])
      return cfail(c, TPU_ESHAPE, "input '%s' (%s) has shape %s, expected [%lld] (the channels "
                   "of '%s')", p->name, what[i], shp(p, s1), (long long)x->idims[1], x->name);
  }
  return set_out(c, 0, x->idtype, x->irank, x->idims);
}

static tpu_status_t op_reduce(ctx_t *c) {
  tpu_status_t st;
  const char *op = c->nd->op;
  int from_input = (strcmp(op, "ReduceSum") == 0 && c->nd->opset >= 13) || c->nd->opset >= 18;
  if ((st = arity(c, 1, from_input ? 2 : 1, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if ((st = need_dtype(c, x, 0)) != TPU_OK) return st;
  int64_t keep, noop, axes[TPU_GRAPH_MAX_RANK];
  size_t na = 0;
  int present = 0;
  if ((st = attr_int(c, "keepdims", 1, &keep)) != TPU_OK) return st;
  if ((st = attr_int(c, "noop_with_empty_axes", 0, &noop)) != TPU_OK) return st;
  if (from_input) {
    if (in_t(c, 1) &&
        (st = const_ints(c, 1, "axes", axes, TPU_GRAPH_MAX_RANK, &na)) != TPU_OK)
      return st;
  } else if ((st = attr_ints(c, "axes", axes, TPU_GRAPH_MAX_RANK, &na, &present)) != TPU_OK) {
    return st;
  }
  if ((st = norm_axes(c, axes, na, x->irank)) != TPU_OK) return st;
  if (na == 0 && noop && from_input) return set_out(c, 0, x->idtype, x->irank, x->idims);
  int64_t d[TPU_GRAPH_MAX_RANK];
  int r = 0;
  for (int i = 0; i < x->irank; i++) {
    int reduced = na == 0;
    for (size_t k = 0; k < na; k++) reduced |= axes[k] == i;
    if (!reduced) d[r++] = x->idims[i];
    else if (keep) d[r++] = 1;
  }
  return set_out(c, 0, x->idtype, r, d);
}

static tpu_status_t op_argmax(ctx_t *c) {
  tpu_status_t st;
  int64_t axis, keep;
  int ax = 0;
  if ((st = arity(c, 1, 1, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if ((st = need_dtype(c, x, 0)) != TPU_OK) return st;
  if ((st = attr_int(c, "axis", 0, &axis)) != TPU_OK || (st = attr_int(c, "keepdims", 1, &keep)))
    return st;
  if ((st = norm_axis(c, "axis", axis, x->irank, 0, &ax)) != TPU_OK) return st;
  int64_t d[TPU_GRAPH_MAX_RANK];
  int r = 0;
  for (int i = 0; i < x->irank; i++) {
    if (i != ax) d[r++] = x->idims[i];
    else if (keep) d[r++] = 1;
  }
  return set_out(c, 0, TPU_GRAPH_INT64, r, d);
}

/* Reads element k of an INT64 value. */
static int64_t val64(const tpu__gtensor_t *t, size_t k) {
  int64_t v;
  memcpy(&v, (const char *)t->val + 8 * k, 8);
  return v;
}

static tpu_status_t op_gather(ctx_t *c) {
  tpu_status_t st;
  int64_t axis;
  int ax = 0;
  char s1[SHAPE_STR];
  if ((st = arity(c, 2, 2, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0), *idx = in_t(c, 1);
  if (idx->idtype != TPU_GRAPH_INT64 && idx->idtype != TPU_GRAPH_INT32)
    return cfail(c, TPU_EDTYPE, "indices '%s' are %s, expected INT64 or INT32", idx->name,
                 tpu_graph_dtype_name(idx->idtype));
  if ((st = attr_int(c, "axis", 0, &axis)) != TPU_OK) return st;
  if (x->irank == 0) return cfail(c, TPU_ESHAPE, "data '%s' is a scalar", x->name);
  if ((st = norm_axis(c, "axis", axis, x->irank, 0, &ax)) != TPU_OK) return st;
  int64_t d[2 * TPU_GRAPH_MAX_RANK];
  int r = 0;
  for (int i = 0; i < ax; i++) d[r++] = x->idims[i];
  for (int i = 0; i < idx->irank; i++) d[r++] = idx->idims[i];
  for (int i = ax + 1; i < x->irank; i++) d[r++] = x->idims[i];
  if ((st = set_out(c, 0, x->idtype, r, d)) != TPU_OK) return st;
  /* Fold a gather from a 1-D INT64 value (a shape) with known indices. */
  if (x->val && idx->val && x->idtype == TPU_GRAPH_INT64 && x->irank == 1 && idx->irank <= 1) {
    int64_t ids[TPU_GRAPH_MAX_RANK], out[TPU_GRAPH_MAX_RANK];
    size_t n;
    if (idx->vbytes / tpu_graph_dtype_size(idx->idtype) > TPU_GRAPH_MAX_RANK) return TPU_OK;
    if ((st = const_ints(c, 1, "indices", ids, TPU_GRAPH_MAX_RANK, &n)) != TPU_OK) return st;
    for (size_t k = 0; k < n; k++) {
      int64_t v = ids[k] < 0 ? ids[k] + x->idims[0] : ids[k];
      if (v < 0 || v >= x->idims[0])
        return cfail(c, TPU_ERANGE, "index %lld is out of range for '%s' %s", (long long)ids[k],
                     x->name, shp(x, s1));
      out[k] = val64(x, (size_t)v);
    }
    return set_val(c, 0, out, n * 8);
  }
  return TPU_OK;
}

static tpu_status_t op_concat(ctx_t *c) {
  tpu_status_t st;
  int64_t axis = 0;
  int ax = 0;
  char s1[SHAPE_STR], s2[SHAPE_STR];
  if ((st = arity(c, 1, TPU__GRAPH_MAX_IO, 1)) != TPU_OK) return st;
  const tpu_graph_attr_t *a = tpu_graph_attr(c->g, c->n, "axis");
  if (!a) return cfail(c, TPU_EINVAL, "attribute 'axis' is required");
  if ((st = attr_int(c, "axis", 0, &axis)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if (x->irank == 0) return cfail(c, TPU_ESHAPE, "input '%s' is a scalar", x->name);
  if ((st = norm_axis(c, "axis", axis, x->irank, 0, &ax)) != TPU_OK) return st;
  int64_t d[TPU_GRAPH_MAX_RANK];
  memcpy(d, x->idims, sizeof(int64_t) * (size_t)x->irank);
  int fold = x->idtype == TPU_GRAPH_INT64 && x->irank == 1;
  for (size_t i = 1; i < c->nd->nin; i++) {
    tpu__gtensor_t *y = in_t(c, i);
    if (!y) return cfail(c, TPU_EINVAL, "input %zu is absent", i);
    if ((st = same_dtype(c, x, y)) != TPU_OK) return st;
    int ok = y->irank == x->irank;
    for (int k = 0; ok && k < x->irank; k++) ok = k == ax || y->idims[k] == x->idims[k];
    if (!ok)
      return cfail(c, TPU_ESHAPE, "inputs '%s' %s and '%s' %s differ outside axis %d", x->name,
                   shp(x, s1), y->name, shp(y, s2), ax);
    if (__builtin_add_overflow(d[ax], y->idims[ax], &d[ax]))
      return cfail(c, TPU_EOVERFLOW, "the concatenated dimension overflows");
  }
  if ((st = set_out(c, 0, x->idtype, x->irank, d)) != TPU_OK) return st;
  for (size_t i = 0; i < c->nd->nin; i++) fold = fold && in_t(c, i)->val;
  if (fold && d[0] <= 64) { /* a shape being assembled */
    int64_t out[64];
    size_t at = 0;
    for (size_t i = 0; i < c->nd->nin; i++) {
      tpu__gtensor_t *y = in_t(c, i);
      for (int64_t k = 0; k < y->idims[0]; k++) out[at++] = val64(y, (size_t)k);
    }
    return set_val(c, 0, out, at * 8);
  }
  return TPU_OK;
}

/* Output 0 has the input's elements under a new shape: keep a known value. */
static tpu_status_t keep_val(ctx_t *c, const tpu__gtensor_t *x) {
  tpu__gtensor_t *o = out_t(c, 0);
  if (x->val && o) {
    o->val = x->val; /* a view: the input's value lives as long as this inference */
    o->vbytes = x->vbytes;
  }
  return TPU_OK;
}

static tpu_status_t op_flatten(ctx_t *c) {
  tpu_status_t st;
  int64_t axis;
  int ax = 0;
  if ((st = arity(c, 1, 1, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if ((st = attr_int(c, "axis", 1, &axis)) != TPU_OK) return st;
  if ((st = norm_axis(c, "axis", axis, x->irank, 1, &ax)) != TPU_OK) return st;
  size_t lo, hi;
  if (tpu__graph_count(ax, x->idims, 1, &lo, NULL) != TPU_OK ||
      tpu__graph_count(x->irank - ax, x->idims + ax, 1, &hi, NULL) != TPU_OK)
    return cfail(c, TPU_EOVERFLOW, "the flattened dimensions overflow");
  int64_t d[2] = {(int64_t)lo, (int64_t)hi};
  if ((st = set_out(c, 0, x->idtype, 2, d)) != TPU_OK) return st;
  return keep_val(c, x);
}

static tpu_status_t op_reshape(ctx_t *c) {
  tpu_status_t st;
  char s1[SHAPE_STR], s2[SHAPE_STR];
  int64_t shape[TPU_GRAPH_MAX_RANK + 1], allowzero;
  size_t ns;
  int present;
  if ((st = arity(c, c->nd->opset < 5 ? 1 : 2, c->nd->opset < 5 ? 1 : 2, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if (c->nd->opset < 5) {
    if ((st = attr_ints(c, "shape", shape, TPU_GRAPH_MAX_RANK, &ns, &present)) != TPU_OK) return st;
    if (!present) return cfail(c, TPU_EINVAL, "attribute 'shape' is required before opset 5");
  } else if ((st = const_ints(c, 1, "shape", shape, TPU_GRAPH_MAX_RANK, &ns)) != TPU_OK) {
    return st;
  }
  if ((st = attr_int(c, "allowzero", 0, &allowzero)) != TPU_OK) return st;
  size_t total, known = 1;
  tpu__graph_count(x->irank, x->idims, 1, &total, NULL);
  int minus = -1;
  int64_t d[TPU_GRAPH_MAX_RANK];
  char req[SHAPE_STR];
  tpu__graph_shape_str((int)ns, shape, req, sizeof req);
  for (size_t i = 0; i < ns; i++) {
    int64_t v = shape[i];
    if (v == 0 && !allowzero) {
      if ((int)i >= x->irank)
        return cfail(c, TPU_ESHAPE, "shape %s copies dimension %zu (0) but input '%s' %s has "
                     "rank %d", req, i, x->name, shp(x, s1), x->irank);
      v = x->idims[i];
    } else if (v == -1) {
      if (minus >= 0) return cfail(c, TPU_ESHAPE, "shape %s has more than one -1", req);
      minus = (int)i;
      d[i] = 1;
      continue;
    } else if (v < 0) {
      return cfail(c, TPU_ESHAPE, "shape %s has dimension %lld", req, (long long)v);
    }
    d[i] = v;
    if (__builtin_mul_overflow(known, (size_t)v, &known))
      return cfail(c, TPU_EOVERFLOW, "shape %s overflows", req);
  }
  if (minus >= 0) {
    if (known == 0 || total % known)
      return cfail(c, TPU_ESHAPE, "cannot reshape '%s' %s (%zu elements) to %s", x->name,
                   shp(x, s1), total, req);
    d[minus] = (int64_t)(total / known);
  } else if (known != total) {
    return cfail(c, TPU_ESHAPE, "cannot reshape '%s' %s (%zu elements) to %s (%zu elements)",
                 x->name, shp(x, s1), total, tpu__graph_shape_str((int)ns, d, s2, sizeof s2),
                 known);
  }
  if ((st = set_out(c, 0, x->idtype, (int)ns, d)) != TPU_OK) return st;
  return keep_val(c, x);
}

static tpu_status_t op_squeeze(ctx_t *c, int unsqueeze) {
  tpu_status_t st;
  int64_t axes[TPU_GRAPH_MAX_RANK];
  size_t na = 0;
  int present = 0, from_input = c->nd->opset >= 13;
  char s1[SHAPE_STR];
  if ((st = arity(c, unsqueeze && from_input ? 2 : 1, from_input ? 2 : 1, 1)) != TPU_OK)
    return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if (from_input) {
    if (in_t(c, 1) && (st = const_ints(c, 1, "axes", axes, TPU_GRAPH_MAX_RANK, &na)) != TPU_OK)
      return st;
    present = in_t(c, 1) != NULL;
  } else if ((st = attr_ints(c, "axes", axes, TPU_GRAPH_MAX_RANK, &na, &present)) != TPU_OK) {
    return st;
  }
  int64_t d[TPU_GRAPH_MAX_RANK];
  int r = 0;
  if (unsqueeze) {
    if (!present) return cfail(c, TPU_EINVAL, "axes are required");
    int ro = x->irank + (int)na;
    if (ro > TPU_GRAPH_MAX_RANK)
      return cfail(c, TPU_EOVERFLOW, "output rank %d exceeds the limit of %d", ro,
                   TPU_GRAPH_MAX_RANK);
    if ((st = norm_axes(c, axes, na, ro)) != TPU_OK) return st;
    int from = 0;
    for (int i = 0; i < ro; i++) {
      int ins = 0;
      for (size_t k = 0; k < na; k++) ins |= axes[k] == i;
      d[r++] = ins ? 1 : x->idims[from++];
    }
  } else {
    if ((st = norm_axes(c, axes, na, x->irank)) != TPU_OK) return st;
    for (size_t k = 0; k < na; k++)
      if (x->idims[axes[k]] != 1)
        return cfail(c, TPU_ESHAPE, "cannot squeeze axis %lld of '%s' %s: it is not 1",
                     (long long)axes[k], x->name, shp(x, s1));
    for (int i = 0; i < x->irank; i++) {
      int drop = na == 0 ? x->idims[i] == 1 : 0;
      for (size_t k = 0; k < na; k++) drop |= axes[k] == i;
      if (!drop) d[r++] = x->idims[i];
    }
  }
  if ((st = set_out(c, 0, x->idtype, r, d)) != TPU_OK) return st;
  return keep_val(c, x);
}

static tpu_status_t op_squeeze_only(ctx_t *c) { return op_squeeze(c, 0); }
static tpu_status_t op_unsqueeze(ctx_t *c) { return op_squeeze(c, 1); }

static tpu_status_t op_transpose(ctx_t *c) {
  tpu_status_t st;
  int64_t perm[TPU_GRAPH_MAX_RANK];
  size_t np;
  int present;
  if ((st = arity(c, 1, 1, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if ((st = attr_ints(c, "perm", perm, TPU_GRAPH_MAX_RANK, &np, &present)) != TPU_OK) return st;
  if (!present) {
    np = (size_t)x->irank;
    for (int i = 0; i < x->irank; i++) perm[i] = x->irank - 1 - i;
  }
  if (np != (size_t)x->irank)
    return cfail(c, TPU_ESHAPE, "perm has %zu entries for input '%s' of rank %d", np, x->name,
                 x->irank);
  int seen[TPU_GRAPH_MAX_RANK] = {0};
  int64_t d[TPU_GRAPH_MAX_RANK];
  for (size_t i = 0; i < np; i++) {
    if (perm[i] < 0 || perm[i] >= x->irank || seen[perm[i]]++)
      return cfail(c, TPU_EINVAL, "perm is not a permutation of 0..%d", x->irank - 1);
    d[i] = x->idims[perm[i]];
  }
  return set_out(c, 0, x->idtype, x->irank, d);
}

static tpu_status_t op_shape(ctx_t *c) {
  tpu_status_t st;
  int64_t start, end;
  if ((st = arity(c, 1, 1, 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  int r = x->irank;
  if ((st = attr_int(c, "start", 0, &start)) != TPU_OK || (st = attr_int(c, "end", r, &end)))
    return st;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  int64_t n = end > start ? end - start : 0;
  if ((st = set_out(c, 0, TPU_GRAPH_INT64, 1, &n)) != TPU_OK) return st;
  return set_val(c, 0, x->idims + start, (size_t)n * 8);
}

static tpu_status_t op_constant(ctx_t *c) {
  tpu_status_t st;
  if ((st = arity(c, 0, 0, 1)) != TPU_OK) return st;
  const tpu__gnode_t *nd = c->nd;
  if (nd->nattrs != 1)
    return cfail(c, TPU_EINVAL, "needs exactly one value attribute, has %zu attributes",
                 nd->nattrs);
  const tpu_graph_attr_t *a = &nd->attrs[0];
  int64_t one = 1, n = (int64_t)a->n;
  if (strcmp(a->name, "value") == 0 && a->type == TPU_GRAPH_ATTR_TENSOR) {
    if ((st = set_out(c, 0, a->t_dtype, a->t_rank, a->t_dims)) != TPU_OK) return st;
    return set_val(c, 0, a->t_data, a->t_bytes);
  }
  if (strcmp(a->name, "value_float") == 0 && a->type == TPU_GRAPH_ATTR_FLOAT) {
    if ((st = set_out(c, 0, TPU_GRAPH_FP32, 0, &one)) != TPU_OK) return st;
    return set_val(c, 0, &a->f, 4);
  }
  if (strcmp(a->name, "value_floats") == 0 && a->type == TPU_GRAPH_ATTR_FLOATS) {
    if ((st = set_out(c, 0, TPU_GRAPH_FP32, 1, &n)) != TPU_OK) return st;
    return set_val(c, 0, a->floats, a->n * 4);
  }
  if (strcmp(a->name, "value_int") == 0 && a->type == TPU_GRAPH_ATTR_INT) {
    if ((st = set_out(c, 0, TPU_GRAPH_INT64, 0, &one)) != TPU_OK) return st;
    return set_val(c, 0, &a->i, 8);
  }
  if (strcmp(a->name, "value_ints") == 0 && a->type == TPU_GRAPH_ATTR_INTS) {
    if ((st = set_out(c, 0, TPU_GRAPH_INT64, 1, &n)) != TPU_OK) return st;
    return set_val(c, 0, a->ints, a->n * 8);
  }
  return cfail(c, TPU_ENOTSUP, "attribute '%s' is not a supported constant value (value, "
               "value_float(s), value_int(s))", a->name);
}

/* ai.onnx.ml TreeEnsemble (ops_tree.c validates the trees): X FP32 [N, F] to Y FP32
 * [N, n_targets], and the optional outputs: 1 the scores before post_transform, alike; tpud's
 * 2 the leaf each tree reaches, FP32 [N, trees]; 3 the per-feature contributions and the bias,
 * FP32 [N, F + 1] (one target) or [N, n_targets, F + 1], which need tpud_node_covers. */
static tpu_status_t op_tree_ensemble(ctx_t *c) {
  tpu_status_t st;
  int64_t nt;
  char s1[SHAPE_STR];
  if ((st = arity(c, 1, 1, 4)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if (x->idtype != TPU_GRAPH_FP32)
    return cfail(c, TPU_EDTYPE, "input '%s' is %s, expected FP32", x->name,
                 tpu_graph_dtype_name(x->idtype));
  if (x->irank != 2)
    return cfail(c, TPU_ESHAPE, "input '%s' has shape %s, expected [N, features]", x->name,
                 shp(x, s1));
  if ((st = attr_int(c, "n_targets", 0, &nt)) != TPU_OK) return st;
  if (nt < 1 || nt > (int64_t)1 << 31)
    return cfail(c, TPU_EINVAL, "attribute 'n_targets' is %lld, expected a positive count",
                 (long long)nt);
  int64_t d[2] = {x->idims[0], nt};
  if ((st = set_out(c, 0, TPU_GRAPH_FP32, 2, d)) != TPU_OK) return st;
  if ((st = set_out(c, 1, TPU_GRAPH_FP32, 2, d)) != TPU_OK) return st;
  const tpu_graph_attr_t *roots = tpu_graph_attr(c->g, c->n, "tree_roots");
  int64_t dl[2] = {x->idims[0], roots && roots->type == TPU_GRAPH_ATTR_INTS ? (int64_t)roots->n : 0};
  if ((st = set_out(c, 2, TPU_GRAPH_FP32, 2, dl)) != TPU_OK) return st;
  if (c->nd->nout > 3 && c->nd->out[3] >= 0 && !tpu_graph_attr(c->g, c->n, "tpud_node_covers"))
    return cfail(c, TPU_EINVAL, "output 3 (contributions) needs the trees' covers "
                 "(tpud_node_covers, tpud_leaf_covers)");
  int64_t dc[3] = {x->idims[0], nt, x->idims[1] + 1};
  if (nt == 1) {
    dc[1] = dc[2];
    return set_out(c, 3, TPU_GRAPH_FP32, 2, dc);
  }
  return set_out(c, 3, TPU_GRAPH_FP32, 3, dc);
}

/* ai.onnx.ml TreeEnsembleRegressor (v1, v3): X FP32 [N, F] to Y FP32 [N, n_targets]
 * (n_targets defaults to 1). TreeEnsembleClassifier: Y INT64 [N] (the labels, which must be
 * classlabels_int64s: the graph holds no STRING tensors) and Z FP32 [N, classes]. */
static tpu_status_t op_tree_v3(ctx_t *c) {
  tpu_status_t st;
  char s1[SHAPE_STR];
  int clf = strcmp(c->nd->op, "TreeEnsembleClassifier") == 0;
  if ((st = arity(c, 1, 1, clf ? 2 : 1)) != TPU_OK) return st;
  tpu__gtensor_t *x = in_t(c, 0);
  if (x->idtype != TPU_GRAPH_FP32)
    return cfail(c, TPU_EDTYPE, "input '%s' is %s, expected FP32 (tpud's tree ensembles take "
                 "float features; cast DOUBLE or integer inputs before the node)", x->name,
                 tpu_graph_dtype_name(x->idtype));
  if (x->irank != 2)
    return cfail(c, TPU_ESHAPE, "input '%s' has shape %s, expected [N, features]", x->name,
                 shp(x, s1));
  if (!clf) {
    int64_t nt;
    if ((st = attr_int(c, "n_targets", 1, &nt)) != TPU_OK) return st;
    if (nt < 1 || nt > (int64_t)1 << 31)
      return cfail(c, TPU_EINVAL, "attribute 'n_targets' is %lld, expected a positive count",
                   (long long)nt);
    int64_t d[2] = {x->idims[0], nt};
    return set_out(c, 0, TPU_GRAPH_FP32, 2, d);
  }
  if (tpu_graph_attr(c->g, c->n, "classlabels_strings"))
    return cfail(c, TPU_ENOTSUP, "string class labels (classlabels_strings) are not supported: "
                 "tpud's outputs are numeric tensors; export the classes as integers "
                 "(classlabels_int64s)");
  const tpu_graph_attr_t *l = tpu_graph_attr(c->g, c->n, "classlabels_int64s");
  if (!l || l->type != TPU_GRAPH_ATTR_INTS || l->n < 2)
    return cfail(c, TPU_EINVAL, "attribute 'classlabels_int64s' must list at least two class "
                 "labels");
  int64_t dy = x->idims[0], dz[2] = {x->idims[0], (int64_t)l->n};
  if ((st = set_out(c, 0, TPU_GRAPH_INT64, 1, &dy)) != TPU_OK) return st;
  return set_out(c, 1, TPU_GRAPH_FP32, 2, dz);
}

typedef struct {
  const char *op;
  tpu_status_t (*rule)(ctx_t *);
} op_rule_t;

static const op_rule_t rules[] = {
    {"Gemm", op_gemm},           {"MatMul", op_matmul},
    {"Add", op_binary},          {"Sub", op_binary},
    {"Mul", op_binary},          {"Div", op_binary},
    {"Pow", op_binary},          {"Max", op_binary},
    {"Min", op_binary},          {"Where", op_where},
    {"Relu", op_unary},          {"LeakyRelu", op_unary},
    {"Sigmoid", op_unary},       {"Tanh", op_unary},
    {"Erf", op_unary},           {"Gelu", op_unary},
    {"Clip", op_unary},          {"Sqrt", op_unary},
    {"Reciprocal", op_unary},    {"Neg", op_unary},
    {"Abs", op_unary},           {"Exp", op_unary},
    {"Log", op_unary},           {"Identity", op_unary},
    {"Cast", op_cast},           {"Softmax", op_softmax},
    {"Dropout", op_dropout},
    {"LogSoftmax", op_softmax},  {"LayerNormalization", op_layernorm},
    {"BatchNormalization", op_batchnorm},
    {"ReduceSum", op_reduce},    {"ReduceMean", op_reduce},
    {"ReduceMax", op_reduce},    {"ArgMax", op_argmax},
    {"Gather", op_gather},       {"Concat", op_concat},
    {"Flatten", op_flatten},     {"Reshape", op_reshape},
    {"Squeeze", op_squeeze_only}, {"Unsqueeze", op_unsqueeze},
    {"Transpose", op_transpose}, {"Shape", op_shape},
    {"Constant", op_constant},
    {"QuantizeLinear", op_quantize}, {"DequantizeLinear", op_dequantize},
    {"MatMulInteger", op_matmul_integer}, {"QLinearMatMul", op_qlinear_matmul},
    {"DynamicQuantizeLinear", op_dynamic_quantize},
};

static const op_rule_t ml_rules[] = { /* domain ai.onnx.ml */
    {"TreeEnsemble", op_tree_ensemble},
    {"TreeEnsembleRegressor", op_tree_v3},
    {"TreeEnsembleClassifier", op_tree_v3},
};

tpu_status_t tpu_graph_infer(tpu_graph_t *g, int64_t batch) {
  if (!g) return TPU_EINVAL;
  if (batch < 1)
    return tpu__graph_fail(g, TPU_EINVAL, "infer: batch size %lld, expected >= 1",
                           (long long)batch);
  if (g->released)
    return tpu__graph_fail(g, TPU_EINVAL, "infer: the graph's constants were released "
                           "(tpu_graph_release_constants): it takes no new inference");
  tpu_status_t st = tpu_graph_validate(g);
  if (st != TPU_OK) return st;
  tpu__graph_clear_inferred(g);
  for (size_t i = 0; i < g->ntensors; i++) {
    tpu__gtensor_t *t = &g->tensors[i];
    if (!t->is_init && !t->is_input) continue;
    t->known = 1;
    t->idtype = t->dtype;
    t->irank = t->rank;
    for (int d = 0; d < t->rank; d++)
      t->idims[d] = t->dims[d] == TPU_GRAPH_BATCH ? batch : t->dims[d];
    if (t->is_init) {
      t->val = t->data;
      t->vbytes = t->bytes;
    } else if (tpu__graph_count(t->irank, t->idims, tpu_graph_dtype_size(t->idtype), NULL, NULL)
               != TPU_OK) {
      char s[SHAPE_STR];
      st = tpu__graph_fail(g, TPU_EOVERFLOW, "graph input '%s': shape %s at batch %lld "
                           "overflows the size limit", t->name,
                           tpu__graph_shape_str(t->irank, t->idims, s, sizeof s),
                           (long long)batch);
      goto fail;
    }
  }
  for (size_t k = 0; k < g->nnodes; k++) {
    ctx_t c = {.g = g, .n = g->order[k], .nd = &g->nodes[g->order[k]]};
    tpu__graph_node_label(g, c.n, c.lb, sizeof c.lb);
    const op_rule_t *rule = NULL;
    if (c.nd->domain[0] == 0)
      for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
        if (strcmp(rules[r].op, c.nd->op) == 0) rule = &rules[r];
    if (strcmp(c.nd->domain, "ai.onnx.ml") == 0)
      for (size_t r = 0; r < sizeof ml_rules / sizeof ml_rules[0]; r++)
        if (strcmp(ml_rules[r].op, c.nd->op) == 0) rule = &ml_rules[r];
    if (!rule) {
      st = tpu__graph_fail(g, TPU_ENOTSUP, "%s: op '%s%s%s' (opset %d) is not supported", c.lb,
                           c.nd->domain, c.nd->domain[0] ? "." : "", c.nd->op, c.nd->opset);
      goto fail;
    }
    if ((st = rule->rule(&c)) != TPU_OK) goto fail;
    for (size_t o = 0; o < c.nd->nout; o++) {
      long t = c.nd->out[o];
      if (t >= 0 && !g->tensors[t].known) {
        st = cfail(&c, TPU_ENOTSUP, "output %zu ('%s') is not supported", o, g->tensors[t].name);
        goto fail;
      }
    }
  }
  return TPU_OK;
fail:
  tpu__graph_clear_inferred(g);
  return st;
}
