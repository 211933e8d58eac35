/*
 * tpuclient_int.h - what libtpuclient's files share among themselves (internal; not installed).
 *
 * DESIGN
 * tpuclient_async.c owns the connection engine (sockets, buffers, the in-flight table, results);
 * tpuclient.c builds the blocking API on it with the few extra hooks below, which exist only
 * because a blocking send has promises an async submit does not (a request that timed out
 * before any byte left is not sent at all and yields no result; one sent halfway closes the
 * connection). tpuclient_http.c parses HTTP/1.1 answer heads from bytes, without sockets.
 */
#ifndef TPUCLIENT_INT_H
#define TPUCLIENT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpuclient.h"

#define TPU__NO_DEADLINE INT64_MAX

/* CLOCK_MONOTONIC, nanoseconds. */
int64_t tpu__now_ns(void);

/* "ModelInfer", or "unknown method". */
const char *tpu__method_name(int method);

/* ---- hooks for the blocking API (tpuclient.c) ---- */

/*
 * Queues a native request as tpu_client_async_send() does, but "held": it counts as not in
 * flight and gets no result from a connection failure or a timeout until tpu__async_send_wait()
 * releases it, so the blocking send can report its own failure instead.
 */
tpu_client_status_t tpu__async_submit_held(tpu_client_async_t *a, int method,
                                           const ProtobufCMessage *request, int timeout_ms,
                                           uint64_t *id);

/*
 * Writes the held request `id` by its deadline, reading answers meanwhile (so a server that
 * stops reading until we read cannot deadlock us), then releases it into flight. On TIMEOUT with
 * none of its bytes sent it is withdrawn and the connection stays usable; partly sent, the
 * connection is closed. Returns OK or the failure, with tpu_client_async_errmsg() saying why.
 */
tpu_client_status_t tpu__async_send_wait(tpu_client_async_t *a, uint64_t id);

/* Removes and returns the queued result for `id`, or NULL. */
tpu_client_result_t *tpu__async_take(tpu_client_async_t *a, uint64_t id);

/* Whether `id` is still in flight (submitted, no result made yet). */
bool tpu__async_in_flight_id(const tpu_client_async_t *a, uint64_t id);

/* Waits (poll) until `deadline_ns` or the earliest request deadline for readiness and steps. */
void tpu__async_pump(tpu_client_async_t *a, int64_t deadline_ns);

/* ---- HTTP/1.1 answer heads, from bytes ---- */

typedef struct {
  int status;             /* 100..599 */
  int minor;              /* HTTP/1.minor */
  size_t head_len;        /* bytes of the head, the blank line included */
  int64_t content_length; /* -1 when absent */
  bool chunked;           /* a Transfer-Encoding header was present */
  bool close;             /* the server closes after this answer (Connection: close, or 1.0
                             without keep-alive) */
} tpu__http_head_t;

/*
 * Parses the answer head at the start of buf[0..len). *scanned (start at 0; keep it between
 * calls on the same, growing buffer) records how far the search for the blank line got, so
 * feeding a head in many pieces costs linear time. Returns 1 with *h filled, 0 when the head is
 * not complete yet, -1 with err saying what is wrong ("status line 'HTTP/1.1 2x0' ...", two
 * Content-Lengths that differ, ...).
 */
int tpu__http_parse_head(const char *buf, size_t len, size_t *scanned, tpu__http_head_t *h,
                         char *err, size_t errlen);

/* The tpu_client_status_t nearest to an HTTP status (2xx OK, 400 INVALID_ARGUMENT, 404
 * NOT_FOUND, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED, ...; UNKNOWN for what has no counterpart). */
tpu_client_status_t tpu__http_status_code(int http_status);

#endif /* TPUCLIENT_INT_H */
