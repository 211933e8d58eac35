/*
 * audit.c - the audit log writer: queue, group commit, hash chain, fsync policy, fail-closed
 * state, rotation and the head file. The record format, canonical bytes and recovery rules are
 * documented in audit.h.
 *
 * DESIGN
 * One writer thread owns the file descriptor, the chain (seq, last hash), the pending batch, the
 * rotation and the head file; nothing else touches them, so they need no lock. Producers only
 * link records onto the queue. The writer never holds the lock while it formats, hashes, writes
 * or runs callbacks.
 *
 * LOCK RULES (a->mu)
 * a->mu guards the queue (qhead, qtail, qlen), the requests to the writer (stop, reopen,
 * flush_req) and the flush accounting (nsubmitted, nsettled). cv wakes the writer; settled_cv
 * wakes tpu_audit_flush waiters. Counters read by tpu_audit_stats are atomics.
 *
 * A batch whose write or fdatasync failed stays in a->batch with the seqs and hashes it was
 * given; before each retry the file is cut back to a->good_off (only bytes of that unconfirmed
 * batch are removed), so a retry appends exactly the same bytes and the chain stays unbroken.
 *
 * A batch that went into a file no longer at path (audit.h: THE FILE DELETED...) is unwound
 * instead: seq and hash go back to the last committed record, its nodes go back to the front
 * of the held list, and relocate() starts the new file with a gap or rotate record and builds
 * the batch again with new seqs. So that the module's own records survive this, they are nodes
 * too (internal = 1: not counted as submitted); a batch is [boundary][lost][held records...].
 *
 * The batch is a tpu_buf_t: a record that did not fit in memory sets its oom flag, and such a
 * batch is never written (a record cut short would break the chain): commit() unwinds it as
 * above and enters the failed state, and each retry (every retry_ms) builds it again.
 */
#define _GNU_SOURCE /* memrchr */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "audit_int.h"
#include "clock.h"
#include "file.h"
#include "log.h"
#include "tpu_text.h"

#define STR_MAX 1024         /* bytes kept of each string field */
#define MESSAGE_MAX 4096     /* bytes kept of the message */
#define BATCH_MAX 4096       /* records per write(2) */
#define TAIL_WINDOW (8u << 20) /* bytes read back at open to find the last record */

enum {
  F_KIND, F_ID, F_CLIENT, F_MODEL, F_VERSION, F_IN, F_OUT, F_STATUS, F_MESSAGE,
  F_CHECKPOINT, F_REFERENCE, F_KERNELS, F_PRECISION, F_COUNT
};

typedef struct tpu__audit_node {
  struct tpu__audit_node *next;
  tpu_audit_done_fn done;
  void *arg;
  uint64_t seq;
  int fired; /* callback already ran (fail-open PENDING) */
  int internal; /* written by the module itself (lost, rotate, gap): not a submitted record */
  tpu_payload_blob_t *blob; /* the captured tensors (rec.payload, owned), NULL = none */
  tpu_audit_record_t rec; /* strings point into data */
  char data[];
} node_t;

struct tpu_audit {
  tpu_audit_config_t cfg;
  char *path, *head_path;
  uint8_t key[TPU__AUDIT_KEY_MAX];
  size_t keylen;

  pthread_mutex_t mu;
  pthread_cond_t cv, settled_cv;
  node_t *qhead, *qtail; /* under mu */
  size_t qlen;           /* under mu */
  int stop, reopen, flush_req; /* under mu */
  uint64_t nsubmitted; /* under mu: records accepted by submit */
  uint64_t nretired;   /* under mu: of those, written or dropped (bounds the queue) */
  uint64_t nsettled;   /* under mu: of those, on disk or dropped (what flush waits for) */
  pthread_t thread;
  int started;

  /* Writer thread only. */
  int fd;
  dev_t dev;
  ino_t ino;
  int check_path;         /* check after each commit that the file is still at path */
  int lost_path;          /* LOST_DELETED / LOST_MOVED: a new file must be started at path */
  int fresh_file;         /* the file was started after the last one was moved or deleted */
  uint64_t file_first_seq; /* the first seq in the current file (> disk_seq: none yet) */
  uint64_t last_lost_log_us, lost_log_quiet; /* rate limit of the file-lost warning */
  uint64_t good_off;      /* file size up to the last committed batch */
  int cut_needed;         /* a failed attempt may have left bytes past good_off */
  uint64_t seq;           /* last seq given out */
  char last_hash[65];     /* hash of record `seq` */
  uint64_t disk_seq;      /* last seq committed */
  char disk_hash[65];
  tpu_buf_t batch;        /* serialized, not yet committed */
  node_t *bhead, *btail;  /* the caller records in batch */
  size_t bcount;
  uint64_t blast_seq;
  char blast_hash[65];
  node_t *hhead, *htail;  /* taken off the queue, waiting behind a failed batch */
  uint64_t unsynced;      /* caller records written but not yet fdatasync'd */
  int dirty;              /* bytes written since the last fdatasync */
  int want_rotate;        /* a reopen request that arrived while failing */
  int sync_failed;
  int rebuild;            /* the batch was taken back (out of memory): build it on the next retry */
  uint64_t last_sync_us, last_head_us, next_retry_us, head_seq;

  /* The payload store (writer thread only; NULL = none) and its key (read by engine threads
   * in tpu_audit_capture: set at open, never changed). */
  tpu_pstore_t *ps;
  tpu_payload_key_t pkey;
  int has_pkey;
  int payload_err;        /* an entry could not be staged: the batch cannot be written */
  uint64_t last_maintain_us;
  _Atomic uint64_t st_p_entries, st_p_bytes, st_p_files_deleted, st_p_bytes_deleted;

  _Atomic int failed;
  _Atomic int inject;
  _Atomic int inject_oom; /* tpu_audit__inject_oom */
  _Atomic uint64_t st_written, st_lost, st_bytes, st_fsyncs, st_errors, st_rotations;
  _Atomic uint64_t st_seq, st_synced_seq, st_queued, st_files_deleted;
  _Atomic uint64_t lost_unreported; /* refused records no "lost" record has mentioned yet */
};

/* ---- hashing, shared with the verifier ---------------------------------------------------- */

static int is_hex64(const char *s, size_t n) {
  if (n != 64) return 0;
  for (size_t i = 0; i < 64; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

uint64_t tpu__audit_raw_seq(const char *line, size_t len) {
  static const char pfx[] = "{\"seq\":";
  size_t n = sizeof pfx - 1;
  if (len <= n || memcmp(line, pfx, n) != 0) return 0;
  uint64_t v = 0;
  size_t i = n;
  for (; i < len && i < n + 20 && line[i] >= '0' && line[i] <= '9'; i++)
    v = v * 10 + (uint64_t)(line[i] - '0');
  return i > n ? v : 0;
}

static const char *json_str(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

tpu__line_result_t tpu__audit_parse_line(const char *line, size_t len, const uint8_t *key,
                                         size_t keylen, tpu__audit_line_t *out) {
  memset(out, 0, sizeof *out);
  /* Layout: ... ,"hash":"<64 hex>"} with nothing after. */
  static const char sep[] = TPU__AUDIT_HASH_SEP;
  const size_t seplen = sizeof sep - 1;
  /* The last ,"hash":" of a valid line is 66 bytes before its end ("<64 hex>"}). */
  size_t cut = len >= seplen + 66 ? len - seplen - 66 : 0;
  if (len < seplen + 66 || memcmp(line + cut, sep, seplen) != 0 || line[len - 2] != '"' ||
      line[len - 1] != '}' || !is_hex64(line + cut + seplen, 64)) {
    snprintf(out->why, sizeof out->why, "line does not end with ,\"hash\":\"<64 hex>\"}");
    return TPU__LINE_MALFORMED;
  }
  json_error_t jerr;
  json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!o || !json_is_object(o)) {
    snprintf(out->why, sizeof out->why, "not a JSON object: %s", o ? "wrong type" : jerr.text);
    json_decref(o);
    return TPU__LINE_MALFORMED;
  }
  json_t *seq = json_object_get(o, "seq");
  const char *prev = json_str(o, "prev"), *hash = json_str(o, "hash"), *kind = json_str(o, "kind");
  const char *msg = json_str(o, "message");
  if (!json_is_integer(seq) || json_integer_value(seq) <= 0 || !prev ||
      !is_hex64(prev, strlen(prev)) || !hash || memcmp(hash, line + cut + seplen, 64) != 0 ||
      !kind || !json_str(o, "time")) {
    snprintf(out->why, sizeof out->why, "missing or invalid seq, time, kind, prev or hash");
    json_decref(o);
    return TPU__LINE_MALFORMED;
  }
  out->seq = (uint64_t)json_integer_value(seq);
  memcpy(out->prev, prev, 65);
  memcpy(out->hash, hash, 65);
  snprintf(out->kind, sizeof out->kind, "%s", kind);
  snprintf(out->message, sizeof out->message, "%s", msg ? msg : "");
  json_decref(o);

  /* canonical = line[0:cut] + "}" */
  char stackbuf[8192];
  char *canon = cut + 1 <= sizeof stackbuf ? stackbuf : malloc(cut + 1);
  if (!canon) {
    snprintf(out->why, sizeof out->why, "out of memory");
    return TPU__LINE_MALFORMED;
  }
  memcpy(canon, line, cut);
  canon[cut] = '}';
  char hex[65];
  tpu__audit_mac(key, keylen, canon, cut + 1, hex);
  tpu__line_result_t r = TPU__LINE_OK;
  if (memcmp(hex, out->hash, 64) != 0) {
    r = TPU__LINE_MISMATCH;
    if (keylen > 0) {
      tpu__audit_mac(NULL, 0, canon, cut + 1, hex);
      if (memcmp(hex, out->hash, 64) == 0) r = TPU__LINE_FORGED;
    }
  }
  if (canon != stackbuf) free(canon);
  return r;
}

/* A decimal without sign or leading zero at *p, advancing p; 0 when there is none or it
 * overflows. */
static uint64_t read_u64(const char **p) {
  const char *s = *p;
  uint64_t v = 0;
  if (*s < '1' || *s > '9') return 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return 0;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *p = s;
  return v;
}

int tpu__audit_gap_range(const char *message, uint64_t *first, uint64_t *last) {
  static const char pfx[] = "seq ", mid[] = "..", sfx[] = " are not in the log: ";
  const char *p = message;
  if (!p || strncmp(p, pfx, sizeof pfx - 1) != 0) return 0;
  p += sizeof pfx - 1;
  uint64_t f = read_u64(&p);
  if (!f || strncmp(p, mid, sizeof mid - 1) != 0) return 0;
  p += sizeof mid - 1;
  uint64_t l = read_u64(&p);
  if (!l || l < f || strncmp(p, sfx, sizeof sfx - 1) != 0) return 0;
  *first = f;
  *last = l;
  return 1;
}

/* ---- small helpers ---------------------------------------------------------------------- */

void tpu_audit_config_init(tpu_audit_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->fsync = TPU_AUDIT_FSYNC_INTERVAL;
  cfg->fsync_interval_ms = 100;
  cfg->head_interval_ms = 1000;
  cfg->retry_ms = 200;
  cfg->max_pending = 65536;
}

int tpu_audit_parse_fsync(const char *name, tpu_audit_fsync_t *out) {
  return tpu_fsync_parse(name, out);
}

int tpu_audit_load_key(const char *path, uint8_t *key, size_t cap, char *err, size_t errlen) {
  void *buf;
  size_t n;
  char why[4200];
  int e = tpu_file_read(path, cap, NULL, &buf, &n, NULL, why, sizeof why);
  if (e == EFBIG) {
    snprintf(err, errlen, "audit key '%s': longer than %zu bytes", path, cap);
    return -1;
  }
  if (e) {
    snprintf(err, errlen, "audit key %s", why);
    return -1;
  }
  memcpy(key, buf, n);
  OPENSSL_cleanse(buf, n);
  free(buf);
  while (n > 0 && (key[n - 1] == '\n' || key[n - 1] == '\r')) n--;
  if (n < 16) {
    snprintf(err, errlen, "audit key '%s': %zu bytes, expected at least 16", path, n);
    return -1;
  }
  return (int)n;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid. */
static void rfc3339_now(char out[40]) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, 40 - n, ".%06ldZ", ts.tv_nsec / 1000L);
}

/* Serializes one record at the chain head (a->seq + 1) onto b: the writer's only formatter. */
static uint64_t emit(tpu_audit_t *a, tpu_buf_t *b, const tpu_audit_record_t *r,
                     const char *payload, const char *payload_sha256) {
  uint64_t seq = ++a->seq;
  char tbuf[40], num[400];
  rfc3339_now(tbuf);
  size_t start = b->len;
  snprintf(num, sizeof num, "{\"seq\":%" PRIu64 ",\"time\":\"%s\",\"kind\":", seq, tbuf);
  tpu_buf_adds(b, num);
  if (atomic_load(&a->inject_oom)) b->oom = 1; /* as if the buffer could not grow from here */
  tpu__audit_json_str(b, r->kind ? r->kind : TPU_AUDIT_KIND_REQUEST);
  static const char *const keys[] = {"request_id", "client", "model", "version",
                                     "input_sha256", "output_sha256", "status", "message"};
  const char *vals[] = {r->request_id, r->client, r->model, r->version,
                        r->input_sha256, r->output_sha256, r->status, r->message};
  for (int i = 0; i < 8; i++) {
    tpu_buf_add(b, ",\"", 2);
    tpu_buf_adds(b, keys[i]);
    tpu_buf_add(b, "\":", 2);
    tpu__audit_json_str(b, vals[i]);
  }
  snprintf(num, sizeof num,
           ",\"queue_us\":%" PRIu64 ",\"compute_us\":%" PRIu64 ",\"batch_id\":%" PRIu64
           ",\"bucket\":%" PRIu64,
           r->queue_us, r->compute_us, r->batch_id, r->bucket);
  tpu_buf_adds(b, num);
  static const char *const pin_keys[] = {"checkpoint_sha256", "reference", "kernels",
                                         "precision"};
  const char *pins[] = {r->checkpoint_sha256, r->reference, r->kernels, r->precision};
  for (int i = 0; i < 4; i++) {
    tpu_buf_add(b, ",\"", 2);
    tpu_buf_adds(b, pin_keys[i]);
    tpu_buf_add(b, "\":", 2);
    tpu__audit_json_str(b, pins[i]);
  }
  tpu_buf_adds(b, ",\"payload\":");
  tpu__audit_json_str(b, payload);
  tpu_buf_adds(b, ",\"payload_sha256\":");
  tpu__audit_json_str(b, payload_sha256);
  snprintf(num, sizeof num, ",\"prev\":\"%s\"", a->last_hash);
  tpu_buf_adds(b, num);
  tpu_buf_add(b, "}", 1); /* canonical bytes = b[start, len) */
  if (b->oom) return seq; /* cut short: commit() takes the batch back (unwind) */
  char hex[65];
  tpu__audit_mac(a->key, a->keylen, b->p + start, b->len - start, hex);
  b->p[--b->len] = '\0'; /* the "}" again: the hash goes before it */
  tpu_buf_adds(b, TPU__AUDIT_HASH_SEP);
  tpu_buf_add(b, hex, 64);
  tpu_buf_add(b, "\"}\n", 3);
  memcpy(a->last_hash, hex, 65);
  return seq;
}

static void fsync_dir(const char *path) {
  char *copy = strdup(path);
  if (!copy) return;
  int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  free(copy);
}

/* ---- the writer ------------------------------------------------------------------------- */

static node_t *make_node(const tpu_audit_record_t *rec, tpu_audit_done_fn done, void *arg);
static int batch_pending(const tpu_audit_t *a);
static int sync_now(tpu_audit_t *a);
static void build_batch(tpu_audit_t *a);

/* fdatasync (the payload file first: a record on disk never points at an entry that is not);
 * on success every record up to `covered` (all written before the call) is on disk, and only
 * here does synced_seq advance. */
static int do_sync(tpu_audit_t *a, uint64_t covered) {
  int inj = atomic_load(&a->inject);
  if (a->ps && !inj) {
    int e = tpu_pstore_sync(a->ps);
    if (e) {
      errno = e;
      return -1;
    }
  }
  if (inj || fdatasync(a->fd) != 0) {
    errno = inj ? inj : errno;
    return -1;
  }
  atomic_fetch_add(&a->st_fsyncs, 1);
  atomic_store(&a->st_synced_seq, covered);
  return 0;
}

/* Runs each caller record's callback once and frees the nodes. */
static void node_free(node_t *n) {
  if (!n) return;
  free(n->blob);
  free(n);
}

static void payload_stats(tpu_audit_t *a);

static void finish_nodes(node_t *n, int status) {
  while (n) {
    node_t *next = n->next;
    if (n->done && !n->fired) n->done(n->arg, n->seq, status);
    node_free(n);
    n = next;
  }
}

/* Submitted records in a list (the module's own records are not counted). */
static size_t count_caller(const node_t *n) {
  size_t c = 0;
  for (; n; n = n->next) c += !n->internal;
  return c;
}

/* Accounts caller records that were written (retired) and that reached the disk (settled). */
static void account(tpu_audit_t *a, uint64_t retired, uint64_t settled) {
  if (!retired && !settled) return;
  pthread_mutex_lock(&a->mu);
  a->nretired += retired;
  a->nsettled += settled;
  atomic_store(&a->st_queued, a->nsubmitted - a->nretired);
  if (settled) pthread_cond_broadcast(&a->settled_cv);
  pthread_mutex_unlock(&a->mu);
}

static void mark_synced(tpu_audit_t *a) {
  a->dirty = 0;
  a->last_sync_us = tpu_now_us();
  uint64_t n = a->unsynced;
  a->unsynced = 0;
  account(a, 0, n);
}

/* Enters the failed state (logged once per episode): `what` says what could not be done. */
static void enter_failed_msg(tpu_audit_t *a, const char *what) {
  atomic_fetch_add(&a->st_errors, 1);
  a->next_retry_us = tpu_now_us() + (uint64_t)a->cfg.retry_ms * 1000u;
  if (!atomic_exchange(&a->failed, 1))
    tpu_log_error("audit log %s: %s; %s until it can be written again", a->path, what,
                  a->cfg.fail_open ? "serving on (fail-open)" : "new requests get UNAVAILABLE");
}

static void enter_failed(tpu_audit_t *a, const char *what, int err) {
  char msg[300];
  snprintf(msg, sizeof msg, "%s failed: %s", what, strerror(err));
  enter_failed_msg(a, msg);
}

static void leave_failed(tpu_audit_t *a) {
  if (atomic_exchange(&a->failed, 0)) tpu_log_info("audit log %s: writing again", a->path);
}

/* The module's own record (lost, rotate, gap) as a node, so that it is re-sequenced with the
 * batch it belongs to if that batch has to be written again into a new file. NULL: no memory. */
static node_t *module_node(const char *kind, const char *status, const char *message) {
  tpu_audit_record_t r = {.kind = kind, .status = status, .message = message};
  node_t *n = make_node(&r, NULL, NULL);
  if (n) n->internal = 1;
  return n;
}

/* Serializes n at the chain head onto the batch and links it there. A "stop" record's message
 * gets the count of records lost since the log was opened: all of them were submitted before
 * it, so if it is written the count is final (what is lost later is only in the closing line). */
static void batch_add(tpu_audit_t *a, node_t *n) {
  n->next = NULL;
  char ref[TPU_PAYLOAD_REF_MAX] = "";
  const char *psha = NULL;
  if (n->blob && a->ps) { /* staged at the seq emit gives it */
    int e = tpu_pstore_stage(a->ps, a->seq + 1, n->blob, ref);
    if (e && !a->payload_err) a->payload_err = e;
    psha = n->blob->sha256;
  }
  if (!n->internal && strcmp(n->rec.kind, TPU_AUDIT_KIND_STOP) == 0) {
    char msg[MESSAGE_MAX + 100];
    snprintf(msg, sizeof msg, "%s%s%" PRIu64 " audit records lost since start", n->rec.message,
             n->rec.message[0] ? "; " : "", atomic_load(&a->st_lost));
    tpu_audit_record_t r = n->rec;
    r.message = msg;
    n->seq = emit(a, &a->batch, &r, ref, psha);
  } else {
    n->seq = emit(a, &a->batch, &n->rec, ref, psha);
  }
  if (a->btail) a->btail->next = n;
  else a->bhead = n;
  a->btail = n;
  if (!n->internal) a->bcount++;
}

/* The batch ends at the chain head. */
static void batch_seal(tpu_audit_t *a) {
  a->blast_seq = a->seq;
  memcpy(a->blast_hash, a->last_hash, 65);
}

/* Takes the batch back (it went into a file that is no longer at path): its records go to the
 * front of the held list, in order, to be given seqs again in the file that replaces it. */
static void unwind(tpu_audit_t *a) {
  if (a->ps) tpu_pstore_unstage(a->ps);
  a->seq = a->disk_seq;
  memcpy(a->last_hash, a->disk_hash, 65);
  tpu_buf_clear(&a->batch);
  if (atomic_load(&a->st_synced_seq) > a->disk_seq) atomic_store(&a->st_synced_seq, a->disk_seq);
  if (a->bhead) {
    a->btail->next = a->hhead;
    if (!a->hhead) a->htail = a->btail;
    a->hhead = a->bhead;
  }
  a->bhead = a->btail = NULL;
  a->bcount = 0;
}

enum { LOST_NONE = 0, LOST_DELETED = 1, LOST_MOVED = 2 };

/* Is the file we write still the one at path? LOST_NONE yes; LOST_DELETED it was unlinked (its
 * records are gone with it once we close it); LOST_MOVED it was renamed away or the path names
 * another file now; -1 with errno when that cannot be told. Two system calls. */
static int file_state(tpu_audit_t *a) {
  struct stat fs, ps;
  if (fstat(a->fd, &fs) != 0) return -1;
  if (fs.st_nlink == 0) return LOST_DELETED;
  if (stat(a->path, &ps) != 0) return errno == ENOENT || errno == ENOTDIR ? LOST_MOVED : -1;
  return ps.st_dev == a->dev && ps.st_ino == a->ino ? LOST_NONE : LOST_MOVED;
}

/* A file-lost warning, at most one a second (each event is also a record in the log). */
static void warn_lost(tpu_audit_t *a, int deleted, const char *what) {
  uint64_t now = tpu_now_us();
  if (a->last_lost_log_us && now - a->last_lost_log_us < 1000000u) {
    a->lost_log_quiet++;
    return;
  }
  char more[80] = "";
  if (a->lost_log_quiet)
    snprintf(more, sizeof more, " (and %" PRIu64 " more times since the last such line)",
             a->lost_log_quiet);
  tpu_log(deleted ? TPU_LOG_ERROR : TPU_LOG_WARN, "audit log %s: %s%s", a->path, what, more);
  a->last_lost_log_us = now;
  a->lost_log_quiet = 0;
}

/* Starts a new file at path after ours was deleted or moved away (a->lost_path); the batch that
 * went into the old file has been unwound into the held list. The new file begins with a "gap"
 * record (deleted: seq A..B were in it and are gone) or a "rotate" record naming where the old
 * file went (moved: its records are there), then the held records, seqs continuing. Returns 0
 * with that batch built, or -1 in the failed state (retried every retry_ms). */
static int relocate(tpu_audit_t *a) {
  int moved = a->lost_path == LOST_MOVED;
  char where[4096] = "";
  if (moved) {
    if (a->dirty) { /* what was committed stays in the moved file: on disk before we leave it */
      if (do_sync(a, a->disk_seq) != 0) {
        a->sync_failed = 1;
        enter_failed(a, "fdatasync of the moved-away log file", errno);
        return -1;
      }
      a->sync_failed = 0;
      mark_synced(a);
    }
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", a->fd);
    ssize_t n = readlink(proc, where, sizeof where - 1);
    where[n > 0 ? (size_t)n : 0] = '\0';
    /* NFS keeps a deleted open file as .nfsXXXX until it is closed: that is a deletion. */
    const char *base = strrchr(where, '/');
    if (strncmp(base ? base + 1 : where, ".nfs", 4) == 0) moved = 0, a->lost_path = LOST_DELETED;
  }
  int fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    enter_failed(a, "creating the log file again", e);
    return -1;
  }
  if (st.st_dev == a->dev && st.st_ino == a->ino) { /* our file is back where it was */
    close(fd);
    a->lost_path = 0;
    build_batch(a);
    return 0;
  }
  if (st.st_size > 0) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "the path now names another file (%lld bytes) that this server did not write; "
             "it is left alone: move it away and the log is started again there",
             (long long)st.st_size);
    close(fd);
    enter_failed_msg(a, msg);
    return -1;
  }
  fsync_dir(a->path); /* the new name is durable before any record in it counts */
  node_t *b = NULL;
  uint64_t first = a->file_first_seq, last = a->disk_seq;
  char msg[4096 + 600];
  if (first <= last) { /* committed records of ours were in the old file */
    if (moved)
      snprintf(msg, sizeof msg, "previous file: %s (moved away from %s while open)",
               where[0] ? where : "(new name unknown)", a->path);
    else
      snprintf(msg, sizeof msg,
               TPU__AUDIT_GAP_PFX "%s was deleted while the server had it open, with the %" PRIu64
               " records in it",
               first, last, a->path, last - first + 1);
    b = module_node(moved ? TPU_AUDIT_KIND_ROTATE : TPU_AUDIT_KIND_GAP,
                    moved ? "OK" : "DATA_LOSS", msg);
    if (!b) {
      close(fd);
      enter_failed(a, "starting a new log file", ENOMEM);
      return -1;
    }
  }
  close(a->fd); /* a deleted file's space is freed here */
  a->fd = fd;
  a->dev = st.st_dev;
  a->ino = st.st_ino;
  a->good_off = 0;
  a->cut_needed = 0;
  a->file_first_seq = a->disk_seq + 1;
  a->fresh_file = 1;
  a->lost_path = 0;
  if (moved) atomic_fetch_add(&a->st_rotations, 1);
  else atomic_fetch_add(&a->st_files_deleted, 1);
  char what[sizeof where + 400];
  if (moved)
    snprintf(what, sizeof what, "the file was moved away (to %s) while open: started a new one "
             "at seq %" PRIu64 ", a rotate record naming the old one first",
             where[0] ? where : "a name unknown", a->disk_seq + 1);
  else if (first <= last)
    snprintf(what, sizeof what, "the file was deleted while open: seq %" PRIu64 "..%" PRIu64
             " (%" PRIu64 " records) went with it; started a new file at seq %" PRIu64 " with a "
             "gap record saying so, and the records not yet written go there",
             first, last, last - first + 1, a->disk_seq + 1);
  else
    snprintf(what, sizeof what, "the file was deleted while open before any record was "
             "committed to it: started a new one");
  warn_lost(a, !moved && first <= last, what);
  if (b) batch_add(a, b);
  build_batch(a);
  return 0;
}

/* Appends the pending batch (after cutting off any bytes of an earlier failed attempt) and,
 * with `always`, syncs it; then checks that the file is still the one at path, and if not,
 * writes the batch again into a new file there (relocate). Returns 0 when committed. */
static int commit(tpu_audit_t *a) {
  int keep_moved = 0;
  for (int tries = 0;; tries++) {
    if (a->lost_path) {
      if (tries > 8) { /* someone keeps deleting it: retry later, failed meanwhile */
        enter_failed_msg(a, "the log file keeps disappearing as it is written");
        return -1;
      }
      if (relocate(a) != 0) return -1;
    }
    if (a->batch.oom) { /* a record of it did not fit in memory: never write it cut short */
      unwind(a);
      a->rebuild = 1;
      a->payload_err = 0;
      enter_failed(a, "building a batch", ENOMEM);
      return -1;
    }
    if (a->payload_err) { /* an entry could not be staged: its record would point at nothing */
      int e = a->payload_err;
      unwind(a);
      a->rebuild = 1;
      a->payload_err = 0;
      enter_failed(a, "starting a payload file", e);
      return -1;
    }
    if (a->cut_needed) {
      if (ftruncate(a->fd, (off_t)a->good_off) != 0) {
        enter_failed(a, "ftruncate of a partial batch", errno);
        return -1;
      }
      a->cut_needed = 0;
    }
    size_t off = 0;
    int werr = 0;
    const char *wwhat = NULL;
    /* The entries first (synced first with `always`): a record never points at bytes that are
     * not there. A failed entry write fails the batch like a failed log write. */
    if (a->ps && !atomic_load(&a->inject)) {
      werr = tpu_pstore_write(a->ps, a->cfg.fsync == TPU_AUDIT_FSYNC_ALWAYS, &wwhat);
      if (werr) off = a->batch.len; /* the records are not written */
    }
    while (off < a->batch.len) {
      int inj = atomic_load(&a->inject);
      ssize_t w;
      if (inj) { /* as a full disk would: part of the bytes, then the error */
        size_t half = (a->batch.len - off) / 2;
        if (half) (void)!write(a->fd, a->batch.p + off, half);
        errno = inj;
        w = -1;
      } else {
        w = write(a->fd, a->batch.p + off, a->batch.len - off);
      }
      if (w < 0) {
        if (errno == EINTR) continue;
        werr = errno;
        wwhat = "write";
        break;
      }
      off += (size_t)w;
    }
    if (!werr && a->cfg.fsync == TPU_AUDIT_FSYNC_ALWAYS && do_sync(a, a->blast_seq) != 0) {
      werr = errno; /* not known to be on disk: write it again */
      wwhat = "fdatasync";
    }
    /* Written means written into the file at path: a batch that went into a deleted or moved
     * file does not count (and a failing write into a deleted file is retried in a new one,
     * which frees the space the deleted one holds). */
    if (a->check_path && (werr || a->batch.len)) {
      int where = file_state(a);
      if (where > 0) {
        if (where == LOST_MOVED && ftruncate(a->fd, (off_t)a->good_off) != 0) {
          if (!werr) { /* cannot take it back: it is whole (and synced) in the moved file */
            keep_moved = 1;
            break;
          }
          tpu_log_error("audit log %s: moved away with a partial batch at its end that cannot "
                        "be cut off (%s); the batch is written whole into the new file",
                        a->path, strerror(errno));
        }
        unwind(a);
        a->lost_path = where;
        continue;
      }
      if (where < 0 && !werr) {
        werr = errno;
        wwhat = "checking that the log file is still in place (fstat/stat)";
      }
    }
    if (werr) {
      a->cut_needed = 1;
      enter_failed(a, wwhat, werr);
      return -1;
    }
    break;
  }
  a->good_off += a->batch.len;
  if (a->ps) {
    tpu_pstore_committed(a->ps);
    payload_stats(a);
  }
  atomic_fetch_add(&a->st_bytes, a->batch.len);
  atomic_fetch_add(&a->st_written, a->blast_seq - a->disk_seq);
  a->disk_seq = a->blast_seq;
  memcpy(a->disk_hash, a->blast_hash, 65);
  atomic_store(&a->st_seq, a->disk_seq);
  tpu_buf_clear(&a->batch);
  node_t *nodes = a->bhead;
  size_t count = a->bcount;
  a->bhead = a->btail = NULL;
  a->bcount = 0;
  account(a, count, 0);
  a->unsynced += count;
  a->dirty = 1;
  int always = a->cfg.fsync == TPU_AUDIT_FSYNC_ALWAYS;
  if (!a->sync_failed) leave_failed(a);
  finish_nodes(nodes, TPU_AUDIT_WRITTEN);
  if (always) mark_synced(a); /* flush waiters wake after the callbacks ran */
  if (keep_moved) a->lost_path = LOST_MOVED; /* the next batch starts the new file */
  return 0;
}

/* Builds a batch from the held records (after a "lost" record if any were refused), appending
 * to what batch_add put there. */
static void build_batch(tpu_audit_t *a) {
  uint64_t lost = atomic_exchange(&a->lost_unreported, 0);
  if (lost) {
    char msg[160];
    snprintf(msg, sizeof msg, "%" PRIu64 " records were refused and not logged", lost);
    node_t *n = module_node(TPU_AUDIT_KIND_LOST, "DATA_LOSS", msg);
    if (n) batch_add(a, n);
    else atomic_fetch_add(&a->lost_unreported, lost); /* said in a later batch */
  }
  while (a->hhead && a->bcount < BATCH_MAX) {
    node_t *n = a->hhead;
    a->hhead = n->next;
    if (!a->hhead) a->htail = NULL;
    batch_add(a, n);
  }
  batch_seal(a);
}

static int batch_pending(const tpu_audit_t *a) { return a->batch.len > 0; }

static int sync_now(tpu_audit_t *a) {
  if (!a->dirty) return 0;
  if (do_sync(a, a->disk_seq) != 0) {
    a->sync_failed = 1;
    enter_failed(a, "fdatasync", errno);
    return -1;
  }
  a->sync_failed = 0;
  mark_synced(a);
  if (!batch_pending(a)) leave_failed(a);
  return 0;
}

static void write_head(tpu_audit_t *a) {
  a->last_head_us = tpu_now_us();
  if (!a->head_path || a->disk_seq == 0 || a->disk_seq == a->head_seq) return;
  if (sync_now(a) != 0) return;
  char tmp[4200], line[256], tbuf[40];
  snprintf(tmp, sizeof tmp, "%s.tmp", a->head_path);
  rfc3339_now(tbuf);
  int n = snprintf(line, sizeof line, "{\"seq\":%" PRIu64 ",\"hash\":\"%s\",\"time\":\"%s\"}\n",
                   a->disk_seq, a->disk_hash, tbuf);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0 || write(fd, line, (size_t)n) != n || fsync(fd) != 0) {
    tpu_log_warn("audit head file %s: %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
    return;
  }
  close(fd);
  if (rename(tmp, a->head_path) != 0) {
    tpu_log_warn("audit head file %s: rename: %s", a->head_path, strerror(errno));
    return;
  }
  fsync_dir(a->head_path);
  a->head_seq = a->disk_seq;
}

/* Renames the file and starts a new one with a "rotate" record. If the file is no longer at
 * path (logrotate moved it, or it was deleted), the new file is started as after any such
 * loss (relocate), and a SIGHUP right after that (logrotate's postrotate) renames nothing. */
static void rotate(tpu_audit_t *a, int sighup) {
  if (a->good_off == 0 || a->disk_seq == 0) return; /* nothing to rotate */
  int where = file_state(a);
  if (where < 0) {
    tpu_log_warn("audit log %s: rotate: %s", a->path, strerror(errno));
    return;
  }
  if (where > 0) {
    a->lost_path = where;
    if (commit(a) == 0) write_head(a);
    a->fresh_file = 0;
    return;
  }
  if (sighup && a->fresh_file) {
    a->fresh_file = 0;
    tpu_log_info("audit log %s: SIGHUP: the file was started at seq %" PRIu64 " after the last "
                 "one was moved or deleted; not rotated again",
                 a->path, a->file_first_seq);
    return;
  }
  if (sync_now(a) != 0) return;
  char rotated[4200], msg[4300];
  snprintf(rotated, sizeof rotated, "%s.%020" PRIu64, a->path, a->disk_seq);
  for (int i = 1; access(rotated, F_OK) == 0 && i < 1000; i++)
    snprintf(rotated, sizeof rotated, "%s.%020" PRIu64 "-%d", a->path, a->disk_seq, i);
  char *copy = strdup(rotated);
  snprintf(msg, sizeof msg, "previous file: %s", copy ? basename(copy) : rotated);
  free(copy);
  node_t *n = module_node(TPU_AUDIT_KIND_ROTATE, "OK", msg);
  if (!n) {
    tpu_log_warn("audit log %s: rotate: out of memory", a->path);
    return;
  }
  if (rename(a->path, rotated) != 0) {
    tpu_log_warn("audit log %s: rotate: rename to %s: %s", a->path, rotated, strerror(errno));
    free(n);
    return;
  }
  struct stat st;
  int fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0 || fstat(fd, &st) != 0) {
    /* Keep writing where we were (the chain stays whole); the next commit finds the file moved
     * and starts the new one at path (relocate). */
    tpu_log_warn("audit log %s: rotate: open: %s", a->path, strerror(errno));
    if (fd >= 0) close(fd);
    free(n);
    return;
  }
  fsync_dir(a->path);
  close(a->fd);
  a->fd = fd;
  a->dev = st.st_dev;
  a->ino = st.st_ino;
  a->good_off = (uint64_t)st.st_size;
  a->cut_needed = 0;
  a->file_first_seq = a->disk_seq + 1;
  a->fresh_file = 0;
  atomic_fetch_add(&a->st_rotations, 1);
  batch_add(a, n);
  build_batch(a);
  if (commit(a) == 0) write_head(a);
}

/* Moves the queue into the held list; returns the requests. */
static void take_queue(tpu_audit_t *a, int *stop, int *reopen, int *flush) {
  pthread_mutex_lock(&a->mu);
  uint64_t now = tpu_now_us(), deadline = UINT64_MAX;
  for (;;) {
    if (a->qhead || a->stop || a->reopen || (a->flush_req && a->dirty && !atomic_load(&a->failed)))
      break;
    deadline = UINT64_MAX;
    if (atomic_load(&a->failed)) deadline = a->next_retry_us;
    if (a->dirty && a->cfg.fsync == TPU_AUDIT_FSYNC_INTERVAL) {
      uint64_t d = a->last_sync_us + (uint64_t)a->cfg.fsync_interval_ms * 1000u;
      if (d < deadline) deadline = d;
    }
    if (a->head_path && a->disk_seq != a->head_seq) {
      uint64_t d = a->last_head_us + (uint64_t)a->cfg.head_interval_ms * 1000u;
      if (d < deadline) deadline = d;
    }
    if (a->ps && a->cfg.payload_max_age_s) { /* age-based retention runs while idle too */
      uint64_t d = a->last_maintain_us + 1000000u;
      if (d <= now) break;
      if (d < deadline) deadline = d;
    }
    if (deadline <= now) break;
    if (deadline == UINT64_MAX) {
      pthread_cond_wait(&a->cv, &a->mu);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t wait_us = deadline - now;
      ts.tv_sec += (time_t)(wait_us / 1000000u);
      ts.tv_nsec += (long)(wait_us % 1000000u) * 1000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    now = tpu_now_us();
  }
  if (a->qhead) {
    if (a->htail) a->htail->next = a->qhead;
    else a->hhead = a->qhead;
    a->htail = a->qtail;
    a->qhead = a->qtail = NULL;
    a->qlen = 0;
  }
  *stop = a->stop;
  *reopen = a->reopen;
  a->reopen = 0;
  *flush = a->flush_req;
  pthread_mutex_unlock(&a->mu);
}

/* Fail-open: callers are not kept waiting for records that cannot be written yet. */
static void fire_pending(tpu_audit_t *a) {
  if (!a->cfg.fail_open) return;
  for (node_t *lists[2] = {a->bhead, a->hhead}, **l = lists; l < lists + 2; l++)
    for (node_t *n = *l; n; n = n->next)
      if (!n->fired) {
        if (n->done) n->done(n->arg, n->seq, TPU_AUDIT_PENDING);
        n->fired = 1;
      }
}

/* The store's counters, for tpu_audit_payload_stats (other threads). */
static void payload_stats(tpu_audit_t *a) {
  tpu_pstore_stats_t st;
  tpu_pstore_stats(a->ps, &st);
  atomic_store(&a->st_p_entries, st.entries);
  atomic_store(&a->st_p_bytes, st.bytes);
  atomic_store(&a->st_p_files_deleted, st.files_deleted);
  atomic_store(&a->st_p_bytes_deleted, st.bytes_deleted);
}

/* A payload file was deleted by retention: a record says which and why. */
static void report_expired(void *ctx, const char *message) {
  tpu_audit_t *a = ctx;
  node_t *n = module_node(TPU_AUDIT_KIND_PAYLOAD_EXPIRED, "OK", message);
  if (!n) {
    tpu_log_warn("audit log %s: out of memory for a payload_expired record: %s", a->path,
                 message);
    return;
  }
  if (a->htail) a->htail->next = n;
  else a->hhead = n;
  a->htail = n;
}

/* Payload rotation and retention, between batches. */
static void maintain_payloads(tpu_audit_t *a) {
  if (!a->ps || batch_pending(a)) return;
  a->last_maintain_us = tpu_now_us();
  tpu_pstore_maintain(a->ps, report_expired, a);
  payload_stats(a);
}

static void *writer_main(void *arg) {
  tpu_audit_t *a = arg;
  for (;;) {
    int stop, reopen, flush;
    take_queue(a, &stop, &reopen, &flush);
    a->want_rotate |= reopen;
    uint64_t now = tpu_now_us();
    int failed = atomic_load(&a->failed);
    if (failed && (now >= a->next_retry_us || stop)) {
      if (a->rebuild) {
        a->rebuild = 0;
        build_batch(a);
      }
      if (batch_pending(a) || a->lost_path) {
        if (commit(a) == 0 && !a->sync_failed) failed = 0;
      } else if (a->sync_failed) {
        if (sync_now(a) == 0) failed = 0;
      }
      if (!batch_pending(a) && !a->sync_failed && !a->lost_path && !a->rebuild)
        leave_failed(a), failed = 0;
    }
    if (!failed) {
      maintain_payloads(a);
      while ((a->hhead || atomic_load(&a->lost_unreported)) && !batch_pending(a)) {
        build_batch(a);
        if (commit(a) != 0) break;
      }
    }
    if (atomic_load(&a->failed)) {
      fire_pending(a);
    } else {
      if (a->want_rotate || (a->cfg.max_bytes && a->good_off >= a->cfg.max_bytes)) {
        int sighup = a->want_rotate;
        a->want_rotate = 0;
        rotate(a, sighup);
      }
      now = tpu_now_us();
      if (a->dirty && (flush || stop ||
                       (a->cfg.fsync == TPU_AUDIT_FSYNC_INTERVAL &&
                        now >= a->last_sync_us + (uint64_t)a->cfg.fsync_interval_ms * 1000u)))
        sync_now(a);
      if (a->head_path && a->disk_seq != a->head_seq &&
          (stop || now >= a->last_head_us + (uint64_t)a->cfg.head_interval_ms * 1000u))
        write_head(a);
    }
    if (flush && !a->dirty && !batch_pending(a)) {
      pthread_mutex_lock(&a->mu);
      a->flush_req = 0;
      pthread_mutex_unlock(&a->mu);
    }
    if (stop) {
      pthread_mutex_lock(&a->mu);
      int more = a->qhead != NULL;
      pthread_mutex_unlock(&a->mu);
      if (more) continue;
      if (!atomic_load(&a->failed) && !a->hhead && !batch_pending(a)) break;
      if (atomic_load(&a->failed)) {
        /* The final retry above failed: give up on what is left (every submitted record in
         * it counts as lost: the closing line and tpu_audit_shutdown report it). */
        size_t n = count_caller(a->bhead) + count_caller(a->hhead);
        atomic_fetch_add(&a->st_lost, n);
        if (a->bhead) finish_nodes(a->bhead, TPU_AUDIT_LOST);
        if (a->hhead) finish_nodes(a->hhead, TPU_AUDIT_LOST);
        a->bhead = a->btail = a->hhead = a->htail = NULL;
        a->bcount = 0;
        tpu_buf_clear(&a->batch);
        account(a, n, n + a->unsynced);
        a->unsynced = 0;
        if (a->cut_needed && ftruncate(a->fd, (off_t)a->good_off) == 0) a->cut_needed = 0;
        break;
      }
    }
  }
  return NULL;
}

/* ---- open: continue the chain ------------------------------------------------------------ */

/* The seq of the file's first line (what a gap record says was lost with the file if it is
 * deleted); `last` + 1 when the file holds no record, 1 when its first line has no seq. */
static uint64_t first_seq(tpu_audit_t *a, uint64_t last) {
  char buf[64];
  int rfd = open(a->path, O_RDONLY | O_CLOEXEC);
  ssize_t n = rfd >= 0 ? pread(rfd, buf, sizeof buf, 0) : -1;
  if (rfd >= 0) close(rfd);
  if (n <= 0 || last == 0) return last + 1;
  uint64_t s = tpu__audit_raw_seq(buf, (size_t)n);
  return s && s <= last ? s : 1;
}

/* Reads the tail of the log, finds its last record, and vouches for bytes after it. */
static int recover(tpu_audit_t *a, char *err, size_t errlen) {
  struct stat st;
  if (fstat(a->fd, &st) != 0) {
    snprintf(err, errlen, "audit log '%s': %s", a->path, strerror(errno));
    return -1;
  }
  a->dev = st.st_dev;
  a->ino = st.st_ino;
  uint64_t size = (uint64_t)st.st_size;
  a->good_off = size;
  memcpy(a->last_hash, TPU__AUDIT_ZERO_HASH, 65);
  a->file_first_seq = 1;
  if (size == 0) return 0;
  uint64_t wstart = size > TAIL_WINDOW ? size - TAIL_WINDOW : 0;
  size_t wlen = (size_t)(size - wstart);
  char *w = malloc(wlen);
  if (!w) {
    snprintf(err, errlen, "audit log '%s': out of memory reading its tail", a->path);
    return -1;
  }
  int rfd = open(a->path, O_RDONLY | O_CLOEXEC);
  ssize_t got = rfd >= 0 ? pread(rfd, w, wlen, (off_t)wstart) : -1;
  if (rfd >= 0) close(rfd);
  if (got != (ssize_t)wlen) {
    snprintf(err, errlen, "audit log '%s': cannot read its tail: %s", a->path,
             got < 0 ? strerror(errno) : "short read");
    free(w);
    return -1;
  }
  /* Walk complete lines backwards to the last valid record. */
  size_t tail_start = 0; /* offset in w where the unvouched bytes begin */
  int found = 0;
  size_t e = wlen;
  while (e > 0) {
    char *nl = memrchr(w, '\n', e);
    if (!nl) break;
    size_t end = (size_t)(nl - w); /* the line is [s, end) */
    char *pnl = end ? memrchr(w, '\n', end) : NULL;
    size_t s = pnl ? (size_t)(pnl - w) + 1 : 0;
    if (!pnl && wstart > 0) break; /* the line may start before the window */
    tpu__audit_line_t L;
    tpu__line_result_t r = tpu__audit_parse_line(w + s, end - s, a->key, a->keylen, &L);
    if (r == TPU__LINE_OK) {
      a->seq = a->disk_seq = L.seq;
      memcpy(a->last_hash, L.hash, 65);
      memcpy(a->disk_hash, L.hash, 65);
      tail_start = end + 1;
      found = 1;
      break;
    }
    if (r != TPU__LINE_MALFORMED) {
      snprintf(err, errlen,
               "audit log '%s': its last record (seq %" PRIu64 ") does not verify with the %s; "
               "wrong --audit-key, or the file was changed (run tpuctl audit verify)",
               a->path, L.seq, a->keylen ? "configured key" : "plain SHA-256 (no --audit-key)");
      free(w);
      return -1;
    }
    if (s == 0) break;
    e = s; /* the previous line ends at w[s - 1] */
  }
  if (!found && wstart > 0) {
    snprintf(err, errlen, "audit log '%s': no valid record in its last %u bytes", a->path,
             TAIL_WINDOW);
    free(w);
    return -1;
  }
  atomic_store(&a->st_seq, a->disk_seq);
  atomic_store(&a->st_synced_seq, a->disk_seq);
  a->head_seq = a->disk_seq;
  a->file_first_seq = first_seq(a, a->disk_seq);
  if (tail_start < wlen) {
    size_t n = wlen - tail_start;
    int terminated = w[wlen - 1] == '\n';
    char hex[65], msg[200];
    tpu__audit_mac(NULL, 0, w + tail_start, terminated ? n - 1 : n, hex);
    snprintf(msg, sizeof msg, TPU__AUDIT_TORN_FMT, terminated ? n - 1 : n, hex);
    tpu_log_warn("audit log %s: %zu bytes after seq %" PRIu64 " are not a record (a crash?): "
                 "kept, and vouched for by a \"recovered\" record",
                 a->path, terminated ? n - 1 : n, a->disk_seq);
    if (!terminated) tpu_buf_add(&a->batch, "\n", 1);
    tpu_audit_record_t r = {.kind = TPU_AUDIT_KIND_RECOVERED, .status = "DATA_LOSS",
                            .message = msg};
    emit(a, &a->batch, &r, NULL, NULL);
  }
  free(w);
  return 0;
}

/* A head file ahead of the log means the log lost records while we were down: say so. */
static void check_head(tpu_audit_t *a) {
  if (!a->head_path) return;
  json_error_t jerr;
  json_t *h = json_load_file(a->head_path, 0, &jerr);
  if (!h) return;
  json_t *seq = json_object_get(h, "seq");
  const char *hash = json_str(h, "hash");
  if (json_is_integer(seq) && (uint64_t)json_integer_value(seq) > a->seq) {
    char msg[400];
    snprintf(msg, sizeof msg,
             "head file %s says seq %" PRIu64 " hash %.64s, but the log ends at seq %" PRIu64
             ": the log was truncated or rolled back while the server was down",
             a->head_path, (uint64_t)json_integer_value(seq), hash ? hash : "?", a->seq);
    tpu_log_error("audit log %s: %s", a->path, msg);
    tpu_audit_record_t r = {.kind = TPU_AUDIT_KIND_ROLLBACK, .status = "DATA_LOSS",
                            .message = msg};
    emit(a, &a->batch, &r, NULL, NULL);
  }
  json_decref(h);
}

int tpu_audit_open(const tpu_audit_config_t *cfg, tpu_audit_t **out, char *err, size_t errlen) {
  *out = NULL;
  if (!cfg || !cfg->path || !*cfg->path) {
    snprintf(err, errlen, "audit log: no path given");
    return -1;
  }
  tpu_audit_t *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, errlen, "audit log: out of memory");
    return -1;
  }
  a->fd = -1;
  a->cfg = *cfg;
  if (!a->cfg.max_pending) a->cfg.max_pending = 65536;
  if (!a->cfg.retry_ms) a->cfg.retry_ms = 200;
  if (!a->cfg.head_interval_ms) a->cfg.head_interval_ms = 1000;
  a->path = strdup(cfg->path);
  if (!a->path) goto nomem;
  a->cfg.path = a->path;
  if (!cfg->head_path) {
    size_t n = strlen(cfg->path) + 6;
    a->head_path = malloc(n);
    if (!a->head_path) goto nomem;
    snprintf(a->head_path, n, "%s.head", cfg->path);
  } else if (*cfg->head_path) {
    a->head_path = strdup(cfg->head_path);
    if (!a->head_path) goto nomem;
  }
  a->cfg.head_path = a->head_path;
  a->cfg.key_path = NULL;
  if (cfg->key_path) {
    int n = tpu_audit_load_key(cfg->key_path, a->key, sizeof a->key, err, errlen);
    if (n < 0) goto fail;
    a->keylen = (size_t)n;
  }
  if (cfg->payload_dir) {
    char perr[600];
    if (tpu_pstore_open(cfg->payload_dir, cfg->payload_max_bytes, cfg->payload_max_age_s, &a->ps,
                        perr, sizeof perr) != 0) {
      snprintf(err, errlen, "payload store: %s", perr);
      goto fail;
    }
    if (cfg->payload_key) {
      a->pkey = *cfg->payload_key;
      a->has_pkey = 1;
    }
  }
  a->cfg.payload_dir = NULL;
  a->cfg.payload_key = NULL;
  pthread_mutex_init(&a->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&a->cv, &ca);
  pthread_cond_init(&a->settled_cv, &ca);
  pthread_condattr_destroy(&ca);

  a->fd = open(a->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (a->fd < 0) {
    snprintf(err, errlen, "audit log '%s': %s", a->path, strerror(errno));
    goto fail;
  }
  if (recover(a, err, errlen) != 0) goto fail;
  check_head(a);
  if (a->batch.oom) goto nomem;
  a->last_sync_us = a->last_head_us = tpu_now_us();
  if (batch_pending(a)) { /* recovered / rollback records: on disk before we serve */
    a->blast_seq = a->seq;
    memcpy(a->blast_hash, a->last_hash, 65);
    if (commit(a) != 0 || sync_now(a) != 0) {
      snprintf(err, errlen, "audit log '%s': cannot write: %s", a->path, strerror(errno));
      goto fail;
    }
    write_head(a);
  }
  a->check_path = 1; /* from now on each commit checks the file is still at path */
  if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
    snprintf(err, errlen, "audit log: cannot start the writer thread");
    goto fail;
  }
  a->started = 1;
  *out = a;
  return 0;
nomem:
  snprintf(err, errlen, "audit log: out of memory");
fail:
  if (a->fd >= 0) close(a->fd);
  tpu_pstore_close(a->ps);
  OPENSSL_cleanse(&a->pkey, sizeof a->pkey);
  tpu_buf_free(&a->batch);
  free(a->path);
  free(a->head_path);
  free(a);
  return -1;
}

/* ---- producers ----------------------------------------------------------------------------- */

static size_t cut_len(const char *s, size_t max) {
  if (!s) return 0;
  size_t n = strnlen(s, max);
  /* Don't cut inside a UTF-8 sequence. */
  if (n == max) while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
  return n;
}

static node_t *make_node(const tpu_audit_record_t *rec, tpu_audit_done_fn done, void *arg) {
  const char *src[F_COUNT] = {rec->kind,   rec->request_id, rec->client,
                              rec->model,  rec->version,    rec->input_sha256,
                              rec->output_sha256, rec->status, rec->message,
                              rec->checkpoint_sha256, rec->reference, rec->kernels,
                              rec->precision};
  size_t len[F_COUNT], total = 0;
  for (int i = 0; i < F_COUNT; i++) {
    len[i] = cut_len(src[i], i == F_MESSAGE ? MESSAGE_MAX : STR_MAX);
    total += len[i] + 1;
  }
  node_t *n = malloc(sizeof *n + total);
  if (!n) return NULL;
  n->next = NULL;
  n->done = done;
  n->arg = arg;
  n->seq = 0;
  n->fired = 0;
  n->internal = 0;
  n->rec = *rec;
  n->blob = rec->payload;
  n->rec.payload = NULL;
  const char **dst[F_COUNT] = {&n->rec.kind, &n->rec.request_id, &n->rec.client, &n->rec.model,
                               &n->rec.version, &n->rec.input_sha256, &n->rec.output_sha256,
                               &n->rec.status, &n->rec.message, &n->rec.checkpoint_sha256,
                               &n->rec.reference, &n->rec.kernels, &n->rec.precision};
  char *p = n->data;
  for (int i = 0; i < F_COUNT; i++) {
    memcpy(p, src[i] ? src[i] : "", len[i]);
    p[len[i]] = '\0';
    *dst[i] = p;
    p += len[i] + 1;
  }
  if (!src[F_KIND]) n->rec.kind = TPU_AUDIT_KIND_REQUEST;
  return n;
}

int tpu_audit_submit(tpu_audit_t *a, const tpu_audit_record_t *rec, tpu_audit_done_fn done,
                     void *arg) {
  node_t *n = make_node(rec, done, arg);
  if (!n) {
    free(rec->payload);
    atomic_fetch_add(&a->st_lost, 1);
    atomic_fetch_add(&a->lost_unreported, 1);
    return TPU_AUDIT_LOST;
  }

  pthread_mutex_lock(&a->mu);
  if (a->stop || a->nsubmitted - a->nretired >= a->cfg.max_pending) {
    pthread_mutex_unlock(&a->mu);
    node_free(n);
    atomic_fetch_add(&a->st_lost, 1);
    atomic_fetch_add(&a->lost_unreported, 1);
    return TPU_AUDIT_LOST;
  }
  int wake = a->qhead == NULL;
  if (a->qtail) a->qtail->next = n;
  else a->qhead = n;
  a->qtail = n;
  a->qlen++;
  a->nsubmitted++;
  atomic_store(&a->st_queued, a->nsubmitted - a->nretired);
  if (wake) pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
  return 0;
}

int tpu_audit_flush(tpu_audit_t *a, unsigned timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += timeout_ms / 1000u;
  ts.tv_nsec += (long)(timeout_ms % 1000u) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&a->mu);
  uint64_t target = a->nsubmitted;
  int rc = 0;
  while (a->nsettled < target && rc == 0) {
    a->flush_req = 1;
    pthread_cond_signal(&a->cv);
    rc = pthread_cond_timedwait(&a->settled_cv, &a->mu, &ts);
  }
  int ok = a->nsettled >= target;
  pthread_mutex_unlock(&a->mu);
  return ok ? 0 : -1;
}

void tpu_audit_reopen(tpu_audit_t *a) {
  pthread_mutex_lock(&a->mu);
  a->reopen = 1;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

int tpu_audit_healthy(const tpu_audit_t *a) { return !atomic_load(&a->failed); }

int tpu_audit_admit(const tpu_audit_t *a) {
  return a->cfg.fail_open || !atomic_load(&a->failed);
}

void tpu_audit_stats(const tpu_audit_t *a, tpu_audit_stats_t *out) {
  out->records_written = atomic_load(&a->st_written);
  out->records_lost = atomic_load(&a->st_lost);
  out->bytes_written = atomic_load(&a->st_bytes);
  out->fsyncs = atomic_load(&a->st_fsyncs);
  out->write_errors = atomic_load(&a->st_errors);
  out->rotations = atomic_load(&a->st_rotations);
  out->seq = atomic_load(&a->st_seq);
  out->synced_seq = atomic_load(&a->st_synced_seq);
  out->queued = atomic_load(&a->st_queued);
  out->files_deleted = atomic_load(&a->st_files_deleted);
  out->failed = atomic_load(&a->failed);
}

int tpu_audit_capturing(const tpu_audit_t *a) { return a && a->ps != NULL; }

int tpu_audit_capture(const tpu_audit_t *a, const char *model, const char *version, size_t rows,
                      const tpu_payload_tensor_t *in, size_t nin, const tpu_payload_tensor_t *out,
                      size_t nout, tpu_payload_blob_t **blob) {
  *blob = NULL;
  if (!a || !a->ps) return -1;
  return tpu_payload_build(a->has_pkey ? &a->pkey : NULL, model, version, rows, in, nin, out,
                           nout, blob);
}

void tpu_audit_payload_stats(const tpu_audit_t *a, tpu_pstore_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!a || !a->ps) return;
  out->entries = atomic_load(&a->st_p_entries);
  out->bytes = atomic_load(&a->st_p_bytes);
  out->files_deleted = atomic_load(&a->st_p_files_deleted);
  out->bytes_deleted = atomic_load(&a->st_p_bytes_deleted);
}

void tpu_audit__inject_error(tpu_audit_t *a, int err) {
  atomic_store(&a->inject, err);
  pthread_mutex_lock(&a->mu);
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

void tpu_audit__inject_oom(tpu_audit_t *a, int on) {
  atomic_store(&a->inject_oom, on);
  pthread_mutex_lock(&a->mu);
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

void tpu_audit_close(tpu_audit_t *a) { tpu_audit_shutdown(a, NULL); }

void tpu_audit_shutdown(tpu_audit_t *a, tpu_audit_stats_t *final) {
  if (!a) {
    if (final) memset(final, 0, sizeof *final);
    return;
  }
  if (a->started) {
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
  }
  if (final) tpu_audit_stats(a, final); /* after the writer gave up on what it could not write */
  if (a->fd >= 0) close(a->fd);
  tpu_pstore_close(a->ps);
  OPENSSL_cleanse(&a->pkey, sizeof a->pkey);
  pthread_mutex_destroy(&a->mu);
  pthread_cond_destroy(&a->cv);
  pthread_cond_destroy(&a->settled_cv);
  tpu_buf_free(&a->batch);
  free(a->path);
  free(a->head_path);
  free(a);
}
