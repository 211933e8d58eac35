/*
 * onnx_bench.c - tpud's models in-process: tpu_model_infer after tpu_model_load, per model and
 * batch size, for bench/onnx_vs_ort.sh (which puts ONNX Runtime beside it on the same files).
 *
 * DESIGN
 * Each NAME=DIR argument is a model version directory (model.json and its checkpoint), loaded
 * once on one engine (--threads, default 1). Inputs are made from the model's own input list:
 * FP32 values uniform in [-2, 2), index inputs (has_range: Gather ids) uniform in their range,
 * from a generator reset to the same seed for every model, so two forms of one network (a dense
 * chain and its ONNX graph) get the same rows and their outputs can be compared (--pair A,B:
 * worst absolute difference, printed, and a failure above --tol).
 *
 * Timing. For each batch size, the models are timed in interleaved slices (model 1, model 2,
 * ..., model 1, ...; --slices of each), so a change in a shared machine's load hits them all
 * alike. A slice is --slice-ms of groups of calls, each group sized from a warm-up to take about
 * 1 ms, so the clock is read once per group; the slice's value is the median group time per
 * call, the model's value the median of its slices. Only tpu_model_infer is timed: the input
 * is already packed rows and the output a preallocated buffer.
 *
 * Output: one JSON object per line, {"side":"tpud","model":...,"batch":...,"ns":...,...}, for the
 * script to aggregate; --io DIR also writes every model's 64-row inputs and its outputs at batch
 * 64 and at batch 1 (the first row) as raw little-endian tensors with a manifest (DIR/NAME.json)
 * that the ONNX Runtime side reads, to check its outputs against ours on the same rows.
 * --describe prints each graph model's compiled program (tpu_model_describe) to stderr.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "tpu_engine.h"

#define MAX_MODELS 16
#define MAX_BATCHES 8
#define MAX_PAIRS 8
#define IO_ROWS 64      /* rows written by --io and compared by --pair */
#define MAX_ROWS 4096   /* the largest batch */
static size_t g_rows = IO_ROWS; /* rows of inputs made: the largest of IO_ROWS and --batches */

typedef struct {
  const char *name, *dir;
  tpu_model_t *model;
  unsigned char *in;  /* g_rows packed input rows */
  unsigned char *out; /* g_rows packed output rows */
  size_t in_row, out_row;
  double ns[MAX_BATCHES];
  double slice_ns[MAX_BATCHES][64];
} bench_model_t;

static void die(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "onnx_bench: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  exit(1);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng_state;
static uint64_t rng_next(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1p-53; }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Fills g_rows packed input rows from the model's input list (see DESIGN). */
static void make_inputs(bench_model_t *m) {
  rng_state = 12345;
  size_t n_in = tpu_model_input_count(m->model);
  for (size_t r = 0; r < g_rows; r++) {
    for (size_t i = 0; i < n_in; i++) {
      const tpu_model_tensor_t *t = tpu_model_input(m->model, i);
      unsigned char *p = m->in + r * m->in_row + t->offset;
      size_t esize = t->row_elems ? t->row_bytes / t->row_elems : 0;
      for (size_t e = 0; e < t->row_elems; e++) {
        if (t->has_range) {
          int64_t span = t->range_hi - t->range_lo;
          int64_t v = t->range_lo + (int64_t)(rng_next() % (uint64_t)(span > 0 ? span : 1));
          if (esize == 8) {
            memcpy(p + e * 8, &v, 8);
          } else {
            int32_t v32 = (int32_t)v;
            memcpy(p + e * 4, &v32, 4);
          }
        } else if (strcmp(t->datatype, "FP32") == 0) {
          float f = (float)(rng_unit() * 4.0 - 2.0);
          memcpy(p + e * 4, &f, 4);
        } else {
          memset(p + e * esize, 0, esize);
        }
      }
    }
  }
}

/* Times `calls` calls of `rows` rows; returns ns per call. */
static double time_calls(bench_model_t *m, size_t rows, size_t calls) {
  double t0 = now_ns();
  for (size_t c = 0; c < calls; c++) {
    if (tpu_model_infer(m->model, rows, m->in, m->out) != TPU_OK)
      die("%s: tpu_model_infer failed in a %s", m->name, "timed call");
  }
  return (now_ns() - t0) / (double)calls;
}

/* Writes the rows of tensor t (input or output) of a packed buffer to DIR/NAME.KIND.TENSOR.bin
 * as one contiguous [rows, ...] array; prints its manifest entry to `man`. */
static void write_tensor(FILE *man, const char *dir, const bench_model_t *m, const char *kind,
                         const tpu_model_tensor_t *t, const unsigned char *buf, size_t row_bytes,
                         size_t rows, int first) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%s.%s.bin", dir, m->name, kind, t->name);
  FILE *f = fopen(path, "wb");
  if (!f) die("cannot write %s: %s", path, strerror(errno));
  for (size_t r = 0; r < rows; r++) fwrite(buf + r * row_bytes + t->offset, 1, t->row_bytes, f);
  if (fclose(f) != 0) die("cannot write %s: %s", path, strerror(errno));
  fprintf(man, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[%zu", first ? "" : ",",
          t->name, t->datatype, rows);
  for (size_t d = 1; d < t->rank; d++) fprintf(man, ",%lld", (long long)t->shape[d]);
  fprintf(man, "],\"file\":\"%s.%s.%s.bin\"}", m->name, kind, t->name);
}

static void write_io(const char *dir, bench_model_t *m) {
  char path[4096];
  unsigned char *out1 = malloc(m->out_row);
  if (!out1) die("out of memory%s%s", "", "");
  if (tpu_model_infer(m->model, IO_ROWS, m->in, m->out) != TPU_OK ||
      tpu_model_infer(m->model, 1, m->in, out1) != TPU_OK)
    die("%s: tpu_model_infer failed%s", m->name, "");
  snprintf(path, sizeof path, "%s/%s.json", dir, m->name);
  FILE *man = fopen(path, "w");
  if (!man) die("cannot write %s: %s", path, strerror(errno));
  fprintf(man, "{\"model\":\"%s\",\"dir\":\"%s\",\"inputs\":[", m->name, m->dir);
  for (size_t i = 0; i < tpu_model_input_count(m->model); i++)
    write_tensor(man, dir, m, "in", tpu_model_input(m->model, i), m->in, m->in_row, IO_ROWS,
                 i == 0);
  fprintf(man, "],\"outputs64\":[");
  for (size_t i = 0; i < tpu_model_output_count(m->model); i++)
    write_tensor(man, dir, m, "out64", tpu_model_output(m->model, i), m->out, m->out_row,
                 IO_ROWS, i == 0);
  fprintf(man, "],\"outputs1\":[");
  for (size_t i = 0; i < tpu_model_output_count(m->model); i++)
    write_tensor(man, dir, m, "out1", tpu_model_output(m->model, i), out1, m->out_row, 1,
                 i == 0);
  fprintf(man, "]}\n");
  if (fclose(man) != 0) die("cannot write %s: %s", path, strerror(errno));
  free(out1);
}

/* Worst absolute difference between two models' FP32 outputs on the same IO_ROWS rows. */
static double pair_diff(bench_model_t *a, bench_model_t *b) {
  if (a->in_row != b->in_row || memcmp(a->in, b->in, IO_ROWS * a->in_row) != 0)
    die("--pair %s,%s: the two models do not take the same inputs", a->name, b->name);
  if (a->out_row != b->out_row)
    die("--pair %s,%s: the two models' outputs differ in size", a->name, b->name);
  if (tpu_model_infer(a->model, IO_ROWS, a->in, a->out) != TPU_OK ||
      tpu_model_infer(b->model, IO_ROWS, b->in, b->out) != TPU_OK)
    die("--pair %s,%s: tpu_model_infer failed", a->name, b->name);
  double worst = 0;
  const float *x = (const float *)(void *)a->out, *y = (const float *)(void *)b->out;
  for (size_t i = 0; i < IO_ROWS * a->out_row / sizeof(float); i++) {
    double d = fabs((double)x[i] - (double)y[i]);
    if (!(d <= worst)) worst = d; /* NaN counts as worst */
  }
  return worst;
}

static void usage(void) {
  fprintf(stderr,
          "usage: onnx_bench [--threads N] [--batches 1,64] [--slices N] [--slice-ms MS]\n"
          "                  [--io DIR] [--pair A,B]... [--tol X] [--describe] NAME=DIR...\n");
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1, slices = 5;
  double slice_ms = 40, tol = 1e-4;
  size_t batches[MAX_BATCHES] = {1, 64}, n_batches = 2;
  const char *io_dir = NULL;
  int describe = 0;
  const char *pairs[MAX_PAIRS][2];
  size_t n_pairs = 0;
  static bench_model_t models[MAX_MODELS];
  size_t n_models = 0;

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--threads") == 0 && v) {
      threads = (unsigned)strtoul(v, NULL, 10), i++;
    } else if (strcmp(a, "--slices") == 0 && v) {
      slices = (unsigned)strtoul(v, NULL, 10), i++;
      if (slices < 1 || slices > 64) usage();
    } else if (strcmp(a, "--slice-ms") == 0 && v) {
      slice_ms = strtod(v, NULL), i++;
    } else if (strcmp(a, "--tol") == 0 && v) {
      tol = strtod(v, NULL), i++;
    } else if (strcmp(a, "--describe") == 0) {
      describe = 1;
    } else if (strcmp(a, "--io") == 0 && v) {
      io_dir = v, i++;
    } else if (strcmp(a, "--batches") == 0 && v) {
      n_batches = 0;
      for (char *s = argv[++i], *end; *s && n_batches < MAX_BATCHES; s = end) {
        batches[n_batches++] = strtoul(s, &end, 10);
        if (*end == ',') end++;
        else if (*end) usage();
      }
    } else if (strcmp(a, "--pair") == 0 && v && n_pairs < MAX_PAIRS) {
      char *comma = strchr(argv[++i], ',');
      if (!comma) usage();
      *comma = '\0';
      pairs[n_pairs][0] = argv[i], pairs[n_pairs][1] = comma + 1, n_pairs++;
    } else if (a[0] != '-' && strchr(a, '=') && n_models < MAX_MODELS) {
      char *eq = strchr(argv[i], '=');
      *eq = '\0';
      models[n_models].name = argv[i], models[n_models].dir = eq + 1, n_models++;
    } else {
      usage();
    }
  }
  if (!n_models) usage();

  tpu_engine_config_t ecfg = {.threads = threads};
  tpu_engine_t *engine = NULL;
  if (tpu_engine_create(&ecfg, &engine) != TPU_OK) die("cannot create the engine%s%s", "", "");
  char isa[256];
  tpu_engine_describe(engine, isa, sizeof isa);
  fprintf(stderr, "onnx_bench: engine threads %u: %s\n", threads, isa);

  for (size_t i = 0; i < n_models; i++) {
    bench_model_t *m = &models[i];
    char err[1024];
    if (tpu_model_load(engine, m->dir, m->name, 1, NULL, &m->model, err, sizeof err) != TPU_OK)
      die("cannot load %s: %s", m->dir, err);
    for (size_t b = 0; b < n_batches; b++) {
      if (batches[b] < 1 || batches[b] > MAX_ROWS) die("batch sizes must be 1..4096%s%s", "", "");
      if (batches[b] > g_rows) g_rows = batches[b];
    }
    m->in_row = tpu_model_in_row_bytes(m->model);
    m->out_row = tpu_model_out_row_bytes(m->model);
    m->in = calloc(g_rows, m->in_row);
    m->out = calloc(g_rows, m->out_row);
    if (!m->in || !m->out) die("out of memory%s%s", "", "");
    make_inputs(m);
    if (io_dir) write_io(io_dir, m);
    if (describe) { /* the compiled program of each timed batch's bucket, to stderr */
      for (size_t b = 0; b < n_batches; b++) {
        int bi = tpu_model_bucket_index(m->model, batches[b]);
        char desc[8192];
        tpu_model_describe(m->model, (size_t)bi, desc, sizeof desc);
        fprintf(stderr, "%s, batch %zu (bucket %d):\n%s", m->name, batches[b], bi,
                desc[0] ? desc : "dense chain\n");
      }
    }
  }

  int failed = 0;
  for (size_t p = 0; p < n_pairs; p++) {
    bench_model_t *a = NULL, *b = NULL;
    for (size_t i = 0; i < n_models; i++) {
      if (strcmp(models[i].name, pairs[p][0]) == 0) a = &models[i];
      if (strcmp(models[i].name, pairs[p][1]) == 0) b = &models[i];
    }
    if (!a || !b) die("--pair %s,%s: no such model", pairs[p][0], pairs[p][1]);
    double d = pair_diff(a, b);
    int ok = d <= tol;
    failed |= !ok;
    printf("{\"side\":\"pair\",\"a\":\"%s\",\"b\":\"%s\",\"max_abs_diff\":%.3g,\"ok\":%s}\n",
           a->name, b->name, d, ok ? "true" : "false");
  }

  for (size_t bi = 0; bi < n_batches; bi++) {
    size_t rows = batches[bi];
    size_t group[MAX_MODELS];
    for (size_t i = 0; i < n_models; i++) { /* warm up; size a group to about 1 ms */
      size_t n = 1;
      double t;
      while ((t = time_calls(&models[i], rows, n)) * (double)n < 1e6 && n < (1u << 24)) n *= 2;
      group[i] = n;
      (void)t;
    }
    for (unsigned s = 0; s < slices; s++) {
      for (size_t i = 0; i < n_models; i++) {
        double samples[4096];
        size_t ns = 0;
        double end = now_ns() + slice_ms * 1e6;
        do {
          samples[ns++] = time_calls(&models[i], rows, group[i]);
        } while (now_ns() < end && ns < 4096);
        models[i].slice_ns[bi][s] = median(samples, ns);
      }
    }
    for (size_t i = 0; i < n_models; i++) {
      bench_model_t *m = &models[i];
      double v[64];
      memcpy(v, m->slice_ns[bi], slices * sizeof *v);
      m->ns[bi] = median(v, slices);
      printf("{\"side\":\"tpud\",\"model\":\"%s\",\"batch\":%zu,\"ns\":%.1f,\"slices\":[",
             m->name, rows, m->ns[bi]);
      for (unsigned s = 0; s < slices; s++) printf("%s%.1f", s ? "," : "", m->slice_ns[bi][s]);
      printf("],\"format\":\"%s\"}\n", tpu_model_format_name(m->model));
    }
    fflush(stdout);
  }

  for (size_t i = 0; i < n_models; i++) {
    tpu_model_free(models[i].model);
    free(models[i].in);
    free(models[i].out);
  }
  tpu_engine_free(engine);
  return failed;
}
