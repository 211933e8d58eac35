/*
 * file.c - reading an operator's file whole without blocking on FIFOs, without mmap and with
 * change detection (see file.h for why).
 */
#include "file.h"

#include "tpu_text.h"

#include <errno.h>
#include <openssl/evp.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIECE (1u << 20) /* bytes per read(2): the cancel flag is checked this often */

/* "path: message" into err, and returns e (an errno value): `return failf(...)`. */
#define failf(err, errlen, e, path, fmt, ...) \
  tpu_errf_ret((e), (err), (errlen), "%s: " fmt, (path), ##__VA_ARGS__)

static const char *kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

static int64_t ns(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

static int same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         ns(a->st_mtim) == ns(b->st_mtim) && ns(a->st_ctim) == ns(b->st_ctim);
}

int tpu_file_transient(int e) {
  return e == EMFILE || e == ENFILE || e == ENOMEM || e == ENOBUFS || e == EINTR || e == EAGAIN;
}

int tpu_file_check(const char *path, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!path) return failf(err, errlen, EINVAL, "(null)", "no path");
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return failf(err, errlen, e, path, "cannot open: %s", strerror(e));
  }
  struct stat sb;
  int rc = 0;
  if (fstat(fd, &sb) != 0)
    rc = failf(err, errlen, errno, path, "cannot stat: %s", strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    rc = failf(err, errlen, EINVAL, path, "%s, not a regular file", kind_of(sb.st_mode));
  close(fd);
  return rc;
}

int tpu_file_read(const char *path, size_t max_bytes, const atomic_int *cancel, void **buf,
                  size_t *len, tpu_file_info_t *info, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!buf || !len) return EINVAL;
  *buf = NULL;
  *len = 0;
  if (!path) return failf(err, errlen, EINVAL, "(null)", "no path");
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return failf(err, errlen, e, path, "cannot open: %s", strerror(e));
  }
  struct stat before, after;
  char *data = NULL;
  int rc;
  if (fstat(fd, &before) != 0) {
    rc = errno;
    failf(err, errlen, rc, path, "cannot stat: %s", strerror(rc));
    goto done;
  }
  if (!S_ISREG(before.st_mode)) {
    rc = failf(err, errlen, EINVAL, path, "%s, not a regular file", kind_of(before.st_mode));
    goto done;
  }
  if (before.st_size < 0 || (max_bytes && (uint64_t)before.st_size > max_bytes)) {
    rc = failf(err, errlen, EFBIG, path, "file is %lld bytes, more than the limit of %zu",
               (long long)before.st_size, max_bytes);
    goto done;
  }
  if ((uint64_t)before.st_size >= SIZE_MAX - 128) {
    rc = failf(err, errlen, EFBIG, path, "file of %lld bytes exceeds the address space",
               (long long)before.st_size);
    goto done;
  }
  size_t size = (size_t)before.st_size;
  /* One byte more than the size (so a file that grew is caught) and the NUL; 64-aligned. */
  size_t cap = size + 1, alloc = (size + 2 + 63) & ~(size_t)63;
  void *p = NULL;
  if (posix_memalign(&p, 64, alloc) != 0) {
    rc = failf(err, errlen, ENOMEM, path, "out of memory for its %zu bytes", size);
    goto done;
  }
  data = p;
  size_t got = 0;
  for (;;) {
    if (cancel && atomic_load(cancel)) {
      rc = failf(err, errlen, ECANCELED, path, "reading cancelled");
      goto done;
    }
    size_t want = cap - got < PIECE ? cap - got : PIECE;
    ssize_t n = read(fd, data + got, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = errno;
      failf(err, errlen, rc, path, "cannot read: %s", strerror(rc));
      goto done;
    }
    if (n == 0) break;
    got += (size_t)n;
    if (got == cap) {
      rc = failf(err, errlen, EAGAIN, path,
                 "file changed while it was being read (it grew past its size of %zu bytes)",
                 size);
      goto done;
    }
  }
  if (got != size) {
    rc = failf(err, errlen, EAGAIN, path,
               "file changed while it was being read (%zu of its %zu bytes were there: "
               "truncated or replaced meanwhile)",
               got, size);
    goto done;
  }
  if (fstat(fd, &after) != 0) {
    rc = errno;
    failf(err, errlen, rc, path, "cannot stat: %s", strerror(rc));
    goto done;
  }
  if (!same_file(&before, &after)) {
    rc = failf(err, errlen, EAGAIN, path,
               "file changed while it was being read (its size or times changed)");
    goto done;
  }
  data[got] = '\0';
  if (info)
    *info = (tpu_file_info_t){(uint64_t)before.st_dev, (uint64_t)before.st_ino,
                              (uint64_t)before.st_size, ns(before.st_mtim), ns(before.st_ctim)};
  *buf = data;
  *len = got;
  data = NULL;
  rc = 0;
done:
  free(data);
  close(fd);
  return rc;
}

int tpu_file_sha256(const void *buf, size_t len, const atomic_int *cancel, char hex[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  const unsigned char *p = buf;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  /* In 1 MiB pieces, so a cancel (shutdown) is seen within a millisecond or so. */
  for (size_t at = 0; ok && at < len;) {
    if (cancel && atomic_load(cancel)) {
      EVP_MD_CTX_free(ctx);
      return ECANCELED;
    }
    size_t n = len - at < (1u << 20) ? len - at : (1u << 20);
    ok = EVP_DigestUpdate(ctx, p + at, n);
    at += n;
  }
  ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
  EVP_MD_CTX_free(ctx);
  if (!ok) return ENOMEM;
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[64] = '\0';
  return 0;
}
