/*
 * tpu_oip_json.h - Open Inference Protocol v2 REST JSON <-> protobuf messages.
 *
 * DESIGN
 * The JSON bodies of the OIP v2 REST API (`POST /v2/models/{m}/infer`) translated to and from the
 * protobuf messages of grpc_service.proto, so the HTTP endpoint, tpuctl and anyone else speak
 * exactly one JSON dialect. Protocol code only: text in, messages out and back; it never touches
 * a socket or a file, and it never decides policy beyond "is this a well-formed request" (which
 * model inputs exist, rank limits of a model, and so on are the server's to check).
 *
 * Requests: every input's `data` (flat, or nested exactly as `shape`) is checked against `shape`
 * and encoded into raw_input_contents in the declared datatype's little-endian layout (BYTES as
 * 4-byte little-endian length + bytes per element, as Triton does). Typed `contents` are never
 * produced. Responses: raw_output_contents (or, failing that, typed contents) are decoded back to
 * flat `data` arrays. Floats are printed in their shortest round-trip form ("0.1", not
 * "0.10000000149011612"). NaN and infinities, which JSON cannot express (RFC 8259 section 6;
 * the OIP types data as JSON numbers), make the conversion fail with INVALID and a message
 * naming the element: never null (a number silently lost) nor bare NaN/Infinity tokens (text
 * that is not JSON, as Triton writes). Tensors in Triton's binary form (the _binary functions)
 * are bytes, not JSON, and carry them.
 *
 * Limits: nesting depth is checked on the text before jansson builds anything, so a hostile body
 * of a million '[' costs a scan, not a million allocations. Element counts are checked against
 * the JSON array lengths before tensor memory is allocated, so allocations are bounded by the
 * size of the text. Integers beyond the int64 range cannot be parsed (a jansson limit), so UINT64
 * data above 2^63-1 is rejected as malformed JSON.
 *
 * Ownership: messages returned here are allocated field by field with malloc, exactly like
 * messages from protobuf-c's unpack, so the generated `..._free_unpacked(msg, NULL)` frees them.
 */
#ifndef TPU_OIP_JSON_H
#define TPU_OIP_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "grpc_service.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status of a JSON conversion, generated with its messages from one table. */
#define TPU_OIP_JSON_STATUS_MAP(X)                                                         \
  X(OK, "ok")                                  /* success */                               \
  X(SYNTAX, "malformed JSON")                  /* the text is not JSON */                  \
  X(INVALID, "invalid request")                /* JSON, but not a valid body (HTTP 400) */ \
  X(TOO_DEEP, "JSON nested too deeply")        /* nesting beyond limits.max_depth */       \
  X(TOO_LARGE, "body too large")               /* beyond limits.max_bytes (HTTP 413) */    \
  X(NOMEM, "out of memory")                    /* allocation failed */

typedef enum {
#define TPU__OIP_JSON_ENUM(name, msg) TPU_OIP_JSON_##name,
  TPU_OIP_JSON_STATUS_MAP(TPU__OIP_JSON_ENUM)
#undef TPU__OIP_JSON_ENUM
  TPU_OIP_JSON_STATUS_COUNT /* number of codes, not a status */
} tpu_oip_json_status_t;

/* Returns a static message for a status ("unknown status" when out of range). */
const char *tpu_oip_json_strerror(tpu_oip_json_status_t status);

/* Defaults for tpu_oip_json_limits_t fields left 0. */
#define TPU_OIP_JSON_DEFAULT_MAX_DEPTH 32
#define TPU_OIP_JSON_DEFAULT_MAX_BYTES ((size_t)256 << 20) /* bytes */
#define TPU_OIP_JSON_MAX_RANK 16                           /* dims of one tensor, hard limit */

/* What the parser accepts; a NULL limits pointer or a 0 field means the default. */
typedef struct {
  int max_depth;    /* deepest nesting of arrays and objects together */
  size_t max_bytes; /* longest JSON text, bytes */
} tpu_oip_json_limits_t;

/*
 * Parses `len` bytes of JSON text into a jansson value after checking its size and nesting depth
 * against `limits`. On error *out is NULL and `err` (errlen bytes, may be 0) says what and where
 * ("line 1, column 7: ..."). The caller json_decref()s the result.
 */
tpu_oip_json_status_t tpu_oip_json_load(const char *text, size_t len,
                                        const tpu_oip_json_limits_t *limits, json_t **out,
                                        char *err, size_t errlen);

/*
 * Parses an OIP v2 REST infer request body
 *   {"id": "..", "parameters": {..}, "inputs": [{"name", "shape", "datatype", "data",
 *    "parameters"}], "outputs": [{"name", "parameters"}]}
 * into a ModelInferRequest whose raw_input_contents hold each input's data. `model_name` and
 * `model_version` (either may be NULL: left empty) come from the URL, not the body. Plain FP32
 * bodies take a single-pass parser that builds the same message without a JSON tree; the rest
 * (and every error) goes through jansson. On error
 * *out is NULL and `err` names the offending field and what was expected, for example
 * "inputs[0].data: expected 12 numbers for shape [3,4], got 11". Free the result with
 * inference__model_infer_request__free_unpacked(req, NULL).
 */
tpu_oip_json_status_t tpu_oip_json_infer_request_parse(const char *text, size_t len,
                                                       const char *model_name,
                                                       const char *model_version,
                                                       const tpu_oip_json_limits_t *limits,
                                                       Inference__ModelInferRequest **out,
                                                       char *err, size_t errlen);

/*
 * Triton's binary tensor extension: body[0..json_len) is the JSON request (json_len is the
 * Inference-Header-Content-Length header's value), body[json_len..len) the binary section. An
 * input with parameters.binary_data_size and no "data" takes the next that many bytes of the
 * section, inputs in order; the size must match shape and datatype exactly (BYTES: the shape's
 * count of elements, each a 4-byte little-endian length and its bytes), checked before anything
 * is allocated, and the sizes must add up to the whole section. An input with both "data" and
 * binary_data_size, a size beyond what is left, bytes left over, json_len beyond len: INVALID
 * with a message naming the input. Other inputs carry "data" as usual. The single-pass parser
 * is not used here. NaN and infinities travel in binary (only JSON cannot carry them).
 */
tpu_oip_json_status_t tpu_oip_json_infer_request_parse_binary(
    const char *body, size_t len, size_t json_len, const char *model_name,
    const char *model_version, const tpu_oip_json_limits_t *limits,
    Inference__ModelInferRequest **out, char *err, size_t errlen);

/* As tpu_oip_json_infer_request_parse, from an already parsed JSON value (depth not rechecked). */
tpu_oip_json_status_t tpu_oip_json_infer_request_from_json(const json_t *root,
                                                           const char *model_name,
                                                           const char *model_version,
                                                           Inference__ModelInferRequest **out,
                                                           char *err, size_t errlen);

/*
 * Formats a ModelInferResponse as the REST response body
 *   {"model_name", "model_version", "id", "parameters", "outputs": [{"name", "datatype", "shape",
 *    "data"}]}
 * ("id" and "parameters" only when set), data flat in row-major order. *out is a NUL-terminated
 * malloc'd string the caller frees. Fails with INVALID when an output's data does not match its
 * shape and datatype, or holds a NaN or infinity (or a parameter does), naming the output.
 */
tpu_oip_json_status_t tpu_oip_json_infer_response_format(const Inference__ModelInferResponse *resp,
                                                         char **out, char *err, size_t errlen);

/*
 * As tpu_oip_json_infer_response_format, with the binary tensor extension: each output i with
 * binary[i] set (binary has n_outputs flags) and raw contents is written without "data", with
 * "parameters": {..., "binary_data_size": N}, and its N raw bytes follow the JSON, outputs in
 * order. *out (malloc'd) holds *out_len bytes, the first *json_len of them the JSON (the
 * Inference-Header-Content-Length of the answer). Outputs that travel in binary may hold NaN
 * and infinities; BYTES outputs are checked to hold exactly their shape's element count.
 */
tpu_oip_json_status_t tpu_oip_json_infer_response_format_binary(
    const Inference__ModelInferResponse *resp, const unsigned char *binary, char **out,
    size_t *out_len, size_t *json_len, char *err, size_t errlen);

/* KServe V1 / TF Serving REST predict: one model input as the caller (the server, from the
 * model) describes it. */
typedef struct {
  const char *name;
  const char *datatype;  /* OIP: "FP32", "INT64", ... */
  size_t rank;           /* dims of one row (the batch dimension excluded); the whole tensor's
                          * for a model without a batch dimension */
  const int64_t *dims;
} tpu_oip_v1_input_t;

/*
 * Parses a V1 predict body into a ModelInferRequest for a model with inputs in[0..nin):
 * {"instances": [row, ...]} (rows: each a value of the one input's row shape, or an object of
 * every input's row value by name) or {"inputs": tensor} (columns: the one input's tensor, or an
 * object of every input's by name), optionally "signature_name": "serving_default". Values are
 * nested as the shapes say and encoded in each input's datatype (numbers, integers, booleans,
 * strings for BYTES), with the same checks and messages as the v2 dialect
 * ("instances[3]: expected 64 numbers for shape [64], got 63"). batched: 0 for a model without a
 * batch dimension (rows are refused; the columnar tensor is the whole input). *columnar says
 * which form came, for tpu_oip_json_v1_predict_format.
 */
tpu_oip_json_status_t tpu_oip_json_v1_predict_parse(
    const char *text, size_t len, const char *model_name, const char *model_version,
    const tpu_oip_v1_input_t *in, size_t nin, int batched, const tpu_oip_json_limits_t *limits,
    Inference__ModelInferRequest **out, int *columnar, char *err, size_t errlen);

/*
 * Formats an infer answer (raw contents) as the V1 predict response: rows, {"predictions":
 * [row, ...]} with each row the one output's row value or an object of every output's by name;
 * columns, {"outputs": tensor} or an object of every output's tensor by name. Nested as the
 * shapes say. NaN and infinities fail with INVALID, naming the output and element.
 */
tpu_oip_json_status_t tpu_oip_json_v1_predict_format(const Inference__ModelInferResponse *resp,
                                                     int columnar, int batched, char **out,
                                                     char *err, size_t errlen);

/* A dense tensor decoded from JSON: raw little-endian bytes in its datatype's layout. */
typedef struct {
  char datatype[16];                     /* "FP32", "INT8", ... (NUL-terminated) */
  size_t rank;                           /* number of dims in shape */
  int64_t shape[TPU_OIP_JSON_MAX_RANK];  /* dims, each >= 0 */
  size_t count;                          /* elements: the product of the dims */
  uint8_t *data;                         /* malloc'd, `nbytes` long; NULL when nbytes is 0 */
  size_t nbytes;                         /* bytes in data */
} tpu_oip_tensor_t;

/*
 * Decodes a tensor object {"shape": [..], "datatype": "..", "data": [..]} (data flat or nested as
 * shape) into `out`. `path` prefixes error messages ("a" gives "a.data: ..."). On error `out` is
 * left empty. Release with tpu_oip_tensor_clear().
 */
tpu_oip_json_status_t tpu_oip_json_tensor_decode(const json_t *obj, const char *path,
                                                 tpu_oip_tensor_t *out, char *err, size_t errlen);

/* Frees a decoded tensor's data and empties it; accepts NULL and already empty tensors. */
void tpu_oip_tensor_clear(tpu_oip_tensor_t *t);

/*
 * Formats raw tensor bytes as {"shape": [..], "datatype": "..", "data": [..]} (data flat). *out
 * is a malloc'd NUL-terminated string. Fails with INVALID when nbytes does not match shape and
 * datatype, the datatype is unknown, or an element is NaN or infinite.
 */
tpu_oip_json_status_t tpu_oip_json_tensor_format(const char *datatype, const int64_t *shape,
                                                 size_t rank, const void *data, size_t nbytes,
                                                 char **out, char *err, size_t errlen);

/*
 * Size in bytes of one element of an OIP datatype ("FP32" gives 4), or 0 for unknown names and
 * for BYTES, whose elements have no fixed size.
 */
size_t tpu_oip_datatype_size(const char *datatype);

#ifdef __cplusplus
}
#endif

#endif /* TPU_OIP_JSON_H */
