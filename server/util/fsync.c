/*
 * fsync.c - --audit-fsync's values (see fsync.h).
 */
#include "fsync.h"

#include <string.h>

int tpu_fsync_parse(const char *name, tpu_audit_fsync_t *out) {
  if (!name) return -1;
  if (strcmp(name, "always") == 0) *out = TPU_AUDIT_FSYNC_ALWAYS;
  else if (strcmp(name, "interval") == 0) *out = TPU_AUDIT_FSYNC_INTERVAL;
  else if (strcmp(name, "never") == 0) *out = TPU_AUDIT_FSYNC_NEVER;
  else return -1;
  return 0;
}

const char *tpu_fsync_name(tpu_audit_fsync_t f) {
  return f == TPU_AUDIT_FSYNC_ALWAYS ? "always" : f == TPU_AUDIT_FSYNC_NEVER ? "never" : "interval";
}
