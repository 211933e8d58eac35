/*
 * test_log.c - one event, one line: control characters in a message are escaped, names quoted
 * with tpu_log_escape (regression: a model directory named with a newline forged a log line).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "tpu_test.h"

/* One JSON line of msg (2026-12-02T04:05:06.789Z), parsed back with jansson: the line must be
 * one object of exactly time, level, message ending in its only newline. Returns the message
 * as decoded (caller frees) or NULL. */
static char *json_round_trip(const char *msg, size_t cap, tpu_log_level_t level) {
  char line[4096];
  CU_ASSERT_FATAL(cap <= sizeof line);
  size_t n = tpu_log_format_line(line, cap, TPU_LOG_JSON, level, 1796184306LL, 789000000L, msg);
  CU_ASSERT(n <= cap);
  CU_ASSERT(n > 0 && line[n - 1] == '\n');
  CU_ASSERT_PTR_EQUAL(memchr(line, '\n', n), line + n - 1);
  json_error_t je;
  json_t *j = json_loadb(line, n, JSON_REJECT_DUPLICATES, &je);
  CU_ASSERT_PTR_NOT_NULL(j);
  if (!j) {
    printf("\nnot JSON (%s): %.*s\n", je.text, (int)n, line);
    return NULL;
  }
  CU_ASSERT_EQUAL(json_object_size(j), 3);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "time")),
                         "2026-12-02T04:05:06.789Z");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "level")),
                         tpu_log_level_name(level));
  const char *m = json_string_value(json_object_get(j, "message"));
  char *out = m ? strdup(m) : NULL;
  CU_ASSERT_PTR_NOT_NULL(out);
  json_decref(j);
  return out;
}

static void expect_json(const char *msg, const char *want) {
  char *got = json_round_trip(msg, 2048, TPU_LOG_INFO);
  if (got) {
    CU_ASSERT_STRING_EQUAL(got, want);
    if (strcmp(got, want) != 0) printf("\nmessage %s: got '%s', expected '%s'\n", msg, got, want);
  }
  free(got);
}

/* JSON escaping: quotes, backslashes and control characters escaped, UTF-8 kept, bytes that
 * are not UTF-8 shown as the text \xNN; the object is valid JSON (jansson rejects invalid
 * UTF-8 and raw control characters) for every input. */
static void test_json_escape(void) {
  expect_json("model 'digits' version 1: ready", "model 'digits' version 1: ready");
  expect_json("say \"hi\" \\ back", "say \"hi\" \\ back");
  expect_json("a\nb\rc\td\x01e\x1f\x7f", "a\nb\rc\td\x01e\x1f\x7f");
  const char *utf8 = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"; /* 2, 3 and 4 bytes */
  expect_json(utf8, utf8);
  expect_json("bad \xff byte", "bad \\xff byte");
  expect_json("cut \xc3", "cut \\xc3");                     /* a lead byte at the end */
  expect_json("overlong \xc0\xaf", "overlong \\xc0\\xaf");     /* '/' in two bytes */
  expect_json("surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80");
  expect_json("above \xf4\x90\x80\x80", "above \\xf4\\x90\\x80\\x80");
  expect_json("", "");
  /* Every level by name. */
  for (int l = TPU_LOG_DEBUG; l <= TPU_LOG_ERROR; l++) free(json_round_trip("x", 256, l));
}

/* A message longer than the line: cut with "..." inside the string, never in an escape or a
 * UTF-8 sequence, and the object still closed; random bytes at every length stay valid. */
static void test_json_cut(void) {
  char msg[1500];
  for (size_t i = 0; i < sizeof msg - 1; i++) msg[i] = "\"\\\n\xc3\xa9x"[i % 6];
  msg[sizeof msg - 1] = 0;
  for (size_t cap = 128; cap <= 400; cap++) {
    char *got = json_round_trip(msg, cap, TPU_LOG_WARN);
    CU_ASSERT(got && strlen(got) >= 3 && strcmp(got + strlen(got) - 3, "...") == 0);
    free(got);
  }
  for (int round = 0; round < 200; round++) {
    size_t len = (size_t)tpu_test_rand_range(0, sizeof msg - 1);
    for (size_t i = 0; i < len; i++) msg[i] = (char)tpu_test_rand_range(1, 255);
    msg[len] = 0;
    char *got = json_round_trip(msg, (size_t)tpu_test_rand_range(128, 2048), TPU_LOG_ERROR);
    TPU_ASSERT_SEED(got != NULL);
    free(got);
  }
}

/* The text format is today's: "TIME LEVEL message", control characters as \xNN. */
static void test_text_line(void) {
  char line[256];
  size_t n = tpu_log_format_line(line, sizeof line, TPU_LOG_TEXT, TPU_LOG_WARN, 1796184306LL,
                                 5000000L, "a \"b\"\nc");
  CU_ASSERT_EQUAL(n, strlen("2026-12-02T04:05:06.005Z WARN  a \"b\"\\x0ac\n"));
  CU_ASSERT_NSTRING_EQUAL(line, "2026-12-02T04:05:06.005Z WARN  a \"b\"\\x0ac\n", n);
  tpu_log_format_t f = TPU_LOG_TEXT;
  CU_ASSERT_EQUAL(tpu_log_parse_format("json", &f), 0);
  CU_ASSERT_EQUAL(f, TPU_LOG_JSON);
  CU_ASSERT_EQUAL(tpu_log_parse_format("text", &f), 0);
  CU_ASSERT_EQUAL(f, TPU_LOG_TEXT);
  CU_ASSERT_EQUAL(tpu_log_parse_format("JSON", &f), -1);
  CU_ASSERT_EQUAL(tpu_log_parse_format(NULL, &f), -1);
  CU_ASSERT_STRING_EQUAL(tpu_log_format_name(TPU_LOG_JSON), "json");
}

static void test_escape(void) {
  char out[64];
  CU_ASSERT_STRING_EQUAL(tpu_log_escape(out, sizeof out, "digits-v2.1_x"), "digits-v2.1_x");
  CU_ASSERT_STRING_EQUAL(tpu_log_escape(out, sizeof out, "a\nb"), "a\\x0ab");
  CU_ASSERT_STRING_EQUAL(tpu_log_escape(out, sizeof out, "caf\xc3\xa9"), "caf\\xc3\\xa9");
  CU_ASSERT_STRING_EQUAL(tpu_log_escape(out, sizeof out, "q'\"\\"), "q\\x27\\x22\\x5c");
  CU_ASSERT_STRING_EQUAL(tpu_log_escape(out, sizeof out, NULL), "(null)");
  char small[12];
  CU_ASSERT_STRING_EQUAL(tpu_log_escape(small, sizeof small, "abcdefghijkl"), "abcd...");
  char longname[200];
  memset(longname, '\n', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  tpu_log_escape(out, sizeof out, longname);
  CU_ASSERT(strlen(out) < sizeof out);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "..."));
}

static void test_one_line(void) {
  char path[] = "/tmp/tpud-log-XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT_FATAL(fd >= 0);
  int saved = dup(2);
  dup2(fd, 2);
  tpu_log_warn("model '%s': forged?", "x\n2026-01-01T00:00:00.000Z ERROR fake\r");
  dup2(saved, 2);
  close(saved);
  char buf[512] = "";
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  unlink(path);
  CU_ASSERT_FATAL(n > 0);
  buf[n] = 0;
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, "WARN  model 'x\\x0a2026-01-01T00:00:00.000Z ERROR fake\\x0d'"));
  CU_ASSERT_EQUAL(strchr(buf, '\n'), buf + n - 1); /* the one newline ends the line */
}

TPU_TEST_SUITE(server_log,
               {"escape", test_escape},
               {"one_line", test_one_line}, {"json_escape", test_json_escape},
               {"json_cut", test_json_cut}, {"text_line", test_text_line})
