/*
 * fuzz_oip_json.c - libFuzzer target: the OIP v2 REST JSON dialect, both directions.
 *
 * DESIGN
 * Byte 0 picks the mode; the rest is the input.
 *  - 0 modulo 4: the rest is an infer request body. When it parses, every input is sent back as an
 *    output of a ModelInferResponse (raw contents as the request's raw inputs), formatted,
 *    and the text is checked against the bytes: it must be JSON, and each element must read
 *    back as the value it came from (integers exactly, floats to the same float, BYTES to the
 *    same string). Then the formatted outputs are parsed again as request inputs: the raw bytes
 *    must come back identical.
 *  - 2 modulo 4: the rest is a body in Triton's binary tensor form (binary_mode says how).
 *  - 3 modulo 4: the rest is a KServe V1 predict body (v1_mode says how).
 *  - 1 modulo 4: the rest is a serialized ModelInferResponse (what the engine side hands the HTTP
 *    endpoint), formatted; on success the text is checked against the bytes as above. Random
 *    raw bytes make every float bit pattern reach the shortest-float printer.
 * NaN and infinities, which JSON cannot express, must make formatting fail (raw data, typed
 * contents or a double parameter): a success whose outputs hold one is a finding, and so is
 * any null or non-number where a float was.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_oip_json.h"

static uint64_t load_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static float f16_to_f32(uint16_t h) { /* reference, independent of the code under test */
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = ldexpf((float)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = ldexpf((float)(m | 1024), e - 25);
  return s ? -v : v;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double json_num(const json_t *v) {
  if (json_is_integer(v)) return (double)json_integer_value(v);
  if (json_is_real(v)) return json_real_value(v);
  abort(); /* a number was expected */
}

/* A float element: a number that reads back as f (±0 alike); f is never NaN or infinite in a
 * response that formatted. */
static void check_float(const json_t *v, double f, int is_f32) {
  if (!isfinite(f)) abort(); /* formatted although JSON cannot express it */
  double d = json_num(v);
  if (is_f32 ? (float)d != (float)f : d != f) abort();
}

/* Checks one formatted output's "data" array against its raw bytes. */
static void check_data(const json_t *data, const char *dtype, const uint8_t *raw, size_t len) {
  if (!json_is_array(data)) abort();
  size_t esize = tpu_oip_datatype_size(dtype);
  size_t n = json_array_size(data);
  if (strcmp(dtype, "BYTES") == 0) {
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
      const json_t *s = json_array_get(data, i);
      if (!json_is_string(s) || off + 4 > len) abort();
      size_t l = (size_t)load_le(raw + off, 4);
      off += 4;
      if (l > len - off || json_string_length(s) != l || memcmp(json_string_value(s), raw + off, l))
        abort();
      off += l;
    }
    if (off != len) abort();
    return;
  }
  if (esize == 0 || n * esize != len) abort();
  for (size_t i = 0; i < n; i++) {
    const json_t *v = json_array_get(data, i);
    uint64_t u = load_le(raw + i * esize, esize);
    if (!strcmp(dtype, "BOOL")) {
      if (!json_is_boolean(v) || json_is_true(v) != (u != 0)) abort();
    } else if (!strncmp(dtype, "UINT", 4)) {
      if (!json_is_integer(v) || (uint64_t)json_integer_value(v) != u) abort();
    } else if (!strncmp(dtype, "INT", 3)) {
      unsigned bits = (unsigned)(8 * esize);
      int64_t s = bits == 64 ? (int64_t)u : (int64_t)(u << (64 - bits)) >> (64 - bits);
      if (!json_is_integer(v) || json_integer_value(v) != s) abort();
    } else if (!strcmp(dtype, "FP16")) {
      check_float(v, f16_to_f32((uint16_t)u), 1);
    } else if (!strcmp(dtype, "BF16")) {
      check_float(v, bits_f32((uint32_t)u << 16), 1);
    } else if (!strcmp(dtype, "FP32")) {
      check_float(v, bits_f32((uint32_t)u), 1);
    } else if (!strcmp(dtype, "FP64")) {
      double d;
      memcpy(&d, &u, 8);
      check_float(v, d, 0);
    } else {
      abort();
    }
  }
}

/* True when raw data holds a value JSON (or jansson) cannot carry: a non-finite float, or (with
 * uint64) a UINT64 above INT64_MAX (jansson integers are int64). */
static int has_unrepresentable(const char *dtype, const uint8_t *raw, size_t len, int uint64) {
  size_t esize = tpu_oip_datatype_size(dtype);
  if (!esize) return 0;
  for (size_t i = 0; i + esize <= len; i += esize) {
    uint64_t u = load_le(raw + i, esize);
    if (!strcmp(dtype, "UINT64") && u > INT64_MAX) return uint64;
    if (!strcmp(dtype, "FP16") && !isfinite(f16_to_f32((uint16_t)u))) return 1;
    if (!strcmp(dtype, "BF16") && !isfinite(bits_f32((uint32_t)u << 16))) return 1;
    if (!strcmp(dtype, "FP32") && !isfinite(bits_f32((uint32_t)u))) return 1;
    if (!strcmp(dtype, "FP64")) {
      double d;
      memcpy(&d, &u, 8);
      if (!isfinite(d)) return 1;
    }
  }
  return 0;
}

/* Whether a formatted response would have had to print a NaN or an infinity: in raw data, in
 * typed FP32/FP64 contents (of a float output), or in a double parameter. */
static int param_nonfinite(const Inference__InferParameter *v) {
  return v &&
         v->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM &&
         !isfinite(v->double_param);
}

static int response_nonfinite(const Inference__ModelInferResponse *resp) {
  for (size_t i = 0; i < resp->n_parameters; i++)
    if (param_nonfinite(resp->parameters[i]->value)) return 1;
  for (size_t i = 0; i < resp->n_outputs; i++) {
    const Inference__ModelInferResponse__InferOutputTensor *o = resp->outputs[i];
    if (!o || !o->datatype) continue;
    for (size_t k = 0; k < o->n_parameters; k++)
      if (param_nonfinite(o->parameters[k]->value)) return 1;
    if (resp->n_raw_output_contents == resp->n_outputs) {
      if (has_unrepresentable(o->datatype, resp->raw_output_contents[i].data,
                              resp->raw_output_contents[i].len, 0))
        return 1;
    } else if (o->contents) {
      if (!strcmp(o->datatype, "FP32"))
        for (size_t k = 0; k < o->contents->n_fp32_contents; k++)
          if (!isfinite(o->contents->fp32_contents[k])) return 1;
      if (!strcmp(o->datatype, "FP64"))
        for (size_t k = 0; k < o->contents->n_fp64_contents; k++)
          if (!isfinite(o->contents->fp64_contents[k])) return 1;
    }
  }
  return 0;
}

/* Formats resp; on success checks the text against resp's raw outputs. Returns the parsed
 * text (caller decrefs) or NULL when formatting failed or the text held unrepresentable
 * values. */
static json_t *format_and_check(const Inference__ModelInferResponse *resp) {
  char *text = NULL, err[256];
  tpu_oip_json_status_t st = tpu_oip_json_infer_response_format(resp, &text, err, sizeof err);
  if (st != TPU_OIP_JSON_OK) {
    if (text) abort();
    return NULL;
  }
  /* A NaN or infinity anywhere must have failed the whole format (never null, never a token). */
  if (response_nonfinite(resp)) abort();
  int raw = resp->n_raw_output_contents == resp->n_outputs && resp->n_outputs;
  int lossy = 0;
  for (size_t i = 0; raw && i < resp->n_outputs; i++)
    lossy |= has_unrepresentable(resp->outputs[i]->datatype, resp->raw_output_contents[i].data,
                                 resp->raw_output_contents[i].len, 1);
  json_error_t je;
  json_t *root = json_loads(text, 0, &je); /* duplicate map keys survive protobuf: allowed */
  if (!root) {
    /* Only a UINT64 beyond jansson's int64 may make valid JSON that jansson cannot load. */
    int big = 0;
    for (size_t i = 0; raw && i < resp->n_outputs; i++)
      if (!strcmp(resp->outputs[i]->datatype, "UINT64"))
        big |= has_unrepresentable("UINT64", resp->raw_output_contents[i].data,
                                   resp->raw_output_contents[i].len, 1);
    if (!big) abort(); /* the formatter wrote text that is not JSON */
    free(text);
    return NULL;
  }
  free(text);
  json_t *outs = json_object_get(root, "outputs");
  if (!json_is_array(outs) || json_array_size(outs) != resp->n_outputs) abort();
  for (size_t i = 0; raw && i < resp->n_outputs; i++) {
    const json_t *o = json_array_get(outs, i);
    check_data(json_object_get(o, "data"), resp->outputs[i]->datatype,
               resp->raw_output_contents[i].data, resp->raw_output_contents[i].len);
  }
  if (lossy) {
    json_decref(root);
    return NULL;
  }
  return root;
}

static void request_mode(const uint8_t *data, size_t size) {
  tpu_oip_json_limits_t lim = {.max_depth = 0, .max_bytes = 1 << 20};
  Inference__ModelInferRequest *q = NULL;
  char err[256];
  tpu_oip_json_status_t st =
      tpu_oip_json_infer_request_parse((const char *)data, size, "m", "1", &lim, &q, err, sizeof err);
  if (st != TPU_OIP_JSON_OK) {
    if (q || !memchr(err, 0, sizeof err) || !err[0]) abort();
    return;
  }
  if (q->n_raw_input_contents != q->n_inputs) abort(); /* every input goes raw */

  /* Send the inputs back as outputs. */
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  Inference__ModelInferResponse__InferOutputTensor *outs = calloc(q->n_inputs + 1, sizeof *outs);
  Inference__ModelInferResponse__InferOutputTensor **outp = calloc(q->n_inputs + 1, sizeof *outp);
  for (size_t i = 0; i < q->n_inputs; i++) {
    inference__model_infer_response__infer_output_tensor__init(&outs[i]);
    outs[i].name = q->inputs[i]->name;
    outs[i].datatype = q->inputs[i]->datatype;
    outs[i].n_shape = q->inputs[i]->n_shape;
    outs[i].shape = q->inputs[i]->shape;
    outp[i] = &outs[i];
  }
  resp.model_name = q->model_name;
  resp.model_version = q->model_version;
  resp.id = q->id;
  resp.n_outputs = q->n_inputs;
  resp.outputs = outp;
  resp.n_raw_output_contents = q->n_raw_input_contents;
  resp.raw_output_contents = q->raw_input_contents;
  char *text = NULL;
  if (tpu_oip_json_infer_response_format(&resp, &text, err, sizeof err) != TPU_OIP_JSON_OK)
    abort(); /* what the parser accepted, the formatter must be able to write */
  free(text);
  json_t *root = format_and_check(&resp);
  if (root && q->n_inputs) {
    /* And back: the formatted outputs, as request inputs, give the same bytes. */
    json_t *body = json_object();
    json_object_set(body, "inputs", json_object_get(root, "outputs"));
    Inference__ModelInferRequest *q2 = NULL;
    st = tpu_oip_json_infer_request_from_json(body, "m", "1", &q2, err, sizeof err);
    if (st != TPU_OIP_JSON_OK) abort();
    if (q2->n_inputs != q->n_inputs) abort();
    for (size_t i = 0; i < q->n_inputs; i++) {
      const ProtobufCBinaryData *a = &q->raw_input_contents[i], *b = &q2->raw_input_contents[i];
      if (strcmp(q->inputs[i]->datatype, q2->inputs[i]->datatype) ||
          q->inputs[i]->n_shape != q2->inputs[i]->n_shape || a->len != b->len)
        abort();
      if (!strcmp(q->inputs[i]->datatype, "BOOL")) {
        for (size_t k = 0; k < a->len; k++)
          if ((a->data[k] != 0) != (b->data[k] != 0)) abort();
      } else if (a->len && memcmp(a->data, b->data, a->len)) {
        /* floats: -0 may come back as 0 ("-0" reads as the integer 0); nothing else may change */
        size_t es = tpu_oip_datatype_size(q->inputs[i]->datatype);
        int fl = !strcmp(q->inputs[i]->datatype, "FP32") || !strcmp(q->inputs[i]->datatype, "FP64") ||
                 !strcmp(q->inputs[i]->datatype, "FP16") || !strcmp(q->inputs[i]->datatype, "BF16");
        if (!fl) abort();
        for (size_t k = 0; k < a->len; k += es) {
          uint64_t x = load_le(a->data + k, es), y = load_le(b->data + k, es);
          uint64_t sign = UINT64_C(1) << (8 * es - 1);
          if (x != y && !((x | sign) == sign && (y | sign) == sign)) abort();
        }
      }
    }
    inference__model_infer_request__free_unpacked(q2, NULL);
    json_decref(body);
  }
  json_decref(root);
  free(outs);
  free(outp);
  inference__model_infer_request__free_unpacked(q, NULL);
}

/*
 * Binary tensors: two bytes give the JSON header's length (modulo the size), the rest is body.
 * When it parses, the inputs go back as outputs, every one binary (NaN and infinities allowed:
 * no JSON carries them), and the answer parsed again as a binary request must give the very
 * same bytes; its binary_data_size parameters must add up to the section after the header.
 */
static void binary_mode(const uint8_t *data, size_t size) {
  if (size < 2) return;
  size_t jl = ((size_t)data[0] | (size_t)data[1] << 8) % (size - 1);
  data += 2;
  size -= 2;
  tpu_oip_json_limits_t lim = {.max_depth = 0, .max_bytes = 1 << 20};
  Inference__ModelInferRequest *q = NULL;
  char err[256];
  tpu_oip_json_status_t st = tpu_oip_json_infer_request_parse_binary(
      (const char *)data, size, jl, "m", "1", &lim, &q, err, sizeof err);
  if (st != TPU_OIP_JSON_OK) {
    if (q || !memchr(err, 0, sizeof err) || !err[0]) abort();
    return;
  }
  if (q->n_raw_input_contents != q->n_inputs) abort();
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  Inference__ModelInferResponse__InferOutputTensor *outs = calloc(q->n_inputs + 1, sizeof *outs);
  Inference__ModelInferResponse__InferOutputTensor **outp = calloc(q->n_inputs + 1, sizeof *outp);
  unsigned char *bin = malloc(q->n_inputs + 1);
  for (size_t i = 0; i < q->n_inputs; i++) {
    inference__model_infer_response__infer_output_tensor__init(&outs[i]);
    outs[i].name = q->inputs[i]->name;
    outs[i].datatype = q->inputs[i]->datatype;
    outs[i].n_shape = q->inputs[i]->n_shape;
    outs[i].shape = q->inputs[i]->shape;
    outp[i] = &outs[i];
    bin[i] = 1;
  }
  resp.model_name = q->model_name;
  resp.n_outputs = q->n_inputs;
  resp.outputs = outp;
  resp.n_raw_output_contents = q->n_raw_input_contents;
  resp.raw_output_contents = q->raw_input_contents;
  char *text = NULL;
  size_t len = 0, hl = 0;
  if (tpu_oip_json_infer_response_format_binary(&resp, bin, &text, &len, &hl, err, sizeof err) !=
      TPU_OIP_JSON_OK)
    abort(); /* what the parser accepted, the formatter must write */
  json_error_t jerr;
  json_t *root = json_loadb(text, hl, 0, &jerr);
  if (!root || hl > len) abort();
  /* Back as a request: {"inputs": outputs} and the same binary section. */
  json_t *body = json_object();
  json_object_set(body, "inputs", json_object_get(root, "outputs"));
  char *btext = json_dumps(body, JSON_COMPACT);
  size_t bl = strlen(btext);
  char *again = malloc(bl + (len - hl) + 1);
  memcpy(again, btext, bl);
  memcpy(again + bl, text + hl, len - hl);
  Inference__ModelInferRequest *q2 = NULL;
  if (tpu_oip_json_infer_request_parse_binary(again, bl + (len - hl), bl, "m", "1", NULL, &q2, err,
                                              sizeof err) != TPU_OIP_JSON_OK)
    abort();
  if (q2->n_inputs != q->n_inputs) abort();
  for (size_t i = 0; i < q->n_inputs; i++) {
    const ProtobufCBinaryData *a = &q->raw_input_contents[i], *b = &q2->raw_input_contents[i];
    if (a->len != b->len || (a->len && memcmp(a->data, b->data, a->len)) ||
        strcmp(q->inputs[i]->datatype, q2->inputs[i]->datatype))
      abort();
  }
  inference__model_infer_request__free_unpacked(q2, NULL);
  free(again);
  free(btext);
  json_decref(body);
  json_decref(root);
  free(text);
  free(bin);
  free(outs);
  free(outp);
  inference__model_infer_request__free_unpacked(q, NULL);
}

/*
 * KServe V1 bodies (byte 0 = 3) against a fixed two-input model, x FP32 [-1, 3] and c INT64
 * [-1], or (byte 1 odd) x alone: whatever parses has every input at its row shape times the
 * same rows, and formats back, rows and columns, as JSON.
 */
static void v1_mode(const uint8_t *data, size_t size) {
  if (size < 1) return;
  static const int64_t d3[] = {3};
  tpu_oip_v1_input_t in[] = {{"x", "FP32", 1, d3}, {"c", "INT64", 0, d3}};
  size_t nin = (data[0] & 1) ? 1 : 2;
  tpu_oip_json_limits_t lim = {.max_depth = 0, .max_bytes = 1 << 20};
  Inference__ModelInferRequest *q = NULL;
  int col = -1;
  char err[256];
  tpu_oip_json_status_t st = tpu_oip_json_v1_predict_parse(
      (const char *)data + 1, size - 1, "m", NULL, in, nin, 1, &lim, &q, &col, err, sizeof err);
  if (st != TPU_OIP_JSON_OK) {
    if (q || !err[0]) abort();
    return;
  }
  if (q->n_inputs != nin || q->n_raw_input_contents != nin || (col != 0 && col != 1)) abort();
  int64_t rows = q->inputs[0]->shape[0];
  if (q->raw_input_contents[0].len != (size_t)rows * 12) abort();
  if (nin == 2 && (q->inputs[1]->shape[0] != rows || q->raw_input_contents[1].len != (size_t)rows * 8))
    abort();
  Inference__ModelInferResponse resp = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  Inference__ModelInferResponse__InferOutputTensor outs[2], *outp[2];
  for (size_t i = 0; i < nin; i++) {
    inference__model_infer_response__infer_output_tensor__init(&outs[i]);
    outs[i].name = q->inputs[i]->name;
    outs[i].datatype = q->inputs[i]->datatype;
    outs[i].n_shape = q->inputs[i]->n_shape;
    outs[i].shape = q->inputs[i]->shape;
    outp[i] = &outs[i];
  }
  resp.n_outputs = resp.n_raw_output_contents = nin;
  resp.outputs = outp;
  resp.raw_output_contents = q->raw_input_contents;
  for (int form = 0; form < 2; form++) {
    char *text = NULL;
    if (tpu_oip_json_v1_predict_format(&resp, form, 1, &text, err, sizeof err) != TPU_OIP_JSON_OK)
      abort(); /* finite values from JSON always format */
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j) abort();
    json_decref(j);
    free(text);
  }
  inference__model_infer_request__free_unpacked(q, NULL);
}

static void response_mode(const uint8_t *data, size_t size) {
  Inference__ModelInferResponse *r = inference__model_infer_response__unpack(NULL, size, data);
  if (!r) return;
  json_t *root = format_and_check(r);
  json_decref(root);
  inference__model_infer_response__free_unpacked(r, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if ((data[0] & 3) == 3) v1_mode(data + 1, size - 1);
  else if (data[0] & 1) response_mode(data + 1, size - 1);
  else if (data[0] & 2) binary_mode(data + 1, size - 1);
  else request_mode(data + 1, size - 1);
  return 0;
}
