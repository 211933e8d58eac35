/*
 * model.c - turns a model version directory into packed weights and compiled plans (see model.h
 * for the checkpoint conventions and thread rules).
 *
 * DESIGN
 * Load is a straight line with one unwind (goto fail): config, verified checkpoint (a private
 * copy), every layer's shapes, the memory check (size_model: nothing big is allocated before
 * it), conversion and packing layer by layer, plans, scratch, warm-up, with the cancel flag
 * checked between steps. The checkpoint's bytes and every temporary conversion buffer are
 * released before load returns: a loaded model holds only the engine's packed weights, its
 * plans, its scratch and its metadata. Run never allocates, never logs and never touches a
 * file.
 */
#include "model.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <sys/stat.h>

#include "clock.h"
#include "model_int.h"
#include "file.h"
#include "onnx.h"
#include "safetensors.h"
#include "tpu_frame.h" /* tpu_utf8_valid */
#include "tpu_text.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this loader reads it in place on little-endian hosts"
#endif

/* "where: message" into err, and returns status: `return fail(...)`. */
#define fail(err, errlen, status, where, fmt, ...) \
  tpu_errf_ret((status), (err), (errlen), "%s: " fmt, (where), ##__VA_ARGS__)

static void *alloc_floats(size_t n) {
  void *p = NULL;
  size_t bytes;
  if (n == 0) n = 1;
  if (__builtin_mul_overflow(n, sizeof(float), &bytes)) return NULL;
  bytes = (bytes + 63) & ~(size_t)63;
  if (posix_memalign(&p, 64, bytes) != 0) return NULL;
  return p;
}

/* IEEE binary16 to binary32, exact for every input (subnormals, ±Inf, NaN payloads). */
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    float f = ldexpf((float)mant, -24);
    return sign ? -f : f;
  }
  if (exp == 31)
    bits = sign | 0x7f800000u | (mant << 13);
  else
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Copies a float tensor (F32, F16 or BF16; data possibly unaligned) into dst as FP32.
 * Returns 0 when the dtype is not one of those. */
static int to_f32(const tpu_st_tensor_t *t, float *dst) {
  const uint8_t *p = t->data;
  size_t n = (size_t)t->nelements;
  switch (t->dtype) {
  case TPU_ST_F32:
    memcpy(dst, p, n * sizeof(float));
    return 1;
  case TPU_ST_F16:
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      dst[i] = f16_to_f32(h);
    }
    return 1;
  case TPU_ST_BF16:
    for (size_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      uint32_t bits = (uint32_t)h << 16;
      memcpy(&dst[i], &bits, sizeof bits);
    }
    return 1;
  default:
    return 0;
  }
}

static const char *fmt_shape(char *out, size_t outlen, const tpu_st_tensor_t *t) {
  size_t o = (size_t)snprintf(out, outlen, "[");
  for (size_t i = 0; i < t->ndim && o < outlen; i++)
    o += (size_t)snprintf(out + o, outlen - o, "%s%llu", i ? ", " : "",
                          (unsigned long long)t->shape[i]);
  if (o < outlen) snprintf(out + o, outlen - o, "]");
  return out;
}

/* Index of the first non-finite float, or n. */
static size_t first_nonfinite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return i;
  return n;
}

/* Checks layer `li`'s tensors against the chain (`in`: the width it must take) and records
 * them and its shape in m->layers[li]; reads no element. */
static tpu_status_t layer_shape(tpu_model_t *m, const tpu_safetensors_t *st, const char *ck,
                                size_t li, size_t in, char *err, size_t errlen) {
  const tpu_model_layer_config_t *lc = &m->cfg->layers[li];
  layer_t *L = &m->layers[li];
  char shp[160];
  const tpu_st_tensor_t *w = tpu_safetensors_find(st, lc->weight);
  if (!w)
    return fail(err, errlen, TPU_EINVAL, ck, "layers[%zu].weight: no tensor named '%s' in the checkpoint",
                li, lc->weight);
  if (w->ndim != 2 || w->shape[0] == 0 || w->shape[1] == 0 ||
      w->shape[0] > TPU_MODEL_MAX_WIDTH || w->shape[1] > TPU_MODEL_MAX_WIDTH)
    return fail(err, errlen, TPU_EINVAL, ck,
                "layers[%zu].weight '%s': expected shape [out_features, in_features] with each "
                "in 1..%u, got %s",
                li, lc->weight, TPU_MODEL_MAX_WIDTH, fmt_shape(shp, sizeof shp, w));
  size_t out = (size_t)w->shape[0], k = (size_t)w->shape[1];
  if (k != in) {
    if (li == 0)
      return fail(err, errlen, TPU_EINVAL, ck,
                  "layers[0].weight '%s': shape %s takes %zu input features, but inputs[0] is "
                  "[-1, %zu]",
                  lc->weight, fmt_shape(shp, sizeof shp, w), k, in);
    return fail(err, errlen, TPU_EINVAL, ck,
                "layers[%zu].weight '%s': shape %s takes %zu input features, but layers[%zu] "
                "outputs %zu",
                li, lc->weight, fmt_shape(shp, sizeof shp, w), k, li - 1, in);
  }
  if (li + 1 == m->cfg->nlayers && out != m->cfg->output_width)
    return fail(err, errlen, TPU_EINVAL, ck,
                "layers[%zu].weight '%s': shape %s gives %zu output features, but outputs[0] is "
                "[-1, %zu]",
                li, lc->weight, fmt_shape(shp, sizeof shp, w), out, m->cfg->output_width);
  L->in = k;
  L->out = out;
  L->wt = w;
  if (lc->bias) {
    const tpu_st_tensor_t *b = tpu_safetensors_find(st, lc->bias);
    if (!b)
      return fail(err, errlen, TPU_EINVAL, ck, "layers[%zu].bias: no tensor named '%s' in the checkpoint",
                  li, lc->bias);
    if (b->ndim != 1 || b->shape[0] != out)
      return fail(err, errlen, TPU_EINVAL, ck,
                  "layers[%zu].bias '%s': expected shape [%zu] (out_features of '%s'), got %s", li,
                  lc->bias, out, lc->weight, fmt_shape(shp, sizeof shp, b));
    L->bt = b;
  }
  if (w->dtype == TPU_ST_I8) {
    /* Pre-quantized weights: q [out, in] and scales "<weight>_scale" [out] or [out, 1]. */
    char sname[TPU_MODEL_MAX_NAME + 16];
    snprintf(sname, sizeof sname, "%s_scale", lc->weight);
    const tpu_st_tensor_t *sc = tpu_safetensors_find(st, sname);
    if (!sc)
      return fail(err, errlen, TPU_EINVAL, ck,
                  "layers[%zu].weight '%s' is I8, but the checkpoint has no '%s': I8 weights need "
                  "their per-output-channel scales [%zu] in a tensor named '<weight>_scale'",
                  li, lc->weight, sname, out);
    if (!((sc->ndim == 1 && sc->shape[0] == out) ||
          (sc->ndim == 2 && sc->shape[0] == out && sc->shape[1] == 1)))
      return fail(err, errlen, TPU_EINVAL, ck,
                  "'%s': expected shape [%zu] or [%zu, 1] (out_features of '%s'), got %s", sname,
                  out, out, lc->weight, fmt_shape(shp, sizeof shp, sc));
    L->st = sc;
  }
  return TPU_OK;
}

/* What a model will hold and need, from the layers' shapes (layer_shape done for all). */
typedef struct {
  uint64_t weights, plans, scratch, batch, held; /* bytes held while serving, and their sum */
  uint64_t ckpt, transient, peak;                /* while loading */
} mem_t;

static tpu_status_t add64(uint64_t *a, uint64_t b) {
  return __builtin_add_overflow(*a, b, a) ? TPU_EOVERFLOW : TPU_OK;
}

static tpu_status_t size_model(const tpu_model_t *m, size_t ckpt_bytes, unsigned batch_copies,
                               mem_t *z) {
  const tpu_model_config_t *cfg = m->cfg;
  memset(z, 0, sizeof *z);
  uint64_t maxb = cfg->max_batch_size; /* ≤ 4096 and widths ≤ 2^20: products fit */
  size_t hidden = 1;
  uint64_t graph_copies = 0, one_layer = 0;
  tpu_status_t rc = TPU_OK;
  for (size_t i = 0; i < m->nlayers && rc == TPU_OK; i++) {
    const layer_t *L = &m->layers[i];
    int raw_i8 = L->wt->dtype == TPU_ST_I8 && cfg->precision == TPU_DTYPE_INT8;
    size_t held, tr;
    rc = tpu_weights_memory(m->engine, cfg->precision, raw_i8 ? TPU_DTYPE_INT8 : TPU_DTYPE_FP32,
                            L->in, L->out, &held, &tr);
    if (rc != TPU_OK) break;
    rc = add64(&z->weights, held);
    /* While loading, the graph holds every layer's FP32 weights and bias (and an I8
     * checkpoint's int8 copy and scales) until the programs are compiled; layer_arrays' own
     * buffers and the packing's exist for one layer at a time. */
    uint64_t w32 = (uint64_t)L->in * L->out * sizeof(float), vec = (uint64_t)L->out * sizeof(float);
    graph_copies += w32 + vec + (L->wt->dtype == TPU_ST_I8 ? (uint64_t)L->in * L->out + vec : 0);
    uint64_t conv = w32 + 2 * vec;
    if (conv + tr > one_layer) one_layer = conv + tr;
    static const float some_bias; /* tpu_plan_memory only asks whether there is a bias */
    tpu_epilogue_t ep = {.bias = L->bt ? &some_bias : NULL, .act = cfg->layers[i].act,
                         .out_dtype = TPU_DTYPE_FP32};
    for (size_t b = 0; b < cfg->nbuckets && rc == TPU_OK; b++) {
      size_t pb;
      rc = tpu_plan_memory(m->engine, cfg->precision, L->in, L->out, cfg->buckets[b],
                           TPU_DTYPE_FP32, &ep, &pb);
      if (rc == TPU_OK) rc = add64(&z->plans, pb);
    }
    if (i + 1 < m->nlayers && L->out > hidden) hidden = L->out;
  }
  if (rc != TPU_OK) return rc;
  z->transient = graph_copies + one_layer;
  uint64_t io = maxb * (cfg->input_width + cfg->output_width) * sizeof(float);
  z->scratch = io + (m->nlayers > 1 ? maxb * hidden * sizeof(float) : 0) * (m->nlayers > 2 ? 2 : 1) +
               sizeof *m + m->nlayers * (sizeof(layer_t) + cfg->nbuckets * sizeof(tpu_plan_t *));
  z->batch = io * batch_copies;
  z->ckpt = ckpt_bytes;
  z->held = z->weights + z->plans + z->scratch + z->batch;
  z->peak = z->held + z->ckpt + z->transient;
  return TPU_OK;
}

/* "1.5 GiB", "12.0 MiB", "800 KiB", "512 bytes". */
static const char *fmt_bytes(char *out, size_t outlen, uint64_t b) {
  if (b >= (1ull << 30))
    snprintf(out, outlen, "%.1f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20))
    snprintf(out, outlen, "%.1f MiB", (double)b / (double)(1ull << 20));
  else if (b >= 1024)
    snprintf(out, outlen, "%.0f KiB", (double)b / 1024.0);
  else
    snprintf(out, outlen, "%llu bytes", (unsigned long long)b);
  return out;
}

static int cancelled(const tpu_model_load_opts_t *o) {
  return o && o->cancel && atomic_load(o->cancel);
}

/* Converts, packs and plans layer `li` (shapes checked by layer_shape). */
/* Layer li's weight as FP32 (and, for an I8 checkpoint, its int8 values and scales), its bias,
 * checked as the contract says; buffers from alloc_floats (free them). */
static tpu_status_t layer_arrays(tpu_model_t *m, const char *ck, size_t li, float **wf_out,
                                 float **bias_out, float **scales_out, char *err, size_t errlen) {
  const tpu_model_layer_config_t *lc = &m->cfg->layers[li];
  layer_t *L = &m->layers[li];
  float *wf = NULL, *bias = NULL, *scales = NULL;
  tpu_status_t rc = TPU_OK;
  const tpu_st_tensor_t *w = L->wt;
  size_t out = L->out, k = L->in;
  size_t nel = out * k; /* ≤ 2^40: no overflow */
  *wf_out = *bias_out = *scales_out = NULL;
  if (L->bt) {
    const tpu_st_tensor_t *b = L->bt;
    if (!(bias = alloc_floats(out))) return fail(err, errlen, TPU_ENOMEM, ck, "out of memory");
    if (!to_f32(b, bias)) {
      rc = fail(err, errlen, TPU_EINVAL, ck,
                "layers[%zu].bias '%s': dtype %s is not supported (expected F32, F16 or BF16)", li,
                lc->bias, tpu_st_dtype_name(b->dtype));
      goto fail;
    }
    size_t bad = first_nonfinite(bias, out);
    if (bad < out) {
      rc = fail(err, errlen, TPU_EINVAL, ck, "layers[%zu].bias '%s': element [%zu] is %g; expected finite values",
                li, lc->bias, bad, (double)bias[bad]);
      goto fail;
    }
  }
  if (!(wf = alloc_floats(nel))) {
    rc = fail(err, errlen, TPU_ENOMEM, ck, "out of memory");
    goto fail;
  }
  if (w->dtype == TPU_ST_I8) {
    const tpu_st_tensor_t *st = L->st;
    char sname[TPU_MODEL_MAX_NAME + 16];
    snprintf(sname, sizeof sname, "%s_scale", lc->weight);
    if (!(scales = alloc_floats(out))) {
      rc = fail(err, errlen, TPU_ENOMEM, ck, "out of memory");
      goto fail;
    }
    if (!to_f32(st, scales)) {
      rc = fail(err, errlen, TPU_EINVAL, ck, "'%s': dtype %s is not supported (expected F32, F16 or BF16)",
                sname, tpu_st_dtype_name(st->dtype));
      goto fail;
    }
    for (size_t i = 0; i < out; i++)
      if (!isfinite(scales[i]) || !(scales[i] > 0)) {
        rc = fail(err, errlen, TPU_EINVAL, ck, "'%s': element [%zu] is %g; expected a finite scale > 0",
                  sname, i, (double)scales[i]);
        goto fail;
      }
    const int8_t *q = w->data; /* bytes: no alignment needed */
    for (size_t i = 0; i < nel; i++) {
      if (q[i] == -128) {
        rc = fail(err, errlen, TPU_EINVAL, ck,
                  "layers[%zu].weight '%s': element [%zu, %zu] is -128; symmetric int8 weights "
                  "must be in [-127, 127]",
                  li, lc->weight, i / k, i % k);
        goto fail;
      }
      wf[i] = (float)q[i] * scales[i / k];
    }
  } else {
    if (!to_f32(w, wf)) {
      rc = fail(err, errlen, TPU_EINVAL, ck,
                "layers[%zu].weight '%s': dtype %s is not supported (expected F32, F16, BF16, or "
                "I8 with '<weight>_scale')",
                li, lc->weight, tpu_st_dtype_name(w->dtype));
      goto fail;
    }
    size_t bad = first_nonfinite(wf, nel);
    if (bad < nel) {
      rc = fail(err, errlen, TPU_EINVAL, ck,
                "layers[%zu].weight '%s': element [%zu, %zu] is %g; expected finite values", li,
                lc->weight, bad / k, bad % k, (double)wf[bad]);
      goto fail;
    }
  }
  *wf_out = wf;
  *bias_out = bias;
  *scales_out = scales;
  return TPU_OK;
fail:
  free(wf);
  free(bias);
  free(scales);
  return rc;
}

static int has_initializer(const tpu_graph_t *g, const char *name) {
  tpu_graph_tensor_info_t ti;
  long t = tpu_graph_find(g, name);
  return t >= 0 && tpu_graph_tensor(g, (size_t)t, &ti) == TPU_OK && ti.is_initializer;
}

/* The dense chain as a graph (one execution path for every model): per layer a Gemm (x·Wᵀ +
 * b: transB, W [out, in] as nn.Linear) and its activation as an ONNX node; the compiler fuses
 * each pair back into one engine plan with the bias and activation in its epilogue. An I8
 * checkpoint's weights are marked pre-quantized (tpu_graph_set_quantized), so int8 packs them
 * as they are. */
static tpu_status_t dense_graph(tpu_model_t *m, const char *ck, const tpu_model_load_opts_t *o,
                                char *err, size_t errlen) {
  const tpu_model_config_t *cfg = m->cfg;
  tpu_graph_t *g = NULL;
  tpu_status_t rc = tpu_graph_new(&g);
  if (rc != TPU_OK) return fail(err, errlen, rc, ck, "out of memory");
  m->graph = g;
  int64_t in_dims[2] = {TPU_GRAPH_BATCH, (int64_t)cfg->input_width};
  if ((rc = tpu_graph_add_tensor(g, cfg->input_name, TPU_GRAPH_FP32, 2, in_dims)) != TPU_OK)
    return fail(err, errlen, rc, ck, "%s", tpu_graph_error(g));
  char cur[TPU_MODEL_MAX_NAME + 32], next[TPU_MODEL_MAX_NAME + 32];
  snprintf(cur, sizeof cur, "%s", cfg->input_name);
  for (size_t li = 0; li < cfg->nlayers; li++) {
    if (cancelled(o)) return fail(err, errlen, TPU_ECANCELED, m->dir, "load cancelled");
    const tpu_model_layer_config_t *lc = &cfg->layers[li];
    const layer_t *L = &m->layers[li];
    float *wf, *bias, *scales;
    if ((rc = layer_arrays(m, ck, li, &wf, &bias, &scales, err, errlen)) != TPU_OK) return rc;
    int64_t wd[2] = {(int64_t)L->out, (int64_t)L->in}, bd[1] = {(int64_t)L->out};
    /* Layers may share a weight or bias (tied layers): one initializer each, whose shape
     * layer_shape has checked against every layer that names it. */
    rc = TPU_OK;
    if (!has_initializer(g, lc->weight)) {
      rc = tpu_graph_add_initializer(g, lc->weight, TPU_GRAPH_FP32, 2, wd, wf,
                                     L->out * L->in * sizeof(float));
      if (rc == TPU_OK && scales)
        rc = tpu_graph_set_quantized(g, lc->weight, L->wt->data, scales, 0);
    }
    if (rc == TPU_OK && bias && !has_initializer(g, lc->bias))
      rc = tpu_graph_add_initializer(g, lc->bias, TPU_GRAPH_FP32, 1, bd, bias,
                                     L->out * sizeof(float));
    free(wf);
    free(bias);
    free(scales);
    if (rc != TPU_OK) return fail(err, errlen, rc, m->dir, "layers[%zu]: %s", li, tpu_graph_error(g));
    int last = li + 1 == cfg->nlayers, act = lc->act != TPU_ACT_NONE;
    char gemm_out[TPU_MODEL_MAX_NAME + 32];
    snprintf(gemm_out, sizeof gemm_out, "%s", last && !act ? cfg->output_name : "");
    if (!gemm_out[0]) snprintf(gemm_out, sizeof gemm_out, "tpud.layers[%zu].gemm", li);
    const char *gin[3] = {cur, lc->weight, lc->bias};
    const char *gout[1] = {gemm_out};
    char gname[48];
    snprintf(gname, sizeof gname, "layers[%zu]", li);
    size_t idx;
    rc = tpu_graph_add_node(g, gname, "Gemm", NULL, 13, bias ? 3 : 2, gin, 1, gout, &idx);
    tpu_graph_attr_t tb = {.name = "transB", .type = TPU_GRAPH_ATTR_INT, .i = 1};
    if (rc == TPU_OK) rc = tpu_graph_add_attr(g, idx, &tb);
    snprintf(next, sizeof next, "%s", gemm_out);
    if (rc == TPU_OK && act) {
      static const struct {
        tpu_act_t act;
        const char *op;
        int opset;
      } ops[] = {{TPU_ACT_RELU, "Relu", 14},    {TPU_ACT_GELU, "Gelu", 20},
                 {TPU_ACT_TANH, "Tanh", 13},    {TPU_ACT_SIGMOID, "Sigmoid", 13},
                 {TPU_ACT_SOFTMAX, "Softmax", 13}};
      const char *op = NULL;
      int opset = 13;
      for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (ops[k].act == lc->act) op = ops[k].op, opset = ops[k].opset;
      if (last) snprintf(next, sizeof next, "%s", cfg->output_name);
      else snprintf(next, sizeof next, "tpud.layers[%zu].act", li);
      const char *ain[1] = {gemm_out}, *aout[1] = {next};
      char aname[48];
      snprintf(aname, sizeof aname, "layers[%zu].activation", li);
      rc = op ? tpu_graph_add_node(g, aname, op, NULL, opset, 1, ain, 1, aout, NULL) : TPU_EINVAL;
    }
    if (rc != TPU_OK) return fail(err, errlen, rc, ck, "layers[%zu]: %s", li, tpu_graph_error(g));
    snprintf(cur, sizeof cur, "%s", next);
  }
  const char *ins[1] = {cfg->input_name}, *outs[1] = {cfg->output_name};
  if ((rc = tpu_graph_set_inputs(g, 1, ins)) != TPU_OK ||
      (rc = tpu_graph_set_outputs(g, 1, outs)) != TPU_OK || (rc = tpu_graph_validate(g)) != TPU_OK)
    return fail(err, errlen, rc, ck, "%s", tpu_graph_error(g));
  tpu_graph_compile_opts_t co = {.precision = cfg->precision};
  int sys = 0;
  if ((rc = tpu__model_calibrate(m, o, &co, &sys, err, errlen)) != TPU_OK) return rc;
  for (size_t b = cfg->nbuckets; b-- > 0;) { /* the largest first: the others share with it */
    if (cancelled(o)) return fail(err, errlen, TPU_ECANCELED, m->dir, "load cancelled");
    co.share = m->progs[cfg->nbuckets - 1]; /* weights packed once, one arena */
    rc = tpu_graph_compile(g, m->engine, (int64_t)cfg->buckets[b], &co, &m->progs[b]);
    if (rc != TPU_OK)
      return fail(err, errlen, rc, ck, "compiling the plan for bucket %zu failed: %s",
                  cfg->buckets[b], tpu_graph_error(g));
  }
  /* Weights and biases now live in the packed weights and epilogues only. */
  tpu_graph_release_constants(g, (const tpu_graph_program_t *const *)m->progs, cfg->nbuckets);
  return TPU_OK;
}

void tpu_model_free(tpu_model_t *m) {
  if (!m) return;
  free(m->layers);
  tpu__model_free_graph(m);
  for (size_t i = 0; i < m->nin; i++) free(m->ins[i].name);
  for (size_t i = 0; i < m->nout; i++) {
    free(m->outs[i].name);
    free(m->outs[i].labels);
    free(m->outs[i].labels_text);
  }
  free(m->pad_in);
  free(m->pad_out);
  tpu_model_config_free(m->cfg);
  free(m->name);
  free(m->dir);
  free(m);
}

static tpu_status_t reference_check(tpu_model_t *m, tpu_model_load_opts_t *o, int *sys,
                                    char *err, size_t errlen);

/* model.json "labels": each file read whole, its SHA-256 checked before anything is parsed,
 * split into lines (a final newline and a CR before each newline dropped), UTF-8 checked, and
 * held by its output, which must exist, hold numbers and have exactly one class per line in
 * its last dimension (a model without a batch dimension: its last; a batched one needs a
 * dimension after the batch). */
static tpu_status_t load_labels(tpu_model_t *m, tpu_model_load_opts_t *o, int *sys, char *err,
                                size_t errlen) {
  const tpu_model_config_t *cfg = m->cfg;
  for (size_t i = 0; i < cfg->nlabels; i++) {
    const tpu_model_labels_config_t *l = &cfg->labels[i];
    tpu__mtensor_t *t = NULL;
    for (size_t j = 0; j < m->nout && !t; j++)
      if (strcmp(m->outs[j].t.name, l->output) == 0) t = &m->outs[j];
    if (!t) {
      char names[256] = "";
      size_t at = 0;
      for (size_t j = 0; j < m->nout && at < sizeof names - 4; j++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s'", j ? ", " : "",
                               m->outs[j].t.name);
      return fail(err, errlen, TPU_EINVAL, m->dir, "model.json: labels.%s: the model has no "
                  "output '%s' (its outputs: %s)", l->output, l->output, names);
    }
    if (strcmp(t->t.datatype, "BYTES") == 0 || strcmp(t->t.datatype, "BOOL") == 0)
      return fail(err, errlen, TPU_EINVAL, m->dir, "model.json: labels.%s: output '%s' is %s; "
                  "classes are ranked by number", l->output, l->output, t->t.datatype);
    size_t first = m->batched ? 1 : 0;
    if (t->t.rank <= first)
      return fail(err, errlen, TPU_EINVAL, m->dir, "model.json: labels.%s: output '%s' has no "
                  "class dimension (rank %zu%s)", l->output, l->output, t->t.rank,
                  m->batched ? ", its only dimension is the batch" : "");
    size_t classes = (size_t)t->t.shape[t->t.rank - 1];
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", m->dir, l->file) >= sizeof path)
      return fail(err, errlen, TPU_EINVAL, m->dir, "path too long");
    void *buf = NULL;
    size_t len = 0;
    int e = tpu_file_read(path, o && o->memory_limit ? (size_t)o->memory_limit : (64u << 20),
                          o ? o->cancel : NULL, &buf, &len, NULL, err, errlen);
    if (e) {
      *sys = e;
      return e == ENOMEM ? TPU_ENOMEM : e == ECANCELED ? TPU_ECANCELED : TPU_EINVAL;
    }
    char got[65];
    if (tpu_file_sha256(buf, len, o ? o->cancel : NULL, got) != 0) {
      free(buf);
      return fail(err, errlen, TPU_ENOMEM, path, "SHA-256 failed");
    }
    if (strcmp(got, l->sha256) != 0) {
      free(buf);
      return fail(err, errlen, TPU_EINVAL, path, "SHA-256 mismatch: the file's digest is %s, "
                  "expected %s (labels.%s.sha256)", got, l->sha256, l->output);
    }
    char *text = realloc(buf, len + 1);
    if (!text) {
      free(buf);
      return fail(err, errlen, TPU_ENOMEM, path, "out of memory");
    }
    text[len] = '\0';
    t->labels_text = text; /* freed with the model from here on */
    if (!tpu_utf8_valid((const uint8_t *)text, len) || memchr(text, '\0', len))
      return fail(err, errlen, TPU_EINVAL, path, "not UTF-8 text (one label a line)");
    size_t n = 0;
    for (size_t k = 0; k < len; k++) n += text[k] == '\n';
    if (len && text[len - 1] != '\n') n++; /* a last line without its newline */
    if (n != classes)
      return fail(err, errlen, TPU_EINVAL, path, "%zu labels, but output '%s' has %zu classes "
                  "(its last dimension): expected one label a line for each", n, l->output,
                  classes);
    if (!(t->labels = calloc(n ? n : 1, sizeof *t->labels)))
      return fail(err, errlen, TPU_ENOMEM, path, "out of memory");
    char *p = text;
    for (size_t k = 0; k < n; k++) {
      char *nl = strchr(p, '\n');
      if (nl) *nl = '\0';
      size_t ll = strlen(p);
      if (ll && p[ll - 1] == '\r') p[--ll] = '\0';
      t->labels[k] = p;
      if (ll > t->t.label_max) t->t.label_max = ll;
      p = nl ? nl + 1 : p + ll;
    }
    t->t.labels = (const char *const *)t->labels;
    t->t.nlabels = n;
    m->memory_bytes += len + n * sizeof *t->labels;
  }
  return TPU_OK;
}

/* The dense chain (format "dense"): the verified safetensors checkpoint `ck`, every layer's
 * shapes, the memory check, packing and plans; then the one input and output. */
static tpu_status_t load_dense(tpu_model_t *m, const char *ck, tpu_model_load_opts_t *o,
                               int *sysp, char *err, size_t errlen) {
  const tpu_model_config_t *cfg = m->cfg;
  const char *dir = m->dir;
  char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32], b8[32], b9[32], b10[32];
  tpu_safetensors_t *st = NULL;
  tpu_status_t rc;
  int sys = 0;
  uint64_t limit = o ? o->memory_limit : 0;
  struct stat sb;
  if (limit && stat(ck, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > limit) {
    rc = fail(err, errlen, TPU_ERANGE, ck,
              "the checkpoint is %s (%lld bytes), more than the model memory limit of %s",
              fmt_bytes(b1, sizeof b1, (uint64_t)sb.st_size), (long long)sb.st_size,
              fmt_bytes(b2, sizeof b2, limit));
    goto fail;
  }
  /* The digest is checked before the file is parsed (a partial copy or tampered file is
   * reported as what it is, and never interpreted), over the private copy that is then parsed
   * and packed: what was verified is what serves. */
  tpu_st_read_opts_t ro = {.max_bytes = limit, .cancel = o ? o->cancel : NULL, .sys_errno = &sys};
  if ((rc = tpu_safetensors_load(ck, cfg->sha256, &ro, &st, err, errlen)) != TPU_OK) goto fail;
  size_t cklen;
  tpu_safetensors_bytes(st, &cklen);

  if (!(m->layers = calloc(cfg->nlayers, sizeof *m->layers))) {
    rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
    goto fail;
  }
  m->nlayers = cfg->nlayers;
  size_t width = cfg->input_width, hidden = 1;
  for (size_t i = 0; i < cfg->nlayers; i++) {
    if ((rc = layer_shape(m, st, ck, i, width, err, errlen)) != TPU_OK) goto fail;
    width = m->layers[i].out;
    if (i + 1 < cfg->nlayers && width > hidden) hidden = width;
  }
  /* Sized before anything big is allocated: a small file cannot demand gigabytes. */
  mem_t z;
  if ((rc = size_model(m, cklen, o ? o->batch_copies : 0, &z)) != TPU_OK) {
    rc = fail(err, errlen, rc, dir, "cannot size the model: %s", tpu_strerror(rc));
    goto fail;
  }
  if (o) {
    o->memory_bytes = z.held;
    o->peak_bytes = z.peak;
  }
  if (limit && z.peak > limit) {
    rc = fail(err, errlen, TPU_ERANGE, dir,
              "needs %s to load, more than the model memory limit of %s: %s while serving "
              "(packed weights %s, plans %s, activations and staging for %zu rows %s, batcher "
              "%s) and %s more while loading (the checkpoint %s, conversion buffers %s); "
              "lower max_batch_size or the widths, or raise the limit",
              fmt_bytes(b1, sizeof b1, z.peak), fmt_bytes(b2, sizeof b2, limit),
              fmt_bytes(b3, sizeof b3, z.held), fmt_bytes(b4, sizeof b4, z.weights),
              fmt_bytes(b5, sizeof b5, z.plans), cfg->max_batch_size,
              fmt_bytes(b6, sizeof b6, z.scratch), fmt_bytes(b7, sizeof b7, z.batch),
              fmt_bytes(b8, sizeof b8, z.ckpt + z.transient), fmt_bytes(b9, sizeof b9, z.ckpt),
              fmt_bytes(b10, sizeof b10, z.transient));
    goto fail;
  }
  if ((rc = dense_graph(m, ck, o, err, errlen)) != TPU_OK) goto fail;
  for (size_t i = 0; i < cfg->nlayers; i++) m->layers[i].wt = m->layers[i].bt = m->layers[i].st = NULL;
  tpu_safetensors_close(st); /* weights are packed: the checkpoint's bytes are no longer needed */
  st = NULL;
  m->memory_bytes = z.held;
  m->nin = m->nout = 1;
  for (int k = 0; k < 2; k++) {
    tpu__mtensor_t *t = k ? &m->outs[0] : &m->ins[0];
    const tpu_model_io_config_t *c = k ? &cfg->outputs[0] : &cfg->inputs[0];
    if (!(t->name = strdup(c->name))) {
      rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
      goto fail;
    }
    snprintf(t->datatype, sizeof t->datatype, "FP32");
    memcpy(t->shape, c->shape, sizeof t->shape);
    t->t = (tpu_model_tensor_t){.name = t->name, .datatype = t->datatype, .rank = 2,
                                .shape = t->shape, .row_elems = (size_t)c->shape[1],
                                .row_bytes = (size_t)c->shape[1] * sizeof(float)};
  }
  m->in_row = m->ins[0].t.row_bytes;
  m->out_row = m->outs[0].t.row_bytes;
  m->batched = 1;
  *sysp = sys;
  return TPU_OK;

fail:
  *sysp = sys;
  tpu_safetensors_close(st);
  return rc;
}

tpu_status_t tpu_model_load(tpu_engine_t *engine, const char *dir, const char *name,
                            uint64_t version, tpu_model_load_opts_t *o, tpu_model_t **out,
                            char *err, size_t errlen) {
  uint64_t t0 = tpu_now_us();
  char path[PATH_MAX], ck[PATH_MAX];
  tpu_status_t rc;
  int sys = 0; /* errno of a failed read, for opts->transient */
  if (err && errlen) err[0] = '\0';
  if (o) {
    o->transient = 0;
    o->memory_bytes = o->peak_bytes = 0;
  }
  if (!engine || !dir || !name || !out)
    return fail(err, errlen, TPU_EINVAL, "tpu_model_load", "engine, dir, name and out are required");
  *out = NULL;
  if ((size_t)snprintf(path, sizeof path, "%s/model.json", dir) >= sizeof path)
    return fail(err, errlen, TPU_EINVAL, dir, "path too long");

  tpu_model_t *m = calloc(1, sizeof *m);
  if (!m) return fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
  m->engine = engine;
  m->version = version;
  if (!(m->name = strdup(name)) || !(m->dir = strdup(dir))) {
    rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
    goto fail;
  }
  if ((rc = tpu_model_config_load(path, &m->cfg, &sys, err, errlen)) != TPU_OK) goto fail;
  const tpu_model_config_t *cfg = m->cfg;

  if ((size_t)snprintf(ck, sizeof ck, "%s/%s", dir, cfg->checkpoint_file) >= sizeof ck) {
    rc = fail(err, errlen, TPU_EINVAL, dir, "path too long");
    goto fail;
  }
  if (cfg->format != TPU_MODEL_FORMAT_DENSE) { /* onnx, xgboost: a graph from the model file */
    if ((rc = tpu__model_load_graph(m, ck, o, &sys, err, errlen)) != TPU_OK) goto fail;
    m->memory_bytes = o ? o->memory_bytes : 0;
  } else if ((rc = load_dense(m, ck, o, &sys, err, errlen)) != TPU_OK) {
    goto fail;
  }
  if ((rc = load_labels(m, o, &sys, err, errlen)) != TPU_OK) goto fail;
  size_t maxb = cfg->max_batch_size;
  m->pad_in = alloc_floats((maxb * m->in_row + 3) / 4);
  m->pad_out = alloc_floats((maxb * m->out_row + 3) / 4);
  if (!m->pad_in || !m->pad_out) {
    rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory for %zu-row staging", maxb);
    goto fail;
  }

  /* Warm-up: every bucket once, so the first request pays no first-touch or lazy-init cost. */
  uint64_t tw = tpu_now_us();
  memset(m->pad_in, 0, maxb * m->in_row);
  for (size_t b = 0; b < cfg->nbuckets; b++) {
    if (cancelled(o)) {
      rc = TPU_ECANCELED;
    } else {
      char rerr[256] = "";
      rc = tpu__model_run_graph(m, b, m->pad_in, m->pad_out, ~(uint64_t)0, rerr, sizeof rerr);
      if (rc != TPU_OK && rc != TPU_ECANCELED) {
        rc = fail(err, errlen, rc, dir, "warm-up run of bucket %zu (zero inputs) failed: %s",
                  cfg->buckets[b], rerr);
        goto fail;
      }
    }
    if (rc == TPU_ECANCELED) {
      rc = fail(err, errlen, rc, dir, "load cancelled during warm-up");
      goto fail;
    }
    if (rc != TPU_OK) {
      rc = fail(err, errlen, rc, dir, "warm-up run of bucket %zu failed: %s", cfg->buckets[b],
                tpu_strerror(rc));
      goto fail;
    }
  }
  m->warmup_us = tpu_now_us() - tw;
  if (cfg->reference.present && (rc = reference_check(m, o, &sys, err, errlen)) != TPU_OK)
    goto fail;
  m->load_us = tpu_now_us() - t0;
  *out = m;
  return TPU_OK;

fail:
  if (o) o->transient = rc == TPU_ENOMEM || (sys && tpu_file_transient(sys));
  tpu_model_free(m);
  return rc;
}

int tpu_model_bucket_index(const tpu_model_t *m, size_t rows) {
  if (!m || rows == 0) return -1;
  for (size_t b = 0; b < m->cfg->nbuckets; b++)
    if (m->cfg->buckets[b] >= rows) return (int)b;
  return -1;
}


tpu_status_t tpu_model_run_want(tpu_model_t *m, size_t bucket_index, const void *in, void *out,
                                uint64_t want, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!m || !in || !out || bucket_index >= m->cfg->nbuckets) return TPU_EINVAL;
  return tpu__model_run_graph(m, bucket_index, in, out, want, err, errlen);
}

tpu_status_t tpu_model_run(tpu_model_t *m, size_t bucket_index, const void *in, void *out,
                           char *err, size_t errlen) {
  return tpu_model_run_want(m, bucket_index, in, out, 0, err, errlen);
}

tpu_status_t tpu_model_infer(tpu_model_t *m, size_t rows, const void *in, void *out) {
  return tpu_model_infer_want(m, rows, in, out, 0);
}

tpu_status_t tpu_model_infer_want(tpu_model_t *m, size_t rows, const void *in, void *out,
                                  uint64_t want) {
  if (!m || !in || !out || rows == 0) return TPU_EINVAL;
  const unsigned char *x = in;
  unsigned char *y = out;
  size_t k = m->in_row, n = m->out_row;
  while (rows > 0) {
    size_t chunk = rows < m->cfg->max_batch_size ? rows : m->cfg->max_batch_size;
    int b = tpu_model_bucket_index(m, chunk);
    size_t bucket = m->cfg->buckets[b];
    tpu_status_t rc;
    if (bucket == chunk) {
      rc = tpu_model_run_want(m, (size_t)b, x, y, want, NULL, 0);
    } else {
      memcpy(m->pad_in, x, chunk * k);
      memset(m->pad_in + chunk * k, 0, (bucket - chunk) * k);
      rc = tpu_model_run_want(m, (size_t)b, m->pad_in, m->pad_out, want, NULL, 0);
      if (rc == TPU_OK) memcpy(y, m->pad_out, chunk * n);
    }
    if (rc != TPU_OK) return rc;
    x += chunk * k;
    y += chunk * n;
    rows -= chunk;
  }
  return TPU_OK;
}

/* ---- the reference check ---- */

/* The safetensors dtype of an OIP datatype (the ones models take). */
static int st_dtype_of(const char *dt, tpu_st_dtype_t *out) {
  static const struct {
    const char *oip;
    tpu_st_dtype_t st;
  } map[] = {{"FP32", TPU_ST_F32}, {"FP16", TPU_ST_F16}, {"BF16", TPU_ST_BF16},
             {"FP64", TPU_ST_F64}, {"INT64", TPU_ST_I64}, {"INT32", TPU_ST_I32},
             {"INT8", TPU_ST_I8},  {"UINT8", TPU_ST_U8},  {"BOOL", TPU_ST_BOOL}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i].oip, dt) == 0) {
      *out = map[i].st;
      return 1;
    }
  return 0;
}

/* Element e of a row of tensor t (as double), for comparisons. */
static double elem_f64(const tpu_model_tensor_t *t, const unsigned char *p, size_t e) {
  const char *dt = t->datatype;
  if (strcmp(dt, "FP32") == 0) {
    float v;
    memcpy(&v, p + 4 * e, 4);
    return v;
  }
  if (strcmp(dt, "FP64") == 0) {
    double v;
    memcpy(&v, p + 8 * e, 8);
    return v;
  }
  if (strcmp(dt, "FP16") == 0) {
    uint16_t h;
    memcpy(&h, p + 2 * e, 2);
    return f16_to_f32(h);
  }
  if (strcmp(dt, "BF16") == 0) {
    uint16_t h;
    memcpy(&h, p + 2 * e, 2);
    return tpu_bf16_to_fp32(h);
  }
  if (strcmp(dt, "INT64") == 0) {
    int64_t v;
    memcpy(&v, p + 8 * e, 8);
    return (double)v;
  }
  if (strcmp(dt, "INT32") == 0) {
    int32_t v;
    memcpy(&v, p + 4 * e, 4);
    return v;
  }
  if (strcmp(dt, "INT8") == 0) return (int8_t)p[e];
  return p[e]; /* UINT8, BOOL */
}

static int is_float_dt(const char *dt) {
  return strcmp(dt, "FP32") == 0 || strcmp(dt, "FP64") == 0 || strcmp(dt, "FP16") == 0 ||
         strcmp(dt, "BF16") == 0;
}

static size_t argmax_row(const tpu_model_tensor_t *t, const unsigned char *p, size_t cols,
                         size_t row) {
  size_t best = 0;
  for (size_t j = 1; j < cols; j++)
    if (elem_f64(t, p, row * cols + j) > elem_f64(t, p, row * cols + best)) best = j;
  return best;
}

/* Runs the reference file's inputs through every bucket and compares every output with the
 * framework's (see model.h's tpu_model_reference_result and PRODUCT.md "reference"). */
/* A reference given as an ONNX test data directory (test_data_set_N/ with input_K.pb and
 * output_K.pb, one TensorProto each, as ONNX's backend tests and onnx's tooling write them):
 * its SHA-256 is that of each file's size (8 bytes, little-endian) and bytes, in that order
 * (inputs, then outputs);
 * the tensors become an in-memory safetensors file of input.NAME and output.NAME (matched to
 * the model's inputs and outputs by the tensor's name, else by position), so one check reads
 * both forms. *blob receives the bytes (free()). */
static tpu_status_t pb_reference(const tpu_model_t *m, const char *dir, const char *sha,
                                 const tpu_model_load_opts_t *o, int *sys, void **blob,
                                 size_t *bloblen, char *err, size_t errlen) {
  tpu_onnx_tensor_t *ts[2][TPU_MODEL_MAX_IO] = {{0}};
  size_t nt[2] = {0, 0};
  unsigned char *cat = NULL, *out = NULL;
  size_t catlen = 0;
  tpu_status_t rc = TPU_OK;
  size_t limit = o ? (size_t)o->memory_limit : 0;
  for (int k = 0; k < 2 && rc == TPU_OK; k++) {
    size_t want = k ? m->nout : m->nin;
    for (size_t i = 0; i < want; i++) {
      char path[PATH_MAX];
      if ((size_t)snprintf(path, sizeof path, "%s/%s_%zu.pb", dir, k ? "output" : "input", i) >=
          sizeof path) {
        rc = fail(err, errlen, TPU_EINVAL, dir, "path too long");
        break;
      }
      void *buf = NULL;
      size_t len = 0;
      int e = tpu_file_read(path, limit, o ? o->cancel : NULL, &buf, &len, NULL, err, errlen);
      if (e) {
        *sys = e;
        rc = e == ENOMEM ? TPU_ENOMEM : e == ECANCELED ? TPU_ECANCELED : TPU_EINVAL;
        break;
      }
      unsigned char *nc = realloc(cat, catlen + 8 + len + 1);
      if (!nc) {
        free(buf);
        rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
        break;
      }
      cat = nc;
      uint64_t l64 = len; /* each file's size, then its bytes: the boundaries are digested too */
      memcpy(cat + catlen, &l64, 8);
      memcpy(cat + catlen + 8, buf, len);
      catlen += 8 + len;
      rc = tpu_onnx_tensor_parse(buf, len, path, &ts[k][i], err, errlen);
      free(buf);
      if (rc != TPU_OK) break;
      nt[k] = i + 1;
    }
  }
  char got[65];
  if (rc == TPU_OK) {
    if (tpu_file_sha256(cat ? cat : (const void *)"", catlen, o ? o->cancel : NULL, got) != 0)
      rc = fail(err, errlen, TPU_ENOMEM, dir, "SHA-256 failed");
    else if (strcmp(got, sha) != 0)
      rc = fail(err, errlen, TPU_EINVAL, dir, "SHA-256 mismatch: the digest of its input_K.pb "
                "and output_K.pb files (each as its size in 8 bytes little-endian, then its "
                "bytes, in that order) is %s, expected %s", got, sha);
  }
  /* The safetensors form: header of every tensor, then the bytes. */
  size_t hcap = 256, hlen = 0, data = 0;
  char *hdr = NULL;
  for (int k = 0; k < 2 && rc == TPU_OK; k++)
    for (size_t i = 0; i < nt[k]; i++) {
      const tpu_onnx_tensor_t *t = ts[k][i];
      const tpu_model_tensor_t *mt = k ? &m->outs[i].t : &m->ins[i].t;
      size_t n = k ? m->nout : m->nin;
      for (size_t j = 0; j < n; j++) /* by name, when the file names a model tensor */
        if (t->name[0] && strcmp(t->name, k ? m->outs[j].t.name : m->ins[j].t.name) == 0)
          mt = k ? &m->outs[j].t : &m->ins[j].t;
      static const struct {
        int onnx;
        const char *st;
      } dt[] = {{TPU_ONNX_FLOAT, "F32"}, {TPU_ONNX_FLOAT16, "F16"}, {TPU_ONNX_BFLOAT16, "BF16"},
                {TPU_ONNX_DOUBLE, "F64"}, {TPU_ONNX_INT64, "I64"},  {TPU_ONNX_INT32, "I32"},
                {TPU_ONNX_INT8, "I8"},    {TPU_ONNX_UINT8, "U8"},   {TPU_ONNX_BOOL, "BOOL"}};
      const char *sd = NULL;
      for (size_t d = 0; d < sizeof dt / sizeof dt[0]; d++)
        if (dt[d].onnx == t->dtype) sd = dt[d].st;
      if (!sd || strpbrk(mt->name, "\"\\")) {
        if (sd)
          rc = fail(err, errlen, TPU_EINVAL, dir, "%s_%zu.pb: the model's tensor name '%s' has "
                    "a quote or backslash, which this reference form cannot carry",
                    k ? "output" : "input", i, mt->name);
        else
          rc = fail(err, errlen, TPU_EINVAL, dir, "%s_%zu.pb: element type %s is not one a "
                    "model takes", k ? "output" : "input", i, tpu_onnx_dtype_name(t->dtype));
        break;
      }
      size_t need = hlen + strlen(mt->name) + 64 + 24 * (t->ndim + 2);
      if (need + 8 > hcap || !hdr) {
        hcap = 2 * need + 256;
        char *nh = realloc(hdr, hcap);
        if (!nh) {
          rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
          break;
        }
        hdr = nh;
      }
      hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "%s\"%s.%s\":{\"dtype\":\"%s\","
                               "\"shape\":[", hlen ? "," : "{", k ? "output" : "input",
                               mt->name, sd);
      for (size_t d = 0; d < t->ndim; d++)
        hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "%s%lld", d ? "," : "",
                                 (long long)t->dims[d]);
      hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "],\"data_offsets\":[%zu,%zu]}", data,
                               data + t->nbytes);
      data += t->nbytes;
    }
  if (rc == TPU_OK) {
    if (!hdr && !(hdr = malloc(hcap))) rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
    else {
      hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "%s}", hlen ? "" : "{");
      while (hlen % 8) hdr[hlen++] = ' ';
      if (!(out = malloc(8 + hlen + data))) {
        rc = fail(err, errlen, TPU_ENOMEM, dir, "out of memory");
      } else {
        uint64_t hl = hlen;
        memcpy(out, &hl, 8);
        memcpy(out + 8, hdr, hlen);
        size_t at = 8 + hlen;
        for (int k = 0; k < 2; k++)
          for (size_t i = 0; i < nt[k]; i++) {
            if (ts[k][i]->nbytes) memcpy(out + at, ts[k][i]->data, ts[k][i]->nbytes);
            at += ts[k][i]->nbytes;
          }
        *blob = out;
        *bloblen = at;
      }
    }
  }
  free(hdr);
  free(cat);
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < nt[k]; i++) tpu_onnx_tensor_free(ts[k][i]);
  return rc;
}

static tpu_status_t reference_check(tpu_model_t *m, tpu_model_load_opts_t *o, int *sys,
                                    char *err, size_t errlen) {
  const tpu_model_reference_config_t *rc_ = &m->cfg->reference;
  char path[PATH_MAX];
  tpu_safetensors_t *st = NULL;
  void *blob = NULL;
  tpu_status_t rc;
  if ((size_t)snprintf(path, sizeof path, "%s/%s", m->dir, rc_->file) >= sizeof path)
    return fail(err, errlen, TPU_EINVAL, m->dir, "path too long");
  struct stat sb;
  if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* ONNX test data: test_data_set_N/ */
    size_t len = 0;
    if ((rc = pb_reference(m, path, rc_->sha256, o, sys, &blob, &len, err, errlen)) != TPU_OK)
      return rc;
    if ((rc = tpu_safetensors_parse(blob, len, path, &st, err, errlen)) != TPU_OK) {
      free(blob);
      return rc;
    }
  } else {
    tpu_st_read_opts_t ro = {.max_bytes = o ? o->memory_limit : 0,
                             .cancel = o ? o->cancel : NULL, .sys_errno = sys};
    if ((rc = tpu_safetensors_load(path, rc_->sha256, &ro, &st, err, errlen)) != TPU_OK)
      return rc;
  }
  const tpu_st_tensor_t *tin[TPU_MODEL_MAX_IO], *tout[TPU_MODEL_MAX_IO];
  uint64_t rows = 0;
  const char *rows_from = NULL;
  long label_j = -1;
  for (int k = 0; k < 2; k++) {
    size_t n = k ? m->nout : m->nin;
    for (size_t i = 0; i < n; i++) {
      const tpu_model_tensor_t *t = k ? &m->outs[i].t : &m->ins[i].t;
      if (k) tout[i] = NULL;
      if (k && t->on_request) continue; /* not computed by default: checked in the unit tests */
      char key[TPU_MODEL_MAX_NAME * 2 + 16];
      snprintf(key, sizeof key, "%s.%s", k ? "output" : "input", t->name);
      const tpu_st_tensor_t *x = tpu_safetensors_find(st, key);
      tpu_st_dtype_t want;
      if (!x) {
        rc = fail(err, errlen, TPU_EINVAL, path, "no tensor '%s' (the reference holds "
                  "input.NAME and output.NAME for every input and output of the model)", key);
        goto done;
      }
      if (!st_dtype_of(t->datatype, &want) || x->dtype != want) {
        rc = fail(err, errlen, TPU_EINVAL, path, "tensor '%s' is %s; the model's %s is %s",
                  key, tpu_st_dtype_name(x->dtype), t->name, t->datatype);
        goto done;
      }
      /* Batched: [R, shape[1:]...]; not batched: exactly the shape (R = 1). */
      size_t lead = m->batched ? 1 : 0;
      int ok = x->ndim == t->rank;
      for (size_t d = lead; ok && d < t->rank; d++) ok = x->shape[d] == (uint64_t)t->shape[d];
      uint64_t r = m->batched ? (x->ndim ? x->shape[0] : 0) : 1;
      if (!ok || r == 0) {
        char s1[160];
        rc = fail(err, errlen, TPU_EINVAL, path, "tensor '%s' has shape %s; expected %s rows of "
                  "the model's %s shape", key, fmt_shape(s1, sizeof s1, x),
                  m->batched ? "one or more" : "exactly", t->name);
        goto done;
      }
      if (rows_from && r != rows) {
        rc = fail(err, errlen, TPU_EINVAL, path, "tensor '%s' has %llu rows but '%s' has %llu",
                  key, (unsigned long long)r, rows_from, (unsigned long long)rows);
        goto done;
      }
      rows = r;
      rows_from = x->name;
      if (k) tout[i] = x;
      else tin[i] = x;
      if (k && rc_->label_output && strcmp(rc_->label_output, t->name) == 0) {
        if (t->rank < (m->batched ? 2u : 1u) || t->shape[t->rank - 1] < 2) {
          rc = fail(err, errlen, TPU_EINVAL, m->dir, "model.json: reference.labels.output '%s' "
                    "has one value per row: there is no label (an argmax over 2 or more "
                    "classes) to compare; use rtol/atol for it", t->name);
          goto done;
        }
        label_j = (long)i;
      }
    }
  }
  if (rc_->label_output && label_j < 0) {
    rc = fail(err, errlen, TPU_EINVAL, m->dir, "model.json: reference.labels.output: the model "
              "has no output '%s'", rc_->label_output);
    goto done;
  }
  /* Every bucket, the rows in chunks of the bucket's size (the last padded with zeros). */
  double worst = -1, worst_err = 0, worst_got = 0, worst_want = 0, min_agree = 1;
  size_t worst_o = 0, worst_row = 0, worst_e = 0, worst_bucket = 0, agree_bucket = 0;
  int bad = 0;
  for (size_t b = 0; b < m->cfg->nbuckets; b++) {
    size_t bs = m->cfg->buckets[b];
    uint64_t agree = 0;
    for (uint64_t r0 = 0; r0 < rows; r0 += bs) {
      if (cancelled(o)) {
        rc = fail(err, errlen, TPU_ECANCELED, m->dir, "load cancelled during the reference check");
        goto done;
      }
      size_t n = rows - r0 < bs ? (size_t)(rows - r0) : bs;
      memset(m->pad_in, 0, bs * m->in_row);
      for (size_t i = 0; i < m->nin; i++) {
        const tpu_model_tensor_t *t = &m->ins[i].t;
        const unsigned char *src = (const unsigned char *)tin[i]->data + r0 * t->row_bytes;
        for (size_t r = 0; r < n; r++)
          memcpy(m->pad_in + r * m->in_row + t->offset, src + r * t->row_bytes, t->row_bytes);
      }
      char rerr[512];
      rc = tpu_model_run(m, b, m->pad_in, m->pad_out, rerr, sizeof rerr);
      if (rc != TPU_OK) {
        rc = fail(err, errlen, rc, path, "bucket %zu, rows %llu..%llu: %s", bs,
                  (unsigned long long)r0, (unsigned long long)(r0 + n - 1),
                  rerr[0] ? rerr : tpu_strerror(rc));
        goto done;
      }
      for (size_t j = 0; j < m->nout; j++) {
        const tpu_model_tensor_t *t = &m->outs[j].t;
        if (!tout[j]) continue;
        int fl = is_float_dt(t->datatype);
        for (size_t r = 0; r < n; r++) {
          const unsigned char *got = m->pad_out + r * m->out_row + t->offset;
          const unsigned char *want =
              (const unsigned char *)tout[j]->data + (r0 + r) * t->row_bytes;
          for (size_t e = 0; e < t->row_elems; e++) {
            double g = elem_f64(t, got, e), w = elem_f64(t, want, e);
            double tol = fl ? rc_->atol + rc_->rtol * fabs(w) : 0;
            double d = fabs(g - w);
            if (isnan(w) && isnan(g)) d = 0;
            else if (isnan(g) || isnan(w)) d = INFINITY;
            double ratio = tol > 0 ? d / tol : (d > 0 ? INFINITY : 0);
            if (ratio > worst) {
              worst = ratio;
              worst_err = d;
              worst_got = g;
              worst_want = w;
              worst_o = j;
              worst_row = (size_t)(r0 + r);
              worst_e = e;
              worst_bucket = bs;
            }
            if (d > tol) bad = 1;
          }
          if ((long)j == label_j && t->row_elems >= 1) {
            size_t cols = t->rank >= 1 ? (size_t)t->shape[t->rank - 1] : 1;
            size_t per = cols ? t->row_elems / cols : 0;
            int all = 1;
            for (size_t q = 0; q < per; q++)
              all &= argmax_row(t, got, cols, q) == argmax_row(t, want, cols, q);
            agree += (uint64_t)all;
          }
        }
      }
    }
    if (label_j >= 0) {
      double a = (double)agree / (double)rows;
      if (a < min_agree) {
        min_agree = a;
        agree_bucket = bs;
      }
    }
  }
  const char *wname = m->outs[worst_o].t.name;
  if (bad) {
    rc = fail(err, errlen, TPU_EINVAL, path,
              "reference check failed: output '%s' row %zu element %zu is %.9g, the framework "
              "gave %.9g (error %.3g > atol %g + rtol %g x |expected|) in bucket %zu; this "
              "version does not serve",
              wname, worst_row, worst_e, worst_got, worst_want, worst_err, rc_->atol, rc_->rtol,
              worst_bucket);
    goto done;
  }
  if (label_j >= 0 && min_agree < rc_->min_agreement) {
    rc = fail(err, errlen, TPU_EINVAL, path,
              "reference check failed: output '%s' labels agree with the framework's on %.2f%% "
              "of %llu rows in bucket %zu, below min_agreement %.2f%%; this version does not "
              "serve",
              rc_->label_output, 100 * min_agree, (unsigned long long)rows, agree_bucket,
              100 * rc_->min_agreement);
    goto done;
  }
  int w = snprintf(m->reference, sizeof m->reference,
                   "passed: %llu rows in %zu buckets, worst error %.3g (output '%s' row %zu "
                   "element %zu; atol %g, rtol %g)",
                   (unsigned long long)rows, m->cfg->nbuckets, worst_err, wname, worst_row,
                   worst_e, rc_->atol, rc_->rtol);
  if (label_j >= 0 && w > 0 && (size_t)w < sizeof m->reference)
    snprintf(m->reference + w, sizeof m->reference - (size_t)w,
             ", labels of '%s' agree on %.2f%% (min %.2f%%)", rc_->label_output, 100 * min_agree,
             100 * rc_->min_agreement);
  rc = TPU_OK;
done:
  tpu_safetensors_close(st);
  free(blob);
  return rc;
}

const char *tpu_model_name(const tpu_model_t *m) { return m ? m->name : NULL; }
uint64_t tpu_model_version(const tpu_model_t *m) { return m ? m->version : 0; }
const char *tpu_model_dir(const tpu_model_t *m) { return m ? m->dir : NULL; }
const char *tpu_model_input_name(const tpu_model_t *m) { return m ? m->ins[0].t.name : NULL; }
size_t tpu_model_input_width(const tpu_model_t *m) { return m ? m->ins[0].t.row_elems : 0; }
const char *tpu_model_output_name(const tpu_model_t *m) { return m ? m->outs[0].t.name : NULL; }
size_t tpu_model_output_width(const tpu_model_t *m) { return m ? m->outs[0].t.row_elems : 0; }
size_t tpu_model_input_count(const tpu_model_t *m) { return m ? m->nin : 0; }
size_t tpu_model_output_count(const tpu_model_t *m) { return m ? m->nout : 0; }
const tpu_model_tensor_t *tpu_model_input(const tpu_model_t *m, size_t i) {
  return m && i < m->nin ? &m->ins[i].t : NULL;
}
const tpu_model_tensor_t *tpu_model_output(const tpu_model_t *m, size_t i) {
  return m && i < m->nout ? &m->outs[i].t : NULL;
}
size_t tpu_model_in_row_bytes(const tpu_model_t *m) { return m ? m->in_row : 0; }
size_t tpu_model_out_row_bytes(const tpu_model_t *m) { return m ? m->out_row : 0; }
int tpu_model_batched(const tpu_model_t *m) { return m ? m->batched : 0; }
const char *tpu_model_format_name(const tpu_model_t *m) {
  if (!m) return "dense";
  return m->cfg->format == TPU_MODEL_FORMAT_ONNX      ? "onnx"
         : m->cfg->format == TPU_MODEL_FORMAT_XGBOOST ? "xgboost"
                                                      : "dense";
}
const char *tpu_model_reference_result(const tpu_model_t *m) { return m ? m->reference : ""; }
const char *tpu_model_calibration(const tpu_model_t *m) { return m ? m->calibrated : ""; }
size_t tpu_model_describe(const tpu_model_t *m, size_t b, char *buf, size_t len) {
  if (buf && len) buf[0] = '\0';
  if (!m || b >= m->cfg->nbuckets || !m->progs[b]) return 0;
  return tpu_graph_program_describe(m->progs[b], buf, len);
}

const size_t *tpu_model_buckets(const tpu_model_t *m, size_t *n) {
  if (n) *n = m ? m->cfg->nbuckets : 0;
  return m ? m->cfg->buckets : NULL;
}

size_t tpu_model_max_batch_size(const tpu_model_t *m) { return m ? m->cfg->max_batch_size : 0; }
uint32_t tpu_model_max_queue_delay_us(const tpu_model_t *m) {
  return m ? m->cfg->max_queue_delay_us : 0;
}
tpu_dtype_t tpu_model_precision(const tpu_model_t *m) {
  return m ? m->cfg->precision : TPU_DTYPE_FP32;
}
size_t tpu_model_layer_count(const tpu_model_t *m) {
  if (!m) return 0;
  if (m->cfg->format != TPU_MODEL_FORMAT_DENSE)
    return tpu_graph_program_step_count(m->progs[m->cfg->nbuckets - 1]);
  return m->nlayers;
}
const char *tpu_model_sha256(const tpu_model_t *m) { return m ? m->cfg->sha256 : NULL; }
const tpu_model_config_t *tpu_model_config(const tpu_model_t *m) { return m ? m->cfg : NULL; }
uint64_t tpu_model_load_us(const tpu_model_t *m) { return m ? m->load_us : 0; }
uint64_t tpu_model_memory_bytes(const tpu_model_t *m) { return m ? m->memory_bytes : 0; }

tpu_status_t tpu_model_bucket_cost(const tpu_model_t *m, size_t bucket_index, uint64_t *macs,
                                   uint64_t *cycles, uint64_t *slots) {
  if (!m || bucket_index >= m->cfg->nbuckets) return TPU_EINVAL;
  uint64_t a = 0, c = 0, s = 0;
  tpu_graph_program_cost(m->progs[bucket_index], &a, &c, &s);
  if (macs) *macs = a;
  if (cycles) *cycles = c;
  if (slots) *slots = s;
  return TPU_OK;
}
uint64_t tpu_model_warmup_us(const tpu_model_t *m) { return m ? m->warmup_us : 0; }
