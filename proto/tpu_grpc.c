/*
 * tpu_grpc.c - gRPC's HTTP/2 header conventions for tpud's methods (tpu_grpc.h).
 */
#include "tpu_grpc.h"

#include <string.h>

#include "tpu_envelope.h"

int tpu_grpc_method_of_path(const uint8_t *p, size_t len) {
  if (!p || len < 4 || p[0] != '/') return 0;
  for (int m = 1; m < 64; m++) {
    const tpu_method_info_t *info = tpu_envelope_method_info(m);
    if (!info) continue;
    size_t sl = strlen(info->service), nl = strlen(info->name);
    if (len == 2 + sl + nl && memcmp(p + 1, info->service, sl) == 0 && p[1 + sl] == '/' &&
        memcmp(p + 2 + sl, info->name, nl) == 0)
      return m;
  }
  return 0;
}

int tpu_grpc_parse_timeout(const uint8_t *v, size_t len, uint64_t *us) {
  if (!v || len < 2 || len > 9) return -1;
  uint64_t n = 0;
  for (size_t i = 0; i + 1 < len; i++) {
    if (v[i] < '0' || v[i] > '9') return -1;
    n = n * 10 + (uint64_t)(v[i] - '0');
  }
  /* 8 digits at most: 99999999 H is 3.6e17 us, which fits 64 bits. */
  switch (v[len - 1]) {
  case 'H': n *= 3600ull * 1000000; break;
  case 'M': n *= 60ull * 1000000; break;
  case 'S': n *= 1000000; break;
  case 'm': n *= 1000; break;
  case 'u': break;
  case 'n': n = (n + 999) / 1000; break;
  default: return -1;
  }
  *us = n ? n : 1;
  return 0;
}

size_t tpu_grpc_percent_encode(const char *in, char *out, size_t outlen) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  if (!out || outlen == 0) return 0;
  for (const unsigned char *p = (const unsigned char *)in; p && *p; p++) {
    if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
      if (o + 1 >= outlen) break;
      out[o++] = (char)*p;
    } else {
      if (o + 3 >= outlen) break;
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = '\0';
  return o;
}

int tpu_grpc_content_type_ok(const uint8_t *v, size_t len) {
  static const char ct[] = "application/grpc";
  size_t cl = sizeof ct - 1;
  return v && len >= cl && memcmp(v, ct, cl) == 0 &&
         (len == cl || v[cl] == '+' || v[cl] == ';');
}
