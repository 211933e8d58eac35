/*
 * vmath_ref.c - the reference vector math ("ref"): libm and the frame's scalar helpers, one
 * element at a time.
 *
 * DESIGN
 * This is what the vector sets are measured against in the tests, so it favours accuracy:
 * gelu, tanh and sigmoid are tpu__act_fp32 (the epilogue's reference, so a fused activation
 * equals the unfused op here too), exp and erf are libm's binary32 functions (within 1 ulp in
 * glibc), and gelu_tanh is evaluated in double as x·σ(2u), which has no cancellation.
 */
#include <math.h>

#include "tpu_kernels.h"

static float gelu_tanh_ref(float xf) {
  if (xf == -INFINITY) return -0.0f; /* the limit; the formula would give -Inf/Inf */
  double x = xf, u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  return (float)(x / (1.0 + exp(-2.0 * u)));
}

static void map_ref(tpu__vfn_t f, const float *x, float *y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    switch (f) {
    case TPU__VF_EXP: v = expf(v); break;
    case TPU__VF_TANH: v = tpu__act_fp32(TPU_ACT_TANH, v); break;
    case TPU__VF_SIGMOID: v = tpu__act_fp32(TPU_ACT_SIGMOID, v); break;
    case TPU__VF_ERF: v = erff(v); break;
    case TPU__VF_GELU: v = tpu__act_fp32(TPU_ACT_GELU, v); break;
    case TPU__VF_GELU_TANH: v = gelu_tanh_ref(v); break;
    case TPU__VF_COUNT: break;
    }
    y[i] = v;
  }
}

static void softmax_ref(float *x, size_t rows, size_t n) {
  for (size_t r = 0; r < rows; r++) tpu__softmax_row(x + r * n, n);
}

static void acc_f64_ref(double *acc, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) acc[i] += (double)x[i];
}

static void layernorm_ref(const float *x, size_t n, const float *scale, const float *bias,
                          double eps, float *y, double *mean_out, double *inv_out) {
  double sum = 0, var = 0;
  for (size_t k = 0; k < n; k++) sum += (double)x[k];
  double mean = sum / (double)n;
  for (size_t k = 0; k < n; k++) {
    double d = (double)x[k] - mean;
    var += d * d;
  }
  double inv = 1.0 / sqrt(var / (double)n + eps);
  for (size_t k = 0; k < n; k++) {
    double v = ((double)x[k] - mean) * inv;
    if (scale) v *= (double)scale[k];
    if (bias) v += (double)bias[k];
    y[k] = (float)v;
  }
  if (mean_out) *mean_out = mean;
  if (inv_out) *inv_out = inv;
}

const tpu__vec_kernels_t tpu__vec_ref = {
    .name = "tpu_vmath_ref_1",
    .map = map_ref,
    .softmax = softmax_ref,
    .acc_f64 = acc_f64_ref,
    .layernorm = layernorm_ref,
    .tree_perfect = tpu__tree_perfect_ref,
    .tree_decide = tpu__tree_decide_ref,
    .quantize_row = tpu__quantize_row,
};
