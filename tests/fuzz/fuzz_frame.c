/*
 * fuzz_frame.c - libFuzzer target: the native protocol's byte layer, frames to messages.
 *
 * DESIGN
 * Input: byte 0 picks the decoder's max message size, byte 1 seeds the split of the rest (the
 * stream) into chunks. The stream is decoded twice: in one chunk (the reference) and in the
 * chosen split; the two must give the same frames, byte for byte, and the same final status,
 * so a bug that depends on where a read() boundary falls shows up as a difference, not only as
 * a crash. Every frame is then decoded as a request envelope (payload unpacked as its method's
 * request, and the envelope re-encoded and decoded again: the round trip must keep id, method,
 * timeout, metadata and payload) and as a response envelope (payload unpacked as every
 * method's response).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_envelope.h"
#include "tpu_frame.h"

#define MAX_FRAMES 64

typedef struct {
  size_t n;
  size_t len[MAX_FRAMES];
  uint8_t *data[MAX_FRAMES];
  tpu_proto_status_t end; /* status the stream ended with (after finish) */
} frames_t;

static void frames_clear(frames_t *f) {
  for (size_t i = 0; i < f->n; i++) free(f->data[i]);
  f->n = 0;
}

static uint32_t next_rand(uint32_t *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 16;
}

/* Decodes stream[0..len) with chunks of 1..max_chunk bytes (max_chunk 0: one chunk). */
static void decode(const uint8_t *stream, size_t len, size_t max_message, uint32_t seed,
                   size_t max_chunk, frames_t *out) {
  tpu_frame_decoder_t *dec;
  memset(out, 0, sizeof *out);
  if (tpu_frame_decoder_create(max_message, &dec) != TPU_PROTO_OK) abort();
  size_t off = 0;
  tpu_proto_status_t st = TPU_PROTO_OK;
  while (off < len) {
    size_t chunk = len - off;
    if (max_chunk) {
      size_t c = 1 + next_rand(&seed) % max_chunk;
      if (c < chunk) chunk = c;
    }
    /* Copy the chunk so a frame handed out in place points into a buffer of exactly this size:
     * ASan then catches any read past the chunk. */
    uint8_t *copy = malloc(chunk ? chunk : 1);
    memcpy(copy, stream + off, chunk);
    size_t pos = 0;
    while (pos < chunk) {
      size_t used;
      tpu_frame_t fr;
      tpu_proto_error_t err;
      st = tpu_frame_decoder_feed(dec, copy + pos, chunk - pos, &used, &fr, &err);
      if (used > chunk - pos) abort();
      pos += used;
      if (st == TPU_PROTO_EAGAIN) {
        if (pos != chunk) abort(); /* EAGAIN promises every byte was consumed */
        break;
      }
      if (st != TPU_PROTO_OK) {
        if (err.status != st || !memchr(err.msg, 0, sizeof err.msg)) abort();
        break;
      }
      if (!fr.data) abort();
      if (out->n < MAX_FRAMES) {
        out->data[out->n] = malloc(fr.len ? fr.len : 1);
        memcpy(out->data[out->n], fr.data, fr.len); /* ASan: the frame must be readable */
        out->len[out->n++] = fr.len;
      }
    }
    free(copy);
    if (st != TPU_PROTO_OK && st != TPU_PROTO_EAGAIN) break;
    off += chunk;
  }
  tpu_proto_error_t err;
  out->end = tpu_frame_decoder_finish(dec, &err);
  if (tpu_frame_decoder_capacity(dec) > max_message + 4096) abort();
  tpu_frame_decoder_free(dec);
}

static int metadata_equal(const Tpud__RequestEnvelope *a, const Tpud__RequestEnvelope *b) {
  if (a->n_metadata != b->n_metadata) return 0;
  for (size_t i = 0; i < a->n_metadata; i++) {
    const char *ak = a->metadata[i]->key ? a->metadata[i]->key : "";
    const char *av = a->metadata[i]->value ? a->metadata[i]->value : "";
    const char *bk = b->metadata[i]->key ? b->metadata[i]->key : "";
    const char *bv = b->metadata[i]->value ? b->metadata[i]->value : "";
    if (strcmp(ak, bk) || strcmp(av, bv)) return 0;
  }
  return 1;
}

static void check_request(const uint8_t *msg, size_t len) {
  Tpud__RequestEnvelope *env;
  tpu_proto_error_t err;
  tpu_proto_status_t st = tpu_envelope_decode_request(msg, len, 1 << 20, &env, &err);
  if (st != TPU_PROTO_OK) {
    if (env || err.status != st) abort();
    return;
  }
  (void)tpu_envelope_request_metadata(env, "authorization");
  ProtobufCMessage *payload;
  if (tpu_envelope_unpack_request_payload(env, &payload, &err) == TPU_PROTO_OK) {
    /* Pack it again: protobuf-c must be able to serialize whatever it unpacked. */
    size_t n = protobuf_c_message_get_packed_size(payload);
    uint8_t *buf = malloc(n ? n : 1);
    if (protobuf_c_message_pack(payload, buf) != n) abort();
    free(buf);
    protobuf_c_message_free_unpacked(payload, NULL);
  }

  /* Round trip: encode the decoded envelope, decode it again, compare. */
  const char **md = calloc(env->n_metadata * 2 + 1, sizeof *md);
  for (size_t i = 0; i < env->n_metadata; i++) {
    md[2 * i] = env->metadata[i]->key ? env->metadata[i]->key : "";
    md[2 * i + 1] = env->metadata[i]->value;
  }
  tpu_envelope_request_t req = {.id = env->id,
                                .method = env->method,
                                .timeout_us = env->timeout_us,
                                .metadata = md,
                                .n_metadata = env->n_metadata,
                                .payload = env->payload.data,
                                .payload_len = env->payload.len};
  uint8_t *frame;
  size_t frame_len;
  st = tpu_envelope_encode_request_alloc(&req, &frame, &frame_len, &err);
  if (st != TPU_PROTO_OK) abort(); /* a decoded envelope is always encodable */
  uint32_t body_len;
  if (tpu_frame_parse_header(frame, 0, &body_len, &err) != TPU_PROTO_OK) abort();
  if ((size_t)body_len + TPU_FRAME_HEADER_SIZE != frame_len) abort();
  Tpud__RequestEnvelope *again;
  if (tpu_envelope_decode_request(frame + TPU_FRAME_HEADER_SIZE, body_len, 1 << 20, &again,
                                  &err) != TPU_PROTO_OK)
    abort();
  if (again->id != env->id || again->method != env->method ||
      again->timeout_us != env->timeout_us || again->payload.len != env->payload.len ||
      (env->payload.len &&
       memcmp(again->payload.data, env->payload.data, env->payload.len) != 0) ||
      !metadata_equal(env, again))
    abort();
  tpu_envelope_request_free(again);
  free(frame);
  free(md);
  tpu_envelope_request_free(env);
}

static void check_response(const uint8_t *msg, size_t len) {
  Tpud__ResponseEnvelope *env;
  tpu_proto_error_t err;
  tpu_proto_status_t st = tpu_envelope_decode_response(msg, len, 1 << 20, &env, &err);
  if (st != TPU_PROTO_OK) {
    if (env || err.status != st) abort();
    return;
  }
  for (int m = 0; m <= 11; m++) {
    ProtobufCMessage *payload;
    st = tpu_envelope_unpack_response_payload(env, m, &payload, &err);
    if (st == TPU_PROTO_OK) protobuf_c_message_free_unpacked(payload, NULL);
    else if (payload) abort();
  }
  tpu_envelope_response_free(env);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  static const size_t max_messages[4] = {16, 300, 4096, 1 << 20};
  size_t max_message = max_messages[data[0] & 3];
  uint32_t seed = data[1];
  size_t max_chunk = 1 + (data[0] >> 2); /* 1..64 */
  data += 2;
  size -= 2;

  frames_t whole, split;
  decode(data, size, max_message, seed, 0, &whole);
  decode(data, size, max_message, seed, max_chunk, &split);
  /* The split must not change what comes out. */
  if (whole.n != split.n || whole.end != split.end) abort();
  for (size_t i = 0; i < whole.n; i++)
    if (whole.len[i] != split.len[i] || memcmp(whole.data[i], split.data[i], whole.len[i]) != 0)
      abort();

  for (size_t i = 0; i < whole.n; i++) {
    check_request(whole.data[i], whole.len[i]);
    check_response(whole.data[i], whole.len[i]);
  }
  frames_clear(&whole);
  frames_clear(&split);
  return 0;
}
