/*
 * fuzz_http_parser.c - libFuzzer target: the HTTP/1.1 request-head parser, from bytes.
 *
 * DESIGN
 * Byte 0 picks the limits; the rest is what a connection has buffered. It is parsed whole and
 * then at every prefix length that a split read could leave (all of them for short inputs): a
 * prefix may only be INCOMPLETE, or give the same answer as the whole once its head is in, or an
 * error (a bad byte is bad however late the rest comes). On OK the returned pointers lie inside
 * the buffer and the head length within it; on an error the status is one the header documents.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parser.h"

static void check(const char *buf, size_t len, const tpu_http_limits_t *lim,
                  tpu_http_parse_result_t rc, const tpu_http_request_t *r) {
  if (rc == TPU_HTTP_PARSE_OK) {
    if (r->head_len == 0 || r->head_len > len || r->head_len > lim->max_head_bytes) abort();
    if (r->method_str < buf || r->method_str + r->method_len > buf + r->head_len) abort();
    if (r->target < buf || r->target + r->target_len > buf + r->head_len) abort();
    if (r->method_len == 0 || r->target_len == 0) abort();
    if (r->minor != 0 && r->minor != 1) abort();
    if (r->content_length > lim->max_body_bytes) abort();
  } else if (rc == TPU_HTTP_PARSE_ERROR) {
    switch (r->status) {
    case 400: case 413: case 417: case 431: case 501: case 505: break;
    default: abort();
    }
    if (!r->error || !*r->error) abort();
  } else if (rc != TPU_HTTP_PARSE_INCOMPLETE) {
    abort();
  } else if (len > lim->max_head_bytes) {
    abort(); /* an incomplete head longer than the limit must already be a 431 */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const size_t heads[4] = {64, 512, 8192, 65536};
  tpu_http_limits_t lim = {.max_head_bytes = heads[data[0] & 3],
                           .max_body_bytes = (data[0] & 4) ? 100 : (uint64_t)1 << 30};
  size -= 1;
  char *buf = malloc(size ? size : 1); /* exact size: ASan sees a read past the end */
  memcpy(buf, data + 1, size);
  tpu_http_request_t whole;
  memset(&whole, 0, sizeof whole);
  tpu_http_parse_result_t rc = tpu_http_parse_request(buf, size, &lim, &whole);
  check(buf, size, &lim, rc, &whole);
  size_t step = size > 512 ? size / 256 : 1;
  for (size_t n = 0; n < size; n += step) {
    tpu_http_request_t r;
    memset(&r, 0, sizeof r);
    char *pre = malloc(n ? n : 1);
    memcpy(pre, buf, n);
    tpu_http_parse_result_t prc = tpu_http_parse_request(pre, n, &lim, &r);
    check(pre, n, &lim, prc, &r);
    if (prc == TPU_HTTP_PARSE_OK) {
      /* The head was complete within the prefix: the whole buffer must agree. */
      if (rc != TPU_HTTP_PARSE_OK || r.head_len != whole.head_len ||
          r.content_length != whole.content_length || r.method != whole.method ||
          r.keep_alive != whole.keep_alive || r.target_len != whole.target_len)
        abort();
    } else if (prc == TPU_HTTP_PARSE_ERROR && rc != TPU_HTTP_PARSE_ERROR) {
      abort(); /* an error in a prefix cannot be undone by more bytes */
    }
    free(pre);
  }
  free(buf);
  return 0;
}
