/*
 * graph_test.h - what the graph suites (test_graph*.c) share to build graphs: one engine for the
 * process, a fresh graph, and the "a,b,,c" name lists the suites write nodes with.
 *
 * DESIGN
 * Header-only static helpers (each suite is its own translation unit of the one unit runner):
 * failures are CUnit fatal assertions, so a suite's test stops at the first broken step.
 */
#ifndef TPU_GRAPH_TEST_H
#define TPU_GRAPH_TEST_H

#include <stdio.h>
#include <string.h>

#include "tpu_graph.h"
#include "tpu_test.h"

/* The engine the graph suites compile on (created once, kept for the process). */
static inline tpu_engine_t *tg_engine(void) {
  static tpu_engine_t *e;
  if (!e) CU_ASSERT_FATAL(tpu_engine_create(NULL, &e) == TPU_OK);
  return e;
}

/* A new, empty graph with no error yet. */
static inline tpu_graph_t *tg_new(void) {
  tpu_graph_t *g = NULL;
  CU_ASSERT_FATAL(tpu_graph_new(&g) == TPU_OK && g);
  CU_ASSERT_STRING_EQUAL(tpu_graph_error(g), "");
  return g;
}

/* Splits "a,b,,c" into names (pointers into buf); "" entries are absent optional tensors. */
static inline size_t tg_split(const char *list, char *buf, size_t len, const char **names) {
  size_t n = 0;
  if (!list || !*list) return 0;
  snprintf(buf, len, "%s", list);
  char *p = buf;
  for (;;) {
    names[n++] = p;
    char *comma = strchr(p, ',');
    if (!comma) break;
    *comma = 0;
    p = comma + 1;
  }
  return n;
}

#endif /* TPU_GRAPH_TEST_H */
