/*
 * http_parser.c - see http_parser.h. Pure functions over bytes; no allocation, no I/O.
 */
#include "http_parser.h"
#include "tpu_text.h"

#include <string.h>

/* tchar of RFC 9110 (token characters). */
static int is_tchar(unsigned char c) {
  if (c >= '0' && c <= '9') return 1;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return 1;
  return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Visible ASCII or obs-text (field values and targets may carry UTF-8 bytes). */
static int is_vchar(unsigned char c) { return (c > 0x20 && c != 0x7f); }

static int ieq(const char *a, size_t alen, const char *lit) {
  size_t n = strlen(lit);
  if (alen != n) return 0;
  for (size_t i = 0; i < n; i++)
    if ((a[i] | 0x20) != lit[i]) return 0; /* lit is lower case */
  return 1;
}

static tpu_http_parse_result_t bad(tpu_http_request_t *r, int status, const char *why) {
  r->status = status;
  r->error = why;
  return TPU_HTTP_PARSE_ERROR;
}

/* Finds the end of the head: the index just past the empty line, or 0 when not there yet. */
static size_t head_end(const char *buf, size_t len) {
  const char *p = buf, *end = buf + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return 0;
    const char *q = nl + 1;
    if (q < end && *q == '\n') return (size_t)(q + 1 - buf);
    if (q + 1 < end && q[0] == '\r' && q[1] == '\n') return (size_t)(q + 2 - buf);
    if (q >= end || (q + 1 >= end && *q == '\r')) return 0;
    p = q;
  }
  return 0;
}

tpu_http_parse_result_t tpu_http_parse_request(const char *buf, size_t len,
                                               const tpu_http_limits_t *limits,
                                               tpu_http_request_t *r) {
  memset(r, 0, sizeof *r);
  /* Tolerate empty lines before a request (RFC 9112 2.2: at least one CRLF). */
  size_t skip = 0;
  while (skip < len && skip < 8 && (buf[skip] == '\r' || buf[skip] == '\n')) skip++;
  size_t hend = head_end(buf + skip, len - skip);
  if (!hend) {
    if (len > limits->max_head_bytes)
      return bad(r, 431, "request line and headers exceed the server's limit");
    return TPU_HTTP_PARSE_INCOMPLETE;
  }
  if (skip + hend > limits->max_head_bytes) /* the skipped empty lines count too */
    return bad(r, 431, "request line and headers exceed the server's limit");
  const char *p = buf + skip, *end = buf + skip + hend;
  r->head_len = skip + hend;

  /* Request line. */
  const char *m = p;
  while (p < end && is_tchar((unsigned char)*p)) p++;
  if (p == m || p >= end || *p != ' ') return bad(r, 400, "malformed request line");
  r->method_str = m;
  r->method_len = (size_t)(p - m);
  if (r->method_len == 3 && !memcmp(m, "GET", 3)) r->method = TPU_HTTP_GET;
  else if (r->method_len == 4 && !memcmp(m, "POST", 4)) r->method = TPU_HTTP_POST;
  else if (r->method_len == 4 && !memcmp(m, "HEAD", 4)) r->method = TPU_HTTP_HEAD;
  else r->method = TPU_HTTP_OTHER;
  p++;
  const char *t = p;
  while (p < end && is_vchar((unsigned char)*p)) p++;
  if (p == t || p >= end || *p != ' ') return bad(r, 400, "malformed request line");
  r->target = t;
  r->target_len = (size_t)(p - t);
  p++;
  if (end - p < 9 || memcmp(p, "HTTP/", 5) != 0 || p[5] < '0' || p[5] > '9' || p[6] != '.' ||
      p[7] < '0' || p[7] > '9')
    return bad(r, 400, "malformed request line: expected HTTP/1.1 or HTTP/1.0");
  if (p[5] != '1' || (p[7] != '0' && p[7] != '1'))
    return bad(r, 505, "HTTP version not supported: use HTTP/1.1 or HTTP/1.0");
  r->minor = p[7] - '0';
  p += 8;
  if (*p == '\r') p++;
  if (p >= end || *p != '\n') return bad(r, 400, "malformed request line");
  p++;
  if (r->target[0] != '/') {
    /* absolute-form (http://host/path) is accepted; the authority is ignored. */
    if (r->target_len > 7 && ieq(r->target, 7, "http://")) {
      const char *s = memchr(r->target + 7, '/', r->target_len - 7);
      if (!s) return bad(r, 400, "malformed request target");
      r->target_len -= (size_t)(s - r->target);
      r->target = s;
    } else {
      return bad(r, 400, "malformed request target: expected an absolute path");
    }
  }

  /* Header fields. */
  int has_cl = 0, has_te = 0, conn_close = 0, conn_keep = 0;
  uint64_t cl = 0;
  for (;;) {
    if (p < end && *p == '\r') {
      if (p + 1 < end && p[1] == '\n') break;
      return bad(r, 400, "malformed header line");
    }
    if (p < end && *p == '\n') break;
    if (*p == ' ' || *p == '\t') return bad(r, 400, "obsolete header line folding is not allowed");
    const char *n = p;
    while (p < end && is_tchar((unsigned char)*p)) p++;
    if (p == n || p >= end || *p != ':')
      return bad(r, 400, "malformed header line: expected \"name: value\"");
    size_t nlen = (size_t)(p - n);
    p++;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    const char *v = p;
    while (p < end && *p != '\r' && *p != '\n') {
      unsigned char c = (unsigned char)*p;
      if ((c < 0x20 && c != '\t') || c == 0x7f) return bad(r, 400, "control character in a header value");
      p++;
    }
    const char *ve = p;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    size_t vlen = (size_t)(ve - v);
    if (*p == '\r') {
      if (p + 1 >= end || p[1] != '\n') return bad(r, 400, "malformed header line");
      p++;
    }
    p++; /* '\n' */
    switch (nlen) {
    case 14:
      if (ieq(n, nlen, "content-length")) {
        if (vlen == 0 || vlen > 19) return bad(r, 400, "Content-Length: expected a decimal byte count");
        uint64_t x = 0;
        for (size_t i = 0; i < vlen; i++) {
          if (v[i] < '0' || v[i] > '9')
            return bad(r, 400, "Content-Length: expected a decimal byte count");
          x = x * 10 + (uint64_t)(v[i] - '0');
        }
        if (has_cl && x != cl) return bad(r, 400, "Content-Length given twice with different values");
        has_cl = 1;
        cl = x;
      }
      break;
    case 17:
      if (ieq(n, nlen, "transfer-encoding")) has_te = 1;
      break;
    case 13:
      if (ieq(n, nlen, "authorization") && r->authorization_count++ == 0) {
        r->authorization = v;
        r->authorization_len = vlen;
      }
      break;
    case 10:
      if (ieq(n, nlen, "connection")) {
        if (tpu_token_list_has(v, vlen, "close")) conn_close = 1;
        if (tpu_token_list_has(v, vlen, "keep-alive")) conn_keep = 1;
      }
      break;
    case 6:
      if (ieq(n, nlen, "expect")) {
        if (!ieq(v, vlen, "100-continue")) {
          r->keep_alive = 0;
          return bad(r, 417, "Expect: only 100-continue is supported");
        }
        r->expect_continue = 1;
      }
      break;
    default:
      break;
    }
  }
  if (has_te && has_cl)
    return bad(r, 400, "Transfer-Encoding together with Content-Length is not allowed");
  if (has_te)
    return bad(r, 411, "chunked request bodies are not supported: send Content-Length");
  r->content_length = cl;
  r->keep_alive = r->minor == 1 ? !conn_close : (conn_keep && !conn_close);
  if (cl > limits->max_body_bytes) return bad(r, 413, "request body exceeds the server's limit");
  return TPU_HTTP_PARSE_OK;
}
