#!/usr/bin/python3
"""Write an ONNX model and its reference check as a tpud model version directory.

The directory receives model.onnx (the bytes given, unchanged), reference.safetensors (the
framework's own inputs and outputs: "input.NAME" for each graph input, "output.NAME" for each
graph output, all with the same leading dimension, the rows) and model.json with the SHA-256 of
both files and the tolerances tpud checks at load before the version serves (PRODUCT.md, "Model
repository"). "inputs"/"outputs" are left out of model.json: tpud takes them from the graph.

When the onnx package is importable the reference is checked against the graph first (every
graph input and output present, nothing extra, dtypes and static dimensions as declared);
without it that check is skipped with a warning and tpud does it at load.

Output is deterministic: the same model bytes, arrays and options give the same bytes.

    /usr/bin/python3 tools/export_onnx.py model.onnx models/NAME/1 --reference ref.npz \\
        --rtol 1e-4 --atol 1e-5 --labels probs:0.99

where ref.npz holds input.NAME / output.NAME arrays (np.savez). Run with --help for every option.
"""

import argparse
import hashlib
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # no tools/__pycache__ in the work tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_model import PRECISIONS, format_config, write_safetensors  # noqa: E402

MODEL_FILE = "model.onnx"
REFERENCE_FILE = "reference.safetensors"

# ONNX TensorProto.DataType -> numpy dtype (the types a reference can hold).
_ONNX_DTYPES = {
    1: np.dtype("float32"), 2: np.dtype("uint8"), 3: np.dtype("int8"), 4: np.dtype("uint16"),
    5: np.dtype("int16"), 6: np.dtype("int32"), 7: np.dtype("int64"), 9: np.dtype("bool"),
    10: np.dtype("float16"), 11: np.dtype("float64"), 12: np.dtype("uint32"),
    13: np.dtype("uint64"),
}


class ExportError(ValueError):
    """A model or reference that cannot be exported; the message says what and why."""


def _graph_signature(model_bytes):
    """[(name, numpy dtype or None, [dim or None])] for graph inputs and outputs, or None when
    the onnx package is missing. Initializers listed as graph inputs (IR < 4) are not inputs."""
    try:
        import onnx
    except ImportError:
        return None
    model = onnx.load_from_string(model_bytes)
    inits = {t.name for t in model.graph.initializer}

    def sig(values):
        out = []
        for v in values:
            if v.name in inits:
                continue
            tt = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            out.append((v.name, _ONNX_DTYPES.get(tt.elem_type), dims))
        return out
    return sig(model.graph.input), sig(model.graph.output)


def _check_reference(graph, inputs, outputs):
    for kind, declared, given in (("input", graph[0], inputs), ("output", graph[1], outputs)):
        names = [n for n, _, _ in declared]
        missing = [n for n in names if n not in given]
        extra = sorted(n for n in given if n not in names)
        if missing:
            raise ExportError(f"reference: no array for graph {kind}(s) {', '.join(missing)} "
                              f"(the graph's {kind}s are {', '.join(names)})")
        if extra:
            raise ExportError(f"reference: {kind}(s) {', '.join(extra)} are not graph {kind}s "
                              f"(the graph's {kind}s are {', '.join(names)})")
        for name, dtype, dims in declared:
            a = given[name]
            if dtype is not None and a.dtype != dtype:
                raise ExportError(f"reference {kind} {name!r}: dtype {a.dtype}, the graph says "
                                  f"{dtype}")
            if len(dims) != a.ndim:
                raise ExportError(f"reference {kind} {name!r}: shape {list(a.shape)} has {a.ndim} "
                                  f"dimensions, the graph says {len(dims)}")
            for i, (d, n) in enumerate(zip(dims, a.shape)):
                if i > 0 and d is not None and d != n:
                    raise ExportError(f"reference {kind} {name!r}: shape {list(a.shape)}, the "
                                      f"graph says dimension {i} is {d}")


def _check_rows(inputs, outputs):
    rows = {}
    for prefix, arrays in (("input.", inputs), ("output.", outputs)):
        for name, a in arrays.items():
            if a.ndim == 0:
                raise ExportError(f"reference {prefix}{name}: a scalar; every tensor needs a "
                                  f"leading dimension of rows")
            rows[prefix + name] = a.shape[0]
    if len(set(rows.values())) > 1:
        raise ExportError("reference: tensors differ in their number of rows (leading "
                          "dimension): " + ", ".join(f"{k} {v}" for k, v in sorted(rows.items())))
    r = next(iter(rows.values()), 0)
    if r < 1:
        raise ExportError("reference: no rows")
    return r


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_version(out_dir, onnx_path_or_bytes, inputs, outputs, rtol, atol, labels=None,
                  precision="fp32", buckets=(1, 8, 32, 64), max_queue_delay_us=500,
                  metadata=None):
    """Writes out_dir/model.onnx, out_dir/reference.safetensors and out_dir/model.json.

    inputs, outputs: {graph tensor name: numpy array}, all with the same leading dimension.
    labels: None or {"output": output name, "min_agreement": fraction in (0, 1]}.
    Returns {"model": sha256, "reference": sha256}. Raises ExportError on a bad reference."""
    if isinstance(onnx_path_or_bytes, (bytes, bytearray)):
        model_bytes = bytes(onnx_path_or_bytes)
    else:
        with open(onnx_path_or_bytes, "rb") as f:
            model_bytes = f.read()
    inputs = {str(k): np.asarray(v) for k, v in inputs.items()}
    outputs = {str(k): np.asarray(v) for k, v in outputs.items()}
    if precision not in PRECISIONS:
        raise ExportError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    buckets = [int(b) for b in buckets]
    if not buckets or buckets[0] < 1 or any(b >= c for b, c in zip(buckets, buckets[1:])):
        raise ExportError(f"buckets {buckets}: expected strictly increasing positive integers")
    rtol, atol = float(rtol), float(atol)
    if not (rtol >= 0 and atol >= 0):
        raise ExportError(f"rtol {rtol}, atol {atol}: expected non-negative numbers")
    _check_rows(inputs, outputs)
    graph = _graph_signature(model_bytes)
    if graph is None:
        print("export_onnx: warning: the onnx package is missing; the reference is not checked "
              "against the graph (tpud checks it at load)", file=sys.stderr)
    else:
        _check_reference(graph, inputs, outputs)
    if labels is not None:
        out, frac = labels["output"], float(labels["min_agreement"])
        if out not in outputs:
            raise ExportError(f"labels: output {out!r} is not in the reference (outputs: "
                              f"{', '.join(sorted(outputs))})")
        if not 0 < frac <= 1:
            raise ExportError(f"labels: min_agreement {frac}: expected a fraction in (0, 1]")
        labels = {"output": out, "min_agreement": frac}

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, MODEL_FILE), "wb") as f:
        f.write(model_bytes)
    model_digest = hashlib.sha256(model_bytes).hexdigest()
    tensors = {"input." + k: v for k, v in inputs.items()}
    tensors.update({"output." + k: v for k, v in outputs.items()})
    ref_digest = write_safetensors(os.path.join(out_dir, REFERENCE_FILE), tensors, metadata)

    reference = {"file": REFERENCE_FILE, "sha256": ref_digest, "rtol": rtol, "atol": atol}
    if labels is not None:
        reference["labels"] = labels
    config = {
        "format": "onnx",
        "checkpoint": {"file": MODEL_FILE, "sha256": model_digest},
        "precision": precision,
        "batching": {"max_batch_size": buckets[-1], "buckets": buckets,
                     "max_queue_delay_us": int(max_queue_delay_us)},
        "reference": reference,
    }
    with open(os.path.join(out_dir, "model.json"), "w") as f:
        f.write(format_config(config))
    return {"model": model_digest, "reference": ref_digest}


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Write an ONNX model with its reference inputs and outputs as a tpud model "
                    "version directory (model.onnx, reference.safetensors, model.json).",
        epilog="Example: export_onnx.py model.onnx models/fraud/1 --reference ref.npz "
               "--rtol 1e-4 --atol 1e-5 --labels score:0.99",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("onnx", help="the ONNX model file (copied unchanged)")
    p.add_argument("out_dir", help="output version directory, e.g. models/NAME/1")
    p.add_argument("--reference", required=True,
                   help=".npz (np.savez) with 'input.NAME' for each graph input and 'output.NAME' "
                        "for each graph output: the framework's own outputs, same rows")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of the check")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance of the check")
    p.add_argument("--labels", default=None, metavar="OUTPUT:MIN",
                   help="also require that the argmax over the last axis of OUTPUT equals the "
                        "framework's on at least the fraction MIN of the rows, e.g. probs:0.99")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="what the engine computes matrix products in")
    p.add_argument("--buckets", default="1,8,32,64",
                   help="comma-separated batch buckets, strictly increasing; the last is "
                        "max_batch_size")
    p.add_argument("--max-queue-delay-us", type=int, default=500,
                   help="microseconds a partial batch may wait for more requests")
    args = p.parse_args(argv)

    try:
        buckets = [int(b) for b in args.buckets.split(",")]
    except ValueError:
        p.error("--buckets: expected comma-separated integers")
    labels = None
    if args.labels is not None:
        out, sep, frac = args.labels.rpartition(":")
        try:
            labels = {"output": out, "min_agreement": float(frac)}
        except ValueError:
            sep = ""
        if not sep or not out:
            p.error(f"--labels {args.labels!r}: expected OUTPUT:MIN, e.g. probs:0.99")

    ref = np.load(args.reference)
    inputs, outputs, other = {}, {}, []
    for k in ref.files:
        if k.startswith("input."):
            inputs[k[len("input."):]] = ref[k]
        elif k.startswith("output."):
            outputs[k[len("output."):]] = ref[k]
        else:
            other.append(k)
    if other:
        p.error(f"{args.reference}: arrays {', '.join(sorted(other))} are neither 'input.NAME' "
                f"nor 'output.NAME'")
    try:
        digests = write_version(args.out_dir, args.onnx, inputs, outputs, args.rtol, args.atol,
                                labels=labels, precision=args.precision, buckets=buckets,
                                max_queue_delay_us=args.max_queue_delay_us)
    except (ExportError, OSError) as e:
        print(f"export_onnx: {e}", file=sys.stderr)
        return 1
    rows = next(iter(inputs.values())).shape[0] if inputs else 0
    print(f"{args.out_dir}: {len(inputs)} inputs, {len(outputs)} outputs, {rows} reference rows, "
          f"model sha256 {digests['model']}, reference sha256 {digests['reference']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
