/*
 * tls_fixture.c - see tls_fixture.h. Test support, not a suite.
 */
#include "tls_fixture.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DAY (24L * 3600L)

static long next_serial = 1;

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
  X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
  if (!ex) return -1;
  int ok = X509_add_ext(cert, ex, -1);
  X509_EXTENSION_free(ex);
  return ok == 1 ? 0 : -1;
}

static int write_pem(const char *path, X509 *cert, EVP_PKEY *key) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = cert ? PEM_write_X509(f, cert) : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
  return fclose(f) == 0 && ok == 1 ? 0 : -1;
}

/* A certificate for `key` named `cn`, valid from now+from_s to now+to_s, signed by issuer (NULL:
 * self-signed). `exts`: pairs of NID and value, ended by 0. */
static X509 *make_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key,
                       long from_s, long to_s, const int *nids, const char *const *values) {
  X509 *x = X509_new();
  if (!x) return NULL;
  X509_NAME *name = X509_get_subject_name(x);
  if (X509_set_version(x, 2) != 1 ||
      ASN1_INTEGER_set(X509_get_serialNumber(x), next_serial++) != 1 ||
      !X509_gmtime_adj(X509_getm_notBefore(x), from_s) ||
      !X509_gmtime_adj(X509_getm_notAfter(x), to_s) || X509_set_pubkey(x, key) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name) != 1)
    goto fail;
  for (size_t i = 0; nids[i]; i++)
    if (add_ext(x, issuer ? issuer : x, nids[i], values[i]) != 0) goto fail;
  if (X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()) <= 0) goto fail;
  return x;
fail:
  X509_free(x);
  return NULL;
}

static const int ca_nids[] = {NID_basic_constraints, NID_key_usage, NID_subject_key_identifier, 0};
static const char *const ca_values[] = {"critical,CA:TRUE", "critical,keyCertSign,cRLSign",
                                        "hash"};

/* A key and a certificate signed by ca/ca_key into dir/name.{pem,key}. */
static int make_leaf(const tpu_test_pki_t *p, const char *name, const char *cn, X509 *ca,
                     EVP_PKEY *ca_key, long from_s, long to_s, const char *san, const char *eku,
                     char *cert_path, char *key_path) {
  int nids[] = {NID_basic_constraints, NID_subject_alt_name, NID_ext_key_usage, 0};
  const char *values[] = {"CA:FALSE", san, eku};
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = key ? make_cert(key, cn, ca, ca_key, from_s, to_s, nids, values) : NULL;
  snprintf(cert_path, TPU_TEST_PATH, "%s/%s.pem", p->dir, name);
  snprintf(key_path, TPU_TEST_PATH, "%s/%s.key", p->dir, name);
  int rc = x && write_pem(cert_path, x, NULL) == 0 && write_pem(key_path, NULL, key) == 0 ? 0 : -1;
  X509_free(x);
  EVP_PKEY_free(key);
  return rc;
}

static int pki_make(tpu_test_pki_t *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->dir, sizeof p->dir, "/tmp/tpud-pki-XXXXXX");
  if (!mkdtemp(p->dir)) {
    fprintf(stderr, "tls_fixture: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  int rc = -1;
  char ca_key_path[TPU_TEST_PATH], other[TPU_TEST_PATH], other_key_path[TPU_TEST_PATH];
  EVP_PKEY *ca_key = EVP_EC_gen("P-256"), *other_key = EVP_EC_gen("P-256");
  X509 *ca = NULL, *other_ca = NULL;
  if (!ca_key || !other_key) goto done;
  ca = make_cert(ca_key, "tpud test CA", NULL, NULL, -DAY, 2 * DAY, ca_nids, ca_values);
  other_ca = make_cert(other_key, "some other CA", NULL, NULL, -DAY, 2 * DAY, ca_nids, ca_values);
  if (!ca || !other_ca) goto done;
  snprintf(p->ca, sizeof p->ca, "%s/ca.pem", p->dir);
  snprintf(ca_key_path, sizeof ca_key_path, "%s/ca.key", p->dir);
  snprintf(other, sizeof other, "%s/other-ca.pem", p->dir);
  snprintf(other_key_path, sizeof other_key_path, "%s/other-ca.key", p->dir);
  if (write_pem(p->ca, ca, NULL) != 0 || write_pem(ca_key_path, NULL, ca_key) != 0 ||
      write_pem(other, other_ca, NULL) != 0 || write_pem(other_key_path, NULL, other_key) != 0)
    goto done;
  const char *srv_san = "DNS:localhost,IP:127.0.0.1", *srv_eku = "serverAuth";
  const char *cli_eku = "clientAuth";
  if (make_leaf(p, "server", "localhost", ca, ca_key, -DAY, 2 * DAY, srv_san, srv_eku,
                p->server_cert, p->server_key) != 0 ||
      make_leaf(p, "server2", "localhost", ca, ca_key, -DAY, 2 * DAY, srv_san, srv_eku,
                p->server2_cert, p->server2_key) != 0 ||
      make_leaf(p, "alice", "alice", ca, ca_key, -DAY, 2 * DAY,
                "email:alice@example.com,DNS:alice.example", cli_eku, p->client_cert,
                p->client_key) != 0 ||
      make_leaf(p, "mallory", "mallory", other_ca, other_key, -DAY, 2 * DAY,
                "email:mallory@example.com", cli_eku, p->foreign_cert, p->foreign_key) != 0 ||
      make_leaf(p, "bob", "bob", ca, ca_key, -3 * DAY, -2 * DAY, "email:bob@example.com", cli_eku,
                p->expired_cert, p->expired_key) != 0 ||
      make_leaf(p, "odd", "ev\"il\nname", ca, ca_key, -DAY, 2 * DAY, "DNS:odd.example", cli_eku,
                p->odd_cert, p->odd_key) != 0)
    goto done;
  rc = 0;
done:
  if (rc != 0) {
    unsigned long e = ERR_get_error();
    fprintf(stderr, "tls_fixture: cannot make the test PKI in %s: %s\n", p->dir,
            e ? ERR_error_string(e, NULL) : "I/O error");
  }
  X509_free(ca);
  X509_free(other_ca);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(other_key);
  return rc;
}

static tpu_test_pki_t pki;
static int pki_state; /* 0 not made yet, 1 made, -1 failed */

static void pki_remove(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", pki.dir);
  if (system(cmd) != 0) fprintf(stderr, "tls_fixture: could not remove %s\n", pki.dir);
}

const tpu_test_pki_t *tpu_test_pki(void) {
  if (pki_state == 0) {
    pki_state = pki_make(&pki) == 0 ? 1 : -1;
    if (pki.dir[0]) atexit(pki_remove);
  }
  return pki_state == 1 ? &pki : NULL;
}

int tpu_test_pki_write(const tpu_test_pki_t *p, const char *name, const char *text, char *out) {
  snprintf(out, TPU_TEST_PATH, "%s/%s", p->dir, name);
  FILE *f = fopen(out, "w");
  if (!f) return -1;
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

SSL_CTX *tpu_test_client_ctx(const char *ca, const char *cert, const char *key,
                             const unsigned char *alpn, unsigned alpn_len) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return NULL;
  if (ca) {
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) goto fail;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  }
  if (cert && (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
               SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1))
    goto fail;
  if (alpn && SSL_CTX_set_alpn_protos(ctx, alpn, alpn_len) != 0) goto fail; /* 0 is success */
  return ctx;
fail:
  SSL_CTX_free(ctx);
  return NULL;
}

/* One step of a handshake: 1 done, 0 wants the socket, -1 failed. */
static int step(SSL *ssl) {
  ERR_clear_error();
  int r = SSL_do_handshake(ssl);
  if (r == 1) return 1;
  int e = SSL_get_error(ssl, r);
  return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

int tpu_test_handshake(SSL *server, SSL *client, int *server_ok, int *client_ok) {
  int s = 0, c = 0;
  /* Over a socketpair every flight is readable by the other end as soon as it is written, so a
   * handshake needs a handful of rounds; the bound only stops a broken one from spinning. */
  for (int round = 0; round < 1000 && (s == 0 || c == 0); round++) {
    if (c == 0) c = step(client);
    if (s == 0) s = step(server);
    if (s < 0 || (c < 0 && s != 0)) break;
  }
  /* A server that failed sent an alert: let the client read it (its verdict then is known). */
  for (int round = 0; round < 10 && s < 0 && c == 0; round++) c = step(client);
  ERR_clear_error();
  if (server_ok) *server_ok = s == 1;
  if (client_ok) *client_ok = c == 1;
  return s == 1 && c == 1;
}
