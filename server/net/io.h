/*
 * io.h - the I/O threads: one event loop each, a message queue, and the services on it.
 *
 * DESIGN
 * memcached-style: each I/O thread runs its own event_base and owns what its services keep
 * (the connections of each port); nothing else touches them. Other threads reach a thread only
 * through its queue (queue.h: an eventfd written when the queue goes empty → non-empty), with
 * messages that carry the function that handles them: a new socket for a front end, a call
 * whose compute finished, a stop. The loop runs each message's function and knows nothing of
 * who sent it or what it means, and it never blocks or computes.
 *
 * Services are what a thread serves (front/framed.c: the native port, front/http.c: the HTTP
 * port). Each is told when the server drains (say goodbye to clients that can move elsewhere),
 * when it stops (flush, close, and report idle with tpu__io_service_idle), when the stop's grace
 * has passed (close whatever is left), and freed after the thread exits. The thread leaves its
 * loop once every service is idle.
 *
 * Lock rules: none here but the queue's own mutex; every field is the owning thread's, except
 * those set before the thread starts.
 */
#ifndef TPU_IO_H
#define TPU_IO_H

#include <pthread.h>

#include "queue.h"

struct event_base;
struct event;
struct tpu_server;
typedef struct tpu__io tpu__io_t;
typedef struct tpu__msg tpu__msg_t;
typedef struct tpu__service tpu__service_t;

/* A message to an I/O thread: `run` handles it there; `drop` (may be NULL) frees one that was
 * never run, when the thread is gone. */
struct tpu__msg {
  tpu_qnode_t link;
  void (*run)(tpu__io_t *io, tpu__msg_t *m);
  void (*drop)(tpu__msg_t *m);
};

/* What an I/O thread serves: a front end's state on this thread. */
struct tpu__service {
  tpu__service_t *next;
  const char *name;
  void (*drain)(tpu__service_t *s);  /* the server started draining; may be NULL */
  void (*stop)(tpu__service_t *s);   /* flush and close; tpu__io_service_idle when done */
  void (*force)(tpu__service_t *s);  /* the stop's grace passed: close everything now */
  void (*free)(tpu__service_t *s);   /* after the thread exited */
  unsigned linger_ms;                /* the loop runs this much longer after the last idle */
  int idle;
};

struct tpu__io {
  struct tpu_server *srv; /* the server (opaque here), for the services */
  unsigned index;
  pthread_t thread;
  int started;
  struct event_base *base;
  tpu_queue_t queue;
  struct event *queue_ev;
  struct event *stop_timer;
  tpu__service_t *services;
  int stopping;
  tpu__msg_t stop_msg, drain_msg;
};

/* Creates n I/O threads' loops and queues, not yet running (main thread). NULL on failure. */
tpu__io_t *tpu__io_create(struct tpu_server *srv, unsigned n);
/* Adds a service to a thread before it runs. */
void tpu__io_add_service(tpu__io_t *io, tpu__service_t *s);
/* Starts the threads. 0 or -1. */
int tpu__io_run(tpu__io_t *io, unsigned n);
/* Queues a message to an I/O thread (any thread). */
void tpu__io_post(tpu__io_t *io, tpu__msg_t *m);
/* Tells every thread's services the server is draining (main thread, once). */
void tpu__io_drain(tpu__io_t *io, unsigned n);
/* Asks every thread to stop its services and exit; joins them (main thread). */
void tpu__io_stop(tpu__io_t *io, unsigned n);
/* Stops if needed, drops messages never run, frees the services and the threads' state. */
void tpu__io_free(tpu__io_t *io, unsigned n);
/* A service has nothing left after its stop (its thread). */
void tpu__io_service_idle(tpu__service_t *s, tpu__io_t *io);

/* ---- accept errors (accept.c), both ports ---- */
/* An accept() on port `which` (TPU_ACCEPT_NATIVE or _HTTP, stats.h) failed with errno `err` (any thread): counts it
 * (tpud_accept_errors_total), logs at most one line a second for the whole process, and returns
 * how long the caller stops polling its listener: *backoff_ms, which then doubles (100 ms up to
 * 1 s; the caller resets it to 0 after an accept succeeds). EMFILE and its kin are not a reason
 * to spin: the listener stays readable while connections wait in its backlog, and they are
 * served once descriptors are free again. */
unsigned tpu__accept_failed(int which, int err, unsigned *backoff_ms);

#endif /* TPU_IO_H */
