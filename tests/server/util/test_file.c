/*
 * test_file.c - tpu_file_read: regular files whole and NUL-terminated; everything else refused
 * without blocking (FIFOs, directories, devices); size bounds before reading; change
 * detection; cancel; which errors are transient.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "tpu_test.h"

static char dir[64];

static void mk(void) {
  snprintf(dir, sizeof dir, "/tmp/tpud-file-XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
}

static void path_of(char *out, size_t len, const char *name) {
  snprintf(out, len, "%s/%s", dir, name);
}

static void put(const char *name, const void *data, size_t n) {
  char p[128];
  path_of(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void test_regular(void) {
  mk();
  char p[128], err[256];
  void *buf;
  size_t len;
  tpu_file_info_t info;
  /* A few pieces' worth (PIECE is 1 MiB) with every byte value. */
  size_t n = (3u << 20) + 17;
  unsigned char *data = malloc(n);
  for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i * 131 + 7);
  put("big", data, n);
  path_of(p, sizeof p, "big");
  CU_ASSERT_EQUAL_FATAL(tpu_file_read(p, 0, NULL, &buf, &len, &info, err, sizeof err), 0);
  CU_ASSERT_EQUAL(len, n);
  CU_ASSERT_EQUAL(memcmp(buf, data, n), 0);
  CU_ASSERT_EQUAL(((char *)buf)[n], '\0');
  CU_ASSERT_EQUAL((uintptr_t)buf % 64, 0);
  CU_ASSERT_EQUAL(info.size, n);
  struct stat sb;
  CU_ASSERT_EQUAL(stat(p, &sb), 0);
  CU_ASSERT_EQUAL(info.ino, (uint64_t)sb.st_ino);
  free(buf);
  /* The bound: exactly the size passes, one less is EFBIG before anything is read. */
  CU_ASSERT_EQUAL(tpu_file_read(p, n, NULL, &buf, &len, NULL, err, sizeof err), 0);
  free(buf);
  CU_ASSERT_EQUAL(tpu_file_read(p, n - 1, NULL, &buf, &len, NULL, err, sizeof err), EFBIG);
  CU_ASSERT_PTR_NULL(buf);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than the limit of"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, p));
  /* Empty: a valid buffer of 0 bytes. */
  put("empty", "", 0);
  path_of(p, sizeof p, "empty");
  CU_ASSERT_EQUAL(tpu_file_read(p, 0, NULL, &buf, &len, NULL, err, sizeof err), 0);
  CU_ASSERT_EQUAL(len, 0);
  CU_ASSERT_PTR_NOT_NULL(buf);
  free(buf);
  free(data);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

/* Regression (a FIFO named model.json hung the repository thread in open()). */
static void test_not_regular(void) {
  mk();
  char p[128], err[256];
  void *buf = (void *)1;
  size_t len;
  path_of(p, sizeof p, "fifo");
  CU_ASSERT_EQUAL_FATAL(mkfifo(p, 0644), 0);
  CU_ASSERT_EQUAL(tpu_file_read(p, 0, NULL, &buf, &len, NULL, err, sizeof err), EINVAL);
  CU_ASSERT_PTR_NULL(buf);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "a FIFO, not a regular file"));
  CU_ASSERT_EQUAL(tpu_file_read(dir, 0, NULL, &buf, &len, NULL, err, sizeof err), EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "a directory, not a regular file"));
  CU_ASSERT_EQUAL(tpu_file_read("/dev/null", 0, NULL, &buf, &len, NULL, err, sizeof err),
                  EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "a character device"));
  path_of(p, sizeof p, "missing");
  CU_ASSERT_EQUAL(tpu_file_read(p, 0, NULL, &buf, &len, NULL, err, sizeof err), ENOENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open: No such file or directory"));
  CU_ASSERT_EQUAL(tpu_file_read(NULL, 0, NULL, &buf, &len, NULL, err, sizeof err), EINVAL);
  CU_ASSERT_EQUAL(tpu_file_read(p, 0, NULL, NULL, &len, NULL, err, sizeof err), EINVAL);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

/* A file whose contents do not match its size while it is read: /proc files report size 0
 * and have bytes, which is what a file growing under the read looks like. */
static void test_changed(void) {
  char err[256];
  void *buf;
  size_t len;
  CU_ASSERT_EQUAL(tpu_file_read("/proc/self/status", 0, NULL, &buf, &len, NULL, err, sizeof err),
                  EAGAIN);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "changed while it was being read"));
  CU_ASSERT_PTR_NULL(buf);
}

static void test_cancel(void) {
  mk();
  char p[128], err[256];
  void *buf;
  size_t len;
  put("f", "hello", 5);
  path_of(p, sizeof p, "f");
  atomic_int cancel;
  atomic_init(&cancel, 1);
  CU_ASSERT_EQUAL(tpu_file_read(p, 0, &cancel, &buf, &len, NULL, err, sizeof err), ECANCELED);
  CU_ASSERT_PTR_NULL(buf);
  atomic_store(&cancel, 0);
  CU_ASSERT_EQUAL(tpu_file_read(p, 0, &cancel, &buf, &len, NULL, err, sizeof err), 0);
  CU_ASSERT_STRING_EQUAL(buf, "hello");
  free(buf);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

static void test_transient(void) {
  CU_ASSERT_TRUE(tpu_file_transient(EMFILE));
  CU_ASSERT_TRUE(tpu_file_transient(ENFILE));
  CU_ASSERT_TRUE(tpu_file_transient(ENOMEM));
  CU_ASSERT_TRUE(tpu_file_transient(EAGAIN));
  CU_ASSERT_FALSE(tpu_file_transient(0));
  CU_ASSERT_FALSE(tpu_file_transient(ENOENT));
  CU_ASSERT_FALSE(tpu_file_transient(EACCES));
  CU_ASSERT_FALSE(tpu_file_transient(EINVAL));
  CU_ASSERT_FALSE(tpu_file_transient(EFBIG));
}

TPU_TEST_SUITE(server_file,
               {"regular", test_regular},
               {"not_regular", test_not_regular},
               {"changed", test_changed},
               {"cancel", test_cancel},
               {"transient", test_transient})
