/*
 * test_engine.c - engine objects (engine/frame/engine.c): configuration defaults and limits,
 * the TPUD_ISA override, statistics snapshots, and NULL handling.
 */
#include <pthread.h>
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
  CU_ASSERT_EQUAL(st.spin_us, TPU_ENGINE_SPIN_DEFAULT_US);
  CU_ASSERT(st.calls == 0 && st.macs == 0 && st.sim_cycles == 0 && st.sim_macs_slots == 0);
  CU_ASSERT(st.isa != NULL && *st.isa);
  CU_ASSERT_EQUAL(tpu_engine_stats_utilization(&st), 0.0);
  tpu_engine_free(e);

  tpu_engine_config_t cfg = {.threads = 3, .systolic_rows = 16, .systolic_cols = 256};
  CU_ASSERT_FATAL(tpu_engine_create(&cfg, &e) == TPU_OK);
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT(st.threads == 3 && st.systolic_rows == 16 && st.systolic_cols == 256);
  tpu_engine_free(e);
  /* Spin: a value, or never; the engine reports what its threads do. */
  cfg = (tpu_engine_config_t){.threads = 2, .spin_us = 7};
  CU_ASSERT_FATAL(tpu_engine_create(&cfg, &e) == TPU_OK);
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK && st.spin_us == 7);
  tpu_engine_rest(e);
  tpu_engine_free(e);
  cfg = (tpu_engine_config_t){.threads = 2, .spin_us = TPU_ENGINE_SPIN_OFF};
  CU_ASSERT_FATAL(tpu_engine_create(&cfg, &e) == TPU_OK);
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK && st.spin_us == 0);
  tpu_engine_free(e);
  tpu_engine_free(NULL);
  tpu_engine_rest(NULL);
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
  cfg = (tpu_engine_config_t){.spin_us = TPU_ENGINE_SPIN_MAX_US + 1};
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

/* Statistics live in the plans (engine.c): runs of live plans and of freed ones both count, a
 * freed plan's runs are neither lost nor counted twice, and plans on two threads at once add up
 * (each thread runs its own plan). */
typedef struct {
  tpu_plan_t *plan;
  const float *a;
  float *c;
  int runs, failed;
} stats_job_t;

static void *stats_runner(void *arg) {
  stats_job_t *j = arg;
  for (int i = 0; i < j->runs; i++) j->failed |= tpu_plan_run(j->plan, j->a, NULL, j->c) != TPU_OK;
  return NULL;
}

static void test_stats_plans(void) {
  tpu_engine_t *e = NULL;
  tpu_weights_t *w = NULL;
  tpu_plan_t *p1 = NULL, *p2 = NULL;
  tpu_engine_stats_t st;
  float wt[4 * 3] = {0}, a[5 * 4] = {0}, c1[5 * 3], c2[5 * 3];
  tpu_weights_desc_t d = {.compute = TPU_DTYPE_FP32, .k = 4, .n = 3, .layout = TPU_LAYOUT_NK,
                          .src_dtype = TPU_DTYPE_FP32, .src = wt};
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  CU_ASSERT_FATAL(tpu_weights_pack(e, &d, &w) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 2, TPU_DTYPE_FP32, NULL, &p1) == TPU_OK);
  CU_ASSERT_FATAL(tpu_plan_create(e, w, 5, TPU_DTYPE_FP32, NULL, &p2) == TPU_OK);
  stats_job_t j1 = {p1, a, c1, 1000, 0}, j2 = {p2, a, c2, 700, 0};
  pthread_t t;
  CU_ASSERT_FATAL(pthread_create(&t, NULL, stats_runner, &j1) == 0);
  stats_runner(&j2);
  pthread_join(t, NULL);
  CU_ASSERT(!j1.failed && !j2.failed);
  const uint64_t calls = 1700, macs = 1000 * 2 * 4 * 3 + 700 * 5 * 4 * 3;
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT(st.calls == calls && st.macs == macs);
  uint64_t cycles = st.sim_cycles, slots = st.sim_macs_slots;
  CU_ASSERT(cycles == 1000 * tpu_systolic_cycles(128, 128, 2, 4, 3) +
                          700 * tpu_systolic_cycles(128, 128, 5, 4, 3));
  CU_ASSERT(slots == cycles * 128 * 128);
  tpu_plan_free(p1); /* its runs stay counted, once */
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT(st.calls == calls && st.macs == macs && st.sim_cycles == cycles &&
            st.sim_macs_slots == slots);
  CU_ASSERT(tpu_plan_run(p2, a, NULL, c2) == TPU_OK);
  tpu_plan_free(p2);
  CU_ASSERT(tpu_engine_stats(e, &st) == TPU_OK);
  CU_ASSERT(st.calls == calls + 1 && st.macs == macs + 5 * 4 * 3);
  tpu_weights_free(w);
  tpu_engine_free(e);
}

TPU_TEST_SUITE(engine,
               {"stats_plans", test_stats_plans},
               {"defaults", test_defaults},
               {"config_errors", test_config_errors},
               {"isa_env", test_isa_env},
               {"utilization", test_utilization})
