/*
 * stats.c - histogram bounds, code names and the log summaries of the counters.
 *
 * DESIGN
 * Everything is relaxed atomics (see stats.h); the summaries read each counter once and may mix
 * values from slightly different instants, which is fine for monitoring.
 */
#include "stats.h"

#include <stdio.h>

tpu_stats_t tpu_stats;

const uint64_t tpu_hist_us_bounds[TPU_HIST_US_NBOUNDS] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
    2500000, 5000000};
const uint64_t tpu_hist_rows_bounds[TPU_HIST_ROWS_NBOUNDS] = {1,  2,   4,   8,   16,  32,
                                                             64, 128, 256, 512, 1024};

void tpu_hist_observe(tpu_hist_t *h, const uint64_t *bounds, size_t nbounds, uint64_t value) {
  size_t i = 0;
  while (i < nbounds && value > bounds[i]) i++;
  tpu_stats_inc(&h->count[i], 1);
  tpu_stats_inc(&h->sum, value);
  tpu_stats_inc(&h->n, 1);
}

const char *tpu_accept_reason_name(int reason) {
  static const char *const names[TPU_ACCEPT_NREASONS] = {"EMFILE", "ENFILE", "ENOBUFS", "ENOMEM",
                                                         "other"};
  return reason >= 0 && reason < TPU_ACCEPT_NREASONS ? names[reason] : "other";
}

static const int http_codes[] = TPU_HTTP_STATUS_CODES;
_Static_assert(sizeof http_codes / sizeof http_codes[0] == TPU_HTTP_NSTATUS - 1,
               "TPU_HTTP_NSTATUS must be the number of codes plus the 'other' slot");

size_t tpu_http_status_index(int status) {
  for (size_t i = 0; i < TPU_HTTP_NSTATUS - 1; i++)
    if (http_codes[i] == status) return i;
  return TPU_HTTP_NSTATUS - 1;
}

int tpu_http_status_at(size_t index) {
  return index < TPU_HTTP_NSTATUS - 1 ? http_codes[index] : 0;
}

static uint64_t get(const _Atomic uint64_t *c) {
  return atomic_load_explicit((_Atomic uint64_t *)c, memory_order_relaxed);
}

static double mean(const tpu_hist_t *h) {
  uint64_t n = get(&h->n);
  return n ? (double)get(&h->sum) / (double)n : 0.0;
}

/* Upper bound of the largest non-empty batch-rows bucket ("none", a bound, or "inf"). */
static const char *top_bucket(const tpu_hist_t *h, char *b, size_t len) {
  int top = -1;
  for (int i = 0; i <= TPU_HIST_ROWS_NBOUNDS; i++)
    if (get(&h->count[i])) top = i;
  if (top < 0)
    snprintf(b, len, "none");
  else if (top == TPU_HIST_ROWS_NBOUNDS)
    snprintf(b, len, "inf");
  else
    snprintf(b, len, "%llu", (unsigned long long)tpu_hist_rows_bounds[top]);
  return b;
}

void tpu_stats_model_format(const tpu_model_stats_t *s, char *buf, size_t len) {
  char top[24];
  uint64_t err = 0;
  for (int i = 1; i < TPU_CODE_COUNT; i++) err += get(&s->requests[i]);
  snprintf(buf, len,
           "requests_ok=%llu requests_failed=%llu (invalid=%llu deadline=%llu exhausted=%llu "
           "cancelled=%llu) batches=%llu rows=%llu padding_rows=%llu mean_batch_rows=%.2f "
           "max_batch_bucket_le=%s mean_queue_us=%.1f mean_compute_us=%.1f",
           (unsigned long long)get(&s->requests[TPU_CODE_OK]), (unsigned long long)err,
           (unsigned long long)get(&s->requests[TPU_CODE_INVALID_ARGUMENT]),
           (unsigned long long)get(&s->requests[TPU_CODE_DEADLINE_EXCEEDED]),
           (unsigned long long)get(&s->requests[TPU_CODE_RESOURCE_EXHAUSTED]),
           (unsigned long long)get(&s->requests[TPU_CODE_CANCELLED]),
           (unsigned long long)get(&s->batches), (unsigned long long)get(&s->rows_computed),
           (unsigned long long)get(&s->padding_rows), mean(&s->batch_rows),
           top_bucket(&s->batch_rows, top, sizeof top),
           mean(&s->queue_us), mean(&s->compute_us));
}

void tpu_stats_format(char *buf, size_t len) {
  tpu_stats_t *s = &tpu_stats;
  uint64_t err = 0;
  for (int i = 1; i < TPU_CODE_COUNT; i++) err += get(&s->requests[i]);
  snprintf(buf, len,
           "requests_ok=%llu requests_failed=%llu connections_open=%llu "
           "connections_accepted=%llu connections_rejected=%llu bad_frames=%llu matmuls=%llu",
           (unsigned long long)get(&s->requests[TPU_CODE_OK]), (unsigned long long)err,
           (unsigned long long)get(&s->connections_open),
           (unsigned long long)get(&s->connections_accepted),
           (unsigned long long)get(&s->connections_rejected),
           (unsigned long long)get(&s->bad_frames), (unsigned long long)get(&s->matmuls));
}
