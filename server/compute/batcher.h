/*
 * batcher.h - the dynamic batcher of one model version.
 *
 * DESIGN
 * Requests of R rows each are queued FIFO; one batcher thread concatenates rows from the head of
 * the queue into a batch of up to cap = min(max_batch_size, largest bucket) rows, waiting at most
 * max_queue_delay_us after the oldest queued row arrived for the batch to fill. The batch is
 * padded with zero rows to the smallest bucket that holds it (every engine call has one of the
 * model's static shapes), run with one `run` call, and the output rows are scattered back. Rows
 * of one request may span several batches (a request larger than the cap is split; any request
 * may be split at a batch boundary to keep batches full): it completes when its last row is
 * computed. The engine quantizes per row, so a row's result never depends on its batch-mates.
 *
 * Admission is bounded: a submit that would put more than queue_rows rows in the queue is
 * refused at once with RESOURCE_EXHAUSTED. Before any row of a request is taken into a batch the
 * batcher checks its cancel flag (set by the owning I/O thread when the client disconnects:
 * CANCELLED) and its deadline (DEADLINE_EXCEEDED); such requests are completed without compute.
 *
 * Completion calls `done` on the batcher thread, with no lock held; `done` must not block (the
 * server pushes the request onto its I/O thread's queue). The batcher never touches a socket.
 *
 * Lock rules: `mu` guards the queue, queued_rows and the stop flags; it is never held while
 * running the model or calling `done`. Request fields after `link` are written by the batcher
 * thread only, and read by the submitter only after `done`.
 */
#ifndef TPU_BATCHER_H
#define TPU_BATCHER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fifo.h" /* tpu_qnode_t */
#include "stats.h"

typedef struct tpu_batcher tpu_batcher_t;
typedef struct tpu_batch_req tpu_batch_req_t;

/* Runs one padded batch: in holds bucket_rows × in_row_bytes, out receives bucket_rows ×
 * out_row_bytes; want is the union of the batch's requests' want (the model's on-request
 * outputs to compute). Returns 0, or non-zero with a message in err. */
typedef int (*tpu_batch_run_fn)(void *ctx, size_t bucket_rows, const void *in, void *out,
                                uint64_t want, char *err, size_t errlen);
/* Called once per accepted request when it is complete (req->code says how). */
typedef void (*tpu_batch_done_fn)(tpu_batch_req_t *req, void *ctx);

struct tpu_batch_req {
  tpu_qnode_t link; /* the batcher's queue */
  /* Set by the submitter. */
  size_t rows;           /* ≥ 1 */
  const void *in;        /* rows × in_row_bytes, alive until done */
  void *out;             /* rows × out_row_bytes, written by the batcher */
  uint64_t deadline_us;  /* tpu_now_us() value after which it must not start; 0 = none */
  atomic_int *cancel;    /* non-zero: the client is gone, do not compute; may be NULL */
  void *user;            /* the submitter's */
  tpu_batch_done_fn done; /* its completion; NULL: the batcher's (config) */
  void *done_ctx;
  uint64_t want;         /* passed to run (or-ed over a batch): on-request outputs it needs */
  /* Set by the batcher before done. */
  int code;              /* tpu_code_t: OK, CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL */
  char msg[512];         /* why, when code is not OK */
  uint64_t queue_us;     /* microseconds from submit until its first row was taken */
  uint64_t compute_us;   /* microseconds of the engine calls that computed its rows */
  uint64_t batch_id;     /* id of the (last) batch it was computed in */
  size_t bucket;         /* bucket size of that batch */
  /* Private to the batcher. */
  size_t taken, computed;
  uint64_t enqueued_us;
};

typedef struct {
  const char *name;            /* for messages, e.g. "model 'digits' version 1" */
  size_t max_batch_size;       /* rows per engine call, ≥ 1 */
  const size_t *buckets;       /* strictly increasing; NULL/0: one bucket of max_batch_size */
  size_t nbuckets;
  uint64_t max_queue_delay_us; /* microseconds the oldest row may wait for the batch to fill */
  size_t queue_rows;           /* rows that may be queued, ≥ 1 */
  size_t in_row_bytes, out_row_bytes;
  tpu_batch_run_fn run;
  void *run_ctx;
  tpu_batch_done_fn done;      /* for requests that name none (may be NULL when all do) */
  void *done_ctx;
  tpu_model_stats_t *stats;    /* may be NULL */
} tpu_batcher_config_t;

/* Creates a batcher and starts its thread. Returns 0 or -1 (errno). */
int tpu_batcher_create(const tpu_batcher_config_t *cfg, tpu_batcher_t **out);

/* Queues a request. Returns TPU_CODE_OK (done will be called later), or RESOURCE_EXHAUSTED (queue
 * full) / UNAVAILABLE (stopping) / INVALID_ARGUMENT (0 rows) with msg set, in which case done is
 * never called for it. Any thread. */
int tpu_batcher_submit(tpu_batcher_t *b, tpu_batch_req_t *req, char *msg, size_t msglen);

/* Stops accepting, then either computes everything queued (abort = 0) or completes it with
 * UNAVAILABLE without compute (abort = 1), and joins the thread. Idempotent. */
void tpu_batcher_stop(tpu_batcher_t *b, int abort);

/* tpu_batcher_stop, with `why` (e.g. "model 'x' version 2 is being unloaded") as the message of
 * the requests it fails or refuses instead of "server is shutting down". `why` is taken only by
 * the first stop; NULL keeps the default. */
void tpu_batcher_stop_why(tpu_batcher_t *b, int abort, const char *why);

/* Stops (abort) if needed and frees; accepts NULL. */
void tpu_batcher_free(tpu_batcher_t *b);

/* Rows queued and not yet taken into a batch. */
size_t tpu_batcher_queued_rows(tpu_batcher_t *b);

/* The bucket a batch of n rows is padded to: the smallest bucket ≥ n (0 if none). Pure. */
size_t tpu_batcher_bucket_for(const size_t *buckets, size_t nbuckets, size_t n);

#endif /* TPU_BATCHER_H */
