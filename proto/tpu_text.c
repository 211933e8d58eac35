/*
 * tpu_text.c - error text and growable buffers (see tpu_text.h).
 */
#include "tpu_text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int tpu_verrf(char *err, size_t errlen, const char *fmt, va_list ap) {
  if (!err || !errlen) return vsnprintf(NULL, 0, fmt, ap);
  return vsnprintf(err, errlen, fmt, ap);
}

int tpu_errf(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = tpu_verrf(err, errlen, fmt, ap);
  va_end(ap);
  return n;
}

int tpu_errf_ret(int ret, char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_verrf(err, errlen, fmt, ap);
  va_end(ap);
  return ret;
}

#define BUF_MIN 256 /* bytes of the first allocation, unless more is asked for at once */

int tpu_buf_reserve(tpu_buf_t *b, size_t more) {
  if (b->oom) return -1;
  if (more > SIZE_MAX - 1 - b->len) goto oom;
  size_t need = b->len + more + 1;
  if (need <= b->cap) return 0;
  /* Doubling keeps appends amortized O(1); a larger request is met exactly (a writer that
   * reserves its known size gets no slack). */
  size_t cap = !b->cap ? BUF_MIN : b->cap <= SIZE_MAX / 2 ? 2 * b->cap : SIZE_MAX;
  if (cap < need) cap = need;
  char *p = realloc(b->p, cap);
  if (!p) goto oom;
  p[b->len] = '\0';
  b->p = p;
  b->cap = cap;
  return 0;
oom:
  b->oom = 1;
  return -1;
}

void tpu__buf_add_grow(tpu_buf_t *b, const void *s, size_t n) {
  if (tpu_buf_reserve(b, n) != 0) return;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void tpu_buf_vprintf(tpu_buf_t *b, const char *fmt, va_list ap) {
  if (b->oom) return;
  va_list again;
  va_copy(again, ap);
  /* Straight into the free space; when it does not fit, grow once and format again. */
  size_t room = b->p ? b->cap - b->len : 0;
  int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
  if (n >= 0 && (size_t)n >= room) {
    if (tpu_buf_reserve(b, (size_t)n) == 0) vsnprintf(b->p + b->len, (size_t)n + 1, fmt, again);
    else n = -1;
  }
  va_end(again);
  if (n >= 0) b->len += (size_t)n;
  if (b->p) b->p[b->len] = '\0'; /* a failed attempt may have written into the free space */
}

void tpu_buf_printf(tpu_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

void tpu_buf_clear(tpu_buf_t *b) {
  b->len = 0;
  b->oom = 0;
  if (b->p) b->p[0] = '\0';
}

void tpu_buf_free(tpu_buf_t *b) {
  if (!b) return;
  free(b->p);
  memset(b, 0, sizeof *b);
}

char *tpu_buf_detach(tpu_buf_t *b, size_t *len) {
  char *p = b->oom || !b->len ? NULL : b->p;
  if (len) *len = p ? b->len : 0;
  if (!p) free(b->p);
  memset(b, 0, sizeof *b);
  return p;
}

int tpu_token_list_has(const char *v, size_t n, const char *tok) {
  size_t tl = strlen(tok), i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t s = i;
    while (i < n && v[i] != ',') i++;
    size_t e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (e - s == tl && tl && strncasecmp(v + s, tok, tl) == 0) return 1;
  }
  return 0;
}
