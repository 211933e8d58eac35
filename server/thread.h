/*
 * thread.h - starting worker threads that never take a signal.
 *
 * DESIGN
 * tpud's signals (SIGTERM, SIGINT, SIGHUP, SIGUSR1) are meant for the main thread's event loop
 * (server.c). A thread inherits its creator's signal mask, and the main thread unblocks SIGTERM
 * and SIGINT while it loads the models at start-up (so that a stop can cancel a long load), so
 * threads started then would inherit an open mask. Workers are therefore started with every
 * signal blocked, whatever their creator's mask is at the time.
 */
#ifndef TPU_THREAD_H
#define TPU_THREAD_H

#include <pthread.h>
#include <signal.h>

/* pthread_create with every signal blocked in the new thread. Returns pthread_create's value. */
static inline int tpu_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(t, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

#endif /* TPU_THREAD_H */
