/*
 * tpu_grpc.h - the gRPC-over-HTTP/2 mapping of tpud's methods, from bytes: paths, the
 * grpc-timeout header, grpc-message encoding, content types.
 *
 * DESIGN
 * What gRPC's HTTP/2 protocol ("PROTOCOL-HTTP2" in grpc/grpc's doc/) says about headers, kept
 * apart from the HTTP/2 session (server/grpc.c, nghttp2) so it is testable and fuzzable from
 * bytes. A method is named by :path "/<package>.<Service>/<Method>"; the service and method
 * names come from the one method table (tpu_envelope_method_info), so a method added there is
 * served over gRPC too. Inputs are (pointer, length) pairs as HTTP/2 headers are: not
 * NUL-terminated. Nothing here allocates.
 */
#ifndef TPU_GRPC_H
#define TPU_GRPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The tpud.Method a :path names ("/inference.GRPCInferenceService/ModelInfer"), or 0 when it
 * names no method tpud serves. */
int tpu_grpc_method_of_path(const uint8_t *path, size_t len);

/* Parses a grpc-timeout value: 1 to 8 ASCII digits and a unit, H (hours), M (minutes),
 * S (seconds), m (milliseconds), u (microseconds) or n (nanoseconds, rounded up). On success
 * returns 0 with *us the timeout in microseconds, at least 1 (a zero timeout has already
 * expired; 0 would read as "no deadline"). -1 for anything else. */
int tpu_grpc_parse_timeout(const uint8_t *v, size_t len, uint64_t *us);

/* Percent-encodes a grpc-message value: bytes outside 0x20..0x7E, and '%', become %XX. Writes
 * at most outlen bytes including the NUL (outlen >= 1); a byte whose encoding would not fit is
 * left out with everything after it. Returns the length written. */
size_t tpu_grpc_percent_encode(const char *in, char *out, size_t outlen);

/* Whether a content-type value is gRPC's: "application/grpc", alone or followed by '+' (a
 * message format, e.g. "+proto") or ';' (parameters). */
int tpu_grpc_content_type_ok(const uint8_t *v, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TPU_GRPC_H */
