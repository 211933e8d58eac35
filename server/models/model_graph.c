/*
 * model_graph.c - model versions of format "onnx" and "xgboost": the verified .onnx file
 * decoded (onnx.c) and turned into the graph IR (onnx_graph.c), or the XGBoost JSON model
 * turned into one (xgboost.c), and compiled into one program per batch
 * bucket (engine/graph), behind the same tpu_model_t as the dense chain (model_int.h).
 *
 * DESIGN
 * Load: the file is read whole (bounded by the memory limit), its SHA-256 checked against
 * checkpoint.sha256 before a byte is decoded, then decoded from that private copy (external
 * data is read from the version directory under the decoder's rules). The graph's inputs and
 * outputs become the model's, in graph order: a model is batched when its inputs have the
 * batch (-1) as dimension 0 — then every input must, and every output of every bucket's
 * program must have the bucket's size there — and otherwise is served at its fixed shapes with
 * one bucket of 1 (a request is the whole tensor). inputs/outputs given in model.json must
 * name the graph's tensors with their datatypes and shapes. One program is compiled per bucket
 * in the model's precision, with precision_overrides kept in FP32 (each must name a node).
 * Run: a packed batch row holds every input's row bytes in input order; with one input the
 * program reads the batch buffer in place, with several each input is gathered into its own
 * staging buffer first (outputs likewise). Nothing is allocated on the run path.
 */
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "model_int.h"
#include "onnx.h"
#include "onnx_graph.h"
#include "tpu_text.h"
#include "xgboost.h"

#define fail(err, errlen, status, where, fmt, ...) \
  tpu_errf_ret((status), (err), (errlen), "%s: " fmt, (where), ##__VA_ARGS__)

static void shape_str(const int64_t *d, size_t r, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "[");
  for (size_t i = 0; i < r && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)d[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
}

/* Checks model.json's inputs or outputs (when given) against the model's. */
static tpu_status_t check_io(const char *what, const tpu_model_io_config_t *c, size_t nc,
                             const tpu__mtensor_t *t, size_t nt, const char *ck, char *err,
                             size_t errlen) {
  if (nc == 0) return TPU_OK;
  if (nc != nt)
    return fail(err, errlen, TPU_EINVAL, ck, "model.json lists %zu %s; the graph has %zu", nc,
                what, nt);
  for (size_t i = 0; i < nc; i++) {
    size_t j = 0;
    while (j < nt && strcmp(t[j].name, c[i].name) != 0) j++;
    if (j == nt)
      return fail(err, errlen, TPU_EINVAL, ck, "model.json %s[%zu] '%s': the graph has no such "
                  "%s (it has '%s'%s)", what, i, c[i].name, what, t[0].name,
                  nt > 1 ? ", ..." : "");
    int ok = strcmp(c[i].datatype, t[j].datatype) == 0 && c[i].rank == t[j].t.rank;
    for (size_t d = 0; ok && d < c[i].rank; d++) ok = c[i].shape[d] == t[j].shape[d];
    if (!ok) {
      char a[160], b[160];
      shape_str(c[i].shape, c[i].rank, a, sizeof a);
      shape_str(t[j].shape, t[j].t.rank, b, sizeof b);
      return fail(err, errlen, TPU_EINVAL, ck, "model.json %s[%zu] '%s' is %s %s; the graph "
                  "says %s %s", what, i, c[i].name, c[i].datatype, a, t[j].datatype, b);
    }
  }
  return TPU_OK;
}

/* Fills one model tensor from a program's input or output (dimension 0 → -1 when batched). */
static tpu_status_t set_tensor(tpu__mtensor_t *t, const tpu_graph_io_t *io, int batched,
                               size_t *offset) {
  if (!(t->name = strdup(io->name))) return TPU_ENOMEM;
  snprintf(t->datatype, sizeof t->datatype, "%s", tpu_graph_dtype_name(io->dtype));
  t->gdtype = io->dtype;
  for (int d = 0; d < io->rank; d++) t->shape[d] = io->dims[d];
  size_t rows = 1;
  if (batched) {
    rows = (size_t)io->dims[0];
    t->shape[0] = -1;
  }
  size_t elems = rows ? io->elems / rows : 0;
  t->t = (tpu_model_tensor_t){.name = t->name, .datatype = t->datatype,
                              .rank = (size_t)io->rank, .shape = t->shape, .row_elems = elems,
                              .row_bytes = rows ? io->bytes / rows : 0, .offset = *offset};
  *offset += t->t.row_bytes;
  return TPU_OK;
}

/* 1 when every node that reads graph input `name` is a tree ensemble (ai.onnx.ml
 * TreeEnsemble*): those take NaN as a missing feature and ±Inf as numbers, so the server lets
 * them through (the ONNX model of an XGBoost or HistGradientBoosting ensemble needs them). */
static int only_trees_read(const tpu_graph_t *g, const char *name) {
  long t = tpu_graph_find(g, name);
  size_t readers = 0;
  for (size_t k = 0; t >= 0 && k < tpu_graph_node_count(g); k++) {
    tpu_graph_node_info_t nd;
    if (tpu_graph_node(g, k, &nd) != TPU_OK) return 0;
    for (size_t i = 0; i < nd.nin; i++) {
      if (nd.inputs[i] != t) continue;
      if (strcmp(nd.domain, "ai.onnx.ml") != 0 || strncmp(nd.op, "TreeEnsemble", 12) != 0)
        return 0;
      readers++;
    }
  }
  return readers > 0;
}

static void *alloc_bytes(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, ((n ? n : 1) + 63) & ~(size_t)63) != 0) return NULL;
  return p;
}

tpu_status_t tpu__model_load_graph(tpu_model_t *m, const char *ck, tpu_model_load_opts_t *o,
                                   int *sys, char *err, size_t errlen) {
  tpu_model_config_t *cfg = m->cfg;
  uint64_t limit = o ? o->memory_limit : 0;
  const atomic_int *cancel = o ? o->cancel : NULL;
  void *buf = NULL;
  size_t len = 0;
  tpu_onnx_model_t *om = NULL;
  tpu_status_t rc;
  char rerr[1024];
  int e = tpu_file_read(ck, (size_t)limit, cancel, &buf, &len, NULL, err, errlen);
  *sys = e;
  if (e == EFBIG)
    return fail(err, errlen, TPU_ERANGE, ck, "the model file is larger than the model memory "
                "limit of %llu bytes", (unsigned long long)limit);
  if (e) return e == ECANCELED ? TPU_ECANCELED : e == ENOMEM ? TPU_ENOMEM : TPU_EINVAL;
  char got[65];
  if ((e = tpu_file_sha256(buf, len, cancel, got)) != 0) {
    free(buf);
    return e == ECANCELED ? fail(err, errlen, TPU_ECANCELED, ck, "cancelled while hashing")
                          : fail(err, errlen, TPU_ENOMEM, ck, "SHA-256 failed (OpenSSL EVP)");
  }
  if (strcmp(got, cfg->sha256) != 0) {
    free(buf);
    return fail(err, errlen, TPU_EINVAL, ck, "SHA-256 mismatch: the file's digest is %s, "
                "expected %s (corrupt, partially copied or replaced file)", got, cfg->sha256);
  }
  if (cfg->format == TPU_MODEL_FORMAT_XGBOOST) { /* trees: the input named as model.json pins */
    rc = tpu_xgboost_to_graph(buf, len, cfg->ninputs ? cfg->inputs[0].name : NULL, &m->graph,
                              rerr, sizeof rerr);
    free(buf);
    if (rc != TPU_OK) return fail(err, errlen, rc, ck, "%s", rerr);
  } else {
    /* The decoder prefixes its messages with the name given: the file's path. */
    tpu_onnx_external_t ext[TPU_MODEL_MAX_EXTERNAL];
    for (size_t i = 0; i < cfg->nexternal; i++)
      ext[i] = (tpu_onnx_external_t){.path = cfg->external[i].path,
                                     .sha256 = cfg->external[i].sha256};
    /* External data files are covered by checkpoint.external the way the .onnx file is by
     * checkpoint.sha256: a file with no digest there is refused. */
    tpu_onnx_parse_opts_t po = {.dir = m->dir, .external = ext, .nexternal = cfg->nexternal,
                                .digests_required = 1, .max_bytes = limit};
    rc = tpu_onnx_parse_with(buf, len, ck, &po, &om, err, errlen);
    free(buf);
    if (rc != TPU_OK) return rc;
    rc = tpu_onnx_to_graph(om, &m->graph, rerr, sizeof rerr);
    tpu_onnx_free(om);
    if (rc != TPU_OK) return fail(err, errlen, rc, ck, "%s", rerr);
  }

  /* Batched or fixed: from the graph inputs' dimension 0. */
  size_t nin = tpu_graph_input_count(m->graph), nout = 0;
  m->nprog_out = tpu_graph_output_count(m->graph);
  if (nin == 0 || nin > TPU_MODEL_MAX_IO || m->nprog_out == 0 ||
      m->nprog_out > TPU_MODEL_MAX_IO)
    return fail(err, errlen, TPU_ENOTSUP, ck, "the graph has %zu inputs and %zu outputs; "
                "tpud serves 1 to %d of each", nin, m->nprog_out, TPU_MODEL_MAX_IO);
  size_t nbatched = 0;
  const char *fixed = NULL, *batched = NULL;
  for (size_t i = 0; i < nin; i++) {
    tpu_graph_tensor_info_t ti;
    tpu_graph_tensor(m->graph, (size_t)tpu_graph_input(m->graph, i), &ti);
    if (ti.rank >= 1 && ti.dims[0] == TPU_GRAPH_BATCH) {
      nbatched++;
      batched = ti.name;
    } else if (!fixed) {
      fixed = ti.name;
    }
  }
  if (nbatched && nbatched != nin)
    return fail(err, errlen, TPU_ENOTSUP, ck, "graph input '%s' has a fixed shape but '%s' has "
                "a batch (symbolic) dimension 0 (%zu of %zu inputs do); tpud batches all inputs "
                "or none", fixed, batched, nbatched, nin);
  m->batched = nbatched > 0;
  if (!m->batched) { /* served at its fixed shape: one bucket of one "row", the whole tensor */
    cfg->nbuckets = 1;
    cfg->buckets[0] = 1;
    cfg->max_batch_size = 1;
  }
  for (size_t i = 0; i < cfg->noverrides; i++) {
    int found = 0;
    for (size_t n = 0; n < tpu_graph_node_count(m->graph) && !found; n++) {
      tpu_graph_node_info_t ni;
      tpu_graph_node(m->graph, n, &ni);
      found = strcmp(ni.name, cfg->precision_overrides[i]) == 0;
    }
    if (!found)
      return fail(err, errlen, TPU_EINVAL, ck, "model.json precision_overrides[%zu]: the graph "
                  "has no node named '%s'", i, cfg->precision_overrides[i]);
  }
  tpu_graph_compile_opts_t co = {.precision = cfg->precision,
                                 .fp32_nodes = (const char *const *)cfg->precision_overrides,
                                 .nfp32_nodes = cfg->noverrides,
                                 .memory_limit = limit};
  uint64_t held = 0;
  if ((rc = tpu__model_calibrate(m, o, &co, sys, err, errlen)) != TPU_OK) return rc;
  for (size_t b = cfg->nbuckets; b-- > 0;) { /* the largest first: the others share with it */
    if (cancel && atomic_load(cancel)) return fail(err, errlen, TPU_ECANCELED, ck, "load cancelled");
    co.share = m->progs[cfg->nbuckets - 1]; /* weights packed once, one arena */
    rc = tpu_graph_compile(m->graph, m->engine, (int64_t)cfg->buckets[b], &co, &m->progs[b]);
    if (rc != TPU_OK)
      return fail(err, errlen, rc, ck, "%s%s", tpu_graph_error(m->graph),
                  m->batched ? "" : " (a model without a batch dimension is compiled once)");
    held += tpu_graph_program_memory(m->progs[b]);
    if (limit && held > limit)
      return fail(err, errlen, TPU_ERANGE, ck, "the compiled programs of %zu buckets need %llu "
                  "bytes, more than the model memory limit of %llu; use fewer or smaller "
                  "buckets", b + 1, (unsigned long long)held, (unsigned long long)limit);
  }
  /* Weights packed into plans are not kept twice. */
  tpu_graph_release_constants(m->graph, (const tpu_graph_program_t *const *)m->progs,
                              cfg->nbuckets);
  /* Inputs and outputs from the largest bucket's program; every bucket must agree. */
  const tpu_graph_program_t *big = m->progs[cfg->nbuckets - 1];
  size_t off = 0;
  for (size_t i = 0; i < nin; i++) {
    tpu_graph_io_t io;
    tpu_graph_program_input(big, i, &io);
    if (set_tensor(&m->ins[i], &io, m->batched, &off) != TPU_OK)
      return fail(err, errlen, TPU_ENOMEM, ck, "out of memory");
    m->nin = i + 1;
    tpu_model_tensor_t *t = &m->ins[i].t;
    t->has_range = tpu_graph_program_input_range(big, i, &t->range_lo, &t->range_hi);
    t->missing_ok = cfg->format == TPU_MODEL_FORMAT_XGBOOST || only_trees_read(m->graph, io.name);
  }
  m->in_row = off;
  off = 0;
  for (size_t pj = 0; pj < m->nprog_out; pj++) m->pout[nout++] = pj;
  for (size_t j = 0; j < nout; j++) {
    tpu_graph_io_t io;
    tpu_graph_program_output(big, m->pout[j], &io);
    for (size_t b = 0; b < cfg->nbuckets; b++) {
      tpu_graph_io_t ob;
      tpu_graph_program_output(m->progs[b], m->pout[j], &ob);
      int ok = ob.rank == io.rank && (!m->batched || (ob.rank >= 1 &&
                                                      (size_t)ob.dims[0] == cfg->buckets[b]));
      for (int d = m->batched ? 1 : 0; ok && d < ob.rank; d++) ok = ob.dims[d] == io.dims[d];
      if (!ok) {
        char s[160];
        shape_str(ob.dims, (size_t)ob.rank, s, sizeof s);
        return fail(err, errlen, TPU_ENOTSUP, ck, "output '%s' has shape %s for a batch of "
                    "%zu: tpud needs the batch as dimension 0 of every output", ob.name, s,
                    cfg->buckets[b]);
      }
    }
    if (set_tensor(&m->outs[j], &io, m->batched, &off) != TPU_OK)
      return fail(err, errlen, TPU_ENOMEM, ck, "out of memory");
    m->outs[j].t.on_request = tpu_graph_program_output_on_request(big, m->pout[j]);
    m->nout = j + 1;
  }
  m->out_row = off;
  if (m->in_row == 0 || m->out_row == 0)
    return fail(err, errlen, TPU_ENOTSUP, ck, "the graph's inputs or outputs hold no data per "
                "row (an empty dimension)");
  if ((rc = check_io("inputs", cfg->inputs, cfg->ninputs, m->ins, m->nin, ck, err, errlen)) !=
          TPU_OK ||
      (rc = check_io("outputs", cfg->outputs, cfg->noutputs, m->outs, m->nout, ck, err,
                     errlen)) != TPU_OK)
    return rc;
  size_t maxb = cfg->max_batch_size;
  uint64_t staging = 0;
  for (size_t i = 0; nin > 1 && i < nin; i++) {
    if (!(m->gin[i] = alloc_bytes(maxb * m->ins[i].t.row_bytes)))
      return fail(err, errlen, TPU_ENOMEM, ck, "out of memory for staging");
    staging += maxb * m->ins[i].t.row_bytes;
  }
  for (size_t j = 0; nout > 1 && j < nout; j++) {
    if (!(m->gout[j] = alloc_bytes(maxb * m->outs[j].t.row_bytes)))
      return fail(err, errlen, TPU_ENOMEM, ck, "out of memory for staging");
    staging += maxb * m->outs[j].t.row_bytes;
  }
  uint64_t batch = (uint64_t)maxb * (m->in_row + m->out_row);
  uint64_t total = held + staging + batch * (1 + (o ? o->batch_copies : 0));
  if (o) o->memory_bytes = o->peak_bytes = total;
  if (limit && total > limit)
    return fail(err, errlen, TPU_ERANGE, ck, "needs %llu bytes while serving (programs %llu, "
                "staging and batch buffers %llu), more than the model memory limit of %llu",
                (unsigned long long)total, (unsigned long long)held,
                (unsigned long long)(total - held), (unsigned long long)limit);
  return TPU_OK;
}

/* ---- int8 calibration ---- */

typedef struct {
  char *node;
  size_t k;
  float *amax, *wmax; /* per input channel: max |activation|, max |weight| */
} cstat_t;

typedef struct {
  cstat_t *s;
  size_t n;
  int oom;
} cstats_t;

static void observe(void *user, const char *node, const float *a, size_t mrows, size_t k,
                    const float *w, tpu_layout_t layout, size_t n) {
  cstats_t *cs = user;
  cstat_t *st = NULL;
  for (size_t i = 0; i < cs->n && !st; i++)
    if (strcmp(cs->s[i].node, node) == 0 && cs->s[i].k == k) st = &cs->s[i];
  if (!st) {
    if (!node[0]) return; /* an unnamed node cannot be named in calib */
    cstat_t *ns = realloc(cs->s, (cs->n + 1) * sizeof *ns);
    if (!ns) {
      cs->oom = 1;
      return;
    }
    cs->s = ns;
    st = &cs->s[cs->n];
    st->node = strdup(node);
    st->k = k;
    st->amax = calloc(k, sizeof *st->amax);
    st->wmax = calloc(k, sizeof *st->wmax);
    if (!st->node || !st->amax || !st->wmax) {
      free(st->node), free(st->amax), free(st->wmax);
      cs->oom = 1;
      return;
    }
    cs->n++;
    for (size_t i = 0; i < k * n; i++) {
      size_t kk = layout == TPU_LAYOUT_NK ? i % k : i / n;
      float v = fabsf(w[i]);
      if (v > st->wmax[kk]) st->wmax[kk] = v;
    }
  }
  for (size_t r = 0; r < mrows; r++)
    for (size_t kk = 0; kk < k; kk++) {
      float v = fabsf(a[r * k + kk]);
      if (v > st->amax[kk]) st->amax[kk] = v;
    }
}

tpu_status_t tpu__model_calibrate(tpu_model_t *m, const tpu_model_load_opts_t *o,
                                  tpu_graph_compile_opts_t *co, int *sys, char *err,
                                  size_t errlen) {
  const tpu_model_config_t *cfg = m->cfg;
  const tpu_model_calibration_config_t *cc = &cfg->calibration;
  if (!cc->present || cfg->precision != TPU_DTYPE_INT8) return TPU_OK;
  if (!m->batched)
    return fail(err, errlen, TPU_ENOTSUP, m->dir, "model.json: calibration needs a model with a "
                "batch dimension (its rows are the calibration samples)");
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", m->dir, cc->file) >= sizeof path)
    return fail(err, errlen, TPU_EINVAL, m->dir, "path too long");
  tpu_safetensors_t *st = NULL;
  tpu_st_read_opts_t ro = {.max_bytes = o ? o->memory_limit : 0, .cancel = o ? o->cancel : NULL,
                           .sys_errno = sys};
  tpu_status_t rc = tpu_safetensors_load(path, cc->sha256, &ro, &st, err, errlen);
  if (rc != TPU_OK) return rc;
  size_t bs = cfg->buckets[cfg->nbuckets - 1];
  tpu_graph_program_t *p = NULL;
  tpu_graph_compile_opts_t fo = {.precision = TPU_DTYPE_FP32, .observable = 1,
                                 .memory_limit = o ? o->memory_limit : 0};
  cstats_t cs = {0};
  void *ins[TPU_MODEL_MAX_IO] = {0}, *outs[TPU_MODEL_MAX_IO] = {0};
  const tpu_st_tensor_t *tin[TPU_MODEL_MAX_IO];
  size_t ni = 0, no = 0;
  uint64_t rows = 0;
  rc = tpu_graph_compile(m->graph, m->engine, (int64_t)bs, &fo, &p);
  if (rc != TPU_OK) {
    rc = fail(err, errlen, rc, path, "calibration: %s", tpu_graph_error(m->graph));
    goto done;
  }
  ni = tpu_graph_program_input_count(p);
  no = tpu_graph_program_output_count(p);
  for (size_t i = 0; i < ni; i++) {
    tpu_graph_io_t io;
    tpu_graph_program_input(p, i, &io);
    char key[TPU_MODEL_MAX_NAME * 2 + 16];
    snprintf(key, sizeof key, "input.%s", io.name);
    const tpu_st_tensor_t *x = tpu_safetensors_find(st, key);
    size_t row_bytes = io.bytes / bs;
    static const char *const stname[TPU_GRAPH_DTYPE_COUNT] = {
        [TPU_GRAPH_FP32] = "F32", [TPU_GRAPH_FP16] = "F16", [TPU_GRAPH_BF16] = "BF16",
        [TPU_GRAPH_FP64] = "F64", [TPU_GRAPH_INT64] = "I64", [TPU_GRAPH_INT32] = "I32",
        [TPU_GRAPH_INT8] = "I8",  [TPU_GRAPH_UINT8] = "U8",  [TPU_GRAPH_BOOL] = "BOOL"};
    const char *want = io.dtype < TPU_GRAPH_DTYPE_COUNT ? stname[io.dtype] : NULL;
    int ok = x && want && io.rank >= 1 && x->ndim == (size_t)io.rank && x->shape[0] > 0 &&
             x->nbytes == x->shape[0] * row_bytes &&
             strcmp(tpu_st_dtype_name(x->dtype), want) == 0;
    for (int d = 1; ok && d < io.rank; d++) ok = x->shape[d] == (uint64_t)io.dims[d];
    if (!ok || (rows && x->shape[0] != rows)) {
      rc = fail(err, errlen, TPU_EINVAL, path, "calibration: expected a tensor '%s' of rows of "
                "the model's input '%s' (%s, every input with the same row count)", key,
                io.name, tpu_graph_dtype_name(io.dtype));
      goto done;
    }
    rows = x->shape[0];
    tin[i] = x;
    if (!(ins[i] = calloc(1, io.bytes ? io.bytes : 1))) {
      rc = fail(err, errlen, TPU_ENOMEM, path, "out of memory");
      goto done;
    }
  }
  for (size_t j = 0; j < no; j++) {
    tpu_graph_io_t io;
    tpu_graph_program_output(p, j, &io);
    if (!(outs[j] = malloc(io.bytes ? io.bytes : 1))) {
      rc = fail(err, errlen, TPU_ENOMEM, path, "out of memory");
      goto done;
    }
  }
  for (uint64_t r0 = 0; r0 < rows; r0 += bs) {
    if (o && o->cancel && atomic_load(o->cancel)) {
      rc = fail(err, errlen, TPU_ECANCELED, m->dir, "load cancelled during calibration");
      goto done;
    }
    size_t n = rows - r0 < bs ? (size_t)(rows - r0) : bs;
    for (size_t i = 0; i < ni; i++) {
      tpu_graph_io_t io;
      tpu_graph_program_input(p, i, &io);
      size_t rb = io.bytes / bs;
      memcpy(ins[i], (const unsigned char *)tin[i]->data + r0 * rb, n * rb);
      /* Padding rows repeat the last real one: zeros would pass through biases and
       * normalizations and show deeper layers activations no input produces. */
      for (size_t r = n; r < bs; r++)
        memcpy((unsigned char *)ins[i] + r * rb, (unsigned char *)ins[i] + (n - 1) * rb, rb);
    }
    rc = tpu_graph_program_observe(p, (const void *const *)ins, outs, observe, &cs);
    if (rc != TPU_OK || cs.oom) {
      rc = fail(err, errlen, rc != TPU_OK ? rc : TPU_ENOMEM, path, "calibration run: %s",
                rc != TPU_OK ? tpu_graph_program_error(p) : "out of memory");
      goto done;
    }
  }
  /* Factors and scales per node. */
  if (!(m->calib = calloc(cs.n + 1, sizeof *m->calib))) {
    rc = fail(err, errlen, TPU_ENOMEM, path, "out of memory");
    goto done;
  }
  double alpha = cc->smoothing, worst_ratio = 1;
  size_t skipped = 0;
  /* One name on matmuls of different K (node names need not be unique): left uncalibrated. */
  for (size_t i = 0; i < cs.n; i++)
    for (size_t j = 0; j < cs.n; j++)
      if (j != i && strcmp(cs.s[j].node, cs.s[i].node) == 0) cs.s[i].k = 0; /* mark */
  for (size_t i = 0; i < cs.n; i++) {
    cstat_t *c = &cs.s[i];
    if (c->k == 0) {
      skipped++;
      continue;
    }
    float *sm = NULL;
    double amax_s = 0, lo = INFINITY, hi = 0;
    if (alpha > 0 && !(sm = malloc(c->k * sizeof *sm))) {
      rc = fail(err, errlen, TPU_ENOMEM, path, "out of memory");
      goto done;
    }
    for (size_t k = 0; k < c->k; k++) {
      double s = 1;
      if (sm && c->amax[k] > 0 && c->wmax[k] > 0) {
        s = pow(c->amax[k], alpha) / pow(c->wmax[k], 1 - alpha);
        s = s < 1e-6 ? 1e-6 : s > 1e6 ? 1e6 : s;
      }
      if (sm) sm[k] = (float)s;
      double v = c->amax[k] / s;
      if (v > amax_s) amax_s = v;
      if (c->amax[k] > 0 && c->amax[k] < lo) lo = c->amax[k];
      if (c->amax[k] > hi) hi = c->amax[k];
    }
    if (hi > 0 && lo < INFINITY && hi / lo > worst_ratio) worst_ratio = hi / lo;
    tpu_graph_calib_t *e = &m->calib[m->ncalib++];
    e->node = c->node;
    c->node = NULL;
    e->k = c->k;
    e->smooth = sm;
    e->act_scale = cc->static_scales && amax_s > 0 && isfinite(amax_s) ? (float)(amax_s / 127) : 0;
  }
  co->calib = m->calib;
  co->ncalib = m->ncalib;
  snprintf(m->calibrated, sizeof m->calibrated, "calibrated on %llu rows: %zu matmul nodes%s, "
           "smoothing alpha %.2f, %s activation scales; widest input channel range %.3g:1",
           (unsigned long long)rows, m->ncalib,
           skipped ? " (some left out: one name on several matmuls)" : "", alpha,
           cc->static_scales ? "static" : "per-row", worst_ratio);
  rc = TPU_OK;
done:
  for (size_t i = 0; i < cs.n; i++) {
    free(cs.s[i].node);
    free(cs.s[i].amax);
    free(cs.s[i].wmax);
  }
  free(cs.s);
  for (size_t i = 0; i < TPU_MODEL_MAX_IO; i++) {
    free(ins[i]);
    free(outs[i]);
  }
  tpu_graph_program_free(p);
  tpu_safetensors_close(st);
  return rc;
}

tpu_status_t tpu__model_run_graph(tpu_model_t *m, size_t b, const void *in, void *out,
                                  uint64_t want, char *err, size_t errlen) {
  size_t rows = m->cfg->buckets[b];
  const void *ins[TPU_MODEL_MAX_IO];
  void *outs[TPU_MODEL_MAX_IO];
  const unsigned char *x = in;
  unsigned char *y = out;
  if (m->nin == 1) {
    ins[0] = in;
  } else {
    for (size_t i = 0; i < m->nin; i++) {
      const tpu_model_tensor_t *t = &m->ins[i].t;
      unsigned char *dst = m->gin[i];
      for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * t->row_bytes, x + r * m->in_row + t->offset, t->row_bytes);
      ins[i] = dst;
    }
  }
  for (size_t j = 0; j < m->nout; j++) {
    int skip = m->outs[j].t.on_request && !(j < 64 && (want >> j & 1)); /* not asked for */
    outs[m->pout[j]] = skip ? NULL : m->nout == 1 ? out : m->gout[j];
  }
  tpu_status_t rc = tpu_graph_program_run(m->progs[b], ins, outs);
  if (rc != TPU_OK) {
    if (err && errlen) snprintf(err, errlen, "%s", tpu_graph_program_error(m->progs[b]));
    return rc;
  }
  if (m->nout > 1)
    for (size_t j = 0; j < m->nout; j++) {
      const tpu_model_tensor_t *t = &m->outs[j].t;
      const unsigned char *src = m->gout[j];
      if (!outs[m->pout[j]]) { /* on request, not computed: zeros, so digests are stable */
        for (size_t r = 0; r < rows; r++) memset(y + r * m->out_row + t->offset, 0, t->row_bytes);
        continue;
      }
      for (size_t r = 0; r < rows; r++)
        memcpy(y + r * m->out_row + t->offset, src + r * t->row_bytes, t->row_bytes);
    }
  return TPU_OK;
}

void tpu__model_free_graph(tpu_model_t *m) {
  for (size_t i = 0; i < m->ncalib; i++) {
    free((char *)m->calib[i].node);
    free((float *)m->calib[i].smooth);
  }
  free(m->calib);
  size_t last = m->cfg ? m->cfg->nbuckets - 1 : 0; /* the largest owns what the others share */
  for (size_t b = 0; b < TPU_MODEL_MAX_BUCKETS; b++)
    if (b != last) tpu_graph_program_free(m->progs[b]);
  tpu_graph_program_free(m->progs[last]);
  for (size_t i = 0; i < TPU_MODEL_MAX_IO; i++) {
    free(m->gin[i]);
    free(m->gout[i]);
  }
  tpu_graph_free(m->graph);
}
