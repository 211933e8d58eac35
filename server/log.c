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

void tpu_log(tpu_log_level_t level, const char *fmt, ...) {
  if ((int)level < atomic_load(&log_level) || (unsigned)level >= 4) return;
  char line[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000L,
                        level_tags[level]);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
  va_end(ap);
  if (m < 0) m = 0;
  n += (size_t)m < sizeof line - n - 1 ? (size_t)m : sizeof line - n - 2;
  line[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, n);
  (void)w; /* nowhere to report a failed log write */
}
