#!/usr/bin/python3
"""Train small XGBoost models on synthetic data and export them as tpud test fixtures.

For each model below writes tests/data/xgboost/<model>/1/ (xgboost.json, the library's own
Booster.save_model file; reference.safetensors; model.json with "format": "xgboost"; and
explain.safetensors: the library's pred_leaf and pred_contribs, with the other outputs, on the
reference rows without ±Inf, for the engine's on-request outputs leaf_index and
contributions, which the server does not serve yet):

  fraud_d6     binary:logistic, depth 6, 12 trees on 12 features, about 4% positives,
               10% of the values missing (NaN), base_score the positive rate (so the margin
               starts at logit(base_score), not 0): outputs "probabilities" [batch, 1] and
               "margin" [batch, 1]
  multi_d3     multi:softprob, 3 classes, depth 3, 6 rounds: "probabilities" [batch, 3],
               "margin" [batch, 3]
  forest_d3    multi:softmax, 3 classes, depth 3, 4 rounds of num_parallel_tree 2 (boosted
               forests: tree_info maps the trees to classes), subsampled: "probabilities",
               "margin" and "label" INT64 [batch] (what predict returns)
  reg_d6       reg:squarederror, depth 6, 10 trees, base_score 3.5: "prediction" [batch, 1],
               "margin" [batch, 1]

The reference rows are fresh draws of the training distribution (with NaN) plus rows holding
+Inf and -Inf, which XGBoost compares as ordinary numbers (inplace_predict takes them; a DMatrix
refuses them). Expected values are the library's: inplace_predict(predict_type="margin") and
inplace_predict() (probabilities or values; labels from predict). Before writing, a float32
traversal written here (x < split goes left, NaN follows default_left, leaves summed in tree
order from the base margin) must reproduce the library's margins bit for bit, so the fixtures
pin down the semantics tpud implements.

    /usr/bin/python3 models/export_xgboost_examples.py [--out tests/data/xgboost]

needs Debian's python3-xgboost (1.7) and python3-numpy. Fixed seeds, one thread: re-running
reproduces the files.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import xgboost as xgb

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from export_model import format_config, write_safetensors  # noqa: E402

ROWS = 1000     # reference rows per model
RTOL = 1e-6     # the reference check's tolerances: the 1e-6 on probabilities
ATOL = 1e-6


def margins_f32(model_json, x):
    """XGBoost's prediction re-done in float32 from the JSON (see the docstring)."""
    lrn = model_json["learner"]
    obj = lrn["objective"]["name"]
    bs = np.float32(float(lrn["learner_model_param"]["base_score"]))
    if obj in ("binary:logistic", "reg:logistic"):
        base = np.float32(-np.log(np.float32(1) / bs - np.float32(1)))
    else:
        base = bs
    m = lrn["gradient_booster"]["model"]
    groups = max(1, int(lrn["learner_model_param"]["num_class"]))
    out = np.full((x.shape[0], groups), base, dtype=np.float32)
    for t, g in zip(m["trees"], m["tree_info"]):
        lc, rc, si = t["left_children"], t["right_children"], t["split_indices"]
        sc = np.array(t["split_conditions"], dtype=np.float32)
        dl = t["default_left"]
        for r in range(x.shape[0]):
            n = 0
            while lc[n] != -1:
                v = x[r, si[n]]
                if np.isnan(v):
                    n = lc[n] if dl[n] else rc[n]
                else:
                    n = lc[n] if v < sc[n] else rc[n]
            out[r, g] = np.float32(out[r, g] + sc[n])
    return out


def data(rng, n, f, missing):
    x = rng.normal(size=(n, f)).astype(np.float32)
    x[:, 1] = np.exp(x[:, 1])  # a skewed column, as amounts are
    x[rng.random(x.shape) < missing] = np.nan
    return x


def with_infs(rng, x):
    """Puts +Inf and -Inf into a tenth of the rows (one or two columns each)."""
    x = x.copy()
    for r in range(0, x.shape[0], 10):
        x[r, rng.integers(x.shape[1])] = np.inf if r % 20 == 0 else -np.inf
        if r % 30 == 0:
            x[r, rng.integers(x.shape[1])] = -np.inf
    return x


def fraud(rng):
    x = data(rng, 4000, 12, 0.10)
    z = np.nan_to_num(x, nan=0.0)
    s = 1.5 * z[:, 0] - z[:, 2] * z[:, 3] + 0.8 * np.log(np.maximum(z[:, 1], 1e-3)) - 4.0
    y = (rng.random(len(s)) < 1 / (1 + np.exp(-s))).astype(np.float32)
    p = {"objective": "binary:logistic", "max_depth": 6, "eta": 0.3, "base_score": float(y.mean()),
         "nthread": 1, "seed": 1}
    return p, x, y, 12, 12


def multi(rng, softmax=False):
    x = data(rng, 3000, 6, 0.05)
    z = np.nan_to_num(x, nan=0.0)
    y = (z[:, 0] > 0).astype(int) + (z[:, 1] + z[:, 2] > 1.5).astype(int)
    p = {"objective": "multi:softmax" if softmax else "multi:softprob", "num_class": 3,
         "max_depth": 3, "eta": 0.4, "nthread": 1, "seed": 2}
    rounds = 6
    if softmax:
        p.update({"num_parallel_tree": 2, "subsample": 0.8, "colsample_bynode": 0.8})
        rounds = 4
    return p, x, y.astype(np.float32), rounds, 6


def reg(rng):
    x = data(rng, 3000, 8, 0.08)
    z = np.nan_to_num(x, nan=0.0)
    y = 2 * z[:, 0] + np.sin(3 * z[:, 2]) + 0.5 * z[:, 1] + 3.5 + 0.1 * rng.normal(size=len(z))
    p = {"objective": "reg:squarederror", "max_depth": 6, "eta": 0.3, "base_score": 3.5,
         "nthread": 1, "seed": 3}
    return p, x, y.astype(np.float32), 10, 8


def export(out_root, name, params, x, y, rounds, nfeat, rng):
    booster = xgb.train(params, xgb.DMatrix(x, label=y), rounds)
    vdir = os.path.join(out_root, name, "1")
    os.makedirs(vdir, exist_ok=True)
    mpath = os.path.join(vdir, "xgboost.json")
    booster.save_model(mpath)
    with open(mpath, "rb") as f:
        raw = f.read()
    mj = json.loads(raw)
    xr = with_infs(rng, data(rng, ROWS, nfeat, 0.10))
    margin = booster.inplace_predict(xr, predict_type="margin").astype(np.float32)
    margin = margin.reshape(ROWS, -1)
    mine = margins_f32(mj, xr)
    if not np.array_equal(margin, mine):
        raise SystemExit(f"{name}: the float32 traversal differs from XGBoost's margins by up to "
                         f"{np.abs(margin - mine).max()}")
    obj = params["objective"]
    outputs = {"margin": margin}
    if obj == "multi:softmax":
        label = booster.inplace_predict(xr).astype(np.int64).reshape(ROWS)
        b2 = xgb.Booster(model_file=mpath)
        b2.set_param({"objective": "multi:softprob"})
        outputs["probabilities"] = b2.inplace_predict(xr).astype(np.float32).reshape(ROWS, -1)
        outputs["label"] = label
        if not np.array_equal(label, np.argmax(margin, axis=1)):
            raise SystemExit(f"{name}: predict's labels are not the argmax of the margins")
    else:
        pred = booster.inplace_predict(xr).astype(np.float32).reshape(ROWS, -1)
        outputs["probabilities" if obj.startswith(("binary", "multi")) else "prediction"] = pred
    tensors = {"input.input": xr}
    tensors.update({"output." + k: v for k, v in outputs.items()})
    ref_sha = write_safetensors(os.path.join(vdir, "reference.safetensors"), tensors)
    # The on-request outputs, from the library: each tree's leaf (pred_leaf) and the per-feature
    # contributions with the bias last (pred_contribs), on the rows without ±Inf (a DMatrix
    # refuses them), beside the same rows' other outputs.
    keep = ~np.isinf(xr).any(axis=1)
    xe = xr[keep]
    dm = xgb.DMatrix(xe, missing=np.nan)
    explain = {"input.input": xe}
    explain.update({"output." + k: v[keep] for k, v in outputs.items()})
    explain["output.leaf_index"] = booster.predict(dm, pred_leaf=True).astype(
        np.float32).reshape(len(xe), -1)
    explain["output.contributions"] = booster.predict(dm, pred_contribs=True).astype(np.float32)
    write_safetensors(os.path.join(vdir, "explain.safetensors"), explain)
    config = {
        "format": "xgboost",
        "checkpoint": {"file": "xgboost.json", "sha256": hashlib.sha256(raw).hexdigest()},
        "batching": {"max_batch_size": 64, "buckets": [1, 8, 64], "max_queue_delay_us": 500},
        "reference": {"file": "reference.safetensors", "sha256": ref_sha, "rtol": RTOL,
                      "atol": ATOL},
    }
    with open(os.path.join(vdir, "model.json"), "w") as f:
        f.write(format_config(config))
    ntrees = len(mj["learner"]["gradient_booster"]["model"]["trees"])
    print(f"{name}: {obj}, {ntrees} trees, {len(raw)} bytes, outputs "
          f"{', '.join(sorted(outputs))}; float32 traversal equals XGBoost's margins")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "xgboost"))
    a = ap.parse_args(argv)
    print(f"xgboost {xgb.__version__}, numpy {np.__version__}")
    for name, make, seed in [("fraud_d6", fraud, 10), ("multi_d3", multi, 11),
                             ("forest_d3", lambda r: multi(r, True), 12), ("reg_d6", reg, 13)]:
        rng = np.random.default_rng(seed)
        p, x, y, rounds, nfeat = make(rng)
        export(a.out, name, p, x, y, rounds, nfeat, rng)


if __name__ == "__main__":
    main()
