/* test_io.c - the I/O threads (server/net/io.h): messages that carry their handler, run on their
 * thread in order; a ping-pong between two threads' loops; services told to drain, stop and
 * free; a thread that leaves its loop once every service is idle; messages never run dropped. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "tpu_test.h"

/* ---- ping-pong ---- */

#define ROUNDS 20000

typedef struct {
  tpu__msg_t msg;
  tpu__io_t *ios;     /* the two threads */
  int hops;           /* how many times it has been handled */
  pthread_t seen[2];  /* the thread that ran it on each side */
  int wrong_thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
} ball_t;

static void on_ball(tpu__io_t *io, tpu__msg_t *m) {
  ball_t *b = tpu_container_of(m, ball_t, msg);
  unsigned side = io->index;
  if (b->hops < 2) b->seen[side] = pthread_self();
  else if (!pthread_equal(b->seen[side], pthread_self())) b->wrong_thread = 1;
  if (++b->hops == ROUNDS) {
    pthread_mutex_lock(&b->mu);
    b->done = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return;
  }
  tpu__io_post(&b->ios[1 - side], &b->msg); /* to the other loop */
}

/* A service that is idle at once when stopped, and counts what it was told. */
typedef struct {
  tpu__service_t svc;
  atomic_int drained, stopped, freed;
} counting_t;

static void c_drain(tpu__service_t *s) { atomic_fetch_add(&((counting_t *)s)->drained, 1); }
static void c_stop(tpu__service_t *s) {
  counting_t *c = (counting_t *)s;
  atomic_fetch_add(&c->stopped, 1);
}
static void c_free(tpu__service_t *s) { atomic_fetch_add(&((counting_t *)s)->freed, 1); }

/* The stop handler must report idle from its thread: wrap it. */
typedef struct {
  counting_t c;
  tpu__io_t *io;
} idle_at_stop_t;

static void idle_stop(tpu__service_t *s) {
  idle_at_stop_t *w = (idle_at_stop_t *)s;
  c_stop(s);
  tpu__io_service_idle(s, w->io);
}

static void test_ping_pong(void) {
  tpu__io_t *ios = tpu__io_create(NULL, 2);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ios);
  idle_at_stop_t svc[2];
  memset(svc, 0, sizeof svc);
  for (int i = 0; i < 2; i++) {
    svc[i].io = &ios[i];
    svc[i].c.svc = (tpu__service_t){.name = "test", .drain = c_drain, .stop = idle_stop,
                                    .free = c_free};
    tpu__io_add_service(&ios[i], &svc[i].c.svc);
  }
  CU_ASSERT_EQUAL_FATAL(tpu__io_run(ios, 2), 0);
  ball_t b;
  memset(&b, 0, sizeof b);
  b.msg.run = on_ball;
  b.ios = ios;
  pthread_mutex_init(&b.mu, NULL);
  pthread_cond_init(&b.cv, NULL);
  tpu__io_post(&ios[0], &b.msg);
  pthread_mutex_lock(&b.mu);
  while (!b.done) pthread_cond_wait(&b.cv, &b.mu);
  pthread_mutex_unlock(&b.mu);
  CU_ASSERT_EQUAL(b.hops, ROUNDS);
  CU_ASSERT_FALSE(b.wrong_thread); /* each side's handler always ran on its own thread */
  CU_ASSERT_FALSE(pthread_equal(b.seen[0], b.seen[1]));
  tpu__io_drain(ios, 2);
  tpu__io_stop(ios, 2); /* returns once both loops left: every service reported idle */
  for (int i = 0; i < 2; i++) {
    CU_ASSERT_EQUAL(atomic_load(&svc[i].c.drained), 1);
    CU_ASSERT_EQUAL(atomic_load(&svc[i].c.stopped), 1);
    CU_ASSERT_EQUAL(atomic_load(&svc[i].c.freed), 0);
  }
  tpu__io_free(ios, 2);
  for (int i = 0; i < 2; i++) CU_ASSERT_EQUAL(atomic_load(&svc[i].c.freed), 1);
  pthread_cond_destroy(&b.cv);
  pthread_mutex_destroy(&b.mu);
}

/* ---- order, and messages never run ---- */

typedef struct {
  tpu__msg_t msg;
  int n;
  int *log, *nlog;
  int *dropped;
} rec_t;

static void on_rec(tpu__io_t *io, tpu__msg_t *m) {
  rec_t *r = tpu_container_of(m, rec_t, msg);
  r->log[(*r->nlog)++] = r->n;
}

static void on_drop(tpu__msg_t *m) { (*tpu_container_of(m, rec_t, msg)->dropped)++; }

/* A service that never reports idle: the stop's grace (2 s) forces it. */
static atomic_int forced;
static void stuck_stop(tpu__service_t *s) {}
static void stuck_force(tpu__service_t *s) { atomic_fetch_add(&forced, 1); }
static void stuck_free(tpu__service_t *s) {}

static void test_order_and_drop(void) {
  tpu__io_t *io = tpu__io_create(NULL, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(io);
  int log[8], nlog = 0, dropped = 0;
  rec_t r[8];
  for (int i = 0; i < 8; i++)
    r[i] = (rec_t){.msg = {.run = on_rec, .drop = on_drop}, .n = i, .log = log, .nlog = &nlog,
                   .dropped = &dropped};
  /* Not running yet: posted messages wait, then run in order once the thread runs. */
  for (int i = 0; i < 4; i++) tpu__io_post(io, &r[i].msg);
  tpu__service_t stuck = {.name = "stuck", .stop = stuck_stop, .force = stuck_force,
                          .free = stuck_free};
  tpu__io_add_service(io, &stuck);
  CU_ASSERT_EQUAL_FATAL(tpu__io_run(io, 1), 0);
  tpu__io_stop(io, 1); /* the stop message comes after the four; the stuck service is forced */
  CU_ASSERT_EQUAL(nlog, 4);
  for (int i = 0; i < nlog; i++) CU_ASSERT_EQUAL(log[i], i);
  CU_ASSERT_EQUAL(atomic_load(&forced), 1);
  /* The thread is gone: what is posted now is never run, and free drops it. */
  for (int i = 4; i < 8; i++) tpu__io_post(io, &r[i].msg);
  tpu__io_free(io, 1);
  CU_ASSERT_EQUAL(nlog, 4);
  CU_ASSERT_EQUAL(dropped, 4);
}

TPU_TEST_SUITE(net_io,
               {"ping_pong", test_ping_pong},
               {"order_and_drop", test_order_and_drop})
