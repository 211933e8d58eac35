/*
 * fuzz_onnx.c - libFuzzer target: the ONNX decoder, from a model file's bytes.
 *
 * DESIGN
 * The input is a whole .onnx file, decoded with tpu_onnx_parse and no model directory (so
 * external data is refused and no file is opened). A refusal must leave no description and a
 * NUL-terminated message that starts with the name given. On success the decoder's promises are
 * checked: the default domain's opset is in range; every tensor's element count is the product
 * of its non-negative dims and its byte count follows from its data type, and every data byte
 * is read (ASan: the buffers are as large as claimed); every graph input and output has a known
 * type and only dimension 0 may be -1; every node names an op and its domain's opset. Then the
 * description is freed (LeakSanitizer: freed whole).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.h"

static volatile uint8_t sink;

static void check_tensor(const tpu_onnx_tensor_t *t) {
  if (!t->name) abort();
  unsigned bits = tpu_onnx_dtype_bits(t->dtype);
  if (!bits) abort();
  uint64_t ne = 1;
  for (size_t d = 0; d < t->ndim; d++) {
    if (t->dims[d] < 0) abort();
    ne *= (uint64_t)t->dims[d]; /* cannot overflow: the decoder checked */
  }
  if (ne != t->nelements || (ne * bits + 7) / 8 != t->nbytes) abort();
  if (t->nbytes && (!t->data || (uintptr_t)t->data % 64)) abort();
  for (size_t k = 0; k < t->nbytes; k++) sink ^= ((const uint8_t *)t->data)[k];
  if (t->external) abort(); /* no directory: external data is refused */
}

static void check_value(const tpu_onnx_value_t *v) {
  if (!v->name || !v->name[0] || !tpu_onnx_dtype_name(v->dtype)) abort();
  for (size_t d = 0; d < v->ndim; d++)
    if (v->dims[d] < (d == 0 ? -1 : 0)) abort();
  if ((v->ndim && v->dims[0] == -1) != (v->batch_param != NULL)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size heap copy, so ASan sees a read one byte past the end. */
  uint8_t *buf = malloc(size ? size : 1);
  memcpy(buf, data, size);
  tpu_onnx_model_t *m = (tpu_onnx_model_t *)1;
  char err[512];
  err[0] = 0;
  tpu_status_t rc = tpu_onnx_parse(buf, size, "fuzz.onnx", NULL, &m, err, sizeof err);
  free(buf); /* the description must not point into the input */
  if (rc != TPU_OK) {
    if (m || !memchr(err, 0, sizeof err) || strncmp(err, "fuzz.onnx: ", 11) != 0) abort();
    return 0;
  }
  if (!m || m->opset < TPU_ONNX_OPSET_MIN || m->opset > TPU_ONNX_OPSET_MAX) abort();
  for (size_t i = 0; i < m->ninitializers; i++) check_tensor(&m->initializers[i]);
  for (size_t i = 0; i < m->ninputs; i++) check_value(&m->inputs[i]);
  if (!m->noutputs) abort();
  for (size_t i = 0; i < m->noutputs; i++) check_value(&m->outputs[i]);
  for (size_t i = 0; i < m->nnodes; i++) {
    const tpu_onnx_node_t *n = &m->nodes[i];
    if (!n->op_type[0] || !n->domain || n->opset < 0) abort();
    for (size_t k = 0; k < n->ninputs; k++) sink ^= (uint8_t)n->inputs[k][0];
    for (size_t k = 0; k < n->noutputs; k++) sink ^= (uint8_t)n->outputs[k][0];
    for (size_t k = 0; k < n->nattrs; k++) {
      const tpu_onnx_attr_t *a = &n->attrs[k];
      if (!a->name[0]) abort();
      if (a->type == TPU_ONNX_ATTR_TENSOR) check_tensor(a->t);
      if (a->type == TPU_ONNX_ATTR_TENSORS)
        for (size_t j = 0; j < a->n; j++) check_tensor(&a->tensors[j]);
      if (a->type == TPU_ONNX_ATTR_STRING)
        for (size_t j = 0; j < a->s.len; j++) sink ^= a->s.data[j];
      if (a->type == TPU_ONNX_ATTR_INTS)
        for (size_t j = 0; j < a->n; j++) sink ^= (uint8_t)a->ints[j];
    }
  }
  tpu_onnx_free(m);
  return 0;
}
