/*
 * queue.h - a multi-producer, single-consumer message queue with an eventfd wake-up.
 *
 * DESIGN
 * Messages embed a tpu_qnode_t (util/fifo.h), so pushing allocates nothing. Producers (any
 * thread) append under the queue's mutex; the eventfd is written only when the queue goes from
 * empty to non-empty (h2o lib/common/multithread.c), so a burst of messages costs one wake-up. The
 * consumer, an event loop watching tpu_queue_fd() for EV_READ, calls tpu_queue_take(), which
 * first clears the eventfd and then takes the whole list: a push that races with the take either
 * lands in the list taken or finds the queue empty and writes the eventfd again, so no message
 * is ever stranded.
 *
 * A producer that finishes several messages at once (the batcher scattering a batch) brackets
 * its pushes with tpu_queue_defer_begin/tpu_queue_defer_flush: the messages are collected per
 * queue on that thread and each queue gets them appended under one lock with at most one
 * wake-up, instead of waking the consumer on the first and racing it for the rest.
 *
 * Lock rules: `mu` guards head/tail only and is never held while calling out or while doing
 * I/O other than the eventfd write (which cannot block: the counter cannot overflow in practice).
 */
#ifndef TPU_QUEUE_H
#define TPU_QUEUE_H

#include <pthread.h>
#include <stddef.h>

#include "fifo.h" /* tpu_qnode_t, tpu_container_of */

typedef struct {
  pthread_mutex_t mu;
  tpu_qnode_t *head, *tail;
  int efd; /* eventfd, non-blocking */
} tpu_queue_t;

/* Initializes an empty queue; returns 0, or -1 with errno set. */
int tpu_queue_init(tpu_queue_t *q);
/* Releases the queue's resources; messages still queued are not touched. */
void tpu_queue_destroy(tpu_queue_t *q);
/* Appends a message; wakes the consumer when the queue was empty. Any thread. */
void tpu_queue_push(tpu_queue_t *q, tpu_qnode_t *node);
/* Starts collecting this thread's pushes (any queue) instead of appending them one by one.
 * Not nestable; pair with tpu_queue_defer_flush on the same thread. */
void tpu_queue_defer_begin(void);
/* Appends what this thread collected since tpu_queue_defer_begin, each queue's messages in push
 * order under one lock, waking each consumer at most once; stops collecting. */
void tpu_queue_defer_flush(void);
/* Takes every queued message in FIFO order (a NULL-terminated list). Consumer thread only. */
tpu_qnode_t *tpu_queue_take(tpu_queue_t *q);
/* The eventfd to watch for EV_READ. */
int tpu_queue_fd(const tpu_queue_t *q);

#endif /* TPU_QUEUE_H */
