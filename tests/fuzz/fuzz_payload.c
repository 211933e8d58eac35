/*
 * fuzz_payload.c - libFuzzer target: a payload entry's bytes as `tpuctl audit replay` reads them
 * from a store that may have been changed (tpu_payload_parse_entry: format, key, AES-256-GCM
 * tag, header). Byte 0 bit 0: parse with a key (zeros, id zeros). An entry that parses must
 * describe exactly its body: every tensor's bytes inside it, their sum what follows the header.
 * Every refusal has a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "payload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  tpu_payload_key_t key;
  memset(&key, 0, sizeof key);
  tpu_payload_t *p = NULL;
  char why[1200];
  tpu_payload_status_t st = tpu_payload_parse_entry(data + 1, size - 1, (data[0] & 1) ? &key : NULL,
                                                    &p, why, sizeof why);
  if (st != TPU_PAYLOAD_OK) {
    if (p || !why[0]) abort();
    return 0;
  }
  if (!p || p->nin > TPU_PAYLOAD_MAX_TENSORS || p->nout > TPU_PAYLOAD_MAX_TENSORS) abort();
  size_t body_len = (size_t)data[1 + 28] | (size_t)data[1 + 29] << 8 | (size_t)data[1 + 30] << 16 |
                    (size_t)data[1 + 31] << 24;
  size_t sum = 0;
  for (int side = 0; side < 2; side++) {
    const tpu_payload_tensor_view_t *v = side ? p->out : p->in;
    for (size_t i = 0, n = side ? p->nout : p->nin; i < n; i++) {
      if (v[i].bytes && (v[i].data < p->body || v[i].data + v[i].bytes > p->body + body_len))
        abort();
      sum += v[i].bytes;
    }
  }
  size_t hlen = (size_t)p->body[0] | (size_t)p->body[1] << 8 | (size_t)p->body[2] << 16 |
                (size_t)p->body[3] << 24;
  if (4 + hlen + sum != body_len) abort();
  tpu_payload_free(p);
  return 0;
}
