/*
 * graph_internal.h - the structures graph.c (building, validation) and infer.c (shape
 * inference) share.
 *
 * DESIGN
 * Not public API (the `tpu__` prefix). A tensor keeps what was declared or given (dtype, dims,
 * initializer bytes) apart from what the last inference found (idtype, idims, val), so a new
 * inference for another batch size starts from the declarations again.
 */
#ifndef TPU_GRAPH_INTERNAL_H
#define TPU_GRAPH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tpu_graph.h"

/* Largest tensor, in bytes, a graph accepts: 2^62 keeps every byte count and index far from
 * overflow; real limits on memory are the compiler's business. */
#define TPU__GRAPH_MAX_BYTES ((uint64_t)1 << 62)
#define TPU__GRAPH_MAX_IO 65536 /* inputs or outputs of one node */

typedef struct {
  char *name;
  int declared;            /* tpu_graph_add_tensor gave dtype and dims */
  int is_init, is_input, is_output;
  int on_request;          /* a graph output computed only when the caller asks for it */
  tpu_graph_dtype_t dtype; /* declared or initializer */
  int rank;                /* -1 when neither */
  int64_t dims[TPU_GRAPH_MAX_RANK];
  void *data;              /* initializer bytes (owned; NULL once released) */
  size_t bytes;
  int8_t *qdata;           /* tpu_graph_set_quantized: the int8 values data is q·scale of */
  float *qscales;          /* one per index of dimension qaxis */
  int qaxis;
  long producer;           /* node index, -1 for none */
  /* Results of the last tpu_graph_infer. */
  int known;
  tpu_graph_dtype_t idtype;
  int irank;
  int64_t idims[TPU_GRAPH_MAX_RANK];
  void *val;               /* value known at inference: initializer data (not owned) or owned */
  size_t vbytes;
  int val_owned;
} tpu__gtensor_t;

typedef struct {
  char *name, *op, *domain;
  int opset;
  size_t nin, nout;
  long *in, *out; /* tensor indices, -1 for absent optional ones */
  tpu_graph_attr_t *attrs; /* owned copies */
  size_t nattrs;
} tpu__gnode_t;

struct tpu_graph {
  tpu__gtensor_t *tensors;
  size_t ntensors, tcap;
  tpu__gnode_t *nodes;
  size_t nnodes, ncap;
  long *htab; /* open addressing, power-of-two capacity, -1 = empty */
  size_t hcap;
  long *inputs, *outputs;
  size_t ninputs, noutputs;
  size_t *order; /* topological order of the nodes, after validation */
  int validated;
  int released;            /* tpu_graph_release_constants ran: no more compiles */
  char err[512];
};

/* Writes the message into g->err and returns st. */
tpu_status_t tpu__graph_fail(tpu_graph_t *g, tpu_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "node 'name' (Op, opset N)" or "node #i (Op, opset N)" into buf. */
const char *tpu__graph_node_label(const tpu_graph_t *g, size_t n, char *buf, size_t len);
/* "[2,3,4]" into buf. */
const char *tpu__graph_shape_str(int rank, const int64_t *dims, char *buf, size_t len);
/* Element count and byte size of a shape (all dims ≥ 0): TPU_EOVERFLOW past
 * TPU__GRAPH_MAX_BYTES, TPU_EINVAL for a negative dimension. Either out pointer may be NULL. */
tpu_status_t tpu__graph_count(int rank, const int64_t *dims, size_t esize, size_t *elems,
                              size_t *bytes);
/* Forgets the results of the last inference. */
void tpu__graph_clear_inferred(tpu_graph_t *g);

#endif /* TPU_GRAPH_INTERNAL_H */
