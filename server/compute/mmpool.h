/*
 * mmpool.h - the MatMul pool: model-free products on compute threads (mmpool.c).
 *
 * A job names its operands, its deadline and cancel flag, and the function that finishes it;
 * the pool computes it (or refuses it: cancelled, past its deadline, shutting down, a result that
 * overflowed FP32) and calls `done` on the pool thread, with the result in the job. The pool
 * knows nothing of calls, connections or audit records: `done` is the caller's continuation.
 */
#ifndef TPU_MMPOOL_H
#define TPU_MMPOOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fifo.h" /* tpu_qnode_t */
#include "tpu_engine.h"

typedef struct tpu__mmpool tpu__mmpool_t;
typedef struct tpu__mm_job tpu__mm_job_t;

struct tpu__mm_job {
  tpu_qnode_t link;
  /* Set by the submitter. */
  int dtype;                /* tpu_dtype_t */
  size_t m, k, n;
  const void *a, *b;        /* [m,k] and [k,n], alive until done */
  uint64_t deadline_us;     /* 0 = none */
  atomic_int *cancel;       /* non-zero: the client is gone; may be NULL */
  void (*done)(tpu__mm_job_t *job); /* pool thread; must not block */
  /* Set by the pool before done. */
  int code;                 /* TPU_CODE_* */
  char msg[512];
  void *c;                  /* [m,n] INT32 or FP32 (malloc'd; the submitter frees it) */
  uint64_t compute_us;
};

int tpu__mmpool_create(tpu_engine_t *engine, unsigned threads, tpu__mmpool_t **out);
/* Queues a job. Returns 0, or -1 when the pool is stopping (done is not called then). */
int tpu__mmpool_submit(tpu__mmpool_t *pool, tpu__mm_job_t *job);
/* Stops the pool: queued jobs are computed (abort 0) or failed UNAVAILABLE (abort 1). */
void tpu__mmpool_stop(tpu__mmpool_t *pool, int abort);
void tpu__mmpool_free(tpu__mmpool_t *pool);

#endif /* TPU_MMPOOL_H */
