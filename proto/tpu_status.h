/*
 * tpu_status.h - the one status table: every status tpud answers with, its gRPC code on the
 * wire, its HTTP status on the REST port, and its words. Server, proto and client read it.
 *
 * 0..16 are gRPC's codes (tpud.StatusCode, the numbers of google.rpc.Code). Above them are the
 * server's finer statuses, which travel as the gRPC code of their row: OVERLOADED is
 * RESOURCE_EXHAUSTED to a gRPC or framed client (as the batcher's full queue always was) but 503
 * "try again later" over HTTP, where plain RESOURCE_EXHAUSTED (a request or answer too large) is
 * 413. The HTTP column is what every front end that speaks HTTP maps a status to.
 */
#ifndef TPU_STATUS_H
#define TPU_STATUS_H

/* X(name, number, gRPC code on the wire, HTTP status, words): gRPC's own codes */
#define TPU_GRPC_CODE_TABLE(X)                                                              \
  X(OK, 0, 0, 200, "success")                                                               \
  X(CANCELLED, 1, 1, 503, "cancelled")                                                      \
  X(UNKNOWN, 2, 2, 500, "unknown error")                                                    \
  X(INVALID_ARGUMENT, 3, 3, 400, "invalid argument")                                        \
  X(DEADLINE_EXCEEDED, 4, 4, 504, "deadline exceeded on the server")                        \
  X(NOT_FOUND, 5, 5, 404, "not found")                                                      \
  X(ALREADY_EXISTS, 6, 6, 409, "already exists")                                            \
  X(PERMISSION_DENIED, 7, 7, 403, "permission denied")                                      \
  X(RESOURCE_EXHAUSTED, 8, 8, 413, "resource exhausted")                                    \
  X(FAILED_PRECONDITION, 9, 9, 400, "failed precondition")                                  \
  X(ABORTED, 10, 10, 409, "aborted")                                                        \
  X(OUT_OF_RANGE, 11, 11, 400, "out of range")                                              \
  X(UNIMPLEMENTED, 12, 12, 501, "unimplemented")                                            \
  X(INTERNAL, 13, 13, 500, "internal server error")                                         \
  X(UNAVAILABLE, 14, 14, 503, "unavailable")                                                \
  X(DATA_LOSS, 15, 15, 500, "data loss")                                                    \
  X(UNAUTHENTICATED, 16, 16, 401, "unauthenticated")

/* Every row: gRPC's codes, then the server's own, which never reach a client as themselves. */
#define TPU_CODE_TABLE(X)                                                                   \
  TPU_GRPC_CODE_TABLE(X)                                                                    \
  /* a busy server (queue full, buffered-answer budget): try again later */                 \
  X(OVERLOADED, 17, 8, 503, "server busy")

typedef enum {
#define TPU__CODE_ENUM(name, num, grpc, http, words) TPU_CODE_##name = num,
  TPU_CODE_TABLE(TPU__CODE_ENUM)
#undef TPU__CODE_ENUM
  TPU_CODE_COUNT = 17,  /* gRPC codes (0..16): what is counted and sent */
  TPU_CODE_ROWS = 18 /* every row */
} tpu_code_t;

/* The gRPC name of a status's wire code ("OK", "RESOURCE_EXHAUSTED" for OVERLOADED), "UNKNOWN"
 * for numbers outside the table. */
const char *tpu_code_name(int code);
/* The gRPC code a status travels as (UNKNOWN outside the table). */
int tpu_code_wire(int code);
/* The HTTP status of a status (500 outside the table). */
int tpu_code_http(int code);
/* The status in words ("not found"); "unknown status" outside the table. */
const char *tpu_code_words(int code);

#endif /* TPU_STATUS_H */
