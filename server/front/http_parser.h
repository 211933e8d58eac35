/*
 * http_parser.h - a strict HTTP/1.1 request-head parser over bytes.
 *
 * DESIGN
 * Takes the bytes a connection has buffered and says: the request head is incomplete, complete
 * (how long it is, what it asks, how long its body is), or wrong (which HTTP status to answer and
 * why). It never touches a socket and allocates nothing; everything it returns points into the
 * caller's buffer, so it is unit-tested and fuzzed from plain strings (tests/server/
 * test_http_parser.c). http.c owns the connections and calls it.
 *
 * What it accepts: "METHOD SP target SP HTTP/1.x CRLF", header lines "name: value CRLF" (a bare
 * LF is accepted as a line end, as RFC 9112 allows), an empty line. Bodies are framed by
 * Content-Length or by "Transfer-Encoding: chunked" (decoded by tpu_http_chunked_decode below);
 * Transfer-Encoding with Content-Length is a 400 (request smuggling), in an HTTP/1.0 request a
 * 400, and a transfer coding other than chunked a 501. Content-Encoding is reported (gzip,
 * deflate, identity or other) for the caller to decode (http_body.h). Obsolete line folding,
 * whitespace before the colon, control characters, a Content-Length that is not a plain decimal
 * number or differs between repeats: 400. A head longer than max_head_bytes: 431. A body longer
 * than max_body_bytes: 413 (known from the head, before the body is read; a chunked body's as
 * its chunk sizes arrive). Versions other than
 * 1.0 and 1.1: 505. Methods are parsed as tokens; which ones a path allows is the router's call.
 */
#ifndef TPU_HTTP_PARSER_H
#define TPU_HTTP_PARSER_H

#include <stddef.h>
#include <stdint.h>

/* Methods the server knows; anything else is TPU_HTTP_OTHER (the router answers 405/501). */
typedef enum {
  TPU_HTTP_OTHER = 0, /* a valid token, not one of the below */
  TPU_HTTP_GET,       /* GET */
  TPU_HTTP_HEAD,      /* HEAD: GET without the body */
  TPU_HTTP_POST       /* POST */
} tpu_http_method_t;

/* Outcome of tpu_http_parse_request. */
typedef enum {
  TPU_HTTP_PARSE_ERROR = -1,     /* bad request: see status and error */
  TPU_HTTP_PARSE_INCOMPLETE = 0, /* need more bytes */
  TPU_HTTP_PARSE_OK = 1          /* a complete head */
} tpu_http_parse_result_t;

typedef struct {
  size_t max_head_bytes; /* request line + headers + the empty line, bytes; also a chunked
                          * body's trailer section */
  uint64_t max_body_bytes; /* Content-Length, or the chunks' data, above this is a 413, bytes */
} tpu_http_limits_t;

/* A request body's Content-Encoding. */
typedef enum {
  TPU_HTTP_CODING_IDENTITY = 0, /* none, or "identity" */
  TPU_HTTP_CODING_GZIP,         /* "gzip" or "x-gzip" (RFC 1952) */
  TPU_HTTP_CODING_DEFLATE,      /* "deflate": zlib (RFC 1950; raw RFC 1951 accepted too) */
  TPU_HTTP_CODING_OTHER         /* anything else, or more than one coding: the caller's 415 */
} tpu_http_coding_t;

/* One parsed request head; pointers point into the caller's buffer. */
typedef struct {
  tpu_http_method_t method;
  const char *method_str;  /* the method token as sent */
  size_t method_len;
  const char *target;      /* the request target: origin-form "/path?query" */
  size_t target_len;
  int minor;               /* 0 for HTTP/1.0, 1 for HTTP/1.1 */
  size_t head_len;         /* bytes of the head including its final empty line */
  uint64_t content_length; /* body bytes (0 when absent or chunked) */
  int chunked;             /* 1: "Transfer-Encoding: chunked"; the body follows the head */
  tpu_http_coding_t coding; /* Content-Encoding */
  const char *coding_str;  /* its value as sent (for TPU_HTTP_CODING_OTHER's message) */
  size_t coding_len;
  int accept_gzip;         /* 1: Accept-Encoding takes gzip (listed, or "*", with q > 0) */
  int keep_alive;          /* 1: the connection may serve another request after this one */
  int expect_continue;     /* 1: "Expect: 100-continue" */
  const char *authorization; /* the Authorization header's value (the first one), or NULL */
  size_t authorization_len;
  size_t authorization_count; /* Authorization headers in the request: more than 1 is refused */
  int has_infer_header;    /* 1: "Inference-Header-Content-Length" was sent (Triton's binary
                            * tensor extension: the body is JSON of that many bytes, then the
                            * binary tensor data) */
  uint64_t infer_header_len; /* its value, bytes; checked against the decoded body by the caller */
  /* On TPU_HTTP_PARSE_ERROR: */
  int status;              /* 400, 413, 417, 431, 501, 505 */
  const char *error;       /* a static message saying what was wrong */
} tpu_http_request_t;

/*
 * Parses the request head at the start of buf[0..len). Returns TPU_HTTP_PARSE_OK with *r filled,
 * TPU_HTTP_PARSE_INCOMPLETE when the head has not ended yet (and is not yet over the limit), or
 * TPU_HTTP_PARSE_ERROR with r->status and r->error. After an error the connection cannot be
 * resynchronized: answer it and close.
 */
tpu_http_parse_result_t tpu_http_parse_request(const char *buf, size_t len,
                                               const tpu_http_limits_t *limits,
                                               tpu_http_request_t *r);

/* Outcome of tpu_http_chunked_decode. */
typedef enum {
  TPU_HTTP_CHUNKED_ERROR = -1,     /* bad framing or over a limit: see status and error */
  TPU_HTTP_CHUNKED_INCOMPLETE = 0, /* need more bytes */
  TPU_HTTP_CHUNKED_DONE = 1        /* the last chunk and the trailer section are in */
} tpu_http_chunked_result_t;

/* The state of one chunked body being decoded (RFC 9112 section 7.1); zero it with
 * tpu_http_chunked_init. */
typedef struct {
  int state;           /* where in the grammar the next byte falls (http_parser.c) */
  uint64_t left;       /* data bytes left in the current chunk; its size while being read */
  uint64_t decoded;    /* data bytes produced so far (the decoded body's length) */
  size_t digits;       /* hex digits of the current chunk-size */
  size_t line;         /* bytes of the current chunk-size line (with its extensions) */
  size_t trailer;      /* bytes of the trailer section so far */
  /* On TPU_HTTP_CHUNKED_ERROR: */
  int status;          /* 400, 413 (data over max_body_bytes), 431 (trailers too long) */
  const char *error;   /* a static message */
} tpu_http_chunked_t;

void tpu_http_chunked_init(tpu_http_chunked_t *c);

/*
 * Decodes the chunked body bytes buf[0..len) that follow what earlier calls consumed, in place:
 * the chunks' data is written to buf[0..*produced) (never ahead of what is read, so it may
 * overlap), *consumed says how many input bytes were used. The caller keeps the produced bytes,
 * drops the consumed ones and calls again with the rest plus what arrives next. Chunk
 * extensions and trailer fields are read and dropped; every line must end in CRLF (a bare LF,
 * accepted in the head, is a 400 here), and whitespace after the size must lead to ';'. A
 * chunk size with no hex digits, a non-hex byte, data not followed by a line end: 400; data
 * beyond max_body_bytes, known from the chunk size before its data arrives: 413; a size line
 * over 4096 bytes: 400; trailers over max_head_bytes: 431. On DONE, *consumed ends just past the
 * body (pipelined requests may follow). After an error the stream cannot be resynchronized.
 */
tpu_http_chunked_result_t tpu_http_chunked_decode(tpu_http_chunked_t *c, char *buf, size_t len,
                                                  const tpu_http_limits_t *limits,
                                                  size_t *consumed, size_t *produced);

#endif /* TPU_HTTP_PARSER_H */
