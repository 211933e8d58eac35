/*
 * test_fpconv.c - proto/tpu_fpconv.c: formatting against printf's digits (the shortest
 * "%.{6..9}g" / "%.{15..17}g" that strtof/strtod reads back, which is what tpud's JSON always
 * printed), parsing against strtod/strtof, edge values and random ones. The exhaustive binary32
 * check, which also compares with the old formatter's bytes, is bench/fpconv_check.c.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_fpconv.h"
#include "tpu_fpconv_tab.h"
#include "tpu_test.h"

static float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t bits32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static double f64_of(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}

static uint64_t bits64(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

/* The reference: the formatter's definition, through the C library (exact in glibc). */
static void ref_f32(float v, char *out) {
  for (int p = 6; p <= 9; p++) {
    snprintf(out, 40, "%.*g", p, (double)v);
    if (strtof(out, NULL) == v) return;
  }
}

static void ref_f64(double v, char *out) {
  for (int p = 15; p <= 17; p++) {
    snprintf(out, 40, "%.*g", p, v);
    if (strtod(out, NULL) == v) return;
  }
}

/* Formats v, checks length, NUL and the bytes against want; returns whether they matched. */
static int check_f32(float v, const char *want) {
  char buf[TPU_FPCONV_LEN];
  size_t n = tpu_fpconv_f32_format(v, buf);
  int ok = n == strlen(want) && strcmp(buf, want) == 0 && n < TPU_FPCONV_F32_MAX;
  if (!ok)
    printf("\nbinary32 0x%08" PRIx32 ": got \"%s\" (%zu), want \"%s\"\n", bits32(v), buf, n, want);
  return ok;
}

static int check_f64(double v, const char *want) {
  char buf[TPU_FPCONV_LEN];
  size_t n = tpu_fpconv_f64_format(v, buf);
  int ok = n == strlen(want) && strcmp(buf, want) == 0 && n < TPU_FPCONV_F64_MAX;
  if (!ok)
    printf("\nbinary64 0x%016" PRIx64 ": got \"%s\" (%zu), want \"%s\"\n", bits64(v), buf, n, want);
  return ok;
}

/* ---- formatting ---- */

static void test_f32_edges(void) {
  static const struct {
    uint32_t bits;
    const char *text;
  } cases[] = {
      {0x00000000u, "0"},          {0x80000000u, "-0"},             {0x00000001u, "1.4013e-45"},
      {0x80000001u, "-1.4013e-45"}, {0x007fffffu, "1.1754942e-38"}, {0x00800000u, "1.1754944e-38"},
      {0x7f7fffffu, "3.4028235e+38"}, {0xff7fffffu, "-3.4028235e+38"}, {0x3f800000u, "1"},
      {0x3dcccccdu, "0.1"},        {0x4b800000u, "16777216"},       {0x4b800001u, "16777218"},
      {0x5f000000u, "9.223372e+18"}, {0x49742400u, "1e+06"},        {0x4cbebc20u, "1e+08"},
      {0x38d1b717u, "0.0001"},     {0x3a83126fu, "0.001"},          {0x7e967699u, "1e+38"},
      {0x3f000000u, "0.5"},        {0xbfc00000u, "-1.5"},           {0x42f60000u, "123"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CU_ASSERT(check_f32(f32_of(cases[i].bits), cases[i].text));
}

static void test_f64_edges(void) {
  static const struct {
    uint64_t bits;
    const char *text;
  } cases[] = {
      {0x0000000000000000u, "0"},
      {0x8000000000000000u, "-0"},
      {0x0000000000000001u, "4.94065645841247e-324"},
      {0x0000000000000003u, "1.48219693752374e-323"},
      {0x0010000000000000u, "2.2250738585072014e-308"},
      {0x7fefffffffffffffu, "1.7976931348623157e+308"},
      {0xffefffffffffffffu, "-1.7976931348623157e+308"},
      {0x3fb999999999999au, "0.1"},
      {0x3fd5555555555555u, "0.3333333333333333"},
      {0x3ee4f8b588e368f1u, "1e-05"},
      {0x3f1a36e2eb1c432du, "0.0001"},
      {0x444b1ae4d6e2ef50u, "1e+21"},
      {0x430c6bf526340000u, "1e+15"},
      {0x4340000000000000u, "9007199254740992"},
      {0x437b69b4ba630f35u, "1.2345678901234568e+17"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char want[40];
    ref_f64(f64_of(cases[i].bits), want); /* the table's own texts, checked against printf */
    CU_ASSERT_STRING_EQUAL(want, cases[i].text);
    CU_ASSERT(check_f64(f64_of(cases[i].bits), cases[i].text));
  }
}

static void test_nan_inf_write_nothing(void) {
  char buf[TPU_FPCONV_LEN] = "x";
  CU_ASSERT_EQUAL(tpu_fpconv_f32_format(NAN, buf), 0);
  CU_ASSERT_STRING_EQUAL(buf, "");
  CU_ASSERT_EQUAL(tpu_fpconv_f32_format(-INFINITY, buf), 0);
  CU_ASSERT_EQUAL(tpu_fpconv_f32_format(f32_of(0x7fc00001u), buf), 0);
  CU_ASSERT_EQUAL(tpu_fpconv_f64_format(INFINITY, buf), 0);
  CU_ASSERT_EQUAL(tpu_fpconv_f64_format(-NAN, buf), 0);
  CU_ASSERT_STRING_EQUAL(buf, "");
}

/* Powers of ten and two, their neighbours, and each binade's ends: exponent-notation
 * thresholds, carries to the next power of ten, the asymmetric intervals at powers of two. */
static void test_powers_and_neighbours(void) {
  char want[40];
  int bad = 0;
  for (int k = -46; k <= 39; k++) {
    char t[16];
    snprintf(t, sizeof t, "1e%d", k);
    float v = strtof(t, NULL);
    for (int d = -2; d <= 2; d++) {
      float w = f32_of(bits32(v) + (uint32_t)d);
      if (!isfinite(w) || bits32(v) + (uint32_t)d > 0x7f7fffffu) continue;
      ref_f32(w, want);
      bad += !check_f32(w, want);
    }
  }
  for (uint32_t e = 0; e < 255; e++)
    for (uint32_t m = 0; m < 4; m++) {
      float lo = f32_of(e << 23 | m), hi = f32_of(e << 23 | (0x7fffffu - m));
      ref_f32(lo, want);
      bad += !check_f32(lo, want);
      ref_f32(hi, want);
      bad += !check_f32(hi, want);
    }
  for (int k = -324; k <= 308; k++) {
    char t[16];
    snprintf(t, sizeof t, "1e%d", k);
    double v = strtod(t, NULL);
    for (int d = -1; d <= 1; d++) {
      double w = f64_of(bits64(v) + (uint64_t)(int64_t)d);
      if (!isfinite(w) || w == 0) continue;
      ref_f64(w, want);
      bad += !check_f64(w, want);
    }
  }
  for (uint64_t e = 0; e < 2047; e += 7)
    for (uint64_t m = 0; m < 2; m++) {
      double lo = f64_of(e << 52 | m), hi = f64_of(e << 52 | (0xfffffffffffffu - m));
      ref_f64(lo, want);
      bad += !check_f64(lo, want);
      ref_f64(hi, want);
      bad += !check_f64(hi, want);
    }
  CU_ASSERT_EQUAL(bad, 0);
}

/* Random bit patterns (and, as often, small-magnitude and short-mantissa ones) against the
 * reference bytes, and back through the parser to the same bits. */
static void test_random_against_printf(void) {
  int bad = 0;
  char want[40], buf[TPU_FPCONV_LEN];
  for (int i = 0; i < 100000 && bad < 10; i++) {
    uint64_t r = tpu_test_rand();
    uint32_t u = (uint32_t)r;
    if (i % 4 == 1) u &= 0x807fffffu;                         /* subnormals */
    if (i % 4 == 2) u = (u & 0xff800000u) | ((u >> 9) & 0xff); /* few mantissa bits */
    float f = f32_of(u);
    if (isfinite(f)) {
      ref_f32(f, want);
      size_t n = tpu_fpconv_f32_format(f, buf);
      if (!check_f32(f, want)) bad++;
      float back;
      if (tpu_fpconv_f32_parse(buf, n, &back) != n || bits32(back) != u) bad++;
    }
    uint64_t v = tpu_test_rand();
    if (i % 4 == 1) v &= 0x800fffffffffffffu;
    if (i % 4 == 2) v = (v & 0xfff0000000000000u) | (v >> 40);
    double d = f64_of(v);
    if (!isfinite(d)) continue;
    ref_f64(d, want);
    size_t n = tpu_fpconv_f64_format(d, buf);
    if (!check_f64(d, want)) bad++;
    double back;
    if (tpu_fpconv_f64_parse(buf, n, &back) != n || bits64(back) != v) bad++;
    /* printf's 17 digits read back too */
    int m = snprintf(want, sizeof want, "%.17g", d);
    if (tpu_fpconv_f64_parse(want, (size_t)m, &back) != (size_t)m || bits64(back) != v) bad++;
  }
  TPU_ASSERT_SEED(bad == 0);
}

/* ---- parsing ---- */

static int parse_matches(const char *s) {
  size_t n = strlen(s);
  double d = 0, want_d = strtod(s, NULL);
  float f = 0, want_f = strtof(s, NULL);
  int ok = tpu_fpconv_f64_parse(s, n, &d) == n && bits64(d) == bits64(want_d) &&
           tpu_fpconv_f32_parse(s, n, &f) == n && bits32(f) == bits32(want_f);
  if (!ok) printf("\nparse \"%s\": %a / %a, strtod %a / strtof %a\n", s, d, (double)f, want_d,
                  (double)want_f);
  return ok;
}

static void test_parse_edges(void) {
  static const char *const cases[] = {
      "0", "-0", "0.0", "-0.0e5", "1", "-1", "0.1", "1e-45", "1.4e-45", "7e-46", "7.1e-46",
      "1.17549435e-38", "3.4028235e38", "3.40282356e38", "3.4028236e38", "1e39", "-1e39",
      "16777217", "16777219", "1.00000005960464477539062500", "1.000000059604644775390625001",
      "1.00000005960464477539062499", "9007199254740993", "9007199254740995",
      "9007199254740993.0000000000000000000001", "2.2250738585072011e-308",
      "2.2250738585072012e-308", "2.2250738585072014e-308", "4.9406564584124654e-324",
      "2.4703282292062327e-324", "2.4703282292062328e-324", "1.7976931348623157e308",
      "1.7976931348623158e308", "1.7976931348623159e308", "1e308", "1e309", "1e-400",
      "1e100000000", "1e-100000000", "0.5", "0.50000000000000000000", "0.25e1", "123456789e-20",
      "1234567890123456789", "12345678901234567890", "12345678901234567890123e-3",
      "0.1000000000000000055511151231257827021181583404541015625",
      "0.1000000000000000055511151231257827021181583404541015626",
      "0.00000000000000000000000000000000000000000000000000000001", "5E-1", "5e+1", "1E+22",
      "1e23", "8.98846567431158e307", "4.35e-10", "0.012345678", "-6.0221409e23",
      /* exact binary values the 64x128-bit product cannot settle: w / 5^-q times 2^q */
      "0.44921875", "0.77734375", "1158124731206254.5", "9.5367431640625e-07",
      "0.000000059604644775390625", "2.98023223876953125e-08", "16777217.0", "16777219.00",
      "9007199254740993.0", "-4503599627370497.5", "1.40129846432481707e-45",
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bad += !parse_matches(cases[i]);
  CU_ASSERT_EQUAL(bad, 0);
  /* Long tokens: 400 zeros after the point, then a one; a one and 400 zeros. */
  char big[512];
  memcpy(big, "0.", 2);
  memset(big + 2, '0', 400);
  memcpy(big + 402, "1", 2);
  CU_ASSERT(parse_matches(big));
  big[0] = '1';
  big[1] = '0';
  big[402] = '0';
  CU_ASSERT(parse_matches(big));
  memcpy(big, "1.", 2);
  memset(big + 2, '0', 400);
  memcpy(big + 402, "1e-30", 6);
  CU_ASSERT(parse_matches(big));
}

static void test_parse_grammar(void) {
  double d = 42;
  /* Not a number: nothing taken, *out untouched. */
  static const char *const bad[] = {"", "-", ".5", "+1", "1.", "1.e5", "1e", "1e+", "-x", "x1",
                                    "- 1", "\"1\""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CU_ASSERT_EQUAL(tpu_fpconv_f64_parse(bad[i], strlen(bad[i]), &d), 0);
    CU_ASSERT_EQUAL(d, 42);
  }
  /* Stops at the first byte that is not part of the number. */
  CU_ASSERT_EQUAL(tpu_fpconv_f64_parse("01", 2, &d), 1);
  CU_ASSERT_EQUAL(d, 0);
  CU_ASSERT_EQUAL(tpu_fpconv_f64_parse("1.5,2", 5, &d), 3);
  CU_ASSERT_EQUAL(d, 1.5);
  CU_ASSERT_EQUAL(tpu_fpconv_f64_parse("-2e3]", 5, &d), 4);
  CU_ASSERT_EQUAL(d, -2000);
  CU_ASSERT_EQUAL(tpu_fpconv_f64_parse("12345678.12345678x", 18, &d), 17); /* the 8-digit path */
  CU_ASSERT_EQUAL(d, 12345678.12345678);
  /* Honours n: no reading past the end. */
  CU_ASSERT_EQUAL(tpu_fpconv_f64_parse("123", 2, &d), 2);
  CU_ASSERT_EQUAL(d, 12);
  CU_ASSERT_EQUAL(tpu_fpconv_f64_parse("0.12345678", 6, &d), 6);
  CU_ASSERT_EQUAL(d, 0.1234);
  float f = 7;
  CU_ASSERT_EQUAL(tpu_fpconv_f32_parse("1e", 2, &f), 0);
  CU_ASSERT_EQUAL(f, 7);
  /* The scan's fields. */
  tpu_fpconv_num_t num;
  CU_ASSERT_EQUAL(tpu_fpconv_scan("-12.5e-3", 8, &num), 8);
  CU_ASSERT(num.w == 125 && num.e10 == -4 && num.neg && !num.integer && num.digits == 3 &&
            !num.lost && num.len == 8);
  CU_ASSERT_EQUAL(tpu_fpconv_scan("123456789012345678901", 21, &num), 21);
  CU_ASSERT(num.integer && num.digits == 21 && num.w == 1234567890123456789u && num.e10 == 2 &&
            num.lost);
}

static void test_from_decimal(void) {
  double d;
  float f;
  CU_ASSERT(tpu_fpconv_f64_from_decimal(0, 5, 1, &d) && signbit(d) && d == 0);
  CU_ASSERT(tpu_fpconv_f32_from_decimal(0, -5, 1, &f) && signbit(f) && f == 0);
  CU_ASSERT(tpu_fpconv_f64_from_decimal(1, 309, 0, &d) && isinf(d) && d > 0);
  CU_ASSERT(tpu_fpconv_f64_from_decimal(UINT64_MAX, -343, 1, &d) && d == 0 && signbit(d));
  CU_ASSERT(tpu_fpconv_f32_from_decimal(1, 39, 1, &f) && isinf(f) && f < 0);
  CU_ASSERT(tpu_fpconv_f32_from_decimal(UINT64_MAX, -66, 0, &f) && f == 0);
  CU_ASSERT(tpu_fpconv_f64_from_decimal(17976931348623157u, 292, 0, &d) && d == DBL_MAX);
  CU_ASSERT(tpu_fpconv_f32_from_decimal(34028235u, 31, 0, &f) && f == FLT_MAX);
  /* Binary32 directly, not through a double: 1 + 2^-24 + 2^-60 rounds up in one step, but to
   * 1 through the double 1 + 2^-24 (a tie, to even). */
  CU_ASSERT(tpu_fpconv_f32_parse("1.00000005960464477626", 22, &f) == 22 &&
            f == 1.00000011920928955078125f);
}

/* Random decimal tokens of 1..25 significant digits and wide exponents, against strtod and
 * strtof. */
static void test_parse_random(void) {
  int bad = 0;
  char s[64];
  for (int i = 0; i < 100000 && bad < 10; i++) {
    int nd = (int)tpu_test_rand_range(1, 25), n = 0;
    if (tpu_test_rand() & 1) s[n++] = '-';
    int point = (int)tpu_test_rand_range(0, nd);
    for (int k = 0; k < nd; k++) {
      if (k == point && k > 0) s[n++] = '.';
      s[n++] = (char)('0' + tpu_test_rand_range(0, 9));
    }
    if (tpu_test_rand() & 1) n += snprintf(s + n, 16, "e%d", (int)tpu_test_rand_range(-350, 320));
    s[n] = 0;
    /* JSON forbids leading zeros: "0" alone or "0." only. */
    const char *t = s + (s[0] == '-');
    if (t[0] == '0' && t[1] >= '0' && t[1] <= '9') continue;
    bad += !parse_matches(s);
    /* An exact dyadic value m * 2^-k, all its digits, and its neighbours' halfway points. */
    uint64_t m = tpu_test_rand() >> (int)tpu_test_rand_range(12, 63); /* 2m + 1 < 2^53 */
    int k = (int)tpu_test_rand_range(0, 60);
    snprintf(s, sizeof s, "%.40g", (double)(2 * m + 1) * pow(2, -k - 1));
    if (!strchr(s, 'e') || strstr(s, "e-")) bad += !parse_matches(s);
  }
  TPU_ASSERT_SEED(bad == 0);
}

/* The fixed-point digit generator for every n < 10^8 against plain division. */
static void test_digits8_every_value(void) {
  uint32_t bad = 0, first_bad = 0;
  for (uint32_t n = 0; n < 100000000; n++) {
    uint64_t want = 0;
    uint32_t r = n;
    for (int i = 7; i >= 0; i--, r /= 10) want |= (uint64_t)('0' + r % 10) << (8 * i);
    if (tpu__fpconv_digits8(n) != want && bad++ == 0) first_bad = n;
  }
  CU_ASSERT_EQUAL(bad, 0);
  if (bad) printf("\ndigits8 wrong for %" PRIu32 " values, first %" PRIu32 "\n", bad, first_bad);
}

/* The generated table against exact 128-bit arithmetic where 5^q fits (0 <= q <= 55). */
static void test_table(void) {
  unsigned __int128 p5 = 1;
  int bad = 0;
  for (int q = 0; q <= 55; q++) {
    int len = 128 - (p5 >> 64 ? __builtin_clzll((uint64_t)(p5 >> 64))
                              : 64 + __builtin_clzll((uint64_t)p5));
    unsigned __int128 t = p5 << (128 - len);
    const uint64_t *e = tpu__fpconv_pow5[q - TPU__FPCONV_POW5_MIN];
    bad += e[0] != (uint64_t)(t >> 64) || e[1] != (uint64_t)t;
    p5 *= 5;
  }
  CU_ASSERT_EQUAL(bad, 0);
  /* 5^-1 = 0.2: 0xcccc...cccc, truncated. */
  CU_ASSERT_EQUAL(tpu__fpconv_pow5[-1 - TPU__FPCONV_POW5_MIN][0], 0xccccccccccccccccu);
  CU_ASSERT_EQUAL(tpu__fpconv_pow5[-1 - TPU__FPCONV_POW5_MIN][1], 0xccccccccccccccccu);
}

TPU_TEST_SUITE(fpconv, {"f32_edges", test_f32_edges}, {"f64_edges", test_f64_edges},
               {"nan_inf_write_nothing", test_nan_inf_write_nothing},
               {"powers_and_neighbours", test_powers_and_neighbours},
               {"random_against_printf", test_random_against_printf},
               {"parse_edges", test_parse_edges}, {"parse_grammar", test_parse_grammar},
               {"from_decimal", test_from_decimal}, {"parse_random", test_parse_random},
               {"digits8_every_value", test_digits8_every_value}, {"table", test_table})
