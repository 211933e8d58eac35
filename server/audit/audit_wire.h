/*
 * audit_wire.h - the audit log (audit.h) inside the server: opened from the options, records of
 * requests, admin actions and lifecycle events, fail-closed admission (audit_wire.c).
 */
#ifndef TPU_AUDIT_WIRE_H
#define TPU_AUDIT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "audit.h"

struct tpu_server;

/* Opens the log named by --audit-log (main thread, start-up); no-op when audit is off. */
int tpu__audit_start(struct tpu_server *srv, char *err, size_t errlen);
/* Writes a "stop" record (message why), flushes (up to timeout_ms) and closes, after waiting
 * out threads still inside tpu__audit_enter. Main thread, after compute stopped and before the
 * I/O threads stop (close may run continuations, which queue calls to the I/O threads).
 * Idempotent. */
void tpu__audit_stop(struct tpu_server *srv, const char *why, unsigned timeout_ms);
/* SIGHUP (main thread): rotate the log and record it. */
void tpu__audit_sighup(struct tpu_server *srv);
/* An admin or lifecycle record (kind TPU_AUDIT_KIND_*; version 0 = none); any thread; no-op
 * when audit is off. */
void tpu__audit_event(struct tpu_server *srv, const char *kind, const char *model,
                      uint64_t version, const char *message);
/* The log for the duration of one use, or NULL when audit is off or closed; pair with
 * tpu__audit_leave when non-NULL. Any thread; two atomic operations. */
tpu_audit_t *tpu__audit_enter(struct tpu_server *srv);
void tpu__audit_leave(struct tpu_server *srv);
/* Whether a new audited request may proceed (I/O thread): 0 = answer UNAVAILABLE with
 * TPU__AUDIT_UNAVAILABLE (fail-closed and the log cannot be written). */
int tpu__audit_admit(struct tpu_server *srv);
#define TPU__AUDIT_UNAVAILABLE "audit log cannot be written"
/* Record of a request answered without compute (I/O thread; no digests, no hashing). */
void tpu__audit_reject(struct tpu_server *srv, const char *client, const char *request_id,
                       const char *model, const char *version, int code, const char *msg);

/* A continuation: what runs once a record is written. `withheld` = 1 when the record could not
 * be written and the policy is fail-closed: the result must not be given. */
typedef struct tpu__audit_cont {
  void (*done)(struct tpu__audit_cont *k, int withheld);
  int fail_open; /* set by tpu__audit_record */
} tpu__audit_cont_t;

/* Submits `rec` (compute threads) and runs k->done once it is written (with --audit-fsync
 * always, after fdatasync), on the writer thread; at once, here, when audit is off or the
 * record was refused. rec's strings need to live only until the return. */
void tpu__audit_record(struct tpu_server *srv, const tpu_audit_record_t *rec,
                       tpu__audit_cont_t *k);

#endif /* TPU_AUDIT_WIRE_H */
