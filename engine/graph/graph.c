/*
 * graph.c - the op-graph IR: building, validation (definitions, single producers, topological
 * order) and reading back.
 *
 * DESIGN
 * Owns every byte of a graph: names, initializer data, attribute payloads. Tensors are created
 * on first mention (a node input or output, a declaration) and found by name through an
 * open-addressing hash table, so building a graph of n nodes costs O(n). Each add either
 * succeeds whole or leaves the graph unchanged (tensors first mentioned by a failed add are
 * removed again). Shape inference lives in infer.c and shares the structures of graph_internal.h.
 * Nothing here does I/O or runs an op.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

size_t tpu_graph_dtype_size(tpu_graph_dtype_t d) {
  switch (d) {
  case TPU_GRAPH_FP64:
  case TPU_GRAPH_INT64: return 8;
  case TPU_GRAPH_FP32:
  case TPU_GRAPH_INT32: return 4;
  case TPU_GRAPH_FP16:
  case TPU_GRAPH_BF16: return 2;
  case TPU_GRAPH_INT8:
  case TPU_GRAPH_UINT8:
  case TPU_GRAPH_BOOL: return 1;
  default: return 0;
  }
}

const char *tpu_graph_dtype_name(tpu_graph_dtype_t d) {
  switch (d) {
  case TPU_GRAPH_FP32: return "FP32";
  case TPU_GRAPH_FP16: return "FP16";
  case TPU_GRAPH_BF16: return "BF16";
  case TPU_GRAPH_FP64: return "FP64";
  case TPU_GRAPH_INT64: return "INT64";
  case TPU_GRAPH_INT32: return "INT32";
  case TPU_GRAPH_INT8: return "INT8";
  case TPU_GRAPH_UINT8: return "UINT8";
  case TPU_GRAPH_BOOL: return "BOOL";
  default: return NULL;
  }
}

tpu_graph_dtype_t tpu_graph_dtype_from_onnx(int t) {
  switch (t) { /* onnx.proto TensorProto.DataType */
  case 1: return TPU_GRAPH_FP32;
  case 2: return TPU_GRAPH_UINT8;
  case 3: return TPU_GRAPH_INT8;
  case 6: return TPU_GRAPH_INT32;
  case 7: return TPU_GRAPH_INT64;
  case 9: return TPU_GRAPH_BOOL;
  case 10: return TPU_GRAPH_FP16;
  case 11: return TPU_GRAPH_FP64;
  case 16: return TPU_GRAPH_BF16;
  default: return TPU_GRAPH_UNDEFINED;
  }
}

tpu_status_t tpu__graph_fail(tpu_graph_t *g, tpu_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
  return st;
}

const char *tpu__graph_node_label(const tpu_graph_t *g, size_t n, char *buf, size_t len) {
  const tpu__gnode_t *nd = &g->nodes[n];
  if (nd->name[0])
    snprintf(buf, len, "node '%s' (%s, opset %d)", nd->name, nd->op, nd->opset);
  else
    snprintf(buf, len, "node #%zu (%s, opset %d)", n, nd->op, nd->opset);
  return buf;
}

const char *tpu__graph_shape_str(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t at = 0;
  at += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, i ? ",%lld" : "%lld", (long long)dims[i]);
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

tpu_status_t tpu__graph_count(int rank, const int64_t *dims, size_t esize, size_t *elems,
                              size_t *bytes) {
  uint64_t n = 1, b;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return TPU_EINVAL;
    if (__builtin_mul_overflow(n, (uint64_t)dims[i], &n)) return TPU_EOVERFLOW;
  }
  if (__builtin_mul_overflow(n, (uint64_t)(esize ? esize : 1), &b) || b > TPU__GRAPH_MAX_BYTES)
    return TPU_EOVERFLOW;
  if (elems) *elems = (size_t)n;
  if (bytes) *bytes = (size_t)b;
  return TPU_OK;
}

/* ---- the name table ---- */

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static long find_tensor(const tpu_graph_t *g, const char *name) {
  if (!g->hcap) return -1;
  for (size_t i = (size_t)hash_name(name) & (g->hcap - 1);; i = (i + 1) & (g->hcap - 1)) {
    long t = g->htab[i];
    if (t < 0) return -1;
    if ((size_t)t >= g->ntensors) continue; /* stale after a rollback that could not rehash */
    if (strcmp(g->tensors[t].name, name) == 0) return t;
  }
}

static void hash_insert(tpu_graph_t *g, long t) {
  size_t i = (size_t)hash_name(g->tensors[t].name) & (g->hcap - 1);
  while (g->htab[i] >= 0) i = (i + 1) & (g->hcap - 1);
  g->htab[i] = t;
}

static tpu_status_t rehash(tpu_graph_t *g, size_t cap) {
  long *tab = malloc(cap * sizeof *tab);
  if (!tab) return TPU_ENOMEM;
  for (size_t i = 0; i < cap; i++) tab[i] = -1;
  free(g->htab);
  g->htab = tab;
  g->hcap = cap;
  for (size_t t = 0; t < g->ntensors; t++) hash_insert(g, (long)t);
  return TPU_OK;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static void tensor_clear_inferred(tpu__gtensor_t *t) {
  if (t->val_owned) free(t->val);
  t->val = NULL;
  t->val_owned = 0;
  t->vbytes = 0;
  t->known = 0;
}

/* Finds or creates the tensor `name`; *created says whether it is new (for rollback). */
static tpu_status_t intern(tpu_graph_t *g, const char *name, long *out, int *created) {
  long t = find_tensor(g, name);
  *created = 0;
  if (t >= 0) {
    *out = t;
    return TPU_OK;
  }
  if (g->ntensors == g->tcap) {
    size_t cap = g->tcap ? g->tcap * 2 : 16;
    tpu__gtensor_t *nt = realloc(g->tensors, cap * sizeof *nt);
    if (!nt) return TPU_ENOMEM;
    g->tensors = nt;
    g->tcap = cap;
  }
  if ((g->ntensors + 1) * 2 > g->hcap) {
    tpu_status_t st = rehash(g, g->hcap ? g->hcap * 2 : 32);
    if (st != TPU_OK) return st;
  }
  tpu__gtensor_t *nt = &g->tensors[g->ntensors];
  memset(nt, 0, sizeof *nt);
  nt->name = dup_str(name);
  if (!nt->name) return TPU_ENOMEM;
  nt->rank = -1;
  nt->producer = -1;
  t = (long)g->ntensors++;
  hash_insert(g, t);
  *out = t;
  *created = 1;
  return TPU_OK;
}

/* Removes tensors created since the count was `keep` (they are last, and referenced by nothing
 * that survives). */
static void rollback(tpu_graph_t *g, size_t keep) {
  if (g->ntensors == keep) return;
  while (g->ntensors > keep) {
    tpu__gtensor_t *t = &g->tensors[--g->ntensors];
    free(t->name);
  }
  (void)rehash(g, g->hcap); /* same capacity: only fails on ENOMEM, leaving stale slots */
}

static tpu_status_t check_builder(tpu_graph_t *g, const char *what) {
  if (g->validated)
    return tpu__graph_fail(g, TPU_EINVAL, "%s: the graph is already validated and takes no "
                           "more additions", what);
  return TPU_OK;
}

/* ---- building ---- */

tpu_status_t tpu_graph_new(tpu_graph_t **out) {
  if (!out) return TPU_EINVAL;
  *out = calloc(1, sizeof **out);
  return *out ? TPU_OK : TPU_ENOMEM;
}

static void free_attr(tpu_graph_attr_t *a) {
  free((void *)a->name);
  free((void *)a->s);
  free((void *)a->ints);
  free((void *)a->floats);
  free((void *)a->t_dims);
  free((void *)a->t_data);
  if (a->strings)
    for (size_t i = 0; i < a->n; i++) free((void *)a->strings[i]);
  free((void *)a->strings);
}

void tpu_graph_free(tpu_graph_t *g) {
  if (!g) return;
  for (size_t i = 0; i < g->ntensors; i++) {
    tensor_clear_inferred(&g->tensors[i]);
    free(g->tensors[i].name);
    free(g->tensors[i].data);
    free(g->tensors[i].qdata);
    free(g->tensors[i].qscales);
  }
  for (size_t i = 0; i < g->nnodes; i++) {
    tpu__gnode_t *n = &g->nodes[i];
    free(n->name);
    free(n->op);
    free(n->domain);
    free(n->in);
    free(n->out);
    for (size_t a = 0; a < n->nattrs; a++) free_attr(&n->attrs[a]);
    free(n->attrs);
  }
  free(g->tensors);
  free(g->nodes);
  free(g->htab);
  free(g->inputs);
  free(g->outputs);
  free(g->order);
  free(g);
}

const char *tpu_graph_error(const tpu_graph_t *g) { return g ? g->err : "no graph"; }

static tpu_status_t check_shape(tpu_graph_t *g, const char *what, const char *name, int rank,
                                const int64_t *dims, int allow_unknown) {
  if (rank < 0)
    return tpu__graph_fail(g, TPU_EINVAL, "%s '%s': rank %d is negative", what, name, rank);
  if (rank > TPU_GRAPH_MAX_RANK)
    return tpu__graph_fail(g, TPU_EOVERFLOW, "%s '%s': rank %d exceeds the limit of %d", what,
                           name, rank, TPU_GRAPH_MAX_RANK);
  if (rank > 0 && !dims)
    return tpu__graph_fail(g, TPU_EINVAL, "%s '%s': rank %d with no dimensions", what, name, rank);
  for (int i = 0; i < rank; i++)
    if (dims[i] < (allow_unknown ? -1 : 0))
      return tpu__graph_fail(g, TPU_EINVAL, "%s '%s': dimension %d is %lld, expected %s", what,
                             name, i, (long long)dims[i],
                             allow_unknown ? ">= 0 or -1" : ">= 0");
  return TPU_OK;
}

static int valid_dtype(tpu_graph_dtype_t d) { return tpu_graph_dtype_size(d) != 0; }

tpu_status_t tpu_graph_add_tensor(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dtype,
                                  int rank, const int64_t *dims) {
  if (!g) return TPU_EINVAL;
  if (!name || !*name) return tpu__graph_fail(g, TPU_EINVAL, "tensor: empty name");
  tpu_status_t st = check_builder(g, name);
  if (st != TPU_OK) return st;
  if (!valid_dtype(dtype))
    return tpu__graph_fail(g, TPU_EINVAL, "tensor '%s': unknown dtype %d", name, (int)dtype);
  if ((st = check_shape(g, "tensor", name, rank, dims, 1)) != TPU_OK) return st;
  long t = find_tensor(g, name);
  if (t >= 0 && g->tensors[t].is_init)
    return tpu__graph_fail(g, TPU_EINVAL, "tensor '%s': is an initializer, its type and shape "
                           "are the initializer's", name);
  if (t >= 0 && g->tensors[t].declared)
    return tpu__graph_fail(g, TPU_EINVAL, "tensor '%s': declared twice", name);
  int created;
  if ((st = intern(g, name, &t, &created)) != TPU_OK)
    return tpu__graph_fail(g, st, "tensor '%s': out of memory", name);
  tpu__gtensor_t *x = &g->tensors[t];
  x->declared = 1;
  x->dtype = dtype;
  x->rank = rank;
  for (int i = 0; i < rank; i++) x->dims[i] = dims[i];
  return TPU_OK;
}

/* Checks a dtype/shape/bytes triple for a constant and copies its data. */
static tpu_status_t copy_constant(tpu_graph_t *g, const char *what, const char *name,
                                  tpu_graph_dtype_t dtype, int rank, const int64_t *dims,
                                  const void *data, size_t bytes, void **copy) {
  tpu_status_t st;
  size_t need;
  char sh[160];
  if (!valid_dtype(dtype))
    return tpu__graph_fail(g, TPU_EINVAL, "%s '%s': unknown dtype %d", what, name, (int)dtype);
  if ((st = check_shape(g, what, name, rank, dims, 0)) != TPU_OK) return st;
  if (tpu__graph_count(rank, dims, tpu_graph_dtype_size(dtype), NULL, &need) != TPU_OK)
    return tpu__graph_fail(g, TPU_EOVERFLOW, "%s '%s': shape %s of %s overflows the size limit",
                           what, name, tpu__graph_shape_str(rank, dims, sh, sizeof sh),
                           tpu_graph_dtype_name(dtype));
  if (need != bytes)
    return tpu__graph_fail(g, TPU_ESHAPE, "%s '%s': shape %s of %s needs %zu bytes, got %zu",
                           what, name, tpu__graph_shape_str(rank, dims, sh, sizeof sh),
                           tpu_graph_dtype_name(dtype), need, bytes);
  if (bytes && !data)
    return tpu__graph_fail(g, TPU_EINVAL, "%s '%s': no data", what, name);
  *copy = malloc(bytes ? bytes : 1);
  if (!*copy) return tpu__graph_fail(g, TPU_ENOMEM, "%s '%s': out of memory", what, name);
  if (bytes) memcpy(*copy, data, bytes);
  return TPU_OK;
}

tpu_status_t tpu_graph_set_quantized(tpu_graph_t *g, const char *name, const int8_t *q,
                                     const float *scales, int axis) {
  if (!g) return TPU_EINVAL;
  long t = name ? find_tensor(g, name) : -1;
  tpu__gtensor_t *x = t >= 0 ? &g->tensors[t] : NULL;
  if (!x || !x->is_init || x->dtype != TPU_GRAPH_FP32 || x->rank != 2)
    return tpu__graph_fail(g, TPU_EINVAL, "quantized '%s': not an FP32 initializer of rank 2",
                           name ? name : "(null)");
  if (axis < 0 || axis > 1 || !q || !scales || x->qdata)
    return tpu__graph_fail(g, TPU_EINVAL, "quantized '%s': bad axis, data or a second call",
                           name);
  size_t n = (size_t)x->dims[0] * (size_t)x->dims[1], ns = (size_t)x->dims[axis];
  for (size_t i = 0; i < n; i++)
    if (q[i] == -128)
      return tpu__graph_fail(g, TPU_EINVAL, "quantized '%s': element %zu is -128 (symmetric "
                             "int8 is -127..127)", name, i);
  x->qdata = malloc(n ? n : 1);
  x->qscales = malloc((ns ? ns : 1) * sizeof *x->qscales);
  if (!x->qdata || !x->qscales) {
    free(x->qdata);
    free(x->qscales);
    x->qdata = NULL;
    x->qscales = NULL;
    return tpu__graph_fail(g, TPU_ENOMEM, "quantized '%s': out of memory", name);
  }
  memcpy(x->qdata, q, n);
  memcpy(x->qscales, scales, ns * sizeof *x->qscales);
  x->qaxis = axis;
  return TPU_OK;
}

tpu_status_t tpu_graph_add_initializer(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dtype,
                                       int rank, const int64_t *dims, const void *data,
                                       size_t bytes) {
  if (!g) return TPU_EINVAL;
  if (!name || !*name) return tpu__graph_fail(g, TPU_EINVAL, "initializer: empty name");
  tpu_status_t st = check_builder(g, name);
  if (st != TPU_OK) return st;
  long t = find_tensor(g, name);
  if (t >= 0) {
    const tpu__gtensor_t *x = &g->tensors[t];
    if (x->is_init) return tpu__graph_fail(g, TPU_EINVAL, "initializer '%s': given twice", name);
    if (x->producer >= 0) {
      char lb[200];
      return tpu__graph_fail(g, TPU_EINVAL, "initializer '%s': also produced by %s", name,
                             tpu__graph_node_label(g, (size_t)x->producer, lb, sizeof lb));
    }
    if (x->declared)
      return tpu__graph_fail(g, TPU_EINVAL, "initializer '%s': also declared as a tensor", name);
  }
  void *copy = NULL;
  if ((st = copy_constant(g, "initializer", name, dtype, rank, dims, data, bytes, &copy)) != TPU_OK)
    return st;
  int created;
  if ((st = intern(g, name, &t, &created)) != TPU_OK) {
    free(copy);
    return tpu__graph_fail(g, st, "initializer '%s': out of memory", name);
  }
  tpu__gtensor_t *x = &g->tensors[t];
  x->is_init = 1;
  x->dtype = dtype;
  x->rank = rank;
  for (int i = 0; i < rank; i++) x->dims[i] = dims[i];
  x->data = copy;
  x->bytes = bytes;
  return TPU_OK;
}

tpu_status_t tpu_graph_add_node(tpu_graph_t *g, const char *name, const char *op,
                                const char *domain, int opset, size_t nin,
                                const char *const *inputs, size_t nout,
                                const char *const *outputs, size_t *index) {
  if (!g) return TPU_EINVAL;
  const char *nm = name ? name : "";
  tpu_status_t st = check_builder(g, nm[0] ? nm : "node");
  if (st != TPU_OK) return st;
  if (!op || !*op) return tpu__graph_fail(g, TPU_EINVAL, "node '%s': no op name", nm);
  if (opset < 1)
    return tpu__graph_fail(g, TPU_EINVAL, "node '%s' (%s): opset %d, expected >= 1", nm, op, opset);
  if ((nin && !inputs) || (nout && !outputs) || nout == 0)
    return tpu__graph_fail(g, TPU_EINVAL, "node '%s' (%s): %s", nm, op,
                           nout == 0 ? "no outputs" : "NULL input or output list");
  if (nin > TPU__GRAPH_MAX_IO || nout > TPU__GRAPH_MAX_IO)
    return tpu__graph_fail(g, TPU_EOVERFLOW, "node '%s' (%s): %zu inputs and %zu outputs, at "
                           "most %d each", nm, op, nin, nout, TPU__GRAPH_MAX_IO);
  if (domain && strcmp(domain, "ai.onnx") == 0) domain = "";
  if (g->nnodes == g->ncap) {
    size_t cap = g->ncap ? g->ncap * 2 : 16;
    tpu__gnode_t *nn = realloc(g->nodes, cap * sizeof *nn);
    if (!nn) return tpu__graph_fail(g, TPU_ENOMEM, "node '%s': out of memory", nm);
    g->nodes = nn;
    g->ncap = cap;
  }
  size_t keep = g->ntensors, idx = g->nnodes;
  tpu__gnode_t nd = {0};
  nd.nin = nin;
  nd.nout = nout;
  nd.opset = opset;
  nd.name = dup_str(nm);
  nd.op = dup_str(op);
  nd.domain = dup_str(domain ? domain : "");
  nd.in = malloc((nin ? nin : 1) * sizeof *nd.in);
  nd.out = malloc(nout * sizeof *nd.out);
  if (!nd.name || !nd.op || !nd.domain || !nd.in || !nd.out) {
    st = tpu__graph_fail(g, TPU_ENOMEM, "node '%s': out of memory", nm);
    goto fail;
  }
  g->nodes[idx] = nd; /* so messages can label it; counted only on success */
  char lb[200];
  for (size_t i = 0; i < nin; i++) {
    int created;
    if (!inputs[i] || !inputs[i][0]) {
      nd.in[i] = -1;
      continue;
    }
    if ((st = intern(g, inputs[i], &nd.in[i], &created)) != TPU_OK) {
      st = tpu__graph_fail(g, st, "%s: out of memory",
                           tpu__graph_node_label(g, idx, lb, sizeof lb));
      goto fail;
    }
  }
  for (size_t i = 0; i < nout; i++) {
    int created;
    if (!outputs[i] || !outputs[i][0]) {
      nd.out[i] = -1;
      continue;
    }
    if ((st = intern(g, outputs[i], &nd.out[i], &created)) != TPU_OK) {
      st = tpu__graph_fail(g, st, "%s: out of memory",
                           tpu__graph_node_label(g, idx, lb, sizeof lb));
      goto fail;
    }
    const tpu__gtensor_t *x = &g->tensors[nd.out[i]];
    if (x->is_init) {
      st = tpu__graph_fail(g, TPU_EINVAL, "%s: output '%s' is also an initializer",
                           tpu__graph_node_label(g, idx, lb, sizeof lb), x->name);
      goto fail;
    }
    if (x->producer >= 0) {
      char lb2[200];
      st = tpu__graph_fail(g, TPU_EINVAL, "%s: output '%s' is already produced by %s",
                           tpu__graph_node_label(g, idx, lb, sizeof lb), x->name,
                           tpu__graph_node_label(g, (size_t)x->producer, lb2, sizeof lb2));
      goto fail;
    }
    for (size_t j = 0; j < i; j++)
      if (nd.out[j] == nd.out[i]) {
        st = tpu__graph_fail(g, TPU_EINVAL, "%s: output '%s' is listed twice",
                             tpu__graph_node_label(g, idx, lb, sizeof lb), x->name);
        goto fail;
      }
  }
  for (size_t i = 0; i < nout; i++)
    if (nd.out[i] >= 0) g->tensors[nd.out[i]].producer = (long)idx;
  g->nodes[idx] = nd;
  g->nnodes++;
  if (index) *index = idx;
  return TPU_OK;
fail:
  rollback(g, keep);
  free(nd.name);
  free(nd.op);
  free(nd.domain);
  free(nd.in);
  free(nd.out);
  return st;
}

tpu_status_t tpu_graph_add_attr(tpu_graph_t *g, size_t node, const tpu_graph_attr_t *a) {
  if (!g) return TPU_EINVAL;
  tpu_status_t st = check_builder(g, "attribute");
  if (st != TPU_OK) return st;
  if (node >= g->nnodes)
    return tpu__graph_fail(g, TPU_EINVAL, "attribute: no node #%zu (the graph has %zu)", node,
                           g->nnodes);
  char lb[200];
  tpu__graph_node_label(g, node, lb, sizeof lb);
  if (!a || !a->name || !a->name[0])
    return tpu__graph_fail(g, TPU_EINVAL, "%s: attribute with no name", lb);
  if (tpu_graph_attr(g, node, a->name))
    return tpu__graph_fail(g, TPU_EINVAL, "%s: attribute '%s' given twice", lb, a->name);
  tpu__gnode_t *n = &g->nodes[node];
  tpu_graph_attr_t c = {0};
  c.type = a->type;
  c.name = dup_str(a->name);
  if (!c.name) goto nomem;
  switch (a->type) {
  case TPU_GRAPH_ATTR_INT: c.i = a->i; break;
  case TPU_GRAPH_ATTR_FLOAT: c.f = a->f; break;
  case TPU_GRAPH_ATTR_STRING:
    if (!a->s) {
      st = tpu__graph_fail(g, TPU_EINVAL, "%s: attribute '%s': NULL string", lb, a->name);
      goto fail;
    }
    if (!(c.s = dup_str(a->s))) goto nomem;
    break;
  case TPU_GRAPH_ATTR_INTS:
  case TPU_GRAPH_ATTR_FLOATS: {
    const void *src =
        a->type == TPU_GRAPH_ATTR_INTS ? (const void *)a->ints : (const void *)a->floats;
    size_t es = a->type == TPU_GRAPH_ATTR_INTS ? sizeof(int64_t) : sizeof(float);
    if (a->n && !src) {
      st = tpu__graph_fail(g, TPU_EINVAL, "%s: attribute '%s': NULL values", lb, a->name);
      goto fail;
    }
    if (a->n > TPU__GRAPH_MAX_BYTES / es) {
      st = tpu__graph_fail(g, TPU_EOVERFLOW, "%s: attribute '%s': %zu values", lb, a->name, a->n);
      goto fail;
    }
    void *d = malloc(a->n ? a->n * es : 1);
    if (!d) goto nomem;
    if (a->n) memcpy(d, src, a->n * es);
    c.n = a->n;
    if (a->type == TPU_GRAPH_ATTR_INTS) c.ints = d;
    else c.floats = d;
    break;
  }
  case TPU_GRAPH_ATTR_STRINGS: {
    if (a->n && !a->strings) {
      st = tpu__graph_fail(g, TPU_EINVAL, "%s: attribute '%s': NULL strings", lb, a->name);
      goto fail;
    }
    if (a->n > TPU__GRAPH_MAX_BYTES / sizeof(char *)) {
      st = tpu__graph_fail(g, TPU_EOVERFLOW, "%s: attribute '%s': %zu strings", lb, a->name,
                           a->n);
      goto fail;
    }
    char **d = calloc(a->n ? a->n : 1, sizeof *d);
    if (!d) goto nomem;
    c.strings = (const char *const *)d;
    for (; c.n < a->n; c.n++) {
      if (!a->strings[c.n]) {
        st = tpu__graph_fail(g, TPU_EINVAL, "%s: attribute '%s': string %zu is NULL", lb,
                             a->name, c.n);
        goto fail;
      }
      if (!(d[c.n] = dup_str(a->strings[c.n]))) goto nomem;
    }
    break;
  }
  case TPU_GRAPH_ATTR_TENSOR: {
    char what[240];
    void *d = NULL;
    snprintf(what, sizeof what, "%s: attribute", lb);
    if ((st = copy_constant(g, what, a->name, a->t_dtype, a->t_rank, a->t_dims, a->t_data,
                            a->t_bytes, &d)) != TPU_OK)
      goto fail;
    c.t_data = d;
    int64_t *dims = malloc((a->t_rank ? (size_t)a->t_rank : 1) * sizeof *dims);
    if (!dims) goto nomem;
    for (int i = 0; i < a->t_rank; i++) dims[i] = a->t_dims[i];
    c.t_dims = dims;
    c.t_dtype = a->t_dtype;
    c.t_rank = a->t_rank;
    c.t_bytes = a->t_bytes;
    break;
  }
  default:
    st = tpu__graph_fail(g, TPU_EINVAL, "%s: attribute '%s': unknown type %d", lb, a->name,
                         (int)a->type);
    goto fail;
  }
  tpu_graph_attr_t *na = realloc(n->attrs, (n->nattrs + 1) * sizeof *na);
  if (!na) goto nomem;
  n->attrs = na;
  n->attrs[n->nattrs++] = c;
  return TPU_OK;
nomem:
  st = tpu__graph_fail(g, TPU_ENOMEM, "%s: attribute '%s': out of memory", lb, a->name);
fail:
  free_attr(&c);
  return st;
}

tpu_status_t tpu_graph_set_on_request(tpu_graph_t *g, const char *name) {
  if (!g || !name) return TPU_EINVAL;
  long t = find_tensor(g, name);
  if (t < 0 || !g->tensors[t].is_output)
    return tpu__graph_fail(g, TPU_EINVAL, "on request: '%s' is not a graph output", name);
  g->tensors[t].on_request = 1;
  return TPU_OK;
}

const tpu_graph_attr_t *tpu_graph_attr(const tpu_graph_t *g, size_t node, const char *name) {
  if (!g || node >= g->nnodes || !name) return NULL;
  const tpu__gnode_t *n = &g->nodes[node];
  for (size_t i = 0; i < n->nattrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

static tpu_status_t set_list(tpu_graph_t *g, int outputs, size_t n, const char *const *names) {
  const char *what = outputs ? "outputs" : "inputs";
  tpu_status_t st = check_builder(g, what);
  if (st != TPU_OK) return st;
  long **list = outputs ? &g->outputs : &g->inputs;
  size_t *count = outputs ? &g->noutputs : &g->ninputs;
  if (*list) return tpu__graph_fail(g, TPU_EINVAL, "graph %s: set twice", what);
  if (n && !names) return tpu__graph_fail(g, TPU_EINVAL, "graph %s: NULL list", what);
  long *l = malloc((n ? n : 1) * sizeof *l);
  if (!l) return tpu__graph_fail(g, TPU_ENOMEM, "graph %s: out of memory", what);
  size_t keep = g->ntensors;
  for (size_t i = 0; i < n; i++) {
    const char *nm = names[i];
    if (!nm || !*nm) {
      st = tpu__graph_fail(g, TPU_EINVAL, "graph %s: entry %zu has no name", what, i);
      goto fail;
    }
    long t = find_tensor(g, nm);
    if (!outputs) {
      if (t < 0 || !g->tensors[t].declared) {
        st = tpu__graph_fail(g, TPU_EINVAL, "graph input '%s': not declared with a dtype and "
                             "shape", nm);
        goto fail;
      }
      const tpu__gtensor_t *x = &g->tensors[t];
      if (x->is_init) {
        st = tpu__graph_fail(g, TPU_EINVAL, "graph input '%s': is also an initializer", nm);
        goto fail;
      }
      for (int d = 1; d < x->rank; d++)
        if (x->dims[d] < 0) {
          st = tpu__graph_fail(g, TPU_EINVAL, "graph input '%s': dimension %d is -1; only "
                               "dimension 0 (the batch) may be", nm, d);
          goto fail;
        }
    } else {
      int created;
      if ((st = intern(g, nm, &t, &created)) != TPU_OK) {
        st = tpu__graph_fail(g, st, "graph outputs: out of memory");
        goto fail;
      }
    }
    for (size_t j = 0; j < i; j++)
      if (l[j] == t) {
        st = tpu__graph_fail(g, TPU_EINVAL, "graph %s: '%s' is listed twice", what, nm);
        goto fail;
      }
    l[i] = t;
  }
  for (size_t i = 0; i < n; i++) {
    if (outputs) g->tensors[l[i]].is_output = 1;
    else g->tensors[l[i]].is_input = 1;
  }
  *list = l;
  *count = n;
  return TPU_OK;
fail:
  rollback(g, keep);
  free(l);
  return st;
}

tpu_status_t tpu_graph_set_inputs(tpu_graph_t *g, size_t n, const char *const *names) {
  return g ? set_list(g, 0, n, names) : TPU_EINVAL;
}

tpu_status_t tpu_graph_set_outputs(tpu_graph_t *g, size_t n, const char *const *names) {
  return g ? set_list(g, 1, n, names) : TPU_EINVAL;
}

/* ---- validation ---- */

tpu_status_t tpu_graph_validate(tpu_graph_t *g) {
  if (!g) return TPU_EINVAL;
  if (g->validated) return TPU_OK;
  char lb[200];
  if (!g->outputs || g->noutputs == 0)
    return tpu__graph_fail(g, TPU_EINVAL, "graph: no outputs");
  /* Definitions: a node input must be a graph input, an initializer or a node's output. */
  for (size_t n = 0; n < g->nnodes; n++) {
    const tpu__gnode_t *nd = &g->nodes[n];
    for (size_t i = 0; i < nd->nin; i++) {
      if (nd->in[i] < 0) continue;
      const tpu__gtensor_t *x = &g->tensors[nd->in[i]];
      if (!x->is_input && !x->is_init && x->producer < 0)
        return tpu__graph_fail(g, TPU_EINVAL, "%s: input '%s' is not defined (no graph input, "
                               "initializer or node output has that name)",
                               tpu__graph_node_label(g, n, lb, sizeof lb), x->name);
    }
    for (size_t i = 0; i < nd->nout; i++)
      if (nd->out[i] >= 0 && g->tensors[nd->out[i]].is_input)
        return tpu__graph_fail(g, TPU_EINVAL, "%s: output '%s' is also a graph input",
                               tpu__graph_node_label(g, n, lb, sizeof lb),
                               g->tensors[nd->out[i]].name);
  }
  for (size_t i = 0; i < g->noutputs; i++) {
    const tpu__gtensor_t *x = &g->tensors[g->outputs[i]];
    if (!x->is_input && !x->is_init && x->producer < 0)
      return tpu__graph_fail(g, TPU_EINVAL, "graph output '%s': not defined", x->name);
  }
  /* Kahn's algorithm over node → node edges (through tensors, each with one producer). */
  size_t *indeg = calloc(g->nnodes ? g->nnodes : 1, sizeof *indeg);
  size_t *order = malloc((g->nnodes ? g->nnodes : 1) * sizeof *order);
  /* Consumers of each tensor as a CSR list. */
  size_t *cstart = calloc(g->ntensors + 1, sizeof *cstart);
  size_t nedges = 0;
  for (size_t n = 0; n < g->nnodes; n++) nedges += g->nodes[n].nin;
  size_t *cons = malloc((nedges ? nedges : 1) * sizeof *cons);
  tpu_status_t st = TPU_OK;
  if (!indeg || !order || !cstart || !cons) {
    st = tpu__graph_fail(g, TPU_ENOMEM, "graph: out of memory validating");
    goto done;
  }
  for (size_t n = 0; n < g->nnodes; n++)
    for (size_t i = 0; i < g->nodes[n].nin; i++) {
      long t = g->nodes[n].in[i];
      if (t >= 0 && g->tensors[t].producer >= 0) {
        cstart[t + 1]++;
        indeg[n]++;
      }
    }
  for (size_t t = 0; t < g->ntensors; t++) cstart[t + 1] += cstart[t];
  {
    size_t *fill = calloc(g->ntensors + 1, sizeof *fill);
    if (!fill) {
      st = tpu__graph_fail(g, TPU_ENOMEM, "graph: out of memory validating");
      goto done;
    }
    for (size_t n = 0; n < g->nnodes; n++)
      for (size_t i = 0; i < g->nodes[n].nin; i++) {
        long t = g->nodes[n].in[i];
        if (t >= 0 && g->tensors[t].producer >= 0) cons[cstart[t] + fill[t]++] = n;
      }
    free(fill);
  }
  size_t head = 0, tail = 0;
  for (size_t n = 0; n < g->nnodes; n++)
    if (indeg[n] == 0) order[tail++] = n;
  while (head < tail) {
    const tpu__gnode_t *nd = &g->nodes[order[head++]];
    for (size_t o = 0; o < nd->nout; o++) {
      long t = nd->out[o];
      if (t < 0) continue;
      for (size_t c = cstart[t]; c < cstart[t + 1]; c++)
        if (--indeg[cons[c]] == 0) order[tail++] = cons[c];
    }
  }
  if (tail < g->nnodes) {
    /* Walk producers from a node left over until one repeats: that node is on a cycle. */
    size_t n = 0;
    while (indeg[n] == 0) n++;
    for (size_t steps = 0; steps <= g->nnodes; steps++) {
      const tpu__gnode_t *nd = &g->nodes[n];
      for (size_t i = 0; i < nd->nin; i++) {
        long t = nd->in[i];
        if (t >= 0 && g->tensors[t].producer >= 0 && indeg[g->tensors[t].producer] > 0) {
          n = (size_t)g->tensors[t].producer;
          break;
        }
      }
    }
    st = tpu__graph_fail(g, TPU_EINVAL, "graph: %s is on a cycle",
                         tpu__graph_node_label(g, n, lb, sizeof lb));
    goto done;
  }
  g->order = order;
  order = NULL;
  g->validated = 1;
done:
  free(indeg);
  free(order);
  free(cstart);
  free(cons);
  return st;
}

/* ---- reading back ---- */

size_t tpu_graph_tensor_count(const tpu_graph_t *g) { return g ? g->ntensors : 0; }
size_t tpu_graph_node_count(const tpu_graph_t *g) { return g ? g->nnodes : 0; }
const size_t *tpu_graph_order(const tpu_graph_t *g) { return g && g->validated ? g->order : NULL; }
size_t tpu_graph_input_count(const tpu_graph_t *g) { return g ? g->ninputs : 0; }
size_t tpu_graph_output_count(const tpu_graph_t *g) { return g ? g->noutputs : 0; }

long tpu_graph_input(const tpu_graph_t *g, size_t i) {
  return g && i < g->ninputs ? g->inputs[i] : -1;
}

long tpu_graph_output(const tpu_graph_t *g, size_t i) {
  return g && i < g->noutputs ? g->outputs[i] : -1;
}

long tpu_graph_find(const tpu_graph_t *g, const char *name) {
  return g && name ? find_tensor(g, name) : -1;
}

tpu_status_t tpu_graph_tensor(const tpu_graph_t *g, size_t index, tpu_graph_tensor_info_t *out) {
  if (!g || !out || index >= g->ntensors) return TPU_EINVAL;
  const tpu__gtensor_t *x = &g->tensors[index];
  memset(out, 0, sizeof *out);
  out->name = x->name;
  out->inferred = x->known;
  out->dtype = x->known ? x->idtype : x->dtype;
  out->rank = x->known ? x->irank : (x->declared || x->is_init ? x->rank : -1);
  out->dims = x->known ? x->idims : x->dims;
  out->is_input = x->is_input;
  out->is_output = x->is_output;
  out->is_initializer = x->is_init;
  out->producer = x->producer;
  out->data = x->is_init ? x->data : x->val;
  out->bytes = x->is_init ? x->bytes : x->vbytes;
  return TPU_OK;
}

tpu_status_t tpu_graph_node(const tpu_graph_t *g, size_t index, tpu_graph_node_info_t *out) {
  if (!g || !out || index >= g->nnodes) return TPU_EINVAL;
  const tpu__gnode_t *n = &g->nodes[index];
  out->name = n->name;
  out->op = n->op;
  out->domain = n->domain;
  out->opset = n->opset;
  out->nin = n->nin;
  out->nout = n->nout;
  out->inputs = n->in;
  out->outputs = n->out;
  out->nattrs = n->nattrs;
  return TPU_OK;
}

void tpu__graph_clear_inferred(tpu_graph_t *g) {
  for (size_t i = 0; i < g->ntensors; i++) tensor_clear_inferred(&g->tensors[i]);
}
