/*
 * tpu_frame.h - gRPC length-prefixed framing for tpud's native protocol, from bytes.
 *
 * DESIGN
 * Owns the byte layer of port 8500: cutting a stream into messages, and the status codes and
 * error messages of the whole proto/ module. It never reads or writes a socket: callers hand it
 * bytes (from an evbuffer, SSL_read, a test vector or a fuzzer) and get messages back, so every
 * path is testable from bytes.
 *
 * A frame is gRPC's length-prefixed message:
 *
 *   +------+---------------------------+--------------------------+
 *   | flag | length (4 bytes, big end.) | message (length bytes)   |
 *   +------+---------------------------+--------------------------+
 *
 * flag 0 is an uncompressed message. flag 1 (compressed) is rejected, since tpud never
 * negotiates a compression; any other flag is a corrupt stream. The length is checked against
 * the maximum message size as soon as the 5 header bytes are in, before anything is allocated.
 *
 * Two ways to use it:
 *  - tpu_frame_parse_header() alone, when the caller already buffers the stream (a libevent read
 *    callback: copy out 5 bytes, parse, wait until 5 + length bytes are buffered, then pull the
 *    message up in place). Stateless, allocates nothing.
 *  - tpu_frame_decoder_t, for any split of the stream (one byte at a time works). A message that
 *    arrives whole inside one fed chunk is handed back as a pointer into that chunk (no copy);
 *    only a message split across chunks is gathered into the decoder's buffer, which grows with
 *    the bytes actually received, never with the length a peer merely claims.
 *
 * Errors: every function returns a tpu_proto_status_t and, when given a tpu_proto_error_t, fills
 * it with a message that says what was wrong and what was expected. Framing errors leave the
 * stream unsynchronized: the connection must be closed (tpu_proto_status_fatal()).
 */
#ifndef TPU_FRAME_H
#define TPU_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes of the proto/ module, generated with their messages from one table. */
#define TPU_PROTO_STATUS_MAP(X)                                                              \
  X(OK, "success")                                                                           \
  X(EAGAIN, "incomplete frame: more bytes are needed (not an error)")                        \
  X(EFLAG, "bad frame flag byte: expected 0 (uncompressed message)")                         \
  X(ECOMPRESSED, "compressed frame, but no compression was negotiated: send flag 0")         \
  X(ETOOBIG, "frame length exceeds the maximum message size")                                \
  X(ETRUNCATED, "stream ended inside a frame")                                               \
  X(EDECODE, "message is not valid protobuf of the expected type")                           \
  X(ENOID, "request envelope has no id: expected a non-zero id")                             \
  X(EMETHOD, "unknown method")                                                               \
  X(ECODE, "unknown status code: expected a gRPC code 0..16")                                \
  X(EPAYLOAD, "payload exceeds the size limit")                                              \
  X(ENOSPC, "output buffer too small")                                                       \
  X(EINVAL, "invalid argument")                                                              \
  X(ENOMEM, "out of memory")

typedef enum {
#define TPU__PROTO_STATUS_ENUM(name, msg) TPU_PROTO_##name,
  TPU_PROTO_STATUS_MAP(TPU__PROTO_STATUS_ENUM)
#undef TPU__PROTO_STATUS_ENUM
  TPU_PROTO_STATUS_COUNT /* number of status codes, not a status */
} tpu_proto_status_t;

/* A failed call's details. */
typedef struct {
  tpu_proto_status_t status; /* same as the call's return value */
  uint64_t request_id;       /* the request the error belongs to; 0 when none is known */
  char msg[256];             /* what was wrong and what was expected, NUL-terminated */
} tpu_proto_error_t;

/* Returns a static message for a status ("unknown status" when out of range). */
const char *tpu_proto_strerror(tpu_proto_status_t status);

/* The gRPC status code (0..16, tpud.StatusCode) to answer an error with: RESOURCE_EXHAUSTED for
 * ETOOBIG and EPAYLOAD, UNIMPLEMENTED for ECOMPRESSED and EMETHOD, INVALID_ARGUMENT for malformed
 * input, INTERNAL for misuse of this API. 0 (OK) for TPU_PROTO_OK. */
int tpu_proto_status_grpc_code(tpu_proto_status_t status);

/* True for the errors after which the byte stream cannot be resynchronized (EFLAG, ECOMPRESSED,
 * ETOOBIG, ETRUNCATED): the connection must be closed after reporting them. */
bool tpu_proto_status_fatal(tpu_proto_status_t status);

/* ---- frame headers ---- */

#define TPU_FRAME_HEADER_SIZE 5
#define TPU_FRAME_FLAG_NONE 0x00       /* uncompressed message */
#define TPU_FRAME_FLAG_COMPRESSED 0x01 /* compressed message: never negotiated, always rejected */
/* Default maximum message size (bytes, excluding the 5-byte header). */
#define TPU_FRAME_DEFAULT_MAX_MESSAGE ((size_t)64 << 20)

/* Parses a 5-byte frame header. On success *len receives the message length (bytes following
 * the header). Fails with EFLAG (flag byte not 0 or 1), ECOMPRESSED (flag 1) or ETOOBIG (length
 * above max_message; the message names both numbers). max_message 0 means
 * TPU_FRAME_DEFAULT_MAX_MESSAGE. Pure: reads 5 bytes, allocates nothing. */
tpu_proto_status_t tpu_frame_parse_header(const uint8_t hdr[TPU_FRAME_HEADER_SIZE],
                                          size_t max_message, uint32_t *len,
                                          tpu_proto_error_t *err);

/* Writes the header of an uncompressed frame holding a len-byte message. Fails with ETOOBIG when
 * len does not fit the 32-bit length field. */
tpu_proto_status_t tpu_frame_write_header(uint8_t hdr[TPU_FRAME_HEADER_SIZE], size_t len,
                                          tpu_proto_error_t *err);

/* ---- the incremental decoder ---- */

/* One complete message (the frame's body, without its header). */
typedef struct {
  const uint8_t *data; /* len bytes; never NULL once a frame is returned, even when len is 0 */
  size_t len;
} tpu_frame_t;

typedef struct tpu_frame_decoder tpu_frame_decoder_t;

/* Creates a decoder that accepts messages of at most max_message bytes (0: the default,
 * TPU_FRAME_DEFAULT_MAX_MESSAGE). Allocates only the decoder itself. */
tpu_proto_status_t tpu_frame_decoder_create(size_t max_message, tpu_frame_decoder_t **out);

/* Frees a decoder and its buffer; accepts NULL. */
void tpu_frame_decoder_free(tpu_frame_decoder_t *dec);

/* Feeds up to len bytes and stops at the first complete frame. *consumed receives how many bytes
 * of data were used; call again with the rest (pipelined frames come out one per call).
 *  - TPU_PROTO_OK: *frame holds a complete message. frame->data points into `data` when the
 *    whole message was inside this chunk, otherwise into the decoder's buffer; either way it is
 *    valid until the next call on this decoder (and, in the first case, while `data` is).
 *  - TPU_PROTO_EAGAIN: every byte was consumed and no frame is complete yet.
 *  - an error (EFLAG, ECOMPRESSED, ETOOBIG, or ENOMEM/EINVAL): the stream is unusable; the
 *    decoder keeps failing with the same error until reset. *consumed counts the bytes up to and
 *    including the bad header.
 * Memory: nothing is allocated for a frame that fits in one chunk; a split frame is gathered in a
 * buffer that grows (geometrically) with the bytes received, capped at the frame's length. */
tpu_proto_status_t tpu_frame_decoder_feed(tpu_frame_decoder_t *dec, const uint8_t *data,
                                          size_t len, size_t *consumed, tpu_frame_t *frame,
                                          tpu_proto_error_t *err);

/* Call at end of stream: TPU_PROTO_OK when the stream ended between frames, ETRUNCATED (with how
 * many header or message bytes had arrived) when it ended inside one, or the decoder's earlier
 * error. */
tpu_proto_status_t tpu_frame_decoder_finish(const tpu_frame_decoder_t *dec,
                                            tpu_proto_error_t *err);

/* Forgets any partial frame and any error, as for a new stream. Keeps the buffer for reuse. */
void tpu_frame_decoder_reset(tpu_frame_decoder_t *dec);

/* Bytes of the current partial frame received so far (header included); 0 between frames. */
size_t tpu_frame_decoder_pending(const tpu_frame_decoder_t *dec);

/* Heap bytes the decoder's gathering buffer holds now (for memory accounting and tests). */
size_t tpu_frame_decoder_capacity(const tpu_frame_decoder_t *dec);

/* ---- text ---- */

/* Whether s[0..n) is valid UTF-8: no overlong forms, surrogates or values above U+10FFFF (what
 * proto3 requires of a string field and JSON of a string). NUL bytes are valid UTF-8. */
bool tpu_utf8_valid(const uint8_t *s, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* TPU_FRAME_H */
