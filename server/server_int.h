/*
 * server_int.h - structures shared by the files of the server core (server.c, io.c, sock.c,
 * handlers.c, compute.c); not an API. Names shared across these files carry `tpu__`.
 *
 * DESIGN
 * Threads:
 *   - main thread: evconnlistener + signals + the drain timer on its own event_base; accepted
 *     fds go round robin to the I/O threads as messages on their queues.
 *   - I/O threads (--io-threads): each owns an event_base, a message queue + eventfd, and its
 *     connections; only it touches them. It reads frames, decodes and validates requests,
 *     answers cheap calls in place and hands compute to a batcher or the MatMul pool.
 *   - one batcher thread per model version, and the MatMul pool (--threads): compute only. They
 *     finish a call by pushing it back on its connection's I/O thread queue.
 * A call (tpu__call_t) belongs to its I/O thread except while it is queued for compute, when the
 * compute side owns the result fields and the I/O thread only reads the `cancel` flag it sets.
 * A connection whose socket was closed while calls were in flight lingers (closed = 1) until the
 * last completion comes back; only then is it freed, by its I/O thread.
 */
#ifndef TPU_SERVER_INT_H
#define TPU_SERVER_INT_H

#include <event2/event.h>
#include <event2/listener.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "audit.h"
#include "auth.h"
#include "batcher.h"
#include "config.h"
#include "model.h"
#include "queue.h"
#include "repository.h"
#include "server.h"
#include "sock.h"
#include "stats.h"
#include "tls.h"
#include "tpu_envelope.h"
#include "tpu_engine.h"
#include "validate.h"

struct evbuffer;
struct tpu__http_slot;
struct tpu__http_io;
typedef struct tpu__io tpu__io_t;
typedef struct tpu__conn tpu__conn_t;
typedef struct tpu__call tpu__call_t;
typedef struct tpu__h2 tpu__h2_t;

/* Kinds of messages on an I/O thread's queue; every message starts with tpu__msg_t. */
enum {
  TPU__MSG_CONN = 1, /* a new accepted socket */
  TPU__MSG_DONE = 2, /* a call whose compute finished (tpu__call_t) */
  TPU__MSG_STOP = 3, /* flush and close every connection, then leave the loop */
  TPU__MSG_DRAIN = 4 /* the server started draining: say GOAWAY to HTTP/2 clients */
};

typedef struct {
  tpu_qnode_t link;
  int kind;
} tpu__msg_t;

typedef struct {
  tpu__msg_t msg;
  int fd;
  char peer[64];
} tpu__conn_msg_t;

/* One model version in the table (repository.h): a serving instance (model and batcher set) or
 * a status-only entry (model NULL). Reference-counted (tpu__model_release); immutable once
 * published except its counters and refs. */
typedef struct tpu__model {
  _Atomic long refs;
  struct tpu__repo *repo;                    /* frees it after the last release */
  struct tpu__model *live_prev, *live_next;  /* the repository's live instances (its mu) */
  struct tpu__model *grave_next;             /* the repository's instances to free (its mu) */
  char name[TPU_MODEL_MAX_NAME + 1];
  uint64_t version;
  char version_str[24];
  int state;          /* TPUD__MODEL_STATE__MODEL_STATE_*: READY for an instance */
  char reason[512];   /* why it is not READY (or why a reload failed) */
  tpu_model_t *model; /* NULL when failed */
  tpu_batcher_t *batcher;
  tpu_model_stats_t stats;
  int64_t in_shape[2], out_shape[2];
  tpu_tensor_spec_t in_spec, out_spec;
  tpu_vmodel_t vmodel;
  char label[200];    /* "model 'digits' version 1" */
  uint64_t memory_bytes; /* what the instance holds: model and batcher (tpu_model_load_opts_t) */
  /* Engine work of one call per bucket (from its plans at load), added to stats per batch. */
  size_t nbuckets;
  uint64_t bucket_macs[TPU_MODEL_MAX_BUCKETS], bucket_cycles[TPU_MODEL_MAX_BUCKETS],
      bucket_slots[TPU_MODEL_MAX_BUCKETS];
} tpu__model_t;

/* One request being served. */
struct tpu__call {
  tpu__msg_t msg;               /* on the I/O queue when done (kind TPU__MSG_DONE) */
  tpu_qnode_t job_link;         /* on the MatMul pool queue */
  tpu__call_t *prev, *next;     /* the connection's in-flight list (I/O thread only) */
  tpu__io_t *io;                /* the I/O thread its completion goes back to */
  tpu__conn_t *conn;            /* native protocol: its connection; NULL for HTTP */
  struct tpu__http_slot *http; /* HTTP: the response slot it answers (http.c); NULL for native */
  uint64_t id;
  int method;
  uint64_t received_us, deadline_us;
  atomic_int cancel;            /* set by the I/O thread when the client is gone */
  /* Result, written by the compute side before the DONE push. */
  int code;
  char msg_text[512];
  /* ModelInfer */
  tpu__model_t *model;          /* a reference, released by tpu__call_free */
  Inference__ModelInferRequest *infer;
  tpu_batch_req_t breq;
  float *out;
  size_t rows;
  /* MatMul */
  Tpud__MatMulRequest *mm;
  /* ModelLoad / ModelUnload (repository.c), freed by tpu__call_free */
  tpu__repo_op_t *op;
  size_t m, k, n;
  int dtype;
  void *c;
  uint64_t compute_us;
  size_t answer_bytes;          /* its answer's size, reserved on its connection (io.c) */
  size_t budget;                /* its answer's share of --max-buffered-bytes (tpu__budget_*),
                                 * given back by tpu__call_free */
  char client[TPU_AUTH_IDENTITY_MAX]; /* who asked (auth.h identity), for the audit record */
};

/* What a native-port connection speaks (io.c decides from its first bytes or ALPN). */
enum { TPU__PROTO_UNKNOWN = 0, TPU__PROTO_FRAMED = 1, TPU__PROTO_H2 = 2 };

/* A client connection, owned by one I/O thread. */
struct tpu__conn {
  tpu__sock_t sock;        /* socket, input, output, TLS and client certificate (sock.h) */
  tpu__io_t *io;
  uint64_t serial;
  char peer[64];
  tpu__call_t *calls;      /* in flight */
  size_t ncalls;
  size_t reserved;         /* answer bytes of the calls in flight (back-pressure, io.c) */
  int hold;                /* inside an I/O callback: not freed before it returns (io.c) */
  int closed;              /* socket gone; freed when ncalls reaches 0 */
  int read_paused;         /* back-pressure: reading stopped */
  int close_after_write;   /* a fatal frame error: flush the error, then close */
  int proto;               /* TPU__PROTO_*: what the client speaks, known from its first bytes */
  tpu__h2_t *h2;           /* gRPC over HTTP/2 (grpc.c); NULL for the framed protocol */
  char who[TPU_AUTH_IDENTITY_MAX]; /* the current request's identity (set per request) */
};

struct tpu__io {
  tpu_server_t *srv;
  unsigned index;
  pthread_t thread;
  int started;
  struct event_base *base;
  tpu_queue_t queue;
  struct event *queue_ev;
  struct event *stop_timer;
  tpu__sockset_t socks;    /* open native connections (sock.h), their sweep and flushes */
  size_t nconns;
  size_t nlinger;          /* closed connections waiting for completions */
  int stopping;
  tpu__msg_t stop_msg;
  tpu__msg_t drain_msg;
  struct tpu__http_io *http; /* this thread's HTTP server (http.c); NULL when not serving */
};

typedef struct tpu__mmpool tpu__mmpool_t;

struct tpu_server {
  tpu_config_t cfg;
  tpu_engine_t *engine;
  /* The model table is the repository's (repository.h): take a consistent view with
   * tpu__models_acquire/tpu__models_release, or route with tpu__server_find_model. */
  struct tpu__repo *repo;
  tpu__mmpool_t *pool;
  tpu__io_t *io;
  unsigned nio, next_io;
  struct event_base *base;
  struct evconnlistener *listener;
  struct event *accept_timer; /* re-enables the listener after an accept error (backoff) */
  unsigned accept_backoff_ms;  /* the pause after the next accept error; 0 = the first */
  int http_fd;           /* the HTTP listening socket (each I/O thread accepts a dup); -1 */
  unsigned http_port;
  struct event *sig_term, *sig_int, *sig_usr1, *sig_hup, *drain_timer;
  unsigned port;
  atomic_int draining;
  atomic_int load_cancel;    /* set by SIGTERM/SIGINT (also during the start-up loads): model
                              * loads stop at their next check (repository.h) */
  atomic_int stop_at_start;  /* a signal asked to stop during start-up: drain at once */
  _Atomic uint64_t inflight; /* calls handed to compute and not yet completed */
  uint64_t drain_deadline_us;
  _Atomic uint64_t next_conn_serial;
  /* Audit log (audit_wire.c); NULL = off. Set before any thread starts; freed after
   * audit_closed is set and audit_users has drained to 0 (threads use it between
   * tpu__audit_enter and tpu__audit_leave). */
  tpu_audit_t *audit;
  atomic_int audit_closed;
  atomic_uint audit_users;
  /* TLS contexts (tls.h; NULL = plaintext) and access control (auth_wire.c); both swapped in
   * place by SIGHUP, set before any thread starts. http_tls: the HTTP port speaks TLS. */
  tpu_tls_t *tls;
  int http_tls;
  struct tpu__auth *auth;
};

/* ---- server.c: accept errors, both ports ---- */
/* An accept() on port `which` (TPU_ACCEPT_NATIVE or _HTTP) failed with errno `err` (any
 * thread): counts it (tpud_accept_errors_total), logs at most one line a second for the whole
 * process, and returns how long the caller stops polling its listener: *backoff_ms, which then
 * doubles (100 ms up to 1 s; the caller resets it to 0 after an accept succeeds). EMFILE and its
 * kin are not a reason to spin: the listener stays readable while connections wait in its
 * backlog, and they are served once descriptors are free again. */
unsigned tpu__accept_failed(int which, int err, unsigned *backoff_ms);

/* ---- io.c: the buffered-answer budget (--max-buffered-bytes), every port ---- */
/* Reserves `bytes` for the answer of a call about to be accepted (I/O thread): 0, or -1 when it
 * would take tpud_buffered_bytes past the budget; then msg says so (it starts with
 * TPU__BUSY, which HTTP answers with 503) and the caller refuses the call RESOURCE_EXHAUSTED.
 * An answer larger than the whole budget can never be taken: msg then says so without
 * TPU__BUSY (HTTP 413), since trying again would not help.
 * The reservation lasts until tpu__call_free (call->budget), by when the answer is in a
 * connection's output, which counts itself (sock.c) until the kernel has taken it. */
int tpu__budget_reserve(tpu_server_t *srv, size_t bytes, char *msg, size_t msglen);
#define TPU__BUSY "server busy"

/* ---- io.c ---- */
int tpu__io_start(tpu_server_t *srv);
/* Hands an accepted socket to an I/O thread (main thread). */
void tpu__io_hand_off(tpu_server_t *srv, int fd, const char *peer);
/* Tells every I/O thread the server is draining (main thread, once). */
void tpu__io_drain(tpu_server_t *srv);
/* Asks every I/O thread to flush and close its connections and exit; joins them. */
void tpu__io_stop(tpu_server_t *srv);
void tpu__io_free(tpu_server_t *srv);
/* Queues a finished call to its connection's I/O thread (compute threads). */
void tpu__call_complete(tpu__call_t *call);
/* Writes an encoded response to a connection (I/O thread). */
void tpu__conn_send(tpu__conn_t *conn, const tpu_envelope_response_t *resp);
/* Sends an error response for request `id` (I/O thread). */
void tpu__conn_send_error(tpu__conn_t *conn, uint64_t id, int code, const char *msg);
/* Links a call into its connection's in-flight list before handing it to compute. */
void tpu__conn_track(tpu__conn_t *conn, tpu__call_t *call);
void tpu__call_free(tpu__call_t *call);

/* Closes a connection (I/O thread); frees it unless calls are in flight. */
void tpu__conn_close(tpu__conn_t *conn, const char *why);
/* HTTP/2: moves what the session has to send into the connection's output, up to
 * max-unsent-bytes, and asks for a write after the current batch of events (sock.h); when the
 * session is over (or failed) marks the connection to close once its output is written. Never
 * closes the connection itself. */
void tpu__conn_flush(tpu__conn_t *conn);
/* HTTP/2: the client acknowledged our SETTINGS; the idle timeout replaces the handshake's. */
void tpu__conn_settled(tpu__conn_t *conn);

/* ---- grpc.c: gRPC over HTTP/2 on the native port (I/O thread) ---- */
/* Starts an HTTP/2 server session on a connection (its SETTINGS are queued). 0 or -1. */
int tpu__grpc_open(tpu__conn_t *conn);
/* Frees the session and its streams; accepts a connection without one. */
void tpu__grpc_free(tpu__conn_t *conn);
/* Feeds received bytes (all are consumed). -1: a protocol error; the session queued its
 * GOAWAY (unless the bytes were not HTTP/2 at all) and the connection must close after it. */
int tpu__grpc_recv(tpu__conn_t *conn, const uint8_t *data, size_t len);
/* Appends the session's outgoing frames to out until it holds `limit` bytes. 0: the session
 * goes on; 1: it is over (both sides done, or after GOAWAY); -1: an error. */
int tpu__grpc_output(tpu__conn_t *conn, struct evbuffer *out, size_t limit);
/* Answers the stream resp->id (from tpu__conn_send); dropped when the client reset it. */
void tpu__grpc_send(tpu__conn_t *conn, const tpu_envelope_response_t *resp);
/* Queues a graceful GOAWAY (NO_ERROR, streams already begun are still answered). */
void tpu__grpc_goaway(tpu__conn_t *conn, const char *why);
/* Whether the client has acknowledged our SETTINGS. */
int tpu__grpc_settled(const tpu__conn_t *conn);

/* ---- handlers.c ---- */
/* Serves one decoded request envelope (I/O thread); env is borrowed: nothing is kept from it
 * after the return (the payload is unpacked into new memory). */
void tpu__handle_request(tpu__conn_t *conn, Tpud__RequestEnvelope *env, uint64_t received_us);
/* Encodes and sends the response of a completed compute call (I/O thread). */
void tpu__handle_done(tpu__conn_t *conn, tpu__call_t *call);
/* The model serving (name, version); version "" = the highest ready one. NULL with msg on
 * NOT_FOUND. Defined in repository.c; returns a reference: tpu__model_release it when done
 * (any thread; cheap: a mutex-protected table read and an atomic increment). */
/* After tpu__server_find_model failed: 1 when (name, version) names nothing in the table (an
 * empty name, a version that is not a number, an unknown model, or a version the table does not
 * list), 0 when it exists but is not ready. Defined in repository.c. */
int tpu__model_absent(tpu_server_t *srv, const char *name, const char *version);
tpu__model_t *tpu__server_find_model(tpu_server_t *srv, const char *name, const char *version,
                                     char *msg, size_t msglen);
/* Counts an answered request (global and per model). */
void tpu__count(tpu__model_t *model, int code);
/*
 * The ModelInfer path shared by both protocols (I/O thread): finds the model (NOT_FOUND),
 * validates `q` against it (validate.c), checks draining and sizes, and hands it to the model's
 * batcher. Takes ownership of q in every case. Returns TPU_CODE_OK with *out a call whose
 * completion will come back to `io` as a TPU__MSG_DONE message, or (for a request of 0 rows,
 * which has nothing to compute) a call with rows == 0 that was not submitted: the caller answers
 * it at once and frees it. The call holds its answer's share of --max-buffered-bytes (sized as
 * JSON when `http`); past the budget the code is RESOURCE_EXHAUSTED (TPU__BUSY). Any other code:
 * no call, msg says why, *model_out is the model when
 * one was found (for counting) and then holds a reference: the caller tpu__model_release()s it
 * after counting. On TPU_CODE_OK *model_out is call->model (the call's reference, released
 * by tpu__call_free). The caller sets call->conn (and tracks it) or call->http after
 * the return: completions are processed only by this same thread, so none can be seen earlier.
 */
int tpu__infer_submit(tpu__io_t *io, const char *client, Inference__ModelInferRequest *q,
                      int http, uint64_t received_us, uint64_t timeout_us, tpu__call_t **out,
                      tpu__model_t **model_out, char *msg, size_t msglen);
/* Counts a finished infer call's end-to-end latency (received → answered), microseconds. */
void tpu__observe_request(tpu__call_t *call);
/* The name tpud reports for itself, and its version. */
#define TPUD_SERVER_NAME "tpud"
#define TPUD_SERVER_VERSION "0.1.0"

/* ---- http.c: the OIP v2 REST endpoint, metrics and debug pages on the I/O threads ---- */
/* Binds the HTTP listening socket (main thread, before the I/O threads serve it). */
int tpu__http_bind(tpu_server_t *srv, char *err, size_t errlen);
/* Starts this I/O thread's HTTP accept event on a dup of the listening socket (called on the
 * I/O thread's base before its loop runs). Returns 0 or -1. */
int tpu__http_io_start(tpu__io_t *io);
/* Stops accepting HTTP connections on this I/O thread (I/O thread, at stop). */
void tpu__http_io_stop(tpu__io_t *io);
/* Frees this I/O thread's HTTP connections and state (after the thread has exited). */
void tpu__http_io_free(tpu__io_t *io);
/* Answers a completed HTTP infer call and frees it (I/O thread). */
void tpu__http_done(tpu__io_t *io, tpu__call_t *call);

/* ---- audit_wire.c: the audit log in the server (audit.h WIRING) ---- */
/* Opens the log named by --audit-log (main thread, start-up); no-op when audit is off. */
int tpu__audit_start(tpu_server_t *srv, char *err, size_t errlen);
/* Writes a "stop" record (message why), flushes (up to timeout_ms) and closes, after waiting
 * out threads still inside tpu__audit_enter. Main thread, after compute stopped and before the
 * I/O threads stop (close may complete calls, which queues them to the I/O threads).
 * Idempotent. */
void tpu__audit_stop(tpu_server_t *srv, const char *why, unsigned timeout_ms);
/* SIGHUP (main thread): rotate the log and record it. */
void tpu__audit_sighup(tpu_server_t *srv);
/* An admin or lifecycle record (kind TPU_AUDIT_KIND_*; version 0 = none); any thread; no-op
 * when audit is off. */
void tpu__audit_event(tpu_server_t *srv, const char *kind, const char *model, uint64_t version,
                      const char *message);
/* The log for the duration of one use, or NULL when audit is off or closed; pair with
 * tpu__audit_leave when non-NULL. Any thread; two atomic operations. */
tpu_audit_t *tpu__audit_enter(tpu_server_t *srv);
void tpu__audit_leave(tpu_server_t *srv);
/* Whether a new audited request may proceed (I/O thread): 0 = answer UNAVAILABLE with
 * TPU__AUDIT_UNAVAILABLE (fail-closed and the log cannot be written). */
int tpu__audit_admit(tpu_server_t *srv);
#define TPU__AUDIT_UNAVAILABLE "audit log cannot be written"
/* Record of a request answered without compute (I/O thread; no digests, no hashing). */
void tpu__audit_reject(tpu_server_t *srv, const char *client, const char *request_id,
                       const char *model, const char *version, int code, const char *msg);
/* Compute side (batcher, MatMul pool, repository thread): finishes a call. With audit on it
 * digests input and output here, submits the record and completes the call from the writer's
 * callback (after fdatasync with --audit-fsync always); else tpu__call_complete at once. */
void tpu__call_finish(tpu__call_t *call);

/* ---- auth_wire.c: TLS contexts and the access policy in the server ---- */
/* Loads --tls-* and --tokens (main thread, start-up); logs the warning for a non-loopback
 * address without access control. */
int tpu__auth_start(tpu_server_t *srv, char *err, size_t errlen);
/* SIGHUP (main thread): reload certificates and tokens; a failure is logged and the old ones
 * stay. */
void tpu__auth_sighup(tpu_server_t *srv);
void tpu__auth_free(tpu_server_t *srv);
/* Whether access control is on (tokens or client certificates). */
int tpu__auth_enabled(tpu_server_t *srv);
/* Decides one request (any I/O thread; a read lock around the table): tpu_auth_decide with the
 * server's current policy. n_authz: how many authorization values the request carried. */
int tpu__auth_check(tpu_server_t *srv, const tpu_auth_peer_t *peer, const char *authz,
                    size_t authz_len, size_t n_authz, tpu_need_t need, char *who, size_t wholen,
                    char *msg, size_t msglen);

/* ---- compute.c: the MatMul pool ---- */
int tpu__mmpool_create(tpu_server_t *srv, unsigned threads, tpu__mmpool_t **out);
/* Queues a MatMul call. Returns 0, or -1 when the pool is stopping. */
int tpu__mmpool_submit(tpu__mmpool_t *pool, tpu__call_t *call);
/* Stops the pool: queued calls are computed (abort 0) or failed UNAVAILABLE (abort 1). */
void tpu__mmpool_stop(tpu__mmpool_t *pool, int abort);
void tpu__mmpool_free(tpu__mmpool_t *pool);

#endif /* TPU_SERVER_INT_H */
