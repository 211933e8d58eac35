/*
 * audit_verify.h - checks audit logs written by audit.c: sequence, chain, hashes, head file.
 *
 * DESIGN
 * Pure functions over files: read-only, no global state, no threads, streaming (one line in
 * memory at a time, so multi-gigabyte logs verify in constant memory). Files are given oldest
 * first (rotated files sort by name: <log>.<20-digit seq>..., then <log>). The log given must
 * start at seq 1: a first record that is a "rotate" record (a later file on its own) is a
 * MISSING fault unless opts.partial says the earlier files are elsewhere. Each next record is
 * seq + 1 with prev = the previous hash. Verification stops at the first fault and names it:
 * file, line, seq, and what is wrong. The record format and the canonical bytes are defined in
 * audit.h.
 *
 * GAPS. The only accepted break in the chain is a "gap" record (written by the server when it
 * found its file deleted while open) whose message begins "seq A..B are not in the log: ":
 * it must be seq B + 1 and come right after seq A - 1 (or be the first record, with A = 1),
 * and its prev (the hash of B) cannot be checked. Its range is counted in res->missing and,
 * like every record that states a loss ("gap", "lost", "rollback"), reported through
 * opts.warn: the log is whole as far as it says, and it says what it is missing.
 *
 * A torn last line (no newline at the end of the last file) is reported distinctly: it is what
 * kill -9 or a power cut leaves, and the only fault a crash can cause. Bytes that are not a
 * record followed by a "recovered" record that vouches for exactly those bytes (length and
 * SHA-256; written by tpu_audit_open when it finds a torn tail) are accepted and counted.
 */
#ifndef TPU_AUDIT_VERIFY_H
#define TPU_AUDIT_VERIFY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* What verification found (the first fault only). */
typedef enum {
  TPU_AUDIT_VERIFY_OK = 0,  /* every record checks out */
  TPU_AUDIT_FAULT_TORN,     /* the last line of the last file is incomplete (a crash) */
  TPU_AUDIT_FAULT_CHANGED,  /* a line is not a valid record, or its hash does not match */
  TPU_AUDIT_FAULT_FORGED,   /* keyed check: the hash is a plain SHA-256, not the HMAC */
  TPU_AUDIT_FAULT_MISSING,  /* seq jumps forward: records were removed */
  TPU_AUDIT_FAULT_REORDERED,/* seq goes backwards, or a later record comes first */
  TPU_AUDIT_FAULT_DUPLICATED,/* the same seq twice */
  TPU_AUDIT_FAULT_CHAIN,    /* seq follows but prev is not the previous hash: inserted/replaced */
  TPU_AUDIT_FAULT_ROLLBACK, /* the log ends before the head file's seq: cut or rolled back */
  TPU_AUDIT_FAULT_REWRITTEN,/* the record at the head file's seq has another hash */
  TPU_AUDIT_FAULT_HEAD,     /* the head file's seq is before the first record given */
  TPU_AUDIT_FAULT_IO        /* a file (log, key, head) could not be read */
} tpu_audit_fault_t;

/* A record that states a loss, or a note on what was not checked: file and line (0: none), the
 * record's seq (0: none), and the text. */
typedef void (*tpu_audit_warn_fn)(void *arg, const char *file, uint64_t line, uint64_t seq,
                                  const char *what);

typedef struct {
  const uint8_t *key;    /* HMAC key (tpu_audit_load_key); NULL = plain SHA-256 */
  size_t keylen;
  const char *head_path; /* head file to check the end of the log against; NULL = none */
  int partial;           /* the files are the end of a longer log: accept a first record that
                          * is a "rotate" (or "gap") record; first_seq says where it starts */
  tpu_audit_warn_fn warn; /* may be NULL */
  void *warn_arg;
} tpu_audit_verify_opts_t;

typedef struct {
  tpu_audit_fault_t fault;
  uint64_t records;         /* valid records read (before the fault) */
  uint64_t first_seq, last_seq;
  char last_hash[65];       /* the head of the chain: hash of last_seq */
  uint64_t recovered;       /* torn tails vouched for by "recovered" records */
  uint64_t missing;         /* seqs in [first_seq, last_seq] vouched missing by gap records:
                             * records + missing = last_seq - first_seq + 1 */
  uint64_t gaps;            /* gap records accepted */
  uint64_t losses;          /* records that state a loss (gap, lost, rollback) */
  uint64_t head_seq;        /* the head file's seq when one was checked */
  int head_in_gap;          /* ... and it is in a gap, so its hash could not be compared */
  /* Where the fault is (fault != OK): */
  char file[1024];
  uint64_t line;            /* 1-based line number in file */
  uint64_t seq;             /* the bad record's seq; 0 when it cannot be read */
  char what[768];           /* what is wrong, in words */
} tpu_audit_verify_result_t;

/* Verifies files[0..nfiles) as one log, oldest first. Returns res->fault. */
tpu_audit_fault_t tpu_audit_verify(const char *const *files, size_t nfiles,
                                   const tpu_audit_verify_opts_t *opts,
                                   tpu_audit_verify_result_t *res);

/* "ok", "torn", "changed", "forged", "missing", "reordered", "duplicated", "chain",
 * "rolled back", "rewritten", "head", "io". */
const char *tpu_audit_fault_name(tpu_audit_fault_t f);

/* `tpuctl audit verify [--key FILE] [--head FILE] [--allow-torn] [--partial] [--strict] FILE...`:
 * argv[0] is the subcommand name ("verify"), options follow. Prints one "WARNING: ..." line per
 * record that states a loss (at most 20, then a count), then the verdict to out ("OK: ..." or
 * "FAULT: ..."/"TORN: ..."), usage errors to err. Returns the exit status: 0 OK (or only a torn
 * tail with --allow-torn), 1 a fault, 2 usage error or an unreadable file, 3 with --strict when
 * the chain is intact but states a loss. tpuctl calls it as
 *   if (argc > 2 && !strcmp(argv[1], "audit") && !strcmp(argv[2], "verify"))
 *     return tpu_audit_verify_cli(argc - 2, argv + 2, stdout, stderr); */
int tpu_audit_verify_cli(int argc, char **argv, FILE *out, FILE *err);

#endif /* TPU_AUDIT_VERIFY_H */
