/*
 * test_stats.c - the counters: status code names, gauges, histogram buckets at and around every
 * bound (and against a reference on random values), the accept-error labels, the HTTP status
 * slots, and the shape of the two log summaries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "tpu_test.h"

static void test_code_names(void) {
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_OK), "OK");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_UNAUTHENTICATED), "UNAUTHENTICATED");
  /* google.rpc.Code numbers. */
  CU_ASSERT_EQUAL(TPU_CODE_DEADLINE_EXCEEDED, 4);
  CU_ASSERT_EQUAL(TPU_CODE_UNAVAILABLE, 14);
  CU_ASSERT_EQUAL(TPU_CODE_UNAUTHENTICATED, 16);
  CU_ASSERT_EQUAL(TPU_CODE_COUNT, 17);
  /* Every code has its own name. */
  for (int i = 0; i < TPU_CODE_COUNT; i++) {
    CU_ASSERT_PTR_NOT_NULL_FATAL(tpu_code_name(i));
    for (int j = 0; j < i; j++) CU_ASSERT_STRING_NOT_EQUAL(tpu_code_name(i), tpu_code_name(j));
  }
  CU_ASSERT_STRING_EQUAL(tpu_code_name(-1), "UNKNOWN");
  /* The server's own statuses carry the name of the gRPC code they travel as. */
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_OVERLOADED), "RESOURCE_EXHAUSTED");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_ROWS), "UNKNOWN");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(1000000), "UNKNOWN");
}

static void test_counters(void) {
  _Atomic uint64_t c = 0;
  tpu_stats_inc(&c, 1);
  tpu_stats_inc(&c, 41);
  CU_ASSERT_EQUAL(tpu_stats_get(&c), 42);
  tpu_stats_dec(&c);
  CU_ASSERT_EQUAL(tpu_stats_get(&c), 41);
  tpu_stats_sub(&c, 40);
  CU_ASSERT_EQUAL(tpu_stats_get(&c), 1);
  tpu_stats_inc(&c, 0);
  CU_ASSERT_EQUAL(tpu_stats_get(&c), 1);
  /* 64 bits wide: no wrap at 2^32. */
  tpu_stats_inc(&c, 0xffffffffu);
  CU_ASSERT_EQUAL(tpu_stats_get(&c), 0x100000000ull);
}

/* The slot a value belongs in: the first bound it does not exceed, else the +Inf slot. */
static size_t ref_slot(const uint64_t *bounds, size_t nbounds, uint64_t v) {
  for (size_t i = 0; i < nbounds; i++)
    if (v <= bounds[i]) return i;
  return nbounds;
}

static uint64_t hist_total(tpu_hist_t *h) {
  uint64_t t = 0;
  for (size_t i = 0; i <= TPU_HIST_US_NBOUNDS; i++) t += tpu_stats_get(&h->count[i]);
  return t;
}

/* Observes v into a fresh histogram and checks it landed in exactly `slot`. */
static void one(const uint64_t *bounds, size_t nbounds, uint64_t v, size_t slot) {
  tpu_hist_t h;
  memset(&h, 0, sizeof h);
  tpu_hist_observe(&h, bounds, nbounds, v);
  CU_ASSERT_EQUAL(tpu_stats_get(&h.count[slot]), 1);
  CU_ASSERT_EQUAL(hist_total(&h), 1);
  CU_ASSERT_EQUAL(tpu_stats_get(&h.n), 1);
  CU_ASSERT_EQUAL(tpu_stats_get(&h.sum), v);
}

static void test_bounds(void) {
  /* Increasing, as Prometheus buckets must be; the microsecond ones reach 5 s. */
  for (size_t i = 1; i < TPU_HIST_US_NBOUNDS; i++)
    CU_ASSERT(tpu_hist_us_bounds[i] > tpu_hist_us_bounds[i - 1]);
  for (size_t i = 1; i < TPU_HIST_ROWS_NBOUNDS; i++)
    CU_ASSERT(tpu_hist_rows_bounds[i] > tpu_hist_rows_bounds[i - 1]);
  CU_ASSERT_EQUAL(tpu_hist_us_bounds[0], 50);
  CU_ASSERT_EQUAL(tpu_hist_us_bounds[TPU_HIST_US_NBOUNDS - 1], 5000000);
  CU_ASSERT_EQUAL(tpu_hist_rows_bounds[0], 1);
  CU_ASSERT_EQUAL(tpu_hist_rows_bounds[TPU_HIST_ROWS_NBOUNDS - 1], 1024);
  CU_ASSERT(TPU_HIST_ROWS_NBOUNDS <= TPU_HIST_US_NBOUNDS); /* rows histograms share the type */
}

static void test_observe_edges(void) {
  const uint64_t *b = tpu_hist_us_bounds;
  const size_t nb = TPU_HIST_US_NBOUNDS;
  /* At a bound: that bucket (≤); one above: the next; past the last: the +Inf slot. */
  one(b, nb, 0, 0);
  for (size_t i = 0; i < nb; i++) {
    one(b, nb, b[i], i);
    one(b, nb, b[i] - 1, i == 0 || b[i] - 1 > b[i - 1] ? i : i - 1);
    one(b, nb, b[i] + 1, i + 1);
  }
  one(b, nb, UINT64_MAX, nb);
  /* Rows bounds use the first 12 slots only. */
  const uint64_t *r = tpu_hist_rows_bounds;
  const size_t nr = TPU_HIST_ROWS_NBOUNDS;
  one(r, nr, 0, 0);
  one(r, nr, 1, 0);
  one(r, nr, 2, 1);
  one(r, nr, 3, 2);
  one(r, nr, 1024, nr - 1);
  one(r, nr, 1025, nr);
  one(r, nr, 1u << 20, nr);
  /* No bounds at all: everything is +Inf (slot 0). */
  one(r, 0, 5, 0);
}

static void test_observe_random(void) {
  tpu_hist_t h;
  memset(&h, 0, sizeof h);
  uint64_t want[TPU_HIST_US_NBOUNDS + 1] = {0}, sum = 0;
  const int n = 5000;
  for (int i = 0; i < n; i++) {
    /* Spread over the decades the bounds cover, and beyond. */
    uint64_t v = tpu_test_rand() % (1ull << tpu_test_rand_range(0, 24));
    want[ref_slot(tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, v)]++;
    sum += v;
    tpu_hist_observe(&h, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, v);
  }
  for (size_t i = 0; i <= TPU_HIST_US_NBOUNDS; i++)
    TPU_ASSERT_SEED(tpu_stats_get(&h.count[i]) == want[i]);
  TPU_ASSERT_SEED(tpu_stats_get(&h.sum) == sum);
  TPU_ASSERT_SEED(tpu_stats_get(&h.n) == (uint64_t)n);
}

static void test_accept_reasons(void) {
  CU_ASSERT_STRING_EQUAL(tpu_accept_reason_name(TPU_ACCEPT_EMFILE), "EMFILE");
  CU_ASSERT_STRING_EQUAL(tpu_accept_reason_name(TPU_ACCEPT_ENFILE), "ENFILE");
  CU_ASSERT_STRING_EQUAL(tpu_accept_reason_name(TPU_ACCEPT_ENOBUFS), "ENOBUFS");
  CU_ASSERT_STRING_EQUAL(tpu_accept_reason_name(TPU_ACCEPT_ENOMEM), "ENOMEM");
  CU_ASSERT_STRING_EQUAL(tpu_accept_reason_name(TPU_ACCEPT_EOTHER), "other");
  CU_ASSERT_STRING_EQUAL(tpu_accept_reason_name(-1), "other");
  CU_ASSERT_STRING_EQUAL(tpu_accept_reason_name(TPU_ACCEPT_NREASONS), "other");
}

static void test_http_status(void) {
  static const int codes[] = TPU_HTTP_STATUS_CODES;
  const size_t other = TPU_HTTP_NSTATUS - 1;
  CU_ASSERT_EQUAL(sizeof codes / sizeof codes[0], other);
  /* Each counted code has its own slot, and the slot maps back to it. */
  for (size_t i = 0; i < other; i++) {
    size_t at = tpu_http_status_index(codes[i]);
    CU_ASSERT_EQUAL(at, i);
    CU_ASSERT_EQUAL(tpu_http_status_at(at), codes[i]);
  }
  CU_ASSERT_EQUAL(tpu_http_status_index(200), 0);
  CU_ASSERT_EQUAL(tpu_http_status_at(tpu_http_status_index(503)), 503);
  /* Everything else shares the last slot, which maps to 0. */
  const int others[] = {0, -1, 100, 201, 204, 301, 401, 403, 499, 502, 599, 1000};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
    CU_ASSERT_EQUAL(tpu_http_status_index(others[i]), other);
  CU_ASSERT_EQUAL(tpu_http_status_at(other), 0);
  CU_ASSERT_EQUAL(tpu_http_status_at(other + 1), 0);
  CU_ASSERT_EQUAL(tpu_http_status_at((size_t)-1), 0);
}

static void test_model_format(void) {
  tpu_model_stats_t s;
  memset(&s, 0, sizeof s);
  char buf[512];
  tpu_stats_model_format(&s, buf, sizeof buf);
  CU_ASSERT_STRING_EQUAL(buf,
                         "requests_ok=0 requests_failed=0 (invalid=0 deadline=0 exhausted=0 "
                         "cancelled=0) batches=0 rows=0 padding_rows=0 mean_batch_rows=0.00 "
                         "max_batch_bucket_le=none mean_queue_us=0.0 mean_compute_us=0.0");
  tpu_stats_inc(&s.requests[TPU_CODE_OK], 7);
  tpu_stats_inc(&s.requests[TPU_CODE_INVALID_ARGUMENT], 2);
  tpu_stats_inc(&s.requests[TPU_CODE_DEADLINE_EXCEEDED], 1);
  tpu_stats_inc(&s.requests[TPU_CODE_RESOURCE_EXHAUSTED], 4);
  tpu_stats_inc(&s.requests[TPU_CODE_CANCELLED], 5);
  tpu_stats_inc(&s.requests[TPU_CODE_NOT_FOUND], 3); /* failed, in no named group */
  tpu_stats_inc(&s.requests[TPU_CODE_UNAUTHENTICATED], 1);
  tpu_stats_inc(&s.batches, 2);
  tpu_stats_inc(&s.rows_computed, 8);
  tpu_stats_inc(&s.padding_rows, 3);
  tpu_hist_observe(&s.batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, 3);
  tpu_hist_observe(&s.batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, 6);
  tpu_hist_observe(&s.queue_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 10);
  tpu_hist_observe(&s.queue_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 25);
  tpu_hist_observe(&s.compute_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 1234);
  tpu_stats_model_format(&s, buf, sizeof buf);
  CU_ASSERT_STRING_EQUAL(buf,
                         "requests_ok=7 requests_failed=16 (invalid=2 deadline=1 exhausted=4 "
                         "cancelled=5) batches=2 rows=8 padding_rows=3 mean_batch_rows=4.50 "
                         "max_batch_bucket_le=8 mean_queue_us=17.5 mean_compute_us=1234.0");
  /* The largest non-empty bucket: a bound, or "inf" past the last. */
  tpu_hist_observe(&s.batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, 1024);
  tpu_stats_model_format(&s, buf, sizeof buf);
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, " max_batch_bucket_le=1024 "));
  tpu_hist_observe(&s.batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, 5000);
  tpu_stats_model_format(&s, buf, sizeof buf);
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, " max_batch_bucket_le=inf "));
  /* A short buffer gets a cut, terminated line. */
  char small[16];
  memset(small, 'x', sizeof small);
  tpu_stats_model_format(&s, small, sizeof small);
  CU_ASSERT_EQUAL(strlen(small), sizeof small - 1);
  CU_ASSERT_EQUAL(strncmp(small, "requests_ok=7 r", sizeof small - 1), 0);
}

static void test_format(void) {
  /* tpu_stats is the process's: work on it, then put it back as it was. */
  static tpu_stats_t saved;
  memcpy(&saved, &tpu_stats, sizeof saved);
  memset(&tpu_stats, 0, sizeof tpu_stats);
  char buf[512];
  tpu_stats_format(buf, sizeof buf);
  CU_ASSERT_STRING_EQUAL(buf,
                         "requests_ok=0 requests_failed=0 connections_open=0 "
                         "connections_accepted=0 connections_rejected=0 bad_frames=0 matmuls=0");
  tpu_stats_inc(&tpu_stats.requests[TPU_CODE_OK], 10);
  tpu_stats_inc(&tpu_stats.requests[TPU_CODE_INTERNAL], 2);
  tpu_stats_inc(&tpu_stats.requests[TPU_CODE_UNAUTHENTICATED], 1);
  tpu_stats_inc(&tpu_stats.connections_open, 3);
  tpu_stats_inc(&tpu_stats.connections_accepted, 5);
  tpu_stats_inc(&tpu_stats.connections_rejected, 1);
  tpu_stats_inc(&tpu_stats.bad_frames, 4);
  tpu_stats_inc(&tpu_stats.matmuls, 12345678901ull);
  /* Counters it does not summarize stay out of the line. */
  tpu_stats_inc(&tpu_stats.http_connections_open, 99);
  tpu_stats_inc(&tpu_stats.buffered_bytes, 77);
  tpu_stats_format(buf, sizeof buf);
  CU_ASSERT_STRING_EQUAL(buf,
                         "requests_ok=10 requests_failed=3 connections_open=3 "
                         "connections_accepted=5 connections_rejected=1 bad_frames=4 "
                         "matmuls=12345678901");
  /* Every field is key=value, separated by single spaces, no newline. */
  int fields = 1;
  for (const char *p = buf; *p; p++) {
    CU_ASSERT(*p != '\n');
    if (*p == ' ') {
      fields++;
      CU_ASSERT(p[1] != ' ' && p[1] != 0);
    }
  }
  CU_ASSERT_EQUAL(fields, 7);
  char small[10];
  tpu_stats_format(small, sizeof small);
  CU_ASSERT_STRING_EQUAL(small, "requests_");
  memcpy(&tpu_stats, &saved, sizeof saved);
}

TPU_TEST_SUITE(server_stats,
               {"code_names", test_code_names},
               {"counters", test_counters},
               {"bounds", test_bounds},
               {"observe_edges", test_observe_edges},
               {"observe_random", test_observe_random},
               {"accept_reasons", test_accept_reasons},
               {"http_status", test_http_status},
               {"model_format", test_model_format},
               {"format", test_format})
