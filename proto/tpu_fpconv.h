/*
 * tpu_fpconv.h - binary32/binary64 <-> decimal text, exactly, without libm.
 *
 * DESIGN
 * The JSON path's number conversions. Formatting prints the text tpud has always printed: the
 * shortest "%.{P}g" (P = 6..9 for binary32, 15..17 for binary64) whose digits read back as the
 * same value, i.e. printf's correctly rounded digits (ties to even) and printf's choice between
 * fixed and exponent notation, "-0" for negative zero. Parsing is correctly rounded (to nearest,
 * ties to even) for both widths. Pure functions: no allocation on the common path, no I/O, no
 * global state, safe from any thread.
 */
#ifndef TPU_FPCONV_H
#define TPU_FPCONV_H

#include <stddef.h>
#include <stdint.h>

/* The longest texts, NUL included: "-1.23456789e-38", "-2.2250738585072014e-308". */
#define TPU_FPCONV_F32_MAX 16
#define TPU_FPCONV_F64_MAX 25
/* The buffer the format functions need: they copy fixed-size blocks past the text's end. */
#define TPU_FPCONV_LEN 48

/*
 * Writes v as the shortest "%.{6..9}g" text that reads back (round to nearest even) as v, NUL
 * terminated, into out (TPU_FPCONV_LEN bytes), and returns its length. NaN and infinities,
 * which JSON has no text for, leave an empty string and return 0.
 */
size_t tpu_fpconv_f32_format(float v, char *out);

/* The same for binary64 with "%.{15..17}g". */
size_t tpu_fpconv_f64_format(double v, char *out);

/*
 * (neg ? -1 : 1) * w * 10^e10 rounded to the nearest binary64 (ties to even) into *out: 1 when
 * the fast exact paths decide it, which is every case but rare near-ties at 19 digits; 0 when
 * the caller must take a slow exact path (tpu_fpconv_f64_parse does). Overflow gives infinity,
 * underflow zero or a subnormal, w == 0 a signed zero.
 */
int tpu_fpconv_f64_from_decimal(uint64_t w, int e10, int neg, double *out);

/* The same for binary32 (correctly rounded directly, not through a double). */
int tpu_fpconv_f32_from_decimal(uint64_t w, int e10, int neg, float *out);

/* One JSON number token, scanned (tpu_fpconv_scan). */
typedef struct {
  uint64_t w;  /* its first 19 significant digits, as an integer */
  int e10;     /* the value is w * 10^e10 (when lost is 0) */
  int neg;     /* a leading '-' */
  int digits;  /* significant digits in the token (leading zeros of a fraction not counted) */
  int lost;    /* a nonzero digit after the first 19: the value lies in (w, w + 1) * 10^e10 */
  int integer; /* no fraction and no exponent */
  size_t len;  /* bytes of the token */
} tpu_fpconv_num_t;

/*
 * Scans one JSON number (RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?) at the start
 * of s[0..n) into *num; returns its length, or 0 when s does not start with one. Exponents are
 * read up to 100000, beyond which every value is zero or infinite anyway.
 */
size_t tpu_fpconv_scan(const char *s, size_t n, tpu_fpconv_num_t *num);

/*
 * The scanned number s (num from tpu_fpconv_scan(s, ...)) correctly rounded into *out. 1, or
 * 0 only when a copy for the C library's strtod/strtof, which settles the rare hard cases
 * (long digit strings on a rounding boundary), could not be allocated. Out-of-range values give
 * infinity or zero, as strtod does; the caller decides whether those are errors.
 */
int tpu_fpconv_num_f64(const tpu_fpconv_num_t *num, const char *s, double *out);
int tpu_fpconv_num_f32(const tpu_fpconv_num_t *num, const char *s, float *out);

/* tpu_fpconv_scan and tpu_fpconv_num_f64/f32 in one: the token's length, or 0 (*out untouched)
 * when s does not start with a number. */
size_t tpu_fpconv_f64_parse(const char *s, size_t n, double *out);
size_t tpu_fpconv_f32_parse(const char *s, size_t n, float *out);

/* Internal, for the tests: n < 10^8 as eight ASCII digits, the first in the lowest byte. */
uint64_t tpu__fpconv_digits8(uint32_t n);

#endif
