/*
 * pool.c - the engine's fixed pool of compute threads.
 *
 * DESIGN
 * Workers are created with the engine and joined when it is freed; a run wakes them, so no
 * thread is created and nothing is allocated per call. One job at a time: run_lock is held by
 * the caller whose job owns the pool, and a second caller that fails to take it computes alone
 * rather than queueing (plans may run concurrently from many threads; none ever waits for
 * another's job). A job has n parts (n = the pool's threads), evenly sized blocks the plans hand
 * out: part 0 is the caller's, the others go to whichever thread claims them first (`ticket`),
 * the caller included, so a worker that is not running (its core taken by an I/O thread or the
 * client) delays nothing: the caller claims that part and runs it itself. Which thread runs a
 * part never changes what the part computes.
 *
 * Waking: a sleeping thread costs a futex wake-up, tens of microseconds on a paravirtualized
 * VM, more than a whole small matmul. So workers, after a job, spin on the atomic generation for
 * up to the spin time before they sleep on `wake`, and the caller, after the parts it could
 * claim, spins on the atomic `remaining` (parts being run by others) before it sleeps on `done`
 * (OpenMP runtimes do the same, for longer).
 * Back-to-back plan runs (the layers of a model) then hand work over in about a microsecond.
 * Spinning is only worth it when the next job comes soon and the core is not wanted elsewhere:
 * after a model's last layer the next job is a whole batch away (the I/O threads must parse it
 * first, often on the very core a spinning worker holds: on 2 vCPUs a 50 µs spin after every
 * batch was 12% of tpud's CPU under load). So a graph program calls tpu_engine_rest after its
 * last step, and workers that see it stop spinning and sleep; the next job's generation bump
 * clears it. The spin time is the engine's (tpu_engine_config_t.spin_us: tpud picks it from the
 * CPU count; 0 there means the default, TPU_ENGINE_SPIN_OFF never spinning).
 *
 * Lock rules: `generation` and `remaining` are atomics, read without the lock while spinning;
 * the generation changes under `mu`, and the last part's finisher signals `done` under `mu`,
 * and a thread checks them under `mu` before it sleeps, so no wake-up is lost. The job fields
 * (fn, arg, ticket) are written only by the holder of run_lock, before the generation store
 * that publishes them; a part claimed from `ticket` keeps its job alive until it is done.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "tpu_internal.h"

typedef struct {
  tpu__pool_t *pool;
  pthread_t tid;
} worker_t;

struct tpu__pool {
  unsigned nthreads; /* workers + the calling thread */
  worker_t *workers; /* nthreads - 1 */
  pthread_mutex_t run_lock;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  _Atomic uint64_t generation; /* bumped once per job */
  /* The current job's parts: (job << 32) | next part to claim, job = the low 32 bits of its
   * generation, so a thread still holding an older generation can claim nothing of a newer
   * job. */
  _Atomic uint64_t ticket;
  atomic_uint remaining; /* parts of the current job not finished yet */
  atomic_int stop;
  atomic_int rest;  /* tpu__pool_rest: no job expected soon, stop spinning */
  uint64_t spin_ns; /* how long a thread spins before it sleeps; 0 = never */
  tpu__pool_fn fn;
  void *arg;
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spins until the generation moves on from `old`, the pool stops or rests, or the spin time is
 * up; returns the last generation seen. The clock is read every 64 checks only. */
static uint64_t spin_for_job(tpu__pool_t *pool, uint64_t old) {
  uint64_t until = 0, x = old;
  if (!pool->spin_ns) return atomic_load_explicit(&pool->generation, memory_order_acquire);
  for (unsigned i = 0;; i++) {
    x = atomic_load_explicit(&pool->generation, memory_order_acquire);
    if (x != old || atomic_load_explicit(&pool->stop, memory_order_relaxed) ||
        atomic_load_explicit(&pool->rest, memory_order_relaxed))
      return x;
    if ((i & 63) == 0) {
      uint64_t t = now_ns();
      if (!until) until = t + pool->spin_ns;
      else if (t >= until) return x;
    }
    cpu_relax();
  }
}

/* Claims and runs parts of job `job` until none is left (or a newer job replaced it); the one
 * that finishes the job's last part wakes a caller asleep on `done`. */
static void run_claimed(tpu__pool_t *pool, uint32_t job) {
  uint64_t t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
  while ((uint32_t)(t >> 32) == job && (uint32_t)t < pool->nthreads) {
    if (!atomic_compare_exchange_weak_explicit(&pool->ticket, &t, t + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue; /* t now holds the current ticket */
    /* Part (uint32_t)t is ours: the job cannot finish, nor fn and arg change, before it is
     * done. */
    pool->fn(pool->arg, (uint32_t)t, pool->nthreads);
    if (atomic_fetch_sub(&pool->remaining, 1) == 1) {
      /* The caller may be asleep on `done`: take mu so the signal cannot fall between its
       * check and its wait. */
      pthread_mutex_lock(&pool->mu);
      pthread_cond_signal(&pool->done);
      pthread_mutex_unlock(&pool->mu);
    }
    t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
  }
}

static void *worker_main(void *p) {
  worker_t *w = p;
  tpu__pool_t *pool = w->pool;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = spin_for_job(pool, seen);
    if (g == seen && !atomic_load(&pool->stop)) {
      pthread_mutex_lock(&pool->mu);
      while (!atomic_load(&pool->stop) && atomic_load(&pool->generation) == seen)
        pthread_cond_wait(&pool->wake, &pool->mu);
      pthread_mutex_unlock(&pool->mu);
    }
    if (atomic_load(&pool->stop)) break;
    seen = atomic_load(&pool->generation);
    run_claimed(pool, (uint32_t)seen);
  }
  return NULL;
}

static void stop_workers(tpu__pool_t *pool, unsigned started) {
  pthread_mutex_lock(&pool->mu);
  atomic_store(&pool->stop, 1);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mu);
  for (unsigned i = 0; i < started; i++) pthread_join(pool->workers[i].tid, NULL);
}

tpu_status_t tpu__pool_create(unsigned nthreads, uint64_t spin_ns, tpu__pool_t **out) {
  tpu__pool_t *pool = NULL;
  unsigned started = 0;
  int inited = 0; /* how many of run_lock, mu, wake, done are initialized */
  if (!out) return TPU_EINVAL;
  *out = NULL;
  if (nthreads < 2) return TPU_EINVAL;
  pool = calloc(1, sizeof *pool);
  if (!pool) goto fail;
  pool->nthreads = nthreads;
  pool->spin_ns = spin_ns;
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
  pool->fn = fn;
  pool->arg = arg;
  /* Only the holder of run_lock bumps the generation, so the next one is known here. Part 0
   * is the caller's; parts 1.. go to whichever thread claims them first, so a worker the
   * scheduler has not run yet (on 2 vCPUs the I/O thread may hold its core) costs a wait on
   * no one: the caller claims its part itself. */
  uint64_t gen = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
  atomic_store(&pool->remaining, pool->nthreads);
  atomic_store_explicit(&pool->rest, 0, memory_order_relaxed);
  atomic_store_explicit(&pool->ticket, (uint64_t)(uint32_t)gen << 32 | 1u, memory_order_release);
  pthread_mutex_lock(&pool->mu);
  atomic_store_explicit(&pool->generation, gen, memory_order_release); /* publishes fn, arg */
  pthread_cond_broadcast(&pool->wake); /* no system call when every worker is spinning */
  pthread_mutex_unlock(&pool->mu);

  fn(arg, 0, pool->nthreads);
  atomic_fetch_sub(&pool->remaining, 1);
  run_claimed(pool, (uint32_t)gen);

  uint64_t until = 0;
  for (unsigned i = 0; atomic_load_explicit(&pool->remaining, memory_order_acquire) != 0; i++) {
    if ((i & 63) == 0) {
      uint64_t t = now_ns();
      if (!until) until = t + pool->spin_ns;
      else if (t >= until) break;
    }
    cpu_relax();
  }
  if (atomic_load(&pool->remaining) != 0) {
    pthread_mutex_lock(&pool->mu);
    while (atomic_load(&pool->remaining) != 0) pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
  }
  pthread_mutex_unlock(&pool->run_lock);
  return 1;
}

void tpu__pool_rest(tpu__pool_t *pool) {
  if (pool) atomic_store_explicit(&pool->rest, 1, memory_order_relaxed);
}
