/*
 * tpu_graph.h - a static-shape operator graph: the IR every model format is turned into.
 *
 * DESIGN
 * A graph holds named tensors, constants (initializers, whose bytes it copies), nodes in ONNX
 * terms (op name, domain, opset, input and output tensor names, attributes) and the lists of
 * graph inputs and outputs. It does no I/O and knows no file format: a loader (ONNX, the dense
 * chain of model.json) builds it through the calls below, and a compiler reads it back through
 * the accessors. It never runs anything; it only checks structure and infers shapes.
 *
 * How a loader builds one:
 *   1. tpu_graph_new.
 *   2. tpu_graph_add_tensor for every graph input (dtype and shape; dimension 0 may be -1, the
 *      batch dimension) and, optionally, for other tensors whose type is known (ONNX
 *      value_info, graph outputs): -1 there means "not stated" on any dimension, and an
 *      inferred shape is checked against every stated dimension.
 *   3. tpu_graph_add_initializer for every constant (bytes in the element type's natural
 *      little-endian layout, row-major; BOOL is one byte per element).
 *   4. tpu_graph_add_node per node, in any order (the graph sorts them), then tpu_graph_add_attr
 *      for each of its attributes. An empty input name is an absent optional input (ONNX).
 *      `opset` is the version of the node's domain that the model imports.
 *   5. tpu_graph_set_inputs and tpu_graph_set_outputs.
 *   6. tpu_graph_validate (structure and topological order), then tpu_graph_infer once per
 *      batch size to serve (shapes and dtypes of every tensor for that batch).
 * Every call that fails returns a status and leaves a message in tpu_graph_error(g) that names
 * the node ("node 'fc1' (Gemm, opset 13)") or the tensor concerned; a failed add leaves the
 * graph as it was before the call. An initializer must not also be listed as a graph input
 * (IR < 4 files list them so: the loader drops such inputs).
 *
 * Names are copied; no pointer passed in is kept. The graph is not thread-safe while being
 * built or inferred; once inferred, readers may share it.
 */
#ifndef TPU_GRAPH_H
#define TPU_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of graph tensors (a superset of the engine's tpu_dtype_t, numbered apart). */
typedef enum {
  TPU_GRAPH_UNDEFINED = 0, /* not a type: a tensor declared without one */
  TPU_GRAPH_FP32,          /* IEEE binary32 */
  TPU_GRAPH_FP16,          /* IEEE binary16 */
  TPU_GRAPH_BF16,          /* bfloat16 */
  TPU_GRAPH_FP64,          /* IEEE binary64 */
  TPU_GRAPH_INT64,
  TPU_GRAPH_INT32,
  TPU_GRAPH_INT8,
  TPU_GRAPH_UINT8,
  TPU_GRAPH_BOOL,          /* one byte, 0 or 1 */
  TPU_GRAPH_DTYPE_COUNT    /* number of values, not a type */
} tpu_graph_dtype_t;

/* Bytes per element (0 for UNDEFINED or out of range). */
size_t tpu_graph_dtype_size(tpu_graph_dtype_t dtype);
/* "FP32", "FP16", "BF16", "FP64", "INT64", "INT32", "INT8", "UINT8", "BOOL"; NULL otherwise. */
const char *tpu_graph_dtype_name(tpu_graph_dtype_t dtype);
/* The type of an ONNX TensorProto.DataType number (FLOAT = 1 ... BFLOAT16 = 16); UNDEFINED for
 * a number with no counterpart here (strings, complex, 16-bit and unsigned wide integers). */
tpu_graph_dtype_t tpu_graph_dtype_from_onnx(int onnx_type);

#define TPU_GRAPH_MAX_RANK 8 /* dimensions of one tensor */
#define TPU_GRAPH_BATCH (-1) /* dimension 0 of a graph input: the batch, fixed per bucket */

typedef struct tpu_graph tpu_graph_t;

/* Creates an empty graph. TPU_ENOMEM or TPU_EINVAL (out NULL). */
tpu_status_t tpu_graph_new(tpu_graph_t **out);
/* Frees a graph and everything it copied; accepts NULL. */
void tpu_graph_free(tpu_graph_t *g);
/* The message of the last failed call on g ("" when none failed). Valid until the next call. */
const char *tpu_graph_error(const tpu_graph_t *g);

/* Says that FP32 initializer `name` (rank 2) holds exactly q[i]·scales[j] with j the index of
 * dimension `axis`, q in [-127, 127] (symmetric int8, zero point 0): a pre-quantized checkpoint.
 * A matmul compiled in INT8 whose weights are this initializer packs q and the scales as they
 * are instead of quantizing the floats again, when the scales run along its output channels.
 * Copies q and scales. TPU_EINVAL for an unknown or non-FP32 initializer, a bad axis, a second
 * call, or a q of -128. */
tpu_status_t tpu_graph_set_quantized(tpu_graph_t *g, const char *name, const int8_t *q,
                                     const float *scales, int axis);

/* Declares a tensor's dtype and shape (rank 0 is a scalar; dims may be NULL then). A name may be
 * declared once. Dimensions are ≥ 0 or -1 (see DESIGN). TPU_EINVAL for a bad name, dtype or
 * dimension or a second declaration, TPU_EOVERFLOW for a rank above TPU_GRAPH_MAX_RANK. */
tpu_status_t tpu_graph_add_tensor(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dtype,
                                  int rank, const int64_t *dims);

/* Adds a constant: `bytes` must equal the product of dims times the element size; the bytes are
 * copied. Dimensions are ≥ 0. TPU_EOVERFLOW when the product overflows (or passes 2^62 bytes),
 * TPU_ESHAPE when `bytes` disagrees, TPU_EINVAL for a name already declared, initialized or
 * produced. */
tpu_status_t tpu_graph_add_initializer(tpu_graph_t *g, const char *name, tpu_graph_dtype_t dtype,
                                       int rank, const int64_t *dims, const void *data,
                                       size_t bytes);

/* Adds a node. name may be NULL or "" (messages then say "#index"); domain NULL or "" is the
 * default ONNX domain (also accepted as "ai.onnx"); opset ≥ 1. Output names must be non-empty
 * (except an absent optional output, "") and not produced by another node or an initializer.
 * *index (may be NULL) receives the node's index for tpu_graph_add_attr. */
tpu_status_t tpu_graph_add_node(tpu_graph_t *g, const char *name, const char *op,
                                const char *domain, int opset, size_t nin,
                                const char *const *inputs, size_t nout,
                                const char *const *outputs, size_t *index);

/* Attribute types, as in ONNX AttributeProto. */
typedef enum {
  TPU_GRAPH_ATTR_INT = 0,
  TPU_GRAPH_ATTR_FLOAT,
  TPU_GRAPH_ATTR_STRING,
  TPU_GRAPH_ATTR_INTS,
  TPU_GRAPH_ATTR_FLOATS,
  TPU_GRAPH_ATTR_TENSOR,
  TPU_GRAPH_ATTR_STRINGS
} tpu_graph_attr_type_t;

/* One attribute. Only the fields of its type are read (and, when read back, filled). */
typedef struct {
  const char *name;
  tpu_graph_attr_type_t type;
  int64_t i;               /* INT */
  float f;                 /* FLOAT */
  const char *s;           /* STRING (NUL-terminated) */
  size_t n;                /* INTS, FLOATS, STRINGS: count */
  const int64_t *ints;     /* INTS */
  const float *floats;     /* FLOATS */
  const char *const *strings; /* STRINGS: n NUL-terminated strings */
  tpu_graph_dtype_t t_dtype; /* TENSOR: like an initializer */
  int t_rank;
  const int64_t *t_dims;
  const void *t_data;
  size_t t_bytes;
} tpu_graph_attr_t;

/* Copies an attribute onto node `node`. A name may appear once per node. Errors as for
 * initializers for a TENSOR; TPU_EINVAL for an unknown node, type or a repeated name. */
tpu_status_t tpu_graph_add_attr(tpu_graph_t *g, size_t node, const tpu_graph_attr_t *attr);
/* The attribute `name` of node `node`, or NULL. Valid until the graph is freed. */
const tpu_graph_attr_t *tpu_graph_attr(const tpu_graph_t *g, size_t node, const char *name);

/* Sets the graph's inputs (each declared with tpu_graph_add_tensor, -1 only on dimension 0, not
 * an initializer) and outputs (names of tensors the graph defines, checked by validate). Each
 * may be called once; a name may appear once in each list. */
tpu_status_t tpu_graph_set_inputs(tpu_graph_t *g, size_t n, const char *const *names);
tpu_status_t tpu_graph_set_outputs(tpu_graph_t *g, size_t n, const char *const *names);
/* Marks graph output `name` (already in the outputs) as computed only on request: a run may
 * pass NULL for it, and its producer then skips it. Only outputs a tree-ensemble node writes
 * and no node reads may be (compile refuses others): its leaf indices and contributions,
 * which cost more than the prediction. TPU_EINVAL when name is not a graph output. */
tpu_status_t tpu_graph_set_on_request(tpu_graph_t *g, const char *name);

/* Checks structure: every node input is a graph input, an initializer or some node's output;
 * no tensor is produced twice; the graph has outputs and each is defined; the nodes form no
 * cycle (the message names a node on one). Computes the topological order (tpu_graph_order).
 * TPU_EINVAL on any failure. After success, the graph takes no more additions. */
tpu_status_t tpu_graph_validate(tpu_graph_t *g);

/* Infers the dtype and shape of every tensor for one batch size (substituted for -1 in graph
 * inputs), validating first if needed. Values that are known at this point (initializers,
 * Constant outputs, Shape outputs) are kept for ops that read constant operands (Reshape's
 * shape, Squeeze/Unsqueeze/Reduce* axes). An op outside the supported set is TPU_ENOTSUP naming
 * op, node and opset; shapes that do not fit are TPU_ESHAPE naming the node and the shapes;
 * wrong dtypes TPU_EDTYPE; a shape whose element count overflows TPU_EOVERFLOW. A new call
 * replaces the previous inference; after a failed one no tensor is marked inferred. batch ≥ 1. */
tpu_status_t tpu_graph_infer(tpu_graph_t *g, int64_t batch);

/* ---- reading a graph back ---- */

typedef struct {
  const char *name;
  tpu_graph_dtype_t dtype;  /* inferred after tpu_graph_infer, declared before */
  int rank;                 /* idem; -1 when neither declared nor inferred */
  const int64_t *dims;      /* idem: rank values (the inferred ones contain no -1) */
  int inferred;             /* 1 when dtype/rank/dims come from the last tpu_graph_infer */
  int is_input, is_output, is_initializer;
  long producer;            /* index of the producing node, -1 for none */
  const void *data;         /* initializer bytes, or a value known at inference; else NULL */
  size_t bytes;             /* size of data */
} tpu_graph_tensor_info_t;

typedef struct {
  const char *name;   /* "" when unnamed */
  const char *op;
  const char *domain; /* "" for the default domain */
  int opset;
  size_t nin, nout;
  const long *inputs;  /* tensor indices; -1 for an absent optional input */
  const long *outputs; /* tensor indices; -1 for an absent optional output */
  size_t nattrs;
} tpu_graph_node_info_t;

size_t tpu_graph_tensor_count(const tpu_graph_t *g);
/* Index of the tensor called name, -1 when there is none. */
long tpu_graph_find(const tpu_graph_t *g, const char *name);
tpu_status_t tpu_graph_tensor(const tpu_graph_t *g, size_t index, tpu_graph_tensor_info_t *out);
size_t tpu_graph_node_count(const tpu_graph_t *g);
tpu_status_t tpu_graph_node(const tpu_graph_t *g, size_t index, tpu_graph_node_info_t *out);
/* Node indices in topological order (valid after tpu_graph_validate; NULL before). */
const size_t *tpu_graph_order(const tpu_graph_t *g);
size_t tpu_graph_input_count(const tpu_graph_t *g);
long tpu_graph_input(const tpu_graph_t *g, size_t i);  /* tensor index, -1 out of range */
size_t tpu_graph_output_count(const tpu_graph_t *g);
long tpu_graph_output(const tpu_graph_t *g, size_t i); /* tensor index, -1 out of range */


/* ---- programs: a graph compiled for one batch size ---- */

/* A program is a graph compiled for one batch size: constants folded, Gemm/MatMul nodes with
 * constant weights turned into engine plans (with the bias and a following activation fused
 * into the plan's epilogue where exact), every other node bound to its kernel, and every
 * intermediate tensor placed in one arena by liveness (tensors whose lifetimes do not overlap
 * share bytes). Running it allocates nothing. It keeps pointers into the graph (initializer
 * bytes, attributes): the graph must outlive it and take no new inference while it runs
 * (compiling another batch size is fine: the program copies what inference gave it). */
typedef struct tpu_graph_program tpu_graph_program_t;

/* Calibration of one matmul node (Gemm/MatMul with constant weights) compiled in INT8:
 * SmoothQuant-style per-input-channel smoothing (the activation's column k is divided by
 * smooth[k] and the weights' row k multiplied by it: the same product in exact arithmetic, with
 * the activation's channels balanced before it is quantized) and a static activation scale. */
typedef struct {
  const char *node;    /* the node's name */
  size_t k;            /* its inner dimension K (an entry for another K is refused) */
  const float *smooth; /* k factors, each finite and > 0, or NULL (no smoothing) */
  float act_scale;     /* > 0: static scale of the (smoothed) activation, one quantum, values
                        * beyond ±127 quanta saturate; 0: per-row dynamic scales */
} tpu_graph_calib_t;

typedef struct {
  tpu_dtype_t precision;          /* of the matmul nodes with constant weights: FP32 (also when
                                   * opts is NULL), BF16 or INT8 (per-row dynamic activation
                                   * scales, per-channel weight scales) */
  const char *const *fp32_nodes;  /* names of nodes kept in FP32 whatever `precision` says */
  size_t nfp32_nodes;
  uint64_t memory_limit;          /* bytes the program may hold (0: no limit): TPU_ERANGE */
  int observable;                 /* keep what tpu_graph_program_observe shows (a copy of each
                                   * engine matmul's FP32 weights): for calibration only */
  const tpu_graph_calib_t *calib; /* INT8 only: per-node calibration (others: per-row dynamic */
  size_t ncalib;                   /* scales, no smoothing); copied at compile */
  const tpu_graph_program_t *share; /* NULL, or a program compiled from the same graph (another
                                     * batch size, same precision, overrides and calibration):
                                     * its packed
                                     * weights are reused, not packed again, and its arena when
                                     * it is big enough, so the two must never run at the same
                                     * time (compile the largest batch first and share it). It
                                     * must outlive the new program (free sharers first). */
} tpu_graph_compile_opts_t;

/* Infers the graph for `batch` and compiles it. An op with no kernel, or a dtype its kernel does
 * not take, is TPU_ENOTSUP naming the op, node, opset and dtype; other errors as for
 * tpu_graph_infer. Messages in tpu_graph_error(g). */
tpu_status_t tpu_graph_compile(tpu_graph_t *g, tpu_engine_t *engine, int64_t batch,
                               const tpu_graph_compile_opts_t *opts, tpu_graph_program_t **out);
void tpu_graph_program_free(tpu_graph_program_t *p);

/* A graph input or output of a compiled program: its fixed dtype and shape. */
typedef struct {
  const char *name;
  tpu_graph_dtype_t dtype;
  int rank;
  const int64_t *dims;
  size_t elems, bytes;
} tpu_graph_io_t;

size_t tpu_graph_program_input_count(const tpu_graph_program_t *p);
size_t tpu_graph_program_output_count(const tpu_graph_program_t *p);
/* 1 when graph output i is computed only on request (tpu_graph_set_on_request). */
int tpu_graph_program_output_on_request(const tpu_graph_program_t *p, size_t i);
tpu_status_t tpu_graph_program_input(const tpu_graph_program_t *p, size_t i, tpu_graph_io_t *out);
tpu_status_t tpu_graph_program_output(const tpu_graph_program_t *p, size_t i,
                                      tpu_graph_io_t *out);

/* Whether graph input i's values are used as Gather indices (directly, or through Identity,
 * Cast, Reshape, Flatten, Squeeze or Unsqueeze), for integer inputs: returns 1 and the range
 * [*lo, *hi) every element must fall in (negative ids count from the end, as ONNX says), so a
 * server can refuse a bad id for the request that sent it before batching; 0 otherwise. */
int tpu_graph_program_input_range(const tpu_graph_program_t *p, size_t i, int64_t *lo,
                                  int64_t *hi);

/* Runs the program: inputs[i] holds graph input i (its bytes, as tpu_graph_program_input says),
 * outputs[i] receives graph output i (NULL for an on-request output that is not wanted). Buffers must not overlap the outputs. Allocates nothing;
 * one thread at a time per program. A value the model cannot take (a Gather index out of range)
 * is TPU_ERANGE with tpu_graph_program_error naming the node, the tensor and the value; outputs
 * are then unspecified. */
tpu_status_t tpu_graph_program_run(tpu_graph_program_t *p, const void *const *inputs,
                                   void *const *outputs);
/* Calibration statistics: runs the program (compiled with opts.observable) like
 * tpu_graph_program_run and, just before each matmul step that runs on an engine plan with FP32
 * weights, calls observe with the node's name,
 * its activation A (m rows of k floats, row-major, valid during the call only) and its weights
 * W as an FP32 matrix with the output channels along `layout` (NK: [n][k], KN: [k][n]; alpha
 * and folded BatchNormalization scales included). For SmoothQuant-style calibration of an FP32
 * program: per-channel maxima of |A| and |W|. */
typedef void (*tpu_graph_observe_fn)(void *user, const char *node, const float *a, size_t m,
                                     size_t k, const float *w, tpu_layout_t layout, size_t n);
tpu_status_t tpu_graph_program_observe(tpu_graph_program_t *p, const void *const *inputs,
                                       void *const *outputs, tpu_graph_observe_fn observe,
                                       void *user);

/* The message of the last failed run ("" when none). */
const char *tpu_graph_program_error(const tpu_graph_program_t *p);

/* Frees the bytes of every initializer that none of the n programs reads when it runs (weights
 * packed into engine plans, biases copied into epilogues), so a loaded model does not keep a
 * second copy of its weights. The graph takes no more tpu_graph_infer or tpu_graph_compile
 * afterwards (TPU_EINVAL); the programs keep running. Returns the bytes freed. */
uint64_t tpu_graph_release_constants(tpu_graph_t *g, const tpu_graph_program_t *const *progs,
                                     size_t n);

/* What one run costs the engine: useful MACs, simulated systolic cycles and MAC slots of every
 * matmul node. Any pointer may be NULL. */
void tpu_graph_program_cost(const tpu_graph_program_t *p, uint64_t *macs, uint64_t *cycles,
                            uint64_t *slots);
/* Bytes the program holds: arena, folded constants, packed weights, plans and kernel state. */
uint64_t tpu_graph_program_memory(const tpu_graph_program_t *p);
/* Steps the program runs (nodes folded away or fused into a plan are not steps). */
size_t tpu_graph_program_step_count(const tpu_graph_program_t *p);
/* One line per step ("Gemm 'fc1' -> engine plan int8 [64x128x256] +bias relu", ...) into buf;
 * returns the length it needed (snprintf-style). */
size_t tpu_graph_program_describe(const tpu_graph_program_t *p, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TPU_GRAPH_H */
