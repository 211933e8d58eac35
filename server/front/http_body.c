/*
 * http_body.c - see http_body.h: gzip and deflate request bodies through zlib's inflate.
 *
 * DESIGN
 * The output buffer starts at a few times the input (at most the limit) and doubles up to
 * max + 1 bytes: producing byte max + 1 is the 413, so the check needs no extra inflate call and
 * nothing is allocated beyond it. Deflate tries the zlib wrapper first and, when the first
 * bytes are not a zlib header, the raw format (RFC 9110 says zlib; some clients send raw).
 * Concatenated gzip members are decoded one after the other, as gzip(1) does.
 */
#include "http_body.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* inflate with window bits `wbits` over all of in; 0, or an HTTP status with msg. */
static int inflate_all(int wbits, const char *name, const unsigned char *in, size_t len,
                       uint64_t max, char **out, size_t *outlen, char *msg, size_t msglen,
                       int *header_error) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, wbits) != Z_OK) {
    snprintf(msg, msglen, "out of memory decoding the %s request body", name);
    return 500;
  }
  uint64_t limit = max + 1; /* producing this byte is the 413 */
  size_t cap = len < ((size_t)1 << 28) ? len * 4 + 4096 : len;
  if (cap > limit) cap = (size_t)limit;
  char *buf = malloc(cap + 1);
  int status = 0;
  size_t have = 0;
  if (!buf) {
    snprintf(msg, msglen, "out of memory decoding the %s request body", name);
    status = 500;
    goto done;
  }
  z.next_in = (unsigned char *)in;
  for (;;) {
    /* zlib counts in uInt: feed and take at most 1 GiB a call. */
    size_t in_now = len - (size_t)(z.next_in - in);
    z.avail_in = (uInt)(in_now < (1u << 30) ? in_now : (1u << 30));
    if (have == cap) {
      if (cap >= limit) {
        snprintf(msg, msglen, "request body exceeds the limit of %llu bytes once decoded "
                 "(%s: %zu bytes on the wire)", (unsigned long long)max, name, len);
        status = 413;
        goto done;
      }
      size_t ncap = cap * 2 < cap || cap * 2 > limit ? (size_t)limit : cap * 2;
      char *nb = realloc(buf, ncap + 1);
      if (!nb) {
        snprintf(msg, msglen, "out of memory decoding the %s request body", name);
        status = 500;
        goto done;
      }
      buf = nb;
      cap = ncap;
    }
    size_t room = cap - have;
    z.next_out = (unsigned char *)buf + have;
    z.avail_out = (uInt)(room < (1u << 30) ? room : (1u << 30));
    uInt before = z.avail_out;
    int zr = inflate(&z, Z_NO_FLUSH);
    have += before - z.avail_out;
    if (have > max) {
      snprintf(msg, msglen, "request body exceeds the limit of %llu bytes once decoded "
               "(%s: %zu bytes on the wire)", (unsigned long long)max, name, len);
      status = 413;
      goto done;
    }
    if (zr == Z_STREAM_END) {
      size_t rest = len - (size_t)(z.next_in - in);
      if (!rest) break;
      /* Another gzip member (RFC 1952 2.2); after a deflate stream, bytes are an error. */
      if (wbits > 15 && rest >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) {
        inflateReset(&z);
        continue;
      }
      snprintf(msg, msglen, "%s request body: %zu bytes after the end of the compressed data",
               name, rest);
      status = 400;
      goto done;
    }
    if (zr == Z_BUF_ERROR && z.avail_in == 0 && (size_t)(z.next_in - in) == len &&
        z.avail_out != 0) {
      snprintf(msg, msglen, "%s request body is truncated: the compressed data ends early "
               "(%zu bytes)", name, len);
      status = 400;
      goto done;
    }
    if (zr == Z_MEM_ERROR) {
      snprintf(msg, msglen, "out of memory decoding the %s request body", name);
      status = 500;
      goto done;
    }
    if (zr != Z_OK && zr != Z_BUF_ERROR) {
      if (header_error && have == 0 && (size_t)(z.next_in - in) <= 2) *header_error = 1;
      snprintf(msg, msglen, "%s request body is not valid %s data: %s", name, name,
               z.msg ? z.msg : "corrupt stream");
      status = 400;
      goto done;
    }
    if (z.avail_in == 0 && (size_t)(z.next_in - in) == len && z.avail_out != 0) {
      /* Everything fed, room left, no end: the stream is cut short. */
      snprintf(msg, msglen, "%s request body is truncated: the compressed data ends early "
               "(%zu bytes)", name, len);
      status = 400;
      goto done;
    }
  }
done:
  inflateEnd(&z);
  if (status) {
    free(buf);
    return status;
  }
  buf[have] = 0;
  *out = buf;
  *outlen = have;
  return 0;
}

int tpu_http_body_decode(tpu_http_coding_t coding, const void *in, size_t len, uint64_t max,
                         char **out, size_t *outlen, char *msg, size_t msglen) {
  *out = NULL;
  *outlen = 0;
  const unsigned char *p = in ? in : (const unsigned char *)"";
  switch (coding) {
  case TPU_HTTP_CODING_GZIP:
    return inflate_all(16 + 15, "gzip", p, len, max, out, outlen, msg, msglen, NULL);
  case TPU_HTTP_CODING_DEFLATE: {
    int header_error = 0;
    int st = inflate_all(15, "deflate", p, len, max, out, outlen, msg, msglen, &header_error);
    if (st == 400 && header_error) /* not a zlib header: a raw deflate stream? */
      st = inflate_all(-15, "deflate", p, len, max, out, outlen, msg, msglen, NULL);
    return st;
  }
  case TPU_HTTP_CODING_IDENTITY:
  case TPU_HTTP_CODING_OTHER:
    break;
  }
  snprintf(msg, msglen, "unsupported Content-Encoding: expected gzip, deflate or identity");
  return 415;
}

int tpu_http_body_gzip(const void *in, size_t len, char **out, size_t *outlen) {
  *out = NULL;
  *outlen = 0;
  z_stream z;
  memset(&z, 0, sizeof z);
  if (len >= (1u << 30) || deflateInit2(&z, 1, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  size_t cap = deflateBound(&z, (uLong)len);
  char *buf = malloc(cap);
  int rc = -1;
  if (!buf) goto done;
  z.next_in = (unsigned char *)in;
  z.avail_in = (uInt)len;
  z.next_out = (unsigned char *)buf;
  z.avail_out = (uInt)cap;
  if (deflate(&z, Z_FINISH) != Z_STREAM_END || z.total_out >= len) goto done;
  *out = buf;
  *outlen = z.total_out;
  buf = NULL;
  rc = 0;
done:
  deflateEnd(&z);
  free(buf);
  return rc;
}
