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
 * Framing and limits: Content-Length or chunked bodies (Transfer-Encoding with Content-Length:
 * 400; a coding other than chunked: 501); "Expect: 100-continue" is answered; head over
 * --http-max-header-bytes: 431; body over --http-max-body-bytes: 413 with a JSON {"error"} body,
 * known from the head (Content-Length) or from the chunk sizes as they arrive. A chunked body
 * is decoded in place in the input buffer as it arrives (http_parser.c's decoder writes the
 * data over the framing it has read, and the unread bytes move down after it), so the buffer
 * holds about the decoded body and one read, never the framing of a body of many small chunks.
 * Content-Encoding gzip or deflate is decoded once the body is complete (http_body.c) into a
 * buffer capped at --http-max-body-bytes (the limit applies to the decoded size: a bomb gets
 * 413 once the limit is produced); another coding is a 415; both answers keep the connection,
 * whose framing is intact. Answers of 4 KiB to 4 MiB with status 200 are gzipped (level 1)
 * when the request's Accept-Encoding takes gzip. The decoded body lives until route()
 * returns: decoders copy what they keep (the OIP JSON parser owns its tensors). After an error
 * that desynchronizes the stream the answer is flushed, the write side shut down, and the
 * input read and dropped for a short while (lingering close) so the client sees the status
 * instead of a reset. HTTP/1.0 (keep-alive only when asked), Connection: close, HEAD. Timeouts
 * (--http-timeout-s) are checked by a once-a-second sweep over the thread's connections: a
 * request head or body that stalls (read timeout), output the client does not take (write
 * timeout), an idle keep-alive connection. A client that closes with answers pending gets them
 * (half-close); one whose socket fails has its calls' cancel flags set, and the connection
 * lingers until their completions come back.
 *
 * Requests: route.c maps the path to an endpoint. A method's request (health, metadata, ready,
 * the repository index, infer) goes to tpu__dispatch (dispatch/call.h), every protocol's one
 * path, with a decoder that makes the OIP message from the path or the JSON body (infer: through
 * proto/tpu_oip_json, the dialect tpuctl sends too; dispatch converts numeric datatypes to the
 * model's). Answers come back through the connection's origin (origin_respond), which formats the
 * answer message as OIP REST JSON and maps its status with proto/tpu_status.h. /metrics and
 * /v2/debug are this port's own pages (metrics.c, pages.c), authorized by dispatch too. Compute
 * never runs here.
 *
 * TLS (--http-tls with --tls-cert): the same fd carries an SSL (tls.h) in accept state. The
 * handshake is driven from the read and write events without blocking (SSL_do_handshake until it
 * stops wanting bytes); the sweep closes connections whose handshake outlasts
 * --tls-handshake-timeout-s. Reads loop until OpenSSL holds no decrypted bytes (a record read
 * whole leaves nothing the fd's readiness would announce); writes go through SSL_write in chunks
 * of at most a record, retried with the same length after WANT_WRITE.
 *
 * Access control (auth.h): each request is decided by dispatch before it is served, from its
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
 * 400 bad input, 404 unknown model or path, 405 wrong method, 413/431/501/505 framing, 415
 * content coding, 503 not ready / overloaded / shutting down, 504 deadline.
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

#include "addr.h"
#include "call.h"
#include "clock.h"
#include "front.h"
#include "http_body.h"
#include "http_parser.h"
#include "io.h"
#include "log.h"
#include "metrics.h"
#include "pages.h"
#include "route.h"
#include "server_int.h"
#include "sock.h"
#include "tpu_oip_json.h"

/* Answers from this size up are gzipped for clients whose Accept-Encoding takes it; above the
 * maximum they are sent as they are (deflate at level 1 runs ~100 MB/s on the I/O thread). */
#define TPU_HTTP_GZIP_MIN_BYTES 4096
#define TPU_HTTP_GZIP_MAX_BYTES (4u << 20)

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
  int had_authz;         /* the request carried an Authorization header (401's header) */
  int gzip_ok;           /* the request's Accept-Encoding takes gzip */
  int body_read;         /* its body was read whole: a refusal of its coding (413, 415, 400)
                          * leaves the stream in step, the connection stays */
  int v1;                /* a KServe V1 / TF Serving REST request (/v1/models/...) */
  int v1_columnar;       /* its predict body was columnar ("inputs"), not rows ("instances") */
  int binary;            /* the request sent Inference-Header-Content-Length (binary tensors) */
  uint64_t json_len;     /* its value: the JSON part of the (decoded) body, bytes */
};

/* One client connection (I/O thread only). */
struct hconn {
  tpu__sock_t sock;      /* socket, input and output (sock.h); first, for conn_of */
  tpu__origin_t origin;  /* what dispatch sees (call.h): its answers come back as JSON */
  struct tpu__http_io *h;
  hslot_t *head, *tail;  /* answers owed, oldest first */
  size_t nslots;
  size_t ncalls;         /* slots with a call in flight */
  int no_more;           /* parse no more requests (close requested, error, EOF, stopping) */
  int close_after;       /* close once every owed answer is written */
  int paused;            /* reading stopped for back-pressure */
  int continue_sent;     /* "100 Continue" sent for the request at ioff */
  int chunk_on;          /* a chunked body of the request at ioff is being decoded */
  tpu_http_chunked_t chunk; /* its decoder */
  size_t chunk_len;      /* its data decoded so far, right after the head in the input */
  int eof;               /* the client finished sending: close after the answers */
};

/* Per I/O thread: the HTTP port's service (net/io.h). */
struct tpu__http_io {
  tpu__service_t svc;
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
  s->ready = s->head_only = s->close = s->body_read = s->gzip_ok = s->binary = 0;
  s->v1 = s->v1_columnar = 0;
  s->json_len = 0;
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
  if (c->origin.closed) return;
  struct tpu__http_io *h = c->h;
  tpu_log_debug("http connection from %s closed: %s", c->sock.peer, why);
  c->origin.closed = 1;
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
  case 415: return "Unsupported Media Type";
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
      status != 501 && status != 400 && status != 401 && status != 403 && !s->body_read)
    s->close = 1; /* framing errors: the stream cannot be trusted */
  /* Large answers go gzip to clients that take it (not to HEAD: its length would need the
   * compression anyway). The range bounds the I/O thread's time in deflate to a few ms. */
  char *zbody = NULL;
  size_t zlen = 0;
  if (s->gzip_ok && !s->head_only && status == 200 && len >= TPU_HTTP_GZIP_MIN_BYTES &&
      len <= TPU_HTTP_GZIP_MAX_BYTES && tpu_http_body_gzip(body, len, &zbody, &zlen) == 0) {
    body = zbody;
    len = zlen;
  }
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
  if (zbody) p = put_str(p, "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n");
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
  free(zbody);
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

/* ---- the origin: dispatch's answers as OIP REST JSON ---- */

static json_t *shape_json(const int64_t *shape, size_t rank) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < rank; i++) json_array_append_new(a, json_integer(shape[i]));
  return a;
}

static json_t *strings_json(char **v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_string(v[i]));
  return a;
}

static json_t *tensors_json(Inference__ModelMetadataResponse__TensorMetadata **t, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    json_array_append_new(a, json_pack("{s:s,s:s,s:o}", "name", t[i]->name, "datatype",
                                       t[i]->datatype, "shape",
                                       shape_json(t[i]->shape, t[i]->n_shape)));
  return a;
}

/* A message as JSON the way Triton's HTTP extensions print theirs (protobuf's JSON mapping
 * with the proto field names): every field, enums by name, 64-bit integers as numbers, unset
 * sub-messages left out. For the configuration and statistics answers. */
static json_t *message_json(const ProtobufCMessage *msg) {
  const ProtobufCMessageDescriptor *d = msg->descriptor;
  json_t *o = json_object();
  for (unsigned i = 0; o && i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *base = (const char *)msg + f->offset;
    size_t count = 1;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      count = *(const size_t *)((const char *)msg + f->quantifier_offset);
      base = *(const char *const *)base;
    }
    json_t *arr = f->label == PROTOBUF_C_LABEL_REPEATED ? json_array() : NULL;
    for (size_t k = 0; k < count; k++) {
      json_t *v = NULL;
      switch (f->type) {
      case PROTOBUF_C_TYPE_INT32: v = json_integer(((const int32_t *)base)[k]); break;
      case PROTOBUF_C_TYPE_UINT32: v = json_integer(((const uint32_t *)base)[k]); break;
      case PROTOBUF_C_TYPE_INT64: v = json_integer(((const int64_t *)base)[k]); break;
      case PROTOBUF_C_TYPE_UINT64: v = json_integer((json_int_t)((const uint64_t *)base)[k]); break;
      case PROTOBUF_C_TYPE_BOOL: v = json_boolean(((const protobuf_c_boolean *)base)[k]); break;
      case PROTOBUF_C_TYPE_STRING: {
        const char *str = ((const char *const *)base)[k];
        v = json_string(str ? str : "");
        break;
      }
      case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, ((const int *)base)[k]);
        v = ev ? json_string(ev->name) : json_integer(((const int *)base)[k]);
        break;
      }
      case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = ((const ProtobufCMessage *const *)base)[k];
        v = sub ? message_json(sub) : NULL;
        break;
      }
      default: break; /* no other field types in these messages */
      }
      if (!v) continue;
      if (arr) json_array_append_new(arr, v);
      else json_object_set_new(o, f->name, v);
    }
    if (arr) json_object_set_new(o, f->name, arr);
  }
  return o;
}

/* The JSON body of an OK answer, and its status (an OK "not ready" answer is 503 with the
 * note as its error). NULL: out of memory. */
static json_t *answer_json(const tpu__call_t *call, const char *note,
                           const ProtobufCMessage *p, int *status) {
  *status = 200;
  json_t *j = NULL;
  switch (call->method->method) {
  case TPUD__METHOD__SERVER_LIVE:
    j = json_pack("{s:b}", "live", ((const Inference__ServerLiveResponse *)p)->live);
    break;
  case TPUD__METHOD__SERVER_READY: {
    int ready = ((const Inference__ServerReadyResponse *)p)->ready;
    j = json_pack("{s:b}", "ready", ready);
    if (!ready) *status = 503;
    break;
  }
  case TPUD__METHOD__MODEL_READY: {
    const Inference__ModelReadyRequest *q = (const Inference__ModelReadyRequest *)call->request;
    int ready = ((const Inference__ModelReadyResponse *)p)->ready;
    j = json_pack("{s:s,s:b}", "name", q->name, "ready", ready);
    if (j && ((const hslot_t *)call->slot)->v1) {
      /* KServe V1 answers {name, ready}; TF Serving's model status, the version's state. */
      const char *v = call->model ? call->model->version_str : q->version ? q->version : "";
      json_object_set_new(
          j, "model_version_status",
          json_pack("[{s:s,s:s,s:{s:s,s:s}}]", "version", v, "state",
                    ready ? "AVAILABLE" : "UNAVAILABLE", "status", "error_code",
                    ready ? "OK" : "UNAVAILABLE", "error_message", ready ? "" : (note ? note : "")));
    }
    if (!ready) *status = 503;
    break;
  }
  case TPUD__METHOD__SERVER_METADATA: {
    const Inference__ServerMetadataResponse *r = (const Inference__ServerMetadataResponse *)p;
    j = json_pack("{s:s,s:s,s:o}", "name", r->name, "version", r->version, "extensions",
                  strings_json(r->extensions, r->n_extensions));
    break;
  }
  case TPUD__METHOD__MODEL_METADATA: {
    const Inference__ModelMetadataResponse *r = (const Inference__ModelMetadataResponse *)p;
    j = json_pack("{s:s,s:o,s:s,s:o,s:o}", "name", r->name, "versions",
                  strings_json(r->versions, r->n_versions), "platform", r->platform, "inputs",
                  tensors_json(r->inputs, r->n_inputs), "outputs",
                  tensors_json(r->outputs, r->n_outputs));
    break;
  }
  case TPUD__METHOD__REPOSITORY_INDEX: {
    const Tpud__RepositoryIndexResponse *r = (const Tpud__RepositoryIndexResponse *)p;
    j = json_array();
    for (size_t i = 0; j && i < r->n_models; i++) {
      const Tpud__RepositoryIndexResponse__ModelIndex *m = r->models[i];
      json_t *o = json_pack("{s:s,s:s,s:s}", "name", m->name, "version", m->version, "state",
                            tpu__state_name(m->state));
      if (m->reason && m->reason[0]) json_object_set_new(o, "reason", json_string(m->reason));
      json_array_append_new(j, o);
    }
    break;
  }
  case TPUD__METHOD__OIP_MODEL_CONFIG: /* Triton's model configuration JSON */
    j = message_json(&((const Inference__ModelConfigResponse *)p)->config->base);
    break;
  case TPUD__METHOD__OIP_MODEL_STATISTICS: /* Triton's statistics JSON */
    j = message_json(p);
    break;
  case TPUD__METHOD__MODEL_LOAD:
  case TPUD__METHOD__MODEL_UNLOAD: /* the repository extension: 200 says it, the body is {} */
    j = json_object();
    break;
  default:
    break;
  }
  if (j && *status != 200 && note) json_object_set_new(j, "error", json_string(note));
  return j;
}

/* The value of a boolean parameter `key` in a parameters map: 1 or 0, or -1 when absent (or
 * not a boolean). */
static int bool_param(size_t n, Inference__ModelInferRequest__ParametersEntry *const *arr,
                      const char *key) {
  for (size_t i = 0; i < n; i++)
    if (arr[i]->key && strcmp(arr[i]->key, key) == 0 && arr[i]->value &&
        arr[i]->value->parameter_choice_case ==
            INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
      return arr[i]->value->bool_param ? 1 : 0;
  return -1;
}

static unsigned char no_binary_mark;
#define NO_BINARY (&no_binary_mark)

/*
 * Which outputs of an infer answer go in binary (Triton's extension): a requested output's
 * `binary_data` parameter, else the request's `binary_data_output`. Returns NO_BINARY when none
 * does, a malloc'd flag per response output otherwise, NULL when out of memory.
 */
static unsigned char *binary_outputs(const Inference__ModelInferRequest *q,
                                     const Inference__ModelInferResponse *resp) {
  if (!q || !resp || resp->n_outputs == 0) return NO_BINARY;
  int all = bool_param(q->n_parameters, q->parameters, "binary_data_output") == 1;
  int any = all;
  for (size_t j = 0; !any && j < q->n_outputs; j++)
    any = bool_param(q->outputs[j]->n_parameters,
                     (Inference__ModelInferRequest__ParametersEntry *const *)q->outputs[j]->parameters,
                     "binary_data") == 1;
  if (!any) return NO_BINARY;
  unsigned char *bin = malloc(resp->n_outputs);
  if (!bin) return NULL;
  for (size_t i = 0; i < resp->n_outputs; i++) {
    int b = -1;
    const char *name = resp->outputs[i] ? resp->outputs[i]->name : NULL;
    for (size_t j = 0; name && j < q->n_outputs && b < 0; j++)
      if (q->outputs[j]->name && strcmp(q->outputs[j]->name, name) == 0)
        b = bool_param(q->outputs[j]->n_parameters,
                       (Inference__ModelInferRequest__ParametersEntry *const *)q->outputs[j]
                           ->parameters,
                       "binary_data");
    bin[i] = (unsigned char)(b < 0 ? all : b);
  }
  return bin;
}

static void origin_respond(tpu__call_t *call, int code, const char *msg,
                           const ProtobufCMessage *payload) {
  hslot_t *s = call->slot;
  s->call = NULL; /* answered: the slot may be released once its bytes are out */
  if (code != TPU_CODE_OK) {
    if (code == TPU_CODE_UNAUTHENTICATED)
      reply_error_hdr(s, 401, msg,
                      s->had_authz
                          ? "WWW-Authenticate: Bearer realm=\"tpud\", error=\"invalid_token\"\r\n"
                          : "WWW-Authenticate: Bearer realm=\"tpud\"\r\n",
                      call->received_us);
    else
      send_error(s, tpu_code_http(code), msg, call->received_us);
    return;
  }
  if (call->method->method == TPUD__METHOD__MODEL_INFER) {
    const Inference__ModelInferResponse *resp = (const Inference__ModelInferResponse *)payload;
    if (s->v1) { /* KServe V1 / TF Serving: predictions (rows) or outputs (columns) */
      char *text = NULL, err[256];
      if (tpu_oip_json_v1_predict_format(resp, s->v1_columnar, call->model && call->model->batched,
                                         &text, err, sizeof err) != TPU_OIP_JSON_OK) {
        send_error(s, 500, err, call->received_us);
        return;
      }
      send_owned(s, 200, text, strlen(text), NULL, call->received_us);
      return;
    }
    unsigned char *bin = binary_outputs((const Inference__ModelInferRequest *)call->request, resp);
    char *text = NULL, err[256];
    size_t len = 0, json_len = 0;
    tpu_oip_json_status_t st =
        bin == NO_BINARY
            ? tpu_oip_json_infer_response_format(resp, &text, err, sizeof err)
            : bin ? tpu_oip_json_infer_response_format_binary(resp, bin, &text, &len, &json_len,
                                                               err, sizeof err)
                  : TPU_OIP_JSON_NOMEM;
    if (bin != NO_BINARY) free(bin);
    if (st != TPU_OIP_JSON_OK) {
      send_error(s, 500, st == TPU_OIP_JSON_NOMEM ? "out of memory" : err, call->received_us);
      return;
    }
    if (bin == NO_BINARY) {
      send_owned(s, 200, text, strlen(text), NULL, call->received_us);
      return;
    }
    char hdr[64];
    snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %zu\r\n", json_len);
    reply(s, 200, "application/octet-stream", text, len, hdr, call->received_us);
    free(text);
    return;
  }
  int status;
  json_t *j = answer_json(call, msg, payload, &status);
  send_json(s, status, j, call->received_us);
}

static void origin_track(tpu__call_t *call) {
  hslot_t *s = call->slot;
  s->call = call;
  s->conn->ncalls++;
}

/* After origin_respond (which let go of the slot) or, when the connection closed meanwhile,
 * instead of it: then the slot, kept for the call, goes now. */
static void origin_untrack(tpu__call_t *call) {
  hconn_t *c = tpu_container_of(call->origin, hconn_t, origin);
  hslot_t *s = call->slot;
  c->ncalls--;
  if (c->origin.closed) {
    s->call = NULL;
    slot_release(c->h, s);
    if (c->ncalls == 0) conn_free(c);
    return;
  }
  /* Not answered (a completion dropped at a hard stop): the slot must not point at the call,
   * which is freed now. (Answered, the slot may already serve another request.) */
  if (s->call == call) s->call = NULL;
  tpu__sock_flush_later(&c->sock);
}

static const tpu__origin_ops_t origin_ops = {
    .respond = origin_respond, .track = origin_track, .untrack = origin_untrack};

/* ---- requests: OIP REST JSON onto the OIP messages ---- */

/* POST .../infer: the body through proto/tpu_oip_json (the JSON dialect tpuctl sends over the
 * native protocol too). Numeric datatypes are converted to the model's by dispatch, as for
 * every protocol (tpu_validate_convert_inputs). */
static int decode_infer(const tpu__request_t *r, ProtobufCMessage **out, char *msg,
                        size_t msglen) {
  const hslot_t *s = r->slot;
  char err[512];
  tpu_oip_json_limits_t lim = {.max_depth = TPU_OIP_JSON_DEFAULT_MAX_DEPTH,
                               .max_bytes = s->conn->origin.srv->cfg.http_max_body_bytes};
  Inference__ModelInferRequest *q = NULL;
  tpu_oip_json_status_t jst =
      s->binary ? tpu_oip_json_infer_request_parse_binary(
                      r->body_len ? r->body : "", r->body_len,
                      s->json_len > SIZE_MAX ? SIZE_MAX : (size_t)s->json_len, r->model,
                      r->version, &lim, &q, err, sizeof err)
                : tpu_oip_json_infer_request_parse(r->body_len ? r->body : "", r->body_len,
                                                   r->model, r->version, &lim, &q, err,
                                                   sizeof err);
  if (jst != TPU_OIP_JSON_OK) {
    snprintf(msg, msglen, "%s: %s", tpu_oip_json_strerror(jst), err);
    return jst == TPU_OIP_JSON_TOO_LARGE ? TPU_CODE_RESOURCE_EXHAUSTED
           : jst == TPU_OIP_JSON_NOMEM   ? TPU_CODE_INTERNAL
                                         : TPU_CODE_INVALID_ARGUMENT;
  }
  *out = &q->base;
  return TPU_CODE_OK;
}

/* POST /v1/models/{m}[/versions/{v}]:predict: the V1 body (rows or columns) read against the
 * model's inputs, which the routing's model lookup gives (the call looks it up again: a swap
 * in between only means the new version validates what was parsed). */
static int decode_v1_predict(const tpu__request_t *r, ProtobufCMessage **out, char *msg,
                             size_t msglen) {
  hslot_t *s = r->slot;
  tpu_server_t *srv = s->conn->origin.srv;
  tpu__model_t *m = tpu__server_find_model(srv, r->model ? r->model : "",
                                           r->version ? r->version : "", msg, msglen);
  if (!m) return TPU_CODE_NOT_FOUND;
  tpu_oip_v1_input_t in[TPU_MODEL_MAX_IO];
  size_t nin = tpu_model_input_count(m->model);
  for (size_t i = 0; i < nin && i < TPU_MODEL_MAX_IO; i++) {
    const tpu_model_tensor_t *t = tpu_model_input(m->model, i);
    size_t skip = m->batched && t->rank ? 1 : 0;
    in[i] = (tpu_oip_v1_input_t){.name = t->name, .datatype = t->datatype,
                                 .rank = t->rank - skip, .dims = t->shape + skip};
  }
  char err[512];
  tpu_oip_json_limits_t lim = {.max_depth = TPU_OIP_JSON_DEFAULT_MAX_DEPTH,
                               .max_bytes = srv->cfg.http_max_body_bytes};
  Inference__ModelInferRequest *q = NULL;
  tpu_oip_json_status_t st = tpu_oip_json_v1_predict_parse(
      r->body_len ? r->body : "", r->body_len, r->model, r->version, in, nin, m->batched, &lim,
      &q, &s->v1_columnar, err, sizeof err);
  tpu__model_release(m);
  if (st != TPU_OIP_JSON_OK) {
    snprintf(msg, msglen, "%s: %s", tpu_oip_json_strerror(st), err);
    return st == TPU_OIP_JSON_TOO_LARGE ? TPU_CODE_RESOURCE_EXHAUSTED
           : st == TPU_OIP_JSON_NOMEM   ? TPU_CODE_INTERNAL
                                        : TPU_CODE_INVALID_ARGUMENT;
  }
  *out = &q->base;
  return TPU_CODE_OK;
}

/* A new, empty message of the method's request type (freed by protobuf-c's free_unpacked). */
static ProtobufCMessage *new_request(int method) {
  const tpu_method_info_t *info = tpu_envelope_method_info(method);
  ProtobufCMessage *m = info ? malloc(info->request->sizeof_message) : NULL;
  if (m) protobuf_c_message_init(info->request, m);
  return m;
}

/* The GETs: a request message from the path (model name and version), no body. */
static int decode_path(const tpu__request_t *r, ProtobufCMessage **out, char *msg,
                       size_t msglen) {
  ProtobufCMessage *m = new_request(r->method);
  char *name = NULL, *version = NULL;
  if (!m || (r->model && !(name = strdup(r->model))) ||
      !(version = strdup(r->version ? r->version : ""))) {
    free(name);
    free(version);
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    snprintf(msg, msglen, "out of memory");
    return TPU_CODE_RESOURCE_EXHAUSTED;
  }
  if (r->method == TPUD__METHOD__MODEL_METADATA) {
    ((Inference__ModelMetadataRequest *)m)->name = name;
    ((Inference__ModelMetadataRequest *)m)->version = version;
  } else if (r->method == TPUD__METHOD__MODEL_READY) {
    ((Inference__ModelReadyRequest *)m)->name = name;
    ((Inference__ModelReadyRequest *)m)->version = version;
  } else if (r->method == TPUD__METHOD__OIP_MODEL_CONFIG) {
    ((Inference__ModelConfigRequest *)m)->name = name;
    ((Inference__ModelConfigRequest *)m)->version = version;
  } else if (r->method == TPUD__METHOD__OIP_MODEL_STATISTICS) {
    Inference__ModelStatisticsRequest *q = (Inference__ModelStatisticsRequest *)m;
    q->version = version;
    if (name) q->name = name; /* /v2/models/stats: every model (the default "") */
  } else {
    free(name);
    free(version);
  }
  *out = m;
  return TPU_CODE_OK;
}

/* The repository extension's bodies (Triton's): POST /v2/repository/index {"ready": bool},
 * .../models/{m}/load {"parameters": {}}, .../unload {"parameters": {"unload_dependents": b}}.
 * Every part is optional; what tpud cannot honour is refused, never ignored: load parameters
 * (Triton's "config" and "file:..." upload a model, tpud loads only the repository's files). */
static int decode_repository(const tpu__request_t *r, ProtobufCMessage **out, char *msg,
                             size_t msglen) {
  const hslot_t *s = r->slot;
  json_t *root = NULL;
  if (r->body_len) {
    char err[300];
    tpu_oip_json_limits_t lim = {.max_depth = 8,
                                 .max_bytes = s->conn->origin.srv->cfg.http_max_body_bytes};
    tpu_oip_json_status_t st = tpu_oip_json_load(r->body, r->body_len, &lim, &root, err, sizeof err);
    if (st != TPU_OIP_JSON_OK) {
      snprintf(msg, msglen, "%s: %s", tpu_oip_json_strerror(st), err);
      return TPU_CODE_INVALID_ARGUMENT;
    }
    if (!json_is_object(root)) {
      json_decref(root);
      snprintf(msg, msglen, "expected a JSON object (or no body)");
      return TPU_CODE_INVALID_ARGUMENT;
    }
  }
  int code = TPU_CODE_OK, ready = 0;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (r->method == TPUD__METHOD__REPOSITORY_INDEX && !strcmp(key, "ready") && json_is_boolean(v)) {
      ready = json_is_true(v);
    } else if (r->method != TPUD__METHOD__REPOSITORY_INDEX && !strcmp(key, "parameters") &&
               json_is_object(v)) {
      const char *pk;
      json_t *pv;
      json_object_foreach(v, pk, pv) {
        if (r->method == TPUD__METHOD__MODEL_UNLOAD && !strcmp(pk, "unload_dependents") &&
            json_is_boolean(pv))
          continue; /* tpud has no ensembles: nothing depends on a model */
        snprintf(msg, msglen, "parameters.%.64s: %s", pk,
                 r->method == TPUD__METHOD__MODEL_LOAD
                     ? "not supported: tpud loads a model from the repository's files (no config "
                       "override or file upload); send no parameters"
                     : "not supported (only unload_dependents, a boolean)");
        code = TPU_CODE_INVALID_ARGUMENT;
        break;
      }
    } else {
      snprintf(msg, msglen, "%.64s: unexpected field or type (expected %s)", key,
               r->method == TPUD__METHOD__REPOSITORY_INDEX ? "{\"ready\": true|false}"
                                                           : "{\"parameters\": {...}}");
      code = TPU_CODE_INVALID_ARGUMENT;
    }
    if (code != TPU_CODE_OK) break;
  }
  json_decref(root);
  if (code != TPU_CODE_OK) return code;
  ProtobufCMessage *m = new_request(r->method);
  char *name = NULL;
  if (!m || (r->method != TPUD__METHOD__REPOSITORY_INDEX && !(name = strdup(r->model ? r->model : "")))) {
    free(name);
    if (m) protobuf_c_message_free_unpacked(m, NULL);
    snprintf(msg, msglen, "out of memory");
    return TPU_CODE_RESOURCE_EXHAUSTED;
  }
  if (r->method == TPUD__METHOD__REPOSITORY_INDEX)
    ((Tpud__RepositoryIndexRequest *)m)->ready_only = ready;
  else if (r->method == TPUD__METHOD__MODEL_LOAD)
    ((Tpud__ModelLoadRequest *)m)->name = name; /* version "": the policy's versions */
  else
    ((Tpud__ModelUnloadRequest *)m)->name = name; /* every version, as Triton unloads */
  *out = m;
  return TPU_CODE_OK;
}

/* ---- routing ---- */

/* Serves one complete request (its body is body[0..blen)) on slot `req`. */
static void route(tpu__io_t *io, hslot_t *req, const tpu_http_request_t *hr, const char *body,
                  size_t blen, uint64_t t0) {
  tpu_server_t *srv = io->srv;
  hconn_t *c = req->conn;
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
  int n = tpu__http_split_path(path, seg, 8);
  if (n == -2) {
    send_error(req, 400, "the path holds bytes that are not UTF-8, or a percent-encoded NUL "
               "byte: model names and versions are UTF-8 text", t0);
    return;
  }
  if (hr->method == TPU_HTTP_OTHER) {
    send_error(req, 501, "method not implemented; use GET, HEAD or POST", t0);
    return;
  }
  tpu__endpoint_t e = tpu__http_match(seg, n < 0 ? 0 : n);
  req->had_authz = hr->authorization != NULL;
  req->v1 = e.v1;
  req->binary = hr->has_infer_header;
  req->json_len = hr->infer_header_len;
  tpu__request_t r = {.method = e.method, .slot = req, .received_us = t0,
                      .peer = {.peer = c->sock.peer,
                               .cert_cn = c->sock.cert_cn[0] ? c->sock.cert_cn : NULL,
                               .cert_subject = c->sock.cert_subject},
                      .authz = hr->authorization, .authz_len = hr->authorization_len,
                      .n_authz = hr->authorization_count, .model = e.model,
                      .version = e.version, .body = body, .body_len = blen};
  if (e.kind == TPU__EP_METHOD && tpu__http_allowed(e.allow, hr->method)) {
    r.decode = e.method == TPUD__METHOD__MODEL_INFER && e.v1 ? decode_v1_predict
               : e.method == TPUD__METHOD__MODEL_INFER ? decode_infer
               : e.method == TPUD__METHOD__MODEL_LOAD || e.method == TPUD__METHOD__MODEL_UNLOAD ||
                       (e.method == TPUD__METHOD__REPOSITORY_INDEX && hr->method == TPU_HTTP_POST)
                   ? decode_repository
                   : decode_path;
    tpu__dispatch(&c->origin, &r); /* access control, audit, counting: the one path */
    return;
  }
  /* A page, a method not allowed or no endpoint: who asks is decided first, as for a method. */
  char msg[1200];
  int code = tpu__dispatch_authorize(&c->origin, &r, tpu__http_path_need(srv->cfg.auth_open_metrics,
                                                         srv->cfg.auth_open_health, seg,
                                                         n < 0 ? 0 : n),
                                     msg, sizeof msg);
  if (code != TPU_CODE_OK) {
    tpu__call_t tmp = {.slot = req, .received_us = t0};
    origin_respond(&tmp, code, msg, NULL);
    return;
  }
  if (e.kind == TPU__EP_NONE) {
    snprintf(msg, sizeof msg,
             "no endpoint %.1000s (see /v2, /v2/health/{live,ready}, /v2/models/{m}"
             "[/versions/{v}][/ready|/infer], /metrics, /v2/debug/{config,models,engine})",
             uri);
    send_error(req, 404, msg, t0);
    return;
  }
  if (!tpu__http_allowed(e.allow, hr->method)) {
    char hdr[64];
    snprintf(msg, sizeof msg, "method not allowed here; use %s", e.allow);
    snprintf(hdr, sizeof hdr, "Allow: %s\r\n", e.allow);
    reply_error_hdr(req, 405, msg, hdr, t0);
    return;
  }
  if (e.kind == TPU__EP_METRICS) {
    tpu_buf_t b = {0};
    tpu__metrics_render(srv, &b);
    if (b.oom) {
      tpu_buf_free(&b);
      send_error(req, 500, "out of memory", t0);
      return;
    }
    send_owned(req, 200, b.p, b.len, "text/plain; version=0.0.4; charset=utf-8", t0);
    return;
  }
  json_t *page = e.kind == TPU__EP_DEBUG_CONFIG   ? tpu__page_debug_config(srv)
                 : e.kind == TPU__EP_DEBUG_MODELS ? tpu__page_debug_models(srv)
                                             : tpu__page_debug_engine(srv);
  send_json(req, 200, page, t0);
}

/* ---- the connection I/O (sock.h does the socket, TLS, timeouts and lingering close) ---- */

static int over_limits(hconn_t *c) {
  const tpu_config_t *cfg = &c->h->io->srv->cfg;
  return c->nslots >= cfg->max_inflight_per_conn ||
         tpu__sock_unsent(&c->sock) > cfg->max_unsent_bytes;
}

/* Decodes what has arrived of the chunked body of the request at ioff (head hr), in place: the
 * data so far sits right after the head (chunk_len bytes), the bytes not yet decoded follow it,
 * and the framing read is dropped from the input. Sets *more while the body is incomplete.
 * Returns 0, 1 when it answered an error (400/413/431: the stream cannot be resynchronized, the
 * connection closes after the answer), -1 when it closed the connection. */
static int chunked_step(hconn_t *c, const tpu_http_request_t *hr, int *more) {
  tpu__sock_t *k = &c->sock;
  if (!c->chunk_on) {
    tpu_http_chunked_init(&c->chunk);
    c->chunk_on = 1;
    c->chunk_len = 0;
  }
  char *p = k->ibuf + k->ioff;
  size_t avail = k->ilen - k->ioff, base = hr->head_len + c->chunk_len, used, made;
  tpu_http_chunked_result_t cr =
      tpu_http_chunked_decode(&c->chunk, p + base, avail - base, &c->h->lim, &used, &made);
  memmove(p + base + made, p + base + used, avail - base - used);
  k->ilen -= used - made;
  c->chunk_len += made;
  *more = cr == TPU_HTTP_CHUNKED_INCOMPLETE;
  if (cr != TPU_HTTP_CHUNKED_ERROR) return 0;
  c->chunk_on = 0;
  hslot_t *s = slot_new(c);
  no_more(c);
  if (!s) {
    conn_abort(c, "out of memory");
    return -1;
  }
  s->close = 1;
  char msg[200];
  if (c->chunk.status == 413)
    snprintf(msg, sizeof msg, "chunked request body exceeds the limit of %llu bytes",
             (unsigned long long)c->h->lim.max_body_bytes);
  else
    snprintf(msg, sizeof msg, "%s", c->chunk.error);
  send_error(s, c->chunk.status, msg, tpu_now_us());
  return 1;
}

/* Cuts and serves every complete request in the input, in order. Returns 0, or -1 when it
 * closed the connection (which may be freed then: the caller must not touch it). */
static int conn_process(hconn_t *c) {
  tpu__io_t *io = c->h->io;
  tpu__sock_t *k = &c->sock;
  while (!c->no_more && !c->origin.closed) {
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
    /* A chunked body already partly decoded is re-read from its head each time: the head is
     * untouched, the decoder's state and chunk_len say where the body stands. */
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
    size_t blen = (size_t)hr.content_length;
    int more = avail < need;
    if (hr.chunked) {
      int st = chunked_step(c, &hr, &more);
      if (st < 0) return -1;
      if (st > 0) break; /* answered an error */
      avail = k->ilen - k->ioff;
      p = k->ibuf + k->ioff;
      blen = c->chunk_len;
      need = hr.head_len + blen;
    }
    if (more) {
      if (!hr.chunked && tpu__sock_reserve(k, (size_t)need) != 0) {
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
    s->gzip_ok = hr.accept_gzip;
    if (!hr.keep_alive) {
      s->close = 1;
      no_more(c);
    }
    tpu__sock_consume(k, (size_t)need); /* p stays valid: nothing moves until the next read */
    c->continue_sent = 0;
    c->chunk_on = 0;
    /* Content-Encoding: the body framing is consumed, so a refusal keeps the connection. */
    const char *body = p + hr.head_len;
    char *decoded = NULL;
    if (blen && hr.coding != TPU_HTTP_CODING_IDENTITY) {
      char msg[400];
      int st;
      if (hr.coding == TPU_HTTP_CODING_OTHER) {
        char v[80];
        snprintf(v, sizeof v, "%.*s", (int)(hr.coding_len < 64 ? hr.coding_len : 64),
                 hr.coding_str ? hr.coding_str : "");
        char esc[80];
        snprintf(msg, sizeof msg, "Content-Encoding '%s' is not supported: expected gzip, "
                 "deflate or identity (one coding)", tpu_log_escape(esc, sizeof esc, v));
        st = 415;
      } else {
        st = tpu_http_body_decode(hr.coding, body, blen, c->h->lim.max_body_bytes, &decoded,
                                  &blen, msg, sizeof msg);
      }
      if (st) {
        s->body_read = 1;
        send_error(s, st, msg, t0);
        continue;
      }
      body = decoded;
    }
    route(io, s, &hr, body, blen, t0);
    free(decoded);
  }
  return 0;
}

/* Writes what is ready (one writev); then closes, lingers or resumes reading as due. */
static void conn_flush(hconn_t *c) {
  if (c->origin.closed) return;
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
    if (!c->origin.closed && tpu__sock_unsent(&c->sock)) conn_flush(c);
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
  char peer[64];
  tpu_addr_format((const struct sockaddr *)ss, peer, sizeof peer);
  SSL *ssl = NULL;
  hconn_t *c = calloc(1, sizeof *c);
  if (!c) goto fail;
  c->h = h;
  c->origin = (tpu__origin_t){.ops = &origin_ops, .srv = h->io->srv, .io = h->io,
                              .wire = TPU__WIRE_JSON};
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

/* ---- lifecycle ---- */

int tpu__http_bind(tpu_server_t *srv, char *err, size_t errlen) {
  struct sockaddr_storage ss;
  socklen_t sslen;
  char spec[300];
  if (tpu_addr_parse(srv->cfg.listen, srv->cfg.http_port, &ss, &sslen, spec, sizeof spec, err,
                     errlen) != 0)
    return -1;
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr *)&ss, sslen) != 0 || listen(fd, 1024) != 0) {
    snprintf(err, errlen, "cannot listen on %s (http): %s", spec, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  srv->http_port = tpu_addr_bound_port(fd);
  srv->http_fd = fd;
  return 0;
}

static struct tpu__http_io *hio_of(tpu__service_t *s) {
  return tpu_container_of(s, struct tpu__http_io, svc);
}

/* Stops accepting; idle connections close now, the others after their answers are written.
 * Idle at once: the loop runs linger_ms longer for the answers being written. */
static void hio_stop(tpu__service_t *svc) {
  struct tpu__http_io *h = hio_of(svc);
  if (!h->stopping) {
    h->stopping = 1;
    if (h->accept_ev) event_del(h->accept_ev);
    if (h->retry_ev) event_del(h->retry_ev);
    if (h->lfd >= 0) close(h->lfd);
    h->lfd = -1;
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
  tpu__io_service_idle(svc, h->io);
}

/* After the thread exited: connections still waiting for calls that never came back (a hard
 * stop) go too. */
static void hio_free(tpu__service_t *svc) {
  struct tpu__http_io *h = hio_of(svc);
  while (h->socks.socks) conn_close(conn_of(h->socks.socks), "server stopped");
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
}

int tpu__http_attach(tpu__io_t *io) {
  tpu_server_t *srv = io->srv;
  struct tpu__http_io *h = calloc(1, sizeof *h);
  if (!h) return -1;
  h->io = io;
  h->lfd = -1;
  h->svc = (tpu__service_t){.name = "http", .stop = hio_stop, .free = hio_free,
                            .linger_ms = 100};
  tpu__io_add_service(io, &h->svc); /* freed with the thread, whatever fails below */
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
