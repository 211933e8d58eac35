/*
 * framed.h - a native-port connection, shared by framed.c (the framed protocol, the connection's
 * life) and grpc.c (gRPC over HTTP/2 on the same port). Not an API.
 */
#ifndef TPU_FRAMED_H
#define TPU_FRAMED_H

#include <stdint.h>

#include "call.h"
#include "sock.h"

struct evbuffer;
typedef struct tpu__conn tpu__conn_t;
typedef struct tpu__h2 tpu__h2_t;

/* What a native-port connection speaks (framed.c decides from its first bytes or ALPN). */
enum { TPU__PROTO_UNKNOWN = 0, TPU__PROTO_FRAMED = 1, TPU__PROTO_H2 = 2 };

/* A client connection, owned by one I/O thread. */
struct tpu__conn {
  tpu__sock_t sock;        /* socket, input, output, TLS and client certificate (sock.h) */
  tpu__origin_t origin;    /* what dispatch sees: its operations, thread, closed flag, who */
  struct tpu__framed_io *fio; /* this thread's native-port service */
  uint64_t serial;
  char peer[64];
  tpu__call_t *calls;      /* in flight */
  size_t ncalls;
  size_t reserved;         /* answer bytes of the calls in flight (back-pressure) */
  int hold;                /* inside an I/O callback: not freed before it returns */
  int read_paused;         /* back-pressure: reading stopped */
  int close_after_write;   /* a fatal frame error: flush the error, then close */
  int proto;               /* TPU__PROTO_*: what the client speaks, known from its first bytes */
  tpu__h2_t *h2;           /* gRPC over HTTP/2 (grpc.c); NULL for the framed protocol */
};

/* The auth peer of a connection (address, client certificate). */
static inline tpu_auth_peer_t tpu__conn_peer(const tpu__conn_t *conn) {
  tpu_auth_peer_t p = {.peer = conn->peer,
                       .cert_cn = conn->sock.cert_cn[0] ? conn->sock.cert_cn : NULL,
                       .cert_subject = conn->sock.cert_subject};
  return p;
}

/* What the connection's owner (framed.c) does for the HTTP/2 session. */
typedef struct {
  /* Moves what the session has to send into the connection's output, up to
   * max-unsent-bytes, and asks for a write after the current batch of events (sock.h); when the
   * session is over (or failed) marks the connection to close once its output is written.
   * Never closes the connection itself. */
  void (*flush)(tpu__conn_t *conn);
  /* The client acknowledged our SETTINGS: the idle timeout replaces the handshake's. */
  void (*settled)(tpu__conn_t *conn);
} tpu__grpc_host_t;

/* ---- grpc.c: gRPC over HTTP/2 on the native port (I/O thread) ---- */
/* Starts an HTTP/2 server session on a connection (its SETTINGS are queued). 0 or -1. */
int tpu__grpc_open(tpu__conn_t *conn, const tpu__grpc_host_t *host);
/* Frees the session and its streams; accepts a connection without one. */
void tpu__grpc_free(tpu__conn_t *conn);
/* Feeds received bytes (all are consumed). -1: a protocol error; the session queued its
 * GOAWAY (unless the bytes were not HTTP/2 at all) and the connection must close after it. */
int tpu__grpc_recv(tpu__conn_t *conn, const uint8_t *data, size_t len);
/* Appends the session's outgoing frames to out until it holds `limit` bytes. 0: the session
 * goes on; 1: it is over (both sides done, or after GOAWAY); -1: an error. */
int tpu__grpc_output(tpu__conn_t *conn, struct evbuffer *out, size_t limit);
/* Answers the stream resp->id; dropped when the client reset it. */
void tpu__grpc_send(tpu__conn_t *conn, const tpu_envelope_response_t *resp);
/* Queues a graceful GOAWAY (NO_ERROR, streams already begun are still answered). */
void tpu__grpc_goaway(tpu__conn_t *conn, const char *why);
/* Whether the client has acknowledged our SETTINGS. */
int tpu__grpc_settled(const tpu__conn_t *conn);

#endif /* TPU_FRAMED_H */
