/*
 * http_parser.c - see http_parser.h. Pure functions over bytes; no allocation, no I/O.
 *
 * The chunked decoder is a byte-at-a-time state machine (data runs are copied whole), so a body
 * split anywhere across reads decodes the same; its states are the `cs_t` values below.
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

/* A header value that is a decimal count of 1 to 19 digits (so it fits uint64_t). */
static int decimal(const char *v, size_t n, uint64_t *out) {
  if (n == 0 || n > 19) return 0;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9') return 0;
    x = x * 10 + (uint64_t)(v[i] - '0');
  }
  *out = x;
  return 1;
}

/* Accept-Encoding (RFC 9110 12.5.3): whether gzip is acceptable. "gzip" or "x-gzip" with q > 0
 * says yes, with q=0 no; otherwise "*" with q > 0 says yes. */
static int accepts_gzip(const char *v, size_t n) {
  int named = -1, star = 0;
  size_t i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t s = i;
    while (i < n && v[i] != ',' && v[i] != ';' && v[i] != ' ' && v[i] != '\t') i++;
    size_t e = i;
    int q0 = 0; /* params: only q matters; q=0, 0.0, 0.00, 0.000 refuse */
    while (i < n && v[i] != ',') {
      if ((v[i] == 'q' || v[i] == 'Q') && i + 1 < n && v[i + 1] == '=' &&
          (i == 0 || v[i - 1] == ';' || v[i - 1] == ' ' || v[i - 1] == '\t')) {
        size_t j = i + 2;
        if (j < n && v[j] == '0') {
          j++;
          if (j < n && v[j] == '.')
            for (j++; j < n && v[j] == '0'; j++) {}
          q0 = j >= n || v[j] == ',' || v[j] == ' ' || v[j] == '\t' || v[j] == ';';
        }
      }
      i++;
    }
    if (ieq(v + s, e - s, "gzip") || ieq(v + s, e - s, "x-gzip")) named = !q0;
    else if (e - s == 1 && v[s] == '*') star = !q0;
  }
  return named >= 0 ? named : star;
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
  int has_cl = 0, has_te = 0, te_other = 0, n_ce = 0, conn_close = 0, conn_keep = 0;
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
        uint64_t x;
        if (!decimal(v, vlen, &x)) return bad(r, 400, "Content-Length: expected a decimal byte count");
        if (has_cl && x != cl) return bad(r, 400, "Content-Length given twice with different values");
        has_cl = 1;
        cl = x;
      }
      break;
    case 17:
      if (ieq(n, nlen, "transfer-encoding")) {
        /* Only "chunked", once: a list ("gzip, chunked") or a repeat is a coding we lack. */
        if (has_te++ || !ieq(v, vlen, "chunked")) te_other = 1;
      }
      break;
    case 15:
      if (ieq(n, nlen, "accept-encoding") && accepts_gzip(v, vlen)) r->accept_gzip = 1;
      break;
    case 16:
      if (ieq(n, nlen, "content-encoding")) {
        r->coding_str = v;
        r->coding_len = vlen;
        if (n_ce++) r->coding = TPU_HTTP_CODING_OTHER; /* two codings: not one we decode */
        else if (vlen == 0 || ieq(v, vlen, "identity")) r->coding = TPU_HTTP_CODING_IDENTITY;
        else if (ieq(v, vlen, "gzip") || ieq(v, vlen, "x-gzip")) r->coding = TPU_HTTP_CODING_GZIP;
        else if (ieq(v, vlen, "deflate")) r->coding = TPU_HTTP_CODING_DEFLATE;
        else r->coding = TPU_HTTP_CODING_OTHER;
      }
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
    case 31:
      if (ieq(n, nlen, "inference-header-content-length")) {
        uint64_t x;
        if (!decimal(v, vlen, &x))
          return bad(r, 400, "Inference-Header-Content-Length: expected a decimal byte count");
        if (r->has_infer_header && x != r->infer_header_len)
          return bad(r, 400, "Inference-Header-Content-Length given twice with different values");
        r->has_infer_header = 1;
        r->infer_header_len = x;
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
  if (has_te && r->minor == 0)
    return bad(r, 400, "Transfer-Encoding in an HTTP/1.0 request: send Content-Length");
  if (te_other)
    return bad(r, 501, "Transfer-Encoding: only chunked is supported (once, alone)");
  r->chunked = has_te;
  r->content_length = cl;
  r->keep_alive = r->minor == 1 ? !conn_close : (conn_keep && !conn_close);
  if (cl > limits->max_body_bytes) return bad(r, 413, "request body exceeds the server's limit");
  return TPU_HTTP_PARSE_OK;
}

/* ---- chunked bodies ---- */

/* Where the next byte of a chunked body falls. */
typedef enum {
  CS_SIZE = 0,   /* chunk-size hex digits */
  CS_BWS,        /* whitespace after the size: ';' or the line end must follow */
  CS_EXT,        /* ";ext[=val]" up to the line end */
  CS_SIZE_LF,    /* a CR ended the size line: LF must follow */
  CS_DATA,       /* chunk data (left bytes) */
  CS_DATA_CR,    /* the line end after the data */
  CS_DATA_LF,    /* its LF after a CR */
  CS_TRAILER0,   /* the start of a trailer line, or the final empty line */
  CS_TRAILER,    /* inside a trailer field line */
  CS_TRAILER_LF, /* a CR ended a trailer line */
  CS_END_LF,     /* a CR began the final empty line */
  CS_DONE        /* the body is complete */
} cs_t;

#define CHUNK_LINE_MAX 4096 /* bytes of one chunk-size line, extensions included */

/* Unlike the head, the chunked framing takes no bare LF: RFC 9112 allows one only in the
 * start-line and header fields (2.2), and a proxy in front that ends these lines only at CRLF
 * would frame the body differently (what it forwards as body would reach us as a request). */
#define BARE_LF "chunked body: a line ends in a bare LF: chunked framing needs CRLF"

void tpu_http_chunked_init(tpu_http_chunked_t *c) { memset(c, 0, sizeof *c); }

static tpu_http_chunked_result_t chunk_bad(tpu_http_chunked_t *c, int status, const char *why) {
  c->status = status;
  c->error = why;
  return TPU_HTTP_CHUNKED_ERROR;
}

static int hexval(unsigned char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  ch |= 0x20;
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

tpu_http_chunked_result_t tpu_http_chunked_decode(tpu_http_chunked_t *c, char *buf, size_t len,
                                                  const tpu_http_limits_t *limits,
                                                  size_t *consumed, size_t *produced) {
  size_t i = 0, o = 0;
  tpu_http_chunked_result_t rc = TPU_HTTP_CHUNKED_INCOMPLETE;
  while (i < len && c->state != CS_DONE) {
    unsigned char ch = (unsigned char)buf[i];
    switch ((cs_t)c->state) {
    case CS_SIZE: {
      int d = hexval(ch);
      if (d >= 0) {
        if (++c->line > CHUNK_LINE_MAX) {
          rc = chunk_bad(c, 400, "chunked body: chunk-size line too long");
          goto out;
        }
        /* The size is a promise: over the limit is a 413 before its data comes. */
        if (c->left > (limits->max_body_bytes - c->decoded) / 16 ||
            c->left * 16 + (uint64_t)d > limits->max_body_bytes - c->decoded) {
          rc = chunk_bad(c, 413, "chunked request body exceeds the server's limit");
          goto out;
        }
        c->left = c->left * 16 + (uint64_t)d;
        c->digits++;
        i++;
        break;
      }
      if (!c->digits) {
        rc = chunk_bad(c, 400, "chunked body: expected a hexadecimal chunk size");
        goto out;
      }
      if (ch == ';') {
        c->state = CS_EXT;
      } else if (ch == ' ' || ch == '\t') {
        c->state = CS_BWS;
      } else if (ch == '\r') {
        c->state = CS_SIZE_LF;
        i++;
      } else if (ch == '\n') {
        rc = chunk_bad(c, 400, BARE_LF);
        goto out;
      } else {
        rc = chunk_bad(c, 400, "chunked body: chunk size is not hexadecimal");
        goto out;
      }
      break;
    }
    case CS_BWS:
      if (ch == ';') {
        c->state = CS_EXT; /* counted there */
        break;
      }
      if (ch == '\r') {
        c->state = CS_SIZE_LF;
      } else if (ch == '\n') {
        rc = chunk_bad(c, 400, BARE_LF);
        goto out;
      } else if (ch != ' ' && ch != '\t') {
        rc = chunk_bad(c, 400, "chunked body: after the chunk size and whitespace, expected "
                               "';' and an extension, or CRLF");
        goto out;
      } else if (++c->line > CHUNK_LINE_MAX) {
        rc = chunk_bad(c, 400, "chunked body: chunk-size line too long");
        goto out;
      }
      i++;
      break;
    case CS_EXT:
      if (ch == '\r') {
        c->state = CS_SIZE_LF;
      } else if (ch == '\n') {
        rc = chunk_bad(c, 400, BARE_LF);
        goto out;
      } else if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
        rc = chunk_bad(c, 400, "chunked body: control character in a chunk extension");
        goto out;
      } else if (++c->line > CHUNK_LINE_MAX) {
        rc = chunk_bad(c, 400, "chunked body: chunk-size line too long");
        goto out;
      }
      i++;
      break;
    case CS_SIZE_LF:
      if (ch != '\n') {
        rc = chunk_bad(c, 400, "chunked body: CR without LF after the chunk size");
        goto out;
      }
      c->state = c->left ? CS_DATA : CS_TRAILER0;
      i++;
      break;
    case CS_DATA: {
      size_t n = len - i;
      if ((uint64_t)n > c->left) n = (size_t)c->left;
      memmove(buf + o, buf + i, n); /* o <= i: the framing bytes read so far are dropped */
      o += n;
      i += n;
      c->left -= n;
      c->decoded += n;
      if (!c->left) c->state = CS_DATA_CR;
      break;
    }
    case CS_DATA_CR:
      if (ch != '\r') {
        rc = chunk_bad(c, 400, ch == '\n' ? BARE_LF
                                         : "chunked body: chunk data longer than its size "
                                           "(no CRLF after it)");
        goto out;
      }
      c->state = CS_DATA_LF;
      i++;
      break;
    case CS_DATA_LF:
      if (ch != '\n') {
        rc = chunk_bad(c, 400, "chunked body: CR without LF after the chunk data");
        goto out;
      }
      c->state = CS_SIZE;
      c->digits = c->line = 0;
      i++;
      break;
    case CS_TRAILER0:
    case CS_TRAILER:
    case CS_TRAILER_LF:
    case CS_END_LF:
      if (++c->trailer > limits->max_head_bytes) {
        rc = chunk_bad(c, 431, "chunked body: trailer section exceeds the server's limit");
        goto out;
      }
      if (c->state == CS_END_LF || c->state == CS_TRAILER_LF) {
        if (ch != '\n') {
          rc = chunk_bad(c, 400, "chunked body: CR without LF in the trailer section");
          goto out;
        }
        c->state = c->state == CS_END_LF ? CS_DONE : CS_TRAILER0;
      } else if (ch == '\r') {
        c->state = c->state == CS_TRAILER0 ? CS_END_LF : CS_TRAILER_LF;
      } else if (ch == '\n') {
        rc = chunk_bad(c, 400, BARE_LF);
        goto out;
      } else if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
        rc = chunk_bad(c, 400, "chunked body: control character in a trailer field");
        goto out;
      } else {
        c->state = CS_TRAILER;
      }
      i++;
      break;
    case CS_DONE:
      break;
    }
  }
  if (c->state == CS_DONE) rc = TPU_HTTP_CHUNKED_DONE;
out:
  *consumed = i;
  *produced = o;
  return rc;
}
