/*
 * test_pool.c - the engine's compute thread pool (engine/frame/pool.c).
 *
 * DESIGN
 * Every part runs exactly once per job, part 0 on the caller's thread; a caller that finds the
 * pool busy is told so at once instead of waiting (the nested call below would deadlock if it
 * waited); thousands of back-to-back jobs neither lose a wake-up nor run a part twice, with the
 * workers spinning between jobs, never spinning (spin 0), or told to rest (tpu__pool_rest)
 * between some of them, so that they go to sleep and the next job must wake them.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "tpu_internal.h"
#include "tpu_test.h"

typedef struct {
  tpu__pool_t *pool;
  atomic_uint hits[8];
  pthread_t caller;
  atomic_int caller_ran_part0;
  atomic_int nested_result;
  atomic_uint nparts_seen;
} job_t;

static void count_part(void *arg, unsigned part, unsigned nparts) {
  job_t *j = arg;
  atomic_fetch_add(&j->hits[part], 1);
  atomic_store(&j->nparts_seen, nparts);
  if (part == 0 && pthread_equal(pthread_self(), j->caller))
    atomic_store(&j->caller_ran_part0, 1);
}

static void test_parts(void) {
  static const uint64_t spins[] = {50000, 0};
  for (unsigned si = 0; si < 2; si++) {
    for (unsigned threads = 2; threads <= 4; threads++) {
      for (unsigned rest = 0; rest < 2; rest++) {
        job_t j = {0};
        CU_ASSERT_FATAL(tpu__pool_create(threads, spins[si], &j.pool) == TPU_OK);
        CU_ASSERT_EQUAL(tpu__pool_threads(j.pool), threads);
        j.caller = pthread_self();
        const unsigned jobs = 2000;
        for (unsigned r = 0; r < jobs; r++) {
          CU_ASSERT_FATAL(tpu__pool_run(j.pool, count_part, &j) == 1);
          if (rest && r % 3 == 0) tpu__pool_rest(j.pool); /* a model's last layer */
        }
        for (unsigned p = 0; p < threads; p++) CU_ASSERT_EQUAL(atomic_load(&j.hits[p]), jobs);
        CU_ASSERT_EQUAL(atomic_load(&j.hits[threads]), 0);
        CU_ASSERT_EQUAL(atomic_load(&j.nparts_seen), threads);
        CU_ASSERT(atomic_load(&j.caller_ran_part0));
        tpu__pool_free(j.pool);
      }
    }
  }
}

static void nested_part(void *arg, unsigned part, unsigned nparts) {
  job_t *j = arg;
  /* The pool is busy with this very job: a second run must decline, not wait. */
  if (part == 0) atomic_store(&j->nested_result, tpu__pool_run(j->pool, count_part, j));
}

static void test_busy_declines(void) {
  job_t j = {0};
  j.caller = pthread_self();
  atomic_store(&j.nested_result, -1);
  CU_ASSERT_FATAL(tpu__pool_create(2, 50000, &j.pool) == TPU_OK);
  CU_ASSERT(tpu__pool_run(j.pool, nested_part, &j) == 1);
  CU_ASSERT_EQUAL(atomic_load(&j.nested_result), 0);
  CU_ASSERT_EQUAL(atomic_load(&j.hits[0]), 0); /* declined means nothing ran */
  /* And the pool is usable again afterwards. */
  CU_ASSERT(tpu__pool_run(j.pool, count_part, &j) == 1);
  CU_ASSERT(atomic_load(&j.hits[0]) == 1 && atomic_load(&j.hits[1]) == 1);
  tpu__pool_free(j.pool);
}

static void test_errors(void) {
  tpu__pool_t *pool = (tpu__pool_t *)&pool;
  CU_ASSERT(tpu__pool_create(1, 50000, &pool) == TPU_EINVAL);
  CU_ASSERT(pool == NULL);
  CU_ASSERT(tpu__pool_create(0, 50000, &pool) == TPU_EINVAL);
  CU_ASSERT(tpu__pool_create(2, 50000, NULL) == TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu__pool_threads(NULL), 1);
  tpu__pool_free(NULL);
  tpu__pool_rest(NULL);
  /* Created and freed without ever running a job: workers must still exit. */
  CU_ASSERT_FATAL(tpu__pool_create(3, 0, &pool) == TPU_OK);
  tpu__pool_free(pool);
}

TPU_TEST_SUITE(engine_pool,
               {"parts", test_parts},
               {"busy_declines", test_busy_declines},
               {"errors", test_errors})
