/* test_addr.c - socket addresses in words (server/util/addr.h): --listen parsed once for both
 * ports, one peer format for logs and audit identities. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include "addr.h"
#include "tpu_test.h"

static void test_parse(void) {
  struct sockaddr_storage ss;
  socklen_t len;
  char spec[64], err[128];
  CU_ASSERT_EQUAL(tpu_addr_parse("127.0.0.1", 8500, &ss, &len, spec, sizeof spec, err,
                                 sizeof err), 0);
  CU_ASSERT_EQUAL(ss.ss_family, AF_INET);
  CU_ASSERT_EQUAL(len, sizeof(struct sockaddr_in));
  CU_ASSERT_EQUAL(ntohs(((struct sockaddr_in *)&ss)->sin_port), 8500);
  CU_ASSERT_STRING_EQUAL(spec, "127.0.0.1:8500");
  CU_ASSERT_EQUAL(tpu_addr_parse("::1", 0, &ss, &len, spec, sizeof spec, err, sizeof err), 0);
  CU_ASSERT_EQUAL(ss.ss_family, AF_INET6);
  CU_ASSERT_STRING_EQUAL(spec, "[::1]:0");
  CU_ASSERT_EQUAL(tpu_addr_parse("localhost", 1, &ss, &len, NULL, 0, err, sizeof err), -1);
  CU_ASSERT_STRING_EQUAL(err, "--listen localhost: not a numeric IPv4 or IPv6 address");
}

static void test_format_and_port(void) {
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(5678)};
  inet_pton(AF_INET, "10.1.2.3", &a4.sin_addr);
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(9)};
  inet_pton(AF_INET6, "fe80::1", &a6.sin6_addr);
  char out[64];
  tpu_addr_format((struct sockaddr *)&a4, out, sizeof out);
  CU_ASSERT_STRING_EQUAL(out, "10.1.2.3:5678");
  tpu_addr_format((struct sockaddr *)&a6, out, sizeof out); /* both ports alike: brackets */
  CU_ASSERT_STRING_EQUAL(out, "[fe80::1]:9");
  struct sockaddr un = {.sa_family = AF_UNIX};
  tpu_addr_format(&un, out, sizeof out);
  CU_ASSERT_STRING_EQUAL(out, "?");
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CU_ASSERT_EQUAL_FATAL(bind(fd, (struct sockaddr *)&any, sizeof any), 0);
  CU_ASSERT_TRUE(tpu_addr_bound_port(fd) > 0); /* the kernel's pick */
  close(fd);
  CU_ASSERT_EQUAL(tpu_addr_bound_port(-1), 0);
}

TPU_TEST_SUITE(util_addr,
               {"parse", test_parse},
               {"format_and_port", test_format_and_port})
