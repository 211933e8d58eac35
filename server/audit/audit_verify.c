/*
 * audit_verify.c - the audit log verifier and the `tpuctl audit verify` command.
 *
 * DESIGN
 * One pass over the files with getline(): each line is parsed and its hash recomputed with the
 * same tpu__audit_parse_line the writer's recovery uses (audit.c), then checked against the
 * previous record (seq + 1, prev = previous hash). A gap is told apart from a swap by peeking at
 * the next line. Lines that are not records start a "region" that must be closed by a
 * "recovered" record vouching for exactly its bytes, else the first of them is the fault.
 * A "gap" record is the one accepted break of the chain (audit_verify.h GAPS); records that
 * state a loss go to opts.warn as they are met.
 * Never writes anything; never allocates more than the longest line.
 */
#define _GNU_SOURCE /* getline */
#include "audit_verify.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "audit_int.h"
#include "tpu_text.h"

static const char *const fault_names[] = {"ok",        "torn",       "changed",    "forged",
                                          "missing",   "reordered",  "duplicated", "chain",
                                          "rolled back", "rewritten", "head",      "io"};

const char *tpu_audit_fault_name(tpu_audit_fault_t f) {
  return (unsigned)f < sizeof fault_names / sizeof fault_names[0] ? fault_names[f] : "unknown";
}

typedef struct {
  const tpu_audit_verify_opts_t *o;
  tpu_audit_verify_result_t *res;
  int have_last;
  int have_head;
  uint64_t head_seq;
  char head_hash[65];
  int head_in_gap; /* the head file's seq fell in a gap: its hash was not checked */
  /* The open region of non-record lines. */
  int region;
  const char *rfile;
  uint64_t rline, rseq, rlen;
  char rwhy[256];
  EVP_MD_CTX *rctx;
} vstate_t;

static tpu_audit_fault_t fault(vstate_t *v, tpu_audit_fault_t f, const char *file, uint64_t line,
                               uint64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static tpu_audit_fault_t fault(vstate_t *v, tpu_audit_fault_t f, const char *file, uint64_t line,
                               uint64_t seq, const char *fmt, ...) {
  tpu_audit_verify_result_t *r = v->res;
  r->fault = f;
  snprintf(r->file, sizeof r->file, "%s", file ? file : "");
  r->line = line;
  r->seq = seq;
  va_list ap;
  va_start(ap, fmt);
  tpu_verrf(r->what, sizeof r->what, fmt, ap);
  va_end(ap);
  return f;
}

static void note(vstate_t *v, const char *file, uint64_t line, uint64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void note(vstate_t *v, const char *file, uint64_t line, uint64_t seq, const char *fmt, ...) {
  if (!v->o->warn) return;
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  tpu_verrf(what, sizeof what, fmt, ap);
  va_end(ap);
  v->o->warn(v->o->warn_arg, file, line, seq, what);
}

static void region_add(vstate_t *v, const char *file, uint64_t line, const char *s, size_t n,
                       const char *why) {
  if (!v->region) {
    v->region = 1;
    v->rfile = file;
    v->rline = line;
    v->rseq = tpu__audit_raw_seq(s, n);
    v->rlen = 0;
    snprintf(v->rwhy, sizeof v->rwhy, "%s", why);
    EVP_DigestInit_ex(v->rctx, EVP_sha256(), NULL);
  } else {
    EVP_DigestUpdate(v->rctx, "\n", 1);
    v->rlen++;
  }
  EVP_DigestUpdate(v->rctx, s, n);
  v->rlen += n;
}

static tpu_audit_fault_t region_fault(vstate_t *v) {
  tpu_audit_verify_result_t *r = v->res;
  if (v->rseq)
    return fault(v, TPU_AUDIT_FAULT_CHANGED, v->rfile, v->rline, v->rseq,
                 "changed: seq %" PRIu64 " is not a valid record (%s)", v->rseq, v->rwhy);
  if (v->have_last)
    return fault(v, TPU_AUDIT_FAULT_CHANGED, v->rfile, v->rline, 0,
                 "changed: the line after seq %" PRIu64 " is not a valid record (%s)",
                 r->last_seq, v->rwhy);
  return fault(v, TPU_AUDIT_FAULT_CHANGED, v->rfile, v->rline, 0,
               "changed: the first line is not a valid record (%s)", v->rwhy);
}

/* Does a "recovered" record vouch for the open region? */
static int region_vouched(vstate_t *v, const tpu__audit_line_t *L) {
  if (strcmp(L->kind, TPU_AUDIT_KIND_RECOVERED) != 0) return 0;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  if (!c) return 0;
  EVP_MD_CTX_copy_ex(c, v->rctx);
  EVP_DigestFinal_ex(c, md, &mdlen);
  EVP_MD_CTX_free(c);
  char hex[65];
  for (unsigned i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  char want[200];
  snprintf(want, sizeof want, TPU__AUDIT_TORN_FMT, (size_t)v->rlen, hex);
  return strcmp(want, L->message) == 0;
}

static int read_head(vstate_t *v, const char *path) {
  json_error_t jerr;
  json_t *h = json_load_file(path, 0, &jerr);
  json_t *seq = h ? json_object_get(h, "seq") : NULL;
  json_t *hash = h ? json_object_get(h, "hash") : NULL;
  if (!json_is_integer(seq) || json_integer_value(seq) <= 0 || !json_is_string(hash) ||
      strlen(json_string_value(hash)) != 64) {
    fault(v, TPU_AUDIT_FAULT_IO, path, 0, 0,
          "head file: %s", h ? "expected {\"seq\":N,\"hash\":\"<64 hex>\",...}" : jerr.text);
    json_decref(h);
    return -1;
  }
  v->have_head = 1;
  v->head_seq = (uint64_t)json_integer_value(seq);
  memcpy(v->head_hash, json_string_value(hash), 65);
  v->res->head_seq = v->head_seq;
  json_decref(h);
  return 0;
}

/* A gap record's range A..B when it is well formed (B = its seq - 1). */
static int gap_of(const tpu__audit_line_t *L, uint64_t *first, uint64_t *last) {
  return strcmp(L->kind, TPU_AUDIT_KIND_GAP) == 0 &&
         tpu__audit_gap_range(L->message, first, last) && *last + 1 == L->seq;
}

/* A gap accepted: seq from..L->seq-1 are vouched missing. */
static void take_gap(vstate_t *v, const tpu__audit_line_t *L, uint64_t from) {
  v->res->missing += L->seq - from;
  v->res->gaps++;
  if (v->have_head && v->head_seq >= from && v->head_seq < L->seq) v->head_in_gap = 1;
}

/* Checks one valid record against the chain; returns OK or the fault. */
static tpu_audit_fault_t check_record(vstate_t *v, const tpu__audit_line_t *L, const char *file,
                                      uint64_t lineno, FILE *f) {
  tpu_audit_verify_result_t *r = v->res;
  uint64_t gfirst = 0, glast = 0;
  int gap = gap_of(L, &gfirst, &glast);
  int present = 0; /* a gap record whose records are there after all */
  if (v->have_last) {
    uint64_t want = r->last_seq + 1;
    if (L->seq == want) {
      if (strcmp(L->prev, r->last_hash) != 0)
        return fault(v, TPU_AUDIT_FAULT_CHAIN, file, lineno, L->seq,
                     "chain broken: prev of seq %" PRIu64 " is not the hash of seq %" PRIu64
                     " (a record was inserted or replaced)",
                     L->seq, r->last_seq);
      present = gap;
    } else if (L->seq == r->last_seq) {
      return fault(v, TPU_AUDIT_FAULT_DUPLICATED, file, lineno, L->seq,
                   "duplicated: seq %" PRIu64 " appears twice%s", L->seq,
                   strcmp(L->hash, r->last_hash) == 0 ? " (an exact copy)" : "");
    } else if (L->seq < r->last_seq) {
      return fault(v, TPU_AUDIT_FAULT_REORDERED, file, lineno, L->seq,
                   "reordered: seq %" PRIu64 " comes after seq %" PRIu64, L->seq, r->last_seq);
    } else if (gap && gfirst <= want) {
      take_gap(v, L, want); /* the log says what is missing, and why */
    } else {
      /* A gap: is the missing record just after this one (a swap)? */
      char *peek = NULL;
      size_t cap = 0;
      ssize_t n = f ? getline(&peek, &cap, f) : -1;
      uint64_t next = n > 0 ? tpu__audit_raw_seq(peek, (size_t)n) : 0;
      free(peek);
      if (next == want)
        return fault(v, TPU_AUDIT_FAULT_REORDERED, file, lineno, L->seq,
                     "reordered: seq %" PRIu64 " comes before seq %" PRIu64, L->seq, want);
      if (gap) /* a gap record, but its range starts after the records that are missing */
        return fault(v, TPU_AUDIT_FAULT_MISSING, file, lineno, L->seq,
                     "missing: seq %" PRIu64 "..%" PRIu64 " are not there; the gap record at seq "
                     "%" PRIu64 " accounts only for seq %" PRIu64 "..%" PRIu64,
                     want, gfirst - 1, L->seq, gfirst, glast);
      if (L->seq - want == 1)
        return fault(v, TPU_AUDIT_FAULT_MISSING, file, lineno, L->seq,
                     "missing: seq %" PRIu64 " is not there (1 record removed before seq %" PRIu64
                     ")", want, L->seq);
      return fault(v, TPU_AUDIT_FAULT_MISSING, file, lineno, L->seq,
                   "missing: seq %" PRIu64 "..%" PRIu64 " are not there (%" PRIu64
                   " records removed before seq %" PRIu64 ")",
                   want, L->seq - 1, L->seq - want, L->seq);
    }
  } else {
    int genesis = strcmp(L->prev, TPU__AUDIT_ZERO_HASH) == 0;
    if ((L->seq == 1) != genesis)
      return fault(v, TPU_AUDIT_FAULT_CHAIN, file, lineno, L->seq,
                   "chain broken: seq %" PRIu64 " %s", L->seq,
                   genesis ? "claims to be the first record (zero prev)"
                           : "is seq 1 but its prev is not zero");
    /* A log starts at seq 1, or with a gap record for seq 1..B. A later file on its own starts
     * with a rotate record (or a gap record for A..B): the records before it are elsewhere, so
     * that is a fault unless the caller says the files are only the end of the log. */
    uint64_t start = L->seq;
    if (gap && gfirst == 1) {
      start = 1;
      take_gap(v, L, 1);
    } else if (L->seq != 1 && (gap || strcmp(L->kind, TPU_AUDIT_KIND_ROTATE) == 0)) {
      start = gap ? gfirst : L->seq;
      if (!v->o->partial)
        return fault(v, TPU_AUDIT_FAULT_MISSING, file, lineno, L->seq,
                     "missing: the log given starts at seq %" PRIu64 " (%s record: %.200s); "
                     "seq 1..%" PRIu64 " are not in the files given: pass the earlier files "
                     "too, oldest first (or --partial to check only these)",
                     L->seq, L->kind, L->message, start - 1);
      if (gap) take_gap(v, L, gfirst);
      note(v, file, lineno, L->seq,
           "seq 1..%" PRIu64 " are not in the files given (--partial): not checked", start - 1);
    } else if (L->seq != 1) {
      return fault(v, TPU_AUDIT_FAULT_MISSING, file, lineno, L->seq,
                   "missing: the first record is seq %" PRIu64 " (%s), neither seq 1 nor the "
                   "rotate record a file starts with: records before it were removed",
                   L->seq, L->kind);
    }
    r->first_seq = start;
  }
  if (v->have_head && L->seq == v->head_seq && strcmp(L->hash, v->head_hash) != 0)
    return fault(v, TPU_AUDIT_FAULT_REWRITTEN, file, lineno, L->seq,
                 "rewritten: seq %" PRIu64 " has hash %.12s..., the head file says %.12s...: "
                 "the log from here on was rewritten",
                 L->seq, L->hash, v->head_hash);
  if (gap || strcmp(L->kind, TPU_AUDIT_KIND_LOST) == 0 ||
      strcmp(L->kind, TPU_AUDIT_KIND_ROLLBACK) == 0) {
    r->losses++;
    note(v, file, lineno, L->seq, "%s: %s%s", L->kind, L->message,
         present ? " (but they are in the files given, and the chain holds)" : "");
  }
  v->have_last = 1;
  r->last_seq = L->seq;
  memcpy(r->last_hash, L->hash, 65);
  r->records++;
  return TPU_AUDIT_VERIFY_OK;
}

static tpu_audit_fault_t verify_file(vstate_t *v, const char *file, int is_last) {
  FILE *f = fopen(file, "rb");
  if (!f) return fault(v, TPU_AUDIT_FAULT_IO, file, 0, 0, "cannot open: %s", strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t got;
  uint64_t lineno = 0;
  tpu_audit_fault_t rc = TPU_AUDIT_VERIFY_OK;
  while (rc == TPU_AUDIT_VERIFY_OK && (got = getline(&line, &cap, f)) > 0) {
    size_t n = (size_t)got;
    lineno++;
    if (line[n - 1] != '\n') { /* only the end of a file */
      uint64_t raw = tpu__audit_raw_seq(line, n);
      if (v->region) {
        rc = region_fault(v);
      } else if (is_last) {
        rc = fault(v, TPU_AUDIT_FAULT_TORN, file, lineno, raw,
                   "torn: the last line (%zu bytes%s) has no newline: the log was cut "
                   "mid-write, as a crash does; %" PRIu64 " records before it verify",
                   n, raw ? ", a partial record" : "", v->res->records);
      } else {
        rc = fault(v, TPU_AUDIT_FAULT_CHANGED, file, lineno, raw,
                   "changed: the file ends in an incomplete line (%zu bytes) but is not the "
                   "last file",
                   n);
      }
      break;
    }
    n--;
    tpu__audit_line_t L;
    tpu__line_result_t lr =
        tpu__audit_parse_line(line, n, v->o->key, v->o->keylen, &L);
    if (lr == TPU__LINE_MALFORMED) {
      region_add(v, file, lineno, line, n, L.why);
      continue;
    }
    if (v->region) {
      if (lr != TPU__LINE_OK || !region_vouched(v, &L)) {
        rc = region_fault(v);
        break;
      }
      v->region = 0;
      v->res->recovered++;
    }
    if (lr == TPU__LINE_MISMATCH) {
      rc = fault(v, TPU_AUDIT_FAULT_CHANGED, file, lineno, L.seq,
                 "changed: the hash of seq %" PRIu64 " does not match its contents%s", L.seq,
                 v->o->keylen ? " (or the key is wrong)"
                              : " (or the log is keyed: pass --key)");
      break;
    }
    if (lr == TPU__LINE_FORGED) {
      rc = fault(v, TPU_AUDIT_FAULT_FORGED, file, lineno, L.seq,
                 "forged: seq %" PRIu64 " carries a plain SHA-256, not the HMAC with this key",
                 L.seq);
      break;
    }
    rc = check_record(v, &L, file, lineno, f);
  }
  if (rc == TPU_AUDIT_VERIFY_OK && ferror(f))
    rc = fault(v, TPU_AUDIT_FAULT_IO, file, lineno + 1, 0, "read error");
  if (rc == TPU_AUDIT_VERIFY_OK && v->region) rc = region_fault(v);
  free(line);
  fclose(f);
  return rc;
}

tpu_audit_fault_t tpu_audit_verify(const char *const *files, size_t nfiles,
                                   const tpu_audit_verify_opts_t *opts,
                                   tpu_audit_verify_result_t *res) {
  static const tpu_audit_verify_opts_t none = {0};
  memset(res, 0, sizeof *res);
  vstate_t v = {.o = opts ? opts : &none, .res = res};
  if (v.o->head_path && read_head(&v, v.o->head_path) != 0) return res->fault;
  v.rctx = EVP_MD_CTX_new();
  if (!v.rctx) return fault(&v, TPU_AUDIT_FAULT_IO, "", 0, 0, "out of memory");
  tpu_audit_fault_t rc = TPU_AUDIT_VERIFY_OK;
  for (size_t i = 0; i < nfiles && rc == TPU_AUDIT_VERIFY_OK; i++)
    rc = verify_file(&v, files[i], i + 1 == nfiles);
  EVP_MD_CTX_free(v.rctx);
  if (rc != TPU_AUDIT_VERIFY_OK || !v.have_head) return rc;
  const char *lastf = nfiles ? files[nfiles - 1] : "";
  if (!v.have_last || v.head_seq > res->last_seq)
    return fault(&v, TPU_AUDIT_FAULT_ROLLBACK, lastf, 0, res->last_seq + 1,
                 "rolled back: the log ends at seq %" PRIu64 " but the head file says seq %" PRIu64
                 ": %" PRIu64 " records at the end were cut off, or an older copy was restored",
                 res->last_seq, v.head_seq, v.head_seq - res->last_seq);
  if (v.head_seq < res->first_seq)
    return fault(&v, TPU_AUDIT_FAULT_HEAD, lastf, 0, 0,
                 "head file seq %" PRIu64 " is before the first record given (seq %" PRIu64
                 "): pass the older files too",
                 v.head_seq, res->first_seq);
  res->head_in_gap = v.head_in_gap;
  if (v.head_in_gap)
    note(&v, v.o->head_path, 0, v.head_seq,
         "the head file's seq %" PRIu64 " is in a gap: its hash could not be checked",
         v.head_seq);
  return TPU_AUDIT_VERIFY_OK;
}

/* ---- tpuctl audit verify ---------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpuctl audit verify [--key FILE] [--head FILE] [--allow-torn] [--partial] "
          "[--strict] FILE...\n"
          "\n"
          "Checks an audit log: sequence, hash chain and each record's hash. Give rotated\n"
          "files oldest first (e.g. audit.log.0* audit.log).\n"
          "\n"
          "  --key FILE     HMAC key the log was written with (tpud --audit-key)\n"
          "  --head FILE    head file (tpud --audit-head, a copy kept elsewhere): detects a log\n"
          "                 that was cut at the end, rewritten, or restored from an older copy\n"
          "  --allow-torn   exit 0 when the only fault is a torn last line (after a crash)\n"
          "  --partial      the files are only the end of the log (earlier files archived\n"
          "                 elsewhere): accept a first file that starts at a rotate or gap\n"
          "                 record instead of seq 1; the verdict says where it starts\n"
          "  --strict       exit 3 when the chain is intact but states missing records (gap,\n"
          "                 lost or rollback records): for scripts that need a complete log\n"
          "  -h, --help     this text\n"
          "\n"
          "The log must start at seq 1 and each record follow the one before it. The only\n"
          "break accepted is a gap record (the server found its file deleted and says which\n"
          "seqs went with it); each record that states a loss (gap, lost, rollback) is printed\n"
          "as a WARNING line. Prints OK with the record count and the chain head, or the first\n"
          "bad record (file, line, seq) and what is wrong with it. Exit status: 0 OK, 1 fault,\n"
          "2 usage or an unreadable file, 3 (--strict only) OK but records state a loss.\n");
}

#define CLI_WARN_MAX 20 /* WARNING lines printed; the rest are counted */

typedef struct {
  FILE *out;
  uint64_t n;
} cli_warn_t;

static void cli_warn(void *arg, const char *file, uint64_t line, uint64_t seq, const char *what) {
  cli_warn_t *w = arg;
  (void)seq;
  if (++w->n > CLI_WARN_MAX) return;
  if (line) fprintf(w->out, "WARNING: %s line %" PRIu64 ": %s\n", file, line, what);
  else fprintf(w->out, "WARNING: %s\n", what);
}

int tpu_audit_verify_cli(int argc, char **argv, FILE *out, FILE *err) {
  const char *key_path = NULL, *head_path = NULL;
  int allow_torn = 0, partial = 0, strict = 0, i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = NULL;
    const char *name = NULL;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(out);
      return 0;
    }
    if (strcmp(a, "--allow-torn") == 0) {
      allow_torn = 1;
      continue;
    }
    if (strcmp(a, "--partial") == 0) {
      partial = 1;
      continue;
    }
    if (strcmp(a, "--strict") == 0) {
      strict = 1;
      continue;
    }
    if (strncmp(a, "--key", 5) == 0 && (a[5] == '\0' || a[5] == '=')) dst = &key_path, name = "--key";
    else if (strncmp(a, "--head", 6) == 0 && (a[6] == '\0' || a[6] == '='))
      dst = &head_path, name = "--head";
    if (dst) {
      const char *eq = strchr(a, '=');
      if (eq) *dst = eq + 1;
      else if (i + 1 < argc) *dst = argv[++i];
      else {
        fprintf(err, "tpuctl audit verify: %s needs a FILE argument\n", name);
        return 2;
      }
      if (!**dst) {
        fprintf(err, "tpuctl audit verify: %s needs a non-empty FILE\n", name);
        return 2;
      }
      continue;
    }
    if (a[0] == '-' && a[1] != '\0') {
      fprintf(err, "tpuctl audit verify: unknown option '%s' (try --help)\n", a);
      return 2;
    }
    break;
  }
  if (i >= argc) {
    fprintf(err, "tpuctl audit verify: no log FILE given\n");
    usage(err);
    return 2;
  }
  uint8_t key[TPU__AUDIT_KEY_MAX];
  int keylen = 0;
  if (key_path) {
    char msg[512];
    keylen = tpu_audit_load_key(key_path, key, sizeof key, msg, sizeof msg);
    if (keylen < 0) {
      fprintf(err, "tpuctl audit verify: %s\n", msg);
      return 2;
    }
  }
  cli_warn_t w = {.out = out};
  tpu_audit_verify_opts_t o = {.key = keylen ? key : NULL, .keylen = (size_t)keylen,
                               .head_path = head_path, .partial = partial, .warn = cli_warn,
                               .warn_arg = &w};
  tpu_audit_verify_result_t *r = malloc(sizeof *r);
  if (!r) {
    fprintf(err, "tpuctl audit verify: out of memory\n");
    return 2;
  }
  size_t nfiles = (size_t)(argc - i);
  tpu_audit_fault_t f = tpu_audit_verify((const char *const *)argv + i, nfiles, &o, r);
  if (w.n > CLI_WARN_MAX)
    fprintf(out, "WARNING: ... and %" PRIu64 " more warnings (%" PRIu64 " in all)\n",
            w.n - CLI_WARN_MAX, w.n);
  int rc;
  char where[1200] = "";
  if (f != TPU_AUDIT_VERIFY_OK && r->line)
    snprintf(where, sizeof where, "%s line %" PRIu64 ": ", r->file, r->line);
  else if (f != TPU_AUDIT_VERIFY_OK && r->file[0])
    snprintf(where, sizeof where, "%s: ", r->file);
  if (f == TPU_AUDIT_FAULT_IO) {
    fprintf(err, "tpuctl audit verify: %s%s\n", where, r->what);
    rc = 2;
  } else if (f == TPU_AUDIT_VERIFY_OK || (f == TPU_AUDIT_FAULT_TORN && allow_torn)) {
    if (f == TPU_AUDIT_FAULT_TORN) fprintf(out, "TORN (allowed): %s%s\n", where, r->what);
    fprintf(out, "OK: %" PRIu64 " records", r->records);
    if (r->records)
      fprintf(out, ", seq %" PRIu64 "..%" PRIu64 ", head seq %" PRIu64 " hash %s", r->first_seq,
              r->last_seq, r->last_seq, r->last_hash);
    fprintf(out, " (%zu file%s%s", nfiles, nfiles == 1 ? "" : "s", keylen ? ", HMAC" : "");
    if (head_path && r->head_in_gap)
      fprintf(out, ", head file seq %" PRIu64 " is in a gap (not compared)", r->head_seq);
    else if (head_path)
      fprintf(out, ", matches head file at seq %" PRIu64, r->head_seq);
    if (r->records && r->first_seq > 1)
      fprintf(out, ", starts at seq %" PRIu64 " (--partial: earlier files not checked)",
              r->first_seq);
    if (r->gaps)
      fprintf(out, ", %" PRIu64 " record%s missing as %" PRIu64 " gap record%s say%s", r->missing,
              r->missing == 1 ? "" : "s", r->gaps, r->gaps == 1 ? "" : "s",
              r->gaps == 1 ? "s" : "");
    if (r->losses)
      fprintf(out, ", %" PRIu64 " record%s stating a loss (WARNING above)", r->losses,
              r->losses == 1 ? "" : "s");
    if (r->recovered)
      fprintf(out, ", %" PRIu64 " torn tail%s vouched for by recovered records", r->recovered,
              r->recovered == 1 ? "" : "s");
    fprintf(out, ")\n");
    rc = 0;
    if (strict && r->losses) { /* intact, but it says it is not complete */
      fprintf(out, "INCOMPLETE (--strict): %" PRIu64 " record%s state%s that records are "
              "missing or were not written\n", r->losses, r->losses == 1 ? "" : "s",
              r->losses == 1 ? "s" : "");
      rc = 3;
    }
  } else {
    fprintf(out, "%s: %s%s\n", f == TPU_AUDIT_FAULT_TORN ? "TORN" : "FAULT", where, r->what);
    rc = 1;
  }
  free(r);
  return rc;
}
