/*
 * test_graph_quant.c - the quantization kernels of the graph executor (engine/graph/
 * ops_quant.c: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
 * QLinearMatMul) and their shape rules (infer.c), run through tpu_graph_compile /
 * tpu_graph_program_run on one-node graphs.
 *
 * DESIGN
 * Expected values come from the ONNX formulas evaluated here in double precision, with a
 * rounding-half-to-even written independently of the kernel's (floor and a parity test, not
 * rint), and exact int64 sums for the integer products. Hand cases pick power-of-two scales so
 * that every quotient is exact in float and in double and ties really are ties: those must
 * match exactly (ties, saturation, NaN and infinities, per-axis and per-block parameters).
 * Random cases use arbitrary scales: there a float quotient may round across .5 where the
 * double one does not, so an element may differ by one quantum only when its double quotient
 * lies within float rounding of a tie; everything else must match exactly. Seeds are printed on
 * failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_graph.h"
#include "graph_test.h"
#include "tpu_test.h"

static size_t tnode(tpu_graph_t *g, const char *op, int opset, const char *ins,
                    const char *outs) {
  char b1[256], b2[256];
  const char *in[16], *out[16];
  size_t nin = tg_split(ins, b1, sizeof b1, in), nout = tg_split(outs, b2, sizeof b2, out), idx = 0;
  tpu_status_t st = tpu_graph_add_node(g, "q", op, NULL, opset, nin, in, nout, out, &idx);
  if (st != TPU_OK) fprintf(stderr, "add_node %s: %s\n", op, tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
  return idx;
}

/* Compiles, runs once and frees a graph. */
static void run_graph(tpu_graph_t *g, const void *const *in, void *const *out) {
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), 1, NULL, &p);
  if (st != TPU_OK) fprintf(stderr, "compile: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK && p);
  st = tpu_graph_program_run(p, in, out);
  if (st != TPU_OK) fprintf(stderr, "run: %s\n", tpu_graph_program_error(p));
  CU_ASSERT_FATAL(st == TPU_OK);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* Compiling g must fail with st and a message containing `has`; frees g. */
static void compile_fails(tpu_graph_t *g, tpu_status_t want, const char *has) {
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), 1, NULL, &p);
  if (st != want || !strstr(tpu_graph_error(g), has))
    fprintf(stderr, "compile: %s (%s), expected %s with '%s'\n", tpu_strerror(st),
            tpu_graph_error(g), tpu_strerror(want), has);
  CU_ASSERT_EQUAL(st, want);
  CU_ASSERT(strstr(tpu_graph_error(g), has) != NULL);
  CU_ASSERT(strstr(tpu_graph_error(g), "node 'q'") != NULL);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* ---- the reference formulas, in double ---- */

/* Round half to even, without rint: floor, then the fraction decides, a tie goes to the even
 * neighbour. */
static double rne(double v) {
  double f = floor(v), d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return fmod(f, 2.0) == 0 ? f : f + 1;
}

/* Whether v lies within a relative 2.5e-7 of a tie k + 0.5: as close as a float computation of
 * v (at most two roundings) may land on the other side of it. */
static int near_tie(double v) { return fabs(v - floor(v) - 0.5) <= 2.5e-7 * fabs(v) + 1e-12; }

static double sat(double v, int is_signed) {
  double lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  return v < lo ? lo : v > hi ? hi : v;
}

/* QuantizeLinear of one element: sat(rne(x / s) + zp); NaN gives zp (tpud's documented
 * choice; ONNX leaves it open). */
static double ref_q(double x, double s, double zp, int is_signed) {
  double v = x / s;
  if (v != v) return zp;
  if (isinf(v)) return sat(v, is_signed);
  return sat(rne(v) + zp, is_signed);
}

static void test_reference_rounding(void) {
  /* The oracle itself: ties to even, both signs. */
  CU_ASSERT_EQUAL(rne(2.5), 2);
  CU_ASSERT_EQUAL(rne(3.5), 4);
  CU_ASSERT_EQUAL(rne(-2.5), -2);
  CU_ASSERT_EQUAL(rne(-3.5), -4);
  CU_ASSERT_EQUAL(rne(-0.5), 0);
  CU_ASSERT_EQUAL(rne(0.5), 0);
  CU_ASSERT_EQUAL(rne(1.5), 2);
  CU_ASSERT_EQUAL(rne(2.5000001), 3);
  CU_ASSERT_EQUAL(rne(-2.4999999), -2);
}

/* ---- QuantizeLinear ---- */

/* x (graph input, FP32, n values) quantized with scalar scale s and zero point zp of dtype zdt
 * (UNDEFINED: no zero point input) at opset `opset`; checks every element against ref_q. */
static void check_quantize_scalar(const float *x, size_t n, float s, int zp,
                                  tpu_graph_dtype_t zdt, int opset) {
  tpu_graph_t *g = tg_new();
  int64_t d = (int64_t)n;
  tg_input(g, "x", TPU_GRAPH_FP32, 1, &d);
  tg_init(g, "s", TPU_GRAPH_FP32, 0, NULL, &s);
  if (zdt == TPU_GRAPH_INT8) {
    int8_t z = (int8_t)zp;
    tg_init(g, "z", zdt, 0, NULL, &z);
  } else if (zdt == TPU_GRAPH_UINT8) {
    uint8_t z = (uint8_t)zp;
    tg_init(g, "z", zdt, 0, NULL, &z);
  }
  tnode(g, "QuantizeLinear", opset, zdt == TPU_GRAPH_UNDEFINED ? "x,s" : "x,s,z", "y");
  tg_io(g, "x", "y");
  unsigned char y[64];
  const void *in[] = {x};
  void *out[] = {y};
  run_graph(g, in, out);
  int is_signed = zdt == TPU_GRAPH_INT8;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    double got = is_signed ? (int8_t)y[i] : y[i];
    double want = ref_q(x[i], s, zdt == TPU_GRAPH_UNDEFINED ? 0 : zp, is_signed);
    if (got != want && !bad++)
      fprintf(stderr, "QuantizeLinear x=%g s=%g zp=%d: got %g, expected %g\n", x[i], s, zp, got,
              want);
  }
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_quantize_ties_saturation(void) {
  /* With s = 0.5 every x below is an exact tie or far from one: x / s = -5.5, -2.5, ... */
  const float x[] = {-2.75f, -1.25f, -0.75f, -0.25f, 0.25f, 0.75f, 1.25f, 2.75f,
                     0.0f,   -0.0f,  0.3f,   -0.3f,  1000.f, -1000.f, 63.25f, 63.75f,
                     -64.25f, -63.75f, 127.75f, -128.25f, NAN, INFINITY, -INFINITY, 1e30f};
  size_t n = sizeof x / sizeof x[0];
  check_quantize_scalar(x, n, 0.5f, 0, TPU_GRAPH_UINT8, 13);
  check_quantize_scalar(x, n, 0.5f, 128, TPU_GRAPH_UINT8, 13);
  check_quantize_scalar(x, n, 0.5f, 0, TPU_GRAPH_INT8, 13);
  check_quantize_scalar(x, n, 0.5f, -3, TPU_GRAPH_INT8, 10);
  check_quantize_scalar(x, n, 0.5f, 0, TPU_GRAPH_UNDEFINED, 10); /* UINT8, zero point 0 */
  check_quantize_scalar(x, n, 0.25f, 7, TPU_GRAPH_INT8, 19);
  /* The ties the formula gives, by hand, so the oracle cannot drift: 2.5 → 2, -2.5 → -2,
   * 1.5 → 2, 5.5 → 6 (zero point 0, INT8). */
  const float t[] = {1.25f, -1.25f, 0.75f, 2.75f};
  tpu_graph_t *g = tg_new();
  int64_t d = 4;
  float s = 0.5f;
  int8_t z = 0;
  tg_input(g, "x", TPU_GRAPH_FP32, 1, &d);
  tg_init(g, "s", TPU_GRAPH_FP32, 0, NULL, &s);
  tg_init(g, "z", TPU_GRAPH_INT8, 0, NULL, &z);
  tnode(g, "QuantizeLinear", 13, "x,s,z", "y");
  tg_io(g, "x", "y");
  int8_t y[4];
  run_graph(g, (const void *[]){t}, (void *[]){y});
  CU_ASSERT(y[0] == 2 && y[1] == -2 && y[2] == 2 && y[3] == 6);
}

static void test_quantize_int32_input(void) {
  const int32_t x[] = {5, -5, 7, 9, -9, 1000, -1000, 3, 0};
  tpu_graph_t *g = tg_new();
  int64_t d = 9;
  float s = 2.0f;
  uint8_t z = 100;
  tg_input(g, "x", TPU_GRAPH_INT32, 1, &d);
  tg_init(g, "s", TPU_GRAPH_FP32, 0, NULL, &s);
  tg_init(g, "z", TPU_GRAPH_UINT8, 0, NULL, &z);
  tnode(g, "QuantizeLinear", 13, "x,s,z", "y");
  tg_io(g, "x", "y");
  uint8_t y[9];
  run_graph(g, (const void *[]){x}, (void *[]){y});
  for (int i = 0; i < 9; i++) CU_ASSERT_EQUAL(y[i], ref_q(x[i], s, z, 0));
}

/* Per-axis QuantizeLinear of x [2,3,4] along `axis` with power-of-two scales and INT8 zero
 * points; x holds quarter-steps, so there are ties on every axis. */
static void check_quantize_axis(int64_t axis) {
  const int64_t dims[] = {2, 3, 4};
  int ax = (int)(axis < 0 ? axis + 3 : axis);
  int64_t len = dims[ax];
  float x[24], s[4];
  int8_t z[4], y[24];
  for (int i = 0; i < 24; i++) x[i] = (float)(i - 12) * 0.375f;
  for (int i = 0; i < len; i++) {
    s[i] = ldexpf(1.0f, i - 2); /* 0.25, 0.5, 1, 2 */
    z[i] = (int8_t)(i * 5 - 4);
  }
  tpu_graph_t *g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 3, dims);
  tg_init(g, "s", TPU_GRAPH_FP32, 1, &len, s);
  tg_init(g, "z", TPU_GRAPH_INT8, 1, &len, z);
  size_t n = tnode(g, "QuantizeLinear", 13, "x,s,z", "y");
  tg_attr_i(g, n, "axis", axis);
  tg_io(g, "x", "y");
  run_graph(g, (const void *[]){x}, (void *[]){y});
  int bad = 0;
  for (int i = 0; i < 24; i++) {
    int idx[3] = {i / 12, (i / 4) % 3, i % 4};
    double want = ref_q(x[i], s[idx[ax]], z[idx[ax]], 1);
    if (y[i] != want && !bad++)
      fprintf(stderr, "axis %lld element %d: got %d, expected %g\n", (long long)axis, i, y[i],
              want);
  }
  CU_ASSERT_EQUAL(bad, 0);
}

static void test_quantize_per_axis(void) {
  check_quantize_axis(0);
  check_quantize_axis(1); /* the default */
  check_quantize_axis(2);
  check_quantize_axis(-1);
}

/* Opset 21 blocks: x [2,5], axis 1, block 2: scales [2,3] (the last block holds one column). */
static void test_quantize_blocked(void) {
  const int64_t xd[] = {2, 5}, sd[] = {2, 3};
  float x[10], s[6];
  uint8_t z[6], y[10];
  for (int i = 0; i < 10; i++) x[i] = (float)i * 0.75f - 1.0f;
  for (int i = 0; i < 6; i++) {
    s[i] = ldexpf(1.0f, (i % 3) - 1);
    z[i] = (uint8_t)(10 * i);
  }
  tpu_graph_t *g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 2, xd);
  tg_init(g, "s", TPU_GRAPH_FP32, 2, sd, s);
  tg_init(g, "z", TPU_GRAPH_UINT8, 2, sd, z);
  size_t n = tnode(g, "QuantizeLinear", 21, "x,s,z", "y");
  tg_attr_i(g, n, "axis", 1);
  tg_attr_i(g, n, "block_size", 2);
  tg_io(g, "x", "y");
  run_graph(g, (const void *[]){x}, (void *[]){y});
  for (int i = 0; i < 10; i++) {
    int p = (i / 5) * 3 + (i % 5) / 2;
    CU_ASSERT_EQUAL(y[i], ref_q(x[i], s[p], z[p], 0));
  }
}

/* Random x and arbitrary (non-dyadic) per-axis scales. */
static void test_quantize_random(void) {
  enum { ROWS = 7, COLS = 33 };
  const int64_t dims[] = {ROWS, COLS}, len = COLS;
  static float x[ROWS * COLS];
  static uint8_t y[ROWS * COLS];
  float s[COLS];
  uint8_t z[COLS];
  for (int i = 0; i < ROWS * COLS; i++) x[i] = tpu_test_rand_float(-40, 40);
  for (int j = 0; j < COLS; j++) {
    s[j] = tpu_test_rand_float(0.01f, 0.5f);
    z[j] = (uint8_t)tpu_test_rand_range(0, 255);
  }
  tpu_graph_t *g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 2, dims);
  tg_init(g, "s", TPU_GRAPH_FP32, 1, &len, s);
  tg_init(g, "z", TPU_GRAPH_UINT8, 1, &len, z);
  size_t n = tnode(g, "QuantizeLinear", 13, "x,s,z", "y");
  tg_attr_i(g, n, "axis", -1);
  tg_io(g, "x", "y");
  run_graph(g, (const void *[]){x}, (void *[]){y});
  int bad = 0;
  for (int i = 0; i < ROWS * COLS; i++) {
    int j = i % COLS;
    double want = ref_q(x[i], s[j], z[j], 0);
    int ok = y[i] == want || (fabs(y[i] - want) == 1 && near_tie((double)x[i] / s[j]));
    if (!ok && !bad++)
      fprintf(stderr, "x=%.9g s=%.9g zp=%d: got %d, expected %g\n", x[i], s[j], z[j], y[i],
              want);
  }
  TPU_ASSERT_SEED(bad == 0);
}

/* ---- DequantizeLinear ---- */

static void test_dequantize(void) {
  /* Per tensor, INT8 and UINT8, scales not dyadic: (x - zp) · s is exact in double, so one
   * rounding to float gives the expected value. */
  const int8_t xi[] = {-128, -127, -1, 0, 1, 5, 126, 127};
  const uint8_t xu[] = {0, 1, 127, 128, 129, 200, 254, 255};
  for (int signed_ = 0; signed_ < 2; signed_++) {
    tpu_graph_t *g = tg_new();
    int64_t d = 8;
    float s = 0.1f;
    int8_t zi = -7;
    uint8_t zu = 131;
    tpu_graph_dtype_t dt = signed_ ? TPU_GRAPH_INT8 : TPU_GRAPH_UINT8;
    tg_input(g, "x", dt, 1, &d);
    tg_init(g, "s", TPU_GRAPH_FP32, 0, NULL, &s);
    tg_init(g, "z", dt, 0, NULL, signed_ ? (const void *)&zi : (const void *)&zu);
    tnode(g, "DequantizeLinear", 13, "x,s,z", "y");
    tg_io(g, "x", "y");
    float y[8];
    run_graph(g, (const void *[]){signed_ ? (const void *)xi : (const void *)xu}, (void *[]){y});
    for (int i = 0; i < 8; i++) {
      double xv = signed_ ? xi[i] : xu[i], zv = signed_ ? zi : zu;
      CU_ASSERT_EQUAL(y[i], (float)((xv - zv) * (double)s));
    }
  }
  /* INT32 input without a zero point (values below 2^24: exact in float). */
  {
    const int32_t x[] = {-16777215, -3, 0, 7, 123456, 16777215};
    tpu_graph_t *g = tg_new();
    int64_t d = 6;
    float s = 0.0625f;
    tg_input(g, "x", TPU_GRAPH_INT32, 1, &d);
    tg_init(g, "s", TPU_GRAPH_FP32, 0, NULL, &s);
    tnode(g, "DequantizeLinear", 10, "x,s", "y");
    tg_io(g, "x", "y");
    float y[6];
    run_graph(g, (const void *[]){x}, (void *[]){y});
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(y[i], (float)((double)x[i] * s));
  }
  /* Per axis 0 of [3,2] with UINT8 zero points. */
  {
    const int64_t dims[] = {3, 2}, len = 3;
    const uint8_t x[] = {0, 255, 10, 20, 128, 129};
    const float s[] = {0.5f, 0.3f, 3.0f};
    const uint8_t z[] = {1, 15, 128};
    tpu_graph_t *g = tg_new();
    tg_input(g, "x", TPU_GRAPH_UINT8, 2, dims);
    tg_init(g, "s", TPU_GRAPH_FP32, 1, &len, s);
    tg_init(g, "z", TPU_GRAPH_UINT8, 1, &len, z);
    size_t n = tnode(g, "DequantizeLinear", 13, "x,s,z", "y");
    tg_attr_i(g, n, "axis", 0);
    tg_io(g, "x", "y");
    float y[6];
    run_graph(g, (const void *[]){x}, (void *[]){y});
    for (int i = 0; i < 6; i++)
      CU_ASSERT_EQUAL(y[i], (float)(((double)x[i] - z[i / 2]) * (double)s[i / 2]));
  }
}

/* ---- DynamicQuantizeLinear ---- */

/* Runs it on x and checks scale, zero point and y against the formula. */
static void check_dynamic(const float *x, size_t n) {
  tpu_graph_t *g = tg_new();
  int64_t d = (int64_t)n;
  tg_input(g, "x", TPU_GRAPH_FP32, 1, &d);
  tnode(g, "DynamicQuantizeLinear", 11, "x", "y,ys,yz");
  tg_io(g, "x", "y,ys,yz");
  uint8_t y[64], yz = 77;
  float ys = -1;
  run_graph(g, (const void *[]){x}, (void *[]){y, &ys, &yz});
  double mn = 0, mx = 0;
  for (size_t i = 0; i < n; i++) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
  }
  double s = (mx - mn) / 255;
  CU_ASSERT(fabs(ys - s) <= 2.5e-7 * s);
  if (s == 0) {
    CU_ASSERT_EQUAL(ys, 0);
    CU_ASSERT_EQUAL(yz, 0);
    for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(y[i], 0);
    return;
  }
  double izp = -mn / ys;
  double zp = rne(sat(izp, 0));
  CU_ASSERT(yz == zp || (fabs(yz - zp) == 1 && near_tie(izp)));
  for (size_t i = 0; i < n; i++) {
    double want = ref_q(x[i], ys, yz, 0);
    CU_ASSERT(y[i] == want || (fabs(y[i] - want) == 1 && near_tie(x[i] / ys)));
  }
}

static void test_dynamic_quantize(void) {
  const float mixed[] = {-1.0f, 0.5f, 2.0f, 1.25f, -0.75f, 0.0f, 1.999f};
  const float pos[] = {0.5f, 1.0f, 5.1f, 3.3f};
  const float neg[] = {-0.5f, -1.0f, -5.1f, -3.3f};
  const float zeros[] = {0, 0, 0};
  check_dynamic(mixed, 7);
  check_dynamic(pos, 4); /* zero point 0 */
  check_dynamic(neg, 4); /* zero point 255 */
  check_dynamic(zeros, 3);
  float r[64];
  for (int i = 0; i < 64; i++) r[i] = tpu_test_rand_float(-7, 11);
  check_dynamic(r, 64);
}

/* ---- MatMulInteger / QLinearMatMul ---- */

/* Element (b, i, k) of a matmul operand of shape dims (rank ≥ 1) at output batch index bt of
 * the output batch shape (rb, bd): the index into the operand, numpy-broadcast. */
static size_t mm_index(int rank, const int64_t *dims, int rb, const int64_t *bd, size_t bt,
                       size_t r, size_t c) {
  if (rank == 1) return r + c; /* a 1-D operand: the caller passes 0 for the other index */
  size_t rows = (size_t)dims[rank - 2], cols = (size_t)dims[rank - 1], mat = 0, stride = 1;
  for (int d = rb - 1; d >= 0; d--) {
    size_t idx = bt % (size_t)bd[d];
    bt /= (size_t)bd[d];
    int od = d - (rb - (rank - 2));
    if (od < 0) continue;
    if (dims[od] != 1) mat += idx * stride;
    stride *= (size_t)dims[od];
  }
  return (mat * rows + r) * cols + c;
}

/* Batch matrix of an operand at output batch index bt (for per-matrix zero points). */
static size_t mm_mat(int rank, const int64_t *dims, int rb, const int64_t *bd, size_t bt) {
  if (rank <= 2) return 0;
  return mm_index(rank, dims, rb, bd, bt, 0, 0) / (size_t)(dims[rank - 2] * dims[rank - 1]);
}

static double ld8(const void *p, size_t i, int is_signed) {
  return is_signed ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}

typedef struct {
  int ra, rb;
  int64_t ad[4], bd[4];
  int a_signed, b_signed;
  int za_kind, zb_kind; /* -1 absent, 0 scalar, 1 vector (M or N), 2 per batch matrix */
} mmi_case_t;

/* Zero-point shape of kind k for operand (r, d): row (A) or column (B). */
static int zp_shape(int k, int r, const int64_t *d, int row, int64_t *zd) {
  if (k == 0) return 0;
  if (k == 1) {
    zd[0] = r >= 2 ? d[r - (row ? 2 : 1)] : 1;
    return 1;
  }
  for (int i = 0; i < r; i++) zd[i] = d[i];
  zd[r - (row ? 1 : 2)] = 1;
  return r;
}

/* Index of zero point kind k for row/col i of batch matrix mat of len rows/cols. */
static size_t zp_index(int k, size_t mat, size_t len, size_t i) {
  return k <= 0 ? 0 : k == 1 ? i : mat * len + i;
}

/* Output batch shape and M, K, N of numpy.matmul. */
static int mm_dims(const mmi_case_t *c, int64_t *bd, size_t *m, size_t *k, size_t *n) {
  int pa = c->ra >= 2 ? c->ra - 2 : 0, pb = c->rb >= 2 ? c->rb - 2 : 0, ro = pa > pb ? pa : pb;
  for (int i = 0; i < ro; i++) {
    int64_t x = i - (ro - pa) >= 0 ? c->ad[i - (ro - pa)] : 1;
    int64_t y = i - (ro - pb) >= 0 ? c->bd[i - (ro - pb)] : 1;
    bd[i] = x == 1 ? y : x;
  }
  *k = (size_t)c->ad[c->ra - 1];
  *m = c->ra >= 2 ? (size_t)c->ad[c->ra - 2] : 1;
  *n = c->rb >= 2 ? (size_t)c->bd[c->rb - 1] : 1;
  return ro;
}

/* Runs MatMulInteger (qlinear 0) or QLinearMatMul (1) on random data of case c and checks it.
 * b_const: B is an initializer (the engine's INT8 plan when B is 2-D), else a graph input (the
 * reference loops). */
static void check_qmm(const mmi_case_t *c, int qlinear, int dyadic, int b_const) {
  int64_t bd[4], zad[4], zbd[4];
  size_t m, k, n;
  int ro = mm_dims(c, bd, &m, &k, &n);
  size_t batches = tg_count(ro, bd), na = tg_count(c->ra, c->ad), nb = tg_count(c->rb, c->bd);
  int za_r = zp_shape(c->za_kind, c->ra, c->ad, 1, zad);
  int zb_r = zp_shape(c->zb_kind, c->rb, c->bd, 0, zbd);
  size_t nza = tg_count(za_r, zad), nzb = tg_count(zb_r, zbd);
  unsigned char *a = malloc(na), *b = malloc(nb), za[64], zb[64], zy;
  float sa[64], sb[64], sy;
  size_t no = batches * m * n;
  void *y = malloc(no * 4 + 4);
  for (size_t i = 0; i < na; i++) a[i] = (unsigned char)tpu_test_rand_range(0, 255);
  for (size_t i = 0; i < nb; i++) b[i] = (unsigned char)tpu_test_rand_range(0, 255);
  for (size_t i = 0; i < nza; i++) za[i] = (unsigned char)tpu_test_rand_range(0, 255);
  for (size_t i = 0; i < nzb; i++) zb[i] = (unsigned char)tpu_test_rand_range(0, 255);
  for (size_t i = 0; i < 64; i++) {
    float r1 = tpu_test_rand_float(0.001f, 0.05f), r2 = tpu_test_rand_float(0.001f, 0.05f);
    sa[i] = dyadic ? ldexpf(1, (int)tpu_test_rand_range(-6, -3)) : r1;
    sb[i] = dyadic ? ldexpf(1, (int)tpu_test_rand_range(-6, -3)) : r2;
  }
  sy = dyadic ? ldexpf(1, -4) : tpu_test_rand_float(0.05f, 0.5f);
  zy = (unsigned char)tpu_test_rand_range(0, 255);
  int y_signed = (int)tpu_test_rand_range(0, 1);
  tpu_graph_dtype_t adt = c->a_signed ? TPU_GRAPH_INT8 : TPU_GRAPH_UINT8;
  tpu_graph_dtype_t bdt = c->b_signed ? TPU_GRAPH_INT8 : TPU_GRAPH_UINT8;
  tpu_graph_dtype_t ydt = y_signed ? TPU_GRAPH_INT8 : TPU_GRAPH_UINT8;
  tpu_graph_t *g = tg_new();
  tg_input(g, "a", adt, c->ra, c->ad);
  if (b_const)
    tg_init(g, "b", bdt, c->rb, c->bd, b);
  else
    tg_input(g, "b", bdt, c->rb, c->bd);
  if (c->za_kind >= 0) tg_init(g, "za", adt, za_r, zad, za);
  if (c->zb_kind >= 0) tg_init(g, "zb", bdt, zb_r, zbd, zb);
  if (qlinear) {
    tg_init(g, "sa", TPU_GRAPH_FP32, za_r, zad, sa);
    tg_init(g, "sb", TPU_GRAPH_FP32, zb_r, zbd, sb);
    tg_init(g, "sy", TPU_GRAPH_FP32, 0, NULL, &sy);
    tg_init(g, "zy", ydt, 0, NULL, &zy);
    tnode(g, "QLinearMatMul", 10, "a,sa,za,b,sb,zb,sy,zy", "y");
  } else {
    char ins[32];
    snprintf(ins, sizeof ins, "a,b%s%s", c->za_kind >= 0 ? ",za" : c->zb_kind >= 0 ? "," : "",
             c->zb_kind >= 0 ? ",zb" : "");
    tnode(g, "MatMulInteger", 10, ins, "y");
  }
  tg_io(g, b_const ? "a" : "a,b", "y");
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), 1, NULL, &p);
  if (st != TPU_OK) fprintf(stderr, "compile: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
  char desc[512];
  tpu_graph_program_describe(p, desc, sizeof desc);
  CU_ASSERT_EQUAL(strstr(desc, "engine plan int8") != NULL, b_const && c->rb == 2);
  tpu_graph_io_t io;
  CU_ASSERT_FATAL(tpu_graph_program_output(p, 0, &io) == TPU_OK);
  CU_ASSERT_EQUAL(io.dtype, qlinear ? ydt : TPU_GRAPH_INT32);
  CU_ASSERT_EQUAL(io.elems, no);
  CU_ASSERT_FATAL(tpu_graph_program_run(p, (const void *[]){a, b}, (void *[]){y}) == TPU_OK);
  int bad = 0;
  for (size_t bt = 0; bt < batches; bt++) {
    size_t am = mm_mat(c->ra, c->ad, ro, bd, bt), bm = mm_mat(c->rb, c->bd, ro, bd, bt);
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++) {
        size_t pa = zp_index(c->za_kind, am, m, i), pb = zp_index(c->zb_kind, bm, n, j);
        double zav = c->za_kind >= 0 ? ld8(za, pa, c->a_signed) : 0;
        double zbv = c->zb_kind >= 0 ? ld8(zb, pb, c->b_signed) : 0;
        int64_t acc = 0;
        for (size_t kk = 0; kk < k; kk++) {
          double av = ld8(a, mm_index(c->ra, c->ad, ro, bd, bt, c->ra == 1 ? 0 : i, kk),
                          c->a_signed);
          double bv = ld8(b, mm_index(c->rb, c->bd, ro, bd, bt, kk, c->rb == 1 ? 0 : j),
                          c->b_signed);
          acc += (int64_t)(av - zav) * (int64_t)(bv - zbv);
        }
        size_t oi = (bt * m + i) * n + j;
        double got, want;
        int ok;
        if (qlinear) {
          double v = (double)acc * ((double)sa[pa] * sb[pb] / sy);
          got = y_signed ? ((int8_t *)y)[oi] : ((uint8_t *)y)[oi];
          want = sat(rne(v) + ld8(&zy, 0, y_signed), y_signed);
          ok = got == want || (!dyadic && fabs(got - want) == 1 && near_tie(v));
        } else {
          got = ((int32_t *)y)[oi];
          want = (double)acc;
          ok = got == want;
        }
        if (!ok && !bad++)
          fprintf(stderr, "%s batch %zu [%zu,%zu]: got %g, expected %g\n",
                  qlinear ? "QLinearMatMul" : "MatMulInteger", bt, i, j, got, want);
      }
  }
  TPU_ASSERT_SEED(bad == 0);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
  free(a);
  free(b);
  free(y);
}

static const mmi_case_t mm_cases[] = {
    {2, 2, {3, 5}, {5, 4}, 0, 0, -1, -1},
    {2, 2, {3, 5}, {5, 4}, 0, 1, 0, 0},
    {2, 2, {3, 5}, {5, 4}, 1, 1, 1, 1},
    {2, 2, {3, 5}, {5, 4}, 1, 0, -1, 1},
    {2, 2, {1, 7}, {7, 1}, 1, 0, 0, -1},
    {1, 2, {6}, {6, 3}, 0, 1, 0, 1},
    {2, 1, {4, 6}, {6}, 1, 1, 1, 0},
    {4, 3, {2, 1, 3, 5}, {4, 5, 6}, 0, 1, 2, 2},
    {3, 3, {2, 3, 4}, {1, 4, 2}, 1, 0, 2, 1},
    {3, 2, {2, 3, 4}, {4, 5}, 0, 0, 1, 0},
    {3, 2, {2, 3, 4}, {4, 5}, 1, 1, 2, 2},
    {3, 2, {2, 3, 4}, {4, 5}, 0, 0, -1, -1},
    {2, 2, {16, 64}, {64, 33}, 0, 1, 0, 1},
};

static void test_matmul_integer(void) {
  for (size_t i = 0; i < sizeof mm_cases / sizeof mm_cases[0]; i++) {
    check_qmm(&mm_cases[i], 0, 0, 1);
    check_qmm(&mm_cases[i], 0, 0, 0);
  }
}

static void test_qlinear_matmul_random(void) {
  for (size_t i = 0; i < sizeof mm_cases / sizeof mm_cases[0]; i++) {
    mmi_case_t c = mm_cases[i];
    if (c.za_kind < 0) c.za_kind = 0; /* QLinearMatMul takes every zero point */
    if (c.zb_kind < 0) c.zb_kind = 0;
    for (int b_const = 0; b_const < 2; b_const++) {
      check_qmm(&c, 1, 0, b_const);
      check_qmm(&c, 1, 1, b_const); /* dyadic scales: exact, ties included */
    }
  }
}

/* QLinearMatMul by hand: 1x1 products with a multiplier of 0.5, so odd accumulators are ties,
 * and large ones saturate. */
static void test_qlinear_matmul_ties(void) {
  const int64_t ad[] = {8, 1}, bd[] = {1, 1};
  const uint8_t a[] = {1, 3, 5, 7, 255, 0, 2, 129};
  const uint8_t za = 0, zb = 0;
  const uint8_t b = 1;
  const float sa = 0.5f, sb = 1.0f, sy = 1.0f;
  const int8_t zy = -1;
  tpu_graph_t *g = tg_new();
  tg_input(g, "a", TPU_GRAPH_UINT8, 2, ad);
  tg_init(g, "sa", TPU_GRAPH_FP32, 0, NULL, &sa);
  tg_init(g, "za", TPU_GRAPH_UINT8, 0, NULL, &za);
  tg_init(g, "b", TPU_GRAPH_UINT8, 2, bd, &b);
  tg_init(g, "sb", TPU_GRAPH_FP32, 0, NULL, &sb);
  tg_init(g, "zb", TPU_GRAPH_UINT8, 0, NULL, &zb);
  tg_init(g, "sy", TPU_GRAPH_FP32, 0, NULL, &sy);
  tg_init(g, "zy", TPU_GRAPH_INT8, 0, NULL, &zy);
  tnode(g, "QLinearMatMul", 10, "a,sa,za,b,sb,zb,sy,zy", "y");
  tg_io(g, "a", "y");
  int8_t y[8];
  run_graph(g, (const void *[]){a}, (void *[]){y});
  for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(y[i], sat(rne(a[i] * 0.5) - 1, 1));
  /* By hand: 0.5, 1.5, 2.5, 3.5 round to 0, 2, 2, 4, then zy = -1; 127.5 rounds to 128, minus 1
   * is 127 (the top of INT8); 64.5 rounds to 64. */
  CU_ASSERT(y[0] == -1 && y[1] == 1 && y[2] == 1 && y[3] == 3 && y[4] == 127 && y[7] == 63);
}

/* ---- what inference and prepare refuse ---- */

static void test_errors(void) {
  int64_t d4 = 4, d3 = 3, d2[] = {2, 4};
  float s3[3] = {1, 1, 1}, s1 = 1;
  int32_t z32 = 0;
  /* Per-axis scale of the wrong length. */
  tpu_graph_t *g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 2, d2);
  tg_init(g, "s", TPU_GRAPH_FP32, 1, &d3, s3);
  tnode(g, "QuantizeLinear", 13, "x,s", "y");
  tg_io(g, "x", "y");
  compile_fails(g, TPU_ESHAPE, "1-D of 4 elements");
  /* Per-axis scales before opset 13. */
  g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 1, &d3);
  tg_init(g, "s", TPU_GRAPH_FP32, 1, &d3, s3);
  tnode(g, "QuantizeLinear", 10, "x,s", "y");
  tg_io(g, "x", "y");
  compile_fails(g, TPU_ESHAPE, "before opset 13");
  /* An INT32 zero point. */
  g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 1, &d4);
  tg_init(g, "s", TPU_GRAPH_FP32, 0, NULL, &s1);
  tg_init(g, "z", TPU_GRAPH_INT32, 0, NULL, &z32);
  tnode(g, "QuantizeLinear", 13, "x,s,z", "y");
  tg_io(g, "x", "y");
  compile_fails(g, TPU_EDTYPE, "expected INT8 or UINT8");
  /* MatMulInteger of floats. */
  g = tg_new();
  tg_input(g, "a", TPU_GRAPH_FP32, 2, d2);
  tg_input(g, "b", TPU_GRAPH_FP32, 2, (int64_t[]){4, 2});
  tnode(g, "MatMulInteger", 10, "a,b", "y");
  tg_io(g, "a,b", "y");
  compile_fails(g, TPU_EDTYPE, "input 'a' (A) is FP32");
  /* MatMulInteger with a zero point of the wrong length. */
  g = tg_new();
  tg_input(g, "a", TPU_GRAPH_UINT8, 2, d2);
  tg_input(g, "b", TPU_GRAPH_UINT8, 2, (int64_t[]){4, 2});
  tg_init(g, "za", TPU_GRAPH_UINT8, 1, &d3, (uint8_t[]){1, 2, 3});
  tnode(g, "MatMulInteger", 10, "a,b,za", "y");
  tg_io(g, "a,b", "y");
  compile_fails(g, TPU_ESHAPE, "a_zero_point 'za' [3]");
  /* MatMulInteger disagreeing on K. */
  g = tg_new();
  tg_input(g, "a", TPU_GRAPH_INT8, 2, d2);
  tg_input(g, "b", TPU_GRAPH_INT8, 2, (int64_t[]){3, 2});
  tnode(g, "MatMulInteger", 10, "a,b", "y");
  tg_io(g, "a,b", "y");
  compile_fails(g, TPU_ESHAPE, "disagree on K");
  /* QLinearMatMul with a per-row y_scale. */
  g = tg_new();
  uint8_t z2[2] = {0, 0}, z0 = 0;
  float s2[2] = {1, 1};
  tg_input(g, "a", TPU_GRAPH_UINT8, 2, (int64_t[]){2, 2});
  tg_init(g, "sa", TPU_GRAPH_FP32, 0, NULL, &s1);
  tg_init(g, "za", TPU_GRAPH_UINT8, 0, NULL, &z0);
  tg_input(g, "b", TPU_GRAPH_UINT8, 2, (int64_t[]){2, 2});
  tg_init(g, "sb", TPU_GRAPH_FP32, 0, NULL, &s1);
  tg_init(g, "zb", TPU_GRAPH_UINT8, 0, NULL, &z0);
  tg_init(g, "sy", TPU_GRAPH_FP32, 1, (int64_t[]){2}, s2);
  tg_init(g, "zy", TPU_GRAPH_UINT8, 1, (int64_t[]){2}, z2);
  tnode(g, "QLinearMatMul", 10, "a,sa,za,b,sb,zb,sy,zy", "y");
  tg_io(g, "a,b", "y");
  compile_fails(g, TPU_ESHAPE, "y_scale 'sy' [2] must be a scalar");
  /* DequantizeLinear to FP16 (opset 19 scale type): inferred, refused by the kernel. */
  g = tg_new();
  uint16_t h = 0x3c00; /* 1.0 */
  tg_input(g, "x", TPU_GRAPH_INT8, 1, &d4);
  tg_init(g, "s", TPU_GRAPH_FP16, 0, NULL, &h);
  tnode(g, "DequantizeLinear", 19, "x,s", "y");
  tg_io(g, "x", "y");
  compile_fails(g, TPU_ENOTSUP, "FP32 or BF16 scales");
}

/* All-constant quantize/dequantize chains are folded at compile time by the same kernels. */
static void test_folded_chain(void) {
  const float w[] = {-1.0f, -0.25f, 0.0f, 0.375f, 1.0f, 3.0f};
  int64_t d = 6;
  float s = 0.25f, one = 1.0f;
  int8_t z = 2;
  tpu_graph_t *g = tg_new();
  tg_init(g, "w", TPU_GRAPH_FP32, 1, &d, w);
  tg_init(g, "s", TPU_GRAPH_FP32, 0, NULL, &s);
  tg_init(g, "z", TPU_GRAPH_INT8, 0, NULL, &z);
  tg_input(g, "x", TPU_GRAPH_FP32, 1, &d);
  tg_init(g, "one", TPU_GRAPH_FP32, 0, NULL, &one);
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "q", "QuantizeLinear", NULL, 13, 3,
                                     (const char *[]){"w", "s", "z"}, 1,
                                     (const char *[]){"wq"}, NULL) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "dq", "DequantizeLinear", NULL, 13, 3,
                                     (const char *[]){"wq", "s", "z"}, 1,
                                     (const char *[]){"wd"}, NULL) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "add", "Add", NULL, 14, 2,
                                     (const char *[]){"x", "wd"}, 1, (const char *[]){"y"},
                                     NULL) == TPU_OK);
  tg_io(g, "x", "y");
  tpu_graph_program_t *p = NULL;
  CU_ASSERT_FATAL(tpu_graph_compile(g, tg_engine(), 1, NULL, &p) == TPU_OK);
  CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), 1); /* only the Add runs */
  float x[6] = {0}, y[6];
  CU_ASSERT_FATAL(tpu_graph_program_run(p, (const void *[]){x}, (void *[]){y}) == TPU_OK);
  for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(y[i], (float)((ref_q(w[i], s, z, 1) - z) * s));
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

TPU_TEST_SUITE(graph_quant,
               {"reference_rounding", test_reference_rounding},
               {"quantize_ties_saturation", test_quantize_ties_saturation},
               {"quantize_int32_input", test_quantize_int32_input},
               {"quantize_per_axis", test_quantize_per_axis},
               {"quantize_blocked", test_quantize_blocked},
               {"quantize_random", test_quantize_random},
               {"dequantize", test_dequantize},
               {"dynamic_quantize", test_dynamic_quantize},
               {"matmul_integer", test_matmul_integer},
               {"qlinear_matmul_random", test_qlinear_matmul_random},
               {"qlinear_matmul_ties", test_qlinear_matmul_ties},
               {"errors", test_errors},
               {"folded_chain", test_folded_chain})
