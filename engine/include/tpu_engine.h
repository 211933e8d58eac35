/*
 * tpu_engine.h - public API of the tpud matrix engine.
 *
 * DESIGN
 * The engine is a library with no I/O: tensors in, tensors out. It computes dense layers
 * C = act(A·Wᵀ + bias) (or A·W) in FP32, BF16 or INT8 (INT32 accumulation) the way a
 * weight-stationary systolic array does: weights are packed once (tpu_weights_pack), a plan is
 * compiled once per static shape (tpu_plan_create), and the hot path (tpu_plan_run) allocates
 * nothing and re-decides nothing.
 *
 * Every call also feeds a model of an R×C weight-stationary systolic array: the engine counts the
 * cycles and utilization such an array would need for the same work (see tpu_systolic_cycles for
 * the formula), so operators can reason about accelerator cost from the statistics.
 *
 * Matrices are dense and row-major with no padding between rows: A is [M][K], C is [M][N].
 * Weights are [N][K] (TPU_LAYOUT_NK: PyTorch nn.Linear's [out_features, in_features], C = A·Wᵀ)
 * or [K][N] (TPU_LAYOUT_KN: C = A·W).
 *
 * Thread safety: an engine, packed weights and the statistics may be shared by any number of
 * threads. A plan owns scratch memory and may be run by one thread at a time.
 */
#ifndef TPU_ENGINE_H
#define TPU_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes, generated with their messages from one table. */
#define TPU_STATUS_MAP(X)                                                          \
  X(OK, "success")                                                                 \
  X(EINVAL, "invalid argument")                                                    \
  X(ENOMEM, "out of memory")                                                       \
  X(EOVERFLOW, "size overflows the address space or the engine's limits")          \
  X(EDTYPE, "unsupported or mismatched data type")                                 \
  X(ESHAPE, "shapes do not match")                                                 \
  X(ENOTSUP, "not supported by this engine or CPU")                                \
  X(ERANGE, "value out of range")                                                  \
  X(ECANCELED, "cancelled before it finished") /* a load abandoned at shutdown */

typedef enum {
#define TPU__STATUS_ENUM(name, msg) TPU_##name,
  TPU_STATUS_MAP(TPU__STATUS_ENUM)
#undef TPU__STATUS_ENUM
  TPU_STATUS_COUNT /* number of status codes, not a status */
} tpu_status_t;

/* Returns a static, human-readable message for a status ("unknown status" when out of range). */
const char *tpu_strerror(tpu_status_t status);

/* Element types. */
typedef enum {
  TPU_DTYPE_FP32 = 0, /* IEEE 754 binary32 */
  TPU_DTYPE_BF16 = 1, /* bfloat16: the upper 16 bits of a binary32, stored as uint16_t */
  TPU_DTYPE_INT8 = 2, /* signed 8-bit, symmetric quantization (zero point 0) */
  TPU_DTYPE_INT32 = 3 /* accumulator type of INT8 products */
} tpu_dtype_t;

/* Size in bytes of one element; 0 for an unknown dtype. */
size_t tpu_dtype_size(tpu_dtype_t dtype);
/* "FP32", "BF16", "INT8", "INT32"; NULL for an unknown dtype. */
const char *tpu_dtype_name(tpu_dtype_t dtype);

/* Activations applied in the epilogue, after the bias. softmax is taken over each row of C. */
typedef enum {
  TPU_ACT_NONE = 0,
  TPU_ACT_RELU,
  TPU_ACT_GELU,    /* exact form: x·Φ(x) = 0.5·x·(1 + erf(x/√2)), as PyTorch's default */
  TPU_ACT_TANH,
  TPU_ACT_SIGMOID,
  TPU_ACT_SOFTMAX, /* numerically stable: exp(x - max(row)) / sum */
  TPU_ACT_COUNT    /* number of activations, not an activation */
} tpu_act_t;

/* Activation names as in model.json: "none", "relu", "gelu", "tanh", "sigmoid", "softmax".
 * tpu_act_parse returns TPU_EINVAL for an unknown name. */
const char *tpu_act_name(tpu_act_t act);
tpu_status_t tpu_act_parse(const char *name, tpu_act_t *out);
/* Applies an activation in place to rows×cols floats (reference implementation). */
tpu_status_t tpu_act_apply(tpu_act_t act, float *x, size_t rows, size_t cols);

/* ---- BF16 and INT8 conversions (pure functions, exposed for the server and tests) ---- */

/* FP32 to BF16 with round-to-nearest-even; NaN stays NaN (quiet), ±Inf stays ±Inf. */
uint16_t tpu_bf16_from_fp32(float x);
float tpu_bf16_to_fp32(uint16_t x);
void tpu_bf16_from_fp32_n(uint16_t *dst, const float *src, size_t n);
void tpu_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n);

/* Symmetric quantization of each of `rows` rows of `cols` floats: scale[r] = max|x[r][:]| / 127
 * (1 when the row is all zeros), q = clamp(round_half_even(x / scale), -127, 127).
 * Used per output channel for weights ([N][K] rows) and per row for activations, so a row's
 * result never depends on which other rows it is batched with. Non-finite input: TPU_ERANGE. */
tpu_status_t tpu_quantize_rows(const float *x, size_t rows, size_t cols, int8_t *q, float *scale);
/* x = q * scale[r]. */
tpu_status_t tpu_dequantize_rows(const int8_t *q, size_t rows, size_t cols, const float *scale,
                                 float *x);

/* ---- engine ---- */

typedef struct tpu_engine tpu_engine_t;

typedef struct {
  unsigned threads;       /* compute threads for large plans; 0 = 1 */
  unsigned systolic_rows; /* R of the modelled array; 0 = 128 */
  unsigned systolic_cols; /* C of the modelled array; 0 = 128 */
  /* Microseconds a compute thread spins for the next job (and a caller for the other threads)
   * before it sleeps: spinning hands a job over in about a microsecond instead of a futex
   * wake-up's tens, but holds a core. 0 = TPU_ENGINE_SPIN_DEFAULT_US; TPU_ENGINE_SPIN_OFF =
   * sleep at once (the right choice when the threads outnumber the cores). */
  unsigned spin_us;
} tpu_engine_config_t;

#define TPU_ENGINE_SPIN_DEFAULT_US 50u
#define TPU_ENGINE_SPIN_OFF 0xFFFFFFFFu
#define TPU_ENGINE_SPIN_MAX_US 100000u

/* Creates an engine. cfg may be NULL for defaults. */
tpu_status_t tpu_engine_create(const tpu_engine_config_t *cfg, tpu_engine_t **out);
/* Frees an engine; accepts NULL. Weights and plans made from it must be freed first. */
void tpu_engine_free(tpu_engine_t *engine);
/* Says no plan run is expected soon (a model's last layer ran): compute threads spinning for
 * the next job sleep now instead of holding their cores; the next run wakes them. Graph
 * programs call it after their last step. Accepts NULL. */
void tpu_engine_rest(tpu_engine_t *engine);

/* Cumulative statistics since creation. Each counter is monotonic; every plan run adds to them
 * (without a lock: a snapshot may be one call behind on a plan running meanwhile). */
typedef struct {
  uint64_t calls;          /* plan runs */
  uint64_t macs;           /* multiply-accumulates of the useful (unpadded) work, M·K·N per call */
  uint64_t sim_cycles;     /* cycles the modelled systolic array needs for the same calls */
  uint64_t sim_macs_slots; /* sim_cycles × R × C: MAC slots the array offered */
  unsigned threads;        /* configured compute threads */
  unsigned spin_us;        /* their spin before sleeping (0: they never spin) */
  unsigned systolic_rows, systolic_cols;
  const char *isa;         /* kernel set in use ("ref", ...) */
} tpu_engine_stats_t;

tpu_status_t tpu_engine_stats(const tpu_engine_t *engine, tpu_engine_stats_t *out);
/* Writes one line for a log saying which kernel set the engine uses and why: forced by TPUD_ISA
 * or the best this CPU runs, and for each compiled set whether the CPU runs it or which features
 * it lacks. Returns the length written (0 for bad arguments). The engine itself never logs. */
size_t tpu_engine_describe(const tpu_engine_t *engine, char *buf, size_t len);

/* Utilization of the modelled array: macs / sim_macs_slots (0 when nothing ran). */
double tpu_engine_stats_utilization(const tpu_engine_stats_t *stats);

/* ---- weight-stationary packed weights ---- */

typedef enum {
  TPU_LAYOUT_NK = 0, /* weights stored [N][K]: C = A·Wᵀ (nn.Linear) */
  TPU_LAYOUT_KN = 1  /* weights stored [K][N]: C = A·W */
} tpu_layout_t;

typedef struct {
  tpu_dtype_t compute;  /* FP32, BF16 or INT8: the precision of the products */
  size_t k, n;          /* inner and output dimensions, each ≥ 1 */
  tpu_layout_t layout;  /* how `src` is laid out */
  tpu_dtype_t src_dtype;/* FP32 or BF16 (quantized at pack time for INT8), or INT8 with scales */
  const void *src;      /* k·n elements of src_dtype */
  const float *src_scales; /* INT8 src only: n per-output-channel scales, each finite and > 0 */
} tpu_weights_desc_t;

typedef struct tpu_weights tpu_weights_t;

/* Packs weights once into the engine's internal layout. The source may be freed afterwards.
 * INT8 compute from a float source quantizes symmetrically per output channel. */
tpu_status_t tpu_weights_pack(tpu_engine_t *engine, const tpu_weights_desc_t *desc,
                              tpu_weights_t **out);
/* Memory tpu_weights_pack would take for k×n weights computed in `compute` from `src_dtype`,
 * before packing anything: *held receives the bytes the packed weights keep (layout padding,
 * scales), *transient the conversion buffers it needs while packing. For sizing a model before
 * loading it. TPU_EINVAL, TPU_EDTYPE or TPU_EOVERFLOW as tpu_weights_pack would return. */
tpu_status_t tpu_weights_memory(const tpu_engine_t *engine, tpu_dtype_t compute,
                                tpu_dtype_t src_dtype, size_t k, size_t n, size_t *held,
                                size_t *transient);
/* Frees packed weights; accepts NULL. Plans using them must be freed first. */
void tpu_weights_free(tpu_weights_t *w);
size_t tpu_weights_k(const tpu_weights_t *w);
size_t tpu_weights_n(const tpu_weights_t *w);
tpu_dtype_t tpu_weights_compute(const tpu_weights_t *w);
/* Per-output-channel scales of INT8 weights (n floats), NULL otherwise. */
const float *tpu_weights_scales(const tpu_weights_t *w);

/* ---- plans: one static shape, compiled once ---- */

/* What happens between the accumulators and C. For FP32 and BF16 compute and for INT8 with
 * FP32 output: y = act(acc·scales + bias). INT8 output requantizes: q = clamp(rne(y/out_scale),
 * -127, 127). INT32 output (INT8 compute only) writes the raw accumulators and takes no bias,
 * activation or scaling. */
typedef struct {
  const float *bias;     /* n floats or NULL; copied at plan creation */
  tpu_act_t act;
  tpu_dtype_t out_dtype; /* FP32 (any compute), BF16 (BF16 compute), INT8 or INT32 (INT8 compute) */
  float out_scale;       /* INT8 output only: real value of one quantum, finite and > 0 */
} tpu_epilogue_t;

typedef struct tpu_plan tpu_plan_t;

/* Compiles a plan for M rows of A against packed weights. a_dtype is the type the caller will
 * pass to tpu_plan_run: FP32 always (converted to BF16 or quantized per row inside the plan), or
 * the compute dtype itself (BF16 data; or INT8 data with per-row scales). ep NULL means FP32 out,
 * no bias, no activation. */
tpu_status_t tpu_plan_create(tpu_engine_t *engine, const tpu_weights_t *w, size_t m,
                             tpu_dtype_t a_dtype, const tpu_epilogue_t *ep, tpu_plan_t **out);
void tpu_plan_free(tpu_plan_t *plan);
size_t tpu_plan_m(const tpu_plan_t *plan);

/* Bytes tpu_plan_create would allocate for an M-row plan against k×n weights computed in
 * `compute` (bias copy, input conversion, softmax rows, per-thread workspaces), into *bytes;
 * the same sizes the plan is then made with. For sizing a model before loading it: of ep, only
 * whether it has a bias, its activation and its output dtype matter (ep->bias is not read). */
tpu_status_t tpu_plan_memory(const tpu_engine_t *engine, tpu_dtype_t compute, size_t k,
                             size_t n, size_t m, tpu_dtype_t a_dtype, const tpu_epilogue_t *ep,
                             size_t *bytes);

/* What one run of the plan adds to the engine's statistics (tpu_engine_stats): useful MACs,
 * simulated systolic cycles and MAC slots. Any pointer may be NULL. */
tpu_status_t tpu_plan_cost(const tpu_plan_t *plan, uint64_t *macs, uint64_t *cycles,
                           uint64_t *slots);

/* Runs the plan: a is [M][K] of the plan's a_dtype; a_scales holds M per-row scales when a is
 * INT8 (ignored otherwise); c is [M][N] of the epilogue's out_dtype. Allocates nothing. */
tpu_status_t tpu_plan_run(tpu_plan_t *plan, const void *a, const float *a_scales, void *c);

/* One-shot convenience for model-free products (tpud's MatMul): C[M][N] = A[M][K] × B[K][N].
 * FP32 and BF16 give FP32 C; INT8 gives INT32 C (raw accumulators). a and b share one dtype. */
tpu_status_t tpu_matmul(tpu_engine_t *engine, tpu_dtype_t dtype, size_t m, size_t k, size_t n,
                        const void *a, const void *b, void *c);

/* ---- the systolic array model ---- */

/* Cycles a weight-stationary R×C array needs for an M×K×N product, computed tile by tile with
 * no overlap between tiles. K is split into ceil(K/R) row tiles and N into ceil(N/C) column
 * tiles; each (k-tile, n-tile) pair costs
 *
 *     load  = R            weights shifted in from the top, one array row per cycle
 *   + fill  = R - 1        skew: row r of the array sees the first input r cycles late, so the
 *                          first partial sum reaches the bottom row R - 1 cycles in
 *   + stream= M            one input vector enters per cycle
 *   + drain = C - 1        inputs move one column per cycle, so column c finishes c cycles after
 *                          column 0 and the last column C - 1 cycles after it
 *
 * Counting from the first streaming cycle (0), output (m, c) of a tile is completed by PE(R-1, c)
 * in cycle m + (R-1) + c and leaves the array at the end of it; the last one, (M-1, C-1), ends
 * cycle M + R + C - 3. So cycles = ceil(K/R) · ceil(N/C) · (2R + M + C - 2). Partial tiles cost
 * as much as full ones (unused PEs hold zero weights and idle), which is what utilization
 * measures. Partial sums of successive k-tiles are added in an accumulator memory outside the
 * array as they leave it, at no extra cycles. Returns 0 if any argument is 0 or the count
 * overflows uint64. */
uint64_t tpu_systolic_cycles(unsigned rows, unsigned cols, uint64_t m, uint64_t k, uint64_t n);

/* Cycle-stepped simulation of the same array computing C[M][N] = A[M][K]·Bᵀ with B [N][K], in
 * INT8 with INT32 accumulation, PE by PE. Slow: an oracle for small shapes. C is overwritten, not
 * accumulated into. *cycles receives the simulated count, which must equal tpu_systolic_cycles.
 * Errors: TPU_EINVAL for a NULL pointer or a zero dimension; TPU_EOVERFLOW for K > 131071 (a
 * dot product of K int8 pairs could leave int32) or sizes whose buffers or simulation state
 * cannot be addressed; TPU_ENOMEM when the R×C register file cannot be allocated. All of these
 * are reported before C or *cycles is written. */
tpu_status_t tpu_systolic_simulate(unsigned rows, unsigned cols, size_t m, size_t k, size_t n,
                                   const int8_t *a, const int8_t *b_nk, int32_t *c,
                                   uint64_t *cycles);

#ifdef __cplusplus
}
#endif

#endif /* TPU_ENGINE_H */
