/*
 * tls_fixture.h - throwaway keys and certificates for the net suites (test_tls.c, test_sock.c),
 * and a TLS client driven by hand over a non-blocking socket.
 *
 * DESIGN
 * Everything is made with OpenSSL's API into a fresh temp dir (no `openssl` command needed), the
 * way tests/integration/test_tls.sh makes its PKI with the command: EC P-256 keys, a CA, a server
 * certificate for localhost signed by it, a client certificate (clientAuth) signed by it, one
 * from a second, foreign CA, an expired one, and a second server certificate for reloads. The
 * handshake helper runs both ends of a socketpair in the calling thread, so no test needs a
 * second thread to talk TLS.
 */
#ifndef TPU_TEST_TLS_FIXTURE_H
#define TPU_TEST_TLS_FIXTURE_H

#include <openssl/ssl.h>

#define TPU_TEST_PATH 160

typedef struct {
  char dir[64];
  char ca[TPU_TEST_PATH];                              /* CA certificate (PEM) */
  char server_cert[TPU_TEST_PATH], server_key[TPU_TEST_PATH];   /* CN=localhost, by ca */
  char server2_cert[TPU_TEST_PATH], server2_key[TPU_TEST_PATH]; /* another, for reloads */
  char client_cert[TPU_TEST_PATH], client_key[TPU_TEST_PATH];   /* CN=alice, email SAN, by ca */
  char foreign_cert[TPU_TEST_PATH], foreign_key[TPU_TEST_PATH]; /* CN=mallory, other CA */
  char expired_cert[TPU_TEST_PATH], expired_key[TPU_TEST_PATH]; /* CN=bob, by ca, expired */
  char odd_cert[TPU_TEST_PATH], odd_key[TPU_TEST_PATH]; /* CN with a quote and a newline */
} tpu_test_pki_t;

/* The process's PKI: made on first use (temp dir and every file above), removed at exit.
 * NULL when it could not be made (a line on stderr says why). */
const tpu_test_pki_t *tpu_test_pki(void);
/* Writes `text` into dir/name and puts its path into out. 0 or -1. */
int tpu_test_pki_write(const tpu_test_pki_t *p, const char *name, const char *text, char *out);

/* A client context that trusts `ca` (NULL: verifies nothing), presents cert/key when given, and
 * offers ALPN `alpn` (wire format: length-prefixed names; NULL: none). */
SSL_CTX *tpu_test_client_ctx(const char *ca, const char *cert, const char *key,
                             const unsigned char *alpn, unsigned alpn_len);

/* Drives the server's and the client's handshakes (each SSL already on its end of a
 * non-blocking socketpair) until both are done or one failed. Returns 1 when both finished,
 * 0 when one failed. *server_ok and *client_ok (may be NULL) say which. */
int tpu_test_handshake(SSL *server, SSL *client, int *server_ok, int *client_ok);

#endif /* TPU_TEST_TLS_FIXTURE_H */
