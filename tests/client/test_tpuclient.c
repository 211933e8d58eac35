/*
 * test_tpuclient.c - libtpuclient against a scripted fake server on a loopback socket.
 *
 * DESIGN
 * Each test starts a fake server thread on 127.0.0.1:<free port> that accepts one connection and
 * runs a script: read request envelopes (through proto/'s decoder, as tpud does), answer them in
 * whatever order, with whatever codes, or misbehave (stall, close mid-frame, answer an id never
 * sent). The client side then checks what the library reports. CUnit asserts are not
 * thread-safe, so the server thread only records what it saw; the test thread asserts after
 * joining it. End-to-end tests against the real tpud live with the server.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tpu_envelope.h"
#include "tpu_test.h"
#include "tpuclient.h"

typedef struct fake fake_t;
typedef void (*script_fn)(fake_t *f, int fd);

struct fake {
  int lfd, port;
  pthread_t thread;
  script_fn script;
  tpu_frame_decoder_t *dec;
  uint8_t buf[1 << 16];
  size_t off, len;
  /* what the script saw, for the test thread to check */
  int errors;
  uint64_t ids[16];
  int methods[16];
  uint64_t timeouts_us[16];
  char names[16][32];
  int nreq;
  size_t big_len; /* raw input bytes of a big infer request */
};

static long elapsed_ms(struct timespec t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
}

/* Reads the next request envelope, or NULL at end of stream or on error. */
static Tpud__RequestEnvelope *read_req(fake_t *f, int fd) {
  for (;;) {
    if (f->off < f->len) {
      size_t used = 0;
      tpu_frame_t frame;
      tpu_proto_status_t st =
          tpu_frame_decoder_feed(f->dec, f->buf + f->off, f->len - f->off, &used, &frame, NULL);
      f->off += used;
      if (st == TPU_PROTO_OK) {
        Tpud__RequestEnvelope *env = NULL;
        if (tpu_envelope_decode_request(frame.data, frame.len, SIZE_MAX, &env, NULL) !=
            TPU_PROTO_OK) {
          f->errors++;
          return NULL;
        }
        int i = f->nreq < 16 ? f->nreq++ : 15;
        f->ids[i] = env->id;
        f->methods[i] = env->method;
        f->timeouts_us[i] = env->timeout_us;
        return env;
      }
      if (st != TPU_PROTO_EAGAIN) {
        f->errors++;
        return NULL;
      }
    }
    ssize_t n = recv(fd, f->buf, sizeof f->buf, 0);
    if (n <= 0) return NULL;
    f->off = 0;
    f->len = (size_t)n;
  }
}

static void write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void send_resp(fake_t *f, int fd, uint64_t id, int code, const char *msg,
                      const ProtobufCMessage *payload) {
  tpu_envelope_response_t r = {.id = id, .code = code, .message = msg, .payload_msg = payload};
  uint8_t *frame;
  size_t len;
  if (tpu_envelope_encode_response_alloc(&r, &frame, &len, NULL) != TPU_PROTO_OK) {
    f->errors++;
    return;
  }
  write_all(fd, frame, len);
  free(frame);
}

/* Answers a ModelReady request with ready = (name == "b"), recording the name. */
static void answer_model_ready(fake_t *f, int fd, Tpud__RequestEnvelope *env) {
  Inference__ModelReadyRequest *req =
      inference__model_ready_request__unpack(NULL, env->payload.len, env->payload.data);
  if (!req) {
    f->errors++;
    return;
  }
  for (int i = 0; i < f->nreq; i++)
    if (f->ids[i] == env->id) snprintf(f->names[i], sizeof f->names[i], "%s", req->name);
  Inference__ModelReadyResponse resp = INFERENCE__MODEL_READY_RESPONSE__INIT;
  resp.ready = strcmp(req->name, "b") == 0;
  send_resp(f, fd, env->id, 0, NULL, &resp.base);
  inference__model_ready_request__free_unpacked(req, NULL);
}

static void *fake_main(void *arg) {
  fake_t *f = arg;
  int fd = accept(f->lfd, NULL, NULL);
  if (fd < 0) {
    f->errors++;
    return NULL;
  }
  f->script(f, fd);
  close(fd);
  return NULL;
}

static fake_t *fake_start(script_fn script) {
  fake_t *f = calloc(1, sizeof *f);
  f->script = script;
  tpu_frame_decoder_create(0, &f->dec);
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(f->lfd, 4) < 0 ||
      getsockname(f->lfd, (struct sockaddr *)&sa, &sl) < 0)
    f->errors++;
  f->port = ntohs(sa.sin_port);
  pthread_create(&f->thread, NULL, fake_main, f);
  return f;
}

/* Joins the server thread and returns the number of errors it saw; frees nothing else yet. */
static int fake_join(fake_t *f) {
  pthread_join(f->thread, NULL);
  close(f->lfd);
  return f->errors;
}

static void fake_free(fake_t *f) {
  tpu_frame_decoder_free(f->dec);
  free(f);
}

static tpu_client_t *connect_fake(fake_t *f) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", f->port);
  tpu_client_t *c = NULL;
  tpu_client_status_t st = tpu_client_connect(addr, NULL, &c);
  if (st != TPU_CLIENT_OK) printf("\n  connect: %s\n", tpu_client_errmsg(c));
  CU_ASSERT_EQUAL(st, TPU_CLIENT_OK);
  return c;
}

/* ---- scripts and tests ---- */

static void script_health(fake_t *f, int fd) {
  Tpud__RequestEnvelope *env;
  while ((env = read_req(f, fd))) {
    if (env->method == TPUD__METHOD__SERVER_LIVE) {
      Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
      r.live = 1;
      send_resp(f, fd, env->id, 0, NULL, &r.base);
    } else if (env->method == TPUD__METHOD__SERVER_READY) {
      Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
      r.ready = 1;
      send_resp(f, fd, env->id, 0, NULL, &r.base);
    } else if (env->method == TPUD__METHOD__MODEL_READY) {
      answer_model_ready(f, fd, env);
    } else if (env->method == TPUD__METHOD__MODEL_LOAD) {
      send_resp(f, fd, env->id, TPUD__STATUS_CODE__NOT_FOUND, "model 'zz' is not in the repository",
                NULL);
    } else {
      send_resp(f, fd, env->id, TPUD__STATUS_CODE__UNIMPLEMENTED, "no", NULL);
    }
    tpu_envelope_request_free(env);
  }
}

static void test_sync_calls(void) {
  fake_t *f = fake_start(script_health);
  tpu_client_t *c = connect_fake(f);
  bool live = false, ready = false;
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 0, &live), TPU_CLIENT_OK);
  CU_ASSERT_TRUE(live);
  CU_ASSERT_STRING_EQUAL(tpu_client_errmsg(c), "");
  CU_ASSERT_EQUAL(tpu_client_server_ready(c, 1000, &ready), TPU_CLIENT_OK);
  CU_ASSERT_TRUE(ready);
  CU_ASSERT_EQUAL(tpu_client_model_ready(c, "b", "1", 0, &ready), TPU_CLIENT_OK);
  CU_ASSERT_TRUE(ready);
  CU_ASSERT_EQUAL(tpu_client_model_ready(c, "a", NULL, 0, &ready), TPU_CLIENT_OK);
  CU_ASSERT_FALSE(ready);
  /* A server error: its code and its message, verbatim. */
  Tpud__ModelLoadResponse *lr = (Tpud__ModelLoadResponse *)1;
  CU_ASSERT_EQUAL(tpu_client_model_load(c, "zz", NULL, 0, &lr), TPU_CLIENT_NOT_FOUND);
  CU_ASSERT_PTR_NULL(lr);
  CU_ASSERT_STRING_EQUAL(tpu_client_errmsg(c), "model 'zz' is not in the repository");
  /* The handle stays usable after a failed call. */
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 0, &live), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_in_flight(c), 0);
  /* Misuse: a request of the wrong type, an unknown method. */
  Inference__ServerLiveRequest wrong = INFERENCE__SERVER_LIVE_REQUEST__INIT;
  CU_ASSERT_EQUAL(tpu_client_send(c, TPUD__METHOD__MODEL_INFER, &wrong.base, 0, NULL),
                  TPU_CLIENT_MISUSE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "ModelInfer takes a inference.ModelInferRequest"));
  CU_ASSERT_EQUAL(tpu_client_send(c, 99, NULL, 0, NULL), TPU_CLIENT_MISUSE);
  tpu_client_result_t *r = (tpu_client_result_t *)1;
  CU_ASSERT_EQUAL(tpu_client_recv(c, 10, &r), TPU_CLIENT_MISUSE); /* nothing in flight */
  CU_ASSERT_PTR_NULL(r);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  /* Ids are non-zero and increase; timeouts reach the server as deadlines (0: the 30 s default). */
  CU_ASSERT_EQUAL(f->nreq, 6);
  CU_ASSERT_EQUAL(f->ids[0], 1);
  CU_ASSERT_EQUAL(f->ids[5], 6);
  CU_ASSERT_EQUAL(f->timeouts_us[0], 30000000);
  CU_ASSERT_EQUAL(f->timeouts_us[1], 1000000);
  CU_ASSERT_EQUAL(f->methods[2], TPUD__METHOD__MODEL_READY);
  CU_ASSERT_STRING_EQUAL(f->names[2], "b");
  fake_free(f);
}

/* Reads three requests, answers them last first. */
static void script_reverse(fake_t *f, int fd) {
  Tpud__RequestEnvelope *env[3] = {0};
  for (int i = 0; i < 3; i++)
    if (!(env[i] = read_req(f, fd))) f->errors++;
  for (int i = 2; i >= 0; i--)
    if (env[i]) answer_model_ready(f, fd, env[i]);
  for (int i = 0; i < 3; i++) tpu_envelope_request_free(env[i]);
}

static void test_pipelined_out_of_order(void) {
  fake_t *f = fake_start(script_reverse);
  tpu_client_t *c = connect_fake(f);
  const char *names[3] = {"a", "b", "c"};
  uint64_t ids[3];
  for (int i = 0; i < 3; i++) {
    Inference__ModelReadyRequest req = INFERENCE__MODEL_READY_REQUEST__INIT;
    req.name = (char *)names[i];
    CU_ASSERT_EQUAL(tpu_client_send(c, TPUD__METHOD__MODEL_READY, &req.base, 0, &ids[i]),
                    TPU_CLIENT_OK);
  }
  CU_ASSERT_EQUAL(tpu_client_in_flight(c), 3);
  for (int k = 0; k < 3; k++) {
    tpu_client_result_t *r = NULL;
    CU_ASSERT_EQUAL_FATAL(tpu_client_recv(c, 2000, &r), TPU_CLIENT_OK);
    /* Completion order: the server answered c, b, a. */
    CU_ASSERT_EQUAL(tpu_client_result_id(r), ids[2 - k]);
    CU_ASSERT_EQUAL(tpu_client_result_method(r), TPUD__METHOD__MODEL_READY);
    CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_OK);
    CU_ASSERT_STRING_EQUAL(tpu_client_result_error(r), "");
    const Inference__ModelReadyResponse *resp =
        (const Inference__ModelReadyResponse *)tpu_client_result_response(r);
    CU_ASSERT_PTR_NOT_NULL_FATAL(resp);
    CU_ASSERT_EQUAL(resp->base.descriptor, &inference__model_ready_response__descriptor);
    CU_ASSERT_EQUAL(resp->ready, 2 - k == 1); /* only "b" is ready */
    tpu_client_result_free(r);
  }
  CU_ASSERT_EQUAL(tpu_client_in_flight(c), 0);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Reads two requests, answers the first, then the second. */
static void script_in_order_two(fake_t *f, int fd) {
  Tpud__RequestEnvelope *a = read_req(f, fd), *b = read_req(f, fd);
  if (a) answer_model_ready(f, fd, a);
  if (b) answer_model_ready(f, fd, b);
  tpu_envelope_request_free(a);
  tpu_envelope_request_free(b);
}

/* A sync call parks the other request's earlier answer for tpu_client_recv(). */
static void test_sync_buffers_others(void) {
  fake_t *f = fake_start(script_in_order_two);
  tpu_client_t *c = connect_fake(f);
  Inference__ModelReadyRequest req = INFERENCE__MODEL_READY_REQUEST__INIT;
  req.name = "b";
  uint64_t id = 0;
  CU_ASSERT_EQUAL(tpu_client_send(c, TPUD__METHOD__MODEL_READY, &req.base, 0, &id), TPU_CLIENT_OK);
  bool ready = true;
  CU_ASSERT_EQUAL(tpu_client_model_ready(c, "a", NULL, 0, &ready), TPU_CLIENT_OK);
  CU_ASSERT_FALSE(ready);
  CU_ASSERT_EQUAL(tpu_client_in_flight(c), 1);
  tpu_client_result_t *r = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_client_recv(c, 10, &r), TPU_CLIENT_OK); /* already here: no wait */
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id);
  ProtobufCMessage *m = tpu_client_result_take_response(r);
  CU_ASSERT_PTR_NULL(tpu_client_result_response(r));
  CU_ASSERT_TRUE(((Inference__ModelReadyResponse *)m)->ready);
  protobuf_c_message_free_unpacked(m, NULL);
  tpu_client_result_free(r);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Answers the first request only after 400 ms, then the second at once. */
static void script_slow(fake_t *f, int fd) {
  Tpud__RequestEnvelope *a = read_req(f, fd);
  usleep(400000);
  if (a) answer_model_ready(f, fd, a); /* late: the client has given up on it */
  Tpud__RequestEnvelope *b = read_req(f, fd);
  if (b) answer_model_ready(f, fd, b);
  tpu_envelope_request_free(a);
  tpu_envelope_request_free(b);
}

static void test_timeout(void) {
  fake_t *f = fake_start(script_slow);
  tpu_client_t *c = connect_fake(f);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bool ready = true;
  CU_ASSERT_EQUAL(tpu_client_model_ready(c, "b", NULL, 100, &ready), TPU_CLIENT_TIMEOUT);
  long ms = elapsed_ms(t0);
  CU_ASSERT_TRUE(ms >= 100 && ms < 350);
  CU_ASSERT_FALSE(ready);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "no response to ModelReady (request 1) within 100 ms"));
  /* The connection survives, the late answer to request 1 is dropped, request 2 succeeds. */
  CU_ASSERT_EQUAL(tpu_client_connection_status(c), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_model_ready(c, "b", NULL, 2000, &ready), TPU_CLIENT_OK);
  CU_ASSERT_TRUE(ready);
  CU_ASSERT_EQUAL(tpu_client_in_flight(c), 0);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  CU_ASSERT_EQUAL(f->timeouts_us[0], 100000); /* the deadline travelled with the request */
  fake_free(f);
}

/* Never answers; waits for the client to go away. */
static void script_silent(fake_t *f, int fd) {
  Tpud__RequestEnvelope *env;
  while ((env = read_req(f, fd))) tpu_envelope_request_free(env);
}

static void test_recv_timeouts(void) {
  fake_t *f = fake_start(script_silent);
  tpu_client_t *c = connect_fake(f);
  uint64_t id1, id2;
  CU_ASSERT_EQUAL(tpu_client_send(c, TPUD__METHOD__SERVER_LIVE, NULL, 5000, &id1), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_send(c, TPUD__METHOD__SERVER_LIVE, NULL, 150, &id2), TPU_CLIENT_OK);
  /* recv's own wait ends first: nothing completed. */
  tpu_client_result_t *r = NULL;
  CU_ASSERT_EQUAL(tpu_client_recv(c, 50, &r), TPU_CLIENT_TIMEOUT);
  CU_ASSERT_PTR_NULL(r);
  /* Then request 2's deadline passes: it completes locally with TIMEOUT. */
  CU_ASSERT_EQUAL_FATAL(tpu_client_recv(c, 2000, &r), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id2);
  CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_TIMEOUT);
  CU_ASSERT_PTR_NULL(tpu_client_result_response(r));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_result_error(r), "within 150 ms"));
  tpu_client_result_free(r);
  CU_ASSERT_EQUAL(tpu_client_in_flight(c), 1);
  tpu_client_free(c); /* with request 1 still in flight: nothing leaks */
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Reads both requests (unread bytes would make close() send a reset instead), sends half of a
 * response frame, then closes. */
static void script_close_mid_response(fake_t *f, int fd) {
  tpu_envelope_request_free(read_req(f, fd));
  Tpud__RequestEnvelope *env = read_req(f, fd);
  if (!env) return;
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = 1;
  tpu_envelope_response_t resp = {.id = env->id, .payload_msg = &r.base};
  uint8_t *frame;
  size_t len;
  if (tpu_envelope_encode_response_alloc(&resp, &frame, &len, NULL) == TPU_PROTO_OK) {
    write_all(fd, frame, len / 2);
    free(frame);
  }
  tpu_envelope_request_free(env);
}

static void test_close_mid_response(void) {
  fake_t *f = fake_start(script_close_mid_response);
  tpu_client_t *c = connect_fake(f);
  uint64_t id;
  CU_ASSERT_EQUAL(tpu_client_send(c, TPUD__METHOD__SERVER_READY, NULL, 0, &id), TPU_CLIENT_OK);
  bool live;
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 2000, &live), TPU_CLIENT_CLOSED);
  if (!strstr(tpu_client_errmsg(c), "in the middle of a response"))
    printf("\n  got: %s\n", tpu_client_errmsg(c));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "in the middle of a response"));
  /* The other request in flight completes too, with the same reason. */
  tpu_client_result_t *r = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_client_recv(c, 100, &r), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_result_id(r), id);
  CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_CLOSED);
  tpu_client_result_free(r);
  /* Then the connection's own status, for recv and for new calls. */
  CU_ASSERT_EQUAL(tpu_client_recv(c, 100, &r), TPU_CLIENT_CLOSED);
  CU_ASSERT_EQUAL(tpu_client_connection_status(c), TPU_CLIENT_CLOSED);
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 0, &live), TPU_CLIENT_CLOSED);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Reads one request and closes cleanly without answering. */
static void script_close(fake_t *f, int fd) { tpu_envelope_request_free(read_req(f, fd)); }

static void test_close_between_frames(void) {
  fake_t *f = fake_start(script_close);
  tpu_client_t *c = connect_fake(f);
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 2000, NULL), TPU_CLIENT_CLOSED);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "closed the connection with 1 request in flight"));
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Answers an id that was never sent. */
static void script_wrong_id(fake_t *f, int fd) {
  Tpud__RequestEnvelope *env = read_req(f, fd);
  if (!env) return;
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  send_resp(f, fd, env->id + 1000, 0, NULL, &r.base);
  tpu_envelope_request_free(env);
  script_silent(f, fd);
}

static void test_protocol_errors(void) {
  fake_t *f = fake_start(script_wrong_id);
  tpu_client_t *c = connect_fake(f);
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 2000, NULL), TPU_CLIENT_PROTOCOL);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "request id 1001, which is not in flight"));
  CU_ASSERT_EQUAL(tpu_client_connection_status(c), TPU_CLIENT_PROTOCOL);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Sends garbage frame bytes after the first request. */
static void script_garbage(fake_t *f, int fd) {
  Tpud__RequestEnvelope *env = read_req(f, fd);
  const uint8_t junk[] = {7, 0, 0, 0, 1, 0};
  write_all(fd, junk, sizeof junk);
  tpu_envelope_request_free(env);
  script_silent(f, fd);
}

static void test_bad_frame(void) {
  fake_t *f = fake_start(script_garbage);
  tpu_client_t *c = connect_fake(f);
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 2000, NULL), TPU_CLIENT_PROTOCOL);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "bad frame"));
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Reads two requests, then reports a connection-level error (id 0). */
static void script_conn_error(fake_t *f, int fd) {
  Tpud__RequestEnvelope *a = read_req(f, fd), *b = read_req(f, fd);
  send_resp(f, fd, 0, TPUD__STATUS_CODE__RESOURCE_EXHAUSTED, "too many connections", NULL);
  tpu_envelope_request_free(a);
  tpu_envelope_request_free(b);
}

static void test_connection_level_error(void) {
  fake_t *f = fake_start(script_conn_error);
  tpu_client_t *c = connect_fake(f);
  uint64_t ids[2];
  for (int i = 0; i < 2; i++)
    CU_ASSERT_EQUAL(tpu_client_send(c, TPUD__METHOD__SERVER_LIVE, NULL, 0, &ids[i]), TPU_CLIENT_OK);
  for (int i = 0; i < 2; i++) {
    tpu_client_result_t *r = NULL;
    CU_ASSERT_EQUAL_FATAL(tpu_client_recv(c, 2000, &r), TPU_CLIENT_OK);
    CU_ASSERT_EQUAL(tpu_client_result_id(r), ids[i]);
    CU_ASSERT_EQUAL(tpu_client_result_status(r), TPU_CLIENT_RESOURCE_EXHAUSTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_result_error(r), "too many connections"));
    tpu_client_result_free(r);
  }
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  fake_free(f);
}

/* Checks a (big) infer request's raw input and answers with its first 4 floats doubled. */
static void script_infer(fake_t *f, int fd) {
  Tpud__RequestEnvelope *env = read_req(f, fd);
  if (!env) return;
  Inference__ModelInferRequest *req =
      inference__model_infer_request__unpack(NULL, env->payload.len, env->payload.data);
  if (!req || req->n_inputs != 1 || req->n_raw_input_contents != 1 ||
      strcmp(req->model_name, "mlp") != 0 || strcmp(req->inputs[0]->datatype, "FP32") != 0) {
    f->errors++;
  } else {
    f->big_len = req->raw_input_contents[0].len;
    float out[4];
    memcpy(out, req->raw_input_contents[0].data, sizeof out);
    for (int i = 0; i < 4; i++) out[i] *= 2;
    int64_t shape[2] = {1, 4};
    Inference__ModelInferResponse__InferOutputTensor o =
        INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    Inference__ModelInferResponse__InferOutputTensor *op = &o;
    o.name = "y";
    o.datatype = "FP32";
    o.shape = shape;
    o.n_shape = 2;
    ProtobufCBinaryData raw = {sizeof out, (uint8_t *)out};
    Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    resp.model_name = "mlp";
    resp.outputs = &op;
    resp.n_outputs = 1;
    resp.raw_output_contents = &raw;
    resp.n_raw_output_contents = 1;
    send_resp(f, fd, env->id, 0, NULL, &resp.base);
  }
  if (req) inference__model_infer_request__free_unpacked(req, NULL);
  tpu_envelope_request_free(env);
}

static void test_infer_tensors(void) {
  fake_t *f = fake_start(script_infer);
  tpu_client_t *c = connect_fake(f);
  /* 8 MiB of input: far more than a socket buffer, so the send really waits on the peer. */
  size_t n = (size_t)2 << 20;
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)i;
  int64_t shape[2] = {(int64_t)(n / 4), 4};
  tpu_client_tensor_t in = {.name = "x", .datatype = "FP32", .shape = shape, .rank = 2,
                            .data = x, .nbytes = n * sizeof *x};
  Inference__ModelInferResponse *resp = NULL;
  tpu_client_status_t st = tpu_client_infer(c, "mlp", NULL, &in, 1, 5000, &resp);
  if (st != TPU_CLIENT_OK) printf("\n  infer: %s\n", tpu_client_errmsg(c));
  CU_ASSERT_EQUAL_FATAL(st, TPU_CLIENT_OK);
  tpu_client_tensor_t y;
  CU_ASSERT_EQUAL_FATAL(tpu_client_infer_output(resp, "y", &y), TPU_CLIENT_OK);
  CU_ASSERT_STRING_EQUAL(y.datatype, "FP32");
  CU_ASSERT_EQUAL(y.rank, 2);
  CU_ASSERT_EQUAL_FATAL(y.nbytes, 16);
  const float *yv = y.data;
  CU_ASSERT_EQUAL(yv[0], 0.0f);
  CU_ASSERT_EQUAL(yv[3], 6.0f);
  CU_ASSERT_EQUAL(tpu_client_infer_output(resp, "nope", &y), TPU_CLIENT_NOT_FOUND);
  /* A response whose bytes do not match its shape is refused. */
  resp->outputs[0]->shape[1] = 5;
  CU_ASSERT_EQUAL(tpu_client_infer_output(resp, "y", &y), TPU_CLIENT_PROTOCOL);
  inference__model_infer_response__free_unpacked(resp, NULL);
  free(x);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(fake_join(f), 0);
  CU_ASSERT_EQUAL(f->big_len, n * sizeof(float));
  fake_free(f);
}

static void test_connect_errors(void) {
  /* A port nobody listens on: bind one, note it, close it. */
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  CU_ASSERT_EQUAL_FATAL(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
  getsockname(s, (struct sockaddr *)&sa, &sl);
  close(s);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
  tpu_client_t *c = NULL;
  CU_ASSERT_EQUAL(tpu_client_connect(addr, NULL, &c), TPU_CLIENT_CONNECT_FAILED);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c); /* a handle, to say why */
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "Connection refused"));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), addr));
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 0, NULL), TPU_CLIENT_CONNECT_FAILED);
  tpu_client_free(c);

  const char *bad[] = {"", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "host:port", "[::1",
                       "[::1]x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CU_ASSERT_EQUAL(tpu_client_connect(bad[i], NULL, &c), TPU_CLIENT_MISUSE);
    tpu_client_free(c);
  }
  CU_ASSERT_EQUAL(tpu_client_connect("no-such-host.invalid:8500", NULL, &c),
                  TPU_CLIENT_CONNECT_FAILED);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_client_errmsg(c), "cannot resolve"));
  tpu_client_free(c);
  tpu_client_options_t opts = {0}; /* not initialised: size 0 */
  CU_ASSERT_EQUAL(tpu_client_connect("127.0.0.1:1", &opts, &c), TPU_CLIENT_MISUSE);
  tpu_client_free(c);
  CU_ASSERT_EQUAL(tpu_client_connect("127.0.0.1:1", NULL, NULL), TPU_CLIENT_MISUSE);

  tpu_client_free(NULL);
  tpu_client_result_free(NULL);
  CU_ASSERT_STRING_NOT_EQUAL(tpu_client_errmsg(NULL), "");
  CU_ASSERT_STRING_EQUAL(tpu_client_status_name(TPU_CLIENT_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
  CU_ASSERT_EQUAL((int)TPU_CLIENT_UNAUTHENTICATED, TPUD__STATUS_CODE__UNAUTHENTICATED);
  CU_ASSERT_PTR_NULL(tpu_client_status_name((tpu_client_status_t)50));
  CU_ASSERT_STRING_EQUAL(tpu_client_strerror((tpu_client_status_t)50), "unknown status");
}

/* Options from an older, smaller build of the struct keep the newer fields' defaults. */
static void test_options_versioning(void) {
  fake_t *f = fake_start(script_health);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", f->port);
  tpu_client_options_t opts;
  tpu_client_options_init(&opts);
  CU_ASSERT_EQUAL(opts.size, sizeof opts);
  opts.timeout_ms = 1234;
  opts.size = offsetof(tpu_client_options_t, timeout_ms); /* a build that lacks timeout_ms */
  tpu_client_t *c = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_client_connect(addr, &opts, &c), TPU_CLIENT_OK);
  CU_ASSERT_EQUAL(tpu_client_server_live(c, 0, NULL), TPU_CLIENT_OK);
  tpu_client_free(c);
  opts.size = sizeof opts;
  CU_ASSERT_EQUAL(fake_join(f), 0);
  CU_ASSERT_EQUAL(f->timeouts_us[0], 30000000); /* the default, not 1234 ms */
  fake_free(f);
}

TPU_TEST_SUITE(tpuclient,
               {"sync calls, server errors, misuse", test_sync_calls},
               {"pipelined requests answered out of order", test_pipelined_out_of_order},
               {"a sync call keeps other answers for recv", test_sync_buffers_others},
               {"per-call timeout: local TIMEOUT, late answer dropped", test_timeout},
               {"recv timeout vs request timeout", test_recv_timeouts},
               {"server closes in the middle of a response", test_close_mid_response},
               {"server closes between frames", test_close_between_frames},
               {"answer to an id never sent", test_protocol_errors},
               {"garbage frame", test_bad_frame},
               {"connection-level error completes every request", test_connection_level_error},
               {"tensor infer with 8 MiB input", test_infer_tensors},
               {"connect refused, bad addresses, NULLs", test_connect_errors},
               {"options struct from an older build", test_options_versioning})
