/*
 * onnx_graph.h - turns a decoded ONNX model (onnx.h) into the engine's graph IR (tpu_graph.h).
 *
 * DESIGN
 * This module owns the mapping from the decoder's plain-C description to tpu_graph_t calls and
 * nothing else: it reads no file, checks no operator and infers no shape (the graph does, and
 * its messages are passed on unchanged). It follows the loader recipe of tpu_graph.h: graph
 * inputs declared with their dtypes and shapes (a symbolic dimension 0 becomes the batch, -1),
 * initializers copied (a graph input that an initializer also names, as IR < 4 files list them,
 * is dropped: the constant wins), graph outputs declared with their stated type so inference
 * checks it, nodes added with their domain's opset and every attribute (tensor attributes
 * included), inputs and outputs set, then tpu_graph_validate. Nothing the model says is dropped
 * silently: what the IR cannot hold (an element type with no counterpart, a list-of-strings or
 * list-of-tensors attribute) is refused naming the tensor, node or attribute. The decoder does
 * not expose value_info, so intermediate tensors are typed by inference alone.
 * No state; safe from any thread on distinct models.
 */
#ifndef TPU_ONNX_GRAPH_H
#define TPU_ONNX_GRAPH_H

#include <stddef.h>

#include "onnx.h"
#include "tpu_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds and validates a graph from a decoded model. On success *out is a new graph
 * (tpu_graph_free) that takes no more additions; tpu_graph_infer it per batch size. On failure
 * *out is NULL and err (errlen bytes) names the tensor, node or attribute and what was wrong:
 *   TPU_EINVAL     a structural fault (an undefined input, a cycle, a name produced twice) or
 *                  an argument was NULL
 *   TPU_ENOTSUP    something the graph IR cannot hold: an element type with no counterpart
 *                  (strings, 16/32/64-bit unsigned, complex, float8, 4-bit), a STRINGS or
 *                  TENSORS attribute, a rank above TPU_GRAPH_MAX_RANK, a string attribute
 *                  with an embedded NUL byte
 *   TPU_EOVERFLOW, TPU_ESHAPE, TPU_ENOMEM  as the graph's calls return them */
tpu_status_t tpu_onnx_to_graph(const tpu_onnx_model_t *m, tpu_graph_t **out, char *err,
                               size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TPU_ONNX_GRAPH_H */
