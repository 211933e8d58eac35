/*
 * vmath_check - the maximum error of the engine's vector math over every binary32 input.
 *
 * For each kernel set this CPU runs (or the one named with --set) and each function of
 * tpu__vfn_t, maps all 2^32 bit patterns (or every STRIDE-th with --stride) through the set's
 * map() and compares each result with the exact value (tests/engine/vmath_check.h). Prints one
 * line per set and function: the maximum error in ulp, the input where it occurs, and how many
 * inputs were off by more than 1 ulp; with --limit, exits 1 if any function of a vector set
 * exceeds the bound documented in engine/kernels/vmath.h.
 *
 * usage: vmath_check [--set NAME] [--stride N] [--threads N] [--limit]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/engine/vmath_check.h"
#include "tpu_internal.h"

typedef struct {
  const tpu__vec_kernels_t *vec;
  tpu__vfn_t f;
  uint64_t first, last, stride; /* bit patterns first, first + stride, ... < last */
  double worst;
  uint32_t worst_at;
  uint64_t over1;
} job_t;

static void *run(void *arg) {
  job_t *j = arg;
  enum { CHUNK = 4096 };
  float x[CHUNK], y[CHUNK];
  uint64_t u = j->first;
  while (u < j->last) {
    size_t n = 0;
    for (; n < CHUNK && u < j->last; n++, u += j->stride) {
      uint32_t b = (uint32_t)u;
      memcpy(&x[n], &b, 4);
    }
    j->vec->map(j->f, x, y, n);
    for (size_t i = 0; i < n; i++) {
      double e = vc_ulp_err(y[i], vc_exact(j->f, x[i]));
      if (e > 1) j->over1++;
      if (e > j->worst) {
        j->worst = e;
        memcpy(&j->worst_at, &x[i], 4);
      }
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *only = NULL;
  uint64_t stride = 1;
  int threads = 2, limit = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) only = argv[++i];
    else if (strcmp(argv[i], "--stride") == 0 && i + 1 < argc) stride = strtoull(argv[++i], 0, 10);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--limit") == 0) limit = 1;
    else {
      fprintf(stderr, "usage: vmath_check [--set NAME] [--stride N] [--threads N] [--limit]\n");
      return 2;
    }
  }
  if (stride == 0 || threads < 1 || threads > 64) {
    fprintf(stderr, "vmath_check: --stride must be >= 1 and --threads 1..64\n");
    return 2;
  }
  const tpu__kernel_set_t *sets[8];
  size_t nsets = tpu__kernels_available(sets, 8);
  int failed = 0, ran = 0;
  printf("| set | function | max error (ulp) | at x | inputs > 1 ulp |\n|---|---|---|---|---|\n");
  for (size_t s = 0; s < nsets; s++) {
    if (only && strcmp(only, sets[s]->name) != 0) continue;
    /* amx shares avx512's table: measure each table once */
    int seen = 0;
    for (size_t t = 0; t < s; t++) seen |= sets[t]->vec == sets[s]->vec && (!only);
    if (seen) continue;
    ran = 1;
    for (int f = 0; f < TPU__VF_COUNT; f++) {
      job_t jobs[64];
      pthread_t tid[64];
      uint64_t total = (1ull << 32), per = (total / stride + threads - 1) / threads * stride;
      for (int t = 0; t < threads; t++) {
        uint64_t first = (uint64_t)t * per, last = first + per;
        jobs[t] = (job_t){.vec = sets[s]->vec, .f = (tpu__vfn_t)f, .first = first,
                          .last = last > total ? total : last, .stride = stride};
        pthread_create(&tid[t], NULL, run, &jobs[t]);
      }
      double worst = 0;
      uint32_t at = 0;
      uint64_t over1 = 0;
      for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        over1 += jobs[t].over1;
        if (jobs[t].worst > worst) worst = jobs[t].worst, at = jobs[t].worst_at;
      }
      float atf;
      memcpy(&atf, &at, 4);
      printf("| %s | %s | %.3f | %.9g | %llu |\n", sets[s]->vec->name, vc_names[f], worst,
             (double)atf, (unsigned long long)over1);
      fflush(stdout);
      if (limit && sets[s]->vec != &tpu__vec_ref && worst > vc_bound[f]) failed = 1;
    }
  }
  if (!ran) {
    fprintf(stderr, "vmath_check: no kernel set '%s' on this CPU\n", only ? only : "");
    return 2;
  }
  return failed;
}
