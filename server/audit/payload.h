/*
 * payload.h - the payload store: the input and output tensors of captured requests, beside the
 * audit log, each entry referenced from its request record by file, offset and digest
 * (issue 21: an answer can be recomputed months later from what the log points at).
 *
 * DESIGN
 * Three parties, three threads:
 *   - the engine thread that finished a request builds its entry (tpu_payload_build): a small
 *     JSON header (model, version, rows, each tensor's name, datatype, shape and byte count)
 *     and the tensors in OIP raw form (row-major, little-endian; inputs in model order, then
 *     outputs), the very bytes the record's input_sha256 and output_sha256 cover. With a key the
 *     body is sealed with AES-256-GCM under a fresh random 96-bit nonce; the entry's own
 *     SHA-256 (payload_sha256 in the record) is taken here too. No I/O.
 *   - the audit writer thread (audit.c) stages each entry into the current payload file when it
 *     gives the record its seq, writes the staged entries before the batch of records that
 *     point at them (and fdatasyncs them first whenever the log is synced), and applies
 *     rotation and retention between batches (tpu_pstore_*: writer thread only, no lock).
 *   - a reader (tpuctl audit replay, offline) finds an entry from its record and checks it
 *     (tpu_payload_read).
 * The audit chain never covers payload bytes, only the reference and digest in the record: it
 * verifies without the store and without the key.
 *
 * ON DISK (little-endian)
 *   <dir>/payload.<seq, 20 digits>   files, named after the first seq they may hold; a new file
 *                                    is started at each server start, at --payload-max-bytes / 8
 *                                    (64 KiB .. 1 GiB; 256 MiB without a limit), and when its
 *                                    first entry is older than --payload-max-age / 4.
 *   frame  = "TPUF" | u32 entry_len | u64 seq | entry          (record: "payload":"FILE@OFFSET",
 *                                                             OFFSET = the frame's first byte)
 *   entry  = "TPUE" | u8 format (1) | u8 cipher (0 none, 1 AES-256-GCM) | u16 0
 *            | key_id[8] | nonce[12] | u32 body_len | body | tag[16] (cipher 1 only)
 *            payload_sha256 = SHA-256 of the entry; the GCM AAD is its first 32 bytes;
 *            key_id = the first 8 bytes of SHA-256(key) (zeros without a key)
 *   body   = u32 header_len | header JSON | tensor bytes, in the header's order
 * Retention (between batches): closed files are deleted oldest first while the store holds more
 * than --payload-max-bytes, and once their last write is older than --payload-max-age; each
 * deletion is an audit record of kind "payload_expired" saying which file and why.
 */
#ifndef TPU_PAYLOAD_H
#define TPU_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>

#define TPU_PAYLOAD_KEY_BYTES 32
#define TPU_PAYLOAD_FRAME_BYTES 16
#define TPU_PAYLOAD_ENTRY_HEAD 32
#define TPU_PAYLOAD_TAG_BYTES 16
#define TPU_PAYLOAD_MAX_TENSORS 64
#define TPU_PAYLOAD_REF_MAX 64 /* "payload.<20 digits>[-N]@<offset>" and a NUL */

/* An AES-256-GCM key (--payload-key FILE). */
typedef struct {
  uint8_t key[TPU_PAYLOAD_KEY_BYTES];
  uint8_t id[8]; /* the first 8 bytes of SHA-256(key): names the key in each entry */
} tpu_payload_key_t;

/* Reads a key file: exactly 32 bytes, or 64 hex digits (a trailing newline allowed). Returns 0,
 * or -1 with err. */
int tpu_payload_load_key(const char *path, tpu_payload_key_t *key, char *err, size_t errlen);

/* One tensor to capture: `rows` rows of row_bytes each at base + r * stride (a packed row's
 * slice), shape as the model declares it with a -1 batch dimension written as rows. */
typedef struct {
  const char *name, *datatype;
  size_t rank;
  const int64_t *shape;
  const unsigned char *base;
  size_t rows, stride, row_bytes;
} tpu_payload_tensor_t;

/* A built entry; travels with its audit record and is freed by the audit module. */
typedef struct tpu_payload_blob {
  size_t len;
  char sha256[65];
  unsigned char data[];
} tpu_payload_blob_t;

/* Builds the entry of one request (engine thread; no I/O). key NULL: stored in clear. Returns
 * 0 with *out (free() it), or -1 (out of memory, a cipher failure, too many tensors). */
int tpu_payload_build(const tpu_payload_key_t *key, const char *model, const char *version,
                      size_t rows, const tpu_payload_tensor_t *in, size_t nin,
                      const tpu_payload_tensor_t *out, size_t nout, tpu_payload_blob_t **blob);

/* ---- the store (the audit writer thread only) ---- */

typedef struct tpu_pstore tpu_pstore_t;

/* Opens the store in dir (created, mode 0750, when missing): lists the payload files already
 * there for retention; the first entry starts a new file. max_bytes 0 / max_age_s 0: no limit.
 * Returns 0, or -1 with err. */
int tpu_pstore_open(const char *dir, uint64_t max_bytes, uint64_t max_age_s, tpu_pstore_t **out,
                    char *err, size_t errlen);
/* fdatasyncs and closes; accepts NULL. */
void tpu_pstore_close(tpu_pstore_t *ps);
/* Stages the frame of `blob` for record `seq` and writes its reference into ref. Returns 0, or
 * an errno value (the file could not be started, out of memory): the batch cannot be written. */
int tpu_pstore_stage(tpu_pstore_t *ps, uint64_t seq, const tpu_payload_blob_t *blob,
                     char ref[TPU_PAYLOAD_REF_MAX]);
/* Drops what is staged (its batch was taken back, to be built again). */
void tpu_pstore_unstage(tpu_pstore_t *ps);
/* Writes what is staged (first cutting off bytes a failed or taken-back attempt left), and
 * fdatasyncs when sync. Returns 0, or an errno value with *what naming the call. */
int tpu_pstore_write(tpu_pstore_t *ps, int sync, const char **what);
/* The records that point at the staged entries are written: they count. */
void tpu_pstore_committed(tpu_pstore_t *ps);
/* fdatasync of the current file if written since the last; 0 or an errno value. */
int tpu_pstore_sync(tpu_pstore_t *ps);
/* Rotation and retention (nothing staged): report(ctx, message) for each file deleted. */
void tpu_pstore_maintain(tpu_pstore_t *ps, void (*report)(void *ctx, const char *message),
                         void *ctx);

typedef struct {
  uint64_t files_deleted, bytes_deleted, entries; /* since open */
  uint64_t bytes;                                 /* the store's size now */
} tpu_pstore_stats_t;
void tpu_pstore_stats(const tpu_pstore_t *ps, tpu_pstore_stats_t *out);

/* ---- reading an entry back (offline) ---- */

typedef enum {
  TPU_PAYLOAD_OK = 0,
  TPU_PAYLOAD_MISSING,  /* no such file, or the offset is past its end */
  TPU_PAYLOAD_WRONG,    /* no entry at that offset, or the entry of another seq */
  TPU_PAYLOAD_TAMPERED, /* its digest differs from the record's, or GCM rejects it */
  TPU_PAYLOAD_KEY,      /* encrypted and no key, or another key */
  TPU_PAYLOAD_BAD       /* well-formed frame, unreadable body (a bug, or a future format) */
} tpu_payload_status_t;

typedef struct {
  char name[256], datatype[16];
  size_t rank;
  int64_t shape[8];
  const unsigned char *data;
  size_t bytes;
} tpu_payload_tensor_view_t;

typedef struct {
  char model[256], version[32];
  size_t rows;
  size_t nin, nout;
  tpu_payload_tensor_view_t in[TPU_PAYLOAD_MAX_TENSORS], out[TPU_PAYLOAD_MAX_TENSORS];
  int encrypted;
  unsigned char *body; /* owns the tensors' bytes */
} tpu_payload_t;

/* Reads the entry that record `seq` references as `ref` with digest sha256 (hex) from dir, and
 * checks it: the frame's seq, the digest, the GCM tag (key may be NULL for clear entries). On
 * TPU_PAYLOAD_OK *out holds the tensors (tpu_payload_free). why says what was wrong. */
tpu_payload_status_t tpu_payload_read(const char *dir, const char *ref, uint64_t seq,
                                      const char *sha256, const tpu_payload_key_t *key,
                                      tpu_payload_t **out, char *why, size_t whylen);
void tpu_payload_free(tpu_payload_t *p);
/* The checks after the digest, on an entry's bytes in memory (what tpu_payload_read does once
 * it has found them): format, key, GCM tag, header. why has no location. */
tpu_payload_status_t tpu_payload_parse_entry(const unsigned char *e, size_t len,
                                             const tpu_payload_key_t *key, tpu_payload_t **out,
                                             char *why, size_t whylen);

#endif /* TPU_PAYLOAD_H */
