/*
 * auth.h - access control: bearer tokens, certificate identities, roles.
 *
 * DESIGN
 * Pure decisions over bytes; no sockets, no global state, so the whole policy is unit-tested
 * (tests/server/auth/test_auth.c). The server (auth_wire.c, dispatch/dispatch.c) holds
 * one parsed table behind a read-write lock and swaps it on SIGHUP.
 *
 * The tokens file (--tokens FILE) is text, one entry a line, fields separated by blanks, `#`
 * starts a comment:
 *     token <sha256-hex-of-the-token> <role> <name>
 *     cert  <certificate CN>          <role>
 * A `token` line maps the SHA-256 (64 hex digits) of a bearer token to a name (the audit
 * identity) and a role; the token itself is never stored (generate the digest with
 * `printf %s "$TOKEN" | sha256sum`). A `cert` line gives a client-certificate CN a role other
 * than --tls-client-role. Names and CNs are 1..64 bytes of [A-Za-z0-9._@:+=-]. Roles:
 *   infer: inference, MatMul, model and server metadata, repository index, health, metrics;
 *   admin: everything infer may do, and load, unload, /v2/debug.
 * Token digests are compared with CRYPTO_memcmp against every entry (no early exit), so the time
 * a lookup takes does not say how much of a guess was right.
 *
 * Decision (tpu_auth_decide): when neither tokens nor client certificates are configured, every
 * request is allowed and the identity is the peer address. Otherwise a request that carries a
 * bearer token is the token's principal (an unknown token is UNAUTHENTICATED even when a valid
 * certificate came with it); without one, a verified client certificate is its principal, with
 * its `cert` line's role or the default; with neither, UNAUTHENTICATED. Open endpoints (health,
 * and metrics when asked) skip all of it. A principal whose role is below the need gets
 * PERMISSION_DENIED. Before all of it, a request carrying more than one authorization value is
 * INVALID_ARGUMENT (HTTP 400, RFC 6750 section 3.1 "invalid_request": it "repeats the same
 * parameter"), even where credentials are not looked at.
 */
#ifndef TPU_AUTH_H
#define TPU_AUTH_H

#include <stddef.h>
#include <stdint.h>

/* Roles, in increasing power: a role may do everything the ones below it may. */
typedef enum {
  TPU_ROLE_NONE = 0,  /* no principal */
  TPU_ROLE_INFER = 1, /* inference and read-only calls */
  TPU_ROLE_ADMIN = 2  /* model load/unload and debug pages too */
} tpu_role_t;

/* What a call needs. */
typedef enum {
  TPU_NEED_OPEN = 0,  /* nothing (health when --auth-open-health) */
  TPU_NEED_INFER = 1, /* a principal with role infer or admin */
  TPU_NEED_ADMIN = 2  /* a principal with role admin */
} tpu_need_t;

#define TPU_AUTH_MAX_NAME 64
#define TPU_AUTH_IDENTITY_MAX 256 /* bytes of an identity string, with its NUL */

typedef struct {
  uint8_t sha256[32];
  char name[TPU_AUTH_MAX_NAME + 1];
  tpu_role_t role;
} tpu_auth_token_t;

typedef struct {
  char cn[TPU_AUTH_MAX_NAME + 1];
  tpu_role_t role;
} tpu_auth_cert_t;

/* A parsed tokens file (immutable once parsed). */
typedef struct {
  tpu_auth_token_t *tokens;
  size_t ntokens;
  tpu_auth_cert_t *certs;
  size_t ncerts;
} tpu_auth_table_t;

/* "infer"/"admin" → role; returns 0, or -1 for anything else. */
int tpu_auth_parse_role(const char *s, tpu_role_t *out);
/* "none", "infer" or "admin". */
const char *tpu_auth_role_name(tpu_role_t role);

/* Parses a tokens file's text (`what` names it in messages). Returns 0 with *out (free with
 * tpu_auth_table_free), or -1 with err saying which line is wrong and what was expected. */
int tpu_auth_table_parse(const char *text, size_t len, const char *what, tpu_auth_table_t **out,
                         char *err, size_t errlen);
/* Reads and parses the file at `path`. */
int tpu_auth_table_load(const char *path, tpu_auth_table_t **out, char *err, size_t errlen);
/* Accepts NULL. */
void tpu_auth_table_free(tpu_auth_table_t *t);

/* The entry whose digest is SHA-256(token), or NULL; constant time in the table's size. */
const tpu_auth_token_t *tpu_auth_find_token(const tpu_auth_table_t *t, const char *token,
                                            size_t len);
/* The role of a certificate CN: its `cert` line's, else `dflt`. t may be NULL. */
tpu_role_t tpu_auth_cert_role(const tpu_auth_table_t *t, const char *cn, tpu_role_t dflt);

/* Cuts the token out of an "authorization" value "Bearer <token>" (scheme case-insensitive,
 * blanks around). Returns 0 with *tok and *toklen pointing into `v`, or -1 when it is not one. */
int tpu_auth_parse_bearer(const char *v, size_t len, const char **tok, size_t *toklen);

/* Who is calling, as the transport knows it. */
typedef struct {
  const char *peer;      /* "address:port" */
  const char *cert_cn;   /* the verified client certificate's CN, or NULL when none */
  const char *cert_subject; /* "CN=alice SAN=DNS:alice.example" or NULL */
} tpu_auth_peer_t;

/* Policy the server applies. */
typedef struct {
  const tpu_auth_table_t *table; /* tokens and cert roles; NULL when --tokens is not set */
  int require_cert;              /* --tls-client-ca is set: every connection has a cert */
  tpu_role_t cert_role;          /* --tls-client-role */
} tpu_auth_policy_t;

/* Whether the policy checks anything (tokens or client certificates configured). */
int tpu_auth_enabled(const tpu_auth_policy_t *p);

/*
 * Decides one request. `authz` is the "authorization" metadata or header value (NULL when
 * absent) and `n_authz` how many such values the request carried (authz is the first): more
 * than one is INVALID_ARGUMENT (3) whatever the policy, on every endpoint, open or not and with
 * or without access control, since which of several counts is ambiguous (protobuf's map says
 * the last, an HTTP proxy may have checked the first). Writes the identity for the audit log to who[0..wholen): the principal, then the
 * peer address in parentheses: "CN=alice SAN=DNS:alice.example (127.0.0.1:5555)",
 * "token=ci (10.0.0.7:4242)", "token=ci CN=runner (10.0.0.7:4242)" (a token over mTLS); just
 * the peer address when no principal is known. Returns TPU_CODE_OK (0), 3 (INVALID_ARGUMENT), 16
 * (UNAUTHENTICATED) or 7 (PERMISSION_DENIED) with msg saying why; *role_out (may be NULL)
 * receives the principal's role.
 */
int tpu_auth_decide(const tpu_auth_policy_t *p, const tpu_auth_peer_t *peer, const char *authz,
                    size_t authz_len, size_t n_authz, tpu_need_t need, char *who, size_t wholen,
                    char *msg, size_t msglen, tpu_role_t *role_out);


#endif /* TPU_AUTH_H */
