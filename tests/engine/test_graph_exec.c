/*
 * test_graph_exec.c - compiling and running graphs (engine/graph/compile.c, ops_matmul.c):
 * constant folding, matmul epilogue fusion, the engine and reference matmul paths, precision
 * and per-node overrides, outputs that other nodes read, and argument errors.
 *
 * DESIGN
 * Expected values are computed here in double precision from the same random operands (seeded,
 * printed on failure), so each check is "the program agrees with the textbook formula". The
 * ONNX backend suite (tests/integration/onnx_backend.c) checks the ops against ONNX's data.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_graph.h"
#include "graph_test.h"
#include "tpu_test.h"

static unsigned seed_state = 12345;
static float frand(void) { /* [-1, 1) */
  seed_state = seed_state * 1103515245u + 12345u;
  return (float)((seed_state >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static void fill(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = frand();
}

static void input(tpu_graph_t *g, const char *name, int rank, const int64_t *dims) {
  CU_ASSERT_FATAL(tpu_graph_add_tensor(g, name, TPU_GRAPH_FP32, rank, dims) == TPU_OK);
}

static void init(tpu_graph_t *g, const char *name, int rank, const int64_t *dims, const float *v,
                 size_t n) {
  CU_ASSERT_FATAL(tpu_graph_add_initializer(g, name, TPU_GRAPH_FP32, rank, dims, v, n * 4) ==
                  TPU_OK);
}

static size_t node(tpu_graph_t *g, const char *name, const char *op, size_t nin,
                   const char *const *in, const char *out) {
  size_t idx = 0;
  CU_ASSERT_FATAL(tpu_graph_add_node(g, name, op, NULL, 13, nin, in, 1, &out, &idx) == TPU_OK);
  return idx;
}

static void attr_i(tpu_graph_t *g, size_t n, const char *name, int64_t v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_INT, .i = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
}

static void attr_f(tpu_graph_t *g, size_t n, const char *name, float v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_FLOAT, .f = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
}

static void io(tpu_graph_t *g, const char *in, const char *out) {
  CU_ASSERT_FATAL(tpu_graph_set_inputs(g, in ? 1 : 0, &in) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_set_outputs(g, 1, &out) == TPU_OK);
}

static tpu_graph_program_t *compile(tpu_graph_t *g, int64_t batch,
                                    const tpu_graph_compile_opts_t *o) {
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), batch, o, &p);
  if (st != TPU_OK) fprintf(stderr, "compile: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK && p);
  return p;
}

static double max_rel(const float *got, const double *want, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]) / (fabs(want[i]) + 1e-3);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

enum { M = 5, K = 37, N = 19 };

/* Gemm(x, W, c; transB, alpha, beta) → Relu: one engine step with bias and relu fused. */
static void test_gemm_fused(void) {
  static float w[N * K], c[N], x[M * K], y[M * N];
  double want[M * N];
  fill(w, N * K);
  fill(c, N);
  fill(x, M * K);
  tpu_graph_t *g = tg_new();
  int64_t xd[] = {TPU_GRAPH_BATCH, K}, wd[] = {N, K}, cd[] = {N};
  input(g, "x", 2, xd);
  init(g, "W", 2, wd, w, N * K);
  init(g, "c", 1, cd, c, N);
  const char *gin[] = {"x", "W", "c"}, *rin[] = {"h"};
  size_t gn = node(g, "fc", "Gemm", 3, gin, "h");
  attr_i(g, gn, "transB", 1);
  attr_f(g, gn, "alpha", 0.5f);
  attr_f(g, gn, "beta", 2.0f);
  node(g, "act", "Relu", 1, rin, "y");
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g, M, NULL);
  CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), 1);
  char desc[512];
  tpu_graph_program_describe(p, desc, sizeof desc);
  CU_ASSERT_PTR_NOT_NULL(strstr(desc, "engine plan FP32"));
  CU_ASSERT_PTR_NOT_NULL(strstr(desc, "relu"));
  uint64_t macs = 0, cycles = 0;
  tpu_graph_program_cost(p, &macs, &cycles, NULL);
  CU_ASSERT_EQUAL(macs, (uint64_t)M * K * N);
  CU_ASSERT(cycles > 0);
  const void *in[] = {x};
  void *out[] = {y};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += (double)x[i * K + k] * w[j * K + k];
      double v = 0.5 * acc + 2.0 * c[j];
      want[i * N + j] = v > 0 ? v : 0;
    }
  CU_ASSERT(max_rel(y, want, M * N) < 1e-5);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* MatMul(x, W) + b → Sigmoid as PyTorch exports nn.Linear on 3-D input; then the same graph
 * with the MatMul's output also a graph output, which must not be fused away. */
static void test_matmul_add_fused(void) {
  static float w[K * N], b[N], x[2 * M * K], y[2 * M * N], h[2 * M * N];
  double want[2 * M * N], wanth[2 * M * N];
  fill(w, K * N);
  fill(b, N);
  fill(x, 2 * M * K);
  for (int i = 0; i < 2 * M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += (double)x[i * K + k] * w[k * N + j];
      wanth[i * N + j] = acc;
      want[i * N + j] = 1 / (1 + exp(-(acc + b[j])));
    }
  for (int pinned = 0; pinned < 2; pinned++) {
    tpu_graph_t *g = tg_new();
    int64_t xd[] = {TPU_GRAPH_BATCH, M, K}, wd[] = {K, N}, bd[] = {N};
    input(g, "x", 3, xd);
    init(g, "W", 2, wd, w, K * N);
    init(g, "b", 1, bd, b, N);
    const char *min[] = {"x", "W"}, *ain[] = {"b", "h"}, *sin[] = {"z"};
    node(g, "mm", "MatMul", 2, min, "h");
    node(g, "add", "Add", 2, ain, "z");
    node(g, "sig", "Sigmoid", 1, sin, "y");
    const char *outs[] = {"y", "h"};
    const char *ins[] = {"x"};
    CU_ASSERT_FATAL(tpu_graph_set_inputs(g, 1, ins) == TPU_OK);
    CU_ASSERT_FATAL(tpu_graph_set_outputs(g, pinned ? 2 : 1, outs) == TPU_OK);
    tpu_graph_program_t *p = NULL;
    tpu_status_t st = tpu_graph_compile(g, tg_engine(), 2, NULL, &p);
    if (st == TPU_ENOTSUP) { /* Add/Sigmoid kernels not built: only the fused form runs */
      CU_ASSERT(pinned);
      tpu_graph_free(g);
      continue;
    }
    CU_ASSERT_FATAL(st == TPU_OK);
    CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), pinned ? 3u : 1u);
    const void *in[] = {x};
    void *out[] = {y, h};
    CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
    CU_ASSERT(max_rel(y, want, 2 * M * N) < 1e-5);
    if (pinned) CU_ASSERT(max_rel(h, wanth, 2 * M * N) < 1e-5);
    tpu_graph_program_free(p);
    tpu_graph_free(g);
  }
}

/* Tensor × tensor with broadcast batch dims: [3,4] × [2,4,5] → [2,3,5] on the reference path. */
static void test_matmul_tensors(void) {
  float a[12], b[40], y[30];
  fill(a, 12);
  fill(b, 40);
  tpu_graph_t *g = tg_new();
  int64_t ad[] = {3, 4}, bd[] = {2, 4, 5};
  input(g, "a", 2, ad);
  input(g, "b", 3, bd);
  const char *min[] = {"a", "b"};
  node(g, "mm", "MatMul", 2, min, "y");
  const char *ins[] = {"a", "b"}, *outs[] = {"y"};
  CU_ASSERT_FATAL(tpu_graph_set_inputs(g, 2, ins) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_set_outputs(g, 1, outs) == TPU_OK);
  tpu_graph_program_t *p = compile(g, 1, NULL);
  tpu_graph_io_t o;
  CU_ASSERT_FATAL(tpu_graph_program_output(p, 0, &o) == TPU_OK);
  CU_ASSERT_EQUAL(o.rank, 3);
  CU_ASSERT_EQUAL(o.elems, 30);
  const void *in[] = {a, b};
  void *out[] = {y};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
  double want[30];
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 5; j++) {
        double acc = 0;
        for (int k = 0; k < 4; k++) acc += (double)a[i * 4 + k] * b[t * 20 + k * 5 + j];
        want[t * 15 + i * 5 + j] = acc;
      }
  CU_ASSERT(max_rel(y, want, 30) < 1e-6);
  uint64_t macs = 0;
  tpu_graph_program_cost(p, &macs, NULL, NULL);
  CU_ASSERT_EQUAL(macs, 2u * 3 * 4 * 5);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* A Gemm of two initializers is folded at compile time: the program has one step. Also the
 * transA reference path. */
static void test_folding_and_trans_a(void) {
  float w1[4 * 3], w2[3 * 2], x[4 * 2], y[2 * 2];
  fill(w1, 12);
  fill(w2, 6);
  fill(x, 8);
  tpu_graph_t *g = tg_new();
  int64_t w1d[] = {4, 3}, w2d[] = {3, 2}, xd[] = {4, 2};
  init(g, "w1", 2, w1d, w1, 12);
  init(g, "w2", 2, w2d, w2, 6);
  input(g, "x", 2, xd);
  const char *fin[] = {"w1", "w2"}, *gin[] = {"x", "w"};
  node(g, "fold", "MatMul", 2, fin, "w"); /* [4,2] */
  size_t gn = node(g, "g", "Gemm", 2, gin, "y");
  attr_i(g, gn, "transA", 1); /* xᵀ [2,4] · w [4,2] */
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g, 1, NULL);
  CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), 1);
  const void *in[] = {x};
  void *out[] = {y};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
  double w[8], want[4];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++) {
      w[i * 2 + j] = 0;
      for (int k = 0; k < 3; k++) w[i * 2 + j] += (double)w1[i * 3 + k] * w2[k * 2 + j];
    }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      want[i * 2 + j] = 0;
      for (int k = 0; k < 4; k++) want[i * 2 + j] += (double)x[k * 2 + i] * w[k * 2 + j];
    }
  CU_ASSERT(max_rel(y, want, 4) < 1e-5);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* A chain of matmuls in BF16 and INT8 stays near FP32; pinning every node to FP32 gives the
 * FP32 program's bytes exactly. */
static void test_precision(void) {
  enum { D = 64, L = 3 };
  static float w[L][D * D], x[8 * D], ref[8 * D], y[8 * D];
  for (int l = 0; l < L; l++) fill(w[l], D * D);
  fill(x, 8 * D);
  tpu_graph_t *g = tg_new();
  int64_t xd[] = {TPU_GRAPH_BATCH, D}, wd[] = {D, D};
  input(g, "x", 2, xd);
  const char *names[] = {"l0", "l1", "l2"};
  const char *ts[] = {"x", "t1", "t2", "y"};
  for (int l = 0; l < L; l++) {
    char wn[8];
    snprintf(wn, sizeof wn, "w%d", l);
    init(g, wn, 2, wd, w[l], D * D);
    const char *in[] = {ts[l], wn};
    node(g, names[l], "MatMul", 2, in, ts[l + 1]);
  }
  io(g, "x", "y");
  const void *in[] = {x};
  void *outr[] = {ref}, *out[] = {y};
  tpu_graph_program_t *p = compile(g, 8, NULL);
  CU_ASSERT_FATAL(tpu_graph_program_run(p, in, outr) == TPU_OK);
  tpu_graph_program_free(p);
  double want[8 * D];
  for (int i = 0; i < 8 * D; i++) want[i] = ref[i];
  tpu_dtype_t precs[] = {TPU_DTYPE_BF16, TPU_DTYPE_INT8};
  double tol[] = {0.05, 0.1};
  for (int k = 0; k < 2; k++) {
    tpu_graph_compile_opts_t o = {.precision = precs[k]};
    p = compile(g, 8, &o);
    CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
    double err = 0, norm = 0;
    for (int i = 0; i < 8 * D; i++) {
      err += (y[i] - want[i]) * (y[i] - want[i]);
      norm += want[i] * want[i];
    }
    CU_ASSERT(sqrt(err / norm) < tol[k]);
    tpu_graph_program_free(p);
    o.fp32_nodes = names;
    o.nfp32_nodes = L;
    p = compile(g, 8, &o);
    CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
    CU_ASSERT(memcmp(y, ref, sizeof y) == 0);
    tpu_graph_program_free(p);
  }
  tpu_graph_compile_opts_t bad = {.precision = TPU_DTYPE_INT32};
  CU_ASSERT_EQUAL(tpu_graph_compile(g, tg_engine(), 8, &bad, &p), TPU_EINVAL);
  CU_ASSERT_PTR_NULL(p);
  /* Compiling another batch size leaves the first program valid. */
  tpu_graph_program_t *p8 = compile(g, 8, NULL), *p3 = compile(g, 3, NULL);
  CU_ASSERT_FATAL(tpu_graph_program_run(p8, in, out) == TPU_OK);
  CU_ASSERT(memcmp(y, ref, sizeof y) == 0);
  tpu_graph_io_t io3;
  CU_ASSERT_FATAL(tpu_graph_program_input(p3, 0, &io3) == TPU_OK);
  CU_ASSERT_EQUAL(io3.dims[0], 3);
  CU_ASSERT_EQUAL(io3.bytes, 3u * D * 4);
  /* A program compiled with share reuses the packed weights: same results, less memory. */
  tpu_graph_compile_opts_t so = {.share = p8};
  tpu_graph_program_t *s8 = compile(g, 8, &so);
  CU_ASSERT(tpu_graph_program_memory(s8) + 3u * D * D * 4 <= tpu_graph_program_memory(p8));
  CU_ASSERT_FATAL(tpu_graph_program_run(s8, in, out) == TPU_OK);
  CU_ASSERT(memcmp(y, ref, sizeof y) == 0);
  tpu_graph_program_free(s8); /* sharers first */
  tpu_graph_program_free(p8);
  tpu_graph_program_free(p3);
  /* A memory limit below the program's needs is refused. */
  tpu_graph_compile_opts_t lim = {.memory_limit = 64};
  CU_ASSERT_EQUAL(tpu_graph_compile(g, tg_engine(), 8, &lim, &p), TPU_ERANGE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "limit"));
  tpu_graph_free(g);
}


/* GELU as PyTorch exports it after a Gemm (h/√2 → Erf → +1 → h·_ → ·0.5) becomes the plan's
 * exact GELU epilogue; with an intermediate also a graph output nothing is fused. Both agree
 * with 0.5·h·(1 + erf(h/√2)). */
static void test_gelu_pattern(void) {
  static float w[N * K], b[N], x[M * K], y[M * N], e[M * N];
  fill(w, N * K);
  fill(b, N);
  fill(x, M * K);
  float c_sqrt2 = 1.4142135f, c_one = 1.0f, c_half = 0.5f;
  for (int pinned = 0; pinned < 2; pinned++) {
    tpu_graph_t *g = tg_new();
    int64_t xd[] = {TPU_GRAPH_BATCH, K}, wd[] = {N, K}, bd[] = {N};
    input(g, "x", 2, xd);
    init(g, "W", 2, wd, w, N * K);
    init(g, "b", 1, bd, b, N);
    init(g, "sqrt2", 0, NULL, &c_sqrt2, 1);
    init(g, "one", 0, NULL, &c_one, 1);
    init(g, "half", 0, NULL, &c_half, 1);
    const char *gin[] = {"x", "W", "b"}, *d_in[] = {"h", "sqrt2"}, *e_in[] = {"d"},
               *a_in[] = {"e", "one"}, *m_in[] = {"h", "a"}, *h_in[] = {"half", "m"};
    size_t gn = node(g, "fc", "Gemm", 3, gin, "h");
    attr_i(g, gn, "transB", 1);
    node(g, "div", "Div", 2, d_in, "d");
    node(g, "erf", "Erf", 1, e_in, "e");
    node(g, "add", "Add", 2, a_in, "a");
    node(g, "mul", "Mul", 2, m_in, "m");
    node(g, "mul_1", "Mul", 2, h_in, "y");
    const char *ins[] = {"x"}, *outs[] = {"y", "e"};
    CU_ASSERT_FATAL(tpu_graph_set_inputs(g, 1, ins) == TPU_OK);
    CU_ASSERT_FATAL(tpu_graph_set_outputs(g, pinned ? 2 : 1, outs) == TPU_OK);
    tpu_graph_program_t *p = NULL;
    tpu_status_t st = tpu_graph_compile(g, tg_engine(), M, NULL, &p);
    CU_ASSERT_FATAL(st == TPU_OK);
    CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), pinned ? 6u : 1u);
    char desc[1024];
    tpu_graph_program_describe(p, desc, sizeof desc);
    CU_ASSERT_EQUAL(strstr(desc, "gelu") != NULL, !pinned);
    const void *in[] = {x};
    void *out[] = {y, e};
    CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
    double want[M * N];
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double h = b[j];
        for (int k = 0; k < K; k++) h += (double)x[i * K + k] * w[j * K + k];
        want[i * N + j] = 0.5 * h * (1 + erf(h / sqrt(2.0)));
      }
    double worst = 0;
    for (int i = 0; i < M * N; i++) {
      double err = fabs(y[i] - want[i]) - 1e-6 * fabs(want[i]);
      if (err > worst) worst = err;
    }
    if (worst >= 1e-6) fprintf(stderr, "gelu (pinned %d): worst excess %g\n", pinned, worst);
    CU_ASSERT(worst < 1e-6);
    tpu_graph_program_free(p);
    tpu_graph_free(g);
  }
}


/* LayerNormalization as PyTorch exports it before opset 17 (ReduceMean, Sub, Pow 2, ReduceMean,
 * Add ε, Sqrt, Div, Mul γ, Add β) becomes one LayerNormalization step (γ and β kept alive when
 * the graph's other constants are released); with an intermediate also a graph output nothing
 * is fused. Both agree with the formula in double. */
static void test_layernorm_pattern(void) {
  enum { R = 5, D = 37 };
  static float x[R * D], y[R * D], dd[R * D], gam[D], bet[D];
  fill(x, R * D);
  fill(gam, D);
  fill(bet, D);
  for (int i = 0; i < R * D; i++) x[i] = 3.0f * x[i] + (float)(i % 3);
  float c_two = 2.0f, c_eps = 1e-3f;
  for (int pinned = 0; pinned < 2; pinned++) {
    tpu_graph_t *g = tg_new();
    int64_t xd[] = {TPU_GRAPH_BATCH, D}, gd[] = {D};
    input(g, "x", 2, xd);
    init(g, "gamma", 1, gd, gam, D);
    init(g, "beta", 1, gd, bet, D);
    init(g, "two", 0, NULL, &c_two, 1);
    init(g, "eps", 0, NULL, &c_eps, 1);
    const char *m_in[] = {"x"}, *s_in[] = {"x", "m"}, *p_in[] = {"d", "two"}, *v_in[] = {"p"},
               *a_in[] = {"v", "eps"}, *q_in[] = {"a"}, *n_in[] = {"d", "q"},
               *g_in[] = {"n", "gamma"}, *b_in[] = {"g", "beta"};
    tpu_graph_attr_t axes = {.name = "axes", .type = TPU_GRAPH_ATTR_INTS, .n = 1,
                             .ints = (const int64_t[]){-1}};
    size_t r1 = node(g, "mean", "ReduceMean", 1, m_in, "m");
    CU_ASSERT_FATAL(tpu_graph_add_attr(g, r1, &axes) == TPU_OK);
    node(g, "sub", "Sub", 2, s_in, "d");
    node(g, "pow", "Pow", 2, p_in, "p");
    size_t r2 = node(g, "var", "ReduceMean", 1, v_in, "v");
    CU_ASSERT_FATAL(tpu_graph_add_attr(g, r2, &axes) == TPU_OK);
    node(g, "add", "Add", 2, a_in, "a");
    node(g, "sqrt", "Sqrt", 1, q_in, "q");
    node(g, "div", "Div", 2, n_in, "n");
    node(g, "mul", "Mul", 2, g_in, "g");
    node(g, "add_1", "Add", 2, b_in, "y");
    const char *ins[] = {"x"}, *outs[] = {"y", "d"};
    CU_ASSERT_FATAL(tpu_graph_set_inputs(g, 1, ins) == TPU_OK);
    CU_ASSERT_FATAL(tpu_graph_set_outputs(g, pinned ? 2 : 1, outs) == TPU_OK);
    tpu_graph_program_t *p = NULL;
    CU_ASSERT_FATAL(tpu_graph_compile(g, tg_engine(), R, NULL, &p) == TPU_OK);
    CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), pinned ? 9u : 1u);
    char desc[2048];
    tpu_graph_program_describe(p, desc, sizeof desc);
    CU_ASSERT_EQUAL(strstr(desc, "LayerNormalization") != NULL, !pinned);
    /* what a loader does after compiling: γ and β must survive it */
    tpu_graph_release_constants(g, (const tpu_graph_program_t *const *)&p, 1);
    const void *in[] = {x};
    void *out[] = {y, dd};
    CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
    double worst = 0;
    for (int r = 0; r < R; r++) {
      double mean = 0, var = 0;
      for (int k = 0; k < D; k++) mean += x[r * D + k];
      mean /= D;
      for (int k = 0; k < D; k++) var += (x[r * D + k] - mean) * (x[r * D + k] - mean);
      double inv = 1 / sqrt(var / D + (double)c_eps);
      for (int k = 0; k < D; k++) {
        double want = (x[r * D + k] - mean) * inv * gam[k] + bet[k];
        double err = fabs(y[r * D + k] - want) - 1e-5 * fabs(want);
        if (err > worst) worst = err;
      }
    }
    if (worst >= 1e-5) fprintf(stderr, "layernorm (pinned %d): worst excess %g\n", pinned, worst);
    CU_ASSERT(worst < 1e-5);
    tpu_graph_program_free(p);
    tpu_graph_free(g);
  }
}

/* Gemm → BatchNormalization → Relu (a PyTorch MLP with BatchNorm1d, eval mode) folds into one
 * engine plan and agrees with relu(γ·(x·Wᵀ + b − μ)/√(σ²+ε) + β). */
static void test_batchnorm_fold(void) {
  static float w[N * K], b[N], x[M * K], y[M * N], gam[N], bet[N], mu[N], var[N];
  fill(w, N * K);
  fill(b, N);
  fill(x, M * K);
  fill(gam, N);
  fill(bet, N);
  fill(mu, N);
  fill(var, N);
  for (int j = 0; j < N; j++) var[j] = var[j] * var[j] + 0.1f;
  tpu_graph_t *g = tg_new();
  int64_t xd[] = {TPU_GRAPH_BATCH, K}, wd[] = {N, K}, bd[] = {N};
  input(g, "x", 2, xd);
  init(g, "W", 2, wd, w, N * K);
  init(g, "b", 1, bd, b, N);
  init(g, "gamma", 1, bd, gam, N);
  init(g, "beta", 1, bd, bet, N);
  init(g, "mean", 1, bd, mu, N);
  init(g, "var", 1, bd, var, N);
  const char *gin[] = {"x", "W", "b"}, *bn_in[] = {"h", "gamma", "beta", "mean", "var"},
             *r_in[] = {"n"};
  size_t gn = node(g, "fc", "Gemm", 3, gin, "h");
  attr_i(g, gn, "transB", 1);
  size_t bn = node(g, "bn", "BatchNormalization", 5, bn_in, "n");
  attr_f(g, bn, "epsilon", 1e-3f);
  node(g, "act", "Relu", 1, r_in, "y");
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g, M, NULL);
  CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), 1);
  char desc[512];
  tpu_graph_program_describe(p, desc, sizeof desc);
  CU_ASSERT_PTR_NOT_NULL(strstr(desc, "batchnorm relu"));
  const void *in[] = {x};
  void *out[] = {y};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double h = b[j];
      for (int k = 0; k < K; k++) h += (double)x[i * K + k] * w[j * K + k];
      double v = gam[j] * (h - mu[j]) / sqrt((double)var[j] + 1e-3) + bet[j];
      v = v > 0 ? v : 0;
      double e = fabs(y[i * N + j] - v) - 1e-5 * fabs(v);
      if (e > worst) worst = e;
    }
  CU_ASSERT(worst < 1e-5);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}


/* A bias Add that raises the rank ([4,4] + [1,1,4] → [1,4,4]) moves BatchNormalization's
 * channel axis onto the rows: it must not be folded into the columns (a fuzzing review found
 * it was). The result follows ONNX: channel c = dimension 1. */
static void test_batchnorm_not_folded_across_rank(void) {
  float w[12], x[12], b[4], gam[4], bet[4], mu[4], var[4], y[16];
  fill(w, 12);
  fill(x, 12);
  fill(b, 4);
  fill(gam, 4);
  fill(bet, 4);
  fill(mu, 4);
  fill(var, 4);
  for (int j = 0; j < 4; j++) var[j] = var[j] * var[j] + 0.5f;
  tpu_graph_t *g = tg_new();
  int64_t xd[] = {4, 3}, wd[] = {3, 4}, bd[] = {1, 1, 4}, cd[] = {4};
  input(g, "x", 2, xd);
  init(g, "W", 2, wd, w, 12);
  init(g, "b", 3, bd, b, 4);
  init(g, "gamma", 1, cd, gam, 4);
  init(g, "beta", 1, cd, bet, 4);
  init(g, "mean", 1, cd, mu, 4);
  init(g, "var", 1, cd, var, 4);
  const char *min[] = {"x", "W"}, *ain[] = {"h", "b"},
             *bn_in[] = {"a", "gamma", "beta", "mean", "var"};
  node(g, "mm", "MatMul", 2, min, "h");
  node(g, "add", "Add", 2, ain, "a");
  node(g, "bn", "BatchNormalization", 5, bn_in, "y");
  io(g, "x", "y");
  tpu_graph_program_t *p = compile(g, 1, NULL);
  const void *in[] = {x};
  void *out[] = {y};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
  double worst = 0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      double h = b[j];
      for (int k = 0; k < 3; k++) h += (double)x[i * 3 + k] * w[k * 4 + j];
      double v = gam[i] * (h - mu[i]) / sqrt((double)var[i] + 1e-5) + bet[i]; /* channel = row */
      double e = fabs(y[i * 4 + j] - v);
      if (e > worst) worst = e;
    }
  CU_ASSERT(worst < 1e-5);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}


typedef struct {
  int calls;
  size_t m, k, n;
  float amax[64], wmax[64];
} obs_t;

static void observe_cb(void *user, const char *node, const float *a, size_t m, size_t k,
                       const float *w, tpu_layout_t layout, size_t n) {
  obs_t *o = user;
  CU_ASSERT_STRING_EQUAL(node, "mm");
  o->calls++;
  o->m = m, o->k = k, o->n = n;
  for (size_t i = 0; i < m * k; i++)
    if (fabsf(a[i]) > o->amax[i % k]) o->amax[i % k] = fabsf(a[i]);
  for (size_t i = 0; i < k * n; i++) {
    size_t kk = layout == TPU_LAYOUT_NK ? i % k : i / n;
    if (fabsf(w[i]) > o->wmax[kk]) o->wmax[kk] = fabsf(w[i]);
  }
}

/* INT8 on badly scaled input channels (0.05 .. 2500, as unscaled tabular features): per-row
 * quantization loses the small channels; SmoothQuant factors from observed statistics
 * (s_k = sqrt(max|X_k| / max|W_k|)) balance them first, and a static scale from the same
 * statistics works too. Each stays the same product in exact arithmetic. */
static void test_int8_smoothing(void) {
  enum { R = 32, KK = 16, NN = 8 };
  static float w[KK * NN], x[R * KK], ref[R * NN], y[R * NN];
  fill(w, KK * NN);
  fill(x, R * KK);
  for (int i = 0; i < R * KK; i++) x[i] *= (i % KK) < 8 ? 0.05f : 2500.0f; /* two scales */
  for (int i = 0; i < KK * NN; i++) w[i] *= (i / NN) < 8 ? 1000.0f : 0.02f; /* both matter */
  tpu_graph_t *g = tg_new();
  int64_t xd[] = {TPU_GRAPH_BATCH, KK}, wd[] = {KK, NN};
  input(g, "x", 2, xd);
  init(g, "W", 2, wd, w, KK * NN);
  const char *min[] = {"x", "W"};
  node(g, "mm", "MatMul", 2, min, "y");
  io(g, "x", "y");
  const void *in[] = {x};
  tpu_graph_compile_opts_t fo = {.observable = 1};
  tpu_graph_program_t *p = compile(g, R, &fo);
  obs_t o = {0};
  void *outr[] = {ref};
  CU_ASSERT_FATAL(tpu_graph_program_observe(p, in, outr, observe_cb, &o) == TPU_OK);
  CU_ASSERT_EQUAL(o.calls, 1);
  CU_ASSERT(o.m == R && o.k == KK && o.n == NN);
  tpu_graph_program_free(p);
  float smooth[KK], amax_s = 0;
  for (int k = 0; k < KK; k++) {
    smooth[k] = sqrtf(o.amax[k] / o.wmax[k]);
    if (o.amax[k] / smooth[k] > amax_s) amax_s = o.amax[k] / smooth[k];
  }
  double err[3];
  for (int mode = 0; mode < 3; mode++) { /* plain, smoothed, smoothed + static scale */
    tpu_graph_calib_t cb = {.node = "mm", .k = KK, .smooth = mode ? smooth : NULL,
                            .act_scale = mode == 2 ? amax_s / 127 : 0};
    tpu_graph_compile_opts_t qo = {.precision = TPU_DTYPE_INT8, .calib = mode ? &cb : NULL,
                                   .ncalib = mode ? 1 : 0};
    p = compile(g, R, &qo);
    char desc[256];
    tpu_graph_program_describe(p, desc, sizeof desc);
    CU_ASSERT_EQUAL(strstr(desc, "smoothed") != NULL, mode >= 1);
    CU_ASSERT_EQUAL(strstr(desc, "static-scale") != NULL, mode == 2);
    void *out[] = {y};
    CU_ASSERT_FATAL(tpu_graph_program_run(p, in, out) == TPU_OK);
    double e2 = 0, n2 = 0;
    for (int i = 0; i < R * NN; i++) {
      e2 += (y[i] - ref[i]) * (double)(y[i] - ref[i]);
      n2 += ref[i] * (double)ref[i];
    }
    err[mode] = sqrt(e2 / n2);
    tpu_graph_program_free(p);
  }
  if (getenv("TPU_TEST_VERBOSE") || !(err[1] < err[0] / 4 && err[2] < err[0] / 2))
    fprintf(stderr, "\n  int8 relative errors: plain %g, smoothed %g, static %g\n", err[0],
            err[1], err[2]);
  CU_ASSERT(err[1] < err[0] / 4);
  CU_ASSERT(err[2] < err[0] / 2);
  tpu_graph_free(g);
}

static void test_arguments(void) {
  tpu_graph_program_t *p = (tpu_graph_program_t *)&p;
  CU_ASSERT_EQUAL(tpu_graph_compile(NULL, tg_engine(), 1, NULL, &p), TPU_EINVAL);
  CU_ASSERT_PTR_NULL(p);
  CU_ASSERT_EQUAL(tpu_graph_program_run(NULL, NULL, NULL), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_graph_program_step_count(NULL), 0);
  CU_ASSERT_STRING_EQUAL(tpu_graph_program_error(NULL), "");
  tpu_graph_program_free(NULL);
}

TPU_TEST_SUITE(graph_exec,
               {"gemm_fused", test_gemm_fused},
               {"matmul_add_fused", test_matmul_add_fused},
               {"gelu_pattern", test_gelu_pattern},
               {"layernorm_pattern", test_layernorm_pattern},
               {"batchnorm_fold", test_batchnorm_fold},
               {"int8_smoothing", test_int8_smoothing},
               {"batchnorm_not_folded_across_rank", test_batchnorm_not_folded_across_rank},
               {"matmul_tensors", test_matmul_tensors},
               {"folding_and_trans_a", test_folding_and_trans_a},
               {"precision", test_precision},
               {"arguments", test_arguments})
