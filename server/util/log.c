/*
 * log.c - timestamped, levelled, line-atomic logging to stderr.
 *
 * DESIGN
 * Formats into a stack buffer and emits it with a single write(2) (atomic for lines shorter than
 * PIPE_BUF on pipes, and never interleaved within a line on regular files opened O_APPEND or
 * terminals in practice). Long messages are truncated, never split. No locks, no allocation.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = TPU_LOG_INFO;

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

void tpu_log(tpu_log_level_t level, const char *fmt, ...) {
  if ((int)level < atomic_load(&log_level) || (unsigned)level >= 4) return;
  char line[2048], msg[1800];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000L,
                        level_tags[level]);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (m < 0) msg[0] = '\0';
  /* Control characters escaped: one event, one line (UTF-8 passes through). */
  const char *rest;
  n = escape(line, n, sizeof line, msg, 0, &rest);
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, n);
  (void)w; /* nowhere to report a failed log write */
}
