/*
 * test_kernels_avx2.c - the "avx2" kernel set (engine/kernels/avx2/kernels_avx2.c) against the reference set,
 * bit-exact for INT8 and within the summation-order bound for FP32 and BF16, on random shapes
 * up to 700 and every tile edge (kernel_check.h). On a CPU without AVX2 and FMA the test prints
 * "skipped: CPU lacks AVX2 and FMA" instead of passing silently; on a CPU with it, the set must be
 * compiled in and selectable.
 */
#include "kernel_check.h"

static void test_vs_ref(void) {
  const uint32_t need = TPU__CPU_AVX2 | TPU__CPU_FMA | TPU__CPU_F16C;
  if ((tpu__cpu_features() & need) != need) {
    printf("\n  skipped: CPU lacks AVX2 and FMA\n");
    return;
  }
  CU_ASSERT_FATAL(kc_check_set("avx2", 10));
}

TPU_TEST_SUITE(engine_kernels_avx2, {"vs_ref", test_vs_ref})
