/*
 * tpu_oip_json.c - Open Inference Protocol v2 REST JSON <-> protobuf messages.
 *
 * DESIGN
 * Parsing first tries a single pass over the text straight into the message (the "fast path"
 * section below) for the plain FP32 bodies that make up the serving traffic; anything it does not
 * take, every error included, goes the general way: text -> (depth and size check on the raw
 * text) -> jansson tree -> message, which alone words the error messages. Each
 * tensor's data is walked twice: once to check its structure against the shape (flat: one array
 * of shape-product scalars; nested: arrays whose lengths are the dims, all the way down), and,
 * once the element count is known to be honest, again to encode every element into a buffer
 * sized up front. Nothing here allocates in proportion to a number the client merely claims.
 *
 * Formatting writes text directly through a small string builder rather than through jansson's
 * dumper, which prints every float with 17 significant digits: tensors read better, and are
 * smaller, with each value in its shortest round-trip form.
 *
 * Messages are built field by field with malloc/strdup and element counts are bumped only after
 * an element is complete, so a half-built message can always be freed with protobuf-c's
 * free_unpacked on any error path.
 */
#include "tpu_oip_json.h"
#include "tpu_fpconv.h"
#include "tpu_proto_int.h"
#include "tpu_text.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- status ---- */

static const char *const status_messages[] = {
#define TPU__OIP_JSON_MSG(name, msg) msg,
    TPU_OIP_JSON_STATUS_MAP(TPU__OIP_JSON_MSG)
#undef TPU__OIP_JSON_MSG
};

const char *tpu_oip_json_strerror(tpu_oip_json_status_t status) {
  if ((unsigned)status >= TPU_OIP_JSON_STATUS_COUNT) return "unknown status";
  return status_messages[status];
}

/* The message into err, and returns st: `return fail(err, errlen, st, ...)`. */
#define fail(err, errlen, st, ...) tpu_errf_ret((st), (err), (errlen), __VA_ARGS__)

static tpu_oip_json_status_t nomem(char *err, size_t errlen) {
  return fail(err, errlen, TPU_OIP_JSON_NOMEM, "out of memory");
}

/* ---- datatypes ---- */

typedef enum { K_BOOL, K_UINT, K_INT, K_FP16, K_BF16, K_FP32, K_FP64, K_BYTES } kind_t;

typedef struct {
  const char *name;
  kind_t kind;
  size_t size; /* bytes per element; 0 for BYTES (variable) */
} dtype_t;

static const dtype_t dtypes[] = {
    {"BOOL", K_BOOL, 1},   {"UINT8", K_UINT, 1}, {"UINT16", K_UINT, 2}, {"UINT32", K_UINT, 4},
    {"UINT64", K_UINT, 8}, {"INT8", K_INT, 1},   {"INT16", K_INT, 2},   {"INT32", K_INT, 4},
    {"INT64", K_INT, 8},   {"FP16", K_FP16, 2},  {"BF16", K_BF16, 2},   {"FP32", K_FP32, 4},
    {"FP64", K_FP64, 8},   {"BYTES", K_BYTES, 0},
};

static const dtype_t *dtype_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dtypes[i].name, name) == 0) return &dtypes[i];
  return NULL;
}

size_t tpu_oip_datatype_size(const char *datatype) {
  const dtype_t *dt = dtype_find(datatype);
  return dt ? dt->size : 0;
}

/* What a JSON array of this type must hold, for messages ("12 numbers"). */
static const char *dtype_noun(const dtype_t *dt) {
  switch (dt->kind) {
  case K_BOOL: return "booleans";
  case K_BYTES: return "strings";
  default: return "numbers";
  }
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE: return "true";
  case JSON_FALSE: return "false";
  case JSON_NULL: return "null";
  }
  return "something else";
}

/* ---- half-precision conversions (round to nearest even) ---- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

static uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
  if (a < 0x38800000u) {                                   /* below 2^-14: subnormal or zero */
    if (a < 0x33000000u) return sign;                      /* below half the smallest subnormal */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return (uint16_t)(sign | r);
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f; /* m × 2^-24 */
    return sign ? -v : v;
  }
  if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13));
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- little-endian stores and loads ---- */

static void store_le(uint8_t *dst, uint64_t v, size_t size) {
  for (size_t i = 0; i < size; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t load_le(const uint8_t *src, size_t size) {
  uint64_t v = 0;
  for (size_t i = 0; i < size; i++) v |= (uint64_t)src[i] << (8 * i);
  return v;
}

/* ---- string builder (tpu_buf_t, tpu_text.h) ---- */

/* Appends s[0..n) as a JSON string literal; the caller has checked it is valid UTF-8. */
static void sb_json_string(tpu_buf_t *b, const char *s, size_t n) {
  tpu_buf_add(b, "\"", 1);
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    tpu_buf_add(b, s + run, i - run);
    run = i + 1;
    switch (c) {
    case '"': tpu_buf_adds(b, "\\\""); break;
    case '\\': tpu_buf_adds(b, "\\\\"); break;
    case '\n': tpu_buf_adds(b, "\\n"); break;
    case '\r': tpu_buf_adds(b, "\\r"); break;
    case '\t': tpu_buf_adds(b, "\\t"); break;
    default: tpu_buf_printf(b, "\\u%04x", c); break;
    }
  }
  tpu_buf_add(b, s + run, n - run);
  tpu_buf_add(b, "\"", 1);
}

/* Appends v in its shortest "%.{6..9}g" round-trip form (tpu_fpconv.h); -1 (nothing appended)
 * when v is NaN or infinite, which JSON has no text for (RFC 8259 section 6): the caller fails,
 * rather than write null or a token that is not JSON. */
static int sb_float(tpu_buf_t *b, float v) {
  char tmp[TPU_FPCONV_LEN];
  size_t n = tpu_fpconv_f32_format(v, tmp);
  if (n == 0) return -1;
  tpu_buf_add(b, tmp, n);
  return 0;
}

/* The same for a double, shortest "%.{15..17}g". */
static int sb_double(tpu_buf_t *b, double v) {
  char tmp[TPU_FPCONV_LEN];
  size_t n = tpu_fpconv_f64_format(v, tmp);
  if (n == 0) return -1;
  tpu_buf_add(b, tmp, n);
  return 0;
}

static void format_shape(char *out, size_t outlen, const int64_t *shape, size_t rank) {
  size_t used = 0;
  int n = snprintf(out, outlen, "[");
  if (n > 0) used = (size_t)n;
  for (size_t i = 0; i < rank && used < outlen; i++) {
    n = snprintf(out + used, outlen - used, "%s%" PRId64, i ? "," : "", shape[i]);
    if (n > 0) used += (size_t)n;
  }
  if (used < outlen) snprintf(out + used, outlen - used, "]");
}

/* ---- loading with limits ---- */

tpu_oip_json_status_t tpu_oip_json_load(const char *text, size_t len,
                                        const tpu_oip_json_limits_t *limits, json_t **out,
                                        char *err, size_t errlen) {
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  if (!text) return fail(err, errlen, TPU_OIP_JSON_SYNTAX, "no JSON text");
  int max_depth = limits && limits->max_depth > 0 ? limits->max_depth
                                                  : TPU_OIP_JSON_DEFAULT_MAX_DEPTH;
  size_t max_bytes = limits && limits->max_bytes ? limits->max_bytes
                                                 : TPU_OIP_JSON_DEFAULT_MAX_BYTES;
  if (len > max_bytes)
    return fail(err, errlen, TPU_OIP_JSON_TOO_LARGE, "body of %zu bytes exceeds the limit of %zu",
                len, max_bytes);
  /* Bracket depth outside strings; jansson rejects whatever this scan gets wrong on bad input. */
  int depth = 0, in_string = 0;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_string = 0;
    } else if (c == '"') {
      in_string = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return fail(err, errlen, TPU_OIP_JSON_TOO_DEEP,
                    "JSON nested deeper than %d levels (at byte %zu)", max_depth, i);
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return fail(err, errlen, TPU_OIP_JSON_SYNTAX, "malformed JSON at line %d, column %d: %s",
                jerr.line, jerr.column, jerr.text);
  *out = root;
  return TPU_OIP_JSON_OK;
}

/* ---- tensors from JSON ---- */

typedef struct {
  char *err;
  size_t errlen;
  /* Triton's binary tensor extension: the bytes after the JSON header (NULL: none sent), and
   * how many of them the inputs read so far have taken. */
  const uint8_t *bin;
  size_t bin_len, bin_off;
} ectx_t;

static tpu_oip_json_status_t parse_shape(ectx_t *e, const json_t *shape, const char *path,
                                         int64_t *dims, size_t *rank, size_t *count) {
  if (!shape)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s.shape: missing", path);
  if (!json_is_array(shape))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.shape: expected an array of non-negative integers, got %s", path,
                json_kind(shape));
  size_t n = json_array_size(shape);
  if (n > TPU_OIP_JSON_MAX_RANK)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.shape: %zu dimensions, at most %d are supported", path, n,
                TPU_OIP_JSON_MAX_RANK);
  uint64_t total = 1;
  for (size_t i = 0; i < n; i++) {
    const json_t *d = json_array_get(shape, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0) {
      if (json_is_integer(d))
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s.shape[%zu]: expected a non-negative integer, got %" JSON_INTEGER_FORMAT,
                    path, i, json_integer_value(d));
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s.shape[%zu]: expected a non-negative integer, got %s", path, i,
                  json_kind(d));
    }
    uint64_t v = (uint64_t)json_integer_value(d);
    dims[i] = (int64_t)v;
    if (v != 0 && total > (uint64_t)INT64_MAX / v) {
      char s[128];
      format_shape(s, sizeof s, dims, i + 1);
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s.shape: element count of %s%s overflows", path, s, i + 1 < n ? "..." : "");
    }
    total *= v;
  }
  *rank = n;
  *count = (size_t)total;
  return TPU_OIP_JSON_OK;
}

/* Checks that nested data matches shape from dimension `dim` down. */
static tpu_oip_json_status_t check_nested(ectx_t *e, const json_t *v, const dtype_t *dt,
                                          const int64_t *shape, size_t rank, size_t dim,
                                          char *path, size_t pathcap) {
  if (dim == rank) return TPU_OIP_JSON_OK; /* a leaf: its type is checked when encoding */
  char s[128];
  format_shape(s, sizeof s, shape, rank);
  if (!json_is_array(v))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: expected an array of %" PRId64 " elements for dimension %zu of shape %s, "
                "got %s",
                path, shape[dim], dim, s, json_kind(v));
  size_t n = json_array_size(v);
  if (n != (size_t)shape[dim]) {
    if (dim == 0 && rank == 1)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s: expected %" PRId64 " %s for shape %s, got %zu", path, shape[0],
                  dtype_noun(dt), s, n);
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: expected %" PRId64 " elements for dimension %zu of shape %s, got %zu", path,
                shape[dim], dim, s, n);
  }
  size_t plen = strlen(path);
  for (size_t i = 0; i < n; i++) {
    snprintf(path + plen, pathcap - plen, "[%zu]", i);
    tpu_oip_json_status_t st =
        check_nested(e, json_array_get(v, i), dt, shape, rank, dim + 1, path, pathcap);
    if (st != TPU_OIP_JSON_OK) return st;
  }
  path[plen] = '\0';
  return TPU_OIP_JSON_OK;
}

/* Encodes one scalar into the output buffer (fixed-size types: exactly dt->size bytes). */
static tpu_oip_json_status_t encode_value(ectx_t *e, const dtype_t *dt, const json_t *v,
                                          const char *path, tpu_buf_t *out) {
  uint8_t tmp[8];
  switch (dt->kind) {
  case K_BOOL:
    if (!json_is_boolean(v))
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected true or false, got %s",
                  path, json_kind(v));
    tmp[0] = json_is_true(v) ? 1 : 0;
    break;
  case K_UINT:
  case K_INT: {
    if (!json_is_integer(v))
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected an integer for %s, got %s",
                  path, dt->name, json_kind(v));
    json_int_t x = json_integer_value(v);
    unsigned bits = (unsigned)(8 * dt->size);
    if (dt->kind == K_UINT) {
      uint64_t max = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
      if (x < 0 || (uint64_t)x > max)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: %" JSON_INTEGER_FORMAT " is out of range for %s [0, %" PRIu64 "]", path,
                    x, dt->name, max);
    } else if (bits < 64) {
      int64_t max = (INT64_C(1) << (bits - 1)) - 1, min = -max - 1;
      if (x < min || x > max)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: %" JSON_INTEGER_FORMAT " is out of range for %s [%" PRId64 ", %" PRId64
                    "]",
                    path, x, dt->name, min, max);
    }
    store_le(tmp, (uint64_t)x, dt->size);
    break;
  }
  case K_FP16:
  case K_BF16:
  case K_FP32:
  case K_FP64: {
    if (!json_is_number(v))
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected a number, got %s", path,
                  json_kind(v));
    double x = json_number_value(v);
    if (dt->kind == K_FP64) {
      uint64_t u;
      memcpy(&u, &x, 8);
      store_le(tmp, u, 8);
      break;
    }
    if (fabs(x) > FLT_MAX)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: %g is out of range for %s", path,
                  x, dt->name);
    float f = (float)x;
    if (dt->kind == K_FP32) {
      store_le(tmp, f32_bits(f), 4);
    } else {
      uint16_t h = dt->kind == K_FP16 ? f32_to_f16(f) : f32_to_bf16(f);
      uint16_t inf = dt->kind == K_FP16 ? 0x7c00 : 0x7f80;
      if ((h & 0x7fff) == inf)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: %g is out of range for %s",
                    path, x, dt->name);
      store_le(tmp, h, 2);
    }
    break;
  }
  case K_BYTES: {
    if (!json_is_string(v))
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected a string, got %s", path,
                  json_kind(v));
    size_t n = json_string_length(v);
    if (n > UINT32_MAX)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: string longer than 4 GiB", path);
    store_le(tmp, n, 4);
    tpu_buf_add(out, (const char *)tmp, 4);
    tpu_buf_add(out, json_string_value(v), n);
    return out->oom ? nomem(e->err, e->errlen) : TPU_OIP_JSON_OK;
  }
  }
  tpu_buf_add(out, (const char *)tmp, dt->size);
  return out->oom ? nomem(e->err, e->errlen) : TPU_OIP_JSON_OK;
}

static tpu_oip_json_status_t encode_nested(ectx_t *e, const json_t *v, const dtype_t *dt,
                                           size_t rank, size_t dim, char *path, size_t pathcap,
                                           tpu_buf_t *out) {
  if (dim == rank) return encode_value(e, dt, v, path, out);
  size_t plen = strlen(path);
  for (size_t i = 0; i < json_array_size(v); i++) {
    snprintf(path + plen, pathcap - plen, "[%zu]", i);
    tpu_oip_json_status_t st =
        encode_nested(e, json_array_get(v, i), dt, rank, dim + 1, path, pathcap, out);
    if (st != TPU_OIP_JSON_OK) return st;
  }
  path[plen] = '\0';
  return TPU_OIP_JSON_OK;
}

/*
 * Decodes shape/datatype/data of a tensor object at `path` ("inputs[0]"). On success the tensor
 * owns t->data (malloc'd); on error it holds nothing.
 */
static tpu_oip_json_status_t decode_meta(ectx_t *e, const json_t *obj, const char *path,
                                         tpu_oip_tensor_t *t, const dtype_t **dtp) {
  memset(t, 0, sizeof *t);
  if (!json_is_object(obj))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected an object, got %s", path,
                json_kind(obj));
  const json_t *jdt = json_object_get(obj, "datatype");
  if (!jdt) return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s.datatype: missing", path);
  if (!json_is_string(jdt))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s.datatype: expected a string, got %s",
                path, json_kind(jdt));
  const dtype_t *dt = dtype_find(json_string_value(jdt));
  if (!dt)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.datatype: unknown datatype \"%.32s\" (expected BOOL, UINT8, UINT16, UINT32, "
                "UINT64, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64 or BYTES)",
                path, json_string_value(jdt));
  snprintf(t->datatype, sizeof t->datatype, "%s", dt->name);
  *dtp = dt;
  return parse_shape(e, json_object_get(obj, "shape"), path, t->shape, &t->rank, &t->count);
}

static tpu_oip_json_status_t decode_tensor(ectx_t *e, const json_t *obj, const char *path,
                                           tpu_oip_tensor_t *t) {
  const dtype_t *dt;
  tpu_oip_json_status_t st = decode_meta(e, obj, path, t, &dt);
  if (st != TPU_OIP_JSON_OK) return st;

  const json_t *data = json_object_get(obj, "data");
  char dpath[512];
  snprintf(dpath, sizeof dpath, "%s.data", path);
  char s[128];
  format_shape(s, sizeof s, t->shape, t->rank);
  if (!data) return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: missing", dpath);
  if (!json_is_array(data))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: expected an array of %zu %s for shape %s, got %s", dpath, t->count,
                dtype_noun(dt), s, json_kind(data));
  /* Nested when the first element is an array (and the shape has dims to nest along). */
  int nested = t->rank > 1 && json_array_size(data) > 0 && json_is_array(json_array_get(data, 0));
  if (nested) {
    st = check_nested(e, data, dt, t->shape, t->rank, 0, dpath, sizeof dpath);
    if (st != TPU_OIP_JSON_OK) return st;
  } else if (json_array_size(data) != t->count) {
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: expected %zu %s for shape %s, got %zu", dpath, t->count, dtype_noun(dt), s,
                json_array_size(data));
  }
  /* The count is now the real number of JSON elements, so sizing the buffer by it is safe. */
  tpu_buf_t out = {0};
  if (dt->size && t->count && tpu_buf_reserve(&out, t->count * dt->size) != 0)
    return nomem(e->err, e->errlen);
  if (nested) {
    st = encode_nested(e, data, dt, t->rank, 0, dpath, sizeof dpath, &out);
  } else {
    size_t plen = strlen(dpath);
    for (size_t i = 0; i < t->count && st == TPU_OIP_JSON_OK; i++) {
      snprintf(dpath + plen, sizeof dpath - plen, "[%zu]", i);
      st = encode_value(e, dt, json_array_get(data, i), dpath, &out);
    }
  }
  if (st != TPU_OIP_JSON_OK) {
    tpu_buf_free(&out);
    return st;
  }
  t->data = (uint8_t *)tpu_buf_detach(&out, &t->nbytes); /* NULL when empty */
  return TPU_OIP_JSON_OK;
}

tpu_oip_json_status_t tpu_oip_json_tensor_decode(const json_t *obj, const char *path,
                                                 tpu_oip_tensor_t *out, char *err, size_t errlen) {
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output tensor");
  ectx_t e = {err, errlen, NULL, 0, 0};
  if (!obj) {
    memset(out, 0, sizeof *out);
    return fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: missing", path ? path : "tensor");
  }
  return decode_tensor(&e, obj, path ? path : "tensor", out);
}

void tpu_oip_tensor_clear(tpu_oip_tensor_t *t) {
  if (!t) return;
  free(t->data);
  memset(t, 0, sizeof *t);
}

/* ---- infer request ---- */

/*
 * Every map<string, InferParameter> entry struct protoc-c generates has this same layout
 * (base, key, value), so one builder serves the request's, inputs' and outputs' maps; only the
 * descriptor differs.
 */
typedef Inference__ModelInferRequest__ParametersEntry param_entry_t;

static tpu_oip_json_status_t parse_params(ectx_t *e, const json_t *obj, const char *path,
                                          const ProtobufCMessageDescriptor *entry_desc,
                                          size_t *n_out, param_entry_t ***arr_out) {
  if (!obj) return TPU_OIP_JSON_OK;
  if (!json_is_object(obj))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected an object, got %s", path,
                json_kind(obj));
  size_t n = json_object_size(obj);
  if (n == 0) return TPU_OIP_JSON_OK;
  param_entry_t **arr = calloc(n, sizeof *arr);
  if (!arr) return nomem(e->err, e->errlen);
  *arr_out = arr;
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    Inference__InferParameter p = INFERENCE__INFER_PARAMETER__INIT;
    if (json_is_boolean(v)) {
      p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
      p.bool_param = json_is_true(v);
    } else if (json_is_integer(v)) {
      p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
      p.int64_param = json_integer_value(v);
    } else if (json_is_real(v)) {
      p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
      p.double_param = json_real_value(v);
    } else if (json_is_string(v)) {
      p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
      p.string_param = strdup(json_string_value(v));
      if (!p.string_param) return nomem(e->err, e->errlen);
    } else {
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s.%s: expected a boolean, number or string, got %s", path, key, json_kind(v));
    }
    param_entry_t *ent = malloc(entry_desc->sizeof_message);
    Inference__InferParameter *pv = malloc(sizeof *pv);
    char *k = strdup(key);
    if (!ent || !pv || !k) {
      free(ent);
      free(pv);
      free(k);
      if (p.parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
        free(p.string_param);
      return nomem(e->err, e->errlen);
    }
    protobuf_c_message_init(entry_desc, ent);
    *pv = p;
    ent->key = k;
    ent->value = pv;
    arr[(*n_out)++] = ent;
  }
  return TPU_OIP_JSON_OK;
}

static tpu_oip_json_status_t opt_string(ectx_t *e, const json_t *obj, const char *key,
                                        const char *path, char **out) {
  const json_t *v = json_object_get(obj, key);
  if (!v) return TPU_OIP_JSON_OK;
  if (!json_is_string(v))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s%s: expected a string, got %s", path,
                key, json_kind(v));
  char *s = strdup(json_string_value(v));
  if (!s) return nomem(e->err, e->errlen);
  *out = s;
  return TPU_OIP_JSON_OK;
}

/*
 * An input whose data is in the binary section (parameters.binary_data_size): its bytes are the
 * next `size` of the section, checked against shape and datatype (BYTES: `count` elements, each
 * a 4-byte little-endian length and its bytes) before anything is allocated. On success the
 * tensor owns a copy of them.
 */
static tpu_oip_json_status_t decode_binary(ectx_t *e, const json_t *obj, const char *path,
                                           const json_t *jsize, tpu_oip_tensor_t *t) {
  const dtype_t *dt;
  tpu_oip_json_status_t st = decode_meta(e, obj, path, t, &dt);
  if (st != TPU_OIP_JSON_OK) return st;
  if (!json_is_integer(jsize) || json_integer_value(jsize) < 0)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.parameters.binary_data_size: expected a non-negative integer, got %s", path,
                json_kind(jsize));
  uint64_t size = (uint64_t)json_integer_value(jsize);
  if (json_object_get(obj, "data"))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: has both \"data\" and parameters.binary_data_size (send one)", path);
  if (!e->bin)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.parameters.binary_data_size: the request has no binary data (send the JSON "
                "header's length in Inference-Header-Content-Length and the tensors after it)",
                path);
  size_t left = e->bin_len - e->bin_off;
  if (size > left)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.parameters.binary_data_size: %" PRIu64 " bytes, but only %zu bytes of binary "
                "data are left after the inputs before it",
                path, size, left);
  const uint8_t *p = e->bin + e->bin_off;
  char s[128];
  format_shape(s, sizeof s, t->shape, t->rank);
  if (dt->size) {
    if (t->count > SIZE_MAX / dt->size || size != (uint64_t)t->count * dt->size)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s.parameters.binary_data_size: %" PRIu64 " bytes, expected %zu for shape %s "
                  "of %s (%zu bytes each)",
                  path, size, t->count * dt->size, s, dt->name, dt->size);
  } else { /* BYTES: walk the length prefixes */
    size_t off = 0;
    for (size_t i = 0; i < t->count; i++) {
      if (size - off < 4)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: binary BYTES data ends at element %zu of the %zu shape %s needs", path,
                    i, t->count, s);
      uint64_t n = load_le(p + off, 4);
      off += 4;
      if (n > size - off)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: binary BYTES element %zu claims %" PRIu64 " bytes, %zu remain", path, i,
                    n, (size_t)(size - off));
      off += (size_t)n;
    }
    if (off != size)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s: %zu bytes of binary BYTES data left over after the %zu elements of shape %s",
                  path, (size_t)(size - off), t->count, s);
  }
  if (size) {
    t->data = malloc((size_t)size);
    if (!t->data) return nomem(e->err, e->errlen);
    memcpy(t->data, p, (size_t)size);
  }
  t->nbytes = (size_t)size;
  e->bin_off += (size_t)size;
  return TPU_OIP_JSON_OK;
}

static tpu_oip_json_status_t parse_input(ectx_t *e, const json_t *in, size_t idx,
                                         Inference__ModelInferRequest *req) {
  char path[64];
  snprintf(path, sizeof path, "inputs[%zu]", idx);
  if (!json_is_object(in))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected an object, got %s", path,
                json_kind(in));
  const json_t *name = json_object_get(in, "name");
  if (!name) return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s.name: missing", path);
  if (!json_is_string(name) || json_string_length(name) == 0)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.name: expected a non-empty string, got %s", path,
                json_is_string(name) ? "an empty string" : json_kind(name));

  /* Data in the binary section when the input says its size there (with a section sent; with
   * none, an input that also has "data" uses it, as the single-pass parser does). */
  const json_t *params = json_object_get(in, "parameters");
  const json_t *jsize = json_is_object(params) ? json_object_get(params, "binary_data_size") : NULL;
  tpu_oip_tensor_t t;
  tpu_oip_json_status_t st = jsize && (e->bin || !json_object_get(in, "data"))
                                 ? decode_binary(e, in, path, jsize, &t)
                                 : decode_tensor(e, in, path, &t);
  if (st != TPU_OIP_JSON_OK) return st;

  Inference__ModelInferRequest__InferInputTensor *x = malloc(sizeof *x);
  if (!x) goto oom;
  inference__model_infer_request__infer_input_tensor__init(x);
  req->inputs[req->n_inputs++] = x; /* from here on free_unpacked owns x */
  x->name = strdup(json_string_value(name));
  x->datatype = strdup(t.datatype);
  if (!x->name || !x->datatype) goto oom;
  if (t.rank) {
    x->shape = malloc(t.rank * sizeof *x->shape);
    if (!x->shape) goto oom;
    memcpy(x->shape, t.shape, t.rank * sizeof *x->shape);
    x->n_shape = t.rank;
  }
  char ppath[80];
  snprintf(ppath, sizeof ppath, "%s.parameters", path);
  st = parse_params(e, json_object_get(in, "parameters"), ppath,
                    &inference__model_infer_request__infer_input_tensor__parameters_entry__descriptor,
                    &x->n_parameters, (param_entry_t ***)&x->parameters);
  if (st != TPU_OIP_JSON_OK) {
    tpu_oip_tensor_clear(&t);
    return st;
  }
  /* raw_input_contents[idx] takes the tensor's bytes over. */
  req->raw_input_contents[idx].data = t.data;
  req->raw_input_contents[idx].len = t.nbytes;
  req->n_raw_input_contents = idx + 1;
  return TPU_OIP_JSON_OK;

oom:
  tpu_oip_tensor_clear(&t);
  return nomem(e->err, e->errlen);
}

static tpu_oip_json_status_t parse_output(ectx_t *e, const json_t *o, size_t idx,
                                          Inference__ModelInferRequest *req) {
  char path[64];
  snprintf(path, sizeof path, "outputs[%zu]", idx);
  if (!json_is_object(o))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: expected an object, got %s", path,
                json_kind(o));
  const json_t *name = json_object_get(o, "name");
  if (!name) return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s.name: missing", path);
  if (!json_is_string(name) || json_string_length(name) == 0)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s.name: expected a non-empty string, got %s", path,
                json_is_string(name) ? "an empty string" : json_kind(name));
  Inference__ModelInferRequest__InferRequestedOutputTensor *x = malloc(sizeof *x);
  if (!x) return nomem(e->err, e->errlen);
  inference__model_infer_request__infer_requested_output_tensor__init(x);
  req->outputs[req->n_outputs++] = x;
  x->name = strdup(json_string_value(name));
  if (!x->name) return nomem(e->err, e->errlen);
  char ppath[80];
  snprintf(ppath, sizeof ppath, "%s.parameters", path);
  return parse_params(
      e, json_object_get(o, "parameters"), ppath,
      &inference__model_infer_request__infer_requested_output_tensor__parameters_entry__descriptor,
      &x->n_parameters, (param_entry_t ***)&x->parameters);
}

static tpu_oip_json_status_t request_from_json(ectx_t *ep, const json_t *root,
                                               const char *model_name, const char *model_version,
                                               Inference__ModelInferRequest **out) {
  char *err = ep->err;
  size_t errlen = ep->errlen;
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  ectx_t e = *ep;
  if (!json_is_object(root))
    return fail(err, errlen, TPU_OIP_JSON_INVALID, "request: expected a JSON object, got %s",
                root ? json_kind(root) : "nothing");
  const json_t *inputs = json_object_get(root, "inputs");
  if (!inputs) return fail(err, errlen, TPU_OIP_JSON_INVALID, "inputs: missing");
  if (!json_is_array(inputs) || json_array_size(inputs) == 0)
    return fail(err, errlen, TPU_OIP_JSON_INVALID,
                "inputs: expected a non-empty array of tensors, got %s",
                json_is_array(inputs) ? "an empty array" : json_kind(inputs));
  const json_t *outputs = json_object_get(root, "outputs");
  if (outputs && !json_is_array(outputs))
    return fail(err, errlen, TPU_OIP_JSON_INVALID, "outputs: expected an array, got %s",
                json_kind(outputs));

  Inference__ModelInferRequest *req = malloc(sizeof *req);
  if (!req) return nomem(err, errlen);
  inference__model_infer_request__init(req);
  tpu_oip_json_status_t st = TPU_OIP_JSON_OK;
  size_t nin = json_array_size(inputs), nout = outputs ? json_array_size(outputs) : 0;

  if ((model_name && *model_name && !(req->model_name = strdup(model_name))) ||
      (model_version && *model_version && !(req->model_version = strdup(model_version))))
    goto oom;
  /* A failed strdup above left the field NULL; put the default back so free_unpacked is happy. */
  st = opt_string(&e, root, "id", "", &req->id);
  if (st != TPU_OIP_JSON_OK) goto fail;
  st = parse_params(&e, json_object_get(root, "parameters"), "parameters",
                    &inference__model_infer_request__parameters_entry__descriptor,
                    &req->n_parameters, &req->parameters);
  if (st != TPU_OIP_JSON_OK) goto fail;

  req->inputs = calloc(nin, sizeof *req->inputs);
  req->raw_input_contents = calloc(nin, sizeof *req->raw_input_contents);
  if (!req->inputs || !req->raw_input_contents) goto oom;
  for (size_t i = 0; i < nin; i++) {
    st = parse_input(&e, json_array_get(inputs, i), i, req);
    if (st != TPU_OIP_JSON_OK) goto fail;
  }
  if (nout) {
    req->outputs = calloc(nout, sizeof *req->outputs);
    if (!req->outputs) goto oom;
    for (size_t i = 0; i < nout; i++) {
      st = parse_output(&e, json_array_get(outputs, i), i, req);
      if (st != TPU_OIP_JSON_OK) goto fail;
    }
  }
  if (e.bin && e.bin_off != e.bin_len) {
    st = fail(err, errlen, TPU_OIP_JSON_INVALID,
              "binary data: %zu bytes follow the JSON header, but the inputs' binary_data_size "
              "parameters account for %zu",
              e.bin_len, e.bin_off);
    goto fail;
  }
  *out = req;
  return TPU_OIP_JSON_OK;

oom:
  st = nomem(err, errlen);
fail:
  if (!req->model_name) req->model_name = (char *)protobuf_c_empty_string;
  if (!req->model_version) req->model_version = (char *)protobuf_c_empty_string;
  inference__model_infer_request__free_unpacked(req, NULL);
  return st;
}

tpu_oip_json_status_t tpu_oip_json_infer_request_from_json(const json_t *root,
                                                           const char *model_name,
                                                           const char *model_version,
                                                           Inference__ModelInferRequest **out,
                                                           char *err, size_t errlen) {
  ectx_t e = {err, errlen, NULL, 0, 0};
  return request_from_json(&e, root, model_name, model_version, out);
}

/* ---- infer request: the single-pass fast path ---- */

/*
 * The common request, {"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype": "FP32",
 * "data", "parameters"?}], "outputs"?}, parsed in one pass over the text straight into the
 * message: no jansson tree, no per-element allocation, numbers converted in place. It accepts a
 * strict subset of what the jansson path accepts and builds the very same message for it (the
 * tests compare both on random and mutated bodies); anything else declines and the jansson path
 * runs, so every error message still comes from one place. Declined: escapes or control bytes
 * in strings, invalid UTF-8, unknown or duplicate keys, datatypes other than FP32, "data"
 * before "shape" or "datatype", parameter values other than strings, booleans and numbers,
 * numbers jansson would refuse (integers beyond int64, reals that overflow), and every error.
 *
 * Numbers are converted exactly as the jansson path does (strtod, or strtoll for integer tokens,
 * then a cast to float): tpu_fpconv scans the token and rounds it correctly, as strtod does
 * (Clinger's fast path or one 64x128-bit product; strtod itself for the rare hard cases).
 */
typedef struct {
  const char *p, *end;
  int depth, max_depth;
  /* A binary-tensor request's section after the JSON header (NULL: none), and how much of it
   * the inputs so far took: an input with parameters.binary_data_size and no "data" takes the
   * next count x 4 bytes, as the jansson path's decode_binary does. */
  const uint8_t *bin;
  size_t bin_len, bin_off;
} fp_t;

static void fp_ws(fp_t *f) {
  while (f->p < f->end && (*f->p == ' ' || *f->p == '\n' || *f->p == '\r' || *f->p == '\t'))
    f->p++;
}

/* Consumes `c` (after whitespace); 0 when the next byte is something else. */
static int fp_eat(fp_t *f, char c) {
  fp_ws(f);
  if (f->p < f->end && *f->p == c) {
    f->p++;
    return 1;
  }
  return 0;
}

/* Opens an array or object: counts the nesting the depth limit applies to. */
static int fp_open(fp_t *f, char c) {
  if (!fp_eat(f, c)) return 0;
  return ++f->depth <= f->max_depth;
}

/* A string without escapes or control bytes, valid UTF-8: [*s, *s + *n). */
static int fp_string(fp_t *f, const char **s, size_t *n) {
  if (!fp_eat(f, '"')) return 0;
  const char *b = f->p;
  int high = 0;
  while (f->p < f->end) {
    unsigned char c = (unsigned char)*f->p;
    if (c == '"') {
      *s = b;
      *n = (size_t)(f->p - b);
      f->p++;
      return !high || tpu_utf8_valid((const uint8_t *)b, *n);
    }
    if (c == '\\' || c < 0x20) return 0;
    high |= c >= 0x80;
    f->p++;
  }
  return 0;
}

static int fp_key_is(const char *s, size_t n, const char *key) {
  return strlen(key) == n && memcmp(s, key, n) == 0;
}

static char *fp_strdup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/*
 * A JSON number token. *is_int says it had no fraction or exponent (jansson makes those
 * integers: *iv); otherwise *dv is strtod's value. 0 for anything jansson would refuse.
 */
static int fp_number(fp_t *f, int *is_int, int64_t *iv, double *dv) {
  fp_ws(f);
  tpu_fpconv_num_t num;
  if (!tpu_fpconv_scan(f->p, (size_t)(f->end - f->p), &num)) return 0;
  const char *s = f->p;
  f->p += num.len;
  *is_int = num.integer;
  if (num.integer) { /* strtoll: at most 19 digits and within int64 */
    uint64_t m = num.w;
    if (num.digits > 19 || (num.neg ? m > (uint64_t)INT64_MAX + 1 : m > (uint64_t)INT64_MAX))
      return 0;
    *iv = num.neg ? (int64_t)(0 - m) : (int64_t)m;
    return 1;
  }
  double d;
  if (!tpu_fpconv_num_f64(&num, s, &d)) return 0; /* no memory for a long token's copy */
  if (isinf(d)) return 0;                          /* jansson: "real number overflow" */
  *dv = d;
  return 1;
}

/* One FP32 element, stored little-endian at dst. */
static int fp_f32(fp_t *f, uint8_t *dst) {
  int is_int;
  int64_t iv;
  double d;
  if (!fp_number(f, &is_int, &iv, &d)) return 0;
  if (is_int) d = (double)iv;
  if (fabs(d) > FLT_MAX) return 0;
  store_le(dst, f32_bits((float)d), 4);
  return 1;
}

/* n FP32 elements "x, y, ...]" after an opened '[' (n may be 0). */
static int fp_f32_run(fp_t *f, uint8_t *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (i && !fp_eat(f, ',')) return 0;
    if (!fp_f32(f, dst + 4 * i)) return 0;
  }
  if (!fp_eat(f, ']')) return 0;
  f->depth--;
  return 1;
}

/* The elements of dimension `dim` of nested data and its closing ']' (its '[' already read);
 * *at advances over the elements stored. Every level must hold exactly its dim's count, so the
 * leaves number exactly the shape's product, which dst was sized for. */
static int fp_nested(fp_t *f, const int64_t *shape, size_t rank, size_t dim, uint8_t *dst,
                     size_t *at) {
  size_t n = (size_t)shape[dim];
  if (dim + 1 == rank) {
    if (!fp_f32_run(f, n ? dst + 4 * *at : dst, n)) return 0; /* dst is NULL for 0 elements */
    *at += n;
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    if (i && !fp_eat(f, ',')) return 0;
    if (!fp_open(f, '[') || !fp_nested(f, shape, rank, dim + 1, dst, at)) return 0;
  }
  if (!fp_eat(f, ']')) return 0;
  f->depth--;
  return 1;
}

/* A parameters object into (*n_out, *arr_out), built as parse_params builds it. */
static int fp_params(fp_t *f, const ProtobufCMessageDescriptor *entry_desc, size_t *n_out,
                     param_entry_t ***arr_out) {
  if (!fp_open(f, '{')) return 0;
  if (fp_eat(f, '}')) {
    f->depth--;
    return 1;
  }
  size_t cap = 0;
  do {
    const char *k;
    size_t kn;
    if (!fp_string(f, &k, &kn) || !fp_eat(f, ':')) return 0;
    for (size_t i = 0; i < *n_out; i++) /* duplicates: jansson refuses them */
      if (fp_key_is(k, kn, (*arr_out)[i]->key)) return 0;
    Inference__InferParameter p = INFERENCE__INFER_PARAMETER__INIT;
    fp_ws(f);
    if (f->p >= f->end) return 0;
    char c = *f->p;
    if (c == '"') {
      const char *s;
      size_t sn;
      if (!fp_string(f, &s, &sn)) return 0;
      p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
      if (!(p.string_param = fp_strdup(s, sn))) return 0;
    } else if (c == 't' || c == 'f') {
      size_t wl = c == 't' ? 4 : 5;
      if ((size_t)(f->end - f->p) < wl || memcmp(f->p, c == 't' ? "true" : "false", wl) != 0)
        return 0;
      f->p += wl;
      p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
      p.bool_param = c == 't';
    } else {
      int is_int;
      int64_t iv;
      double dv;
      if (!fp_number(f, &is_int, &iv, &dv)) return 0;
      if (is_int) {
        p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
        p.int64_param = iv;
      } else {
        p.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
        p.double_param = dv;
      }
    }
    if (*n_out == cap) {
      size_t ncap = cap ? cap * 2 : 4;
      param_entry_t **arr = realloc(*arr_out, ncap * sizeof *arr);
      if (!arr) goto oom;
      *arr_out = arr;
      cap = ncap;
    }
    param_entry_t *ent = malloc(entry_desc->sizeof_message);
    Inference__InferParameter *pv = malloc(sizeof *pv);
    char *key = fp_strdup(k, kn);
    if (!ent || !pv || !key) {
      free(ent);
      free(pv);
      free(key);
      goto oom;
    }
    protobuf_c_message_init(entry_desc, ent);
    *pv = p;
    ent->key = key;
    ent->value = pv;
    (*arr_out)[(*n_out)++] = ent;
    continue;
  oom:
    if (p.parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
      free(p.string_param);
    return 0;
  } while (fp_eat(f, ','));
  if (!fp_eat(f, '}')) return 0;
  f->depth--;
  return 1;
}

/* One element of "inputs", appended to req (its arrays have room). */
static int fp_input(fp_t *f, Inference__ModelInferRequest *req, size_t text_len) {
  if (!fp_open(f, '{')) return 0;
  Inference__ModelInferRequest__InferInputTensor *x = malloc(sizeof *x);
  if (!x) return 0;
  inference__model_infer_request__infer_input_tensor__init(x);
  size_t idx = req->n_inputs;
  req->inputs[req->n_inputs++] = x; /* from here on free_unpacked owns x */
  req->raw_input_contents[idx].data = NULL;
  req->raw_input_contents[idx].len = 0;
  req->n_raw_input_contents = idx + 1;
  unsigned seen = 0; /* 1 name, 2 shape, 4 datatype, 8 data, 16 parameters */
  int64_t shape[TPU_OIP_JSON_MAX_RANK];
  size_t rank = 0, count = 1;
  do {
    const char *k;
    size_t kn;
    if (!fp_string(f, &k, &kn) || !fp_eat(f, ':')) return 0;
    unsigned bit = fp_key_is(k, kn, "name")         ? 1u
                   : fp_key_is(k, kn, "shape")      ? 2u
                   : fp_key_is(k, kn, "datatype")   ? 4u
                   : fp_key_is(k, kn, "data")       ? 8u
                   : fp_key_is(k, kn, "parameters") ? 16u
                                                    : 0u;
    if (!bit || (seen & bit)) return 0;
    seen |= bit;
    if (bit == 1) {
      const char *s;
      size_t n;
      if (!fp_string(f, &s, &n) || n == 0 || !(x->name = fp_strdup(s, n))) return 0;
    } else if (bit == 2) {
      if (!fp_open(f, '[')) return 0;
      if (!fp_eat(f, ']')) {
        do {
          fp_ws(f);
          if (rank == TPU_OIP_JSON_MAX_RANK || f->p >= f->end || *f->p == '-') return 0;
          int is_int;
          int64_t v;
          double dv;
          if (!fp_number(f, &is_int, &v, &dv) || !is_int) return 0;
          if (v != 0 && count > (size_t)INT64_MAX / (uint64_t)v) return 0;
          count *= (size_t)v;
          shape[rank++] = v;
        } while (fp_eat(f, ','));
        if (!fp_eat(f, ']')) return 0;
      }
      f->depth--;
    } else if (bit == 4) {
      const char *s;
      size_t n;
      if (!fp_string(f, &s, &n) || !fp_key_is(s, n, "FP32")) return 0;
      if (!(x->datatype = fp_strdup(s, n))) return 0;
    } else if (bit == 8) {
      if ((seen & 6u) != 6u) return 0; /* data before its shape or datatype */
      /* Each element takes at least two bytes of text ("1,"), so a count the text cannot
       * hold is an error the jansson path reports; nothing is allocated for it here. */
      if (count > text_len / 2 + 1) return 0;
      uint8_t *dst = count ? malloc(count * 4) : NULL;
      if (count && !dst) return 0;
      req->raw_input_contents[idx].data = dst; /* owned by the message from here */
      req->raw_input_contents[idx].len = count * 4;
      if (!fp_open(f, '[')) return 0;
      fp_ws(f);
      if (rank > 1 && f->p < f->end && *f->p == '[') { /* nested, as the jansson path says */
        size_t at = 0;
        if (!fp_nested(f, shape, rank, 0, dst, &at)) return 0;
      } else if (!fp_f32_run(f, dst, count)) {
        return 0;
      }
    } else {
      if (!fp_params(f,
                     &inference__model_infer_request__infer_input_tensor__parameters_entry__descriptor,
                     &x->n_parameters, (param_entry_t ***)&x->parameters))
        return 0;
    }
  } while (fp_eat(f, ','));
  if (!fp_eat(f, '}') || (seen & 7u) != 7u) return 0;
  f->depth--;
  /* Its size in the binary section: as decode_binary, for the one case this path takes (FP32,
   * an integer size of exactly count x 4 bytes, no "data"); everything else is declined and
   * the jansson path says what is wrong. */
  int64_t bsize = -1;
  for (size_t i = 0; i < x->n_parameters; i++)
    if (strcmp(x->parameters[i]->key, "binary_data_size") == 0) {
      const Inference__InferParameter *v = x->parameters[i]->value;
      if (!f->bin) break; /* no section: "data" is used, or the jansson path complains */
      if (!v || v->parameter_choice_case !=
                    INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM ||
          (seen & 8u))
        return 0;
      bsize = v->int64_param;
    }
  if (bsize >= 0) {
    if (count > SIZE_MAX / 4 || (uint64_t)bsize != (uint64_t)count * 4 ||
        (size_t)bsize > f->bin_len - f->bin_off)
      return 0;
    uint8_t *dst = bsize ? malloc((size_t)bsize) : NULL;
    if (bsize && !dst) return 0;
    if (bsize) memcpy(dst, f->bin + f->bin_off, (size_t)bsize);
    req->raw_input_contents[idx].data = dst; /* owned by the message from here */
    req->raw_input_contents[idx].len = (size_t)bsize;
    f->bin_off += (size_t)bsize;
  } else if (!(seen & 8u)) {
    return 0;
  }
  if (rank) {
    x->shape = malloc(rank * sizeof *x->shape);
    if (!x->shape) return 0;
    memcpy(x->shape, shape, rank * sizeof *x->shape);
    x->n_shape = rank;
  }
  return 1;
}

/* One element of "outputs", appended to req (its array has room). */
static int fp_output(fp_t *f, Inference__ModelInferRequest *req) {
  if (!fp_open(f, '{')) return 0;
  Inference__ModelInferRequest__InferRequestedOutputTensor *x = malloc(sizeof *x);
  if (!x) return 0;
  inference__model_infer_request__infer_requested_output_tensor__init(x);
  req->outputs[req->n_outputs++] = x;
  unsigned seen = 0;
  do {
    const char *k;
    size_t kn;
    if (!fp_string(f, &k, &kn) || !fp_eat(f, ':')) return 0;
    if (fp_key_is(k, kn, "name") && !(seen & 1u)) {
      const char *s;
      size_t n;
      seen |= 1u;
      if (!fp_string(f, &s, &n) || n == 0 || !(x->name = fp_strdup(s, n))) return 0;
    } else if (fp_key_is(k, kn, "parameters") && !(seen & 2u)) {
      seen |= 2u;
      if (!fp_params(
              f,
              &inference__model_infer_request__infer_requested_output_tensor__parameters_entry__descriptor,
              &x->n_parameters, (param_entry_t ***)&x->parameters))
        return 0;
    } else {
      return 0;
    }
  } while (fp_eat(f, ','));
  if (!fp_eat(f, '}') || !(seen & 1u)) return 0;
  f->depth--;
  return 1;
}

/* Appends one more slot to an array of pointers grown by doubling (*cap). */
static int fp_grow(void **arr, size_t n, size_t *cap, size_t elem) {
  if (n < *cap) return 1;
  size_t ncap = *cap ? *cap * 2 : 4;
  void *p = realloc(*arr, ncap * elem);
  if (!p) return 0;
  *arr = p;
  *cap = ncap;
  return 1;
}

int tpu__oip_json_infer_fast(const char *text, size_t len, const char *model_name,
                             const char *model_version, const tpu_oip_json_limits_t *limits,
                             const uint8_t *bin, size_t bin_len,
                             Inference__ModelInferRequest **out) {
  *out = NULL;
  size_t max_bytes = limits && limits->max_bytes ? limits->max_bytes
                                                 : TPU_OIP_JSON_DEFAULT_MAX_BYTES;
  if (!text || len > max_bytes) return 0;
  fp_t f = {text, text + len, 0,
            limits && limits->max_depth > 0 ? limits->max_depth : TPU_OIP_JSON_DEFAULT_MAX_DEPTH,
            bin, bin ? bin_len : 0, 0};
  Inference__ModelInferRequest *req = malloc(sizeof *req);
  if (!req) return 0;
  inference__model_infer_request__init(req);
  size_t incap = 0, rawcap = 0, outcap = 0;
  unsigned seen = 0; /* 1 id, 2 parameters, 4 inputs, 8 outputs */
  if ((model_name && *model_name && !(req->model_name = strdup(model_name))) ||
      (model_version && *model_version && !(req->model_version = strdup(model_version))))
    goto decline;
  if (!fp_open(&f, '{')) goto decline;
  do {
    const char *k;
    size_t kn;
    if (!fp_string(&f, &k, &kn) || !fp_eat(&f, ':')) goto decline;
    unsigned bit = fp_key_is(k, kn, "id")           ? 1u
                   : fp_key_is(k, kn, "parameters") ? 2u
                   : fp_key_is(k, kn, "inputs")     ? 4u
                   : fp_key_is(k, kn, "outputs")    ? 8u
                                                    : 0u;
    if (!bit || (seen & bit)) goto decline;
    seen |= bit;
    if (bit == 1) {
      const char *s;
      size_t n;
      if (!fp_string(&f, &s, &n) || !(req->id = fp_strdup(s, n))) goto decline;
    } else if (bit == 2) {
      if (!fp_params(&f, &inference__model_infer_request__parameters_entry__descriptor,
                     &req->n_parameters, &req->parameters))
        goto decline;
    } else if (bit == 4) {
      if (!fp_open(&f, '[')) goto decline;
      do {
        if (!fp_grow((void **)&req->inputs, req->n_inputs, &incap, sizeof *req->inputs) ||
            !fp_grow((void **)&req->raw_input_contents, req->n_inputs, &rawcap,
                     sizeof *req->raw_input_contents))
          goto decline;
        if (!fp_input(&f, req, len)) goto decline;
      } while (fp_eat(&f, ','));
      if (!fp_eat(&f, ']')) goto decline;
      f.depth--;
    } else {
      if (!fp_open(&f, '[')) goto decline;
      if (!fp_eat(&f, ']')) {
        do {
          if (!fp_grow((void **)&req->outputs, req->n_outputs, &outcap, sizeof *req->outputs) ||
              !fp_output(&f, req))
            goto decline;
        } while (fp_eat(&f, ','));
        if (!fp_eat(&f, ']')) goto decline;
      }
      f.depth--;
    }
  } while (fp_eat(&f, ','));
  if (!fp_eat(&f, '}') || !(seen & 4u)) goto decline;
  fp_ws(&f);
  if (f.p != f.end || f.bin_off != f.bin_len) goto decline; /* binary bytes left over */
  *out = req;
  return 1;
decline:
  if (!req->model_name) req->model_name = (char *)protobuf_c_empty_string;
  if (!req->model_version) req->model_version = (char *)protobuf_c_empty_string;
  inference__model_infer_request__free_unpacked(req, NULL);
  return 0;
}

tpu_oip_json_status_t tpu_oip_json_infer_request_parse(const char *text, size_t len,
                                                       const char *model_name,
                                                       const char *model_version,
                                                       const tpu_oip_json_limits_t *limits,
                                                       Inference__ModelInferRequest **out,
                                                       char *err, size_t errlen) {
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  if (tpu__oip_json_infer_fast(text, len, model_name, model_version, limits, NULL, 0, out))
    return TPU_OIP_JSON_OK;
  json_t *root;
  tpu_oip_json_status_t st = tpu_oip_json_load(text, len, limits, &root, err, errlen);
  if (st != TPU_OIP_JSON_OK) return st;
  st = tpu_oip_json_infer_request_from_json(root, model_name, model_version, out, err, errlen);
  json_decref(root);
  return st;
}

tpu_oip_json_status_t tpu_oip_json_infer_request_parse_binary(
    const char *body, size_t len, size_t json_len, const char *model_name,
    const char *model_version, const tpu_oip_json_limits_t *limits,
    Inference__ModelInferRequest **out, char *err, size_t errlen) {
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  if (json_len > len)
    return fail(err, errlen, TPU_OIP_JSON_INVALID,
                "Inference-Header-Content-Length: %zu bytes, but the body has only %zu", json_len,
                len);
  /* A non-NULL section pointer even when it is empty: the header was sent. */
  static const uint8_t none[1];
  if (tpu__oip_json_infer_fast(body, json_len, model_name, model_version, limits,
                               len > json_len ? (const uint8_t *)body + json_len : none,
                               len - json_len, out))
    return TPU_OIP_JSON_OK;
  return tpu__oip_json_infer_binary_jansson(body, len, json_len, model_name, model_version,
                                            limits, out, err, errlen);
}

tpu_oip_json_status_t tpu__oip_json_infer_binary_jansson(
    const char *body, size_t len, size_t json_len, const char *model_name,
    const char *model_version, const tpu_oip_json_limits_t *limits,
    Inference__ModelInferRequest **out, char *err, size_t errlen) {
  *out = NULL;
  if (json_len > len)
    return fail(err, errlen, TPU_OIP_JSON_INVALID,
                "Inference-Header-Content-Length: %zu bytes, but the body has only %zu", json_len,
                len);
  static const uint8_t none[1];
  json_t *root;
  tpu_oip_json_status_t st = tpu_oip_json_load(body, json_len, limits, &root, err, errlen);
  if (st != TPU_OIP_JSON_OK) return st;
  ectx_t e = {err, errlen, len > json_len ? (const uint8_t *)body + json_len : none,
              len - json_len, 0};
  st = request_from_json(&e, root, model_name, model_version, out);
  json_decref(root);
  return st;
}

/* ---- tensors to JSON ---- */

/* The refusal of a NaN or infinite element: the whole conversion fails. */
static tpu_oip_json_status_t not_finite(ectx_t *e, const char *what, size_t i, double v) {
  return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
              "%s: element %zu is %s, which JSON cannot express (RFC 8259 has no NaN or "
              "infinity)", what, i, isnan(v) ? "NaN" : v > 0 ? "infinity" : "-infinity");
}

/* Appends `count` elements of raw little-endian data as a JSON array. */
static tpu_oip_json_status_t format_raw_data(ectx_t *e, tpu_buf_t *b, const dtype_t *dt,
                                             const uint8_t *p, size_t nbytes, size_t count,
                                             const char *what) {
  tpu_buf_add(b, "[", 1);
  if (dt->kind == K_BYTES) {
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
      if (nbytes - off < 4)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: BYTES data ends inside element %zu's length", what, i);
      uint64_t n = load_le(p + off, 4);
      off += 4;
      if (n > nbytes - off)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: BYTES element %zu claims %" PRIu64 " bytes, %zu remain", what, i, n,
                    nbytes - off);
      if (!tpu_utf8_valid(p + off, (size_t)n))
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: BYTES element %zu is not valid UTF-8, which JSON cannot carry", what, i);
      if (i) tpu_buf_add(b, ",", 1);
      sb_json_string(b, (const char *)p + off, (size_t)n);
      off += (size_t)n;
    }
    if (off != nbytes)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s: %zu bytes of BYTES data left over after %zu elements", what, nbytes - off,
                  count);
    tpu_buf_add(b, "]", 1);
    return TPU_OIP_JSON_OK;
  }
  for (size_t i = 0; i < count; i++) {
    if (i) tpu_buf_add(b, ",", 1);
    const uint8_t *q = p + i * dt->size;
    uint64_t u = load_le(q, dt->size);
    switch (dt->kind) {
    case K_BOOL: tpu_buf_adds(b, u ? "true" : "false"); break;
    case K_UINT: tpu_buf_printf(b, "%" PRIu64, u); break;
    case K_INT: {
      unsigned bits = (unsigned)(8 * dt->size);
      int64_t v = bits == 64 ? (int64_t)u
                             : (int64_t)(u ^ (UINT64_C(1) << (bits - 1))) -
                                   (INT64_C(1) << (bits - 1)); /* sign-extend */
      tpu_buf_printf(b, "%" PRId64, v);
      break;
    }
    case K_FP16:
    case K_BF16:
    case K_FP32: {
      float f = dt->kind == K_FP32   ? f32_from_bits((uint32_t)u)
                : dt->kind == K_BF16 ? bf16_to_f32((uint16_t)u)
                                     : f16_to_f32((uint16_t)u);
      if (sb_float(b, f) != 0) return not_finite(e, what, i, f);
      break;
    }
    case K_FP64: {
      double d;
      memcpy(&d, &u, 8);
      if (sb_double(b, d) != 0) return not_finite(e, what, i, d);
      break;
    }
    case K_BYTES: break; /* handled above */
    }
  }
  tpu_buf_add(b, "]", 1);
  return TPU_OIP_JSON_OK;
}

/* Appends typed InferTensorContents as a JSON array; FP16 and BF16 only travel raw. */
static tpu_oip_json_status_t format_contents(ectx_t *e, tpu_buf_t *b, const dtype_t *dt,
                                             const Inference__InferTensorContents *c, size_t count,
                                             const char *what, const char *shape) {
  static const Inference__InferTensorContents empty = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  if (!c) c = &empty;
  size_t n;
  switch (dt->kind) {
  case K_BOOL: n = c->n_bool_contents; break;
  case K_UINT: n = dt->size == 8 ? c->n_uint64_contents : c->n_uint_contents; break;
  case K_INT: n = dt->size == 8 ? c->n_int64_contents : c->n_int_contents; break;
  case K_FP32: n = c->n_fp32_contents; break;
  case K_FP64: n = c->n_fp64_contents; break;
  case K_BYTES: n = c->n_bytes_contents; break;
  default:
    if (count == 0) {
      tpu_buf_adds(b, "[]");
      return TPU_OIP_JSON_OK;
    }
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: %s data can only travel as raw contents", what, dt->name);
  }
  if (n != count)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: shape %s needs %zu %s elements, contents hold %zu", what, shape, count,
                dt->name, n);
  tpu_buf_add(b, "[", 1);
  for (size_t i = 0; i < n; i++) {
    if (i) tpu_buf_add(b, ",", 1);
    switch (dt->kind) {
    case K_BOOL: tpu_buf_adds(b, c->bool_contents[i] ? "true" : "false"); break;
    case K_UINT:
      tpu_buf_printf(b, "%" PRIu64,
                     dt->size == 8 ? c->uint64_contents[i] : (uint64_t)c->uint_contents[i]);
      break;
    case K_INT:
      tpu_buf_printf(b, "%" PRId64,
                     dt->size == 8 ? c->int64_contents[i] : (int64_t)c->int_contents[i]);
      break;
    case K_FP32:
      if (sb_float(b, c->fp32_contents[i]) != 0) return not_finite(e, what, i, c->fp32_contents[i]);
      break;
    case K_FP64:
      if (sb_double(b, c->fp64_contents[i]) != 0)
        return not_finite(e, what, i, c->fp64_contents[i]);
      break;
    case K_BYTES:
      if (!tpu_utf8_valid(c->bytes_contents[i].data, c->bytes_contents[i].len))
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: BYTES element %zu is not valid UTF-8, which JSON cannot carry", what, i);
      sb_json_string(b, (const char *)c->bytes_contents[i].data, c->bytes_contents[i].len);
      break;
    default: break;
    }
  }
  tpu_buf_add(b, "]", 1);
  return TPU_OIP_JSON_OK;
}

/* Element count of a shape from the wire, or an error for negative or overflowing dims. */
static tpu_oip_json_status_t shape_count(ectx_t *e, const int64_t *shape, size_t rank,
                                         const char *what, size_t *count) {
  uint64_t total = 1;
  if (rank > TPU_OIP_JSON_MAX_RANK)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: %zu dimensions, at most %d", what,
                rank, TPU_OIP_JSON_MAX_RANK);
  for (size_t i = 0; i < rank; i++) {
    if (shape[i] < 0)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s: dimension %zu is %" PRId64 ", expected >= 0", what, i, shape[i]);
    if (shape[i] && total > (uint64_t)INT64_MAX / (uint64_t)shape[i])
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: element count overflows", what);
    total *= (uint64_t)shape[i];
  }
  if (total > SIZE_MAX / 8)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: element count overflows", what);
  *count = (size_t)total;
  return TPU_OIP_JSON_OK;
}

/* Appends a signed integer in decimal (no printf: this runs for every response). */
static void sb_i64(tpu_buf_t *b, int64_t v) {
  char tmp[24];
  int n = 0;
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[sizeof tmp - 1 - n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) tmp[sizeof tmp - 1 - n++] = '-';
  tpu_buf_add(b, tmp + sizeof tmp - n, (size_t)n);
}

static void sb_shape(tpu_buf_t *b, const int64_t *shape, size_t rank) {
  tpu_buf_add(b, "[", 1);
  for (size_t i = 0; i < rank; i++) {
    if (i) tpu_buf_add(b, ",", 1);
    sb_i64(b, shape[i]);
  }
  tpu_buf_add(b, "]", 1);
}

/* Appends a string field's literal, refusing text JSON cannot carry. */
static tpu_oip_json_status_t sb_field_string(ectx_t *e, tpu_buf_t *b, const char *s,
                                             const char *what) {
  if (!s) s = "";
  size_t n = strlen(s);
  if (!tpu_utf8_valid((const uint8_t *)s, n))
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: not valid UTF-8", what);
  sb_json_string(b, s, n);
  return TPU_OIP_JSON_OK;
}

static tpu_oip_json_status_t format_params(ectx_t *e, tpu_buf_t *b, size_t n,
                                           param_entry_t *const *arr, const char *what) {
  tpu_buf_add(b, "{", 1);
  for (size_t i = 0; i < n; i++) {
    const param_entry_t *ent = arr[i];
    if (i) tpu_buf_add(b, ",", 1);
    tpu_oip_json_status_t st = sb_field_string(e, b, ent->key, what);
    if (st != TPU_OIP_JSON_OK) return st;
    tpu_buf_add(b, ":", 1);
    const Inference__InferParameter *p = ent->value;
    switch (p ? p->parameter_choice_case : INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE__NOT_SET) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
      tpu_buf_adds(b, p->bool_param ? "true" : "false");
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
      tpu_buf_printf(b, "%" PRId64, p->int64_param);
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
      tpu_buf_printf(b, "%" PRIu64, p->uint64_param);
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
      if (sb_double(b, p->double_param) != 0)
        return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                    "%s: parameter \"%.64s\" is %s, which JSON cannot express (RFC 8259 has no "
                    "NaN or infinity)", what, ent->key ? ent->key : "",
                    isnan(p->double_param) ? "NaN" : p->double_param > 0 ? "infinity"
                                                                          : "-infinity");
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
      st = sb_field_string(e, b, p->string_param, what);
      if (st != TPU_OIP_JSON_OK) return st;
      break;
    default: tpu_buf_adds(b, "null"); break;
    }
  }
  tpu_buf_add(b, "}", 1);
  return TPU_OIP_JSON_OK;
}

/* what = "outputs[i] 'name'" (name cut at 64 bytes), as snprintf would, without printf: this
 * runs for every response. */
static void output_what(char *what, size_t i, const char *name) {
  char num[24];
  int n = 0;
  do {
    num[sizeof num - 1 - n++] = (char)('0' + i % 10);
    i /= 10;
  } while (i);
  char *w = what;
  memcpy(w, "outputs[", 8);
  w += 8;
  memcpy(w, num + sizeof num - n, (size_t)n);
  w += n;
  memcpy(w, "] '", 3);
  w += 3;
  size_t len = strnlen(name, 64);
  memcpy(w, name, len);
  w += len;
  *w++ = '\'';
  *w = '\0';
}

/* The shape of BYTES data in the binary section: exactly `count` length-prefixed elements. */
static tpu_oip_json_status_t bytes_check(ectx_t *e, const uint8_t *p, size_t nbytes, size_t count,
                                         const char *what) {
  size_t off = 0;
  for (size_t i = 0; i < count; i++) {
    if (nbytes - off < 4 || load_le(p + off, 4) > nbytes - off - 4)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s: BYTES data ends inside element %zu", what, i);
    off += 4 + (size_t)load_le(p + off, 4);
  }
  if (off != nbytes)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                "%s: %zu bytes of BYTES data left over after %zu elements", what, nbytes - off,
                count);
  return TPU_OIP_JSON_OK;
}

static tpu_oip_json_status_t format_response(const Inference__ModelInferResponse *resp,
                                             const unsigned char *binary, char **out,
                                             size_t *out_len, size_t *json_len, char *err,
                                             size_t errlen) {
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  if (!resp) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no response");
  ectx_t e = {err, errlen, NULL, 0, 0};
  if (resp->n_raw_output_contents && resp->n_raw_output_contents != resp->n_outputs)
    return fail(err, errlen, TPU_OIP_JSON_INVALID,
                "response has %zu outputs but %zu raw_output_contents", resp->n_outputs,
                resp->n_raw_output_contents);
  tpu_buf_t b = {0};
  tpu_oip_json_status_t st;
  { /* One allocation for the usual answer: about 16 bytes of text per raw data byte of 4. */
    size_t guess = 256;
    for (size_t i = 0; i < resp->n_raw_output_contents && guess < ((size_t)1 << 24); i++)
      guess += resp->raw_output_contents[i].len * 4;
    if (guess > ((size_t)1 << 24)) guess = (size_t)1 << 24;
    if (tpu_buf_reserve(&b, guess) != 0) tpu_buf_clear(&b); /* too big a guess: grow as it goes */
  }
  tpu_buf_adds(&b, "{\"model_name\":");
  if ((st = sb_field_string(&e, &b, resp->model_name, "model_name")) != TPU_OIP_JSON_OK) goto fail;
  if (resp->model_version && *resp->model_version) {
    tpu_buf_adds(&b, ",\"model_version\":");
    st = sb_field_string(&e, &b, resp->model_version, "model_version");
    if (st != TPU_OIP_JSON_OK) goto fail;
  }
  if (resp->id && *resp->id) {
    tpu_buf_adds(&b, ",\"id\":");
    if ((st = sb_field_string(&e, &b, resp->id, "id")) != TPU_OIP_JSON_OK) goto fail;
  }
  if (resp->n_parameters) {
    tpu_buf_adds(&b, ",\"parameters\":");
    st = format_params(&e, &b, resp->n_parameters, (param_entry_t *const *)resp->parameters,
                       "parameters");
    if (st != TPU_OIP_JSON_OK) goto fail;
  }
  tpu_buf_adds(&b, ",\"outputs\":[");
  for (size_t i = 0; i < resp->n_outputs; i++) {
    const Inference__ModelInferResponse__InferOutputTensor *o = resp->outputs[i];
    char what[128]; /* "outputs[0] 'name'" for messages */
    output_what(what, i, o && o->name ? o->name : "");
    if (!o) {
      st = fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: missing", what);
      goto fail;
    }
    const dtype_t *dt = dtype_find(o->datatype);
    if (!dt) {
      st = fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: unknown datatype \"%.32s\"", what,
                o->datatype ? o->datatype : "");
      goto fail;
    }
    size_t count;
    if ((st = shape_count(&e, o->shape, o->n_shape, what, &count)) != TPU_OIP_JSON_OK) goto fail;
    if (i) tpu_buf_add(&b, ",", 1);
    tpu_buf_adds(&b, "{\"name\":");
    if ((st = sb_field_string(&e, &b, o->name, what)) != TPU_OIP_JSON_OK) goto fail;
    tpu_buf_adds(&b, ",\"datatype\":\"");
    tpu_buf_adds(&b, dt->name);
    tpu_buf_adds(&b, "\",\"shape\":");
    sb_shape(&b, o->shape, o->n_shape);
    /* Raw data asked for in binary goes after the JSON, its size in the parameters; typed
     * contents (never produced by tpud) stay JSON, which clients tell by the missing size. */
    const ProtobufCBinaryData *raw =
        resp->n_raw_output_contents ? &resp->raw_output_contents[i] : NULL;
    int bin = raw && binary && binary[i];
    if (raw && dt->size && raw->len != count * dt->size) {
      char s[128];
      format_shape(s, sizeof s, o->shape, o->n_shape);
      st = fail(err, errlen, TPU_OIP_JSON_INVALID,
                "%s: shape %s needs %zu bytes of %s data, got %zu", what, s, count * dt->size,
                dt->name, raw->len);
      goto fail;
    }
    if (o->n_parameters || bin) {
      tpu_buf_adds(&b, ",\"parameters\":");
      st = format_params(&e, &b, o->n_parameters, (param_entry_t *const *)o->parameters, what);
      if (st != TPU_OIP_JSON_OK) goto fail;
      if (bin) {
        if (!b.oom) b.len--; /* reopen the object: the size is its last member */
        tpu_buf_adds(&b, o->n_parameters ? ",\"binary_data_size\":" : "\"binary_data_size\":");
        sb_i64(&b, (int64_t)raw->len);
        tpu_buf_add(&b, "}", 1);
      }
    }
    if (bin) {
      if (!dt->size && (st = bytes_check(&e, raw->data, raw->len, count, what)) != TPU_OIP_JSON_OK)
        goto fail;
      tpu_buf_add(&b, "}", 1);
      continue;
    }
    tpu_buf_adds(&b, ",\"data\":");
    if (raw) {
      st = format_raw_data(&e, &b, dt, raw->data, raw->len, count, what);
    } else {
      char s[128];
      format_shape(s, sizeof s, o->shape, o->n_shape);
      st = format_contents(&e, &b, dt, o->contents, count, what, s);
    }
    if (st != TPU_OIP_JSON_OK) goto fail;
    tpu_buf_add(&b, "}", 1);
  }
  tpu_buf_adds(&b, "]}");
  if (json_len) *json_len = b.len;
  for (size_t i = 0; binary && i < resp->n_raw_output_contents; i++)
    if (binary[i] && resp->raw_output_contents[i].len)
      tpu_buf_add(&b, resp->raw_output_contents[i].data, resp->raw_output_contents[i].len);
  if (b.oom) {
    st = nomem(err, errlen);
    goto fail;
  }
  *out = tpu_buf_detach(&b, out_len);
  return TPU_OIP_JSON_OK;

fail:
  tpu_buf_free(&b);
  return st;
}

tpu_oip_json_status_t tpu_oip_json_infer_response_format(const Inference__ModelInferResponse *resp,
                                                         char **out, char *err, size_t errlen) {
  return format_response(resp, NULL, out, NULL, NULL, err, errlen);
}

tpu_oip_json_status_t tpu_oip_json_infer_response_format_binary(
    const Inference__ModelInferResponse *resp, const unsigned char *binary, char **out,
    size_t *out_len, size_t *json_len, char *err, size_t errlen) {
  if (!out_len || !json_len) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no length pointers");
  return format_response(resp, binary, out, out_len, json_len, err, errlen);
}

tpu_oip_json_status_t tpu_oip_json_tensor_format(const char *datatype, const int64_t *shape,
                                                 size_t rank, const void *data, size_t nbytes,
                                                 char **out, char *err, size_t errlen) {
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  ectx_t e = {err, errlen, NULL, 0, 0};
  const dtype_t *dt = dtype_find(datatype);
  if (!dt)
    return fail(err, errlen, TPU_OIP_JSON_INVALID, "tensor: unknown datatype \"%.32s\"",
                datatype ? datatype : "");
  if (rank && !shape) return fail(err, errlen, TPU_OIP_JSON_INVALID, "tensor: no shape");
  size_t count;
  tpu_oip_json_status_t st = shape_count(&e, shape, rank, "tensor", &count);
  if (st != TPU_OIP_JSON_OK) return st;
  if (dt->size && nbytes != count * dt->size) {
    char s[128];
    format_shape(s, sizeof s, shape, rank);
    return fail(err, errlen, TPU_OIP_JSON_INVALID,
                "tensor: shape %s needs %zu bytes of %s data, got %zu", s, count * dt->size,
                dt->name, nbytes);
  }
  if (nbytes && !data) return fail(err, errlen, TPU_OIP_JSON_INVALID, "tensor: no data");
  tpu_buf_t b = {0};
  tpu_buf_adds(&b, "{\"shape\":");
  sb_shape(&b, shape, rank);
  tpu_buf_printf(&b, ",\"datatype\":\"%s\",\"data\":", dt->name);
  st = format_raw_data(&e, &b, dt, data, nbytes, count, "tensor");
  tpu_buf_add(&b, "}", 1);
  if (st == TPU_OIP_JSON_OK && b.oom) st = nomem(err, errlen);
  if (st != TPU_OIP_JSON_OK) {
    tpu_buf_free(&b);
    return st;
  }
  *out = tpu_buf_detach(&b, NULL);
  return TPU_OIP_JSON_OK;
}

/* ---- KServe V1 / TF Serving REST predict ---- */

/* Element i of the request: input `in`'s value inside an instance (row form). */
static const json_t *v1_instance_value(ectx_t *e, const json_t *inst, size_t k,
                                       const tpu_oip_v1_input_t *in, size_t nin, size_t i,
                                       tpu_oip_json_status_t *st) {
  *st = TPU_OIP_JSON_OK;
  if (nin == 1 && !json_is_object(inst)) return inst;
  if (!json_is_object(inst)) {
    *st = fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
               "instances[%zu]: expected an object of the model's %zu inputs by name, got %s", k,
               nin, json_kind(inst));
    return NULL;
  }
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)inst, key, v) {
    size_t j = 0;
    while (j < nin && strcmp(in[j].name, key) != 0) j++;
    if (j == nin) {
      *st = fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                 "instances[%zu]: the model has no input '%.64s'", k, key);
      return NULL;
    }
  }
  const json_t *x = json_object_get(inst, in[i].name);
  if (!x)
    *st = fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "instances[%zu]: input '%s' is missing",
               k, in[i].name);
  return x;
}

tpu_oip_json_status_t tpu_oip_json_v1_predict_parse(
    const char *text, size_t len, const char *model_name, const char *model_version,
    const tpu_oip_v1_input_t *in, size_t nin, int batched, const tpu_oip_json_limits_t *limits,
    Inference__ModelInferRequest **out, int *columnar, char *err, size_t errlen) {
  if (!out || !columnar) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  *columnar = 0;
  if (nin == 0 || nin > 1024 || !in)
    return fail(err, errlen, TPU_OIP_JSON_INVALID, "the model describes no inputs");
  json_t *root;
  tpu_oip_json_status_t st = tpu_oip_json_load(text, len, limits, &root, err, errlen);
  if (st != TPU_OIP_JSON_OK) return st;
  ectx_t e = {err, errlen, NULL, 0, 0};
  Inference__ModelInferRequest *req = NULL;
  tpu_buf_t buf = {0};
  if (!json_is_object(root)) {
    st = fail(err, errlen, TPU_OIP_JSON_INVALID,
              "request: expected a JSON object with \"instances\" or \"inputs\", got %s",
              json_kind(root));
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "instances") || !strcmp(key, "inputs")) continue;
    if (!strcmp(key, "signature_name")) {
      if (json_is_string(v) && !strcmp(json_string_value(v), "serving_default")) continue;
      st = fail(err, errlen, TPU_OIP_JSON_INVALID,
                "signature_name: tpud models have one signature, \"serving_default\"");
      goto done;
    }
    st = fail(err, errlen, TPU_OIP_JSON_INVALID,
              "%.64s: unknown field (expected \"instances\" or \"inputs\", and optionally "
              "\"signature_name\")", key);
    goto done;
  }
  const json_t *inst = json_object_get(root, "instances"), *cols = json_object_get(root, "inputs");
  if (!!inst == !!cols) {
    st = fail(err, errlen, TPU_OIP_JSON_INVALID,
              "request: expected exactly one of \"instances\" (rows) and \"inputs\" (columns)");
    goto done;
  }
  *columnar = cols != NULL;
  size_t rows = 0;
  if (inst) {
    if (!batched) {
      st = fail(err, errlen, TPU_OIP_JSON_INVALID,
                "instances: this model has no batch dimension; send the whole tensor as \"inputs\"");
      goto done;
    }
    if (!json_is_array(inst) || json_array_size(inst) == 0) {
      st = fail(err, errlen, TPU_OIP_JSON_INVALID, "instances: expected a non-empty array of "
                "rows, got %s", json_is_array(inst) ? "an empty array" : json_kind(inst));
      goto done;
    }
    rows = json_array_size(inst);
  } else if (nin > 1 && !json_is_object(cols)) {
    st = fail(err, errlen, TPU_OIP_JSON_INVALID,
              "inputs: expected an object of the model's %zu inputs by name, got %s", nin,
              json_kind(cols));
    goto done;
  } else if (json_is_object(cols)) {
    json_object_foreach((json_t *)cols, key, v) {
      size_t j = 0;
      while (j < nin && strcmp(in[j].name, key) != 0) j++;
      if (j == nin) {
        st = fail(err, errlen, TPU_OIP_JSON_INVALID, "inputs: the model has no input '%.64s'",
                  key);
        goto done;
      }
    }
  }
  if (!(req = malloc(sizeof *req))) goto oom;
  inference__model_infer_request__init(req);
  if ((model_name && *model_name && !(req->model_name = strdup(model_name))) ||
      (model_version && *model_version && !(req->model_version = strdup(model_version))) ||
      !(req->inputs = calloc(nin, sizeof *req->inputs)) ||
      !(req->raw_input_contents = calloc(nin, sizeof *req->raw_input_contents)))
    goto oom;
  for (size_t i = 0; i < nin; i++) {
    const dtype_t *dt = dtype_find(in[i].datatype);
    if (!dt || in[i].rank > TPU_OIP_JSON_MAX_RANK - 1) {
      st = fail(err, errlen, TPU_OIP_JSON_INVALID, "input '%s': datatype %s cannot be sent "
                "as JSON", in[i].name, in[i].datatype);
      goto done;
    }
    int64_t shape[TPU_OIP_JSON_MAX_RANK];
    size_t rank = 0;
    char path[160];
    tpu_buf_clear(&buf);
    if (inst) {
      shape[rank++] = (int64_t)rows;
      for (size_t d = 0; d < in[i].rank; d++) shape[rank++] = in[i].dims[d];
      for (size_t k = 0; k < rows; k++) {
        const json_t *x = v1_instance_value(&e, json_array_get(inst, k), k, in, nin, i, &st);
        if (!x) goto done;
        if (nin == 1 && !json_is_object(json_array_get(inst, k)))
          snprintf(path, sizeof path, "instances[%zu]", k);
        else
          snprintf(path, sizeof path, "instances[%zu].%.64s", k, in[i].name);
        if ((st = check_nested(&e, x, dt, in[i].dims, in[i].rank, 0, path, sizeof path)) !=
                TPU_OIP_JSON_OK ||
            (st = encode_nested(&e, x, dt, in[i].rank, 0, path, sizeof path, &buf)) !=
                TPU_OIP_JSON_OK)
          goto done;
      }
    } else {
      const json_t *x = json_is_object(cols) ? json_object_get(cols, in[i].name) : cols;
      snprintf(path, sizeof path, json_is_object(cols) ? "inputs.%.64s" : "inputs", in[i].name);
      if (!x) {
        st = fail(err, errlen, TPU_OIP_JSON_INVALID, "inputs: input '%s' is missing", in[i].name);
        goto done;
      }
      if (batched) {
        if (!json_is_array(x)) {
          st = fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: expected an array of rows, got %s",
                    path, json_kind(x));
          goto done;
        }
        if (i > 0 && json_array_size(x) != rows) {
          st = fail(err, errlen, TPU_OIP_JSON_INVALID,
                    "%s: %zu rows, but input '%s' has %zu (every input needs the same rows)",
                    path, json_array_size(x), in[0].name, rows);
          goto done;
        }
        rows = json_array_size(x);
        shape[rank++] = (int64_t)rows;
      }
      for (size_t d = 0; d < in[i].rank; d++) shape[rank++] = in[i].dims[d];
      if ((st = check_nested(&e, x, dt, shape, rank, 0, path, sizeof path)) != TPU_OIP_JSON_OK ||
          (st = encode_nested(&e, x, dt, rank, 0, path, sizeof path, &buf)) != TPU_OIP_JSON_OK)
        goto done;
    }
    Inference__ModelInferRequest__InferInputTensor *t = malloc(sizeof *t);
    if (!t) goto oom;
    inference__model_infer_request__infer_input_tensor__init(t);
    req->inputs[req->n_inputs++] = t;
    if (!(t->name = strdup(in[i].name)) || !(t->datatype = strdup(dt->name)) ||
        (rank && !(t->shape = malloc(rank * sizeof *t->shape))))
      goto oom;
    if (rank) memcpy(t->shape, shape, rank * sizeof *t->shape);
    t->n_shape = rank;
    if (buf.oom) goto oom;
    req->raw_input_contents[i].data = (uint8_t *)tpu_buf_detach(&buf, &req->raw_input_contents[i].len);
    req->n_raw_input_contents = i + 1;
  }
  *out = req;
  req = NULL;
  st = TPU_OIP_JSON_OK;
  goto done;
oom:
  st = nomem(err, errlen);
done:
  if (req) {
    if (!req->model_name) req->model_name = (char *)protobuf_c_empty_string;
    if (!req->model_version) req->model_version = (char *)protobuf_c_empty_string;
    inference__model_infer_request__free_unpacked(req, NULL);
  }
  tpu_buf_free(&buf);
  json_decref(root);
  return st;
}

/* One element of raw data at *off (advanced past it) as JSON. */
static tpu_oip_json_status_t v1_elem(ectx_t *e, tpu_buf_t *b, const dtype_t *dt,
                                     const uint8_t *p, size_t nbytes, size_t *off, size_t *idx,
                                     const char *what) {
  if (dt->kind == K_BYTES) {
    if (nbytes - *off < 4 || load_le(p + *off, 4) > nbytes - *off - 4)
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s: BYTES data ends inside element %zu", what, *idx);
    size_t n = (size_t)load_le(p + *off, 4);
    if (!tpu_utf8_valid(p + *off + 4, n))
      return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID,
                  "%s: BYTES element %zu is not valid UTF-8, which JSON cannot carry", what, *idx);
    sb_json_string(b, (const char *)p + *off + 4, n);
    *off += 4 + n;
    (*idx)++;
    return TPU_OIP_JSON_OK;
  }
  if (nbytes - *off < dt->size)
    return fail(e->err, e->errlen, TPU_OIP_JSON_INVALID, "%s: data ends inside element %zu",
                what, *idx);
  tpu_buf_t one = {0};
  tpu_oip_json_status_t st = format_raw_data(e, &one, dt, p + *off, dt->size, 1, what);
  if (st == TPU_OIP_JSON_OK && one.len >= 2) tpu_buf_add(b, one.p + 1, one.len - 2); /* no [] */
  if (st == TPU_OIP_JSON_OK && one.oom) st = nomem(e->err, e->errlen);
  tpu_buf_free(&one);
  if (st != TPU_OIP_JSON_OK && dt->kind != K_BYTES && dt->kind != K_BOOL && dt->kind != K_INT &&
      dt->kind != K_UINT) { /* a non-finite float: name this element, not "0" */
    uint64_t u = load_le(p + *off, dt->size);
    double d;
    if (dt->kind == K_FP64) memcpy(&d, &u, 8);
    else d = dt->kind == K_FP32 ? f32_from_bits((uint32_t)u)
             : dt->kind == K_BF16 ? bf16_to_f32((uint16_t)u) : f16_to_f32((uint16_t)u);
    return not_finite(e, what, *idx, d);
  }
  *off += dt->size;
  (*idx)++;
  return st;
}

static tpu_oip_json_status_t v1_nested(ectx_t *e, tpu_buf_t *b, const dtype_t *dt,
                                       const uint8_t *p, size_t nbytes, size_t *off, size_t *idx,
                                       const int64_t *shape, size_t rank, const char *what) {
  if (rank == 0) return v1_elem(e, b, dt, p, nbytes, off, idx, what);
  tpu_buf_add(b, "[", 1);
  for (int64_t i = 0; i < shape[0]; i++) {
    if (i) tpu_buf_add(b, ",", 1);
    tpu_oip_json_status_t st = v1_nested(e, b, dt, p, nbytes, off, idx, shape + 1, rank - 1, what);
    if (st != TPU_OIP_JSON_OK) return st;
  }
  tpu_buf_add(b, "]", 1);
  return TPU_OIP_JSON_OK;
}

/* The outputs' next values: the one output's, or an object of every output's by name. skip:
 * the leading dimensions left out (1: one row of each; 0: the whole tensors). off/idx: where
 * each output's data is. */
static tpu_oip_json_status_t v1_outputs(ectx_t *e, tpu_buf_t *b,
                                        const Inference__ModelInferResponse *resp,
                                        const dtype_t *const *dts, size_t *off, size_t *idx,
                                        size_t skip) {
  size_t n = resp->n_outputs;
  tpu_oip_json_status_t st = TPU_OIP_JSON_OK;
  if (n > 1) tpu_buf_add(b, "{", 1);
  for (size_t i = 0; i < n && st == TPU_OIP_JSON_OK; i++) {
    const Inference__ModelInferResponse__InferOutputTensor *o = resp->outputs[i];
    char what[128];
    output_what(what, i, o->name ? o->name : "");
    if (n > 1) {
      if (i) tpu_buf_add(b, ",", 1);
      if ((st = sb_field_string(e, b, o->name, what)) != TPU_OIP_JSON_OK) break;
      tpu_buf_add(b, ":", 1);
    }
    const ProtobufCBinaryData *raw = &resp->raw_output_contents[i];
    st = v1_nested(e, b, dts[i], raw->data, raw->len, &off[i], &idx[i], o->shape + skip,
                   o->n_shape - skip, what);
  }
  if (n > 1) tpu_buf_add(b, "}", 1);
  return st;
}

tpu_oip_json_status_t tpu_oip_json_v1_predict_format(const Inference__ModelInferResponse *resp,
                                                     int columnar, int batched, char **out,
                                                     char *err, size_t errlen) {
  if (!out) return fail(err, errlen, TPU_OIP_JSON_INVALID, "no output pointer");
  *out = NULL;
  if (!resp || resp->n_outputs == 0 || resp->n_raw_output_contents != resp->n_outputs)
    return fail(err, errlen, TPU_OIP_JSON_INVALID, "response: expected raw contents for every "
                "output");
  ectx_t e = {err, errlen, NULL, 0, 0};
  size_t n = resp->n_outputs, rows = 0;
  const dtype_t *dts[1024];
  if (n > 1024) return fail(err, errlen, TPU_OIP_JSON_INVALID, "response: too many outputs");
  for (size_t i = 0; i < n; i++) {
    const Inference__ModelInferResponse__InferOutputTensor *o = resp->outputs[i];
    char what[128];
    output_what(what, i, o && o->name ? o->name : "");
    if (!o || !(dts[i] = dtype_find(o->datatype)))
      return fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: unknown datatype", what);
    size_t count;
    tpu_oip_json_status_t st = shape_count(&e, o->shape, o->n_shape, what, &count);
    if (st != TPU_OIP_JSON_OK) return st;
    if (dts[i]->size && resp->raw_output_contents[i].len != count * dts[i]->size)
      return fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: data does not match its shape", what);
    if (!columnar) {
      if (!batched || o->n_shape == 0)
        return fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: rows need a batch dimension", what);
      if (i && (size_t)o->shape[0] != rows)
        return fail(err, errlen, TPU_OIP_JSON_INVALID, "%s: outputs disagree on the rows", what);
      rows = (size_t)o->shape[0];
    }
  }
  tpu_buf_t b = {0};
  tpu_oip_json_status_t st = TPU_OIP_JSON_OK;
  size_t off[1024] = {0}, idx[1024] = {0};
  if (columnar) {
    tpu_buf_adds(&b, "{\"outputs\":");
    st = v1_outputs(&e, &b, resp, dts, off, idx, 0);
    tpu_buf_adds(&b, "}");
  } else {
    tpu_buf_adds(&b, "{\"predictions\":[");
    for (size_t r = 0; r < rows && st == TPU_OIP_JSON_OK; r++) {
      if (r) tpu_buf_add(&b, ",", 1);
      st = v1_outputs(&e, &b, resp, dts, off, idx, 1); /* the next row of each output */
    }
    tpu_buf_adds(&b, "]}");
  }
  for (size_t i = 0; i < n && st == TPU_OIP_JSON_OK; i++)
    if (off[i] != resp->raw_output_contents[i].len)
      st = fail(err, errlen, TPU_OIP_JSON_INVALID, "output %zu: data left over after its shape",
                i);
  if (st == TPU_OIP_JSON_OK && b.oom) st = nomem(err, errlen);
  if (st != TPU_OIP_JSON_OK) {
    tpu_buf_free(&b);
    return st;
  }
  *out = tpu_buf_detach(&b, NULL);
  return TPU_OIP_JSON_OK;
}
