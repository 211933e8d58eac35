/*
 * tpubench.c - load generator for tpud: closed loop (N connections × D in flight) or open loop
 * (a fixed request rate), over the native protocol or HTTP/1.1 JSON; latency percentiles.
 *
 * DESIGN
 * One thread and one epoll loop drive every connection (the machine this runs on is small and
 * the server needs the other cores). Each connection is a libtpuclient tpu_client_async_t:
 * the library owns the socket, TLS, framing (native envelopes, or HTTP/1.1 keep-alive with
 * pipelining) and the matching of answers to requests; this file owns the schedule, the epoll
 * registrations and the statistics. The request is prepared once (the serialized
 * ModelInferRequest that each native frame wraps with its own id, sent with
 * tpu_client_async_send_packed() so answers are not decoded either; or the JSON body that each
 * HTTP POST carries), so the loop only submits, steps and records latencies.
 * Closed loop: every connection keeps `depth` requests in flight; latency is submit → answer.
 * Open loop (--rate R): request k is due at start + k/R and goes to connection k mod N as soon as
 * it is due, whatever is in flight; its latency is measured from the time it was due (carried
 * as the request's tag), so a stalled server is charged for every request it delayed (no
 * coordinated omission). The answer's time is the library's (when its last byte was parsed).
 * Latencies go into a log-linear histogram (1/64 relative precision) in nanoseconds.
 * A connection the server closes (or that breaks) fails its requests in flight and is replaced
 * by a new one at once (counted in "reconnects"); a connect that fails ends the run. Connections
 * are all up (TCP, and TLS handshakes with --tls) before the clock starts.
 * TLS (--tls-ca / --tls) and --token are the library's options: ALPN tpud/1 or http/1.1, the
 * token as envelope metadata "authorization" (native) or an Authorization header (http).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

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
  tpu_client_async_t *a;
  int fd;       /* the descriptor registered with epoll, or -1 */
  uint32_t ev;  /* the events registered for it */
  unsigned nfl; /* requests submitted whose results have not been taken yet */
} conn_t;

typedef struct {
  opts_t o;
  tpu_client_options_t co; /* connection options: timeouts, TLS, token */
  int ep;
  conn_t *c;
  /* The request: the JSON body (http) or the serialized ModelInferRequest (native). */
  char *req;
  size_t req_len;
  char path[600]; /* http: POST target */
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

static tpu_client_protocol_t protocol(const bench_t *b) {
  return b->o.http ? TPU_CLIENT_PROTOCOL_HTTP : TPU_CLIENT_PROTOCOL_NATIVE;
}

/* epoll's readiness as poll's (the same bits on Linux; spelled out so nothing rests on it). */
static int poll_events(uint32_t e) {
  return (e & EPOLLIN ? POLLIN : 0) | (e & EPOLLOUT ? POLLOUT : 0) |
         (e & EPOLLERR ? POLLERR : 0) | (e & EPOLLHUP ? POLLHUP : 0);
}

static uint32_t epoll_events(int e) {
  return (e & POLLIN ? EPOLLIN : 0) | (e & POLLOUT ? EPOLLOUT : 0);
}

/*
 * Brings c's epoll registration in line with what its connection waits for now. The library
 * closes a socket when an address fails or the connection ends (which takes it out of epoll)
 * and may then get the same number for a new one, so while connecting the registration is
 * re-asserted every time (MOD, or ADD where the number is new to epoll).
 */
static void sync_poll(bench_t *b, conn_t *c) {
  int fd = tpu_client_async_fd(c->a);
  uint32_t ev = epoll_events(tpu_client_async_events(c->a));
  if (fd < 0) {
    c->fd = -1;
    return;
  }
  if (fd == c->fd && ev == c->ev && tpu_client_async_connected(c->a)) return;
  struct epoll_event e = {.events = ev, .data.ptr = c};
  if (epoll_ctl(b->ep, EPOLL_CTL_MOD, fd, &e) != 0) {
    if (errno != ENOENT || epoll_ctl(b->ep, EPOLL_CTL_ADD, fd, &e) != 0)
      die("epoll_ctl: %s", strerror(errno));
  }
  c->fd = fd;
  c->ev = ev;
}

static void conn_open(bench_t *b, conn_t *c) {
  c->fd = -1;
  c->ev = 0;
  c->nfl = 0;
  if (tpu_client_async_connect(b->o.addr, &b->co, protocol(b), &c->a) != TPU_CLIENT_OK)
    die("%s", tpu_client_async_errmsg(c->a));
  sync_poll(b, c);
}

/* Records one result. Names of failures: the server's code (native), http_NNN (http), or
 * connection_closed / protocol_error for requests the connection took down with it. */
static void complete(bench_t *b, tpu_client_result_t *r) {
  if (!b->measuring) return;
  tpu_client_status_t st = tpu_client_result_status(r);
  char name[24];
  const char *err = NULL;
  if (!tpu_client_result_answered(r)) {
    err = st == TPU_CLIENT_CLOSED ? "connection_closed" : "protocol_error";
  } else if (b->o.http) {
    int hs = tpu_client_result_http_status(r);
    if (hs != 200) {
      snprintf(name, sizeof name, "http_%d", hs);
      err = name;
    }
  } else if (st != TPU_CLIENT_OK) {
    err = tpu_client_status_name(st) ? tpu_client_status_name(st) : "UNKNOWN";
  }
  if (err) {
    count_error(b, err);
    return;
  }
  int64_t done;
  tpu_client_result_times(r, NULL, &done);
  uint64_t t = tpu_client_result_tag(r); /* send or scheduled time, ns */
  b->ok++;
  hrecord(&b->h, (uint64_t)done > t ? (uint64_t)done - t : 0);
}

static void drain(bench_t *b, conn_t *c) {
  tpu_client_result_t *r;
  while ((r = tpu_client_async_next(c->a))) {
    if (c->nfl) c->nfl--;
    complete(b, r);
    tpu_client_result_free(r);
  }
}

/* Replaces a connection that is gone (its requests have had their results). */
static void conn_reset(bench_t *b, conn_t *c) {
  if (tpu_client_async_status(c->a) == TPU_CLIENT_CONNECT_FAILED)
    die("%s", tpu_client_async_errmsg(c->a));
  tpu_client_async_free(c->a); /* closing the socket also takes it out of epoll */
  b->reconnects++;
  conn_open(b, c);
}

/* One step with the readiness epoll reported (0: none, just timers and queued output), then
 * the results, then a new connection if this one is gone. */
static void kick(bench_t *b, conn_t *c, int revents) {
  tpu_client_status_t st = tpu_client_async_step(c->a, revents);
  drain(b, c);
  if (st != TPU_CLIENT_OK) conn_reset(b, c);
  sync_poll(b, c);
}

/* Queues one request on c, tagged with t (send or scheduled time, ns); it leaves at the next
 * step. False when the connection would not take it (it is gone: the next kick replaces it). */
static bool send_req(bench_t *b, conn_t *c, uint64_t t) {
  tpu_client_status_t st =
      b->o.http ? tpu_client_async_send_http(c->a, "POST", b->path, "application/json", b->req,
                                             b->req_len, TPU_CLIENT_NO_TIMEOUT, t, NULL)
                : tpu_client_async_send_packed(c->a, TPUD__METHOD__MODEL_INFER, b->req,
                                               b->req_len, TPU_CLIENT_NO_TIMEOUT, t, NULL);
  if (st != TPU_CLIENT_OK) return false;
  c->nfl++;
  if (b->measuring) b->sent_measured++;
  return true;
}

/* Closed loop: tops c up to `depth` requests in flight and sends them in one write. */
static void refill(bench_t *b, conn_t *c) {
  uint64_t t = now_ns();
  while (c->nfl < b->o.depth && send_req(b, c, t)) {
  }
  kick(b, c, 0);
}

/* Starts every connection and waits until all are up (not measured); any failure ends the run. */
static void connect_all(bench_t *b) {
  for (unsigned i = 0; i < b->o.conns; i++) conn_open(b, &b->c[i]);
  struct epoll_event evs[256];
  for (;;) {
    unsigned up = 0;
    for (unsigned i = 0; i < b->o.conns; i++) {
      conn_t *c = &b->c[i];
      if (tpu_client_async_connected(c->a)) {
        up++;
        continue;
      }
      /* Timers (the connect deadline) need steps even without events. */
      if (tpu_client_async_step(c->a, 0) != TPU_CLIENT_OK) die("%s", tpu_client_async_errmsg(c->a));
      sync_poll(b, c);
    }
    if (up == b->o.conns) return;
    int n = epoll_wait(b->ep, evs, 256, 10);
    if (n < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
      conn_t *c = evs[i].data.ptr;
      if (tpu_client_async_step(c->a, poll_events(evs[i].events)) != TPU_CLIENT_OK)
        die("%s", tpu_client_async_errmsg(c->a));
      sync_poll(b, c);
    }
  }
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

/* A GET for set-up (HTTP), on a connection of its own: returns the body of a 200 answer. */
static char *http_get(bench_t *b, const char *path) {
  tpu_client_async_t *h = NULL;
  tpu_client_result_t *r = NULL;
  if (tpu_client_async_connect(b->o.addr, &b->co, TPU_CLIENT_PROTOCOL_HTTP, &h) != TPU_CLIENT_OK ||
      tpu_client_async_send_http(h, "GET", path, NULL, NULL, 0, 0, 0, NULL) != TPU_CLIENT_OK ||
      tpu_client_async_wait(h, 0, &r) != TPU_CLIENT_OK)
    die("%s", tpu_client_async_errmsg(h));
  size_t len;
  const char *body = tpu_client_result_payload(r, &len);
  if (!tpu_client_result_answered(r)) die("GET %s: %s", path, tpu_client_result_error(r));
  if (tpu_client_result_http_status(r) != 200)
    die("GET %s: HTTP %d: %s", path, tpu_client_result_http_status(r), body);
  char *out = strdup(body);
  if (!out) die("out of memory");
  tpu_client_result_free(r);
  tpu_client_async_free(h);
  return out;
}

/* Input name and width of the model, from its metadata. */
static void model_input(bench_t *b, char *name, size_t namecap, size_t *width) {
  json_t *root = NULL;
  if (b->o.http) {
    char path[600];
    snprintf(path, sizeof path, "/v2/models/%s%s%s", b->o.model, b->o.version ? "/versions/" : "",
             b->o.version ? b->o.version : "");
    char *body = http_get(b, path);
    root = json_loads(body, 0, NULL);
    free(body);
  } else {
    tpu_client_t *cl = NULL;
    if (tpu_client_connect(b->o.addr, &b->co, &cl) != TPU_CLIENT_OK)
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
    snprintf(b->path, sizeof b->path, "/v2/models/%s%s%s/infer", b->o.model,
             b->o.version ? "/versions/" : "", b->o.version ? b->o.version : "");
    b->req = body; /* sent as it is */
    b->req_len = blen;
    body = NULL;
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
  signal(SIGPIPE, SIG_IGN); /* TLS writes go through write(2), which raises it */
  tpu_client_options_init(&b->co);
  b->co.connect_timeout_ms = b->co.timeout_ms = b->o.timeout_ms;
  b->co.tls = b->o.tls;
  b->co.tls_ca_file = b->o.tls_ca;
  b->co.tls_cert_file = b->o.tls_cert;
  b->co.tls_key_file = b->o.tls_key;
  b->co.token = b->o.token;
  build_request(b);

  b->ep = epoll_create1(EPOLL_CLOEXEC);
  if (b->ep < 0) die("epoll: %s", strerror(errno));
  b->c = calloc(b->o.conns, sizeof *b->c);
  if (!b->c) die("out of memory");
  connect_all(b);
  signal(SIGINT, on_sigint);

  bool open_loop = b->o.rate > 0;
  uint64_t t_start = now_ns();
  uint64_t t_measure = t_start + (uint64_t)(b->o.warmup_s * 1e9);
  uint64_t t_end = b->o.nreq ? UINT64_MAX : t_measure + (uint64_t)(b->o.duration_s * 1e9);
  uint64_t next_due = t_start, k = 0, interval = open_loop ? (uint64_t)(1e9 / b->o.rate) : 0;
  uint64_t last_progress = t_measure, prog_ok = 0, last_tick = t_start;
  bool progress = !b->o.nreq && b->o.duration_s > 3;
  b->measuring = b->o.warmup_s <= 0;
  if (!open_loop)
    for (unsigned i = 0; i < b->o.conns; i++) refill(b, &b->c[i]);
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
        kick(b, c, 0);
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
    if (now - last_tick >= 100000000u) {
      /* The library's timers (connect deadlines of replacement connections) run in steps. */
      for (unsigned i = 0; i < b->o.conns; i++)
        if (!tpu_client_async_connected(b->c[i].a)) kick(b, &b->c[i], 0);
      last_tick = now;
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
      kick(b, c, poll_events(evs[i].events));
      /* Closed loop: replace what completed (also after a reconnect). */
      if (!open_loop && !b->stop_sending && c->nfl < b->o.depth) refill(b, c);
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
