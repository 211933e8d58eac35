/*
 * addr.h - socket addresses in words: the --listen address parsed once for both ports, and the
 * one peer format ("1.2.3.4:5678", "[::1]:5678") that logs and audit identities use.
 */
#ifndef TPU_ADDR_H
#define TPU_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* `ip` (numeric IPv4 or IPv6) and `port` into *ss and *len; `spec` (may be NULL) receives
 * them as text ("[::1]:8080"). 0, or -1 with err saying why. */
int tpu_addr_parse(const char *ip, unsigned port, struct sockaddr_storage *ss, socklen_t *len,
                   char *spec, size_t speclen, char *err, size_t errlen);
/* A peer address as text: "ip:port", IPv6 as "[ip]:port", "?" for other families. */
void tpu_addr_format(const struct sockaddr *sa, char *out, size_t len);
/* The port a socket is bound to (0 when it cannot say). */
unsigned tpu_addr_bound_port(int fd);

#endif /* TPU_ADDR_H */
