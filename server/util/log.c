/*
 * log.c - timestamped, levelled, line-atomic logging to stderr.
 *
 * DESIGN
 * Formats into a stack buffer and emits it with a single write(2) (atomic for lines shorter than
 * PIPE_BUF on pipes, and never interleaved within a line on regular files opened O_APPEND or
 * terminals in practice). Long messages are truncated, never split. No locks, no allocation.
 * The JSON format (log.h) escapes on its own (json_escape), so that a cut never leaves half an
 * escape or half a UTF-8 sequence and the object is always closed.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = TPU_LOG_INFO;
static atomic_int log_format = TPU_LOG_TEXT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const level_tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void tpu_log_set_level(tpu_log_level_t level) { atomic_store(&log_level, (int)level); }

tpu_log_level_t tpu_log_get_level(void) { return (tpu_log_level_t)atomic_load(&log_level); }

int tpu_log_parse_level(const char *name, tpu_log_level_t *out) {
  for (int i = 0; i < 4; i++) {
    if (name && strcmp(name, level_names[i]) == 0) {
      *out = (tpu_log_level_t)i;
      return 0;
    }
  }
  return -1;
}

const char *tpu_log_level_name(tpu_log_level_t level) {
  return (unsigned)level < 4 ? level_names[level] : "unknown";
}

/* Copies `in` into out[o..cap), writing bytes that `quote` (all: names) or control characters
 * only (messages: UTF-8 passes) as \xNN, stopping with room for 4 more bytes. Returns the new
 * length; *rest points at what did not fit. */
static size_t escape(char *out, size_t o, size_t cap, const char *in, int quote,
                     const char **rest) {
  static const char hex[] = "0123456789abcdef";
  for (; *in && o + 8 < cap; in++) {
    unsigned char c = (unsigned char)*in;
    if (c < 0x20 || c == 0x7f ||
        (quote && (c > 0x7f || c == '\\' || c == '\'' || c == '"'))) {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    } else {
      out[o++] = (char)c;
    }
  }
  *rest = in;
  return o;
}

const char *tpu_log_escape(char *out, size_t outlen, const char *in) {
  if (!outlen) return out;
  const char *rest;
  size_t o = escape(out, 0, outlen, in ? in : "(null)", 1, &rest);
  if (*rest && o + 3 < outlen) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
  return out;
}

static const char *const format_names[] = {"text", "json"};

void tpu_log_set_format(tpu_log_format_t format) { atomic_store(&log_format, (int)format); }

tpu_log_format_t tpu_log_get_format(void) { return (tpu_log_format_t)atomic_load(&log_format); }

int tpu_log_parse_format(const char *name, tpu_log_format_t *out) {
  for (int i = 0; i < 2; i++) {
    if (name && strcmp(name, format_names[i]) == 0) {
      *out = (tpu_log_format_t)i;
      return 0;
    }
  }
  return -1;
}

const char *tpu_log_format_name(tpu_log_format_t format) {
  return (unsigned)format < 2 ? format_names[format] : "unknown";
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when s does not start one (RFC 3629:
 * no overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *s) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t n;
  unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0; /* also stops at the NUL */
  return n;
}

/* Appends `in` as the inside of a JSON string to out[o..cap), keeping `keep` bytes free after
 * it; a message that does not fit ends in "...". Returns the new length. */
static size_t json_escape(char *out, size_t o, size_t cap, size_t keep, const char *in) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)in;
  while (*p) {
    char esc[8];
    size_t n = 0, adv = 1;
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      esc[n++] = '\\';
      esc[n++] = (char)c;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      esc[n++] = '\\';
      esc[n++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
    } else if (c < 0x20 || c == 0x7f) {
      memcpy(esc, "\\u00", 4);
      n = 4;
      esc[n++] = hex[c >> 4];
      esc[n++] = hex[c & 15];
    } else if (c < 0x80) {
      esc[n++] = (char)c;
    } else if ((adv = utf8_len(p)) != 0) {
      memcpy(esc, p, adv);
      n = adv;
    } else { /* not UTF-8: the text \xNN, its backslash escaped */
      adv = 1;
      memcpy(esc, "\\\\x", 3);
      n = 3;
      esc[n++] = hex[c >> 4];
      esc[n++] = hex[c & 15];
    }
    if (o + n + 3 + keep > cap) { /* room for "..." and what follows */
      memcpy(out + o, "...", 3);
      return o + 3;
    }
    memcpy(out + o, esc, n);
    o += n;
    p += adv;
  }
  return o;
}

size_t tpu_log_format_line(char *out, size_t cap, tpu_log_format_t format, tpu_log_level_t level,
                           long long sec, long nsec, const char *msg) {
  if ((unsigned)level >= 4) level = TPU_LOG_ERROR;
  char when[40];
  time_t t = (time_t)sec;
  struct tm tm;
  gmtime_r(&t, &tm);
  size_t w = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(when + w, sizeof when - w, ".%03ldZ", nsec / 1000000L);
  size_t n;
  if (format == TPU_LOG_JSON) {
    n = (size_t)snprintf(out, cap, "{\"time\":\"%s\",\"level\":\"%s\",\"message\":\"", when,
                         level_names[level]);
    n = json_escape(out, n, cap, 3, msg); /* 3: the closing "}\n */
    memcpy(out + n, "\"}\n", 3);
    return n + 3;
  }
  n = (size_t)snprintf(out, cap, "%s %-5s ", when, level_tags[level]);
  /* Control characters escaped: one event, one line (UTF-8 passes through). */
  const char *rest;
  n = escape(out, n, cap, msg, 0, &rest);
  out[n++] = '\n';
  return n;
}

void tpu_log(tpu_log_level_t level, const char *fmt, ...) {
  if ((int)level < atomic_load(&log_level) || (unsigned)level >= 4) return;
  char line[2048], msg[1800];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (m < 0) msg[0] = '\0';
  size_t n = tpu_log_format_line(line, sizeof line, (tpu_log_format_t)atomic_load(&log_format),
                                 level, (long long)ts.tv_sec, ts.tv_nsec, msg);
  ssize_t w = write(STDERR_FILENO, line, n);
  (void)w; /* nowhere to report a failed log write */
}
