/*
 * test_repository.c - the repository manager's pure parts: version policies, version names,
 * directory signatures (change detection) and the scan, on temporary directories.
 * The threads, the table and hot swapping are tested against the real daemon by
 * tests/integration/test_repository.sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static int sig_err; /* the errno of the last sig() that failed */

static uint64_t sig(const char *rel) {
  char path[512];
  uint64_t h = 0;
  snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
  sig_err = tpu_repo_dir_sig(path, &h);
  return sig_err ? 0 : h;
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
  CU_ASSERT_EQUAL(sig("missing"), 0);          /* gone */
  CU_ASSERT_EQUAL(sig_err, ENOENT);
  put("afile", "x");
  CU_ASSERT_EQUAL(sig("afile"), 0);            /* not a directory: gone as a version */
  CU_ASSERT_EQUAL(sig_err, ENOTDIR);
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


static void test_valid_name(void) {
  CU_ASSERT_TRUE(tpu_repo_valid_name("digits"));
  CU_ASSERT_TRUE(tpu_repo_valid_name("fraud-v2.onnx_model"));
  CU_ASSERT_TRUE(tpu_repo_valid_name("A"));
  char longest[TPU_REPO_MAX_NAME + 2];
  memset(longest, 'a', sizeof longest);
  longest[TPU_REPO_MAX_NAME] = '\0';
  CU_ASSERT_TRUE(tpu_repo_valid_name(longest));
  longest[TPU_REPO_MAX_NAME] = 'a';
  longest[TPU_REPO_MAX_NAME + 1] = '\0';
  CU_ASSERT_FALSE(tpu_repo_valid_name(longest)); /* 129 bytes */
  CU_ASSERT_FALSE(tpu_repo_valid_name(""));
  CU_ASSERT_FALSE(tpu_repo_valid_name(NULL));
  CU_ASSERT_FALSE(tpu_repo_valid_name(".hidden"));
  CU_ASSERT_FALSE(tpu_repo_valid_name("new\nline"));
  CU_ASSERT_FALSE(tpu_repo_valid_name("sp ace"));
  CU_ASSERT_FALSE(tpu_repo_valid_name("caf\xc3\xa9"));   /* valid UTF-8, outside the set */
  CU_ASSERT_FALSE(tpu_repo_valid_name("bad\xff"));       /* invalid UTF-8 */
  CU_ASSERT_FALSE(tpu_repo_valid_name("a/b"));
  CU_ASSERT_FALSE(tpu_repo_valid_name("quo\"te"));
}

static int has_problem(const tpu_repo_scan_t *s, const char *needle) {
  for (size_t i = 0; i < s->nproblems; i++)
    if (strstr(s->problems[i].text, needle)) return 1;
  return 0;
}

/* Directories with names outside [A-Za-z0-9._-] are skipped and reported, escaped; files at
 * the top are still ignored without a word; a FIFO as policy.json does not block the scan. */
static void test_scan_names(void) {
  mk_tmp();
  mkd("good");
  mkd("good/1");
  mkd("bad\nname");
  mkd("bad\nname/1");
  mkd("caf\xc3\xa9");
  mkd("caf\xc3\xa9/1");
  put("notes with spaces.txt", "a file: ignored");
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s/good/policy.json", tmp_root);
  CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0644), 0);
  tpu_repo_scan_t s;
  char err[256];
  CU_ASSERT_EQUAL_FATAL(tpu_repo_scan(tmp_root, &s, err, sizeof err), 0);
  CU_ASSERT_EQUAL_FATAL(s.n, 1);
  CU_ASSERT_STRING_EQUAL(s.m[0].name, "good");
  CU_ASSERT_EQUAL(s.m[0].policy_ok, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(s.m[0].policy_err, "FIFO"));
  CU_ASSERT_EQUAL(s.nproblems, 2);
  CU_ASSERT_TRUE(has_problem(&s, "directory 'bad\\x0aname' skipped"));
  CU_ASSERT_TRUE(has_problem(&s, "directory 'caf\\xc3\\xa9' skipped"));
  CU_ASSERT_FALSE(has_problem(&s, "notes"));
  for (size_t i = 0; i < s.nproblems; i++) CU_ASSERT_PTR_NULL(strchr(s.problems[i].text, '\n'));
  tpu_repo_scan_free(&s);
  rm_tmp();
}

/* Regression (fd exhaustion unloaded every model): with descriptors exhausted, a model
 * directory that cannot be opened is reported as unreadable (err EMFILE), never left out (which
 * the repository read as "removed"); a version directory likewise. */
static void test_scan_unreadable(void) {
  mk_tmp();
  mkd("m");
  mkd("m/1");
  mkd("m/2");
  put("m/2/model.json", "{}");
  /* Use up every descriptor but one: opendir(root) takes it, the model's opendir fails. */
  int fds[65536], n = 0;
  struct rlimit old, low;
  CU_ASSERT_EQUAL_FATAL(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = 256; /* keep the loop short */
  CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_NOFILE, &low), 0);
  while (n < 65536) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fds[n++] = fd;
  }
  CU_ASSERT_FATAL(n > 2);
  close(fds[--n]);
  tpu_repo_scan_t s;
  char err[256];
  int rc = tpu_repo_scan(tmp_root, &s, err, sizeof err);
  CU_ASSERT_EQUAL(rc, 0);
  if (rc == 0) {
    CU_ASSERT_EQUAL(s.n, 1);
    if (s.n == 1) {
      CU_ASSERT_STRING_EQUAL(s.m[0].name, "m");
      CU_ASSERT_EQUAL(s.m[0].err, EMFILE);
      CU_ASSERT_EQUAL(s.m[0].nv, 0);
    }
    CU_ASSERT_TRUE(has_problem(&s, "model 'm': its directory cannot be read"));
    tpu_repo_scan_free(&s);
  }
  /* Two free: the model directory opens, its versions' directories do not. */
  close(fds[--n]);
  rc = tpu_repo_scan(tmp_root, &s, err, sizeof err);
  CU_ASSERT_EQUAL(rc, 0);
  if (rc == 0 && s.n == 1) {
    CU_ASSERT_EQUAL(s.m[0].err, 0);
    CU_ASSERT_EQUAL(s.m[0].nv, 2);
    for (size_t i = 0; i < s.m[0].nv; i++) CU_ASSERT_EQUAL(s.m[0].v[i].err, EMFILE);
    CU_ASSERT_TRUE(has_problem(&s, "model 'm' version 1: its directory cannot be read"));
  }
  if (rc == 0) tpu_repo_scan_free(&s);
  /* None free: the root itself: -1, the caller keeps what it knew. */
  int extra[4], ne = 0;
  while (ne < 4 && (extra[ne] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) ne++;
  CU_ASSERT_EQUAL(tpu_repo_scan(tmp_root, &s, err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "Too many open files"));
  while (ne > 0) close(extra[--ne]);
  while (n > 0) close(fds[--n]);
  CU_ASSERT_EQUAL(setrlimit(RLIMIT_NOFILE, &old), 0);
  /* Without descriptor trouble the same tree scans whole. */
  CU_ASSERT_EQUAL_FATAL(tpu_repo_scan(tmp_root, &s, err, sizeof err), 0);
  CU_ASSERT_EQUAL(s.nproblems, 0);
  CU_ASSERT_EQUAL(s.n == 1 ? s.m[0].nv : 0, 2);
  tpu_repo_scan_free(&s);
  rm_tmp();
}

TPU_TEST_SUITE(repository,
               {"policy_parse", test_policy_parse},
               {"policy_parse_errors", test_policy_parse_errors},
               {"policy_select", test_policy_select},
               {"policy_format", test_policy_format},
               {"parse_version", test_parse_version},
               {"dir_sig", test_dir_sig},
               {"scan", test_scan},
               {"valid_name", test_valid_name},
               {"scan_names", test_scan_names},
               {"scan_unreadable", test_scan_unreadable})
