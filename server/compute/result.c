/*
 * result.c - the finite-result check (see result.h).
 */
#include "result.h"

#include <stdint.h>
#include <string.h>

#include "tpu_text.h"

int tpu_validate_result_rows(const void *base, size_t rows, size_t stride, size_t offset,
                             size_t cols, const char *what, const char *why, char *msg,
                             size_t msglen) {
  if (!base) return 0;
  const unsigned char *p = base;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      uint32_t u;
      memcpy(&u, p + r * stride + offset + 4 * c, 4);
      if ((u & 0x7f800000u) != 0x7f800000u) continue; /* exponent not all ones: finite */
      const char *kind = (u & 0x007fffffu) ? "NaN" : (u >> 31) ? "-infinity" : "infinity";
      tpu_errf(msg, msglen, "%s element [%zu,%zu] is %s: %s", what, r, c, kind, why);
      return -1;
    }
  return 0;
}

int tpu_validate_result(const float *y, size_t rows, size_t cols, const char *what,
                        const char *why, char *msg, size_t msglen) {
  return tpu_validate_result_rows(y, rows, cols * sizeof(float), 0, cols, what, why, msg,
                                  msglen);
}

int tpu_validate_result_typed(const void *base, size_t rows, size_t stride, size_t offset,
                              size_t cols, const char *datatype, const char *what,
                              const char *why, char *msg, size_t msglen) {
  size_t esz;
  uint64_t expo, mant;
  if (!base) return 0;
  if (strcmp(datatype, "FP32") == 0)
    return tpu_validate_result_rows(base, rows, stride, offset, cols, what, why, msg, msglen);
  if (strcmp(datatype, "FP64") == 0) esz = 8, expo = 0x7ff0000000000000ull, mant = 0xfffffffffffffull;
  else if (strcmp(datatype, "FP16") == 0) esz = 2, expo = 0x7c00u, mant = 0x3ffu;
  else if (strcmp(datatype, "BF16") == 0) esz = 2, expo = 0x7f80u, mant = 0x7fu;
  else return 0; /* integers and booleans are always finite */
  const unsigned char *p = base;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      uint64_t u = 0;
      memcpy(&u, p + r * stride + offset + esz * c, esz);
      if ((u & expo) != expo) continue;
      tpu_errf(msg, msglen, "%s element [%zu,%zu] is %s: %s", what, r, c,
               (u & mant) ? "NaN" : "infinite", why);
      return -1;
    }
  return 0;
}
