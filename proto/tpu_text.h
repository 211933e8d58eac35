/*
 * tpu_text.h - error text and growable buffers: the helpers every layer above proto/ shares.
 *
 * DESIGN
 * proto/ is the library both the server and the client link, so the text helpers that both need
 * live here, once. Two of them:
 *   - tpu_errf: printf into a caller's fixed `char *err, size_t errlen` message buffer, the one
 *     way tpud writes an error message. It accepts a NULL or empty buffer (the caller did not
 *     want the text) and always NUL-terminates what it writes; text that does not fit is cut.
 *   - tpu_buf_t: a growable byte buffer that is always NUL-terminated, so it serves for text
 *     (JSON, Prometheus pages, audit records) and bytes alike. Appends never fail loudly: one
 *     that cannot grow the buffer sets `oom`, and every append after it does nothing, so a
 *     writer appends freely and checks `oom` once at the end (the buffer then holds a prefix of
 *     what was asked, never a mix with holes).
 * Neither does I/O, takes a lock or keeps global state.
 */
#ifndef TPU_TEXT_H
#define TPU_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <string.h>

/*
 * Formats into err (errlen bytes, NUL-terminated, cut to fit). err may be NULL or errlen 0: then
 * nothing is written. Returns what vsnprintf returns: the length of the whole message (errlen or
 * more when it was cut), or a negative value on an encoding error. A prefix is part of the
 * format ("%s: ..."), so a message cut short is always a prefix of the whole one.
 */
int tpu_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/*
 * tpu_errf that returns `ret`, so an error path is one statement:
 *   return tpu_errf_ret(TPU_EINVAL, err, errlen, "%s: no such layer", path);
 * Being a function, its arguments (errno among them) are read before the message is formatted.
 * Files whose messages share a prefix wrap it in a macro: "%s: " fmt, prefix.
 */
int tpu_errf_ret(int ret, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* tpu_errf with a va_list, for wrappers that fill more than the message (it does not va_end). */
int tpu_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* A growable buffer; zero-initialize it (tpu_buf_t b = {0}). */
typedef struct {
  char *p;    /* the bytes, NUL-terminated; NULL until something was appended or reserved */
  size_t len; /* bytes held, not counting the NUL */
  size_t cap; /* bytes allocated (at least len + 1 once p is set) */
  int oom;    /* an append could not grow the buffer: it and every later one did nothing */
} tpu_buf_t;

/* Makes room for `more` bytes past len (and the NUL) in one allocation; 0, or -1 with oom set.
 * A writer that knows its size calls it once, so the appends that follow never reallocate. */
int tpu_buf_reserve(tpu_buf_t *b, size_t more);
/* tpu_buf_add's path when the bytes do not fit: grows the buffer first. Not for callers. */
void tpu__buf_add_grow(tpu_buf_t *b, const void *s, size_t n);
/* Appends n bytes (they may include NULs). Inline: the JSON and audit writers append a few bytes
 * at a time, one call per element (measured: out of line, FP32 JSON formatting took 6% longer). */
static inline void tpu_buf_add(tpu_buf_t *b, const void *s, size_t n) {
  if (b->p && !b->oom && n < b->cap - b->len) {
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
  } else {
    tpu__buf_add_grow(b, s, n);
  }
}
/* Appends a NUL-terminated string. */
static inline void tpu_buf_adds(tpu_buf_t *b, const char *s) { tpu_buf_add(b, s, strlen(s)); }
/* Appends printf-formatted text. */
void tpu_buf_printf(tpu_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* tpu_buf_printf with a va_list (it does not va_end). */
void tpu_buf_vprintf(tpu_buf_t *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Empties the buffer and clears oom, keeping its memory for reuse. */
void tpu_buf_clear(tpu_buf_t *b);
/* Frees the memory and zeroes the buffer; accepts NULL. */
void tpu_buf_free(tpu_buf_t *b);
/*
 * Hands the bytes to the caller (free them with free(3)) and zeroes the buffer. Returns NULL when
 * it holds nothing or oom is set (its memory is freed then); *len (may be NULL) gets the length,
 * 0 with NULL. Check oom before detaching when an empty result is not an error.
 */
char *tpu_buf_detach(tpu_buf_t *b, size_t *len);

/* Whether the comma-separated token list v[0..n) (optional spaces and tabs around each token,
 * as HTTP's Connection header) holds `tok`, compared case-insensitively. */
int tpu_token_list_has(const char *v, size_t n, const char *tok);

#endif /* TPU_TEXT_H */
