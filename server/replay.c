/*
 * replay.c - `tpuctl audit replay` (replay.h): audit records and their payloads, recomputed
 * offline on the repository's model versions.
 */
#define _GNU_SOURCE
#include "replay.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "audit_int.h"
#include "log.h"
#include "model.h"
#include "payload.h"
#include "tpu_engine.h"

typedef struct {
  char kernels[32];
  tpu_engine_t *engine; /* NULL: this CPU cannot run it (why) */
  char why[200];
} engine_slot_t;

typedef struct {
  char model[256], version[32], kernels[32];
  tpu_model_t *m; /* NULL: it did not load (why) */
  char why[5400];
} model_slot_t;

typedef struct {
  const char *repo, *pdir, *server;
  tpu_replay_remote_t remote;
  tpu_payload_key_t pkey;
  int has_pkey;
  uint8_t key[TPU__AUDIT_KEY_MAX];
  size_t keylen;
  uint64_t seq_lo, seq_hi; /* 0, 0: all */
  const char *request_id;
  int quiet;
  engine_slot_t *engines;
  size_t nengines;
  model_slot_t *models;
  size_t nmodels;
  uint64_t reproduced, mismatched, unreplayable, skipped, selected;

  FILE *out, *err;
} replay_t;

static engine_slot_t *engine_for(replay_t *r, const char *kernels) {
  for (size_t i = 0; i < r->nengines; i++)
    if (strcmp(r->engines[i].kernels, kernels) == 0) return &r->engines[i];
  engine_slot_t *n = realloc(r->engines, (r->nengines + 1) * sizeof *n);
  if (!n) return NULL;
  r->engines = n;
  engine_slot_t *e = &n[r->nengines++];
  memset(e, 0, sizeof *e);
  snprintf(e->kernels, sizeof e->kernels, "%s", kernels);
  /* The record's kernel set, by name (as TPUD_ISA forces it for tpud). */
  const char *old = getenv("TPUD_ISA");
  char *saved = old ? strdup(old) : NULL;
  setenv("TPUD_ISA", kernels, 1);
  tpu_engine_config_t cfg = {.threads = 1};
  tpu_status_t st = tpu_engine_create(&cfg, &e->engine);
  if (saved) setenv("TPUD_ISA", saved, 1);
  else unsetenv("TPUD_ISA");
  free(saved);
  if (st != TPU_OK) {
    e->engine = NULL;
    snprintf(e->why, sizeof e->why, "the record was computed with kernel set \"%s\", which %s",
             kernels, st == TPU_ENOTSUP ? "this CPU cannot run" : "this build does not have");
  }
  return e;
}

static model_slot_t *model_for(replay_t *r, const char *model, const char *version,
                               engine_slot_t *e) {
  for (size_t i = 0; i < r->nmodels; i++)
    if (strcmp(r->models[i].model, model) == 0 && strcmp(r->models[i].version, version) == 0 &&
        strcmp(r->models[i].kernels, e->kernels) == 0)
      return &r->models[i];
  model_slot_t *n = realloc(r->models, (r->nmodels + 1) * sizeof *n);
  if (!n) return NULL;
  r->models = n;
  model_slot_t *s = &n[r->nmodels++];
  memset(s, 0, sizeof *s);
  snprintf(s->model, sizeof s->model, "%s", model);
  snprintf(s->version, sizeof s->version, "%s", version);
  snprintf(s->kernels, sizeof s->kernels, "%s", e->kernels);
  char *end;
  errno = 0;
  unsigned long long v = strtoull(version, &end, 10);
  if (!*version || *end || errno || strchr(model, '/') || model[0] == '.' || !model[0]) {
    snprintf(s->why, sizeof s->why, "the record names model \"%s\" version \"%s\", which is "
             "not a repository path", model, version);
    return s;
  }
  char dir[4300], err[900] = "";
  snprintf(dir, sizeof dir, "%s/%s/%s", r->repo, model, version);
  tpu_status_t st = tpu_model_load(e->engine, dir, model, v, NULL, &s->m, err, sizeof err);
  if (st != TPU_OK) {
    s->m = NULL;
    snprintf(s->why, sizeof s->why, "the version does not load from %s: %s", dir,
             err[0] ? err : tpu_strerror(st));
  }
  return s;
}

static size_t elem_bytes(const char *dt) {
  if (!strcmp(dt, "FP64") || !strcmp(dt, "INT64") || !strcmp(dt, "UINT64")) return 8;
  if (!strcmp(dt, "FP32") || !strcmp(dt, "INT32") || !strcmp(dt, "UINT32")) return 4;
  if (!strcmp(dt, "BF16") || !strcmp(dt, "FP16") || !strcmp(dt, "INT16") || !strcmp(dt, "UINT16"))
    return 2;
  return 1;
}

/* "row R element E: recorded X, replay Y" for the first element that differs. */
static void describe_elem(const char *dt, const unsigned char *a, const unsigned char *b,
                          char *out, size_t len) {
  if (!strcmp(dt, "FP32")) {
    float x, y;
    uint32_t bx, by;
    memcpy(&x, a, 4), memcpy(&y, b, 4), memcpy(&bx, a, 4), memcpy(&by, b, 4);
    snprintf(out, len, "recorded %.9g (0x%08" PRIx32 "), replay %.9g (0x%08" PRIx32 ")", x, bx,
             y, by);
  } else if (!strcmp(dt, "INT64")) {
    int64_t x, y;
    memcpy(&x, a, 8), memcpy(&y, b, 8);
    snprintf(out, len, "recorded %" PRId64 ", replay %" PRId64, x, y);
  } else {
    uint64_t x = 0, y = 0;
    size_t n = elem_bytes(dt);
    memcpy(&x, a, n), memcpy(&y, b, n);
    snprintf(out, len, "recorded 0x%" PRIx64 ", replay 0x%" PRIx64, x, y);
  }
}

static const char *precision_name(tpu_dtype_t t) {
  return t == TPU_DTYPE_BF16 ? "bf16" : t == TPU_DTYPE_INT8 ? "int8" : "fp32";
}

static const char *jstr(json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "";
}

/* SHA-256 over tensors' bytes in model order (the server's digest_rows). */
static void digest_of(const tpu_payload_tensor_view_t *t, size_t n, char hex[65]) {
  tpu_audit_sha256_t d;
  if (tpu_audit_sha256_init(&d) != 0) {
    hex[0] = '\0';
    return;
  }
  for (size_t i = 0; i < n; i++) tpu_audit_sha256_update(&d, t[i].data, t[i].bytes);
  tpu_audit_sha256_final(&d, hex);
}

enum { R_OK, R_MISMATCH, R_UNREPLAYABLE };

/* The first element where two tensors of datatype dt differ (n bytes each), described; 0 when
 * they are equal. */
static int first_diff(const char *name, const char *dt, size_t row_bytes, const unsigned char *a,
                      const unsigned char *b, size_t n, char *why, size_t whylen) {
  size_t eb = elem_bytes(dt);
  for (size_t i = 0; i + eb <= n; i += eb)
    if (memcmp(a + i, b + i, eb) != 0) {
      char vals[200];
      describe_elem(dt, a + i, b + i, vals, sizeof vals);
      size_t row = row_bytes ? i / row_bytes : 0, k = row_bytes ? (i % row_bytes) / eb : i / eb;
      snprintf(why, whylen, "output '%s' row %zu element %zu: %s", name, row, k, vals);
      return 1;
    }
  return 0;
}

/* --server: the inputs to the running server, its answer compared. */
static int replay_remote(replay_t *r, json_t *rec, const tpu_payload_t *p, char *why,
                         size_t whylen) {
  unsigned char *outs[TPU_PAYLOAD_MAX_TENSORS] = {0};
  size_t lens[TPU_PAYLOAD_MAX_TENSORS] = {0};
  char rwhy[1200];
  if (r->remote.infer(r->remote.ctx, p, outs, lens, rwhy, sizeof rwhy) != 0) {
    snprintf(why, whylen, "the server did not answer it: %s", rwhy);
    return R_UNREPLAYABLE;
  }
  int verdict = R_MISMATCH;
  tpu_audit_sha256_t d;
  char hex[65];
  tpu_audit_sha256_init(&d);
  for (size_t j = 0; j < p->nout; j++) tpu_audit_sha256_update(&d, outs[j], lens[j]);
  tpu_audit_sha256_final(&d, hex);
  if (strcmp(hex, jstr(rec, "output_sha256")) == 0) {
    verdict = R_OK;
  } else {
    int found = 0;
    for (size_t j = 0; j < p->nout && !found; j++) {
      const tpu_payload_tensor_view_t *v = &p->out[j];
      if (lens[j] != v->bytes) {
        snprintf(why, whylen, "output '%s' has %zu bytes, the captured one %zu", v->name, lens[j],
                 v->bytes);
        found = 1;
      } else {
        found = first_diff(v->name, v->datatype, p->rows ? v->bytes / p->rows : 0, v->data,
                           outs[j], v->bytes, why, whylen);
      }
    }
    if (!found)
      snprintf(why, whylen, "output SHA-256 %s, the record's is %s, though the answer equals the "
               "captured outputs (the payload does not match its record)", hex,
               jstr(rec, "output_sha256"));
    size_t n = strlen(why);
    snprintf(why + n, whylen - n, " (against the server, whose checkpoint and kernel set replay "
             "cannot check; the record's: kernels %s, checkpoint %.12s..)", jstr(rec, "kernels"),
             jstr(rec, "checkpoint_sha256"));
  }
  for (size_t j = 0; j < p->nout; j++) free(outs[j]);
  return verdict;
}

/* Replays one request record; why receives the verdict's detail. */
static int replay_one(replay_t *r, json_t *rec, uint64_t seq, char *why, size_t whylen) {
  const char *ref = jstr(rec, "payload"), *psha = jstr(rec, "payload_sha256");
  const char *model = jstr(rec, "model"), *version = jstr(rec, "version");
  const char *kernels = jstr(rec, "kernels");
  if (!ref[0]) {
    snprintf(why, whylen, "no payload was captured for it");
    return R_UNREPLAYABLE;
  }
  tpu_payload_t *p = NULL;
  char pwhy[1200];
  tpu_payload_status_t ps = tpu_payload_read(r->pdir, ref, seq, psha, r->has_pkey ? &r->pkey : NULL,
                                             &p, pwhy, sizeof pwhy);
  if (ps != TPU_PAYLOAD_OK) {
    static const char *const what[] = {"", "payload missing", "wrong payload",
                                       "payload tampered", "payload key", "payload unreadable"};
    snprintf(why, whylen, "%s: %s", what[ps], pwhy);
    return R_UNREPLAYABLE;
  }
  int verdict = R_UNREPLAYABLE;
  unsigned char *in = NULL, *outb = NULL;
  char hex[65];
  digest_of(p->in, p->nin, hex);
  if (strcmp(hex, jstr(rec, "input_sha256")) != 0) {
    snprintf(why, whylen, "the payload's inputs have SHA-256 %s, the record's input_sha256 is %s",
             hex, jstr(rec, "input_sha256"));
    goto out;
  }
  if (strcmp(p->model, model) != 0 || strcmp(p->version, version) != 0) {
    snprintf(why, whylen, "the payload is of %s/%s, the record of %s/%s", p->model, p->version,
             model, version);
    goto out;
  }
  if (r->server) {
    verdict = replay_remote(r, rec, p, why, whylen);
    goto out;
  }
  if (!kernels[0]) {
    snprintf(why, whylen, "the record does not say which kernel set computed it");
    goto out;
  }
  engine_slot_t *e = engine_for(r, kernels);
  if (!e || !e->engine) {
    snprintf(why, whylen, "%s", e ? e->why : "out of memory");
    goto out;
  }
  model_slot_t *ms = model_for(r, model, version, e);
  if (!ms || !ms->m) {
    snprintf(why, whylen, "%s", ms ? ms->why : "out of memory");
    goto out;
  }
  tpu_model_t *m = ms->m;
  if (strcmp(tpu_model_sha256(m), jstr(rec, "checkpoint_sha256")) != 0) {
    snprintf(why, whylen, "the version's checkpoint changed: the record was computed with "
             "checkpoint SHA-256 %s, %s/%s/%s now has %s", jstr(rec, "checkpoint_sha256"),
             r->repo, model, version, tpu_model_sha256(m));
    goto out;
  }
  const char *prec = precision_name(tpu_model_precision(m));
  if (strcmp(prec, jstr(rec, "precision")) != 0) {
    snprintf(why, whylen, "the record was computed in %s, the version is now %s",
             jstr(rec, "precision"), prec);
    goto out;
  }
  size_t rows = p->rows, nin = tpu_model_input_count(m), nout = tpu_model_output_count(m);
  size_t in_row = tpu_model_in_row_bytes(m), out_row = tpu_model_out_row_bytes(m);
  /* The answer's outputs, by name: every model output but the on-request ones the request
   * did not name (the server leaves those out of the digest and the payload). cap[j]: the
   * payload's tensor for model output j, or -1. */
  long cap[TPU_PAYLOAD_MAX_TENSORS];
  uint64_t want = 0;
  size_t matched = 0;
  int fits = rows > 0 && nin == p->nin && nout <= TPU_PAYLOAD_MAX_TENSORS;
  for (size_t j = 0; fits && j < nout; j++) {
    const tpu_model_tensor_t *t = tpu_model_output(m, j);
    cap[j] = -1;
    for (size_t k = 0; k < p->nout; k++)
      if (strcmp(p->out[k].name, t->name) == 0) cap[j] = (long)k;
    if (cap[j] < 0 && !t->on_request) fits = 0;
    if (cap[j] >= 0) {
      matched++;
      if (t->on_request && j < 64) want |= UINT64_C(1) << j;
    }
  }
  if (!fits || matched != p->nout) {
    snprintf(why, whylen, "the payload's %zu rows, %zu inputs and %zu outputs do not fit the "
             "model's %zu inputs and %zu outputs", rows, p->nin, p->nout, nin, nout);
    goto out;
  }
  in = malloc(rows * in_row);
  outb = malloc(rows * out_row);
  if (!in || !outb) {
    snprintf(why, whylen, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < nin; i++) {
    const tpu_model_tensor_t *t = tpu_model_input(m, i);
    const tpu_payload_tensor_view_t *v = &p->in[i];
    if (strcmp(v->name, t->name) != 0 || strcmp(v->datatype, t->datatype) != 0 ||
        v->bytes != rows * t->row_bytes) {
      snprintf(why, whylen, "the payload's input %zu ('%s' %s, %zu bytes) is not the model's "
               "('%s' %s, %zu bytes for %zu rows)", i, v->name, v->datatype, v->bytes, t->name,
               t->datatype, rows * t->row_bytes, rows);
      goto out;
    }
    for (size_t row = 0; row < rows; row++)
      memcpy(in + row * in_row + t->offset, v->data + row * t->row_bytes, t->row_bytes);
  }
  tpu_status_t st = tpu_model_infer_want(m, rows, in, outb, want);
  if (st != TPU_OK) {
    snprintf(why, whylen, "the model refuses the inputs now: %s", tpu_strerror(st));
    verdict = R_MISMATCH;
    goto out;
  }
  /* The replay's outputs, tensor by tensor (as the server digests them). */
  tpu_audit_sha256_t d;
  tpu_audit_sha256_init(&d);
  for (size_t j = 0; j < nout; j++) {
    const tpu_model_tensor_t *t = tpu_model_output(m, j);
    if (cap[j] < 0) continue;
    for (size_t row = 0; row < rows; row++)
      tpu_audit_sha256_update(&d, outb + row * out_row + t->offset, t->row_bytes);
  }
  tpu_audit_sha256_final(&d, hex);
  if (strcmp(hex, jstr(rec, "output_sha256")) == 0) {
    verdict = R_OK;
    goto out;
  }
  verdict = R_MISMATCH;
  for (size_t j = 0; j < nout; j++) {
    const tpu_model_tensor_t *t = tpu_model_output(m, j);
    if (cap[j] < 0) continue;
    const tpu_payload_tensor_view_t *v = &p->out[cap[j]];
    size_t eb = elem_bytes(t->datatype), per_row = t->row_bytes / (eb ? eb : 1);
    if (v->bytes != rows * t->row_bytes) {
      snprintf(why, whylen, "output SHA-256 %s, the record's is %s (the captured output '%s' "
               "has another size)", hex, jstr(rec, "output_sha256"), v->name);
      goto out;
    }
    for (size_t row = 0; row < rows; row++)
      for (size_t k = 0; k < per_row; k++) {
        const unsigned char *a = v->data + row * t->row_bytes + k * eb;
        const unsigned char *b = outb + row * out_row + t->offset + k * eb;
        if (memcmp(a, b, eb) != 0) {
          char vals[200];
          describe_elem(t->datatype, a, b, vals, sizeof vals);
          snprintf(why, whylen, "output '%s' row %zu element %zu: %s", t->name, row, k, vals);
          goto out;
        }
      }
  }
  snprintf(why, whylen, "output SHA-256 %s, the record's is %s, though the replay equals the "
           "captured outputs (the payload does not match its record)", hex,
           jstr(rec, "output_sha256"));
out:
  free(in);
  free(outb);
  tpu_payload_free(p);
  return verdict;
}

static int parse_seq(const char *s, uint64_t *lo, uint64_t *hi) {
  char *end;
  errno = 0;
  unsigned long long a = strtoull(s, &end, 10), b = a;
  if (errno || end == s || a == 0) return -1;
  if (strncmp(end, "..", 2) == 0) {
    const char *t = end + 2;
    b = strtoull(t, &end, 10);
    if (errno || end == t || b < a) return -1;
  }
  if (*end) return -1;
  *lo = a;
  *hi = b;
  return 0;
}

static void handle_line(replay_t *r, const char *file, uint64_t lineno, const char *line,
                        size_t len) {
  uint64_t raw = tpu__audit_raw_seq(line, len);
  if (r->seq_lo && (raw < r->seq_lo || raw > r->seq_hi)) return;
  json_t *o = json_loadb(line, len, 0, NULL);
  if (!o) return; /* not a record (a torn tail): audit verify reports those */
  const char *kind = jstr(o, "kind");
  const char *id = jstr(o, "request_id");
  if (strcmp(kind, TPU_AUDIT_KIND_REQUEST) != 0 ||
      (r->request_id && strcmp(id, r->request_id) != 0)) {
    json_decref(o);
    return;
  }
  /* In "all" mode, requests that were refused or not captured are not replays that failed. */
  int explicit_sel = r->request_id || r->seq_lo;
  if (!explicit_sel && (strcmp(jstr(o, "status"), "OK") != 0 || !jstr(o, "payload")[0])) {
    r->skipped++;
    json_decref(o);
    return;
  }
  r->selected++;
  char why[6000] = "";
  int verdict;
  tpu__audit_line_t pl;
  tpu__line_result_t lr = tpu__audit_parse_line(line, len, r->key, r->keylen, &pl);
  if (lr != TPU__LINE_OK) {
    snprintf(why, sizeof why, "the record fails its hash (%s:%" PRIu64 "%s): it was changed",
             file, lineno, lr == TPU__LINE_FORGED ? ", a plain SHA-256 where the HMAC belongs"
             : r->keylen ? "" : "; an HMAC log needs --key");
    verdict = R_UNREPLAYABLE;
  } else if (strcmp(jstr(o, "status"), "OK") != 0) {
    snprintf(why, sizeof why, "the request failed (%s): there is no answer to recompute",
             jstr(o, "status"));
    verdict = R_UNREPLAYABLE;
  } else {
    verdict = replay_one(r, o, pl.seq, why, sizeof why);
  }
  const char *label = verdict == R_OK ? "reproduced" : verdict == R_MISMATCH ? "MISMATCHED"
                                                                             : "NOT REPLAYABLE";
  if (verdict == R_OK) r->reproduced++;
  else if (verdict == R_MISMATCH) r->mismatched++;
  else r->unreplayable++;
  if (verdict != R_OK || !r->quiet)
    fprintf(r->out, "seq %" PRIu64 " request %s %s/%s: %s%s%s\n", raw, id[0] ? id : "(none)",
            jstr(o, "model"), jstr(o, "version"), label, why[0] ? ": " : "", why);
  json_decref(o);
}

static int usage(FILE *err, const char *msg) {
  fprintf(err, "tpuctl: %s\nusage: tpuctl " TPU_REPLAY_SYNOPSIS "\n", msg);
  return 2;
}

int tpu_replay_cli(int argc, char **argv, FILE *out, FILE *err, tpu_replay_connect_fn connect) {
  replay_t r;
  memset(&r, 0, sizeof r);
  r.out = out;
  r.err = err;
  int i = 1, rc = 2;
  char kerr[700];
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fprintf(out, "usage: tpuctl " TPU_REPLAY_SYNOPSIS "\n\n" TPU_REPLAY_HELP);
      return 0;
    }
    if (!strcmp(a, "--quiet")) {
      r.quiet = 1;
      continue;
    }
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    if (i + 1 >= argc) return usage(err, "a flag needs a value");
    const char *v = argv[++i];
    if (!strcmp(a, "--repository")) r.repo = v;
    else if (!strcmp(a, "--server")) r.server = v;
    else if (!strcmp(a, "--payload-dir")) r.pdir = v;
    else if (!strcmp(a, "--request-id")) r.request_id = v;
    else if (!strcmp(a, "--seq")) {
      if (parse_seq(v, &r.seq_lo, &r.seq_hi) != 0) return usage(err, "--seq takes N or A..B");
    } else if (!strcmp(a, "--payload-key")) {
      if (tpu_payload_load_key(v, &r.pkey, kerr, sizeof kerr) != 0) {
        fprintf(err, "tpuctl: --payload-key: %s\n", kerr);
        return 2;
      }
      r.has_pkey = 1;
    } else if (!strcmp(a, "--key")) {
      int n = tpu_audit_load_key(v, r.key, sizeof r.key, kerr, sizeof kerr);
      if (n < 0) {
        fprintf(err, "tpuctl: --key: %s\n", kerr);
        return 2;
      }
      r.keylen = (size_t)n;
    } else {
      char m[300];
      snprintf(m, sizeof m, "unknown flag %s", a);
      return usage(err, m);
    }
  }
  if (!r.pdir || !r.repo == !r.server)
    return usage(err, "--payload-dir and one of --repository or --server are required");
  if (i >= argc) return usage(err, "no audit log FILE given");
  if (r.server) {
    char cwhy[700];
    if (!connect) return usage(err, "--server: this tpuctl was built without the client library");
    if (connect(r.server, &r.remote, cwhy, sizeof cwhy) != 0) {
      fprintf(err, "tpuctl: --server %s: %s\n", r.server, cwhy);
      return 2;
    }
  }
  tpu_log_set_level(TPU_LOG_WARN); /* model loads log at info: not replay's output */
  char *line = NULL;
  size_t cap = 0;
  for (; i < argc; i++) {
    FILE *f = fopen(argv[i], "r");
    if (!f) {
      fprintf(err, "tpuctl: %s: %s\n", argv[i], strerror(errno));
      goto done;
    }
    ssize_t n;
    uint64_t lineno = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
      lineno++;
      size_t len = (size_t)n;
      if (line[len - 1] == '\n') len--;
      if (len) handle_line(&r, argv[i], lineno, line, len);
    }
    fclose(f);
  }
  fprintf(out, "replayed %" PRIu64 " records: %" PRIu64 " reproduced, %" PRIu64 " mismatched, "
          "%" PRIu64 " not replayable; %" PRIu64 " request records skipped (failed or not "
          "captured)\n", r.selected, r.reproduced, r.mismatched, r.unreplayable, r.skipped);
  if (r.selected == 0) fprintf(out, "no record matched the selection\n");
  rc = r.selected && r.reproduced == r.selected ? 0 : 1;
done:
  free(line);
  if (r.remote.close) r.remote.close(r.remote.ctx);
  for (size_t k = 0; k < r.nmodels; k++) tpu_model_free(r.models[k].m);
  for (size_t k = 0; k < r.nengines; k++) tpu_engine_free(r.engines[k].engine);
  free(r.models);
  free(r.engines);
  OPENSSL_cleanse(&r.pkey, sizeof r.pkey);
  return rc;
}
