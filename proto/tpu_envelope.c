/*
 * tpu_envelope.c - request/response envelopes: the method table, encoding and decoding.
 *
 * DESIGN
 * Decoding goes through protobuf-c (tpud__*_envelope__unpack) and then checks the things proto3
 * leaves open. Encoding is written out by hand instead of filling a Tpud__*Envelope and calling
 * protobuf-c's pack, for two reasons: the frame header and envelope land in one caller buffer
 * with no allocation (protobuf-c would need the metadata map as heap-allocated entry structs),
 * and a payload given as a ProtobufCMessage is packed directly into its final place instead of
 * into a temporary that pack would then copy. The layout written is exactly protobuf-c's
 * canonical one (fields in number order, proto3 defaults omitted); test_envelope.c checks it
 * byte for byte against protobuf_c_message_pack.
 *
 * Wire tags used below: (field number << 3) | wire type, wire type 0 = varint,
 * 2 = length-delimited. Every field number here is < 16, so each tag is one byte.
 */
#include "tpu_envelope.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_proto_int.h"

#define WT_VARINT 0
#define WT_LEN 2
#define TAG(field, wt) ((uint8_t)((field) << 3 | (wt)))

/* RequestEnvelope field numbers (tpud.proto). */
enum { REQ_ID = 1, REQ_METHOD = 2, REQ_TIMEOUT = 3, REQ_METADATA = 4, REQ_PAYLOAD = 5 };
/* ResponseEnvelope field numbers (tpud.proto). */
enum { RESP_ID = 1, RESP_CODE = 2, RESP_MESSAGE = 3, RESP_PAYLOAD = 4, RESP_METADATA = 5 };
/* map<string, string> entry field numbers (fixed by the protobuf spec). */
enum { ENTRY_KEY = 1, ENTRY_VALUE = 2 };

#define OIP_SERVICE "inference.GRPCInferenceService"
#define TPUD_SERVICE "tpud.TpudService"
#define HEALTH_SERVICE "grpc.health.v1.Health"

static const tpu_method_info_t method_table[] = {
    [TPUD__METHOD__SERVER_LIVE] = {TPUD__METHOD__SERVER_LIVE, "ServerLive", OIP_SERVICE,
                                   &inference__server_live_request__descriptor,
                                   &inference__server_live_response__descriptor},
    [TPUD__METHOD__SERVER_READY] = {TPUD__METHOD__SERVER_READY, "ServerReady", OIP_SERVICE,
                                    &inference__server_ready_request__descriptor,
                                    &inference__server_ready_response__descriptor},
    [TPUD__METHOD__MODEL_READY] = {TPUD__METHOD__MODEL_READY, "ModelReady", OIP_SERVICE,
                                   &inference__model_ready_request__descriptor,
                                   &inference__model_ready_response__descriptor},
    [TPUD__METHOD__SERVER_METADATA] = {TPUD__METHOD__SERVER_METADATA, "ServerMetadata",
                                       OIP_SERVICE,
                                       &inference__server_metadata_request__descriptor,
                                       &inference__server_metadata_response__descriptor},
    [TPUD__METHOD__MODEL_METADATA] = {TPUD__METHOD__MODEL_METADATA, "ModelMetadata", OIP_SERVICE,
                                      &inference__model_metadata_request__descriptor,
                                      &inference__model_metadata_response__descriptor},
    [TPUD__METHOD__MODEL_INFER] = {TPUD__METHOD__MODEL_INFER, "ModelInfer", OIP_SERVICE,
                                   &inference__model_infer_request__descriptor,
                                   &inference__model_infer_response__descriptor},
    [TPUD__METHOD__MODEL_LOAD] = {TPUD__METHOD__MODEL_LOAD, "ModelLoad", TPUD_SERVICE,
                                  &tpud__model_load_request__descriptor,
                                  &tpud__model_load_response__descriptor},
    [TPUD__METHOD__MODEL_UNLOAD] = {TPUD__METHOD__MODEL_UNLOAD, "ModelUnload", TPUD_SERVICE,
                                    &tpud__model_unload_request__descriptor,
                                    &tpud__model_unload_response__descriptor},
    [TPUD__METHOD__MATMUL] = {TPUD__METHOD__MATMUL, "MatMul", TPUD_SERVICE,
                              &tpud__mat_mul_request__descriptor,
                              &tpud__mat_mul_response__descriptor},
    [TPUD__METHOD__REPOSITORY_INDEX] = {TPUD__METHOD__REPOSITORY_INDEX, "RepositoryIndex",
                                        TPUD_SERVICE,
                                        &tpud__repository_index_request__descriptor,
                                        &tpud__repository_index_response__descriptor},
    [TPUD__METHOD__HEALTH_CHECK] = {TPUD__METHOD__HEALTH_CHECK, "Check", HEALTH_SERVICE,
                                    &grpc__health__v1__health_check_request__descriptor,
                                    &grpc__health__v1__health_check_response__descriptor},
    [TPUD__METHOD__OIP_REPOSITORY_INDEX] = {TPUD__METHOD__OIP_REPOSITORY_INDEX, "RepositoryIndex",
                                            OIP_SERVICE,
                                            &inference__repository_index_request__descriptor,
                                            &inference__repository_index_response__descriptor},
    [TPUD__METHOD__OIP_REPOSITORY_MODEL_LOAD] = {
        TPUD__METHOD__OIP_REPOSITORY_MODEL_LOAD, "RepositoryModelLoad", OIP_SERVICE,
        &inference__repository_model_load_request__descriptor,
        &inference__repository_model_load_response__descriptor},
    [TPUD__METHOD__OIP_REPOSITORY_MODEL_UNLOAD] = {
        TPUD__METHOD__OIP_REPOSITORY_MODEL_UNLOAD, "RepositoryModelUnload", OIP_SERVICE,
        &inference__repository_model_unload_request__descriptor,
        &inference__repository_model_unload_response__descriptor},
    [TPUD__METHOD__OIP_MODEL_CONFIG] = {TPUD__METHOD__OIP_MODEL_CONFIG, "ModelConfig", OIP_SERVICE,
                                        &inference__model_config_request__descriptor,
                                        &inference__model_config_response__descriptor},
    [TPUD__METHOD__OIP_MODEL_STATISTICS] = {TPUD__METHOD__OIP_MODEL_STATISTICS, "ModelStatistics",
                                            OIP_SERVICE,
                                            &inference__model_statistics_request__descriptor,
                                            &inference__model_statistics_response__descriptor},
};
#define N_METHODS (sizeof method_table / sizeof method_table[0])

const tpu_method_info_t *tpu_envelope_method_info(int method) {
  if (method <= 0 || (size_t)method >= N_METHODS) return NULL;
  return method_table[method].name ? &method_table[method] : NULL;
}

const char *tpu_envelope_code_name(int code) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&tpud__status_code__descriptor,
                                                                     code);
  return v ? v->name : NULL;
}

/* ---- wire writing ---- */

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
}

/* A varint field; proto3 omits zero. */
static size_t varint_field_size(uint64_t v) { return v ? 1 + varint_size(v) : 0; }

static uint8_t *put_varint_field(uint8_t *p, int field, uint64_t v) {
  if (!v) return p;
  *p++ = TAG(field, WT_VARINT);
  return put_varint(p, v);
}

/* A length-delimited field (string, bytes, message body); proto3 omits empty scalars. */
static size_t len_field_size(size_t len) { return len ? 1 + varint_size(len) + len : 0; }

static uint8_t *put_len_field(uint8_t *p, int field, const void *data, size_t len) {
  if (!len) return p;
  *p++ = TAG(field, WT_LEN);
  p = put_varint(p, len);
  memcpy(p, data, len);
  return p + len;
}

/* Body size of one map<string,string> entry: key = 1, value = 2, each omitted when empty. */
static size_t entry_body_size(const char *key, const char *value) {
  return len_field_size(strlen(key)) + len_field_size(value ? strlen(value) : 0);
}

static tpu_proto_status_t metadata_size(const char *const *md, size_t n, size_t *size,
                                        tpu_proto_error_t *err) {
  size_t total = 0;
  if (n && !md)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "%zu metadata entries announced but the metadata array is NULL", n);
  for (size_t i = 0; i < n; i++) {
    if (!md[2 * i])
      return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                              "metadata entry %zu has a NULL key: expected a string", i);
    size_t body = entry_body_size(md[2 * i], md[2 * i + 1]);
    total += 1 + varint_size(body) + body; /* entries are written even when empty */
  }
  *size = total;
  return TPU_PROTO_OK;
}

static uint8_t *put_metadata(uint8_t *p, int field, const char *const *md, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *key = md[2 * i], *value = md[2 * i + 1] ? md[2 * i + 1] : "";
    *p++ = TAG(field, WT_LEN);
    p = put_varint(p, entry_body_size(key, value));
    p = put_len_field(p, ENTRY_KEY, key, strlen(key));
    p = put_len_field(p, ENTRY_VALUE, value, strlen(value));
  }
  return p;
}

/* Payload: a message packed in place, or bytes copied. `len` is the precomputed size. */
static uint8_t *put_payload(uint8_t *p, int field, const ProtobufCMessage *msg,
                            const uint8_t *bytes, size_t len) {
  if (!len) return p;
  if (!msg) return put_len_field(p, field, bytes, len);
  *p++ = TAG(field, WT_LEN);
  p = put_varint(p, len);
  return p + protobuf_c_message_pack(msg, p);
}

static tpu_proto_status_t payload_size(const ProtobufCMessage *msg, const uint8_t *bytes,
                                       size_t len, size_t *out, tpu_proto_error_t *err) {
  if (msg) {
    *out = protobuf_c_message_get_packed_size(msg);
    return TPU_PROTO_OK;
  }
  if (len && !bytes)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "payload of %zu bytes announced but the payload pointer is NULL", len);
  *out = len;
  return TPU_PROTO_OK;
}

/* Checks the envelope fits a frame, then sets *frame_len and checks cap. */
static tpu_proto_status_t frame_fits(size_t env_len, size_t cap, size_t *frame_len,
                                     uint64_t id, tpu_proto_error_t *err) {
  if (env_len > UINT32_MAX)
    return tpu__proto_error(err, TPU_PROTO_ETOOBIG, id,
                            "envelope of %zu bytes does not fit a frame: the length field holds "
                            "at most %" PRIu32 " bytes",
                            env_len, UINT32_MAX);
  *frame_len = TPU_FRAME_HEADER_SIZE + env_len;
  if (cap < *frame_len)
    return tpu__proto_error(err, TPU_PROTO_ENOSPC, id,
                            "frame needs %zu bytes, the buffer holds %zu", *frame_len, cap);
  return TPU_PROTO_OK;
}

/* ---- encoding ---- */

tpu_proto_status_t tpu_envelope_encode_request(const tpu_envelope_request_t *req, uint8_t *buf,
                                               size_t cap, size_t *frame_len,
                                               tpu_proto_error_t *err) {
  tpu_proto_status_t st;
  if (!req || !frame_len || (!buf && cap))
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_encode_request: request and frame_len must not be "
                            "NULL, nor buf when cap > 0");
  *frame_len = 0;
  if (req->id == 0)
    return tpu__proto_error(err, TPU_PROTO_ENOID, 0,
                            "request has id 0: expected a non-zero id to match the response to");
  const tpu_method_info_t *info = tpu_envelope_method_info(req->method);
  if (!info)
    return tpu__proto_error(err, TPU_PROTO_EMETHOD, req->id,
                            "unknown method %d: expected a tpud.Method from 1 to %zu",
                            req->method, N_METHODS - 1);
  size_t md_len = 0, pl_len = 0;
  if ((st = metadata_size(req->metadata, req->n_metadata, &md_len, err)) != TPU_PROTO_OK ||
      (st = payload_size(req->payload_msg, req->payload, req->payload_len, &pl_len, err)) !=
          TPU_PROTO_OK)
    return st;
  size_t env_len = varint_field_size(req->id) + varint_field_size((uint64_t)req->method) +
                   varint_field_size(req->timeout_us) + md_len + len_field_size(pl_len);
  if ((st = frame_fits(env_len, cap, frame_len, req->id, err)) != TPU_PROTO_OK) return st;

  uint8_t *p = buf;
  tpu_frame_write_header(p, env_len, NULL); /* cannot fail: env_len was checked */
  p += TPU_FRAME_HEADER_SIZE;
  p = put_varint_field(p, REQ_ID, req->id);
  p = put_varint_field(p, REQ_METHOD, (uint64_t)req->method);
  p = put_varint_field(p, REQ_TIMEOUT, req->timeout_us);
  p = put_metadata(p, REQ_METADATA, req->metadata, req->n_metadata);
  p = put_payload(p, REQ_PAYLOAD, req->payload_msg, req->payload, pl_len);
  (void)p; /* p == buf + *frame_len: the sizes above and the writes mirror each other */
  return TPU_PROTO_OK;
}

tpu_proto_status_t tpu_envelope_encode_response(const tpu_envelope_response_t *resp, uint8_t *buf,
                                                size_t cap, size_t *frame_len,
                                                tpu_proto_error_t *err) {
  tpu_proto_status_t st;
  if (!resp || !frame_len || (!buf && cap))
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_encode_response: response and frame_len must not be "
                            "NULL, nor buf when cap > 0");
  *frame_len = 0;
  if (!tpu_envelope_code_name(resp->code))
    return tpu__proto_error(err, TPU_PROTO_ECODE, resp->id,
                            "status code %d is not a gRPC code: expected 0 (OK) to 16 "
                            "(UNAUTHENTICATED)",
                            resp->code);
  size_t md_len = 0, pl_len = 0, msg_len = resp->message ? strlen(resp->message) : 0;
  if ((st = metadata_size(resp->metadata, resp->n_metadata, &md_len, err)) != TPU_PROTO_OK ||
      (st = payload_size(resp->payload_msg, resp->payload, resp->payload_len, &pl_len, err)) !=
          TPU_PROTO_OK)
    return st;
  size_t env_len = varint_field_size(resp->id) + varint_field_size((uint64_t)resp->code) +
                   len_field_size(msg_len) + len_field_size(pl_len) + md_len;
  if ((st = frame_fits(env_len, cap, frame_len, resp->id, err)) != TPU_PROTO_OK) return st;

  uint8_t *p = buf;
  tpu_frame_write_header(p, env_len, NULL);
  p += TPU_FRAME_HEADER_SIZE;
  p = put_varint_field(p, RESP_ID, resp->id);
  p = put_varint_field(p, RESP_CODE, (uint64_t)resp->code);
  p = put_len_field(p, RESP_MESSAGE, resp->message, msg_len);
  p = put_payload(p, RESP_PAYLOAD, resp->payload_msg, resp->payload, pl_len);
  p = put_metadata(p, RESP_METADATA, resp->metadata, resp->n_metadata);
  (void)p;
  return TPU_PROTO_OK;
}

/* The allocating encoders run a sizing pass with cap 0, which always ends in ENOSPC (a frame is
 * at least 5 bytes) and reports the size, unless the envelope itself is invalid. This turns the
 * sizing pass's outcome into a buffer of the right size, or into the caller's error. */
static tpu_proto_status_t alloc_frame(tpu_proto_status_t sizing, const tpu_proto_error_t *sizing_err,
                                      size_t frame_len, uint8_t **frame,
                                      tpu_proto_error_t *err) {
  if (sizing != TPU_PROTO_ENOSPC) {
    if (err) *err = *sizing_err;
    return sizing;
  }
  if (!(*frame = malloc(frame_len)))
    return tpu__proto_error(err, TPU_PROTO_ENOMEM, sizing_err->request_id,
                            "out of memory for a %zu-byte frame", frame_len);
  return TPU_PROTO_OK;
}

tpu_proto_status_t tpu_envelope_encode_request_alloc(const tpu_envelope_request_t *req,
                                                     uint8_t **frame, size_t *frame_len,
                                                     tpu_proto_error_t *err) {
  tpu_proto_error_t sizing_err;
  tpu_proto_status_t st;
  if (!frame || !frame_len)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_encode_request_alloc: frame and frame_len must not "
                            "be NULL");
  *frame = NULL;
  st = tpu_envelope_encode_request(req, NULL, 0, frame_len, &sizing_err);
  if ((st = alloc_frame(st, &sizing_err, *frame_len, frame, err)) != TPU_PROTO_OK) return st;
  if ((st = tpu_envelope_encode_request(req, *frame, *frame_len, frame_len, err)) !=
      TPU_PROTO_OK) {
    free(*frame);
    *frame = NULL;
  }
  return st;
}

tpu_proto_status_t tpu_envelope_encode_response_alloc(const tpu_envelope_response_t *resp,
                                                      uint8_t **frame, size_t *frame_len,
                                                      tpu_proto_error_t *err) {
  tpu_proto_error_t sizing_err;
  tpu_proto_status_t st;
  if (!frame || !frame_len)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_encode_response_alloc: frame and frame_len must not "
                            "be NULL");
  *frame = NULL;
  st = tpu_envelope_encode_response(resp, NULL, 0, frame_len, &sizing_err);
  if ((st = alloc_frame(st, &sizing_err, *frame_len, frame, err)) != TPU_PROTO_OK) return st;
  if ((st = tpu_envelope_encode_response(resp, *frame, *frame_len, frame_len, err)) !=
      TPU_PROTO_OK) {
    free(*frame);
    *frame = NULL;
  }
  return st;
}

/* ---- decoding ---- */

tpu_proto_status_t tpu_envelope_decode_request(const uint8_t *msg, size_t len, size_t max_payload,
                                               Tpud__RequestEnvelope **out,
                                               tpu_proto_error_t *err) {
  if (out) *out = NULL;
  if (!out || (!msg && len))
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_decode_request: out must not be NULL, nor msg when "
                            "len > 0");
  Tpud__RequestEnvelope *env = tpud__request_envelope__unpack(NULL, len, msg);
  if (!env)
    return tpu__proto_error(err, TPU_PROTO_EDECODE, 0,
                            "frame of %zu bytes is not a valid tpud.RequestEnvelope protobuf "
                            "message",
                            len);
  tpu_proto_status_t st;
  const tpu_method_info_t *info;
  if (env->id == 0) {
    st = tpu__proto_error(err, TPU_PROTO_ENOID, 0,
                          "request envelope has no id: expected a non-zero id (field 1) to "
                          "match the response to");
    goto fail;
  }
  if (!(info = tpu_envelope_method_info(env->method))) {
    st = tpu__proto_error(err, TPU_PROTO_EMETHOD, env->id,
                          "request %" PRIu64 " names unknown method %d: expected a tpud.Method "
                          "from 1 to %zu",
                          env->id, (int)env->method, N_METHODS - 1);
    goto fail;
  }
  if (env->payload.len > max_payload) {
    st = tpu__proto_error(err, TPU_PROTO_EPAYLOAD, env->id,
                          "request %" PRIu64 " (%s): payload of %zu bytes exceeds the limit of "
                          "%zu bytes",
                          env->id, info->name, env->payload.len, max_payload);
    goto fail;
  }
  *out = env;
  return TPU_PROTO_OK;
fail:
  tpud__request_envelope__free_unpacked(env, NULL);
  return st;
}

void tpu_envelope_request_free(Tpud__RequestEnvelope *env) {
  if (env) tpud__request_envelope__free_unpacked(env, NULL);
}

tpu_proto_status_t tpu_envelope_decode_response(const uint8_t *msg, size_t len,
                                                size_t max_payload, Tpud__ResponseEnvelope **out,
                                                tpu_proto_error_t *err) {
  if (out) *out = NULL;
  if (!out || (!msg && len))
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_decode_response: out must not be NULL, nor msg when "
                            "len > 0");
  Tpud__ResponseEnvelope *env = tpud__response_envelope__unpack(NULL, len, msg);
  if (!env)
    return tpu__proto_error(err, TPU_PROTO_EDECODE, 0,
                            "frame of %zu bytes is not a valid tpud.ResponseEnvelope protobuf "
                            "message",
                            len);
  tpu_proto_status_t st;
  if (!tpu_envelope_code_name(env->code)) {
    st = tpu__proto_error(err, TPU_PROTO_ECODE, env->id,
                          "response %" PRIu64 " carries status code %d: expected a gRPC code "
                          "from 0 to 16",
                          env->id, (int)env->code);
    goto fail;
  }
  if (env->payload.len > max_payload) {
    st = tpu__proto_error(err, TPU_PROTO_EPAYLOAD, env->id,
                          "response %" PRIu64 ": payload of %zu bytes exceeds the limit of %zu "
                          "bytes",
                          env->id, env->payload.len, max_payload);
    goto fail;
  }
  *out = env;
  return TPU_PROTO_OK;
fail:
  tpud__response_envelope__free_unpacked(env, NULL);
  return st;
}

void tpu_envelope_response_free(Tpud__ResponseEnvelope *env) {
  if (env) tpud__response_envelope__free_unpacked(env, NULL);
}

static int wire_varint(const uint8_t *p, size_t n, size_t *off, uint64_t *v) {
  *v = 0;
  for (unsigned shift = 0; shift < 64 && *off < n; shift += 7) {
    uint8_t b = p[(*off)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 1;
  }
  return 0;
}

/*
 * proto3 says a string field holds UTF-8, and tpud keeps names as C strings, which a NUL byte
 * would silently cut ("digits\0evil" read as "digits"); protobuf-c checks neither and drops
 * the length. So before unpacking, walk the wire bytes with the message's descriptor and check
 * every string field, following message fields (and map entries) down. Returns 0, or -1 with
 * `why` naming the field and the fault. Bytes that are not well-formed protobuf are left to
 * protobuf_c_message_unpack, which rejects them with its own error.
 */
static int check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t n,
                         int depth, char *why, size_t whylen) {
  size_t off = 0;
  while (off < n) {
    uint64_t tag, v;
    if (!wire_varint(p, n, &off, &tag)) return 0;
    switch (tag & 7) {
    case 0:
      if (!wire_varint(p, n, &off, &v)) return 0;
      break;
    case 1:
      off += 8;
      break;
    case 5:
      off += 4;
      break;
    case 2: {
      if (!wire_varint(p, n, &off, &v) || v > n - off) return 0;
      const ProtobufCFieldDescriptor *f =
          tag >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3))
                                 : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_STRING) {
        const uint8_t *s = p + off;
        if (memchr(s, 0, (size_t)v)) {
          snprintf(why, whylen, "field %s.%s holds a NUL byte, which no name may contain",
                   desc->name, f->name);
          return -1;
        }
        if (!tpu_utf8_valid(s, (size_t)v)) {
          snprintf(why, whylen, "field %s.%s is not valid UTF-8 (proto3 strings must be)",
                   desc->name, f->name);
          return -1;
        }
      } else if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 32) {
        if (check_strings(f->descriptor, p + off, (size_t)v, depth + 1, why, whylen) != 0)
          return -1;
      }
      off += (size_t)v;
      break;
    }
    default:
      return 0;
    }
  }
  return 0;
}

static tpu_proto_status_t unpack_payload(const ProtobufCMessageDescriptor *desc,
                                         const ProtobufCBinaryData *payload, uint64_t id,
                                         const char *method, ProtobufCMessage **out,
                                         tpu_proto_error_t *err) {
  char why[200];
  if (check_strings(desc, payload->data, payload->len, 0, why, sizeof why) != 0)
    return tpu__proto_error(err, TPU_PROTO_EDECODE, id, "%s: %s", method, why);
  *out = protobuf_c_message_unpack(desc, NULL, payload->len, payload->data);
  if (!*out)
    return tpu__proto_error(err, TPU_PROTO_EDECODE, id,
                            "%s: payload of %zu bytes is not a valid %s protobuf message", method,
                            payload->len, desc->name);
  return TPU_PROTO_OK;
}

tpu_proto_status_t tpu_envelope_unpack_request_payload(const Tpud__RequestEnvelope *env,
                                                       ProtobufCMessage **out,
                                                       tpu_proto_error_t *err) {
  if (out) *out = NULL;
  if (!env || !out)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_unpack_request_payload: env and out must not be NULL");
  const tpu_method_info_t *info = tpu_envelope_method_info(env->method);
  if (!info)
    return tpu__proto_error(err, TPU_PROTO_EMETHOD, env->id,
                            "request %" PRIu64 " names unknown method %d", env->id,
                            (int)env->method);
  return unpack_payload(info->request, &env->payload, env->id, info->name, out, err);
}

tpu_proto_status_t tpu_envelope_unpack_response_payload(const Tpud__ResponseEnvelope *env,
                                                        int method, ProtobufCMessage **out,
                                                        tpu_proto_error_t *err) {
  if (out) *out = NULL;
  if (!env || !out)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_envelope_unpack_response_payload: env and out must not be NULL");
  const tpu_method_info_t *info = tpu_envelope_method_info(method);
  if (!info)
    return tpu__proto_error(err, TPU_PROTO_EMETHOD, env->id,
                            "unknown method %d: expected a tpud.Method from 1 to %zu", method,
                            N_METHODS - 1);
  return unpack_payload(info->response, &env->payload, env->id, info->name, out, err);
}

const char *tpu_envelope_request_metadata(const Tpud__RequestEnvelope *env, const char *key) {
  if (!env || !key) return NULL;
  for (size_t i = 0; i < env->n_metadata; i++)
    if (env->metadata[i]->key && strcmp(env->metadata[i]->key, key) == 0)
      return env->metadata[i]->value;
  return NULL;
}

size_t tpu_envelope_request_metadata_count(const Tpud__RequestEnvelope *env, const char *key) {
  size_t n = 0;
  if (!env || !key) return 0;
  for (size_t i = 0; i < env->n_metadata; i++)
    if (env->metadata[i]->key && strcmp(env->metadata[i]->key, key) == 0) n++;
  return n;
}
