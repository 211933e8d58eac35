/*
 * call.h - one request path for every protocol: origins, requests, calls, the method table.
 *
 * DESIGN
 * A front end (front/: framed, gRPC, HTTP) turns what it read into a tpu__request_t (the method,
 * its tag for the answer, who asks, the message still encoded) and hands it to tpu__dispatch on
 * its I/O thread. Dispatch does what every protocol shares, in this order: access control
 * (auth.h), draining, fail-closed audit admission, decoding the message (protobuf, or the front
 * end's own decoder: HTTP's JSON), then the method's row of the table (methods.c) serves it. A
 * cheap method answers at once; one that computes builds a call and hands it to its engine (the
 * model's batcher, the MatMul pool, the repository thread) with a continuation of this layer as
 * its done callback. That continuation, on the compute thread, fills the call's audit record
 * from its method's digest column and gives it to the audit layer with the next continuation,
 * which posts the call back to its origin's I/O thread as a message that carries its own
 * handler. There the method's respond column builds the answer message, and the origin's
 * respond operation encodes it for its protocol: a framed envelope, a gRPC message and
 * trailers, or OIP REST JSON. No code below this layer sees a call or a connection, and no
 * front end knows a method's semantics.
 *
 * An origin is a front end's connection as dispatch sees it: its operations (respond, track,
 * untrack), its I/O thread, how its answers are encoded (for the buffered-answer budget) and
 * whether it is gone. It lives as long as calls are tracked on it (the front end lingers a
 * closed connection until its last untrack).
 *
 * Threads: tpu__dispatch and every origin operation run on the origin's I/O thread. A call
 * belongs to that thread except while it is with compute, when the compute side owns its result
 * fields and its engine's part (u), and the I/O thread touches only its own fields: `cancel`
 * (the client went away) and the origin's bookkeeping (tracked, answer_bytes, prev/next), which
 * it writes right after the hand-off (completions come back to this thread, so none is seen
 * before).
 */
#ifndef TPU_CALL_H
#define TPU_CALL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "audit_wire.h"
#include "auth.h"
#include "batcher.h"
#include "io.h"
#include "mmpool.h"
#include "repository.h"
#include "tpu_envelope.h"

struct tpu_server;
typedef struct tpu__origin tpu__origin_t;
typedef struct tpu__call tpu__call_t;
typedef struct tpu__method tpu__method_t;

/* How an origin's answers are encoded: what an answer costs in its output. */
enum { TPU__WIRE_FRAMED = 0, TPU__WIRE_GRPC = 1, TPU__WIRE_JSON = 2 };

typedef struct {
  /* Encodes and queues the answer of `call` (I/O thread): `code`, `msg` (why, when code is not
   * OK; for an OK answer a note some protocols show, e.g. why a model is not ready), and the
   * response message when OK (NULL otherwise). Never called for a closed origin. */
  void (*respond)(tpu__call_t *call, int code, const char *msg,
                  const ProtobufCMessage *payload);
  /* A call was handed to compute: the origin counts it in flight (back-pressure, lingering). */
  void (*track)(tpu__call_t *call);
  /* A tracked call is over, answered or not: the origin forgets it (and may free itself if it
   * is closed and this was its last). The call is freed right after. */
  void (*untrack)(tpu__call_t *call);
  /* Whether request `id` is still in flight here (a framed client reusing an id could not
   * tell the answers apart: INVALID_ARGUMENT). May be NULL: ids are never reused (gRPC stream
   * ids, HTTP slots). */
  int (*in_flight)(tpu__origin_t *o, uint64_t id);
} tpu__origin_ops_t;

struct tpu__origin {
  const tpu__origin_ops_t *ops;
  struct tpu_server *srv;
  tpu__io_t *io;      /* the I/O thread it lives on: completions come back there */
  int wire;           /* TPU__WIRE_* */
  int closed;         /* gone: answers are counted and dropped, not sent */
  char who[TPU_AUTH_IDENTITY_MAX]; /* the last request's identity (auth.h), for the front end's
                                    * own records (a bad frame); "" before the first */
};

/* A request as a front end hands it to dispatch; borrowed for the call only. */
typedef struct tpu__request {
  int method;                /* Tpud__Method; one proto does not know is refused UNIMPLEMENTED */
  uint64_t id;               /* the origin's name for the answer: request id, stream id */
  void *slot;                /* the origin's per-request pointer (HTTP: its response slot) */
  uint64_t received_us;
  uint64_t timeout_us;       /* relative deadline; 0 = none */
  tpu_auth_peer_t peer;      /* address and client certificate */
  const char *authz;         /* the first "authorization" value, or NULL */
  size_t authz_len, n_authz; /* its length; how many the request carried */
  const char *model, *version; /* what it names, when known before decoding (audit, counts) */
  /* The message: a protobuf payload (framed, gRPC), or a front end's decoder (HTTP's JSON),
   * which returns TPU_CODE_OK and the message (freed with protobuf_c_message_free_unpacked),
   * or a code and msg. */
  const uint8_t *payload;
  size_t payload_len;
  int (*decode)(const struct tpu__request *r, ProtobufCMessage **msg, char *err, size_t errlen);
  const void *body;          /* for decode */
  size_t body_len;
} tpu__request_t;

/* One request being served. */
struct tpu__call {
  tpu__msg_t msg;                 /* on its I/O thread's queue when compute is done */
  tpu__call_t *prev, *next;       /* the origin's in-flight list, if it keeps one */
  tpu__origin_t *origin;
  const tpu__method_t *method;
  struct tpu_server *srv;
  uint64_t id;                    /* the request's tag (tpu__request_t) */
  void *slot;
  uint64_t received_us, deadline_us;
  atomic_int cancel;              /* set by the I/O thread when the client is gone */
  /* Result, written by the compute side before the completion. */
  int code;
  char msg_text[512];
  ProtobufCMessage *request;      /* the decoded request; freed with the call */
  tpu__model_t *model;            /* a reference (ModelInfer; counts), released with the call */
  int tracked;                    /* handed to compute: freed after its completion */
  size_t answer_bytes;            /* its answer's size in the origin's output (back-pressure) */
  size_t budget;                  /* its share of --max-buffered-bytes, given back when freed */
  char client[TPU_AUTH_IDENTITY_MAX]; /* who asked (auth.h identity), for the audit record */
  tpu__audit_cont_t audit;        /* the continuation after its record (dispatch.c) */
  /* What its engine needs and writes, by method. */
  union {
    struct {
      tpu_batch_req_t breq;
      unsigned char *in_packed; /* the inputs as packed rows, when the model has several */
      unsigned char *out;       /* rows packed output rows (every output) */
      size_t rows;
      uint64_t want;            /* bit j: output j is to be returned (OIP "outputs") */
      uint32_t cls_k[TPU_MODEL_MAX_IO]; /* output j: classes to return (classification), 0 */
      unsigned char *cls;       /* the classified outputs' BYTES, output after output */
      size_t cls_off[TPU_MODEL_MAX_IO], cls_len[TPU_MODEL_MAX_IO]; /* output j's in cls */
      size_t cls_bound;         /* bytes cls may take, known before the batch (the batcher
                                 * thread writes cls: the I/O thread reads only this) */
    } infer;
    tpu__mm_job_t mm;
    tpu__repo_op_t *op;
  } u;
};

/* ---- the method table (methods.c) ---- */

/* Hex digests and what else an audit record of a computed call points at. */
typedef struct {
  char in_hex[65], out_hex[65], version[24], what[160];
} tpu__digest_t;

struct tpu__method {
  int method;                     /* Tpud__Method */
  const char *name;               /* as proto's method info names it */
  tpu_need_t need;                /* the role it needs (auth.h) */
  int health;                     /* a health check: open with --auth-open-health */
  int audited;                    /* it computes or changes the server: every request audited */
  int computes;                   /* answered from compute (respond, digest, answer_size set) */
  /* Serves a decoded call (I/O thread): answers it with tpu__reply, or hands it to its engine
   * and tracks it (tpu__call_track). Takes the call in both cases. */
  void (*serve)(tpu__call_t *call);
  /* Builds the answer of a call back from compute with code OK, and sends it (tpu__reply). */
  void (*respond)(tpu__call_t *call);
  /* Fills the audit record of a finished call (compute thread): digests of what the engine
   * read and wrote, and what else the record says. */
  void (*digest)(tpu__call_t *call, tpu_audit_record_t *rec, tpu__digest_t *d);
  /* The size its answer takes in the origin's output (back-pressure while in flight). */
  size_t (*answer_size)(const tpu__call_t *call);
  /* Frees what its serve allocated for its engine (may be NULL). */
  void (*release)(tpu__call_t *call);
};

/* The row of a method, or NULL when tpud does not serve it. */
const tpu__method_t *tpu__method_of(int method);
/* The role a method needs: its own, or none for a health check with --auth-open-health. */
tpu_need_t tpu__method_need(const tpu__method_t *m, int open_health);
/* Every row, in proto's order (for tests and listings). */
const tpu__method_t *tpu__methods(size_t *n);

/* ---- dispatch.c: the entry ---- */

/* Serves one request from a front end (I/O thread). */
void tpu__dispatch(tpu__origin_t *o, const tpu__request_t *r);
/* Answers a request a front end refused before dispatch (a bad frame, a malformed gRPC call, a
 * JSON body that does not parse): counted, audited (as every refusal of the protocol layer is),
 * answered with code and msg. */
void tpu__dispatch_refuse(tpu__origin_t *o, const tpu__request_t *r, int code, const char *msg);
/* Access control for a front end's own pages (HTTP /metrics, /v2/debug): TPU_CODE_OK, or the
 * code and msg to answer with. Sets o->who. */
int tpu__dispatch_authorize(tpu__origin_t *o, const tpu__request_t *r, tpu_need_t need,
                            char *msg, size_t msglen);

/* The health checking protocol's statuses (grpc.health.v1, health.proto), and the status of a
 * service name (methods.c): "" or a tpud service is the server's readiness, a model name the
 * model's; TPU__HEALTH_UNKNOWN for any other name. why (whylen bytes) says why when not serving.
 * I/O thread or any thread. */
enum { TPU__HEALTH_SERVING = 1, TPU__HEALTH_NOT_SERVING = 2, TPU__HEALTH_UNKNOWN = 3 };
int tpu__health_status(struct tpu_server *srv, const char *service, char *why, size_t whylen);

/* ---- call.c: a call's life ---- */

/* Sends a call's answer through its origin and counts it (methods, I/O thread). */
void tpu__reply(tpu__call_t *call, int code, const char *msg, const ProtobufCMessage *payload);
/* Hands a call to compute: the origin tracks it until its completion (methods). */
void tpu__call_track(tpu__call_t *call);
/* The engines' continuation for a finished call (compute threads): audit record, then back to
 * the origin's I/O thread. */
void tpu__call_finish(tpu__call_t *call);
void tpu__call_free(tpu__call_t *call);
/* Frees what a call holds, not the call itself (a refusal's call on the stack). */
void tpu__call_release(tpu__call_t *call);
/* The deadline of a request received at `received_us` with a relative timeout (0 = none). */
uint64_t tpu__deadline_of(uint64_t received_us, uint64_t timeout_us);

/* Counts an answered request (global and per model; model may be NULL). */
void tpu__count(tpu__model_t *model, int code);

/* ---- the buffered-answer budget (--max-buffered-bytes), every port ---- */
/* Reserves `bytes` for the answer of a call about to be accepted (I/O thread): 0, or -1 when it
 * would take tpud_buffered_bytes past the budget; then msg says so and the code to refuse with
 * is *code: OVERLOADED (try again later) or, for an answer larger than the whole budget, which
 * can never be taken, RESOURCE_EXHAUSTED. The reservation lasts until tpu__call_free
 * (call->budget), by when the answer is in a connection's output, which counts itself (sock.c)
 * until the kernel has taken it. */
int tpu__budget_reserve(struct tpu_server *srv, size_t bytes, int *code, char *msg,
                        size_t msglen);

/* The name tpud reports for itself, and its version. */
#define TPUD_SERVER_NAME "tpud"
#define TPUD_SERVER_VERSION "0.1.0"

#endif /* TPU_CALL_H */
