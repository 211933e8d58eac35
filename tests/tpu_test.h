/*
 * tpu_test.h - shared helpers for tpud's CUnit suites.
 *
 * DESIGN
 * Every test file registers its own suite with TPU_TEST_SUITE(name, { "test", fn }, ...): a
 * constructor adds it to the runner's list, so adding a test file needs no central edit. The
 * runner (unit_main.c) runs every suite, or those named on its command line.
 *
 * Randomized tests draw from tpu_test_rng(): the seed comes from TPU_TEST_SEED or the clock, is
 * printed at start, and is printed again with every failure so any run can be replayed.
 */
#ifndef TPU_TEST_H
#define TPU_TEST_H

#include <CUnit/CUnit.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char *name;
  CU_TestFunc fn;
} tpu_test_case_t;

typedef struct tpu_test_suite {
  const char *name;
  const tpu_test_case_t *cases;
  size_t ncases;
  struct tpu_test_suite *next;
} tpu_test_suite_t;

void tpu_test__register(tpu_test_suite_t *suite);

#define TPU_TEST_SUITE(sname, ...)                                                         \
  static const tpu_test_case_t tpu_test__cases_##sname[] = {__VA_ARGS__};                  \
  static tpu_test_suite_t tpu_test__suite_##sname = {                                      \
      #sname, tpu_test__cases_##sname,                                                     \
      sizeof(tpu_test__cases_##sname) / sizeof(tpu_test__cases_##sname[0]), NULL};        \
  __attribute__((constructor)) static void tpu_test__ctor_##sname(void) {                  \
    tpu_test__register(&tpu_test__suite_##sname);                                          \
  }

/* The run's seed (printed at start and on failures). */
uint64_t tpu_test_seed(void);
/* Deterministic per-run generator (xoshiro256**), seeded from tpu_test_seed(). */
uint64_t tpu_test_rand(void);
/* Uniform integer in [lo, hi]. */
long tpu_test_rand_range(long lo, long hi);
/* Uniform float in [lo, hi). */
float tpu_test_rand_float(float lo, float hi);

/* Assert with the seed in the failure message, so a random failure can be replayed. */
#define TPU_ASSERT_SEED(cond)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      char tpu__msg[256];                                                                  \
      snprintf(tpu__msg, sizeof tpu__msg, "%s (TPU_TEST_SEED=%llu)", #cond,                \
               (unsigned long long)tpu_test_seed());                                       \
      CU_assertImplementation(CU_FALSE, __LINE__, tpu__msg, __FILE__, "", CU_FALSE);       \
    } else {                                                                               \
      CU_PASS(#cond);                                                                      \
    }                                                                                      \
  } while (0)

#endif /* TPU_TEST_H */
