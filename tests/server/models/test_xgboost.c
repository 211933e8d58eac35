/*
 * test_xgboost.c - the XGBoost JSON loader (server/models/xgboost.c), from bytes: the committed
 * fixtures (tests/data/xgboost, written by models/export_xgboost_examples.py) give the library's
 * predictions; each malformed variant is a fixture edited with jansson and must be refused with
 * a message naming the tree and node. Also model.json's "format": "xgboost".
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_config.h"
#include "safetensors.h"
#include "stats.h"
#include "tpu_test.h"
#include "validate.h"
#include "xgboost.h"

#define DATA TPU_SOURCE_DIR "/tests/data/xgboost/"

static json_t *fixture(const char *model) {
  char path[512];
  json_error_t e;
  snprintf(path, sizeof path, DATA "%s/1/xgboost.json", model);
  json_t *j = json_load_file(path, 0, &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  return j;
}

/* Converts j (stolen) and returns the status; the message in err. */
static tpu_status_t convert(json_t *j, tpu_graph_t **g, char *err, size_t errlen) {
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  tpu_status_t st = tpu_xgboost_to_graph(s, strlen(s), NULL, g, err, errlen);
  free(s);
  return st;
}

static json_t *tree(json_t *j, size_t t) {
  json_t *tr = json_object_get(
      json_object_get(json_object_get(json_object_get(j, "learner"), "gradient_booster"),
                      "model"),
      "trees");
  return json_array_get(tr, t);
}

static void set_elem(json_t *j, size_t t, const char *arr, size_t i, json_t *v) {
  CU_ASSERT_FATAL(json_array_set_new(json_object_get(tree(j, t), arr), i, v) == 0);
}

/* Runs `rows` reference rows of a fixture through a graph compiled at that batch size and
 * compares every output with the library's (exactly for margins and labels, 1e-6 otherwise). */
static void check_fixture_file(const char *model, const char *file, size_t rows) {
  char path[512], err[512];
  tpu_graph_t *g = NULL;
  CU_ASSERT_EQUAL_FATAL(convert(fixture(model), &g, err, sizeof err), TPU_OK);
  tpu_engine_t *eng = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &eng) == TPU_OK);
  tpu_graph_program_t *p = NULL;
  CU_ASSERT_FATAL(tpu_graph_compile(g, eng, (int64_t)rows, NULL, &p) == TPU_OK);
  snprintf(path, sizeof path, DATA "%s/1/%s.safetensors", model, file);
  int explain = strcmp(file, "explain") == 0; /* also the on-request outputs */
  tpu_safetensors_t *st = NULL;
  CU_ASSERT_FATAL(tpu_safetensors_open(path, &st, err, sizeof err) == TPU_OK);
  const tpu_st_tensor_t *x = tpu_safetensors_find(st, "input.input");
  CU_ASSERT_PTR_NOT_NULL_FATAL(x);
  size_t nout = tpu_graph_program_output_count(p);
  void *outs[6] = {0};
  CU_ASSERT_FATAL(nout <= 6);
  CU_ASSERT_FATAL(x->shape[0] >= rows);
  float *in = malloc(x->nbytes);
  memcpy(in, x->data, x->nbytes);
  for (size_t o = 0; o < nout; o++) {
    tpu_graph_io_t io;
    tpu_graph_program_output(p, o, &io);
    if (explain || !tpu_graph_program_output_on_request(p, o)) outs[o] = malloc(io.bytes);
  }
  const void *ins[1] = {in};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, ins, outs) == TPU_OK);
  for (size_t o = 0; o < nout; o++) {
    if (!outs[o]) continue; /* on request, not asked for */
    tpu_graph_io_t io;
    tpu_graph_program_output(p, o, &io);
    char key[64];
    snprintf(key, sizeof key, "output.%s", io.name);
    const tpu_st_tensor_t *w = tpu_safetensors_find(st, key);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_FATAL(w->nbytes >= io.bytes);
    double worst = 0;
    for (size_t i = 0; i < io.elems; i++) {
      double got, want;
      if (io.dtype == TPU_GRAPH_INT64) {
        int64_t a, b;
        memcpy(&a, (char *)outs[o] + 8 * i, 8);
        memcpy(&b, (const char *)w->data + 8 * i, 8);
        got = (double)a, want = (double)b;
      } else {
        float a, b;
        memcpy(&a, (char *)outs[o] + 4 * i, 4);
        memcpy(&b, (const char *)w->data + 4 * i, 4);
        got = a, want = b;
      }
      worst = fmax(worst, fabs(got - want));
    }
    /* margins, values, labels, leaf ids: bit for bit; probabilities within 1e-6 of the
     * library's; contributions (TreeSHAP in float32, sums in another order than the margin's)
     * within 1e-5 */
    int contrib = strcmp(io.name, "contributions") == 0;
    int exact = strcmp(io.name, "probabilities") != 0 && !contrib;
    double tol = contrib ? 1e-5 : 1e-6;
    if (exact ? worst != 0 : worst > tol)
      fprintf(stderr, "\n%s output '%s': worst difference %g\n", model, io.name, worst);
    CU_ASSERT(exact ? worst == 0 : worst <= tol);
    if (explain && contrib) fprintf(stderr, "[%s contributions: worst %.3g] ", model, worst);
    free(outs[o]);
  }
  free(in);
  tpu_safetensors_close(st);
  tpu_graph_program_free(p);
  tpu_engine_free(eng);
  tpu_graph_free(g);
}

static void check_fixture(const char *model, size_t rows) {
  check_fixture_file(model, "reference", rows);
}

/* The on-request outputs against XGBoost's own pred_leaf and pred_contribs (explain.safetensors,
 * the reference rows without ±Inf, which a DMatrix refuses), at two batch sizes. */
static void test_leaves_and_contributions_match_library(void) {
  static const char *const models[] = {"fraud_d6", "multi_d3", "forest_d3", "reg_d6"};
  for (size_t i = 0; i < 4; i++) {
    check_fixture_file(models[i], "explain", 64);
    check_fixture_file(models[i], "explain", 1);
  }
}

static void test_fixtures_match_library(void) {
  check_fixture("fraud_d6", 1000);
  check_fixture("multi_d3", 1000);
  check_fixture("forest_d3", 1000);
  check_fixture("reg_d6", 1000);
  check_fixture("fraud_d6", 1); /* the first row alone gives the same bits */
}

/* XGBoost 1.7's sigmoid clamps the exponent at 88.7 (common::Sigmoid: 1 / (expf(min(-x, 88.7))
 * + 1)), so a margin below -88.7 gives 3.006636e-39, not 0 or a smaller denormal. Each tree a
 * single leaf of the margin, base_score 0.5 (margin 0); the bits are python3-xgboost 1.7.4's. */
static void test_logistic_saturates_as_library(void) {
  static const struct {
    const char *leaf;
    uint32_t want;
  } cases[] = {{"-100.0", 0x0020bd47}, {"-88.72", 0x0020bd47}, {"-88.71", 0x0020bd47},
               {"-88.7", 0x0020bd47},  {"-88.0", 0x0041edc4},  {"-20.0", 0x310da433},
               {"0.0", 0x3f000000},    {"20.0", 0x3f800000}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char js[1024], err[512];
    snprintf(js, sizeof js,
             "{\"learner\": {\"gradient_booster\": {\"name\": \"gbtree\", \"model\": "
             "{\"tree_info\": [0], \"trees\": [{\"left_children\": [-1], \"right_children\": "
             "[-1], \"split_indices\": [0], \"split_conditions\": [%s], \"default_left\": "
             "[0]}]}}, \"learner_model_param\": {\"base_score\": \"5E-1\", \"num_class\": \"0\", "
             "\"num_feature\": \"1\"}, \"objective\": {\"name\": \"binary:logistic\"}}}",
             cases[c].leaf);
    tpu_graph_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(tpu_xgboost_to_graph(js, strlen(js), NULL, &g, err, sizeof err),
                          TPU_OK);
    tpu_engine_t *eng = NULL;
    CU_ASSERT_FATAL(tpu_engine_create(NULL, &eng) == TPU_OK);
    tpu_graph_program_t *p = NULL;
    CU_ASSERT_FATAL(tpu_graph_compile(g, eng, 1, NULL, &p) == TPU_OK);
    float x = 0, prob = -1, margin = -1;
    const void *ins[1] = {&x};
    void *outs[4] = {&prob, &margin, NULL, NULL}; /* leaves, contributions: not asked */
    CU_ASSERT_FATAL(tpu_graph_program_run(p, ins, outs) == TPU_OK);
    uint32_t bits;
    memcpy(&bits, &prob, sizeof bits);
    if (bits != cases[c].want)
      fprintf(stderr, "\nleaf %s: probability %a (0x%08x), the library gives 0x%08x\n",
              cases[c].leaf, prob, (unsigned)bits, (unsigned)cases[c].want);
    CU_ASSERT_EQUAL(bits, cases[c].want);
    tpu_graph_program_free(p);
    tpu_engine_free(eng);
    tpu_graph_free(g);
  }
}

static void test_graph_shape(void) {
  char err[512];
  tpu_graph_t *g = NULL;
  json_t *j = fixture("forest_d3");
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  CU_ASSERT_EQUAL_FATAL(tpu_xgboost_to_graph(s, strlen(s), "features", &g, err, sizeof err),
                        TPU_OK);
  free(s);
  j = fixture("multi_d3"); /* base_score as XGBoost 2 writes it: a one-element list */
  json_object_set_new(json_object_get(json_object_get(j, "learner"), "learner_model_param"),
                      "base_score", json_string("[5E-1]"));
  tpu_graph_t *g2 = NULL;
  CU_ASSERT_EQUAL(convert(j, &g2, err, sizeof err), TPU_OK);
  tpu_graph_free(g2);
  CU_ASSERT_EQUAL(tpu_graph_input_count(g), 1);
  CU_ASSERT_EQUAL(tpu_graph_output_count(g), 5); /* and leaf_index, contributions on request */
  tpu_graph_tensor_info_t ti;
  tpu_graph_tensor(g, (size_t)tpu_graph_input(g, 0), &ti);
  CU_ASSERT_STRING_EQUAL(ti.name, "features");
  CU_ASSERT_EQUAL(ti.rank, 2);
  CU_ASSERT_EQUAL(ti.dims[0], -1);
  CU_ASSERT_EQUAL(ti.dims[1], 6);
  const char *want[] = {"probabilities", "margin", "label", "leaf_index", "contributions"};
  for (size_t o = 0; o < 5; o++) {
    tpu_graph_tensor(g, (size_t)tpu_graph_output(g, o), &ti);
    CU_ASSERT_STRING_EQUAL(ti.name, want[o]);
  }
  tpu_graph_free(g);
}

/* A tree deeper than TreeSHAP's bound (256 levels) still loads and predicts: the model simply
 * has no contributions output (leaf indices stay). The chain splits feature 0 at 0, 1, ...,
 * 299 (x < i goes left to a leaf worth i), so x = 299.5 walks all 300 levels. */
static void test_deep_tree_drops_contributions(void) {
  json_t *j = fixture("fraud_d6");
  json_t *t = tree(j, 0);
  const char *arrs[] = {"left_children", "right_children", "split_indices", "split_conditions",
                        "default_left", "sum_hessian"};
  json_t *a[6];
  for (int k = 0; k < 6; k++) {
    a[k] = json_array();
    json_object_set_new(t, arrs[k], a[k]);
  }
  json_object_del(t, "split_type");
  for (int i = 0; i <= 600; i++) {
    int branch = i % 2 == 0 && i < 600;
    json_array_append_new(a[0], json_integer(branch ? i + 1 : -1));
    json_array_append_new(a[1], json_integer(branch ? i + 2 : -1));
    json_array_append_new(a[2], json_integer(0));
    json_array_append_new(a[3], json_real(branch ? i / 2 : i / 2 + (i == 600)));
    json_array_append_new(a[4], json_integer(0));
    json_array_append_new(a[5], json_real(601 - i));
  }
  json_object_set_new(json_object_get(t, "tree_param"), "num_nodes", json_string("601"));
  char err[512] = "";
  tpu_graph_t *g = NULL;
  CU_ASSERT_EQUAL_FATAL(convert(j, &g, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(tpu_graph_output_count(g), 3); /* probabilities, margin, leaf_index */
  tpu_graph_tensor_info_t ti;
  for (size_t o = 0; o < tpu_graph_output_count(g); o++) {
    tpu_graph_tensor(g, (size_t)tpu_graph_output(g, o), &ti);
    CU_ASSERT_STRING_NOT_EQUAL(ti.name, "contributions");
  }
  tpu_engine_t *eng = NULL;
  CU_ASSERT_FATAL(tpu_engine_create(NULL, &eng) == TPU_OK);
  tpu_graph_program_t *p = NULL;
  CU_ASSERT_FATAL(tpu_graph_compile(g, eng, 2, NULL, &p) == TPU_OK);
  tpu_graph_tensor(g, (size_t)tpu_graph_input(g, 0), &ti);
  size_t w = (size_t)ti.dims[1];
  tpu_graph_tensor(g, (size_t)tpu_graph_output(g, 2), &ti);
  size_t nt = (size_t)ti.dims[1];
  float *x = calloc(2 * w, sizeof *x), prob[2], margin[2], *leaf = calloc(2 * nt, sizeof *leaf);
  CU_ASSERT_PTR_NOT_NULL_FATAL(x);
  CU_ASSERT_PTR_NOT_NULL_FATAL(leaf);
  x[0] = 299.5f; /* the deepest leaf: node 600 */
  x[w] = -1.0f;  /* the first: node 1 */
  const void *ins[1] = {x};
  void *outs[3] = {prob, margin, leaf};
  CU_ASSERT_FATAL(tpu_graph_program_run(p, ins, outs) == TPU_OK);
  CU_ASSERT_EQUAL(leaf[0], 600.0f);
  CU_ASSERT_EQUAL(leaf[nt], 1.0f);
  CU_ASSERT(margin[0] - margin[1] > 290.0f); /* leaf 300 against leaf 0, the rest alike */
  free(x);
  free(leaf);
  tpu_graph_program_free(p);
  tpu_engine_free(eng);
  tpu_graph_free(g);
}

/* Converting j must fail with st and a message containing want. */
static void refused(json_t *j, tpu_status_t st, const char *want) {
  char err[512] = "";
  tpu_graph_t *g = NULL;
  tpu_status_t got = convert(j, &g, err, sizeof err);
  CU_ASSERT_EQUAL(got, st);
  CU_ASSERT_PTR_NULL(g);
  if (!strstr(err, want)) fprintf(stderr, "\nexpected '%s' in: %s\n", want, err);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
}

static void test_malformed(void) {
  char err[512];
  tpu_graph_t *g = NULL;
  const char broken[] = "{\"learner\": {\"gradient_booster\": [1, 2";
  CU_ASSERT_EQUAL(tpu_xgboost_to_graph(broken, sizeof broken - 1, NULL, &g, err, sizeof err),
                  TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "not valid JSON"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "line 1"));
  CU_ASSERT_EQUAL(tpu_xgboost_to_graph("[]", 2, NULL, &g, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "no 'learner' object"));

  json_t *j = fixture("fraud_d6");
  set_elem(j, 2, "left_children", 1, json_integer(999));
  refused(j, TPU_EINVAL, "tree 2 node 1: left child 999 is out of range");

  j = fixture("fraud_d6");
  set_elem(j, 1, "right_children", 1, json_integer(0)); /* back to the root */
  refused(j, TPU_EINVAL, "tree 1 node 1: right child 0 is reached twice (a cycle");

  j = fixture("fraud_d6");
  set_elem(j, 1, "right_children", 1, json_integer(1)); /* to itself */
  refused(j, TPU_EINVAL, "tree 1 node 1: right child 1 is reached twice");

  j = fixture("fraud_d6"); /* a tree with no nodes: no leaf */
  const char *arrs[] = {"left_children", "right_children", "split_indices", "split_conditions",
                        "default_left"};
  for (int k = 0; k < 5; k++) json_array_clear(json_object_get(tree(j, 4), arrs[k]));
  refused(j, TPU_EINVAL, "tree 4: has no nodes, so no leaf");

  j = fixture("fraud_d6"); /* every node a split, children pointing on and on: no leaf */
  {
    json_t *t = tree(j, 0);
    size_t n = json_array_size(json_object_get(t, "left_children"));
    for (size_t i = 0; i < n; i++) {
      set_elem(j, 0, "left_children", i, json_integer((json_int_t)((2 * i + 1) % n)));
      set_elem(j, 0, "right_children", i, json_integer((json_int_t)((2 * i + 2) % n)));
    }
  }
  refused(j, TPU_EINVAL, "tree 0 node");

  j = fixture("fraud_d6"); /* a value no float32 holds: not from XGBoost */
  set_elem(j, 2, "split_conditions", 0, json_real(1e300));
  refused(j, TPU_EINVAL, "tree 2 node 0: children, split index and default_left must be "
          "integers and split_condition a finite float32 number");

  j = fixture("fraud_d6"); /* a leaf likewise */
  {
    json_t *lc = json_object_get(tree(j, 0), "left_children");
    size_t leafn = 0;
    while (json_integer_value(json_array_get(lc, leafn)) != -1) leafn++;
    set_elem(j, 0, "split_conditions", leafn, json_real(-1e39));
    char want[96];
    snprintf(want, sizeof want, "tree 0 node %zu: leaf value is not a finite float32", leafn);
    refused(j, TPU_EINVAL, want);
  }

  j = fixture("fraud_d6"); /* a boolean where XGBoost writes an integer (it refuses that) */
  set_elem(j, 2, "left_children", 0, json_true());
  refused(j, TPU_EINVAL, "tree 2 node 0");

  j = fixture("fraud_d6");
  set_elem(j, 3, "split_indices", 0, json_integer(12));
  refused(j, TPU_EINVAL, "tree 3 node 0: splits on feature 12, beyond the model's 12 input "
          "features");

  j = fixture("fraud_d6"); /* a leaf with one child */
  {
    json_t *lc = json_object_get(tree(j, 0), "left_children");
    size_t leafn = 0;
    while (json_integer_value(json_array_get(lc, leafn)) != -1) leafn++;
    set_elem(j, 0, "right_children", leafn, json_integer(1));
    char want[80];
    snprintf(want, sizeof want, "tree 0 node %zu: one child is -1", leafn);
    refused(j, TPU_EINVAL, want);
  }

  j = fixture("fraud_d6");
  json_object_del(tree(j, 5), "split_conditions");
  refused(j, TPU_EINVAL, "tree 5: 'split_conditions' is missing or not an array");

  j = fixture("fraud_d6");
  json_array_append_new(json_object_get(tree(j, 5), "default_left"), json_integer(0));
  refused(j, TPU_EINVAL, "tree 5: 'default_left' has");

  j = fixture("fraud_d6");
  set_elem(j, 6, "split_type", 0, json_integer(1));
  refused(j, TPU_ENOTSUP, "tree 6 node 0: a categorical split");

  j = fixture("fraud_d6");
  json_t *lrn = json_object_get(j, "learner");
  json_object_set_new(json_object_get(lrn, "objective"), "name", json_string("count:poisson"));
  refused(j, TPU_ENOTSUP, "objective 'count:poisson' is not supported");

  j = fixture("fraud_d6");
  lrn = json_object_get(j, "learner");
  json_object_set_new(json_object_get(lrn, "gradient_booster"), "name", json_string("dart"));
  refused(j, TPU_ENOTSUP, "booster 'dart' is not supported");

  j = fixture("multi_d3");
  lrn = json_object_get(j, "learner");
  json_t *info = json_object_get(
      json_object_get(json_object_get(lrn, "gradient_booster"), "model"), "tree_info");
  json_array_set_new(info, 4, json_integer(3));
  refused(j, TPU_EINVAL, "tree 4: tree_info gives it output group out of range, expected 0 to 2");

  j = fixture("multi_d3");
  lrn = json_object_get(j, "learner");
  json_array_remove(json_object_get(
                        json_object_get(json_object_get(lrn, "gradient_booster"), "model"),
                        "tree_info"), 0);
  refused(j, TPU_EINVAL, "tree_info has 17 entries for 18 trees");

  j = fixture("fraud_d6");
  lrn = json_object_get(j, "learner");
  json_object_set_new(json_object_get(lrn, "learner_model_param"), "base_score",
                      json_string("1.5"));
  refused(j, TPU_EINVAL, "base_score 1.5: objective 'binary:logistic' needs a probability");
}

static void test_config_format(void) {
  char err[512];
  tpu_model_config_t *cfg = NULL;
  const char ok[] = "{\"format\": \"xgboost\", \"checkpoint\": {\"sha256\": \""
                    "0000000000000000000000000000000000000000000000000000000000000000\"}}";
  CU_ASSERT_EQUAL_FATAL(tpu_model_config_parse(ok, sizeof ok - 1, NULL, &cfg, err, sizeof err),
                        TPU_OK);
  CU_ASSERT_EQUAL(cfg->format, TPU_MODEL_FORMAT_XGBOOST);
  CU_ASSERT_STRING_EQUAL(cfg->checkpoint_file, "xgboost.json");
  CU_ASSERT_EQUAL(cfg->ninputs, 0);
  tpu_model_config_free(cfg);
  const char bf[] = "{\"format\": \"xgboost\", \"precision\": \"bf16\", \"checkpoint\": "
                    "{\"sha256\": \""
                    "0000000000000000000000000000000000000000000000000000000000000000\"}}";
  CU_ASSERT_EQUAL(tpu_model_config_parse(bf, sizeof bf - 1, NULL, &cfg, err, sizeof err),
                  TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "precision: format \"xgboost\" takes only \"fp32\""));
  const char lay[] = "{\"format\": \"xgboost\", \"layers\": [], \"checkpoint\": {\"sha256\": \""
                     "0000000000000000000000000000000000000000000000000000000000000000\"}}";
  CU_ASSERT_EQUAL(tpu_model_config_parse(lay, sizeof lay - 1, NULL, &cfg, err, sizeof err),
                  TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "layers: not used with format \"xgboost\""));
}

/* Requests to a tree model's input may hold NaN (a missing feature) and ±Inf; other inputs
 * still refuse them (dispatch/validate.c, spec.nonfinite_ok). */
static void test_validate_missing_values(void) {
  static const int64_t shape[2] = {-1, 3}, oshape[2] = {-1, 1};
  float x[6] = {1, NAN, 2, INFINITY, -INFINITY, 0};
  int64_t rs[2] = {2, 3};
  tpu_vinput_t in = {.name = "input", .datatype = "FP32", .shape = rs, .rank = 2, .has_raw = 1,
                     .raw = x, .raw_len = sizeof x};
  tpu_vrequest_t r = {&in, 1, 1, NULL, 0};
  tpu_vresult_t res;
  char msg[512] = "";
  for (int ok = 0; ok < 2; ok++) {
    tpu_tensor_spec_t is = {"input", "FP32", shape, 2, ok, 0}, os = {"margin", "FP32", oshape, 2, 0, 0};
    tpu_vmodel_t m = {"model 'trees' version 1", &is, 1, &os, 1};
    int code = tpu_validate_infer(&m, &r, &res, msg, sizeof msg);
    if (ok) {
      CU_ASSERT_EQUAL(code, TPU_CODE_OK);
      CU_ASSERT_EQUAL(res.rows, 2);
    } else {
      CU_ASSERT_EQUAL(code, TPU_CODE_INVALID_ARGUMENT);
      CU_ASSERT_PTR_NOT_NULL(strstr(msg, "element [0,1] is NaN"));
    }
  }
  in.has_raw = 0; /* typed contents alike */
  in.raw = NULL;
  in.raw_len = 0;
  in.fp32 = x;
  in.n_fp32 = 6;
  r.n_raw = 0;
  tpu_tensor_spec_t is = {"input", "FP32", shape, 2, 1, 0}, os = {"margin", "FP32", oshape, 2, 0, 0};
  tpu_vmodel_t m = {"model 'trees' version 1", &is, 1, &os, 1};
  CU_ASSERT_EQUAL(tpu_validate_infer(&m, &r, &res, msg, sizeof msg), TPU_CODE_OK);
}

TPU_TEST_SUITE(xgboost,
               {"validate_missing_values", test_validate_missing_values},
               {"fixtures_match_library", test_fixtures_match_library},
               {"leaves_and_contributions_match_library",
                test_leaves_and_contributions_match_library},
               {"logistic_saturates_as_library", test_logistic_saturates_as_library},
               {"graph_shape", test_graph_shape},
               {"deep_tree_drops_contributions", test_deep_tree_drops_contributions},
               {"malformed", test_malformed},
               {"config_format", test_config_format})
