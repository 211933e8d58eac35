/*
 * mmpool.c - the MatMul pool: model-free products on compute threads.
 *
 * DESIGN
 * A fixed set of threads takes jobs from one tpu_fifo_t (util/fifo.h: these threads have no
 * event loop to wake, so the FIFO's condition variable is their wake-up). Before computing, a
 * job whose client disconnected (CANCELLED) or whose deadline passed (DEADLINE_EXCEEDED) is
 * answered without compute. An FP32 result that overflowed to infinity or NaN is refused
 * (INVALID_ARGUMENT), never answered. The result goes back to the owning I/O thread's queue;
 * nothing here touches a socket or a connection.
 *
 * Lock rules: the only lock is the FIFO's own (fifo.h), never held while computing or while
 * calling done. `aborting` is atomic: stop sets it before it closes the FIFO, so every job taken
 * after the close sees it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmpool.h"

#include <pthread.h>

#include "clock.h"
#include "fifo.h"
#include "log.h"
#include "result.h"
#include "stats.h"

struct tpu__mmpool {
  tpu_engine_t *engine;
  pthread_t *threads;
  unsigned nthreads;
  tpu_fifo_t jobs; /* linked through job->link; closed by stop */
  int fifo_ok;     /* jobs was initialized */
  atomic_int aborting;
};

/* An FP32 result (FP32 and BF16 operands) that overflowed is refused, as an infer result is
 * (dispatch/methods.c): the operands are finite (validate.c), so the products or their sums left
 * FP32's range. INT8 gives INT32, always finite. */
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
  for (tpu_qnode_t *n; (n = tpu_fifo_take(&p->jobs));) /* NULL: stopped and drained */
    run_matmul(p, tpu_container_of(n, tpu__mm_job_t, link), atomic_load(&p->aborting));
  return NULL;
}

int tpu__mmpool_create(tpu_engine_t *engine, unsigned threads, tpu__mmpool_t **out) {
  tpu__mmpool_t *p = calloc(1, sizeof *p);
  if (!p) return -1;
  p->engine = engine;
  p->threads = calloc(threads, sizeof *p->threads);
  if (!p->threads) goto fail;
  if (tpu_fifo_init(&p->jobs, 0) != 0) goto fail;
  p->fifo_ok = 1;
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
  /* Unbounded (bound 0), as the pool always was: a refused push means it is stopping. */
  return tpu_fifo_push(&p->jobs, &job->link) == TPU_FIFO_OK ? 0 : -1;
}

void tpu__mmpool_stop(tpu__mmpool_t *p, int abort) {
  if (!p->fifo_ok) return;
  if (abort) atomic_store(&p->aborting, 1);
  tpu_fifo_close(&p->jobs); /* the threads drain what is queued, then exit */
  for (unsigned i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  p->nthreads = 0;
}

void tpu__mmpool_free(tpu__mmpool_t *p) {
  if (!p) return;
  tpu__mmpool_stop(p, 1);
  if (p->fifo_ok) tpu_fifo_destroy(&p->jobs);
  free(p->threads);
  free(p);
}
