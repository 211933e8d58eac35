/*
 * test_http_body.c - request bodies' content codings (server/front/http_body.h) from bytes:
 * gzip and deflate (zlib and raw) round trips against zlib's own compressor, several gzip
 * members, empty bodies, truncated, corrupt and trailing bytes, the limit at its exact edge, a
 * compression bomb (64 MiB of zeros in 64 KiB) stopped at the limit, an unknown coding; gzipped
 * answers decode back.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "http_body.h"
#include "tpu_test.h"

/* Compresses in[0..len) with window bits wbits (31: gzip, 15: zlib, -15: raw). */
static unsigned char *squeeze(const void *in, size_t len, int wbits, size_t *outlen) {
  z_stream z;
  memset(&z, 0, sizeof z);
  CU_ASSERT_FATAL(deflateInit2(&z, 6, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  size_t cap = deflateBound(&z, (uLong)len) + 64;
  unsigned char *out = malloc(cap);
  CU_ASSERT_FATAL(out != NULL);
  z.next_in = (unsigned char *)in;
  z.avail_in = (uInt)len;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  CU_ASSERT_FATAL(deflate(&z, Z_FINISH) == Z_STREAM_END);
  *outlen = z.total_out;
  deflateEnd(&z);
  return out;
}

static void expect_ok(tpu_http_coding_t coding, const void *in, size_t len, uint64_t max,
                      const void *want, size_t wantlen) {
  char *out = NULL, msg[400] = "";
  size_t outlen = 0;
  int st = tpu_http_body_decode(coding, in, len, max, &out, &outlen, msg, sizeof msg);
  CU_ASSERT_EQUAL(st, 0);
  if (st) printf("\nstatus %d: %s\n", st, msg);
  CU_ASSERT(out && outlen == wantlen && !memcmp(out, want, wantlen) && out[outlen] == 0);
  free(out);
}

static void expect_status(tpu_http_coding_t coding, const void *in, size_t len, uint64_t max,
                          int status, const char *why) {
  char *out = (char *)1, msg[400] = "";
  size_t outlen = 1;
  int st = tpu_http_body_decode(coding, in, len, max, &out, &outlen, msg, sizeof msg);
  CU_ASSERT_EQUAL(st, status);
  CU_ASSERT_PTR_NULL(out);
  CU_ASSERT(strstr(msg, why) != NULL);
  if (st != status || !strstr(msg, why)) printf("\nstatus %d (want %d): %s\n", st, status, msg);
}

static void test_round_trip(void) {
  char text[20000];
  for (size_t i = 0; i < sizeof text; i++) text[i] = (char)tpu_test_rand_range(0, 255);
  int wbits[] = {31, 15, -15};
  tpu_http_coding_t coding[] = {TPU_HTTP_CODING_GZIP, TPU_HTTP_CODING_DEFLATE,
                                TPU_HTTP_CODING_DEFLATE};
  size_t lens[] = {0, 1, 100, sizeof text};
  for (size_t k = 0; k < 3; k++) {
    for (size_t l = 0; l < 4; l++) {
      size_t zlen;
      unsigned char *z = squeeze(text, lens[l], wbits[k], &zlen);
      expect_ok(coding[k], z, zlen, 1u << 20, text, lens[l]);
      expect_ok(coding[k], z, zlen, lens[l], text, lens[l]); /* exactly the limit */
      if (lens[l]) {
        expect_status(coding[k], z, zlen, lens[l] - 1, 413, "exceeds the limit of");
        /* Truncated anywhere: 400, never a short body taken as whole. */
        for (size_t cut = 0; cut < zlen; cut += zlen > 64 ? zlen / 16 : 1) {
          char *out = NULL, msg[400];
          size_t outlen;
          int st = tpu_http_body_decode(coding[k], z, cut, 1u << 20, &out, &outlen, msg,
                                        sizeof msg);
          CU_ASSERT_EQUAL(st, 400);
          if (st != 400) printf("\nwbits %d len %zu cut %zu of %zu: %d\n", wbits[k], lens[l],
                                cut, zlen, st);
          free(out);
        }
      }
      free(z);
    }
  }
}

/* Two gzip members decode to both (RFC 1952 2.2); bytes after a stream are refused. */
static void test_members_and_trailing(void) {
  size_t alen, blen;
  unsigned char *a = squeeze("hello ", 6, 31, &alen), *b = squeeze("world", 5, 31, &blen);
  unsigned char *ab = malloc(alen + blen + 3);
  memcpy(ab, a, alen);
  memcpy(ab + alen, b, blen);
  expect_ok(TPU_HTTP_CODING_GZIP, ab, alen + blen, 100, "hello world", 11);
  expect_status(TPU_HTTP_CODING_GZIP, ab, alen + blen - 3, 100, 400, "truncated");
  memcpy(ab + alen + blen, "xyz", 3);
  expect_status(TPU_HTTP_CODING_GZIP, ab, alen + blen + 3, 100, 400,
                "3 bytes after the end of the compressed data");
  size_t zl;
  unsigned char *zd = squeeze("{}", 2, 15, &zl);
  unsigned char *zx = malloc(zl + 1);
  memcpy(zx, zd, zl);
  zx[zl] = 0x1f; /* a gzip magic byte after a deflate stream is no member */
  expect_status(TPU_HTTP_CODING_DEFLATE, zx, zl + 1, 100, 400, "after the end");
  free(a);
  free(b);
  free(ab);
  free(zd);
  free(zx);
}

static void test_corrupt(void) {
  expect_status(TPU_HTTP_CODING_GZIP, "{\"inputs\": []}", 14, 100, 400, "not valid gzip data");
  expect_status(TPU_HTTP_CODING_GZIP, "", 0, 100, 400, "truncated");
  expect_status(TPU_HTTP_CODING_DEFLATE, "", 0, 100, 400, "truncated");
  size_t zlen;
  unsigned char *z = squeeze("a body of some length, long enough to have a few codes", 54, 31,
                             &zlen);
  z[zlen - 6] ^= 0x55; /* the CRC-32 */
  expect_status(TPU_HTTP_CODING_GZIP, z, zlen, 100, 400, "not valid gzip data");
  free(z);
  expect_status(TPU_HTTP_CODING_OTHER, "abc", 3, 100, 415, "expected gzip, deflate or identity");
}

/* 64 MiB of zeros in about 64 KiB: 413 at a 1 MiB limit, the work stopped there. */
static void test_bomb(void) {
  size_t big = (size_t)64 << 20;
  char *zeros = calloc(1, big);
  CU_ASSERT_FATAL(zeros != NULL);
  size_t zlen;
  unsigned char *z = squeeze(zeros, big, 31, &zlen);
  free(zeros);
  CU_ASSERT(zlen < 100000);
  expect_status(TPU_HTTP_CODING_GZIP, z, zlen, 1u << 20, 413,
                "exceeds the limit of 1048576 bytes once decoded");
  free(z);
}

/* Answers: gzip out, our own decoder (and so zlib) back; nothing gained is -1. */
static void test_gzip_answer(void) {
  char text[50000];
  for (size_t i = 0; i < sizeof text; i++) text[i] = "{\"data\":[0.125, 3.5, 1e-3]}"[i % 27];
  char *z = NULL;
  size_t zlen = 0;
  CU_ASSERT_EQUAL_FATAL(tpu_http_body_gzip(text, sizeof text, &z, &zlen), 0);
  CU_ASSERT(zlen < sizeof text / 10 && (unsigned char)z[0] == 0x1f && (unsigned char)z[1] == 0x8b);
  expect_ok(TPU_HTTP_CODING_GZIP, z, zlen, sizeof text, text, sizeof text);
  free(z);
  char noise[2000];
  for (size_t i = 0; i < sizeof noise; i++) noise[i] = (char)tpu_test_rand_range(0, 255);
  CU_ASSERT_EQUAL(tpu_http_body_gzip(noise, sizeof noise, &z, &zlen), -1);
  CU_ASSERT_PTR_NULL(z);
}

TPU_TEST_SUITE(front_http_body, {"gzip_answer", test_gzip_answer}, {"round_trip", test_round_trip},
               {"members_and_trailing", test_members_and_trailing}, {"corrupt", test_corrupt},
               {"bomb", test_bomb})
