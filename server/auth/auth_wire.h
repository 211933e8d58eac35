/*
 * auth_wire.h - TLS contexts and the access policy inside the server (auth_wire.c).
 */
#ifndef TPU_AUTH_WIRE_H
#define TPU_AUTH_WIRE_H

#include <stddef.h>

#include "auth.h"

struct tpu_server;

/* Loads --tls-* and --tokens (main thread, start-up); logs the warning for a non-loopback
 * address without access control. */
int tpu__auth_start(struct tpu_server *srv, char *err, size_t errlen);
/* SIGHUP (main thread): reload certificates and tokens; a failure is logged and the old ones
 * stay. */
void tpu__auth_sighup(struct tpu_server *srv);
void tpu__auth_free(struct tpu_server *srv);
/* Whether access control is on (tokens or client certificates). */
int tpu__auth_enabled(struct tpu_server *srv);
/* Decides one request (any I/O thread; a read lock around the table): tpu_auth_decide with the
 * server's current policy. n_authz: how many authorization values the request carried. */
int tpu__auth_check(struct tpu_server *srv, const tpu_auth_peer_t *peer, const char *authz,
                    size_t authz_len, size_t n_authz, tpu_need_t need, char *who, size_t wholen,
                    char *msg, size_t msglen);

#endif /* TPU_AUTH_WIRE_H */
