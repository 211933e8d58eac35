/*
 * repository.h - the model repository manager: what is on disk under --models, which versions
 * serve, and the reference-counted table the I/O threads route requests with.
 *
 * DESIGN
 * Layout: <repo>/<model>/<version>/ where <version> is a positive integer without leading zeros
 * (other entries are ignored: files such as README.md or scripts at the top, hidden entries,
 * and non-numeric directories such as a "2.tmp" being copied). Each model may carry a version
 * policy in <repo>/<model>/policy.json:
 *     {"latest": N}          the N highest versions (N ≥ 1); the default is {"latest": 1}
 *     {"specific": [1, 3]}   exactly these versions
 *     {"all": true}          every version on disk
 * A bad policy file is logged and the previous policy kept. Versions whose last load failed and
 * whose files have not changed since do not count towards "latest N": with v2 serving and a
 * corrupt v3, "latest 1" keeps v2.
 *
 * Change detection: a version's signature hashes the name, inode, size, mtime and ctime of
 * every entry of its directory. A failed version is retried when the signature changes; a ready
 * version whose signature changes is loaded again as a new instance and swapped in (the old
 * one keeps serving if the new load fails). A load that failed for want of descriptors or
 * memory (tpu_file_transient) is retried at every scan, files changed or not.
 *
 * What cannot be read is never taken as removed: only a directory that is gone (ENOENT) retires
 * its versions. A model or version directory that exists but cannot be read (permissions,
 * descriptors exhausted, I/O errors) keeps its versions as they are, serving or not; a new one
 * is not loaded until it can be read. Each such problem, and each directory skipped for its
 * name (model names are 1-128 bytes of [A-Za-z0-9._-]), is logged once when it appears (names
 * escaped), and again only if it goes away and comes back.
 *
 * Threads: one repository thread scans (at start-up, on SIGHUP, every --poll-seconds, and
 * before a ModelLoad), loads (tpu_model_load: SHA-256 check, plans, warm-up of every bucket),
 * swaps, unloads and frees. It never runs on an I/O thread and I/O threads never wait for it:
 * ModelLoad/ModelUnload calls are queued to it and completed through the I/O thread's queue
 * like compute calls.
 *
 * The serving table (tpu__models_t) is an immutable, reference-counted snapshot: an array of
 * reference-counted tpu__model_t, sorted by name and version. READY versions appear as their
 * serving instance (with model and batcher); every other state as a status-only entry (model
 * NULL). The repository thread builds a new snapshot for every change and swaps the pointer
 * under `mu`; readers take a reference under the same mutex (a pointer read and an atomic
 * increment). Routing (tpu__server_find_model) takes a reference to one instance; an infer call
 * keeps it until the call is freed. An instance leaves the table when it is replaced,
 * unloaded or dropped by the policy; its batcher keeps running until its last reference goes,
 * so requests already routed to it complete (unloading the model, or a version with no other
 * to serve, instead fails what is queued with UNAVAILABLE; unloading one version loads its
 * replacement first). The last release hands the instance to the repository thread, which stops its
 * (then idle) batcher and frees it: I/O threads never join a thread or unmap a checkpoint.
 *
 * Lock rules: `mu` (repository.c) guards the table pointer, the queues of operations and of
 * instances to free, the list of live instances and the wake-up flags. It is never held while
 * scanning, loading, stopping a batcher or freeing. Everything else the repository knows
 * (states, signatures, policies) belongs to the repository thread alone.
 */
#ifndef TPU_REPOSITORY_H
#define TPU_REPOSITORY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"
#include "queue.h"

/* ---- the pure parts: policy, versions, scanning (unit-tested without a server) ---- */

typedef enum {
  TPU_REPO_POLICY_LATEST = 0,   /* the `latest` highest versions */
  TPU_REPO_POLICY_SPECIFIC = 1, /* the versions listed in `specific` */
  TPU_REPO_POLICY_ALL = 2       /* every version */
} tpu_repo_policy_kind_t;

#define TPU_REPO_MAX_SPECIFIC 64 /* versions a "specific" policy may list */

typedef struct {
  tpu_repo_policy_kind_t kind;
  unsigned latest;                          /* LATEST: how many, ≥ 1 */
  uint64_t specific[TPU_REPO_MAX_SPECIFIC]; /* SPECIFIC: ascending, no duplicates */
  size_t nspecific;
} tpu_repo_policy_t;

/* The default policy: {"latest": 1}. */
void tpu_repo_policy_default(tpu_repo_policy_t *p);

/* Parses a policy.json text (len bytes). Returns 0, or -1 with err saying what was wrong and
 * what was expected. */
int tpu_repo_policy_parse(const char *json, size_t len, tpu_repo_policy_t *out, char *err,
                          size_t errlen);

/* Writes the policy as JSON, e.g. {"latest": 1} or {"specific": [1, 3]}. */
void tpu_repo_policy_format(const tpu_repo_policy_t *p, char *buf, size_t len);

/* Picks the versions the policy serves among `cands` (n versions, ascending). Writes them
 * ascending to out (room for n) and returns how many. */
size_t tpu_repo_policy_select(const tpu_repo_policy_t *p, const uint64_t *cands, size_t n,
                              uint64_t *out);

/* Parses a version: a positive decimal integer without sign or leading zeros, at most 18
 * digits. Returns 0 or -1. */
int tpu_repo_parse_version(const char *s, uint64_t *out);

/* Whether `name` is a valid model name: 1 to TPU_REPO_MAX_NAME bytes of [A-Za-z0-9._-], not
 * starting with '.' (hidden entries are ignored without a word). */
int tpu_repo_valid_name(const char *name);

/* Signature of a version directory's files (see DESIGN) into *sig (never 0). Returns 0, or the
 * errno that kept the directory or one of its entries from being read: ENOENT/ENOTDIR when it
 * is gone, anything else (EACCES, EMFILE, EIO, ...) when it is there but unreadable. Any change
 * to an entry (added, removed, renamed over, rewritten, touched) changes the signature. */
int tpu_repo_dir_sig(const char *dir, uint64_t *sig);

#define TPU_REPO_MAX_NAME 128 /* bytes of a model name, NUL excluded */

typedef struct {
  uint64_t version;
  uint64_t sig; /* tpu_repo_dir_sig of its directory, never 0; unset when err */
  int err;      /* 0, or why the version directory could not be read (never ENOENT) */
} tpu_repo_vscan_t;

typedef struct {
  char name[TPU_REPO_MAX_NAME + 1];
  int err;             /* 0, or why the model directory could not be read: nothing below is
                        * known, and nothing about it may be taken as removed */
  tpu_repo_vscan_t *v; /* ascending by version */
  size_t nv;
  uint64_t policy_sig; /* 0: no policy.json; else changes whenever the file does */
  int policy_ok;       /* policy.json present and valid: `policy` holds it */
  int policy_unread;   /* policy.json may be there but could not be read: keep the current one */
  tpu_repo_policy_t policy;
  char policy_err[256]; /* policy.json present and invalid: why */
} tpu_repo_mscan_t;

/* Something the scan could not read or refused, in words for a log line (names escaped). */
typedef struct {
  char text[400];
} tpu_repo_problem_t;

typedef struct {
  tpu_repo_mscan_t *m; /* ascending by name */
  size_t n;
  tpu_repo_problem_t *problems; /* unreadable entries, refused names; in listing order */
  size_t nproblems;
} tpu_repo_scan_t;

/* Lists root: every directory with a valid name (tpu_repo_valid_name) that holds at least one
 * version directory is a model (so files and helper directories at the top are ignored), and
 * so is one that could not be read (err set: it may be a model). Directories with other names
 * are skipped and listed in `problems`, as are entries that could not be read. Returns 0, or -1
 * with err when root itself cannot be listed whole (out is then empty: the caller keeps what it
 * knew). Free with tpu_repo_scan_free. */
int tpu_repo_scan(const char *root, tpu_repo_scan_t *out, char *err, size_t errlen);
void tpu_repo_scan_free(tpu_repo_scan_t *s);

/* ---- the server's repository (server-internal; see server_int.h for tpu__model_t) ---- */

struct tpu_server;
struct tpu__call;
typedef struct tpu__model tpu__model_t;
typedef struct tpu__repo tpu__repo_t;

/* An immutable view of the model table; hold it with a reference. */
typedef struct tpu__models {
  _Atomic long refs;
  size_t n;
  tpu__model_t **models; /* sorted by name, then version; each holds a reference */
} tpu__models_t;

/* A ModelLoad or ModelUnload on its way through the repository thread: the thread does it,
 * writes the result, and calls `done` (its caller's continuation) there. */
typedef struct tpu__repo_op {
  tpu_qnode_t link;                  /* the repository thread's queue */
  void (*done)(struct tpu__repo_op *op); /* repository thread; must not block */
  void *user;                        /* the caller's */
  int load;                          /* 1: ModelLoad, 0: ModelUnload */
  char name[TPU_REPO_MAX_NAME + 1];
  uint64_t version;                  /* 0: every version (unload) / the policy's (load) */
  /* Result, written by the repository thread before the completion. */
  char versions[64][24];             /* load: versions now serving; unload: versions unloaded */
  char *version_ptrs[64];            /* points into versions, for the response message */
  size_t nversions;
  int code;                          /* TPU_CODE_* */
  char msg[512];                     /* why, when code is not OK */
} tpu__repo_op_t;

/* Creates the repository of srv (srv->cfg.models), scans it and loads what the policies ask
 * for, synchronously (start-up: tpud announces its ports only after this), then starts the
 * repository thread. Returns 0, or -1 with err on out of memory or a thread that won't start.
 * An unreadable repository is not an error: it is logged and rescanned later. */
int tpu__repo_create(struct tpu_server *srv, tpu__repo_t **out, char *err, size_t errlen);

/* Abandons model loads from now on (SIGTERM: the server is draining): a load in progress stops
 * at its next check (within a few milliseconds, or one warm-up run) and no new one starts;
 * ModelLoad calls then fail. The flag is srv->load_cancel, which a signal handler may also set
 * directly (during the start-up loads, before this handle exists). Accepts NULL. */
void tpu__repo_cancel_loads(tpu__repo_t *r);

/* Asks for a rescan now (SIGHUP); returns at once. Any thread. */
void tpu__repo_rescan(tpu__repo_t *r);

/* Queues a ModelLoad/ModelUnload; the repository thread does it and calls op->done. Returns 0,
 * or -1 when the repository is stopping (the op is then not queued, done not called). Any
 * thread. */
int tpu__repo_submit(tpu__repo_t *r, tpu__repo_op_t *op);

/* Stops the repository thread (pending operations complete with UNAVAILABLE), then stops the
 * batcher of every live instance, serving or draining (abort: fail what is queued). Idempotent;
 * accepts NULL. */
void tpu__repo_stop(tpu__repo_t *r, int abort);

/* Stops, then frees the table and every instance. All references must have been released (the
 * I/O threads are gone). Accepts NULL. */
void tpu__repo_free(tpu__repo_t *r);

/* Takes a reference to the current table (never NULL). Cheap: any thread, including I/O. */
tpu__models_t *tpu__models_acquire(struct tpu_server *srv);
/* Releases a table reference; accepts NULL. */
void tpu__models_release(tpu__models_t *t);
/* Releases a model reference (from tpu__server_find_model or a call);
 * accepts NULL. The last release of an instance hands it to the repository thread to free. */
void tpu__model_release(tpu__model_t *m);
/* Takes one more reference to m. */
void tpu__model_retain(tpu__model_t *m);

#endif /* TPU_REPOSITORY_H */
