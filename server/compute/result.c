/*
 * result.c - the finite-result check (see result.h).
 */
#include "result.h"

#include <stdint.h>
#include <string.h>

#include "tpu_text.h"

int tpu_validate_result(const float *y, size_t rows, size_t cols, const char *what,
                        const char *why, char *msg, size_t msglen) {
  size_t n = rows * cols;
  if (!y) return 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &y[i], 4);
    if ((u & 0x7f800000u) != 0x7f800000u) continue; /* exponent not all ones: finite */
    const char *kind = (u & 0x007fffffu) ? "NaN" : (u >> 31) ? "-infinity" : "infinity";
    tpu_errf(msg, msglen, "%s element [%zu,%zu] is %s: %s", what, i / cols, i % cols, kind, why);
    return -1;
  }
  return 0;
}
