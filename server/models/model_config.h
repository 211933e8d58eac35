/*
 * model_config.h - model.json, the description of one model version (PRODUCT.md, "Model
 * repository").
 *
 * DESIGN
 * Parses and validates model.json into a plain, immutable struct; knows nothing about the
 * checkpoint (shapes are checked against the weights by model.c) and does no I/O beyond reading
 * the one file. Every error names the file, the field (as a JSON path: "batching.buckets[2]")
 * and what was expected, e.g.
 *   "model.json: batching.buckets[2]: expected a positive integer ≤ max_batch_size (64), got 0".
 *
 * Decisions (documented in PRODUCT.md's terms):
 *   - Unknown fields, at the top level and inside every object, are errors: a typo such as
 *     "precison" in a production config must not silently fall back to a default.
 *   - format "dense" (default): inputs and outputs hold exactly one tensor each, datatype
 *     "FP32", shape [-1, K] with -1 the batch dimension and 1 ≤ K ≤ TPU_MODEL_MAX_WIDTH, and
 *     layers is required. format "onnx": no layers (the graph replaces them); inputs and
 *     outputs may be omitted (taken from the graph) or list up to TPU_MODEL_MAX_IO tensors of
 *     any OIP datatype the graph IR holds, checked against the graph at load (model.c);
 *     precision_overrides names nodes kept in FP32; checkpoint.file defaults to "model.onnx".
 *     format "xgboost": as "onnx" for layers, inputs and outputs (the loader's are one FP32
 *     input [-1, num_feature] and the outputs xgboost.h lists); precision must be "fp32"
 *     (trees compare and sum exactly; nothing is quantized), no precision_overrides or
 *     calibration; checkpoint.file defaults to "xgboost.json".
 *   - calibration (optional, precision int8 only): {"file", "sha256", "smoothing" (SmoothQuant's
 *     alpha, default 0.5, 0 = off), "static" (default false: per-row dynamic activation
 *     scales)}; the file holds input.NAME tensors (rows along dimension 0), read at load.
 *   - reference (optional, any format): {"file", "sha256", "rtol" (default 1e-4), "atol"
 *     (default 1e-5), "labels": {"output", "min_agreement"}}; the file is checked at load
 *     (model.c).
 *   - labels (optional, any format): {"<output>": {"file", "sha256"}, ...}: the class names of
 *     an output for the classification extension, one a line (UTF-8; a final newline and CRs
 *     before newlines are dropped), read and checked at load (model.c): the digest, and one
 *     line for every class of the output's last dimension.
 *   - Defaults when a field is omitted:
 *       layers[i].op          "dense" (the only op)
 *       layers[i].bias        none (null also means none)
 *       layers[i].activation  "none"
 *       precision             "fp32"
 *       batching              the whole object may be omitted
 *       batching.max_batch_size  the last bucket when buckets are given, else 64
 *       batching.buckets      powers of two below max_batch_size, then max_batch_size
 *                             ([1, 2, 4, ..., 64] by default)
 *       batching.max_queue_delay_us  500
 *       checkpoint.file       "model.safetensors"
 *     checkpoint.sha256 is required: no version loads without a digest to check.
 *   - checkpoint.external (onnx only, optional): {"<location>": "<sha256>", ...}, at most
 *     TPU_MODEL_MAX_EXTERNAL files: every external data file the .onnx names must be listed
 *     with its digest (model_graph.c refuses one that is not, or whose bytes differ), so the
 *     weights are covered like the checkpoint itself. A location is a relative path (no
 *     leading '/', no '..' component, no '\', no control characters).
 *   - buckets are strictly increasing positive integers and the last one must equal
 *     max_batch_size (an error, not silently appended: a config whose largest bucket is not its
 *     largest batch is almost always a mistake, and the fix is one edit the message names).
 *   - checkpoint.file is a plain file name inside the version directory: no '/', no '\', no
 *     "..", no control characters.
 *   - Depth: the file is at most TPU_MODEL_CONFIG_MAX_BYTES and nests at most
 *     TPU_MODEL_CONFIG_MAX_DEPTH arrays/objects deep (checked before jansson sees it).
 */
#ifndef TPU_MODEL_CONFIG_H
#define TPU_MODEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MODEL_CONFIG_MAX_BYTES (1u << 20) /* bytes of model.json */
#define TPU_MODEL_CONFIG_MAX_DEPTH 8          /* nesting of arrays and objects */
#define TPU_MODEL_MAX_LAYERS 256              /* dense layers in one model */
#define TPU_MODEL_MAX_WIDTH (1u << 20)        /* K or N of any layer, in elements */
#define TPU_MODEL_MAX_BATCH 4096              /* max_batch_size */
#define TPU_MODEL_MAX_BUCKETS 32              /* entries of batching.buckets */
#define TPU_MODEL_MAX_QUEUE_DELAY_US 10000000u /* 10 s */
#define TPU_MODEL_MAX_NAME 128                /* bytes of a tensor or file name, NUL excluded */

#define TPU_MODEL_MAX_IO 64        /* inputs or outputs of one model */
#define TPU_MODEL_MAX_RANK 8       /* dimensions of a model input or output */
#define TPU_MODEL_MAX_OVERRIDES 256 /* entries of precision_overrides */

/* What the checkpoint is (model.json "format"). */
typedef enum {
  TPU_MODEL_FORMAT_DENSE = 0, /* safetensors weights and the layers chain */
  TPU_MODEL_FORMAT_ONNX,      /* an ONNX model file; the graph replaces layers */
  TPU_MODEL_FORMAT_XGBOOST    /* an XGBoost JSON model (Booster.save_model); trees, exactly */
} tpu_model_format_t;

/* One entry of inputs or outputs: an OIP datatype ("FP32", "FP16", "BF16", "FP64", "INT64",
 * "INT32", "INT8", "UINT8", "BOOL") and a shape whose dimension 0 may be -1 (the batch), every
 * other dimension ≥ 1. */
typedef struct {
  char *name;
  char datatype[8];
  size_t rank;
  int64_t shape[TPU_MODEL_MAX_RANK];
} tpu_model_io_config_t;

/* model.json "reference": inputs and the framework's outputs, checked at load. */
typedef struct {
  int present;
  char *file;          /* plain file name in the version directory */
  char sha256[65];     /* lower case */
  double rtol, atol;   /* |got - want| <= atol + rtol·|want| per element */
  char *label_output;  /* NULL, or the output whose per-row argmax must agree ... */
  double min_agreement; /* ... on at least this fraction of rows (0..1) */
} tpu_model_reference_config_t;

/* model.json "calibration" (precision int8 only): inputs representative of the traffic, from
 * which each matmul's activation statistics are taken at load. */
typedef struct {
  int present;
  char *file;        /* plain file name in the version directory (safetensors, input.NAME) */
  char sha256[65];
  double smoothing;  /* SmoothQuant's alpha in [0, 1]: 0 = no smoothing (default 0.5) */
  int static_scales; /* 1: one static activation scale per matmul instead of per-row dynamic */
} tpu_model_calibration_config_t;

/* model.json "checkpoint.external" (onnx): an external data file the graph may read, by its
 * path relative to the version directory (as the tensors' "location" gives it), and the
 * SHA-256 its bytes must have. */
typedef struct {
  char *path;
  char sha256[65];
} tpu_model_external_config_t;

#define TPU_MODEL_MAX_EXTERNAL 256

/* model.json "labels": a class-name file for an output (Triton's classification extension),
 * one label a line, line i naming class i of the output's last dimension. */
typedef struct {
  char *output;    /* the output's name (checked against the model at load, model.c) */
  char *file;      /* plain file name in the version directory */
  char sha256[65]; /* lower case */
} tpu_model_labels_config_t;

/* One dense layer: y = act(x·Wᵀ + b), W [out, in] as PyTorch's nn.Linear. */
typedef struct {
  char *weight; /* checkpoint tensor name of W */
  char *bias;   /* checkpoint tensor name of b, or NULL for no bias */
  tpu_act_t act;
} tpu_model_layer_config_t;

typedef struct {
  tpu_model_format_t format;
  /* inputs and outputs as given (dense: exactly one FP32 [-1, K] each; onnx: ninputs or
   * noutputs 0 when omitted, taken from the graph) */
  tpu_model_io_config_t *inputs, *outputs;
  size_t ninputs, noutputs;
  char *input_name;    /* inputs[0].name */
  size_t input_width;  /* K of inputs[0].shape [-1, K] */
  char *output_name;   /* outputs[0].name */
  size_t output_width; /* N of outputs[0].shape [-1, N] */
  tpu_model_layer_config_t *layers;
  size_t nlayers;      /* ≥ 1 for dense, 0 for onnx */
  char **precision_overrides; /* onnx: node names kept in FP32 whatever precision says */
  size_t noverrides;
  tpu_model_reference_config_t reference;
  tpu_model_calibration_config_t calibration;
  tpu_dtype_t precision; /* FP32, BF16 or INT8 */
  size_t max_batch_size;
  size_t buckets[TPU_MODEL_MAX_BUCKETS]; /* strictly increasing, last == max_batch_size */
  size_t nbuckets;
  uint32_t max_queue_delay_us; /* microseconds a partial batch may wait for more requests */
  char *checkpoint_file; /* plain file name inside the version directory */
  char sha256[65];       /* checkpoint.sha256, normalized to lower case */
  tpu_model_external_config_t *external; /* onnx: checkpoint.external, the external data files */
  size_t nexternal;
  tpu_model_labels_config_t *labels; /* "labels", at most one file per output */
  size_t nlabels;
  int payload_capture; /* "payload_capture": TPU_MODEL_CAPTURE_* (absent: the server's default) */
} tpu_model_config_t;

#define TPU_MODEL_CAPTURE_DEFAULT 0 /* as --payload-capture says */
#define TPU_MODEL_CAPTURE_ON 1      /* capture (the server must have a payload store) */
#define TPU_MODEL_CAPTURE_OFF 2     /* never capture this model's requests */

/* Reads (tpu_file_read: a regular file, at most TPU_MODEL_CONFIG_MAX_BYTES) and validates the
 * model.json at `path` (also the prefix of error messages). On success *out is a new config to
 * free with tpu_model_config_free; on failure *out is NULL, err (errlen bytes; may be NULL) says
 * what is wrong and the status is TPU_EINVAL (bad or unreadable file) or TPU_ENOMEM. sys_errno:
 * NULL, or receives the errno of a failed read (0 if the read succeeded), so that callers can
 * retry transient ones (tpu_file_transient). */
tpu_status_t tpu_model_config_load(const char *path, tpu_model_config_t **out, int *sys_errno,
                                   char *err, size_t errlen);

/* As tpu_model_config_load, from `len` bytes of JSON text; `name` prefixes messages (NULL:
 * "model.json"). */
tpu_status_t tpu_model_config_parse(const char *json, size_t len, const char *name,
                                    tpu_model_config_t **out, char *err, size_t errlen);

/* Frees a config; accepts NULL. */
void tpu_model_config_free(tpu_model_config_t *cfg);

/* "fp32", "bf16", "int8" for FP32, BF16 and INT8; NULL otherwise. */
const char *tpu_model_precision_name(tpu_dtype_t precision);

#ifdef __cplusplus
}
#endif

#endif /* TPU_MODEL_CONFIG_H */
