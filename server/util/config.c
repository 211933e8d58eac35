/*
 * config.c - the option table, --help, the JSON config file and flag parsing.
 *
 * DESIGN
 * Each option appears exactly once, in `options` below; --help, the JSON keys and the flags are
 * all generated from it, so they cannot disagree. Numbers are parsed strictly (decimal digits
 * only, range-checked); nothing here touches global state or exits.
 */
#include "config.h"

#include "file.h"
#include "fsync.h"
#include "tpu_text.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* OPT_FSYNC: always|interval|never (tpu_audit_fsync_t); OPT_LOGFMT: text|json
 * (tpu_log_format_t); OPT_BOOL: a switch (int 0/1): the bare
 * flag sets it, "--name=false" clears it, JSON true/false. */
typedef enum { OPT_STR, OPT_UINT, OPT_U64, OPT_LEVEL, OPT_FSYNC, OPT_BOOL, OPT_LOGFMT } opt_type_t;

typedef struct {
  const char *name;   /* flag without "--", and JSON key */
  opt_type_t type;
  size_t offset;      /* into tpu_config_t */
  size_t size;        /* OPT_STR: buffer size */
  uint64_t min, max;  /* numeric range, inclusive */
  const char *dflt;   /* default, as shown by --help */
  const char *unit;   /* unit shown by --help ("" when none) */
  const char *help;
} opt_t;

#define OFF(f) offsetof(tpu_config_t, f)
#define SZ(f) sizeof(((tpu_config_t *)0)->f)

static const opt_t options[] = {
    {"models", OPT_STR, OFF(models), SZ(models), 0, 0, "./models", "directory",
     "model repository: <dir>/<name>/<version>/model.json"},
    {"listen", OPT_STR, OFF(listen), SZ(listen), 0, 0, "127.0.0.1", "address",
     "address the listeners bind"},
    {"port", OPT_UINT, OFF(port), 0, 0, 65535, "8500", "port",
     "native protocol port; 0 picks a free port (the listening log line names it)"},
    {"http-port", OPT_UINT, OFF(http_port), 0, 0, 65535, "8501", "port",
     "HTTP/1.1 port: OIP v2 REST JSON, /metrics, /v2/debug; 0 picks a free port"},
    {"http-max-body-bytes", OPT_U64, OFF(http_max_body_bytes), 0, 1024, (uint64_t)1 << 31,
     "16777216", "bytes", "largest HTTP request body; larger ones get 413 (16 MiB)"},
    {"http-max-header-bytes", OPT_UINT, OFF(http_max_header_bytes), 0, 256, 1u << 20, "16384",
     "bytes", "largest HTTP request line plus headers; larger requests are refused"},
    {"http-timeout-s", OPT_UINT, OFF(http_timeout_s), 0, 1, 86400, "60", "seconds",
     "HTTP read and write timeout; also closes idle keep-alive connections"},
    {"threads", OPT_UINT, OFF(threads), 0, 1, 1024, "usable CPUs, less the I/O threads from 4 on",
     "threads", "compute threads (engine and MatMul pool); usable CPUs: the affinity mask and "
     "the cgroup's CPU quota"},
    {"io-threads", OPT_UINT, OFF(io_threads), 0, 1, 256, "usable CPUs / 4, at least 1",
     "threads", "network I/O threads (each owns its connections)"},
    {"spin-us", OPT_UINT, OFF(spin_us), 0, 0, 100000,
     "50; 0 on one CPU or when the threads outnumber the CPUs by more than one", "microseconds",
     "how long a compute thread spins for its next job before it sleeps (0: never spin)"},
    {"max-connections", OPT_UINT, OFF(max_connections), 0, 1, 1000000, "1024", "connections",
     "open connections at once; more are closed at accept and counted"},
    {"idle-timeout-s", OPT_UINT, OFF(idle_timeout_s), 0, 0, 86400 * 7, "300", "seconds",
     "close a connection idle this long with nothing in flight; 0 disables"},
    {"max-message-bytes", OPT_U64, OFF(max_message_bytes), 0, 64, (uint64_t)1 << 31, "67108864",
     "bytes", "largest frame accepted or sent (64 MiB)"},
    {"max-inflight-per-conn", OPT_UINT, OFF(max_inflight_per_conn), 0, 1, 1000000, "128",
     "requests", "stop reading a connection with more requests than this in flight"},
    {"max-unsent-bytes", OPT_U64, OFF(max_unsent_bytes), 0, 1024, (uint64_t)1 << 34, "16777216",
     "bytes", "stop reading a connection with more unsent output than this (16 MiB)"},
    {"max-buffered-bytes", OPT_U64, OFF(max_buffered_bytes), 0, 1u << 20, (uint64_t)1 << 40,
     "268435456", "bytes",
     "answers unsent or being computed, all connections together; above it new MatMul and "
     "infer calls get RESOURCE_EXHAUSTED (HTTP 503) (256 MiB)"},
    {"grpc-max-streams", OPT_UINT, OFF(grpc_max_streams), 0, 1, 100000, "100", "streams",
     "gRPC (HTTP/2) on the native port: concurrent streams a connection may open"},
    {"grpc-max-header-bytes", OPT_UINT, OFF(grpc_max_header_bytes), 0, 1024, 1u << 20, "16384",
     "bytes", "gRPC: largest header list of one request (name + value + 32 per field)"},
    {"queue-rows", OPT_UINT, OFF(queue_rows), 0, 1, 100000000, "4096", "rows",
     "rows queued per model version; beyond it requests get RESOURCE_EXHAUSTED"},
    {"model-memory-limit", OPT_U64, OFF(model_memory_limit), 0, 0, (uint64_t)1 << 50,
     "2147483648", "bytes", "memory one model version may need to load (weights, plans, "
     "scratch, batcher, checkpoint); larger ones are refused with the figures (2 GiB; 0: none)"},
    {"drain-timeout-s", OPT_UINT, OFF(drain_timeout_s), 0, 0, 3600, "10", "seconds",
     "on SIGTERM/SIGINT, time in-flight requests get to finish"},
    {"poll-seconds", OPT_UINT, OFF(poll_seconds), 0, 0, 86400, "5", "seconds",
     "model repository rescan period (SIGHUP also rescans); 0 disables"},
    {"audit-log", OPT_STR, OFF(audit_log), SZ(audit_log), 0, 0, "none (audit off)", "file",
     "tamper-evident audit log: one hash-chained JSON record per request and admin event"},
    {"audit-key", OPT_STR, OFF(audit_key), SZ(audit_key), 0, 0, "none (plain SHA-256)", "file",
     "key file: audit record hashes are HMAC-SHA256 with its bytes (at least 16)"},
    {"audit-head", OPT_STR, OFF(audit_head), SZ(audit_head), 0, 0, "<audit-log>.head", "file",
     "chain-head file rewritten every second (\"none\": no head file)"},
    {"audit-fsync", OPT_FSYNC, OFF(audit_fsync), 0, 0, 0, "interval", "always|interval|never",
     "audit durability: always = a response waits until its record is on disk"},
    {"audit-fsync-interval-ms", OPT_UINT, OFF(audit_fsync_interval_ms), 0, 1, 3600000, "100",
     "milliseconds", "with --audit-fsync interval, time between fdatasyncs"},
    {"audit-max-bytes", OPT_U64, OFF(audit_max_bytes), 0, 0, (uint64_t)1 << 50, "0", "bytes",
     "rotate the audit log at this size (SIGHUP also rotates); 0 = size never rotates"},
    {"audit-fail-open", OPT_BOOL, OFF(audit_fail_open), 0, 0, 1, "off", "switch",
     "keep serving when the audit log cannot be written, counting lost records"},
    {"payload-dir", OPT_STR, OFF(payload_dir), SZ(payload_dir), 0, 0, "none (no capture)",
     "directory", "payload store: each request's input and output tensors, referenced from its "
     "audit record (needs --audit-log); `tpuctl audit replay` recomputes them"},
    {"payload-capture", OPT_STR, OFF(payload_capture), SZ(payload_capture), 0, 0, "all",
     "all|none", "with --payload-dir: capture every model's requests, or only those of models "
     "whose model.json says \"payload_capture\": true (false there opts a model out)"},
    {"payload-key", OPT_STR, OFF(payload_key), SZ(payload_key), 0, 0, "none (in clear)", "file",
     "encrypt payload entries at rest with AES-256-GCM: a key of 32 bytes or 64 hex digits"},
    {"payload-max-bytes", OPT_U64, OFF(payload_max_bytes), 0, 0, (uint64_t)1 << 50, "0", "bytes",
     "delete the oldest payload files while the store holds more; 0 = no limit"},
    {"payload-max-age", OPT_U64, OFF(payload_max_age_s), 0, 0, (uint64_t)1 << 40, "0", "seconds",
     "delete payload files whose last entry is older; 0 = no limit"},
    {"tls-cert", OPT_STR, OFF(tls_cert), SZ(tls_cert), 0, 0, "none (no TLS)", "file",
     "PEM certificate chain: TLS on the native port (and HTTPS, see --http-tls)"},
    {"tls-key", OPT_STR, OFF(tls_key), SZ(tls_key), 0, 0, "the --tls-cert file", "file",
     "PEM private key of --tls-cert"},
    {"tls-client-ca", OPT_STR, OFF(tls_client_ca), SZ(tls_client_ca), 0, 0, "none", "file",
     "PEM CA bundle: require client certificates signed by it (mutual TLS, both ports)"},
    {"tls-client-role", OPT_STR, OFF(tls_client_role), SZ(tls_client_role), 0, 0, "infer", "role",
     "role of a client certificate whose CN has no `cert` line in --tokens: infer or admin"},
    {"http-tls", OPT_BOOL, OFF(http_tls), 0, 0, 1, "on", "switch",
     "with --tls-cert, serve HTTPS on --http-port (--http-tls=false: plain HTTP)"},
    {"tls-handshake-timeout-s", OPT_UINT, OFF(tls_handshake_timeout_s), 0, 1, 3600, "10",
     "seconds", "close a connection whose TLS handshake takes longer"},
    {"tokens", OPT_STR, OFF(tokens), SZ(tokens), 0, 0, "none", "file",
     "bearer tokens: lines \"token <sha256-hex> <role> <name>\" (and \"cert <CN> <role>\")"},
    {"auth-open-health", OPT_BOOL, OFF(auth_open_health), 0, 0, 1, "on", "switch",
     "health (live/ready) needs no credentials, for probes (--auth-open-health=false)"},
    {"auth-open-metrics", OPT_BOOL, OFF(auth_open_metrics), 0, 0, 1, "off", "switch",
     "GET /metrics needs no credentials (else role infer)"},
    {"strict-readiness", OPT_BOOL, OFF(strict_readiness), 0, 0, 1, "on", "switch",
     "ready (/v2/health/ready, ServerReady) only when every model served has a ready "
     "version; --strict-readiness=false: when any version is"},
    {"log-level", OPT_LEVEL, OFF(log_level), 0, 0, 0, "info", "debug|info|warn|error",
     "least severe level written to stderr"},
    {"log-format", OPT_LOGFMT, OFF(log_format), 0, 0, 0, "text", "text|json",
     "stderr lines: text (\"TIME LEVEL message\") or json (one object a line: time, level, "
     "message)"},
};
#define NOPTIONS (sizeof options / sizeof options[0])
_Static_assert(NOPTIONS <= 64, "tpu_config_t.given has one bit per option");

void tpu_config_defaults(tpu_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->models, sizeof cfg->models, "./models");
  snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1");
  cfg->port = 8500;
  cfg->http_port = 8501;
  cfg->http_max_body_bytes = 16u << 20;
  cfg->http_max_header_bytes = 16384;
  cfg->http_timeout_s = 60;
  cfg->max_connections = 1024;
  cfg->idle_timeout_s = 300;
  cfg->max_message_bytes = 64u << 20;
  cfg->max_inflight_per_conn = 128;
  cfg->max_unsent_bytes = 16u << 20;
  cfg->max_buffered_bytes = 256u << 20;
  cfg->grpc_max_streams = 100;
  cfg->grpc_max_header_bytes = 16384;
  cfg->queue_rows = 4096;
  cfg->model_memory_limit = (uint64_t)2 << 30;
  cfg->drain_timeout_s = 10;
  memcpy(cfg->payload_capture, "all", 4);
  cfg->poll_seconds = 5;
  cfg->audit_fsync = TPU_AUDIT_FSYNC_INTERVAL;
  cfg->audit_fsync_interval_ms = 100;
  cfg->log_level = TPU_LOG_INFO;
  snprintf(cfg->tls_client_role, sizeof cfg->tls_client_role, "infer");
  cfg->http_tls = 1;
  cfg->tls_handshake_timeout_s = 10;
  cfg->auth_open_health = 1;
  cfg->strict_readiness = 1;
  tpu_cpus_t cpus;
  tpu_cpus_read(&cpus);
  tpu_config_fit_cpus(cfg, &cpus);
}

void tpu_config_fit_cpus(tpu_config_t *cfg, const tpu_cpus_t *cpus) {
  unsigned n = cpus->usable ? cpus->usable : 1;
  cfg->cpus = *cpus;
  if (!tpu_config_given(cfg, "io-threads")) {
    unsigned io = n / 4;
    cfg->io_threads = io < 1 ? 1 : io > 64 ? 64 : io;
  }
  if (!tpu_config_given(cfg, "threads"))
    cfg->threads = n >= 4 && n > cfg->io_threads ? n - cfg->io_threads : n;
  if (!tpu_config_given(cfg, "spin-us"))
    cfg->spin_us = n == 1 || cfg->threads + cfg->io_threads > n + 1 ? 0 : 50;
}

static const opt_t *find_opt(const char *name, size_t len) {
  for (size_t i = 0; i < NOPTIONS; i++)
    if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0)
      return &options[i];
  return NULL;
}

int tpu_config_given(const tpu_config_t *cfg, const char *name) {
  const opt_t *o = find_opt(name, strlen(name));
  return o && (cfg->given >> (o - options) & 1);
}

/* Stores `value` (text) into the option; -1 with err on a bad value. */
static int store_value(tpu_config_t *cfg, const opt_t *o, const char *value, const char *src,
                     char *err, size_t errlen) {
  char *field = (char *)cfg + o->offset;
  switch (o->type) {
  case OPT_STR:
    if (!*value || strlen(value) >= o->size) {
      tpu_errf(err, errlen, "%s: option '%s' needs a non-empty %s of at most %zu bytes", src,
               o->name, o->unit, o->size - 1);
      return -1;
    }
    memcpy(field, value, strlen(value) + 1);
    return 0;
  case OPT_LEVEL:
    if (tpu_log_parse_level(value, (tpu_log_level_t *)(void *)field) != 0) {
      tpu_errf(err, errlen, "%s: option '%s' must be one of debug, info, warn, error; got '%s'",
               src, o->name, value);
      return -1;
    }
    return 0;
  case OPT_LOGFMT:
    if (tpu_log_parse_format(value, (tpu_log_format_t *)(void *)field) != 0) {
      tpu_errf(err, errlen, "%s: option '%s' must be text or json; got '%s'", src, o->name,
               value);
      return -1;
    }
    return 0;
  case OPT_FSYNC: {
    tpu_audit_fsync_t f;
    if (tpu_fsync_parse(value, &f) != 0) {
      tpu_errf(err, errlen, "%s: option '%s' must be one of always, interval, never; got '%s'",
               src, o->name, value);
      return -1;
    }
    *(int *)(void *)field = (int)f;
    return 0;
  }
  case OPT_BOOL:
    if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "on")) {
      *(int *)(void *)field = 1;
    } else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "off")) {
      *(int *)(void *)field = 0;
    } else {
      tpu_errf(err, errlen, "%s: option '%s' is a switch: true or false; got '%s'", src, o->name,
               value);
      return -1;
    }
    return 0;
  case OPT_UINT:
  case OPT_U64: {
    const char *p = value;
    if (!*p) goto bad;
    for (; *p; p++)
      if (*p < '0' || *p > '9') goto bad;
    errno = 0;
    unsigned long long v = strtoull(value, NULL, 10);
    if (errno || v < o->min || v > o->max) goto bad;
    if (o->type == OPT_UINT)
      *(unsigned *)(void *)field = (unsigned)v;
    else
      *(uint64_t *)(void *)field = (uint64_t)v;
    return 0;
  bad:
    tpu_errf(err, errlen, "%s: option '%s' needs an integer from %llu to %llu (%s); got '%s'", src,
             o->name, (unsigned long long)o->min, (unsigned long long)o->max, o->unit, value);
    return -1;
  }
  }
  return -1;
}

/* store_value, and records that the option was given (tpu_config_given). */
static int set_value(tpu_config_t *cfg, const opt_t *o, const char *value, const char *src,
                     char *err, size_t errlen) {
  if (store_value(cfg, o, value, src, err, errlen) != 0) return -1;
  cfg->given |= (uint64_t)1 << (o - options);
  return 0;
}

int tpu_config_apply_json(tpu_config_t *cfg, const char *text, const char *what, char *err,
                          size_t errlen) {
  json_error_t jerr;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    tpu_errf(err, errlen, "%s: invalid JSON at line %d column %d: %s", what, jerr.line,
             jerr.column, jerr.text);
    return -1;
  }
  int rc = -1;
  if (!json_is_object(root)) {
    tpu_errf(err, errlen, "%s: expected a JSON object of options", what);
    goto out;
  }
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    const opt_t *o = find_opt(key, strlen(key));
    if (!o) {
      tpu_errf(err, errlen, "%s: unknown option '%s' (see tpud --help)", what, key);
      goto out;
    }
    char buf[64];
    const char *text_val;
    if (json_is_string(val) &&
        (o->type == OPT_STR || o->type == OPT_LEVEL || o->type == OPT_FSYNC ||
         o->type == OPT_LOGFMT)) {
      text_val = json_string_value(val);
    } else if (json_is_boolean(val) && o->type == OPT_BOOL) {
      text_val = json_is_true(val) ? "true" : "false";
    } else if (json_is_integer(val) && (o->type == OPT_UINT || o->type == OPT_U64)) {
      json_int_t v = json_integer_value(val);
      if (v < 0) {
        tpu_errf(err, errlen, "%s: option '%s' must not be negative; got %lld", what, key,
                 (long long)v);
        goto out;
      }
      snprintf(buf, sizeof buf, "%lld", (long long)v);
      text_val = buf;
    } else {
      tpu_errf(err, errlen, "%s: option '%s' needs a JSON %s", what, key,
               o->type == OPT_BOOL                                               ? "boolean"
               : o->type == OPT_UINT || o->type == OPT_U64                       ? "integer"
                                                                               : "string");
      goto out;
    }
    if (set_value(cfg, o, text_val, what, err, errlen) != 0) goto out;
  }
  rc = 0;
out:
  json_decref(root);
  return rc;
}

static int load_file(tpu_config_t *cfg, const char *path, char *err, size_t errlen) {
  void *buf;
  size_t len;
  char why[4200];
  if (tpu_file_read(path, 1u << 20, NULL, &buf, &len, NULL, why, sizeof why) != 0) {
    tpu_errf(err, errlen, "--config %s", why);
    return -1;
  }
  int rc = tpu_config_apply_json(cfg, buf, path, err, errlen); /* NUL-terminated (file.h) */
  free(buf);
  return rc;
}

/* Splits argv[*i] into name and value ("--name=value" or "--name value"). */
static int flag_at(int argc, char **argv, int *i, const char **name, size_t *nlen,
                   const char **value, char *err, size_t errlen) {
  const char *a = argv[*i];
  if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
    tpu_errf(err, errlen, "unexpected argument '%s' (options start with --; see tpud --help)", a);
    return -1;
  }
  *name = a + 2;
  const char *eq = strchr(*name, '=');
  if (eq) {
    *nlen = (size_t)(eq - *name);
    *value = eq + 1;
    return 0;
  }
  *nlen = strlen(*name);
  if (*nlen == 4 && strncmp(*name, "help", 4) == 0) {
    *value = NULL;
    return 0;
  }
  if (!(*nlen == 6 && strncmp(*name, "config", 6) == 0) && !find_opt(*name, *nlen)) {
    tpu_errf(err, errlen, "unknown option '--%s' (see tpud --help)", *name);
    return -1;
  }
  if (find_opt(*name, *nlen) && find_opt(*name, *nlen)->type == OPT_BOOL) {
    *value = "true"; /* a bare switch; "--name=false" takes the branch above */
    return 0;
  }
  if (*i + 1 >= argc) {
    tpu_errf(err, errlen, "option '--%s' needs a value", *name);
    return -1;
  }
  *value = argv[++*i];
  return 0;
}

tpu_config_result_t tpu_config_parse(tpu_config_t *cfg, int argc, char **argv, char *err,
                                     size_t errlen) {
  /* Pass 1: --help, --config, and unknown flags (so a typo is reported before the file). */
  const char *config_file = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return TPU_CONFIG_HELP;
    const char *name, *value;
    size_t nlen;
    if (flag_at(argc, argv, &i, &name, &nlen, &value, err, errlen) != 0) return TPU_CONFIG_ERROR;
    if (nlen == 6 && strncmp(name, "config", 6) == 0) {
      config_file = value;
    } else if (!find_opt(name, nlen)) {
      tpu_errf(err, errlen, "unknown option '--%.*s' (see tpud --help)", (int)nlen, name);
      return TPU_CONFIG_ERROR;
    }
  }
  if (config_file && load_file(cfg, config_file, err, errlen) != 0) return TPU_CONFIG_ERROR;
  /* Pass 2: flags over the file. */
  for (int i = 1; i < argc; i++) {
    const char *name, *value;
    size_t nlen;
    if (flag_at(argc, argv, &i, &name, &nlen, &value, err, errlen) != 0) return TPU_CONFIG_ERROR;
    if (nlen == 6 && strncmp(name, "config", 6) == 0) continue;
    char src[80];
    snprintf(src, sizeof src, "--%.*s", (int)(nlen < 60 ? nlen : 60), name);
    if (set_value(cfg, find_opt(name, nlen), value, src, err, errlen) != 0)
      return TPU_CONFIG_ERROR;
  }
  /* The CPU-count defaults again, now that the options given are known (spin-us follows a
   * --threads given). */
  tpu_cpus_t cpus = cfg->cpus;
  tpu_config_fit_cpus(cfg, &cpus);
  return TPU_CONFIG_OK;
}

void tpu_config_usage(FILE *out) {
  fprintf(out,
          "usage: tpud [OPTIONS]\n"
          "Serves models from a repository over the native protocol (protobuf over TCP) and\n"
          "HTTP/1.1 (Open Inference Protocol v2 REST JSON, Prometheus /metrics, /v2/debug).\n"
          "Options may also be set in a JSON file (--config FILE) with the same names as keys\n"
          "(e.g. {\"port\": 9000}); flags given on the command line win over the file.\n\n"
          "  --config FILE                 JSON file of options (default: none)\n"
          "  --help                        print this help and exit\n");
  for (size_t i = 0; i < NOPTIONS; i++) {
    const opt_t *o = &options[i];
    char left[64];
    snprintf(left, sizeof left, "--%s %s", o->name,
             o->type == OPT_STR     ? (strcmp(o->unit, "file") == 0   ? "FILE"
                                       : strcmp(o->unit, "role") == 0 ? "ROLE"
                                       : strcmp(o->unit, "all|none") == 0 ? "WHICH"
                                                                      : "DIR")
             : o->type == OPT_LEVEL ? "LEVEL"
             : o->type == OPT_FSYNC ? "POLICY"
             : o->type == OPT_LOGFMT ? "FORMAT"
             : o->type == OPT_BOOL  ? ""
                                    : "N");
    if (strcmp(o->name, "listen") == 0) snprintf(left, sizeof left, "--listen ADDR");
    fprintf(out, "  %-29s %s\n  %-29s (default %s; unit: %s)\n", left, o->help, "", o->dflt,
            o->unit);
  }
  fprintf(out, "\nWithout --tokens or --tls-client-ca every client may do everything: keep\n"
               "--listen on loopback then (tpud warns otherwise). SIGHUP reloads certificates\n"
               "and tokens; a reload that fails keeps the old ones.\n");
}

struct json_t *tpu_config_to_json(const tpu_config_t *cfg) {
  json_t *o = json_object();
  if (!o) return NULL;
  for (size_t i = 0; i < NOPTIONS; i++) {
    const opt_t *opt = &options[i];
    const char *field = (const char *)cfg + opt->offset;
    json_t *v = NULL;
    switch (opt->type) {
    case OPT_STR: v = json_string(field); break;
    case OPT_UINT: v = json_integer((json_int_t) * (const unsigned *)(const void *)field); break;
    case OPT_U64: v = json_integer((json_int_t) * (const uint64_t *)(const void *)field); break;
    case OPT_LEVEL:
      v = json_string(tpu_log_level_name(*(const tpu_log_level_t *)(const void *)field));
      break;
    case OPT_FSYNC:
      v = json_string(tpu_fsync_name((tpu_audit_fsync_t) * (const int *)(const void *)field));
      break;
    case OPT_BOOL: v = json_boolean(*(const int *)(const void *)field); break;
    case OPT_LOGFMT:
      v = json_string(tpu_log_format_name(*(const tpu_log_format_t *)(const void *)field));
      break;
    }
    if (!v || json_object_set_new(o, opt->name, v) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}
