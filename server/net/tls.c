/*
 * tls.c - see tls.h. Lock rule: `mu` guards the two context pointers; it is held only to take an
 * SSL from a context (SSL_new) or to swap the pointers, never across I/O.
 */
#include "tls.h"

#include "file.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tpu_tls {
  pthread_mutex_t mu;
  SSL_CTX *ctx[2]; /* tpu_tls_port_t */
  char *cert_file, *key_file, *client_ca_file;
};

/* TLS 1.2 suites: forward secrecy and AEAD only. TLS 1.3 keeps OpenSSL's (all AEAD). */
static const char cipher_list[] =
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256";

void tpu_tls_last_error(char *out, size_t outlen) {
  unsigned long e, last = 0;
  while ((e = ERR_get_error()) != 0) last = e;
  if (!last) {
    snprintf(out, outlen, "unknown TLS error");
    return;
  }
  char buf[256];
  ERR_error_string_n(last, buf, sizeof buf);
  snprintf(out, outlen, "%s", buf);
}

/* ALPN: the first of ours (arg: a comma-separated list, in our order of preference) that the
 * client offers; no match (or none offered) goes on without ALPN. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg) {
  for (const char *want = arg; *want;) {
    size_t wl = strcspn(want, ",");
    for (unsigned int i = 0; i < inlen;) {
      unsigned int l = in[i];
      if (i + 1 + l > inlen) break;
      if (l == wl && memcmp(in + i + 1, want, wl) == 0) {
        *out = in + i + 1;
        *outlen = (unsigned char)l;
        return SSL_TLSEXT_ERR_OK;
      }
      i += 1 + l;
    }
    want += wl;
    if (*want == ',') want++;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

static SSL_CTX *build_ctx(const tpu_tls_t *t, tpu_tls_port_t port, char *err, size_t errlen) {
  char why[300];
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) {
    snprintf(err, errlen, "cannot create a TLS context: out of memory");
    return NULL;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                               SSL_OP_IGNORE_UNEXPECTED_EOF |
                               SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_set_cipher_list(ctx, cipher_list) != 1) {
    tpu_tls_last_error(why, sizeof why);
    snprintf(err, errlen, "TLS cipher list: %s", why);
    goto fail;
  }
  SSL_CTX_set_num_tickets(ctx, 1);
  /* OpenSSL opens these itself, blocking: a FIFO in their place would hang a SIGHUP reload. */
  const char *files[] = {t->cert_file, t->key_file, t->client_ca_file};
  static const char *const flags[] = {"--tls-cert", "--tls-key", "--tls-client-ca"};
  for (size_t i = 0; i < 3; i++) {
    if (!files[i] || !*files[i] || tpu_file_check(files[i], why, sizeof why) == 0) continue;
    snprintf(err, errlen, "%s %s", flags[i], why);
    goto fail;
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1) {
    tpu_tls_last_error(why, sizeof why);
    snprintf(err, errlen, "--tls-cert %s: %s (expected a PEM certificate chain)", t->cert_file,
             why);
    goto fail;
  }
  const char *key = t->key_file && *t->key_file ? t->key_file : t->cert_file;
  if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
    /* OpenSSL 3 compares the key with the certificate while loading it: say which it is. */
    int mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
    tpu_tls_last_error(why, sizeof why);
    if (mismatch)
      snprintf(err, errlen, "--tls-key %s does not match the certificate in --tls-cert %s (%s)",
               key, t->cert_file, why);
    else
      snprintf(err, errlen, "--tls-key %s: %s (expected a PEM private key)", key, why);
    goto fail;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    snprintf(err, errlen, "--tls-key %s does not match the certificate in --tls-cert %s", key,
             t->cert_file);
    goto fail;
  }
  if (t->client_ca_file && *t->client_ca_file) {
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(t->client_ca_file);
    if (!names || SSL_CTX_load_verify_locations(ctx, t->client_ca_file, NULL) != 1) {
      if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
      tpu_tls_last_error(why, sizeof why);
      snprintf(err, errlen, "--tls-client-ca %s: %s (expected PEM CA certificates)",
               t->client_ca_file, why);
      goto fail;
    }
    SSL_CTX_set_client_CA_list(ctx, names);
    /* Native: no certificate, no connection. HTTPS: a certificate that is sent must verify,
     * but may be left out, so that probes without one reach the open health endpoints; every
     * other request then needs credentials (http.c, auth.h). */
    SSL_CTX_set_verify(ctx,
                       port == TPU_TLS_NATIVE
                           ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                           : SSL_VERIFY_PEER,
                       NULL);
    SSL_CTX_set_verify_depth(ctx, 8);
  }
  /* Needed for session resumption once peers are verified; names the service. */
  static const unsigned char sid[] = "tpud";
  SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);
  SSL_CTX_set_alpn_select_cb(ctx, alpn_select,
                             (void *)(port == TPU_TLS_NATIVE ? TPU_TLS_ALPN_NATIVE_LIST : "http/1.1"));
  return ctx;
fail:
  SSL_CTX_free(ctx);
  return NULL;
}

static int build_both(const tpu_tls_t *t, SSL_CTX *out[2], char *err, size_t errlen) {
  out[0] = build_ctx(t, TPU_TLS_NATIVE, err, errlen);
  if (!out[0]) return -1;
  out[1] = build_ctx(t, TPU_TLS_HTTP, err, errlen);
  if (!out[1]) {
    SSL_CTX_free(out[0]);
    return -1;
  }
  return 0;
}

int tpu_tls_create(const tpu_tls_config_t *cfg, tpu_tls_t **out, char *err, size_t errlen) {
  *out = NULL;
  tpu_tls_t *t = calloc(1, sizeof *t);
  if (!t) goto nomem;
  pthread_mutex_init(&t->mu, NULL);
  t->cert_file = strdup(cfg->cert_file ? cfg->cert_file : "");
  t->key_file = strdup(cfg->key_file ? cfg->key_file : "");
  t->client_ca_file = strdup(cfg->client_ca_file ? cfg->client_ca_file : "");
  if (!t->cert_file || !t->key_file || !t->client_ca_file) goto nomem;
  if (build_both(t, t->ctx, err, errlen) != 0) {
    tpu_tls_free(t);
    return -1;
  }
  *out = t;
  return 0;
nomem:
  tpu_tls_free(t);
  snprintf(err, errlen, "out of memory");
  return -1;
}

int tpu_tls_reload(tpu_tls_t *t, char *err, size_t errlen) {
  SSL_CTX *fresh[2];
  if (build_both(t, fresh, err, errlen) != 0) return -1;
  pthread_mutex_lock(&t->mu);
  SSL_CTX *old0 = t->ctx[0], *old1 = t->ctx[1];
  t->ctx[0] = fresh[0];
  t->ctx[1] = fresh[1];
  pthread_mutex_unlock(&t->mu);
  SSL_CTX_free(old0); /* drops our reference; connections hold theirs */
  SSL_CTX_free(old1);
  return 0;
}

SSL *tpu_tls_new_ssl(tpu_tls_t *t, tpu_tls_port_t port) {
  pthread_mutex_lock(&t->mu);
  SSL *ssl = SSL_new(t->ctx[port]);
  pthread_mutex_unlock(&t->mu);
  return ssl;
}

void tpu_tls_fingerprint(tpu_tls_t *t, char *out, size_t outlen) {
  out[0] = 0;
  pthread_mutex_lock(&t->mu);
  X509 *x = SSL_CTX_get0_certificate(t->ctx[0]);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (x && X509_digest(x, EVP_sha256(), md, &n) == 1) {
    size_t o = 0;
    for (unsigned int i = 0; i < n && o + 4 < outlen; i++)
      o += (size_t)snprintf(out + o, outlen - o, "%s%02X", i ? ":" : "", md[i]);
  }
  pthread_mutex_unlock(&t->mu);
}

int tpu_tls_requires_client_cert(const tpu_tls_t *t) {
  return t && t->client_ca_file && *t->client_ca_file;
}

void tpu_tls_free(tpu_tls_t *t) {
  if (!t) return;
  SSL_CTX_free(t->ctx[0]);
  SSL_CTX_free(t->ctx[1]);
  free(t->cert_file);
  free(t->key_file);
  free(t->client_ca_file);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* Copies s into out, replacing bytes that would confuse a log reader. */
static void clean_copy(char *out, size_t outlen, const unsigned char *s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < outlen; i++) {
    unsigned char c = s[i];
    out[o++] = (c < 0x20 || c == 0x7f || c == '"' || c == '\\' || c == '(' || c == ')') ? '?'
                                                                                        : (char)c;
  }
  out[o] = 0;
}

int tpu_tls_peer_identity(SSL *ssl, char *cn, size_t cnlen, char *subject, size_t subjlen) {
  cn[0] = 0;
  subject[0] = 0;
  X509 *x = SSL_get0_peer_certificate(ssl);
  if (!x) return 0;
  X509_NAME *name = X509_get_subject_name(x);
  int idx = name ? X509_NAME_get_index_by_NID(name, NID_commonName, -1) : -1;
  if (idx >= 0) {
    ASN1_STRING *d = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, idx));
    unsigned char *utf8 = NULL;
    int n = ASN1_STRING_to_UTF8(&utf8, d);
    if (n > 0) clean_copy(cn, cnlen, utf8, (size_t)n);
    OPENSSL_free(utf8);
  }
  size_t o = (size_t)snprintf(subject, subjlen, "CN=%s", cn[0] ? cn : "?");
  GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
  int shown = 0;
  for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans) && shown < 2 && o < subjlen; i++) {
    const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
    char v[128];
    const char *kind = NULL;
    if (g->type == GEN_DNS || g->type == GEN_EMAIL || g->type == GEN_URI) {
      ASN1_IA5STRING *s = g->d.ia5;
      clean_copy(v, sizeof v, s->data, (size_t)s->length);
      kind = g->type == GEN_DNS ? "DNS" : g->type == GEN_EMAIL ? "email" : "URI";
    } else if (g->type == GEN_IPADD && (g->d.ip->length == 4 || g->d.ip->length == 16)) {
      const unsigned char *b = g->d.ip->data;
      if (g->d.ip->length == 4)
        snprintf(v, sizeof v, "%u.%u.%u.%u", b[0], b[1], b[2], b[3]);
      else
        snprintf(v, sizeof v, "%02x%02x:%02x%02x:...", b[0], b[1], b[2], b[3]);
      kind = "IP";
    }
    if (!kind) continue;
    o += (size_t)snprintf(subject + o, subjlen - o, "%s%s:%s", shown ? "," : " SAN=", kind, v);
    shown++;
  }
  GENERAL_NAMES_free(sans);
  return 1;
}
