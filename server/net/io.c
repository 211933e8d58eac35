/*
 * io.c - the I/O threads: connections, frames, back-pressure, completions.
 *
 * DESIGN
 * memcached-style: each I/O thread runs its own event_base and owns its connections; nothing
 * else touches them. It learns of new sockets, finished calls and the stop request only through
 * its queue (queue.h: an eventfd written when the queue goes empty → non-empty). It never runs
 * compute and never blocks. Connections are raw sockets (sock.h, shared with the HTTP port): a
 * read event that stays enabled, a flat input buffer that frames are cut from in place with
 * tpu_frame_parse_header (the length is checked before room for the body is made), an output
 * evbuffer written with one writev at the end of each input's processing, and answers of
 * completions written together by one deferred flush after the queue's batch. Envelopes are
 * decoded and handed to handlers.c; an HTTP/2 connection's bytes go to grpc.c instead.
 *
 * Back-pressure: a connection stops reading when it has max-inflight-per-conn calls in flight or
 * more than max-unsent-bytes of output waiting; it resumes (and parses what is already buffered)
 * when a completion or a write brings it back under both limits. Across connections (both
 * ports) --max-buffered-bytes bounds the answers held: every output buffer counts its bytes in
 * tpud_buffered_bytes (sock.c) and every MatMul or infer call reserves its answer there before
 * it is accepted (tpu__budget_reserve), or is refused RESOURCE_EXHAUSTED; work already accepted
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
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "server_int.h"

static void conn_process(tpu__conn_t *conn);
static void io_exit(tpu__io_t *io);
static void conn_close(tpu__conn_t *conn, const char *why);

/* ---- calls ---- */

/* ---- the buffered-answer budget ---- */

int tpu__budget_reserve(tpu_server_t *srv, size_t bytes, char *msg, size_t msglen) {
  uint64_t limit = srv->cfg.max_buffered_bytes;
  if (bytes > limit) { /* never fits: not "busy" (HTTP 413, not 503 "try again later") */
    tpu_stats_inc(&tpu_stats.buffered_refused, 1);
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
  snprintf(msg, msglen, TPU__BUSY ": answers not yet sent or still computing hold %llu bytes "
           "and this one needs %zu more, over max-buffered-bytes (%llu); try again later",
           (unsigned long long)before, bytes, (unsigned long long)limit);
  return -1;
}

void tpu__call_free(tpu__call_t *call) {
  if (!call) return;
  if (call->budget) tpu_stats_sub(&tpu_stats.buffered_bytes, call->budget);
  if (call->infer) protobuf_c_message_free_unpacked(&call->infer->base, NULL);
  if (call->mm) protobuf_c_message_free_unpacked(&call->mm->base, NULL);
  free(call->out);
  free(call->c);
  free(call->op);
  tpu__model_release(call->model); /* the model version may be freed now (repository.c) */
  free(call);
}

void tpu__call_complete(tpu__call_t *call) {
  call->msg.kind = TPU__MSG_DONE;
  tpu_queue_push(&call->io->queue, &call->msg.link);
}

/* Bytes the answer of a call will take (the output tensor, plus room for the envelope). */
static size_t answer_bytes(const tpu__call_t *c) {
  if (c->method == TPUD__METHOD__MODEL_INFER && c->model)
    return c->rows * (size_t)c->model->out_shape[1] * sizeof(float) + 256;
  if (c->method == TPUD__METHOD__MATMUL) return c->m * c->n * 4 + 256;
  return 256;
}

void tpu__conn_track(tpu__conn_t *conn, tpu__call_t *call) {
  call->conn = conn;
  call->answer_bytes = answer_bytes(call);
  conn->reserved += call->answer_bytes;
  call->prev = NULL;
  call->next = conn->calls;
  if (conn->calls) conn->calls->prev = call;
  conn->calls = call;
  conn->ncalls++;
  atomic_fetch_add(&conn->io->srv->inflight, 1);
}

static void conn_untrack(tpu__conn_t *conn, tpu__call_t *call) {
  if (call->prev)
    call->prev->next = call->next;
  else
    conn->calls = call->next;
  if (call->next) call->next->prev = call->prev;
  conn->ncalls--;
  conn->reserved -= call->answer_bytes;
}

/* ---- connection lifetime ---- */

static tpu__conn_t *conn_of(tpu__sock_t *s) { return tpu_container_of(s, tpu__conn_t, sock); }

static void conn_free(tpu__conn_t *conn) {
  tpu__io_t *io = conn->io;
  io->nlinger--;
  tpu__sock_free(&conn->sock);
  free(conn);
  if (io->stopping && io->nconns == 0 && io->nlinger == 0) io_exit(io);
}

/* A callback that may close the connection holds it, so that it is freed only on the way out. */
static void conn_hold(tpu__conn_t *conn) { conn->hold++; }

static void conn_release(tpu__conn_t *conn) {
  if (--conn->hold == 0 && conn->closed && conn->ncalls == 0) conn_free(conn);
}

static void conn_close(tpu__conn_t *conn, const char *why) {
  if (conn->closed) return;
  tpu__io_t *io = conn->io;
  tpu_log_debug("connection %llu from %s closed: %s", (unsigned long long)conn->serial,
                conn->peer, why);
  conn->closed = 1;
  tpu__sock_close(&conn->sock);
  tpu__grpc_free(conn);
  tpu_stats_dec(&tpu_stats.connections_open);
  for (tpu__call_t *c = conn->calls; c; c = c->next) atomic_store(&c->cancel, 1);
  io->nconns--;
  io->nlinger++;
  if (conn->ncalls == 0 && conn->hold == 0) conn_free(conn);
}

void tpu__conn_close(tpu__conn_t *conn, const char *why) { conn_close(conn, why); }

/* ---- output ---- */

static void free_frame(const void *data, size_t len, void *arg) { free(arg); }

void tpu__conn_send(tpu__conn_t *conn, const tpu_envelope_response_t *resp) {
  if (conn->closed) return;
  if (conn->h2) {
    tpu__grpc_send(conn, resp);
    return;
  }
  uint8_t *frame = NULL;
  size_t len = 0;
  tpu_proto_error_t perr;
  tpu_proto_status_t st = tpu_envelope_encode_response_alloc(resp, &frame, &len, &perr);
  if (st == TPU_PROTO_OK && len - TPU_FRAME_HEADER_SIZE > conn->io->srv->cfg.max_message_bytes) {
    free(frame);
    frame = NULL;
    st = TPU_PROTO_ETOOBIG;
    snprintf(perr.msg, sizeof perr.msg,
             "response of %zu bytes exceeds max-message-bytes (%llu)", len,
             (unsigned long long)conn->io->srv->cfg.max_message_bytes);
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

void tpu__conn_send_error(tpu__conn_t *conn, uint64_t id, int code, const char *msg) {
  tpu_envelope_response_t r = {.id = id, .code = code, .message = msg};
  tpu__conn_send(conn, &r);
}

/* ---- back-pressure ---- */

/* Framed: the answers of the calls in flight count as output already, so a client that never
 * reads holds at most max-unsent-bytes plus one answer, not max-inflight-per-conn answers.
 * HTTP/2 keeps reading (the client's WINDOW_UPDATEs must get through); grpc.c refuses new calls
 * past the same figure instead. */
static int over_limits(tpu__conn_t *conn) {
  const tpu_config_t *cfg = &conn->io->srv->cfg;
  size_t out = tpu__sock_unsent(&conn->sock) + (conn->h2 ? 0 : conn->reserved);
  return conn->ncalls >= cfg->max_inflight_per_conn || out > cfg->max_unsent_bytes;
}

static void stop_reading(tpu__conn_t *conn) {
  conn->read_paused = 1;
  tpu__sock_pause(&conn->sock);
}

static void maybe_pause(tpu__conn_t *conn) {
  if (!conn->closed && !conn->read_paused && over_limits(conn)) stop_reading(conn);
}

/* Back under both limits: read again, parse what is already buffered, write its answers later. */
static void maybe_resume(tpu__conn_t *conn) {
  if (conn->closed || !conn->read_paused || conn->close_after_write || conn->io->stopping)
    return;
  if (over_limits(conn)) return;
  conn->read_paused = 0;
  tpu__sock_resume(&conn->sock);
  conn_process(conn);
  if (!conn->closed) tpu__sock_flush_later(&conn->sock);
}

/* ---- input ---- */

/* A frame error that desynchronizes the stream: answer with id 0, flush, close. */
static void fatal_frame(tpu__conn_t *conn, int code, const char *msg) {
  tpu_stats_inc(&tpu_stats.bad_frames, 1);
  tpu_stats_inc(&tpu_stats.requests[code], 1);
  tpu_log_warn("connection %llu from %s: %s; closing", (unsigned long long)conn->serial,
               conn->peer, msg);
  tpu__audit_reject(conn->io->srv, conn->who[0] ? conn->who : conn->peer, NULL, NULL, NULL,
                    code, msg);
  tpu__conn_send_error(conn, 0, code, msg);
  if (conn->closed) return;
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
  if (tpu__grpc_output(conn, out, conn->io->srv->cfg.max_unsent_bytes) != 0 &&
      !conn->close_after_write) {
    conn->close_after_write = 1;
    stop_reading(conn);
  }
  return evbuffer_get_length(out) - before;
}

void tpu__conn_flush(tpu__conn_t *conn) {
  if (conn->closed || !conn->h2) return;
  h2_pull(conn);
  tpu__sock_flush_later(&conn->sock);
}

void tpu__conn_settled(tpu__conn_t *conn) {
  conn->sock.deadline_us = 0;
  conn->sock.timeout_us = (uint64_t)conn->io->srv->cfg.idle_timeout_s * 1000000u;
}

static void h2_process(tpu__conn_t *conn) {
  tpu__sock_t *s = &conn->sock;
  while (!conn->closed && !conn->read_paused && !conn->close_after_write) {
    size_t n = s->ilen - s->ioff;
    if (n == 0) break;
    if (n > H2_SLICE) n = H2_SLICE;
    int rc = tpu__grpc_recv(conn, (const uint8_t *)s->ibuf + s->ioff, n);
    if (conn->closed) break;
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
  if (tpu__grpc_open(conn) != 0) {
    conn_close(conn, "out of memory");
    return -1;
  }
  conn->proto = TPU__PROTO_H2;
  /* Until the client acknowledges our SETTINGS it has the handshake's time, not the idle's,
   * and counted from now: PINGs or a preface dribbled a byte a second do not extend it. */
  s->timeout_us = (uint64_t)conn->io->srv->cfg.tls_handshake_timeout_s * 1000000u;
  s->last_us = tpu_now_us();
  s->deadline_us = s->last_us + s->timeout_us;
  tpu_log_debug("connection %llu from %s: gRPC over HTTP/2", (unsigned long long)conn->serial,
                conn->peer);
  return 0;
}

static void conn_process(tpu__conn_t *conn) {
  tpu_server_t *srv = conn->io->srv;
  tpu__sock_t *s = &conn->sock;
  if (conn->proto == TPU__PROTO_UNKNOWN) {
    if (conn->closed || s->ilen == s->ioff) return;
    if (choose_protocol(conn) != 0) return;
  }
  if (conn->h2) {
    h2_process(conn);
    return;
  }
  while (!conn->closed && !conn->read_paused && !conn->close_after_write) {
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
        tpu_stats_inc(&tpu_stats.requests[code], 1);
        tpu__audit_reject(srv, conn->who[0] ? conn->who : conn->peer, NULL, NULL, NULL, code,
                          perr.msg);
        tpu__conn_send_error(conn, perr.request_id, code, perr.msg);
      } else {
        fatal_frame(conn, code, perr.msg);
        return;
      }
    } else {
      tpu__handle_request(conn, env, now);
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
  if (conn->closed) return;
  for (int round = 0; round < 8; round++) {
    size_t pulled = conn->h2 ? h2_pull(conn) : 0;
    if (tpu__sock_write(s) != 0) {
      conn_close(conn, strerror(errno));
      return;
    }
    /* nghttp2 stopped at max-unsent-bytes and the kernel took it all: there may be more. */
    if (!conn->h2 || tpu__sock_unsent(s) || pulled < conn->io->srv->cfg.max_unsent_bytes) break;
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
    if (conn->io->stopping && !conn->h2) {
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

static void conn_open(tpu__io_t *io, const tpu__conn_msg_t *m) {
  tpu__conn_t *conn = calloc(1, sizeof *conn);
  SSL *ssl = NULL;
  if (!conn) goto fail;
  if (io->srv->tls && !(ssl = tpu_tls_new_ssl(io->srv->tls, TPU_TLS_NATIVE))) goto fail;
  if (tpu__sock_open(&io->socks, &conn->sock, m->fd, ssl, m->peer) != 0) goto fail; /* owns ssl */
  conn->io = io;
  conn->serial = atomic_fetch_add(&io->srv->next_conn_serial, 1) + 1;
  snprintf(conn->peer, sizeof conn->peer, "%s", m->peer);
  /* Under TLS the sweep applies --tls-handshake-timeout-s until the handshake is done. */
  conn->sock.timeout_us = (uint64_t)io->srv->cfg.idle_timeout_s * 1000000u;
  io->nconns++;
  tpu_log_debug("connection %llu from %s on I/O thread %u", (unsigned long long)conn->serial,
                conn->peer, io->index);
  return;
fail:
  tpu_log_warn("connection from %s dropped: out of memory", m->peer);
  close(m->fd);
  free(conn);
  tpu_stats_dec(&tpu_stats.connections_open);
}

/* ---- the queue ---- */

static void io_stop_now(tpu__io_t *io);

/* Leaves the loop. With HTTP served the loop runs 100 ms more, for HTTP answers still being
 * written. */
static void io_exit(tpu__io_t *io) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
  event_base_loopexit(io->base, io->http ? &tv : NULL);
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg) {
  tpu__io_t *io = arg;
  while (io->socks.socks) conn_close(conn_of(io->socks.socks), "server stopping (flush timed out)");
  io_exit(io);
}

static void io_stop_now(tpu__io_t *io) {
  io->stopping = 1;
  /* Every HTTP call came back before this message (compute stopped first) and was answered;
   * stop accepting HTTP connections. Their connections are freed after the loop (tpu__io_free). */
  tpu__http_io_stop(io);
  tpu__sock_t *next;
  for (tpu__sock_t *s = io->socks.socks; s; s = next) {
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
  if (io->nconns == 0 && io->nlinger == 0) {
    io_exit(io);
    return;
  }
  /* Give slow readers a moment to take their last responses, then close regardless. */
  struct timeval tv = {.tv_sec = 2};
  io->stop_timer = evtimer_new(io->base, on_stop_timer, io);
  if (io->stop_timer) evtimer_add(io->stop_timer, &tv);
}

static void on_queue(evutil_socket_t fd, short what, void *arg) {
  tpu__io_t *io = arg;
  tpu_qnode_t *n = tpu_queue_take(&io->queue);
  while (n) {
    tpu_qnode_t *next = n->next;
    tpu__msg_t *m = tpu_container_of(n, tpu__msg_t, link);
    switch (m->kind) {
    case TPU__MSG_CONN: {
      tpu__conn_msg_t *cm = (tpu__conn_msg_t *)m;
      if (io->stopping) {
        close(cm->fd);
        tpu_stats_dec(&tpu_stats.connections_open);
      } else {
        conn_open(io, cm);
      }
      free(cm);
      break;
    }
    case TPU__MSG_DONE: {
      tpu__call_t *call = (tpu__call_t *)m;
      if (call->http) { /* an HTTP request (http.c) */
        tpu__http_done(io, call);
        atomic_fetch_sub(&io->srv->inflight, 1);
        break;
      }
      tpu__conn_t *conn = call->conn;
      int was_closed = conn->closed;
      conn_untrack(conn, call);
      /* The client went away (closed, or reset the HTTP/2 stream) before its answer: what
       * counts is that it was not delivered, even when the compute itself had finished. */
      if (call->code == TPU_CODE_OK && atomic_load(&call->cancel)) {
        call->code = TPU_CODE_CANCELLED;
        snprintf(call->msg_text, sizeof call->msg_text, "the client cancelled the call");
      }
      conn_hold(conn); /* answering may close it (an answer that cannot be encoded) */
      if (!was_closed) tpu__handle_done(conn, call);
      else tpu__count(call->model, call->code);
      tpu__call_free(call);
      atomic_fetch_sub(&io->srv->inflight, 1);
      /* Written after this batch of completions, together (conn_write lingers once an HTTP/2
       * session that is over has written all, and resumes reading under the limits); a no-op
       * for a closed connection, which the release frees after its last call. */
      tpu__sock_flush_later(&conn->sock);
      conn_release(conn);
      break;
    }
    case TPU__MSG_STOP:
      io_stop_now(io);
      break;
    case TPU__MSG_DRAIN:
      /* gRPC clients move to another server on GOAWAY; streams already begun are answered,
       * later ones are refused unprocessed (REFUSED_STREAM), which clients retry safely. */
      for (tpu__sock_t *s = io->socks.socks, *sn; s; s = sn) {
        sn = s->next;
        tpu__conn_t *c = conn_of(s);
        if (!c->h2 || c->close_after_write) continue;
        tpu__grpc_goaway(c, "server draining");
        on_flush(s); /* may close c */
      }
      break;
    }
    n = next;
  }
}

static void *io_main(void *arg) {
  tpu__io_t *io = arg;
  event_base_dispatch(io->base);
  return NULL;
}

int tpu__io_start(tpu_server_t *srv) {
  srv->io = calloc(srv->cfg.io_threads, sizeof *srv->io);
  if (!srv->io) return -1;
  srv->nio = srv->cfg.io_threads;
  for (unsigned i = 0; i < srv->nio; i++) {
    tpu__io_t *io = &srv->io[i];
    io->srv = srv;
    io->index = i;
    io->queue.efd = -1;
    io->base = event_base_new();
    if (!io->base) return -1;
    if (tpu_queue_init(&io->queue) != 0) return -1;
    io->queue_ev = event_new(io->base, tpu_queue_fd(&io->queue), EV_READ | EV_PERSIST, on_queue, io);
    if (!io->queue_ev || event_add(io->queue_ev, NULL) != 0) return -1;
    if (tpu__sockset_init(&io->socks, io->base, &native_sock_ops, "native",
                          srv->cfg.tls_handshake_timeout_s) != 0)
      return -1;
    if (srv->http_fd >= 0 && tpu__http_io_start(io) != 0) return -1;
    if (pthread_create(&io->thread, NULL, io_main, io) != 0) return -1;
    io->started = 1;
  }
  return 0;
}

void tpu__io_hand_off(tpu_server_t *srv, int fd, const char *peer) {
  tpu__conn_msg_t *m = calloc(1, sizeof *m);
  if (!m) {
    close(fd);
    tpu_stats_dec(&tpu_stats.connections_open);
    return;
  }
  m->msg.kind = TPU__MSG_CONN;
  m->fd = fd;
  snprintf(m->peer, sizeof m->peer, "%s", peer);
  tpu__io_t *io = &srv->io[srv->next_io++ % srv->nio];
  tpu_queue_push(&io->queue, &m->msg.link);
}

void tpu__io_drain(tpu_server_t *srv) {
  for (unsigned i = 0; i < srv->nio; i++) {
    tpu__io_t *io = &srv->io[i];
    if (!io->started) continue;
    io->drain_msg.kind = TPU__MSG_DRAIN;
    tpu_queue_push(&io->queue, &io->drain_msg.link);
  }
}

void tpu__io_stop(tpu_server_t *srv) {
  for (unsigned i = 0; i < srv->nio; i++) {
    tpu__io_t *io = &srv->io[i];
    if (!io->started) continue;
    io->stop_msg.kind = TPU__MSG_STOP;
    tpu_queue_push(&io->queue, &io->stop_msg.link);
  }
  for (unsigned i = 0; i < srv->nio; i++) {
    tpu__io_t *io = &srv->io[i];
    if (!io->started) continue;
    pthread_join(io->thread, NULL);
    io->started = 0;
  }
}

void tpu__io_free(tpu_server_t *srv) {
  if (!srv->io) return;
  tpu__io_stop(srv);
  for (unsigned i = 0; i < srv->nio; i++) {
    tpu__io_t *io = &srv->io[i];
    /* Anything left (only after a hard stop): free it. */
    while (io->socks.socks) conn_close(conn_of(io->socks.socks), "server stopped");
    if (io->queue.efd >= 0) {
      tpu_qnode_t *n = tpu_queue_take(&io->queue);
      while (n) {
        tpu_qnode_t *next = n->next;
        tpu__msg_t *m = tpu_container_of(n, tpu__msg_t, link);
        if (m->kind == TPU__MSG_CONN) {
          close(((tpu__conn_msg_t *)m)->fd);
          free(m);
        } else if (m->kind == TPU__MSG_DONE) {
          tpu__call_t *call = (tpu__call_t *)m;
          if (call->conn) conn_untrack(call->conn, call);
          tpu__call_free(call); /* an HTTP call's slot went with its connection */
        }
        n = next;
      }
      tpu_queue_destroy(&io->queue);
    }
    tpu__http_io_free(io);
    tpu__sockset_free(&io->socks);
    if (io->stop_timer) event_free(io->stop_timer);
    if (io->queue_ev) event_free(io->queue_ev);
    if (io->base) event_base_free(io->base);
  }
  free(srv->io);
  srv->io = NULL;
}
