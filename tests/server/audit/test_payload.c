/*
 * test_payload.c - the payload store (audit/payload.h): entries built and read back in clear
 * and sealed (AES-256-GCM), every way a read can fail, key files, and the audit writer keeping
 * records and entries consistent through write failures and a log deleted while open (records
 * re-sequenced: each entry's frame must carry the seq its record finally got).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit.h"
#include "payload.h"
#include "tpu_test.h"

static char dir[256], pdir[300], logp[300];

static void fresh(void) {
  snprintf(dir, sizeof dir, "/tmp/tpu_payload_XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  snprintf(pdir, sizeof pdir, "%s/payload", dir);
  snprintf(logp, sizeof logp, "%s/audit.log", dir);
}

static void rm_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) {
    unlink(path);
    return;
  }
  struct dirent *e;
  char p[700];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      rm_tree(p);
    }
  closedir(d);
  rmdir(path);
}

/* Two inputs interleaved in packed rows (a 3-float tensor and a 1-int64 tensor), one output. */
static unsigned char rows_in[5][20];
static float outv[5][2];
static const int64_t shape_a[] = {-1, 3}, shape_b[] = {-1}, shape_o[] = {-1, 2};

static void tensors(tpu_payload_tensor_t in[2], tpu_payload_tensor_t *out, int salt) {
  for (int r = 0; r < 5; r++) {
    float f[3] = {r + 0.5f, -r * 2.0f, (float)salt};
    int64_t id = 1000 + r;
    memcpy(rows_in[r], f, 12);
    memcpy(rows_in[r] + 12, &id, 8);
    outv[r][0] = r * 0.25f + salt;
    outv[r][1] = -1.0f;
  }
  in[0] = (tpu_payload_tensor_t){"num", "FP32", 2, shape_a, rows_in[0], 5, 20, 12};
  in[1] = (tpu_payload_tensor_t){"cat", "INT64", 1, shape_b, rows_in[0] + 12, 5, 20, 8};
  *out = (tpu_payload_tensor_t){"score", "FP32", 2, shape_o, (unsigned char *)outv, 5, 8, 8};
}

/* Writes a one-entry store file by hand (frame + entry), as the writer frames it. */
static void write_entry(const char *name, uint64_t seq, const tpu_payload_blob_t *b) {
  char path[400];
  snprintf(path, sizeof path, "%s/%s", pdir, name);
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  unsigned char fr[16] = {'T', 'P', 'U', 'F'};
  for (int i = 0; i < 4; i++) fr[4 + i] = (unsigned char)(b->len >> (8 * i));
  for (int i = 0; i < 8; i++) fr[8 + i] = (unsigned char)(seq >> (8 * i));
  fwrite(fr, 1, 16, f);
  fwrite(b->data, 1, b->len, f);
  fclose(f);
}

static void check_view(const tpu_payload_t *p, int salt) {
  CU_ASSERT_STRING_EQUAL(p->model, "fraud");
  CU_ASSERT_STRING_EQUAL(p->version, "3");
  CU_ASSERT_EQUAL(p->rows, 5);
  CU_ASSERT_EQUAL_FATAL(p->nin, 2);
  CU_ASSERT_EQUAL_FATAL(p->nout, 1);
  CU_ASSERT_STRING_EQUAL(p->in[0].name, "num");
  CU_ASSERT_EQUAL(p->in[0].shape[0], 5); /* -1 written as the rows */
  CU_ASSERT_EQUAL(p->in[0].shape[1], 3);
  CU_ASSERT_EQUAL(p->in[0].bytes, 60);
  CU_ASSERT_STRING_EQUAL(p->in[1].datatype, "INT64");
  CU_ASSERT_EQUAL(p->in[1].bytes, 40);
  for (int r = 0; r < 5; r++) { /* de-interleaved: OIP raw form, tensor by tensor */
    CU_ASSERT_EQUAL(memcmp(p->in[0].data + 12 * r, rows_in[r], 12), 0);
    CU_ASSERT_EQUAL(memcmp(p->in[1].data + 8 * r, rows_in[r] + 12, 8), 0);
  }
  CU_ASSERT_EQUAL(memcmp(p->out[0].data, outv, 40), 0);
  (void)salt;
}

static void test_round_trip(void) {
  fresh();
  CU_ASSERT_EQUAL_FATAL(mkdir(pdir, 0750), 0);
  tpu_payload_key_t key, other;
  memset(&key, 0, sizeof key);
  memset(key.key, 7, sizeof key.key);
  memset(key.id, 0x11, sizeof key.id);
  other = key;
  other.key[0] ^= 1;
  memset(other.id, 0x22, sizeof other.id);
  tpu_payload_tensor_t in[2], out;
  tensors(in, &out, 1);
  tpu_payload_blob_t *clear = NULL, *sealed = NULL, *sealed2 = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_payload_build(NULL, "fraud", "3", 5, in, 2, &out, 1, &clear), 0);
  CU_ASSERT_EQUAL_FATAL(tpu_payload_build(&key, "fraud", "3", 5, in, 2, &out, 1, &sealed), 0);
  CU_ASSERT_EQUAL_FATAL(tpu_payload_build(&key, "fraud", "3", 5, in, 2, &out, 1, &sealed2), 0);
  CU_ASSERT_EQUAL(sealed->len, clear->len + 16); /* the GCM tag */
  /* a fresh nonce per entry: the same plaintext seals differently */
  CU_ASSERT_NOT_EQUAL(memcmp(sealed->data + 16, sealed2->data + 16, 12), 0);
  CU_ASSERT_STRING_NOT_EQUAL(sealed->sha256, sealed2->sha256);
  /* no plaintext in the sealed entry: neither the header nor the tensor bytes */
  CU_ASSERT_PTR_NULL(memmem(sealed->data, sealed->len, "\"inputs\"", 8));
  CU_ASSERT_PTR_NULL(memmem(sealed->data, sealed->len, outv, 8));
  CU_ASSERT_PTR_NOT_NULL(memmem(clear->data, clear->len, outv, 8));

  write_entry("payload.00000000000000000007", 7, clear);
  write_entry("payload.00000000000000000009", 9, sealed);
  char why[1500];
  tpu_payload_t *p = NULL;
  CU_ASSERT_EQUAL(tpu_payload_read(pdir, "payload.00000000000000000007@0", 7, clear->sha256, NULL,
                                   &p, why, sizeof why), TPU_PAYLOAD_OK);
  if (p) {
    check_view(p, 1);
    CU_ASSERT_EQUAL(p->encrypted, 0);
  }
  tpu_payload_free(p);
  p = NULL;
  CU_ASSERT_EQUAL(tpu_payload_read(pdir, "payload.00000000000000000009@0", 9, sealed->sha256,
                                   &key, &p, why, sizeof why), TPU_PAYLOAD_OK);
  if (p) {
    check_view(p, 1);
    CU_ASSERT_EQUAL(p->encrypted, 1);
  }
  tpu_payload_free(p);
  /* failures, each named */
  struct {
    const char *ref;
    uint64_t seq;
    const char *sha;
    const tpu_payload_key_t *key;
    tpu_payload_status_t want;
    const char *text;
  } cases[] = {
      {"payload.00000000000000000007@0", 8, clear->sha256, NULL, TPU_PAYLOAD_WRONG,
       "is the payload of seq 7, not of seq 8"},
      {"payload.00000000000000000007@1", 7, clear->sha256, NULL, TPU_PAYLOAD_WRONG,
       "no payload entry starts at offset 1"},
      {"payload.00000000000000000007@99999", 7, clear->sha256, NULL, TPU_PAYLOAD_MISSING,
       "no entry at offset 99999"},
      {"payload.00000000000000000008@0", 8, clear->sha256, NULL, TPU_PAYLOAD_MISSING,
       "No such file"},
      {"../etc/passwd@0", 8, clear->sha256, NULL, TPU_PAYLOAD_WRONG, "is not FILE@OFFSET"},
      {"payload.00000000000000000007", 7, clear->sha256, NULL, TPU_PAYLOAD_WRONG,
       "is not FILE@OFFSET"},
      {"payload.00000000000000000007@0", 7, sealed->sha256, NULL, TPU_PAYLOAD_TAMPERED,
       "changed since it was written"},
      {"payload.00000000000000000009@0", 9, sealed->sha256, NULL, TPU_PAYLOAD_KEY,
       "give --payload-key"},
      {"payload.00000000000000000009@0", 9, sealed->sha256, &other, TPU_PAYLOAD_KEY,
       "the wrong key"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    p = NULL;
    tpu_payload_status_t st = tpu_payload_read(pdir, cases[i].ref, cases[i].seq, cases[i].sha,
                                               cases[i].key, &p, why, sizeof why);
    CU_ASSERT_EQUAL(st, cases[i].want);
    CU_ASSERT_PTR_NULL(p);
    if (!strstr(why, cases[i].text)) {
      fprintf(stderr, "\n  case %zu: expected \"%s\" in \"%s\"\n", i, cases[i].text, why);
      CU_FAIL("message lacks the expected text");
    }
  }
  /* a byte flipped in the ciphertext, its digest recomputed: GCM still refuses it */
  sealed->data[40] ^= 0x80;
  char hex[65];
  tpu_audit_sha256_hex(sealed->data, sealed->len, hex);
  write_entry("payload.00000000000000000009", 9, sealed);
  p = NULL;
  CU_ASSERT_EQUAL(tpu_payload_read(pdir, "payload.00000000000000000009@0", 9, hex, &key, &p, why,
                                   sizeof why), TPU_PAYLOAD_TAMPERED);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "AES-256-GCM rejects the entry"));
  free(clear);
  free(sealed);
  free(sealed2);
  rm_tree(dir);
}

static void test_key_files(void) {
  fresh();
  char kp[400], err[800];
  snprintf(kp, sizeof kp, "%s/key", dir);
  tpu_payload_key_t a, b;
  FILE *f = fopen(kp, "w");
  fprintf(f, "%s\n", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  fclose(f);
  CU_ASSERT_EQUAL(tpu_payload_load_key(kp, &a, err, sizeof err), 0);
  CU_ASSERT_EQUAL(a.key[1], 0x11);
  CU_ASSERT_EQUAL(a.key[31], 0xff);
  unsigned char raw[32];
  memcpy(raw, a.key, 32);
  f = fopen(kp, "wb");
  fwrite(raw, 1, 32, f);
  fclose(f);
  CU_ASSERT_EQUAL(tpu_payload_load_key(kp, &b, err, sizeof err), 0);
  CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0); /* same key, same id */
  f = fopen(kp, "w");
  fprintf(f, "too short\n");
  fclose(f);
  CU_ASSERT_EQUAL(tpu_payload_load_key(kp, &b, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "32 bytes, or 64 hex digits"));
  f = fopen(kp, "w");
  fprintf(f, "%s\n", "zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
  fclose(f);
  CU_ASSERT_EQUAL(tpu_payload_load_key(kp, &b, err, sizeof err), -1);
  snprintf(kp, sizeof kp, "%s/none", dir);
  CU_ASSERT_EQUAL(tpu_payload_load_key(kp, &b, err, sizeof err), -1);
  rm_tree(dir);
}

/* Submits n request records with payloads (salted by their index). */
static void submit_n(tpu_audit_t *a, int from, int n) {
  for (int i = from; i < from + n; i++) {
    tpu_payload_tensor_t in[2], out;
    tensors(in, &out, i);
    char id[32];
    snprintf(id, sizeof id, "r-%d", i);
    tpu_audit_record_t rec = {.request_id = id, .model = "fraud", .version = "3", .status = "OK"};
    CU_ASSERT_EQUAL(tpu_audit_capture(a, "fraud", "3", 5, in, 2, &out, 1, &rec.payload), 0);
    CU_ASSERT_EQUAL(tpu_audit_submit(a, &rec, NULL, NULL), 0);
  }
}

/* Every request record in the log has a readable entry of its own seq, with its own salt. */
static int check_log(const tpu_payload_key_t *key) {
  FILE *f = fopen(logp, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char *line = NULL;
  size_t cap = 0;
  int n = 0;
  while (getline(&line, &cap, f) > 0) {
    json_t *o = json_loads(line, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    if (strcmp(json_string_value(json_object_get(o, "kind")), "request") == 0) {
      const char *ref = json_string_value(json_object_get(o, "payload"));
      const char *sha = json_string_value(json_object_get(o, "payload_sha256"));
      uint64_t seq = (uint64_t)json_integer_value(json_object_get(o, "seq"));
      int salt = atoi(json_string_value(json_object_get(o, "request_id")) + 2);
      char why[1500];
      tpu_payload_t *p = NULL;
      tpu_payload_status_t st = tpu_payload_read(pdir, ref, seq, sha, key, &p, why, sizeof why);
      CU_ASSERT_EQUAL(st, TPU_PAYLOAD_OK);
      if (st != TPU_PAYLOAD_OK) fprintf(stderr, "\n  seq %llu: %s\n", (unsigned long long)seq, why);
      if (p) {
        float f0;
        memcpy(&f0, p->in[0].data + 8, 4); /* row 0's third value is the salt */
        CU_ASSERT_EQUAL((int)f0, salt);
      }
      tpu_payload_free(p);
      n++;
    }
    json_decref(o);
  }
  free(line);
  fclose(f);
  return n;
}

static void test_writer_failures_and_deleted_log(void) {
  fresh();
  tpu_payload_key_t key;
  memset(&key, 0x5a, sizeof key);
  tpu_audit_config_t c;
  tpu_audit_config_init(&c);
  c.path = logp;
  c.head_path = "";
  c.payload_dir = pdir;
  c.payload_key = &key;
  c.retry_ms = 20;
  c.fail_open = 1; /* the producers are not held back while the writes fail */
  tpu_audit_t *a = NULL;
  char err[800];
  CU_ASSERT_EQUAL_FATAL(tpu_audit_open(&c, &a, err, sizeof err), 0);
  CU_ASSERT(tpu_audit_capturing(a));
  submit_n(a, 0, 40);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  /* writes fail for a while (records and entries wait, then go out together) */
  tpu_audit__inject_error(a, EIO);
  submit_n(a, 40, 40);
  usleep(100000);
  tpu_audit__inject_error(a, 0);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  /* the log deleted while open: the next batch is re-sequenced into a new file after a gap
   * record, so its entries must be staged again with their new seqs */
  CU_ASSERT_EQUAL(unlink(logp), 0);
  submit_n(a, 80, 40);
  CU_ASSERT_EQUAL(tpu_audit_flush(a, 5000), 0);
  tpu_pstore_stats_t ps;
  tpu_audit_payload_stats(a, &ps);
  CU_ASSERT_EQUAL(ps.entries, 120); /* 40 went with the deleted log's batch, then again */
  CU_ASSERT(ps.bytes > 0);
  tpu_audit_close(a);
  CU_ASSERT_EQUAL(check_log(&key), 40); /* the new file: the 40 records after the gap */
  rm_tree(dir);
}

static void test_capture_requires_store(void) {
  fresh();
  tpu_audit_config_t c;
  tpu_audit_config_init(&c);
  c.path = logp;
  tpu_audit_t *a = NULL;
  char err[800];
  CU_ASSERT_EQUAL_FATAL(tpu_audit_open(&c, &a, err, sizeof err), 0);
  CU_ASSERT(!tpu_audit_capturing(a));
  tpu_payload_tensor_t in[2], out;
  tensors(in, &out, 0);
  tpu_payload_blob_t *b = (tpu_payload_blob_t *)1;
  CU_ASSERT_EQUAL(tpu_audit_capture(a, "m", "1", 5, in, 2, &out, 1, &b), -1);
  CU_ASSERT_PTR_NULL(b);
  tpu_audit_close(a);
  /* a store directory that cannot be made is an error at open */
  c.payload_dir = "/proc/no/such/dir";
  CU_ASSERT_EQUAL(tpu_audit_open(&c, &a, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "payload store"));
  rm_tree(dir);
}

static int nreports;
static char last_report[700];
static void on_report(void *ctx, const char *message) {
  (void)ctx;
  nreports++;
  snprintf(last_report, sizeof last_report, "%s", message);
}

/* Files left by earlier runs count toward --payload-max-bytes: the oldest go first, the store's
 * current file never, and files that are not the store's are left alone. */
static void test_retention_across_restarts(void) {
  fresh();
  CU_ASSERT_EQUAL_FATAL(mkdir(pdir, 0750), 0);
  static const char *const old[] = {"payload.00000000000000000001", "payload.00000000000000000500",
                                    "payload.00000000000000000500-1",
                                    "payload.00000000000000000900", "notes.txt"};
  char path[500], blob[100000];
  memset(blob, 'x', sizeof blob);
  for (size_t i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "%s/%s", pdir, old[i]);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fwrite(blob, 1, sizeof blob, f);
    fclose(f);
  }
  tpu_pstore_t *ps = NULL;
  char err[600];
  CU_ASSERT_EQUAL_FATAL(tpu_pstore_open(pdir, 250000, 0, &ps, err, sizeof err), 0);
  tpu_pstore_stats_t st;
  tpu_pstore_stats(ps, &st);
  CU_ASSERT_EQUAL(st.bytes, 400000); /* the four payload files, not notes.txt */
  /* one entry in a new file of this run */
  tpu_payload_tensor_t in[2], out;
  tensors(in, &out, 3);
  tpu_payload_blob_t *b = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_payload_build(NULL, "fraud", "3", 5, in, 2, &out, 1, &b), 0);
  char ref[TPU_PAYLOAD_REF_MAX];
  const char *what = NULL;
  CU_ASSERT_EQUAL(tpu_pstore_stage(ps, 1000, b, ref), 0);
  CU_ASSERT_STRING_EQUAL(ref, "payload.00000000000000001000@0");
  CU_ASSERT_EQUAL(tpu_pstore_write(ps, 0, &what), 0);
  tpu_pstore_committed(ps);
  nreports = 0;
  tpu_pstore_maintain(ps, on_report, NULL);
  CU_ASSERT_EQUAL(nreports, 2); /* 400000 + this entry > 250000: 1 and 500 go */
  CU_ASSERT_PTR_NOT_NULL(strstr(last_report, "deleted payload.00000000000000000500 (100000 bytes"));
  CU_ASSERT_PTR_NOT_NULL(strstr(last_report, "over --payload-max-bytes 250000"));
  for (size_t i = 0; i < 5; i++) {
    snprintf(path, sizeof path, "%s/%s", pdir, old[i]);
    CU_ASSERT_EQUAL(access(path, F_OK) == 0, i >= 2);
  }
  tpu_pstore_stats(ps, &st);
  CU_ASSERT_EQUAL(st.files_deleted, 2);
  CU_ASSERT_EQUAL(st.entries, 1);
  tpu_pstore_close(ps);
  char why[1500];
  tpu_payload_t *p = NULL;
  CU_ASSERT_EQUAL(tpu_payload_read(pdir, ref, 1000, b->sha256, NULL, &p, why, sizeof why),
                  TPU_PAYLOAD_OK);
  tpu_payload_free(p);
  free(b);
  rm_tree(dir);
}

TPU_TEST_SUITE(payload, {"retention_across_restarts", test_retention_across_restarts}, {"round_trip", test_round_trip}, {"key_files", test_key_files},
               {"writer_failures_and_deleted_log", test_writer_failures_and_deleted_log},
               {"capture_requires_store", test_capture_requires_store})
