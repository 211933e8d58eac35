/*
 * tpu_internal.h - what the frame's source files share: the engine, weights and plan objects,
 * the engine's limits, the thread pool and the conversion helpers.
 *
 * DESIGN
 * Nothing here is public API; the `tpu__` prefix marks it (libuv's `uv__`). Unit tests include
 * this header to reach behind the API (forcing a kernel set, checking the pool), nothing else.
 */
#ifndef TPU_INTERNAL_H
#define TPU_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu_engine.h"
#include "tpu_kernels.h"

/* Engine limits; beyond them calls fail with TPU_EOVERFLOW. They keep every index and byte
 * count far from overflow and turn absurd shapes into errors instead of allocation attempts. */
#define TPU__MAX_DIM ((size_t)1 << 24)   /* M, K or N: 16 Mi */
#define TPU__MAX_ELEMS ((size_t)1 << 32) /* elements of one matrix (A, W or C): 4 Gi */
/* INT8 compute: the exact int32 accumulator holds k products of magnitude up to 128·128
 * (-128 is accepted in caller-quantized data), so k ≤ INT32_MAX / 16384. */
#define TPU__MAX_K_INT8 ((size_t)INT32_MAX / (128 * 128))
#define TPU__MAX_THREADS 256u
#define TPU__MAX_SYSTOLIC 65536u /* R or C of the modelled array */
/* Plans with fewer multiply-accumulates run on the calling thread alone: waking the pool costs
 * more than it saves. 2^21 MACs is ~20-40 µs of one core's work, about what waking a sleeping
 * worker costs on a paravirtualized 2-vCPU VM with the I/O thread on the other core; at 2^18
 * tpud's HTTP path on the digits model (batches of 64 rows, 262k MACs, in parallel) took 27.6
 * µs of CPU a request instead of 19.6 (bench/server_vs_peer.sh, 64 connections). */
#define TPU__PAR_MIN_MACS ((uint64_t)1 << 21)

/* ---- thread pool (pool.c) ---- */

/* A fixed set of worker threads created with the engine, so runs create no threads. One
 * parallel job runs at a time; a caller that finds the pool busy gets 0 from tpu__pool_run and
 * computes on its own thread instead of waiting (no deadlock, no queue to allocate). */
typedef struct tpu__pool tpu__pool_t;
typedef void (*tpu__pool_fn)(void *arg, unsigned part, unsigned nparts);

/* Starts nthreads - 1 workers (the caller of tpu__pool_run is the nthreads-th); nthreads ≥ 2.
 * After a job, workers spin up to spin_ns for the next one before they sleep (0: never spin),
 * and the caller as long for the workers. */
tpu_status_t tpu__pool_create(unsigned nthreads, uint64_t spin_ns, tpu__pool_t **out);
void tpu__pool_free(tpu__pool_t *pool);
unsigned tpu__pool_threads(const tpu__pool_t *pool);
/* Runs fn(arg, p, n) for every p in [0, n), n = tpu__pool_threads, part 0 on the calling thread,
 * and returns 1 when all parts are done; returns 0 at once, running nothing, when another job
 * holds the pool. */
int tpu__pool_run(tpu__pool_t *pool, tpu__pool_fn fn, void *arg);
/* Says no job is expected soon (a graph program's last step ran): spinning workers go to sleep
 * now instead of holding their cores for the rest of their spin. The next job clears it.
 * Accepts NULL. */
void tpu__pool_rest(tpu__pool_t *pool);

/* ---- engine (engine.c) ---- */

/* The statistics of one plan: how often it ran, and what one run adds. Only the thread running
 * the plan writes `runs` (plans are run by one thread at a time), with a relaxed load and store
 * rather than a locked add: four locked adds per run cost ~23 ns here, 10% of a 32×32×32 call. */
typedef struct tpu__plan_stats {
  atomic_uint_fast64_t runs;
  uint64_t macs, cycles, slots; /* per run; fixed at plan creation */
  struct tpu__plan_stats *prev, *next; /* in the engine's list of live plans */
} tpu__plan_stats_t;

struct tpu_engine {
  const tpu__kernel_set_t *ks; /* resolved kernel set, chosen once */
  int isa_forced;              /* ks was named by TPUD_ISA (or the caller), not picked */
  unsigned threads, rows, cols;
  unsigned spin_us;  /* the pool's spin (0: none) */
  tpu__pool_t *pool; /* NULL when threads == 1 */
  pthread_mutex_t stats_lock; /* guards `plans` and the retired totals (see engine.c) */
  tpu__plan_stats_t *plans;   /* live plans */
  uint64_t calls, macs, sim_cycles, sim_macs_slots; /* of plans already freed */
};

/* tpu_engine_create with the kernel set given by name (NULL: TPUD_ISA, then the best one). */
tpu_status_t tpu__engine_create_isa(const tpu_engine_config_t *cfg, const char *isa,
                                    tpu_engine_t **out);
/* Links a new plan's statistics into the engine (runs = 0) / unlinks them at plan free, adding
 * its totals to the engine's retired counts. */
void tpu__engine_plan_attach(tpu_engine_t *engine, tpu__plan_stats_t *ps);
void tpu__engine_plan_detach(tpu_engine_t *engine, tpu__plan_stats_t *ps);
/* One more run of a plan: called only by the thread running it. */
static inline void tpu__plan_stats_count(tpu__plan_stats_t *ps) {
  atomic_store_explicit(&ps->runs, atomic_load_explicit(&ps->runs, memory_order_relaxed) + 1,
                        memory_order_relaxed);
}

/* ---- weights (weights.c) ---- */

struct tpu_weights {
  const tpu__kernel_set_t *ks;    /* the set that packed them: plans must use the same */
  const tpu__dtype_kernels_t *kern;
  tpu_dtype_t compute;
  size_t k, n;
  void *packed;  /* kern->packed_size(k, n) bytes, TPU__KERNEL_ALIGN-aligned */
  float *scales; /* INT8: n per-channel scales; NULL for other dtypes and raw INT8 weights */
};

/* tpu_weights_pack; with `raw` set, INT8 source needs no scales (tpu_matmul: INT32 out only). */
tpu_status_t tpu__weights_pack(tpu_engine_t *engine, const tpu_weights_desc_t *desc, int raw,
                               tpu_weights_t **out);

/* ---- small helpers ---- */

/* Validates m, k and n against the limits: TPU_EINVAL for 0, TPU_EOVERFLOW past them. */
tpu_status_t tpu__check_dims(size_t m, size_t k, size_t n);
/* posix_memalign to TPU__KERNEL_ALIGN; NULL for size 0 or failure. Free with free(). */
void *tpu__aligned_alloc(size_t size);
/* 1 when x is finite and > 0. */
static inline int tpu__positive_finite(float x) { return x > 0.0f && x <= 3.40282347e38f; }

#endif /* TPU_INTERNAL_H */
