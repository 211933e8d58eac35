/*
 * http_body.h - HTTP request bodies' content codings (gzip, deflate), from bytes.
 *
 * DESIGN
 * The protocol layer's half of request bodies: http_parser.c frames them (Content-Length or
 * chunked) and names their Content-Encoding; this file decodes gzip and deflate with zlib into
 * a buffer that never grows past the body limit, so a compression bomb costs at most the limit
 * in memory and in inflate work before its 413. No sockets, no connection state: bytes in,
 * bytes out, unit-tested from strings (tests/server/front/test_http_body.c). http.c calls it
 * once a body is complete, and to gzip large answers for clients that accept it.
 */
#ifndef TPU_HTTP_BODY_H
#define TPU_HTTP_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "http_parser.h"

/*
 * Decodes `in` (len bytes) of Content-Encoding `coding` (gzip: one or more RFC 1952 members;
 * deflate: a zlib stream, RFC 1950, or a raw RFC 1951 stream as some clients send) into a new
 * buffer (*out, free() it; *outlen bytes, NUL-terminated past the end) of at most max bytes.
 * Returns 0, or the HTTP status to answer with msg (msglen bytes) saying why: 413 when the
 * decoded body would exceed max (stopped as byte max + 1 is produced; the buffer never holds
 * more than max + 1 bytes), 400 for a corrupt or truncated stream or bytes after its end, 415 for
 * TPU_HTTP_CODING_OTHER, 500 when out of memory. IDENTITY is not decoded here (the caller uses
 * its bytes as they are).
 */
int tpu_http_body_decode(tpu_http_coding_t coding, const void *in, size_t len, uint64_t max,
                         char **out, size_t *outlen, char *msg, size_t msglen);

/* Compresses in[0..len) as one gzip member (zlib level 1: answers are compressed on the I/O
 * thread, so speed over ratio) into a new buffer (*out, free() it). Returns 0, or -1 when out
 * of memory or when the result would not be smaller than the input (send it as it is then). */
int tpu_http_body_gzip(const void *in, size_t len, char **out, size_t *outlen);

#endif /* TPU_HTTP_BODY_H */
