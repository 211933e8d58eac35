/*
 * fpconv_check.c - every binary32 value through proto/tpu_fpconv.c (`make check-fpconv`).
 *
 * DESIGN
 * For each of the 2^32 bit patterns: NaN and infinities must format to nothing; every finite
 * value must format to text that tpu_fpconv_f32_parse reads back to the same bits, and that
 * tpu_fpconv_f64_parse plus a cast to float (the JSON path's reading of FP32 data) reads back
 * to the same bits too, or, where rounding twice (to double, then to float) lands on the
 * neighbour, to strtod's double (counted and listed as notes: the JSON path's way of reading
 * FP32 data, not a parser fault; +-7.038531e-26 are the only such values). With --legacy K,
 * every K-th value's text is also compared byte for byte with the formatter tpud used before
 * (bench/fpconv_legacy.c): K = 1 is the full proof that the answers did not change, and costs
 * several times as long. Work is handed out in blocks of 2^16 values to --threads threads
 * (default 2). Prints the first failures and a summary; exits 1 on any failure.
 *
 * Usage: fpconv_check [--threads N] [--legacy K] [--first HEX --count N]
 */
#include "fpconv_legacy.h"
#include "tpu_fpconv.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t first, count = UINT64_C(1) << 32, legacy_every;
static atomic_uint_fast64_t next_block, failures, compared, double_rounded;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

#define BLOCK 65536u

static void report(uint32_t u, const char *what, const char *text, const char *want) {
  if (atomic_fetch_add(&failures, 1) >= 20) return;
  pthread_mutex_lock(&print_lock);
  printf("FAIL 0x%08" PRIx32 ": %s: \"%s\"%s%s%s\n", u, what, text, want ? " expected \"" : "",
         want ? want : "", want ? "\"" : "");
  pthread_mutex_unlock(&print_lock);
}

static void check_one(uint32_t u, uint64_t i) {
  float v;
  memcpy(&v, &u, 4);
  char text[TPU_FPCONV_LEN];
  size_t n = tpu_fpconv_f32_format(v, text);
  if ((u & 0x7f800000u) == 0x7f800000u) {
    if (n != 0) report(u, "NaN or infinity formatted", text, NULL);
    return;
  }
  if (n == 0 || n >= TPU_FPCONV_F32_MAX || strlen(text) != n) {
    report(u, "bad length", text, NULL);
    return;
  }
  float back;
  if (tpu_fpconv_f32_parse(text, n, &back) != n || memcmp(&back, &v, 4) != 0)
    report(u, "binary32 parse does not give the value back", text, NULL);
  double d;
  if (tpu_fpconv_f64_parse(text, n, &d) != n) {
    report(u, "binary64 parse refused", text, NULL);
  } else {
    float f = (float)d;
    if (memcmp(&f, &v, 4) != 0) {
      /* Rounding twice, to double and then to float, can land on the neighbour: the JSON path
       * has always read FP32 data so (jansson hands it doubles). Not a fault of the parser as
       * long as its double is strtod's; counted and listed, not failed. */
      double want = strtod(text, NULL);
      if (memcmp(&want, &d, 8) != 0) {
        report(u, "binary64 parse differs from strtod", text, NULL);
      } else if (atomic_fetch_add(&double_rounded, 1) < 20) {
        pthread_mutex_lock(&print_lock);
        printf("note 0x%08" PRIx32 ": \"%s\" read as a double (strtod's) and cast to float is the "
               "neighbour (double rounding)\n", u, text);
        pthread_mutex_unlock(&print_lock);
      }
    }
  }
  if (legacy_every && i % legacy_every == 0) {
    char old[40];
    fpconv_legacy_f32_format(old, v);
    atomic_fetch_add_explicit(&compared, 1, memory_order_relaxed);
    if (strcmp(old, text) != 0) report(u, "differs from the old formatter", text, old);
  }
}

static void *worker(void *arg) {
  (void)arg;
  uint64_t blocks = (count + BLOCK - 1) / BLOCK;
  for (;;) {
    uint64_t b = atomic_fetch_add(&next_block, 1);
    if (b >= blocks) return NULL;
    uint64_t lo = b * BLOCK, hi = lo + BLOCK < count ? lo + BLOCK : count;
    for (uint64_t i = lo; i < hi; i++) check_one((uint32_t)(first + i), first + i);
  }
}

int main(int argc, char **argv) {
  int threads = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--legacy") && i + 1 < argc) {
      legacy_every = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--first") && i + 1 < argc) {
      first = strtoull(argv[++i], NULL, 16);
    } else if (!strcmp(argv[i], "--count") && i + 1 < argc) {
      count = strtoull(argv[++i], NULL, 0);
    } else {
      fprintf(stderr, "usage: %s [--threads N] [--legacy K] [--first HEX --count N]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || threads > 256 || first + count > (UINT64_C(1) << 32)) {
    fprintf(stderr, "fpconv_check: --threads must be 1..256 and the range within 2^32\n");
    return 2;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t tid[256];
  for (int i = 0; i < threads; i++)
    if (pthread_create(&tid[i], NULL, worker, NULL) != 0) {
      fprintf(stderr, "fpconv_check: cannot start thread %d\n", i);
      return 2;
    }
  for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  uint64_t nfail = atomic_load(&failures);
  printf("fpconv_check: %" PRIu64 " binary32 values from 0x%08" PRIx64 ", %" PRIu64
         " compared with the old formatter, %" PRIu64
         " double-rounded through binary64, %d threads, %.1f s: %s (%" PRIu64 " failures)\n",
         count, first, (uint64_t)atomic_load(&compared), (uint64_t)atomic_load(&double_rounded),
         threads, secs, nfail ? "FAILED" : "ok", nfail);
  return nfail ? 1 : 0;
}
