#!/usr/bin/python3
"""Train scikit-learn tree ensembles on synthetic data and export them as ONNX tpud fixtures.

scikit-learn has no ONNX exporter of its own and skl2onnx is not packaged in Debian, so this
script writes the ONNX form itself, from the fitted estimators' tree arrays (tree_ for
DecisionTree-based ensembles, _predictors for HistGradientBoosting), with python3-onnx's helper:
one ai.onnx.ml TreeEnsembleClassifier or TreeEnsembleRegressor node (opset 3). For each model
below writes tests/data/sklearn/<model>/1/ (model.onnx, reference.safetensors, model.json with
"format": "onnx"):

  rf_multi    RandomForestClassifier, 3 classes, 30 trees, max_depth 6, 8 features: each leaf
              carries its class probabilities / 30 (SUM, NONE): "label" INT64 [batch] and
              "probabilities" FP32 [batch, 3]
  rf_reg      RandomForestRegressor, 20 trees, max_depth 6 (AVERAGE): "prediction" [batch, 1]
  gb_fraud    GradientBoostingClassifier, binary, about 5% positives, 60 trees of depth 3: every
              weight on class 0 with the prior's log-odds as the base value, LOGISTIC (the
              one-score binary form): "label", "probabilities" [batch, 2]
  hgb_fraud   HistGradientBoostingClassifier, binary, 40 iterations, max_depth 6, 10% of the
              values missing (NaN goes where the tree learnt it should) and rows with ±Inf
  hgb_multi   HistGradientBoostingClassifier, 3 classes, 20 iterations (60 trees), SOFTMAX
  hgb_reg     HistGradientBoostingRegressor, 40 iterations, max_depth 6, with NaN

and tests/data/sklearn/malformed/<variant>.onnx, broken copies of a 4-tree GradientBoosting
model (tests/integration/test_trees.sh expects each refused with its tree and node): bad_child
(a branch names a node its tree lacks), bad_cycle (a branch back to its root), bad_noleaf (a
tree whose nodes are all branches), bad_feature (feature 40 of 10), bad_weight (a weight on a
branch) and truncated (half the file).

Thresholds: scikit-learn compares a float32 feature (DecisionTree casts X to float32;
HistGradientBoosting's float64 X holds the float32 values tpud receives) with a float64
threshold, x <= t. The node's float32 value is the largest float32 not above t, so that
x <= value takes the same branch for every float32 x (rounding to nearest would not).
Weights are the float64 leaf values (times the learning rate, over the tree count for a forest)
rounded to float32; tpud sums them in float32, scikit-learn in float64: the reference check
allows for that (rtol 1e-5, atol 1e-6 on probabilities and predictions; labels must agree on
all but rows whose score is within rounding of the decision boundary — min_agreement 0.999).

The reference rows are fresh draws of the training distribution (for HistGradientBoosting with
NaN and ±Inf; DecisionTree ensembles refuse both) and the expected values scikit-learn's own
predict / predict_proba. Before writing, a float32 numpy interpreter of the ONNX node written
here (independent of the exporter's tree walk) must reproduce scikit-learn within those
tolerances, so a broken export cannot pass.

    /usr/bin/python3 models/export_sklearn_trees.py [--out tests/data/sklearn]

needs Debian's python3-sklearn (1.2), python3-onnx (1.12) and python3-numpy. Fixed seeds, one
thread: re-running reproduces the files. tests/integration/trees_serving.py imports train()
to rebuild the same estimators for its fresh-rows suite.
"""
import argparse
import hashlib
import os
import sys

import numpy as np
import onnx
from onnx import helper, TensorProto
from sklearn.ensemble import (GradientBoostingClassifier, HistGradientBoostingClassifier,
                              HistGradientBoostingRegressor, RandomForestClassifier,
                              RandomForestRegressor)

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from export_model import format_config, write_safetensors  # noqa: E402

ROWS = 1000
RTOL, ATOL = 1e-5, 1e-6
MIN_AGREEMENT = 0.999
F32 = np.float32


def data(rng, n, f, missing=0.0, infs=False):
    """Mixed-scale features; `missing` of them NaN; with infs, a few rows holding ±Inf."""
    x = rng.normal(size=(n, f)) * np.linspace(0.5, 3, f) + np.linspace(-1, 1, f)
    x = x.astype(F32)
    if missing:
        x[rng.random(size=x.shape) < missing] = np.nan
    if infs:
        for i in range(0, n, 50):
            x[i, i % f] = np.inf if (i // 50) % 2 else -np.inf
    return x


def labels_fraud(rng, x):
    z = np.nan_to_num(x, nan=0.0, posinf=4.0, neginf=-4.0)
    s = 1.4 * z[:, 0] - 0.9 * z[:, 1] + 0.6 * z[:, 2] * z[:, 3] + rng.normal(size=len(z)) * 0.5
    return (s > np.quantile(s, 0.95)).astype(int)


def labels_multi(rng, x):
    z = np.nan_to_num(x, nan=0.0, posinf=4.0, neginf=-4.0)
    return (z[:, 0] > 0).astype(int) + (z[:, 1] + 0.5 * z[:, 2] > 1.0).astype(int)


def target_reg(rng, x):
    z = np.nan_to_num(x, nan=0.0, posinf=4.0, neginf=-4.0)
    return 2 * z[:, 0] + np.sin(3 * z[:, 2]) + 0.5 * z[:, 1] * z[:, 3] + 3.5 + \
        0.1 * rng.normal(size=len(z))


# name: (estimator, features, missing, infs, labels)
MODELS = {
    "rf_multi": (lambda: RandomForestClassifier(n_estimators=30, max_depth=6, random_state=1,
                                                n_jobs=1), 8, 0.0, False, labels_multi),
    "rf_reg": (lambda: RandomForestRegressor(n_estimators=20, max_depth=6, random_state=2,
                                             n_jobs=1), 8, 0.0, False, target_reg),
    "gb_fraud": (lambda: GradientBoostingClassifier(n_estimators=60, max_depth=3,
                                                    learning_rate=0.2, random_state=3),
                 10, 0.0, False, labels_fraud),
    "hgb_fraud": (lambda: HistGradientBoostingClassifier(max_iter=40, max_depth=6,
                                                         early_stopping=False, random_state=4),
                  10, 0.10, True, labels_fraud),
    "hgb_multi": (lambda: HistGradientBoostingClassifier(max_iter=20, max_depth=4,
                                                         early_stopping=False, random_state=5),
                  6, 0.05, True, labels_multi),
    "hgb_reg": (lambda: HistGradientBoostingRegressor(max_iter=40, max_depth=6,
                                                      early_stopping=False, random_state=6),
                8, 0.08, True, target_reg),
}
SEEDS = {name: 20 + i for i, name in enumerate(MODELS)}


def train(name):
    """The fitted estimator of fixture `name` and the generator its reference rows come from
    (the same every call)."""
    make, nfeat, missing, infs, lab = MODELS[name]
    rng = np.random.default_rng(SEEDS[name])
    x = data(rng, 3000, nfeat, missing)  # ±Inf only in the reference rows (it breaks binning)
    est = make().fit(x, lab(rng, x))
    return est, rng


def fresh_rows(name, rng, n):
    _, nfeat, missing, infs, _ = MODELS[name]
    return data(rng, n, nfeat, missing, infs)


def f32_down(t):
    """The largest float32 not above float64 t: x <= t iff x <= f32_down(t) for float32 x."""
    f = F32(t)
    if float(f) > t:
        f = np.nextafter(f, F32(-np.inf))
    return f


class Node:
    """The ONNX attribute lists, appended tree by tree."""

    def __init__(self):
        self.a = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids",
                                  "nodes_modes", "nodes_values", "nodes_truenodeids",
                                  "nodes_falsenodeids", "nodes_missing_value_tracks_true",
                                  "w_tree", "w_node", "w_id", "w_weight")}

    def tree(self, tid, left, right, feature, threshold, missing_left, leaf_weights):
        """One tree in scikit-learn's arrays (left[i] == -1 marks a leaf; the left child is the
        x <= threshold branch); leaf_weights(i) gives node i's [(target, weight)]."""
        a = self.a
        for i in range(len(left)):
            a["nodes_treeids"].append(tid)
            a["nodes_nodeids"].append(i)
            if left[i] == -1:
                a["nodes_featureids"].append(0)
                a["nodes_modes"].append("LEAF")
                a["nodes_values"].append(0.0)
                a["nodes_truenodeids"].append(0)
                a["nodes_falsenodeids"].append(0)
                a["nodes_missing_value_tracks_true"].append(0)
                for target, w in leaf_weights(i):
                    a["w_tree"].append(tid)
                    a["w_node"].append(i)
                    a["w_id"].append(int(target))
                    a["w_weight"].append(float(F32(w)))
            else:
                a["nodes_featureids"].append(int(feature[i]))
                a["nodes_modes"].append("BRANCH_LEQ")
                a["nodes_values"].append(float(f32_down(float(threshold[i]))))
                a["nodes_truenodeids"].append(int(left[i]))
                a["nodes_falsenodeids"].append(int(right[i]))
                a["nodes_missing_value_tracks_true"].append(int(missing_left[i]))


def sk_tree(node, tid, tree, weights):
    t = tree.tree_
    node.tree(tid, t.children_left, t.children_right, t.feature, t.threshold,
              np.zeros(t.node_count, dtype=int), lambda i: weights(t.value[i]))


def hgb_tree(node, tid, pred, weights):
    nd = pred.nodes
    if np.any(nd["is_categorical"]):
        raise SystemExit("categorical splits: the exporter writes numerical splits only")
    left = np.where(nd["is_leaf"], -1, nd["left"]).astype(np.int64)
    node.tree(tid, left, nd["right"], nd["feature_idx"], nd["num_threshold"],
              nd["missing_go_to_left"], lambda i: weights(nd["value"][i]))


def to_onnx(est, nfeat):
    """The estimator as one TreeEnsembleClassifier / TreeEnsembleRegressor node."""
    node = Node()
    clf = hasattr(est, "classes_")
    attrs = {}
    if isinstance(est, RandomForestClassifier):
        n = len(est.estimators_)
        for k, tree in enumerate(est.estimators_):
            sk_tree(node, k, tree, lambda v: [(c, p / n) for c, p in
                                              enumerate(v[0] / v[0].sum())])
    elif isinstance(est, RandomForestRegressor):
        for k, tree in enumerate(est.estimators_):
            sk_tree(node, k, tree, lambda v: [(0, v[0][0])])
        attrs["aggregate_function"] = "AVERAGE"
    elif isinstance(est, GradientBoostingClassifier):
        lr = est.learning_rate
        init = est._raw_predict_init(np.zeros((1, nfeat), dtype=F32))[0]
        for k, stage in enumerate(est.estimators_):
            for c, tree in enumerate(stage):
                sk_tree(node, k * len(stage) + c, tree, lambda v, c=c: [(c, lr * v[0][0])])
        attrs["base_values"] = [float(F32(b)) for b in init]
        attrs["post_transform"] = "LOGISTIC" if len(init) == 1 else "SOFTMAX"
    else:  # HistGradientBoosting
        base = np.asarray(est._baseline_prediction).ravel()
        for k, it in enumerate(est._predictors):
            for c, pred in enumerate(it):
                hgb_tree(node, k * len(it) + c, pred, lambda v, c=c: [(c, v)])
        attrs["base_values"] = [float(F32(b)) for b in base]
        if clf:
            attrs["post_transform"] = "LOGISTIC" if len(base) == 1 else "SOFTMAX"
    a = node.a
    pre = "class" if clf else "target"
    fields = {k: v for k, v in a.items() if not k.startswith("w_")}
    fields.update({f"{pre}_treeids": a["w_tree"], f"{pre}_nodeids": a["w_node"],
                   f"{pre}_ids": a["w_id"], f"{pre}_weights": a["w_weight"]})
    fields.update(attrs)
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, nfeat])
    if clf:
        fields["classlabels_int64s"] = [int(c) for c in est.classes_]
        nd = helper.make_node("TreeEnsembleClassifier", ["input"], ["label", "probabilities"],
                              domain="ai.onnx.ml", name="trees", **fields)
        outs = [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                              [None, len(est.classes_)])]
    else:
        fields["n_targets"] = 1
        nd = helper.make_node("TreeEnsembleRegressor", ["input"], ["prediction"],
                              domain="ai.onnx.ml", name="trees", **fields)
        outs = [helper.make_tensor_value_info("prediction", TensorProto.FLOAT, [None, 1])]
    g = helper.make_graph([nd], "trees", [x], outs)
    m = helper.make_model(g, producer_name="tpud export_sklearn_trees.py",
                          opset_imports=[helper.make_opsetid("", 13),
                                         helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def interpret(model, x):
    """A float32 numpy run of the node written above (not of the estimator): per row, per tree
    from its first node, x <= value true (NaN: missing_value_tracks_true), weights summed in
    float32 in tree order, then the aggregate, base values and transform as ops_tree.c
    documents them."""
    nd = model.graph.node[0]
    at = {a.name: helper.get_attribute_value(a) for a in nd.attribute}
    clf = nd.op_type == "TreeEnsembleClassifier"
    pre = "class" if clf else "target"
    key = {(t, n): i for i, (t, n) in enumerate(zip(at["nodes_treeids"], at["nodes_nodeids"]))}
    roots = []
    for i, t in enumerate(at["nodes_treeids"]):
        if not roots or at["nodes_treeids"][roots[-1]] != t:
            roots.append(i)
    leafw = {}
    for t, n, c, w in zip(at[f"{pre}_treeids"], at[f"{pre}_nodeids"], at[f"{pre}_ids"],
                          at[f"{pre}_weights"]):
        leafw.setdefault(key[(t, n)], []).append((c, F32(w)))
    ncls = len(at["classlabels_int64s"]) if clf else 1
    modes = [m.decode() if isinstance(m, bytes) else m for m in at["nodes_modes"]]
    vals = np.array(at["nodes_values"], dtype=F32)
    acc = np.zeros((len(x), ncls), dtype=F32)
    for r in range(len(x)):
        for root in roots:
            i = root
            while modes[i] != "LEAF":
                v = x[r, at["nodes_featureids"][i]]
                go = at["nodes_missing_value_tracks_true"][i] if np.isnan(v) else v <= vals[i]
                t = at["nodes_treeids"][i]
                i = key[(t, at["nodes_truenodeids"][i] if go else at["nodes_falsenodeids"][i])]
            for c, w in leafw.get(i, []):
                acc[r, c] = F32(acc[r, c] + w)
    if at.get("aggregate_function", b"SUM") in (b"AVERAGE", "AVERAGE"):
        acc = (acc / F32(len(roots))).astype(F32)
    base = np.array(at.get("base_values", []), dtype=F32)
    post = at.get("post_transform", b"NONE")
    post = post.decode() if isinstance(post, bytes) else post
    if not clf:
        return {"prediction": (acc + (base if len(base) else F32(0))).astype(F32)}
    if len(set(at["class_ids"])) == 1 and ncls == 2:  # one score
        s = acc[:, at["class_ids"][0]] + (base[0] if len(base) else F32(0))
        p = (1 / (1 + np.exp(-s.astype(np.float64)))).astype(F32)
        return {"probabilities": np.stack([1 - p, p], axis=1).astype(F32),
                "label": np.array(at["classlabels_int64s"])[(s > 0).astype(int)]}
    if len(base):
        acc = (acc + base).astype(F32)
    lab = np.array(at["classlabels_int64s"])[np.argmax(acc, axis=1)]
    if post == "SOFTMAX":
        e = np.exp(acc.astype(np.float64) - acc.max(axis=1, keepdims=True))
        acc = (e / e.sum(axis=1, keepdims=True)).astype(F32)
    return {"probabilities": acc, "label": lab}


def expected(est, x):
    """scikit-learn's own outputs on x (float32 rows, as float64 where the estimator takes
    it: the values are the same)."""
    xd = x.astype(np.float64)
    if hasattr(est, "classes_"):
        return {"probabilities": est.predict_proba(xd).astype(F32),
                "label": est.predict(xd).astype(np.int64)}
    return {"prediction": est.predict(xd).astype(F32).reshape(-1, 1)}


def compare(name, got, want):
    """Worst differences of got against want; raises when outside the tolerances."""
    for k, w in want.items():
        g = got[k]
        if k == "label":
            agree = float(np.mean(g == w))
            if agree < MIN_AGREEMENT:
                raise SystemExit(f"{name}: labels agree on {agree:.4f} of rows")
            continue
        bad = np.abs(g - w) > ATOL + RTOL * np.abs(w)
        if bad.any():
            i = np.argwhere(bad)[0]
            raise SystemExit(f"{name}: {k}{list(i)} {g[tuple(i)]!r} vs scikit-learn's "
                             f"{w[tuple(i)]!r}")


def export(out_root, name):
    est, rng = train(name)
    nfeat = MODELS[name][1]
    model = to_onnx(est, nfeat)
    raw = model.SerializeToString()
    xr = fresh_rows(name, rng, ROWS)
    want = expected(est, xr)
    compare(name, interpret(model, xr), want)
    vdir = os.path.join(out_root, name, "1")
    os.makedirs(vdir, exist_ok=True)
    with open(os.path.join(vdir, "model.onnx"), "wb") as f:
        f.write(raw)
    tensors = {"input.input": xr}
    tensors.update({"output." + k: v for k, v in want.items()})
    ref_sha = write_safetensors(os.path.join(vdir, "reference.safetensors"), tensors)
    reference = {"file": "reference.safetensors", "sha256": ref_sha, "rtol": RTOL, "atol": ATOL}
    if "label" in want:
        reference["labels"] = {"output": "probabilities", "min_agreement": MIN_AGREEMENT}
    config = {
        "format": "onnx",
        "checkpoint": {"file": "model.onnx", "sha256": hashlib.sha256(raw).hexdigest()},
        "batching": {"max_batch_size": 64, "buckets": [1, 8, 64], "max_queue_delay_us": 500},
        "reference": reference,
    }
    with open(os.path.join(vdir, "model.json"), "w") as f:
        f.write(format_config(config))
    nd = model.graph.node[0]
    nnodes = len(next(a.ints for a in nd.attribute if a.name == "nodes_treeids"))
    print(f"{name}: {type(est).__name__}, {nd.op_type}, {nnodes} nodes, {len(raw)} bytes; "
          f"the float32 interpreter of the export matches scikit-learn")


def malformed(out_root):
    """The broken variants of a small model (see the docstring)."""
    make = lambda: GradientBoostingClassifier(n_estimators=4, max_depth=2, random_state=9)
    rng = np.random.default_rng(99)
    x = data(rng, 500, 10)
    good = to_onnx(make().fit(x, labels_fraud(rng, x)), 10)
    d = os.path.join(out_root, "malformed")
    os.makedirs(d, exist_ok=True)

    def variant(name, edit):
        m = onnx.ModelProto()
        m.CopyFrom(good)
        at = {a.name: a for a in m.graph.node[0].attribute}
        edit(at)
        with open(os.path.join(d, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())

    def nodes_of(at, tree):
        return [i for i, t in enumerate(at["nodes_treeids"].ints) if t == tree]

    def first_branch(at, tree, skip_root=False):
        for i in nodes_of(at, tree)[1 if skip_root else 0:]:
            if at["nodes_modes"].strings[i] != b"LEAF":
                return i
        raise SystemExit("malformed: no branch to break")

    variant("bad_child", lambda at: at["nodes_truenodeids"].ints.__setitem__(
        first_branch(at, 2), 99))
    variant("bad_cycle", lambda at: at["nodes_truenodeids"].ints.__setitem__(
        first_branch(at, 1, skip_root=True), 0))

    def no_leaf(at):
        for i in nodes_of(at, 3):
            at["nodes_modes"].strings[i] = b"BRANCH_LEQ"
    variant("bad_noleaf", no_leaf)
    variant("bad_feature", lambda at: at["nodes_featureids"].ints.__setitem__(
        nodes_of(at, 1)[0], 40))
    variant("bad_weight", lambda at: at["class_nodeids"].ints.__setitem__(0, 0))
    raw = good.SerializeToString()
    with open(os.path.join(d, "truncated.onnx"), "wb") as f:
        f.write(raw[:len(raw) // 2])
    print(f"malformed: 6 variants of a {len(raw)}-byte model")


def main(argv=None):
    import sklearn
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "sklearn"))
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args(argv)
    print(f"scikit-learn {sklearn.__version__}, onnx {onnx.__version__}, numpy {np.__version__}")
    for name in a.models.split(","):
        export(a.out, name)
    malformed(a.out)


if __name__ == "__main__":
    main()
