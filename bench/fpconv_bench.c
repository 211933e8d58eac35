/*
 * fpconv_bench.c - proto/tpu_fpconv.c against the conversions tpud used before it
 * (bench/fpconv_legacy.c), in ns per value, one thread.
 *
 * DESIGN
 * Corpora, fixed seed: binary32 activations (a normal distribution's values scaled over
 * 10^-3..10^3, the look of a network's outputs), binary32 values uniform over all finite bit
 * patterns, and binary64 values uniform over all finite bit patterns. Formatting writes each
 * value's text (new: tpu_fpconv_*_format; old: the old sb_float/sb_double loops). Parsing
 * reads JSON number tokens as the request fast path does (new: tpu_fpconv_f64_parse; old:
 * Clinger's path or strtod), from two token sets: the shortest texts tpud itself writes for
 * the activations, and the 17-digit "%.17g" texts of the same values widened to double (what a
 * client that prints float32 data as doubles sends, e.g. Python's json of numpy.float32
 * .tolist()). Each chunk of 2048 values is timed 7 times and its fastest run kept. Prints
 * one line per case: old ns, new ns, ratio. Not a test: no thresholds.
 *
 * Usage: fpconv_bench [values]   (default 1000000)
 */
#include "fpconv_legacy.h"
#include "tpu_fpconv.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A standard normal value (sum of 12 uniforms, minus 6: plenty for a corpus). */
static double normal(void) {
  double s = 0;
  for (int i = 0; i < 12; i++) s += (double)(next_u64() >> 11) * 0x1p-53;
  return s - 6;
}

static volatile size_t sink;

typedef struct {
  float *f32;
  double *f64;
  size_t n;
} values_t;

/* Tokens back to back, separated by commas; off[i] is token i's start. */
typedef struct {
  char *text;
  size_t *off, n;
} tokens_t;

/* One case over values [lo, hi): returns a checksum so that nothing is optimized away. */
typedef size_t (*run_fn)(const void *ctx, size_t lo, size_t hi, int legacy);

static size_t run_f32(const void *ctx, size_t lo, size_t hi, int legacy) {
  const values_t *v = ctx;
  char buf[48];
  size_t total = 0;
  for (size_t i = lo; i < hi; i++)
    total += legacy ? fpconv_legacy_f32_format(buf, v->f32[i])
                    : tpu_fpconv_f32_format(v->f32[i], buf);
  return total;
}

static size_t run_f64(const void *ctx, size_t lo, size_t hi, int legacy) {
  const values_t *v = ctx;
  char buf[48];
  size_t total = 0;
  for (size_t i = lo; i < hi; i++)
    total += legacy ? fpconv_legacy_f64_format(buf, v->f64[i])
                    : tpu_fpconv_f64_format(v->f64[i], buf);
  return total;
}

static size_t run_parse(const void *ctx, size_t lo, size_t hi, int legacy) {
  const tokens_t *tk = ctx;
  double sum = 0;
  for (size_t i = lo; i < hi; i++) {
    /* the rest of the text, as the JSON fast path hands its numbers the rest of the body */
    const char *s = tk->text + tk->off[i];
    size_t len = tk->off[tk->n] - tk->off[i];
    double d = 0;
    if (legacy)
      fpconv_legacy_parse(s, len, &d);
    else
      tpu_fpconv_f64_parse(s, len, &d);
    sum += d;
  }
  return sum != 0;
}

/* ns per value: each chunk of CHUNK values timed REPS times and its fastest run kept, so that
 * another process taking the CPU for a while (this machine is shared) costs nothing. */
#define CHUNK 2048
#define REPS 7
static double time_case(run_fn fn, const void *ctx, size_t n, int legacy) {
  double total = 0;
  for (size_t lo = 0; lo < n; lo += CHUNK) {
    size_t hi = lo + CHUNK < n ? lo + CHUNK : n;
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
      double t0 = now();
      sink += fn(ctx, lo, hi, legacy);
      double t = now() - t0;
      if (t < best) best = t;
    }
    total += best;
  }
  return total / (double)n * 1e9;
}

static void tokens_build(tokens_t *tk, const float *v, size_t n, int digits17) {
  tk->text = malloc(n * 32 + 1);
  tk->off = malloc((n + 1) * sizeof *tk->off);
  if (!tk->text || !tk->off) {
    fprintf(stderr, "fpconv_bench: out of memory\n");
    exit(1);
  }
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    tk->off[i] = at;
    if (digits17)
      at += (size_t)snprintf(tk->text + at, 32, "%.17g", (double)v[i]);
    else
      at += tpu_fpconv_f32_format(v[i], tk->text + at);
    tk->text[at++] = ',';
  }
  tk->off[n] = at;
  tk->n = n;
}

static void line(const char *what, double old_ns, double new_ns) {
  printf("%-46s old %7.1f ns  new %6.1f ns  %5.1fx\n", what, old_ns, new_ns, old_ns / new_ns);
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1000000;
  if (n == 0) n = 1;
  values_t act = {malloc(n * sizeof(float)), NULL, n};
  values_t u32 = {malloc(n * sizeof(float)), NULL, n};
  values_t u64 = {NULL, malloc(n * sizeof(double)), n};
  if (!act.f32 || !u32.f32 || !u64.f64) {
    fprintf(stderr, "fpconv_bench: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    double scale = 1e-3;
    for (uint64_t k = next_u64() % 7; k; k--) scale *= 10;
    act.f32[i] = (float)(normal() * scale);
    uint32_t b;
    do b = (uint32_t)next_u64(); while ((b & 0x7f800000u) == 0x7f800000u);
    memcpy(&u32.f32[i], &b, 4);
    uint64_t d;
    do d = next_u64(); while ((d & 0x7ff0000000000000ull) == 0x7ff0000000000000ull);
    memcpy(&u64.f64[i], &d, 8);
  }
  tokens_t shortest, long17;
  tokens_build(&shortest, act.f32, n, 0);
  tokens_build(&long17, act.f32, n, 1);
  printf("fpconv_bench: %zu values per case, fastest of %d runs per chunk of %d, one thread\n", n,
         REPS, CHUNK);
  line("format binary32, activations", time_case(run_f32, &act, n, 1),
       time_case(run_f32, &act, n, 0));
  line("format binary32, all bit patterns", time_case(run_f32, &u32, n, 1),
       time_case(run_f32, &u32, n, 0));
  line("format binary64, all bit patterns", time_case(run_f64, &u64, n, 1),
       time_case(run_f64, &u64, n, 0));
  line("parse, tpud's own binary32 texts", time_case(run_parse, &shortest, n, 1),
       time_case(run_parse, &shortest, n, 0));
  line("parse, 17-digit texts of binary32 values", time_case(run_parse, &long17, n, 1),
       time_case(run_parse, &long17, n, 0));
  free(act.f32);
  free(u32.f32);
  free(u64.f64);
  free(shortest.text);
  free(shortest.off);
  free(long17.text);
  free(long17.off);
  return 0;
}
