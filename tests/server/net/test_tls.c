/*
 * test_tls.c - tpu_tls: contexts from a throwaway certificate (tls_fixture.c), clear errors for
 * missing, garbage and mismatched files, handshakes over a socketpair between a server SSL from
 * tpu_tls_new_ssl and a client SSL (ALPN per port, the version and cipher policy, client
 * certificates and the identity taken from them), the fingerprint, reload with its failure path,
 * and the error text helper.
 */
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tls.h"
#include "tls_fixture.h"
#include "tpu_test.h"

static const tpu_test_pki_t *pki;

static const unsigned char alpn_h2_native[] = "\x02h2\x06tpud/1";
static const unsigned char alpn_native_h2[] = "\x06tpud/1\x02h2";
static const unsigned char alpn_native[] = "\x06tpud/1";
static const unsigned char alpn_http11[] = "\x08http/1.1";
static const unsigned char alpn_h2_http11[] = "\x02h2\x08http/1.1";
static const unsigned char alpn_h2[] = "\x02h2";
#define ALPN(a) a, (unsigned)(sizeof a - 1)

static int pki_up(void) { return (pki = tpu_test_pki()) != NULL; }

static tpu_tls_t *create_ok(const char *cert, const char *key, const char *ca) {
  tpu_tls_config_t cfg = {.cert_file = cert, .key_file = key, .client_ca_file = ca};
  tpu_tls_t *t = NULL;
  char err[512] = "";
  int rc = tpu_tls_create(&cfg, &t, err, sizeof err);
  if (rc != 0) fprintf(stderr, "\ntpu_tls_create: %s\n", err);
  CU_ASSERT_EQUAL(rc, 0);
  return t;
}

/* A connection between a server SSL for `port` and a client from cctx. */
typedef struct {
  SSL *srv, *cli;
  int fd[2];
  int server_ok, client_ok, ok;
} pair_t;

static void pair_open(pair_t *p, tpu_tls_t *t, tpu_tls_port_t port, SSL_CTX *cctx) {
  memset(p, 0, sizeof *p);
  p->fd[0] = p->fd[1] = -1;
  CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, p->fd), 0);
  p->srv = tpu_tls_new_ssl(t, port);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p->srv);
  p->cli = SSL_new(cctx);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p->cli);
  SSL_set_fd(p->srv, p->fd[0]);
  SSL_set_fd(p->cli, p->fd[1]);
  SSL_set_accept_state(p->srv);
  SSL_set_connect_state(p->cli);
  SSL_set_tlsext_host_name(p->cli, "localhost");
  SSL_set1_host(p->cli, "localhost"); /* the client checks the name too, as tpuctl does */
  p->ok = tpu_test_handshake(p->srv, p->cli, &p->server_ok, &p->client_ok);
}

static void pair_close(pair_t *p) {
  SSL_free(p->srv);
  SSL_free(p->cli);
  if (p->fd[0] >= 0) close(p->fd[0]);
  if (p->fd[1] >= 0) close(p->fd[1]);
  p->srv = p->cli = NULL;
  p->fd[0] = p->fd[1] = -1;
}

/* The ALPN protocol the client sees ("" for none). */
static void alpn_of(SSL *ssl, char *out, size_t len) {
  const unsigned char *p = NULL;
  unsigned int l = 0;
  SSL_get0_alpn_selected(ssl, &p, &l);
  snprintf(out, len, "%.*s", p ? (int)l : 0, p ? (const char *)p : "");
}

static void hex_fingerprint(X509 *x, char *out, size_t len) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  out[0] = 0;
  if (!x || X509_digest(x, EVP_sha256(), md, &n) != 1) return;
  size_t o = 0;
  for (unsigned int i = 0; i < n; i++)
    o += (size_t)snprintf(out + o, len - o, "%s%02X", i ? ":" : "", md[i]);
}

static void file_fingerprint(const char *path, char *out, size_t len) {
  out[0] = 0;
  FILE *f = fopen(path, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
  fclose(f);
  hex_fingerprint(x, out, len);
  X509_free(x);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = calloc(1, 65536);
  size_t n = buf ? fread(buf, 1, 65535, f) : 0;
  (void)n;
  fclose(f);
  return buf;
}

static void copy_file(const char *from, const char *to) {
  char *text = slurp(from);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  FILE *f = fopen(to, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(text, f);
  fclose(f);
  free(text);
}

/* ---- contexts ---- */

static void test_create(void) {
  CU_ASSERT_FATAL(pki_up());
  tpu_tls_t *t = create_ok(pki->server_cert, pki->server_key, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  CU_ASSERT_EQUAL(tpu_tls_requires_client_cert(t), 0);
  CU_ASSERT_EQUAL(tpu_tls_requires_client_cert(NULL), 0);
  /* The fingerprint: SHA-256 of the certificate, upper-case hex pairs joined by colons. */
  char fp[160], want[160];
  tpu_tls_fingerprint(t, fp, sizeof fp);
  file_fingerprint(pki->server_cert, want, sizeof want);
  CU_ASSERT_EQUAL(strlen(fp), 32 * 3 - 1);
  CU_ASSERT_STRING_EQUAL(fp, want);
  /* A buffer too small for it still ends in a NUL, with whole pairs only. */
  char small[10];
  tpu_tls_fingerprint(t, small, sizeof small);
  CU_ASSERT(strlen(small) < sizeof small);
  CU_ASSERT_EQUAL(strncmp(small, want, strlen(small)), 0);
  SSL *a = tpu_tls_new_ssl(t, TPU_TLS_NATIVE), *b = tpu_tls_new_ssl(t, TPU_TLS_HTTP);
  CU_ASSERT_PTR_NOT_NULL(a);
  CU_ASSERT_PTR_NOT_NULL(b);
  CU_ASSERT_PTR_NOT_EQUAL(SSL_get_SSL_CTX(a), SSL_get_SSL_CTX(b)); /* one context per port */
  SSL_free(a);
  SSL_free(b);
  tpu_tls_free(t);
  tpu_tls_free(NULL);

  /* The key may live in the certificate file (key_file NULL or ""). */
  char both[TPU_TEST_PATH];
  char *cert = slurp(pki->server_cert), *key = slurp(pki->server_key);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cert);
  CU_ASSERT_PTR_NOT_NULL_FATAL(key);
  size_t n = strlen(cert) + strlen(key) + 1;
  char *joined = malloc(n);
  snprintf(joined, n, "%s%s", cert, key);
  CU_ASSERT_EQUAL_FATAL(tpu_test_pki_write(pki, "both.pem", joined, both), 0);
  free(cert);
  free(key);
  free(joined);
  t = create_ok(both, NULL, NULL);
  tpu_tls_free(t);
  t = create_ok(both, "", "");
  CU_ASSERT_EQUAL(tpu_tls_requires_client_cert(t), 0);
  tpu_tls_free(t);
}

/* tpu_tls_create fails with `err` containing every one of the NULL-ended strings. */
static void refused(const char *cert, const char *key, const char *ca, const char *const *want) {
  tpu_tls_config_t cfg = {.cert_file = cert, .key_file = key, .client_ca_file = ca};
  tpu_tls_t *t = (tpu_tls_t *)&cfg; /* must come back NULL */
  char err[512] = "";
  CU_ASSERT_EQUAL(tpu_tls_create(&cfg, &t, err, sizeof err), -1);
  CU_ASSERT_PTR_NULL(t);
  for (size_t i = 0; want[i]; i++) {
    if (!strstr(err, want[i])) fprintf(stderr, "\nerror \"%s\" lacks \"%s\"\n", err, want[i]);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want[i]));
  }
  CU_ASSERT_EQUAL(ERR_peek_error(), 0); /* nothing left on the thread's error queue */
}

static void test_refuse(void) {
  CU_ASSERT_FATAL(pki_up());
  char garbage[TPU_TEST_PATH], missing[TPU_TEST_PATH];
  CU_ASSERT_EQUAL_FATAL(tpu_test_pki_write(pki, "garbage.pem", "this is not PEM\n", garbage), 0);
  snprintf(missing, sizeof missing, "%s/no-such.pem", pki->dir);

  refused(missing, pki->server_key, NULL,
          (const char *const[]){"--tls-cert", missing, "cannot open", NULL});
  refused(garbage, pki->server_key, NULL,
          (const char *const[]){"--tls-cert", garbage, "expected a PEM certificate chain", NULL});
  refused(pki->dir, pki->server_key, NULL,
          (const char *const[]){"--tls-cert", "directory", NULL});
  refused(pki->server_cert, missing, NULL,
          (const char *const[]){"--tls-key", missing, "cannot open", NULL});
  refused(pki->server_cert, garbage, NULL,
          (const char *const[]){"--tls-key", garbage, "expected a PEM private key", NULL});
  /* A certificate alone, with no key in it and none named. */
  refused(pki->server_cert, NULL, NULL,
          (const char *const[]){"--tls-key", pki->server_cert, "expected a PEM private key", NULL});
  /* A key of another certificate. OpenSSL 3 already refuses it while loading the key ("key
   * values mismatch"), before tls.c's own "does not match the certificate" check can run. */
  refused(pki->server_cert, pki->server2_key, NULL,
          (const char *const[]){"--tls-key", pki->server2_key, "mismatch", NULL});
  refused(pki->server_cert, pki->server_key, missing,
          (const char *const[]){"--tls-client-ca", missing, "cannot open", NULL});
  refused(pki->server_cert, pki->server_key, garbage,
          (const char *const[]){"--tls-client-ca", garbage, "expected PEM CA certificates",
                                NULL});
  /* No certificate named at all. */
  refused(NULL, NULL, NULL, (const char *const[]){"--tls-cert", NULL});
}

/* ---- handshakes ---- */

/* A handshake on `port` with a client offering `alpn`: it must succeed with `want` selected. */
static void alpn_case(tpu_tls_t *t, tpu_tls_port_t port, const unsigned char *alpn, unsigned len,
                      const char *want) {
  SSL_CTX *cctx = tpu_test_client_ctx(pki->ca, NULL, NULL, alpn, len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cctx);
  pair_t p;
  pair_open(&p, t, port, cctx);
  CU_ASSERT_TRUE(p.ok);
  char got_s[32], got_c[32];
  alpn_of(p.srv, got_s, sizeof got_s);
  alpn_of(p.cli, got_c, sizeof got_c);
  if (strcmp(got_c, want) != 0) fprintf(stderr, "\nALPN: got \"%s\", want \"%s\"\n", got_c, want);
  CU_ASSERT_STRING_EQUAL(got_s, want);
  CU_ASSERT_STRING_EQUAL(got_c, want);
  CU_ASSERT_EQUAL(SSL_get_verify_result(p.cli), X509_V_OK);
  pair_close(&p);
  SSL_CTX_free(cctx);
}

static void test_alpn(void) {
  CU_ASSERT_FATAL(pki_up());
  tpu_tls_t *t = create_ok(pki->server_cert, pki->server_key, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  /* Native port: h2 first whatever the client's order, else tpud/1, else no ALPN at all. */
  alpn_case(t, TPU_TLS_NATIVE, ALPN(alpn_h2_native), "h2");
  alpn_case(t, TPU_TLS_NATIVE, ALPN(alpn_native_h2), "h2");
  alpn_case(t, TPU_TLS_NATIVE, ALPN(alpn_h2), "h2");
  alpn_case(t, TPU_TLS_NATIVE, ALPN(alpn_native), "tpud/1");
  alpn_case(t, TPU_TLS_NATIVE, ALPN(alpn_http11), "");
  alpn_case(t, TPU_TLS_NATIVE, NULL, 0, "");
  /* HTTP port: http/1.1 only. */
  alpn_case(t, TPU_TLS_HTTP, ALPN(alpn_h2_http11), "http/1.1");
  alpn_case(t, TPU_TLS_HTTP, ALPN(alpn_h2), "");
  alpn_case(t, TPU_TLS_HTTP, NULL, 0, "");
  tpu_tls_free(t);
}

/* Application bytes both ways after a handshake, then close_notify. */
static void test_data(void) {
  CU_ASSERT_FATAL(pki_up());
  tpu_tls_t *t = create_ok(pki->server_cert, pki->server_key, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  SSL_CTX *cctx = tpu_test_client_ctx(pki->ca, NULL, NULL, ALPN(alpn_h2_native));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cctx);
  pair_t p;
  pair_open(&p, t, TPU_TLS_NATIVE, cctx);
  CU_ASSERT_TRUE_FATAL(p.ok);
  CU_ASSERT_STRING_EQUAL(SSL_get_version(p.srv), "TLSv1.3");
  char buf[64];
  CU_ASSERT_EQUAL(SSL_write(p.cli, "ping", 4), 4);
  CU_ASSERT_EQUAL(SSL_read(p.srv, buf, sizeof buf), 4);
  CU_ASSERT_EQUAL(memcmp(buf, "ping", 4), 0);
  CU_ASSERT_EQUAL(SSL_write(p.srv, "pong!", 5), 5);
  CU_ASSERT_EQUAL(SSL_read(p.cli, buf, sizeof buf), 5);
  CU_ASSERT_EQUAL(memcmp(buf, "pong!", 5), 0);
  /* One session ticket per TLS 1.3 handshake. */
  CU_ASSERT_EQUAL(SSL_get_num_tickets(p.srv), 1);
  SSL_shutdown(p.cli);
  CU_ASSERT_EQUAL(SSL_read(p.srv, buf, sizeof buf), 0);
  CU_ASSERT_EQUAL(SSL_get_error(p.srv, 0), SSL_ERROR_ZERO_RETURN);
  pair_close(&p);
  SSL_CTX_free(cctx);
  tpu_tls_free(t);
}

/* A client restricted to `max` version and `ciphers` (TLS 1.2 names): ok or not, and which. */
static void policy_case(tpu_tls_t *t, int max, const char *ciphers, int want_ok,
                        const char *want_cipher) {
  SSL_CTX *cctx = tpu_test_client_ctx(pki->ca, NULL, NULL, NULL, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cctx);
  SSL_CTX_set_min_proto_version(cctx, 0);
  SSL_CTX_set_security_level(cctx, 0); /* so that it is the server that refuses */
  SSL_CTX_set_max_proto_version(cctx, max);
  if (ciphers) CU_ASSERT_EQUAL(SSL_CTX_set_cipher_list(cctx, ciphers), 1);
  pair_t p;
  pair_open(&p, t, TPU_TLS_NATIVE, cctx);
  CU_ASSERT_EQUAL(p.ok, want_ok);
  CU_ASSERT_EQUAL(p.server_ok, want_ok);
  if (want_ok && want_cipher) CU_ASSERT_STRING_EQUAL(SSL_get_cipher_name(p.srv), want_cipher);
  pair_close(&p);
  SSL_CTX_free(cctx);
}

static void test_policy(void) {
  CU_ASSERT_FATAL(pki_up());
  tpu_tls_t *t = create_ok(pki->server_cert, pki->server_key, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  /* TLS 1.2 minimum: set on both ports' contexts (a TLS 1.1 client would fail on the cipher list
   * alone, so the handshakes below cannot tell the two apart). */
  SSL *n = tpu_tls_new_ssl(t, TPU_TLS_NATIVE), *h = tpu_tls_new_ssl(t, TPU_TLS_HTTP);
  CU_ASSERT_EQUAL(SSL_get_min_proto_version(n), TLS1_2_VERSION);
  CU_ASSERT_EQUAL(SSL_get_min_proto_version(h), TLS1_2_VERSION);
  CU_ASSERT_TRUE(SSL_get_options(n) & SSL_OP_NO_RENEGOTIATION);
  CU_ASSERT_TRUE(SSL_get_options(n) & SSL_OP_NO_COMPRESSION);
  SSL_free(n);
  SSL_free(h);
  policy_case(t, TLS1_1_VERSION, "ALL:@SECLEVEL=0", 0, NULL);
  policy_case(t, TLS1_VERSION, "ALL:@SECLEVEL=0", 0, NULL);
  /* TLS 1.2: ECDHE with AEAD only; CBC suites are refused even with ECDHE. */
  policy_case(t, TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256", 1,
              "ECDHE-ECDSA-AES128-GCM-SHA256");
  policy_case(t, TLS1_2_VERSION, "ECDHE-ECDSA-CHACHA20-POLY1305", 1,
              "ECDHE-ECDSA-CHACHA20-POLY1305");
  policy_case(t, TLS1_2_VERSION, "ECDHE-ECDSA-AES128-SHA256", 0, NULL);
  policy_case(t, TLS1_2_VERSION, "ECDHE-ECDSA-AES256-SHA", 0, NULL);
  /* Server preference: AES-256-GCM is first in the server's list, last in the client's. */
  policy_case(t, TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384", 1,
              "ECDHE-ECDSA-AES256-GCM-SHA384");
  tpu_tls_free(t);
}

/* With a client CA: which certificates each port accepts, and what identity it reads. */
static void mtls_case(tpu_tls_t *t, tpu_tls_port_t port, const char *cert, const char *key,
                      int want_ok, const char *want_cn, const char *want_subject) {
  SSL_CTX *cctx = tpu_test_client_ctx(pki->ca, cert, key, NULL, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cctx);
  pair_t p;
  pair_open(&p, t, port, cctx);
  CU_ASSERT_EQUAL(p.server_ok, want_ok);
  if (p.server_ok != want_ok)
    fprintf(stderr, "\nport %d, cert %s: handshake %s\n", (int)port, cert ? cert : "(none)",
            p.server_ok ? "succeeded" : "failed");
  if (want_ok && p.server_ok) {
    char cn[64], subject[160];
    int has = tpu_tls_peer_identity(p.srv, cn, sizeof cn, subject, sizeof subject);
    CU_ASSERT_EQUAL(has, cert != NULL);
    CU_ASSERT_STRING_EQUAL(cn, want_cn);
    CU_ASSERT_STRING_EQUAL(subject, want_subject);
  }
  pair_close(&p);
  SSL_CTX_free(cctx);
}

static void test_client_certs(void) {
  CU_ASSERT_FATAL(pki_up());
  tpu_tls_t *t = create_ok(pki->server_cert, pki->server_key, pki->ca);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  CU_ASSERT_EQUAL(tpu_tls_requires_client_cert(t), 1);
  const char *alice = "CN=alice SAN=email:alice@example.com,DNS:alice.example";
  /* Native: a certificate from the CA, nothing else. */
  mtls_case(t, TPU_TLS_NATIVE, pki->client_cert, pki->client_key, 1, "alice", alice);
  mtls_case(t, TPU_TLS_NATIVE, NULL, NULL, 0, "", "");
  mtls_case(t, TPU_TLS_NATIVE, pki->foreign_cert, pki->foreign_key, 0, "", "");
  mtls_case(t, TPU_TLS_NATIVE, pki->expired_cert, pki->expired_key, 0, "", "");
  /* HTTPS: no certificate is allowed (probes); one that is sent must verify. */
  mtls_case(t, TPU_TLS_HTTP, pki->client_cert, pki->client_key, 1, "alice", alice);
  mtls_case(t, TPU_TLS_HTTP, NULL, NULL, 1, "", "");
  mtls_case(t, TPU_TLS_HTTP, pki->foreign_cert, pki->foreign_key, 0, "", "");
  mtls_case(t, TPU_TLS_HTTP, pki->expired_cert, pki->expired_key, 0, "", "");
  /* A name with a quote and a newline reaches the log as '?'. */
  mtls_case(t, TPU_TLS_NATIVE, pki->odd_cert, pki->odd_key, 1, "ev?il?name",
            "CN=ev?il?name SAN=DNS:odd.example");
  tpu_tls_free(t);

  /* Without a client CA a client certificate is not asked for: no identity. */
  t = create_ok(pki->server_cert, pki->server_key, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  SSL_CTX *cctx = tpu_test_client_ctx(pki->ca, pki->client_cert, pki->client_key, NULL, 0);
  pair_t p;
  pair_open(&p, t, TPU_TLS_NATIVE, cctx);
  CU_ASSERT_TRUE(p.ok);
  char cn[8] = "x", subject[8] = "x";
  CU_ASSERT_EQUAL(tpu_tls_peer_identity(p.srv, cn, sizeof cn, subject, sizeof subject), 0);
  CU_ASSERT_STRING_EQUAL(cn, "");
  CU_ASSERT_STRING_EQUAL(subject, "");
  pair_close(&p);
  SSL_CTX_free(cctx);
  tpu_tls_free(t);
}

/* The certificate the client saw, as a fingerprint. */
static void seen_fingerprint(pair_t *p, char *out, size_t len) {
  hex_fingerprint(SSL_get0_peer_certificate(p->cli), out, len);
}

static void test_reload(void) {
  CU_ASSERT_FATAL(pki_up());
  char cert[TPU_TEST_PATH], key[TPU_TEST_PATH], fp1[160], fp2[160], fp[160], seen[160];
  snprintf(cert, sizeof cert, "%s/live.pem", pki->dir);
  snprintf(key, sizeof key, "%s/live.key", pki->dir);
  copy_file(pki->server_cert, cert);
  copy_file(pki->server_key, key);
  tpu_tls_t *t = create_ok(cert, key, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  tpu_tls_fingerprint(t, fp1, sizeof fp1);
  SSL_CTX *cctx = tpu_test_client_ctx(pki->ca, NULL, NULL, NULL, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cctx);
  SSL *old = tpu_tls_new_ssl(t, TPU_TLS_NATIVE); /* taken before the reload */
  CU_ASSERT_PTR_NOT_NULL_FATAL(old);

  copy_file(pki->server2_cert, cert);
  copy_file(pki->server2_key, key);
  char err[512] = "";
  CU_ASSERT_EQUAL(tpu_tls_reload(t, err, sizeof err), 0);
  tpu_tls_fingerprint(t, fp2, sizeof fp2);
  file_fingerprint(pki->server2_cert, fp, sizeof fp);
  CU_ASSERT_STRING_EQUAL(fp2, fp);
  CU_ASSERT_STRING_NOT_EQUAL(fp1, fp2);

  /* New connections get the new certificate... */
  pair_t p;
  pair_open(&p, t, TPU_TLS_NATIVE, cctx);
  CU_ASSERT_TRUE(p.ok);
  seen_fingerprint(&p, seen, sizeof seen);
  CU_ASSERT_STRING_EQUAL(seen, fp2);
  pair_close(&p);
  /* ...and one taken before keeps its old context, alive though the tpu_tls_t let it go. */
  int fd[2];
  CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0);
  SSL *cli = SSL_new(cctx);
  SSL_set_fd(old, fd[0]);
  SSL_set_fd(cli, fd[1]);
  SSL_set_accept_state(old);
  SSL_set_connect_state(cli);
  CU_ASSERT_TRUE(tpu_test_handshake(old, cli, NULL, NULL));
  hex_fingerprint(SSL_get0_peer_certificate(cli), seen, sizeof seen);
  CU_ASSERT_STRING_EQUAL(seen, fp1);
  SSL_free(old);
  SSL_free(cli);
  close(fd[0]);
  close(fd[1]);

  /* A broken file at reload: refused with the reason, the current certificate stays. */
  FILE *f = fopen(cert, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n", f);
  fclose(f);
  err[0] = 0;
  CU_ASSERT_EQUAL(tpu_tls_reload(t, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "--tls-cert"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, cert));
  tpu_tls_fingerprint(t, fp, sizeof fp);
  CU_ASSERT_STRING_EQUAL(fp, fp2);
  pair_open(&p, t, TPU_TLS_NATIVE, cctx);
  CU_ASSERT_TRUE(p.ok);
  seen_fingerprint(&p, seen, sizeof seen);
  CU_ASSERT_STRING_EQUAL(seen, fp2);
  pair_close(&p);
  /* A key that no longer matches at reload: refused too. */
  copy_file(pki->server_cert, cert);
  copy_file(pki->server2_key, key);
  CU_ASSERT_EQUAL(tpu_tls_reload(t, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "--tls-key"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "mismatch"));
  tpu_tls_fingerprint(t, fp, sizeof fp);
  CU_ASSERT_STRING_EQUAL(fp, fp2);
  SSL_CTX_free(cctx);
  tpu_tls_free(t);
}

static void test_last_error(void) {
  char out[256];
  ERR_clear_error();
  tpu_tls_last_error(out, sizeof out);
  CU_ASSERT_STRING_EQUAL(out, "unknown TLS error");
  /* Two errors queued: the last one is reported and the queue is emptied. */
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
  CU_ASSERT_NOT_EQUAL(SSL_CTX_use_certificate_file(ctx, "/nonexistent/tpud.pem", SSL_FILETYPE_PEM),
                      1);
  CU_ASSERT_NOT_EQUAL(SSL_CTX_set_cipher_list(ctx, "NO-SUCH-CIPHER"), 1);
  CU_ASSERT_NOT_EQUAL(ERR_peek_error(), 0);
  unsigned long last = ERR_peek_last_error();
  char want[256];
  ERR_error_string_n(last, want, sizeof want);
  tpu_tls_last_error(out, sizeof out);
  CU_ASSERT_STRING_EQUAL(out, want);
  CU_ASSERT_EQUAL(ERR_peek_error(), 0);
  /* A small buffer is cut, not overrun. */
  CU_ASSERT_NOT_EQUAL(SSL_CTX_set_cipher_list(ctx, "NO-SUCH-CIPHER"), 1);
  char small[8];
  tpu_tls_last_error(small, sizeof small);
  CU_ASSERT_EQUAL(strlen(small), sizeof small - 1);
  SSL_CTX_free(ctx);
}

TPU_TEST_SUITE(server_tls,
               {"create", test_create},
               {"refuse", test_refuse},
               {"alpn", test_alpn},
               {"data", test_data},
               {"policy", test_policy},
               {"client_certs", test_client_certs},
               {"reload", test_reload},
               {"last_error", test_last_error})
