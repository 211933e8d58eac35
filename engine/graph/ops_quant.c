/*
 * ops_quant.c - kernels of the ops of pre-quantized ONNX models (see exec_internal.h for the
 * contract): QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger and
 * QLinearMatMul.
 *
 * DESIGN
 * Quantized values are INT8 or UINT8 (DequantizeLinear also takes INT32). Rounding is the one
 * ONNX specifies: round half to even (rint/rintf under the default rounding mode, which the
 * engine never changes), then the zero point is added and the result saturates to the type's
 * range; NaN quantizes to the zero point. Arithmetic follows ONNX's reference implementation
 * so that ties fall the same way:
 *   QuantizeLinear       y = sat(rint(x / s) + zp), the quotient in float for float x (FP16
 *                        and BF16 widened exactly first), in double for INT32 x.
 *   DequantizeLinear     y = (float)(x - zp) * s in float, then rounded once to BF16 for a
 *                        BF16 scale (FP16 scales are refused).
 *   MatMulInteger        y = Σ (a - za)(b - zb) in 32-bit two's complement (ONNX allows the
 *                        accumulation, not the products, to overflow; int32 wrapping is exact
 *                        modulo 2^32, so the sum is computed as Σ (a - za)·b - zb·Σ (a - za)).
 *   QLinearMatMul        the MatMulInteger accumulator, times m = sa·sb/sy (float), in double:
 *                        y = sat(rint(acc·m) + zy).
 *   DynamicQuantizeLinear s = (max(0, max x) - min(0, min x)) / 255, zp = rint(sat(-min / s)),
 *                        then as QuantizeLinear to UINT8, all in float; an all-zero x gives
 *                        s = 0, zp = 0, y = 0.
 * Scales and zero points of Quantize/DequantizeLinear are per tensor, per axis or per block
 * (opset 21's block_size): x is walked as [outer][axis][inner] and a parameter index derived
 * per (outer, axis) row. MatMulInteger/QLinearMatMul take them per tensor, per row of A /
 * column of B, or per batch matrix row/column ([..., M, 1] / [..., 1, N]), as infer.c checks.
 * The matmuls take one of two paths, chosen in prepare:
 *   - engine: B is a constant 2-D matrix. Every leading dimension of A is flattened into the
 *     rows of one INT8 plan with INT32 output (the raw accumulators, exact: the engine bounds K
 *     so that no int8 dot product leaves int32). UINT8 operands are shifted by -128 into INT8
 *     (B once at pack time, A per run into a buffer in params) and every zero point is applied
 *     after the product from the row sums of A and the column sums of B, so the result is the
 *     reference's bit for bit.
 *   - reference: i-k-j loops with numpy batch broadcasting and 1-D operands promoted as
 *     MatMul's are.
 * Buffers (QLinearMatMul's int32 accumulators, the shifted A) live in params, so run allocates
 * nothing. Scales and zero points are read from their views at run time, so they need not be
 * constants.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

#define R TPU_GRAPH_MAX_RANK

/* ---- element access ---- */

static inline float ld_f(const tpu__xt_t *t, size_t i) {
  return t->dtype == TPU_GRAPH_FP32 ? ((const float *)t->data)[i] : (float)tpu__xt_get_f64(t, i);
}

static inline int32_t ld_i(const tpu__xt_t *t, size_t i) {
  switch (t->dtype) {
  case TPU_GRAPH_INT8: return ((const int8_t *)t->data)[i];
  case TPU_GRAPH_UINT8: return ((const uint8_t *)t->data)[i];
  case TPU_GRAPH_INT32: return ((const int32_t *)t->data)[i];
  default: return (int32_t)tpu__xt_get_i64(t, i);
  }
}

static void q_range(tpu_graph_dtype_t d, int32_t *lo, int32_t *hi) {
  *lo = d == TPU_GRAPH_INT8 ? -128 : 0;
  *hi = d == TPU_GRAPH_INT8 ? 127 : 255;
}

/* v (already rounded) + zp, saturated; NaN gives zp. */
static inline int32_t q_sat(double v, int32_t zp, int32_t lo, int32_t hi) {
  if (v != v) v = 0;
  v += zp;
  if (v < lo) return lo;
  if (v > hi) return hi;
  return (int32_t)v;
}

static inline void st_q(void *o, tpu_graph_dtype_t d, size_t i, int32_t v) {
  if (d == TPU_GRAPH_INT8)
    ((int8_t *)o)[i] = (int8_t)v;
  else
    ((uint8_t *)o)[i] = (uint8_t)v;
}

/* ---- QuantizeLinear / DequantizeLinear ---- */

enum { QP_TENSOR = 0, QP_AXIS, QP_BLOCK };

typedef struct {
  int mode;
  size_t outer, len, inner; /* x as [outer][len][inner], len along the axis */
  size_t block, nblk;       /* QP_BLOCK: block size along the axis, blocks per row */
} ql_t;

static tpu_status_t ql_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  ql_t *q = calloc(1, sizeof *q);
  if (!q) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  s->params = q;
  s->param_bytes = sizeof *q;
  const tpu__xt_t *x = s->in[0], *sc = s->in[1];
  int64_t block = pc->opset >= 21 ? tpu__attr_i(pc, "block_size", 0) : 0;
  q->outer = 1;
  q->len = x->elems;
  q->inner = 1;
  if (block == 0 && sc->elems == 1) return TPU_OK;
  int64_t axis = tpu__attr_i(pc, "axis", 1);
  int ax = (int)(axis < 0 ? axis + x->rank : axis);
  q->outer = 1;
  for (int d = 0; d < ax; d++) q->outer *= (size_t)x->dims[d];
  q->len = (size_t)x->dims[ax];
  for (int d = ax + 1; d < x->rank; d++) q->inner *= (size_t)x->dims[d];
  q->mode = block > 0 ? QP_BLOCK : QP_AXIS;
  q->block = (size_t)block;
  q->nblk = block > 0 ? (q->len + q->block - 1) / q->block : 0;
  return TPU_OK;
}

/* Index of the scale of row (o, a) of x; its inner elements share it, except in QP_BLOCK where
 * element i of the row adds i. */
static inline size_t ql_index(const ql_t *q, size_t o, size_t a) {
  switch (q->mode) {
  case QP_AXIS: return a;
  case QP_BLOCK: return (o * q->nblk + a / q->block) * q->inner;
  default: return 0;
  }
}

static tpu_status_t quantize_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0], *sc = s->in[1];
  if (x->dtype != TPU_GRAPH_FP32 && x->dtype != TPU_GRAPH_FP16 && x->dtype != TPU_GRAPH_BF16 &&
      x->dtype != TPU_GRAPH_INT32)
    return tpu__prep_dtype(pc, x, "FP32, FP16, BF16 or INT32");
  if (sc->dtype != TPU_GRAPH_FP32 && sc->dtype != TPU_GRAPH_FP16 && sc->dtype != TPU_GRAPH_BF16)
    return tpu__prep_dtype(pc, sc, "FP32, FP16 or BF16 scales");
  return ql_prepare(pc, s);
}

static tpu_status_t quantize_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  (void)rc;
  const ql_t *q = s->params;
  const tpu__xt_t *x = s->in[0], *sc = s->in[1], *zpt = s->nin > 2 ? s->in[2] : NULL;
  tpu__xt_t *y = s->out[0];
  int32_t lo, hi;
  q_range(y->dtype, &lo, &hi);
  int blocked = q->mode == QP_BLOCK;
  for (size_t o = 0; o < q->outer; o++)
    for (size_t a = 0; a < q->len; a++) {
      size_t base = (o * q->len + a) * q->inner, pi = ql_index(q, o, a);
      if (x->dtype == TPU_GRAPH_FP32 && !blocked) { /* the common case, typed */
        const float *xv = (const float *)x->data + base;
        float sv = ld_f(sc, pi);
        int32_t zp = zpt ? ld_i(zpt, pi) : 0;
        for (size_t i = 0; i < q->inner; i++)
          st_q(y->data, y->dtype, base + i, q_sat(rintf(xv[i] / sv), zp, lo, hi));
        continue;
      }
      for (size_t i = 0; i < q->inner; i++) {
        size_t p = pi + (blocked ? i : 0);
        int32_t zp = zpt ? ld_i(zpt, p) : 0;
        double v;
        if (x->dtype == TPU_GRAPH_INT32)
          v = rint((double)ld_i(x, base + i) / (double)ld_f(sc, p));
        else
          v = rintf(ld_f(x, base + i) / ld_f(sc, p));
        st_q(y->data, y->dtype, base + i, q_sat(v, zp, lo, hi));
      }
    }
  return TPU_OK;
}

static tpu_status_t dequantize_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0], *sc = s->in[1];
  if (x->dtype != TPU_GRAPH_INT8 && x->dtype != TPU_GRAPH_UINT8 && x->dtype != TPU_GRAPH_INT32)
    return tpu__prep_dtype(pc, x, "INT8, UINT8 or INT32");
  if (sc->dtype != TPU_GRAPH_FP32 && sc->dtype != TPU_GRAPH_BF16)
    return tpu__prep_dtype(pc, sc, "FP32 or BF16 scales");
  return ql_prepare(pc, s);
}

static tpu_status_t dequantize_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  (void)rc;
  const ql_t *q = s->params;
  const tpu__xt_t *x = s->in[0], *sc = s->in[1], *zpt = s->nin > 2 ? s->in[2] : NULL;
  tpu__xt_t *y = s->out[0];
  int bf16 = y->dtype == TPU_GRAPH_BF16, blocked = q->mode == QP_BLOCK;
  for (size_t o = 0; o < q->outer; o++)
    for (size_t a = 0; a < q->len; a++) {
      size_t base = (o * q->len + a) * q->inner, pi = ql_index(q, o, a);
      if (!bf16 && !blocked && x->dtype != TPU_GRAPH_INT32) { /* the common case */
        float sv = ld_f(sc, pi);
        int32_t zp = zpt ? ld_i(zpt, pi) : 0;
        float *yv = (float *)y->data + base;
        if (x->dtype == TPU_GRAPH_INT8) {
          const int8_t *xv = (const int8_t *)x->data + base;
          for (size_t i = 0; i < q->inner; i++) yv[i] = (float)(xv[i] - zp) * sv;
        } else {
          const uint8_t *xv = (const uint8_t *)x->data + base;
          for (size_t i = 0; i < q->inner; i++) yv[i] = (float)(xv[i] - zp) * sv;
        }
        continue;
      }
      for (size_t i = 0; i < q->inner; i++) {
        size_t p = pi + (blocked ? i : 0);
        int64_t zp = zpt ? ld_i(zpt, p) : 0;
        float v = (float)((int64_t)ld_i(x, base + i) - zp) * ld_f(sc, p);
        if (bf16)
          ((uint16_t *)y->data)[base + i] = tpu_bf16_from_fp32(v);
        else
          ((float *)y->data)[base + i] = v;
      }
    }
  return TPU_OK;
}

/* ---- DynamicQuantizeLinear ---- */

static tpu_status_t dynq_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  if (s->in[0]->dtype != TPU_GRAPH_FP32) return tpu__prep_dtype(pc, s->in[0], "FP32");
  return TPU_OK;
}

static tpu_status_t dynq_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  const tpu__xt_t *x = s->in[0];
  const float *xv = x->data;
  float mn = 0, mx = 0; /* the range always includes 0 */
  for (size_t i = 0; i < x->elems; i++) {
    mn = fminf(mn, xv[i]);
    mx = fmaxf(mx, xv[i]);
  }
  float scale = (mx - mn) / 255.0f;
  if (!isfinite(scale)) /* an infinite input (or range) has no 8-bit scale */
    return tpu__run_fail(rc, TPU_ERANGE, "input '%s' holds an infinite value (or a range "
                         "beyond FP32): it cannot be quantized", x->name);
  int32_t zp = 0;
  if (scale != 0) {
    float izp = 0.0f - mn / scale;
    izp = izp < 0 ? 0 : izp > 255 ? 255 : izp;
    zp = (int32_t)rintf(izp);
  }
  uint8_t *yv = s->out[0]->data;
  for (size_t i = 0; i < x->elems; i++)
    yv[i] = scale != 0 ? (uint8_t)q_sat(rintf(xv[i] / scale), zp, 0, 255) : 0;
  if (s->nout > 1 && s->out[1]) *(float *)s->out[1]->data = scale;
  if (s->nout > 2 && s->out[2]) *(uint8_t *)s->out[2]->data = (uint8_t)zp;
  return TPU_OK;
}

/* ---- MatMulInteger / QLinearMatMul ---- */

enum { MP_TENSOR = 0, MP_VEC, MP_MAT }; /* one value; per row/column; per batch matrix row/col */

typedef struct {
  size_t m, k, n, batches;
  int rank;                   /* of the output batch dims */
  int64_t bdims[R];
  size_t astr[R], bstr[R];    /* batch strides in matrices (0 where broadcast) */
  int za_mode, zb_mode, sa_mode, sb_mode;
  int qlinear;
  /* Engine path (B a constant 2-D matrix): A's rows flattened into rows = batches·M of one
   * plan, in INT8 with INT32 output. A UINT8 operand is shifted by -128 into INT8 (its zero
   * point shifted likewise), and the zero points are applied afterwards through the row sums
   * of A and the column sums of B. */
  tpu_weights_t *w;
  tpu_plan_t *plan;
  size_t rows;
  int32_t a_shift, b_shift;   /* 128 for a UINT8 operand, else 0 */
  int8_t *a8;                 /* rows·K: A shifted into INT8 (UINT8 A only) */
  float *ones;                /* rows unit scales for tpu_plan_run */
  uint32_t *colsum;           /* N: Σ_k of the shifted B */
  int32_t *prod;              /* rows·N accumulators (QLinearMatMul only) */
  uint32_t acc[];             /* reference path of QLinearMatMul: one row of N accumulators */
} qmm_t;

static void qmm_release(void *p) {
  qmm_t *q = p;
  tpu_plan_free(q->plan);
  tpu_weights_free(q->w);
  free(q->a8);
  free(q->ones);
  free(q->colsum);
  free(q->prod);
}

/* Sets up the engine path when it applies; returns TPU_OK with q->plan NULL when it does not
 * (the reference path then runs), or an error. */
static tpu_status_t qmm_engine(tpu__prep_t *pc, tpu__step_t *s, qmm_t *q, const tpu__xt_t *a,
                               const tpu__xt_t *b) {
  if (!b->is_const || b->rank != 2 || !a->elems || !q->n || !q->k || !pc->engine) return TPU_OK;
  q->rows = a->elems / q->k;
  q->a_shift = a->dtype == TPU_GRAPH_UINT8 ? 128 : 0;
  q->b_shift = b->dtype == TPU_GRAPH_UINT8 ? 128 : 0;
  int8_t *b8 = malloc(q->k * q->n);
  float *wscale = malloc(q->n * sizeof *wscale);
  q->colsum = calloc(q->n, sizeof *q->colsum);
  q->ones = malloc(q->rows * sizeof *q->ones);
  if (q->a_shift) q->a8 = malloc(q->rows * q->k);
  if (q->qlinear) q->prod = malloc(q->rows * q->n * sizeof *q->prod);
  if (!b8 || !wscale || !q->colsum || !q->ones || (q->a_shift && !q->a8) ||
      (q->qlinear && !q->prod)) {
    free(b8);
    free(wscale);
    return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory packing %zux%zu weights", q->k, q->n);
  }
  const unsigned char *bv = b->data;
  for (size_t i = 0; i < q->k * q->n; i++) {
    int32_t v = b->dtype == TPU_GRAPH_INT8 ? (int32_t)(int8_t)bv[i] : (int32_t)bv[i] - 128;
    b8[i] = (int8_t)v;
    q->colsum[i % q->n] += (uint32_t)v;
  }
  for (size_t j = 0; j < q->n; j++) wscale[j] = 1.0f;
  for (size_t i = 0; i < q->rows; i++) q->ones[i] = 1.0f;
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_INT8, .k = q->k, .n = q->n,
                          .layout = TPU_LAYOUT_KN, .src_dtype = TPU_DTYPE_INT8, .src = b8,
                          .src_scales = wscale};
  tpu_status_t st = tpu_weights_pack(pc->engine, &d, &q->w);
  free(b8);
  free(wscale);
  if (st == TPU_EOVERFLOW) return TPU_OK; /* K past what INT32 accumulators hold exactly */
  if (st != TPU_OK)
    return tpu__prep_fail(pc, st, "packing %zux%zu INT8 weights: %s", q->k, q->n,
                          tpu_strerror(st));
  tpu_epilogue_t ep = {.out_dtype = TPU_DTYPE_INT32};
  st = tpu_plan_create(pc->engine, q->w, q->rows, TPU_DTYPE_INT8, &ep, &q->plan);
  if (st != TPU_OK)
    return tpu__prep_fail(pc, st, "planning %zux%zux%zu in INT8: %s", q->rows, q->k, q->n,
                          tpu_strerror(st));
  tpu_plan_cost(q->plan, &s->macs, &s->cycles, &s->slots);
  size_t held = 0, tr = 0, plan = 0;
  tpu_weights_memory(pc->engine, TPU_DTYPE_INT8, TPU_DTYPE_INT8, q->k, q->n, &held, &tr);
  tpu_plan_memory(pc->engine, TPU_DTYPE_INT8, q->k, q->n, q->rows, TPU_DTYPE_INT8, &ep, &plan);
  s->param_bytes += held + plan + q->n * 4 + q->rows * 4 + (q->a_shift ? q->rows * q->k : 0) +
                    (q->qlinear ? q->rows * q->n * 4 : 0);
  snprintf(s->desc, sizeof s->desc, "engine plan int8 [%zux%zux%zu] %s x %s", q->rows, q->k,
           q->n, tpu_graph_dtype_name(a->dtype), tpu_graph_dtype_name(b->dtype));
  return TPU_OK;
}

static int mp_mode(const tpu__xt_t *t) {
  if (!t || t->elems == 1) return MP_TENSOR;
  return t->rank == 1 ? MP_VEC : MP_MAT;
}

static tpu_status_t qmm_prepare(tpu__prep_t *pc, tpu__step_t *s, int qlinear) {
  const tpu__xt_t *a = s->in[0], *b = s->in[qlinear ? 3 : 1];
  if (a->dtype != TPU_GRAPH_INT8 && a->dtype != TPU_GRAPH_UINT8)
    return tpu__prep_dtype(pc, a, "INT8 or UINT8");
  if (b->dtype != TPU_GRAPH_INT8 && b->dtype != TPU_GRAPH_UINT8)
    return tpu__prep_dtype(pc, b, "INT8 or UINT8");
  if (qlinear) {
    static const int sc[] = {1, 4, 6};
    for (size_t i = 0; i < 3; i++)
      if (s->in[sc[i]]->dtype != TPU_GRAPH_FP32 && s->in[sc[i]]->dtype != TPU_GRAPH_FP16 &&
          s->in[sc[i]]->dtype != TPU_GRAPH_BF16)
        return tpu__prep_dtype(pc, s->in[sc[i]], "FP32, FP16 or BF16 scales");
  }
  size_t k = (size_t)a->dims[a->rank - 1];
  size_t m = a->rank >= 2 ? (size_t)a->dims[a->rank - 2] : 1;
  size_t n = b->rank >= 2 ? (size_t)b->dims[b->rank - 1] : 1;
  qmm_t *q = calloc(1, sizeof *q + (qlinear ? n : 0) * sizeof(uint32_t));
  if (!q) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  s->params = q;
  s->release = qmm_release;
  s->param_bytes = sizeof *q + (qlinear ? n : 0) * sizeof(uint32_t);
  q->m = m;
  q->k = k;
  q->n = n;
  q->qlinear = qlinear;
  int ra = a->rank >= 2 ? a->rank - 2 : 0, rb = b->rank >= 2 ? b->rank - 2 : 0;
  int r = ra > rb ? ra : rb;
  size_t sa = 1, sb = 1;
  for (int d = r - 1; d >= 0; d--) {
    int da = d - (r - ra), db = d - (r - rb);
    int64_t xa = da >= 0 ? a->dims[da] : 1, xb = db >= 0 ? b->dims[db] : 1;
    q->bdims[d] = xa == 1 ? xb : xa;
    q->astr[d] = xa == 1 ? 0 : sa;
    q->bstr[d] = xb == 1 ? 0 : sb;
    if (da >= 0) sa *= (size_t)xa;
    if (db >= 0) sb *= (size_t)xb;
  }
  q->rank = r;
  q->batches = 1;
  for (int d = 0; d < r; d++) q->batches *= (size_t)q->bdims[d];
  if (qlinear) {
    q->sa_mode = mp_mode(s->in[1]);
    q->za_mode = mp_mode(s->in[2]);
    q->sb_mode = mp_mode(s->in[4]);
    q->zb_mode = mp_mode(s->in[5]);
  } else {
    q->za_mode = mp_mode(s->nin > 2 ? s->in[2] : NULL);
    q->zb_mode = mp_mode(s->nin > 3 ? s->in[3] : NULL);
  }
  tpu_engine_stats_t es;
  if (tpu_engine_stats(pc->engine, &es) == TPU_OK) {
    s->macs = (uint64_t)q->batches * m * k * n;
    s->cycles = (uint64_t)q->batches * tpu_systolic_cycles(es.systolic_rows, es.systolic_cols, m,
                                                           k, n);
    s->slots = s->cycles * es.systolic_rows * es.systolic_cols;
  }
  snprintf(s->desc, sizeof s->desc, "reference %s x %s [%zux%zux%zu]%s",
           tpu_graph_dtype_name(a->dtype), tpu_graph_dtype_name(b->dtype), m, k, n,
           q->batches > 1 ? " batched" : "");
  return qmm_engine(pc, s, q, a, b);
}

static tpu_status_t mmi_prepare(tpu__prep_t *pc, tpu__step_t *s) { return qmm_prepare(pc, s, 0); }
static tpu_status_t qlmm_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  return qmm_prepare(pc, s, 1);
}

/* Index of a parameter of mode `mode` for row/column `i` of batch matrix `mat` (of len rows or
 * columns). */
static inline size_t mp_index(int mode, size_t mat, size_t len, size_t i) {
  return mode == MP_TENSOR ? 0 : mode == MP_VEC ? i : mat * len + i;
}

/* acc[j] += av · b[j] over one row of B, for each B type. */
static void axpy_row(uint32_t *acc, uint32_t av, const void *b, int b_signed, size_t n) {
  if (b_signed) {
    const int8_t *bv = b;
    for (size_t j = 0; j < n; j++) acc[j] += av * (uint32_t)(int32_t)bv[j];
  } else {
    const uint8_t *bv = b;
    for (size_t j = 0; j < n; j++) acc[j] += av * (uint32_t)bv[j];
  }
}

/* Row i of one matrix product into acc (N values): Σ_k (a - za)(b - zb) modulo 2^32. am, bm:
 * the batch matrices of A and B (also indexing per-matrix zero points). */
static void qmm_row(const qmm_t *q, const tpu__xt_t *a, const tpu__xt_t *b, const tpu__xt_t *za,
                    const tpu__xt_t *zb, size_t am, size_t bm, size_t i, uint32_t *acc) {
  const unsigned char *ap = (const unsigned char *)a->data + (am * q->m + i) * q->k;
  const unsigned char *bp = (const unsigned char *)b->data + bm * q->k * q->n;
  int a_signed = a->dtype == TPU_GRAPH_INT8, b_signed = b->dtype == TPU_GRAPH_INT8;
  uint32_t zav = za ? (uint32_t)ld_i(za, mp_index(q->za_mode, am, q->m, i)) : 0, sum = 0;
  memset(acc, 0, q->n * sizeof *acc);
  for (size_t kk = 0; kk < q->k; kk++) {
    uint32_t av = (a_signed ? (uint32_t)(int32_t)(int8_t)ap[kk] : ap[kk]) - zav;
    sum += av;
    if (av) axpy_row(acc, av, bp + kk * q->n, b_signed, q->n);
  }
  if (zb)
    for (size_t j = 0; j < q->n; j++)
      acc[j] -= (uint32_t)ld_i(zb, mp_index(q->zb_mode, bm, q->n, j)) * sum;
}

/* Engine path: the plan's Σ a'·b' of the shifted operands into acc (rows·N), then the zero
 * points: Σ (a' - za')(b' - zb') = Σ a'b' - za'·colsum(b') - zb'·rowsum(a') + K·za'·zb', all
 * modulo 2^32 (exact: the true sum fits, or wraps as ONNX allows). */
static tpu_status_t qmm_engine_run(tpu__run_ctx_t *rc, const qmm_t *q, const tpu__xt_t *a,
                                   const tpu__xt_t *za, const tpu__xt_t *zb, uint32_t *acc) {
  const void *av = a->data;
  if (q->a_shift) {
    const uint8_t *au = a->data;
    for (size_t i = 0; i < q->rows * q->k; i++) q->a8[i] = (int8_t)((int32_t)au[i] - 128);
    av = q->a8;
  }
  tpu_status_t st = tpu_plan_run(q->plan, av, q->ones, acc);
  if (st != TPU_OK) return tpu__run_fail(rc, st, "engine plan failed: %s", tpu_strerror(st));
  const int8_t *a8 = av;
  for (size_t r = 0; r < q->rows; r++) {
    size_t mat = r / q->m, i = r % q->m;
    uint32_t zav = (uint32_t)((za ? ld_i(za, mp_index(q->za_mode, mat, q->m, i)) : 0) - q->a_shift);
    uint32_t rs = 0, *row = acc + r * q->n;
    for (size_t kk = 0; kk < q->k; kk++) rs += (uint32_t)(int32_t)a8[r * q->k + kk];
    for (size_t j = 0; j < q->n; j++) {
      uint32_t zbv = (uint32_t)((zb ? ld_i(zb, mp_index(q->zb_mode, 0, q->n, j)) : 0) - q->b_shift);
      row[j] += (uint32_t)q->k * zav * zbv - zav * q->colsum[j] - zbv * rs;
    }
  }
  return TPU_OK;
}

static tpu_status_t qmm_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  qmm_t *q = s->params;
  const tpu__xt_t *a = s->in[0], *b, *za, *zb, *sa = NULL, *sb = NULL, *sy = NULL, *zy = NULL;
  if (q->qlinear) {
    sa = s->in[1];
    za = s->in[2];
    b = s->in[3];
    sb = s->in[4];
    zb = s->in[5];
    sy = s->in[6];
    zy = s->in[7];
  } else {
    b = s->in[1];
    za = s->nin > 2 ? s->in[2] : NULL;
    zb = s->nin > 3 ? s->in[3] : NULL;
  }
  tpu__xt_t *y = s->out[0];
  int32_t lo = 0, hi = 0, zyv = 0;
  float syv = 1;
  if (q->qlinear) {
    q_range(y->dtype, &lo, &hi);
    zyv = ld_i(zy, 0);
    syv = ld_f(sy, 0);
  }
  if (q->plan) {
    uint32_t *acc = q->qlinear ? (uint32_t *)q->prod : y->data;
    tpu_status_t st = qmm_engine_run(rc, q, a, za, zb, acc);
    if (st != TPU_OK || !q->qlinear) return st;
    for (size_t r = 0; r < q->rows; r++) {
      float sav = ld_f(sa, mp_index(q->sa_mode, r / q->m, q->m, r % q->m));
      for (size_t j = 0; j < q->n; j++) {
        float mul = sav * ld_f(sb, mp_index(q->sb_mode, 0, q->n, j)) / syv;
        double v = rint((double)(int32_t)acc[r * q->n + j] * (double)mul);
        st_q(y->data, y->dtype, r * q->n + j, q_sat(v, zyv, lo, hi));
      }
    }
    return TPU_OK;
  }
  for (size_t bt = 0; bt < q->batches; bt++) {
    size_t am = 0, bm = 0, rem = bt;
    for (int d = q->rank - 1; d >= 0; d--) {
      size_t idx = rem % (size_t)q->bdims[d];
      rem /= (size_t)q->bdims[d];
      am += idx * q->astr[d];
      bm += idx * q->bstr[d];
    }
    for (size_t i = 0; i < q->m; i++) {
      size_t row = (bt * q->m + i) * q->n;
      if (!q->qlinear) {
        qmm_row(q, a, b, za, zb, am, bm, i, (uint32_t *)y->data + row);
        continue;
      }
      qmm_row(q, a, b, za, zb, am, bm, i, q->acc);
      float sav = ld_f(sa, mp_index(q->sa_mode, am, q->m, i));
      for (size_t j = 0; j < q->n; j++) {
        float mul = sav * ld_f(sb, mp_index(q->sb_mode, bm, q->n, j)) / syv;
        double v = rint((double)(int32_t)q->acc[j] * (double)mul);
        st_q(y->data, y->dtype, row + j, q_sat(v, zyv, lo, hi));
      }
    }
  }
  return TPU_OK;
}

const tpu__kernel_t tpu__kernels_quant[] = {
    {"QuantizeLinear", quantize_prepare, quantize_run},
    {"DequantizeLinear", dequantize_prepare, dequantize_run},
    {"DynamicQuantizeLinear", dynq_prepare, dynq_run},
    {"MatMulInteger", mmi_prepare, qmm_run},
    {"QLinearMatMul", qlmm_prepare, qmm_run},
    {NULL, NULL, NULL},
};
