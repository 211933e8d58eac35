/*
 * test_graph_ew.c - the elementwise kernels of the graph executor (engine/graph/
 * ops_elementwise.c), run through tpu_graph_compile / tpu_graph_program_run on one-node graphs.
 *
 * DESIGN
 * Each test builds a small graph with the public builder, compiles it and checks the outputs
 * against a reference computed here: exact C arithmetic where the op is exact (Add, Cast, Max),
 * the C library (expf, erf, ...) in float or double otherwise, and hand-derived bit patterns
 * for the rounding cases of Cast (ties to even, overflow, subnormals, double rounding).
 * Broadcasting is checked against an index computation written independently of the kernel's
 * plan, over fixed edge shapes and random ones (seeded, printed on failure).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_graph.h"
#include "graph_test.h"
#include "tpu_test.h"

#define MAXR TPU_GRAPH_MAX_RANK

static size_t tnode(tpu_graph_t *g, const char *op, int opset, const char *ins,
                    const char *outs) {
  char b1[256], b2[256];
  const char *in[16], *out[16];
  size_t nin = tg_split(ins, b1, sizeof b1, in), nout = tg_split(outs, b2, sizeof b2, out), idx = 0;
  tpu_status_t st = tpu_graph_add_node(g, "n", op, NULL, opset, nin, in, nout, out, &idx);
  if (st != TPU_OK) fprintf(stderr, "add_node %s: %s\n", op, tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
  return idx;
}

static void attr_f(tpu_graph_t *g, size_t n, const char *name, float v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_FLOAT, .f = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
}

static void attr_s(tpu_graph_t *g, size_t n, const char *name, const char *v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_STRING, .s = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
}

static tpu_graph_program_t *build(tpu_graph_t *g) {
  tpu_graph_program_t *p = NULL;
  tpu_status_t st = tpu_graph_compile(g, tg_engine(), 1, NULL, &p);
  if (st != TPU_OK) fprintf(stderr, "compile: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK && p);
  return p;
}

static void run_ok(tpu_graph_program_t *p, const void *const *in, void *const *out) {
  tpu_status_t st = tpu_graph_program_run(p, in, out);
  if (st != TPU_OK) fprintf(stderr, "run: %s\n", tpu_graph_program_error(p));
  CU_ASSERT_FATAL(st == TPU_OK);
}

/* Compiles, runs once and frees a graph with graph inputs in[] and outputs out[]. */
static void run_graph(tpu_graph_t *g, const void *const *in, void *const *out) {
  tpu_graph_program_t *p = build(g);
  run_ok(p, in, out);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

/* A one-node op over graph inputs "a" (and "b", "c") into "y", with the given dtypes/shapes. */
static tpu_graph_t *unary_graph(const char *op, int opset, tpu_graph_dtype_t dt, int rank,
                                const int64_t *dims, size_t *node) {
  tpu_graph_t *g = tg_new();
  tg_input(g, "a", dt, rank, dims);
  size_t n = tnode(g, op, opset, "a", "y");
  if (node) *node = n;
  tg_io(g, "a", "y");
  return g;
}

/* Index into an operand of shape (r, d) of flat element `flat` of an output (ro, od). */
static size_t bc_index(int ro, const int64_t *od, size_t flat, int r, const int64_t *d) {
  size_t idx = 0, stride = 1;
  for (int i = ro - 1; i >= 0; i--) {
    size_t c = flat % (size_t)od[i];
    flat /= (size_t)od[i];
    int k = i - (ro - r);
    if (k < 0) continue;
    if (d[k] != 1) idx += c * stride;
    stride *= (size_t)d[k];
  }
  return idx;
}

/* Output shape of numpy broadcasting. */
static int bc_shape(int ra, const int64_t *da, int rb, const int64_t *db, int64_t *out) {
  int ro = ra > rb ? ra : rb;
  for (int i = 0; i < ro; i++) {
    int64_t x = i - (ro - ra) >= 0 ? da[i - (ro - ra)] : 1;
    int64_t y = i - (ro - rb) >= 0 ? db[i - (ro - rb)] : 1;
    out[i] = x == 1 ? y : x;
  }
  return ro;
}

static float ref_bin(const char *op, float x, float y) {
  if (!strcmp(op, "Add")) return x + y;
  if (!strcmp(op, "Sub")) return x - y;
  if (!strcmp(op, "Mul")) return x * y;
  if (!strcmp(op, "Div")) return x / y;
  if (!strcmp(op, "Max")) return x > y ? x : y;
  if (!strcmp(op, "Min")) return x < y ? x : y;
  return powf(x, y);
}

/* One FP32 binary op over shapes a, b; checks the output shape and every element. */
static int check_bin_f32(const char *op, int ra, const int64_t *da, int rb, const int64_t *db) {
  int64_t od[MAXR];
  int ro = bc_shape(ra, da, rb, db, od);
  size_t na = tg_count(ra, da), nb = tg_count(rb, db), no = tg_count(ro, od);
  float *a = malloc(na * 4 + 4), *b = malloc(nb * 4 + 4), *y = malloc(no * 4 + 4);
  int pow_op = !strcmp(op, "Pow");
  for (size_t i = 0; i < na; i++) a[i] = tpu_test_rand_float(pow_op ? 0.1f : -4, 4);
  for (size_t i = 0; i < nb; i++) {
    b[i] = tpu_test_rand_float(-3, 3);
    if (!strcmp(op, "Div") && fabsf(b[i]) < 0.01f) b[i] = 0.5f;
  }
  tpu_graph_t *g = tg_new();
  tg_input(g, "a", TPU_GRAPH_FP32, ra, da);
  tg_input(g, "b", TPU_GRAPH_FP32, rb, db);
  tnode(g, op, 13, "a,b", "y");
  tg_io(g, "a,b", "y");
  tpu_graph_program_t *p = build(g);
  tpu_graph_io_t io;
  CU_ASSERT_FATAL(tpu_graph_program_output(p, 0, &io) == TPU_OK);
  CU_ASSERT_EQUAL(io.rank, ro);
  CU_ASSERT_EQUAL(io.elems, no);
  const void *in[] = {a, b};
  void *out[] = {y};
  run_ok(p, in, out);
  int bad = 0;
  for (size_t i = 0; i < no; i++) {
    float want = ref_bin(op, a[bc_index(ro, od, i, ra, da)], b[bc_index(ro, od, i, rb, db)]);
    int ok = pow_op ? fabsf(y[i] - want) <= 1e-6f * fabsf(want) + 1e-30f : y[i] == want;
    if (!ok && !bad++)
      fprintf(stderr, "%s: element %zu is %g, want %g (ranks %d, %d)\n", op, i, y[i], want, ra,
              rb);
  }
  tpu_graph_program_free(p);
  tpu_graph_free(g);
  free(a);
  free(b);
  free(y);
  return bad == 0;
}

static void test_broadcast_shapes(void) {
  static const struct {
    int ra;
    int64_t da[4];
    int rb;
    int64_t db[4];
  } cases[] = {
      {3, {2, 3, 4}, 0, {0}},        /* scalar operand */
      {0, {0}, 3, {2, 3, 4}},        /* scalar first */
      {1, {4}, 3, {2, 3, 4}},        /* row vector first */
      {2, {64, 256}, 1, {256}},      /* the tabular bias add */
      {2, {3, 1}, 2, {1, 4}},        /* outer-product broadcast */
      {3, {2, 1, 4}, 2, {3, 1}},     /* rank 3, both broadcast */
      {3, {2, 3, 4}, 3, {2, 3, 4}},  /* same shape */
      {1, {1}, 1, {5}},              /* [1] against [5] */
      {3, {2, 1, 1}, 3, {1, 3, 1}},  /* broadcast on the last axis of both */
      {2, {1, 1}, 2, {1, 1}},        /* one element */
      {3, {2, 3, 1}, 3, {2, 3, 5}},  /* column broadcast */
      {4, {2, 1, 3, 1}, 3, {4, 1, 1}}, /* rank 4 */
      {2, {0, 3}, 1, {3}},           /* empty */
  };
  static const char *ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
      TPU_ASSERT_SEED(check_bin_f32(ops[o], cases[c].ra, cases[c].da, cases[c].rb, cases[c].db));
}

/* Random shapes up to rank 5 in which each dimension of each operand may be 1 or missing. */
static void test_broadcast_random(void) {
  for (int iter = 0; iter < 60; iter++) {
    int ro = (int)tpu_test_rand_range(1, 5);
    int64_t full[MAXR], da[MAXR], db[MAXR];
    for (int i = 0; i < ro; i++) full[i] = tpu_test_rand_range(1, 4);
    int ra = (int)tpu_test_rand_range(0, ro), rb = (int)tpu_test_rand_range(0, ro);
    if (tpu_test_rand_range(0, 1)) ra = ro; else rb = ro;
    for (int i = 0; i < ra; i++)
      da[i] = tpu_test_rand_range(0, 2) ? full[ro - ra + i] : 1;
    for (int i = 0; i < rb; i++)
      db[i] = tpu_test_rand_range(0, 2) ? full[ro - rb + i] : 1;
    TPU_ASSERT_SEED(check_bin_f32(iter % 2 ? "Add" : "Mul", ra, da, rb, db));
  }
}

/* Integer and FP64 arithmetic: wraparound, truncating division, broadcasting a scalar. */
static void test_binary_dtypes(void) {
  int64_t d4[] = {4};
  { /* INT32: wrap on overflow, truncation toward zero */
    int32_t a[] = {INT32_MAX, -7, 7, INT32_MIN}, b[] = {1, 2, -2, 3}, y[4];
    static const char *ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min"};
    int32_t want[][4] = {{INT32_MIN, -5, 5, INT32_MIN + 3},
                         {INT32_MAX - 1, -9, 9, INT32_MAX - 2},
                         {INT32_MAX, -14, -14, INT32_MIN},
                         {INT32_MAX, -3, -3, INT32_MIN / 3},
                         {INT32_MAX, 2, 7, 3},
                         {1, -7, -2, INT32_MIN}};
    for (int o = 0; o < 6; o++) {
      tpu_graph_t *g = tg_new();
      tg_input(g, "a", TPU_GRAPH_INT32, 1, d4);
      tg_input(g, "b", TPU_GRAPH_INT32, 1, d4);
      tnode(g, ops[o], 14, "a,b", "y");
      tg_io(g, "a,b", "y");
      const void *in[] = {a, b};
      void *out[] = {y};
      run_graph(g, in, out);
      CU_ASSERT(memcmp(y, want[o], sizeof y) == 0);
    }
  }
  { /* INT64 with a scalar divisor and multiplier */
    int64_t a[] = {INT64_MAX, -9, 9, 0}, s = -4, y[4];
    int64_t wdiv[] = {INT64_MAX / -4, 2, -2, 0};
    int64_t wmul[] = {(int64_t)((uint64_t)INT64_MAX * (uint64_t)-4), 36, -36, 0};
    for (int o = 0; o < 2; o++) {
      tpu_graph_t *g = tg_new();
      tg_input(g, "a", TPU_GRAPH_INT64, 1, d4);
      tg_input(g, "b", TPU_GRAPH_INT64, 0, NULL);
      tnode(g, o ? "Mul" : "Div", 14, "a,b", "y");
      tg_io(g, "a,b", "y");
      const void *in[] = {a, &s};
      void *out[] = {y};
      run_graph(g, in, out);
      CU_ASSERT(memcmp(y, o ? wmul : wdiv, sizeof y) == 0);
    }
  }
  { /* INT8 and UINT8 wrap */
    int8_t a[] = {127, -128, 100, -3}, b[] = {1, -1, 100, 5}, y[4];
    int8_t wadd[] = {-128, 127, -56, 2}, wmul[] = {127, -128, 16, -15};
    uint8_t ua[] = {250, 3, 16, 0}, ub[] = {10, 5, 16, 1}, uy[4];
    uint8_t uadd[] = {4, 8, 32, 1}, usub[] = {240, 254, 0, 255}, umul[] = {196, 15, 0, 0};
    static const char *ops[] = {"Add", "Sub", "Mul"};
    for (int o = 0; o < 3; o++) {
      tpu_graph_t *g = tg_new();
      tg_input(g, "a", TPU_GRAPH_INT8, 1, d4);
      tg_input(g, "b", TPU_GRAPH_INT8, 1, d4);
      tnode(g, ops[o], 14, "a,b", "y");
      tg_io(g, "a,b", "y");
      const void *in[] = {a, b};
      void *out[] = {y};
      run_graph(g, in, out);
      int8_t wsub[] = {126, -127, 0, -8};
      CU_ASSERT(memcmp(y, o == 0 ? wadd : o == 1 ? wsub : wmul, 4) == 0);
      g = tg_new();
      tg_input(g, "a", TPU_GRAPH_UINT8, 1, d4);
      tg_input(g, "b", TPU_GRAPH_UINT8, 1, d4);
      tnode(g, ops[o], 14, "a,b", "y");
      tg_io(g, "a,b", "y");
      const void *uin[] = {ua, ub};
      void *uout[] = {uy};
      run_graph(g, uin, uout);
      CU_ASSERT(memcmp(uy, o == 0 ? uadd : o == 1 ? usub : umul, 4) == 0);
    }
  }
  { /* FP64 in double */
    double a[] = {1.0 / 3, -2.5, 1e300, 0.1}, b[] = {3, 0.5, 1e10, 0.2}, y[4];
    static const char *ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
    for (int o = 0; o < 7; o++) {
      tpu_graph_t *g = tg_new();
      tg_input(g, "a", TPU_GRAPH_FP64, 1, d4);
      tg_input(g, "b", TPU_GRAPH_FP64, 1, d4);
      tnode(g, ops[o], 15, "a,b", "y");
      tg_io(g, "a,b", "y");
      const void *in[] = {a, b};
      void *out[] = {y};
      run_graph(g, in, out);
      for (int i = 0; i < 4; i++) {
        double x = a[i], z = b[i];
        double want = o == 0 ? x + z : o == 1 ? x - z : o == 2 ? x * z : o == 3 ? x / z
                      : o == 4 ? fmax(x, z) : o == 5 ? fmin(x, z) : pow(x, z);
        CU_ASSERT(isnan(want) ? isnan(y[i]) : y[i] == want);
      }
    }
  }
}

/* Integer division by zero and MIN / -1 are run failures naming the divisor; the program
 * still runs afterwards. Folded at compile time, the same failure fails the compile. */
static void test_int_div_errors(void) {
  int64_t d3[] = {3};
  {
    tpu_graph_t *g = tg_new();
    tg_input(g, "num", TPU_GRAPH_INT32, 1, d3);
    tg_input(g, "den", TPU_GRAPH_INT32, 1, d3);
    tnode(g, "Div", 14, "num,den", "y");
    tg_io(g, "num,den", "y");
    tpu_graph_program_t *p = build(g);
    int32_t a[] = {1, 2, 3}, b[] = {1, 0, 1}, y[3];
    const void *in[] = {a, b};
    void *out[] = {y};
    CU_ASSERT(tpu_graph_program_run(p, in, out) == TPU_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_program_error(p), "'den'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_program_error(p), "node 'n'"));
    int32_t a2[] = {INT32_MIN, 2, 3}, b2[] = {-1, 1, 1};
    const void *in2[] = {a2, b2};
    CU_ASSERT(tpu_graph_program_run(p, in2, out) == TPU_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_program_error(p), "'den'"));
    b[1] = 2;
    run_ok(p, in, out);
    CU_ASSERT(y[0] == 1 && y[1] == 1 && y[2] == 3);
    CU_ASSERT_STRING_EQUAL(tpu_graph_program_error(p), "");
    tpu_graph_program_free(p);
    tpu_graph_free(g);
  }
  {
    tpu_graph_t *g = tg_new();
    int64_t a[] = {INT64_MIN, 5, 6}, m1 = -1;
    tg_input(g, "num", TPU_GRAPH_INT64, 1, d3);
    tg_input(g, "den", TPU_GRAPH_INT64, 0, NULL);
    tnode(g, "Div", 14, "num,den", "y");
    tg_io(g, "num,den", "y");
    tpu_graph_program_t *p = build(g);
    int64_t y[3];
    const void *in[] = {a, &m1};
    void *out[] = {y};
    CU_ASSERT(tpu_graph_program_run(p, in, out) == TPU_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_program_error(p), "'den'"));
    tpu_graph_program_free(p);
    tpu_graph_free(g);
  }
  { /* constant operands: folded at compile time */
    tpu_graph_t *g = tg_new();
    int64_t a[] = {4, 5, 6}, z[] = {1, 0, 1};
    tg_input(g, "x", TPU_GRAPH_INT64, 1, d3);
    tg_init(g, "ka", TPU_GRAPH_INT64, 1, d3, a);
    tg_init(g, "kz", TPU_GRAPH_INT64, 1, d3, z);
    tnode(g, "Div", 14, "ka,kz", "q");
    CU_ASSERT_FATAL(tpu_graph_add_node(g, "m", "Add", NULL, 14, 2, (const char *[]){"q", "x"}, 1,
                                       (const char *[]){"y"}, NULL) == TPU_OK);
    tg_io(g, "x", "y");
    tpu_graph_program_t *p = NULL;
    CU_ASSERT(tpu_graph_compile(g, tg_engine(), 1, NULL, &p) == TPU_ERANGE);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "'kz'"));
    tpu_graph_free(g);
  }
}

static void test_pow(void) {
  int64_t d5[] = {5};
  { /* FP32 base, INT64 exponent; the exponent 2 broadcast as a scalar */
    float a[] = {1.5f, -2, 0.25f, 3, -0.5f}, y[5];
    int64_t e[] = {2, 3, -2, 0, 5}, two = 2;
    for (int scalar = 0; scalar < 2; scalar++) {
      tpu_graph_t *g = tg_new();
      tg_input(g, "a", TPU_GRAPH_FP32, 1, d5);
      tg_input(g, "e", TPU_GRAPH_INT64, scalar ? 0 : 1, d5);
      tnode(g, "Pow", 15, "a,e", "y");
      tg_io(g, "a,e", "y");
      const void *in[] = {a, scalar ? (const void *)&two : e};
      void *out[] = {y};
      run_graph(g, in, out);
      for (int i = 0; i < 5; i++)
        CU_ASSERT(fabsf(y[i] - powf(a[i], (float)(scalar ? 2 : e[i]))) <=
                  1e-6f * fabsf(y[i]));
    }
  }
  { /* integer powers: wrap, negative exponents */
    int64_t a[] = {2, -3, 2, 1, -1}, e[] = {62, 3, -1, -5, -3}, y[5];
    int64_t want[] = {(int64_t)1 << 62, -27, 0, 1, -1};
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_INT64, 1, d5);
    tg_input(g, "e", TPU_GRAPH_INT64, 1, d5);
    tnode(g, "Pow", 15, "a,e", "y");
    tg_io(g, "a,e", "y");
    tpu_graph_program_t *p = build(g);
    const void *in[] = {a, e};
    void *out[] = {y};
    run_ok(p, in, out);
    CU_ASSERT(memcmp(y, want, sizeof y) == 0);
    a[0] = 0; /* 0^62 is fine, 0^-1 is not */
    a[2] = 0;
    CU_ASSERT(tpu_graph_program_run(p, in, out) == TPU_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_program_error(p), "'e'"));
    tpu_graph_program_free(p);
    tpu_graph_free(g);
  }
  { /* INT32 base with INT32 exponent wraps */
    int32_t a[] = {2, 3, -2, 7, 0}, e[] = {31, 2, 31, 1, 0}, y[5];
    int32_t want[] = {INT32_MIN, 9, INT32_MIN, 7, 1};
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_INT32, 1, d5);
    tg_input(g, "e", TPU_GRAPH_INT32, 1, d5);
    tnode(g, "Pow", 15, "a,e", "y");
    tg_io(g, "a,e", "y");
    const void *in[] = {a, e};
    void *out[] = {y};
    run_graph(g, in, out);
    CU_ASSERT(memcmp(y, want, sizeof y) == 0);
  }
  { /* FP64 base, FP32 exponent */
    double a[] = {2, 10, 0.5, 3, 1e-3}, y[5];
    float e[] = {0.5f, -1, 3, 2, 1.5f};
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP64, 1, d5);
    tg_input(g, "e", TPU_GRAPH_FP32, 1, d5);
    tnode(g, "Pow", 15, "a,e", "y");
    tg_io(g, "a,e", "y");
    const void *in[] = {a, e};
    void *out[] = {y};
    run_graph(g, in, out);
    for (int i = 0; i < 5; i++) CU_ASSERT(y[i] == pow(a[i], (double)e[i]));
  }
  { /* an FP32 base with a UINT8 exponent is refused, naming the exponent */
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP32, 1, d5);
    tg_input(g, "e8", TPU_GRAPH_UINT8, 1, d5);
    tnode(g, "Pow", 15, "a,e8", "y");
    tg_io(g, "a,e8", "y");
    tpu_graph_program_t *p = NULL;
    CU_ASSERT(tpu_graph_compile(g, tg_engine(), 1, NULL, &p) == TPU_ENOTSUP);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "'e8' is UINT8"));
    tpu_graph_free(g);
  }
}

/* Max/Min with 1 and 3 inputs (broadcast together), and NaN propagation. */
static void test_max_min_variadic(void) {
  int64_t d23[] = {2, 3}, d3[] = {3}, d21[] = {2, 1};
  float a[] = {1, -5, 3, 0, 8, -1}, b[] = {2, 2, 2}, c[] = {-3, 4}, y[6];
  for (int mx = 0; mx < 2; mx++) {
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP32, 2, d23);
    tg_input(g, "b", TPU_GRAPH_FP32, 1, d3);
    tg_input(g, "c", TPU_GRAPH_FP32, 2, d21);
    tnode(g, mx ? "Max" : "Min", 13, "b,a,c", "y");
    tg_io(g, "a,b,c", "y");
    const void *in[] = {a, b, c};
    void *out[] = {y};
    run_graph(g, in, out);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++) {
        float v = b[j], w = a[i * 3 + j], z = c[i];
        float want = mx ? fmaxf(fmaxf(v, w), z) : fminf(fminf(v, w), z);
        CU_ASSERT(y[i * 3 + j] == want);
      }
  }
  { /* one input: a copy */
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP32, 2, d23);
    tnode(g, "Max", 13, "a", "y");
    tg_io(g, "a", "y");
    const void *in[] = {a};
    void *out[] = {y};
    run_graph(g, in, out);
    CU_ASSERT(memcmp(y, a, sizeof a) == 0);
  }
  { /* NaN in either operand wins */
    float p[] = {NAN, 1, 2}, q[] = {0, NAN, 1}, r[3];
    for (int mx = 0; mx < 2; mx++) {
      tpu_graph_t *g = tg_new();
      tg_input(g, "a", TPU_GRAPH_FP32, 1, d3);
      tg_input(g, "b", TPU_GRAPH_FP32, 1, d3);
      tnode(g, mx ? "Max" : "Min", 13, "a,b", "y");
      tg_io(g, "a,b", "y");
      const void *in[] = {p, q};
      void *out[] = {r};
      run_graph(g, in, out);
      CU_ASSERT(isnan(r[0]) && isnan(r[1]) && r[2] == (mx ? 2 : 1));
    }
  }
  { /* INT64 */
    int64_t p[] = {INT64_MIN, 5, -7}, q = -6, r[3];
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_INT64, 1, d3);
    tg_input(g, "b", TPU_GRAPH_INT64, 0, NULL);
    tnode(g, "Max", 13, "a,b", "y");
    tg_io(g, "a,b", "y");
    const void *in[] = {p, &q};
    void *out[] = {r};
    run_graph(g, in, out);
    CU_ASSERT(r[0] == -6 && r[1] == 5 && r[2] == -6);
  }
}

/* Where: condition [2,1,3], x [4,1], y scalar → [2,4,3]; then INT64 and FP16 (data movement). */
static void test_where(void) {
  int64_t dc[] = {2, 1, 3}, dx[] = {4, 1}, od[] = {2, 4, 3};
  uint8_t cond[] = {1, 0, 1, 0, 0, 1};
  float x[] = {10, 20, 30, 40}, yv = -1, out[24];
  tpu_graph_t *g = tg_new();
  tg_input(g, "c", TPU_GRAPH_BOOL, 3, dc);
  tg_input(g, "x", TPU_GRAPH_FP32, 2, dx);
  tg_input(g, "s", TPU_GRAPH_FP32, 0, NULL);
  tnode(g, "Where", 16, "c,x,s", "y");
  tg_io(g, "c,x,s", "y");
  const void *in[] = {cond, x, &yv};
  void *outs[] = {out};
  run_graph(g, in, outs);
  for (size_t i = 0; i < 24; i++) {
    float want = cond[bc_index(3, od, i, 3, dc)] ? x[bc_index(3, od, i, 2, dx)] : yv;
    CU_ASSERT(out[i] == want);
  }
  int64_t d3[] = {3};
  uint8_t c3[] = {0, 1, 0};
  int64_t a[] = {1, 2, 3}, b[] = {-1, -2, -3}, r[3];
  uint16_t h[] = {0x3c00, 0x4000, 0x4200}, hz[] = {0, 0, 0}, hr[3];
  for (int k = 0; k < 2; k++) {
    g = tg_new();
    tg_input(g, "c", TPU_GRAPH_BOOL, 1, d3);
    tg_input(g, "x", k ? TPU_GRAPH_FP16 : TPU_GRAPH_INT64, 1, d3);
    tg_input(g, "z", k ? TPU_GRAPH_FP16 : TPU_GRAPH_INT64, 1, d3);
    tnode(g, "Where", 16, "c,x,z", "y");
    tg_io(g, "c,x,z", "y");
    const void *in2[] = {c3, k ? (const void *)h : a, k ? (const void *)hz : b};
    void *outs2[] = {k ? (void *)hr : r};
    run_graph(g, in2, outs2);
    if (k) {
      CU_ASSERT(hr[0] == 0 && hr[1] == 0x4000 && hr[2] == 0);
    } else {
      CU_ASSERT(r[0] == -1 && r[1] == 2 && r[2] == -3);
    }
  }
}

/* Reference values of the float unary ops, in double. */
static double ref_un(const char *op, double x, double alpha, int tanh_gelu) {
  if (!strcmp(op, "Relu")) return x < 0 ? 0 : x;
  if (!strcmp(op, "LeakyRelu")) return x < 0 ? alpha * x : x;
  if (!strcmp(op, "Sigmoid")) return 1 / (1 + exp(-x));
  if (!strcmp(op, "Tanh")) return tanh(x);
  if (!strcmp(op, "Erf")) return erf(x);
  if (!strcmp(op, "Gelu"))
    return tanh_gelu ? 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                     : 0.5 * x * (1 + erf(x / sqrt(2.0)));
  if (!strcmp(op, "Sqrt")) return sqrt(x);
  if (!strcmp(op, "Reciprocal")) return 1 / x;
  if (!strcmp(op, "Neg")) return -x;
  if (!strcmp(op, "Abs")) return fabs(x);
  if (!strcmp(op, "Exp")) return exp(x);
  return log(x);
}

static void test_unary_float(void) {
  static const struct {
    const char *op;
    int opset;
    int positive; /* domain (0, ∞) */
    const char *approx;
    int alpha;    /* 0: default; else alpha 0.2 */
  } cases[] = {
      {"Relu", 14, 0, NULL, 0},       {"LeakyRelu", 16, 0, NULL, 0},
      {"LeakyRelu", 16, 0, NULL, 1},  {"Sigmoid", 13, 0, NULL, 0},
      {"Tanh", 13, 0, NULL, 0},       {"Erf", 13, 0, NULL, 0},
      {"Gelu", 20, 0, NULL, 0},       {"Gelu", 20, 0, "none", 0},
      {"Gelu", 20, 0, "tanh", 0},     {"Sqrt", 13, 1, NULL, 0},
      {"Reciprocal", 13, 0, NULL, 0}, {"Neg", 13, 0, NULL, 0},
      {"Abs", 13, 0, NULL, 0},        {"Exp", 13, 0, NULL, 0},
      {"Log", 13, 1, NULL, 0},
  };
  enum { NV = 67 };
  int64_t d[] = {NV};
  float xf[NV], yf[NV];
  double xd[NV], yd[NV];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int i = 0; i < NV; i++) {
      xf[i] = cases[c].positive ? tpu_test_rand_float(0.001f, 50) : tpu_test_rand_float(-8, 8);
      if (i == 0 && !cases[c].positive) xf[i] = -100; /* sigmoid/exp far tails */
      if (i == 1 && !cases[c].positive) xf[i] = 60;
      xd[i] = xf[i] * (1 + 1e-9);
    }
    for (int dbl = 0; dbl < 2; dbl++) {
      size_t n;
      tpu_graph_t *g = unary_graph(cases[c].op, cases[c].opset,
                                   dbl ? TPU_GRAPH_FP64 : TPU_GRAPH_FP32, 1, d, &n);
      if (cases[c].approx) attr_s(g, n, "approximate", cases[c].approx);
      if (cases[c].alpha) attr_f(g, n, "alpha", 0.2f);
      const void *in[] = {dbl ? (const void *)xd : xf};
      void *out[] = {dbl ? (void *)yd : yf};
      run_graph(g, in, out);
      double alpha = cases[c].alpha ? (double)0.2f : (double)0.01f;
      int th = cases[c].approx && !strcmp(cases[c].approx, "tanh");
      int bad = 0;
      for (int i = 0; i < NV; i++) {
        double want = ref_un(cases[c].op, dbl ? xd[i] : xf[i], alpha, th);
        double got = dbl ? yd[i] : yf[i];
        /* Relative to the value, plus absolute for the cancellation of 1 + erf(x) and
         * 1 + tanh(x) in Gelu's tail (about |x| ulps of 1). */
        double tol = dbl ? 1e-14 : 3e-6, abs_tol = dbl ? 1e-14 : 1e-6;
        if (!(fabs(got - want) <= tol * fabs(want) + abs_tol) && !bad++)
          fprintf(stderr, "%s %s: f(%.9g) = %.17g, want %.17g\n", cases[c].op,
                  dbl ? "FP64" : "FP32", dbl ? xd[i] : xf[i], got, want);
      }
      TPU_ASSERT_SEED(bad == 0);
    }
  }
}

static void test_unary_int(void) {
  int64_t d[] = {5};
  int32_t x[] = {INT32_MIN, -3, 0, 4, INT32_MAX}, y[5];
  static const char *ops[] = {"Relu", "Neg", "Abs"};
  int32_t want[][5] = {{0, 0, 0, 4, INT32_MAX},
                       {INT32_MIN, 3, 0, -4, -INT32_MAX},
                       {INT32_MIN, 3, 0, 4, INT32_MAX}};
  for (int o = 0; o < 3; o++) {
    tpu_graph_t *g = unary_graph(ops[o], 14, TPU_GRAPH_INT32, 1, d, NULL);
    const void *in[] = {x};
    void *out[] = {y};
    run_graph(g, in, out);
    CU_ASSERT(memcmp(y, want[o], sizeof y) == 0);
  }
  int64_t lx[] = {INT64_MIN, -3, 0, 4, INT64_MAX}, ly[5];
  tpu_graph_t *g = unary_graph("Abs", 13, TPU_GRAPH_INT64, 1, d, NULL);
  const void *in[] = {lx};
  void *out[] = {ly};
  run_graph(g, in, out);
  CU_ASSERT(ly[0] == INT64_MIN && ly[1] == 3 && ly[2] == 0 && ly[3] == 4 && ly[4] == INT64_MAX);
}

/* Clip: attributes before opset 11 (defaults ±FLT_MAX), optional inputs after (defaults the
 * type's limits), integers, and min > max. */
static void test_clip(void) {
  int64_t d[] = {6};
  float x[] = {-INFINITY, -1, -0.25f, 0.25f, 1, INFINITY}, y[6];
  { /* opset 6, both attributes */
    size_t n;
    tpu_graph_t *g = unary_graph("Clip", 6, TPU_GRAPH_FP32, 1, d, &n);
    attr_f(g, n, "min", -0.5f);
    attr_f(g, n, "max", 0.5f);
    const void *in[] = {x};
    void *out[] = {y};
    run_graph(g, in, out);
    float want[] = {-0.5f, -0.5f, -0.25f, 0.25f, 0.5f, 0.5f};
    CU_ASSERT(memcmp(y, want, sizeof y) == 0);
  }
  { /* opset 6, max only: min defaults to the lowest float */
    size_t n;
    tpu_graph_t *g = unary_graph("Clip", 6, TPU_GRAPH_FP32, 1, d, &n);
    attr_f(g, n, "max", 0.5f);
    const void *in[] = {x};
    void *out[] = {y};
    run_graph(g, in, out);
    float want[] = {-FLT_MAX, -1, -0.25f, 0.25f, 0.5f, 0.5f};
    CU_ASSERT(memcmp(y, want, sizeof y) == 0);
  }
  /* opset 13: min only, max only, both, none, and min > max; bounds are graph inputs here */
  static const struct {
    const char *ins;
    float lo, hi;
    float want[6];
  } cases[] = {
      {"a,lo", -0.5f, 0, {-0.5f, -0.5f, -0.25f, 0.25f, 1, INFINITY}},
      {"a,,hi", 0, 0.5f, {-INFINITY, -1, -0.25f, 0.25f, 0.5f, 0.5f}},
      {"a,lo,hi", -0.3f, 0.3f, {-0.3f, -0.3f, -0.25f, 0.25f, 0.3f, 0.3f}},
      {"a", 0, 0, {-INFINITY, -1, -0.25f, 0.25f, 1, INFINITY}},
      {"a,lo,hi", 1, -1, {-1, -1, -1, -1, -1, -1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP32, 1, d);
    const char *ins = cases[c].ins;
    int has_lo = strstr(ins, "lo") != NULL, has_hi = strstr(ins, "hi") != NULL;
    if (has_lo) tg_input(g, "lo", TPU_GRAPH_FP32, 0, NULL);
    if (has_hi) tg_input(g, "hi", TPU_GRAPH_FP32, 0, NULL);
    tnode(g, "Clip", 13, ins, "y");
    tg_io(g, has_lo && has_hi ? "a,lo,hi" : has_lo ? "a,lo" : has_hi ? "a,hi" : "a", "y");
    const void *in[3] = {x};
    int k = 1;
    if (has_lo) in[k++] = &cases[c].lo;
    if (has_hi) in[k++] = &cases[c].hi;
    void *out[] = {y};
    run_graph(g, in, out);
    CU_ASSERT(memcmp(y, cases[c].want, sizeof y) == 0);
  }
  { /* INT32 with constant bounds */
    int32_t xi[] = {INT32_MIN, -7, -1, 0, 5, INT32_MAX}, yi[6], lo = -2, hi = 3;
    int32_t want[] = {-2, -2, -1, 0, 3, 3};
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_INT32, 1, d);
    tg_init(g, "lo", TPU_GRAPH_INT32, 0, NULL, &lo);
    tg_init(g, "hi", TPU_GRAPH_INT32, 0, NULL, &hi);
    tnode(g, "Clip", 13, "a,lo,hi", "y");
    tg_io(g, "a", "y");
    const void *in[] = {xi};
    void *out[] = {yi};
    run_graph(g, in, out);
    CU_ASSERT(memcmp(yi, want, sizeof yi) == 0);
  }
  { /* integers before opset 11 are refused */
    tpu_graph_t *g = unary_graph("Clip", 6, TPU_GRAPH_INT32, 1, d, NULL);
    tpu_graph_program_t *p = NULL;
    CU_ASSERT(tpu_graph_compile(g, tg_engine(), 1, NULL, &p) == TPU_ENOTSUP);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "'a' is INT32"));
    tpu_graph_free(g);
  }
}

/* Casts x (n elements of `from`) to `to` into y. */
static void cast(tpu_graph_dtype_t from, tpu_graph_dtype_t to, const void *x, size_t n,
                 void *y) {
  int64_t d[] = {(int64_t)n};
  size_t node;
  tpu_graph_t *g = unary_graph("Cast", 19, from, 1, d, &node);
  static const int onnx[] = {[TPU_GRAPH_FP32] = 1, [TPU_GRAPH_UINT8] = 2, [TPU_GRAPH_INT8] = 3,
                             [TPU_GRAPH_INT32] = 6, [TPU_GRAPH_INT64] = 7, [TPU_GRAPH_BOOL] = 9,
                             [TPU_GRAPH_FP16] = 10, [TPU_GRAPH_FP64] = 11,
                             [TPU_GRAPH_BF16] = 16};
  tg_attr_i(g, node, "to", onnx[to]);
  const void *in[] = {x};
  void *out[] = {y};
  run_graph(g, in, out);
}

static float bits_f32(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* FP16 → FP32 for all 65536 patterns against ldexp, and back to the same bits. */
static void test_cast_fp16_exhaustive(void) {
  enum { NH = 65536 };
  uint16_t *h = malloc(NH * 2), *back = malloc(NH * 2);
  float *f = malloc(NH * 4);
  for (int i = 0; i < NH; i++) h[i] = (uint16_t)i;
  cast(TPU_GRAPH_FP16, TPU_GRAPH_FP32, h, NH, f);
  int bad = 0;
  for (int i = 0; i < NH; i++) {
    int e = (i >> 10) & 31, m = i & 1023;
    double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                    : ldexp(1024 + m, e - 25);
    if (i & 0x8000) want = -want;
    int ok = isnan(want) ? isnan(f[i]) : f[i] == want && !signbit(f[i]) == !signbit(want);
    if (!ok && !bad++) fprintf(stderr, "fp16 %04x -> %g, want %g\n", i, f[i], want);
  }
  CU_ASSERT(bad == 0);
  cast(TPU_GRAPH_FP32, TPU_GRAPH_FP16, f, NH, back);
  bad = 0;
  for (int i = 0; i < NH; i++) {
    int nan = ((i >> 10) & 31) == 31 && (i & 1023);
    int ok = nan ? (back[i] & 0x7c00) == 0x7c00 && (back[i] & 0x3ff) : back[i] == h[i];
    if (!ok && !bad++) fprintf(stderr, "fp16 %04x -> fp32 -> %04x\n", i, back[i]);
  }
  CU_ASSERT(bad == 0);
  free(h);
  free(back);
  free(f);
}

static void test_cast_rounding(void) {
  { /* FP32 → FP16: ties to even, overflow, subnormals */
    float x[] = {1 + 0x1p-11f, 1 + 3 * 0x1p-11f, 65519, 65520, 0x1p-25f, 3 * 0x1p-26f,
                 -0x1p-14f, 1e-10f, -1e10f, 0x1.ffep-15f};
    uint16_t want[] = {0x3c00, 0x3c02, 0x7bff, 0x7c00, 0x0000, 0x0001,
                       0x8400, 0x0000, 0xfc00, 0x0400};
    uint16_t y[10];
    cast(TPU_GRAPH_FP32, TPU_GRAPH_FP16, x, 10, y);
    for (int i = 0; i < 10; i++) {
      if (y[i] != want[i]) fprintf(stderr, "fp32 %a -> fp16 %04x, want %04x\n", x[i], y[i],
                                   want[i]);
      CU_ASSERT(y[i] == want[i]);
    }
  }
  { /* FP64 → BF16 and FP16 round once (through FP32 they would round twice) */
    double x[] = {1 + 0x1p-8 + 0x1p-30, 1 + 0x1p-11 + 0x1p-40};
    uint16_t b[2], h[2];
    cast(TPU_GRAPH_FP64, TPU_GRAPH_BF16, x, 1, b);
    CU_ASSERT(b[0] == 0x3f81);
    cast(TPU_GRAPH_FP64, TPU_GRAPH_FP16, x + 1, 1, h);
    CU_ASSERT(h[0] == 0x3c01);
  }
  { /* INT64 → FP16 / BF16 */
    int64_t x[] = {2049, 2051, 70000, -3, ((int64_t)1 << 60) + ((int64_t)1 << 52) + 1};
    uint16_t h[4], b[5];
    cast(TPU_GRAPH_INT64, TPU_GRAPH_FP16, x, 4, h);
    CU_ASSERT(h[0] == 0x6800 && h[1] == 0x6802 && h[2] == 0x7c00 && h[3] == 0xc200);
    cast(TPU_GRAPH_INT64, TPU_GRAPH_BF16, x, 5, b);
    float big = bits_f32((uint32_t)b[4] << 16);
    CU_ASSERT(big == 0x1p60f + 0x1p53f);
    CU_ASSERT(bits_f32((uint32_t)b[3] << 16) == -3.0f);
  }
  { /* FP32 ↔ BF16 against the engine's conversion; FP32 ↔ FP64 exact */
    float x[] = {1.00390625f, 3.14159265f, -1e-20f, 65504, NAN};
    uint16_t b[5];
    double dd[5];
    float back[5];
    cast(TPU_GRAPH_FP32, TPU_GRAPH_BF16, x, 5, b);
    for (int i = 0; i < 5; i++) CU_ASSERT(b[i] == tpu_bf16_from_fp32(x[i]));
    cast(TPU_GRAPH_FP32, TPU_GRAPH_FP64, x, 5, dd);
    cast(TPU_GRAPH_FP64, TPU_GRAPH_FP32, dd, 5, back);
    CU_ASSERT(memcmp(back, x, 16) == 0 && isnan(back[4]));
  }
}

static void test_cast_ints(void) {
  { /* float → int: truncation toward zero, saturation, NaN → 0 */
    float x[] = {2.7f, -2.7f, NAN, INFINITY, -INFINITY, 3e9f, -0.9f, 255.9f, 300, -200};
    int32_t i32[10];
    int64_t i64[10];
    uint8_t u8[10];
    int8_t i8[10];
    cast(TPU_GRAPH_FP32, TPU_GRAPH_INT32, x, 10, i32);
    int32_t w32[] = {2, -2, 0, INT32_MAX, INT32_MIN, INT32_MAX, 0, 255, 300, -200};
    CU_ASSERT(memcmp(i32, w32, sizeof i32) == 0);
    cast(TPU_GRAPH_FP32, TPU_GRAPH_INT64, x, 10, i64);
    int64_t w64[] = {2, -2, 0, INT64_MAX, INT64_MIN, 3000000000LL, 0, 255, 300, -200};
    CU_ASSERT(memcmp(i64, w64, sizeof i64) == 0);
    cast(TPU_GRAPH_FP32, TPU_GRAPH_UINT8, x, 10, u8);
    uint8_t wu8[] = {2, 0, 0, 255, 0, 255, 0, 255, 255, 0};
    CU_ASSERT(memcmp(u8, wu8, sizeof u8) == 0);
    cast(TPU_GRAPH_FP32, TPU_GRAPH_INT8, x, 10, i8);
    int8_t wi8[] = {2, -2, 0, 127, -128, 127, 0, 127, 127, -128};
    CU_ASSERT(memcmp(i8, wi8, sizeof i8) == 0);
  }
  { /* int → int keeps the low bits */
    int64_t x[] = {300, -129, ((int64_t)1 << 32) + 5, -1};
    int8_t i8[4];
    uint8_t u8[4];
    int32_t i32[4];
    int64_t back[4];
    cast(TPU_GRAPH_INT64, TPU_GRAPH_INT8, x, 4, i8);
    CU_ASSERT(i8[0] == 44 && i8[1] == 127 && i8[2] == 5 && i8[3] == -1);
    cast(TPU_GRAPH_INT64, TPU_GRAPH_UINT8, x, 4, u8);
    CU_ASSERT(u8[0] == 44 && u8[1] == 127 && u8[2] == 5 && u8[3] == 255);
    cast(TPU_GRAPH_INT64, TPU_GRAPH_INT32, x, 4, i32);
    CU_ASSERT(i32[0] == 300 && i32[1] == -129 && i32[2] == 5 && i32[3] == -1);
    cast(TPU_GRAPH_INT32, TPU_GRAPH_INT64, i32, 4, back);
    CU_ASSERT(back[0] == 300 && back[1] == -129 && back[2] == 5 && back[3] == -1);
    cast(TPU_GRAPH_UINT8, TPU_GRAPH_INT64, u8, 4, back);
    CU_ASSERT(back[0] == 44 && back[3] == 255);
  }
  { /* BOOL both ways; INT64 → FP32 rounds once */
    float x[] = {0, -0.0f, 0.5f, NAN};
    uint8_t b[4];
    cast(TPU_GRAPH_FP32, TPU_GRAPH_BOOL, x, 4, b);
    CU_ASSERT(b[0] == 0 && b[1] == 0 && b[2] == 1 && b[3] == 1);
    int64_t iv[] = {0, -5, ((int64_t)1 << 53) + 1, 7};
    cast(TPU_GRAPH_INT64, TPU_GRAPH_BOOL, iv, 4, b);
    CU_ASSERT(b[0] == 0 && b[1] == 1 && b[2] == 1 && b[3] == 1);
    float f[4];
    double dv[4];
    cast(TPU_GRAPH_BOOL, TPU_GRAPH_FP32, b, 4, f);
    CU_ASSERT(f[0] == 0 && f[1] == 1 && f[3] == 1);
    cast(TPU_GRAPH_BOOL, TPU_GRAPH_FP64, b, 4, dv);
    CU_ASSERT(dv[0] == 0 && dv[1] == 1);
    cast(TPU_GRAPH_INT64, TPU_GRAPH_FP32, iv, 4, f);
    CU_ASSERT(f[1] == -5 && f[2] == (float)iv[2] && f[3] == 7);
    uint16_t hv[] = {0x0000, 0x8000, 0x0001, 0x7e00};
    cast(TPU_GRAPH_FP16, TPU_GRAPH_BOOL, hv, 4, b);
    CU_ASSERT(b[0] == 0 && b[1] == 0 && b[2] == 1 && b[3] == 1);
    int32_t iz[4];
    cast(TPU_GRAPH_FP16, TPU_GRAPH_INT32, hv, 4, iz);
    CU_ASSERT(iz[0] == 0 && iz[1] == 0 && iz[2] == 0 && iz[3] == 0);
  }
}

/* Identity copies any dtype; Dropout is the identity with an all-true mask. */
static void test_identity_dropout(void) {
  int64_t d[] = {2, 2};
  {
    uint16_t h[] = {1, 2, 3, 0xffff}, y[4];
    tpu_graph_t *g = unary_graph("Identity", 16, TPU_GRAPH_FP16, 2, d, NULL);
    const void *in[] = {h};
    void *out[] = {y};
    run_graph(g, in, out);
    CU_ASSERT(memcmp(h, y, sizeof y) == 0);
  }
  float x[] = {1, -2, 3, -4}, y[4];
  {
    uint8_t m[4] = {0};
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP32, 2, d);
    float ratio = 0.3f;
    uint8_t no = 0;
    tg_init(g, "r", TPU_GRAPH_FP32, 0, NULL, &ratio);
    tg_init(g, "t", TPU_GRAPH_BOOL, 0, NULL, &no);
    tnode(g, "Dropout", 13, "a,r,t", "y,m");
    tg_io(g, "a", "y,m");
    tpu_graph_program_t *p = build(g);
    tpu_graph_io_t io;
    CU_ASSERT_FATAL(tpu_graph_program_output(p, 1, &io) == TPU_OK);
    CU_ASSERT(io.dtype == TPU_GRAPH_BOOL && io.rank == 2 && io.dims[0] == 2 && io.dims[1] == 2);
    const void *in[] = {x};
    void *out[] = {y, m};
    run_ok(p, in, out);
    CU_ASSERT(memcmp(x, y, sizeof y) == 0);
    CU_ASSERT(m[0] == 1 && m[1] == 1 && m[2] == 1 && m[3] == 1);
    tpu_graph_program_free(p);
    tpu_graph_free(g);
  }
  { /* opset 7: ratio attribute, mask in the data's dtype */
    float m[4] = {0};
    size_t n;
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP32, 2, d);
    n = tnode(g, "Dropout", 7, "a", "y,m");
    attr_f(g, n, "ratio", 0.5f);
    tg_io(g, "a", "y,m");
    const void *in[] = {x};
    void *out[] = {y, m};
    run_graph(g, in, out);
    CU_ASSERT(memcmp(x, y, sizeof y) == 0);
    CU_ASSERT(m[0] == 1 && m[3] == 1);
  }
  { /* training_mode known true: refused at compile */
    tpu_graph_t *g = tg_new();
    uint8_t yes = 1;
    tg_input(g, "a", TPU_GRAPH_FP32, 2, d);
    tg_init(g, "t", TPU_GRAPH_BOOL, 0, NULL, &yes);
    tnode(g, "Dropout", 13, "a,,t", "y");
    tg_io(g, "a", "y");
    tpu_graph_program_t *p = NULL;
    CU_ASSERT(tpu_graph_compile(g, tg_engine(), 1, NULL, &p) == TPU_ENOTSUP);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "training mode"));
    tpu_graph_free(g);
  }
  { /* training_mode a graph input: refused at compile (inference only) */
    tpu_graph_t *g = tg_new();
    tg_input(g, "a", TPU_GRAPH_FP32, 2, d);
    tg_input(g, "t", TPU_GRAPH_BOOL, 0, NULL);
    tnode(g, "Dropout", 13, "a,,t", "y");
    tg_io(g, "a,t", "y");
    tpu_graph_program_t *p = NULL;
    CU_ASSERT(tpu_graph_compile(g, tg_engine(), 1, NULL, &p) == TPU_ENOTSUP);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "not a constant"));
    tpu_graph_free(g);
  }
}

/* Dtypes a kernel does not take are TPU_ENOTSUP at compile, naming the tensor and its dtype. */
static void test_refused_dtypes(void) {
  static const struct {
    const char *op;
    int opset;
    tpu_graph_dtype_t dt;
    int binary;
  } cases[] = {
      {"Add", 14, TPU_GRAPH_FP16, 1},   {"Div", 14, TPU_GRAPH_INT8, 1},
      {"Max", 13, TPU_GRAPH_UINT8, 1},  {"Sigmoid", 13, TPU_GRAPH_BF16, 0},
      {"Exp", 13, TPU_GRAPH_FP16, 0},   {"Relu", 14, TPU_GRAPH_UINT8, 0},
      {"Dropout", 13, TPU_GRAPH_FP16, -1},
  };
  int64_t d[] = {3};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    tpu_graph_t *g = tg_new();
    tg_input(g, "xin", cases[c].dt, 1, d);
    if (cases[c].binary > 0) tg_input(g, "b", cases[c].dt, 1, d);
    tnode(g, cases[c].op, cases[c].opset, cases[c].binary > 0 ? "xin,b" : "xin", "y");
    tg_io(g, cases[c].binary > 0 ? "xin,b" : "xin", "y");
    tpu_graph_program_t *p = NULL;
    tpu_status_t st = tpu_graph_compile(g, tg_engine(), 1, NULL, &p);
    if (cases[c].binary < 0) { /* Dropout takes FP16 */
      CU_ASSERT(st == TPU_OK);
      tpu_graph_program_free(p);
      tpu_graph_free(g);
      continue;
    }
    char want[64];
    snprintf(want, sizeof want, "'xin' is %s", tpu_graph_dtype_name(cases[c].dt));
    if (st != TPU_ENOTSUP || !strstr(tpu_graph_error(g), want))
      fprintf(stderr, "%s: status %d, message %s\n", cases[c].op, (int)st, tpu_graph_error(g));
    CU_ASSERT(st == TPU_ENOTSUP);
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), want));
    CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), cases[c].op));
    CU_ASSERT_PTR_NULL(p);
    tpu_graph_free(g);
  }
}

/* A chain over a batch dimension, with a constant subexpression folded at compile time:
 * y = Relu((x - mean) * (1 / std)) as tabular preprocessing writes it. */
static void test_chain_folded(void) {
  enum { BATCH = 64, F = 256 };
  static float x[BATCH * F], y[BATCH * F], mean[F], sd[F];
  for (int i = 0; i < BATCH * F; i++) x[i] = tpu_test_rand_float(-2, 2);
  for (int j = 0; j < F; j++) {
    mean[j] = tpu_test_rand_float(-1, 1);
    sd[j] = tpu_test_rand_float(0.5f, 2);
  }
  int64_t xd[] = {TPU_GRAPH_BATCH, F}, fd[] = {F};
  tpu_graph_t *g = tg_new();
  tg_input(g, "x", TPU_GRAPH_FP32, 2, xd);
  tg_init(g, "mean", TPU_GRAPH_FP32, 1, fd, mean);
  tg_init(g, "sd", TPU_GRAPH_FP32, 1, fd, sd);
  tnode(g, "Reciprocal", 13, "sd", "inv");
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "sub", "Sub", NULL, 14, 2, (const char *[]){"x", "mean"},
                                     1, (const char *[]){"c"}, NULL) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "mul", "Mul", NULL, 14, 2, (const char *[]){"c", "inv"},
                                     1, (const char *[]){"z"}, NULL) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "relu", "Relu", NULL, 14, 1, (const char *[]){"z"}, 1,
                                     (const char *[]){"y"}, NULL) == TPU_OK);
  tg_io(g, "x", "y");
  tpu_graph_program_t *p = NULL;
  CU_ASSERT_FATAL(tpu_graph_compile(g, tg_engine(), BATCH, NULL, &p) == TPU_OK);
  CU_ASSERT_EQUAL(tpu_graph_program_step_count(p), 3);
  const void *in[] = {x};
  void *out[] = {y};
  run_ok(p, in, out);
  int bad = 0;
  for (int i = 0; i < BATCH; i++)
    for (int j = 0; j < F; j++) {
      float v = (x[i * F + j] - mean[j]) * (1.0f / sd[j]);
      bad += y[i * F + j] != (v < 0 ? 0 : v);
    }
  CU_ASSERT(bad == 0);
  tpu_graph_program_free(p);
  tpu_graph_free(g);
}

TPU_TEST_SUITE(graph_ew,
               {"broadcast_shapes", test_broadcast_shapes},
               {"broadcast_random", test_broadcast_random},
               {"binary_dtypes", test_binary_dtypes},
               {"int_div_errors", test_int_div_errors},
               {"pow", test_pow},
               {"max_min_variadic", test_max_min_variadic},
               {"where", test_where},
               {"unary_float", test_unary_float},
               {"unary_int", test_unary_int},
               {"clip", test_clip},
               {"cast_fp16_exhaustive", test_cast_fp16_exhaustive},
               {"cast_rounding", test_cast_rounding},
               {"cast_ints", test_cast_ints},
               {"identity_dropout", test_identity_dropout},
               {"refused_dtypes", test_refused_dtypes},
               {"chain_folded", test_chain_folded})
