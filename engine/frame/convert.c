/*
 * convert.c - BF16 conversion and symmetric INT8 quantization.
 *
 * DESIGN
 * Pure functions on caller memory; they allocate nothing and keep no state. On an error return
 * the output buffers may have been partly written (rows before the offending one): callers
 * must not use them. Rounding is
 * implemented with integer and exact float operations, so results do not depend on the
 * floating-point environment's rounding mode.
 */
#include <math.h>

#include "tpu_internal.h"

uint16_t tpu_bf16_from_fp32(float x) { return tpu__bf16_rne(x); }

float tpu_bf16_to_fp32(uint16_t x) { return tpu__bf16_widen(x); }

void tpu_bf16_from_fp32_n(uint16_t *dst, const float *src, size_t n) {
  if (!dst || !src) return;
  for (size_t i = 0; i < n; i++) dst[i] = tpu__bf16_rne(src[i]);
}

void tpu_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n) {
  if (!dst || !src) return;
  for (size_t i = 0; i < n; i++) dst[i] = tpu__bf16_widen(src[i]);
}

tpu_status_t tpu__quantize_row(const float *x, size_t cols, int8_t *q, float *scale) {
  float amax = 0.0f;
  for (size_t c = 0; c < cols; c++) {
    float a = fabsf(x[c]);
    if (!(a <= 3.40282347e38f)) return TPU_ERANGE; /* Inf or NaN */
    if (a > amax) amax = a;
  }
  float s = tpu__quant_scale(amax);
  for (size_t c = 0; c < cols; c++) q[c] = tpu__sat_i8(x[c] / s);
  *scale = s;
  return TPU_OK;
}

tpu_status_t tpu_quantize_rows(const float *x, size_t rows, size_t cols, int8_t *q,
                               float *scale) {
  size_t total;
  if (!x || !q || !scale || rows == 0 || cols == 0) return TPU_EINVAL;
  if (__builtin_mul_overflow(rows, cols, &total)) return TPU_EOVERFLOW;
  for (size_t r = 0; r < rows; r++) {
    tpu_status_t st = tpu__quantize_row(x + r * cols, cols, q + r * cols, &scale[r]);
    if (st != TPU_OK) return st;
  }
  return TPU_OK;
}

tpu_status_t tpu_dequantize_rows(const int8_t *q, size_t rows, size_t cols, const float *scale,
                                 float *x) {
  size_t total;
  if (!q || !scale || !x || rows == 0 || cols == 0) return TPU_EINVAL;
  if (__builtin_mul_overflow(rows, cols, &total)) return TPU_EOVERFLOW;
  for (size_t r = 0; r < rows; r++)
    if (!tpu__positive_finite(scale[r])) return TPU_ERANGE;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) x[r * cols + c] = (float)q[r * cols + c] * scale[r];
  return TPU_OK;
}
