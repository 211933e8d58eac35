/*
 * onnx_graph.c - decoded ONNX model to graph IR (see onnx_graph.h for what it owns).
 */
#include "onnx_graph.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tpu_status_t fail(char *err, size_t errlen, tpu_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static tpu_status_t fail(char *err, size_t errlen, tpu_status_t st, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return st;
}

/* The graph's message for a failed call. */
static tpu_status_t gfail(const tpu_graph_t *g, char *err, size_t errlen, tpu_status_t st) {
  return fail(err, errlen, st, "%s", tpu_graph_error(g));
}

static const char *onnx_type_name(int t) {
  const char *s = tpu_onnx_dtype_name(t);
  return s ? s : "an unknown type";
}

/* The graph dtype of ONNX type `t` of the thing described by `what` and `name`, or a refusal. */
static tpu_status_t map_dtype(int t, const char *what, const char *name, tpu_graph_dtype_t *d,
                              char *err, size_t errlen) {
  *d = tpu_graph_dtype_from_onnx(t);
  if (*d == TPU_GRAPH_UNDEFINED)
    return fail(err, errlen, TPU_ENOTSUP, "%s '%s': element type %s is not supported (FLOAT, "
                "FLOAT16, BFLOAT16, DOUBLE, INT64, INT32, INT8, UINT8, BOOL)", what, name,
                onnx_type_name(t));
  return TPU_OK;
}

static tpu_status_t check_rank(size_t ndim, const char *what, const char *name, char *err,
                               size_t errlen) {
  if (ndim > TPU_GRAPH_MAX_RANK)
    return fail(err, errlen, TPU_ENOTSUP, "%s '%s': rank %zu exceeds the limit of %d", what,
                name, ndim, TPU_GRAPH_MAX_RANK);
  return TPU_OK;
}

/* "node 'name' (Op)" or "node #i (Op)", for messages about a node before the graph has it. */
static void node_label(const tpu_onnx_node_t *nd, size_t i, char *buf, size_t len) {
  if (nd->name && nd->name[0]) snprintf(buf, len, "node '%s' (%s)", nd->name, nd->op_type);
  else snprintf(buf, len, "node #%zu (%s)", i, nd->op_type);
}

/* Copies one decoded attribute onto graph node `gi`. */
static tpu_status_t add_attr(tpu_graph_t *g, size_t gi, const tpu_onnx_node_t *nd, size_t ni,
                             const tpu_onnx_attr_t *a, char *err, size_t errlen) {
  char lb[300];
  tpu_graph_attr_t ga = {.name = a->name};
  char *str = NULL;
  const char **list = NULL;
  tpu_status_t st;
  switch (a->type) {
  case TPU_ONNX_ATTR_FLOAT:
    ga.type = TPU_GRAPH_ATTR_FLOAT;
    ga.f = a->f;
    break;
  case TPU_ONNX_ATTR_INT:
    ga.type = TPU_GRAPH_ATTR_INT;
    ga.i = a->i;
    break;
  case TPU_ONNX_ATTR_STRING:
    /* The graph holds NUL-terminated text; ONNX strings are bytes. */
    if (a->s.len && memchr(a->s.data, 0, a->s.len)) {
      node_label(nd, ni, lb, sizeof lb);
      return fail(err, errlen, TPU_ENOTSUP, "%s: attribute '%s': string holds a NUL byte",
                  lb, a->name);
    }
    str = malloc(a->s.len + 1);
    if (!str) {
      node_label(nd, ni, lb, sizeof lb);
      return fail(err, errlen, TPU_ENOMEM, "%s: attribute '%s': out of memory", lb, a->name);
    }
    if (a->s.len) memcpy(str, a->s.data, a->s.len);
    str[a->s.len] = 0;
    ga.type = TPU_GRAPH_ATTR_STRING;
    ga.s = str;
    break;
  case TPU_ONNX_ATTR_FLOATS:
    ga.type = TPU_GRAPH_ATTR_FLOATS;
    ga.n = a->n;
    ga.floats = a->floats;
    break;
  case TPU_ONNX_ATTR_INTS:
    ga.type = TPU_GRAPH_ATTR_INTS;
    ga.n = a->n;
    ga.ints = a->ints;
    break;
  case TPU_ONNX_ATTR_TENSOR: {
    char what[400];
    node_label(nd, ni, lb, sizeof lb);
    snprintf(what, sizeof what, "%s: attribute", lb);
    if ((st = map_dtype(a->t->dtype, what, a->name, &ga.t_dtype, err, errlen)) != TPU_OK ||
        (st = check_rank(a->t->ndim, what, a->name, err, errlen)) != TPU_OK)
      return st;
    ga.type = TPU_GRAPH_ATTR_TENSOR;
    ga.t_rank = (int)a->t->ndim;
    ga.t_dims = a->t->dims;
    ga.t_data = a->t->data;
    ga.t_bytes = a->t->nbytes;
    break;
  }
  case TPU_ONNX_ATTR_STRINGS: /* text, as for STRING; one block holds them all */ {
    size_t total = 0;
    for (size_t k = 0; k < a->n; k++) {
      if (a->strings[k].len && memchr(a->strings[k].data, 0, a->strings[k].len)) {
        node_label(nd, ni, lb, sizeof lb);
        return fail(err, errlen, TPU_ENOTSUP, "%s: attribute '%s': string %zu holds a NUL "
                    "byte", lb, a->name, k);
      }
      total += a->strings[k].len + 1; /* bounded by the model's bytes */
    }
    list = malloc((a->n ? a->n : 1) * sizeof *list);
    str = malloc(total ? total : 1);
    if (!list || !str) {
      free(list);
      free(str);
      node_label(nd, ni, lb, sizeof lb);
      return fail(err, errlen, TPU_ENOMEM, "%s: attribute '%s': out of memory", lb, a->name);
    }
    char *at = str;
    for (size_t k = 0; k < a->n; k++) {
      if (a->strings[k].len) memcpy(at, a->strings[k].data, a->strings[k].len);
      at[a->strings[k].len] = 0;
      list[k] = at;
      at += a->strings[k].len + 1;
    }
    ga.type = TPU_GRAPH_ATTR_STRINGS;
    ga.n = a->n;
    ga.strings = list;
    break;
  }
  default: /* TENSORS: the graph has no list-of-tensors type */
    node_label(nd, ni, lb, sizeof lb);
    return fail(err, errlen, TPU_ENOTSUP, "%s: attribute '%s' is a list of tensors, which the "
                "graph IR does not hold", lb, a->name);
  }
  st = tpu_graph_add_attr(g, gi, &ga);
  free(list);
  free(str);
  return st == TPU_OK ? TPU_OK : gfail(g, err, errlen, st);
}

/* 1 when some initializer is called `name`. */
static int is_initializer(const tpu_onnx_model_t *m, const char *name) {
  for (size_t i = 0; i < m->ninitializers; i++)
    if (strcmp(m->initializers[i].name, name) == 0) return 1;
  return 0;
}

tpu_status_t tpu_onnx_to_graph(const tpu_onnx_model_t *m, tpu_graph_t **out, char *err,
                               size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!out) return fail(err, errlen, TPU_EINVAL, "onnx to graph: NULL output pointer");
  *out = NULL;
  if (!m) return fail(err, errlen, TPU_EINVAL, "onnx to graph: NULL model");
  tpu_graph_t *g = NULL;
  const char **names = NULL;
  tpu_status_t st = tpu_graph_new(&g);
  if (st != TPU_OK) return fail(err, errlen, st, "onnx to graph: out of memory");
  size_t most = m->ninputs > m->noutputs ? m->ninputs : m->noutputs;
  names = malloc((most ? most : 1) * sizeof *names);
  if (!names) {
    st = fail(err, errlen, TPU_ENOMEM, "onnx to graph: out of memory");
    goto fail;
  }

  /* Graph inputs, less those an initializer defines (the decoder marks them; the name check
   * covers a description built by hand). */
  size_t nin = 0;
  for (size_t i = 0; i < m->ninputs; i++) {
    const tpu_onnx_value_t *v = &m->inputs[i];
    if (v->initializer || is_initializer(m, v->name)) continue;
    tpu_graph_dtype_t d;
    int64_t dims[TPU_GRAPH_MAX_RANK];
    if ((st = map_dtype(v->dtype, "graph input", v->name, &d, err, errlen)) != TPU_OK ||
        (st = check_rank(v->ndim, "graph input", v->name, err, errlen)) != TPU_OK)
      goto fail;
    for (size_t k = 0; k < v->ndim; k++) /* the decoder allows -1 on dimension 0 only */
      dims[k] = v->dims[k] < 0 ? TPU_GRAPH_BATCH : v->dims[k];
    if ((st = tpu_graph_add_tensor(g, v->name, d, (int)v->ndim, dims)) != TPU_OK) goto gfail;
    names[nin++] = v->name;
  }

  for (size_t i = 0; i < m->ninitializers; i++) {
    const tpu_onnx_tensor_t *t = &m->initializers[i];
    tpu_graph_dtype_t d;
    if ((st = map_dtype(t->dtype, "initializer", t->name, &d, err, errlen)) != TPU_OK ||
        (st = check_rank(t->ndim, "initializer", t->name, err, errlen)) != TPU_OK)
      goto fail;
    if ((st = tpu_graph_add_initializer(g, t->name, d, (int)t->ndim, t->dims, t->data,
                                        t->nbytes)) != TPU_OK)
      goto gfail;
  }

  /* Graph outputs' stated types: inference checks its result against them. An output that is
   * also an input or an initializer already has its type. A symbolic dimension is "not
   * stated" (-1). */
  for (size_t i = 0; i < m->noutputs; i++) {
    const tpu_onnx_value_t *v = &m->outputs[i];
    tpu_graph_dtype_t d;
    if ((st = map_dtype(v->dtype, "graph output", v->name, &d, err, errlen)) != TPU_OK ||
        (st = check_rank(v->ndim, "graph output", v->name, err, errlen)) != TPU_OK)
      goto fail;
    if (tpu_graph_find(g, v->name) >= 0) continue;
    int64_t dims[TPU_GRAPH_MAX_RANK];
    for (size_t k = 0; k < v->ndim; k++) dims[k] = v->dims[k] < 0 ? -1 : v->dims[k];
    if ((st = tpu_graph_add_tensor(g, v->name, d, (int)v->ndim, dims)) != TPU_OK) goto gfail;
  }

  for (size_t i = 0; i < m->nnodes; i++) {
    const tpu_onnx_node_t *nd = &m->nodes[i];
    if (nd->opset < 1 || nd->opset > INT_MAX) {
      char lb[300];
      node_label(nd, i, lb, sizeof lb);
      st = fail(err, errlen, TPU_EINVAL, "%s: opset %lld of domain '%s' is out of range", lb,
                (long long)nd->opset, nd->domain);
      goto fail;
    }
    size_t gi;
    if ((st = tpu_graph_add_node(g, nd->name, nd->op_type, nd->domain, (int)nd->opset,
                                 nd->ninputs, (const char *const *)nd->inputs, nd->noutputs,
                                 (const char *const *)nd->outputs, &gi)) != TPU_OK)
      goto gfail;
    for (size_t k = 0; k < nd->nattrs; k++)
      if ((st = add_attr(g, gi, nd, i, &nd->attrs[k], err, errlen)) != TPU_OK) goto fail;
  }

  if ((st = tpu_graph_set_inputs(g, nin, names)) != TPU_OK) goto gfail;
  for (size_t i = 0; i < m->noutputs; i++) names[i] = m->outputs[i].name;
  if ((st = tpu_graph_set_outputs(g, m->noutputs, names)) != TPU_OK) goto gfail;
  if ((st = tpu_graph_validate(g)) != TPU_OK) goto gfail;
  free(names);
  *out = g;
  return TPU_OK;
gfail:
  gfail(g, err, errlen, st);
fail:
  free(names);
  tpu_graph_free(g);
  return st;
}
