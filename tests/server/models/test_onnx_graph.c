/*
 * test_onnx_graph.c - decoded ONNX to graph IR: every node model of ONNX's own test data
 * (Debian libonnx-testdata) converted, validated and inferred, with counts of what infers, what
 * is refused for a missing op (grouped by op) and what is refused otherwise (each printed);
 * inferred output shapes checked against the shapes the model states; a list of simple models
 * that must infer; and hand-built descriptions for the initializer-as-input rule and the
 * refusals the converter makes itself.
 */
#define _GNU_SOURCE /* nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx.h"
#include "onnx_graph.h"
#include "tpu_graph.h"
#include "tpu_test.h"

#define NODEDATA "/usr/share/libonnx-testdata/data/node"

/* The batch a test model is inferred at: its first graph input's dimension 0, else 1. */
static int64_t model_batch(const tpu_onnx_model_t *m) {
  for (size_t i = 0; i < m->ninputs; i++) {
    if (m->inputs[i].initializer) continue;
    if (m->inputs[i].ndim > 0 && m->inputs[i].dims[0] > 0) return m->inputs[i].dims[0];
    return 1;
  }
  return 1;
}

/* Compares the graph's inferred outputs with the model's stated ones; 0 when all agree, else
 * writes the first disagreement into msg. */
static int output_mismatch(const tpu_onnx_model_t *m, const tpu_graph_t *g, char *msg,
                           size_t len) {
  for (size_t i = 0; i < m->noutputs; i++) {
    const tpu_onnx_value_t *v = &m->outputs[i];
    tpu_graph_tensor_info_t ti;
    long idx = tpu_graph_find(g, v->name);
    if (idx < 0 || tpu_graph_tensor(g, (size_t)idx, &ti) != TPU_OK || !ti.inferred) {
      snprintf(msg, len, "output '%s': not inferred", v->name);
      return 1;
    }
    int same = ti.dtype == tpu_graph_dtype_from_onnx(v->dtype) && ti.rank == (int)v->ndim;
    for (int d = 0; same && d < ti.rank; d++)
      if (v->dims[d] >= 0 && v->dims[d] != ti.dims[d]) same = 0;
    if (!same) {
      char got[200] = "[", want[200] = "[";
      for (int d = 0; d < ti.rank; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "",
                 (long long)ti.dims[d]);
      for (size_t d = 0; d < v->ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "",
                 (long long)v->dims[d]);
      snprintf(msg, len, "output '%s': inferred %s %s], stated %s %s]", v->name,
               tpu_graph_dtype_name(ti.dtype) ? tpu_graph_dtype_name(ti.dtype) : "?", got,
               tpu_onnx_dtype_name(v->dtype) ? tpu_onnx_dtype_name(v->dtype) : "?", want);
      return 1;
    }
  }
  return 0;
}

/* ---- the whole node suite ---- */

#define MAX_OPS 400
static struct {
  char op[80];
  int count;
} missing[MAX_OPS];
static int nmissing, decoded, inferred, by_op, other, unexpected, mismatches, silent;

/* Refusals other than a missing op that the IR makes by design: element types it has no
 * counterpart for, shape operands that are graph inputs (not constants), and training-mode
 * outputs. Anything else is a bug to look at. */
static int designed_refusal(const char *err) {
  static const char *ok[] = {
      "element type",                     /* STRING, INT16, UINT16/32/64 */
      "must be a constant known at load", /* Reshape shape, Squeeze/Unsqueeze/Reduce axes */
      "are supported",                    /* BatchNormalization's training outputs */
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (strstr(err, ok[i])) return 1;
  return 0;
}

/* The op of infer's "op 'X' (opset N) is not supported" message, or NULL for any other. */
static int missing_op(const char *msg, char *op, size_t len) {
  const char *p = strstr(msg, ": op '");
  if (!p || !strstr(p, "is not supported")) return 0;
  p += 6;
  const char *q = strchr(p, '\'');
  if (!q || (size_t)(q - p) >= len) return 0;
  memcpy(op, p, (size_t)(q - p));
  op[q - p] = 0;
  return 1;
}

static void count_missing(const char *op) {
  int i;
  for (i = 0; i < nmissing; i++)
    if (strcmp(missing[i].op, op) == 0) break;
  if (i == nmissing && nmissing < MAX_OPS) snprintf(missing[nmissing++].op, 80, "%s", op);
  if (i < nmissing) missing[i].count++;
}

static int visit(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)ftw;
  if (flag != FTW_F) return 0;
  size_t n = strlen(path);
  if (n < 11 || strcmp(path + n - 11, "/model.onnx") != 0) return 0;
  char err[1024];
  tpu_onnx_model_t *m = NULL;
  if (tpu_onnx_load(path, 0, NULL, &m, err, sizeof err) != TPU_OK) return 0;
  decoded++;
  const char *test = path + strlen(NODEDATA "/");
  tpu_graph_t *g = NULL;
  err[0] = 0;
  tpu_status_t st = tpu_onnx_to_graph(m, &g, err, sizeof err);
  if (st == TPU_OK) {
    CU_ASSERT_PTR_NOT_NULL(g);
    st = tpu_graph_infer(g, model_batch(m));
    if (st != TPU_OK) snprintf(err, sizeof err, "%s", tpu_graph_error(g));
  } else {
    CU_ASSERT_PTR_NULL(g);
  }
  if (st == TPU_OK) {
    inferred++;
    char msg[600];
    if (output_mismatch(m, g, msg, sizeof msg)) {
      mismatches++;
      printf("\n    shape mismatch: %.*s: %s", (int)(strlen(test) - 11), test, msg);
    }
  } else {
    char op[80];
    if (!err[0]) silent++;
    CU_ASSERT_TRUE(err[0] != 0);
    CU_ASSERT_TRUE(strchr(err, '\'') || strchr(err, '#')); /* names a tensor or node */
    if (st == TPU_ENOTSUP && missing_op(err, op, sizeof op)) {
      by_op++;
      count_missing(op);
    } else {
      other++;
      if (!designed_refusal(err)) unexpected++;
      printf("\n    refused: %.*s: %s (%s)", (int)(strlen(test) - 11), test, err,
             tpu_strerror(st));
    }
  }
  tpu_graph_free(g);
  tpu_onnx_free(m);
  return 0;
}

static void test_node_suite(void) {
  struct stat st;
  if (stat(NODEDATA, &st) != 0) {
    CU_FAIL("ONNX test data missing: install libonnx-testdata (deploy/deps.sh)");
    return;
  }
  nmissing = decoded = inferred = by_op = other = unexpected = mismatches = silent = 0;
  printf("\n  libonnx-testdata data/node, converted and inferred:");
  CU_ASSERT_EQUAL(nftw(NODEDATA, visit, 16, FTW_PHYS), 0);
  /* Most common missing op first (insertion sort: a few hundred entries). */
  for (int i = 1; i < nmissing; i++)
    for (int j = i; j > 0 && missing[j].count > missing[j - 1].count; j--) {
      char op[80];
      int c = missing[j].count;
      memcpy(op, missing[j].op, 80);
      missing[j] = missing[j - 1];
      memcpy(missing[j - 1].op, op, 80);
      missing[j - 1].count = c;
    }
  printf("\n  %d decode: %d convert and infer, %d refused for a missing op (%d ops), %d "
         "refused otherwise; %d output shape mismatches\n  missing ops:", decoded, inferred,
         by_op, nmissing, other, mismatches);
  for (int i = 0; i < nmissing; i++)
    printf("%s %s %d", i % 6 ? "," : "\n   ", missing[i].op, missing[i].count);
  printf("\n");
  CU_ASSERT_TRUE(decoded >= 800); /* 872 of the 1.12 package's 932 */
  CU_ASSERT_EQUAL(silent, 0);
  CU_ASSERT_EQUAL(mismatches, 0);
  CU_ASSERT_EQUAL(unexpected, 0);
  CU_ASSERT_EQUAL(decoded, inferred + by_op + other);
  CU_ASSERT_TRUE(inferred >= 100);
}

/* Simple models of supported ops. Not here: the suite's test_reshape_*, test_squeeze*,
 * test_unsqueeze_* and ReduceSum (opset 13) models take their shape or axes as a graph input,
 * which a static-shape graph refuses by design (see the node suite's other refusals). */
/* Simple models of supported ops: each converts, infers and gives its stated output shape. */
static void test_named(void) {
  static const char *names[] = {
      "test_add", "test_add_bcast", "test_sub", "test_mul", "test_div", "test_relu",
      "test_sigmoid", "test_tanh", "test_gemm_default_no_bias", "test_gemm_all_attributes",
      "test_matmul_2d", "test_matmul_3d", "test_softmax_axis_1", "test_logsoftmax_axis_1",
      "test_concat_1d_axis_0", "test_concat_2d_axis_1", "test_concat_3d_axis_negative_1",
      "test_gather_0", "test_gather_1", "test_transpose_default", "test_flatten_axis1",
      "test_identity", "test_constant", "test_where_example",
      "test_layer_normalization_2d_axis0", "test_layer_normalization_4d_axis_negative_1",
      "test_batchnorm_example", "test_reduce_max_keepdims_example",
      "test_reduce_mean_default_axes_keepdims_example", "test_argmax_default_axis_example",
      "test_shape", "test_cast_FLOAT_to_DOUBLE", "test_clip", "test_leakyrelu", "test_erf",
  };
  int found = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[512], err[1024] = "";
    snprintf(path, sizeof path, NODEDATA "/%s/model.onnx", names[i]);
    struct stat st;
    if (stat(path, &st) != 0) continue; /* not in this package version */
    found++;
    tpu_onnx_model_t *m = NULL;
    tpu_status_t rc = tpu_onnx_load(path, 0, NULL, &m, err, sizeof err);
    if (rc != TPU_OK) fprintf(stderr, "\n  %s: %s\n", names[i], err);
    CU_ASSERT_EQUAL(rc, TPU_OK);
    if (rc != TPU_OK) continue;
    tpu_graph_t *g = NULL;
    rc = tpu_onnx_to_graph(m, &g, err, sizeof err);
    if (rc == TPU_OK) {
      rc = tpu_graph_infer(g, model_batch(m));
      if (rc != TPU_OK) snprintf(err, sizeof err, "%s", tpu_graph_error(g));
    }
    if (rc != TPU_OK) fprintf(stderr, "\n  %s: %s\n", names[i], err);
    CU_ASSERT_EQUAL(rc, TPU_OK);
    char msg[600];
    if (rc == TPU_OK && output_mismatch(m, g, msg, sizeof msg)) {
      fprintf(stderr, "\n  %s: %s\n", names[i], msg);
      CU_FAIL("inferred output shape differs from the stated one");
    }
    tpu_graph_free(g);
    tpu_onnx_free(m);
  }
  CU_ASSERT_TRUE(found >= 30);
}

/* ---- hand-built descriptions ---- */

static int64_t x_dims[2] = {-1, 3}, w_dims[2] = {3, 2}, y_dims[2] = {-1, 2};
static float w_data[6] = {1, 2, 3, 4, 5, 6};
static char *mm_in[2] = {"x", "w"}, *mm_out[1] = {"y"};
static tpu_onnx_value_t ins[2], outs[1];
static tpu_onnx_tensor_t inits[1];
static tpu_onnx_node_t nodes[1];
static tpu_onnx_attr_t attrs[1];
static tpu_onnx_model_t model;

/* x [batch,3] MatMul w [3,2] = y [batch,2], with w listed as a graph input too (IR 3). */
static void model_reset(void) {
  memset(ins, 0, sizeof ins);
  memset(outs, 0, sizeof outs);
  memset(inits, 0, sizeof inits);
  memset(nodes, 0, sizeof nodes);
  memset(attrs, 0, sizeof attrs);
  ins[0] = (tpu_onnx_value_t){.name = "x", .dtype = TPU_ONNX_FLOAT, .ndim = 2, .dims = x_dims,
                              .batch_param = "N"};
  ins[1] = (tpu_onnx_value_t){.name = "w", .dtype = TPU_ONNX_FLOAT, .ndim = 2, .dims = w_dims,
                              .initializer = 1};
  outs[0] = (tpu_onnx_value_t){.name = "y", .dtype = TPU_ONNX_FLOAT, .ndim = 2, .dims = y_dims,
                               .batch_param = "N"};
  inits[0] = (tpu_onnx_tensor_t){.name = "w", .dtype = TPU_ONNX_FLOAT, .ndim = 2, .dims = w_dims,
                                 .nelements = 6, .nbytes = 24, .data = w_data};
  nodes[0] = (tpu_onnx_node_t){.name = "mm", .op_type = "MatMul", .domain = "", .opset = 13,
                               .ninputs = 2, .noutputs = 1, .inputs = mm_in, .outputs = mm_out};
  model = (tpu_onnx_model_t){.ir_version = 3, .opset = 13, .ninitializers = 1,
                             .initializers = inits, .nnodes = 1, .nodes = nodes, .ninputs = 2,
                             .noutputs = 1, .inputs = ins, .outputs = outs};
}

static void test_initializer_input(void) {
  model_reset();
  char err[512];
  tpu_graph_t *g = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_onnx_to_graph(&model, &g, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(tpu_graph_input_count(g), 1); /* w dropped: it is a constant */
  CU_ASSERT_EQUAL(tpu_graph_input(g, 0), tpu_graph_find(g, "x"));
  CU_ASSERT_EQUAL_FATAL(tpu_graph_infer(g, 5), TPU_OK);
  tpu_graph_tensor_info_t ti;
  CU_ASSERT_EQUAL_FATAL(tpu_graph_tensor(g, (size_t)tpu_graph_find(g, "y"), &ti), TPU_OK);
  CU_ASSERT_EQUAL_FATAL(ti.rank, 2);
  CU_ASSERT_EQUAL(ti.dims[0], 5);
  CU_ASSERT_EQUAL(ti.dims[1], 2);
  CU_ASSERT_EQUAL(tpu_graph_tensor(g, (size_t)tpu_graph_find(g, "w"), &ti), TPU_OK);
  CU_ASSERT_TRUE(ti.is_initializer && !ti.is_input);
  tpu_graph_free(g);
  /* Without the decoder's mark, the name alone drops the input. */
  ins[1].initializer = 0;
  CU_ASSERT_EQUAL(tpu_onnx_to_graph(&model, &g, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(tpu_graph_input_count(g), 1);
  tpu_graph_free(g);
}

static void test_attrs(void) {
  model_reset();
  char err[512];
  tpu_graph_t *g = NULL;
  static int64_t t_dims[1] = {2};
  static int64_t t_data[2] = {7, 8};
  static tpu_onnx_tensor_t t = {.name = "", .dtype = TPU_ONNX_INT64, .ndim = 1, .dims = t_dims,
                                .nelements = 2, .nbytes = 16, .data = t_data};
  static tpu_onnx_attr_t a[3];
  memset(a, 0, sizeof a);
  a[0] = (tpu_onnx_attr_t){.name = "s", .type = TPU_ONNX_ATTR_STRING,
                           .s = {(uint8_t *)"abc", 3}};
  a[1] = (tpu_onnx_attr_t){.name = "t", .type = TPU_ONNX_ATTR_TENSOR, .t = &t};
  a[2] = (tpu_onnx_attr_t){.name = "f", .type = TPU_ONNX_ATTR_FLOAT, .f = 0.5f};
  nodes[0].nattrs = 3;
  nodes[0].attrs = a;
  CU_ASSERT_EQUAL_FATAL(tpu_onnx_to_graph(&model, &g, err, sizeof err), TPU_OK);
  const tpu_graph_attr_t *ga = tpu_graph_attr(g, 0, "s");
  CU_ASSERT_TRUE(ga && ga->type == TPU_GRAPH_ATTR_STRING && strcmp(ga->s, "abc") == 0);
  ga = tpu_graph_attr(g, 0, "t");
  CU_ASSERT_TRUE(ga && ga->type == TPU_GRAPH_ATTR_TENSOR && ga->t_dtype == TPU_GRAPH_INT64 &&
                 ga->t_rank == 1 && ga->t_bytes == 16 &&
                 memcmp(ga->t_data, t_data, 16) == 0);
  ga = tpu_graph_attr(g, 0, "f");
  CU_ASSERT_TRUE(ga && ga->type == TPU_GRAPH_ATTR_FLOAT && ga->f == 0.5f);
  tpu_graph_free(g);
}

/* Expects a refusal with status `want` whose message contains `needle`. */
static void expect_refused(tpu_status_t want, const char *needle) {
  char err[512] = "";
  tpu_graph_t *g = (tpu_graph_t *)&model; /* must be reset to NULL */
  tpu_status_t st = tpu_onnx_to_graph(&model, &g, err, sizeof err);
  CU_ASSERT_EQUAL(st, want);
  CU_ASSERT_PTR_NULL(g);
  if (!strstr(err, needle)) fprintf(stderr, "\n  expected '%s' in: %s\n", needle, err);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void test_refusals(void) {
  char err[64];
  tpu_graph_t *g = NULL;
  model_reset();
  CU_ASSERT_EQUAL(tpu_onnx_to_graph(NULL, &g, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NULL(g);
  CU_ASSERT_EQUAL(tpu_onnx_to_graph(&model, NULL, err, sizeof err), TPU_EINVAL);

  ins[0].dtype = TPU_ONNX_UINT16;
  expect_refused(TPU_ENOTSUP, "graph input 'x': element type UINT16");
  model_reset();
  outs[0].dtype = TPU_ONNX_STRING;
  expect_refused(TPU_ENOTSUP, "graph output 'y': element type STRING");
  model_reset();
  inits[0].dtype = TPU_ONNX_UINT64; /* nbytes stays 24: the type is refused first */
  expect_refused(TPU_ENOTSUP, "initializer 'w': element type UINT64");
  model_reset();
  tpu_onnx_bytes_t strs[2] = {{(uint8_t *)"ab", 2}, {(uint8_t *)"c\0", 2}};
  attrs[0] = (tpu_onnx_attr_t){.name = "names", .type = TPU_ONNX_ATTR_STRINGS, .n = 2,
                               .strings = strs};
  nodes[0].nattrs = 1;
  nodes[0].attrs = attrs;
  expect_refused(TPU_ENOTSUP, "node 'mm' (MatMul): attribute 'names': string 1 holds a NUL");
  attrs[0] = (tpu_onnx_attr_t){.name = "t", .type = TPU_ONNX_ATTR_TENSORS};
  expect_refused(TPU_ENOTSUP, "node 'mm' (MatMul): attribute 't' is a list of tensors");
  strs[1].len = 1; /* "c": both strings are text, carried over */
  attrs[0] = (tpu_onnx_attr_t){.name = "names", .type = TPU_ONNX_ATTR_STRINGS, .n = 2,
                               .strings = strs};
  CU_ASSERT_EQUAL_FATAL(tpu_onnx_to_graph(&model, &g, err, sizeof err), TPU_OK);
  const tpu_graph_attr_t *ga = tpu_graph_attr(g, 0, "names");
  CU_ASSERT_FATAL(ga && ga->type == TPU_GRAPH_ATTR_STRINGS && ga->n == 2);
  CU_ASSERT_STRING_EQUAL(ga->strings[0], "ab");
  CU_ASSERT_STRING_EQUAL(ga->strings[1], "c");
  tpu_graph_free(g);
  g = NULL;
  attrs[0] = (tpu_onnx_attr_t){.name = "s", .type = TPU_ONNX_ATTR_STRING,
                               .s = {(uint8_t *)"a\0b", 3}};
  expect_refused(TPU_ENOTSUP, "attribute 's': string holds a NUL byte");
  model_reset();
  mm_in[1] = "v"; /* not defined anywhere: the graph's message is passed on */
  expect_refused(TPU_EINVAL, "input 'v' is not defined");
  mm_in[1] = "w";
  model_reset();
  inits[0].nbytes = 20; /* disagrees with [3,2] FP32 */
  expect_refused(TPU_ESHAPE, "initializer 'w'");
  model_reset();
  nodes[0].opset = (int64_t)1 << 40;
  expect_refused(TPU_EINVAL, "node 'mm' (MatMul): opset");
  model_reset();
  outs[0].dims = (int64_t[2]){-1, 3}; /* stated [N,3]; MatMul gives [N,2] */
  char e2[512];
  CU_ASSERT_EQUAL_FATAL(tpu_onnx_to_graph(&model, &g, e2, sizeof e2), TPU_OK);
  CU_ASSERT_EQUAL(tpu_graph_infer(g, 4), TPU_ESHAPE);
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "node 'mm'"));
  CU_ASSERT_PTR_NOT_NULL(strstr(tpu_graph_error(g), "output 'y' is inferred as FP32 [4,2]"));
  tpu_graph_free(g);
}

TPU_TEST_SUITE(onnx_graph,
               {"node_suite", test_node_suite},
               {"named", test_named},
               {"initializer_input", test_initializer_input},
               {"attrs", test_attrs},
               {"refusals", test_refusals});
