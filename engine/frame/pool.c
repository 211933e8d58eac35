/*
 * pool.c - the engine's fixed pool of compute threads.
 *
 * DESIGN
 * Workers are created with the engine and joined when it is freed; a run wakes them, so no
 * thread is created and nothing is allocated per call. One job at a time: run_lock is held by
 * the caller whose job owns the pool, and a second caller that fails to take it computes alone
 * rather than queueing (plans may run concurrently from many threads; none ever waits for
 * another's job). Parts are static (part p of n), which suits the dense, evenly sized blocks the
 * plans hand out.
 *
 * Lock rules: `mu` protects every field below it in struct tpu__pool; workers sleep on `wake`
 * for a new generation and the caller sleeps on `done` until `pending` reaches 0. The job fields
 * are written only by the holder of run_lock, under mu.
 */
#include <pthread.h>
#include <stdlib.h>

#include "tpu_internal.h"

typedef struct {
  tpu__pool_t *pool;
  unsigned part;
  pthread_t tid;
} worker_t;

struct tpu__pool {
  unsigned nthreads; /* workers + the calling thread */
  worker_t *workers; /* nthreads - 1 */
  pthread_mutex_t run_lock;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  uint64_t generation; /* bumped once per job */
  unsigned pending;    /* workers still running the current job */
  int stop;
  tpu__pool_fn fn;
  void *arg;
};

static void *worker_main(void *p) {
  worker_t *w = p;
  tpu__pool_t *pool = w->pool;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool->mu);
  for (;;) {
    while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->wake, &pool->mu);
    if (pool->stop) break;
    seen = pool->generation;
    tpu__pool_fn fn = pool->fn;
    void *arg = pool->arg;
    pthread_mutex_unlock(&pool->mu);
    fn(arg, w->part, pool->nthreads);
    pthread_mutex_lock(&pool->mu);
    if (--pool->pending == 0) pthread_cond_signal(&pool->done);
  }
  pthread_mutex_unlock(&pool->mu);
  return NULL;
}

static void stop_workers(tpu__pool_t *pool, unsigned started) {
  pthread_mutex_lock(&pool->mu);
  pool->stop = 1;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);
  for (unsigned i = 0; i < started; i++) pthread_join(pool->workers[i].tid, NULL);
}

tpu_status_t tpu__pool_create(unsigned nthreads, tpu__pool_t **out) {
  tpu__pool_t *pool = NULL;
  unsigned started = 0;
  int inited = 0; /* how many of run_lock, mu, wake, done are initialized */
  if (!out) return TPU_EINVAL;
  *out = NULL;
  if (nthreads < 2) return TPU_EINVAL;
  pool = calloc(1, sizeof *pool);
  if (!pool) goto fail;
  pool->nthreads = nthreads;
  pool->workers = calloc(nthreads - 1, sizeof *pool->workers);
  if (!pool->workers) goto fail;
  if (pthread_mutex_init(&pool->run_lock, NULL) != 0) goto fail;
  inited++;
  if (pthread_mutex_init(&pool->mu, NULL) != 0) goto fail;
  inited++;
  if (pthread_cond_init(&pool->wake, NULL) != 0) goto fail;
  inited++;
  if (pthread_cond_init(&pool->done, NULL) != 0) goto fail;
  inited++;
  for (; started < nthreads - 1; started++) {
    worker_t *w = &pool->workers[started];
    w->pool = pool;
    w->part = started + 1; /* part 0 is the caller's */
    if (pthread_create(&w->tid, NULL, worker_main, w) != 0) goto fail;
  }
  *out = pool;
  return TPU_OK;

fail:
  if (inited == 4) stop_workers(pool, started);
  if (inited >= 4) pthread_cond_destroy(&pool->done);
  if (inited >= 3) pthread_cond_destroy(&pool->wake);
  if (inited >= 2) pthread_mutex_destroy(&pool->mu);
  if (inited >= 1) pthread_mutex_destroy(&pool->run_lock);
  if (pool) free(pool->workers);
  free(pool);
  return TPU_ENOMEM;
}

void tpu__pool_free(tpu__pool_t *pool) {
  if (!pool) return;
  stop_workers(pool, pool->nthreads - 1);
  pthread_cond_destroy(&pool->done);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->mu);
  pthread_mutex_destroy(&pool->run_lock);
  free(pool->workers);
  free(pool);
}

unsigned tpu__pool_threads(const tpu__pool_t *pool) { return pool ? pool->nthreads : 1; }

int tpu__pool_run(tpu__pool_t *pool, tpu__pool_fn fn, void *arg) {
  if (pthread_mutex_trylock(&pool->run_lock) != 0) return 0;
  pthread_mutex_lock(&pool->mu);
  pool->fn = fn;
  pool->arg = arg;
  pool->pending = pool->nthreads - 1;
  pool->generation++;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);

  fn(arg, 0, pool->nthreads);

  pthread_mutex_lock(&pool->mu);
  while (pool->pending != 0) pthread_cond_wait(&pool->done, &pool->mu);
  pthread_mutex_unlock(&pool->mu);
  pthread_mutex_unlock(&pool->run_lock);
  return 1;
}
