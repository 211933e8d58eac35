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

/* Appends the list first..last; wakes the consumer when the queue was empty. */
static void push_list(tpu_queue_t *q, tpu_qnode_t *first, tpu_qnode_t *last) {
  last->next = NULL;
  pthread_mutex_lock(&q->mu);
  int was_empty = q->head == NULL;
  if (q->tail)
    q->tail->next = first;
  else
    q->head = first;
  q->tail = last;
  pthread_mutex_unlock(&q->mu);
  if (was_empty) {
    uint64_t one = 1;
    ssize_t w = write(q->efd, &one, sizeof one);
    (void)w; /* EAGAIN means the counter is already non-zero: the consumer will wake anyway */
  }
}

/* This thread's deferred pushes: a few queues (one per I/O thread a batch answers to). */
#define DEFER_QUEUES 16
static __thread struct {
  int on;
  size_t n;
  struct {
    tpu_queue_t *q;
    tpu_qnode_t *head, *tail;
  } slot[DEFER_QUEUES];
} defer;

void tpu_queue_push(tpu_queue_t *q, tpu_qnode_t *node) {
  if (defer.on) {
    size_t i = 0;
    while (i < defer.n && defer.slot[i].q != q) i++;
    if (i < DEFER_QUEUES) {
      node->next = NULL;
      if (i == defer.n) {
        defer.n++;
        defer.slot[i].q = q;
        defer.slot[i].head = node;
      } else {
        defer.slot[i].tail->next = node;
      }
      defer.slot[i].tail = node;
      return;
    }
    /* More queues than slots: this one goes at once (order per queue is still kept, since a
     * queue without a slot never had a deferred message). */
  }
  push_list(q, node, node);
}

void tpu_queue_defer_begin(void) {
  defer.on = 1;
  defer.n = 0;
}

void tpu_queue_defer_flush(void) {
  defer.on = 0;
  for (size_t i = 0; i < defer.n; i++) push_list(defer.slot[i].q, defer.slot[i].head, defer.slot[i].tail);
  defer.n = 0;
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
