/*
 * fuzz_grpc.c - libFuzzer target: gRPC's HTTP/2 header conventions (proto/tpu_grpc.c), the code
 * that reads what a gRPC client puts in :path, grpc-timeout and content-type, and writes
 * grpc-message.
 *
 * DESIGN
 * The input is one header value, given to every reader; each result is checked against an
 * independent statement of the rule, so a wrong answer is a finding, not only a crash:
 *  - method_of_path: a method is returned exactly when the input is "/<service>/<name>" of that
 *    method in the method table;
 *  - parse_timeout: accepted exactly when the input is 1..8 ASCII digits and one unit letter,
 *    with a value >= 1 that equals the digits times the unit (nanoseconds rounded up);
 *  - content_type_ok: exactly "application/grpc", alone or followed by '+' or ';';
 *  - percent_encode (of the input up to its first NUL, into buffers of every size up to 64 and
 *    one large one): the output is printable ASCII, NUL-terminated within the buffer, never
 *    splits an escape, and decodes back to a prefix of the input (all of it when room allows).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_envelope.h"
#include "tpu_grpc.h"

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static void check_percent(const char *in, size_t cap) {
  char *out = malloc(cap);
  if (!out) abort();
  size_t n = tpu_grpc_percent_encode(in, out, cap);
  if (n >= cap || out[n] != '\0' || strlen(out) != n) abort();
  /* Decode and compare with the input's prefix. */
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)out[i];
    if (c < 0x20 || c > 0x7e) abort();
    if (c == '%') {
      if (i + 2 >= n) abort(); /* an escape cut short */
      int h = hexval(out[i + 1]), l = hexval(out[i + 2]);
      if (h < 0 || l < 0) abort();
      if ((unsigned char)in[j] != (unsigned)(h * 16 + l)) abort();
      unsigned char orig = (unsigned char)in[j];
      if (orig >= 0x20 && orig <= 0x7e && orig != '%') abort(); /* escaped needlessly */
      i += 2;
    } else if ((unsigned char)in[j] != c) {
      abort();
    }
    j++;
  }
  /* With room for the worst case (3 bytes each) nothing is left out. */
  if (cap > 3 * strlen(in) && j != strlen(in)) abort();
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* :path */
  int m = tpu_grpc_method_of_path(data, size);
  int want = 0;
  for (int k = 1; k < 64 && !want; k++) {
    const tpu_method_info_t *info = tpu_envelope_method_info(k);
    if (!info) continue;
    char p[256];
    int pl = snprintf(p, sizeof p, "/%s/%s", info->service, info->name);
    if ((size_t)pl == size && memcmp(p, data, size) == 0) want = k;
  }
  if (m != want) abort();

  /* grpc-timeout */
  uint64_t us = 0;
  int ok = tpu_grpc_parse_timeout(data, size, &us) == 0;
  int valid = size >= 2 && size <= 9 && strchr("HMSmun", data[size - 1]) && data[size - 1];
  uint64_t v = 0;
  for (size_t i = 0; valid && i + 1 < size; i++) {
    if (data[i] < '0' || data[i] > '9') valid = 0;
    else v = v * 10 + (data[i] - '0');
  }
  if (ok != valid) abort();
  if (ok) {
    uint64_t e;
    switch (data[size - 1]) {
    case 'H': e = v * 3600000000ull; break;
    case 'M': e = v * 60000000ull; break;
    case 'S': e = v * 1000000ull; break;
    case 'm': e = v * 1000ull; break;
    case 'u': e = v; break;
    default: e = (v + 999) / 1000; break;
    }
    if (e == 0) e = 1;
    if (us != e) abort();
  }

  /* content-type */
  static const char ct[] = "application/grpc";
  int ctw = size >= 16 && memcmp(data, ct, 16) == 0 &&
            (size == 16 || data[16] == '+' || data[16] == ';');
  if (tpu_grpc_content_type_ok(data, size) != ctw) abort();

  /* grpc-message */
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  for (size_t cap = 1; cap <= 64; cap++) check_percent(s, cap);
  check_percent(s, 3 * size + 1);
  free(s);
  return 0;
}
