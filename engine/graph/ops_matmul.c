/*
 * ops_matmul.c - kernels of Gemm and MatMul (see exec_internal.h for the contract).
 *
 * DESIGN
 * Two paths per node, chosen in prepare:
 *   - engine: the weights (input B) are a constant FP32 matrix and A is FP32 and not
 *     transposed. B is packed once (tpu_weights_pack; Gemm's alpha folded into the packed
 *     copy, transB picks the layout) and one plan is compiled for the node's M = the rows of A
 *     (every leading dimension of a MatMul's A flattened into M), in the precision the compiler
 *     gives the node. The plan's epilogue adds a bias (Gemm's C times beta when C is a constant
 *     row vector or scalar, or the bias the fusion pass hands over) and applies the fused
 *     activation. A Gemm C of any other shape is added after the product.
 *   - reference: everything else (tensor × tensor, transA, FP64 and integer types, empty
 *     shapes): straightforward loops accumulating in double (int64 for integers), numpy
 *     broadcasting of MatMul's batch dimensions, 1-D operands promoted as ONNX says.
 * Both report the systolic array's cost of the node (tpu_plan_cost for the engine path,
 * tpu_systolic_cycles per batch matrix for the reference path).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

typedef struct {
  /* engine path */
  tpu_weights_t *w;
  int w_owned;            /* 0: another program's (tpu_graph_compile_opts_t.share) */
  tpu_layout_t layout;
  double w_alpha;         /* the scale folded into the packed copy */
  int w_folded;           /* a BatchNormalization's scale is folded into the packed copy */
  const float *w_smooth;  /* the SmoothQuant factors folded into it (NULL: none) */
  tpu_plan_t *plan;
  /* shapes */
  size_t m, k, n;
  size_t batches;
  int rank;                          /* of the output batch dims */
  int64_t bdims[TPU_GRAPH_MAX_RANK]; /* output batch dims */
  size_t astr[TPU_GRAPH_MAX_RANK], bstr[TPU_GRAPH_MAX_RANK]; /* batch strides in matrices */
  /* Gemm */
  int trans_a, trans_b;
  double alpha, beta;
  int c_after;                 /* add beta·C after the product */
  size_t c_rs, c_cs;           /* C's strides over [M, N] (0 where broadcast) */
  /* epilogue for the reference path */
  tpu_act_t act;
  const float *bias;           /* n floats or NULL (bias_copy when owned) */
  float *bias_copy;            /* the fused bias, copied: its Add step and constant are gone */
  /* INT8 calibration (tpu_graph_calib_t): the activation divided by smooth per column, then
   * quantized with a static scale, into scratch, before the plan */
  float *inv_smooth;           /* K, or NULL */
  float *xs;                   /* M×K smoothed activation */
  int8_t *xq;                  /* M×K statically quantized activation, or NULL */
  float *xq_scales;            /* M copies of the static scale */
  float act_scale;
  float *obs_w;                /* FP32 weights as packed (kept for tpu_graph_program_observe) */
} mm_t;

static void mm_release(void *p) {
  mm_t *q = p;
  tpu_plan_free(q->plan);
  if (q->w_owned) tpu_weights_free(q->w);
  free(q->bias_copy);
  free(q->inv_smooth);
  free(q->xs);
  free(q->xq);
  free(q->xq_scales);
  free(q->obs_w);
}

static int is_num(tpu_graph_dtype_t d) {
  return d == TPU_GRAPH_FP32 || d == TPU_GRAPH_FP64 || d == TPU_GRAPH_INT32 ||
         d == TPU_GRAPH_INT64;
}

static tpu_status_t check_dtypes(tpu__prep_t *pc, tpu__step_t *s, size_t n) {
  for (size_t i = 0; i < n && i < s->nin; i++)
    if (s->in[i] && !is_num(s->in[i]->dtype))
      return tpu__prep_dtype(pc, s->in[i], "FP32, FP64, INT32 or INT64");
  return TPU_OK;
}

/* Packs w (k×n in `layout`, scaled by alpha) and compiles the plan for m rows. */
static tpu_status_t engine_setup(tpu__prep_t *pc, tpu__step_t *s, mm_t *q, const float *w,
                                 tpu_layout_t layout, double alpha, const float *bias) {
  const mm_t *sh = pc->shared;
  tpu_status_t st;
  q->layout = layout;
  q->w_alpha = alpha;
  q->w_folded = pc->fold_scale != NULL;
  q->w_smooth = pc->calib ? pc->calib->smooth : NULL;
  if (pc->calib && pc->calib->smooth && pc->calib->k != q->k)
    return tpu__prep_fail(pc, TPU_EINVAL, "calibration for node '%s' has %zu smoothing factors; "
                          "the node's inner dimension is %zu", pc->calib->node, pc->calib->k,
                          q->k);
  if (sh && sh->w && sh->layout == layout && sh->w_alpha == alpha && sh->w_folded == q->w_folded &&
      sh->w_smooth == q->w_smooth &&
      tpu_weights_k(sh->w) == q->k && tpu_weights_n(sh->w) == q->n &&
      tpu_weights_compute(sh->w) == pc->precision) {
    q->w = sh->w; /* packed once for every batch size */
  } else {
    float *scaled = NULL;
    const float *src = w;
    const float *fs = pc->fold_scale;
    const float *sm = pc->calib ? pc->calib->smooth : NULL;
    if (alpha != 1.0 || fs || sm) { /* alpha, a folded BatchNormalization per output channel,
                                     * SmoothQuant factors per input channel */
      scaled = malloc(q->k * q->n * sizeof *scaled);
      if (!scaled) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory packing weights");
      for (size_t i = 0; i < q->k * q->n; i++) {
        size_t j = layout == TPU_LAYOUT_NK ? i / q->k : i % q->n; /* the output channel */
        size_t kk = layout == TPU_LAYOUT_NK ? i % q->k : i / q->n; /* the input channel */
        scaled[i] = (float)(alpha * (fs ? fs[j] : 1.0f) * w[i] * (sm ? sm[kk] : 1.0f));
      }
      src = scaled;
    }
    tpu_weights_desc_t d = {.compute = pc->precision, .k = q->k, .n = q->n, .layout = layout,
                            .src_dtype = TPU_DTYPE_FP32, .src = src};
    /* Pre-quantized weights (tpu_graph_set_quantized) with scales along the output channels
     * (N: dimension 0 of [N][K], 1 of [K][N]) are packed as they are in INT8. */
    const tpu__xt_t *b = s->in[1];
    if (pc->precision == TPU_DTYPE_INT8 && alpha == 1.0 && !fs && !sm && b->qdata &&
        b->qaxis == (layout == TPU_LAYOUT_NK ? 0 : 1)) {
      d.src_dtype = TPU_DTYPE_INT8;
      d.src = b->qdata;
      d.src_scales = b->qscales;
    }
    st = tpu_weights_pack(pc->engine, &d, &q->w);
    if (st == TPU_OK && pc->observable && pc->precision == TPU_DTYPE_FP32 &&
        d.src_dtype == TPU_DTYPE_FP32) {
      /* what tpu_graph_program_observe shows calibration (FP32 programs only) */
      if (scaled) {
        q->obs_w = scaled;
        scaled = NULL;
      } else if ((q->obs_w = malloc(q->k * q->n * sizeof *q->obs_w))) {
        memcpy(q->obs_w, src, q->k * q->n * sizeof *q->obs_w);
      } else {
        free(scaled);
        return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory keeping weights for calibration");
      }
      s->param_bytes += q->k * q->n * sizeof(float);
    }
    free(scaled);
    if (st != TPU_OK)
      return tpu__prep_fail(pc, st, "packing %zux%zu weights in %s: %s", q->k, q->n,
                            tpu_dtype_name(pc->precision), tpu_strerror(st));
    q->w_owned = 1;
    size_t held = 0, tr = 0;
    tpu_weights_memory(pc->engine, pc->precision, d.src_dtype, q->k, q->n, &held, &tr);
    s->param_bytes += held;
  }
  s->packed_inputs |= UINT64_C(1) << 1; /* B lives in the packed weights now */
  float *folded = NULL;
  if (pc->fold_scale) { /* bias' = bias·scale + shift */
    if (!(folded = malloc(q->n * sizeof *folded)))
      return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
    for (size_t j = 0; j < q->n; j++)
      folded[j] = (bias ? bias[j] : 0.0f) * pc->fold_scale[j] + pc->fold_shift[j];
    bias = folded;
  }
  tpu_epilogue_t ep = {.bias = bias, .act = q->act, .out_dtype = TPU_DTYPE_FP32};
  tpu_dtype_t a_dtype = TPU_DTYPE_FP32;
  if (pc->calib) { /* INT8 with calibration: smoothing and/or a static activation scale */
    const tpu_graph_calib_t *cb = pc->calib;
    if (cb->smooth) {
      q->inv_smooth = malloc(q->k * sizeof *q->inv_smooth);
      q->xs = malloc(q->m * q->k * sizeof *q->xs);
      if (!q->inv_smooth || !q->xs) {
        free(folded);
        return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
      }
      for (size_t kk = 0; kk < q->k; kk++) {
        if (!(cb->smooth[kk] > 0) || !isfinite(cb->smooth[kk])) {
          free(folded);
          return tpu__prep_fail(pc, TPU_EINVAL, "calibration: smoothing factor %zu is %g; "
                                "expected finite and > 0", kk, (double)cb->smooth[kk]);
        }
        q->inv_smooth[kk] = 1.0f / cb->smooth[kk];
      }
      s->param_bytes += (q->k + q->m * q->k) * sizeof(float);
    }
    if (cb->act_scale > 0 && isfinite(cb->act_scale)) {
      q->act_scale = cb->act_scale;
      q->xq = malloc(q->m * q->k > 0 ? q->m * q->k : 1);
      q->xq_scales = malloc(q->m * sizeof *q->xq_scales);
      if (!q->xq || !q->xq_scales) {
        free(folded);
        return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
      }
      for (size_t i = 0; i < q->m; i++) q->xq_scales[i] = cb->act_scale;
      s->param_bytes += q->m * q->k + q->m * sizeof(float);
      a_dtype = TPU_DTYPE_INT8;
    }
  }
  st = tpu_plan_create(pc->engine, q->w, q->m, a_dtype, &ep, &q->plan);
  free(folded); /* the plan copied it */
  if (st != TPU_OK)
    return tpu__prep_fail(pc, st, "planning %zux%zux%zu: %s", q->m, q->k, q->n,
                          tpu_strerror(st));
  tpu_plan_cost(q->plan, &s->macs, &s->cycles, &s->slots);
  size_t plan = 0;
  tpu_plan_memory(pc->engine, pc->precision, q->k, q->n, q->m, a_dtype, &ep, &plan);
  s->param_bytes += plan;
  if (q->obs_w) {
    s->obs_w = q->obs_w;
    s->obs_layout = layout;
    s->obs_m = q->m;
    s->obs_k = q->k;
    s->obs_n = q->n;
  }
  snprintf(s->desc, sizeof s->desc, "engine plan %s%s%s [%zux%zux%zu]%s%s%s%s",
           tpu_dtype_name(pc->precision), q->inv_smooth ? " smoothed" : "",
           q->xq ? " static-scale" : "", q->m, q->k, q->n, bias ? " +bias" : "",
           pc->fold_scale ? " +batchnorm" : "",
           q->act != TPU_ACT_NONE ? " " : "", q->act != TPU_ACT_NONE ? tpu_act_name(q->act) : "");
  q->bias = NULL; /* the plan applies it */
  q->act = TPU_ACT_NONE;
  return TPU_OK;
}

/* On the reference path the fused bias is read at run time: keep a copy (the compiler may
 * release the initializer, tpu_graph_release_constants). */
static tpu_status_t own_bias(tpu__prep_t *pc, mm_t *q) {
  if (!q->bias) return TPU_OK;
  if (!(q->bias_copy = malloc(q->n * sizeof *q->bias_copy)))
    return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  memcpy(q->bias_copy, q->bias, q->n * sizeof *q->bias_copy);
  q->bias = q->bias_copy;
  return TPU_OK;
}

static void ref_cost(tpu__prep_t *pc, tpu__step_t *s, const mm_t *q) {
  tpu_engine_stats_t es;
  if (tpu_engine_stats(pc->engine, &es) != TPU_OK) return;
  uint64_t cyc = tpu_systolic_cycles(es.systolic_rows, es.systolic_cols, q->m, q->k, q->n);
  s->macs = (uint64_t)q->batches * q->m * q->k * q->n;
  s->cycles = (uint64_t)q->batches * cyc;
  s->slots = s->cycles * es.systolic_rows * es.systolic_cols;
  snprintf(s->desc, sizeof s->desc, "reference %s [%zux%zux%zu]%s", 
           tpu_graph_dtype_name(s->out[0]->dtype), q->m, q->k, q->n,
           q->batches > 1 ? " batched" : "");
}

/* out[i] = v as the output dtype. */
static void put(tpu__xt_t *o, size_t i, double v, int64_t iv) {
  switch (o->dtype) {
  case TPU_GRAPH_FP32: ((float *)o->data)[i] = (float)v; break;
  case TPU_GRAPH_FP64: ((double *)o->data)[i] = v; break;
  case TPU_GRAPH_INT32: ((int32_t *)o->data)[i] = (int32_t)(uint32_t)iv; break;
  case TPU_GRAPH_INT64: ((int64_t *)o->data)[i] = iv; break;
  default: break;
  }
}

/* The reference epilogue of FP32 outputs: the fused bias and activation. */
static void ref_epilogue(const mm_t *q, tpu__xt_t *o) {
  if (o->dtype != TPU_GRAPH_FP32 || !q->n) return;
  float *y = o->data;
  size_t rows = o->elems / q->n;
  if (q->bias)
    for (size_t r = 0; r < rows; r++)
      for (size_t j = 0; j < q->n; j++) y[r * q->n + j] += q->bias[j];
  if (q->act != TPU_ACT_NONE) tpu_act_apply(q->act, y, rows, q->n);
}

/* The engine path's run: the activation smoothed and statically quantized when calibrated. */
static tpu_status_t plan_run(tpu__run_ctx_t *rc, mm_t *q, const float *a, void *out) {
  const void *x = a;
  const float *scales = NULL;
  if (q->inv_smooth) {
    for (size_t i = 0; i < q->m; i++)
      for (size_t kk = 0; kk < q->k; kk++)
        q->xs[i * q->k + kk] = a[i * q->k + kk] * q->inv_smooth[kk];
    x = q->xs;
  }
  if (q->xq) { /* one static scale: round half to even, saturate at ±127 */
    const float *xf = x;
    float inv = 1.0f / q->act_scale;
    for (size_t i = 0; i < q->m * q->k; i++) {
      float v = rintf(xf[i] * inv);
      q->xq[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v != v ? 0 : v);
    }
    x = q->xq;
    scales = q->xq_scales;
  }
  tpu_status_t st = tpu_plan_run(q->plan, x, scales, out);
  if (st != TPU_OK) return tpu__run_fail(rc, st, "engine plan failed: %s", tpu_strerror(st));
  return TPU_OK;
}

/* ---- Gemm ---- */

static tpu_status_t gemm_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  tpu_status_t st = check_dtypes(pc, s, 3);
  if (st != TPU_OK) return st;
  mm_t *q = calloc(1, sizeof *q);
  if (!q) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  s->params = q;
  s->release = mm_release;
  s->param_bytes = sizeof *q;
  const tpu__xt_t *a = s->in[0], *b = s->in[1], *c = s->nin > 2 ? s->in[2] : NULL;
  q->trans_a = tpu__attr_i(pc, "transA", 0) != 0;
  q->trans_b = tpu__attr_i(pc, "transB", 0) != 0;
  q->alpha = tpu__attr_f(pc, "alpha", 1.0f);
  q->beta = tpu__attr_f(pc, "beta", 1.0f);
  q->m = (size_t)(q->trans_a ? a->dims[1] : a->dims[0]);
  q->k = (size_t)(q->trans_a ? a->dims[0] : a->dims[1]);
  q->n = (size_t)(q->trans_b ? b->dims[0] : b->dims[1]);
  q->batches = 1;
  q->act = pc->fuse_act;
  q->bias = pc->fuse_bias ? pc->fuse_bias->data : NULL;
  if (c) {
    int64_t cm = c->rank == 2 ? c->dims[0] : 1, cn = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
    q->c_rs = cm == 1 ? 0 : (size_t)cn;
    q->c_cs = cn == 1 ? 0 : 1;
    q->c_after = 1;
  }
  int engine = a->dtype == TPU_GRAPH_FP32 && b->dtype == TPU_GRAPH_FP32 && b->is_const &&
               !q->trans_a && q->m && q->k && q->n && (!c || c->dtype == TPU_GRAPH_FP32);
  if (!engine) {
    if (pc->fold_scale) /* the compiler folds only what the engine path takes */
      return tpu__prep_fail(pc, TPU_EINVAL, "internal: a folded BatchNormalization on the "
                            "reference path");
    ref_cost(pc, s, q);
    return own_bias(pc, q);
  }
  float *bias = NULL;
  if (c && c->is_const && (c->elems == 1 || c->elems == q->n) && q->c_rs == 0) {
    bias = malloc(q->n * sizeof *bias);
    if (!bias) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
    const float *cv = c->data;
    for (size_t j = 0; j < q->n; j++) bias[j] = (float)(q->beta * cv[c->elems == 1 ? 0 : j]);
    q->c_after = 0;
    s->packed_inputs |= UINT64_C(1) << 2; /* C is the epilogue's bias */
  }
  st = engine_setup(pc, s, q, b->data, q->trans_b ? TPU_LAYOUT_NK : TPU_LAYOUT_KN, q->alpha,
                    bias ? bias : q->bias);
  free(bias);
  return st;
}

static tpu_status_t gemm_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  mm_t *q = s->params;
  const tpu__xt_t *a = s->in[0], *b = s->in[1], *c = s->nin > 2 ? s->in[2] : NULL;
  tpu__xt_t *o = s->out[0];
  if (q->plan) {
    tpu_status_t st = plan_run(rc, q, a->data, o->data);
    if (st != TPU_OK) return st;
    if (q->c_after) { /* FP32 only on this path */
      float *y = o->data;
      const float *cv = c->data;
      for (size_t i = 0; i < q->m; i++)
        for (size_t j = 0; j < q->n; j++)
          y[i * q->n + j] += (float)(q->beta * cv[i * q->c_rs + j * q->c_cs]);
    }
    return TPU_OK;
  }
  int ints = o->dtype == TPU_GRAPH_INT32 || o->dtype == TPU_GRAPH_INT64;
  for (size_t i = 0; i < q->m; i++)
    for (size_t j = 0; j < q->n; j++) {
      double acc = 0;
      int64_t iacc = 0;
      for (size_t kk = 0; kk < q->k; kk++) {
        size_t ai = q->trans_a ? kk * q->m + i : i * q->k + kk;
        size_t bi = q->trans_b ? j * q->k + kk : kk * q->n + j;
        if (ints)
          iacc = (int64_t)((uint64_t)iacc + (uint64_t)tpu__xt_get_i64(a, ai) *
                                                (uint64_t)tpu__xt_get_i64(b, bi));
        else
          acc += tpu__xt_get_f64(a, ai) * tpu__xt_get_f64(b, bi);
      }
      double v = q->alpha * acc;
      if (ints) { /* alpha·acc + beta·C in double, saturated into int64 (no UB on overflow) */
        v = q->alpha * (double)iacc;
        if (c) v += q->beta * (double)tpu__xt_get_i64(c, i * q->c_rs + j * q->c_cs);
      } else if (c) {
        v += q->beta * tpu__xt_get_f64(c, i * q->c_rs + j * q->c_cs);
      }
      int64_t iv = 0;
      if (ints)
        iv = !(v == v) ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX
                          : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
      put(o, i * q->n + j, v, iv);
    }
  ref_epilogue(q, o);
  return TPU_OK;
}

/* ---- MatMul ---- */

static tpu_status_t matmul_prepare(tpu__prep_t *pc, tpu__step_t *s) {
  tpu_status_t st = check_dtypes(pc, s, 2);
  if (st != TPU_OK) return st;
  mm_t *q = calloc(1, sizeof *q);
  if (!q) return tpu__prep_fail(pc, TPU_ENOMEM, "out of memory");
  s->params = q;
  s->release = mm_release;
  s->param_bytes = sizeof *q;
  const tpu__xt_t *a = s->in[0], *b = s->in[1];
  q->alpha = 1;
  q->act = pc->fuse_act;
  q->bias = pc->fuse_bias ? pc->fuse_bias->data : NULL;
  q->k = (size_t)a->dims[a->rank - 1];
  q->m = a->rank >= 2 ? (size_t)a->dims[a->rank - 2] : 1;
  q->n = b->rank >= 2 ? (size_t)b->dims[b->rank - 1] : 1;
  if (a->dtype == TPU_GRAPH_FP32 && b->dtype == TPU_GRAPH_FP32 && b->is_const && b->rank == 2 &&
      q->k && q->n && a->elems) {
    q->m = a->elems / q->k; /* every leading dimension of A is a row */
    q->batches = 1;
    return engine_setup(pc, s, q, b->data, TPU_LAYOUT_KN, 1.0, q->bias);
  }
  if (pc->fold_scale)
    return tpu__prep_fail(pc, TPU_EINVAL, "internal: a folded BatchNormalization on the "
                          "reference path");
  /* Batch dims: A's and B's leading dims, broadcast to the output's. */
  int ra = a->rank >= 2 ? a->rank - 2 : 0, rb = b->rank >= 2 ? b->rank - 2 : 0;
  int r = ra > rb ? ra : rb;
  size_t sa = 1, sb = 1;
  size_t astr[TPU_GRAPH_MAX_RANK] = {0}, bstr[TPU_GRAPH_MAX_RANK] = {0};
  for (int d = r - 1; d >= 0; d--) {
    int da = d - (r - ra), db = d - (r - rb);
    int64_t xa = da >= 0 ? a->dims[da] : 1, xb = db >= 0 ? b->dims[db] : 1;
    q->bdims[d] = xa == 1 ? xb : xa;
    astr[d] = xa == 1 ? 0 : sa;
    bstr[d] = xb == 1 ? 0 : sb;
    if (da >= 0) sa *= (size_t)xa;
    if (db >= 0) sb *= (size_t)xb;
  }
  q->rank = r;
  memcpy(q->astr, astr, sizeof astr);
  memcpy(q->bstr, bstr, sizeof bstr);
  q->batches = 1;
  for (int d = 0; d < r; d++) q->batches *= (size_t)q->bdims[d];
  ref_cost(pc, s, q);
  return own_bias(pc, q);
}

static tpu_status_t matmul_run(tpu__run_ctx_t *rc, tpu__step_t *s) {
  mm_t *q = s->params;
  const tpu__xt_t *a = s->in[0], *b = s->in[1];
  tpu__xt_t *o = s->out[0];
  if (q->plan) return plan_run(rc, q, a->data, o->data);
  int ints = o->dtype == TPU_GRAPH_INT32 || o->dtype == TPU_GRAPH_INT64;
  size_t mk = q->m * q->k, kn = q->k * q->n, mn = q->m * q->n;
  if (a->dtype == TPU_GRAPH_FP32 && b->dtype == TPU_GRAPH_FP32) { /* the common case, typed */
    const float *av = a->data, *bv = b->data;
    float *ov = o->data;
    for (size_t bt = 0; bt < q->batches; bt++) {
      size_t ao = 0, bo = 0, rem = bt;
      for (int d = q->rank - 1; d >= 0; d--) {
        size_t idx = rem % (size_t)q->bdims[d];
        rem /= (size_t)q->bdims[d];
        ao += idx * q->astr[d];
        bo += idx * q->bstr[d];
      }
      const float *am = av + ao * mk, *bm = bv + bo * kn;
      float *om = ov + bt * mn;
      for (size_t i = 0; i < q->m; i++)
        for (size_t j = 0; j < q->n; j++) {
          double acc = 0;
          for (size_t kk = 0; kk < q->k; kk++)
            acc += (double)am[i * q->k + kk] * bm[kk * q->n + j];
          om[i * q->n + j] = (float)acc;
        }
    }
    ref_epilogue(q, o);
    return TPU_OK;
  }
  for (size_t bt = 0; bt < q->batches; bt++) {
    size_t ao = 0, bo = 0, rem = bt;
    for (int d = q->rank - 1; d >= 0; d--) {
      size_t idx = rem % (size_t)q->bdims[d];
      rem /= (size_t)q->bdims[d];
      ao += idx * q->astr[d];
      bo += idx * q->bstr[d];
    }
    for (size_t i = 0; i < q->m; i++)
      for (size_t j = 0; j < q->n; j++) {
        double acc = 0;
        uint64_t iacc = 0;
        for (size_t kk = 0; kk < q->k; kk++) {
          size_t ai = ao * mk + i * q->k + kk, bi = bo * kn + kk * q->n + j;
          if (ints)
            iacc += (uint64_t)tpu__xt_get_i64(a, ai) * (uint64_t)tpu__xt_get_i64(b, bi);
          else
            acc += tpu__xt_get_f64(a, ai) * tpu__xt_get_f64(b, bi);
        }
        put(o, bt * mn + i * q->n + j, acc, (int64_t)iacc);
      }
  }
  ref_epilogue(q, o);
  return TPU_OK;
}

const tpu__kernel_t tpu__kernels_matmul[] = {
    {"Gemm", gemm_prepare, gemm_run},
    {"MatMul", matmul_prepare, matmul_run},
    {NULL, NULL, NULL},
};
