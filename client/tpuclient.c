/*
 * tpuclient.c - libtpuclient's blocking API: tpu_client_t, one connection to tpud with
 * pipelined and synchronous calls, built on the event-loop-driven engine (tpuclient_async.c).
 *
 * DESIGN
 * A tpu_client_t is a tpu_client_async_t plus waiting: every call that blocks is a loop of
 * poll() on the connection's descriptor (for the events and no longer than the timeout the
 * engine asks for) and a step, until what the call waits for has happened. So there is one
 * encoder, one reader, one in-flight table and one set of error messages for both APIs. What the
 * blocking send promises beyond an async submit (a request that could not be written at all by
 * its deadline is withdrawn and yields no result; one written halfway closes the connection) is
 * kept by the engine's two hooks in tpuclient_int.h. Results of other requests that complete
 * while a synchronous call waits stay queued for tpu_client_recv().
 */
#include "tpuclient.h"
#include "tpu_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_envelope.h"
#include "tpu_oip_json.h"
#include "tpuclient_int.h"

/* ---- status ---- */

const char *tpu_client_strerror(tpu_client_status_t status) {
  if ((int)status >= 0 && (int)status < TPU_CODE_COUNT) return tpu_code_words((int)status);
  switch (status) {
#define TPU__CLIENT_STATUS_MSG(name, num, msg) \
  case TPU_CLIENT_##name:                      \
    return msg;
    TPU_CLIENT_OWN_STATUS_MAP(TPU__CLIENT_STATUS_MSG)
#undef TPU__CLIENT_STATUS_MSG
  default:
    return "unknown status";
  }
}

const char *tpu_client_status_name(tpu_client_status_t status) {
  if ((int)status >= 0 && (int)status < TPU_CODE_COUNT) return tpu_code_name((int)status);
  switch (status) {
#define TPU__CLIENT_STATUS_NAME(name, num, msg) \
  case TPU_CLIENT_##name:                       \
    return #name;
    TPU_CLIENT_OWN_STATUS_MAP(TPU__CLIENT_STATUS_NAME)
#undef TPU__CLIENT_STATUS_NAME
  default:
    return NULL;
  }
}

/* ---- the handle ---- */

struct tpu_client {
  tpu_client_async_t *a; /* NULL only when it could not be allocated */
  char errmsg[512];
};

/* Says why in the handle's message and returns the status (proto/tpu_text.h). */
#define set_err(c, st, ...) \
  ((tpu_client_status_t)tpu_errf_ret((int)(st), (c)->errmsg, sizeof (c)->errmsg, __VA_ARGS__))

static tpu_client_status_t ok(tpu_client_t *c) {
  c->errmsg[0] = '\0';
  return TPU_CLIENT_OK;
}

/* Passes the engine's outcome on, with its message. */
static tpu_client_status_t pass(tpu_client_t *c, tpu_client_status_t st) {
  if (st == TPU_CLIENT_OK) return ok(c);
  return set_err(c, st, "%s", tpu_client_async_errmsg(c->a));
}

tpu_client_status_t tpu_client_connect(const char *addr, const tpu_client_options_t *opts,
                                       tpu_client_t **out) {
  if (!out) return TPU_CLIENT_MISUSE;
  *out = NULL;
  tpu_client_t *c = calloc(1, sizeof *c);
  if (!c) return TPU_CLIENT_NOMEM;
  *out = c;
  tpu_client_status_t st = tpu_client_async_connect(addr, opts, TPU_CLIENT_PROTOCOL_NATIVE, &c->a);
  if (!c->a) return set_err(c, TPU_CLIENT_NOMEM, "out of memory");
  if (st != TPU_CLIENT_OK) return pass(c, st);
  /* The engine enforces the connect deadline itself; each pump waits no longer than that. */
  while (!tpu_client_async_connected(c->a)) {
    tpu__async_pump(c->a, TPU__NO_DEADLINE);
    st = tpu_client_async_status(c->a);
    if (st != TPU_CLIENT_OK) return pass(c, tpu_client_async_step(c->a, 0));
  }
  return ok(c);
}

void tpu_client_free(tpu_client_t *c) {
  if (!c) return;
  tpu_client_async_free(c->a);
  free(c);
}

const char *tpu_client_errmsg(const tpu_client_t *c) {
  return c ? c->errmsg : "no client handle (out of memory?)";
}

tpu_client_status_t tpu_client_connection_status(const tpu_client_t *c) {
  if (!c) return TPU_CLIENT_MISUSE;
  return c->a ? tpu_client_async_status(c->a) : TPU_CLIENT_NOMEM;
}

size_t tpu_client_in_flight(const tpu_client_t *c) {
  return c ? tpu_client_async_in_flight(c->a) : 0;
}

/* ---- pipelined calls ---- */

tpu_client_status_t tpu_client_send(tpu_client_t *c, int method, const ProtobufCMessage *request,
                                    int timeout_ms, uint64_t *id) {
  if (id) *id = 0;
  if (!c) return TPU_CLIENT_MISUSE;
  if (!c->a) return set_err(c, TPU_CLIENT_NOMEM, "out of memory");
  uint64_t rid = 0;
  tpu_client_status_t st = tpu__async_submit_held(c->a, method, request, timeout_ms, &rid);
  if (st != TPU_CLIENT_OK) return pass(c, st);
  st = tpu__async_send_wait(c->a, rid);
  if (st != TPU_CLIENT_OK) return pass(c, st);
  if (id) *id = rid;
  return ok(c);
}

tpu_client_status_t tpu_client_recv(tpu_client_t *c, int timeout_ms, tpu_client_result_t **out) {
  if (out) *out = NULL;
  if (!c || !out) return c ? set_err(c, TPU_CLIENT_MISUSE, "no result pointer") : TPU_CLIENT_MISUSE;
  if (!c->a) return set_err(c, TPU_CLIENT_NOMEM, "out of memory");
  return pass(c, tpu_client_async_wait(c->a, timeout_ms, out));
}

/* ---- synchronous calls ---- */

tpu_client_status_t tpu_client_call(tpu_client_t *c, int method, const ProtobufCMessage *request,
                                    int timeout_ms, ProtobufCMessage **response) {
  if (response) *response = NULL;
  uint64_t id;
  tpu_client_status_t st = tpu_client_send(c, method, request, timeout_ms, &id);
  if (st != TPU_CLIENT_OK) return st;
  tpu_client_result_t *r;
  /* The request is in flight or done, and the engine completes it by its deadline at the
   * latest (or when the connection dies), so this loop ends. */
  while (!(r = tpu__async_take(c->a, id))) {
    if (!tpu__async_in_flight_id(c->a, id)) /* completed but its result could not be allocated */
      return set_err(c, TPU_CLIENT_NOMEM, "out of memory");
    tpu__async_pump(c->a, TPU__NO_DEADLINE);
  }
  st = tpu_client_result_status(r);
  if (st == TPU_CLIENT_OK) {
    if (response) *response = tpu_client_result_take_response(r);
    ok(c);
  } else {
    set_err(c, st, "%s", tpu_client_result_error(r));
  }
  tpu_client_result_free(r);
  return st;
}

/* A typed call: checks the response type defensively, since a cast follows. */
static tpu_client_status_t call_typed(tpu_client_t *c, int method, const ProtobufCMessage *req,
                                      int timeout_ms, const ProtobufCMessageDescriptor *want,
                                      void **out) {
  ProtobufCMessage *resp = NULL;
  if (out) *out = NULL;
  tpu_client_status_t st = tpu_client_call(c, method, req, timeout_ms, &resp);
  if (st != TPU_CLIENT_OK) return st;
  if (!resp || resp->descriptor != want) {
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    return set_err(c, TPU_CLIENT_PROTOCOL, "%s: response is not a %s", tpu__method_name(method),
                   want->name);
  }
  if (out)
    *out = resp;
  else
    protobuf_c_message_free_unpacked(resp, NULL);
  return TPU_CLIENT_OK;
}

tpu_client_status_t tpu_client_server_live(tpu_client_t *c, int timeout_ms, bool *live) {
  Inference__ServerLiveResponse *resp;
  if (live) *live = false;
  tpu_client_status_t st = call_typed(c, TPUD__METHOD__SERVER_LIVE, NULL, timeout_ms,
                                      &inference__server_live_response__descriptor, (void **)&resp);
  if (st != TPU_CLIENT_OK) return st;
  if (live) *live = resp->live;
  inference__server_live_response__free_unpacked(resp, NULL);
  return st;
}

tpu_client_status_t tpu_client_server_ready(tpu_client_t *c, int timeout_ms, bool *ready) {
  Inference__ServerReadyResponse *resp;
  if (ready) *ready = false;
  tpu_client_status_t st =
      call_typed(c, TPUD__METHOD__SERVER_READY, NULL, timeout_ms,
                 &inference__server_ready_response__descriptor, (void **)&resp);
  if (st != TPU_CLIENT_OK) return st;
  if (ready) *ready = resp->ready;
  inference__server_ready_response__free_unpacked(resp, NULL);
  return st;
}

tpu_client_status_t tpu_client_model_ready(tpu_client_t *c, const char *model,
                                           const char *version, int timeout_ms, bool *ready) {
  if (ready) *ready = false;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Inference__ModelReadyRequest req = INFERENCE__MODEL_READY_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  Inference__ModelReadyResponse *resp;
  tpu_client_status_t st =
      call_typed(c, TPUD__METHOD__MODEL_READY, &req.base, timeout_ms,
                 &inference__model_ready_response__descriptor, (void **)&resp);
  if (st != TPU_CLIENT_OK) return st;
  if (ready) *ready = resp->ready;
  inference__model_ready_response__free_unpacked(resp, NULL);
  return st;
}

tpu_client_status_t tpu_client_server_metadata(tpu_client_t *c, int timeout_ms,
                                               Inference__ServerMetadataResponse **out) {
  return call_typed(c, TPUD__METHOD__SERVER_METADATA, NULL, timeout_ms,
                    &inference__server_metadata_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_metadata(tpu_client_t *c, const char *model,
                                              const char *version, int timeout_ms,
                                              Inference__ModelMetadataResponse **out) {
  if (out) *out = NULL;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Inference__ModelMetadataRequest req = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  return call_typed(c, TPUD__METHOD__MODEL_METADATA, &req.base, timeout_ms,
                    &inference__model_metadata_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_infer(tpu_client_t *c,
                                           const Inference__ModelInferRequest *request,
                                           int timeout_ms, Inference__ModelInferResponse **out) {
  if (out) *out = NULL;
  if (c && !request) return set_err(c, TPU_CLIENT_MISUSE, "no request");
  return call_typed(c, TPUD__METHOD__MODEL_INFER, request ? &request->base : NULL, timeout_ms,
                    &inference__model_infer_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_matmul(tpu_client_t *c, const Tpud__MatMulRequest *request,
                                      int timeout_ms, Tpud__MatMulResponse **out) {
  if (out) *out = NULL;
  if (c && !request) return set_err(c, TPU_CLIENT_MISUSE, "no request");
  return call_typed(c, TPUD__METHOD__MATMUL, request ? &request->base : NULL, timeout_ms,
                    &tpud__mat_mul_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_load(tpu_client_t *c, const char *model,
                                          const char *version, int timeout_ms,
                                          Tpud__ModelLoadResponse **out) {
  if (out) *out = NULL;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Tpud__ModelLoadRequest req = TPUD__MODEL_LOAD_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  return call_typed(c, TPUD__METHOD__MODEL_LOAD, &req.base, timeout_ms,
                    &tpud__model_load_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_unload(tpu_client_t *c, const char *model,
                                            const char *version, int timeout_ms,
                                            Tpud__ModelUnloadResponse **out) {
  if (out) *out = NULL;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Tpud__ModelUnloadRequest req = TPUD__MODEL_UNLOAD_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  return call_typed(c, TPUD__METHOD__MODEL_UNLOAD, &req.base, timeout_ms,
                    &tpud__model_unload_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_repository_index(tpu_client_t *c, bool ready_only, int timeout_ms,
                                                Tpud__RepositoryIndexResponse **out) {
  Tpud__RepositoryIndexRequest req = TPUD__REPOSITORY_INDEX_REQUEST__INIT;
  req.ready_only = ready_only;
  return call_typed(c, TPUD__METHOD__REPOSITORY_INDEX, &req.base, timeout_ms,
                    &tpud__repository_index_response__descriptor, (void **)out);
}

/* ---- tensors ---- */

tpu_client_status_t tpu_client_infer(tpu_client_t *c, const char *model, const char *version,
                                     const tpu_client_tensor_t *inputs, size_t n_inputs,
                                     int timeout_ms, Inference__ModelInferResponse **out) {
  if (out) *out = NULL;
  if (!c) return TPU_CLIENT_MISUSE;
  if (!model || (n_inputs && !inputs))
    return set_err(c, TPU_CLIENT_MISUSE, "tpu_client_infer: no model or no inputs");
  Inference__ModelInferRequest req = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor *tensors = calloc(n_inputs + 1, sizeof *tensors);
  Inference__ModelInferRequest__InferInputTensor **ptrs = calloc(n_inputs + 1, sizeof *ptrs);
  ProtobufCBinaryData *raw = calloc(n_inputs + 1, sizeof *raw);
  tpu_client_status_t st;
  if (!tensors || !ptrs || !raw) {
    st = set_err(c, TPU_CLIENT_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n_inputs; i++) {
    const tpu_client_tensor_t *t = &inputs[i];
    if (!t->name || !t->datatype || (t->rank && !t->shape) || (t->nbytes && !t->data)) {
      st = set_err(c, TPU_CLIENT_MISUSE, "input %zu: name, datatype, shape or data missing", i);
      goto done;
    }
    inference__model_infer_request__infer_input_tensor__init(&tensors[i]);
    /* The request is only packed, never freed, so pointing at the caller's memory is fine. */
    tensors[i].name = (char *)t->name;
    tensors[i].datatype = (char *)t->datatype;
    tensors[i].shape = (int64_t *)t->shape;
    tensors[i].n_shape = t->rank;
    ptrs[i] = &tensors[i];
    raw[i].data = (uint8_t *)t->data;
    raw[i].len = t->nbytes;
  }
  req.model_name = (char *)model;
  if (version) req.model_version = (char *)version;
  req.inputs = ptrs;
  req.n_inputs = n_inputs;
  req.raw_input_contents = raw;
  req.n_raw_input_contents = n_inputs;
  st = tpu_client_model_infer(c, &req, timeout_ms, out);

done:
  free(tensors);
  free(ptrs);
  free(raw);
  return st;
}

tpu_client_status_t tpu_client_infer_output(const Inference__ModelInferResponse *resp,
                                            const char *name, tpu_client_tensor_t *out) {
  if (!resp || !name || !out) return TPU_CLIENT_MISUSE;
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < resp->n_outputs; i++) {
    const Inference__ModelInferResponse__InferOutputTensor *o = resp->outputs[i];
    if (!o || !o->name || strcmp(o->name, name) != 0) continue;
    if (resp->n_raw_output_contents != resp->n_outputs) return TPU_CLIENT_PROTOCOL;
    const ProtobufCBinaryData *raw = &resp->raw_output_contents[i];
    size_t size = tpu_oip_datatype_size(o->datatype);
    if (size) { /* fixed-size elements: the byte count must match the shape exactly */
      size_t count = 1;
      for (size_t d = 0; d < o->n_shape; d++) {
        if (o->shape[d] < 0) return TPU_CLIENT_PROTOCOL;
        if (o->shape[d] && count > SIZE_MAX / size / (size_t)o->shape[d])
          return TPU_CLIENT_PROTOCOL;
        count *= (size_t)o->shape[d];
      }
      if (count * size != raw->len) return TPU_CLIENT_PROTOCOL;
    }
    out->name = o->name;
    out->datatype = o->datatype;
    out->shape = o->shape;
    out->rank = o->n_shape;
    out->data = raw->data;
    out->nbytes = raw->len;
    return TPU_CLIENT_OK;
  }
  return TPU_CLIENT_NOT_FOUND;
}
