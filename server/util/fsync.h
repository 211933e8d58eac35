/*
 * fsync.h - the audit log's durability policy (--audit-fsync): its values, names and parser.
 *
 * DESIGN
 * The option is read by the options table (config.c, util) and obeyed by the audit writer
 * (audit.c, above util), so its type and its one parser live here, below both: audit.h takes
 * tpu_audit_fsync_t from this header, and parsing the option calls nothing above util.
 */
#ifndef TPU_FSYNC_H
#define TPU_FSYNC_H

/* Durability policy (--audit-fsync). */
typedef enum {
  TPU_AUDIT_FSYNC_INTERVAL = 0, /* fdatasync at most every fsync_interval_ms (default) */
  TPU_AUDIT_FSYNC_ALWAYS = 1,   /* fdatasync each batch before its callbacks run */
  TPU_AUDIT_FSYNC_NEVER = 2     /* leave it to the kernel (still synced before head/rotate) */
} tpu_audit_fsync_t;

/* Parses "always", "interval" or "never" into *out; returns 0, or -1 for anything else (NULL
 * too), leaving *out alone. */
int tpu_fsync_parse(const char *name, tpu_audit_fsync_t *out);
/* The option value that names f: "always", "interval" or "never" ("interval", the default, for
 * a value that is none of them). */
const char *tpu_fsync_name(tpu_audit_fsync_t f);

#endif /* TPU_FSYNC_H */
