/*
 * fifo.c - the bounded blocking FIFO (see fifo.h for the design and the lock rules).
 */
#include "fifo.h"

#include <errno.h>

int tpu_fifo_init(tpu_fifo_t *f, size_t bound) {
  f->list = (tpu_qlist_t){0};
  f->bound = bound;
  f->closed = 0;
  int rc = pthread_mutex_init(&f->mu, NULL);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  rc = pthread_cond_init(&f->cv, NULL);
  if (rc != 0) {
    pthread_mutex_destroy(&f->mu);
    errno = rc;
    return -1;
  }
  return 0;
}

void tpu_fifo_destroy(tpu_fifo_t *f) {
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
}

tpu_fifo_status_t tpu_fifo_push(tpu_fifo_t *f, tpu_qnode_t *n) {
  pthread_mutex_lock(&f->mu);
  tpu_fifo_status_t st = f->closed                           ? TPU_FIFO_CLOSED
                         : f->bound && f->list.len >= f->bound ? TPU_FIFO_FULL
                                                             : TPU_FIFO_OK;
  if (st == TPU_FIFO_OK) {
    tpu_qlist_push(&f->list, n);
    /* Under the lock: the FIFO may be destroyed as soon as a taker has this node. */
    pthread_cond_signal(&f->cv);
  }
  pthread_mutex_unlock(&f->mu);
  return st;
}

tpu_qnode_t *tpu_fifo_take(tpu_fifo_t *f) {
  pthread_mutex_lock(&f->mu);
  while (!f->list.head && !f->closed) pthread_cond_wait(&f->cv, &f->mu);
  tpu_qnode_t *n = tpu_qlist_pop(&f->list);
  pthread_mutex_unlock(&f->mu);
  return n;
}

tpu_qnode_t *tpu_fifo_take_all(tpu_fifo_t *f) {
  pthread_mutex_lock(&f->mu);
  tpu_qnode_t *n = tpu_qlist_take_all(&f->list);
  pthread_mutex_unlock(&f->mu);
  return n;
}

void tpu_fifo_close(tpu_fifo_t *f) {
  pthread_mutex_lock(&f->mu);
  f->closed = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

size_t tpu_fifo_len(tpu_fifo_t *f) {
  pthread_mutex_lock(&f->mu);
  size_t n = f->list.len;
  pthread_mutex_unlock(&f->mu);
  return n;
}
