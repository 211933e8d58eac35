/*
 * test_queue.c - tpu_queue: FIFO order within one thread, the eventfd wake-up written only on
 * empty → non-empty, deferred pushes (per queue, one lock and one wake-up each, the overflow past
 * the slots), an init failure, and a ping-pong between two libevent loops on two threads that
 * passes messages back and forth (one in flight, then many) checking order and count.
 */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "queue.h"
#include "tpu_test.h"

typedef struct {
  tpu_qnode_t link;
  int id;
} msg_t;

static int readable(const tpu_queue_t *q) {
  struct pollfd p = {.fd = tpu_queue_fd(q), .events = POLLIN};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* The eventfd's counter, read (and so cleared) directly: how many wake-ups were written. */
static uint64_t wakeups(tpu_queue_t *q) {
  uint64_t v = 0;
  if (read(tpu_queue_fd(q), &v, sizeof v) != (ssize_t)sizeof v) return 0; /* EAGAIN: none */
  return v;
}

/* Takes everything and checks it is ids first, first+1, ..., first+n-1. */
static void expect_ids(tpu_queue_t *q, int first, int n) {
  int got = 0;
  for (tpu_qnode_t *l = tpu_queue_take(q); l; l = l->next, got++) {
    msg_t *m = tpu_container_of(l, msg_t, link);
    CU_ASSERT_EQUAL(m->id, first + got);
  }
  CU_ASSERT_EQUAL(got, n);
}

static void test_order(void) {
  tpu_queue_t q;
  CU_ASSERT_EQUAL_FATAL(tpu_queue_init(&q), 0);
  CU_ASSERT_TRUE(tpu_queue_fd(&q) >= 0);
  CU_ASSERT_PTR_NULL(tpu_queue_take(&q));
  msg_t m[100];
  for (int i = 0; i < 100; i++) {
    m[i].id = i;
    tpu_queue_push(&q, &m[i].link);
  }
  expect_ids(&q, 0, 100);
  CU_ASSERT_PTR_NULL(tpu_queue_take(&q));
  /* Pushes after a take start a fresh list; a node is reusable once taken. */
  for (int i = 0; i < 3; i++) {
    m[i].id = 100 + i;
    tpu_queue_push(&q, &m[i].link);
  }
  expect_ids(&q, 100, 3);
  m[0].id = 7;
  m[0].link.next = &m[1].link; /* stale link: push must not follow it */
  tpu_queue_push(&q, &m[0].link);
  expect_ids(&q, 7, 1);
  tpu_queue_destroy(&q);
  CU_ASSERT_EQUAL(tpu_queue_fd(&q), -1);
}

static void test_wakeup(void) {
  tpu_queue_t q;
  CU_ASSERT_EQUAL_FATAL(tpu_queue_init(&q), 0);
  CU_ASSERT_FALSE(readable(&q));
  msg_t m[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
  /* Empty → non-empty wakes; pushes onto a non-empty queue add no wake-up. */
  tpu_queue_push(&q, &m[0].link);
  CU_ASSERT_TRUE(readable(&q));
  tpu_queue_push(&q, &m[1].link);
  tpu_queue_push(&q, &m[2].link);
  CU_ASSERT_EQUAL(wakeups(&q), 1);
  CU_ASSERT_FALSE(readable(&q));
  expect_ids(&q, 0, 3); /* the messages are there although the wake-up was consumed */
  /* take clears the eventfd: nothing left to wake for. */
  tpu_queue_push(&q, &m[0].link);
  CU_ASSERT_TRUE(readable(&q));
  expect_ids(&q, 0, 1);
  CU_ASSERT_FALSE(readable(&q));
  /* Emptied by take, the next push wakes again. */
  tpu_queue_push(&q, &m[3].link);
  CU_ASSERT_TRUE(readable(&q));
  CU_ASSERT_EQUAL(wakeups(&q), 1);
  expect_ids(&q, 3, 1);
  /* A take on an empty queue with no wake-up pending neither blocks nor fails. */
  CU_ASSERT_PTR_NULL(tpu_queue_take(&q));
  CU_ASSERT_FALSE(readable(&q));
  tpu_queue_destroy(&q);
}

static void test_defer(void) {
  tpu_queue_t a, b;
  CU_ASSERT_EQUAL_FATAL(tpu_queue_init(&a), 0);
  CU_ASSERT_EQUAL_FATAL(tpu_queue_init(&b), 0);
  msg_t m[10];
  for (int i = 0; i < 10; i++) m[i].id = i;
  tpu_queue_defer_begin();
  for (int i = 0; i < 10; i++) tpu_queue_push(i % 2 ? &b : &a, &m[i].link);
  /* Collected, not yet visible. */
  CU_ASSERT_FALSE(readable(&a));
  CU_ASSERT_FALSE(readable(&b));
  tpu_queue_defer_flush();
  CU_ASSERT_EQUAL(wakeups(&a), 1);
  CU_ASSERT_EQUAL(wakeups(&b), 1);
  int got = 0;
  for (tpu_qnode_t *l = tpu_queue_take(&a); l; l = l->next, got += 2)
    CU_ASSERT_EQUAL(tpu_container_of(l, msg_t, link)->id, got);
  CU_ASSERT_EQUAL(got, 10);
  got = 1;
  for (tpu_qnode_t *l = tpu_queue_take(&b); l; l = l->next, got += 2)
    CU_ASSERT_EQUAL(tpu_container_of(l, msg_t, link)->id, got);
  CU_ASSERT_EQUAL(got, 11);

  /* Deferred messages go after those already queued, and a non-empty queue is not woken. */
  m[0].id = 0;
  tpu_queue_push(&a, &m[0].link);
  CU_ASSERT_EQUAL(wakeups(&a), 1);
  tpu_queue_defer_begin();
  m[1].id = 1;
  m[2].id = 2;
  tpu_queue_push(&a, &m[1].link);
  tpu_queue_push(&a, &m[2].link);
  tpu_queue_defer_flush();
  CU_ASSERT_FALSE(readable(&a));
  expect_ids(&a, 0, 3);
  /* Flushing with nothing collected is harmless; after a flush, pushes go at once again. */
  tpu_queue_defer_begin();
  tpu_queue_defer_flush();
  CU_ASSERT_FALSE(readable(&a));
  tpu_queue_push(&a, &m[0].link);
  CU_ASSERT_TRUE(readable(&a));
  expect_ids(&a, 0, 1);
  tpu_queue_destroy(&a);
  tpu_queue_destroy(&b);
}

/* More queues than the defer slots: the extra ones are pushed at once, the rest at the flush,
 * each in order and woken once. */
static void test_defer_overflow(void) {
  enum { NQ = 20, PER = 3 };
  tpu_queue_t q[NQ];
  msg_t m[NQ][PER];
  for (int i = 0; i < NQ; i++) CU_ASSERT_EQUAL_FATAL(tpu_queue_init(&q[i]), 0);
  tpu_queue_defer_begin();
  for (int k = 0; k < PER; k++)
    for (int i = 0; i < NQ; i++) {
      m[i][k].id = k;
      tpu_queue_push(&q[i], &m[i][k].link);
    }
  int early = 0;
  for (int i = 0; i < NQ; i++) early += readable(&q[i]);
  CU_ASSERT(early > 0 && early < NQ); /* some went at once: the slots ran out */
  tpu_queue_defer_flush();
  for (int i = 0; i < NQ; i++) {
    CU_ASSERT_EQUAL(wakeups(&q[i]), 1);
    expect_ids(&q[i], 0, PER);
    tpu_queue_destroy(&q[i]);
  }
}

/* No file descriptor left: init fails with errno set. In a child process, so that no other
 * thread of the runner meets the limit. */
static void test_init_fails(void) {
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (pid == 0) {
    struct rlimit none = {0, 0};
    if (setrlimit(RLIMIT_NOFILE, &none) != 0) _exit(3);
    tpu_queue_t q;
    errno = 0;
    int rc = tpu_queue_init(&q);
    _exit(rc == -1 && errno == EMFILE ? 0 : rc == 0 ? 1 : 2);
  }
  int status = 0;
  CU_ASSERT_EQUAL_FATAL(waitpid(pid, &status, 0), pid);
  CU_ASSERT_TRUE(WIFEXITED(status));
  CU_ASSERT_EQUAL(WEXITSTATUS(status), 0); /* 1: init succeeded, 2: wrong errno, 3: setrlimit */
}

/* ---- ping-pong between two event loops ---- */

enum { FROM_MAIN, FROM_A, FROM_B };

typedef struct {
  tpu_qnode_t link;
  int ball;   /* which message */
  int hop;    /* hops done: even ones land on B, odd ones on A */
  int from;   /* FROM_*: who pushed it last */
  long seq;   /* that sender's push count when it pushed: per-sender FIFO check */
} ball_t;

typedef struct side {
  int me; /* FROM_A or FROM_B */
  tpu_queue_t q;
  struct side *peer;
  struct event_base *base;
  int defer;          /* push through tpu_queue_defer_* (as the batcher does) */
  int hops;           /* hops per ball */
  long want;          /* messages to receive before stopping */
  long received, sent, wakes;
  long next_seq[3];   /* per sender */
  int *next_hop;      /* per ball, shared: each hop lands on one side only */
  long errors;        /* order, count or hop mismatches */
  int timed_out;
} side_t;

static void on_wake(evutil_socket_t fd, short what, void *arg) {
  side_t *s = arg;
  s->wakes++;
  tpu_qnode_t *l = tpu_queue_take(&s->q);
  if (s->defer) tpu_queue_defer_begin();
  while (l) {
    ball_t *b = tpu_container_of(l, ball_t, link);
    l = l->next; /* before the push reuses the link */
    if (b->seq != s->next_seq[b->from]++) s->errors++;
    if (b->hop != s->next_hop[b->ball]) s->errors++;
    s->received++;
    b->hop++;
    s->next_hop[b->ball] = b->hop;
    if (b->hop < s->hops) {
      b->from = s->me;
      b->seq = s->sent++;
      tpu_queue_push(&s->peer->q, &b->link);
    }
  }
  if (s->defer) tpu_queue_defer_flush();
  if (s->received >= s->want) event_base_loopbreak(s->base);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg) {
  side_t *s = arg;
  s->timed_out = 1;
  event_base_loopbreak(s->base);
}

static void *side_main(void *arg) {
  side_t *s = arg;
  struct event *wake = event_new(s->base, tpu_queue_fd(&s->q), EV_READ | EV_PERSIST, on_wake, s);
  struct event *dog = evtimer_new(s->base, on_watchdog, s);
  struct timeval limit = {.tv_sec = 20}; /* a generous bound, not a timing assertion */
  if (wake && dog && event_add(wake, NULL) == 0 && event_add(dog, &limit) == 0)
    event_base_dispatch(s->base);
  else
    s->errors++;
  if (wake) event_free(wake);
  if (dog) event_free(dog);
  return NULL;
}

/* `nballs` messages, each making `hops` hops: main → B → A → B ... (hops even, so each ball's
 * last hop lands on A). B pushes its answers deferred when b_defers. */
static void pingpong(int nballs, int hops, int b_defers) {
  side_t a = {.me = FROM_A, .hops = hops}, b = {.me = FROM_B, .hops = hops, .defer = b_defers};
  ball_t balls[64];
  int next_hop[64] = {0};
  CU_ASSERT_FATAL(nballs <= 64 && hops % 2 == 0);
  a.peer = &b;
  b.peer = &a;
  a.next_hop = b.next_hop = next_hop;
  a.want = b.want = (long)nballs * hops / 2;
  CU_ASSERT_EQUAL_FATAL(tpu_queue_init(&a.q), 0);
  CU_ASSERT_EQUAL_FATAL(tpu_queue_init(&b.q), 0);
  a.base = event_base_new();
  b.base = event_base_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(a.base);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b.base);
  pthread_t ta, tb;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&ta, NULL, side_main, &a), 0);
  CU_ASSERT_EQUAL_FATAL(pthread_create(&tb, NULL, side_main, &b), 0);
  /* Served from the main thread while both loops run: a third producer. */
  for (int i = 0; i < nballs; i++) {
    balls[i] = (ball_t){.ball = i, .hop = 0, .from = FROM_MAIN, .seq = i};
    tpu_queue_push(&b.q, &balls[i].link);
  }
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  CU_ASSERT_FALSE(a.timed_out);
  CU_ASSERT_FALSE(b.timed_out);
  CU_ASSERT_EQUAL(a.errors, 0);
  CU_ASSERT_EQUAL(b.errors, 0);
  CU_ASSERT_EQUAL(a.received, a.want);
  CU_ASSERT_EQUAL(b.received, b.want);
  CU_ASSERT_EQUAL(b.next_seq[FROM_MAIN], nballs);
  CU_ASSERT_EQUAL(b.next_seq[FROM_A], a.sent);
  CU_ASSERT_EQUAL(a.next_seq[FROM_B], b.sent);
  CU_ASSERT_EQUAL(a.sent + b.sent + nballs, (long)nballs * hops);
  for (int i = 0; i < nballs; i++) CU_ASSERT_EQUAL(balls[i].hop, hops);
  /* Nothing stranded: both queues are empty. */
  CU_ASSERT_PTR_NULL(tpu_queue_take(&a.q));
  CU_ASSERT_PTR_NULL(tpu_queue_take(&b.q));
  /* Every wake-up found messages, at most one per message (bursts share one). */
  CU_ASSERT(a.wakes >= 1 && a.wakes <= a.received);
  if (a.errors || b.errors || a.timed_out || b.timed_out)
    fprintf(stderr, "\npingpong(%d, %d): A %ld/%ld received, %ld errors; B %ld/%ld, %ld errors\n",
            nballs, hops, a.received, a.want, a.errors, b.received, b.want, b.errors);
  event_base_free(a.base);
  event_base_free(b.base);
  tpu_queue_destroy(&a.q);
  tpu_queue_destroy(&b.q);
}

/* One message in flight: every push finds the queue empty and wakes the other loop. */
static void test_pingpong(void) { pingpong(1, 10000, 0); }

/* Many in flight: takes of several messages, pushes racing takes, deferred pushes from B. */
static void test_pingpong_burst(void) {
  pingpong(16, 2000, 0);
  pingpong(16, 2000, 1);
}

TPU_TEST_SUITE(server_queue,
               {"order", test_order},
               {"wakeup", test_wakeup},
               {"defer", test_defer},
               {"defer_overflow", test_defer_overflow},
               {"init_fails", test_init_fails},
               {"pingpong", test_pingpong},
               {"pingpong_burst", test_pingpong_burst})
