/*
 * handlers.c - the methods of the native protocol: what each request does, on the I/O thread.
 *
 * DESIGN
 * Runs on the I/O thread that owns the connection: decodes the method's payload, validates it
 * (validate.c) and either answers at once (health, metadata, repository index, every error) or
 * builds a call and hands it to compute: ModelInfer to its model version's batcher, MatMul to the
 * pool. Compute never runs here. When a call comes back (tpu__handle_done) this file encodes its
 * response. Models come from the repository's reference-counted table (repository.h): a lookup
 * takes a reference, released when the answer is sent (or, for an infer call, when the call is
 * freed). ModelLoad/ModelUnload are queued to the repository thread and come back like compute.
 *
 * Access control comes first: tpu__handle_request decides each request (auth.h: the bearer token
 * in the envelope's "authorization" metadata, else the connection's client certificate; more
 * than one such entry is INVALID_ARGUMENT) before anything else, and sets conn->who, the
 * identity every audit record of the request carries. UNAUTHENTICATED and PERMISSION_DENIED
 * answers of audited methods are audited too.
 *
 * An infer result holding a NaN or infinity (the model's arithmetic overflowed FP32: inputs are
 * checked finite) is refused INVALID_ARGUMENT on the batcher thread (infer_done), before its
 * audit record, on every protocol alike.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "server_int.h"


void tpu__count(tpu__model_t *model, int code) {
  if (code < 0 || code >= TPU_CODE_COUNT) code = TPU_CODE_UNKNOWN;
  tpu_stats_inc(&tpu_stats.requests[code], 1);
  if (model) tpu_stats_inc(&model->stats.requests[code], 1);
}

static void reply(tpu__conn_t *conn, uint64_t id, int code, const char *msg,
                  const ProtobufCMessage *payload, tpu__model_t *model) {
  tpu__count(model, code);
  tpu_envelope_response_t r = {.id = id, .code = code, .message = msg,
                               .payload_msg = code == TPU_CODE_OK ? payload : NULL};
  tpu__conn_send(conn, &r);
}

static void reply_error(tpu__conn_t *conn, uint64_t id, int code, const char *msg,
                        tpu__model_t *model) {
  tpu_log_debug("request %llu: %s: %s", (unsigned long long)id, tpu_code_name(code), msg);
  reply(conn, id, code, msg, NULL, model);
}

/* ---- cheap calls, answered here ---- */

static void do_server_live(tpu__conn_t *conn, uint64_t id) {
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = 1;
  reply(conn, id, TPU_CODE_OK, NULL, &r.base, NULL);
}

static void do_server_ready(tpu__conn_t *conn, uint64_t id) {
  Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
  r.ready = !atomic_load(&conn->io->srv->draining);
  reply(conn, id, TPU_CODE_OK, NULL, &r.base, NULL);
}

/* The deadline of a request received at `received_us` with a relative timeout (0 = none); a
 * timeout too large to add is no deadline rather than one that wrapped into the past. */
static uint64_t deadline_of(uint64_t received_us, uint64_t timeout_us) {
  if (!timeout_us || timeout_us > UINT64_MAX - received_us) return 0;
  return received_us + timeout_us;
}

/* A request that names no model is malformed (INVALID_ARGUMENT), as for ModelLoad. */
static int no_model_name(tpu__conn_t *conn, uint64_t id, const char *name) {
  if (name && *name) return 0;
  reply_error(conn, id, TPU_CODE_INVALID_ARGUMENT, "no model name given", NULL);
  return 1;
}

static void do_model_ready(tpu__conn_t *conn, uint64_t id, Inference__ModelReadyRequest *q) {
  char msg[256];
  if (no_model_name(conn, id, q->name)) return;
  tpu__model_t *m = tpu__server_find_model(conn->io->srv, q->name, q->version, msg, sizeof msg);
  Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
  r.ready = m != NULL && !atomic_load(&conn->io->srv->draining);
  /* A model or version the repository does not list is NOT_FOUND (as HTTP's 404); one that
   * exists but cannot serve now is ready = false. */
  if (!m && tpu__model_absent(conn->io->srv, q->name, q->version)) {
    reply_error(conn, id, TPU_CODE_NOT_FOUND, msg, NULL);
    return;
  }
  reply(conn, id, TPU_CODE_OK, NULL, &r.base, m);
  tpu__model_release(m);
}

static void do_server_metadata(tpu__conn_t *conn, uint64_t id) {
  Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
  char *ext[] = {"tpud_matmul", "tpud_repository_index"};
  r.name = TPUD_SERVER_NAME;
  r.version = TPUD_SERVER_VERSION;
  r.n_extensions = 2;
  r.extensions = ext;
  reply(conn, id, TPU_CODE_OK, NULL, &r.base, NULL);
}

static void do_model_metadata(tpu__conn_t *conn, uint64_t id, Inference__ModelMetadataRequest *q) {
  tpu_server_t *srv = conn->io->srv;
  char msg[256];
  if (no_model_name(conn, id, q->name)) return;
  tpu__model_t *m = tpu__server_find_model(srv, q->name, q->version, msg, sizeof msg);
  if (!m) {
    reply_error(conn, id, TPU_CODE_NOT_FOUND, msg, NULL);
    return;
  }
  char *versions[64];
  size_t nv = 0;
  tpu__models_t *t = tpu__models_acquire(srv);
  for (size_t i = 0; i < t->n && nv < 64; i++)
    if (strcmp(t->models[i]->name, m->name) == 0 &&
        t->models[i]->state == TPUD__MODEL_STATE__MODEL_STATE_READY)
      versions[nv++] = t->models[i]->version_str;
  Inference__ModelMetadataResponse__TensorMetadata in = INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
  Inference__ModelMetadataResponse__TensorMetadata out = INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
  in.name = (char *)m->in_spec.name;
  in.datatype = (char *)m->in_spec.datatype;
  in.n_shape = 2;
  in.shape = m->in_shape;
  out.name = (char *)m->out_spec.name;
  out.datatype = (char *)m->out_spec.datatype;
  out.n_shape = 2;
  out.shape = m->out_shape;
  Inference__ModelMetadataResponse__TensorMetadata *ins[] = {&in}, *outs[] = {&out};
  Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
  r.name = m->name;
  r.n_versions = nv;
  r.versions = versions;
  r.platform = "tpud";
  r.n_inputs = 1;
  r.inputs = ins;
  r.n_outputs = 1;
  r.outputs = outs;
  reply(conn, id, TPU_CODE_OK, NULL, &r.base, m);
  tpu__models_release(t);
  tpu__model_release(m);
}

static void do_repository_index(tpu__conn_t *conn, uint64_t id, Tpud__RepositoryIndexRequest *q) {
  tpu__models_t *t = tpu__models_acquire(conn->io->srv);
  Tpud__RepositoryIndexResponse__ModelIndex *items = calloc(t->n + 1, sizeof *items);
  Tpud__RepositoryIndexResponse__ModelIndex **ptrs = calloc(t->n + 1, sizeof *ptrs);
  if (!items || !ptrs) {
    free(items);
    free(ptrs);
    tpu__models_release(t);
    reply_error(conn, id, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory", NULL);
    return;
  }
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (q->ready_only && m->state != TPUD__MODEL_STATE__MODEL_STATE_READY) continue;
    Tpud__RepositoryIndexResponse__ModelIndex init = TPUD__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
    items[n] = init;
    items[n].name = m->name;
    items[n].version = m->version_str;
    items[n].state = (Tpud__ModelState)m->state;
    items[n].reason = m->reason;
    items[n].memory_bytes = m->memory_bytes;
    ptrs[n] = &items[n];
    n++;
  }
  Tpud__RepositoryIndexResponse r = TPUD__REPOSITORY_INDEX_RESPONSE__INIT;
  r.n_models = n;
  r.models = ptrs;
  reply(conn, id, TPU_CODE_OK, NULL, &r.base, NULL);
  free(items);
  free(ptrs);
  tpu__models_release(t);
}

/* ---- ModelInfer ---- */

/* A result that is not finite (validation refuses non-finite inputs, and the weights are checked
 * at load, so the model's arithmetic overflowed FP32 on this input: 3e38 through a dense layer)
 * is refused, never answered: JSON cannot carry it, and a NaN score passed on as a number is
 * worse than an error. Here, on the batcher thread, before the audit record, so the log says
 * what the client got. */
static void refuse_nonfinite(tpu__call_t *call) {
  const tpu__model_t *m = call->model;
  char what[300];
  snprintf(what, sizeof what, "%s: output '%s'", m->label, m->out_spec.name);
  if (tpu_validate_result(call->out, call->rows, (size_t)m->out_shape[1], what,
                          "the input overflows FP32 inside the model, so there is no result "
                          "(expected inputs of the magnitudes the model was made for)",
                          call->msg_text, sizeof call->msg_text) != 0)
    call->code = TPU_CODE_INVALID_ARGUMENT;
}

static void infer_done(tpu_batch_req_t *req, void *ctx) {
  tpu__call_t *call = req->user;
  call->code = req->code;
  if (req->code != TPU_CODE_OK) snprintf(call->msg_text, sizeof call->msg_text, "%s", req->msg);
  else refuse_nonfinite(call);
  tpu__call_finish(call); /* batcher thread → (audit writer →) the owning I/O thread */
}

/* The batcher's completion callback, for server.c to install. */
void tpu__infer_done(tpu_batch_req_t *req, void *ctx);
void tpu__infer_done(tpu_batch_req_t *req, void *ctx) { infer_done(req, ctx); }

static void send_infer_response(tpu__conn_t *conn, uint64_t id, tpu__model_t *m,
                                const Inference__ModelInferRequest *q, size_t rows,
                                const float *out) {
  int64_t shape[2] = {(int64_t)rows, m->out_shape[1]};
  Inference__ModelInferResponse__InferOutputTensor t = INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
  t.name = (char *)m->out_spec.name;
  t.datatype = "FP32";
  t.n_shape = 2;
  t.shape = shape;
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {&t};
  ProtobufCBinaryData raw = {.len = rows * (size_t)m->out_shape[1] * sizeof(float),
                             .data = (uint8_t *)out};
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  r.model_name = m->name;
  r.model_version = m->version_str;
  r.id = q->id ? q->id : "";
  r.n_outputs = 1;
  r.outputs = outs;
  r.n_raw_output_contents = 1;
  r.raw_output_contents = &raw;
  reply(conn, id, TPU_CODE_OK, NULL, &r.base, m);
}

/* Input datatypes the HTTP endpoint converts to the model's FP32 are handled in http.c; here
 * (both protocols) the request must already be what the model takes. */
int tpu__infer_submit(tpu__io_t *io, const char *client, Inference__ModelInferRequest *q,
                      int http, uint64_t received_us, uint64_t timeout_us, tpu__call_t **out,
                      tpu__model_t **model_out, char *msg, size_t msglen) {
  tpu_server_t *srv = io->srv;
  *out = NULL;
  *model_out = NULL;
  int code;
  tpu__model_t *m = NULL;
  if (!q->model_name || !*q->model_name) {
    snprintf(msg, msglen, "no model name given");
    code = TPU_CODE_INVALID_ARGUMENT;
    goto free_q;
  }
  m = tpu__server_find_model(srv, q->model_name, q->model_version, msg, msglen);
  if (!m) {
    code = TPU_CODE_NOT_FOUND;
    goto free_q;
  }
  *model_out = m;
  if (q->n_inputs > TPU_VALIDATE_MAX_TENSORS || q->n_outputs > TPU_VALIDATE_MAX_TENSORS) {
    snprintf(msg, msglen, "%s: request names %zu inputs and %zu outputs; the model has 1 and 1",
             m->label, q->n_inputs, q->n_outputs);
    code = TPU_CODE_INVALID_ARGUMENT;
    goto free_q;
  }
  tpu_vinput_t vin[TPU_VALIDATE_MAX_TENSORS];
  const char *vout[TPU_VALIDATE_MAX_TENSORS];
  tpu_vrequest_t vr;
  tpu_validate_describe_request(q, vin, vout, &vr);
  tpu_vresult_t res;
  code = tpu_validate_infer(&m->vmodel, &vr, &res, msg, msglen);
  if (code != TPU_CODE_OK) goto free_q;
  if (atomic_load(&srv->draining)) {
    code = TPU_CODE_UNAVAILABLE;
    snprintf(msg, msglen, "server is shutting down");
    goto free_q;
  }
  size_t out_floats = res.rows * (size_t)m->out_shape[1];
  if (res.rows && (out_floats / (size_t)m->out_shape[1] != res.rows ||
                   out_floats > srv->cfg.max_message_bytes / sizeof(float))) {
    snprintf(msg, msglen, "%s: %zu rows would give a response above max-message-bytes (%llu)",
             m->label, res.rows, (unsigned long long)srv->cfg.max_message_bytes);
    code = TPU_CODE_RESOURCE_EXHAUSTED;
    goto free_q;
  }
  /* The answer's share of --max-buffered-bytes, reserved before anything is allocated: the
   * output tensor (HTTP: as JSON text, at most 16 bytes a number) and the names echoed. */
  size_t budget = 0;
  if (res.rows) {
    budget = out_floats * (http ? 16 : sizeof(float)) + 512 + (q->id ? strlen(q->id) : 0);
    if (tpu__budget_reserve(srv, budget, msg, msglen) != 0) {
      code = TPU_CODE_RESOURCE_EXHAUSTED;
      goto free_q;
    }
  }
  tpu__call_t *call = calloc(1, sizeof *call);
  float *outbuf = res.rows ? malloc(out_floats * sizeof(float)) : NULL;
  if (!call || (res.rows && !outbuf)) {
    free(call);
    free(outbuf);
    if (budget) tpu_stats_sub(&tpu_stats.buffered_bytes, budget);
    snprintf(msg, msglen, "out of memory");
    code = TPU_CODE_RESOURCE_EXHAUSTED;
    goto free_q;
  }
  call->budget = budget; /* given back by tpu__call_free, whatever becomes of the call */
  call->io = io;
  call->method = TPUD__METHOD__MODEL_INFER;
  call->received_us = received_us;
  call->deadline_us = deadline_of(received_us, timeout_us);
  call->model = m;
  call->infer = q;
  call->out = outbuf;
  call->rows = res.rows;
  if (client) { /* a bounded copy; snprintf costs a printf per request */
    size_t cl = strnlen(client, sizeof call->client - 1);
    memcpy(call->client, client, cl);
    call->client[cl] = '\0';
  }
  if (res.rows == 0) { /* nothing to compute: an empty batch has an empty answer */
    tpu__audit_reject(srv, client, q->id, m->name, m->version_str, TPU_CODE_OK, "0 rows");
    *out = call;
    return TPU_CODE_OK;
  }
  call->breq.rows = res.rows;
  call->breq.in = res.data[0];
  call->breq.out = outbuf;
  call->breq.deadline_us = call->deadline_us;
  call->breq.cancel = &call->cancel;
  call->breq.user = call;
  code = tpu_batcher_submit(m->batcher, &call->breq, msg, msglen);
  if (code != TPU_CODE_OK) {
    tpu__audit_reject(srv, client, q->id, m->name, m->version_str, code, msg);
    call->model = NULL;   /* the reference stays with *model_out, for the caller's count */
    tpu__call_free(call); /* frees q too */
    return code;
  }
  *out = call;
  return TPU_CODE_OK;
free_q:
  tpu__audit_reject(srv, client, q->id, q->model_name, m ? m->version_str : q->model_version,
                    code, msg);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return code;
}

void tpu__observe_request(tpu__call_t *call) {
  if (call->model)
    tpu_hist_observe(&call->model->stats.request_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS,
                     tpu_now_us() - call->received_us);
}

static void do_infer(tpu__conn_t *conn, Tpud__RequestEnvelope *env, uint64_t received_us,
                     Inference__ModelInferRequest *q) {
  char msg[512];
  tpu__call_t *call;
  tpu__model_t *m;
  int code = tpu__infer_submit(conn->io, conn->who, q, 0, received_us, env->timeout_us, &call,
                               &m, msg, sizeof msg);
  if (code != TPU_CODE_OK) {
    reply_error(conn, env->id, code, msg, m);
    tpu__model_release(m);
    return;
  }
  call->id = env->id;
  if (call->rows == 0) {
    send_infer_response(conn, env->id, m, call->infer, 0, NULL);
    tpu__call_free(call);
    return;
  }
  /* Tracking after submit is safe: completions are only processed by this very thread. */
  tpu__conn_track(conn, call);
}

/* ---- ModelLoad / ModelUnload: queued to the repository thread ---- */

/* Answers a ModelLoad/ModelUnload refused on the I/O thread, and records it. */
static void load_unload_error(tpu__conn_t *conn, Tpud__RequestEnvelope *env, const char *name,
                              const char *version, int code, const char *msg) {
  tpu__audit_reject(conn->io->srv, conn->who, NULL, name, version, code, msg);
  reply_error(conn, env->id, code, msg, NULL);
}

static void do_model_load_unload(tpu__conn_t *conn, Tpud__RequestEnvelope *env,
                                 uint64_t received_us, int load, const char *name,
                                 const char *version) {
  tpu_server_t *srv = conn->io->srv;
  char msg[512];
  uint64_t v = 0;
  if (!name || !*name) {
    load_unload_error(conn, env, name, version, TPU_CODE_INVALID_ARGUMENT, "no model name given");
    return;
  }
  if (strlen(name) > TPU_REPO_MAX_NAME || strchr(name, '/') || name[0] == '.') {
    snprintf(msg, sizeof msg, "model name '%.140s' is not valid: expected the name of a "
             "directory of the repository (1 to %d bytes, no '/', not starting with '.')",
             name, TPU_REPO_MAX_NAME);
    load_unload_error(conn, env, name, version, TPU_CODE_INVALID_ARGUMENT, msg);
    return;
  }
  if (version && *version && tpu_repo_parse_version(version, &v) != 0) {
    snprintf(msg, sizeof msg, "model '%s': version '%.40s' is not a positive integer", name,
             version);
    load_unload_error(conn, env, name, version, TPU_CODE_INVALID_ARGUMENT, msg);
    return;
  }
  tpu__call_t *call = calloc(1, sizeof *call);
  tpu__repo_op_t *op = calloc(1, sizeof *op);
  if (!call || !op) {
    free(call);
    free(op);
    load_unload_error(conn, env, name, version, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  op->load = load;
  snprintf(op->name, sizeof op->name, "%s", name);
  op->version = v;
  call->id = env->id;
  call->method = env->method;
  call->received_us = received_us;
  call->io = conn->io;
  call->conn = conn;
  call->op = op;
  snprintf(call->client, sizeof call->client, "%s", conn->who);
  if (tpu__repo_submit(srv->repo, call) != 0) {
    tpu__call_free(call);
    load_unload_error(conn, env, name, version, TPU_CODE_UNAVAILABLE, "server is shutting down");
    return;
  }
  /* Tracking after submit is safe: completions are only processed by this very thread. */
  tpu__conn_track(conn, call);
}

static void send_load_unload_response(tpu__conn_t *conn, tpu__call_t *call) {
  tpu__repo_op_t *op = call->op;
  if (call->method == TPUD__METHOD__MODEL_LOAD) {
    Tpud__ModelLoadResponse r = TPUD__MODEL_LOAD_RESPONSE__INIT;
    r.name = op->name;
    r.n_versions = op->nversions;
    r.versions = op->version_ptrs;
    reply(conn, call->id, TPU_CODE_OK, NULL, &r.base, NULL);
  } else {
    Tpud__ModelUnloadResponse r = TPUD__MODEL_UNLOAD_RESPONSE__INIT;
    r.name = op->name;
    r.n_versions = op->nversions;
    r.versions = op->version_ptrs;
    reply(conn, call->id, TPU_CODE_OK, NULL, &r.base, NULL);
  }
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

/* The encoded size of a MatMul answer, as max-message-bytes is checked when it is sent
 * (io.c, grpc.c): the gRPC message (HTTP/2), or the response envelope (framed protocol). The
 * compute time, not known yet, is counted at its widest encoding, so that an answer admitted
 * here is never refused after its compute. */
static size_t matmul_answer_size(tpu__conn_t *conn, uint64_t id, size_t m, size_t k, size_t n,
                                 int dtype) {
  int64_t shape[2];
  Tpud__Tensor c;
  Tpud__MatMulResponse r;
  matmul_response(conn->io->srv, m, k, n, dtype, NULL, UINT64_MAX, shape, &c, &r);
  size_t len = protobuf_c_message_get_packed_size(&r.base);
  if (conn->h2) return len;
  tpu_envelope_response_t e = {.id = id, .code = TPU_CODE_OK, .payload_msg = &r.base};
  size_t frame = 0;
  tpu_envelope_encode_response(&e, NULL, 0, &frame, NULL); /* sizing only (ENOSPC) */
  return frame > TPU_FRAME_HEADER_SIZE ? frame - TPU_FRAME_HEADER_SIZE : len;
}

static void do_matmul(tpu__conn_t *conn, Tpud__RequestEnvelope *env, uint64_t received_us,
                      Tpud__MatMulRequest *q) {
  tpu_server_t *srv = conn->io->srv;
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
  if (code == TPU_CODE_OK && atomic_load(&srv->draining)) {
    code = TPU_CODE_UNAVAILABLE;
    snprintf(msg, sizeof msg, "server is shutting down");
  }
  /* The answer must fit a message (as gRPC says of a message over the limit:
   * RESOURCE_EXHAUSTED) and the buffered-answer budget, both known before computing. */
  size_t answer = code == TPU_CODE_OK ? matmul_answer_size(conn, env->id, m, k, n, dtype) : 0;
  if (code == TPU_CODE_OK && answer > srv->cfg.max_message_bytes) {
    code = TPU_CODE_RESOURCE_EXHAUSTED;
    snprintf(msg, sizeof msg, "matmul: the answer for a [%zu,%zu] result would be %zu bytes, "
             "over max-message-bytes (%llu); not computed", m, n, answer,
             (unsigned long long)srv->cfg.max_message_bytes);
  }
  if (code == TPU_CODE_OK && tpu__budget_reserve(srv, answer, msg, sizeof msg) != 0)
    code = TPU_CODE_RESOURCE_EXHAUSTED;
  tpu__call_t *call = NULL;
  if (code == TPU_CODE_OK) {
    call = calloc(1, sizeof *call);
    if (!call) {
      tpu_stats_sub(&tpu_stats.buffered_bytes, answer);
      code = TPU_CODE_RESOURCE_EXHAUSTED;
      snprintf(msg, sizeof msg, "out of memory");
    } else {
      call->budget = answer; /* given back by tpu__call_free */
    }
  }
  if (code != TPU_CODE_OK) {
    tpu__audit_reject(srv, conn->who, NULL, NULL, NULL, code, msg);
    reply_error(conn, env->id, code, msg, NULL);
    protobuf_c_message_free_unpacked(&q->base, NULL);
    return;
  }
  call->id = env->id;
  snprintf(call->client, sizeof call->client, "%s", conn->who);
  call->method = TPUD__METHOD__MATMUL;
  call->received_us = received_us;
  call->deadline_us = deadline_of(received_us, env->timeout_us);
  call->mm = q;
  call->m = m;
  call->k = k;
  call->n = n;
  call->dtype = dtype;
  call->conn = conn;
  call->io = conn->io;
  if (tpu__mmpool_submit(srv->pool, call) != 0) {
    tpu__call_free(call);
    tpu__audit_reject(srv, conn->who, NULL, NULL, NULL, TPU_CODE_UNAVAILABLE,
                      "server is shutting down");
    reply_error(conn, env->id, TPU_CODE_UNAVAILABLE, "server is shutting down", NULL);
    return;
  }
  tpu__conn_track(conn, call);
}

static void send_matmul_response(tpu__conn_t *conn, tpu__call_t *call) {
  int64_t shape[2];
  Tpud__Tensor c;
  Tpud__MatMulResponse r;
  matmul_response(conn->io->srv, call->m, call->k, call->n, call->dtype, call->c,
                  call->compute_us, shape, &c, &r);
  reply(conn, call->id, TPU_CODE_OK, NULL, &r.base, NULL);
}

void tpu__handle_done(tpu__conn_t *conn, tpu__call_t *call) {
  if (call->code != TPU_CODE_OK) {
    reply_error(conn, call->id, call->code, call->msg_text, call->model);
    return;
  }
  if (call->op) {
    send_load_unload_response(conn, call);
  } else if (call->method == TPUD__METHOD__MODEL_INFER) {
    tpu__observe_request(call);
    send_infer_response(conn, call->id, call->model, call->infer, call->rows, call->out);
  } else {
    send_matmul_response(conn, call);
  }
}

/* ---- dispatch ---- */

void tpu__handle_request(tpu__conn_t *conn, Tpud__RequestEnvelope *env, uint64_t received_us) {
  tpu_server_t *srv = conn->io->srv;
  uint64_t id = env->id;
  char msg[256];
  /* Audited: the calls that compute or change the server (the rest only read its state). */
  int audited = env->method == TPUD__METHOD__MODEL_INFER || env->method == TPUD__METHOD__MATMUL ||
                env->method == TPUD__METHOD__MODEL_LOAD ||
                env->method == TPUD__METHOD__MODEL_UNLOAD;
  int code = TPU_CODE_OK;
  {
    const char *authz = tpu_envelope_request_metadata(env, "authorization");
    tpu_auth_peer_t peer = {.peer = conn->peer,
                            .cert_cn = conn->sock.cert_cn[0] ? conn->sock.cert_cn : NULL,
                            .cert_subject = conn->sock.cert_subject};
    code = tpu__auth_check(srv, &peer, authz, authz ? strlen(authz) : 0,
                           tpu_envelope_request_metadata_count(env, "authorization"),
                           tpu_auth_method_need(env->method, srv->cfg.auth_open_health),
                           conn->who, sizeof conn->who, msg, sizeof msg);
    if (code != TPU_CODE_OK) goto refuse;
  }
  for (tpu__call_t *c = conn->calls; c; c = c->next) {
    if (c->id == id) {
      snprintf(msg, sizeof msg, "request id %llu is already in flight on this connection",
               (unsigned long long)id);
      code = TPU_CODE_INVALID_ARGUMENT;
      goto refuse;
    }
  }
  if (atomic_load(&srv->draining) && env->method != TPUD__METHOD__SERVER_LIVE &&
      env->method != TPUD__METHOD__SERVER_READY) {
    snprintf(msg, sizeof msg, "server is shutting down");
    code = TPU_CODE_UNAVAILABLE;
    goto refuse;
  }
  if (audited && !tpu__audit_admit(srv)) {
    snprintf(msg, sizeof msg, TPU__AUDIT_UNAVAILABLE);
    code = TPU_CODE_UNAVAILABLE;
    goto refuse;
  }
  ProtobufCMessage *payload = NULL;
  tpu_proto_error_t perr;
  if (tpu_envelope_unpack_request_payload(env, &payload, &perr) != TPU_PROTO_OK) {
    snprintf(msg, sizeof msg, "%s", perr.msg);
    code = tpu_proto_status_grpc_code(perr.status);
    goto refuse;
  }
  switch (env->method) {
  case TPUD__METHOD__SERVER_LIVE:
    do_server_live(conn, id);
    break;
  case TPUD__METHOD__SERVER_READY:
    do_server_ready(conn, id);
    break;
  case TPUD__METHOD__MODEL_READY:
    do_model_ready(conn, id, (Inference__ModelReadyRequest *)payload);
    break;
  case TPUD__METHOD__SERVER_METADATA:
    do_server_metadata(conn, id);
    break;
  case TPUD__METHOD__MODEL_METADATA:
    do_model_metadata(conn, id, (Inference__ModelMetadataRequest *)payload);
    break;
  case TPUD__METHOD__REPOSITORY_INDEX:
    do_repository_index(conn, id, (Tpud__RepositoryIndexRequest *)payload);
    break;
  case TPUD__METHOD__MODEL_INFER:
    do_infer(conn, env, received_us, (Inference__ModelInferRequest *)payload);
    payload = NULL; /* owned by the call or freed there */
    break;
  case TPUD__METHOD__MATMUL:
    do_matmul(conn, env, received_us, (Tpud__MatMulRequest *)payload);
    payload = NULL;
    break;
  case TPUD__METHOD__MODEL_LOAD: {
    Tpud__ModelLoadRequest *q = (Tpud__ModelLoadRequest *)payload;
    do_model_load_unload(conn, env, received_us, 1, q->name, q->version);
    break;
  }
  case TPUD__METHOD__MODEL_UNLOAD: {
    Tpud__ModelUnloadRequest *q = (Tpud__ModelUnloadRequest *)payload;
    do_model_load_unload(conn, env, received_us, 0, q->name, q->version);
    break;
  }
  default:
    snprintf(msg, sizeof msg, "method %s is not served", tpu_envelope_method_info(env->method)
                                            ? tpu_envelope_method_info(env->method)->name
                                            : "?");
    reply_error(conn, id, TPU_CODE_UNIMPLEMENTED, msg, NULL);
    break;
  }
  if (payload) protobuf_c_message_free_unpacked(payload, NULL);
  goto out;
refuse:
  if (audited) tpu__audit_reject(srv, conn->who, NULL, NULL, NULL, code, msg);
  reply_error(conn, id, code, msg, NULL);
out:;
}
