/*
 * tpuctl.c - command-line client of tpud: health, models, infer, matmul, load, unload, and
 * `audit verify` (offline: the server's own verifier, server/audit_verify.c, linked in).
 *
 * DESIGN
 * A thin shell over libtpuclient and proto/tpu_oip_json: parse flags, read the JSON body, make
 * one synchronous call, print the result. It holds no protocol knowledge of its own, so what it
 * prints for `infer` is byte for byte what the HTTP endpoint answers for the same request.
 *
 * Scriptable by contract (PRODUCT.md): results on stdout, exit 0 on success; a one-line message
 * on stderr and a non-zero exit otherwise: 1 when the call failed (connection, server error,
 * bad input data, server not ready), 2 for a command line that makes no sense. Global flags may
 * appear before or after the command.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_oip_json.h"
#include "tpuclient.h"
#ifdef TPUCTL_AUDIT
#include "audit_verify.h"
#ifdef TPUCTL_REPLAY
#include "replay.h"
#endif
#define AUDIT_SYNOPSIS \
  "audit verify [--key FILE] [--head FILE] [--allow-torn] [--partial] [--strict] FILE..."
#define AUDIT_HELP                                                                            \
  "Checks tpud audit logs offline (oldest file first: rotated <log>.<seq> files, then <log>):\n" \
  "sequence from seq 1, hash chain and each record's hash (HMAC-SHA256 with --key). Prints a\n" \
  "WARNING line for each record that states a loss (gap, lost, rollback), then OK with the\n"  \
  "record count and the chain head, or the first bad record (file, line, seq) and what is\n"  \
  "wrong. --head FILE also checks the log against a saved head file; --allow-torn accepts a\n" \
  "torn last line (a crash); --partial accepts files that start at a rotate or gap record\n"  \
  "(the earlier files kept elsewhere); --strict exits 3 when the chain is intact but states\n" \
  "missing records. Exit 0 OK, 1 a fault, 2 usage or unreadable file, 3 incomplete.\n"
#ifdef TPUCTL_REPLAY
#undef AUDIT_SYNOPSIS
#define AUDIT_SYNOPSIS                                                                        \
  "audit verify [--key FILE] [--head FILE] [--allow-torn] [--partial] [--strict] FILE...\n" \
  "       tpuctl " TPU_REPLAY_SYNOPSIS
#endif
#endif

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define DEFAULT_ADDR "127.0.0.1:8500"

/* Flags, as bits, so each command can say which it takes. */
enum {
  F_VERSION = 1 << 0,    /* --version V */
  F_DATA = 1 << 1,       /* --data JSON */
  F_FILE = 1 << 2,       /* --file F */
  F_STDIN = 1 << 3,      /* - */
  F_JSON = 1 << 4,       /* --json */
  F_READY_ONLY = 1 << 5, /* --ready-only */
};

typedef struct {
  const char *addr;
  int timeout_ms; /* 0: the library's default */
  const char *tls_ca, *tls_cert, *tls_key, *tls_server_name, *token;
  bool tls, tls_no_verify_host;
  bool help;
  unsigned flags; /* F_* given */
  const char *version, *data, *file;
  const char *cmd;
  const char *args[8]; /* positionals after the command */
  int nargs;
} cli_t;

typedef struct {
  const char *name;
  int (*run)(const cli_t *cli);
  unsigned flags; /* F_* it accepts */
  int min_args, max_args;
  const char *synopsis; /* after "tpuctl [GLOBAL FLAGS] " */
  const char *help;     /* the rest of its --help */
} command_t;

static const char *prog = "tpuctl";

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see %s --help)\n", prog);
  va_end(ap);
  return EXIT_USAGE;
}

__attribute__((format(printf, 2, 3))) static int failure(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: %s: ", prog, cmd);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return EXIT_FAIL;
}

/* Reports a failed client call: "tpuctl: infer: NOT_FOUND: unknown model 'x'". */
static int call_failure(const char *cmd, tpu_client_t *c, tpu_client_status_t st) {
  const char *name = tpu_client_status_name(st);
  if ((int)st > 0 && (int)st < 100 && name) /* server codes: say which */
    return failure(cmd, "%s: %s", name, tpu_client_errmsg(c));
  return failure(cmd, "%s", tpu_client_errmsg(c));
}

static int connect_or_fail(const cli_t *cli, tpu_client_t **out) {
  tpu_client_options_t opts;
  tpu_client_options_init(&opts);
  if (cli->timeout_ms > 0) {
    opts.timeout_ms = cli->timeout_ms;
    opts.connect_timeout_ms = cli->timeout_ms;
  }
  opts.tls = cli->tls;
  opts.tls_ca_file = cli->tls_ca;
  opts.tls_cert_file = cli->tls_cert;
  opts.tls_key_file = cli->tls_key;
  opts.tls_server_name = cli->tls_server_name;
  opts.tls_no_verify_host = cli->tls_no_verify_host;
  opts.token = cli->token;
  tpu_client_status_t st = tpu_client_connect(cli->addr, &opts, out);
  if (st == TPU_CLIENT_OK) return 0;
  failure(cli->cmd, "%s", tpu_client_errmsg(*out));
  tpu_client_free(*out);
  *out = NULL;
  return -1;
}

/* Reads all of a stream into a malloc'd, NUL-terminated buffer. */
static char *read_stream(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  for (;;) {
    if (cap - n < 2) {
      char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
      if (!nb) {
        free(buf);
        return NULL;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* The request body from --data, --file or stdin, exactly one of them. NULL after a message. */
static char *read_body(const cli_t *cli, size_t *len) {
  unsigned src = cli->flags & (F_DATA | F_FILE | F_STDIN);
  if (src == 0) {
    failure(cli->cmd, "no request body: give --data JSON, --file FILE or - (stdin)");
    return NULL;
  }
  if (src & (src - 1)) {
    failure(cli->cmd, "give only one of --data, --file and - (stdin)");
    return NULL;
  }
  if (src == F_DATA) {
    char *s = strdup(cli->data);
    if (s) *len = strlen(s);
    return s;
  }
  FILE *f = src == F_STDIN ? stdin : fopen(cli->file, "rb");
  if (!f) {
    failure(cli->cmd, "cannot open %s: %s", cli->file, strerror(errno));
    return NULL;
  }
  char *s = read_stream(f, len);
  int saved = errno;
  if (f != stdin) fclose(f);
  if (!s) failure(cli->cmd, "cannot read %s: %s", src == F_STDIN ? "stdin" : cli->file,
                  strerror(saved));
  return s;
}

/* ---- commands ---- */

static int cmd_health(const cli_t *cli) {
  tpu_client_t *c;
  if (connect_or_fail(cli, &c) < 0) return EXIT_FAIL;
  bool live = false, ready = false;
  tpu_client_status_t st = tpu_client_server_live(c, cli->timeout_ms, &live);
  if (st == TPU_CLIENT_OK) st = tpu_client_server_ready(c, cli->timeout_ms, &ready);
  int rc;
  if (st != TPU_CLIENT_OK)
    rc = call_failure(cli->cmd, c, st);
  else if (!live)
    rc = failure(cli->cmd, "server %s is not live", cli->addr);
  else if (!ready)
    rc = failure(cli->cmd, "server %s is live but not ready", cli->addr);
  else {
    printf("ready\n");
    rc = 0;
  }
  tpu_client_free(c);
  return rc;
}

/* "MODEL_STATE_READY" -> "READY". */
static const char *state_name(int state) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&tpud__model_state__descriptor,
                                                                     state);
  if (!v) return "UNKNOWN";
  const char *prefix = "MODEL_STATE_";
  return strncmp(v->name, prefix, strlen(prefix)) == 0 ? v->name + strlen(prefix) : v->name;
}

static int cmd_models(const cli_t *cli) {
  tpu_client_t *c;
  if (connect_or_fail(cli, &c) < 0) return EXIT_FAIL;
  Tpud__RepositoryIndexResponse *idx = NULL;
  tpu_client_status_t st =
      tpu_client_repository_index(c, (cli->flags & F_READY_ONLY) != 0, cli->timeout_ms, &idx);
  if (st != TPU_CLIENT_OK) {
    int rc = call_failure(cli->cmd, c, st);
    tpu_client_free(c);
    return rc;
  }
  int rc = 0;
  if (cli->flags & F_JSON) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < idx->n_models; i++) {
      const Tpud__RepositoryIndexResponse__ModelIndex *m = idx->models[i];
      json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:I}", "name", m->name,
                                           "version", m->version, "state",
                                           state_name(m->state), "reason", m->reason,
                                           "memory_bytes", (json_int_t)m->memory_bytes));
    }
    json_t *root = json_pack("{s:o}", "models", arr);
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    if (text)
      printf("%s\n", text);
    else
      rc = failure(cli->cmd, "out of memory");
    free(text);
    json_decref(root);
  } else {
    size_t w = strlen("MODEL");
    for (size_t i = 0; i < idx->n_models; i++)
      if (strlen(idx->models[i]->name) > w) w = strlen(idx->models[i]->name);
    printf("%-*s  %-7s  %-11s  %9s  %s\n", (int)w, "MODEL", "VERSION", "STATE", "MEMORY",
           "REASON");
    for (size_t i = 0; i < idx->n_models; i++) {
      const Tpud__RepositoryIndexResponse__ModelIndex *m = idx->models[i];
      char mem[32] = "-";
      if (m->memory_bytes) snprintf(mem, sizeof mem, "%.1f MiB", (double)m->memory_bytes / 1048576.0);
      printf("%-*s  %-7s  %-11s  %9s  %s\n", (int)w, m->name, m->version, state_name(m->state),
             mem, m->reason);
    }
  }
  tpud__repository_index_response__free_unpacked(idx, NULL);
  tpu_client_free(c);
  return rc;
}

static int cmd_infer(const cli_t *cli) {
  size_t len = 0;
  char *body = read_body(cli, &len);
  if (!body) return EXIT_FAIL;
  char err[512];
  Inference__ModelInferRequest *req = NULL;
  tpu_oip_json_status_t jst = tpu_oip_json_infer_request_parse(body, len, cli->args[0],
                                                               cli->version, NULL, &req, err,
                                                               sizeof err);
  free(body);
  if (jst != TPU_OIP_JSON_OK) return failure(cli->cmd, "%s", err);

  tpu_client_t *c;
  if (connect_or_fail(cli, &c) < 0) {
    inference__model_infer_request__free_unpacked(req, NULL);
    return EXIT_FAIL;
  }
  Inference__ModelInferResponse *resp = NULL;
  tpu_client_status_t st = tpu_client_model_infer(c, req, cli->timeout_ms, &resp);
  inference__model_infer_request__free_unpacked(req, NULL);
  int rc = 0;
  if (st != TPU_CLIENT_OK) {
    rc = call_failure(cli->cmd, c, st);
  } else {
    char *text = NULL;
    jst = tpu_oip_json_infer_response_format(resp, &text, err, sizeof err);
    if (jst != TPU_OIP_JSON_OK)
      rc = failure(cli->cmd, "cannot print the response: %s", err);
    else
      printf("%s\n", text);
    free(text);
  }
  inference__model_infer_response__free_unpacked(resp, NULL);
  tpu_client_free(c);
  return rc;
}

static void tensor_to_proto(tpu_oip_tensor_t *t, Tpud__Tensor *p) {
  tpud__tensor__init(p);
  p->datatype = t->datatype;
  p->shape = t->shape;
  p->n_shape = t->rank;
  p->data.data = t->data;
  p->data.len = t->nbytes;
}

static int cmd_matmul(const cli_t *cli) {
  size_t len = 0;
  char *body = read_body(cli, &len);
  if (!body) return EXIT_FAIL;
  char err[512];
  json_t *root = NULL;
  tpu_oip_tensor_t a = {0}, b = {0};
  tpu_client_t *c = NULL;
  Tpud__MatMulResponse *resp = NULL;
  char *text = NULL;
  int rc = EXIT_FAIL;

  if (tpu_oip_json_load(body, len, NULL, &root, err, sizeof err) != TPU_OIP_JSON_OK) {
    failure(cli->cmd, "%s", err);
    goto done;
  }
  if (!json_is_object(root)) {
    failure(cli->cmd, "expected {\"a\": TENSOR, \"b\": TENSOR}");
    goto done;
  }
  if (tpu_oip_json_tensor_decode(json_object_get(root, "a"), "a", &a, err, sizeof err) !=
          TPU_OIP_JSON_OK ||
      tpu_oip_json_tensor_decode(json_object_get(root, "b"), "b", &b, err, sizeof err) !=
          TPU_OIP_JSON_OK) {
    failure(cli->cmd, "%s", err);
    goto done;
  }
  Tpud__Tensor pa, pb;
  tensor_to_proto(&a, &pa);
  tensor_to_proto(&b, &pb);
  Tpud__MatMulRequest req = TPUD__MAT_MUL_REQUEST__INIT;
  req.a = &pa;
  req.b = &pb;
  if (connect_or_fail(cli, &c) < 0) goto done;
  tpu_client_status_t st = tpu_client_matmul(c, &req, cli->timeout_ms, &resp);
  if (st != TPU_CLIENT_OK) {
    call_failure(cli->cmd, c, st);
    goto done;
  }
  if (!resp->c) {
    failure(cli->cmd, "the server's response holds no tensor c");
    goto done;
  }
  if (tpu_oip_json_tensor_format(resp->c->datatype, resp->c->shape, resp->c->n_shape,
                                 resp->c->data.data, resp->c->data.len, &text, err,
                                 sizeof err) != TPU_OIP_JSON_OK) {
    failure(cli->cmd, "cannot print the response: c: %s", err);
    goto done;
  }
  printf("{\"c\":%s,\"systolic_cycles\":%" PRIu64 ",\"systolic_rows\":%" PRIu32
         ",\"systolic_cols\":%" PRIu32 ",\"systolic_utilization\":%.6g,\"compute_us\":%" PRIu64
         "}\n",
         text, resp->systolic_cycles, resp->systolic_rows, resp->systolic_cols,
         resp->systolic_utilization, resp->compute_us);
  rc = 0;

done:
  free(text);
  if (resp) tpud__mat_mul_response__free_unpacked(resp, NULL);
  tpu_client_free(c);
  tpu_oip_tensor_clear(&a);
  tpu_oip_tensor_clear(&b);
  json_decref(root);
  free(body);
  return rc;
}

static void print_versions(const char *verb, const char *name, size_t n, char **versions) {
  printf("%s %s", verb, name);
  if (n) printf(" version%s ", n == 1 ? "" : "s");
  for (size_t i = 0; i < n; i++) printf("%s%s", i ? ", " : "", versions[i]);
  printf("\n");
}

static int cmd_load(const cli_t *cli) {
  tpu_client_t *c;
  if (connect_or_fail(cli, &c) < 0) return EXIT_FAIL;
  Tpud__ModelLoadResponse *resp = NULL;
  tpu_client_status_t st =
      tpu_client_model_load(c, cli->args[0], cli->args[1], cli->timeout_ms, &resp);
  int rc = 0;
  if (st != TPU_CLIENT_OK)
    rc = call_failure(cli->cmd, c, st);
  else
    print_versions("loaded", resp->name && *resp->name ? resp->name : cli->args[0],
                   resp->n_versions, resp->versions);
  if (resp) tpud__model_load_response__free_unpacked(resp, NULL);
  tpu_client_free(c);
  return rc;
}

static int cmd_unload(const cli_t *cli) {
  tpu_client_t *c;
  if (connect_or_fail(cli, &c) < 0) return EXIT_FAIL;
  Tpud__ModelUnloadResponse *resp = NULL;
  tpu_client_status_t st =
      tpu_client_model_unload(c, cli->args[0], cli->args[1], cli->timeout_ms, &resp);
  int rc = 0;
  if (st != TPU_CLIENT_OK)
    rc = call_failure(cli->cmd, c, st);
  else
    print_versions("unloaded", resp->name && *resp->name ? resp->name : cli->args[0],
                   resp->n_versions, resp->versions);
  if (resp) tpud__model_unload_response__free_unpacked(resp, NULL);
  tpu_client_free(c);
  return rc;
}

static const command_t commands[] = {
    {"health", cmd_health, 0, 0, 0, "health",
     "Asks whether the server is live and ready. Prints \"ready\" and exits 0 when it is;\n"
     "otherwise says what is wrong on stderr and exits 1.\n"},
    {"models", cmd_models, F_JSON | F_READY_ONLY, 0, 0, "models [--ready-only] [--json]",
     "Lists every model version in the server's repository with its state (READY, LOADING,\n"
     "UNLOADING, UNAVAILABLE, FAILED) and, when not READY, why.\n"
     "  --ready-only   only versions that serve requests\n"
     "  --json         print {\"models\": [{\"name\", \"version\", \"state\", \"reason\",\n"
     "                 \"memory_bytes\"}]}\n"},
    {"infer", cmd_infer, F_VERSION | F_DATA | F_FILE | F_STDIN, 1, 1,
     "infer MODEL [--version V] (--data JSON | --file FILE | -)",
     "Runs MODEL on the request body, the same JSON as the HTTP endpoint's\n"
     "POST /v2/models/MODEL/infer:\n"
     "  {\"id\": \"..\", \"inputs\": [{\"name\": \"x\", \"shape\": [1, 4], \"datatype\": \"FP32\",\n"
     "    \"data\": [1, 2, 3, 4]}], \"outputs\": [{\"name\": \"probs\"}]}\n"
     "and prints the same JSON response. Data may be flat or nested as the shape.\n"
     "  --version V    a model version (default: the server's choice, the highest loaded)\n"
     "  --data JSON    the body on the command line\n"
     "  --file FILE    the body from a file\n"
     "  -              the body from stdin\n"},
    {"matmul", cmd_matmul, F_DATA | F_FILE | F_STDIN, 0, 0, "matmul (--data JSON | --file FILE | -)",
     "Computes C = A x B on the server, without a model. The body is\n"
     "  {\"a\": TENSOR, \"b\": TENSOR}, TENSOR = {\"shape\": [..], \"datatype\": \"FP32\"|\"BF16\"|\"INT8\",\n"
     "   \"data\": [..]}\n"
     "with A of shape [M, K] and B of shape [K, N]. Prints {\"c\": TENSOR, \"systolic_cycles\": ..,\n"
     "\"systolic_rows\": .., \"systolic_cols\": .., \"systolic_utilization\": .., \"compute_us\": ..};\n"
     "C is FP32, or INT32 accumulators for INT8 inputs.\n"},
    {"load", cmd_load, 0, 1, 2, "load MODEL [VERSION]",
     "Loads MODEL from the server's repository and makes it serve: one VERSION (kept loaded\n"
     "whatever the version policy says, until unloaded), or the versions its policy names.\n"
     "Answers once they are ready or failed. Prints the versions now serving.\n"},
    {"unload", cmd_unload, 0, 1, 2, "unload MODEL [VERSION]",
     "Stops serving MODEL (one VERSION, or every version): queued requests fail with\n"
     "UNAVAILABLE, requests being computed finish. The versions stay unloaded (rescans do not\n"
     "bring them back) until `load`. Prints the versions unloaded.\n"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const char global_help[] =
    "Global flags (before or after the command):\n"
    "  --addr HOST:PORT   server's native protocol address (default " DEFAULT_ADDR ")\n"
    "  --timeout MS       per-call timeout in milliseconds, also the connect timeout\n"
    "                     (default: 30000 per call, 5000 to connect)\n"
    "  --tls              TLS, verifying the server against the system's CAs\n"
    "  --tls-ca FILE      TLS, verifying the server against the CAs in FILE (PEM)\n"
    "  --tls-cert FILE    client certificate (PEM) for servers that require one (mutual TLS)\n"
    "  --tls-key FILE     its private key (default: in --tls-cert)\n"
    "  --tls-server-name NAME  name the server certificate must carry (default: the host of\n"
    "                     --addr; an IP address is checked against the IP SANs)\n"
    "  --tls-no-verify-host  check the certificate chain but not the name (testing only)\n"
    "  --token TOKEN      bearer token (default: $TPUCTL_TOKEN); sent as metadata\n"
    "                     \"authorization: Bearer TOKEN\"\n"
    "  -h, --help         this help, or a command's with `tpuctl COMMAND --help`\n"
    "Exit status: 0 on success, 1 when the call failed, 2 for a bad command line.\n";

static void print_help(const command_t *cmd) {
  if (cmd) {
    printf("usage: %s [GLOBAL FLAGS] %s\n\n%s\n%s", prog, cmd->synopsis, cmd->help, global_help);
    return;
  }
  printf("usage: %s [GLOBAL FLAGS] COMMAND [ARGS]\n\ntpud's command-line client.\n\nCommands:\n",
         prog);
  for (size_t i = 0; i < NCOMMANDS; i++) printf("  %s\n", commands[i].synopsis);
#ifdef TPUCTL_AUDIT
  printf("  %s\n", AUDIT_SYNOPSIS);
#endif
  printf("\n%s", global_help);
}

/* Takes a flag's value from "--flag=value" or the next argument. */
static const char *flag_value(int argc, char **argv, int *i, const char *arg, const char *flag) {
  size_t n = strlen(flag);
  if (arg[n] == '=') return arg + n + 1;
  if (*i + 1 >= argc) return NULL;
  return argv[++*i];
}

static bool is_flag(const char *arg, const char *flag) {
  size_t n = strlen(flag);
  return strncmp(arg, flag, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* Parses argv into *cli. Returns 0, or an exit status after printing a message. */
static int parse_args(int argc, char **argv, cli_t *cli) {
  memset(cli, 0, sizeof *cli);
  cli->addr = DEFAULT_ADDR;
  cli->token = getenv("TPUCTL_TOKEN"); /* keeps the token out of `ps`; --token wins */
  if (cli->token && !*cli->token) cli->token = NULL;
  bool only_positionals = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v;
    if (only_positionals || a[0] != '-' || strcmp(a, "-") == 0) {
      if (strcmp(a, "-") == 0 && !only_positionals) {
        cli->flags |= F_STDIN;
      } else if (!cli->cmd) {
        cli->cmd = a;
      } else if (cli->nargs < (int)(sizeof cli->args / sizeof cli->args[0])) {
        cli->args[cli->nargs++] = a;
      } else {
        return usage_error("too many arguments");
      }
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_positionals = true;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      cli->help = true;
    } else if (is_flag(a, "--addr")) {
      if (!(v = flag_value(argc, argv, &i, a, "--addr")) || !*v)
        return usage_error("--addr needs HOST:PORT");
      cli->addr = v;
    } else if (is_flag(a, "--timeout")) {
      char *end;
      if (!(v = flag_value(argc, argv, &i, a, "--timeout")))
        return usage_error("--timeout needs milliseconds");
      errno = 0;
      long ms = strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || errno || ms < 1 || ms > 86400000)
        return usage_error("--timeout: \"%s\" is not a number of milliseconds from 1 to 86400000",
                           v);
      cli->timeout_ms = (int)ms;
    } else if (strcmp(a, "--tls") == 0) {
      cli->tls = true;
    } else if (strcmp(a, "--tls-no-verify-host") == 0) {
      cli->tls_no_verify_host = true;
    } else if (is_flag(a, "--tls-ca") || is_flag(a, "--tls-cert") || is_flag(a, "--tls-key") ||
               is_flag(a, "--tls-server-name") || is_flag(a, "--token")) {
      const char *flag = is_flag(a, "--tls-ca")            ? "--tls-ca"
                         : is_flag(a, "--tls-cert")        ? "--tls-cert"
                         : is_flag(a, "--tls-key")         ? "--tls-key"
                         : is_flag(a, "--tls-server-name") ? "--tls-server-name"
                                                           : "--token";
      if (!(v = flag_value(argc, argv, &i, a, flag)) || !*v)
        return usage_error("%s needs a value", flag);
      if (!strcmp(flag, "--tls-ca")) cli->tls_ca = v;
      else if (!strcmp(flag, "--tls-cert")) cli->tls_cert = v;
      else if (!strcmp(flag, "--tls-key")) cli->tls_key = v;
      else if (!strcmp(flag, "--tls-server-name")) cli->tls_server_name = v;
      else cli->token = v;
    } else if (is_flag(a, "--version")) {
      if (!(v = flag_value(argc, argv, &i, a, "--version")) || !*v)
        return usage_error("--version needs a version");
      cli->version = v;
      cli->flags |= F_VERSION;
    } else if (is_flag(a, "--data")) {
      if (!(v = flag_value(argc, argv, &i, a, "--data"))) return usage_error("--data needs JSON");
      cli->data = v;
      cli->flags |= F_DATA;
    } else if (is_flag(a, "--file")) {
      if (!(v = flag_value(argc, argv, &i, a, "--file")) || !*v)
        return usage_error("--file needs a file name");
      cli->file = v;
      cli->flags |= F_FILE;
    } else if (strcmp(a, "--json") == 0) {
      cli->flags |= F_JSON;
    } else if (strcmp(a, "--ready-only") == 0) {
      cli->flags |= F_READY_ONLY;
    } else {
      return usage_error("unknown flag %s", a);
    }
  }
  return 0;
}

static const char *flag_name(unsigned bit) {
  switch (bit) {
  case F_VERSION: return "--version";
  case F_DATA: return "--data";
  case F_FILE: return "--file";
  case F_STDIN: return "- (stdin)";
  case F_JSON: return "--json";
  case F_READY_ONLY: return "--ready-only";
  }
  return "?";
}

#ifdef TPUCTL_REPLAY
/* `audit replay --server ADDR`: the server, through this library (replay.h). The global flags
 * before `audit` give TLS, the token and the timeout. */
static struct {
  const char *tls_ca, *tls_cert, *tls_key, *token;
  int timeout_ms;
} remote_opts;

static void remote_global(const char *name, const char *value) {
  if (!value) return;
  if (!strcmp(name, "--tls-ca")) remote_opts.tls_ca = value;
  else if (!strcmp(name, "--tls-cert")) remote_opts.tls_cert = value;
  else if (!strcmp(name, "--tls-key")) remote_opts.tls_key = value;
  else if (!strcmp(name, "--token")) remote_opts.token = value;
  else if (!strcmp(name, "--timeout")) remote_opts.timeout_ms = atoi(value); /* ms */
}

static int remote_infer(void *ctx, const tpu_payload_t *p, unsigned char **outs, size_t *lens,
                        char *why, size_t whylen) {
  tpu_client_t *c = ctx;
  Inference__ModelInferRequest req = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor tin[TPU_PAYLOAD_MAX_TENSORS];
  Inference__ModelInferRequest__InferInputTensor *tinp[TPU_PAYLOAD_MAX_TENSORS];
  ProtobufCBinaryData raw[TPU_PAYLOAD_MAX_TENSORS];
  int64_t shapes[TPU_PAYLOAD_MAX_TENSORS][8];
  for (size_t i = 0; i < p->nin; i++) {
    inference__model_infer_request__infer_input_tensor__init(&tin[i]);
    tin[i].name = (char *)p->in[i].name;
    tin[i].datatype = (char *)p->in[i].datatype;
    memcpy(shapes[i], p->in[i].shape, sizeof shapes[i]);
    tin[i].n_shape = p->in[i].rank;
    tin[i].shape = shapes[i];
    tinp[i] = &tin[i];
    raw[i].data = (uint8_t *)p->in[i].data;
    raw[i].len = p->in[i].bytes;
  }
  req.model_name = (char *)p->model;
  req.model_version = (char *)p->version;
  req.id = "tpuctl-replay";
  req.n_inputs = req.n_raw_input_contents = p->nin;
  req.inputs = tinp;
  req.raw_input_contents = raw;
  /* the captured answer's outputs by name (on-request ones only come when named) */
  Inference__ModelInferRequest__InferRequestedOutputTensor rout[TPU_PAYLOAD_MAX_TENSORS];
  Inference__ModelInferRequest__InferRequestedOutputTensor *routp[TPU_PAYLOAD_MAX_TENSORS];
  for (size_t j = 0; j < p->nout; j++) {
    inference__model_infer_request__infer_requested_output_tensor__init(&rout[j]);
    rout[j].name = (char *)p->out[j].name;
    routp[j] = &rout[j];
  }
  req.n_outputs = p->nout;
  req.outputs = routp;
  Inference__ModelInferResponse *resp = NULL;
  tpu_client_status_t st = tpu_client_model_infer(c, &req, remote_opts.timeout_ms > 0
                                                  ? remote_opts.timeout_ms : 30000, &resp);
  if (st != TPU_CLIENT_OK) {
    snprintf(why, whylen, "%s", tpu_client_errmsg(c));
    inference__model_infer_response__free_unpacked(resp, NULL);
    return -1;
  }
  int rc = 0;
  for (size_t j = 0; j < p->nout && rc == 0; j++) {
    size_t k = 0;
    while (k < resp->n_outputs && strcmp(resp->outputs[k]->name, p->out[j].name) != 0) k++;
    if (k == resp->n_outputs || k >= resp->n_raw_output_contents) {
      snprintf(why, whylen, "the answer has no raw output '%s'", p->out[j].name);
      rc = -1;
      break;
    }
    lens[j] = resp->raw_output_contents[k].len;
    outs[j] = malloc(lens[j] ? lens[j] : 1);
    if (!outs[j]) {
      snprintf(why, whylen, "out of memory");
      rc = -1;
      break;
    }
    memcpy(outs[j], resp->raw_output_contents[k].data, lens[j]);
  }
  if (rc != 0)
    for (size_t j = 0; j < p->nout; j++) free(outs[j]), outs[j] = NULL;
  inference__model_infer_response__free_unpacked(resp, NULL);
  return rc;
}

static void remote_close(void *ctx) { tpu_client_free(ctx); }

static int remote_connect(const char *addr, tpu_replay_remote_t *out, char *why, size_t whylen) {
  tpu_client_options_t opts;
  tpu_client_options_init(&opts);
  if (remote_opts.timeout_ms > 0) opts.timeout_ms = opts.connect_timeout_ms = remote_opts.timeout_ms;
  opts.tls_ca_file = remote_opts.tls_ca;
  opts.tls_cert_file = remote_opts.tls_cert;
  opts.tls_key_file = remote_opts.tls_key;
  opts.token = remote_opts.token ? remote_opts.token : getenv("TPUCTL_TOKEN");
  tpu_client_t *c = NULL;
  if (tpu_client_connect(addr, &opts, &c) != TPU_CLIENT_OK) {
    snprintf(why, whylen, "%s", c ? tpu_client_errmsg(c) : "out of memory");
    tpu_client_free(c);
    return -1;
  }
  *out = (tpu_replay_remote_t){.ctx = c, .infer = remote_infer, .close = remote_close};
  return 0;
}
#endif

int main(int argc, char **argv) {
#ifdef TPUCTL_AUDIT
  /* Offline: reads log files, talks to no server; its own flags (audit_verify.h). Global
   * flags before it (--addr, --timeout, ...) are accepted and have nothing to act on. */
  int at = 1;
  static const char *const global[] = {"--addr", "--tls-ca", "--tls-cert", "--tls-key",
                                       "--token", "--timeout", NULL};
  while (at < argc && strncmp(argv[at], "--", 2) == 0) {
    int known = 0;
    const char *value = NULL, *name = NULL;
    for (const char *const *g = global; *g && !known; g++) {
      size_t n = strlen(*g);
      if (strncmp(argv[at], *g, n) == 0 && argv[at][n] == '=') known = 1, value = argv[at] + n + 1;
      else if (strcmp(argv[at], *g) == 0) known = 2, value = at + 1 < argc ? argv[at + 1] : NULL;
      if (known) name = *g;
    }
    if (!known) break;
#ifdef TPUCTL_REPLAY
    remote_global(name, value); /* for `audit replay --server` */
#else
    (void)name, (void)value;
#endif
    at += known;
  }
  if (at < argc && strcmp(argv[at], "audit") == 0) {
    argc -= at - 1;
    argv += at - 1;
    if (argc > 2 && strcmp(argv[2], "verify") == 0)
      return tpu_audit_verify_cli(argc - 2, argv + 2, stdout, stderr);
#ifdef TPUCTL_REPLAY
    if (argc > 2 && strcmp(argv[2], "replay") == 0)
      return tpu_replay_cli(argc - 2, argv + 2, stdout, stderr, remote_connect);
#endif
    if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
      printf("usage: %s %s\n\n%s", prog, AUDIT_SYNOPSIS, AUDIT_HELP);
      return 0;
    }
    return usage_error("usage: %s %s", prog, AUDIT_SYNOPSIS);
  }
#endif
  cli_t cli;
  int rc = parse_args(argc, argv, &cli);
  if (rc) return rc;
  if (!cli.cmd) {
    if (cli.help) {
      print_help(NULL);
      return 0;
    }
    return usage_error("no command given");
  }
  const command_t *cmd = NULL;
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].name, cli.cmd) == 0) cmd = &commands[i];
  if (!cmd) return usage_error("unknown command \"%s\"", cli.cmd);
  if (cli.help) {
    print_help(cmd);
    return 0;
  }
  unsigned extra = cli.flags & ~cmd->flags;
  if (extra) return usage_error("%s takes no %s", cmd->name, flag_name(extra & -extra));
  if (cli.nargs < cmd->min_args || cli.nargs > cmd->max_args)
    return usage_error("usage: %s %s", prog, cmd->synopsis);
  return cmd->run(&cli);
}
