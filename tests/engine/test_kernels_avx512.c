/*
 * test_kernels_avx512.c - the "avx512" kernel set (engine/kernels/avx512/kernels_avx512.c) against the reference set,
 * bit-exact for INT8 and within the summation-order bound for FP32 and BF16, on random shapes
 * up to 700 and every tile edge (kernel_check.h). On a CPU without AVX-512 (F, BW, DQ, VL, VNNI, BF16) the test prints
 * "skipped: CPU lacks AVX-512 (F, BW, DQ, VL, VNNI, BF16)" instead of passing silently; on a CPU with it, the set must be
 * compiled in and selectable.
 */
#include "kernel_check.h"

static void test_vs_ref(void) {
  const uint32_t need = TPU__CPU_AVX512F | TPU__CPU_AVX512BW | TPU__CPU_AVX512DQ | TPU__CPU_AVX512VL | TPU__CPU_AVX512VNNI | TPU__CPU_AVX512BF16;
  if ((tpu__cpu_features() & need) != need) {
    printf("\n  skipped: CPU lacks AVX-512 (F, BW, DQ, VL, VNNI, BF16)\n");
    return;
  }
  CU_ASSERT_FATAL(kc_check_set("avx512", 10));
}

TPU_TEST_SUITE(engine_kernels_avx512, {"vs_ref", test_vs_ref})
