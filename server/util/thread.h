/*
 * thread.h - starting worker threads that never take an asynchronous signal.
 *
 * DESIGN
 * tpud's signals (SIGTERM, SIGINT, SIGHUP, SIGUSR1) are meant for the main thread (server.c:
 * its event loop, and a temporary handler while the models load at start-up, when it unblocks
 * SIGTERM and SIGINT so that a stop can cancel a long load). A thread inherits its creator's
 * mask, so threads started during the start-up loads would inherit an open one. The threads
 * started then or before the server exists (the engine's pool in main.c, batchers, the
 * repository thread) are therefore started with every asynchronous signal blocked, whatever
 * their creator's mask is. The other workers (I/O, MatMul pool, audit writer) start while the
 * server's own four signals are blocked, which is enough for them.
 *
 * Synchronous fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS) stay
 * open: blocked, the kernel would kill the process without running a handler, so sanitizer
 * reports and core-dump handlers would lose what happened in that thread.
 */
#ifndef TPU_THREAD_H
#define TPU_THREAD_H

#include <pthread.h>
#include <signal.h>

/* Blocks every asynchronous signal in the calling thread; *old receives the previous mask. */
static inline void tpu_thread_block_signals(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&all, faults[i]);
  pthread_sigmask(SIG_SETMASK, &all, old);
}

/* Restores a mask saved by tpu_thread_block_signals. */
static inline void tpu_thread_restore_signals(const sigset_t *old) {
  pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* pthread_create with every asynchronous signal blocked in the new thread. Returns
 * pthread_create's value. */
static inline int tpu_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
  sigset_t old;
  tpu_thread_block_signals(&old);
  int rc = pthread_create(t, NULL, fn, arg);
  tpu_thread_restore_signals(&old);
  return rc;
}

#endif /* TPU_THREAD_H */
