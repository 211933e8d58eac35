/*
 * tpu_envelope.h - request and response envelopes of tpud's native protocol, from bytes.
 *
 * DESIGN
 * Owns the layer between frames (tpu_frame.h) and method messages: every frame's message is a
 * tpud.RequestEnvelope (client to server) or tpud.ResponseEnvelope (server to client), see
 * tpud.proto. Decoding unpacks with protobuf-c and then checks what protobuf cannot: a non-zero
 * request id, a method tpud knows (proto3 enums are open, so protobuf-c accepts any number),
 * a status code gRPC defines, and a payload size limit. Encoding writes the 5-byte frame header
 * and the envelope in one pass into one buffer, and packs a method message (when given as a
 * ProtobufCMessage) straight into its place in the envelope, so a response's tensors are
 * serialized once and never copied again. No socket I/O here, and no knowledge of models.
 *
 * The method table (tpu_envelope_method_info) is the one place that ties a tpud.Method to its
 * rpc name and its request and response message types.
 */
#ifndef TPU_ENVELOPE_H
#define TPU_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "grpc_service.pb-c.h"
#include "health.pb-c.h"
#include "tpu_frame.h"
#include "tpud.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- methods and status codes ---- */

/* What a tpud.Method stands for. */
typedef struct {
  Tpud__Method method;
  const char *name;    /* rpc name as in the service: "ModelInfer" */
  const char *service; /* full service name: "inference.GRPCInferenceService" */
  const ProtobufCMessageDescriptor *request;  /* message type of the request payload */
  const ProtobufCMessageDescriptor *response; /* message type of an OK response's payload */
} tpu_method_info_t;

/* The table entry of a method, or NULL when `method` is not a method tpud serves (including
 * METHOD_UNSPECIFIED and numbers from a newer peer). */
const tpu_method_info_t *tpu_envelope_method_info(int method);

/* gRPC name of a status code ("OK", "INVALID_ARGUMENT", ...), or NULL outside 0..16. */
const char *tpu_envelope_code_name(int code);

/* ---- encoding ---- */

/* A request to encode (client side). The payload is either a message, packed straight into the
 * frame (payload_msg), or bytes that are already serialized (payload, payload_len), used when
 * payload_msg is NULL. Empty payloads are fine (ServerLive). */
typedef struct {
  uint64_t id;         /* non-zero */
  int method;          /* a Tpud__Method that tpu_envelope_method_info() knows */
  uint64_t timeout_us; /* relative deadline in microseconds; 0 = none */
  const char *const *metadata; /* n_metadata key/value pairs: metadata[2i] is a key (not NULL),
                                  metadata[2i+1] its value (NULL reads as "") */
  size_t n_metadata;
  const ProtobufCMessage *payload_msg;
  const uint8_t *payload;
  size_t payload_len;
} tpu_envelope_request_t;

/* A response to encode (server side); payload as in tpu_envelope_request_t. */
typedef struct {
  uint64_t id;         /* the request's id; 0 for a connection-level error */
  int code;            /* gRPC status code 0..16 (Tpud__StatusCode) */
  const char *message; /* NULL or "" when there is nothing to say */
  const char *const *metadata; /* n_metadata key/value pairs, as in the request */
  size_t n_metadata;
  const ProtobufCMessage *payload_msg;
  const uint8_t *payload;
  size_t payload_len;
} tpu_envelope_response_t;

/* Encodes a request as a complete frame (5-byte header + RequestEnvelope) into buf[0..cap).
 * *frame_len receives the frame's size; when cap is too small the call fails with ENOSPC,
 * writes nothing, and *frame_len still says how much is needed. Fails with ENOID for id 0,
 * EMETHOD for an unknown method, ETOOBIG when the envelope would not fit a frame, EINVAL for a
 * NULL metadata key. Allocates nothing. */
tpu_proto_status_t tpu_envelope_encode_request(const tpu_envelope_request_t *req, uint8_t *buf,
                                               size_t cap, size_t *frame_len,
                                               tpu_proto_error_t *err);

/* As tpu_envelope_encode_request, into a malloc'd buffer the caller frees. */
tpu_proto_status_t tpu_envelope_encode_request_alloc(const tpu_envelope_request_t *req,
                                                     uint8_t **frame, size_t *frame_len,
                                                     tpu_proto_error_t *err);

/* Encodes a response as a complete frame (5-byte header + ResponseEnvelope) into buf[0..cap),
 * with the size contract of tpu_envelope_encode_request. Fails with ECODE for a code outside
 * 0..16, ETOOBIG, ENOSPC or EINVAL. Allocates nothing. */
tpu_proto_status_t tpu_envelope_encode_response(const tpu_envelope_response_t *resp, uint8_t *buf,
                                                size_t cap, size_t *frame_len,
                                                tpu_proto_error_t *err);

/* As tpu_envelope_encode_response, into a malloc'd buffer the caller frees. */
tpu_proto_status_t tpu_envelope_encode_response_alloc(const tpu_envelope_response_t *resp,
                                                      uint8_t **frame, size_t *frame_len,
                                                      tpu_proto_error_t *err);

/* ---- decoding ---- */

/* Decodes a frame's message (tpu_frame_t data and len, without the header) as a request
 * envelope and checks it. On success *out owns the envelope (free it with
 * tpu_envelope_request_free); the payload is still serialized (see
 * tpu_envelope_unpack_request_payload). Errors, each with a message:
 *  - EDECODE: not a protobuf RequestEnvelope; err->request_id is 0 (no id could be read);
 *  - ENOID: id missing or 0;
 *  - EMETHOD: a method tpud does not know (answer UNIMPLEMENTED);
 *  - EPAYLOAD: payload longer than max_payload bytes (SIZE_MAX for no limit beyond the frame's).
 * For EMETHOD and EPAYLOAD err->request_id holds the id, so the caller can answer that request
 * and keep the connection. *out is NULL on every error. */
tpu_proto_status_t tpu_envelope_decode_request(const uint8_t *msg, size_t len, size_t max_payload,
                                               Tpud__RequestEnvelope **out,
                                               tpu_proto_error_t *err);

/* Frees a decoded request envelope; accepts NULL. */
void tpu_envelope_request_free(Tpud__RequestEnvelope *env);

/* Decodes a frame's message as a response envelope (client side). Errors: EDECODE, ECODE (code
 * outside 0..16; err->request_id holds the id), EPAYLOAD as above. *out is NULL on error. */
tpu_proto_status_t tpu_envelope_decode_response(const uint8_t *msg, size_t len,
                                                size_t max_payload, Tpud__ResponseEnvelope **out,
                                                tpu_proto_error_t *err);

/* Frees a decoded response envelope; accepts NULL. */
void tpu_envelope_response_free(Tpud__ResponseEnvelope *env);

/* Unpacks a decoded request's payload as its method's request message (e.g. an
 * Inference__ModelInferRequest for MODEL_INFER). Free *out with protobuf_c_message_free_unpacked
 * (out, NULL). EDECODE (naming the method and the expected type) when the bytes don't parse;
 * err->request_id is the envelope's id. */
tpu_proto_status_t tpu_envelope_unpack_request_payload(const Tpud__RequestEnvelope *env,
                                                       ProtobufCMessage **out,
                                                       tpu_proto_error_t *err);

/* Unpacks an OK response's payload as `method`'s response message (the client knows the method
 * from its request id). EMETHOD for an unknown method, EDECODE when the bytes don't parse. */
tpu_proto_status_t tpu_envelope_unpack_response_payload(const Tpud__ResponseEnvelope *env,
                                                        int method, ProtobufCMessage **out,
                                                        tpu_proto_error_t *err);

/* The value of the first metadata entry named `key` in a request, or NULL when absent. The wire
 * may carry a map key more than once (protobuf's own rule is that the last wins); where that
 * matters, ask tpu_envelope_request_metadata_count first. */
const char *tpu_envelope_request_metadata(const Tpud__RequestEnvelope *env, const char *key);

/* How many metadata entries of a request are named `key` (exactly: keys are lower-case), as
 * they came on the wire: the server refuses a request with more than one "authorization". */
size_t tpu_envelope_request_metadata_count(const Tpud__RequestEnvelope *env, const char *key);

#ifdef __cplusplus
}
#endif

#endif /* TPU_ENVELOPE_H */
