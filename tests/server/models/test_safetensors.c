/*
 * test_safetensors.c - the safetensors reader: one test per malformed-file case, each checked
 * through both entry points (a real file via mmap, and a memory buffer), the happy paths, the
 * digest check, and a randomized mutation run that must never crash.
 */
#define _GNU_SOURCE /* nftw */
#include <ftw.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"
#include "tpu_test.h"

/* ---- helpers ---- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static char *make_tmpdir(void) {
  char tmpl[] = "/tmp/tpud-st-XXXXXX";
  char *d = mkdtemp(tmpl);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  return strdup(d);
}

static void rm_tmpdir(char *d) {
  nftw(d, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  free(d);
}

static void write_file(const char *path, const void *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(buf, 1, len, f), len);
  fclose(f);
}

/* A safetensors image: 8-byte little-endian `hlen` (normally strlen(header)), the header, then
 * dlen bytes of data (a recognizable pattern). */
typedef struct {
  uint8_t *buf;
  size_t len;
} blob_t;

static blob_t blob_raw(uint64_t hlen, const char *header, size_t header_bytes, size_t dlen) {
  blob_t b;
  b.len = 8 + header_bytes + dlen;
  b.buf = malloc(b.len ? b.len : 1);
  for (int i = 0; i < 8; i++) b.buf[i] = (uint8_t)(hlen >> (8 * i));
  memcpy(b.buf + 8, header, header_bytes);
  for (size_t i = 0; i < dlen; i++) b.buf[8 + header_bytes + i] = (uint8_t)(i * 7 + 1);
  return b;
}

static blob_t blob(const char *header, size_t dlen) {
  return blob_raw(strlen(header), header, strlen(header), dlen);
}

/* Expects `b` (taken) to be refused, through a file and through memory, with a message that
 * contains `want` and starts with the name it was given. */
static void expect_bad_blob(blob_t b, const char *want) {
  char err[512], *dir = make_tmpdir(), path[256];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  write_file(path, b.buf, b.len);

  tpu_safetensors_t *st = (tpu_safetensors_t *)1;
  tpu_status_t rc = tpu_safetensors_open(path, &st, err, sizeof err);
  CU_ASSERT_NOT_EQUAL(rc, TPU_OK);
  CU_ASSERT_PTR_NULL(st);
  CU_ASSERT_EQUAL(strncmp(err, path, strlen(path)), 0);
  if (!strstr(err, want)) {
    fprintf(stderr, "\n  file: expected \"%s\" in \"%s\"\n", want, err);
    CU_FAIL("message lacks the expected text");
  }

  st = (tpu_safetensors_t *)1;
  rc = tpu_safetensors_parse(b.buf, b.len, "model.safetensors", &st, err, sizeof err);
  CU_ASSERT_NOT_EQUAL(rc, TPU_OK);
  CU_ASSERT_PTR_NULL(st);
  CU_ASSERT_EQUAL(strncmp(err, "model.safetensors: ", 19), 0);
  if (!strstr(err, want)) {
    fprintf(stderr, "\n  memory: expected \"%s\" in \"%s\"\n", want, err);
    CU_FAIL("message lacks the expected text");
  }
  free(b.buf);
  rm_tmpdir(dir);
}

static void expect_bad(const char *header, size_t dlen, const char *want) {
  expect_bad_blob(blob(header, dlen), want);
}

/* ---- sizes ---- */

static void test_too_short(void) {
  for (size_t n = 0; n < 8; n++) {
    blob_t b = {malloc(8), n};
    memset(b.buf, 0, 8);
    expect_bad_blob(b, "too short for the 8-byte header length");
  }
}

static void test_header_over_bound(void) {
  expect_bad_blob(blob_raw(TPU_SAFETENSORS_MAX_HEADER + 1, "{}", 2, 0),
                  "header length 100000001 exceeds the limit of 100000000 bytes");
  expect_bad_blob(blob_raw(UINT64_MAX, "{}", 2, 0), "exceeds the limit");
}

static void test_header_past_eof(void) {
  expect_bad_blob(blob_raw(3, "{}", 2, 0), "header length 3 runs past the end of the file");
  /* At the bound but still larger than the file: the file-size check words it. */
  expect_bad_blob(blob_raw(TPU_SAFETENSORS_MAX_HEADER, "{}", 2, 0), "runs past the end");
}

/* ---- header bytes ---- */

static void test_not_brace(void) {
  expect_bad("[]", 0, "header must be a JSON object starting with '{'");
  expect_bad(" {}", 0, "starting with '{'");
  expect_bad("\"x\"", 0, "starting with '{'");
  expect_bad_blob(blob_raw(0, "", 0, 0), "but it is empty");
}

static void test_invalid_utf8(void) {
  expect_bad("{\"a\xff\":{}}", 0, "header is not valid UTF-8: byte 0xff at header offset 3");
  expect_bad("{\"\xc0\xaf\":{}}", 0, "not valid UTF-8: byte 0xc0 at header offset 2"); /* overlong */
  expect_bad("{\"\xed\xa0\x80\":{}}", 0, "not valid UTF-8: byte 0xed");               /* surrogate */
  expect_bad("{\"\xf4\x90\x80\x80\":{}}", 0, "not valid UTF-8: byte 0xf4");           /* > U+10FFFF */
  expect_bad("{\"\xe2\x82\":{}}", 0, "not valid UTF-8");                               /* cut short */
  /* Well-formed multi-byte names are fine. */
  const char *h = "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[2],"
                  "\"data_offsets\":[0,2]}}";
  blob_t b = blob(h, 2);
  tpu_safetensors_t *st;
  CU_ASSERT_EQUAL(tpu_safetensors_parse(b.buf, b.len, NULL, &st, NULL, 0), TPU_OK);
  CU_ASSERT_PTR_NOT_NULL(tpu_safetensors_find(st, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  tpu_safetensors_close(st);
  free(b.buf);
}

static void test_invalid_json(void) {
  expect_bad("{\"a\":", 0, "header is not valid JSON");
  expect_bad("{} x", 0, "header is not valid JSON");
  expect_bad("{\"a\":{}},", 0, "header is not valid JSON");
  expect_bad("{\"a\":1e999999}", 0, "header is not valid JSON");
}

static void test_duplicate_names(void) {
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
             2, "names the same key twice");
  /* The same name spelled with an escape is still the same name. */
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"\\u0077\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
             2, "names the same key twice");
  /* And inside an entry. */
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
             "names the same key twice");
}

/* ---- tensor entries ---- */

static void test_unknown_dtype(void) {
  expect_bad("{\"w\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
             "tensor 'w': unknown dtype 'F31'");
  expect_bad("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
             "unknown dtype 'f32'");
  expect_bad("{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
             "tensor 'w': dtype must be a string");
}

static void test_bad_shape(void) {
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1,2],\"data_offsets\":[0,4]}}", 4,
             "tensor 'w': shape[0] must be a non-negative integer");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,2.0],\"data_offsets\":[0,8]}}", 8,
             "tensor 'w': shape[1] must be a non-negative integer");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
             "shape[0] must be a non-negative integer");
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8,
             "tensor 'w': shape must be an array");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
             "\"data_offsets\":[0,1]}}",
             1, "shape has 17 dimensions, at most 16");
}

static void test_missing_fields(void) {
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "tensor 'w': missing data_offsets");
  expect_bad("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor 'w': missing dtype");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "tensor 'w': missing shape");
  expect_bad("{\"w\":[1]}", 0, "tensor 'w': expected an object");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
             "tensor 'w': unknown field 'x'");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
             "data_offsets must be [begin, end]");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
             "data_offsets must be [begin, end]");
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1,
             "data_offsets must be [begin, end]");
}

static void test_bad_metadata(void) {
  expect_bad("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__['a'] must be a string");
  expect_bad("{\"__metadata__\":[]}", 0, "__metadata__ must be an object of strings");
}

/* ---- offsets ---- */

static void test_end_before_begin(void) {
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
             "tensor 'w': data_offsets [4, 0] end before they begin");
}

static void test_gap(void) {
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             12, "tensor 'b': data_offsets [8, 12] leave a gap of 4 bytes after tensor 'a'");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
             "the first tensor must start at offset 0");
}

static void test_overlap(void) {
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
             12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]");
  /* Two tensors on the very same bytes. */
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             4, "overlap");
}

static void test_unsorted_entries_accepted(void) {
  /* Entry order in the JSON is free; only the byte ranges must tile the data. */
  const char *h = "{\"c\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[6,9]},"
                  "\"a\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[2,6]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
  blob_t b = blob(h, 9);
  tpu_safetensors_t *st;
  CU_ASSERT_EQUAL_FATAL(tpu_safetensors_parse(b.buf, b.len, NULL, &st, NULL, 0), TPU_OK);
  CU_ASSERT_EQUAL(tpu_safetensors_count(st), 3);
  CU_ASSERT_STRING_EQUAL(tpu_safetensors_tensor(st, 0)->name, "b");
  CU_ASSERT_STRING_EQUAL(tpu_safetensors_tensor(st, 1)->name, "a");
  CU_ASSERT_STRING_EQUAL(tpu_safetensors_tensor(st, 2)->name, "c");
  CU_ASSERT_PTR_NULL(tpu_safetensors_tensor(st, 3));
  tpu_safetensors_close(st);
  free(b.buf);
}

/* ---- sizes of tensors ---- */

static void test_shape_overflow(void) {
  expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,2],"
             "\"data_offsets\":[0,0]}}",
             0, "tensor 'w': shape [4294967296, 4294967296, 2] has more than 2^64 elements");
  expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
             "\"data_offsets\":[0,0]}}",
             0, "of F64 needs more than 2^64 bits");
  /* Any zero dimension makes zero elements, whatever the others are. */
  const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],"
                  "\"data_offsets\":[0,0]}}";
  blob_t b = blob(h, 0);
  tpu_safetensors_t *st;
  CU_ASSERT_EQUAL(tpu_safetensors_parse(b.buf, b.len, NULL, &st, NULL, 0), TPU_OK);
  CU_ASSERT_EQUAL(tpu_safetensors_find(st, "w")->nelements, 0);
  tpu_safetensors_close(st);
  free(b.buf);
}

static void test_byte_count_mismatch(void) {
  const char *h = "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[10,5],\"data_offsets\":[0,100]}}";
  blob_t b = blob(h, 100);
  char err[512];
  tpu_safetensors_t *st;
  CU_ASSERT_EQUAL(tpu_safetensors_parse(b.buf, b.len, "model.safetensors", &st, err, sizeof err),
                  TPU_EINVAL);
  CU_ASSERT_STRING_EQUAL(err, "model.safetensors: tensor 'fc1.weight': data_offsets [0, 100] hold "
                              "100 bytes, shape [10, 5] of F32 needs 200");
  free(b.buf);
  expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4,
             "hold 4 bytes, shape [3] of BF16 needs 6");
  expect_bad("{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
             "shape [3] of F4 is 12 bits, not a whole number of bytes");
}

static void test_trailing_bytes(void) {
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9,
             "1 trailing bytes: the tensors end at data offset 8 but the file has 9");
  expect_bad("{}", 1, "1 trailing bytes");
}

static void test_truncated(void) {
  expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7,
             "tensors need 8 bytes of data but the file has only 7 after the header");
}

static void test_hostile_name_escaped(void) {
  /* A name with a newline and a quote must not forge a log line. */
  char err[512];
  const char *h = "{\"a\\nb'\":{\"dtype\":\"Q\",\"shape\":[],\"data_offsets\":[0,0]}}";
  blob_t b = blob(h, 0);
  tpu_safetensors_t *st;
  CU_ASSERT_NOT_EQUAL(tpu_safetensors_parse(b.buf, b.len, "f", &st, err, sizeof err), TPU_OK);
  CU_ASSERT_PTR_NULL(strchr(err, '\n'));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "tensor 'a\\x0ab\\x27'"));
  free(b.buf);
}

/* ---- happy paths ---- */

static void test_valid_file(void) {
  /* Odd header length: the data section, and so every tensor, is misaligned in memory. */
  const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                  "\"f\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                  "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[24,30]},"
                  "\"e\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[30,30]},"
                  "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[30,38]},"
                  "\"q\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[38,40]}}";
  char hb[512];
  snprintf(hb, sizeof hb, "%s", h);
  while ((8 + strlen(hb)) % 4 != 1) strcat(hb, " "); /* padding, as writers add */
  h = hb;
  size_t hl = strlen(h);
  blob_t b = blob_raw(hl, h, hl, 40);
  CU_ASSERT_EQUAL((8 + hl) % 4 != 0, 1);
  float vals[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 42.0f};
  memcpy(b.buf + 8 + hl, vals, sizeof vals);
  double s = -0.125;
  memcpy(b.buf + 8 + hl + 30, &s, sizeof s);

  char *dir = make_tmpdir(), path[256], err[256];
  snprintf(path, sizeof path, "%s/x.safetensors", dir);
  write_file(path, b.buf, b.len);
  tpu_safetensors_t *st;
  CU_ASSERT_EQUAL_FATAL(tpu_safetensors_open(path, &st, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(tpu_safetensors_count(st), 5);
  const tpu_st_tensor_t *f = tpu_safetensors_find(st, "f");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(f->dtype, TPU_ST_F32);
  CU_ASSERT_EQUAL(f->ndim, 2);
  CU_ASSERT_EQUAL(f->shape[0], 2);
  CU_ASSERT_EQUAL(f->shape[1], 3);
  CU_ASSERT_EQUAL(f->nelements, 6);
  CU_ASSERT_EQUAL(f->nbytes, 24);
  float got[6];
  memcpy(got, f->data, sizeof got); /* unaligned: memcpy, as the header says */
  CU_ASSERT_EQUAL(memcmp(got, vals, sizeof got), 0);
  const tpu_st_tensor_t *e = tpu_safetensors_find(st, "e");
  CU_ASSERT_EQUAL(e->nelements, 0);
  CU_ASSERT_EQUAL(e->nbytes, 0);
  const tpu_st_tensor_t *sc = tpu_safetensors_find(st, "s");
  CU_ASSERT_EQUAL(sc->ndim, 0);
  CU_ASSERT_EQUAL(sc->nelements, 1);
  double sv;
  memcpy(&sv, sc->data, sizeof sv);
  CU_ASSERT_EQUAL(sv, -0.125);
  CU_ASSERT_EQUAL(tpu_safetensors_find(st, "q")->nbytes, 2);
  CU_ASSERT_PTR_NULL(tpu_safetensors_find(st, "__metadata__"));
  CU_ASSERT_PTR_NULL(tpu_safetensors_find(st, "nope"));
  CU_ASSERT_STRING_EQUAL(tpu_safetensors_metadata(st, "format"), "pt");
  CU_ASSERT_PTR_NULL(tpu_safetensors_metadata(st, "other"));
  size_t len;
  const void *bytes = tpu_safetensors_bytes(st, &len);
  CU_ASSERT_EQUAL(len, b.len);
  CU_ASSERT_EQUAL(memcmp(bytes, b.buf, len), 0);
  tpu_safetensors_close(st);
  tpu_safetensors_close(NULL);

  /* The empty checkpoint is valid. */
  blob_t empty = blob("{}", 0);
  CU_ASSERT_EQUAL(tpu_safetensors_parse(empty.buf, empty.len, NULL, &st, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(tpu_safetensors_count(st), 0);
  CU_ASSERT_PTR_NULL(tpu_safetensors_find(st, "f"));
  tpu_safetensors_close(st);
  free(empty.buf);
  free(b.buf);
  rm_tmpdir(dir);
}

static void test_dtype_table(void) {
  CU_ASSERT_STRING_EQUAL(tpu_st_dtype_name(TPU_ST_BF16), "BF16");
  CU_ASSERT_EQUAL(tpu_st_dtype_bits(TPU_ST_F32), 32);
  CU_ASSERT_EQUAL(tpu_st_dtype_bits(TPU_ST_F4), 4);
  CU_ASSERT_PTR_NULL(tpu_st_dtype_name(TPU_ST_DTYPE_COUNT));
  CU_ASSERT_EQUAL(tpu_st_dtype_bits((tpu_st_dtype_t)-1), 0);
}

static void test_open_errors(void) {
  char err[256], *dir = make_tmpdir(), path[256];
  tpu_safetensors_t *st;
  snprintf(path, sizeof path, "%s/missing", dir);
  CU_ASSERT_EQUAL(tpu_safetensors_open(path, &st, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open: No such file or directory"));
  CU_ASSERT_EQUAL(tpu_safetensors_open(dir, &st, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a regular file"));
  CU_ASSERT_EQUAL(tpu_safetensors_open(NULL, &st, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_safetensors_parse(NULL, 4, NULL, &st, err, sizeof err), TPU_EINVAL);
  /* No error buffer, or a tiny one, is fine. */
  CU_ASSERT_EQUAL(tpu_safetensors_open(path, &st, NULL, 0), TPU_EINVAL);
  char tiny[4] = "abc";
  CU_ASSERT_EQUAL(tpu_safetensors_open(path, &st, tiny, 1), TPU_EINVAL);
  CU_ASSERT_EQUAL(tiny[0], '\0');
  rm_tmpdir(dir);
}

/* ---- digests ---- */

static void sha256_hex_of(const void *buf, size_t len, char hex[65]) {
  unsigned char md[32];
  unsigned int n = 0;
  CU_ASSERT_FATAL(EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL) == 1 && n == 32);
  for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
}

static void test_verified(void) {
  const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
  blob_t b = blob(h, 16);
  char *dir = make_tmpdir(), path[256], err[512], hex[65], upper[65], got[65];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  write_file(path, b.buf, b.len);
  sha256_hex_of(b.buf, b.len, hex);

  tpu_safetensors_t *st;
  CU_ASSERT_EQUAL_FATAL(tpu_safetensors_load(path, hex, NULL, &st, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(tpu_safetensors_sha256(st, got), TPU_OK);
  CU_ASSERT_STRING_EQUAL(got, hex);
  tpu_safetensors_close(st);
  for (int i = 0; i < 65; i++) upper[i] = (char)(hex[i] >= 'a' ? hex[i] - 32 : hex[i]);
  CU_ASSERT_EQUAL(tpu_safetensors_load(path, upper, NULL, &st, err, sizeof err), TPU_OK);
  tpu_safetensors_close(st);

  /* One flipped data byte: refused before parsing, both digests shown. */
  b.buf[b.len - 1] ^= 1;
  sha256_hex_of(b.buf, b.len, got);
  write_file(path, b.buf, b.len);
  CU_ASSERT_EQUAL(tpu_safetensors_load(path, hex, NULL, &st, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NULL(st);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "SHA-256 mismatch"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, hex));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, got));

  /* A file that is both corrupt and unparsable reports the digest, not the parse error. */
  write_file(path, "junk", 4);
  CU_ASSERT_EQUAL(tpu_safetensors_load(path, hex, NULL, &st, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "SHA-256 mismatch"));

  CU_ASSERT_EQUAL(tpu_safetensors_load(path, "abc", NULL, &st, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "64 hex digits"));
  hex[10] = 'g';
  CU_ASSERT_EQUAL(tpu_safetensors_load(path, hex, NULL, &st, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "64 hex digits"));
  free(b.buf);
  rm_tmpdir(dir);
}

/* ---- randomized: mutations of a valid file never crash, and every refusal says why ---- */

static void test_mutations(void) {
  const char *h = "{\"__metadata__\":{\"k\":\"v\"},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]}}";
  blob_t base = blob(h, 22);
  uint8_t *m = malloc(base.len + 16);
  size_t ok = 0, bad = 0;
  for (int iter = 0; iter < 3000; iter++) {
    size_t len = base.len;
    memcpy(m, base.buf, base.len);
    int edits = (int)tpu_test_rand_range(1, 4);
    for (int e = 0; e < edits; e++) {
      size_t at = (size_t)tpu_test_rand_range(0, (long)len - 1);
      switch (tpu_test_rand_range(0, 3)) {
      case 0: m[at] = (uint8_t)tpu_test_rand(); break;
      case 1: m[at] ^= (uint8_t)(1u << tpu_test_rand_range(0, 7)); break;
      case 2: m[at] = (uint8_t)"{}[]\",:0123456789-"[tpu_test_rand_range(0, 17)]; break;
      default: len = at + 1; break; /* truncate */
      }
    }
    char err[512] = "";
    tpu_safetensors_t *st = NULL;
    tpu_status_t rc = tpu_safetensors_parse(m, len, "m", &st, err, sizeof err);
    if (rc == TPU_OK) {
      ok++;
      /* Whatever was accepted is self-consistent: tensors tile the data exactly. */
      uint64_t at = 0;
      for (size_t i = 0; i < tpu_safetensors_count(st); i++) {
        const tpu_st_tensor_t *t = tpu_safetensors_tensor(st, i);
        TPU_ASSERT_SEED(t->begin == at);
        TPU_ASSERT_SEED((const uint8_t *)t->data + t->nbytes <= m + len);
        at = t->end;
      }
      tpu_safetensors_close(st);
    } else {
      bad++;
      TPU_ASSERT_SEED(st == NULL);
      TPU_ASSERT_SEED(strncmp(err, "m: ", 3) == 0 && strlen(err) > 10);
    }
  }
  CU_ASSERT(bad > 0);
  (void)ok;
  free(m);
  free(base.buf);
}

TPU_TEST_SUITE(safetensors,
               {"too_short", test_too_short},
               {"header_over_bound", test_header_over_bound},
               {"header_past_eof", test_header_past_eof},
               {"not_brace", test_not_brace},
               {"invalid_utf8", test_invalid_utf8},
               {"invalid_json", test_invalid_json},
               {"duplicate_names", test_duplicate_names},
               {"unknown_dtype", test_unknown_dtype},
               {"bad_shape", test_bad_shape},
               {"missing_fields", test_missing_fields},
               {"bad_metadata", test_bad_metadata},
               {"end_before_begin", test_end_before_begin},
               {"gap", test_gap},
               {"overlap", test_overlap},
               {"unsorted_entries_accepted", test_unsorted_entries_accepted},
               {"shape_overflow", test_shape_overflow},
               {"byte_count_mismatch", test_byte_count_mismatch},
               {"trailing_bytes", test_trailing_bytes},
               {"truncated", test_truncated},
               {"hostile_name_escaped", test_hostile_name_escaped},
               {"valid_file", test_valid_file},
               {"dtype_table", test_dtype_table},
               {"open_errors", test_open_errors},
               {"verified", test_verified},
               {"mutations", test_mutations})
