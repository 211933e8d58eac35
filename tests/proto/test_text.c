/*
 * test_text.c - proto/tpu_text.c: tpu_errf (and its va_list and return-value forms) and the
 * growable buffer tpu_buf_t.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "tpu_test.h"
#include "tpu_text.h"

/* ---- tpu_errf ---- */

static void test_errf_formats(void) {
  char err[64];
  int n = tpu_errf(err, sizeof err, "input '%s': expected %d bytes, got %zu", "x", 60, (size_t)56);
  CU_ASSERT_STRING_EQUAL(err, "input 'x': expected 60 bytes, got 56");
  CU_ASSERT_EQUAL(n, (int)strlen(err));
}

static void test_errf_truncates(void) {
  char err[8];
  memset(err, 'z', sizeof err);
  int n = tpu_errf(err, sizeof err, "%s: %s", "model.json", "no such file");
  CU_ASSERT_EQUAL(n, (int)strlen("model.json: no such file")); /* the whole length: cut */
  CU_ASSERT_STRING_EQUAL(err, "model.j");                      /* 7 bytes and the NUL */
  /* One byte: just the NUL. */
  char one[1] = {'z'};
  CU_ASSERT_EQUAL(tpu_errf(one, 1, "abc"), 3);
  CU_ASSERT_EQUAL(one[0], '\0');
  /* Exactly full: every byte but the NUL used, nothing cut. */
  char four[4];
  CU_ASSERT_EQUAL(tpu_errf(four, sizeof four, "%d", 123), 3);
  CU_ASSERT_STRING_EQUAL(four, "123");
}

static void test_errf_null_or_empty_buffer(void) {
  /* No buffer: nothing written, the length still returned. */
  CU_ASSERT_EQUAL(tpu_errf(NULL, 0, "%s", "hello"), 5);
  CU_ASSERT_EQUAL(tpu_errf(NULL, 100, "%s", "hello"), 5);
  /* A buffer of length 0 is not touched. */
  char err[4] = {'z', 'z', 'z', 'z'};
  CU_ASSERT_EQUAL(tpu_errf(err, 0, "%s", "hello"), 5);
  CU_ASSERT_EQUAL(memcmp(err, "zzzz", 4), 0);
}

static int wrapper(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int wrapper(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = tpu_verrf(err, errlen, fmt, ap);
  va_end(ap);
  return n;
}

static void test_verrf(void) {
  char err[16];
  CU_ASSERT_EQUAL(wrapper(err, sizeof err, "%d-%s", 7, "x"), 3);
  CU_ASSERT_STRING_EQUAL(err, "7-x");
  CU_ASSERT_EQUAL(wrapper(NULL, 0, "%d", 12345), 5);
  CU_ASSERT_EQUAL(wrapper(err, 3, "%d", 12345), 5);
  CU_ASSERT_STRING_EQUAL(err, "12");
}

static void test_errf_ret(void) {
  char err[32];
  CU_ASSERT_EQUAL(tpu_errf_ret(-7, err, sizeof err, "%s: bad", "f"), -7);
  CU_ASSERT_STRING_EQUAL(err, "f: bad");
  CU_ASSERT_EQUAL(tpu_errf_ret(42, NULL, 0, "%s", "ignored"), 42);
  CU_ASSERT_EQUAL(tpu_errf_ret(0, err, 4, "%s", "abcdef"), 0);
  CU_ASSERT_STRING_EQUAL(err, "abc");
}

/* ---- tpu_buf_t ---- */

static void test_buf_appends(void) {
  tpu_buf_t b = {0};
  CU_ASSERT_PTR_NULL(b.p);
  tpu_buf_adds(&b, "seq=");
  tpu_buf_printf(&b, "%d,", 17);
  tpu_buf_add(&b, "hash", 4);
  CU_ASSERT_FALSE(b.oom);
  CU_ASSERT_EQUAL(b.len, 11);
  CU_ASSERT_STRING_EQUAL(b.p, "seq=17,hash");
  CU_ASSERT(b.cap > b.len);
  /* Empty appends change nothing but keep the text terminated. */
  tpu_buf_add(&b, "", 0);
  tpu_buf_adds(&b, "");
  tpu_buf_printf(&b, "%s", "");
  CU_ASSERT_EQUAL(b.len, 11);
  CU_ASSERT_STRING_EQUAL(b.p, "seq=17,hash");
  tpu_buf_free(&b);
  CU_ASSERT_PTR_NULL(b.p);
  CU_ASSERT_EQUAL(b.len, 0);
  CU_ASSERT_EQUAL(b.cap, 0);
  tpu_buf_free(NULL); /* accepted */
}

static void test_buf_bytes_with_nul(void) {
  tpu_buf_t b = {0};
  const unsigned char bytes[5] = {1, 0, 2, 0, 3};
  tpu_buf_add(&b, bytes, sizeof bytes);
  tpu_buf_add(&b, bytes, sizeof bytes);
  CU_ASSERT_EQUAL(b.len, 10);
  CU_ASSERT_EQUAL(memcmp(b.p, bytes, 5), 0);
  CU_ASSERT_EQUAL(memcmp(b.p + 5, bytes, 5), 0);
  CU_ASSERT_EQUAL(b.p[10], '\0');
  tpu_buf_free(&b);
}

/* From test_metrics.c, where the buffer was metrics' own: printf longer than a formatting
 * scratch (512 bytes there) and past the first allocation; free twice and NULL. */
static void test_buf_printf_grows(void) {
  tpu_buf_t b = {0};
  tpu_buf_printf(&b, "%s=%d", "a", 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);
  CU_ASSERT_STRING_EQUAL(b.p, "a=1");
  CU_ASSERT_EQUAL(b.len, 3);
  tpu_buf_printf(&b, "%s", "");
  CU_ASSERT_EQUAL(b.len, 3);
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  for (int i = 0; i < 4; i++) tpu_buf_printf(&b, "[%s]", big);
  CU_ASSERT_EQUAL(b.len, 3 + 4 * (sizeof big + 1));
  CU_ASSERT_EQUAL(strlen(b.p), b.len);
  CU_ASSERT_TRUE(b.cap > b.len);
  CU_ASSERT_EQUAL(strncmp(b.p, "a=1[xxx", 7), 0);
  CU_ASSERT_EQUAL(b.p[b.len - 1], ']');
  CU_ASSERT_FALSE(b.oom);
  tpu_buf_free(&b);
  CU_ASSERT_PTR_NULL(b.p);
  CU_ASSERT_EQUAL(b.len, 0);
  CU_ASSERT_EQUAL(b.cap, 0);
  tpu_buf_free(&b); /* twice, and NULL */
  tpu_buf_free(NULL);
}

/* printf at the edge of the free space: a result of room-1 bytes fits, one of room does not. */
static void test_buf_printf_at_the_edge(void) {
  for (size_t extra = 0; extra < 3; extra++) {
    tpu_buf_t b = {0};
    tpu_buf_adds(&b, "ab");
    size_t room = b.cap - b.len; /* counting the NUL */
    char *s = malloc(room + 2);
    size_t n = room - 1 + extra;
    memset(s, 'q', n);
    s[n] = '\0';
    tpu_buf_printf(&b, "%s", s);
    CU_ASSERT_FALSE(b.oom);
    CU_ASSERT_EQUAL(b.len, 2 + n);
    CU_ASSERT_EQUAL(memcmp(b.p, "ab", 2), 0);
    CU_ASSERT_EQUAL(memcmp(b.p + 2, s, n), 0);
    CU_ASSERT_EQUAL(b.p[b.len], '\0');
    CU_ASSERT(b.cap > b.len);
    free(s);
    tpu_buf_free(&b);
  }
}

/* A failing conversion (here a lone surrogate, which no locale can encode) appends nothing,
 * even though vsnprintf wrote part of its output into the free space first. */
static void test_buf_printf_encoding_error(void) {
  tpu_buf_t b = {0};
  tpu_buf_adds(&b, "xy");
  tpu_buf_printf(&b, "abc%lc", (wint_t)0xD800);
  CU_ASSERT_EQUAL(b.len, 2);
  CU_ASSERT_STRING_EQUAL(b.p, "xy");
  CU_ASSERT_FALSE(b.oom);
  tpu_buf_free(&b);
}

/* Random appends of every kind against a reference built in a flat array. */
static void test_buf_random_against_reference(void) {
  size_t refcap = 1 << 20, reflen = 0;
  char *ref = malloc(refcap);
  char *piece = malloc(5000);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
  CU_ASSERT_PTR_NOT_NULL_FATAL(piece);
  tpu_buf_t b = {0};
  for (int i = 0; i < 2000 && reflen + 6000 < refcap; i++) {
    size_t n = (size_t)tpu_test_rand_range(0, tpu_test_rand_range(0, 1) ? 40 : 4000);
    for (size_t j = 0; j < n; j++) piece[j] = (char)tpu_test_rand_range(1, 255);
    piece[n] = '\0';
    switch (tpu_test_rand_range(0, 3)) {
    case 0:
      tpu_buf_add(&b, piece, n);
      memcpy(ref + reflen, piece, n);
      reflen += n;
      break;
    case 1:
      tpu_buf_adds(&b, piece);
      memcpy(ref + reflen, piece, n);
      reflen += n;
      break;
    case 2: {
      long v = tpu_test_rand_range(-1000000, 1000000);
      tpu_buf_printf(&b, "[%s|%ld]", piece, v);
      reflen += (size_t)snprintf(ref + reflen, refcap - reflen, "[%s|%ld]", piece, v);
      break;
    }
    default:
      if (tpu_test_rand_range(0, 20) == 0) {
        tpu_buf_clear(&b);
        reflen = 0;
      }
    }
    TPU_ASSERT_SEED(b.len == reflen);
    TPU_ASSERT_SEED(b.len == 0 || memcmp(b.p, ref, reflen) == 0);
    TPU_ASSERT_SEED(!b.p || b.p[b.len] == '\0');
    if (b.len != reflen) break;
  }
  CU_ASSERT_FALSE(b.oom);
  tpu_buf_free(&b);
  free(piece);
  free(ref);
}

/* A reserve of the known size is met exactly, and the appends within it do not reallocate. */
static void test_buf_reserve(void) {
  tpu_buf_t b = {0};
  CU_ASSERT_EQUAL(tpu_buf_reserve(&b, 10000), 0);
  CU_ASSERT_EQUAL(b.cap, 10001);
  CU_ASSERT_EQUAL(b.len, 0);
  CU_ASSERT_STRING_EQUAL(b.p, "");
  char *p = b.p;
  for (int i = 0; i < 1000; i++) tpu_buf_add(&b, "0123456789", 10);
  CU_ASSERT_PTR_EQUAL(b.p, p);
  CU_ASSERT_EQUAL(b.len, 10000);
  CU_ASSERT_EQUAL(tpu_buf_reserve(&b, 0), 0); /* already there */
  CU_ASSERT_PTR_EQUAL(b.p, p);
  tpu_buf_add(&b, "x", 1); /* past it: grows */
  CU_ASSERT_EQUAL(b.len, 10001);
  CU_ASSERT(b.cap >= 10002);
  tpu_buf_free(&b);
}

/* Out of memory (a reserve no allocator can meet): oom is set and sticky, every later append
 * does nothing, detach gives NULL; clear makes the buffer usable again. */
static void test_buf_oom(void) {
  tpu_buf_t b = {0};
  tpu_buf_adds(&b, "kept");
  CU_ASSERT_EQUAL(tpu_buf_reserve(&b, SIZE_MAX - 2), -1);
  CU_ASSERT_TRUE(b.oom);
  tpu_buf_adds(&b, "lost");
  tpu_buf_add(&b, "lost", 4);
  tpu_buf_printf(&b, "%s", "lost");
  CU_ASSERT_EQUAL(tpu_buf_reserve(&b, 1), -1);
  CU_ASSERT_EQUAL(b.len, 4);
  CU_ASSERT_STRING_EQUAL(b.p, "kept"); /* a prefix of what was asked, without holes */
  tpu_buf_clear(&b);
  CU_ASSERT_FALSE(b.oom);
  CU_ASSERT_EQUAL(b.len, 0);
  tpu_buf_adds(&b, "again");
  CU_ASSERT_STRING_EQUAL(b.p, "again");
  CU_ASSERT_EQUAL(tpu_buf_reserve(&b, SIZE_MAX), -1); /* len + more + 1 would overflow */
  size_t len = 99;
  CU_ASSERT_PTR_NULL(tpu_buf_detach(&b, &len)); /* frees what it held */
  CU_ASSERT_EQUAL(len, 0);
  CU_ASSERT_PTR_NULL(b.p);
  CU_ASSERT_FALSE(b.oom);
}

static void test_buf_detach(void) {
  tpu_buf_t b = {0};
  size_t len = 99;
  CU_ASSERT_PTR_NULL(tpu_buf_detach(&b, &len)); /* never used */
  CU_ASSERT_EQUAL(len, 0);
  CU_ASSERT_EQUAL(tpu_buf_reserve(&b, 100), 0);
  CU_ASSERT_PTR_NULL(tpu_buf_detach(&b, NULL)); /* reserved but empty: freed, NULL */
  CU_ASSERT_PTR_NULL(b.p);
  tpu_buf_printf(&b, "{\"n\":%d}", 5);
  char *s = tpu_buf_detach(&b, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_STRING_EQUAL(s, "{\"n\":5}");
  CU_ASSERT_EQUAL(len, 7);
  CU_ASSERT_PTR_NULL(b.p); /* the buffer is empty and reusable */
  CU_ASSERT_EQUAL(b.len, 0);
  CU_ASSERT_EQUAL(b.cap, 0);
  tpu_buf_adds(&b, "next");
  CU_ASSERT_STRING_EQUAL(b.p, "next");
  CU_ASSERT_PTR_NOT_EQUAL(b.p, s);
  free(s);
  tpu_buf_free(&b);
}

static void test_buf_clear_keeps_memory(void) {
  tpu_buf_t b = {0};
  tpu_buf_adds(&b, "some text");
  char *p = b.p;
  size_t cap = b.cap;
  tpu_buf_clear(&b);
  CU_ASSERT_EQUAL(b.len, 0);
  CU_ASSERT_STRING_EQUAL(b.p, "");
  CU_ASSERT_PTR_EQUAL(b.p, p);
  CU_ASSERT_EQUAL(b.cap, cap);
  tpu_buf_clear(&b);
  tpu_buf_free(&b);
  tpu_buf_clear(&b); /* on a zeroed buffer too */
  CU_ASSERT_PTR_NULL(b.p);
}

TPU_TEST_SUITE(text, {"errf_formats", test_errf_formats}, {"errf_truncates", test_errf_truncates},
               {"errf_null_or_empty_buffer", test_errf_null_or_empty_buffer},
               {"verrf", test_verrf}, {"errf_ret", test_errf_ret},
               {"buf_appends", test_buf_appends}, {"buf_bytes_with_nul", test_buf_bytes_with_nul},
               {"buf_printf_grows", test_buf_printf_grows},
               {"buf_printf_at_the_edge", test_buf_printf_at_the_edge},
               {"buf_printf_encoding_error", test_buf_printf_encoding_error},
               {"buf_random_against_reference", test_buf_random_against_reference},
               {"buf_reserve", test_buf_reserve}, {"buf_oom", test_buf_oom},
               {"buf_detach", test_buf_detach},
               {"buf_clear_keeps_memory", test_buf_clear_keeps_memory})
