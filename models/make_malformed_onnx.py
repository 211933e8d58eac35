#!/usr/bin/python3
"""Write tpud's malformed-ONNX fixtures: model versions that must fail to load, each by name.

Starting from small valid models built here (a 2-layer Gemm/Relu MLP with a batch dimension, and
one-node variants for MatMul, Add, Reshape, Gather, Softmax, Transpose and Concat), writes one
broken version per case into tests/data/onnx/malformed/<case>/1/ (model.onnx and model.json:
format onnx, the checkpoint's SHA-256 computed here, so only the cases meant to fail the digest
check fail it), and tests/data/onnx/malformed/cases.json: for each case what is wrong and the
fragments the load error must contain (the node, tensor, op or field at fault). A case whose
message does not name the culprit keeps its expected fragments and carries "known_bug": the
test then reports it instead of failing (see tests/integration/test_onnx_malformed.sh).

Cases break the file at every layer: bytes (truncation, wire types, garbage), decoder checks
(dims, data types, raw_data length, external data paths, opsets), graph structure (cycles,
undefined inputs, duplicate outputs, unsupported ops and domains), shape inference (Gemm,
MatMul, Add, Reshape, Gather, Softmax, Transpose, Concat), the server's batching rules and
model.json itself. The same .onnx files seed the decoder's fuzz corpus
(tests/fuzz/corpus/fuzz_onnx/malformed_<case>).

    /usr/bin/python3 models/make_malformed_onnx.py

needs python3-onnx (1.12) and python3-numpy; deterministic (fixed seed, no timestamps): re-running
reproduces every file byte for byte. The symlink case's link (ext_symlink_out/1/w.bin ->
/etc/passwd) is a git symlink; the test recreates it if a checkout lost it.
"""

import hashlib
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "onnx", "malformed")
FUZZ = os.path.join(ROOT, "tests", "fuzz", "corpus", "fuzz_onnx")
RNG = np.random.default_rng(20261202)
F = TensorProto.FLOAT


# --- raw protobuf encoding, for what onnx's own serializer will not write -----------------------

def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def ld(field, payload):
    """A length-delimited field."""
    return key(field, 2) + varint(len(payload)) + payload


# --- the valid starting points ------------------------------------------------------------------

def weights(name, *shape):
    """Random FP32 values, the same ones for the same name and shape on every call."""
    rng = np.random.default_rng([zlib.crc32(name.encode())] + list(shape))
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def model(nodes, inits, inputs, outputs, opset=13, extra_opsets=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops, producer_name="make_malformed_onnx")
    m.ir_version = 7
    return m


def vi(name, dims, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def mlp(opset=13):
    """x [batch, 4] -> Gemm fc1 (8) -> Relu relu1 -> Gemm fc2 (3) -> y [batch, 3]."""
    return model(
        [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h1"], "fc1", transB=1),
         helper.make_node("Relu", ["h1"], ["a1"], "relu1"),
         helper.make_node("Gemm", ["a1", "fc2.weight", "fc2.bias"], ["y"], "fc2", transB=1)],
        [weights("fc1.weight", 8, 4), weights("fc1.bias", 8), weights("fc2.weight", 3, 8),
         weights("fc2.bias", 3)],
        [vi("x", ["batch", 4])], [vi("y", ["batch", 3])], opset)


def init(model_, name):
    for t in model_.graph.initializer:
        if t.name == name:
            return t
    raise KeyError(name)


def node(model_, name):
    for n in model_.graph.node:
        if n.name == name:
            return n
    raise KeyError(name)


def ser(m):
    return m.SerializeToString()


# --- the cases ----------------------------------------------------------------------------------
# Each returns the .onnx bytes (or (bytes, model.json overrides)); CASES maps case name to
# (builder, what is wrong, fragments the error must contain).

def c_truncated(frac):
    def build():
        b = ser(mlp())
        return b[:max(1, int(len(b) * frac))]
    return build


def c_truncated_in_weight():
    b = ser(mlp())
    raw = init(mlp(), "fc2.weight").raw_data
    at = b.find(raw)
    assert at > 0
    return b[:at + 5]  # inside fc2.weight's raw_data


def model_without_graph(m):
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.ClearField("graph")
    return m2


def c_wire_ir_version():
    # ModelProto.ir_version (1) as a length-delimited field instead of a varint.
    m = mlp()
    m.ClearField("ir_version")
    return ld(1, b"\x07") + ser(m)


def c_wire_graph():
    # ModelProto.graph (7) as a varint.
    m = mlp()
    return ser(model_without_graph(m)) + key(7, 0) + varint(1)


def c_wire_op_type():
    # fc2's NodeProto.op_type (4) as a varint.
    m = mlp()
    g = onnx.GraphProto()
    g.CopyFrom(m.graph)
    nodes = list(g.node)
    g.ClearField("node")
    body = b""
    for n in nodes:
        nb = onnx.NodeProto()
        nb.CopyFrom(n)
        if n.name == "fc2":
            nb.ClearField("op_type")
            body += ld(1, ser(nb) + key(4, 0) + varint(5))
        else:
            body += ld(1, ser(nb))
    return ser(model_without_graph(m)) + ld(7, body + ser(g))


def c_wire_type_7():
    # A field of wire type 7 (no such wire type) inside the graph.
    m = mlp()
    return ser(model_without_graph(m)) + ld(7, ser(m.graph) + key(2, 7) + b"\x00")


def c_wire_dims_fixed64():
    # fc1.weight's TensorProto.dims (1) as a fixed64.
    m = mlp()
    g = onnx.GraphProto()
    g.CopyFrom(m.graph)
    inits = list(g.initializer)
    g.ClearField("initializer")
    body = b""
    for t in inits:
        tb = onnx.TensorProto()
        tb.CopyFrom(t)
        if t.name == "fc1.weight":
            tb.ClearField("dims")
            body += ld(5, ser(tb) + key(1, 1) + struct.pack("<q", 8))
        else:
            body += ld(5, ser(tb))
    return ser(model_without_graph(m)) + ld(7, ser(g) + body)


def c_garbage():
    return RNG.integers(0, 256, 300, dtype=np.uint8).tobytes()


def c_garbage_text():
    return b"ir_version: 7\ngraph { name: \"not a binary protobuf\" }\n"


def c_empty():
    return b""


def c_cycle_bad_arity():
    return ser(model(
        [helper.make_node("Relu", ["x", "t2"], ["t1"], "loop_a"),  # Relu takes one input: the
         helper.make_node("Add", ["t1", "x"], ["t2"], "loop_b"),   # cycle must be found first
         helper.make_node("Identity", ["t1"], ["y"], "out")],
        [], [vi("x", ["batch", 4])], [vi("y", ["batch", 4])]))


def c_cycle():
    return ser(model(
        [helper.make_node("Add", ["x", "t2"], ["t1"], "cyc_a"),
         helper.make_node("Relu", ["t1"], ["t2"], "cyc_b"),
         helper.make_node("Identity", ["t1"], ["y"], "out")],
        [], [vi("x", ["batch", 4])], [vi("y", ["batch", 4])]))


def c_missing_initializer():
    m = mlp()
    keep = [t for t in m.graph.initializer if t.name != "fc2.weight"]
    m.graph.ClearField("initializer")
    m.graph.initializer.extend(keep)
    return ser(m)


def c_gemm_shape():
    m = mlp()
    w = init(m, "fc2.weight")
    w.CopyFrom(weights("fc2.weight", 3, 7))  # fc2 needs [3, 8] (transB) for a1 [batch, 8]
    return ser(m)


def c_matmul_shape():
    return ser(model([helper.make_node("MatMul", ["x", "mm.w"], ["y"], "mm")],
                     [weights("mm.w", 5, 3)], [vi("x", ["batch", 4])], [vi("y", ["batch", 3])]))


def c_add_broadcast():
    return ser(model([helper.make_node("Add", ["x", "bias3"], ["y"], "add_bias")],
                     [weights("bias3", 3)], [vi("x", ["batch", 4])], [vi("y", ["batch", 4])]))


def c_unsupported_op(op, **attrs):
    def build():
        m = mlp()
        n = node(m, "relu1")
        n.op_type = op
        n.name = op.lower() + "1"
        n.ClearField("attribute")
        n.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
        return ser(m)
    return build


def c_unsupported_domain():
    m = model(
        [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h1"], "fc1", transB=1),
         helper.make_node("FancyAct", ["h1"], ["y"], "fancy1", domain="com.example")],
        [weights("fc1.weight", 8, 4), weights("fc1.bias", 8)],
        [vi("x", ["batch", 4])], [vi("y", ["batch", 8])], extra_opsets=[("com.example", 1)])
    return ser(m)


def c_domain_without_opset():
    m = mlp()
    node(m, "relu1").domain = "com.nowhere"
    return ser(m)


def tensor_raw(name, dims, raw, dtype=F):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def c_replace_init(name, make):
    def build():
        m = mlp()
        init(m, name).CopyFrom(make(name))
        return ser(m)
    return build


def c_input_dims(dims):
    def build():
        m = mlp()
        shape = m.graph.input[0].type.tensor_type.shape
        shape.ClearField("dim")
        for d in dims:
            dd = shape.dim.add()
            if isinstance(d, str):
                dd.dim_param = d
            else:
                dd.dim_value = d
        return ser(m)
    return build


def c_external(location, make_files=None):
    def build():
        m = mlp()
        t = init(m, "fc1.weight")
        nbytes = len(t.raw_data)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", "0"), ("length", str(nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        return ser(m)
    return build


def c_external_file(digest):
    """fc1.weight's bytes in w.bin beside the model; model.json's checkpoint.external lists no
    digest for it (digest None) or a wrong one."""
    def build():
        m = mlp()
        t = init(m, "fc1.weight")
        raw = t.raw_data
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "w.bin"), ("offset", "0"), ("length", str(len(raw)))):
            e = t.external_data.add()
            e.key, e.value = k, v
        change = {"files": {"w.bin": raw}}
        if digest:
            change["external"] = {"w.bin": digest}
        return ser(m), change
    return build


def c_opset(v):
    return lambda: ser(mlp(opset=v))


def c_output_unproduced():
    m = mlp()
    m.graph.output.append(vi("ghost", ["batch", 3]))
    return ser(m)


def c_duplicate_output():
    m = mlp()
    node(m, "relu1").output[0] = "h1"  # relu1 writes fc1's output name again
    node(m, "fc2").input[0] = "h1"
    return ser(m)


def c_reshape_two_neg1():
    shape = numpy_helper.from_array(np.array([-1, -1], dtype=np.int64), "rs.shape")
    return ser(model([helper.make_node("Reshape", ["x", "rs.shape"], ["y"], "rs")], [shape],
                     [vi("x", ["batch", 4])], [vi("y", ["batch", 4])]))


def c_gather_float_indices():
    table = weights("emb.table", 10, 4)
    return ser(model([helper.make_node("Gather", ["emb.table", "x"], ["y"], "emb", axis=0)],
                     [table], [vi("x", ["batch", 2])], [vi("y", ["batch", 2, 4])]))


def c_softmax_axis():
    return ser(model([helper.make_node("Softmax", ["x"], ["y"], "sm", axis=5)], [],
                     [vi("x", ["batch", 4])], [vi("y", ["batch", 4])]))


def c_transpose_perm():
    return ser(model([helper.make_node("Transpose", ["x"], ["y"], "tp", perm=[1, 0, 2])], [],
                     [vi("x", ["batch", 4])], [vi("y", ["batch", 4])]))


def c_concat_ranks():
    return ser(model([helper.make_node("Concat", ["x", "cat.extra"], ["y"], "cat", axis=1)],
                     [weights("cat.extra", 4)], [vi("x", ["batch", 4])], [vi("y", ["batch", 8])]))


def c_two_inputs_one_batch():
    return ser(model([helper.make_node("Add", ["x", "z"], ["y"], "add_xz")], [],
                     [vi("x", ["batch", 4]), vi("z", [1, 4])], [vi("y", ["batch", 4])]))


def c_output_without_batch():
    m = mlp()
    node(m, "fc2").output[0] = "y0"
    m.graph.node.append(helper.make_node("Transpose", ["y0"], ["yt"], "flip", perm=[1, 0]))
    m.graph.ClearField("output")
    m.graph.output.append(vi("yt", [3, "batch"]))
    return ser(m)


def c_output_reduced():
    m = mlp()
    node(m, "fc2").output[0] = "y0"
    m.graph.node.append(helper.make_node("ReduceMean", ["y0"], ["ysum"], "mean_rows", axes=[0],
                                         keepdims=0))
    m.graph.ClearField("output")
    m.graph.output.append(vi("ysum", [3]))
    return ser(m)


def c_initializer_twice():
    m = mlp()
    m.graph.initializer.append(weights("fc1.bias", 8))
    return ser(m)


def c_output_declared_shape():
    m = mlp()
    m.graph.ClearField("output")
    m.graph.output.append(vi("y", ["batch", 5]))  # fc2 makes [batch, 3]
    return ser(m)


def c_attr_wrong_type():
    m = mlp()
    n = node(m, "fc1")
    n.ClearField("attribute")
    n.attribute.append(helper.make_attribute("transB", "yes"))  # an INT attribute as a string
    return ser(m)


def c_no_graph():
    return ser(model_without_graph(mlp()))


def c_input_string():
    m = mlp()
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING
    return ser(m)


def c_good():
    return ser(mlp())


CASES = [
    # name, builder, what is wrong, fragments, model.json changes (None: the standard one)
    ("truncated_5_bytes", lambda: ser(mlp())[:5], "the file cut after 5 bytes",
     ["producer_name", "truncated"], None),
    ("truncated_half", c_truncated(0.5), "the file cut in half: the graph's length runs past the "
     "end", ["graph 'g'", "truncated"], None),
    ("truncated_in_weight", c_truncated_in_weight, "cut 5 bytes into fc2.weight's raw_data",
     ["graph 'g'", "truncated"], None),
    ("truncated_last_byte", lambda: ser(mlp())[:-1], "the last byte (of opset_import) missing",
     ["opset_import", "truncated"], None),
    ("wire_ir_version", c_wire_ir_version, "ir_version as a length-delimited field",
     ["ir_version", "wire type 2"], None),
    ("wire_graph", c_wire_graph, "graph as a varint", ["ModelProto.graph", "wire type 0"], None),
    ("wire_op_type", c_wire_op_type, "fc2's op_type as a varint",
     ["'fc2'", "op_type", "wire type 0"], None),
    ("wire_type_7", c_wire_type_7, "a field of wire type 7 in the graph",
     ["GraphProto.name", "wire type 7"], None),
    ("wire_dims_fixed64", c_wire_dims_fixed64, "fc1.weight's dims as a fixed64",
     ["'fc1.weight'", "dims", "wire type 1"], None),
    ("garbage_bytes", c_garbage, "300 random bytes", ["not a valid ONNX model"], None),
    ("garbage_text", c_garbage_text, "ONNX text format, not binary", ["not a valid ONNX model"],
     None),
    ("empty_file", c_empty, "a 0-byte model.onnx", ["empty file"], None),
    ("cycle", c_cycle, "cyc_a and cyc_b feed each other", ["cyc_"], None),
    ("cycle_bad_arity", c_cycle_bad_arity, "a cycle through a Relu given two inputs",
     ["loop_"], None),
    ("missing_initializer", c_missing_initializer, "fc2.weight is used but nothing defines it",
     ["fc2.weight", "fc2"], None),
    ("gemm_shape", c_gemm_shape, "fc2.weight [3,7] against a1 [batch,8]",
     ["'fc2'", "Gemm", "fc2.weight"], None),
    ("matmul_shape", c_matmul_shape, "x [batch,4] times mm.w [5,3]", ["'mm'", "MatMul"], None),
    ("add_broadcast", c_add_broadcast, "x [batch,4] + bias3 [3]", ["add_bias", "Add"], None),
    ("unsupported_conv", c_unsupported_op("Conv"), "a Conv node",
     ["Conv", "conv1", "opset 13"], None),
    ("unsupported_lstm", c_unsupported_op("LSTM", hidden_size=4), "an LSTM node",
     ["LSTM", "lstm1", "opset 13"], None),
    ("unsupported_domain", c_unsupported_domain, "op FancyAct of domain com.example",
     ["FancyAct", "fancy1", "com.example"], None),
    ("domain_without_opset", c_domain_without_opset, "relu1 in a domain no opset_import names",
     ["relu1", "com.nowhere"], None),
    ("huge_dim_initializer", c_replace_init(
        "fc1.weight", lambda n: tensor_raw(n, [1 << 40, 4], b"\0" * 16)),
     "fc1.weight with dims [2^40, 4] (and 16 bytes)",
     ["fc1.weight", "1099511627776"], None),
    ("huge_dim_input", c_input_dims(["batch", 1 << 62]), "graph input x [batch, 2^62]",
     ["'x'", "4611686018427387904"], None),
    ("negative_dim_initializer", c_replace_init(
        "fc1.bias", lambda n: tensor_raw(n, [-8], b"\0" * 32)), "fc1.bias with dims [-8]",
     ["fc1.bias", "-8"], None),
    ("negative_dim_input", c_input_dims(["batch", -4]), "graph input x [batch, -4]",
     ["'x'", "-4"], None),
    ("dims_overflow", c_replace_init(
        "fc2.weight", lambda n: tensor_raw(n, [1 << 32, 1 << 32, 16], b"\0" * 16)),
     "fc2.weight [2^32, 2^32, 16]: the element count overflows 64 bits",
     ["fc2.weight", "overflow"], None),
    ("bytes_overflow", c_replace_init(
        "fc2.weight", lambda n: tensor_raw(n, [1 << 31, 1 << 31, 2], b"\0" * 16)),
     "fc2.weight [2^31, 2^31, 2] FLOAT: 2^63 elements fit, their bytes overflow",
     ["fc2.weight", "overflow"], None),
    ("raw_data_short", c_replace_init(
        "fc1.weight", lambda n: tensor_raw(n, [8, 4], b"\0" * 127)), "127 raw bytes for [8,4]",
     ["fc1.weight", "raw_data", "127"], None),
    ("raw_data_long", c_replace_init(
        "fc1.bias", lambda n: tensor_raw(n, [8], b"\0" * 40)), "40 raw bytes for [8]",
     ["fc1.bias", "raw_data", "40"], None),
    ("dtype_string", c_replace_init(
        "fc1.bias", lambda n: helper.make_tensor(n, TensorProto.STRING, [8], [b"a"] * 8)),
     "fc1.bias a STRING tensor", ["fc1.bias", "STRING"], None),
    ("dtype_complex64", c_replace_init(
        "fc1.bias", lambda n: tensor_raw(n, [8], b"\0" * 64, TensorProto.COMPLEX64)),
     "fc1.bias a COMPLEX64 tensor", ["fc1.bias", "COMPLEX64"], None),
    ("dtype_uint64", c_replace_init(
        "fc1.bias", lambda n: tensor_raw(n, [8], b"\0" * 64, TensorProto.UINT64)),
     "fc1.bias a UINT64 tensor (no counterpart in the graph IR)", ["fc1.bias", "UINT64"], None),
    ("dtype_unknown", c_replace_init(
        "fc1.bias", lambda n: tensor_raw(n, [8], b"\0" * 32, 99)),
     "fc1.bias of data_type 99", ["fc1.bias", "99"], None),
    ("ext_absolute", c_external("/etc/passwd"), "fc1.weight's external data at /etc/passwd",
     ["fc1.weight", "/etc/passwd", "absolute"], None),
    ("ext_dotdot", c_external("../1/w.bin"), "fc1.weight's external data at ../1/w.bin",
     ["fc1.weight", "'..'"], None),
    ("ext_symlink_out", c_external("w.bin"),
     "fc1.weight's external data w.bin, a symlink to /etc/passwd", ["fc1.weight", "outside"],
     None),
    ("ext_missing", c_external("weights.bin"), "fc1.weight's external data file absent",
     ["fc1.weight", "weights.bin"], None),
    ("ext_unlisted", c_external_file(None),
     "fc1.weight's external data w.bin, valid, but with no digest in checkpoint.external",
     ["fc1.weight", "w.bin", "checkpoint.external"], None),
    ("ext_digest_mismatch", c_external_file("0" * 64),
     "fc1.weight's external data w.bin, listed in checkpoint.external with another digest",
     ["w.bin", "SHA-256 mismatch"], None),
    ("opset_5", c_opset(5), "default-domain opset 5", ["opset 5"], None),
    ("opset_99", c_opset(99), "default-domain opset 99", ["opset 99"], None),
    ("output_unproduced", c_output_unproduced, "graph output ghost that no node produces",
     ["ghost"], None),
    ("duplicate_output", c_duplicate_output, "relu1 and fc1 both produce h1",
     ["'h1'", "relu1"], None),
    ("reshape_two_neg1", c_reshape_two_neg1, "Reshape rs to [-1,-1]", ["'rs'", "Reshape"], None),
    ("gather_float_indices", c_gather_float_indices, "Gather emb with FP32 indices",
     ["'emb'", "Gather"], None),
    ("softmax_axis", c_softmax_axis, "Softmax sm axis 5 on rank 2", ["'sm'", "Softmax"], None),
    ("transpose_perm", c_transpose_perm, "Transpose tp perm of 3 for rank 2",
     ["'tp'", "Transpose"], None),
    ("concat_ranks", c_concat_ranks, "Concat cat of ranks 2 and 1", ["'cat'", "Concat"], None),
    ("two_inputs_one_batch", c_two_inputs_one_batch, "x [batch,4] and z [1,4]", ["'z'"], None),
    ("output_batch_not_first", c_output_without_batch, "output yt [3, batch]", ["'yt'"], None),
    ("output_without_batch", c_output_reduced, "output ysum [3]: the batch reduced away",
     ["'ysum'", "batch"], None),
    ("initializer_twice", c_initializer_twice, "two initializers named fc1.bias",
     ["'fc1.bias'", "twice"], None),
    ("output_declared_shape", c_output_declared_shape, "y declared [batch,5]; fc2 makes [batch,3]",
     ["'y'"], None),
    ("attr_wrong_type", c_attr_wrong_type, "fc1's transB attribute a string, not an int",
     ["'fc1'", "transB"], None),
    ("no_graph", c_no_graph, "a ModelProto without a graph", ["no graph"], None),
    ("input_string", c_input_string, "graph input x of element type STRING",
     ["'x'", "STRING"], None),
    ("sha256_mismatch", c_good, "model.json's sha256 is not the file's",
     ["model.onnx", "SHA-256 mismatch"], {"sha256": "0" * 64}),
    ("layers_with_onnx", c_good, "model.json has layers and format onnx", ["layers"],
     {"layers": [{"op": "dense", "weight": "fc1.weight", "bias": "fc1.bias"}]}),
]

# Filled in after running every case through tpud (tests/integration/test_onnx_malformed.sh):
# the cases whose message does not name what is wrong.
KNOWN_BUGS = {}  # case -> why its message does not name the culprit (none at present)


def model_json(onnx_bytes, change):
    sha = hashlib.sha256(onnx_bytes).hexdigest()
    j = {"format": "onnx", "checkpoint": {"file": "model.onnx", "sha256": sha},
         "precision": "fp32",
         "batching": {"max_batch_size": 8, "buckets": [1, 8], "max_queue_delay_us": 500}}
    if change:
        if "sha256" in change:
            j["checkpoint"]["sha256"] = change["sha256"]
        if "layers" in change:
            j["layers"] = change["layers"]
        if "external" in change:
            j["checkpoint"]["external"] = change["external"]
    return json.dumps(j, indent=1) + "\n"


def main():
    names = [c[0] for c in CASES]
    assert len(set(names)) == len(names)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    os.makedirs(FUZZ, exist_ok=True)
    for f in os.listdir(FUZZ):
        if f.startswith("malformed_"):
            os.remove(os.path.join(FUZZ, f))
    listing = []
    for name, build, what, frags, change in CASES:
        data = build()
        if isinstance(data, tuple):  # (bytes, model.json changes and extra files)
            data, change = data
        d = os.path.join(OUT, name, "1")
        os.makedirs(d)
        for fname, content in (change or {}).get("files", {}).items():
            with open(os.path.join(d, fname), "wb") as f:
                f.write(content)
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(data)
        with open(os.path.join(d, "model.json"), "w") as f:
            f.write(model_json(data, change))
        if name == "ext_symlink_out":
            os.symlink("/etc/passwd", os.path.join(d, "w.bin"))
        if data and change is None:
            with open(os.path.join(FUZZ, "malformed_" + name), "wb") as f:
                f.write(data)
        entry = {"case": name, "what": what, "fragments": frags}
        if name in KNOWN_BUGS:
            entry["known_bug"] = KNOWN_BUGS[name]
        listing.append(entry)
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"good": "mlp_bn_op13", "cases": listing}, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs
                if not os.path.islink(os.path.join(r, f)))
    print(f"{len(CASES)} cases, {total} bytes in {OUT}")


if __name__ == "__main__":
    sys.exit(main())
