#!/usr/bin/python3
"""Write the bundled matmul benchmark model: one dense layer 256 -> 256, no bias, activation
none, precision int8, with deterministic pseudo-random weights stored pre-quantized (I8 weights
plus the "<weight>_scale" per-output-channel scales, see server/model.h).

    /usr/bin/python3 models/export_matmul.py     # writes models/matmul/1/

Re-running reproduces the files byte for byte (fixed seed).
"""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no tools/__pycache__ in the work tree
sys.path.insert(0, os.path.join(ROOT, "tools"))
from export_model import quantize_rows, write_model_dir  # noqa: E402

K = N = 256


def main():
    rng = np.random.default_rng(20240501)
    w = rng.standard_normal((N, K)).astype(np.float32) / np.float32(16)
    q, scale = quantize_rows(w)
    out = os.path.join(ROOT, "models", "matmul", "1")
    digest = write_model_dir(out, {"dense.weight": q, "dense.weight_scale": scale},
                             [{"weight": "dense.weight", "activation": "none"}], K, N,
                             precision="int8", buckets=(1, 16, 64, 256), max_queue_delay_us=200,
                             input_name="a", output_name="c",
                             metadata={"producer": "models/export_matmul.py"})
    print(f"{out}: sha256 {digest}")


if __name__ == "__main__":
    main()
