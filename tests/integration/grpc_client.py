#!/usr/bin/python3
"""The gRPC side of tests/integration/test_grpc.sh: stock grpcio clients against the real tpud.

usage: grpc_client.py SUITE --target 127.0.0.1:PORT --gen STUBS_DIR [options]

Suites (each against a tpud the driver started with the flags it needs):
  basic   plaintext h2c: health, metadata, repository index, ModelInfer (raw and typed contents,
          batches, 0 rows, both bundled models) checked against the HTTP endpoint and numpy,
          MatMul in FP32/BF16/INT8 against numpy, every error status, UNIMPLEMENTED, gzip
          refused, flow control with messages above the 64 KiB window, malformed calls on raw
          HTTP/2 (python3-h2), 320 calls from 8 threads and 300 issued at once on one channel
          while the framed protocol (tpuctl) keeps working on the same port.
  audit   (after `basic`, tpud stopped) the audit log holds one record per gRPC infer request,
          with its id, status, peer and digests.
  slow    (tpud with TPUD_ISA=ref --threads 1, so a big MatMul keeps the one pool thread busy):
          client deadline and cancellation of queued and running calls, counted CANCELLED /
          DEADLINE_EXCEEDED in /metrics; the server-side deadline from grpc-timeout (raw h2,
          which never resets the stream itself); SIGTERM drains a running gRPC call.
  limits  (tpud with --max-message-bytes 4096 --tokens): RESOURCE_EXHAUSTED, UNAUTHENTICATED,
          PERMISSION_DENIED, and an admin token unloading and loading a model.
  tls     (tpud with --tls-cert/--tls-key/--tls-client-ca): grpc.secure_channel with ALPN h2 and
          a client certificate; live, infer, NOT_FOUND, PERMISSION_DENIED, flow control, no
          client certificate refused, plaintext to the TLS port refused, tpuctl alongside.
  tls-audit  (after `tls`, tpud stopped) the certificate subject is the identity in the record.

Prints "ok: ..." / "FAIL: ..." lines; exits 1 when anything failed.
"""
import argparse
import hashlib
import json
import math
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

FAILS = 0
LOCK = threading.Lock()


def ok(msg):
    with LOCK:
        print("ok: " + msg, flush=True)


def fail(msg):
    global FAILS
    with LOCK:
        FAILS += 1
        print("FAIL: " + msg, flush=True)


def note(msg):
    with LOCK:
        print("note: " + msg, flush=True)


def check(cond, what, detail=""):
    if cond:
        ok(what)
    else:
        fail(what + (": " + str(detail) if detail != "" else ""))
    return cond


def step(fn):
    """Runs one test function; an unexpected exception is a failure, not the end of the suite."""
    try:
        fn()
    except NoServer as e:
        fail(f"{fn.__name__}: {e}")
    except Exception as e:  # noqa: BLE001
        fail(f"{fn.__name__}: unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}")


# ---------------------------------------------------------------- set-up

ARGS = None
grpc = inf = infg = tpd = tpdg = None


def load_stubs(gen):
    global grpc, inf, infg, tpd, tpdg
    sys.path.insert(0, gen)
    import grpc as g  # noqa: E402
    import grpc_service_pb2 as a  # noqa: E402
    import grpc_service_pb2_grpc as b  # noqa: E402
    import tpud_pb2 as c  # noqa: E402
    import tpud_pb2_grpc as d  # noqa: E402
    grpc, inf, infg, tpd, tpdg = g, a, b, c, d


def channel_options():
    return [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
            ("grpc.enable_http_proxy", 0), ("grpc.enable_retries", 0)]


def make_channel(tls=True, cert=True, wait=10.0):
    """A channel to --target; TLS with the CA (and the client certificate) when --tls-ca."""
    opts = channel_options()
    if ARGS.tls_ca and tls:
        ca = open(ARGS.tls_ca, "rb").read()
        key = chain = None
        if cert and ARGS.tls_cert:
            key, chain = open(ARGS.tls_key, "rb").read(), open(ARGS.tls_cert, "rb").read()
        creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                             certificate_chain=chain)
        opts.append(("grpc.ssl_target_name_override", "localhost"))
        ch = grpc.secure_channel(ARGS.target, creds, opts)
    else:
        ch = grpc.insecure_channel(ARGS.target, opts)
    if wait:
        try:
            grpc.channel_ready_future(ch).result(timeout=wait)
        except grpc.FutureTimeoutError:
            ch.close()
            raise NoServer(f"no {'TLS ' if ARGS.tls_ca and tls else ''}HTTP/2 connection to "
                           f"{ARGS.target} within {wait:.0f} s") from None
    return ch


class NoServer(Exception):
    pass


class Stubs:
    def __init__(self, ch):
        self.ch = ch
        self.inf = infg.GRPCInferenceServiceStub(ch)
        self.tpud = tpdg.TpudServiceStub(ch)


def md(token):
    return [("authorization", "Bearer " + token)] if token else None


def code_of(fn):
    """Runs fn; returns (grpc.StatusCode, details or response)."""
    try:
        return grpc.StatusCode.OK, fn()
    except grpc.RpcError as e:
        return e.code(), e.details()


def expect_code(what, want, fn):
    code, det = code_of(fn)
    if code == want:
        ok(f"{what}: {want.name} ({det if code != grpc.StatusCode.OK else 'answered'})")
        return True
    fail(f"{what}: want {want.name}, got {code.name}: {det}")
    return False


# ---------------------------------------------------------------- HTTP side

def http_ctx():
    if not ARGS.http.startswith("https:"):
        return None
    ctx = ssl.create_default_context(cafile=ARGS.tls_ca)
    if ARGS.tls_cert:
        ctx.load_cert_chain(ARGS.tls_cert, ARGS.tls_key)
    return ctx


OPENER = None


def http(path, body=None, token=None):
    """(status, bytes) of GET/POST ARGS.http + path; no proxies."""
    global OPENER
    if OPENER is None:
        handlers = [urllib.request.ProxyHandler({})]
        ctx = http_ctx()
        if ctx:
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        OPENER = urllib.request.build_opener(*handlers)
    req = urllib.request.Request(ARGS.http + path, data=body)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with OPENER.open(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_infer(model, name, x, token=None):
    """The HTTP endpoint's answer for rows x (float32 [n, k]): float32 array [n, ncols]."""
    body = json.dumps({"id": "http-ref", "inputs": [
        {"name": name, "shape": list(x.shape), "datatype": "FP32",
         "data": [float(v) for v in x.ravel()]}]}).encode()
    st, data = http(f"/v2/models/{model}/infer", body, token)
    if st != 200:
        raise RuntimeError(f"HTTP infer {model}: {st} {data[:300]!r}")
    out = json.loads(data)["outputs"][0]
    return np.array(out["data"], dtype=np.float64).astype(np.float32).reshape(out["shape"])


def metrics():
    """tpud_requests_total by code, from /metrics; "inflight": tpud_inflight_requests."""
    st, data = http("/metrics", token=ARGS.metrics_token)
    if st != 200:
        raise RuntimeError(f"/metrics: {st} {data[:200]!r}")
    out = {}
    for m in re.finditer(r'^tpud_requests_total\{code="([A-Z_]+)"\} (\d+)$', data.decode(), re.M):
        out[m.group(1)] = int(m.group(2))
    m = re.search(r"^tpud_inflight_requests (\d+)$", data.decode(), re.M)
    out["inflight"] = int(m.group(1)) if m else -1
    return out


# ---------------------------------------------------------------- requests and data

def infer_request(model, name, x, raw=True, rid="", version="", datatype="FP32", shape=None):
    r = inf.ModelInferRequest(model_name=model, model_version=version, id=rid)
    t = r.inputs.add()
    t.name = name
    t.datatype = datatype
    t.shape.extend(list(x.shape) if shape is None else shape)
    if raw:
        r.raw_input_contents.append(np.ascontiguousarray(x, dtype="<f4").tobytes())
    else:
        t.contents.fp32_contents.extend([float(v) for v in x.ravel()])
    return r


def decode_infer(resp, rows, ncols, out_name):
    """The single FP32 output of a ModelInferResponse; raises AssertionError on a bad shape."""
    assert len(resp.outputs) == 1, f"{len(resp.outputs)} outputs"
    o = resp.outputs[0]
    assert o.name == out_name and o.datatype == "FP32", f"output {o.name} {o.datatype}"
    assert list(o.shape) == [rows, ncols], f"shape {list(o.shape)}, want {[rows, ncols]}"
    assert len(resp.raw_output_contents) == 1, f"{len(resp.raw_output_contents)} raw outputs"
    raw = resp.raw_output_contents[0]
    assert len(raw) == rows * ncols * 4, f"{len(raw)} raw bytes, want {rows * ncols * 4}"
    return np.frombuffer(raw, dtype="<f4").reshape(rows, ncols)


def digits_data():
    x = np.frombuffer(open(os.path.join(ARGS.src, "tests/data/digits_x.u8"), "rb").read(),
                      dtype=np.uint8).reshape(-1, 64).astype(np.float32)
    pred = np.frombuffer(open(os.path.join(ARGS.src, "tests/data/digits_pred.u8"), "rb").read(),
                         dtype=np.uint8)
    return x, pred


def safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    base = 8 + n
    dt = {"F32": "<f4", "I8": "i1", "F16": "<f2", "BF16": None}
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[base + a:base + b], dtype=dt[v["dtype"]]).reshape(v["shape"])
    return out


def tensor(arr, dtype):
    t = tpd.Tensor(datatype=dtype)
    t.shape.extend(arr.shape)
    if dtype == "FP32":
        t.data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
    elif dtype == "INT8":
        t.data = np.ascontiguousarray(arr, dtype=np.int8).tobytes()
    elif dtype == "BF16":
        t.data = (np.ascontiguousarray(arr, dtype="<f4").view("<u4") >> 16).astype("<u2").tobytes()
    return t


def matmul_request(a, b, dtype):
    return tpd.MatMulRequest(a=tensor(a, dtype), b=tensor(b, dtype))


def matmul_result(resp, m, n, want_dtype):
    c = resp.c
    assert list(c.shape) == [m, n], f"c shape {list(c.shape)}"
    assert c.datatype == want_dtype, f"c datatype {c.datatype}"
    assert len(c.data) == m * n * 4, f"{len(c.data)} bytes"
    return np.frombuffer(c.data, dtype="<i4" if want_dtype == "INT32" else "<f4").reshape(m, n)


def systolic_cycles(r, c, m, k, n):
    return math.ceil(k / r) * math.ceil(n / c) * (r + (r - 1) + m + (c - 1))


def big_fp32(m, k, n, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def close_fp32(got, want, rtol=1e-4, atol=1e-4):
    return np.allclose(got, want, rtol=rtol, atol=atol)


def h2_call(path, headers=(), body=b"", timeout=30.0):
    """One request on a new cleartext HTTP/2 connection (python3-h2), for what stock gRPC
    clients never send; it never resets the stream itself. headers override the defaults (POST,
    application/grpc, te: trailers); body None sends none. Returns (HTTP status, grpc-status,
    grpc-message, response bytes); statuses are None when absent; raises on a stream reset."""
    import socket
    import h2.config
    import h2.connection
    import h2.events
    host, port = ARGS.target.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                             header_encoding="utf-8"))
    c.initiate_connection()
    hd = {":method": "POST", ":scheme": "http", ":authority": ARGS.target, ":path": path,
          "content-type": "application/grpc", "te": "trailers"}
    hd.update(dict(headers))
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, list(hd.items()), end_stream=body is None)
    if body is not None:
        c.send_data(sid, body, end_stream=True)
    sock.sendall(c.data_to_send())
    got, data, done = {}, b"", False
    try:
        while not done:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed before the answer")
            for ev in c.receive_data(chunk):
                if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    got.update(dict(ev.headers))
                elif isinstance(ev, h2.events.DataReceived):
                    data += ev.data
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    done = True
                elif isinstance(ev, h2.events.StreamReset):
                    raise RuntimeError(f"stream reset by the server (error {ev.error_code})")
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    raise RuntimeError(f"GOAWAY before the answer (error {ev.error_code})")
            sock.sendall(c.data_to_send())
    finally:
        sock.close()
    return (got.get(":status"), got.get("grpc-status"),
            urllib.parse.unquote(got.get("grpc-message", "")), data)


# ---------------------------------------------------------------- suite: basic

def basic():
    S = Stubs(make_channel())
    X, PRED = digits_data()

    def health():
        r = S.inf.ServerLive(inf.ServerLiveRequest(), timeout=10)
        check(r.live is True, "ServerLive: live", r)
        r = S.inf.ServerReady(inf.ServerReadyRequest(), timeout=10)
        check(r.ready is True, "ServerReady: ready", r)
        r = S.inf.ServerMetadata(inf.ServerMetadataRequest(), timeout=10)
        check(r.name == "tpud" and r.version and "tpud_matmul" in r.extensions,
              f"ServerMetadata: {r.name} {r.version} {list(r.extensions)}", r)
        r = S.inf.ModelReady(inf.ModelReadyRequest(name="digits"), timeout=10)
        check(r.ready is True, "ModelReady digits: ready", r)
        r = S.inf.ModelReady(inf.ModelReadyRequest(name="digits", version="1"), timeout=10)
        check(r.ready is True, "ModelReady digits version 1: ready", r)
        expect_code("ModelReady of an unknown model", grpc.StatusCode.NOT_FOUND,
                    lambda: S.inf.ModelReady(inf.ModelReadyRequest(name="nosuch"), timeout=10))

    def metadata():
        r = S.inf.ModelMetadata(inf.ModelMetadataRequest(name="digits"), timeout=10)
        i, o = r.inputs, r.outputs
        check(r.name == "digits" and list(r.versions) == ["1"] and len(i) == 1 and len(o) == 1
              and (i[0].name, i[0].datatype, list(i[0].shape)) == ("x", "FP32", [-1, 64])
              and (o[0].name, o[0].datatype, list(o[0].shape)) == ("probs", "FP32", [-1, 10]),
              "ModelMetadata digits: x FP32 [-1,64] -> probs FP32 [-1,10], versions ['1']", r)
        r = S.inf.ModelMetadata(inf.ModelMetadataRequest(name="matmul", version="1"), timeout=10)
        check(r.name == "matmul" and list(r.inputs[0].shape) == [-1, 256]
              and r.outputs[0].name == "c", "ModelMetadata matmul version 1", r)
        expect_code("ModelMetadata of an unknown model", grpc.StatusCode.NOT_FOUND,
                    lambda: S.inf.ModelMetadata(inf.ModelMetadataRequest(name="nosuch"),
                                                timeout=10))
        expect_code("ModelMetadata of an unknown version", grpc.StatusCode.NOT_FOUND,
                    lambda: S.inf.ModelMetadata(inf.ModelMetadataRequest(name="digits",
                                                                         version="9"),
                                                timeout=10))

    def repository_index():
        r = S.tpud.RepositoryIndex(tpd.RepositoryIndexRequest(), timeout=10)
        got = [(m.name, m.version, tpd.ModelState.Name(m.state)) for m in r.models]
        check(got == [("digits", "1", "MODEL_STATE_READY"), ("matmul", "1", "MODEL_STATE_READY")],
              "RepositoryIndex: digits 1 and matmul 1 READY, sorted", got)
        r = S.tpud.RepositoryIndex(tpd.RepositoryIndexRequest(ready_only=True), timeout=10)
        check(len(r.models) == 2, "RepositoryIndex ready_only", r)

    def infer_digits():
        x = X[:1]
        want = http_infer("digits", "x", x)
        r_raw = S.inf.ModelInfer(infer_request("digits", "x", x, rid="g-raw"), timeout=10)
        got_raw = decode_infer(r_raw, 1, 10, "probs")
        check(r_raw.model_name == "digits" and r_raw.model_version == "1" and r_raw.id == "g-raw",
              "ModelInfer: model name, version and id echoed",
              (r_raw.model_name, r_raw.model_version, r_raw.id))
        check(np.max(np.abs(got_raw - want)) <= 1e-6,
              f"ModelInfer raw_input_contents = HTTP answer (max diff "
              f"{np.max(np.abs(got_raw - want)):.2g}), argmax {int(np.argmax(got_raw))} = "
              f"label {PRED[0]}", (got_raw, want))
        check(int(np.argmax(got_raw)) == int(PRED[0]), "digit classified as scikit-learn does")
        r_typed = S.inf.ModelInfer(infer_request("digits", "x", x, raw=False, rid="g-typed"),
                                   timeout=10)
        got_typed = decode_infer(r_typed, 1, 10, "probs")
        check(np.max(np.abs(got_typed - want)) <= 1e-6 and np.array_equal(got_typed, got_raw),
              "ModelInfer typed fp32_contents = raw = HTTP answer", (got_typed, got_raw))
        # a batch of several rows, raw and typed
        xb = X[10:17]
        want = http_infer("digits", "x", xb)
        r = S.inf.ModelInfer(infer_request("digits", "x", xb, rid="g-batch"), timeout=10)
        got = decode_infer(r, 7, 10, "probs")
        check(np.max(np.abs(got - want)) <= 1e-6,
              f"ModelInfer batch of 7 rows: 10 floats a row, = HTTP (max diff "
              f"{np.max(np.abs(got - want)):.2g})", (got, want))
        check(list(np.argmax(got, axis=1)) == list(PRED[10:17]),
              "batch of 7: every digit classified as scikit-learn does",
              (list(np.argmax(got, axis=1)), list(PRED[10:17])))
        r = S.inf.ModelInfer(infer_request("digits", "x", xb, raw=False), timeout=10)
        check(np.array_equal(decode_infer(r, 7, 10, "probs"), got), "typed batch of 7 = raw")
        # explicit version and requested output
        q = infer_request("digits", "x", x, version="1")
        q.outputs.add().name = "probs"
        r = S.inf.ModelInfer(q, timeout=10)
        check(np.array_equal(decode_infer(r, 1, 10, "probs"), got_raw),
              "ModelInfer with model_version 1 and outputs [probs]")
        # zero rows: an empty answer
        x0 = np.zeros((0, 64), np.float32)
        code, r = code_of(lambda: S.inf.ModelInfer(infer_request("digits", "x", x0), timeout=10))
        check(code == grpc.StatusCode.OK and list(r.outputs[0].shape) == [0, 10]
              and len(r.raw_output_contents) == 1 and len(r.raw_output_contents[0]) == 0,
              "ModelInfer of 0 rows: OK, shape [0,10], empty raw output", (code, r))

    def infer_matmul_model():
        rng = np.random.default_rng(7)
        x = rng.standard_normal((5, 256)).astype(np.float32)
        want = http_infer("matmul", "a", x)
        r = S.inf.ModelInfer(infer_request("matmul", "a", x, rid="g-mm"), timeout=10)
        got = decode_infer(r, 5, 256, "c")
        rel = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))
        check(rel <= 1e-6, f"int8 matmul model over gRPC = HTTP (max rel diff {rel:.2g})")
        w = safetensors(os.path.join(ARGS.src, "models/matmul/1/model.safetensors"))
        wq = w["dense.weight"].astype(np.float64)
        scale = w["dense.weight_scale"].astype(np.float64).reshape(-1)
        wf = wq * scale[:, None]
        ref = x.astype(np.float64) @ wf.T
        # symmetric per-row int8 activations: error per element <= s/2, s = max|x| / 127
        s = np.max(np.abs(x), axis=1, keepdims=True) / 127.0
        bound = (s / 2) * np.sum(np.abs(wf), axis=1)[None, :] * 1.05 + 1e-4
        err = np.abs(got - ref)
        check(np.all(err <= bound),
              f"int8 matmul model within the quantization bound of numpy's x·Wᵀ "
              f"(max err {np.max(err):.3g}, max bound {np.max(bound):.3g})")

    def matmul():
        rng = np.random.default_rng(3)
        m, k, n = 17, 33, 9
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        r = S.tpud.MatMul(matmul_request(a, b, "FP32"), timeout=10)
        c = matmul_result(r, m, n, "FP32")
        check(close_fp32(c, a @ b), "MatMul FP32 17x33x9 = numpy", np.max(np.abs(c - a @ b)))
        want_cycles = systolic_cycles(r.systolic_rows, r.systolic_cols, m, k, n)
        check(r.systolic_rows > 0 and r.systolic_cycles == want_cycles
              and 0 < r.systolic_utilization <= 1,
              f"MatMul systolic model: {r.systolic_rows}x{r.systolic_cols} array, "
              f"{r.systolic_cycles} cycles, utilization {r.systolic_utilization:.3f}",
              (r.systolic_cycles, want_cycles))
        ai = rng.integers(-128, 128, (m, k)).astype(np.int8)
        bi = rng.integers(-128, 128, (k, n)).astype(np.int8)
        r = S.tpud.MatMul(matmul_request(ai, bi, "INT8"), timeout=10)
        c = matmul_result(r, m, n, "INT32")
        check(np.array_equal(c, ai.astype(np.int32) @ bi.astype(np.int32)),
              "MatMul INT8 -> INT32 = numpy, exactly")
        ab = (rng.integers(-16, 17, (m, k)) / 2).astype(np.float32)  # exact in bf16
        bb = (rng.integers(-16, 17, (k, n)) / 2).astype(np.float32)
        r = S.tpud.MatMul(matmul_request(ab, bb, "BF16"), timeout=10)
        c = matmul_result(r, m, n, "FP32")
        check(close_fp32(c, ab @ bb, 1e-3, 1e-3), "MatMul BF16 -> FP32 = numpy")
        # errors
        expect_code("MatMul with K mismatch", grpc.StatusCode.INVALID_ARGUMENT,
                    lambda: S.tpud.MatMul(matmul_request(a, b[:-1], "FP32"), timeout=10))
        q = matmul_request(a, b, "FP32")
        q.b.datatype = "INT8"
        expect_code("MatMul with mixed datatypes", grpc.StatusCode.INVALID_ARGUMENT,
                    lambda: S.tpud.MatMul(q, timeout=10))
        q = matmul_request(a, b, "FP32")
        q.a.data = q.a.data[:-4]
        expect_code("MatMul with short data", grpc.StatusCode.INVALID_ARGUMENT,
                    lambda: S.tpud.MatMul(q, timeout=10))
        expect_code("MatMul without b", grpc.StatusCode.INVALID_ARGUMENT,
                    lambda: S.tpud.MatMul(tpd.MatMulRequest(a=tensor(a, "FP32")), timeout=10))

    def flow_control():
        # Messages well above HTTP/2's 64 KiB initial window, in both directions.
        a, b = big_fp32(256, 512, 384, seed=5)  # 512 KiB + 768 KiB in, 384 KiB out
        t0 = time.monotonic()
        r = S.tpud.MatMul(matmul_request(a, b, "FP32"), timeout=30)
        c = matmul_result(r, 256, 384, "FP32")
        check(close_fp32(c, a @ b, 1e-3, 1e-3),
              f"MatMul 256x512x384 FP32 (1.25 MiB request, 384 KiB answer) = numpy "
              f"({time.monotonic() - t0:.2f} s)")
        xb = np.tile(X[:64], (4, 1))  # 256 rows, 64 KiB in
        r = S.inf.ModelInfer(infer_request("matmul", "a", np.tile(xb, (1, 4))), timeout=30)
        got = decode_infer(r, 256, 256, "c")  # 256 KiB out
        check(got.shape == (256, 256), "ModelInfer matmul 256 rows: 256 KiB answer")

    def errors():
        x = X[:1]
        expect_code("ModelInfer unknown model", grpc.StatusCode.NOT_FOUND,
                    lambda: S.inf.ModelInfer(infer_request("nosuch", "x", x, rid="g-nf"),
                                             timeout=10))
        expect_code("ModelInfer unknown version", grpc.StatusCode.NOT_FOUND,
                    lambda: S.inf.ModelInfer(infer_request("digits", "x", x, version="9"),
                                             timeout=10))
        bad = {
            "wrong shape [1,63]": infer_request("digits", "x", X[:1, :63], rid="g-bad-shape"),
            "wrong datatype FP64": infer_request("digits", "x", x, datatype="FP64"),
            "wrong datatype INT8": infer_request("digits", "x", x, datatype="INT8"),
            "wrong input name": infer_request("digits", "y", x),
            "raw byte length 252 for [1,64]": infer_request("digits", "x", X[:1, :63],
                                                             shape=[1, 64]),
            "rank 1 shape": infer_request("digits", "x", x, shape=[64]),
            "negative dimension": infer_request("digits", "x", x, shape=[-1, 64]),
            "typed count 63 for [1,64]": infer_request("digits", "x", X[:1, :63], raw=False,
                                                       shape=[1, 64]),
        }
        q = infer_request("digits", "x", x)
        q.raw_input_contents[0] = q.raw_input_contents[0][:-1]
        bad["raw bytes 255 for [1,64]"] = q
        q = infer_request("digits", "x", x)
        q.inputs[0].contents.fp32_contents.extend([0.0] * 64)
        bad["raw and typed contents both"] = q
        q = infer_request("digits", "x", x)
        q.outputs.add().name = "nope"
        bad["unknown requested output"] = q
        q = infer_request("digits", "x", x)
        q.inputs.add().CopyFrom(q.inputs[0])
        q.raw_input_contents.append(q.raw_input_contents[0])
        bad["two inputs"] = q
        bad["no inputs"] = inf.ModelInferRequest(model_name="digits")
        for what, q in bad.items():
            expect_code(f"ModelInfer {what}", grpc.StatusCode.INVALID_ARGUMENT,
                        lambda q=q: S.inf.ModelInfer(q, timeout=10))
        # methods the server does not have
        for path in ("/inference.GRPCInferenceService/NoSuch", "/tpud.TpudService/NoSuch",
                     "/no.Such/ServerLive"):
            call = S.ch.unary_unary(path, request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
            expect_code(f"unknown method {path}", grpc.StatusCode.UNIMPLEMENTED,
                        lambda: call(b"", timeout=10))
        # a payload that is not the method's message
        call = S.ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
        expect_code("ModelInfer with a payload that is not protobuf",
                    grpc.StatusCode.INVALID_ARGUMENT, lambda: call(b"\xff\xff\xff\xff", timeout=10))
        # compressed messages: tpud only speaks identity
        expect_code("ModelInfer with grpc-encoding gzip", grpc.StatusCode.UNIMPLEMENTED,
                    lambda: S.inf.ModelInfer(infer_request("digits", "x", x), timeout=10,
                                             compression=grpc.Compression.Gzip))
        r = S.inf.ServerLive(inf.ServerLiveRequest(), timeout=10)
        check(r.live, "the channel still serves after every error")

    def concurrency():
        refs_x = X[100:116]
        refs = [http_infer("digits", "x", refs_x[i:i + 1]) for i in range(16)]
        nthreads, per = 8, 40
        bad, errs = [], []

        def worker(t):
            for i in range(per):
                j = (t * per + i) % 16
                try:
                    r = S.inf.ModelInfer(infer_request("digits", "x", refs_x[j:j + 1],
                                                       rid=f"c-{t}-{i}"), timeout=20)
                    got = decode_infer(r, 1, 10, "probs")
                    if r.id != f"c-{t}-{i}" or np.max(np.abs(got - refs[j])) > 1e-6:
                        bad.append((t, i, r.id, np.max(np.abs(got - refs[j]))))
                except grpc.RpcError as e:
                    errs.append((t, i, e.code().name, e.details()))
                except AssertionError as e:
                    bad.append((t, i, str(e)))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        # the framed protocol on the same port, meanwhile
        framed = []
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32",
                                       "data": [float(v) for v in refs_x[0]]}]})
        while any(th.is_alive() for th in threads) or not framed:
            p = subprocess.run([ARGS.tpuctl, "--addr", ARGS.target, "--timeout", "10000",
                                "health"], capture_output=True, text=True)
            framed.append(("health", p.returncode, p.stdout.strip(), p.stderr.strip()))
            p = subprocess.run([ARGS.tpuctl, "--addr", ARGS.target, "--timeout", "10000",
                                "infer", "digits", "--data", body], capture_output=True, text=True)
            ans = None
            try:
                ans = np.array(json.loads(p.stdout)["outputs"][0]["data"], np.float32)
            except (ValueError, KeyError, IndexError):
                pass
            good = ans is not None and np.max(np.abs(ans - refs[0].ravel())) <= 1e-6
            framed.append(("infer", 0 if p.returncode == 0 and good else 1, p.stdout[:200],
                           p.stderr.strip()))
        for th in threads:
            th.join()
        dt = time.monotonic() - t0
        n = nthreads * per
        check(not errs and not bad,
              f"{n} ModelInfer calls from {nthreads} threads on one channel: all OK and equal "
              f"to the HTTP answers ({dt:.2f} s, {n / dt:.0f}/s)",
              f"{len(errs)} errors {errs[:3]}, {len(bad)} wrong {bad[:3]}")
        fb = [f for f in framed if f[1] != 0 or (f[0] == "health" and f[2] != "ready")]
        check(not fb, f"{len(framed)} framed-protocol calls (tpuctl health/infer) on the same "
              "port meanwhile: all OK", fb[:3])

    def wire():
        # What stock clients never send (raw HTTP/2, a connection per case): each is answered
        # with a grpc-status (never a hang or a reset), and the server keeps serving.
        live = b"\x00\x00\x00\x00\x00"  # an empty ServerLiveRequest
        cases = [  # what, headers, body, (HTTP status or None, grpc-status or "error")
            ("application/grpc+proto", [("content-type", "application/grpc+proto")], live,
             ("200", "0")),
            ("GET", [(":method", "GET")], None, (None, "error")),
            ("content-type application/json", [("content-type", "application/json")], live,
             ("415", "error")),
            ("grpc-timeout '5x'", [("grpc-timeout", "5x")], live, (None, "error")),
            ("grpc-timeout 10S", [("grpc-timeout", "10S")], live, ("200", "0")),
            ("no body", [], None, (None, "error")),
            ("compressed flag without grpc-encoding", [], b"\x01" + live[1:], (None, "error")),
            ("prefix announcing 16 bytes, 3 sent", [], b"\x00\x00\x00\x00\x10abc",
             (None, "error")),
            ("two messages on a unary call", [], live + live, (None, "error")),
        ]
        for what, hdrs, body, (want_http, want_grpc) in cases:
            try:
                st, gs, gm, _ = h2_call("/inference.GRPCInferenceService/ServerLive", hdrs, body)
            except (OSError, RuntimeError) as e:
                fail(f"h2 {what}: {e}")
                continue
            good = gs is not None and (want_http is None or st == want_http) and (
                gs == want_grpc if want_grpc != "error" else gs != "0")
            check(good, f"h2 {what}: :status {st}, grpc-status {gs} {gm[:90]}",
                  f"want {want_http or 'any'} / {want_grpc}")
        check(S.inf.ServerLive(inf.ServerLiveRequest(), timeout=10).live,
              "the server still serves after the malformed calls")

    def many_streams():
        # More calls at once than the server's concurrent-stream limit (100 by default): the
        # client queues them behind SETTINGS_MAX_CONCURRENT_STREAMS; every one must answer.
        ref = http_infer("digits", "x", X[200:201])
        q = infer_request("digits", "x", X[200:201])
        t0 = time.monotonic()
        fs = [S.inf.ModelInfer.future(q, timeout=30) for _ in range(300)]
        codes, wrong, diff = {}, 0, 0.0
        for f in fs:
            code, r = code_of(lambda f=f: f.result())
            codes[code.name] = codes.get(code.name, 0) + 1
            if code == grpc.StatusCode.OK:
                d = float(np.max(np.abs(decode_infer(r, 1, 10, "probs") - ref)))
                diff = max(diff, d)
                wrong += d > 1e-6
        check(codes == {"OK": 300} and not wrong,
              f"300 ModelInfer calls issued at once on one channel: all OK and equal to the "
              f"HTTP answer (max diff {diff:.2g}, {time.monotonic() - t0:.2f} s)",
              f"{codes}, {wrong} differ by more than 1e-6")

    for fn in (health, metadata, repository_index, infer_digits, infer_matmul_model, matmul,
               flow_control, errors, wire, concurrency, many_streams):
        step(fn)
    S.ch.close()


def audit():
    recs = [json.loads(line) for line in open(ARGS.audit_log)]
    reqs = [r for r in recs if r.get("kind") == "request"]
    by_id = {}
    for r in reqs:
        by_id.setdefault(r.get("request_id"), []).append(r)
    peer = re.compile(r"^127\.0\.0\.1:\d+$")
    cids = [f"c-{t}-{i}" for t in range(8) for i in range(40)]
    missing = [i for i in cids if i not in by_id]
    dup = [i for i in cids if len(by_id.get(i, [])) > 1]
    badr = [by_id[i][0] for i in cids if i in by_id and not (
        by_id[i][0]["status"] == "OK" and by_id[i][0]["model"] == "digits"
        and by_id[i][0]["version"] == "1" and peer.match(by_id[i][0]["client"]))]
    check(not missing and not dup and not badr,
          f"audit: one OK record per concurrent gRPC infer request ({len(cids)}), client = peer "
          "address", f"missing {missing[:5]} duplicated {dup[:5]} wrong {badr[:2]}")
    X, _ = digits_data()
    want_in = hashlib.sha256(np.ascontiguousarray(X[:1], "<f4").tobytes()).hexdigest()
    for rid in ("g-raw", "g-typed"):
        rr = by_id.get(rid, [])
        check(len(rr) == 1 and rr[0]["status"] == "OK" and rr[0]["input_sha256"] == want_in
              and re.match("^[0-9a-f]{64}$", rr[0]["output_sha256"]) and rr[0]["bucket"] >= 1,
              f"audit: record of {rid} with the input's SHA-256", rr)
    if by_id.get("g-raw") and by_id.get("g-typed"):
        check(by_id["g-raw"][0]["output_sha256"] == by_id["g-typed"][0]["output_sha256"],
              "audit: raw and typed requests of the same input have the same output digest")
    for rid, status, model in (("g-batch", "OK", "digits"), ("g-mm", "OK", "matmul"),
                               ("g-nf", "NOT_FOUND", "nosuch"),
                               ("g-bad-shape", "INVALID_ARGUMENT", "digits")):
        rr = by_id.get(rid, [])
        check(len(rr) == 1 and rr[0]["status"] == status and rr[0]["model"] == model,
              f"audit: one {status} record for {rid}", rr)


# ---------------------------------------------------------------- suite: slow

def slow():
    try:
        slow_suite()
    finally:  # the driver waits for tpud to exit after this suite, whatever happened
        if ARGS.pid and not SIGNALLED:
            os.kill(ARGS.pid, signal.SIGTERM)


SIGNALLED = False


def slow_suite():
    S = Stubs(make_channel())
    # The blocker: a square FP32 MatMul of about a second or more on the ref kernels and one
    # thread (1024 in a Release build; smaller under sanitizers, which are many times slower).
    t0 = time.monotonic()
    S.tpud.MatMul(matmul_request(*big_fp32(512, 512, 512), "FP32"), timeout=120)
    t512 = time.monotonic() - t0
    n = 512 if t512 >= 1.0 else 768 if t512 * 3.4 >= 1.0 else 1024
    ok(f"MatMul 512x512x512 took {t512:.2f} s: the blocker is {n}x{n}x{n}")
    big = big_fp32(n, n, n, seed=11)
    small = big_fp32(4, 4, 4, seed=12)
    big_q = matmul_request(big[0], big[1], "FP32")
    small_q = matmul_request(small[0], small[1], "FP32")
    X, _ = digits_data()

    def wait_metrics(pred, timeout=15.0):
        t0 = time.monotonic()
        m = metrics()
        while not pred(m) and time.monotonic() - t0 < timeout:
            time.sleep(0.05)
            m = metrics()
        return m

    def wait_settled(pred):
        """Metrics once pred holds, or once nothing has been in compute for half a second."""
        t0 = time.monotonic()
        idle_since = None
        while True:
            m = metrics()
            if pred(m) or time.monotonic() - t0 > 60:
                return m
            if m["inflight"] == 0:
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 0.5:
                    return m
            else:
                idle_since = None
            time.sleep(0.05)

    def start_blocker():
        """A big MatMul, once the server has it in compute (the one pool thread is busy)."""
        f = S.tpud.MatMul.future(big_q, timeout=60)
        m = wait_metrics(lambda m: m["inflight"] >= 1 or f.done())
        if m["inflight"] < 1:
            note(f"the big MatMul never showed in tpud_inflight_requests (done: {f.done()})")
        time.sleep(0.1)
        return f

    def deadline_and_cancel():
        base = metrics()
        t0 = time.monotonic()
        blocker = start_blocker()
        code, det = code_of(lambda: S.tpud.MatMul(small_q, timeout=0.05))
        check(code == grpc.StatusCode.DEADLINE_EXCEEDED,
              "MatMul queued behind a slow one with a 50 ms deadline: DEADLINE_EXCEEDED",
              f"{code.name}: {det}")
        queued = S.tpud.MatMul.future(small_q, timeout=60)
        time.sleep(0.1)
        check(queued.cancel() and queued.cancelled(), "a queued MatMul cancelled by the client")
        # the I/O side is not blocked by the busy pool
        r = S.inf.ServerLive(inf.ServerLiveRequest(), timeout=5)
        check(r.live, "ServerLive answers while the MatMul pool is busy")
        r = S.inf.ModelInfer(infer_request("digits", "x", X[:1]), timeout=10)
        decode_infer(r, 1, 10, "probs")
        ok("ModelInfer answers while the MatMul pool is busy")
        code, r = code_of(lambda: blocker.result(timeout=60))
        dt = time.monotonic() - t0
        if check(code == grpc.StatusCode.OK, f"the slow MatMul {n}x{n}x{n} answered ({dt:.1f} s)",
                 f"{code.name}: {r}"):
            c = matmul_result(r, n, n, "FP32")
            rows, cols = slice(0, n, 97), slice(0, n, 89)
            check(close_fp32(c[rows, cols], big[0][rows] @ big[1][:, cols], 1e-3, 1e-3),
                  "slow MatMul result = numpy (sampled)")
        if dt < 0.5:
            note(f"the slow MatMul took only {dt:.2f} s: the queued calls may not have queued")
        m = wait_settled(lambda m: m.get("CANCELLED", 0) >= base.get("CANCELLED", 0) + 1 and
                         m.get("CANCELLED", 0) + m.get("DEADLINE_EXCEEDED", 0) >=
                         base.get("CANCELLED", 0) + base.get("DEADLINE_EXCEEDED", 0) + 2)
        dc = m.get("CANCELLED", 0) - base.get("CANCELLED", 0)
        dd = m.get("DEADLINE_EXCEEDED", 0) - base.get("DEADLINE_EXCEEDED", 0)
        check(dc >= 1 and dc + dd >= 2,
              f"/metrics: the cancelled and the expired queued calls counted "
              f"(CANCELLED +{dc}, DEADLINE_EXCEEDED +{dd})", m)

        # cancel a call while it computes: the reset arrives before the answer
        base = metrics()
        running = start_blocker()
        check(running.cancel(), "a running MatMul cancelled by the client")
        m = wait_settled(lambda m: m.get("CANCELLED", 0) > base.get("CANCELLED", 0))
        dc = m.get("CANCELLED", 0) - base.get("CANCELLED", 0)
        check(dc == 1, f"/metrics: the MatMul reset while computing counted CANCELLED (+{dc})",
              (base, m))
        check(m.get("OK", 0) == base.get("OK", 0),
              "/metrics: ... and not also OK", (base.get("OK"), m.get("OK")))
        r = S.tpud.MatMul(small_q, timeout=30)
        check(close_fp32(matmul_result(r, 4, 4, "FP32"), small[0] @ small[1]),
              "the server keeps serving MatMul after the cancellations")

    def server_deadline():
        # grpc-timeout alone (a raw HTTP/2 client that never resets the stream): the server
        # itself must answer DEADLINE_EXCEEDED.
        body = small_q.SerializeToString()
        base = metrics()
        blocker = start_blocker()
        t0 = time.monotonic()
        try:
            st, gs, gm, _ = h2_call("/tpud.TpudService/MatMul", [("grpc-timeout", "100m")],
                                    b"\x00" + struct.pack(">I", len(body)) + body, timeout=120)
        except (OSError, RuntimeError) as e:
            st, gs, gm = None, None, str(e)
        dt = time.monotonic() - t0
        check(gs == "4", f"grpc-timeout 100m on a queued MatMul (raw HTTP/2, no reset): "
              f"grpc-status 4 DEADLINE_EXCEEDED from the server after {dt:.2f} s ({gm})",
              f":status {st} grpc-status {gs} {gm}")
        if gs == "4" and dt > 1.0:
            note(f"the expired call was answered {dt:.1f} s after its 100 ms deadline: when the "
                 "MatMul pool reached it, not when the deadline passed")
        code, r = code_of(lambda: blocker.result(timeout=60))
        check(code == grpc.StatusCode.OK, "the slow MatMul next to it answered", code)
        m = wait_settled(lambda m: m.get("DEADLINE_EXCEEDED", 0) > base.get("DEADLINE_EXCEEDED", 0))
        check(m.get("DEADLINE_EXCEEDED", 0) == base.get("DEADLINE_EXCEEDED", 0) + 1,
              "/metrics: counted DEADLINE_EXCEEDED", (base, m))

    def drain():
        if not ARGS.pid:
            return
        running = start_blocker()
        global SIGNALLED
        os.kill(ARGS.pid, signal.SIGTERM)
        SIGNALLED = True
        code, r = code_of(lambda: running.result(timeout=60))
        check(code == grpc.StatusCode.OK, "SIGTERM: the running gRPC MatMul finishes (drain)",
              f"{code.name}: {r if code != grpc.StatusCode.OK else ''}")
        code, det = code_of(lambda: S.inf.ModelInfer(infer_request("digits", "x", X[:1]),
                                                     timeout=5))
        check(code != grpc.StatusCode.OK, f"after SIGTERM a new call is refused ({code.name})",
              det)

    for fn in (deadline_and_cancel, server_deadline, drain):
        step(fn)
    S.ch.close()


# ---------------------------------------------------------------- suite: limits

def limits():
    S = Stubs(make_channel())
    X, _ = digits_data()
    A, I = ARGS.admin_token, ARGS.infer_token
    x = X[:1]

    def auth():
        r = S.inf.ServerLive(inf.ServerLiveRequest(), timeout=10)
        check(r.live, "ServerLive needs no token (probes)")
        expect_code("ModelInfer without a token", grpc.StatusCode.UNAUTHENTICATED,
                    lambda: S.inf.ModelInfer(infer_request("digits", "x", x), timeout=10))
        expect_code("ModelInfer with a wrong token", grpc.StatusCode.UNAUTHENTICATED,
                    lambda: S.inf.ModelInfer(infer_request("digits", "x", x), timeout=10,
                                             metadata=md("wrong-" + I)))
        expect_code("ModelInfer with 'authorization: Basic ...'", grpc.StatusCode.UNAUTHENTICATED,
                    lambda: S.inf.ModelInfer(infer_request("digits", "x", x), timeout=10,
                                             metadata=[("authorization", "Basic " + I)]))
        expect_code("RepositoryIndex without a token", grpc.StatusCode.UNAUTHENTICATED,
                    lambda: S.tpud.RepositoryIndex(tpd.RepositoryIndexRequest(), timeout=10))
        r = S.inf.ModelInfer(infer_request("digits", "x", x), timeout=10, metadata=md(I))
        decode_infer(r, 1, 10, "probs")
        ok("ModelInfer with the infer token")
        expect_code("ModelUnload with the infer token", grpc.StatusCode.PERMISSION_DENIED,
                    lambda: S.tpud.ModelUnload(tpd.ModelUnloadRequest(name="matmul"), timeout=10,
                                               metadata=md(I)))
        expect_code("ModelLoad with the infer token", grpc.StatusCode.PERMISSION_DENIED,
                    lambda: S.tpud.ModelLoad(tpd.ModelLoadRequest(name="matmul"), timeout=10,
                                             metadata=md(I)))
        expect_code("ModelUnload without a token", grpc.StatusCode.UNAUTHENTICATED,
                    lambda: S.tpud.ModelUnload(tpd.ModelUnloadRequest(name="matmul"), timeout=10))
        r = S.tpud.ModelUnload(tpd.ModelUnloadRequest(name="matmul"), timeout=30, metadata=md(A))
        check(r.name == "matmul" and list(r.versions) == ["1"],
              "ModelUnload matmul with the admin token: versions ['1']", r)
        r = S.inf.ModelReady(inf.ModelReadyRequest(name="matmul"), timeout=10, metadata=md(I))
        check(not r.ready, "ModelReady matmul after the unload: not ready", r)
        expect_code("ModelInfer on the unloaded model", grpc.StatusCode.NOT_FOUND,
                    lambda: S.inf.ModelInfer(infer_request("matmul", "a", np.zeros((1, 256),
                                                                                   np.float32)),
                                             timeout=10, metadata=md(I)))
        r = S.tpud.ModelLoad(tpd.ModelLoadRequest(name="matmul"), timeout=30, metadata=md(A))
        check(r.name == "matmul" and list(r.versions) == ["1"],
              "ModelLoad matmul with the admin token: versions ['1']", r)
        r = S.inf.ModelReady(inf.ModelReadyRequest(name="matmul"), timeout=10, metadata=md(I))
        check(r.ready, "ModelReady matmul after the load: ready", r)
        expect_code("ModelLoad of a model not in the repository", grpc.StatusCode.NOT_FOUND,
                    lambda: S.tpud.ModelLoad(tpd.ModelLoadRequest(name="nosuch"), timeout=30,
                                             metadata=md(A)))

    def sizes():
        n = ARGS.max_message_bytes
        rows = n // 256 + 1  # just above the limit in raw bytes
        code, det = code_of(lambda: S.inf.ModelInfer(infer_request("digits", "x", X[:rows]),
                                                     timeout=10, metadata=md(I)))
        check(code == grpc.StatusCode.RESOURCE_EXHAUSTED,
              f"ModelInfer of {rows} rows ({rows * 256} raw bytes) above --max-message-bytes "
              f"{n}: RESOURCE_EXHAUSTED ({det})", f"{code.name}: {det}")
        a, b = big_fp32(64, 64, 64)
        expect_code(f"MatMul 64x64x64 (32 KiB) above --max-message-bytes {n}",
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    lambda: S.tpud.MatMul(matmul_request(a, b, "FP32"), timeout=10,
                                          metadata=md(I)))
        big = infer_request("digits", "x", np.tile(X[:1], (4096, 1)))  # 1 MiB
        expect_code("ModelInfer of 1 MiB", grpc.StatusCode.RESOURCE_EXHAUSTED,
                    lambda: S.inf.ModelInfer(big, timeout=10, metadata=md(I)))
        r = S.inf.ModelInfer(infer_request("digits", "x", X[:8]), timeout=10, metadata=md(I))
        decode_infer(r, 8, 10, "probs")
        ok("a request under the limit on the same channel still answers")

    def repeated_authorization():
        # With tokens configured, two authorization values are refused whichever comes first
        # (a valid admin token first must not count, nor last), and on HTTP too: a proxy that
        # checked one of them and tpud acting on another would be a bypass.
        for name, pair in (("admin token first", [A, "wrong-" + I]),
                           ("admin token last", ["wrong-" + I, A]),
                           ("the same token twice", [I, I])):
            expect_code(f"ModelUnload with two authorization values ({name})",
                        grpc.StatusCode.INVALID_ARGUMENT,
                        lambda: S.tpud.ModelUnload(tpd.ModelUnloadRequest(name="matmul"),
                                                   timeout=10,
                                                   metadata=[("authorization", "Bearer " + t)
                                                             for t in pair]))
        code, det = code_of(lambda: S.inf.ModelInfer(
            infer_request("digits", "x", x), timeout=10,
            metadata=[("authorization", "Bearer " + I), ("authorization", "Bearer " + I)]))
        check(code == grpc.StatusCode.INVALID_ARGUMENT and
              "carries 2 authorization values" in det,
              "ModelInfer with the infer token twice: INVALID_ARGUMENT, saying why",
              f"{code.name}: {det}")
        u = urllib.parse.urlparse(ARGS.http)
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        try:
            s.sendall(("GET /v2/debug/config HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       "Authorization: Bearer %s\r\nAuthorization: Bearer wrong\r\n\r\n"
                       % A).encode())
            resp = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                resp += d
        finally:
            s.close()
        check(resp.startswith(b"HTTP/1.1 400") and b"carries 2 authorization values" in resp,
              "HTTP /v2/debug/config with the admin token and a wrong one: 400, saying why",
              resp[:300])
        r = S.tpud.RepositoryIndex(tpd.RepositoryIndexRequest(), timeout=10, metadata=md(A))
        check(any(m.name == "matmul" for m in r.models), "one admin token alone still works", r)

    for fn in (auth, repeated_authorization, sizes):
        step(fn)
    S.ch.close()


# ---------------------------------------------------------------- suite: tls

def tls():
    X, _ = digits_data()

    def basics():
        S = Stubs(make_channel())
        r = S.inf.ServerLive(inf.ServerLiveRequest(), timeout=10)
        check(r.live, "TLS + client certificate: ServerLive (ALPN h2)")
        x = X[5:8]
        want = http_infer("digits", "x", x)
        r = S.inf.ModelInfer(infer_request("digits", "x", x, rid="tls-1"), timeout=10)
        got = decode_infer(r, 3, 10, "probs")
        check(np.max(np.abs(got - want)) <= 1e-6, "TLS: ModelInfer of 3 rows = the HTTPS answer")
        expect_code("TLS: ModelInfer unknown model", grpc.StatusCode.NOT_FOUND,
                    lambda: S.inf.ModelInfer(infer_request("nosuch", "x", x[:1]), timeout=10))
        expect_code("TLS: ModelUnload with a certificate of role infer",
                    grpc.StatusCode.PERMISSION_DENIED,
                    lambda: S.tpud.ModelUnload(tpd.ModelUnloadRequest(name="matmul"), timeout=10))
        a, b = big_fp32(256, 512, 384, seed=5)
        r = S.tpud.MatMul(matmul_request(a, b, "FP32"), timeout=30)
        check(close_fp32(matmul_result(r, 256, 384, "FP32"), a @ b, 1e-3, 1e-3),
              "TLS: MatMul with a 1.25 MiB request and a 384 KiB answer = numpy")
        # 4 threads × 25 on the one TLS channel
        errs = []

        def worker(t):
            for i in range(25):
                try:
                    r = S.inf.ModelInfer(infer_request("digits", "x", X[:1], rid=f"tls-c-{t}-{i}"),
                                         timeout=20)
                    decode_infer(r, 1, 10, "probs")
                except (grpc.RpcError, AssertionError) as e:
                    errs.append(str(e)[:200])
        ths = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in ths:
            th.start()
        p = subprocess.run([ARGS.tpuctl, "--addr", ARGS.target, "--timeout", "10000", "--tls-ca",
                            ARGS.tls_ca, "--tls-cert", ARGS.tls_cert, "--tls-key", ARGS.tls_key,
                            "health"], capture_output=True, text=True)
        for th in ths:
            th.join()
        check(not errs, "TLS: 100 ModelInfer calls from 4 threads on one channel", errs[:3])
        check(p.returncode == 0 and p.stdout.strip() == "ready",
              "tpuctl health (framed, ALPN tpud/1) on the same TLS port meanwhile",
              (p.returncode, p.stdout, p.stderr))
        S.ch.close()

    def refusals():
        ch = make_channel(cert=False, wait=0)
        code, det = code_of(lambda: infg.GRPCInferenceServiceStub(ch).ServerLive(
            inf.ServerLiveRequest(), timeout=5))
        check(code == grpc.StatusCode.UNAVAILABLE,
              "mTLS: a channel without a client certificate is refused (UNAVAILABLE)",
              f"{code.name}: {det}")
        ch.close()
        ch = make_channel(tls=False, wait=0)
        code, det = code_of(lambda: infg.GRPCInferenceServiceStub(ch).ServerLive(
            inf.ServerLiveRequest(), timeout=5))
        check(code == grpc.StatusCode.UNAVAILABLE,
              "cleartext h2 to the TLS port is refused (UNAVAILABLE)", f"{code.name}: {det}")
        ch.close()
        S = Stubs(make_channel())
        check(S.inf.ServerLive(inf.ServerLiveRequest(), timeout=10).live,
              "TLS: the server still serves after refused handshakes")
        S.ch.close()

    for fn in (basics, refusals):
        step(fn)


def tls_audit():
    recs = [json.loads(line) for line in open(ARGS.audit_log)]
    rr = [r for r in recs if r.get("kind") == "request" and r.get("request_id") == "tls-1"]
    check(len(rr) == 1 and rr[0]["status"] == "OK" and "CN=alice" in rr[0]["client"]
          and rr[0]["model"] == "digits",
          f"audit: the TLS gRPC request names the client certificate "
          f"({rr[0]['client'] if rr else '-'})", rr)
    n = sum(1 for r in recs if r.get("kind") == "request"
            and str(r.get("request_id", "")).startswith("tls-c-") and r["status"] == "OK")
    check(n == 100, f"audit: {n} of 100 concurrent TLS requests recorded")
    rr = [r for r in recs if r.get("kind") == "request" and r["status"] == "PERMISSION_DENIED"]
    check(len(rr) >= 1 and "CN=alice" in rr[0]["client"],
          "audit: the refused gRPC ModelUnload recorded with the certificate identity", rr[:1])


# ---------------------------------------------------------------- main

def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("suite", choices=["basic", "audit", "slow", "limits", "tls", "tls-audit"])
    ap.add_argument("--target", help="HOST:PORT of the native/gRPC port")
    ap.add_argument("--gen", help="directory of the generated *_pb2*.py stubs")
    ap.add_argument("--http", help="base URL of the HTTP port (http://... or https://...)")
    ap.add_argument("--src", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--tpuctl", help="path of tpuctl (framed protocol alongside)")
    ap.add_argument("--tls-ca")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--admin-token")
    ap.add_argument("--infer-token")
    ap.add_argument("--metrics-token")
    ap.add_argument("--max-message-bytes", type=int, default=4096)
    ap.add_argument("--audit-log")
    ap.add_argument("--pid", type=int, help="tpud's pid: `slow` ends with SIGTERM and a drain")
    ARGS = ap.parse_args()
    if ARGS.suite not in ("audit", "tls-audit"):
        load_stubs(ARGS.gen)
    fn = {"basic": basic, "audit": audit, "slow": slow, "limits": limits, "tls": tls,
          "tls-audit": tls_audit}[ARGS.suite]
    step(fn)
    print(f"grpc_client {ARGS.suite}: {'FAILED (' + str(FAILS) + ')' if FAILS else 'all passed'}",
          flush=True)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
