/*
 * engine_demo.c - a tour of the engine for `make run` until the daemon lands.
 *
 * Packs one 256→256 dense layer in each precision, runs it at every batch bucket of a typical
 * model, checks the result against FP32, and prints what the modelled systolic array would have
 * spent. Everything here goes through the public API only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tpu_engine.h"

#define K 256
#define N 256

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int check(tpu_status_t st, const char *what) {
  if (st == TPU_OK) return 0;
  fprintf(stderr, "engine demo: %s: %s\n", what, tpu_strerror(st));
  return -1;
}

int main(void) {
  static const size_t buckets[] = {1, 8, 32, 64};
  static const tpu_dtype_t precisions[] = {TPU_DTYPE_FP32, TPU_DTYPE_BF16, TPU_DTYPE_INT8};
  int rc = 1;
  tpu_engine_t *engine = NULL;
  float *w = malloc(sizeof(float) * K * N), *bias = malloc(sizeof(float) * N);
  float *x = malloc(sizeof(float) * 64 * K);
  float *ref = malloc(sizeof(float) * 64 * N), *y = malloc(sizeof(float) * 64 * N);
  if (!w || !bias || !x || !ref || !y) goto out;

  srand(42);
  for (size_t i = 0; i < (size_t)K * N; i++) w[i] = (float)rand() / RAND_MAX - 0.5f;
  for (size_t i = 0; i < N; i++) bias[i] = (float)rand() / RAND_MAX - 0.5f;
  for (size_t i = 0; i < (size_t)64 * K; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;

  if (check(tpu_engine_create(NULL, &engine), "create engine")) goto out;
  tpu_engine_stats_t stats;
  tpu_engine_stats(engine, &stats);
  printf("tpud engine demo: kernels '%s', %u thread(s), modelled array %ux%u\n", stats.isa,
         stats.threads, stats.systolic_rows, stats.systolic_cols);
  printf("dense %dx%d + bias + relu, batch padded to buckets {1, 8, 32, 64}\n\n", K, N);
  printf("%-5s %6s %12s %14s %12s\n", "prec", "rows", "us/call", "sim cycles", "max |err|");

  for (size_t p = 0; p < sizeof precisions / sizeof precisions[0]; p++) {
    tpu_weights_desc_t desc = {.compute = precisions[p], .k = K, .n = N, .layout = TPU_LAYOUT_NK,
                               .src_dtype = TPU_DTYPE_FP32, .src = w};
    tpu_weights_t *packed = NULL;
    if (check(tpu_weights_pack(engine, &desc, &packed), "pack weights")) goto out;
    for (size_t b = 0; b < sizeof buckets / sizeof buckets[0]; b++) {
      size_t m = buckets[b];
      tpu_epilogue_t ep = {.bias = bias, .act = TPU_ACT_RELU, .out_dtype = TPU_DTYPE_FP32};
      tpu_plan_t *plan = NULL;
      if (check(tpu_plan_create(engine, packed, m, TPU_DTYPE_FP32, &ep, &plan), "plan")) {
        tpu_weights_free(packed);
        goto out;
      }
      /* FP32 reference in double. */
      for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < N; j++) {
          double acc = bias[j];
          for (size_t k = 0; k < K; k++) acc += (double)x[i * K + k] * w[j * K + k];
          ref[i * N + j] = acc > 0 ? (float)acc : 0.0f;
        }
      tpu_engine_stats_t before, after;
      tpu_engine_stats(engine, &before);
      int reps = 50;
      double t0 = now_us();
      for (int r = 0; r < reps; r++)
        if (check(tpu_plan_run(plan, x, NULL, y), "run")) {
          tpu_plan_free(plan);
          tpu_weights_free(packed);
          goto out;
        }
      double us = (now_us() - t0) / reps;
      tpu_engine_stats(engine, &after);
      double maxerr = 0;
      for (size_t i = 0; i < m * N; i++) maxerr = fmax(maxerr, fabs((double)y[i] - ref[i]));
      printf("%-5s %6zu %12.2f %14llu %12.2e\n", tpu_dtype_name(precisions[p]), m, us,
             (unsigned long long)((after.sim_cycles - before.sim_cycles) / reps), maxerr);
      tpu_plan_free(plan);
    }
    tpu_weights_free(packed);
  }
  tpu_engine_stats(engine, &stats);
  printf("\n%llu calls, %llu MACs, %llu simulated cycles, array utilization %.1f%%\n",
         (unsigned long long)stats.calls, (unsigned long long)stats.macs,
         (unsigned long long)stats.sim_cycles, 100.0 * tpu_engine_stats_utilization(&stats));
  rc = 0;
out:
  tpu_engine_free(engine);
  free(w);
  free(bias);
  free(x);
  free(ref);
  free(y);
  return rc;
}
