/*
 * framed.c - the native port: connections, frames, back-pressure, and the origin that dispatch
 * answers through.
 *
 * DESIGN
 * A service of each I/O thread (net/io.h): accepted sockets arrive as messages on the thread's
 * queue, and the thread owns its connections; nothing else touches them. Connections are raw
 * sockets (sock.h, shared with the HTTP port): a
 * read event that stays enabled, a flat input buffer that frames are cut from in place with
 * tpu_frame_parse_header (the length is checked before room for the body is made), an output
 * evbuffer written with one writev at the end of each input's processing, and answers of
 * completions written together by one deferred flush after the queue's batch. Envelopes are
 * decoded into requests for the dispatch layer (dispatch/call.h), whose answers come back
 * through the connection's origin (conn_respond); an HTTP/2 connection's bytes go to grpc.c,
 * which makes the same requests.
 *
 * Back-pressure: a connection stops reading when it has max-inflight-per-conn calls in flight or
 * more than max-unsent-bytes of output waiting; it resumes (and parses what is already buffered)
 * when a completion or a write brings it back under both limits. Across connections (both
 * ports) --max-buffered-bytes bounds the answers held: every output buffer counts its bytes in
 * tpud_buffered_bytes (sock.c) and every MatMul or infer call reserves its answer there before
 * it is accepted (tpu__budget_reserve), or is refused OVERLOADED (RESOURCE_EXHAUSTED on the
 * wire, HTTP 503); work already accepted
 * is never dropped, and cheap answers (health, metadata, errors) are not refused. The kernel's socket buffers
 * then push back on the client. Pausing and resuming are the only epoll_ctl calls of a
 * connection besides the write event, which is armed only while the kernel refuses bytes.
 *
 * Lifetime: a connection whose socket closes (EOF, error, idle timeout, fatal frame) sets the
 * cancel flag of each call in flight and lingers until their completions return; the last one
 * frees it (never inside one of its own callbacks: conn_hold). No lock here: every field is
 * touched by the owning thread only, except the queue (its own mutex) and call->cancel (atomic).
 *
 * Timeouts come from the sock set's once-a-second sweep: the TLS handshake's and, for HTTP/2,
 * the SETTINGS acknowledgement's (--tls-handshake-timeout-s), then the idle timeout (HTTP/2:
 * GOAWAY first), which does not apply while calls are in flight or output waits.
 *
 * TLS (--tls-cert): the socket carries an SSL in accept state, the handshake driven by sock.c
 * on this thread's loop without blocking it. Until it is done the timeout is
 * --tls-handshake-timeout-s (a silent or slow peer costs one slot for that long, and
 * max-connections bounds the slots); then the idle timeout takes over and the verified client
 * certificate's subject becomes the connection's identity. A failed handshake (plaintext, bad or
 * missing client certificate) is one debug line and a closed socket. A client that closes
 * without close_notify has still sent complete frames (an end of stream, not an error).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "framed.h"
#include "front.h"
#include "log.h"
#include "server_int.h"

/* This thread's native-port service. */
typedef struct tpu__framed_io {
  tpu__service_t svc;
  tpu__io_t *io;
  tpu_server_t *srv;
  tpu__sockset_t socks;    /* open connections (sock.h), their sweep and flushes */
  size_t nconns;
  size_t nlinger;          /* closed connections waiting for completions */
  int stopping;
} tpu__framed_io_t;

/* An accepted socket on its way to an I/O thread. */
typedef struct {
  tpu__msg_t msg;
  int fd;
  char peer[64];
} conn_msg_t;

static void conn_process(tpu__conn_t *conn);
static void conn_close(tpu__conn_t *conn, const char *why);
static void fio_check_idle(tpu__framed_io_t *f);

/* ---- connection lifetime ---- */

static tpu__conn_t *conn_of(tpu__sock_t *s) { return tpu_container_of(s, tpu__conn_t, sock); }
static tpu__conn_t *conn_of_origin(tpu__origin_t *o) {
  return tpu_container_of(o, tpu__conn_t, origin);
}

static void conn_free(tpu__conn_t *conn) {
  tpu__framed_io_t *f = conn->fio;
  f->nlinger--;
  tpu__sock_free(&conn->sock);
  free(conn);
  fio_check_idle(f);
}

/* A callback that may close the connection holds it, so that it is freed only on the way out. */
static void conn_hold(tpu__conn_t *conn) { conn->hold++; }

static void conn_release(tpu__conn_t *conn) {
  if (--conn->hold == 0 && conn->origin.closed && conn->ncalls == 0) conn_free(conn);
}

static void conn_close(tpu__conn_t *conn, const char *why) {
  if (conn->origin.closed) return;
  tpu__framed_io_t *f = conn->fio;
  tpu_log_debug("connection %llu from %s closed: %s", (unsigned long long)conn->serial,
                conn->peer, why);
  conn->origin.closed = 1;
  tpu__sock_close(&conn->sock);
  tpu__grpc_free(conn);
  tpu_stats_dec(&tpu_stats.connections_open);
  for (tpu__call_t *c = conn->calls; c; c = c->next) atomic_store(&c->cancel, 1);
  f->nconns--;
  f->nlinger++;
  if (conn->ncalls == 0 && conn->hold == 0) conn_free(conn);
}

/* ---- output ---- */

static void free_frame(const void *data, size_t len, void *arg) { free(arg); }

static void conn_send(tpu__conn_t *conn, const tpu_envelope_response_t *resp) {
  if (conn->origin.closed) return;
  if (conn->h2) {
    tpu__grpc_send(conn, resp);
    return;
  }
  uint8_t *frame = NULL;
  size_t len = 0;
  tpu_proto_error_t perr;
  tpu_proto_status_t st = tpu_envelope_encode_response_alloc(resp, &frame, &len, &perr);
  if (st == TPU_PROTO_OK && len - TPU_FRAME_HEADER_SIZE > conn->fio->srv->cfg.max_message_bytes) {
    free(frame);
    frame = NULL;
    st = TPU_PROTO_ETOOBIG;
    snprintf(perr.msg, sizeof perr.msg,
             "response of %zu bytes exceeds max-message-bytes (%llu)", len,
             (unsigned long long)conn->fio->srv->cfg.max_message_bytes);
  }
  if (st != TPU_PROTO_OK) {
    /* The response cannot be sent (too large, or an internal error): say so instead. */
    tpu_envelope_response_t e = {.id = resp->id,
                                 .code = st == TPU_PROTO_ETOOBIG ? TPU_CODE_RESOURCE_EXHAUSTED
                                                                 : TPU_CODE_INTERNAL,
                                 .message = perr.msg};
    if (tpu_envelope_encode_response_alloc(&e, &frame, &len, NULL) != TPU_PROTO_OK) {
      conn_close(conn, "cannot encode a response");
      return;
    }
  }
  /* Written by whoever called: the end of the input's processing, or the deferred flush. */
  if (evbuffer_add_reference(conn->sock.out, frame, len, free_frame, frame) != 0) {
    free(frame);
    conn_close(conn, "out of memory");
  }
}

/* ---- the origin: how dispatch answers, tracks and forgets calls on this connection ---- */

static void conn_respond(tpu__call_t *call, int code, const char *msg,
                         const ProtobufCMessage *payload) {
  tpu_envelope_response_t r = {.id = call->id, .code = tpu_code_wire(code),
                               .message = code != TPU_CODE_OK ? msg : NULL,
                               .payload_msg = code == TPU_CODE_OK ? payload : NULL};
  conn_send(conn_of_origin(call->origin), &r);
}

static void conn_track(tpu__call_t *call) {
  tpu__conn_t *conn = conn_of_origin(call->origin);
  conn->reserved += call->answer_bytes;
  call->prev = NULL;
  call->next = conn->calls;
  if (conn->calls) conn->calls->prev = call;
  conn->calls = call;
  conn->ncalls++;
}

static void conn_untrack(tpu__call_t *call) {
  tpu__conn_t *conn = conn_of_origin(call->origin);
  if (call->prev)
    call->prev->next = call->next;
  else
    conn->calls = call->next;
  if (call->next) call->next->prev = call->prev;
  conn->ncalls--;
  conn->reserved -= call->answer_bytes;
  /* Written after this batch of completions, together (conn_write lingers once an HTTP/2
   * session that is over has written all, and resumes reading under the limits); a closed
   * connection is freed after its last call. */
  if (!conn->origin.closed)
    tpu__sock_flush_later(&conn->sock);
  else if (conn->ncalls == 0 && conn->hold == 0)
    conn_free(conn);
}

/* Framed ids are the client's: one still in flight cannot be reused (gRPC's stream ids never
 * are, so an HTTP/2 connection's lookups always miss). */
static int conn_in_flight(tpu__origin_t *o, uint64_t id) {
  for (tpu__call_t *c = conn_of_origin(o)->calls; c; c = c->next)
    if (c->id == id) return 1;
  return 0;
}

static const tpu__origin_ops_t conn_ops = {.respond = conn_respond, .track = conn_track,
                                           .untrack = conn_untrack,
                                           .in_flight = conn_in_flight};



/* ---- back-pressure ---- */

/* Framed: the answers of the calls in flight count as output already, so a client that never
 * reads holds at most max-unsent-bytes plus one answer, not max-inflight-per-conn answers.
 * HTTP/2 keeps reading (the client's WINDOW_UPDATEs must get through); grpc.c refuses new calls
 * past the same figure instead. */
static int over_limits(tpu__conn_t *conn) {
  const tpu_config_t *cfg = &conn->fio->srv->cfg;
  size_t out = tpu__sock_unsent(&conn->sock) + (conn->h2 ? 0 : conn->reserved);
  return conn->ncalls >= cfg->max_inflight_per_conn || out > cfg->max_unsent_bytes;
}

static void stop_reading(tpu__conn_t *conn) {
  conn->read_paused = 1;
  tpu__sock_pause(&conn->sock);
}

static void maybe_pause(tpu__conn_t *conn) {
  if (!conn->origin.closed && !conn->read_paused && over_limits(conn)) stop_reading(conn);
}

/* Back under both limits: read again, parse what is already buffered, write its answers later. */
static void maybe_resume(tpu__conn_t *conn) {
  if (conn->origin.closed || !conn->read_paused || conn->close_after_write || conn->fio->stopping)
    return;
  if (over_limits(conn)) return;
  conn->read_paused = 0;
  tpu__sock_resume(&conn->sock);
  conn_process(conn);
  if (!conn->origin.closed) tpu__sock_flush_later(&conn->sock);
}

/* ---- input ---- */

/* A frame error that desynchronizes the stream: answer with id 0, flush, close. */
static void fatal_frame(tpu__conn_t *conn, int code, const char *msg) {
  tpu_stats_inc(&tpu_stats.bad_frames, 1);
  tpu_log_warn("connection %llu from %s: %s; closing", (unsigned long long)conn->serial,
               conn->peer, msg);
  tpu__request_t r = {.id = 0, .peer = tpu__conn_peer(conn)};
  tpu__dispatch_refuse(&conn->origin, &r, code, msg); /* counted, audited, answered (id 0) */
  if (conn->origin.closed) return;
  conn->close_after_write = 1; /* conn_write closes once the error is written */
  stop_reading(conn);
}

/* ---- HTTP/2 (grpc.c) ---- */

/* Bytes handed to nghttp2 at a time: back-pressure is checked between slices. */
#define H2_SLICE 4096

/* Moves the session's frames into the output, up to max-unsent-bytes. Returns the bytes added. */
static size_t h2_pull(tpu__conn_t *conn) {
  struct evbuffer *out = conn->sock.out;
  size_t before = evbuffer_get_length(out);
  if (tpu__grpc_output(conn, out, conn->fio->srv->cfg.max_unsent_bytes) != 0 &&
      !conn->close_after_write) {
    conn->close_after_write = 1;
    stop_reading(conn);
  }
  return evbuffer_get_length(out) - before;
}

static void conn_flush(tpu__conn_t *conn) {
  if (conn->origin.closed || !conn->h2) return;
  h2_pull(conn);
  tpu__sock_flush_later(&conn->sock);
}

static void conn_settled(tpu__conn_t *conn) {
  conn->sock.deadline_us = 0;
  conn->sock.timeout_us = (uint64_t)conn->fio->srv->cfg.idle_timeout_s * 1000000u;
}

static void h2_process(tpu__conn_t *conn) {
  tpu__sock_t *s = &conn->sock;
  while (!conn->origin.closed && !conn->read_paused && !conn->close_after_write) {
    size_t n = s->ilen - s->ioff;
    if (n == 0) break;
    if (n > H2_SLICE) n = H2_SLICE;
    int rc = tpu__grpc_recv(conn, (const uint8_t *)s->ibuf + s->ioff, n);
    if (conn->origin.closed) break;
    tpu__sock_consume(s, n);
    if (rc != 0) {
      conn->close_after_write = 1;
      stop_reading(conn);
      break;
    }
    maybe_pause(conn);
  }
}

/* The first bytes (or ALPN) say what the client speaks: the HTTP/2 preface begins with 'P', a
 * framed request with its flag byte (0 or 1). Returns 0, or -1 when the connection was closed. */
static int choose_protocol(tpu__conn_t *conn) {
  tpu__sock_t *s = &conn->sock;
  int h2 = tpu__sock_alpn_is(s, TPU_TLS_ALPN_H2) || s->ibuf[s->ioff] == 'P';
  if (!h2) {
    conn->proto = TPU__PROTO_FRAMED;
    return 0;
  }
  static const tpu__grpc_host_t host = {.flush = conn_flush, .settled = conn_settled};
  if (tpu__grpc_open(conn, &host) != 0) {
    conn_close(conn, "out of memory");
    return -1;
  }
  conn->proto = TPU__PROTO_H2;
  /* Until the client acknowledges our SETTINGS it has the handshake's time, not the idle's,
   * and counted from now: PINGs or a preface dribbled a byte a second do not extend it. */
  s->timeout_us = (uint64_t)conn->fio->srv->cfg.tls_handshake_timeout_s * 1000000u;
  s->last_us = tpu_now_us();
  s->deadline_us = s->last_us + s->timeout_us;
  tpu_log_debug("connection %llu from %s: gRPC over HTTP/2", (unsigned long long)conn->serial,
                conn->peer);
  return 0;
}

/* A decoded envelope becomes a request of the dispatch layer. */
static void serve_envelope(tpu__conn_t *conn, Tpud__RequestEnvelope *env, uint64_t now) {
  const char *authz = tpu_envelope_request_metadata(env, "authorization");
  tpu__request_t r = {.method = env->method, .id = env->id, .received_us = now,
                      .timeout_us = env->timeout_us, .peer = tpu__conn_peer(conn),
                      .authz = authz, .authz_len = authz ? strlen(authz) : 0,
                      .n_authz = tpu_envelope_request_metadata_count(env, "authorization"),
                      .payload = env->payload.data, .payload_len = env->payload.len};
  tpu__dispatch(&conn->origin, &r);
}

static void conn_process(tpu__conn_t *conn) {
  tpu_server_t *srv = conn->fio->srv;
  tpu__sock_t *s = &conn->sock;
  if (conn->proto == TPU__PROTO_UNKNOWN) {
    if (conn->origin.closed || s->ilen == s->ioff) return;
    if (choose_protocol(conn) != 0) return;
  }
  if (conn->h2) {
    h2_process(conn);
    return;
  }
  while (!conn->origin.closed && !conn->read_paused && !conn->close_after_write) {
    size_t avail = s->ilen - s->ioff;
    if (avail < TPU_FRAME_HEADER_SIZE) return;
    const uint8_t *hdr = (const uint8_t *)s->ibuf + s->ioff;
    uint32_t len;
    tpu_proto_error_t perr;
    tpu_proto_status_t st = tpu_frame_parse_header(hdr, srv->cfg.max_message_bytes, &len, &perr);
    if (st != TPU_PROTO_OK) {
      fatal_frame(conn, tpu_proto_status_grpc_code(st), perr.msg);
      return;
    }
    size_t need = TPU_FRAME_HEADER_SIZE + (size_t)len;
    if (avail < need) { /* wait for the whole body, with room for it */
      if (tpu__sock_reserve(s, need) != 0) conn_close(conn, "out of memory");
      return;
    }
    uint64_t now = tpu_now_us();
    Tpud__RequestEnvelope *env = NULL;
    st = tpu_envelope_decode_request(hdr + TPU_FRAME_HEADER_SIZE, len, SIZE_MAX, &env, &perr);
    tpu__sock_consume(s, need); /* the envelope holds copies; nothing moves until the next read */
    if (st != TPU_PROTO_OK) {
      int code = tpu_proto_status_grpc_code(st);
      if (perr.request_id != 0 && !tpu_proto_status_fatal(st)) {
        /* The id was readable (e.g. unknown method): answer that request, keep going. */
        tpu__request_t r = {.id = perr.request_id, .peer = tpu__conn_peer(conn)};
        tpu__dispatch_refuse(&conn->origin, &r, code, perr.msg);
      } else {
        fatal_frame(conn, code, perr.msg);
        return;
      }
    } else {
      serve_envelope(conn, env, now);
      tpu_envelope_request_free(env);
    }
    maybe_pause(conn);
  }
}

/* Writes the output (HTTP/2: pulling the session's frames first, more as the kernel takes them);
 * then closes, lingers or resumes reading as due.
 * An HTTP/2 session that is over and has written its last frames (GOAWAY, last answers) is not
 * closed at once: a close with unread input (a WINDOW_UPDATE, a PING the client sent meanwhile)
 * makes the kernel send RST, and the client's stack may drop what it had not read yet. So
 * tpu__sock_linger: shut down our sending side, read and discard until the client closes, and
 * close then, or after 2 s. */
static void conn_write(tpu__conn_t *conn) {
  tpu__sock_t *s = &conn->sock;
  if (conn->origin.closed) return;
  for (int round = 0; round < 8; round++) {
    size_t pulled = conn->h2 ? h2_pull(conn) : 0;
    if (tpu__sock_write(s) != 0) {
      conn_close(conn, strerror(errno));
      return;
    }
    /* nghttp2 stopped at max-unsent-bytes and the kernel took it all: there may be more. */
    if (!conn->h2 || tpu__sock_unsent(s) || pulled < conn->fio->srv->cfg.max_unsent_bytes) break;
  }
  if (tpu__sock_unsent(s) == 0) {
    /* HTTP/2 lingers once the session is over (after GOAWAY: no stream left), not merely when
     * the output is empty: an answer may still wait for the client's WINDOW_UPDATE. */
    if (conn->h2 && conn->close_after_write) {
      tpu__sock_linger(s);
      return;
    }
    if (conn->close_after_write && !conn->h2) {
      conn_close(conn, "closed after a fatal frame error");
      return;
    }
    if (conn->fio->stopping && !conn->h2) {
      conn_close(conn, "server stopping");
      return;
    }
  }
  maybe_resume(conn);
}

/* ---- the sock's callbacks (sock.h) ---- */

/* Processes the input (when `input`), then writes; the connection outlives both (conn_hold). */
static void conn_serve(tpu__sock_t *s, int input) {
  tpu__conn_t *conn = conn_of(s);
  conn_hold(conn);
  if (input) conn_process(conn);
  conn_write(conn);
  conn_release(conn);
}

static void on_input(tpu__sock_t *s) { conn_serve(s, 1); }

static void on_flush(tpu__sock_t *s) { conn_serve(s, 0); }

static void on_eof(tpu__sock_t *s) {
  tpu__conn_t *conn = conn_of(s);
  if (s->ilen > s->ioff) {
    tpu_stats_inc(&tpu_stats.bad_frames, 1);
    tpu_log_warn("connection %llu from %s: stream ended inside a frame (%zu bytes pending)",
                 (unsigned long long)conn->serial, conn->peer, s->ilen - s->ioff);
  }
  conn_close(conn, "end of stream");
}

/* A socket error, a failed handshake, or the end of an HTTP/2 session's lingering close. */
static void on_close(tpu__sock_t *s, const char *why) { conn_close(conn_of(s), why); }

/* Handshake, SETTINGS-acknowledgement and idle timeouts. */
static void on_timeout(tpu__sock_t *s, uint64_t now) {
  tpu__conn_t *conn = conn_of(s);
  if (s->handshaking) {
    tpu_stats_inc(&tpu_stats.bad_frames, 1);
    conn_close(conn, "TLS handshake timeout");
    return;
  }
  if (conn->h2 && !tpu__grpc_settled(conn)) {
    tpu_stats_inc(&tpu_stats.bad_frames, 1);
    conn_close(conn, "HTTP/2 SETTINGS not acknowledged in time");
    return;
  }
  if (conn->ncalls > 0 || tpu__sock_unsent(s) > 0) {
    s->last_us = now; /* not idle: the client waits for us */
    return;
  }
  if (conn->h2 && !conn->close_after_write) { /* say goodbye; close once it is written */
    tpu__grpc_goaway(conn, "idle timeout");
    conn->close_after_write = 1;
    on_flush(s);
    return;
  }
  conn_close(conn, "idle timeout");
}

static const tpu__sock_ops_t native_sock_ops = {
    .input = on_input, .eof = on_eof, .flush = on_flush, .close = on_close,
    .timeout = on_timeout};

static void conn_open(tpu__framed_io_t *f, const conn_msg_t *m) {
  tpu_server_t *srv = f->srv;
  tpu__conn_t *conn = calloc(1, sizeof *conn);
  SSL *ssl = NULL;
  if (!conn) goto fail;
  if (srv->tls && !(ssl = tpu_tls_new_ssl(srv->tls, TPU_TLS_NATIVE))) goto fail;
  if (tpu__sock_open(&f->socks, &conn->sock, m->fd, ssl, m->peer) != 0) goto fail; /* owns ssl */
  conn->fio = f;
  conn->origin = (tpu__origin_t){.ops = &conn_ops, .srv = srv, .io = f->io,
                                 .wire = TPU__WIRE_FRAMED};
  conn->serial = atomic_fetch_add(&srv->next_conn_serial, 1) + 1;
  snprintf(conn->peer, sizeof conn->peer, "%s", m->peer);
  /* Under TLS the sweep applies --tls-handshake-timeout-s until the handshake is done. */
  conn->sock.timeout_us = (uint64_t)srv->cfg.idle_timeout_s * 1000000u;
  f->nconns++;
  tpu_log_debug("connection %llu from %s on I/O thread %u", (unsigned long long)conn->serial,
                conn->peer, f->io->index);
  return;
fail:
  tpu_log_warn("connection from %s dropped: out of memory", m->peer);
  close(m->fd);
  free(conn);
  tpu_stats_dec(&tpu_stats.connections_open);
}

/* ---- the service on each I/O thread (net/io.h) ---- */

static tpu__framed_io_t *fio_of(tpu__service_t *s) {
  return tpu_container_of(s, tpu__framed_io_t, svc);
}

static void fio_check_idle(tpu__framed_io_t *f) {
  if (f->stopping && f->nconns == 0 && f->nlinger == 0) tpu__io_service_idle(&f->svc, f->io);
}

/* GOAWAY to gRPC clients: they move to another server; streams already begun are answered,
 * later ones are refused unprocessed (REFUSED_STREAM), which clients retry safely. */
static void fio_drain(tpu__service_t *svc) {
  tpu__framed_io_t *f = fio_of(svc);
  for (tpu__sock_t *s = f->socks.socks, *sn; s; s = sn) {
    sn = s->next;
    tpu__conn_t *c = conn_of(s);
    if (!c->h2 || c->close_after_write) continue;
    tpu__grpc_goaway(c, "server draining");
    on_flush(s); /* may close c */
  }
}

static void fio_stop(tpu__service_t *svc) {
  tpu__framed_io_t *f = fio_of(svc);
  f->stopping = 1;
  tpu__sock_t *next;
  for (tpu__sock_t *s = f->socks.socks; s; s = next) {
    next = s->next;
    tpu__conn_t *c = conn_of(s);
    if (c->h2) {
      /* GOAWAY; answers still owed are sent as the client's flow control allows (so reading
       * goes on: WINDOW_UPDATE), then linger (tpu__sock_linger) until the client closes. */
      if (!s->lingering) {
        tpu__grpc_goaway(c, "server stopping");
        on_flush(s);
      }
      continue;
    }
    tpu__sock_pause(s);
    if (tpu__sock_unsent(s) == 0) conn_close(c, "server stopping");
  }
  fio_check_idle(f);
}

static void fio_force(tpu__service_t *svc) {
  tpu__framed_io_t *f = fio_of(svc);
  while (f->socks.socks) conn_close(conn_of(f->socks.socks), "server stopping (flush timed out)");
}

static void fio_free(tpu__service_t *svc) {
  tpu__framed_io_t *f = fio_of(svc);
  /* Anything left (only after a hard stop): free it. */
  while (f->socks.socks) conn_close(conn_of(f->socks.socks), "server stopped");
  tpu__sockset_free(&f->socks);
  free(f);
}

int tpu__framed_attach(tpu__io_t *io) {
  tpu_server_t *srv = io->srv;
  tpu__framed_io_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->io = io;
  f->srv = srv;
  f->svc = (tpu__service_t){.name = "native", .drain = fio_drain, .stop = fio_stop,
                            .force = fio_force, .free = fio_free};
  if (tpu__sockset_init(&f->socks, io->base, &native_sock_ops, "native",
                        srv->cfg.tls_handshake_timeout_s) != 0) {
    free(f);
    return -1;
  }
  tpu__io_add_service(io, &f->svc);
  return 0;
}

/* The native service of a thread (the one with the framed name). */
static tpu__framed_io_t *fio_on(tpu__io_t *io) {
  for (tpu__service_t *s = io->services; s; s = s->next)
    if (s->stop == fio_stop) return fio_of(s);
  return NULL;
}

static void run_conn(tpu__io_t *io, tpu__msg_t *msg) {
  conn_msg_t *m = tpu_container_of(msg, conn_msg_t, msg);
  tpu__framed_io_t *f = fio_on(io);
  if (!f || f->stopping) {
    close(m->fd);
    tpu_stats_dec(&tpu_stats.connections_open);
  } else {
    conn_open(f, m);
  }
  free(m);
}

static void drop_conn(tpu__msg_t *msg) {
  conn_msg_t *m = tpu_container_of(msg, conn_msg_t, msg);
  close(m->fd);
  tpu_stats_dec(&tpu_stats.connections_open);
  free(m);
}

void tpu__framed_hand_off(tpu_server_t *srv, int fd, const char *peer) {
  conn_msg_t *m = calloc(1, sizeof *m);
  if (!m) {
    close(fd);
    tpu_stats_dec(&tpu_stats.connections_open);
    return;
  }
  m->msg.run = run_conn;
  m->msg.drop = drop_conn;
  m->fd = fd;
  snprintf(m->peer, sizeof m->peer, "%s", peer);
  tpu__io_post(&srv->io[srv->next_io++ % srv->nio], &m->msg);
}
