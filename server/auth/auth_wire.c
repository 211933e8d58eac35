/*
 * auth_wire.c - TLS contexts and the access policy in the server: start-up, SIGHUP reload and
 * the per-request check the I/O threads call.
 *
 * DESIGN
 * The tokens table is immutable once parsed; `lock` (a read-write lock) guards only which table
 * is current. I/O threads take it for reading around one decision (a SHA-256 and a scan);
 * SIGHUP parses the new file without it and takes it for writing only to swap pointers, so a
 * reload never stalls requests behind file I/O. A reload that fails to parse keeps the old table.
 * TLS contexts swap inside tls.c the same way. Whether access control is on is fixed at start-up
 * (--tokens, --tls-client-ca): a reload changes credentials, never the policy's shape.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "audit_wire.h"
#include "auth_wire.h"
#include "server_int.h"

struct tpu__auth {
  pthread_rwlock_t lock;
  tpu_auth_table_t *table; /* NULL without --tokens */
  int require_cert;
  tpu_role_t cert_role;
};

/* Whether the address binds loopback only. */
static int is_loopback(const char *addr) {
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, addr, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, addr, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return 0;
}

int tpu__auth_start(tpu_server_t *srv, char *err, size_t errlen) {
  const tpu_config_t *cfg = &srv->cfg;
  struct tpu__auth *a = calloc(1, sizeof *a);
  if (!a) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  pthread_rwlock_init(&a->lock, NULL);
  srv->auth = a;
  if (tpu_auth_parse_role(cfg->tls_client_role, &a->cert_role) != 0) {
    snprintf(err, errlen, "--tls-client-role must be infer or admin; got '%s'",
             cfg->tls_client_role);
    return -1;
  }
  if (!cfg->tls_cert[0] && (cfg->tls_key[0] || cfg->tls_client_ca[0])) {
    snprintf(err, errlen, "--tls-key and --tls-client-ca need --tls-cert (the server's own "
             "certificate)");
    return -1;
  }
  if (cfg->tls_cert[0]) {
    tpu_tls_config_t tc = {.cert_file = cfg->tls_cert, .key_file = cfg->tls_key,
                           .client_ca_file = cfg->tls_client_ca};
    if (tpu_tls_create(&tc, &srv->tls, err, errlen) != 0) return -1;
    srv->http_tls = cfg->http_tls;
    a->require_cert = cfg->tls_client_ca[0] != 0;
    char fp[128];
    tpu_tls_fingerprint(srv->tls, fp, sizeof fp);
    tpu_log_info("tls: native port%s, certificate %s (sha256 %s)%s", srv->http_tls ? " and https" : "",
                 cfg->tls_cert, fp, a->require_cert ? ", client certificates required" : "");
  }
  if (cfg->tokens[0]) {
    if (tpu_auth_table_load(cfg->tokens, &a->table, err, errlen) != 0) return -1;
    tpu_log_info("auth: %zu tokens and %zu certificate roles from %s", a->table->ntokens,
                 a->table->ncerts, cfg->tokens);
  }
  if (!tpu__auth_enabled(srv)) {
    if (!is_loopback(cfg->listen))
      tpu_log_warn("listening on %s without access control: anyone who can reach it may infer, "
                   "load and unload models (set --tokens and/or --tls-client-ca, or --listen "
                   "127.0.0.1)", cfg->listen);
  } else {
    tpu_log_info("auth: on (%s%s%s); health %s, metrics %s", a->table ? "tokens" : "",
                 a->table && a->require_cert ? " and " : "",
                 a->require_cert ? "client certificates" : "",
                 cfg->auth_open_health ? "open" : "needs credentials",
                 cfg->auth_open_metrics ? "open" : "needs credentials");
  }
  return 0;
}

int tpu__auth_enabled(tpu_server_t *srv) {
  return srv->auth && (srv->auth->require_cert || srv->cfg.tokens[0]);
}

void tpu__auth_sighup(tpu_server_t *srv) {
  char err[512];
  if (srv->tls) {
    if (tpu_tls_reload(srv->tls, err, sizeof err) != 0) {
      tpu_log_error("SIGHUP: TLS reload failed, keeping the current certificate: %s", err);
    } else {
      char fp[128];
      tpu_tls_fingerprint(srv->tls, fp, sizeof fp);
      tpu_log_info("SIGHUP: TLS certificate reloaded (sha256 %s); open connections keep theirs",
                   fp);
      tpu__audit_event(srv, TPU_AUDIT_KIND_CONFIG, NULL, 0, "TLS certificate reloaded");
    }
  }
  if (srv->cfg.tokens[0] && srv->auth) {
    tpu_auth_table_t *t = NULL;
    if (tpu_auth_table_load(srv->cfg.tokens, &t, err, sizeof err) != 0) {
      tpu_log_error("SIGHUP: tokens reload failed, keeping the current ones: %s", err);
      return;
    }
    pthread_rwlock_wrlock(&srv->auth->lock);
    tpu_auth_table_t *old = srv->auth->table;
    srv->auth->table = t;
    pthread_rwlock_unlock(&srv->auth->lock);
    tpu_auth_table_free(old);
    tpu_log_info("SIGHUP: %zu tokens and %zu certificate roles reloaded from %s", t->ntokens,
                 t->ncerts, srv->cfg.tokens);
    tpu__audit_event(srv, TPU_AUDIT_KIND_CONFIG, NULL, 0, "tokens reloaded");
  }
}

void tpu__auth_free(tpu_server_t *srv) {
  struct tpu__auth *a = srv->auth;
  if (a) {
    tpu_auth_table_free(a->table);
    pthread_rwlock_destroy(&a->lock);
    free(a);
    srv->auth = NULL;
  }
  tpu_tls_free(srv->tls);
  srv->tls = NULL;
}

int tpu__auth_check(tpu_server_t *srv, const tpu_auth_peer_t *peer, const char *authz,
                    size_t authz_len, size_t n_authz, tpu_need_t need, char *who, size_t wholen,
                    char *msg, size_t msglen) {
  struct tpu__auth *a = srv->auth;
  if (!a) { /* not started: no policy, but the one rule every policy shares */
    tpu_auth_policy_t none = {0};
    return tpu_auth_decide(&none, peer, authz, authz_len, n_authz, need, who, wholen, msg,
                           msglen, NULL);
  }
  pthread_rwlock_rdlock(&a->lock);
  tpu_auth_policy_t p = {.table = a->table, .require_cert = a->require_cert,
                         .cert_role = a->cert_role};
  int code = tpu_auth_decide(&p, peer, authz, authz_len, n_authz, need, who, wholen, msg, msglen,
                             NULL);
  pthread_rwlock_unlock(&a->lock);
  return code;
}
