/*
 * model_config.c - model.json parsing and validation (decisions and defaults in model_config.h).
 *
 * DESIGN
 * One pass over the jansson tree, field by field in the order of the contract's example, each
 * error written once with its JSON path. The config owns copies of its strings; the jansson tree
 * is freed before returning. Never opens the checkpoint: that is model.c's job.
 */
#include "model_config.h"

#include "file.h"
#include "tpu_text.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  const char *file; /* message prefix */
  char *err;
  size_t errlen;
} ctx_t;

/* "file: message" into c's err, and returns status: `return fail(c, ...)`. */
#define fail(c, status, fmt, ...) \
  tpu_errf_ret((status), (c)->err, (c)->errlen, "%s: " fmt, (c)->file, ##__VA_ARGS__)

/* A short, log-safe rendering of a JSON value for "got ..." (strings quoted, containers named,
 * control bytes escaped, long text cut). */
static const char *got(char *out, size_t outlen, const json_t *v) {
  if (!v) return "nothing";
  if (json_is_object(v)) return "an object";
  if (json_is_array(v)) return "an array";
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII);
  if (!s) return "a value";
  size_t n = strlen(s);
  if (n + 1 > outlen) {
    memcpy(out, s, outlen - 4);
    memcpy(out + outlen - 4, "...", 4);
  } else {
    memcpy(out, s, n + 1);
  }
  free(s);
  return out;
}

/* Refuses keys of `obj` not in the NULL-terminated list `allowed`. */
static tpu_status_t only_keys(ctx_t *c, const char *path, json_t *obj, const char *const *allowed) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++) ok |= strcmp(k, *a) == 0;
    if (ok) continue;
    char list[256] = "", name[96];
    size_t o = 0;
    for (const char *const *a = allowed; *a && o < sizeof list; a++)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", a == allowed ? "" : ", ", *a);
    json_t *ks = json_string(k);
    got(name, sizeof name, ks);
    json_decref(ks);
    return fail(c, TPU_EINVAL, "%s%sunknown field %s (expected %s)", path, *path ? ": " : "", name,
                list);
  }
  return TPU_OK;
}

/* A required or optional name-like string: 1..TPU_MODEL_MAX_NAME bytes, no control characters.
 * *out is a copy (NULL when absent and optional). */
static tpu_status_t get_name(ctx_t *c, const char *path, json_t *v, int required, char **out) {
  char g[96];
  *out = NULL;
  if (!v || json_is_null(v)) {
    if (required) return fail(c, TPU_EINVAL, "%s: required field is missing", path);
    return TPU_OK;
  }
  if (!json_is_string(v))
    return fail(c, TPU_EINVAL, "%s: expected a string, got %s", path, got(g, sizeof g, v));
  const char *s = json_string_value(v);
  size_t n = json_string_length(v);
  if (n == 0 || n > TPU_MODEL_MAX_NAME)
    return fail(c, TPU_EINVAL, "%s: expected a string of 1 to %d bytes, got %zu bytes", path,
                TPU_MODEL_MAX_NAME, n);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
      return fail(c, TPU_EINVAL, "%s: expected no control characters, got %s", path,
                  got(g, sizeof g, v));
  if (!(*out = strdup(s))) return fail(c, TPU_ENOMEM, "out of memory");
  return TPU_OK;
}

/* An integer in [lo, hi]; `what` completes "expected ..." (e.g. "a positive integer ≤ 64"). */
static tpu_status_t get_int(ctx_t *c, const char *path, json_t *v, long long lo, long long hi,
                            const char *what, long long *out) {
  char g[96];
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return fail(c, TPU_EINVAL, "%s: expected %s, got %s", path, what, got(g, sizeof g, v));
  *out = json_integer_value(v);
  return TPU_OK;
}

/* inputs or outputs: exactly one {"name", "datatype": "FP32", "shape": [-1, K]}. */
static tpu_status_t parse_io(ctx_t *c, const char *field, json_t *arr, char **name, size_t *width) {
  static const char *const keys[] = {"name", "datatype", "shape", NULL};
  char path[64], g[96];
  tpu_status_t rc;
  if (!arr) return fail(c, TPU_EINVAL, "%s: required field is missing", field);
  if (!json_is_array(arr) || json_array_size(arr) != 1)
    return fail(c, TPU_EINVAL, "%s: expected an array of exactly one tensor, got %s", field,
                json_is_array(arr) ? (json_array_size(arr) ? "more than one" : "an empty array")
                                   : got(g, sizeof g, arr));
  json_t *t = json_array_get(arr, 0);
  snprintf(path, sizeof path, "%s[0]", field);
  if (!json_is_object(t))
    return fail(c, TPU_EINVAL, "%s: expected an object with name, datatype and shape, got %s", path,
                got(g, sizeof g, t));
  if ((rc = only_keys(c, path, t, keys)) != TPU_OK) return rc;

  snprintf(path, sizeof path, "%s[0].name", field);
  if ((rc = get_name(c, path, json_object_get(t, "name"), 1, name)) != TPU_OK) return rc;

  snprintf(path, sizeof path, "%s[0].datatype", field);
  json_t *dt = json_object_get(t, "datatype");
  if (!dt) return fail(c, TPU_EINVAL, "%s: required field is missing", path);
  if (!json_is_string(dt) || strcmp(json_string_value(dt), "FP32") != 0)
    return fail(c, TPU_EINVAL, "%s: expected \"FP32\" (the only datatype models take today), got %s",
                path, got(g, sizeof g, dt));

  snprintf(path, sizeof path, "%s[0].shape", field);
  json_t *sh = json_object_get(t, "shape");
  if (!sh) return fail(c, TPU_EINVAL, "%s: required field is missing", path);
  if (!json_is_array(sh) || json_array_size(sh) != 2)
    return fail(c, TPU_EINVAL, "%s: expected [-1, width] (batch dimension, then features), got %s",
                path, json_is_array(sh) ? "a different number of dimensions" : got(g, sizeof g, sh));
  json_t *b = json_array_get(sh, 0);
  if (!json_is_integer(b) || json_integer_value(b) != -1)
    return fail(c, TPU_EINVAL, "%s[0]: expected -1 (the batch dimension), got %s", path,
                got(g, sizeof g, b));
  char what[64];
  snprintf(what, sizeof what, "a positive integer ≤ %u", TPU_MODEL_MAX_WIDTH);
  long long k;
  snprintf(path, sizeof path, "%s[0].shape[1]", field);
  if ((rc = get_int(c, path, json_array_get(sh, 1), 1, TPU_MODEL_MAX_WIDTH, what, &k)) != TPU_OK)
    return rc;
  *width = (size_t)k;
  return TPU_OK;
}


static const char *const io_dtypes[] = {"FP32", "FP16", "BF16", "FP64", "INT64",
                                        "INT32", "INT8",  "UINT8", "BOOL", NULL};

/* format "onnx": inputs or outputs, a list of {"name", "datatype", "shape"} (see the header). */
static tpu_status_t parse_io_list(ctx_t *c, const char *field, json_t *arr,
                                  tpu_model_io_config_t **out, size_t *n) {
  static const char *const keys[] = {"name", "datatype", "shape", NULL};
  char path[96], g[96];
  tpu_status_t rc;
  *out = NULL;
  *n = 0;
  if (!arr) return TPU_OK;
  if (!json_is_array(arr) || json_array_size(arr) == 0 ||
      json_array_size(arr) > TPU_MODEL_MAX_IO)
    return fail(c, TPU_EINVAL, "%s: expected an array of 1 to %d tensors, got %s", field,
                TPU_MODEL_MAX_IO,
                json_is_array(arr) ? (json_array_size(arr) ? "too many" : "an empty array")
                                   : got(g, sizeof g, arr));
  size_t cnt = json_array_size(arr);
  if (!(*out = calloc(cnt, sizeof **out))) return fail(c, TPU_ENOMEM, "out of memory");
  *n = cnt;
  for (size_t i = 0; i < cnt; i++) {
    tpu_model_io_config_t *t = &(*out)[i];
    json_t *o = json_array_get(arr, i);
    snprintf(path, sizeof path, "%s[%zu]", field, i);
    if (!json_is_object(o))
      return fail(c, TPU_EINVAL, "%s: expected an object with name, datatype and shape, got %s",
                  path, got(g, sizeof g, o));
    if ((rc = only_keys(c, path, o, keys)) != TPU_OK) return rc;
    snprintf(path, sizeof path, "%s[%zu].name", field, i);
    if ((rc = get_name(c, path, json_object_get(o, "name"), 1, &t->name)) != TPU_OK) return rc;
    for (size_t j = 0; j < i; j++)
      if (strcmp((*out)[j].name, t->name) == 0)
        return fail(c, TPU_EINVAL, "%s: name '%s' is also %s[%zu]'s", path, t->name, field, j);
    snprintf(path, sizeof path, "%s[%zu].datatype", field, i);
    json_t *dt = json_object_get(o, "datatype");
    const char *ds = json_is_string(dt) ? json_string_value(dt) : "";
    int ok = 0;
    for (const char *const *d = io_dtypes; *d && !ok; d++) ok = strcmp(*d, ds) == 0;
    if (!ok)
      return fail(c, TPU_EINVAL, "%s: expected one of FP32, FP16, BF16, FP64, INT64, INT32, "
                  "INT8, UINT8, BOOL, got %s", path, got(g, sizeof g, dt));
    snprintf(t->datatype, sizeof t->datatype, "%s", ds);
    snprintf(path, sizeof path, "%s[%zu].shape", field, i);
    json_t *sh = json_object_get(o, "shape");
    if (!json_is_array(sh) || json_array_size(sh) > TPU_MODEL_MAX_RANK)
      return fail(c, TPU_EINVAL, "%s: expected an array of at most %d dimensions, got %s", path,
                  TPU_MODEL_MAX_RANK, sh ? (json_is_array(sh) ? "too many" : got(g, sizeof g, sh))
                                         : "nothing");
    t->rank = json_array_size(sh);
    for (size_t d = 0; d < t->rank; d++) {
      json_t *v = json_array_get(sh, d);
      long long x = json_is_integer(v) ? json_integer_value(v) : 0;
      if (!json_is_integer(v) || (x < 1 && !(d == 0 && x == -1)) || x > TPU_MODEL_MAX_WIDTH)
        return fail(c, TPU_EINVAL, "%s[%zu]: expected %s, got %s", path, d,
                    d == 0 ? "-1 (the batch dimension) or a positive integer"
                           : "a positive integer (only dimension 0 may be -1, the batch)",
                    got(g, sizeof g, v));
      t->shape[d] = x;
    }
  }
  return TPU_OK;
}

/* A number in [lo, hi]. */
static tpu_status_t get_real(ctx_t *c, const char *path, json_t *v, double lo, double hi,
                             double *out) {
  char g[96];
  if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi)
    return fail(c, TPU_EINVAL, "%s: expected a number from %g to %g, got %s", path, lo, hi,
                got(g, sizeof g, v));
  *out = json_number_value(v);
  return TPU_OK;
}

/* A plain file name in the version directory. */
static tpu_status_t get_file(ctx_t *c, const char *path, json_t *v, char **out) {
  char g[96];
  tpu_status_t rc = get_name(c, path, v, 1, out);
  if (rc != TPU_OK) return rc;
  const char *s = *out;
  if (strchr(s, '/') || strchr(s, '\\') || strstr(s, "..") || strcmp(s, ".") == 0)
    return fail(c, TPU_EINVAL,
                "%s: expected a plain file name in the version directory (no '/', '\\' or "
                "'..'), got %s",
                path, got(g, sizeof g, v));
  return TPU_OK;
}

/* 64 hex digits into out (lower case). */
static tpu_status_t get_sha(ctx_t *c, const char *path, json_t *h, char out[65]) {
  char g[96];
  if (!h) return fail(c, TPU_EINVAL, "%s: required field is missing", path);
  const char *s = json_is_string(h) ? json_string_value(h) : NULL;
  int ok = s && json_string_length(h) == 64;
  for (int i = 0; ok && i < 64; i++) {
    char ch = s[i];
    if (ch >= 'A' && ch <= 'F') ch = (char)(ch + 32);
    ok = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
    out[i] = ch;
  }
  if (!ok)
    return fail(c, TPU_EINVAL, "%s: expected 64 hex digits (the file's SHA-256), got %s", path,
                got(g, sizeof g, h));
  out[64] = '\0';
  return TPU_OK;
}

static tpu_status_t parse_reference(ctx_t *c, json_t *o, tpu_model_config_t *cfg) {
  static const char *const keys[] = {"file", "sha256", "rtol", "atol", "labels", NULL};
  static const char *const lkeys[] = {"output", "min_agreement", NULL};
  char g[96];
  tpu_status_t rc;
  tpu_model_reference_config_t *r = &cfg->reference;
  if (!o) return TPU_OK;
  if (!json_is_object(o))
    return fail(c, TPU_EINVAL, "reference: expected an object with file, sha256, rtol and atol, "
                "got %s", got(g, sizeof g, o));
  if ((rc = only_keys(c, "reference", o, keys)) != TPU_OK) return rc;
  r->present = 1;
  r->rtol = 1e-4;
  r->atol = 1e-5;
  if ((rc = get_file(c, "reference.file", json_object_get(o, "file"), &r->file)) != TPU_OK)
    return rc;
  if ((rc = get_sha(c, "reference.sha256", json_object_get(o, "sha256"), r->sha256)) != TPU_OK)
    return rc;
  json_t *v;
  if ((v = json_object_get(o, "rtol")) && (rc = get_real(c, "reference.rtol", v, 0, 1e6,
                                                         &r->rtol)) != TPU_OK)
    return rc;
  if ((v = json_object_get(o, "atol")) && (rc = get_real(c, "reference.atol", v, 0, 1e30,
                                                         &r->atol)) != TPU_OK)
    return rc;
  json_t *l = json_object_get(o, "labels");
  if (l) {
    if (!json_is_object(l))
      return fail(c, TPU_EINVAL, "reference.labels: expected an object with output and "
                  "min_agreement, got %s", got(g, sizeof g, l));
    if ((rc = only_keys(c, "reference.labels", l, lkeys)) != TPU_OK) return rc;
    if ((rc = get_name(c, "reference.labels.output", json_object_get(l, "output"), 1,
                       &r->label_output)) != TPU_OK)
      return rc;
    v = json_object_get(l, "min_agreement");
    if (!v) return fail(c, TPU_EINVAL, "reference.labels.min_agreement: required field is missing");
    if ((rc = get_real(c, "reference.labels.min_agreement", v, 0, 1, &r->min_agreement)) !=
        TPU_OK)
      return rc;
  }
  return TPU_OK;
}

static tpu_status_t parse_calibration(ctx_t *c, json_t *o, tpu_model_config_t *cfg) {
  static const char *const keys[] = {"file", "sha256", "smoothing", "static", NULL};
  char g[96];
  tpu_status_t rc;
  tpu_model_calibration_config_t *k = &cfg->calibration;
  if (!o) return TPU_OK;
  if (!json_is_object(o))
    return fail(c, TPU_EINVAL, "calibration: expected an object with file and sha256, got %s",
                got(g, sizeof g, o));
  if ((rc = only_keys(c, "calibration", o, keys)) != TPU_OK) return rc;
  if (cfg->precision != TPU_DTYPE_INT8)
    return fail(c, TPU_EINVAL, "calibration: only used with precision \"int8\" (this model is "
                "%s); remove it or set precision", tpu_model_precision_name(cfg->precision));
  k->present = 1;
  k->smoothing = 0.5;
  if ((rc = get_file(c, "calibration.file", json_object_get(o, "file"), &k->file)) != TPU_OK)
    return rc;
  if ((rc = get_sha(c, "calibration.sha256", json_object_get(o, "sha256"), k->sha256)) != TPU_OK)
    return rc;
  json_t *v;
  if ((v = json_object_get(o, "smoothing")) &&
      (rc = get_real(c, "calibration.smoothing", v, 0, 1, &k->smoothing)) != TPU_OK)
    return rc;
  if ((v = json_object_get(o, "static"))) {
    if (!json_is_boolean(v))
      return fail(c, TPU_EINVAL, "calibration.static: expected true or false, got %s",
                  got(g, sizeof g, v));
    k->static_scales = json_is_true(v);
  }
  return TPU_OK;
}

static tpu_status_t parse_overrides(ctx_t *c, json_t *a, tpu_model_config_t *cfg) {
  char g[96], path[64];
  tpu_status_t rc;
  if (!a) return TPU_OK;
  if (cfg->format != TPU_MODEL_FORMAT_ONNX)
    return fail(c, TPU_EINVAL, "precision_overrides: only for format \"onnx\" (name graph nodes)");
  if (!json_is_array(a) || json_array_size(a) > TPU_MODEL_MAX_OVERRIDES)
    return fail(c, TPU_EINVAL, "precision_overrides: expected an array of at most %d node names "
                "(kept in fp32), got %s", TPU_MODEL_MAX_OVERRIDES,
                json_is_array(a) ? "too many" : got(g, sizeof g, a));
  size_t n = json_array_size(a);
  if (!(cfg->precision_overrides = calloc(n + 1, sizeof *cfg->precision_overrides)))
    return fail(c, TPU_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof path, "precision_overrides[%zu]", i);
    if ((rc = get_name(c, path, json_array_get(a, i), 1, &cfg->precision_overrides[i])) != TPU_OK)
      return rc;
    cfg->noverrides = i + 1;
  }
  return TPU_OK;
}

static tpu_status_t parse_layers(ctx_t *c, json_t *arr, tpu_model_config_t *cfg) {
  static const char *const keys[] = {"op", "weight", "bias", "activation", NULL};
  char path[64], g[96];
  tpu_status_t rc;
  if (!arr) return fail(c, TPU_EINVAL, "layers: required field is missing");
  if (!json_is_array(arr) || json_array_size(arr) == 0 ||
      json_array_size(arr) > TPU_MODEL_MAX_LAYERS)
    return fail(c, TPU_EINVAL, "layers: expected an array of 1 to %d layers, got %s",
                TPU_MODEL_MAX_LAYERS,
                json_is_array(arr) ? (json_array_size(arr) ? "too many" : "an empty array")
                                   : got(g, sizeof g, arr));
  size_t n = json_array_size(arr);
  if (!(cfg->layers = calloc(n, sizeof *cfg->layers))) return fail(c, TPU_ENOMEM, "out of memory");
  cfg->nlayers = n;
  for (size_t i = 0; i < n; i++) {
    tpu_model_layer_config_t *l = &cfg->layers[i];
    json_t *o = json_array_get(arr, i);
    snprintf(path, sizeof path, "layers[%zu]", i);
    if (!json_is_object(o))
      return fail(c, TPU_EINVAL, "%s: expected an object with op, weight, bias and activation, got %s",
                  path, got(g, sizeof g, o));
    if ((rc = only_keys(c, path, o, keys)) != TPU_OK) return rc;
    json_t *op = json_object_get(o, "op");
    if (op && (!json_is_string(op) || strcmp(json_string_value(op), "dense") != 0))
      return fail(c, TPU_EINVAL, "layers[%zu].op: expected \"dense\" (the only op), got %s", i,
                  got(g, sizeof g, op));
    snprintf(path, sizeof path, "layers[%zu].weight", i);
    if ((rc = get_name(c, path, json_object_get(o, "weight"), 1, &l->weight)) != TPU_OK) return rc;
    snprintf(path, sizeof path, "layers[%zu].bias", i);
    if ((rc = get_name(c, path, json_object_get(o, "bias"), 0, &l->bias)) != TPU_OK) return rc;
    json_t *act = json_object_get(o, "activation");
    l->act = TPU_ACT_NONE;
    if (act && (!json_is_string(act) || tpu_act_parse(json_string_value(act), &l->act) != TPU_OK))
      return fail(c, TPU_EINVAL,
                  "layers[%zu].activation: expected one of \"none\", \"relu\", \"gelu\", "
                  "\"tanh\", \"sigmoid\", \"softmax\", got %s",
                  i, got(g, sizeof g, act));
  }
  return TPU_OK;
}

static tpu_status_t parse_batching(ctx_t *c, json_t *o, tpu_model_config_t *cfg) {
  static const char *const keys[] = {"max_batch_size", "buckets", "max_queue_delay_us", NULL};
  char path[64], what[96], g[96];
  tpu_status_t rc;
  long long v;
  json_t *mbs = NULL, *buckets = NULL, *delay = NULL;
  if (o) {
    if (!json_is_object(o))
      return fail(c, TPU_EINVAL,
                  "batching: expected an object with max_batch_size, buckets and "
                  "max_queue_delay_us, got %s",
                  got(g, sizeof g, o));
    if ((rc = only_keys(c, "batching", o, keys)) != TPU_OK) return rc;
    mbs = json_object_get(o, "max_batch_size");
    buckets = json_object_get(o, "buckets");
    delay = json_object_get(o, "max_queue_delay_us");
  }

  cfg->max_batch_size = 0;
  if (mbs) {
    snprintf(what, sizeof what, "a positive integer ≤ %d", TPU_MODEL_MAX_BATCH);
    if ((rc = get_int(c, "batching.max_batch_size", mbs, 1, TPU_MODEL_MAX_BATCH, what, &v)) != TPU_OK)
      return rc;
    cfg->max_batch_size = (size_t)v;
  }

  if (buckets) {
    if (!json_is_array(buckets) || json_array_size(buckets) == 0 ||
        json_array_size(buckets) > TPU_MODEL_MAX_BUCKETS)
      return fail(c, TPU_EINVAL, "batching.buckets: expected an array of 1 to %d batch sizes, got %s",
                  TPU_MODEL_MAX_BUCKETS,
                  json_is_array(buckets) ? (json_array_size(buckets) ? "too many" : "an empty array")
                                         : got(g, sizeof g, buckets));
    size_t limit = cfg->max_batch_size ? cfg->max_batch_size : TPU_MODEL_MAX_BATCH;
    for (size_t i = 0; i < json_array_size(buckets); i++) {
      snprintf(path, sizeof path, "batching.buckets[%zu]", i);
      if (cfg->max_batch_size)
        snprintf(what, sizeof what, "a positive integer ≤ max_batch_size (%zu)", limit);
      else
        snprintf(what, sizeof what, "a positive integer ≤ %zu", limit);
      if ((rc = get_int(c, path, json_array_get(buckets, i), 1, (long long)limit, what, &v)) != TPU_OK)
        return rc;
      if (i > 0 && (size_t)v <= cfg->buckets[i - 1])
        return fail(c, TPU_EINVAL,
                    "%s: expected a batch size greater than buckets[%zu] (%zu): buckets must be "
                    "strictly increasing, got %lld",
                    path, i - 1, cfg->buckets[i - 1], v);
      cfg->buckets[i] = (size_t)v;
      cfg->nbuckets = i + 1;
    }
    size_t last = cfg->buckets[cfg->nbuckets - 1];
    if (!cfg->max_batch_size) cfg->max_batch_size = last;
    if (last != cfg->max_batch_size)
      return fail(c, TPU_EINVAL,
                  "batching.buckets: the last bucket (%zu) must equal max_batch_size (%zu), so a "
                  "full batch has a bucket; add %zu to buckets or lower max_batch_size",
                  last, cfg->max_batch_size, cfg->max_batch_size);
  } else {
    if (!cfg->max_batch_size) cfg->max_batch_size = 64;
    for (size_t b = 1; b < cfg->max_batch_size; b *= 2) cfg->buckets[cfg->nbuckets++] = b;
    cfg->buckets[cfg->nbuckets++] = cfg->max_batch_size; /* ≤ 13 powers of 2 below 4096, + 1 */
  }

  cfg->max_queue_delay_us = 500;
  if (delay) {
    snprintf(what, sizeof what, "an integer from 0 to %u (microseconds)",
             TPU_MODEL_MAX_QUEUE_DELAY_US);
    if ((rc = get_int(c, "batching.max_queue_delay_us", delay, 0, TPU_MODEL_MAX_QUEUE_DELAY_US,
                      what, &v)) != TPU_OK)
      return rc;
    cfg->max_queue_delay_us = (uint32_t)v;
  }
  return TPU_OK;
}

/* labels: {"<output>": {"file": "...", "sha256": "..."}, ...} */
static tpu_status_t parse_labels(ctx_t *c, json_t *o, tpu_model_config_t *cfg) {
  static const char *const keys[] = {"file", "sha256", NULL};
  char g[96], path[TPU_MODEL_MAX_NAME + 32];
  tpu_status_t rc;
  if (!o) return TPU_OK;
  if (!json_is_object(o))
    return fail(c, TPU_EINVAL, "labels: expected an object of output name -> {\"file\", "
                "\"sha256\"}, got %s", got(g, sizeof g, o));
  size_t n = json_object_size(o);
  if (n > TPU_MODEL_MAX_IO)
    return fail(c, TPU_EINVAL, "labels: %zu outputs, at most %d", n, TPU_MODEL_MAX_IO);
  if (n && !(cfg->labels = calloc(n, sizeof *cfg->labels)))
    return fail(c, TPU_ENOMEM, "out of memory");
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    tpu_model_labels_config_t *l = &cfg->labels[cfg->nlabels];
    snprintf(path, sizeof path, "labels.%.*s", TPU_MODEL_MAX_NAME, key);
    json_t *name = json_string(key);
    if (!name) return fail(c, TPU_ENOMEM, "out of memory");
    rc = get_name(c, "labels: an output name", name, 1, &l->output);
    json_decref(name);
    if (rc != TPU_OK) return rc;
    cfg->nlabels++; /* owned from here on */
    if (!json_is_object(v))
      return fail(c, TPU_EINVAL, "%s: expected an object with file and sha256, got %s", path,
                  got(g, sizeof g, v));
    if ((rc = only_keys(c, path, v, keys)) != TPU_OK) return rc;
    char fpath[sizeof path + 8];
    snprintf(fpath, sizeof fpath, "%s.file", path);
    if ((rc = get_file(c, fpath, json_object_get(v, "file"), &l->file)) != TPU_OK) return rc;
    snprintf(fpath, sizeof fpath, "%s.sha256", path);
    if ((rc = get_sha(c, fpath, json_object_get(v, "sha256"), l->sha256)) != TPU_OK) return rc;
  }
  return TPU_OK;
}

/* checkpoint.external: {"<relative path>": "<sha256>", ...} */
static tpu_status_t parse_external(ctx_t *c, json_t *e, tpu_model_config_t *cfg) {
  char g[96], path[600];
  if (cfg->format != TPU_MODEL_FORMAT_ONNX)
    return fail(c, TPU_EINVAL, "checkpoint.external: only an ONNX model has external data files");
  if (!json_is_object(e))
    return fail(c, TPU_EINVAL, "checkpoint.external: expected an object of file path -> SHA-256, "
                "got %s", got(g, sizeof g, e));
  size_t n = json_object_size(e);
  if (n > TPU_MODEL_MAX_EXTERNAL)
    return fail(c, TPU_EINVAL, "checkpoint.external: %zu files, at most %d", n,
                TPU_MODEL_MAX_EXTERNAL);
  if (n && !(cfg->external = calloc(n, sizeof *cfg->external)))
    return fail(c, TPU_ENOMEM, "out of memory");
  const char *key;
  json_t *v;
  json_object_foreach(e, key, v) {
    size_t kl = strlen(key);
    int bad = kl == 0 || kl > 512 || key[0] == '/' || strchr(key, '\\');
    for (size_t i = 0; i < kl && !bad; i++) bad = (unsigned char)key[i] < 0x20;
    for (const char *s = key; *s && !bad;) { /* no ".." component */
      const char *sl = strchr(s, '/');
      size_t len = sl ? (size_t)(sl - s) : strlen(s);
      bad = len == 2 && s[0] == '.' && s[1] == '.';
      s += len;
      while (*s == '/') s++;
    }
    if (bad)
      return fail(c, TPU_EINVAL, "checkpoint.external: '%.100s' is not a relative path inside "
                  "the version directory (no leading '/', no '..', no '\\')", key);
    tpu_model_external_config_t *x = &cfg->external[cfg->nexternal];
    snprintf(path, sizeof path, "checkpoint.external[\"%s\"]", key);
    tpu_status_t rc = get_sha(c, path, v, x->sha256);
    if (rc != TPU_OK) return rc;
    if (!(x->path = strdup(key))) return fail(c, TPU_ENOMEM, "out of memory");
    cfg->nexternal++;
  }
  return TPU_OK;
}

static tpu_status_t parse_checkpoint(ctx_t *c, json_t *o, tpu_model_config_t *cfg) {
  static const char *const keys[] = {"file", "sha256", "external", NULL};
  char g[96];
  tpu_status_t rc;
  if (!o) return fail(c, TPU_EINVAL, "checkpoint: required field is missing (it holds sha256)");
  if (!json_is_object(o))
    return fail(c, TPU_EINVAL, "checkpoint: expected an object with file and sha256, got %s",
                got(g, sizeof g, o));
  if ((rc = only_keys(c, "checkpoint", o, keys)) != TPU_OK) return rc;

  json_t *f = json_object_get(o, "file");
  if (f) {
    if ((rc = get_file(c, "checkpoint.file", f, &cfg->checkpoint_file)) != TPU_OK) return rc;
  } else if (!(cfg->checkpoint_file = strdup(cfg->format == TPU_MODEL_FORMAT_ONNX ? "model.onnx"
                                             : cfg->format == TPU_MODEL_FORMAT_XGBOOST
                                                 ? "xgboost.json"
                                                 : "model.safetensors"))) {
    return fail(c, TPU_ENOMEM, "out of memory");
  }
  json_t *e = json_object_get(o, "external");
  if (e && (rc = parse_external(c, e, cfg)) != TPU_OK) return rc;
  return get_sha(c, "checkpoint.sha256", json_object_get(o, "sha256"), cfg->sha256);
}

/* Refuses text nesting deeper than TPU_MODEL_CONFIG_MAX_DEPTH before a recursive parser sees it. */
static tpu_status_t check_depth(ctx_t *c, const char *s, size_t len) {
  int depth = 0, in_str = 0;
  size_t line = 1;
  for (size_t i = 0; i < len; i++) {
    char ch = s[i];
    if (ch == '\n') line++;
    if (in_str) {
      if (ch == '\\') i++;
      else if (ch == '"') in_str = 0;
    } else if (ch == '"') {
      in_str = 1;
    } else if (ch == '[' || ch == '{') {
      if (++depth > TPU_MODEL_CONFIG_MAX_DEPTH)
        return fail(c, TPU_EINVAL, "line %zu: nests arrays and objects more than %d deep", line,
                    TPU_MODEL_CONFIG_MAX_DEPTH);
    } else if (ch == ']' || ch == '}') {
      depth--;
    }
  }
  return TPU_OK;
}

void tpu_model_config_free(tpu_model_config_t *cfg) {
  if (!cfg) return;
  free(cfg->input_name);
  free(cfg->output_name);
  for (size_t i = 0; i < cfg->nlayers; i++) {
    free(cfg->layers[i].weight);
    free(cfg->layers[i].bias);
  }
  free(cfg->layers);
  for (size_t i = 0; i < cfg->ninputs; i++) free(cfg->inputs[i].name);
  for (size_t i = 0; i < cfg->noutputs; i++) free(cfg->outputs[i].name);
  free(cfg->inputs);
  free(cfg->outputs);
  for (size_t i = 0; i < cfg->noverrides; i++) free(cfg->precision_overrides[i]);
  free(cfg->precision_overrides);
  free(cfg->reference.file);
  free(cfg->calibration.file);
  free(cfg->reference.label_output);
  free(cfg->checkpoint_file);
  for (size_t i = 0; i < cfg->nexternal; i++) free(cfg->external[i].path);
  free(cfg->external);
  for (size_t i = 0; i < cfg->nlabels; i++) {
    free(cfg->labels[i].output);
    free(cfg->labels[i].file);
  }
  free(cfg->labels);
  free(cfg);
}

const char *tpu_model_precision_name(tpu_dtype_t precision) {
  switch (precision) {
  case TPU_DTYPE_FP32: return "fp32";
  case TPU_DTYPE_BF16: return "bf16";
  case TPU_DTYPE_INT8: return "int8";
  default: return NULL;
  }
}

tpu_status_t tpu_model_config_parse(const char *json, size_t len, const char *name,
                                    tpu_model_config_t **out, char *err, size_t errlen) {
  static const char *const keys[] = {"format",    "inputs",   "outputs",
                                     "layers",    "precision", "precision_overrides",
                                     "batching",  "checkpoint", "reference",
                                     "calibration", "labels", "payload_capture", NULL};
  ctx_t c = {name ? name : "model.json", err, errlen};
  char g[96];
  tpu_status_t rc;
  if (err && errlen) err[0] = '\0';
  if (!out || (!json && len)) return fail(&c, TPU_EINVAL, "invalid argument");
  *out = NULL;
  if (len > TPU_MODEL_CONFIG_MAX_BYTES)
    return fail(&c, TPU_EINVAL, "file is %zu bytes, more than the limit of %u", len,
                TPU_MODEL_CONFIG_MAX_BYTES);
  if ((rc = check_depth(&c, json, len)) != TPU_OK) return rc;

  json_error_t jerr;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return fail(&c, TPU_EINVAL, "not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
                jerr.column);
  tpu_model_config_t *cfg = calloc(1, sizeof *cfg);
  if (!cfg) {
    rc = fail(&c, TPU_ENOMEM, "out of memory");
    goto fail;
  }
  if (!json_is_object(root)) {
    rc = fail(&c, TPU_EINVAL, "expected a JSON object at the top level, got %s",
              got(g, sizeof g, root));
    goto fail;
  }
  if ((rc = only_keys(&c, "", root, keys)) != TPU_OK) goto fail;
  json_t *fmt = json_object_get(root, "format");
  cfg->format = TPU_MODEL_FORMAT_DENSE;
  if (fmt) {
    const char *fs = json_is_string(fmt) ? json_string_value(fmt) : "";
    if (strcmp(fs, "onnx") == 0) {
      cfg->format = TPU_MODEL_FORMAT_ONNX;
    } else if (strcmp(fs, "xgboost") == 0) {
      cfg->format = TPU_MODEL_FORMAT_XGBOOST;
    } else if (strcmp(fs, "dense") != 0) {
      rc = fail(&c, TPU_EINVAL, "format: expected \"dense\", \"onnx\" or \"xgboost\", got %s",
                got(g, sizeof g, fmt));
      goto fail;
    }
  }
  if (cfg->format == TPU_MODEL_FORMAT_DENSE) {
    if ((rc = parse_io(&c, "inputs", json_object_get(root, "inputs"), &cfg->input_name,
                       &cfg->input_width)) != TPU_OK)
      goto fail;
    if ((rc = parse_io(&c, "outputs", json_object_get(root, "outputs"), &cfg->output_name,
                       &cfg->output_width)) != TPU_OK)
      goto fail;
    if ((rc = parse_layers(&c, json_object_get(root, "layers"), cfg)) != TPU_OK) goto fail;
    if (!(cfg->inputs = calloc(1, sizeof *cfg->inputs)) ||
        !(cfg->outputs = calloc(1, sizeof *cfg->outputs)) ||
        !(cfg->inputs[0].name = strdup(cfg->input_name)) ||
        !(cfg->outputs[0].name = strdup(cfg->output_name))) {
      cfg->ninputs = cfg->inputs ? 1 : 0;
      cfg->noutputs = cfg->outputs ? 1 : 0;
      rc = fail(&c, TPU_ENOMEM, "out of memory");
      goto fail;
    }
    cfg->ninputs = cfg->noutputs = 1;
    tpu_model_io_config_t *io[2] = {cfg->inputs, cfg->outputs};
    size_t w[2] = {cfg->input_width, cfg->output_width};
    for (int k = 0; k < 2; k++) {
      snprintf(io[k]->datatype, sizeof io[k]->datatype, "FP32");
      io[k]->rank = 2;
      io[k]->shape[0] = -1;
      io[k]->shape[1] = (int64_t)w[k];
    }
  } else {
    if (json_object_get(root, "layers")) {
      rc = fail(&c, TPU_EINVAL, "layers: not used with format \"%s\" (the graph in the "
                "model file replaces the layer chain); remove it",
                cfg->format == TPU_MODEL_FORMAT_ONNX ? "onnx" : "xgboost");
      goto fail;
    }
    if ((rc = parse_io_list(&c, "inputs", json_object_get(root, "inputs"), &cfg->inputs,
                            &cfg->ninputs)) != TPU_OK ||
        (rc = parse_io_list(&c, "outputs", json_object_get(root, "outputs"), &cfg->outputs,
                            &cfg->noutputs)) != TPU_OK)
      goto fail;
  }
  if ((rc = parse_overrides(&c, json_object_get(root, "precision_overrides"), cfg)) != TPU_OK)
    goto fail;
  if ((rc = parse_reference(&c, json_object_get(root, "reference"), cfg)) != TPU_OK) goto fail;

  json_t *p = json_object_get(root, "precision");
  cfg->precision = TPU_DTYPE_FP32;
  if (p) {
    const char *s = json_is_string(p) ? json_string_value(p) : "";
    if (strcmp(s, "fp32") == 0) cfg->precision = TPU_DTYPE_FP32;
    else if (strcmp(s, "bf16") == 0) cfg->precision = TPU_DTYPE_BF16;
    else if (strcmp(s, "int8") == 0) cfg->precision = TPU_DTYPE_INT8;
    else {
      rc = fail(&c, TPU_EINVAL, "precision: expected \"fp32\", \"bf16\" or \"int8\", got %s",
                got(g, sizeof g, p));
      goto fail;
    }
  }
  if (cfg->format == TPU_MODEL_FORMAT_XGBOOST && cfg->precision != TPU_DTYPE_FP32) {
    rc = fail(&c, TPU_EINVAL, "precision: format \"xgboost\" takes only \"fp32\" (trees "
              "compare and sum exactly in float32; nothing is quantized), got %s",
              got(g, sizeof g, p));
    goto fail;
  }
  if ((rc = parse_calibration(&c, json_object_get(root, "calibration"), cfg)) != TPU_OK)
    goto fail;
  if ((rc = parse_labels(&c, json_object_get(root, "labels"), cfg)) != TPU_OK) goto fail;
  if ((rc = parse_batching(&c, json_object_get(root, "batching"), cfg)) != TPU_OK) goto fail;
  json_t *pc = json_object_get(root, "payload_capture");
  if (pc) {
    if (!json_is_boolean(pc)) {
      rc = fail(&c, TPU_EINVAL, "payload_capture: expected true or false, got %s",
                got(g, sizeof g, pc));
      goto fail;
    }
    cfg->payload_capture = json_is_true(pc) ? TPU_MODEL_CAPTURE_ON : TPU_MODEL_CAPTURE_OFF;
  }
  if ((rc = parse_checkpoint(&c, json_object_get(root, "checkpoint"), cfg)) != TPU_OK) goto fail;
  json_decref(root);
  *out = cfg;
  return TPU_OK;

fail:
  json_decref(root);
  tpu_model_config_free(cfg);
  return rc;
}

tpu_status_t tpu_model_config_load(const char *path, tpu_model_config_t **out, int *sys_errno,
                                   char *err, size_t errlen) {
  ctx_t c = {path ? path : "(null)", err, errlen};
  if (err && errlen) err[0] = '\0';
  if (!path || !out) return fail(&c, TPU_EINVAL, "invalid argument");
  *out = NULL;
  void *buf;
  size_t len;
  /* Not a FIFO, not growing while read, bounded (file.h); the message names the path. */
  int e = tpu_file_read(path, TPU_MODEL_CONFIG_MAX_BYTES, NULL, &buf, &len, NULL, err, errlen);
  if (sys_errno) *sys_errno = e;
  if (e) return e == ENOMEM ? TPU_ENOMEM : TPU_EINVAL;
  tpu_status_t rc = tpu_model_config_parse(buf, len, path, out, err, errlen);
  free(buf);
  return rc;
}
