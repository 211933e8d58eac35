/*
 * log.h - one line per event on stderr: timestamp, level, message.
 *
 * DESIGN
 * Every thread may log; each line is formatted into a local buffer and written with one write(2)
 * call, so lines from different threads never interleave. The level is a process-wide atomic
 * set once from the configuration. Logging never allocates and never blocks on a lock.
 * A line is always one line: control characters in a message (a newline in a file name, say)
 * are written as \xNN, so nothing logged can forge a line of its own.
 *
 * Two line formats (--log-format): text (the default, "TIME LEVEL message") and json, one JSON
 * object a line: {"time": "2024-01-02T03:04:05.678Z", "level": "info", "message": "..."}. The
 * JSON line is always valid JSON and valid UTF-8: quotes, backslashes and control characters
 * are JSON-escaped, valid UTF-8 passes through, a byte that is not valid UTF-8 is written as
 * the five characters \\xNN (the text \xNN, as the text format shows it), and a message cut at
 * the line limit ends in "..." inside the string. tpud's messages carry no structured fields,
 * so the object has exactly these three keys.
 */
#ifndef TPU_LOG_H
#define TPU_LOG_H

#include <stddef.h>

typedef enum {
  TPU_LOG_DEBUG = 0, /* per-request detail, batch formation */
  TPU_LOG_INFO = 1,  /* start, stop, listeners, model loads */
  TPU_LOG_WARN = 2,  /* a request or connection failed in a way the operator may care about */
  TPU_LOG_ERROR = 3  /* a component failed; the server may be degraded */
} tpu_log_level_t;

/* Sets the minimum level that is written (default INFO). */
void tpu_log_set_level(tpu_log_level_t level);
tpu_log_level_t tpu_log_get_level(void);
/* Parses "debug", "info", "warn", "error"; returns 0 on success, -1 for an unknown name. */
int tpu_log_parse_level(const char *name, tpu_log_level_t *out);
const char *tpu_log_level_name(tpu_log_level_t level);

/* Line formats (--log-format). */
typedef enum {
  TPU_LOG_TEXT = 0, /* "2024-01-02T03:04:05.678Z INFO  message" */
  TPU_LOG_JSON = 1  /* {"time": ..., "level": ..., "message": ...} */
} tpu_log_format_t;

/* Sets the line format (default text); set once at start-up, before threads log. */
void tpu_log_set_format(tpu_log_format_t format);
tpu_log_format_t tpu_log_get_format(void);
/* Parses "text", "json"; 0 on success, -1 for an unknown name. */
int tpu_log_parse_format(const char *name, tpu_log_format_t *out);
const char *tpu_log_format_name(tpu_log_format_t format);

/* Formats one log line (with its final newline) into out (cap bytes, at least 128) in
 * `format`: the time (CLOCK_REALTIME seconds and nanoseconds), the level, the message, escaped
 * as the DESIGN above says and cut to fit. Pure: tpu_log uses it, tests call it. Returns the
 * line's length (not NUL-terminated). */
size_t tpu_log_format_line(char *out, size_t cap, tpu_log_format_t format, tpu_log_level_t level,
                           long long sec, long nsec, const char *msg);

/* Writes one line (tpu_log_format_line in the format set) to stderr when level is enabled. */
void tpu_log(tpu_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies `in` into out (outlen bytes, at least 8) for quoting in a message: bytes outside
 * printable ASCII, the backslash and quotes written as \xNN; cut with "..." when out is too
 * small. Returns out. For names that come from files, directories or clients. */
const char *tpu_log_escape(char *out, size_t outlen, const char *in);

#define tpu_log_debug(...) tpu_log(TPU_LOG_DEBUG, __VA_ARGS__)
#define tpu_log_info(...) tpu_log(TPU_LOG_INFO, __VA_ARGS__)
#define tpu_log_warn(...) tpu_log(TPU_LOG_WARN, __VA_ARGS__)
#define tpu_log_error(...) tpu_log(TPU_LOG_ERROR, __VA_ARGS__)

#endif /* TPU_LOG_H */
