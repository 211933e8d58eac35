/*
 * accept.c - what an accept() error costs (io.h tpu__accept_failed), both ports alike.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "io.h"
#include "log.h"
#include "stats.h"

unsigned tpu__accept_failed(int which, int err, unsigned *backoff_ms) {
  int reason = err == EMFILE    ? TPU_ACCEPT_EMFILE
               : err == ENFILE  ? TPU_ACCEPT_ENFILE
               : err == ENOBUFS ? TPU_ACCEPT_ENOBUFS
               : err == ENOMEM  ? TPU_ACCEPT_ENOMEM
                                : TPU_ACCEPT_EOTHER;
  tpu_stats_inc(&tpu_stats.accept_errors[which][reason], 1);
  unsigned ms = *backoff_ms ? *backoff_ms : 100;
  *backoff_ms = ms * 2 > 1000 ? 1000 : ms * 2;
  /* One line a second for the whole process (both ports, every I/O thread). */
  static _Atomic uint64_t last_us, suppressed;
  uint64_t now = tpu_now_us(), last = atomic_load(&last_us);
  if (now - last < 1000000 || !atomic_compare_exchange_strong(&last_us, &last, now)) {
    atomic_fetch_add(&suppressed, 1);
    return ms;
  }
  uint64_t more = atomic_exchange(&suppressed, 0);
  char extra[160] = "";
  if (more)
    snprintf(extra, sizeof extra, "; %llu more accept errors since the last such line",
             (unsigned long long)more);
  tpu_log_warn("%s accept: %s (%s): not accepting for %u ms%s (tpud_accept_errors_total; "
               "out of descriptors: raise the limit, ulimit -n, or lower --max-connections)",
               which == TPU_ACCEPT_HTTP ? "http" : "native", strerror(err),
               tpu_accept_reason_name(reason), ms, extra);
  return ms;
}
