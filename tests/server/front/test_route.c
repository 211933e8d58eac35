/*
 * test_route.c - the HTTP port's routes (server/front/route.c) from paths alone: splitting and
 * percent-decoding, every endpoint and its Allow string, which HTTP methods each takes, and what
 * each path needs before anything else is said about it.
 */
#include <stdio.h>
#include <string.h>

#include "http_parser.h"
#include "route.h"
#include "tpu_envelope.h"
#include "tpu_test.h"

#define MAXSEG 8 /* as http.c splits */

/* Splits a copy of `path` (buf must outlive seg). */
static int split(const char *path, char *buf, size_t len, char **seg, int max) {
  snprintf(buf, len, "%s", path);
  return tpu__http_split_path(buf, seg, max);
}

static void test_split_plain(void) {
  char buf[256], *seg[MAXSEG];
  CU_ASSERT_EQUAL(split("/v2/models/digits/infer", buf, sizeof buf, seg, MAXSEG), 4);
  CU_ASSERT_STRING_EQUAL(seg[0], "v2");
  CU_ASSERT_STRING_EQUAL(seg[1], "models");
  CU_ASSERT_STRING_EQUAL(seg[2], "digits");
  CU_ASSERT_STRING_EQUAL(seg[3], "infer");
  CU_ASSERT_EQUAL(split("/", buf, sizeof buf, seg, MAXSEG), 0);
  CU_ASSERT_EQUAL(split("", buf, sizeof buf, seg, MAXSEG), 0);
  CU_ASSERT_EQUAL(split("/metrics", buf, sizeof buf, seg, MAXSEG), 1);
  CU_ASSERT_STRING_EQUAL(seg[0], "metrics");
  CU_ASSERT_EQUAL(split("v2/health", buf, sizeof buf, seg, MAXSEG), 2); /* no leading slash */
  CU_ASSERT_STRING_EQUAL(seg[1], "health");
}

static void test_split_trailing_slash(void) {
  char buf[256], *seg[MAXSEG];
  CU_ASSERT_EQUAL(split("/v2/", buf, sizeof buf, seg, MAXSEG), 1);
  CU_ASSERT_STRING_EQUAL(seg[0], "v2");
  CU_ASSERT_EQUAL(split("/v2/health/live/", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "live");
  /* Only one: a second makes an empty segment. */
  CU_ASSERT_EQUAL(split("/v2//", buf, sizeof buf, seg, MAXSEG), -1);
}

static void test_split_empty_segment(void) {
  char buf[256], *seg[MAXSEG];
  CU_ASSERT_EQUAL(split("//", buf, sizeof buf, seg, MAXSEG), -1);
  CU_ASSERT_EQUAL(split("/v2//models", buf, sizeof buf, seg, MAXSEG), -1);
  CU_ASSERT_EQUAL(split("//v2", buf, sizeof buf, seg, MAXSEG), -1);
  CU_ASSERT_EQUAL(split("/v2/models//infer", buf, sizeof buf, seg, MAXSEG), -1);
}

static void test_split_too_many(void) {
  char buf[256], *seg[MAXSEG];
  CU_ASSERT_EQUAL(split("/a/b/c", buf, sizeof buf, seg, 3), 3); /* exactly max */
  CU_ASSERT_EQUAL(split("/a/b/c/", buf, sizeof buf, seg, 3), 3);
  CU_ASSERT_EQUAL(split("/a/b/c/d", buf, sizeof buf, seg, 3), -1);
  CU_ASSERT_EQUAL(split("/1/2/3/4/5/6/7/8", buf, sizeof buf, seg, MAXSEG), 8);
  CU_ASSERT_EQUAL(split("/1/2/3/4/5/6/7/8/9", buf, sizeof buf, seg, MAXSEG), -1);
  CU_ASSERT_EQUAL(split("/a", buf, sizeof buf, seg, 0), -1);
  CU_ASSERT_EQUAL(split("/", buf, sizeof buf, seg, 0), 0); /* nothing to hold */
}

static void test_split_percent(void) {
  char buf[256], *seg[MAXSEG];
  CU_ASSERT_EQUAL(split("/v2/models/my%20model/ready", buf, sizeof buf, seg, MAXSEG), 4);
  CU_ASSERT_STRING_EQUAL(seg[2], "my model");
  CU_ASSERT_STRING_EQUAL(seg[3], "ready");
  CU_ASSERT_EQUAL(split("/v2/models/%64igits", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "digits");
  /* Decoded after the split: an encoded slash stays inside its segment. */
  CU_ASSERT_EQUAL(split("/v2/models/a%2Fb", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "a/b");
  /* '+' is not a space in a path; a '%' without two hex digits is itself. */
  CU_ASSERT_EQUAL(split("/v2/models/a+b%21", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "a+b!");
  CU_ASSERT_EQUAL(split("/v2/models/100%", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "100%");
  CU_ASSERT_EQUAL(split("/v2/models/%zz", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "%zz");
  /* Valid UTF-8, encoded or raw. */
  CU_ASSERT_EQUAL(split("/v2/models/caf%C3%A9", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "caf\xc3\xa9");
  CU_ASSERT_EQUAL(split("/v2/models/caf\xc3\xa9", buf, sizeof buf, seg, MAXSEG), 3);
  CU_ASSERT_STRING_EQUAL(seg[2], "caf\xc3\xa9");
}

static void test_split_refused(void) {
  char buf[256], *seg[MAXSEG];
  /* A NUL byte: "digits%00evil" must never be read as "digits". */
  CU_ASSERT_EQUAL(split("/v2/models/digits%00evil", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/v2/models/%00", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/%00/models", buf, sizeof buf, seg, MAXSEG), -2);
  /* Not UTF-8: a lone continuation byte, a truncated sequence, an overlong '/', a surrogate,
   * raw or encoded. */
  CU_ASSERT_EQUAL(split("/v2/models/%FF", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/v2/models/\xff", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/v2/models/%80x", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/v2/models/caf%C3", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/v2/models/%C0%AF", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/v2/models/%ED%A0%80", buf, sizeof buf, seg, MAXSEG), -2);
  CU_ASSERT_EQUAL(split("/v2/\xc3/ready", buf, sizeof buf, seg, MAXSEG), -2);
}

/* ---- endpoints ---- */

static tpu__endpoint_t match(const char *path) {
  static char buf[256]; /* the endpoint's model and version point into it */
  char *seg[MAXSEG];
  int n = split(path, buf, sizeof buf, seg, MAXSEG);
  return tpu__http_match(seg, n < 0 ? 0 : n); /* as http.c does */
}

static void expect_method(const char *path, int method, const char *allow, const char *model,
                          const char *version) {
  tpu__endpoint_t e = match(path);
  if (e.kind != TPU__EP_METHOD || e.method != method) {
    printf("\n  %s: kind %d method %d, want method %d\n", path, e.kind, e.method, method);
    CU_FAIL("wrong endpoint");
    return;
  }
  CU_ASSERT_STRING_EQUAL(e.allow, allow);
  if (model) {
    CU_ASSERT_PTR_NOT_NULL_FATAL(e.model);
    CU_ASSERT_STRING_EQUAL(e.model, model);
  } else {
    CU_ASSERT_PTR_NULL(e.model);
  }
  if (version) {
    CU_ASSERT_PTR_NOT_NULL_FATAL(e.version);
    CU_ASSERT_STRING_EQUAL(e.version, version);
  } else {
    CU_ASSERT_PTR_NULL(e.version);
  }
}

static void expect_page(const char *path, tpu__ep_kind_t kind) {
  tpu__endpoint_t e = match(path);
  if (e.kind != kind) {
    printf("\n  %s: kind %d, want %d\n", path, e.kind, kind);
    CU_FAIL("wrong endpoint");
    return;
  }
  CU_ASSERT_STRING_EQUAL(e.allow, "GET");
  CU_ASSERT_PTR_NULL(e.model);
  CU_ASSERT_PTR_NULL(e.version);
}

static void test_match_server(void) {
  expect_method("/v2", TPUD__METHOD__SERVER_METADATA, "GET", NULL, NULL);
  expect_method("/v2/", TPUD__METHOD__SERVER_METADATA, "GET", NULL, NULL);
  expect_method("/v2/health/live", TPUD__METHOD__SERVER_LIVE, "GET", NULL, NULL);
  expect_method("/v2/health/ready", TPUD__METHOD__SERVER_READY, "GET", NULL, NULL);
  expect_method("/v2/repository/index", TPUD__METHOD__REPOSITORY_INDEX, "GET, POST", NULL,
                NULL);
}

static void test_match_pages(void) {
  expect_page("/metrics", TPU__EP_METRICS);
  expect_page("/metrics/", TPU__EP_METRICS);
  expect_page("/v2/debug/config", TPU__EP_DEBUG_CONFIG);
  expect_page("/v2/debug/models", TPU__EP_DEBUG_MODELS);
  expect_page("/v2/debug/engine", TPU__EP_DEBUG_ENGINE);
}

static void test_match_models(void) {
  expect_method("/v2/models/m", TPUD__METHOD__MODEL_METADATA, "GET", "m", NULL);
  expect_method("/v2/models/m/ready", TPUD__METHOD__MODEL_READY, "GET", "m", NULL);
  expect_method("/v2/models/m/infer", TPUD__METHOD__MODEL_INFER, "POST", "m", NULL);
  expect_method("/v2/models/m/versions/3", TPUD__METHOD__MODEL_METADATA, "GET", "m", "3");
  expect_method("/v2/models/m/versions/3/ready", TPUD__METHOD__MODEL_READY, "GET", "m", "3");
  expect_method("/v2/models/m/versions/3/infer", TPUD__METHOD__MODEL_INFER, "POST", "m", "3");
  expect_method("/v2/models/m/versions/3/infer/", TPUD__METHOD__MODEL_INFER, "POST", "m", "3");
  /* Names are decoded; the version is whatever the segment says (dispatch checks it). */
  expect_method("/v2/models/my%20model/versions/x/ready", TPUD__METHOD__MODEL_READY, "GET",
                "my model", "x");
  /* A model named like a keyword is still a model. */
  expect_method("/v2/models/ready", TPUD__METHOD__MODEL_METADATA, "GET", "ready", NULL);
  expect_method("/v2/models/versions/ready", TPUD__METHOD__MODEL_READY, "GET", "versions", NULL);
  /* KServe V1 / TF Serving REST: the verb after a colon on the last segment. */
  expect_method("/v1/models/digits", TPUD__METHOD__MODEL_READY, "GET", "digits", NULL);
  expect_method("/v1/models/digits:predict", TPUD__METHOD__MODEL_INFER, "POST", "digits", NULL);
  expect_method("/v1/models/digits/versions/2:predict", TPUD__METHOD__MODEL_INFER, "POST",
                "digits", "2");
  expect_method("/v1/models/digits/versions/2", TPUD__METHOD__MODEL_READY, "GET", "digits", "2");
  CU_ASSERT_EQUAL(match("/v1/models/digits:predict").v1, 1);
  CU_ASSERT_EQUAL(match("/v2/models/digits/infer").v1, 0);
}

static void test_match_none(void) {
  const char *none[] = {
      "/", "/metric", "/metrics/x", "/v1", "/v3/health/live", "/V2", "/v1/models",
      "/v1/models/m:explain", "/v1/models/m/versions", "/v1/models/m/x/2", "/v1/models/m/predict",
      "/v2/health", "/v2/health/dead", "/v2/health/live/x",
      "/v2/repository", "/v2/repository/index/x", "/v2/repository/models",
      "/v2/debug", "/v2/debug/other", "/v2/debug/config/x",
      "/v2/models", "/v2/models/m/versions", "/v2/models/m/explain", "/v2/models/m/ready/x",
      "/v2/models/m/infer/x", "/v2/models/m/versions/3/other", "/v2/models/m/versions/3/ready/x",
      "/v2/models/m/x/ready",
      "//",                       /* split refuses it (-1): no segments to match */
      "/v2//health/live",
      "/1/2/3/4/5/6/7/8/9",       /* too many */
  };
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    tpu__endpoint_t e = match(none[i]);
    if (e.kind != TPU__EP_NONE) {
      printf("\n  %s: kind %d method %d, want none\n", none[i], e.kind, e.method);
      CU_FAIL("a path that names nothing matched");
    }
    CU_ASSERT_PTR_NOT_NULL(e.allow); /* http.c may print it: never NULL */
  }
}

static void test_allowed(void) {
  CU_ASSERT_TRUE(tpu__http_allowed("GET", TPU_HTTP_GET));
  CU_ASSERT_TRUE(tpu__http_allowed("GET", TPU_HTTP_HEAD)); /* HEAD counts as GET */
  CU_ASSERT_FALSE(tpu__http_allowed("GET", TPU_HTTP_POST));
  CU_ASSERT_FALSE(tpu__http_allowed("GET", TPU_HTTP_OTHER));
  CU_ASSERT_TRUE(tpu__http_allowed("POST", TPU_HTTP_POST));
  CU_ASSERT_FALSE(tpu__http_allowed("POST", TPU_HTTP_GET));
  CU_ASSERT_FALSE(tpu__http_allowed("POST", TPU_HTTP_HEAD));
  CU_ASSERT_FALSE(tpu__http_allowed("POST", TPU_HTTP_OTHER));
  CU_ASSERT_TRUE(tpu__http_allowed("GET, POST", TPU_HTTP_GET));
  CU_ASSERT_TRUE(tpu__http_allowed("GET, POST", TPU_HTTP_HEAD));
  CU_ASSERT_TRUE(tpu__http_allowed("GET, POST", TPU_HTTP_POST));
  CU_ASSERT_FALSE(tpu__http_allowed("GET, POST", TPU_HTTP_OTHER));
  /* What every endpoint allows, through the router. */
  CU_ASSERT_TRUE(tpu__http_allowed(match("/v2/models/m/infer").allow, TPU_HTTP_POST));
  CU_ASSERT_FALSE(tpu__http_allowed(match("/v2/models/m/infer").allow, TPU_HTTP_GET));
  CU_ASSERT_TRUE(tpu__http_allowed(match("/v2/repository/index").allow, TPU_HTTP_POST));
  CU_ASSERT_TRUE(tpu__http_allowed(match("/v2/repository/index").allow, TPU_HTTP_HEAD));
  CU_ASSERT_FALSE(tpu__http_allowed(match("/metrics").allow, TPU_HTTP_POST));
  CU_ASSERT_TRUE(tpu__http_allowed(match("/metrics").allow, TPU_HTTP_HEAD));
  CU_ASSERT_FALSE(tpu__http_allowed(match("/v2/health/live").allow, TPU_HTTP_POST));
}

static tpu_need_t need(int open_metrics, int open_health, const char *path) {
  char buf[256], *seg[MAXSEG];
  int n = split(path, buf, sizeof buf, seg, MAXSEG);
  return tpu__http_path_need(open_metrics, open_health, seg, n < 0 ? 0 : n);
}

static void test_path_need(void) {
  for (int om = 0; om <= 1; om++)
    for (int oh = 0; oh <= 1; oh++) {
      CU_ASSERT_EQUAL(need(om, oh, "/metrics"), om ? TPU_NEED_OPEN : TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/health/live"), oh ? TPU_NEED_OPEN : TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/health/ready"), oh ? TPU_NEED_OPEN : TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/debug/config"), TPU_NEED_ADMIN);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/debug/models"), TPU_NEED_ADMIN);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/debug/engine"), TPU_NEED_ADMIN);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/debug"), TPU_NEED_ADMIN); /* even the 404s under it */
      CU_ASSERT_EQUAL(need(om, oh, "/v2/debug/nothing/here"), TPU_NEED_ADMIN);
      CU_ASSERT_EQUAL(need(om, oh, "/v2"), TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/models/m/infer"), TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/models/m/ready"), TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/repository/index"), TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/nothing"), TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/"), TPU_NEED_INFER);
      /* Open health is any third segment under /v2/health (one that names nothing is a 404
       * either way), nothing shallower or deeper. */
      CU_ASSERT_EQUAL(need(om, oh, "/v2/health/other"), oh ? TPU_NEED_OPEN : TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/health"), TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/v2/health/live/x"), TPU_NEED_INFER);
      CU_ASSERT_EQUAL(need(om, oh, "/metrics/x"), TPU_NEED_INFER);
    }
}

TPU_TEST_SUITE(front_route,
               {"split_plain", test_split_plain},
               {"split_trailing_slash", test_split_trailing_slash},
               {"split_empty_segment", test_split_empty_segment},
               {"split_too_many", test_split_too_many},
               {"split_percent", test_split_percent},
               {"split_refused", test_split_refused},
               {"match_server", test_match_server},
               {"match_pages", test_match_pages},
               {"match_models", test_match_models},
               {"match_none", test_match_none},
               {"allowed", test_allowed},
               {"path_need", test_path_need})
