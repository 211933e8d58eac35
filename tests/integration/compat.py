#!/usr/bin/python3
"""compat.py - Triton's HTTP binary tensor extension against the real tpud.

Usage: compat.py PORT DATA_DIR

Binary tensors: the requests are built byte for byte as tritonclient's HTTP client builds them (JSON header,
then each binary input's raw little-endian bytes in input order; the header's length in
Inference-Header-Content-Length), over http.client on one keep-alive connection, so every error
case also shows the connection and the server still serve. Models: `digits` (FP32 in, FP32 out)
`fraud` (tests/data/onnx/fraud_op17: FP32 `num` and INT64 `cat` in, FP32 `score` and
`logit` out), `matmul` and `xgb`. Checks:
  - binary in and out equals JSON in and out, bit for bit (JSON floats are shortest round-trip
    text, so both carry the same float32 values);
  - the fraud fixture's 1000 PyTorch reference rows sent as binary tensors, answers within the
    fixture's tolerance; mixed binary and JSON inputs; per-output `binary_data` against the
    request's `binary_data_output`; BYTES-free datatypes INT64 and FP32 both ways;
  - NaN and infinity in FP32 input travel in binary: a dense model refuses them naming the
    element (its policy), the XGBoost fixture `xgb` (tests/data/xgboost/fraud_d6) takes them as
    missing values and answers its 1000 reference rows as XGBoost did;
  - gzip request bodies and gzip answers (the header counts the decoded JSON);
  - sizes that do not match shape and datatype, sizes beyond the body, left-over bytes, a header
    longer than the body, a non-numeric header: 400 naming the input, connection kept.
Prints "ok: ..." per check and "FAIL: ..." per failure; exits 1 on any failure.
"""
import gzip
import http.client
import json
import os
import struct
import sys

import numpy as np

PORT = int(sys.argv[1])
DATA = sys.argv[2]
FAILED = []


def ok(msg):
    print("ok: " + msg)


def fail(msg):
    print("FAIL: " + msg)
    FAILED.append(msg)


CONN = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)


def post(model, body, headers):
    CONN.request("POST", "/v2/models/%s/infer" % model, body=body, headers=headers)
    r = CONN.getresponse()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()


def infer_binary(model, inputs, outputs=None, params=None, gz=False, accept_gzip=False):
    """inputs: [(name, ndarray, datatype, binary?)]; outputs: [(name, binary?)] or None.
    Returns (status, headers, {name: ndarray} or the error text)."""
    req = {"inputs": []}
    blobs = []
    for name, a, dt, binary in inputs:
        t = {"name": name, "shape": list(a.shape), "datatype": dt}
        if binary:
            raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
            t["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            t["data"] = a.flatten().tolist()
        req["inputs"].append(t)
    if outputs is not None:
        req["outputs"] = [{"name": n, "parameters": {"binary_data": b}} for n, b in outputs]
    if params:
        req["parameters"] = params
    head = json.dumps(req).encode()
    body = head + b"".join(blobs)
    hdrs = {"Inference-Header-Content-Length": str(len(head)),
            "Content-Type": "application/octet-stream"}
    if gz:
        body = gzip.compress(body)
        hdrs["Content-Encoding"] = "gzip"
    if accept_gzip:
        hdrs["Accept-Encoding"] = "gzip"
    st, h, data = post(model, body, hdrs)
    return st, h, decode_answer(st, h, data)


DT = {"FP32": np.float32, "INT64": np.int64, "FP64": np.float64, "INT32": np.int32}


def decode_answer(st, h, data):
    if st != 200:
        return data.decode(errors="replace")
    if h.get("content-encoding") == "gzip":
        data = gzip.decompress(data)
    jl = int(h.get("inference-header-content-length", len(data)))
    j = json.loads(data[:jl])
    off = jl
    out = {}
    for o in j["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is None:
            out[o["name"]] = np.array(o["data"], dtype=DT[o["datatype"]]).reshape(o["shape"])
            out[o["name"] + ".json"] = True
        else:
            out[o["name"]] = np.frombuffer(data[off:off + size],
                                           dtype=DT[o["datatype"]]).reshape(o["shape"])
            off += size
    if off != len(data):
        raise AssertionError("%d bytes after the binary outputs" % (len(data) - off))
    return out


def infer_json(model, inputs):
    body = json.dumps({"inputs": [{"name": n, "shape": list(a.shape), "datatype": dt,
                                   "data": a.flatten().tolist()} for n, a, dt in inputs]})
    st, h, data = post(model, body.encode(), {"Content-Type": "application/json"})
    if st != 200:
        return st, data.decode(errors="replace")
    return st, {o["name"]: np.array(o["data"], dtype=DT[o["datatype"]]).reshape(o["shape"])
                for o in json.loads(data)["outputs"]}


def safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    dts = {"F32": np.float32, "I64": np.int64}
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dts[v["dtype"]]).reshape(v["shape"])
    return out


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def expect_400(what, model, body, head_len, want):
    hdrs = {"Inference-Header-Content-Length": str(head_len)}
    st, _, data = post(model, body, hdrs)
    text = data.decode(errors="replace")
    if st == 400 and want in text:
        ok("%s: 400 %s" % (what, json.loads(text)["error"][:150]))
    else:
        fail("%s: want 400 with %r, got %d %s" % (what, want, st, text[:300]))


def main():
    global CONN
    rng = np.random.default_rng(5)

    CONN.request("GET", "/v2")
    r = CONN.getresponse()
    ext = json.loads(r.read()).get("extensions", [])
    if "binary_tensor_data" in ext:
        ok("server metadata lists the binary_tensor_data extension")
    else:
        fail("server metadata extensions: %s" % ext)

    # ---- digits: binary both ways equals JSON both ways, bit for bit ----
    x = (rng.random((5, 64)) * 16).astype(np.float32)
    st, ref = infer_json("digits", [("x", x, "FP32")])
    if st != 200:
        fail("digits JSON: %d %s" % (st, ref))
        return
    st, h, got = infer_binary("digits", [("x", x, "FP32", True)],
                              params={"binary_data_output": True})
    if st == 200 and h.get("content-type") == "application/octet-stream" and \
            "probs.json" not in got and same_bits(got["probs"], ref["probs"]):
        ok("digits: binary input and output (binary_data_output) equal the JSON answer bit for "
           "bit, Content-Type application/octet-stream")
    else:
        fail("digits binary: %d %s %s" % (st, h, got))
    st, h, got = infer_binary("digits", [("x", x, "FP32", True)])
    if st == 200 and "inference-header-content-length" not in h and "probs.json" in got and \
            same_bits(got["probs"], ref["probs"]):
        ok("digits: binary input, JSON output when no output asks for binary")
    else:
        fail("digits binary in, JSON out: %d %s %s" % (st, h, got))
    st, h, got = infer_binary("digits", [("x", x, "FP32", False)], outputs=[("probs", True)])
    if st == 200 and "probs.json" not in got and same_bits(got["probs"], ref["probs"]):
        ok("digits: JSON input, binary output by the output's binary_data")
    else:
        fail("digits JSON in, binary out: %d %s" % (st, got))
    st, h, got = infer_binary("digits", [("x", x, "FP32", True)], outputs=[("probs", False)],
                              params={"binary_data_output": True})
    if st == 200 and "probs.json" in got and same_bits(got["probs"], ref["probs"]):
        ok("digits: an output's binary_data false overrides binary_data_output true")
    else:
        fail("digits override: %d %s" % (st, got))

    # ---- gzip both ways ----
    big = (rng.random((64, 64)) * 16).astype(np.float32)
    st, ref_big = infer_json("digits", [("x", big, "FP32")])
    st, h, got = infer_binary("digits", [("x", big, "FP32", True)],
                              params={"binary_data_output": True}, gz=True, accept_gzip=True)
    if st == 200 and same_bits(got["probs"], ref_big["probs"]):
        ok("digits: gzip request body with binary data (the header counts the decoded JSON)")
    else:
        fail("digits gzip: %d %s" % (st, h))

    a = rng.standard_normal((32, 256)).astype(np.float32)
    st, ref_mm = infer_json("matmul", [("a", a, "FP32")])
    st, h, got = infer_binary("matmul", [("a", a, "FP32", True)],
                              params={"binary_data_output": True}, accept_gzip=True)
    if st == 200 and h.get("content-encoding") == "gzip" and same_bits(got["c"], ref_mm["c"]):
        ok("matmul: a 32 KiB binary answer gzipped for Accept-Encoding gzip (the header counts "
           "the decoded JSON), equal to the JSON answer")
    else:
        fail("matmul gzip answer: %d %s" % (st, h))

    # ---- NaN and infinity through binary ----
    # A dense model refuses them (its policy, PRODUCT.md), now that they can reach it at all.
    xn = x[:2].copy()
    xn[1, 10] = np.nan
    st, h, got = infer_binary("digits", [("x", xn, "FP32", True)],
                              params={"binary_data_output": True})
    if st == 400 and "element [1,10] is NaN" in got:
        ok("digits: a NaN in a binary input reaches validation: 400 naming element [1,10]")
    else:
        fail("digits NaN binary: %d %s" % (st, got))
    # An XGBoost model takes them as missing values: the fixture's 1000 rows (1265 NaN, 130
    # infinities) against XGBoost's own predictions, which JSON could never send.
    ref_x = ref = safetensors(os.path.join(DATA, "..", "xgboost", "fraud_d6", "1",
                                           "reference.safetensors"))
    xin = ref["input.input"]
    tol = {"probabilities": 1e-6, "margin": 1e-5}
    worst = {}
    bad = 0
    for lo in range(0, len(xin), 100):
        st, h, got = infer_binary("xgb", [("input", xin[lo:lo + 100], "FP32", True)],
                                  params={"binary_data_output": True})
        if st != 200:
            fail("xgb rows %d..: %d %s" % (lo, st, got))
            bad += 1
            break
        for name, t in tol.items():
            d = float(np.abs(got[name] - ref["output." + name][lo:lo + 100]).max())
            worst[name] = max(worst.get(name, 0.0), d)
            bad += d > t
    if bad == 0:
        ok("xgb: 1000 rows with %d NaN and %d infinities as binary FP32, outputs binary: "
           "probabilities and margins equal XGBoost's within 1e-6 / 1e-5 (worst %s)" %
           (int(np.isnan(xin).sum()), int(np.isinf(xin).sum()), worst))
    else:
        fail("xgb reference rows: %d out of tolerance (worst %s)" % (bad, worst))

    # ---- fraud: two inputs of two datatypes, two outputs; the PyTorch reference rows ----
    ref = safetensors(os.path.join(DATA, "fraud_op17", "1", "reference.safetensors"))
    num, cat = ref["input.num"], ref["input.cat"]
    score, logit = ref["output.score"], ref["output.logit"]
    worst = 0.0
    bad = 0
    for lo in range(0, len(num), 50):
        hi = lo + 50
        st, h, got = infer_binary("fraud", [("num", num[lo:hi], "FP32", True),
                                            ("cat", cat[lo:hi], "INT64", True)],
                                  params={"binary_data_output": True})
        if st != 200:
            fail("fraud rows %d..%d: %d %s" % (lo, hi, st, got))
            bad += 1
            break
        for name, want in (("score", score[lo:hi]), ("logit", logit[lo:hi])):
            d = np.abs(got[name] - want)
            worst = max(worst, float(d.max()))
            if not (d <= 1e-5 + 1e-4 * np.abs(want)).all():
                bad += 1
    if bad == 0:
        ok("fraud: 1000 reference rows as binary FP32 + INT64 inputs, both outputs binary, within "
           "rtol 1e-4 atol 1e-5 of PyTorch (worst %.2g)" % worst)
    else:
        fail("fraud reference rows: %d blocks out of tolerance (worst %.3g)" % (bad, worst))
    st, jref = infer_json("fraud", [("num", num[:7], "FP32"), ("cat", cat[:7], "INT64")])
    st, h, got = infer_binary("fraud", [("num", num[:7], "FP32", False),
                                        ("cat", cat[:7], "INT64", True)],
                              outputs=[("logit", True), ("score", False)])
    if st == 200 and "logit.json" not in got and "score.json" in got and \
            same_bits(got["logit"], jref["logit"]) and same_bits(got["score"], jref["score"]):
        ok("fraud: JSON num + binary cat, logit binary and score JSON: the all-JSON answer")
    else:
        fail("fraud mixed: %d %s" % (st, got))
    st, h, got = infer_binary("fraud", [("num", num[:7].astype(np.float64), "FP64", True),
                                        ("cat", cat[:7].astype(np.int32), "INT32", True)],
                              params={"binary_data_output": True})
    if st == 200 and same_bits(got["score"], jref["score"]):
        ok("fraud: FP64 and INT32 binary inputs converted to the model's FP32 and INT64")
    else:
        fail("fraud converted: %d %s" % (st, got))
    bad_cat = cat[:2].copy()
    bad_cat[1] = 50
    st, h, got = infer_binary("fraud", [("num", num[:2], "FP32", True),
                                        ("cat", bad_cat, "INT64", True)])
    if st == 400 and "element 1 is 50" in got:
        ok("fraud: an embedding id out of range in binary is 400 naming it")
    else:
        fail("fraud id out of range: %d %s" % (st, got))

    # ---- classification: top K of the last dimension as "value:index:label" ----
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    st, ref = infer_json("digitsl", [("x", x, "FP32")])
    for k, binary in ((3, False), (10, True), (25, False)):
        body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                            "data": x.flatten().tolist()}],
                "outputs": [{"name": "probs", "parameters": {"classification": k,
                                                             "binary_data": binary}}]}
        head = json.dumps(body).encode()
        st, h, data = post("digitsl", head, {"Inference-Header-Content-Length": str(len(head))})
        if st != 200:
            fail("classification %d: %d %s" % (k, st, data[:200]))
            continue
        jl = int(h.get("inference-header-content-length", len(data)))
        o = json.loads(data[:jl])["outputs"][0]
        kk = min(k, 10)
        if binary:
            raw, strs, off = data[jl:], [], 0
            while off < len(raw):
                n = struct.unpack("<I", raw[off:off + 4])[0]
                strs.append(raw[off + 4:off + 4 + n].decode())
                off += 4 + n
        else:
            strs = o["data"]
        want = []
        for row in ref["probs"]:
            order = sorted(range(10), key=lambda i: (-float(row[i]), i))[:kk]
            want.append([(row[i], i, names[i]) for i in order])
        got = []
        for s_ in strs:
            v, i, lab = s_.split(":")
            got.append((np.float32(v), int(i), lab))
        flat = [t for r in want for t in r]
        if o["datatype"] == "BYTES" and o["shape"] == [5, kk] and len(got) == len(flat) and \
                all(g[0] == w[0] and g[1] == w[1] and g[2] == w[2] for g, w in zip(got, flat)):
            ok("classification %d%s: BYTES [5,%d], each row's top classes by value with their "
               "labels, values exact (%s)" % (k, " in binary" if binary else "", kk, strs[0]))
        else:
            fail("classification %d: %s %s" % (k, o.get("shape"), strs[:4]))
    st, h, got = infer_binary("digits", [("x", x, "FP32", True)], outputs=[("probs", False)])
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32",
                                   "data": [0] * 64}],
                       "outputs": [{"name": "probs", "parameters": {"classification": 2}}]})
    st, h, data = post("digits", body.encode(), {})
    if st == 200 and json.loads(data)["outputs"][0]["data"][0].count(":") == 1:
        ok("classification without labels: \"value:index\" (%s)" %
           json.loads(data)["outputs"][0]["data"])
    else:
        fail("classification without labels: %d %s" % (st, data[:200]))
    for bad, want in ((0, "expected a positive integer"), ("3", "expected a positive integer"),
                      (1.5, "expected a positive integer")):
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32",
                                       "data": [0] * 64}],
                           "outputs": [{"name": "probs", "parameters": {"classification": bad}}]})
        st, h, data = post("digits", body.encode(), {})
        if st == 400 and want in data.decode():
            ok("classification %r: 400 %s" % (bad, json.loads(data)["error"]))
        else:
            fail("classification %r: %d %s" % (bad, st, data[:200]))
    body = json.dumps({"inputs": [{"name": "cat", "shape": [1], "datatype": "INT64", "data": [1]},
                                  {"name": "num", "shape": [1, 8], "datatype": "FP32",
                                   "data": [0] * 8}],
                       "outputs": [{"name": "score", "parameters": {"classification": 1}}]})
    st, h, data = post("fraud", body.encode(), {})
    if st == 200 and json.loads(data)["outputs"][0]["shape"] == [1, 1]:
        ok("classification on an ONNX model's output: %s" % json.loads(data)["outputs"][0]["data"])
    else:
        fail("fraud classification: %d %s" % (st, data[:200]))

    # ---- KServe V1 / TF Serving REST: rows (instances -> predictions), columns (inputs ->
    # outputs), against the v2 answer to the same rows in one request (same batch, same bucket)
    def v1(path, body, method="POST"):
        CONN.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                     headers={"Content-Type": "application/json"})
        r = CONN.getresponse()
        return r.status, json.loads(r.read() or b"null")
    st, j = v1("/v1/models/digits", None, "GET")
    if st == 200 and j.get("name") == "digits" and j.get("ready") is True and \
            j["model_version_status"][0]["state"] == "AVAILABLE":
        ok("V1 GET /v1/models/digits: %s" % j)
    else:
        fail("V1 GET: %d %s" % (st, j))
    st, ref = infer_json("digits", [("x", x, "FP32")])
    st, j = v1("/v1/models/digits:predict", {"instances": x.tolist()})
    if st == 200 and same_bits(np.array(j["predictions"], dtype=np.float32), ref["probs"]):
        ok("V1 digits:predict, 5 instances: predictions equal the v2 answer bit for bit")
    else:
        fail("V1 digits instances: %d %s" % (st, str(j)[:200]))
    st, j = v1("/v1/models/digits/versions/1:predict",
               {"signature_name": "serving_default", "inputs": x.tolist()})
    if st == 200 and same_bits(np.array(j["outputs"], dtype=np.float32), ref["probs"]):
        ok("V1 digits/versions/1:predict, columnar inputs: outputs equal the v2 answer")
    else:
        fail("V1 digits columnar: %d %s" % (st, str(j)[:200]))
    n7, c7 = num[:7], cat[:7]
    st, jref = infer_json("fraud", [("num", n7, "FP32"), ("cat", c7, "INT64")])
    st, j = v1("/v1/models/fraud:predict",
               {"instances": [{"num": n7[i].tolist(), "cat": int(c7[i])} for i in range(7)]})
    if st == 200 and all(same_bits(np.array([p[k] for p in j["predictions"]], dtype=np.float32),
                                   jref[k]) for k in ("score", "logit")):
        ok("V1 fraud:predict, instances as objects of two inputs (FP32 row, INT64 scalar): "
           "predictions objects of both outputs equal the v2 answer")
    else:
        fail("V1 fraud instances: %d %s" % (st, str(j)[:300]))
    st, j = v1("/v1/models/fraud:predict", {"inputs": {"num": n7.tolist(), "cat": c7.tolist()}})
    if st == 200 and all(same_bits(np.array(j["outputs"][k], dtype=np.float32), jref[k])
                         for k in ("score", "logit")):
        ok("V1 fraud:predict, columnar inputs object: outputs object equal the v2 answer")
    else:
        fail("V1 fraud columnar: %d %s" % (st, str(j)[:300]))
    for body, want in (({"instances": [[1, 2]]}, "instances[0]: expected 64 numbers"),
                       ({"instances": []}, "instances: expected a non-empty array"),
                       ({"instances": [[0] * 64], "inputs": [[0] * 64]}, "exactly one of"),
                       ({"instances": [[0] * 64], "signature_name": "other"}, "serving_default"),
                       ({"rows": 1}, "rows: unknown field")):
        st, j = v1("/v1/models/digits:predict", body)
        if st == 400 and want in j.get("error", ""):
            ok("V1 refusal: 400 %s" % j["error"])
        else:
            fail("V1 %s: %d %s" % (body, st, j))
    st, j = v1("/v1/models/fraud:predict", {"instances": [{"num": [0] * 8}]})
    if st == 400 and "input 'cat' is missing" in j.get("error", ""):
        ok("V1 refusal: 400 %s" % j["error"])
    else:
        fail("V1 fraud missing input: %d %s" % (st, j))
    st, j = v1("/v1/models/nope:predict", {"instances": [[1]]})
    if st == 404:
        ok("V1 unknown model: 404 %s" % j["error"])
    else:
        fail("V1 unknown model: %d %s" % (st, j))
    rows = [i for i in range(len(xin)) if np.isfinite(xin[i]).all()][:4]
    st, j = v1("/v1/models/xgb:predict", {"instances": xin[rows].tolist()})
    if st == 200 and np.allclose(np.array([p["probabilities"] for p in j["predictions"]]),
                                 ref_x["output.probabilities"][rows], atol=1e-6, rtol=0):
        ok("V1 xgb:predict, 4 finite rows: probabilities equal XGBoost's within 1e-6")
    else:
        fail("V1 xgb: %d %s" % (st, str(j)[:300]))

    # ---- malformed binary requests: 400 naming the input, connection and server fine ----
    def head(size, shape=(2, 64), dt="FP32"):
        return json.dumps({"inputs": [{"name": "x", "shape": list(shape), "datatype": dt,
                                       "parameters": {"binary_data_size": size}}]}).encode()
    h1 = head(511)
    expect_400("size not shape x datatype", "digits", h1 + b"\0" * 511, len(h1),
               "inputs[0].parameters.binary_data_size: 511 bytes, expected 512 for shape [2,64]")
    h2 = head(512)
    expect_400("size beyond the body", "digits", h2 + b"\0" * 100, len(h2),
               "512 bytes, but only 100 bytes of binary data are left")
    expect_400("bytes left over", "digits", h2 + b"\0" * 520, len(h2),
               "binary data: 520 bytes follow the JSON header")
    expect_400("header longer than the body", "digits", h2, len(h2) + 10,
               "Inference-Header-Content-Length: %d bytes, but the body has only %d" %
               (len(h2) + 10, len(h2)))
    h3 = head(2 ** 62)
    expect_400("a huge size", "digits", h3 + b"\0" * 8, len(h3),
               "bytes, but only 8 bytes of binary data are left")
    st, _, data = post("digits", h2 + b"\0" * 512,
                       {"Inference-Header-Content-Length": "12ab"})
    if st == 400 and b"Inference-Header-Content-Length: expected a decimal" in data:
        ok("a non-numeric Inference-Header-Content-Length: 400")
    else:
        fail("non-numeric header: %d %s" % (st, data[:200]))
    CONN.close()
    CONN = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    st, h, got = infer_binary("digits", [("x", x, "FP32", True)],
                              params={"binary_data_output": True})
    st2, _, _ = post("digits", h2 + b"\0" * 512,
                     {"Inference-Header-Content-Length": str(len(h2))})
    if st == 200 and st2 == 200:
        ok("after the refusals tpud still serves binary requests")
    else:
        fail("after the refusals: %d %d" % (st, st2))


try:
    main()
except Exception as e:  # a crash is a failure with its reason, not a traceback alone
    fail("%s: %s" % (type(e).__name__, e))
    raise
sys.exit(1 if FAILED else 0)
