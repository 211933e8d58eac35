/*
 * test_graph_tensor.c - the graph's tensor-op kernels (engine/graph/ops_tensor.c), run through
 * compiled programs: normalization, reductions, ArgMax and data movement.
 *
 * DESIGN
 * Each test builds a small graph with the public builder, compiles it for batch 1 and runs it
 * on fresh random inputs (seed printed on failure). Expected values come from a plain
 * double-precision reference written here from the ONNX operator definitions, loop by loop,
 * never from constants typed in. Tolerances: FP32 results within rtol 1e-5 (plus a small atol
 * near zero) of the reference; integer and data-movement results exactly.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_engine.h"
#include "tpu_graph.h"
#include "graph_test.h"
#include "tpu_test.h"
/* The kernel contract, for calling the Constant and Shape kernels directly: the compiler takes
 * their values from inference and never runs them as steps. */
#include "../../engine/graph/exec_internal.h"

/* ---- building and running ---- */

/* Adds a node that must succeed; returns its index. */
static size_t nd(tpu_graph_t *g, const char *op, int opset, const char *ins, const char *outs) {
  char b1[256], b2[256];
  const char *in[16], *out[16];
  size_t nin = tg_split(ins, b1, sizeof b1, in), nout = tg_split(outs, b2, sizeof b2, out), idx = 0;
  tpu_status_t st = tpu_graph_add_node(g, op, op, NULL, opset, nin, in, nout, out, &idx);
  if (st != TPU_OK) fprintf(stderr, "add_node %s: %s\n", op, tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
  return idx;
}

static void attr_i(tpu_graph_t *g, size_t node, const char *name, int64_t v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_INT, .i = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, node, &a) == TPU_OK);
}

static void attr_f(tpu_graph_t *g, size_t node, const char *name, float v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_FLOAT, .f = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, node, &a) == TPU_OK);
}

static void attr_ints(tpu_graph_t *g, size_t node, const char *name, size_t n, const int64_t *v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_INTS, .n = n, .ints = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, node, &a) == TPU_OK);
}

static void tensor(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dt, int rank,
                   const int64_t *dims) {
  CU_ASSERT_FATAL(tpu_graph_add_tensor(g, name, dt, rank, dims) == TPU_OK);
}

static void init_i64(tpu_graph_t *g, const char *name, size_t n, const int64_t *v) {
  int64_t d = (int64_t)n;
  CU_ASSERT_FATAL(tpu_graph_add_initializer(g, name, TPU_GRAPH_INT64, 1, &d, v, n * 8) ==
                  TPU_OK);
}

static void init_f32(tpu_graph_t *g, const char *name, int rank, const int64_t *dims,
                     const float *v, size_t n) {
  CU_ASSERT_FATAL(tpu_graph_add_initializer(g, name, TPU_GRAPH_FP32, rank, dims, v, n * 4) ==
                  TPU_OK);
}

static void io(tpu_graph_t *g, const char *ins, const char *outs) {
  char b1[256], b2[256];
  const char *in[16], *out[16];
  size_t nin = tg_split(ins, b1, sizeof b1, in), nout = tg_split(outs, b2, sizeof b2, out);
  CU_ASSERT_FATAL(tpu_graph_set_inputs(g, nin, in) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_set_outputs(g, nout, out) == TPU_OK);
}

/* Compiles g for batch 1 (failing the test on error). */
static tpu_graph_program_t *compile(tpu_graph_t *g) {
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), 1, NULL, &p);
  if (st != TPU_OK) fprintf(stderr, "compile: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK && p);
  return p;
}

/* Checks output i of p has `elems` elements of dtype dt. */
static void check_out(const tpu_graph_program_t *p, size_t i, tpu_graph_dtype_t dt,
                      size_t elems) {
  tpu_graph_io_t o;
  CU_ASSERT_FATAL(tpu_graph_program_output(p, i, &o) == TPU_OK);
  CU_ASSERT_FATAL(o.dtype == dt);
  CU_ASSERT_FATAL(o.elems == elems);
}

static void run_ok(tpu_graph_program_t *p, const void *const *in, void *const *out) {
  tpu_status_t st = tpu_graph_program_run(p, in, out);
  if (st != TPU_OK) fprintf(stderr, "run: %s\n", tpu_graph_program_error(p));
  CU_ASSERT_FATAL(st == TPU_OK);
}

static void fill(float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = tpu_test_rand_float(lo, hi);
}

/* FP32 results against a double reference: rtol 1e-5 with an atol of 1e-6. */
static int close_all(const float *got, const double *want, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)got[i] - want[i]);
    if (!(err <= 1e-5 * fabs(want[i]) + 1e-6)) {
      fprintf(stderr, "element %zu: got %.9g, want %.9g (TPU_TEST_SEED=%llu)\n", i, got[i],
              want[i], (unsigned long long)tpu_test_seed());
      return 0;
    }
  }
  return 1;
}

/* ---- Softmax, LogSoftmax ---- */

/* Softmax over n elements strided by inner, for every (outer, inner) position. */
static void ref_softmax(const float *x, double *y, size_t outer, size_t n, size_t inner,
                        int logsm) {
  for (size_t o = 0; o < outer; o++)
    for (size_t j = 0; j < inner; j++) {
      double mx = -INFINITY, sum = 0;
      for (size_t k = 0; k < n; k++) mx = fmax(mx, x[(o * n + k) * inner + j]);
      for (size_t k = 0; k < n; k++) sum += exp(x[(o * n + k) * inner + j] - mx);
      for (size_t k = 0; k < n; k++) {
        double v = x[(o * n + k) * inner + j] - mx;
        y[(o * n + k) * inner + j] = logsm ? v - log(sum) : exp(v) / sum;
      }
    }
}

/* One softmax node over x [2,3,4]; axis < 99 sets the attribute. */
static void softmax_case(const char *op, int opset, int64_t axis, size_t outer, size_t n,
                         size_t inner) {
  int64_t d[3] = {2, 3, 4};
  float x[24], y[24];
  double want[24];
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 3, d);
  size_t k = nd(g, op, opset, "x", "y");
  if (axis < 99) attr_i(g, k, "axis", axis);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_FP32, 24);
  fill(x, 24, -8, 8);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  ref_softmax(x, want, outer, n, inner, strcmp(op, "LogSoftmax") == 0);
  TPU_ASSERT_SEED(close_all(y, want, 24));
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_softmax(void) {
  /* Opset 13: one axis. Default -1 (the last), axis 1 strided by 4, axis 0 strided by 12. */
  softmax_case("Softmax", 13, 99, 6, 4, 1);
  softmax_case("Softmax", 13, 1, 2, 3, 4);
  softmax_case("Softmax", 13, -3, 1, 2, 12);
  softmax_case("LogSoftmax", 13, 1, 2, 3, 4);
  /* Before 13: coerced to 2-D at axis (default 1), normalized over the flattened rest. */
  softmax_case("Softmax", 11, 99, 2, 12, 1);
  softmax_case("Softmax", 11, 2, 6, 4, 1);
  softmax_case("Softmax", 1, 0, 1, 24, 1);
  softmax_case("LogSoftmax", 11, 99, 2, 12, 1);
}

static void test_softmax_large_and_dtype(void) {
  /* Large logits: max-subtracted, so no overflow to inf/NaN. */
  int64_t d[2] = {3, 5};
  float x[15], y[15];
  double want[15];
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 2, d);
  nd(g, "Softmax", 13, "x", "y");
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  fill(x, 15, 500, 700);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  ref_softmax(x, want, 3, 5, 1, 0);
  TPU_ASSERT_SEED(close_all(y, want, 15));
  tpu_graph_program_free(p);
  tpu_graph_free(g);

  /* FP16 passes inference (a float type) but this kernel refuses it, naming the input. */
  g = tg_new();
  tensor(g, "h", TPU_GRAPH_FP16, 2, d);
  nd(g, "Softmax", 13, "h", "y");
  io(g, "h", "y");
  p = NULL;
  CU_ASSERT(tpu_graph_compile(g, tg_engine(), 1, NULL, &p) == TPU_ENOTSUP);
  CU_ASSERT(strstr(tpu_graph_error(g), "'h'") != NULL);
  CU_ASSERT(strstr(tpu_graph_error(g), "FP16") != NULL);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- LayerNormalization, BatchNormalization ---- */

static void layernorm_case(int with_b, int axis, int with_stats) {
  enum { A = 2, Bd = 3, C = 8, N = A * Bd * C };
  int64_t d[3] = {A, Bd, C};
  int nax = axis < 0 ? 3 + axis : axis; /* normalized dims: d[nax..2] */
  size_t rows = 1, n = 1;
  for (int i = 0; i < 3; i++) *(i < nax ? &rows : &n) *= (size_t)d[i];
  float x[N], sc[N], b[N], y[N], mean[N], inv[N];
  double want[N], wmean[N], winv[N];
  fill(x, N, -3, 5);
  fill(sc, n, 0.5f, 2);
  fill(b, n, -1, 1);
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 3, d);
  init_f32(g, "scale", 3 - nax, d + nax, sc, n);
  if (with_b) init_f32(g, "bias", 3 - nax, d + nax, b, n);
  size_t k = nd(g, "LayerNormalization", 17, with_b ? "x,scale,bias" : "x,scale",
                with_stats ? "y,mean,inv" : "y");
  if (axis != -1) attr_i(g, k, "axis", axis);
  attr_f(g, k, "epsilon", 1e-3f);
  io(g, "x", with_stats ? "y,mean,inv" : "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_FP32, N);
  if (with_stats) check_out(p, 1, TPU_GRAPH_FP32, rows);
  const void *in[] = {x};
  void *out[] = {y, mean, inv};
  run_ok(p, in, out);
  for (size_t r = 0; r < rows; r++) {
    double m = 0, v = 0;
    for (size_t j = 0; j < n; j++) m += x[r * n + j];
    m /= (double)n;
    for (size_t j = 0; j < n; j++) v += (x[r * n + j] - m) * (x[r * n + j] - m);
    v /= (double)n;
    double is = 1 / sqrt(v + (double)1e-3f);
    for (size_t j = 0; j < n; j++)
      want[r * n + j] = (x[r * n + j] - m) * is * sc[j] + (with_b ? b[j] : 0);
    wmean[r] = m;
    winv[r] = is;
  }
  TPU_ASSERT_SEED(close_all(y, want, N));
  if (with_stats) {
    TPU_ASSERT_SEED(close_all(mean, wmean, rows));
    TPU_ASSERT_SEED(close_all(inv, winv, rows));
  }
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_layernorm(void) {
  layernorm_case(1, -1, 0);
  layernorm_case(0, -1, 0);
  layernorm_case(1, 1, 1);  /* normalized over [3,8] */
  layernorm_case(0, -2, 1);
}

static void test_layernorm_broadcast_scale(void) {
  /* Scale [1,4] and B [4] broadcast over normalized dims [3,4] (axis 1 of [2,3,4]). */
  int64_t d[3] = {2, 3, 4}, ds[2] = {1, 4}, db[1] = {4};
  float x[24], sc[4], b[4], y[24];
  double want[24];
  fill(x, 24, -2, 2);
  fill(sc, 4, 0.5f, 1.5f);
  fill(b, 4, -1, 1);
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 3, d);
  init_f32(g, "scale", 2, ds, sc, 4);
  init_f32(g, "bias", 1, db, b, 4);
  size_t k = nd(g, "LayerNormalization", 17, "x,scale,bias", "y");
  attr_i(g, k, "axis", 1);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  for (size_t r = 0; r < 2; r++) {
    double m = 0, v = 0;
    for (size_t j = 0; j < 12; j++) m += x[r * 12 + j] / 12.0;
    for (size_t j = 0; j < 12; j++) v += (x[r * 12 + j] - m) * (x[r * 12 + j] - m) / 12.0;
    for (size_t j = 0; j < 12; j++)
      want[r * 12 + j] = (x[r * 12 + j] - m) / sqrt(v + (double)1e-5f) * sc[j % 4] + b[j % 4];
  }
  TPU_ASSERT_SEED(close_all(y, want, 24));
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_batchnorm(void) {
  int64_t d[4] = {2, 3, 2, 2}, dc[1] = {3};
  float x[24], y[24], sc[3], b[3], mu[3], var[3];
  double want[24];
  fill(x, 24, -4, 4);
  fill(sc, 3, 0.5f, 2);
  fill(b, 3, -1, 1);
  fill(mu, 3, -1, 1);
  fill(var, 3, 0.1f, 3);
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 4, d);
  init_f32(g, "s", 1, dc, sc, 3);
  init_f32(g, "b", 1, dc, b, 3);
  init_f32(g, "m", 1, dc, mu, 3);
  init_f32(g, "v", 1, dc, var, 3);
  size_t k = nd(g, "BatchNormalization", 15, "x,s,b,m,v", "y");
  attr_f(g, k, "epsilon", 1e-2f);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  for (size_t i = 0; i < 24; i++) {
    size_t c = (i / 4) % 3;
    want[i] = (x[i] - mu[c]) / sqrt(var[c] + (double)1e-2f) * sc[c] + b[c];
  }
  TPU_ASSERT_SEED(close_all(y, want, 24));
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- ReduceSum, ReduceMean, ReduceMax ---- */

/* Reduces x [2,3,4] over the axes marked in red[] (all when none), like ONNX: out is laid out
 * over the kept dims in order. */
static size_t ref_reduce(const float *x, const int *red, int kind, double *out) {
  const size_t d[3] = {2, 3, 4};
  size_t od[3], cnt = 1, no = 1;
  for (int i = 0; i < 3; i++) {
    od[i] = red[i] ? 1 : d[i];
    no *= od[i];
    if (red[i]) cnt *= d[i];
  }
  for (size_t o = 0; o < no; o++) out[o] = kind == 2 ? -INFINITY : 0;
  for (size_t i = 0; i < 2; i++)
    for (size_t j = 0; j < 3; j++)
      for (size_t k = 0; k < 4; k++) {
        size_t oi = red[0] ? 0 : i, oj = red[1] ? 0 : j, ok = red[2] ? 0 : k;
        size_t o = (oi * od[1] + oj) * od[2] + ok;
        double v = x[(i * 3 + j) * 4 + k];
        if (kind == 2) out[o] = fmax(out[o], v);
        else out[o] += v;
      }
  if (kind == 1)
    for (size_t o = 0; o < no; o++) out[o] /= (double)cnt;
  return no;
}

/* kind 0 Sum, 1 Mean, 2 Max; axes as attribute or input by opset; keepdims 0/1. */
static void reduce_case(int kind, int opset, const int64_t *axes, size_t na, int keep) {
  static const char *const ops[] = {"ReduceSum", "ReduceMean", "ReduceMax"};
  int from_input = (kind == 0 && opset >= 13) || opset >= 18;
  int64_t d[3] = {2, 3, 4};
  float x[24], y[24];
  double want[24];
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 3, d);
  if (from_input && na) init_i64(g, "axes", na, axes);
  size_t k = nd(g, ops[kind], opset, from_input && na ? "x,axes" : "x", "y");
  if (!from_input && na) attr_ints(g, k, "axes", na, axes);
  if (keep != 1) attr_i(g, k, "keepdims", keep);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  int red[3] = {na == 0, na == 0, na == 0};
  for (size_t i = 0; i < na; i++) red[axes[i] < 0 ? axes[i] + 3 : axes[i]] = 1;
  fill(x, 24, -5, 5);
  size_t no = ref_reduce(x, red, kind, want);
  check_out(p, 0, TPU_GRAPH_FP32, no);
  tpu_graph_io_t o;
  CU_ASSERT_FATAL(tpu_graph_program_output(p, 0, &o) == TPU_OK);
  int rank = 0;
  for (int i = 0; i < 3; i++) rank += !red[i] || keep;
  CU_ASSERT(o.rank == rank);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  TPU_ASSERT_SEED(close_all(y, want, no));
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_reduce(void) {
  const int64_t a02[2] = {0, 2}, a1[1] = {-2}, a2[1] = {2}, a01[2] = {1, 0};
  for (int keep = 0; keep <= 1; keep++) {
    reduce_case(0, 11, a02, 2, keep); /* axes attribute */
    reduce_case(0, 13, a02, 2, keep); /* axes input */
    reduce_case(0, 13, a1, 1, keep);
    reduce_case(1, 13, a2, 1, keep);  /* ReduceMean: attribute until 18 */
    reduce_case(1, 18, a01, 2, keep);
    reduce_case(2, 13, a1, 1, keep);
    reduce_case(2, 18, a02, 2, keep); /* ReduceMax: input from 18 */
    reduce_case(0, 13, NULL, 0, keep); /* no axes: all */
    reduce_case(1, 11, NULL, 0, keep);
  }
}

static void test_reduce_noop_and_int(void) {
  /* noop_with_empty_axes=1 and no axes: the input comes back. */
  int64_t d[2] = {3, 4};
  float x[12], y[12];
  double want[12];
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 2, d);
  size_t k = nd(g, "ReduceSum", 13, "x", "y");
  attr_i(g, k, "noop_with_empty_axes", 1);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_FP32, 12);
  fill(x, 12, -1, 1);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  for (size_t i = 0; i < 12; i++) want[i] = x[i];
  TPU_ASSERT_SEED(close_all(y, want, 12));
  tpu_graph_program_free(p);
  tpu_graph_free(g);

  /* INT64 ReduceSum and ReduceMax over axis 1 of [3,4]. */
  int64_t xi[12], ys[3], ym[3];
  for (size_t i = 0; i < 12; i++) xi[i] = tpu_test_rand_range(-1000, 1000);
  const int64_t ax[1] = {1};
  g = tg_new();
  tensor(g, "x", TPU_GRAPH_INT64, 2, d);
  init_i64(g, "axes", 1, ax);
  k = nd(g, "ReduceSum", 13, "x,axes", "s");
  attr_i(g, k, "keepdims", 0);
  k = nd(g, "ReduceMax", 13, "x", "m");
  attr_ints(g, k, "axes", 1, ax);
  io(g, "x", "s,m");
  p = compile(g);
  check_out(p, 0, TPU_GRAPH_INT64, 3);
  check_out(p, 1, TPU_GRAPH_INT64, 3);
  const void *in2[] = {xi};
  void *out2[] = {ys, ym};
  run_ok(p, in2, out2);
  for (size_t r = 0; r < 3; r++) {
    int64_t s = 0, m = INT64_MIN;
    for (size_t c = 0; c < 4; c++) {
      s += xi[r * 4 + c];
      if (xi[r * 4 + c] > m) m = xi[r * 4 + c];
    }
    TPU_ASSERT_SEED(ys[r] == s);
    TPU_ASSERT_SEED(ym[r] == m);
  }
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- ArgMax ---- */

static void test_argmax(void) {
  /* x [3,5] of small integers (ties likely) as FP32; ArgMax over axis 1 and axis 0. */
  int64_t d[2] = {3, 5};
  float x[15];
  int64_t y1[3], y2[3], y3[5];
  for (size_t i = 0; i < 15; i++) x[i] = (float)tpu_test_rand_range(0, 2);
  x[1] = x[3] = 7; /* row 0 surely has a tie at the top: first 1, last 3 */
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 2, d);
  size_t k = nd(g, "ArgMax", 13, "x", "first");
  attr_i(g, k, "axis", 1);
  attr_i(g, k, "keepdims", 0);
  k = nd(g, "ArgMax", 13, "x", "last");
  attr_i(g, k, "axis", -1);
  attr_i(g, k, "select_last_index", 1);
  k = nd(g, "ArgMax", 13, "x", "down");
  io(g, "x", "first,last,down");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_INT64, 3);
  check_out(p, 1, TPU_GRAPH_INT64, 3);
  check_out(p, 2, TPU_GRAPH_INT64, 5);
  tpu_graph_io_t o;
  CU_ASSERT(tpu_graph_program_output(p, 1, &o) == TPU_OK && o.rank == 2 && o.dims[1] == 1);
  const void *in[] = {x};
  void *out[] = {y1, y2, y3};
  run_ok(p, in, out);
  for (size_t r = 0; r < 3; r++) {
    int64_t f = 0, l = 0;
    for (int64_t c = 1; c < 5; c++) {
      if (x[r * 5 + (size_t)c] > x[r * 5 + (size_t)f]) f = c;
      if (x[r * 5 + (size_t)c] >= x[r * 5 + (size_t)l]) l = c;
    }
    TPU_ASSERT_SEED(y1[r] == f);
    TPU_ASSERT_SEED(y2[r] == l);
  }
  CU_ASSERT(y1[0] == 1 && y2[0] == 3);
  for (size_t c = 0; c < 5; c++) {
    int64_t f = 0;
    for (int64_t r = 1; r < 3; r++)
      if (x[(size_t)r * 5 + c] > x[(size_t)f * 5 + c]) f = r;
    TPU_ASSERT_SEED(y3[c] == f);
  }
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- Gather ---- */

static void test_gather_axis0_negative(void) {
  /* data [5,3] FP32, indices [2,2] INT64 with negative ids: out [2,2,3]. */
  int64_t d[2] = {5, 3}, di[2] = {2, 2};
  float x[15], y[12];
  int64_t idx[4] = {0, -1, 3, -5};
  fill(x, 15, -1, 1);
  tpu_graph_t *g = tg_new();
  tensor(g, "data", TPU_GRAPH_FP32, 2, d);
  tensor(g, "ids", TPU_GRAPH_INT64, 2, di);
  nd(g, "Gather", 13, "data,ids", "y");
  io(g, "data,ids", "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_FP32, 12);
  const void *in[] = {x, idx};
  void *out[] = {y};
  run_ok(p, in, out);
  for (size_t k = 0; k < 4; k++) {
    size_t row = (size_t)(idx[k] < 0 ? idx[k] + 5 : idx[k]);
    for (size_t c = 0; c < 3; c++) CU_ASSERT(y[k * 3 + c] == x[row * 3 + c]);
  }

  /* An id out of range at run time: TPU_ERANGE naming the indices tensor, the id and the
   * range; nothing is read past the data (ASan builds catch a stray read). */
  int64_t bad[4] = {0, 1, 5, 2};
  const void *in2[] = {x, bad};
  CU_ASSERT(tpu_graph_program_run(p, in2, out) == TPU_ERANGE);
  const char *msg = tpu_graph_program_error(p);
  CU_ASSERT(strstr(msg, "'ids'") != NULL);
  CU_ASSERT(strstr(msg, "5") != NULL);
  CU_ASSERT(strstr(msg, "[-5, 4]") != NULL);
  int64_t bad2[4] = {-6, 0, 0, 0};
  const void *in3[] = {x, bad2};
  CU_ASSERT(tpu_graph_program_run(p, in3, out) == TPU_ERANGE);
  CU_ASSERT(strstr(tpu_graph_program_error(p), "-6") != NULL);
  /* The program still runs good ids afterwards. */
  run_ok(p, in, out);
  CU_ASSERT(y[3] == x[12]);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_gather_axis1(void) {
  /* data [2,4,3] INT32, indices [3] INT32 on axis 1: out [2,3,3]. */
  int64_t d[3] = {2, 4, 3}, di[1] = {3};
  int32_t x[24], y[18], idx[3] = {3, -4, -2};
  for (size_t i = 0; i < 24; i++) x[i] = (int32_t)tpu_test_rand_range(-99999, 99999);
  tpu_graph_t *g = tg_new();
  tensor(g, "data", TPU_GRAPH_INT32, 3, d);
  tensor(g, "ids", TPU_GRAPH_INT32, 1, di);
  size_t k = nd(g, "Gather", 13, "data,ids", "y");
  attr_i(g, k, "axis", 1);
  io(g, "data,ids", "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_INT32, 18);
  const void *in[] = {x, idx};
  void *out[] = {y};
  run_ok(p, in, out);
  for (size_t a = 0; a < 2; a++)
    for (size_t j = 0; j < 3; j++) {
      size_t src = (size_t)(idx[j] < 0 ? idx[j] + 4 : idx[j]);
      for (size_t c = 0; c < 3; c++)
        TPU_ASSERT_SEED(y[(a * 3 + j) * 3 + c] == x[(a * 4 + src) * 3 + c]);
    }
  int32_t bad[3] = {0, 4, 1};
  const void *in2[] = {x, bad};
  CU_ASSERT(tpu_graph_program_run(p, in2, out) == TPU_ERANGE);
  CU_ASSERT(strstr(tpu_graph_program_error(p), "'ids'") != NULL);
  CU_ASSERT(strstr(tpu_graph_program_error(p), "4") != NULL);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- Transpose, Concat, Shape, Constant and the byte moves ---- */

static void transpose_case(const int64_t *perm) {
  int64_t d[3] = {2, 3, 4};
  float x[24], y[24];
  for (size_t i = 0; i < 24; i++) x[i] = (float)i + tpu_test_rand_float(0, 0.5f);
  int64_t pm[3] = {2, 1, 0}; /* the default reverses */
  if (perm) memcpy(pm, perm, sizeof pm);
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 3, d);
  size_t k = nd(g, "Transpose", 13, "x", "y");
  if (perm) attr_ints(g, k, "perm", 3, perm);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  tpu_graph_io_t o;
  CU_ASSERT_FATAL(tpu_graph_program_output(p, 0, &o) == TPU_OK && o.rank == 3);
  for (int i = 0; i < 3; i++) CU_ASSERT(o.dims[i] == d[pm[i]]);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  /* y[i0,i1,i2] = x[j] where j's dim pm[k] is i_k. */
  int64_t od[3] = {d[pm[0]], d[pm[1]], d[pm[2]]};
  for (int64_t i0 = 0; i0 < od[0]; i0++)
    for (int64_t i1 = 0; i1 < od[1]; i1++)
      for (int64_t i2 = 0; i2 < od[2]; i2++) {
        int64_t j[3], oi[3] = {i0, i1, i2};
        for (int kk = 0; kk < 3; kk++) j[pm[kk]] = oi[kk];
        CU_ASSERT(y[(i0 * od[1] + i1) * od[2] + i2] == x[(j[0] * 3 + j[1]) * 4 + j[2]]);
      }
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_transpose(void) {
  static const int64_t perms[][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}};
  transpose_case(NULL);
  for (size_t i = 0; i < sizeof perms / sizeof perms[0]; i++) transpose_case(perms[i]);

  /* INT8 (element size 1), rank 4 with a size-1 dim: [2,1,3,2] perm (3,0,2,1). */
  int64_t d[4] = {2, 1, 3, 2}, perm[4] = {3, 0, 2, 1};
  int8_t x[12], y[12];
  for (int i = 0; i < 12; i++) x[i] = (int8_t)(i * 7 - 40);
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_INT8, 4, d);
  size_t k = nd(g, "Transpose", 13, "x", "y");
  attr_ints(g, k, "perm", 4, perm);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  /* out dims [2,2,3,1]: y[a,b,c,0] = x[b,0,c,a] */
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 3; c++) CU_ASSERT(y[(a * 2 + b) * 3 + c] == x[(b * 3 + c) * 2 + a]);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_concat(void) {
  /* Three FP32 inputs [2,1,3], [2,2,3], [2,3,3] on axis 1 (given as -2): out [2,6,3]. */
  int64_t da[3] = {2, 1, 3}, db[3] = {2, 2, 3}, dc[3] = {2, 3, 3};
  float a[6], b[12], c[18], y[36];
  fill(a, 6, -1, 1);
  fill(b, 12, -1, 1);
  fill(c, 18, -1, 1);
  tpu_graph_t *g = tg_new();
  tensor(g, "a", TPU_GRAPH_FP32, 3, da);
  tensor(g, "b", TPU_GRAPH_FP32, 3, db);
  tensor(g, "c", TPU_GRAPH_FP32, 3, dc);
  size_t k = nd(g, "Concat", 13, "a,b,c", "y");
  attr_i(g, k, "axis", -2);
  io(g, "a,b,c", "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_FP32, 36);
  const void *in[] = {a, b, c};
  void *out[] = {y};
  run_ok(p, in, out);
  for (size_t o = 0; o < 2; o++)
    for (size_t r = 0; r < 6; r++)
      for (size_t e = 0; e < 3; e++) {
        float want = r < 1 ? a[(o * 1 + r) * 3 + e]
                     : r < 3 ? b[(o * 2 + r - 1) * 3 + e] : c[(o * 3 + r - 3) * 3 + e];
        CU_ASSERT(y[(o * 6 + r) * 3 + e] == want);
      }
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void shape_case(int opset, int has_start, int64_t start, int has_end, int64_t end,
                       int64_t lo, int64_t hi) {
  int64_t d[4] = {2, 3, 5, 7}, y[4] = {-1, -1, -1, -1};
  float x[210] = {0};
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 4, d);
  size_t k = nd(g, "Shape", opset, "x", "y");
  if (has_start) attr_i(g, k, "start", start);
  if (has_end) attr_i(g, k, "end", end);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_INT64, (size_t)(hi - lo));
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  for (int64_t i = lo; i < hi; i++) CU_ASSERT(y[i - lo] == d[i]);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

static void test_shape(void) {
  shape_case(13, 0, 0, 0, 0, 0, 4);
  shape_case(15, 1, 1, 0, 0, 1, 4);
  shape_case(15, 1, 1, 1, 3, 1, 3);
  shape_case(15, 1, -3, 1, -1, 1, 3);
  shape_case(15, 0, 0, 1, 10, 0, 4); /* end clamps to the rank */
  shape_case(15, 1, -9, 1, 2, 0, 2); /* start clamps to 0 */
}

static void test_moves_and_constant(void) {
  /* x [2,3,4] FP64 -> Flatten(axis 2) [6,4] -> Reshape [4,6] -> Unsqueeze(0) [1,4,6] ->
   * Squeeze [4,6] -> Add a Constant via Concat with it on axis 0 -> [5,6]. */
  int64_t d[3] = {2, 3, 4}, shape[2] = {4, 6}, zero[1] = {0}, cd[2] = {1, 6};
  double x[24], y[30], cv[6];
  for (size_t i = 0; i < 24; i++) x[i] = tpu_test_rand_float(-9, 9);
  for (size_t i = 0; i < 6; i++) cv[i] = (double)i / 3.0;
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP64, 3, d);
  init_i64(g, "shape", 2, shape);
  init_i64(g, "zero", 1, zero);
  size_t k = nd(g, "Flatten", 13, "x", "f");
  attr_i(g, k, "axis", 2);
  nd(g, "Reshape", 14, "f,shape", "r");
  nd(g, "Unsqueeze", 13, "r,zero", "u");
  nd(g, "Squeeze", 13, "u", "s");
  k = nd(g, "Constant", 13, "", "c");
  tpu_graph_attr_t a = {.name = "value", .type = TPU_GRAPH_ATTR_TENSOR,
                        .t_dtype = TPU_GRAPH_FP64, .t_rank = 2, .t_dims = cd, .t_data = cv,
                        .t_bytes = sizeof cv};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, k, &a) == TPU_OK);
  k = nd(g, "Concat", 13, "s,c", "y");
  attr_i(g, k, "axis", 0);
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_FP64, 30);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  CU_ASSERT(memcmp(y, x, sizeof x) == 0);
  CU_ASSERT(memcmp(y + 24, cv, sizeof cv) == 0);
  tpu_graph_program_free(p);
  tpu_graph_free(g);

  /* value_ints and value_float constants as graph outputs. */
  g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 1, shape);
  k = nd(g, "Constant", 13, "", "ci");
  attr_ints(g, k, "value_ints", 2, shape);
  k = nd(g, "Constant", 13, "", "cf");
  attr_f(g, k, "value_float", 2.5f);
  io(g, "x", "ci,cf");
  p = compile(g);
  check_out(p, 0, TPU_GRAPH_INT64, 2);
  check_out(p, 1, TPU_GRAPH_FP32, 1);
  int64_t ci[2] = {0, 0};
  float cf = 0, xin[4] = {0};
  const void *in2[] = {xin};
  void *out2[] = {ci, &cf};
  run_ok(p, in2, out2);
  CU_ASSERT(ci[0] == 4 && ci[1] == 6);
  CU_ASSERT(cf == 2.5f);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- randomized shapes: Transpose, ReduceSum/ReduceMax, Softmax over random axes ---- */

/* Multi-index of flat index i in dims (row-major). */
static void unflat(size_t i, int rank, const int64_t *dims, int64_t *idx) {
  for (int k = rank - 1; k >= 0; k--) {
    idx[k] = (int64_t)(i % (size_t)dims[k]);
    i /= (size_t)dims[k];
  }
}

static size_t flat(int rank, const int64_t *dims, const int64_t *idx) {
  size_t f = 0;
  for (int k = 0; k < rank; k++) f = f * (size_t)dims[k] + (size_t)idx[k];
  return f;
}

static void test_random_shapes(void) {
  for (int iter = 0; iter < 60; iter++) {
    int rank = (int)tpu_test_rand_range(1, 5);
    int64_t d[5], perm[5], od[5], rd[5];
    size_t n = 1;
    for (int k = 0; k < rank; k++) n *= (size_t)(d[k] = tpu_test_rand_range(1, 4));
    for (int k = 0; k < rank; k++) perm[k] = k;
    for (int k = rank - 1; k > 0; k--) { /* Fisher-Yates */
      int j = (int)tpu_test_rand_range(0, k);
      int64_t t = perm[k];
      perm[k] = perm[j];
      perm[j] = t;
    }
    for (int k = 0; k < rank; k++) od[k] = d[perm[k]];
    int64_t axes[5];
    size_t na = 0;
    int red[5], keep = (int)tpu_test_rand_range(0, 1), rr = 0;
    for (int k = 0; k < rank; k++)
      if (tpu_test_rand_range(0, 1)) axes[na++] = k - (tpu_test_rand_range(0, 1) ? rank : 0);
    for (int k = 0; k < rank; k++) red[k] = na == 0;
    for (size_t i = 0; i < na; i++) red[axes[i] < 0 ? axes[i] + rank : axes[i]] = 1;
    size_t nr = 1;
    for (int k = 0; k < rank; k++) {
      if (!red[k]) nr *= (size_t)(rd[rr++] = d[k]);
      else if (keep) rd[rr++] = 1;
    }
    int sax = (int)tpu_test_rand_range(-rank, rank - 1), sa = sax < 0 ? sax + rank : sax;
    float *x = malloc(n * sizeof *x), *yt = malloc(n * sizeof *yt), *ys = malloc(nr * 4);
    float *ym = malloc(nr * 4), *yx = malloc(n * 4);
    double *ws = calloc(nr, sizeof *ws), *wm = malloc(nr * sizeof *wm), *wx = malloc(n * 8);
    CU_ASSERT_FATAL(x && yt && ys && ym && yx && ws && wm && wx);
    fill(x, n, -4, 4);
    tpu_graph_t *g = tg_new();
    tensor(g, "x", TPU_GRAPH_FP32, rank, d);
    size_t k = nd(g, "Transpose", 13, "x", "t");
    attr_ints(g, k, "perm", (size_t)rank, perm);
    if (na) init_i64(g, "axes", na, axes);
    k = nd(g, "ReduceSum", 13, na ? "x,axes" : "x", "s");
    attr_i(g, k, "keepdims", keep);
    k = nd(g, "ReduceMax", 13, "x", "m");
    attr_i(g, k, "keepdims", keep);
    if (na) attr_ints(g, k, "axes", na, axes);
    k = nd(g, "Softmax", 13, "x", "sm");
    attr_i(g, k, "axis", sax);
    io(g, "x", "t,s,m,sm");
    tpu_graph_program_t *p = compile(g);
    check_out(p, 1, TPU_GRAPH_FP32, nr);
    const void *in[] = {x};
    void *out[] = {yt, ys, ym, yx};
    run_ok(p, in, out);
    for (size_t o = 0; o < nr; o++) wm[o] = -INFINITY;
    for (size_t i = 0; i < n; i++) {
      int64_t idx[5], oi[5], ri[5];
      unflat(i, rank, d, idx);
      for (int q = 0; q < rank; q++) oi[q] = idx[perm[q]];
      TPU_ASSERT_SEED(yt[flat(rank, od, oi)] == x[i]);
      int r = 0;
      for (int q = 0; q < rank; q++) {
        if (!red[q]) ri[r++] = idx[q];
        else if (keep) ri[r++] = 0;
      }
      size_t o = flat(r, rd, ri);
      ws[o] += x[i];
      wm[o] = fmax(wm[o], x[i]);
      /* softmax over axis sa at i */
      double mx = -INFINITY, sum = 0;
      int64_t j[5];
      memcpy(j, idx, sizeof j);
      for (j[sa] = 0; j[sa] < d[sa]; j[sa]++) mx = fmax(mx, x[flat(rank, d, j)]);
      for (j[sa] = 0; j[sa] < d[sa]; j[sa]++) sum += exp(x[flat(rank, d, j)] - mx);
      wx[i] = exp(x[i] - mx) / sum;
    }
    TPU_ASSERT_SEED(close_all(ys, ws, nr));
    TPU_ASSERT_SEED(close_all(ym, wm, nr));
    TPU_ASSERT_SEED(close_all(yx, wx, n));
    tpu_graph_program_free(p);
    tpu_graph_free(g);
    free(x), free(yt), free(ys), free(ym), free(yx), free(ws), free(wm), free(wx);
  }
}

/* ---- FP64 and INT32 paths ---- */

static void test_fp64_int32(void) {
  int64_t d[2] = {3, 6}, dn[1] = {6};
  double x[18], sc[6], ls[18], ln[18], rm[3];
  int32_t xi[18], rs[3];
  int64_t am[3];
  for (size_t i = 0; i < 18; i++) x[i] = tpu_test_rand_float(-6, 6);
  for (size_t i = 0; i < 6; i++) sc[i] = tpu_test_rand_float(0.5f, 2);
  for (size_t i = 0; i < 18; i++) xi[i] = (int32_t)tpu_test_rand_range(-50, 50);
  xi[2] = xi[4] = 99; /* a tie in row 0 */
  const int64_t ax1[1] = {1};
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP64, 2, d);
  tensor(g, "xi", TPU_GRAPH_INT32, 2, d);
  CU_ASSERT_FATAL(tpu_graph_add_initializer(g, "sc", TPU_GRAPH_FP64, 1, dn, sc, sizeof sc) ==
                  TPU_OK);
  init_i64(g, "axes", 1, ax1);
  nd(g, "LogSoftmax", 13, "x", "ls");
  size_t k = nd(g, "LayerNormalization", 17, "x,sc", "ln");
  attr_i(g, k, "stash_type", 11);
  k = nd(g, "ReduceMean", 13, "x", "rm");
  attr_ints(g, k, "axes", 1, ax1);
  attr_i(g, k, "keepdims", 0);
  k = nd(g, "ArgMax", 13, "xi", "am");
  attr_i(g, k, "axis", 1);
  attr_i(g, k, "select_last_index", 1);
  nd(g, "ReduceSum", 13, "xi,axes", "rs");
  io(g, "x,xi", "ls,ln,rm,am,rs");
  tpu_graph_program_t *p = compile(g);
  check_out(p, 0, TPU_GRAPH_FP64, 18);
  check_out(p, 3, TPU_GRAPH_INT64, 3);
  check_out(p, 4, TPU_GRAPH_INT32, 3);
  const void *in[] = {x, xi};
  void *out[] = {ls, ln, rm, am, rs};
  run_ok(p, in, out);
  for (size_t r = 0; r < 3; r++) {
    const double *row = x + r * 6;
    double mx = -INFINITY, sum = 0, m = 0, v = 0;
    for (size_t c = 0; c < 6; c++) mx = fmax(mx, row[c]);
    for (size_t c = 0; c < 6; c++) sum += exp(row[c] - mx);
    for (size_t c = 0; c < 6; c++) m += row[c] / 6;
    for (size_t c = 0; c < 6; c++) v += (row[c] - m) * (row[c] - m) / 6;
    for (size_t c = 0; c < 6; c++) {
      TPU_ASSERT_SEED(fabs(ls[r * 6 + c] - (row[c] - mx - log(sum))) < 1e-12);
      double want = (row[c] - m) / sqrt(v + (double)1e-5f) * sc[c];
      TPU_ASSERT_SEED(fabs(ln[r * 6 + c] - want) < 1e-12);
    }
    TPU_ASSERT_SEED(fabs(rm[r] - m) < 1e-12);
    int64_t best = 0;
    int32_t total = 0;
    for (int64_t c = 0; c < 6; c++) {
      if (xi[r * 6 + (size_t)c] >= xi[r * 6 + (size_t)best]) best = c;
      total += xi[r * 6 + (size_t)c];
    }
    TPU_ASSERT_SEED(am[r] == best);
    TPU_ASSERT_SEED(rs[r] == total);
  }
  CU_ASSERT(am[0] == 4);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- Constant and Shape kernels, called directly ---- */

/* A view of graph tensor `name` as inference left it, with data at buf. */
static void view(tpu_graph_t *g, const char *name, tpu__xt_t *t, void *buf) {
  tpu_graph_tensor_info_t info;
  long i = tpu_graph_find(g, name);
  CU_ASSERT_FATAL(i >= 0 && tpu_graph_tensor(g, (size_t)i, &info) == TPU_OK && info.inferred);
  memset(t, 0, sizeof *t);
  t->name = info.name;
  t->dtype = info.dtype;
  t->rank = info.rank;
  t->elems = 1;
  for (int k = 0; k < info.rank; k++) t->elems *= (size_t)(t->dims[k] = info.dims[k]);
  t->bytes = t->elems * tpu_graph_dtype_size(info.dtype);
  t->data = buf;
}

/* Prepares and runs node `node` (one input at most, one output) through its kernel. */
static void run_kernel(tpu_graph_t *g, size_t node, tpu__xt_t *in, tpu__xt_t *out) {
  tpu_graph_node_info_t ni;
  CU_ASSERT_FATAL(tpu_graph_node(g, node, &ni) == TPU_OK);
  const tpu__kernel_t *k = tpu__graph_kernel(ni.op);
  CU_ASSERT_FATAL(k != NULL);
  tpu__xt_t *views[2] = {in, out};
  tpu__step_t s = {.node = node, .op = ni.op, .label = (char *)"test", .nin = in ? 1 : 0,
                   .nout = 1, .in = views, .out = views + 1};
  tpu__prep_t pc = {.g = g, .node = node, .label = "test", .opset = ni.opset,
                    .engine = tg_engine()};
  tpu_status_t st = k->prepare(&pc, &s);
  if (st != TPU_OK) fprintf(stderr, "prepare: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
  char err[200] = "";
  tpu__run_ctx_t rc = {.err = err, .errlen = sizeof err, .step = &s};
  CU_ASSERT(k->run(&rc, &s) == TPU_OK);
  free(s.params);
}

static void test_constant_shape_kernels(void) {
  int64_t d[3] = {4, 5, 6}, ints[3] = {7, -8, 9}, cd[2] = {2, 2};
  float tv[4];
  fill(tv, 4, -1, 1);
  tpu_graph_t *g = tg_new();
  tensor(g, "x", TPU_GRAPH_FP32, 3, d);
  size_t shp = nd(g, "Shape", 15, "x", "s");
  attr_i(g, shp, "start", -2);
  size_t ci = nd(g, "Constant", 13, "", "ci");
  attr_ints(g, ci, "value_ints", 3, ints);
  size_t cf = nd(g, "Constant", 13, "", "cf");
  attr_f(g, cf, "value_float", -1.25f);
  size_t ct = nd(g, "Constant", 13, "", "ct");
  tpu_graph_attr_t a = {.name = "value", .type = TPU_GRAPH_ATTR_TENSOR,
                        .t_dtype = TPU_GRAPH_FP32, .t_rank = 2, .t_dims = cd, .t_data = tv,
                        .t_bytes = sizeof tv};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, ct, &a) == TPU_OK);
  io(g, "x", "s,ci,cf,ct");
  CU_ASSERT_FATAL(tpu_graph_infer(g, 1) == TPU_OK);
  tpu__xt_t x, o;
  int64_t sv[3] = {0, 0, 0}, iv[3] = {0, 0, 0};
  float fv = 0, tout[4] = {0};
  view(g, "x", &x, NULL);
  view(g, "s", &o, sv);
  CU_ASSERT_FATAL(o.elems == 2);
  run_kernel(g, shp, &x, &o);
  CU_ASSERT(sv[0] == 5 && sv[1] == 6 && sv[2] == 0);
  view(g, "ci", &o, iv);
  run_kernel(g, ci, NULL, &o);
  CU_ASSERT(memcmp(iv, ints, sizeof ints) == 0);
  view(g, "cf", &o, &fv);
  run_kernel(g, cf, NULL, &o);
  CU_ASSERT(fv == -1.25f);
  view(g, "ct", &o, tout);
  run_kernel(g, ct, NULL, &o);
  CU_ASSERT(memcmp(tout, tv, sizeof tv) == 0);
  tpu_graph_free(g);
}

TPU_TEST_SUITE(graph_tensor,
               {"softmax", test_softmax},
               {"softmax_large_and_dtype", test_softmax_large_and_dtype},
               {"layernorm", test_layernorm},
               {"layernorm_broadcast_scale", test_layernorm_broadcast_scale},
               {"batchnorm", test_batchnorm},
               {"reduce", test_reduce},
               {"reduce_noop_and_int", test_reduce_noop_and_int},
               {"argmax", test_argmax},
               {"gather_axis0_negative", test_gather_axis0_negative},
               {"gather_axis1", test_gather_axis1},
               {"transpose", test_transpose},
               {"concat", test_concat},
               {"shape", test_shape},
               {"moves_and_constant", test_moves_and_constant},
               {"random_shapes", test_random_shapes},
               {"fp64_int32", test_fp64_int32},
               {"constant_shape_kernels", test_constant_shape_kernels})
