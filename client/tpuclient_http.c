/*
 * tpuclient_http.c - HTTP/1.1 answer heads for libtpuclient's HTTP connections, from bytes.
 *
 * DESIGN
 * Owns the parsing of one answer head (status line and header fields, RFC 9112) into the few
 * facts the connection engine needs to frame the body and to know whether the server keeps the
 * connection: status, Content-Length, Transfer-Encoding, Connection. Pure: no sockets, no
 * allocation, so it is tested from bytes. Strict where leniency would desynchronize a pipelined
 * stream (a Content-Length that is not a number, two that differ, obsolete line folding) and
 * lenient elsewhere (unknown fields are skipped, an empty reason phrase is fine).
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "tpuclient_int.h"
#include "tpu_text.h"

static int bad(char *err, size_t errlen, const char *what, const char *p, size_t n) {
  /* Quote at most 60 bytes of the offending line, control bytes as '?'. */
  char q[64];
  size_t k = 0;
  for (size_t i = 0; i < n && k < 60; i++) q[k++] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
  q[k] = '\0';
  snprintf(err, errlen, "%s: '%s%s'", what, q, n > 60 ? "..." : "");
  return -1;
}

int tpu__http_parse_head(const char *buf, size_t len, size_t *scanned, tpu__http_head_t *h,
                         char *err, size_t errlen) {
  /* Find the blank line that ends the head, resuming where the last call stopped (minus the 3
   * bytes of a terminator that may straddle the old end). */
  size_t from = *scanned > 3 ? *scanned - 3 : 0;
  const char *end = len > from ? memmem(buf + from, len - from, "\r\n\r\n", 4) : NULL;
  if (!end) {
    *scanned = len;
    /* A stream that does not even begin like a status line is not worth waiting for. */
    size_t k = len < 5 ? len : 5;
    if (memcmp(buf, "HTTP/", k) != 0)
      return bad(err, errlen, "not an HTTP answer (expected 'HTTP/1.x NNN')", buf, len);
    return 0;
  }
  memset(h, 0, sizeof *h);
  h->content_length = -1;
  h->head_len = (size_t)(end - buf) + 4;
  const char *line = buf, *stop = end + 2; /* each line ends at a CRLF; the last one at end */
  const char *eol = memchr(line, '\r', (size_t)(stop - line));
  size_t ll = (size_t)(eol - line);
  /* Status line: HTTP/1.x SP 3DIGIT [SP reason] */
  if (eol[1] != '\n' || ll < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[7] < '0' ||
      line[7] > '9' ||
      line[8] != ' ' || line[9] < '1' || line[9] > '5' || line[10] < '0' || line[10] > '9' ||
      line[11] < '0' || line[11] > '9' || (ll > 12 && line[12] != ' '))
    return bad(err, errlen, "bad status line (expected 'HTTP/1.x NNN reason')", line, ll);
  h->minor = line[7] - '0';
  h->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  bool keep_alive = false, close = false;
  for (line = eol + 2; line < stop; line = eol + 2) {
    eol = memchr(line, '\r', (size_t)(stop - line));
    if (!eol || eol[1] != '\n')
      return bad(err, errlen, "bare CR in a header field", line, (size_t)(stop - line));
    ll = (size_t)(eol - line);
    if (line[0] == ' ' || line[0] == '\t')
      return bad(err, errlen, "obsolete line folding in a header field", line, ll);
    const char *colon = memchr(line, ':', ll);
    if (!colon || colon == line)
      return bad(err, errlen, "header field without a name (expected 'Name: value')", line, ll);
    size_t nl = (size_t)(colon - line);
    for (size_t i = 0; i < nl; i++)
      if (line[i] <= ' ' || line[i] >= 0x7f)
        return bad(err, errlen, "bad character in a header field name", line, ll);
    const char *v = colon + 1, *ve = eol;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    size_t vl = (size_t)(ve - v);
    if (nl == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
      if (vl == 0 || vl > 18)
        return bad(err, errlen, "bad Content-Length (expected a byte count)", line, ll);
      int64_t n = 0;
      for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9')
          return bad(err, errlen, "bad Content-Length (expected a byte count)", line, ll);
        n = n * 10 + (v[i] - '0');
      }
      if (h->content_length >= 0 && h->content_length != n)
        return bad(err, errlen, "two Content-Length fields that differ", line, ll);
      h->content_length = n;
    } else if (nl == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) {
      h->chunked = true;
    } else if (nl == 10 && strncasecmp(line, "Connection", 10) == 0) {
      if (tpu_token_list_has(v, vl, "close")) close = true;
      if (tpu_token_list_has(v, vl, "keep-alive")) keep_alive = true;
    }
  }
  h->close = close || (h->minor == 0 && !keep_alive);
  return 1;
}

tpu_client_status_t tpu__http_status_code(int s) {
  if (s >= 200 && s < 300) return TPU_CLIENT_OK;
  switch (s) {
  case 400: return TPU_CLIENT_INVALID_ARGUMENT;
  case 401: return TPU_CLIENT_UNAUTHENTICATED;
  case 403: return TPU_CLIENT_PERMISSION_DENIED;
  case 404: return TPU_CLIENT_NOT_FOUND;
  case 405:
  case 501: return TPU_CLIENT_UNIMPLEMENTED;
  case 408:
  case 504: return TPU_CLIENT_DEADLINE_EXCEEDED;
  case 409: return TPU_CLIENT_ALREADY_EXISTS;
  case 411:
  case 415: return TPU_CLIENT_INVALID_ARGUMENT;
  case 412: return TPU_CLIENT_FAILED_PRECONDITION;
  case 413:
  case 429:
  case 431: return TPU_CLIENT_RESOURCE_EXHAUSTED;
  case 499: return TPU_CLIENT_CANCELLED;
  case 500: return TPU_CLIENT_INTERNAL;
  case 502:
  case 503: return TPU_CLIENT_UNAVAILABLE;
  default: return s >= 500 ? TPU_CLIENT_INTERNAL : TPU_CLIENT_UNKNOWN;
  }
}
