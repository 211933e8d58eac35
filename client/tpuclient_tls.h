/*
 * tpuclient_tls.h - TLS for libtpuclient's connections (internal; not installed).
 *
 * DESIGN
 * One SSL per connection, with its own SSL_CTX (connections share nothing, so they stay
 * independent across threads). Setting up (loading the CA, certificate and key files, the name
 * to verify, ALPN) happens at connect time, before any socket exists, so that a bad file fails
 * the connect call itself. The handshake is non-blocking: tpuclient_async.c calls
 * tpu__ctls_handshake() whenever the socket is ready and it says which readiness it needs next;
 * blocking callers poll in a loop. Afterwards bytes move through tpu__ctls_recv/send, which keep
 * recv()/send() semantics (-1 with errno EAGAIN when OpenSSL needs the socket).
 */
#ifndef TPUCLIENT_TLS_H
#define TPUCLIENT_TLS_H

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tpuclient.h"

#define TPU_CLIENT_ALPN "tpud/1"
#define TPU_CLIENT_ALPN_HTTP "http/1.1"

/* A client SSL (not yet on a socket) offering ALPN `alpn`, verifying the server against
 * o->tls_ca_file (else the system's CAs) and its name against o->tls_server_name or `host`.
 * Returns NULL with err saying why (a file that cannot be loaded, a name that cannot be set). */
SSL *tpu__ctls_new(const tpu_client_options_t *o, const char *host, const char *alpn, char *err,
                   size_t errlen);
/* One handshake step on the SSL's socket (SSL_set_fd first). Returns 1 when done, 0 when it
 * must be called again once the socket is ready for *want (POLLIN or POLLOUT), -1 on failure
 * with err saying why ("TLS handshake: certificate verify failed: ..."). */
int tpu__ctls_handshake(SSL *ssl, short *want, char *err, size_t errlen);
/* As recv(2)/send(2) on the TLS stream. */
ssize_t tpu__ctls_recv(SSL *ssl, void *buf, size_t len);
ssize_t tpu__ctls_send(SSL *ssl, const void *buf, size_t len);
/* OpenSSL's reason for the last recv/send that failed with EPROTO on this thread. */
const char *tpu__ctls_error(void);
/* Sends close_notify (best effort) and frees the SSL and its context. Accepts NULL. */
void tpu__ctls_free(SSL *ssl, int clean);

#endif /* TPUCLIENT_TLS_H */
