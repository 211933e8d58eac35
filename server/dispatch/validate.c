/*
 * validate.c - request validation (see validate.h). Pure: no I/O, no allocation.
 *
 * DESIGN
 * Checks run in the order a client would fix them: the request's structure (inputs present, raw
 * contents count), then each input (name, duplicates, datatype, rank, dims, element count with
 * overflow checks, data length, every floating-point element finite), then missing inputs, the
 * batch dimension agreeing across inputs, and the requested outputs. The first failure wins and
 * names what it is about.
 *
 * Non-finite values: NaN and infinities are refused in every floating-point input (FP32, FP16,
 * BF16, FP64, MatMul's operands too). No answer of tpud holds one (dispatch/methods.c and compute/mmpool.c
 * refuse a result that overflows), JSON cannot carry one, and a NaN in a score is worse than an
 * error: computing on it would only hide where it came from. The exception is an input whose
 * spec says nonfinite_ok: tree ensembles (XGBoost) take NaN as a missing feature and compare
 * ±Inf like any number, as their library does.
 */
#include "validate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "stats.h"
#include "tpu_engine.h"
#include "tpu_text.h"

/* A name as messages show it: whole up to 64 bytes, else its first 64 and "...", so a long name
 * cannot push the explanation out of a fixed-size message. */
#define CLIP_MAX 64
static const char *clip(const char *s, char *buf, size_t len) {
  if (strlen(s) <= CLIP_MAX) return s;
  snprintf(buf, len, "%.*s...", CLIP_MAX, s);
  return buf;
}

/* The message into msg, and returns INVALID_ARGUMENT: `return fail(msg, msglen, ...)`. */
#define fail(msg, len, ...) tpu_errf_ret(TPU_CODE_INVALID_ARGUMENT, (msg), (len), __VA_ARGS__)

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {{"BOOL", 1},  {"UINT8", 1}, {"UINT16", 2}, {"UINT32", 4}, {"UINT64", 8},
              {"INT8", 1},  {"INT16", 2}, {"INT32", 4},  {"INT64", 8},  {"FP16", 2},
              {"FP32", 4},  {"FP64", 8},  {"BF16", 2}};

/* The first element of `count` little-endian `dt` values at p that is NaN or infinite, as its
 * index, or count when every one is finite (or dt is not a floating-point type). A value is
 * non-finite exactly when its exponent bits are all ones, so this reads bits, not floats: raw
 * protobuf bytes need not be aligned, and no float traps or denormal slowdowns can occur. */
static size_t first_nonfinite(const char *dt, const void *p, size_t count) {
  const uint8_t *b = p;
  if (!p) return count;
  if (strcmp(dt, "FP32") == 0) {
    for (size_t i = 0; i < count; i++) {
      uint32_t u;
      memcpy(&u, b + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
  } else if (strcmp(dt, "BF16") == 0 || strcmp(dt, "FP16") == 0) {
    uint16_t mask = dt[0] == 'B' ? 0x7f80u : 0x7c00u;
    for (size_t i = 0; i < count; i++) {
      uint16_t u;
      memcpy(&u, b + 2 * i, 2);
      if ((u & mask) == mask) return i;
    }
  } else if (strcmp(dt, "FP64") == 0) {
    for (size_t i = 0; i < count; i++) {
      uint64_t u;
      memcpy(&u, b + 8 * i, 8);
      if ((u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) return i;
    }
  }
  return count;
}

/* "element [1,7] is nan; expected finite FP32 values" for element i of a tensor of `shape`. */
static int fail_nonfinite(char *msg, size_t msglen, const char *what, const char *dt,
                          const void *p, size_t i, const int64_t *shape, size_t rank) {
  char idx[200];
  size_t n = 0;
  uint64_t rest = i;
  int64_t sub[TPU_VALIDATE_MAX_RANK] = {0};
  for (size_t d = rank; d-- > 0;) { /* row-major: the last dimension varies fastest */
    uint64_t dim = shape[d] > 0 ? (uint64_t)shape[d] : 1;
    sub[d] = (int64_t)(rest % dim);
    rest /= dim;
  }
  n += (size_t)snprintf(idx + n, sizeof idx - n, "[");
  for (size_t d = 0; d < rank && n < sizeof idx; d++)
    n += (size_t)snprintf(idx + n, sizeof idx - n, "%s%lld", d ? "," : "", (long long)sub[d]);
  if (n < sizeof idx) snprintf(idx + n, sizeof idx - n, "]");
  const uint8_t *b = p;
  const char *kind;
  if (strcmp(dt, "FP64") == 0) {
    uint64_t u;
    memcpy(&u, b + 8 * i, 8);
    kind = (u & 0x000fffffffffffffull) ? "NaN" : (u >> 63) ? "-infinity" : "infinity";
  } else if (strcmp(dt, "FP32") == 0) {
    uint32_t u;
    memcpy(&u, b + 4 * i, 4);
    kind = (u & 0x007fffffu) ? "NaN" : (u >> 31) ? "-infinity" : "infinity";
  } else {
    uint16_t u;
    memcpy(&u, b + 2 * i, 2);
    uint16_t man = dt[0] == 'B' ? 0x007fu : 0x03ffu;
    kind = (u & man) ? "NaN" : (u >> 15) ? "-infinity" : "infinity";
  }
  return fail(msg, msglen, "%s: element %s is %s; expected finite %s values (NaN and infinities "
              "are refused)", what, idx, kind, dt);
}

size_t tpu_validate_dtype_size(const char *dt) {
  if (!dt) return 0;
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dt, dtypes[i].name) == 0) return dtypes[i].size;
  return 0;
}

void tpu_validate_format_shape(const int64_t *shape, size_t rank, char *buf, size_t len) {
  size_t n = 0;
  if (len == 0) return;
  buf[0] = 0;
  n += (size_t)snprintf(buf + n, len - n, "[");
  for (size_t i = 0; i < rank && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (n < len) snprintf(buf + n, len - n, "]");
}

int tpu_validate_shape(const char *what, const int64_t *shape, size_t rank, size_t elem_size,
                       size_t *count, size_t *bytes, char *msg, size_t msglen) {
  if (rank > TPU_VALIDATE_MAX_RANK)
    return fail(msg, msglen, "%s: rank %zu exceeds the maximum of %d dimensions", what, rank,
                TPU_VALIDATE_MAX_RANK), -1;
  char s[256]; /* the shape as text, for messages: formatted on the error paths only */
  int zero = 0;
  for (size_t i = 0; i < rank; i++) {
    if (shape[i] < 0) {
      tpu_validate_format_shape(shape, rank, s, sizeof s);
      fail(msg, msglen,
           "%s: shape %s: dimension %zu is %lld; request dimensions must be >= 0 (-1 only "
           "appears in model shapes)",
           what, s, i, (long long)shape[i]);
      return -1;
    }
    if (shape[i] == 0) zero = 1;
  }
  uint64_t c = 1;
  if (!zero) {
    for (size_t i = 0; i < rank; i++) {
      if (__builtin_mul_overflow(c, (uint64_t)shape[i], &c)) {
        tpu_validate_format_shape(shape, rank, s, sizeof s);
        fail(msg, msglen, "%s: shape %s has too many elements (the product overflows 64 bits)",
             what, s);
        return -1;
      }
    }
  } else {
    c = 0;
  }
  uint64_t b;
  if (__builtin_mul_overflow(c, (uint64_t)elem_size, &b) || c > SIZE_MAX || b > SIZE_MAX) {
    tpu_validate_format_shape(shape, rank, s, sizeof s);
    fail(msg, msglen, "%s: shape %s has %llu elements: the byte size overflows", what, s,
         (unsigned long long)c);
    return -1;
  }
  *count = (size_t)c;
  *bytes = (size_t)b;
  return 0;
}

static const char *model_names(const tpu_tensor_spec_t *t, size_t n, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s'%s'", i ? ", " : "", t[i].name);
  return buf;
}

int tpu_validate_infer(const tpu_vmodel_t *m, const tpu_vrequest_t *r, tpu_vresult_t *res,
                       char *msg, size_t msglen) {
  char names[256], s[256], ms[256];
  memset(res, 0, sizeof *res);
  if (m->ninputs > TPU_VALIDATE_MAX_TENSORS || m->noutputs > TPU_VALIDATE_MAX_TENSORS)
    return fail(msg, msglen, "%s: too many tensors for this server", m->name);
  if (r->ninputs == 0)
    return fail(msg, msglen, "%s: request has no inputs; expected %s", m->name,
                model_names(m->inputs, m->ninputs, names, sizeof names));
  if (r->ninputs > TPU_VALIDATE_MAX_TENSORS)
    return fail(msg, msglen, "%s: request has %zu inputs; the model has %zu", m->name,
                r->ninputs, m->ninputs);
  if (r->n_raw != 0 && r->n_raw != r->ninputs)
    return fail(msg, msglen,
                "%s: raw_input_contents has %zu entries for %zu inputs; expected one per input",
                m->name, r->n_raw, r->ninputs);
  for (size_t i = 0; i < m->ninputs; i++) res->input_of[i] = SIZE_MAX;

  int64_t batch = -1; /* value of the -1 dimension, once an input has set it */
  const char *batch_from = NULL;
  char bfb[CLIP_MAX + 4];
  for (size_t i = 0; i < r->ninputs; i++) {
    const tpu_vinput_t *in = &r->inputs[i];
    const char *name = in->name ? in->name : "";
    char nmb[CLIP_MAX + 4], dtb[CLIP_MAX + 4];
    const char *nm = clip(name, nmb, sizeof nmb); /* for messages */
    size_t mi = 0;
    while (mi < m->ninputs && strcmp(m->inputs[mi].name, name) != 0) mi++;
    if (mi == m->ninputs)
      return fail(msg, msglen, "input '%s': %s has no such input; expected %s", nm, m->name,
                  model_names(m->inputs, m->ninputs, names, sizeof names));
    if (res->input_of[mi] != SIZE_MAX)
      return fail(msg, msglen, "input '%s': appears more than once in the request", nm);
    res->input_of[mi] = i;
    const tpu_tensor_spec_t *spec = &m->inputs[mi];
    const char *dt = in->datatype ? in->datatype : "";
    size_t esize = tpu_validate_dtype_size(dt);
    if (esize == 0)
      return fail(msg, msglen,
                  "input '%s': unknown or unsupported datatype '%s'; expected %s", nm,
                  clip(dt, dtb, sizeof dtb), spec->datatype);
    if (strcmp(dt, spec->datatype) != 0)
      return fail(msg, msglen, "input '%s': datatype %s, expected %s", nm, dt, spec->datatype);
    char what[160];
    snprintf(what, sizeof what, "input '%s'", nm);
    size_t count, bytes;
    if (tpu_validate_shape(what, in->shape, in->rank, esize, &count, &bytes, msg, msglen) != 0)
      return TPU_CODE_INVALID_ARGUMENT;
    /* The shape texts only go into messages: formatted on the error paths alone (four
     * snprintf calls per dimension showed in the serving profile). */
#define SHAPE_TEXTS()                                                                            \
  (tpu_validate_format_shape(in->shape, in->rank, s, sizeof s),                                  \
   tpu_validate_format_shape(spec->shape, spec->rank, ms, sizeof ms))
    if (in->rank != spec->rank)
      return SHAPE_TEXTS(), fail(msg, msglen, "input '%s': shape %s has rank %zu, expected rank %zu (model shape %s)",
                  nm, s, in->rank, spec->rank, ms);
    for (size_t d = 0; d < in->rank; d++) {
      if (spec->shape[d] == -1) {
        if (batch >= 0 && in->shape[d] != batch)
          return fail(msg, msglen,
                      "input '%s': batch dimension is %lld but input '%s' has %lld; all inputs "
                      "must have the same batch size",
                      nm, (long long)in->shape[d], batch_from, (long long)batch);
        batch = in->shape[d];
        batch_from = snprintf(bfb, sizeof bfb, "%s", nm) >= 0 ? bfb : "";
      } else if (in->shape[d] != spec->shape[d]) {
        return SHAPE_TEXTS(), fail(msg, msglen,
                    "input '%s': shape %s does not match the model shape %s: dimension %zu "
                    "must be %lld",
                    nm, s, ms, d, (long long)spec->shape[d]);
      }
    }
    /* Data: raw or typed, never both, exactly the shape's size. */
    int typed = in->n_fp32 > 0 || in->n_other_typed > 0;
    if (r->n_raw) {
      if (typed)
        return fail(msg, msglen,
                    "input '%s': has typed contents but the request uses raw_input_contents; "
                    "send every input one way",
                    nm);
      if (in->raw_len != bytes)
        return SHAPE_TEXTS(), fail(msg, msglen, "input '%s': shape %s needs %zu bytes of %s data, got %zu", nm,
                    s, bytes, dt, in->raw_len);
      res->data[mi] = in->raw;
      size_t bad = spec->nonfinite_ok ? count : first_nonfinite(dt, in->raw, count);
      if (bad < count)
        return fail_nonfinite(msg, msglen, what, dt, in->raw, bad, in->shape, in->rank);
    } else if (in->n_other_typed > 0) {
      return fail(msg, msglen,
                  "input '%s': datatype %s takes contents.fp32_contents or "
                  "raw_input_contents; got %s",
                  nm, dt, in->other_field ? in->other_field : "another typed field");
    } else if (strcmp(dt, "FP32") != 0 && count > 0) {
      return fail(msg, msglen, "input '%s': datatype %s data must be sent in raw_input_contents",
                  nm, dt);
    } else {
      if (in->n_fp32 != count)
        return SHAPE_TEXTS(), fail(msg, msglen,
                    "input '%s': shape %s needs %zu FP32 values in contents.fp32_contents, got "
                    "%zu",
                    nm, s, count, in->n_fp32);
      res->data[mi] = in->fp32;
      size_t bad = spec->nonfinite_ok ? count : first_nonfinite("FP32", in->fp32, count);
      if (bad < count)
        return fail_nonfinite(msg, msglen, what, "FP32", in->fp32, bad, in->shape, in->rank);
    }
    res->bytes[mi] = bytes;
  }
#undef SHAPE_TEXTS
  for (size_t mi = 0; mi < m->ninputs; mi++)
    if (res->input_of[mi] == SIZE_MAX)
      return fail(msg, msglen, "%s: missing input '%s'", m->name, m->inputs[mi].name);
  res->rows = batch >= 0 ? (size_t)batch : 1;

  if (r->noutputs == 0) { /* every output but those returned only when named */
    for (size_t j = 0; j < m->noutputs; j++) res->want_output[j] = !m->outputs[j].on_request;
    return TPU_CODE_OK;
  }
  for (size_t k = 0; k < r->noutputs; k++) {
    const char *name = r->outputs[k] ? r->outputs[k] : "";
    char nmb[CLIP_MAX + 4];
    const char *nm = clip(name, nmb, sizeof nmb);
    size_t j = 0;
    while (j < m->noutputs && strcmp(m->outputs[j].name, name) != 0) j++;
    if (j == m->noutputs)
      return fail(msg, msglen, "output '%s': %s has no such output; expected %s", nm, m->name,
                  model_names(m->outputs, m->noutputs, names, sizeof names));
    if (res->want_output[j])
      return fail(msg, msglen, "output '%s': requested more than once", nm);
    res->want_output[j] = 1;
  }
  return TPU_CODE_OK;
}

static int engine_dtype(const char *dt, int *out) {
  if (!dt) return -1;
  if (strcmp(dt, "FP32") == 0) *out = TPU_DTYPE_FP32;
  else if (strcmp(dt, "BF16") == 0) *out = TPU_DTYPE_BF16;
  else if (strcmp(dt, "INT8") == 0) *out = TPU_DTYPE_INT8;
  else return -1;
  return 0;
}

int tpu_validate_matmul(const tpu_vtensor_t *a, const tpu_vtensor_t *b, uint64_t max_elems,
                        size_t *m, size_t *k, size_t *n, int *dtype, char *msg, size_t msglen) {
  const tpu_vtensor_t *t[2] = {a, b};
  const char *nm[2] = {"a", "b"};
  int dt[2];
  size_t count[2], bytes[2];
  char s[256];
  for (int i = 0; i < 2; i++) {
    if (!t[i]->present) return fail(msg, msglen, "matmul: tensor '%s' is missing", nm[i]);
    const char *d = t[i]->datatype ? t[i]->datatype : "";
    if (engine_dtype(d, &dt[i]) != 0)
      return fail(msg, msglen, "matmul: tensor '%s': datatype '%s', expected FP32, BF16 or INT8",
                  nm[i], d);
    char what[32];
    snprintf(what, sizeof what, "matmul: tensor '%s'", nm[i]);
    if (t[i]->rank != 2) {
      tpu_validate_format_shape(t[i]->shape, t[i]->rank < 9 ? t[i]->rank : 9, s, sizeof s);
      return fail(msg, msglen, "%s: shape %s has rank %zu, expected rank 2 ([%s])", what, s,
                  t[i]->rank, i == 0 ? "M,K" : "K,N");
    }
    if (tpu_validate_shape(what, t[i]->shape, 2, tpu_dtype_size((tpu_dtype_t)dt[i]), &count[i],
                           &bytes[i], msg, msglen) != 0)
      return TPU_CODE_INVALID_ARGUMENT;
    tpu_validate_format_shape(t[i]->shape, 2, s, sizeof s);
    if (t[i]->shape[0] == 0 || t[i]->shape[1] == 0)
      return fail(msg, msglen, "%s: shape %s: every dimension must be >= 1", what, s);
    if ((uint64_t)count[i] > max_elems) {
      snprintf(msg, msglen, "%s: shape %s has %zu elements; the limit is %llu", what, s,
               count[i], (unsigned long long)max_elems);
      return TPU_CODE_RESOURCE_EXHAUSTED;
    }
    if (t[i]->data_len != bytes[i])
      return fail(msg, msglen, "%s: shape %s needs %zu bytes of %s data, got %zu", what, s,
                  bytes[i], d, t[i]->data_len);
    size_t bad = first_nonfinite(d, t[i]->data, count[i]);
    if (bad < count[i])
      return fail_nonfinite(msg, msglen, what, d, t[i]->data, bad, t[i]->shape, 2);
  }
  if (dt[0] != dt[1])
    return fail(msg, msglen, "matmul: a is %s but b is %s; both must have the same datatype",
                a->datatype, b->datatype);
  if (a->shape[1] != b->shape[0])
    return fail(msg, msglen, "matmul: a is [%lld,%lld] and b is [%lld,%lld]: K must match "
                "(a's columns %lld != b's rows %lld)",
                (long long)a->shape[0], (long long)a->shape[1], (long long)b->shape[0],
                (long long)b->shape[1], (long long)a->shape[1], (long long)b->shape[0]);
  uint64_t mn;
  if (__builtin_mul_overflow((uint64_t)a->shape[0], (uint64_t)b->shape[1], &mn) ||
      mn > max_elems) {
    snprintf(msg, msglen, "matmul: result [%lld,%lld] exceeds the limit of %llu elements",
             (long long)a->shape[0], (long long)b->shape[1], (unsigned long long)max_elems);
    return TPU_CODE_RESOURCE_EXHAUSTED;
  }
  *m = (size_t)a->shape[0];
  *k = (size_t)a->shape[1];
  *n = (size_t)b->shape[1];
  *dtype = dt[0];
  return TPU_CODE_OK;
}

void tpu_validate_describe_request(const Inference__ModelInferRequest *q, tpu_vinput_t *vin,
                                   const char **vout, tpu_vrequest_t *req) {
  for (size_t i = 0; i < q->n_inputs; i++) {
    Inference__ModelInferRequest__InferInputTensor *t = q->inputs[i];
    tpu_vinput_t *v = &vin[i];
    memset(v, 0, sizeof *v);
    v->name = t->name;
    v->datatype = t->datatype;
    v->shape = t->shape;
    v->rank = t->n_shape;
    if (q->n_raw_input_contents && i < q->n_raw_input_contents) {
      v->has_raw = 1;
      v->raw = q->raw_input_contents[i].data;
      v->raw_len = q->raw_input_contents[i].len;
    }
    Inference__InferTensorContents *c = t->contents;
    if (c) {
      v->fp32 = c->fp32_contents;
      v->n_fp32 = c->n_fp32_contents;
      struct {
        size_t n;
        const char *field;
      } other[] = {{c->n_bool_contents, "contents.bool_contents"},
                   {c->n_int_contents, "contents.int_contents"},
                   {c->n_int64_contents, "contents.int64_contents"},
                   {c->n_uint_contents, "contents.uint_contents"},
                   {c->n_uint64_contents, "contents.uint64_contents"},
                   {c->n_fp64_contents, "contents.fp64_contents"},
                   {c->n_bytes_contents, "contents.bytes_contents"}};
      for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        if (other[k].n && !v->n_other_typed) v->other_field = other[k].field;
        v->n_other_typed += other[k].n;
      }
    }
  }
  for (size_t j = 0; j < q->n_outputs; j++) vout[j] = q->outputs[j]->name;
  *req = (tpu_vrequest_t){.inputs = vin, .ninputs = q->n_inputs,
                         .n_raw = q->n_raw_input_contents, .outputs = vout,
                         .noutputs = q->n_outputs};
}

/* ---- datatype conversion ---- */

typedef enum { C_NONE, C_SINT, C_UINT, C_FP32, C_FP64 } ckind_t;

static ckind_t ckind(const char *dt, size_t *size) {
  static const struct {
    const char *name;
    ckind_t kind;
    size_t size;
  } k[] = {{"INT8", C_SINT, 1},   {"INT16", C_SINT, 2},  {"INT32", C_SINT, 4},
           {"INT64", C_SINT, 8},  {"UINT8", C_UINT, 1},  {"UINT16", C_UINT, 2},
           {"UINT32", C_UINT, 4}, {"UINT64", C_UINT, 8}, {"FP32", C_FP32, 4},
           {"FP64", C_FP64, 8}};
  for (size_t i = 0; dt && i < sizeof k / sizeof k[0]; i++)
    if (strcmp(k[i].name, dt) == 0) {
      *size = k[i].size;
      return k[i].kind;
    }
  return C_NONE;
}

/* Element i as a signed or unsigned integer (integer kinds) or a double. */
static void load_elem(ckind_t k, size_t sz, const uint8_t *p, int64_t *iv, uint64_t *uv,
                      double *dv) {
  uint64_t u = 0;
  memcpy(&u, p, sz); /* little-endian host (see tpu_oip_json) */
  if (k == C_SINT) {
    unsigned sh = (unsigned)(64 - 8 * sz);
    *iv = sz == 8 ? (int64_t)u : (int64_t)(u << sh) >> sh;
    *dv = (double)*iv;
  } else if (k == C_UINT) {
    *uv = u;
    *dv = (double)u;
  } else if (k == C_FP32) {
    float f;
    memcpy(&f, p, 4);
    *dv = f;
  } else {
    memcpy(dv, p, 8);
  }
}

/* One input's typed contents as raw little-endian bytes of its datatype (the OIP typed field of
 * each: fp32, fp64, int64, int (INT8..INT32, range-checked), uint (UINT8..UINT32), uint64,
 * bool). Returns 0 with *out (malloc'd, *len bytes), or an OIP code with msg. */
static int typed_to_raw(const Inference__ModelInferRequest__InferInputTensor *t, uint8_t **out,
                        size_t *len, char *msg, size_t msglen) {
  const Inference__InferTensorContents *c = t->contents;
  const char *dt = t->datatype ? t->datatype : "";
  struct {
    const char *field;
    size_t n;
  } f[] = {{"fp32_contents", c->n_fp32_contents},   {"fp64_contents", c->n_fp64_contents},
           {"int64_contents", c->n_int64_contents}, {"int_contents", c->n_int_contents},
           {"uint_contents", c->n_uint_contents},   {"uint64_contents", c->n_uint64_contents},
           {"bool_contents", c->n_bool_contents},   {"bytes_contents", c->n_bytes_contents}};
  int want = -1;
  size_t esz = 0;
  if (!strcmp(dt, "FP32")) want = 0, esz = 4;
  else if (!strcmp(dt, "FP64")) want = 1, esz = 8;
  else if (!strcmp(dt, "INT64")) want = 2, esz = 8;
  else if (!strcmp(dt, "INT32")) want = 3, esz = 4;
  else if (!strcmp(dt, "INT16")) want = 3, esz = 2;
  else if (!strcmp(dt, "INT8")) want = 3, esz = 1;
  else if (!strcmp(dt, "UINT32")) want = 4, esz = 4;
  else if (!strcmp(dt, "UINT16")) want = 4, esz = 2;
  else if (!strcmp(dt, "UINT8")) want = 4, esz = 1;
  else if (!strcmp(dt, "UINT64")) want = 5, esz = 8;
  else if (!strcmp(dt, "BOOL")) want = 6, esz = 1;
  for (int k = 0; k < (int)(sizeof f / sizeof f[0]); k++) {
    if (!f[k].n || k == want) continue;
    if (want < 0)
      snprintf(msg, msglen, "input '%s': datatype %s has no typed contents field; send it in "
               "raw_input_contents (got contents.%s)", t->name ? t->name : "", dt, f[k].field);
    else
      snprintf(msg, msglen, "input '%s': datatype %s takes contents.%s or raw_input_contents; "
               "got contents.%s", t->name ? t->name : "", dt, f[want].field, f[k].field);
    return TPU_CODE_INVALID_ARGUMENT;
  }
  size_t n = want >= 0 ? f[want].n : 0;
  uint8_t *b = malloc(n ? n * esz : 1);
  if (!b) {
    snprintf(msg, msglen, "out of memory");
    return TPU_CODE_RESOURCE_EXHAUSTED;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t v = 0;
    int ok = 1;
    switch (want) {
    case 0: memcpy(b + 4 * i, &c->fp32_contents[i], 4); continue;
    case 1: memcpy(b + 8 * i, &c->fp64_contents[i], 8); continue;
    case 2: memcpy(b + 8 * i, &c->int64_contents[i], 8); continue;
    case 5: memcpy(b + 8 * i, &c->uint64_contents[i], 8); continue;
    case 3:
      v = c->int_contents[i];
      ok = esz == 4 || (v >= -(INT64_C(1) << (8 * esz - 1)) && v < (INT64_C(1) << (8 * esz - 1)));
      break;
    case 4:
      v = (int64_t)c->uint_contents[i];
      ok = esz == 4 || v < (INT64_C(1) << (8 * esz));
      break;
    default: v = c->bool_contents[i] != 0; break;
    }
    if (!ok) {
      snprintf(msg, msglen, "input '%s': element %zu (%lld) is out of range for %s",
               t->name ? t->name : "", i, (long long)v, dt);
      free(b);
      return TPU_CODE_INVALID_ARGUMENT;
    }
    memcpy(b + esz * i, &v, esz); /* little-endian: the low bytes */
  }
  *out = b;
  *len = n * esz;
  return TPU_CODE_OK;
}

/* Requests that use typed contents other than fp32_contents (and no raw contents) are turned
 * into raw contents, so every datatype travels one validated path. */
static int typed_inputs(Inference__ModelInferRequest *q, char *msg, size_t msglen) {
  if (q->n_raw_input_contents || !q->n_inputs) return TPU_CODE_OK;
  int any = 0;
  for (size_t i = 0; i < q->n_inputs; i++) {
    const Inference__InferTensorContents *c = q->inputs[i]->contents;
    any |= c && (c->n_bool_contents || c->n_int_contents || c->n_int64_contents ||
                 c->n_uint_contents || c->n_uint64_contents || c->n_fp64_contents);
  }
  if (!any) return TPU_CODE_OK; /* the common fp32 case stays as it is (no copy) */
  ProtobufCBinaryData *raw = calloc(q->n_inputs, sizeof *raw);
  if (!raw) {
    snprintf(msg, msglen, "out of memory");
    return TPU_CODE_RESOURCE_EXHAUSTED;
  }
  for (size_t i = 0; i < q->n_inputs; i++) {
    Inference__ModelInferRequest__InferInputTensor *t = q->inputs[i];
    if (!t->contents) continue;
    int code = typed_to_raw(t, &raw[i].data, &raw[i].len, msg, msglen);
    if (code != TPU_CODE_OK) {
      for (size_t k = 0; k < i; k++) free(raw[k].data);
      free(raw);
      return code;
    }
  }
  for (size_t i = 0; i < q->n_inputs; i++) { /* the typed copies are raw now */
    Inference__InferTensorContents *c = q->inputs[i]->contents;
    if (!c) continue;
    free(c->fp32_contents), c->fp32_contents = NULL, c->n_fp32_contents = 0;
    free(c->fp64_contents), c->fp64_contents = NULL, c->n_fp64_contents = 0;
    free(c->int64_contents), c->int64_contents = NULL, c->n_int64_contents = 0;
    free(c->int_contents), c->int_contents = NULL, c->n_int_contents = 0;
    free(c->uint_contents), c->uint_contents = NULL, c->n_uint_contents = 0;
    free(c->uint64_contents), c->uint64_contents = NULL, c->n_uint64_contents = 0;
    free(c->bool_contents), c->bool_contents = NULL, c->n_bool_contents = 0;
  }
  q->raw_input_contents = raw;
  q->n_raw_input_contents = q->n_inputs;
  return TPU_CODE_OK;
}

int tpu_validate_convert_inputs(Inference__ModelInferRequest *q, const tpu_vmodel_t *m,
                                char *msg, size_t msglen) {
  int tc = typed_inputs(q, msg, msglen);
  if (tc != TPU_CODE_OK) return tc;
  for (size_t i = 0; i < q->n_inputs && i < q->n_raw_input_contents; i++) {
    Inference__ModelInferRequest__InferInputTensor *t = q->inputs[i];
    if (!t->datatype || !t->name) continue;
    const tpu_tensor_spec_t *spec = NULL;
    for (size_t k = 0; k < m->ninputs && !spec; k++)
      if (strcmp(m->inputs[k].name, t->name) == 0) spec = &m->inputs[k];
    if (!spec || strcmp(spec->datatype, t->datatype) == 0) continue;
    size_t ss = 0, ds = 0;
    ckind_t sk = ckind(t->datatype, &ss), dk = ckind(spec->datatype, &ds);
    /* Value-preserving directions only: numbers to floats, integers to wider integers. */
    int ok = sk != C_NONE && (dk == C_FP32 || dk == C_FP64 ||
                              ((dk == C_SINT) && (sk == C_SINT || sk == C_UINT)));
    if (!ok) continue; /* validation says "datatype X, expected Y" */
    ProtobufCBinaryData *raw = &q->raw_input_contents[i];
    size_t n = raw->len / ss, count = 0, bytes = 0;
    char ignored[8];
    if (n * ss != raw->len ||
        tpu_validate_shape("", t->shape, t->n_shape, ss, &count, &bytes, ignored,
                           sizeof ignored) != 0 ||
        count != n)
      continue; /* not the shape's data: validation says what is wrong, in the sent type */
    uint8_t *out = malloc(n ? n * ds : 1);
    char *dt = strdup(spec->datatype);
    if (!out || !dt) {
      free(out);
      free(dt);
      snprintf(msg, msglen, "out of memory");
      return TPU_CODE_RESOURCE_EXHAUSTED;
    }
    for (size_t e = 0; e < n; e++) {
      int64_t iv = 0;
      uint64_t uv = 0;
      double dv = 0;
      load_elem(sk, ss, raw->data + e * ss, &iv, &uv, &dv);
      int bad = 0;
      if (dk == C_FP32) {
        float f = (float)dv;
        bad = isinf(f) && !isinf(dv);
        memcpy(out + 4 * e, &f, 4);
      } else if (dk == C_FP64) {
        memcpy(out + 8 * e, &dv, 8);
      } else { /* signed integer of ds bytes */
        int64_t lo = ds == 8 ? INT64_MIN : -(INT64_C(1) << (8 * ds - 1));
        int64_t hi = ds == 8 ? INT64_MAX : (INT64_C(1) << (8 * ds - 1)) - 1;
        if (sk == C_UINT) {
          bad = uv > (uint64_t)hi;
          iv = (int64_t)uv;
        } else {
          bad = iv < lo || iv > hi;
        }
        memcpy(out + ds * e, &iv, ds); /* little-endian: the low bytes */
      }
      if (bad) {
        snprintf(msg, msglen, "input '%s': element %zu (%g) is out of range for %s, the "
                 "model's datatype", t->name, e, dv, spec->datatype);
        free(out);
        free(dt);
        return TPU_CODE_INVALID_ARGUMENT;
      }
    }
    free(raw->data);
    raw->data = out;
    raw->len = n * ds;
    free(t->datatype);
    t->datatype = dt;
  }
  return TPU_CODE_OK;
}
