/*
 * test_registry.c - kernel-set registry (engine/frame/registry.c): what is available, what an
 * engine gets by default and by name, and that every resolved set is complete.
 */
#include <stdio.h>
#include <string.h>

#include "tpu_internal.h"
#include "tpu_test.h"

static void test_available(void) {
  const tpu__kernel_set_t *sets[8];
  size_t n = tpu__kernels_available(sets, 8);
  CU_ASSERT_FATAL(n >= 1 && n <= 8);
  CU_ASSERT_STRING_EQUAL(sets[n - 1]->name, "ref"); /* the fallback is always last */
  CU_ASSERT_EQUAL(tpu__kernels_available(NULL, 0), n);
  uint32_t cpu = tpu__cpu_features();
  for (size_t i = 0; i < n; i++) {
    CU_ASSERT((sets[i]->cpu & ~cpu) == 0); /* only sets this CPU can run */
    for (int d = 0; d < 3; d++) {
      /* Resolved: every dtype has a complete entry (inherited if the set left it empty). */
      const tpu__dtype_kernels_t *k = &sets[i]->dt[d];
      CU_ASSERT(k->name && k->packed_size && k->pack && k->gemm && k->mr >= 1 && k->nr >= 1);
    }
  }
  /* The default is the newest available set. */
  const tpu__kernel_set_t *ks = NULL;
  CU_ASSERT(tpu__kernels_select(NULL, &ks) == TPU_OK && ks == sets[0]);
  CU_ASSERT(tpu__kernels_select("", &ks) == TPU_OK && ks == sets[0]);
}

static void test_forced(void) {
  static const char *const known[] = {"ref", "avx2", "avx512", "amx"};
  const tpu__kernel_set_t *sets[8], *ks = NULL;
  size_t n = tpu__kernels_available(sets, 8);
  for (size_t i = 0; i < 4; i++) {
    int have = 0;
    for (size_t s = 0; s < n; s++) have |= strcmp(sets[s]->name, known[i]) == 0;
    tpu_status_t st = tpu__kernels_select(known[i], &ks);
    /* A known name is either available, or not compiled in / not runnable here. */
    CU_ASSERT(have ? st == TPU_OK && strcmp(ks->name, known[i]) == 0
                   : st == TPU_ENOTSUP && ks == NULL);
  }
  CU_ASSERT(tpu__kernels_select("sse9", &ks) == TPU_EINVAL && ks == NULL);
  CU_ASSERT(tpu__kernels_select("REF", &ks) == TPU_EINVAL);
  CU_ASSERT(tpu__kernels_select("ref", NULL) == TPU_EINVAL);
}

/* The feature bits agree with the compiler's own CPU detection (which also checks the OS). */
static void test_cpu_features(void) {
  uint32_t f = tpu__cpu_features();
  __builtin_cpu_init();
  CU_ASSERT_EQUAL(!!(f & TPU__CPU_AVX2), !!__builtin_cpu_supports("avx2"));
  CU_ASSERT_EQUAL(!!(f & TPU__CPU_FMA), !!__builtin_cpu_supports("fma"));
  CU_ASSERT_EQUAL(!!(f & TPU__CPU_AVX512F), !!__builtin_cpu_supports("avx512f"));
  CU_ASSERT_EQUAL(!!(f & TPU__CPU_AVX512BW), !!__builtin_cpu_supports("avx512bw"));
  CU_ASSERT_EQUAL(!!(f & TPU__CPU_AVX512VNNI), !!__builtin_cpu_supports("avx512vnni"));
  CU_ASSERT_EQUAL(!!(f & TPU__CPU_AVX512BF16), !!__builtin_cpu_supports("avx512bf16"));
  CU_ASSERT_EQUAL(f, tpu__cpu_features()); /* computed once, stable */
}

/* Sets may leave dtypes empty; they inherit from the nearest usable set below them. */
static void test_resolve(void) {
  tpu__kernel_set_t a = {.name = "amx", .cpu = TPU__CPU_AMX_TILE | TPU__CPU_AVX512F};
  tpu__kernel_set_t b = {.name = "avx2", .cpu = TPU__CPU_AVX2};
  a.dt[TPU_DTYPE_INT8] = tpu__kernels_ref.dt[TPU_DTYPE_INT8];
  a.dt[TPU_DTYPE_INT8].name = "a_i8";
  b.dt[TPU_DTYPE_FP32] = tpu__kernels_ref.dt[TPU_DTYPE_FP32];
  b.dt[TPU_DTYPE_FP32].name = "b_f32";
  const tpu__kernel_set_t *const cands[] = {&a, &b, &tpu__kernels_ref};
  tpu__kernel_set_t out[3];
  int usable[3];

  tpu__kernels_resolve(cands, 3, TPU__CPU_AMX_TILE | TPU__CPU_AVX512F | TPU__CPU_AVX2, out,
                       usable);
  CU_ASSERT(usable[0] && usable[1] && usable[2]);
  CU_ASSERT_STRING_EQUAL(out[0].dt[TPU_DTYPE_INT8].name, "a_i8");
  CU_ASSERT_STRING_EQUAL(out[0].dt[TPU_DTYPE_FP32].name, "b_f32"); /* from avx2 */
  CU_ASSERT_STRING_EQUAL(out[0].dt[TPU_DTYPE_BF16].name, "tpu_gemm_bf16_ref_1x1");
  CU_ASSERT_STRING_EQUAL(out[1].dt[TPU_DTYPE_FP32].name, "b_f32");
  CU_ASSERT_STRING_EQUAL(out[1].dt[TPU_DTYPE_INT8].name, "tpu_gemm_i8_ref_1x1");
  CU_ASSERT_STRING_EQUAL(out[0].name, "amx");

  /* Without AVX2 the middle set is unusable, so the top one inherits from ref instead. */
  tpu__kernels_resolve(cands, 3, TPU__CPU_AMX_TILE | TPU__CPU_AVX512F, out, usable);
  CU_ASSERT(usable[0] && !usable[1] && usable[2]);
  CU_ASSERT_STRING_EQUAL(out[0].dt[TPU_DTYPE_FP32].name, "tpu_gemm_f32_ref_1x1");
  /* Nothing but ref on a bare CPU. */
  tpu__kernels_resolve(cands, 3, 0, out, usable);
  CU_ASSERT(!usable[0] && !usable[1] && usable[2]);
}

/* The log line names the chosen set, says why, and accounts for every compiled set. */
static void test_describe(void) {
  char line[512];
  tpu_engine_t *e = NULL;
  const tpu__kernel_set_t *sets[8];
  size_t n = tpu__kernels_available(sets, 8);
  CU_ASSERT_FATAL(tpu__engine_create_isa(NULL, "ref", &e) == TPU_OK);
  CU_ASSERT(tpu_engine_describe(e, line, sizeof line) > 0);
  CU_ASSERT(strstr(line, "kernels 'ref' (forced by TPUD_ISA)") == line);
  CU_ASSERT(strstr(line, "; ref: available") != NULL);
  for (size_t i = 0; i < n; i++) {
    char want[64];
    snprintf(want, sizeof want, "; %s: available", sets[i]->name);
    CU_ASSERT(strstr(line, want) != NULL);
  }
  tpu_engine_free(e);
  CU_ASSERT_FATAL(tpu__engine_create_isa(NULL, "", &e) == TPU_OK);
  tpu_engine_describe(e, line, sizeof line);
  char want[64];
  snprintf(want, sizeof want, "kernels '%s' (best this CPU runs)", sets[0]->name);
  CU_ASSERT(strstr(line, want) == line);
  /* Truncation is safe and still NUL-terminated. */
  char tiny[8];
  CU_ASSERT(tpu_engine_describe(e, tiny, sizeof tiny) == 7 && tiny[7] == '\0');
  CU_ASSERT(tpu_engine_describe(NULL, line, sizeof line) == 0);
  CU_ASSERT(tpu_engine_describe(e, NULL, 10) == 0);
  tpu_engine_free(e);
}

TPU_TEST_SUITE(engine_registry,
               {"resolve", test_resolve},
               {"describe", test_describe},
               {"available", test_available},
               {"forced", test_forced},
               {"cpu_features", test_cpu_features})
