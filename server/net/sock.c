/*
 * sock.c - the connection I/O layer of both ports (see sock.h): raw non-blocking sockets, TLS
 * driven by hand, a flat input buffer, an output evbuffer, deferred flushes, the timeout sweep
 * and lingering close.
 */
#include "sock.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <limits.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "stats.h"
#include "tls.h"

#define SOCK_IBUF_MIN 16384
#define SOCK_IBUF_KEEP (1u << 20) /* an emptied input buffer larger than this shrinks back */
#define SOCK_LINGER_US 2000000
#define SOCK_TLS_RECORD 16384

static void on_read(evutil_socket_t fd, short what, void *arg);

/* Every output buffer counts its bytes in the process-wide gauge that --max-buffered-bytes
 * bounds (dispatch/call.c tpu__budget_reserve): libevent calls this after each change of its length. */
static void count_output(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg) {
  if (info->n_added) tpu_stats_inc(&tpu_stats.buffered_bytes, info->n_added);
  if (info->n_deleted) tpu_stats_sub(&tpu_stats.buffered_bytes, info->n_deleted);
}

struct evbuffer *tpu__sock_counted_buffer(void) {
  struct evbuffer *b = evbuffer_new();
  if (b && !evbuffer_add_cb(b, count_output, NULL)) {
    evbuffer_free(b);
    return NULL;
  }
  return b;
}

void tpu__sock_free_buffer(struct evbuffer *b) {
  if (!b) return;
  evbuffer_drain(b, evbuffer_get_length(b)); /* counted out; evbuffer_free calls no callback */
  evbuffer_free(b);
}

/* ---- input buffer ---- */

int tpu__sock_reserve(tpu__sock_t *s, size_t need) {
  if (s->ioff > 0 && (s->ioff == s->ilen || s->icap - s->ioff < need)) {
    memmove(s->ibuf, s->ibuf + s->ioff, s->ilen - s->ioff);
    s->ilen -= s->ioff;
    s->ioff = 0;
  }
  if (s->ilen == 0 && s->icap > SOCK_IBUF_KEEP && need <= SOCK_IBUF_KEEP) {
    free(s->ibuf); /* one large message passed: do not keep its buffer for good */
    s->ibuf = NULL;
    s->icap = 0;
  }
  if (s->icap >= need) return 0;
  size_t cap = s->icap ? s->icap : SOCK_IBUF_MIN;
  while (cap < need) cap *= 2;
  char *p = realloc(s->ibuf, cap);
  if (!p) return -1;
  s->ibuf = p;
  s->icap = cap;
  return 0;
}

void tpu__sock_consume(tpu__sock_t *s, size_t n) {
  s->ioff += n;
  if (s->ioff == s->ilen) s->ioff = s->ilen = 0;
}

/* ---- events ---- */

static void arm_write(tpu__sock_t *s) {
  if (!s->wev_on) {
    event_add(s->wev, NULL);
    s->wev_on = 1;
  }
}

static void disarm_write(tpu__sock_t *s) {
  if (s->wev_on) {
    event_del(s->wev);
    s->wev_on = 0;
  }
}

void tpu__sock_pause(tpu__sock_t *s) {
  if (s->reading) {
    event_del(s->rev);
    s->reading = 0;
  }
}

void tpu__sock_resume(tpu__sock_t *s) {
  if (!s->reading && !s->closed) {
    event_add(s->rev, NULL);
    s->reading = 1;
  }
}

size_t tpu__sock_unsent(const tpu__sock_t *s) { return evbuffer_get_length(s->out); }

/* ---- TLS ---- */

/* Drives the handshake. Returns 1 when it is done, 0 while it waits for the socket, -1 when it
 * failed (ops->close was called). */
static int tls_handshake(tpu__sock_t *s) {
  ERR_clear_error();
  int r = SSL_do_handshake(s->ssl);
  if (r == 1) {
    s->handshaking = 0;
    tpu_tls_peer_identity(s->ssl, s->cert_cn, sizeof s->cert_cn, s->cert_subject,
                          sizeof s->cert_subject);
    s->last_us = tpu_now_us();
    tpu_log_debug("%s connection from %s: %s%s%s", s->set->name, s->peer,
                  SSL_get_version(s->ssl), s->cert_subject[0] ? ", " : "", s->cert_subject);
    return 1;
  }
  int e = SSL_get_error(s->ssl, r);
  if (e == SSL_ERROR_WANT_READ) return 0;
  if (e == SSL_ERROR_WANT_WRITE) {
    arm_write(s);
    return 0;
  }
  char why[256];
  tpu_tls_last_error(why, sizeof why);
  tpu_log_debug("%s connection from %s: TLS handshake failed: %s", s->set->name, s->peer, why);
  s->ssl_dead = 1;
  s->set->ops->close(s, "TLS handshake failed");
  return -1;
}

/* read(2) or SSL_read: > 0 bytes, 0 end of stream, -1 with errno (EAGAIN: try later). */
static ssize_t sock_recv(tpu__sock_t *s, char *buf, size_t cap) {
  if (!s->ssl) return read(s->fd, buf, cap);
  ERR_clear_error();
  errno = 0; /* SSL_ERROR_SYSCALL with errno 0 below means an end of stream, not a stale errno */
  int n = SSL_read(s->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
  if (n > 0) return n;
  switch (SSL_get_error(s->ssl, n)) {
  case SSL_ERROR_WANT_READ:
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_WANT_WRITE:
    s->read_wants_write = 1;
    arm_write(s);
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_ZERO_RETURN:
    return 0;
  case SSL_ERROR_SYSCALL:
    s->ssl_dead = 1;
    if (errno == 0) return 0; /* closed without close_notify: still an end of stream */
    return -1;
  default:
    s->ssl_dead = 1;
    errno = EPROTO;
    return -1;
  }
}

/* SSL_write of the output in record-sized chunks: bytes written, or -1 with errno. */
static int tls_write_out(tpu__sock_t *s) {
  int total = 0;
  while (evbuffer_get_length(s->out)) {
    size_t len = evbuffer_get_length(s->out);
    if (len > SOCK_TLS_RECORD) len = SOCK_TLS_RECORD;
    if (s->ssl_wlen) len = s->ssl_wlen; /* a retry must offer the same bytes */
    unsigned char *p = evbuffer_pullup(s->out, (ev_ssize_t)len);
    if (!p) {
      errno = ENOMEM;
      return -1;
    }
    ERR_clear_error();
    int n = SSL_write(s->ssl, p, (int)len);
    if (n > 0) {
      s->ssl_wlen = 0;
      evbuffer_drain(s->out, (size_t)n);
      total += n;
      continue;
    }
    int e = SSL_get_error(s->ssl, n);
    if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
      s->ssl_wlen = len;
      if (total) return total;
      errno = EAGAIN;
      return -1;
    }
    s->ssl_dead = 1;
    if (e != SSL_ERROR_SYSCALL || errno == 0) errno = EPIPE;
    return total ? total : -1;
  }
  return total;
}

/* ---- output ---- */

int tpu__sock_write(tpu__sock_t *s) {
  if (s->closed) return 0;
  if (evbuffer_get_length(s->out)) {
    int n = s->ssl ? tls_write_out(s) : evbuffer_write(s->out, s->fd);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (n > 0) s->last_us = tpu_now_us();
  }
  if (evbuffer_get_length(s->out))
    arm_write(s);
  else
    disarm_write(s);
  return 0;
}

static void dirty_unlink(tpu__sock_t *s) {
  if (!s->dirty) return;
  for (tpu__sock_t **p = &s->set->dirty; *p; p = &(*p)->dnext)
    if (*p == s) {
      *p = s->dnext;
      break;
    }
  s->dirty = 0;
}

void tpu__sock_flush_later(tpu__sock_t *s) {
  tpu__sockset_t *set = s->set;
  if (s->dirty || s->closed) return;
  s->dirty = 1;
  s->dnext = set->dirty;
  set->dirty = s;
  if (!set->flush_pending) {
    set->flush_pending = 1;
    event_active(set->flush_ev, EV_TIMEOUT, 0);
  }
}

static void on_flush(evutil_socket_t fd, short what, void *arg) {
  tpu__sockset_t *set = arg;
  set->flush_pending = 0;
  while (set->dirty) {
    tpu__sock_t *s = set->dirty;
    set->dirty = s->dnext;
    s->dirty = 0;
    set->ops->flush(s);
  }
}

void tpu__sock_linger(tpu__sock_t *s) {
  if (s->lingering || s->closed) return;
  if (s->ssl && !s->ssl_dead && !s->handshaking) SSL_shutdown(s->ssl); /* before the FIN */
  shutdown(s->fd, SHUT_WR);
  s->lingering = 1;
  s->linger_until = tpu_now_us() + SOCK_LINGER_US;
  s->ilen = s->ioff = 0;
  tpu__sock_resume(s);
}

/* ---- events ---- */

static void on_read(evutil_socket_t fd, short what, void *arg) {
  tpu__sock_t *s = arg;
  const tpu__sock_ops_t *ops = s->set->ops;
  if (s->ssl && s->handshaking && tls_handshake(s) != 1) return;
  s->read_wants_write = 0;
  if (s->lingering || s->discard) {
    char drop[16384];
    ssize_t n = read(fd, drop, sizeof drop);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      if (s->lingering)
        ops->close(s, "lingering close: end of stream");
      else
        ops->eof(s);
    }
    return;
  }
  if (tpu__sock_reserve(s, s->ilen - s->ioff + 4096) != 0) {
    ops->close(s, "out of memory");
    return;
  }
  ssize_t n = sock_recv(s, s->ibuf + s->ilen, s->icap - s->ilen);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    ops->close(s, strerror(errno));
    return;
  }
  if (n == 0) {
    ops->eof(s);
    return;
  }
  s->ilen += (size_t)n;
  /* TLS: take every decrypted byte now; the fd will not announce the ones OpenSSL holds. */
  while (s->ssl && SSL_pending(s->ssl) > 0) {
    if (tpu__sock_reserve(s, s->ilen - s->ioff + (size_t)SSL_pending(s->ssl)) != 0) {
      ops->close(s, "out of memory");
      return;
    }
    ssize_t m = sock_recv(s, s->ibuf + s->ilen, s->icap - s->ilen);
    if (m <= 0) break;
    s->ilen += (size_t)m;
  }
  s->last_us = tpu_now_us();
  ops->input(s);
}

static void on_write(evutil_socket_t fd, short what, void *arg) {
  tpu__sock_t *s = arg;
  if (s->ssl && (s->handshaking || s->read_wants_write)) {
    if (!evbuffer_get_length(s->out)) disarm_write(s);
    on_read(fd, EV_READ, s);
    return;
  }
  s->set->ops->flush(s);
}

/* Once a second: handshake and owner timeouts, and the end of lingering closes. */
static void on_sweep(evutil_socket_t fd, short what, void *arg) {
  tpu__sockset_t *set = arg;
  uint64_t now = tpu_now_us();
  tpu__sock_t *next;
  for (tpu__sock_t *s = set->socks; s; s = next) {
    next = s->next;
    if (s->lingering) {
      if (now >= s->linger_until) set->ops->close(s, "lingering close done");
      continue;
    }
    uint64_t t = s->handshaking ? set->handshake_timeout_us : s->timeout_us;
    if ((t && now - s->last_us >= t) || (s->deadline_us && now >= s->deadline_us))
      set->ops->timeout(s, now);
  }
}

/* ---- lifetime ---- */

int tpu__sock_open(tpu__sockset_t *set, tpu__sock_t *s, int fd, SSL *ssl, const char *peer) {
  s->set = set;
  s->fd = fd;
  s->ssl = ssl;
  snprintf(s->peer, sizeof s->peer, "%s", peer);
  s->out = tpu__sock_counted_buffer();
  s->rev = event_new(set->base, fd, EV_READ | EV_PERSIST, on_read, s);
  s->wev = event_new(set->base, fd, EV_WRITE | EV_PERSIST, on_write, s);
  if (!s->out || !s->rev || !s->wev || tpu__sock_reserve(s, SOCK_IBUF_MIN) != 0 ||
      (ssl && SSL_set_fd(ssl, fd) != 1) || event_add(s->rev, NULL) != 0) {
    if (ssl) SSL_free(ssl);
    s->ssl = NULL;
    tpu__sock_free(s);
    return -1;
  }
  s->reading = 1;
  if (ssl) {
    SSL_set_accept_state(ssl);
    s->handshaking = 1;
  }
  s->last_us = tpu_now_us();
  s->prev = NULL;
  s->next = set->socks;
  if (set->socks) set->socks->prev = s;
  set->socks = s;
  set->n++;
  return 0;
}

void tpu__sock_close(tpu__sock_t *s) {
  if (s->closed || !s->set) return;
  tpu__sockset_t *set = s->set;
  s->closed = 1;
  tpu__sock_pause(s);
  disarm_write(s);
  if (s->ssl) {
    if (!s->handshaking && !s->ssl_dead && !s->lingering)
      SSL_shutdown(s->ssl); /* best effort close_notify */
    SSL_free(s->ssl);
    s->ssl = NULL;
  }
  close(s->fd);
  s->fd = -1;
  evbuffer_drain(s->out, evbuffer_get_length(s->out)); /* nobody will take it now */
  if (s->prev)
    s->prev->next = s->next;
  else
    set->socks = s->next;
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = NULL;
  set->n--;
  dirty_unlink(s);
}

void tpu__sock_free(tpu__sock_t *s) {
  if (s->rev) event_free(s->rev);
  if (s->wev) event_free(s->wev);
  tpu__sock_free_buffer(s->out);
  free(s->ibuf);
  s->rev = s->wev = NULL;
  s->out = NULL;
  s->ibuf = NULL;
  s->icap = s->ilen = s->ioff = 0;
}

int tpu__sock_alpn_is(const tpu__sock_t *s, const char *proto) {
  if (!s->ssl) return 0;
  const unsigned char *p = NULL;
  unsigned int l = 0;
  SSL_get0_alpn_selected(s->ssl, &p, &l);
  return p && l == strlen(proto) && memcmp(p, proto, l) == 0;
}

int tpu__sockset_init(tpu__sockset_t *set, struct event_base *base, const tpu__sock_ops_t *ops,
                      const char *name, unsigned handshake_timeout_s) {
  memset(set, 0, sizeof *set);
  set->base = base;
  set->ops = ops;
  set->name = name;
  set->handshake_timeout_us = (uint64_t)handshake_timeout_s * 1000000u;
  set->sweep_ev = event_new(base, -1, EV_PERSIST, on_sweep, set);
  set->flush_ev = event_new(base, -1, 0, on_flush, set);
  struct timeval sec = {.tv_sec = 1};
  if (!set->sweep_ev || !set->flush_ev || event_add(set->sweep_ev, &sec) != 0) return -1;
  return 0;
}

void tpu__sockset_free(tpu__sockset_t *set) {
  if (set->sweep_ev) event_free(set->sweep_ev);
  if (set->flush_ev) event_free(set->flush_ev);
  set->sweep_ev = set->flush_ev = NULL;
}
