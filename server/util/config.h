/*
 * config.h - tpud's options: safe defaults, a JSON config file, command-line flags.
 *
 * DESIGN
 * One table (config.c) names every option once: its flag, its JSON key (the same name), its type,
 * range, default and unit. Defaults are applied first, then `--config FILE` (a JSON object whose
 * keys are the option names without the dashes), then the remaining flags, so flags win.
 * Unknown flags or keys, malformed or out-of-range values are refused with a message that names
 * the option and what was expected; main() exits 2 on them. Parsing is pure (no global state)
 * so it is unit-tested directly.
 */
#ifndef TPU_CONFIG_H
#define TPU_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpus.h"
#include "log.h"

typedef struct {
  char models[4096];           /* model repository directory */
  char listen[256];            /* address both listeners bind */
  unsigned port;               /* native protocol port; 0 = pick a free one */
  unsigned http_port;          /* HTTP/JSON port (OIP v2 REST, /metrics, /v2/debug); 0 = free */
  uint64_t http_max_body_bytes;   /* bytes: largest HTTP request body (413 above) */
  unsigned http_max_header_bytes; /* bytes: request line + headers of one HTTP request */
  unsigned http_timeout_s;     /* seconds: HTTP read/write timeout, also the keep-alive idle time */
  unsigned threads;            /* compute threads (engine and MatMul pool) */
  unsigned io_threads;         /* network I/O threads */
  unsigned spin_us;            /* µs a compute thread spins for its next job; 0 = never */
  unsigned max_connections;    /* open connections at once; more are closed at accept */
  unsigned idle_timeout_s;     /* seconds; a connection with nothing in flight is closed after */
  uint64_t max_message_bytes;  /* bytes: largest frame accepted or sent */
  unsigned max_inflight_per_conn; /* requests; reading pauses above this */
  uint64_t max_unsent_bytes;   /* bytes of unsent output per connection; reading pauses above */
  uint64_t max_buffered_bytes; /* bytes of answers unsent or reserved, all connections together */
  unsigned grpc_max_streams;   /* gRPC/HTTP2: SETTINGS_MAX_CONCURRENT_STREAMS */
  unsigned grpc_max_header_bytes; /* gRPC/HTTP2: largest request header list (RFC 7541 size) */
  unsigned queue_rows;         /* rows queued per model version before RESOURCE_EXHAUSTED */
  uint64_t model_memory_limit; /* bytes one model version may need at load; 0 = no limit */
  unsigned drain_timeout_s;    /* seconds in-flight requests get to finish on SIGTERM */
  unsigned poll_seconds;       /* seconds: repository rescan period; 0 disables */
  /* Audit log (audit.h); audit_log "" = audit off. */
  char audit_log[4096];        /* the log file */
  char audit_key[4096];        /* HMAC-SHA256 key file; "" = plain SHA-256 */
  char audit_head[4096];       /* head file; "" = <audit_log>.head; "none" = no head file */
  int audit_fsync;             /* tpu_audit_fsync_t (fsync.h): interval (default), always, never */
  unsigned audit_fsync_interval_ms; /* milliseconds between fdatasyncs with `interval` */
  uint64_t audit_max_bytes;    /* bytes: rotate a file at this size; 0 = only on SIGHUP */
  int audit_fail_open;         /* 1: serve on (counting lost records) when it cannot write */
  /* Payload store (audit/payload.h); payload_dir "" = none. */
  char payload_dir[4096];      /* the store's directory */
  char payload_capture[8];     /* "all" (default) or "none": models capture unless model.json
                                * says otherwise / only when model.json asks */
  char payload_key[4096];      /* AES-256-GCM key file; "" = entries in clear */
  uint64_t payload_max_bytes;  /* bytes the store holds at most; 0 = no limit */
  uint64_t payload_max_age_s;  /* seconds an entry is kept; 0 = no limit */
  /* TLS and access control (tls.h, auth.h); "" = off. */
  char tls_cert[4096];         /* PEM certificate chain: TLS on the native port */
  char tls_key[4096];          /* PEM private key; "" = in tls_cert */
  char tls_client_ca[4096];    /* PEM CA bundle: require and verify client certificates */
  char tls_client_role[16];    /* role of a client certificate without a `cert` line */
  int http_tls;                /* 1: HTTPS on the HTTP port too when tls_cert is set */
  unsigned tls_handshake_timeout_s; /* seconds a TLS handshake may take */
  char tokens[4096];           /* tokens file: bearer token digests → name, role */
  int auth_open_health;        /* 1: health endpoints need no credentials */
  int auth_open_metrics;       /* 1: /metrics needs no credentials */
  int strict_readiness;        /* 1: ready only when every configured model is ready */
  tpu_log_level_t log_level;
  tpu_log_format_t log_format; /* stderr lines: text or json (log.h) */
  uint64_t given;              /* which options a flag or the file set (tpu_config_given) */
  tpu_cpus_t cpus;             /* the CPUs the defaults were fitted to (tpu_config_fit_cpus) */
} tpu_config_t;

/* Fills every option with its default, threads, io-threads and spin-us fitted to this process's
 * CPUs (tpu_cpus_read, tpu_config_fit_cpus). */
void tpu_config_defaults(tpu_config_t *cfg);

/* Sets threads, io-threads and spin-us that no flag or file gave from the usable CPU count
 * (cpus.h), and keeps `cpus` in cfg:
 *   io-threads = usable / 4 (at least 1, at most 64): JSON and TLS work scales with cores, but
 *                one thread keeps a small machine's cores for compute;
 *   threads    = usable, less the I/O threads from 4 CPUs on (below that they share);
 *   spin-us    = 50, or 0 (never spin) when a spinning thread has no core of its own: one CPU,
 *                or threads + io-threads above the usable count by more than one (a 2-CPU
 *                machine's 2 compute + 1 I/O threads spin: the engine stops the spin after a
 *                model's last layer, so it only bridges the layers of one batch).
 * tpu_config_parse calls it after the flags; call it again after changing cfg->cpus. */
void tpu_config_fit_cpus(tpu_config_t *cfg, const tpu_cpus_t *cpus);

/* Outcome of tpu_config_parse. */
typedef enum {
  TPU_CONFIG_OK = 0,   /* run the server */
  TPU_CONFIG_HELP = 1, /* --help was given: print tpu_config_usage and exit 0 */
  TPU_CONFIG_ERROR = 2 /* err holds the message; exit 2 */
} tpu_config_result_t;

/* Parses argv (argv[0] is skipped) over the defaults: the file named by --config first, then the
 * flags (flags win). Accepts "--name VALUE" and "--name=VALUE". On TPU_CONFIG_ERROR, err (of
 * errlen bytes) says which option was wrong and what was expected. */
tpu_config_result_t tpu_config_parse(tpu_config_t *cfg, int argc, char **argv, char *err,
                                     size_t errlen);

/* Applies a JSON object (the contents of a config file) over cfg; returns -1 with err set on an
 * unknown key or a bad value. `what` names the source in messages (the file name). */
int tpu_config_apply_json(tpu_config_t *cfg, const char *json, const char *what, char *err,
                          size_t errlen);

/* The configuration as a JSON object, one key per option (the option names), for
 * GET /v2/debug/config. The caller json_decref()s it; NULL when out of memory. */
struct json_t;
struct json_t *tpu_config_to_json(const tpu_config_t *cfg);

/* Whether option `name` (e.g. "max-connections") was set by a flag or the config file rather
 * than left at its default. */
int tpu_config_given(const tpu_config_t *cfg, const char *name);

/* Writes the --help text: every option with its default and unit. */
void tpu_config_usage(FILE *out);

#endif /* TPU_CONFIG_H */
