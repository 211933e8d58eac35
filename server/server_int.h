/*
 * server_int.h - the server object, and the model table's entries, shared by the modules that
 * server.c wires together; not an API. Names shared across files carry `tpu__`.
 *
 * The life of a request through the modules, the threads and where each lock rule is written
 * are in server/README.md; the modules' order is server/LAYERS.
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

struct tpu__io;
typedef struct tpu__mmpool tpu__mmpool_t;

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
  int unwanted;       /* a status entry for a version unloaded by request: not one the server
                       * is configured to serve (--strict-readiness ignores it) */
  tpu_model_t *model; /* NULL when failed */
  tpu_batcher_t *batcher;
  tpu_model_stats_t stats;
  /* The model's inputs and outputs (tpu_model_input/output, in packed-row order) for
   * validation and metadata; shapes point into the model. */
  size_t nin, nout;
  tpu_tensor_spec_t in_spec[TPU_MODEL_MAX_IO], out_spec[TPU_MODEL_MAX_IO];
  size_t in_row, out_row; /* bytes of one packed row (tpu_model_in/out_row_bytes) */
  int batched;            /* tpu_model_batched */
  int capture;            /* its requests' tensors go to the payload store (audit/payload.h) */
  const char *platform;   /* metadata's platform: "tpud" (dense), "tpud_onnx", "tpud_xgboost" */
  tpu_vmodel_t vmodel;
  char label[200];    /* "model 'digits' version 1" */
  uint64_t memory_bytes; /* what the instance holds: model and batcher (tpu_model_load_opts_t) */
  /* Engine work of one call per bucket (from its plans at load), added to stats per batch. */
  size_t nbuckets;
  uint64_t bucket_macs[TPU_MODEL_MAX_BUCKETS], bucket_cycles[TPU_MODEL_MAX_BUCKETS],
      bucket_slots[TPU_MODEL_MAX_BUCKETS];
} tpu__model_t;

struct tpu_server {
  tpu_config_t cfg;
  tpu_engine_t *engine;
  const char *kernels; /* the engine's kernel set ("avx512", ...), for audit records */
  /* The model table is the repository's (repository.h): take a consistent view with
   * tpu__models_acquire/tpu__models_release, or route with tpu__server_find_model. */
  struct tpu__repo *repo;
  tpu__mmpool_t *pool;
  struct tpu__io *io;  /* the I/O threads (net/io.h) */
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

/* ---- models (repository.c): lookups for the dispatch layer ---- */
/* The model serving (name, version); version "" = the highest ready one. NULL with msg on
 * NOT_FOUND. Returns a reference: tpu__model_release it when done (any thread; cheap: a
 * mutex-protected table read and an atomic increment). */
tpu__model_t *tpu__server_find_model(tpu_server_t *srv, const char *name, const char *version,
                                     char *msg, size_t msglen);
/* After tpu__server_find_model failed: 1 when (name, version) names nothing in the table (an
 * empty name, a version that is not a number, an unknown model, or a version the table does not
 * list), 0 when it exists but is not ready. */
int tpu__model_absent(tpu_server_t *srv, const char *name, const char *version);
/* Model versions ready to serve now. */
size_t tpu__models_ready(tpu_server_t *srv);
/* Whether the models make the server ready (ServerReady on every protocol): at least one
 * version ready, and with `strict` (--strict-readiness) also no model the repository is trying
 * to serve without a ready version (one whose versions are LOADING or FAILED, none READY;
 * models unloaded by request or outside their version policy do not count). 1 = ready; 0 with
 * why (of whylen bytes) naming the first model that is not. Draining is the caller's. */
int tpu__models_server_ready(tpu_server_t *srv, int strict, char *why, size_t whylen);

#endif /* TPU_SERVER_INT_H */
