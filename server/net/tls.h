/*
 * tls.h - TLS contexts of tpud's two ports, their reload, and client-certificate identities.
 *
 * DESIGN
 * One tpu_tls_t holds the current SSL_CTX of each port (native: ALPN "tpud/1"; HTTP: ALPN
 * "http/1.1"), built from the same certificate, key and client CA. Connections take an SSL from
 * it (tpu_tls_new_ssl) under a mutex; the SSL holds its own reference to its SSL_CTX, so a reload
 * (SIGHUP) builds fresh contexts off to the side and swaps the pointers: new connections get the
 * new certificate, existing ones keep theirs, and the old contexts are freed by OpenSSL when the
 * last connection using them goes. A reload that fails (unreadable file, key that does not match)
 * leaves the current contexts in place and says why.
 *
 * Policy: TLS 1.2 minimum (1.3 preferred by both sides' defaults); TLS 1.2 suites ECDHE with
 * AES-GCM or ChaCha20-Poly1305 only, server preference; no renegotiation, no compression.
 * Session resumption: stateless tickets (one per TLS 1.3 handshake) with keys OpenSSL rotates
 * per context, so a reload also retires old tickets. With a client CA, client certificates are
 * verified: expired or foreign ones end the handshake on both ports. On the native port a missing
 * one does too (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT); on HTTPS it may be left out
 * (SSL_VERIFY_PEER only) so that Kubernetes probes, which cannot present one, reach the open
 * health endpoints; every other HTTPS request without a certificate needs a bearer token or is
 * answered 401 (http.c).
 *
 * ALPN: the native port selects "h2" (gRPC over HTTP/2, grpc.c) or "tpud/1" (the framed
 * protocol), whichever the client offers, h2 first; the HTTP port selects "http/1.1". A client
 * that offers no ALPN, or none we know, still connects (no ALPN in the answer) and the native
 * port tells the two protocols apart by the first bytes (front/framed.c).
 */
#ifndef TPU_TLS_H
#define TPU_TLS_H

#include <openssl/ssl.h>
#include <stddef.h>

#define TPU_TLS_ALPN_NATIVE "tpud/1"
#define TPU_TLS_ALPN_H2 "h2"
/* What the native port selects, in order of preference. */
#define TPU_TLS_ALPN_NATIVE_LIST TPU_TLS_ALPN_H2 "," TPU_TLS_ALPN_NATIVE

typedef struct {
  const char *cert_file;      /* PEM certificate chain (leaf first) */
  const char *key_file;       /* PEM private key; NULL or "" = in cert_file */
  const char *client_ca_file; /* PEM CA bundle clients' certificates must chain to; NULL/"" off */
} tpu_tls_config_t;

typedef struct tpu_tls tpu_tls_t;

/* Which port an SSL is for. */
typedef enum { TPU_TLS_NATIVE = 0, TPU_TLS_HTTP = 1 } tpu_tls_port_t;

/* Builds the contexts from the files (copied: the config need not outlive the call). Returns 0,
 * or -1 with err naming the file and OpenSSL's reason. */
int tpu_tls_create(const tpu_tls_config_t *cfg, tpu_tls_t **out, char *err, size_t errlen);

/* Rebuilds the contexts from the same file names and swaps them in (any thread). On failure
 * returns -1 with err and keeps the current ones. */
int tpu_tls_reload(tpu_tls_t *t, char *err, size_t errlen);

/* A new server-side SSL for one accepted connection on `port`, or NULL when out of memory. */
SSL *tpu_tls_new_ssl(tpu_tls_t *t, tpu_tls_port_t port);

/* SHA-256 fingerprint (hex, colon-separated) of the current certificate, for the log. */
void tpu_tls_fingerprint(tpu_tls_t *t, char *out, size_t outlen);

/* Whether client certificates are required. */
int tpu_tls_requires_client_cert(const tpu_tls_t *t);

/* Accepts NULL. */
void tpu_tls_free(tpu_tls_t *t);

/*
 * The verified peer certificate of a finished handshake: its CN (cn[0] = 0 when none) and a
 * subject string for the audit log, "CN=alice" plus up to two subjectAltNames ("CN=alice
 * SAN=DNS:alice.example,email:alice@example.com"); control characters and quotes are replaced by
 * '?'. Returns 1 when the peer sent a certificate, 0 otherwise (both outputs then "").
 */
int tpu_tls_peer_identity(SSL *ssl, char *cn, size_t cnlen, char *subject, size_t subjlen);

/* The last OpenSSL error of this thread as text (and clears the queue), for messages. */
void tpu_tls_last_error(char *out, size_t outlen);

#endif /* TPU_TLS_H */
