/*
 * io.c - the I/O threads (io.h): loops, queues, messages that carry their handler, services.
 */
#include "io.h"

#include <event2/event.h>
#include <stdlib.h>

static void io_exit(tpu__io_t *io) {
  unsigned ms = 0;
  for (tpu__service_t *s = io->services; s; s = s->next)
    if (s->linger_ms > ms) ms = s->linger_ms;
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  event_base_loopexit(io->base, ms ? &tv : NULL);
}

static int all_idle(const tpu__io_t *io) {
  for (const tpu__service_t *s = io->services; s; s = s->next)
    if (!s->idle) return 0;
  return 1;
}

void tpu__io_service_idle(tpu__service_t *s, tpu__io_t *io) {
  if (s->idle) return;
  s->idle = 1;
  if (io->stopping && all_idle(io)) io_exit(io);
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg) {
  tpu__io_t *io = arg;
  for (tpu__service_t *s = io->services; s; s = s->next)
    if (!s->idle && s->force) s->force(s);
  io_exit(io);
}

static void run_stop(tpu__io_t *io, tpu__msg_t *m) {
  io->stopping = 1;
  for (tpu__service_t *s = io->services; s; s = s->next)
    if (!s->idle) s->stop(s);
  if (all_idle(io)) {
    io_exit(io);
    return;
  }
  /* Give slow readers a moment to take their last responses, then close regardless. */
  struct timeval tv = {.tv_sec = 2};
  io->stop_timer = evtimer_new(io->base, on_stop_timer, io);
  if (io->stop_timer) evtimer_add(io->stop_timer, &tv);
}

static void run_drain(tpu__io_t *io, tpu__msg_t *m) {
  for (tpu__service_t *s = io->services; s; s = s->next)
    if (s->drain) s->drain(s);
}

static void on_queue(evutil_socket_t fd, short what, void *arg) {
  tpu__io_t *io = arg;
  tpu_qnode_t *n = tpu_queue_take(&io->queue);
  while (n) {
    tpu_qnode_t *next = n->next; /* the handler may free or re-queue the message */
    tpu__msg_t *m = tpu_container_of(n, tpu__msg_t, link);
    m->run(io, m);
    n = next;
  }
}

static void *io_main(void *arg) {
  tpu__io_t *io = arg;
  event_base_dispatch(io->base);
  return NULL;
}

tpu__io_t *tpu__io_create(struct tpu_server *srv, unsigned n) {
  tpu__io_t *ios = calloc(n, sizeof *ios);
  if (!ios) return NULL;
  for (unsigned i = 0; i < n; i++) {
    tpu__io_t *io = &ios[i];
    io->srv = srv;
    io->index = i;
    io->queue.efd = -1;
    io->stop_msg.run = run_stop;
    io->drain_msg.run = run_drain;
  }
  for (unsigned i = 0; i < n; i++) {
    tpu__io_t *io = &ios[i];
    io->base = event_base_new();
    if (!io->base || tpu_queue_init(&io->queue) != 0) goto fail;
    io->queue_ev = event_new(io->base, tpu_queue_fd(&io->queue), EV_READ | EV_PERSIST, on_queue, io);
    if (!io->queue_ev || event_add(io->queue_ev, NULL) != 0) goto fail;
  }
  return ios;
fail:
  tpu__io_free(ios, n);
  return NULL;
}

void tpu__io_add_service(tpu__io_t *io, tpu__service_t *s) {
  s->next = io->services;
  io->services = s;
}

int tpu__io_run(tpu__io_t *ios, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    if (pthread_create(&ios[i].thread, NULL, io_main, &ios[i]) != 0) return -1;
    ios[i].started = 1;
  }
  return 0;
}

void tpu__io_post(tpu__io_t *io, tpu__msg_t *m) { tpu_queue_push(&io->queue, &m->link); }

void tpu__io_drain(tpu__io_t *ios, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    if (ios[i].started) tpu__io_post(&ios[i], &ios[i].drain_msg);
}

void tpu__io_stop(tpu__io_t *ios, unsigned n) {
  if (!ios) return;
  for (unsigned i = 0; i < n; i++)
    if (ios[i].started) tpu__io_post(&ios[i], &ios[i].stop_msg);
  for (unsigned i = 0; i < n; i++) {
    if (!ios[i].started) continue;
    pthread_join(ios[i].thread, NULL);
    ios[i].started = 0;
  }
}

void tpu__io_free(tpu__io_t *ios, unsigned n) {
  if (!ios) return;
  tpu__io_stop(ios, n);
  for (unsigned i = 0; i < n; i++) {
    tpu__io_t *io = &ios[i];
    if (io->queue.efd >= 0) { /* anything never run (only after a hard stop) */
      tpu_qnode_t *q = tpu_queue_take(&io->queue);
      while (q) {
        tpu_qnode_t *next = q->next;
        tpu__msg_t *m = tpu_container_of(q, tpu__msg_t, link);
        if (m->drop) m->drop(m);
        q = next;
      }
      tpu_queue_destroy(&io->queue);
    }
    tpu__service_t *s = io->services, *next;
    for (; s; s = next) {
      next = s->next;
      s->free(s);
    }
    io->services = NULL;
    if (io->stop_timer) event_free(io->stop_timer);
    if (io->queue_ev) event_free(io->queue_ev);
    if (io->base) event_base_free(io->base);
  }
  free(ios);
}
