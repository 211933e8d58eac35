/*
 * main.c - tpud: parse the configuration, create the engine, serve, exit.
 *
 * DESIGN
 * Start-up errors (bad options: exit 2; cannot bind or start threads: exit 1) end the process
 * with a message; everything after start-up is the server's, which never exits the process.
 * SIGTERM/SIGINT drain and return here, and tpud exits 0.
 */
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "log.h"
#include "server.h"
#include "thread.h"
#include "tpu_engine.h"

int main(int argc, char **argv) {
  tpu_config_t cfg;
  char err[1024];
  tpu_config_defaults(&cfg);
  switch (tpu_config_parse(&cfg, argc, argv, err, sizeof err)) {
  case TPU_CONFIG_HELP:
    tpu_config_usage(stdout);
    return 0;
  case TPU_CONFIG_ERROR:
    fprintf(stderr, "tpud: %s\n", err);
    return 2;
  case TPU_CONFIG_OK:
    break;
  }
  tpu_log_set_level(cfg.log_level);
  tpu_log_set_format(cfg.log_format);
  char cpus[160];
  tpu_cpus_describe(&cfg.cpus, cpus, sizeof cpus);
  tpu_log_info("tpud starting: models %s, %u compute threads%s, %u I/O threads%s, spin %u us%s "
               "(usable CPUs %s), port %u, http-port %u",
               cfg.models, cfg.threads, tpu_config_given(&cfg, "threads") ? "" : " (default)",
               cfg.io_threads, tpu_config_given(&cfg, "io-threads") ? "" : " (default)",
               cfg.spin_us, tpu_config_given(&cfg, "spin-us") ? "" : " (default)", cpus, cfg.port,
               cfg.http_port);
  tpu_engine_config_t ecfg = {.threads = cfg.threads,
                              .spin_us = cfg.spin_us ? cfg.spin_us : TPU_ENGINE_SPIN_OFF};
  tpu_engine_t *engine = NULL;
  /* The engine's pool threads start with the asynchronous signals blocked (thread.h): they are
   * the main thread's, also during the start-up loads, when a SIGHUP must not kill tpud. */
  sigset_t old;
  tpu_thread_block_signals(&old);
  tpu_status_t st = tpu_engine_create(&ecfg, &engine);
  tpu_thread_restore_signals(&old);
  if (st != TPU_OK) {
    tpu_log_error("cannot create the engine: %s%s", tpu_strerror(st),
                  st == TPU_ENOTSUP ? " (TPUD_ISA names a kernel set this CPU cannot run)"
                  : st == TPU_EINVAL ? " (TPUD_ISA must be ref, avx2, avx512 or amx)"
                                     : "");
    return 1;
  }
  char isa_line[512];
  tpu_engine_describe(engine, isa_line, sizeof isa_line);
  tpu_log_info("engine: %s", isa_line);
  tpu_server_t *srv = NULL;
  if (tpu_server_create(&cfg, engine, &srv, err, sizeof err) != 0) {
    tpu_log_error("cannot start: %s", err);
    tpu_engine_free(engine);
    return 1;
  }
  int rc = tpu_server_run(srv);
  tpu_server_free(srv);
  tpu_engine_free(engine);
  return rc;
}
