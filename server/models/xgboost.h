/*
 * xgboost.h - turns an XGBoost JSON model (Booster.save_model("m.json")) into the engine's
 * graph IR (tpu_graph.h): one ai.onnx.ml TreeEnsemble node that serves it exactly.
 *
 * DESIGN
 * Reads bytes, never a file: model_graph.c reads and verifies the file, this module parses it
 * (jansson), validates every tree and builds the graph. What it takes: booster "gbtree"
 * (num_parallel_tree forests included: every tree's group comes from tree_info), numerical
 * splits, one target, and the objectives
 *   binary:logistic, reg:logistic        margin + logit(base_score), then the logistic
 *   binary:logitraw                      margin + base_score (XGBoost 1.7 adds it as is)
 *   reg:squarederror, reg:linear, reg:squaredlogerror, reg:pseudohubererror,
 *   reg:absoluteerror                    margin + base_score
 *   multi:softprob, multi:softmax        num_class margins + base_score each, then softmax
 * and refuses the rest (dart, gblinear, categorical splits, vector leaves, other objectives)
 * saying what it takes. Trees are walked from node 0: a child id out of range, a node reached
 * twice (a cycle), a tree with no nodes, a split on a feature at or beyond num_feature, a
 * missing or mistyped array are refused naming the tree and node.
 *
 * The graph: one FP32 input [-1, num_feature] (named `input_name`), and outputs
 *   classifiers (binary:logistic, multi:*): "probabilities" FP32 [-1, G] (binary: G = 1, the
 *     positive class) and "margin" FP32 [-1, G]; multi:softmax adds "label" INT64 [-1]
 *     (the library's predict: the first class of largest margin)
 *   the others: "prediction" FP32 [-1, 1] (what Booster.predict returns) and "margin".
 * Leaves are summed in float32 in tree order from the base margin, as XGBoost's CPU predictor
 * does, so margins match its output bit for bit. No state; safe from any thread.
 */
#ifndef TPU_XGBOOST_H
#define TPU_XGBOOST_H

#include <stddef.h>

#include "tpu_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds and validates the graph of the XGBoost JSON model in json[0..len). input_name names
 * the graph input (NULL: "input"). On success *out is a new graph (tpu_graph_free); on failure
 * *out is NULL and err names the field, tree and node: TPU_EINVAL for broken JSON or a
 * malformed model, TPU_ENOTSUP for what tpud does not serve, TPU_ENOMEM. */
tpu_status_t tpu_xgboost_to_graph(const char *json, size_t len, const char *input_name,
                                  tpu_graph_t **out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* TPU_XGBOOST_H */
