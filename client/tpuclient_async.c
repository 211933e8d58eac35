/*
 * tpuclient_async.c - libtpuclient's connection engine: one non-blocking socket, driven by the
 * caller (tpu_client_async_t), the native protocol or HTTP/1.1, plain or TLS.
 *
 * DESIGN
 * Owns one socket per connection and nothing global, so connections on different threads never
 * meet. It never waits: every function does what the socket allows now and returns (the only
 * exceptions are getaddrinfo() in connect and the poll() of tpu_client_async_wait() and of the
 * hooks the blocking API uses). Bytes become frames through proto/'s tpu_frame decoder and frames
 * become envelopes through tpu_envelope; HTTP answer heads go through tpuclient_http.c. This
 * file only moves bytes, matches answers to requests in flight, and keeps the time.
 *
 * Output: submitting encodes a request straight into one output buffer (tpu_envelope encodes
 * the frame and packs the message into place, so a request is serialized once and copied by
 * nothing but the kernel), and step() writes from it until the socket is full. Offsets into the
 * output stream are absolute (obase + index), so each request knows which bytes are its own:
 * that is how a request that times out before any of its bytes left can be taken out again.
 *
 * In-flight requests live in `pend`, sorted by id (ids are handed out in increasing order, so
 * appending keeps it sorted and lookups are binary searches), from index plo to pn: answers
 * mostly complete the oldest request, which then costs an increment, not a memmove. HTTP answers
 * always belong to the oldest entry (HTTP/1.1 answers in order). A request whose deadline passes
 * completes locally with TIMEOUT and stays in `pend` marked abandoned, so its late answer is
 * recognized and dropped rather than taken for a protocol error. When the connection dies, every
 * live request is completed with the reason: each submitted request gets exactly one result.
 * Counters: nlive (entries not abandoned), ntimed (live ones with a deadline: when 0, no timer
 * work is done at all, which is the benchmark's case).
 *
 * TLS (tpuclient_tls.c): the same socket carries an SSL; io_recv/io_send stand in for
 * recv/send. OpenSSL may hold decrypted bytes the socket no longer announces, so reading drains
 * SSL_pending, and timeout() says 0 if any were left. A bearer token goes into every request:
 * envelope metadata "authorization" (native) or an Authorization header (HTTP).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
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
#include "tpu_text.h"
#include "tpuclient_int.h"
#include "tpuclient_tls.h"

#define DEFAULT_PORT_NATIVE "8500"
#define DEFAULT_PORT_HTTP "8501"
#define DEFAULT_CONNECT_TIMEOUT_MS 5000
#define DEFAULT_TIMEOUT_MS 30000
#define READ_CHUNK ((size_t)64 << 10)      /* bytes asked of one recv() */
#define HTTP_MAX_HEAD ((size_t)64 << 10)   /* longest answer head accepted, bytes */
#define KEEP_BUFFER ((size_t)1 << 20)      /* an emptied buffer above this is given back */
#define NO_DEADLINE TPU__NO_DEADLINE

/* ---- types ---- */

enum { ST_CONNECTING, ST_HANDSHAKE, ST_READY, ST_DEAD };

typedef struct {
  uint64_t id;
  uint64_t tag;
  int method;         /* Tpud__Method; 0 for HTTP */
  int timeout_ms;     /* as resolved, for messages; -1 none */
  int64_t submitted;  /* CLOCK_MONOTONIC ns */
  int64_t deadline;   /* CLOCK_MONOTONIC ns; NO_DEADLINE for none */
  uint64_t ostart, oend; /* its bytes in the output stream, absolute offsets */
  bool abandoned;     /* no result is owed (timed out, or held): drop its answer when it comes */
  bool held;          /* abandoned only until the blocking send releases it */
  bool cut;           /* marked for removal together with its unsent bytes (see sweep_cut) */
  bool packed;        /* raw in, raw out: keep the answer's payload serialized */
  bool head;          /* HTTP HEAD: the answer has no body whatever its headers say */
} pending_t;

struct tpu_client_result {
  uint64_t id, tag;
  int method;
  tpu_client_status_t status;
  bool answered;                  /* the server's answer (not made here) */
  int http_status;                /* HTTP answers; 0 otherwise */
  char *error;                    /* malloc'd, or NULL for "" */
  ProtobufCMessage *response;     /* decoded payload when status is OK (message requests) */
  Tpud__ResponseEnvelope *env;    /* packed requests: the answer, payload still serialized */
  uint8_t *body;                  /* HTTP: malloc'd, body_len bytes plus a NUL */
  size_t body_len;
  int64_t submitted_ns, completed_ns;
  struct tpu_client_result *next; /* the done queue's link */
};

struct tpu_client_async {
  tpu_client_protocol_t proto;
  int state;
  int fd;                         /* -1 when none */
  SSL *ssl;                       /* TLS, or NULL */
  short hs_want;                  /* what the TLS handshake waits for */
  bool wblocked;                  /* plain socket: the last send() hit a full socket */
  struct addrinfo *ai_list, *ai_next; /* while connecting: the addresses left to try */
  int connect_errno;              /* why the last address failed */
  int64_t connect_deadline;
  tpu_client_options_t opts;
  char addr[256];                 /* as given, for messages */
  char hosthdr[272];              /* HTTP Host: host[:port] */
  char *authz;                    /* "Bearer <token>" (malloc'd), or NULL */
  /* input */
  tpu_frame_decoder_t *dec;       /* native */
  uint8_t *rbuf;                  /* native: READ_CHUNK bytes */
  uint8_t *in;                    /* HTTP: bytes of answers not yet complete */
  size_t in_len, in_cap, in_scanned;
  bool have_head;                 /* HTTP: `head` is parsed for the answer at in[0] */
  tpu__http_head_t head;
  /* output */
  uint8_t *obuf;
  size_t ocap, olen, osent;       /* obuf[osent..olen) waits for the socket */
  uint64_t obase;                 /* stream offset of obuf[0] */
  /* requests */
  uint64_t next_id;
  pending_t *pend;
  size_t plo, pn, pcap;           /* entries pend[plo..pn) */
  size_t nlive, ntimed;
  tpu_client_result_t *rhead, *rtail; /* completed, not yet handed out (FIFO) */
  size_t nresults;
  tpu_client_status_t conn_status; /* OK while usable */
  char conn_msg[512];
  char errmsg[512];
};

/* ---- small helpers ---- */

int64_t tpu__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Milliseconds to wait for `deadline`, rounded up so a poll never wakes just before it. */
static int wait_ms(int64_t deadline) {
  if (deadline == NO_DEADLINE) return -1;
  int64_t left = deadline - tpu__now_ns();
  if (left <= 0) return 0;
  int64_t ms = (left + 999999) / 1000000;
  return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* Resolves a call's timeout_ms against the connection's default: -1 (none) or a positive count. */
static int resolve_timeout(const tpu_client_async_t *a, int timeout_ms) {
  if (timeout_ms == 0) timeout_ms = a->opts.timeout_ms;
  return timeout_ms > 0 ? timeout_ms : -1;
}

static int64_t deadline_after(int timeout_ms) {
  return timeout_ms > 0 ? tpu__now_ns() + (int64_t)timeout_ms * 1000000 : NO_DEADLINE;
}

/* Says why in the handle's message and returns the status (proto/tpu_text.h). */
#define set_err(a, st, ...) \
  ((tpu_client_status_t)tpu_errf_ret((int)(st), (a)->errmsg, sizeof (a)->errmsg, __VA_ARGS__))

static tpu_client_status_t ok(tpu_client_async_t *a) {
  a->errmsg[0] = '\0';
  return TPU_CLIENT_OK;
}

const char *tpu__method_name(int method) {
  const tpu_method_info_t *info = tpu_envelope_method_info(method);
  return info ? info->name : "unknown method";
}

/* ---- results ---- */

static tpu_client_result_t *result_new(const pending_t *p, tpu_client_status_t st,
                                       const char *error) {
  tpu_client_result_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->id = p->id;
  r->tag = p->tag;
  r->method = p->method;
  r->status = st;
  r->submitted_ns = p->submitted;
  r->completed_ns = tpu__now_ns();
  if (error && *error) r->error = strdup(error); /* NULL on failure reads as "" */
  return r;
}

static void queue_push(tpu_client_async_t *a, tpu_client_result_t *r) {
  r->next = NULL;
  if (a->rtail)
    a->rtail->next = r;
  else
    a->rhead = r;
  a->rtail = r;
  a->nresults++;
}

static tpu_client_result_t *queue_pop(tpu_client_async_t *a) {
  tpu_client_result_t *r = a->rhead;
  if (r) {
    a->rhead = r->next;
    if (!a->rhead) a->rtail = NULL;
    r->next = NULL;
    a->nresults--;
  }
  return r;
}

tpu_client_result_t *tpu__async_take(tpu_client_async_t *a, uint64_t id) {
  tpu_client_result_t *prev = NULL;
  for (tpu_client_result_t *r = a->rhead; r; prev = r, r = r->next) {
    if (r->id != id) continue;
    if (prev)
      prev->next = r->next;
    else
      a->rhead = r->next;
    if (a->rtail == r) a->rtail = prev;
    r->next = NULL;
    a->nresults--;
    return r;
  }
  return NULL;
}

uint64_t tpu_client_result_id(const tpu_client_result_t *r) { return r ? r->id : 0; }

uint64_t tpu_client_result_tag(const tpu_client_result_t *r) { return r ? r->tag : 0; }

int tpu_client_result_method(const tpu_client_result_t *r) { return r ? r->method : 0; }

tpu_client_status_t tpu_client_result_status(const tpu_client_result_t *r) {
  return r ? r->status : TPU_CLIENT_MISUSE;
}

bool tpu_client_result_answered(const tpu_client_result_t *r) { return r && r->answered; }

int tpu_client_result_http_status(const tpu_client_result_t *r) { return r ? r->http_status : 0; }

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

const void *tpu_client_result_payload(const tpu_client_result_t *r, size_t *len) {
  if (len) *len = 0;
  if (!r) return NULL;
  if (r->body) {
    if (len) *len = r->body_len;
    return r->body;
  }
  if (r->env) {
    if (len) *len = r->env->payload.len;
    /* Never NULL for an answer that has a payload field, even an empty one. */
    return r->env->payload.data ? (const void *)r->env->payload.data : (const void *)"";
  }
  return NULL;
}

void tpu_client_result_times(const tpu_client_result_t *r, int64_t *submitted_ns,
                             int64_t *completed_ns) {
  if (submitted_ns) *submitted_ns = r ? r->submitted_ns : 0;
  if (completed_ns) *completed_ns = r ? r->completed_ns : 0;
}

void tpu_client_result_free(tpu_client_result_t *r) {
  if (!r) return;
  if (r->response) protobuf_c_message_free_unpacked(r->response, NULL);
  tpu_envelope_response_free(r->env);
  free(r->body);
  free(r->error);
  free(r);
}

/* ---- in-flight table ---- */

static pending_t *pend_find(const tpu_client_async_t *a, uint64_t id) {
  size_t lo = a->plo, hi = a->pn;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a->pend[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < a->pn && a->pend[lo].id == id ? &a->pend[lo] : NULL;
}

/* The entry stops being owed a result (timed out, or completed). */
static void unlive(tpu_client_async_t *a, pending_t *p) {
  if (p->abandoned) return;
  p->abandoned = true;
  a->nlive--;
  if (p->deadline != NO_DEADLINE) a->ntimed--;
}

static void pend_remove(tpu_client_async_t *a, pending_t *p) {
  unlive(a, p);
  size_t i = (size_t)(p - a->pend);
  /* Close the gap from the shorter side: the oldest entry (the usual one) costs nothing. */
  if (i - a->plo <= a->pn - 1 - i) {
    memmove(&a->pend[a->plo + 1], &a->pend[a->plo], (i - a->plo) * sizeof *p);
    a->plo++;
  } else {
    memmove(p, p + 1, (a->pn - 1 - i) * sizeof *p);
    a->pn--;
  }
  if (a->plo == a->pn) a->plo = a->pn = 0;
}

static int pend_add(tpu_client_async_t *a, const pending_t *p) {
  if (a->pn == a->pcap) {
    if (a->plo >= a->pcap / 2 && a->plo > 0) { /* half of it is free at the front: reuse it */
      memmove(a->pend, &a->pend[a->plo], (a->pn - a->plo) * sizeof *p);
      a->pn -= a->plo;
      a->plo = 0;
    } else {
      size_t cap = a->pcap ? a->pcap * 2 : 16;
      pending_t *np = realloc(a->pend, cap * sizeof *np);
      if (!np) return -1;
      a->pend = np;
      a->pcap = cap;
    }
  }
  a->pend[a->pn++] = *p; /* ids only grow, so the table stays sorted */
  if (!p->abandoned) {
    a->nlive++;
    if (p->deadline != NO_DEADLINE) a->ntimed++;
  }
  return 0;
}

/* ---- connection failure ---- */

/*
 * Marks the connection gone with `st` and completes every live request with that reason. A
 * result that cannot be allocated is lost; the caller then sees the connection status instead.
 */
__attribute__((format(printf, 3, 4))) static void conn_fail(tpu_client_async_t *a,
                                                            tpu_client_status_t st,
                                                            const char *fmt, ...) {
  if (a->state == ST_DEAD) return; /* the first reason is the real one */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->conn_msg, sizeof a->conn_msg, fmt, ap);
  va_end(ap);
  a->conn_status = st;
  a->state = ST_DEAD;
  tpu__ctls_free(a->ssl, 0);
  a->ssl = NULL;
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
  if (a->ai_list) freeaddrinfo(a->ai_list);
  a->ai_list = a->ai_next = NULL;
  for (size_t i = a->plo; i < a->pn; i++) {
    const pending_t *p = &a->pend[i];
    if (p->abandoned) continue;
    tpu_client_result_t *r = result_new(p, st, a->conn_msg);
    if (r) queue_push(a, r);
  }
  a->plo = a->pn = a->nlive = a->ntimed = 0;
  a->obase += a->olen;
  a->olen = a->osent = 0;
}

/* ---- I/O ---- */

static ssize_t io_recv(tpu_client_async_t *a, void *buf, size_t len) {
  return a->ssl ? tpu__ctls_recv(a->ssl, buf, len) : recv(a->fd, buf, len, 0);
}

static ssize_t io_send(tpu_client_async_t *a, const void *buf, size_t len) {
  return a->ssl ? tpu__ctls_send(a->ssl, buf, len) : send(a->fd, buf, len, MSG_NOSIGNAL);
}

static const char *io_error(const tpu_client_async_t *a) {
  return a->ssl && errno == EPROTO ? tpu__ctls_error() : strerror(errno);
}

/* Stream offset of the first byte not yet written. */
static uint64_t sent_pos(const tpu_client_async_t *a) { return a->obase + a->osent; }

/* Makes room for `extra` more bytes of output. */
static int out_reserve(tpu_client_async_t *a, size_t extra) {
  if (a->osent && a->osent == a->olen) { /* all written: start over at the front */
    a->obase += a->olen;
    a->olen = a->osent = 0;
  }
  if (a->ocap - a->olen >= extra) return 0;
  if (a->osent) { /* slide the unsent bytes to the front first */
    memmove(a->obuf, a->obuf + a->osent, a->olen - a->osent);
    a->obase += a->osent;
    a->olen -= a->osent;
    a->osent = 0;
    if (a->ocap - a->olen >= extra) return 0;
  }
  size_t cap = a->ocap ? a->ocap : 16384;
  while (cap - a->olen < extra) {
    if (cap > SIZE_MAX / 2) return -1;
    cap *= 2;
  }
  uint8_t *nb = realloc(a->obuf, cap);
  if (!nb) return -1;
  a->obuf = nb;
  a->ocap = cap;
  return 0;
}

/* Writes queued output until the socket is full. Returns 0, or -1 once the connection is gone. */
static int flush_out(tpu_client_async_t *a) {
  while (a->osent < a->olen) {
    ssize_t n = io_send(a, a->obuf + a->osent, a->olen - a->osent);
    if (n > 0) {
      a->osent += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      /* A plain socket says when it has room (POLLOUT); TLS may want either direction, so it
       * simply tries again at every step. */
      if (!a->ssl) a->wblocked = true;
      return 0;
    }
    conn_fail(a, TPU_CLIENT_CLOSED, "connection to %s lost while sending: %s", a->addr,
              io_error(a));
    return -1;
  }
  a->obase += a->olen;
  a->olen = a->osent = 0;
  if (a->ocap > KEEP_BUFFER) { /* one huge request should not pin its buffer for good */
    free(a->obuf);
    a->obuf = NULL;
    a->ocap = 0;
  }
  return 0;
}

/*
 * Drops the bytes of every entry marked `cut` (none of which has been written: they all lie in
 * the unsent part) and the entries themselves, in one pass, shifting later requests' offsets.
 */
static void sweep_cut(tpu_client_async_t *a) {
  uint64_t removed = 0;
  size_t w = a->plo;
  size_t keep_from = 0; /* obuf index of the first byte after the last hole */
  size_t dst = 0;       /* where bytes after a hole move to */
  for (size_t r = a->plo; r < a->pn; r++) {
    pending_t p = a->pend[r];
    if (p.cut) {
      size_t s = (size_t)(p.ostart - a->obase), e = (size_t)(p.oend - a->obase);
      if (removed) { /* move what lies between the previous hole and this one */
        memmove(a->obuf + dst, a->obuf + keep_from, s - keep_from);
        dst += s - keep_from;
      } else {
        dst = s;
      }
      keep_from = e;
      removed += p.oend - p.ostart;
      continue;
    }
    if (removed) {
      p.ostart -= removed;
      p.oend -= removed;
    }
    a->pend[w++] = p;
  }
  if (removed) {
    memmove(a->obuf + dst, a->obuf + keep_from, a->olen - keep_from);
    a->olen -= (size_t)removed;
  }
  a->pn = w;
  if (a->plo == a->pn) a->plo = a->pn = 0;
}

/* Completes, with TIMEOUT, every live request whose deadline has passed. */
static void expire(tpu_client_async_t *a) {
  if (!a->ntimed) return;
  int64_t now = tpu__now_ns();
  bool any_cut = false;
  for (size_t i = a->plo; i < a->pn; i++) {
    pending_t *p = &a->pend[i];
    if (p->abandoned || p->deadline > now) continue;
    char msg[200];
    if (a->proto == TPU_CLIENT_PROTOCOL_HTTP)
      snprintf(msg, sizeof msg, "no response to HTTP request %" PRIu64 " within %d ms", p->id,
               p->timeout_ms);
    else
      snprintf(msg, sizeof msg, "no response to %s (request %" PRIu64 ") within %d ms",
               tpu__method_name(p->method), p->id, p->timeout_ms);
    tpu_client_result_t *r = result_new(p, TPU_CLIENT_TIMEOUT, msg);
    if (!r) continue; /* try again on the next pass */
    queue_push(a, r);
    unlive(a, p);
    if (p->ostart >= sent_pos(a) && p->oend > p->ostart) { /* never started: withdraw it */
      p->cut = true;
      any_cut = true;
    }
  }
  if (any_cut) sweep_cut(a);
}

/* ---- reading: native ---- */

/* Turns one frame from the server into a result (or a connection failure). */
static void handle_frame(tpu_client_async_t *a, const tpu_frame_t *frame) {
  Tpud__ResponseEnvelope *env = NULL;
  tpu_proto_error_t perr;
  if (tpu_envelope_decode_response(frame->data, frame->len, a->opts.max_message_bytes, &env,
                                   &perr) != TPU_PROTO_OK) {
    conn_fail(a, TPU_CLIENT_PROTOCOL, "bad response from %s: %s", a->addr, perr.msg);
    return;
  }
  if (env->id == 0) { /* about the connection itself: the server closes it after this */
    /* An OK here would make no sense; keep "connection gone" distinguishable from usable. */
    tpu_client_status_t st = env->code ? (tpu_client_status_t)env->code : TPU_CLIENT_PROTOCOL;
    const char *name = tpu_envelope_code_name((int)env->code);
    conn_fail(a, st, "server ended the connection: %s%s%s", name ? name : "?",
              *env->message ? ": " : "", env->message);
    tpu_envelope_response_free(env);
    return;
  }
  pending_t *p = pend_find(a, env->id);
  if (!p) {
    uint64_t id = env->id;
    tpu_envelope_response_free(env);
    conn_fail(a, TPU_CLIENT_PROTOCOL,
              "server answered request id %" PRIu64 ", which is not in flight", id);
    return;
  }
  if (p->abandoned) { /* timed out here already (or held): no result is owed */
    pend_remove(a, p);
    tpu_envelope_response_free(env);
    return;
  }
  tpu_client_result_t *r;
  if (env->code == TPUD__STATUS_CODE__OK) {
    if (p->packed) {
      r = result_new(p, TPU_CLIENT_OK, NULL);
      if (r) {
        r->env = env; /* the payload stays serialized, owned by the result */
        env = NULL;
      }
    } else {
      ProtobufCMessage *msg = NULL;
      if (tpu_envelope_unpack_response_payload(env, p->method, &msg, &perr) == TPU_PROTO_OK) {
        r = result_new(p, TPU_CLIENT_OK, NULL);
        if (r)
          r->response = msg;
        else
          protobuf_c_message_free_unpacked(msg, NULL);
      } else {
        r = result_new(p, TPU_CLIENT_PROTOCOL, perr.msg);
      }
    }
  } else {
    r = result_new(p, (tpu_client_status_t)env->code,
                   *env->message ? env->message
                                 : tpu_client_strerror((tpu_client_status_t)env->code));
  }
  if (r)
    r->answered = true;
  else
    r = result_new(p, TPU_CLIENT_NOMEM, NULL); /* made here: not the server's answer */
  pend_remove(a, p);
  tpu_envelope_response_free(env);
  if (r) queue_push(a, r);
}

/* Feeds n bytes of a->rbuf through the frame decoder. */
static void feed_native(tpu_client_async_t *a, size_t n) {
  size_t off = 0;
  while (off < n && a->state != ST_DEAD) {
    size_t used = 0;
    tpu_frame_t frame;
    tpu_proto_error_t perr;
    tpu_proto_status_t st =
        tpu_frame_decoder_feed(a->dec, a->rbuf + off, n - off, &used, &frame, &perr);
    off += used;
    if (st == TPU_PROTO_EAGAIN) break;
    if (st != TPU_PROTO_OK) {
      conn_fail(a, st == TPU_PROTO_ENOMEM ? TPU_CLIENT_NOMEM : TPU_CLIENT_PROTOCOL,
                "bad frame from %s: %s", a->addr, perr.msg);
      break;
    }
    handle_frame(a, &frame);
  }
}

static void eof_native(tpu_client_async_t *a) {
  tpu_proto_error_t perr;
  if (tpu_frame_decoder_finish(a->dec, &perr) != TPU_PROTO_OK)
    conn_fail(a, TPU_CLIENT_CLOSED,
              "server %s closed the connection in the middle of a response: %s", a->addr,
              perr.msg);
  else
    conn_fail(a, TPU_CLIENT_CLOSED, "server %s closed the connection with %zu request%s in flight",
              a->addr, a->nlive, a->nlive == 1 ? "" : "s");
}

/* ---- reading: HTTP ---- */

/* The message of an HTTP error answer: its {"error": "..."} when it has one. */
static void http_error_text(int status, const uint8_t *body, size_t len, char *out, size_t cap) {
  json_t *j = len ? json_loadb((const char *)body, len, 0, NULL) : NULL;
  const char *e = json_is_object(j) ? json_string_value(json_object_get(j, "error")) : NULL;
  if (e)
    snprintf(out, cap, "HTTP %d: %s", status, e);
  else
    snprintf(out, cap, "HTTP %d%s%.*s", status, len ? ": " : "", (int)(len > 200 ? 200 : len),
             (const char *)body);
  json_decref(j);
}

/* Completes the oldest request with the answer whose head is a->head and whose body is
 * body[0..blen). */
static void http_complete(tpu_client_async_t *a, pending_t *p, const uint8_t *body, size_t blen) {
  if (p->abandoned) {
    pend_remove(a, p);
    return;
  }
  int hs = a->head.status;
  tpu_client_status_t st = tpu__http_status_code(hs);
  char msg[320] = "";
  if (st != TPU_CLIENT_OK) http_error_text(hs, body, blen, msg, sizeof msg);
  tpu_client_result_t *r = result_new(p, st, msg);
  uint8_t *copy = r ? malloc(blen + 1) : NULL;
  if (r && copy) {
    memcpy(copy, body, blen);
    copy[blen] = '\0';
    r->body = copy;
    r->body_len = blen;
    r->answered = true;
    r->http_status = hs;
  } else if (r) {
    tpu_client_result_free(r);
    r = result_new(p, TPU_CLIENT_NOMEM, NULL); /* made here: not the server's answer */
  }
  pend_remove(a, p);
  if (r) queue_push(a, r);
}

/* Cuts every complete answer out of a->in. */
static void parse_http(tpu_client_async_t *a) {
  size_t off = 0;
  while (off < a->in_len && a->state != ST_DEAD) {
    const uint8_t *p0 = a->in + off;
    size_t avail = a->in_len - off;
    if (!a->have_head) {
      char err[200];
      int rc = tpu__http_parse_head((const char *)p0, avail, &a->in_scanned, &a->head, err,
                                    sizeof err);
      if (rc < 0) {
        conn_fail(a, TPU_CLIENT_PROTOCOL, "bad HTTP response from %s: %s", a->addr, err);
        break;
      }
      if (rc == 0) {
        if (avail > HTTP_MAX_HEAD)
          conn_fail(a, TPU_CLIENT_PROTOCOL,
                    "bad HTTP response from %s: head longer than %zu bytes", a->addr,
                    HTTP_MAX_HEAD);
        break;
      }
      a->have_head = true;
      a->in_scanned = 0;
      if (a->head.status < 200) { /* interim (100 Continue): no body, the answer follows */
        if (a->head.status == 101) {
          conn_fail(a, TPU_CLIENT_PROTOCOL, "server %s switched protocols (101)", a->addr);
          break;
        }
        off += a->head.head_len;
        a->have_head = false;
        continue;
      }
    }
    pending_t *p = a->plo < a->pn ? &a->pend[a->plo] : NULL;
    if (!p) {
      conn_fail(a, TPU_CLIENT_PROTOCOL,
                "server %s sent an HTTP response (status %d) with no request outstanding",
                a->addr, a->head.status);
      break;
    }
    size_t blen = 0;
    if (!(p->head || a->head.status == 204 || a->head.status == 304)) {
      if (a->head.chunked) {
        conn_fail(a, TPU_CLIENT_PROTOCOL, "bad HTTP response from %s: Transfer-Encoding is not "
                  "supported (expected a Content-Length body)", a->addr);
        break;
      }
      if (a->head.content_length < 0) {
        conn_fail(a, TPU_CLIENT_PROTOCOL, "bad HTTP response from %s: no Content-Length "
                  "(expected a Content-Length body)", a->addr);
        break;
      }
      if ((uint64_t)a->head.content_length > a->opts.max_message_bytes) {
        conn_fail(a, TPU_CLIENT_PROTOCOL, "HTTP response from %s: body of %" PRId64
                  " bytes exceeds the %zu-byte limit (max_message_bytes)", a->addr,
                  a->head.content_length, a->opts.max_message_bytes);
        break;
      }
      blen = (size_t)a->head.content_length;
    }
    if (avail - a->head.head_len < blen) break; /* the body is not all here yet */
    bool close_after = a->head.close;
    http_complete(a, p, p0 + a->head.head_len, blen);
    off += a->head.head_len + blen;
    a->have_head = false;
    if (close_after) {
      conn_fail(a, TPU_CLIENT_CLOSED,
                "server %s closed the connection after an answer (Connection: close)%s", a->addr,
                a->nlive ? "; the requests pipelined after it were not answered" : "");
      break;
    }
  }
  if (a->state == ST_DEAD) {
    a->in_len = 0;
    return;
  }
  if (off) {
    memmove(a->in, a->in + off, a->in_len - off);
    a->in_len -= off;
  }
  if (a->in_len == 0 && a->in_cap > KEEP_BUFFER) {
    free(a->in);
    a->in = NULL;
    a->in_cap = 0;
  }
}

static void eof_http(tpu_client_async_t *a) {
  if (a->in_len)
    conn_fail(a, TPU_CLIENT_CLOSED, "server %s closed the connection in the middle of a "
              "response (%zu bytes of it received)", a->addr, a->in_len);
  else
    conn_fail(a, TPU_CLIENT_CLOSED, "server %s closed the connection with %zu request%s in flight",
              a->addr, a->nlive, a->nlive == 1 ? "" : "s");
}

/* ---- reading ---- */

/*
 * Reads what arrived and parses it. A plain socket is read until a short read (all there was;
 * poll is level-triggered, so anything later is announced again); TLS until OpenSSL holds no
 * decrypted byte. Results land on the done queue.
 */
static void read_some(tpu_client_async_t *a) {
  bool http = a->proto == TPU_CLIENT_PROTOCOL_HTTP;
  while (a->state == ST_READY) {
    uint8_t *dst = a->rbuf;
    if (http) {
      if (a->in_cap - a->in_len < READ_CHUNK) {
        size_t cap = a->in_cap ? a->in_cap : READ_CHUNK;
        while (cap - a->in_len < READ_CHUNK) cap *= 2;
        uint8_t *nb = realloc(a->in, cap);
        if (!nb) {
          conn_fail(a, TPU_CLIENT_NOMEM, "out of memory reading from %s", a->addr);
          return;
        }
        a->in = nb;
        a->in_cap = cap;
      }
      dst = a->in + a->in_len;
    }
    ssize_t n = io_recv(a, dst, READ_CHUNK);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      conn_fail(a, TPU_CLIENT_CLOSED, "connection to %s lost: %s", a->addr, io_error(a));
      return;
    }
    if (n == 0) {
      if (http)
        eof_http(a);
      else
        eof_native(a);
      return;
    }
    if (http) {
      a->in_len += (size_t)n;
      parse_http(a);
    } else {
      feed_native(a, (size_t)n);
    }
    if (a->ssl ? SSL_pending(a->ssl) <= 0 : (size_t)n < READ_CHUNK) return;
  }
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
static int split_addr(const char *addr, const char *defport, char *host, size_t hostcap,
                      char *port, size_t portcap, bool *v6) {
  const char *h = addr, *p = NULL;
  size_t hlen;
  *v6 = false;
  if (addr[0] == '[') {
    const char *end = strchr(addr, ']');
    if (!end) return -1;
    h = addr + 1;
    hlen = (size_t)(end - h);
    *v6 = true;
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
      *v6 = colon != NULL;
    }
  }
  if (hlen == 0 || hlen >= hostcap) return -1;
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  if (!p) p = defport;
  char *end;
  long v = strtol(p, &end, 10);
  if (*p == '\0' || *end != '\0' || v < 1 || v > 65535) return -1;
  snprintf(port, portcap, "%ld", v);
  return 0;
}

/* The TCP connection is up: TLS next, or ready. */
static void on_connected(tpu_client_async_t *a) {
  int one = 1;
  setsockopt(a->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* latency over packet count */
  if (a->ai_list) freeaddrinfo(a->ai_list);
  a->ai_list = a->ai_next = NULL;
  if (!a->ssl) {
    a->state = ST_READY;
    return;
  }
  if (SSL_set_fd(a->ssl, a->fd) != 1) {
    conn_fail(a, TPU_CLIENT_NOMEM, "connect to %s: TLS: out of memory", a->addr);
    return;
  }
  a->state = ST_HANDSHAKE;
  a->hs_want = POLLOUT;
}

/* Starts the next address. Returns 1 connected at once, 0 in progress, -1 none left. */
static int start_next(tpu_client_async_t *a) {
  while (a->ai_next) {
    const struct addrinfo *ai = a->ai_next;
    a->ai_next = ai->ai_next;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
    if (fd < 0) {
      a->connect_errno = errno;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      a->fd = fd;
      return 1;
    }
    if (errno == EINPROGRESS) {
      a->fd = fd;
      return 0;
    }
    a->connect_errno = errno;
    close(fd);
  }
  return -1;
}

static void connect_failed(tpu_client_async_t *a) {
  conn_fail(a, TPU_CLIENT_CONNECT_FAILED, "connect to %s: %s", a->addr,
            strerror(a->connect_errno ? a->connect_errno : ECONNREFUSED));
}

/* Fails a connect before it started: the connection stays "not connected" with this reason. */
__attribute__((format(printf, 3, 4))) static tpu_client_status_t
setup_fail(tpu_client_async_t *a, tpu_client_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->errmsg, sizeof a->errmsg, fmt, ap);
  va_end(ap);
  snprintf(a->conn_msg, sizeof a->conn_msg, "%s", a->errmsg);
  return st;
}

tpu_client_status_t tpu_client_async_connect(const char *addr, const tpu_client_options_t *opts,
                                             tpu_client_protocol_t protocol,
                                             tpu_client_async_t **out) {
  if (!out) return TPU_CLIENT_MISUSE;
  *out = NULL;
  tpu_client_async_t *a = calloc(1, sizeof *a);
  if (!a) return TPU_CLIENT_NOMEM;
  a->fd = -1;
  a->next_id = 1;
  a->state = ST_DEAD;
  a->proto = protocol;
  a->conn_status = TPU_CLIENT_CONNECT_FAILED;
  snprintf(a->conn_msg, sizeof a->conn_msg, "not connected");
  tpu_client_options_init(&a->opts);
  *out = a;

  if (protocol != TPU_CLIENT_PROTOCOL_NATIVE && protocol != TPU_CLIENT_PROTOCOL_HTTP)
    return setup_fail(a, TPU_CLIENT_MISUSE, "unknown protocol %d: expected "
                      "TPU_CLIENT_PROTOCOL_NATIVE or TPU_CLIENT_PROTOCOL_HTTP", (int)protocol);
  if (opts) {
    if (opts->size < sizeof(size_t))
      return setup_fail(a, TPU_CLIENT_MISUSE,
                        "options not set up with tpu_client_options_init()");
    /* Only the fields the caller's build knows; later fields keep their defaults. */
    memcpy(&a->opts, opts, opts->size < sizeof a->opts ? opts->size : sizeof a->opts);
    a->opts.size = sizeof a->opts;
    if (a->opts.connect_timeout_ms == 0) a->opts.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
    if (a->opts.max_message_bytes == 0) a->opts.max_message_bytes = TPU_FRAME_DEFAULT_MAX_MESSAGE;
  }
  if (!addr || !*addr) return setup_fail(a, TPU_CLIENT_MISUSE, "no address: expected HOST:PORT");
  snprintf(a->addr, sizeof a->addr, "%s", addr);

  bool http = protocol == TPU_CLIENT_PROTOCOL_HTTP, v6;
  char host[256], port[8];
  if (split_addr(addr, http ? DEFAULT_PORT_HTTP : DEFAULT_PORT_NATIVE, host, sizeof host, port,
                 sizeof port, &v6) < 0)
    return setup_fail(a, TPU_CLIENT_MISUSE,
                      "address \"%.200s\" is not HOST:PORT (port 1..65535; [V6]:PORT for IPv6)",
                      addr);
  snprintf(a->hosthdr, sizeof a->hosthdr, v6 ? "[%s]:%s" : "%s:%s", host, port);
  if (http) {
    a->in_cap = 0; /* grown on the first read */
  } else {
    a->rbuf = malloc(READ_CHUNK);
    if (!a->rbuf || tpu_frame_decoder_create(a->opts.max_message_bytes, &a->dec) != TPU_PROTO_OK)
      return setup_fail(a, TPU_CLIENT_NOMEM, "out of memory");
  }
  bool tls = a->opts.tls || (a->opts.tls_ca_file && *a->opts.tls_ca_file) ||
             (a->opts.tls_cert_file && *a->opts.tls_cert_file);
  if (tls) {
    char why[384];
    a->ssl = tpu__ctls_new(&a->opts, host, http ? TPU_CLIENT_ALPN_HTTP : TPU_CLIENT_ALPN, why,
                           sizeof why);
    if (!a->ssl)
      return setup_fail(a, TPU_CLIENT_CONNECT_FAILED, "connect to %s: %s", addr, why);
  }
  if (a->opts.token && *a->opts.token) {
    size_t n = strlen(a->opts.token) + 8;
    a->authz = malloc(n);
    if (!a->authz) return setup_fail(a, TPU_CLIENT_NOMEM, "out of memory");
    snprintf(a->authz, n, "Bearer %s", a->opts.token);
  }
  /* Used up: keep no pointer into the caller's memory. */
  a->opts.tls_ca_file = a->opts.tls_cert_file = a->opts.tls_key_file = NULL;
  a->opts.tls_server_name = a->opts.token = NULL;

  struct addrinfo hints = {0};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int gai = getaddrinfo(host, port, &hints, &a->ai_list);
  if (gai != 0) {
    a->ai_list = NULL;
    return setup_fail(a, TPU_CLIENT_CONNECT_FAILED, "connect to %s: cannot resolve \"%s\": %s",
                      addr, host, gai_strerror(gai));
  }
  a->ai_next = a->ai_list;
  a->connect_deadline = deadline_after(a->opts.connect_timeout_ms);
  a->state = ST_CONNECTING;
  a->conn_status = TPU_CLIENT_OK;
  a->conn_msg[0] = '\0';
  int rc = start_next(a);
  if (rc < 0) {
    connect_failed(a);
    return set_err(a, a->conn_status, "%s", a->conn_msg);
  }
  if (rc == 1) on_connected(a);
  if (a->state == ST_DEAD) return set_err(a, a->conn_status, "%s", a->conn_msg);
  return ok(a);
}

void tpu_client_async_free(tpu_client_async_t *a) {
  if (!a) return;
  tpu__ctls_free(a->ssl, a->state == ST_READY);
  if (a->fd >= 0) close(a->fd);
  if (a->ai_list) freeaddrinfo(a->ai_list);
  if (a->authz) {
    memset(a->authz, 0, strlen(a->authz));
    free(a->authz);
  }
  tpu_client_result_t *r;
  while ((r = queue_pop(a))) tpu_client_result_free(r);
  tpu_frame_decoder_free(a->dec);
  free(a->rbuf);
  free(a->in);
  free(a->obuf);
  free(a->pend);
  free(a);
}

/* ---- the event-loop interface ---- */

int tpu_client_async_fd(const tpu_client_async_t *a) { return a ? a->fd : -1; }

int tpu_client_async_events(const tpu_client_async_t *a) {
  if (!a) return 0;
  switch (a->state) {
  case ST_CONNECTING: return POLLOUT;
  case ST_HANDSHAKE: return a->hs_want;
  case ST_READY: return POLLIN | (a->osent < a->olen ? POLLOUT : 0);
  default: return 0;
  }
}

/* The earliest deadline the connection has to act on. */
static int64_t next_deadline(const tpu_client_async_t *a) {
  int64_t d = NO_DEADLINE;
  if (a->state == ST_CONNECTING || a->state == ST_HANDSHAKE) d = a->connect_deadline;
  if (a->ntimed)
    for (size_t i = a->plo; i < a->pn; i++)
      if (!a->pend[i].abandoned && a->pend[i].deadline < d) d = a->pend[i].deadline;
  return d;
}

int tpu_client_async_timeout(const tpu_client_async_t *a) {
  if (!a || a->state == ST_DEAD) return -1;
  if (a->ssl && a->state == ST_READY && SSL_pending(a->ssl) > 0) return 0;
  return wait_ms(next_deadline(a));
}

/* The work of step(); leaves the outcome in the connection's state. */
static void step(tpu_client_async_t *a, int revents) {
  expire(a); /* first, so that a request that expired unsent is withdrawn, not written */
  if ((revents & POLLNVAL) && a->state != ST_DEAD) { /* else the caller's loop would spin */
    a->fd = -1; /* not ours to close any more */
    conn_fail(a, TPU_CLIENT_CLOSED, "connection to %s: its socket was closed outside the "
              "library (POLLNVAL)", a->addr);
    return;
  }
  if (a->state == ST_CONNECTING) {
    if (revents & (POLLOUT | POLLERR | POLLHUP)) {
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      if (getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) soerr = errno;
      if (soerr == 0) {
        on_connected(a);
      } else {
        a->connect_errno = soerr;
        close(a->fd);
        a->fd = -1;
        int rc = start_next(a);
        if (rc < 0)
          connect_failed(a);
        else if (rc == 1)
          on_connected(a);
      }
    }
    if (a->state == ST_CONNECTING && tpu__now_ns() >= a->connect_deadline)
      conn_fail(a, TPU_CLIENT_CONNECT_FAILED, "connect to %s: no answer within %d ms", a->addr,
                a->opts.connect_timeout_ms);
  }
  if (a->state == ST_HANDSHAKE) {
    char why[384];
    int rc = tpu__ctls_handshake(a->ssl, &a->hs_want, why, sizeof why);
    if (rc > 0) {
      a->state = ST_READY;
      revents = 0; /* the readiness was the handshake's; reading now would find nothing */
    } else if (rc < 0) {
      conn_fail(a, TPU_CLIENT_CONNECT_FAILED, "connect to %s: %s", a->addr, why);
    } else if (tpu__now_ns() >= a->connect_deadline) {
      conn_fail(a, TPU_CLIENT_CONNECT_FAILED, "connect to %s: TLS handshake timed out",
                a->addr);
    }
  }
  if (a->state != ST_READY) return;
  if ((revents & (POLLIN | POLLERR | POLLHUP)) || (a->ssl && SSL_pending(a->ssl) > 0))
    read_some(a); /* POLLHUP/POLLERR also surface through recv() */
  if (revents & POLLOUT) a->wblocked = false;
  if (a->state == ST_READY && a->osent < a->olen && !a->wblocked) flush_out(a);
}

tpu_client_status_t tpu_client_async_step(tpu_client_async_t *a, int revents) {
  if (!a) return TPU_CLIENT_MISUSE;
  step(a, revents);
  if (a->conn_status != TPU_CLIENT_OK) return set_err(a, a->conn_status, "%s", a->conn_msg);
  return ok(a);
}

tpu_client_result_t *tpu_client_async_next(tpu_client_async_t *a) {
  return a ? queue_pop(a) : NULL;
}

void tpu__async_pump(tpu_client_async_t *a, int64_t deadline) {
  if (a->state == ST_DEAD) return;
  int64_t d = next_deadline(a);
  if (d < deadline) deadline = d;
  struct pollfd pfd = {.fd = a->fd, .events = (short)tpu_client_async_events(a)};
  int rc = a->ssl && a->state == ST_READY && SSL_pending(a->ssl) > 0
               ? 1
               : poll(&pfd, 1, wait_ms(deadline));
  if (rc < 0) {
    if (errno != EINTR)
      conn_fail(a, TPU_CLIENT_CLOSED, "poll on connection to %s: %s", a->addr, strerror(errno));
    return;
  }
  step(a, rc > 0 ? pfd.revents : 0);
}

tpu_client_status_t tpu_client_async_wait(tpu_client_async_t *a, int timeout_ms,
                                          tpu_client_result_t **out) {
  if (out) *out = NULL;
  if (!a || !out) return a ? set_err(a, TPU_CLIENT_MISUSE, "no result pointer") : TPU_CLIENT_MISUSE;
  int tmo = resolve_timeout(a, timeout_ms);
  int64_t deadline = deadline_after(tmo);
  for (;;) {
    expire(a);
    tpu_client_result_t *r = queue_pop(a);
    if (r) {
      *out = r;
      return ok(a);
    }
    if (a->nlive == 0) {
      if (a->conn_status != TPU_CLIENT_OK) return set_err(a, a->conn_status, "%s", a->conn_msg);
      return set_err(a, TPU_CLIENT_MISUSE, "no request in flight to receive a result for");
    }
    if (tpu__now_ns() >= deadline)
      return set_err(a, TPU_CLIENT_TIMEOUT, "no response within %d ms", tmo);
    tpu__async_pump(a, deadline);
  }
}

bool tpu_client_async_connected(const tpu_client_async_t *a) {
  return a && a->state == ST_READY;
}

tpu_client_status_t tpu_client_async_status(const tpu_client_async_t *a) {
  return a ? a->conn_status : TPU_CLIENT_MISUSE;
}

size_t tpu_client_async_in_flight(const tpu_client_async_t *a) {
  return a ? a->nlive + a->nresults : 0;
}

size_t tpu_client_async_unsent(const tpu_client_async_t *a) {
  return a ? a->olen - a->osent : 0;
}

const char *tpu_client_async_errmsg(const tpu_client_async_t *a) {
  return a ? a->errmsg : "no connection handle (out of memory?)";
}

bool tpu__async_in_flight_id(const tpu_client_async_t *a, uint64_t id) {
  const pending_t *p = pend_find(a, id);
  return p && !p->abandoned;
}

/* ---- submitting ---- */

/* Tracks a request whose bytes are obuf[olen..olen+len): commits them, or fails with NOMEM and
 * leaves the output as it was. */
static tpu_client_status_t commit(tpu_client_async_t *a, pending_t *p, size_t len, uint64_t *id) {
  p->id = a->next_id;
  p->submitted = tpu__now_ns();
  p->deadline = p->timeout_ms > 0 ? p->submitted + (int64_t)p->timeout_ms * 1000000 : NO_DEADLINE;
  p->ostart = a->obase + a->olen;
  p->oend = p->ostart + len;
  if (pend_add(a, p) < 0) return set_err(a, TPU_CLIENT_NOMEM, "out of memory");
  a->olen += len;
  a->next_id++;
  if (id) *id = p->id;
  return ok(a);
}

static tpu_client_status_t submit_native(tpu_client_async_t *a, int method,
                                         const ProtobufCMessage *msg, const void *payload,
                                         size_t len, bool packed, int timeout_ms, uint64_t tag,
                                         bool held, uint64_t *id) {
  if (id) *id = 0;
  if (!a) return TPU_CLIENT_MISUSE;
  if (a->proto != TPU_CLIENT_PROTOCOL_NATIVE)
    return set_err(a, TPU_CLIENT_MISUSE,
                   "this connection speaks HTTP: use tpu_client_async_send_http()");
  const tpu_method_info_t *info = tpu_envelope_method_info(method);
  if (!info) return set_err(a, TPU_CLIENT_MISUSE, "unknown method %d", method);
  if (msg && msg->descriptor != info->request)
    return set_err(a, TPU_CLIENT_MISUSE, "%s takes a %s, not a %s", info->name,
                   info->request->name, msg->descriptor->name);
  if (packed && len && !payload)
    return set_err(a, TPU_CLIENT_MISUSE, "%s: %zu payload bytes but no pointer", info->name, len);
  if (a->conn_status != TPU_CLIENT_OK) return set_err(a, a->conn_status, "%s", a->conn_msg);

  int tmo = resolve_timeout(a, timeout_ms);
  tpu_envelope_request_t req = {
      .id = a->next_id,
      .method = method,
      .timeout_us = tmo > 0 ? (uint64_t)tmo * 1000 : 0,
      .payload_msg = packed ? NULL : msg,
      .payload = packed ? payload : NULL,
      .payload_len = packed ? len : 0,
  };
  const char *md[2] = {"authorization", a->authz};
  if (a->authz) {
    req.metadata = md;
    req.n_metadata = 1;
  }
  /* Encode straight into the output buffer; only committing makes the bytes part of it. */
  size_t need = 0;
  tpu_proto_error_t perr;
  if (out_reserve(a, 128 + (packed ? len : 0) + (a->authz ? strlen(a->authz) : 0)) < 0)
    return set_err(a, TPU_CLIENT_NOMEM, "out of memory");
  tpu_proto_status_t pst =
      tpu_envelope_encode_request(&req, a->obuf + a->olen, a->ocap - a->olen, &need, &perr);
  if (pst == TPU_PROTO_ENOSPC) {
    if (out_reserve(a, need) < 0) return set_err(a, TPU_CLIENT_NOMEM, "out of memory");
    pst = tpu_envelope_encode_request(&req, a->obuf + a->olen, a->ocap - a->olen, &need, &perr);
  }
  if (pst != TPU_PROTO_OK)
    return set_err(a, pst == TPU_PROTO_ENOMEM ? TPU_CLIENT_NOMEM : TPU_CLIENT_MISUSE,
                   "cannot encode %s request: %s", info->name, perr.msg);
  pending_t p = {.tag = tag, .method = method, .timeout_ms = tmo, .packed = packed,
                 .abandoned = held, .held = held};
  return commit(a, &p, need, id);
}

tpu_client_status_t tpu_client_async_send(tpu_client_async_t *a, int method,
                                          const ProtobufCMessage *request, int timeout_ms,
                                          uint64_t tag, uint64_t *id) {
  return submit_native(a, method, request, NULL, 0, false, timeout_ms, tag, false, id);
}

tpu_client_status_t tpu_client_async_send_packed(tpu_client_async_t *a, int method,
                                                 const void *payload, size_t len,
                                                 int timeout_ms, uint64_t tag, uint64_t *id) {
  return submit_native(a, method, NULL, payload, len, true, timeout_ms, tag, false, id);
}

tpu_client_status_t tpu__async_submit_held(tpu_client_async_t *a, int method,
                                           const ProtobufCMessage *request, int timeout_ms,
                                           uint64_t *id) {
  return submit_native(a, method, request, NULL, 0, false, timeout_ms, 0, true, id);
}

/* Whether s is non-empty and free of spaces and control characters (a method or a target). */
static bool http_token_ok(const char *s) {
  if (!s || !*s) return false;
  for (; *s; s++)
    if ((unsigned char)*s <= ' ' || (unsigned char)*s == 0x7f) return false;
  return true;
}

tpu_client_status_t tpu_client_async_send_http(tpu_client_async_t *a, const char *method,
                                               const char *path, const char *content_type,
                                               const void *body, size_t len, int timeout_ms,
                                               uint64_t tag, uint64_t *id) {
  if (id) *id = 0;
  if (!a) return TPU_CLIENT_MISUSE;
  if (a->proto != TPU_CLIENT_PROTOCOL_HTTP)
    return set_err(a, TPU_CLIENT_MISUSE, "this connection speaks the native protocol: use "
                   "tpu_client_async_send() or tpu_client_async_send_packed()");
  if (!http_token_ok(method))
    return set_err(a, TPU_CLIENT_MISUSE, "HTTP method \"%.40s\": expected a token such as GET "
                   "or POST (no spaces or control characters)", method ? method : "(null)");
  if (!http_token_ok(path) || (path[0] != '/' && strcmp(path, "*") != 0))
    return set_err(a, TPU_CLIENT_MISUSE, "HTTP path \"%.100s\": expected /... without spaces "
                   "or control characters", path ? path : "(null)");
  if (content_type)
    for (const char *c = content_type; *c; c++)
      if ((unsigned char)*c < ' ' || (unsigned char)*c == 0x7f)
        return set_err(a, TPU_CLIENT_MISUSE, "HTTP content type has a control character");
  if (len && !body) return set_err(a, TPU_CLIENT_MISUSE, "%zu body bytes but no pointer", len);
  if (a->conn_status != TPU_CLIENT_OK) return set_err(a, a->conn_status, "%s", a->conn_msg);

  bool with_len = body || len || !strcmp(method, "POST") || !strcmp(method, "PUT") ||
                  !strcmp(method, "PATCH");
  /* The head is assembled by copying (no printf: a load generator sends one per request). */
  char clen[24];
  size_t cl = 0;
  if (with_len) { /* decimal digits of len, most significant first */
    char tmp[24];
    size_t v = len, k = 0;
    do {
      tmp[k++] = (char)('0' + v % 10);
      v /= 10;
    } while (v);
    while (k) clen[cl++] = tmp[--k];
  }
  const char *parts[16];
  size_t lens[16], np = 0, hn = 0;
#define PART(str, n) (parts[np] = (str), lens[np] = (n), hn += lens[np++])
#define LIT(str) PART(str, sizeof str - 1)
  PART(method, strlen(method));
  LIT(" ");
  PART(path, strlen(path));
  LIT(" HTTP/1.1\r\nHost: ");
  PART(a->hosthdr, strlen(a->hosthdr));
  LIT("\r\n");
  if (a->authz) {
    LIT("Authorization: ");
    PART(a->authz, strlen(a->authz));
    LIT("\r\n");
  }
  if (content_type) {
    LIT("Content-Type: ");
    PART(content_type, strlen(content_type));
    LIT("\r\n");
  }
  if (with_len) {
    LIT("Content-Length: ");
    PART(clen, cl);
    LIT("\r\n");
  }
  LIT("\r\n");
#undef LIT
#undef PART
  if (out_reserve(a, hn + len) < 0) return set_err(a, TPU_CLIENT_NOMEM, "out of memory");
  uint8_t *w = a->obuf + a->olen;
  for (size_t i = 0; i < np; i++) {
    memcpy(w, parts[i], lens[i]);
    w += lens[i];
  }
  if (len) memcpy(w, body, len);
  int tmo = resolve_timeout(a, timeout_ms);
  pending_t p = {.tag = tag, .method = 0, .timeout_ms = tmo, .head = !strcmp(method, "HEAD")};
  return commit(a, &p, hn + len, id);
}

/* ---- the blocking send (see tpuclient_int.h) ---- */

tpu_client_status_t tpu__async_send_wait(tpu_client_async_t *a, uint64_t id) {
  pending_t *p = pend_find(a, id);
  if (!p || !p->held) return set_err(a, TPU_CLIENT_MISUSE, "request %" PRIu64 " is not held", id);
  int64_t deadline = p->deadline;
  int tmo = p->timeout_ms;
  uint64_t ostart = p->ostart, oend = p->oend;
  while (sent_pos(a) < oend) {
    if (a->state == ST_DEAD) return set_err(a, a->conn_status, "%s", a->conn_msg);
    if (a->state == ST_READY && !a->wblocked && flush_out(a) < 0) continue;
    if (sent_pos(a) >= oend) break;
    int ms = wait_ms(deadline);
    if (ms == 0) {
      if (sent_pos(a) <= ostart) { /* not a byte of it left: withdraw it, keep the connection */
        p = pend_find(a, id);
        if (p) {
          p->cut = true;
          sweep_cut(a);
        }
        if (a->next_id == id + 1) a->next_id = id; /* ids stay dense for what was sent */
        return set_err(a, TPU_CLIENT_TIMEOUT, "server %s took no request bytes within %d ms",
                       a->addr, tmo);
      }
      conn_fail(a, TPU_CLIENT_TIMEOUT, "timed out after %d ms with %" PRIu64 " of %" PRIu64
                " request bytes sent; connection to %s closed", tmo, sent_pos(a) - ostart,
                oend - ostart, a->addr);
      return set_err(a, TPU_CLIENT_TIMEOUT, "%s", a->conn_msg);
    }
    /* Wait for room, and read answers meanwhile (see tpuclient_int.h). */
    struct pollfd pfd = {.fd = a->fd, .events = (short)(tpu_client_async_events(a) | POLLIN)};
    int rc = poll(&pfd, 1, ms);
    if (rc < 0 && errno != EINTR) {
      conn_fail(a, TPU_CLIENT_CLOSED, "poll on connection to %s: %s", a->addr, strerror(errno));
      continue;
    }
    if (rc > 0) step(a, pfd.revents);
  }
  p = pend_find(a, id);
  if (!p) { /* answered before it was all sent: only a broken server does that */
    conn_fail(a, TPU_CLIENT_PROTOCOL, "server %s answered request %" PRIu64 " before it was sent",
              a->addr, id);
    return set_err(a, a->conn_status, "%s", a->conn_msg);
  }
  p->held = false;
  p->abandoned = false;
  a->nlive++;
  if (p->deadline != NO_DEADLINE) a->ntimed++;
  return ok(a);
}
