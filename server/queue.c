/*
 * queue.c - see queue.h for the design and the lock rules.
 */
#include "queue.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int tpu_queue_init(tpu_queue_t *q) {
  q->head = q->tail = NULL;
  q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (q->efd < 0) return -1;
  if (pthread_mutex_init(&q->mu, NULL) != 0) {
    close(q->efd);
    q->efd = -1;
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

void tpu_queue_destroy(tpu_queue_t *q) {
  if (q->efd >= 0) close(q->efd);
  q->efd = -1;
  pthread_mutex_destroy(&q->mu);
}

void tpu_queue_push(tpu_queue_t *q, tpu_qnode_t *node) {
  node->next = NULL;
  pthread_mutex_lock(&q->mu);
  int was_empty = q->head == NULL;
  if (q->tail)
    q->tail->next = node;
  else
    q->head = node;
  q->tail = node;
  pthread_mutex_unlock(&q->mu);
  if (was_empty) {
    uint64_t one = 1;
    ssize_t w = write(q->efd, &one, sizeof one);
    (void)w; /* EAGAIN means the counter is already non-zero: the consumer will wake anyway */
  }
}

tpu_qnode_t *tpu_queue_take(tpu_queue_t *q) {
  uint64_t v;
  ssize_t r = read(q->efd, &v, sizeof v); /* clear first: see the DESIGN note in queue.h */
  (void)r;
  pthread_mutex_lock(&q->mu);
  tpu_qnode_t *list = q->head;
  q->head = q->tail = NULL;
  pthread_mutex_unlock(&q->mu);
  return list;
}

int tpu_queue_fd(const tpu_queue_t *q) { return q->efd; }
