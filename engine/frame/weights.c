/*
 * weights.c - packing weights once into the layout of the engine's kernel set.
 *
 * DESIGN
 * The frame turns any accepted source (FP32 or BF16 in either layout, or INT8 with scales) into
 * the compute dtype: BF16 by round-to-nearest-even, INT8 by symmetric per-output-channel
 * quantization of [N][K] rows. The kernel set's pack() then lays the values out for its
 * micro-kernel; it reads the source through strides, so a source already in the compute dtype
 * is packed without an intermediate copy. Packed weights remember the kernel set: a plan on an
 * engine with another set would misread them. Nothing here runs on the hot path.
 */
#include <math.h>
#include <stdlib.h>

#include "tpu_internal.h"

static int valid_compute(tpu_dtype_t d) {
  return d == TPU_DTYPE_FP32 || d == TPU_DTYPE_BF16 || d == TPU_DTYPE_INT8;
}

static tpu_status_t check_desc(const tpu_weights_desc_t *d, int raw) {
  if (!valid_compute(d->compute)) return TPU_EDTYPE;
  switch (d->src_dtype) {
  case TPU_DTYPE_FP32:
  case TPU_DTYPE_BF16:
    if (d->src_scales) return TPU_EINVAL; /* scales describe INT8 sources only */
    break;
  case TPU_DTYPE_INT8:
    if (d->compute != TPU_DTYPE_INT8) return TPU_EDTYPE;
    if (!d->src_scales && !raw) return TPU_EINVAL;
    break;
  default:
    return TPU_EDTYPE;
  }
  if (d->layout != TPU_LAYOUT_NK && d->layout != TPU_LAYOUT_KN) return TPU_EINVAL;
  if (!d->src) return TPU_EINVAL;
  tpu_status_t st = tpu__check_dims(1, d->k, d->n);
  if (st != TPU_OK) return st;
  if (d->compute == TPU_DTYPE_INT8 && d->k > TPU__MAX_K_INT8) return TPU_EOVERFLOW;
  if (d->src_scales)
    for (size_t j = 0; j < d->n; j++)
      if (!tpu__positive_finite(d->src_scales[j])) return TPU_EINVAL;
  return TPU_OK;
}

/* Element (j, p) of the source is at src[j*sn + p*sk]. */
static void src_strides(const tpu_weights_desc_t *d, size_t *sn, size_t *sk) {
  if (d->layout == TPU_LAYOUT_NK) {
    *sn = d->k;
    *sk = 1;
  } else {
    *sn = 1;
    *sk = d->n;
  }
}

/* Float weights to per-channel INT8: gather [N][K] floats, quantize each row. */
static tpu_status_t quantize_src(const tpu_weights_desc_t *d, int8_t *q, float *scales) {
  size_t k = d->k, n = d->n, sn, sk;
  float *rows = malloc(k * n * sizeof *rows);
  if (!rows) return TPU_ENOMEM;
  src_strides(d, &sn, &sk);
  for (size_t j = 0; j < n; j++)
    for (size_t p = 0; p < k; p++) {
      size_t at = j * sn + p * sk;
      if (d->src_dtype == TPU_DTYPE_FP32)
        rows[j * k + p] = ((const float *)d->src)[at];
      else
        rows[j * k + p] = tpu__bf16_widen(((const uint16_t *)d->src)[at]);
    }
  tpu_status_t st = tpu_quantize_rows(rows, n, k, q, scales);
  free(rows);
  return st;
}

tpu_status_t tpu__weights_pack(tpu_engine_t *engine, const tpu_weights_desc_t *d, int raw,
                               tpu_weights_t **out) {
  tpu_weights_t *w = NULL;
  void *tmp = NULL;
  tpu_status_t st;
  if (!out) return TPU_EINVAL;
  *out = NULL;
  if (!engine || !d) return TPU_EINVAL;
  st = check_desc(d, raw);
  if (st != TPU_OK) return st;

  size_t k = d->k, n = d->n, kn = k * n, sn, sk;
  const tpu__dtype_kernels_t *kern = &engine->ks->dt[d->compute];
  size_t bytes = kern->packed_size(k, n);
  if (bytes == 0) return TPU_EOVERFLOW;
  w = calloc(1, sizeof *w);
  if (!w) return TPU_ENOMEM;
  w->ks = engine->ks;
  w->kern = kern;
  w->compute = d->compute;
  w->k = k;
  w->n = n;
  st = TPU_ENOMEM;
  w->packed = tpu__aligned_alloc(bytes);
  if (!w->packed) goto fail;
  if (d->compute == TPU_DTYPE_INT8 && (d->src_scales || d->src_dtype != TPU_DTYPE_INT8)) {
    w->scales = malloc(n * sizeof *w->scales);
    if (!w->scales) goto fail;
  }

  /* Bring the source to the compute dtype; `src` with strides (sn, sk) is what pack() reads. */
  const void *src = d->src;
  src_strides(d, &sn, &sk);
  if (d->compute == TPU_DTYPE_INT8 && d->src_dtype != TPU_DTYPE_INT8) {
    tmp = malloc(kn);
    if (!tmp) goto fail;
    st = quantize_src(d, tmp, w->scales);
    if (st != TPU_OK) goto fail;
    src = tmp;
    sn = k; /* quantize_src wrote [N][K] */
    sk = 1;
  } else if (d->compute == TPU_DTYPE_BF16 && d->src_dtype == TPU_DTYPE_FP32) {
    tmp = malloc(kn * sizeof(uint16_t));
    if (!tmp) goto fail;
    tpu_bf16_from_fp32_n(tmp, d->src, kn); /* same layout, so the strides stand */
    src = tmp;
  } else if (d->compute == TPU_DTYPE_FP32 && d->src_dtype == TPU_DTYPE_BF16) {
    tmp = malloc(kn * sizeof(float));
    if (!tmp) goto fail;
    tpu_bf16_to_fp32_n(tmp, d->src, kn);
    src = tmp;
  } else if (d->src_scales) { /* INT8 source with its scales */
    for (size_t j = 0; j < n; j++) w->scales[j] = d->src_scales[j];
  }
  kern->pack(k, n, src, sn, sk, w->packed);
  free(tmp);
  *out = w;
  return TPU_OK;

fail:
  free(tmp);
  tpu_weights_free(w);
  return st;
}

tpu_status_t tpu_weights_memory(const tpu_engine_t *engine, tpu_dtype_t compute,
                                tpu_dtype_t src_dtype, size_t k, size_t n, size_t *held,
                                size_t *transient) {
  if (!engine || !held || !transient || k == 0 || n == 0) return TPU_EINVAL;
  if (compute != TPU_DTYPE_FP32 && compute != TPU_DTYPE_BF16 && compute != TPU_DTYPE_INT8)
    return TPU_EDTYPE;
  size_t kn, packed = engine->ks->dt[compute].packed_size(k, n), h = sizeof(tpu_weights_t),
             t = 0;
  if (packed == 0 || __builtin_mul_overflow(k, n, &kn) || kn > SIZE_MAX / 8) return TPU_EOVERFLOW;
  h += packed;
  if (compute == TPU_DTYPE_INT8) h += n * sizeof(float); /* per-channel scales */
  /* The conversion buffers of tpu__weights_pack, freed before it returns. */
  if (compute == TPU_DTYPE_INT8 && src_dtype != TPU_DTYPE_INT8)
    t = kn + kn * sizeof(float); /* quantized copy, and the gathered float rows */
  else if (compute == TPU_DTYPE_BF16 && src_dtype == TPU_DTYPE_FP32)
    t = kn * sizeof(uint16_t);
  else if (compute == TPU_DTYPE_FP32 && src_dtype == TPU_DTYPE_BF16)
    t = kn * sizeof(float);
  *held = h;
  *transient = t;
  return TPU_OK;
}

tpu_status_t tpu_weights_pack(tpu_engine_t *engine, const tpu_weights_desc_t *desc,
                              tpu_weights_t **out) {
  return tpu__weights_pack(engine, desc, 0, out);
}

void tpu_weights_free(tpu_weights_t *w) {
  if (!w) return;
  free(w->packed);
  free(w->scales);
  free(w);
}

size_t tpu_weights_k(const tpu_weights_t *w) { return w ? w->k : 0; }
size_t tpu_weights_n(const tpu_weights_t *w) { return w ? w->n : 0; }
/* NULL has no compute dtype; INT32 is never one, so callers can tell. */
tpu_dtype_t tpu_weights_compute(const tpu_weights_t *w) {
  return w ? w->compute : TPU_DTYPE_INT32;
}
const float *tpu_weights_scales(const tpu_weights_t *w) { return w ? w->scales : NULL; }
