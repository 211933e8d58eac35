/*
 * tpuclient.h - libtpuclient: the C client of tpud's native protocol (port 8500).
 *
 * DESIGN
 * One tpu_client_t is one TCP connection to tpud. Requests are framed envelopes (proto/
 * tpu_envelope.h) carrying the Open Inference Protocol v2 messages (grpc_service.proto) and
 * tpud's own (tpud.proto); the generated protobuf-c types appear in this API as they are, so
 * power users build and read the raw messages, while the typed calls and the small tensor helpers
 * cover the common cases.
 *
 * Two ways to call, freely mixed on one handle:
 *  - synchronous: tpu_client_model_infer() and friends send one request and wait for its answer;
 *    responses to other requests that arrive meanwhile are kept for tpu_client_recv().
 *  - pipelined: tpu_client_send() returns the request's id at once; tpu_client_recv() returns
 *    the next completed result, whichever request it answers (the server completes requests out
 *    of order). Every sent request yields exactly one result: its response, or a local TIMEOUT,
 *    or CLOSED/PROTOCOL when the connection died under it.
 *
 * Timeouts: each call takes timeout_ms (milliseconds): > 0 is that long, 0 means the handle's
 * default (tpu_client_options_t.timeout_ms), TPU_CLIENT_NO_TIMEOUT means none. The timeout is
 * sent to the server as the request's deadline and also enforced here: a request with no answer
 * by then completes locally with TPU_CLIENT_TIMEOUT, and its late answer, if any, is dropped.
 *
 * Errors: gRPC codes from the server keep their numbers (0..16); failures seen by the client
 * have codes from 100 up. Every failing call leaves a message on the handle
 * (tpu_client_errmsg()); each pipelined result carries its own (tpu_client_result_error()).
 *
 * Threads: a handle is not thread-safe. Use one handle per thread (or lock around every call);
 * handles share nothing, so any number of threads may each drive their own.
 *
 * Memory: messages handed out (responses, results) are the caller's to free with the functions
 * named on each call. Nothing here keeps a pointer to caller memory after a call returns.
 */
#ifndef TPUCLIENT_H
#define TPUCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grpc_service.pb-c.h"
#include "tpud.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ---- */

/* Every status: name, number, message. 0..16 are gRPC's codes as the server sends them. */
#define TPU_CLIENT_STATUS_MAP(X)                                                             \
  X(OK, 0, "success")                                                                        \
  X(CANCELLED, 1, "cancelled")                                                               \
  X(UNKNOWN, 2, "unknown error")                                                             \
  X(INVALID_ARGUMENT, 3, "invalid argument")                                                 \
  X(DEADLINE_EXCEEDED, 4, "deadline exceeded on the server")                                 \
  X(NOT_FOUND, 5, "not found")                                                               \
  X(ALREADY_EXISTS, 6, "already exists")                                                     \
  X(PERMISSION_DENIED, 7, "permission denied")                                               \
  X(RESOURCE_EXHAUSTED, 8, "resource exhausted")                                             \
  X(FAILED_PRECONDITION, 9, "failed precondition")                                           \
  X(ABORTED, 10, "aborted")                                                                  \
  X(OUT_OF_RANGE, 11, "out of range")                                                        \
  X(UNIMPLEMENTED, 12, "unimplemented")                                                      \
  X(INTERNAL, 13, "internal server error")                                                   \
  X(UNAVAILABLE, 14, "unavailable")                                                          \
  X(DATA_LOSS, 15, "data loss")                                                              \
  X(UNAUTHENTICATED, 16, "unauthenticated")                                                  \
  /* seen by the client */                                                                   \
  X(CONNECT_FAILED, 100, "could not connect to the server")                                  \
  X(TIMEOUT, 101, "no response within the timeout")                                          \
  X(PROTOCOL, 102, "protocol error: the server sent something unexpected")                   \
  X(CLOSED, 103, "connection closed")                                                        \
  X(MISUSE, 104, "invalid use of the client API")                                            \
  X(NOMEM, 105, "out of memory")

typedef enum {
#define TPU__CLIENT_STATUS_ENUM(name, num, msg) TPU_CLIENT_##name = num,
  TPU_CLIENT_STATUS_MAP(TPU__CLIENT_STATUS_ENUM)
#undef TPU__CLIENT_STATUS_ENUM
} tpu_client_status_t;

/* A static message for a status ("unknown status" for other numbers). */
const char *tpu_client_strerror(tpu_client_status_t status);

/* The status's name without prefix ("NOT_FOUND", "TIMEOUT"), or NULL for other numbers. */
const char *tpu_client_status_name(tpu_client_status_t status);

/* ---- connecting ---- */

/* Pass as timeout_ms for no timeout at all. */
#define TPU_CLIENT_NO_TIMEOUT (-1)

/*
 * Connection options. Always start from tpu_client_options_init(): it sets `size`, and the
 * library reads only the fields that `size` covers, so fields added in later versions (TLS:
 * CA, certificate and key files; bearer tokens) leave programs built against this header
 * working unchanged.
 */
typedef struct {
  size_t size;              /* sizeof(tpu_client_options_t) as the caller was built; set by init */
  int connect_timeout_ms;   /* TCP connect timeout, ms; default 5000; TPU_CLIENT_NO_TIMEOUT: OS's */
  int timeout_ms;           /* default per-call timeout, ms; default 30000; NO_TIMEOUT: none */
  size_t max_message_bytes; /* largest response accepted, bytes; default 64 MiB */
  /* TLS and credentials (added in 0.1 with tpud's TLS; zero/NULL = off). File names and the
   * token are read or copied during tpu_client_connect(); nothing keeps the caller's pointers. */
  bool tls;                    /* TLS even without tls_ca_file (then the system's CAs) */
  const char *tls_ca_file;     /* PEM CAs the server's certificate must chain to; implies tls */
  const char *tls_cert_file;   /* PEM client certificate (mutual TLS); implies tls */
  const char *tls_key_file;    /* its PEM private key; NULL = in tls_cert_file */
  const char *tls_server_name; /* name the certificate must match, sent as SNI; NULL = the host
                                  of addr (an IP address is matched against IP SANs) */
  bool tls_no_verify_host;     /* verify the chain only, not the name (tests; not for production) */
  const char *token;           /* bearer token: sent as metadata "authorization: Bearer <token>" */
} tpu_client_options_t;

/* Fills *opts with the defaults. */
void tpu_client_options_init(tpu_client_options_t *opts);

/* An open connection (opaque). */
typedef struct tpu_client tpu_client_t;

/*
 * Connects to `addr`, "HOST:PORT", "[IPv6]:PORT" or "HOST" (port 8500), over TCP with Nagle off.
 * `opts` may be NULL for the defaults. Like sqlite3_open(), *out receives a handle even when the
 * connection fails (only NOMEM and MISUSE for a NULL out leave it NULL), so that
 * tpu_client_errmsg() can say why ("connect to 127.0.0.1:1: Connection refused"); free it with
 * tpu_client_free() either way. Returns OK, CONNECT_FAILED (resolution, refusal, timeout), MISUSE
 * (malformed address or options) or NOMEM.
 *
 * With TLS (opts->tls, tls_ca_file or tls_cert_file) the handshake is part of the connect and its
 * timeout: TLS 1.2 or later, ALPN "tpud/1", the server's certificate verified against
 * tls_ca_file (else the system's CAs) and its name against tls_server_name or the host; a failed
 * verification is CONNECT_FAILED with OpenSSL's reason ("certificate verify failed: ...").
 */
tpu_client_status_t tpu_client_connect(const char *addr, const tpu_client_options_t *opts,
                                       tpu_client_t **out);

/* Closes the connection and frees the handle, any results not yet received, and everything
 * else it holds. Accepts NULL. */
void tpu_client_free(tpu_client_t *client);

/*
 * The message of the last call on this handle that failed ("" after a success, and never NULL,
 * also for a NULL handle). Valid until the next call on the handle.
 */
const char *tpu_client_errmsg(const tpu_client_t *client);

/* Status of the connection: OK while usable, else why it is gone (CLOSED, PROTOCOL,
 * CONNECT_FAILED, TIMEOUT after a send that timed out halfway, or a code the server sent for
 * the whole connection). */
tpu_client_status_t tpu_client_connection_status(const tpu_client_t *client);

/* Requests sent whose results have not yet been returned by tpu_client_recv() or a sync call. */
size_t tpu_client_in_flight(const tpu_client_t *client);

/* ---- pipelined calls ---- */

/* The outcome of one request (opaque): its id, status, message and decoded response. */
typedef struct tpu_client_result tpu_client_result_t;

/*
 * Sends one request without waiting for its answer. `method` is a Tpud__Method
 * (TPUD__METHOD__MODEL_INFER, ...); `request` its request message (e.g. &infer_req.base), or NULL
 * for the methods whose request is empty (ServerLive, ServerReady, ServerMetadata). On success
 * *id (may be NULL) is the request's id, unique on this connection, which its result will carry.
 * Fails with MISUSE (unknown method, a request of the wrong type), CLOSED (connection gone),
 * TIMEOUT (the socket would not take the bytes in time: the connection is then closed, since a
 * half-sent frame cannot be taken back) or NOMEM.
 */
tpu_client_status_t tpu_client_send(tpu_client_t *client, int method,
                                    const ProtobufCMessage *request, int timeout_ms,
                                    uint64_t *id);

/*
 * Waits up to timeout_ms for the next completed request and hands over its result (free with
 * tpu_client_result_free). Results come in completion order, not send order. Returns OK with a
 * result (whose own status may be an error), TIMEOUT with *out NULL when nothing completed in
 * time, MISUSE when nothing is in flight, or the connection's error once it is gone and every
 * request sent has had its result.
 */
tpu_client_status_t tpu_client_recv(tpu_client_t *client, int timeout_ms,
                                    tpu_client_result_t **out);

/* The id tpu_client_send() returned for this result's request. */
uint64_t tpu_client_result_id(const tpu_client_result_t *result);

/* The Tpud__Method the request named. */
int tpu_client_result_method(const tpu_client_result_t *result);

/* OK, the server's gRPC code, or a client-side code (TIMEOUT, CLOSED, PROTOCOL). */
tpu_client_status_t tpu_client_result_status(const tpu_client_result_t *result);

/* What went wrong ("" on success; never NULL). Owned by the result. */
const char *tpu_client_result_error(const tpu_client_result_t *result);

/*
 * The decoded response message (e.g. an Inference__ModelInferResponse for MODEL_INFER; cast via
 * its `base`), owned by the result; NULL unless the status is OK.
 */
const ProtobufCMessage *tpu_client_result_response(const tpu_client_result_t *result);

/* Takes the response out of the result, which then holds none; free it with
 * protobuf_c_message_free_unpacked(msg, NULL). NULL unless the status is OK. */
ProtobufCMessage *tpu_client_result_take_response(tpu_client_result_t *result);

/* Frees a result and whatever response it still holds. Accepts NULL. */
void tpu_client_result_free(tpu_client_result_t *result);

/* ---- synchronous calls ---- */

/*
 * Sends a request and waits for its answer. On OK, *response (may be NULL to discard it) is the
 * method's response message; free it with protobuf_c_message_free_unpacked(msg, NULL). On any
 * other status *response is NULL and tpu_client_errmsg() says why.
 */
tpu_client_status_t tpu_client_call(tpu_client_t *client, int method,
                                    const ProtobufCMessage *request, int timeout_ms,
                                    ProtobufCMessage **response);

/* ServerLive: *live (may be NULL) says whether the server is live. */
tpu_client_status_t tpu_client_server_live(tpu_client_t *client, int timeout_ms, bool *live);

/* ServerReady: *ready (may be NULL) says whether the server can serve inference. */
tpu_client_status_t tpu_client_server_ready(tpu_client_t *client, int timeout_ms, bool *ready);

/* ModelReady for `model` (and `version`, NULL or "" for the server's choice). */
tpu_client_status_t tpu_client_model_ready(tpu_client_t *client, const char *model,
                                           const char *version, int timeout_ms, bool *ready);

/* ServerMetadata. Free *out with inference__server_metadata_response__free_unpacked(*out, NULL). */
tpu_client_status_t tpu_client_server_metadata(tpu_client_t *client, int timeout_ms,
                                               Inference__ServerMetadataResponse **out);

/* ModelMetadata of `model` (version NULL or "" for the server's choice). Free *out with
 * inference__model_metadata_response__free_unpacked(*out, NULL). */
tpu_client_status_t tpu_client_model_metadata(tpu_client_t *client, const char *model,
                                              const char *version, int timeout_ms,
                                              Inference__ModelMetadataResponse **out);

/* ModelInfer with a full request message. Free *out with
 * inference__model_infer_response__free_unpacked(*out, NULL). */
tpu_client_status_t tpu_client_model_infer(tpu_client_t *client,
                                           const Inference__ModelInferRequest *request,
                                           int timeout_ms, Inference__ModelInferResponse **out);

/* MatMul (C = A × B). Free *out with tpud__mat_mul_response__free_unpacked(*out, NULL). */
tpu_client_status_t tpu_client_matmul(tpu_client_t *client, const Tpud__MatMulRequest *request,
                                      int timeout_ms, Tpud__MatMulResponse **out);

/* ModelLoad of `model` (version NULL or "": the versions its policy names). *out may be NULL; free
 * it with tpud__model_load_response__free_unpacked(*out, NULL). */
tpu_client_status_t tpu_client_model_load(tpu_client_t *client, const char *model,
                                          const char *version, int timeout_ms,
                                          Tpud__ModelLoadResponse **out);

/* ModelUnload of `model` (version NULL or "" unloads every version); *out as for load. */
tpu_client_status_t tpu_client_model_unload(tpu_client_t *client, const char *model,
                                            const char *version, int timeout_ms,
                                            Tpud__ModelUnloadResponse **out);

/* RepositoryIndex: every model version and its state (only READY ones with ready_only). Free
 * *out with tpud__repository_index_response__free_unpacked(*out, NULL). */
tpu_client_status_t tpu_client_repository_index(tpu_client_t *client, bool ready_only,
                                                int timeout_ms,
                                                Tpud__RepositoryIndexResponse **out);

/* ---- tensors without protobuf plumbing ---- */

/* A dense row-major tensor: raw little-endian elements, as the wire carries them. */
typedef struct {
  const char *name;      /* input or output name */
  const char *datatype;  /* "FP32", "BF16", "INT8", ... */
  const int64_t *shape;  /* rank dims */
  size_t rank;
  const void *data;      /* nbytes bytes */
  size_t nbytes;
} tpu_client_tensor_t;

/*
 * ModelInfer from plain tensors: builds the request (raw_input_contents; every output requested)
 * and waits for the response; `version` may be NULL. The inputs are only read during the call.
 * Free *out with inference__model_infer_response__free_unpacked(*out, NULL); read its outputs
 * with tpu_client_infer_output().
 */
tpu_client_status_t tpu_client_infer(tpu_client_t *client, const char *model, const char *version,
                                     const tpu_client_tensor_t *inputs, size_t n_inputs,
                                     int timeout_ms, Inference__ModelInferResponse **out);

/*
 * Finds the output called `name` in a response and describes it in *out, pointing into the
 * response (valid while it lives). Returns OK, NOT_FOUND when no output has that name, or
 * PROTOCOL when the response carries the output without raw contents or with a byte count that
 * does not match its shape and datatype.
 */
tpu_client_status_t tpu_client_infer_output(const Inference__ModelInferResponse *response,
                                            const char *name, tpu_client_tensor_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TPUCLIENT_H */
