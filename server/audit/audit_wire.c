/*
 * audit_wire.c - the audit log (audit.h) inside the server: opening it from the options, the
 * records of requests, admin actions and lifecycle events, fail-closed admission, and the
 * completion of calls once their record is written.
 *
 * DESIGN
 * Who computes what (audit.h WIRING):
 *   - compute side (batcher threads, MatMul pool threads, the repository thread): the dispatch
 *     layer (dispatch/) fills a record for the finished call (its method's digests) and hands it
 *     here with a continuation, tpu__audit_record. The writer thread runs the continuation once
 *     the record is written (after fdatasync with --audit-fsync always), and that hands the
 *     call to its I/O thread. So a response never leaves before its record is written. This
 *     file knows records, never calls or connections.
 *   - I/O threads only check admission (an atomic load) and submit records of requests they
 *     answer themselves (bad frames, validation errors, refusals): no digests, no hashing.
 *   - the main thread and the repository thread submit lifecycle and admin events.
 * Fail-closed (default): when the log cannot be written, admission fails and new requests get
 * UNAVAILABLE "audit log cannot be written"; calls whose record was refused (queue full) or
 * dropped at close are answered the same way. Fail-open: they are answered as computed and
 * the module counts the lost records.
 *
 * Lifetime: srv->audit is set at start-up before any other thread exists and never changes. At
 * stop the main thread sets audit_closed, waits until no thread is between tpu__audit_enter
 * and tpu__audit_leave (audit_users == 0), then frees the log; later enters return NULL. The
 * I/O threads are still running then (close may complete calls to them), hence the counter.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "audit_wire.h"
#include "server_int.h"

tpu_audit_t *tpu__audit_enter(tpu_server_t *srv) {
  if (!srv->audit) return NULL; /* off: never changes after start-up */
  atomic_fetch_add(&srv->audit_users, 1);
  if (atomic_load(&srv->audit_closed)) {
    atomic_fetch_sub(&srv->audit_users, 1);
    return NULL;
  }
  return srv->audit;
}

void tpu__audit_leave(tpu_server_t *srv) { atomic_fetch_sub(&srv->audit_users, 1); }

int tpu__audit_start(tpu_server_t *srv, char *err, size_t errlen) {
  const tpu_config_t *c = &srv->cfg;
  if (!c->audit_log[0]) {
    if (c->payload_dir[0]) {
      snprintf(err, errlen, "--payload-dir needs --audit-log: payload entries are referenced "
               "from audit records");
      return -1;
    }
    tpu_log_info("audit log: off (no --audit-log)");
    return 0;
  }
  tpu_audit_config_t ac;
  tpu_audit_config_init(&ac);
  ac.path = c->audit_log;
  ac.key_path = c->audit_key[0] ? c->audit_key : NULL;
  ac.head_path = !c->audit_head[0] ? NULL : strcmp(c->audit_head, "none") == 0 ? "" : c->audit_head;
  ac.fsync = (tpu_audit_fsync_t)c->audit_fsync;
  ac.fsync_interval_ms = c->audit_fsync_interval_ms;
  ac.max_bytes = c->audit_max_bytes;
  ac.fail_open = c->audit_fail_open;
  tpu_payload_key_t pkey;
  if (c->payload_dir[0]) {
    if (strcmp(c->payload_capture, "all") != 0 && strcmp(c->payload_capture, "none") != 0) {
      snprintf(err, errlen, "--payload-capture must be all or none, got '%s'", c->payload_capture);
      return -1;
    }
    ac.payload_dir = c->payload_dir;
    ac.payload_max_bytes = c->payload_max_bytes;
    ac.payload_max_age_s = c->payload_max_age_s;
    if (c->payload_key[0]) {
      char kerr[600];
      if (tpu_payload_load_key(c->payload_key, &pkey, kerr, sizeof kerr) != 0) {
        snprintf(err, errlen, "--payload-key: %s", kerr);
        return -1;
      }
      ac.payload_key = &pkey;
    }
  }
  /* A file-size limit (ulimit -f) must fail a write with EFBIG, which the log survives and
   * reports, not kill the daemon. */
  signal(SIGXFSZ, SIG_IGN);
  char aerr[768];
  int rc = tpu_audit_open(&ac, &srv->audit, aerr, sizeof aerr);
  OPENSSL_cleanse(&pkey, sizeof pkey); /* the log holds its copy */
  if (rc != 0) {
    snprintf(err, errlen, "--audit-log %s: %s", c->audit_log, aerr);
    srv->audit = NULL;
    return -1;
  }
  tpu_log_info("audit log %s: fsync %s%s, %s, head %s, rotate at %llu bytes%s, fail-%s",
               c->audit_log, tpu_fsync_name((tpu_audit_fsync_t)c->audit_fsync),
               c->audit_fsync == TPU_AUDIT_FSYNC_INTERVAL ? " (every interval)" : "",
               ac.key_path ? "HMAC-SHA256" : "SHA-256",
               !ac.head_path ? "<log>.head" : *ac.head_path ? ac.head_path : "none",
               (unsigned long long)c->audit_max_bytes, c->audit_max_bytes ? "" : " (never)",
               c->audit_fail_open ? "open" : "closed");
  if (c->payload_dir[0])
    tpu_log_info("payload store %s: capture %s, %s, at most %llu bytes%s, %llu s%s",
                 c->payload_dir,
                 strcmp(c->payload_capture, "all") == 0 ? "every model unless its model.json "
                 "opts out" : "only models whose model.json asks",
                 ac.payload_key ? "AES-256-GCM" : "in clear",
                 (unsigned long long)c->payload_max_bytes, c->payload_max_bytes ? "" : " (no limit)",
                 (unsigned long long)c->payload_max_age_s, c->payload_max_age_s ? "" : " (no limit)");
  /* The effective options, as GET /v2/debug/config shows them. */
  json_t *cfg = tpu_config_to_json(c);
  char *text = cfg ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(cfg);
  tpu__audit_event(srv, TPU_AUDIT_KIND_CONFIG, NULL, 0, text ? text : "(out of memory)");
  free(text);
  return 0;
}

void tpu__audit_event(tpu_server_t *srv, const char *kind, const char *model, uint64_t version,
                      const char *message) {
  tpu_audit_t *a = tpu__audit_enter(srv);
  if (!a) return;
  char v[24] = "";
  if (version) snprintf(v, sizeof v, "%llu", (unsigned long long)version);
  tpu_audit_record_t rec = {.kind = kind, .model = model, .version = v, .status = "OK",
                            .message = message};
  tpu_audit_submit(a, &rec, NULL, NULL); /* refused: counted lost by the module */
  tpu__audit_leave(srv);
}

void tpu__audit_sighup(tpu_server_t *srv) {
  tpu_audit_t *a = tpu__audit_enter(srv);
  if (!a) return;
  tpu_audit_reopen(a);
  tpu__audit_leave(srv);
  tpu__audit_event(srv, TPU_AUDIT_KIND_RELOAD, NULL, 0,
                   "SIGHUP: model repository rescan and audit log rotation");
}

void tpu__audit_stop(tpu_server_t *srv, const char *why, unsigned timeout_ms) {
  if (!srv->audit || atomic_load(&srv->audit_closed)) return;
  tpu__audit_event(srv, TPU_AUDIT_KIND_STOP, NULL, 0, why);
  if (tpu_audit_flush(srv->audit, timeout_ms) != 0)
    tpu_log_error("audit log: records still unwritten after %u ms; closing anyway", timeout_ms);
  atomic_store(&srv->audit_closed, 1);
  while (atomic_load(&srv->audit_users)) sched_yield(); /* a submit or two: microseconds */
  /* The counters after close: what it gave up on (records still unwritten, e.g. with
   * --audit-fail-open and a full disk) counts as lost, so "lost" is exactly the records
   * submitted and not written, the "stop" record among them when it could not be written. */
  tpu_audit_stats_t st;
  tpu_audit_shutdown(srv->audit, &st); /* may complete calls (TPU_AUDIT_LOST): they queue to I/O */
  tpu_log(st.records_lost ? TPU_LOG_ERROR : TPU_LOG_INFO,
          "audit log closed: %llu records written (last seq %llu), %llu lost, %llu bytes",
          (unsigned long long)st.records_written, (unsigned long long)st.seq,
          (unsigned long long)st.records_lost, (unsigned long long)st.bytes_written);
}

int tpu__audit_admit(tpu_server_t *srv) {
  tpu_audit_t *a = tpu__audit_enter(srv);
  if (!a) return 1;
  int ok = tpu_audit_admit(a);
  tpu__audit_leave(srv);
  return ok;
}

void tpu__audit_reject(tpu_server_t *srv, const char *client, const char *request_id,
                       const char *model, const char *version, int code, const char *msg) {
  tpu_audit_t *a = tpu__audit_enter(srv);
  if (!a) return;
  tpu_audit_record_t rec = {.request_id = request_id, .client = client, .model = model,
                            .version = version, .status = tpu_code_name(code),
                            .message = msg};
  tpu_audit_submit(a, &rec, NULL, NULL);
  tpu__audit_leave(srv);
}

/* ---- records with a continuation ---- */

/* Runs on the writer thread: quick, no audit calls. */
static void on_written(void *arg, uint64_t seq, int status) {
  tpu__audit_cont_t *k = arg;
  k->done(k, status == TPU_AUDIT_LOST && !k->fail_open);
}

void tpu__audit_record(tpu_server_t *srv, const tpu_audit_record_t *rec, tpu__audit_cont_t *k) {
  k->fail_open = srv->cfg.audit_fail_open;
  tpu_audit_t *a = tpu__audit_enter(srv);
  if (!a) {
    free(rec->payload);
    k->done(k, 0);
    return;
  }
  int rc = tpu_audit_submit(a, rec, on_written, k); /* owns rec->payload now */
  tpu__audit_leave(srv);
  if (rc != 0) k->done(k, !k->fail_open); /* refused (queue full or closing): no callback */
}
