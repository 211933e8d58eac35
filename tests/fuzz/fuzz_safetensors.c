/*
 * fuzz_safetensors.c - libFuzzer target: the safetensors reader, from a file's bytes.
 *
 * DESIGN
 * The input is a whole checkpoint file, parsed in place with tpu_safetensors_parse (the same
 * checks as a file opened from disk). On success the reader's promises are checked: the tensors,
 * in data-offset order, tile the data section from 0 to its end with no gap; each tensor's byte
 * count is its shape's element count times its dtype's size; find() returns each tensor by name;
 * and every data byte is read (ASan: every data pointer stays inside the input).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size heap copy, so ASan sees a read one byte past the end. */
  uint8_t *buf = malloc(size ? size : 1);
  memcpy(buf, data, size);
  tpu_safetensors_t *st = NULL;
  char err[512];
  err[0] = 0;
  tpu_status_t rc = tpu_safetensors_parse(buf, size, "fuzz.safetensors", &st, err, sizeof err);
  if (rc != TPU_OK) {
    if (st || !err[0] || !memchr(err, 0, sizeof err)) abort();
    free(buf);
    return 0;
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)buf[i] << (8 * i);
  size_t data_start = 8 + (size_t)hlen;
  uint64_t next = 0;
  size_t n = tpu_safetensors_count(st);
  for (size_t i = 0; i < n; i++) {
    const tpu_st_tensor_t *t = tpu_safetensors_tensor(st, i);
    if (!t || !t->name) abort();
    if (t->begin != next || t->end < t->begin || t->nbytes != t->end - t->begin) abort();
    next = t->end;
    if (t->ndim > TPU_SAFETENSORS_MAX_DIMS) abort();
    uint64_t ne = 1;
    for (size_t d = 0; d < t->ndim; d++) ne *= t->shape[d];
    if (ne != t->nelements) abort();
    unsigned bits = tpu_st_dtype_bits(t->dtype);
    if (!bits || (ne * bits) % 8 || ne * bits / 8 != t->nbytes) abort();
    if (t->nbytes && (const uint8_t *)t->data != buf + data_start + t->begin) abort();
    for (size_t k = 0; k < t->nbytes; k++) sink ^= ((const uint8_t *)t->data)[k];
    if (tpu_safetensors_find(st, t->name) != t) abort();
  }
  if (data_start + next != size) abort(); /* tensors end exactly at the end of the file */
  if (tpu_safetensors_tensor(st, n) != NULL) abort();
  (void)tpu_safetensors_metadata(st, "format");
  (void)tpu_safetensors_find(st, "__metadata__");
  tpu_safetensors_close(st);
  free(buf);
  return 0;
}
