/*
 * clock.h - monotonic time in microseconds, the one clock deadlines and latencies use.
 */
#ifndef TPU_CLOCK_H
#define TPU_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in microseconds. */
static inline uint64_t tpu_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

#endif /* TPU_CLOCK_H */
