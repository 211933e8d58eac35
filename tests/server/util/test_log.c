/*
 * test_log.c - one event, one line: control characters in a message are escaped, names quoted
 * with tpu_log_escape (regression: a model directory named with a newline forged a log line).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "tpu_test.h"

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
               {"one_line", test_one_line})
