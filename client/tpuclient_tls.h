/*
 * tpuclient_tls.h - TLS for libtpuclient's connections (internal; not installed).
 *
 * DESIGN
 * One SSL per handle, on the handle's non-blocking socket, with its own SSL_CTX (handles share
 * nothing, so they stay independent across threads). The handshake runs inside connect under the
 * connect deadline; afterwards tpuclient.c moves bytes through tpu__ctls_recv/send, which keep
 * recv()/send() semantics (-1 with errno EAGAIN when OpenSSL needs the socket).
 */
#ifndef TPUCLIENT_TLS_H
#define TPUCLIENT_TLS_H

#include <openssl/ssl.h>
#include <stdint.h>
#include <sys/types.h>

#include "tpuclient.h"

#define TPU_CLIENT_ALPN "tpud/1"

/* Handshakes on connected socket fd by `deadline_ns` (CLOCK_MONOTONIC; INT64_MAX none) with
 * host `host` (from the address) unless o->tls_server_name is set. Returns the SSL, or NULL with
 * err saying why. */
SSL *tpu__ctls_connect(int fd, const tpu_client_options_t *o, const char *host,
                       int64_t deadline_ns, char *err, size_t errlen);
/* As recv(2)/send(2) on the TLS stream. */
ssize_t tpu__ctls_recv(SSL *ssl, void *buf, size_t len);
ssize_t tpu__ctls_send(SSL *ssl, const void *buf, size_t len);
/* OpenSSL's reason for the last recv/send that failed with EPROTO on this thread. */
const char *tpu__ctls_error(void);
/* Sends close_notify (best effort) and frees the SSL and its context. Accepts NULL. */
void tpu__ctls_free(SSL *ssl, int clean);

#endif /* TPUCLIENT_TLS_H */
