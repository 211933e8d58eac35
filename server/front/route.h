/*
 * route.h - the HTTP port's routes: which endpoint a path names, what it allows and needs. Pure
 * functions of the path (no server, no socket), so they are unit-tested alone.
 */
#ifndef TPU_ROUTE_H
#define TPU_ROUTE_H

#include "auth.h"

/* The endpoints: a method of the one request path, or a page of the HTTP port's own. */
typedef enum {
  TPU__EP_NONE, TPU__EP_METHOD, TPU__EP_METRICS, TPU__EP_DEBUG_CONFIG, TPU__EP_DEBUG_MODELS,
  TPU__EP_DEBUG_ENGINE
} tpu__ep_kind_t;

typedef struct {
  tpu__ep_kind_t kind;
  int method;              /* TPU__EP_METHOD: the Tpud__Method */
  const char *allow;       /* the HTTP methods it takes, as an Allow header says them */
  const char *model, *version; /* /v2/models/{model}[/versions/{version}]..., else NULL */
  int v1;                  /* KServe V1 / TF Serving REST (/v1/models/...): its bodies */
} tpu__endpoint_t;

/* Splits the path into at most `max` segments (in place, percent-decoded). Returns the count,
 * -1 for too many segments or an empty one, -2 for a segment that is not UTF-8 or decodes to a
 * NUL byte (names are C strings: "digits%00evil" must not be read as "digits"). */
int tpu__http_split_path(char *path, char **seg, int max);
/* What the n segments name; kind TPU__EP_NONE when nothing (404). */
tpu__endpoint_t tpu__http_match(char **seg, int n);
/* What a path needs before anything else is said about it (auth.h): health is open with
 * --auth-open-health, /metrics with --auth-open-metrics, /v2/debug needs admin, the rest infer. */
tpu_need_t tpu__http_path_need(int open_metrics, int open_health, char **seg, int n);
/* Whether an endpoint that allows `allow` ("GET", "GET, POST", "POST") takes the parsed HTTP
 * method (http_parser.h: HEAD counts as GET). */
int tpu__http_allowed(const char *allow, int method);

#endif /* TPU_ROUTE_H */
