/*
 * matmul.c - tpu_matmul, the one-shot product for model-free requests.
 *
 * DESIGN
 * A thin composition of the public pieces: pack B ([K][N]) in the requested dtype, compile a
 * plan for M rows, run it once, free both. It allocates per call by design (there is nothing to
 * reuse); callers with a fixed shape should keep weights and a plan instead. INT8 operands are
 * taken as raw integers (no scales), so the INT32 result is the exact integer product.
 */
#include "tpu_internal.h"

tpu_status_t tpu_matmul(tpu_engine_t *engine, tpu_dtype_t dtype, size_t m, size_t k, size_t n,
                        const void *a, const void *b, void *c) {
  tpu_weights_t *w = NULL;
  tpu_plan_t *plan = NULL;
  tpu_status_t st;
  if (!engine || !a || !b || !c) return TPU_EINVAL;
  if (dtype != TPU_DTYPE_FP32 && dtype != TPU_DTYPE_BF16 && dtype != TPU_DTYPE_INT8)
    return TPU_EDTYPE;
  st = tpu__check_dims(m, k, n);
  if (st != TPU_OK) return st;

  tpu_weights_desc_t desc = {.compute = dtype, .k = k, .n = n, .layout = TPU_LAYOUT_KN,
                             .src_dtype = dtype, .src = b, .src_scales = NULL};
  tpu_epilogue_t ep = {.bias = NULL, .act = TPU_ACT_NONE,
                       .out_dtype = dtype == TPU_DTYPE_INT8 ? TPU_DTYPE_INT32 : TPU_DTYPE_FP32,
                       .out_scale = 0.0f};
  st = tpu__weights_pack(engine, &desc, 1, &w);
  if (st != TPU_OK) goto out;
  st = tpu_plan_create(engine, w, m, dtype, &ep, &plan);
  if (st != TPU_OK) goto out;
  st = tpu_plan_run(plan, a, NULL, c);
out:
  tpu_plan_free(plan);
  tpu_weights_free(w);
  return st;
}
