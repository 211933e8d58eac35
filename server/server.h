/*
 * server.h - the tpud daemon core: models, I/O threads, batchers, the MatMul pool, shutdown.
 *
 * DESIGN
 * tpu_server_create loads every <models>/<name>/<version>/ at start (a failed load is logged,
 * listed as FAILED in the repository index, and skipped), starts one batcher per loaded version,
 * the MatMul pool and the I/O threads, and binds the listener. tpu_server_run serves until
 * SIGTERM/SIGINT (or tpu_server_shutdown): then it stops accepting, answers new requests with
 * UNAVAILABLE, lets in-flight requests finish within the drain timeout, flushes the responses and
 * returns. The server never exits the process; main() does.
 */
#ifndef TPU_SERVER_H
#define TPU_SERVER_H

#include "config.h"
#include "tpu_engine.h"

typedef struct tpu_server tpu_server_t;

/* Creates the server on `engine` (which must outlive it): loads models, starts threads, binds
 * the native listener (cfg->port 0 picks a free port). Returns 0, or -1 with err set (start-up
 * errors: bind failure, thread creation). */
int tpu_server_create(const tpu_config_t *cfg, tpu_engine_t *engine, tpu_server_t **out,
                      char *err, size_t errlen);

/* The port the native listener is bound to. */
unsigned tpu_server_port(const tpu_server_t *srv);

/* Number of model versions that loaded and serve. */
size_t tpu_server_ready_models(const tpu_server_t *srv);

/* Serves until a shutdown signal; returns 0 after a graceful drain. Call from the thread that
 * created the server. */
int tpu_server_run(tpu_server_t *srv);

/* Stops threads (if still running) and frees everything; accepts NULL. */
void tpu_server_free(tpu_server_t *srv);

/* Logs every counter (also done on SIGUSR1 and at exit). */
void tpu_server_log_stats(tpu_server_t *srv);

#endif /* TPU_SERVER_H */
