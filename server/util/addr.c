/*
 * addr.c - socket addresses in words (addr.h).
 */
#include "addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

int tpu_addr_parse(const char *ip, unsigned port, struct sockaddr_storage *ss, socklen_t *len,
                   char *spec, size_t speclen, char *err, size_t errlen) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    *len = sizeof *s4;
    if (spec) snprintf(spec, speclen, "%s:%u", ip, port);
    return 0;
  }
  if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons((uint16_t)port);
    *len = sizeof *s6;
    if (spec) snprintf(spec, speclen, "[%s]:%u", ip, port);
    return 0;
  }
  snprintf(err, errlen, "--listen %s: not a numeric IPv4 or IPv6 address", ip);
  return -1;
}

void tpu_addr_format(const struct sockaddr *sa, char *out, size_t len) {
  char ip[INET6_ADDRSTRLEN];
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
  } else {
    snprintf(out, len, "?");
  }
}

unsigned tpu_addr_bound_port(int fd) {
  struct sockaddr_storage b;
  socklen_t blen = sizeof b;
  if (getsockname(fd, (struct sockaddr *)&b, &blen) != 0) return 0;
  return ntohs(b.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&b)->sin6_port
                                       : ((struct sockaddr_in *)&b)->sin_port);
}
