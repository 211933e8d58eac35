/*
 * model_graph.c - model versions of format "onnx": the verified .onnx file decoded
 * (onnx.c), turned into the graph IR (onnx_graph.c) and compiled into one program per batch
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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "model_int.h"
#include "onnx.h"
#include "onnx_graph.h"
#include "tpu_text.h"

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
  /* The decoder prefixes its messages with the name given: the file's path. */
  rc = tpu_onnx_parse(buf, len, ck, m->dir, &om, err, errlen);
  free(buf);
  if (rc != TPU_OK) return rc;
  rc = tpu_onnx_to_graph(om, &m->graph, rerr, sizeof rerr);
  tpu_onnx_free(om);
  if (rc != TPU_OK) return fail(err, errlen, rc, ck, "%s", rerr);

  /* Batched or fixed: from the graph inputs' dimension 0. */
  size_t nin = tpu_graph_input_count(m->graph), nout = tpu_graph_output_count(m->graph);
  if (nin == 0 || nin > TPU_MODEL_MAX_IO || nout == 0 || nout > TPU_MODEL_MAX_IO)
    return fail(err, errlen, TPU_ENOTSUP, ck, "the graph has %zu inputs and %zu outputs; "
                "tpud serves 1 to %d of each", nin, nout, TPU_MODEL_MAX_IO);
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
  }
  m->in_row = off;
  off = 0;
  for (size_t j = 0; j < nout; j++) {
    tpu_graph_io_t io;
    tpu_graph_program_output(big, j, &io);
    for (size_t b = 0; b < cfg->nbuckets; b++) {
      tpu_graph_io_t ob;
      tpu_graph_program_output(m->progs[b], j, &ob);
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

tpu_status_t tpu__model_run_graph(tpu_model_t *m, size_t b, const void *in, void *out, char *err,
                                  size_t errlen) {
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
  for (size_t j = 0; j < m->nout; j++) outs[j] = m->nout == 1 ? out : m->gout[j];
  tpu_status_t rc = tpu_graph_program_run(m->progs[b], ins, outs);
  if (rc != TPU_OK) {
    if (err && errlen) snprintf(err, errlen, "%s", tpu_graph_program_error(m->progs[b]));
    return rc;
  }
  if (m->nout > 1)
    for (size_t j = 0; j < m->nout; j++) {
      const tpu_model_tensor_t *t = &m->outs[j].t;
      const unsigned char *src = m->gout[j];
      for (size_t r = 0; r < rows; r++)
        memcpy(y + r * m->out_row + t->offset, src + r * t->row_bytes, t->row_bytes);
    }
  return TPU_OK;
}

void tpu__model_free_graph(tpu_model_t *m) {
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
