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

/* Graph inputs, initializers (data of the dtype's natural layout), name lists and attributes,
 * each of which must succeed. */
static inline void tg_input(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dt, int rank,
                const int64_t *dims) {
  CU_ASSERT_FATAL(tpu_graph_add_tensor(g, name, dt, rank, dims) == TPU_OK);
}

static inline size_t tg_count(int rank, const int64_t *dims) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  return n;
}

static inline void tg_init(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dt, int rank,
                  const int64_t *dims, const void *data) {
  size_t bytes = tg_count(rank, dims) * tpu_graph_dtype_size(dt);
  CU_ASSERT_FATAL(tpu_graph_add_initializer(g, name, dt, rank, dims, data, bytes) == TPU_OK);
}

static inline void tg_io(tpu_graph_t *g, const char *ins, const char *outs) {
  char b1[256], b2[256];
  const char *in[16], *out[16];
  size_t nin = tg_split(ins, b1, sizeof b1, in), nout = tg_split(outs, b2, sizeof b2, out);
  CU_ASSERT_FATAL(tpu_graph_set_inputs(g, nin, in) == TPU_OK);
  CU_ASSERT_FATAL(tpu_graph_set_outputs(g, nout, out) == TPU_OK);
}

static inline void tg_attr_i(tpu_graph_t *g, size_t n, const char *name, int64_t v) {
  tpu_graph_attr_t a = {.name = name, .type = TPU_GRAPH_ATTR_INT, .i = v};
  CU_ASSERT_FATAL(tpu_graph_add_attr(g, n, &a) == TPU_OK);
}

#endif /* TPU_GRAPH_TEST_H */
