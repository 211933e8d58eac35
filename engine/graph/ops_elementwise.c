/*
 * ops_elementwise.c - kernels of the graph's elementwise ops (see exec_internal.h for the
 * contract): arithmetic with numpy broadcasting (Add, Sub, Mul, Div, Pow, variadic Max and Min),
 * Where, the activations and other unary maps, Clip, Identity, Cast and inference-mode Dropout.
 *
 * DESIGN
 * Broadcasting is planned once, in prepare: each operand gets an element stride per output
 * dimension (0 where it is broadcast), size-1 output dimensions are dropped and neighbouring
 * dimensions that every operand walks contiguously are merged, so [64,256] + [64,256] becomes
 * one run of 16384, [64,256] + [256] 64 rows of 256 with the second operand restarting each row,
 * and x + scalar one run with a scalar operand. Run walks the leading dimensions with an
 * odometer and hands each row of the last one to a typed loop specialised for its operands'
 * inner strides (both 1, one of them 0): those loops are what the compiler vectorizes, and they
 * are the hot path of tabular models. Output bytes never overlap input bytes (the compiler's
 * promise), except where this file makes it so on purpose: variadic Max/Min fold their inputs
 * into the output one by one, reading and writing the same element.
 *
 * Run never allocates and never reads beyond its views and params. FP32 math is done in float,
 * FP64 in double (libm for now; vectorized transcendental kernels are a later issue). Integer
 * arithmetic wraps (two's complement, as ONNX runtimes do) through unsigned types so that it is
 * never undefined; integer division by zero and INT_MIN / -1 fail the run with TPU_ERANGE naming
 * the divisor tensor. Casts follow ONNX: float to integer truncates toward zero, saturating at
 * the target's limits (NaN gives 0, so no conversion is undefined), integer to integer keeps
 * the low bits, anything to BOOL is x != 0, and every narrowing to a float type (FP16, BF16,
 * FP32) rounds to nearest-even once, from the exact source value.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"
#include "tpu_kernels.h"

#define R TPU_GRAPH_MAX_RANK

/* ---- broadcasting plans ---- */

#define EW_MAXOP 3 /* operands of one plan: two for arithmetic, three for Where */

/* One walk over the output with up to EW_MAXOP operands. */
typedef struct {
  int rank;                    /* ≥ 1 after collapsing */
  int nop;
  int64_t dims[R];             /* output dims, collapsed */
  int64_t st[EW_MAXOP][R];     /* element strides of each operand over dims (0: broadcast) */
  size_t rows;                 /* product of dims[0..rank-2] */
  size_t len;                  /* dims[rank-1]: one row */
  int inner[EW_MAXOP];         /* st[k][rank-1]: 1 (walks the row) or 0 (repeats one element) */
} ew_plan_t;

/* Plans a walk over output `o` of the operands' shapes (right-aligned, numpy style; inference
 * has checked that they broadcast). */
static void ew_plan(ew_plan_t *p, const tpu__xt_t *o, int nop, const tpu__xt_t *const *ops) {
  int64_t dims[R], st[EW_MAXOP][R];
  int r = 0;
  p->nop = nop;
  for (int d = 0; d < o->rank; d++) {
    if (o->dims[d] == 1) continue; /* nothing to walk: every operand has 1 there too */
    dims[r] = o->dims[d];
    for (int k = 0; k < nop; k++) {
      const tpu__xt_t *t = ops[k];
      int td = d - (o->rank - t->rank); /* the operand's own dimension, < 0 when missing */
      int64_t stride = 0;
      if (td >= 0 && t->dims[td] != 1) {
        stride = 1;
        for (int e = td + 1; e < t->rank; e++) stride *= t->dims[e];
      }
      st[k][r] = stride;
    }
    r++;
  }
  /* Merge dimension i into i+1 when every operand steps over i as one block of i+1. */
  int out = 0;
  for (int i = 0; i < r; i++) {
    if (out > 0) {
      int merge = 1;
      for (int k = 0; k < nop; k++) merge = merge && st[k][out - 1] == st[k][i] * dims[i];
      if (merge) {
        dims[out - 1] *= dims[i];
        for (int k = 0; k < nop; k++) st[k][out - 1] = st[k][i];
        continue;
      }
    }
    dims[out] = dims[i];
    for (int k = 0; k < nop; k++) st[k][out] = st[k][i];
    out++;
  }
  if (out == 0) { /* one element */
    dims[0] = 1;
    for (int k = 0; k < nop; k++) st[k][0] = 0;
    out = 1;
  }
  p->rank = out;
  p->rows = 1;
  for (int i = 0; i < out; i++) {
    p->dims[i] = dims[i];
    for (int k = 0; k < nop; k++) p->st[k][i] = st[k][i];
    if (i < out - 1) p->rows *= (size_t)dims[i];
  }
  p->len = (size_t)dims[out - 1];
  for (int k = 0; k < nop; k++) p->inner[k] = p->len == 1 ? 1 : (int)st[k][out - 1];
  for (int k = nop; k < EW_MAXOP; k++) p->inner[k] = 0;
}

/* Row kinds of a binary loop, from the operands' inner strides (SS: both broadcast along the
 * row, as in a variadic Max of two scalars whose output shape comes from a later input). */
enum { EW_VV = 0, EW_VS, EW_SV, EW_SS };

static int ew_kind(const ew_plan_t *p) {
  if (p->inner[0] && p->inner[1]) return EW_VV;
  if (!p->inner[0] && !p->inner[1]) return EW_SS;
  return p->inner[0] ? EW_VS : EW_SV;
}

/* Element offsets of row `row` for each operand: a fresh computation from the row number, used
 * to start; the odometer below moves from one row to the next. */
typedef struct {
  int64_t idx[R];
  int64_t off[EW_MAXOP];
} ew_odo_t;

static void ew_odo_next(ew_odo_t *z, const ew_plan_t *p) {
  for (int d = p->rank - 2; d >= 0; d--) {
    for (int k = 0; k < p->nop; k++) z->off[k] += p->st[k][d];
    if (++z->idx[d] < p->dims[d]) return;
    for (int k = 0; k < p->nop; k++) z->off[k] -= p->st[k][d] * p->dims[d];
    z->idx[d] = 0;
  }
}

/* ---- binary arithmetic ---- */

/* One row: o[i] = a[i or 0] op b[i or 0]; returns nonzero when an element could not be
 * computed (integer division by zero or overflow). */
typedef int (*ew_bin_fn)(void *o, const void *a, const void *b, size_t n, int kind);

#define EW_BIN(NAME, TA, TB, TO, EXPR)                                                        \
  static int NAME(void *o_, const void *a_, const void *b_, size_t n, int kind) {            \
    TO *o = o_;                                                                               \
    const TA *a = a_;                                                                         \
    const TB *b = b_;                                                                         \
    int bad = 0;                                                                              \
    if (kind == EW_VV) {                                                                      \
      for (size_t i = 0; i < n; i++) {                                                        \
        TA x = a[i];                                                                          \
        TB y = b[i];                                                                          \
        o[i] = (EXPR);                                                                        \
      }                                                                                       \
    } else if (kind == EW_VS) {                                                               \
      const TB y = b[0];                                                                      \
      for (size_t i = 0; i < n; i++) {                                                        \
        TA x = a[i];                                                                          \
        o[i] = (EXPR);                                                                        \
      }                                                                                       \
    } else if (kind == EW_SS) {                                                               \
      const TA x = a[0];                                                                      \
      const TB y = b[0];                                                                      \
      const TO v = (EXPR);                                                                    \
      for (size_t i = 0; i < n; i++) o[i] = v;                                                \
    } else {                                                                                  \
      const TA x = a[0];                                                                      \
      for (size_t i = 0; i < n; i++) {                                                        \
        TB y = b[i];                                                                          \
        o[i] = (EXPR);                                                                        \
      }                                                                                       \
    }                                                                                         \
    return bad;                                                                               \
  }

/* Wrapping integer arithmetic: computed in the unsigned type of the same width. */
#define WRAP(T, U, x, OP, y) ((T)(U)((U)(x) OP (U)(y)))

/* NaN-propagating max/min for floats (numpy's maximum/minimum). */
#define FMAX(x, y) ((x) > (y) || (x) != (x) ? (x) : (y))
#define FMIN(x, y) ((x) < (y) || (x) != (x) ? (x) : (y))
#define IMAX(x, y) ((x) > (y) ? (x) : (y))
#define IMIN(x, y) ((x) < (y) ? (x) : (y))

/* Truncating division; a zero divisor or MIN / -1 sets bad and gives 0. */
#define IDIV(T, MIN, x, y)                                                                    \
  ((y) == 0 || ((x) == (MIN) && (y) == -1) ? (bad = 1, (T)0) : (T)((x) / (y)))

EW_BIN(add_f32, float, float, float, x + y)
EW_BIN(add_f64, double, double, double, x + y)
EW_BIN(add_i64, int64_t, int64_t, int64_t, WRAP(int64_t, uint64_t, x, +, y))
EW_BIN(add_i32, int32_t, int32_t, int32_t, WRAP(int32_t, uint32_t, x, +, y))
EW_BIN(add_i8, int8_t, int8_t, int8_t, WRAP(int8_t, uint8_t, x, +, y))
EW_BIN(add_u8, uint8_t, uint8_t, uint8_t, (uint8_t)(x + y))
EW_BIN(sub_f32, float, float, float, x - y)
EW_BIN(sub_f64, double, double, double, x - y)
EW_BIN(sub_i64, int64_t, int64_t, int64_t, WRAP(int64_t, uint64_t, x, -, y))
EW_BIN(sub_i32, int32_t, int32_t, int32_t, WRAP(int32_t, uint32_t, x, -, y))
EW_BIN(sub_i8, int8_t, int8_t, int8_t, WRAP(int8_t, uint8_t, x, -, y))
EW_BIN(sub_u8, uint8_t, uint8_t, uint8_t, (uint8_t)(x - y))
EW_BIN(mul_f32, float, float, float, x * y)
EW_BIN(mul_f64, double, double, double, x * y)
EW_BIN(mul_i64, int64_t, int64_t, int64_t, WRAP(int64_t, uint64_t, x, *, y))
EW_BIN(mul_i32, int32_t, int32_t, int32_t, WRAP(int32_t, uint32_t, x, *, y))
EW_BIN(mul_i8, int8_t, int8_t, int8_t, WRAP(int8_t, uint8_t, x, *, y))
EW_BIN(mul_u8, uint8_t, uint8_t, uint8_t, (uint8_t)((unsigned)x * y))
EW_BIN(div_f32, float, float, float, x / y)
EW_BIN(div_f64, double, double, double, x / y)
EW_BIN(div_i64, int64_t, int64_t, int64_t, IDIV(int64_t, INT64_MIN, x, y))
EW_BIN(div_i32, int32_t, int32_t, int32_t, IDIV(int32_t, INT32_MIN, x, y))
EW_BIN(max_f32, float, float, float, FMAX(x, y))
EW_BIN(max_f64, double, double, double, FMAX(x, y))
EW_BIN(max_i64, int64_t, int64_t, int64_t, IMAX(x, y))
EW_BIN(max_i32, int32_t, int32_t, int32_t, IMAX(x, y))
EW_BIN(min_f32, float, float, float, FMIN(x, y))
EW_BIN(min_f64, double, double, double, FMIN(x, y))
EW_BIN(min_i64, int64_t, int64_t, int64_t, IMIN(x, y))
EW_BIN(min_i32, int32_t, int32_t, int32_t, IMIN(x, y))

/* x^2 is the common Pow of exporters (variance, squared error): exact as a product. */
static inline float pow_ff(float x, float y) { return y == 2.0f ? x * x : powf(x, y); }
static inline double pow_dd(double x, double y) { return y == 2.0 ? x * x : pow(x, y); }

/* Integer power with wraparound. A negative exponent gives what truncating x^y toward zero
 * gives (1 for x = 1, ±1 for x = -1, 0 otherwise), except 0^negative, which is a division by
 * zero: *bad is set. */
static inline int64_t pow_ii(int64_t x, int64_t y, int *bad) {
  if (y < 0) {
    if (x == 0) {
      *bad = 1;
      return 0;
    }
    if (x == 1) return 1;
    if (x == -1) return (y & 1) ? -1 : 1;
    return 0;
  }
  uint64_t r = 1, b = (uint64_t)x;
  uint64_t e = (uint64_t)y;
  while (e) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return (int64_t)r;
}

EW_BIN(pow_f32_f32, float, float, float, pow_ff(x, y))
EW_BIN(pow_f32_f64, float, double, float, (float)pow_dd(x, y))
EW_BIN(pow_f32_i64, float, int64_t, float, pow_ff(x, (float)y))
EW_BIN(pow_f32_i32, float, int32_t, float, pow_ff(x, (float)y))
EW_BIN(pow_f64_f32, double, float, double, pow_dd(x, y))
EW_BIN(pow_f64_f64, double, double, double, pow_dd(x, y))
EW_BIN(pow_f64_i64, double, int64_t, double, pow_dd(x, (double)y))
EW_BIN(pow_f64_i32, double, int32_t, double, pow_dd(x, y))
EW_BIN(pow_i64_i64, int64_t, int64_t, int64_t, pow_ii(x, y, &bad))
EW_BIN(pow_i64_i32, int64_t, int32_t, int64_t, pow_ii(x, y, &bad))
EW_BIN(pow_i32_i64, int32_t, int64_t, int32_t, (int32_t)(uint32_t)(uint64_t)pow_ii(x, y, &bad))
EW_BIN(pow_i32_i32, int32_t, int32_t, int32_t, (int32_t)(uint32_t)(uint64_t)pow_ii(x, y, &bad))

typedef struct {
  const char *op;
  tpu_graph_dtype_t a, b; /* b = UNDEFINED: same as a */
  ew_bin_fn fn;
} ew_bin_entry_t;

static const ew_bin_entry_t bin_fns[] = {
    {"Add", TPU_GRAPH_FP32, 0, add_f32},   {"Add", TPU_GRAPH_FP64, 0, add_f64},
    {"Add", TPU_GRAPH_INT64, 0, add_i64},  {"Add", TPU_GRAPH_INT32, 0, add_i32},
    {"Add", TPU_GRAPH_INT8, 0, add_i8},    {"Add", TPU_GRAPH_UINT8, 0, add_u8},
    {"Sub", TPU_GRAPH_FP32, 0, sub_f32},   {"Sub", TPU_GRAPH_FP64, 0, sub_f64},
    {"Sub", TPU_GRAPH_INT64, 0, sub_i64},  {"Sub", TPU_GRAPH_INT32, 0, sub_i32},
    {"Sub", TPU_GRAPH_INT8, 0, sub_i8},    {"Sub", TPU_GRAPH_UINT8, 0, sub_u8},
    {"Mul", TPU_GRAPH_FP32, 0, mul_f32},   {"Mul", TPU_GRAPH_FP64, 0, mul_f64},
    {"Mul", TPU_GRAPH_INT64, 0, mul_i64},  {"Mul", TPU_GRAPH_INT32, 0, mul_i32},
    {"Mul", TPU_GRAPH_INT8, 0, mul_i8},    {"Mul", TPU_GRAPH_UINT8, 0, mul_u8},
    {"Div", TPU_GRAPH_FP32, 0, div_f32},   {"Div", TPU_GRAPH_FP64, 0, div_f64},
    {"Div", TPU_GRAPH_INT64, 0, div_i64},  {"Div", TPU_GRAPH_INT32, 0, div_i32},
    {"Max", TPU_GRAPH_FP32, 0, max_f32},   {"Max", TPU_GRAPH_FP64, 0, max_f64},
    {"Max", TPU_GRAPH_INT64, 0, max_i64},  {"Max", TPU_GRAPH_INT32, 0, max_i32},
    {"Min", TPU_GRAPH_FP32, 0, min_f32},   {"Min", TPU_GRAPH_FP64, 0, min_f64},
    {"Min", TPU_GRAPH_INT64, 0, min_i64},  {"Min", TPU_GRAPH_INT32, 0, min_i32},
    {"Pow", TPU_GRAPH_FP32, TPU_GRAPH_FP32, pow_f32_f32},
    {"Pow", TPU_GRAPH_FP32, TPU_GRAPH_FP64, pow_f32_f64},
    {"Pow", TPU_GRAPH_FP32, TPU_GRAPH_INT64, pow_f32_i64},
    {"Pow", TPU_GRAPH_FP32, TPU_GRAPH_INT32, pow_f32_i32},
    {"Pow", TPU_GRAPH_FP64, TPU_GRAPH_FP32, pow_f64_f32},
    {"Pow", TPU_GRAPH_FP64, TPU_GRAPH_FP64, pow_f64_f64},
    {"Pow", TPU_GRAPH_FP64, TPU_GRAPH_INT64, pow_f64_i64},
    {"Pow", TPU_GRAPH_FP64, TPU_GRAPH_INT32, pow_f64_i32},
    {"Pow", TPU_GRAPH_INT64, TPU_GRAPH_INT64, pow_i64_i64},
    {"Pow", TPU_GRAPH_INT64, TPU_GRAPH_INT32, pow_i64_i32},
    {"Pow", TPU_GRAPH_INT32, TPU_GRAPH_INT64, pow_i32_i64},
    {"Pow", TPU_GRAPH_INT32, TPU_GRAPH_INT32, pow_i32_i32},
};

/* What each binary op takes, for messages. */
static const char *bin_takes(const char *op) {
  if (strcmp(op, "Add") == 0 || strcmp(op, "Sub") == 0 || strcmp(op, "Mul") == 0)
    return "FP32, FP64, INT64, INT32, INT8 or UINT8";
  if (strcmp(op, "Pow") == 0)
    return "an FP32 or FP64 base with an FP32, FP64, INT64 or INT32 exponent, or an INT64 or "
           "INT32 base with an INT64 or INT32 exponent";
  return "FP32, FP64, INT64 or INT32";
}

/* A binary op (or a variadic Max/Min folded pairwise): plan 0 combines inputs 0 and 1, plan k
 * (k ≥ 1) combines the output so far with input k+1. One input: a copy. */
typedef struct {
  ew_bin_fn fn;
  size_t esize_a, esize_b, esize_o;
  size_t nplans;
  ew_plan_t plans[];
} ew_bin_params_t;

static tpu_status_t prep_binary(tpu__prep_t *pc, tpu__step_t *s) {
  const char *op = s->op;
  const tpu__xt_t *a = s->in[0], *o = s->out[0];
  tpu_graph_dtype_t bdt = s->nin > 1 ? s->in[1]->dtype : a->dtype;
  ew_bin_fn fn = NULL;
  for (size_t i = 0; i < sizeof bin_fns / sizeof bin_fns[0] && !fn; i++) {
    const ew_bin_entry_t *e = &bin_fns[i];
    if (strcmp(e->op, op) == 0 && e->a == a->dtype && (e->b == 0 || e->b == bdt)) fn = e->fn;
  }
  if (!fn) {
    /* Name the input whose dtype is the problem: the exponent when the base is fine. */
    const tpu__xt_t *bad = a;
    if (strcmp(op, "Pow") == 0 && s->nin > 1)
      for (size_t i = 0; i < sizeof bin_fns / sizeof bin_fns[0]; i++)
        if (strcmp(bin_fns[i].op, "Pow") == 0 && bin_fns[i].a == a->dtype) bad = s->in[1];
    return tpu__prep_dtype(pc, bad, bin_takes(op));
  }
  size_t nplans = s->nin > 1 ? s->nin - 1 : 0;
  ew_bin_params_t *p = calloc(1, sizeof *p + nplans * sizeof(ew_plan_t));
  if (!p) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  p->fn = fn;
  p->nplans = nplans;
  p->esize_a = tpu_graph_dtype_size(a->dtype);
  p->esize_b = tpu_graph_dtype_size(bdt);
  p->esize_o = tpu_graph_dtype_size(o->dtype);
  for (size_t k = 0; k < nplans; k++) {
    const tpu__xt_t *ops[2] = {k == 0 ? a : o, s->in[k + 1]};
    ew_plan(&p->plans[k], o, 2, ops);
  }
  s->params = p;
  s->param_bytes = sizeof *p + nplans * sizeof(ew_plan_t);
  return TPU_OK;
}

static tpu_status_t run_binary(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const ew_bin_params_t *p = s->params;
  const tpu__xt_t *o = s->out[0];
  if (o->elems == 0) return TPU_OK;
  if (p->nplans == 0) { /* Max/Min of one input */
    memcpy(o->data, s->in[0]->data, o->bytes);
    return TPU_OK;
  }
  for (size_t k = 0; k < p->nplans; k++) {
    const ew_plan_t *pl = &p->plans[k];
    const char *a = k == 0 ? s->in[0]->data : o->data;
    const char *b = s->in[k + 1]->data;
    size_t ea = k == 0 ? p->esize_a : p->esize_o, eb = p->esize_b;
    char *out = o->data;
    int kind = ew_kind(pl), bad = 0;
    ew_odo_t z;
    memset(&z, 0, sizeof z);
    for (size_t r = 0; r < pl->rows; r++) {
      bad |= p->fn(out + r * pl->len * p->esize_o, a + (size_t)z.off[0] * ea,
                   b + (size_t)z.off[1] * eb, pl->len, kind);
      ew_odo_next(&z, pl);
    }
    if (bad) {
      const tpu__xt_t *d = s->in[k + 1];
      if (strcmp(s->op, "Pow") == 0)
        return tpu__run_fail(rc, TPU_ERANGE, "exponent '%s' has a negative element where the "
                             "integer base is 0 (division by zero)", d->name);
      return tpu__run_fail(rc, TPU_ERANGE, "divisor '%s' has a zero element (integer division "
                           "by zero) or divides the smallest %s by -1 (overflow)", d->name,
                           tpu_graph_dtype_name(d->dtype));
    }
  }
  return TPU_OK;
}

/* ---- Where ---- */

typedef struct {
  size_t esize;
  ew_plan_t plan; /* operands: condition, x, y */
} ew_where_params_t;

#define WHERE_ROW(T)                                                                          \
  do {                                                                                        \
    T *oo = (T *)o;                                                                           \
    const T *xx = (const T *)x, *yy = (const T *)y;                                           \
    for (size_t i = 0; i < n; i++) oo[i] = c[i * sc] ? xx[i * sx] : yy[i * sy];               \
  } while (0)

static void where_row(size_t esize, void *o, const uint8_t *c, const void *x, const void *y,
                      size_t n, size_t sc, size_t sx, size_t sy) {
  switch (esize) {
  case 1: WHERE_ROW(uint8_t); break;
  case 2: WHERE_ROW(uint16_t); break;
  case 4: WHERE_ROW(uint32_t); break;
  default: WHERE_ROW(uint64_t); break;
  }
}

static tpu_status_t prep_where(tpu__prep_t *pc, tpu__step_t *s) {
  ew_where_params_t *p = calloc(1, sizeof *p);
  if (!p) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  p->esize = tpu_graph_dtype_size(s->out[0]->dtype); /* data movement: any dtype */
  const tpu__xt_t *ops[3] = {s->in[0], s->in[1], s->in[2]};
  ew_plan(&p->plan, s->out[0], 3, ops);
  s->params = p;
  s->param_bytes = sizeof *p;
  return TPU_OK;
}

static tpu_status_t run_where(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const ew_where_params_t *p = s->params;
  const ew_plan_t *pl = &p->plan;
  if (s->out[0]->elems == 0) return TPU_OK;
  const uint8_t *c = s->in[0]->data;
  const char *x = s->in[1]->data, *y = s->in[2]->data;
  char *o = s->out[0]->data;
  ew_odo_t z;
  memset(&z, 0, sizeof z);
  for (size_t r = 0; r < pl->rows; r++) {
    where_row(p->esize, o + r * pl->len * p->esize, c + z.off[0], x + (size_t)z.off[1] * p->esize,
              y + (size_t)z.off[2] * p->esize, pl->len, (size_t)pl->inner[0],
              (size_t)pl->inner[1], (size_t)pl->inner[2]);
    ew_odo_next(&z, pl);
  }
  return TPU_OK;
}

/* ---- unary maps ---- */

typedef void (*ew_un_fn)(void *o, const void *x, size_t n, double alpha);

#define EW_UN(NAME, T, EXPR)                                                                  \
  static void NAME(void *o_, const void *x_, size_t n, double alpha_) {                      \
    T *o = o_;                                                                                \
    const T *xs = x_;                                                                         \
    const T alpha = (T)alpha_;                                                                \
    (void)alpha;                                                                              \
    for (size_t i = 0; i < n; i++) {                                                          \
      T x = xs[i];                                                                            \
      o[i] = (EXPR);                                                                          \
    }                                                                                         \
  }

/* Sigmoid without overflow: exp of a non-positive number only. (FP32 Sigmoid, Tanh, Erf, Gelu
 * and Exp are the kernel set's vector math instead: see prep_unary.) */
static inline double sigmoid_d(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

#define SQRT1_2 0.70710678118654752440  /* 1/√2 */
#define SQRT2_PI 0.79788456080286535588 /* √(2/π) */

EW_UN(relu_f32, float, x < 0 ? 0.0f : x)
EW_UN(relu_f64, double, x < 0 ? 0.0 : x)
EW_UN(relu_i64, int64_t, x < 0 ? 0 : x)
EW_UN(relu_i32, int32_t, x < 0 ? 0 : x)
EW_UN(relu_i8, int8_t, x < 0 ? 0 : x)
EW_UN(neg_f32, float, -x)
EW_UN(neg_f64, double, -x)
EW_UN(neg_i64, int64_t, (int64_t)(0 - (uint64_t)x))
EW_UN(neg_i32, int32_t, (int32_t)(0 - (uint32_t)x))
EW_UN(neg_i8, int8_t, (int8_t)(0 - (uint8_t)x))
EW_UN(abs_f32, float, fabsf(x))
EW_UN(abs_f64, double, fabs(x))
EW_UN(abs_i64, int64_t, x < 0 ? (int64_t)(0 - (uint64_t)x) : x)
EW_UN(abs_i32, int32_t, x < 0 ? (int32_t)(0 - (uint32_t)x) : x)
EW_UN(abs_i8, int8_t, x < 0 ? (int8_t)(0 - (uint8_t)x) : x)
EW_UN(leaky_f32, float, x < 0 ? alpha * x : x)
EW_UN(leaky_f64, double, x < 0 ? alpha * x : x)
EW_UN(sigmoid_f64, double, sigmoid_d(x))
EW_UN(tanh_f64, double, tanh(x))
EW_UN(erf_f64, double, erf(x))
EW_UN(gelu_f64, double, 0.5 * x * (1.0 + erf(x * SQRT1_2)))
EW_UN(gelu_tanh_f64, double, 0.5 * x * (1.0 + tanh(SQRT2_PI * (x + 0.044715 * x * x * x))))
EW_UN(sqrt_f32, float, sqrtf(x))
EW_UN(sqrt_f64, double, sqrt(x))
EW_UN(recip_f32, float, 1.0f / x)
EW_UN(recip_f64, double, 1.0 / x)
EW_UN(exp_f64, double, exp(x))
EW_UN(log_f32, float, logf(x))
EW_UN(log_f64, double, log(x))

typedef struct {
  const char *op;
  tpu_graph_dtype_t dt;
  ew_un_fn fn;
} ew_un_entry_t;

static const ew_un_entry_t un_fns[] = {
    {"Relu", TPU_GRAPH_FP32, relu_f32},        {"Relu", TPU_GRAPH_FP64, relu_f64},
    {"Relu", TPU_GRAPH_INT64, relu_i64},       {"Relu", TPU_GRAPH_INT32, relu_i32},
    {"Relu", TPU_GRAPH_INT8, relu_i8},         {"Neg", TPU_GRAPH_FP32, neg_f32},
    {"Neg", TPU_GRAPH_FP64, neg_f64},          {"Neg", TPU_GRAPH_INT64, neg_i64},
    {"Neg", TPU_GRAPH_INT32, neg_i32},         {"Neg", TPU_GRAPH_INT8, neg_i8},
    {"Abs", TPU_GRAPH_FP32, abs_f32},          {"Abs", TPU_GRAPH_FP64, abs_f64},
    {"Abs", TPU_GRAPH_INT64, abs_i64},         {"Abs", TPU_GRAPH_INT32, abs_i32},
    {"Abs", TPU_GRAPH_INT8, abs_i8},           {"LeakyRelu", TPU_GRAPH_FP32, leaky_f32},
    {"LeakyRelu", TPU_GRAPH_FP64, leaky_f64},  {"Sigmoid", TPU_GRAPH_FP64, sigmoid_f64},
    {"Tanh", TPU_GRAPH_FP64, tanh_f64},        {"Erf", TPU_GRAPH_FP64, erf_f64},
    {"Gelu", TPU_GRAPH_FP64, gelu_f64},        {"Sqrt", TPU_GRAPH_FP32, sqrt_f32},
    {"Sqrt", TPU_GRAPH_FP64, sqrt_f64},        {"Reciprocal", TPU_GRAPH_FP32, recip_f32},
    {"Reciprocal", TPU_GRAPH_FP64, recip_f64}, {"Exp", TPU_GRAPH_FP64, exp_f64},
    {"Log", TPU_GRAPH_FP32, log_f32},          {"Log", TPU_GRAPH_FP64, log_f64},
};

/* FP32 ops the kernel set's vector math does (tpu_kernels.h: map). */
static const struct {
  const char *op;
  tpu__vfn_t vfn;
} un_vec[] = {
    {"Sigmoid", TPU__VF_SIGMOID}, {"Tanh", TPU__VF_TANH}, {"Erf", TPU__VF_ERF},
    {"Gelu", TPU__VF_GELU},       {"Exp", TPU__VF_EXP},
};

typedef struct {
  ew_un_fn fn;            /* or NULL: */
  const tpu__vec_kernels_t *vec;
  tpu__vfn_t vfn;
  double alpha;
} ew_un_params_t;

static tpu_status_t prep_unary(tpu__prep_t *pc, tpu__step_t *s) {
  const char *op = s->op;
  const tpu__xt_t *x = s->in[0];
  ew_un_fn fn = NULL;
  int vfn = -1;
  for (size_t i = 0; i < sizeof un_vec / sizeof un_vec[0] && x->dtype == TPU_GRAPH_FP32; i++)
    if (strcmp(un_vec[i].op, op) == 0) vfn = (int)un_vec[i].vfn;
  for (size_t i = 0; i < sizeof un_fns / sizeof un_fns[0] && !fn && vfn < 0; i++)
    if (strcmp(un_fns[i].op, op) == 0 && un_fns[i].dt == x->dtype) fn = un_fns[i].fn;
  int ints = strcmp(op, "Relu") == 0 || strcmp(op, "Neg") == 0 || strcmp(op, "Abs") == 0;
  if (!fn && vfn < 0)
    return tpu__prep_dtype(pc, x, ints ? "FP32, FP64, INT64, INT32 or INT8" : "FP32 or FP64");
  ew_un_params_t *p = calloc(1, sizeof *p);
  if (!p) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  p->fn = fn;
  p->vfn = vfn < 0 ? TPU__VF_COUNT : (tpu__vfn_t)vfn;
  if (strcmp(op, "LeakyRelu") == 0) p->alpha = tpu__attr_f(pc, "alpha", 0.01f);
  if (strcmp(op, "Gelu") == 0 && strcmp(tpu__attr_s(pc, "approximate", "none"), "tanh") == 0) {
    if (p->fn) p->fn = gelu_tanh_f64;
    else p->vfn = TPU__VF_GELU_TANH;
  }
  if (!p->fn) p->vec = tpu__prep_vec(pc);
  s->params = p;
  s->param_bytes = sizeof *p;
  return TPU_OK;
}

static tpu_status_t run_unary(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const ew_un_params_t *p = s->params;
  size_t n = s->out[0]->elems;
  if (p->fn) p->fn(s->out[0]->data, s->in[0]->data, n, p->alpha);
  else if (n) p->vec->map(p->vfn, s->in[0]->data, s->out[0]->data, n);
  return TPU_OK;
}

/* ---- Clip ---- */

/* Bounds: from attributes before opset 11 (floats only), else from the optional scalar inputs
 * 1 and 2, read at run time (they may be computed); absent ones are the type's limits (±inf for
 * floats). min > max gives max everywhere, as ONNX specifies. */
typedef struct {
  int from_attrs;
  double lo, hi; /* from_attrs */
} ew_clip_params_t;

#define CLIP_LOOP(T, LO, HI)                                                                  \
  do {                                                                                        \
    T *o = s->out[0]->data;                                                                   \
    const T *x = s->in[0]->data;                                                              \
    T lo = (LO), hi = (HI);                                                                   \
    if (!p->from_attrs) {                                                                     \
      if (s->nin > 1 && s->in[1]) memcpy(&lo, s->in[1]->data, sizeof lo);                     \
      if (s->nin > 2 && s->in[2]) memcpy(&hi, s->in[2]->data, sizeof hi);                     \
    }                                                                                         \
    for (size_t i = 0; i < n; i++) {                                                          \
      T v = x[i] < lo ? lo : x[i];                                                            \
      o[i] = v > hi ? hi : v;                                                                 \
    }                                                                                         \
  } while (0)

static tpu_status_t prep_clip(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  int from_attrs = pc->opset < 11;
  if (from_attrs) {
    if (x->dtype != TPU_GRAPH_FP32 && x->dtype != TPU_GRAPH_FP64)
      return tpu__prep_dtype(pc, x, "FP32 or FP64 before opset 11");
    for (size_t i = 1; i < s->nin; i++)
      if (s->in[i])
        return tpu__prep_fail(pc, TPU_EINVAL, "takes its bounds from attributes 'min' and 'max' "
                              "before opset 11, not from input '%s'", s->in[i]->name);
  } else if (x->dtype != TPU_GRAPH_FP32 && x->dtype != TPU_GRAPH_FP64 &&
             x->dtype != TPU_GRAPH_INT64 && x->dtype != TPU_GRAPH_INT32 &&
             x->dtype != TPU_GRAPH_INT8) {
    return tpu__prep_dtype(pc, x, "FP32, FP64, INT64, INT32 or INT8");
  }
  ew_clip_params_t *p = calloc(1, sizeof *p);
  if (!p) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  p->from_attrs = from_attrs;
  p->lo = tpu__attr_f(pc, "min", -FLT_MAX); /* Clip-6's defaults */
  p->hi = tpu__attr_f(pc, "max", FLT_MAX);
  s->params = p;
  s->param_bytes = sizeof *p;
  return TPU_OK;
}

static tpu_status_t run_clip(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const ew_clip_params_t *p = s->params;
  size_t n = s->out[0]->elems;
  switch (s->in[0]->dtype) {
  case TPU_GRAPH_FP32:
    CLIP_LOOP(float, p->from_attrs ? (float)p->lo : -INFINITY, p->from_attrs ? (float)p->hi
                                                                               : INFINITY);
    break;
  case TPU_GRAPH_FP64:
    CLIP_LOOP(double, p->from_attrs ? p->lo : -INFINITY, p->from_attrs ? p->hi : INFINITY);
    break;
  case TPU_GRAPH_INT64: CLIP_LOOP(int64_t, INT64_MIN, INT64_MAX); break;
  case TPU_GRAPH_INT32: CLIP_LOOP(int32_t, INT32_MIN, INT32_MAX); break;
  default: CLIP_LOOP(int8_t, INT8_MIN, INT8_MAX); break;
  }
  return TPU_OK;
}

/* ---- Identity and Dropout: copies ---- */

static tpu_status_t prep_copy(tpu__prep_t *pc, tpu__step_t *s) { return TPU_OK; }

static tpu_status_t run_identity(tpu__run_ctx_t *rc, tpu__step_t *s) {
  memcpy(s->out[0]->data, s->in[0]->data, s->out[0]->bytes);
  return TPU_OK;
}

static tpu_status_t prep_dropout(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (x->dtype != TPU_GRAPH_FP32 && x->dtype != TPU_GRAPH_FP64 && x->dtype != TPU_GRAPH_FP16 &&
      x->dtype != TPU_GRAPH_BF16)
    return tpu__prep_dtype(pc, x, "FP32, FP64, FP16 or BF16");
  if (s->nout > 1 && s->out[1] && s->out[1]->dtype != TPU_GRAPH_BOOL &&
      s->out[1]->dtype != TPU_GRAPH_FP32 && s->out[1]->dtype != TPU_GRAPH_FP64)
    return tpu__prep_fail(pc, TPU_ENOTSUP, "mask '%s' is %s: this kernel writes a BOOL, FP32 or "
                          "FP64 mask", s->out[1]->name, tpu_graph_dtype_name(s->out[1]->dtype));
  /* Inference only: training_mode must be absent or a constant false (a value known only per
   * call could switch a served model into random dropout). */
  const tpu__xt_t *tm = s->nin > 2 ? s->in[2] : NULL;
  if (tm && !tm->is_const)
    return tpu__prep_fail(pc, TPU_ENOTSUP, "input '%s' (training_mode) is not a constant: "
                          "tpud compiles models for inference, so it must be absent or a "
                          "constant false", tm->name);
  if (tm && tm->elems && ((const uint8_t *)tm->data)[0])
    return tpu__prep_fail(pc, TPU_ENOTSUP, "input '%s' (training_mode) is true: training mode "
                          "is not supported, only inference", tm->name);
  return TPU_OK;
}

static tpu_status_t run_dropout(tpu__run_ctx_t *rc, tpu__step_t *s) {
  (void)rc; /* training_mode was checked at compile time */
  memcpy(s->out[0]->data, s->in[0]->data, s->out[0]->bytes);
  if (s->nout > 1 && s->out[1]) {
    const tpu__xt_t *m = s->out[1];
    if (m->dtype == TPU_GRAPH_BOOL) {
      memset(m->data, 1, m->bytes);
    } else if (m->dtype == TPU_GRAPH_FP32) { /* opsets before 10: mask in the data's dtype */
      float *f = m->data;
      for (size_t i = 0; i < m->elems; i++) f[i] = 1.0f;
    } else {
      double *f = m->data;
      for (size_t i = 0; i < m->elems; i++) f[i] = 1.0;
    }
  }
  return TPU_OK;
}

/* ---- Cast ---- */

/* Rounds (-1)^neg · sig · 2^e2 to the nearest value of a binary float format with `mbits`
 * stored mantissa bits and `ebits` exponent bits (ties to even, overflow to infinity, gradual
 * underflow) and returns its bit pattern. sig may be any 64-bit integer, so one rounding serves
 * every source: an integer (e2 = 0), an FP32 or an FP64 significand. */
static uint32_t round_bits(int neg, uint64_t sig, int e2, int mbits, int ebits) {
  uint32_t sign = (uint32_t)neg << (mbits + ebits);
  if (sig == 0) return sign;
  int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
  int e = 63 - __builtin_clzll(sig) + e2;        /* the value is in [2^e, 2^(e+1)) */
  int qe = (e < emin ? emin : e) - mbits;         /* exponent of the last place kept */
  int shift = qe - e2;                            /* bits of sig below that place */
  uint64_t q;
  if (shift <= 0) {
    q = sig << -shift; /* exact: q < 2^(mbits+1) */
  } else if (shift > 64) {
    q = 0; /* below half the smallest subnormal */
  } else {
    uint64_t rem, half;
    if (shift == 64) {
      q = 0;
      rem = sig;
      half = (uint64_t)1 << 63;
    } else {
      q = sig >> shift;
      rem = sig & (((uint64_t)1 << shift) - 1);
      half = (uint64_t)1 << (shift - 1);
    }
    if (rem > half || (rem == half && (q & 1))) q++;
  }
  if (q >> (mbits + 1)) { /* rounding carried into the next binade */
    q >>= 1;
    qe++;
  }
  if (q == 0) return sign;
  uint32_t inf = sign | ((1u << ebits) - 1) << mbits;
  if (!(q >> mbits)) return sign | (uint32_t)q; /* subnormal: qe is emin - mbits */
  long field = (long)qe + mbits + bias;
  if (field >= (1L << ebits) - 1) return inf;
  return sign | (uint32_t)field << mbits | (uint32_t)(q - ((uint64_t)1 << mbits));
}

/* An FP64 value into a narrower float format (FP32: 8/23, FP16: 5/10, BF16: 8/7). */
static uint32_t narrow_f64(double d, int mbits, int ebits) {
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  int neg = (int)(b >> 63), ex = (int)((b >> 52) & 0x7ff);
  uint64_t man = b & (((uint64_t)1 << 52) - 1);
  uint32_t sign = (uint32_t)neg << (mbits + ebits), allexp = ((1u << ebits) - 1) << mbits;
  if (ex == 0x7ff) return sign | allexp | (man ? 1u << (mbits - 1) : 0); /* quiet NaN or inf */
  if (ex == 0) return round_bits(neg, man, -1074, mbits, ebits);
  return round_bits(neg, man | (uint64_t)1 << 52, ex - 1075, mbits, ebits);
}

static uint32_t narrow_i64(int64_t v, int mbits, int ebits) {
  uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  return round_bits(v < 0, mag, 0, mbits, ebits);
}

static float half_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
  if (e == 31) {
    bits = sign | 0x7f800000u | m << 13;
  } else if (e) {
    bits = sign | (e + 112) << 23 | m << 13;
  } else if (!m) {
    bits = sign;
  } else { /* subnormal: normalize so that bit 10 is the implicit one */
    int sh = __builtin_clz(m) - 21;
    m <<= sh;
    bits = sign | (uint32_t)(113 - sh) << 23 | (m & 0x3ff) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static int is_float_dt(tpu_graph_dtype_t d) {
  return d == TPU_GRAPH_FP32 || d == TPU_GRAPH_FP64 || d == TPU_GRAPH_FP16 || d == TPU_GRAPH_BF16;
}

/* Element i of a float tensor as its exact double value. */
static inline double ld_f(const void *p, tpu_graph_dtype_t dt, size_t i) {
  switch (dt) {
  case TPU_GRAPH_FP32: return ((const float *)p)[i];
  case TPU_GRAPH_FP64: return ((const double *)p)[i];
  case TPU_GRAPH_FP16: return half_to_f32(((const uint16_t *)p)[i]);
  default: return tpu_bf16_to_fp32(((const uint16_t *)p)[i]);
  }
}

/* Element i of an integer or BOOL tensor. */
static inline int64_t ld_i(const void *p, tpu_graph_dtype_t dt, size_t i) {
  switch (dt) {
  case TPU_GRAPH_INT64: return ((const int64_t *)p)[i];
  case TPU_GRAPH_INT32: return ((const int32_t *)p)[i];
  case TPU_GRAPH_INT8: return ((const int8_t *)p)[i];
  case TPU_GRAPH_UINT8: return ((const uint8_t *)p)[i];
  default: return ((const uint8_t *)p)[i] != 0;
  }
}

/* Truncation toward zero, saturating at [lo, hi]; NaN gives 0. */
static inline int64_t f_to_i(double d, int64_t lo, int64_t hi) {
  if (d != d) return 0;
  if (d <= (double)lo) return lo;
  if (d >= (double)hi) return hi; /* (double)INT64_MAX is 2^63: still saturates */
  return (int64_t)d;
}

static inline void st_f(void *p, tpu_graph_dtype_t dt, size_t i, double d) {
  switch (dt) {
  case TPU_GRAPH_FP32: ((float *)p)[i] = (float)d; break;
  case TPU_GRAPH_FP64: ((double *)p)[i] = d; break;
  case TPU_GRAPH_FP16: ((uint16_t *)p)[i] = (uint16_t)narrow_f64(d, 10, 5); break;
  case TPU_GRAPH_BF16: ((uint16_t *)p)[i] = (uint16_t)narrow_f64(d, 7, 8); break;
  case TPU_GRAPH_INT64: ((int64_t *)p)[i] = f_to_i(d, INT64_MIN, INT64_MAX); break;
  case TPU_GRAPH_INT32: ((int32_t *)p)[i] = (int32_t)f_to_i(d, INT32_MIN, INT32_MAX); break;
  case TPU_GRAPH_INT8: ((int8_t *)p)[i] = (int8_t)f_to_i(d, INT8_MIN, INT8_MAX); break;
  case TPU_GRAPH_UINT8: ((uint8_t *)p)[i] = (uint8_t)f_to_i(d, 0, UINT8_MAX); break;
  default: ((uint8_t *)p)[i] = d != 0; break; /* BOOL; NaN is true */
  }
}

static inline void st_i(void *p, tpu_graph_dtype_t dt, size_t i, int64_t v) {
  switch (dt) {
  case TPU_GRAPH_FP32: ((float *)p)[i] = (float)v; break; /* one rounding */
  case TPU_GRAPH_FP64: ((double *)p)[i] = (double)v; break;
  case TPU_GRAPH_FP16: ((uint16_t *)p)[i] = (uint16_t)narrow_i64(v, 10, 5); break;
  case TPU_GRAPH_BF16: ((uint16_t *)p)[i] = (uint16_t)narrow_i64(v, 7, 8); break;
  case TPU_GRAPH_INT64: ((int64_t *)p)[i] = v; break;
  case TPU_GRAPH_INT32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break;
  case TPU_GRAPH_INT8: ((int8_t *)p)[i] = (int8_t)(uint8_t)(uint64_t)v; break;
  case TPU_GRAPH_UINT8: ((uint8_t *)p)[i] = (uint8_t)(uint64_t)v; break;
  default: ((uint8_t *)p)[i] = v != 0; break;
  }
}

typedef struct {
  tpu_graph_dtype_t from, to;
} ew_cast_params_t;

static tpu_status_t prep_cast(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  if (x->dtype <= TPU_GRAPH_UNDEFINED || x->dtype >= TPU_GRAPH_DTYPE_COUNT)
    return tpu__prep_dtype(pc, x, "a graph dtype");
  ew_cast_params_t *p = calloc(1, sizeof *p);
  if (!p) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  p->from = x->dtype;
  p->to = s->out[0]->dtype;
  s->params = p;
  s->param_bytes = sizeof *p;
  return TPU_OK;
}

static tpu_status_t run_cast(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const ew_cast_params_t *p = s->params;
  const void *x = s->in[0]->data;
  void *o = s->out[0]->data;
  size_t n = s->out[0]->elems;
  tpu_graph_dtype_t from = p->from, to = p->to;
  if (from == to) {
    memcpy(o, x, s->out[0]->bytes);
    return TPU_OK;
  }
  /* Common pairs get a loop of their own; every other one goes through ld_ and st_. */
  if (from == TPU_GRAPH_FP32 && to == TPU_GRAPH_BF16) {
    tpu_bf16_from_fp32_n(o, x, n);
  } else if (from == TPU_GRAPH_BF16 && to == TPU_GRAPH_FP32) {
    tpu_bf16_to_fp32_n(o, x, n);
  } else if (from == TPU_GRAPH_FP32 && to == TPU_GRAPH_FP64) {
    for (size_t i = 0; i < n; i++) ((double *)o)[i] = ((const float *)x)[i];
  } else if (from == TPU_GRAPH_FP64 && to == TPU_GRAPH_FP32) {
    for (size_t i = 0; i < n; i++) ((float *)o)[i] = (float)((const double *)x)[i];
  } else if (from == TPU_GRAPH_INT64 && to == TPU_GRAPH_FP32) {
    for (size_t i = 0; i < n; i++) ((float *)o)[i] = (float)((const int64_t *)x)[i];
  } else if (from == TPU_GRAPH_INT32 && to == TPU_GRAPH_FP32) {
    for (size_t i = 0; i < n; i++) ((float *)o)[i] = (float)((const int32_t *)x)[i];
  } else if (from == TPU_GRAPH_BOOL && to == TPU_GRAPH_FP32) {
    for (size_t i = 0; i < n; i++) ((float *)o)[i] = ((const uint8_t *)x)[i] != 0;
  } else if (from == TPU_GRAPH_INT32 && to == TPU_GRAPH_INT64) {
    for (size_t i = 0; i < n; i++) ((int64_t *)o)[i] = ((const int32_t *)x)[i];
  } else if (is_float_dt(from)) {
    for (size_t i = 0; i < n; i++) st_f(o, to, i, ld_f(x, from, i));
  } else {
    for (size_t i = 0; i < n; i++) st_i(o, to, i, ld_i(x, from, i));
  }
  return TPU_OK;
}

const tpu__kernel_t tpu__kernels_elementwise[] = {
    {"Add", prep_binary, run_binary},
    {"Sub", prep_binary, run_binary},
    {"Mul", prep_binary, run_binary},
    {"Div", prep_binary, run_binary},
    {"Pow", prep_binary, run_binary},
    {"Max", prep_binary, run_binary},
    {"Min", prep_binary, run_binary},
    {"Where", prep_where, run_where},
    {"Relu", prep_unary, run_unary},
    {"LeakyRelu", prep_unary, run_unary},
    {"Sigmoid", prep_unary, run_unary},
    {"Tanh", prep_unary, run_unary},
    {"Erf", prep_unary, run_unary},
    {"Gelu", prep_unary, run_unary},
    {"Sqrt", prep_unary, run_unary},
    {"Reciprocal", prep_unary, run_unary},
    {"Neg", prep_unary, run_unary},
    {"Abs", prep_unary, run_unary},
    {"Exp", prep_unary, run_unary},
    {"Log", prep_unary, run_unary},
    {"Clip", prep_clip, run_clip},
    {"Identity", prep_copy, run_identity},
    {"Dropout", prep_dropout, run_dropout},
    {"Cast", prep_cast, run_cast},
    {NULL, NULL, NULL},
};
