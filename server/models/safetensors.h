/*
 * safetensors.h - a strict, read-only reader of the safetensors checkpoint format.
 *
 * DESIGN
 * A safetensors file is: an unsigned 64-bit little-endian header length N, N bytes of UTF-8 JSON
 * (an object mapping tensor names to {"dtype", "shape", "data_offsets"}, plus an optional
 * "__metadata__" string-to-string map), then the data section. data_offsets are [begin, end)
 * byte offsets relative to the start of the data section.
 *
 * This reader makes every check of the format's reference parser and more, and refuses the file
 * on the first failure with a message that names the file, the tensor and what was expected:
 *   - the file holds at least the 8-byte length; N ≤ TPU_SAFETENSORS_MAX_HEADER (100 MB) and
 *     8 + N ≤ file size;
 *   - the header is valid UTF-8 (checked here, with the byte offset of the first bad byte),
 *     starts with '{' and is one JSON object (jansson), trailing whitespace allowed (writers pad
 *     the header with spaces to align the data section);
 *   - duplicate keys anywhere in the header are refused (the reference parser silently keeps the
 *     last duplicate tensor; a checkpoint with two "fc1.weight" is ambiguous, so we refuse it);
 *   - "__metadata__", if present, is an object of strings;
 *   - every tensor entry is an object with exactly dtype (a known name), shape (an array of
 *     non-negative integers, at most TPU_SAFETENSORS_MAX_DIMS) and data_offsets (two
 *     non-negative integers, end ≥ begin); unknown fields are refused;
 *   - product(shape) × dtype size is computed with overflow checks and equals end - begin
 *     (sub-byte dtypes must fill whole bytes);
 *   - sorted by offset, the tensors start at 0 and tile the data section with no gap or
 *     overlap, and the last end is exactly the end of the file (no trailing bytes).
 * The order of entries in the JSON does not matter (writers order them freely); only the byte
 * ranges must tile the data section.
 *
 * Files are read whole into a private buffer (file.h: O_NONBLOCK, regular files only, never
 * mmap) and tensors are exposed as pointers into it: nothing is copied after the read. So:
 *   - data pointers have no alignment guarantee (a tensor may start at any byte of the file):
 *     read elements with memcpy (or unaligned loads), never by casting to float * and
 *     dereferencing;
 *   - another process truncating or rewriting the file while it is read gives a clear error
 *     ("changed while it was being read"), never SIGBUS; and once read, the bytes the SHA-256
 *     was computed over are exactly the bytes that are parsed and used, whatever happens to the
 *     file afterwards. The price is one copy of the checkpoint in memory while a model loads
 *     (the model loader counts it against its memory limit and frees it when packed).
 * This module never writes files and owns no threads. A tpu_safetensors_t is immutable after
 * open and may be read by any number of threads.
 */
#ifndef TPU_SAFETENSORS_H
#define TPU_SAFETENSORS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header accepted, in bytes (the reference parser's bound). */
#define TPU_SAFETENSORS_MAX_HEADER 100000000ull
/* Most dimensions one tensor may have. */
#define TPU_SAFETENSORS_MAX_DIMS 16

/* Element types of the safetensors specification. Sub-byte types (F4, F6_*) are packed; a tensor
 * of them must hold a whole number of bytes. */
#define TPU_ST_DTYPE_MAP(X)                                                                  \
  X(BOOL, 8)     /* one byte per element, 0 or 1 */                                          \
  X(U8, 8)       /* unsigned 8-bit */                                                        \
  X(I8, 8)       /* signed 8-bit */                                                          \
  X(F8_E5M2, 8)  /* 8-bit float, 5 exponent bits */                                          \
  X(F8_E4M3, 8)  /* 8-bit float, 4 exponent bits */                                          \
  X(F8_E8M0, 8)  /* 8-bit power-of-two scale */                                              \
  X(I16, 16)     /* signed 16-bit */                                                         \
  X(U16, 16)     /* unsigned 16-bit */                                                       \
  X(F16, 16)     /* IEEE 754 binary16 */                                                     \
  X(BF16, 16)    /* bfloat16: the upper half of a binary32 */                                \
  X(I32, 32)     /* signed 32-bit */                                                         \
  X(U32, 32)     /* unsigned 32-bit */                                                       \
  X(F32, 32)     /* IEEE 754 binary32 */                                                     \
  X(F64, 64)     /* IEEE 754 binary64 */                                                     \
  X(I64, 64)     /* signed 64-bit */                                                         \
  X(U64, 64)     /* unsigned 64-bit */                                                       \
  X(F4, 4)       /* 4-bit float (E2M1), two per byte */                                      \
  X(F6_E2M3, 6)  /* 6-bit float, 2 exponent bits, packed */                                  \
  X(F6_E3M2, 6)  /* 6-bit float, 3 exponent bits, packed */

typedef enum {
#define TPU__ST_DTYPE_ENUM(name, bits) TPU_ST_##name,
  TPU_ST_DTYPE_MAP(TPU__ST_DTYPE_ENUM)
#undef TPU__ST_DTYPE_ENUM
  TPU_ST_DTYPE_COUNT /* number of dtypes, not a dtype */
} tpu_st_dtype_t;

/* The dtype's name as written in the header ("F32"); NULL when out of range. */
const char *tpu_st_dtype_name(tpu_st_dtype_t dtype);
/* Bits per element (32 for F32, 4 for F4); 0 when out of range. */
unsigned tpu_st_dtype_bits(tpu_st_dtype_t dtype);

/* One tensor of an open file. Valid until the file is closed. */
typedef struct {
  const char *name;      /* NUL-terminated; may contain any UTF-8 except NUL */
  tpu_st_dtype_t dtype;
  size_t ndim;           /* 0 for a scalar */
  const uint64_t *shape; /* ndim dimensions */
  uint64_t nelements;    /* product of the shape (1 for a scalar, 0 if any dimension is 0) */
  uint64_t begin, end;   /* data_offsets, relative to the data section */
  size_t nbytes;         /* end - begin */
  const void *data;      /* nbytes bytes, little-endian, NOT aligned: read with memcpy */
} tpu_st_tensor_t;

typedef struct tpu_safetensors tpu_safetensors_t;

/* How tpu_safetensors_load reads the file. */
typedef struct {
  size_t max_bytes;          /* refuse larger files before reading them (0: no bound) */
  const atomic_int *cancel;  /* NULL, or checked while reading and hashing: TPU_ECANCELED */
  int *sys_errno;            /* NULL, or receives the errno of a failed open/read (0 if none),
                              * so callers can retry transient ones (tpu_file_transient) */
} tpu_st_read_opts_t;

/* Reads the file at `path` (see DESIGN), then, when sha256_hex is not NULL, computes the
 * SHA-256 of the bytes read (OpenSSL EVP) and refuses the file, before parsing it, unless it
 * equals sha256_hex (64 hex digits, either case; the message on mismatch shows both digests);
 * then validates it as above. opts may be NULL. On success *out owns the bytes and TPU_OK is
 * returned; on failure *out is NULL, a message prefixed with `path` is written to err (errlen
 * bytes, always NUL-terminated when errlen > 0; err may be NULL) and the status is TPU_EINVAL
 * (malformed, unreadable or mismatched file), TPU_EOVERFLOW (sizes beyond the address space),
 * TPU_ENOMEM or TPU_ECANCELED. */
tpu_status_t tpu_safetensors_load(const char *path, const char *sha256_hex,
                                  const tpu_st_read_opts_t *opts, tpu_safetensors_t **out,
                                  char *err, size_t errlen);

/* tpu_safetensors_load without a digest and without options. */
tpu_status_t tpu_safetensors_open(const char *path, tpu_safetensors_t **out, char *err,
                                  size_t errlen);

/* Validates `len` bytes at `buf` (a whole file's contents) without copying them. `name` prefixes
 * error messages (NULL: "<memory>"). The buffer must outlive *out and stay unchanged. Made for
 * fuzzing and tests; same checks and errors as tpu_safetensors_open. */
tpu_status_t tpu_safetensors_parse(const void *buf, size_t len, const char *name,
                                   tpu_safetensors_t **out, char *err, size_t errlen);

/* Frees the bytes and the handle; accepts NULL. Tensor descriptors and data pointers die with it. */
void tpu_safetensors_close(tpu_safetensors_t *st);

/* The tensor called `name`, or NULL when there is none ("__metadata__" is never a tensor). */
const tpu_st_tensor_t *tpu_safetensors_find(const tpu_safetensors_t *st, const char *name);
/* Number of tensors, and the i-th in data-offset order (NULL when i is out of range). */
size_t tpu_safetensors_count(const tpu_safetensors_t *st);
const tpu_st_tensor_t *tpu_safetensors_tensor(const tpu_safetensors_t *st, size_t i);

/* The value of "__metadata__"[key], or NULL when absent. */
const char *tpu_safetensors_metadata(const tpu_safetensors_t *st, const char *key);

/* The whole file (header included) as read, and its size in bytes. */
const void *tpu_safetensors_bytes(const tpu_safetensors_t *st, size_t *len);

/* Computes the SHA-256 of the whole file (OpenSSL EVP, over the bytes read) into 65 bytes:
 * 64 lower-case hex digits and a NUL. Returns TPU_OK, or TPU_ENOMEM when EVP fails. */
tpu_status_t tpu_safetensors_sha256(const tpu_safetensors_t *st, char hex[65]);

#ifdef __cplusplus
}
#endif

#endif /* TPU_SAFETENSORS_H */
