/*
 * auth.c - the tokens file parser and the access decision (auth.h). Pure: no I/O beyond reading
 * the file in tpu_auth_table_load, no global state.
 */
#include "auth.h"

#include "file.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "tpu_text.h"
#include "tpud.pb-c.h"

int tpu_auth_parse_role(const char *s, tpu_role_t *out) {
  if (s && !strcmp(s, "infer")) *out = TPU_ROLE_INFER;
  else if (s && !strcmp(s, "admin")) *out = TPU_ROLE_ADMIN;
  else return -1;
  return 0;
}

const char *tpu_auth_role_name(tpu_role_t role) {
  return role == TPU_ROLE_ADMIN ? "admin" : role == TPU_ROLE_INFER ? "infer" : "none";
}

static int name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > TPU_AUTH_MAX_NAME) return 0;
  for (const char *p = s; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
          strchr("._@:+=-", c)))
      return 0;
  }
  return 1;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void tpu_auth_table_free(tpu_auth_table_t *t) {
  if (!t) return;
  if (t->tokens) OPENSSL_cleanse(t->tokens, t->ntokens * sizeof *t->tokens);
  free(t->tokens);
  free(t->certs);
  free(t);
}

#define MAX_FIELDS 5

int tpu_auth_table_parse(const char *text, size_t len, const char *what, tpu_auth_table_t **out,
                         char *err, size_t errlen) {
  *out = NULL;
  tpu_auth_table_t *t = calloc(1, sizeof *t);
  if (!t) goto nomem;
  size_t captok = 0, capcert = 0;
  size_t lineno = 0;
  size_t pos = 0;
  while (pos < len) {
    lineno++;
    size_t end = pos;
    while (end < len && text[end] != '\n') end++;
    char line[512];
    size_t ll = end - pos;
    if (ll >= sizeof line) {
      tpu_errf(err, errlen, "%s:%zu: line longer than %zu bytes", what, lineno, sizeof line - 1);
      goto fail;
    }
    memcpy(line, text + pos, ll);
    line[ll] = 0;
    pos = end + 1;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *f[MAX_FIELDS + 1];
    int nf = 0;
    for (char *p = strtok(line, " \t\r"); p; p = strtok(NULL, " \t\r")) {
      if (nf == MAX_FIELDS) break;
      f[nf++] = p;
    }
    if (nf == 0) continue;
    for (int i = 0; i < nf; i++)
      for (const char *c = f[i]; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f) {
          tpu_errf(err, errlen, "%s:%zu: control character in a field", what, lineno);
          goto fail;
        }
    if (!strcmp(f[0], "token")) {
      if (nf != 4) {
        tpu_errf(err, errlen,
                 "%s:%zu: expected \"token <sha256-hex> <role> <name>\" (4 fields), got %d", what,
                 lineno, nf);
        goto fail;
      }
      tpu_auth_token_t tok;
      memset(&tok, 0, sizeof tok);
      if (strlen(f[1]) != 64) {
        tpu_errf(err, errlen,
                 "%s:%zu: token digest must be 64 hex digits (SHA-256 of the token: printf %%s "
                 "TOKEN | sha256sum), got %zu characters",
                 what, lineno, strlen(f[1]));
        goto fail;
      }
      for (int i = 0; i < 32; i++) {
        int hi = hexval(f[1][2 * i]), lo = hexval(f[1][2 * i + 1]);
        if (hi < 0 || lo < 0) {
          tpu_errf(err, errlen, "%s:%zu: token digest must be 64 hex digits", what, lineno);
          goto fail;
        }
        tok.sha256[i] = (uint8_t)(hi << 4 | lo);
      }
      if (tpu_auth_parse_role(f[2], &tok.role) != 0) {
        tpu_errf(err, errlen, "%s:%zu: role must be infer or admin, got '%.64s'", what, lineno,
                 f[2]);
        goto fail;
      }
      if (!name_ok(f[3])) {
        tpu_errf(err, errlen, "%s:%zu: name must be 1 to %d characters of [A-Za-z0-9._@:+=-]",
                 what, lineno, TPU_AUTH_MAX_NAME);
        goto fail;
      }
      snprintf(tok.name, sizeof tok.name, "%s", f[3]);
      for (size_t i = 0; i < t->ntokens; i++)
        if (!memcmp(t->tokens[i].sha256, tok.sha256, 32)) {
          tpu_errf(err, errlen, "%s:%zu: the same token digest appears twice (first as '%s')",
                   what, lineno, t->tokens[i].name);
          goto fail;
        }
      if (t->ntokens == captok) {
        size_t nc = captok ? captok * 2 : 8;
        tpu_auth_token_t *n = realloc(t->tokens, nc * sizeof *n);
        if (!n) goto nomem;
        t->tokens = n;
        captok = nc;
      }
      t->tokens[t->ntokens++] = tok;
    } else if (!strcmp(f[0], "cert")) {
      if (nf != 3) {
        tpu_errf(err, errlen, "%s:%zu: expected \"cert <CN> <role>\" (3 fields), got %d", what,
                 lineno, nf);
        goto fail;
      }
      tpu_auth_cert_t c;
      memset(&c, 0, sizeof c);
      if (!name_ok(f[1])) {
        tpu_errf(err, errlen, "%s:%zu: CN must be 1 to %d characters of [A-Za-z0-9._@:+=-]", what,
                 lineno, TPU_AUTH_MAX_NAME);
        goto fail;
      }
      if (tpu_auth_parse_role(f[2], &c.role) != 0) {
        tpu_errf(err, errlen, "%s:%zu: role must be infer or admin, got '%.64s'", what, lineno,
                 f[2]);
        goto fail;
      }
      snprintf(c.cn, sizeof c.cn, "%s", f[1]);
      if (t->ncerts == capcert) {
        size_t nc = capcert ? capcert * 2 : 8;
        tpu_auth_cert_t *n = realloc(t->certs, nc * sizeof *n);
        if (!n) goto nomem;
        t->certs = n;
        capcert = nc;
      }
      t->certs[t->ncerts++] = c;
    } else {
      tpu_errf(err, errlen, "%s:%zu: unknown entry '%.32s': expected \"token\" or \"cert\"", what,
               lineno, f[0]);
      goto fail;
    }
  }
  *out = t;
  return 0;
nomem:
  tpu_errf(err, errlen, "%s: out of memory", what);
fail:
  tpu_auth_table_free(t);
  return -1;
}

int tpu_auth_table_load(const char *path, tpu_auth_table_t **out, char *err, size_t errlen) {
  *out = NULL;
  void *buf;
  size_t n;
  char why[512];
  /* Not a FIFO (a SIGHUP reload must not block the main loop), at most 64 MiB (file.h). */
  if (tpu_file_read(path, 64u << 20, NULL, &buf, &n, NULL, why, sizeof why) != 0) {
    tpu_errf(err, errlen, "tokens file %s", why);
    return -1;
  }
  int rc = tpu_auth_table_parse(buf, n, path, out, err, errlen);
  OPENSSL_cleanse(buf, n);
  free(buf);
  return rc;
}

const tpu_auth_token_t *tpu_auth_find_token(const tpu_auth_table_t *t, const char *token,
                                            size_t len) {
  if (!t || !token || !len) return NULL;
  uint8_t d[32];
  SHA256((const unsigned char *)token, len, d);
  const tpu_auth_token_t *hit = NULL;
  for (size_t i = 0; i < t->ntokens; i++) /* no early exit: the time says nothing */
    if (CRYPTO_memcmp(t->tokens[i].sha256, d, 32) == 0) hit = &t->tokens[i];
  OPENSSL_cleanse(d, sizeof d);
  return hit;
}

tpu_role_t tpu_auth_cert_role(const tpu_auth_table_t *t, const char *cn, tpu_role_t dflt) {
  if (t && cn)
    for (size_t i = 0; i < t->ncerts; i++)
      if (!strcmp(t->certs[i].cn, cn)) return t->certs[i].role;
  return dflt;
}

int tpu_auth_parse_bearer(const char *v, size_t len, const char **tok, size_t *toklen) {
  size_t i = 0;
  while (i < len && (v[i] == ' ' || v[i] == '\t')) i++;
  static const char scheme[] = "bearer";
  if (len - i < sizeof scheme) return -1; /* the scheme, a blank, at least one character */
  for (size_t k = 0; k < sizeof scheme - 1; k++)
    if ((v[i + k] | 0x20) != scheme[k]) return -1;
  i += sizeof scheme - 1;
  if (v[i] != ' ' && v[i] != '\t') return -1;
  while (i < len && (v[i] == ' ' || v[i] == '\t')) i++;
  size_t e = len;
  while (e > i && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
  if (e == i) return -1;
  for (size_t k = i; k < e; k++)
    if (v[k] == ' ' || v[k] == '\t') return -1;
  *tok = v + i;
  *toklen = e - i;
  return 0;
}

int tpu_auth_enabled(const tpu_auth_policy_t *p) { return p->table != NULL || p->require_cert; }

int tpu_auth_decide(const tpu_auth_policy_t *p, const tpu_auth_peer_t *peer, const char *authz,
                    size_t authz_len, size_t n_authz, tpu_need_t need, char *who, size_t wholen,
                    char *msg, size_t msglen, tpu_role_t *role_out) {
  const char *addr = peer->peer ? peer->peer : "?";
  const char *subj = peer->cert_subject && *peer->cert_subject ? peer->cert_subject : NULL;
  tpu_role_t role = TPU_ROLE_NONE;
  const char *token_name = NULL;
  int code = TPU_CODE_OK;
  if (msglen) msg[0] = 0;
  if (n_authz > 1) { /* no principal: neither value is looked at */
    tpu_errf(msg, msglen, "the request carries %zu authorization values; send exactly one "
             "(\"authorization: Bearer <token>\"): which of several counts is ambiguous, so "
             "none does", n_authz);
    code = TPU_CODE_INVALID_ARGUMENT;
    goto done;
  }
  if (!tpu_auth_enabled(p)) {
    role = TPU_ROLE_ADMIN; /* no access control configured: loopback by default (README) */
    goto done;
  }
  if (need == TPU_NEED_OPEN) goto done; /* open endpoints ignore credentials, even wrong ones */
  if (authz) {
    const char *tok;
    size_t toklen;
    if (tpu_auth_parse_bearer(authz, authz_len, &tok, &toklen) != 0) {
      tpu_errf(msg, msglen, "authorization is not \"Bearer <token>\"");
      code = TPU_CODE_UNAUTHENTICATED;
      goto done;
    }
    const tpu_auth_token_t *e = tpu_auth_find_token(p->table, tok, toklen);
    if (!e) {
      tpu_errf(msg, msglen, "invalid bearer token");
      code = TPU_CODE_UNAUTHENTICATED;
      goto done;
    }
    token_name = e->name;
    role = e->role;
  } else if (peer->cert_cn) {
    role = tpu_auth_cert_role(p->table, peer->cert_cn, p->cert_role);
  } else {
    tpu_errf(msg, msglen, "%s", p->require_cert ? "no client certificate and no bearer token"
                                              : "missing credentials: send \"authorization: "
                                                "Bearer <token>\"");
    code = TPU_CODE_UNAUTHENTICATED;
    goto done;
  }
  if ((int)role < (int)need) {
    tpu_errf(msg, msglen, "%s%s has role %s; this call needs role %s",
             token_name ? "token " : "", token_name ? token_name : (subj ? subj : "client"),
             tpu_auth_role_name(role), need == TPU_NEED_ADMIN ? "admin" : "infer");
    code = TPU_CODE_PERMISSION_DENIED;
  }
done:
  if (token_name && subj)
    snprintf(who, wholen, "token=%s %s (%s)", token_name, subj, addr);
  else if (token_name)
    snprintf(who, wholen, "token=%s (%s)", token_name, addr);
  else if (subj)
    snprintf(who, wholen, "%s (%s)", subj, addr);
  else
    snprintf(who, wholen, "%s", addr);
  if (role_out) *role_out = role;
  return code;
}

