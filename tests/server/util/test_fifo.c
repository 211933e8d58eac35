/*
 * test_fifo.c - util/fifo.c: the intrusive list (tpu_qlist_t) and the bounded blocking FIFO
 * (tpu_fifo_t): order, the bound, close (refusing pushes, draining, waking a waiting taker),
 * take-all, and producers and consumers on real threads.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np: a taker that never wakes fails the test, not hang */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fifo.h"
#include "tpu_test.h"

typedef struct {
  int producer, seq;
  tpu_qnode_t link;
} item_t;

static item_t *item_of(tpu_qnode_t *n) { return n ? tpu_container_of(n, item_t, link) : NULL; }

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Joins t within ms milliseconds: 0, or ETIMEDOUT when the thread is still running. */
static int join_within(pthread_t t, void **ret, long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  return pthread_timedjoin_np(t, ret, &ts);
}

/* ---- tpu_qlist_t ---- */

static void test_qlist(void) {
  tpu_qlist_t l = {0};
  item_t it[5];
  CU_ASSERT_PTR_NULL(tpu_qlist_pop(&l));
  for (int i = 0; i < 5; i++) {
    it[i].seq = i;
    tpu_qlist_push(&l, &it[i].link);
  }
  CU_ASSERT_EQUAL(l.len, 5);
  CU_ASSERT_EQUAL(item_of(tpu_qlist_pop(&l))->seq, 0);
  CU_ASSERT_EQUAL(item_of(tpu_qlist_pop(&l))->seq, 1);
  CU_ASSERT_EQUAL(l.len, 3);
  tpu_qnode_t *all = tpu_qlist_take_all(&l);
  CU_ASSERT_EQUAL(l.len, 0);
  CU_ASSERT_PTR_NULL(l.head);
  CU_ASSERT_PTR_NULL(l.tail);
  int want = 2;
  for (tpu_qnode_t *n = all; n; n = n->next) CU_ASSERT_EQUAL(item_of(n)->seq, want++);
  CU_ASSERT_EQUAL(want, 5);
  /* Emptied by pops, the list takes pushes again (tail was reset). */
  tpu_qlist_push(&l, &it[0].link);
  CU_ASSERT_PTR_EQUAL(tpu_qlist_pop(&l), &it[0].link);
  CU_ASSERT_PTR_NULL(tpu_qlist_pop(&l));
  tpu_qlist_push(&l, &it[1].link);
  CU_ASSERT_PTR_EQUAL(l.head, &it[1].link);
  CU_ASSERT_PTR_EQUAL(l.tail, &it[1].link);
  CU_ASSERT_PTR_NULL(tpu_qlist_take_all(&l)->next);
  CU_ASSERT_PTR_NULL(tpu_qlist_take_all(&l));
}

/* ---- tpu_fifo_t, one thread ---- */

static void test_fifo_order_and_take_all(void) {
  tpu_fifo_t f;
  CU_ASSERT_EQUAL_FATAL(tpu_fifo_init(&f, 0), 0);
  item_t it[100];
  for (int i = 0; i < 100; i++) {
    it[i].seq = i;
    CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[i].link), TPU_FIFO_OK);
  }
  CU_ASSERT_EQUAL(tpu_fifo_len(&f), 100);
  for (int i = 0; i < 60; i++) CU_ASSERT_EQUAL(item_of(tpu_fifo_take(&f))->seq, i);
  tpu_qnode_t *rest = tpu_fifo_take_all(&f);
  CU_ASSERT_EQUAL(tpu_fifo_len(&f), 0);
  int want = 60;
  for (tpu_qnode_t *n = rest; n; n = n->next) CU_ASSERT_EQUAL(item_of(n)->seq, want++);
  CU_ASSERT_EQUAL(want, 100);
  CU_ASSERT_PTR_NULL(tpu_fifo_take_all(&f)); /* empty: NULL, without waiting */
  tpu_fifo_destroy(&f);
}

static void test_fifo_bound(void) {
  tpu_fifo_t f;
  CU_ASSERT_EQUAL_FATAL(tpu_fifo_init(&f, 2), 0);
  item_t it[3];
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[0].link), TPU_FIFO_OK);
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[1].link), TPU_FIFO_OK);
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[2].link), TPU_FIFO_FULL);
  CU_ASSERT_EQUAL(tpu_fifo_len(&f), 2);
  CU_ASSERT_PTR_EQUAL(tpu_fifo_take(&f), &it[0].link);
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[2].link), TPU_FIFO_OK); /* room again */
  CU_ASSERT_PTR_EQUAL(tpu_fifo_take(&f), &it[1].link);
  CU_ASSERT_PTR_EQUAL(tpu_fifo_take(&f), &it[2].link);
  /* Closed and full: closed is the answer (the FIFO will never take it). */
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[0].link), TPU_FIFO_OK);
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[1].link), TPU_FIFO_OK);
  tpu_fifo_close(&f);
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[2].link), TPU_FIFO_CLOSED);
  CU_ASSERT_PTR_NOT_NULL(tpu_fifo_take_all(&f));
  tpu_fifo_destroy(&f);
}

/* Close refuses pushes but keeps what is queued: takes drain it, then return NULL at once. */
static void test_fifo_close_drains(void) {
  tpu_fifo_t f;
  CU_ASSERT_EQUAL_FATAL(tpu_fifo_init(&f, 0), 0);
  item_t it[3];
  for (int i = 0; i < 3; i++) {
    it[i].seq = i;
    CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it[i].link), TPU_FIFO_OK);
  }
  tpu_fifo_close(&f);
  tpu_fifo_close(&f); /* idempotent */
  item_t late;
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &late.link), TPU_FIFO_CLOSED);
  for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(item_of(tpu_fifo_take(&f))->seq, i);
  CU_ASSERT_PTR_NULL(tpu_fifo_take(&f));
  CU_ASSERT_PTR_NULL(tpu_fifo_take(&f));
  CU_ASSERT_EQUAL(tpu_fifo_len(&f), 0);
  tpu_fifo_destroy(&f);
}

/* ---- tpu_fifo_t, threads ---- */

typedef struct {
  tpu_fifo_t *f;
  atomic_int returned;
  tpu_qnode_t *got;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  w->got = tpu_fifo_take(w->f);
  atomic_store(&w->returned, 1);
  return NULL;
}

/* The FIFOs and waiters of these tests are static: a thread that never wakes (the failure they
 * catch) keeps using them after the test has given up on it. */
static tpu_qnode_t not_taken;

/* A taker blocked on an empty FIFO wakes when it is closed, with NULL. */
static void test_fifo_close_wakes_waiting_taker(void) {
  static tpu_fifo_t f;
  static waiter_t w[3];
  CU_ASSERT_EQUAL_FATAL(tpu_fifo_init(&f, 0), 0);
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    w[i] = (waiter_t){.f = &f, .got = &not_taken};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, waiter_main, &w[i]), 0);
  }
  sleep_ms(50);
  for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(atomic_load(&w[i].returned), 0); /* waiting */
  tpu_fifo_close(&f);
  for (int i = 0; i < 3; i++) {
    int rc = join_within(t[i], NULL, 5000);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0) CU_FAIL_FATAL("a taker did not wake on close"); /* t[i] still blocks on f */
    CU_ASSERT_PTR_NULL(w[i].got);
  }
  tpu_fifo_destroy(&f);
}

/* A push wakes a taker blocked on an empty FIFO, which gets that node. */
static void test_fifo_push_wakes_waiting_taker(void) {
  static tpu_fifo_t f;
  static waiter_t w;
  static item_t it = {.seq = 7};
  CU_ASSERT_EQUAL_FATAL(tpu_fifo_init(&f, 0), 0);
  w = (waiter_t){.f = &f, .got = &not_taken};
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, waiter_main, &w), 0);
  sleep_ms(30);
  CU_ASSERT_EQUAL(atomic_load(&w.returned), 0);
  CU_ASSERT_EQUAL(tpu_fifo_push(&f, &it.link), TPU_FIFO_OK);
  int rc = join_within(t, NULL, 5000);
  CU_ASSERT_EQUAL(rc, 0);
  if (rc != 0) CU_FAIL_FATAL("a taker did not wake on push");
  CU_ASSERT_PTR_EQUAL(w.got, &it.link);
  tpu_fifo_destroy(&f);
}

#define PRODUCERS 4
#define PER_PRODUCER 10000

typedef struct {
  tpu_fifo_t *f;
  int id;
  item_t *items;
} producer_t;

static void *producer_main(void *arg) {
  producer_t *p = arg;
  for (int i = 0; i < PER_PRODUCER; i++) {
    item_t *it = &p->items[i];
    it->producer = p->id;
    it->seq = i;
    tpu_fifo_status_t st;
    while ((st = tpu_fifo_push(p->f, &it->link)) == TPU_FIFO_FULL) sched_yield();
    if (st != TPU_FIFO_OK) break; /* closed under us: the test fails on the count */
  }
  return NULL;
}

typedef struct {
  tpu_fifo_t *f;
  int *last;          /* per producer: the last seq this consumer saw (one consumer only) */
  atomic_int *seen;   /* per item: times taken */
  long taken;
  int out_of_order;
} consumer_t;

static void *consumer_main(void *arg) {
  consumer_t *c = arg;
  for (tpu_qnode_t *n; (n = tpu_fifo_take(c->f));) {
    item_t *it = item_of(n);
    if (it->producer < 0 || it->producer >= PRODUCERS || it->seq < 0 || it->seq >= PER_PRODUCER) {
      c->out_of_order++;
      continue;
    }
    atomic_fetch_add(&c->seen[it->producer * PER_PRODUCER + it->seq], 1);
    if (c->last) {
      if (it->seq != c->last[it->producer] + 1) c->out_of_order++;
      c->last[it->producer] = it->seq;
    }
    c->taken++;
  }
  return NULL;
}

/* PRODUCERS threads push through a small bound (retrying while it is full) to `consumers`
 * threads; then close. Every item is taken exactly once, and with one consumer each producer's
 * items arrive in the order pushed. */
static void producers_consumers(int consumers, size_t bound) {
  static tpu_fifo_t f; /* static, as above: a stuck consumer outlives a failed test */
  static consumer_t c[4];
  static int last[PRODUCERS];
  CU_ASSERT_EQUAL_FATAL(tpu_fifo_init(&f, bound), 0);
  item_t *items = calloc(PRODUCERS * PER_PRODUCER, sizeof *items);
  atomic_int *seen = calloc(PRODUCERS * PER_PRODUCER, sizeof *seen);
  CU_ASSERT_PTR_NOT_NULL_FATAL(items);
  CU_ASSERT_PTR_NOT_NULL_FATAL(seen);
  for (int i = 0; i < PRODUCERS; i++) last[i] = -1;
  pthread_t ct[4], pt[PRODUCERS];
  producer_t p[PRODUCERS];
  for (int i = 0; i < consumers; i++) {
    c[i] = (consumer_t){.f = &f, .last = consumers == 1 ? last : NULL, .seen = seen};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&ct[i], NULL, consumer_main, &c[i]), 0);
  }
  for (int i = 0; i < PRODUCERS; i++) {
    p[i] = (producer_t){.f = &f, .id = i, .items = items + i * PER_PRODUCER};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&pt[i], NULL, producer_main, &p[i]), 0);
  }
  for (int i = 0; i < PRODUCERS; i++) pthread_join(pt[i], NULL);
  tpu_fifo_close(&f); /* the consumers drain what is left, then take NULL */
  long taken = 0;
  int disorder = 0;
  for (int i = 0; i < consumers; i++) {
    int rc = join_within(ct[i], NULL, 30000);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0) CU_FAIL_FATAL("a consumer did not finish after close");
    taken += c[i].taken;
    disorder += c[i].out_of_order;
  }
  CU_ASSERT_EQUAL(taken, PRODUCERS * PER_PRODUCER);
  CU_ASSERT_EQUAL(disorder, 0);
  int once = 1;
  for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++) once &= atomic_load(&seen[i]) == 1;
  CU_ASSERT(once);
  CU_ASSERT_EQUAL(tpu_fifo_len(&f), 0);
  tpu_fifo_destroy(&f);
  free(seen);
  free(items);
}

static void test_fifo_producers_one_consumer(void) { producers_consumers(1, 8); }
static void test_fifo_producers_consumers(void) { producers_consumers(3, 8); }
static void test_fifo_producers_consumers_unbounded(void) { producers_consumers(3, 0); }

TPU_TEST_SUITE(server_fifo, {"qlist", test_qlist},
               {"order_and_take_all", test_fifo_order_and_take_all},
               {"bound", test_fifo_bound}, {"close_drains", test_fifo_close_drains},
               {"close_wakes_waiting_taker", test_fifo_close_wakes_waiting_taker},
               {"push_wakes_waiting_taker", test_fifo_push_wakes_waiting_taker},
               {"producers_one_consumer", test_fifo_producers_one_consumer},
               {"producers_consumers", test_fifo_producers_consumers},
               {"producers_consumers_unbounded", test_fifo_producers_consumers_unbounded})
