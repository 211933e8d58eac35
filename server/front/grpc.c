/*
 * grpc.c - gRPC over HTTP/2 on the native port, with nghttp2, so that stock gRPC clients (KServe
 * v2 and Triton client libraries, grpcurl, h2load) talk to tpud unchanged.
 *
 * DESIGN
 * A connection on the native port speaks either tpud's framed protocol or HTTP/2; framed.c decides
 * from its first bytes (the HTTP/2 preface starts with 'P', a frame with flag 0 or 1) or from
 * ALPN "h2" under TLS, and then hands an HTTP/2 connection's bytes to this file. Everything
 * above the wire is shared with every protocol: each gRPC call becomes a request of the
 * dispatch layer (dispatch/call.h: id = the stream id, method from :path, timeout from
 * grpc-timeout, "authorization" metadata, the message as payload), so access control,
 * validation, batching, audit and counting are the very same code. Answers come back through
 * the connection's origin (framed.c), which for an HTTP/2 connection lands here (tpu__grpc_send)
 * and becomes
 * HEADERS, DATA (the 5-byte prefix and the message) and trailers (grpc-status, grpc-message),
 * or one trailers-only HEADERS frame for an error.
 *
 * The nghttp2 session does no I/O: framed.c feeds it the connection's flat input buffer (sock.h;
 * tpu__grpc_recv, in slices, checking back-pressure between slices) and drains its output into
 * the connection's output evbuffer
 * (tpu__grpc_output, stopping at max-unsent-bytes; the write callback asks for more). Answers
 * submitted from inside a receive callback are only queued; framed.c writes after the input is
 * processed. An answer from a completion is pulled at once and written by the deferred flush
 * after the batch of completions (the host's flush).
 *
 * Not gRPC: a request whose content-type is missing or not application/grpc gets HTTP 415 (and
 * grpc-status INVALID_ARGUMENT), a method other than POST 405, so no other HTTP/2 client reads
 * the refusal as success. Stream ids: a HEADERS on an id the client skipped (below one it has
 * used) is a connection error, GOAWAY PROTOCOL_ERROR (RFC 9113 section 5.1.1; see on_begin_frame).
 *
 * Streams: a stream's request body is gathered (bounded by max-message-bytes, and all streams of
 * a connection together by the same figure) and dispatched at END_STREAM. A stream the client
 * resets (RST_STREAM) while its call is in flight sets that call's cancel flag, the flag a closed
 * connection sets for all of its calls: a call still queued is dropped and counted CANCELLED.
 * Limits (the anchors' defaults): --grpc-max-streams concurrent streams (100), a header list of
 * --grpc-max-header-bytes (16 KiB), a stream-reset rate limit against rapid reset
 * (CVE-2023-44487: 1000 resets at once, then 33 a second, else GOAWAY ENHANCE_YOUR_CALM),
 * answers held for a shut flow-control window bounded by --max-unsent-bytes (new calls are
 * refused RESOURCE_EXHAUSTED past it), nghttp2's CONTINUATION limit,
 * its SETTINGS and PING/ACK flood limits; a client that does not acknowledge our SETTINGS
 * within --tls-handshake-timeout-s is closed; the idle timeout closes with GOAWAY. Calls in flight
 * count against --max-inflight-per-conn like framed requests, even after their stream is reset,
 * so resetting streams buys no extra compute.
 */
#include <ctype.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "framed.h"
#include "server_int.h"
#include "tpu_grpc.h"
#include "tpu_reflection.h"

/* Rapid reset (CVE-2023-44487): the client may reset H2_RESET_BURST streams at once, then
 * H2_RESET_RATE a second (nghttp2 1.57's defaults); past that, GOAWAY ENHANCE_YOUR_CALM. Ours,
 * so the code is right; nghttp2's own limit (which says INTERNAL_ERROR) stays as a backstop at
 * twice the figures. */
#define H2_RESET_BURST 1000
#define H2_RESET_RATE 33
/* Per-stream receive window we advertise: a ModelInfer of a few hundred KiB in one round trip. */
#define H2_STREAM_WINDOW (1u << 20)
#define H2_CONN_WINDOW (16u << 20)
/* Runs of client stream ids skipped (never opened) that a connection remembers; a client that
 * skips more often than this loses the oldest (a HEADERS in a forgotten run is then ignored, as
 * nghttp2 does with every HEADERS below the newest stream). Real clients skip none. */
#define H2_MAX_GAPS 16

typedef enum { S_READING, S_DISPATCHED, S_ANSWERED } stream_state_t;

typedef struct h2_stream {
  struct h2_stream *prev, *next; /* the connection's open streams */
  int32_t id;
  stream_state_t state;
  int method;            /* Tpud__Method from :path; 0 = not a method we serve */
  char path[128];        /* for messages (truncated) */
  int bad_method;        /* :method not POST */
  int bad_type;          /* content-type missing or not application/grpc: 415 */
  int has_type;          /* a content-type header came */
  int has_timeout;
  uint64_t timeout_us;
  int reflect;           /* server reflection: a stream of requests, each answered at once */
  int stream_started;    /* a streaming answer (reflection, Watch) has its headers out */
  int client_done;       /* the client ended its side (END_STREAM) */
  int watch;             /* grpc.health.v1.Health/Watch: a status now, then on every change */
  int watch_status;      /* the last status sent */
  char watch_service[TPU_MODEL_MAX_NAME + 1];
  struct event *watch_ev; /* re-checks the status every second */
  struct tpu__h2 *h2;     /* its session, for the timer */
  char *authz[2];        /* the first two "authorization" values (malloc'd), NULL when absent */
  size_t n_authz;        /* "authorization" headers the request carried */
  size_t header_bytes;
  /* A refusal decided while reading (code != OK), answered at the end of the headers. */
  int code;
  char msg[256];
  /* The request message (prefix included) as it arrives. */
  uint8_t *body;
  size_t len, cap;
  /* The answer's DATA (prefix + message) and where nghttp2 is in it. */
  uint8_t *out;
  size_t out_len, out_off;
} h2_stream_t;

struct tpu__h2 {
  nghttp2_session *session;
  tpu__conn_t *conn;
  const tpu__grpc_host_t *host; /* the connection's owner (framed.c) */
  int in_recv;           /* inside nghttp2_session_mem_recv: submit, don't send */
  int settings_acked;
  size_t body_bytes;     /* request bytes buffered over all streams */
  size_t pending_out;    /* answer bytes submitted and not yet framed */
  double reset_tokens;   /* rapid-reset bucket: resets the client may still make */
  uint64_t reset_at_us;  /* when the bucket was last refilled */
  h2_stream_t *streams;  /* open streams (freed with the session) */
  int32_t max_client_id; /* the highest stream id a client HEADERS frame has used */
  /* Odd ids below max_client_id that no HEADERS opened, as runs [lo, hi], oldest first. */
  struct {
    int32_t lo, hi;
  } gaps[H2_MAX_GAPS];
  size_t ngaps;
};

/* ---- helpers ---- */

static tpu_server_t *srv_of(tpu__h2_t *h) { return h->conn->origin.srv; }

static void stream_free(tpu__h2_t *h, h2_stream_t *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    h->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  h->body_bytes -= s->cap;
  h->pending_out -= s->out_len - s->out_off;
  tpu_stats_sub(&tpu_stats.buffered_bytes, s->out_len - s->out_off); /* max-buffered-bytes */
  if (s->watch_ev) event_free(s->watch_ev);
  free(s->body);
  free(s->out);
  free(s->authz[0]);
  free(s->authz[1]);
  free(s);
}

static void drop_body(tpu__h2_t *h, h2_stream_t *s) {
  h->body_bytes -= s->cap;
  free(s->body);
  s->body = NULL;
  s->len = s->cap = 0;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

/* The trailers-only answer of a failed call (one HEADERS frame with END_STREAM). */
static void respond_error(tpu__h2_t *h, h2_stream_t *s, int code, const char *msg) {
  char status[8], pmsg[700];
  snprintf(status, sizeof status, "%d", code);
  tpu_grpc_percent_encode(msg ? msg : "", pmsg, sizeof pmsg);
  /* Not a gRPC request (dispatch refuses the method first): an HTTP status other than 200, so
   * a client that is not gRPC does not read the answer as success. */
  const char *http = s->bad_method ? "405" : s->bad_type ? "415" : "200";
  nghttp2_nv nva[] = {NV(":status", http), NV("content-type", "application/grpc"),
                      NV("grpc-status", status), NV("grpc-message", pmsg)};
  s->state = S_ANSWERED;
  int rv = nghttp2_submit_response(h->session, s->id, nva, pmsg[0] ? 4 : 3, NULL);
  if (rv != 0)
    tpu_log_debug("connection %llu stream %d: cannot answer: %s",
                  (unsigned long long)h->conn->serial, s->id, nghttp2_strerror(rv));
}

/* Refusals decided here, before dispatch: counted, audited and answered by the dispatch layer
 * like its own (the answer comes back through tpu__grpc_send). */
static void refuse(tpu__h2_t *h, h2_stream_t *s, int code, const char *msg) {
  tpu__conn_t *conn = h->conn;
  tpu_log_debug("connection %llu stream %d: %s: %s", (unsigned long long)conn->serial, s->id,
                tpu_code_name(code), msg);
  tpu__request_t r = {.method = s->method, .id = (uint64_t)s->id, .peer = tpu__conn_peer(conn)};
  tpu__dispatch_refuse(&conn->origin, &r, code, msg);
}

static void refuse_later(h2_stream_t *s, int code, const char *fmt, const char *arg) {
  if (s->code != TPU_CODE_OK) return; /* the first reason stands */
  s->code = code;
  snprintf(s->msg, sizeof s->msg, fmt, arg);
}

/* ---- server reflection: a bidirectional stream, each request answered as it completes ---- */

/* The DATA of a reflection stream: what is answered so far; deferred until more comes, then
 * the trailers once the client has ended its side and everything is out. */
static ssize_t read_stream(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                           size_t length, uint32_t *data_flags, nghttp2_data_source *source,
                           void *ud) {
  tpu__h2_t *h = ud;
  h2_stream_t *s = source->ptr;
  size_t n = s->out_len - s->out_off;
  if (n == 0 && (!s->client_done || s->watch)) return NGHTTP2_ERR_DEFERRED;
  if (n > length) n = length;
  memcpy(buf, s->out + s->out_off, n);
  s->out_off += n;
  h->pending_out -= n;
  tpu_stats_sub(&tpu_stats.buffered_bytes, n);
  if (s->out_off == s->out_len && s->client_done && !s->watch) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv trailers[] = {NV("grpc-status", "0")};
    if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0)
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return (ssize_t)n;
}

/* Appends one answer message (its 5-byte prefix added) to a streaming response, starting the
 * response at the first one and waking nghttp2 at the next ones. 0, or -1 (the stream was
 * reset or answered with an error). */
static int stream_append(tpu__h2_t *h, h2_stream_t *s, const uint8_t *msg, size_t mlen) {
  size_t keep = s->out_len - s->out_off, need = keep + TPU_FRAME_HEADER_SIZE + mlen;
  uint8_t *o = malloc(need);
  if (!o) {
    nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    s->state = S_ANSWERED;
    return -1;
  }
  if (keep) memcpy(o, s->out + s->out_off, keep);
  tpu_frame_write_header(o + keep, mlen, NULL);
  if (mlen) memcpy(o + keep + TPU_FRAME_HEADER_SIZE, msg, mlen);
  free(s->out);
  s->out = o;
  s->out_len = need;
  s->out_off = 0;
  h->pending_out += TPU_FRAME_HEADER_SIZE + mlen;
  tpu_stats_inc(&tpu_stats.buffered_bytes, TPU_FRAME_HEADER_SIZE + mlen);
  if (!s->stream_started) {
    nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                        NV("grpc-accept-encoding", "identity")};
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_stream};
    if (nghttp2_submit_response(h->session, s->id, nva, 3, &prd) != 0) {
      s->state = S_ANSWERED;
      return -1;
    }
    s->stream_started = 1;
  } else {
    nghttp2_session_resume_data(h->session, s->id);
  }
  return 0;
}

/* Sends a Watch stream its service's status when it differs from the last one sent. */
static void watch_push(tpu__h2_t *h, h2_stream_t *s) {
  char why[512];
  int st = tpu__health_status(srv_of(h), s->watch_service, why, sizeof why);
  if (st == s->watch_status) return;
  s->watch_status = st;
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)st;
  uint8_t buf[16];
  size_t n = grpc__health__v1__health_check_response__pack(&r, buf);
  stream_append(h, s, buf, n);
}

static void watch_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  h2_stream_t *s = arg;
  tpu__h2_t *h = s->h2;
  watch_push(h, s);
  h->host->flush(h->conn);
}

/* Answers every complete request message in s->body (tpu_reflection_answer, protocol code:
 * cheap lookups in the embedded descriptors, fine on the I/O thread) and keeps the rest. */
static void reflect_messages(tpu__h2_t *h, h2_stream_t *s) {
  const tpu_config_t *cfg = &srv_of(h)->cfg;
  size_t at = 0;
  while (s->len - at >= TPU_FRAME_HEADER_SIZE && s->state == S_READING) {
    uint32_t mlen = 0;
    tpu_proto_error_t perr;
    tpu_proto_status_t st = tpu_frame_parse_header(s->body + at, cfg->max_message_bytes, &mlen,
                                                   &perr);
    uint8_t *ans = NULL;
    size_t alen = 0;
    if (st != TPU_PROTO_OK) {
      respond_error(h, s, tpu_proto_status_grpc_code(st), perr.msg);
      break;
    }
    if (s->len - at - TPU_FRAME_HEADER_SIZE < mlen) break; /* the rest is still coming */
    if (tpu_reflection_answer(s->body + at + TPU_FRAME_HEADER_SIZE, mlen, &ans, &alen) != 0) {
      if (s->stream_started) { /* its headers are out: end it with an error code */
        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_PROTOCOL_ERROR);
        s->state = S_ANSWERED;
      } else {
        respond_error(h, s, TPU_CODE_INVALID_ARGUMENT,
                      "not a grpc.reflection ServerReflectionRequest");
      }
      break;
    }
    at += TPU_FRAME_HEADER_SIZE + mlen;
    int rc = stream_append(h, s, ans, alen);
    free(ans);
    if (rc != 0) break;
  }
  if (at && s->state == S_READING) {
    memmove(s->body, s->body + at, s->len - at);
    s->len -= at;
  }
}

/* ---- dispatch ---- */

static void dispatch(tpu__h2_t *h, h2_stream_t *s) {
  tpu__conn_t *conn = h->conn;
  tpu_server_t *srv = srv_of(h);
  if (s->state != S_READING) return;
  s->state = S_DISPATCHED;
  if (s->code != TPU_CODE_OK) {
    refuse(h, s, s->code, s->msg);
    return;
  }
  if (s->bad_method) {
    refuse(h, s, TPU_CODE_UNIMPLEMENTED, "gRPC calls are POST requests");
    return;
  }
  if (s->bad_type) {
    refuse(h, s, TPU_CODE_INVALID_ARGUMENT,
           s->has_type ? "content-type must be application/grpc (tpud speaks gRPC with protobuf "
                         "messages)"
                       : "content-type must be application/grpc (tpud speaks gRPC with protobuf "
                         "messages); the request has none");
    return;
  }
  if (s->watch) { /* one HealthCheckRequest, then the status now and at every change */
    uint32_t wl = 0;
    tpu_proto_error_t werr;
    Grpc__Health__V1__HealthCheckRequest *q = NULL;
    if (s->len < TPU_FRAME_HEADER_SIZE ||
        tpu_frame_parse_header(s->body, srv->cfg.max_message_bytes, &wl, &werr) != TPU_PROTO_OK ||
        (size_t)wl != s->len - TPU_FRAME_HEADER_SIZE ||
        !(q = grpc__health__v1__health_check_request__unpack(NULL, wl,
                                                             s->body + TPU_FRAME_HEADER_SIZE))) {
      respond_error(h, s, TPU_CODE_INVALID_ARGUMENT,
                    "expected one grpc.health.v1.HealthCheckRequest (a 5-byte prefix and the "
                    "message)");
      return;
    }
    snprintf(s->watch_service, sizeof s->watch_service, "%s", q->service ? q->service : "");
    grpc__health__v1__health_check_request__free_unpacked(q, NULL);
    drop_body(h, s);
    /* Who may watch: as for Check (a health method). */
    char amsg[300];
    tpu__request_t ar = {.method = TPUD__METHOD__HEALTH_CHECK, .id = (uint64_t)s->id,
                         .received_us = tpu_now_us(), .peer = tpu__conn_peer(conn),
                         .authz = s->authz[0], .authz_len = s->authz[0] ? strlen(s->authz[0]) : 0,
                         .n_authz = s->n_authz};
    int code = tpu__dispatch_authorize(&conn->origin, &ar,
                                       srv->cfg.auth_open_health ? TPU_NEED_OPEN : TPU_NEED_INFER,
                                       amsg, sizeof amsg);
    if (code != TPU_CODE_OK) {
      respond_error(h, s, code, amsg);
      return;
    }
    s->client_done = 1;
    s->state = S_ANSWERED; /* nothing more from the client; answers keep coming */
    s->watch_status = -1;
    watch_push(h, s);
    struct timeval every = {1, 0};
    s->watch_ev = event_new(conn->sock.set->base, -1, EV_PERSIST, watch_tick, s);
    if (!s->watch_ev || event_add(s->watch_ev, &every) != 0)
      nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  if (s->reflect) { /* the client ended its side: what is left answered, then the trailers */
    s->state = S_READING; /* still taking its messages */
    reflect_messages(h, s);
    if (s->state != S_READING) return;
    if (s->len) {
      respond_error(h, s, TPU_CODE_INVALID_ARGUMENT,
                    "the stream ended inside a message (a 5-byte prefix and its bytes)");
      return;
    }
    s->client_done = 1;
    s->state = S_ANSWERED;
    if (s->stream_started) nghttp2_session_resume_data(h->session, s->id);
    else respond_error(h, s, TPU_CODE_OK, ""); /* no request: trailers only, OK */
    return;
  }
  if (s->method == 0) {
    char msg[640];
    snprintf(msg, sizeof msg, "unknown method %s: tpud serves /inference.GRPCInferenceService/"
             "{ServerLive,ServerReady,ModelReady,ServerMetadata,ModelMetadata,ModelInfer,"
             "RepositoryIndex,RepositoryModelLoad,RepositoryModelUnload,ModelConfig,"
             "ModelStatistics}, "
             "/tpud.TpudService/{ModelLoad,ModelUnload,MatMul,RepositoryIndex} and "
             "/grpc.health.v1.Health/{Check,Watch}, and server reflection "
             "(grpc.reflection.v1 and v1alpha)", s->path);
    refuse(h, s, TPU_CODE_UNIMPLEMENTED, msg);
    return;
  }
  /* Exactly one length-prefixed message: tpud's methods are unary. */
  char msg[256];
  uint32_t mlen = 0;
  tpu_proto_error_t perr;
  if (s->len < TPU_FRAME_HEADER_SIZE) {
    snprintf(msg, sizeof msg, "request has %zu bytes of body: expected a gRPC message (a 5-byte "
             "prefix and a protobuf message)", s->len);
    refuse(h, s, TPU_CODE_INVALID_ARGUMENT, msg);
    return;
  }
  tpu_proto_status_t st = tpu_frame_parse_header(s->body, srv->cfg.max_message_bytes, &mlen, &perr);
  if (st != TPU_PROTO_OK) {
    refuse(h, s, tpu_proto_status_grpc_code(st), perr.msg);
    return;
  }
  if ((size_t)mlen != s->len - TPU_FRAME_HEADER_SIZE) {
    snprintf(msg, sizeof msg, "request body holds %zu bytes after the prefix, which announces %"
             PRIu32 ": expected exactly one message (tpud's methods are unary)",
             s->len - TPU_FRAME_HEADER_SIZE, mlen);
    refuse(h, s, TPU_CODE_INVALID_ARGUMENT, msg);
    return;
  }
  /* Answers the client does not take (its flow-control window stays shut) are held here; past
   * max-unsent-bytes of them, new calls are refused rather than buffered without bound. */
  if (h->pending_out + conn->reserved > srv->cfg.max_unsent_bytes) {
    snprintf(msg, sizeof msg, "this connection holds %zu bytes of answers the client has not "
             "accepted (its HTTP/2 flow-control window is shut) or still computing, over "
             "max-unsent-bytes (%" PRIu64 ")", h->pending_out + conn->reserved,
             srv->cfg.max_unsent_bytes);
    refuse(h, s, TPU_CODE_RESOURCE_EXHAUSTED, msg);
    return;
  }
  /* Calls of reset streams keep counting until their compute ends; within one input slice the
   * pause in framed.c cannot stop dispatch, so this is the hard bound. */
  if (conn->ncalls >= (size_t)srv->cfg.max_inflight_per_conn + srv->cfg.grpc_max_streams) {
    snprintf(msg, sizeof msg, "%zu calls in flight on this connection (max-inflight-per-conn %u "
             "plus grpc-max-streams %u), counting those of reset streams", conn->ncalls,
             srv->cfg.max_inflight_per_conn, srv->cfg.grpc_max_streams);
    refuse(h, s, TPU_CODE_RESOURCE_EXHAUSTED, msg);
    return;
  }
  /* Every "authorization" header counts (dispatch refuses more than one, the same rule as for
   * a framed envelope and HTTP). */
  tpu__request_t r = {.method = s->method, .id = (uint64_t)s->id, .received_us = tpu_now_us(),
                      .timeout_us = s->has_timeout ? s->timeout_us : 0,
                      .peer = tpu__conn_peer(conn), .authz = s->authz[0],
                      .authz_len = s->authz[0] ? strlen(s->authz[0]) : 0, .n_authz = s->n_authz,
                      .payload = s->body + TPU_FRAME_HEADER_SIZE, .payload_len = mlen};
  tpu__dispatch(&conn->origin, &r);
  /* The payload was unpacked (copied); the body can go. s may be answered (and closed) by now
   * only after the receive returns, so s is still valid here. */
  drop_body(h, s);
}

/* ---- nghttp2 callbacks ---- */

/*
 * Stream ids (RFC 9113 section 5.1.1): a client opens streams with increasing odd ids, and an id
 * it skipped is closed for good; "an endpoint that receives an unexpected stream identifier MUST
 * respond with a connection error of type PROTOCOL_ERROR". nghttp2 refuses ids of 0, even ids
 * and HEADERS on streams it still knows closed, but it ignores, silently, a HEADERS whose id is
 * below the newest stream and belongs to no stream it remembers (it cannot tell an id never
 * used from a stream closed long ago). So this remembers the ids a client skipped and answers
 * a HEADERS on one of them with GOAWAY PROTOCOL_ERROR. A HEADERS below the newest id on a stream
 * that was opened stays nghttp2's: trailers on an open stream, discarded after our RST_STREAM
 * (section 5.1: the client may have sent it before our reset arrived), STREAM_CLOSED else.
 */
static int in_gap(const tpu__h2_t *h, int32_t id) {
  for (size_t i = 0; i < h->ngaps; i++)
    if (id >= h->gaps[i].lo && id <= h->gaps[i].hi) return 1;
  return 0;
}

static int on_begin_frame(nghttp2_session *session, const nghttp2_frame_hd *hd, void *ud) {
  tpu__h2_t *h = ud;
  int32_t id = hd->stream_id;
  if (hd->type != NGHTTP2_HEADERS || id <= 0 || !(id & 1)) return 0; /* nghttp2's to refuse */
  if (id > h->max_client_id) {
    int64_t next = h->max_client_id ? (int64_t)h->max_client_id + 2 : 1; /* the id due */
    if (id > next) { /* ids skipped: closed for good */
      if (h->ngaps == H2_MAX_GAPS) {
        memmove(h->gaps, h->gaps + 1, (H2_MAX_GAPS - 1) * sizeof h->gaps[0]);
        h->ngaps--;
      }
      h->gaps[h->ngaps].lo = (int32_t)next;
      h->gaps[h->ngaps].hi = id - 2;
      h->ngaps++;
    }
    h->max_client_id = id;
    return 0;
  }
  if (!in_gap(h, id)) return 0;
  tpu_stats_inc(&tpu_stats.bad_frames, 1);
  tpu_log_warn("connection %llu from %s: HEADERS on stream %d, which the client skipped (it "
               "has opened stream %d): stream ids must increase (RFC 9113 section 5.1.1); "
               "GOAWAY PROTOCOL_ERROR", (unsigned long long)h->conn->serial, h->conn->peer, id,
               h->max_client_id);
  nghttp2_session_terminate_session(session, NGHTTP2_PROTOCOL_ERROR);
  return 0;
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *ud) {
  tpu__h2_t *h = ud;
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  h2_stream_t *s = calloc(1, sizeof *s);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
  s->h2 = h;
  s->id = frame->hd.stream_id;
  snprintf(s->path, sizeof s->path, "(none)");
  nghttp2_session_set_stream_user_data(session, s->id, s);
  s->next = h->streams;
  if (h->streams) h->streams->prev = s;
  h->streams = s;
  return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud) {
  tpu__h2_t *h = ud;
  h2_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
  if (!s || s->state != S_READING) return 0;
  s->header_bytes += namelen + valuelen + 32;
  if (s->header_bytes > srv_of(h)->cfg.grpc_max_header_bytes) {
    char lim[24];
    snprintf(lim, sizeof lim, "%u", srv_of(h)->cfg.grpc_max_header_bytes);
    refuse_later(s, TPU_CODE_RESOURCE_EXHAUSTED,
                 "request headers exceed grpc-max-header-bytes (%s bytes)", lim);
    return 0;
  }
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0; /* client trailers: nothing used */
#define IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)
  if (IS(":path")) {
    s->method = tpu_grpc_method_of_path(value, valuelen);
    s->reflect = tpu_reflection_path(value, valuelen);
    s->watch = valuelen == sizeof "/grpc.health.v1.Health/Watch" - 1 &&
               !memcmp(value, "/grpc.health.v1.Health/Watch", valuelen);
    size_t n = valuelen < sizeof s->path - 1 ? valuelen : sizeof s->path - 1;
    memcpy(s->path, value, n);
    s->path[n] = '\0';
    for (size_t i = 0; i < n; i++)
      if (!isprint((unsigned char)s->path[i])) s->path[i] = '?';
  } else if (IS(":method")) {
    s->bad_method = !(valuelen == 4 && memcmp(value, "POST", 4) == 0);
  } else if (IS("content-type")) {
    s->has_type = 1;
    s->bad_type = !tpu_grpc_content_type_ok(value, valuelen);
  } else if (IS("grpc-timeout")) {
    if (tpu_grpc_parse_timeout(value, valuelen, &s->timeout_us) == 0) {
      s->has_timeout = 1;
    } else {
      char v[16];
      size_t n = valuelen < sizeof v - 1 ? valuelen : sizeof v - 1;
      memcpy(v, value, n);
      v[n] = '\0';
      refuse_later(s, TPU_CODE_INVALID_ARGUMENT,
                   "grpc-timeout '%s' is not valid: expected 1 to 8 digits and a unit "
                   "(H, M, S, m, u or n)", v);
    }
  } else if (IS("authorization")) {
    if (s->n_authz < 2) {
      char *v = malloc(valuelen + 1);
      if (!v) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      memcpy(v, value, valuelen);
      v[valuelen] = '\0';
      s->authz[s->n_authz] = v;
    }
    s->n_authz++;
  } else if (IS("grpc-encoding")) {
    if (!(valuelen == 8 && memcmp(value, "identity", 8) == 0))
      refuse_later(s, TPU_CODE_UNIMPLEMENTED,
                   "%s", "grpc-encoding other than identity: tpud does not compress messages");
  }
#undef IS
  return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *ud) {
  tpu__h2_t *h = ud;
  h2_stream_t *s = nghttp2_session_get_stream_user_data(session, stream_id);
  if (!s || s->state != S_READING || s->code != TPU_CODE_OK) return 0; /* discarded */
  const tpu_config_t *cfg = &srv_of(h)->cfg;
  size_t limit = (size_t)cfg->max_message_bytes + TPU_FRAME_HEADER_SIZE;
  char lim[40];
  if (s->len + len > limit) {
    snprintf(lim, sizeof lim, "%" PRIu64, cfg->max_message_bytes);
    refuse_later(s, TPU_CODE_RESOURCE_EXHAUSTED,
                 "request message exceeds max-message-bytes (%s bytes)", lim);
  } else if (s->len + len > s->cap) {
    size_t cap = s->cap ? s->cap : 1024;
    while (cap < s->len + len) cap *= 2;
    if (cap > limit) cap = limit;
    if (h->body_bytes - s->cap + cap > limit) {
      snprintf(lim, sizeof lim, "%" PRIu64, cfg->max_message_bytes);
      refuse_later(s, TPU_CODE_RESOURCE_EXHAUSTED,
                   "requests being received on this connection exceed max-message-bytes "
                   "(%s bytes) together", lim);
    } else {
      uint8_t *b = realloc(s->body, cap);
      if (!b) {
        refuse_later(s, TPU_CODE_RESOURCE_EXHAUSTED, "%s", "out of memory");
      } else {
        h->body_bytes += cap - s->cap;
        s->body = b;
        s->cap = cap;
      }
    }
  }
  if (s->code != TPU_CODE_OK) {
    /* Refused: answer now (the client may still be sending; the rest is discarded). */
    drop_body(h, s);
    s->state = S_DISPATCHED;
    refuse(h, s, s->code, s->msg);
    return 0;
  }
  memcpy(s->body + s->len, data, len);
  s->len += len;
  if (s->reflect && !s->bad_method && !s->bad_type) reflect_messages(h, s);
  return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *ud) {
  tpu__h2_t *h = ud;
  switch (frame->hd.type) {
  case NGHTTP2_SETTINGS:
    if ((frame->hd.flags & NGHTTP2_FLAG_ACK) && !h->settings_acked) {
      h->settings_acked = 1;
      h->host->settled(h->conn);
    }
    return 0;
  case NGHTTP2_HEADERS:
  case NGHTTP2_DATA: {
    h2_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!s) return 0;
    /* No content-type at all does not begin with "application/grpc" either: 415, as the gRPC
     * HTTP/2 protocol says for any other type (PROTOCOL-HTTP2.md, "Requests"). */
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
        !s->has_type)
      s->bad_type = 1;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
      dispatch(h, s);
    } else if (frame->hd.type == NGHTTP2_HEADERS && s->state == S_READING &&
               (s->code != TPU_CODE_OK || (s->method == 0 && !s->reflect && !s->watch) ||
                s->bad_method ||
                s->bad_type)) {
      dispatch(h, s); /* refused from the headers alone: answer without waiting for the body */
    }
    return 0;
  }
  case NGHTTP2_RST_STREAM: {
    uint64_t now = tpu_now_us();
    h->reset_tokens += (double)(now - h->reset_at_us) * H2_RESET_RATE / 1e6;
    if (h->reset_tokens > H2_RESET_BURST) h->reset_tokens = H2_RESET_BURST;
    h->reset_at_us = now;
    if (h->reset_tokens < 1.0) {
      tpu_stats_inc(&tpu_stats.bad_frames, 1);
      tpu_log_warn("connection %llu from %s: more than %d stream resets at once or %d a second "
                   "(rapid reset); GOAWAY ENHANCE_YOUR_CALM", (unsigned long long)h->conn->serial,
                   h->conn->peer, H2_RESET_BURST, H2_RESET_RATE);
      nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM);
      return 0;
    }
    h->reset_tokens -= 1.0;
    return 0;
  }
  default:
    return 0;
  }
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *ud) {
  tpu__h2_t *h = ud;
  h2_stream_t *s = nghttp2_session_get_stream_user_data(session, stream_id);
  if (!s) return 0;
  if (s->state == S_DISPATCHED) {
    /* Closed before its answer: the client reset it (or the connection is going). */
    for (tpu__call_t *c = h->conn->calls; c; c = c->next)
      if (c->id == (uint64_t)stream_id) {
        atomic_store(&c->cancel, 1);
        break;
      }
    tpu_log_debug("connection %llu stream %d reset by the client (%s) before its answer",
                  (unsigned long long)h->conn->serial, stream_id,
                  nghttp2_http2_strerror(error_code));
  }
  nghttp2_session_set_stream_user_data(session, stream_id, NULL);
  stream_free(h, s);
  return 0;
}

static ssize_t read_answer(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                           size_t length, uint32_t *data_flags, nghttp2_data_source *source,
                           void *ud) {
  tpu__h2_t *h = ud;
  h2_stream_t *s = source->ptr;
  size_t n = s->out_len - s->out_off;
  if (n > length) n = length;
  memcpy(buf, s->out + s->out_off, n);
  s->out_off += n;
  h->pending_out -= n;
  tpu_stats_sub(&tpu_stats.buffered_bytes, n); /* now in the connection's output (counted) */
  if (s->out_off == s->out_len) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv trailers[] = {NV("grpc-status", "0")};
    int rv = nghttp2_submit_trailer(session, stream_id, trailers, 1);
    if (rv != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return (ssize_t)n;
}

static int on_error(nghttp2_session *session, int lib_error_code, const char *msg, size_t len,
                    void *ud) {
  tpu__h2_t *h = ud;
  tpu_log_debug("connection %llu from %s: HTTP/2: %.*s", (unsigned long long)h->conn->serial,
                h->conn->peer, (int)len, msg);
  return 0;
}

/* ---- the interface to framed.c ---- */

int tpu__grpc_open(tpu__conn_t *conn, const tpu__grpc_host_t *host) {
  const tpu_config_t *cfg = &conn->origin.srv->cfg;
  tpu__h2_t *h = calloc(1, sizeof *h);
  nghttp2_session_callbacks *cb = NULL;
  nghttp2_option *opt = NULL;
  if (!h || nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0) goto fail;
  h->conn = conn;
  h->host = host;
  h->reset_tokens = H2_RESET_BURST;
  h->reset_at_us = tpu_now_us();
  nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  nghttp2_session_callbacks_set_error_callback2(cb, on_error);
  nghttp2_option_set_stream_reset_rate_limit(opt, 2 * H2_RESET_BURST, 2 * H2_RESET_RATE);
  nghttp2_option_set_max_settings(opt, 32);
  if (nghttp2_session_server_new2(&h->session, cb, h, opt) != 0) goto fail;
  nghttp2_session_callbacks_del(cb);
  nghttp2_option_del(opt);
  cb = NULL;
  opt = NULL;
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->grpc_max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, cfg->grpc_max_header_bytes},
  };
  if (nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, 3) != 0 ||
      nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW) != 0)
    goto fail;
  conn->h2 = h;
  return 0;
fail:
  if (cb) nghttp2_session_callbacks_del(cb);
  if (opt) nghttp2_option_del(opt);
  if (h && h->session) nghttp2_session_del(h->session);
  free(h);
  return -1;
}

void tpu__grpc_free(tpu__conn_t *conn) {
  tpu__h2_t *h = conn->h2;
  if (!h) return;
  conn->h2 = NULL;
  /* nghttp2_session_del calls no stream-close callback: free the streams' data here. */
  nghttp2_session_del(h->session);
  while (h->streams) stream_free(h, h->streams);
  free(h);
}

int tpu__grpc_recv(tpu__conn_t *conn, const uint8_t *data, size_t len) {
  tpu__h2_t *h = conn->h2;
  h->in_recv = 1;
  ssize_t n = nghttp2_session_mem_recv(h->session, data, len);
  h->in_recv = 0;
  if (n >= 0) return 0;
  tpu_stats_inc(&tpu_stats.bad_frames, 1);
  tpu_log_warn("connection %llu from %s: HTTP/2 error: %s; closing", (unsigned long long)conn->serial,
               conn->peer,
               n == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? "not the HTTP/2 connection preface"
                                                 : nghttp2_strerror((int)n));
  if (n != NGHTTP2_ERR_BAD_CLIENT_MAGIC)
    nghttp2_session_terminate_session(h->session, n == NGHTTP2_ERR_FLOODED
                                                      ? NGHTTP2_ENHANCE_YOUR_CALM
                                                      : NGHTTP2_PROTOCOL_ERROR);
  return -1;
}

int tpu__grpc_output(tpu__conn_t *conn, struct evbuffer *out, size_t limit) {
  tpu__h2_t *h = conn->h2;
  while (evbuffer_get_length(out) < limit) {
    const uint8_t *data;
    ssize_t n = nghttp2_session_mem_send(h->session, &data);
    if (n < 0) {
      tpu_log_warn("connection %llu from %s: HTTP/2 error: %s; closing",
                   (unsigned long long)conn->serial, conn->peer, nghttp2_strerror((int)n));
      return -1;
    }
    if (n == 0) break;
    if (evbuffer_add(out, data, (size_t)n) != 0) return -1;
  }
  return nghttp2_session_want_read(h->session) || nghttp2_session_want_write(h->session) ? 0 : 1;
}

void tpu__grpc_send(tpu__conn_t *conn, const tpu_envelope_response_t *resp) {
  tpu__h2_t *h = conn->h2;
  int32_t id = (int32_t)resp->id;
  h2_stream_t *s = nghttp2_session_get_stream_user_data(h->session, id);
  if (!s || s->state == S_ANSWERED) return; /* reset by the client: nobody to tell */
  if (resp->code != TPU_CODE_OK) {
    respond_error(h, s, resp->code, resp->message);
  } else {
    size_t len = resp->payload_msg ? protobuf_c_message_get_packed_size(resp->payload_msg)
                                   : resp->payload_len;
    const tpu_config_t *cfg = &conn->origin.srv->cfg;
    char msg[160];
    if (len > cfg->max_message_bytes) {
      snprintf(msg, sizeof msg, "response of %zu bytes exceeds max-message-bytes (%" PRIu64 ")",
               len, cfg->max_message_bytes);
      respond_error(h, s, TPU_CODE_RESOURCE_EXHAUSTED, msg);
    } else if (!(s->out = malloc(TPU_FRAME_HEADER_SIZE + len))) {
      respond_error(h, s, TPU_CODE_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      tpu_frame_write_header(s->out, len, NULL);
      if (resp->payload_msg)
        protobuf_c_message_pack(resp->payload_msg, s->out + TPU_FRAME_HEADER_SIZE);
      else if (len)
        memcpy(s->out + TPU_FRAME_HEADER_SIZE, resp->payload, len);
      s->out_len = TPU_FRAME_HEADER_SIZE + len;
      s->out_off = 0;
      h->pending_out += s->out_len;
      tpu_stats_inc(&tpu_stats.buffered_bytes, s->out_len); /* max-buffered-bytes (dispatch/call.c) */
      s->state = S_ANSWERED;
      nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                          NV("grpc-accept-encoding", "identity")};
      nghttp2_data_provider prd = {.source.ptr = s, .read_callback = read_answer};
      int rv = nghttp2_submit_response(h->session, id, nva, 3, &prd);
      if (rv != 0)
        tpu_log_debug("connection %llu stream %d: cannot answer: %s",
                      (unsigned long long)conn->serial, id, nghttp2_strerror(rv));
    }
  }
  if (!h->in_recv) h->host->flush(conn);
}

void tpu__grpc_goaway(tpu__conn_t *conn, const char *why) {
  tpu__h2_t *h = conn->h2;
  if (!h) return;
  int32_t last = nghttp2_session_get_last_proc_stream_id(h->session);
  nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR,
                        (const uint8_t *)why, strlen(why));
}

int tpu__grpc_settled(const tpu__conn_t *conn) { return conn->h2 && conn->h2->settings_acked; }
