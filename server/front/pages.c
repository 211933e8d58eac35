/*
 * pages.c - the HTTP port's own pages, as JSON: /v2/debug/config, /v2/debug/models,
 * /v2/debug/engine (the metrics page is metrics.c). Read-only views of the server's state; the
 * HTTP front end (http.c) decides access and sends them.
 */
#include "pages.h"

#include <stdatomic.h>
#include <string.h>

#include "server_int.h"

const char *tpu__state_name(int state) {
  switch (state) {
  case TPUD__MODEL_STATE__MODEL_STATE_READY: return "READY";
  case TPUD__MODEL_STATE__MODEL_STATE_FAILED: return "FAILED";
  default: return "UNAVAILABLE";
  }
}

static json_t *shape_json(const int64_t *shape, size_t rank) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < rank; i++) json_array_append_new(a, json_integer(shape[i]));
  return a;
}

static json_t *tensor_meta(const tpu_tensor_spec_t *t) {
  return json_pack("{s:s,s:s,s:o}", "name", t->name, "datatype", t->datatype, "shape",
                   shape_json(t->shape, t->rank));
}


static json_t *hist_json(const tpu_hist_t *h, const uint64_t *bounds, size_t nbounds) {
  json_t *o = json_object();
  json_t *buckets = json_array();
  for (size_t i = 0; i <= nbounds; i++) {
    uint64_t c = atomic_load_explicit((_Atomic uint64_t *)&h->count[i], memory_order_relaxed);
    if (!c) continue;
    json_t *e = i < nbounds ? json_pack("{s:I,s:I}", "le", (json_int_t)bounds[i], "count",
                                        (json_int_t)c)
                            : json_pack("{s:s,s:I}", "le", "+Inf", "count", (json_int_t)c);
    json_array_append_new(buckets, e);
  }
  uint64_t n = atomic_load_explicit((_Atomic uint64_t *)&h->n, memory_order_relaxed);
  uint64_t sum = atomic_load_explicit((_Atomic uint64_t *)&h->sum, memory_order_relaxed);
  json_object_set_new(o, "count", json_integer((json_int_t)n));
  json_object_set_new(o, "mean", json_real(n ? (double)sum / (double)n : 0.0));
  json_object_set_new(o, "buckets", buckets);
  return o;
}

json_t *tpu__page_debug_config(tpu_server_t *srv) {
  json_t *cfg = tpu_config_to_json(&srv->cfg);
  if (cfg) {
    const tpu_cpus_t *c = &srv->cfg.cpus;
    json_object_set_new(cfg, "bound_port", json_integer(srv->port));
    json_object_set_new(cfg, "bound_http_port", json_integer(srv->http_port));
    /* What the CPU-count defaults (threads, io-threads, spin-us) were fitted to, and which of
     * the three are those defaults rather than given. */
    json_t *cpus = json_pack("{s:I,s:I,s:I}", "usable", (json_int_t)c->usable, "online",
                             (json_int_t)c->online, "affinity", (json_int_t)c->affinity);
    if (cpus) json_object_set_new(cpus, "cgroup_quota", c->quota > 0 ? json_real(c->quota)
                                                                     : json_null());
    json_object_set_new(cfg, "cpus", cpus);
    json_t *fitted = json_array();
    static const char *const fit[] = {"threads", "io-threads", "spin-us"};
    for (size_t i = 0; i < sizeof fit / sizeof fit[0]; i++)
      if (!tpu_config_given(&srv->cfg, fit[i])) json_array_append_new(fitted, json_string(fit[i]));
    json_object_set_new(cfg, "defaults_from_cpus", fitted);
  }
  return cfg;
}

json_t *tpu__page_debug_models(tpu_server_t *srv) {
  json_t *a = json_array();
  tpu__models_t *t = tpu__models_acquire(srv);
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    json_t *o = json_pack("{s:s,s:s,s:s}", "name", m->name, "version", m->version_str, "state",
                          tpu__state_name(m->state));
    if (m->state != TPUD__MODEL_STATE__MODEL_STATE_READY || !m->model) {
      json_object_set_new(o, "reason", json_string(m->reason));
      json_array_append_new(a, o);
      continue;
    }
    size_t nb;
    const size_t *buckets = tpu_model_buckets(m->model, &nb);
    json_t *bj = json_array();
    for (size_t k = 0; k < nb; k++) json_array_append_new(bj, json_integer((json_int_t)buckets[k]));
    json_object_set_new(o, "precision",
                        json_string(tpu_model_precision_name(tpu_model_precision(m->model))));
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)m->memory_bytes));
    json_object_set_new(o, "format", json_string(tpu_model_format_name(m->model)));
    json_object_set_new(o, "input", tensor_meta(&m->in_spec[0]));
    json_object_set_new(o, "output", tensor_meta(&m->out_spec[0]));
    json_t *ins = json_array(), *outs = json_array(), *costs = json_array();
    for (size_t k = 0; k < m->nin; k++) json_array_append_new(ins, tensor_meta(&m->in_spec[k]));
    for (size_t k = 0; k < m->nout; k++)
      json_array_append_new(outs, tensor_meta(&m->out_spec[k]));
    json_object_set_new(o, "inputs", ins);
    json_object_set_new(o, "outputs", outs);
    for (size_t k = 0; k < nb && k < m->nbuckets; k++) {
      json_t *c = json_pack("{s:I,s:I,s:I,s:I}", "bucket", (json_int_t)buckets[k], "macs",
                            (json_int_t)m->bucket_macs[k], "sim_cycles",
                            (json_int_t)m->bucket_cycles[k], "sim_slots",
                            (json_int_t)m->bucket_slots[k]);
      size_t need = tpu_model_describe(m->model, k, NULL, 0);
      char *desc = need ? malloc(need + 1) : NULL;
      if (desc) {
        tpu_model_describe(m->model, k, desc, need + 1);
        json_object_set_new(c, "program", json_string(desc));
        free(desc);
      }
      json_array_append_new(costs, c);
    }
    json_object_set_new(o, "bucket_costs", costs);
    const char *ref = tpu_model_reference_result(m->model);
    if (ref[0]) json_object_set_new(o, "reference", json_string(ref));
    json_object_set_new(o, "batching",
                        json_pack("{s:I,s:o,s:I}", "max_batch_size",
                                  (json_int_t)tpu_model_max_batch_size(m->model), "buckets", bj,
                                  "max_queue_delay_us",
                                  (json_int_t)tpu_model_max_queue_delay_us(m->model)));
    const tpu_model_stats_t *s = &m->stats;
    json_t *req_by = json_object();
    for (int c = 0; c < TPU_CODE_COUNT; c++) {
      uint64_t v = atomic_load_explicit((_Atomic uint64_t *)&s->requests[c], memory_order_relaxed);
      if (v) json_object_set_new(req_by, tpu_code_name(c), json_integer((json_int_t)v));
    }
    uint64_t batches = tpu_stats_get((_Atomic uint64_t *)&s->batches);
    uint64_t rows = tpu_stats_get((_Atomic uint64_t *)&s->rows_computed);
    uint64_t slots = tpu_stats_get((_Atomic uint64_t *)&s->sim_slots);
    uint64_t macs = tpu_stats_get((_Atomic uint64_t *)&s->macs);
    json_t *st = json_object();
    json_object_set_new(st, "requests", req_by);
    json_object_set_new(st, "batches", json_integer((json_int_t)batches));
    json_object_set_new(st, "rows", json_integer((json_int_t)rows));
    json_object_set_new(st, "padding_rows",
                        json_integer((json_int_t)tpu_stats_get((_Atomic uint64_t *)&s->padding_rows)));
    json_object_set_new(st, "mean_batch_rows",
                        json_real(batches ? (double)rows / (double)batches : 0.0));
    json_object_set_new(st, "queue_rows",
                        json_integer((json_int_t)tpu_batcher_queued_rows(m->batcher)));
    json_object_set_new(st, "batch_rows",
                        hist_json(&s->batch_rows, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS));
    json_object_set_new(st, "queue_us",
                        hist_json(&s->queue_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS));
    json_object_set_new(st, "compute_us",
                        hist_json(&s->compute_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS));
    json_object_set_new(st, "request_us",
                        hist_json(&s->request_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS));
    json_object_set_new(st, "macs", json_integer((json_int_t)macs));
    json_object_set_new(st, "systolic_cycles",
                        json_integer((json_int_t)tpu_stats_get((_Atomic uint64_t *)&s->sim_cycles)));
    json_object_set_new(st, "systolic_utilization",
                        json_real(slots ? (double)macs / (double)slots : 0.0));
    json_object_set_new(o, "stats", st);
    json_array_append_new(a, o);
  }
  tpu__models_release(t);
  return a;
}

json_t *tpu__page_debug_engine(tpu_server_t *srv) {
  tpu_engine_stats_t es;
  memset(&es, 0, sizeof es);
  tpu_engine_stats(srv->engine, &es);
  return json_pack("{s:s,s:I,s:I,s:{s:I,s:I},s:I,s:I,s:I,s:f,s:I,s:I}", "isa",
                      es.isa ? es.isa : "unknown", "threads", (json_int_t)es.threads, "spin_us",
                      (json_int_t)es.spin_us, "systolic",
                      "rows", (json_int_t)es.systolic_rows, "cols", (json_int_t)es.systolic_cols,
                      "calls", (json_int_t)es.calls, "macs", (json_int_t)es.macs,
                      "systolic_cycles", (json_int_t)es.sim_cycles, "systolic_utilization",
                      tpu_engine_stats_utilization(&es), "io_threads",
                      (json_int_t)srv->cfg.io_threads, "matmul_threads",
                      (json_int_t)srv->cfg.threads);
}

