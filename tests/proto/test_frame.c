/*
 * test_frame.c - proto/tpu_frame.c: header parsing, the incremental decoder, status strings.
 *
 * Everything runs from bytes: frames are built in memory and fed whole, byte by byte, in random
 * splits, pipelined, truncated and corrupted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_frame.h"
#include "tpu_test.h"

/* Writes a frame (header with `flag` + len body bytes of a pattern seeded by `tag`) at p. */
static size_t put_frame(uint8_t *p, uint8_t flag, uint32_t len, uint8_t tag) {
  p[0] = flag;
  p[1] = (uint8_t)(len >> 24);
  p[2] = (uint8_t)(len >> 16);
  p[3] = (uint8_t)(len >> 8);
  p[4] = (uint8_t)len;
  for (uint32_t i = 0; i < len; i++) p[5 + i] = (uint8_t)(tag * 31u + i * 7u);
  return 5 + (size_t)len;
}

static int body_ok(const tpu_frame_t *f, uint32_t len, uint8_t tag) {
  if (f->len != len || !f->data) return 0;
  for (uint32_t i = 0; i < len; i++)
    if (f->data[i] != (uint8_t)(tag * 31u + i * 7u)) return 0;
  return 1;
}

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

/* ---- headers ---- */

static void test_header_ok(void) {
  uint8_t h[5] = {0, 0x01, 0x02, 0x03, 0x04};
  uint32_t len = 0;
  tpu_proto_error_t err;
  CU_ASSERT_EQUAL(tpu_frame_parse_header(h, SIZE_MAX, &len, &err), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(len, 0x01020304u); /* big-endian */
  uint8_t z[5] = {0, 0, 0, 0, 0};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(z, 0, &len, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(len, 0u);
}

static void test_header_write_roundtrip(void) {
  const size_t lens[] = {0, 1, 255, 256, 65536, 0x7fffffffu, 0xffffffffu};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    uint8_t h[5];
    uint32_t len = 0;
    CU_ASSERT_EQUAL(tpu_frame_write_header(h, lens[i], NULL), TPU_PROTO_OK);
    CU_ASSERT_EQUAL(h[0], 0);
    CU_ASSERT_EQUAL(tpu_frame_parse_header(h, SIZE_MAX, &len, NULL), TPU_PROTO_OK);
    CU_ASSERT_EQUAL(len, lens[i]);
  }
  uint8_t h[5];
  tpu_proto_error_t err;
  CU_ASSERT_EQUAL(tpu_frame_write_header(h, (size_t)UINT32_MAX + 1, &err), TPU_PROTO_ETOOBIG);
  CU_ASSERT(has(err.msg, "4294967296"));
  CU_ASSERT_EQUAL(tpu_frame_write_header(NULL, 1, NULL), TPU_PROTO_EINVAL);
}

static void test_header_bad_flag(void) {
  const uint8_t flags[] = {2, 3, 0x7f, 0x80, 0xff};
  for (size_t i = 0; i < sizeof flags; i++) {
    uint8_t h[5] = {flags[i], 0, 0, 0, 1};
    uint32_t len = 12345;
    tpu_proto_error_t err = {0};
    CU_ASSERT_EQUAL(tpu_frame_parse_header(h, 0, &len, &err), TPU_PROTO_EFLAG);
    CU_ASSERT_EQUAL(err.status, TPU_PROTO_EFLAG);
    CU_ASSERT_EQUAL(len, 12345u); /* untouched on error */
    char want[8];
    snprintf(want, sizeof want, "0x%02x", flags[i]);
    CU_ASSERT(has(err.msg, want));
    CU_ASSERT(has(err.msg, "expected 0x00"));
  }
}

static void test_header_compressed(void) {
  uint8_t h[5] = {1, 0, 0, 0, 4};
  uint32_t len;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(h, 0, &len, &err), TPU_PROTO_ECOMPRESSED);
  CU_ASSERT(has(err.msg, "compress"));
  CU_ASSERT(has(err.msg, "flag byte 0"));
  /* A bad flag is reported even when the length is also over the limit. */
  uint8_t h2[5] = {1, 0xff, 0xff, 0xff, 0xff};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(h2, 16, &len, NULL), TPU_PROTO_ECOMPRESSED);
}

static void test_header_over_limit(void) {
  uint8_t h[5] = {0, 0, 0, 0, 17};
  uint32_t len = 0;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(h, 16, &len, &err), TPU_PROTO_ETOOBIG);
  CU_ASSERT(has(err.msg, "17-byte"));
  CU_ASSERT(has(err.msg, "16 bytes"));
  CU_ASSERT_EQUAL(len, 0u);
  /* Default limit (64 MiB): 64 MiB passes, one byte more fails with both numbers. */
  uint8_t at[5] = {0, 0x04, 0x00, 0x00, 0x00};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(at, 0, &len, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(len, 64u << 20);
  uint8_t over[5] = {0, 0x04, 0x00, 0x00, 0x01};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(over, 0, &len, &err), TPU_PROTO_ETOOBIG);
  CU_ASSERT(has(err.msg, "67108865"));
  CU_ASSERT(has(err.msg, "67108864"));
  uint8_t huge[5] = {0, 0xff, 0xff, 0xff, 0xff};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(huge, 0, &len, &err), TPU_PROTO_ETOOBIG);
  CU_ASSERT(has(err.msg, "4294967295"));
}

static void test_header_at_limit(void) {
  uint8_t h[5] = {0, 0, 0, 0, 16};
  uint32_t len = 0;
  CU_ASSERT_EQUAL(tpu_frame_parse_header(h, 16, &len, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(len, 16u);
  CU_ASSERT_EQUAL(tpu_frame_parse_header(h, 15, &len, NULL), TPU_PROTO_ETOOBIG);
}

static void test_header_einval(void) {
  uint8_t h[5] = {0};
  uint32_t len;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_parse_header(NULL, 0, &len, &err), TPU_PROTO_EINVAL);
  CU_ASSERT(err.msg[0] != '\0');
  CU_ASSERT_EQUAL(tpu_frame_parse_header(h, 0, NULL, NULL), TPU_PROTO_EINVAL);
}

/* ---- the decoder ---- */

static tpu_frame_decoder_t *make(size_t max) {
  tpu_frame_decoder_t *d = NULL;
  CU_ASSERT_FATAL(tpu_frame_decoder_create(max, &d) == TPU_PROTO_OK && d != NULL);
  return d;
}

static void test_decoder_whole_frame_zero_copy(void) {
  tpu_frame_decoder_t *d = make(0);
  uint8_t buf[64];
  size_t n = put_frame(buf, 0, 40, 3), used = 0;
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, n, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(used, n);
  CU_ASSERT(body_ok(&f, 40, 3));
  CU_ASSERT_PTR_EQUAL(f.data, buf + 5); /* pointed into the chunk, not copied */
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_pending(d), 0u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(d, NULL), TPU_PROTO_OK);
  /* Header split from the body, body whole in the next chunk: still no copy. */
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, 3, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(used, 3u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + 3, 2, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(tpu_frame_decoder_pending(d), 5u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + 5, n - 5, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT_PTR_EQUAL(f.data, buf + 5);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u);
  tpu_frame_decoder_free(d);
}

static void test_decoder_byte_at_a_time(void) {
  /* Frames of sizes 0, 1, 5, 4095, 4096, 4097 and 10000 back to back, one byte per call. */
  const uint32_t sizes[] = {0, 1, 5, 4095, 4096, 4097, 10000};
  const size_t nf = sizeof sizes / sizeof sizes[0];
  size_t total = 0;
  for (size_t i = 0; i < nf; i++) total += 5 + sizes[i];
  uint8_t *stream = malloc(total);
  CU_ASSERT_FATAL(stream != NULL);
  size_t off = 0;
  for (size_t i = 0; i < nf; i++) off += put_frame(stream + off, 0, sizes[i], (uint8_t)i);

  tpu_frame_decoder_t *d = make(0);
  size_t got = 0, since_frame = 0;
  int pending_ok = 1;
  for (size_t i = 0; i < total; i++) {
    size_t used = 99;
    tpu_frame_t f;
    tpu_proto_status_t st = tpu_frame_decoder_feed(d, stream + i, 1, &used, &f, NULL);
    CU_ASSERT_EQUAL_FATAL(used, 1u);
    since_frame++;
    if (st == TPU_PROTO_OK) {
      CU_ASSERT_FATAL(got < nf);
      CU_ASSERT(body_ok(&f, sizes[got], (uint8_t)got));
      CU_ASSERT_EQUAL(since_frame, 5 + sizes[got]);
      got++;
      since_frame = 0;
      if (tpu_frame_decoder_pending(d) != 0) pending_ok = 0;
    } else {
      CU_ASSERT_EQUAL_FATAL(st, TPU_PROTO_EAGAIN);
      if (tpu_frame_decoder_pending(d) != since_frame) pending_ok = 0;
    }
  }
  CU_ASSERT(pending_ok);
  CU_ASSERT_EQUAL(got, nf);
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(d, NULL), TPU_PROTO_OK);
  tpu_frame_decoder_free(d);
  free(stream);
}

static void test_decoder_random_splits(void) {
  /* Random frames, random chunk sizes (1..3×frame), compared against the frames written. */
  enum { NF = 200 };
  uint32_t sizes[NF];
  size_t total = 0;
  for (int i = 0; i < NF; i++) {
    long kind = tpu_test_rand_range(0, 9);
    sizes[i] = (uint32_t)(kind == 0 ? 0 : kind < 8 ? tpu_test_rand_range(1, 300)
                                                   : tpu_test_rand_range(1, 70000));
    total += 5 + sizes[i];
  }
  uint8_t *stream = malloc(total);
  CU_ASSERT_FATAL(stream != NULL);
  size_t off = 0;
  for (int i = 0; i < NF; i++) off += put_frame(stream + off, 0, sizes[i], (uint8_t)i);

  tpu_frame_decoder_t *d = make(0);
  int got = 0;
  off = 0;
  while (off < total) {
    size_t chunk = (size_t)tpu_test_rand_range(1, 3000);
    if (chunk > total - off) chunk = total - off;
    const uint8_t *p = stream + off;
    size_t left = chunk;
    for (;;) {
      size_t used;
      tpu_frame_t f;
      tpu_proto_status_t st = tpu_frame_decoder_feed(d, p, left, &used, &f, NULL);
      TPU_ASSERT_SEED(used <= left);
      p += used;
      left -= used;
      if (st == TPU_PROTO_EAGAIN) {
        TPU_ASSERT_SEED(left == 0);
        break;
      }
      TPU_ASSERT_SEED(st == TPU_PROTO_OK);
      if (st != TPU_PROTO_OK || got >= NF) goto out;
      TPU_ASSERT_SEED(body_ok(&f, sizes[got], (uint8_t)got));
      got++;
    }
    off += chunk;
  }
out:
  TPU_ASSERT_SEED(got == NF);
  TPU_ASSERT_SEED(tpu_frame_decoder_finish(d, NULL) == TPU_PROTO_OK);
  tpu_frame_decoder_free(d);
  free(stream);
}

static void test_decoder_pipelined(void) {
  uint8_t buf[256];
  size_t n = 0;
  n += put_frame(buf + n, 0, 10, 1);
  n += put_frame(buf + n, 0, 0, 2);
  n += put_frame(buf + n, 0, 33, 3);
  n += put_frame(buf + n, 0, 7, 4);
  tpu_frame_decoder_t *d = make(0);
  const uint32_t want[] = {10, 0, 33, 7};
  const uint8_t *p = buf;
  size_t left = n;
  for (int i = 0; i < 4; i++) {
    size_t used;
    tpu_frame_t f;
    CU_ASSERT_EQUAL_FATAL(tpu_frame_decoder_feed(d, p, left, &used, &f, NULL), TPU_PROTO_OK);
    CU_ASSERT_EQUAL(used, 5 + want[i]); /* stops after each frame */
    CU_ASSERT(body_ok(&f, want[i], (uint8_t)(i + 1)));
    p += used;
    left -= used;
  }
  CU_ASSERT_EQUAL(left, 0u);
  size_t used = 7;
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, p, 0, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(used, 0u);
  CU_ASSERT_PTR_NULL(f.data);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u); /* all in one chunk: nothing copied */
  tpu_frame_decoder_free(d);
}

static void test_decoder_zero_length(void) {
  uint8_t buf[5] = {0, 0, 0, 0, 0};
  tpu_frame_decoder_t *d = make(0);
  size_t used;
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, 5, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(used, 5u);
  CU_ASSERT_PTR_NOT_NULL(f.data);
  CU_ASSERT_EQUAL(f.len, 0u);
  /* and byte by byte: the frame completes on the fifth header byte */
  for (int i = 0; i < 4; i++)
    CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + i, 1, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + 4, 1, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT_PTR_NOT_NULL(f.data);
  CU_ASSERT_EQUAL(f.len, 0u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u);
  tpu_frame_decoder_free(d);
}

static void test_decoder_truncated_header(void) {
  uint8_t buf[5] = {0, 0, 0, 1, 0};
  tpu_frame_decoder_t *d = make(0);
  size_t used;
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, 3, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(used, 3u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_pending(d), 3u);
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(d, &err), TPU_PROTO_ETRUNCATED);
  CU_ASSERT_EQUAL(err.status, TPU_PROTO_ETRUNCATED);
  CU_ASSERT(has(err.msg, "header"));
  CU_ASSERT(has(err.msg, "3 of 5"));
  tpu_frame_decoder_free(d);
}

static void test_decoder_truncated_body(void) {
  uint8_t buf[64];
  put_frame(buf, 0, 10, 9);
  tpu_frame_decoder_t *d = make(0);
  size_t used;
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, 9, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(used, 9u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_pending(d), 9u);
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(d, &err), TPU_PROTO_ETRUNCATED);
  CU_ASSERT(has(err.msg, "got 4 of the 10"));
  /* the rest completes it; then the stream ends cleanly */
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + 9, 6, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT(body_ok(&f, 10, 9));
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(d, NULL), TPU_PROTO_OK);
  tpu_frame_decoder_free(d);
}

static void test_decoder_bad_flag_sticky(void) {
  uint8_t buf[64];
  size_t n = put_frame(buf, 0, 4, 1);
  n += put_frame(buf + n, 0x42, 4, 2);
  tpu_frame_decoder_t *d = make(0);
  size_t used;
  tpu_frame_t f;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, n, &used, &f, &err), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(used, 9u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + 9, n - 9, &used, &f, &err), TPU_PROTO_EFLAG);
  CU_ASSERT_EQUAL(used, 5u); /* up to and including the bad header */
  CU_ASSERT(has(err.msg, "0x42"));
  CU_ASSERT(tpu_proto_status_fatal(err.status));
  /* sticky: later bytes are refused with the same error, and finish reports it too */
  tpu_proto_error_t again = {0};
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, 9, &used, &f, &again), TPU_PROTO_EFLAG);
  CU_ASSERT_EQUAL(used, 0u);
  CU_ASSERT_STRING_EQUAL(again.msg, err.msg);
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(d, NULL), TPU_PROTO_EFLAG);
  /* reset starts a fresh stream */
  tpu_frame_decoder_reset(d);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, 9, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT(body_ok(&f, 4, 1));
  tpu_frame_decoder_free(d);
}

static void test_decoder_compressed(void) {
  uint8_t buf[16];
  size_t n = put_frame(buf, 1, 4, 0);
  tpu_frame_decoder_t *d = make(0);
  size_t used;
  tpu_frame_t f;
  tpu_proto_error_t err = {0};
  /* byte by byte: the error comes with the fifth byte */
  for (int i = 0; i < 4; i++)
    CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + i, 1, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + 4, n - 4, &used, &f, &err),
                  TPU_PROTO_ECOMPRESSED);
  CU_ASSERT_EQUAL(used, 1u);
  CU_ASSERT(has(err.msg, "compress"));
  tpu_frame_decoder_free(d);
}

static void test_decoder_oversized_no_alloc(void) {
  /* A header claiming 4 GiB - 1 against the default limit: refused on the header alone,
   * before a single body byte is read or buffered. */
  uint8_t buf[32] = {0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3};
  tpu_frame_decoder_t *d = make(0);
  size_t used;
  tpu_frame_t f;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, sizeof buf, &used, &f, &err), TPU_PROTO_ETOOBIG);
  CU_ASSERT_EQUAL(used, 5u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u);
  CU_ASSERT(has(err.msg, "4294967295"));
  CU_ASSERT(has(err.msg, "67108864"));
  CU_ASSERT_EQUAL(tpu_proto_status_grpc_code(err.status), 8); /* RESOURCE_EXHAUSTED */
  tpu_frame_decoder_free(d);

  /* Same with a small configured limit, the header arriving byte by byte. */
  d = make(100);
  uint8_t h[5] = {0, 0, 0, 0, 101};
  for (int i = 0; i < 4; i++)
    CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, h + i, 1, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, h + 4, 1, &used, &f, &err), TPU_PROTO_ETOOBIG);
  CU_ASSERT(has(err.msg, "101-byte"));
  CU_ASSERT(has(err.msg, "100 bytes"));
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u);
  tpu_frame_decoder_free(d);
}

static void test_decoder_at_limit(void) {
  uint8_t buf[64];
  tpu_frame_decoder_t *d = make(16);
  size_t n = put_frame(buf, 0, 16, 5), used;
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, n, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT(body_ok(&f, 16, 5));
  n = put_frame(buf, 0, 17, 5);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, n, &used, &f, NULL), TPU_PROTO_ETOOBIG);
  tpu_frame_decoder_free(d);
}

static void test_decoder_memory_tracks_received(void) {
  /* A legal 64 MiB announcement costs nothing until bytes arrive, then at most about twice
   * what arrived: a peer cannot make the server allocate what it merely claims. */
  tpu_frame_decoder_t *d = make(0);
  uint8_t h[5] = {0, 0x04, 0, 0, 0};
  size_t used;
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, h, 5, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u);
  uint8_t chunk[1000] = {0};
  size_t received = 0;
  for (int i = 0; i < 100; i++) {
    CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, chunk, sizeof chunk, &used, &f, NULL),
                    TPU_PROTO_EAGAIN);
    received += sizeof chunk;
    CU_ASSERT(tpu_frame_decoder_capacity(d) >= received);
    CU_ASSERT(tpu_frame_decoder_capacity(d) <= 2 * received + 4096);
  }
  CU_ASSERT_EQUAL(tpu_frame_decoder_pending(d), 5 + received);
  tpu_frame_decoder_free(d);
}

static void test_decoder_releases_big_buffer(void) {
  /* A 2 MiB frame split across chunks is gathered; the buffer goes once the next call starts. */
  const uint32_t big = (2u << 20) + 12345; /* not a power of two: the cap must clamp */
  uint8_t *buf = malloc(5 + (size_t)big);
  CU_ASSERT_FATAL(buf != NULL);
  size_t n = put_frame(buf, 0, big, 7), used;
  tpu_frame_decoder_t *d = make(0);
  tpu_frame_t f;
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf, n / 2, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, buf + n / 2, n - n / 2, &used, &f, NULL),
                  TPU_PROTO_OK);
  CU_ASSERT(body_ok(&f, big, 7));
  CU_ASSERT(tpu_frame_decoder_capacity(d) >= big);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), big); /* capped at the frame's length */
  uint8_t small[16];
  size_t sn = put_frame(small, 0, 3, 1);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, small, sn, &used, &f, NULL), TPU_PROTO_OK);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(d), 0u);
  tpu_frame_decoder_free(d);
  free(buf);
}

static void test_decoder_einval(void) {
  CU_ASSERT_EQUAL(tpu_frame_decoder_create(0, NULL), TPU_PROTO_EINVAL);
  tpu_frame_decoder_free(NULL);
  tpu_frame_decoder_reset(NULL);
  CU_ASSERT_EQUAL(tpu_frame_decoder_pending(NULL), 0u);
  CU_ASSERT_EQUAL(tpu_frame_decoder_capacity(NULL), 0u);
  tpu_frame_decoder_t *d = make(0);
  size_t used = 5;
  tpu_frame_t f;
  tpu_proto_error_t err = {0};
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, NULL, 3, &used, &f, &err), TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(used, 0u);
  CU_ASSERT(err.msg[0] != '\0');
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, NULL, 0, &used, &f, NULL), TPU_PROTO_EAGAIN);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(d, (const uint8_t *)"", 0, NULL, &f, NULL),
                  TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_frame_decoder_feed(NULL, (const uint8_t *)"", 0, &used, &f, NULL),
                  TPU_PROTO_EINVAL);
  CU_ASSERT_EQUAL(tpu_frame_decoder_finish(NULL, NULL), TPU_PROTO_EINVAL);
  tpu_frame_decoder_free(d);
}

/* ---- status codes ---- */

static void test_status_strings(void) {
  for (int i = 0; i < TPU_PROTO_STATUS_COUNT; i++) {
    const char *m = tpu_proto_strerror((tpu_proto_status_t)i);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT(m[0] != '\0');
    for (int j = 0; j < i; j++)
      CU_ASSERT(strcmp(m, tpu_proto_strerror((tpu_proto_status_t)j)) != 0);
  }
  CU_ASSERT_STRING_EQUAL(tpu_proto_strerror(TPU_PROTO_OK), "success");
  CU_ASSERT_STRING_EQUAL(tpu_proto_strerror(TPU_PROTO_STATUS_COUNT), "unknown status");
  CU_ASSERT_STRING_EQUAL(tpu_proto_strerror((tpu_proto_status_t)-1), "unknown status");
}

static void test_status_fatal(void) {
  CU_ASSERT(tpu_proto_status_fatal(TPU_PROTO_EFLAG));
  CU_ASSERT(tpu_proto_status_fatal(TPU_PROTO_ECOMPRESSED));
  CU_ASSERT(tpu_proto_status_fatal(TPU_PROTO_ETOOBIG));
  CU_ASSERT(tpu_proto_status_fatal(TPU_PROTO_ETRUNCATED));
  CU_ASSERT(!tpu_proto_status_fatal(TPU_PROTO_OK));
  CU_ASSERT(!tpu_proto_status_fatal(TPU_PROTO_EAGAIN));
  CU_ASSERT(!tpu_proto_status_fatal(TPU_PROTO_EMETHOD));
  CU_ASSERT(!tpu_proto_status_fatal(TPU_PROTO_EDECODE));
}

TPU_TEST_SUITE(frame,
               {"header_ok", test_header_ok},
               {"header_write_roundtrip", test_header_write_roundtrip},
               {"header_bad_flag", test_header_bad_flag},
               {"header_compressed", test_header_compressed},
               {"header_over_limit", test_header_over_limit},
               {"header_at_limit", test_header_at_limit},
               {"header_einval", test_header_einval},
               {"decoder_whole_frame_zero_copy", test_decoder_whole_frame_zero_copy},
               {"decoder_byte_at_a_time", test_decoder_byte_at_a_time},
               {"decoder_random_splits", test_decoder_random_splits},
               {"decoder_pipelined", test_decoder_pipelined},
               {"decoder_zero_length", test_decoder_zero_length},
               {"decoder_truncated_header", test_decoder_truncated_header},
               {"decoder_truncated_body", test_decoder_truncated_body},
               {"decoder_bad_flag_sticky", test_decoder_bad_flag_sticky},
               {"decoder_compressed", test_decoder_compressed},
               {"decoder_oversized_no_alloc", test_decoder_oversized_no_alloc},
               {"decoder_at_limit", test_decoder_at_limit},
               {"decoder_memory_tracks_received", test_decoder_memory_tracks_received},
               {"decoder_releases_big_buffer", test_decoder_releases_big_buffer},
               {"decoder_einval", test_decoder_einval},
               {"status_strings", test_status_strings},
               {"status_fatal", test_status_fatal})
