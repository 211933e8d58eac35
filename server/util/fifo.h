/*
 * fifo.h - intrusive FIFO lists, and the bounded blocking FIFO that feeds a pool of threads.
 *
 * DESIGN
 * Messages embed a tpu_qnode_t, so queueing allocates nothing; tpu_container_of gets the message
 * back from its link. Two layers:
 *   - tpu_qlist_t: a FIFO list of nodes with no lock of its own, for a thread that guards it
 *     with a lock it holds anyway (the batcher, whose admission counts rows, and the repository
 *     thread, which waits on one condition for several kinds of work).
 *   - tpu_fifo_t: a tpu_qlist_t with its own mutex and condition variable, for worker threads
 *     that have nothing else to wait for (the MatMul pool). Producers push from any thread; a
 *     push is refused once the FIFO is closed or when it holds `bound` nodes. Takers block until
 *     a node arrives; close wakes them all, and they drain what is queued: take returns NULL only
 *     once the FIFO is closed and empty.
 *
 * Lock rules: tpu_fifo_t's `mu` guards list and closed; it is held only inside these functions
 * and never while calling out. A node belongs to the FIFO from a successful push until a take.
 */
#ifndef TPU_FIFO_H
#define TPU_FIFO_H

#include <pthread.h>
#include <stddef.h>

typedef struct tpu_qnode {
  struct tpu_qnode *next;
} tpu_qnode_t;

/* container_of for embedded links. */
#define tpu_container_of(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* A FIFO list of nodes; zero-initialize it. No lock: its owner's lock guards it. */
typedef struct {
  tpu_qnode_t *head, *tail;
  size_t len; /* nodes in the list */
} tpu_qlist_t;

/* Appends n. */
static inline void tpu_qlist_push(tpu_qlist_t *l, tpu_qnode_t *n) {
  n->next = NULL;
  if (l->tail) l->tail->next = n;
  else l->head = n;
  l->tail = n;
  l->len++;
}

/* Removes and returns the first node, or NULL when the list is empty. */
static inline tpu_qnode_t *tpu_qlist_pop(tpu_qlist_t *l) {
  tpu_qnode_t *n = l->head;
  if (!n) return NULL;
  l->head = n->next;
  if (!l->head) l->tail = NULL;
  l->len--;
  n->next = NULL;
  return n;
}

/* Removes every node: returns them as a NULL-terminated list in FIFO order (NULL when empty). */
static inline tpu_qnode_t *tpu_qlist_take_all(tpu_qlist_t *l) {
  tpu_qnode_t *n = l->head;
  l->head = l->tail = NULL;
  l->len = 0;
  return n;
}

/* tpu_fifo_push's answers. */
typedef enum {
  TPU_FIFO_OK = 0, /* queued: a taker will get it */
  TPU_FIFO_CLOSED, /* refused: tpu_fifo_close was called */
  TPU_FIFO_FULL    /* refused: the FIFO holds `bound` nodes already */
} tpu_fifo_status_t;

/* The blocking FIFO; embed it and tpu_fifo_init it. Fields are private to fifo.c. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a node arrived, or the FIFO was closed */
  tpu_qlist_t list;
  size_t bound; /* nodes held at most; 0 = no bound */
  int closed;
} tpu_fifo_t;

/* Initializes an empty, open FIFO holding at most `bound` nodes (0: no bound). Returns 0, or -1
 * with errno set. */
int tpu_fifo_init(tpu_fifo_t *f, size_t bound);
/* Releases the FIFO's lock and condition; no thread may be inside a tpu_fifo_* call on it. Nodes
 * still queued are not touched (tpu_fifo_take_all them first). */
void tpu_fifo_destroy(tpu_fifo_t *f);
/* Appends n and wakes one taker. Any thread. TPU_FIFO_CLOSED or TPU_FIFO_FULL when refused: the
 * node is then the caller's again. */
tpu_fifo_status_t tpu_fifo_push(tpu_fifo_t *f, tpu_qnode_t *n);
/* Removes and returns the first node, waiting for one while the FIFO is open and empty. Returns
 * NULL once the FIFO is closed and empty: the taker's signal to exit. */
tpu_qnode_t *tpu_fifo_take(tpu_fifo_t *f);
/* Removes every queued node without waiting: a NULL-terminated list in FIFO order, or NULL. */
tpu_qnode_t *tpu_fifo_take_all(tpu_fifo_t *f);
/* Refuses every later push and wakes every waiting taker; nodes already queued stay to be taken.
 * Idempotent. */
void tpu_fifo_close(tpu_fifo_t *f);
/* Nodes queued now (a snapshot). */
size_t tpu_fifo_len(tpu_fifo_t *f);

#endif /* TPU_FIFO_H */
