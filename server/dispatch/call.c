/*
 * call.c - a call's life after dispatch (call.h): its answer through its origin, tracking while
 * it computes, the continuations that bring it back from compute (audit record, then its I/O
 * thread), counting, and the buffered-answer budget its answer reserves.
 *
 * Threads: tpu__call_finish and on_recorded run on the compute side and the audit writer; every
 * other function on the origin's I/O thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "clock.h"
#include "log.h"
#include "server_int.h"

void tpu__count(tpu__model_t *model, int code) {
  code = tpu_code_wire(code);
  if (code < 0 || code >= TPU_CODE_COUNT) code = TPU_CODE_UNKNOWN;
  tpu_stats_inc(&tpu_stats.requests[code], 1);
  if (model) tpu_stats_inc(&model->stats.requests[code], 1);
}

uint64_t tpu__deadline_of(uint64_t received_us, uint64_t timeout_us) {
  /* A timeout too large to add is no deadline rather than one that wrapped into the past. */
  if (!timeout_us || timeout_us > UINT64_MAX - received_us) return 0;
  return received_us + timeout_us;
}

/* ---- the buffered-answer budget ---- */

int tpu__budget_reserve(tpu_server_t *srv, size_t bytes, int *code, char *msg, size_t msglen) {
  uint64_t limit = srv->cfg.max_buffered_bytes;
  if (bytes > limit) { /* never fits: not "busy" (HTTP 413, not 503 "try again later") */
    tpu_stats_inc(&tpu_stats.buffered_refused, 1);
    *code = TPU_CODE_RESOURCE_EXHAUSTED;
    snprintf(msg, msglen, "this answer needs %zu bytes, more than max-buffered-bytes (%llu) "
             "allows at all; ask for fewer rows per request, or raise --max-buffered-bytes",
             bytes, (unsigned long long)limit);
    return -1;
  }
  uint64_t before = atomic_fetch_add_explicit(&tpu_stats.buffered_bytes, bytes,
                                              memory_order_relaxed);
  if (before + bytes <= limit) return 0;
  tpu_stats_sub(&tpu_stats.buffered_bytes, bytes);
  tpu_stats_inc(&tpu_stats.buffered_refused, 1);
  *code = TPU_CODE_OVERLOADED;
  snprintf(msg, msglen, "server busy: answers not yet sent or still computing hold %llu bytes "
           "and this one needs %zu more, over max-buffered-bytes (%llu); try again later",
           (unsigned long long)before, bytes, (unsigned long long)limit);
  return -1;
}

/* ---- calls ---- */

void tpu__call_release(tpu__call_t *call) {
  if (call->budget) tpu_stats_sub(&tpu_stats.buffered_bytes, call->budget);
  if (call->method && call->method->release) call->method->release(call);
  if (call->request) protobuf_c_message_free_unpacked(call->request, NULL);
  tpu__model_release(call->model); /* the model version may be freed now (repository.c) */
}

void tpu__call_free(tpu__call_t *call) {
  if (!call) return;
  tpu__call_release(call);
  free(call);
}

/* ModelInfer answers for Triton's statistics: count and latency, OK and not. */
static void count_infer(tpu__call_t *call, int code) {
  if (!call->model || !call->method || call->method->method != TPUD__METHOD__MODEL_INFER) return;
  tpu_model_stats_t *st = &call->model->stats;
  uint64_t us = tpu_now_us() - call->received_us;
  tpu_stats_inc(code == TPU_CODE_OK ? &st->infer_ok : &st->infer_fail, 1);
  tpu_stats_inc(code == TPU_CODE_OK ? &st->infer_ok_us : &st->infer_fail_us, us);
}

void tpu__reply(tpu__call_t *call, int code, const char *msg, const ProtobufCMessage *payload) {
  tpu__count(call->model, code);
  count_infer(call, code);
  if (code != TPU_CODE_OK)
    tpu_log_debug("request %llu: %s: %s", (unsigned long long)call->id, tpu_code_name(code), msg);
  if (!call->origin->closed) call->origin->ops->respond(call, code, msg, payload);
}

void tpu__call_track(tpu__call_t *call) {
  call->tracked = 1;
  call->answer_bytes = call->method->answer_size ? call->method->answer_size(call) : 256;
  atomic_fetch_add(&call->srv->inflight, 1);
  call->origin->ops->track(call);
}

/* Back on the origin's I/O thread: the answer, then the origin forgets the call. */
static void on_back(tpu__io_t *io, tpu__msg_t *m) {
  tpu__call_t *call = tpu_container_of(m, tpu__call_t, msg);
  tpu__origin_t *o = call->origin;
  /* The client went away (closed, or reset its HTTP/2 stream) before its answer: what counts is
   * that it was not delivered, even when the compute itself had finished. */
  if (call->code == TPU_CODE_OK && atomic_load(&call->cancel)) {
    call->code = TPU_CODE_CANCELLED;
    snprintf(call->msg_text, sizeof call->msg_text, "the client cancelled the call");
  }
  if (o->closed) {
    tpu__count(call->model, call->code); /* not delivered: counted, not sent */
    count_infer(call, call->code);
  } else {
    if (call->code != TPU_CODE_OK)
      tpu__reply(call, call->code, call->msg_text, NULL);
    else
      call->method->respond(call);
  }
  atomic_fetch_sub(&call->srv->inflight, 1);
  o->ops->untrack(call);
  tpu__call_free(call);
}

/* A completion never run (the I/O thread is gone: a hard stop). */
static void on_drop(tpu__msg_t *m) {
  tpu__call_t *call = tpu_container_of(m, tpu__call_t, msg);
  atomic_fetch_sub(&call->srv->inflight, 1);
  call->origin->ops->untrack(call); /* the origin forgets it; its service frees the origin */
  tpu__call_free(call);
}

/* Writer thread (or the compute thread when audit is off): to the I/O thread. */
static void on_recorded(tpu__audit_cont_t *k, int withheld) {
  tpu__call_t *call = tpu_container_of(k, tpu__call_t, audit);
  if (withheld) {
    call->code = TPU_CODE_UNAVAILABLE;
    snprintf(call->msg_text, sizeof call->msg_text, "%s; the result is withheld",
             TPU__AUDIT_UNAVAILABLE);
  }
  call->msg.run = on_back;
  call->msg.drop = on_drop;
  tpu__io_post(call->origin->io, &call->msg);
}

void tpu__call_finish(tpu__call_t *call) {
  call->audit.done = on_recorded;
  if (!call->srv->audit) { /* off: never changes after start-up */
    on_recorded(&call->audit, 0);
    return;
  }
  tpu__digest_t d;
  memset(&d, 0, sizeof d);
  tpu_audit_record_t rec = {.client = call->client, .status = tpu_code_name(call->code),
                            .message = call->code != TPU_CODE_OK ? call->msg_text : NULL,
                            .input_sha256 = d.in_hex, .output_sha256 = d.out_hex,
                            .kernels = call->srv->kernels};
  call->method->digest(call, &rec, &d);
  if (!rec.version) rec.version = d.version;
  tpu__audit_record(call->srv, &rec, &call->audit);
}

