/*
 * tpubench.c - load generator for tpud: closed loop (N connections × D in flight) or open loop
 * (a fixed request rate), over the native protocol or HTTP/1.1 JSON; latency percentiles.
 *
 * DESIGN
 * One thread and one epoll loop drive every connection (the machine this runs on is small and
 * the server needs the other cores). Each connection is a non-blocking socket with an output
 * buffer and an input buffer; requests are pre-encoded once (the HTTP request bytes, or the
 * serialized ModelInferRequest that each native frame wraps with its own id), so the loop only
 * copies bytes, parses response framing and records latencies.
 *  - native: frames of proto/tpu_frame.h around envelopes of proto/tpu_envelope.h (what
 *    libtpuclient sends; libtpuclient itself has no way to wait on many handles in one thread,
 *    so the loop speaks the same framing directly); responses may come back out of order and are
 *    matched by id.
 *  - http: a minimal keep-alive HTTP/1.1 client: Content-Length bodies only (what tpud sends),
 *    requests pipelined up to the depth, a reconnect when the server closes.
 * Closed loop: every connection keeps `depth` requests in flight; latency is send → response.
 * Open loop (--rate R): request k is due at start + k/R and goes to connection k mod N as soon as
 * it is due, whatever is in flight; its latency is measured from the time it was due, so a
 * stalled server is charged for every request it delayed (no coordinated omission).
 * Latencies go into a log-linear histogram (1/64 relative precision) in nanoseconds.
 * TLS (--tls-ca / --tls): each connection handshakes (blocking, at connect, before it counts)
 * and then moves its bytes through SSL_read/SSL_write on the same non-blocking socket; reading
 * loops until OpenSSL wants more bytes, so nothing decrypted waits unseen. A --token goes into
 * each request: envelope metadata "authorization" (native) or an Authorization header (http).
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tpu_envelope.h"
#include "tpu_frame.h"
#include "tpu_oip_json.h"
#include "tpuclient.h"

/* ---- options ---- */

typedef struct {
  const char *addr;
  bool http;
  const char *model, *version;
  const char *data, *input_file;
  bool random_input;
  unsigned batch;
  unsigned conns, depth;
  double duration_s, warmup_s, rate;
  uint64_t nreq;
  bool json;
  int timeout_ms;
  bool tls;
  const char *tls_ca, *tls_cert, *tls_key, *token;
} opts_t;

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpubench [OPTIONS]\n"
          "Load generator for tpud: closed loop (N connections, each with D requests in flight)\n"
          "or open loop (--rate: a fixed request rate, latency from each request's scheduled\n"
          "send time), over the native protocol or HTTP/1.1 JSON (OIP v2 REST).\n\n"
          "  --addr HOST:PORT      server (default 127.0.0.1:8500 native, 127.0.0.1:8501 http)\n"
          "  --protocol P          native | http (default native)\n"
          "  --model NAME          model to infer (default digits)\n"
          "  --version V           model version (default: the server's choice)\n"
          "  --data JSON           infer request body (as for tpuctl infer / POST .../infer)\n"
          "  --input-file FILE     the same, from a file\n"
          "  --random-input        random FP32 rows of the model's input width (the default)\n"
          "  --batch N             rows per request with --random-input (default 1)\n"
          "  -c, --connections N   connections (default 64)\n"
          "  -D, --depth N         requests in flight per connection, closed loop (default 1)\n"
          "  -d, --duration S      seconds to measure (default 10)\n"
          "  -n, --requests N      stop after N measured requests instead\n"
          "  --rate R              open loop at R requests/s (default: closed loop)\n"
          "  --warmup S            seconds of load before measuring (default 1)\n"
          "  --timeout-ms MS       connect and setup timeout (default 5000)\n"
          "  --json                print the result as one JSON object\n"
          "  --tls                 TLS, verifying the server with the system's CAs\n"
          "  --tls-ca FILE         TLS, verifying the server with the CAs in FILE\n"
          "  --tls-cert FILE       client certificate (mutual TLS); --tls-key FILE its key\n"
          "  --token TOKEN         bearer token (default $TPUCTL_TOKEN)\n"
          "  -h, --help            this text\n"
          "Exit: 0 when every measured request succeeded, 1 when some failed, 2 on bad usage.\n");
}

static int parse_u(const char *s, unsigned long long max, unsigned long long *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *end || errno || v > max || s[0] == '-') return -1;
  *out = v;
  return 0;
}

static int parse_d(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (!*s || *end || !(v >= 0) || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static int parse_opts(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.model = "digits", .batch = 1, .conns = 64, .depth = 1, .duration_s = 10,
                .warmup_s = 1, .timeout_ms = 5000};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    unsigned long long u;
#define NEED()                                                              \
  do {                                                                      \
    if (!v) {                                                               \
      fprintf(stderr, "tpubench: %s needs a value (see --help)\n", a);      \
      return 2;                                                             \
    }                                                                       \
    i++;                                                                    \
  } while (0)
#define BAD(what)                                                                      \
  do {                                                                                 \
    fprintf(stderr, "tpubench: %s: expected %s, got '%s' (see --help)\n", a, what, v); \
    return 2;                                                                          \
  } while (0)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--addr")) {
      NEED();
      o->addr = v;
    } else if (!strcmp(a, "--protocol")) {
      NEED();
      if (!strcmp(v, "http")) o->http = true;
      else if (!strcmp(v, "native")) o->http = false;
      else BAD("native or http");
    } else if (!strcmp(a, "--model")) {
      NEED();
      o->model = v;
    } else if (!strcmp(a, "--version")) {
      NEED();
      o->version = v;
    } else if (!strcmp(a, "--data")) {
      NEED();
      o->data = v;
    } else if (!strcmp(a, "--input-file")) {
      NEED();
      o->input_file = v;
    } else if (!strcmp(a, "--random-input")) {
      o->random_input = true;
    } else if (!strcmp(a, "--batch")) {
      NEED();
      if (parse_u(v, 1 << 20, &u) || !u) BAD("a row count ≥ 1");
      o->batch = (unsigned)u;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--connections")) {
      NEED();
      if (parse_u(v, 10000, &u) || !u) BAD("1..10000 connections");
      o->conns = (unsigned)u;
    } else if (!strcmp(a, "-D") || !strcmp(a, "--depth")) {
      NEED();
      if (parse_u(v, 4096, &u) || !u) BAD("1..4096 requests");
      o->depth = (unsigned)u;
    } else if (!strcmp(a, "-d") || !strcmp(a, "--duration")) {
      NEED();
      if (parse_d(v, &o->duration_s) || o->duration_s <= 0) BAD("seconds > 0");
    } else if (!strcmp(a, "-n") || !strcmp(a, "--requests")) {
      NEED();
      if (parse_u(v, UINT64_MAX, &u) || !u) BAD("a request count ≥ 1");
      o->nreq = u;
    } else if (!strcmp(a, "--rate")) {
      NEED();
      if (parse_d(v, &o->rate) || o->rate <= 0) BAD("requests per second > 0");
    } else if (!strcmp(a, "--warmup")) {
      NEED();
      if (parse_d(v, &o->warmup_s)) BAD("seconds ≥ 0");
    } else if (!strcmp(a, "--timeout-ms")) {
      NEED();
      if (parse_u(v, 3600000, &u) || !u) BAD("milliseconds ≥ 1");
      o->timeout_ms = (int)u;
    } else if (!strcmp(a, "--json")) {
      o->json = true;
    } else if (!strcmp(a, "--tls")) {
      o->tls = true;
    } else if (!strcmp(a, "--tls-ca")) {
      NEED();
      o->tls_ca = v;
      o->tls = true;
    } else if (!strcmp(a, "--tls-cert")) {
      NEED();
      o->tls_cert = v;
      o->tls = true;
    } else if (!strcmp(a, "--tls-key")) {
      NEED();
      o->tls_key = v;
    } else if (!strcmp(a, "--token")) {
      NEED();
      o->token = v;
    } else {
      fprintf(stderr, "tpubench: unknown option '%s' (see --help)\n", a);
      return 2;
    }
  }
  if (!!o->data + !!o->input_file + o->random_input > 1) {
    fprintf(stderr, "tpubench: give one of --data, --input-file, --random-input\n");
    return 2;
  }
  if (!o->data && !o->input_file) o->random_input = true;
  if (!o->addr) o->addr = o->http ? "127.0.0.1:8501" : "127.0.0.1:8500";
  if (!o->token && getenv("TPUCTL_TOKEN") && *getenv("TPUCTL_TOKEN")) o->token = getenv("TPUCTL_TOKEN");
  return 0;
}

/* ---- time and the histogram ---- */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define HBUCKETS (64 * 60)
typedef struct {
  uint64_t count[HBUCKETS];
  uint64_t n, max, sum;
} hist_t;

/* Log-linear: exact below 128 ns, then 64 sub-buckets per power of two. */
static int hidx(uint64_t v) {
  if (v < 128) return (int)v;
  int msb = 63 - __builtin_clzll(v);
  int shift = msb - 6;
  int i = (shift + 1) * 64 + (int)((v >> shift) - 64);
  return i < HBUCKETS ? i : HBUCKETS - 1;
}

/* Upper edge of bucket i (ns). */
static uint64_t hupper(int i) {
  if (i < 128) return (uint64_t)i;
  int shift = i / 64 - 1;
  return (((uint64_t)(i % 64 + 64) + 1) << shift) - 1;
}

static void hrecord(hist_t *h, uint64_t v) {
  h->count[hidx(v)]++;
  h->n++;
  h->sum += v;
  if (v > h->max) h->max = v;
}

static uint64_t hpct(const hist_t *h, double p) {
  if (!h->n) return 0;
  uint64_t want = (uint64_t)ceil(p / 100.0 * (double)h->n), cum = 0;
  if (want == 0) want = 1;
  for (int i = 0; i < HBUCKETS; i++) {
    cum += h->count[i];
    if (cum >= want) return hupper(i) < h->max ? hupper(i) : h->max;
  }
  return h->max;
}

/* ---- connections ---- */

typedef struct {
  uint64_t id;
  uint64_t t; /* ns: send time (closed loop) or scheduled time (open loop) */
} inflight_t;

typedef struct {
  int fd;
  SSL *ssl; /* TLS, or NULL */
  char *out;
  size_t olen, ocap, osent;
  char *in;
  size_t ilen, icap;
  inflight_t *fl; /* FIFO ring (HTTP answers in order; native matched by id) */
  size_t flcap, flhead, nfl;
  uint64_t next_id;
  bool want_write;
} conn_t;

typedef struct {
  opts_t o;
  char host[256], port[16];
  struct addrinfo *ai;
  SSL_CTX *ssl_ctx; /* --tls */
  char *authz;      /* "Bearer <token>", or NULL */
  int ep;
  conn_t *c;
  /* The request: HTTP bytes, or the native payload (serialized ModelInferRequest). */
  char *req;
  size_t req_len;
  size_t rows;
  /* Results. */
  bool measuring, stop_sending;
  hist_t h;
  uint64_t ok, errors, sent_measured;
  char err_names[32][24];
  uint64_t err_counts[32];
  size_t nerr_kinds;
  uint64_t reconnects;
} bench_t;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tpubench: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void count_error(bench_t *b, const char *name) {
  if (!b->measuring) return;
  b->errors++;
  for (size_t i = 0; i < b->nerr_kinds; i++)
    if (!strcmp(b->err_names[i], name)) {
      b->err_counts[i]++;
      return;
    }
  if (b->nerr_kinds < 32) {
    snprintf(b->err_names[b->nerr_kinds], sizeof b->err_names[0], "%s", name);
    b->err_counts[b->nerr_kinds++] = 1;
  }
}

static void grow(char **p, size_t *cap, size_t need) {
  if (need <= *cap) return;
  size_t n = *cap ? *cap : 4096;
  while (n < need) n *= 2;
  char *q = realloc(*p, n);
  if (!q) die("out of memory");
  *p = q;
  *cap = n;
}

static int connect_fd(bench_t *b) {
  for (struct addrinfo *ai = b->ai; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      int fl = fcntl(fd, F_GETFL);
      if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        close(fd);
        continue;
      }
      return fd;
    }
    close(fd);
  }
  return -1;
}

/* TLS over a connected socket: a blocking handshake (set-up, not measured), then non-blocking. */
static SSL *tls_wrap(bench_t *b, int fd) {
  if (!b->ssl_ctx) return NULL;
  SSL *ssl = SSL_new(b->ssl_ctx);
  if (!ssl || SSL_set_fd(ssl, fd) != 1) die("TLS: out of memory");
  unsigned char ip[16];
  int is_ip = inet_pton(AF_INET, b->host, ip) == 1 || inet_pton(AF_INET6, b->host, ip) == 1;
  if (!is_ip) SSL_set_tlsext_host_name(ssl, b->host);
  if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), b->host)
             : SSL_set1_host(ssl, b->host)) != 1)
    die("TLS: cannot verify against '%s'", b->host);
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (SSL_connect(ssl) != 1) {
    long vr = SSL_get_verify_result(ssl);
    char why[256];
    ERR_error_string_n(ERR_get_error(), why, sizeof why);
    die("TLS handshake with %s failed: %s", b->o.addr,
        vr != X509_V_OK ? X509_verify_cert_error_string(vr) : why);
  }
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  return ssl;
}

/* send(2)/recv(2) or their TLS equivalents: -1 with errno EAGAIN when the socket is not ready. */
static ssize_t c_send(conn_t *c, const void *p, size_t n) {
  if (!c->ssl) return send(c->fd, p, n, MSG_NOSIGNAL);
  int r = SSL_write(c->ssl, p, (int)(n > (1u << 30) ? 1u << 30 : n));
  if (r > 0) return r;
  int e = SSL_get_error(c->ssl, r);
  errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

static ssize_t c_recv(conn_t *c, void *p, size_t n) {
  if (!c->ssl) return recv(c->fd, p, n, 0);
  int r = SSL_read(c->ssl, p, (int)(n > (1u << 30) ? 1u << 30 : n));
  if (r > 0) return r;
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_ZERO_RETURN) return 0;
  errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

static void conn_open(bench_t *b, conn_t *c) {
  c->fd = connect_fd(b);
  if (c->fd < 0) die("connect to %s: %s", b->o.addr, strerror(errno));
  c->ssl = tls_wrap(b, c->fd);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
  if (epoll_ctl(b->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) die("epoll_ctl: %s", strerror(errno));
  c->want_write = false;
}

static void set_write(bench_t *b, conn_t *c, bool on) {
  if (c->want_write == on) return;
  c->want_write = on;
  struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
  epoll_ctl(b->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void flush_out(bench_t *b, conn_t *c) {
  while (c->osent < c->olen) {
    ssize_t n = c_send(c, c->out + c->osent, c->olen - c->osent);
    if (n > 0) {
      c->osent += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      set_write(b, c, true);
      return;
    }
    return; /* an error: the read side will see the connection go */
  }
  c->olen = c->osent = 0;
  set_write(b, c, false);
}

/* Queues one request on c, recording t (send or scheduled time). */
static void send_req(bench_t *b, conn_t *c, uint64_t t) {
  if (c->nfl == c->flcap) {
    size_t ncap = c->flcap ? c->flcap * 2 : 8;
    inflight_t *fl = malloc(ncap * sizeof *fl);
    if (!fl) die("out of memory");
    for (size_t i = 0; i < c->nfl; i++) fl[i] = c->fl[(c->flhead + i) % c->flcap];
    free(c->fl);
    c->fl = fl;
    c->flcap = ncap;
    c->flhead = 0;
  }
  uint64_t id = ++c->next_id;
  c->fl[(c->flhead + c->nfl++) % c->flcap] = (inflight_t){id, t};
  if (b->o.http) {
    grow(&c->out, &c->ocap, c->olen + b->req_len);
    memcpy(c->out + c->olen, b->req, b->req_len);
    c->olen += b->req_len;
  } else {
    tpu_envelope_request_t r = {.id = id, .method = TPUD__METHOD__MODEL_INFER,
                                .payload = (const uint8_t *)b->req, .payload_len = b->req_len};
    const char *md[2] = {"authorization", b->authz};
    if (b->authz) {
      r.metadata = md;
      r.n_metadata = 1;
    }
    size_t need = 0;
    tpu_proto_error_t perr;
    grow(&c->out, &c->ocap, c->olen + b->req_len + 64);
    tpu_proto_status_t st = tpu_envelope_encode_request(&r, (uint8_t *)c->out + c->olen,
                                                        c->ocap - c->olen, &need, &perr);
    if (st == TPU_PROTO_ENOSPC) {
      grow(&c->out, &c->ocap, c->olen + need);
      st = tpu_envelope_encode_request(&r, (uint8_t *)c->out + c->olen, c->ocap - c->olen,
                                       &need, &perr);
    }
    if (st != TPU_PROTO_OK) die("encoding a request: %s", perr.msg);
    c->olen += need;
  }
  if (b->measuring) b->sent_measured++;
}

/* Completes the in-flight request `id` (0: the oldest), with status name NULL for success. */
static void complete(bench_t *b, conn_t *c, uint64_t id, const char *err) {
  uint64_t now = now_ns();
  size_t k = 0;
  if (id) {
    for (k = 0; k < c->nfl; k++)
      if (c->fl[(c->flhead + k) % c->flcap].id == id) break;
    if (k == c->nfl) return; /* not ours */
  }
  if (!c->nfl) return;
  size_t at = (c->flhead + k) % c->flcap;
  uint64_t t = c->fl[at].t;
  /* Remove slot k: shift the ones before it forward (k is 0 almost always). */
  for (size_t j = k; j > 0; j--)
    c->fl[(c->flhead + j) % c->flcap] = c->fl[(c->flhead + j - 1) % c->flcap];
  c->flhead = (c->flhead + 1) % c->flcap;
  c->nfl--;
  if (!b->measuring) return;
  if (err) {
    count_error(b, err);
    return;
  }
  b->ok++;
  hrecord(&b->h, now > t ? now - t : 0);
}

/* Parses complete responses out of c->in; returns -1 when the stream is broken. */
static int parse_in(bench_t *b, conn_t *c) {
  size_t off = 0;
  for (;;) {
    const char *p = c->in + off;
    size_t avail = c->ilen - off;
    if (b->o.http) {
      const char *end = memmem(p, avail, "\r\n\r\n", 4);
      if (!end) break;
      size_t hlen = (size_t)(end - p) + 4;
      int status = 0;
      if (avail < 12 || sscanf(p, "HTTP/1.%*c %d", &status) != 1) return -1;
      long long clen = -1;
      bool close_after = false;
      for (const char *l = memchr(p, '\n', hlen); l && l < end; l = memchr(l + 1, '\n', (size_t)(end - l))) {
        if (!strncasecmp(l + 1, "Content-Length:", 15)) clen = atoll(l + 16);
        if (!strncasecmp(l + 1, "Connection:", 11) && strstr(l + 12, "close") &&
            strstr(l + 12, "close") < end)
          close_after = true;
      }
      if (clen < 0) return -1;
      if (avail < hlen + (size_t)clen) break;
      char name[24];
      snprintf(name, sizeof name, "http_%d", status);
      complete(b, c, 0, status == 200 ? NULL : name);
      off += hlen + (size_t)clen;
      if (close_after) return -1;
    } else {
      if (avail < TPU_FRAME_HEADER_SIZE) break;
      uint32_t len;
      tpu_proto_error_t perr;
      if (tpu_frame_parse_header((const uint8_t *)p, 0, &len, &perr) != TPU_PROTO_OK) return -1;
      if (avail < TPU_FRAME_HEADER_SIZE + (size_t)len) break;
      Tpud__ResponseEnvelope *env = NULL;
      if (tpu_envelope_decode_response((const uint8_t *)p + TPU_FRAME_HEADER_SIZE, len, SIZE_MAX,
                                       &env, &perr) != TPU_PROTO_OK)
        return -1;
      uint64_t id = env->id;
      int code = (int)env->code;
      tpu_envelope_response_free(env);
      if (id == 0) return -1; /* a connection-level error */
      const char *nm = tpu_client_status_name((tpu_client_status_t)code);
      complete(b, c, id, code == 0 ? NULL : nm ? nm : "UNKNOWN");
      off += TPU_FRAME_HEADER_SIZE + len;
    }
  }
  if (off) {
    memmove(c->in, c->in + off, c->ilen - off);
    c->ilen -= off;
  }
  return 0;
}

static void conn_reset(bench_t *b, conn_t *c, const char *why) {
  epoll_ctl(b->ep, EPOLL_CTL_DEL, c->fd, NULL);
  if (c->ssl) SSL_free(c->ssl);
  c->ssl = NULL;
  close(c->fd);
  while (c->nfl) complete(b, c, 0, why);
  c->ilen = c->olen = c->osent = 0;
  b->reconnects++;
  conn_open(b, c);
}

static void on_readable(bench_t *b, conn_t *c) {
  for (;;) {
    grow(&c->in, &c->icap, c->ilen + 65536);
    ssize_t n = c_recv(c, c->in + c->ilen, c->icap - c->ilen);
    if (n > 0) {
      c->ilen += (size_t)n;
      if ((size_t)n < 65536 && !c->ssl) break; /* TLS: read until OpenSSL wants more bytes */
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    conn_reset(b, c, "connection_closed");
    return;
  }
  if (parse_in(b, c) != 0) conn_reset(b, c, "protocol_error");
}

/* ---- set-up: the request body ---- */

static char *read_file(const char *path, size_t *len) {
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) die("%s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    grow(&buf, &cap, *len + 65536);
    size_t n = fread(buf + *len, 1, cap - *len - 1, f);
    *len += n;
    if (!n) break;
  }
  buf[*len] = 0;
  if (f != stdin) fclose(f);
  return buf;
}

/* A blocking GET for set-up (HTTP): returns the body, NULL with *status on failure. */
static char *http_get(bench_t *b, const char *path, int *status) {
  int fd = connect_fd(b);
  if (fd < 0) die("connect to %s: %s", b->o.addr, strerror(errno));
  conn_t hc = {.fd = fd, .ssl = tls_wrap(b, fd)};
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  char req[2048];
  int n = snprintf(req, sizeof req,
                   "GET %s HTTP/1.1\r\nHost: %s\r\n%s%s%sConnection: close\r\n\r\n", path,
                   b->host, b->authz ? "Authorization: " : "", b->authz ? b->authz : "",
                   b->authz ? "\r\n" : "");
  if (c_send(&hc, req, (size_t)n) != n) die("send: %s", strerror(errno));
  char *buf = NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    grow(&buf, &cap, len + 65536);
    ssize_t r = c_recv(&hc, buf + len, cap - len - 1);
    if (r <= 0) break;
    len += (size_t)r;
  }
  if (hc.ssl) SSL_free(hc.ssl);
  close(fd);
  if (!buf) die("no answer from %s", b->o.addr);
  buf[len] = 0;
  *status = 0;
  sscanf(buf, "HTTP/1.%*c %d", status);
  char *body = strstr(buf, "\r\n\r\n");
  char *out = strdup(body ? body + 4 : "");
  free(buf);
  return out;
}

/* Input name and width of the model, from its metadata. */
static void model_input(bench_t *b, char *name, size_t namecap, size_t *width) {
  json_t *root = NULL;
  if (b->o.http) {
    char path[600];
    snprintf(path, sizeof path, "/v2/models/%s%s%s", b->o.model, b->o.version ? "/versions/" : "",
             b->o.version ? b->o.version : "");
    int status;
    char *body = http_get(b, path, &status);
    if (status != 200) die("GET %s: HTTP %d: %s", path, status, body);
    root = json_loads(body, 0, NULL);
    free(body);
  } else {
    tpu_client_options_t co;
    tpu_client_options_init(&co);
    co.connect_timeout_ms = co.timeout_ms = b->o.timeout_ms;
    co.tls = b->o.tls;
    co.tls_ca_file = b->o.tls_ca;
    co.tls_cert_file = b->o.tls_cert;
    co.tls_key_file = b->o.tls_key;
    co.token = b->o.token;
    tpu_client_t *cl = NULL;
    if (tpu_client_connect(b->o.addr, &co, &cl) != TPU_CLIENT_OK)
      die("%s", tpu_client_errmsg(cl));
    Inference__ModelMetadataResponse *md = NULL;
    if (tpu_client_model_metadata(cl, b->o.model, b->o.version, 0, &md) != TPU_CLIENT_OK)
      die("model metadata: %s", tpu_client_errmsg(cl));
    if (md->n_inputs < 1 || md->inputs[0]->n_shape != 2) die("model has no [-1,K] input");
    root = json_pack("{s:[{s:s,s:[I,I]}]}", "inputs", "name", md->inputs[0]->name, "shape",
                     (json_int_t)md->inputs[0]->shape[0], (json_int_t)md->inputs[0]->shape[1]);
    inference__model_metadata_response__free_unpacked(md, NULL);
    tpu_client_free(cl);
  }
  json_t *in0 = json_array_get(json_object_get(root, "inputs"), 0);
  json_t *shape = json_object_get(in0, "shape");
  if (!in0 || json_array_size(shape) != 2) die("model %s: expected one input of shape [-1,K]", b->o.model);
  snprintf(name, namecap, "%s", json_string_value(json_object_get(in0, "name")));
  *width = (size_t)json_integer_value(json_array_get(shape, 1));
  json_decref(root);
}

static void build_request(bench_t *b) {
  char *body;
  size_t blen;
  if (b->o.data) {
    body = strdup(b->o.data);
    blen = strlen(body);
  } else if (b->o.input_file) {
    body = read_file(b->o.input_file, &blen);
  } else {
    char name[256];
    size_t width;
    model_input(b, name, sizeof name, &width);
    size_t cap = 0, len = 0;
    body = NULL;
    grow(&body, &cap, 256 + (size_t)b->o.batch * width * 12);
    len = (size_t)snprintf(body, cap, "{\"inputs\":[{\"name\":\"%s\",\"shape\":[%u,%zu],"
                           "\"datatype\":\"FP32\",\"data\":[", name, b->o.batch, width);
    srand(12345);
    for (size_t i = 0; i < (size_t)b->o.batch * width; i++)
      len += (size_t)snprintf(body + len, cap - len, "%s%.4f", i ? "," : "",
                              (double)rand() / RAND_MAX);
    len += (size_t)snprintf(body + len, cap - len, "]}]}");
    blen = len;
  }
  /* Parse it either way: a bad body is reported before any load is sent. */
  Inference__ModelInferRequest *q = NULL;
  char err[512];
  tpu_oip_json_status_t st = tpu_oip_json_infer_request_parse(body, blen, b->o.model,
                                                              b->o.version, NULL, &q, err,
                                                              sizeof err);
  if (st != TPU_OIP_JSON_OK) die("request body: %s: %s", tpu_oip_json_strerror(st), err);
  b->rows = q->n_inputs && q->inputs[0]->n_shape ? (size_t)q->inputs[0]->shape[0] : 1;
  if (b->o.http) {
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "POST /v2/models/%s%s%s/infer HTTP/1.1\r\nHost: %s\r\n%s%s%s"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      b->o.model, b->o.version ? "/versions/" : "",
                      b->o.version ? b->o.version : "", b->host,
                      b->authz ? "Authorization: " : "", b->authz ? b->authz : "",
                      b->authz ? "\r\n" : "", blen);
    b->req_len = (size_t)hn + blen;
    b->req = malloc(b->req_len);
    if (!b->req) die("out of memory");
    memcpy(b->req, head, (size_t)hn);
    memcpy(b->req + hn, body, blen);
  } else {
    b->req_len = protobuf_c_message_get_packed_size(&q->base);
    b->req = malloc(b->req_len ? b->req_len : 1);
    if (!b->req) die("out of memory");
    protobuf_c_message_pack(&q->base, (uint8_t *)b->req);
  }
  inference__model_infer_request__free_unpacked(q, NULL);
  free(body);
}

/* ---- the run ---- */

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) { (void)sig; interrupted = 1; }

static void report_text(const bench_t *b, double secs) {
  const hist_t *h = &b->h;
  printf("tpubench: %s %s, model %s%s%s, %zu row%s/request, %s, %u connections",
         b->o.http ? "http" : "native", b->o.addr, b->o.model, b->o.version ? " version " : "",
         b->o.version ? b->o.version : "", b->rows, b->rows == 1 ? "" : "s",
         b->o.rate > 0 ? "open loop" : "closed loop", b->o.conns);
  if (b->o.rate > 0)
    printf(", %.0f req/s offered\n", b->o.rate);
  else
    printf(" x depth %u\n", b->o.depth);
  printf("  requests    %" PRIu64 " ok, %" PRIu64 " errors in %.2f s\n", b->ok, b->errors, secs);
  printf("  throughput  %.0f req/s (%.0f rows/s)\n", (double)b->ok / secs,
         (double)b->ok * (double)b->rows / secs);
  printf("  latency ms  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  mean %.3f\n",
         hpct(h, 50) / 1e6, hpct(h, 90) / 1e6, hpct(h, 99) / 1e6, hpct(h, 99.9) / 1e6,
         h->max / 1e6, h->n ? (double)h->sum / (double)h->n / 1e6 : 0.0);
  printf("  histogram   (latency ≤ ms: requests, cumulative %%)\n");
  static const double edges_ms[] = {0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000, 1e9};
  uint64_t cum = 0;
  int bi = 0;
  for (size_t e = 0; e < sizeof edges_ms / sizeof edges_ms[0]; e++) {
    uint64_t in = 0;
    while (bi < HBUCKETS && hupper(bi) <= (uint64_t)(edges_ms[e] * 1e6)) in += h->count[bi++];
    cum += in;
    char label[16];
    if (e + 1 == sizeof edges_ms / sizeof edges_ms[0])
      snprintf(label, sizeof label, "more");
    else
      snprintf(label, sizeof label, "%g", edges_ms[e]);
    if (in)
      printf("    %8s %10" PRIu64 "  %6.2f%%\n", label, in,
             h->n ? 100.0 * (double)cum / (double)h->n : 0.0);
  }
  if (b->nerr_kinds) {
    printf("  errors by status:");
    for (size_t i = 0; i < b->nerr_kinds; i++)
      printf(" %s=%" PRIu64, b->err_names[i], b->err_counts[i]);
    printf("\n");
  }
}

static void report_json(const bench_t *b, double secs) {
  const hist_t *h = &b->h;
  json_t *errs = json_object();
  for (size_t i = 0; i < b->nerr_kinds; i++)
    json_object_set_new(errs, b->err_names[i], json_integer((json_int_t)b->err_counts[i]));
  json_t *hist = json_array();
  for (int i = 0; i < HBUCKETS; i++)
    if (h->count[i])
      json_array_append_new(hist, json_pack("{s:f,s:I}", "le_ms", hupper(i) / 1e6, "count",
                                            (json_int_t)h->count[i]));
  json_t *o = json_pack(
      "{s:s,s:s,s:s,s:s?,s:I,s:s,s:I,s:I,s:f,s:f,s:I,s:I,s:o,s:f,s:f,s:{s:f,s:f,s:f,s:f,s:f,s:f},"
      "s:o,s:I}",
      "protocol", b->o.http ? "http" : "native", "addr", b->o.addr, "model", b->o.model,
      "version", b->o.version, "rows_per_request", (json_int_t)b->rows, "mode",
      b->o.rate > 0 ? "open" : "closed", "connections", (json_int_t)b->o.conns, "depth",
      (json_int_t)b->o.depth, "rate", b->o.rate, "duration_s", secs, "requests",
      (json_int_t)b->ok, "errors", (json_int_t)b->errors, "errors_by_status", errs,
      "throughput_rps", (double)b->ok / secs, "rows_per_s", (double)b->ok * (double)b->rows / secs,
      "latency_ms", "p50", hpct(h, 50) / 1e6, "p90", hpct(h, 90) / 1e6, "p99", hpct(h, 99) / 1e6,
      "p99.9", hpct(h, 99.9) / 1e6, "max", h->max / 1e6, "mean",
      h->n ? (double)h->sum / (double)h->n / 1e6 : 0.0, "histogram", hist, "reconnects",
      (json_int_t)b->reconnects);
  char *text = json_dumps(o, JSON_COMPACT);
  printf("%s\n", text);
  free(text);
  json_decref(o);
}

int main(int argc, char **argv) {
  static bench_t bench;
  bench_t *b = &bench;
  int rc = parse_opts(argc, argv, &b->o);
  if (rc) return rc;
  /* Address. */
  const char *a = b->o.addr, *colon = strrchr(a, ':');
  if (a[0] == '[') {
    const char *close_br = strchr(a, ']');
    if (!close_br || close_br[1] != ':') die("--addr %s: expected [IPv6]:PORT", a);
    snprintf(b->host, sizeof b->host, "%.*s", (int)(close_br - a - 1), a + 1);
    snprintf(b->port, sizeof b->port, "%s", close_br + 2);
  } else if (colon) {
    snprintf(b->host, sizeof b->host, "%.*s", (int)(colon - a), a);
    snprintf(b->port, sizeof b->port, "%s", colon + 1);
  } else {
    snprintf(b->host, sizeof b->host, "%s", a);
    snprintf(b->port, sizeof b->port, "%s", b->o.http ? "8501" : "8500");
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
  int gai = getaddrinfo(b->host, b->port, &hints, &b->ai);
  if (gai) die("--addr %s: %s", a, gai_strerror(gai));
  signal(SIGPIPE, SIG_IGN);
  if (b->o.token) {
    size_t n = strlen(b->o.token) + 8;
    b->authz = malloc(n);
    if (!b->authz) die("out of memory");
    snprintf(b->authz, n, "Bearer %s", b->o.token);
  }
  if (b->o.tls) {
    b->ssl_ctx = SSL_CTX_new(TLS_client_method());
    if (!b->ssl_ctx) die("TLS: out of memory");
    SSL_CTX_set_min_proto_version(b->ssl_ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(b->ssl_ctx,
                     SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if ((b->o.tls_ca ? SSL_CTX_load_verify_locations(b->ssl_ctx, b->o.tls_ca, NULL)
                     : SSL_CTX_set_default_verify_paths(b->ssl_ctx)) != 1)
      die("--tls-ca %s: cannot load", b->o.tls_ca ? b->o.tls_ca : "(system)");
    SSL_CTX_set_verify(b->ssl_ctx, SSL_VERIFY_PEER, NULL);
    if (b->o.tls_cert &&
        (SSL_CTX_use_certificate_chain_file(b->ssl_ctx, b->o.tls_cert) != 1 ||
         SSL_CTX_use_PrivateKey_file(b->ssl_ctx, b->o.tls_key ? b->o.tls_key : b->o.tls_cert,
                                     SSL_FILETYPE_PEM) != 1))
      die("--tls-cert %s / --tls-key: cannot load", b->o.tls_cert);
    static const unsigned char alpn_native[] = "\x06tpud/1", alpn_http[] = "\x08http/1.1";
    if (b->o.http)
      SSL_CTX_set_alpn_protos(b->ssl_ctx, alpn_http, sizeof alpn_http - 1);
    else
      SSL_CTX_set_alpn_protos(b->ssl_ctx, alpn_native, sizeof alpn_native - 1);
  }
  build_request(b);

  b->ep = epoll_create1(EPOLL_CLOEXEC);
  if (b->ep < 0) die("epoll: %s", strerror(errno));
  b->c = calloc(b->o.conns, sizeof *b->c);
  if (!b->c) die("out of memory");
  for (unsigned i = 0; i < b->o.conns; i++) conn_open(b, &b->c[i]);
  signal(SIGINT, on_sigint);

  bool open_loop = b->o.rate > 0;
  uint64_t t_start = now_ns();
  uint64_t t_measure = t_start + (uint64_t)(b->o.warmup_s * 1e9);
  uint64_t t_end = b->o.nreq ? UINT64_MAX : t_measure + (uint64_t)(b->o.duration_s * 1e9);
  uint64_t next_due = t_start, k = 0, interval = open_loop ? (uint64_t)(1e9 / b->o.rate) : 0;
  uint64_t last_progress = t_measure, prog_ok = 0;
  bool progress = !b->o.nreq && b->o.duration_s > 3;
  b->measuring = b->o.warmup_s <= 0;
  if (!open_loop)
    for (unsigned i = 0; i < b->o.conns; i++) {
      for (unsigned d = 0; d < b->o.depth; d++) send_req(b, &b->c[i], now_ns());
      flush_out(b, &b->c[i]);
    }
  struct epoll_event evs[256];
  uint64_t measure_t0 = b->measuring ? t_start : 0, measure_t1 = 0;
  for (;;) {
    uint64_t now = now_ns();
    if (!b->measuring && now >= t_measure && !b->stop_sending) {
      b->measuring = true;
      measure_t0 = now;
      last_progress = now;
    }
    if (!b->stop_sending && (now >= t_end || interrupted ||
                             (b->o.nreq && b->sent_measured >= b->o.nreq))) {
      b->stop_sending = true;
      measure_t1 = now;
    }
    if (b->stop_sending) {
      size_t left = 0;
      for (unsigned i = 0; i < b->o.conns; i++) left += b->c[i].nfl;
      /* Closed loop by time: what is in flight at the end is not counted. -n: wait for all. */
      if (!left || !b->o.nreq || interrupted) break;
    }
    if (open_loop && !b->stop_sending) {
      while (next_due <= now && !(b->o.nreq && b->sent_measured >= b->o.nreq)) {
        conn_t *c = &b->c[k++ % b->o.conns];
        send_req(b, c, next_due);
        flush_out(b, c);
        next_due += interval ? interval : 1;
      }
    }
    if (progress && b->measuring && !b->stop_sending && now - last_progress >= 1000000000u) {
      fprintf(stderr, "[%5.1fs] %8.0f req/s  p50 %.3f ms  p99 %.3f ms  errors %" PRIu64 "\n",
              (now - measure_t0) / 1e9,
              (double)(b->ok - prog_ok) * 1e9 / (double)(now - last_progress),
              hpct(&b->h, 50) / 1e6, hpct(&b->h, 99) / 1e6, b->errors);
      prog_ok = b->ok;
      last_progress = now;
    }
    int timeout_ms = 100;
    if (open_loop && !b->stop_sending) {
      uint64_t wait = next_due > now ? next_due - now : 0;
      timeout_ms = (int)(wait / 1000000u);
    }
    int n = epoll_wait(b->ep, evs, 256, timeout_ms);
    if (n < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
      conn_t *c = evs[i].data.ptr;
      if (evs[i].events & EPOLLOUT) flush_out(b, c);
      if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        on_readable(b, c);
        if (!open_loop && !b->stop_sending) {
          /* Closed loop: replace what completed (also after a reconnect). */
          uint64_t t = now_ns();
          while (c->nfl < b->o.depth) send_req(b, c, t);
          flush_out(b, c);
        }
      }
    }
  }
  if (!measure_t1) measure_t1 = now_ns();
  double secs = measure_t0 && measure_t1 > measure_t0 ? (measure_t1 - measure_t0) / 1e9 : 0;
  if (secs <= 0) secs = 1e-9;
  if (b->o.json)
    report_json(b, secs);
  else
    report_text(b, secs);
  return b->errors ? 1 : 0;
}
