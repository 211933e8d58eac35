/*
 * test_audit.c - the audit writer: record format and canonical bytes, chain across restarts,
 * HMAC, torn-tail recovery, rotation (size, SIGHUP, external move), head file, group commit
 * under many producers, fsync=always ordering, fail-closed / fail-open on write errors (an
 * injected EIO and a real EFBIG from RLIMIT_FSIZE) and recovery, the file deleted, moved or
 * replaced while open (gap and rotate records, nothing told "written" that is not in the file
 * at the path), the exact count of records lost at close, and the Python cross-check.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "tpu_status.h"
#include "audit_verify.h"
#include "tpu_test.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static char dir[256], logp[300], headp[320], keyp[300];

static void fresh_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/tpu_audit_XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  snprintf(logp, sizeof logp, "%s/audit.log", dir);
  snprintf(headp, sizeof headp, "%s/audit.log.head", dir);
  snprintf(keyp, sizeof keyp, "%s/key", dir);
}

static void rm_dir(void) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[600];
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}

static char *slurp(const char *path, size_t *len) {
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  size_t got = fread(p, 1, (size_t)n, f);
  fclose(f);
  p[got] = '\0';
  if (len) *len = got;
  return p;
}

static void spit(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, len, f), len);
  fclose(f);
}

static tpu_audit_t *open_log(tpu_audit_config_t *c) {
  char err[512] = "";
  tpu_audit_t *a = NULL;
  int rc = tpu_audit_open(c, &a, err, sizeof err);
  if (rc != 0) fprintf(stderr, "\n  tpu_audit_open: %s\n", err);
  CU_ASSERT_EQUAL(rc, 0);
  return a;
}

static void cfg_default(tpu_audit_config_t *c) {
  tpu_audit_config_init(c);
  c->path = logp;
}

static void submit_n(tpu_audit_t *a, int n, const char *tag) {
  for (int i = 0; i < n; i++) {
    char id[64];
    snprintf(id, sizeof id, "%s-%d", tag, i);
    tpu_audit_record_t r = {.request_id = id, .client = "127.0.0.1:5555", .model = "digits",
                            .version = "1", .status = "OK", .queue_us = 10, .compute_us = 20,
                            .batch_id = (uint64_t)i, .bucket = 8};
    CU_ASSERT_EQUAL(tpu_audit_submit(a, &r, NULL, NULL), 0);
  }
}

static tpu_audit_fault_t verify1(const char *path, const uint8_t *key, size_t keylen,
                                 const char *head, tpu_audit_verify_result_t *r) {
  tpu_audit_verify_opts_t o = {.key = key, .keylen = keylen, .head_path = head};
  const char *files[] = {path};
  return tpu_audit_verify(files, 1, &o, r);
}

/* files[0..n) with --partial (they may start at a rotate or gap record). */
static tpu_audit_fault_t verify_partial(const char *const *files, size_t n, const char *head,
                                        tpu_audit_verify_result_t *r) {
  tpu_audit_verify_opts_t o = {.head_path = head, .partial = 1};
  return tpu_audit_verify(files, n, &o, r);
}

/* Lines of a file as parsed JSON objects (NULL entries for lines that do not parse). */
static json_t **load_lines(const char *path, size_t *n) {
  char *s = slurp(path, NULL);
  json_t **v = NULL;
  size_t cap = 0;
  *n = 0;
  if (!s) return NULL;
  for (char *p = s, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
    if (*n == cap) v = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
    v[(*n)++] = json_loadb(p, (size_t)(nl - p), 0, NULL);
  }
  free(s);
  return v;
}

static void free_lines(json_t **v, size_t n) {
  for (size_t i = 0; i < n; i++) json_decref(v[i]);
  free(v);
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits up to 5 s for cond. */
#define WAIT_FOR(cond)                                                                     \
  do {                                                                                     \
    for (int w__ = 0; w__ < 500 && !(cond); w__++) sleep_ms(10);                           \
  } while (0)

static const char *KEY = "0123456789abcdef-audit-test-key\n";

/* ---- format and chain ------------------------------------------------------------------ */

static void test_format_and_chain(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  tpu_audit_t *a = open_log(&c);
  char in[65], out[65];
  tpu_audit_sha256_hex("input", 5, in);
  tpu_audit_sha256_hex("output", 6, out);
  tpu_audit_record_t r = {.request_id = "req \"1\"\n", .client = "CN=teller,O=bank \xff\xfe",
                          .model = "digits", .version = "3", .input_sha256 = in,
                          .output_sha256 = out, .status = tpu_code_name(0),
                          .message = "tab\there \xe2\x82\xac", .queue_us = 120,
                          .compute_us = 830, .batch_id = 9001, .bucket = 8,
                          .checkpoint_sha256 = in, .reference = "passed: 10 rows",
                          .kernels = "avx512", .precision = "bf16"};
  CU_ASSERT_EQUAL(tpu_audit_submit(a, &r, NULL, NULL), 0);
  tpu_audit_record_t ev = {.kind = TPU_AUDIT_KIND_LOAD, .model = "digits", .version = "3",
                           .status = "OK", .message = "loaded"};
  CU_ASSERT_EQUAL(tpu_audit_submit(a, &ev, NULL, NULL), 0);
  submit_n(a, 48, "x");
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT_EQUAL(st.seq, 50);
  CU_ASSERT_EQUAL(st.synced_seq, 50);
  CU_ASSERT_EQUAL(st.records_written, 50);
  CU_ASSERT_EQUAL(st.failed, 0);
  tpu_audit_close(a);

  /* Field order, values and the canonical-bytes rule, recomputed here independently. */
  size_t len;
  char *s = slurp(logp, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT(strncmp(s, "{\"seq\":1,\"time\":\"", 17) == 0);
  char prev[65] = "0000000000000000000000000000000000000000000000000000000000000000";
  int lines = 0;
  for (char *p = s, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++) {
    char *h = memmem(p, (size_t)(nl - p), ",\"hash\":\"", 9);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    size_t cut = (size_t)(h - p);
    char *canon = malloc(cut + 1);
    memcpy(canon, p, cut);
    canon[cut] = '}';
    char hex[65];
    tpu_audit_sha256_hex(canon, cut + 1, hex);
    free(canon);
    CU_ASSERT(strncmp(h + 9, hex, 64) == 0);
    CU_ASSERT(strncmp(h + 9 + 64, "\"}", 2) == 0 && h + 9 + 66 == nl);
    char want_prev[80];
    snprintf(want_prev, sizeof want_prev, ",\"prev\":\"%s\"", prev);
    CU_ASSERT(memmem(p, cut, want_prev, strlen(want_prev)) == p + cut - strlen(want_prev));
    memcpy(prev, hex, 65);
  }
  CU_ASSERT_EQUAL(lines, 50);
  free(s);

  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, 50);
  CU_ASSERT_PTR_NOT_NULL_FATAL(v[0]);
  const char *order[] = {"seq",          "time",         "kind",      "request_id", "client",
                         "model",        "version",      "input_sha256", "output_sha256",
                         "status",       "message",      "queue_us",  "compute_us", "batch_id",
                         "bucket",       "checkpoint_sha256", "reference", "kernels",
                         "precision",    "payload",      "payload_sha256", "prev",
                         "hash"};
  CU_ASSERT_EQUAL(json_object_size(v[0]), 23);
  for (size_t i = 0; i < 23; i++) CU_ASSERT_PTR_NOT_NULL(json_object_get(v[0], order[i]));
  /* ... in that order, in the bytes (what the hash covers). */
  s = slurp(logp, &len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  const char *at = s;
  for (size_t i = 0; i < 23; i++) {
    char key[40];
    snprintf(key, sizeof key, "\"%s\":", order[i]);
    const char *f = strstr(at, key);
    CU_ASSERT(f != NULL && f < strchr(s, '\n'));
    if (f) at = f;
  }
  free(s);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "checkpoint_sha256")), in);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "reference")), "passed: 10 rows");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "kernels")), "avx512");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "precision")), "bf16");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "kind")), "request");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "request_id")), "req \"1\"\n");
  /* Invalid UTF-8 becomes U+FFFD; valid multi-byte text is kept. */
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "client")),
                         "CN=teller,O=bank \xef\xbf\xbd\xef\xbf\xbd");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "message")),
                         "tab\there \xe2\x82\xac");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "input_sha256")), in);
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(v[0], "compute_us")), 830);
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(v[0], "bucket")), 8);
  const char *t = json_string_value(json_object_get(v[0], "time"));
  CU_ASSERT(t && strlen(t) == 27 && t[10] == 'T' && t[19] == '.' && t[26] == 'Z');
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[1], "kind")), "load");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[1], "input_sha256")), "");
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[1], "kernels")), "");
  for (size_t i = 1; i < n; i++) /* time never goes backwards with seq */
    CU_ASSERT(strcmp(json_string_value(json_object_get(v[i - 1], "time")),
                     json_string_value(json_object_get(v[i], "time"))) <= 0);
  free_lines(v, n);

  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 50);
  CU_ASSERT_EQUAL(res.first_seq, 1);
  CU_ASSERT_EQUAL(res.last_seq, 50);
  CU_ASSERT_STRING_EQUAL(res.last_hash, prev);
  rm_dir();
}

static void test_continues_across_restarts(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  for (int run = 0; run < 3; run++) {
    tpu_audit_t *a = open_log(&c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    tpu_audit_stats_t st;
    tpu_audit_stats(a, &st);
    CU_ASSERT_EQUAL(st.seq, (uint64_t)run * 7);
    tpu_audit_record_t start = {.kind = TPU_AUDIT_KIND_START, .status = "OK"};
    tpu_audit_submit(a, &start, NULL, NULL);
    submit_n(a, 5, "r");
    tpu_audit_record_t stop = {.kind = TPU_AUDIT_KIND_STOP, .status = "OK"};
    tpu_audit_submit(a, &stop, NULL, NULL);
    tpu_audit_close(a);
  }
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 21);
  CU_ASSERT_EQUAL(res.last_seq, 21);
  /* The head file names the last record. */
  json_t *h = json_load_file(headp, 0, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(h, "seq")), 21);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(h, "hash")), res.last_hash);
  json_decref(h);
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, headp, &res), TPU_AUDIT_VERIFY_OK);
  rm_dir();
}

static void test_hmac_key(void) {
  fresh_dir();
  spit(keyp, KEY, strlen(KEY));
  tpu_audit_config_t c;
  cfg_default(&c);
  c.key_path = keyp;
  tpu_audit_t *a = open_log(&c);
  submit_n(a, 20, "k");
  tpu_audit_close(a);

  uint8_t key[64];
  char err[256];
  int kl = tpu_audit_load_key(keyp, key, sizeof key, err, sizeof err);
  CU_ASSERT_EQUAL(kl, (int)strlen(KEY) - 1); /* the trailing newline is not part of it */
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, key, (size_t)kl, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 20);
  /* No key, or a wrong one: the first record already fails, and is named. */
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_FAULT_CHANGED);
  CU_ASSERT_EQUAL(res.line, 1);
  CU_ASSERT_EQUAL(res.seq, 1);
  CU_ASSERT(strstr(res.what, "pass --key") != NULL);
  key[3] ^= 1;
  CU_ASSERT_EQUAL(verify1(logp, key, (size_t)kl, NULL, &res), TPU_AUDIT_FAULT_CHANGED);
  CU_ASSERT(strstr(res.what, "key is wrong") != NULL);

  /* The writer refuses to continue the chain with another key or without one. */
  char wrong[300];
  snprintf(wrong, sizeof wrong, "%s/wrongkey", dir);
  spit(wrong, "another-key-of-enough-length", 28);
  c.key_path = wrong;
  tpu_audit_t *b = NULL;
  CU_ASSERT_EQUAL(tpu_audit_open(&c, &b, err, sizeof err), -1);
  CU_ASSERT(strstr(err, "does not verify") != NULL);
  c.key_path = NULL;
  CU_ASSERT_EQUAL(tpu_audit_open(&c, &b, err, sizeof err), -1);
  CU_ASSERT_PTR_NULL(b);
  rm_dir();
}

static void test_bad_arguments(void) {
  fresh_dir();
  tpu_audit_config_t c;
  tpu_audit_config_init(&c);
  tpu_audit_t *a = (tpu_audit_t *)1;
  char err[512];
  CU_ASSERT_EQUAL(tpu_audit_open(&c, &a, err, sizeof err), -1); /* no path */
  CU_ASSERT_PTR_NULL(a);
  CU_ASSERT(strstr(err, "no path") != NULL);
  c.path = "/nonexistent-dir-tpu/audit.log";
  CU_ASSERT_EQUAL(tpu_audit_open(&c, &a, err, sizeof err), -1);
  CU_ASSERT(strstr(err, "/nonexistent-dir-tpu/audit.log") != NULL);
  c.path = logp;
  spit(keyp, "short\n", 6);
  c.key_path = keyp;
  CU_ASSERT_EQUAL(tpu_audit_open(&c, &a, err, sizeof err), -1);
  CU_ASSERT(strstr(err, "at least 16") != NULL);
  c.key_path = "/nonexistent-key";
  CU_ASSERT_EQUAL(tpu_audit_open(&c, &a, err, sizeof err), -1);
  /* tpu_audit_parse_fsync is util's tpu_fsync_parse (every value: test_config.c). */
  tpu_audit_fsync_t fs;
  CU_ASSERT_EQUAL(tpu_audit_parse_fsync("never", &fs), 0);
  CU_ASSERT_EQUAL(fs, TPU_AUDIT_FSYNC_NEVER);
  CU_ASSERT_EQUAL(tpu_audit_parse_fsync("sometimes", &fs), -1);
  CU_ASSERT_STRING_EQUAL(tpu_code_name(14), "UNAVAILABLE");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(99), "UNKNOWN");
  tpu_audit_close(NULL);
  rm_dir();
}

static void test_digest(void) {
  char hex[65], hex2[65];
  tpu_audit_sha256_hex("abc", 3, hex);
  CU_ASSERT_STRING_EQUAL(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  tpu_audit_sha256_hex("", 0, hex);
  CU_ASSERT_STRING_EQUAL(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  /* Incremental over random splits equals one-shot. */
  unsigned char data[4096];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)tpu_test_rand();
  tpu_audit_sha256_hex(data, sizeof data, hex);
  tpu_audit_sha256_t d;
  CU_ASSERT_EQUAL_FATAL(tpu_audit_sha256_init(&d), 0);
  for (size_t off = 0; off < sizeof data;) {
    size_t k = (size_t)tpu_test_rand_range(0, 700);
    if (k > sizeof data - off) k = sizeof data - off;
    tpu_audit_sha256_update(&d, data + off, k);
    off += k;
  }
  tpu_audit_sha256_final(&d, hex2);
  TPU_ASSERT_SEED(strcmp(hex, hex2) == 0);
}

/* ---- crash recovery --------------------------------------------------------------------- */

static void test_torn_tail_recovered(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  tpu_audit_t *a = open_log(&c);
  submit_n(a, 10, "t");
  tpu_audit_close(a);
  /* A crash mid-write leaves a partial line. */
  size_t len;
  char *s = slurp(logp, &len);
  const char torn[] = "{\"seq\":11,\"time\":\"2024-01-0";
  FILE *f = fopen(logp, "ab");
  fputs(torn, f);
  fclose(f);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_FAULT_TORN);
  CU_ASSERT_EQUAL(res.line, 11);
  CU_ASSERT_EQUAL(res.seq, 11);
  CU_ASSERT_EQUAL(res.records, 10);

  /* Restart: the torn bytes stay, a "recovered" record vouches for them, the chain goes on. */
  a = open_log(&c);
  submit_n(a, 5, "after");
  tpu_audit_close(a);
  size_t len2;
  char *s2 = slurp(logp, &len2);
  CU_ASSERT(len2 > len + sizeof torn);
  CU_ASSERT(memcmp(s2, s, len) == 0);                                /* nothing before changed */
  CU_ASSERT(memcmp(s2 + len, torn, sizeof torn - 1) == 0);           /* the evidence is kept */
  CU_ASSERT(s2[len + sizeof torn - 1] == '\n');
  CU_ASSERT(strstr(s2 + len, "\"kind\":\"recovered\"") != NULL);
  CU_ASSERT(strstr(s2 + len, "torn tail: 27 bytes, sha256 ") != NULL);
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 16); /* 10 + recovered + 5 */
  CU_ASSERT_EQUAL(res.recovered, 1);
  CU_ASSERT_EQUAL(res.last_seq, 16);
  /* The vouched-for bytes cannot be changed afterwards. */
  s2[len + 5] ^= 1;
  spit(logp, s2, len2);
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_FAULT_CHANGED);
  CU_ASSERT_EQUAL(res.line, 11);
  free(s);
  free(s2);
  rm_dir();
}

static void test_torn_only_file_and_empty(void) {
  fresh_dir();
  spit(logp, "{\"se", 4); /* crashed before the first record completed */
  tpu_audit_config_t c;
  cfg_default(&c);
  tpu_audit_t *a = open_log(&c);
  submit_n(a, 2, "x");
  tpu_audit_close(a);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 3);
  CU_ASSERT_EQUAL(res.recovered, 1);
  CU_ASSERT_EQUAL(res.first_seq, 1);
  /* An empty log verifies as zero records. */
  spit(logp, "", 0);
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 0);
  rm_dir();
}

static void test_rollback_noticed_at_open(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  tpu_audit_t *a = open_log(&c);
  submit_n(a, 10, "r");
  tpu_audit_close(a); /* head: seq 10 */
  size_t len;
  char *s = slurp(logp, &len);
  char *p = s;
  for (int i = 0; i < 6; i++) p = strchr(p, '\n') + 1;
  spit(logp, s, (size_t)(p - s)); /* keep 6 records */
  free(s);
  a = open_log(&c);
  tpu_audit_close(a);
  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, 7);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[6], "kind")), "rollback");
  CU_ASSERT(strstr(json_string_value(json_object_get(v[6], "message")), "says seq 10") != NULL);
  free_lines(v, n);
  rm_dir();
}

/* ---- rotation --------------------------------------------------------------------------- */

static int list_rotated(char names[][600], int max) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)) && n < max)
    if (strncmp(e->d_name, "audit.log.", 10) == 0 && e->d_name[10] >= '0' &&
        e->d_name[10] <= '9')
      snprintf(names[n++], 600, "%s/%s", dir, e->d_name);
  closedir(d);
  qsort(names, (size_t)n, 600, (int (*)(const void *, const void *))strcmp);
  return n;
}

static void test_rotation_by_size(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.max_bytes = 8192;
  tpu_audit_t *a = open_log(&c);
  for (int i = 0; i < 20; i++) {
    submit_n(a, 10, "rot");
    tpu_audit_flush(a, 5000);
  }
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  tpu_audit_close(a);
  CU_ASSERT(st.rotations >= 5);
  char names[64][600];
  int nr = list_rotated(names, 63);
  /* The stats were read before close; if a flush above ran out of time on a loaded machine, the
   * batch close writes may rotate once more. Every rotation on disk is counted below. */
  CU_ASSERT((uint64_t)nr == st.rotations || (uint64_t)nr == st.rotations + 1);
  snprintf(names[nr], 600, "%s", logp);
  const char *files[64];
  for (int i = 0; i <= nr; i++) files[i] = names[i];
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(tpu_audit_verify(files, (size_t)nr + 1, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 200 + (uint64_t)nr); /* one rotate record per rotation */
  CU_ASSERT_EQUAL(res.first_seq, 1);
  /* Each later file starts with a rotate record naming the file before it, and may be
   * verified on its own with --partial (without: seq 1.. are not given, a fault). */
  for (int i = 1; i <= nr; i++) {
    size_t n;
    json_t **v = load_lines(files[i], &n);
    CU_ASSERT_FATAL(n > 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "kind")), "rotate");
    const char *base = strrchr(files[i - 1], '/') + 1;
    CU_ASSERT(strstr(json_string_value(json_object_get(v[0], "message")), base) != NULL);
    free_lines(v, n);
    CU_ASSERT_EQUAL(verify1(files[i], NULL, 0, NULL, &res), TPU_AUDIT_FAULT_MISSING);
    CU_ASSERT(strstr(res.what, "--partial") != NULL);
    CU_ASSERT_EQUAL(verify_partial(&files[i], 1, NULL, &res), TPU_AUDIT_VERIFY_OK);
    CU_ASSERT(res.first_seq > 1);
  }
  /* Files out of order or one left out: caught at the first record of the next file. */
  if (nr >= 2) {
    const char *swapped[] = {files[0], files[2], files[1]};
    CU_ASSERT_EQUAL(tpu_audit_verify(swapped, 3, NULL, &res), TPU_AUDIT_FAULT_MISSING);
    const char *gap[] = {files[0], files[2]};
    CU_ASSERT_EQUAL(tpu_audit_verify(gap, 2, NULL, &res), TPU_AUDIT_FAULT_MISSING);
    CU_ASSERT_STRING_EQUAL(res.file, files[2]);
    CU_ASSERT_EQUAL(res.line, 1);
    const char *back[] = {files[1], files[0]};
    CU_ASSERT_EQUAL(tpu_audit_verify(back, 2, NULL, &res), TPU_AUDIT_FAULT_MISSING);
    CU_ASSERT_EQUAL(verify_partial(back, 2, NULL, &res), TPU_AUDIT_FAULT_REORDERED);
  }
  rm_dir();
}

static void test_reopen_sighup_and_external_move(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  tpu_audit_t *a = open_log(&c);
  submit_n(a, 5, "a");
  tpu_audit_flush(a, 5000);
  tpu_audit_reopen(a); /* SIGHUP: we rename it ourselves */
  tpu_audit_stats_t st;
  WAIT_FOR((tpu_audit_stats(a, &st), st.rotations == 1));
  CU_ASSERT_EQUAL(st.rotations, 1);
  submit_n(a, 5, "b");
  tpu_audit_flush(a, 5000);
  /* logrotate-style: someone else moved the file, then sends SIGHUP. */
  char moved[400];
  snprintf(moved, sizeof moved, "%s/audit.log.moved", dir);
  CU_ASSERT_EQUAL(rename(logp, moved), 0);
  tpu_audit_reopen(a);
  WAIT_FOR((tpu_audit_stats(a, &st), st.rotations == 2));
  CU_ASSERT_EQUAL(st.rotations, 2);
  submit_n(a, 5, "c");
  tpu_audit_close(a);
  char names[8][600];
  int nr = list_rotated(names, 8);
  CU_ASSERT_EQUAL_FATAL(nr, 1);
  char expect[400];
  snprintf(expect, sizeof expect, "%s.%020d", logp, 5);
  CU_ASSERT_STRING_EQUAL(names[0], expect);
  const char *files[] = {names[0], moved, logp};
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(tpu_audit_verify(files, 3, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 17);
  const char *cur[] = {logp};
  CU_ASSERT_EQUAL(verify_partial(cur, 1, headp, &res), TPU_AUDIT_VERIFY_OK);
  rm_dir();
}

static void test_head_file_periodic(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.head_interval_ms = 20;
  c.fsync = TPU_AUDIT_FSYNC_NEVER;
  snprintf(headp, sizeof headp, "%s/elsewhere.head", dir);
  c.head_path = headp;
  tpu_audit_t *a = open_log(&c);
  submit_n(a, 7, "h");
  json_t *h = NULL;
  for (int i = 0; i < 500; i++) { /* appears without close or flush */
    json_decref(h);
    h = json_load_file(headp, 0, NULL);
    if (h && json_integer_value(json_object_get(h, "seq")) == 7) break;
    sleep_ms(10);
  }
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(h, "seq")), 7);
  json_decref(h);
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT(st.fsyncs >= 1); /* the head only names synced records, even with `never` */
  CU_ASSERT_EQUAL(st.synced_seq, 7);
  tpu_audit_close(a);
  char tmp[400];
  snprintf(tmp, sizeof tmp, "%s.tmp", headp);
  CU_ASSERT_EQUAL(access(tmp, F_OK), -1);
  rm_dir();
}

/* ---- concurrency ------------------------------------------------------------------------ */

#define PRODUCERS 8
#define PER_PRODUCER 3000

typedef struct {
  tpu_audit_t *a;
  int id;
} producer_t;

static atomic_uint_fast64_t cb_count, cb_bad_order, cb_bad_status;

static void count_cb(void *arg, uint64_t seq, int status) {
  tpu_audit_t *a = arg;
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  if (st.synced_seq < seq) atomic_fetch_add(&cb_bad_order, 1); /* fired before fdatasync */
  if (status != TPU_AUDIT_WRITTEN || seq == 0) atomic_fetch_add(&cb_bad_status, 1);
  atomic_fetch_add(&cb_count, 1);
}

static void *producer(void *arg) {
  producer_t *p = arg;
  char id[64], msg[300];
  for (int i = 0; i < PER_PRODUCER; i++) {
    snprintf(id, sizeof id, "p%d-%d", p->id, i);
    /* Long enough that a torn or interleaved write would show. */
    memset(msg, 'a' + p->id, 200);
    msg[200] = '\0';
    tpu_audit_record_t r = {.request_id = id, .client = "peer", .model = "m", .version = "1",
                            .status = "OK", .message = msg, .batch_id = (uint64_t)i};
    while (tpu_audit_submit(p->a, &r, count_cb, p->a) != 0) sleep_ms(1);
  }
  return NULL;
}

static void run_producers(tpu_audit_fsync_t policy) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.fsync = policy;
  atomic_store(&cb_count, 0);
  atomic_store(&cb_bad_order, 0);
  atomic_store(&cb_bad_status, 0);
  tpu_audit_t *a = open_log(&c);
  pthread_t th[PRODUCERS];
  producer_t ps[PRODUCERS];
  for (int i = 0; i < PRODUCERS; i++) {
    ps[i] = (producer_t){a, i};
    pthread_create(&th[i], NULL, producer, &ps[i]);
  }
  for (int i = 0; i < PRODUCERS; i++) pthread_join(th[i], NULL);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 20000), 0);
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  tpu_audit_close(a);
  uint64_t total = PRODUCERS * PER_PRODUCER;
  CU_ASSERT_EQUAL(atomic_load(&cb_count), total);
  CU_ASSERT_EQUAL(atomic_load(&cb_bad_status), 0);
  if (policy == TPU_AUDIT_FSYNC_ALWAYS) {
    CU_ASSERT_EQUAL(atomic_load(&cb_bad_order), 0);
    CU_ASSERT(st.fsyncs >= 1 && st.fsyncs <= total);
  }
  CU_ASSERT_EQUAL(st.records_written, total);
  CU_ASSERT_EQUAL(st.records_lost, 0);

  /* Every record is there, whole; each producer's records in its own order. */
  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, total);
  int next[PRODUCERS] = {0};
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    int pid, k;
    const char *id = v[i] ? json_string_value(json_object_get(v[i], "request_id")) : NULL;
    const char *msg = v[i] ? json_string_value(json_object_get(v[i], "message")) : NULL;
    if (!id || sscanf(id, "p%d-%d", &pid, &k) != 2 || pid < 0 || pid >= PRODUCERS ||
        k != next[pid] || !msg || strlen(msg) != 200 || msg[0] != 'a' + pid ||
        msg[199] != 'a' + pid || json_integer_value(json_object_get(v[i], "seq")) != (json_int_t)i + 1) {
      bad++;
      continue;
    }
    next[pid]++;
  }
  CU_ASSERT_EQUAL(bad, 0);
  free_lines(v, n);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, total);
  rm_dir();
}

static void test_group_commit_many_producers(void) { run_producers(TPU_AUDIT_FSYNC_INTERVAL); }

static void test_always_callbacks_after_fdatasync(void) { run_producers(TPU_AUDIT_FSYNC_ALWAYS); }

/* ---- failures --------------------------------------------------------------------------- */

static atomic_int fired_written, fired_pending, fired_lost;

static void fate_cb(void *arg, uint64_t seq, int status) {
  if (status == TPU_AUDIT_WRITTEN) atomic_fetch_add(&fired_written, 1);
  else if (status == TPU_AUDIT_PENDING) atomic_fetch_add(&fired_pending, 1);
  else if (status == TPU_AUDIT_LOST) atomic_fetch_add(&fired_lost, 1);
}

static void reset_fates(void) {
  atomic_store(&fired_written, 0);
  atomic_store(&fired_pending, 0);
  atomic_store(&fired_lost, 0);
}

static void submit_cb(tpu_audit_t *a, int n) {
  for (int i = 0; i < n; i++) {
    tpu_audit_record_t r = {.request_id = "f", .status = "OK"};
    CU_ASSERT_EQUAL(tpu_audit_submit(a, &r, fate_cb, NULL), 0);
  }
}

/* Once the failure is gone: the log is healthy again and holds all n records, none lost, and
 * verifies whole (no attempt of a failed batch left in it). Closes the log. */
static void expect_recovered(tpu_audit_t *a, int n) {
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 1);
  CU_ASSERT_EQUAL(tpu_audit_admit(a), 1);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), n);
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT_EQUAL(st.records_lost, 0);
  CU_ASSERT_EQUAL(st.seq, (uint64_t)n);
  tpu_audit_close(a);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, headp, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, (uint64_t)n);
}

static void test_fail_closed_and_recover(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.fsync = TPU_AUDIT_FSYNC_ALWAYS;
  c.retry_ms = 20;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 5);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 5);
  CU_ASSERT(tpu_audit_healthy(a) && tpu_audit_admit(a));

  tpu_audit__inject_error(a, EIO);
  submit_cb(a, 3);
  WAIT_FOR(!tpu_audit_healthy(a));
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 0);
  CU_ASSERT_EQUAL(tpu_audit_admit(a), 0); /* the server answers UNAVAILABLE now */
  submit_cb(a, 2);                        /* queued meanwhile */
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 100), -1);
  sleep_ms(100); /* several retries fail */
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT(st.write_errors >= 2);
  CU_ASSERT_EQUAL(st.failed, 1);
  CU_ASSERT_EQUAL(st.seq, 5);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 5); /* nobody was told "written" */

  tpu_audit__inject_error(a, 0); /* the disk has room again */
  expect_recovered(a, 10);       /* the half-written attempts were cut off */
  rm_dir();
}

static void test_fail_closed_real_efbig(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.retry_ms = 20;
  c.head_path = "";
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 4);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  struct stat sb;
  CU_ASSERT_EQUAL_FATAL(stat(logp, &sb), 0);
  /* A file-size limit a little above the current size: writes fail with EFBIG. */
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
  lim = old;
  lim.rlim_cur = (rlim_t)sb.st_size + 300;
  CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_FSIZE, &lim), 0);
  submit_cb(a, 6);
  WAIT_FOR(!tpu_audit_healthy(a));
  int failed = !tpu_audit_healthy(a);
  CU_ASSERT(failed);
  CU_ASSERT_EQUAL(tpu_audit_admit(a), 0);
  sleep_ms(60);
  CU_ASSERT_EQUAL(stat(logp, &sb), 0);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, oldsig);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 1);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 10);
  tpu_audit_close(a);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 10);
  rm_dir();
}

/* A batch that ran out of memory while being built is never written (a record cut short would
 * break the chain): the log fails closed, retries, and writes every record whole once memory is
 * back, none lost. */
static void test_fail_closed_out_of_memory(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.retry_ms = 20;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 3);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  struct stat before, after;
  CU_ASSERT_EQUAL_FATAL(stat(logp, &before), 0);

  tpu_audit__inject_oom(a, 1);
  submit_cb(a, 4);
  WAIT_FOR(!tpu_audit_healthy(a));
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 0);
  CU_ASSERT_EQUAL(tpu_audit_admit(a), 0);
  sleep_ms(100); /* several retries, each out of memory again */
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT(st.write_errors >= 2);
  CU_ASSERT_EQUAL(st.seq, 3);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 3);
  CU_ASSERT_EQUAL_FATAL(stat(logp, &after), 0);
  CU_ASSERT_EQUAL(after.st_size, before.st_size); /* not a byte of the cut records */

  tpu_audit__inject_oom(a, 0);
  expect_recovered(a, 7);
  rm_dir();
}

static void test_fail_open_counts_lost(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.fail_open = 1;
  c.max_pending = 8;
  c.retry_ms = 20;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 2);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  tpu_audit__inject_error(a, ENOSPC);
  submit_cb(a, 1);
  WAIT_FOR(!tpu_audit_healthy(a));
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 0);
  CU_ASSERT_EQUAL(tpu_audit_admit(a), 1); /* serves on */
  submit_cb(a, 7);                        /* fills the bound of 8 */
  WAIT_FOR(atomic_load(&fired_pending) == 8);
  CU_ASSERT_EQUAL(atomic_load(&fired_pending), 8); /* nobody waits for the disk */
  int refused = 0;
  for (int i = 0; i < 5; i++) {
    tpu_audit_record_t r = {.request_id = "over"};
    if (tpu_audit_submit(a, &r, fate_cb, NULL) == TPU_AUDIT_LOST) refused++;
  }
  CU_ASSERT_EQUAL(refused, 5);
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT_EQUAL(st.records_lost, 5);
  tpu_audit__inject_error(a, 0);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 1);
  tpu_audit_close(a);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 2); /* the others were told PENDING, once */
  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, 11); /* 2 + the lost record + 8 kept */
  int lost_rec = 0;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(json_string_value(json_object_get(v[i], "kind")), "lost")) {
      lost_rec++;
      CU_ASSERT(strncmp(json_string_value(json_object_get(v[i], "message")), "5 records", 9) == 0);
    }
  CU_ASSERT_EQUAL(lost_rec, 1);
  free_lines(v, n);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  rm_dir();
}

static void test_close_while_failing(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.fsync = TPU_AUDIT_FSYNC_ALWAYS;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 3);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  tpu_audit__inject_error(a, EIO);
  submit_cb(a, 4);
  WAIT_FOR(!tpu_audit_healthy(a));
  tpu_audit_close(a);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 3);
  CU_ASSERT_EQUAL(atomic_load(&fired_lost), 4);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 3);
  /* And it continues from seq 3 next time. */
  a = open_log(&c);
  submit_n(a, 1, "next");
  tpu_audit_close(a);
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.last_seq, 4);
  rm_dir();
}

/* ---- the file deleted or moved while open (issue 15 item 6) ------------------------------ */

static const char *kind_of(json_t *o) { return json_string_value(json_object_get(o, "kind")); }
static const char *msg_of(json_t *o) { return json_string_value(json_object_get(o, "message")); }

static atomic_int warned;
static char warned_text[1024];
static void warn_cb(void *arg, const char *file, uint64_t line, uint64_t seq, const char *what) {
  (void)arg, (void)file, (void)line, (void)seq;
  if (atomic_fetch_add(&warned, 1) == 0) snprintf(warned_text, sizeof warned_text, "%s", what);
}

/* rm of the live log: the records of the group written into the unlinked file are written
 * again into a new file at the path, which starts with a gap record for the seqs that went
 * with the old one; nobody is told "written" for a record that is only in the unlinked file. */
static void deleted_while_open(tpu_audit_fsync_t policy) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.fsync = policy;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 5);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL_FATAL(unlink(logp), 0);
  submit_cb(a, 3); /* the first group after the rm goes into the unlinked file first */
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 8);
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT_EQUAL(st.files_deleted, 1);
  CU_ASSERT_EQUAL(st.records_lost, 0);
  CU_ASSERT_EQUAL(st.failed, 0);
  submit_cb(a, 2);
  tpu_audit_close(a);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 10);
  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, 6); /* gap (seq 6) + 3 + 2 */
  CU_ASSERT_STRING_EQUAL(kind_of(v[0]), "gap");
  CU_ASSERT_EQUAL(json_integer_value(json_object_get(v[0], "seq")), 6);
  CU_ASSERT(strncmp(msg_of(v[0]), "seq 1..5 are not in the log: ", 29) == 0);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v[0], "status")), "DATA_LOSS");
  for (size_t i = 1; i < n; i++) {
    CU_ASSERT_STRING_EQUAL(kind_of(v[i]), "request");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(v[i], "seq")), (json_int_t)i + 6);
  }
  free_lines(v, n);
  /* It verifies, saying what is missing. */
  atomic_store(&warned, 0);
  tpu_audit_verify_opts_t o = {.warn = warn_cb};
  const char *files[] = {logp};
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(tpu_audit_verify(files, 1, &o, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 6);
  CU_ASSERT_EQUAL(res.first_seq, 1);
  CU_ASSERT_EQUAL(res.last_seq, 11);
  CU_ASSERT_EQUAL(res.missing, 5);
  CU_ASSERT_EQUAL(res.gaps, 1);
  CU_ASSERT_EQUAL(atomic_load(&warned), 1);
  CU_ASSERT(strstr(warned_text, "seq 1..5 are not in the log") != NULL);
  /* The head file (updated at close) names the new file's last record. */
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, headp, &res), TPU_AUDIT_VERIFY_OK);
  rm_dir();
}

static void test_deleted_while_open(void) { deleted_while_open(TPU_AUDIT_FSYNC_INTERVAL); }
static void test_deleted_while_open_always(void) { deleted_while_open(TPU_AUDIT_FSYNC_ALWAYS); }

/* rm, then SIGHUP before any new record: the gap record starts the new file; a later
 * SIGHUP rotates as usual, and the whole set verifies. */
static void test_deleted_then_sighup(void) {
  fresh_dir();
  tpu_audit_config_t c;
  cfg_default(&c);
  tpu_audit_t *a = open_log(&c);
  submit_n(a, 4, "a");
  tpu_audit_flush(a, 5000);
  tpu_audit_reopen(a); /* rotated normally: audit.log.<4>, new file from seq 5 */
  tpu_audit_stats_t st;
  WAIT_FOR((tpu_audit_stats(a, &st), st.rotations == 1));
  submit_n(a, 3, "b"); /* seq 6..8 */
  tpu_audit_flush(a, 5000);
  CU_ASSERT_EQUAL_FATAL(unlink(logp), 0);
  tpu_audit_reopen(a);
  WAIT_FOR(access(logp, F_OK) == 0);
  CU_ASSERT_EQUAL(access(logp, F_OK), 0);
  submit_n(a, 2, "c");
  tpu_audit_flush(a, 5000);
  tpu_audit_stats(a, &st);
  CU_ASSERT_EQUAL(st.files_deleted, 1);
  CU_ASSERT_EQUAL(st.rotations, 1);
  tpu_audit_close(a);
  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, 3);
  CU_ASSERT_STRING_EQUAL(kind_of(v[0]), "gap");
  CU_ASSERT(strncmp(msg_of(v[0]), "seq 5..8 are not in the log: ", 29) == 0);
  free_lines(v, n);
  char names[8][600];
  int nr = list_rotated(names, 8);
  CU_ASSERT_EQUAL_FATAL(nr, 1);
  const char *files[] = {names[0], logp};
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(tpu_audit_verify(files, 2, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.missing, 4);
  CU_ASSERT_EQUAL(res.records + res.missing, 11);
  /* The current file alone starts at seq 9 with 5..8 vouched: 1..4 are not given. */
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_FAULT_MISSING);
  CU_ASSERT_EQUAL(verify_partial(&files[1], 1, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.first_seq, 5);
  rm_dir();
}

/* mv of the live log: what was committed stays in the moved file, the group written after the
 * move is taken back out of it and goes to a new file that starts with a rotate record naming
 * the moved one; the SIGHUP that logrotate sends next renames nothing. */
static void test_moved_while_open(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.fsync = TPU_AUDIT_FSYNC_ALWAYS;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 5);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  char moved[400];
  snprintf(moved, sizeof moved, "%s/moved.log", dir);
  CU_ASSERT_EQUAL_FATAL(rename(logp, moved), 0);
  submit_cb(a, 3);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 8);
  tpu_audit_reopen(a); /* logrotate's postrotate */
  submit_cb(a, 1);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  tpu_audit_stats_t st;
  tpu_audit_stats(a, &st);
  CU_ASSERT_EQUAL(st.rotations, 1);
  CU_ASSERT_EQUAL(st.files_deleted, 0);
  tpu_audit_close(a);
  char names[8][600];
  CU_ASSERT_EQUAL(list_rotated(names, 8), 0); /* the SIGHUP renamed nothing */
  size_t n;
  json_t **v = load_lines(moved, &n);
  CU_ASSERT_EQUAL(n, 5);
  free_lines(v, n);
  v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, 5); /* rotate + 3 + 1 */
  CU_ASSERT_STRING_EQUAL(kind_of(v[0]), "rotate");
  CU_ASSERT(strstr(msg_of(v[0]), moved) != NULL);
  free_lines(v, n);
  const char *files[] = {moved, logp};
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(tpu_audit_verify(files, 2, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 10);
  CU_ASSERT_EQUAL(res.missing, 0);
  rm_dir();
}

/* The path names a file we did not write: left alone, the log is failed (fail-closed: nobody
 * is told "written", admit is 0) until it is moved away; then the held records go on. */
static void test_replaced_by_foreign_file(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.retry_ms = 20;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 2);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL_FATAL(unlink(logp), 0);
  spit(logp, "not ours\n", 9);
  submit_cb(a, 3);
  WAIT_FOR(!tpu_audit_healthy(a));
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 0);
  CU_ASSERT_EQUAL(tpu_audit_admit(a), 0);
  sleep_ms(60); /* retries meet the same file */
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 2);
  size_t len;
  char *s = slurp(logp, &len);
  CU_ASSERT(len == 9 && memcmp(s, "not ours\n", 9) == 0); /* untouched */
  free(s);
  char aside[400];
  snprintf(aside, sizeof aside, "%s/foreign", dir);
  CU_ASSERT_EQUAL(rename(logp, aside), 0);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(tpu_audit_healthy(a), 1);
  CU_ASSERT_EQUAL(atomic_load(&fired_written), 5);
  tpu_audit_close(a);
  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_EQUAL_FATAL(n, 4);
  CU_ASSERT_STRING_EQUAL(kind_of(v[0]), "gap");
  CU_ASSERT(strncmp(msg_of(v[0]), "seq 1..2 are not in the log: ", 29) == 0);
  free_lines(v, n);
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.missing, 2);
  rm_dir();
}

/* ---- the count of lost records at close (issue 15 item 7) -------------------------------- */

static void test_close_counts_dropped(void) {
  fresh_dir();
  reset_fates();
  tpu_audit_config_t c;
  cfg_default(&c);
  c.fail_open = 1;
  c.retry_ms = 20;
  tpu_audit_t *a = open_log(&c);
  submit_cb(a, 2);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  tpu_audit__inject_error(a, ENOSPC);
  submit_cb(a, 6);
  WAIT_FOR(atomic_load(&fired_pending) == 6); /* answered (fail-open), not written */
  tpu_audit_record_t stop = {.kind = TPU_AUDIT_KIND_STOP, .status = "OK", .message = "bye"};
  CU_ASSERT_EQUAL(tpu_audit_submit(a, &stop, NULL, NULL), 0);
  tpu_audit_stats_t before, after;
  tpu_audit_stats(a, &before);
  CU_ASSERT_EQUAL(before.records_lost, 0); /* what the closing line used to print */
  CU_ASSERT_EQUAL(before.queued, 7);
  tpu_audit_shutdown(a, &after);
  CU_ASSERT_EQUAL(after.records_lost, 7); /* 6 requests and the stop record */
  CU_ASSERT_EQUAL(after.records_written, 2);
  CU_ASSERT_EQUAL(after.queued, 0);
  CU_ASSERT_EQUAL(atomic_load(&fired_lost), 0); /* each was told PENDING already, once */
  tpu_audit_verify_result_t res;
  CU_ASSERT_EQUAL(verify1(logp, NULL, 0, NULL, &res), TPU_AUDIT_VERIFY_OK);
  CU_ASSERT_EQUAL(res.records, 2);

  /* When the stop record can be written, it says how many were lost since start. */
  c.max_pending = 3;
  a = open_log(&c);
  tpu_audit__inject_error(a, ENOSPC);
  submit_cb(a, 1);
  WAIT_FOR(!tpu_audit_healthy(a));
  submit_cb(a, 2); /* fills the bound */
  int refused = 0;
  for (int i = 0; i < 4; i++) {
    tpu_audit_record_t r = {.request_id = "over"};
    refused += tpu_audit_submit(a, &r, NULL, NULL) == TPU_AUDIT_LOST;
  }
  CU_ASSERT_EQUAL(refused, 4);
  tpu_audit__inject_error(a, 0);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  CU_ASSERT_EQUAL(tpu_audit_submit(a, &stop, NULL, NULL), 0);
  tpu_audit_shutdown(a, &after);
  CU_ASSERT_EQUAL(after.records_lost, 4);
  size_t n;
  json_t **v = load_lines(logp, &n);
  CU_ASSERT_FATAL(n > 0);
  CU_ASSERT_STRING_EQUAL(kind_of(v[n - 1]), "stop");
  CU_ASSERT_STRING_EQUAL(msg_of(v[n - 1]), "bye; 4 audit records lost since start");
  free_lines(v, n);
  tpu_audit_shutdown(NULL, &after); /* accepts NULL, zeroes the counters */
  CU_ASSERT_EQUAL(after.records_lost, 0);
  rm_dir();
}

/* ---- the independent Python verifier ---------------------------------------------------- */

static int run_py(const char *args) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/integration/audit_verify.py %s >/dev/null 2>&1",
           TPU_SOURCE_DIR, args);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_python_cross_check(void) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    fprintf(stderr, "\n  (no /usr/bin/python3: cross-check skipped)\n");
    return;
  }
  fresh_dir();
  spit(keyp, KEY, strlen(KEY));
  tpu_audit_config_t c;
  cfg_default(&c);
  c.key_path = keyp;
  c.max_bytes = 4096;
  tpu_audit_t *a = open_log(&c);
  for (int i = 0; i < 6; i++) {
    submit_n(a, 5, "py \"quoted\" \xc3\xa9");
    tpu_audit_flush(a, 5000);
  }
  tpu_audit_close(a);
  FILE *f = fopen(logp, "ab");
  fputs("{\"seq\":99,\"ti", f); /* torn, then vouched for at the next open */
  fclose(f);
  a = open_log(&c);
  submit_n(a, 3, "py2");
  tpu_audit_close(a);
  char names[64][600];
  int nr = list_rotated(names, 63);
  CU_ASSERT(nr >= 2);
  char args[1800];
  int off = snprintf(args, sizeof args, "--key %s --head %s", keyp, headp);
  for (int i = 0; i < nr; i++) off += snprintf(args + off, sizeof args - (size_t)off, " %s", names[i]);
  snprintf(args + off, sizeof args - (size_t)off, " %s", logp);
  CU_ASSERT_EQUAL(run_py(args), 0);
  /* It must also be able to fail: flip one byte in the current file. */
  size_t len;
  char *s = slurp(logp, &len);
  s[len / 2] ^= 0x04;
  spit(logp, s, len);
  free(s);
  CU_ASSERT_EQUAL(run_py(args), 1);
  rm_dir();
}

TPU_TEST_SUITE(audit, {"format_and_chain", test_format_and_chain},
               {"continues_across_restarts", test_continues_across_restarts},
               {"hmac_key", test_hmac_key}, {"bad_arguments", test_bad_arguments},
               {"digest", test_digest}, {"torn_tail_recovered", test_torn_tail_recovered},
               {"torn_only_file_and_empty", test_torn_only_file_and_empty},
               {"rollback_noticed_at_open", test_rollback_noticed_at_open},
               {"rotation_by_size", test_rotation_by_size},
               {"reopen_sighup_and_external_move", test_reopen_sighup_and_external_move},
               {"head_file_periodic", test_head_file_periodic},
               {"group_commit_many_producers", test_group_commit_many_producers},
               {"always_callbacks_after_fdatasync", test_always_callbacks_after_fdatasync},
               {"fail_closed_and_recover", test_fail_closed_and_recover},
               {"fail_closed_real_efbig", test_fail_closed_real_efbig},
               {"fail_closed_out_of_memory", test_fail_closed_out_of_memory},
               {"fail_open_counts_lost", test_fail_open_counts_lost},
               {"close_while_failing", test_close_while_failing},
               {"deleted_while_open", test_deleted_while_open},
               {"deleted_while_open_always", test_deleted_while_open_always},
               {"deleted_then_sighup", test_deleted_then_sighup},
               {"moved_while_open", test_moved_while_open},
               {"replaced_by_foreign_file", test_replaced_by_foreign_file},
               {"close_counts_dropped", test_close_counts_dropped},
               {"python_cross_check", test_python_cross_check})
