/*
 * unit_main.c - the one CUnit runner for every unit suite.
 *
 * Usage: tpud_unit [SUITE...]   runs all suites, or only those named. Exit status is non-zero
 * when any assertion failed or a suite could not be registered.
 */
#include <CUnit/Basic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpu_test.h"

static tpu_test_suite_t *suites;
static uint64_t seed;
static uint64_t rng[4];

void tpu_test__register(tpu_test_suite_t *suite) {
  suite->next = suites;
  suites = suite;
}

uint64_t tpu_test_seed(void) { return seed; }

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tpu_test_rand(void) {
  uint64_t result = rotl(rng[1] * 5, 7) * 9, t = rng[1] << 17;
  rng[2] ^= rng[0];
  rng[3] ^= rng[1];
  rng[1] ^= rng[2];
  rng[0] ^= rng[3];
  rng[2] ^= t;
  rng[3] = rotl(rng[3], 45);
  return result;
}

long tpu_test_rand_range(long lo, long hi) {
  return lo + (long)(tpu_test_rand() % (uint64_t)(hi - lo + 1));
}

float tpu_test_rand_float(float lo, float hi) {
  return lo + (hi - lo) * (float)((tpu_test_rand() >> 40) * (1.0 / 16777216.0));
}

static void seed_rng(uint64_t s) {
  for (int i = 0; i < 4; i++) { /* splitmix64 */
    s += 0x9e3779b97f4a7c15ULL;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    rng[i] = z ^ (z >> 31);
  }
}

static int wanted(const char *name, int argc, char **argv) {
  if (argc <= 1) return 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *env = getenv("TPU_TEST_SEED");
  if (env && *env) {
    seed = strtoull(env, NULL, 10);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
  }
  seed_rng(seed);
  printf("tpud_unit: TPU_TEST_SEED=%" PRIu64 "\n", seed);

  if (CU_initialize_registry() != CUE_SUCCESS) {
    fprintf(stderr, "tpud_unit: %s\n", CU_get_error_msg());
    return 2;
  }
  int nsuites = 0;
  for (tpu_test_suite_t *s = suites; s; s = s->next) {
    if (!wanted(s->name, argc, argv)) continue;
    CU_pSuite suite = CU_add_suite(s->name, NULL, NULL);
    if (!suite) goto fail;
    for (size_t i = 0; i < s->ncases; i++)
      if (!CU_add_test(suite, s->cases[i].name, s->cases[i].fn)) goto fail;
    nsuites++;
  }
  if (nsuites == 0) {
    fprintf(stderr, "tpud_unit: no suite matched\n");
    CU_cleanup_registry();
    return 2;
  }
  CU_basic_set_mode(CU_BRM_NORMAL);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
  unsigned run = CU_get_number_of_tests_run();
  CU_cleanup_registry();
  if (failed) printf("tpud_unit: failures with TPU_TEST_SEED=%" PRIu64 "\n", seed);
  return failed || run == 0 ? 1 : 0;

fail:
  fprintf(stderr, "tpud_unit: %s\n", CU_get_error_msg());
  CU_cleanup_registry();
  return 2;
}
