/*
 * io.c - the I/O threads: connections, frames, back-pressure, completions.
 *
 * DESIGN
 * memcached-style: each I/O thread runs its own event_base and owns its connections; nothing
 * else touches them. It learns of new sockets, finished calls and the stop request only through
 * its queue (queue.h: an eventfd written when the queue goes empty → non-empty). It never runs
 * compute and never blocks: frames are cut from the bufferevent's input with
 * tpu_frame_parse_header (the length is checked before the body is buffered), envelopes decoded
 * and handed to handlers.c.
 *
 * Back-pressure: a connection stops reading when it has max-inflight-per-conn calls in flight or
 * more than max-unsent-bytes of output waiting; it resumes (and parses what is already buffered)
 * when a completion or a write brings it back under both limits. The kernel's socket buffers
 * then push back on the client.
 *
 * Lifetime: a connection whose socket closes (EOF, error, idle timeout, fatal frame) sets the
 * cancel flag of each call in flight and lingers until their completions return; the last one
 * frees it. No lock here: every field is touched by the owning thread only, except the queue
 * (its own mutex) and call->cancel (atomic).
 *
 * TLS (--tls-cert): the socket is wrapped in a bufferevent_openssl in accepting state, which runs
 * the handshake on this thread's loop without blocking it. Until BEV_EVENT_CONNECTED the read
 * timeout is --tls-handshake-timeout-s (a silent or slow peer costs one slot for that long, and
 * max-connections bounds the slots); then the idle timeout takes over and the verified client
 * certificate's subject becomes the connection's identity. A failed handshake (plaintext, bad or
 * missing client certificate) is one debug line and a closed socket.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
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

void tpu__call_free(tpu__call_t *call) {
  if (!call) return;
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

void tpu__conn_track(tpu__conn_t *conn, tpu__call_t *call) {
  call->conn = conn;
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
}

/* ---- connection lifetime ---- */

static void conn_free(tpu__conn_t *conn) {
  tpu__io_t *io = conn->io;
  io->nlinger--;
  free(conn);
  if (io->stopping && io->nconns == 0 && io->nlinger == 0) io_exit(io);
}

static void conn_close(tpu__conn_t *conn, const char *why) {
  if (conn->closed) return;
  tpu__io_t *io = conn->io;
  tpu_log_debug("connection %llu from %s closed: %s", (unsigned long long)conn->serial,
                conn->peer, why);
  conn->closed = 1;
  bufferevent_free(conn->bev); /* BEV_OPT_CLOSE_ON_FREE: closes the socket */
  conn->bev = NULL;
  tpu__grpc_free(conn);
  tpu_stats_dec(&tpu_stats.connections_open);
  for (tpu__call_t *c = conn->calls; c; c = c->next) atomic_store(&c->cancel, 1);
  if (conn->prev)
    conn->prev->next = conn->next;
  else
    io->conns = conn->next;
  if (conn->next) conn->next->prev = conn->prev;
  io->nconns--;
  io->nlinger++;
  if (conn->ncalls == 0) conn_free(conn);
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
  struct evbuffer *out = bufferevent_get_output(conn->bev);
  if (evbuffer_add_reference(out, frame, len, free_frame, frame) != 0) {
    free(frame);
    conn_close(conn, "out of memory");
  }
}

void tpu__conn_send_error(tpu__conn_t *conn, uint64_t id, int code, const char *msg) {
  tpu_envelope_response_t r = {.id = id, .code = code, .message = msg};
  tpu__conn_send(conn, &r);
}

/* ---- back-pressure ---- */

static int over_limits(tpu__conn_t *conn) {
  const tpu_config_t *cfg = &conn->io->srv->cfg;
  return conn->ncalls >= cfg->max_inflight_per_conn ||
         evbuffer_get_length(bufferevent_get_output(conn->bev)) > cfg->max_unsent_bytes;
}

static void maybe_pause(tpu__conn_t *conn) {
  if (!conn->closed && !conn->read_paused && over_limits(conn)) {
    conn->read_paused = 1;
    bufferevent_disable(conn->bev, EV_READ);
  }
}

static void maybe_resume(tpu__conn_t *conn) {
  if (conn->closed || !conn->read_paused || conn->close_after_write || conn->io->stopping)
    return;
  if (over_limits(conn)) return;
  conn->read_paused = 0;
  bufferevent_enable(conn->bev, EV_READ);
  conn_process(conn); /* frames that arrived while paused */
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
  conn->close_after_write = 1;
  bufferevent_disable(conn->bev, EV_READ);
  if (evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0) conn_close(conn, msg);
}

/* ---- HTTP/2 (grpc.c) ---- */

/* Bytes handed to nghttp2 at a time: back-pressure is checked between slices. */
#define H2_SLICE 4096

void tpu__conn_flush(tpu__conn_t *conn) {
  if (conn->closed || !conn->h2) return;
  struct evbuffer *out = bufferevent_get_output(conn->bev);
  if (tpu__grpc_output(conn, out, conn->io->srv->cfg.max_unsent_bytes) != 0 &&
      !conn->close_after_write) {
    conn->close_after_write = 1;
    bufferevent_disable(conn->bev, EV_READ);
  }
}

/* An HTTP/2 session is over and its last frames (GOAWAY, last answers) are written. Closing now
 * could lose them: a close with unread input (a WINDOW_UPDATE, a PING the client sent meanwhile)
 * makes the kernel send RST, and the client's stack may drop what it had not read yet. So: shut
 * down our sending side, read and discard until the client closes, and close then, or after
 * H2_LINGER_S. */
#define H2_LINGER_S 2
static void h2_linger(tpu__conn_t *conn) {
  if (conn->lingering) return;
  conn->lingering = 1;
  shutdown(bufferevent_getfd(conn->bev), SHUT_WR);
  struct timeval tv = {.tv_sec = H2_LINGER_S};
  bufferevent_set_timeouts(conn->bev, &tv, NULL);
  bufferevent_enable(conn->bev, EV_READ);
  evbuffer_drain(bufferevent_get_input(conn->bev),
                 evbuffer_get_length(bufferevent_get_input(conn->bev)));
}

/* Flushes; when the session is over and all is written, lingers before closing. */
static void h2_flush(tpu__conn_t *conn) {
  tpu__conn_flush(conn);
  if (!conn->closed && conn->close_after_write &&
      evbuffer_get_length(bufferevent_get_output(conn->bev)) == 0)
    h2_linger(conn);
}

void tpu__conn_settled(tpu__conn_t *conn) {
  const tpu_config_t *cfg = &conn->io->srv->cfg;
  struct timeval tv = {.tv_sec = cfg->idle_timeout_s};
  bufferevent_set_timeouts(conn->bev, cfg->idle_timeout_s ? &tv : NULL, NULL);
}

static void h2_process(tpu__conn_t *conn) {
  struct evbuffer *in = bufferevent_get_input(conn->bev);
  while (!conn->closed && !conn->read_paused && !conn->close_after_write) {
    struct evbuffer_iovec v;
    if (evbuffer_peek(in, -1, NULL, &v, 1) < 1 || v.iov_len == 0) break;
    size_t n = v.iov_len < H2_SLICE ? v.iov_len : H2_SLICE;
    int rc = tpu__grpc_recv(conn, v.iov_base, n);
    evbuffer_drain(in, n);
    if (rc != 0) {
      conn->close_after_write = 1;
      bufferevent_disable(conn->bev, EV_READ);
      break;
    }
    maybe_pause(conn);
  }
  h2_flush(conn);
}

/* The first bytes (or ALPN) say what the client speaks: the HTTP/2 preface begins with 'P', a
 * framed request with its flag byte (0 or 1). Returns 0, or -1 when the connection was closed. */
static int choose_protocol(tpu__conn_t *conn) {
  int h2 = 0;
  if (conn->io->srv->tls) {
    SSL *ssl = bufferevent_openssl_get_ssl(conn->bev);
    const unsigned char *p = NULL;
    unsigned int l = 0;
    if (ssl) SSL_get0_alpn_selected(ssl, &p, &l);
    h2 = l == 2 && memcmp(p, TPU_TLS_ALPN_H2, 2) == 0;
  }
  uint8_t b = 0;
  evbuffer_copyout(bufferevent_get_input(conn->bev), &b, 1);
  if (b == 'P') h2 = 1;
  if (!h2) {
    conn->proto = TPU__PROTO_FRAMED;
    return 0;
  }
  if (tpu__grpc_open(conn) != 0) {
    conn_close(conn, "out of memory");
    return -1;
  }
  conn->proto = TPU__PROTO_H2;
  /* Until the client acknowledges our SETTINGS it has the handshake's time, not the idle's. */
  struct timeval tv = {.tv_sec = conn->io->srv->cfg.tls_handshake_timeout_s};
  bufferevent_set_timeouts(conn->bev, &tv, NULL);
  tpu_log_debug("connection %llu from %s: gRPC over HTTP/2", (unsigned long long)conn->serial,
                conn->peer);
  return 0;
}

static void conn_process(tpu__conn_t *conn) {
  tpu_server_t *srv = conn->io->srv;
  if (conn->proto == TPU__PROTO_UNKNOWN) {
    if (conn->closed || evbuffer_get_length(bufferevent_get_input(conn->bev)) == 0) return;
    if (choose_protocol(conn) != 0) return;
  }
  if (conn->h2) {
    h2_process(conn);
    return;
  }
  while (!conn->closed && !conn->read_paused && !conn->close_after_write) {
    struct evbuffer *in = bufferevent_get_input(conn->bev);
    size_t avail = evbuffer_get_length(in);
    if (avail < TPU_FRAME_HEADER_SIZE) return;
    uint8_t hdr[TPU_FRAME_HEADER_SIZE];
    evbuffer_copyout(in, hdr, sizeof hdr);
    uint32_t len;
    tpu_proto_error_t perr;
    tpu_proto_status_t st = tpu_frame_parse_header(hdr, srv->cfg.max_message_bytes, &len, &perr);
    if (st != TPU_PROTO_OK) {
      fatal_frame(conn, tpu_proto_status_grpc_code(st), perr.msg);
      return;
    }
    if (avail < TPU_FRAME_HEADER_SIZE + (size_t)len) return; /* wait for the whole body */
    const uint8_t *body = evbuffer_pullup(in, (ev_ssize_t)(TPU_FRAME_HEADER_SIZE + len));
    if (!body) {
      conn_close(conn, "out of memory");
      return;
    }
    uint64_t now = tpu_now_us();
    Tpud__RequestEnvelope *env = NULL;
    st = tpu_envelope_decode_request(body + TPU_FRAME_HEADER_SIZE, len, SIZE_MAX, &env, &perr);
    evbuffer_drain(in, TPU_FRAME_HEADER_SIZE + len);
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

static void on_read(struct bufferevent *bev, void *arg) {
  tpu__conn_t *conn = arg;
  if (conn->lingering) { /* the session is over: what the client still sends is discarded */
    evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
    return;
  }
  conn_process(conn);
}

static void on_write(struct bufferevent *bev, void *arg) {
  tpu__conn_t *conn = arg;
  if (conn->h2) tpu__conn_flush(conn); /* frames nghttp2 held back at max-unsent-bytes */
  if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
    if (conn->h2 && (conn->close_after_write || conn->io->stopping)) {
      h2_linger(conn);
      return;
    }
    if (conn->close_after_write) {
      conn_close(conn, conn->h2 ? "HTTP/2 session over" : "closed after a fatal frame error");
      return;
    }
    if (conn->io->stopping) {
      conn_close(conn, "server stopping");
      return;
    }
  }
  maybe_resume(conn);
}

/* The handshake finished: identity, then the idle timeout instead of the handshake's. */
static void tls_connected(tpu__conn_t *conn) {
  conn->handshaking = 0;
  SSL *ssl = bufferevent_openssl_get_ssl(conn->bev);
  if (ssl) tpu_tls_peer_identity(ssl, conn->cert_cn, sizeof conn->cert_cn, conn->cert_subject,
                                 sizeof conn->cert_subject);
  const tpu_config_t *cfg = &conn->io->srv->cfg;
  struct timeval tv = {.tv_sec = cfg->idle_timeout_s};
  bufferevent_set_timeouts(conn->bev, cfg->idle_timeout_s ? &tv : NULL, NULL);
  tpu_log_debug("connection %llu from %s: %s%s%s", (unsigned long long)conn->serial, conn->peer,
                ssl ? SSL_get_version(ssl) : "TLS", conn->cert_subject[0] ? ", " : "",
                conn->cert_subject);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
  tpu__conn_t *conn = arg;
  if (conn->lingering) {
    conn_close(conn, (what & BEV_EVENT_TIMEOUT) ? "HTTP/2 session over (linger timeout)"
                                                : "HTTP/2 session over");
    return;
  }
  if (what & BEV_EVENT_CONNECTED) {
    tls_connected(conn);
    return;
  }
  if ((what & BEV_EVENT_TIMEOUT) && conn->handshaking) {
    tpu_stats_inc(&tpu_stats.bad_frames, 1);
    conn_close(conn, "TLS handshake timeout");
    return;
  }
  if ((what & BEV_EVENT_TIMEOUT) && conn->h2 && !tpu__grpc_settled(conn)) {
    tpu_stats_inc(&tpu_stats.bad_frames, 1);
    conn_close(conn, "HTTP/2 SETTINGS not acknowledged in time");
    return;
  }
  if (what & BEV_EVENT_TIMEOUT) {
    if (conn->ncalls > 0 || evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
      /* Not idle: the client waits for us. Re-arm (libevent disabled reading). */
      if (!conn->read_paused && !conn->close_after_write) bufferevent_enable(bev, EV_READ);
      return;
    }
    if (conn->h2 && !conn->close_after_write) { /* say goodbye; close once it is written */
      tpu__grpc_goaway(conn, "idle timeout");
      conn->close_after_write = 1;
      h2_flush(conn);
      return;
    }
    conn_close(conn, "idle timeout");
    return;
  }
  if (what & BEV_EVENT_EOF) {
    struct evbuffer *in = bufferevent_get_input(bev);
    if (evbuffer_get_length(in) > 0) {
      tpu_stats_inc(&tpu_stats.bad_frames, 1);
      tpu_log_warn("connection %llu from %s: stream ended inside a frame (%zu bytes pending)",
                   (unsigned long long)conn->serial, conn->peer, evbuffer_get_length(in));
    }
    conn_close(conn, "end of stream");
    return;
  }
  if (what & BEV_EVENT_ERROR) {
    unsigned long e = bufferevent_get_openssl_error(bev);
    if (e) {
      char why[256];
      ERR_error_string_n(e, why, sizeof why);
      while (bufferevent_get_openssl_error(bev)) {
      }
      /* Log first: conn_close frees a connection with nothing in flight. */
      tpu_log_debug("connection %llu from %s: %s", (unsigned long long)conn->serial, conn->peer,
                    why);
      conn_close(conn, conn->handshaking ? "TLS handshake failed" : "TLS error");
      return;
    }
    conn_close(conn, strerror(EVUTIL_SOCKET_ERROR()));
    return;
  }
}

static void conn_open(tpu__io_t *io, const tpu__conn_msg_t *m) {
  tpu__conn_t *conn = calloc(1, sizeof *conn);
  struct bufferevent *bev = NULL;
  if (!conn) goto fail;
  if (io->srv->tls) {
    SSL *ssl = tpu_tls_new_ssl(io->srv->tls, TPU_TLS_NATIVE);
    if (!ssl) goto fail;
    /* Owns ssl from here, also on failure (BEV_OPT_CLOSE_ON_FREE frees it with the bev). */
    bev = bufferevent_openssl_socket_new(io->base, m->fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                         BEV_OPT_CLOSE_ON_FREE);
    if (!bev) goto fail; /* (libevent may have freed ssl: leak it rather than free it twice) */
    /* A client that closes without close_notify has still sent complete frames. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    conn->handshaking = 1;
  } else {
    bev = bufferevent_socket_new(io->base, m->fd, BEV_OPT_CLOSE_ON_FREE);
  }
  if (!bev) goto fail;
  conn->io = io;
  conn->bev = bev;
  conn->serial = atomic_fetch_add(&io->srv->next_conn_serial, 1) + 1;
  snprintf(conn->peer, sizeof conn->peer, "%s", m->peer);
  const tpu_config_t *cfg = &io->srv->cfg;
  bufferevent_setcb(bev, on_read, on_write, on_event, conn);
  /* on_write fires when output falls to half the unsent limit: the resume point. */
  bufferevent_setwatermark(bev, EV_WRITE, cfg->max_unsent_bytes / 2, 0);
  if (conn->handshaking) {
    struct timeval tv = {.tv_sec = cfg->tls_handshake_timeout_s};
    bufferevent_set_timeouts(bev, &tv, &tv);
  } else if (cfg->idle_timeout_s) {
    struct timeval tv = {.tv_sec = cfg->idle_timeout_s};
    bufferevent_set_timeouts(bev, &tv, NULL);
  }
  bufferevent_enable(bev, EV_READ | EV_WRITE);
  conn->next = io->conns;
  if (io->conns) io->conns->prev = conn;
  io->conns = conn;
  io->nconns++;
  tpu_log_debug("connection %llu from %s on I/O thread %u", (unsigned long long)conn->serial,
                conn->peer, io->index);
  return;
fail:
  tpu_log_warn("connection from %s dropped: out of memory", m->peer);
  if (bev)
    bufferevent_free(bev);
  else
    close(m->fd);
  free(conn);
  tpu_stats_dec(&tpu_stats.connections_open);
}

/* ---- the queue ---- */

static void io_stop_now(tpu__io_t *io);

/* Leaves the loop. HTTP responses sent just before are still in their bufferevents (evhttp keeps
 * no count we could wait on), so with HTTP served the loop runs 100 ms more to flush them. */
static void io_exit(tpu__io_t *io) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
  event_base_loopexit(io->base, io->http ? &tv : NULL);
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg) {
  tpu__io_t *io = arg;
  while (io->conns) conn_close(io->conns, "server stopping (flush timed out)");
  io_exit(io);
}

static void io_stop_now(tpu__io_t *io) {
  io->stopping = 1;
  /* Every HTTP call came back before this message (compute stopped first) and was answered;
   * stop accepting HTTP connections. evhttp is freed after the loop (tpu__io_free). */
  tpu__http_io_stop(io);
  tpu__conn_t *next;
  for (tpu__conn_t *c = io->conns; c; c = next) {
    next = c->next;
    bufferevent_disable(c->bev, EV_READ);
    if (c->h2) { /* GOAWAY, then linger (h2_linger) until the client closes */
      if (!c->lingering) {
        tpu__grpc_goaway(c, "server stopping");
        h2_flush(c);
      }
      continue;
    }
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
      conn_close(c, "server stopping");
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
      if (!was_closed) tpu__handle_done(conn, call);
      else tpu__count(call->model, call->code);
      tpu__call_free(call);
      atomic_fetch_sub(&io->srv->inflight, 1);
      if (was_closed) {
        if (conn->ncalls == 0) conn_free(conn);
      } else if (conn->h2 && conn->close_after_write) {
        h2_flush(conn); /* lingers once all is written */
      } else {
        maybe_resume(conn);
      }
      break;
    }
    case TPU__MSG_STOP:
      io_stop_now(io);
      break;
    case TPU__MSG_DRAIN:
      /* gRPC clients move to another server on GOAWAY; streams already begun are answered,
       * later ones are refused unprocessed (REFUSED_STREAM), which clients retry safely. */
      for (tpu__conn_t *c = io->conns, *cn; c; c = cn) {
        cn = c->next;
        if (!c->h2 || c->close_after_write) continue;
        tpu__grpc_goaway(c, "server draining");
        h2_flush(c); /* may close c */
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
    while (io->conns) conn_close(io->conns, "server stopped");
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
          tpu__call_free(call); /* an HTTP call's request went with its evhttp */
        }
        n = next;
      }
      tpu_queue_destroy(&io->queue);
    }
    tpu__http_io_free(io);
    if (io->stop_timer) event_free(io->stop_timer);
    if (io->queue_ev) event_free(io->queue_ev);
    if (io->base) event_base_free(io->base);
  }
  free(srv->io);
  srv->io = NULL;
}
