/*
 * tpuclient_tls.c - see tpuclient_tls.h.
 */
#include "tpuclient_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

static void last_error(char *out, size_t outlen) {
  unsigned long e, last = 0;
  while ((e = ERR_get_error()) != 0) last = e;
  if (!last) {
    snprintf(out, outlen, "connection closed during the TLS handshake");
    return;
  }
  ERR_error_string_n(last, out, outlen);
}

SSL *tpu__ctls_new(const tpu_client_options_t *o, const char *host, const char *alpn, char *err,
                   size_t errlen) {
  char why[256];
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  SSL *ssl = NULL;
  if (!ctx) {
    snprintf(err, errlen, "TLS: out of memory");
    return NULL;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (o->tls_ca_file && *o->tls_ca_file) {
    if (SSL_CTX_load_verify_locations(ctx, o->tls_ca_file, NULL) != 1) {
      last_error(why, sizeof why);
      snprintf(err, errlen, "TLS CA file %s: %s", o->tls_ca_file, why);
      goto fail;
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    last_error(why, sizeof why);
    snprintf(err, errlen, "TLS: cannot load the system's CA certificates: %s", why);
    goto fail;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if (o->tls_cert_file && *o->tls_cert_file) {
    const char *key = o->tls_key_file && *o->tls_key_file ? o->tls_key_file : o->tls_cert_file;
    if (SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert_file) != 1) {
      last_error(why, sizeof why);
      snprintf(err, errlen, "TLS client certificate %s: %s", o->tls_cert_file, why);
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      last_error(why, sizeof why);
      snprintf(err, errlen, "TLS client key %s: %s", key, why);
      goto fail;
    }
  }
  /* ALPN wire format: one length byte, then the name. */
  unsigned char wire[32];
  size_t alen = strlen(alpn);
  if (alen == 0 || alen >= sizeof wire) {
    snprintf(err, errlen, "TLS: bad ALPN name '%s'", alpn);
    goto fail;
  }
  wire[0] = (unsigned char)alen;
  memcpy(wire + 1, alpn, alen);
  SSL_CTX_set_alpn_protos(ctx, wire, (unsigned)alen + 1);
  ssl = SSL_new(ctx);
  if (!ssl) {
    snprintf(err, errlen, "TLS: out of memory");
    goto fail;
  }
  const char *name = o->tls_server_name && *o->tls_server_name ? o->tls_server_name : host;
  unsigned char ipbuf[16];
  int is_ip = inet_pton(AF_INET, name, ipbuf) == 1 || inet_pton(AF_INET6, name, ipbuf) == 1;
  if (!is_ip) SSL_set_tlsext_host_name(ssl, name); /* SNI carries names, never addresses */
  if (!o->tls_no_verify_host) {
    int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)
                   : SSL_set1_host(ssl, name);
    if (ok != 1) {
      snprintf(err, errlen, "TLS: cannot verify against name '%s'", name);
      goto fail;
    }
  }
  SSL_set_connect_state(ssl);
  SSL_CTX_free(ctx); /* the SSL keeps its own reference */
  return ssl;
fail:
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return NULL;
}

int tpu__ctls_handshake(SSL *ssl, short *want, char *err, size_t errlen) {
  char why[256];
  ERR_clear_error();
  int r = SSL_do_handshake(ssl);
  if (r == 1) return 1;
  int e = SSL_get_error(ssl, r);
  if (e == SSL_ERROR_WANT_READ) {
    *want = POLLIN;
    return 0;
  }
  if (e == SSL_ERROR_WANT_WRITE) {
    *want = POLLOUT;
    return 0;
  }
  long vr = SSL_get_verify_result(ssl);
  if (vr != X509_V_OK) {
    snprintf(err, errlen, "TLS handshake: certificate verify failed: %s",
             X509_verify_cert_error_string(vr));
  } else {
    last_error(why, sizeof why);
    snprintf(err, errlen, "TLS handshake failed: %s%s", why,
             strstr(why, "wrong version") ? " (is the server speaking TLS?)" : "");
  }
  return -1;
}

static __thread char ctls_err[320];

const char *tpu__ctls_error(void) { return ctls_err[0] ? ctls_err : "TLS error"; }

/* Keeps OpenSSL's reason for a failed read or write, for the connection's message. */
static void note_error(void) {
  unsigned long e = ERR_peek_last_error();
  if (e) {
    char why[200];
    ERR_error_string_n(e, why, sizeof why);
    const char *alert = strstr(why, "alert ");
    snprintf(ctls_err, sizeof ctls_err, "TLS: %s%s", why,
             alert && strstr(alert, "certificate required")
                 ? " (the server requires a client certificate: --tls-cert)"
                 : "");
  } else {
    snprintf(ctls_err, sizeof ctls_err, "TLS error");
  }
  ERR_clear_error();
}

ssize_t tpu__ctls_recv(SSL *ssl, void *buf, size_t len) {
  ERR_clear_error();
  int n = SSL_read(ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
  if (n > 0) return n;
  switch (SSL_get_error(ssl, n)) {
  case SSL_ERROR_WANT_READ:
  case SSL_ERROR_WANT_WRITE:
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_ZERO_RETURN:
    return 0;
  case SSL_ERROR_SYSCALL:
    if (errno == 0) return 0; /* EOF without close_notify */
    return -1;
  default:
    note_error();
    errno = EPROTO;
    return -1;
  }
}

ssize_t tpu__ctls_send(SSL *ssl, const void *buf, size_t len) {
  ERR_clear_error();
  int n = SSL_write(ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
  if (n > 0) return n;
  switch (SSL_get_error(ssl, n)) {
  case SSL_ERROR_WANT_READ:
  case SSL_ERROR_WANT_WRITE:
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_SYSCALL:
    if (errno == 0) errno = EPIPE;
    return -1;
  default:
    note_error();
    errno = EPROTO;
    return -1;
  }
}

void tpu__ctls_free(SSL *ssl, int clean) {
  if (!ssl) return;
  if (clean) SSL_shutdown(ssl);
  SSL_free(ssl);
}
