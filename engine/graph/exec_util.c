/*
 * exec_util.c - helpers the graph compiler and the op kernels share: failure messages,
 * attribute lookups with defaults, element access of any dtype, and the kernel lookup.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "exec_internal.h"
#include "tpu_internal.h"

tpu_status_t tpu__prep_fail(tpu__prep_t *pc, tpu_status_t st, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tpu__graph_fail(pc->g, st, "%s: %s", pc->label, msg);
}

tpu_status_t tpu__run_fail(tpu__run_ctx_t *rc, tpu_status_t st, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (rc->err && rc->errlen)
    snprintf(rc->err, rc->errlen, "%s: %s", rc->step ? rc->step->label : "graph", msg);
  return st;
}

tpu_status_t tpu__prep_dtype(tpu__prep_t *pc, const tpu__xt_t *t, const char *takes) {
  return tpu__prep_fail(pc, TPU_ENOTSUP, "input '%s' is %s: this kernel takes %s", t->name,
                        tpu_graph_dtype_name(t->dtype), takes);
}

int64_t tpu__attr_i(const tpu__prep_t *pc, const char *name, int64_t def) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, name);
  return a && a->type == TPU_GRAPH_ATTR_INT ? a->i : def;
}

float tpu__attr_f(const tpu__prep_t *pc, const char *name, float def) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, name);
  return a && a->type == TPU_GRAPH_ATTR_FLOAT ? a->f : def;
}

const char *tpu__attr_s(const tpu__prep_t *pc, const char *name, const char *def) {
  const tpu_graph_attr_t *a = tpu_graph_attr(pc->g, pc->node, name);
  return a && a->type == TPU_GRAPH_ATTR_STRING ? a->s : def;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24);
    return sign ? -f : f;
  }
  uint32_t bits = exp == 31 ? sign | 0x7f800000u | (man << 13)
                            : sign | ((exp + 112) << 23) | (man << 13);
  memcpy(&f, &bits, sizeof f);
  return f;
}

double tpu__xt_get_f64(const tpu__xt_t *t, size_t i) {
  const unsigned char *p = t->data;
  switch (t->dtype) {
  case TPU_GRAPH_FP32: {
    float v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  case TPU_GRAPH_FP64: {
    double v;
    memcpy(&v, p + 8 * i, 8);
    return v;
  }
  case TPU_GRAPH_FP16: {
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    return half_to_float(v);
  }
  case TPU_GRAPH_BF16: {
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    return tpu_bf16_to_fp32(v);
  }
  case TPU_GRAPH_INT64: {
    int64_t v;
    memcpy(&v, p + 8 * i, 8);
    return (double)v;
  }
  case TPU_GRAPH_INT32: {
    int32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  case TPU_GRAPH_INT8: return (int8_t)p[i];
  case TPU_GRAPH_UINT8: return p[i];
  case TPU_GRAPH_BOOL: return p[i] != 0;
  default: return 0;
  }
}

int64_t tpu__xt_get_i64(const tpu__xt_t *t, size_t i) {
  const unsigned char *p = t->data;
  switch (t->dtype) {
  case TPU_GRAPH_INT64: {
    int64_t v;
    memcpy(&v, p + 8 * i, 8);
    return v;
  }
  case TPU_GRAPH_INT32: {
    int32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  case TPU_GRAPH_INT8: return (int8_t)p[i];
  case TPU_GRAPH_UINT8: return p[i];
  case TPU_GRAPH_BOOL: return p[i] != 0;
  default: {
    double d = tpu__xt_get_f64(t, i);
    if (!(d == d)) return 0;
    if (d >= 9.2e18) return INT64_MAX;
    if (d <= -9.2e18) return INT64_MIN;
    return (int64_t)d;
  }
  }
}

const tpu__kernel_t *tpu__graph_kernel(const char *op) {
  static const tpu__kernel_t *const tables[] = {tpu__kernels_elementwise, tpu__kernels_tensor,
                                                tpu__kernels_matmul, tpu__kernels_quant};
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
    for (const tpu__kernel_t *k = tables[t]; k->op; k++)
      if (strcmp(k->op, op) == 0) return k;
  return NULL;
}

const tpu__vec_kernels_t *tpu__prep_vec(const tpu__prep_t *pc) {
  return pc->engine && pc->engine->ks->vec ? pc->engine->ks->vec : &tpu__vec_ref;
}
