/*
 * engine_bench.c - the tpud engine measured against oneDNN and OpenBLAS on the same machine.
 *
 * DESIGN
 * One run measures, for INT8 (INT32 accumulators), BF16 (FP32 out) and FP32, every shape of the
 * grid M × (K = N) at every requested thread count, three ways:
 *   ours     weights packed once (tpu_weights_pack, [N][K] nn.Linear layout), a plan compiled
 *            once for M (tpu_plan_create); only tpu_plan_run is timed;
 *   oneDNN   the matmul primitive with weights declared format_tag_any and reordered once into
 *            the format the primitive asked for, and a user scratchpad allocated once; only
 *            dnnl_primitive_execute (+ stream wait) is timed. Same dtypes as ours: s8×s8→s32,
 *            bf16×bf16→f32, f32;
 *   OpenBLAS cblas_sgemm for FP32 (it cannot keep weights packed between calls: that is its API).
 * Each timing is the median of samples; a sample is a batch of calls lasting ≥ 100 µs (so the
 * clock's cost vanishes), divided by the batch size. Samples are taken until the case has run
 * ≥ 5 samples and ≥ 20 ms (fewer in --quick), or until a time cap for very slow cases. ours and
 * oneDNN are timed in interleaved slices; OpenBLAS after them, then a pause (its idle workers
 * poll). The machine may be shared: the CPU other processes used meanwhile (/proc/stat) and the
 * agreement between slices are checked, a disturbed case is retried, and rows that stay
 * disturbed are marked and kept out of the geomeans. A watchdog ends a hung run (status 3).
 *
 * Inputs are fresh random non-zero values each run (the seed is printed; --seed repeats it).
 * Before timing, ours is checked against oneDNN on the whole output (INT8 bit-exact; BF16 and
 * FP32 within a per-element bound derived from Σ|a·w|), and ours, oneDNN and OpenBLAS are each
 * checked against a float64/int64 triple loop on sampled elements, so a mismatch says who is
 * wrong. Any failure is printed with "***", and makes the exit status 1.
 *
 * Thread control: ours gets one engine per thread count (tpu_engine_config_t.threads). oneDNN
 * here (Debian's libdnnl2) uses the OpenMP runtime (libgomp): the number of threads of its
 * parallel regions is the calling thread's OpenMP ICV, set with omp_set_num_threads() before the
 * primitive is created (oneDNN sizes its work split at creation) and executed. The bench
 * verifies that this works by timing a probe shape at 1 and at the largest thread count.
 * OpenBLAS (pthreads build) is set with openblas_set_num_threads(), and left to pick its own
 * kernels for this CPU (an inherited OPENBLAS_CORETYPE is dropped; see openblas_own_choice).
 *
 * Never does: time weight packing, plan creation, reorders or primitive creation; compare a
 * library against itself; print anything after the final "geomean ratio vs oneDNN" line.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <omp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "tpu_engine.h"

/* ------------------------------------------------------------------------------------------ */
/* configuration                                                                               */

enum { D_INT8, D_BF16, D_FP32, D_COUNT };
static const char *const dname[D_COUNT] = {"int8", "bf16", "fp32"};

#define MAX_LIST 16

typedef struct {
  bool quick;
  const char *json_path;
  unsigned threads[MAX_LIST];
  size_t nthreads;
  size_t ms[MAX_LIST];
  size_t nms;
  size_t kns[MAX_LIST];
  size_t nkns;
  bool dtype_on[D_COUNT];
  uint64_t seed;
  double min_case_ns;   /* a case runs at least this long ... */
  unsigned min_samples; /* ... and at least this many samples ... */
  double max_case_ns;   /* ... unless it has run this long (very slow cases) */
  unsigned lat_calls;   /* individually timed calls per latency measurement */
  unsigned retries;     /* extra attempts at a case disturbed by other load */
  bool openblas;
  bool openblas_as_is; /* honour OPENBLAS_CORETYPE (see openblas_own_choice) */
} opts_t;

#define SAMPLE_NS 100e3       /* a sample is a batch of calls lasting at least this long */
#define MAX_SAMPLES 100000    /* per case */
/* After a threaded OpenBLAS call its idle workers keep polling (sched_yield) for 2^28 TSC cycles
 * before they sleep: measured here, they take ~40% of a 2-core machine for ~120 ms. Whatever is
 * timed next waits this long (microseconds). */
#define BLAS_QUIESCE_US 150000

/* ------------------------------------------------------------------------------------------ */
/* small utilities                                                                             */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Nanoseconds this process's threads have spent runnable but not running — waiting for a CPU
 * that something else held — summed over all its threads (the engine's, OpenMP's, OpenBLAS's):
 * the second field of /proc/self/task/<tid>/schedstat. A diagnostic in the JSON only: it counts
 * outside load, but also the wake-up latency of a library's own idle threads, so it cannot tell
 * a disturbed measurement by itself (loadmeter_t does). 0 when unavailable. */
static uint64_t cpu_wait_ns(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return 0;
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* the thread ended meanwhile */
    unsigned long long run, wait;
    if (fscanf(f, "%llu %llu", &run, &wait) == 2) sum += wait;
    fclose(f);
  }
  closedir(d);
  return sum;
}

/* CPU time the whole machine spent busy (user, nice, system, irq, softirq, steal) since boot,
 * from /proc/stat, in nanoseconds; -1 when unavailable. Kernel tick accounting: 10 ms units. */
static double machine_busy_ns(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[8] = {0};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                 &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  if (n < 8) return -1;
  double ticks = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]); /* not idle, iowait */
  return ticks * 1e9 / (double)sysconf(_SC_CLK_TCK);
}

static double process_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Measures the CPU other processes (and the hypervisor, as steal) used over a window. */
typedef struct {
  double busy0, own0, wall0;
  double other_ns, wall_ns; /* accumulated over windows */
} loadmeter_t;

static void load_start(loadmeter_t *m) {
  m->busy0 = machine_busy_ns();
  m->own0 = process_cpu_ns();
  m->wall0 = now_ns();
}

static void load_stop(loadmeter_t *m) {
  double busy = machine_busy_ns();
  if (busy < 0 || m->busy0 < 0) return;
  m->other_ns += (busy - m->busy0) - (process_cpu_ns() - m->own0);
  m->wall_ns += now_ns() - m->wall0;
}

/* Other processes' CPU use, in CPUs (0.5 = half a core), over the accumulated windows. The
 * kernel counts CPU time by sampling at each tick and reports it in 10 ms units, so LOAD_SLACK_NS
 * of other use is forgiven: a short window is called disturbed only when the load was heavy. */
#define LOAD_SLACK_NS 20e6
static double load_other(const loadmeter_t *m) {
  double other = m->other_ns - LOAD_SLACK_NS;
  return m->wall_ns > 0 && other > 0 ? other / m->wall_ns : 0;
}

/* Timings taken while other processes used more than this many CPUs are not trusted. */
#define NOISY_OTHER 0.25   /* rows above this were disturbed: their numbers are not reliable */
#define RETRY_PAUSE_US 200000 /* between attempts at a disturbed case (microseconds) */

/* A call that never returns (a lost wake-up in a thread pool, say) must not hang `make bench`
 * forever: each stage runs under an alarm, and when it fires the bench says where it was and
 * exits with status 3. Generous: the reference kernels need ~20 s for the largest case. */
#ifndef WATCHDOG_S
#define WATCHDOG_S 300
#endif
#define STR_(x) #x
#define STR(x) STR_(x)
static char g_where[192];

static void on_watchdog(int sig) {
  (void)sig;
  static const char pre[] = "\n*** engine_bench: stuck for " STR(WATCHDOG_S) " s in: ";
  /* write() and strlen() are async-signal-safe; stdio is not. */
  for (int fd = 1; fd <= 2; fd++) {
    ssize_t r = write(fd, pre, sizeof pre - 1);
    r = write(fd, g_where, strlen(g_where));
    r = write(fd, "\n", 1);
    (void)r;
  }
  _exit(3);
}

/* Names the stage about to run and restarts the alarm. */
static void watchdog(const char *fmt, ...) {
  va_list ap;
  alarm(0);
  va_start(ap, fmt);
  vsnprintf(g_where, sizeof g_where, fmt, ap);
  va_end(ap);
  alarm(WATCHDOG_S);
}

static void die(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "engine_bench: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(2);
}

/* 64-byte aligned, zeroed; dies on failure (the bench cannot continue without its buffers). */
static void *xalloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (!p) die("out of memory allocating %zu bytes", bytes);
  memset(p, 0, rounded ? rounded : 64);
  return p;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v in place; returns the q-quantile (0..1), nearest rank. */
static double quantile(double *v, size_t n, double q) {
  if (n == 0) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  size_t i = (size_t)ceil(q * (double)n);
  if (i > 0) i--;
  if (i >= n) i = n - 1;
  return v[i];
}

/* splitmix64: fast, good enough for test data, reproducible from one printed seed. */
static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform magnitude in [0.125, 1] with a random sign: never zero, never tiny. */
static float rng_float(void) {
  uint64_t r = rng_next();
  float mag = 0.125f + 0.875f * (float)(r >> 40) * (1.0f / 16777216.0f);
  return (r & 1) ? -mag : mag;
}

/* Uniform over [-127, -1] ∪ [1, 127]: symmetric INT8 without zero. */
static int8_t rng_int8(void) {
  int v = (int)(rng_next() % 254) - 127;
  return (int8_t)(v >= 0 ? v + 1 : v);
}

/* The bench's own conversions, so that inputs never depend on the code under test. */
static uint16_t bf16_from_float(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even; inputs are finite */
  return (uint16_t)(u >> 16);
}

static float bf16_to_float(uint16_t x) {
  uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static size_t parse_list(const char *s, size_t *out, size_t max, const char *what) {
  size_t n = 0;
  char *end;
  while (*s) {
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || v == 0 || v > (1ull << 20))
      die("%s: expected a comma-separated list of positive integers, got '%s'", what, s);
    if (n == max) die("%s: at most %zu values", what, max);
    out[n++] = (size_t)v;
    s = end;
    if (*s == ',') s++;
    else if (*s) die("%s: unexpected '%c' in list", what, *s);
  }
  if (n == 0) die("%s: empty list", what);
  return n;
}

/* ------------------------------------------------------------------------------------------ */
/* timing                                                                                      */

typedef int (*run_fn)(void *ctx); /* one call of the code under test; 0 on success */

typedef struct {
  double ns;        /* median nanoseconds per call; NAN when not measured */
  unsigned samples; /* samples the median is taken over */
  uint64_t calls;   /* timed calls in all */
  double spread;    /* upper / lower quartile of the slice medians (1 with one slice): see
                     * UNSTABLE_SPREAD */
  double wait_pct;  /* CPU wait while this library was timed (see cpu_wait_ns); 0 if unknown */
} timing_t;

#define MAX_LANES 3
#define ROUNDS 5 /* slices per lane in a case of ordinary length */
#define MAX_SLICES 256

/* One library being timed. Lanes are timed in interleaved slices (a slice of samples of each in
 * turn, ROUNDS times or more), so that a burst of outside load hits every library alike instead
 * of whichever happened to be running, and so that the slices' medians can be compared. */
typedef struct {
  run_fn fn;
  void *ctx;
  double first_ns; /* the untimed, checked first call: also the first warm-up */
  timing_t *out;
  /* filled in by measure() */
  double *samples;
  uint64_t batch;
  double used_ns, wait_ns;
  double slice_med[MAX_SLICES]; /* median of each slice (the first MAX_SLICES) */
  unsigned n, slices;
  bool done;
} lane_t;

/* With more than one thread, each slice starts with untimed calls for this long (nanoseconds):
 * libgomp's idle workers spin ~6 ms after a oneDNN call before they sleep (measured here), and a
 * library whose workers were asleep needs a few calls to have them running again. Sleeping
 * instead would leave the vCPUs idle, which on this VM makes the next wake-up slower still. */
#define LEADIN_NS 8e6
/* Slices of one lane whose medians differ by more than this factor (upper over lower quartile,
 * so one odd slice is forgiven) mean the machine changed under the measurement: on a shared
 * 2-vCPU VM a two-thread call can take 8 ms instead of 20 µs for a while, with no other process
 * visible in the VM. Such a case is retried, then marked. */
#define UNSTABLE_SPREAD 1.5

static double *g_samples[MAX_LANES]; /* MAX_SAMPLES doubles per lane (single-threaded bench) */
static double *g_scratch;            /* MAX_SAMPLES doubles: one slice's samples, sorted */

static bool lane_finished(const lane_t *l, const opts_t *o) {
  return (l->n >= o->min_samples && l->used_ns >= o->min_case_ns) || l->used_ns >= o->max_case_ns ||
         l->n >= MAX_SAMPLES;
}

/* Warms a lane up and sizes its batch: runs 1, 2, 4, ... calls until a run lasts SAMPLE_NS / 2,
 * and takes the cheapest time per call seen (a run stretched by a preemption must not shrink
 * the batch to one call, which would leave the clock's cost in every sample). */
static int calibrate(lane_t *l) {
  double per_call = INFINITY;
  for (uint64_t n = 1;; n *= 2) {
    double t0 = now_ns();
    for (uint64_t i = 0; i < n; i++)
      if (l->fn(l->ctx)) return -1;
    double t = now_ns() - t0;
    if (t / (double)n < per_call) per_call = t / (double)n;
    if (t >= SAMPLE_NS / 2 || n >= 65536) break;
  }
  double b = ceil(SAMPLE_NS / (per_call > 1 ? per_call : 1));
  l->batch = b < 1 ? 1 : b > 100000 ? 100000 : (uint64_t)b;
  return 0;
}

/* One slice of a lane: the lead-in, then samples for at least slice_ns. */
static int run_slice(lane_t *l, double slice_ns, double leadin_ns) {
  if (leadin_ns > 0) {
    double t0 = now_ns();
    do
      if (l->fn(l->ctx)) return -1;
    while (now_ns() - t0 < leadin_ns);
  }
  uint64_t w0 = cpu_wait_ns();
  unsigned first = l->n;
  double start = now_ns(), s1 = start;
  do {
    double s0 = now_ns();
    for (uint64_t b = 0; b < l->batch; b++)
      if (l->fn(l->ctx)) return -1;
    s1 = now_ns();
    l->samples[l->n++] = (s1 - s0) / (double)l->batch;
    l->out->calls += l->batch;
  } while (s1 - start < slice_ns && l->n < MAX_SAMPLES);
  l->used_ns += s1 - start;
  l->wait_ns += (double)(cpu_wait_ns() - w0);
  if (l->slices < MAX_SLICES) {
    memcpy(g_scratch, l->samples + first, (l->n - first) * sizeof(double));
    l->slice_med[l->slices++] = quantile(g_scratch, l->n - first, 0.5);
  }
  return 0;
}

/* Times each lane: samples until it has ≥ min_samples and ≥ min_case_ns, or until max_case_ns.
 * A lane whose first call already exceeded the cap is reported from that call alone rather than
 * run again (the reference kernels on the largest shapes). Returns -1 if any call failed (that
 * lane's out->ns stays NAN); the other lanes are still measured. */
static int measure(lane_t *lanes, size_t nl, const opts_t *o, double leadin_ns) {
  int rc = 0;
  double slice_ns = o->min_case_ns / ROUNDS;
  if (slice_ns < SAMPLE_NS) slice_ns = SAMPLE_NS;
  for (size_t i = 0; i < nl; i++) {
    lane_t *l = &lanes[i];
    l->samples = g_samples[i];
    l->out->ns = NAN;
    l->out->samples = 0;
    l->out->calls = 0;
    l->n = l->slices = 0;
    l->used_ns = l->wait_ns = 0;
    l->done = false;
    if (l->first_ns >= o->max_case_ns) {
      l->samples[l->n++] = l->first_ns;
      l->out->calls = 1;
      l->done = true;
    } else if (calibrate(l)) {
      l->done = true;
      rc = -1;
    }
  }
  for (bool any = true; any;) {
    any = false;
    for (size_t i = 0; i < nl; i++) {
      lane_t *l = &lanes[i];
      if (l->done) continue;
      any = true;
      if (run_slice(l, slice_ns, leadin_ns)) {
        l->n = 0;
        l->done = true;
        rc = -1;
        continue;
      }
      l->done = lane_finished(l, o);
    }
  }
  for (size_t i = 0; i < nl; i++) {
    lane_t *l = &lanes[i];
    l->out->samples = l->n;
    l->out->ns = l->n ? quantile(l->samples, l->n, 0.5) : NAN;
    l->out->spread = 1;
    if (l->slices > 1) {
      double hi = quantile(l->slice_med, l->slices, 0.75);
      l->out->spread = hi / quantile(l->slice_med, l->slices, 0.25);
    }
    l->out->wait_pct = l->used_ns > 0 ? 100.0 * l->wait_ns / l->used_ns : 0;
  }
  return rc;
}

/* How far an attempt is from trustworthy: ≤ 1 when other processes used at most NOISY_OTHER
 * CPUs and every lane's slices agreed within UNSTABLE_SPREAD. */
static double badness(double load, const lane_t *lanes, size_t nl) {
  double bad = load / NOISY_OTHER;
  for (size_t i = 0; i < nl; i++) {
    double b = (lanes[i].out->spread - 1) / (UNSTABLE_SPREAD - 1);
    if (b > bad) bad = b;
  }
  return bad;
}

/* measure(), repeated up to `retries` more times while the attempt was disturbed (badness > 1),
 * pausing in between so that a burst can pass; the least-disturbed attempt is kept, and *other
 * gets its load. Returns that attempt's measure() status. */
static int measure_quiet(lane_t *lanes, size_t nl, const opts_t *o, double leadin_ns,
                         double *other) {
  timing_t best[MAX_LANES];
  double best_bad = INFINITY, best_load = 0;
  int best_rc = 0;
  for (unsigned attempt = 0; attempt <= o->retries; attempt++) {
    if (attempt) usleep(RETRY_PAUSE_US);
    loadmeter_t lm = {0};
    load_start(&lm);
    int rc = measure(lanes, nl, o, leadin_ns);
    load_stop(&lm);
    double load = load_other(&lm), bad = badness(load, lanes, nl);
    if (bad < best_bad) {
      for (size_t i = 0; i < nl; i++) best[i] = *lanes[i].out;
      best_bad = bad;
      best_load = load;
      best_rc = rc;
    }
    if (rc != 0 || bad <= 1) break;
  }
  *other = best_load;
  for (size_t i = 0; i < nl; i++) *lanes[i].out = best[i];
  return best_rc;
}

/* ------------------------------------------------------------------------------------------ */
/* oneDNN                                                                                      */

#define DNNL_TRY(expr)                                                                      \
  do {                                                                                      \
    dnnl_status_t st_ = (expr);                                                             \
    if (st_ != dnnl_success) {                                                              \
      printf("*** oneDNN: %s failed: %s\n", #expr, dnnl_status2str(st_));                   \
      goto fail;                                                                            \
    }                                                                                       \
  } while (0)

static dnnl_engine_t g_dnnl_eng;
static dnnl_stream_t g_dnnl_stream;

/* Weights reordered into a primitive's preferred format, kept while the next primitive asks for
 * the same format (it usually does across M and thread counts). */
typedef struct {
  dnnl_memory_desc_t md;
  dnnl_memory_t mem;
  const void *src; /* the user weights it was made from */
} dnnl_wcache_t;

typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t src, dst, scratch;
  dnnl_exec_arg_t args[4];
  int nargs;
  char impl[64];
} dnnl_mm_t;

static int dnnl_mm_run(void *ctx) {
  dnnl_mm_t *d = ctx;
  if (dnnl_primitive_execute(d->prim, g_dnnl_stream, d->nargs, d->args) != dnnl_success) return -1;
  return dnnl_stream_wait(g_dnnl_stream) == dnnl_success ? 0 : -1;
}

static void dnnl_mm_free(dnnl_mm_t *d) {
  if (d->prim) dnnl_primitive_destroy(d->prim);
  if (d->src) dnnl_memory_destroy(d->src);
  if (d->dst) dnnl_memory_destroy(d->dst);
  if (d->scratch) dnnl_memory_destroy(d->scratch);
  memset(d, 0, sizeof *d);
}

static void dnnl_wcache_free(dnnl_wcache_t *c) {
  if (c->mem) dnnl_memory_destroy(c->mem);
  memset(c, 0, sizeof *c);
}

static dnnl_data_type_t dnnl_src_dt(int d) {
  return d == D_INT8 ? dnnl_s8 : d == D_BF16 ? dnnl_bf16 : dnnl_f32;
}

/* Creates C[M][N] = A[M][K]·Wᵀ with W stored [N][K] (so the K×N weights are tag "ba"). Threads
 * must already be set (omp_set_num_threads). The weights are reordered here, outside timing. */
static int dnnl_mm_create(dnnl_mm_t *d, dnnl_wcache_t *wc, int dt, size_t m, size_t k, size_t n,
                          void *a, const void *w, void *c) {
  dnnl_memory_desc_t a_md, w_any, w_user, c_md;
  dnnl_matmul_desc_t desc;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL, rpd = NULL;
  dnnl_primitive_t reorder = NULL;
  dnnl_memory_t w_user_mem = NULL;
  dnnl_dims_t a_dims = {(dnnl_dim_t)m, (dnnl_dim_t)k};
  dnnl_dims_t w_dims = {(dnnl_dim_t)k, (dnnl_dim_t)n};
  dnnl_dims_t c_dims = {(dnnl_dim_t)m, (dnnl_dim_t)n};
  dnnl_data_type_t in = dnnl_src_dt(dt), out = dt == D_INT8 ? dnnl_s32 : dnnl_f32;
  int rc = -1;

  memset(d, 0, sizeof *d);
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, in, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_any, 2, w_dims, in, dnnl_format_tag_any));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_user, 2, w_dims, in, dnnl_ba));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, out, dnnl_ab));
  DNNL_TRY(dnnl_matmul_desc_init(&desc, &a_md, &w_any, NULL, &c_md));
  DNNL_TRY(dnnl_primitive_attr_create(&attr));
  /* A scratchpad allocated once, as our plans own theirs. */
  DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  DNNL_TRY(dnnl_primitive_desc_create(&pd, &desc, attr, g_dnnl_eng, NULL));
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
    snprintf(d->impl, sizeof d->impl, "%s", impl);
  const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *s_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  DNNL_TRY(dnnl_primitive_create(&d->prim, pd));

  if (!wc->mem || wc->src != w || !dnnl_memory_desc_equal(&wc->md, w_md)) {
    dnnl_wcache_free(wc);
    wc->md = *w_md;
    DNNL_TRY(dnnl_memory_create(&wc->mem, w_md, g_dnnl_eng, DNNL_MEMORY_ALLOCATE));
    wc->src = w;
    DNNL_TRY(dnnl_memory_create(&w_user_mem, &w_user, g_dnnl_eng, (void *)w));
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, &w_user, g_dnnl_eng, w_md, g_dnnl_eng,
                                                NULL));
    DNNL_TRY(dnnl_primitive_create(&reorder, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, w_user_mem}, {DNNL_ARG_TO, wc->mem}};
    DNNL_TRY(dnnl_primitive_execute(reorder, g_dnnl_stream, 2, rargs));
    DNNL_TRY(dnnl_stream_wait(g_dnnl_stream));
  }

  DNNL_TRY(dnnl_memory_create(&d->src, &a_md, g_dnnl_eng, a));
  DNNL_TRY(dnnl_memory_create(&d->dst, &c_md, g_dnnl_eng, c));
  d->args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, d->src};
  d->args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wc->mem};
  d->args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, d->dst};
  d->nargs = 3;
  if (s_md && dnnl_memory_desc_get_size(s_md) > 0) {
    DNNL_TRY(dnnl_memory_create(&d->scratch, s_md, g_dnnl_eng, DNNL_MEMORY_ALLOCATE));
    d->args[d->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, d->scratch};
  }
  rc = 0;

fail: /* and success: the reorder's temporaries and the descriptors go either way */
  if (reorder) dnnl_primitive_destroy(reorder);
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (w_user_mem) dnnl_memory_destroy(w_user_mem);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (rc) {
    dnnl_mm_free(d);
    dnnl_wcache_free(wc);
  }
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* ours                                                                                        */

typedef struct {
  tpu_plan_t *plan;
  const void *a;
  const float *a_scales;
  void *c;
  tpu_status_t last; /* status of a failed run */
} ours_t;

static int ours_run(void *ctx) {
  ours_t *o = ctx;
  tpu_status_t st = tpu_plan_run(o->plan, o->a, o->a_scales, o->c);
  if (st != TPU_OK) {
    o->last = st;
    return -1;
  }
  return 0;
}

static tpu_dtype_t tpu_dt(int d) {
  return d == D_INT8 ? TPU_DTYPE_INT8 : d == D_BF16 ? TPU_DTYPE_BF16 : TPU_DTYPE_FP32;
}

/* ------------------------------------------------------------------------------------------ */
/* OpenBLAS                                                                                    */

typedef struct {
  size_t m, k, n;
  const float *a, *w;
  float *c;
} blas_t;

static int blas_run(void *ctx) {
  blas_t *b = ctx;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)b->m, (blasint)b->n,
              (blasint)b->k, 1.0f, b->a, (blasint)b->k, b->w, (blasint)b->k, 0.0f, b->c,
              (blasint)b->n);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* checks                                                                                      */

#define N_SAMPLED 64 /* elements per case checked against the triple loop */

typedef struct {
  int dt;
  size_t m, k, n;
  const void *a;      /* [M][K] of the dtype */
  const void *w;      /* [N][K] of the dtype */
  const float *bound; /* float dtypes: [M][N] Σ|a·w| (FP32 estimate), for tolerances */
  size_t si[N_SAMPLED], sj[N_SAMPLED];
  double ref[N_SAMPLED], refabs[N_SAMPLED];
  size_t ns;
} check_t;

static double elem_a(const check_t *c, size_t i, size_t kk) {
  if (c->dt == D_INT8) return ((const int8_t *)c->a)[i * c->k + kk];
  if (c->dt == D_BF16) return bf16_to_float(((const uint16_t *)c->a)[i * c->k + kk]);
  return ((const float *)c->a)[i * c->k + kk];
}

static double elem_w(const check_t *c, size_t j, size_t kk) {
  if (c->dt == D_INT8) return ((const int8_t *)c->w)[j * c->k + kk];
  if (c->dt == D_BF16) return bf16_to_float(((const uint16_t *)c->w)[j * c->k + kk]);
  return ((const float *)c->w)[j * c->k + kk];
}

/* Picks the corners and random elements and computes them in float64 (exact for INT8: every
 * product and partial sum is an integer far below 2^53). */
static void check_prepare(check_t *c) {
  size_t total = c->m * c->n;
  c->ns = total < N_SAMPLED ? total : N_SAMPLED;
  for (size_t s = 0; s < c->ns; s++) {
    size_t idx;
    if (c->ns == total) idx = s;
    else if (s == 0) idx = 0;
    else if (s == 1) idx = total - 1;
    else idx = (size_t)(rng_next() % total);
    c->si[s] = idx / c->n;
    c->sj[s] = idx % c->n;
    double acc = 0, abs_acc = 0;
    for (size_t kk = 0; kk < c->k; kk++) {
      double p = elem_a(c, c->si[s], kk) * elem_w(c, c->sj[s], kk);
      acc += p;
      abs_acc += fabs(p);
    }
    c->ref[s] = acc;
    c->refabs[s] = abs_acc;
  }
}

/* Tolerance for an FP32-accumulated dot product of K terms whose magnitudes sum to abs_sum:
 * rounding errors of the partial sums grow like √K·u·Σ|a·w| at worst in practice (the rigorous
 * K·u bound is useless at K = 4096); the factor 4 keeps two different summation orders apart
 * from real bugs by a wide margin. */
static double fp_tol(size_t k, double abs_sum) {
  return 4.0 * ldexp(1.0, -24) * sqrt((double)k) * abs_sum + 1e-30;
}

static double out_at(int dt, const void *c, size_t idx) {
  return dt == D_INT8 ? (double)((const int32_t *)c)[idx] : (double)((const float *)c)[idx];
}

/* Checks one library's output against the sampled float64 reference. Returns the number of
 * bad elements and reports the first. */
static size_t check_sampled(const check_t *c, const void *out, const char *who, const char *tag) {
  size_t bad = 0;
  for (size_t s = 0; s < c->ns; s++) {
    double got = out_at(c->dt, out, c->si[s] * c->n + c->sj[s]);
    double tol = c->dt == D_INT8 ? 0 : fp_tol(c->k, c->refabs[s]);
    if (!(fabs(got - c->ref[s]) <= tol)) {
      if (bad == 0)
        printf("*** %s: %s deviates from the float64 reference at (%zu,%zu): got %.9g, want "
               "%.9g (tolerance %.3g)\n",
               tag, who, c->si[s], c->sj[s], got, c->ref[s], tol);
      bad++;
    }
  }
  return bad;
}

/* Full comparison of two outputs. Returns the number of differing elements; reports the first. */
static size_t check_pair(const check_t *c, const void *x, const char *xn, const void *y,
                         const char *yn, const char *tag) {
  size_t bad = 0, first = 0, total = c->m * c->n;
  if (c->dt == D_INT8) {
    const int32_t *p = x, *q = y;
    for (size_t i = 0; i < total; i++)
      if (p[i] != q[i] && bad++ == 0) first = i;
  } else {
    const float *p = x, *q = y;
    for (size_t i = 0; i < total; i++) {
      double tol = 2 * fp_tol(c->k, c->bound[i]); /* each side may be off by fp_tol */
      if (!(fabs((double)p[i] - (double)q[i]) <= tol) && bad++ == 0) first = i;
    }
  }
  if (bad) {
    size_t i = first / c->n, j = first % c->n;
    double ref = 0;
    for (size_t kk = 0; kk < c->k; kk++) ref += elem_a(c, i, kk) * elem_w(c, j, kk);
    printf("*** %s: %s and %s differ in %zu of %zu elements; first at (%zu,%zu): %s %.9g, %s "
           "%.9g, float64 reference %.9g\n",
           tag, xn, yn, bad, total, i, j, xn, out_at(c->dt, x, first), yn,
           out_at(c->dt, y, first), ref);
  }
  return bad;
}

/* ------------------------------------------------------------------------------------------ */
/* results                                                                                     */

typedef struct {
  int dt;
  size_t m, k, n;
  unsigned threads;
  timing_t ours, dnnl, blas;
  bool ours_ok, dnnl_ok, blas_ok; /* measured */
  bool correct;                   /* every check passed */
  double other_cpus;              /* other processes' CPU use while timing (see loadmeter_t) */
  char impl[64];
} row_t;

typedef struct {
  const char *name;
  const char *lib;
  double median_ns, p99_ns;
  unsigned calls;
  double wait_pct;   /* CPU wait while measuring (see cpu_wait_ns) */
  double other_cpus; /* other processes' CPU use meanwhile (see loadmeter_t) */
} lat_t;

static row_t *g_rows;
static size_t g_nrows, g_caprows;
static lat_t g_lat[4];
static size_t g_nlat;
static unsigned g_failures;

static double gops(const row_t *r, const timing_t *t) {
  return 2.0 * (double)r->m * (double)r->k * (double)r->n / t->ns;
}

static void print_header_row(void) {
  printf("%-5s %5s %5s %3s | %10s %5s | %10s %5s | %10s %5s | %6s | %-6s | %5s | %s\n", "dtype",
         "M", "K=N", "thr", "ours GOPS", "reps", "oneDNN", "reps", "OpenBLAS", "reps", "ratio",
         "check", "other", "vs OpenBLAS  oneDNN impl");
}

static void fmt_gops(char *buf, size_t len, bool ok, const row_t *r, const timing_t *t) {
  if (ok) snprintf(buf, len, "%10.2f %5u", gops(r, t), t->samples);
  else snprintf(buf, len, "%10s %5s", "-", "-");
}

/* " " for a trustworthy row; "!" for one timed while other processes used the machine; "~" for
 * one where oneDNN's or OpenBLAS's slices disagreed (UNSTABLE_SPREAD), which after the retries
 * points at the machine: both are left out of the geomeans. "*" where only ours disagreed with
 * itself: that is the engine's own behaviour, so the row counts. */
static const char *row_flag(const row_t *r) {
  if (r->other_cpus > NOISY_OTHER) return "!";
  if ((r->dnnl_ok && r->dnnl.spread > UNSTABLE_SPREAD) ||
      (r->blas_ok && r->blas.spread > UNSTABLE_SPREAD))
    return "~";
  if (r->ours_ok && r->ours.spread > UNSTABLE_SPREAD) return "*";
  return " ";
}

/* Whether a row's numbers may enter the geomeans. */
static bool row_trusted(const row_t *r) {
  const char *f = row_flag(r);
  return *f == ' ' || *f == '*';
}

static void print_row(const row_t *r) {
  char o[32], d[32], b[32], ratio[16] = "     -", bratio[16] = "    -";
  fmt_gops(o, sizeof o, r->ours_ok, r, &r->ours);
  fmt_gops(d, sizeof d, r->dnnl_ok, r, &r->dnnl);
  fmt_gops(b, sizeof b, r->blas_ok, r, &r->blas);
  if (r->ours_ok && r->dnnl_ok) snprintf(ratio, sizeof ratio, "%6.2f", r->dnnl.ns / r->ours.ns);
  if (r->ours_ok && r->blas_ok) snprintf(bratio, sizeof bratio, "%5.2f", r->blas.ns / r->ours.ns);
  char other[16];
  snprintf(other, sizeof other, "%4.2f%s", r->other_cpus, row_flag(r));
  printf("%-5s %5zu %5zu %3u | %s | %s | %s | %s | %-6s | %s | %s        %s\n", dname[r->dt], r->m,
         r->k, r->threads, o, d, b, ratio, r->correct ? "ok" : "FAILED", other, bratio, r->impl);
  fflush(stdout);
}

/* Geometric mean of ours/oneDNN (or ours/OpenBLAS) over the rows of one dtype with M ≤ max_m
 * that were measured, correct and not disturbed by other load (one such row can be off by 100×).
 * Returns NAN when there are none. */
static double geomean(int dt, bool vs_blas, size_t max_m, unsigned *count) {
  double log_sum = 0;
  unsigned n = 0;
  for (size_t i = 0; i < g_nrows; i++) {
    const row_t *r = &g_rows[i];
    bool other = vs_blas ? r->blas_ok : r->dnnl_ok;
    if (r->dt != dt || !r->ours_ok || !other || !r->correct || r->m > max_m ||
        !row_trusted(r))
      continue;
    log_sum += log((vs_blas ? r->blas.ns : r->dnnl.ns) / r->ours.ns);
    n++;
  }
  if (count) *count = n;
  return n ? exp(log_sum / n) : NAN;
}

static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.6g", v);
  else fputs("null", f);
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* ------------------------------------------------------------------------------------------ */
/* the grid                                                                                    */

typedef struct {
  tpu_engine_t *eng[MAX_LIST]; /* one engine per thread count, index as opts.threads */
} engines_t;

/* Runs one (dtype, K=N) block of the grid: all M and thread counts. */
static void run_block(const opts_t *o, engines_t *E, int dt, size_t kn) {
  size_t k = kn, n = kn, max_m = 0;
  for (size_t i = 0; i < o->nms; i++)
    if (o->ms[i] > max_m) max_m = o->ms[i];
  size_t esz = dt == D_INT8 ? 1 : dt == D_BF16 ? 2 : 4;
  size_t osz = 4; /* INT32 or FP32 out */

  watchdog("%s K=N=%zu: weights and packing", dname[dt], kn);
  /* Weights [N][K], once per block, and their |w| in FP32 for tolerances. */
  void *w = xalloc(n * k * esz);
  float *w_abs = dt == D_INT8 ? NULL : xalloc(n * k * sizeof(float));
  float *w_scales = xalloc(n * sizeof(float));
  for (size_t i = 0; i < n * k; i++) {
    if (dt == D_INT8) ((int8_t *)w)[i] = rng_int8();
    else if (dt == D_BF16) {
      uint16_t v = bf16_from_float(rng_float());
      ((uint16_t *)w)[i] = v;
      w_abs[i] = fabsf(bf16_to_float(v));
    } else {
      float v = rng_float();
      ((float *)w)[i] = v;
      w_abs[i] = fabsf(v);
    }
  }
  for (size_t i = 0; i < n; i++) w_scales[i] = 1.0f / 127.0f * (1.0f + (float)(i % 7));

  /* Ours: packed once per engine (weights belong to the engine that packed them). */
  tpu_weights_t *pw[MAX_LIST] = {0};
  tpu_weights_desc_t wd = {.compute = tpu_dt(dt), .k = k, .n = n, .layout = TPU_LAYOUT_NK,
                           .src_dtype = tpu_dt(dt), .src = w,
                           .src_scales = dt == D_INT8 ? w_scales : NULL};
  for (size_t t = 0; t < o->nthreads; t++) {
    tpu_status_t st = tpu_weights_pack(E->eng[t], &wd, &pw[t]);
    if (st != TPU_OK) {
      printf("*** ours: tpu_weights_pack(%s, K=%zu, N=%zu) failed: %s\n", dname[dt], k, n,
             tpu_strerror(st));
      pw[t] = NULL;
    }
  }

  void *a = xalloc(max_m * k * esz);
  float *a_abs = xalloc(max_m * k * sizeof(float));
  float *a_scales = xalloc(max_m * sizeof(float));
  void *c_ours = xalloc(max_m * n * osz), *c_dnnl = xalloc(max_m * n * osz);
  float *c_blas = dt == D_FP32 ? xalloc(max_m * n * sizeof(float)) : NULL;
  float *bound = dt == D_INT8 ? NULL : xalloc(max_m * n * sizeof(float));
  dnnl_wcache_t wc = {0};

  for (size_t mi = 0; mi < o->nms; mi++) {
    size_t m = o->ms[mi];
    /* Fresh A for every M. */
    for (size_t i = 0; i < m * k; i++) {
      if (dt == D_INT8) ((int8_t *)a)[i] = rng_int8();
      else if (dt == D_BF16) {
        uint16_t v = bf16_from_float(rng_float());
        ((uint16_t *)a)[i] = v;
        a_abs[i] = fabsf(bf16_to_float(v));
      } else {
        float v = rng_float();
        ((float *)a)[i] = v;
        a_abs[i] = fabsf(v);
      }
    }
    for (size_t i = 0; i < m; i++) a_scales[i] = 0.5f + (float)(rng_next() % 1024) / 1024.0f;

    check_t chk = {.dt = dt, .m = m, .k = k, .n = n, .a = a, .w = w, .bound = bound};
    check_prepare(&chk);
    if (bound) { /* Σ|a·w| per element, for the full comparison's tolerance; one thread, so
                  * that no OpenBLAS worker is left polling (see BLAS_QUIESCE_US) */
      openblas_set_num_threads(1);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n, (blasint)k,
                  1.0f, a_abs, (blasint)k, w_abs, (blasint)k, 0.0f, bound, (blasint)n);
    }

    for (size_t ti = 0; ti < o->nthreads; ti++) {
      unsigned T = o->threads[ti];
      char tag[96];
      snprintf(tag, sizeof tag, "%s M=%zu K=N=%zu threads=%u", dname[dt], m, kn, T);

      if (g_nrows == g_caprows) {
        g_caprows = g_caprows ? 2 * g_caprows : 64;
        g_rows = realloc(g_rows, g_caprows * sizeof *g_rows);
        if (!g_rows) die("out of memory");
      }
      row_t *r = &g_rows[g_nrows++];
      memset(r, 0, sizeof *r);
      r->dt = dt;
      r->m = m;
      r->k = k;
      r->n = n;
      r->threads = T;
      r->correct = true;

      /* ---- ours: plan once, first call checked, then timed ---- */
      watchdog("%s: ours, plan and first call", tag);
      tpu_plan_t *plan = NULL;
      ours_t oc = {.a = a, .a_scales = dt == D_INT8 ? a_scales : NULL, .c = c_ours};
      double ours_first = 0;
      bool ours_ran = false;
      if (pw[ti]) {
        tpu_epilogue_t ep = {.bias = NULL, .act = TPU_ACT_NONE,
                             .out_dtype = dt == D_INT8 ? TPU_DTYPE_INT32 : TPU_DTYPE_FP32,
                             .out_scale = 0};
        tpu_status_t st = tpu_plan_create(E->eng[ti], pw[ti], m, tpu_dt(dt), &ep, &plan);
        if (st != TPU_OK) {
          printf("*** %s: tpu_plan_create failed: %s\n", tag, tpu_strerror(st));
          plan = NULL;
        } else {
          oc.plan = plan;
          memset(c_ours, 0xA5, m * n * osz); /* garbage, so a no-op run cannot pass */
          double t0 = now_ns();
          if (ours_run(&oc)) printf("*** %s: tpu_plan_run failed: %s\n", tag, tpu_strerror(oc.last));
          else {
            ours_first = now_ns() - t0;
            ours_ran = true;
          }
        }
      }

      /* ---- oneDNN: primitive and weight reorder once, first call checked ---- */
      watchdog("%s: oneDNN, primitive, reorder and first call", tag);
      omp_set_num_threads((int)T);
      dnnl_mm_t dm;
      double dnnl_first = 0;
      bool dnnl_ran = false;
      if (dnnl_mm_create(&dm, &wc, dt, m, k, n, a, w, c_dnnl) == 0) {
        snprintf(r->impl, sizeof r->impl, "%s", dm.impl);
        memset(c_dnnl, 0x5A, m * n * osz);
        double t0 = now_ns();
        if (dnnl_mm_run(&dm)) printf("*** %s: oneDNN execute failed\n", tag);
        else {
          dnnl_first = now_ns() - t0;
          dnnl_ran = true;
        }
      } else {
        printf("*** %s: oneDNN matmul could not be created\n", tag);
      }

      /* ---- correctness before speed ---- */
      if (!ours_ran || !dnnl_ran) r->correct = false;
      if (ours_ran && check_sampled(&chk, c_ours, "ours", tag)) r->correct = false;
      if (dnnl_ran && check_sampled(&chk, c_dnnl, "oneDNN", tag)) r->correct = false;
      if (ours_ran && dnnl_ran && check_pair(&chk, c_ours, "ours", c_dnnl, "oneDNN", tag))
        r->correct = false;

      /* ---- speed: ours and oneDNN interleaved ---- */
      lane_t lanes[2];
      size_t nl = 0;
      if (ours_ran) lanes[nl++] = (lane_t){.fn = ours_run, .ctx = &oc, .first_ns = ours_first,
                                           .out = &r->ours};
      if (dnnl_ran) lanes[nl++] = (lane_t){.fn = dnnl_mm_run, .ctx = &dm, .first_ns = dnnl_first,
                                           .out = &r->dnnl};
      watchdog("%s: timing ours and oneDNN", tag);
      double other = 0;
      omp_set_num_threads((int)T);
      if (measure_quiet(lanes, nl, o, T > 1 ? LEADIN_NS : 0, &other) != 0) {
        if (ours_ran && isnan(r->ours.ns))
          printf("*** %s: tpu_plan_run failed while timing: %s\n", tag, tpu_strerror(oc.last));
        if (dnnl_ran && isnan(r->dnnl.ns)) printf("*** %s: oneDNN failed while timing\n", tag);
      }
      r->other_cpus = other;
      r->ours_ok = ours_ran && !isnan(r->ours.ns);
      r->dnnl_ok = dnnl_ran && !isnan(r->dnnl.ns);
      if (ours_ran && !r->ours_ok) r->correct = false;
      /* Outputs of the last timed calls: threaded runs must stay deterministic. */
      if (r->ours_ok && r->dnnl_ok &&
          check_pair(&chk, c_ours, "ours (after timing)", c_dnnl, "oneDNN", tag))
        r->correct = false;

      /* ---- OpenBLAS (FP32 only), after the others: its idle workers poll for ~0.1 s after a
       * threaded call and would take a core from whatever runs next ---- */
      if (dt == D_FP32 && o->openblas) {
        watchdog("%s: OpenBLAS", tag);
        blas_t bc = {.m = m, .k = k, .n = n, .a = a, .w = w, .c = c_blas};
        openblas_set_num_threads((int)T);
        memset(c_blas, 0x5A, m * n * sizeof(float));
        double t0 = now_ns();
        blas_run(&bc);
        lane_t bl = {.fn = blas_run, .ctx = &bc, .first_ns = now_ns() - t0, .out = &r->blas};
        bool ok = check_sampled(&chk, c_blas, "OpenBLAS", tag) == 0;
        if (dnnl_ran && check_pair(&chk, c_blas, "OpenBLAS", c_dnnl, "oneDNN", tag)) ok = false;
        if (!ok) r->correct = false; /* the anchor itself is wrong: still a failed row */
        r->blas_ok = measure_quiet(&bl, 1, o, T > 1 ? LEADIN_NS : 0, &other) == 0;
        if (other > r->other_cpus) r->other_cpus = other;
        if (T > 1) usleep(BLAS_QUIESCE_US);
      }
      if (!r->correct) g_failures++;
      print_row(r);

      dnnl_mm_free(&dm); /* zeroed when creation failed */
      tpu_plan_free(plan);
    }
  }

  dnnl_wcache_free(&wc);
  for (size_t t = 0; t < o->nthreads; t++) tpu_weights_free(pw[t]);
  free(w);
  free(w_abs);
  free(w_scales);
  free(a);
  free(a_abs);
  free(a_scales);
  free(c_ours);
  free(c_dnnl);
  free(c_blas);
  free(bound);
}

/* ------------------------------------------------------------------------------------------ */
/* latency                                                                                     */

/* Individually timed calls of fn; the clock pair's own cost (printed once) is included. */
static void latency_of(run_fn fn, void *ctx, unsigned calls, lat_t *out) {
  double *v = g_samples[0];
  if (calls > MAX_SAMPLES) calls = MAX_SAMPLES;
  for (unsigned i = 0; i < calls / 10 + 100; i++) /* warm caches and branch predictors */
    if (fn(ctx)) return;
  uint64_t w0 = cpu_wait_ns();
  loadmeter_t lm = {0};
  load_start(&lm);
  double start = now_ns();
  for (unsigned i = 0; i < calls; i++) {
    double t0 = now_ns();
    if (fn(ctx)) return;
    v[i] = now_ns() - t0;
  }
  out->wait_pct = 100.0 * (double)(cpu_wait_ns() - w0) / (now_ns() - start);
  load_stop(&lm);
  out->other_cpus = load_other(&lm);
  out->calls = calls;
  out->median_ns = quantile(v, calls, 0.5);
  out->p99_ns = quantile(v, calls, 0.99);
}

static void run_latency(const opts_t *o, tpu_engine_t *eng1) {
  static const struct {
    const char *name;
    size_t m, k, n;
  } shapes[2] = {{"int8 32x32x32", 32, 32, 32}, {"int8 1x256x256", 1, 256, 256}};

  /* The clock's own cost, for reading the numbers below. */
  for (unsigned i = 0; i < 10000; i++) {
    double t0 = now_ns();
    g_samples[0][i] = now_ns() - t0;
  }
  double clock_ns = quantile(g_samples[0], 10000, 0.5);
  printf("\nin-process latency, 1 thread, %u individually timed calls (each includes ~%.0f ns of "
         "clock reading):\n",
         o->lat_calls, clock_ns);
  printf("%-16s %-7s %12s %12s %6s\n", "shape", "lib", "median us", "p99 us", "other");

  omp_set_num_threads(1);
  for (int s = 0; s < 2; s++) {
    size_t m = shapes[s].m, k = shapes[s].k, n = shapes[s].n;
    int8_t *a = xalloc(m * k), *w = xalloc(n * k);
    float *ws = xalloc(n * sizeof(float)), *as = xalloc(m * sizeof(float));
    int32_t *c1 = xalloc(m * n * 4), *c2 = xalloc(m * n * 4);
    for (size_t i = 0; i < m * k; i++) a[i] = rng_int8();
    for (size_t i = 0; i < n * k; i++) w[i] = rng_int8();
    for (size_t i = 0; i < n; i++) ws[i] = 1.0f / 127.0f;
    for (size_t i = 0; i < m; i++) as[i] = 1.0f / 127.0f;

    watchdog("latency %s", shapes[s].name);
    lat_t lo = {shapes[s].name, "ours", NAN, NAN, 0, 0, 0};
    lat_t ld = {shapes[s].name, "oneDNN", NAN, NAN, 0, 0, 0};
    tpu_weights_t *pw = NULL;
    tpu_plan_t *plan = NULL;
    tpu_weights_desc_t wd = {.compute = TPU_DTYPE_INT8, .k = k, .n = n, .layout = TPU_LAYOUT_NK,
                             .src_dtype = TPU_DTYPE_INT8, .src = w, .src_scales = ws};
    tpu_epilogue_t ep = {.out_dtype = TPU_DTYPE_INT32};
    tpu_status_t st = tpu_weights_pack(eng1, &wd, &pw);
    if (st == TPU_OK) st = tpu_plan_create(eng1, pw, m, TPU_DTYPE_INT8, &ep, &plan);
    if (st == TPU_OK) {
      ours_t oc = {.plan = plan, .a = a, .a_scales = as, .c = c1};
      latency_of(ours_run, &oc, o->lat_calls, &lo);
    } else {
      printf("*** latency %s: ours could not be set up: %s\n", shapes[s].name, tpu_strerror(st));
      g_failures++;
    }
    dnnl_mm_t dm;
    dnnl_wcache_t wc = {0};
    if (dnnl_mm_create(&dm, &wc, D_INT8, m, k, n, a, w, c2) == 0) {
      latency_of(dnnl_mm_run, &dm, o->lat_calls, &ld);
      dnnl_mm_free(&dm);
    }
    dnnl_wcache_free(&wc);
    if (plan && !isnan(lo.median_ns) && memcmp(c1, c2, m * n * 4) != 0) {
      printf("*** latency %s: ours and oneDNN results differ\n", shapes[s].name);
      g_failures++;
    }
    tpu_plan_free(plan);
    tpu_weights_free(pw);
    for (int l = 0; l < 2; l++) {
      lat_t *x = l ? &ld : &lo;
      printf("%-16s %-7s %12.3f %12.3f %6.2f%s\n", x->name, x->lib, x->median_ns / 1e3,
             x->p99_ns / 1e3, x->other_cpus, x->other_cpus > NOISY_OTHER ? "!" : "");
      g_lat[g_nlat++] = *x;
    }
    free(a);
    free(w);
    free(ws);
    free(as);
    free(c1);
    free(c2);
  }
}

/* ------------------------------------------------------------------------------------------ */
/* header, thread-control probe, summary                                                       */

/* Variables that change how the three libraries run, as set for this run. */
static void print_tuning_env(void) {
  extern char **environ;
  static const char *const prefixes[] = {"OMP_", "GOMP_", "KMP_", "DNNL_", "ONEDNN_", "OPENBLAS_",
                                         "TPUD_"};
  bool any = false;
  for (char **e = environ; *e; e++)
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
      if (strncmp(*e, prefixes[i], strlen(prefixes[i])) == 0) {
        printf("%s%s", any ? " " : "env           ", *e);
        any = true;
        break;
      }
  if (any) printf("\n");
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ' || *p == '\t') p++;
        p[strcspn(p, "\n")] = 0;
        snprintf(buf, len, "%s", p);
      }
      break;
    }
  }
  fclose(f);
}

/* The oneDNN FP32 probe: 128×1024×1024 at `threads`, GOPS (NAN if it could not run); *other gets
 * other processes' CPU use while it ran. */
static double dnnl_probe(const opts_t *o, unsigned threads, double *other) {
  const size_t m = 128, k = 1024, n = 1024;
  float *a = xalloc(m * k * 4), *w = xalloc(n * k * 4), *c = xalloc(m * n * 4);
  for (size_t i = 0; i < m * k; i++) a[i] = rng_float();
  for (size_t i = 0; i < n * k; i++) w[i] = rng_float();
  double ns = NAN;
  *other = 0;
  opts_t po = *o;
  po.min_case_ns = 50e6;
  po.min_samples = 5;
  dnnl_mm_t dm;
  dnnl_wcache_t wc = {0};
  omp_set_num_threads((int)threads);
  if (dnnl_mm_create(&dm, &wc, D_FP32, m, k, n, a, w, c) == 0) {
    timing_t t;
    double t0 = now_ns();
    if (dnnl_mm_run(&dm) == 0) {
      lane_t l = {.fn = dnnl_mm_run, .ctx = &dm, .first_ns = now_ns() - t0, .out = &t};
      if (measure_quiet(&l, 1, &po, threads > 1 ? LEADIN_NS : 0, other) == 0) ns = t.ns;
    }
    dnnl_mm_free(&dm);
  }
  dnnl_wcache_free(&wc);
  free(a);
  free(w);
  free(c);
  return 2.0 * m * k * n / ns;
}

/* Whether the engine's idle threads take CPU from other code: runs a threaded FP32 plan for a
 * while, then times the oneDNN probe at once and compares it with `pristine` (the same probe
 * before any engine work). Prints its finding; never a failure (a noisy machine can fake it). */
static void idle_engine_check(const opts_t *o, tpu_engine_t *eng, unsigned threads,
                              double pristine, double pristine_other) {
  const size_t m = 128, k = 1024, n = 1024;
  float *a = xalloc(m * k * 4), *w = xalloc(n * k * 4), *c = xalloc(m * n * 4);
  for (size_t i = 0; i < m * k; i++) a[i] = rng_float();
  for (size_t i = 0; i < n * k; i++) w[i] = rng_float();
  tpu_weights_desc_t wd = {.compute = TPU_DTYPE_FP32, .k = k, .n = n, .layout = TPU_LAYOUT_NK,
                           .src_dtype = TPU_DTYPE_FP32, .src = w};
  tpu_weights_t *pw = NULL;
  tpu_plan_t *plan = NULL;
  tpu_status_t st = tpu_weights_pack(eng, &wd, &pw);
  if (st == TPU_OK) st = tpu_plan_create(eng, pw, m, TPU_DTYPE_FP32, NULL, &plan);
  if (st == TPU_OK) {
    double t0 = now_ns();
    do st = tpu_plan_run(plan, a, NULL, c);
    while (st == TPU_OK && now_ns() - t0 < 20e6);
  }
  if (st == TPU_OK) {
    double other, after = dnnl_probe(o, threads, &other);
    bool noisy = other > NOISY_OTHER || pristine_other > NOISY_OTHER;
    printf("idle engine   oneDNN fp32 128x1024x1024 at %u threads right after ours: %.1f GOPS, "
           "before any engine work %.1f: %+.0f%%%s\n",
           threads, after, pristine, 100.0 * (after / pristine - 1),
           noisy                     ? "  (other load on the machine: no conclusion)"
           : after < 0.85 * pristine ? "  *** the engine's idle threads may be taking CPU"
                                     : "");
  } else {
    printf("idle engine   check skipped: %s\n", tpu_strerror(st));
  }
  tpu_plan_free(plan);
  tpu_weights_free(pw);
  free(a);
  free(w);
  free(c);
}

static void write_json(const opts_t *o, const char *cpu, const char *isa, const char *dnnl_isa,
                       double probe_speedup) {
  FILE *f = fopen(o->json_path, "w");
  if (!f) {
    printf("*** cannot write %s: %s\n", o->json_path, strerror(errno));
    g_failures++;
    return;
  }
  const dnnl_version_t *v = dnnl_version();
  fprintf(f, "{\n  \"cpu\": ");
  json_str(f, cpu);
  fprintf(f, ",\n  \"engine_isa\": ");
  json_str(f, isa);
  fprintf(f, ",\n  \"onednn_version\": \"%d.%d.%d\",\n  \"onednn_isa\": ", v->major, v->minor,
          v->patch);
  json_str(f, dnnl_isa);
  fprintf(f, ",\n  \"openblas\": ");
  json_str(f, openblas_get_config());
  fprintf(f, ",\n  \"seed\": %" PRIu64 ",\n  \"quick\": %s,\n  \"onednn_thread_probe_speedup\": ",
          o->seed, o->quick ? "true" : "false");
  json_num(f, probe_speedup);
  fprintf(f, ",\n  \"results\": [\n");
  for (size_t i = 0; i < g_nrows; i++) {
    const row_t *r = &g_rows[i];
    fprintf(f, "    {\"dtype\": \"%s\", \"m\": %zu, \"k\": %zu, \"n\": %zu, \"threads\": %u, ",
            dname[r->dt], r->m, r->k, r->n, r->threads);
    const struct {
      const char *name;
      bool ok;
      const timing_t *t;
    } libs[3] = {{"ours", r->ours_ok, &r->ours}, {"onednn", r->dnnl_ok, &r->dnnl},
                 {"openblas", r->blas_ok, &r->blas}};
    for (int l = 0; l < 3; l++) {
      fprintf(f, "\"%s_gops\": ", libs[l].name);
      json_num(f, libs[l].ok ? gops(r, libs[l].t) : NAN);
      fprintf(f, ", \"%s_ns\": ", libs[l].name);
      json_num(f, libs[l].ok ? libs[l].t->ns : NAN);
      fprintf(f, ", \"%s_spread\": ", libs[l].name);
      json_num(f, libs[l].ok ? libs[l].t->spread : NAN);
      fprintf(f, ", \"%s_samples\": %u, \"%s_cpu_wait_pct\": ", libs[l].name,
              libs[l].ok ? libs[l].t->samples : 0, libs[l].name);
      json_num(f, libs[l].ok ? libs[l].t->wait_pct : NAN);
      fprintf(f, ", ");
    }
    fprintf(f, "\"ratio_onednn\": ");
    json_num(f, r->ours_ok && r->dnnl_ok ? r->dnnl.ns / r->ours.ns : NAN);
    fprintf(f, ", \"ratio_openblas\": ");
    json_num(f, r->ours_ok && r->blas_ok ? r->blas.ns / r->ours.ns : NAN);
    fprintf(f, ", \"other_cpus\": ");
    json_num(f, r->other_cpus);
    fprintf(f, ", \"flag\": \"%s\", \"trusted\": %s", row_flag(r),
            row_trusted(r) ? "true" : "false");
    fprintf(f, ", \"correct\": %s, \"onednn_impl\": ", r->correct ? "true" : "false");
    json_str(f, r->impl);
    fprintf(f, "}%s\n", i + 1 < g_nrows ? "," : "");
  }
  fprintf(f, "  ],\n  \"latency\": [\n");
  for (size_t i = 0; i < g_nlat; i++) {
    fprintf(f, "    {\"shape\": \"%s\", \"lib\": \"%s\", \"median_ns\": ", g_lat[i].name,
            g_lat[i].lib);
    json_num(f, g_lat[i].median_ns);
    fprintf(f, ", \"p99_ns\": ");
    json_num(f, g_lat[i].p99_ns);
    fprintf(f, ", \"cpu_wait_pct\": ");
    json_num(f, g_lat[i].wait_pct);
    fprintf(f, ", \"other_cpus\": ");
    json_num(f, g_lat[i].other_cpus);
    fprintf(f, ", \"calls\": %u}%s\n", g_lat[i].calls, i + 1 < g_nlat ? "," : "");
  }
  fprintf(f, "  ],\n  \"geomean_vs_onednn\": {");
  for (int d = 0; d < D_COUNT; d++) {
    fprintf(f, "\"%s\": ", dname[d]);
    json_num(f, geomean(d, false, SIZE_MAX, NULL));
    fprintf(f, ", \"%s_m_le_32\": ", dname[d]);
    json_num(f, geomean(d, false, 32, NULL));
    fprintf(f, "%s", d + 1 < D_COUNT ? ", " : "");
  }
  fprintf(f, "},\n  \"geomean_fp32_vs_openblas\": ");
  json_num(f, geomean(D_FP32, true, SIZE_MAX, NULL));
  fprintf(f, ",\n  \"failures\": %u\n}\n", g_failures);
  if (fclose(f) != 0) {
    printf("*** writing %s failed: %s\n", o->json_path, strerror(errno));
    g_failures++;
  }
}

/* OpenBLAS picks its kernels when it is loaded, by CPU model, unless OPENBLAS_CORETYPE names
 * them. Environments set it (the one this bench was written in had OPENBLAS_CORETYPE=Haswell: the
 * AVX2 kernels, at about half the FP32 speed of the AVX-512 kernels OpenBLAS picks for itself on
 * the same CPU). An anchor must be the library at its best on this machine, so unless told
 * otherwise the bench drops the variable and re-executes itself once (OpenBLAS reads it only at
 * load time). ENGINE_BENCH_OPENBLAS_DROPPED carries what was dropped across the exec, for the
 * header, and stops a second exec. */
static void openblas_own_choice(const opts_t *o, char **argv) {
  const char *forced = getenv("OPENBLAS_CORETYPE");
  if (o->openblas_as_is || !o->openblas || !forced || getenv("ENGINE_BENCH_OPENBLAS_DROPPED"))
    return;
  char note[128];
  snprintf(note, sizeof note, "OPENBLAS_CORETYPE=%s", forced);
  if (setenv("ENGINE_BENCH_OPENBLAS_DROPPED", note, 1) != 0) return;
  unsetenv("OPENBLAS_CORETYPE");
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return;
  self[len] = 0;
  fflush(stdout);
  execv(self, argv);
  printf("note: could not re-execute without OPENBLAS_CORETYPE: %s\n", strerror(errno));
  unsetenv("ENGINE_BENCH_OPENBLAS_DROPPED");
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: engine_bench [--quick] [--json FILE] [--threads LIST] [--m LIST] [--kn LIST]\n"
          "                    [--dtypes LIST] [--seed N] [--no-openblas]\n"
          "  --quick         subset (M 1,32,128; K=N 256,1024; 1 thread), fewer reps: < 1 minute\n"
          "  --json FILE     also write every result as JSON\n"
          "  --threads LIST  thread counts, e.g. 1,2 (default 1,2; quick 1)\n"
          "  --m LIST        batch sizes M (default 1,8,32,128,512)\n"
          "  --kn LIST       square sizes K=N (default 256,1024,4096)\n"
          "  --dtypes LIST   any of int8,bf16,fp32 (default all)\n"
          "  --seed N        repeat a run's random inputs (the seed is printed at the top)\n"
          "  --no-openblas   skip the OpenBLAS column\n"
          "  --openblas-as-is  honour OPENBLAS_CORETYPE from the environment (default: drop it,\n"
          "                  so that OpenBLAS picks the kernels for this CPU itself)\n"
          "The last line is 'geomean ratio vs oneDNN: int8 X.XX bf16 X.XX fp32 X.XX'; the exit\n"
          "status is 1 if any result was wrong or any case failed to run.\n");
}

static void parse_args(int argc, char **argv, opts_t *o) {
  static const struct option lo[] = {
      {"quick", no_argument, NULL, 'q'},      {"json", required_argument, NULL, 'j'},
      {"threads", required_argument, NULL, 't'}, {"m", required_argument, NULL, 'm'},
      {"kn", required_argument, NULL, 'k'},   {"dtypes", required_argument, NULL, 'd'},
      {"seed", required_argument, NULL, 's'}, {"no-openblas", no_argument, NULL, 'B'},
      {"openblas-as-is", no_argument, NULL, 'A'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  const char *threads = NULL, *ms = NULL, *kns = NULL, *dtypes = NULL, *seed = NULL;
  int c;
  memset(o, 0, sizeof *o);
  o->openblas = true;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (c) {
    case 'q': o->quick = true; break;
    case 'j': o->json_path = optarg; break;
    case 't': threads = optarg; break;
    case 'm': ms = optarg; break;
    case 'k': kns = optarg; break;
    case 'd': dtypes = optarg; break;
    case 's': seed = optarg; break;
    case 'B': o->openblas = false; break;
    case 'A': o->openblas_as_is = true; break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "engine_bench: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    exit(2);
  }
  size_t tmp[MAX_LIST];
  o->nthreads = parse_list(threads ? threads : o->quick ? "1" : "1,2", tmp, MAX_LIST, "--threads");
  for (size_t i = 0; i < o->nthreads; i++) {
    if (tmp[i] > 1024) die("--threads: %zu is too many", tmp[i]);
    o->threads[i] = (unsigned)tmp[i];
  }
  o->nms = parse_list(ms ? ms : o->quick ? "1,32,128" : "1,8,32,128,512", o->ms, MAX_LIST, "--m");
  o->nkns = parse_list(kns ? kns : o->quick ? "256,1024" : "256,1024,4096", o->kns, MAX_LIST,
                       "--kn");
  if (dtypes) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", dtypes);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      int d;
      for (d = 0; d < D_COUNT && strcmp(tok, dname[d]) != 0; d++) {
      }
      if (d == D_COUNT) die("--dtypes: unknown dtype '%s' (expected int8, bf16 or fp32)", tok);
      o->dtype_on[d] = true;
    }
  } else {
    for (int d = 0; d < D_COUNT; d++) o->dtype_on[d] = true;
  }
  if (seed) {
    char *end;
    errno = 0;
    o->seed = strtoull(seed, &end, 0);
    if (*end || errno) die("--seed: expected an integer, got '%s'", seed);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o->seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
              ((uint64_t)getpid() << 32);
  }
  o->min_case_ns = o->quick ? 10e6 : 20e6;
  o->min_samples = o->quick ? 3 : 5;
  o->max_case_ns = o->quick ? 0.3e9 : 1e9;
  o->lat_calls = o->quick ? 5000 : 50000;
  o->retries = 2;
}

int main(int argc, char **argv) {
  opts_t o;
  parse_args(argc, argv, &o);
  openblas_own_choice(&o, argv);
  rng_state = o.seed;
  for (int i = 0; i < MAX_LANES; i++) g_samples[i] = xalloc(MAX_SAMPLES * sizeof(double));
  g_scratch = xalloc(MAX_SAMPLES * sizeof(double));
  setvbuf(stdout, NULL, _IOLBF, 0);

  double t_start = now_ns();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned max_threads = 1;
  for (size_t i = 0; i < o.nthreads; i++) {
    if (o.threads[i] > max_threads) max_threads = o.threads[i];
    if (ncpu > 0 && o.threads[i] > (unsigned)ncpu)
      printf("warning: %u threads on %ld online CPUs: results will be oversubscribed\n",
             o.threads[i], ncpu);
  }

  DNNL_TRY(dnnl_engine_create(&g_dnnl_eng, dnnl_cpu, 0));
  DNNL_TRY(dnnl_stream_create(&g_dnnl_stream, g_dnnl_eng, dnnl_stream_default_flags));

  signal(SIGALRM, on_watchdog);
  watchdog("start-up and the oneDNN thread probe");
  double probe = NAN, probe_gops = NAN, probe_1 = NAN;
  double probe_other_1 = 0, probe_other = 0;
  if (max_threads > 1) {
    probe_1 = dnnl_probe(&o, 1, &probe_other_1);
    probe_gops = dnnl_probe(&o, max_threads, &probe_other);
    probe = probe_gops / probe_1;
  }
  /* Engines after the probe, so that the probe is not disturbed by their threads. */
  engines_t E = {{0}};
  for (size_t i = 0; i < o.nthreads; i++) {
    tpu_engine_config_t cfg = {.threads = o.threads[i]};
    tpu_status_t st = tpu_engine_create(&cfg, &E.eng[i]);
    if (st != TPU_OK) die("tpu_engine_create(threads=%u): %s", o.threads[i], tpu_strerror(st));
  }
  tpu_engine_t *eng1 = NULL;
  {
    tpu_engine_config_t cfg = {.threads = 1};
    tpu_status_t st = tpu_engine_create(&cfg, &eng1);
    if (st != TPU_OK) die("tpu_engine_create(threads=1): %s", tpu_strerror(st));
  }
  tpu_engine_stats_t es;
  const char *isa = "unknown";
  if (tpu_engine_stats(eng1, &es) == TPU_OK && es.isa) isa = es.isa;

  char cpu[256];
  cpu_model(cpu, sizeof cpu);
  const dnnl_version_t *v = dnnl_version();
  const char *dnnl_isa = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
  printf("engine_bench  seed %" PRIu64 "%s\n", o.seed, o.quick ? "  (quick)" : "");
  printf("cpu           %s, %ld online CPUs\n", cpu, ncpu);
  printf("ours          isa %s\n", isa);
  printf("oneDNN        %d.%d.%d, effective isa %s, runtime %s\n", v->major, v->minor, v->patch,
         dnnl_isa, dnnl_runtime2str(v->cpu_runtime));
  printf("OpenBLAS      %s (core %s)\n", openblas_get_config(), openblas_get_corename());
  if (getenv("ENGINE_BENCH_OPENBLAS_DROPPED"))
    printf("              %s was set in the environment; dropped so that OpenBLAS picks its kernels "
           "for this CPU (--openblas-as-is keeps it)\n",
           getenv("ENGINE_BENCH_OPENBLAS_DROPPED"));
  print_tuning_env();
  if (max_threads > 1)
    printf("threads       oneDNN via omp_set_num_threads: fp32 128x1024x1024 %.1f GOPS at 1 "
           "thread, %.1f at %u (x%.2f)%s\n",
           probe_1, probe_gops, max_threads, probe,
           probe > 1.3 ? ""
           : (probe_other > NOISY_OTHER || probe_other_1 > NOISY_OTHER)
               ? "  (disturbed by other load)"
               : "  *** thread control has no visible effect");
  printf("timing        median of samples (each a batch of calls >= %.0f us); case >= %.0f ms and "
         ">= %u samples, cap %.1f s\n",
         SAMPLE_NS / 1e3, o.min_case_ns / 1e6, o.min_samples, o.max_case_ns / 1e9);
  printf("GOPS = 2*M*K*N / time; ratio = ours/oneDNN speed (> 1: ours faster); other = CPUs used\n"
         "by other processes while the row was timed. Left out of the geomeans: ! other > %.2f;\n"
         "~ oneDNN's or OpenBLAS's interleaved slices differ by more than x%.1f (the machine\n"
         "changed). * ours' slices differ that much while the anchors' do not (counted)\n\n",
         NOISY_OTHER, UNSTABLE_SPREAD);
  print_header_row();

  for (int d = 0; d < D_COUNT; d++) {
    if (!o.dtype_on[d]) continue;
    for (size_t i = 0; i < o.nkns; i++) run_block(&o, &E, d, o.kns[i]);
  }

  if (o.dtype_on[D_INT8]) run_latency(&o, eng1);
  if (max_threads > 1) {
    printf("\n");
    for (size_t i = 0; i < o.nthreads; i++)
      if (o.threads[i] == max_threads) {
        watchdog("the idle-engine check");
        idle_engine_check(&o, E.eng[i], max_threads, probe_gops, probe_other);
        break;
      }
  }

  printf("\nsummary: geomean of ours/oneDNN over correct, undisturbed rows (goals: >= 1.00 "
         "overall, >= 1.20 at M <= 32)\n");
  for (int d = 0; d < D_COUNT; d++) {
    if (!o.dtype_on[d]) continue;
    unsigned n_all, n_small;
    double all = geomean(d, false, SIZE_MAX, &n_all), small = geomean(d, false, 32, &n_small);
    char a_txt[16] = "   n/a", s_txt[16] = "   n/a";
    if (n_all) snprintf(a_txt, sizeof a_txt, "%6.2f", all);
    if (n_small) snprintf(s_txt, sizeof s_txt, "%6.2f", small);
    printf("  %-5s all %s (%u rows)   M <= 32 %s (%u rows)\n", dname[d], a_txt, n_all, s_txt,
           n_small);
  }
  if (o.dtype_on[D_FP32] && o.openblas) {
    unsigned nb;
    double gb = geomean(D_FP32, true, SIZE_MAX, &nb);
    char g_txt[16] = "   n/a";
    if (nb) snprintf(g_txt, sizeof g_txt, "%6.2f", gb);
    printf("  fp32 vs OpenBLAS %s (%u rows; goal >= 1.00)\n", g_txt, nb);
  }
  for (size_t i = 0; i < g_nlat; i++)
    if (strcmp(g_lat[i].lib, "ours") == 0 && strcmp(g_lat[i].name, "int8 32x32x32") == 0)
      printf("  int8 32x32x32 latency: median %.3f us (goal < 0.4), p99 %.3f us (goal < 1)\n",
             g_lat[i].median_ns / 1e3, g_lat[i].p99_ns / 1e3);
  unsigned noisy = 0;
  for (size_t i = 0; i < g_nrows; i++)
    if (!row_trusted(&g_rows[i])) noisy++;
  if (noisy)
    printf("  %u of %zu rows were disturbed (marked ! or ~) and are left out of the geomeans: "
           "rerun on a quiet machine\n",
           noisy, g_nrows);
  unsigned shaky = 0;
  for (size_t i = 0; i < g_nrows; i++)
    if (*row_flag(&g_rows[i]) == '*') shaky++;
  if (shaky)
    printf("  %u rows marked *: ours ran at uneven speed from slice to slice while the anchors "
           "did not (counted)\n",
           shaky);
  printf("  wall time %.1f s\n", (now_ns() - t_start) / 1e9);

  watchdog("writing JSON and freeing");
  if (o.json_path) write_json(&o, cpu, isa, dnnl_isa, probe);

  for (size_t i = 0; i < o.nthreads; i++) tpu_engine_free(E.eng[i]);
  tpu_engine_free(eng1);
  dnnl_stream_destroy(g_dnnl_stream);
  dnnl_engine_destroy(g_dnnl_eng);

  alarm(0);
  if (g_failures) {
    printf("*** %u FAILURE(S): see the lines starting with *** above\n", g_failures);
    fflush(stdout);
    fprintf(stderr, "engine_bench: %u failure(s)\n", g_failures);
    fflush(stderr);
  }
  printf("geomean ratio vs oneDNN:");
  for (int d = 0; d < D_COUNT; d++) {
    double g = o.dtype_on[d] ? geomean(d, false, SIZE_MAX, NULL) : NAN;
    if (isfinite(g)) printf(" %s %.2f", dname[d], g);
    else printf(" %s n/a", dname[d]);
  }
  printf("\n");
  for (int i = 0; i < MAX_LANES; i++) free(g_samples[i]);
  free(g_scratch);
  free(g_rows);
  return g_failures ? 1 : 0;

fail:
  die("oneDNN could not be initialised");
}
