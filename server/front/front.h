/*
 * front.h - the front ends: the protocols tpud speaks, each adapting its wire to the one request
 * path (dispatch/call.h). server.c attaches them to the I/O threads (net/io.h).
 *
 *   framed.c  the native port: tpud's framed protocol, and gRPC over HTTP/2 (grpc.c) on the
 *             same port, told apart by the first bytes or ALPN
 *   http.c    the HTTP port: OIP v2 REST JSON, with /metrics and /v2/debug (pages.c)
 */
#ifndef TPU_FRONT_H
#define TPU_FRONT_H

#include <stddef.h>

struct tpu_server;
struct tpu__io;

/* ---- framed.c: the native port ---- */
/* Attaches the native port's service to an I/O thread (before it runs). 0 or -1. */
int tpu__framed_attach(struct tpu__io *io);
/* Hands an accepted socket to an I/O thread, round robin (main thread). */
void tpu__framed_hand_off(struct tpu_server *srv, int fd, const char *peer);

/* ---- http.c: the HTTP port ---- */
/* Binds the HTTP listening socket (main thread, before the I/O threads serve it). */
int tpu__http_bind(struct tpu_server *srv, char *err, size_t errlen);
/* Attaches the HTTP service to an I/O thread: its accept event on a dup of the listening
 * socket (before the thread runs). 0 or -1. */
int tpu__http_attach(struct tpu__io *io);

#endif /* TPU_FRONT_H */
