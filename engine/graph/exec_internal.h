/*
 * exec_internal.h - what the graph compiler (compile.c) and the op kernels (ops_*.c) share.
 *
 * DESIGN
 * The compiler turns each node of an inferred graph into a step: the node's input and output
 * tensors as views (dtype, static shape, where the bytes are), a run function and the
 * parameters its prepare function worked out once. A kernel is a pair:
 *
 *   prepare(pc, s)  at compile time, once per step: reads the node's attributes (through
 *                   tpu_graph_attr(pc->g, pc->node, name)) and the views' dtypes and shapes
 *                   (already inferred and checked by infer.c, so it need not re-check what
 *                   inference refuses), refuses what the kernel does not do with
 *                   tpu__prep_fail (TPU_ENOTSUP naming the dtype or attribute value), and
 *                   stores what run needs in s->params (one block from malloc, or NULL; freed
 *                   with free() by the program). It may not touch the views' data.
 *   run(rc, s)      on the hot path: reads s->in[i]->data, writes s->out[i]->data. It must
 *                   not allocate, block or read anything but its views and params. A value it
 *                   cannot take (an index out of range) is tpu__run_fail(rc, TPU_ERANGE, ...)
 *                   naming the tensor and the value.
 *
 * Views: in[i] is NULL for an absent optional input (likewise out[i]). Output bytes never
 * overlap input bytes (the compiler plans them apart), so a kernel may write its output while
 * still reading its inputs. Data is row-major, packed, with the graph's element layouts (BOOL
 * one byte). A kernel supports the dtypes it says in prepare and refuses the rest; FP32 is the
 * one every numeric kernel must take. The same kernels also fold constants at compile time (the
 * compiler runs a step whose inputs are all constant once and keeps its outputs).
 *
 * Op tables: each ops_*.c file exports a table of {op name, prepare, run}; compile.c looks an
 * op up in all of them (tpu__graph_kernel). An op with one name in two tables is a bug the
 * graph unit tests catch. Ops of the ai.onnx.ml domain have their own table and lookup
 * (tpu__graph_kernel_ml); every other domain has no kernels.
 */
#ifndef TPU_GRAPH_EXEC_INTERNAL_H
#define TPU_GRAPH_EXEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "graph_internal.h"
#include "tpu_graph.h"

/* A tensor as a step sees it. */
typedef struct {
  const char *name;
  tpu_graph_dtype_t dtype;
  int rank;
  int64_t dims[TPU_GRAPH_MAX_RANK];
  size_t elems, bytes;
  void *data;       /* where its bytes are during a run (graph inputs: set per run) */
  int is_const;     /* an initializer or a folded value: data is fixed and read-only */
  const int8_t *qdata;   /* initializers set with tpu_graph_set_quantized: q, scales, axis */
  const float *qscales;
  int qaxis;
  /* Compiler's bookkeeping. */
  int pinned;       /* a graph output: never fused away (compiler only) */
  long first, last; /* steps that produce and last read it (liveness) */
  size_t offset;    /* in the arena */
  int in_arena;
} tpu__xt_t;

typedef struct tpu__step tpu__step_t;
typedef struct tpu__run_ctx tpu__run_ctx_t;

/* What prepare sees. */
typedef struct {
  tpu_graph_t *g;
  size_t node;        /* node index in g */
  const char *label;  /* "node 'fc1' (Gemm, opset 13)" */
  int opset;
  tpu_engine_t *engine;
  tpu_dtype_t precision; /* for matmul nodes */
  /* Matmul kernels only (the compiler's fusion pass; NONE/NULL for every other op): the
   * activation, and a constant FP32 row vector of N elements to add before it, that the step
   * must apply in its epilogue, its output view being the fused chain's last tensor. */
  tpu_act_t fuse_act;
  const tpu__xt_t *fuse_bias;
  /* A BatchNormalization after the matmul, folded (N floats each, or NULL): output channel j
   * becomes y_j·fold_scale[j] + fold_shift[j], before fuse_act (the weights and the bias are
   * scaled at pack time). */
  const float *fold_scale, *fold_shift;
  /* LayerNormalization fused from its decomposed form (compile.c ln_pattern): the epsilon the
   * pattern's Add gave, instead of the node's attribute (the node is the first ReduceMean). */
  const double *fuse_epsilon;
  /* INT8 matmul calibration of this node (tpu_graph_compile_opts_t.calib), or NULL. */
  const tpu_graph_calib_t *calib;
  int observable; /* keep the FP32 weights for tpu_graph_program_observe */
  /* The params of the same node's step in the program being shared (opts->share), or NULL: a
   * kernel may reuse what does not depend on the batch size (packed weights), not owning it. */
  const void *shared;
} tpu__prep_t;

typedef tpu_status_t (*tpu__prepare_fn)(tpu__prep_t *pc, tpu__step_t *s);
typedef tpu_status_t (*tpu__run_fn)(tpu__run_ctx_t *rc, tpu__step_t *s);

struct tpu__step {
  size_t node;
  const char *op;
  char *label;          /* owned */
  size_t nin, nout;
  tpu__xt_t **in, **out; /* NULL entries for absent optional tensors */
  tpu__run_fn run;
  void *params;         /* freed with free() */
  void (*release)(void *params); /* optional: frees what params point to (before free) */
  uint64_t macs, cycles, slots;  /* engine cost of one run (matmul steps) */
  size_t param_bytes;   /* what params hold, for tpu_graph_program_memory */
  uint64_t packed_inputs; /* bit i: input i's constant bytes were copied at prepare (packed
                           * weights, a bias in the epilogue) and run never reads them */
  /* Matmul steps on an engine plan with FP32 weights (tpu_graph_program_observe): the weights
   * as packed from (kept by the kernel in params; NULL for other steps) and their shape. */
  const float *obs_w;
  tpu_layout_t obs_layout;
  size_t obs_m, obs_k, obs_n;
  char desc[384];       /* for tpu_graph_program_describe (optional; "" = op and name) */
};

struct tpu__run_ctx {
  char *err;
  size_t errlen;
  const tpu__step_t *step;
};

/* Fails a prepare: message "<label>: <fmt>" into the graph's error; returns st. */
tpu_status_t tpu__prep_fail(tpu__prep_t *pc, tpu_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fails a run: message "<label>: <fmt>" into the program's error; returns st. */
tpu_status_t tpu__run_fail(tpu__run_ctx_t *rc, tpu_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Refuses a dtype: TPU_ENOTSUP "input 'x' is FP16: this kernel takes FP32, ..." */
tpu_status_t tpu__prep_dtype(tpu__prep_t *pc, const tpu__xt_t *t, const char *takes);

/* The vector math of the kernel set the program is compiled for (tpu_kernels.h): element-wise
 * functions, softmax, LayerNorm rows and double accumulation, with fast paths per ISA. Kernels
 * look it up in prepare and keep the pointer in their params. */
struct tpu__vec_kernels;
const struct tpu__vec_kernels *tpu__prep_vec(const tpu__prep_t *pc);

/* Attribute helpers for prepare: the value, or def when absent. */
int64_t tpu__attr_i(const tpu__prep_t *pc, const char *name, int64_t def);
float tpu__attr_f(const tpu__prep_t *pc, const char *name, float def);
const char *tpu__attr_s(const tpu__prep_t *pc, const char *name, const char *def);

/* Element i of a tensor of any numeric dtype as double / int64 (BOOL: 0 or 1; FP16/BF16
 * converted). For prepare and for folding, not for hot loops. */
double tpu__xt_get_f64(const tpu__xt_t *t, size_t i);
int64_t tpu__xt_get_i64(const tpu__xt_t *t, size_t i);

typedef struct {
  const char *op;
  tpu__prepare_fn prepare;
  tpu__run_fn run;
} tpu__kernel_t;

/* Tables of the ops_*.c files, each ended by {NULL}. */
extern const tpu__kernel_t tpu__kernels_elementwise[]; /* ops_elementwise.c */
extern const tpu__kernel_t tpu__kernels_tensor[];      /* ops_tensor.c */
extern const tpu__kernel_t tpu__kernels_matmul[];      /* ops_matmul.c */
extern const tpu__kernel_t tpu__kernels_quant[];       /* ops_quant.c */
extern const tpu__kernel_t tpu__kernels_ml[];          /* ops_tree.c: domain ai.onnx.ml */

/* The kernel of an op in the default domain, or NULL. */
const tpu__kernel_t *tpu__graph_kernel(const char *op);
/* The kernel of an op in the ai.onnx.ml domain (TreeEnsemble), or NULL (ops_tree.c). */
const tpu__kernel_t *tpu__graph_kernel_ml(const char *op);

#endif /* TPU_GRAPH_EXEC_INTERNAL_H */
