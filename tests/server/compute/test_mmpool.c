/* test_mmpool.c - the MatMul pool (server/compute/mmpool.h): jobs computed against the engine's
 * own product, done called once on a pool thread with the result in the job; cancelled, past
 * their deadline, or queued at an aborting stop: refused without compute; a submit after stop
 * refused (done never called). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "mmpool.h"
#include "stats.h"
#include "tpu_test.h"

typedef struct {
  tpu__mm_job_t job;
  atomic_int done;
  pthread_t thread;
} tjob_t;

static void on_done(tpu__mm_job_t *j) {
  tjob_t *t = tpu_container_of(j, tjob_t, job);
  t->thread = pthread_self();
  atomic_fetch_add(&t->done, 1);
}

static void wait_done(tjob_t *t) {
  uint64_t until = tpu_now_us() + 20000000u;
  while (!atomic_load(&t->done) && tpu_now_us() < until) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

static void job_init(tjob_t *t, size_t m, size_t k, size_t n, const float *a, const float *b) {
  memset(t, 0, sizeof *t);
  t->job = (tpu__mm_job_t){.dtype = TPU_DTYPE_FP32, .m = m, .k = k, .n = n, .a = a, .b = b,
                           .done = on_done};
}

static void test_computes(void) {
  tpu_engine_t *e;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  tpu__mmpool_t *p;
  CU_ASSERT_EQUAL_FATAL(tpu__mmpool_create(e, 2, &p), 0);
  enum { M = 5, K = 7, N = 3 };
  float a[M * K], b[K * N], want[M * N];
  for (int i = 0; i < M * K; i++) a[i] = (float)(i % 5) - 2.0f;
  for (int i = 0; i < K * N; i++) b[i] = (float)(i % 3) * 0.5f;
  CU_ASSERT_EQUAL_FATAL(tpu_matmul(e, TPU_DTYPE_FP32, M, K, N, a, b, want), TPU_OK);
  tjob_t t[8];
  for (int i = 0; i < 8; i++) {
    job_init(&t[i], M, K, N, a, b);
    CU_ASSERT_EQUAL(tpu__mmpool_submit(p, &t[i].job), 0);
  }
  for (int i = 0; i < 8; i++) {
    wait_done(&t[i]);
    CU_ASSERT_EQUAL(atomic_load(&t[i].done), 1);
    CU_ASSERT_EQUAL(t[i].job.code, TPU_CODE_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t[i].job.c);
    CU_ASSERT_EQUAL(memcmp(t[i].job.c, want, sizeof want), 0); /* the engine's own answer */
    CU_ASSERT_FALSE(pthread_equal(t[i].thread, pthread_self()));
    free(t[i].job.c);
  }
  tpu__mmpool_free(p);
  tpu_engine_free(e);
}

static void test_refusals(void) {
  tpu_engine_t *e;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  tpu__mmpool_t *p;
  CU_ASSERT_EQUAL_FATAL(tpu__mmpool_create(e, 1, &p), 0);
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1};
  atomic_int gone = 1;
  tjob_t cancelled, late, overflow;
  job_init(&cancelled, 2, 2, 2, a, b);
  cancelled.job.cancel = &gone;
  job_init(&late, 2, 2, 2, a, b);
  late.job.deadline_us = 1; /* long past */
  float big[4] = {3e38f, 3e38f, 3e38f, 3e38f}, two[4] = {2, 2, 2, 2};
  job_init(&overflow, 2, 2, 2, big, two);
  CU_ASSERT_EQUAL(tpu__mmpool_submit(p, &cancelled.job), 0);
  CU_ASSERT_EQUAL(tpu__mmpool_submit(p, &late.job), 0);
  CU_ASSERT_EQUAL(tpu__mmpool_submit(p, &overflow.job), 0);
  wait_done(&cancelled);
  wait_done(&late);
  wait_done(&overflow);
  CU_ASSERT_EQUAL(cancelled.job.code, TPU_CODE_CANCELLED);
  CU_ASSERT_PTR_NULL(cancelled.job.c);
  CU_ASSERT_EQUAL(late.job.code, TPU_CODE_DEADLINE_EXCEEDED);
  CU_ASSERT_PTR_NULL(late.job.c);
  CU_ASSERT_EQUAL(overflow.job.code, TPU_CODE_INVALID_ARGUMENT); /* infinity is no result */
  CU_ASSERT_PTR_NOT_NULL(strstr(overflow.job.msg, "overflows FP32"));
  free(overflow.job.c);
  tpu__mmpool_stop(p, 0);
  tjob_t after;
  job_init(&after, 2, 2, 2, a, b);
  CU_ASSERT_EQUAL(tpu__mmpool_submit(p, &after.job), -1); /* stopping: done is never called */
  CU_ASSERT_EQUAL(atomic_load(&after.done), 0);
  tpu__mmpool_free(p);
  tpu_engine_free(e);
}

TPU_TEST_SUITE(compute_mmpool,
               {"computes", test_computes},
               {"refusals", test_refusals})
