/*
 * model.h - one loaded model version: model.json and its verified checkpoint (a dense chain's
 * safetensors weights, or an ONNX file) turned into a graph compiled once per batch bucket.
 *
 * DESIGN
 * tpu_model_load does everything that can fail, once, off the hot path: it parses
 * <dir>/model.json, checks the checkpoint's SHA-256 against checkpoint.sha256 before parsing the
 * file, and builds the model's graph (engine/include/tpu_graph.h): for format "dense" from the
 * safetensors file, checking every weight and bias shape against the chain (layer i's
 * in_features == layer i-1's out_features, the first == the input width, the last out_features
 * == the output width, bias [out_features]) and adding a Gemm and an activation node per layer;
 * for format "onnx" by decoding the file (model_graph.c). It then compiles one program per
 * bucket (the compiler fuses each Gemm with its bias and activation into one engine plan, so a
 * dense layer is still one engine call), runs every bucket once (warm-up), runs the reference
 * check when model.json has one, and closes the checkpoint. A model that loaded can only fail to
 * run on a bad argument, or (graph models) a value it cannot take.
 *
 * Weights. Each layer's weight is a 2-D tensor [out_features, in_features] (PyTorch nn.Linear)
 * and its optional bias a 1-D tensor [out_features]. Accepted checkpoint dtypes:
 *   - F32, F16, BF16: converted to FP32 (exactly: both embed in binary32) and packed in the
 *     model's precision; for int8 the engine quantizes symmetrically per output channel at pack.
 *     Every element must be finite.
 *   - I8 (pre-quantized): the checkpoint must also hold the per-output-channel scales in a tensor
 *     named "<weight>_scale" (e.g. "fc1.weight_scale", the name compressed-tensors/vLLM
 *     checkpoints use), shape [out_features] or [out_features, 1], dtype F32, F16 or BF16, every
 *     scale finite and > 0. Real weight = q × scale[row]; q must be in [-127, 127] (symmetric
 *     quantization; -128 is refused). With precision int8 the quantized weights are packed as
 *     they are (no requantization); with fp32 or bf16 they are dequantized first.
 * Biases and scales: F32, F16 or BF16. Tensors the layers do not name are ignored.
 *
 * Running. Every engine call has a static shape: tpu_model_run takes a batch of exactly
 * buckets[i] rows, already padded by the caller (the batcher). tpu_model_infer is the convenience
 * form for any number of rows: it splits into chunks of at most max_batch_size, pads each to its
 * smallest bucket in model-owned staging buffers and copies the real rows out. Neither allocates:
 * intermediate activations live in one arena per model, planned by liveness at load (for a
 * chain of layers: two buffers of max_bucket × max_hidden_width floats), and the outputs are
 * written into the caller's buffer.
 *
 * Memory. Before packing anything or allocating scratch, the load works out what the model will
 * hold (packed weights and plans from the engine's own sizing, tpu_weights_memory and
 * tpu_plan_memory; activation and staging buffers from the widths and max_batch_size) and what
 * loading it needs at its peak (that, the checkpoint's bytes held while packing, the graph's FP32
 * copies of the weights until the programs are compiled, and the largest layer's conversion
 * buffers), and refuses the model with TPU_ERANGE, naming each part, when the
 * peak exceeds the caller's memory_limit. A checkpoint file larger than the limit is refused from
 * its size, before it is read. So a small file cannot make tpud allocate gigabytes.
 *
 * Files. model.json and the checkpoint are read whole with tpu_file_read (file.h): a FIFO or
 * device in their place is refused without blocking, and the checkpoint's SHA-256 is computed
 * over the private copy that is then parsed and packed, so the weights served are exactly the
 * bytes that were verified, whatever happens to the file during or after the load.
 *
 * Thread safety: a model's plans and scratch are shared state, so tpu_model_run and
 * tpu_model_infer may be called by one thread at a time per model (the batcher serializes each
 * model); the accessors may be called from any thread at any time, since they read only what
 * load wrote. Different models may run concurrently on one engine.
 */
#ifndef TPU_MODEL_H
#define TPU_MODEL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"
#include "tpu_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_model tpu_model_t;

/* How tpu_model_load runs, and what it tells the caller besides the model. */
typedef struct {
  /* In. */
  const atomic_int *cancel; /* NULL, or a flag: once set, the load stops at its next check
                             * (every 1 MiB read or hashed, every layer packed, every plan
                             * compiled, every warm-up run) with TPU_ECANCELED */
  uint64_t memory_limit;    /* bytes the model may need at load (0: no limit); see DESIGN */
  unsigned batch_copies;    /* the caller keeps this many more buffers of a full batch of
                             * input and of output rows (its batcher's): counted with the
                             * model's memory against memory_limit and in memory_bytes */
  /* Out. */
  int transient;            /* failure: descriptors or memory ran out (tpu_file_transient),
                             * not the files' fault: a retry may succeed with the same files */
  uint64_t memory_bytes;    /* what the model holds while serving, batch_copies included
                             * (success, or a refusal for the limit: what it would hold) */
  uint64_t peak_bytes;      /* what loading it needs at its peak: memory_bytes plus the
                             * checkpoint's bytes and the largest layer's conversion buffers */
} tpu_model_load_opts_t;

/* Loads the model version in directory `dir` (which holds model.json and the checkpoint it
 * names) on `engine`, as model `name` version `version` (names are the server's; they are
 * copied and only reported). opts may be NULL (no cancel, no limit). On success *out is a ready
 * model (warm-up done); on failure *out is NULL and err (errlen bytes; may be NULL) says what
 * was wrong, prefixed with the file it was found in. Status: TPU_EINVAL for a bad, unreadable
 * or mismatched model.json or checkpoint (including a SHA-256 mismatch), TPU_ERANGE when the
 * model needs more memory than opts->memory_limit (the message says how much and of what),
 * TPU_ECANCELED, TPU_ENOMEM, or an engine status from packing or planning. The engine must
 * outlive the model. */
tpu_status_t tpu_model_load(tpu_engine_t *engine, const char *dir, const char *name,
                            uint64_t version, tpu_model_load_opts_t *opts, tpu_model_t **out,
                            char *err, size_t errlen);

/* Frees the model's plans, weights and scratch; accepts NULL. No run may be in progress. */
void tpu_model_free(tpu_model_t *model);

/* Index of the smallest bucket that holds `rows` rows, or -1 when rows is 0 or exceeds
 * max_batch_size. */
int tpu_model_bucket_index(const tpu_model_t *model, size_t rows);

/* Runs the model on one padded batch: `in` holds buckets[bucket_index] packed input rows
 * (tpu_model_in_row_bytes each: every input's bytes for that row, in input order, at the
 * offsets tpu_model_input gives), `out` receives as many packed output rows. For a dense model a
 * row is input_width floats in and output_width floats out. in and out must not overlap.
 * Allocates nothing. One thread at a time per model. TPU_EINVAL on a bad argument; for a graph
 * model, TPU_ERANGE for a value the model cannot take (an embedding id out of range) with the
 * message in err (errlen bytes; err may be NULL). */
tpu_status_t tpu_model_run(tpu_model_t *model, size_t bucket_index, const void *in, void *out,
                           char *err, size_t errlen);
/* The same, also computing the on-request outputs (tpu_model_tensor_t.on_request) whose bit
 * (1 << output index) is set in `want`; tpu_model_run computes none of them. An on-request
 * output not computed is zeros in `out`. */
tpu_status_t tpu_model_run_want(tpu_model_t *model, size_t bucket_index, const void *in,
                                void *out, uint64_t want, char *err, size_t errlen);

/* Runs `rows` packed rows (any number ≥ 1) through the model, padding internally (see DESIGN).
 * Allocates nothing. One thread at a time per model. */
tpu_status_t tpu_model_infer(tpu_model_t *model, size_t rows, const void *in, void *out);
/* The same with on-request outputs as tpu_model_run_want. */
tpu_status_t tpu_model_infer_want(tpu_model_t *model, size_t rows, const void *in, void *out,
                                  uint64_t want);

/* One input or output of a model. */
typedef struct {
  const char *name;
  const char *datatype;  /* OIP: "FP32", "INT64", ... */
  size_t rank;
  const int64_t *shape;  /* shape[0] is -1 (the batch) when the model is batched */
  size_t row_elems;      /* elements per batch row (the whole tensor when not batched) */
  size_t row_bytes;
  size_t offset;         /* byte offset of this tensor within a packed row */
  int has_range;         /* inputs: the values are table indices (Gather ids) ... */
  int64_t range_lo, range_hi; /* ... each in [range_lo, range_hi) */
  int missing_ok;        /* inputs: NaN and ±Inf are values the model takes (tree ensembles:
                          * NaN is a missing feature, ±Inf compares), not refused */
  const char *const *labels; /* outputs: the class names model.json's "labels" gives, one per
                              * element of the last dimension (NULL: none) */
  size_t nlabels;
  size_t label_max;      /* bytes of the longest label */
  int on_request;        /* outputs: computed and returned only when a request names it (a
                          * tree model's leaf_index and contributions) */
} tpu_model_tensor_t;

size_t tpu_model_input_count(const tpu_model_t *model);
size_t tpu_model_output_count(const tpu_model_t *model);
/* Input / output i, or NULL out of range. Valid while the model lives. */
const tpu_model_tensor_t *tpu_model_input(const tpu_model_t *model, size_t i);
const tpu_model_tensor_t *tpu_model_output(const tpu_model_t *model, size_t i);
size_t tpu_model_in_row_bytes(const tpu_model_t *model);  /* sum of the inputs' row_bytes */
size_t tpu_model_out_row_bytes(const tpu_model_t *model);
/* 1 when requests are batched along dimension 0; 0 for a model served at its fixed shape (one
 * bucket of 1 row: the whole tensor). */
int tpu_model_batched(const tpu_model_t *model);
/* "dense", "onnx" or "xgboost" (model.json's format). */
const char *tpu_model_format_name(const tpu_model_t *model);
/* What int8 calibration did ("" without one), e.g. "calibrated on 1000 rows: 3 matmul nodes,
 * smoothing alpha 0.50, per-row activation scales; widest input channel range 5e+04:1". */
const char *tpu_model_calibration(const tpu_model_t *model);
/* The reference check's result ("" when the version has no reference), e.g. "passed: 1000 rows
 * in 4 buckets, worst error 2.1e-07 ...". */
const char *tpu_model_reference_result(const tpu_model_t *model);
/* What the compiled program of bucket b does, one line per step (graph models; "" for dense),
 * into buf; returns the length needed. */
size_t tpu_model_describe(const tpu_model_t *model, size_t bucket_index, char *buf, size_t len);

/* ---- metadata: fixed at load, readable from any thread ---- */

const char *tpu_model_name(const tpu_model_t *model);
uint64_t tpu_model_version(const tpu_model_t *model);
/* The directory the model was loaded from. */
const char *tpu_model_dir(const tpu_model_t *model);
/* Input 0's and output 0's names and elements per row (a dense model's only ones). */
const char *tpu_model_input_name(const tpu_model_t *model);
size_t tpu_model_input_width(const tpu_model_t *model);
const char *tpu_model_output_name(const tpu_model_t *model);
size_t tpu_model_output_width(const tpu_model_t *model);
/* The batch buckets, strictly increasing; *n receives their count. */
const size_t *tpu_model_buckets(const tpu_model_t *model, size_t *n);
size_t tpu_model_max_batch_size(const tpu_model_t *model); /* == the last bucket */
uint32_t tpu_model_max_queue_delay_us(const tpu_model_t *model); /* microseconds */
tpu_dtype_t tpu_model_precision(const tpu_model_t *model); /* FP32, BF16 or INT8 */
size_t tpu_model_layer_count(const tpu_model_t *model); /* dense layers; graph: steps of the
                                                         * largest bucket's program */
/* The checkpoint's verified SHA-256: 64 lower-case hex digits. */
const char *tpu_model_sha256(const tpu_model_t *model);
/* The parsed model.json. */
const tpu_model_config_t *tpu_model_config(const tpu_model_t *model);
/* What one call of bucket `bucket_index` costs the engine: useful MACs, simulated systolic
 * cycles and MAC slots, summed over the layers (tpu_plan_cost). TPU_EINVAL for a bad index. */
tpu_status_t tpu_model_bucket_cost(const tpu_model_t *model, size_t bucket_index, uint64_t *macs,
                                   uint64_t *cycles, uint64_t *slots);
/* Bytes the model holds while serving (packed weights, plans, scratch), batch_copies included
 * (as opts->memory_bytes). */
uint64_t tpu_model_memory_bytes(const tpu_model_t *model);
/* Microseconds tpu_model_load took in all, and of them the warm-up runs of every bucket. */
uint64_t tpu_model_load_us(const tpu_model_t *model);
uint64_t tpu_model_warmup_us(const tpu_model_t *model);

#ifdef __cplusplus
}
#endif

#endif /* TPU_MODEL_H */
