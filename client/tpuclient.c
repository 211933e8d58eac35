/*
 * tpuclient.c - libtpuclient: one TCP connection to tpud, pipelined and synchronous calls.
 *
 * DESIGN
 * Owns one socket per handle and nothing global, so handles on different threads never meet.
 * Bytes become frames through proto/'s tpu_frame decoder and frames become envelopes through
 * tpu_envelope; this file only moves bytes, matches response ids to requests in flight, and keeps
 * the time.
 *
 * The socket is non-blocking and every wait is a poll() with a deadline, although every call
 * blocks from the caller's point of view: while a large request is being written, the server may
 * stop reading us (back-pressure) until we read its responses, so a send that waits for
 * POLLOUT also reads whatever arrives instead of deadlocking with the server. Responses read
 * during a send or a synchronous call are parked on the `done` queue for tpu_client_recv().
 *
 * In-flight requests live in `pend`, sorted by id (ids are handed out in increasing order, so
 * appending keeps it sorted and lookups are binary searches). A request whose deadline passes is
 * completed locally with TIMEOUT and stays in `pend` marked abandoned, so its late answer is
 * recognized and dropped rather than taken for a protocol error. When the connection dies,
 * every live request is completed with the reason: each sent request gets exactly one result.
 *
 * TLS (tpuclient_tls.c): the same socket carries an SSL; io_recv/io_send stand in for
 * recv/send. OpenSSL may hold decrypted bytes the socket no longer announces, so reading drains
 * SSL_pending before the next poll. A bearer token goes into every request's envelope as metadata
 * "authorization: Bearer <token>".
 */
#include "tpuclient.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tpu_envelope.h"
#include "tpu_frame.h"
#include "tpu_oip_json.h"
#include "tpuclient_tls.h"

#define DEFAULT_PORT "8500"
#define DEFAULT_CONNECT_TIMEOUT_MS 5000
#define DEFAULT_TIMEOUT_MS 30000
#define READ_CHUNK ((size_t)64 << 10) /* bytes read per recv() */
#define NO_DEADLINE INT64_MAX

/* ---- status ---- */

const char *tpu_client_strerror(tpu_client_status_t status) {
  switch (status) {
#define TPU__CLIENT_STATUS_MSG(name, num, msg) \
  case TPU_CLIENT_##name:                      \
    return msg;
    TPU_CLIENT_STATUS_MAP(TPU__CLIENT_STATUS_MSG)
#undef TPU__CLIENT_STATUS_MSG
  }
  return "unknown status";
}

const char *tpu_client_status_name(tpu_client_status_t status) {
  switch (status) {
#define TPU__CLIENT_STATUS_NAME(name, num, msg) \
  case TPU_CLIENT_##name:                       \
    return #name;
    TPU_CLIENT_STATUS_MAP(TPU__CLIENT_STATUS_NAME)
#undef TPU__CLIENT_STATUS_NAME
  }
  return NULL;
}

/* ---- types ---- */

typedef struct {
  uint64_t id;
  int method;
  int64_t deadline;   /* CLOCK_MONOTONIC nanoseconds; NO_DEADLINE for none */
  int timeout_ms;     /* as resolved, for messages */
  bool abandoned;     /* completed locally (timed out): drop its answer when it comes */
} pending_t;

struct tpu_client_result {
  uint64_t id;
  int method;
  tpu_client_status_t status;
  char *error;                   /* malloc'd, or NULL for "" */
  ProtobufCMessage *response;    /* decoded payload when status is OK */
  struct tpu_client_result *next; /* the done queue's link */
};

struct tpu_client {
  int fd; /* -1 once closed */
  SSL *ssl;      /* TLS on fd, or NULL */
  char *authz;   /* "Bearer <token>" (malloc'd), or NULL */
  tpu_client_options_t opts;
  char addr[256];
  tpu_frame_decoder_t *dec;
  uint8_t *rbuf; /* READ_CHUNK bytes */
  uint64_t next_id;
  pending_t *pend; /* sorted by id */
  size_t npend, cappend;
  size_t nlive;                      /* entries of pend not abandoned */
  tpu_client_result_t *head, *tail; /* completed, not yet handed out (FIFO) */
  tpu_client_status_t conn_status;   /* OK while the connection is usable */
  char conn_msg[256];
  char errmsg[512];
};

/* ---- small helpers ---- */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Milliseconds to wait for `deadline`, rounded up so a poll never wakes just before it. */
static int wait_ms(int64_t deadline) {
  if (deadline == NO_DEADLINE) return -1;
  int64_t left = deadline - now_ns();
  if (left <= 0) return 0;
  int64_t ms = (left + 999999) / 1000000;
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* Resolves a call's timeout_ms against the handle's default: -1 (none) or a positive count. */
static int resolve_timeout(const tpu_client_t *c, int timeout_ms) {
  if (timeout_ms == 0) timeout_ms = c->opts.timeout_ms;
  return timeout_ms > 0 ? timeout_ms : -1;
}

static int64_t deadline_after(int timeout_ms) {
  return timeout_ms > 0 ? now_ns() + (int64_t)timeout_ms * 1000000 : NO_DEADLINE;
}

__attribute__((format(printf, 3, 4))) static tpu_client_status_t
set_err(tpu_client_t *c, tpu_client_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
  va_end(ap);
  return st;
}

static tpu_client_status_t ok(tpu_client_t *c) {
  c->errmsg[0] = '\0';
  return TPU_CLIENT_OK;
}

static const char *method_name(int method) {
  const tpu_method_info_t *info = tpu_envelope_method_info(method);
  return info ? info->name : "unknown method";
}

/* ---- results ---- */

static tpu_client_result_t *result_new(uint64_t id, int method, tpu_client_status_t st,
                                       const char *error) {
  tpu_client_result_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->id = id;
  r->method = method;
  r->status = st;
  if (error && *error) r->error = strdup(error); /* NULL on failure reads as "" */
  return r;
}

static void queue_push(tpu_client_t *c, tpu_client_result_t *r) {
  r->next = NULL;
  if (c->tail)
    c->tail->next = r;
  else
    c->head = r;
  c->tail = r;
}

static tpu_client_result_t *queue_pop(tpu_client_t *c) {
  tpu_client_result_t *r = c->head;
  if (r) {
    c->head = r->next;
    if (!c->head) c->tail = NULL;
    r->next = NULL;
  }
  return r;
}

/* Removes and returns the queued result for `id`, or NULL. */
static tpu_client_result_t *queue_take(tpu_client_t *c, uint64_t id) {
  tpu_client_result_t *prev = NULL;
  for (tpu_client_result_t *r = c->head; r; prev = r, r = r->next) {
    if (r->id != id) continue;
    if (prev)
      prev->next = r->next;
    else
      c->head = r->next;
    if (c->tail == r) c->tail = prev;
    r->next = NULL;
    return r;
  }
  return NULL;
}

uint64_t tpu_client_result_id(const tpu_client_result_t *r) { return r ? r->id : 0; }

int tpu_client_result_method(const tpu_client_result_t *r) { return r ? r->method : 0; }

tpu_client_status_t tpu_client_result_status(const tpu_client_result_t *r) {
  return r ? r->status : TPU_CLIENT_MISUSE;
}

const char *tpu_client_result_error(const tpu_client_result_t *r) {
  if (!r) return "no result";
  if (r->error) return r->error;
  return r->status == TPU_CLIENT_OK ? "" : tpu_client_strerror(r->status);
}

const ProtobufCMessage *tpu_client_result_response(const tpu_client_result_t *r) {
  return r ? r->response : NULL;
}

ProtobufCMessage *tpu_client_result_take_response(tpu_client_result_t *r) {
  if (!r) return NULL;
  ProtobufCMessage *m = r->response;
  r->response = NULL;
  return m;
}

void tpu_client_result_free(tpu_client_result_t *r) {
  if (!r) return;
  if (r->response) protobuf_c_message_free_unpacked(r->response, NULL);
  free(r->error);
  free(r);
}

/* ---- in-flight table ---- */

static pending_t *pend_find(tpu_client_t *c, uint64_t id) {
  size_t lo = 0, hi = c->npend;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c->pend[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < c->npend && c->pend[lo].id == id ? &c->pend[lo] : NULL;
}

static void pend_remove(tpu_client_t *c, pending_t *p) {
  if (!p->abandoned) c->nlive--;
  size_t i = (size_t)(p - c->pend);
  memmove(p, p + 1, (c->npend - i - 1) * sizeof *p);
  c->npend--;
}

static int pend_add(tpu_client_t *c, const pending_t *p) {
  if (c->npend == c->cappend) {
    size_t cap = c->cappend ? c->cappend * 2 : 16;
    pending_t *np = realloc(c->pend, cap * sizeof *np);
    if (!np) return -1;
    c->pend = np;
    c->cappend = cap;
  }
  c->pend[c->npend++] = *p; /* ids only grow, so the table stays sorted */
  c->nlive++;
  return 0;
}

/* ---- connection failure ---- */

/*
 * Marks the connection dead with `st` and completes every live request with that reason. A
 * result that cannot be allocated is lost; the caller then sees the connection status instead.
 */
__attribute__((format(printf, 3, 4))) static void conn_fail(tpu_client_t *c, tpu_client_status_t st,
                                                            const char *fmt, ...) {
  if (c->conn_status != TPU_CLIENT_OK) return; /* the first reason is the real one */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->conn_msg, sizeof c->conn_msg, fmt, ap);
  va_end(ap);
  c->conn_status = st;
  tpu__ctls_free(c->ssl, 0);
  c->ssl = NULL;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  for (size_t i = 0; i < c->npend; i++) {
    const pending_t *p = &c->pend[i];
    if (p->abandoned) continue;
    tpu_client_result_t *r = result_new(p->id, p->method, st, c->conn_msg);
    if (r) queue_push(c, r);
  }
  c->npend = c->nlive = 0;
}

/* ---- reading ---- */

/* Turns one frame from the server into a result (or a connection failure). */
static void handle_frame(tpu_client_t *c, const tpu_frame_t *frame) {
  Tpud__ResponseEnvelope *env = NULL;
  tpu_proto_error_t perr;
  if (tpu_envelope_decode_response(frame->data, frame->len, c->opts.max_message_bytes, &env,
                                   &perr) != TPU_PROTO_OK) {
    conn_fail(c, TPU_CLIENT_PROTOCOL, "bad response from %s: %s", c->addr, perr.msg);
    return;
  }
  if (env->id == 0) { /* about the connection itself: the server closes it after this */
    /* An OK here would make no sense; keep "connection gone" distinguishable from usable. */
    tpu_client_status_t st = env->code ? (tpu_client_status_t)env->code : TPU_CLIENT_PROTOCOL;
    conn_fail(c, st, "server ended the connection: %s%s%s",
              tpu_envelope_code_name((int)env->code) ? tpu_envelope_code_name((int)env->code)
                                                     : "?",
              *env->message ? ": " : "", env->message);
    tpu_envelope_response_free(env);
    return;
  }
  pending_t *p = pend_find(c, env->id);
  if (!p) {
    uint64_t id = env->id;
    tpu_envelope_response_free(env);
    conn_fail(c, TPU_CLIENT_PROTOCOL, "server answered request id %" PRIu64
              ", which is not in flight", id);
    return;
  }
  if (p->abandoned) { /* timed out here already; its result has been handed out */
    pend_remove(c, p);
    tpu_envelope_response_free(env);
    return;
  }
  tpu_client_result_t *r;
  if (env->code == TPUD__STATUS_CODE__OK) {
    ProtobufCMessage *msg = NULL;
    if (tpu_envelope_unpack_response_payload(env, p->method, &msg, &perr) == TPU_PROTO_OK) {
      r = result_new(p->id, p->method, TPU_CLIENT_OK, NULL);
      if (r)
        r->response = msg;
      else
        protobuf_c_message_free_unpacked(msg, NULL);
    } else {
      r = result_new(p->id, p->method, TPU_CLIENT_PROTOCOL, perr.msg);
    }
  } else {
    r = result_new(p->id, p->method, (tpu_client_status_t)env->code,
                   *env->message ? env->message
                                 : tpu_client_strerror((tpu_client_status_t)env->code));
  }
  if (!r) r = result_new(p->id, p->method, TPU_CLIENT_NOMEM, NULL);
  pend_remove(c, p);
  tpu_envelope_response_free(env);
  if (r) queue_push(c, r);
}

static ssize_t io_recv(tpu_client_t *c, void *buf, size_t len) {
  return c->ssl ? tpu__ctls_recv(c->ssl, buf, len) : recv(c->fd, buf, len, 0);
}

static ssize_t io_send(tpu_client_t *c, const void *buf, size_t len) {
  return c->ssl ? tpu__ctls_send(c->ssl, buf, len) : send(c->fd, buf, len, MSG_NOSIGNAL);
}

static int read_chunk(tpu_client_t *c);

/* Reads what arrived (with TLS, also every byte OpenSSL holds decrypted) through the decoder.
 * Returns 0, or -1 once the connection is gone. */
static int read_some(tpu_client_t *c) {
  int rc;
  do {
    rc = read_chunk(c);
  } while (rc == 0 && c->ssl && SSL_pending(c->ssl) > 0);
  return rc;
}

/* One read(): feeds whatever arrived through the decoder. */
static int read_chunk(tpu_client_t *c) {
  ssize_t n = io_recv(c, c->rbuf, READ_CHUNK);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    conn_fail(c, TPU_CLIENT_CLOSED, "connection to %s lost: %s", c->addr,
              c->ssl && errno == EPROTO ? tpu__ctls_error() : strerror(errno));
    return -1;
  }
  if (n == 0) {
    tpu_proto_error_t perr;
    if (tpu_frame_decoder_finish(c->dec, &perr) != TPU_PROTO_OK)
      conn_fail(c, TPU_CLIENT_CLOSED, "server %s closed the connection in the middle of a "
                "response: %s", c->addr, perr.msg);
    else
      conn_fail(c, TPU_CLIENT_CLOSED, "server %s closed the connection with %zu request%s in "
                "flight", c->addr, c->nlive, c->nlive == 1 ? "" : "s");
    return -1;
  }
  size_t off = 0;
  while (off < (size_t)n && c->conn_status == TPU_CLIENT_OK) {
    size_t used = 0;
    tpu_frame_t frame;
    tpu_proto_error_t perr;
    tpu_proto_status_t st =
        tpu_frame_decoder_feed(c->dec, c->rbuf + off, (size_t)n - off, &used, &frame, &perr);
    off += used;
    if (st == TPU_PROTO_EAGAIN) break;
    if (st != TPU_PROTO_OK) {
      conn_fail(c, st == TPU_PROTO_ENOMEM ? TPU_CLIENT_NOMEM : TPU_CLIENT_PROTOCOL,
                "bad frame from %s: %s", c->addr, perr.msg);
      break;
    }
    handle_frame(c, &frame);
  }
  return c->conn_status == TPU_CLIENT_OK ? 0 : -1;
}

/* Completes, with TIMEOUT, every live request whose deadline has passed. */
static void expire(tpu_client_t *c) {
  int64_t now = now_ns();
  for (size_t i = 0; i < c->npend; i++) {
    pending_t *p = &c->pend[i];
    if (p->abandoned || p->deadline > now) continue;
    char msg[160];
    snprintf(msg, sizeof msg, "no response to %s (request %" PRIu64 ") within %d ms",
             method_name(p->method), p->id, p->timeout_ms);
    tpu_client_result_t *r = result_new(p->id, p->method, TPU_CLIENT_TIMEOUT, msg);
    if (!r) continue; /* try again on the next pass */
    queue_push(c, r);
    p->abandoned = true;
    c->nlive--;
  }
}

/*
 * One step of progress: expires overdue requests, then waits until `deadline` (or the earliest
 * request deadline) for bytes and reads them. Results land on the done queue.
 */
static void pump(tpu_client_t *c, int64_t deadline) {
  expire(c);
  if (c->conn_status != TPU_CLIENT_OK) return;
  for (size_t i = 0; i < c->npend; i++)
    if (!c->pend[i].abandoned && c->pend[i].deadline < deadline) deadline = c->pend[i].deadline;
  struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
  int rc = c->ssl && SSL_pending(c->ssl) > 0 ? 1 : poll(&pfd, 1, wait_ms(deadline));
  if (rc < 0) {
    if (errno != EINTR)
      conn_fail(c, TPU_CLIENT_CLOSED, "poll on connection to %s: %s", c->addr, strerror(errno));
    return;
  }
  if (rc > 0) read_some(c); /* POLLHUP/POLLERR also surface through recv() */
  expire(c);
}

/* ---- writing ---- */

/*
 * Writes a whole frame by `deadline`, reading responses meanwhile (see DESIGN). Returns OK,
 * TIMEOUT (with nothing sent: the connection stays usable; partly sent: it is closed) or the
 * connection's failure status.
 */
static tpu_client_status_t send_all(tpu_client_t *c, const uint8_t *buf, size_t len,
                                    int64_t deadline, int timeout_ms) {
  size_t off = 0;
  while (off < len) {
    if (c->conn_status != TPU_CLIENT_OK)
      return set_err(c, c->conn_status, "%s", c->conn_msg);
    ssize_t n = io_send(c, buf + off, len - off);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      conn_fail(c, TPU_CLIENT_CLOSED, "connection to %s lost while sending: %s", c->addr,
                c->ssl && errno == EPROTO ? tpu__ctls_error() : strerror(errno));
      continue;
    }
    int ms = wait_ms(deadline);
    if (ms == 0) {
      if (off == 0)
        return set_err(c, TPU_CLIENT_TIMEOUT, "server %s took no request bytes within %d ms",
                       c->addr, timeout_ms);
      conn_fail(c, TPU_CLIENT_TIMEOUT, "timed out after %d ms with %zu of %zu request bytes "
                "sent; connection to %s closed", timeout_ms, off, len, c->addr);
      return set_err(c, TPU_CLIENT_TIMEOUT, "%s", c->conn_msg);
    }
    struct pollfd pfd = {.fd = c->fd, .events = POLLOUT | POLLIN};
    int rc = poll(&pfd, 1, ms);
    if (rc < 0 && errno != EINTR) {
      conn_fail(c, TPU_CLIENT_CLOSED, "poll on connection to %s: %s", c->addr, strerror(errno));
      continue;
    }
    if (rc > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
      /* Drain responses so the server can go on reading; a dead peer shows up here too. */
      if (read_some(c) < 0) continue;
    }
  }
  return TPU_CLIENT_OK;
}

/* ---- connecting ---- */

void tpu_client_options_init(tpu_client_options_t *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->size = sizeof *opts;
  opts->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
  opts->timeout_ms = DEFAULT_TIMEOUT_MS;
  opts->max_message_bytes = TPU_FRAME_DEFAULT_MAX_MESSAGE;
}

/* Splits "HOST:PORT", "[V6]:PORT", "HOST" or bare "V6" into host and port. */
static int split_addr(const char *addr, char *host, size_t hostcap, char *port, size_t portcap) {
  const char *h = addr, *p = NULL;
  size_t hlen;
  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (!end) return -1;
    h = addr + 1;
    hlen = (size_t)(end - h);
    if (end[1] == ':')
      p = end + 2;
    else if (end[1] != '\0')
      return -1;
  } else {
    const char *colon = strchr(addr, ':');
    if (colon && !strchr(colon + 1, ':')) { /* exactly one ':' */
      hlen = (size_t)(colon - addr);
      p = colon + 1;
    } else {
      hlen = strlen(addr); /* no port, or a bare IPv6 address */
    }
  }
  if (hlen == 0 || hlen >= hostcap) return -1;
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  if (!p) p = DEFAULT_PORT;
  char *end;
  long v = strtol(p, &end, 10);
  if (*p == '\0' || *end != '\0' || v < 1 || v > 65535) return -1;
  snprintf(port, portcap, "%ld", v);
  return 0;
}

/* Connects one address with a deadline; returns the socket, or -1 with errno set. */
static int connect_one(const struct addrinfo *ai, int64_t deadline) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
    if (errno != EINPROGRESS) goto fail;
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int rc;
    do {
      rc = poll(&pfd, 1, wait_ms(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
      errno = ETIMEDOUT;
      goto fail;
    }
    if (rc < 0) goto fail;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) goto fail;
    if (soerr) {
      errno = soerr;
      goto fail;
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* latency over packet count */
  return fd;

fail:;
  int saved = errno;
  close(fd);
  errno = saved;
  return -1;
}

tpu_client_status_t tpu_client_connect(const char *addr, const tpu_client_options_t *opts,
                                       tpu_client_t **out) {
  if (!out) return TPU_CLIENT_MISUSE;
  *out = NULL;
  tpu_client_t *c = calloc(1, sizeof *c);
  if (!c) return TPU_CLIENT_NOMEM;
  c->fd = -1;
  c->next_id = 1;
  tpu_client_options_init(&c->opts);
  *out = c;

  if (opts) {
    if (opts->size < sizeof(size_t))
      return set_err(c, TPU_CLIENT_MISUSE, "options not set up with tpu_client_options_init()");
    /* Only the fields the caller's build knows; later fields keep their defaults. */
    memcpy(&c->opts, opts, opts->size < sizeof c->opts ? opts->size : sizeof c->opts);
    c->opts.size = sizeof c->opts;
    if (c->opts.connect_timeout_ms == 0) c->opts.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    if (c->opts.max_message_bytes == 0) c->opts.max_message_bytes = TPU_FRAME_DEFAULT_MAX_MESSAGE;
  }
  c->conn_status = TPU_CLIENT_CONNECT_FAILED;
  snprintf(c->conn_msg, sizeof c->conn_msg, "not connected");
  if (!addr || !*addr)
    return set_err(c, TPU_CLIENT_MISUSE, "no address: expected HOST:PORT");
  snprintf(c->addr, sizeof c->addr, "%s", addr);

  char host[256], port[8];
  if (split_addr(addr, host, sizeof host, port, sizeof port) < 0)
    return set_err(c, TPU_CLIENT_MISUSE,
                   "address \"%.200s\" is not HOST:PORT (port 1..65535; [V6]:PORT for IPv6)",
                   addr);
  c->rbuf = malloc(READ_CHUNK);
  if (!c->rbuf || tpu_frame_decoder_create(c->opts.max_message_bytes, &c->dec) != TPU_PROTO_OK)
    return set_err(c, TPU_CLIENT_NOMEM, "out of memory");

  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai != 0)
    return set_err(c, TPU_CLIENT_CONNECT_FAILED, "connect to %s: cannot resolve \"%s\": %s", addr,
                   host, gai_strerror(gai));
  int64_t deadline = deadline_after(c->opts.connect_timeout_ms);
  int err = 0;
  for (struct addrinfo *ai = res; ai && c->fd < 0; ai = ai->ai_next) {
    c->fd = connect_one(ai, deadline);
    if (c->fd < 0) err = errno;
  }
  freeaddrinfo(res);
  if (c->fd < 0) {
    if (err == ETIMEDOUT)
      return set_err(c, TPU_CLIENT_CONNECT_FAILED, "connect to %s: no answer within %d ms", addr,
                     c->opts.connect_timeout_ms);
    return set_err(c, TPU_CLIENT_CONNECT_FAILED, "connect to %s: %s", addr, strerror(err));
  }
  bool tls = c->opts.tls || (c->opts.tls_ca_file && *c->opts.tls_ca_file) ||
             (c->opts.tls_cert_file && *c->opts.tls_cert_file);
  if (tls) {
    char why[384];
    c->ssl = tpu__ctls_connect(c->fd, &c->opts, host, deadline, why, sizeof why);
    if (!c->ssl) {
      close(c->fd);
      c->fd = -1;
      return set_err(c, TPU_CLIENT_CONNECT_FAILED, "connect to %s: %s", addr, why);
    }
  }
  if (c->opts.token && *c->opts.token) {
    size_t n = strlen(c->opts.token) + 8;
    c->authz = malloc(n);
    if (!c->authz) return set_err(c, TPU_CLIENT_NOMEM, "out of memory");
    snprintf(c->authz, n, "Bearer %s", c->opts.token);
  }
  /* Used up: keep no pointer into the caller's memory. */
  c->opts.tls_ca_file = c->opts.tls_cert_file = c->opts.tls_key_file = NULL;
  c->opts.tls_server_name = c->opts.token = NULL;
  c->conn_status = TPU_CLIENT_OK;
  c->conn_msg[0] = '\0';
  return ok(c);
}

void tpu_client_free(tpu_client_t *c) {
  if (!c) return;
  tpu__ctls_free(c->ssl, c->conn_status == TPU_CLIENT_OK);
  if (c->fd >= 0) close(c->fd);
  if (c->authz) {
    memset(c->authz, 0, strlen(c->authz));
    free(c->authz);
  }
  tpu_client_result_t *r;
  while ((r = queue_pop(c))) tpu_client_result_free(r);
  tpu_frame_decoder_free(c->dec);
  free(c->rbuf);
  free(c->pend);
  free(c);
}

const char *tpu_client_errmsg(const tpu_client_t *c) {
  return c ? c->errmsg : "no client handle (out of memory?)";
}

tpu_client_status_t tpu_client_connection_status(const tpu_client_t *c) {
  return c ? c->conn_status : TPU_CLIENT_MISUSE;
}

size_t tpu_client_in_flight(const tpu_client_t *c) {
  if (!c) return 0;
  size_t n = c->nlive;
  for (const tpu_client_result_t *r = c->head; r; r = r->next) n++;
  return n;
}

/* ---- pipelined calls ---- */

tpu_client_status_t tpu_client_send(tpu_client_t *c, int method, const ProtobufCMessage *request,
                                    int timeout_ms, uint64_t *id) {
  if (id) *id = 0;
  if (!c) return TPU_CLIENT_MISUSE;
  const tpu_method_info_t *info = tpu_envelope_method_info(method);
  if (!info) return set_err(c, TPU_CLIENT_MISUSE, "unknown method %d", method);
  if (request && request->descriptor != info->request)
    return set_err(c, TPU_CLIENT_MISUSE, "%s takes a %s, not a %s", info->name,
                   info->request->name, request->descriptor->name);
  if (c->conn_status != TPU_CLIENT_OK) return set_err(c, c->conn_status, "%s", c->conn_msg);

  int tmo = resolve_timeout(c, timeout_ms);
  tpu_envelope_request_t req = {
      .id = c->next_id,
      .method = method,
      .timeout_us = tmo > 0 ? (uint64_t)tmo * 1000 : 0,
      .payload_msg = request,
  };
  const char *md[2] = {"authorization", c->authz};
  if (c->authz) {
    req.metadata = md;
    req.n_metadata = 1;
  }
  uint8_t *frame = NULL;
  size_t len = 0;
  tpu_proto_error_t perr;
  tpu_proto_status_t pst = tpu_envelope_encode_request_alloc(&req, &frame, &len, &perr);
  if (pst != TPU_PROTO_OK)
    return set_err(c, pst == TPU_PROTO_ENOMEM ? TPU_CLIENT_NOMEM : TPU_CLIENT_MISUSE,
                   "cannot encode %s request: %s", info->name, perr.msg);
  pending_t p = {.id = req.id, .method = method, .deadline = deadline_after(tmo),
                 .timeout_ms = tmo};
  /* Reserve the table slot first: once the bytes are out, the request must be tracked. */
  if (pend_add(c, &p) < 0) {
    free(frame);
    return set_err(c, TPU_CLIENT_NOMEM, "out of memory");
  }
  c->nlive--; /* not live until sent: conn_fail() during the send must not answer it */
  c->pend[c->npend - 1].abandoned = true;
  tpu_client_status_t st = send_all(c, frame, len, p.deadline, tmo);
  free(frame);
  pending_t *slot = pend_find(c, req.id); /* conn_fail() may have emptied the table */
  if (st != TPU_CLIENT_OK || !slot) {
    if (slot) pend_remove(c, slot);
    return st != TPU_CLIENT_OK ? st : set_err(c, c->conn_status, "%s", c->conn_msg);
  }
  slot->abandoned = false;
  c->nlive++;
  c->next_id++;
  if (id) *id = req.id;
  return ok(c);
}

tpu_client_status_t tpu_client_recv(tpu_client_t *c, int timeout_ms, tpu_client_result_t **out) {
  if (out) *out = NULL;
  if (!c || !out) return c ? set_err(c, TPU_CLIENT_MISUSE, "no result pointer") : TPU_CLIENT_MISUSE;
  int tmo = resolve_timeout(c, timeout_ms);
  int64_t deadline = deadline_after(tmo);
  for (;;) {
    expire(c);
    tpu_client_result_t *r = queue_pop(c);
    if (r) {
      *out = r;
      return ok(c);
    }
    if (c->nlive == 0) {
      if (c->conn_status != TPU_CLIENT_OK) return set_err(c, c->conn_status, "%s", c->conn_msg);
      return set_err(c, TPU_CLIENT_MISUSE, "no request in flight to receive a result for");
    }
    if (now_ns() >= deadline)
      return set_err(c, TPU_CLIENT_TIMEOUT, "no response within %d ms", tmo);
    pump(c, deadline);
  }
}

/* ---- synchronous calls ---- */

tpu_client_status_t tpu_client_call(tpu_client_t *c, int method, const ProtobufCMessage *request,
                                    int timeout_ms, ProtobufCMessage **response) {
  if (response) *response = NULL;
  uint64_t id;
  tpu_client_status_t st = tpu_client_send(c, method, request, timeout_ms, &id);
  if (st != TPU_CLIENT_OK) return st;
  tpu_client_result_t *r;
  /* The request is in flight or done, and pump() completes it by its deadline at the latest
   * (or when the connection dies), so this loop ends. */
  while (!(r = queue_take(c, id))) {
    if (!pend_find(c, id)) /* completed but its result could not be allocated */
      return set_err(c, TPU_CLIENT_NOMEM, "out of memory");
    pump(c, NO_DEADLINE);
  }
  st = r->status;
  if (st == TPU_CLIENT_OK) {
    if (response) *response = tpu_client_result_take_response(r);
    ok(c);
  } else {
    set_err(c, st, "%s", tpu_client_result_error(r));
  }
  tpu_client_result_free(r);
  return st;
}

/* A typed call: checks the response type defensively, since a cast follows. */
static tpu_client_status_t call_typed(tpu_client_t *c, int method, const ProtobufCMessage *req,
                                      int timeout_ms, const ProtobufCMessageDescriptor *want,
                                      void **out) {
  ProtobufCMessage *resp = NULL;
  if (out) *out = NULL;
  tpu_client_status_t st = tpu_client_call(c, method, req, timeout_ms, &resp);
  if (st != TPU_CLIENT_OK) return st;
  if (!resp || resp->descriptor != want) {
    if (resp) protobuf_c_message_free_unpacked(resp, NULL);
    return set_err(c, TPU_CLIENT_PROTOCOL, "%s: response is not a %s", method_name(method),
                   want->name);
  }
  if (out)
    *out = resp;
  else
    protobuf_c_message_free_unpacked(resp, NULL);
  return TPU_CLIENT_OK;
}

tpu_client_status_t tpu_client_server_live(tpu_client_t *c, int timeout_ms, bool *live) {
  Inference__ServerLiveResponse *resp;
  if (live) *live = false;
  tpu_client_status_t st = call_typed(c, TPUD__METHOD__SERVER_LIVE, NULL, timeout_ms,
                                      &inference__server_live_response__descriptor, (void **)&resp);
  if (st != TPU_CLIENT_OK) return st;
  if (live) *live = resp->live;
  inference__server_live_response__free_unpacked(resp, NULL);
  return st;
}

tpu_client_status_t tpu_client_server_ready(tpu_client_t *c, int timeout_ms, bool *ready) {
  Inference__ServerReadyResponse *resp;
  if (ready) *ready = false;
  tpu_client_status_t st =
      call_typed(c, TPUD__METHOD__SERVER_READY, NULL, timeout_ms,
                 &inference__server_ready_response__descriptor, (void **)&resp);
  if (st != TPU_CLIENT_OK) return st;
  if (ready) *ready = resp->ready;
  inference__server_ready_response__free_unpacked(resp, NULL);
  return st;
}

tpu_client_status_t tpu_client_model_ready(tpu_client_t *c, const char *model,
                                           const char *version, int timeout_ms, bool *ready) {
  if (ready) *ready = false;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Inference__ModelReadyRequest req = INFERENCE__MODEL_READY_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  Inference__ModelReadyResponse *resp;
  tpu_client_status_t st =
      call_typed(c, TPUD__METHOD__MODEL_READY, &req.base, timeout_ms,
                 &inference__model_ready_response__descriptor, (void **)&resp);
  if (st != TPU_CLIENT_OK) return st;
  if (ready) *ready = resp->ready;
  inference__model_ready_response__free_unpacked(resp, NULL);
  return st;
}

tpu_client_status_t tpu_client_server_metadata(tpu_client_t *c, int timeout_ms,
                                               Inference__ServerMetadataResponse **out) {
  return call_typed(c, TPUD__METHOD__SERVER_METADATA, NULL, timeout_ms,
                    &inference__server_metadata_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_metadata(tpu_client_t *c, const char *model,
                                              const char *version, int timeout_ms,
                                              Inference__ModelMetadataResponse **out) {
  if (out) *out = NULL;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Inference__ModelMetadataRequest req = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  return call_typed(c, TPUD__METHOD__MODEL_METADATA, &req.base, timeout_ms,
                    &inference__model_metadata_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_infer(tpu_client_t *c,
                                           const Inference__ModelInferRequest *request,
                                           int timeout_ms, Inference__ModelInferResponse **out) {
  if (out) *out = NULL;
  if (c && !request) return set_err(c, TPU_CLIENT_MISUSE, "no request");
  return call_typed(c, TPUD__METHOD__MODEL_INFER, request ? &request->base : NULL, timeout_ms,
                    &inference__model_infer_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_matmul(tpu_client_t *c, const Tpud__MatMulRequest *request,
                                      int timeout_ms, Tpud__MatMulResponse **out) {
  if (out) *out = NULL;
  if (c && !request) return set_err(c, TPU_CLIENT_MISUSE, "no request");
  return call_typed(c, TPUD__METHOD__MATMUL, request ? &request->base : NULL, timeout_ms,
                    &tpud__mat_mul_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_load(tpu_client_t *c, const char *model,
                                          const char *version, int timeout_ms,
                                          Tpud__ModelLoadResponse **out) {
  if (out) *out = NULL;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Tpud__ModelLoadRequest req = TPUD__MODEL_LOAD_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  return call_typed(c, TPUD__METHOD__MODEL_LOAD, &req.base, timeout_ms,
                    &tpud__model_load_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_model_unload(tpu_client_t *c, const char *model,
                                            const char *version, int timeout_ms,
                                            Tpud__ModelUnloadResponse **out) {
  if (out) *out = NULL;
  if (c && !model) return set_err(c, TPU_CLIENT_MISUSE, "no model name");
  Tpud__ModelUnloadRequest req = TPUD__MODEL_UNLOAD_REQUEST__INIT;
  req.name = (char *)model;
  if (version) req.version = (char *)version;
  return call_typed(c, TPUD__METHOD__MODEL_UNLOAD, &req.base, timeout_ms,
                    &tpud__model_unload_response__descriptor, (void **)out);
}

tpu_client_status_t tpu_client_repository_index(tpu_client_t *c, bool ready_only, int timeout_ms,
                                                Tpud__RepositoryIndexResponse **out) {
  Tpud__RepositoryIndexRequest req = TPUD__REPOSITORY_INDEX_REQUEST__INIT;
  req.ready_only = ready_only;
  return call_typed(c, TPUD__METHOD__REPOSITORY_INDEX, &req.base, timeout_ms,
                    &tpud__repository_index_response__descriptor, (void **)out);
}

/* ---- tensors ---- */

tpu_client_status_t tpu_client_infer(tpu_client_t *c, const char *model, const char *version,
                                     const tpu_client_tensor_t *inputs, size_t n_inputs,
                                     int timeout_ms, Inference__ModelInferResponse **out) {
  if (out) *out = NULL;
  if (!c) return TPU_CLIENT_MISUSE;
  if (!model || (n_inputs && !inputs))
    return set_err(c, TPU_CLIENT_MISUSE, "tpu_client_infer: no model or no inputs");
  Inference__ModelInferRequest req = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor *tensors = calloc(n_inputs + 1, sizeof *tensors);
  Inference__ModelInferRequest__InferInputTensor **ptrs = calloc(n_inputs + 1, sizeof *ptrs);
  ProtobufCBinaryData *raw = calloc(n_inputs + 1, sizeof *raw);
  tpu_client_status_t st;
  if (!tensors || !ptrs || !raw) {
    st = set_err(c, TPU_CLIENT_NOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n_inputs; i++) {
    const tpu_client_tensor_t *t = &inputs[i];
    if (!t->name || !t->datatype || (t->rank && !t->shape) || (t->nbytes && !t->data)) {
      st = set_err(c, TPU_CLIENT_MISUSE, "input %zu: name, datatype, shape or data missing", i);
      goto done;
    }
    inference__model_infer_request__infer_input_tensor__init(&tensors[i]);
    /* The request is only packed, never freed, so pointing at the caller's memory is fine. */
    tensors[i].name = (char *)t->name;
    tensors[i].datatype = (char *)t->datatype;
    tensors[i].shape = (int64_t *)t->shape;
    tensors[i].n_shape = t->rank;
    ptrs[i] = &tensors[i];
    raw[i].data = (uint8_t *)t->data;
    raw[i].len = t->nbytes;
  }
  req.model_name = (char *)model;
  if (version) req.model_version = (char *)version;
  req.inputs = ptrs;
  req.n_inputs = n_inputs;
  req.raw_input_contents = raw;
  req.n_raw_input_contents = n_inputs;
  st = tpu_client_model_infer(c, &req, timeout_ms, out);

done:
  free(tensors);
  free(ptrs);
  free(raw);
  return st;
}

tpu_client_status_t tpu_client_infer_output(const Inference__ModelInferResponse *resp,
                                            const char *name, tpu_client_tensor_t *out) {
  if (!resp || !name || !out) return TPU_CLIENT_MISUSE;
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < resp->n_outputs; i++) {
    const Inference__ModelInferResponse__InferOutputTensor *o = resp->outputs[i];
    if (!o || !o->name || strcmp(o->name, name) != 0) continue;
    if (resp->n_raw_output_contents != resp->n_outputs) return TPU_CLIENT_PROTOCOL;
    const ProtobufCBinaryData *raw = &resp->raw_output_contents[i];
    size_t size = tpu_oip_datatype_size(o->datatype);
    if (size) { /* fixed-size elements: the byte count must match the shape exactly */
      size_t count = 1;
      for (size_t d = 0; d < o->n_shape; d++) {
        if (o->shape[d] < 0) return TPU_CLIENT_PROTOCOL;
        if (o->shape[d] && count > SIZE_MAX / size / (size_t)o->shape[d])
          return TPU_CLIENT_PROTOCOL;
        count *= (size_t)o->shape[d];
      }
      if (count * size != raw->len) return TPU_CLIENT_PROTOCOL;
    }
    out->name = o->name;
    out->datatype = o->datatype;
    out->shape = o->shape;
    out->rank = o->n_shape;
    out->data = raw->data;
    out->nbytes = raw->len;
    return TPU_CLIENT_OK;
  }
  return TPU_CLIENT_NOT_FOUND;
}
