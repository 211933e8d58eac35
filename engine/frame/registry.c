/*
 * registry.c - which kernel sets this build has, which this CPU can run, and which an engine
 * gets.
 *
 * DESIGN
 * Modelled on BLIS frame/base/bli_cpuid.c: candidates are listed newest ISA first with the
 * portable reference last; an engine gets the first one whose CPU features are all present (and
 * enabled by the OS), unless TPUD_ISA names one. Feature tests run here, in code compiled for
 * baseline x86-64, so no ISA instruction executes before its check passed. The registry is
 * built once per process (pthread_once) and is read-only afterwards; it prints nothing: the
 * chosen set's name is in tpu_engine_stats, for the caller to log.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "tpu_internal.h"

/* Every name TPUD_ISA accepts, whether or not this build compiled that set. */
static const char *const known_names[] = {"ref", "avx2", "avx512", "amx"};

static const tpu__kernel_set_t *const candidates[] = {
#ifdef TPU_HAVE_KERNELS_AMX
    &tpu__kernels_amx,
#endif
#ifdef TPU_HAVE_KERNELS_AVX512
    &tpu__kernels_avx512,
#endif
#ifdef TPU_HAVE_KERNELS_AVX2
    &tpu__kernels_avx2,
#endif
    &tpu__kernels_ref, /* always last: portable fallback */
};
#define NCANDIDATES (sizeof candidates / sizeof candidates[0])

static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint32_t features;
static tpu__kernel_set_t resolved[NCANDIDATES];
static int runnable[NCANDIDATES]; /* this CPU and OS can run resolved[i] */

#if defined(__x86_64__) || defined(__i386__)
static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

/* Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM). */
static int request_amx_permission(void) {
#ifdef SYS_arch_prctl
  const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
  return 0;
#endif
}

/* want_amx: ask the OS for AMX tile state (a process-wide side effect) only when a compiled-in
 * set could use it. */
static uint32_t detect_features(int want_amx) {
  unsigned a, b, c, d, f = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  unsigned ecx1 = c;
  if (!osxsave || !avx) return 0; /* no OS-managed YMM state: nothing beyond SSE */
  uint64_t xcr0 = read_xcr0();
  int ymm_os = (xcr0 & 0x6) == 0x6;     /* SSE + AVX state */
  int zmm_os = (xcr0 & 0xe6) == 0xe6;   /* plus opmask, ZMM_Hi256, Hi16_ZMM */
  int amx_os = (xcr0 & 0x60000) == 0x60000; /* XTILECFG + XTILEDATA */
  if (!ymm_os) return 0;
  if ((ecx1 >> 12) & 1) f |= TPU__CPU_FMA;
  if ((ecx1 >> 29) & 1) f |= TPU__CPU_F16C;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  unsigned max_sub = a, ebx7 = b, ecx7 = c, edx7 = d;
  if ((ebx7 >> 5) & 1) f |= TPU__CPU_AVX2;
  if (zmm_os) {
    if ((ebx7 >> 16) & 1) f |= TPU__CPU_AVX512F;
    if ((ebx7 >> 17) & 1) f |= TPU__CPU_AVX512DQ;
    if ((ebx7 >> 30) & 1) f |= TPU__CPU_AVX512BW;
    if ((ebx7 >> 31) & 1) f |= TPU__CPU_AVX512VL;
    if ((ecx7 >> 11) & 1) f |= TPU__CPU_AVX512VNNI;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1))
      f |= TPU__CPU_AVX512BF16;
  }
  if (want_amx && amx_os && ((edx7 >> 24) & 1) && request_amx_permission()) {
    f |= TPU__CPU_AMX_TILE;
    if ((edx7 >> 25) & 1) f |= TPU__CPU_AMX_INT8;
    if ((edx7 >> 22) & 1) f |= TPU__CPU_AMX_BF16;
  }
  return f;
}
#else
static uint32_t detect_features(int want_amx) { return 0; }
#endif

void tpu__kernels_resolve(const tpu__kernel_set_t *const *cands, size_t n, uint32_t cpu,
                          tpu__kernel_set_t *out, int *usable) {
  /* Bottom-up, so each set inherits missing dtypes from the best usable set below it. */
  const tpu__kernel_set_t *below = NULL;
  for (size_t i = n; i-- > 0;) {
    out[i] = *cands[i];
    for (int d = 0; d < 3; d++)
      if (!out[i].dt[d].gemm && below) out[i].dt[d] = below->dt[d];
    if (!out[i].vec && below) out[i].vec = below->vec;
    usable[i] = (cands[i]->cpu & ~cpu) == 0;
    if (usable[i]) below = &out[i];
  }
}

static void build(void) {
  int want_amx = 0;
  for (size_t i = 0; i < NCANDIDATES; i++)
    want_amx |= (candidates[i]->cpu & TPU__CPU_AMX_TILE) != 0;
  features = detect_features(want_amx);
  tpu__kernels_resolve(candidates, NCANDIDATES, features, resolved, runnable);
}

uint32_t tpu__cpu_features(void) {
  pthread_once(&once, build);
  return features;
}

size_t tpu__kernels_available(const tpu__kernel_set_t **out, size_t max) {
  size_t count = 0;
  pthread_once(&once, build);
  for (size_t i = 0; i < NCANDIDATES; i++) {
    if (!runnable[i]) continue;
    if (out && count < max) out[count] = &resolved[i];
    count++;
  }
  return count;
}

tpu_status_t tpu__kernels_select(const char *forced, const tpu__kernel_set_t **out) {
  if (!out) return TPU_EINVAL;
  *out = NULL;
  pthread_once(&once, build);
  if (!forced || !*forced) {
    for (size_t i = 0; i < NCANDIDATES; i++)
      if (runnable[i]) {
        *out = &resolved[i];
        return TPU_OK;
      }
    return TPU_ENOTSUP; /* unreachable: ref needs no feature */
  }
  int known = 0;
  for (size_t i = 0; i < sizeof known_names / sizeof known_names[0]; i++)
    if (strcmp(forced, known_names[i]) == 0) known = 1;
  if (!known) return TPU_EINVAL;
  for (size_t i = 0; i < NCANDIDATES; i++)
    if (strcmp(forced, candidates[i]->name) == 0) {
      if (!runnable[i]) return TPU_ENOTSUP;
      *out = &resolved[i];
      return TPU_OK;
    }
  return TPU_ENOTSUP; /* a known set this build did not compile */
}

/* Names of the features a set needs that this CPU (or OS) does not give, e.g. "avx512bf16 amx". */
static void missing_features(uint32_t need, char *buf, size_t len) {
  static const struct {
    uint32_t bit;
    const char *name;
  } names[] = {{TPU__CPU_AVX2, "avx2"},           {TPU__CPU_FMA, "fma"},
               {TPU__CPU_F16C, "f16c"},           {TPU__CPU_AVX512F, "avx512f"},
               {TPU__CPU_AVX512BW, "avx512bw"},   {TPU__CPU_AVX512DQ, "avx512dq"},
               {TPU__CPU_AVX512VL, "avx512vl"},   {TPU__CPU_AVX512VNNI, "avx512vnni"},
               {TPU__CPU_AVX512BF16, "avx512bf16"}, {TPU__CPU_AMX_TILE, "amx-tile"},
               {TPU__CPU_AMX_INT8, "amx-int8"},   {TPU__CPU_AMX_BF16, "amx-bf16"}};
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof names[0] && used < len; i++)
    if (need & ~features & names[i].bit) {
      int n = snprintf(buf + used, len - used, "%s%s", used ? " " : "", names[i].name);
      if (n < 0) break;
      used += (size_t)n;
    }
}

size_t tpu__kernels_describe(const tpu__kernel_set_t *chosen, int forced, char *buf, size_t len) {
  size_t used = 0;
  int n;
  if (!buf || len == 0) return 0;
  pthread_once(&once, build);
  n = snprintf(buf, len, "kernels '%s' (%s)", chosen ? chosen->name : "?",
               forced ? "forced by TPUD_ISA" : "best this CPU runs");
  if (n < 0) return 0;
  used = (size_t)n < len ? (size_t)n : len - 1;
  for (size_t i = 0; i < NCANDIDATES && used + 1 < len; i++) {
    char miss[160];
    if (runnable[i]) {
      n = snprintf(buf + used, len - used, "; %s: available", candidates[i]->name);
    } else {
      missing_features(candidates[i]->cpu, miss, sizeof miss);
      n = snprintf(buf + used, len - used, "; %s: compiled, CPU lacks %s", candidates[i]->name,
                   miss);
    }
    if (n < 0) break;
    used += (size_t)n < len - used ? (size_t)n : len - used - 1;
  }
  return used;
}
