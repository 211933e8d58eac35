/*
 * stats.h - the server's counters: requests by status, queue and compute time, batch sizes.
 *
 * DESIGN
 * Plain C11 atomics updated with relaxed ordering from any thread (I/O threads, batchers, the
 * MatMul pool); nothing here locks or allocates. A counter is only ever incremented, so readers
 * (the log dump today, the metrics page later) see monotonic values. Histograms have fixed
 * bucket bounds, Prometheus-style: count[i] counts observations ≤ bounds[i] (not cumulative
 * here; the exporter accumulates), the last slot counts the rest (+Inf).
 */
#ifndef TPU_STATS_H
#define TPU_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu_status.h"

/* Status codes: proto/tpu_status.h, the one table (tpu_code_name and friends). */

/* Microsecond histogram bounds (queue and compute time). */
#define TPU_HIST_US_NBOUNDS 16
extern const uint64_t tpu_hist_us_bounds[TPU_HIST_US_NBOUNDS];
/* Batch-size histogram bounds (real rows per engine call). */
#define TPU_HIST_ROWS_NBOUNDS 11
extern const uint64_t tpu_hist_rows_bounds[TPU_HIST_ROWS_NBOUNDS];

typedef struct {
  _Atomic uint64_t count[TPU_HIST_US_NBOUNDS + 1]; /* last slot: above every bound */
  _Atomic uint64_t sum;                            /* sum of observed values */
  _Atomic uint64_t n;                              /* observations */
} tpu_hist_t;

/* Records one observation in a histogram with the given bounds (nbounds ≤ TPU_HIST_US_NBOUNDS). */
void tpu_hist_observe(tpu_hist_t *h, const uint64_t *bounds, size_t nbounds, uint64_t value);

/* Buckets a model's per-bucket counters hold (the batcher's limit). */
#define TPU_STATS_MAX_BUCKETS 64

/* Counters of one model version (owned by its batcher). */
typedef struct {
  _Atomic uint64_t requests[TPU_CODE_COUNT]; /* infer requests answered, by status */
  _Atomic uint64_t batches;                  /* engine calls */
  _Atomic uint64_t rows_computed;            /* real rows sent to the engine */
  _Atomic uint64_t padding_rows;             /* rows added to reach a bucket */
  tpu_hist_t queue_us;                       /* enqueue → first row taken, microseconds */
  tpu_hist_t compute_us;                     /* one engine call, microseconds */
  tpu_hist_t batch_rows;                     /* real rows per engine call (rows bounds) */
  tpu_hist_t request_us;                     /* infer received → answered, microseconds */
  _Atomic uint64_t macs;                     /* multiply-accumulates of its engine calls (padded) */
  _Atomic uint64_t sim_cycles;               /* cycles the modelled systolic array needs for them */
  _Atomic uint64_t sim_slots;                /* sim_cycles × array rows × cols: MAC slots offered */
  /* Triton's statistics extension (ModelStatistics): ModelInfer answers and their summed
   * latency (received → answered, microseconds), OK and not; the batcher's copies of rows into
   * and out of the engine's buffers; the wall-clock time of the last batch; each bucket's
   * engine calls and times (index: the model's bucket). */
  _Atomic uint64_t infer_ok, infer_ok_us, infer_fail, infer_fail_us;
  _Atomic uint64_t input_us, output_us;
  _Atomic uint64_t last_infer_ms;            /* milliseconds since the epoch; 0: none yet */
  _Atomic uint64_t bucket_batches[TPU_STATS_MAX_BUCKETS];
  _Atomic uint64_t bucket_input_us[TPU_STATS_MAX_BUCKETS];
  _Atomic uint64_t bucket_compute_us[TPU_STATS_MAX_BUCKETS];
  _Atomic uint64_t bucket_output_us[TPU_STATS_MAX_BUCKETS];
} tpu_model_stats_t;

/* HTTP status codes counted by the HTTP endpoint; the last slot counts any other code. */
#define TPU_HTTP_STATUS_CODES {200, 400, 404, 405, 408, 413, 431, 500, 503, 504}
#define TPU_HTTP_NSTATUS 11

/* accept() failures, by reason: the errno values that mean "no resources", and the rest. */
enum { TPU_ACCEPT_NATIVE = 0, TPU_ACCEPT_HTTP = 1 };
enum { TPU_ACCEPT_EMFILE, TPU_ACCEPT_ENFILE, TPU_ACCEPT_ENOBUFS, TPU_ACCEPT_ENOMEM,
       TPU_ACCEPT_EOTHER, TPU_ACCEPT_NREASONS };
/* "EMFILE", ..., "other": the reason label of an accept_errors slot. */
const char *tpu_accept_reason_name(int reason);

/* Server-wide counters. */
typedef struct {
  _Atomic uint64_t requests[TPU_CODE_COUNT]; /* every answered request, any method */
  _Atomic uint64_t connections_open;         /* gauge: currently open */
  _Atomic uint64_t connections_accepted;     /* accepted and handed to an I/O thread */
  _Atomic uint64_t connections_rejected;     /* closed at accept (max-connections, draining) */
  _Atomic uint64_t bad_frames;               /* frames that closed their connection */
  _Atomic uint64_t matmuls;                  /* MatMul calls computed */
  tpu_hist_t matmul_us;                      /* MatMul compute time, microseconds */
  /* HTTP endpoint (http.c). */
  _Atomic uint64_t http_connections_accepted; /* accepted by an I/O thread (http.c) */
  _Atomic uint64_t http_connections_open;    /* gauge: open, counted from accept */
  _Atomic uint64_t http_connections_rejected; /* refused at accept (max-connections over both ports) */
  _Atomic uint64_t http_responses[TPU_HTTP_NSTATUS]; /* by status, see tpu_http_status_index */
  tpu_hist_t http_request_us;                /* every HTTP request, received → reply, us */
  /* accept() failures by port (TPU_ACCEPT_NATIVE, _HTTP) and reason (TPU_ACCEPT_E*). */
  _Atomic uint64_t accept_errors[2][TPU_ACCEPT_NREASONS];
  /* Gauge: bytes of answers not yet taken by the kernel (every connection, both ports) plus the
   * answers reserved for calls in flight; --max-buffered-bytes bounds it for new calls. */
  _Atomic uint64_t buffered_bytes;
  _Atomic uint64_t buffered_refused;         /* calls refused because of that bound */
} tpu_stats_t;

/* Process-wide server counters. */
extern tpu_stats_t tpu_stats;

static inline void tpu_stats_inc(_Atomic uint64_t *c, uint64_t by) {
  atomic_fetch_add_explicit(c, by, memory_order_relaxed);
}
static inline uint64_t tpu_stats_get(_Atomic uint64_t *c) {
  return atomic_load_explicit(c, memory_order_relaxed);
}
static inline void tpu_stats_dec(_Atomic uint64_t *c) {
  atomic_fetch_sub_explicit(c, 1, memory_order_relaxed);
}
static inline void tpu_stats_sub(_Atomic uint64_t *c, uint64_t by) {
  atomic_fetch_sub_explicit(c, by, memory_order_relaxed);
}

/* Slot of an HTTP status code in tpu_stats.http_responses (TPU_HTTP_NSTATUS - 1: other). */
size_t tpu_http_status_index(int status);
/* The status code counted in a slot of http_responses (0 for the "other" slot). */
int tpu_http_status_at(size_t index);

/* Formats a one-line summary of a model version's counters into buf (for the log). */
void tpu_stats_model_format(const tpu_model_stats_t *s, char *buf, size_t len);
/* Formats a one-line summary of the server counters. */
void tpu_stats_format(char *buf, size_t len);

#endif /* TPU_STATS_H */
