/*
 * plan.c - plans: one static shape against packed weights, compiled once, run many times.
 *
 * DESIGN
 * tpu_plan_create makes every decision and every allocation: it validates the shape and the
 * epilogue, copies the bias, sizes the scratch for converting FP32 input (to BF16, or to INT8
 * with per-row scales), the FP32 rows softmax needs before a BF16/INT8 store, the kernels'
 * per-thread workspaces, the split over threads and the statistics one run adds. tpu_plan_run
 * then converts A, calls the kernel set's gemm on disjoint blocks of C (on the engine's pool for
 * large plans), applies softmax to whole rows, and accounts the call. It allocates nothing and
 * must never be run by two threads at once on the same plan (the scratch is the plan's).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"

struct tpu_plan {
  tpu_engine_t *engine;
  const tpu_weights_t *w;
  const tpu__dtype_kernels_t *kern;
  size_t m;
  tpu_dtype_t a_dtype, out_dtype;
  tpu_act_t act;
  float out_scale;
  float *bias;      /* n floats or NULL */
  void *a_conv;     /* [m][k] of the compute dtype when a_dtype is FP32 and compute is not */
  float *a_scales;  /* m scales when FP32 input is quantized */
  float *y;         /* [m][n] FP32 rows for softmax before a BF16/INT8 store, else NULL */
  char *ws;         /* nparts workspaces of ws_stride bytes */
  size_t ws_stride;
  unsigned nparts;  /* 1: run on the calling thread; else the pool's thread count */
  int split_rows;   /* parallel split over rows (else over columns) */
  tpu__plan_stats_t stats;  /* runs, and what each adds to the engine's statistics */
  int attached;             /* stats linked into the engine (the plan was created whole) */
  tpu__gemm_args_t args;        /* a, a_scales and c are filled in per run */
};

static tpu_status_t check_epilogue(const tpu_epilogue_t *ep, const tpu_weights_t *w) {
  if ((unsigned)ep->act >= (unsigned)TPU_ACT_COUNT) return TPU_EINVAL;
  switch (ep->out_dtype) {
  case TPU_DTYPE_FP32:
    break;
  case TPU_DTYPE_BF16:
    if (w->compute != TPU_DTYPE_BF16) return TPU_EDTYPE;
    break;
  case TPU_DTYPE_INT8:
    if (w->compute != TPU_DTYPE_INT8) return TPU_EDTYPE;
    if (!tpu__positive_finite(ep->out_scale)) return TPU_EINVAL;
    break;
  case TPU_DTYPE_INT32:
    if (w->compute != TPU_DTYPE_INT8) return TPU_EDTYPE;
    /* Raw accumulators: nothing may shift, scale or bend them. */
    if (ep->bias || ep->act != TPU_ACT_NONE) return TPU_EINVAL;
    break;
  default:
    return TPU_EDTYPE;
  }
  /* out_scale means something for INT8 output only; a value elsewhere is a caller's mistake. */
  if (ep->out_dtype != TPU_DTYPE_INT8 && ep->out_scale != 0.0f) return TPU_EINVAL;
  /* INT8 weights packed without scales (tpu_matmul) only make raw accumulators. */
  if (w->compute == TPU_DTYPE_INT8 && !w->scales && ep->out_dtype != TPU_DTYPE_INT32)
    return TPU_EINVAL;
  return TPU_OK;
}

/* Systolic-model cost of one run; TPU_EOVERFLOW when it does not fit uint64. */
static tpu_status_t model_cost(const tpu_engine_t *e, size_t m, size_t k, size_t n,
                               uint64_t *macs, uint64_t *cycles, uint64_t *slots) {
  if (__builtin_mul_overflow((uint64_t)m, (uint64_t)k, macs) ||
      __builtin_mul_overflow(*macs, (uint64_t)n, macs))
    return TPU_EOVERFLOW;
  *cycles = tpu_systolic_cycles(e->rows, e->cols, m, k, n);
  if (*cycles == 0) return TPU_EOVERFLOW; /* every argument is ≥ 1: 0 means overflow */
  if (__builtin_mul_overflow(*cycles, (uint64_t)e->rows, slots) ||
      __builtin_mul_overflow(*slots, (uint64_t)e->cols, slots))
    return TPU_EOVERFLOW;
  return TPU_OK;
}

/* Sizes the scratch in bytes, each term overflow-checked. */
static int add_bytes(size_t *total, size_t count, size_t size) {
  size_t b;
  if (__builtin_mul_overflow(count, size, &b)) return -1;
  b = (b + TPU__KERNEL_ALIGN - 1) & ~(size_t)(TPU__KERNEL_ALIGN - 1);
  return __builtin_add_overflow(*total, b, total) ? -1 : 0;
}

/* What a plan allocates, in bytes per buffer (0: none); the one place that sizes them, for
 * tpu_plan_create and tpu_plan_memory alike. */
typedef struct {
  size_t bias, a_conv, a_scales, y, ws_stride, ws;
  unsigned nparts;
} plan_sizes_t;

static tpu_status_t plan_sizes(const tpu_engine_t *e, const tpu__dtype_kernels_t *kern,
                               tpu_dtype_t compute, size_t m, size_t k, size_t n,
                               tpu_dtype_t a_dtype, const tpu_epilogue_t *ep, uint64_t macs,
                               plan_sizes_t *z) {
  memset(z, 0, sizeof *z);
  z->nparts = e->pool && macs >= TPU__PAR_MIN_MACS ? tpu__pool_threads(e->pool) : 1;
  if (ep->bias && add_bytes(&z->bias, n, sizeof(float))) return TPU_EOVERFLOW;
  if (a_dtype != compute) {
    if (add_bytes(&z->a_conv, m * k, tpu_dtype_size(compute))) return TPU_EOVERFLOW;
    if (compute == TPU_DTYPE_INT8 && add_bytes(&z->a_scales, m, sizeof(float)))
      return TPU_EOVERFLOW;
  }
  if (ep->act == TPU_ACT_SOFTMAX && ep->out_dtype != TPU_DTYPE_FP32 &&
      add_bytes(&z->y, m * n, sizeof(float)))
    return TPU_EOVERFLOW;
  size_t ws = kern->ws_size ? kern->ws_size(k) : 0;
  if (ws && (add_bytes(&z->ws_stride, ws, 1) || add_bytes(&z->ws, z->nparts, z->ws_stride)))
    return TPU_EOVERFLOW;
  return TPU_OK;
}

tpu_status_t tpu_plan_memory(const tpu_engine_t *engine, tpu_dtype_t compute, size_t k,
                             size_t n, size_t m, tpu_dtype_t a_dtype, const tpu_epilogue_t *ep,
                             size_t *bytes) {
  static const tpu_epilogue_t plain = {.bias = NULL, .act = TPU_ACT_NONE,
                                       .out_dtype = TPU_DTYPE_FP32, .out_scale = 0.0f};
  if (!engine || !bytes) return TPU_EINVAL;
  if (compute != TPU_DTYPE_FP32 && compute != TPU_DTYPE_BF16 && compute != TPU_DTYPE_INT8)
    return TPU_EDTYPE;
  if (!ep) ep = &plain;
  tpu_status_t st = tpu__check_dims(m, k, n);
  if (st != TPU_OK) return st;
  uint64_t macs, cycles, slots;
  if ((st = model_cost(engine, m, k, n, &macs, &cycles, &slots)) != TPU_OK) return st;
  plan_sizes_t z;
  st = plan_sizes(engine, &engine->ks->dt[compute], compute, m, k, n, a_dtype, ep, macs, &z);
  if (st != TPU_OK) return st;
  size_t total = sizeof(tpu_plan_t);
  if (__builtin_add_overflow(total, z.bias, &total) ||
      __builtin_add_overflow(total, z.a_conv, &total) ||
      __builtin_add_overflow(total, z.a_scales, &total) ||
      __builtin_add_overflow(total, z.y, &total) || __builtin_add_overflow(total, z.ws, &total))
    return TPU_EOVERFLOW;
  *bytes = total;
  return TPU_OK;
}

tpu_status_t tpu_plan_cost(const tpu_plan_t *plan, uint64_t *macs, uint64_t *cycles,
                           uint64_t *slots) {
  if (!plan) return TPU_EINVAL;
  if (macs) *macs = plan->stats.macs;
  if (cycles) *cycles = plan->stats.cycles;
  if (slots) *slots = plan->stats.slots;
  return TPU_OK;
}

tpu_status_t tpu_plan_create(tpu_engine_t *engine, const tpu_weights_t *w, size_t m,
                             tpu_dtype_t a_dtype, const tpu_epilogue_t *ep, tpu_plan_t **out) {
  static const tpu_epilogue_t plain = {.bias = NULL, .act = TPU_ACT_NONE,
                                       .out_dtype = TPU_DTYPE_FP32, .out_scale = 0.0f};
  tpu_plan_t *p = NULL;
  tpu_status_t st;
  if (!out) return TPU_EINVAL;
  *out = NULL;
  if (!engine || !w) return TPU_EINVAL;
  if (w->ks != engine->ks) return TPU_EINVAL; /* packed for another kernel set */
  if (!ep) ep = &plain;
  size_t k = w->k, n = w->n;
  st = tpu__check_dims(m, k, n);
  if (st != TPU_OK) return st;
  if (a_dtype != TPU_DTYPE_FP32 && a_dtype != w->compute) return TPU_EDTYPE;
  st = check_epilogue(ep, w);
  if (st != TPU_OK) return st;

  uint64_t macs, cycles, slots;
  st = model_cost(engine, m, k, n, &macs, &cycles, &slots);
  if (st != TPU_OK) return st;

  p = calloc(1, sizeof *p);
  if (!p) return TPU_ENOMEM;
  p->engine = engine;
  p->w = w;
  p->kern = w->kern;
  p->m = m;
  p->a_dtype = a_dtype;
  p->out_dtype = ep->out_dtype;
  p->act = ep->act;
  p->out_scale = ep->out_scale;
  p->stats.macs = macs;
  p->stats.cycles = cycles;
  p->stats.slots = slots;
  plan_sizes_t z;
  st = plan_sizes(engine, w->kern, w->compute, m, k, n, a_dtype, ep, macs, &z);
  if (st != TPU_OK) goto fail;
  p->nparts = z.nparts;
  size_t mr = p->kern->mr ? p->kern->mr : 1;
  p->split_rows = (m + mr - 1) / mr >= p->nparts;

  st = TPU_ENOMEM;
  if (z.bias) {
    p->bias = malloc(z.bias);
    if (!p->bias) goto fail;
    for (size_t j = 0; j < n; j++) p->bias[j] = ep->bias[j];
  }
  if (z.a_conv && !(p->a_conv = tpu__aligned_alloc(z.a_conv))) goto fail;
  if (z.a_scales && !(p->a_scales = malloc(z.a_scales))) goto fail;
  if (z.y && !(p->y = tpu__aligned_alloc(z.y))) goto fail;
  p->ws_stride = z.ws_stride;
  if (z.ws && !(p->ws = tpu__aligned_alloc(z.ws))) goto fail;

  p->args = (tpu__gemm_args_t){
      .m = m,
      .k = k,
      .n = n,
      .w = w->packed,
      .w_scales = w->scales,
      .bias = p->bias,
      /* Softmax needs whole rows: the kernel stores FP32 y and the frame finishes the rows. */
      .act = ep->act == TPU_ACT_SOFTMAX ? TPU_ACT_NONE : ep->act,
      .out_dtype = ep->act == TPU_ACT_SOFTMAX ? TPU_DTYPE_FP32 : ep->out_dtype,
      .out_scale = ep->out_scale,
      .ldc = n,
  };
  tpu__engine_plan_attach(engine, &p->stats);
  p->attached = 1;
  *out = p;
  return TPU_OK;

fail:
  tpu_plan_free(p);
  return st;
}

void tpu_plan_free(tpu_plan_t *plan) {
  if (!plan) return;
  if (plan->attached) tpu__engine_plan_detach(plan->engine, &plan->stats);
  free(plan->bias);
  free(plan->a_conv);
  free(plan->a_scales);
  free(plan->y);
  free(plan->ws);
  free(plan);
}

size_t tpu_plan_m(const tpu_plan_t *plan) { return plan ? plan->m : 0; }

/* [lo, hi) of part `part` of `nparts` over `total` items handed out in grains of `grain`. */
static void split(size_t total, size_t grain, unsigned part, unsigned nparts, size_t *lo,
                  size_t *hi) {
  size_t grains = (total + grain - 1) / grain;
  size_t g0 = grains * part / nparts, g1 = grains * (part + 1) / nparts;
  *lo = g0 * grain < total ? g0 * grain : total;
  *hi = g1 * grain < total ? g1 * grain : total;
}

/* One part of a run: a block of whole rows or whole columns, with its own workspace. */
static void run_part(void *arg, unsigned part, unsigned nparts) {
  tpu_plan_t *p = arg;
  const tpu__gemm_args_t *a = &p->args;
  size_t m0 = 0, m1 = a->m, n0 = 0, n1 = a->n;
  if (p->split_rows)
    split(a->m, p->kern->mr ? p->kern->mr : 1, part, nparts, &m0, &m1);
  else
    split(a->n, p->kern->nr ? p->kern->nr : 1, part, nparts, &n0, &n1);
  if (m0 < m1 && n0 < n1)
    p->kern->gemm(a, m0, m1, n0, n1, p->ws ? p->ws + part * p->ws_stride : NULL);
}

tpu_status_t tpu_plan_run(tpu_plan_t *p, const void *a, const float *a_scales, void *c) {
  if (!p || !a || !c) return TPU_EINVAL;
  size_t m = p->m, k = p->args.k, n = p->args.n;
  tpu_dtype_t compute = p->w->compute;

  /* Prologue: A in the compute dtype, and its row scales for INT8. */
  if (p->a_dtype == TPU_DTYPE_INT8 && p->out_dtype != TPU_DTYPE_INT32) {
    if (!a_scales) return TPU_EINVAL;
    for (size_t i = 0; i < m; i++)
      if (!tpu__positive_finite(a_scales[i])) return TPU_ERANGE;
  }
  p->args.a = a;
  p->args.a_scales = p->a_dtype == TPU_DTYPE_INT8 ? a_scales : NULL;
  if (p->a_dtype != compute) {
    if (compute == TPU_DTYPE_BF16) {
      tpu_bf16_from_fp32_n(p->a_conv, a, m * k);
    } else { /* INT8 */
      /* per row, by the kernel set's vector quantizer (the reference's bits) */
      tpu_status_t (*qrow)(const float *, size_t, int8_t *, float *) =
          p->engine->ks->vec->quantize_row ? p->engine->ks->vec->quantize_row
                                           : tpu__quantize_row;
      for (size_t i = 0; i < m; i++) {
        tpu_status_t st = qrow((const float *)a + i * k, k, (int8_t *)p->a_conv + i * k,
                               &p->a_scales[i]);
        if (st != TPU_OK) return st;
      }
      p->args.a_scales = p->a_scales;
    }
    p->args.a = p->a_conv;
  }
  p->args.c = p->y ? (void *)p->y : c;

  if (p->nparts == 1) /* small plans: the whole of C on this thread, no split to compute */
    p->kern->gemm(&p->args, 0, m, 0, n, p->ws);
  else if (!tpu__pool_run(p->engine->pool, run_part, p))
    run_part(p, 0, 1);

  if (p->act == TPU_ACT_SOFTMAX) {
    float *y = p->args.c;
    p->engine->ks->vec->softmax(y, m, n);
    if (p->out_dtype == TPU_DTYPE_BF16) {
      tpu_bf16_from_fp32_n(c, y, m * n);
    } else if (p->out_dtype == TPU_DTYPE_INT8) {
      int8_t *q = c;
      for (size_t i = 0; i < m * n; i++) q[i] = tpu__requantize(y[i], p->out_scale);
    }
  }
  tpu__plan_stats_count(&p->stats);
  return TPU_OK;
}
