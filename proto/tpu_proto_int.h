/*
 * tpu_proto_int.h - helpers shared by the files of proto/, not part of its API.
 */
#ifndef TPU_PROTO_INT_H
#define TPU_PROTO_INT_H

#include "tpu_frame.h"
#include "tpu_oip_json.h"

/* Fills *err (when not NULL) with status, request id and a printf-formatted message, and
 * returns status, so error paths read `return tpu__proto_error(err, ...)`. */
tpu_proto_status_t tpu__proto_error(tpu_proto_error_t *err, tpu_proto_status_t status,
                                    uint64_t request_id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/*
 * The single-pass fast path of tpu_oip_json_infer_request_parse and ..._parse_binary
 * (tpu_oip_json.c): 1 with *out the request when `text` is a plain FP32 infer body it takes,
 * 0 with *out NULL when it declines (anything unusual, every error), and the jansson path must
 * run. `bin` (bin_len bytes) is a binary-tensor request's section after its JSON header (NULL:
 * a plain JSON body): FP32 inputs with parameters.binary_data_size and no "data" take their
 * bytes from it in order, and all of it must be taken. Exposed for the tests that check both
 * paths build identical messages.
 */
int tpu__oip_json_infer_fast(const char *text, size_t len, const char *model_name,
                             const char *model_version, const tpu_oip_json_limits_t *limits,
                             const uint8_t *bin, size_t bin_len,
                             Inference__ModelInferRequest **out);

/* tpu_oip_json_infer_request_parse_binary's jansson path alone (the tests' reference). */
tpu_oip_json_status_t tpu__oip_json_infer_binary_jansson(
    const char *body, size_t len, size_t json_len, const char *model_name,
    const char *model_version, const tpu_oip_json_limits_t *limits,
    Inference__ModelInferRequest **out, char *err, size_t errlen);

#endif /* TPU_PROTO_INT_H */
