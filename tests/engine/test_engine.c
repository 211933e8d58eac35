/*
 * test_engine.c - engine objects (engine/frame/engine.c): configuration defaults and limits,
 * the TPUD_ISA override, statistics snapshots, and NULL handling.
 */
#include <stdlib.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

static void test_defaults(void) {
  tpu_engine_t *e = NULL;
  tpu_engine_stats_t st;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT_EQUAL(st.threads, 1);
  CU_ASSERT_EQUAL(st.systolic_rows, 128);
  CU_ASSERT_EQUAL(st.systolic_cols, 128);
  CU_ASSERT(st.calls == 0 && st.macs == 0 && st.sim_cycles == 0 && st.sim_macs_slots == 0);
  CU_ASSERT(st.isa != NULL && *st.isa);
  CU_ASSERT_EQUAL(tpu_engine_stats_utilization(&st), 0.0);
  tpu_engine_free(e);

  tpu_engine_config_t cfg = {.threads = 3, .systolic_rows = 16, .systolic_cols = 256};
  CU_ASSERT_FATAL(tpu_engine_create(&cfg, &e) == TPU_OK);
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT(st.threads == 3 && st.systolic_rows == 16 && st.systolic_cols == 256);
  tpu_engine_free(e);
  tpu_engine_free(NULL);
}

static void test_config_errors(void) {
  tpu_engine_t *e = (tpu_engine_t *)&e;
  CU_ASSERT(tpu_engine_create(NULL, NULL) == TPU_EINVAL);
  tpu_engine_config_t cfg = {.threads = TPU__MAX_THREADS + 1};
  CU_ASSERT(tpu_engine_create(&cfg, &e) == TPU_EINVAL);
  CU_ASSERT(e == NULL);
  cfg = (tpu_engine_config_t){.systolic_rows = TPU__MAX_SYSTOLIC + 1};
  CU_ASSERT(tpu_engine_create(&cfg, &e) == TPU_EINVAL);
  cfg = (tpu_engine_config_t){.systolic_cols = 0xffffffffu};
  CU_ASSERT(tpu_engine_create(&cfg, &e) == TPU_EINVAL);
  tpu_engine_stats_t st;
  CU_ASSERT(tpu_engine_stats(NULL, &st) == TPU_EINVAL);
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  CU_ASSERT(tpu_engine_stats(e, NULL) == TPU_EINVAL);
  tpu_engine_free(e);
  CU_ASSERT_EQUAL(tpu_engine_stats_utilization(NULL), 0.0);
}

/* TPUD_ISA forces a kernel set; an unknown name fails creation instead of being ignored. */
static void test_isa_env(void) {
  const char *prev = getenv("TPUD_ISA");
  char *saved = prev ? strdup(prev) : NULL;
  tpu_engine_t *e = NULL;
  tpu_engine_stats_t st;

  CU_ASSERT(setenv("TPUD_ISA", "ref", 1) == 0);
  CU_ASSERT(tpu_engine_create(NULL, &e) == TPU_OK);
  CU_ASSERT(e && tpu_engine_stats(e, &st) == TPU_OK && strcmp(st.isa, "ref") == 0);
  tpu_engine_free(e);
  e = NULL;

  CU_ASSERT(setenv("TPUD_ISA", "quantum", 1) == 0);
  CU_ASSERT(tpu_engine_create(NULL, &e) == TPU_EINVAL && e == NULL);

  /* A known set: available, or ENOTSUP when not compiled in or not runnable on this CPU. */
  static const char *const known[] = {"avx2", "avx512", "amx"};
  const tpu__kernel_set_t *sets[8];
  size_t n = tpu__kernels_available(sets, 8);
  for (int i = 0; i < 3; i++) {
    int have = 0;
    for (size_t s = 0; s < n; s++) have |= strcmp(sets[s]->name, known[i]) == 0;
    CU_ASSERT(setenv("TPUD_ISA", known[i], 1) == 0);
    tpu_status_t rc = tpu_engine_create(NULL, &e);
    CU_ASSERT(rc == (have ? TPU_OK : TPU_ENOTSUP));
    tpu_engine_free(e);
    e = NULL;
  }

  CU_ASSERT(setenv("TPUD_ISA", "", 1) == 0); /* empty: automatic */
  CU_ASSERT(tpu_engine_create(NULL, &e) == TPU_OK);
  CU_ASSERT(e && tpu_engine_stats(e, &st) == TPU_OK && strcmp(st.isa, sets[0]->name) == 0);
  tpu_engine_free(e);

  if (saved) {
    setenv("TPUD_ISA", saved, 1);
    free(saved);
  } else {
    unsetenv("TPUD_ISA");
  }
}

static void test_utilization(void) {
  tpu_engine_stats_t st = {.macs = 300, .sim_macs_slots = 1200};
  CU_ASSERT_DOUBLE_EQUAL(tpu_engine_stats_utilization(&st), 0.25, 1e-15);
  st.sim_macs_slots = 0;
  CU_ASSERT_EQUAL(tpu_engine_stats_utilization(&st), 0.0);
}

TPU_TEST_SUITE(engine,
               {"defaults", test_defaults},
               {"config_errors", test_config_errors},
               {"isa_env", test_isa_env},
               {"utilization", test_utilization})
