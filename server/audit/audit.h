/*
 * audit.h - the tamper-evident audit log: one hash-chained JSON record a line, written by one
 * thread with group commit, rotated with the chain carried across files.
 *
 * DESIGN
 * Producers (engine and batcher threads for requests; the main thread for lifecycle and admin
 * events) call tpu_audit_submit(): it copies the record into one allocation, takes the queue
 * lock only to link it, and wakes the writer when the queue goes from empty to non-empty. It
 * never does I/O and never hashes. Input/output digests are computed by the caller on engine
 * threads with tpu_audit_sha256_*(), never on I/O threads.
 *
 * The writer thread takes the whole queue at once, stamps time and seq, serializes each record,
 * chains and hashes it, writes the batch with one write(2), then applies the fsync policy and
 * runs each record's completion callback (after fdatasync with `always`, after write(2)
 * otherwise). It owns the file descriptor, the chain state, rotation and the head file; nothing
 * else touches them. If a write or fdatasync fails, the batch is kept (its bytes are cut back
 * off the file with ftruncate), the log enters the failed state and the batch is retried every
 * retry_ms; records submitted meanwhile wait in the queue up to max_pending, beyond which they
 * are refused and counted as lost (a "lost" record saying how many is written on recovery).
 * Records still unwritten at close are dropped and counted lost too.
 * Fail-closed (default): tpu_audit_admit() is 0 while failed, so the server answers new requests
 * UNAVAILABLE, and callbacks of unwritten records wait. Fail-open: admit() stays 1 and the
 * callbacks of records that cannot be written yet fire at once with TPU_AUDIT_PENDING.
 *
 * RECORD FORMAT (one line, fields always present, always in this order)
 *   {"seq":42,"time":"2024-05-06T07:08:09.123456Z","kind":"request","request_id":"r-1",
 *    "client":"CN=teller-7","model":"digits","version":"3","input_sha256":"<hex>",
 *    "output_sha256":"<hex>","status":"OK","message":"","queue_us":120,"compute_us":830,
 *    "batch_id":9001,"bucket":8,"checkpoint_sha256":"<hex>","reference":"passed: ...",
 *    "kernels":"avx512","precision":"fp32","payload":"payload.00000000000000000001@0",
 *    "payload_sha256":"<hex>","prev":"<64 hex>","hash":"<64 hex>"}
 * seq counts from 1 and continues across restarts and files; time is when the writer ordered
 * the record (RFC 3339, UTC, microseconds; non-decreasing with seq unless the clock steps);
 * kind is one of TPU_AUDIT_KIND_*; strings the caller leaves NULL are written as "" and
 * numbers it leaves 0 as 0. Strings are JSON-escaped; bytes that are not UTF-8 become U+FFFD.
 * checkpoint_sha256, reference, kernels and precision pin the conditions a request's answer
 * was computed under (the version's checkpoint, its reference check, the engine's kernel set,
 * the precision): they are "" in other records. Logs written before they existed (records that
 * end with "bucket" before "prev") verify as they are: the chain covers the bytes, not a schema.
 * payload and payload_sha256 name the request's captured tensors in the payload store
 * (payload.h: file@offset, and the SHA-256 of the entry as stored); "" when none was captured.
 * Logs from before them (records that end with "precision" before "prev") verify likewise.
 *
 * CANONICAL BYTES AND HASH (what a third-party verifier recomputes; see
 * tests/integration/audit_verify.py)
 *   canonical = the line without its "\n", cut just before the LAST occurrence of ,"hash":"
 *               and closed with a single '}'   (= the same JSON object without its hash member,
 *               byte for byte as written; nobody re-serializes anything)
 *   hash      = lowercase hex of SHA-256(canonical), or of HMAC-SHA256(key, canonical) when a
 *               key is configured; key = the key file's bytes with trailing '\r'/'\n' removed.
 *   prev      = the previous record's hash (across files too); 64 '0' for seq 1.
 * A valid line is exactly canonical[:-1] + ',"hash":"' + hash + '"}' + "\n".
 *
 * RECOVERY AT OPEN (never destroys evidence)
 * If the existing log ends with bytes after its last valid record (a torn line after a crash),
 * those bytes are kept: a "\n" is appended when missing and a "recovered" record follows whose
 * message is exactly "torn tail: N bytes, sha256 HEX" (N and HEX over the bytes between the
 * last record's newline and the end of file, minus one trailing newline). The verifier accepts
 * such a region only when that authenticated record vouches for it byte for byte. If the head
 * file is ahead of the log, a "rollback" record says so.
 *
 * ROTATION
 * At max_bytes (checked after each batch, so a file may exceed it by one batch) or on
 * tpu_audit_reopen() (SIGHUP), the file is renamed to <path>.<last seq, 20 digits> and a new
 * <path> starts with a "rotate" record whose prev is the last hash of the old file. If the path
 * no longer names our file (logrotate moved it, or it was deleted), the new file is started as
 * below and nothing is renamed; a SIGHUP that comes after the writer already did that (the
 * postrotate of logrotate) renames nothing either.
 *
 * THE FILE DELETED, MOVED OR REPLACED WHILE OPEN
 * "Written" means written into the file at path. After each batch's write(2) (and fdatasync
 * with `always`), before any of its callbacks run, the writer checks fstat(fd).st_nlink and
 * that stat(path) is still our dev/inode (two system calls a batch; also after a failed write,
 * so deleting the log of a full disk frees its space). If not, the batch does not count: it is
 * cut back off the old file and its records are re-sequenced into a new file created at path
 * (mode 0640, directory fsync'd), which starts with
 *   - deleted (st_nlink 0): a "gap" record, status DATA_LOSS, message
 *     "seq A..B are not in the log: <path> was deleted while the server had it open, ...",
 *     A = the first seq of the deleted file, B = its last committed one (gap record = B + 1);
 *   - moved or replaced: a "rotate" record "previous file: <where it went> (moved away from
 *     <path> while open)"; what was committed stays whole in the moved file.
 * An error line says so (at most one a second). If a new file cannot be created, or the path
 * names a non-empty file this server did not write (left alone), the log is in the failed state
 * (fail-closed: UNAVAILABLE; fail-open: callbacks PENDING) and retried every retry_ms. So every
 * record a callback was told WRITTEN was in the file at path when it was told, and records that
 * were there and went with a deleted file are named by a gap record in the chain. Noticed at the
 * next batch or SIGHUP, not while idle.
 *
 * HEAD FILE
 * Every head_interval_ms (and on rotation and close), after fdatasync of the log, the writer
 * replaces <head> atomically (write <head>.tmp, fsync, rename, fsync dir) with
 *   {"seq":N,"hash":"<64 hex>","time":"..."}\n
 * Keep a copy elsewhere: a log that ends before seq N or differs at seq N was cut or rewritten.
 *
 * WIRING (what the server core calls, where)
 *   main/config: --audit-log FILE, --audit-key FILE, --audit-head FILE, --audit-fsync
 *     always|interval|never (tpu_audit_parse_fsync), --audit-fsync-interval-ms,
 *     --audit-max-bytes, --audit-fail-open -> tpu_audit_config_t; no --audit-log = audit off
 *     (srv->audit == NULL, and none of the calls below are made).
 *   tpu_server_create: tpu_audit_open() before the listener binds (failure = start-up error,
 *     exit with err); then submit kind "config" (message: the effective options) and "start";
 *     for each model version loaded or failed at start, "load" / "load_failed" (message: the
 *     reason). Rescan (SIGHUP, poll): "load", "unload", "reload", "load_failed" likewise.
 *   I/O thread, on each decoded request, before dispatch: if (!tpu_audit_admit(a)) answer
 *     UNAVAILABLE "audit log cannot be written" (and submit its record with done = NULL).
 *   Engine / MatMul-pool thread, when the call completes (success or error): digest inputs and
 *     output with tpu_audit_sha256_*, fill tpu_audit_record_t (request_id, client = TLS subject
 *     / token name / peer, model, version, status = tpu_code_name(code) from proto/tpu_status.h,
 *     message, queue_us, compute_us, batch_id, bucket) and tpu_audit_submit(a, &rec, done, call)
 *     INSTEAD of queueing the completion to the I/O thread; done() (writer thread) then does
 *     what the dispatch layer's continuation does (queue + eventfd). If submit returns
 *     TPU_AUDIT_LOST, complete at once (fail-open) or answer UNAVAILABLE (fail-closed). Requests
 *     rejected on the I/O thread before compute (bad frame, validation) are submitted from the
 *     I/O thread with no digests (cheap: no hashing there).
 *   SIGHUP handler (main event loop): tpu_audit_reopen(a) next to the repository rescan.
 *   SIGUSR1 / stats: tpu_audit_stats(a, &st) -> log its counters.
 *   SIGTERM drain: in-flight calls finish (their responses wait for done()); then submit
 *     "stop", tpu_audit_flush(a, remaining drain ms), and tpu_audit_shutdown(a, &final) BEFORE
 *     the I/O threads are stopped (close may still run done() with TPU_AUDIT_LOST, which queues
 *     to them); log final.records_lost, which counts what close gave up on. The writer appends
 *     "; N audit records lost since start" to the "stop" record's message when it writes it.
 *   tpuctl: `audit verify` -> tpu_audit_verify_cli (audit_verify.h); link server/audit.c,
 *     audit_verify.c and log.c (jansson, libcrypto, pthread) or the tpuserver library.
 */
#ifndef TPU_AUDIT_H
#define TPU_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "fsync.h"   /* tpu_audit_fsync_t, the durability policy (--audit-fsync) */
#include "payload.h" /* the payload store: captured tensors beside the log */

typedef struct tpu_audit tpu_audit_t;

/* Record kinds (the "kind" field). The server may use others; these are the known ones. */
#define TPU_AUDIT_KIND_REQUEST "request"         /* one inference or MatMul call */
#define TPU_AUDIT_KIND_START "start"             /* the server started serving */
#define TPU_AUDIT_KIND_STOP "stop"               /* the server is exiting */
#define TPU_AUDIT_KIND_LOAD "load"               /* a model version loaded */
#define TPU_AUDIT_KIND_UNLOAD "unload"           /* a model version was unloaded */
#define TPU_AUDIT_KIND_RELOAD "reload"           /* repository rescan (SIGHUP / admin call) */
#define TPU_AUDIT_KIND_LOAD_FAILED "load_failed" /* a model version failed to load */
#define TPU_AUDIT_KIND_CONFIG "config"           /* configuration at start or changed */
/* Written by the module itself: */
#define TPU_AUDIT_KIND_ROTATE "rotate"           /* first record of a new file */
#define TPU_AUDIT_KIND_RECOVERED "recovered"     /* vouches for a torn tail found at open */
#define TPU_AUDIT_KIND_LOST "lost"               /* N records were refused while failed */
#define TPU_AUDIT_KIND_ROLLBACK "rollback"       /* head file was ahead of the log at open */
#define TPU_AUDIT_KIND_GAP "gap"                 /* seq A..B went with a deleted file */
#define TPU_AUDIT_KIND_PAYLOAD_EXPIRED "payload_expired" /* retention deleted a payload file */

/* Completion status passed to a record's callback. */
#define TPU_AUDIT_WRITTEN 0  /* written (with `always`: and on disk, fdatasync done) */
#define TPU_AUDIT_PENDING 1  /* fail-open only: not written yet, kept and retried */
#define TPU_AUDIT_LOST (-1)  /* will never be written (closed while the log was failing) */

/* Options; fill with tpu_audit_config_init() then set what differs. */
typedef struct {
  const char *path;           /* the log file (--audit-log); required */
  const char *key_path;       /* --audit-key FILE: HMAC-SHA256; NULL = plain SHA-256 */
  const char *head_path;      /* --audit-head FILE; NULL = "<path>.head"; "" = no head file */
  tpu_audit_fsync_t fsync;    /* --audit-fsync */
  unsigned fsync_interval_ms; /* milliseconds between fdatasyncs with `interval` (100) */
  uint64_t max_bytes;         /* bytes: rotate once a file reaches this; 0 = never (0) */
  int fail_open;              /* --audit-fail-open: keep serving when the log can't be written */
  unsigned head_interval_ms;  /* milliseconds between head file updates (1000) */
  unsigned retry_ms;          /* milliseconds between retries while failed (200) */
  size_t max_pending;         /* records queued at most; more are refused and lost (65536) */
  /* The payload store (payload.h); NULL = none, and records carry no payload. */
  const char *payload_dir;    /* --payload-dir DIR */
  const tpu_payload_key_t *payload_key; /* --payload-key: AES-256-GCM; NULL = in clear (copied) */
  uint64_t payload_max_bytes; /* --payload-max-bytes: the store's size at most; 0 = no limit */
  uint64_t payload_max_age_s; /* --payload-max-age: seconds an entry is kept; 0 = no limit */
} tpu_audit_config_t;

/* Fills cfg with the defaults above (path NULL). */
void tpu_audit_config_init(tpu_audit_config_t *cfg);

/* Parses "always", "interval" or "never"; returns 0, or -1 for anything else (tpu_fsync_parse). */
int tpu_audit_parse_fsync(const char *name, tpu_audit_fsync_t *out);

/* One record as the caller describes it. Every pointer may be NULL (written as ""); strings are
 * copied by tpu_audit_submit, so they need only live for the call. Strings longer than 1024
 * bytes are cut (message: 4096). */
typedef struct {
  const char *kind;          /* TPU_AUDIT_KIND_*; NULL = "request" */
  const char *request_id;    /* the client's request id (or the server's call id) */
  const char *client;        /* TLS subject, token name or peer address */
  const char *model, *version;
  const char *input_sha256;  /* hex, from tpu_audit_sha256_* on an engine thread */
  const char *output_sha256;
  const char *status;        /* gRPC code name: "OK", "INVALID_ARGUMENT", ... */
  const char *message;       /* error text, or what an admin event did */
  uint64_t queue_us;         /* microseconds queued before compute */
  uint64_t compute_us;       /* microseconds of compute */
  uint64_t batch_id;         /* the batch the request ran in; 0 = none */
  uint64_t bucket;           /* the batch size bucket; 0 = none */
  /* What a replay must match to recompute the answer bit for bit (request records): */
  const char *checkpoint_sha256; /* the model version's verified checkpoint digest (hex) */
  const char *reference;     /* the version's reference-check result at load ("" = none) */
  const char *kernels;       /* the engine's kernel set ("avx512", "amx", "ref", ...) */
  const char *precision;     /* the products' precision: "fp32", "bf16", "int8" */
  /* The captured tensors (tpu_audit_capture): owned by the module once submitted, freed by it
   * whatever happens (refused too); NULL = none. The record gets "payload":"FILE@OFFSET" and
   * "payload_sha256" when the store holds it. */
  tpu_payload_blob_t *payload;
} tpu_audit_record_t;

/* Completion callback: runs on the writer thread, so it must be quick and must not block or
 * call back into the audit module (hand the call back to its I/O thread: queue + eventfd).
 * seq is the record's sequence number (0 if it never got one); status is TPU_AUDIT_*. */
typedef void (*tpu_audit_done_fn)(void *arg, uint64_t seq, int status);

/* Opens (creates, mode 0640) or continues the log at cfg->path: reads its last record to
 * continue seq and the chain (checking that record's hash with the configured key), keeps and
 * vouches for a torn tail, checks the head file, and starts the writer thread. Returns 0, or -1
 * with err set (unreadable key, wrong key for the existing log, a file it cannot open...). */
int tpu_audit_open(const tpu_audit_config_t *cfg, tpu_audit_t **out, char *err, size_t errlen);

/* Queues one record; done (may be NULL) is called once with its fate. Returns 0, or
 * TPU_AUDIT_LOST when the queue is full or the log is closed: then done is NOT called and the
 * record is counted lost. Any thread; no I/O, no hashing, one short lock. */
int tpu_audit_submit(tpu_audit_t *a, const tpu_audit_record_t *rec, tpu_audit_done_fn done,
                     void *arg);

/* Waits up to timeout_ms until every record submitted before the call is written and on disk
 * (fdatasync, whatever the policy). Returns 0, or -1 on timeout (e.g. the log is failing). */
int tpu_audit_flush(tpu_audit_t *a, unsigned timeout_ms);

/* Asks the writer to rotate now (SIGHUP). Returns at once; call from normal thread context
 * (a libevent signal callback), not from a raw signal handler. */
void tpu_audit_reopen(tpu_audit_t *a);

/* 1 while writes succeed, 0 in the failed state. */
int tpu_audit_healthy(const tpu_audit_t *a);

/* Whether the server should accept a new request: healthy, or fail-open. When 0, answer
 * UNAVAILABLE ("audit log cannot be written"). Lock-free; call from I/O threads. */
int tpu_audit_admit(const tpu_audit_t *a);

/* Counters (each a snapshot; lock-free). */
typedef struct {
  uint64_t records_written; /* records on disk (written; synced per policy) */
  uint64_t records_lost;    /* refused (queue full / closed) or dropped at close */
  uint64_t bytes_written;   /* bytes appended, all files */
  uint64_t fsyncs;          /* fdatasync calls that succeeded */
  uint64_t write_errors;    /* failed write/fdatasync attempts */
  uint64_t rotations;       /* files rotated */
  uint64_t seq;             /* last seq written */
  uint64_t synced_seq;      /* last seq known to be on disk */
  uint64_t queued;          /* records waiting: submitted, not written yet */
  uint64_t files_deleted;   /* times the file was found deleted while open (gap records) */
  int failed;               /* 1 in the failed state */
} tpu_audit_stats_t;

void tpu_audit_stats(const tpu_audit_t *a, tpu_audit_stats_t *out);

/* Whether the log has a payload store (--payload-dir). */
int tpu_audit_capturing(const tpu_audit_t *a);
/* Builds a request's payload entry with the store's key (engine threads; tpu_payload_build):
 * put it in the record's payload. Returns 0, or -1 (out of memory; no store). */
int tpu_audit_capture(const tpu_audit_t *a, const char *model, const char *version, size_t rows,
                      const tpu_payload_tensor_t *in, size_t nin, const tpu_payload_tensor_t *out,
                      size_t nout, tpu_payload_blob_t **blob);
/* The store's counters (zeros without one). */
void tpu_audit_payload_stats(const tpu_audit_t *a, tpu_pstore_stats_t *out);

/* Writes what is queued (one last retry if failing), fdatasyncs, updates the head file, stops
 * the writer and frees everything. Callbacks of records that could not be written get
 * TPU_AUDIT_LOST. Submit a "stop" record first. Accepts NULL. */
void tpu_audit_close(tpu_audit_t *a);

/* tpu_audit_close, and *final (may be NULL) = the counters after it: records_lost then includes
 * the records close gave up on, so it is exactly the submitted records that were not written. */
void tpu_audit_shutdown(tpu_audit_t *a, tpu_audit_stats_t *final);

/* Digests for input_sha256 / output_sha256: compute on engine threads, never on I/O threads.
 * hex receives 64 lowercase hex digits and a NUL. */
void tpu_audit_sha256_hex(const void *data, size_t len, char hex[65]);

/* Incremental form, for a request made of several tensors (fed in request order). */
typedef struct {
  void *ctx; /* EVP_MD_CTX */
} tpu_audit_sha256_t;
int tpu_audit_sha256_init(tpu_audit_sha256_t *d);
void tpu_audit_sha256_update(tpu_audit_sha256_t *d, const void *data, size_t len);
/* Writes the hex digest and frees the context. */
void tpu_audit_sha256_final(tpu_audit_sha256_t *d, char hex[65]);

/* Reads a key file: its bytes, trailing '\r' and '\n' removed; at least 16 bytes remain, at
 * most cap. Returns the key length, or -1 with err set. */
int tpu_audit_load_key(const char *path, uint8_t *key, size_t cap, char *err, size_t errlen);

/* Test hook: while nonzero, the writer's write(2) and fdatasync fail with this errno (a write
 * first writes half its bytes, as a full disk would). Not for production use. */
void tpu_audit__inject_error(tpu_audit_t *a, int err);
/* Test hook: while on, every record the writer formats runs out of memory partway (the batch
 * buffer's oom flag), as if realloc failed. Not for production use. */
void tpu_audit__inject_oom(tpu_audit_t *a, int on);

#endif /* TPU_AUDIT_H */
