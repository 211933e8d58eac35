#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Seeds are small, real examples of what each parser reads: one valid frame per method (and a
pipelined stream, a split-prone one, a bad flag), inference and MatMul requests, JSON infer
bodies of every datatype, the bundled models' model.json, small safetensors files, an audit log
(plain and HMAC) with a rotation and a head file, HTTP request heads. Protobuf is written by hand
here from the .proto field numbers, so the seeds do not depend on the code under test.
Run from anywhere: python3 tests/fuzz/make_corpus.py. Regression inputs (crash-*) added by hand
to corpus directories are kept.
"""
import hashlib, hmac, json, os, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def f_varint(n, v): return varint(n << 3) + varint(v)
def f_bytes(n, b): return varint(n << 3 | 2) + varint(len(b)) + b
def f_str(n, s): return f_bytes(n, s.encode())
def f_packed(n, vals): return f_bytes(n, b"".join(varint(v) for v in vals))
def f_float(n, vals): return f_bytes(n, b"".join(struct.pack("<f", v) for v in vals))


def envelope(id_, method, payload=b"", timeout=0, metadata=()):
    b = f_varint(1, id_) + f_varint(2, method)
    if timeout:
        b += f_varint(3, timeout)
    for k, v in metadata:
        b += f_bytes(4, f_str(1, k) + f_str(2, v))
    if payload:
        b += f_bytes(5, payload)
    return b


def response_envelope(id_, code, message="", payload=b""):
    b = f_varint(1, id_) + f_varint(2, code)
    if message:
        b += f_str(3, message)
    if payload:
        b += f_bytes(4, payload)
    return b


def frame(msg, flag=0): return bytes([flag]) + struct.pack(">I", len(msg)) + msg


def infer_input(name, dtype, shape, fp32=None):
    b = f_str(1, name) + f_str(2, dtype) + f_packed(3, shape)
    if fp32 is not None:
        b += f_bytes(5, f_float(6, fp32))
    return b


def infer_request(inputs, raw=(), outputs=(), model="digits", version="1", id_="r-1"):
    b = f_str(1, model) + (f_str(2, version) if version else b"") + (f_str(3, id_) if id_ else b"")
    b += f_bytes(4, f_str(1, "priority") + f_bytes(2, f_varint(2, 1)))  # parameters map entry
    for i in inputs:
        b += f_bytes(5, i)
    for o in outputs:
        b += f_bytes(6, f_str(1, o))
    for r in raw:
        b += f_bytes(7, r)
    return b


def tensor(shape, dtype, data): return f_packed(1, shape) + f_str(2, dtype) + f_bytes(3, data)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def f32s(vals): return b"".join(struct.pack("<f", v) for v in vals)


# ---- method payloads ----
x64 = [float(i % 17) / 16 for i in range(64)]
infer_raw = infer_request([infer_input("x", "FP32", [1, 64])], raw=[f32s(x64)], outputs=["probs"])
infer_typed = infer_request([infer_input("x", "FP32", [2, 64], fp32=x64 + x64)])
matmul = f_bytes(1, tensor([2, 3], "FP32", f32s(range(6)))) + f_bytes(2, tensor([3, 2], "FP32", f32s(range(6))))
matmul_i8 = f_bytes(1, tensor([2, 4], "INT8", bytes(range(8)))) + f_bytes(2, tensor([4, 1], "INT8", bytes(4)))
payloads = {
    1: b"", 2: b"", 3: f_str(1, "digits") + f_str(2, "1"), 4: b"", 5: f_str(1, "digits"),
    6: infer_raw, 7: f_str(1, "digits") + f_str(2, "2"), 8: f_str(1, "digits"), 9: matmul,
    10: f_varint(1, 1),
}
names = {1: "server_live", 2: "server_ready", 3: "model_ready", 4: "server_metadata",
         5: "model_metadata", 6: "model_infer", 7: "model_load", 8: "model_unload", 9: "matmul",
         10: "repository_index"}

# fuzz_frame: byte 0 = max message selector (3: 1 MiB) | chunk bits, byte 1 = split seed.
for m, p in payloads.items():
    env = envelope(m, m, p, timeout=250000 if m == 6 else 0,
                   metadata=[("authorization", "Bearer t0k")] if m == 6 else ())
    write("fuzz_frame", f"req_{names[m]}", bytes([0x0F, m]) + frame(env))
write("fuzz_frame", "pipelined", bytes([0x13, 7]) + b"".join(frame(envelope(i, m, p)) for i, (m, p) in enumerate(payloads.items(), 1)))
write("fuzz_frame", "byte_at_a_time", bytes([0x03, 1]) + frame(envelope(9, 6, infer_typed)))
write("fuzz_frame", "typed_infer", bytes([0x7F, 3]) + frame(envelope(5, 6, infer_typed)))
write("fuzz_frame", "matmul_int8", bytes([0x23, 9]) + frame(envelope(6, 9, matmul_i8)))
write("fuzz_frame", "empty_frame", bytes([0x03, 0]) + frame(b"") + frame(envelope(1, 1)))
write("fuzz_frame", "unknown_method", bytes([0x03, 0]) + frame(envelope(2, 99)))
write("fuzz_frame", "compressed", bytes([0x03, 0]) + frame(envelope(3, 1), flag=1))
write("fuzz_frame", "truncated", bytes([0x03, 0]) + frame(envelope(4, 6, infer_raw))[:40])
write("fuzz_frame", "too_big", bytes([0x00, 0]) + frame(envelope(4, 6, infer_raw)))
write("fuzz_frame", "resp_infer", bytes([0x03, 2]) + frame(response_envelope(6, 0, "", f_str(1, "digits") + f_str(2, "1") + f_bytes(5, f_str(1, "probs") + f_str(2, "FP32") + f_packed(3, [1, 10])) + f_bytes(6, f32s([0.1] * 10)))))
write("fuzz_frame", "resp_error", bytes([0x03, 2]) + frame(response_envelope(7, 3, "input 'x': shape [3,5] needs 60 bytes of FP32 data, got 56")))

# fuzz_validate: byte 0 % 3 = 0 digits model, 1 two-input model, 2 MatMul.
write("fuzz_validate", "digits_raw", b"\x00" + infer_request([infer_input("x", "FP32", [1, 64])], raw=[f32s(x64)]))
write("fuzz_validate", "digits_typed", b"\x00" + infer_typed)
write("fuzz_validate", "digits_batch0", b"\x00" + infer_request([infer_input("x", "FP32", [0, 64])], raw=[b""]))
write("fuzz_validate", "digits_short", b"\x00" + infer_request([infer_input("x", "FP32", [1, 64])], raw=[f32s(x64[:63])]))
write("fuzz_validate", "digits_negdim", b"\x00" + infer_request([infer_input("x", "FP32", [-1, 64])], raw=[b""]))
write("fuzz_validate", "digits_overflow", b"\x00" + infer_request([infer_input("x", "FP32", [1 << 62, 1 << 62])], raw=[b""]))
write("fuzz_validate", "two_inputs", b"\x01" + infer_request(
    [infer_input("a", "FP32", [2, 3]), infer_input("b", "INT8", [2, 2, 2])],
    raw=[f32s(range(6)), bytes(8)], outputs=["q", "p"]))
write("fuzz_validate", "two_dup", b"\x01" + infer_request(
    [infer_input("a", "FP32", [2, 3]), infer_input("a", "FP32", [2, 3])], raw=[f32s(range(6))] * 2))
write("fuzz_validate", "matmul_fp32", b"\x02" + matmul)
write("fuzz_validate", "matmul_int8", b"\x02" + matmul_i8)
write("fuzz_validate", "matmul_limit", b"\x82" + matmul)

# fuzz_oip_json: byte 0 0 = request body, 2 = binary-tensor body, odd = ModelInferResponse protobuf.
bodies = {
    "fp32_flat": {"id": "r1", "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0.1, -2.5, 3e-39, 1e38]}]},
    "fp32_nested": {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4.5]]}], "outputs": [{"name": "probs"}]},
    "ints": {"inputs": [{"name": "a", "shape": [3], "datatype": "INT8", "data": [-128, 0, 127]},
                        {"name": "b", "shape": [2], "datatype": "UINT64", "data": [0, 9223372036854775807]},
                        {"name": "c", "shape": [2], "datatype": "INT64", "data": [-9223372036854775808, 5]},
                        {"name": "d", "shape": [1], "datatype": "UINT16", "data": [65535]}]},
    "halves": {"inputs": [{"name": "h", "shape": [3], "datatype": "FP16", "data": [0.5, 65504, -6e-8]},
                          {"name": "g", "shape": [2], "datatype": "BF16", "data": [1.5, -3.0e38]}]},
    "bool_fp64": {"parameters": {"p": 1, "s": "x", "b": True}, "inputs": [{"name": "m", "shape": [2], "datatype": "BOOL", "data": [True, False]},
                              {"name": "d", "shape": [2], "datatype": "FP64", "data": [1e308, 0.1]}]},
    "bytes": {"inputs": [{"name": "s", "shape": [2], "datatype": "BYTES", "data": ["héllo", ""],
                          "parameters": {"content_type": "str"}}]},
    "empty": {"inputs": [{"name": "x", "shape": [0, 64], "datatype": "FP32", "data": []}]},
    "bad_count": {"inputs": [{"name": "x", "shape": [3, 4], "datatype": "FP32", "data": [1] * 11}]},
}
for name, body in bodies.items():
    write("fuzz_oip_json", name, b"\x00" + json.dumps(body, ensure_ascii=False).encode())
write("fuzz_oip_json", "deep", b"\x00" + b'{"inputs":' + b"[" * 40 + b"]" * 40 + b"}")
# byte 0 = 2: binary tensors (2-byte little-endian JSON length, JSON, binary section).
def binary_body(inputs):
    head, blobs = {"inputs": []}, b""
    for name, dt, shape, raw in inputs:
        t = {"name": name, "datatype": dt, "shape": shape}
        if raw is None:
            t["data"] = [1] * (shape[0] if shape else 1)
        else:
            t["parameters"] = {"binary_data_size": len(raw)}
            blobs += raw
        head["inputs"].append(t)
    h = json.dumps(head).encode()
    return b"\x02" + struct.pack("<H", len(h)) + h + blobs
write("fuzz_oip_json", "bin_fp32_nan", binary_body([("x", "FP32", [1, 3], f32s([float("nan"), float("inf"), 0.5]))]))
write("fuzz_oip_json", "bin_mixed", binary_body([("a", "INT64", [2], struct.pack("<2q", -1, 7)), ("b", "INT8", [2], None),
                                                 ("s", "BYTES", [2], struct.pack("<I", 2) + b"ok" + struct.pack("<I", 0))]))
# byte 0 = 3: KServe V1 bodies (the next byte odd: the one-input model).
write("fuzz_oip_json", "v1_rows", b"\x03\x00" + json.dumps({"instances": [{"x": [1, 2, 3], "c": 4}, {"x": [0.5, -1, 2e-3], "c": -7}]}).encode())
write("fuzz_oip_json", "v1_cols", b"\x03\x01" + json.dumps({"inputs": [[1, 2, 3]], "signature_name": "serving_default"}).encode())
write("fuzz_oip_json", "resp_raw", b"\x01" + f_str(1, "digits") + f_str(2, "1") + f_str(3, "r1") +
      f_bytes(5, f_str(1, "probs") + f_str(2, "FP32") + f_packed(3, [1, 4])) + f_bytes(6, f32s([0.1, 1e-45, 3.4028235e38, -0.0])))
write("fuzz_oip_json", "resp_typed", b"\x01" + f_str(1, "m") +
      f_bytes(5, f_str(1, "y") + f_str(2, "FP32") + f_packed(3, [2]) + f_bytes(5, f_float(6, [1.0, 2.0]))))
write("fuzz_oip_json", "resp_bf16", b"\x01" + f_str(1, "m") +
      f_bytes(5, f_str(1, "y") + f_str(2, "BF16") + f_packed(3, [4])) + f_bytes(6, bytes([0x80, 0x3f, 0, 0x80, 0x80, 0x7f, 1, 0])))

# fuzz_model_config: the bundled models' model.json and a few variants.
for m in ("digits", "matmul"):
    p = os.path.join(ROOT, "models", m, "1", "model.json")
    if os.path.exists(p):
        write("fuzz_model_config", m, open(p, "rb").read())
minimal = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
           "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
           "layers": [{"weight": "w"}], "checkpoint": {"sha256": "A" * 64}}
write("fuzz_model_config", "minimal", json.dumps(minimal))
write("fuzz_model_config", "bf16_buckets", json.dumps(dict(minimal, precision="bf16", batching={"buckets": [1, 3, 7]})))
write("fuzz_model_config", "bad_file", json.dumps(dict(minimal, checkpoint={"file": "../x", "sha256": "0" * 64})))

# fuzz_safetensors: small files, and the digits checkpoint.
def safetensors(tensors, meta=None, pad=0):
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dtype, shape, blob in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(hdr).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + data
write("fuzz_safetensors", "two", safetensors([("fc.weight", "F32", [2, 2], f32s([1, 2, 3, 4])), ("fc.bias", "I8", [2], b"\x01\xff")], {"format": "pt"}, pad=5))
write("fuzz_safetensors", "scalar_empty", safetensors([("s", "F64", [], struct.pack("<d", 1.5)), ("e", "BF16", [0, 3], b"")]))
write("fuzz_safetensors", "f4", safetensors([("q", "F4", [2, 3], b"\x12\x34\x56"), ("b", "BOOL", [1], b"\x01")]))
write("fuzz_safetensors", "empty", safetensors([]))
p = os.path.join(ROOT, "models", "digits", "1", "model.safetensors")
if os.path.exists(p):
    write("fuzz_safetensors", "digits", open(p, "rb").read())

# fuzz_onnx: small ONNX models written from onnx.proto's field numbers (ModelProto: ir_version 1,
# graph 7, opset_import 8; GraphProto: node 1, name 2, initializer 5, input 11, output 12;
# NodeProto: input 1, output 2, name 3, op_type 4, attribute 5; TensorProto: dims 1, data_type 2,
# float_data 4, int32_data 5, int64_data 7, name 8, raw_data 9, external_data 13,
# data_location 14; ValueInfoProto: name 1, type 2; TypeProto.tensor_type 1: elem_type 1,
# shape 2; TensorShapeProto.dim 1: dim_value 1, dim_param 2; AttributeProto: name 1, f 2, i 3,
# t 5, ints 8, type 20). ONNX's own test models are added as seeds by run.sh.
def onnx_value(name, elem, dims):
    shape = b"".join(f_bytes(1, f_str(2, d) if isinstance(d, str) else f_varint(1, d)) for d in dims)
    return f_str(1, name) + f_bytes(2, f_bytes(1, f_varint(1, elem) + f_bytes(2, shape)))
def onnx_tensor(name, dtype, dims, raw=None, floats=None, ints32=None):
    b = b"".join(f_varint(1, d) for d in dims) + f_varint(2, dtype) + f_str(8, name)
    if raw is not None: b += f_bytes(9, raw)
    if floats is not None: b += f_float(4, floats)
    if ints32 is not None: b += f_packed(5, ints32)
    return b
def onnx_node(op, ins, outs, name="", attrs=b""):
    return b"".join(f_str(1, i) for i in ins) + b"".join(f_str(2, o) for o in outs) + f_str(3, name) + f_str(4, op) + attrs
def onnx_model(nodes, inits, ins, outs, opset=13):
    g = b"".join(f_bytes(1, n) for n in nodes) + f_str(2, "g") + b"".join(f_bytes(5, t) for t in inits)
    g += b"".join(f_bytes(11, v) for v in ins) + b"".join(f_bytes(12, v) for v in outs)
    return f_varint(1, 8) + f_bytes(7, g) + f_bytes(8, f_str(1, "") + f_varint(2, opset))
write("fuzz_onnx", "matmul_raw", onnx_model([onnx_node("MatMul", ["x", "w"], ["y"], "mm")],
      [onnx_tensor("w", 1, [2, 3], raw=f32s([1, 2, 3, 4, 5, 6]))],
      [onnx_value("x", 1, ["N", 2])], [onnx_value("y", 1, ["N", 3])]))
write("fuzz_onnx", "gemm_typed", onnx_model([onnx_node("Gemm", ["x", "w", "b"], ["y"], "fc",
      f_bytes(5, f_str(1, "alpha") + struct.pack("<B", 2 << 3 | 5) + struct.pack("<f", 0.5) + f_varint(20, 1)) +
      f_bytes(5, f_str(1, "transB") + f_varint(3, 1) + f_varint(20, 2)))],
      [onnx_tensor("w", 1, [3, 2], floats=[1, 2, 3, 4, 5, 6]), onnx_tensor("b", 3, [3], ints32=[1, -1, 2])],
      [onnx_value("x", 1, [1, 2])], [onnx_value("y", 1, [1, 3])], opset=17))
write("fuzz_onnx", "constant", onnx_model([onnx_node("Constant", [], ["c"], "",
      f_bytes(5, f_str(1, "value") + f_bytes(5, onnx_tensor("", 7, [2], raw=struct.pack("<qq", 3, -4))) + f_varint(20, 4))),
      onnx_node("Reshape", ["x", "c"], ["y"], "r")], [], [onnx_value("x", 1, [2, 2])], [onnx_value("y", 1, [1, 4])]))

# fuzz_audit_verify: byte 0 flags (1 key, 2 split at byte 1, 4 head after NUL, 8 --partial).
def audit_log(n, key=None, torn=False):
    mac = lambda b: (hmac.new(key, b, hashlib.sha256) if key else hashlib.sha256(b)).hexdigest()
    prev, lines = "0" * 64, []
    kinds = ["config", "start", "load", "request", "request", "rotate", "request", "stop"]
    for seq in range(1, n + 1):
        rec = ('{"seq":%d,"time":"2024-05-06T07:08:%02d.123456Z","kind":"%s","request_id":"r-%d",'
               '"client":"127.0.0.1:5000","model":"digits","version":"1","input_sha256":"%s",'
               '"output_sha256":"%s","status":"OK","message":"","queue_us":120,"compute_us":830,'
               '"batch_id":%d,"bucket":8,"prev":"%s"' % (seq, seq, kinds[(seq - 1) % len(kinds)], seq,
                                                       "ab" * 32, "cd" * 32, seq, prev))
        h = mac((rec + "}").encode())
        lines.append(rec + ',"hash":"%s"}\n' % h)
        prev = h
    text = "".join(lines)
    head = '{"seq":%d,"hash":"%s","time":"2024-05-06T07:09:00.000000Z"}\n' % (n, prev)
    return text.encode(), head.encode()
log, head = audit_log(6)
write("fuzz_audit_verify", "plain", b"\x00\x00" + log)
write("fuzz_audit_verify", "rotated", b"\x02\x80" + log)
write("fuzz_audit_verify", "head", b"\x04\x00" + log + b"\x00" + head)
klog, khead = audit_log(4, key=b"fuzz-key")
write("fuzz_audit_verify", "hmac_head", b"\x05\x00" + klog + b"\x00" + khead)
write("fuzz_audit_verify", "torn", b"\x00\x00" + log[:-30])
lines = log.split(b"\n")
write("fuzz_audit_verify", "swapped", b"\x00\x00" + b"\n".join([lines[0], lines[2], lines[1]] + lines[3:]))
# A gap record (seq 5 saying 3..4 went with a deleted file) after seq 2; a rotate record first.
def audit_line(seq, prev, kind, msg):
    rec = ('{"seq":%d,"time":"2024-05-06T07:08:00.000000Z","kind":"%s","request_id":"",'
           '"client":"","model":"","version":"","input_sha256":"","output_sha256":"",'
           '"status":"DATA_LOSS","message":"%s","queue_us":0,"compute_us":0,"batch_id":0,'
           '"bucket":0,"prev":"%s"' % (seq, kind, msg, prev))
    h = hashlib.sha256((rec + "}").encode()).hexdigest()
    return (rec + ',"hash":"%s"}\n' % h).encode(), h
g, gh = audit_line(5, "ab" * 32, "gap", "seq 3..4 are not in the log: audit.log was deleted")
r6, _ = audit_line(6, gh, "request", "")
write("fuzz_audit_verify", "gap", b"\x00\x00" + b"\n".join(lines[:2]) + b"\n" + g + r6)
write("fuzz_audit_verify", "partial", b"\x08\x00" + b"\n".join(lines[5:]))

# fuzz_http_parser: byte 0 limits (2: 8 KiB head; bit 2: 100-byte body limit).
heads = {
    "get": b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n",
    "post": b"POST /v2/models/digits/versions/1/infer HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\nContent-Length: 17\r\nConnection: keep-alive\r\n\r\n{\"inputs\": []}\r\n",
    "expect": b"POST /v2/models/digits/infer HTTP/1.1\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n",
    "http10": b"HEAD /metrics HTTP/1.0\nConnection: keep-alive\n\n",
    "chunked": b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
    "smuggle": b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
    "dup_cl": b"POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    "pipelined": b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n",
}
for name, h in heads.items():
    write("fuzz_http_parser", name, b"\x02" + h)
write("fuzz_http_parser", "body_limit", b"\x06" + heads["post"])
# fuzz_grpc: one gRPC header value (:path, grpc-timeout, content-type, or a grpc-message).
write("fuzz_grpc", "path_infer", b"/inference.GRPCInferenceService/ModelInfer")
write("fuzz_grpc", "path_matmul", b"/tpud.TpudService/MatMul")
write("fuzz_grpc", "timeout_ms", b"100m")
write("fuzz_grpc", "timeout_max", b"99999999H")
write("fuzz_grpc", "ctype", b"application/grpc+proto")
write("fuzz_grpc", "message", "model 'x': 100% \u00e9\n".encode())
# fuzz_graph: a byte-code (tests/fuzz/fuzz_graph.c's DESIGN). Header byte: bits 0-1 batch sizes
# less one, 2-3 precision (FP32, BF16, INT8), 4-5 input fill mode (raw, small ints, edge values);
# then the batch sizes, the graph inputs, the items, the outputs, the input bytes.
G_DT = {"FP32": 0, "INT64": 1, "FP16": 4, "BF16": 5, "FP64": 6, "INT32": 7, "INT8": 8,
        "UINT8": 9, "BOOL": 10}
G_DIM = {1: 0, 2: 1, 3: 2, 4: 3, 0: 4, 5: 7, 7: 9, 8: 10, 16: 11, 64: 14}
G_OPS = ["Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where", "Relu",
         "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Gelu", "Clip", "Sqrt", "Reciprocal", "Neg", "Abs",
         "Exp", "Log", "Identity", "Cast", "Softmax", "LogSoftmax", "LayerNormalization",
         "BatchNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ArgMax", "Gather",
         "Concat", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Identity2",
         "Constant", "Shape", "Dropout", "QuantizeLinear", "DequantizeLinear", "MatMulInteger",
         "QLinearMatMul", "DynamicQuantizeLinear"]
G_OPSET13 = 0
def g_shape(dims): return bytes([len(dims)] + [G_DIM[d] for d in dims])
def g_input(dt, dims, batch): return bytes([G_DT[dt], 1 if batch else 0]) + g_shape(dims)
def g_init(dt, dims, mode, data=b""): return bytes([len(G_OPS), mode, G_DT[dt]]) + g_shape(dims) + data
def g_node(op, picks, attrs=b"", nattr=0, f=0):
    return bytes([G_OPS.index(op), f, G_OPSET13]) + bytes(picks) + bytes([nattr]) + attrs
def g_prog(prec, fill, batches, inputs, items, data=b"", nout=1):
    h = fill << 4 | prec << 2 | (len(batches) - 1)
    return (bytes([h]) + bytes(b - 1 for b in batches) + bytes([len(inputs) - 1]) + b"".join(inputs) +
            bytes([len(items)]) + b"".join(items) + bytes([nout - 1] + [0] * nout) + data)
small = bytes(range(0, 40))
write("fuzz_graph", "mlp", g_prog(0, 1, [1, 3], [g_input("FP32", [2, 4], True)], [
    g_init("FP32", [4, 3], 1, small[:12]), g_init("FP32", [3], 1, small[:3]),
    g_node("Gemm", [2, 1, 0]), g_node("Relu", [0]), g_node("Softmax", [0])], small))
write("fuzz_graph", "mlp_int8", g_prog(2, 1, [2], [g_input("FP32", [2, 4], True)], [
    g_init("FP32", [4, 3], 1, bytes([5, 6, 0, 1, 2, 3, 8, 9, 10, 11, 12, 13])),
    g_node("MatMul", [1, 0]), g_node("Sigmoid", [0])], small))
write("fuzz_graph", "gather_ids", g_prog(0, 1, [1, 2, 4], [g_input("INT64", [2, 3], True)], [
    g_init("FP32", [5, 4], 1, small[:20]), g_node("Gather", [0, 1])], bytes([1, 4, 0xF9, 7, 2, 3])))
write("fuzz_graph", "shape_reshape", g_prog(1, 1, [2], [g_input("FP32", [2, 3, 4], True)], [
    g_node("Shape", [0]), g_node("Reshape", [1, 0]),
    g_node("Transpose", [0], bytes([0x01, 3, 3, 1, 0]), 1), g_node("Flatten", [0]),
    g_node("ReduceSum", [0, 0xFF])], small))
write("fuzz_graph", "layernorm", g_prog(0, 2, [1, 2], [g_input("FP32", [2, 4], True)], [
    g_init("FP32", [4], 2, bytes([1, 5, 3, 11])), g_init("FP32", [4], 1, small[:4]),
    g_node("LayerNormalization", [2, 1, 0]), g_node("ArgMax", [0])], small))
write("fuzz_graph", "quant", g_prog(0, 1, [2], [g_input("FP32", [2, 4], True)], [
    g_node("DynamicQuantizeLinear", [0]), g_init("INT8", [4, 3], 1, small[:12]),
    g_node("MatMulInteger", [3, 0, 0xFF, 0xFF]), g_node("Cast", [0], bytes([0x01, 1]), 1)], small))
write("fuzz_graph", "where_cast", g_prog(0, 0, [3], [g_input("FP32", [2, 3], True),
    g_input("BOOL", [3], False)], [g_node("Where", [0, 1, 1]),
    g_node("Cast", [0], bytes([0x01, 9]), 1), g_node("Concat", [0, 0], bytes([0x01, 1]), 1)], small))

# fuzz_payload: byte 0 flags (1 = parse with the zero key), then one entry (server/audit/payload.h):
# "TPUE" | format 1 | cipher | 0 0 | key id[8] | nonce[12] | u32 body_len | body (u32 header_len,
# header JSON, tensor bytes).
def payload_entry(header, tensors, cipher=0):
    h = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack("<I", len(h)) + h + tensors
    return (b"TPUE" + bytes([1, cipher, 0, 0]) + bytes(8) + bytes(12) + struct.pack("<I", len(body))
            + body + (bytes(16) if cipher else b""))
pin = f32s([0.5, 1.5, -2.0, 3.25])
pout = f32s([0.25, 0.75])
hdr = {"model": "fraud", "version": "3", "rows": 2,
       "inputs": [{"name": "num", "datatype": "FP32", "shape": [2, 2], "bytes": 16}],
       "outputs": [{"name": "score", "datatype": "FP32", "shape": [2, 1], "bytes": 8}]}
write("fuzz_payload", "clear", b"\x00" + payload_entry(hdr, pin + pout))
write("fuzz_payload", "sealed_no_key", b"\x00" + payload_entry(hdr, pin + pout, cipher=1))
write("fuzz_payload", "sealed_bad_tag", b"\x01" + payload_entry(hdr, pin + pout, cipher=1))
hdr2 = dict(hdr, inputs=[], outputs=[])
write("fuzz_payload", "empty", b"\x00" + payload_entry(hdr2, b""))

print("corpus written to", os.path.join(HERE, "corpus"))
