/*
 * file.h - reading an operator's file whole, safely: the one way tpud reads model.json,
 * checkpoints, policy files, the config file, the tokens file and key files.
 *
 * DESIGN
 * Everything under --models, and every file named by an option, is written by someone else,
 * possibly while tpud reads it. tpu_file_read therefore:
 *   - opens with O_NONBLOCK, so a FIFO (or a device) put where a file belongs cannot block the
 *     thread in open(), then checks with fstat that it is a regular file and refuses anything
 *     else, naming what it is;
 *   - refuses a file larger than the caller's bound before allocating, from its size;
 *   - reads into a private buffer with read(2), never mmap: a file truncated while it is read
 *     gives a short read, not SIGBUS, and the bytes the caller hashes are the bytes it parses
 *     (another process rewriting the file afterwards changes nothing the caller holds);
 *   - notices a file that changed while it was read (more or fewer bytes than its size, or a
 *     different size, mtime or ctime afterwards) and says so: the caller retries later;
 *   - reads in 1 MiB pieces and checks the caller's cancel flag between them, so a load of a
 *     large file on a slow disk can be abandoned (shutdown).
 * Errors are errno values with a message; tpu_file_transient tells those that may go away with
 * no change to the file (descriptors or memory ran out), which callers retry rather than
 * treating the file as bad. No threads, no state; safe from any thread.
 */
#ifndef TPU_FILE_H
#define TPU_FILE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Identity of the file that was read, from fstat before reading. */
typedef struct {
  uint64_t dev, ino;
  uint64_t size;                    /* bytes */
  int64_t mtime_ns, ctime_ns;       /* nanoseconds since the epoch */
} tpu_file_info_t;

/* Reads the regular file at `path` whole into a new buffer (*buf, *len bytes, plus a NUL after
 * the last byte that *len does not count, so text can be parsed in place; free() it). The
 * buffer is 64-byte aligned. max_bytes: refuse files larger than this (0: no bound). cancel:
 * NULL, or a flag checked between 1 MiB pieces (ECANCELED once it is non-zero). info: NULL, or
 * receives the file's identity. Returns 0, or an errno value with err (errlen bytes) saying
 * what was wrong, prefixed with the path:
 *   ENOENT/ENOTDIR  no such file          EACCES  permission denied
 *   EINVAL          not a regular file (FIFO, directory, device, socket)
 *   EFBIG           larger than max_bytes  EAGAIN  changed while it was being read
 *   ECANCELED       *cancel was set        EMFILE, ENFILE, ENOMEM, EIO, ...: as the system said
 * *buf is NULL on failure. */
int tpu_file_read(const char *path, size_t max_bytes, const atomic_int *cancel, void **buf,
                  size_t *len, tpu_file_info_t *info, char *err, size_t errlen);

/* Checks, without blocking, that `path` is a regular file that can be opened for reading: for
 * files another library opens itself (OpenSSL's PEM files), so that a FIFO in their place is
 * refused instead of blocking that library's open(). Returns 0, or an errno value with err as
 * for tpu_file_read. */
int tpu_file_check(const char *path, char *err, size_t errlen);

/* Whether a tpu_file_read (or open/opendir) error may go away with no change to the file:
 * EMFILE, ENFILE, ENOMEM, ENOBUFS, EINTR and EAGAIN. */
int tpu_file_transient(int err);

/* SHA-256 of len bytes at buf as 64 lower-case hex digits (OpenSSL EVP), hashed in 1 MiB
 * pieces with cancel (NULL, or a flag) checked between them: for checking a file read with
 * tpu_file_read against a digest before parsing it. Returns 0, ECANCELED, or ENOMEM when the
 * digest could not be computed. */
int tpu_file_sha256(const void *buf, size_t len, const atomic_int *cancel, char hex[65]);

#endif /* TPU_FILE_H */
