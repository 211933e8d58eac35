/*
 * test_graph.c - the op-graph IR (engine/graph/): builder errors, validation (undefined inputs,
 * double producers, cycles, topological order) and shape inference per op family.
 *
 * DESIGN
 * Structural tests: every expectation is a shape, a dtype or a message fragment that follows
 * from the ONNX operator definitions, written by hand. No numeric values are checked here;
 * numeric behaviour is tested against ONNX's own backend data where ops are executed.
 * Graphs are written compactly: node inputs and outputs as comma-separated lists ("x,,b" has an
 * absent second input).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_graph.h"
#include "graph_test.h"
#include "tpu_test.h"

#define B TPU_GRAPH_BATCH

static tpu_status_t node(tpu_graph_t *g, const char *name, const char *op, int opset,
                         const char *ins, const char *outs, size_t *idx) {
  char b1[256], b2[256];
  const char *in[16], *out[16];
  size_t nin = tg_split(ins, b1, sizeof b1, in), nout = tg_split(outs, b2, sizeof b2, out);
  return tpu_graph_add_node(g, name, op, NULL, opset, nin, in, nout, out, idx);
}

/* Adds a node that must succeed; returns its index. */
static size_t nd(tpu_graph_t *g, const char *name, const char *op, int opset, const char *ins,
                 const char *outs) {
  size_t idx = 0;
  tpu_status_t st = node(g, name, op, opset, ins, outs, &idx);
  if (st != TPU_OK)
    fprintf(stderr, "add_node %s: %s\n", name ? name : "(unnamed)", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
  return idx;
}

static void input(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dt, int rank, ...) {
  int64_t d[TPU_GRAPH_MAX_RANK];
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) d[i] = va_arg(ap, int64_t);
  va_end(ap);
  CU_ASSERT_FATAL(tpu_graph_add_tensor(g, name, dt, rank, d) == TPU_OK);
}

/* An FP32 initializer of zeros with the given shape. */
static void init_f(tpu_graph_t *g, const char *name, int rank, ...) {
  int64_t d[TPU_GRAPH_MAX_RANK], n = 1;
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) n *= d[i] = va_arg(ap, int64_t);
  va_end(ap);
  float *z = calloc((size_t)n + 1, sizeof *z);
  CU_ASSERT_FATAL(z != NULL);
  CU_ASSERT_FATAL(tpu_graph_add_initializer(g, name, TPU_GRAPH_FP32, rank, d, z,
                                            (size_t)n * 4) == TPU_OK);
  free(z);
}

static void init_i64(tpu_graph_t *g, const char *name, size_t n, const int64_t *v) {
  int64_t d = (int64_t)n;
  CU_ASSERT_FATAL(tpu_graph_add_initializer(g, name, TPU_GRAPH_INT64, 1, &d, v, n * 8) == TPU_OK);
}

static void attr_i(tpu_graph_t *g, size_t n, const char *name, int64_t v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_INT, .i = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
}

static void attr_ints(tpu_graph_t *g, size_t n, const char *name, size_t cnt, const int64_t *v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_INTS, .n = cnt, .ints = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
}

static void io(tpu_graph_t *g, const char *ins, const char *outs) {
  char b1[256], b2[256];
  const char *in[16], *out[16];
  size_t nin = tg_split(ins, b1, sizeof b1, in), nout = tg_split(outs, b2, sizeof b2, out);
  CU_ASSERT_FATAL(tpu_graph_set_inputs(g, nin, in) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_set_outputs(g, nout, out) == TPU_OK);
}

/* Infers at `batch`, which must succeed. */
static void infer_ok(tpu_graph_t *g, int64_t batch) {
  tpu_status_t st = tpu_graph_infer(g, batch);
  if (st != TPU_OK) fprintf(stderr, "infer: %s\n", tpu_graph_error(g));
  CU_ASSERT_FATAL(st == TPU_OK);
}

/* The inferred dtype and shape of `name` are dt and the given dims. */
static int shape_is(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dt, int rank, ...) {
  long t = tpu_graph_find(g, name);
  tpu_graph_tensor_info_t info;
  if (t < 0 || tpu_graph_tensor(g, (size_t)t, &info) != TPU_OK || !info.inferred) return 0;
  int ok = info.dtype == dt && info.rank == rank;
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) {
    int64_t want = va_arg(ap, int64_t);
    if (ok && info.dims[i] != want) ok = 0;
  }
  va_end(ap);
  if (!ok) {
    fprintf(stderr, "tensor '%s': got %s rank %d [", name, tpu_graph_dtype_name(info.dtype),
            info.rank);
    for (int i = 0; i < info.rank; i++)
      fprintf(stderr, "%s%lld", i ? "," : "", (long long)info.dims[i]);
    fprintf(stderr, "]\n");
  }
  return ok;
}

/* The last message contains every given fragment. */
static int says(const tpu_graph_t *g, const char *a, const char *b) {
  const char *m = tpu_graph_error(g);
  int ok = strstr(m, a) && (!b || strstr(m, b));
  if (!ok) fprintf(stderr, "message \"%s\" lacks \"%s\"%s%s\n", m, a, b ? " or " : "", b ? b : "");
  return ok;
}

/* ---- types and the builder ---- */

static void test_dtypes(void) {
  CU_ASSERT_EQUAL(tpu_graph_dtype_size(TPU_GRAPH_FP32), 4);
  CU_ASSERT_EQUAL(tpu_graph_dtype_size(TPU_GRAPH_FP64), 8);
  CU_ASSERT_EQUAL(tpu_graph_dtype_size(TPU_GRAPH_INT64), 8);
  CU_ASSERT_EQUAL(tpu_graph_dtype_size(TPU_GRAPH_BF16), 2);
  CU_ASSERT_EQUAL(tpu_graph_dtype_size(TPU_GRAPH_BOOL), 1);
  CU_ASSERT_EQUAL(tpu_graph_dtype_size(TPU_GRAPH_UNDEFINED), 0);
  CU_ASSERT_EQUAL(tpu_graph_dtype_size(TPU_GRAPH_DTYPE_COUNT), 0);
  CU_ASSERT_STRING_EQUAL(tpu_graph_dtype_name(TPU_GRAPH_UINT8), "UINT8");
  CU_ASSERT(tpu_graph_dtype_name(TPU_GRAPH_UNDEFINED) == NULL);
  CU_ASSERT_EQUAL(tpu_graph_dtype_from_onnx(1), TPU_GRAPH_FP32);
  CU_ASSERT_EQUAL(tpu_graph_dtype_from_onnx(7), TPU_GRAPH_INT64);
  CU_ASSERT_EQUAL(tpu_graph_dtype_from_onnx(9), TPU_GRAPH_BOOL);
  CU_ASSERT_EQUAL(tpu_graph_dtype_from_onnx(16), TPU_GRAPH_BF16);
  CU_ASSERT_EQUAL(tpu_graph_dtype_from_onnx(8), TPU_GRAPH_UNDEFINED); /* STRING */
  CU_ASSERT_EQUAL(tpu_graph_dtype_from_onnx(-3), TPU_GRAPH_UNDEFINED);
}

static void test_builder_errors(void) {
  tpu_graph_t *g = tg_new();
  int64_t d[9] = {2, 3, 4, 1, 1, 1, 1, 1, 1};
  float data[6] = {0};
  CU_ASSERT(tpu_graph_new(NULL) == TPU_EINVAL);
  tpu_graph_free(NULL);
  CU_ASSERT(tpu_graph_add_tensor(g, "", TPU_GRAPH_FP32, 1, d) == TPU_EINVAL);
  CU_ASSERT(says(g, "empty name", NULL));
  CU_ASSERT(tpu_graph_add_tensor(g, "x", TPU_GRAPH_UNDEFINED, 1, d) == TPU_EINVAL);
  CU_ASSERT(says(g, "tensor 'x'", "dtype"));
  CU_ASSERT(tpu_graph_add_tensor(g, "x", TPU_GRAPH_FP32, 9, d) == TPU_EOVERFLOW);
  CU_ASSERT(says(g, "tensor 'x'", "rank 9"));
  int64_t bad[2] = {2, -2};
  CU_ASSERT(tpu_graph_add_tensor(g, "x", TPU_GRAPH_FP32, 2, bad) == TPU_EINVAL);
  CU_ASSERT(says(g, "tensor 'x'", "dimension 1 is -2"));
  CU_ASSERT(tpu_graph_add_tensor(g, "x", TPU_GRAPH_FP32, 2, d) == TPU_OK);
  CU_ASSERT(tpu_graph_add_tensor(g, "x", TPU_GRAPH_FP32, 2, d) == TPU_EINVAL);
  CU_ASSERT(says(g, "tensor 'x'", "declared twice"));
  /* Initializers: the byte count must match the shape; the data are copied. */
  CU_ASSERT(tpu_graph_add_initializer(g, "w", TPU_GRAPH_FP32, 2, d, data, 20) == TPU_ESHAPE);
  CU_ASSERT(says(g, "initializer 'w'", "[2,3] of FP32 needs 24 bytes, got 20"));
  int64_t neg[1] = {-1};
  CU_ASSERT(tpu_graph_add_initializer(g, "w", TPU_GRAPH_FP32, 1, neg, data, 4) == TPU_EINVAL);
  CU_ASSERT(says(g, "initializer 'w'", "dimension 0 is -1"));
  CU_ASSERT(tpu_graph_add_initializer(g, "w", TPU_GRAPH_FP32, 2, d, data, 24) == TPU_OK);
  data[0] = 5;
  tpu_graph_tensor_info_t info;
  CU_ASSERT_FATAL(tpu_graph_tensor(g, (size_t)tpu_graph_find(g, "w"), &info) == TPU_OK);
  CU_ASSERT(info.is_initializer && info.bytes == 24 && ((const float *)info.data)[0] == 0.0f);
  CU_ASSERT(info.rank == 2 && info.dims[1] == 3 && info.dtype == TPU_GRAPH_FP32);
  CU_ASSERT(tpu_graph_add_initializer(g, "w", TPU_GRAPH_FP32, 2, d, data, 24) == TPU_EINVAL);
  CU_ASSERT(says(g, "initializer 'w'", "given twice"));
  CU_ASSERT(tpu_graph_add_initializer(g, "x", TPU_GRAPH_FP32, 2, d, data, 24) == TPU_EINVAL);
  CU_ASSERT(says(g, "initializer 'x'", "declared"));
  CU_ASSERT(tpu_graph_add_tensor(g, "w", TPU_GRAPH_FP32, 2, d) == TPU_EINVAL);
  CU_ASSERT(says(g, "tensor 'w': is an initializer", NULL));
  /* Nodes: the same output twice, an output that is a constant; failed adds leave nothing. */
  CU_ASSERT(node(g, "a", "Relu", 13, "x", "y", NULL) == TPU_OK);
  size_t tensors = tpu_graph_tensor_count(g);
  CU_ASSERT(node(g, "b", "Relu", 13, "fresh", "y", NULL) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'b' (Relu, opset 13): output 'y' is already produced by node 'a'", NULL));
  CU_ASSERT(tpu_graph_tensor_count(g) == tensors);
  CU_ASSERT(tpu_graph_find(g, "fresh") == -1);
  CU_ASSERT(node(g, "c", "Relu", 13, "x", "w", NULL) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'c'", "'w' is also an initializer"));
  CU_ASSERT(node(g, "d", "Relu", 13, "x", "z,z", NULL) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'd'", "listed twice"));
  CU_ASSERT(node(g, "e", "Relu", 0, "x", "z", NULL) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'e' (Relu)", "opset 0"));
  CU_ASSERT(node(g, "f", "", 13, "x", "z", NULL) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'f'", "no op name"));
  CU_ASSERT(tpu_graph_add_initializer(g, "y", TPU_GRAPH_FP32, 2, d, data, 24) == TPU_EINVAL);
  CU_ASSERT(says(g, "initializer 'y'", "also produced by node 'a'"));
  CU_ASSERT(tpu_graph_tensor_count(g) == tensors);
  /* Attributes. */
  tpu_graph_attr_t a = {.name = "alpha", .type = TPU_GRAPH_ATTR_FLOAT, .f = 0.5f};
  CU_ASSERT(tpu_graph_add_attr(g, 0, &a) == TPU_OK);
  CU_ASSERT(tpu_graph_add_attr(g, 0, &a) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'a' (Relu, opset 13): attribute 'alpha' given twice", NULL));
  CU_ASSERT(tpu_graph_add_attr(g, 7, &a) == TPU_EINVAL);
  CU_ASSERT(says(g, "no node #7", NULL));
  tpu_graph_attr_t t = {.name = "t", .type = TPU_GRAPH_ATTR_TENSOR, .t_dtype = TPU_GRAPH_INT64,
                        .t_rank = 1, .t_dims = d, .t_data = data, .t_bytes = 8};
  CU_ASSERT(tpu_graph_add_attr(g, 0, &t) == TPU_ESHAPE);
  CU_ASSERT(says(g, "attribute 't'", "needs 16 bytes, got 8"));
  const tpu_graph_attr_t *got = tpu_graph_attr(g, 0, "alpha");
  CU_ASSERT(got && got->type == TPU_GRAPH_ATTR_FLOAT && got->f == 0.5f);
  CU_ASSERT(tpu_graph_attr(g, 0, "t") == NULL);
  /* Graph inputs: declared, -1 only on dimension 0, not a constant. */
  int64_t sym[2] = {3, -1};
  CU_ASSERT(tpu_graph_add_tensor(g, "s", TPU_GRAPH_FP32, 2, sym) == TPU_OK);
  const char *ins[] = {"s"};
  CU_ASSERT(tpu_graph_set_inputs(g, 1, ins) == TPU_EINVAL);
  CU_ASSERT(says(g, "graph input 's': dimension 1 is -1", NULL));
  ins[0] = "w";
  CU_ASSERT(tpu_graph_set_inputs(g, 1, ins) == TPU_EINVAL);
  CU_ASSERT(says(g, "graph input 'w'", NULL));
  ins[0] = "nope";
  CU_ASSERT(tpu_graph_set_inputs(g, 1, ins) == TPU_EINVAL);
  CU_ASSERT(says(g, "graph input 'nope': not declared", NULL));
  ins[0] = "x";
  CU_ASSERT(tpu_graph_set_inputs(g, 1, ins) == TPU_OK);
  CU_ASSERT(tpu_graph_set_inputs(g, 1, ins) == TPU_EINVAL);
  const char *outs[] = {"y"};
  CU_ASSERT(tpu_graph_set_outputs(g, 1, outs) == TPU_OK);
  CU_ASSERT(tpu_graph_validate(g) == TPU_OK);
  CU_ASSERT(tpu_graph_add_tensor(g, "late", TPU_GRAPH_FP32, 0, NULL) == TPU_EINVAL);
  CU_ASSERT(says(g, "already validated", NULL));
  tpu_graph_free(g);
}

static void test_overflow(void) {
  tpu_graph_t *g = tg_new();
  int64_t huge[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
  float one = 0;
  CU_ASSERT(tpu_graph_add_initializer(g, "w", TPU_GRAPH_FP32, 2, huge, &one, 4) == TPU_EOVERFLOW);
  CU_ASSERT(says(g, "initializer 'w'", "overflows"));
  int64_t big[3] = {(int64_t)1 << 31, (int64_t)1 << 31, 4}; /* 2^64 elements: wraps to 0 */
  CU_ASSERT(tpu_graph_add_initializer(g, "w", TPU_GRAPH_FP32, 3, big, &one, 0) == TPU_EOVERFLOW);
  /* A graph input fine in itself overflows at a large batch. */
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)1 << 40);
  nd(g, "r", "Relu", 13, "x", "y");
  io(g, "x", "y");
  infer_ok(g, 4);
  CU_ASSERT(tpu_graph_infer(g, (int64_t)1 << 30) == TPU_EOVERFLOW);
  CU_ASSERT(says(g, "graph input 'x'", "overflows"));
  CU_ASSERT(tpu_graph_infer(g, 0) == TPU_EINVAL);
  tpu_graph_free(g);
  /* An intermediate shape that overflows: Unsqueeze is cheap, Gather multiplies. */
  g = tg_new();
  input(g, "ids", TPU_GRAPH_INT64, 2, (int64_t)B, (int64_t)1 << 30);
  init_f(g, "emb", 2, (int64_t)2, (int64_t)1);
  input(g, "big", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)1 << 30);
  nd(g, "e", "Gather", 13, "big,ids", "y");
  io(g, "ids,big", "y");
  CU_ASSERT(tpu_graph_infer(g, 8) == TPU_EOVERFLOW);
  CU_ASSERT(says(g, "node 'e' (Gather, opset 13): output 'y'", "overflows"));
  tpu_graph_free(g);
}

/* ---- validation ---- */

static void test_validation(void) {
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  nd(g, "n1", "Add", 13, "x,ghost", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_validate(g) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'n1' (Add, opset 13): input 'ghost' is not defined", NULL));
  CU_ASSERT(tpu_graph_order(g) == NULL);
  tpu_graph_free(g);

  /* A cycle b → c → d → b behind a valid node a. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 1, (int64_t)4);
  nd(g, "a", "Relu", 13, "x", "t0");
  nd(g, "b", "Add", 13, "t0,t3", "t1");
  nd(g, "c", "Relu", 13, "t1", "t2");
  nd(g, "d", "Relu", 13, "t2", "t3");
  io(g, "x", "t3");
  CU_ASSERT(tpu_graph_validate(g) == TPU_EINVAL);
  CU_ASSERT(says(g, "is on a cycle", NULL));
  const char *m = tpu_graph_error(g);
  CU_ASSERT(strstr(m, "node 'b'") || strstr(m, "node 'c'") || strstr(m, "node 'd'"));
  CU_ASSERT(strstr(m, "node 'a'") == NULL);
  tpu_graph_free(g);

  /* A node that reads its own output. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 1, (int64_t)4);
  nd(g, NULL, "Add", 13, "x,y", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_validate(g) == TPU_EINVAL);
  CU_ASSERT(says(g, "node #0 (Add, opset 13) is on a cycle", NULL));
  tpu_graph_free(g);

  /* Outputs: none, or undefined. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 1, (int64_t)4);
  nd(g, "a", "Relu", 13, "x", "y");
  CU_ASSERT(tpu_graph_validate(g) == TPU_EINVAL);
  CU_ASSERT(says(g, "no outputs", NULL));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 1, (int64_t)4);
  nd(g, "a", "Relu", 13, "x", "y");
  io(g, "x", "y,missing");
  CU_ASSERT(tpu_graph_validate(g) == TPU_EINVAL);
  CU_ASSERT(says(g, "graph output 'missing': not defined", NULL));
  tpu_graph_free(g);

  /* Nodes added out of order are sorted; a node writing a graph input is refused. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  size_t c = nd(g, "c", "Relu", 13, "t2", "y");
  size_t b = nd(g, "b", "Relu", 13, "t1", "t2");
  size_t a = nd(g, "a", "Relu", 13, "x", "t1");
  io(g, "x", "y");
  CU_ASSERT_FATAL(tpu_graph_validate(g) == TPU_OK);
  const size_t *order = tpu_graph_order(g);
  CU_ASSERT_FATAL(order != NULL);
  CU_ASSERT(order[0] == a && order[1] == b && order[2] == c);
  CU_ASSERT(tpu_graph_validate(g) == TPU_OK); /* idempotent */
  tpu_graph_node_info_t ni;
  CU_ASSERT(tpu_graph_node(g, b, &ni) == TPU_OK);
  CU_ASSERT_STRING_EQUAL(ni.op, "Relu");
  CU_ASSERT(ni.nin == 1 && ni.inputs[0] == tpu_graph_find(g, "t1"));
  CU_ASSERT(tpu_graph_node(g, 3, &ni) == TPU_EINVAL);
  CU_ASSERT(tpu_graph_input_count(g) == 1 && tpu_graph_input(g, 0) == tpu_graph_find(g, "x"));
  CU_ASSERT(tpu_graph_output(g, 1) == -1);
  tpu_graph_free(g);

  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 1, (int64_t)4);
  nd(g, "w", "Relu", 13, "x", "x");
  io(g, "x", "x");
  CU_ASSERT(tpu_graph_validate(g) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'w'", "also a graph input"));
  tpu_graph_free(g);
}

/* ---- inference ---- */

static void test_gemm_matmul(void) {
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)8);
  init_f(g, "w", 2, (int64_t)16, (int64_t)8); /* [N][K], transB */
  init_f(g, "bias", 1, (int64_t)16);
  init_f(g, "w2", 2, (int64_t)16, (int64_t)4); /* [K][N] */
  init_f(g, "b2", 2, (int64_t)1, (int64_t)4);
  size_t n1 = nd(g, "fc1", "Gemm", 13, "x,w,bias", "h");
  attr_i(g, n1, "transB", 1);
  nd(g, "fc2", "Gemm", 13, "h,w2,b2", "y");
  io(g, "x", "y");
  infer_ok(g, 32);
  CU_ASSERT(shape_is(g, "h", TPU_GRAPH_FP32, 2, (int64_t)32, (int64_t)16));
  CU_ASSERT(shape_is(g, "y", TPU_GRAPH_FP32, 2, (int64_t)32, (int64_t)4));
  tpu_graph_free(g);

  /* K mismatch (no transB) names both shapes; a bias that does not broadcast. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)8);
  init_f(g, "w", 2, (int64_t)16, (int64_t)8);
  nd(g, "fc1", "Gemm", 11, "x,w", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'fc1' (Gemm, opset 11)", "'x' [2,8] and B 'w' [16,8]"));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)8);
  init_f(g, "w", 2, (int64_t)8, (int64_t)16);
  init_f(g, "c", 1, (int64_t)15);
  nd(g, "fc1", "Gemm", 13, "x,w,c", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'fc1'", "'c' of shape [15] does not broadcast to the output [2,16]"));
  tpu_graph_free(g);

  /* MatMul: 2-D, batched with broadcasting, 1-D on either side. */
  g = tg_new();
  input(g, "a", TPU_GRAPH_FP32, 4, (int64_t)B, (int64_t)1, (int64_t)3, (int64_t)4);
  input(g, "b", TPU_GRAPH_FP32, 3, (int64_t)5, (int64_t)4, (int64_t)6);
  input(g, "v", TPU_GRAPH_FP32, 1, (int64_t)4);
  input(g, "m", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  nd(g, "mm", "MatMul", 13, "a,b", "y");
  nd(g, "mv", "MatMul", 13, "a,v", "y2");
  nd(g, "vm", "MatMul", 13, "v,b", "y3");
  nd(g, "m2", "MatMul", 13, "m,b", "y4");
  io(g, "a,b,v,m", "y,y2,y3,y4");
  infer_ok(g, 2);
  CU_ASSERT(shape_is(g, "y", TPU_GRAPH_FP32, 4, (int64_t)2, (int64_t)5, (int64_t)3, (int64_t)6));
  CU_ASSERT(shape_is(g, "y2", TPU_GRAPH_FP32, 3, (int64_t)2, (int64_t)1, (int64_t)3));
  CU_ASSERT(shape_is(g, "y3", TPU_GRAPH_FP32, 2, (int64_t)5, (int64_t)6));
  CU_ASSERT(shape_is(g, "y4", TPU_GRAPH_FP32, 3, (int64_t)5, (int64_t)2, (int64_t)6));
  tpu_graph_free(g);

  g = tg_new();
  input(g, "a", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)3, (int64_t)4);
  input(g, "b", TPU_GRAPH_FP32, 3, (int64_t)3, (int64_t)4, (int64_t)6);
  nd(g, "mm", "MatMul", 13, "a,b", "y");
  io(g, "a,b", "y");
  infer_ok(g, 3);
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE); /* batch 2 against 3 */
  CU_ASSERT(says(g, "node 'mm' (MatMul, opset 13)",
                 "'a' [2,3,4] and 'b' [3,4,6] do not broadcast"));
  tpu_graph_free(g);
}

static void test_elementwise(void) {
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)3, (int64_t)1);
  init_f(g, "r", 1, (int64_t)4);
  init_f(g, "s", 0);
  input(g, "c", TPU_GRAPH_BOOL, 2, (int64_t)3, (int64_t)4);
  nd(g, "add", "Add", 13, "x,r", "a");
  nd(g, "mul", "Mul", 14, "a,s", "m");
  nd(g, "pow", "Pow", 15, "m,s", "p");
  nd(g, "max", "Max", 13, "x,r,s", "mx");
  nd(g, "where", "Where", 16, "c,x,s", "w");
  io(g, "x,c", "a,m,p,mx,w");
  infer_ok(g, 7);
  CU_ASSERT(shape_is(g, "a", TPU_GRAPH_FP32, 3, (int64_t)7, (int64_t)3, (int64_t)4));
  CU_ASSERT(shape_is(g, "m", TPU_GRAPH_FP32, 3, (int64_t)7, (int64_t)3, (int64_t)4));
  CU_ASSERT(shape_is(g, "p", TPU_GRAPH_FP32, 3, (int64_t)7, (int64_t)3, (int64_t)4));
  CU_ASSERT(shape_is(g, "mx", TPU_GRAPH_FP32, 3, (int64_t)7, (int64_t)3, (int64_t)4));
  CU_ASSERT(shape_is(g, "w", TPU_GRAPH_FP32, 3, (int64_t)7, (int64_t)3, (int64_t)4));
  tpu_graph_free(g);

  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)3);
  init_f(g, "r", 1, (int64_t)4);
  nd(g, "sub", "Sub", 13, "x,r", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 5) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'sub' (Sub, opset 13): shapes [5,3] of 'x' and [4] of 'r' do not "
                 "broadcast", NULL));
  tpu_graph_free(g);

  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 1, (int64_t)3);
  input(g, "i", TPU_GRAPH_INT64, 1, (int64_t)3);
  nd(g, "div", "Div", 13, "x,i", "y");
  io(g, "x,i", "y");
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_EDTYPE);
  CU_ASSERT(says(g, "node 'div'", "'x' (FP32) and 'i' (INT64) differ in dtype"));
  tpu_graph_free(g);

  /* Unary ops keep the shape; Cast changes the dtype; float-only ops refuse integers. */
  static const char *const unary[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Gelu",
                                      "Clip", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log",
                                      "Identity"};
  for (size_t u = 0; u < sizeof unary / sizeof unary[0]; u++) {
    g = tg_new();
    input(g, "x", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)2, (int64_t)5);
    nd(g, "u", unary[u], 20, "x", "y");
    io(g, "x", "y");
    infer_ok(g, 3);
    CU_ASSERT(shape_is(g, "y", TPU_GRAPH_FP32, 3, (int64_t)3, (int64_t)2, (int64_t)5));
    tpu_graph_free(g);
  }
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)2);
  init_f(g, "lo", 0);
  init_f(g, "hi", 1, (int64_t)2);
  size_t cast = nd(g, "cast", "Cast", 13, "x", "y");
  attr_i(g, cast, "to", 7);
  nd(g, "clip", "Clip", 13, "x,lo,", "z");
  nd(g, "clip2", "Clip", 13, "x,,hi", "z2");
  io(g, "x", "y,z,z2");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'clip2'", "'hi' (max) must be a scalar, got shape [2]"));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)2);
  init_f(g, "lo", 0);
  cast = nd(g, "cast", "Cast", 13, "x", "y");
  attr_i(g, cast, "to", 7);
  nd(g, "clip", "Clip", 13, "x,lo,", "z");
  io(g, "x", "y,z");
  infer_ok(g, 2);
  CU_ASSERT(shape_is(g, "y", TPU_GRAPH_INT64, 2, (int64_t)2, (int64_t)2));
  CU_ASSERT(shape_is(g, "z", TPU_GRAPH_FP32, 2, (int64_t)2, (int64_t)2));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "x", TPU_GRAPH_INT32, 1, (int64_t)4);
  nd(g, "sq", "Sqrt", 13, "x", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_EDTYPE);
  CU_ASSERT(says(g, "node 'sq' (Sqrt, opset 13)", "'x' is INT32, expected a float type"));
  tpu_graph_free(g);
}

static void test_normalization(void) {
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)4, (int64_t)6);
  init_f(g, "gamma", 1, (int64_t)6);
  init_f(g, "beta", 1, (int64_t)6);
  init_f(g, "c4", 1, (int64_t)4);
  nd(g, "sm11", "Softmax", 11, "x", "s11");
  nd(g, "sm13", "LogSoftmax", 13, "x", "s13");
  nd(g, "ln", "LayerNormalization", 17, "x,gamma,beta", "l,mean,inv");
  nd(g, "bn", "BatchNormalization", 15, "x,c4,c4,c4,c4", "b");
  io(g, "x", "s11,s13,l,mean,b");
  infer_ok(g, 2);
  CU_ASSERT(shape_is(g, "s11", TPU_GRAPH_FP32, 3, (int64_t)2, (int64_t)4, (int64_t)6));
  CU_ASSERT(shape_is(g, "s13", TPU_GRAPH_FP32, 3, (int64_t)2, (int64_t)4, (int64_t)6));
  CU_ASSERT(shape_is(g, "l", TPU_GRAPH_FP32, 3, (int64_t)2, (int64_t)4, (int64_t)6));
  CU_ASSERT(shape_is(g, "mean", TPU_GRAPH_FP32, 3, (int64_t)2, (int64_t)4, (int64_t)1));
  CU_ASSERT(shape_is(g, "inv", TPU_GRAPH_FP32, 3, (int64_t)2, (int64_t)4, (int64_t)1));
  CU_ASSERT(shape_is(g, "b", TPU_GRAPH_FP32, 3, (int64_t)2, (int64_t)4, (int64_t)6));
  tpu_graph_free(g);

  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  init_f(g, "c5", 1, (int64_t)5);
  init_f(g, "c4", 1, (int64_t)4);
  nd(g, "bn", "BatchNormalization", 9, "x,c4,c4,c5,c4", "b");
  io(g, "x", "b");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'bn' (BatchNormalization, opset 9)", "'c5' (mean) has shape [5], "
                 "expected [4]"));
  tpu_graph_free(g);

  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  init_f(g, "g3", 1, (int64_t)3);
  nd(g, "ln", "LayerNormalization", 17, "x,g3", "l");
  io(g, "x", "l");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'ln'", "'g3' of shape [3] does not broadcast"));
  tpu_graph_free(g);

  /* Softmax axis must be in [-rank, rank-1]. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  size_t s = nd(g, "sm", "Softmax", 13, "x", "y");
  attr_i(g, s, "axis", 2);
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_EINVAL);
  CU_ASSERT(says(g, "node 'sm' (Softmax, opset 13): axis 2 is out of range", NULL));
  tpu_graph_free(g);
}

static void test_reduce_argmax_gather(void) {
  static const int64_t ax1[] = {1}, axneg[] = {-1, 0};
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)4, (int64_t)6);
  init_i64(g, "axes1", 1, ax1);
  size_t r1 = nd(g, "rm11", "ReduceMean", 11, "x", "a");
  attr_ints(g, r1, "axes", 1, ax1);
  size_t r2 = nd(g, "rs13", "ReduceSum", 13, "x,axes1", "b");
  attr_i(g, r2, "keepdims", 0);
  nd(g, "rm18", "ReduceMax", 18, "x,axes1", "c");
  nd(g, "rsall", "ReduceSum", 13, "x", "d");
  size_t r5 = nd(g, "rm13", "ReduceMean", 13, "x", "e");
  attr_ints(g, r5, "axes", 2, axneg);
  attr_i(g, r5, "keepdims", 0);
  size_t am = nd(g, "am", "ArgMax", 13, "x", "f");
  attr_i(g, am, "axis", -1);
  attr_i(g, am, "keepdims", 0);
  io(g, "x", "a,b,c,d,e,f");
  infer_ok(g, 5);
  CU_ASSERT(shape_is(g, "a", TPU_GRAPH_FP32, 3, (int64_t)5, (int64_t)1, (int64_t)6));
  CU_ASSERT(shape_is(g, "b", TPU_GRAPH_FP32, 2, (int64_t)5, (int64_t)6));
  CU_ASSERT(shape_is(g, "c", TPU_GRAPH_FP32, 3, (int64_t)5, (int64_t)1, (int64_t)6));
  CU_ASSERT(shape_is(g, "d", TPU_GRAPH_FP32, 3, (int64_t)1, (int64_t)1, (int64_t)1));
  CU_ASSERT(shape_is(g, "e", TPU_GRAPH_FP32, 1, (int64_t)4));
  CU_ASSERT(shape_is(g, "f", TPU_GRAPH_INT64, 2, (int64_t)5, (int64_t)4));
  tpu_graph_free(g);

  /* Axes from a computed tensor are refused: the shape would not be static. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  input(g, "ax", TPU_GRAPH_INT64, 1, (int64_t)1);
  nd(g, "rs", "ReduceSum", 13, "x,ax", "y");
  io(g, "x,ax", "y");
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_ENOTSUP);
  CU_ASSERT(says(g, "node 'rs' (ReduceSum, opset 13): input 'ax' (axes) must be a constant", NULL));
  tpu_graph_free(g);

  /* Gather: an embedding lookup, INT64 or INT32 ids; float ids refused. */
  g = tg_new();
  input(g, "ids", TPU_GRAPH_INT64, 2, (int64_t)B, (int64_t)4);
  input(g, "ids32", TPU_GRAPH_INT32, 1, (int64_t)B);
  init_f(g, "emb", 2, (int64_t)100, (int64_t)8);
  nd(g, "e", "Gather", 13, "emb,ids", "y");
  size_t e2 = nd(g, "e2", "Gather", 13, "emb,ids32", "y2");
  attr_i(g, e2, "axis", 1);
  io(g, "ids,ids32", "y,y2");
  infer_ok(g, 16);
  CU_ASSERT(shape_is(g, "y", TPU_GRAPH_FP32, 3, (int64_t)16, (int64_t)4, (int64_t)8));
  CU_ASSERT(shape_is(g, "y2", TPU_GRAPH_FP32, 2, (int64_t)100, (int64_t)16));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "ids", TPU_GRAPH_FP32, 1, (int64_t)B);
  init_f(g, "emb", 2, (int64_t)100, (int64_t)8);
  nd(g, "e", "Gather", 13, "emb,ids", "y");
  io(g, "ids", "y");
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_EDTYPE);
  CU_ASSERT(says(g, "node 'e' (Gather, opset 13)", "'ids' are FP32, expected INT64 or INT32"));
  tpu_graph_free(g);
}

static void test_movement(void) {
  static const int64_t shape0[] = {0, -1}, shape2[] = {-1, 3, 2}, ax0[] = {0}, ax12[] = {1, -1};
  static const int64_t perm[] = {0, 2, 1};
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)2, (int64_t)3);
  input(g, "z", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)5, (int64_t)3);
  init_i64(g, "s0", 2, shape0);
  init_i64(g, "s2", 3, shape2);
  init_i64(g, "ax12", 2, ax12);
  size_t cc = nd(g, "cat", "Concat", 13, "x,z", "c");
  attr_i(g, cc, "axis", 1);
  nd(g, "flat", "Flatten", 13, "x", "f");
  size_t f0 = nd(g, "flat0", "Flatten", 13, "x", "f0");
  attr_i(g, f0, "axis", 0);
  nd(g, "r0", "Reshape", 14, "x,s0", "r");
  nd(g, "r2", "Reshape", 14, "x,s2", "r2o");
  nd(g, "unsq", "Unsqueeze", 13, "x,ax12", "u");
  size_t u11 = nd(g, "unsq11", "Unsqueeze", 11, "x", "u11");
  attr_ints(g, u11, "axes", 1, ax0);
  size_t s11 = nd(g, "sq11", "Squeeze", 11, "u11", "q11");
  attr_ints(g, s11, "axes", 1, ax0);
  nd(g, "sq13", "Squeeze", 13, "u", "q13"); /* no axes: every 1 goes, the batch too at 1 */
  size_t tr = nd(g, "tr", "Transpose", 13, "x", "t");
  attr_ints(g, tr, "perm", 3, perm);
  nd(g, "trr", "Transpose", 13, "x", "trev");
  io(g, "x,z", "c,f,f0,r,r2o,u,u11,q11,q13,t,trev");
  infer_ok(g, 4);
  CU_ASSERT(shape_is(g, "c", TPU_GRAPH_FP32, 3, (int64_t)4, (int64_t)7, (int64_t)3));
  CU_ASSERT(shape_is(g, "f", TPU_GRAPH_FP32, 2, (int64_t)4, (int64_t)6));
  CU_ASSERT(shape_is(g, "f0", TPU_GRAPH_FP32, 2, (int64_t)1, (int64_t)24));
  CU_ASSERT(shape_is(g, "r", TPU_GRAPH_FP32, 2, (int64_t)4, (int64_t)6));
  CU_ASSERT(shape_is(g, "r2o", TPU_GRAPH_FP32, 3, (int64_t)4, (int64_t)3, (int64_t)2));
  CU_ASSERT(shape_is(g, "u", TPU_GRAPH_FP32, 5, (int64_t)4, (int64_t)1, (int64_t)2, (int64_t)3,
                     (int64_t)1));
  CU_ASSERT(shape_is(g, "u11", TPU_GRAPH_FP32, 4, (int64_t)1, (int64_t)4, (int64_t)2, (int64_t)3));
  CU_ASSERT(shape_is(g, "q11", TPU_GRAPH_FP32, 3, (int64_t)4, (int64_t)2, (int64_t)3));
  CU_ASSERT(shape_is(g, "q13", TPU_GRAPH_FP32, 3, (int64_t)4, (int64_t)2, (int64_t)3));
  CU_ASSERT(shape_is(g, "t", TPU_GRAPH_FP32, 3, (int64_t)4, (int64_t)3, (int64_t)2));
  CU_ASSERT(shape_is(g, "trev", TPU_GRAPH_FP32, 3, (int64_t)3, (int64_t)2, (int64_t)4));
  /* The same graph at batch 1: -1 becomes 1 everywhere, Squeeze without axes drops it too. */
  infer_ok(g, 1);
  CU_ASSERT(shape_is(g, "r", TPU_GRAPH_FP32, 2, (int64_t)1, (int64_t)6));
  CU_ASSERT(shape_is(g, "q13", TPU_GRAPH_FP32, 2, (int64_t)2, (int64_t)3));
  tpu_graph_free(g);

  /* Reshape errors: element count, two -1, 0 beyond the input's rank; Squeeze of a non-1. */
  static const int64_t bad1[] = {5, -1}, bad2[] = {-1, -1}, bad3[] = {2, 3, 0, 0}, bad4[] = {7};
  const int64_t *bads[] = {bad1, bad2, bad3, bad4};
  size_t nb[] = {2, 2, 4, 1};
  const char *want[] = {"cannot reshape 'x' [2,6] (12 elements) to [5,-1]",
                        "shape [-1,-1] has more than one -1",
                        "shape [2,3,0,0] copies dimension 2 (0)",
                        "cannot reshape 'x' [2,6] (12 elements) to [7] (7 elements)"};
  for (int k = 0; k < 4; k++) {
    g = tg_new();
    input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)6);
    init_i64(g, "s", nb[k], bads[k]);
    nd(g, "rs", "Reshape", 13, "x,s", "y");
    io(g, "x", "y");
    CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
    CU_ASSERT(says(g, "node 'rs' (Reshape, opset 13)", want[k]));
    tpu_graph_free(g);
  }
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)6);
  init_i64(g, "a", 1, ax12 + 1);
  nd(g, "sq", "Squeeze", 13, "x,a", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'sq'", "cannot squeeze axis 1 of 'x' [2,6]"));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)6);
  input(g, "z", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)5);
  cc = nd(g, "cat", "Concat", 13, "x,z", "y");
  attr_i(g, cc, "axis", 0);
  io(g, "x,z", "y");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'cat'", "'x' [2,6] and 'z' [2,5] differ outside axis 0"));
  tpu_graph_free(g);
}

/* How exporters spell "flatten all but the batch": the target shape is computed from Shape. */
static void test_shape_constant_chain(void) {
  static const int64_t zero = 0, ax0[] = {0}, minus1[] = {-1};
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 3, (int64_t)B, (int64_t)2, (int64_t)3);
  init_i64(g, "m1", 1, minus1);
  nd(g, "shape", "Shape", 13, "x", "s");
  tpu_graph_attr_t idx = {.name = "value", .type = TPU_GRAPH_ATTR_TENSOR,
                          .t_dtype = TPU_GRAPH_INT64, .t_rank = 0, .t_data = &zero, .t_bytes = 8};
  size_t k = nd(g, "k", "Constant", 13, "", "i0");
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, k, &idx) == TPU_OK);
  nd(g, "g", "Gather", 13, "s,i0", "n");
  size_t ax = nd(g, "axc", "Constant", 13, "", "axes");
  attr_ints(g, ax, "value_ints", 1, ax0);
  nd(g, "u", "Unsqueeze", 13, "n,axes", "n1");
  size_t cc = nd(g, "cat", "Concat", 13, "n1,m1", "target");
  attr_i(g, cc, "axis", 0);
  nd(g, "rs", "Reshape", 13, "x,target", "y");
  size_t sl = nd(g, "tail", "Shape", 15, "x", "tail");
  attr_i(g, sl, "start", -2);
  io(g, "x", "y,tail");
  for (int64_t batch = 1; batch <= 64; batch *= 8) {
    infer_ok(g, batch);
    CU_ASSERT(shape_is(g, "s", TPU_GRAPH_INT64, 1, (int64_t)3));
    CU_ASSERT(shape_is(g, "i0", TPU_GRAPH_INT64, 0));
    CU_ASSERT(shape_is(g, "n", TPU_GRAPH_INT64, 0));
    CU_ASSERT(shape_is(g, "target", TPU_GRAPH_INT64, 1, (int64_t)2));
    CU_ASSERT(shape_is(g, "y", TPU_GRAPH_FP32, 2, batch, (int64_t)6));
    CU_ASSERT(shape_is(g, "tail", TPU_GRAPH_INT64, 1, (int64_t)2));
    tpu_graph_tensor_info_t info;
    CU_ASSERT_FATAL(tpu_graph_tensor(g, (size_t)tpu_graph_find(g, "target"), &info) == TPU_OK);
    CU_ASSERT_FATAL(info.data != NULL && info.bytes == 16);
    CU_ASSERT(((const int64_t *)info.data)[0] == batch && ((const int64_t *)info.data)[1] == -1);
    CU_ASSERT_FATAL(tpu_graph_tensor(g, (size_t)tpu_graph_find(g, "tail"), &info) == TPU_OK);
    CU_ASSERT_FATAL(info.data != NULL && info.bytes == 16);
    CU_ASSERT(((const int64_t *)info.data)[0] == 2 && ((const int64_t *)info.data)[1] == 3);
  }
  tpu_graph_free(g);
}

static void test_declared_and_unsupported(void) {
  /* A declared output shape (value_info) is checked; -1 there matches anything. */
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  input(g, "h", TPU_GRAPH_FP32, 2, (int64_t)-1, (int64_t)5);
  nd(g, "r", "Relu", 13, "x", "h");
  nd(g, "s", "Relu", 13, "h", "o");
  io(g, "x", "o");
  CU_ASSERT(tpu_graph_infer(g, 3) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'r' (Relu, opset 13): output 'h' is inferred as FP32 [3,4] but "
                 "declared FP32 [-1,5]", NULL));
  tpu_graph_free(g);

  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 4, (int64_t)B, (int64_t)3, (int64_t)8, (int64_t)8);
  init_f(g, "w", 4, (int64_t)4, (int64_t)3, (int64_t)3, (int64_t)3);
  nd(g, "conv1", "Conv", 11, "x,w", "y");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_validate(g) == TPU_OK); /* structure is fine */
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_ENOTSUP);
  CU_ASSERT(says(g, "node 'conv1' (Conv, opset 11): op 'Conv' (opset 11) is not supported", NULL));
  tpu_graph_infer(g, 1);
  tpu_graph_tensor_info_t info;
  CU_ASSERT(tpu_graph_tensor(g, (size_t)tpu_graph_find(g, "x"), &info) == TPU_OK);
  CU_ASSERT(!info.inferred && info.dims[0] == -1); /* a failed inference leaves nothing */
  tpu_graph_free(g);

  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 1, (int64_t)B);
  const char *in[] = {"x"}, *out[] = {"y"};
  CU_ASSERT_FATAL(tpu_graph_add_node(g, "fg", "FusedGemm", "com.microsoft", 1, 1, in, 1, out,
                                     NULL) == TPU_OK);
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_ENOTSUP);
  CU_ASSERT(says(g, "op 'com.microsoft.FusedGemm' (opset 1) is not supported", NULL));
  tpu_graph_free(g);

  /* Training-mode BatchNormalization outputs are refused, not silently dropped. */
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)4);
  init_f(g, "c", 1, (int64_t)4);
  nd(g, "bn", "BatchNormalization", 9, "x,c,c,c,c", "y,rm,rv");
  io(g, "x", "y");
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_ENOTSUP);
  CU_ASSERT(says(g, "node 'bn' (BatchNormalization, opset 9): has 3 outputs", NULL));
  tpu_graph_free(g);
}

/* Attribute and operand forms that changed between opsets, and their error paths. */
static void test_opset_forms(void) {
  static const int64_t shape[] = {3, 0}, two[] = {2}, flat[] = {-1}, bad_perm[] = {0, 0};
  static const int64_t idx5[] = {5};
  tpu_graph_attr_t vf = {.name = "value_float", .type = TPU_GRAPH_ATTR_FLOAT, .f = 2.0f};
  size_t r4, rz, fl, ln, k, c32;
  tpu_graph_t *g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)6);
  init_i64(g, "s", 2, shape);
  rz = nd(g, "rz", "Reshape", 14, "x,s", "b"); /* allowzero: 0 is a real 0 */
  attr_i(g, rz, "allowzero", 1);
  io(g, "x", "b");
  CU_ASSERT(tpu_graph_infer(g, 1) == TPU_ESHAPE); /* [3,0] holds 0 elements, not 6 */
  CU_ASSERT(says(g, "node 'rz'", "to [3,0] (0 elements)"));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)6);
  r4 = nd(g, "r4", "Reshape", 4, "x", "a"); /* before opset 5: the shape attribute */
  attr_ints(g, r4, "shape", 1, two);
  io(g, "x", "a");
  CU_ASSERT(tpu_graph_infer(g, 2) == TPU_ESHAPE);
  CU_ASSERT(says(g, "node 'r4' (Reshape, opset 4)", "to [2] (2 elements)"));
  tpu_graph_free(g);
  g = tg_new();
  input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)6);
  r4 = nd(g, "r4", "Reshape", 4, "x", "a");
  attr_ints(g, r4, "shape", 1, flat);
  fl = nd(g, "fl", "Flatten", 13, "x", "c");
  attr_i(g, fl, "axis", -1);
  ln = nd(g, "ln", "LayerNormalization", 17, "x,x", "d");
  attr_i(g, ln, "axis", 0);
  k = nd(g, "k", "Constant", 13, "", "e");
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, k, &vf) == TPU_OK);
  nd(g, "shp", "Shape", 13, "x", "sh");
  c32 = nd(g, "c32", "Cast", 13, "sh", "sh32");
  attr_i(g, c32, "to", 6);
  nd(g, "rc", "Reshape", 13, "x,sh32", "f");
  io(g, "x", "a,c,d,e,f");
  infer_ok(g, 2);
  CU_ASSERT(shape_is(g, "a", TPU_GRAPH_FP32, 1, (int64_t)12));
  CU_ASSERT(shape_is(g, "c", TPU_GRAPH_FP32, 2, (int64_t)2, (int64_t)6));
  CU_ASSERT(shape_is(g, "d", TPU_GRAPH_FP32, 2, (int64_t)2, (int64_t)6));
  CU_ASSERT(shape_is(g, "e", TPU_GRAPH_FP32, 0));
  CU_ASSERT(shape_is(g, "sh32", TPU_GRAPH_INT32, 1, (int64_t)2));
  CU_ASSERT(shape_is(g, "f", TPU_GRAPH_FP32, 2, (int64_t)2, (int64_t)6));
  tpu_graph_free(g);

  /* Errors: Unsqueeze-13 without axes, a bad perm, an unknown Cast type, Concat without axis,
   * a folded Gather index out of range, Where on a non-BOOL condition, a computed shape. */
  struct {
    const char *op;
    int opset;
    const char *ins;
    tpu_status_t st;
    const char *msg;
  } cases[] = {
      {"Unsqueeze", 13, "x", TPU_EINVAL, "takes 2 inputs, got 1"},
      {"Transpose", 13, "x", TPU_EINVAL, "perm is not a permutation of 0..1"},
      {"Cast", 13, "x", TPU_EDTYPE, "attribute 'to' is ONNX type 8"},
      {"Cast", 19, "x", TPU_EINVAL, "attribute 'to' is required"},
      {"Concat", 13, "x,x", TPU_EINVAL, "attribute 'axis' is required"},
      {"Gather", 13, "sh,i5", TPU_ERANGE, "index 5 is out of range for 'sh' [2]"},
      {"Where", 16, "x,x,x", TPU_EDTYPE, "'x' (condition) is FP32, expected BOOL"},
      {"Reshape", 13, "x,xi", TPU_ENOTSUP, "'xi' (shape) must be a constant"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    g = tg_new();
    input(g, "x", TPU_GRAPH_FP32, 2, (int64_t)B, (int64_t)6);
    input(g, "xi", TPU_GRAPH_INT64, 1, (int64_t)2);
    init_i64(g, "i5", 1, idx5);
    nd(g, "shp", "Shape", 13, "x", "sh");
    size_t n = nd(g, "n", cases[i].op, cases[i].opset, cases[i].ins, "y");
    if (strcmp(cases[i].op, "Transpose") == 0) attr_ints(g, n, "perm", 2, bad_perm);
    if (strcmp(cases[i].op, "Cast") == 0 && cases[i].opset == 13) attr_i(g, n, "to", 8);
    io(g, "x,xi", "y");
    CU_ASSERT(tpu_graph_infer(g, 3) == cases[i].st);
    CU_ASSERT(says(g, "node 'n'", cases[i].msg));
    tpu_graph_free(g);
  }
}

/* Random small graphs of supported (and one unsupported) ops with random operands and
 * attributes: inference either succeeds with every tensor given a valid shape, or fails with a
 * message naming a node. Run under valgrind or ASan this also checks that no rule reads out of
 * bounds on odd ranks, axes or constant values. */
static void test_random_graphs(void) {
  static const char *const ops[] = {
      "Gemm", "MatMul", "Add", "Mul", "Pow", "Max", "Where", "Relu", "Clip", "Cast", "Softmax",
      "LogSoftmax", "LayerNormalization", "BatchNormalization", "ReduceSum", "ReduceMean",
      "ReduceMax", "ArgMax", "Gather", "Concat", "Flatten", "Reshape", "Squeeze", "Unsqueeze",
      "Transpose", "Shape", "Identity", "Bogus"};
  static const char *const attrs[] = {"axis", "keepdims", "transA", "transB", "to", "allowzero",
                                      "start", "end", "noop_with_empty_axes"};
  enum { NOPS = sizeof ops / sizeof ops[0], NATTRS = sizeof attrs / sizeof attrs[0] };
  int inferred = 0;
  for (int iter = 0; iter < 400; iter++) {
    tpu_graph_t *g = tg_new();
    char names[32][16];
    size_t nn = 0;
    int64_t d[TPU_GRAPH_MAX_RANK];
    int rank = (int)tpu_test_rand_range(1, 4);
    d[0] = B;
    for (int i = 1; i < rank; i++) d[i] = tpu_test_rand_range(1, 4);
    CU_ASSERT_FATAL(tpu_graph_add_tensor(g, "x", TPU_GRAPH_FP32, rank, d) == TPU_OK);
    snprintf(names[nn++], 16, "x");
    for (int k = 0; k < 4; k++) {
      int r = (int)tpu_test_rand_range(0, 3);
      int ints = k >= 2;
      int64_t vals[64];
      size_t n = 1;
      for (int i = 0; i < r; i++) n *= (size_t)(d[i] = tpu_test_rand_range(1, 4));
      for (size_t i = 0; i < n; i++) vals[i] = tpu_test_rand_range(-3, 4);
      snprintf(names[nn], 16, "c%d", k);
      CU_ASSERT_FATAL(tpu_graph_add_initializer(g, names[nn], ints ? TPU_GRAPH_INT64 :
                                                TPU_GRAPH_FP32, r, d, vals,
                                                n * (ints ? 8 : 4)) == TPU_OK);
      nn++;
    }
    int nodes = (int)tpu_test_rand_range(1, 6);
    for (int k = 0; k < nodes; k++) {
      const char *in[4];
      size_t nin = (size_t)(tpu_test_rand_range(0, 9) ? tpu_test_rand_range(1, 2)
                                                      : tpu_test_rand_range(0, 4));
      for (size_t i = 0; i < nin; i++)
        in[i] = tpu_test_rand_range(0, 9) == 0 ? "" : names[tpu_test_rand_range(0, (long)nn - 1)];
      if (nin && tpu_test_rand_range(0, 1)) in[0] = names[nn - 1]; /* mostly chains */
      snprintf(names[nn], 16, "t%d", k);
      const char *out[1] = {names[nn]};
      size_t idx;
      const char *op = ops[tpu_test_rand_range(0, NOPS - 1)];
      CU_ASSERT_FATAL(tpu_graph_add_node(g, NULL, op, NULL, (int)tpu_test_rand_range(7, 21), nin,
                                         in, 1, out, &idx) == TPU_OK);
      nn++;
      for (int a = 0; a < 3; a++) {
        tpu_graph_attr_t at = {.name = attrs[tpu_test_rand_range(0, NATTRS - 1)],
                               .type = TPU_GRAPH_ATTR_INT, .i = tpu_test_rand_range(-3, 7)};
        int64_t list[4];
        if (tpu_test_rand_range(0, 3) == 0) {
          at.name = tpu_test_rand_range(0, 1) ? "perm" : "axes";
          at.type = TPU_GRAPH_ATTR_INTS;
          at.n = (size_t)tpu_test_rand_range(0, 4);
          for (size_t i = 0; i < at.n; i++) list[i] = tpu_test_rand_range(-4, 4);
          at.ints = list;
        }
        if (!tpu_graph_attr(g, idx, at.name)) CU_ASSERT(tpu_graph_add_attr(g, idx, &at) == TPU_OK);
      }
    }
    const char *ins[] = {"x"}, *outs[] = {names[nn - 1]};
    CU_ASSERT_FATAL(tpu_graph_set_inputs(g, 1, ins) == TPU_OK);
    CU_ASSERT_FATAL(tpu_graph_set_outputs(g, 1, outs) == TPU_OK);
    tpu_status_t st = tpu_graph_infer(g, tpu_test_rand_range(1, 3));
    TPU_ASSERT_SEED((unsigned)st < (unsigned)TPU_STATUS_COUNT);
    if (st != TPU_OK) {
      TPU_ASSERT_SEED(strstr(tpu_graph_error(g), "node #") != NULL);
    } else {
      inferred++;
      for (size_t t = 0; t < tpu_graph_tensor_count(g); t++) {
        tpu_graph_tensor_info_t info;
        CU_ASSERT_FATAL(tpu_graph_tensor(g, t, &info) == TPU_OK);
        if (info.producer < 0 && !info.is_input && !info.is_initializer) continue;
        TPU_ASSERT_SEED(info.inferred && info.rank >= 0 && info.rank <= TPU_GRAPH_MAX_RANK);
        for (int i = 0; i < info.rank; i++) TPU_ASSERT_SEED(info.dims[i] >= 0);
      }
    }
    tpu_graph_free(g);
  }
  TPU_ASSERT_SEED(inferred > 0); /* the success path ran (about one graph in twenty infers) */
}

TPU_TEST_SUITE(graph,
               {"dtypes", test_dtypes},
               {"builder_errors", test_builder_errors},
               {"overflow", test_overflow},
               {"validation", test_validation},
               {"gemm_matmul", test_gemm_matmul},
               {"elementwise", test_elementwise},
               {"normalization", test_normalization},
               {"reduce_argmax_gather", test_reduce_argmax_gather},
               {"movement", test_movement},
               {"shape_constant_chain", test_shape_constant_chain},
               {"declared_and_unsupported", test_declared_and_unsupported},
               {"opset_forms", test_opset_forms},
               {"random_graphs", test_random_graphs})
