/*
 * vmath_check.h - the exact values the vector math is measured against, and the error measure
 * (shared by tests/engine/test_vmath.c, which samples, and bench/vmath_check.c, which tries
 * every binary32 input).
 *
 * DESIGN
 * The reference of each function is evaluated in double with glibc's double functions (each
 * within about 1 ulp of double, so within 2^-28 ulp of binary32: "exact" here). The error of a
 * binary32 result y against the exact r is |y - r| in units of r's binary32 ulp (2^(e-23) for
 * r in [2^e, 2^(e+1)); 2^-149 below 2^-126, the subnormal spacing). A result that should be NaN
 * and is not, or is NaN and should not be, or is infinite where r is finite in binary32 (or
 * the reverse) counts as an infinite error.
 */
#ifndef TPU_VMATH_CHECK_H
#define TPU_VMATH_CHECK_H

#include <float.h>
#include <math.h>

#include "tpu_kernels.h"

static const char *const vc_names[TPU__VF_COUNT] = {"exp", "tanh", "sigmoid", "erf", "gelu",
                                                    "gelu_tanh"};

/* The documented maximum errors of engine/kernels/vmath.h, in ulp (vector sets), and what the
 * ref set's libm functions are held to. */
static const double vc_bound[TPU__VF_COUNT] = {1, 1.5, 2.5, 1.5, 5, 4};
#define VC_REF_BOUND 2.5

static inline double vc_exact(tpu__vfn_t f, float xf) {
  double x = xf;
  if ((f == TPU__VF_GELU || f == TPU__VF_GELU_TANH) && x == -INFINITY) return -0.0; /* limits */
  switch (f) {
  case TPU__VF_EXP: return exp(x);
  case TPU__VF_TANH: return tanh(x);
  case TPU__VF_SIGMOID: return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
  case TPU__VF_ERF: return erf(x);
  case TPU__VF_GELU: return 0.5 * x * erfc(-x * 0.70710678118654752440);
  case TPU__VF_GELU_TANH: {
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
  }
  case TPU__VF_COUNT: break;
  }
  return NAN;
}

/* Error of y against r in binary32 ulp of r (see above). */
static inline double vc_ulp_err(float y, double r) {
  if (r != r || y != y) return (r != r && y != y) ? 0 : INFINITY;
  float rf = (float)r; /* binary32 overflow of the exact value: must be ±Inf */
  if (isinf(rf) || isinf(y)) return rf == y ? 0 : INFINITY;
  double a = fabs(r);
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  double ulp = a < FLT_MIN ? ldexp(1.0, -149) : ldexp(1.0, e - 1 - 23);
  return fabs((double)y - r) / ulp;
}

#endif /* TPU_VMATH_CHECK_H */
