/*
 * dispatch.c - the one request path (call.h): access control, draining, audit admission,
 * decoding, then the method's row (methods.c); refusals a front end makes before it.
 *
 * DESIGN
 * Runs on the origin's I/O thread, except tpu__call_finish and its audit continuation, which run
 * on the compute side (batcher, MatMul pool, repository thread) and on the audit writer. Access
 * control comes first: each request is decided (auth.h: its bearer token, else the connection's
 * client certificate; more than one authorization value is INVALID_ARGUMENT) before anything
 * else, and its identity is what every audit record of the request carries. Refusals of audited
 * methods are audited too, as are the refusals a front end makes before dispatch.
 *
 * A call lives from the request to its answer: allocated here, freed here after its answer (or,
 * when it was handed to compute, by call.c after its completion came back and its origin
 * untracked it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth_wire.h"
#include "call.h"
#include "clock.h"
#include "log.h"
#include "server_int.h"

/* ---- dispatch ---- */

static void call_init(tpu__call_t *call, tpu__origin_t *o, const tpu__request_t *r,
                      const tpu__method_t *m) {
  call->origin = o;
  call->srv = o->srv;
  call->method = m;
  call->id = r->id;
  call->slot = r->slot;
  call->received_us = r->received_us;
  call->deadline_us = tpu__deadline_of(r->received_us, r->timeout_us);
}

/* The model a request names, for counting a refusal against it (a reference, or NULL). */
static tpu__model_t *named_model(tpu_server_t *srv, const tpu__request_t *r) {
  if (!r->model || !*r->model) return NULL;
  char msg[256];
  return tpu__server_find_model(srv, r->model, r->version, msg, sizeof msg);
}

/* Answers a request that has no call (out of memory, or refused before one was made). Counted
 * against the model it names only when its message was read (`per_model`: it did not decode,
 * as a JSON body that does not parse); a refusal before that (access, draining) counts only
 * globally, on every protocol alike. */
static void answer_without_call(tpu__origin_t *o, const tpu__request_t *r, int code,
                                const char *msg, int per_model) {
  tpu__call_t tmp;
  memset(&tmp, 0, sizeof tmp);
  call_init(&tmp, o, r, tpu__method_of(r->method));
  tmp.model = per_model ? named_model(o->srv, r) : NULL;
  tpu__reply(&tmp, code, msg, NULL);
  tpu__call_release(&tmp);
}

void tpu__dispatch_refuse(tpu__origin_t *o, const tpu__request_t *r, int code, const char *msg) {
  tpu__audit_reject(o->srv, o->who[0] ? o->who : r->peer.peer, NULL, r->model, r->version, code,
                    msg);
  answer_without_call(o, r, code, msg, 1);
}

static int authorize(tpu__origin_t *o, const tpu__request_t *r, tpu_need_t need, char *msg,
                     size_t msglen) {
  return tpu__auth_check(o->srv, &r->peer, r->authz, r->authz_len, r->n_authz, need, o->who,
                         sizeof o->who, msg, msglen);
}

int tpu__dispatch_authorize(tpu__origin_t *o, const tpu__request_t *r, tpu_need_t need,
                            char *msg, size_t msglen) {
  return authorize(o, r, need, msg, msglen);
}

/* The request's message: the front end's decoder, or its protobuf payload. */
static int decode(const tpu__request_t *r, ProtobufCMessage **out, char *msg, size_t msglen) {
  if (r->decode) return r->decode(r, out, msg, msglen);
  Tpud__RequestEnvelope env = TPUD__REQUEST_ENVELOPE__INIT;
  env.id = r->id;
  env.method = (Tpud__Method)r->method;
  env.payload.data = (uint8_t *)r->payload;
  env.payload.len = r->payload_len;
  tpu_proto_error_t perr;
  if (tpu_envelope_unpack_request_payload(&env, out, &perr) == TPU_PROTO_OK) return TPU_CODE_OK;
  snprintf(msg, msglen, "%s", perr.msg);
  return tpu_proto_status_grpc_code(perr.status);
}

void tpu__dispatch(tpu__origin_t *o, const tpu__request_t *r) {
  tpu_server_t *srv = o->srv;
  const tpu__method_t *m = tpu__method_of(r->method);
  char msg[640];
  int audited = m && m->audited, code, decoded = 0;
  tpu_need_t need = m ? tpu__method_need(m, srv->cfg.auth_open_health) : TPU_NEED_INFER;
  code = authorize(o, r, need, msg, sizeof msg);
  if (code != TPU_CODE_OK) goto refuse;
  if (!m) {
    const tpu_method_info_t *info = tpu_envelope_method_info(r->method);
    if (info)
      snprintf(msg, sizeof msg, "method %s is not served", info->name);
    else
      snprintf(msg, sizeof msg, "method %d is not served: not a method of this tpud", r->method);
    code = TPU_CODE_UNIMPLEMENTED;
    goto refuse;
  }
  if (o->ops->in_flight && o->ops->in_flight(o, r->id)) {
    snprintf(msg, sizeof msg, "request id %llu is already in flight on this connection",
             (unsigned long long)r->id);
    code = TPU_CODE_INVALID_ARGUMENT;
    goto refuse;
  }
  /* Draining: no new work (what computes or changes the server); reads are still answered,
   * ServerReady and ModelReady saying not ready. */
  if (atomic_load(&srv->draining) && m->computes) {
    snprintf(msg, sizeof msg, "server is shutting down");
    code = TPU_CODE_UNAVAILABLE;
    goto refuse;
  }
  if (audited && !tpu__audit_admit(srv)) {
    snprintf(msg, sizeof msg, TPU__AUDIT_UNAVAILABLE);
    code = TPU_CODE_UNAVAILABLE;
    goto refuse;
  }
  tpu__call_t *call = calloc(1, sizeof *call);
  if (!call) {
    snprintf(msg, sizeof msg, "out of memory");
    code = TPU_CODE_RESOURCE_EXHAUSTED;
    goto refuse;
  }
  call_init(call, o, r, m);
  size_t cl = strnlen(o->who, sizeof call->client - 1); /* a bounded copy, no printf */
  memcpy(call->client, o->who, cl);
  call->client[cl] = '\0';
  code = decode(r, &call->request, msg, sizeof msg);
  if (code != TPU_CODE_OK) {
    tpu__call_free(call);
    decoded = 1; /* read, if not understood: counted against the model it names */
    goto refuse;
  }
  m->serve(call);
  if (!call->tracked) tpu__call_free(call);
  return;
refuse:
  if (audited) tpu__audit_reject(srv, o->who, NULL, r->model, r->version, code, msg);
  answer_without_call(o, r, code, msg, decoded);
}
