/*
 * metrics.h - Prometheus text exposition (format 0.0.4) of tpud's counters.
 *
 * DESIGN
 * Two layers. The writer (tpu_metrics_*) appends well-formed families to a growable text buffer
 * (tpu_buf_t): HELP and TYPE once per family, escaped label values, histograms as cumulative
 * `_bucket{le=..}` lines ending with +Inf, then `_sum` and `_count` (with `_count` equal to the
 * +Inf bucket, since both come from the same read of the bucket counters). It knows nothing of
 * tpud and is unit tested on its own. The renderer (tpu__metrics_render, metrics.c) walks
 * stats.c's counters, the model table and the engine and writes every `tpud_` family; it reads
 * relaxed atomics only and takes no lock on any hot path (queue depth takes the batcher's lock
 * briefly, once per scrape).
 * Times are exported in seconds (Prometheus base units), counters end in `_total`.
 * The page also carries the standard process_* families every Prometheus client library
 * exports (names, types and units as client_golang's process collector), read from /proc at
 * each scrape (a few small reads, on the I/O thread that answers the scrape).
 */
#ifndef TPU_METRICS_H
#define TPU_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "stats.h"
#include "tpu_text.h"

/* The page is written into a tpu_buf_t (tpu_text.h): zero-initialize it, check `oom` once the
 * page is written. */

/* One label: name (a Prometheus label name) and value (escaped on output). */
typedef struct {
  const char *name;
  const char *value;
} tpu_mlabel_t;

/* Writes "# HELP name help" and "# TYPE name type" (type: counter, gauge, histogram). */
void tpu_metrics_family(tpu_buf_t *b, const char *name, const char *type, const char *help);

/* Writes one sample line `name{labels} value`; nlabels may be 0. Integers are written exactly. */
void tpu_metrics_u64(tpu_buf_t *b, const char *name, const tpu_mlabel_t *labels, size_t nlabels,
                     uint64_t value);
void tpu_metrics_double(tpu_buf_t *b, const char *name, const tpu_mlabel_t *labels,
                        size_t nlabels, double value);

/*
 * Writes the samples of histogram `h` (whose bucket i counts values ≤ bounds[i], the last slot the
 * rest) as name_bucket{labels,le="bounds[i]/divisor"}, le="+Inf", name_sum (sum/divisor) and
 * name_count. divisor converts units (1e6 for microseconds to seconds; 1 for rows); dividing
 * keeps decimal bounds exact in print ("5e-05", not "4.9999999999999996e-05").
 */
void tpu_metrics_histogram(tpu_buf_t *b, const char *name, const tpu_mlabel_t *labels,
                           size_t nlabels, const tpu_hist_t *h, const uint64_t *bounds,
                           size_t nbounds, double divisor);

/* The process figures behind the standard process_* families (Prometheus client libraries'
 * names): from /proc/self/stat, /proc/stat, /proc/self/fd and RLIMIT_NOFILE. */
typedef struct {
  double cpu_seconds;       /* user + system CPU time */
  uint64_t resident_bytes;  /* resident set size */
  uint64_t virtual_bytes;   /* virtual memory size */
  double start_time;        /* seconds since the Unix epoch */
  uint64_t open_fds;        /* open file descriptors */
  uint64_t max_fds;         /* the soft RLIMIT_NOFILE */
} tpu_process_stats_t;

/* Parses the contents of /proc/<pid>/stat (proc(5); the command name in parentheses may hold
 * spaces and parentheses): utime+stime in ticks, starttime in ticks after boot, vsize in
 * bytes, rss in pages. 0 on success, -1 on a malformed text. Pure, for tests. */
int tpu_metrics_parse_proc_stat(const char *text, uint64_t *cpu_ticks, uint64_t *start_ticks,
                                uint64_t *vsize_bytes, uint64_t *rss_pages);

/* Reads this process's figures from /proc; fields it cannot read are 0. -1 when
 * /proc/self/stat cannot be read or parsed (no process_* families are written then). */
int tpu_metrics_process_stats(tpu_process_stats_t *out);

/* Appends the process_* families (cpu_seconds_total, resident_memory_bytes,
 * virtual_memory_bytes, start_time_seconds, open_fds, max_fds) of `ps`. */
void tpu_metrics_process(tpu_buf_t *b, const tpu_process_stats_t *ps);

struct tpu_server;
/* Appends every tpud_ metric of the running server, then the process_* ones (any thread;
 * reads counters and /proc only). */
void tpu__metrics_render(struct tpu_server *srv, tpu_buf_t *b);

#endif /* TPU_METRICS_H */
