/*
 * fuzz_audit_verify.c - libFuzzer target: the audit log verifier, from a log's bytes.
 *
 * DESIGN
 * The verifier reads files, so the input is written to memfds (no disk, no cleanup) and the
 * verifier is given their /proc/self/fd paths. Byte 0 holds flags: bit 0 verifies with an HMAC
 * key (the bytes "fuzz-key"), bit 1 splits the log into two files (a rotation) at the position
 * byte 1 gives, bit 2 takes everything after the first NUL as the head file, bit 3 verifies with
 * --partial. The result must be self-consistent: OK means every seq from first to last is a
 * record counted or vouched missing by a gap record (and without --partial the log starts at
 * seq 1), every warning has text; a fault has a name, a message, and a line number when it is
 * not about the head file or I/O.
 */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "audit_verify.h"

static void on_warn(void *arg, const char *file, uint64_t line, uint64_t seq, const char *what) {
  (void)file, (void)line, (void)seq;
  if (!what || !what[0]) abort();
  (*(uint64_t *)arg)++;
}

static int memfile(const char *name, const uint8_t *p, size_t n, char *path, size_t pathlen) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) abort();
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, p + off, n - off);
    if (w <= 0) abort();
    off += (size_t)w;
  }
  snprintf(path, pathlen, "/proc/self/fd/%d", fd);
  return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  uint8_t flags = data[0], at = data[1];
  data += 2;
  size -= 2;
  size_t log_len = size;
  const uint8_t *head = NULL;
  size_t head_len = 0;
  if (flags & 4) {
    const uint8_t *z = memchr(data, 0, size);
    if (z) {
      log_len = (size_t)(z - data);
      head = z + 1;
      head_len = size - log_len - 1;
    }
  }
  size_t split = (flags & 2) ? log_len * at / 255 : log_len;

  char p0[64], p1[64], ph[64];
  int fds[3] = {-1, -1, -1};
  const char *files[2] = {p0, p1};
  size_t nfiles = 1;
  fds[0] = memfile("log", data, split, p0, sizeof p0);
  if (flags & 2) {
    fds[1] = memfile("log.1", data + split, log_len - split, p1, sizeof p1);
    nfiles = 2;
  }
  uint64_t warnings = 0;
  tpu_audit_verify_opts_t opts = {.partial = (flags & 8) != 0, .warn = on_warn,
                                  .warn_arg = &warnings};
  if (flags & 1) {
    opts.key = (const uint8_t *)"fuzz-key";
    opts.keylen = 8;
  }
  if (head) {
    fds[2] = memfile("head", head, head_len, ph, sizeof ph);
    opts.head_path = ph;
  }
  tpu_audit_verify_result_t res;
  memset(&res, 0xa5, sizeof res); /* the verifier must fill what it reports */
  tpu_audit_fault_t f = tpu_audit_verify(files, nfiles, &opts, &res);
  if (f != res.fault) abort();
  if (!strcmp(tpu_audit_fault_name(f), "unknown")) abort();
  if (f == TPU_AUDIT_VERIFY_OK) {
    if (res.records && res.last_seq - res.first_seq + 1 != res.records + res.missing) abort();
    if (res.records && strlen(res.last_hash) != 64) abort();
    if (res.records && !(flags & 8) && res.first_seq != 1) abort();
    if (res.gaps > res.losses || warnings < res.losses) abort();
  } else {
    if (!memchr(res.what, 0, sizeof res.what) || !res.what[0]) abort();
    if (!memchr(res.file, 0, sizeof res.file)) abort();
    if (f != TPU_AUDIT_FAULT_IO && f != TPU_AUDIT_FAULT_HEAD && f != TPU_AUDIT_FAULT_ROLLBACK &&
        res.line == 0)
      abort();
  }
  for (int i = 0; i < 3; i++)
    if (fds[i] >= 0) close(fds[i]);
  return 0;
}
