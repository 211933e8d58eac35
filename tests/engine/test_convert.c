/*
 * test_convert.c - BF16 rounding and symmetric INT8 quantization (engine/frame/convert.c).
 *
 * DESIGN
 * BF16: hand-picked bit patterns for every rounding edge (ties both ways, carries into the
 * exponent, overflow to Inf, NaN payloads that live only in the dropped bits, subnormals, -0),
 * all 65536 bf16 values round-tripped, and random floats against an independent float64
 * nearest-even reference. INT8: the scale formula, ties to even, the round-trip bound
 * |q·scale - x| <= scale/2, zero and subnormal rows, and the error paths.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tpu_engine.h"
#include "tpu_test.h"

static float f_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t bits_f(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static void test_bf16_edges(void) {
  static const struct {
    uint32_t in;
    uint16_t out;
  } cases[] = {
      {0x3f800000u, 0x3f80}, /* 1.0 */
      {0x3f808000u, 0x3f80}, /* 1 + 2^-8: tie, 0x3f80 is even */
      {0x3f818000u, 0x3f82}, /* tie, 0x3f81 is odd: up to 0x3f82 */
      {0x3f808001u, 0x3f81}, /* just above the tie */
      {0x3f807fffu, 0x3f80}, /* just below */
      {0xbf808000u, 0xbf80}, /* negative tie to even */
      {0xbf818000u, 0xbf82},
      {0x3fffffffu, 0x4000}, /* carry into the exponent */
      {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to +Inf */
      {0xff7fffffu, 0xff80}, /* -FLT_MAX to -Inf */
      {0x7f7f7fffu, 0x7f7f}, /* largest that stays finite */
      {0x7f7f8000u, 0x7f80}, /* tie at the top, odd: overflows */
      {0x7f800000u, 0x7f80}, /* +Inf */
      {0xff800000u, 0xff80}, /* -Inf */
      {0x00000000u, 0x0000}, /* +0 */
      {0x80000000u, 0x8000}, /* -0 keeps its sign */
      {0x00000001u, 0x0000}, /* smallest subnormal rounds to 0 */
      {0x00008000u, 0x0000}, /* subnormal tie to even (0) */
      {0x00018000u, 0x0002}, /* subnormal tie to even (2) */
      {0x00010000u, 0x0001}, /* exact bf16 subnormal */
      {0x007fffffu, 0x0080}, /* largest subnormal rounds up to the smallest normal */
      {0x80008001u, 0x8001}, /* negative subnormal above the tie */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = tpu_bf16_from_fp32(f_bits(cases[i].in));
    if (got != cases[i].out)
      printf("\n  bf16(0x%08x) = 0x%04x, want 0x%04x\n", cases[i].in, got, cases[i].out);
    CU_ASSERT_EQUAL(got, cases[i].out);
  }
  /* NaN stays NaN (quiet, sign kept), even when its payload is only in the dropped bits. */
  static const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu,
                                  0xffc00000u, 0x7f80ffffu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    uint16_t h = tpu_bf16_from_fp32(f_bits(nans[i]));
    CU_ASSERT((h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0); /* a NaN */
    CU_ASSERT((h & 0x0040) != 0);                            /* quiet */
    CU_ASSERT((h & 0x8000) == ((nans[i] >> 16) & 0x8000));   /* sign */
    CU_ASSERT(isnan(tpu_bf16_to_fp32(h)));
  }
  /* Widening is exact and keeps -0 and subnormals. */
  CU_ASSERT(signbit(tpu_bf16_to_fp32(0x8000)) && tpu_bf16_to_fp32(0x8000) == 0.0f);
  CU_ASSERT_EQUAL(tpu_bf16_to_fp32(0x0001), ldexpf(1.0f, -133));
  CU_ASSERT_EQUAL(tpu_bf16_to_fp32(0x3f80), 1.0f);
  CU_ASSERT(isinf(tpu_bf16_to_fp32(0xff80)) && tpu_bf16_to_fp32(0xff80) < 0);
}

/* Every bf16 value survives widen-then-round unchanged (NaNs come back as NaNs). */
static void test_bf16_round_trip_all(void) {
  size_t bad = 0;
  for (uint32_t h = 0; h <= 0xffff; h++) {
    float f = tpu_bf16_to_fp32((uint16_t)h);
    uint16_t back = tpu_bf16_from_fp32(f);
    if (isnan(f))
      bad += !isnan(tpu_bf16_to_fp32(back));
    else
      bad += back != h;
  }
  CU_ASSERT_EQUAL(bad, 0);
}

/* Independent reference: the two bf16 neighbours by truncation, the nearer in float64, the
 * even one on a tie. */
static uint16_t ref_bf16(float x) {
  uint32_t u = bits_f(x);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  double dl = fabs((double)x - tpu_bf16_to_fp32(lo));
  double vh = (lo & 0x7fff) == 0x7f7f ? ldexp(1.0, 128) * (x < 0 ? -1 : 1) /* next is Inf */
                                      : tpu_bf16_to_fp32(hi);
  double dh = fabs((double)x - vh);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

static void test_bf16_random(void) {
  size_t bad = 0;
  float src[1000];
  uint16_t dst[1000];
  float back[1000];
  for (int i = 0; i < 200000; i++) {
    /* Random bit patterns cover every exponent, subnormals included. */
    float x = f_bits((uint32_t)tpu_test_rand());
    if (!isfinite(x)) continue;
    uint16_t got = tpu_bf16_from_fp32(x), want = ref_bf16(x);
    if (got != want && !bad) printf("\n  bf16(%a): 0x%04x, want 0x%04x\n", x, got, want);
    bad += got != want;
  }
  TPU_ASSERT_SEED(bad == 0);
  /* The _n forms agree with the scalar ones. */
  for (int i = 0; i < 1000; i++) src[i] = tpu_test_rand_float(-1e6f, 1e6f);
  tpu_bf16_from_fp32_n(dst, src, 1000);
  tpu_bf16_to_fp32_n(back, dst, 1000);
  bad = 0;
  for (int i = 0; i < 1000; i++) {
    bad += dst[i] != tpu_bf16_from_fp32(src[i]);
    bad += bits_f(back[i]) != bits_f(tpu_bf16_to_fp32(dst[i]));
    bad += !(fabsf(back[i] - src[i]) <= fabsf(src[i]) * (1.0f / 256)); /* 2^-9 relative */
  }
  TPU_ASSERT_SEED(bad == 0);
  /* NULL buffers and n = 0 are no-ops, not crashes. */
  tpu_bf16_from_fp32_n(NULL, src, 10);
  tpu_bf16_from_fp32_n(dst, NULL, 10);
  tpu_bf16_to_fp32_n(NULL, dst, 10);
  tpu_bf16_to_fp32_n(back, NULL, 10);
  tpu_bf16_from_fp32_n(dst, src, 0);
}

static void test_quantize_random(void) {
  enum { ROWS = 37, COLS = 129 };
  static float x[ROWS * COLS], back[ROWS * COLS], scale[ROWS];
  static int8_t q[ROWS * COLS];
  for (size_t r = 0; r < ROWS; r++) {
    float mag = ldexpf(1.0f, (int)tpu_test_rand_range(-30, 30)); /* rows of different scale */
    for (size_t c = 0; c < COLS; c++) x[r * COLS + c] = tpu_test_rand_float(-mag, mag);
  }
  CU_ASSERT_FATAL(tpu_quantize_rows(x, ROWS, COLS, q, scale) == TPU_OK);
  CU_ASSERT_FATAL(tpu_dequantize_rows(q, ROWS, COLS, scale, back) == TPU_OK);
  size_t bad = 0;
  for (size_t r = 0; r < ROWS; r++) {
    float amax = 0;
    int qmax = 0;
    for (size_t c = 0; c < COLS; c++) {
      amax = fmaxf(amax, fabsf(x[r * COLS + c]));
      qmax = q[r * COLS + c] < 0 ? (-q[r * COLS + c] > qmax ? -q[r * COLS + c] : qmax)
                                 : (q[r * COLS + c] > qmax ? q[r * COLS + c] : qmax);
    }
    bad += scale[r] != amax / 127.0f; /* the documented formula, exactly */
    bad += qmax != 127;               /* the largest element uses the full range */
    for (size_t c = 0; c < COLS; c++) {
      size_t i = r * COLS + c;
      bad += q[i] == -128; /* symmetric: -128 is never produced */
      /* Round trip within half a quantum (plus the division's own rounding). */
      double err = fabs((double)q[i] * scale[r] - x[i]);
      bad += !(err <= 0.5 * scale[r] * (1 + 1e-5));
      bad += back[i] != (float)q[i] * scale[r];
    }
  }
  TPU_ASSERT_SEED(bad == 0);
}

static void test_quantize_edges(void) {
  int8_t q[8];
  float s[2], back[8];
  /* Ties to even: scale is exactly 1 (127/127). */
  const float ties[] = {127.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f, 126.5f, -127.0f};
  const int8_t want[] = {127, 0, 2, 2, -2, 0, 126, -127};
  CU_ASSERT_FATAL(tpu_quantize_rows(ties, 1, 8, q, s) == TPU_OK);
  CU_ASSERT_EQUAL(s[0], 1.0f);
  for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(q[i], want[i]);
  /* An all-zero row gets scale 1 and zeros (-0 included). */
  const float zeros[] = {0.0f, -0.0f, 0.0f, 0.0f};
  CU_ASSERT(tpu_quantize_rows(zeros, 1, 4, q, s) == TPU_OK);
  CU_ASSERT_EQUAL(s[0], 1.0f);
  CU_ASSERT(q[0] == 0 && q[1] == 0 && q[2] == 0 && q[3] == 0);
  /* Rows are independent: a huge row does not change a small one's scale. */
  const float two[] = {1e30f, -1e30f, 1.0f, 0.25f};
  CU_ASSERT(tpu_quantize_rows(two, 2, 2, q, s) == TPU_OK);
  CU_ASSERT_EQUAL(s[0], 1e30f / 127.0f);
  CU_ASSERT_EQUAL(s[1], 1.0f / 127.0f);
  CU_ASSERT(q[0] == 127 && q[1] == -127 && q[2] == 127 && q[3] == 32); /* 31.75 -> 32 */
  /* Subnormal rows: amax/127 underflows or rounds coarsely; the largest element must still be
   * representable and the round trip stay within half a quantum. */
  const float sub[] = {ldexpf(190.0f, -149), ldexpf(-3.0f, -149), ldexpf(1.0f, -149),
                       ldexpf(-190.0f, -149)};
  CU_ASSERT(tpu_quantize_rows(sub, 1, 4, q, s) == TPU_OK);
  CU_ASSERT(s[0] > 0.0f);
  CU_ASSERT(tpu_dequantize_rows(q, 1, 4, s, back) == TPU_OK);
  for (int i = 0; i < 4; i++) CU_ASSERT(fabs((double)back[i] - sub[i]) <= 0.5 * s[0]);
  const float tiny[] = {ldexpf(1.0f, -149), 0.0f};
  CU_ASSERT(tpu_quantize_rows(tiny, 1, 2, q, s) == TPU_OK);
  CU_ASSERT(s[0] > 0.0f && q[0] >= 1 && q[1] == 0);
  CU_ASSERT(tpu_dequantize_rows(q, 1, 2, s, back) == TPU_OK);
  CU_ASSERT(fabs((double)back[0] - tiny[0]) <= 0.5 * s[0]);
  /* The largest floats: no overflow in the scale. */
  const float big[] = {FLT_MAX, -FLT_MAX};
  CU_ASSERT(tpu_quantize_rows(big, 1, 2, q, s) == TPU_OK);
  CU_ASSERT(q[0] == 127 && q[1] == -127 && isfinite(s[0]));
}

static void test_quantize_errors(void) {
  float x[4] = {1, 2, 3, 4}, s[2] = {1, 1}, out[4];
  int8_t q[4] = {1, 2, 3, 4};
  CU_ASSERT(tpu_quantize_rows(NULL, 1, 4, q, s) == TPU_EINVAL);
  CU_ASSERT(tpu_quantize_rows(x, 1, 4, NULL, s) == TPU_EINVAL);
  CU_ASSERT(tpu_quantize_rows(x, 1, 4, q, NULL) == TPU_EINVAL);
  CU_ASSERT(tpu_quantize_rows(x, 0, 4, q, s) == TPU_EINVAL);
  CU_ASSERT(tpu_quantize_rows(x, 1, 0, q, s) == TPU_EINVAL);
  CU_ASSERT(tpu_quantize_rows(x, SIZE_MAX, 2, q, s) == TPU_EOVERFLOW);
  x[2] = NAN;
  CU_ASSERT(tpu_quantize_rows(x, 2, 2, q, s) == TPU_ERANGE);
  x[2] = INFINITY;
  CU_ASSERT(tpu_quantize_rows(x, 2, 2, q, s) == TPU_ERANGE);
  x[2] = -INFINITY;
  CU_ASSERT(tpu_quantize_rows(x, 2, 2, q, s) == TPU_ERANGE);

  CU_ASSERT(tpu_dequantize_rows(NULL, 1, 4, s, out) == TPU_EINVAL);
  CU_ASSERT(tpu_dequantize_rows(q, 1, 4, NULL, out) == TPU_EINVAL);
  CU_ASSERT(tpu_dequantize_rows(q, 1, 4, s, NULL) == TPU_EINVAL);
  CU_ASSERT(tpu_dequantize_rows(q, 0, 4, s, out) == TPU_EINVAL);
  CU_ASSERT(tpu_dequantize_rows(q, 1, 0, s, out) == TPU_EINVAL);
  CU_ASSERT(tpu_dequantize_rows(q, SIZE_MAX, 2, s, out) == TPU_EOVERFLOW);
  s[1] = 0.0f;
  CU_ASSERT(tpu_dequantize_rows(q, 2, 2, s, out) == TPU_ERANGE);
  s[1] = NAN;
  CU_ASSERT(tpu_dequantize_rows(q, 2, 2, s, out) == TPU_ERANGE);
  s[1] = 0.5f;
  /* The failed quantize calls may have written rows before the bad one: start afresh. */
  q[0] = 1, q[3] = 4, s[0] = 1.0f;
  CU_ASSERT(tpu_dequantize_rows(q, 2, 2, s, out) == TPU_OK);
  CU_ASSERT(out[0] == 1.0f && out[3] == 2.0f);
}

TPU_TEST_SUITE(engine_convert,
               {"bf16_edges", test_bf16_edges},
               {"bf16_round_trip_all", test_bf16_round_trip_all},
               {"bf16_random", test_bf16_random},
               {"quantize_random", test_quantize_random},
               {"quantize_edges", test_quantize_edges},
               {"quantize_errors", test_quantize_errors})
