/*
 * test_tpuclient_async.c - libtpuclient's event-loop-driven connections (tpu_client_async_t)
 * against a scripted peer on a loopback socket, and the HTTP answer-head parser from bytes.
 *
 * DESIGN
 * Everything runs in the test's one thread, which is what the async API allows: the test
 * listens on 127.0.0.1:<free port>, starts an async connect, accepts the connection itself, and
 * then plays both sides in turn, stepping the client only when it chooses. So the interleavings
 * are exact: a test can hand the client an answer one byte at a time and check after each byte
 * that nothing completed early, or close the socket halfway through a frame. The peer reads
 * requests with proto/'s own decoders (native) or a few lines of HTTP framing, and writes
 * answers with tpu_envelope or as literal bytes. Blocking-API behaviour is test_tpuclient.c's.
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tpu_envelope.h"
#include "tpu_test.h"
#include "tpuclient.h"
#include "tpuclient_int.h"

/* ---- the peer ---- */

typedef struct {
  int lfd, port, fd;
  tpu_frame_decoder_t *dec;
  uint8_t buf[1 << 16];
  size_t off, len;
} peer_t;

static void peer_listen(peer_t *p) {
  memset(p, 0, sizeof *p);
  p->fd = -1;
  tpu_frame_decoder_create(0, &p->dec);
  p->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  CU_ASSERT_EQUAL_FATAL(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  CU_ASSERT_EQUAL_FATAL(listen(p->lfd, 4), 0);
  getsockname(p->lfd, (struct sockaddr *)&sa, &sl);
  p->port = ntohs(sa.sin_port);
}

/* Accepts the client's connection (the kernel completed it already; this just picks it up). */
static void peer_accept(peer_t *p) {
  struct pollfd pfd = {.fd = p->lfd, .events = POLLIN};
  CU_ASSERT_EQUAL_FATAL(poll(&pfd, 1, 2000), 1);
  p->fd = accept(p->lfd, NULL, NULL);
  CU_ASSERT_TRUE_FATAL(p->fd >= 0);
}

static void peer_close(peer_t *p) {
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
}

static void peer_free(peer_t *p) {
  peer_close(p);
  close(p->lfd);
  tpu_frame_decoder_free(p->dec);
}

/* Reads the next request envelope (waiting up to 2 s for bytes), or NULL. */
static Tpud__RequestEnvelope *peer_read_req(peer_t *p) {
  for (;;) {
    if (p->off < p->len) {
      size_t used = 0;
      tpu_frame_t frame;
      tpu_proto_status_t st =
          tpu_frame_decoder_feed(p->dec, p->buf + p->off, p->len - p->off, &used, &frame, NULL);
      p->off += used;
      if (st == TPU_PROTO_OK) {
        Tpud__RequestEnvelope *env = NULL;
        tpu_envelope_decode_request(frame.data, frame.len, SIZE_MAX, &env, NULL);
        return env;
      }
      if (st != TPU_PROTO_EAGAIN) return NULL;
    }
    struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
    if (poll(&pfd, 1, 2000) != 1) return NULL;
    ssize_t n = recv(p->fd, p->buf, sizeof p->buf, 0);
    if (n <= 0) return NULL;
    p->off = 0;
    p->len = (size_t)n;
  }
}

/* Whether the peer has bytes to read within ms. */
static bool peer_readable(peer_t *p, int ms) {
  struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
  return poll(&pfd, 1, ms) == 1;
}

static void peer_write(peer_t *p, const void *data, size_t n) {
  const uint8_t *d = data;
  while (n) {
    ssize_t w = send(p->fd, d, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    d += w;
    n -= (size_t)w;
  }
}

/* A response frame, malloc'd. */
static uint8_t *frame_of(uint64_t id, int code, const char *msg, const ProtobufCMessage *payload,
                         size_t *len) {
  tpu_envelope_response_t r = {.id = id, .code = code, .message = msg, .payload_msg = payload};
  uint8_t *frame = NULL;
  CU_ASSERT_EQUAL(tpu_envelope_encode_response_alloc(&r, &frame, len, NULL), TPU_PROTO_OK);
  return frame;
}

static void answer_live(peer_t *p, uint64_t id) {
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = 1;
  size_t n;
  uint8_t *f = frame_of(id, 0, NULL, &r.base, &n);
  peer_write(p, f, n);
  free(f);
}

/* ---- the client side ---- */

static tpu_client_async_t *connect_to(peer_t *p, tpu_client_protocol_t proto) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", p->port);
  tpu_client_async_t *a = NULL;
  tpu_client_status_t st = tpu_client_async_connect(addr, NULL, proto, &a);
  if (st != TPU_CLIENT_OK) printf("\n  connect: %s\n", tpu_client_async_errmsg(a));
  CU_ASSERT_EQUAL_FATAL(st, TPU_CLIENT_OK);
  CU_ASSERT_TRUE(tpu_client_async_fd(a) >= 0);
  return a;
}

/* One poll of up to ms for what the connection wants, then a step. Returns the step's status. */
static tpu_client_status_t drive(tpu_client_async_t *a, int ms) {
  struct pollfd pfd = {.fd = tpu_client_async_fd(a), .events = (short)tpu_client_async_events(a)};
  int t = tpu_client_async_timeout(a);
  if (t >= 0 && t < ms) ms = t;
  int rc = pfd.fd >= 0 ? poll(&pfd, 1, ms) : 0;
  return tpu_client_async_step(a, rc > 0 ? pfd.revents : 0);
}

/* Steps until the connection is up and has written everything queued (up to 2 s). */
static void settle(tpu_client_async_t *a) {
  for (int i = 0; i < 200; i++) {
    if (tpu_client_async_connected(a) && tpu_client_async_unsent(a) == 0) return;
    if (drive(a, 10) != TPU_CLIENT_OK) break;
  }
  CU_ASSERT_TRUE(tpu_client_async_connected(a));
  CU_ASSERT_EQUAL(tpu_client_async_unsent(a), 0);
}

/* Steps until a result is queued (up to ms) and returns it, or NULL. */
static tpu_client_result_t *next_within(tpu_client_async_t *a, int ms) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    tpu_client_result_t *r = tpu_client_async_next(a);
    if (r) return r;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long el = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    if (el >= ms) return NULL;
    drive(a, 10);
  }
}

static tpu_client_status_t send_model_ready(tpu_client_async_t *a, const char *name,
                                            uint64_t tag, uint64_t *id) {
  Inference__ModelReadyRequest req = INFERENCE__MODEL_READY_REQUEST__INIT;
  req.name = (char *)name;
  return tpu_client_async_send(a, TPUD__METHOD__MODEL_READY, &req.base, 0, tag, id);
}

/* ---- native ---- */

/* Three requests queued before the connection is even up (a message, a packed one, an empty
 * one), answered out of order in one write: every result carries its own id, tag and answer. */
static void test_pipelined_native(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
  uint64_t id[3];
  CU_ASSERT_EQUAL(send_model_ready(a, "a", 11, &id[0]), TPU_CLIENT_OK);
  Inference__ModelReadyRequest rb = INFERENCE__MODEL_READY_REQUEST__INIT;
  rb.name = "b";
  uint8_t packed[64];
  size_t plen = protobuf_c_message_pack(&rb.base, packed);
  CU_ASSERT_EQUAL(tpu_client_async_send_packed(a, TPUD__METHOD__MODEL_READY, packed, plen, 0, 22,
                                               &id[1]),
                  TPU_CLIENT_OK);
  memset(packed, 0, sizeof packed); /* copied at submit: the caller's buffer is free again */
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 33, &id[2]),
                  TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(id[0], 1);
  CU_ASSERT_EQUAL(id[2], 3);
  CU_ASSERT_EQUAL(tpu_client_async_in_flight(a), 3);
  CU_ASSERT_TRUE(tpu_client_async_unsent(a) > 0); /* nothing leaves before a step */
  peer_accept(&p);
  settle(a);
  CU_ASSERT_EQUAL(tpu_client_async_events(a), POLLIN); /* all written: only reading is wanted */

  Tpud__RequestEnvelope *env[3];
  char names[3][8] = {"", "", ""};
  for (int i = 0; i < 3; i++) {
    env[i] = peer_read_req(&p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(env[i]);
    CU_ASSERT_EQUAL(env[i]->id, id[i]);
    CU_ASSERT_EQUAL(env[i]->timeout_us, 30000000); /* the default deadline travels */
    if (env[i]->method == TPUD__METHOD__MODEL_READY) {
      Inference__ModelReadyRequest *q =
          inference__model_ready_request__unpack(NULL, env[i]->payload.len, env[i]->payload.data);
      CU_ASSERT_PTR_NOT_NULL_FATAL(q);
      snprintf(names[i], sizeof names[i], "%s", q->name);
      inference__model_ready_request__free_unpacked(q, NULL);
    }
  }
  CU_ASSERT_STRING_EQUAL(names[0], "a");
  CU_ASSERT_STRING_EQUAL(names[1], "b");
  CU_ASSERT_EQUAL(env[2]->method, TPUD__METHOD__SERVER_LIVE);
  /* Answers 3, 1, 2, all in one write. */
  uint8_t all[512];
  size_t n = 0, fl;
  Inference__ServerLiveResponse live = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  live.live = 1;
  Inference__ModelReadyResponse no = INFERENCE__MODEL_READY_RESPONSE__INIT, yes = no;
  yes.ready = 1;
  const ProtobufCMessage *payloads[3] = {&live.base, &no.base, &yes.base};
  uint64_t order[3] = {id[2], id[0], id[1]};
  for (int i = 0; i < 3; i++) {
    uint8_t *f = frame_of(order[i], 0, NULL, payloads[i], &fl);
    memcpy(all + n, f, fl);
    n += fl;
    free(f);
  }
  peer_write(&p, all, n);

  uint64_t tags[3] = {33, 11, 22};
  for (int i = 0; i < 3; i++) {
    tpu_client_result_t *r = next_within(a, 2000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tpu_client_result_id(r), order[i]);
    CU_ASSERT_EQUAL(tpu_client_result_tag(r), tags[i]);
    CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_OK);
    CU_ASSERT_TRUE(tpu_client_result_answered(r));
    CU_ASSERT_EQUAL(tpu_client_result_http_status(r), 0);
    int64_t t0 = 0, t1 = 0;
    tpu_client_result_times(r, &t0, &t1);
    CU_ASSERT_TRUE(t0 > 0 && t1 >= t0);
    size_t len = 99;
    const void *payload = tpu_client_result_payload(r, &len);
    if (i == 2) { /* packed in, packed out */
      CU_ASSERT_PTR_NULL(tpu_client_result_response(r));
      CU_ASSERT_PTR_NOT_NULL_FATAL(payload);
      Inference__ModelReadyResponse *m =
          inference__model_ready_response__unpack(NULL, len, payload);
      CU_ASSERT_PTR_NOT_NULL_FATAL(m);
      CU_ASSERT_TRUE(m->ready);
      inference__model_ready_response__free_unpacked(m, NULL);
    } else {
      CU_ASSERT_PTR_NULL(payload);
      CU_ASSERT_EQUAL(len, 0);
      const ProtobufCMessage *m = tpu_client_result_response(r);
      CU_ASSERT_PTR_NOT_NULL_FATAL(m);
      CU_ASSERT_EQUAL(m->descriptor, i == 0 ? &inference__server_live_response__descriptor
                                            : &inference__model_ready_response__descriptor);
      if (i == 1) CU_ASSERT_FALSE(((const Inference__ModelReadyResponse *)m)->ready);
    }
    tpu_client_result_free(r);
  }
  CU_ASSERT_PTR_NULL(tpu_client_async_next(a));
  CU_ASSERT_EQUAL(tpu_client_async_in_flight(a), 0);
  CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_OK);
  for (int i = 0; i < 3; i++) tpu_envelope_request_free(env[i]);
  tpu_client_async_free(a);
  peer_free(&p);
}

/* An answer handed over one byte at a time completes with its last byte, not before. */
static void test_one_byte_at_a_time(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
  peer_accept(&p);
  uint64_t id;
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 0, &id),
                  TPU_CLIENT_OK);
  settle(a);
  Tpud__RequestEnvelope *env = peer_read_req(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(env);
  Inference__ServerLiveResponse live = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  live.live = 1;
  size_t n;
  uint8_t *f = frame_of(env->id, 0, NULL, &live.base, &n);
  int early = 0;
  for (size_t i = 0; i < n; i++) {
    peer_write(&p, f + i, 1);
    struct pollfd pfd = {.fd = tpu_client_async_fd(a), .events = POLLIN};
    CU_ASSERT_EQUAL(poll(&pfd, 1, 2000), 1);
    CU_ASSERT_EQUAL(tpu_client_async_step(a, pfd.revents), TPU_CLIENT_OK);
    if (i + 1 < n && tpu_client_async_in_flight(a) && tpu_client_async_next(a)) early++;
  }
  CU_ASSERT_EQUAL(early, 0);
  tpu_client_result_t *r = tpu_client_async_next(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id);
  CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_OK);
  const Inference__ServerLiveResponse *m =
      (const Inference__ServerLiveResponse *)tpu_client_result_response(r);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_TRUE(m->live);
  tpu_client_result_free(r);
  free(f);
  tpu_envelope_request_free(env);
  tpu_client_async_free(a);
  peer_free(&p);
}

/* The server closes halfway through an answer: every request in flight completes with CLOSED
 * and a message that says so, and the connection stays gone. */
static void test_closed_mid_answer(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
  peer_accept(&p);
  uint64_t id1, id2;
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 1, &id1),
                  TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_READY, NULL, 0, 2, &id2),
                  TPU_CLIENT_OK);
  settle(a);
  Tpud__RequestEnvelope *e1 = peer_read_req(&p), *e2 = peer_read_req(&p);
  CU_ASSERT_PTR_NOT_NULL(e1);
  CU_ASSERT_PTR_NOT_NULL(e2);
  Inference__ServerLiveResponse live = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  size_t n;
  uint8_t *f = frame_of(id1, 0, NULL, &live.base, &n);
  peer_write(&p, f, n / 2);
  free(f);
  peer_close(&p);
  tpu_client_status_t st = TPU_CLIENT_OK;
  for (int i = 0; i < 100 && st == TPU_CLIENT_OK; i++) st = drive(a, 20);
  CU_ASSERT_EQUAL(st, TPU_CLIENT_CLOSED);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(a), "in the middle of a response"));
  for (int i = 0; i < 2; i++) {
    tpu_client_result_t *r = tpu_client_async_next(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tpu_client_result_id(r), i ? id2 : id1);
    CU_ASSERT_EQUAL(tpu_client_result_tag(r), (uint64_t)(i + 1));
    CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_CLOSED);
    CU_ASSERT_FALSE(tpu_client_result_answered(r));
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_result_error(r), "in the middle of a response"));
    tpu_client_result_free(r);
  }
  CU_ASSERT_PTR_NULL(tpu_client_async_next(a));
  CU_ASSERT_EQUAL(tpu_client_async_fd(a), -1);
  CU_ASSERT_EQUAL(tpu_client_async_events(a), 0);
  CU_ASSERT_EQUAL(tpu_client_async_timeout(a), -1);
  CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_CLOSED);
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 0, NULL),
                  TPU_CLIENT_CLOSED);
  tpu_client_result_t *r = (tpu_client_result_t *)1;
  CU_ASSERT_EQUAL(tpu_client_async_wait(a, 10, &r), TPU_CLIENT_CLOSED);
  CU_ASSERT_PTR_NULL(r);
  tpu_envelope_request_free(e1);
  tpu_envelope_request_free(e2);
  tpu_client_async_free(a);
  peer_free(&p);
}

/* An answer to an id never sent is a protocol error for the whole connection. */
static void test_unknown_id(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
  peer_accept(&p);
  uint64_t id;
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 0, &id),
                  TPU_CLIENT_OK);
  settle(a);
  Tpud__RequestEnvelope *env = peer_read_req(&p);
  CU_ASSERT_PTR_NOT_NULL(env);
  answer_live(&p, id + 1000);
  tpu_client_result_t *r = next_within(a, 2000);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id);
  CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_PROTOCOL);
  CU_ASSERT_FALSE(tpu_client_result_answered(r));
  CU_ASSERT_PTR_NOT_NULL(
      strstr(tpu_client_result_error(r), "request id 1001, which is not in flight"));
  tpu_client_result_free(r);
  CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_PROTOCOL);
  tpu_envelope_request_free(env);
  tpu_client_async_free(a);
  peer_free(&p);
}

/* The server ends the connection with a code (id 0): every request fails with that code. */
static void test_connection_level_error(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
  peer_accept(&p);
  for (int i = 0; i < 2; i++)
    CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 0, NULL),
                    TPU_CLIENT_OK);
  settle(a);
  size_t n;
  uint8_t *f = frame_of(0, TPUD__STATUS_CODE__RESOURCE_EXHAUSTED, "too many connections", NULL, &n);
  peer_write(&p, f, n);
  free(f);
  for (int i = 0; i < 2; i++) {
    tpu_client_result_t *r = next_within(a, 2000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_RESOURCE_EXHAUSTED);
    CU_ASSERT_FALSE(tpu_client_result_answered(r));
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_result_error(r), "too many connections"));
    tpu_client_result_free(r);
  }
  tpu_client_async_free(a);
  peer_free(&p);
}

/* Timeouts: one that expires before a byte left is withdrawn (the server never sees it); one
 * that expires after it was sent completes locally and its late answer is dropped. */
static void test_timeouts(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
  peer_accept(&p);
  settle(a);
  CU_ASSERT_EQUAL(tpu_client_async_timeout(a), -1); /* nothing timed: no wake-up needed */
  uint64_t id1, id2, id3;
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 40, 0, &id1),
                  TPU_CLIENT_OK);
  int t = tpu_client_async_timeout(a);
  CU_ASSERT_TRUE(t > 0 && t <= 40);
  usleep(60000);
  CU_ASSERT_EQUAL(tpu_client_async_timeout(a), 0);
  CU_ASSERT_EQUAL(tpu_client_async_step(a, 0), TPU_CLIENT_OK);
  tpu_client_result_t *r = tpu_client_async_next(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id1);
  CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_TIMEOUT);
  CU_ASSERT_FALSE(tpu_client_result_answered(r));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_result_error(r), "within 40 ms"));
  tpu_client_result_free(r);
  CU_ASSERT_EQUAL(tpu_client_async_unsent(a), 0); /* withdrawn, not written */
  CU_ASSERT_FALSE(peer_readable(&p, 50));
  /* Sent, then timed out: a local TIMEOUT, the late answer dropped, the connection fine. */
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 40, 0, &id2),
                  TPU_CLIENT_OK);
  settle(a);
  Tpud__RequestEnvelope *e2 = peer_read_req(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e2);
  CU_ASSERT_EQUAL(e2->id, id2);
  CU_ASSERT_EQUAL(e2->timeout_us, 40000);
  CU_ASSERT_EQUAL(tpu_client_async_wait(a, 2000, &r), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id2);
  CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_TIMEOUT);
  tpu_client_result_free(r);
  CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 7, &id3),
                  TPU_CLIENT_OK);
  settle(a);
  Tpud__RequestEnvelope *e3 = peer_read_req(&p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e3);
  answer_live(&p, id2); /* late */
  answer_live(&p, id3);
  r = next_within(a, 2000);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id3);
  CU_ASSERT_EQUAL(tpu_client_result_tag(r), 7);
  CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_OK);
  tpu_client_result_free(r);
  CU_ASSERT_PTR_NULL(tpu_client_async_next(a));
  CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_OK);
  tpu_envelope_request_free(e2);
  tpu_envelope_request_free(e3);
  tpu_client_async_free(a);
  peer_free(&p);
}

/* ---- HTTP ---- */

/* Reads from the peer until `want` complete requests (head + Content-Length body) are in buf. */
static size_t peer_read_http(peer_t *p, char *buf, size_t cap, int want) {
  size_t len = 0;
  for (;;) {
    int complete = 0;
    size_t off = 0;
    for (;;) {
      char *end = memmem(buf + off, len - off, "\r\n\r\n", 4);
      if (!end) break;
      size_t head = (size_t)(end - (buf + off)) + 4;
      char save = buf[off + head - 1];
      buf[off + head - 1] = '\0';
      const char *cl = strcasestr(buf + off, "\r\nContent-Length:");
      size_t blen = cl ? (size_t)atol(cl + 17) : 0;
      buf[off + head - 1] = save;
      if (len - off < head + blen) break;
      off += head + blen;
      complete++;
    }
    if (complete >= want || len == cap) return len;
    if (!peer_readable(p, 2000)) return len;
    ssize_t n = recv(p->fd, buf + len, cap - len, 0);
    if (n <= 0) return len;
    len += (size_t)n;
  }
}

/* Three pipelined requests, their bytes checked; an interim 100, a 200, a 404 with a JSON error
 * and a 200 with Connection: close, all in one write; answers in order, then the close. */
static void test_http_pipelined(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_HTTP);
  peer_accept(&p);
  const char *body = "{\"inputs\":[]}";
  uint64_t id[3];
  CU_ASSERT_EQUAL(tpu_client_async_send_http(a, "POST", "/v2/models/digits/infer",
                                             "application/json", body, strlen(body), 0, 1, &id[0]),
                  TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_async_send_http(a, "GET", "/v2/models/x", NULL, NULL, 0, 0, 2, &id[1]),
                  TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_async_send_http(a, "POST", "/v2/repository/index", NULL, NULL, 0, 0,
                                             3, &id[2]),
                  TPU_CLIENT_OK);
  settle(a);
  char req[4096];
  size_t n = peer_read_http(&p, req, sizeof req - 1, 3);
  req[n] = '\0';
  char expect[1024];
  snprintf(expect, sizeof expect,
           "POST /v2/models/digits/infer HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
           "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s"
           "GET /v2/models/x HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
           "POST /v2/repository/index HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 0\r\n\r\n",
           p.port, strlen(body), body, p.port, p.port);
  CU_ASSERT_STRING_EQUAL(req, expect);
  const char *err404 = "{\"error\":\"model 'x' is not known\"}";
  char answers[1024];
  int an = snprintf(answers, sizeof answers,
                    "HTTP/1.1 100 Continue\r\n\r\n"
                    "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n%s"
                    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                    strlen(err404), err404);
  peer_write(&p, answers, (size_t)an);
  int want_http[3] = {200, 404, 200};
  tpu_client_status_t want_st[3] = {TPU_CLIENT_OK, TPU_CLIENT_NOT_FOUND, TPU_CLIENT_OK};
  const char *want_body[3] = {"{}", "{\"error\":\"model 'x' is not known\"}", "hello"};
  for (int i = 0; i < 3; i++) {
    tpu_client_result_t *r = next_within(a, 2000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tpu_client_result_id(r), id[i]);
    CU_ASSERT_EQUAL(tpu_client_result_tag(r), (uint64_t)(i + 1));
    CU_ASSERT_TRUE(tpu_client_result_answered(r));
    CU_ASSERT_EQUAL(tpu_client_result_http_status(r), want_http[i]);
    CU_ASSERT_EQUAL(tpu_client_result_status(r), want_st[i]);
    size_t blen;
    const char *b = tpu_client_result_payload(r, &blen);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(blen, strlen(want_body[i]));
    CU_ASSERT_STRING_EQUAL(b, want_body[i]); /* NUL-terminated */
    if (i == 1)
      CU_ASSERT_STRING_EQUAL(tpu_client_result_error(r), "HTTP 404: model 'x' is not known");
    tpu_client_result_free(r);
  }
  CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_CLOSED);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(a), "Connection: close"));
  CU_ASSERT_EQUAL(tpu_client_async_send_http(a, "GET", "/", NULL, NULL, 0, 0, 0, NULL),
                  TPU_CLIENT_CLOSED);
  tpu_client_async_free(a);
  peer_free(&p);
}

/* An HTTP answer one byte at a time, then the next request on the same connection. */
static void test_http_one_byte_at_a_time(void) {
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_HTTP);
  peer_accept(&p);
  for (int round = 0; round < 2; round++) {
    CU_ASSERT_EQUAL(tpu_client_async_send_http(a, "GET", "/v2/health/ready", NULL, NULL, 0, 0, 0,
                                               NULL),
                    TPU_CLIENT_OK);
    settle(a);
    char req[1024];
    CU_ASSERT_TRUE(peer_read_http(&p, req, sizeof req, 1) > 0);
    static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n{\"ready\":true}";
    int early = 0;
    for (size_t i = 0; i + 1 < sizeof ans; i++) {
      peer_write(&p, ans + i, 1);
      struct pollfd pfd = {.fd = tpu_client_async_fd(a), .events = POLLIN};
      CU_ASSERT_EQUAL(poll(&pfd, 1, 2000), 1);
      CU_ASSERT_EQUAL(tpu_client_async_step(a, pfd.revents), TPU_CLIENT_OK);
      if (i + 2 < sizeof ans && tpu_client_async_next(a)) early++;
    }
    CU_ASSERT_EQUAL(early, 0);
    tpu_client_result_t *r = tpu_client_async_next(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tpu_client_result_http_status(r), 200);
    CU_ASSERT_STRING_EQUAL(tpu_client_result_payload(r, NULL), "{\"ready\":true}");
    tpu_client_result_free(r);
  }
  CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_OK);
  tpu_client_async_free(a);
  peer_free(&p);
}

/* Answers the client cannot frame end the connection with PROTOCOL and a reason. */
static void test_http_bad_answers(void) {
  static const struct {
    const char *bytes;
    const char *why;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
       "Transfer-Encoding is not supported"},
      {"HTTP/1.1 200 OK\r\n\r\n", "no Content-Length"},
      {"SSH-2.0-OpenSSH_9.6\r\n", "not an HTTP answer"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
       "two Content-Length fields that differ"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    peer_t p;
    peer_listen(&p);
    tpu_client_async_t *a = connect_to(&p, TPU_CLIENT_PROTOCOL_HTTP);
    peer_accept(&p);
    CU_ASSERT_EQUAL(tpu_client_async_send_http(a, "GET", "/", NULL, NULL, 0, 0, 0, NULL),
                    TPU_CLIENT_OK);
    settle(a);
    char req[1024];
    peer_read_http(&p, req, sizeof req, 1);
    peer_write(&p, cases[k].bytes, strlen(cases[k].bytes));
    tpu_client_result_t *r = next_within(a, 2000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_PROTOCOL);
    if (!strstr(tpu_client_result_error(r), cases[k].why))
      printf("\n  case %zu: %s\n", k, tpu_client_result_error(r));
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_result_error(r), cases[k].why));
    tpu_client_result_free(r);
    CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_PROTOCOL);
    tpu_client_async_free(a);
    peer_free(&p);
  }
}

/* The head parser from bytes: framing facts, split input, and the errors. */
static void test_http_head_parser(void) {
  tpu__http_head_t h;
  char err[200];
  size_t sc = 0;
  const char *ok = "HTTP/1.1 503 Service Unavailable\r\nCONTENT-LENGTH:  17 \r\n"
                   "Connection: Keep-Alive, Close\r\nX-Other: a:b\r\n\r\nbody";
  CU_ASSERT_EQUAL(tpu__http_parse_head(ok, strlen(ok), &sc, &h, err, sizeof err), 1);
  CU_ASSERT_EQUAL(h.status, 503);
  CU_ASSERT_EQUAL(h.minor, 1);
  CU_ASSERT_EQUAL(h.content_length, 17);
  CU_ASSERT_TRUE(h.close);
  CU_ASSERT_FALSE(h.chunked);
  CU_ASSERT_EQUAL(h.head_len, strlen(ok) - 4);
  /* Fed in every split: incomplete until the blank line is all there, then the same answer. */
  size_t full = strlen(ok) - 4;
  for (size_t cut = 0; cut < full; cut++) {
    sc = 0;
    int rc = tpu__http_parse_head(ok, cut, &sc, &h, err, sizeof err);
    if (rc != 0) printf("\n  cut %zu: rc %d (%s)\n", cut, rc, err);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(tpu__http_parse_head(ok, full, &sc, &h, err, sizeof err), 1);
    CU_ASSERT_EQUAL(h.content_length, 17);
  }
  /* HTTP/1.0 closes unless asked to keep alive; a bare status line with no reason is fine. */
  const char *old = "HTTP/1.0 200\r\n\r\n";
  const char *ka = "HTTP/1.0 204 No\r\nConnection: keep-alive\r\n\r\n";
  sc = 0;
  CU_ASSERT_EQUAL(tpu__http_parse_head(old, strlen(old), &sc, &h, err, sizeof err), 1);
  CU_ASSERT_TRUE(h.close);
  CU_ASSERT_EQUAL(h.content_length, -1);
  sc = 0;
  CU_ASSERT_EQUAL(tpu__http_parse_head(ka, strlen(ka), &sc, &h, err, sizeof err), 1);
  CU_ASSERT_FALSE(h.close);
  const char *bad[] = {
      "HTTP/1.1 20 OK\r\n\r\n",         "HTTP/2 200 OK\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
      "HTTP/1.1 200 OK\r\n folded\r\n\r\n", "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
      "HTTP/1.1 200 OK\r\nA\rB: c\r\n\r\n", "HTTP/1.1 600 Odd\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sc = 0;
    err[0] = '\0';
    int rc = tpu__http_parse_head(bad[i], strlen(bad[i]), &sc, &h, err, sizeof err);
    if (rc != -1) printf("\n  bad[%zu] accepted\n", i);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_TRUE(strlen(err) > 10);
  }
  CU_ASSERT_EQUAL(tpu__http_status_code(200), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu__http_status_code(404), TPU_CLIENT_NOT_FOUND);
  CU_ASSERT_EQUAL(tpu__http_status_code(503), TPU_CLIENT_UNAVAILABLE);
  CU_ASSERT_EQUAL(tpu__http_status_code(504), TPU_CLIENT_DEADLINE_EXCEEDED);
  CU_ASSERT_EQUAL(tpu__http_status_code(418), TPU_CLIENT_UNKNOWN);
}

/* ---- misuse and connect failures ---- */

static void test_misuse(void) {
  /* NULL handles. */
  CU_ASSERT_EQUAL(tpu_client_async_fd(NULL), -1);
  CU_ASSERT_EQUAL(tpu_client_async_events(NULL), 0);
  CU_ASSERT_EQUAL(tpu_client_async_timeout(NULL), -1);
  CU_ASSERT_EQUAL(tpu_client_async_step(NULL, POLLIN), TPU_CLIENT_MISUSE);
  CU_ASSERT_PTR_NULL(tpu_client_async_next(NULL));
  CU_ASSERT_EQUAL(tpu_client_async_send(NULL, TPUD__METHOD__SERVER_LIVE, NULL, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_STRING_NOT_EQUAL(tpu_client_async_errmsg(NULL), "");
  CU_ASSERT_FALSE(tpu_client_async_connected(NULL));
  tpu_client_async_free(NULL);
  CU_ASSERT_EQUAL(tpu_client_async_connect("127.0.0.1:1", NULL, TPU_CLIENT_PROTOCOL_NATIVE, NULL),
                  TPU_CLIENT_MISUSE);

  tpu_client_async_t *a = NULL;
  CU_ASSERT_EQUAL(tpu_client_async_connect("127.0.0.1:1", NULL, (tpu_client_protocol_t)7, &a),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(a), "unknown protocol 7"));
  tpu_client_async_free(a);
  CU_ASSERT_EQUAL(tpu_client_async_connect("[::1", NULL, TPU_CLIENT_PROTOCOL_HTTP, &a),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(a), "is not HOST:PORT"));
  CU_ASSERT_EQUAL(tpu_client_async_status(a), TPU_CLIENT_CONNECT_FAILED);
  tpu_client_async_free(a);

  /* The wrong kind of request for the connection, bad requests. */
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *n = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
  tpu_client_async_t *h = connect_to(&p, TPU_CLIENT_PROTOCOL_HTTP);
  CU_ASSERT_EQUAL(tpu_client_async_send_http(n, "GET", "/", NULL, NULL, 0, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(n), "speaks the native protocol"));
  CU_ASSERT_EQUAL(tpu_client_async_send(h, TPUD__METHOD__SERVER_LIVE, NULL, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(h), "speaks HTTP"));
  CU_ASSERT_EQUAL(tpu_client_async_send(n, 99, NULL, 0, 0, NULL), TPU_CLIENT_MISUSE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(n), "unknown method 99"));
  Inference__ServerLiveRequest wrong = INFERENCE__SERVER_LIVE_REQUEST__INIT;
  CU_ASSERT_EQUAL(tpu_client_async_send(n, TPUD__METHOD__MODEL_INFER, &wrong.base, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_EQUAL(tpu_client_async_send_packed(n, TPUD__METHOD__MODEL_INFER, NULL, 5, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_EQUAL(tpu_client_async_send_http(h, "GE T", "/", NULL, NULL, 0, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_EQUAL(tpu_client_async_send_http(h, "GET", "/a b", NULL, NULL, 0, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_EQUAL(tpu_client_async_send_http(h, "GET", "relative", NULL, NULL, 0, 0, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_EQUAL(tpu_client_async_send_http(h, "POST", "/", "text/plain\r\nX: y", "a", 1, 0, 0,
                                             NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_EQUAL(tpu_client_async_unsent(n), 0); /* nothing was queued by any of them */
  CU_ASSERT_EQUAL(tpu_client_async_unsent(h), 0);
  CU_ASSERT_EQUAL(tpu_client_async_in_flight(n), 0);
  tpu_client_result_t *r = (tpu_client_result_t *)1;
  CU_ASSERT_EQUAL(tpu_client_async_wait(n, 10, &r), TPU_CLIENT_MISUSE); /* nothing in flight */
  CU_ASSERT_PTR_NULL(r);
  CU_ASSERT_EQUAL(tpu_client_async_status(n), TPU_CLIENT_OK); /* misuse hurts nothing */
  tpu_client_async_free(n);
  tpu_client_async_free(h);
  peer_free(&p);
}

/* A refused connect fails at once or in a step, with the reason, and fails what was queued. */
static void test_connect_refused(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  CU_ASSERT_EQUAL_FATAL(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
  getsockname(s, (struct sockaddr *)&sa, &sl);
  close(s);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
  tpu_client_async_t *a = NULL;
  tpu_client_status_t st = tpu_client_async_connect(addr, NULL, TPU_CLIENT_PROTOCOL_NATIVE, &a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  if (st == TPU_CLIENT_OK) {
    uint64_t id;
    CU_ASSERT_EQUAL(tpu_client_async_send(a, TPUD__METHOD__SERVER_LIVE, NULL, 0, 5, &id),
                    TPU_CLIENT_OK);
    for (int i = 0; i < 100 && st == TPU_CLIENT_OK; i++) st = drive(a, 20);
    tpu_client_result_t *r = tpu_client_async_next(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_CONNECT_FAILED);
    CU_ASSERT_EQUAL(tpu_client_result_tag(r), 5);
    tpu_client_result_free(r);
  }
  CU_ASSERT_EQUAL(st, TPU_CLIENT_CONNECT_FAILED);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(a), "Connection refused"));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(a), addr));
  CU_ASSERT_FALSE(tpu_client_async_connected(a));
  tpu_client_async_free(a);
  CU_ASSERT_EQUAL(tpu_client_async_connect("no-such-host.invalid", NULL, TPU_CLIENT_PROTOCOL_HTTP,
                                           &a),
                  TPU_CLIENT_CONNECT_FAILED);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_async_errmsg(a), "cannot resolve"));
  tpu_client_async_free(a);
}

/* Many connections in one loop, each with several requests in flight: every request gets its
 * answer on the connection it was sent on (a small version of what tpubench does). */
static void test_many_connections(void) {
  enum { NCONN = 4, DEPTH = 8, ROUNDS = 5 };
  peer_t p;
  peer_listen(&p);
  tpu_client_async_t *a[NCONN];
  int sfd[NCONN];
  for (int i = 0; i < NCONN; i++) {
    a[i] = connect_to(&p, TPU_CLIENT_PROTOCOL_NATIVE);
    peer_accept(&p);
    sfd[i] = p.fd;
    p.fd = -1;
  }
  int got = 0, bad_tag = 0;
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < NCONN; i++)
      for (int d = 0; d < DEPTH; d++)
        CU_ASSERT_EQUAL(tpu_client_async_send(a[i], TPUD__METHOD__SERVER_LIVE, NULL, 0,
                                              (uint64_t)(i * 1000 + d), NULL),
                        TPU_CLIENT_OK);
    for (int i = 0; i < NCONN; i++) settle(a[i]);
    /* Each peer socket answers its DEPTH requests, newest first. */
    for (int i = 0; i < NCONN; i++) {
      p.fd = sfd[i];
      p.off = p.len = 0;
      uint64_t ids[DEPTH];
      for (int d = 0; d < DEPTH; d++) {
        Tpud__RequestEnvelope *env = peer_read_req(&p);
        CU_ASSERT_PTR_NOT_NULL_FATAL(env);
        ids[d] = env->id;
        tpu_envelope_request_free(env);
      }
      for (int d = DEPTH - 1; d >= 0; d--) answer_live(&p, ids[d]);
    }
    for (int i = 0; i < NCONN; i++)
      for (int d = 0; d < DEPTH; d++) {
        tpu_client_result_t *r = next_within(a[i], 2000);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        if (tpu_client_result_tag(r) / 1000 != (uint64_t)i) bad_tag++;
        if (tpu_client_result_status(r) == TPU_CLIENT_OK) got++;
        tpu_client_result_free(r);
      }
  }
  CU_ASSERT_EQUAL(got, NCONN * DEPTH * ROUNDS);
  CU_ASSERT_EQUAL(bad_tag, 0);
  for (int i = 0; i < NCONN; i++) {
    CU_ASSERT_EQUAL(tpu_client_async_in_flight(a[i]), 0);
    tpu_client_async_free(a[i]);
    close(sfd[i]);
  }
  p.fd = -1;
  peer_free(&p);
}

TPU_TEST_SUITE(tpuclient_async,
               {"pipelined native requests, out of order, message and packed",
                test_pipelined_native},
               {"an answer one byte at a time", test_one_byte_at_a_time},
               {"server closes in the middle of an answer", test_closed_mid_answer},
               {"answer with an unknown id", test_unknown_id},
               {"connection-level error completes every request", test_connection_level_error},
               {"timeouts: unsent withdrawn, sent completed locally", test_timeouts},
               {"HTTP pipelining, interim 100, JSON error, Connection: close", test_http_pipelined},
               {"HTTP answer one byte at a time, keep-alive", test_http_one_byte_at_a_time},
               {"HTTP answers that cannot be framed", test_http_bad_answers},
               {"HTTP answer heads from bytes", test_http_head_parser},
               {"misuse: NULLs, wrong protocol, bad requests", test_misuse},
               {"connect refused, name that does not resolve", test_connect_refused},
               {"many connections, each pipelined", test_many_connections})
