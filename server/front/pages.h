/*
 * pages.h - the HTTP port's debug pages as JSON (pages.c).
 */
#ifndef TPU_PAGES_H
#define TPU_PAGES_H

#include <jansson.h>

struct tpu_server;

/* The effective options, with the bound ports. */
json_t *tpu__page_debug_config(struct tpu_server *srv);
/* Every model version: state, precision, memory, tensors, batching and its counters. */
json_t *tpu__page_debug_models(struct tpu_server *srv);
/* The engine: ISA, threads, systolic array, calls, MACs, utilization. */
json_t *tpu__page_debug_engine(struct tpu_server *srv);
/* "READY", "FAILED" or "UNAVAILABLE". */
const char *tpu__state_name(int state);

#endif /* TPU_PAGES_H */
