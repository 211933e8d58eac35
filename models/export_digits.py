#!/usr/bin/python3
"""Train the bundled digits classifier and export it as a tpud model, with test fixtures.

Trains scikit-learn's MLPClassifier (64 raw pixel inputs 0..16 -> 64 ReLU -> 10 softmax, fixed
random_state) on the digits data that ships with scikit-learn (load_digits: 1797 8x8 images), and
writes, with numpy only:

  models/digits/1/model.safetensors   fc1.weight [64, 64], fc1.bias, fc2.weight [10, 64], fc2.bias
  models/digits/1/model.json          input "x" [-1, 64] FP32, output "probs" [-1, 10], fp32
  tests/data/digits_x.u8              1797 x 64 uint8 pixel values (the whole data set)
  tests/data/digits_pred.u8           1797 uint8: scikit-learn's predict()
  tests/data/digits_proba.f32         1797 x 10 little-endian float32: predict_proba()

Run from anywhere with Debian's python3 (python3-sklearn, python3-numpy):
    /usr/bin/python3 models/export_digits.py
Re-running reproduces the files byte for byte (fixed seed, sorted keys, no timestamps).
"""

import os
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.neural_network import MLPClassifier

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no tools/__pycache__ in the work tree
sys.path.insert(0, os.path.join(ROOT, "tools"))
from export_model import write_model_dir  # noqa: E402


def main():
    X, y = load_digits(return_X_y=True)  # X: float64 pixel values 0..16
    clf = MLPClassifier(hidden_layer_sizes=(64,), activation="relu", random_state=0,
                        max_iter=500)
    clf.fit(X, y)
    assert clf.n_iter_ < clf.max_iter, "training did not converge"
    assert list(clf.classes_) == list(range(10))

    # The exported layer chain must be what scikit-learn computes: relu hidden layer, softmax
    # output (MLPClassifier's out_activation_ for more than two classes).
    assert clf.out_activation_ == "softmax"
    W1, W2 = clf.coefs_  # [in, out] each: nn.Linear's weight is the transpose
    b1, b2 = clf.intercepts_
    z = np.maximum(X @ W1 + b1, 0) @ W2 + b2
    e = np.exp(z - z.max(axis=1, keepdims=True))
    proba = clf.predict_proba(X)
    assert np.allclose(proba, e / e.sum(axis=1, keepdims=True), rtol=0, atol=1e-12)
    pred = clf.predict(X)
    assert (pred == proba.argmax(axis=1)).all()

    tensors = {
        "fc1.weight": np.ascontiguousarray(W1.T, dtype=np.float32),
        "fc1.bias": b1.astype(np.float32),
        "fc2.weight": np.ascontiguousarray(W2.T, dtype=np.float32),
        "fc2.bias": b2.astype(np.float32),
    }
    layers = [
        {"weight": "fc1.weight", "bias": "fc1.bias", "activation": "relu"},
        {"weight": "fc2.weight", "bias": "fc2.bias", "activation": "softmax"},
    ]
    out = os.path.join(ROOT, "models", "digits", "1")
    digest = write_model_dir(out, tensors, layers, 64, 10, precision="fp32",
                             buckets=(1, 8, 32, 64), max_queue_delay_us=500, input_name="x",
                             output_name="probs",
                             metadata={"producer": "models/export_digits.py",
                                       "classes": "0,1,2,3,4,5,6,7,8,9"})

    data = os.path.join(ROOT, "tests", "data")
    os.makedirs(data, exist_ok=True)
    assert X.min() >= 0 and X.max() <= 16 and (X == np.round(X)).all()
    X.astype(np.uint8).tofile(os.path.join(data, "digits_x.u8"))
    pred.astype(np.uint8).tofile(os.path.join(data, "digits_pred.u8"))
    proba.astype("<f4").tofile(os.path.join(data, "digits_proba.f32"))

    top2 = np.sort(proba, axis=1)[:, -2:]
    print(f"{out}: sha256 {digest}")
    print(f"training accuracy {np.mean(pred == y):.4f} after {clf.n_iter_} epochs; smallest "
          f"top-1/top-2 probability margin {np.min(top2[:, 1] - top2[:, 0]):.3f}")


if __name__ == "__main__":
    main()
