/*
 * tpu_proto_int.h - helpers shared by the files of proto/, not part of its API.
 */
#ifndef TPU_PROTO_INT_H
#define TPU_PROTO_INT_H

#include "tpu_frame.h"

/* Fills *err (when not NULL) with status, request id and a printf-formatted message, and
 * returns status, so error paths read `return tpu__proto_error(err, ...)`. */
tpu_proto_status_t tpu__proto_error(tpu_proto_error_t *err, tpu_proto_status_t status,
                                    uint64_t request_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif /* TPU_PROTO_INT_H */
