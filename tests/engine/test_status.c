/*
 * test_status.c - status messages, dtype facts and the shared dimension check
 * (engine/frame/status.c).
 */
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

static void test_strerror(void) {
  CU_ASSERT_STRING_EQUAL(tpu_strerror(TPU_OK), "success");
  CU_ASSERT_STRING_EQUAL(tpu_strerror(TPU_EINVAL), "invalid argument");
  CU_ASSERT_STRING_EQUAL(tpu_strerror(TPU_ERANGE), "value out of range");
  CU_ASSERT_EQUAL(TPU_OK, 0);
  /* Every code has its own non-empty message. */
  for (int i = 0; i < TPU_STATUS_COUNT; i++) {
    const char *m = tpu_strerror((tpu_status_t)i);
    CU_ASSERT(m != NULL && *m && strcmp(m, "unknown status") != 0);
    for (int j = 0; j < i; j++) CU_ASSERT(strcmp(m, tpu_strerror((tpu_status_t)j)) != 0);
  }
  CU_ASSERT_STRING_EQUAL(tpu_strerror(TPU_STATUS_COUNT), "unknown status");
  CU_ASSERT_STRING_EQUAL(tpu_strerror((tpu_status_t)-1), "unknown status");
  CU_ASSERT_STRING_EQUAL(tpu_strerror((tpu_status_t)1000), "unknown status");
}

static void test_dtypes(void) {
  CU_ASSERT_EQUAL(tpu_dtype_size(TPU_DTYPE_FP32), 4);
  CU_ASSERT_EQUAL(tpu_dtype_size(TPU_DTYPE_BF16), 2);
  CU_ASSERT_EQUAL(tpu_dtype_size(TPU_DTYPE_INT8), 1);
  CU_ASSERT_EQUAL(tpu_dtype_size(TPU_DTYPE_INT32), 4);
  CU_ASSERT_EQUAL(tpu_dtype_size((tpu_dtype_t)4), 0);
  CU_ASSERT_EQUAL(tpu_dtype_size((tpu_dtype_t)-1), 0);
  CU_ASSERT_STRING_EQUAL(tpu_dtype_name(TPU_DTYPE_FP32), "FP32");
  CU_ASSERT_STRING_EQUAL(tpu_dtype_name(TPU_DTYPE_BF16), "BF16");
  CU_ASSERT_STRING_EQUAL(tpu_dtype_name(TPU_DTYPE_INT8), "INT8");
  CU_ASSERT_STRING_EQUAL(tpu_dtype_name(TPU_DTYPE_INT32), "INT32");
  CU_ASSERT(tpu_dtype_name((tpu_dtype_t)4) == NULL);
  CU_ASSERT(tpu_dtype_name((tpu_dtype_t)-1) == NULL);
}

static void test_check_dims(void) {
  CU_ASSERT(tpu__check_dims(1, 1, 1) == TPU_OK);
  CU_ASSERT(tpu__check_dims(300, 300, 300) == TPU_OK);
  CU_ASSERT(tpu__check_dims(0, 1, 1) == TPU_EINVAL);
  CU_ASSERT(tpu__check_dims(1, 0, 1) == TPU_EINVAL);
  CU_ASSERT(tpu__check_dims(1, 1, 0) == TPU_EINVAL);
  CU_ASSERT(tpu__check_dims(TPU__MAX_DIM, 1, 1) == TPU_OK);
  CU_ASSERT(tpu__check_dims(TPU__MAX_DIM + 1, 1, 1) == TPU_EOVERFLOW);
  CU_ASSERT(tpu__check_dims(1, SIZE_MAX, 1) == TPU_EOVERFLOW);
  /* Each pairwise product is limited: M·K, M·N and K·N. */
  size_t big = (size_t)1 << 17; /* 2^34 elements per pair */
  CU_ASSERT(tpu__check_dims(big, big, 1) == TPU_EOVERFLOW);
  CU_ASSERT(tpu__check_dims(big, 1, big) == TPU_EOVERFLOW);
  CU_ASSERT(tpu__check_dims(1, big, big) == TPU_EOVERFLOW);
  CU_ASSERT(tpu__check_dims((size_t)1 << 16, (size_t)1 << 16, 1) == TPU_OK); /* 2^32: at limit */
}

TPU_TEST_SUITE(engine_status,
               {"strerror", test_strerror},
               {"dtypes", test_dtypes},
               {"check_dims", test_check_dims})
