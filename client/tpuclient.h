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
 * And a third, for programs with their own event loop (many connections in one thread, as
 * tpubench has): tpu_client_async_t, a connection that never blocks and never waits, driven by
 * the caller in the style of libpq's asynchronous API and nghttp2's session. The caller polls
 * the connection's descriptor for the events it asks for, hands the readiness to
 * tpu_client_async_step(), which reads and writes what it can without blocking, and takes
 * completed results from tpu_client_async_next(): no threads, no event library, any loop
 * (poll, epoll, libevent, libuv) works. It speaks the native protocol or HTTP/1.1 (OIP REST on
 * port 8501), over TCP or TLS, with any number of requests pipelined on one connection. The
 * blocking tpu_client_t is built on it: the same encoder, reader and bookkeeping, plus poll().
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
 * Threads: a handle (blocking or async) is not thread-safe. Use one handle per thread (or lock
 * around every call); handles share nothing, so any number of threads may each drive their own.
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
#include "tpu_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ---- */

/* Every status. 0..16 are gRPC's codes as the server sends them, from the one status table
 * (proto/tpu_status.h: names and words); 100 and up are the client's own: X(name, number,
 * words). */
#define TPU_CLIENT_OWN_STATUS_MAP(X)                                                         \
  X(CONNECT_FAILED, 100, "could not connect to the server")                                  \
  X(TIMEOUT, 101, "no response within the timeout")                                          \
  X(PROTOCOL, 102, "protocol error: the server sent something unexpected")                   \
  X(CLOSED, 103, "connection closed")                                                        \
  X(MISUSE, 104, "invalid use of the client API")                                            \
  X(NOMEM, 105, "out of memory")

typedef enum {
#define TPU__CLIENT_GRPC_ENUM(name, num, grpc, http, words) TPU_CLIENT_##name = num,
  TPU_GRPC_CODE_TABLE(TPU__CLIENT_GRPC_ENUM)
#undef TPU__CLIENT_GRPC_ENUM
#define TPU__CLIENT_STATUS_ENUM(name, num, msg) TPU_CLIENT_##name = num,
  TPU_CLIENT_OWN_STATUS_MAP(TPU__CLIENT_STATUS_ENUM)
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

/* ---- event-loop-driven connections (tpu_client_async_t) ----
 *
 * DESIGN
 * A tpu_client_async_t is one connection in a state machine: connecting (TCP, then the TLS
 * handshake), ready, or gone. Nothing in this section blocks, except the name resolution inside
 * tpu_client_async_connect() (getaddrinfo; give a numeric address to avoid it) and
 * tpu_client_async_wait(), a convenience for code without a loop of its own. The contract with
 * the caller's loop:
 *
 *     for (;;) {
 *       struct pollfd p = {tpu_client_async_fd(a), tpu_client_async_events(a), 0};
 *       poll(&p, 1, tpu_client_async_timeout(a));  // or epoll/libevent/... with many
 *       if (tpu_client_async_step(a, p.revents) != TPU_CLIENT_OK) ...;  // connection gone
 *       for (tpu_client_result_t *r; (r = tpu_client_async_next(a)); tpu_client_result_free(r))
 *         ...;  // id, tag, status, response or payload, times
 *     }
 *
 *  - fd: the socket, or -1 once the connection is gone. It can change while connecting (the
 *    next address of a name is tried), so re-read it after each step (an epoll user compares).
 *  - events: POLLIN and/or POLLOUT, what the connection waits for now (POLLOUT while connecting
 *    and while queued bytes wait for the socket). On Linux EPOLLIN/EPOLLOUT/EPOLLERR/EPOLLHUP
 *    have the same values, so epoll's masks may be passed through unchanged.
 *  - timeout: milliseconds until step() must run even without events (the connect deadline,
 *    the earliest request deadline), -1 for none, 0 when it must run now.
 *  - step(revents): checks the timers, finishes the connect or handshake, reads whatever the
 *    socket has (when revents says readable), parses every complete answer into a result, and
 *    writes queued requests until the socket is full. step(a, 0) is always safe: it is how queued
 *    requests go out without waiting for POLLOUT.
 *
 * Submitting (tpu_client_async_send*) only encodes the request into the connection's output
 * buffer and gives it an id; bytes leave in the next step(). Requests may be submitted while the
 * connection is still connecting (they leave once it is up), and any number may be in flight:
 * they are pipelined, and submitting several before one step() sends them in one write. Every
 * submitted request yields exactly one result: the server's answer, a local TIMEOUT, or the
 * connection's failure (CLOSED, PROTOCOL, CONNECT_FAILED, or the code the server ended the
 * connection with). Native answers are matched by id and complete in whatever order the server
 * finishes them; HTTP/1.1 answers come in request order.
 *
 * A timed-out request none of whose bytes have been written is taken out of the output (the
 * server never sees it); one partly or wholly written is finished and its late answer dropped.
 * A connection that is gone stays gone: free it and connect again (requests are not retried).
 *
 * HTTP/1.1: keep-alive, requests pipelined, Content-Length framed answers (what tpud sends;
 * chunked answers are refused as PROTOCOL); the answer's status code and body are on the result,
 * and its status maps to the nearest tpu_client_status_t (404 NOT_FOUND, 503 UNAVAILABLE, ...)
 * with the body's {"error": "..."} as the message. An answer with "Connection: close" completes
 * its request and then ends the connection (CLOSED; later pipelined requests fail with it).
 */

/* What a tpu_client_async_t speaks. */
typedef enum {
  TPU_CLIENT_PROTOCOL_NATIVE = 0, /* framed envelopes (port 8500; ALPN "tpud/1" under TLS) */
  TPU_CLIENT_PROTOCOL_HTTP = 1,   /* HTTP/1.1 (port 8501; ALPN "http/1.1" under TLS) */
} tpu_client_protocol_t;

/* An event-loop-driven connection (opaque). */
typedef struct tpu_client_async tpu_client_async_t;

/*
 * Starts connecting to `addr` ("HOST:PORT", "[IPv6]:PORT" or "HOST": port 8500 native, 8501
 * HTTP) and returns at once, with the TCP connect (and TLS handshake) in progress; the options
 * are those of tpu_client_connect() (connect_timeout_ms bounds TCP and TLS together, timeout_ms
 * is the default request timeout, the TLS files are loaded here). Like tpu_client_connect(),
 * *out receives a handle even on failure, for tpu_client_async_errmsg(); free it either way.
 * Returns OK (connecting or connected), MISUSE (malformed address, options or protocol),
 * CONNECT_FAILED (the name does not resolve, a TLS file cannot be loaded, every address refused
 * at once) or NOMEM. Later failures of the connect show up in step() as CONNECT_FAILED.
 */
tpu_client_status_t tpu_client_async_connect(const char *addr, const tpu_client_options_t *opts,
                                             tpu_client_protocol_t protocol,
                                             tpu_client_async_t **out);

/* Closes the connection and frees it, its queued results and its unsent requests (which get no
 * result). Accepts NULL. */
void tpu_client_async_free(tpu_client_async_t *conn);

/* The socket to poll, or -1 when there is none (the connection is gone). See DESIGN. */
int tpu_client_async_fd(const tpu_client_async_t *conn);

/* POLLIN and/or POLLOUT: the readiness to poll fd for now; 0 once the connection is gone. */
int tpu_client_async_events(const tpu_client_async_t *conn);

/* Milliseconds until step() must run even if fd shows no event, -1 for no limit, 0 for now. */
int tpu_client_async_timeout(const tpu_client_async_t *conn);

/*
 * Makes all the progress possible without blocking (see DESIGN), given the readiness poll
 * reported (`revents`, 0 for none). Results it completes wait for tpu_client_async_next().
 * Returns OK while the connection is usable (connecting or connected), else the reason it is
 * gone (CONNECT_FAILED, CLOSED, PROTOCOL, TIMEOUT, a code the server sent for the connection), with
 * tpu_client_async_errmsg() saying why; every request in flight then has its result queued.
 * POLLERR/POLLHUP surface as the read error they stand for; POLLNVAL (the descriptor was closed
 * outside the library) ends the connection with CLOSED.
 */
tpu_client_status_t tpu_client_async_step(tpu_client_async_t *conn, int revents);

/* The next completed result (free it with tpu_client_result_free), or NULL when none is queued.
 * Results come in completion order. */
tpu_client_result_t *tpu_client_async_next(tpu_client_async_t *conn);

/*
 * For code without its own loop: polls this one connection until a result completes and hands
 * it over, as tpu_client_recv() does (timeout_ms as everywhere: 0 is the handle's default).
 * Returns OK with a result, TIMEOUT with *out NULL, MISUSE when nothing is in flight, or the
 * connection's error once it is gone and every request has had its result.
 */
tpu_client_status_t tpu_client_async_wait(tpu_client_async_t *conn, int timeout_ms,
                                          tpu_client_result_t **out);

/* Whether the connection is up (TCP connected and, with TLS, the handshake done). */
bool tpu_client_async_connected(const tpu_client_async_t *conn);

/* OK while the connection is usable (also while connecting), else why it is gone. */
tpu_client_status_t tpu_client_async_status(const tpu_client_async_t *conn);

/* Requests submitted whose results have not yet been taken (by next() or wait()). */
size_t tpu_client_async_in_flight(const tpu_client_async_t *conn);

/* Bytes submitted that the socket has not taken yet. */
size_t tpu_client_async_unsent(const tpu_client_async_t *conn);

/* As tpu_client_errmsg(): the message of the last call on this connection that failed ("" after
 * a success; never NULL). */
const char *tpu_client_async_errmsg(const tpu_client_async_t *conn);

/*
 * Queues a native request (as tpu_client_send(): `method` a Tpud__Method, `request` its message
 * or NULL for the empty ones, timeout_ms as everywhere); its result's response is the decoded
 * answer. `tag` is any value of the caller's (an index, a pointer cast to uintptr_t, a
 * timestamp) and comes back on the result. *id (may be NULL) is the request's id. Fails with
 * MISUSE (an HTTP connection, unknown method, request of the wrong type), the connection's status
 * once it is gone, or NOMEM; nothing is queued then.
 */
tpu_client_status_t tpu_client_async_send(tpu_client_async_t *conn, int method,
                                          const ProtobufCMessage *request, int timeout_ms,
                                          uint64_t tag, uint64_t *id);

/*
 * As tpu_client_async_send() with the request message already serialized (`len` bytes of
 * `payload`, e.g. one ModelInferRequest packed once and sent many times; copied, so the caller
 * may reuse it at once). Raw in, raw out: the result carries the answer's payload still
 * serialized (tpu_client_result_payload()) and no decoded response, so nothing is unpacked
 * that the caller does not ask for.
 */
tpu_client_status_t tpu_client_async_send_packed(tpu_client_async_t *conn, int method,
                                                 const void *payload, size_t len,
                                                 int timeout_ms, uint64_t tag, uint64_t *id);

/*
 * Queues an HTTP/1.1 request on an HTTP connection: `method` ("GET", "POST", ...), `path` (the
 * request target, "/v2/models/digits/infer"), `content_type` (NULL for none) and `len` bytes of
 * `body` (NULL with 0 for none; POST and PUT always send a Content-Length). Host and, with a
 * token, Authorization are added. timeout_ms is enforced here only (HTTP carries no deadline).
 * The result has the status code (tpu_client_result_http_status()) and the body
 * (tpu_client_result_payload()). Fails with MISUSE (a native connection, a method or path with
 * spaces or control characters), the connection's status, or NOMEM.
 */
tpu_client_status_t tpu_client_async_send_http(tpu_client_async_t *conn, const char *method,
                                               const char *path, const char *content_type,
                                               const void *body, size_t len, int timeout_ms,
                                               uint64_t tag, uint64_t *id);

/* ---- more about a result (any result; these matter most for the async API) ---- */

/* The tag given when the request was submitted (0 for the blocking API's requests). */
uint64_t tpu_client_result_tag(const tpu_client_result_t *result);

/* Whether the server answered this request (its status, payload and HTTP status are the
 * server's); false when the result was made here: a local TIMEOUT, or the connection failing
 * or ending before the answer came (the server may or may not have run the request). */
bool tpu_client_result_answered(const tpu_client_result_t *result);

/* HTTP: the answer's status code (200, 404, ...); 0 for native results and for results without
 * an answer. */
int tpu_client_result_http_status(const tpu_client_result_t *result);

/* The answer's bytes, owned by the result: an HTTP body (NUL-terminated, not counted in *len), or
 * the still-serialized response message of a tpu_client_async_send_packed() request. NULL
 * (*len 0) for other results. *len may be NULL. */
const void *tpu_client_result_payload(const tpu_client_result_t *result, size_t *len);

/* When the request was submitted and when its result was made, CLOCK_MONOTONIC nanoseconds
 * (either pointer may be NULL): completed - submitted is the latency the client saw. */
void tpu_client_result_times(const tpu_client_result_t *result, int64_t *submitted_ns,
                             int64_t *completed_ns);

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
