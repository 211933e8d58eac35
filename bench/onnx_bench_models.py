#!/usr/bin/python3
"""Write the model versions bench/onnx_vs_ort.sh measures, each as <OUT>/<name>/1/.

Pairs of the same network in tpud's two forms, so the bench can put the dense chain beside the
graph path on identical weights (and ONNX Runtime beside both on the same .onnx file):

  digits_dense   models/digits/1 as it is (64 -> 64 ReLU -> 10 softmax, the bundled model)
  digits_onnx    the same weights as ONNX: Gemm(transB=1) Relu Gemm(transB=1) Softmax
  big_dense      256 -> 1024 ReLU -> 1024 ReLU -> 256, random weights (numpy seed 17, uniform
                 in +-1/sqrt(fan_in), like nn.Linear's default), written by tools/export_model.py
  big_onnx       the same weights as ONNX
  mlp_bn_dense   tests/data/onnx/mlp_bn_op17 with its BatchNormalization folded into the first
                 Gemm (w' = w * g / sqrt(var + eps), b' = (b - mean) * g / sqrt(var + eps) + beta)
  mlp_bn_onnx    tests/data/onnx/mlp_bn_op17's model.onnx as it is, with inputs and outputs
                 pinned in model.json (server_bench.sh reads the input width from there)
  floor.onnx     (for ONNX Runtime only) one Identity of a [batch, 1] float: its per-call cost

Every version is fp32 with buckets 1, 8, 32, 64 (max_batch_size 64) and no reference. The ONNX
files are opset 17 with a symbolic batch dimension. The folded mlp_bn is checked against a
numpy evaluation of the unfolded graph before writing. Output is byte-for-byte reproducible.

    /usr/bin/python3 bench/onnx_bench_models.py OUT

Needs Debian's python3-onnx (1.12) and python3-numpy.
"""

import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no tools/__pycache__ in the work tree
sys.path.insert(0, os.path.join(ROOT, "tools"))
from export_model import write_model_dir  # noqa: E402

BUCKETS = (1, 8, 32, 64)


def read_safetensors(path):
    """name -> float32 array, for the F32 tensors of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{path}: {name} is {t['dtype']}, expected F32"
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + lo:8 + n + hi], dtype="<f4").reshape(t["shape"])
    return out


def write_onnx_version(out_dir, model_bytes, in_name, in_width, out_name, out_width, producer):
    """out_dir/model.onnx and a model.json (format onnx, inputs and outputs pinned). model.json
    has no metadata field, so the producer goes into the ONNX file's doc_string instead."""
    m = onnx.load_from_string(model_bytes)
    if not m.doc_string:
        m.doc_string = producer
        model_bytes = m.SerializeToString()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.onnx"), "wb") as f:
        f.write(model_bytes)
    digest = hashlib.sha256(model_bytes).hexdigest()
    config = (
        "{\n"
        '  "format": "onnx",\n'
        f'  "inputs": [{{"name": "{in_name}", "datatype": "FP32", "shape": [-1, {in_width}]}}],\n'
        f'  "outputs": [{{"name": "{out_name}", "datatype": "FP32", '
        f'"shape": [-1, {out_width}]}}],\n'
        '  "precision": "fp32",\n'
        f'  "batching": {{"max_batch_size": {BUCKETS[-1]}, '
        f'"buckets": [{", ".join(str(b) for b in BUCKETS)}], "max_queue_delay_us": 500}},\n'
        f'  "checkpoint": {{"file": "model.onnx", "sha256": "{digest}"}}\n'
        "}\n")
    with open(os.path.join(out_dir, "model.json"), "w") as f:
        f.write(config)


def mlp_onnx(tensors, layers, in_name, in_width, out_name, out_width, graph_name):
    """An ONNX MLP: per layer Gemm(x, W [out, in], b, transB=1) then its activation."""
    acts = {"relu": "Relu", "softmax": "Softmax", "none": None}
    nodes, inits = [], []
    x = in_name
    for i, layer in enumerate(layers):
        w, b = layer["weight"], layer["bias"]
        inits.append(numpy_helper.from_array(np.asarray(tensors[w], np.float32), w))
        inits.append(numpy_helper.from_array(np.asarray(tensors[b], np.float32), b))
        last = i == len(layers) - 1
        op = acts[layer["activation"]]
        y = out_name if last and op is None else f"gemm{i}"
        nodes.append(helper.make_node("Gemm", [x, w, b], [y], name=f"gemm{i}", transB=1))
        if op is not None:
            z = out_name if last else f"act{i}"
            extra = {"axis": -1} if op == "Softmax" else {}
            nodes.append(helper.make_node(op, [y], [z], name=f"act{i}", **extra))
            y = z
        x = y
    graph = helper.make_graph(
        nodes, graph_name,
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, ["batch", in_width])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["batch", out_width])],
        inits)
    model = helper.make_model(graph, producer_name="bench/onnx_bench_models.py",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def digits(out):
    src = os.path.join(ROOT, "models", "digits", "1")
    dst = os.path.join(out, "digits_dense", "1")
    os.makedirs(dst, exist_ok=True)
    for f in ("model.json", "model.safetensors"):
        shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
    with open(os.path.join(src, "model.json")) as f:
        config = json.load(f)
    tensors = read_safetensors(os.path.join(src, "model.safetensors"))
    layers = [{"weight": l["weight"], "bias": l["bias"], "activation": l["activation"]}
              for l in config["layers"]]
    b = mlp_onnx(tensors, layers, "x", 64, "probs", 10, "digits")
    write_onnx_version(os.path.join(out, "digits_onnx", "1"), b, "x", 64, "probs", 10,
                       "bench/onnx_bench_models.py from models/digits/1")


def big(out):
    rng = np.random.default_rng(17)
    widths = [256, 1024, 1024, 256]
    tensors, layers = {}, []
    for i in range(3):
        fan_in, fan_out = widths[i], widths[i + 1]
        bound = 1.0 / np.sqrt(fan_in)
        tensors[f"fc{i + 1}.weight"] = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(
            np.float32)
        tensors[f"fc{i + 1}.bias"] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
        layers.append({"weight": f"fc{i + 1}.weight", "bias": f"fc{i + 1}.bias",
                       "activation": "relu" if i < 2 else "none"})
    write_model_dir(os.path.join(out, "big_dense", "1"), tensors, layers, 256, 256,
                    precision="fp32", buckets=BUCKETS, input_name="x", output_name="y",
                    metadata={"producer": "bench/onnx_bench_models.py (seed 17)"})
    b = mlp_onnx(tensors, layers, "x", 256, "y", 256, "big_mlp")
    write_onnx_version(os.path.join(out, "big_onnx", "1"), b, "x", 256, "y", 256,
                       "bench/onnx_bench_models.py (seed 17)")


def mlp_bn(out):
    path = os.path.join(ROOT, "tests", "data", "onnx", "mlp_bn_op17", "1", "model.onnx")
    with open(path, "rb") as f:
        model_bytes = f.read()
    m = onnx.load_from_string(model_bytes)
    ops = [n.op_type for n in m.graph.node]
    assert ops == ["Gemm", "BatchNormalization", "Relu", "Gemm", "Relu", "Gemm", "Softmax"], ops
    init = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}
    bn = m.graph.node[1]
    eps = next(a.f for a in bn.attribute if a.name == "epsilon")
    g, beta, mean, var = (init[n] for n in bn.input[1:5])
    s = g / np.sqrt(var + eps)
    w1, b1 = init["fc1.weight"], init["fc1.bias"]
    tensors = {
        "fc1.weight": (w1 * s[:, None]).astype(np.float32),
        "fc1.bias": ((b1 - mean) * s + beta).astype(np.float32),
        "fc2.weight": init["fc2.weight"].astype(np.float32),
        "fc2.bias": init["fc2.bias"].astype(np.float32),
        "fc3.weight": init["fc3.weight"].astype(np.float32),
        "fc3.bias": init["fc3.bias"].astype(np.float32),
    }

    # The folded chain against the graph as written, in float64, on inputs of the fixture's
    # column scales (0.05 .. 2500).
    x = np.random.default_rng(1).normal(size=(256, 20)) * np.geomspace(0.05, 2500, 20)

    def softmax(z):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    h = (x @ w1.T + b1 - mean) / np.sqrt(var + eps) * g + beta
    h = np.maximum(h, 0)
    h = np.maximum(h @ init["fc2.weight"].T + init["fc2.bias"], 0)
    want = softmax(h @ init["fc3.weight"].T + init["fc3.bias"])
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    h = np.maximum(x @ t["fc1.weight"].T + t["fc1.bias"], 0)
    h = np.maximum(h @ t["fc2.weight"].T + t["fc2.bias"], 0)
    got = softmax(h @ t["fc3.weight"].T + t["fc3.bias"])
    err = np.abs(got - want).max()
    assert err < 1e-4, f"folded mlp_bn differs from the graph by {err}"

    layers = [{"weight": f"fc{i}.weight", "bias": f"fc{i}.bias",
               "activation": "relu" if i < 3 else "softmax"} for i in (1, 2, 3)]
    write_model_dir(os.path.join(out, "mlp_bn_dense", "1"), tensors, layers, 20, 2,
                    precision="fp32", buckets=BUCKETS, input_name="x", output_name="probs",
                    metadata={"producer": "bench/onnx_bench_models.py (mlp_bn_op17, BN folded)"})
    write_onnx_version(os.path.join(out, "mlp_bn_onnx", "1"), model_bytes, "x", 20, "probs", 2,
                       "tests/data/onnx/mlp_bn_op17")
    return err


def ort_floor(out):
    """floor.onnx: one Identity of a [batch, 1] float, for ONNX Runtime's per-call cost alone
    (not a tpud model: no model.json)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "floor",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1])])
    model = helper.make_model(graph, producer_name="bench/onnx_bench_models.py",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    with open(os.path.join(out, "floor.onnx"), "wb") as f:
        f.write(model.SerializeToString())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: onnx_bench_models.py OUT_DIR")
    out = sys.argv[1]
    digits(out)
    big(out)
    err = mlp_bn(out)
    ort_floor(out)
    print(f"{out}: digits_dense digits_onnx big_dense big_onnx mlp_bn_dense mlp_bn_onnx "
          f"(BN fold checked: worst error {err:.1e})")


if __name__ == "__main__":
    main()
