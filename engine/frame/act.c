/*
 * act.c - activations: names, the scalar reference of each, and row-wise softmax.
 *
 * DESIGN
 * tpu__act_fp32 is the reference every kernel set's epilogue is measured against, so it favours
 * accuracy over speed: gelu uses erfc in double (see below), sigmoid never overflows, softmax
 * subtracts the row maximum and sums in double. NaN inputs propagate.
 */
#include <math.h>
#include <string.h>

#include "tpu_internal.h"

static const char *const act_names[TPU_ACT_COUNT] = {
    [TPU_ACT_NONE] = "none",       [TPU_ACT_RELU] = "relu",       [TPU_ACT_GELU] = "gelu",
    [TPU_ACT_TANH] = "tanh",       [TPU_ACT_SIGMOID] = "sigmoid", [TPU_ACT_SOFTMAX] = "softmax",
};

const char *tpu_act_name(tpu_act_t act) {
  if ((unsigned)act >= (unsigned)TPU_ACT_COUNT) return NULL;
  return act_names[act];
}

tpu_status_t tpu_act_parse(const char *name, tpu_act_t *out) {
  if (!name || !out) return TPU_EINVAL;
  for (unsigned a = 0; a < TPU_ACT_COUNT; a++)
    if (strcmp(name, act_names[a]) == 0) {
      *out = (tpu_act_t)a;
      return TPU_OK;
    }
  return TPU_EINVAL;
}

float tpu__act_fp32(tpu_act_t act, float x) {
  switch (act) {
  case TPU_ACT_RELU:
    return x < 0.0f ? 0.0f : x; /* NaN falls through unchanged */
  case TPU_ACT_GELU:
    /* x·Φ(x) with Φ(x) = ½·erfc(-x/√2) = ½·(1 + erf(x/√2)): the same exact GELU, but erfc does
     * not cancel for negative x, where 1 + erff(x/√2) loses every digit below 1e-7. It runs in
     * double because the tail is ill-conditioned: a binary32 argument's rounding alone would
     * move erfc(6.6) by 5e-6 relative. This is the reference; ISA sets may approximate. */
    if (x == -INFINITY) return -0.0f; /* the limit; the formula would give -Inf·0 */
    return (float)(0.5 * x * erfc(-(double)x * 0.70710678118654752440));
  case TPU_ACT_TANH:
    return tanhf(x);
  case TPU_ACT_SIGMOID:
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    {
      float e = expf(x); /* x < 0 (or NaN): e ≤ 1, no overflow */
      return e / (1.0f + e);
    }
  case TPU_ACT_NONE:
  case TPU_ACT_SOFTMAX: /* whole rows only: see tpu__softmax_row */
  case TPU_ACT_COUNT:
    break;
  }
  return x;
}

void tpu__softmax_row(float *x, size_t n) {
  float mx = x[0];
  for (size_t j = 1; j < n; j++)
    if (x[j] > mx) mx = x[j];
  double sum = 0.0;
  for (size_t j = 0; j < n; j++) {
    x[j] = expf(x[j] - mx); /* ≤ 1; the maximum gives exactly 1, so sum ≥ 1 */
    sum += x[j];
  }
  double inv = 1.0 / sum;
  for (size_t j = 0; j < n; j++) x[j] = (float)(x[j] * inv);
}

tpu_status_t tpu_act_apply(tpu_act_t act, float *x, size_t rows, size_t cols) {
  size_t total;
  if (!x || rows == 0 || cols == 0 || (unsigned)act >= (unsigned)TPU_ACT_COUNT)
    return TPU_EINVAL;
  if (__builtin_mul_overflow(rows, cols, &total)) return TPU_EOVERFLOW;
  if (act == TPU_ACT_SOFTMAX) {
    for (size_t r = 0; r < rows; r++) tpu__softmax_row(x + r * cols, cols);
  } else if (act != TPU_ACT_NONE) {
    for (size_t i = 0; i < total; i++) x[i] = tpu__act_fp32(act, x[i]);
  }
  return TPU_OK;
}
