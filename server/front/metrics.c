/*
 * metrics.c - the Prometheus text writer and the renderer of every tpud_ metric.
 *
 * DESIGN
 * See metrics.h. The renderer runs on an I/O thread when GET /metrics arrives; it only reads
 * counters (relaxed atomics) and the immutable model table, so a scrape never slows a request.
 * Families are written in a fixed order, each family's HELP/TYPE once followed by all its
 * samples (the exposition format requires a family's samples to be contiguous).
 *
 * The audit log's counters (tpud_audit_*) come from render_audit(), only when --audit-log is set.
 * The process_* families come last, from /proc (tpu_metrics_process_stats).
 */
#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "audit_wire.h"
#include "call.h"
#include "server_int.h"

void tpu_metrics_family(tpu_buf_t *b, const char *name, const char *type, const char *help) {
  /* HELP text escapes backslash and newline; ours are literals without either. */
  tpu_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values escape backslash, double quote and newline. */
static void put_escaped(tpu_buf_t *b, const char *s) {
  size_t run = 0, n = strlen(s);
  for (size_t i = 0; i < n; i++) {
    const char *esc = s[i] == '\\' ? "\\\\" : s[i] == '"' ? "\\\"" : s[i] == '\n' ? "\\n" : NULL;
    if (!esc) continue;
    tpu_buf_add(b, s + run, i - run);
    tpu_buf_add(b, esc, 2);
    run = i + 1;
  }
  tpu_buf_add(b, s + run, n - run);
}

static void put_labels(tpu_buf_t *b, const tpu_mlabel_t *labels, size_t nlabels,
                       const char *extra_name, const char *extra_value) {
  if (!nlabels && !extra_name) return;
  tpu_buf_add(b, "{", 1);
  for (size_t i = 0; i < nlabels; i++) {
    if (i) tpu_buf_add(b, ",", 1);
    tpu_buf_printf(b, "%s=\"", labels[i].name);
    put_escaped(b, labels[i].value ? labels[i].value : "");
    tpu_buf_add(b, "\"", 1);
  }
  if (extra_name) {
    if (nlabels) tpu_buf_add(b, ",", 1);
    tpu_buf_printf(b, "%s=\"%s\"", extra_name, extra_value);
  }
  tpu_buf_add(b, "}", 1);
}

void tpu_metrics_u64(tpu_buf_t *b, const char *name, const tpu_mlabel_t *labels, size_t nlabels,
                     uint64_t value) {
  tpu_buf_adds(b, name);
  put_labels(b, labels, nlabels, NULL, NULL);
  tpu_buf_printf(b, " %llu\n", (unsigned long long)value);
}

static void fmt_double(char *buf, size_t len, double v) {
  if (isnan(v))
    snprintf(buf, len, "NaN");
  else if (isinf(v))
    snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
  else
    snprintf(buf, len, "%.17g", v);
  /* Shorter when it reads back the same: 0.001 rather than 0.0010000000000000000208. */
  if (isfinite(v)) {
    char shorter[40];
    for (int p = 6; p < 17; p++) {
      snprintf(shorter, sizeof shorter, "%.*g", p, v);
      if (strtod(shorter, NULL) == v) {
        snprintf(buf, len, "%s", shorter);
        break;
      }
    }
  }
}

void tpu_metrics_double(tpu_buf_t *b, const char *name, const tpu_mlabel_t *labels,
                        size_t nlabels, double value) {
  char v[40];
  fmt_double(v, sizeof v, value);
  tpu_buf_adds(b, name);
  put_labels(b, labels, nlabels, NULL, NULL);
  tpu_buf_printf(b, " %s\n", v);
}

void tpu_metrics_histogram(tpu_buf_t *b, const char *name, const tpu_mlabel_t *labels,
                           size_t nlabels, const tpu_hist_t *h, const uint64_t *bounds,
                           size_t nbounds, double divisor) {
  char bucket[160], le[40];
  snprintf(bucket, sizeof bucket, "%s_bucket", name);
  uint64_t cum = 0;
  for (size_t i = 0; i <= nbounds; i++) {
    cum += atomic_load_explicit((_Atomic uint64_t *)&h->count[i], memory_order_relaxed);
    if (i < nbounds)
      fmt_double(le, sizeof le, (double)bounds[i] / divisor);
    else
      snprintf(le, sizeof le, "+Inf");
    tpu_buf_adds(b, bucket);
    put_labels(b, labels, nlabels, "le", le);
    tpu_buf_printf(b, " %llu\n", (unsigned long long)cum);
  }
  uint64_t sum = atomic_load_explicit((_Atomic uint64_t *)&h->sum, memory_order_relaxed);
  char v[40];
  fmt_double(v, sizeof v, (double)sum / divisor);
  tpu_buf_printf(b, "%s_sum", name);
  put_labels(b, labels, nlabels, NULL, NULL);
  tpu_buf_printf(b, " %s\n", v);
  tpu_buf_printf(b, "%s_count", name);
  put_labels(b, labels, nlabels, NULL, NULL);
  tpu_buf_printf(b, " %llu\n", (unsigned long long)cum); /* == the +Inf bucket, by construction */
}

/* ---- process_* ---- */

/* Strict decimal at *p (after spaces); advances *p. -1 when there is none or it overflows. */
static int next_u64(const char **p, uint64_t *out) {
  const char *s = *p;
  while (*s == ' ') s++;
  if (*s < '0' || *s > '9') return -1;
  uint64_t v = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return -1;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  if (*s != ' ' && *s != '\n' && *s != 0) return -1;
  *p = s;
  *out = v;
  return 0;
}

/* Skips one space-separated field (which may be negative or a state letter). */
static int skip_field(const char **p) {
  const char *s = *p;
  while (*s == ' ') s++;
  if (!*s || *s == '\n') return -1;
  while (*s && *s != ' ' && *s != '\n') s++;
  *p = s;
  return 0;
}

int tpu_metrics_parse_proc_stat(const char *text, uint64_t *cpu_ticks, uint64_t *start_ticks,
                                uint64_t *vsize_bytes, uint64_t *rss_pages) {
  /* "pid (comm) state ppid ...": the fields after comm, counted from 3 (state), proc(5). */
  const char *p = strrchr(text, ')');
  if (!p || !strchr(text, '(') || strchr(text, '(') > p) return -1;
  p++;
  uint64_t utime = 0, stime = 0, v;
  for (int field = 3; field <= 24; field++) {
    if (field == 14 || field == 15 || field == 22 || field == 23 || field == 24) {
      if (next_u64(&p, &v) != 0) return -1;
      if (field == 14) utime = v;
      else if (field == 15) stime = v;
      else if (field == 22) *start_ticks = v;
      else if (field == 23) *vsize_bytes = v;
      else *rss_pages = v;
    } else if (skip_field(&p) != 0) {
      return -1;
    }
  }
  if (utime > UINT64_MAX - stime) return -1;
  *cpu_ticks = utime + stime;
  return 0;
}

/* Reads a small /proc file into buf (NUL-terminated); -1 when it cannot. */
static int read_small(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < len) {
    ssize_t r = read(fd, buf + n, len - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  return n ? 0 : -1;
}

int tpu_metrics_process_stats(tpu_process_stats_t *out) {
  memset(out, 0, sizeof *out);
  char buf[8192];
  uint64_t cpu, start, vsize, rss;
  if (read_small("/proc/self/stat", buf, sizeof buf) != 0 ||
      tpu_metrics_parse_proc_stat(buf, &cpu, &start, &vsize, &rss) != 0)
    return -1;
  long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  if (tick <= 0) tick = 100;
  if (page <= 0) page = 4096;
  out->cpu_seconds = (double)cpu / (double)tick;
  out->resident_bytes = rss * (uint64_t)page;
  out->virtual_bytes = vsize;
  /* Start time: the boot time (/proc/stat "btime", seconds since the epoch) plus starttime. */
  if (read_small("/proc/stat", buf, sizeof buf) == 0) {
    const char *bt = strstr(buf, "\nbtime ");
    uint64_t btime;
    if (bt && (bt += 7, next_u64(&bt, &btime) == 0))
      out->start_time = (double)btime + (double)start / (double)tick;
  }
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    uint64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') n++;
    closedir(d);
    out->open_fds = n ? n - 1 : 0; /* not the descriptor of the listing itself */
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
    out->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
  return 0;
}

void tpu_metrics_process(tpu_buf_t *b, const tpu_process_stats_t *ps) {
  tpu_metrics_family(b, "process_cpu_seconds_total", "counter",
                     "Total user and system CPU time spent in seconds.");
  tpu_metrics_double(b, "process_cpu_seconds_total", NULL, 0, ps->cpu_seconds);
  tpu_metrics_family(b, "process_resident_memory_bytes", "gauge",
                     "Resident memory size in bytes.");
  tpu_metrics_u64(b, "process_resident_memory_bytes", NULL, 0, ps->resident_bytes);
  tpu_metrics_family(b, "process_virtual_memory_bytes", "gauge",
                     "Virtual memory size in bytes.");
  tpu_metrics_u64(b, "process_virtual_memory_bytes", NULL, 0, ps->virtual_bytes);
  tpu_metrics_family(b, "process_start_time_seconds", "gauge",
                     "Start time of the process since unix epoch in seconds.");
  tpu_metrics_double(b, "process_start_time_seconds", NULL, 0, ps->start_time);
  tpu_metrics_family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
  tpu_metrics_u64(b, "process_open_fds", NULL, 0, ps->open_fds);
  tpu_metrics_family(b, "process_max_fds", "gauge",
                     "Maximum number of open file descriptors.");
  tpu_metrics_u64(b, "process_max_fds", NULL, 0, ps->max_fds);
}

/* ---- the renderer ---- */

static uint64_t get(const _Atomic uint64_t *c) {
  return atomic_load_explicit((_Atomic uint64_t *)c, memory_order_relaxed);
}

static const char *state_name(int state) {
  switch (state) {
  case TPUD__MODEL_STATE__MODEL_STATE_READY: return "READY";
  case TPUD__MODEL_STATE__MODEL_STATE_FAILED: return "FAILED";
  default: return "UNAVAILABLE";
  }
}

/* A serving instance (status-only entries of the table have no model or batcher). */
static int serving(const tpu__model_t *m) {
  return m->state == TPUD__MODEL_STATE__MODEL_STATE_READY && m->model && m->batcher;
}

/* A family with one sample per ready model version: value(m). */
typedef uint64_t (*model_u64_fn)(tpu__model_t *m);
static uint64_t m_batches(tpu__model_t *m) { return get(&m->stats.batches); }
static uint64_t m_rows(tpu__model_t *m) { return get(&m->stats.rows_computed); }
static uint64_t m_padding(tpu__model_t *m) { return get(&m->stats.padding_rows); }
static uint64_t m_macs(tpu__model_t *m) { return get(&m->stats.macs); }
static uint64_t m_cycles(tpu__model_t *m) { return get(&m->stats.sim_cycles); }
static uint64_t m_queue(tpu__model_t *m) { return m->batcher ? tpu_batcher_queued_rows(m->batcher) : 0; }
static uint64_t m_memory(tpu__model_t *m) { return m->memory_bytes; }

static void model_family(tpu_buf_t *b, tpu__models_t *t, const char *name, const char *type,
                         const char *help, model_u64_fn fn) {
  tpu_metrics_family(b, name, type, help);
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (!serving(m)) continue;
    tpu_mlabel_t l[] = {{"model", m->name}, {"version", m->version_str}};
    tpu_metrics_u64(b, name, l, 2, fn(m));
  }
}

typedef enum { H_REQUEST, H_QUEUE, H_COMPUTE, H_ROWS } hist_kind_t;

static void model_hist(tpu_buf_t *b, tpu__models_t *t, const char *name, const char *help,
                       hist_kind_t kind) {
  tpu_metrics_family(b, name, "histogram", help);
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (!serving(m)) continue;
    tpu_mlabel_t l[] = {{"model", m->name}, {"version", m->version_str}};
    const tpu_hist_t *h = kind == H_REQUEST ? &m->stats.request_us
                          : kind == H_QUEUE ? &m->stats.queue_us
                          : kind == H_COMPUTE ? &m->stats.compute_us
                                              : &m->stats.batch_rows;
    if (kind == H_ROWS)
      tpu_metrics_histogram(b, name, l, 2, h, tpu_hist_rows_bounds, TPU_HIST_ROWS_NBOUNDS, 1);
    else
      tpu_metrics_histogram(b, name, l, 2, h, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 1e6);
  }
}

/* The audit log's counters (audit_wire.c); none when --audit-log is not given. */
static void render_audit(tpu_buf_t *b, tpu_server_t *srv) {
  tpu_audit_t *a = tpu__audit_enter(srv);
  if (!a) return;
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  int capturing = tpu_audit_capturing(a);
  tpu_pstore_stats_t ps;
  tpu_audit_payload_stats(a, &ps);
  tpu__audit_leave(srv);
  static const struct {
    const char *name, *type, *help;
  } fam[] = {
      {"tpud_audit_records_written_total", "counter", "audit records written to the log"},
      {"tpud_audit_records_lost_total", "counter",
       "audit records refused or dropped because the log could not be written"},
      {"tpud_audit_bytes_total", "counter", "bytes appended to the audit log, all files"},
      {"tpud_audit_fsyncs_total", "counter", "fdatasync calls of the audit log that succeeded"},
      {"tpud_audit_failed", "gauge",
       "1 while the audit log cannot be written (fail-closed: requests get UNAVAILABLE)"},
      {"tpud_audit_records_pending", "gauge",
       "audit records submitted and not yet written (fail-open: answered, lost if never written)"},
      {"tpud_audit_files_deleted_total", "counter",
       "times the audit log file was found deleted while open (a gap record says which seqs)"},
  };
  uint64_t v[] = {st.records_written, st.records_lost, st.bytes_written, st.fsyncs,
                  (uint64_t)st.failed, st.queued, st.files_deleted};
  for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
    tpu_metrics_family(b, fam[i].name, fam[i].type, fam[i].help);
    tpu_metrics_u64(b, fam[i].name, NULL, 0, v[i]);
  }
  if (!capturing) return;
  static const struct {
    const char *name, *type, *help;
  } pfam[] = {
      {"tpud_payload_entries_total", "counter",
       "request payloads (input and output tensors) written to the payload store"},
      {"tpud_payload_bytes", "gauge", "bytes the payload store holds (--payload-dir)"},
      {"tpud_payload_files_deleted_total", "counter",
       "payload files deleted by retention (--payload-max-bytes, --payload-max-age)"},
      {"tpud_payload_bytes_deleted_total", "counter", "bytes of the payload files deleted"},
  };
  uint64_t pv[] = {ps.entries, ps.bytes, ps.files_deleted, ps.bytes_deleted};
  for (size_t i = 0; i < sizeof pfam / sizeof pfam[0]; i++) {
    tpu_metrics_family(b, pfam[i].name, pfam[i].type, pfam[i].help);
    tpu_metrics_u64(b, pfam[i].name, NULL, 0, pv[i]);
  }
}

void tpu__metrics_render(tpu_server_t *srv, tpu_buf_t *b) {
  tpu_stats_t *s = &tpu_stats;
  tpu_engine_stats_t es;
  memset(&es, 0, sizeof es);
  tpu_engine_stats(srv->engine, &es);
  tpu__models_t *t = tpu__models_acquire(srv); /* one consistent view of the model table */

  tpu_metrics_family(b, "tpud_build_info", "gauge", "tpud build: version (always 1)");
  tpu_mlabel_t bl[] = {{"version", TPUD_SERVER_VERSION}, {"compiler", __VERSION__}};
  tpu_metrics_u64(b, "tpud_build_info", bl, 2, 1);

  /* Requests, both protocols, by gRPC status name. */
  tpu_metrics_family(b, "tpud_requests_total", "counter",
                     "requests answered (native and HTTP infer), by gRPC status");
  for (int c = 0; c < TPU_CODE_COUNT; c++) {
    uint64_t v = get(&s->requests[c]);
    if (!v && c != TPU_CODE_OK) continue;
    tpu_mlabel_t l[] = {{"code", tpu_code_name(c)}};
    tpu_metrics_u64(b, "tpud_requests_total", l, 1, v);
  }
  tpu_metrics_family(b, "tpud_model_requests_total", "counter",
                     "infer requests answered per model version, by gRPC status");
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (!serving(m)) continue;
    for (int c = 0; c < TPU_CODE_COUNT; c++) {
      uint64_t v = get(&m->stats.requests[c]);
      if (!v && c != TPU_CODE_OK) continue;
      tpu_mlabel_t l[] = {{"model", m->name}, {"version", m->version_str},
                          {"code", tpu_code_name(c)}};
      tpu_metrics_u64(b, "tpud_model_requests_total", l, 3, v);
    }
  }
  tpu_metrics_family(b, "tpud_inflight_requests", "gauge",
                     "requests handed to compute and not yet answered");
  tpu_metrics_u64(b, "tpud_inflight_requests", NULL, 0, get(&srv->inflight));

  model_hist(b, t, "tpud_model_request_duration_seconds",
             "infer request latency in the server, received to answered", H_REQUEST);
  model_hist(b, t, "tpud_model_queue_duration_seconds",
             "time a request waited in the batcher queue before its first row was taken",
             H_QUEUE);
  model_hist(b, t, "tpud_model_compute_duration_seconds", "duration of one engine call (batch)",
             H_COMPUTE);
  model_hist(b, t, "tpud_model_batch_rows", "real (unpadded) rows per engine call", H_ROWS);
  model_family(b, t, "tpud_model_batches_total", "counter", "engine calls (batches) run",
               m_batches);
  model_family(b, t, "tpud_model_rows_total", "counter", "real rows computed", m_rows);
  model_family(b, t, "tpud_model_padding_rows_total", "counter",
               "zero rows added to fill batches up to a bucket", m_padding);
  model_family(b, t, "tpud_model_queue_rows", "gauge", "rows queued in the batcher now",
               m_queue);
  model_family(b, t, "tpud_model_memory_bytes", "gauge",
               "memory the version holds: packed weights, plans, scratch, batcher buffers",
               m_memory);
  model_family(b, t, "tpud_model_macs_total", "counter",
               "multiply-accumulates of the model's engine calls (padded buckets)", m_macs);
  model_family(b, t, "tpud_model_systolic_cycles_total", "counter",
               "cycles the modelled systolic array needs for the model's engine calls",
               m_cycles);
  tpu_metrics_family(b, "tpud_model_systolic_utilization", "gauge",
                     "MACs / MAC slots the modelled systolic array offered, for this model");
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (!serving(m)) continue;
    uint64_t slots = get(&m->stats.sim_slots);
    tpu_mlabel_t l[] = {{"model", m->name}, {"version", m->version_str}};
    tpu_metrics_double(b, "tpud_model_systolic_utilization", l, 2,
                       slots ? (double)get(&m->stats.macs) / (double)slots : 0.0);
  }
  tpu_metrics_family(b, "tpud_model_state", "gauge",
                     "1 for each model version in the repository, labelled with its state");
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    tpu_mlabel_t l[] = {{"model", m->name}, {"version", m->version_str},
                        {"state", state_name(m->state)}};
    tpu_metrics_u64(b, "tpud_model_state", l, 3, 1);
  }

  /* Connections. */
  tpu_metrics_family(b, "tpud_connections_open", "gauge",
                     "open client connections, counted from accept; --max-connections bounds both ports together");
  tpu_mlabel_t pn[] = {{"protocol", "native"}}, ph[] = {{"protocol", "http"}};
  tpu_metrics_u64(b, "tpud_connections_open", pn, 1, get(&s->connections_open));
  tpu_metrics_u64(b, "tpud_connections_open", ph, 1, get(&s->http_connections_open));
  tpu_metrics_family(b, "tpud_connections_accepted_total", "counter", "connections accepted");
  tpu_metrics_u64(b, "tpud_connections_accepted_total", pn, 1, get(&s->connections_accepted));
  tpu_metrics_u64(b, "tpud_connections_accepted_total", ph, 1,
                  get(&s->http_connections_accepted));
  tpu_metrics_family(b, "tpud_connections_rejected_total", "counter",
                     "connections refused (max-connections reached, or draining)");
  tpu_metrics_u64(b, "tpud_connections_rejected_total", pn, 1, get(&s->connections_rejected));
  tpu_metrics_u64(b, "tpud_connections_rejected_total", ph, 1,
                  get(&s->http_connections_rejected));
  tpu_metrics_family(b, "tpud_bad_frames_total", "counter",
                     "native frames so malformed that their connection was closed");
  tpu_metrics_u64(b, "tpud_bad_frames_total", NULL, 0, get(&s->bad_frames));
  tpu_metrics_family(b, "tpud_accept_errors_total", "counter",
                     "accept() failures (EMFILE: out of descriptors); each pauses that listener "
                     "100 ms to 1 s");
  for (int p = 0; p < 2; p++)
    for (int r = 0; r < TPU_ACCEPT_NREASONS; r++) {
      uint64_t v = get(&s->accept_errors[p][r]);
      if (!v && r != TPU_ACCEPT_EMFILE) continue;
      tpu_mlabel_t l[] = {{"protocol", p == TPU_ACCEPT_HTTP ? "http" : "native"},
                          {"reason", tpu_accept_reason_name(r)}};
      tpu_metrics_u64(b, "tpud_accept_errors_total", l, 2, v);
    }
  tpu_metrics_family(b, "tpud_buffered_bytes", "gauge",
                     "answers not yet taken by the kernel plus those reserved for calls in "
                     "flight, all connections; --max-buffered-bytes bounds it for new calls");
  tpu_metrics_u64(b, "tpud_buffered_bytes", NULL, 0, get(&s->buffered_bytes));
  tpu_metrics_family(b, "tpud_buffered_refused_total", "counter",
                     "MatMul and infer calls refused RESOURCE_EXHAUSTED at --max-buffered-bytes");
  tpu_metrics_u64(b, "tpud_buffered_refused_total", NULL, 0, get(&s->buffered_refused));

  /* HTTP. */
  tpu_metrics_family(b, "tpud_http_responses_total", "counter",
                     "HTTP responses sent, by status code (\"other\" for uncommon codes)");
  for (size_t i = 0; i < TPU_HTTP_NSTATUS; i++) {
    uint64_t v = get(&s->http_responses[i]);
    if (!v && tpu_http_status_at(i) != 200) continue;
    char code[16];
    if (tpu_http_status_at(i))
      snprintf(code, sizeof code, "%d", tpu_http_status_at(i));
    else
      snprintf(code, sizeof code, "other");
    tpu_mlabel_t l[] = {{"code", code}};
    tpu_metrics_u64(b, "tpud_http_responses_total", l, 1, v);
  }
  tpu_metrics_family(b, "tpud_http_request_duration_seconds", "histogram",
                     "HTTP requests, every endpoint, received to reply queued");
  tpu_metrics_histogram(b, "tpud_http_request_duration_seconds", NULL, 0, &s->http_request_us,
                        tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 1e6);

  /* MatMul. */
  tpu_metrics_family(b, "tpud_matmul_total", "counter", "MatMul calls computed");
  tpu_metrics_u64(b, "tpud_matmul_total", NULL, 0, get(&s->matmuls));
  tpu_metrics_family(b, "tpud_matmul_duration_seconds", "histogram", "MatMul compute time");
  tpu_metrics_histogram(b, "tpud_matmul_duration_seconds", NULL, 0, &s->matmul_us,
                        tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 1e6);

  /* Engine. */
  tpu_metrics_family(b, "tpud_engine_info", "gauge",
                     "the engine's kernel set (isa) and modelled systolic array (always 1)");
  char rows[16], cols[16], threads[16];
  snprintf(rows, sizeof rows, "%u", es.systolic_rows);
  snprintf(cols, sizeof cols, "%u", es.systolic_cols);
  snprintf(threads, sizeof threads, "%u", es.threads);
  tpu_mlabel_t el[] = {{"isa", es.isa ? es.isa : "unknown"},
                       {"threads", threads},
                       {"systolic_rows", rows},
                       {"systolic_cols", cols}};
  tpu_metrics_u64(b, "tpud_engine_info", el, 4, 1);
  tpu_metrics_family(b, "tpud_engine_calls_total", "counter", "engine plan runs");
  tpu_metrics_u64(b, "tpud_engine_calls_total", NULL, 0, es.calls);
  tpu_metrics_family(b, "tpud_engine_macs_total", "counter",
                     "multiply-accumulates done by the engine (M*K*N per call)");
  tpu_metrics_u64(b, "tpud_engine_macs_total", NULL, 0, es.macs);
  tpu_metrics_family(b, "tpud_engine_systolic_cycles_total", "counter",
                     "cycles the modelled systolic array needs for all engine calls");
  tpu_metrics_u64(b, "tpud_engine_systolic_cycles_total", NULL, 0, es.sim_cycles);
  tpu_metrics_family(b, "tpud_engine_systolic_utilization", "gauge",
                     "MACs / MAC slots offered by the modelled systolic array, all calls");
  tpu_metrics_double(b, "tpud_engine_systolic_utilization", NULL, 0,
                     tpu_engine_stats_utilization(&es));

  tpu_metrics_family(b, "tpud_draining", "gauge", "1 while the server drains for shutdown");
  tpu_metrics_u64(b, "tpud_draining", NULL, 0, (uint64_t)atomic_load(&srv->draining));
  render_audit(b, srv);
  tpu__models_release(t);
  tpu_process_stats_t ps;
  if (tpu_metrics_process_stats(&ps) == 0) tpu_metrics_process(b, &ps);
}
