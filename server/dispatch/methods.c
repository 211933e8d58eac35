/*
 * methods.c - the method table (call.h): what each method needs, does and answers, for every
 * protocol alike. Adding a method is one row here plus its functions (and its messages in
 * proto's method info).
 *
 * DESIGN
 * Cheap methods (health, metadata, the repository index) are answered on the I/O thread from the
 * repository's reference-counted model table (repository.h): a lookup takes a reference,
 * released with the call. ModelInfer goes to its model version's batcher, MatMul to the pool,
 * ModelLoad/ModelUnload to the repository thread, each with a continuation of this file as its
 * done callback; compute never runs here.
 *
 * An infer or MatMul result holding a NaN or infinity (the arithmetic overflowed FP32: inputs
 * are checked finite) is refused INVALID_ARGUMENT on the compute thread, before its audit
 * record, on every protocol alike.
 */
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "clock.h"
#include "server_int.h"
#include "tpu_fpconv.h"
#include "tpu_text.h"
#include "validate.h"

/* ---- cheap calls, answered here ---- */

static void serve_server_live(tpu__call_t *call) {
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = 1;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

/* Ready: not draining, at least one model version ready to serve and, with
 * --strict-readiness (the default), every model the repository means to serve ready. */
static void serve_server_ready(tpu__call_t *call) {
  tpu_server_t *srv = call->srv;
  Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
  int draining = atomic_load(&srv->draining);
  char why[512] = "server is shutting down";
  r.ready = !draining &&
            tpu__models_server_ready(srv, srv->cfg.strict_readiness, why, sizeof why);
  tpu__reply(call, TPU_CODE_OK, r.ready ? NULL : why, &r.base);
}

/* The health checking protocol's status of `service` (health.proto): "" or one of tpud's
 * services is the server's readiness (ServerReady's, strict readiness included); a model's name,
 * whether one of its versions is ready; not draining in both cases. Any other name:
 * TPU__HEALTH_UNKNOWN. */
int tpu__health_status(tpu_server_t *srv, const char *service, char *why, size_t whylen) {
  static const char *const services[] = {"inference.GRPCInferenceService", "tpud.TpudService",
                                         "grpc.health.v1.Health"};
  const char *name = service ? service : "";
  int server = !*name;
  for (size_t i = 0; i < sizeof services / sizeof *services; i++)
    if (!strcmp(name, services[i])) server = 1;
  int draining = atomic_load(&srv->draining);
  snprintf(why, whylen, "server is shutting down");
  if (server)
    return !draining && tpu__models_server_ready(srv, srv->cfg.strict_readiness, why, whylen)
               ? TPU__HEALTH_SERVING
               : TPU__HEALTH_NOT_SERVING;
  tpu__model_t *m = tpu__server_find_model(srv, name, "", why, whylen);
  if (!m) return tpu__model_absent(srv, name, "") ? TPU__HEALTH_UNKNOWN : TPU__HEALTH_NOT_SERVING;
  tpu__model_release(m);
  if (draining) snprintf(why, whylen, "server is shutting down");
  return draining ? TPU__HEALTH_NOT_SERVING : TPU__HEALTH_SERVING;
}

/* grpc.health.v1.Health/Check: tpu__health_status; an unknown name is NOT_FOUND, as the health
 * checking protocol says. (Watch is a stream: server/front/grpc.c.) */
static void serve_health_check(tpu__call_t *call) {
  Grpc__Health__V1__HealthCheckRequest *q = (Grpc__Health__V1__HealthCheckRequest *)call->request;
  char why[512];
  int st = tpu__health_status(call->srv, q->service, why, sizeof why);
  if (st == TPU__HEALTH_UNKNOWN) {
    char msg[300];
    snprintf(msg, sizeof msg, "unknown service '%.200s': tpud answers \"\" (the server), the "
             "names of its gRPC services, and model names", q->service ? q->service : "");
    tpu__reply(call, TPU_CODE_NOT_FOUND, msg, NULL);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)st;
  tpu__reply(call, TPU_CODE_OK, st == TPU__HEALTH_SERVING ? NULL : why, &r.base);
}

/* A request that names no model is malformed (INVALID_ARGUMENT), as for ModelLoad. */
static int no_model_name(tpu__call_t *call, const char *name) {
  if (name && *name) return 0;
  tpu__reply(call, TPU_CODE_INVALID_ARGUMENT, "no model name given", NULL);
  return 1;
}

static void serve_model_ready(tpu__call_t *call) {
  Inference__ModelReadyRequest *q = (Inference__ModelReadyRequest *)call->request;
  tpu_server_t *srv = call->srv;
  char msg[256];
  if (no_model_name(call, q->name)) return;
  call->model = tpu__server_find_model(srv, q->name, q->version, msg, sizeof msg);
  /* A model or version the repository does not list is NOT_FOUND; one that exists but cannot
   * serve now is ready = false (and the note says why). */
  if (!call->model && tpu__model_absent(srv, q->name, q->version)) {
    tpu__reply(call, TPU_CODE_NOT_FOUND, msg, NULL);
    return;
  }
  Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
  int draining = atomic_load(&srv->draining);
  r.ready = call->model != NULL && !draining;
  tpu__reply(call, TPU_CODE_OK, r.ready ? NULL : call->model ? "server is shutting down" : msg,
             &r.base);
}

static void serve_server_metadata(tpu__call_t *call) {
  Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
  /* Triton's names for the extensions of Triton's that tpud implements ("binary_tensor_data": HTTP). */
  char *ext[] = {"binary_tensor_data", "tpud_matmul", "tpud_repository_index", "tpud_debug"};
  r.name = TPUD_SERVER_NAME;
  r.version = TPUD_SERVER_VERSION;
  r.n_extensions = sizeof ext / sizeof *ext;
  r.extensions = ext;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

static void serve_model_metadata(tpu__call_t *call) {
  Inference__ModelMetadataRequest *q = (Inference__ModelMetadataRequest *)call->request;
  tpu_server_t *srv = call->srv;
  char msg[256];
  if (no_model_name(call, q->name)) return;
  tpu__model_t *m = tpu__server_find_model(srv, q->name, q->version, msg, sizeof msg);
  if (!m) { /* unknown: NOT_FOUND; listed but with no ready version: UNAVAILABLE */
    tpu__reply(call, tpu__model_absent(srv, q->name, q->version) ? TPU_CODE_NOT_FOUND
                                                                  : TPU_CODE_UNAVAILABLE,
               msg, NULL);
    return;
  }
  call->model = m;
  char *versions[64];
  size_t nv = 0;
  tpu__models_t *t = tpu__models_acquire(srv);
  for (size_t i = 0; i < t->n && nv < 64; i++)
    if (strcmp(t->models[i]->name, m->name) == 0 &&
        t->models[i]->state == TPUD__MODEL_STATE__MODEL_STATE_READY)
      versions[nv++] = t->models[i]->version_str;
  Inference__ModelMetadataResponse__TensorMetadata tm[2 * TPU_MODEL_MAX_IO];
  Inference__ModelMetadataResponse__TensorMetadata *ins[TPU_MODEL_MAX_IO],
      *outs[TPU_MODEL_MAX_IO];
  for (size_t k = 0; k < m->nin + m->nout; k++) {
    const tpu_tensor_spec_t *sp = k < m->nin ? &m->in_spec[k] : &m->out_spec[k - m->nin];
    Inference__ModelMetadataResponse__TensorMetadata init =
        INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
    tm[k] = init;
    tm[k].name = (char *)sp->name;
    tm[k].datatype = (char *)sp->datatype;
    tm[k].n_shape = sp->rank;
    tm[k].shape = (int64_t *)sp->shape;
    if (k < m->nin) ins[k] = &tm[k];
    else outs[k - m->nin] = &tm[k];
  }
  Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
  r.name = m->name;
  r.n_versions = nv;
  r.versions = versions;
  r.platform = (char *)m->platform;
  r.n_inputs = m->nin;
  r.inputs = ins;
  r.n_outputs = m->nout;
  r.outputs = outs;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
  tpu__models_release(t);
}

/* ---- Triton's model configuration and statistics extensions ---- */

static Inference__DataType triton_type(const char *dt) {
  static const struct {
    const char *oip;
    Inference__DataType t;
  } map[] = {{"BOOL", INFERENCE__DATA_TYPE__TYPE_BOOL},     {"UINT8", INFERENCE__DATA_TYPE__TYPE_UINT8},
             {"UINT16", INFERENCE__DATA_TYPE__TYPE_UINT16}, {"UINT32", INFERENCE__DATA_TYPE__TYPE_UINT32},
             {"UINT64", INFERENCE__DATA_TYPE__TYPE_UINT64}, {"INT8", INFERENCE__DATA_TYPE__TYPE_INT8},
             {"INT16", INFERENCE__DATA_TYPE__TYPE_INT16},   {"INT32", INFERENCE__DATA_TYPE__TYPE_INT32},
             {"INT64", INFERENCE__DATA_TYPE__TYPE_INT64},   {"FP16", INFERENCE__DATA_TYPE__TYPE_FP16},
             {"FP32", INFERENCE__DATA_TYPE__TYPE_FP32},     {"FP64", INFERENCE__DATA_TYPE__TYPE_FP64},
             {"BYTES", INFERENCE__DATA_TYPE__TYPE_STRING},  {"BF16", INFERENCE__DATA_TYPE__TYPE_BF16}};
  for (size_t i = 0; i < sizeof map / sizeof *map; i++)
    if (!strcmp(map[i].oip, dt)) return map[i].t;
  return INFERENCE__DATA_TYPE__TYPE_INVALID;
}

/* ModelConfig: what the version serves, in Triton's model configuration shape: dims without
 * the batch dimension when it batches (max_batch_size > 0), dynamic batching with the static
 * buckets as the preferred sizes, labels files as label_filename. */
static void serve_model_config(tpu__call_t *call) {
  Inference__ModelConfigRequest *q = (Inference__ModelConfigRequest *)call->request;
  tpu_server_t *srv = call->srv;
  char msg[256];
  if (no_model_name(call, q->name)) return;
  tpu__model_t *m = tpu__server_find_model(srv, q->name, q->version, msg, sizeof msg);
  if (!m) {
    tpu__reply(call, tpu__model_absent(srv, q->name, q->version) ? TPU_CODE_NOT_FOUND
                                                                  : TPU_CODE_UNAVAILABLE,
               msg, NULL);
    return;
  }
  call->model = m;
  const tpu_model_config_t *cfg = tpu_model_config(m->model);
  Inference__ModelInput ins[TPU_MODEL_MAX_IO], *inp[TPU_MODEL_MAX_IO];
  Inference__ModelOutput outs[TPU_MODEL_MAX_IO], *outp[TPU_MODEL_MAX_IO];
  size_t skip = m->batched ? 1 : 0;
  for (size_t i = 0; i < m->nin; i++) {
    Inference__ModelInput init = INFERENCE__MODEL_INPUT__INIT;
    ins[i] = init;
    ins[i].name = (char *)m->in_spec[i].name;
    ins[i].data_type = triton_type(m->in_spec[i].datatype);
    ins[i].n_dims = m->in_spec[i].rank - (m->in_spec[i].rank ? skip : 0);
    ins[i].dims = (int64_t *)m->in_spec[i].shape + (m->in_spec[i].rank ? skip : 0);
    inp[i] = &ins[i];
  }
  for (size_t i = 0; i < m->nout; i++) {
    Inference__ModelOutput init = INFERENCE__MODEL_OUTPUT__INIT;
    outs[i] = init;
    outs[i].name = (char *)m->out_spec[i].name;
    outs[i].data_type = triton_type(m->out_spec[i].datatype);
    outs[i].n_dims = m->out_spec[i].rank - (m->out_spec[i].rank ? skip : 0);
    outs[i].dims = (int64_t *)m->out_spec[i].shape + (m->out_spec[i].rank ? skip : 0);
    for (size_t l = 0; cfg && l < cfg->nlabels; l++)
      if (!strcmp(cfg->labels[l].output, outs[i].name)) outs[i].label_filename = cfg->labels[l].file;
    outp[i] = &outs[i];
  }
  size_t nb = 0;
  const size_t *buckets = tpu_model_buckets(m->model, &nb);
  int32_t pref[TPU_MODEL_MAX_BUCKETS];
  for (size_t i = 0; i < nb && i < TPU_MODEL_MAX_BUCKETS; i++) pref[i] = (int32_t)buckets[i];
  Inference__ModelDynamicBatching db = INFERENCE__MODEL_DYNAMIC_BATCHING__INIT;
  db.n_preferred_batch_size = nb;
  db.preferred_batch_size = pref;
  db.max_queue_delay_microseconds = tpu_model_max_queue_delay_us(m->model);
  Inference__ModelConfig c = INFERENCE__MODEL_CONFIG__INIT;
  c.name = m->name;
  c.platform = (char *)m->platform;
  c.backend = "tpud";
  c.max_batch_size = m->batched ? (int32_t)tpu_model_max_batch_size(m->model) : 0;
  c.n_input = m->nin;
  c.input = inp;
  c.n_output = m->nout;
  c.output = outp;
  if (m->batched) c.dynamic_batching = &db;
  Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
  r.config = &c;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

/* ModelStatistics: every serving version of the named model (all models when none is named;
 * one version when a version is), from the counters its batcher and the dispatch keep. Times
 * are measured in microseconds and reported in nanoseconds. compute_input/_output are the
 * batcher's copies of rows into and out of the engine's padded buffers, compute_infer the
 * engine call; their counts are engine calls, as batch_stats' (one per bucket used). */
static void serve_model_statistics(tpu__call_t *call) {
  Inference__ModelStatisticsRequest *q = (Inference__ModelStatisticsRequest *)call->request;
  tpu_server_t *srv = call->srv;
  const char *name = q->name ? q->name : "", *version = q->version ? q->version : "";
  if (*name && tpu__model_absent(srv, name, version)) {
    char msg[300];
    snprintf(msg, sizeof msg, "model '%.200s'%s%.24s is not in the repository", name,
             *version ? " version " : "", version);
    tpu__reply(call, TPU_CODE_NOT_FOUND, msg, NULL);
    return;
  }
  tpu__models_t *t = tpu__models_acquire(srv);
  size_t cap = t->n + 1, nb_total = 0;
  for (size_t i = 0; i < t->n; i++) nb_total += t->models[i]->nbuckets;
  Inference__ModelStatistics *ms = calloc(cap, sizeof *ms);
  Inference__ModelStatistics **msp = calloc(cap, sizeof *msp);
  Inference__InferStatistics *is = calloc(cap, sizeof *is);
  Inference__StatisticDuration *d = calloc(cap * 8 + nb_total * 3 + 1, sizeof *d);
  Inference__InferBatchStatistics *bs = calloc(nb_total + 1, sizeof *bs);
  Inference__InferBatchStatistics **bsp = calloc(nb_total + 1, sizeof *bsp);
  if (!ms || !msp || !is || !d || !bs || !bsp) {
    free(ms), free(msp), free(is), free(d), free(bs), free(bsp);
    tpu__models_release(t);
    tpu__reply(call, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory", NULL);
    return;
  }
  size_t n = 0, nd = 0, nbs = 0;
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (!m->model || (*name && strcmp(m->name, name)) || (*version && strcmp(m->version_str, version)))
      continue;
    tpu_model_stats_t *st = &m->stats;
    Inference__StatisticDuration *dd = &d[nd];
    for (size_t k = 0; k < 8; k++) {
      Inference__StatisticDuration init = INFERENCE__STATISTIC_DURATION__INIT;
      dd[k] = init;
    }
    nd += 8;
    dd[0].count = tpu_stats_get(&st->infer_ok), dd[0].ns = tpu_stats_get(&st->infer_ok_us) * 1000;
    dd[1].count = tpu_stats_get(&st->infer_fail);
    dd[1].ns = tpu_stats_get(&st->infer_fail_us) * 1000;
    dd[2].count = tpu_stats_get(&st->queue_us.n), dd[2].ns = tpu_stats_get(&st->queue_us.sum) * 1000;
    uint64_t batches = tpu_stats_get(&st->batches);
    dd[3].count = batches, dd[3].ns = tpu_stats_get(&st->input_us) * 1000;
    dd[4].count = batches, dd[4].ns = tpu_stats_get(&st->compute_us.sum) * 1000;
    dd[5].count = batches, dd[5].ns = tpu_stats_get(&st->output_us) * 1000;
    Inference__InferStatistics iinit = INFERENCE__INFER_STATISTICS__INIT;
    is[n] = iinit;
    is[n].success = &dd[0], is[n].fail = &dd[1], is[n].queue = &dd[2];
    is[n].compute_input = &dd[3], is[n].compute_infer = &dd[4], is[n].compute_output = &dd[5];
    is[n].cache_hit = &dd[6], is[n].cache_miss = &dd[7]; /* no response cache: zeros */
    Inference__ModelStatistics minit = INFERENCE__MODEL_STATISTICS__INIT;
    ms[n] = minit;
    ms[n].name = m->name;
    ms[n].version = m->version_str;
    ms[n].last_inference = tpu_stats_get(&st->last_infer_ms);
    ms[n].inference_count = tpu_stats_get(&st->rows_computed);
    ms[n].execution_count = batches;
    ms[n].inference_stats = &is[n];
    size_t nbk = 0;
    const size_t *buckets = tpu_model_buckets(m->model, &nbk);
    ms[n].batch_stats = &bsp[nbs];
    for (size_t k = 0; k < nbk && k < TPU_STATS_MAX_BUCKETS; k++) {
      uint64_t c = tpu_stats_get(&st->bucket_batches[k]);
      if (!c) continue; /* Triton lists the batch sizes executed */
      Inference__StatisticDuration *bd = &d[nd];
      nd += 3;
      for (size_t j = 0; j < 3; j++) {
        Inference__StatisticDuration init = INFERENCE__STATISTIC_DURATION__INIT;
        bd[j] = init;
        bd[j].count = c;
      }
      bd[0].ns = tpu_stats_get(&st->bucket_input_us[k]) * 1000;
      bd[1].ns = tpu_stats_get(&st->bucket_compute_us[k]) * 1000;
      bd[2].ns = tpu_stats_get(&st->bucket_output_us[k]) * 1000;
      Inference__InferBatchStatistics binit = INFERENCE__INFER_BATCH_STATISTICS__INIT;
      bs[nbs] = binit;
      bs[nbs].batch_size = buckets[k];
      bs[nbs].compute_input = &bd[0], bs[nbs].compute_infer = &bd[1];
      bs[nbs].compute_output = &bd[2];
      bsp[nbs] = &bs[nbs];
      nbs++;
      ms[n].n_batch_stats++;
    }
    msp[n] = &ms[n];
    n++;
  }
  Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
  r.n_model_stats = n;
  r.model_stats = msp;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
  free(ms), free(msp), free(is), free(d), free(bs), free(bsp);
  tpu__models_release(t);
}

/* Triton's names for a model state (its repository extension), and tpud's FAILED. */
static const char *state_text(int state) {
  switch (state) {
  case TPUD__MODEL_STATE__MODEL_STATE_READY: return "READY";
  case TPUD__MODEL_STATE__MODEL_STATE_LOADING: return "LOADING";
  case TPUD__MODEL_STATE__MODEL_STATE_UNLOADING: return "UNLOADING";
  case TPUD__MODEL_STATE__MODEL_STATE_FAILED: return "FAILED";
  default: return "UNAVAILABLE";
  }
}

/* The repository's listing as tpud's messages (every version, or the ready ones), for both
 * RepositoryIndex methods; the strings point into `t`, held until the answer is sent. -1:
 * out of memory (answered). */
typedef struct {
  tpu__models_t *t;
  Tpud__RepositoryIndexResponse__ModelIndex *items, **ptrs;
  size_t n;
} index_t;

static int index_collect(tpu__call_t *call, int ready_only, index_t *x) {
  x->t = tpu__models_acquire(call->srv);
  x->items = calloc(x->t->n + 1, sizeof *x->items);
  x->ptrs = calloc(x->t->n + 1, sizeof *x->ptrs);
  x->n = 0;
  if (!x->items || !x->ptrs) {
    free(x->items);
    free(x->ptrs);
    tpu__models_release(x->t);
    tpu__reply(call, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory", NULL);
    return -1;
  }
  for (size_t i = 0; i < x->t->n; i++) {
    tpu__model_t *m = x->t->models[i];
    if (ready_only && m->state != TPUD__MODEL_STATE__MODEL_STATE_READY) continue;
    Tpud__RepositoryIndexResponse__ModelIndex init =
        TPUD__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
    x->items[x->n] = init;
    x->items[x->n].name = m->name;
    x->items[x->n].version = m->version_str;
    x->items[x->n].state = (Tpud__ModelState)m->state;
    x->items[x->n].reason = m->reason;
    x->items[x->n].memory_bytes = m->memory_bytes;
    x->ptrs[x->n] = &x->items[x->n];
    x->n++;
  }
  return 0;
}

static void index_release(index_t *x) {
  free(x->items);
  free(x->ptrs);
  tpu__models_release(x->t);
}

/* inference.GRPCInferenceService/RepositoryIndex: the same listing in Triton's messages. */
static void serve_oip_repository_index(tpu__call_t *call) {
  Inference__RepositoryIndexRequest *q = (Inference__RepositoryIndexRequest *)call->request;
  if (q->repository_name && *q->repository_name) {
    tpu__reply(call, TPU_CODE_NOT_FOUND, "tpud serves one model repository, which has no name: "
               "send repository_name empty", NULL);
    return;
  }
  index_t x;
  if (index_collect(call, q->ready, &x) != 0) return;
  Inference__RepositoryIndexResponse__ModelIndex *items = calloc(x.n + 1, sizeof *items);
  Inference__RepositoryIndexResponse__ModelIndex **ptrs = calloc(x.n + 1, sizeof *ptrs);
  if (!items || !ptrs) {
    free(items);
    free(ptrs);
    index_release(&x);
    tpu__reply(call, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory", NULL);
    return;
  }
  for (size_t i = 0; i < x.n; i++) {
    Inference__RepositoryIndexResponse__ModelIndex init =
        INFERENCE__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
    items[i] = init;
    items[i].name = x.items[i].name;
    items[i].version = x.items[i].version;
    items[i].state = (char *)state_text(x.items[i].state);
    items[i].reason = x.items[i].reason;
    ptrs[i] = &items[i];
  }
  Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
  r.n_models = x.n;
  r.models = ptrs;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
  free(items);
  free(ptrs);
  index_release(&x);
}

static void serve_repository_index(tpu__call_t *call) {
  Tpud__RepositoryIndexRequest *q = (Tpud__RepositoryIndexRequest *)call->request;
  index_t x;
  if (index_collect(call, q->ready_only, &x) != 0) return;
  Tpud__RepositoryIndexResponse r = TPUD__REPOSITORY_INDEX_RESPONSE__INIT;
  r.n_models = x.n;
  r.models = x.ptrs;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
  index_release(&x);
}

/* ---- ModelInfer ---- */

/* A result that is not finite (validation refuses non-finite inputs, and the weights are checked
 * at load, so the model's arithmetic overflowed FP32 on this input: 3e38 through a dense layer)
 * is refused, never answered: JSON cannot carry it, and a NaN score passed on as a number is
 * worse than an error. Here, on the batcher thread, before the audit record, so the log says
 * what the client got. Every FP32 output is checked, returned or not (the audit digest covers
 * them all). */
static void refuse_nonfinite(tpu__call_t *call) {
  const tpu__model_t *m = call->model;
  char what[300];
  for (size_t j = 0; j < m->nout; j++) {
    const tpu_model_tensor_t *t = tpu_model_output(m->model, j);
    snprintf(what, sizeof what, "%s: output '%s'", m->label, t->name);
    if (tpu_validate_result_typed(call->u.infer.out, call->u.infer.rows, m->out_row, t->offset,
                                  t->row_elems, t->datatype, what,
                                 "the input overflows FP32 inside the model, so there is no "
                                 "result (expected inputs of the magnitudes the model was made "
                                 "for)",
                                 call->msg_text, sizeof call->msg_text) != 0) {
      call->code = TPU_CODE_INVALID_ARGUMENT;
      return;
    }
  }
}

/* ---- classification (Triton's extension) ---- */

/* A requested output's "classification" parameter: 0 when absent, the K asked for, or -1 with
 * msg when it is not a positive integer. */
static long long classification_of(const Inference__ModelInferRequest__InferRequestedOutputTensor *o,
                                   char *msg, size_t msglen) {
  for (size_t i = 0; i < o->n_parameters; i++) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry *e =
        o->parameters[i];
    if (!e->key || strcmp(e->key, "classification") != 0) continue;
    const Inference__InferParameter *p = e->value;
    long long k = -1;
    if (p && p->parameter_choice_case ==
                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
        p->int64_param >= 1)
      k = p->int64_param > UINT32_MAX ? UINT32_MAX : p->int64_param;
    else if (p && p->parameter_choice_case ==
                      INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM &&
             p->uint64_param >= 1)
      k = p->uint64_param > UINT32_MAX ? UINT32_MAX : (long long)p->uint64_param;
    if (k < 0)
      snprintf(msg, msglen, "output '%s': parameter classification: expected a positive "
               "integer (the number of top classes to return)", o->name ? o->name : "");
    return k;
  }
  return 0;
}

/* Checks every requested classification against the model (before anything is batched) and
 * notes K per output; *bytes gets a bound on the answer's classified bytes. */
static int check_classification(tpu__call_t *call, const tpu__model_t *m,
                                const Inference__ModelInferRequest *q, size_t rows,
                                size_t *bytes, char *msg, size_t msglen) {
  memset(call->u.infer.cls_k, 0, sizeof call->u.infer.cls_k);
  *bytes = 0;
  for (size_t k = 0; k < q->n_outputs; k++) {
    long long want = classification_of(q->outputs[k], msg, msglen);
    if (want < 0) return TPU_CODE_INVALID_ARGUMENT;
    if (!want) continue;
    size_t j = 0;
    while (j < m->nout && strcmp(tpu_model_output(m->model, j)->name, q->outputs[k]->name) != 0)
      j++;
    if (j == m->nout) continue; /* validation has refused unknown names already */
    const tpu_model_tensor_t *t = tpu_model_output(m->model, j);
    size_t first = m->batched ? 1 : 0;
    if (!strcmp(t->datatype, "BYTES") || !strcmp(t->datatype, "BOOL")) {
      snprintf(msg, msglen, "output '%s': classification ranks numbers, and this output is %s",
               t->name, t->datatype);
      return TPU_CODE_INVALID_ARGUMENT;
    }
    if (t->rank <= first || t->shape[t->rank - 1] < 1) {
      snprintf(msg, msglen, "output '%s': classification needs a class dimension after the "
               "batch, and this output has none", t->name);
      return TPU_CODE_INVALID_ARGUMENT;
    }
    size_t classes = (size_t)t->shape[t->rank - 1];
    size_t kk = (size_t)want < classes ? (size_t)want : classes;
    call->u.infer.cls_k[j] = (uint32_t)kk;
    size_t groups = rows * (t->row_elems / classes);
    /* per string: its length, the value, ':', the index, ':', the label (escaped in JSON) */
    *bytes += groups * kk * (4 + TPU_FPCONV_F64_MAX + 24 + 6 * t->label_max);
  }
  return TPU_CODE_OK;
}

/* Element e of a packed output row as a number, and its text when `txt` is given. */
static double out_value(const char *dt, const unsigned char *p, char *txt) {
  double v = 0;
  if (!strcmp(dt, "FP32")) {
    float f;
    memcpy(&f, p, 4);
    v = f;
    if (txt && !tpu_fpconv_f32_format(f, txt)) snprintf(txt, TPU_FPCONV_LEN, "%g", f);
    return v;
  }
  if (!strcmp(dt, "FP64")) {
    memcpy(&v, p, 8);
    if (txt && !tpu_fpconv_f64_format(v, txt)) snprintf(txt, TPU_FPCONV_LEN, "%g", v);
    return v;
  }
  if (!strcmp(dt, "FP16") || !strcmp(dt, "BF16")) {
    uint16_t h;
    memcpy(&h, p, 2);
    float f;
    if (dt[0] == 'B') {
      uint32_t u = (uint32_t)h << 16;
      memcpy(&f, &u, 4);
    } else {
      int e = (h >> 10) & 31, man = h & 1023;
      f = e == 0 ? ldexpf((float)man, -24)
          : e == 31 ? (man ? NAN : INFINITY) : ldexpf((float)(man | 1024), e - 25);
      if (h >> 15) f = -f;
    }
    if (txt && !tpu_fpconv_f32_format(f, txt)) snprintf(txt, TPU_FPCONV_LEN, "%g", f);
    return f;
  }
  int sgn = dt[0] == 'I';
  size_t sz = (size_t)atoi(dt + (sgn ? 3 : 4)) / 8;
  uint64_t u = 0;
  for (size_t i = 0; i < sz; i++) u |= (uint64_t)p[i] << (8 * i);
  if (sgn && sz < 8 && (u >> (8 * sz - 1) & 1)) u |= ~UINT64_C(0) << (8 * sz);
  if (sgn) {
    if (txt) snprintf(txt, TPU_FPCONV_LEN, "%lld", (long long)(int64_t)u);
    return (double)(int64_t)u;
  }
  if (txt) snprintf(txt, TPU_FPCONV_LEN, "%llu", (unsigned long long)u);
  return (double)u;
}

typedef struct {
  double v;
  size_t idx;
} cls_item_t;

static int cls_cmp(const void *a, const void *b) { /* larger first, then the lower index */
  const cls_item_t *x = a, *y = b;
  if (x->v != y->v) return x->v > y->v ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* The classified outputs as BYTES "value:index[:label]", top K of the last dimension, largest
 * first (ties: the lower index). Batcher thread. Returns 0, or -1 out of memory. */
static int classify(tpu__call_t *call) {
  tpu__model_t *m = call->model;
  size_t rows = call->u.infer.rows;
  tpu_buf_t b = {0};
  cls_item_t *items = NULL;
  size_t cap = 0;
  for (size_t j = 0; j < m->nout; j++) {
    size_t k = call->u.infer.cls_k[j];
    if (!k || !(call->u.infer.want >> j & 1)) continue;
    const tpu_model_tensor_t *t = tpu_model_output(m->model, j);
    size_t classes = (size_t)t->shape[t->rank - 1], esz = t->row_bytes / t->row_elems;
    size_t per_row = t->row_elems / classes;
    if (classes > cap) {
      cls_item_t *ni = realloc(items, classes * sizeof *items);
      if (!ni) goto oom;
      items = ni;
      cap = classes;
    }
    call->u.infer.cls_off[j] = b.len;
    for (size_t r = 0; r < rows; r++)
      for (size_t g = 0; g < per_row; g++) {
        const unsigned char *base =
            call->u.infer.out + r * m->out_row + t->offset + g * classes * esz;
        for (size_t c = 0; c < classes; c++) {
          items[c].v = out_value(t->datatype, base + c * esz, NULL);
          items[c].idx = c;
        }
        qsort(items, classes, sizeof *items, cls_cmp);
        for (size_t i = 0; i < k; i++) {
          char num[TPU_FPCONV_LEN], s[TPU_FPCONV_LEN + 32];
          out_value(t->datatype, base + items[i].idx * esz, num);
          int n = snprintf(s, sizeof s, "%s:%zu%s", num, items[i].idx, t->labels ? ":" : "");
          const char *label = t->labels ? t->labels[items[i].idx] : "";
          uint32_t len = (uint32_t)n + (uint32_t)strlen(label);
          unsigned char le[4] = {(unsigned char)len, (unsigned char)(len >> 8),
                                 (unsigned char)(len >> 16), (unsigned char)(len >> 24)};
          tpu_buf_add(&b, le, 4);
          tpu_buf_add(&b, s, (size_t)n);
          tpu_buf_adds(&b, label);
        }
      }
    call->u.infer.cls_len[j] = b.len - call->u.infer.cls_off[j];
  }
  free(items);
  if (b.oom) goto oom_buf;
  call->u.infer.cls = (unsigned char *)tpu_buf_detach(&b, NULL);
  return 0;
oom:
  free(items);
oom_buf:
  tpu_buf_free(&b);
  return -1;
}

/* The batcher's continuation (batcher thread). */
static void infer_done(tpu_batch_req_t *req, void *ctx) {
  tpu__call_t *call = ctx;
  call->code = req->code;
  if (req->code != TPU_CODE_OK)
    snprintf(call->msg_text, sizeof call->msg_text, "%s", req->msg);
  else
    refuse_nonfinite(call);
  if (call->code == TPU_CODE_OK && classify(call) != 0) {
    call->code = TPU_CODE_RESOURCE_EXHAUSTED;
    snprintf(call->msg_text, sizeof call->msg_text, "out of memory classifying the answer");
  }
  tpu__call_finish(call); /* batcher thread → (audit writer →) the origin's I/O thread */
}

static void respond_infer(tpu__call_t *call) {
  tpu__model_t *m = call->model;
  Inference__ModelInferRequest *q = (Inference__ModelInferRequest *)call->request;
  size_t rows = call->u.infer.rows;
  if (call->tracked)
    tpu_hist_observe(&m->stats.request_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS,
                     tpu_now_us() - call->received_us);
  Inference__ModelInferResponse__InferOutputTensor ts[TPU_MODEL_MAX_IO];
  Inference__ModelInferResponse__InferOutputTensor *outs[TPU_MODEL_MAX_IO];
  ProtobufCBinaryData raws[TPU_MODEL_MAX_IO];
  int64_t shapes[TPU_MODEL_MAX_IO][TPU_MODEL_MAX_RANK];
  unsigned char *split[TPU_MODEL_MAX_IO] = {0};
  size_t n = 0;
  int oom = 0;
  for (size_t j = 0; j < m->nout; j++) {
    if (!(call->u.infer.want >> j & 1)) continue;
    const tpu_model_tensor_t *t = tpu_model_output(m->model, j);
    Inference__ModelInferResponse__InferOutputTensor init =
        INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    ts[n] = init;
    ts[n].name = (char *)t->name;
    ts[n].datatype = (char *)t->datatype;
    for (size_t d = 0; d < t->rank; d++) shapes[n][d] = t->shape[d];
    if (m->batched) shapes[n][0] = (int64_t)rows;
    ts[n].n_shape = t->rank;
    ts[n].shape = shapes[n];
    raws[n].len = rows * t->row_bytes;
    if (call->u.infer.cls_k[j]) { /* classified: the top K as BYTES (classify) */
      ts[n].datatype = "BYTES";
      shapes[n][t->rank - 1] = call->u.infer.cls_k[j];
      raws[n].len = call->u.infer.cls ? call->u.infer.cls_len[j] : 0;
      raws[n].data = call->u.infer.cls ? call->u.infer.cls + call->u.infer.cls_off[j] : NULL;
    } else if (m->nout == 1 || rows == 0) {
      raws[n].data = call->u.infer.out;
    } else { /* one output of packed rows: gathered into its own tensor */
      if (!(split[n] = malloc(raws[n].len))) {
        oom = 1;
        break;
      }
      for (size_t r = 0; r < rows; r++)
        memcpy(split[n] + r * t->row_bytes, call->u.infer.out + r * m->out_row + t->offset,
               t->row_bytes);
      raws[n].data = split[n];
    }
    outs[n] = &ts[n];
    n++;
  }
  if (oom) {
    for (size_t i = 0; i < n + 1 && i < TPU_MODEL_MAX_IO; i++) free(split[i]);
    tpu__reply(call, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory formatting the answer", NULL);
    return;
  }
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  r.model_name = m->name;
  r.model_version = m->version_str;
  r.id = q->id ? q->id : "";
  r.n_outputs = n;
  r.outputs = outs;
  r.n_raw_output_contents = n;
  r.raw_output_contents = raws;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
  for (size_t i = 0; i < n; i++) free(split[i]);
}

/* Ids sent for an input the model uses as Gather indices must lie in the table (the model's
 * range, [lo, hi)): refused here for the request that sent them, before anything is batched
 * with other requests, never read out of bounds. */
static int check_ids(const tpu__model_t *m, const tpu_vresult_t *res, char *msg, size_t msglen) {
  for (size_t i = 0; i < m->nin; i++) {
    const tpu_model_tensor_t *t = tpu_model_input(m->model, i);
    if (!t->has_range) continue;
    size_t esz = t->row_elems ? t->row_bytes / t->row_elems : 0;
    size_t count = esz ? res->bytes[i] / esz : 0;
    const unsigned char *p = res->data[i];
    for (size_t e = 0; e < count; e++) {
      int64_t v = 0;
      if (esz == 8) {
        memcpy(&v, p + 8 * e, 8);
      } else if (esz == 4) {
        int32_t x;
        memcpy(&x, p + 4 * e, 4);
        v = x;
      } else if (esz == 1) {
        v = strcmp(t->datatype, "UINT8") == 0 ? (int64_t)p[e] : (int64_t)(int8_t)p[e];
      } else {
        continue;
      }
      if (v < t->range_lo || v >= t->range_hi) {
        snprintf(msg, msglen, "input '%s': element %zu is %lld, out of range: the model looks "
                 "it up in a table of %lld entries (expected ids from %lld to %lld)", t->name,
                 e, (long long)v, (long long)t->range_hi, (long long)t->range_lo,
                 (long long)t->range_hi - 1);
        return TPU_CODE_INVALID_ARGUMENT;
      }
    }
  }
  return TPU_CODE_OK;
}

/* Finds the model, validates the request against it (validate.c), checks sizes and the budget,
 * and hands it to the model's batcher. */
static void serve_infer(tpu__call_t *call) {
  tpu_server_t *srv = call->srv;
  Inference__ModelInferRequest *q = (Inference__ModelInferRequest *)call->request;
  char msg[512];
  int code;
  tpu__model_t *m = NULL;
  if (!q->model_name || !*q->model_name) {
    snprintf(msg, sizeof msg, "no model name given");
    code = TPU_CODE_INVALID_ARGUMENT;
    goto refuse;
  }
  m = call->model = tpu__server_find_model(srv, q->model_name, q->model_version, msg, sizeof msg);
  if (!m) {
    code = TPU_CODE_NOT_FOUND;
    goto refuse;
  }
  if (q->n_inputs > TPU_VALIDATE_MAX_TENSORS || q->n_outputs > TPU_VALIDATE_MAX_TENSORS) {
    snprintf(msg, sizeof msg, "%s: request names %zu inputs and %zu outputs; the model has %zu "
             "and %zu", m->label, q->n_inputs, q->n_outputs, m->nin, m->nout);
    code = TPU_CODE_INVALID_ARGUMENT;
    goto refuse;
  }
  if ((code = tpu_validate_convert_inputs(q, &m->vmodel, msg, sizeof msg)) != TPU_CODE_OK)
    goto refuse;
  tpu_vinput_t vin[TPU_VALIDATE_MAX_TENSORS];
  const char *vout[TPU_VALIDATE_MAX_TENSORS];
  tpu_vrequest_t vr;
  tpu_validate_describe_request(q, vin, vout, &vr);
  tpu_vresult_t res;
  code = tpu_validate_infer(&m->vmodel, &vr, &res, msg, sizeof msg);
  if (code != TPU_CODE_OK) goto refuse;
  if ((code = check_ids(m, &res, msg, sizeof msg)) != TPU_CODE_OK) goto refuse;
  size_t cls_bytes = 0;
  if ((code = check_classification(call, m, q, res.rows, &cls_bytes, msg, sizeof msg)) !=
      TPU_CODE_OK)
    goto refuse;
  call->u.infer.cls_bound = cls_bytes;
  call->u.infer.want = 0;
  size_t out_elems = 0, out_req = 0; /* elements and bytes of the returned outputs, per row */
  for (size_t j = 0; j < m->nout; j++)
    if (res.want_output[j]) {
      call->u.infer.want |= UINT64_C(1) << j;
      out_elems += tpu_model_output(m->model, j)->row_elems;
      out_req += tpu_model_output(m->model, j)->row_bytes;
    }
  size_t out_bytes = res.rows * m->out_row;
  if (res.rows && (out_bytes / m->out_row != res.rows ||
                   out_bytes > srv->cfg.max_message_bytes)) {
    snprintf(msg, sizeof msg, "%s: %zu rows would give a response above max-message-bytes "
             "(%llu)", m->label, res.rows, (unsigned long long)srv->cfg.max_message_bytes);
    code = TPU_CODE_RESOURCE_EXHAUSTED;
    goto refuse;
  }
  /* The answer's share of --max-buffered-bytes, reserved before anything is allocated: the
   * output tensors (JSON: at most 24 bytes a number), the names echoed, and with several
   * outputs the packed rows of all of them plus the returned ones gathered apart. */
  if (res.rows) {
    size_t budget = (call->origin->wire == TPU__WIRE_JSON ? res.rows * out_elems * 24
                                                          : res.rows * out_req) +
                    (m->nout > 1 ? out_bytes + (call->origin->wire == TPU__WIRE_JSON
                                                    ? res.rows * out_req : 0)
                                 : 0) +
                    512 + 64 * m->nout + (q->id ? strlen(q->id) : 0) + cls_bytes;
    if (m->nin > 1) budget += res.rows * m->in_row; /* the packed copy of the inputs */
    if (tpu__budget_reserve(srv, budget, &code, msg, sizeof msg) != 0) goto refuse;
    call->budget = budget; /* given back by tpu__call_free, whatever becomes of the call */
    if (!(call->u.infer.out = malloc(out_bytes))) {
      snprintf(msg, sizeof msg, "out of memory");
      code = TPU_CODE_RESOURCE_EXHAUSTED;
      goto refuse;
    }
  }
  call->u.infer.rows = res.rows;
  if (res.rows == 0) { /* nothing to compute: an empty batch has an empty answer */
    tpu__audit_reject(srv, call->client, q->id, m->name, m->version_str, TPU_CODE_OK, "0 rows");
    respond_infer(call);
    return;
  }
  tpu_batch_req_t *b = &call->u.infer.breq;
  b->rows = res.rows;
  b->want = call->u.infer.want; /* the batch computes the on-request outputs someone named */
  if (m->nin == 1) {
    b->in = res.data[0];
  } else { /* several inputs: one packed row per batch row (model.h) */
    unsigned char *pk = malloc(res.rows * m->in_row);
    if (!pk) {
      snprintf(msg, sizeof msg, "out of memory");
      code = TPU_CODE_RESOURCE_EXHAUSTED;
      goto refuse;
    }
    for (size_t i = 0; i < m->nin; i++) {
      const tpu_model_tensor_t *t = tpu_model_input(m->model, i);
      const unsigned char *src = res.data[i];
      for (size_t r = 0; r < res.rows; r++)
        memcpy(pk + r * m->in_row + t->offset, src + r * t->row_bytes, t->row_bytes);
    }
    call->u.infer.in_packed = pk;
    b->in = pk;
  }
  b->out = call->u.infer.out;
  b->deadline_us = call->deadline_us;
  b->cancel = &call->cancel;
  b->user = call;
  b->done = infer_done;
  b->done_ctx = call;
  code = tpu_batcher_submit(m->batcher, b, msg, sizeof msg);
  /* The batcher's RESOURCE_EXHAUSTED: a request larger than its whole queue (never fits: as
   * is), or a queue full now (try again later: OVERLOADED, HTTP 503). */
  if (code == TPU_CODE_RESOURCE_EXHAUSTED && res.rows <= srv->cfg.queue_rows)
    code = TPU_CODE_OVERLOADED;
  if (code != TPU_CODE_OK) goto refuse;
  tpu__call_track(call);
  return;
refuse:
  tpu__audit_reject(srv, call->client, q->id, q->model_name,
                    m ? m->version_str : q->model_version, code, msg);
  tpu__reply(call, code, msg, NULL);
}

/* 1 when output j is part of the request's answer: every output but an on-request one the
 * request did not name (its rows hold zeros, or another request's values: not this answer). */
static int answered(const tpu__model_t *m, size_t j, uint64_t want) {
  return !tpu_model_output(m->model, j)->on_request || (j < 64 && (want >> j & 1));
}

/* SHA-256 over packed rows, tensor by tensor: tensor i's rows in order, then the next, so the
 * digest is that of every tensor's bytes concatenated in model order (for a one-tensor model,
 * of its bytes). Outputs: those of the answer (want: the request's named outputs). */
static void digest_rows(const unsigned char *base, size_t rows, size_t stride,
                        const tpu__model_t *m, int outputs, uint64_t want, char hex[65]) {
  size_t n = outputs ? m->nout : m->nin;
  if (n == 1) {
    tpu_audit_sha256_hex(base, rows * stride, hex);
    return;
  }
  tpu_audit_sha256_t d;
  if (tpu_audit_sha256_init(&d) != 0) {
    memset(hex, '0', 64);
    hex[64] = '\0';
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (outputs && !answered(m, i, want)) continue;
    const tpu_model_tensor_t *t = outputs ? tpu_model_output(m->model, i)
                                          : tpu_model_input(m->model, i);
    for (size_t r = 0; r < rows; r++) tpu_audit_sha256_update(&d, base + r * stride + t->offset, t->row_bytes);
  }
  tpu_audit_sha256_final(&d, hex);
  if (!hex[0]) {
    memset(hex, '0', 64);
    hex[64] = '\0';
  }
}

/* model.json's spelling of a precision, for the audit record. */
static const char *precision_name(tpu_dtype_t t) {
  return t == TPU_DTYPE_BF16 ? "bf16" : t == TPU_DTYPE_INT8 ? "int8" : "fp32";
}

/* The payload entry of a finished request (audit/payload.h): every input and output tensor, the
 * packed bytes the digests cover, in OIP raw form. Compute thread. Without memory the record
 * goes without (its payload field says ""), and a warning says so. */
static void capture_infer(tpu__call_t *call, tpu_audit_record_t *rec) {
  tpu__model_t *m = call->model;
  const tpu_batch_req_t *b = &call->u.infer.breq;
  tpu_payload_tensor_t in[TPU_MODEL_MAX_IO], out[TPU_MODEL_MAX_IO];
  size_t nout = 0;
  for (size_t i = 0; i < m->nin; i++) {
    const tpu_model_tensor_t *t = tpu_model_input(m->model, i);
    in[i] = (tpu_payload_tensor_t){t->name, t->datatype, t->rank, t->shape,
                                   (const unsigned char *)b->in + t->offset, b->rows, m->in_row,
                                   t->row_bytes};
  }
  for (size_t j = 0; j < m->nout; j++) { /* the answer's outputs, as the digest covers */
    if (!answered(m, j, call->u.infer.want)) continue;
    const tpu_model_tensor_t *t = tpu_model_output(m->model, j);
    out[nout++] = (tpu_payload_tensor_t){t->name, t->datatype, t->rank, t->shape,
                                         (const unsigned char *)call->u.infer.out + t->offset,
                                         b->rows, m->out_row, t->row_bytes};
  }
  tpu_audit_t *a = tpu__audit_enter(call->srv);
  if (!a) return;
  if (tpu_audit_capture(a, m->name, m->version_str, b->rows, in, m->nin, out, nout,
                        &rec->payload) != 0)
    tpu_log_warn("%s: request %s: its payload could not be captured (out of memory)", m->label,
                 rec->request_id ? rec->request_id : "");
  tpu__audit_leave(call->srv);
}

static void digest_infer(tpu__call_t *call, tpu_audit_record_t *rec, tpu__digest_t *d) {
  tpu__model_t *m = call->model;
  Inference__ModelInferRequest *q = (Inference__ModelInferRequest *)call->request;
  const tpu_batch_req_t *b = &call->u.infer.breq;
  rec->request_id = q->id;
  rec->model = m->name;
  rec->version = m->version_str;
  digest_rows(b->in, b->rows, m->in_row, m, 0, 0, d->in_hex);
  if (call->code == TPU_CODE_OK)
    digest_rows(call->u.infer.out, b->rows, m->out_row, m, 1, call->u.infer.want, d->out_hex);
  rec->queue_us = b->queue_us;
  rec->compute_us = b->compute_us;
  rec->batch_id = b->batch_id;
  rec->bucket = b->bucket;
  /* The conditions a replay must meet (issue 21): the verified checkpoint, the reference
   * check it passed at load, the precision (the kernel set is the server's: call.c). */
  rec->checkpoint_sha256 = tpu_model_sha256(m->model);
  rec->reference = tpu_model_reference_result(m->model);
  rec->precision = precision_name(tpu_model_precision(m->model));
  if (m->capture && call->code == TPU_CODE_OK) capture_infer(call, rec);
}

static size_t answer_size_infer(const tpu__call_t *call) {
  return call->u.infer.rows * call->model->out_row + call->u.infer.cls_bound + 256 +
         64 * call->model->nout;
}

static void release_infer(tpu__call_t *call) {
  free(call->u.infer.cls);
  free(call->u.infer.out);
  free(call->u.infer.in_packed);
}

/* ---- MatMul ---- */

/* The response of an [m,k] x [k,n] product; r->c points at *c, whose data is `data` (NULL to
 * size it only). Everything but compute_us is known before computing. */
static void matmul_response(tpu_server_t *srv, size_t m, size_t k, size_t n, int dtype,
                            void *data, uint64_t compute_us, int64_t shape[2], Tpud__Tensor *c,
                            Tpud__MatMulResponse *r) {
  tpu_engine_stats_t es;
  memset(&es, 0, sizeof es);
  tpu_engine_stats(srv->engine, &es);
  Tpud__Tensor ct = TPUD__TENSOR__INIT;
  Tpud__MatMulResponse rt = TPUD__MAT_MUL_RESPONSE__INIT;
  *c = ct;
  *r = rt;
  shape[0] = (int64_t)m;
  shape[1] = (int64_t)n;
  c->n_shape = 2;
  c->shape = shape;
  c->datatype = dtype == TPU_DTYPE_INT8 ? "INT32" : "FP32";
  c->data.len = m * n * 4;
  c->data.data = data;
  r->c = c;
  r->systolic_rows = es.systolic_rows;
  r->systolic_cols = es.systolic_cols;
  r->systolic_cycles = tpu_systolic_cycles(es.systolic_rows, es.systolic_cols, m, k, n);
  double slots = (double)r->systolic_cycles * es.systolic_rows * es.systolic_cols;
  r->systolic_utilization = slots > 0 ? (double)m * k * n / slots : 0.0;
  r->compute_us = compute_us;
}

/* The encoded size of a MatMul answer, as max-message-bytes is checked when it is sent: the
 * gRPC message, or the response envelope (framed protocol). The compute time, not known yet, is
 * counted at its widest encoding, so that an answer admitted here is never refused after its
 * compute. */
static size_t matmul_answer_size(tpu__call_t *call, size_t m, size_t k, size_t n, int dtype) {
  int64_t shape[2];
  Tpud__Tensor c;
  Tpud__MatMulResponse r;
  matmul_response(call->srv, m, k, n, dtype, NULL, UINT64_MAX, shape, &c, &r);
  size_t len = protobuf_c_message_get_packed_size(&r.base);
  if (call->origin->wire != TPU__WIRE_FRAMED) return len;
  tpu_envelope_response_t e = {.id = call->id, .code = TPU_CODE_OK, .payload_msg = &r.base};
  size_t frame = 0;
  tpu_envelope_encode_response(&e, NULL, 0, &frame, NULL); /* sizing only (ENOSPC) */
  return frame > TPU_FRAME_HEADER_SIZE ? frame - TPU_FRAME_HEADER_SIZE : len;
}

/* The pool's continuation (pool thread). */
static void matmul_done(tpu__mm_job_t *job) {
  tpu__call_t *call = tpu_container_of(job, tpu__call_t, u.mm);
  call->code = job->code;
  if (job->code != TPU_CODE_OK) snprintf(call->msg_text, sizeof call->msg_text, "%s", job->msg);
  tpu__call_finish(call); /* digests and the audit record, on this pool thread */
}

static void serve_matmul(tpu__call_t *call) {
  tpu_server_t *srv = call->srv;
  Tpud__MatMulRequest *q = (Tpud__MatMulRequest *)call->request;
  char msg[512];
  tpu_vtensor_t a = {0}, b = {0};
  if (q->a)
    a = (tpu_vtensor_t){q->a->shape, q->a->n_shape, q->a->datatype, q->a->data.len, 1,
                        q->a->data.data};
  if (q->b)
    b = (tpu_vtensor_t){q->b->shape, q->b->n_shape, q->b->datatype, q->b->data.len, 1,
                        q->b->data.data};
  size_t m, k, n;
  int dtype;
  int code = tpu_validate_matmul(&a, &b, srv->cfg.max_message_bytes / 4, &m, &k, &n, &dtype, msg,
                                 sizeof msg);
  /* The answer must fit a message (as gRPC says of a message over the limit:
   * RESOURCE_EXHAUSTED) and the buffered-answer budget, both known before computing. */
  size_t answer = code == TPU_CODE_OK ? matmul_answer_size(call, m, k, n, dtype) : 0;
  if (code == TPU_CODE_OK && answer > srv->cfg.max_message_bytes) {
    code = TPU_CODE_RESOURCE_EXHAUSTED;
    snprintf(msg, sizeof msg, "matmul: the answer for a [%zu,%zu] result would be %zu bytes, "
             "over max-message-bytes (%llu); not computed", m, n, answer,
             (unsigned long long)srv->cfg.max_message_bytes);
  }
  if (code == TPU_CODE_OK && tpu__budget_reserve(srv, answer, &code, msg, sizeof msg) == 0)
    call->budget = answer; /* given back by tpu__call_free */
  if (code == TPU_CODE_OK) {
    tpu__mm_job_t *j = &call->u.mm;
    j->dtype = dtype;
    j->m = m;
    j->k = k;
    j->n = n;
    j->a = q->a->data.data;
    j->b = q->b->data.data;
    j->deadline_us = call->deadline_us;
    j->cancel = &call->cancel;
    j->done = matmul_done;
    if (tpu__mmpool_submit(srv->pool, j) == 0) {
      tpu__call_track(call);
      return;
    }
    code = TPU_CODE_UNAVAILABLE;
    snprintf(msg, sizeof msg, "server is shutting down");
  }
  tpu__audit_reject(srv, call->client, NULL, NULL, NULL, code, msg);
  tpu__reply(call, code, msg, NULL);
}

static void respond_matmul(tpu__call_t *call) {
  const tpu__mm_job_t *j = &call->u.mm;
  int64_t shape[2];
  Tpud__Tensor c;
  Tpud__MatMulResponse r;
  matmul_response(call->srv, j->m, j->k, j->n, j->dtype, j->c, j->compute_us, shape, &c, &r);
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

static void digest_matmul(tpu__call_t *call, tpu_audit_record_t *rec, tpu__digest_t *d) {
  Tpud__MatMulRequest *q = (Tpud__MatMulRequest *)call->request;
  const tpu__mm_job_t *j = &call->u.mm;
  tpu_audit_sha256_t s;
  if (tpu_audit_sha256_init(&s) == 0) {
    tpu_audit_sha256_update(&s, q->a->data.data, q->a->data.len);
    tpu_audit_sha256_update(&s, q->b->data.data, q->b->data.len);
    tpu_audit_sha256_final(&s, d->in_hex);
  }
  if (call->code == TPU_CODE_OK && j->c) tpu_audit_sha256_hex(j->c, j->m * j->n * 4, d->out_hex);
  rec->compute_us = j->compute_us;
  rec->precision = precision_name(j->dtype);
  if (call->code == TPU_CODE_OK) {
    snprintf(d->what, sizeof d->what, "matmul %zux%zux%zu", j->m, j->k, j->n);
    rec->message = d->what;
  }
}

static size_t answer_size_matmul(const tpu__call_t *call) {
  return call->u.mm.m * call->u.mm.n * 4 + 256;
}

static void release_matmul(tpu__call_t *call) { free(call->u.mm.c); }

/* ---- ModelLoad / ModelUnload: queued to the repository thread ---- */

/* The repository thread's continuation. */
static void op_done(tpu__repo_op_t *op) {
  tpu__call_t *call = op->user;
  call->code = op->code;
  if (op->code != TPU_CODE_OK) snprintf(call->msg_text, sizeof call->msg_text, "%s", op->msg);
  tpu__call_finish(call); /* records the request (audit), then completes it */
}

static void serve_load_unload(tpu__call_t *call, int load, const char *name,
                              const char *version) {
  tpu_server_t *srv = call->srv;
  char msg[512];
  int code = TPU_CODE_INVALID_ARGUMENT;
  uint64_t v = 0;
  if (!name || !*name) {
    snprintf(msg, sizeof msg, "no model name given");
    goto refuse;
  }
  if (strlen(name) > TPU_REPO_MAX_NAME || strchr(name, '/') || name[0] == '.') {
    snprintf(msg, sizeof msg, "model name '%.140s' is not valid: expected the name of a "
             "directory of the repository (1 to %d bytes, no '/', not starting with '.')",
             name, TPU_REPO_MAX_NAME);
    goto refuse;
  }
  if (version && *version && tpu_repo_parse_version(version, &v) != 0) {
    snprintf(msg, sizeof msg, "model '%s': version '%.40s' is not a positive integer", name,
             version);
    goto refuse;
  }
  tpu__repo_op_t *op = calloc(1, sizeof *op);
  if (!op) {
    code = TPU_CODE_RESOURCE_EXHAUSTED;
    snprintf(msg, sizeof msg, "out of memory");
    goto refuse;
  }
  op->load = load;
  snprintf(op->name, sizeof op->name, "%s", name);
  op->version = v;
  op->done = op_done;
  op->user = call;
  call->u.op = op; /* freed with the call */
  if (tpu__repo_submit(srv->repo, op) != 0) {
    code = TPU_CODE_UNAVAILABLE;
    snprintf(msg, sizeof msg, "server is shutting down");
    goto refuse;
  }
  tpu__call_track(call);
  return;
refuse:
  tpu__audit_reject(srv, call->client, NULL, name, version, code, msg);
  tpu__reply(call, code, msg, NULL);
}

static void serve_model_load(tpu__call_t *call) {
  Tpud__ModelLoadRequest *q = (Tpud__ModelLoadRequest *)call->request;
  serve_load_unload(call, 1, q->name, q->version);
}

static void serve_model_unload(tpu__call_t *call) {
  Tpud__ModelUnloadRequest *q = (Tpud__ModelUnloadRequest *)call->request;
  serve_load_unload(call, 0, q->name, q->version);
}

/* Triton's RepositoryModelLoad/Unload: the repository is tpud's one (no name), the model all
 * its policy's versions; parameters tpud cannot honour are refused, never ignored (load:
 * Triton's "config" override and "file:" uploads; unload: only unload_dependents, vacuous
 * without ensembles). */
static void serve_oip_repository_load_unload(tpu__call_t *call, int load) {
  const char *repo, *name;
  size_t np;
  Inference__RepositoryModelLoadRequest__ParametersEntry **pl = NULL;
  Inference__RepositoryModelUnloadRequest__ParametersEntry **pu = NULL;
  if (load) {
    Inference__RepositoryModelLoadRequest *q = (Inference__RepositoryModelLoadRequest *)call->request;
    repo = q->repository_name, name = q->model_name, np = q->n_parameters, pl = q->parameters;
  } else {
    Inference__RepositoryModelUnloadRequest *q =
        (Inference__RepositoryModelUnloadRequest *)call->request;
    repo = q->repository_name, name = q->model_name, np = q->n_parameters, pu = q->parameters;
  }
  if (repo && *repo) {
    static const char msg[] = "tpud serves one model repository, which has no name: send "
                              "repository_name empty";
    tpu__audit_reject(call->srv, call->client, NULL, name, "", TPU_CODE_NOT_FOUND, msg);
    tpu__reply(call, TPU_CODE_NOT_FOUND, msg, NULL);
    return;
  }
  for (size_t i = 0; i < np; i++) {
    const char *key = load ? pl[i]->key : pu[i]->key;
    const Inference__ModelRepositoryParameter *v = load ? pl[i]->value : pu[i]->value;
    if (!load && key && !strcmp(key, "unload_dependents") && v &&
        v->parameter_choice_case ==
            INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
      continue;
    char msg[200];
    snprintf(msg, sizeof msg, "parameters.%.64s: %s", key ? key : "",
             load ? "not supported: tpud loads a model from the repository's files (no config "
                    "override or file upload); send no parameters"
                  : "not supported (only unload_dependents, a boolean)");
    tpu__audit_reject(call->srv, call->client, NULL, name, "", TPU_CODE_INVALID_ARGUMENT, msg);
    tpu__reply(call, TPU_CODE_INVALID_ARGUMENT, msg, NULL);
    return;
  }
  serve_load_unload(call, load, name, "");
}

static void serve_oip_repository_load(tpu__call_t *call) { serve_oip_repository_load_unload(call, 1); }

static void serve_oip_repository_unload(tpu__call_t *call) {
  serve_oip_repository_load_unload(call, 0);
}

static void respond_oip_repository_load(tpu__call_t *call) {
  Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

static void respond_oip_repository_unload(tpu__call_t *call) {
  Inference__RepositoryModelUnloadResponse r = INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

static void respond_model_load(tpu__call_t *call) {
  tpu__repo_op_t *op = call->u.op;
  Tpud__ModelLoadResponse r = TPUD__MODEL_LOAD_RESPONSE__INIT;
  r.name = op->name;
  r.n_versions = op->nversions;
  r.versions = op->version_ptrs;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

static void respond_model_unload(tpu__call_t *call) {
  tpu__repo_op_t *op = call->u.op;
  Tpud__ModelUnloadResponse r = TPUD__MODEL_UNLOAD_RESPONSE__INIT;
  r.name = op->name;
  r.n_versions = op->nversions;
  r.versions = op->version_ptrs;
  tpu__reply(call, TPU_CODE_OK, NULL, &r.base);
}

static void digest_load_unload(tpu__call_t *call, tpu_audit_record_t *rec, tpu__digest_t *d) {
  tpu__repo_op_t *op = call->u.op;
  rec->model = op->name;
  if (op->version) snprintf(d->version, sizeof d->version, "%llu", (unsigned long long)op->version);
  if (call->code != TPU_CODE_OK) return;
  const char *verb = op->load ? "load" : "unload";
  int n = snprintf(d->what, sizeof d->what, "%s:", verb);
  for (size_t i = 0; i < op->nversions && n > 0 && (size_t)n < sizeof d->what; i++)
    n += snprintf(d->what + n, sizeof d->what - (size_t)n, " %s", op->versions[i]);
  if (op->nversions == 0) snprintf(d->what, sizeof d->what, "%s: no versions", verb);
  rec->message = d->what;
}

static size_t answer_size_small(const tpu__call_t *call) { return 256; }

static void release_op(tpu__call_t *call) { free(call->u.op); }

/* ---- the table ---- */

#define CHEAP(id, nm, role, hl, fn) \
  {.method = id, .name = nm, .need = role, .health = hl, .serve = fn}
#define COMPUTES(id, nm, role, s, r, d, a, rel)                                                \
  {.method = id, .name = nm, .need = role, .audited = 1, .computes = 1, .serve = s,          \
   .respond = r, .digest = d, .answer_size = a, .release = rel}

static const tpu__method_t table[] = {
    CHEAP(TPUD__METHOD__SERVER_LIVE, "ServerLive", TPU_NEED_INFER, 1, serve_server_live),
    CHEAP(TPUD__METHOD__SERVER_READY, "ServerReady", TPU_NEED_INFER, 1, serve_server_ready),
    CHEAP(TPUD__METHOD__MODEL_READY, "ModelReady", TPU_NEED_INFER, 0, serve_model_ready),
    CHEAP(TPUD__METHOD__SERVER_METADATA, "ServerMetadata", TPU_NEED_INFER, 0,
          serve_server_metadata),
    CHEAP(TPUD__METHOD__MODEL_METADATA, "ModelMetadata", TPU_NEED_INFER, 0,
          serve_model_metadata),
    COMPUTES(TPUD__METHOD__MODEL_INFER, "ModelInfer", TPU_NEED_INFER, serve_infer, respond_infer,
             digest_infer, answer_size_infer, release_infer),
    COMPUTES(TPUD__METHOD__MODEL_LOAD, "ModelLoad", TPU_NEED_ADMIN, serve_model_load,
             respond_model_load, digest_load_unload, answer_size_small, release_op),
    COMPUTES(TPUD__METHOD__MODEL_UNLOAD, "ModelUnload", TPU_NEED_ADMIN, serve_model_unload,
             respond_model_unload, digest_load_unload, answer_size_small, release_op),
    COMPUTES(TPUD__METHOD__MATMUL, "MatMul", TPU_NEED_INFER, serve_matmul, respond_matmul,
             digest_matmul, answer_size_matmul, release_matmul),
    CHEAP(TPUD__METHOD__REPOSITORY_INDEX, "RepositoryIndex", TPU_NEED_INFER, 0,
          serve_repository_index),
    CHEAP(TPUD__METHOD__HEALTH_CHECK, "Check", TPU_NEED_INFER, 1, serve_health_check),
    CHEAP(TPUD__METHOD__OIP_REPOSITORY_INDEX, "RepositoryIndex", TPU_NEED_INFER, 0,
          serve_oip_repository_index),
    CHEAP(TPUD__METHOD__OIP_MODEL_CONFIG, "ModelConfig", TPU_NEED_INFER, 0, serve_model_config),
    CHEAP(TPUD__METHOD__OIP_MODEL_STATISTICS, "ModelStatistics", TPU_NEED_INFER, 0,
          serve_model_statistics),
    COMPUTES(TPUD__METHOD__OIP_REPOSITORY_MODEL_LOAD, "RepositoryModelLoad", TPU_NEED_ADMIN,
             serve_oip_repository_load, respond_oip_repository_load, digest_load_unload,
             answer_size_small, release_op),
    COMPUTES(TPUD__METHOD__OIP_REPOSITORY_MODEL_UNLOAD, "RepositoryModelUnload", TPU_NEED_ADMIN,
             serve_oip_repository_unload, respond_oip_repository_unload, digest_load_unload,
             answer_size_small, release_op),
};

const tpu__method_t *tpu__method_of(int method) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].method == method) return &table[i];
  return NULL;
}

const tpu__method_t *tpu__methods(size_t *n) {
  *n = sizeof table / sizeof table[0];
  return table;
}

tpu_need_t tpu__method_need(const tpu__method_t *m, int open_health) {
  return m->health && open_health ? TPU_NEED_OPEN : m->need;
}
