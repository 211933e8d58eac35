/*
 * status.c - status messages, dtype facts and the shared argument helpers.
 *
 * DESIGN
 * Pure tables and arithmetic; owns no state.
 */
#include <stdlib.h>

#include "tpu_internal.h"

const char *tpu_strerror(tpu_status_t status) {
  static const char *const msgs[] = {
#define TPU__STATUS_MSG(name, msg) msg,
      TPU_STATUS_MAP(TPU__STATUS_MSG)
#undef TPU__STATUS_MSG
  };
  /* Unsigned compare: also rejects negative values cast into the enum. */
  if ((unsigned)status >= (unsigned)TPU_STATUS_COUNT) return "unknown status";
  return msgs[status];
}

size_t tpu_dtype_size(tpu_dtype_t dtype) {
  switch (dtype) {
  case TPU_DTYPE_FP32: return 4;
  case TPU_DTYPE_BF16: return 2;
  case TPU_DTYPE_INT8: return 1;
  case TPU_DTYPE_INT32: return 4;
  }
  return 0;
}

const char *tpu_dtype_name(tpu_dtype_t dtype) {
  switch (dtype) {
  case TPU_DTYPE_FP32: return "FP32";
  case TPU_DTYPE_BF16: return "BF16";
  case TPU_DTYPE_INT8: return "INT8";
  case TPU_DTYPE_INT32: return "INT32";
  }
  return NULL;
}

tpu_status_t tpu__check_dims(size_t m, size_t k, size_t n) {
  size_t mk, mn, kn;
  if (m == 0 || k == 0 || n == 0) return TPU_EINVAL;
  if (m > TPU__MAX_DIM || k > TPU__MAX_DIM || n > TPU__MAX_DIM) return TPU_EOVERFLOW;
  if (__builtin_mul_overflow(m, k, &mk) || __builtin_mul_overflow(m, n, &mn) ||
      __builtin_mul_overflow(k, n, &kn))
    return TPU_EOVERFLOW;
  if (mk > TPU__MAX_ELEMS || mn > TPU__MAX_ELEMS || kn > TPU__MAX_ELEMS) return TPU_EOVERFLOW;
  return TPU_OK;
}

void *tpu__aligned_alloc(size_t size) {
  void *p = NULL;
  if (size == 0 || posix_memalign(&p, TPU__KERNEL_ALIGN, size) != 0) return NULL;
  return p;
}
