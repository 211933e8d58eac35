/*
 * sock.h - the connection I/O layer of both ports: the native port (front/framed.c: framed protocol and
 * gRPC over HTTP/2) and the HTTP port (http.c). Only the I/O thread that owns a socket touches it.
 *
 * DESIGN
 * A connection is a raw non-blocking fd (and, under TLS, an SSL in accept state on it) with a
 * persistent read event that stays enabled, a flat input buffer the protocol cuts messages from
 * (ibuf[ioff..ilen)), and an output evbuffer written with one writev per flush. Steady traffic
 * costs one read and one write per request and no epoll_ctl: reading is paused only for
 * back-pressure (tpu__sock_pause), and the write event is armed only while the kernel refuses
 * bytes. Answers that become ready together (one queue wake-up) mark their sockets dirty
 * (tpu__sock_flush_later) and one deferred event flushes them after the batch, so several answers
 * for one connection share a write.
 *
 * TLS: the handshake is driven from the read and write events without blocking; then the
 * verified client certificate's CN and subject are in cert_cn / cert_subject. Reads loop until
 * OpenSSL holds no decrypted bytes (a record read whole leaves nothing the fd's readiness would
 * announce); writes go through SSL_write in chunks of at most a record, retried with the same
 * length after WANT_WRITE. A client that closes without close_notify has still sent complete
 * messages: that is an end of stream, not an error (allow-dirty-shutdown).
 *
 * Timeouts: a once-a-second sweep over the set's sockets. A socket whose handshake outlasts the
 * set's handshake timeout, that made no read or write progress for its own timeout_us (the
 * owner sets and changes it; 0 = none), or that is past the owner's absolute deadline_us (a
 * step that must finish in time however chatty the client is), is handed to ops->timeout, which decides (the owner
 * knows whether calls are in flight). Lingering close (tpu__sock_linger): close_notify, shut
 * down our sending side, read and discard until the client closes or 2 s pass, so that a close
 * with unread input cannot reset the last answers away; then ops->close.
 *
 * Every output buffer counts its bytes in the process-wide gauge tpud_buffered_bytes (stats.h)
 * that --max-buffered-bytes bounds; a closed socket's unsent output is dropped at once.
 *
 * Ownership: the owner embeds a tpu__sock_t in its connection and gets it back with
 * tpu_container_of in the callbacks. tpu__sock_close closes the socket and takes it out of the
 * set (no callback after that); the owner frees the buffers with tpu__sock_free when it frees
 * the connection (which may be later: calls in flight).
 */
#ifndef TPU_SOCK_H
#define TPU_SOCK_H

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"

struct event;
struct event_base;
struct evbuffer;
typedef struct tpu__sock tpu__sock_t;
typedef struct tpu__sockset tpu__sockset_t;

/* What the owner is told (each may close the connection). */
typedef struct {
  /* New bytes are in ibuf[ioff..ilen): consume what forms whole messages, then flush. */
  void (*input)(tpu__sock_t *s);
  /* The client finished sending (FIN, close_notify, or a TLS close without it). */
  void (*eof)(tpu__sock_t *s);
  /* Writable again, or a deferred flush is due: write (tpu__sock_write) and decide what next. */
  void (*flush)(tpu__sock_t *s);
  /* The socket failed (error, failed handshake) or a lingering close is over: close it. */
  void (*close)(tpu__sock_t *s, const char *why);
  /* The sweep found the handshake (s->handshaking) or timeout_us elapsed without progress. */
  void (*timeout)(tpu__sock_t *s, uint64_t now_us);
} tpu__sock_ops_t;

struct tpu__sock {
  tpu__sockset_t *set;
  int fd;                /* -1 once closed */
  struct event *rev, *wev;
  int reading;           /* the read event is armed */
  int wev_on;            /* the write event is armed */
  char *ibuf;            /* input: ibuf[ioff..ilen) not yet consumed */
  size_t ilen, icap, ioff;
  struct evbuffer *out;
  uint64_t last_us;      /* last read or write progress (microseconds) */
  uint64_t timeout_us;   /* owner's timeout without progress; 0 = none */
  uint64_t deadline_us;  /* owner's absolute deadline (ops->timeout once past it); 0 = none */
  uint64_t linger_until;
  int discard;           /* owner: read and drop input (the end of stream is still reported) */
  int lingering;         /* write side shut down; dropping input until EOF (tpu__sock_linger) */
  int closed;
  int dirty;             /* on the set's flush list */
  /* TLS (NULL ssl: plaintext). */
  SSL *ssl;
  int handshaking;       /* the handshake has not finished */
  int ssl_dead;          /* a fatal TLS error: no close_notify */
  int read_wants_write;  /* SSL_read asked for writability */
  size_t ssl_wlen;       /* length of an SSL_write to retry after WANT_WRITE; 0 = none */
  char cert_cn[TPU_AUTH_MAX_NAME + 1]; /* verified client certificate's CN, "" = none */
  char cert_subject[160];              /* "CN=... SAN=...", "" = none */
  char peer[64];         /* "address:port" of the client */
  tpu__sock_t *prev, *next; /* the set's open sockets */
  tpu__sock_t *dnext;       /* the flush list */
};

/* The sockets of one kind on one I/O thread, with their sweep and deferred-flush events. */
struct tpu__sockset {
  struct event_base *base;
  const tpu__sock_ops_t *ops;
  const char *name;            /* "native", "http": for log lines */
  uint64_t handshake_timeout_us;
  struct event *sweep_ev, *flush_ev;
  int flush_pending;
  tpu__sock_t *socks;          /* open sockets, newest first */
  size_t n;
  tpu__sock_t *dirty;
};

/* Sets up a set on an I/O thread's base (before its loop runs). 0 or -1. */
int tpu__sockset_init(tpu__sockset_t *set, struct event_base *base, const tpu__sock_ops_t *ops,
                      const char *name, unsigned handshake_timeout_s);
/* Frees the set's events; its sockets must be closed already. Accepts a set never set up. */
void tpu__sockset_free(tpu__sockset_t *set);

/* Starts serving fd (non-blocking) in `s` (zeroed by the caller); ssl: NULL for plaintext, else
 * an SSL this takes over (also on failure) and runs in accept state. Returns 0, or -1 (out of
 * memory): everything is freed but the fd, which the caller closes. */
int tpu__sock_open(tpu__sockset_t *set, tpu__sock_t *s, int fd, SSL *ssl, const char *peer);
/* Closes the socket (best-effort close_notify) and takes it out of the set; idempotent. */
void tpu__sock_close(tpu__sock_t *s);
/* Frees what tpu__sock_open allocated (after tpu__sock_close). */
void tpu__sock_free(tpu__sock_t *s);

/* Ensures room for `need` bytes of input from ioff (moving the unread part to the front). */
int tpu__sock_reserve(tpu__sock_t *s, size_t need);
/* Marks ibuf[ioff..ioff+n) consumed. */
void tpu__sock_consume(tpu__sock_t *s, size_t n);
/* Back-pressure: stop or resume reading (idempotent). */
void tpu__sock_pause(tpu__sock_t *s);
void tpu__sock_resume(tpu__sock_t *s);
/* An evbuffer whose bytes count in tpud_buffered_bytes (stats.h) while it holds them: every
 * socket's output is one; the HTTP port's answers waiting for their turn use them too. Free it
 * with tpu__sock_free_buffer (accepts NULL). */
struct evbuffer *tpu__sock_counted_buffer(void);
void tpu__sock_free_buffer(struct evbuffer *b);
/* Bytes of output not yet taken by the kernel. */
size_t tpu__sock_unsent(const tpu__sock_t *s);
/* Writes the output (one writev, or SSL_write records); arms the write event while bytes remain.
 * 0, or -1 with errno on a fatal error (the owner closes). */
int tpu__sock_write(tpu__sock_t *s);
/* Asks for ops->flush after the current batch of events (once however often asked). */
void tpu__sock_flush_later(tpu__sock_t *s);
/* Lingering close: close_notify, shutdown(SHUT_WR), discard input; ops->close at the client's
 * end of stream or after 2 s. Only once the output is written (tpu__sock_unsent == 0): what is
 * still queued after the shutdown fails with EPIPE. */
void tpu__sock_linger(tpu__sock_t *s);
/* Whether the handshake selected ALPN protocol `proto` (0 for plaintext or none). */
int tpu__sock_alpn_is(const tpu__sock_t *s, const char *proto);

#endif /* TPU_SOCK_H */
