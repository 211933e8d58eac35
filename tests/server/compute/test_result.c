/*
 * test_result.c - compute/result.c: tpu_validate_result, the check that a computed FP32 result
 * holds no NaN or infinity before it is answered.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "result.h"
#include "tpu_test.h"

static const char *why = "the product overflows FP32";

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_finite_passes(void) {
  float y[6] = {0.0f, -0.0f, 1.5f, -3.4e38f, 3.4e38f, 1e-45f /* denormal */};
  char msg[128] = "untouched";
  CU_ASSERT_EQUAL(tpu_validate_result(y, 2, 3, "matmul: result", why, msg, sizeof msg), 0);
  CU_ASSERT_STRING_EQUAL(msg, "untouched");
  /* Nothing to check: no rows, no columns, no data. */
  CU_ASSERT_EQUAL(tpu_validate_result(y, 0, 3, "r", why, msg, sizeof msg), 0);
  CU_ASSERT_EQUAL(tpu_validate_result(y, 2, 0, "r", why, msg, sizeof msg), 0);
  CU_ASSERT_EQUAL(tpu_validate_result(NULL, 2, 3, "r", why, msg, sizeof msg), 0);
  CU_ASSERT_STRING_EQUAL(msg, "untouched");
}

static void test_nan_named_with_its_element(void) {
  float y[6] = {1, 2, 3, 4, 5, 6};
  y[5] = NAN;
  char msg[128];
  CU_ASSERT_EQUAL(tpu_validate_result(y, 2, 3, "matmul: result", why, msg, sizeof msg), -1);
  CU_ASSERT_STRING_EQUAL(msg, "matmul: result element [1,2] is NaN: the product overflows FP32");
  /* A NaN with its sign bit set is still NaN, not -infinity. */
  y[5] = 6;
  y[1] = from_bits(0xffc00001u);
  CU_ASSERT_EQUAL(tpu_validate_result(y, 2, 3, "out", why, msg, sizeof msg), -1);
  CU_ASSERT_STRING_EQUAL(msg, "out element [0,1] is NaN: the product overflows FP32");
}

static void test_infinities(void) {
  float y[4] = {1, 2, 3, 4};
  char msg[128];
  y[2] = INFINITY;
  CU_ASSERT_EQUAL(tpu_validate_result(y, 2, 2, "C", why, msg, sizeof msg), -1);
  CU_ASSERT_STRING_EQUAL(msg, "C element [1,0] is infinity: the product overflows FP32");
  y[2] = 3;
  y[3] = -INFINITY;
  CU_ASSERT_EQUAL(tpu_validate_result(y, 2, 2, "C", why, msg, sizeof msg), -1);
  CU_ASSERT_STRING_EQUAL(msg, "C element [1,1] is -infinity: the product overflows FP32");
}

/* The first bad element is the one named, whatever follows it. */
static void test_first_is_named(void) {
  float y[12];
  for (int i = 0; i < 12; i++) y[i] = (float)i;
  y[7] = -INFINITY;
  y[9] = NAN;
  char msg[128];
  CU_ASSERT_EQUAL(tpu_validate_result(y, 3, 4, "out", why, msg, sizeof msg), -1);
  CU_ASSERT_STRING_EQUAL(msg, "out element [1,3] is -infinity: the product overflows FP32");
}

/* A small message buffer cuts the text; none at all still gives the answer. */
static void test_message_buffer(void) {
  float y[1] = {NAN};
  char msg[12];
  CU_ASSERT_EQUAL(tpu_validate_result(y, 1, 1, "matmul: result", why, msg, sizeof msg), -1);
  CU_ASSERT_STRING_EQUAL(msg, "matmul: res");
  CU_ASSERT_EQUAL(tpu_validate_result(y, 1, 1, "matmul: result", why, NULL, 0), -1);
}

/* Random results against isfinite(): a few non-finite values planted at random places. */
static void test_random_against_isfinite(void) {
  enum { R = 17, C = 23 };
  static float y[R * C];
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < R * C; i++) y[i] = tpu_test_rand_float(-1e38f, 1e38f);
    int plant = (int)tpu_test_rand_range(0, 3);
    for (int k = 0; k < plant; k++) {
      long at = tpu_test_rand_range(0, R * C - 1);
      long what = tpu_test_rand_range(0, 2);
      y[at] = what == 0 ? NAN : what == 1 ? INFINITY : -INFINITY;
    }
    int first = -1;
    for (int i = 0; i < R * C && first < 0; i++)
      if (!isfinite(y[i])) first = i;
    char msg[160], want[160];
    int rc = tpu_validate_result(y, R, C, "out", why, msg, sizeof msg);
    TPU_ASSERT_SEED(rc == (first < 0 ? 0 : -1));
    if (first >= 0) {
      snprintf(want, sizeof want, "out element [%d,%d] is %s: %s", first / C, first % C,
               isnan(y[first]) ? "NaN" : y[first] > 0 ? "infinity" : "-infinity", why);
      TPU_ASSERT_SEED(strcmp(msg, want) == 0);
    }
  }
}

TPU_TEST_SUITE(server_result, {"finite_passes", test_finite_passes},
               {"nan_named_with_its_element", test_nan_named_with_its_element},
               {"infinities", test_infinities}, {"first_is_named", test_first_is_named},
               {"message_buffer", test_message_buffer},
               {"random_against_isfinite", test_random_against_isfinite})
