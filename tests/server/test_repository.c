/*
 * test_repository.c - the repository manager's pure parts: version policies, version names,
 * directory signatures (change detection) and the scan, on temporary directories.
 * The threads, the table and hot swapping are tested against the real daemon by
 * tests/integration/test_repository.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "repository.h"
#include "tpu_test.h"

static int parse(const char *json, tpu_repo_policy_t *p, char *err) {
  return tpu_repo_policy_parse(json, strlen(json), p, err, 256);
}

static void test_policy_parse(void) {
  tpu_repo_policy_t p;
  char err[256];
  tpu_repo_policy_default(&p);
  CU_ASSERT_EQUAL(p.kind, TPU_REPO_POLICY_LATEST);
  CU_ASSERT_EQUAL(p.latest, 1);
  CU_ASSERT_EQUAL(parse("{\"latest\": 3}", &p, err), 0);
  CU_ASSERT_EQUAL(p.kind, TPU_REPO_POLICY_LATEST);
  CU_ASSERT_EQUAL(p.latest, 3);
  CU_ASSERT_EQUAL(parse("{\"specific\": [3, 1, 7]}", &p, err), 0);
  CU_ASSERT_EQUAL(p.kind, TPU_REPO_POLICY_SPECIFIC);
  CU_ASSERT_EQUAL(p.nspecific, 3);
  CU_ASSERT(p.specific[0] == 1 && p.specific[1] == 3 && p.specific[2] == 7); /* sorted */
  CU_ASSERT_EQUAL(parse("{\"all\": true}", &p, err), 0);
  CU_ASSERT_EQUAL(p.kind, TPU_REPO_POLICY_ALL);
}

static void test_policy_parse_errors(void) {
  struct {
    const char *json, *want;
  } bad[] = {
      {"", "not valid JSON"},
      {"[1]", "exactly one key"},
      {"{}", "exactly one key"},
      {"{\"latest\": 1, \"all\": true}", "exactly one key"},
      {"{\"latest\": 0}", "\"latest\": expected an integer from 1"},
      {"{\"latest\": \"2\"}", "\"latest\": expected an integer from 1"},
      {"{\"specific\": []}", "\"specific\": expected an array of 1 to"},
      {"{\"specific\": [1, 0]}", "\"specific\"[1]: expected a positive integer"},
      {"{\"specific\": [2, 2]}", "version 2 is listed twice"},
      {"{\"all\": false}", "\"all\": expected true"},
      {"{\"newest\": 1}", "unknown key \"newest\""},
      {"{\"latest\": 1, \"latest\": 2}", "not valid JSON"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tpu_repo_policy_t p;
    tpu_repo_policy_default(&p);
    p.latest = 42;
    char err[256] = "";
    CU_ASSERT_EQUAL(parse(bad[i].json, &p, err), -1);
    if (!strstr(err, bad[i].want)) {
      printf("\n  policy %s: got \"%s\", want \"%s\"\n", bad[i].json, err, bad[i].want);
      CU_FAIL("wrong policy error message");
    }
    CU_ASSERT_EQUAL(p.latest, 42); /* untouched on error */
  }
}

static void test_policy_select(void) {
  tpu_repo_policy_t p;
  char err[256];
  uint64_t c[] = {1, 2, 5, 9}, out[4];
  tpu_repo_policy_default(&p);
  CU_ASSERT_EQUAL(tpu_repo_policy_select(&p, c, 4, out), 1);
  CU_ASSERT_EQUAL(out[0], 9);
  CU_ASSERT_EQUAL(tpu_repo_policy_select(&p, c, 0, out), 0);
  parse("{\"latest\": 2}", &p, err);
  CU_ASSERT_EQUAL(tpu_repo_policy_select(&p, c, 4, out), 2);
  CU_ASSERT(out[0] == 5 && out[1] == 9);
  parse("{\"latest\": 10}", &p, err);
  CU_ASSERT_EQUAL(tpu_repo_policy_select(&p, c, 4, out), 4);
  parse("{\"specific\": [2, 3, 9]}", &p, err);
  CU_ASSERT_EQUAL(tpu_repo_policy_select(&p, c, 4, out), 2);
  CU_ASSERT(out[0] == 2 && out[1] == 9);
  parse("{\"all\": true}", &p, err);
  CU_ASSERT_EQUAL(tpu_repo_policy_select(&p, c, 4, out), 4);
  CU_ASSERT(out[0] == 1 && out[3] == 9);
}

static void test_policy_format(void) {
  tpu_repo_policy_t p;
  char err[256], buf[128];
  tpu_repo_policy_default(&p);
  tpu_repo_policy_format(&p, buf, sizeof buf);
  CU_ASSERT_STRING_EQUAL(buf, "{\"latest\": 1}");
  parse("{\"specific\": [3, 1]}", &p, err);
  tpu_repo_policy_format(&p, buf, sizeof buf);
  CU_ASSERT_STRING_EQUAL(buf, "{\"specific\": [1, 3]}");
  parse("{\"all\": true}", &p, err);
  tpu_repo_policy_format(&p, buf, sizeof buf);
  CU_ASSERT_STRING_EQUAL(buf, "{\"all\": true}");
}

static void test_parse_version(void) {
  uint64_t v = 0;
  CU_ASSERT(tpu_repo_parse_version("1", &v) == 0 && v == 1);
  CU_ASSERT(tpu_repo_parse_version("120", &v) == 0 && v == 120);
  CU_ASSERT(tpu_repo_parse_version("999999999999999999", &v) == 0 && v == 999999999999999999ULL);
  const char *bad[] = {"", "0", "01", "-1", "+1", "1a", "2.tmp", " 1", "1234567890123456789"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CU_ASSERT_EQUAL(tpu_repo_parse_version(bad[i], &v), -1);
  CU_ASSERT_EQUAL(tpu_repo_parse_version(NULL, &v), -1);
}

/* ---- temp directories ---- */

static char tmp_root[256];

static void mk_tmp(void) {
  snprintf(tmp_root, sizeof tmp_root, "/tmp/tpu_repo_test.XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(tmp_root));
}

static void rm_tmp(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

static void put(const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(text, f);
  fclose(f);
}

static void mkd(const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
  CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
}

static uint64_t sig(const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
  return tpu_repo_dir_sig(path);
}

static void set_mtime(const char *rel, time_t t) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
  struct timeval tv[2] = {{t, 0}, {t, 0}};
  CU_ASSERT_EQUAL(utimes(path, tv), 0);
}

static void test_dir_sig(void) {
  mk_tmp();
  mkd("v");
  uint64_t empty = sig("v");
  CU_ASSERT_NOT_EQUAL(empty, 0);
  put("v/model.json", "{}");
  uint64_t s1 = sig("v");
  CU_ASSERT_NOT_EQUAL(s1, empty);              /* a file appeared */
  CU_ASSERT_EQUAL(sig("v"), s1);               /* stable while nothing changes */
  put("v/model.safetensors", "abc");
  uint64_t s2 = sig("v");
  CU_ASSERT_NOT_EQUAL(s2, s1);                 /* the checkpoint appeared */
  put("v/model.safetensors", "abcdef");
  uint64_t s3 = sig("v");
  CU_ASSERT_NOT_EQUAL(s3, s2);                 /* it grew (a slow copy) */
  set_mtime("v/model.safetensors", 1000000);
  uint64_t s4 = sig("v");
  CU_ASSERT_NOT_EQUAL(s4, s3);                 /* touched */
  put("v/.new", "abcdef");                     /* same size, renamed over: another inode */
  set_mtime("v/.new", 1000000);
  char a[512], b[512];
  snprintf(a, sizeof a, "%s/v/.new", tmp_root);
  snprintf(b, sizeof b, "%s/v/model.safetensors", tmp_root);
  CU_ASSERT_EQUAL(rename(a, b), 0);
  CU_ASSERT_NOT_EQUAL(sig("v"), s4);
  CU_ASSERT_EQUAL(sig("missing"), 0);          /* unreadable */
  rm_tmp();
}

static void test_scan(void) {
  mk_tmp();
  put("README.md", "top-level files are ignored");
  mkd("scripts");                  /* a helper directory: no version inside */
  put("scripts/export.py", "");
  mkd("zeta");
  mkd("zeta/3");
  mkd("zeta/1");
  mkd("zeta/2.partial");           /* a copy in progress: not a version */
  mkd("zeta/abc");
  mkd("zeta/.hidden");
  mkd("zeta/010");                 /* leading zero: not a version */
  put("zeta/7", "a file, not a directory");
  put("zeta/policy.json", "{\"latest\": 2}");
  mkd("alpha");
  mkd("alpha/5");
  put("alpha/policy.json", "{\"latest\": -1}");
  mkd(".trash");
  mkd(".trash/1");
  tpu_repo_scan_t s;
  char err[256];
  CU_ASSERT_EQUAL_FATAL(tpu_repo_scan(tmp_root, &s, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(s.n, 2);
  CU_ASSERT_STRING_EQUAL(s.m[0].name, "alpha"); /* sorted */
  CU_ASSERT_STRING_EQUAL(s.m[1].name, "zeta");
  CU_ASSERT_EQUAL(s.m[0].nv, 1);
  CU_ASSERT_EQUAL(s.m[0].v[0].version, 5);
  CU_ASSERT_NOT_EQUAL(s.m[0].policy_sig, 0);
  CU_ASSERT_EQUAL(s.m[0].policy_ok, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(s.m[0].policy_err, "\"latest\""));
  CU_ASSERT_EQUAL_FATAL(s.m[1].nv, 2);
  CU_ASSERT_EQUAL(s.m[1].v[0].version, 1); /* ascending */
  CU_ASSERT_EQUAL(s.m[1].v[1].version, 3);
  CU_ASSERT_NOT_EQUAL(s.m[1].v[0].sig, 0);
  CU_ASSERT_EQUAL(s.m[1].policy_ok, 1);
  CU_ASSERT_EQUAL(s.m[1].policy.latest, 2);
  uint64_t psig = s.m[1].policy_sig, vsig = s.m[1].v[1].sig;
  tpu_repo_scan_free(&s);
  /* Changes show up in the next scan: a file in version 3, a new policy. */
  put("zeta/3/model.json", "{}");
  put("zeta/policy.json", "{\"all\": true}");
  set_mtime("zeta/policy.json", 2000000);
  CU_ASSERT_EQUAL_FATAL(tpu_repo_scan(tmp_root, &s, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(s.n, 2);
  CU_ASSERT_NOT_EQUAL(s.m[1].v[1].sig, vsig);
  CU_ASSERT_NOT_EQUAL(s.m[1].policy_sig, psig);
  CU_ASSERT_EQUAL(s.m[1].policy.kind, TPU_REPO_POLICY_ALL);
  tpu_repo_scan_free(&s);
  rm_tmp();
  CU_ASSERT_EQUAL(tpu_repo_scan(tmp_root, &s, err, sizeof err), -1); /* root gone */
  CU_ASSERT_PTR_NOT_NULL(strstr(err, tmp_root));
  CU_ASSERT_EQUAL(s.n, 0);
}

TPU_TEST_SUITE(repository,
               {"policy_parse", test_policy_parse},
               {"policy_parse_errors", test_policy_parse_errors},
               {"policy_select", test_policy_select},
               {"policy_format", test_policy_format},
               {"parse_version", test_parse_version},
               {"dir_sig", test_dir_sig},
               {"scan", test_scan})
