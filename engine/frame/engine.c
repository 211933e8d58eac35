/*
 * engine.c - engine objects: configuration, kernel-set choice, thread pool and statistics.
 *
 * DESIGN
 * An engine is immutable after creation except for its statistics. They live in the plans:
 * each plan counts its own runs (a plain relaxed store by the one thread running it, no locked
 * add on the hot path), and a run adds fixed amounts, so calls/macs/cycles/slots are runs times
 * the plan's per-run costs. The engine keeps the list of live plans and the totals of freed
 * ones. Each counter is monotonic on its own; a snapshot taken while plans run may mix counts
 * from before and after one call. It owns the thread pool; weights and plans only point at it,
 * so it must outlive them.
 *
 * Lock rule: stats_lock guards the list of live plans and the retired totals; it is taken by
 * plan creation and free and by tpu_engine_stats, never by tpu_plan_run.
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
  if (c.spin_us == 0) c.spin_us = TPU_ENGINE_SPIN_DEFAULT_US;
  else if (c.spin_us == TPU_ENGINE_SPIN_OFF) c.spin_us = 0;
  if (c.threads > TPU__MAX_THREADS || c.systolic_rows > TPU__MAX_SYSTOLIC ||
      c.systolic_cols > TPU__MAX_SYSTOLIC || c.spin_us > TPU_ENGINE_SPIN_MAX_US)
    return TPU_EINVAL;

  e = calloc(1, sizeof *e);
  if (!e) return TPU_ENOMEM;
  if (!isa) isa = getenv("TPUD_ISA");
  e->isa_forced = isa && *isa;
  st = tpu__kernels_select(isa, &e->ks);
  if (st != TPU_OK) goto fail;
  e->threads = c.threads;
  e->spin_us = c.spin_us;
  e->rows = c.systolic_rows;
  e->cols = c.systolic_cols;
  if (c.threads > 1) {
    st = tpu__pool_create(c.threads, (uint64_t)c.spin_us * 1000u, &e->pool);
    if (st != TPU_OK) goto fail;
  }
  if (pthread_mutex_init(&e->stats_lock, NULL) != 0) {
    tpu__pool_free(e->pool);
    st = TPU_ENOMEM;
    goto fail;
  }
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
  pthread_mutex_destroy(&engine->stats_lock);
  free(engine);
}

void tpu_engine_rest(tpu_engine_t *engine) {
  if (engine) tpu__pool_rest(engine->pool);
}

void tpu__engine_plan_attach(tpu_engine_t *e, tpu__plan_stats_t *ps) {
  atomic_init(&ps->runs, 0);
  pthread_mutex_lock(&e->stats_lock);
  ps->prev = NULL;
  ps->next = e->plans;
  if (e->plans) e->plans->prev = ps;
  e->plans = ps;
  pthread_mutex_unlock(&e->stats_lock);
}

void tpu__engine_plan_detach(tpu_engine_t *e, tpu__plan_stats_t *ps) {
  uint64_t runs = atomic_load_explicit(&ps->runs, memory_order_relaxed);
  pthread_mutex_lock(&e->stats_lock);
  if (ps->prev) ps->prev->next = ps->next;
  else e->plans = ps->next;
  if (ps->next) ps->next->prev = ps->prev;
  /* Modulo 2^64, as the sums of per-call adds they replace. */
  e->calls += runs;
  e->macs += runs * ps->macs;
  e->sim_cycles += runs * ps->cycles;
  e->sim_macs_slots += runs * ps->slots;
  pthread_mutex_unlock(&e->stats_lock);
}

tpu_status_t tpu_engine_stats(const tpu_engine_t *engine, tpu_engine_stats_t *out) {
  if (!engine || !out) return TPU_EINVAL;
  /* The lock and the plans' counters live inside a const object: reading them does not
   * modify it. */
  tpu_engine_t *e = (tpu_engine_t *)engine;
  pthread_mutex_lock(&e->stats_lock);
  out->calls = e->calls;
  out->macs = e->macs;
  out->sim_cycles = e->sim_cycles;
  out->sim_macs_slots = e->sim_macs_slots;
  for (const tpu__plan_stats_t *ps = e->plans; ps; ps = ps->next) {
    uint64_t runs = atomic_load_explicit(&ps->runs, memory_order_relaxed);
    out->calls += runs;
    out->macs += runs * ps->macs;
    out->sim_cycles += runs * ps->cycles;
    out->sim_macs_slots += runs * ps->slots;
  }
  pthread_mutex_unlock(&e->stats_lock);
  out->threads = e->threads;
  out->spin_us = e->spin_us;
  out->systolic_rows = e->rows;
  out->systolic_cols = e->cols;
  out->isa = e->ks->name;
  return TPU_OK;
}

double tpu_engine_stats_utilization(const tpu_engine_stats_t *stats) {
  if (!stats || stats->sim_macs_slots == 0) return 0.0;
  return (double)stats->macs / (double)stats->sim_macs_slots;
}

size_t tpu_engine_describe(const tpu_engine_t *engine, char *buf, size_t len) {
  if (!engine || !buf || len == 0) return 0;
  return tpu__kernels_describe(engine->ks, engine->isa_forced, buf, len);
}
