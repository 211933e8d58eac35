/*
 * test_sock.c - tpu__sock over socketpair(), driven by an event_base in the test thread: the
 * input buffer (reserve, consume, shrink), input callbacks, output with one write and with
 * back-pressure from the kernel, deferred flushes (once per batch, none after close),
 * pause/resume, end of stream, close on a socket error, the counted buffers in
 * tpud_buffered_bytes, lingering close (end of stream and the 2 s limit), the timeout sweep, and
 * the same over TLS (handshake, ALPN, many records, a failed handshake, its timeout, a close
 * without close_notify).
 *
 * The test plays the client on the other end of the pair, in the same thread: pump() runs the
 * loop without blocking and moves the client's bytes in between, until a condition holds or a
 * generous limit passes (a limit is a failure, never a measurement).
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "queue.h" /* tpu_container_of */
#include "sock.h"
#include "stats.h"
#include "tls.h"
#include "tls_fixture.h"
#include "tpu_test.h"

/* ---- the owner: a connection recording what it is told ---- */

typedef struct {
  tpu__sock_t sock;
  char log[64];       /* callbacks in order: i input, e eof, f flush, c close, t timeout */
  size_t nlog;
  char *got;          /* input consumed so far */
  size_t ngot, capgot;
  int keep_input;     /* input: consume nothing (the bytes stay in ibuf) */
  int keep_open;      /* eof/timeout: do not close */
  int write_failed;   /* flush: tpu__sock_write returned -1 */
  int write_errno;
  int handshaking_at_timeout;
  char why[128];      /* the close reason */
} conn_t;

static conn_t *conn_of(tpu__sock_t *s) { return tpu_container_of(s, conn_t, sock); }

/* Logs a callback; a run of the same one is one letter ("ie": some input, then the end). */
static void note(conn_t *c, char what) {
  if (c->nlog > 0 && c->log[c->nlog - 1] == what) return;
  if (c->nlog + 1 < sizeof c->log) c->log[c->nlog++] = what;
}

static void on_input(tpu__sock_t *s) {
  conn_t *c = conn_of(s);
  note(c, 'i');
  if (c->keep_input) return;
  size_t n = s->ilen - s->ioff;
  if (c->ngot + n > c->capgot) {
    c->capgot = (c->ngot + n) * 2;
    c->got = realloc(c->got, c->capgot);
  }
  memcpy(c->got + c->ngot, s->ibuf + s->ioff, n);
  c->ngot += n;
  tpu__sock_consume(s, n);
}

static void on_eof(tpu__sock_t *s) {
  conn_t *c = conn_of(s);
  note(c, 'e');
  if (!c->keep_open) tpu__sock_close(s);
  else tpu__sock_pause(s); /* the level-triggered end of stream would repeat */
}

static void on_flush(tpu__sock_t *s) {
  conn_t *c = conn_of(s);
  note(c, 'f');
  if (tpu__sock_write(s) != 0) {
    c->write_failed = 1;
    c->write_errno = errno;
  }
}

static void on_close(tpu__sock_t *s, const char *why) {
  conn_t *c = conn_of(s);
  note(c, 'c');
  snprintf(c->why, sizeof c->why, "%s", why);
  tpu__sock_close(s);
}

static void on_timeout(tpu__sock_t *s, uint64_t now_us) {
  conn_t *c = conn_of(s);
  note(c, 't');
  c->handshaking_at_timeout = s->handshaking;
  if (!c->keep_open) tpu__sock_close(s);
}

static const tpu__sock_ops_t ops = {on_input, on_eof, on_flush, on_close, on_timeout};

/* ---- the fixture: a base, a set, and connections with the client's end of each pair ---- */

#define MAXC 6

typedef struct {
  conn_t c;
  int peer;            /* the client's end, non-blocking; -1 closed */
  int peer_reads;      /* pump reads what the server sent into `in` */
  char *in;            /* bytes the client received */
  size_t nin, capin;
  int peer_eof;        /* the client read the end of the server's stream */
  const char *out;     /* bytes the client still has to send (pump writes them) */
  size_t nout, outoff;
  SSL *ssl;            /* the client's TLS, NULL: plaintext */
  int tls_done;        /* the client's handshake finished */
} end_t;

typedef struct {
  struct event_base *base;
  tpu__sockset_t set;
  end_t e[MAXC];
  int n;
} fx_t;

static void fx_init(fx_t *f, unsigned handshake_timeout_s) {
  memset(f, 0, sizeof *f);
  signal(SIGPIPE, SIG_IGN); /* as tpud does: a vanished peer is an error code, not a signal */
  f->base = event_base_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(f->base);
  CU_ASSERT_EQUAL_FATAL(tpu__sockset_init(&f->set, f->base, &ops, "test", handshake_timeout_s), 0);
}

/* Opens connection number f->n (plaintext when ssl is NULL) and returns it. */
static end_t *fx_open(fx_t *f, SSL *ssl) {
  CU_ASSERT_FATAL(f->n < MAXC);
  end_t *e = &f->e[f->n++];
  int fd[2];
  CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0);
  e->peer = fd[1];
  e->peer_reads = 1;
  CU_ASSERT_EQUAL_FATAL(tpu__sock_open(&f->set, &e->c.sock, fd[0], ssl, "test-peer:1"), 0);
  return e;
}

static void peer_close(end_t *e) {
  if (e->peer >= 0) close(e->peer);
  e->peer = -1;
}

static void fx_free(fx_t *f) {
  for (int i = 0; i < f->n; i++) {
    end_t *e = &f->e[i];
    tpu__sock_close(&e->c.sock);
    tpu__sock_free(&e->c.sock);
    SSL_free(e->ssl);
    peer_close(e);
    free(e->c.got);
    free(e->in);
  }
  tpu__sockset_free(&f->set);
  event_base_free(f->base);
}

static void take_in(end_t *e, const char *p, size_t n) {
  if (e->nin + n > e->capin) {
    e->capin = (e->nin + n) * 2;
    e->in = realloc(e->in, e->capin);
  }
  memcpy(e->in + e->nin, p, n);
  e->nin += n;
}

/* The client's side of one round: send what is pending, read what arrived. */
static void peer_step(end_t *e) {
  if (e->peer < 0) return;
  char buf[65536];
  if (e->ssl && !e->tls_done) {
    ERR_clear_error();
    int r = SSL_do_handshake(e->ssl);
    if (r == 1) e->tls_done = 1;
    else return;
  }
  while (e->outoff < e->nout) {
    size_t n = e->nout - e->outoff;
    ssize_t w;
    if (e->ssl) {
      ERR_clear_error();
      w = SSL_write(e->ssl, e->out + e->outoff, n > 65536 ? 65536 : (int)n);
    } else {
      w = write(e->peer, e->out + e->outoff, n);
    }
    if (w <= 0) break;
    e->outoff += (size_t)w;
  }
  while (e->peer_reads && !e->peer_eof) {
    ssize_t r;
    if (e->ssl) {
      ERR_clear_error();
      r = SSL_read(e->ssl, buf, sizeof buf);
      if (r <= 0 && SSL_get_error(e->ssl, (int)r) == SSL_ERROR_ZERO_RETURN) r = 0;
      else if (r <= 0) r = -1;
    } else {
      r = read(e->peer, buf, sizeof buf);
    }
    if (r < 0) break;
    if (r == 0) e->peer_eof = 1;
    else take_in(e, buf, (size_t)r);
  }
}

typedef int (*cond_fn)(fx_t *f, void *arg);

/* Runs the loop and the clients until cond holds (1) or limit_s pass (0). */
static int pump(fx_t *f, cond_fn cond, void *arg, double limit_s) {
  uint64_t until = tpu_now_us() + (uint64_t)(limit_s * 1e6);
  for (;;) {
    for (int i = 0; i < f->n; i++) peer_step(&f->e[i]);
    if (cond(f, arg)) return 1;
    event_base_loop(f->base, EVLOOP_NONBLOCK);
    if (cond(f, arg)) return 1;
    if (tpu_now_us() > until) return 0;
    poll(NULL, 0, 1);
  }
}

/* A few rounds of the loop with nothing waited for (events already due run in them). */
static void spin(fx_t *f, int rounds) {
  for (int i = 0; i < rounds; i++) {
    for (int k = 0; k < f->n; k++) peer_step(&f->e[k]);
    event_base_loop(f->base, EVLOOP_NONBLOCK);
  }
}

/* What pump() waits for, about connection i. */
typedef struct {
  int i;
  size_t n;
  char what;
} want_t;

static int has(fx_t *f, void *arg) { /* connection i logged letter `what` */
  want_t *w = arg;
  return strchr(f->e[w->i].c.log, w->what) != NULL;
}
static int got_n(fx_t *f, void *arg) { /* the owner of i consumed n bytes */
  want_t *w = arg;
  return f->e[w->i].c.ngot >= w->n;
}
static int in_n(fx_t *f, void *arg) { /* the client of i received n bytes */
  want_t *w = arg;
  return f->e[w->i].nin >= w->n;
}
static int kept_n(fx_t *f, void *arg) { /* i holds n unconsumed bytes */
  want_t *w = arg;
  return f->e[w->i].c.sock.ilen - f->e[w->i].c.sock.ioff >= w->n;
}
static int peer_eof(fx_t *f, void *arg) { /* the client of i read the end of stream */
  want_t *w = arg;
  return f->e[w->i].peer_eof;
}
static int tls_up(fx_t *f, void *arg) { /* both ends of i finished the handshake */
  want_t *w = arg;
  return f->e[w->i].tls_done && !f->e[w->i].c.sock.handshaking;
}
#define HAS(idx, letter) has, &(want_t){.i = (idx), .what = (letter)}
#define GOT(idx, bytes) got_n, &(want_t){.i = (idx), .n = (bytes)}
#define IN(idx, bytes) in_n, &(want_t){.i = (idx), .n = (bytes)}
#define PEER_EOF(idx) peer_eof, &(want_t){.i = (idx)}
#define TLS_UP(idx) tls_up, &(want_t){.i = (idx)}

static void clear_log(conn_t *c) {
  c->nlog = 0;
  memset(c->log, 0, sizeof c->log);
}

static void fill(char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (char)((i * 2654435761u + seed) >> 13);
}

static uint64_t buffered(void) { return tpu_stats_get(&tpu_stats.buffered_bytes); }

static int tls_up_fixture(void);
static const tpu_test_pki_t *pki;
static tpu_tls_t *tls;

/* ---- tests ---- */

static void test_input_buffer(void) {
  tpu__sock_t s;
  memset(&s, 0, sizeof s);
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 10), 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s.ibuf);
  CU_ASSERT_EQUAL(s.icap, 16384);
  memcpy(s.ibuf, "abcdef", 6);
  s.ilen = 6;
  tpu__sock_consume(&s, 2);
  CU_ASSERT_EQUAL(s.ioff, 2);
  /* Room that fits behind ioff moves nothing... */
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 100), 0);
  CU_ASSERT_EQUAL(s.ioff, 2);
  /* ...room that does not moves the unread part to the front, without growing. */
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 16383), 0);
  CU_ASSERT_EQUAL(s.ioff, 0);
  CU_ASSERT_EQUAL(s.ilen, 4);
  CU_ASSERT_EQUAL(s.icap, 16384);
  CU_ASSERT_EQUAL(memcmp(s.ibuf, "cdef", 4), 0);
  /* Growth keeps the bytes and doubles. */
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 40000), 0);
  CU_ASSERT_EQUAL(s.icap, 65536);
  CU_ASSERT_EQUAL(memcmp(s.ibuf, "cdef", 4), 0);
  /* Consuming everything resets both offsets. */
  tpu__sock_consume(&s, 4);
  CU_ASSERT_EQUAL(s.ioff, 0);
  CU_ASSERT_EQUAL(s.ilen, 0);
  /* One large message passed: its buffer is not kept once empty... */
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 3u << 20), 0);
  CU_ASSERT_EQUAL(s.icap, 4u << 20);
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 100), 0);
  CU_ASSERT_EQUAL(s.icap, 16384);
  /* ...but it is while it holds unread bytes. */
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 3u << 20), 0);
  s.ilen = 1;
  CU_ASSERT_EQUAL(tpu__sock_reserve(&s, 100), 0);
  CU_ASSERT_EQUAL(s.icap, 4u << 20);
  tpu__sock_free(&s); /* never opened: frees the buffer only */
  CU_ASSERT_PTR_NULL(s.ibuf);
  CU_ASSERT_EQUAL(s.icap, 0);
}

static void test_lifetime(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *a = fx_open(&f, NULL), *b = fx_open(&f, NULL), *c = fx_open(&f, NULL);
  CU_ASSERT_EQUAL(f.set.n, 3);
  CU_ASSERT_PTR_EQUAL(f.set.socks, &c->c.sock); /* newest first */
  CU_ASSERT_STRING_EQUAL(a->c.sock.peer, "test-peer:1");
  CU_ASSERT_TRUE(a->c.sock.reading);
  CU_ASSERT_EQUAL(tpu__sock_alpn_is(&a->c.sock, "h2"), 0); /* plaintext: no ALPN */
  tpu__sock_close(&b->c.sock);
  CU_ASSERT_EQUAL(f.set.n, 2);
  CU_ASSERT_EQUAL(b->c.sock.fd, -1);
  CU_ASSERT_TRUE(b->c.sock.closed);
  CU_ASSERT_FALSE(b->c.sock.reading);
  CU_ASSERT_PTR_EQUAL(f.set.socks, &c->c.sock);
  CU_ASSERT_PTR_EQUAL(c->c.sock.next, &a->c.sock);
  CU_ASSERT_PTR_EQUAL(a->c.sock.prev, &c->c.sock);
  tpu__sock_close(&b->c.sock); /* idempotent */
  CU_ASSERT_EQUAL(f.set.n, 2);
  tpu__sock_resume(&b->c.sock); /* a closed socket is not re-armed */
  CU_ASSERT_FALSE(b->c.sock.reading);
  CU_ASSERT_EQUAL(tpu__sock_write(&b->c.sock), 0);
  /* The client of a closed socket sees the end of the stream. */
  char x;
  CU_ASSERT_EQUAL(read(b->peer, &x, 1), 0);
  /* Closed with input waiting and the client gone: no callback after the close. */
  CU_ASSERT_EQUAL(write(c->peer, "late", 4), 4);
  peer_close(c);
  tpu__sock_close(&c->c.sock);
  spin(&f, 5);
  CU_ASSERT_STRING_EQUAL(c->c.log, "");
  tpu__sock_close(&a->c.sock);
  CU_ASSERT_EQUAL(f.set.n, 0);
  CU_ASSERT_PTR_NULL(f.set.socks);
  fx_free(&f);
  /* A set never set up can be freed. */
  tpu__sockset_t never;
  memset(&never, 0, sizeof never);
  tpu__sockset_free(&never);
}

static void test_input(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL);
  e->out = "hello";
  e->nout = 5;
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'i'), 5));
  CU_ASSERT_EQUAL(e->c.ngot, 5);
  CU_ASSERT_EQUAL(memcmp(e->c.got, "hello", 5), 0);
  CU_ASSERT_EQUAL(e->c.sock.ilen - e->c.sock.ioff, 0);
  /* Bytes left unconsumed stay, and new ones are appended behind them. */
  e->c.keep_input = 1;
  clear_log(&e->c);
  e->out = "abc";
  e->nout = 3;
  e->outoff = 0;
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'i'), 5));
  clear_log(&e->c);
  e->out = "def";
  e->outoff = 0;
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'i'), 5));
  tpu__sock_t *s = &e->c.sock;
  CU_ASSERT_EQUAL(s->ilen - s->ioff, 6);
  CU_ASSERT_EQUAL(memcmp(s->ibuf + s->ioff, "abcdef", 6), 0);
  tpu__sock_consume(s, 2);
  e->c.keep_input = 0;
  e->out = "g";
  e->nout = 1;
  e->outoff = 0;
  CU_ASSERT_TRUE(pump(&f, GOT(0, 10), 5));
  CU_ASSERT_EQUAL(memcmp(e->c.got, "hellocdefg", 10), 0);
  /* Much more than a socket buffer: all of it, in order. */
  size_t big = 3u << 20;
  char *data = malloc(big);
  fill(data, big, 1);
  e->out = data;
  e->nout = big;
  e->outoff = 0;
  CU_ASSERT_TRUE(pump(&f, GOT(0, 10 + big), 20));
  CU_ASSERT_EQUAL(e->c.ngot, 10 + big);
  CU_ASSERT_EQUAL(memcmp(e->c.got + 10, data, big), 0);
  CU_ASSERT_STRING_EQUAL(e->c.why, "");
  e->out = NULL;
  fx_free(&f);
  free(data);
}

static void test_output(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL);
  tpu__sock_t *s = &e->c.sock;
  /* Three pieces added separately leave in one write, before the loop runs again. */
  char piece[3][1000];
  for (int i = 0; i < 3; i++) {
    fill(piece[i], sizeof piece[i], (unsigned)i + 10);
    CU_ASSERT_EQUAL(evbuffer_add(s->out, piece[i], sizeof piece[i]), 0);
  }
  CU_ASSERT_EQUAL(tpu__sock_unsent(s), 3000);
  CU_ASSERT_EQUAL(tpu__sock_write(s), 0);
  CU_ASSERT_EQUAL(tpu__sock_unsent(s), 0);
  CU_ASSERT_FALSE(s->wev_on);
  char buf[4096];
  CU_ASSERT_EQUAL(read(e->peer, buf, sizeof buf), 3000);
  for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(memcmp(buf + 1000 * i, piece[i], 1000), 0);
  /* Writing nothing is fine and arms nothing. */
  CU_ASSERT_EQUAL(tpu__sock_write(s), 0);
  CU_ASSERT_FALSE(s->wev_on);

  /* More than the kernel takes: the rest waits for the write event, which calls flush. */
  size_t big = 8u << 20;
  char *data = malloc(big);
  fill(data, big, 3);
  CU_ASSERT_EQUAL(evbuffer_add(s->out, data, big), 0);
  e->peer_reads = 0;
  CU_ASSERT_EQUAL(tpu__sock_write(s), 0);
  CU_ASSERT(tpu__sock_unsent(s) > 0 && tpu__sock_unsent(s) < big);
  CU_ASSERT_TRUE(s->wev_on);
  CU_ASSERT_EQUAL(e->c.nlog, 0);
  e->peer_reads = 1;
  CU_ASSERT_TRUE(pump(&f, IN(0, big), 20));
  CU_ASSERT_EQUAL(e->nin, big);
  CU_ASSERT_EQUAL(memcmp(e->in, data, big), 0);
  CU_ASSERT_EQUAL(tpu__sock_unsent(s), 0);
  CU_ASSERT_FALSE(s->wev_on); /* disarmed once empty */
  CU_ASSERT_PTR_NOT_NULL(strchr(e->c.log, 'f'));
  CU_ASSERT_FALSE(e->c.write_failed);
  free(data);
  fx_free(&f);
}

static void test_flush_later(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *a = fx_open(&f, NULL), *b = fx_open(&f, NULL);
  for (int i = 0; i < 3; i++) tpu__sock_flush_later(&a->c.sock);
  tpu__sock_flush_later(&b->c.sock);
  CU_ASSERT_TRUE(a->c.sock.dirty);
  CU_ASSERT_EQUAL(a->c.nlog, 0); /* deferred, not called at once */
  spin(&f, 3);
  CU_ASSERT_STRING_EQUAL(a->c.log, "f"); /* once however often asked */
  CU_ASSERT_STRING_EQUAL(b->c.log, "f");
  CU_ASSERT_FALSE(a->c.sock.dirty);
  CU_ASSERT_PTR_NULL(f.set.dirty);
  /* Asked again after the batch: flushed again. A socket closed while dirty is not flushed. */
  tpu__sock_flush_later(&a->c.sock);
  tpu__sock_flush_later(&b->c.sock);
  tpu__sock_close(&a->c.sock);
  CU_ASSERT_FALSE(a->c.sock.dirty);
  tpu__sock_flush_later(&a->c.sock); /* closed: ignored */
  CU_ASSERT_FALSE(a->c.sock.dirty);
  clear_log(&a->c);
  clear_log(&b->c);
  spin(&f, 3);
  CU_ASSERT_STRING_EQUAL(a->c.log, "");
  CU_ASSERT_STRING_EQUAL(b->c.log, "f");
  fx_free(&f);
}

static void test_pause_resume(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL);
  tpu__sock_t *s = &e->c.sock;
  tpu__sock_pause(s);
  tpu__sock_pause(s); /* idempotent */
  CU_ASSERT_FALSE(s->reading);
  CU_ASSERT_EQUAL(write(e->peer, "xyz", 3), 3);
  struct pollfd p = {.fd = s->fd, .events = POLLIN};
  CU_ASSERT_EQUAL(poll(&p, 1, 0), 1); /* the bytes are there to be read */
  spin(&f, 5);
  CU_ASSERT_EQUAL(e->c.nlog, 0); /* but paused: no input */
  tpu__sock_resume(s);
  tpu__sock_resume(s);
  CU_ASSERT_TRUE(s->reading);
  CU_ASSERT_TRUE(pump(&f, GOT(0, 3), 5));
  CU_ASSERT_EQUAL(memcmp(e->c.got, "xyz", 3), 0);
  /* Paused again, the end of stream is not reported either, until resumed. */
  tpu__sock_pause(s);
  peer_close(e);
  spin(&f, 5);
  CU_ASSERT_STRING_EQUAL(e->c.log, "i");
  tpu__sock_resume(s);
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'e'), 5));
  CU_ASSERT_STRING_EQUAL(e->c.log, "ie");
  fx_free(&f);
}

static void test_eof(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL), *h = fx_open(&f, NULL);
  /* Bytes then FIN: the bytes first, then the end of stream. */
  CU_ASSERT_EQUAL(write(e->peer, "bye", 3), 3);
  CU_ASSERT_EQUAL(shutdown(e->peer, SHUT_WR), 0);
  /* Half-close: the owner keeps the socket and can still answer. */
  h->c.keep_open = 1;
  CU_ASSERT_EQUAL(shutdown(h->peer, SHUT_WR), 0);
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'e'), 5));
  CU_ASSERT_TRUE(pump(&f, HAS(1, 'e'), 5));
  CU_ASSERT_STRING_EQUAL(e->c.log, "ie");
  CU_ASSERT_EQUAL(e->c.ngot, 3);
  CU_ASSERT_STRING_EQUAL(e->c.why, "");
  CU_ASSERT_TRUE(e->c.sock.closed);
  CU_ASSERT_STRING_EQUAL(h->c.log, "e");
  CU_ASSERT_EQUAL(evbuffer_add(h->c.sock.out, "late answer", 11), 0);
  CU_ASSERT_EQUAL(tpu__sock_write(&h->c.sock), 0);
  CU_ASSERT_TRUE(pump(&f, IN(1, 11), 5));
  CU_ASSERT_EQUAL(memcmp(h->in, "late answer", 11), 0);
  fx_free(&f);
}

static void test_discard(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL);
  e->c.sock.discard = 1;
  e->out = "ignored request";
  e->nout = 15;
  spin(&f, 5);
  CU_ASSERT_EQUAL(e->outoff, 15);
  CU_ASSERT_STRING_EQUAL(e->c.log, ""); /* read and dropped */
  CU_ASSERT_EQUAL(e->c.sock.ilen, 0);
  peer_close(e);
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'e'), 5)); /* the end of stream is still reported */
  CU_ASSERT_STRING_EQUAL(e->c.log, "e");
  e->out = NULL;
  fx_free(&f);
}

static void quiet(int severity, const char *msg) {}

/* A descriptor epoll cannot watch: open fails, frees what it made, leaves the fd to the caller. */
static void test_open_fails(void) {
  fx_t f;
  fx_init(&f, 10);
  uint64_t base = buffered();
  int fd = open("/dev/null", O_RDONLY);
  CU_ASSERT_FATAL(fd >= 0);
  tpu__sock_t s;
  memset(&s, 0, sizeof s);
  event_set_log_callback(quiet); /* libevent would warn about epoll_ctl */
  int rc = tpu__sock_open(&f.set, &s, fd, NULL, "x");
  event_set_log_callback(NULL);
  CU_ASSERT_EQUAL(rc, -1);
  CU_ASSERT_EQUAL(f.set.n, 0);
  CU_ASSERT_PTR_NULL(f.set.socks);
  CU_ASSERT_PTR_NULL(s.out);
  CU_ASSERT_PTR_NULL(s.ibuf);
  CU_ASSERT_PTR_NULL(s.rev);
  CU_ASSERT(fcntl(fd, F_GETFD) != -1); /* still open */
  /* With an SSL, which it takes over (and frees) on failure too. */
  if (tls_up_fixture()) {
    memset(&s, 0, sizeof s);
    event_set_log_callback(quiet);
    rc = tpu__sock_open(&f.set, &s, fd, tpu_tls_new_ssl(tls, TPU_TLS_NATIVE), "x");
    event_set_log_callback(NULL);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NULL(s.ssl);
    CU_ASSERT_EQUAL(f.set.n, 0);
  }
  CU_ASSERT_EQUAL(buffered(), base);
  close(fd);
  fx_free(&f);
}

static void test_close_on_error(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL);
  tpu__sock_t *s = &e->c.sock;
  /* The client leaves our answer unread and goes: the kernel resets the connection. */
  e->peer_reads = 0;
  CU_ASSERT_EQUAL(evbuffer_add(s->out, "unread", 6), 0);
  CU_ASSERT_EQUAL(tpu__sock_write(s), 0);
  peer_close(e);
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'c'), 5));
  CU_ASSERT_STRING_EQUAL(e->c.log, "c");
  CU_ASSERT_STRING_EQUAL(e->c.why, strerror(ECONNRESET));
  CU_ASSERT_TRUE(s->closed);
  CU_ASSERT_EQUAL(f.set.n, 0);

  /* A write to a client that is gone fails with errno; the owner decides. */
  end_t *w = fx_open(&f, NULL);
  tpu__sock_pause(&w->c.sock); /* so that the read side does not see the end first */
  peer_close(w);
  CU_ASSERT_EQUAL(evbuffer_add(w->c.sock.out, "answer", 6), 0);
  errno = 0;
  CU_ASSERT_EQUAL(tpu__sock_write(&w->c.sock), -1);
  CU_ASSERT_EQUAL(errno, EPIPE);
  fx_free(&f);
}

static void test_counted(void) {
  uint64_t base = buffered();
  struct evbuffer *b = tpu__sock_counted_buffer();
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  char data[5000];
  fill(data, sizeof data, 7);
  CU_ASSERT_EQUAL(evbuffer_add(b, data, 1000), 0);
  CU_ASSERT_EQUAL(buffered() - base, 1000);
  CU_ASSERT_EQUAL(evbuffer_add(b, data, 4000), 0);
  CU_ASSERT_EQUAL(buffered() - base, 5000);
  CU_ASSERT_EQUAL(evbuffer_drain(b, 1500), 0);
  CU_ASSERT_EQUAL(buffered() - base, 3500);
  /* Moving bytes to a plain buffer counts them out; moving them back counts them in. */
  struct evbuffer *plain = evbuffer_new();
  CU_ASSERT_EQUAL(evbuffer_remove_buffer(b, plain, 500), 500);
  CU_ASSERT_EQUAL(buffered() - base, 3000);
  CU_ASSERT_EQUAL(evbuffer_add_buffer(b, plain), 0);
  CU_ASSERT_EQUAL(buffered() - base, 3500);
  evbuffer_free(plain);
  /* Freed with bytes in it: given back. */
  tpu__sock_free_buffer(b);
  CU_ASSERT_EQUAL(buffered(), base);
  tpu__sock_free_buffer(NULL);

  /* A socket's output: counted while queued, given back as the kernel takes it... */
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL);
  tpu__sock_t *s = &e->c.sock;
  e->peer_reads = 0;
  size_t big = 4u << 20;
  char *lots = malloc(big);
  fill(lots, big, 9);
  CU_ASSERT_EQUAL(evbuffer_add(s->out, lots, big), 0);
  CU_ASSERT_EQUAL(buffered() - base, big);
  CU_ASSERT_EQUAL(tpu__sock_write(s), 0);
  CU_ASSERT_EQUAL(buffered() - base, tpu__sock_unsent(s));
  CU_ASSERT(tpu__sock_unsent(s) > 0);
  /* ...and all of it at once when the socket closes with output unsent. */
  tpu__sock_close(s);
  CU_ASSERT_EQUAL(buffered(), base);
  CU_ASSERT_EQUAL(tpu__sock_unsent(s), 0);
  tpu__sock_free(s);
  CU_ASSERT_EQUAL(buffered(), base);
  /* And through a whole transfer to a reading client: back to nothing at the end. */
  e = fx_open(&f, NULL);
  CU_ASSERT_EQUAL(evbuffer_add(e->c.sock.out, lots, big), 0);
  CU_ASSERT_EQUAL(tpu__sock_write(&e->c.sock), 0);
  CU_ASSERT_TRUE(pump(&f, IN(1, big), 20));
  CU_ASSERT_EQUAL(tpu__sock_unsent(&e->c.sock), 0);
  CU_ASSERT_EQUAL(buffered(), base);
  fx_free(&f); /* frees connection 0's buffers a second time: harmless */
  CU_ASSERT_EQUAL(buffered(), base);
  free(lots);
}

static void test_linger(void) {
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open(&f, NULL);
  tpu__sock_t *s = &e->c.sock;
  /* The last answer, then the lingering close: the client reads it and then the end. */
  CU_ASSERT_EQUAL(evbuffer_add(s->out, "last answer", 11), 0);
  CU_ASSERT_EQUAL(tpu__sock_write(s), 0);
  tpu__sock_pause(s); /* linger reads again even when paused */
  tpu__sock_linger(s);
  CU_ASSERT_TRUE(s->lingering);
  CU_ASSERT_TRUE(s->reading);
  uint64_t until = s->linger_until;
  tpu__sock_linger(s); /* idempotent */
  CU_ASSERT_EQUAL(s->linger_until, until);
  CU_ASSERT_TRUE(pump(&f, PEER_EOF(0), 5));
  CU_ASSERT_EQUAL(e->nin, 11);
  CU_ASSERT_EQUAL(memcmp(e->in, "last answer", 11), 0);
  /* What the client still sends is read and dropped, with no input callback. */
  e->out = "more requests";
  e->nout = 13;
  spin(&f, 5);
  CU_ASSERT_EQUAL(e->outoff, 13);
  CU_ASSERT_STRING_EQUAL(e->c.log, "");
  CU_ASSERT_EQUAL(s->ilen, 0);
  CU_ASSERT_FALSE(s->closed);
  /* The client's end of stream ends it. */
  peer_close(e);
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'c'), 5));
  CU_ASSERT_STRING_EQUAL(e->c.log, "c");
  CU_ASSERT_STRING_EQUAL(e->c.why, "lingering close: end of stream");

  /* A client that never closes: the sweep ends the linger after 2 s. */
  end_t *g = fx_open(&f, NULL);
  tpu__sock_linger(&g->c.sock);
  CU_ASSERT_TRUE(pump(&f, HAS(1, 'c'), 10));
  CU_ASSERT_STRING_EQUAL(g->c.log, "c");
  CU_ASSERT_STRING_EQUAL(g->c.why, "lingering close done");
  CU_ASSERT(tpu_now_us() >= g->c.sock.linger_until);
  e->out = NULL;
  fx_free(&f);
}

static int timeouts_done(fx_t *f, void *arg) {
  return strchr(f->e[0].c.log, 't') && strchr(f->e[2].c.log, 't') && strchr(f->e[4].c.log, 't');
}

static void test_timeouts(void) {
  fx_t f;
  fx_init(&f, 1);
  end_t *idle = fx_open(&f, NULL), *none = fx_open(&f, NULL), *late = fx_open(&f, NULL),
        *fine = fx_open(&f, NULL), *kept = fx_open(&f, NULL);
  uint64_t now = tpu_now_us();
  idle->c.sock.timeout_us = 1;                      /* no progress for 1 us */
  late->c.sock.deadline_us = now;                   /* past its deadline */
  fine->c.sock.timeout_us = 600u * 1000000u;        /* both far away */
  fine->c.sock.deadline_us = now + 600u * 1000000u;
  kept->c.sock.timeout_us = 1;
  kept->c.keep_open = 1;                            /* the owner decides to keep it */
  CU_ASSERT_TRUE(pump(&f, timeouts_done, NULL, 10));
  CU_ASSERT_STRING_EQUAL(idle->c.log, "t");
  CU_ASSERT_STRING_EQUAL(late->c.log, "t");
  CU_ASSERT_STRING_EQUAL(kept->c.log, "t");
  CU_ASSERT_FALSE(idle->c.handshaking_at_timeout);
  /* The same sweep looked at the others (plaintext: the set's handshake timeout is not theirs)
   * and left them alone. */
  CU_ASSERT_STRING_EQUAL(none->c.log, "");
  CU_ASSERT_STRING_EQUAL(fine->c.log, "");
  CU_ASSERT_FALSE(kept->c.sock.closed);
  /* A socket its owner kept is handed over again at the next sweep. */
  clear_log(&kept->c);
  CU_ASSERT_TRUE(pump(&f, HAS(4, 't'), 5));
  CU_ASSERT_STRING_EQUAL(none->c.log, "");
  fx_free(&f);
}

/* ---- TLS ---- */

static SSL_CTX *client_ctx;

static int tls_up_fixture(void) {
  if (tls) return 1;
  pki = tpu_test_pki();
  if (!pki) return 0;
  tpu_tls_config_t cfg = {.cert_file = pki->server_cert, .key_file = pki->server_key};
  char err[512];
  if (tpu_tls_create(&cfg, &tls, err, sizeof err) != 0) {
    fprintf(stderr, "\ntpu_tls_create: %s\n", err);
    return 0;
  }
  static const unsigned char alpn[] = "\x06tpud/1\x02h2";
  client_ctx = tpu_test_client_ctx(pki->ca, NULL, NULL, alpn, sizeof alpn - 1);
  return client_ctx != NULL;
}

/* A TLS connection; the client's SSL drives itself in pump(). */
static end_t *fx_open_tls(fx_t *f) {
  SSL *ssl = tpu_tls_new_ssl(tls, TPU_TLS_NATIVE);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ssl);
  end_t *e = fx_open(f, ssl);
  CU_ASSERT_TRUE(e->c.sock.handshaking);
  e->ssl = SSL_new(client_ctx);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e->ssl);
  SSL_set_fd(e->ssl, e->peer);
  SSL_set_connect_state(e->ssl);
  SSL_set1_host(e->ssl, "localhost");
  return e;
}

static void test_tls(void) {
  CU_ASSERT_FATAL(tls_up_fixture());
  fx_t f;
  fx_init(&f, 10);
  end_t *e = fx_open_tls(&f);
  tpu__sock_t *s = &e->c.sock;
  CU_ASSERT_TRUE(pump(&f, TLS_UP(0), 10));
  CU_ASSERT_TRUE(tpu__sock_alpn_is(s, "h2"));
  CU_ASSERT_FALSE(tpu__sock_alpn_is(s, "tpud/1"));
  CU_ASSERT_FALSE(tpu__sock_alpn_is(s, "h"));
  CU_ASSERT_STRING_EQUAL(s->cert_cn, ""); /* no client CA: no client certificate */
  CU_ASSERT_STRING_EQUAL(e->c.log, "");
  /* A record larger than the room left in the input buffer: the read takes part of it, and the
   * rest, held inside OpenSSL where the fd's readiness does not announce it, is taken at once.
   * (A first record of 100 bytes leaves 16284 of the first 16384; the next one is 16384.) */
  char rec[16484];
  fill(rec, sizeof rec, 5);
  e->c.keep_input = 1;
  CU_ASSERT_EQUAL(s->icap, 16384);
  CU_ASSERT_EQUAL(SSL_write(e->ssl, rec, 100), 100);
  CU_ASSERT_EQUAL(SSL_write(e->ssl, rec + 100, 16384), 16384);
  CU_ASSERT_TRUE(pump(&f, kept_n, &(want_t){.i = 0, .n = sizeof rec}, 10));
  CU_ASSERT_EQUAL(s->ilen - s->ioff, sizeof rec);
  CU_ASSERT_EQUAL(memcmp(s->ibuf + s->ioff, rec, sizeof rec), 0);
  tpu__sock_consume(s, s->ilen - s->ioff);
  e->c.keep_input = 0;
  clear_log(&e->c);
  /* Input: many records in one go reach the owner whole. */
  size_t big = 300000;
  char *data = malloc(big);
  fill(data, big, 11);
  e->out = data;
  e->nout = big;
  CU_ASSERT_TRUE(pump(&f, GOT(0, big), 20));
  CU_ASSERT_EQUAL(e->c.ngot, big);
  CU_ASSERT_EQUAL(memcmp(e->c.got, data, big), 0);
  /* Again with the owner consuming nothing: the buffer grows as the records come. */
  e->c.keep_input = 1;
  fill(data, big, 12);
  e->outoff = 0;
  CU_ASSERT_TRUE(pump(&f, kept_n, &(want_t){.i = 0, .n = big}, 20));
  CU_ASSERT_EQUAL(s->ilen - s->ioff, big);
  CU_ASSERT_EQUAL(memcmp(s->ibuf + s->ioff, data, big), 0);
  tpu__sock_consume(s, s->ilen - s->ioff);
  e->c.keep_input = 0;
  /* Output: more than a record and more than the socket takes at once. */
  size_t obig = 5u << 20;
  char *odata = malloc(obig);
  fill(odata, obig, 13);
  CU_ASSERT_EQUAL(evbuffer_add(s->out, odata, obig), 0);
  CU_ASSERT_EQUAL(tpu__sock_write(s), 0);
  CU_ASSERT_TRUE(pump(&f, IN(0, obig), 30));
  CU_ASSERT_EQUAL(e->nin, obig);
  CU_ASSERT_EQUAL(memcmp(e->in, odata, obig), 0);
  CU_ASSERT_EQUAL(tpu__sock_unsent(s), 0);
  CU_ASSERT_FALSE(e->c.write_failed);
  /* close_notify: an end of stream. */
  SSL_shutdown(e->ssl);
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'e'), 5));
  CU_ASSERT_PTR_NULL(strchr(e->c.log, 'c'));
  e->out = NULL;
  fx_free(&f);
  free(data);
  free(odata);
}

static void test_tls_client_cert(void) {
  CU_ASSERT_FATAL(tls_up_fixture());
  tpu_tls_config_t cfg = {.cert_file = pki->server_cert,
                          .key_file = pki->server_key,
                          .client_ca_file = pki->ca};
  tpu_tls_t *mtls = NULL;
  char err[512];
  CU_ASSERT_EQUAL_FATAL(tpu_tls_create(&cfg, &mtls, err, sizeof err), 0);
  SSL_CTX *alice = tpu_test_client_ctx(pki->ca, pki->client_cert, pki->client_key, NULL, 0);
  SSL_CTX *mallory = tpu_test_client_ctx(pki->ca, pki->foreign_cert, pki->foreign_key, NULL, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(alice);
  CU_ASSERT_PTR_NOT_NULL_FATAL(mallory);
  fx_t f;
  fx_init(&f, 10);
  SSL_CTX *ctxs[2] = {alice, mallory};
  for (int i = 0; i < 2; i++) {
    end_t *e = fx_open(&f, tpu_tls_new_ssl(mtls, TPU_TLS_NATIVE));
    e->ssl = SSL_new(ctxs[i]);
    SSL_set_fd(e->ssl, e->peer);
    SSL_set_connect_state(e->ssl);
  }
  CU_ASSERT_TRUE(pump(&f, TLS_UP(0), 10));
  CU_ASSERT_STRING_EQUAL(f.e[0].c.sock.cert_cn, "alice");
  CU_ASSERT_STRING_EQUAL(f.e[0].c.sock.cert_subject,
                         "CN=alice SAN=email:alice@example.com,DNS:alice.example");
  CU_ASSERT_STRING_EQUAL(f.e[0].c.log, "");
  /* A certificate from another CA ends the handshake. */
  CU_ASSERT_TRUE(pump(&f, HAS(1, 'c'), 10));
  CU_ASSERT_STRING_EQUAL(f.e[1].c.why, "TLS handshake failed");
  CU_ASSERT_STRING_EQUAL(f.e[1].c.sock.cert_cn, "");
  fx_free(&f);
  SSL_CTX_free(alice);
  SSL_CTX_free(mallory);
  tpu_tls_free(mtls);
}

static void test_tls_errors(void) {
  CU_ASSERT_FATAL(tls_up_fixture());
  fx_t f;
  fx_init(&f, 1);
  /* 0: plaintext to the TLS socket: the handshake fails, the owner is told to close. */
  end_t *plain = fx_open_tls(&f);
  SSL_free(plain->ssl);
  plain->ssl = NULL;
  plain->out = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  plain->nout = strlen(plain->out);
  /* 1: a client that says nothing: the handshake timeout. */
  end_t *mute = fx_open_tls(&f);
  SSL_free(mute->ssl);
  mute->ssl = NULL;
  /* 2: a client that sends a request and goes without close_notify: an end of stream. */
  end_t *rude = fx_open_tls(&f);
  rude->out = "request";
  rude->nout = 7;
  CU_ASSERT_TRUE(pump(&f, HAS(0, 'c'), 10));
  CU_ASSERT_STRING_EQUAL(plain->c.log, "c");
  CU_ASSERT_STRING_EQUAL(plain->c.why, "TLS handshake failed");
  CU_ASSERT_TRUE(plain->c.sock.closed);
  CU_ASSERT_TRUE(pump(&f, HAS(1, 't'), 10));
  CU_ASSERT_STRING_EQUAL(mute->c.log, "t");
  CU_ASSERT_TRUE(mute->c.handshaking_at_timeout);
  CU_ASSERT_TRUE(pump(&f, GOT(2, 7), 10));
  CU_ASSERT_EQUAL(memcmp(rude->c.got, "request", 7), 0);
  peer_close(rude);
  CU_ASSERT_TRUE(pump(&f, HAS(2, 'e'), 10));
  CU_ASSERT_STRING_EQUAL(rude->c.log, "ie");
  CU_ASSERT_STRING_EQUAL(rude->c.why, "");
  fx_free(&f);
}

TPU_TEST_SUITE(server_sock,
               {"input_buffer", test_input_buffer},
               {"lifetime", test_lifetime},
               {"input", test_input},
               {"output", test_output},
               {"flush_later", test_flush_later},
               {"pause_resume", test_pause_resume},
               {"eof", test_eof},
               {"discard", test_discard},
               {"open_fails", test_open_fails},
               {"close_on_error", test_close_on_error},
               {"counted", test_counted},
               {"linger", test_linger},
               {"timeouts", test_timeouts},
               {"tls", test_tls},
               {"tls_client_cert", test_tls_client_cert},
               {"tls_errors", test_tls_errors})
