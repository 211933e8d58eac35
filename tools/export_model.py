#!/usr/bin/python3
"""Export a PyTorch-style state dict saved as numpy .npz into a tpud model directory.

The output directory receives model.safetensors (written here with numpy only, no safetensors
package) and model.json with the checkpoint's SHA-256, as PRODUCT.md ("Model repository")
describes. Dense layers follow nn.Linear: "<layer>.weight" is [out_features, in_features] and
"<layer>.bias" (optional) is [out_features].

Output is deterministic: the same arrays and options give the same bytes (tensors and header
keys sorted by name, no timestamps).

Example (a state dict from PyTorch):
    np.savez("mlp.npz", **{k: v.numpy() for k, v in model.state_dict().items()})
    /usr/bin/python3 tools/export_model.py mlp.npz models/mlp/1 \\
        --activation relu,softmax --precision bf16 --buckets 1,8,32,64

Run with --help for every option.
"""

import argparse
import hashlib
import json
import os
import re
import struct
import sys

import numpy as np

ACTIVATIONS = ("none", "relu", "gelu", "tanh", "sigmoid", "softmax")
PRECISIONS = ("fp32", "bf16", "int8")
# numpy dtype -> safetensors dtype name. BF16 has no numpy dtype: see to_bf16_bits.
_DTYPES = {
    np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
    np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16",
    np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("uint16"): "U16",
    np.dtype("uint32"): "U32", np.dtype("uint64"): "U64", np.dtype("bool"): "BOOL",
}


class BF16:
    """A bfloat16 tensor for write_safetensors: `bits` holds the uint16 patterns."""

    def __init__(self, bits):
        self.bits = np.ascontiguousarray(bits, dtype="<u2")
        self.shape = self.bits.shape


def to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (as the engine does)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    bits = rounded.astype(np.uint16)
    bits[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # keep NaN quiet
    return bits


def quantize_rows(w):
    """Symmetric per-output-channel int8: scale = max|row| / 127 (1 for a zero row),
    q = clamp(round_half_even(w / scale), -127, 127). Returns (q int8, scale float32)."""
    w = np.asarray(w, dtype=np.float32)
    amax = np.max(np.abs(w), axis=1)
    scale = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: numpy array or BF16} as a safetensors file, tensors in name order.

    The header is compact JSON with sorted keys, padded with spaces so the data section starts at
    a multiple of 8 bytes. Returns the file's SHA-256 (hex)."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, BF16):
            dtype, data, shape = "BF16", t.bits.tobytes(), t.shape
        else:
            a = np.asarray(t)
            if a.dtype not in _DTYPES:
                raise ValueError(f"tensor {name!r}: numpy dtype {a.dtype} has no safetensors name")
            dtype = _DTYPES[a.dtype]
            data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
            shape = a.shape
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    blob = struct.pack("<Q", len(text)) + text + b"".join(blobs)
    with open(path, "wb") as f:
        f.write(blob)
    return hashlib.sha256(blob).hexdigest()


def write_model_dir(out_dir, tensors, layers, input_width, output_width, precision="fp32",
                    buckets=(1, 8, 32, 64), max_queue_delay_us=500, input_name="x",
                    output_name="y", metadata=None):
    """Writes out_dir/model.safetensors and out_dir/model.json.

    layers: list of {"weight": name, "bias": name or None, "activation": name}."""
    os.makedirs(out_dir, exist_ok=True)
    digest = write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, metadata)
    config = {
        "inputs": [{"name": input_name, "datatype": "FP32", "shape": [-1, int(input_width)]}],
        "outputs": [{"name": output_name, "datatype": "FP32", "shape": [-1, int(output_width)]}],
        "layers": [],
        "precision": precision,
        "batching": {"max_batch_size": int(buckets[-1]), "buckets": [int(b) for b in buckets],
                     "max_queue_delay_us": int(max_queue_delay_us)},
        "checkpoint": {"file": "model.safetensors", "sha256": digest},
    }
    for layer in layers:
        entry = {"op": "dense", "weight": layer["weight"]}
        if layer.get("bias"):
            entry["bias"] = layer["bias"]
        entry["activation"] = layer.get("activation", "none")
        config["layers"].append(entry)
    with open(os.path.join(out_dir, "model.json"), "w") as f:
        f.write(format_config(config))
    return digest


def format_config(config):
    """model.json text laid out like PRODUCT.md's example: one line per field, one line per
    tensor and layer."""
    def one(v):
        return json.dumps(v, separators=(", ", ": "))
    lines = []
    for k, v in config.items():
        if isinstance(v, list) and v and all(isinstance(e, dict) for e in v):
            body = ",\n".join("    " + one(e) for e in v)
            lines.append(f"  {one(k)}: [\n{body}\n  ]")
        else:
            lines.append(f"  {one(k)}: {one(v)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _natural_key(s):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Export a PyTorch-style state dict (.npz of numpy arrays: <layer>.weight "
                    "[out, in], optional <layer>.bias [out]) to a tpud model directory "
                    "(model.json + model.safetensors).",
        epilog="Example: export_model.py mlp.npz models/mlp/1 --activation relu,softmax "
               "--buckets 1,8,32,64",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("npz", help="input .npz (np.savez of a state dict)")
    p.add_argument("out_dir", help="output version directory, e.g. models/NAME/1")
    p.add_argument("--layers", default=None,
                   help="comma-separated layer prefixes in execution order (default: every 2-D "
                        "'<prefix>.weight' in the npz, in natural sort order: fc2 before fc10)")
    p.add_argument("--activation", default="relu,none",
                   help="comma-separated activation per layer, one of " + ", ".join(ACTIVATIONS) +
                        "; with two values A,B: A for every hidden layer and B for the last")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="what the engine computes in (int8: quantized at load unless --store i8)")
    p.add_argument("--store", choices=("f32", "f16", "bf16", "i8"), default="f32",
                   help="dtype of the weights in the checkpoint; i8 stores symmetric per-channel "
                        "int8 weights plus '<weight>_scale' tensors (biases stay f32)")
    p.add_argument("--buckets", default="1,8,32,64",
                   help="comma-separated batch buckets, strictly increasing; the last is "
                        "max_batch_size")
    p.add_argument("--max-queue-delay-us", type=int, default=500,
                   help="microseconds a partial batch may wait for more requests")
    p.add_argument("--input-name", default="x", help="name of the input tensor")
    p.add_argument("--output-name", default="y", help="name of the output tensor")
    p.add_argument("--ignore", default="",
                   help="comma-separated arrays of the npz that the model truly does not use; "
                        "any other array the layer chain does not use is an error")
    args = p.parse_args(argv)

    sd = np.load(args.npz)
    if args.layers:
        prefixes = [s for s in args.layers.split(",") if s]
    else:
        # Only 2-D weights are dense layers: a 1-D "<prefix>.weight" (BatchNorm, LayerNorm) is
        # left unused, and so refused below.
        prefixes = sorted((k[:-len(".weight")] for k in sd.files
                           if k.endswith(".weight") and sd[k].ndim == 2), key=_natural_key)
    if not prefixes:
        p.error(f"{args.npz}: no '<layer>.weight' arrays")

    acts = [a.strip() for a in args.activation.split(",")]
    if len(acts) == 2 and len(prefixes) != 2:
        acts = [acts[0]] * (len(prefixes) - 1) + [acts[1]]
    elif len(acts) == 1 and len(prefixes) > 1:
        acts = acts * len(prefixes)
    if len(acts) != len(prefixes):
        p.error(f"--activation: {len(acts)} values for {len(prefixes)} layers")
    for a in acts:
        if a not in ACTIVATIONS:
            p.error(f"--activation: unknown activation {a!r} (expected one of {', '.join(ACTIVATIONS)})")
    try:
        buckets = [int(b) for b in args.buckets.split(",")]
    except ValueError:
        p.error("--buckets: expected comma-separated integers")
    if not buckets or buckets[0] < 1 or any(b >= c for b, c in zip(buckets, buckets[1:])):
        p.error("--buckets: expected strictly increasing positive integers")

    ignored = [s for s in args.ignore.split(",") if s]
    for name in ignored:
        if name not in sd.files:
            p.error(f"--ignore: {args.npz} has no array {name!r}")
        if any(name in (q + ".weight", q + ".bias") for q in prefixes):
            p.error(f"--ignore: {name!r} is used by layer {name.rsplit('.', 1)[0]!r}")
    # An array the dense chain does not use (a BatchNorm's running statistics, an embedding, a
    # LayerNorm's scale) is almost always part of the model: dropping it silently would serve a
    # different function. Such a model is a graph, not a chain: it goes through ONNX.
    used = {q + ".weight" for q in prefixes} | {q + ".bias" for q in prefixes}
    unused = sorted((k for k in sd.files if k not in used and k not in ignored), key=_natural_key)
    if unused:
        p.error(f"{args.npz}: the dense layer chain {','.join(prefixes)} does not use "
                f"{', '.join(unused)}; a model with other layers (BatchNorm, LayerNorm, "
                f"embeddings, ...) must be exported as ONNX with tools/export_onnx.py, and "
                f"arrays that are truly unused can be named with --ignore")

    tensors, layers = {}, []
    width = None
    for prefix, act in zip(prefixes, acts):
        wname, bname = prefix + ".weight", prefix + ".bias"
        if wname not in sd.files:
            p.error(f"{args.npz}: no array {wname!r}")
        w = np.asarray(sd[wname], dtype=np.float32)
        if w.ndim != 2:
            p.error(f"{wname}: expected [out_features, in_features], got shape {list(w.shape)}")
        if width is not None and w.shape[1] != width:
            p.error(f"{wname}: takes {w.shape[1]} inputs but the previous layer gives {width}")
        if width is None:
            input_width = w.shape[1]
        width = w.shape[0]
        if args.store == "f32":
            tensors[wname] = w
        elif args.store == "f16":
            tensors[wname] = w.astype(np.float16)
        elif args.store == "bf16":
            tensors[wname] = BF16(to_bf16_bits(w))
        else:
            q, scale = quantize_rows(w)
            tensors[wname] = q
            tensors[wname + "_scale"] = scale
        layer = {"weight": wname, "bias": None, "activation": act}
        if bname in sd.files:
            b = np.asarray(sd[bname], dtype=np.float32)
            if b.shape != (w.shape[0],):
                p.error(f"{bname}: expected shape [{w.shape[0]}], got {list(b.shape)}")
            tensors[bname] = b
            layer["bias"] = bname
        layers.append(layer)

    digest = write_model_dir(args.out_dir, tensors, layers, input_width, width,
                             precision=args.precision, buckets=buckets,
                             max_queue_delay_us=args.max_queue_delay_us,
                             input_name=args.input_name, output_name=args.output_name)
    print(f"{args.out_dir}: {len(layers)} layers, {input_width} -> {width}, "
          f"precision {args.precision}, sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
