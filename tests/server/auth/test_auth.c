/*
 * test_auth.c - the tokens file parser, bearer parsing and the access decision (server/auth.c),
 * from bytes: no sockets, no server.
 */
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "stats.h"
#include "tpu_test.h"
#include "tpud.pb-c.h"

/* SHA-256("s3cret"), and a digest no test token has. */
#define H_S3CRET "1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0"
#define H_OPS "09ba2a0d0a4d6d2c4a1c4b1b54e5f2d06d8cb6b2b1e5e2e4f5a6e7d8c9b0a1f2"

static tpu_auth_table_t *parse_ok(const char *text) {
  tpu_auth_table_t *t = NULL;
  char err[256] = "";
  int rc = tpu_auth_table_parse(text, strlen(text), "tokens", &t, err, sizeof err);
  if (rc != 0) printf("unexpected parse error: %s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  return t;
}

static void expect_parse_error(const char *text, const char *needle) {
  tpu_auth_table_t *t = NULL;
  char err[256] = "";
  CU_ASSERT_EQUAL(tpu_auth_table_parse(text, strlen(text), "tokens", &t, err, sizeof err), -1);
  CU_ASSERT_PTR_NULL(t);
  if (!strstr(err, needle)) printf("error '%s' lacks '%s'\n", err, needle);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void test_parse(void) {
  tpu_auth_table_t *t = parse_ok("# comment\n\n  token " H_S3CRET " admin ops  # trailing\n"
                                 "token " H_OPS " infer app\r\ncert alice admin\n");
  CU_ASSERT_EQUAL(t->ntokens, 2);
  CU_ASSERT_EQUAL(t->ncerts, 1);
  CU_ASSERT_STRING_EQUAL(t->tokens[0].name, "ops");
  CU_ASSERT_EQUAL(t->tokens[0].role, TPU_ROLE_ADMIN);
  CU_ASSERT_EQUAL(t->tokens[1].role, TPU_ROLE_INFER);
  CU_ASSERT_EQUAL(t->tokens[0].sha256[0], 0x1e);
  CU_ASSERT_EQUAL(t->tokens[0].sha256[31], 0xa0);
  CU_ASSERT_STRING_EQUAL(t->certs[0].cn, "alice");
  tpu_auth_table_free(t);
  t = parse_ok(""); /* an empty file: no tokens (every request then needs a certificate) */
  CU_ASSERT_EQUAL(t->ntokens, 0);
  tpu_auth_table_free(t);
  tpu_auth_table_free(NULL);
}

static void test_parse_errors(void) {
  expect_parse_error("token abc admin ops\n", "tokens:1: token digest must be 64 hex digits");
  expect_parse_error("\ntoken " H_S3CRET " root ops\n", "tokens:2: role must be infer or admin");
  expect_parse_error("token " H_S3CRET " admin\n", "4 fields");
  expect_parse_error("token " H_S3CRET " admin a b\n", "4 fields");
  expect_parse_error("token " H_S3CRET " admin o\"ps\n", "name must be");
  expect_parse_error("token " H_S3CRET " admin ops\ntoken " H_S3CRET " infer app\n",
                     "tokens:2: the same token digest appears twice (first as 'ops')");
  expect_parse_error("password hunter2\n", "unknown entry 'password'");
  expect_parse_error("cert alice superuser\n", "role must be infer or admin");
  expect_parse_error("cert alice\n", "3 fields");
  char bad[96];
  snprintf(bad, sizeof bad, "token %.63sg admin ops\n", H_S3CRET);
  expect_parse_error(bad, "64 hex digits");
}

static void test_find_token(void) {
  tpu_auth_table_t *t = parse_ok("token " H_S3CRET " admin ops\ntoken " H_OPS " infer app\n");
  const tpu_auth_token_t *e = tpu_auth_find_token(t, "s3cret", 6);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CU_ASSERT_STRING_EQUAL(e->name, "ops");
  CU_ASSERT_PTR_NULL(tpu_auth_find_token(t, "s3cre", 5));
  CU_ASSERT_PTR_NULL(tpu_auth_find_token(t, "s3cret ", 7));
  CU_ASSERT_PTR_NULL(tpu_auth_find_token(t, "", 0));
  CU_ASSERT_PTR_NULL(tpu_auth_find_token(NULL, "s3cret", 6));
  /* The digest itself is not a token. */
  CU_ASSERT_PTR_NULL(tpu_auth_find_token(t, H_S3CRET, 64));
  tpu_auth_table_free(t);
}

static void test_bearer(void) {
  const char *tok;
  size_t n;
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("Bearer abc", 10, &tok, &n), 0);
  CU_ASSERT_EQUAL(n, 3);
  CU_ASSERT_NSTRING_EQUAL(tok, "abc", 3);
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("  bEaReR \t xyz  ", 16, &tok, &n), 0);
  CU_ASSERT_NSTRING_EQUAL(tok, "xyz", 3);
  CU_ASSERT_EQUAL(n, 3);
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("Basic abc", 9, &tok, &n), -1);
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("Bearer", 6, &tok, &n), -1);
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("Bearer   ", 9, &tok, &n), -1);
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("Bearerabc", 9, &tok, &n), -1);
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("Bearer a b", 10, &tok, &n), -1);
  CU_ASSERT_EQUAL(tpu_auth_parse_bearer("", 0, &tok, &n), -1);
}

static void test_roles(void) {
  tpu_role_t r;
  CU_ASSERT_EQUAL(tpu_auth_parse_role("infer", &r), 0);
  CU_ASSERT_EQUAL(r, TPU_ROLE_INFER);
  CU_ASSERT_EQUAL(tpu_auth_parse_role("admin", &r), 0);
  CU_ASSERT_EQUAL(r, TPU_ROLE_ADMIN);
  CU_ASSERT_EQUAL(tpu_auth_parse_role("Admin", &r), -1);
  CU_ASSERT_EQUAL(tpu_auth_parse_role(NULL, &r), -1);
  CU_ASSERT_STRING_EQUAL(tpu_auth_role_name(TPU_ROLE_ADMIN), "admin");
}

/* decide(): returns the code, the identity in who. */
static int decide(const tpu_auth_policy_t *p, const char *cn, const char *authz, tpu_need_t need,
                  char *who, tpu_role_t *role) {
  char subj[100] = "";
  if (cn) snprintf(subj, sizeof subj, "CN=%s", cn);
  tpu_auth_peer_t peer = {.peer = "10.0.0.7:4242", .cert_cn = cn, .cert_subject = subj};
  char msg[256];
  return tpu_auth_decide(p, &peer, authz, authz ? strlen(authz) : 0, authz ? 1 : 0, need, who,
                         TPU_AUTH_IDENTITY_MAX, msg, sizeof msg, role);
}

/* Two or more authorization values: INVALID_ARGUMENT under every policy and for every need,
 * the identity without a principal (neither value is looked at), the message saying so. */
static void test_decide_repeated_authorization(void) {
  tpu_auth_table_t *t = parse_ok("token " H_S3CRET " admin ops\n");
  tpu_auth_policy_t none = {0}, tok = {.table = t, .cert_role = TPU_ROLE_INFER},
                    mtls = {.table = t, .require_cert = 1, .cert_role = TPU_ROLE_INFER};
  const tpu_auth_policy_t *pol[] = {&none, &tok, &mtls};
  tpu_need_t needs[] = {TPU_NEED_OPEN, TPU_NEED_INFER, TPU_NEED_ADMIN};
  tpu_auth_peer_t peer = {.peer = "10.0.0.7:4242", .cert_cn = "alice",
                          .cert_subject = "CN=alice"};
  for (size_t i = 0; i < 3; i++)
    for (size_t k = 0; k < 3; k++)
      for (size_t n = 2; n <= 3; n++) {
        char who[TPU_AUTH_IDENTITY_MAX], msg[256];
        tpu_role_t role = TPU_ROLE_ADMIN;
        /* The first value is the admin token: it must not count. */
        CU_ASSERT_EQUAL(tpu_auth_decide(pol[i], &peer, "Bearer s3cret", 13, n, needs[k], who,
                                        sizeof who, msg, sizeof msg, &role),
                        TPU_CODE_INVALID_ARGUMENT);
        CU_ASSERT_EQUAL(role, TPU_ROLE_NONE);
        CU_ASSERT_STRING_EQUAL(who, "CN=alice (10.0.0.7:4242)");
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, n == 2 ? "carries 2 authorization values"
                                                  : "carries 3 authorization values"));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "send exactly one"));
      }
  /* One value, or none, is decided as before. */
  char who[TPU_AUTH_IDENTITY_MAX], msg[256];
  CU_ASSERT_EQUAL(tpu_auth_decide(&tok, &peer, "Bearer s3cret", 13, 1, TPU_NEED_ADMIN, who,
                                  sizeof who, msg, sizeof msg, NULL),
                  TPU_CODE_OK);
  CU_ASSERT_EQUAL(tpu_auth_decide(&none, &peer, NULL, 0, 0, TPU_NEED_ADMIN, who, sizeof who, msg,
                                  sizeof msg, NULL),
                  TPU_CODE_OK);
  tpu_auth_table_free(t);
}

static void test_decide(void) {
  tpu_auth_table_t *t =
      parse_ok("token " H_S3CRET " admin ops\ntoken " H_OPS " infer app\ncert boss admin\n");
  char who[TPU_AUTH_IDENTITY_MAX];
  tpu_role_t role;
  /* No access control: everything allowed, identity is the peer. */
  tpu_auth_policy_t none = {0};
  CU_ASSERT_EQUAL(decide(&none, NULL, NULL, TPU_NEED_ADMIN, who, &role), TPU_CODE_OK);
  CU_ASSERT_STRING_EQUAL(who, "10.0.0.7:4242");
  /* Tokens only. */
  tpu_auth_policy_t tok = {.table = t, .cert_role = TPU_ROLE_INFER};
  CU_ASSERT_EQUAL(decide(&tok, NULL, NULL, TPU_NEED_INFER, who, &role), TPU_CODE_UNAUTHENTICATED);
  CU_ASSERT_EQUAL(decide(&tok, NULL, NULL, TPU_NEED_OPEN, who, &role), TPU_CODE_OK);
  CU_ASSERT_EQUAL(decide(&tok, NULL, "Bearer wrong", TPU_NEED_OPEN, who, &role), TPU_CODE_OK);
  CU_ASSERT_EQUAL(decide(&tok, NULL, "Bearer wrong", TPU_NEED_INFER, who, &role),
                  TPU_CODE_UNAUTHENTICATED);
  CU_ASSERT_EQUAL(decide(&tok, NULL, "Basic s3cret", TPU_NEED_INFER, who, &role),
                  TPU_CODE_UNAUTHENTICATED);
  CU_ASSERT_EQUAL(decide(&tok, NULL, "Bearer s3cret", TPU_NEED_ADMIN, who, &role), TPU_CODE_OK);
  CU_ASSERT_EQUAL(role, TPU_ROLE_ADMIN);
  CU_ASSERT_STRING_EQUAL(who, "token=ops (10.0.0.7:4242)");
  /* A digest that is not in the file (H_OPS is no real token's): the guess fails. */
  CU_ASSERT_EQUAL(decide(&tok, NULL, "Bearer " H_OPS, TPU_NEED_INFER, who, &role),
                  TPU_CODE_UNAUTHENTICATED);
  /* Client certificates. */
  tpu_auth_policy_t mtls = {.table = t, .require_cert = 1, .cert_role = TPU_ROLE_INFER};
  CU_ASSERT_EQUAL(decide(&mtls, "alice", NULL, TPU_NEED_INFER, who, &role), TPU_CODE_OK);
  CU_ASSERT_STRING_EQUAL(who, "CN=alice (10.0.0.7:4242)");
  CU_ASSERT_EQUAL(decide(&mtls, "alice", NULL, TPU_NEED_ADMIN, who, &role),
                  TPU_CODE_PERMISSION_DENIED);
  CU_ASSERT_EQUAL(decide(&mtls, "boss", NULL, TPU_NEED_ADMIN, who, &role), TPU_CODE_OK);
  /* A token over mTLS: the token's role and name, the certificate kept in the identity. */
  CU_ASSERT_EQUAL(decide(&mtls, "alice", "Bearer s3cret", TPU_NEED_ADMIN, who, &role),
                  TPU_CODE_OK);
  CU_ASSERT_STRING_EQUAL(who, "token=ops CN=alice (10.0.0.7:4242)");
  /* A wrong token is not rescued by a good certificate. */
  CU_ASSERT_EQUAL(decide(&mtls, "boss", "Bearer nope", TPU_NEED_INFER, who, &role),
                  TPU_CODE_UNAUTHENTICATED);
  CU_ASSERT_EQUAL(decide(&mtls, NULL, NULL, TPU_NEED_INFER, who, &role),
                  TPU_CODE_UNAUTHENTICATED);
  /* mTLS without a tokens file: admin by default role. */
  tpu_auth_policy_t adm = {.require_cert = 1, .cert_role = TPU_ROLE_ADMIN};
  CU_ASSERT_EQUAL(decide(&adm, "alice", NULL, TPU_NEED_ADMIN, who, &role), TPU_CODE_OK);
  CU_ASSERT_EQUAL(tpu_auth_cert_role(NULL, "alice", TPU_ROLE_INFER), TPU_ROLE_INFER);
  tpu_auth_table_free(t);
}

TPU_TEST_SUITE(server_auth, {"parse", test_parse}, {"parse_errors", test_parse_errors},
               {"find_token", test_find_token}, {"bearer", test_bearer}, {"roles", test_roles},
               {"decide", test_decide},
               {"decide_repeated_authorization", test_decide_repeated_authorization});
