/*
 * fpconv_legacy.c - tpud's float text conversions as they were before proto/tpu_fpconv.c
 * (proto/tpu_oip_json.c up to commit cf91146), kept verbatim as the reference that
 * fpconv_check compares tpu_fpconv's bytes with and fpconv_bench times it against.
 *
 * DESIGN
 * Formatting: the shortest "%.{6..9}g" (binary32) or "%.{15..17}g" (binary64) that reads back,
 * through floor(log10()), fma, nextafterf and, out of its fast range, snprintf + strtof.
 * Parsing: the JSON fast path's number conversion, Clinger's fast path or strtod. Uses libm.
 * Never linked into tpud.
 */
#include "fpconv_legacy.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}


/*
 * Floats are printed as the shortest "%.{6..9}g" that reads back as the same float: the same text
 * printf would give, without printf. f32_digits rounds |v| to p significant digits exactly as
 * printf does (round half to even on exact ties), using the exact error of one multiplication
 * (fma) or 128-bit integer division; f32_roundtrips decides exactly whether those digits read
 * back as v, by comparing them with the midpoints to v's neighbours (ties go to the even
 * mantissa, as strtof does). Magnitudes outside the fast range (below ~1e-14, above ~9e18) take
 * the snprintf + strtof loop.
 */
static const double pow10_tab[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
static const uint64_t pow10_u64[20] = {1ull,
                                       10ull,
                                       100ull,
                                       1000ull,
                                       10000ull,
                                       100000ull,
                                       1000000ull,
                                       10000000ull,
                                       100000000ull,
                                       1000000000ull,
                                       10000000000ull,
                                       100000000000ull,
                                       1000000000000ull,
                                       10000000000000ull,
                                       100000000000000ull,
                                       1000000000000000ull,
                                       10000000000000000ull,
                                       100000000000000000ull,
                                       1000000000000000000ull,
                                       10000000000000000000ull};

/* |v| (a positive float, as a double) to p (6..9) significant digits: *d has exactly p digits and
 * *x is the decimal exponent of the first. Returns 0 when v is outside the fast range. */
static int f32_digits(double v, int p, uint64_t *d, int *x) {
  int e = (int)floor(log10(v));
  for (int tries = 0; tries < 3; tries++) {
    int s = p - 1 - e;
    uint64_t D;
    if (s >= 0) {
      if (s > 22) return 0;
      double P = pow10_tab[s];
      double prod = v * P, err = fma(v, P, -prod); /* v*P == prod + err exactly */
      double F = floor(prod), fr = prod - F;          /* exact: prod < 2^31 */
      D = (uint64_t)F;
      if (fr > 0.5 || (fr == 0.5 && (err > 0 || (err == 0 && (D & 1))))) D++;
    } else {
      int k = -s;
      if (k > 19 || v >= 9.2e18) return 0;
      /* v >= 10^6 here, so v*64 is an integer (float spacing there is at least 2^-4). */
      unsigned __int128 V = (unsigned __int128)(v * 64.0);
      unsigned __int128 T = (unsigned __int128)pow10_u64[k] * 64u;
      unsigned __int128 q = V / T, r = V % T;
      D = (uint64_t)q;
      if (2 * r > T || (2 * r == T && (D & 1))) D++;
    }
    if (D >= pow10_u64[p]) {
      e++;
      continue;
    }
    if (D < pow10_u64[p - 1]) {
      e--;
      continue;
    }
    *d = D;
    *x = e;
    return 1;
  }
  return 0;
}

/* Sign of (D × 10^(x-p+1)) - m, exactly; m a positive double. */
static int dec_cmp(uint64_t D, int p, int x, double m) {
  int s = p - 1 - x;
  if (s >= 0) {
    double P = pow10_tab[s];
    double pm = m * P, em = fma(m, P, -pm); /* m*P == pm + em exactly */
    double dd = (double)D;                  /* exact: D < 10^9 */
    if (dd > 2 * pm) return 1;
    if (dd < pm / 2) return -1;
    double diff = dd - pm; /* exact (Sterbenz) */
    return diff > em ? 1 : diff < em ? -1 : 0;
  }
  unsigned __int128 a = (unsigned __int128)D * pow10_u64[-s] * 64u;
  unsigned __int128 b = (unsigned __int128)(m * 64.0); /* exact: m is a midpoint above 10^6 */
  return a > b ? 1 : a < b ? -1 : 0;
}

/* Whether D × 10^(x-p+1) reads back (round to nearest, ties to even) as the float f > 0. */
static int f32_roundtrips(float f, uint64_t D, int p, int x) {
  double v = f, lo = nextafterf(f, 0.0f), hi;
  if (f == FLT_MAX)
    hi = v + (v - lo);
  else
    hi = nextafterf(f, INFINITY);
  double mlo = (v + lo) / 2, mhi = (v + hi) / 2; /* exact in double */
  int even = (f32_bits(f) & 1) == 0;
  int c = dec_cmp(D, p, x, mlo);
  if (c < 0 || (c == 0 && !even)) return 0;
  c = dec_cmp(D, p, x, mhi);
  if (c > 0 || (c == 0 && !even)) return 0;
  return 1;
}

/* Writes D (p digits, exponent x) as printf's "%.{p}g" would (trailing zeros dropped). */
static size_t f32_print(char *out, int neg, uint64_t D, int p, int x) {
  char dig[24];
  int nd = p;
  while (nd > 1 && D % 10 == 0) {
    D /= 10;
    nd--;
  }
  for (int i = nd - 1; i >= 0; i--) {
    dig[i] = (char)('0' + D % 10);
    D /= 10;
  }
  char *o = out;
  if (neg) *o++ = '-';
  if (x < -4 || x >= p) {
    *o++ = dig[0];
    if (nd > 1) {
      *o++ = '.';
      memcpy(o, dig + 1, (size_t)nd - 1);
      o += nd - 1;
    }
    *o++ = 'e';
    int ax = x < 0 ? -x : x;
    *o++ = x < 0 ? '-' : '+';
    if (ax >= 100) *o++ = (char)('0' + ax / 100);
    *o++ = (char)('0' + ax / 10 % 10);
    *o++ = (char)('0' + ax % 10);
  } else if (x >= 0) {
    for (int i = 0; i <= x; i++) *o++ = i < nd ? dig[i] : '0';
    if (nd > x + 1) {
      *o++ = '.';
      memcpy(o, dig + x + 1, (size_t)(nd - x - 1));
      o += nd - x - 1;
    }
  } else {
    *o++ = '0';
    *o++ = '.';
    for (int i = 0; i < -x - 1; i++) *o++ = '0';
    memcpy(o, dig, (size_t)nd);
    o += nd;
  }
  *o = 0;
  return (size_t)(o - out);
}

/* The shortest "%.{6..9}g" text of v (finite) that reads back as v. */
size_t fpconv_legacy_f32_format(char *tmp, float v) {
  if (v == 0) {
    if (signbit(v)) {
      memcpy(tmp, "-0", 3);
      return 2;
    }
    memcpy(tmp, "0", 2);
    return 1;
  }
  float a = fabsf(v);
  for (int p = 6; p <= 9; p++) {
    uint64_t D;
    int x;
    if (!f32_digits(a, p, &D, &x)) break;
    if (f32_roundtrips(a, D, p, x)) return f32_print(tmp, v < 0, D, p, x);
  }
  /* Outside the fast range: ask printf. */
  int n = 0;
  for (int p = 6; p <= 9; p++) {
    n = snprintf(tmp, 32, "%.*g", p, (double)v);
    if (strtof(tmp, NULL) == v) break;
  }
  return (size_t)n;
}

size_t fpconv_legacy_f64_format(char *tmp, double v) {
  for (int p = 15; p <= 17; p++) {
    snprintf(tmp, 40, "%.*g", p, v);
    if (strtod(tmp, NULL) == v) break;
  }
  return strlen(tmp);
}

static const double fp_pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                    1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The old fp_number for non-integer tokens, on s[0..n): 1 and *dv, or 0 (refused). */
int fpconv_legacy_parse(const char *s, size_t n, double *dv) {
  const char *q = s, *e = s + n;
  int neg = 0;
  if (q < e && *q == '-') {
    neg = 1;
    q++;
  }
  if (q >= e || *q < '0' || *q > '9') return 0;
  uint64_t m = 0;
  int nd = 0, dropped = 0, exp10 = 0;
  if (*q == '0') {
    q++;
  } else {
    for (; q < e && *q >= '0' && *q <= '9'; q++) {
      if (nd < 19) {
        m = m * 10 + (uint64_t)(*q - '0');
        nd++;
      } else {
        dropped++;
      }
    }
  }
  if (q < e && *q == '.') {
    q++;
    if (q >= e || *q < '0' || *q > '9') return 0;
    for (; q < e && *q >= '0' && *q <= '9'; q++) {
      if (nd == 0 && *q == '0') {
        exp10--;
      } else if (nd < 19) {
        m = m * 10 + (uint64_t)(*q - '0');
        nd++;
        exp10--;
      } else {
        dropped++;
      }
    }
  }
  if (q < e && (*q == 'e' || *q == 'E')) {
    q++;
    int eneg = 0;
    if (q < e && (*q == '+' || *q == '-')) eneg = *q++ == '-';
    if (q >= e || *q < '0' || *q > '9') return 0;
    int x = 0;
    for (; q < e && *q >= '0' && *q <= '9'; q++)
      if (x < 100000) x = x * 10 + (*q - '0');
    exp10 += eneg ? -x : x;
  }
  if (!dropped && nd <= 15 && exp10 >= -22 && exp10 <= 22) {
    double d = (double)m;
    d = exp10 >= 0 ? d * fp_pow10[exp10] : d / fp_pow10[-exp10];
    *dv = neg ? -d : d;
    return 1;
  }
  char tmp[128];
  size_t len = (size_t)(q - s);
  if (len >= sizeof tmp) return 0;
  memcpy(tmp, s, len);
  tmp[len] = '\0';
  double d = strtod(tmp, NULL);
  if (isinf(d)) return 0;
  *dv = d;
  return 1;
}
