/*
 * engine.c - engine objects: configuration, kernel-set choice, thread pool and statistics.
 *
 * DESIGN
 * An engine is immutable after creation except for its statistics, which are C11 atomics
 * updated with relaxed adds (each counter is monotonic on its own; a snapshot taken while plans
 * run may mix counts from before and after one call). It owns the thread pool; weights and plans
 * only point at it, so it must outlive them.
 */
#include <stdlib.h>

#include "tpu_internal.h"

tpu_status_t tpu__engine_create_isa(const tpu_engine_config_t *cfg, const char *isa,
                                    tpu_engine_t **out) {
  tpu_engine_config_t c = {0};
  tpu_engine_t *e = NULL;
  tpu_status_t st;
  if (!out) return TPU_EINVAL;
  *out = NULL;
  if (cfg) c = *cfg;
  if (c.threads == 0) c.threads = 1;
  if (c.systolic_rows == 0) c.systolic_rows = 128;
  if (c.systolic_cols == 0) c.systolic_cols = 128;
  if (c.threads > TPU__MAX_THREADS || c.systolic_rows > TPU__MAX_SYSTOLIC ||
      c.systolic_cols > TPU__MAX_SYSTOLIC)
    return TPU_EINVAL;

  e = calloc(1, sizeof *e);
  if (!e) return TPU_ENOMEM;
  st = tpu__kernels_select(isa ? isa : getenv("TPUD_ISA"), &e->ks);
  if (st != TPU_OK) goto fail;
  e->threads = c.threads;
  e->rows = c.systolic_rows;
  e->cols = c.systolic_cols;
  if (c.threads > 1) {
    st = tpu__pool_create(c.threads, &e->pool);
    if (st != TPU_OK) goto fail;
  }
  atomic_init(&e->calls, 0);
  atomic_init(&e->macs, 0);
  atomic_init(&e->sim_cycles, 0);
  atomic_init(&e->sim_macs_slots, 0);
  *out = e;
  return TPU_OK;

fail:
  free(e);
  return st;
}

tpu_status_t tpu_engine_create(const tpu_engine_config_t *cfg, tpu_engine_t **out) {
  return tpu__engine_create_isa(cfg, NULL, out);
}

void tpu_engine_free(tpu_engine_t *engine) {
  if (!engine) return;
  tpu__pool_free(engine->pool);
  free(engine);
}

void tpu__engine_account(tpu_engine_t *e, uint64_t macs, uint64_t cycles, uint64_t slots) {
  atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&e->macs, macs, memory_order_relaxed);
  atomic_fetch_add_explicit(&e->sim_cycles, cycles, memory_order_relaxed);
  atomic_fetch_add_explicit(&e->sim_macs_slots, slots, memory_order_relaxed);
}

tpu_status_t tpu_engine_stats(const tpu_engine_t *engine, tpu_engine_stats_t *out) {
  if (!engine || !out) return TPU_EINVAL;
  /* The counters are atomics inside a const object: loading them does not modify it. */
  tpu_engine_t *e = (tpu_engine_t *)engine;
  out->calls = atomic_load_explicit(&e->calls, memory_order_relaxed);
  out->macs = atomic_load_explicit(&e->macs, memory_order_relaxed);
  out->sim_cycles = atomic_load_explicit(&e->sim_cycles, memory_order_relaxed);
  out->sim_macs_slots = atomic_load_explicit(&e->sim_macs_slots, memory_order_relaxed);
  out->threads = e->threads;
  out->systolic_rows = e->rows;
  out->systolic_cols = e->cols;
  out->isa = e->ks->name;
  return TPU_OK;
}

double tpu_engine_stats_utilization(const tpu_engine_stats_t *stats) {
  if (!stats || stats->sim_macs_slots == 0) return 0.0;
  return (double)stats->macs / (double)stats->sim_macs_slots;
}
