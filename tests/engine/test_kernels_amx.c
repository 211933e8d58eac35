/*
 * test_kernels_amx.c - the "amx" kernel set (engine/kernels/amx/kernels_amx.c) against the reference set,
 * bit-exact for INT8 and within the summation-order bound for FP32 and BF16, on random shapes
 * up to 700 and every tile edge (kernel_check.h). On a CPU without AMX the test prints
 * "skipped: CPU lacks AMX" instead of passing silently; on a CPU with it, the set must be
 * compiled in and selectable.
 */
#include "kernel_check.h"

static void test_vs_ref(void) {
  const uint32_t need = TPU__CPU_AMX_TILE | TPU__CPU_AMX_INT8 | TPU__CPU_AMX_BF16;
  if ((tpu__cpu_features() & need) != need) {
    printf("\n  skipped: CPU lacks AMX\n");
    return;
  }
  CU_ASSERT_FATAL(kc_check_set("amx", 10));
}

TPU_TEST_SUITE(engine_kernels_amx, {"vs_ref", test_vs_ref})
