/*
 * test_config.c - option defaults, flags, the JSON file, precedence and every error path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h"
#include "cpus.h"
#include "fsync.h"
#include "tpu_test.h"

static tpu_config_result_t parse(tpu_config_t *c, char *err, int argc, const char **argv) {
  tpu_config_defaults(c);
  return tpu_config_parse(c, argc, (char **)argv, err, 512);
}

static void test_defaults(void) {
  tpu_config_t c;
  char err[512];
  const char *argv[] = {"tpud"};
  CU_ASSERT_EQUAL(parse(&c, err, 1, argv), TPU_CONFIG_OK);
  CU_ASSERT_STRING_EQUAL(c.models, "./models");
  CU_ASSERT_STRING_EQUAL(c.listen, "127.0.0.1");
  CU_ASSERT_EQUAL(c.port, 8500);
  CU_ASSERT_EQUAL(c.http_port, 8501);
  CU_ASSERT(c.cpus.usable >= 1 && c.cpus.online >= 1);
  CU_ASSERT(c.threads >= 1 && c.threads <= c.cpus.usable);
  CU_ASSERT_EQUAL(c.io_threads, c.cpus.usable < 4 ? 1 : c.cpus.usable / 4);
  CU_ASSERT_EQUAL(c.max_message_bytes, 64u << 20);
  CU_ASSERT_EQUAL(c.max_buffered_bytes, 256u << 20);
  CU_ASSERT_EQUAL(c.log_level, TPU_LOG_INFO);
  CU_ASSERT_EQUAL(c.strict_readiness, 1); /* as Triton: every configured model ready */
  CU_ASSERT_FALSE(tpu_config_given(&c, "max-connections")); /* defaults are not "given" */
}

/* tpu_config_given: set by a flag or the file (even to the default's value), not otherwise;
 * start-up decides from it whether a max-connections that does not fit is lowered or fatal. */
static void test_given(void) {
  tpu_config_t c;
  char err[512];
  const char *argv[] = {"tpud", "--max-connections", "1024", "--port=0"};
  CU_ASSERT_EQUAL(parse(&c, err, 4, argv), TPU_CONFIG_OK);
  CU_ASSERT_TRUE(tpu_config_given(&c, "max-connections"));
  CU_ASSERT_TRUE(tpu_config_given(&c, "port"));
  CU_ASSERT_FALSE(tpu_config_given(&c, "max-buffered-bytes"));
  CU_ASSERT_FALSE(tpu_config_given(&c, "no-such-option"));
  tpu_config_defaults(&c);
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"max-buffered-bytes\": 1048576}", "f.json", err,
                                        sizeof err), 0);
  CU_ASSERT_TRUE(tpu_config_given(&c, "max-buffered-bytes"));
  CU_ASSERT_EQUAL(c.max_buffered_bytes, 1048576);
  CU_ASSERT_FALSE(tpu_config_given(&c, "max-connections"));
  /* A value that fails does not count as given. */
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"max-connections\": 0}", "f.json", err,
                                        sizeof err), -1);
  CU_ASSERT_FALSE(tpu_config_given(&c, "max-connections"));
}

static void test_flags(void) {
  tpu_config_t c;
  char err[512];
  const char *argv[] = {"tpud", "--port", "0", "--models=/srv/m", "--io-threads", "3",
                        "--log-level", "debug", "--max-message-bytes", "1048576"};
  CU_ASSERT_EQUAL(parse(&c, err, 10, argv), TPU_CONFIG_OK);
  CU_ASSERT_EQUAL(c.port, 0);
  CU_ASSERT_STRING_EQUAL(c.models, "/srv/m");
  CU_ASSERT_EQUAL(c.io_threads, 3);
  CU_ASSERT_EQUAL(c.log_level, TPU_LOG_DEBUG);
  CU_ASSERT_EQUAL(c.max_message_bytes, 1048576);
}

/* --audit-fsync: parsed here in util (fsync.h), the flag, the file and the JSON form agree. */
static void test_audit_fsync(void) {
  tpu_audit_fsync_t f = TPU_AUDIT_FSYNC_NEVER;
  CU_ASSERT_EQUAL(tpu_fsync_parse("always", &f), 0);
  CU_ASSERT_EQUAL(f, TPU_AUDIT_FSYNC_ALWAYS);
  CU_ASSERT_EQUAL(tpu_fsync_parse("interval", &f), 0);
  CU_ASSERT_EQUAL(f, TPU_AUDIT_FSYNC_INTERVAL);
  CU_ASSERT_EQUAL(tpu_fsync_parse("never", &f), 0);
  CU_ASSERT_EQUAL(f, TPU_AUDIT_FSYNC_NEVER);
  CU_ASSERT_EQUAL(tpu_fsync_parse("Always", &f), -1); /* exact names only */
  CU_ASSERT_EQUAL(tpu_fsync_parse("", &f), -1);
  CU_ASSERT_EQUAL(tpu_fsync_parse(NULL, &f), -1);
  CU_ASSERT_EQUAL(f, TPU_AUDIT_FSYNC_NEVER); /* left alone on failure */
  CU_ASSERT_STRING_EQUAL(tpu_fsync_name(TPU_AUDIT_FSYNC_ALWAYS), "always");
  CU_ASSERT_STRING_EQUAL(tpu_fsync_name(TPU_AUDIT_FSYNC_INTERVAL), "interval");
  CU_ASSERT_STRING_EQUAL(tpu_fsync_name(TPU_AUDIT_FSYNC_NEVER), "never");
  CU_ASSERT_STRING_EQUAL(tpu_fsync_name((tpu_audit_fsync_t)7), "interval");

  tpu_config_t c;
  char err[512];
  const char *argv[] = {"tpud", "--audit-fsync", "always"};
  CU_ASSERT_EQUAL(parse(&c, err, 3, argv), TPU_CONFIG_OK);
  CU_ASSERT_EQUAL(c.audit_fsync, TPU_AUDIT_FSYNC_ALWAYS);
  json_t *j = tpu_config_to_json(&c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "audit-fsync")), "always");
  json_decref(j);
  tpu_config_defaults(&c);
  CU_ASSERT_EQUAL(c.audit_fsync, TPU_AUDIT_FSYNC_INTERVAL);
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"audit-fsync\": \"never\"}", "f.json", err,
                                        sizeof err), 0);
  CU_ASSERT_EQUAL(c.audit_fsync, TPU_AUDIT_FSYNC_NEVER);
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"audit-fsync\": \"sometimes\"}", "f.json", err,
                                        sizeof err), -1);
  CU_ASSERT_STRING_EQUAL(err, "f.json: option 'audit-fsync' must be one of always, interval, "
                              "never; got 'sometimes'");
}

static void test_file_then_flags(void) {
  char path[] = "/tmp/tpud_cfg_XXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT_FATAL(fd >= 0);
  const char *json = "{\"port\": 9000, \"threads\": 3, \"listen\": \"0.0.0.0\", \"log-level\": \"warn\"}";
  CU_ASSERT(write(fd, json, strlen(json)) == (ssize_t)strlen(json));
  close(fd);
  tpu_config_t c;
  char err[512];
  const char *argv[] = {"tpud", "--port", "9100", "--config", path};
  CU_ASSERT_EQUAL(parse(&c, err, 5, argv), TPU_CONFIG_OK);
  CU_ASSERT_EQUAL(c.port, 9100); /* flag wins, even given before --config */
  CU_ASSERT_EQUAL(c.threads, 3); /* from the file */
  CU_ASSERT_STRING_EQUAL(c.listen, "0.0.0.0");
  CU_ASSERT_EQUAL(c.log_level, TPU_LOG_WARN);
  unlink(path);
}

static void expect_error(int argc, const char **argv, const char *needle) {
  tpu_config_t c;
  char err[512] = "";
  CU_ASSERT_EQUAL(parse(&c, err, argc, argv), TPU_CONFIG_ERROR);
  if (!strstr(err, needle)) printf("\n  message was: %s (wanted '%s')\n", err, needle);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void test_bad_flags(void) {
  const char *a1[] = {"tpud", "--bogus", "1"};
  expect_error(3, a1, "unknown option '--bogus'");
  const char *a2[] = {"tpud", "--port", "65536"};
  expect_error(3, a2, "from 0 to 65535");
  const char *a3[] = {"tpud", "--port", "-1"};
  expect_error(3, a3, "'port' needs an integer");
  const char *a4[] = {"tpud", "--threads", "0"};
  expect_error(3, a4, "from 1 to");
  const char *a5[] = {"tpud", "--port"};
  expect_error(2, a5, "needs a value");
  const char *a6[] = {"tpud", "--log-level", "loud"};
  expect_error(3, a6, "debug, info, warn, error");
  const char *a7[] = {"tpud", "positional"};
  expect_error(2, a7, "unexpected argument");
  const char *a8[] = {"tpud", "--port", "12x"};
  expect_error(3, a8, "got '12x'");
  const char *a9[] = {"tpud", "--models="};
  expect_error(2, a9, "non-empty");
  const char *a10[] = {"tpud", "--config", "/nonexistent/tpud.json"};
  expect_error(3, a10, "cannot open");
  const char *a11[] = {"tpud", "--tls-certs", "x.pem"}; /* a typo of --tls-cert */
  expect_error(3, a11, "unknown option");
  const char *a12[] = {"tpud", "--tls-handshake-timeout-s", "0"};
  expect_error(3, a12, "from 1 to 3600");
  const char *a13[] = {"tpud", "--max-buffered-bytes", "1000"};
  expect_error(3, a13, "from 1048576 to");
}

static void test_bad_json(void) {
  tpu_config_t c;
  char err[512];
  tpu_config_defaults(&c);
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"prot\": 1}", "f.json", err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown option 'prot'"));
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"port\": \"80\"}", "f.json", err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs a JSON integer"));
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"port\": -5}", "f.json", err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "must not be negative"));
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "[1]", "f.json", err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "expected a JSON object"));
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"port\": 1,", "f.json", err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "invalid JSON"));
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"port\": 1, \"port\": 2}", "f.json", err, sizeof err), -1);
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"models\": 3}", "f.json", err, sizeof err), -1);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs a JSON string"));
  CU_ASSERT_EQUAL(c.port, 8500); /* failed applies leave what they had not reached */
  CU_ASSERT_EQUAL(tpu_config_apply_json(&c, "{\"queue-rows\": 10}", "f.json", err, sizeof err), 0);
  CU_ASSERT_EQUAL(c.queue_rows, 10);
}

static void test_help(void) {
  tpu_config_t c;
  char err[512];
  const char *argv[] = {"tpud", "--port", "1", "--help"};
  CU_ASSERT_EQUAL(parse(&c, err, 4, argv), TPU_CONFIG_HELP);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  tpu_config_usage(f);
  fclose(f);
  const char *must[] = {"--models DIR", "--listen ADDR", "--port N", "--http-port N",
                        "--threads N", "--io-threads N", "--max-connections N",
                        "--idle-timeout-s N", "--max-message-bytes N",
                        "--max-inflight-per-conn N", "--queue-rows N", "--drain-timeout-s N",
                        "--poll-seconds N", "--log-level LEVEL", "--config FILE",
                        "--max-buffered-bytes N",
                        "default 8500", "unit: seconds"};
  for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) CU_ASSERT_PTR_NOT_NULL(strstr(buf, must[i]));
  free(buf);
}

/* The CPU-count defaults for threads, io-threads and spin-us, and options given beside them. */
static void test_fit_cpus(void) {
  static const struct {
    unsigned usable, threads, io, spin;
  } want[] = {{1, 1, 1, 0},   {2, 2, 1, 50},    {3, 3, 1, 50},   {4, 3, 1, 50},
              {8, 6, 2, 50},  {16, 12, 4, 50},  {96, 72, 24, 50}, {512, 448, 64, 50}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    tpu_config_t c;
    tpu_config_defaults(&c);
    tpu_cpus_t cpus = {.online = want[i].usable, .usable = want[i].usable};
    tpu_config_fit_cpus(&c, &cpus);
    CU_ASSERT_EQUAL(c.threads, want[i].threads);
    CU_ASSERT_EQUAL(c.io_threads, want[i].io);
    CU_ASSERT_EQUAL(c.spin_us, want[i].spin);
    CU_ASSERT_EQUAL(c.cpus.usable, want[i].usable);
  }
  /* Given options stay; the others fit around them. */
  char err[512];
  tpu_config_t c;
  const char *a1[] = {"tpud", "--threads", "8"};
  CU_ASSERT_FATAL(parse(&c, err, 3, a1) == TPU_CONFIG_OK);
  tpu_cpus_t two = {.online = 2, .affinity = 2, .usable = 2};
  tpu_config_fit_cpus(&c, &two);
  CU_ASSERT(c.threads == 8 && c.io_threads == 1);
  CU_ASSERT_EQUAL(c.spin_us, 0); /* 9 threads on 2 CPUs: a spinning one would take a core */
  const char *a2[] = {"tpud", "--spin-us", "10", "--io-threads", "3"};
  CU_ASSERT_FATAL(parse(&c, err, 5, a2) == TPU_CONFIG_OK);
  tpu_cpus_t sixteen = {.online = 16, .usable = 16};
  tpu_config_fit_cpus(&c, &sixteen);
  CU_ASSERT(c.spin_us == 10 && c.io_threads == 3 && c.threads == 13);
  const char *a3[] = {"tpud", "--spin-us", "0"};
  CU_ASSERT_FATAL(parse(&c, err, 3, a3) == TPU_CONFIG_OK);
  CU_ASSERT(c.spin_us == 0 && tpu_config_given(&c, "spin-us"));
  const char *a4[] = {"tpud", "--spin-us", "100001"};
  CU_ASSERT(parse(&c, err, 3, a4) == TPU_CONFIG_ERROR && strstr(err, "spin-us"));
}

static void write_file(const char *dir, const char *name, const char *text) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(text, f);
  fclose(f);
}

/* The cgroup quota: v2 cpu.max, the tightest up the tree; v1 cfs quota; none. */
static void test_cpus_cgroup(void) {
  char dir[] = "/tmp/tpud-cpus-XXXXXX", sub[600], path[600];
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  snprintf(sub, sizeof sub, "%s/root/a/b", dir);
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "mkdir -p %s %s/root/cpu/k", sub, dir);
  CU_ASSERT_FATAL(system(cmd) == 0);
  snprintf(path, sizeof path, "%s/root", dir);

  tpu_cpus_t c, self;
  tpu_cpus_read(&self);
  unsigned base = self.affinity ? self.affinity : self.online;
  write_file(dir, "cg", "0::/a/b\n");
  tpu_cpus_read_at("/nonexistent/cgroup", path, &c); /* nothing readable: no quota */
  CU_ASSERT(c.quota == 0 && c.usable == base);
  tpu_cpus_read_at(strcat(strcpy(cmd, dir), "/cg"), path, &c); /* no cpu.max anywhere */
  CU_ASSERT(c.quota == 0 && c.usable == base);
  write_file(sub, "cpu.max", "150000 100000\n");
  write_file(path, "a/cpu.max", "max 100000\n");
  tpu_cpus_read_at(cmd, path, &c);
  CU_ASSERT_DOUBLE_EQUAL(c.quota, 1.5, 1e-9);
  CU_ASSERT_EQUAL(c.usable, base < 2 ? base : 2); /* 1.5 CPUs run 2 threads */
  write_file(path, "a/cpu.max", "50000 100000\n"); /* the parent's is tighter */
  tpu_cpus_read_at(cmd, path, &c);
  CU_ASSERT_DOUBLE_EQUAL(c.quota, 0.5, 1e-9);
  CU_ASSERT_EQUAL(c.usable, 1);
  write_file(path, "a/cpu.max", "garbage\n"); /* unreadable: ignored */
  tpu_cpus_read_at(cmd, path, &c);
  CU_ASSERT_DOUBLE_EQUAL(c.quota, 1.5, 1e-9);
  /* cgroup v1 (a hybrid system's cpu controller) */
  write_file(dir, "cg", "4:memory:/x\n1:cpu,cpuacct:/k\n0::/a/b\n");
  write_file(path, "cpu/k/cpu.cfs_quota_us", "300000\n");
  write_file(path, "cpu/k/cpu.cfs_period_us", "100000\n");
  tpu_cpus_read_at(cmd, path, &c);
  CU_ASSERT_DOUBLE_EQUAL(c.quota, 3.0, 1e-9);
  CU_ASSERT_EQUAL(c.usable, base < 3 ? base : 3);
  write_file(path, "cpu/k/cpu.cfs_quota_us", "-1\n");
  tpu_cpus_read_at(cmd, path, &c);
  CU_ASSERT(c.quota == 0 && c.usable == base);
  char text[160];
  c.quota = 1.5;
  tpu_cpus_describe(&c, text, sizeof text);
  CU_ASSERT(strstr(text, "cgroup quota 1.50") != NULL);

  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CU_ASSERT(system(cmd) == 0);
}

TPU_TEST_SUITE(server_config, {"defaults", test_defaults}, {"flags", test_flags},
               {"fit_cpus", test_fit_cpus}, {"cpus_cgroup", test_cpus_cgroup},
               {"given", test_given}, {"audit_fsync", test_audit_fsync},
               {"file_then_flags", test_file_then_flags}, {"bad_flags", test_bad_flags},
               {"bad_json", test_bad_json}, {"help", test_help})
