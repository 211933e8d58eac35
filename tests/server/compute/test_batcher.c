/*
 * test_batcher.c - the dynamic batcher against a fake model: padding to buckets, batch
 * formation, splitting, the bounded queue, deadlines, cancellation, shutdown.
 *
 * The fake model's row function out[j] = 2·in[0] + j + pad_marker·0 lets each output row be
 * checked against its own input row only, so a row leaking between requests or a padding row
 * reaching a request shows up. A gate lets a test hold the batcher inside a run.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batcher.h"
#include "clock.h"
#include "stats.h"
#include "tpu_test.h"

#define IN_W 3
#define OUT_W 2

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int gate_closed;     /* runs wait while set */
  int in_run;          /* a run is waiting at the gate */
  size_t runs, buckets[64];
  int done_count;
} fake_t;

static int fake_run(void *ctx, size_t rows, const void *in, void *out, uint64_t want, char *err,
                    size_t len) {
  (void)want;
  fake_t *f = ctx;
  pthread_mutex_lock(&f->mu);
  if (f->runs < 64) f->buckets[f->runs] = rows;
  f->runs++;
  f->in_run = 1;
  pthread_cond_broadcast(&f->cv);
  while (f->gate_closed) pthread_cond_wait(&f->cv, &f->mu);
  f->in_run = 0;
  pthread_mutex_unlock(&f->mu);
  const float *x = in;
  float *y = out;
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < OUT_W; j++) y[r * OUT_W + j] = 2 * x[r * IN_W] + (float)j;
  return 0;
}

static void fake_done(tpu_batch_req_t *req, void *ctx) {
  fake_t *f = ctx;
  pthread_mutex_lock(&f->mu);
  f->done_count++;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

static void wait_done(fake_t *f, int n) {
  pthread_mutex_lock(&f->mu);
  while (f->done_count < n) pthread_cond_wait(&f->cv, &f->mu);
  pthread_mutex_unlock(&f->mu);
}

static void wait_in_run(fake_t *f) {
  pthread_mutex_lock(&f->mu);
  while (!f->in_run) pthread_cond_wait(&f->cv, &f->mu);
  pthread_mutex_unlock(&f->mu);
}

static void gate(fake_t *f, int closed) {
  pthread_mutex_lock(&f->mu);
  f->gate_closed = closed;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

typedef struct {
  tpu_batch_req_t req;
  float *in, *out;
} treq_t;

static void treq_init(treq_t *t, size_t rows, float base) {
  memset(t, 0, sizeof *t);
  t->in = calloc(rows * IN_W, sizeof(float));
  t->out = calloc(rows * OUT_W, sizeof(float));
  for (size_t r = 0; r < rows; r++) t->in[r * IN_W] = base + (float)r;
  t->req.rows = rows;
  t->req.in = t->in;
  t->req.out = t->out;
}

static int treq_ok(const treq_t *t) {
  for (size_t r = 0; r < t->req.rows; r++)
    for (size_t j = 0; j < OUT_W; j++)
      if (t->out[r * OUT_W + j] != 2 * t->in[r * IN_W] + (float)j) return 0;
  return 1;
}

static void treq_free(treq_t *t) {
  free(t->in);
  free(t->out);
}

static const size_t buckets[] = {1, 4, 8};

static tpu_batcher_t *make(fake_t *f, tpu_model_stats_t *st, uint64_t delay_us, size_t queue_rows) {
  memset(f, 0, sizeof *f);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  tpu_batcher_config_t cfg = {.name = "model 't' version 1",
                              .max_batch_size = 8,
                              .buckets = buckets,
                              .nbuckets = 3,
                              .max_queue_delay_us = delay_us,
                              .queue_rows = queue_rows,
                              .in_row_bytes = IN_W * sizeof(float),
                              .out_row_bytes = OUT_W * sizeof(float),
                              .run = fake_run,
                              .run_ctx = f,
                              .done = fake_done,
                              .done_ctx = f,
                              .stats = st};
  tpu_batcher_t *b = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_batcher_create(&cfg, &b), 0);
  return b;
}

static void destroy(tpu_batcher_t *b, fake_t *f) {
  tpu_batcher_free(b);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
}

static void test_bucket_for(void) {
  CU_ASSERT_EQUAL(tpu_batcher_bucket_for(buckets, 3, 1), 1);
  CU_ASSERT_EQUAL(tpu_batcher_bucket_for(buckets, 3, 2), 4);
  CU_ASSERT_EQUAL(tpu_batcher_bucket_for(buckets, 3, 4), 4);
  CU_ASSERT_EQUAL(tpu_batcher_bucket_for(buckets, 3, 5), 8);
  CU_ASSERT_EQUAL(tpu_batcher_bucket_for(buckets, 3, 9), 0);
}

static void test_lone_request_padded(void) {
  fake_t f;
  tpu_model_stats_t st;
  memset(&st, 0, sizeof st);
  tpu_batcher_t *b = make(&f, &st, 2000, 100);
  treq_t t;
  treq_init(&t, 3, 10);
  char msg[256];
  uint64_t t0 = tpu_now_us();
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &t.req, msg, sizeof msg), TPU_CODE_OK);
  wait_done(&f, 1);
  uint64_t dt = tpu_now_us() - t0;
  CU_ASSERT(dt >= 1900);      /* waited for company ... */
  CU_ASSERT(dt < 2000 + 200000); /* ... but not much longer than max_queue_delay_us */
  CU_ASSERT_EQUAL(t.req.code, TPU_CODE_OK);
  CU_ASSERT(treq_ok(&t));
  CU_ASSERT_EQUAL(f.runs, 1);
  CU_ASSERT_EQUAL(f.buckets[0], 4);
  CU_ASSERT_EQUAL(t.req.bucket, 4);
  CU_ASSERT_EQUAL(tpu_stats_get(&st.padding_rows), 1);
  CU_ASSERT_EQUAL(tpu_stats_get(&st.rows_computed), 3);
  treq_free(&t);
  destroy(b, &f);
}

static void test_lone_requests_stop_waiting(void) {
  /* One closed-loop client: a fresh batcher waits for company (max_queue_delay_us), but after a
   * few batches of one row the adaptive target drops to 1 and a lone request runs at once. */
  fake_t f;
  tpu_model_stats_t st;
  memset(&st, 0, sizeof st);
  tpu_batcher_t *b = make(&f, &st, 30000, 100);
  char msg[256];
  uint64_t first = 0, last = 0;
  for (int i = 0; i < 25; i++) {
    treq_t t;
    treq_init(&t, 1, (float)i);
    uint64_t t0 = tpu_now_us();
    CU_ASSERT_EQUAL_FATAL(tpu_batcher_submit(b, &t.req, msg, sizeof msg), TPU_CODE_OK);
    wait_done(&f, i + 1);
    uint64_t dt = tpu_now_us() - t0;
    if (i == 0) first = dt;
    last = dt;
    CU_ASSERT(treq_ok(&t));
    treq_free(&t);
  }
  CU_ASSERT(first >= 29000); /* the first one waited for company ... */
  CU_ASSERT(last < 15000);   /* ... the last ones did not (30 ms delay; generous for CI) */
  destroy(b, &f);
}

static void test_batch_forms(void) {
  /* Eight 1-row requests submitted together fill one batch of 8 at once. */
  fake_t f;
  tpu_model_stats_t st;
  memset(&st, 0, sizeof st);
  tpu_batcher_t *b = make(&f, &st, 5000000, 100); /* long delay: only a full batch runs early */
  treq_t t[8];
  char msg[256];
  uint64_t t0 = tpu_now_us();
  for (int i = 0; i < 8; i++) {
    treq_init(&t[i], 1, (float)(100 * i));
    CU_ASSERT_EQUAL(tpu_batcher_submit(b, &t[i].req, msg, sizeof msg), TPU_CODE_OK);
  }
  wait_done(&f, 8);
  CU_ASSERT(tpu_now_us() - t0 < 1000000);
  CU_ASSERT_EQUAL(f.runs, 1);
  CU_ASSERT_EQUAL(f.buckets[0], 8);
  CU_ASSERT_EQUAL(tpu_stats_get(&st.batches), 1);
  CU_ASSERT_EQUAL(tpu_stats_get(&st.padding_rows), 0);
  for (int i = 0; i < 8; i++) {
    CU_ASSERT(treq_ok(&t[i]));
    CU_ASSERT_EQUAL(t[i].req.batch_id, t[0].req.batch_id);
    treq_free(&t[i]);
  }
  destroy(b, &f);
}

static void test_split_large(void) {
  fake_t f;
  tpu_model_stats_t st;
  memset(&st, 0, sizeof st);
  tpu_batcher_t *b = make(&f, &st, 100, 100);
  treq_t t;
  treq_init(&t, 21, 1);
  char msg[256];
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &t.req, msg, sizeof msg), TPU_CODE_OK);
  wait_done(&f, 1);
  CU_ASSERT_EQUAL(f.done_count, 1);
  CU_ASSERT_EQUAL(t.req.code, TPU_CODE_OK);
  CU_ASSERT(treq_ok(&t));
  CU_ASSERT_EQUAL(f.runs, 3); /* 8 + 8 + 5 (padded to 8) */
  CU_ASSERT_EQUAL(f.buckets[0], 8);
  CU_ASSERT_EQUAL(f.buckets[2], 8);
  CU_ASSERT_EQUAL(tpu_stats_get(&st.rows_computed), 21);
  CU_ASSERT_EQUAL(tpu_stats_get(&st.padding_rows), 3);
  treq_free(&t);
  destroy(b, &f);
}

static void test_random_mix(void) {
  /* Random request sizes from several threads' worth of submits: every row comes back right. */
  fake_t f;
  tpu_model_stats_t st;
  memset(&st, 0, sizeof st);
  tpu_batcher_t *b = make(&f, &st, 300, 100000);
  enum { N = 200 };
  static treq_t t[N];
  char msg[256];
  size_t rows = 0;
  for (int i = 0; i < N; i++) {
    treq_init(&t[i], (size_t)tpu_test_rand_range(1, 20), (float)(1000 * i));
    rows += t[i].req.rows;
    TPU_ASSERT_SEED(tpu_batcher_submit(b, &t[i].req, msg, sizeof msg) == TPU_CODE_OK);
    if (tpu_test_rand_range(0, 3) == 0) usleep(100);
  }
  wait_done(&f, N);
  for (int i = 0; i < N; i++) {
    TPU_ASSERT_SEED(t[i].req.code == TPU_CODE_OK && treq_ok(&t[i]));
    treq_free(&t[i]);
  }
  TPU_ASSERT_SEED(tpu_stats_get(&st.rows_computed) == rows);
  destroy(b, &f);
}

static void test_queue_full(void) {
  fake_t f;
  tpu_batcher_t *b = make(&f, NULL, 0, 10);
  gate(&f, 1);
  treq_t a, x, y, z;
  treq_init(&a, 1, 0);
  treq_init(&x, 6, 0);
  treq_init(&y, 4, 0);
  treq_init(&z, 1, 0);
  char msg[256];
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &a.req, msg, sizeof msg), TPU_CODE_OK);
  wait_in_run(&f); /* a is taken: the queue is empty again, the batcher is held */
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &x.req, msg, sizeof msg), TPU_CODE_OK);
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &y.req, msg, sizeof msg), TPU_CODE_OK);
  CU_ASSERT_EQUAL(tpu_batcher_queued_rows(b), 10);
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &z.req, msg, sizeof msg), TPU_CODE_RESOURCE_EXHAUSTED);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "queue full"));
  gate(&f, 0);
  wait_done(&f, 3);
  CU_ASSERT(treq_ok(&x) && treq_ok(&y));
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &z.req, msg, sizeof msg), TPU_CODE_OK); /* room again */
  wait_done(&f, 4);
  treq_t zero;
  treq_init(&zero, 0, 0);
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &zero.req, msg, sizeof msg), TPU_CODE_INVALID_ARGUMENT);
  treq_free(&a), treq_free(&x), treq_free(&y), treq_free(&z), treq_free(&zero);
  destroy(b, &f);
}

static void test_deadline_and_cancel(void) {
  fake_t f;
  tpu_model_stats_t st;
  memset(&st, 0, sizeof st);
  tpu_batcher_t *b = make(&f, &st, 0, 100);
  gate(&f, 1);
  treq_t a, late, gone, fine;
  treq_init(&a, 1, 0);
  treq_init(&late, 2, 0);
  treq_init(&gone, 2, 0);
  treq_init(&fine, 2, 5);
  atomic_int cancel = 0;
  char msg[256];
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &a.req, msg, sizeof msg), TPU_CODE_OK);
  wait_in_run(&f);
  late.req.deadline_us = tpu_now_us() + 1000;
  gone.req.cancel = &cancel;
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &late.req, msg, sizeof msg), TPU_CODE_OK);
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &gone.req, msg, sizeof msg), TPU_CODE_OK);
  fine.req.deadline_us = tpu_now_us() + 60000000;
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &fine.req, msg, sizeof msg), TPU_CODE_OK);
  atomic_store(&cancel, 1);
  usleep(5000); /* late's deadline passes while it is queued */
  gate(&f, 0);
  wait_done(&f, 4);
  CU_ASSERT_EQUAL(late.req.code, TPU_CODE_DEADLINE_EXCEEDED);
  CU_ASSERT_EQUAL(gone.req.code, TPU_CODE_CANCELLED);
  CU_ASSERT_EQUAL(fine.req.code, TPU_CODE_OK);
  CU_ASSERT(treq_ok(&fine));
  CU_ASSERT_EQUAL(tpu_stats_get(&st.rows_computed), 3); /* a + fine only: not computed */
  treq_free(&a), treq_free(&late), treq_free(&gone), treq_free(&fine);
  destroy(b, &f);
}

static void test_stop(void) {
  fake_t f;
  tpu_batcher_t *b = make(&f, NULL, 0, 100);
  gate(&f, 1);
  treq_t a, q1;
  treq_init(&a, 1, 0);
  treq_init(&q1, 3, 0);
  char msg[256];
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &a.req, msg, sizeof msg), TPU_CODE_OK);
  wait_in_run(&f);
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &q1.req, msg, sizeof msg), TPU_CODE_OK);
  gate(&f, 0);
  tpu_batcher_stop(b, 0); /* graceful: q1 is computed */
  CU_ASSERT_EQUAL(f.done_count, 2);
  CU_ASSERT_EQUAL(q1.req.code, TPU_CODE_OK);
  CU_ASSERT(treq_ok(&q1));
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &a.req, msg, sizeof msg), TPU_CODE_UNAVAILABLE);
  destroy(b, &f);

  b = make(&f, NULL, 0, 100);
  gate(&f, 1);
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &a.req, msg, sizeof msg), TPU_CODE_OK);
  wait_in_run(&f);
  CU_ASSERT_EQUAL(tpu_batcher_submit(b, &q1.req, msg, sizeof msg), TPU_CODE_OK);
  gate(&f, 0);
  tpu_batcher_stop(b, 1);
  CU_ASSERT_EQUAL(f.done_count, 2);
  /* q1 was queued when the abort came, unless the batcher took it first. */
  CU_ASSERT(q1.req.code == TPU_CODE_UNAVAILABLE || q1.req.code == TPU_CODE_OK);
  treq_free(&a), treq_free(&q1);
  destroy(b, &f);
}

static void test_create_errors(void) {
  tpu_batcher_config_t cfg = {0};
  tpu_batcher_t *b = (tpu_batcher_t *)1;
  CU_ASSERT_EQUAL(tpu_batcher_create(&cfg, &b), -1);
  CU_ASSERT_PTR_NULL(b);
  size_t bad[] = {4, 2};
  fake_t f;
  cfg = (tpu_batcher_config_t){.max_batch_size = 4, .buckets = bad, .nbuckets = 2,
                               .queue_rows = 1, .in_row_bytes = 4, .out_row_bytes = 4,
                               .run = fake_run, .run_ctx = &f, .done = fake_done, .done_ctx = &f};
  CU_ASSERT_EQUAL(tpu_batcher_create(&cfg, &b), -1);
  tpu_batcher_free(NULL);
}

TPU_TEST_SUITE(server_batcher, {"bucket_for", test_bucket_for},
               {"lone_request_padded", test_lone_request_padded},
               {"batch_forms", test_batch_forms},
               {"lone_requests_stop_waiting", test_lone_requests_stop_waiting}, {"split_large", test_split_large},
               {"random_mix", test_random_mix}, {"queue_full", test_queue_full},
               {"deadline_and_cancel", test_deadline_and_cancel}, {"stop", test_stop},
               {"create_errors", test_create_errors})

/* The counters' summaries, which the log (and the integration test) read. */
static void test_stats_format(void) {
  tpu_model_stats_t st;
  memset(&st, 0, sizeof st);
  char line[1024];
  tpu_stats_model_format(&st, line, sizeof line);
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "batches=0 rows=0"));
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "max_batch_bucket_le=none"));
  tpu_stats_inc(&st.batches, 2);
  tpu_stats_inc(&st.rows_computed, 10);
  tpu_hist_observe(&st.batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, 3);
  tpu_hist_observe(&st.batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, 7);
  tpu_stats_model_format(&st, line, sizeof line);
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "batches=2 rows=10"));
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "mean_batch_rows=5.00"));
  CU_ASSERT_PTR_NOT_NULL(strstr(line, "max_batch_bucket_le=8"));
  CU_ASSERT_EQUAL(tpu_stats_get(&st.batch_rows.count[2]), 1); /* 3 ≤ 4 */
  tpu_hist_observe(&st.queue_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 999999999);
  CU_ASSERT_EQUAL(tpu_stats_get(&st.queue_us.count[TPU_HIST_US_NBOUNDS]), 1); /* +Inf slot */
  CU_ASSERT_STRING_EQUAL(tpu_code_name(8), "RESOURCE_EXHAUSTED");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(99), "UNKNOWN");
}

TPU_TEST_SUITE(server_stats_format, {"format", test_stats_format})
