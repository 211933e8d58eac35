/*
 * test_metrics.c - the Prometheus text writer (server/front/metrics.h, tpu_metrics_*) on its
 * own: family lines, samples with exact integers and shortest doubles, label escaping,
 * histograms (cumulative buckets ending with +Inf, _sum, _count). The buffer it writes into,
 * tpu_buf_t, is tested with proto/tpu_text (tests/proto/test_text.c). The renderer of tpud's own
 * families needs a running server and is not tested here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "tpu_test.h"

static void test_family(void) {
  tpu_buf_t b = {0};
  tpu_metrics_family(&b, "tpud_x_total", "counter", "things counted");
  CU_ASSERT_STRING_EQUAL(b.p, "# HELP tpud_x_total things counted\n# TYPE tpud_x_total counter\n");
  tpu_buf_free(&b);
  tpu_metrics_family(&b, "g", "gauge", "a gauge");
  tpu_metrics_u64(&b, "g", NULL, 0, 7);
  CU_ASSERT_STRING_EQUAL(b.p, "# HELP g a gauge\n# TYPE g gauge\ng 7\n");
  tpu_buf_free(&b);
}

static void test_u64(void) {
  tpu_buf_t b = {0};
  tpu_metrics_u64(&b, "c", NULL, 0, 0);
  tpu_metrics_u64(&b, "c", NULL, 0, UINT64_MAX); /* exact, not a double */
  tpu_mlabel_t one[] = {{"code", "OK"}};
  tpu_metrics_u64(&b, "c", one, 1, 9007199254740993ULL); /* 2^53 + 1 */
  tpu_mlabel_t two[] = {{"model", "digits"}, {"version", "1"}};
  tpu_metrics_u64(&b, "c", two, 2, 3);
  CU_ASSERT_STRING_EQUAL(b.p, "c 0\n"
                              "c 18446744073709551615\n"
                              "c{code=\"OK\"} 9007199254740993\n"
                              "c{model=\"digits\",version=\"1\"} 3\n");
  tpu_buf_free(&b);
}

static void test_label_escaping(void) {
  tpu_buf_t b = {0};
  tpu_mlabel_t l[] = {{"q", "say \"hi\""},
                      {"bs", "C:\\dir\\"},
                      {"nl", "two\nlines\n"},
                      {"all", "\\\"\n"},
                      {"empty", ""},
                      {"null", NULL},
                      {"utf8", "caf\xc3\xa9"},
                      {"tab", "a\tb"}};
  tpu_metrics_u64(&b, "m", l, sizeof l / sizeof l[0], 1);
  CU_ASSERT_STRING_EQUAL(b.p, "m{q=\"say \\\"hi\\\"\",bs=\"C:\\\\dir\\\\\","
                              "nl=\"two\\nlines\\n\",all=\"\\\\\\\"\\n\",empty=\"\",null=\"\","
                              "utf8=\"caf\xc3\xa9\",tab=\"a\tb\"} 1\n");
  /* One line whatever the values hold. */
  CU_ASSERT_EQUAL(strchr(b.p, '\n'), b.p + b.len - 1);
  tpu_buf_free(&b);
}

static void test_double(void) {
  tpu_buf_t b = {0};
  tpu_mlabel_t l[] = {{"k", "v\""}};
  tpu_metrics_double(&b, "d", NULL, 0, 0.0);
  tpu_metrics_double(&b, "d", NULL, 0, 0.001);   /* shortest, not 0.0010000000000000000208 */
  tpu_metrics_double(&b, "d", NULL, 0, 1.5);
  tpu_metrics_double(&b, "d", NULL, 0, 5e-05);
  tpu_metrics_double(&b, "d", NULL, 0, -2.25);
  tpu_metrics_double(&b, "d", NULL, 0, 1e300);
  tpu_metrics_double(&b, "d", NULL, 0, NAN);
  tpu_metrics_double(&b, "d", NULL, 0, INFINITY);
  tpu_metrics_double(&b, "d", l, 1, -INFINITY);
  CU_ASSERT_STRING_EQUAL(b.p, "d 0\nd 0.001\nd 1.5\nd 5e-05\nd -2.25\nd 1e+300\nd NaN\nd +Inf\n"
                              "d{k=\"v\\\"\"} -Inf\n");
  tpu_buf_free(&b);
}

/* Any finite double reads back as itself (the shortening never loses a bit). */
static void test_double_round_trip(void) {
  for (int i = 0; i < 2000; i++) {
    union {
      uint64_t u;
      double d;
    } v;
    do v.u = tpu_test_rand(); while (!isfinite(v.d));
    if (i % 4 == 0) v.d = (double)tpu_test_rand_range(0, 1000000) / 1e6; /* time-like values */
    tpu_buf_t b = {0};
    tpu_metrics_double(&b, "d", NULL, 0, v.d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);
    CU_ASSERT_EQUAL_FATAL(strncmp(b.p, "d ", 2), 0);
    char *end = NULL;
    double back = strtod(b.p + 2, &end);
    TPU_ASSERT_SEED(end && *end == '\n' && end[1] == 0);
    TPU_ASSERT_SEED(back == v.d);
    TPU_ASSERT_SEED(strlen(b.p) <= 2 + 24 + 1);
    tpu_buf_free(&b);
  }
}

static void test_histogram(void) {
  static const uint64_t bounds[] = {10, 100, 1000};
  tpu_hist_t h;
  memset(&h, 0, sizeof h);
  uint64_t obs[] = {5, 10, 50, 5000, 5000}; /* 10 is ≤ 10: the first bucket */
  for (size_t i = 0; i < sizeof obs / sizeof obs[0]; i++) tpu_hist_observe(&h, bounds, 3, obs[i]);
  tpu_buf_t b = {0};
  tpu_metrics_histogram(&b, "h", NULL, 0, &h, bounds, 3, 1);
  CU_ASSERT_STRING_EQUAL(b.p, "h_bucket{le=\"10\"} 2\n"
                              "h_bucket{le=\"100\"} 3\n"
                              "h_bucket{le=\"1000\"} 3\n" /* cumulative: an empty bucket repeats */
                              "h_bucket{le=\"+Inf\"} 5\n"
                              "h_sum 10065\n"
                              "h_count 5\n");
  tpu_buf_free(&b);
  /* With labels (escaped) before le, and a divisor: microseconds as seconds. */
  tpu_mlabel_t l[] = {{"model", "a\"b"}, {"version", "1"}};
  tpu_metrics_histogram(&b, "t_seconds", l, 2, &h, bounds, 3, 1e6);
  CU_ASSERT_STRING_EQUAL(b.p, "t_seconds_bucket{model=\"a\\\"b\",version=\"1\",le=\"1e-05\"} 2\n"
                              "t_seconds_bucket{model=\"a\\\"b\",version=\"1\",le=\"0.0001\"} 3\n"
                              "t_seconds_bucket{model=\"a\\\"b\",version=\"1\",le=\"0.001\"} 3\n"
                              "t_seconds_bucket{model=\"a\\\"b\",version=\"1\",le=\"+Inf\"} 5\n"
                              "t_seconds_sum{model=\"a\\\"b\",version=\"1\"} 0.010065\n"
                              "t_seconds_count{model=\"a\\\"b\",version=\"1\"} 5\n");
  tpu_buf_free(&b);
  /* Empty: every bucket 0, still +Inf, _sum and _count. */
  memset(&h, 0, sizeof h);
  tpu_metrics_histogram(&b, "e", NULL, 0, &h, bounds, 3, 1);
  CU_ASSERT_STRING_EQUAL(b.p, "e_bucket{le=\"10\"} 0\ne_bucket{le=\"100\"} 0\n"
                              "e_bucket{le=\"1000\"} 0\ne_bucket{le=\"+Inf\"} 0\ne_sum 0\n"
                              "e_count 0\n");
  tpu_buf_free(&b);
}

/* The server's microsecond bounds print as exact decimal seconds. */
static void test_histogram_us_bounds(void) {
  tpu_hist_t h;
  memset(&h, 0, sizeof h);
  tpu_buf_t b = {0};
  tpu_metrics_histogram(&b, "x", NULL, 0, &h, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 1e6);
  const char *want[] = {"5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
                        "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"};
  CU_ASSERT_EQUAL_FATAL(sizeof want / sizeof want[0], TPU_HIST_US_NBOUNDS + 1);
  const char *p = b.p;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    char line[64];
    snprintf(line, sizeof line, "x_bucket{le=\"%s\"} 0\n", want[i]);
    CU_ASSERT_EQUAL(strncmp(p, line, strlen(line)), 0);
    const char *nl = strchr(p, '\n');
    CU_ASSERT_PTR_NOT_NULL_FATAL(nl);
    p = nl + 1;
  }
  CU_ASSERT_STRING_EQUAL(p, "x_sum 0\nx_count 0\n");
  tpu_buf_free(&b);
}

/* Random observations: buckets never decrease, +Inf equals _count equals the observations, each
 * bucket counts exactly the values at or under its bound, and _sum is their sum. */
static void test_histogram_random(void) {
  for (int round = 0; round < 20; round++) {
    tpu_hist_t h;
    memset(&h, 0, sizeof h);
    size_t n = (size_t)tpu_test_rand_range(0, 500);
    uint64_t *v = malloc((n + 1) * sizeof *v), sum = 0;
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    for (size_t i = 0; i < n; i++) {
      v[i] = (uint64_t)tpu_test_rand_range(0, 6000000);
      if (i % 7 == 0) v[i] = tpu_hist_us_bounds[tpu_test_rand_range(0, 15)]; /* on a bound */
      sum += v[i];
      tpu_hist_observe(&h, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, v[i]);
    }
    tpu_buf_t b = {0};
    tpu_metrics_histogram(&b, "r", NULL, 0, &h, tpu_hist_us_bounds, TPU_HIST_US_NBOUNDS, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);
    const char *p = b.p;
    uint64_t prev = 0;
    for (size_t i = 0; i <= TPU_HIST_US_NBOUNDS; i++) {
      char le[32];
      unsigned long long got;
      int used = 0;
      TPU_ASSERT_SEED(sscanf(p, "r_bucket{le=\"%31[^\"]\"} %llu\n%n", le, &got, &used) == 2 &&
                      used > 0);
      if (used <= 0) break;
      uint64_t want = 0;
      for (size_t k = 0; k < n; k++)
        if (i == TPU_HIST_US_NBOUNDS || v[k] <= tpu_hist_us_bounds[i]) want++;
      if (i == TPU_HIST_US_NBOUNDS) {
        TPU_ASSERT_SEED(strcmp(le, "+Inf") == 0);
      } else {
        TPU_ASSERT_SEED(strtod(le, NULL) == (double)tpu_hist_us_bounds[i]); /* "1e+06" */
      }
      TPU_ASSERT_SEED(got == want);
      TPU_ASSERT_SEED(got >= prev);
      prev = got;
      p += used;
    }
    double got_sum = -1;
    unsigned long long got_count = 0;
    int used = 0;
    TPU_ASSERT_SEED(sscanf(p, "r_sum %lf\nr_count %llu\n%n", &got_sum, &got_count, &used) == 2);
    TPU_ASSERT_SEED(used > 0 && p[used] == 0); /* nothing after _count */
    TPU_ASSERT_SEED(got_sum == (double)sum);    /* exact: the sum is far below 2^53 */
    TPU_ASSERT_SEED(got_count == n);
    TPU_ASSERT_SEED(prev == n);
    tpu_buf_free(&b);
    free(v);
  }
}

/* /proc/<pid>/stat: the command name may hold spaces and parentheses (the last ')' ends it);
 * malformed texts are refused, not read as zeros. */
static void test_proc_stat(void) {
  const char *ok = "4242 (tpud (x) y) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 75 0 0 20 0 9 0 "
                   "123456 987654321 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0\n";
  uint64_t cpu = 0, start = 0, vsize = 0, rss = 0;
  CU_ASSERT_EQUAL(tpu_metrics_parse_proc_stat(ok, &cpu, &start, &vsize, &rss), 0);
  CU_ASSERT_EQUAL(cpu, 325);
  CU_ASSERT_EQUAL(start, 123456);
  CU_ASSERT_EQUAL(vsize, 987654321);
  CU_ASSERT_EQUAL(rss, 2048);
  const char *bad[] = {"", "4242 tpud S 1", "4242 (tpud) S 1 2 3", ")( 1 2",
                       "4242 (tpud) S 1 4242 4242 0 -1 4194560 1500 0 0 0 x5 75 0 0 20 0 9 0 "
                       "123456 987654321 2048\n",
                       "4242 (tpud) S 1 4242 4242 0 -1 4194560 1500 0 0 0 250 75 0 0 20 0 9 0 "
                       "99999999999999999999999 1 2\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CU_ASSERT_EQUAL(tpu_metrics_parse_proc_stat(bad[i], &cpu, &start, &vsize, &rss), -1);
}

/* This process's figures are sane and the families well formed. */
static void test_process(void) {
  tpu_process_stats_t ps;
  CU_ASSERT_EQUAL_FATAL(tpu_metrics_process_stats(&ps), 0);
  CU_ASSERT(ps.resident_bytes > 1024 * 1024 && ps.resident_bytes <= ps.virtual_bytes);
  CU_ASSERT(ps.open_fds >= 3 && ps.open_fds <= ps.max_fds);
  CU_ASSERT(ps.start_time > 1.6e9 && ps.start_time < 4.1e9);
  CU_ASSERT(ps.cpu_seconds >= 0 && ps.cpu_seconds < 1e6);
  tpu_buf_t b = {0};
  tpu_metrics_process(&b, &ps);
  CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "# TYPE process_cpu_seconds_total counter\n"));
  CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\nprocess_max_fds "));
  tpu_buf_free(&b);
}

TPU_TEST_SUITE(front_metrics, {"proc_stat", test_proc_stat}, {"process", test_process},
               {"family", test_family},
               {"u64", test_u64},
               {"label_escaping", test_label_escaping},
               {"double", test_double},
               {"double_round_trip", test_double_round_trip},
               {"histogram", test_histogram},
               {"histogram_us_bounds", test_histogram_us_bounds},
               {"histogram_random", test_histogram_random})
