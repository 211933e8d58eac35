/*
 * http.c - HTTP/1.1 on --http-port: Open Inference Protocol v2 REST JSON, /metrics, /v2/debug.
 *
 * DESIGN
 * Threads: the main thread binds one listening socket (tpu__http_bind); every I/O thread accepts
 * on its own dup() of it with its own event, so a connection lives for good on the thread that
 * accepted it, like a native connection, and only that thread touches it. No lock here.
 *
 * Connections are our own (no evhttp), on the raw-socket layer both ports share (sock.h; this
 * file keeps the HTTP side of it): a raw non-blocking fd with a persistent read event that
 * stays enabled, a flat input buffer that http_parser.c cuts request heads from (bytes in, no
 * sockets there), and an output evbuffer written with one writev per flush. Reading never
 * toggles per request, so steady keep-alive traffic costs one read and one write per request and
 * no epoll_ctl; the write event is armed only while the kernel refuses bytes. Requests on one
 * connection are pipelined: each gets a slot (hslot_t) in a FIFO; a slot whose answer is ready
 * while an earlier one still computes keeps its bytes in its own evbuffer until it reaches the
 * head, so responses leave in request order. Completions that arrive together (one queue wake-up)
 * mark their connections dirty and are flushed by one deferred event after the batch, so
 * several answers for one connection share a write.
 *
 * Framing and limits: Content-Length bodies only (Transfer-Encoding: 411, or 400 together with
 * Content-Length); "Expect: 100-continue" is answered; head over --http-max-header-bytes: 431;
 * body over --http-max-body-bytes: 413 with a JSON {"error"} body, known from the head. After an
 * error that desynchronizes the stream the answer is flushed, the write side shut down, and the
 * input read and dropped for a short while (lingering close) so the client sees the status
 * instead of a reset. HTTP/1.0 (keep-alive only when asked), Connection: close, HEAD. Timeouts
 * (--http-timeout-s) are checked by a once-a-second sweep over the thread's connections: a
 * request head or body that stalls (read timeout), output the client does not take (write
 * timeout), an idle keep-alive connection. A client that closes with answers pending gets them
 * (half-close); one whose socket fails has its calls' cancel flags set, and the connection
 * lingers until their completions come back.
 *
 * Infer: the body becomes a ModelInferRequest through proto/tpu_oip_json (the same JSON dialect
 * tpuctl sends over the native protocol), other numeric datatypes are converted to the model's
 * FP32, and the request enters tpu__infer_submit (handlers.c), the native protocol's own path.
 * The completion comes back to this I/O thread (io.c → tpu__http_done), where the response is
 * formatted with tpu_oip_json_infer_response_format. Compute never runs here.
 *
 * TLS (--http-tls with --tls-cert): the same fd carries an SSL (tls.h) in accept state. The
 * handshake is driven from the read and write events without blocking (SSL_do_handshake until it
 * stops wanting bytes); the sweep closes connections whose handshake outlasts
 * --tls-handshake-timeout-s. Reads loop until OpenSSL holds no decrypted bytes (a record read
 * whole leaves nothing the fd's readiness would announce); writes go through SSL_write in chunks
 * of at most a record, retried with the same length after WANT_WRITE.
 *
 * Access control (auth.h): each request is decided in route() before it is served, from its
 * Authorization header and the connection's client certificate: 401 with WWW-Authenticate:
 * Bearer, or 403. Health is open with --auth-open-health (default), /metrics with
 * --auth-open-metrics, /v2/debug/... needs admin, everything else infer.
 *
 * Connections count in the open gauge from accept, where max-connections is enforced: over the
 * limit the client gets a canned 503 and the socket is closed. An accept that fails for want of
 * descriptors or memory stops this thread's accept event for a while (tpu__accept_failed, a
 * timer re-arms it): the connection waits in the backlog instead of the thread spinning on it.
 * Answers waiting for an earlier slot are held in counted buffers (sock.h): they are part of
 * what --max-buffered-bytes bounds, and an infer call reserves its JSON answer there first. Errors are {"error": "..."} with
 * 400 bad input, 404 unknown model or path, 405 wrong method, 411/413/431/505 framing, 503 not
 * ready / overloaded / shutting down, 504 deadline.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h> /* evhttp_uridecode only */
#include <openssl/err.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "http_parser.h"
#include "log.h"
#include "metrics.h"
#include "server_int.h"
#include "sock.h"
#include "tpu_oip_json.h"

typedef struct tpu__http_slot hslot_t;
typedef struct hconn hconn_t;

/* A response owed on a connection, in request order. */
struct tpu__http_slot {
  hslot_t *next;         /* the connection's FIFO, or the thread's free list */
  hconn_t *conn;
  tpu__call_t *call;     /* an infer in flight, or NULL */
  struct evbuffer *buf;  /* the answer while an earlier slot is unanswered (kept for reuse) */
  int ready;             /* answered */
  int head_only;         /* a HEAD request: headers only */
  int close;             /* close the connection after this answer */
  int minor;             /* HTTP/1.minor of the request */
};

/* One client connection (I/O thread only). */
struct hconn {
  tpu__sock_t sock;      /* socket, input and output (sock.h); first, for conn_of */
  struct tpu__http_io *h;
  hslot_t *head, *tail;  /* answers owed, oldest first */
  size_t nslots;
  size_t ncalls;         /* slots with a call in flight */
  int no_more;           /* parse no more requests (close requested, error, EOF, stopping) */
  int close_after;       /* close once every owed answer is written */
  int paused;            /* reading stopped for back-pressure */
  int continue_sent;     /* "100 Continue" sent for the request at ioff */
  int eof;               /* the client finished sending: close after the answers */
  int closed;            /* socket gone; freed when ncalls reaches 0 */
  char who[TPU_AUTH_IDENTITY_MAX]; /* the current request's identity (auth.h) */
};

/* Per I/O thread. */
struct tpu__http_io {
  tpu__io_t *io;
  int lfd;                 /* this thread's dup of the listening socket; -1 */
  struct event *accept_ev;
  struct event *retry_ev;  /* re-arms accept_ev after an accept error (tpu__accept_failed) */
  unsigned backoff_ms;
  int stopping;
  tpu__sockset_t socks;    /* the connections, their timeout sweep and deferred flushes */
  hslot_t *free_slots;
  tpu_http_limits_t lim;
  uint64_t timeout_us;
};

static void conn_flush(hconn_t *c);
static void conn_abort(hconn_t *c, const char *why);
static hconn_t *conn_of(tpu__sock_t *s) { return tpu_container_of(s, hconn_t, sock); }

/* Stops parsing: what the client still sends is read and dropped (sock.h discard). */
static void no_more(hconn_t *c) { c->no_more = c->sock.discard = 1; }

/* ---- slots ---- */

static hslot_t *slot_new(hconn_t *c) {
  struct tpu__http_io *h = c->h;
  hslot_t *s = h->free_slots;
  if (s) {
    h->free_slots = s->next;
  } else {
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
  }
  s->next = NULL;
  s->conn = c;
  s->call = NULL;
  s->ready = s->head_only = s->close = 0;
  s->minor = 1;
  if (c->tail)
    c->tail->next = s;
  else
    c->head = s;
  c->tail = s;
  c->nslots++;
  return s;
}

static void slot_release(struct tpu__http_io *h, hslot_t *s) {
  if (s->buf) evbuffer_drain(s->buf, evbuffer_get_length(s->buf));
  s->conn = NULL;
  s->call = NULL;
  s->next = h->free_slots;
  h->free_slots = s;
}

/* Moves the answered slots at the head of the FIFO to the output, in order. */
static void slots_emit(hconn_t *c) {
  while (c->head && c->head->ready) {
    hslot_t *s = c->head;
    c->head = s->next;
    if (!c->head) c->tail = NULL;
    c->nslots--;
    if (s->buf && evbuffer_get_length(s->buf)) evbuffer_add_buffer(c->sock.out, s->buf);
    if (s->close) {
      c->close_after = 1;
      no_more(c);
    }
    slot_release(c->h, s);
  }
}

/* ---- connection lifetime ---- */

static void conn_free(hconn_t *c) {
  tpu__sock_free(&c->sock);
  free(c);
}

/* Closes the socket; the connection is freed now or when its last call comes back. */
static void conn_close(hconn_t *c, const char *why) {
  if (c->closed) return;
  struct tpu__http_io *h = c->h;
  tpu_log_debug("http connection from %s closed: %s", c->sock.peer, why);
  c->closed = 1;
  tpu__sock_close(&c->sock);
  tpu_stats_dec(&tpu_stats.http_connections_open);
  /* Answers not yet sent go; slots of calls in flight stay until their completion. */
  hslot_t *s = c->head, *next;
  for (; s; s = next) {
    next = s->next;
    if (s->call)
      atomic_store(&s->call->cancel, 1);
    else
      slot_release(h, s);
  }
  c->head = c->tail = NULL;
  c->nslots = 0;
  if (c->ncalls == 0) conn_free(c);
}

static void conn_abort(hconn_t *c, const char *why) { conn_close(c, why); }

/* ---- replies ---- */

static void count_reply(int status, uint64_t received_us) {
  tpu_stats_inc(&tpu_stats.http_responses[tpu_http_status_index(status)], 1);
  tpu_hist_observe(&tpu_stats.http_request_us, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS,
                   tpu_now_us() - received_us);
}

static const char *reason_of(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 411: return "Length Required";
  case 413: return "Payload Too Large";
  case 417: return "Expectation Failed";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "Error";
  }
}

static char *put_u64(char *p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *p++ = tmp[--n];
  return p;
}

static char *put_str(char *p, const char *s) {
  size_t n = strlen(s);
  memcpy(p, s, n);
  return p + n;
}

/*
 * Answers slot `s`: status line, headers (`extra`: more header lines, each ending in CRLF, or
 * NULL), `len` bytes of body. The bytes go straight to the output when `s` heads the FIFO, else
 * to the slot's own buffer until it does.
 */
static void reply(hslot_t *s, int status, const char *ctype, const char *body, size_t len,
                  const char *extra, uint64_t t0) {
  hconn_t *c = s->conn;
  count_reply(status, t0);
  if (status >= 400 && status != 404 && status != 405 && status != 503 && status != 504 &&
      status != 501 && status != 400 && status != 401 && status != 403)
    s->close = 1; /* framing errors: the stream cannot be trusted */
  char hdr[512];
  char *p = hdr;
  p = put_str(p, s->minor ? "HTTP/1.1 " : "HTTP/1.0 ");
  p = put_u64(p, (uint64_t)status);
  *p++ = ' ';
  p = put_str(p, reason_of(status));
  p = put_str(p, "\r\nServer: tpud\r\nContent-Type: ");
  p = put_str(p, ctype ? ctype : "application/json");
  p = put_str(p, "\r\nContent-Length: ");
  p = put_u64(p, len);
  p = put_str(p, "\r\n");
  if (s->close || c->h->stopping)
    p = put_str(p, "Connection: close\r\n");
  else if (!s->minor)
    p = put_str(p, "Connection: keep-alive\r\n");
  if (extra && strlen(extra) < 128) p = put_str(p, extra);
  p = put_str(p, "\r\n");
  if (c->h->stopping) s->close = 1;
  struct evbuffer *dst;
  if (c->head == s) {
    dst = c->sock.out;
  } else {
    if (!s->buf) s->buf = tpu__sock_counted_buffer(); /* counts against max-buffered-bytes */
    dst = s->buf;
  }
  if (!dst || evbuffer_add(dst, hdr, (size_t)(p - hdr)) != 0 ||
      (!s->head_only && len && evbuffer_add(dst, body, len) != 0)) {
    s->close = 1; /* out of memory: this connection goes */
  }
  s->ready = 1;
  slots_emit(c);
}

static void send_owned(hslot_t *req, int status, char *text, size_t len, const char *content_type,
                       uint64_t received_us) {
  reply(req, status, content_type, text, text ? len : 0, NULL, received_us);
  free(text);
}

static void send_json_hdr(hslot_t *req, int status, json_t *body, const char *extra,
                          uint64_t received_us) {
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!text) {
    static const char oom[] = "{\"error\":\"out of memory\"}";
    reply(req, 500, NULL, oom, sizeof oom - 1, NULL, received_us);
    return;
  }
  reply(req, status, NULL, text, strlen(text), extra, received_us);
  free(text);
}

static void send_json(hslot_t *req, int status, json_t *body, uint64_t received_us) {
  send_json_hdr(req, status, body, NULL, received_us);
}

static void reply_error_hdr(hslot_t *req, int status, const char *msg, const char *extra,
                            uint64_t received_us) {
  tpu_log_debug("http: %d: %s", status, msg);
  send_json_hdr(req, status, json_pack("{s:s}", "error", msg), extra, received_us);
}

static void send_error(hslot_t *req, int status, const char *msg, uint64_t received_us) {
  reply_error_hdr(req, status, msg, NULL, received_us);
}

/* HTTP status of a gRPC code (and its message, to tell "too large" from "overloaded"). */
static int http_status_of(int code, const char *msg) {
  switch (code) {
  case TPU_CODE_OK: return 200;
  case TPU_CODE_INVALID_ARGUMENT:
  case TPU_CODE_OUT_OF_RANGE:
  case TPU_CODE_FAILED_PRECONDITION: return 400;
  case TPU_CODE_NOT_FOUND: return 404;
  case TPU_CODE_RESOURCE_EXHAUSTED:
    return strstr(msg, "queue full") || strncmp(msg, TPU__BUSY, strlen(TPU__BUSY)) == 0 ? 503
                                                                                       : 413;
  case TPU_CODE_UNAVAILABLE:
  case TPU_CODE_CANCELLED: return 503;
  case TPU_CODE_DEADLINE_EXCEEDED: return 504;
  case TPU_CODE_UNIMPLEMENTED: return 501;
  default: return 500;
  }
}

/* ---- cheap endpoints ---- */

static const char *state_name(int state) {
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

/* Whether a failed lookup means "no such model or version" (404) rather than "not ready". */
static int lookup_is_absent(tpu_server_t *srv, const char *name, const char *version,
                            const char *msg) {
  (void)msg;
  return tpu__model_absent(srv, name, version);
}

/* Looks the model up for a GET; on failure answers 404 (unknown) or 503 (no ready version).
 * Returns a reference (tpu__model_release it). */
static tpu__model_t *find_or_reply(tpu_server_t *srv, hslot_t *req,
                                   const char *name, const char *version, uint64_t t0) {
  char msg[256];
  tpu__model_t *m = tpu__server_find_model(srv, name, version, msg, sizeof msg);
  if (!m) send_error(req, lookup_is_absent(srv, name, version, msg) ? 404 : 503, msg, t0);
  return m;
}

static void do_model_metadata(tpu_server_t *srv, hslot_t *req, const char *name,
                              const char *version, uint64_t t0) {
  tpu__model_t *m = find_or_reply(srv, req, name, version, t0);
  if (!m) return;
  json_t *versions = json_array();
  tpu__models_t *t = tpu__models_acquire(srv);
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->models[i]->name, m->name) == 0 &&
        t->models[i]->state == TPUD__MODEL_STATE__MODEL_STATE_READY)
      json_array_append_new(versions, json_string(t->models[i]->version_str));
  tpu__models_release(t);
  send_json(req, 200,
            json_pack("{s:s,s:o,s:s,s:[o],s:[o]}", "name", m->name, "versions", versions,
                      "platform", "tpud", "inputs", tensor_meta(&m->in_spec), "outputs",
                      tensor_meta(&m->out_spec)),
            t0);
  tpu__model_release(m);
}

static void do_model_ready(tpu_server_t *srv, hslot_t *req, const char *name,
                           const char *version, uint64_t t0) {
  char msg[256];
  tpu__model_t *m = tpu__server_find_model(srv, name, version, msg, sizeof msg);
  if (!m && lookup_is_absent(srv, name, version, msg)) {
    send_error(req, 404, msg, t0);
    return;
  }
  int ready = m && !atomic_load(&srv->draining);
  json_t *body = json_pack("{s:s,s:b}", "name", name, "ready", ready);
  if (!ready) json_object_set_new(body, "error", json_string(m ? "server is shutting down" : msg));
  tpu__model_release(m);
  send_json(req, ready ? 200 : 503, body, t0);
}

static void do_repository_index(tpu_server_t *srv, hslot_t *req, uint64_t t0) {
  json_t *a = json_array();
  tpu__models_t *t = tpu__models_acquire(srv);
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    json_t *o = json_pack("{s:s,s:s,s:s}", "name", m->name, "version", m->version_str, "state",
                          state_name(m->state));
    if (m->reason[0]) json_object_set_new(o, "reason", json_string(m->reason));
    json_array_append_new(a, o);
  }
  tpu__models_release(t);
  send_json(req, 200, a, t0);
}

static void do_metrics(tpu_server_t *srv, hslot_t *req, uint64_t t0) {
  tpu_mbuf_t b = {0};
  tpu__metrics_render(srv, &b);
  if (b.oom) {
    tpu_mbuf_free(&b);
    send_error(req, 500, "out of memory", t0);
    return;
  }
  send_owned(req, 200, b.p, b.len, "text/plain; version=0.0.4; charset=utf-8", t0);
}

/* ---- debug pages ---- */

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

static void do_debug_config(tpu_server_t *srv, hslot_t *req, uint64_t t0) {
  json_t *cfg = tpu_config_to_json(&srv->cfg);
  if (cfg) {
    json_object_set_new(cfg, "bound_port", json_integer(srv->port));
    json_object_set_new(cfg, "bound_http_port", json_integer(srv->http_port));
  }
  send_json(req, 200, cfg, t0);
}

static void do_debug_models(tpu_server_t *srv, hslot_t *req, uint64_t t0) {
  json_t *a = json_array();
  tpu__models_t *t = tpu__models_acquire(srv);
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    json_t *o = json_pack("{s:s,s:s,s:s}", "name", m->name, "version", m->version_str, "state",
                          state_name(m->state));
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
    json_object_set_new(o, "input", tensor_meta(&m->in_spec));
    json_object_set_new(o, "output", tensor_meta(&m->out_spec));
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
  send_json(req, 200, a, t0);
}

static void do_debug_engine(tpu_server_t *srv, hslot_t *req, uint64_t t0) {
  tpu_engine_stats_t es;
  memset(&es, 0, sizeof es);
  tpu_engine_stats(srv->engine, &es);
  send_json(req, 200,
            json_pack("{s:s,s:I,s:{s:I,s:I},s:I,s:I,s:I,s:f,s:I,s:I}", "isa",
                      es.isa ? es.isa : "unknown", "threads", (json_int_t)es.threads, "systolic",
                      "rows", (json_int_t)es.systolic_rows, "cols", (json_int_t)es.systolic_cols,
                      "calls", (json_int_t)es.calls, "macs", (json_int_t)es.macs,
                      "systolic_cycles", (json_int_t)es.sim_cycles, "systolic_utilization",
                      tpu_engine_stats_utilization(&es), "io_threads",
                      (json_int_t)srv->cfg.io_threads, "matmul_threads",
                      (json_int_t)srv->cfg.threads),
            t0);
}

/* ---- infer ---- */

/* Little-endian element `i` of a raw tensor of `dt` as a double; `dt` one of the convertible. */
typedef struct {
  const char *name;
  size_t size;
} conv_t;
static const conv_t convertible[] = {{"FP64", 8},  {"INT8", 1},  {"INT16", 2}, {"INT32", 4},
                                     {"INT64", 8}, {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4},
                                     {"UINT64", 8}};

static double elem(const char *dt, const uint8_t *p) {
  if (strcmp(dt, "FP64") == 0) { double v; memcpy(&v, p, 8); return v; }
  if (strcmp(dt, "INT8") == 0) return (double)(int8_t)p[0];
  if (strcmp(dt, "UINT8") == 0) return (double)p[0];
  if (strcmp(dt, "INT16") == 0) { int16_t v; memcpy(&v, p, 2); return v; }
  if (strcmp(dt, "UINT16") == 0) { uint16_t v; memcpy(&v, p, 2); return v; }
  if (strcmp(dt, "INT32") == 0) { int32_t v; memcpy(&v, p, 4); return v; }
  if (strcmp(dt, "UINT32") == 0) { uint32_t v; memcpy(&v, p, 4); return v; }
  if (strcmp(dt, "INT64") == 0) { int64_t v; memcpy(&v, p, 8); return (double)v; }
  uint64_t v;
  memcpy(&v, p, 8);
  return (double)v;
}

/* The model takes FP32. JSON numbers sent as FP64 or an integer type are converted to FP32 here
 * (the JSON text already held them as decimal numbers, so nothing a client meant is lost beyond
 * FP32 rounding); other datatypes (BOOL, BYTES, FP16, BF16) are left for validation to refuse
 * with "expected FP32". An FP64 value beyond FP32's range is refused, not made infinite.
 * Returns 0, -1 when out of memory, or -2 with msg saying which value is out of range. */
static int convert_inputs(Inference__ModelInferRequest *q, char *msg, size_t msglen) {
  for (size_t i = 0; i < q->n_inputs && i < q->n_raw_input_contents; i++) {
    Inference__ModelInferRequest__InferInputTensor *t = q->inputs[i];
    if (!t->datatype) continue;
    const conv_t *c = NULL;
    for (size_t k = 0; k < sizeof convertible / sizeof convertible[0]; k++)
      if (strcmp(t->datatype, convertible[k].name) == 0) c = &convertible[k];
    if (!c) continue;
    ProtobufCBinaryData *raw = &q->raw_input_contents[i];
    size_t n = raw->len / c->size;
    if (n * c->size != raw->len) continue; /* validation will say what is wrong */
    float *f = malloc(n ? n * sizeof(float) : 1);
    char *dt = strdup("FP32");
    if (!f || !dt) {
      free(f);
      free(dt);
      return -1;
    }
    for (size_t e = 0; e < n; e++) {
      double v = elem(c->name, raw->data + e * c->size);
      f[e] = (float)v;
      if (isinf(f[e])) { /* the JSON parser let no NaN or infinity through: v was finite */
        snprintf(msg, msglen, "inputs[%zu].data[%zu]: %g is out of range for FP32, the model's "
                 "datatype (largest magnitude 3.4028235e+38)", i, e, v);
        free(f);
        free(dt);
        return -2;
      }
    }
    free(raw->data);
    raw->data = (uint8_t *)f;
    raw->len = n * sizeof(float);
    free(t->datatype);
    t->datatype = dt;
  }
  return 0;
}

static void send_infer_error(hslot_t *req, tpu__model_t *m, int code,
                             const char *msg, uint64_t t0) {
  tpu__count(m, code);
  send_error(req, http_status_of(code, msg), msg, t0);
}

/* Formats and sends the JSON answer of a computed (or empty) infer call. */
static void send_infer_ok(hslot_t *req, tpu__call_t *call) {
  tpu__model_t *m = call->model;
  Inference__ModelInferRequest *q = call->infer;
  int64_t shape[2] = {(int64_t)call->rows, m->out_shape[1]};
  Inference__ModelInferResponse__InferOutputTensor t =
      INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
  t.name = (char *)m->out_spec.name;
  t.datatype = "FP32";
  t.n_shape = 2;
  t.shape = shape;
  Inference__ModelInferResponse__InferOutputTensor *outs[] = {&t};
  ProtobufCBinaryData raw = {.len = call->rows * (size_t)m->out_shape[1] * sizeof(float),
                             .data = (uint8_t *)call->out};
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  r.model_name = m->name;
  r.model_version = m->version_str;
  r.id = q->id ? q->id : "";
  r.n_outputs = 1;
  r.outputs = outs;
  r.n_raw_output_contents = 1;
  r.raw_output_contents = &raw;
  char *text = NULL, err[256];
  if (tpu_oip_json_infer_response_format(&r, &text, err, sizeof err) != TPU_OIP_JSON_OK) {
    send_infer_error(req, m, TPU_CODE_INTERNAL, err, call->received_us);
    return;
  }
  tpu__count(m, TPU_CODE_OK);
  tpu__observe_request(call);
  send_owned(req, 200, text, strlen(text), NULL, call->received_us);
}

static void do_infer(tpu__io_t *io, hslot_t *req, const char *name, const char *version,
                     const char *body, size_t len, uint64_t t0) {
  tpu_server_t *srv = io->srv;
  if (!tpu__audit_admit(srv)) { /* fail-closed: the audit log cannot be written */
    tpu__audit_reject(srv, req->conn->who, NULL, name, version, TPU_CODE_UNAVAILABLE,
                      TPU__AUDIT_UNAVAILABLE);
    send_infer_error(req, NULL, TPU_CODE_UNAVAILABLE, TPU__AUDIT_UNAVAILABLE, t0);
    return;
  }
  if (!len) body = "";
  char err[512];
  tpu_oip_json_limits_t lim = {.max_depth = TPU_OIP_JSON_DEFAULT_MAX_DEPTH,
                               .max_bytes = srv->cfg.http_max_body_bytes};
  Inference__ModelInferRequest *q = NULL;
  tpu_oip_json_status_t jst =
      tpu_oip_json_infer_request_parse(body, len, name, version, &lim, &q, err, sizeof err);
  if (jst != TPU_OIP_JSON_OK) {
    char msg[640];
    snprintf(msg, sizeof msg, "%s: %s", tpu_oip_json_strerror(jst), err);
    tpu__audit_reject(srv, req->conn->who, NULL, name, version,
                      jst == TPU_OIP_JSON_NOMEM ? TPU_CODE_RESOURCE_EXHAUSTED
                                                : TPU_CODE_INVALID_ARGUMENT, msg);
    tpu__model_t *m = tpu__server_find_model(srv, name, version, err, sizeof err);
    tpu__count(m, jst == TPU_OIP_JSON_NOMEM ? TPU_CODE_RESOURCE_EXHAUSTED
                                            : TPU_CODE_INVALID_ARGUMENT);
    tpu__model_release(m);
    send_error(req, jst == TPU_OIP_JSON_TOO_LARGE ? 413 : jst == TPU_OIP_JSON_NOMEM ? 500 : 400,
               msg, t0);
    return;
  }
  int crc = convert_inputs(q, err, sizeof err);
  if (crc == -2) {
    tpu__audit_reject(srv, req->conn->who, q->id, name, version, TPU_CODE_INVALID_ARGUMENT, err);
    protobuf_c_message_free_unpacked(&q->base, NULL);
    char nf[256];
    tpu__model_t *m = tpu__server_find_model(srv, name, version, nf, sizeof nf);
    send_infer_error(req, m, TPU_CODE_INVALID_ARGUMENT, err, t0);
    tpu__model_release(m);
    return;
  }
  if (crc != 0) {
    protobuf_c_message_free_unpacked(&q->base, NULL);
    send_infer_error(req, NULL, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory", t0);
    return;
  }
  tpu__call_t *call;
  tpu__model_t *m;
  int code = tpu__infer_submit(io, req->conn->who, q, 1, t0, 0, &call, &m, err, sizeof err);
  if (code != TPU_CODE_OK) {
    send_infer_error(req, m, code, err, t0);
    tpu__model_release(m);
    return;
  }
  if (call->rows == 0) {
    send_infer_ok(req, call);
    tpu__call_free(call);
    return;
  }
  call->http = req;
  req->call = call;
  req->conn->ncalls++;
  atomic_fetch_add(&srv->inflight, 1); /* io.c subtracts it when the DONE message is handled */
}


/* ---- routing ---- */

/* Splits the path into at most `max` segments (in place, percent-decoded). Returns the count,
 * -1 for too many segments or an empty one, -2 for a segment that is not UTF-8 or decodes to a
 * NUL byte (names are C strings: "digits%00evil" must not be read as "digits"). */
static int split_path(char *path, char **seg, int max) {
  int n = 0;
  char *p = path;
  if (*p == '/') p++;
  if (!*p) return 0;
  for (;;) {
    if (n == max) return -1;
    char *slash = strchr(p, '/');
    if (slash) *slash = 0;
    if (!*p) return -1;
    if (strchr(p, '%')) {
      size_t dlen = 0;
      char *dec = evhttp_uridecode(p, 0, &dlen);
      if (!dec) return -1;
      int nul = strlen(dec) != dlen;
      if (!nul && dlen <= strlen(p)) strcpy(p, dec);
      free(dec);
      if (nul) return -2;
    }
    if (!tpu_utf8_valid((const uint8_t *)p, strlen(p))) return -2;
    seg[n++] = p;
    if (!slash) break;
    p = slash + 1;
    if (!*p) break; /* a trailing slash is allowed */
  }
  return n;
}

static void method_not_allowed(hslot_t *req, const char *allow, uint64_t t0) {
  char msg[128], hdr[64];
  snprintf(msg, sizeof msg, "method not allowed here; use %s", allow);
  snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
  reply_error_hdr(req, 405, msg, hdr, t0);
}

/* Serves one complete request (its body is body[0..blen)) on slot `req`. */
static void route(tpu__io_t *io, hslot_t *req, const tpu_http_request_t *hr, const char *body,
                  size_t blen, uint64_t t0) {
  tpu_server_t *srv = io->srv;
  char uri[1040];
  size_t ulen = hr->target_len < 1024 ? hr->target_len : 1024;
  memcpy(uri, hr->target, ulen);
  uri[ulen] = 0;
  char path[1024];
  size_t plen = strcspn(uri, "?#");
  if (plen >= sizeof path) {
    send_error(req, 404, "path too long", t0);
    return;
  }
  memcpy(path, uri, plen);
  path[plen] = 0;
  char *seg[8];
  int n = split_path(path, seg, 8);
  if (n == -2) {
    send_error(req, 400, "the path holds bytes that are not UTF-8, or a percent-encoded NUL "
               "byte: model names and versions are UTF-8 text", t0);
    return;
  }
  int get = hr->method == TPU_HTTP_GET || hr->method == TPU_HTTP_HEAD;
  int post = hr->method == TPU_HTTP_POST;
  if (hr->method == TPU_HTTP_OTHER) {
    send_error(req, 501, "method not implemented; use GET, HEAD or POST", t0);
    return;
  }
  {
    /* Access control: what the path needs, then who asks (auth.h). */
    tpu_need_t need = TPU_NEED_INFER;
    int infer_path = n >= 4 && strcmp(seg[n - 1], "infer") == 0;
    if (n == 1 && strcmp(seg[0], "metrics") == 0)
      need = srv->cfg.auth_open_metrics ? TPU_NEED_OPEN : TPU_NEED_INFER;
    else if (n == 3 && strcmp(seg[0], "v2") == 0 && strcmp(seg[1], "health") == 0)
      need = srv->cfg.auth_open_health ? TPU_NEED_OPEN : TPU_NEED_INFER;
    else if (n >= 2 && strcmp(seg[0], "v2") == 0 && strcmp(seg[1], "debug") == 0)
      need = TPU_NEED_ADMIN;
    hconn_t *c = req->conn;
    tpu_auth_peer_t peer = {.peer = c->sock.peer,
                            .cert_cn = c->sock.cert_cn[0] ? c->sock.cert_cn : NULL,
                            .cert_subject = c->sock.cert_subject};
    char amsg[256];
    int acode = tpu__auth_check(srv, &peer, hr->authorization, hr->authorization_len,
                                hr->authorization_count, need, c->who, sizeof c->who, amsg,
                                sizeof amsg);
    if (acode != TPU_CODE_OK) {
      if (infer_path) {
        tpu__audit_reject(srv, c->who, NULL, seg[2], n >= 6 ? seg[4] : NULL, acode, amsg);
        tpu__count(NULL, acode);
      }
      if (acode == TPU_CODE_UNAUTHENTICATED)
        reply_error_hdr(req, 401, amsg,
                        hr->authorization
                            ? "WWW-Authenticate: Bearer realm=\"tpud\", error=\"invalid_token\"\r\n"
                            : "WWW-Authenticate: Bearer realm=\"tpud\"\r\n",
                        t0);
      else
        send_error(req, acode == TPU_CODE_INVALID_ARGUMENT ? 400 : 403, amsg, t0);
      return;
    }
  }

  if (n >= 1 && strcmp(seg[0], "metrics") == 0 && n == 1) {
    if (!get) {
    method_not_allowed(req, "GET", t0);
    return;
  }
    {
    do_metrics(srv, req, t0);
    return;
  }
  }
  if (n < 1 || strcmp(seg[0], "v2") != 0) goto not_found;
  if (n == 1) {
    if (!get) {
    method_not_allowed(req, "GET", t0);
    return;
  }
    {
    send_json(req, 200,
                     json_pack("{s:s,s:s,s:[s,s,s]}", "name", TPUD_SERVER_NAME, "version",
                               TPUD_SERVER_VERSION, "extensions", "tpud_matmul",
                               "tpud_repository_index", "tpud_debug"),
                     t0);
    return;
  }
  }
  if (strcmp(seg[1], "health") == 0 && n == 3) {
    if (!get) {
    method_not_allowed(req, "GET", t0);
    return;
  }
    if (strcmp(seg[2], "live") == 0) {
    send_json(req, 200, json_pack("{s:b}", "live", 1), t0);
    return;
  }
    if (strcmp(seg[2], "ready") == 0) {
      int ready = !atomic_load(&srv->draining) && tpu_server_ready_models(srv) > 0;
      json_t *b = json_pack("{s:b}", "ready", ready);
      if (!ready)
        json_object_set_new(b, "error", json_string(atomic_load(&srv->draining)
                                                        ? "server is shutting down"
                                                        : "no model is ready"));
      {
    send_json(req, ready ? 200 : 503, b, t0);
    return;
  }
    }
    goto not_found;
  }
  if (strcmp(seg[1], "repository") == 0 && n == 3 && strcmp(seg[2], "index") == 0) {
    if (!get && !post) {
    method_not_allowed(req, "GET, POST", t0);
    return;
  }
    {
    do_repository_index(srv, req, t0);
    return;
  }
  }
  if (strcmp(seg[1], "debug") == 0 && n == 3) {
    if (!get) {
    method_not_allowed(req, "GET", t0);
    return;
  }
    if (strcmp(seg[2], "config") == 0) {
    do_debug_config(srv, req, t0);
    return;
  }
    if (strcmp(seg[2], "models") == 0) {
    do_debug_models(srv, req, t0);
    return;
  }
    if (strcmp(seg[2], "engine") == 0) {
    do_debug_engine(srv, req, t0);
    return;
  }
    goto not_found;
  }
  if (strcmp(seg[1], "models") == 0 && n >= 3) {
    /* /v2/models/{m}[/versions/{v}][/ready|/infer] */
    const char *name = seg[2], *version = NULL;
    int i = 3;
    if (n >= 5 && strcmp(seg[3], "versions") == 0) {
      version = seg[4];
      i = 5;
    }
    if (i == n) {
      if (!get) {
    method_not_allowed(req, "GET", t0);
    return;
  }
      {
    do_model_metadata(srv, req, name, version, t0);
    return;
  }
    }
    if (i + 1 == n && strcmp(seg[i], "ready") == 0) {
      if (!get) {
    method_not_allowed(req, "GET", t0);
    return;
  }
      {
    do_model_ready(srv, req, name, version, t0);
    return;
  }
    }
    if (i + 1 == n && strcmp(seg[i], "infer") == 0) {
      if (!post) {
    method_not_allowed(req, "POST", t0);
    return;
  }
      {
    do_infer(io, req, name, version, body, blen, t0);
    return;
  }
    }
  }
not_found:;
  char msg[1200];
  snprintf(msg, sizeof msg,
           "no endpoint %.1000s (see /v2, /v2/health/{live,ready}, /v2/models/{m}[/versions/{v}]"
           "[/ready|/infer], /metrics, /v2/debug/{config,models,engine})",
           uri);
  send_error(req, 404, msg, t0);
}


/* ---- the connection I/O (sock.h does the socket, TLS, timeouts and lingering close) ---- */

static void route(tpu__io_t *io, hslot_t *req, const tpu_http_request_t *hr, const char *body,
                  size_t blen, uint64_t t0);

static int over_limits(hconn_t *c) {
  const tpu_config_t *cfg = &c->h->io->srv->cfg;
  return c->nslots >= cfg->max_inflight_per_conn ||
         tpu__sock_unsent(&c->sock) > cfg->max_unsent_bytes;
}

/* Cuts and serves every complete request in the input, in order. Returns 0, or -1 when it
 * closed the connection (which may be freed then: the caller must not touch it). */
static int conn_process(hconn_t *c) {
  tpu__io_t *io = c->h->io;
  tpu__sock_t *k = &c->sock;
  while (!c->no_more && !c->closed) {
    if (over_limits(c)) {
      if (!c->paused) {
        c->paused = 1;
        tpu__sock_pause(k);
      }
      break;
    }
    size_t avail = k->ilen - k->ioff;
    if (!avail) break;
    const char *p = k->ibuf + k->ioff;
    tpu_http_request_t hr;
    tpu_http_parse_result_t pr = tpu_http_parse_request(p, avail, &c->h->lim, &hr);
    if (pr == TPU_HTTP_PARSE_INCOMPLETE) break;
    uint64_t t0 = tpu_now_us();
    if (pr == TPU_HTTP_PARSE_ERROR) {
      hslot_t *s = slot_new(c);
      no_more(c);
      if (!s) {
        conn_abort(c, "out of memory");
        return -1;
      }
      s->close = 1;
      char msg[160];
      if (hr.status == 413)
        snprintf(msg, sizeof msg, "request body of %llu bytes exceeds the limit of %llu bytes",
                 (unsigned long long)hr.content_length,
                 (unsigned long long)c->h->lim.max_body_bytes);
      send_error(s, hr.status, hr.status == 413 ? msg : hr.error, t0);
      break;
    }
    uint64_t need = hr.head_len + hr.content_length;
    if (avail < need) {
      if (tpu__sock_reserve(k, (size_t)need) != 0) {
        conn_abort(c, "out of memory");
        return -1;
      }
      if (hr.expect_continue && !c->continue_sent && !c->head) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        evbuffer_add(k->out, cont, sizeof cont - 1);
        c->continue_sent = 1;
      }
      break;
    }
    hslot_t *s = slot_new(c);
    if (!s) {
      conn_abort(c, "out of memory");
      return -1;
    }
    s->minor = hr.minor;
    s->head_only = hr.method == TPU_HTTP_HEAD;
    if (!hr.keep_alive) {
      s->close = 1;
      no_more(c);
    }
    tpu__sock_consume(k, (size_t)need); /* p stays valid: nothing moves until the next read */
    c->continue_sent = 0;
    route(io, s, &hr, p + hr.head_len, (size_t)hr.content_length, t0);
  }
  return 0;
}

/* Writes what is ready (one writev); then closes, lingers or resumes reading as due. */
static void conn_flush(hconn_t *c) {
  if (c->closed) return;
  if (tpu__sock_write(&c->sock) != 0) {
    conn_abort(c, strerror(errno));
    return;
  }
  if (tpu__sock_unsent(&c->sock)) return;
  if (c->close_after && c->nslots == 0 && c->eof) {
    conn_close(c, "end of stream");
    return;
  }
  if (c->close_after && c->nslots == 0 && !c->sock.lingering) {
    /* Lingering close: the client sees our answer, not a reset, even with input in flight. */
    tpu__sock_linger(&c->sock);
    c->paused = 0;
    return;
  }
  if (c->paused && !c->no_more && !over_limits(c)) {
    c->paused = 0;
    tpu__sock_resume(&c->sock);
    if (conn_process(c) != 0) return;
    if (!c->closed && tpu__sock_unsent(&c->sock)) conn_flush(c);
  }
}

static void on_input(tpu__sock_t *s) {
  hconn_t *c = conn_of(s);
  if (conn_process(c) == 0) conn_flush(c);
}

/* The client is done sending: answer what it asked, then close. */
static void on_eof(tpu__sock_t *s) {
  hconn_t *c = conn_of(s);
  if (!c->no_more && s->ilen > s->ioff) tpu_log_debug("http: connection closed inside a request");
  no_more(c);
  c->close_after = 1;
  c->eof = 1;
  tpu__sock_pause(s);
  if (c->nslots == 0 && !tpu__sock_unsent(s)) {
    conn_close(c, "end of stream");
    return;
  }
  conn_flush(c);
}

static void on_flush(tpu__sock_t *s) { conn_flush(conn_of(s)); }

static void on_close(tpu__sock_t *s, const char *why) { conn_abort(conn_of(s), why); }

/* The sweep's verdict: read, write and idle timeouts (--http-timeout-s), and the handshake's. */
static void on_timeout(tpu__sock_t *s, uint64_t now) {
  hconn_t *c = conn_of(s);
  if (s->handshaking)
    conn_close(c, "TLS handshake timeout");
  else if (tpu__sock_unsent(s))
    conn_abort(c, "write timeout");
  else if (c->ncalls == 0 && c->nslots == 0)
    conn_close(c, s->ilen > s->ioff ? "read timeout" : "idle timeout");
}

static const tpu__sock_ops_t http_sock_ops = {
    .input = on_input, .eof = on_eof, .flush = on_flush, .close = on_close,
    .timeout = on_timeout};

static void conn_open(struct tpu__http_io *h, int fd, const struct sockaddr_storage *ss) {
  char ip[INET6_ADDRSTRLEN] = "?", peer[64];
  unsigned port = 0;
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    port = ntohs(a->sin_port);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    port = ntohs(a->sin6_port);
  }
  snprintf(peer, sizeof peer, "%s:%u", ip, port);
  SSL *ssl = NULL;
  hconn_t *c = calloc(1, sizeof *c);
  if (!c) goto fail;
  c->h = h;
  if (h->io->srv->http_tls && !(ssl = tpu_tls_new_ssl(h->io->srv->tls, TPU_TLS_HTTP))) goto fail;
  if (tpu__sock_open(&h->socks, &c->sock, fd, ssl, peer) != 0) goto fail; /* owns ssl */
  c->sock.timeout_us = h->timeout_us;
  tpu_stats_inc(&tpu_stats.http_connections_open, 1);
  return;
fail:
  tpu_log_warn("http connection dropped: out of memory");
  free(c);
  close(fd);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg) {
  struct tpu__http_io *h = arg;
  tpu_server_t *srv = h->io->srv;
  for (int i = 0; i < 64; i++) {
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof ss;
    memset(&ss, 0, sizeof ss);
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sslen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return; /* none left, or another thread's */
      if (errno == EINTR || errno == ECONNABORTED) continue;
      /* Out of descriptors or memory: the connection stays in the backlog and the socket
       * readable, so stop polling it for a while instead of spinning on the error. */
      unsigned ms = tpu__accept_failed(TPU_ACCEPT_HTTP, errno, &h->backoff_ms);
      struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
      event_del(h->accept_ev);
      evtimer_add(h->retry_ev, &tv);
      return;
    }
    h->backoff_ms = 0;
    tpu_stats_inc(&tpu_stats.http_connections_accepted, 1);
    uint64_t open = tpu_stats_get(&tpu_stats.connections_open) +
                    tpu_stats_get(&tpu_stats.http_connections_open);
    if (open >= srv->cfg.max_connections || h->stopping || atomic_load(&srv->draining)) {
      static const char busy[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Content-Length: 54\r\nConnection: close\r\n\r\n"
          "{\"error\":\"max-connections reached; try again later\"}\n";
      static const char stop[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Content-Length: 39\r\nConnection: close\r\n\r\n"
          "{\"error\":\"server is shutting down\"}\n\n\n";
      const char *msg = open >= srv->cfg.max_connections ? busy : stop;
      if (!srv->http_tls) { /* best effort; a TLS client would read it as garbage */
        ssize_t w = write(fd, msg, strlen(msg));
        (void)w;
      }
      tpu_stats_inc(&tpu_stats.http_connections_rejected, 1);
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn_open(h, fd, &ss);
  }
}

static void on_accept_retry(evutil_socket_t fd, short what, void *arg) {
  struct tpu__http_io *h = arg;
  if (!h->stopping) event_add(h->accept_ev, NULL);
}

void tpu__http_done(tpu__io_t *io, tpu__call_t *call) {
  hslot_t *req = call->http;
  hconn_t *c = req->conn;
  call->http = NULL;
  req->call = NULL;
  c->ncalls--;
  if (c->closed) {
    tpu__count(call->model, call->code);
    slot_release(c->h, req);
    tpu__call_free(call);
    if (c->ncalls == 0) conn_free(c);
    return;
  }
  if (call->code != TPU_CODE_OK)
    send_infer_error(req, call->model, call->code, call->msg_text, call->received_us);
  else
    send_infer_ok(req, call);
  tpu__call_free(call);
  tpu__sock_flush_later(&c->sock);
}

/* ---- lifecycle ---- */

int tpu__http_bind(tpu_server_t *srv, char *err, size_t errlen) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t sslen;
  struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, srv->cfg.listen, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)srv->cfg.http_port);
    sslen = sizeof *s4;
  } else if (inet_pton(AF_INET6, srv->cfg.listen, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)srv->cfg.http_port);
    sslen = sizeof *s6;
  } else {
    snprintf(err, errlen, "--listen %s: not a numeric IPv4 or IPv6 address", srv->cfg.listen);
    return -1;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr *)&ss, sslen) != 0 || listen(fd, 1024) != 0) {
    snprintf(err, errlen, "cannot listen on %s port %u (http): %s", srv->cfg.listen,
             srv->cfg.http_port, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  struct sockaddr_storage bound;
  socklen_t blen = sizeof bound;
  getsockname(fd, (struct sockaddr *)&bound, &blen);
  srv->http_port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                     : ((struct sockaddr_in *)&bound)->sin_port);
  srv->http_fd = fd;
  return 0;
}

int tpu__http_io_start(tpu__io_t *io) {
  tpu_server_t *srv = io->srv;
  struct tpu__http_io *h = calloc(1, sizeof *h);
  if (!h) return -1;
  h->io = io;
  h->lfd = -1;
  io->http = h;
  h->lim.max_head_bytes = srv->cfg.http_max_header_bytes;
  h->lim.max_body_bytes = srv->cfg.http_max_body_bytes;
  h->timeout_us = (uint64_t)srv->cfg.http_timeout_s * 1000000u; /* 0: none */
  if (tpu__sockset_init(&h->socks, io->base, &http_sock_ops, "http",
                        srv->cfg.tls_handshake_timeout_s) != 0)
    return -1;
  h->lfd = fcntl(srv->http_fd, F_DUPFD_CLOEXEC, 0);
  if (h->lfd < 0) return -1;
  h->accept_ev = event_new(io->base, h->lfd, EV_READ | EV_PERSIST, on_accept, h);
  h->retry_ev = evtimer_new(io->base, on_accept_retry, h);
  if (!h->accept_ev || !h->retry_ev || event_add(h->accept_ev, NULL) != 0) return -1;
  return 0;
}

void tpu__http_io_stop(tpu__io_t *io) {
  struct tpu__http_io *h = io->http;
  if (!h || h->stopping) return;
  h->stopping = 1;
  if (h->accept_ev) event_del(h->accept_ev);
  if (h->retry_ev) event_del(h->retry_ev);
  if (h->lfd >= 0) close(h->lfd);
  h->lfd = -1;
  /* Idle connections close now; the others after their answers are written. */
  tpu__sock_t *next;
  for (tpu__sock_t *k = h->socks.socks; k; k = next) {
    next = k->next;
    hconn_t *c = conn_of(k);
    no_more(c);
    c->close_after = 1;
    c->eof = 1;
    if (c->nslots == 0 && !tpu__sock_unsent(k)) conn_close(c, "server stopping");
  }
}

void tpu__http_io_free(tpu__io_t *io) {
  struct tpu__http_io *h = io->http;
  if (!h) return;
  while (h->socks.socks) conn_close(conn_of(h->socks.socks), "server stopped");
  /* Connections still waiting for calls that never came back (hard stop) are leaked to their
   * calls' owners no longer: nothing references them after the I/O thread is gone. */
  if (h->accept_ev) event_free(h->accept_ev);
  if (h->retry_ev) event_free(h->retry_ev);
  tpu__sockset_free(&h->socks);
  if (h->lfd >= 0) close(h->lfd);
  while (h->free_slots) {
    hslot_t *s = h->free_slots;
    h->free_slots = s->next;
    tpu__sock_free_buffer(s->buf);
    free(s);
  }
  free(h);
  io->http = NULL;
}
