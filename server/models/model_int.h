/*
 * model_int.h - the loaded model's structure, shared by model.c (dense chains, the common load
 * steps, reference check, accessors) and model_graph.c (ONNX graph models).
 *
 * DESIGN
 * Not public API (the `tpu__` prefix). Every format ends up as the same thing: a graph (the
 * dense chain is built as one: Gemm and activation nodes, model.c's dense_graph; ONNX is
 * decoded into one, model_graph.c) compiled into one program per bucket, its inputs and outputs
 * (ins/outs, in packed-row order), its buckets (cfg's) and staging for tpu_model_infer. One
 * run path, tpu__model_run_graph.
 */
#ifndef TPU_MODEL_INT_H
#define TPU_MODEL_INT_H

#include "model.h"
#include "safetensors.h"
#include "tpu_graph.h"

typedef struct {
  size_t in, out;   /* K and N */
  const tpu_st_tensor_t *wt, *bt, *st; /* weight, bias, I8 scales in the checkpoint (load) */
} layer_t;

/* An input or output: the public view and what it points at. */
typedef struct {
  tpu_model_tensor_t t;
  char *name;
  char datatype[8];
  int64_t shape[TPU_MODEL_MAX_RANK];
  tpu_graph_dtype_t gdtype; /* graph models */
  char **labels;            /* outputs: t.labels, pointers into labels_text */
  char *labels_text;        /* the labels file's bytes, each line NUL-terminated in place */
} tpu__mtensor_t;

struct tpu_model {
  tpu_engine_t *engine;
  char *name, *dir;
  uint64_t version;
  tpu_model_config_t *cfg;
  tpu__mtensor_t ins[TPU_MODEL_MAX_IO], outs[TPU_MODEL_MAX_IO];
  size_t nin, nout;
  size_t in_row, out_row; /* bytes of a packed row */
  int batched;
  /* dense: the layers' shapes and checkpoint tensors (while loading) */
  layer_t *layers;
  size_t nlayers;
  /* the graph (every format: the dense chain is built as one) and its programs */
  tpu_graph_t *graph;
  tpu_graph_program_t *progs[TPU_MODEL_MAX_BUCKETS];
  void *gin[TPU_MODEL_MAX_IO], *gout[TPU_MODEL_MAX_IO]; /* per-tensor staging (several) */
  /* Output j is program output pout[j] (of nprog_out: the same list, in order). */
  size_t pout[TPU_MODEL_MAX_IO], nprog_out;
  /* both */
  unsigned char *pad_in;  /* staging for tpu_model_infer: max_bucket packed input rows */
  unsigned char *pad_out; /* max_bucket packed output rows */
  char reference[512];    /* the reference check's result */
  tpu_graph_calib_t *calib; /* int8 calibration per matmul node (names and factors owned) */
  size_t ncalib;
  char calibrated[256];   /* what calibration found, for the log */
  uint64_t load_us, warmup_us;
  uint64_t memory_bytes; /* held while serving (see tpu_model_load_opts_t) */
};

/* With precision int8 and model.json's calibration: compiles the graph in FP32 for the largest
 * bucket, runs the calibration file's rows through it observing every engine matmul's
 * activation, and fills m->calib (SmoothQuant factors s_k = max|X_k|^α / max|W_k|^(1-α), and
 * with "static" one activation scale per node) for co. Otherwise does nothing. */
tpu_status_t tpu__model_calibrate(tpu_model_t *m, const tpu_model_load_opts_t *o,
                                  tpu_graph_compile_opts_t *co, int *sys, char *err,
                                  size_t errlen);

/* Loads the ONNX model `ck` (format onnx): reads it (bounded by the memory limit), checks its
 * SHA-256, decodes, converts and compiles one program per bucket (a model with no batch
 * dimension gets one bucket of 1), fills ins/outs and the staging. *sys receives the errno of a
 * failed read. Errors name the file and the node or tensor. */
tpu_status_t tpu__model_load_graph(tpu_model_t *m, const char *ck, tpu_model_load_opts_t *o,
                                   int *sys, char *err, size_t errlen);
/* One padded batch of bucket b through the graph program, with the on-request outputs whose
 * bit is set in want (the others zeros). */
tpu_status_t tpu__model_run_graph(tpu_model_t *m, size_t b, const void *in, void *out,
                                  uint64_t want, char *err, size_t errlen);
/* Frees what the graph part holds. */
void tpu__model_free_graph(tpu_model_t *m);

#endif /* TPU_MODEL_INT_H */
