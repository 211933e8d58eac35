/*
 * onnx_backend.c - runs ONNX's own backend tests (Debian libonnx-testdata) through tpud's
 * in-process model pipeline and counts what passes.
 *
 * DESIGN
 * A test is a directory holding model.onnx and test_data_set_N/ folders of input_K.pb and
 * output_K.pb (each one serialized TensorProto). For each test this program does what the
 * server does with a model file: tpu_onnx_load, tpu_onnx_to_graph, tpu_graph_compile for one
 * batch (1, unless the model's input has the batch as dimension 0: then the test data's dim 0),
 * then per data set decodes the inputs (tpu_onnx_tensor_parse), checks them against the
 * program's inputs, runs it and compares every output with the expected one the way ONNX's
 * backend test runner does (numpy's assert_allclose, rtol 1e-3, atol 1e-7: |got - exp| <=
 * atol + rtol * |exp|, NaN equal to NaN; integers and booleans exactly). A test is
 *   PASS     every data set matched;
 *   FAIL     a value, dtype or shape differs, the data does not fit the program's inputs, or
 *            the run failed: tpud computed something wrong, or refused at run time what it
 *            accepted at load;
 *   SKIP     loading refused it as not supported (TPU_ENOTSUP: an op with no kernel, an opset
 *            outside the loader's range, a type the IR has no counterpart for);
 *   REFUSED  loading refused it for another reason (TPU_EINVAL, TPU_ESHAPE, ...): counted with
 *            the skips but listed apart, since a valid test model that tpud calls invalid is
 *            either a decoder bug or a limit to write down.
 * Skips are grouped by reason: the op for "op 'X' ... not supported" messages, else the message
 * with names and numbers blanked out. BFLOAT16 test data comes as UINT16 tensors of the same
 * bits (numpy has no bfloat16) and is read as BF16. Matches inputs and outputs to the test's files by tensor
 * name, by position when the file names none that fits.
 *
 * Each test runs in its own child process, with its own engine, killed after --timeout seconds
 * (60): a kernel that crashes or hangs is one FAIL ("crash" or "timeout"), not the end of the
 * run. --no-fork runs them in this process instead (for a debugger or valgrind).
 *
 * Usage: onnx_backend [--verbose] [--list-failures] [--expect-no-fail] [--no-fork]
 *                     [--timeout S] [--root DIR]... [TEST]...
 *   --root DIR        every directory under DIR that holds a model.onnx, in name order
 *   --verbose         one line per test (every refusal's full message among them)
 *   --list-failures   print only the failing tests' directories, one a line (to rerun them)
 *   --xfail FILE      tests known to fail for a reason outside tpud (errata of the test data):
 *                     one "node/test_name  reason" a line ('#' comments). Such a test that
 *                     fails counts as expected; one that passes is a FAIL (the list must stay
 *                     true: remove it).
 *   --export-repo DIR each passing test as a model version for the real server:
 *                     DIR/<root>.<test>/1/ with model.onnx, reference.safetensors (its first
 *                     data set: input.NAME, output.NAME) and a model.json (format onnx, both
 *                     SHA-256s, the suite's tolerances; batched tests get one bucket of the
 *                     test's batch): tests/integration/test_onnx_backend.sh serves them
 *   --expect-no-fail  the default: exit status 1 when any test fails
 * Exit status: 0 no failure, 1 some test failed, 2 usage or out of memory, 77 a given test or
 * root does not exist (CTest's SKIP_RETURN_CODE: the test data is not installed).
 */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file.h"
#include "onnx.h"
#include "onnx_graph.h"
#include "tpu_engine.h"
#include "tpu_graph.h"

#define RTOL 1e-3 /* ONNX's backend test defaults (onnx/backend/test/runner) */
#define ATOL 1e-7
#define MSG 2048

typedef enum { R_PASS, R_FAIL, R_SKIP, R_REFUSED } result_t;
static const char *const result_names[] = {"PASS", "FAIL", "SKIP", "REFUSED"};

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "onnx_backend: out of memory\n");
    exit(2);
  }
  return p;
}

static char *xstrdup(const char *s) {
  char *d = xmalloc(strlen(s) + 1);
  strcpy(d, s);
  return d;
}

/* ---- groups of reasons (skips, refusals, failures), each with a count and an example ---- */

typedef struct {
  char *key, *example; /* example: "test: full message" of the first test seen */
  int count;
} group_t;

typedef struct {
  group_t *g;
  size_t n, cap;
} groups_t;

static void group_add(groups_t *gs, const char *key, const char *test, const char *msg) {
  for (size_t i = 0; i < gs->n; i++)
    if (strcmp(gs->g[i].key, key) == 0) {
      gs->g[i].count++;
      return;
    }
  if (gs->n == gs->cap) {
    gs->cap = gs->cap * 2 + 16;
    group_t *ng = realloc(gs->g, gs->cap * sizeof *ng);
    if (!ng) {
      fprintf(stderr, "onnx_backend: out of memory\n");
      exit(2);
    }
    gs->g = ng;
  }
  size_t n = strlen(test) + strlen(msg) + 3;
  char *ex = xmalloc(n);
  snprintf(ex, n, "%s: %s", test, msg);
  gs->g[gs->n++] = (group_t){xstrdup(key), ex, 1};
}

static int cmp_groups(const void *a, const void *b) {
  const group_t *x = a, *y = b;
  if (x->count != y->count) return y->count - x->count;
  return strcmp(x->key, y->key);
}

static void groups_print(groups_t *gs, const char *title) {
  if (!gs->n) return;
  qsort(gs->g, gs->n, sizeof *gs->g, cmp_groups);
  printf("\n%s:\n", title);
  for (size_t i = 0; i < gs->n; i++)
    printf("  %5d  %s\n         e.g. %s\n", gs->g[i].count, gs->g[i].key, gs->g[i].example);
}

static void groups_free(groups_t *gs) {
  for (size_t i = 0; i < gs->n; i++) free(gs->g[i].key), free(gs->g[i].example);
  free(gs->g);
}

/* The op of an "op 'X' (opset N) is not supported" (or "... has no kernel") message, as
 * "op 'X'" (or "op 'X' (no kernel)"); 0 for any other message. */
static int op_reason(const char *msg, char *key, size_t len) {
  const char *p = strstr(msg, "op '");
  if (!p || (!strstr(p, "not supported") && !strstr(p, "no kernel"))) return 0;
  p += 4;
  const char *q = strchr(p, '\'');
  if (!q || q == p) return 0;
  /* compile.c's "has no kernel" (inference takes the op, no kernel runs it) kept apart from
   * infer.c's "is not supported" (the op is unknown to the IR). */
  snprintf(key, len, "op '%.*s'%s", (int)(q - p), p, strstr(q, "no kernel") ? " (no kernel)" : "");
  return 1;
}

/* A message as a group key: the leading path (the model's or a data file's) cut off, quoted
 * names blanked to '*' and numbers to '#', at most 120 characters. */
static void normalize(const char *msg, const char *dir, char *key, size_t len) {
  size_t dl = strlen(dir);
  if (strncmp(msg, dir, dl) == 0) {
    const char *p = strstr(msg + dl, ": ");
    if (p) msg = p + 2;
  }
  size_t k = 0;
  for (const char *p = msg; *p && k + 2 < len;) {
    if (*p == '\'') {
      const char *q = strchr(p + 1, '\'');
      if (q) {
        if (k + 4 >= len) break;
        memcpy(key + k, "'*'", 3), k += 3, p = q + 1;
        continue;
      }
    }
    if (*p >= '0' && *p <= '9') {
      key[k++] = '#';
      while ((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9')) p++;
      continue;
    }
    key[k++] = *p++;
    if (k >= 120 && *p) { /* cut at a word, marked */
      while (k > 60 && key[k - 1] != ' ') k--;
      if (k + 4 < len) memcpy(key + k, "...", 3), k += 3;
      break;
    }
  }
  key[k] = 0;
}

/* ---- test data ---- */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t n = 0, cap = 0, got;
  char *buf = NULL;
  do {
    if (n == cap) {
      cap = cap * 2 + 65536;
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb;
    }
    got = fread(buf + n, 1, cap - n, f);
    n += got;
  } while (got);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

typedef struct {
  tpu_onnx_tensor_t **t;
  size_t n;
} tensors_t;

static void tensors_free(tensors_t *ts) {
  for (size_t i = 0; i < ts->n; i++) tpu_onnx_tensor_free(ts->t[i]);
  free(ts->t);
  ts->t = NULL, ts->n = 0;
}

/* Reads set/<prefix>_0.pb, _1.pb, ... until one is missing. Returns TPU_OK, or the decoder's
 * status with msg set. */
static tpu_status_t read_tensors(const char *set, const char *prefix, tensors_t *ts, char *msg) {
  ts->t = NULL, ts->n = 0;
  for (size_t k = 0;; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_%zu.pb", set, prefix, k);
    struct stat st;
    if (stat(path, &st) != 0) return TPU_OK;
    size_t len = 0;
    char *buf = read_file(path, &len);
    if (!buf) {
      snprintf(msg, MSG, "%.1900s: cannot read: %s", path, strerror(errno));
      return TPU_EINVAL;
    }
    tpu_onnx_tensor_t *t = NULL;
    tpu_status_t rc = tpu_onnx_tensor_parse(buf, len, path, &t, msg, MSG);
    free(buf);
    if (rc != TPU_OK) return rc;
    tpu_onnx_tensor_t **nt = realloc(ts->t, (ts->n + 1) * sizeof *nt);
    if (!nt) {
      tpu_onnx_tensor_free(t);
      snprintf(msg, MSG, "out of memory");
      return TPU_ENOMEM;
    }
    ts->t = nt;
    ts->t[ts->n++] = t;
  }
}

/* The test's file for program input/output `i` called `name`: the one with that name, else the
 * one at position i (NULL past the end). */
static const tpu_onnx_tensor_t *match(const tensors_t *ts, size_t i, const char *name) {
  for (size_t k = 0; k < ts->n; k++)
    if (ts->t[k]->name[0] && strcmp(ts->t[k]->name, name) == 0) return ts->t[k];
  return i < ts->n ? ts->t[i] : NULL;
}

static void fmt_dims(const int64_t *dims, size_t n, char *out, size_t len) {
  size_t k = (size_t)snprintf(out, len, "[");
  for (size_t i = 0; i < n && k + 24 < len; i++)
    k += (size_t)snprintf(out + k, len - k, "%s%lld", i ? "," : "", (long long)dims[i]);
  snprintf(out + k, len - k, "]");
}

/* Whether a test tensor has a program tensor's dtype and shape; if not, msg says how. */
static int fits(const tpu_onnx_tensor_t *t, const tpu_graph_io_t *io, const char *kind,
                char *msg) {
  tpu_graph_dtype_t dt = tpu_graph_dtype_from_onnx(t->dtype);
  /* ONNX's test data stores BFLOAT16 values as UINT16 tensors of the same bits (numpy has no
   * bfloat16): taken as BF16 where the program wants BF16. */
  if (t->dtype == TPU_ONNX_UINT16 && io->dtype == TPU_GRAPH_BF16) dt = TPU_GRAPH_BF16;
  int same = dt == io->dtype && t->ndim == (size_t)io->rank;
  for (size_t d = 0; same && d < t->ndim; d++) same = t->dims[d] == io->dims[d];
  if (same) return 1;
  char want[256], got[256];
  fmt_dims(t->dims, t->ndim, want, sizeof want);
  fmt_dims(io->dims, (size_t)(io->rank > 0 ? io->rank : 0), got, sizeof got);
  const char *gn = tpu_graph_dtype_name(io->dtype), *wn = tpu_onnx_dtype_name(t->dtype);
  if (!strcmp(kind, "input"))
    snprintf(msg, MSG, "input '%s': the test gives %s %s, the program takes %s %s", io->name,
             wn ? wn : "?", want, gn ? gn : "?", got);
  else
    snprintf(msg, MSG, "output '%s' is %s %s, expected %s %s", io->name, gn ? gn : "?", got,
             wn ? wn : "?", want);
  return 0;
}

/* ---- comparing values ---- */

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0    ? ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
                       : ldexp(m | 0x400, e - 25);
  return h & 0x8000 ? -v : v;
}

/* Element i of `data` (graph dtype dt) as a double. */
static double elem(const void *data, tpu_graph_dtype_t dt, size_t i) {
  switch (dt) {
  case TPU_GRAPH_FP32: return ((const float *)data)[i];
  case TPU_GRAPH_FP64: return ((const double *)data)[i];
  case TPU_GRAPH_FP16: return half_to_double(((const uint16_t *)data)[i]);
  case TPU_GRAPH_BF16: return tpu_bf16_to_fp32(((const uint16_t *)data)[i]);
  case TPU_GRAPH_INT64: return (double)((const int64_t *)data)[i];
  case TPU_GRAPH_INT32: return ((const int32_t *)data)[i];
  case TPU_GRAPH_INT8: return ((const int8_t *)data)[i];
  case TPU_GRAPH_UINT8:
  case TPU_GRAPH_BOOL: return ((const uint8_t *)data)[i];
  default: return NAN;
  }
}

static int is_float(tpu_graph_dtype_t dt) {
  return dt == TPU_GRAPH_FP32 || dt == TPU_GRAPH_FP64 || dt == TPU_GRAPH_FP16 ||
         dt == TPU_GRAPH_BF16;
}

/* Index i of a row-major shape as "[a,b,c]". */
static void fmt_index(const int64_t *dims, int rank, size_t i, char *out, size_t len) {
  int64_t idx[TPU_GRAPH_MAX_RANK] = {0};
  for (int d = rank - 1; d >= 0; d--) {
    if (dims[d] > 0) idx[d] = (int64_t)(i % (size_t)dims[d]), i /= (size_t)dims[d];
  }
  fmt_dims(idx, (size_t)(rank > 0 ? rank : 0), out, len);
}

/* Compares output `io` (got) with the expected tensor; 1 when they match, else msg names the
 * mismatch count and the worst element. */
static int compare(const tpu_graph_io_t *io, const void *got, const tpu_onnx_tensor_t *exp,
                   char *msg) {
  int fl = is_float(io->dtype);
  int64_t i64g = 0, i64e = 0;
  size_t bad = 0, worst = 0;
  double worst_score = -1, wg = 0, we = 0;
  for (size_t i = 0; i < io->elems; i++) {
    double g = elem(got, io->dtype, i), e = elem(exp->data, io->dtype, i), score;
    if (fl) {
      if (isnan(e) || isnan(g)) {
        if (isnan(e) && isnan(g)) continue;
        score = INFINITY;
      } else if (g == e) {
        continue; /* also equal infinities */
      } else {
        double tol = ATOL + RTOL * fabs(e), d = fabs(g - e);
        if (d <= tol) continue;
        score = isinf(d) ? INFINITY : d / tol;
      }
    } else {
      /* Exact: compare as integers (an int64 above 2^53 is not exact as a double). */
      if (io->dtype == TPU_GRAPH_INT64) {
        int64_t a = ((const int64_t *)got)[i], b = ((const int64_t *)exp->data)[i];
        if (a == b) continue;
        score = fabs((double)a - (double)b);
        if (score > worst_score) i64g = a, i64e = b;
      } else {
        if (g == e) continue;
        score = fabs(g - e);
      }
    }
    bad++;
    if (score > worst_score) worst_score = score, worst = i, wg = g, we = e;
  }
  if (!bad) return 1;
  char where[256];
  fmt_index(io->dims, io->rank, worst, where, sizeof where);
  if (fl)
    snprintf(msg, MSG,
             "output '%s': %zu of %zu values differ (rtol %g, atol %g); worst at %s: got %.9g, "
             "expected %.9g",
             io->name, bad, io->elems, RTOL, ATOL, where, wg, we);
  else if (io->dtype == TPU_GRAPH_INT64)
    snprintf(msg, MSG, "output '%s': %zu of %zu values differ; worst at %s: got %lld, expected %lld",
             io->name, bad, io->elems, where, (long long)i64g, (long long)i64e);
  else
    snprintf(msg, MSG, "output '%s': %zu of %zu values differ; worst at %s: got %.0f, expected %.0f",
             io->name, bad, io->elems, where, wg, we);
  return 0;
}

/* ---- one test ---- */

typedef struct {
  char *test;  /* "node/test_add": the directory's last two components */
  char *dir;
  result_t result;
  char *key;   /* group key (skips, refusals, failures) */
  char *msg;   /* the full reason */
} outcome_t;

/* The failure kind of a FAIL message, for grouping. */
static const char *fail_kind(const char *msg) {
  if (!strncmp(msg, "run: ", 5)) return "run error"; /* first: a kernel's words may be anything */
  if (strstr(msg, "values differ")) return "wrong values";
  if (strstr(msg, "the program takes") || strstr(msg, "inputs, the program")) return "inputs";
  if (strstr(msg, "outputs, the program")) return "outputs";
  if (strstr(msg, ", expected ")) return "output dtype/shape";
  return "other";
}

/* A refusal at load (decode, convert, compile): SKIP for TPU_ENOTSUP, REFUSED otherwise. */
static void refusal(outcome_t *o, tpu_status_t rc, const char *stage, const char *msg) {
  char key[256];
  o->result = rc == TPU_ENOTSUP ? R_SKIP : R_REFUSED;
  if (!op_reason(msg, key, sizeof key)) normalize(msg, o->dir, key, sizeof key);
  size_t n = strlen(msg) + 64;
  o->msg = xmalloc(n);
  snprintf(o->msg, n, "%s: %s: %s", stage, tpu_strerror(rc), msg);
  n = strlen(key) + 16;
  o->key = xmalloc(n);
  snprintf(o->key, n, "%s%s", o->result == R_REFUSED ? "refused: " : "", key);
}

/* The test_data_set_N directories of dir, in N order (*n of them; caller frees). */
static char **data_sets(const char *dir, size_t *n) {
  char **sets = NULL;
  *n = 0;
  for (int k = 0;; k++) { /* consecutive from 0, as ONNX writes them */
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/test_data_set_%d", dir, k);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) break;
    char **ns = realloc(sets, (*n + 1) * sizeof *ns);
    if (!ns) break;
    sets = ns;
    sets[(*n)++] = xstrdup(path);
  }
  return sets;
}

/* The batch the program runs at for these inputs: 1, unless a graph input has the batch as
 * dimension 0 (then the test's tensor for that input says it); 0 when the test gives none. */
static int64_t batch_of(const tpu_onnx_model_t *m, const tensors_t *in) {
  size_t pos = 0; /* position among the inputs the program takes (initializers dropped) */
  for (size_t i = 0; i < m->ninputs; i++) {
    if (m->inputs[i].initializer) continue;
    if (m->inputs[i].ndim > 0 && m->inputs[i].dims[0] == TPU_GRAPH_BATCH) {
      const tpu_onnx_tensor_t *t = match(in, pos, m->inputs[i].name);
      return t && t->ndim > 0 ? t->dims[0] : 0;
    }
    pos++;
  }
  return 1;
}

/* The model's distinct op types in file order ("Mul+Add+Exp"), at most ~60 characters: failures
 * are grouped by kind and ops, since most are one kernel's bug. */
static void ops_of(const tpu_onnx_model_t *m, char *out, size_t len) {
  size_t k = 0;
  out[0] = 0;
  for (size_t i = 0; i < m->nnodes; i++) {
    const char *op = m->nodes[i].op_type;
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++) seen = !strcmp(m->nodes[j].op_type, op);
    if (seen) continue;
    if (k + strlen(op) + 5 >= len || k > 60) {
      snprintf(out + k, len - k, "+...");
      return;
    }
    k += (size_t)snprintf(out + k, len - k, "%s%s", k ? "+" : "", op);
  }
}

static void set_fail(outcome_t *o, const tpu_onnx_model_t *m, const char *set, const char *msg) {
  const char *base = strrchr(set, '/');
  char ops[128];
  ops_of(m, ops, sizeof ops);
  size_t n = strlen(msg) + strlen(set) + 8;
  o->result = R_FAIL;
  o->msg = xmalloc(n);
  snprintf(o->msg, n, "%s: %s", base ? base + 1 : set, msg);
  n = strlen(ops) + 64;
  o->key = xmalloc(n);
  snprintf(o->key, n, "%s in %s", fail_kind(msg), ops);
}

/* ---- --export-repo ---- */

static const char *export_dir; /* NULL: no export */

static const char *st_dtype(tpu_graph_dtype_t d) {
  switch (d) {
  case TPU_GRAPH_FP32: return "F32";
  case TPU_GRAPH_FP16: return "F16";
  case TPU_GRAPH_BF16: return "BF16";
  case TPU_GRAPH_FP64: return "F64";
  case TPU_GRAPH_INT64: return "I64";
  case TPU_GRAPH_INT32: return "I32";
  case TPU_GRAPH_INT8: return "I8";
  case TPU_GRAPH_UINT8: return "U8";
  case TPU_GRAPH_BOOL: return "BOOL";
  default: return NULL;
  }
}

static int write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(a, 1, alen, f) == alen && (!blen || fwrite(b, 1, blen, f) == blen);
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Writes the passing test `o` (program p, first data set's tensors in/ex) into export_dir.
 * Returns 0, or -1 with msg. */
static int export_test(const outcome_t *o, const tpu_graph_program_t *p, const tensors_t *in,
                       const tensors_t *ex, int batched, int64_t batch, char *msg) {
  char dir[4096], path[4200], name[512];
  snprintf(name, sizeof name, "%s", o->test);
  for (char *c = name; *c; c++)
    if (*c == '/') *c = '.';
  snprintf(dir, sizeof dir, "%s/%s", export_dir, name);
  mkdir(dir, 0755);
  snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/1");
  mkdir(dir, 0755);
  /* reference.safetensors: header of every tensor in order, then their bytes */
  size_t cap = 4096, len = 0, data = 0;
  char *hdr = xmalloc(cap);
  len += (size_t)snprintf(hdr, cap, "{");
  size_t ni = tpu_graph_program_input_count(p), no = tpu_graph_program_output_count(p);
  for (size_t k = 0; k < ni + no; k++) {
    tpu_graph_io_t io;
    if (k < ni) tpu_graph_program_input(p, k, &io);
    else tpu_graph_program_output(p, k - ni, &io);
    const char *dt = st_dtype(io.dtype);
    if (!dt || strpbrk(io.name, "\"\\") || !io.name[0]) {
      snprintf(msg, MSG, "export: tensor '%s' cannot be written", io.name);
      free(hdr);
      return -1;
    }
    if (cap - len < 512 + strlen(io.name)) hdr = realloc(hdr, cap = cap * 2 + strlen(io.name));
    len += (size_t)snprintf(hdr + len, cap - len, "%s\"%s.%s\":{\"dtype\":\"%s\",\"shape\":[",
                            k ? "," : "", k < ni ? "input" : "output", io.name, dt);
    for (int d = 0; d < io.rank; d++)
      len += (size_t)snprintf(hdr + len, cap - len, "%s%lld", d ? "," : "",
                              (long long)io.dims[d]);
    len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", data,
                            data + io.bytes);
    data += io.bytes;
  }
  len += (size_t)snprintf(hdr + len, cap - len, "}");
  while (len % 8) hdr[len++] = ' ';
  unsigned char *file = xmalloc(8 + len + data);
  uint64_t hl = len;
  memcpy(file, &hl, 8);
  memcpy(file + 8, hdr, len);
  size_t at = 8 + len;
  for (size_t k = 0; k < ni + no; k++) {
    tpu_graph_io_t io;
    if (k < ni) tpu_graph_program_input(p, k, &io);
    else tpu_graph_program_output(p, k - ni, &io);
    const tpu_onnx_tensor_t *t = k < ni ? match(in, k, io.name) : match(ex, k - ni, io.name);
    if (io.bytes) memcpy(file + at, t->data, io.bytes);
    at += io.bytes;
  }
  free(hdr);
  char ref_sha[65], model_sha[65];
  tpu_file_sha256(file, at, NULL, ref_sha);
  snprintf(path, sizeof path, "%s/reference.safetensors", dir);
  int rc = write_file(path, file, at, NULL, 0);
  free(file);
  size_t mlen = 0;
  char src[4200];
  snprintf(src, sizeof src, "%s/model.onnx", o->dir);
  char *model = read_file(src, &mlen);
  if (rc != 0 || !model) {
    free(model);
    snprintf(msg, MSG, "export: cannot write %s", dir);
    return -1;
  }
  tpu_file_sha256(model, mlen, NULL, model_sha);
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  rc = write_file(path, model, mlen, NULL, 0);
  free(model);
  char json[1024];
  char batching[128] = "";
  if (batched)
    snprintf(batching, sizeof batching,
             ",\n  \"batching\": {\"max_batch_size\": %lld, \"buckets\": [%lld]}",
             (long long)batch, (long long)batch);
  int n = snprintf(json, sizeof json,
                   "{\n  \"format\": \"onnx\",\n  \"checkpoint\": {\"file\": \"model.onnx\", "
                   "\"sha256\": \"%s\"}%s,\n  \"reference\": {\"file\": "
                   "\"reference.safetensors\", \"sha256\": \"%s\", \"rtol\": %g, \"atol\": "
                   "%g}\n}\n",
                   model_sha, batching, ref_sha, RTOL, ATOL);
  snprintf(path, sizeof path, "%s/model.json", dir);
  if (rc != 0 || write_file(path, json, (size_t)n, NULL, 0) != 0) {
    snprintf(msg, MSG, "export: cannot write %s", dir);
    return -1;
  }
  return 0;
}

static void run_test(tpu_engine_t *eng, outcome_t *o) {
  char msg[MSG], path[4096];
  tpu_onnx_model_t *m = NULL;
  tpu_graph_t *g = NULL;
  tpu_graph_program_t *p = NULL;
  int64_t pbatch = 0;
  void **outs = NULL;
  const void **ins = NULL;
  size_t nsets = 0;
  char **sets = NULL;
  tensors_t in = {0}, ex = {0};
  msg[0] = 0;

  snprintf(path, sizeof path, "%s/model.onnx", o->dir);
  tpu_status_t rc = tpu_onnx_load(path, 0, NULL, &m, msg, sizeof msg);
  if (rc != TPU_OK) {
    refusal(o, rc, "decode", msg);
    goto done;
  }
  rc = tpu_onnx_to_graph(m, &g, msg, sizeof msg);
  if (rc != TPU_OK) {
    refusal(o, rc, "convert", msg);
    goto done;
  }
  sets = data_sets(o->dir, &nsets);
  if (!nsets) {
    refusal(o, TPU_EINVAL, "data", "no test_data_set_0 directory");
    goto done;
  }
  o->result = R_PASS;
  for (size_t s = 0; s < nsets && o->result == R_PASS; s++) {
    tensors_free(&in);
    tensors_free(&ex);
    if ((rc = read_tensors(sets[s], "input", &in, msg)) != TPU_OK ||
        (rc = read_tensors(sets[s], "output", &ex, msg)) != TPU_OK) {
      refusal(o, rc, "test data", msg);
      break;
    }
    int64_t batch = batch_of(m, &in);
    if (batch < 1) {
      /* An empty batch: programs take batch >= 1. Whether the model would compile at all says
       * the more useful reason. */
      tpu_graph_program_t *p1 = NULL;
      rc = tpu_graph_compile(g, eng, 1, NULL, &p1);
      tpu_graph_program_free(p1);
      if (rc != TPU_OK) snprintf(msg, sizeof msg, "%s", tpu_graph_error(g));
      else snprintf(msg, sizeof msg, "an empty batch (the test's dimension 0 is 0; programs "
                    "take a batch of at least 1)");
      refusal(o, rc != TPU_OK ? rc : TPU_ENOTSUP, "compile", msg);
      break;
    }
    if (!p || batch != pbatch) {
      if (p)
        for (size_t k = 0; k < tpu_graph_program_output_count(p); k++) free(outs[k]);
      tpu_graph_program_free(p);
      p = NULL;
      free(outs);
      free(ins);
      outs = NULL, ins = NULL;
      rc = tpu_graph_compile(g, eng, batch, NULL, &p);
      if (rc != TPU_OK) {
        snprintf(msg, sizeof msg, "%s", tpu_graph_error(g));
        refusal(o, rc, "compile", msg);
        break;
      }
      pbatch = batch;
      size_t no = tpu_graph_program_output_count(p), ni = tpu_graph_program_input_count(p);
      outs = xmalloc((no ? no : 1) * sizeof *outs);
      ins = xmalloc((ni ? ni : 1) * sizeof *ins);
      for (size_t k = 0; k < no; k++) {
        tpu_graph_io_t io;
        tpu_graph_program_output(p, k, &io);
        outs[k] = xmalloc(io.bytes);
      }
    }
    size_t ni = tpu_graph_program_input_count(p), no = tpu_graph_program_output_count(p);
    if (in.n != ni) {
      snprintf(msg, sizeof msg, "the test gives %zu inputs, the program takes %zu", in.n, ni);
      set_fail(o, m, sets[s], msg);
      break;
    }
    if (ex.n != no) {
      snprintf(msg, sizeof msg, "the test expects %zu outputs, the program gives %zu", ex.n, no);
      set_fail(o, m, sets[s], msg);
      break;
    }
    static const uint8_t empty[1];
    int ok = 1;
    for (size_t k = 0; k < ni && ok; k++) {
      tpu_graph_io_t io;
      tpu_graph_program_input(p, k, &io);
      const tpu_onnx_tensor_t *t = match(&in, k, io.name);
      if (!(ok = fits(t, &io, "input", msg))) set_fail(o, m, sets[s], msg);
      ins[k] = t->data ? t->data : empty;
    }
    for (size_t k = 0; k < no && ok; k++) {
      tpu_graph_io_t io;
      tpu_graph_program_output(p, k, &io);
      memset(outs[k], 0xa5, io.bytes); /* not NaN: an output never written shows as wrong */
      if (!(ok = fits(match(&ex, k, io.name), &io, "output", msg))) set_fail(o, m, sets[s], msg);
    }
    if (!ok) break;
    rc = tpu_graph_program_run(p, ins, outs);
    if (rc != TPU_OK) {
      snprintf(msg, sizeof msg, "run: %s: %s", tpu_strerror(rc), tpu_graph_program_error(p));
      set_fail(o, m, sets[s], msg);
      break;
    }
    for (size_t k = 0; k < no; k++) {
      tpu_graph_io_t io;
      tpu_graph_program_output(p, k, &io);
      if (!compare(&io, outs[k], match(&ex, k, io.name), msg)) {
        set_fail(o, m, sets[s], msg);
        break;
      }
    }
  }
  if (export_dir && o->result == R_PASS && nsets) {
    tensors_free(&in);
    tensors_free(&ex);
    int64_t batch = 1;
    if (read_tensors(sets[0], "input", &in, msg) == TPU_OK &&
        read_tensors(sets[0], "output", &ex, msg) == TPU_OK &&
        (batch = batch_of(m, &in)) == pbatch) {
      int batched = 0;
      for (size_t i = 0; i < m->ninputs; i++)
        batched |= !m->inputs[i].initializer && m->inputs[i].ndim > 0 &&
                   m->inputs[i].dims[0] == TPU_GRAPH_BATCH;
      if (export_test(o, p, &in, &ex, batched, batch, msg) != 0)
        fprintf(stderr, "onnx_backend: %s: %s\n", o->test, msg);
    }
  }
done:
  if (outs && p)
    for (size_t k = 0; k < tpu_graph_program_output_count(p); k++) free(outs[k]);
  free(outs);
  free(ins);
  tensors_free(&in);
  tensors_free(&ex);
  for (size_t s = 0; s < nsets; s++) free(sets[s]);
  free(sets);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
  tpu_onnx_free(m);
}

/* ---- isolation: each test in a child process ---- */

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return 0;
    p += w, n -= (size_t)w;
  }
  return 1;
}

static void put_str(int fd, const char *s) {
  uint32_t n = s ? (uint32_t)strlen(s) : UINT32_MAX;
  write_all(fd, &n, sizeof n);
  if (s) write_all(fd, s, n);
}

/* Reads a string put_str wrote from buf[*at..len); 0 when the record is cut short. */
static int get_str(const char *buf, size_t len, size_t *at, char **s) {
  uint32_t n;
  if (len - *at < sizeof n) return 0;
  memcpy(&n, buf + *at, sizeof n);
  *at += sizeof n;
  *s = NULL;
  if (n == UINT32_MAX) return 1;
  if (len - *at < n) return 0;
  *s = xmalloc(n + 1);
  memcpy(*s, buf + *at, n);
  (*s)[n] = 0;
  *at += n;
  return 1;
}

/* A test that crashed or ran out of time is a FAIL, grouped by kind and the model's ops. */
static void child_died(outcome_t *o, const char *what) {
  char path[4096], err[MSG];
  snprintf(path, sizeof path, "%s/model.onnx", o->dir);
  tpu_onnx_model_t *m = NULL;
  o->result = R_FAIL;
  o->msg = xstrdup(what);
  if (tpu_onnx_load(path, 0, NULL, &m, err, sizeof err) == TPU_OK) {
    char ops[128];
    ops_of(m, ops, sizeof ops);
    size_t n = strlen(ops) + 64;
    o->key = xmalloc(n);
    snprintf(o->key, n, "%s in %s", strncmp(what, "timed out", 9) ? "crash" : "timeout", ops);
    tpu_onnx_free(m);
  } else {
    o->key = xstrdup(strncmp(what, "timed out", 9) ? "crash" : "timeout");
  }
}

/* Runs one test in a child process with its own engine (the parent's worker threads would not
 * survive fork), killed after `limit` seconds; the outcome comes back through a pipe. */
static void run_isolated(outcome_t *o, unsigned limit) {
  int fds[2];
  fflush(stdout);
  fflush(stderr);
  if (pipe(fds) != 0) {
    child_died(o, "cannot create a pipe for the test's process");
    return;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    child_died(o, "cannot fork the test's process");
    return;
  }
  if (pid == 0) {
    close(fds[0]);
    alarm(limit); /* SIGALRM's default action ends the process */
    tpu_engine_t *eng = NULL;
    tpu_status_t rc = tpu_engine_create(NULL, &eng);
    if (rc != TPU_OK) {
      char msg[256];
      snprintf(msg, sizeof msg, "tpu_engine_create: %s", tpu_strerror(rc));
      o->result = R_FAIL, o->key = xstrdup("engine"), o->msg = xstrdup(msg);
    } else {
      run_test(eng, o);
    }
    int r = (int)o->result;
    write_all(fds[1], &r, sizeof r);
    put_str(fds[1], o->key);
    put_str(fds[1], o->msg);
    _exit(0); /* no atexit handlers, no stdio flush of the parent's buffers */
  }
  close(fds[1]);
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap * 2 + 4096;
      char *nb = realloc(buf, cap);
      if (!nb) break;
      buf = nb;
    }
    ssize_t n = read(fds[0], buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  int r;
  size_t at = sizeof r;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && len >= sizeof r) {
    memcpy(&r, buf, sizeof r);
    if (r >= R_PASS && r <= R_REFUSED && get_str(buf, len, &at, &o->key) &&
        get_str(buf, len, &at, &o->msg)) {
      o->result = (result_t)r;
      free(buf);
      return;
    }
  }
  free(buf);
  free(o->key), free(o->msg);
  o->key = o->msg = NULL;
  char what[256];
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    snprintf(what, sizeof what, "timed out (over %u s)", limit);
  else if (WIFSIGNALED(status))
    snprintf(what, sizeof what, "crashed: signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else
    snprintf(what, sizeof what, "its process exited with status %d before reporting",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  child_died(o, what);
}

/* ---- the list of tests ---- */

static char **tests;
static size_t ntests, captests;

static void add_test(const char *dir) {
  if (ntests == captests) {
    captests = captests * 2 + 256;
    char **nt = realloc(tests, captests * sizeof *nt);
    if (!nt) {
      fprintf(stderr, "onnx_backend: out of memory\n");
      exit(2);
    }
    tests = nt;
  }
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  tests[ntests] = xmalloc(n + 1);
  memcpy(tests[ntests], dir, n);
  tests[ntests++][n] = 0;
}

static int visit(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)ftw;
  size_t n = strlen(path);
  if (flag == FTW_F && n >= 11 && strcmp(path + n - 11, "/model.onnx") == 0) {
    char *dir = xstrdup(path);
    dir[n - 11] = 0;
    add_test(dir);
    free(dir);
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "node/test_add" for ".../data/node/test_add". */
static const char *short_name(const char *dir) {
  const char *last = strrchr(dir, '/');
  if (!last || last == dir) return dir;
  const char *p = last - 1;
  while (p > dir && *p != '/') p--;
  return *p == '/' ? p + 1 : p;
}

/* ---- expected failures ---- */

static char **xf_names, **xf_why;
static size_t nxf;

static void load_xfail(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "onnx_backend: cannot read --xfail file '%s': %s\n", path, strerror(errno));
    exit(2);
  }
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || *p == '\n' || !*p) continue;
    char *end = p;
    while (*end && *end != ' ' && *end != '\t' && *end != '\n') end++;
    char *why = end;
    while (*why == ' ' || *why == '\t') why++;
    why[strcspn(why, "\n")] = 0;
    *end = 0;
    char **nn = realloc(xf_names, (nxf + 1) * sizeof *nn);
    char **nw = nn ? realloc(xf_why, (nxf + 1) * sizeof *nw) : NULL;
    if (!nn || !nw) exit(2);
    xf_names = nn;
    xf_why = nw;
    xf_names[nxf] = xstrdup(p);
    xf_why[nxf++] = xstrdup(*why ? why : "(no reason given)");
  }
  fclose(f);
}

static const char *xfail_reason(const char *test) {
  for (size_t i = 0; i < nxf; i++)
    if (strcmp(xf_names[i], test) == 0) return xf_why[i];
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: onnx_backend [--verbose] [--list-failures] [--expect-no-fail] "
                  "[--no-fork] [--timeout S] [--xfail FILE] [--export-repo DIR] [--root DIR]... "
                  "[TEST_DIR]...\n");
  exit(2);
}

int main(int argc, char **argv) {
  int verbose = 0, list_failures = 0, isolate = 1;
  unsigned limit = 60;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    struct stat st;
    if (!strcmp(a, "--verbose")) {
      verbose = 1;
    } else if (!strcmp(a, "--list-failures")) {
      list_failures = 1;
    } else if (!strcmp(a, "--no-fork")) {
      isolate = 0;
    } else if (!strcmp(a, "--timeout")) {
      if (++i >= argc || (limit = (unsigned)strtoul(argv[i], NULL, 10)) == 0) usage();
    } else if (!strcmp(a, "--export-repo")) {
      if (++i >= argc) usage();
      export_dir = argv[i];
      if (mkdir(export_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "onnx_backend: cannot create '%s': %s\n", export_dir, strerror(errno));
        return 2;
      }
    } else if (!strcmp(a, "--xfail")) {
      if (++i >= argc) usage();
      load_xfail(argv[i]);
    } else if (!strcmp(a, "--expect-no-fail")) {
      /* the default */
    } else if (!strcmp(a, "--root")) {
      if (++i >= argc) usage();
      if (stat(argv[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "onnx_backend: no test data at '%s' (install libonnx-testdata)\n",
                argv[i]);
        return 77;
      }
      size_t before = ntests;
      if (nftw(argv[i], visit, 16, FTW_PHYS) != 0) {
        fprintf(stderr, "onnx_backend: cannot walk '%s': %s\n", argv[i], strerror(errno));
        return 2;
      }
      qsort(tests + before, ntests - before, sizeof *tests, cmp_str);
    } else if (a[0] == '-') {
      usage();
    } else {
      if (stat(a, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "onnx_backend: no test directory '%s'\n", a);
        return 77;
      }
      add_test(a);
    }
  }
  if (!ntests) usage();

  tpu_engine_t *eng = NULL;
  tpu_status_t rc = isolate ? TPU_OK : tpu_engine_create(NULL, &eng);
  if (rc != TPU_OK) {
    fprintf(stderr, "onnx_backend: tpu_engine_create: %s\n", tpu_strerror(rc));
    return 2;
  }
  outcome_t *out = calloc(ntests, sizeof *out);
  if (!out) return 2;
  int counts[4] = {0}, xfailed = 0;
  groups_t skips = {0}, refused = {0}, fails = {0};
  for (size_t i = 0; i < ntests; i++) {
    outcome_t *o = &out[i];
    o->dir = tests[i];
    o->test = xstrdup(short_name(tests[i]));
    if (isolate) run_isolated(o, limit);
    else run_test(eng, o);
    const char *xr = xfail_reason(o->test);
    if (xr && o->result == R_FAIL) { /* expected: reported apart, not a failure */
      xfailed++;
      printf("XFAIL   %s: %s (expected: %s)\n", o->test, o->msg ? o->msg : "", xr);
      continue;
    }
    if (xr && o->result == R_PASS) {
      o->result = R_FAIL;
      free(o->msg);
      o->msg = xstrdup("passes but is listed in --xfail: remove it from the list");
      free(o->key);
      o->key = xstrdup("xfail list out of date");
    }
    counts[o->result]++;
    if (verbose && !list_failures) {
      printf("%-7s %s%s%s\n", result_names[o->result], o->test, o->msg ? ": " : "",
             o->msg ? o->msg : "");
      fflush(stdout);
    }
    if (o->result == R_SKIP) group_add(&skips, o->key, o->test, o->msg);
    if (o->result == R_REFUSED) group_add(&refused, o->key, o->test, o->msg);
    if (o->result == R_FAIL) group_add(&fails, o->key, o->test, o->msg);
  }

  if (list_failures) {
    for (size_t i = 0; i < ntests; i++)
      if (out[i].result == R_FAIL) printf("%s\n", out[i].dir);
  } else {
    printf("\nonnx_backend: %d passed, %d failed, %d skipped (of %zu tests; %d of the skipped "
           "refused as invalid, listed apart; %d expected failures of the test data, "
           "listed above)\n",
           counts[R_PASS], counts[R_FAIL], counts[R_SKIP] + counts[R_REFUSED], ntests,
           counts[R_REFUSED], xfailed);
    groups_print(&skips, "skipped (not supported), by reason");
    groups_print(&refused, "refused (load errors other than not supported: to audit), by reason");
    groups_print(&fails, "failures, by kind and ops");
    if (counts[R_FAIL]) {
      printf("\nfailures:\n");
      for (size_t i = 0; i < ntests; i++)
        if (out[i].result == R_FAIL) printf("  %s: %s\n", out[i].test, out[i].msg);
    }
  }
  for (size_t i = 0; i < ntests; i++) {
    free(out[i].test), free(out[i].key), free(out[i].msg), free(tests[i]);
  }
  free(out);
  free(tests);
  groups_free(&skips), groups_free(&refused), groups_free(&fails);
  tpu_engine_free(eng);
  return counts[R_FAIL] ? 1 : 0;
}
