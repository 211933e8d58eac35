/*
 * mmpool.c - the MatMul pool: model-free products on compute threads.
 *
 * DESIGN
 * A fixed set of threads takes calls FIFO from one queue (mutex + condition variable: these
 * threads have no event loop to wake, so a condvar is their wake-up). Before computing, a call
 * whose client disconnected (CANCELLED) or whose deadline passed (DEADLINE_EXCEEDED) is answered
 * without compute. An FP32 result that overflowed to infinity or NaN is refused (INVALID_ARGUMENT),
 * never answered. The result goes back to the owning I/O thread's queue; nothing here touches a
 * socket or a connection.
 *
 * Lock rules: `mu` guards head/tail/stopping/aborting only; it is never held while computing or
 * while pushing a completion.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmpool.h"

#include <pthread.h>

#include "clock.h"
#include "log.h"
#include "stats.h"
#include "validate.h"

struct tpu__mmpool {
  tpu_engine_t *engine;
  pthread_t *threads;
  unsigned nthreads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  tpu_qnode_t *head, *tail;
  int stopping, aborting;
};

/* An FP32 result (FP32 and BF16 operands) that overflowed is refused, as an infer result is
 * (dispatch/methods.c): the operands are finite (validate.c), so the products or their sums left FP32's
 * range. INT8 gives INT32, always finite. */
static void refuse_nonfinite(tpu__mm_job_t *job) {
  if (job->dtype == TPU_DTYPE_INT8) return; /* INT32 accumulators: always finite */
  if (tpu_validate_result(job->c, job->m, job->n, "matmul: result",
                          "the product overflows FP32, so there is no result (expected operands "
                          "whose products and sums stay below 3.4e38)",
                          job->msg, sizeof job->msg) != 0)
    job->code = TPU_CODE_INVALID_ARGUMENT;
}

static void run_matmul(tpu__mmpool_t *p, tpu__mm_job_t *job, int aborting) {
  uint64_t now = tpu_now_us();
  if (aborting) {
    job->code = TPU_CODE_UNAVAILABLE;
    snprintf(job->msg, sizeof job->msg, "matmul: server is shutting down");
  } else if (job->cancel && atomic_load(job->cancel)) {
    job->code = TPU_CODE_CANCELLED;
    snprintf(job->msg, sizeof job->msg, "matmul: client disconnected");
  } else if (job->deadline_us && now >= job->deadline_us) {
    job->code = TPU_CODE_DEADLINE_EXCEEDED;
    snprintf(job->msg, sizeof job->msg,
             "matmul: deadline expired while queued; not computed");
  } else if (!(job->c = malloc(job->m * job->n * 4))) {
    job->code = TPU_CODE_RESOURCE_EXHAUSTED;
    snprintf(job->msg, sizeof job->msg, "matmul: out of memory for the result");
  } else {
    tpu_status_t st = tpu_matmul(p->engine, (tpu_dtype_t)job->dtype, job->m, job->k,
                                 job->n, job->a, job->b, job->c);
    job->compute_us = tpu_now_us() - now;
    tpu_stats_inc(&tpu_stats.matmuls, 1);
    tpu_hist_observe(&tpu_stats.matmul_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS,
                     job->compute_us);
    if (st != TPU_OK) {
      job->code = st == TPU_ENOMEM ? TPU_CODE_RESOURCE_EXHAUSTED : TPU_CODE_INVALID_ARGUMENT;
      snprintf(job->msg, sizeof job->msg, "matmul: engine: %s", tpu_strerror(st));
    } else {
      job->code = TPU_CODE_OK;
      refuse_nonfinite(job);
    }
  }
  job->done(job); /* the caller's continuation (its audit record, then its I/O thread) */
}

static void *pool_main(void *arg) {
  tpu__mmpool_t *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->head && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
    if (!p->head) break;
    tpu_qnode_t *n = p->head;
    p->head = n->next;
    if (!p->head) p->tail = NULL;
    int aborting = p->aborting;
    pthread_mutex_unlock(&p->mu);
    run_matmul(p, tpu_container_of(n, tpu__mm_job_t, link), aborting);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int tpu__mmpool_create(tpu_engine_t *engine, unsigned threads, tpu__mmpool_t **out) {
  tpu__mmpool_t *p = calloc(1, sizeof *p);
  if (!p) return -1;
  p->engine = engine;
  p->threads = calloc(threads, sizeof *p->threads);
  if (!p->threads) goto fail;
  if (pthread_mutex_init(&p->mu, NULL) != 0) goto fail;
  if (pthread_cond_init(&p->cv, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    goto fail;
  }
  for (unsigned i = 0; i < threads; i++) {
    if (pthread_create(&p->threads[i], NULL, pool_main, p) != 0) {
      tpu__mmpool_free(p);
      return -1;
    }
    p->nthreads++;
  }
  *out = p;
  return 0;
fail:
  free(p->threads);
  free(p);
  return -1;
}

int tpu__mmpool_submit(tpu__mmpool_t *p, tpu__mm_job_t *job) {
  job->link.next = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->stopping) {
    pthread_mutex_unlock(&p->mu);
    return -1;
  }
  if (p->tail)
    p->tail->next = &job->link;
  else
    p->head = &job->link;
  p->tail = &job->link;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

void tpu__mmpool_stop(tpu__mmpool_t *p, int abort) {
  pthread_mutex_lock(&p->mu);
  p->stopping = 1;
  if (abort) p->aborting = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (unsigned i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  p->nthreads = 0;
}

void tpu__mmpool_free(tpu__mmpool_t *p) {
  if (!p) return;
  tpu__mmpool_stop(p, 1);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->threads);
  free(p);
}
