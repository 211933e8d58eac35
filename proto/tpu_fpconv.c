/*
 * tpu_fpconv.c - binary32/binary64 <-> decimal text, exactly, in integer arithmetic.
 *
 * DESIGN
 * Everything here is exact integer arithmetic on a value's integer mantissa and binary exponent,
 * with one table: the 128 leading bits of 5^q for q in [-342, 341] (tpu_fpconv_tab.h, written and
 * checked by tpu_fpconv_gen.py with Python's exact integers; 10^q has the same mantissa). No
 * libm, no printf, no floating-point arithmetic except the one correctly rounded operation of
 * Clinger's fast path.
 *
 * Formatting. The text is the one tpud always printed: for P = Pmin..Pmax (6..9 for binary32,
 * 15..17 for binary64), v correctly rounded to P significant digits (ties to even, as printf),
 * the first that lies inside v's rounding interval, the interval that reads back as v (its ends,
 * the midpoints to v's neighbours, belong to it when v's mantissa is even, as strtod rounds
 * ties), printed as "%.{P}g" prints it. Note this is not always the shortest text: printf's
 * P=6 rounding keeps 6 digits where fewer would do (the smallest subnormal binary32 is
 * "1.4013e-45", not "1e-45"); it is what the JSON answers have always said, byte for byte.
 * The work is three scaled values, floor(X * 10^s) with X = v and its two midpoints, s chosen
 * so that v * 10^s has D = 10 (binary32) or 18 (binary64) digits or one more, each with a
 * "sticky" flag (whether the product had a fraction). One multiplication of 4v's integer by the
 * table entry (its high word alone for binary32), and the entry added or taken away for the
 * midpoints, give the floors unless the truncated bits of the table could carry into them
 * (the exact product lies in [P, P + X) in units of the last bit): then, practically never,
 * an exact big-integer computation decides. Whether a product is an integer comes from
 * divisibility (powers of 2 and 5 in X), not from the approximation. Rounding to each P and
 * comparing with the midpoints are then integer operations on those three numbers, done for
 * every P at once; the digits are made eight at a time in a register and stored in blocks.
 *
 * Parsing. w * 10^q (w the first 19 significant digits): Clinger's fast path when w and 10^|q|
 * are exact doubles (floats); otherwise the 64x128 product of the normalized w with the table
 * entry (the Eisel-Lemire idea), rounded at the target precision, subnormals included. The
 * same interval argument says when the truncated table bits could change the rounding; then an
 * exact binary value (0.44921875, w divisible by 5^-q) is converted as the integer w / 5^-q
 * times 2^q, and the rest, true near-ties, and digit strings longer than 19 digits whose tail
 * matters, go to the C library's exact strtod/strtof. Digits are scanned eight at a time.
 *
 * Relies on: two's-complement arithmetic right shifts of negative integers (gcc, clang), and
 * FLT_EVAL_METHOD == 0 (SSE arithmetic, as on every x86-64 target) for Clinger's path.
 */
#include "tpu_fpconv.h"
#include "tpu_fpconv_tab.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

#if FLT_EVAL_METHOD != 0
#error "tpu_fpconv.c needs float and double arithmetic without excess precision"
#endif

typedef unsigned __int128 u128;

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

/* 5^0 .. 5^27 (5^27 < 2^63 < 5^28). */
static const uint64_t pow5_u64[28] = {
    1ull,
    5ull,
    25ull,
    125ull,
    625ull,
    3125ull,
    15625ull,
    78125ull,
    390625ull,
    1953125ull,
    9765625ull,
    48828125ull,
    244140625ull,
    1220703125ull,
    6103515625ull,
    30517578125ull,
    152587890625ull,
    762939453125ull,
    3814697265625ull,
    19073486328125ull,
    95367431640625ull,
    476837158203125ull,
    2384185791015625ull,
    11920928955078125ull,
    59604644775390625ull,
    298023223876953125ull,
    1490116119384765625ull,
    7450580596923828125ull,
};

/* floor(q * log2 5) and floor(b * log10 2); tpu_fpconv_gen.py proves both over |q| <= 342 and
 * |b| <= 1200 (the shifts are floor divisions). */
static inline int floor_log2_pow5(int q) { return (int)(((int64_t)q * 1217359) >> 19); }
static inline int floor_log10_pow2(int b) { return (int)(((int64_t)b * 78913) >> 18); }

/* p[0..2] (least significant first) = a * T(q), the 192-bit product with the table entry. */
static inline void mul_pow5(uint64_t a, int q, uint64_t p[3]) {
  const uint64_t *t = tpu__fpconv_pow5[q - TPU__FPCONV_POW5_MIN];
  u128 hi = (u128)a * t[0], lo = (u128)a * t[1];
  u128 mid = (u128)(uint64_t)hi + (uint64_t)(lo >> 64);
  p[0] = (uint64_t)lo;
  p[1] = (uint64_t)mid;
  p[2] = (uint64_t)(hi >> 64) + (uint64_t)(mid >> 64);
}

/* floor(P / 2^sh) for 0 < sh < 192, which the caller knows fits in 64 bits; *nz says whether
 * P mod 2^sh != 0 and *carry whether P mod 2^sh + add >= 2^sh (P + add passes a multiple). */
static inline uint64_t shr192(const uint64_t p[3], int sh, uint64_t add, int *nz, int *carry) {
  int limb = sh >> 6, bit = sh & 63;
  uint64_t r = p[limb] >> bit;
  if (bit && limb < 2) r |= p[limb + 1] << (64 - bit);
  uint64_t mask = bit ? (UINT64_C(1) << bit) - 1 : 0;
  uint64_t l[3];
  for (int i = 0; i < 3; i++) l[i] = i < limb ? p[i] : i == limb ? p[i] & mask : 0;
  *nz = (l[0] | l[1] | l[2]) != 0;
  uint64_t s[3];
  s[0] = l[0] + add;
  uint64_t c = s[0] < add;
  s[1] = l[1] + c;
  c = c && s[1] == 0;
  s[2] = l[2] + c;
  int over = (s[limb] >> bit) != 0;
  for (int i = limb + 1; i < 3; i++) over |= s[i] != 0;
  *carry = over;
  return r;
}

/* ---- exact big integers, for the rare products the table cannot decide ---- */

typedef struct {
  uint32_t d[48]; /* little-endian 32-bit limbs: 1536 bits, above the 900 the formats need */
  int n;
} big_t;

static void big_mul_small(big_t *b, uint32_t m) {
  uint64_t c = 0;
  for (int i = 0; i < b->n; i++) {
    c += (uint64_t)b->d[i] * m;
    b->d[i] = (uint32_t)c;
    c >>= 32;
  }
  if (c) b->d[b->n++] = (uint32_t)c;
}

/* b /= m; returns the remainder. */
static uint32_t big_div_small(big_t *b, uint32_t m) {
  uint64_t r = 0;
  for (int i = b->n - 1; i >= 0; i--) {
    uint64_t cur = (r << 32) | b->d[i];
    b->d[i] = (uint32_t)(cur / m);
    r = cur % m;
  }
  while (b->n && b->d[b->n - 1] == 0) b->n--;
  return (uint32_t)r;
}

static void big_shl(big_t *b, int k) {
  int limbs = k / 32, bits = k % 32;
  for (int i = b->n - 1; i >= 0; i--) b->d[i + limbs] = b->d[i];
  for (int i = 0; i < limbs; i++) b->d[i] = 0;
  b->n += limbs;
  if (bits) {
    uint32_t c = 0;
    for (int i = limbs; i < b->n; i++) {
      uint32_t nc = b->d[i] >> (32 - bits);
      b->d[i] = (b->d[i] << bits) | c;
      c = nc;
    }
    if (c) b->d[b->n++] = c;
  }
}

/* b >>= k; returns whether any 1 bit was shifted out. */
static int big_shr(big_t *b, int k) {
  int limbs = k / 32, bits = k % 32, lost = 0;
  if (limbs >= b->n) {
    lost = b->n > 0;
    b->n = 0;
    return lost;
  }
  for (int i = 0; i < limbs; i++) lost |= b->d[i] != 0;
  for (int i = limbs; i < b->n; i++) b->d[i - limbs] = b->d[i];
  b->n -= limbs;
  if (bits) {
    lost |= (b->d[0] & ((1u << bits) - 1)) != 0;
    for (int i = 0; i < b->n; i++)
      b->d[i] = (b->d[i] >> bits) | (i + 1 < b->n ? b->d[i + 1] << (32 - bits) : 0);
  }
  while (b->n && b->d[b->n - 1] == 0) b->n--;
  return lost;
}

#define POW5_13 1220703125u /* 5^13, the largest power of five below 2^31 */

/* floor(M * 2^f * 10^s) (which fits in 64 bits) and whether it had a fraction, exactly. */
static uint64_t scaled_big(uint64_t M, int f, int s, int *sticky) {
  big_t b = {{(uint32_t)M, (uint32_t)(M >> 32)}, M >> 32 ? 2 : 1};
  int e2 = f + s, st = 0;
  for (int k = s; k > 0; k -= 13) big_mul_small(&b, k >= 13 ? POW5_13 : (uint32_t)pow5_u64[k]);
  if (e2 > 0) big_shl(&b, e2);
  for (int k = -s; k > 0; k -= 13)
    st |= big_div_small(&b, k >= 13 ? POW5_13 : (uint32_t)pow5_u64[k]) != 0;
  if (e2 < 0) st |= big_shr(&b, -e2);
  *sticky = st;
  return (uint64_t)b.d[0] | (b.n > 1 ? (uint64_t)b.d[1] << 32 : 0);
}

/* Whether M * 2^f * 10^s = M * 5^s * 2^(f+s) is an integer (M > 0). */
static int product_is_integer(uint64_t M, int f, int s) {
  if (__builtin_ctzll(M) + f + s < 0) return 0;
  if (s >= 0) return 1;
  if (-s > 27) return 0; /* 5^28 > 2^64 > M */
  return M % pow5_u64[-s] == 0;
}

/*
 * floor(M * 2^f * 10^s), known to fit in 64 bits, and *sticky: whether it had a fraction.
 * p = M * T(s) (mul_pow5), sh = the shift that scales it: 10^s = T(s) * 2^(floor(log2 5^s) -
 * 127 + s).
 */
static inline uint64_t scaled(const uint64_t p[3], int sh, uint64_t M, int f, int s,
                              int *sticky) {
  int texact = s >= 0 && s <= 55; /* then p is the exact product */
  uint64_t n;
  int nz, carry;
  if (sh >= 64 && sh < 128) { /* always, for the formats here; the general case below */
    int b = sh - 64;
    n = b ? (p[1] >> b) | (p[2] << (64 - b)) : p[1];
    uint64_t lhi = b ? p[1] & ((UINT64_C(1) << b) - 1) : 0;
    nz = (lhi | p[0]) != 0;
    uint64_t lo = p[0] + (M - 1);
    uint64_t c = lo < p[0];
    carry = b ? ((lhi + c) >> b) != 0 : c != 0;
  } else {
    n = shr192(p, sh, M - 1, &nz, &carry);
  }
  if (texact) {
    *sticky = nz;
    return n;
  }
  /* The exact product lies in [p, p + M) / 2^sh (T(s) is short by less than one unit). */
  if (product_is_integer(M, f, s)) {
    *sticky = 0;
    return n + (uint64_t)nz; /* the one integer in that interval, shorter than 1 */
  }
  if (carry) return scaled_big(M, f, s, sticky);
  *sticky = 1;
  return n;
}

/* scaled() for binary32: p = M * (T(s)'s high word), 0 < sh < 64, exact when T(s)'s low word is
 * zero (0 <= s <= 27). */
static inline uint64_t scaled64(u128 p, int sh, uint64_t M, int f, int s, int *sticky) {
  uint64_t n = (uint64_t)(p >> sh), l = (uint64_t)p & ((UINT64_C(1) << sh) - 1);
  int nz = l != 0;
  if (s >= 0 && s <= 27) {
    *sticky = nz;
    return n;
  }
  if (product_is_integer(M, f, s)) {
    *sticky = 0;
    return n + (uint64_t)nz;
  }
  if ((l + M - 1) >> sh) return scaled_big(M, f, s, sticky); /* l < 2^63, M < 2^27 */
  *sticky = 1;
  return n;
}


static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324"
                                      "25262728293031323334353637383940414243444546474849"
                                      "50515253545556575859606162636465666768697071727374"
                                      "75767778798081828384858687888990919293949596979899";

/* The ASCII digit pair of v < 100, the tens in the low byte. */
static inline uint64_t pair_ascii(uint64_t v) {
  uint16_t two;
  memcpy(&two, digit_pairs + 2 * v, 2);
  return two;
}

/* n < 10^8 as eight ASCII digits, the first in the lowest byte. n * ceil(2^52 / 10^6) is n / 10^6
 * in 52-bit fixed point, short of exact by less than 10^-8 of a unit of n's last digit, never
 * over: its integer part is the first pair, and each multiplication of the fraction by 100
 * brings up the next (checked for every n by tests/proto/test_fpconv.c). The four products
 * form one short chain; the table lookups run beside it. */
static inline uint64_t digits8(uint32_t n) {
  const uint64_t frac = (UINT64_C(1) << 52) - 1;
  uint64_t y = (uint64_t)n * UINT64_C(4503599628);
  uint64_t a = y >> 52;
  y = (y & frac) * 100;
  uint64_t b = y >> 52;
  y = (y & frac) * 100;
  uint64_t c = y >> 52;
  y = (y & frac) * 100;
  return pair_ascii(a) | pair_ascii(b) << 16 | pair_ascii(c) << 32 | pair_ascii(y >> 52) << 48;
}

uint64_t tpu__fpconv_digits8(uint32_t n) { return digits8(n); }

#define ASCII_ZEROS 0x3030303030303030u

/* Writes d (exactly p digits, first digit's exponent x) as printf's "%.{p}g" would: trailing
 * zeros dropped, exponent notation when x < -4 or x >= p, exponent at least two digits. The
 * digits are made in registers (digits8) and stored in fixed 16-byte blocks, so stores run
 * past the text's end (out has TPU_FPCONV_LEN bytes); narrow: p <= 9, else p <= 17. */
static inline __attribute__((always_inline)) size_t print_g(char *out, int neg, uint64_t d, int p,
                                                            int x, int narrow) {
  uint64_t w1, w2 = ASCII_ZEROS, d0;
  int nd;
  if (narrow) {
    /* d / 10^(p-1) in 57-bit fixed point, from above by under 0.7 of a unit of its 9th digit
     * (d * (ceil - exact) < 10^9 < 0.7 * 2^57 / 10^8): the integer part is the first digit,
     * and each fraction times 100 brings up the next two exactly, zeros past the p-th. */
    static const uint64_t scale[10] = {0,
                                       UINT64_C(144115188075855872),
                                       UINT64_C(14411518807585588),
                                       UINT64_C(1441151880758559),
                                       UINT64_C(144115188075856),
                                       UINT64_C(14411518807586),
                                       UINT64_C(1441151880759),
                                       UINT64_C(144115188076),
                                       UINT64_C(14411518808),
                                       UINT64_C(1441151881)}; /* ceil(2^57 / 10^(p-1)) */
    const uint64_t frac = (UINT64_C(1) << 57) - 1;
    uint64_t y = d * scale[p];
    d0 = y >> 57;
    y = (y & frac) * 100;
    uint64_t a = y >> 57;
    y = (y & frac) * 100;
    uint64_t b = y >> 57;
    y = (y & frac) * 100;
    uint64_t c = y >> 57;
    y = (y & frac) * 100;
    w1 = pair_ascii(a) | pair_ascii(b) << 16 | pair_ascii(c) << 32 | pair_ascii(y >> 57) << 48;
    uint64_t z1 = w1 ^ ASCII_ZEROS; /* zero bytes where the digits are '0' */
    nd = 9 - (z1 ? __builtin_clzll(z1) / 8 : 8);
  } else { /* seventeen digits: d0, w1, w2 */
    uint64_t Q = d * pow10_u64[17 - p], r = Q % 10000000000000000u;
    d0 = Q / 10000000000000000u;
    w1 = digits8((uint32_t)(r / 100000000));
    w2 = digits8((uint32_t)(r % 100000000));
    uint64_t z1 = w1 ^ ASCII_ZEROS, z2 = w2 ^ ASCII_ZEROS;
    nd = 17 - (z2 ? __builtin_clzll(z2) / 8 : 8 + (z1 ? __builtin_clzll(z1) / 8 : 8));
  }
  u128 V = ((u128)w2 << 64) | w1; /* the digits after d0 */
  char c0 = (char)('0' + d0);
  char *o = out;
  *o = '-';
  o += neg;
  if (x < -4 || x >= p) {
    o[0] = c0;
    o[1] = '.';
    memcpy(o + 2, &V, 16);
    o += nd > 1 ? nd + 1 : 1;
    int ax = x < 0 ? -x : x;
    o[0] = 'e';
    o[1] = x < 0 ? '-' : '+';
    o += 2;
    if (ax >= 100) *o++ = (char)('0' + ax / 100);
    memcpy(o, digit_pairs + 2 * (ax % 100), 2);
    o += 2;
  } else if (x >= 0) { /* x + 1 <= p integer digits, zeros past nd */
    o[0] = c0;
    memcpy(o + 1, &V, 16);
    if (nd > x + 1) { /* then x <= 15: the fraction is V from its byte x */
      o[x + 1] = '.';
      u128 frac = V >> (8 * x);
      memcpy(o + x + 2, &frac, 16);
      o += nd + 1;
    } else {
      o += x + 1;
    }
  } else {
    memcpy(o, "0.000", 5); /* "0." and -x - 1 <= 3 zeros */
    o += 1 - x;
    o[0] = c0;
    memcpy(o + 1, &V, 16);
    o += nd;
  }
  *o = 0;
  return (size_t)(o - out);
}

/*
 * v = m * 2^e (m > 0). asym: v is a power of two above the smallest normal, so its lower
 * neighbour is half as far as its upper one. D: the digits v * 10^s is scaled to (or D + 1);
 * pmin..pmax: the precisions tried, pmax < D. narrow: m < 2^24 (binary32), 64-bit products do.
 */
static inline __attribute__((always_inline)) size_t
format_dec(uint64_t m, int e, int asym, int neg, int narrow, int D, int pmin, int pmax, char *out) {
  int even = (m & 1) == 0;
  /* 4v and its midpoints to the neighbours, as integers times 2^f. */
  uint64_t M0 = 4 * m, Mlo = 4 * m - (asym ? 1 : 2), Mhi = 4 * m + 2;
  int f = e - 2;
  int b = e + 63 - __builtin_clzll(m); /* 2^b <= v < 2^(b+1) */
  int s = D - 1 - floor_log10_pow2(b); /* so that 10^(D-1) <= v * 10^s < 10^(D+1) */
  int sh = 127 - floor_log2_pow5(s) - s - f;
  const uint64_t *t = tpu__fpconv_pow5[s - TPU__FPCONV_POW5_MIN];
  int st0, stlo, sthi;
  uint64_t N0, Nlo, Nhi;
  if (narrow) {
    /* binary32: T's high word alone, short by less than one of its units, like T itself; the
     * products fit in 128 bits, and the shift drops below 64. */
    u128 p0 = (u128)M0 * t[0], th = t[0];
    u128 plo = p0 - (asym ? th : 2 * th), phi = p0 + 2 * th;
    N0 = scaled64(p0, sh - 64, M0, f, s, &st0);
    Nlo = scaled64(plo, sh - 64, Mlo, f, s, &stlo);
    Nhi = scaled64(phi, sh - 64, Mhi, f, s, &sthi);
  } else {
    /* The three products with T(s): one multiplication, then T(s) added or taken away. */
    uint64_t p0[3], plo[3], phi[3];
    mul_pow5(M0, s, p0);
    u128 t2 = ((u128)t[0] << 64 | t[1]) << (asym ? 0 : 1); /* T or 2T (2T's top bit in t2c) */
    uint64_t t2c = asym ? 0 : t[0] >> 63, t2l = (uint64_t)t2, t2h = (uint64_t)(t2 >> 64);
    u128 tt = ((u128)t[0] << 64 | t[1]) << 1;
    uint64_t ttc = t[0] >> 63, ttl = (uint64_t)tt, tth = (uint64_t)(tt >> 64);
    u128 acc = (u128)p0[0] + ttl;
    phi[0] = (uint64_t)acc;
    acc = (u128)p0[1] + tth + (uint64_t)(acc >> 64);
    phi[1] = (uint64_t)acc;
    phi[2] = p0[2] + ttc + (uint64_t)(acc >> 64);
    uint64_t br = p0[0] < t2l;
    plo[0] = p0[0] - t2l;
    u128 sub = (u128)t2h + br;
    plo[1] = p0[1] - (uint64_t)sub;
    br = (u128)p0[1] < sub;
    plo[2] = p0[2] - t2c - br;
    N0 = scaled(p0, sh, M0, f, s, &st0);
    Nlo = scaled(plo, sh, Mlo, f, s, &stlo);
    Nhi = scaled(phi, sh, Mhi, f, s, &sthi);
  }
  /* Scale to exactly D + 1 digits: times 10 keeps every comparison below exact (an integer C
   * is above t exactly when above floor(t), equal exactly when equal and t has no fraction),
   * and the rounding below looks at k >= 2 digits, whose half is a multiple of 10. */
  int x = D - s; /* decimal exponent of v's first digit */
  if (N0 < pow10_u64[D]) {
    N0 *= 10;
    Nlo *= 10;
    Nhi *= 10;
    x--;
  }
  /* Every precision at once (no branches to mispredict), then the first that reads back.
   * C, the rounded value scaled as N0, reads back when it lies above the true lower midpoint
   * Nlo + fraction (or on it, when it has none and v's mantissa is even) and below the upper
   * one (or on it, when it has a fraction or the mantissa is even): C > lo and C < hi with
   * the two ties folded into the bounds once (Nlo >= 1, Nhi < 2^64 - 1: no wrap). */
  const uint64_t lo = Nlo - (uint64_t)((!stlo) & even), hi = Nhi + (uint64_t)(sthi | even);
  uint64_t qs[4];
  unsigned ok = 0;
#pragma GCC unroll 4 /* unrolled, each k is a constant and each division a multiplication */
  for (int i = 0; i < 4; i++) {
    if (pmin + i > pmax) break;
    int k = D + 1 - (pmin + i); /* >= 2 */
    uint64_t pk = pow10_u64[k];
    uint64_t q = N0 / pk, r = N0 - q * pk;
    /* half to even: up when r > pk / 2, or r == pk / 2 with a fraction below or q odd; as
     * r + that bit > pk / 2 (r < pk / 2 gives at most pk / 2) */
    q += r + (uint64_t)(st0 | (int)(q & 1)) > pk / 2;
    uint64_t C = q * pk;
    ok |= (unsigned)((C > lo) & (C < hi)) << i;
    qs[i] = q;
  }
  ok |= 1u << (pmax - pmin); /* pmax digits always read back; this only guards the index */
  int i = __builtin_ctz(ok), p = pmin + i;
  uint64_t q = qs[i];
  if (q == pow10_u64[p]) { /* rounded up to the next power of ten */
    q = pow10_u64[p - 1];
    x++;
  }
  return print_g(out, neg, q, p, x, narrow);
}

size_t tpu_fpconv_f32_format(float v, char *out) {
  uint32_t u;
  memcpy(&u, &v, 4);
  uint32_t a = u & 0x7fffffffu, ef = a >> 23, mf = a & 0x7fffffu;
  int neg = (int)(u >> 31);
  if (ef == 0xff) {
    out[0] = 0;
    return 0;
  }
  if (a == 0) {
    memcpy(out, neg ? "-0" : "0", neg ? 3 : 2);
    return neg ? 2 : 1;
  }
  uint64_t m = ef ? mf | 0x800000u : mf;
  int e = ef ? (int)ef - 150 : -149;
  return format_dec(m, e, mf == 0 && ef > 1, neg, 1, 10, 6, 9, out);
}

size_t tpu_fpconv_f64_format(double v, char *out) {
  uint64_t u;
  memcpy(&u, &v, 8);
  uint64_t a = u & 0x7fffffffffffffffu, mf = a & 0xfffffffffffffu;
  int ef = (int)(a >> 52), neg = (int)(u >> 63);
  if (ef == 0x7ff) {
    out[0] = 0;
    return 0;
  }
  if (a == 0) {
    memcpy(out, neg ? "-0" : "0", neg ? 3 : 2);
    return neg ? 2 : 1;
  }
  uint64_t m = ef ? mf | (UINT64_C(1) << 52) : mf;
  int e = ef ? ef - 1075 : -1074;
  return format_dec(m, e, mf == 0 && ef > 1, neg, 0, 18, 15, 17, out);
}

/* ---- parsing ---- */

/* The bits (sign clear) of mant * 2^u, mant < 2^(prec+1) already rounded, u >= qmin, in the
 * format of dec_to_bits. */
static inline uint64_t encode(uint64_t mant, int u, int prec, int bias, int fmax) {
  if (mant >> prec) { /* rounded up to 2^prec */
    mant >>= 1;
    u++;
  }
  uint64_t hidden = UINT64_C(1) << (prec - 1);
  if (mant < hidden) return mant; /* subnormal or zero (then u == qmin) */
  int field = u + prec - 1 + bias;
  if (field >= fmax) return (uint64_t)fmax << (prec - 1);
  return ((uint64_t)field << (prec - 1)) | (mant & (hidden - 1));
}

/* w * 2^e2 (w > 0) rounded to nearest even, exactly, in the format of dec_to_bits. */
static uint64_t int_to_bits(uint64_t w, int e2, int prec, int qmin, int bias, int fmax) {
  int E = 63 - __builtin_clzll(w) + e2;
  int u = E - prec + 1;
  if (u < qmin) u = qmin;
  int drop = u - e2; /* low bits of w below the result's last bit */
  if (drop <= 0) return encode(w << -drop, u, prec, bias, fmax); /* exact; E <= emax here */
  if (drop > 64) return 0;                                        /* below half the last bit */
  uint64_t mant = drop == 64 ? 0 : w >> drop;
  uint64_t rem = drop == 64 ? w : w & ((UINT64_C(1) << drop) - 1);
  uint64_t half = UINT64_C(1) << (drop - 1);
  if (rem > half || (rem == half && (mant & 1))) mant++;
  return encode(mant, u, prec, bias, fmax);
}

/*
 * w * 10^q (w > 0, q in the table's range) rounded to nearest even in the binary format with
 * prec significant bits, ulp exponent at least qmin, biased exponent field below fmax (all ones
 * is infinity). 1 and *bits (sign clear) when decided; 0 when the truncated table bits could
 * change the rounding.
 */
static int dec_to_bits(uint64_t w, int q, int prec, int qmin, int bias, int fmax, uint64_t *bits) {
  int lz = __builtin_clzll(w);
  uint64_t wn = w << lz, p[3];
  mul_pow5(wn, q, p);
  /* w * 10^q = V * 2^c with V = wn * (exact 5^q mantissa), in [P, P + wn). */
  int c = floor_log2_pow5(q) - 127 + q - lz;
  int tb = (p[2] >> 63) ? 191 : 190; /* top bit of P */
  int E = tb + c;                    /* floor(log2(w * 10^q)), unless V passes 2^191 */
  if (E + bias >= fmax) {
    *bits = (uint64_t)fmax << (prec - 1);
    return 1;
  }
  int u = E - prec + 1; /* exponent of the result's last bit */
  if (u < qmin) u = qmin;
  int k = u - c; /* the result is V / 2^k rounded */
  if (k - 1 > 191) { /* V / 2^k < 1/2 */
    *bits = 0;
    return 1;
  }
  int nz, carry;
  uint64_t F = shr192(p, k - 1, wn - 1, &nz, &carry); /* the mantissa and the rounding bit */
  int sticky = nz;
  if (q < 0 || q > 55) { /* T(q) truncated: V > P */
    if (carry) {         /* V may pass the next multiple of 2^(k-1) (or 2^191) */
      /* Mostly exact binary values, 0.44921875 or 0.5 with 19 digits: w * 10^q is then the
       * integer w / 5^-q times 2^q. Otherwise a true near-tie: the caller's slow path. */
      if (q >= -27 && q < 0 && w % pow5_u64[-q] == 0) {
        *bits = int_to_bits(w / pow5_u64[-q], q, prec, qmin, bias, fmax);
        return 1;
      }
      return 0;
    }
    sticky = 1;
  }
  uint64_t mant = F >> 1;
  if ((F & 1) && (sticky || (mant & 1))) mant++;
  *bits = encode(mant, u, prec, bias, fmax);
  return 1;
}

static const double pow10_f64[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
static const float pow10_f32[11] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f,
                                    1e6f, 1e7f, 1e8f, 1e9f, 1e10f};

int tpu_fpconv_f64_from_decimal(uint64_t w, int e10, int neg, double *out) {
  double d;
  if (w > (UINT64_C(1) << 53) && e10 < 0)
    while (w % 10 == 0 && e10 < 0) { /* exact decimals like 0.5000000000000000000 */
      w /= 10;
      e10++;
    }
  if (w == 0) {
    d = 0;
  } else if (w <= (UINT64_C(1) << 53) && e10 >= -22 && e10 <= 22) {
    d = (double)w; /* Clinger: both exact, one correctly rounded operation */
    d = e10 >= 0 ? d * pow10_f64[e10] : d / pow10_f64[-e10];
  } else if (e10 < -342) { /* below 2^64 * 10^-343, under half the smallest subnormal */
    d = 0;
  } else if (e10 > 308) {
    d = __builtin_inf();
  } else {
    uint64_t bits;
    if (!dec_to_bits(w, e10, 53, -1074, 1023, 2047, &bits)) return 0;
    memcpy(&d, &bits, 8);
  }
  *out = neg ? -d : d;
  return 1;
}

int tpu_fpconv_f32_from_decimal(uint64_t w, int e10, int neg, float *out) {
  float d;
  if (w > (UINT64_C(1) << 24) && e10 < 0)
    while (w % 10 == 0 && e10 < 0) {
      w /= 10;
      e10++;
    }
  if (w == 0) {
    d = 0;
  } else if (w <= (UINT64_C(1) << 24) && e10 >= -10 && e10 <= 10) {
    d = (float)w;
    d = e10 >= 0 ? d * pow10_f32[e10] : d / pow10_f32[-e10];
  } else if (e10 < -65) { /* below 2^64 * 10^-66, under half the smallest subnormal */
    d = 0;
  } else if (e10 > 38) {
    d = __builtin_inff();
  } else {
    uint64_t bits;
    if (!dec_to_bits(w, e10, 24, -149, 127, 255, &bits)) return 0;
    uint32_t b32 = (uint32_t)bits;
    memcpy(&d, &b32, 4);
  }
  *out = neg ? -d : d;
  return 1;
}

/* Whether the 8 bytes of c are all ASCII digits: each byte's high nibble 3, and adding 6
 * leaves it 3 (a low nibble above 9 would carry). */
static inline int all_digits8(uint64_t c) {
  return ((c & 0xf0f0f0f0f0f0f0f0u) | ((c + 0x0606060606060606u) & 0xf0f0f0f0f0f0f0f0u) >> 4) ==
         0x3333333333333333u;
}

/* How many of the 8 bytes of c, from the lowest, are ASCII digits before the first that is not:
 * c ^ '0' leaves digits 0..9, and adding 0x76 sets the high bit of any byte above 9 (a carry
 * only disturbs bytes after a non-digit, which do not count). */
static inline int leading_digits8(uint64_t c) {
  uint64_t x = c ^ 0x3030303030303030u;
  uint64_t over = ((x + 0x7676767676767676u) | x) & 0x8080808080808080u;
  return over ? __builtin_ctzll(over) / 8 : 8;
}

/* The value of 8 ASCII digits (the first in the lowest byte): digit pairs, then quads, then
 * the two halves, each step one multiplication over all lanes at once. */
static inline uint32_t value8(uint64_t c) {
  c -= 0x3030303030303030u;
  c = (c * 10 + (c >> 8)) & 0x00ff00ff00ff00ffu;     /* 16-bit lanes: two digits */
  c = (c * 100 + (c >> 16)) & 0x0000ffff0000ffffu;   /* 32-bit lanes: four digits */
  return (uint32_t)((c & 0xffffffffu) * 10000 + (c >> 32));
}

size_t tpu_fpconv_scan(const char *s, size_t n, tpu_fpconv_num_t *num) {
  size_t i = 0;
  uint64_t m = 0;
  int nd = 0, total = 0, x = 0, lost = 0, integer = 1, neg = 0;
  if (i < n && s[i] == '-') {
    neg = 1;
    i++;
  }
  if (i >= n || s[i] < '0' || s[i] > '9') return 0;
  if (s[i] == '0') {
    i++;
  } else {
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
      if (nd < 19) {
        m = m * 10 + (uint64_t)(s[i] - '0');
        nd++;
      } else {
        lost |= s[i] != '0';
        x++;
      }
      total++;
    }
  }
  if (i < n && s[i] == '.') {
    integer = 0;
    i++;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    if (nd == 0)
      for (; i < n && s[i] == '0'; i++) x--; /* leading zeros only scale */
    uint64_t c;
    while (nd <= 11 && n - i >= 8 && (memcpy(&c, s + i, 8), all_digits8(c))) {
      m = m * 100000000 + value8(c);
      nd += 8;
      total += 8;
      x -= 8;
      i += 8;
    }
    int k;
    if (nd <= 11 && n - i >= 8 && (memcpy(&c, s + i, 8), k = leading_digits8(c)) > 0 && k < 8) {
      /* the last 1..7 digits at once: moved to the top bytes, '0's below them */
      c = (c << (64 - 8 * k)) | (0x3030303030303030u >> 8 * k);
      m = m * pow10_u64[k] + value8(c);
      nd += k;
      total += k;
      x -= k;
      i += (size_t)k;
    }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
      if (nd < 19) {
        m = m * 10 + (uint64_t)(s[i] - '0');
        nd++;
        x--;
      } else {
        lost |= s[i] != '0';
      }
      total++;
    }
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    integer = 0;
    size_t j = i + 1;
    int eneg = 0;
    if (j < n && (s[j] == '+' || s[j] == '-')) eneg = s[j++] == '-';
    if (j >= n || s[j] < '0' || s[j] > '9') return 0;
    int ex = 0;
    for (; j < n && s[j] >= '0' && s[j] <= '9'; j++)
      if (ex < 100000) ex = ex * 10 + (s[j] - '0'); /* beyond: zero or infinity anyway */
    x += eneg ? -ex : ex;
    i = j;
  }
  num->w = m;
  num->e10 = x;
  num->neg = neg;
  num->digits = total;
  num->lost = lost;
  num->integer = integer;
  num->len = i;
  return i;
}

/* The C library's exact conversion of s[0..n) (a valid JSON number), on a NUL-ended copy. */
static int slow_parse(const char *s, size_t n, int wide, double *d, float *f) {
  char stack[128], *tmp = n < sizeof stack ? stack : malloc(n + 1);
  if (!tmp) return 0;
  memcpy(tmp, s, n);
  tmp[n] = 0;
  if (wide)
    *d = strtod(tmp, NULL);
  else
    *f = strtof(tmp, NULL);
  if (tmp != stack) free(tmp);
  return 1;
}

int tpu_fpconv_num_f64(const tpu_fpconv_num_t *num, const char *s, double *out) {
  double a, b;
  if (tpu_fpconv_f64_from_decimal(num->w, num->e10, num->neg, &a) &&
      (!num->lost || (tpu_fpconv_f64_from_decimal(num->w + 1, num->e10, num->neg, &b) &&
                      memcmp(&a, &b, 8) == 0))) {
    *out = a; /* the true value lies in [w, w + 1) * 10^e10, both ends round alike */
    return 1;
  }
  return slow_parse(s, num->len, 1, out, NULL);
}

int tpu_fpconv_num_f32(const tpu_fpconv_num_t *num, const char *s, float *out) {
  float a, b;
  if (tpu_fpconv_f32_from_decimal(num->w, num->e10, num->neg, &a) &&
      (!num->lost || (tpu_fpconv_f32_from_decimal(num->w + 1, num->e10, num->neg, &b) &&
                      memcmp(&a, &b, 4) == 0))) {
    *out = a;
    return 1;
  }
  return slow_parse(s, num->len, 0, NULL, out);
}

size_t tpu_fpconv_f64_parse(const char *s, size_t n, double *out) {
  tpu_fpconv_num_t num;
  if (!tpu_fpconv_scan(s, n, &num)) return 0;
  return tpu_fpconv_num_f64(&num, s, out) ? num.len : 0;
}

size_t tpu_fpconv_f32_parse(const char *s, size_t n, float *out) {
  tpu_fpconv_num_t num;
  if (!tpu_fpconv_scan(s, n, &num)) return 0;
  return tpu_fpconv_num_f32(&num, s, out) ? num.len : 0;
}
