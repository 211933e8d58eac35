/*
 * test_model_config.c - model.json: the contract's example, the documented defaults, and one
 * test per kind of error, each checked for the field path and what was expected.
 */
#define _GNU_SOURCE /* nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_config.h"
#include "tpu_test.h"

#define SHA "7e7d09857fea255e21f7dc7b162a965ce5b84de5456871f6380b60741f7986fe"

/* The pieces of a valid config; tests replace one piece at a time. */
#define INPUTS "\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, 64]}]"
#define OUTPUTS "\"outputs\": [{\"name\": \"probs\", \"datatype\": \"FP32\", \"shape\": [-1, 10]}]"
#define LAYERS                                                                                \
  "\"layers\": [{\"op\": \"dense\", \"weight\": \"fc1.weight\", \"bias\": \"fc1.bias\", "      \
  "\"activation\": \"relu\"}, {\"op\": \"dense\", \"weight\": \"fc2.weight\", \"bias\": "     \
  "\"fc2.bias\", \"activation\": \"softmax\"}]"
#define PRECISION "\"precision\": \"fp32\""
#define BATCHING                                                                              \
  "\"batching\": {\"max_batch_size\": 64, \"buckets\": [1, 8, 32, 64], "                      \
  "\"max_queue_delay_us\": 500}"
#define CHECKPOINT "\"checkpoint\": {\"file\": \"model.safetensors\", \"sha256\": \"" SHA "\"}"

static tpu_model_config_t *parse_ok(const char *json) {
  char err[512] = "";
  tpu_model_config_t *cfg = NULL;
  tpu_status_t rc = tpu_model_config_parse(json, strlen(json), "model.json", &cfg, err, sizeof err);
  if (rc != TPU_OK) fprintf(stderr, "\n  unexpected error: %s\n", err);
  CU_ASSERT_EQUAL(rc, TPU_OK);
  return cfg;
}

/* Expects `json` to be refused with a message that contains `want`. */
static void expect_err(const char *json, const char *want) {
  char err[512] = "";
  tpu_model_config_t *cfg = (tpu_model_config_t *)1;
  tpu_status_t rc = tpu_model_config_parse(json, strlen(json), "model.json", &cfg, err, sizeof err);
  CU_ASSERT_EQUAL(rc, TPU_EINVAL);
  CU_ASSERT_PTR_NULL(cfg);
  CU_ASSERT_EQUAL(strncmp(err, "model.json: ", 12), 0);
  if (!strstr(err, want)) {
    fprintf(stderr, "\n  expected \"%s\" in \"%s\"\n", want, err);
    CU_FAIL("message lacks the expected text");
  }
}

/* A config assembled from the standard pieces, each of which may be overridden (NULL: default
 * piece; "": left out). */
static void build(char *out, size_t outlen, const char *inputs, const char *outputs,
                  const char *layers, const char *precision, const char *batching,
                  const char *checkpoint) {
  const char *parts[] = {inputs ? inputs : INPUTS,       outputs ? outputs : OUTPUTS,
                         layers ? layers : LAYERS,       precision ? precision : PRECISION,
                         batching ? batching : BATCHING, checkpoint ? checkpoint : CHECKPOINT};
  size_t o = (size_t)snprintf(out, outlen, "{");
  int first = 1;
  for (int i = 0; i < 6; i++) {
    if (!*parts[i]) continue;
    o += (size_t)snprintf(out + o, outlen - o, "%s%s", first ? "" : ", ", parts[i]);
    first = 0;
  }
  snprintf(out + o, outlen - o, "}");
}

static char buf[8192];
#define CFG(...) (build(buf, sizeof buf, __VA_ARGS__), buf)

/* ---- valid configs ---- */

static void test_contract_example(void) {
  tpu_model_config_t *cfg = parse_ok(CFG(NULL, NULL, NULL, NULL, NULL, NULL));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
  CU_ASSERT_STRING_EQUAL(cfg->input_name, "x");
  CU_ASSERT_EQUAL(cfg->input_width, 64);
  CU_ASSERT_STRING_EQUAL(cfg->output_name, "probs");
  CU_ASSERT_EQUAL(cfg->output_width, 10);
  CU_ASSERT_EQUAL(cfg->nlayers, 2);
  CU_ASSERT_STRING_EQUAL(cfg->layers[0].weight, "fc1.weight");
  CU_ASSERT_STRING_EQUAL(cfg->layers[0].bias, "fc1.bias");
  CU_ASSERT_EQUAL(cfg->layers[0].act, TPU_ACT_RELU);
  CU_ASSERT_EQUAL(cfg->layers[1].act, TPU_ACT_SOFTMAX);
  CU_ASSERT_EQUAL(cfg->precision, TPU_DTYPE_FP32);
  CU_ASSERT_EQUAL(cfg->max_batch_size, 64);
  CU_ASSERT_EQUAL(cfg->nbuckets, 4);
  CU_ASSERT_EQUAL(cfg->buckets[0], 1);
  CU_ASSERT_EQUAL(cfg->buckets[1], 8);
  CU_ASSERT_EQUAL(cfg->buckets[3], 64);
  CU_ASSERT_EQUAL(cfg->max_queue_delay_us, 500);
  CU_ASSERT_STRING_EQUAL(cfg->checkpoint_file, "model.safetensors");
  CU_ASSERT_STRING_EQUAL(cfg->sha256, SHA);
  tpu_model_config_free(cfg);
  tpu_model_config_free(NULL);
}

static void test_defaults(void) {
  tpu_model_config_t *cfg = parse_ok(
      CFG(NULL, NULL, "\"layers\": [{\"weight\": \"w\"}]", "", "", "\"checkpoint\": {\"sha256\": \"" SHA "\"}"));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
  CU_ASSERT_PTR_NULL(cfg->layers[0].bias);
  CU_ASSERT_EQUAL(cfg->layers[0].act, TPU_ACT_NONE);
  CU_ASSERT_EQUAL(cfg->precision, TPU_DTYPE_FP32);
  CU_ASSERT_EQUAL(cfg->max_batch_size, 64);
  size_t want[] = {1, 2, 4, 8, 16, 32, 64};
  CU_ASSERT_EQUAL_FATAL(cfg->nbuckets, 7);
  for (size_t i = 0; i < 7; i++) CU_ASSERT_EQUAL(cfg->buckets[i], want[i]);
  CU_ASSERT_EQUAL(cfg->max_queue_delay_us, 500);
  CU_ASSERT_STRING_EQUAL(cfg->checkpoint_file, "model.safetensors");
  tpu_model_config_free(cfg);

  /* max_batch_size alone: powers of two below it, then it. */
  cfg = parse_ok(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 48}", NULL));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
  size_t want48[] = {1, 2, 4, 8, 16, 32, 48};
  CU_ASSERT_EQUAL_FATAL(cfg->nbuckets, 7);
  for (size_t i = 0; i < 7; i++) CU_ASSERT_EQUAL(cfg->buckets[i], want48[i]);
  tpu_model_config_free(cfg);

  cfg = parse_ok(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 1}", NULL));
  CU_ASSERT_EQUAL(cfg->nbuckets, 1);
  CU_ASSERT_EQUAL(cfg->buckets[0], 1);
  tpu_model_config_free(cfg);

  cfg = parse_ok(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 4096}", NULL));
  CU_ASSERT_EQUAL(cfg->nbuckets, 13);
  CU_ASSERT_EQUAL(cfg->buckets[12], 4096);
  tpu_model_config_free(cfg);

  /* buckets alone: max_batch_size is the last one. */
  cfg = parse_ok(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"buckets\": [2, 16], \"max_queue_delay_us\": 0}", NULL));
  CU_ASSERT_EQUAL(cfg->max_batch_size, 16);
  CU_ASSERT_EQUAL(cfg->nbuckets, 2);
  CU_ASSERT_EQUAL(cfg->max_queue_delay_us, 0);
  tpu_model_config_free(cfg);
}

static void test_variants(void) {
  /* Upper-case digests are normalized; bias null means none; other precisions and names. */
  char upper[65];
  for (int i = 0; i < 65; i++) upper[i] = (char)(SHA[i] >= 'a' ? SHA[i] - 32 : SHA[i]);
  char ck[200];
  snprintf(ck, sizeof ck, "\"checkpoint\": {\"file\": \"w-1.safetensors\", \"sha256\": \"%s\"}", upper);
  tpu_model_config_t *cfg = parse_ok(CFG(NULL, NULL,
                                         "\"layers\": [{\"weight\": \"w\", \"bias\": null, "
                                         "\"activation\": \"gelu\"}]",
                                         "\"precision\": \"int8\"", NULL, ck));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
  CU_ASSERT_STRING_EQUAL(cfg->sha256, SHA);
  CU_ASSERT_STRING_EQUAL(cfg->checkpoint_file, "w-1.safetensors");
  CU_ASSERT_PTR_NULL(cfg->layers[0].bias);
  CU_ASSERT_EQUAL(cfg->layers[0].act, TPU_ACT_GELU);
  CU_ASSERT_EQUAL(cfg->precision, TPU_DTYPE_INT8);
  tpu_model_config_free(cfg);
  cfg = parse_ok(CFG(NULL, NULL, NULL, "\"precision\": \"bf16\"", NULL, NULL));
  CU_ASSERT_EQUAL(cfg->precision, TPU_DTYPE_BF16);
  tpu_model_config_free(cfg);
  CU_ASSERT_STRING_EQUAL(tpu_model_precision_name(TPU_DTYPE_BF16), "bf16");
  CU_ASSERT_PTR_NULL(tpu_model_precision_name(TPU_DTYPE_INT32));
}

/* ---- errors ---- */

static void test_not_json(void) {
  expect_err("{\"inputs\": ", "not valid JSON");
  expect_err("", "not valid JSON");
  expect_err("{\"a\xff\": 1}", "not valid JSON");
  expect_err("[1]", "expected a JSON object at the top level, got an array");
  expect_err("{\"precision\": \"fp32\", \"precision\": \"bf16\"}", "duplicate object key");
}


/* calibration: int8 only, a plain file with its digest, smoothing in [0, 1], static a bool. */
static void test_calibration(void) {
  static const char *const H = "\"sha256\": \"" /* 64 hex digits */
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"";
  char p[512];
  snprintf(p, sizeof p, "\"precision\": \"int8\", \"calibration\": {\"file\": \"c.st\", %s, "
           "\"smoothing\": 0.7, \"static\": true}", H);
  tpu_model_config_t *cfg = parse_ok(CFG(NULL, NULL, NULL, p, NULL, NULL));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
  CU_ASSERT(cfg->calibration.present);
  CU_ASSERT_STRING_EQUAL(cfg->calibration.file, "c.st");
  CU_ASSERT_DOUBLE_EQUAL(cfg->calibration.smoothing, 0.7, 1e-12);
  CU_ASSERT(cfg->calibration.static_scales);
  tpu_model_config_free(cfg);
  snprintf(p, sizeof p, "\"precision\": \"fp32\", \"calibration\": {\"file\": \"c.st\", %s}", H);
  expect_err(CFG(NULL, NULL, NULL, p, NULL, NULL),
             "calibration: only used with precision \"int8\"");
  snprintf(p, sizeof p, "\"precision\": \"int8\", \"calibration\": {\"file\": \"../c\", %s}", H);
  expect_err(CFG(NULL, NULL, NULL, p, NULL, NULL), "calibration.file: expected a plain file name");
  snprintf(p, sizeof p, "\"precision\": \"int8\", \"calibration\": {\"file\": \"c\", %s, "
           "\"smoothing\": 2}", H);
  expect_err(CFG(NULL, NULL, NULL, p, NULL, NULL), "calibration.smoothing: expected a number");
  expect_err(CFG(NULL, NULL, NULL, "\"precision\": \"int8\", \"calibration\": {\"file\": \"c\"}",
                 NULL, NULL),
             "calibration.sha256: required field is missing");
}

/* labels: output name -> {file, sha256}; checked against the model at load (model.c). */
static void test_labels(void) {
  static const char *const H = "\"sha256\": \"" /* 64 hex digits */
                               "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"";
  char p[512];
  snprintf(p, sizeof p, "\"labels\": {\"probs\": {\"file\": \"l.txt\", %s}, "
           "\"y\": {\"file\": \"y.txt\", %s}}", H, H);
  tpu_model_config_t *cfg = parse_ok(CFG(NULL, NULL, NULL, p, NULL, NULL));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
  CU_ASSERT_EQUAL(cfg->nlabels, 2);
  CU_ASSERT_STRING_EQUAL(cfg->labels[0].output, "probs");
  CU_ASSERT_STRING_EQUAL(cfg->labels[0].file, "l.txt");
  CU_ASSERT_STRING_EQUAL(cfg->labels[1].file, "y.txt");
  CU_ASSERT_EQUAL(cfg->labels[1].sha256[0], 'a'); /* normalized to lower case */
  tpu_model_config_free(cfg);
  expect_err(CFG(NULL, NULL, NULL, "\"labels\": [\"a\"]", NULL, NULL),
             "labels: expected an object of output name -> {\"file\", \"sha256\"}, got an array");
  expect_err(CFG(NULL, NULL, NULL, "\"labels\": {\"probs\": \"l.txt\"}", NULL, NULL),
             "labels.probs: expected an object with file and sha256");
  snprintf(p, sizeof p, "\"labels\": {\"probs\": {\"file\": \"../l.txt\", %s}}", H);
  expect_err(CFG(NULL, NULL, NULL, p, NULL, NULL), "labels.probs.file: expected a plain file name");
  expect_err(CFG(NULL, NULL, NULL, "\"labels\": {\"probs\": {\"file\": \"l.txt\"}}", NULL, NULL),
             "labels.probs.sha256: required field is missing");
  snprintf(p, sizeof p, "\"labels\": {\"probs\": {\"file\": \"l\", %s, \"lines\": 3}}", H);
  expect_err(CFG(NULL, NULL, NULL, p, NULL, NULL), "labels.probs: unknown field \"lines\"");
  expect_err(CFG(NULL, NULL, NULL, "\"labels\": {\"\": {}}", NULL, NULL),
             "labels: an output name: expected a string of 1 to 128 bytes");
}

static void test_unknown_field(void) {
  expect_err(CFG(NULL, NULL, NULL, "\"precison\": \"int8\"", NULL, NULL),
             "model.json: unknown field \"precison\" (expected format, inputs, outputs, layers, "
             "precision, precision_overrides, batching, checkpoint, reference, calibration, labels, "
             "payload_capture)");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, 4], "
                 "\"dims\": 1}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0]: unknown field \"dims\"");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"weight\": \"w\", \"activaton\": \"relu\"}]", NULL, NULL, NULL),
             "layers[0]: unknown field \"activaton\"");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch\": 8}", NULL),
             "batching: unknown field \"max_batch\"");
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, "\"checkpoint\": {\"sha\": \"" SHA "\"}"),
             "checkpoint: unknown field \"sha\"");
}

static void test_inputs(void) {
  expect_err(CFG("", NULL, NULL, NULL, NULL, NULL), "inputs: required field is missing");
  expect_err(CFG("\"inputs\": []", NULL, NULL, NULL, NULL, NULL),
             "inputs: expected an array of exactly one tensor, got an empty array");
  expect_err(CFG("\"inputs\": [{\"name\": \"a\", \"datatype\": \"FP32\", \"shape\": [-1, 4]}, "
                 "{\"name\": \"b\", \"datatype\": \"FP32\", \"shape\": [-1, 4]}]",
                 NULL, NULL, NULL, NULL, NULL),
             "inputs: expected an array of exactly one tensor, got more than one");
  expect_err(CFG("\"inputs\": {}", NULL, NULL, NULL, NULL, NULL),
             "inputs: expected an array of exactly one tensor, got an object");
  expect_err(CFG("\"inputs\": [7]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0]: expected an object with name, datatype and shape, got 7");
  expect_err(CFG("\"inputs\": [{\"datatype\": \"FP32\", \"shape\": [-1, 4]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].name: required field is missing");
  expect_err(CFG("\"inputs\": [{\"name\": \"\", \"datatype\": \"FP32\", \"shape\": [-1, 4]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].name: expected a string of 1 to 128 bytes, got 0 bytes");
  expect_err(CFG("\"inputs\": [{\"name\": \"a\\nb\", \"datatype\": \"FP32\", \"shape\": [-1, 4]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].name: expected no control characters, got \"a\\nb\"");
  expect_err(CFG("\"inputs\": [{\"name\": 5, \"datatype\": \"FP32\", \"shape\": [-1, 4]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].name: expected a string, got 5");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP16\", \"shape\": [-1, 4]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].datatype: expected \"FP32\" (the only datatype models take today), got \"FP16\"");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"shape\": [-1, 4]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].datatype: required field is missing");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\"}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].shape: required field is missing");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [1, 64]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].shape[0]: expected -1 (the batch dimension), got 1");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].shape: expected [-1, width]");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, 4, 4]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].shape: expected [-1, width]");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, 0]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].shape[1]: expected a positive integer ≤ 1048576, got 0");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, \"64\"]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].shape[1]: expected a positive integer ≤ 1048576, got \"64\"");
  expect_err(CFG("\"inputs\": [{\"name\": \"x\", \"datatype\": \"FP32\", \"shape\": [-1, 2097152]}]", NULL, NULL, NULL, NULL, NULL),
             "inputs[0].shape[1]: expected a positive integer ≤ 1048576, got 2097152");
}

static void test_outputs(void) {
  expect_err(CFG(NULL, "", NULL, NULL, NULL, NULL), "outputs: required field is missing");
  expect_err(CFG(NULL, "\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT8\", \"shape\": [-1, 10]}]", NULL, NULL, NULL, NULL),
             "outputs[0].datatype: expected \"FP32\"");
  expect_err(CFG(NULL, "\"outputs\": [{\"name\": \"y\", \"datatype\": \"FP32\", \"shape\": [-1, 1.5]}]", NULL, NULL, NULL, NULL),
             "outputs[0].shape[1]: expected a positive integer ≤ 1048576, got 1.5");
}

static void test_layers(void) {
  expect_err(CFG(NULL, NULL, "", NULL, NULL, NULL), "layers: required field is missing");
  expect_err(CFG(NULL, NULL, "\"layers\": []", NULL, NULL, NULL),
             "layers: expected an array of 1 to 256 layers, got an empty array");
  expect_err(CFG(NULL, NULL, "\"layers\": \"fc1\"", NULL, NULL, NULL),
             "layers: expected an array of 1 to 256 layers, got \"fc1\"");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"weight\": \"w\"}, 3]", NULL, NULL, NULL),
             "layers[1]: expected an object with op, weight, bias and activation, got 3");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"op\": \"conv2d\", \"weight\": \"w\"}]", NULL, NULL, NULL),
             "layers[0].op: expected \"dense\" (the only op), got \"conv2d\"");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"op\": \"dense\"}]", NULL, NULL, NULL),
             "layers[0].weight: required field is missing");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"weight\": [\"w\"]}]", NULL, NULL, NULL),
             "layers[0].weight: expected a string, got an array");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"weight\": \"w\", \"bias\": 0}]", NULL, NULL, NULL),
             "layers[0].bias: expected a string, got 0");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"weight\": \"w\"}, {\"weight\": \"v\", \"activation\": \"rleu\"}]", NULL, NULL, NULL),
             "layers[1].activation: expected one of \"none\", \"relu\", \"gelu\", \"tanh\", "
             "\"sigmoid\", \"softmax\", got \"rleu\"");
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"weight\": \"w\", \"activation\": null}]", NULL, NULL, NULL),
             "layers[0].activation: expected one of");
  /* 257 layers: one too many. */
  char big[8192];
  size_t o = (size_t)snprintf(big, sizeof big, "\"layers\": [");
  for (int i = 0; i < 257; i++) o += (size_t)snprintf(big + o, sizeof big - o, "%s{\"weight\":\"w\"}", i ? "," : "");
  snprintf(big + o, sizeof big - o, "]");
  static char whole[16384];
  build(whole, sizeof whole, NULL, NULL, big, NULL, NULL, NULL);
  expect_err(whole, "layers: expected an array of 1 to 256 layers, got too many");
}

static void test_precision(void) {
  expect_err(CFG(NULL, NULL, NULL, "\"precision\": \"fp16\"", NULL, NULL),
             "precision: expected \"fp32\", \"bf16\" or \"int8\", got \"fp16\"");
  expect_err(CFG(NULL, NULL, NULL, "\"precision\": 32", NULL, NULL),
             "precision: expected \"fp32\", \"bf16\" or \"int8\", got 32");
}

static void test_batching(void) {
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": [1, 8]", NULL),
             "batching: expected an object with max_batch_size, buckets and max_queue_delay_us, got an array");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 0}", NULL),
             "batching.max_batch_size: expected a positive integer ≤ 4096, got 0");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 4097}", NULL),
             "batching.max_batch_size: expected a positive integer ≤ 4096, got 4097");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": \"64\"}", NULL),
             "batching.max_batch_size: expected a positive integer ≤ 4096, got \"64\"");
  /* The brief's example, word for word. */
  char err[512];
  tpu_model_config_t *cfg;
  const char *j = CFG(NULL, NULL, NULL, NULL,
                      "\"batching\": {\"max_batch_size\": 64, \"buckets\": [1, 8, 0, 64]}", NULL);
  CU_ASSERT_EQUAL(tpu_model_config_parse(j, strlen(j), "model.json", &cfg, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_STRING_EQUAL(err, "model.json: batching.buckets[2]: expected a positive integer ≤ "
                              "max_batch_size (64), got 0");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 64, \"buckets\": [1, 128]}", NULL),
             "batching.buckets[1]: expected a positive integer ≤ max_batch_size (64), got 128");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"buckets\": [1, 8192]}", NULL),
             "batching.buckets[1]: expected a positive integer ≤ 4096, got 8192");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 64, \"buckets\": [1, 8, 8, 64]}", NULL),
             "batching.buckets[2]: expected a batch size greater than buckets[1] (8): buckets must "
             "be strictly increasing, got 8");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 64, \"buckets\": [8, 1, 64]}", NULL),
             "batching.buckets[1]: expected a batch size greater than buckets[0] (8)");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_batch_size\": 64, \"buckets\": [1, 8, 32]}", NULL),
             "batching.buckets: the last bucket (32) must equal max_batch_size (64)");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"buckets\": []}", NULL),
             "batching.buckets: expected an array of 1 to 32 batch sizes, got an empty array");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"buckets\": 8}", NULL),
             "batching.buckets: expected an array of 1 to 32 batch sizes, got 8");
  char big[512];
  size_t o = (size_t)snprintf(big, sizeof big, "\"batching\": {\"buckets\": [");
  for (int i = 1; i <= 33; i++) o += (size_t)snprintf(big + o, sizeof big - o, "%s%d", i > 1 ? "," : "", i);
  snprintf(big + o, sizeof big - o, "]}");
  expect_err(CFG(NULL, NULL, NULL, NULL, big, NULL), "batching.buckets: expected an array of 1 to 32 batch sizes, got too many");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_queue_delay_us\": -1}", NULL),
             "batching.max_queue_delay_us: expected an integer from 0 to 10000000 (microseconds), got -1");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_queue_delay_us\": 10000001}", NULL),
             "batching.max_queue_delay_us: expected an integer from 0 to 10000000");
  expect_err(CFG(NULL, NULL, NULL, NULL, "\"batching\": {\"max_queue_delay_us\": 0.5}", NULL),
             "batching.max_queue_delay_us: expected an integer from 0 to 10000000 (microseconds), got 0.5");
}

static void test_checkpoint(void) {
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, ""), "checkpoint: required field is missing");
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, "\"checkpoint\": \"model.safetensors\""),
             "checkpoint: expected an object with file and sha256, got \"model.safetensors\"");
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, "\"checkpoint\": {\"file\": \"m.safetensors\"}"),
             "checkpoint.sha256: required field is missing");
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, "\"checkpoint\": {\"sha256\": \"abc\"}"),
             "checkpoint.sha256: expected 64 hex digits (the file's SHA-256), got \"abc\"");
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL,
                 "\"checkpoint\": {\"sha256\": \"" "g" SHA "\"}"), "checkpoint.sha256: expected 64 hex digits");
  char nonhex[128];
  snprintf(nonhex, sizeof nonhex, "\"checkpoint\": {\"sha256\": \"z%s\"}", SHA + 1);
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, nonhex), "checkpoint.sha256: expected 64 hex digits");
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, "\"checkpoint\": {\"sha256\": 1}"),
             "checkpoint.sha256: expected 64 hex digits (the file's SHA-256), got 1");
  const char *bad_files[] = {"../model.safetensors", "sub/model.safetensors", "/etc/passwd", "..",
                             ".", "a\\\\b", "x..y"};
  for (size_t i = 0; i < sizeof bad_files / sizeof *bad_files; i++) {
    char ck[256];
    snprintf(ck, sizeof ck, "\"checkpoint\": {\"file\": \"%s\", \"sha256\": \"" SHA "\"}", bad_files[i]);
    expect_err(CFG(NULL, NULL, NULL, NULL, NULL, ck),
               "checkpoint.file: expected a plain file name in the version directory");
  }
  expect_err(CFG(NULL, NULL, NULL, NULL, NULL, "\"checkpoint\": {\"file\": \"\", \"sha256\": \"" SHA "\"}"),
             "checkpoint.file: expected a string of 1 to 128 bytes");
}

static void test_limits(void) {
  expect_err("{\"inputs\": [[[[[[[[[1]]]]]]]]]}", "line 1: nests arrays and objects more than 8 deep");
  /* Brackets inside strings do not count. */
  expect_err(CFG(NULL, NULL, "\"layers\": [{\"weight\": \"[[[[[[[[[[[[\", \"bias\": \"{{{{{{{{{{\\\"\"}]", "\"precision\": \"x\"", NULL, NULL),
             "precision: expected");
  size_t n = TPU_MODEL_CONFIG_MAX_BYTES + 1;
  char *huge = malloc(n + 1);
  memset(huge, ' ', n);
  huge[0] = '{';
  huge[n - 1] = '}';
  huge[n] = '\0';
  expect_err(huge, "file is 1048577 bytes, more than the limit of 1048576");
  free(huge);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void test_load_file(void) {
  char tmpl[] = "/tmp/tpud-mc-XXXXXX", path[256], err[512];
  char *dir = mkdtemp(tmpl);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  snprintf(path, sizeof path, "%s/model.json", dir);
  tpu_model_config_t *cfg;
  CU_ASSERT_EQUAL(tpu_model_config_load(path, &cfg, NULL, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NULL(cfg);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "model.json: cannot open: No such file or directory"));
  CU_ASSERT_EQUAL(tpu_model_config_load(dir, &cfg, NULL, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a regular file"));

  FILE *f = fopen(path, "w");
  fputs(CFG(NULL, NULL, NULL, NULL, NULL, NULL), f);
  fclose(f);
  CU_ASSERT_EQUAL(tpu_model_config_load(path, &cfg, NULL, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(cfg->output_width, 10);
  tpu_model_config_free(cfg);

  f = fopen(path, "w");
  fputs(CFG(NULL, NULL, NULL, "\"precision\": \"fp64\"", NULL, NULL), f);
  fclose(f);
  CU_ASSERT_EQUAL(tpu_model_config_load(path, &cfg, NULL, err, sizeof err), TPU_EINVAL);
  /* The path as given prefixes the message. */
  CU_ASSERT_EQUAL(strncmp(err, path, strlen(path)), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, ": precision: expected"));
  CU_ASSERT_EQUAL(tpu_model_config_load(NULL, &cfg, NULL, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_model_config_parse("{}", 2, NULL, NULL, err, sizeof err), TPU_EINVAL);
  nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void test_bundled_configs(void) {
  const char *paths[] = {TPU_SOURCE_DIR "/models/digits/1/model.json",
                         TPU_SOURCE_DIR "/models/matmul/1/model.json"};
  for (int i = 0; i < 2; i++) {
    char err[512];
    tpu_model_config_t *cfg;
    tpu_status_t rc = tpu_model_config_load(paths[i], &cfg, NULL, err, sizeof err);
    if (rc != TPU_OK) fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL(rc, TPU_OK);
    tpu_model_config_free(cfg);
  }
}

/* checkpoint.external (onnx): file path -> SHA-256. */
static void test_external(void) {
  const char *head = "{\"format\": \"onnx\", \"checkpoint\": {\"file\": \"m.onnx\", \"sha256\": \"" SHA
                     "\", \"external\": ";
  char j[1024];
  snprintf(j, sizeof j, "%s{\"w.bin\": \"%s\", \"d/x.bin\": \"%s\"}}}", head, SHA, SHA);
  tpu_model_config_t *cfg = parse_ok(j);
  if (cfg) {
    CU_ASSERT_EQUAL(cfg->nexternal, 2);
    CU_ASSERT_STRING_EQUAL(cfg->external[0].path, "w.bin");
    CU_ASSERT_STRING_EQUAL(cfg->external[1].path, "d/x.bin");
    CU_ASSERT_EQUAL(strlen(cfg->external[1].sha256), 64);
  }
  tpu_model_config_free(cfg);
  snprintf(j, sizeof j, "%s{\"../w.bin\": \"%s\"}}}", head, SHA);
  expect_err(j, "'../w.bin' is not a relative path");
  snprintf(j, sizeof j, "%s{\"/etc/w.bin\": \"%s\"}}}", head, SHA);
  expect_err(j, "'/etc/w.bin' is not a relative path");
  snprintf(j, sizeof j, "%s{\"w.bin\": \"abc\"}}}", head);
  expect_err(j, "checkpoint.external[\"w.bin\"]: expected 64 hex digits");
  snprintf(j, sizeof j, "%s[\"w.bin\"]}}", head);
  expect_err(j, "checkpoint.external: expected an object");
  snprintf(j, sizeof j, "{\"format\": \"xgboost\", \"checkpoint\": {\"sha256\": \"%s\", "
           "\"external\": {}}}", SHA);
  expect_err(j, "only an ONNX model has external data");
}

TPU_TEST_SUITE(model_config,
               {"calibration", test_calibration},
               {"labels", test_labels},
               {"external", test_external},
               {"contract_example", test_contract_example},
               {"defaults", test_defaults},
               {"variants", test_variants},
               {"not_json", test_not_json},
               {"unknown_field", test_unknown_field},
               {"inputs", test_inputs},
               {"outputs", test_outputs},
               {"layers", test_layers},
               {"precision", test_precision},
               {"batching", test_batching},
               {"checkpoint", test_checkpoint},
               {"limits", test_limits},
               {"load_file", test_load_file},
               {"bundled_configs", test_bundled_configs})
