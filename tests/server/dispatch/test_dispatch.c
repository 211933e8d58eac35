/*
 * test_dispatch.c - the one request path (server/dispatch/dispatch.c, call.c) driven by an
 * in-memory origin, without a socket or a front end: what every method is answered, in which
 * order the origin's operations run, and how a computed call comes back through its I/O
 * thread's queue.
 *
 * The server is real where dispatch reads it: a temporary model repository holding a copy of
 * models/digits, loaded by the repository manager (its thread and the model's batcher run), an
 * engine, and one I/O thread's loop and queue (net/io.h) that the test thread runs itself, so a
 * ModelInfer's completion is handled here, between two loop turns. Everything else a server
 * holds (listeners, signals, audit, access control, the MatMul pool) stays unset, as
 * tpu_server_free allows: the struct is filled here rather than by tpu_server_create, which
 * would bind ports and start threads of its own.
 */
#include <poll.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "call.h"
#include "clock.h"
#include "log.h"
#include "server_int.h"
#include "tpu_envelope.h"
#include "tpu_test.h"

/* ---- an origin that records what dispatch tells it ---- */

typedef struct {
  tpu__origin_t o;
  char events[16]; /* one letter per operation, in order: T(rack), R(espond), U(ntrack) */
  int responds, tracks, untracks;
  int code;        /* the last answer */
  char msg[1024];
  uint64_t id;
  void *slot;
  const ProtobufCMessageDescriptor *desc; /* its payload's type, NULL when none */
  uint8_t *packed;                        /* its payload, packed */
  size_t packed_len;
  tpu__call_t *tracked;                   /* the call track saw */
  int untrack_same;                       /* untrack saw that call, tracked */
} rec_t;

static void event(rec_t *r, char c) {
  size_t n = strlen(r->events);
  if (n + 1 < sizeof r->events) r->events[n] = c;
}

static void rec_respond(tpu__call_t *call, int code, const char *msg,
                        const ProtobufCMessage *payload) {
  rec_t *r = tpu_container_of(call->origin, rec_t, o);
  CU_ASSERT_FALSE(r->o.closed); /* never called for a closed origin */
  event(r, 'R');
  r->responds++;
  r->code = code;
  snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
  r->id = call->id;
  r->slot = call->slot;
  free(r->packed);
  r->packed = NULL;
  r->packed_len = 0;
  r->desc = payload ? payload->descriptor : NULL;
  if (payload) {
    r->packed_len = protobuf_c_message_get_packed_size(payload);
    r->packed = malloc(r->packed_len + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r->packed);
    CU_ASSERT_EQUAL(protobuf_c_message_pack(payload, r->packed), r->packed_len);
  }
}

static void rec_track(tpu__call_t *call) {
  rec_t *r = tpu_container_of(call->origin, rec_t, o);
  event(r, 'T');
  r->tracks++;
  r->tracked = call;
}

static void rec_untrack(tpu__call_t *call) {
  rec_t *r = tpu_container_of(call->origin, rec_t, o);
  event(r, 'U');
  r->untracks++;
  r->untrack_same = call == r->tracked && call->tracked;
}

static const tpu__origin_ops_t rec_ops = {rec_respond, rec_track, rec_untrack, NULL};

/* The last answer's payload, unpacked as `desc` (NULL when it had none or another type). */
static ProtobufCMessage *answer(rec_t *r, const ProtobufCMessageDescriptor *desc) {
  CU_ASSERT_PTR_EQUAL(r->desc, desc);
  if (r->desc != desc || !r->packed) return NULL;
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, r->packed_len, r->packed);
  CU_ASSERT_PTR_NOT_NULL(m);
  return m;
}

static void rec_reset(rec_t *r) {
  free(r->packed);
  tpu__origin_t o = r->o;
  memset(r, 0, sizeof *r);
  r->o = o;
  r->o.closed = 0;
}

/* ---- the server ---- */

static tpu_server_t *srv;
static tpu_engine_t *engine;
static tpu__io_t *io;
static rec_t rec;
static char root[256];
static tpu_log_level_t saved_level;

/* A server with models/digits in a temporary repository, and rec as an origin on its one I/O
 * thread. 0, or -1 after failing the test. */
static int setup(void) {
  saved_level = tpu_log_get_level();
  tpu_log_set_level(TPU_LOG_ERROR); /* the loads' INFO lines */
  snprintf(root, sizeof root, "/tmp/tpu_dispatch_test.XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(root));
  char cmd[600];
  snprintf(cmd, sizeof cmd, "cp -R '%s/models/digits' '%s/'", TPU_SOURCE_DIR, root);
  CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
  tpu_engine_config_t ecfg = {.threads = 1};
  CU_ASSERT_EQUAL_FATAL(tpu_engine_create(&ecfg, &engine), TPU_OK);
  srv = calloc(1, sizeof *srv);
  CU_ASSERT_PTR_NOT_NULL_FATAL(srv);
  tpu_config_defaults(&srv->cfg);
  snprintf(srv->cfg.models, sizeof srv->cfg.models, "%s", root);
  srv->cfg.threads = 1;
  srv->cfg.poll_seconds = 0; /* no rescans while a test runs */
  srv->cfg.log_level = TPU_LOG_ERROR;
  srv->engine = engine;
  srv->http_fd = -1;
  char err[512] = "";
  if (tpu__repo_create(srv, &srv->repo, err, sizeof err) != 0) {
    printf("\n  repository: %s\n", err);
    CU_FAIL_FATAL("cannot create the repository");
  }
  CU_ASSERT_EQUAL_FATAL(tpu__models_ready(srv), 1); /* digits version 1 */
  srv->nio = 1;
  io = srv->io = tpu__io_create(srv, 1); /* its loop runs in this thread (run_until) */
  CU_ASSERT_PTR_NOT_NULL_FATAL(io);
  memset(&rec, 0, sizeof rec);
  rec.o.ops = &rec_ops;
  rec.o.srv = srv;
  rec.o.io = io;
  rec.o.wire = TPU__WIRE_FRAMED;
  return 0;
}

static void teardown(void) {
  free(rec.packed);
  memset(&rec, 0, sizeof rec);
  tpu_server_free(srv); /* repository, batchers, the I/O thread's queue and loop */
  srv = NULL;
  io = NULL;
  tpu_engine_free(engine);
  engine = NULL;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CU_ASSERT_EQUAL(system(cmd), 0);
  tpu_log_set_level(saved_level);
}

/* Runs the I/O thread's loop here until *counter reaches want; 0, or -1 after 10 s. */
static int run_until(const int *counter, int want) {
  uint64_t end = tpu_now_us() + 10 * 1000000ull;
  while (*counter < want) {
    if (tpu_now_us() > end) return -1;
    event_base_loop(io->base, EVLOOP_NONBLOCK);
    if (*counter >= want) break;
    struct timespec ts = {0, 1000000}; /* 1 ms */
    nanosleep(&ts, NULL);
  }
  return 0;
}

/* Turns the loop a few times: what a test expects never to arrive has had its chance. */
static void run_a_little(void) {
  for (int i = 0; i < 20; i++) {
    event_base_loop(io->base, EVLOOP_NONBLOCK);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

/* ---- requests ---- */

static uint8_t payload_buf[1 << 16];
static int slot_marker;

static tpu__request_t request(int method, const ProtobufCMessage *msg) {
  static uint64_t next_id = 100;
  tpu__request_t r;
  memset(&r, 0, sizeof r);
  r.method = method;
  r.id = ++next_id;
  r.slot = &slot_marker;
  r.received_us = tpu_now_us();
  r.peer.peer = "127.0.0.1:4242";
  if (msg) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    CU_ASSERT_FATAL(len <= sizeof payload_buf);
    protobuf_c_message_pack(msg, payload_buf);
    r.payload = payload_buf;
    r.payload_len = len;
  }
  return r;
}

static uint64_t requests(int code) { return tpu_stats_get(&tpu_stats.requests[code]); }

/* The digits model's counter of answers with `code`. */
static uint64_t model_requests(int code) {
  char msg[256];
  tpu__model_t *m = tpu__server_find_model(srv, "digits", "", msg, sizeof msg);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  uint64_t v = tpu_stats_get(&m->stats.requests[code]);
  tpu__model_release(m);
  return v;
}

static tpu__request_t metadata_request(const char *name, const char *version) {
  Inference__ModelMetadataRequest q = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  q.name = (char *)name;
  q.version = (char *)version;
  tpu__request_t r = request(TPUD__METHOD__MODEL_METADATA, &q.base);
  r.model = name;
  r.version = version;
  return r;
}

/* ---- cheap methods ---- */

static void test_server_live_and_metadata(void) {
  setup();
  uint64_t ok = requests(TPU_CODE_OK);
  tpu__request_t r = request(TPUD__METHOD__SERVER_LIVE, NULL); /* an empty message */
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R"); /* answered at once: nothing tracked */
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  CU_ASSERT_EQUAL(rec.id, r.id);
  CU_ASSERT_PTR_EQUAL(rec.slot, &slot_marker);
  CU_ASSERT_STRING_EQUAL(rec.o.who, "127.0.0.1:4242"); /* no access control: the peer */
  Inference__ServerLiveResponse *live =
      (Inference__ServerLiveResponse *)answer(&rec, &inference__server_live_response__descriptor);
  CU_ASSERT(live && live->live);
  if (live) protobuf_c_message_free_unpacked(&live->base, NULL);

  rec_reset(&rec);
  r = request(TPUD__METHOD__SERVER_METADATA, NULL);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  Inference__ServerMetadataResponse *md = (Inference__ServerMetadataResponse *)answer(
      &rec, &inference__server_metadata_response__descriptor);
  if (md) {
    CU_ASSERT_STRING_EQUAL(md->name, TPUD_SERVER_NAME);
    CU_ASSERT_STRING_EQUAL(md->version, TPUD_SERVER_VERSION);
    CU_ASSERT_EQUAL(md->n_extensions, 4);
    if (md->n_extensions) CU_ASSERT_STRING_EQUAL(md->extensions[0], "binary_tensor_data");
    protobuf_c_message_free_unpacked(&md->base, NULL);
  }

  rec_reset(&rec);
  r = request(TPUD__METHOD__SERVER_READY, NULL);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  Inference__ServerReadyResponse *ready = (Inference__ServerReadyResponse *)answer(
      &rec, &inference__server_ready_response__descriptor);
  CU_ASSERT(ready && ready->ready); /* digits is loaded */
  CU_ASSERT_STRING_EQUAL(rec.msg, "");
  if (ready) protobuf_c_message_free_unpacked(&ready->base, NULL);

  CU_ASSERT_EQUAL(requests(TPU_CODE_OK) - ok, 3);
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 0);
  run_a_little();
  CU_ASSERT_EQUAL(rec.responds, 1); /* nothing more came through the queue */
  CU_ASSERT_EQUAL(rec.untracks, 0);
  teardown();
}

static void test_unknown_method(void) {
  setup();
  uint64_t n = requests(TPU_CODE_UNIMPLEMENTED);
  int methods[] = {999, 0, -1};
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    rec_reset(&rec);
    tpu__request_t r = request(methods[i], NULL);
    tpu__dispatch(&rec.o, &r);
    CU_ASSERT_STRING_EQUAL(rec.events, "R");
    CU_ASSERT_EQUAL(rec.code, TPU_CODE_UNIMPLEMENTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(rec.msg, "is not served"));
    CU_ASSERT_PTR_NULL(rec.desc);
    CU_ASSERT_EQUAL(rec.id, r.id); /* answered by its id: the connection goes on */
  }
  CU_ASSERT_EQUAL(requests(TPU_CODE_UNIMPLEMENTED) - n, 3);
  teardown();
}

static void test_draining(void) {
  setup();
  atomic_store(&srv->draining, 1);
  /* Reads are still answered: no new work is taken, but a client may look around. */
  tpu__request_t r = metadata_request("digits", "");
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);

  /* Health checks are still answered: live, and not ready (why: the note). */
  rec_reset(&rec);
  r = request(TPUD__METHOD__SERVER_LIVE, NULL);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  Inference__ServerLiveResponse *live =
      (Inference__ServerLiveResponse *)answer(&rec, &inference__server_live_response__descriptor);
  CU_ASSERT(live && live->live);
  if (live) protobuf_c_message_free_unpacked(&live->base, NULL);
  rec_reset(&rec);
  r = request(TPUD__METHOD__SERVER_READY, NULL);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  CU_ASSERT_PTR_NOT_NULL(strstr(rec.msg, "shutting down"));
  Inference__ServerReadyResponse *ready = (Inference__ServerReadyResponse *)answer(
      &rec, &inference__server_ready_response__descriptor);
  CU_ASSERT(ready && !ready->ready);
  if (ready) protobuf_c_message_free_unpacked(&ready->base, NULL);

  /* A call that would compute is refused before it reaches the batcher. */
  rec_reset(&rec);
  Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
  q.model_name = "digits";
  r = request(TPUD__METHOD__MODEL_INFER, &q.base);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_UNAVAILABLE);
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 0);
  teardown();
}

static void test_bad_payload(void) {
  setup();
  uint64_t n = requests(TPU_CODE_INVALID_ARGUMENT);
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff};
  tpu__request_t r = request(TPUD__METHOD__MODEL_METADATA, NULL);
  r.payload = junk;
  r.payload_len = sizeof junk;
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_NOT_EQUAL(rec.msg[0], 0); /* says what did not decode */
  CU_ASSERT_PTR_NULL(rec.desc);
  /* The same for a call that would compute: nothing reaches the batcher. */
  rec_reset(&rec);
  r = request(TPUD__METHOD__MODEL_INFER, NULL);
  r.payload = junk;
  r.payload_len = sizeof junk;
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(requests(TPU_CODE_INVALID_ARGUMENT) - n, 2);
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 0);
  teardown();
}

/* A front end's own decoder (HTTP's JSON) in place of the protobuf payload. */
static int decode_refuses(const tpu__request_t *r, ProtobufCMessage **msg, char *err,
                          size_t errlen) {
  snprintf(err, errlen, "body: expected a JSON object, got %zu bytes of something else",
           r->body_len);
  return TPU_CODE_INVALID_ARGUMENT;
}

static int decode_metadata(const tpu__request_t *r, ProtobufCMessage **msg, char *err,
                           size_t errlen) {
  /* An unpacked message, as the decoder's contract says (freed with
   * protobuf_c_message_free_unpacked). */
  Inference__ModelMetadataRequest q = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  q.name = (char *)r->body;
  uint8_t buf[256];
  size_t len = protobuf_c_message_pack(&q.base, buf);
  *msg = protobuf_c_message_unpack(&inference__model_metadata_request__descriptor, NULL, len, buf);
  return *msg ? TPU_CODE_OK : TPU_CODE_RESOURCE_EXHAUSTED;
}

static void test_front_end_decoder(void) {
  setup();
  tpu__request_t r = request(TPUD__METHOD__MODEL_METADATA, NULL);
  r.decode = decode_refuses;
  r.body = "[1,2";
  r.body_len = 4;
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_STRING_EQUAL(rec.msg, "body: expected a JSON object, got 4 bytes of something else");
  rec_reset(&rec);
  r = request(TPUD__METHOD__MODEL_METADATA, NULL);
  r.decode = decode_metadata;
  r.body = "digits";
  r.body_len = 6;
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  Inference__ModelMetadataResponse *md = (Inference__ModelMetadataResponse *)answer(
      &rec, &inference__model_metadata_response__descriptor);
  CU_ASSERT(md && strcmp(md->name, "digits") == 0);
  if (md) protobuf_c_message_free_unpacked(&md->base, NULL);
  teardown();
}

static void test_model_metadata(void) {
  setup();
  tpu__request_t r = metadata_request("digits", "");
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  Inference__ModelMetadataResponse *md = (Inference__ModelMetadataResponse *)answer(
      &rec, &inference__model_metadata_response__descriptor);
  if (md) {
    CU_ASSERT_STRING_EQUAL(md->name, "digits");
    CU_ASSERT_STRING_EQUAL(md->platform, "tpud");
    CU_ASSERT_EQUAL(md->n_versions, 1);
    if (md->n_versions == 1) CU_ASSERT_STRING_EQUAL(md->versions[0], "1");
    CU_ASSERT_EQUAL_FATAL(md->n_inputs, 1);
    CU_ASSERT_STRING_EQUAL(md->inputs[0]->name, "x");
    CU_ASSERT_STRING_EQUAL(md->inputs[0]->datatype, "FP32");
    CU_ASSERT(md->inputs[0]->n_shape == 2 && md->inputs[0]->shape[0] == -1 &&
              md->inputs[0]->shape[1] == 64);
    CU_ASSERT_EQUAL_FATAL(md->n_outputs, 1);
    CU_ASSERT_STRING_EQUAL(md->outputs[0]->name, "probs");
    CU_ASSERT(md->outputs[0]->n_shape == 2 && md->outputs[0]->shape[1] == 10);
    protobuf_c_message_free_unpacked(&md->base, NULL);
  }
  /* The version it serves, by number. */
  rec_reset(&rec);
  r = metadata_request("digits", "1");
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);

  uint64_t nf = requests(TPU_CODE_NOT_FOUND);
  const char *unknown[][2] = {{"nosuchmodel", ""}, {"digits", "7"}, {"digits", "x"}};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    rec_reset(&rec);
    r = metadata_request(unknown[i][0], unknown[i][1]);
    tpu__dispatch(&rec.o, &r);
    CU_ASSERT_STRING_EQUAL(rec.events, "R");
    CU_ASSERT_EQUAL(rec.code, TPU_CODE_NOT_FOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(rec.msg, unknown[i][0])); /* names what was not found */
    CU_ASSERT_PTR_NULL(rec.desc);
  }
  CU_ASSERT_EQUAL(requests(TPU_CODE_NOT_FOUND) - nf, 3);
  rec_reset(&rec);
  r = metadata_request("", "");
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_STRING_EQUAL(rec.msg, "no model name given");
  teardown();
}

/* More than one authorization value is refused even with access control off. */
static void test_two_authorizations(void) {
  setup();
  tpu__request_t r = metadata_request("digits", "");
  r.authz = "Bearer a";
  r.authz_len = 8;
  r.n_authz = 2;
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(rec.msg, "authorization values"));
  teardown();
}

/* ---- ModelInfer: through the batcher and back through the queue ---- */

#define ROWS 5

static float infer_x[ROWS * 64], want_p[ROWS * 10];

/* The first ROWS digits of tests/data with scikit-learn's probabilities for them. */
static void load_rows(void) {
  uint8_t xu[ROWS * 64];
  FILE *f = fopen(TPU_SOURCE_DIR "/tests/data/digits_x.u8", "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL_FATAL(fread(xu, 1, sizeof xu, f), sizeof xu);
  fclose(f);
  for (size_t i = 0; i < ROWS * 64; i++) infer_x[i] = xu[i];
  f = fopen(TPU_SOURCE_DIR "/tests/data/digits_proba.f32", "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL_FATAL(fread(want_p, sizeof(float), ROWS * 10, f), ROWS * 10);
  fclose(f);
}

/* A ModelInfer of `rows` rows of infer_x (rows = 0: an empty batch). */
static tpu__request_t infer_request(const char *model, size_t rows, int64_t width) {
  Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor t =
      INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
  int64_t shape[2] = {(int64_t)rows, width};
  t.name = "x";
  t.datatype = "FP32";
  t.n_shape = 2;
  t.shape = shape;
  Inference__ModelInferRequest__InferInputTensor *ins[] = {&t};
  ProtobufCBinaryData raw = {.len = rows * (size_t)width * sizeof(float),
                             .data = (uint8_t *)infer_x};
  q.model_name = (char *)model;
  q.id = "req-7";
  q.n_inputs = 1;
  q.inputs = ins;
  q.n_raw_input_contents = 1;
  q.raw_input_contents = &raw;
  tpu__request_t r = request(TPUD__METHOD__MODEL_INFER, &q.base);
  r.model = model;
  return r;
}

static void test_infer(void) {
  setup();
  load_rows();
  uint64_t ok = requests(TPU_CODE_OK), mok = model_requests(TPU_CODE_OK);
  uint64_t buffered = tpu_stats_get(&tpu_stats.buffered_bytes);
  tpu__request_t r = infer_request("digits", ROWS, 64);
  tpu__dispatch(&rec.o, &r);
  /* Handed to the batcher: tracked, not answered, its answer's budget reserved. */
  CU_ASSERT_STRING_EQUAL(rec.events, "T");
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 1);
  CU_ASSERT_PTR_NOT_NULL(rec.tracked);
  CU_ASSERT_TRUE(tpu_stats_get(&tpu_stats.buffered_bytes) > buffered);
  CU_ASSERT_EQUAL_FATAL(run_until(&rec.untracks, 1), 0);
  /* Back through the queue: answered, then forgotten. */
  CU_ASSERT_STRING_EQUAL(rec.events, "TRU");
  CU_ASSERT_TRUE(rec.untrack_same);
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  CU_ASSERT_EQUAL(rec.id, r.id);
  CU_ASSERT_PTR_EQUAL(rec.slot, &slot_marker);
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 0);
  CU_ASSERT_EQUAL(tpu_stats_get(&tpu_stats.buffered_bytes), buffered); /* given back */
  CU_ASSERT_EQUAL(requests(TPU_CODE_OK) - ok, 1);
  CU_ASSERT_EQUAL(model_requests(TPU_CODE_OK) - mok, 1);
  Inference__ModelInferResponse *resp = (Inference__ModelInferResponse *)answer(
      &rec, &inference__model_infer_response__descriptor);
  CU_ASSERT_PTR_NOT_NULL_FATAL(resp);
  CU_ASSERT_STRING_EQUAL(resp->model_name, "digits");
  CU_ASSERT_STRING_EQUAL(resp->model_version, "1");
  CU_ASSERT_STRING_EQUAL(resp->id, "req-7");
  CU_ASSERT_EQUAL(resp->n_outputs, 1);
  if (resp->n_outputs == 1) {
    CU_ASSERT_STRING_EQUAL(resp->outputs[0]->name, "probs");
    CU_ASSERT_STRING_EQUAL(resp->outputs[0]->datatype, "FP32");
    CU_ASSERT(resp->outputs[0]->n_shape == 2 && resp->outputs[0]->shape[0] == ROWS &&
              resp->outputs[0]->shape[1] == 10);
  }
  CU_ASSERT_EQUAL(resp->n_raw_output_contents, 1);
  if (resp->n_raw_output_contents == 1 &&
      resp->raw_output_contents[0].len == ROWS * 10 * sizeof(float)) {
    float p[ROWS * 10];
    memcpy(p, resp->raw_output_contents[0].data, sizeof p);
    for (size_t i = 0; i < ROWS * 10; i++) { /* as tests/server/models checks the model */
      double d = (double)p[i] - want_p[i];
      if (d > 1e-4 || d < -1e-4) {
        printf("\n  row %zu output %zu: %g, want %g\n", i / 10, i % 10, p[i], want_p[i]);
        CU_FAIL("infer output differs from the reference");
        break;
      }
    }
  } else {
    CU_FAIL("want one raw output of ROWS x 10 FP32");
  }
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  run_a_little();
  CU_ASSERT_STRING_EQUAL(rec.events, "TRU"); /* once */
  teardown();
}

/* The client went away while its call computed: no answer, but the origin still forgets it
 * (the front end lingers a closed connection until its last untrack), and it is counted. */
static void test_infer_origin_closed(void) {
  setup();
  load_rows();
  uint64_t ok = requests(TPU_CODE_OK);
  uint64_t buffered = tpu_stats_get(&tpu_stats.buffered_bytes);
  tpu__request_t r = infer_request("digits", ROWS, 64);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "T");
  rec.o.closed = 1; /* before the loop can run the completion */
  CU_ASSERT_EQUAL_FATAL(run_until(&rec.untracks, 1), 0);
  CU_ASSERT_STRING_EQUAL(rec.events, "TU");
  CU_ASSERT_EQUAL(rec.responds, 0);
  CU_ASSERT_TRUE(rec.untrack_same);
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 0);
  CU_ASSERT_EQUAL(tpu_stats_get(&tpu_stats.buffered_bytes), buffered);
  CU_ASSERT_EQUAL(requests(TPU_CODE_OK) - ok, 1); /* counted, not sent */

  /* As a front end closes: the calls in flight get their cancel flag too. Here the compute has
   * finished (its completion is on the I/O queue) when the client goes: the answer was not
   * delivered, so it counts CANCELLED, not OK. */
  uint64_t cancelled = requests(TPU_CODE_CANCELLED);
  ok = requests(TPU_CODE_OK);
  rec_reset(&rec);
  rec.o.closed = 0;
  r = infer_request("digits", ROWS, 64);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL_FATAL(rec.events, "T");
  struct pollfd pfd = {.fd = tpu_queue_fd(&io->queue), .events = POLLIN};
  CU_ASSERT_EQUAL_FATAL(poll(&pfd, 1, 10000), 1); /* the completion is queued, not yet run */
  rec.o.closed = 1;
  atomic_store(&rec.tracked->cancel, 1);
  CU_ASSERT_EQUAL_FATAL(run_until(&rec.untracks, 1), 0);
  CU_ASSERT_EQUAL(rec.responds, 0);
  CU_ASSERT_EQUAL(requests(TPU_CODE_CANCELLED) - cancelled, 1);
  CU_ASSERT_EQUAL(requests(TPU_CODE_OK) - ok, 0);
  teardown();
}

/* Calls refused before the batcher are answered at once and never tracked; an empty batch is
 * answered at once too, with an empty result. */
static void test_infer_answered_at_once(void) {
  setup();
  load_rows();
  struct {
    const char *model;
    size_t rows;
    int64_t width;
    int code;
    const char *says;
  } cases[] = {
      {"nosuchmodel", 1, 64, TPU_CODE_NOT_FOUND, "nosuchmodel"},
      {"", 1, 64, TPU_CODE_INVALID_ARGUMENT, "no model name given"},
      {"digits", 2, 63, TPU_CODE_INVALID_ARGUMENT, "64"}, /* says the width it expected */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rec_reset(&rec);
    tpu__request_t r = infer_request(cases[i].model, cases[i].rows, cases[i].width);
    tpu__dispatch(&rec.o, &r);
    CU_ASSERT_STRING_EQUAL(rec.events, "R");
    CU_ASSERT_EQUAL(rec.code, cases[i].code);
    if (!strstr(rec.msg, cases[i].says)) {
      printf("\n  case %zu: \"%s\" does not say \"%s\"\n", i, rec.msg, cases[i].says);
      CU_FAIL("refusal does not say why");
    }
    CU_ASSERT_PTR_NULL(rec.desc);
  }
  rec_reset(&rec);
  tpu__request_t r = infer_request("digits", 0, 64);
  tpu__dispatch(&rec.o, &r);
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OK);
  Inference__ModelInferResponse *resp = (Inference__ModelInferResponse *)answer(
      &rec, &inference__model_infer_response__descriptor);
  if (resp) {
    CU_ASSERT(resp->n_outputs == 1 && resp->outputs[0]->n_shape == 2 &&
              resp->outputs[0]->shape[0] == 0 && resp->outputs[0]->shape[1] == 10);
    CU_ASSERT(resp->n_raw_output_contents == 1 && resp->raw_output_contents[0].len == 0);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
  }
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 0);
  run_a_little();
  CU_ASSERT_EQUAL(rec.untracks, 0);
  teardown();
}

/* ---- refusals a front end makes before dispatch ---- */

static void test_refuse(void) {
  setup();
  uint64_t inval = requests(TPU_CODE_INVALID_ARGUMENT), exh = requests(TPU_CODE_RESOURCE_EXHAUSTED);
  uint64_t minval = model_requests(TPU_CODE_INVALID_ARGUMENT);
  tpu__request_t r = request(TPUD__METHOD__MODEL_INFER, NULL);
  r.model = "digits"; /* what the front end knew before decoding: counted against it */
  tpu__dispatch_refuse(&rec.o, &r, TPU_CODE_INVALID_ARGUMENT, "a malformed gRPC call");
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_INVALID_ARGUMENT);
  CU_ASSERT_STRING_EQUAL(rec.msg, "a malformed gRPC call");
  CU_ASSERT_EQUAL(rec.id, r.id);
  CU_ASSERT_PTR_EQUAL(rec.slot, &slot_marker);
  CU_ASSERT_PTR_NULL(rec.desc);
  CU_ASSERT_EQUAL(requests(TPU_CODE_INVALID_ARGUMENT) - inval, 1);
  CU_ASSERT_EQUAL(model_requests(TPU_CODE_INVALID_ARGUMENT) - minval, 1);
  /* OVERLOADED reaches the origin as itself (HTTP answers it 503) and is counted as the
   * RESOURCE_EXHAUSTED the other protocols send. A method tpud does not serve is refused the
   * same way. */
  rec_reset(&rec);
  r = request(12345, NULL);
  tpu__dispatch_refuse(&rec.o, &r, TPU_CODE_OVERLOADED, "server busy");
  CU_ASSERT_STRING_EQUAL(rec.events, "R");
  CU_ASSERT_EQUAL(rec.code, TPU_CODE_OVERLOADED);
  CU_ASSERT_STRING_EQUAL(rec.msg, "server busy");
  CU_ASSERT_EQUAL(requests(TPU_CODE_RESOURCE_EXHAUSTED) - exh, 1);
  /* Closed: counted, never sent. */
  rec_reset(&rec);
  rec.o.closed = 1;
  r = request(TPUD__METHOD__SERVER_LIVE, NULL);
  tpu__dispatch_refuse(&rec.o, &r, TPU_CODE_INVALID_ARGUMENT, "bad frame");
  CU_ASSERT_EQUAL(rec.responds, 0);
  CU_ASSERT_EQUAL(requests(TPU_CODE_INVALID_ARGUMENT) - inval, 2);
  CU_ASSERT_EQUAL(atomic_load(&srv->inflight), 0);
  teardown();
}

TPU_TEST_SUITE(dispatch,
               {"server_live_and_metadata", test_server_live_and_metadata},
               {"unknown_method", test_unknown_method},
               {"draining", test_draining},
               {"bad_payload", test_bad_payload},
               {"front_end_decoder", test_front_end_decoder},
               {"model_metadata", test_model_metadata},
               {"two_authorizations", test_two_authorizations},
               {"infer", test_infer},
               {"infer_origin_closed", test_infer_origin_closed},
               {"infer_answered_at_once", test_infer_answered_at_once},
               {"refuse", test_refuse})
