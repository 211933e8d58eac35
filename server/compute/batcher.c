/*
 * batcher.c - dynamic batching of one model version on its own thread.
 *
 * DESIGN
 * See batcher.h for the behaviour and the lock rules. The thread owns two buffers sized for the
 * largest bucket (input and output), reused for every batch, so the hot path allocates nothing.
 * A batch is described by segments (request, first row, row count, offset in the batch); after
 * the run each segment's output rows are copied back to its request.
 *
 * Wake-ups (the cost that dominates small models on few cores): the requests a batch finishes
 * are handed back inside tpu_queue_defer_begin/flush, so each I/O thread gets them as one
 * append and at most one eventfd write per batch; submit signals the condition variable after
 * releasing mu, so the woken thread does not block on it at once. The thread never spins before
 * sleeping: with the client on the same 2 vCPUs spinning took its CPU (measured: 1-connection
 * throughput halved, no gain at 64).
 */
#include "batcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fifo.h"
#include "log.h"
#include "queue.h"
#include "thread.h"

typedef struct {
  tpu_batch_req_t *req;
  size_t first, rows, offset;
} segment_t;

struct tpu_batcher {
  tpu_batcher_config_t cfg;
  char name[160];
  size_t buckets[64];
  size_t nbuckets;
  size_t cap;       /* rows per batch */
  size_t max_rows;  /* largest bucket: the buffers' size in rows */
  unsigned char *inbuf, *outbuf;
  segment_t *segs;
  uint64_t next_batch_id;
  /* Adaptive fill target: an exponentially weighted mean of the rows recent batches took, in
   * 1/16 rows (fixed point), starting at cap (so a fresh batcher waits for company, as before). */
  size_t fill16;
  pthread_t thread;
  int started, joined;

  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t cv;
  tpu_qlist_t queue; /* requests, linked through r->link; the head may be partly taken */
  size_t queued_rows;
  size_t target;      /* rows worth waiting for now (1..cap): submit wakes the thread at it */
  int stopping, aborting;
  char stop_why[256]; /* message of requests refused or failed by the stop; "" = shutdown */
};

size_t tpu_batcher_bucket_for(const size_t *buckets, size_t nbuckets, size_t n) {
  for (size_t i = 0; i < nbuckets; i++)
    if (buckets[i] >= n) return buckets[i];
  return 0;
}

static tpu_batch_req_t *req_of(tpu_qnode_t *n) { return tpu_container_of(n, tpu_batch_req_t, link); }

static void finish(tpu_batcher_t *b, tpu_batch_req_t *r) {
  if (r->done)
    r->done(r, r->done_ctx);
  else
    b->cfg.done(r, b->cfg.done_ctx);
}

static void fail_req(tpu_batch_req_t *r, int code, const char *fmt, const char *name) {
  r->code = code;
  snprintf(r->msg, sizeof r->msg, fmt, name);
}

static void wait_until(tpu_batcher_t *b, uint64_t when_us) {
  struct timespec ts = {.tv_sec = (time_t)(when_us / 1000000u),
                        .tv_nsec = (long)(when_us % 1000000u) * 1000};
  pthread_cond_timedwait(&b->cv, &b->mu, &ts);
}

static void run_batch(tpu_batcher_t *b, size_t nsegs, size_t n) {
  size_t bucket = tpu_batcher_bucket_for(b->buckets, b->nbuckets, n);
  size_t bi = 0;
  while (bi + 1 < b->nbuckets && b->buckets[bi] != bucket) bi++;
  size_t inb = b->cfg.in_row_bytes, outb = b->cfg.out_row_bytes;
  uint64_t tin = tpu_now_us();
  for (size_t i = 0; i < nsegs; i++) {
    segment_t *s = &b->segs[i];
    memcpy(b->inbuf + s->offset * inb, (const unsigned char *)s->req->in + s->first * inb,
           s->rows * inb);
  }
  if (bucket > n) memset(b->inbuf + n * inb, 0, (bucket - n) * inb);
  char err[160] = "";
  uint64_t want = 0;
  for (size_t i = 0; i < nsegs; i++) want |= b->segs[i].req->want;
  uint64_t t0 = tpu_now_us();
  int rc = b->cfg.run(b->cfg.run_ctx, bucket, b->inbuf, b->outbuf, want, err, sizeof err);
  uint64_t dt = tpu_now_us() - t0, din = t0 - tin, dout = 0;
  uint64_t id = ++b->next_batch_id;
  tpu_model_stats_t *st = b->cfg.stats;
  if (st) {
    tpu_stats_inc(&st->batches, 1);
    tpu_stats_inc(&st->rows_computed, n);
    tpu_stats_inc(&st->padding_rows, bucket - n);
    tpu_hist_observe(&st->compute_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, dt);
    tpu_hist_observe(&st->batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, n);
    tpu_stats_inc(&st->input_us, din);
    tpu_stats_inc(&st->bucket_batches[bi], 1);
    tpu_stats_inc(&st->bucket_input_us[bi], din);
    tpu_stats_inc(&st->bucket_compute_us[bi], dt);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    atomic_store_explicit(&st->last_infer_ms,
                          (uint64_t)wall.tv_sec * 1000u + (uint64_t)wall.tv_nsec / 1000000u,
                          memory_order_relaxed);
  }
  tpu_log_debug("%s: batch %llu: %zu rows in bucket %zu, %llu us", b->name,
                (unsigned long long)id, n, bucket, (unsigned long long)dt);
  if (rc != 0) tpu_log_warn("%s: batch %llu failed: %s", b->name, (unsigned long long)id, err);
  /* The batch's completions reach each I/O thread as one append and at most one wake-up. */
  tpu_queue_defer_begin();
  for (size_t i = 0; i < nsegs; i++) {
    segment_t *s = &b->segs[i];
    tpu_batch_req_t *r = s->req;
    if (rc == 0) {
      uint64_t tc = tpu_now_us();
      memcpy((unsigned char *)r->out + s->first * outb, b->outbuf + s->offset * outb,
             s->rows * outb);
      dout += tpu_now_us() - tc;
    } else if (r->code == TPU_CODE_OK) {
      r->code = TPU_CODE_INTERNAL;
      snprintf(r->msg, sizeof r->msg, "%s: engine call failed: %s", b->name, err);
    }
    r->computed += s->rows;
    r->compute_us += dt;
    r->batch_id = id;
    r->bucket = bucket;
    /* A request that failed with rows still queued is completed when next taken (below). */
    if (r->computed == r->rows) finish(b, r);
  }
  if (st) {
    tpu_stats_inc(&st->output_us, dout);
    tpu_stats_inc(&st->bucket_output_us[bi], dout);
  }
  tpu_queue_defer_flush();
}

static void *batcher_main(void *arg) {
  tpu_batcher_t *b = arg;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->queue.head && !b->stopping) pthread_cond_wait(&b->cv, &b->mu);
    if (!b->queue.head) break; /* stopping and drained */
    /* Wait for the batch to fill, at most max_queue_delay_us after the oldest row arrived, and
     * only up to the rows recent batches actually got (the target): under a load that brings
     * 40 rows per batch window it waits for ~40, with one closed-loop client it stops waiting
     * for company that never comes. A batch that found more rows queued than the target raises
     * it; one that timed out short lowers it. */
    b->target = (b->fill16 + 8) / 16;
    if (b->target < 1) b->target = 1;
    if (b->target > b->cap) b->target = b->cap;
    while (!b->stopping && b->queued_rows < b->target) {
      uint64_t until = req_of(b->queue.head)->enqueued_us + b->cfg.max_queue_delay_us;
      if (tpu_now_us() >= until) break;
      wait_until(b, until);
    }
    /* Form the batch, completing the requests that must not be computed. */
    tpu_qnode_t *failed = NULL, **failed_tail = &failed;
    size_t n = 0, nsegs = 0;
    uint64_t now = tpu_now_us();
    while (b->queue.head && n < b->cap) {
      tpu_batch_req_t *r = req_of(b->queue.head);
      int code = TPU_CODE_OK;
      if (r->code != TPU_CODE_OK) {
        code = r->code; /* an earlier chunk failed: msg already set */
      } else if (b->aborting) {
        code = TPU_CODE_UNAVAILABLE;
        if (b->stop_why[0])
          fail_req(r, code, "%s; request not computed", b->stop_why);
        else
          fail_req(r, code, "%s: server is shutting down; request not computed", b->name);
      } else if (r->cancel && atomic_load(r->cancel)) {
        code = TPU_CODE_CANCELLED;
        fail_req(r, code, "%s: client disconnected; request not computed", b->name);
      } else if (r->deadline_us && now >= r->deadline_us) {
        code = TPU_CODE_DEADLINE_EXCEEDED;
        fail_req(r, code, "%s: deadline expired while queued; request not computed", b->name);
      }
      if (code != TPU_CODE_OK) {
        tpu_qlist_pop(&b->queue);
        b->queued_rows -= r->rows - r->taken;
        if (r->taken == 0) r->queue_us = now - r->enqueued_us;
        r->link.next = NULL;
        *failed_tail = &r->link;
        failed_tail = &r->link.next;
        continue;
      }
      size_t take = r->rows - r->taken;
      if (take > b->cap - n) take = b->cap - n;
      if (r->taken == 0) {
        r->queue_us = now - r->enqueued_us;
        if (b->cfg.stats)
          tpu_hist_observe(&b->cfg.stats->queue_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS,
                           r->queue_us);
      }
      b->segs[nsegs++] = (segment_t){r, r->taken, take, n};
      r->taken += take;
      n += take;
      b->queued_rows -= take;
      if (r->taken == r->rows) tpu_qlist_pop(&b->queue);
    }
    /* The rows there were to take (capped): what the next batch may expect. */
    {
      size_t seen = b->queued_rows + n;
      if (seen > b->cap) seen = b->cap;
      if (n > 0) b->fill16 = b->fill16 + (seen * 16) / 4 - b->fill16 / 4;
    }
    pthread_mutex_unlock(&b->mu);
    if (failed) tpu_queue_defer_begin();
    while (failed) {
      tpu_qnode_t *next = failed->next;
      tpu_batch_req_t *r = req_of(failed);
      /* Rows of it may still be in this batch's segments? No: a request is only failed when it
       * is at the head before any of its rows are taken in this batch, and earlier batches have
       * completed; so nothing references it any more. */
      finish(b, r);
      failed = next;
      if (!failed) tpu_queue_defer_flush();
    }
    if (n > 0) run_batch(b, nsegs, n);
    pthread_mutex_lock(&b->mu);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

int tpu_batcher_create(const tpu_batcher_config_t *cfg, tpu_batcher_t **out) {
  *out = NULL;
  if (!cfg || !cfg->run || cfg->max_batch_size == 0 || cfg->queue_rows == 0 ||
      cfg->in_row_bytes == 0 || cfg->out_row_bytes == 0 || cfg->nbuckets > 64) {
    errno = EINVAL;
    return -1;
  }
  tpu_batcher_t *b = calloc(1, sizeof *b);
  if (!b) return -1;
  int mu_ok = 0, cv_ok = 0;
  b->cfg = *cfg;
  snprintf(b->name, sizeof b->name, "%s", cfg->name ? cfg->name : "model");
  b->cfg.name = b->name;
  if (cfg->nbuckets == 0) {
    b->buckets[0] = cfg->max_batch_size;
    b->nbuckets = 1;
  } else {
    for (size_t i = 0; i < cfg->nbuckets; i++) {
      if (cfg->buckets[i] == 0 || (i > 0 && cfg->buckets[i] <= cfg->buckets[i - 1])) {
        errno = EINVAL;
        goto fail;
      }
      b->buckets[i] = cfg->buckets[i];
    }
    b->nbuckets = cfg->nbuckets;
  }
  b->max_rows = b->buckets[b->nbuckets - 1];
  b->cap = cfg->max_batch_size < b->max_rows ? cfg->max_batch_size : b->max_rows;
  b->fill16 = b->cap * 16;
  b->target = b->cap;
  if (b->max_rows > SIZE_MAX / cfg->in_row_bytes || b->max_rows > SIZE_MAX / cfg->out_row_bytes) {
    errno = EOVERFLOW;
    goto fail;
  }
  b->inbuf = malloc(b->max_rows * cfg->in_row_bytes);
  b->outbuf = malloc(b->max_rows * cfg->out_row_bytes);
  b->segs = calloc(b->cap, sizeof *b->segs);
  if (!b->inbuf || !b->outbuf || !b->segs) goto fail;
  if (pthread_mutex_init(&b->mu, NULL) != 0) goto fail;
  mu_ok = 1;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int crc = pthread_cond_init(&b->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (crc != 0) goto fail;
  cv_ok = 1;
  if (tpu_thread_create(&b->thread, batcher_main, b) != 0) goto fail;
  b->started = 1;
  *out = b;
  return 0;
fail:
  if (cv_ok) pthread_cond_destroy(&b->cv);
  if (mu_ok) pthread_mutex_destroy(&b->mu);
  free(b->inbuf);
  free(b->outbuf);
  free(b->segs);
  free(b);
  return -1;
}

int tpu_batcher_submit(tpu_batcher_t *b, tpu_batch_req_t *r, char *msg, size_t msglen) {
  if (r->rows == 0) {
    snprintf(msg, msglen, "%s: a request needs at least one row", b->name);
    return TPU_CODE_INVALID_ARGUMENT;
  }
  r->code = TPU_CODE_OK;
  r->msg[0] = 0;
  r->queue_us = r->compute_us = r->batch_id = 0;
  r->bucket = r->taken = r->computed = 0;
  r->link.next = NULL;
  if (r->rows > b->cfg.queue_rows) { /* not an overload: it can never be queued, don't retry */
    snprintf(msg, msglen, "%s: a request of %zu rows exceeds the queue's limit %zu rows "
             "(--queue-rows): send it in smaller requests", b->name, r->rows, b->cfg.queue_rows);
    return TPU_CODE_RESOURCE_EXHAUSTED;
  }
  pthread_mutex_lock(&b->mu);
  if (b->stopping) {
    if (b->stop_why[0])
      snprintf(msg, msglen, "%s", b->stop_why);
    else
      snprintf(msg, msglen, "%s: server is shutting down", b->name);
    pthread_mutex_unlock(&b->mu);
    return TPU_CODE_UNAVAILABLE;
  }
  if (r->rows > b->cfg.queue_rows - b->queued_rows) {
    size_t q = b->queued_rows;
    pthread_mutex_unlock(&b->mu);
    snprintf(msg, msglen, "%s: queue full: %zu rows queued, %zu more requested, limit %zu rows",
             b->name, q, r->rows, b->cfg.queue_rows);
    return TPU_CODE_RESOURCE_EXHAUSTED;
  }
  r->enqueued_us = tpu_now_us();
  int was_empty = b->queue.head == NULL;
  tpu_qlist_push(&b->queue, &r->link);
  b->queued_rows += r->rows;
  /* Wake the thread when it may be idle (queue was empty) or its batch just became full. The
   * signal goes after the unlock: signalled under the lock, the woken thread would run on the
   * other core only to block on mu at once (a futex wait and a wake more per request). */
  int wake = was_empty || (b->queued_rows >= b->target && b->queued_rows - r->rows < b->target);
  pthread_mutex_unlock(&b->mu);
  if (wake) pthread_cond_signal(&b->cv);
  return TPU_CODE_OK;
}

void tpu_batcher_stop(tpu_batcher_t *b, int abort) { tpu_batcher_stop_why(b, abort, NULL); }

void tpu_batcher_stop_why(tpu_batcher_t *b, int abort, const char *why) {
  pthread_mutex_lock(&b->mu);
  if (why && !b->stopping) snprintf(b->stop_why, sizeof b->stop_why, "%s", why);
  b->stopping = 1;
  if (abort) b->aborting = 1;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  if (b->started && !b->joined) {
    pthread_join(b->thread, NULL);
    b->joined = 1;
  }
}

void tpu_batcher_free(tpu_batcher_t *b) {
  if (!b) return;
  tpu_batcher_stop(b, 1);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  free(b->inbuf);
  free(b->outbuf);
  free(b->segs);
  free(b);
}

size_t tpu_batcher_queued_rows(tpu_batcher_t *b) {
  pthread_mutex_lock(&b->mu);
  size_t n = b->queued_rows;
  pthread_mutex_unlock(&b->mu);
  return n;
}
