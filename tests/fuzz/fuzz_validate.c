/*
 * fuzz_validate.c - libFuzzer target: request validation, from the bytes a client sends.
 *
 * DESIGN
 * Byte 0 picks what the rest is: a serialized inference.ModelInferRequest validated against a
 * fixed model (the bundled digits model's shape, or a two-input model that exercises duplicate,
 * missing and batch-mismatch paths), or a tpud.MatMulRequest. The request is mapped to
 * tpu_vrequest_t exactly as handlers.c maps it (copied here: the handler is not callable
 * without a server). On success every invariant the server then relies on is checked: each
 * model input's data is exactly bytes[i] long and inside the request, rows is the batch
 * dimension, the output flags are set as asked, and every floating-point value accepted is
 * finite (checked here with isfinite on the decoded value, not the bit test validate.c uses).
 * ASan reads all the data the result points at, as the batcher would.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "stats.h"
#include "tpud.pb-c.h"
#include "validate.h"

static const int64_t digits_in_shape[] = {-1, 64};
static const int64_t digits_out_shape[] = {-1, 10};
static const tpu_tensor_spec_t digits_in[] = {{"x", "FP32", digits_in_shape, 2, 0}};
static const tpu_tensor_spec_t digits_out[] = {{"y", "FP32", digits_out_shape, 2, 0}};

static const int64_t two_a_shape[] = {-1, 3};
static const int64_t two_b_shape[] = {2, -1, 2};
static const int64_t two_o_shape[] = {-1};
static const tpu_tensor_spec_t two_in[] = {{"a", "FP32", two_a_shape, 2, 0},
                                           {"b", "INT8", two_b_shape, 3, 0}};
static const tpu_tensor_spec_t two_out[] = {{"p", "FP32", two_o_shape, 1, 0},
                                            {"q", "BF16", two_o_shape, 1, 0}};

static const tpu_vmodel_t models[2] = {
    {"model 'digits' version 1", digits_in, 1, digits_out, 1},
    {"model 'two' version 3", two_in, 2, two_out, 2},
};

/* Reads every byte of [p, p+n): ASan reports any that is not the request's. */
static volatile uint8_t sink;
static void touch(const void *p, size_t n) {
  const volatile uint8_t *b = p;
  for (size_t i = 0; i < n; i++) sink ^= b[i];
}

/* Whether `bytes` of `dt` data at p hold only finite values (other types: yes). */
static int all_finite(const char *dt, const uint8_t *p, size_t bytes) {
  for (size_t i = 0; p && !strcmp(dt, "FP32") && i + 4 <= bytes; i += 4) {
    float f;
    memcpy(&f, p + i, 4);
    if (!isfinite(f)) return 0;
  }
  for (size_t i = 0; p && !strcmp(dt, "FP64") && i + 8 <= bytes; i += 8) {
    double d;
    memcpy(&d, p + i, 8);
    if (!isfinite(d)) return 0;
  }
  for (size_t i = 0; p && (!strcmp(dt, "BF16") || !strcmp(dt, "FP16")) && i + 2 <= bytes;
       i += 2) {
    uint16_t h;
    memcpy(&h, p + i, 2);
    float f;
    if (dt[0] == 'B') {
      uint32_t u = (uint32_t)h << 16;
      memcpy(&f, &u, 4);
    } else { /* FP16, decoded: exponent 31 is infinity (mantissa 0) or NaN */
      int e = (h >> 10) & 31, mant = h & 1023;
      f = e == 31 ? (mant ? NAN : INFINITY)
                  : ldexpf((float)(e ? mant | 1024 : mant), (e ? e : 1) - 25);
    }
    if (!isfinite(f)) return 0;
  }
  return 1;
}

static void check_infer(const tpu_vmodel_t *m, const uint8_t *data, size_t size) {
  Inference__ModelInferRequest *q = inference__model_infer_request__unpack(NULL, size, data);
  if (!q) return;
  /* handlers.c refuses these before validation. */
  if (q->n_inputs > TPU_VALIDATE_MAX_TENSORS || q->n_outputs > TPU_VALIDATE_MAX_TENSORS) goto out;
  tpu_vinput_t vin[TPU_VALIDATE_MAX_TENSORS];
  const char *vout[TPU_VALIDATE_MAX_TENSORS];
  tpu_vrequest_t vr;
  tpu_validate_describe_request(q, vin, vout, &vr); /* the server's own mapping */
  tpu_vresult_t res;
  char msg[512];
  msg[0] = 0;
  int code = tpu_validate_infer(m, &vr, &res, msg, sizeof msg);
  if (code != TPU_CODE_OK) {
    if (code != TPU_CODE_INVALID_ARGUMENT) abort();
    if (!msg[0] || !memchr(msg, 0, sizeof msg)) abort(); /* every refusal says why */
    goto out;
  }
  for (size_t i = 0; i < m->ninputs; i++) {
    size_t r = res.input_of[i];
    if (r >= q->n_inputs) abort();
    if (strcmp(q->inputs[r]->name, m->inputs[i].name) != 0) abort();
    size_t count = 1;
    int64_t batch = -1;
    for (size_t d = 0; d < m->inputs[i].rank; d++) {
      int64_t dim = q->inputs[r]->shape[d];
      if (m->inputs[i].shape[d] == -1) batch = dim;
      count *= (size_t)dim; /* validated: no overflow */
    }
    if (batch >= 0 && (size_t)batch != res.rows) abort();
    if (res.bytes[i] != count * tpu_validate_dtype_size(m->inputs[i].datatype)) abort();
    if (res.bytes[i] && !res.data[i]) abort();
    if (res.data[i]) touch(res.data[i], res.bytes[i]);
    if (!all_finite(m->inputs[i].datatype, res.data[i], res.bytes[i])) abort();
  }
  for (size_t j = 0; j < m->noutputs; j++) {
    int asked = q->n_outputs == 0;
    for (size_t k = 0; k < q->n_outputs; k++)
      if (strcmp(q->outputs[k]->name, m->outputs[j].name) == 0) asked = 1;
    if (res.want_output[j] != asked) abort();
  }
out:
  inference__model_infer_request__free_unpacked(q, NULL);
}

static void check_matmul(const uint8_t *data, size_t size, uint64_t max_elems) {
  Tpud__MatMulRequest *q = tpud__mat_mul_request__unpack(NULL, size, data);
  if (!q) return;
  tpu_vtensor_t a = {0}, b = {0};
  /* as in do_matmul (server/handlers.c) */
  if (q->a)
    a = (tpu_vtensor_t){q->a->shape, q->a->n_shape, q->a->datatype, q->a->data.len, 1,
                        q->a->data.data};
  if (q->b)
    b = (tpu_vtensor_t){q->b->shape, q->b->n_shape, q->b->datatype, q->b->data.len, 1,
                        q->b->data.data};
  size_t m, k, n;
  int dtype;
  char msg[512];
  msg[0] = 0;
  int code = tpu_validate_matmul(&a, &b, max_elems, &m, &k, &n, &dtype, msg, sizeof msg);
  if (code == TPU_CODE_OK) {
    if (m == 0 || k == 0 || n == 0) abort();
    if (m * k > max_elems || k * n > max_elems || m * n > max_elems) abort();
    if ((int64_t)m != q->a->shape[0] || (int64_t)k != q->b->shape[0] ||
        (int64_t)n != q->b->shape[1])
      abort();
    touch(q->a->data.data, q->a->data.len);
    touch(q->b->data.data, q->b->data.len);
    if (!all_finite(q->a->datatype, q->a->data.data, q->a->data.len) ||
        !all_finite(q->b->datatype, q->b->data.data, q->b->data.len))
      abort();
  } else if (!msg[0]) {
    abort();
  }
  tpud__mat_mul_request__free_unpacked(q, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t sel = data[0];
  data++;
  size--;
  switch (sel % 3) {
  case 0:
    check_infer(&models[0], data, size);
    break;
  case 1:
    check_infer(&models[1], data, size);
    break;
  default:
    check_matmul(data, size, sel & 0x80 ? 16 : (64u << 20) / 4);
    break;
  }
  return 0;
}
