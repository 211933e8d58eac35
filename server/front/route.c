/*
 * route.c - the HTTP port's routes (route.h): paths to endpoints, pure functions of the path.
 */
#include "route.h"

#include <event2/http.h> /* evhttp_uridecode only */
#include <stdlib.h>
#include <string.h>

#include "http_parser.h"
#include "tpu_envelope.h"
#include "tpu_frame.h"

/* Splits the path into at most `max` segments (in place, percent-decoded). Returns the count,
 * -1 for too many segments or an empty one, -2 for a segment that is not UTF-8 or decodes to a
 * NUL byte (names are C strings: "digits%00evil" must not be read as "digits"). */
int tpu__http_split_path(char *path, char **seg, int max) {
  int n = 0;
  char *p = path;
  if (*p == '/') p++;
  if (!*p) return 0;
  for (;;) {
    if (n == max) return -1;
    char *slash = strchr(p, '/');
    if (slash) *slash = 0;
    if (!*p) return -1;
    if (strchr(p, '%')) {
      size_t dlen = 0;
      char *dec = evhttp_uridecode(p, 0, &dlen);
      if (!dec) return -1;
      int nul = strlen(dec) != dlen;
      if (!nul && dlen <= strlen(p)) strcpy(p, dec);
      free(dec);
      if (nul) return -2;
    }
    if (!tpu_utf8_valid((const uint8_t *)p, strlen(p))) return -2;
    seg[n++] = p;
    if (!slash) break;
    p = slash + 1;
    if (!*p) break; /* a trailing slash is allowed */
  }
  return n;
}

tpu__endpoint_t tpu__http_match(char **seg, int n) {
  tpu__endpoint_t e = {.kind = TPU__EP_NONE, .allow = "GET"};
#define IS(i, lit) (strcmp(seg[i], lit) == 0)
  if (n == 1 && IS(0, "metrics")) {
    e.kind = TPU__EP_METRICS;
  } else if ((n == 3 || (n == 5 && IS(3, "versions"))) && IS(0, "v1") && IS(1, "models")) {
    /* KServe V1 / TF Serving REST: /v1/models/{m}[/versions/{v}][:predict] */
    char *last = seg[n - 1];
    size_t len = strlen(last);
    int predict = len > 8 && strcmp(last + len - 8, ":predict") == 0;
    if (predict) last[len - 8] = '\0'; /* the name (or version) without its verb */
    if (!strchr(last, ':')) {
      e = (tpu__endpoint_t){.kind = TPU__EP_METHOD, .v1 = 1, .model = seg[2],
                            .version = n == 5 ? seg[4] : NULL,
                            .method = predict ? TPUD__METHOD__MODEL_INFER
                                              : TPUD__METHOD__MODEL_READY,
                            .allow = predict ? "POST" : "GET"};
    }
  } else if (n < 1 || !IS(0, "v2")) {
  } else if (n == 1) {
    e = (tpu__endpoint_t){.kind = TPU__EP_METHOD, .method = TPUD__METHOD__SERVER_METADATA, .allow = "GET"};
  } else if (n == 3 && IS(1, "health") && (IS(2, "live") || IS(2, "ready"))) {
    e = (tpu__endpoint_t){.kind = TPU__EP_METHOD, .allow = "GET",
                     .method = IS(2, "live") ? TPUD__METHOD__SERVER_LIVE
                                             : TPUD__METHOD__SERVER_READY};
  } else if (n == 3 && IS(1, "repository") && IS(2, "index")) {
    e = (tpu__endpoint_t){.kind = TPU__EP_METHOD, .method = TPUD__METHOD__REPOSITORY_INDEX,
                     .allow = "GET, POST"};
  } else if (n == 5 && IS(1, "repository") && IS(2, "models") &&
             (IS(4, "load") || IS(4, "unload"))) {
    /* Triton's model repository extension: /v2/repository/models/{m}/load|unload */
    e = (tpu__endpoint_t){.kind = TPU__EP_METHOD, .allow = "POST", .model = seg[3],
                          .method = IS(4, "load") ? TPUD__METHOD__MODEL_LOAD
                                                  : TPUD__METHOD__MODEL_UNLOAD};
  } else if (n == 3 && IS(1, "debug")) {
    e.kind = IS(2, "config") ? TPU__EP_DEBUG_CONFIG : IS(2, "models") ? TPU__EP_DEBUG_MODELS
             : IS(2, "engine") ? TPU__EP_DEBUG_ENGINE : TPU__EP_NONE;
  } else if (n == 3 && IS(1, "models") && IS(2, "stats")) {
    /* Triton's statistics of every model (as in Triton, a model named "stats" loses this) */
    e = (tpu__endpoint_t){.kind = TPU__EP_METHOD, .method = TPUD__METHOD__OIP_MODEL_STATISTICS,
                          .allow = "GET"};
  } else if (n >= 3 && IS(1, "models")) {
    /* /v2/models/{m}[/versions/{v}][/ready|/infer] */
    int i = 3;
    e.model = seg[2];
    if (n >= 5 && IS(3, "versions")) {
      e.version = seg[4];
      i = 5;
    }
    if (i == n)
      e.method = TPUD__METHOD__MODEL_METADATA;
    else if (i + 1 == n && IS(i, "ready"))
      e.method = TPUD__METHOD__MODEL_READY;
    else if (i + 1 == n && IS(i, "infer"))
      e.method = TPUD__METHOD__MODEL_INFER, e.allow = "POST";
    else if (i + 1 == n && IS(i, "config"))
      e.method = TPUD__METHOD__OIP_MODEL_CONFIG;
    else if (i + 1 == n && IS(i, "stats"))
      e.method = TPUD__METHOD__OIP_MODEL_STATISTICS;
    if (e.method) e.kind = TPU__EP_METHOD;
  }
#undef IS
  return e;
}

tpu_need_t tpu__http_path_need(int open_metrics, int open_health, char **seg, int n) {
  if (n == 1 && strcmp(seg[0], "metrics") == 0)
    return open_metrics ? TPU_NEED_OPEN : TPU_NEED_INFER;
  if (n == 3 && strcmp(seg[0], "v2") == 0 && strcmp(seg[1], "health") == 0)
    return open_health ? TPU_NEED_OPEN : TPU_NEED_INFER;
  if (n >= 2 && strcmp(seg[0], "v2") == 0 && strcmp(seg[1], "debug") == 0) return TPU_NEED_ADMIN;
  return TPU_NEED_INFER;
}

int tpu__http_allowed(const char *allow, int method) {
  if (method == TPU_HTTP_POST) return strstr(allow, "POST") != NULL;
  return (method == TPU_HTTP_GET || method == TPU_HTTP_HEAD) && strstr(allow, "GET") != NULL;
}

