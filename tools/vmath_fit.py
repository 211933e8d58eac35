#!/usr/bin/python3
"""vmath_fit.py - the polynomial coefficients of the engine's vector math (engine/kernels/vmath.h).

Each approximation is fitted for minimal maximum relative error (Lawson's iteratively reweighted
least squares, which converges to the minimax fit) on a dense grid in double precision, then its
coefficients are rounded to binary32 and the fit's error with the rounded coefficients is
reported. The C code's own error (binary32 arithmetic, FMA evaluation) is measured by
tests/engine/test_vmath.c and bench/vmath_check.c; this script only says where the constants
come from.

  exp    e^r = 1 + r + r^2 * P(r),           |r| <= ln2/2 (after r = x - n*ln2)
  tanh   tanh(x) = x + x^3 * P(x^2),          0 <= x <= 0.625
  erf    erf(x) = x + x * P(x^2),             0 <= x <= 1 (P(0) = 2/sqrt(pi) - 1: its rounding
                                              costs 0.06 ulp where 2/sqrt(pi)'s would cost 1)
  erfcx  erfc(z) * e^(z^2) = P(t) / (z + 3),  t = (z - 3) / (z + 3), 0.95 <= z <= 4
  gelu   1/2 erfcx(a / sqrt 2) = P(t) / (a + 5), t = (a - 5) / (a + 5), 0.7 <= a <= 14.5
         (t = 1 / (z + K) needs large alternating coefficients whose Horner sums cancel)
         (gelu's negative tail in terms of |x| itself, so x / sqrt 2 is never rounded)

Degrees were chosen as the smallest with a fit error well under a quarter ulp; for erfcx the
degree and K by scanning (--scan).

usage: /usr/bin/python3 tools/vmath_fit.py [--scan]   prints C initializers
"""
import math
import sys

import numpy as np
from scipy import special


def lawson(basis, target, weight, iters=400):
    """Coefficients c minimising max |weight * (target - basis @ c)| (Lawson's algorithm)."""
    u = np.full(len(target), 1.0 / len(target))
    c = None
    for _ in range(iters):
        sw = np.sqrt(u) * weight
        c, *_ = np.linalg.lstsq(basis * sw[:, None], target * sw, rcond=None)
        e = np.abs(weight * (target - basis @ c))
        u = u * e
        s = u.sum()
        if s == 0:
            break
        u /= s
    return c


def as_f32(c):
    return [float(np.float32(v)) for v in c]


def report(name, coeffs, err):
    print(f"/* {name}: max relative error of the fit {err:.3g} ({err / 2**-24:.3f} binary32 ulp) */")
    print("{" + ", ".join(f"{v:.9g}f" for v in coeffs) + "}")


def fit_exp(deg=5):
    r = np.cos(np.linspace(0, math.pi, 20001)) * (math.log(2) / 2 * 1.01)
    f = (np.exp(r) - 1 - r) / r**2
    f[np.abs(r) < 1e-6] = 0.5 + r[np.abs(r) < 1e-6] / 6
    basis = np.vander(r, deg + 1, increasing=True)
    w = r**2 / np.exp(r)  # relative to e^r
    c = as_f32(lawson(basis, f, w))
    err = np.max(np.abs((1 + r + r**2 * (basis @ c)) - np.exp(r)) / np.exp(r))
    return c, err


def fit_tanh(deg=4, top=0.625):
    x = (np.cos(np.linspace(0, math.pi, 20001)) + 1) / 2 * top
    x = x[x > 1e-4]
    f = (np.tanh(x) - x) / x**3
    basis = np.vander(x * x, deg + 1, increasing=True)
    w = x**3 / np.tanh(x)
    c = as_f32(lawson(basis, f, w))
    err = np.max(np.abs(x + x**3 * (basis @ c) - np.tanh(x)) / np.tanh(x))
    return c, err


def fit_erf(deg=6, top=1.0):
    x = (np.cos(np.linspace(0, math.pi, 20001)) + 1) / 2 * top
    x = x[x > 1e-6]
    f = special.erf(x) / x - 1
    basis = np.vander(x * x, deg + 1, increasing=True)
    w = x / special.erf(x)
    c = as_f32(lawson(basis, f, w))
    err = np.max(np.abs(x + x * (basis @ c) - special.erf(x)) / special.erf(x))
    return c, err


def fit_erfcx(deg, k, lo, hi, scale=1.0):
    """P with P(t) / (z + k) = erfcx(z), t = (z - k) / (z + k), on [lo, hi]; with scale != 1
    the function is erfcx(z * scale) / 2 instead (gelu's tail in terms of |x|)."""
    z = lo + (np.cos(np.linspace(0, math.pi, 40001)) + 1) / 2 * (hi - lo)
    t = (z - k) / (z + k)
    g = special.erfcx(z * scale) * (0.5 if scale != 1.0 else 1.0)
    f = g * (z + k)
    basis = np.vander(t, deg + 1, increasing=True)
    c = as_f32(lawson(basis, f, 1 / f))
    err = np.max(np.abs((basis @ c) / (z + k) - g) / g)
    return c, err


def main():
    c, e = fit_exp()
    report("exp P(r), r^0..r^5", c, e)
    c, e = fit_tanh()
    report("tanh P(x^2), x^0..x^8 (times x^3)", c, e)
    c, e = fit_erf()
    report("erf P(x^2), x^0..x^12 (times x)", c, e)
    if "--scan" in sys.argv:
        for deg in range(6, 11):
            for k in np.linspace(1.0, 5.0, 9):
                e1 = fit_erfcx(deg, k, 0.95, 4.0)[1] / 2**-24
                e2 = fit_erfcx(deg, k, 0.7, 14.5, scale=1 / math.sqrt(2))[1] / 2**-24
                print(f"degree {deg} K {k}: erfcx {e1:.3f} ulp, gelu tail {e2:.3f} ulp")
    c, e = fit_erfcx(7, 3.0, 0.95, 4.0)
    report("erfcx P(t), t^0..t^7, K = 3", c, e)
    c, e = fit_erfcx(9, 5.0, 0.7, 14.5, scale=1 / math.sqrt(2))
    report("gelu tail P(t), t^0..t^9, K = 5", c, e)


if __name__ == "__main__":
    main()
