#!/usr/bin/python3
"""The Python side of tests/integration/test_trees.sh: tree ensembles served by the real tpud.

usage: trees_serving.py SUITE --kind xgboost|sklearn --http URL --target HOST:PORT --gen STUBS
                        --tpuctl PATH --data DIR --src DIR [--models a,b]

The fixtures are tests/data/<kind>/<model>/1/ (the model file, reference.safetensors with
input.input / output.NAME over 1000 rows, the library's own outputs; model.json):
  xgboost  xgboost.json (Booster.save_model), XGBoost's inplace_predict; rows with NaN, +Inf
           and -Inf among them
  sklearn  model.onnx (TreeEnsembleClassifier / Regressor, written by
           models/export_sklearn_trees.py), scikit-learn's predict / predict_proba; the
           HistGradientBoosting fixtures' rows hold NaN and ±Inf (DecisionTree ensembles refuse
           them)
Suites:
  serve   per model: metadata over HTTP (the format, the loader's tensors); all 1000 rows over
          gRPC (raw and typed contents: NaN and ±Inf are taken), the rows without NaN or Inf
          (JSON has no text for them) over HTTP JSON and the framed protocol (tpuctl infer), in
          requests of 1..64 rows concurrently: probabilities within 1e-6 of the library's,
          margins and predictions within 1e-5, labels equal.
  fresh   10,000 fresh rows per model over gRPC against the library itself: XGBoost's
          Booster.inplace_predict on the fixture's own xgboost.json (where python3-xgboost is
          installed); scikit-learn's predict on the estimator the exporter trains again (where
          python3-sklearn and python3-onnx are; its export must equal the fixture's file byte
          for byte, so the estimator is the fixture's).
Prints "ok: ..." / "FAIL: ..." lines; exits 1 when anything failed.
"""
import argparse
import http.client as httpclient
import json
import os
import random
import struct
import subprocess
import sys
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import numpy as np

FAILS = 0
ARGS = None
LOCK = threading.Lock()
grpc = inf = infg = None
MODELS = {"xgboost": ["fraud_d6", "multi_d3", "forest_d3", "reg_d6"],
          "sklearn": ["rf_multi", "rf_reg", "gb_fraud", "hgb_fraud", "hgb_multi", "hgb_reg"]}
LIB = {"xgboost": "XGBoost", "sklearn": "scikit-learn"}
TOL = {"probabilities": 1e-6, "prediction": 1e-5, "margin": 1e-5, "label": 0,
       "leaf_index": 0, "contributions": 1e-5}
ON_REQUEST = ("leaf_index", "contributions")  # returned only when a request names them
NP_OF = {"FP32": "<f4", "INT64": "<i8"}
ST = {"F32": "<f4", "I64": "<i8"}


def check(cond, what, detail=""):
    global FAILS
    if cond:
        print(f"ok: {what}", flush=True)
    else:
        FAILS += 1
        print(f"FAIL: {what}" + (f": {detail}" if detail else ""), flush=True)


def safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    hdr = json.loads(data[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=ST[v["dtype"]]).reshape(
                v["shape"])
    return out


_tls = threading.local()


def http(method, path, body=None, headers=None):
    u = urllib.parse.urlparse(ARGS.http)
    c = getattr(_tls, "conn", None)
    if c is None:
        c = _tls.conn = httpclient.HTTPConnection(u.hostname, u.port, timeout=30)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    try:
        c.request(method, path, data, h)
        r = c.getresponse()
        raw = r.read()
    except (httpclient.HTTPException, OSError):
        c.close()
        _tls.conn = None
        raise
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, raw.decode(errors="replace")


def stub():
    if not hasattr(_tls, "stub"):
        ch = grpc.insecure_channel(ARGS.target, options=[("grpc.enable_http_proxy", 0)])
        grpc.channel_ready_future(ch).result(timeout=10)
        _tls.stub = infg.GRPCInferenceServiceStub(ch)
    return _tls.stub


class Agree:
    def __init__(self, what):
        self.what, self.rows, self.bad, self.worst = what, 0, [], {}

    def add(self, got, want, lo, hi):
        """got: {name: (datatype, array)}; want: {name: array (all rows)}."""
        if sorted(got) != sorted(want):
            self.bad.append(f"rows {lo}..{hi}: outputs {sorted(got)}, want {sorted(want)}")
            return
        for n, w in want.items():
            d, g = got[n]
            w = w[lo:hi]
            if tuple(g.shape) != tuple(w.shape):
                self.bad.append(f"rows {lo}..{hi} '{n}': shape {list(g.shape)}, want "
                                f"{list(w.shape)}")
                continue
            err = float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max()) if g.size else 0
            with LOCK:
                self.worst[n] = max(self.worst.get(n, 0.0), err)
            if err > TOL[n]:
                i = int(np.argmax(np.abs(g.astype(np.float64) - w.astype(np.float64)).ravel()))
                self.bad.append(f"rows {lo}..{hi} '{n}' element {i}: got {g.ravel()[i]}, "
                                f"{LIB[ARGS.kind]} {w.ravel()[i]}")
        with LOCK:
            self.rows += hi - lo

    def report(self, rows):
        worst = ", ".join(f"{k} {v:.3g}" for k, v in sorted(self.worst.items()))
        check(not self.bad and self.rows == rows,
              f"{self.what}: {self.rows} rows agree with {LIB[ARGS.kind]} (max |error|: {worst})",
              f"{self.rows} of {rows} rows; {len(self.bad)} bad: {self.bad[:3]}")


def chunks(idx, rng):
    out, at = [], 0
    while at < len(idx):
        s = min(len(idx) - at, rng.choice([1, 64, rng.randint(1, 64)]))
        out.append(idx[at:at + s])
        at += s
    return out


def json_outputs(resp):
    """{name: (datatype, array)}: FP32 numbers read back as float32, as they were sent."""
    return {o["name"]: (o["datatype"], np.array(o["data"], dtype=np.float64).astype(
        np.float32 if o["datatype"] == "FP32" else np.float64).reshape(o["shape"]))
            for o in resp["outputs"]}


def via_http_json(model, x):
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.ravel().tolist()}]}
    st, r = http("POST", f"/v2/models/{model}/infer", body)
    if st != 200:
        raise RuntimeError(f"HTTP {st}: {r}")
    return json_outputs(r)


def via_grpc(model, x, raw=True, outputs=()):
    r = inf.ModelInferRequest(model_name=model)
    for name in outputs:
        r.outputs.add().name = name
    t = r.inputs.add()
    t.name, t.datatype = "input", "FP32"
    t.shape.extend(x.shape)
    if raw:
        r.raw_input_contents.append(np.ascontiguousarray(x, dtype="<f4").tobytes())
    else:
        t.contents.fp32_contents.extend(x.ravel().astype(np.float64).tolist())
    resp = stub().ModelInfer(r, timeout=30)
    out, rc = {}, list(resp.raw_output_contents)
    for i, o in enumerate(resp.outputs):
        if rc:
            a = np.frombuffer(rc[i], dtype=NP_OF[o.datatype])
        elif o.datatype == "INT64":
            a = np.array(o.contents.int64_contents, dtype=np.int64)
        else:
            a = np.array(o.contents.fp32_contents, dtype=np.float32)
        out[o.name] = (o.datatype, a.reshape(list(o.shape)))
    return out


def via_tpuctl(model, x):
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.ravel().tolist()}]}
    p = subprocess.run([ARGS.tpuctl, "--addr", ARGS.target, "infer", model, "--data",
                        json.dumps(body)], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"tpuctl exit {p.returncode}: {p.stderr.strip()}")
    return json_outputs(json.loads(p.stdout))


def agree(what, fn, model, x, want, idx, rng):
    a = Agree(f"{model} {what}")
    parts = chunks(idx, rng)

    # Each request's rows are picked out of want too, so Agree.add sees them at 0..len.
    def one0(rows):
        try:
            got = fn(model, x[rows])
            a.add(got, {k: v[rows] for k, v in want.items()}, 0, len(rows))
        except Exception as e:  # noqa: BLE001
            det = e.details() if hasattr(e, "details") else str(e)
            a.bad.append(f"rows {rows[0]}..: {det[:300]}")

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(one0, parts))
    a.report(len(idx))


def serve():
    rng = random.Random(18)
    for model in ARGS.models:
        st, meta = http("GET", f"/v2/models/{model}")
        platform = "tpud_xgboost" if ARGS.kind == "xgboost" else "tpud_onnx"
        check(st == 200 and meta["inputs"][0]["name"] == "input" and
              meta.get("platform") == platform,
              f"{model}: metadata over HTTP ({', '.join(o['name'] for o in meta['outputs'])})",
              f"{st} {meta}")
        if st != 200:
            continue
        t = safetensors(os.path.join(ARGS.data, model, "1", "reference.safetensors"))
        x = t["input.input"]
        want = {k[len("output."):]: v for k, v in t.items() if k.startswith("output.")}
        names = [o["name"] for o in meta["outputs"] if o["name"] not in ON_REQUEST]
        check(sorted(names) == sorted(want), f"{model}: outputs {names} are the reference's "
              f"(and, on request: {[o['name'] for o in meta['outputs'] if o['name'] in ON_REQUEST]})",
              f"reference has {sorted(want)}")
        allrows = np.arange(x.shape[0])
        finite = allrows[np.isfinite(x).all(axis=1)]
        special = x.shape[0] - len(finite)
        if ARGS.kind == "xgboost" or model.startswith("hgb_"):
            check(special > 100 and np.isinf(x).any() and np.isnan(x).any(),
                  f"{model}: {special} of {x.shape[0]} rows hold NaN or ±Inf")
        agree("gRPC raw contents (all rows)", via_grpc, model, x, want, allrows, rng)
        agree("gRPC typed contents (all rows)", lambda m, v: via_grpc(m, v, raw=False), model, x,
              want, allrows, rng)
        agree("HTTP JSON (finite rows)", via_http_json, model, x, want, finite, rng)
        agree("tpuctl infer, framed protocol (finite rows)", via_tpuctl, model, x, want,
              finite[:300], rng)
        if ARGS.kind == "xgboost" and len(finite):
            # over HTTP JSON, contributions named: only they come back, and per row (and class)
            # they sum to the margin (TreeSHAP's local accuracy)
            row = x[finite[:3]]
            body = {"inputs": [{"name": "input", "shape": list(row.shape), "datatype": "FP32",
                                "data": row.ravel().tolist()}],
                    "outputs": [{"name": "contributions"}]}
            st, r = http("POST", f"/v2/models/{model}/infer", body)
            outs = json_outputs(r) if st == 200 else {}
            ok = sorted(outs) == ["contributions"]
            if ok:
                c = outs["contributions"][1].astype(np.float64)
                total = c.sum(axis=-1).reshape(len(row), -1)
                err = float(np.abs(total - want["margin"][finite[:3]]).max())
                ok = err < 1e-4
            check(ok, f"{model}: HTTP JSON naming 'contributions' gets only them, and they sum "
                  f"to the margin", f"HTTP {st}: {str(r)[:300]}")
        st, r = http("GET", "/v2/debug/models")
        if st == 200:
            txt = json.dumps(r)
            fmt, op = ("xgboost", "TreeEnsemble") if ARGS.kind == "xgboost" else \
                ("onnx", "TreeEnsembleClassifier" if "label" in want else "TreeEnsembleRegressor")
            check(fmt in txt and op in txt,
                  f"{model}: /v2/debug/models says format {fmt} and the {op} step")


def fresh_sklearn():
    try:
        sys.path.insert(0, os.path.join(ARGS.src, "models"))
        sys.dont_write_bytecode = True
        import sklearn
        import export_sklearn_trees as ex
    except ImportError as e:
        print(f"note: {e.name} is not installed: the 10,000 fresh rows are skipped")
        return
    import hashlib
    for model in ARGS.models:
        est, _ = ex.train(model)
        raw = ex.to_onnx(est, ex.MODELS[model][1]).SerializeToString()
        have = open(os.path.join(ARGS.data, model, "1", "model.onnx"), "rb").read()
        if hashlib.sha256(raw).digest() != hashlib.sha256(have).digest():
            print(f"note: {model}: scikit-learn {sklearn.__version__} trains another estimator "
                  f"than the fixture's (re-export with models/export_sklearn_trees.py): skipped")
            continue
        x = ex.fresh_rows(model, np.random.default_rng(1818), 10000)
        want = ex.expected(est, x)
        agree(f"10,000 fresh rows ({type(est).__name__}, scikit-learn {sklearn.__version__}) "
              f"over gRPC", via_grpc, model, x, want, np.arange(10000), random.Random(7))


def fresh():
    if ARGS.kind == "sklearn":
        return fresh_sklearn()
    try:
        import xgboost as xgb
    except ImportError:
        print("note: python3-xgboost is not installed: the 10,000 fresh rows are skipped")
        return
    rng = np.random.default_rng(1818)
    for model in ARGS.models:
        b = xgb.Booster(model_file=os.path.join(ARGS.data, model, "1", "xgboost.json"))
        nf = b.num_features()
        x = rng.normal(size=(10000, nf)).astype(np.float32) * 1.5
        x[:, 1] = np.exp(x[:, 1])
        x[rng.random(x.shape) < 0.1] = np.nan
        x[rng.random(x.shape) < 0.01] = np.inf
        x[rng.random(x.shape) < 0.01] = -np.inf
        margin = b.inplace_predict(x, predict_type="margin").astype(np.float32).reshape(10000, -1)
        want = {"margin": margin}
        obj = json.loads(b.save_config())["learner"]["objective"]["name"]
        if obj == "multi:softmax":
            want["label"] = b.inplace_predict(x).astype(np.int64).reshape(10000)
            b.set_param({"objective": "multi:softprob"})
            want["probabilities"] = b.inplace_predict(x).astype(np.float32).reshape(10000, -1)
        else:
            key = "probabilities" if obj.startswith(("binary", "multi")) else "prediction"
            want[key] = b.inplace_predict(x).astype(np.float32).reshape(10000, -1)
        agree(f"10,000 fresh rows ({obj}, xgboost {xgb.__version__}) over gRPC", via_grpc,
              model, x, want, np.arange(10000), random.Random(7))
        # Named on request: each tree's leaf and the contributions, against pred_leaf and
        # pred_contribs on the rows without ±Inf (a DMatrix refuses them), with the others.
        keep = np.arange(10000)[~np.isinf(x).any(axis=1)]
        dm = xgb.DMatrix(x[keep], missing=np.nan)
        xwant = {k: np.zeros((10000,) + v.shape[1:], v.dtype) for k, v in want.items()}
        for k, v in want.items():
            xwant[k][keep] = v[keep]
        leaf = b.predict(dm, pred_leaf=True).astype(np.float32).reshape(len(keep), -1)
        contrib = b.predict(dm, pred_contribs=True).astype(np.float32)
        xwant["leaf_index"] = np.zeros((10000,) + leaf.shape[1:], np.float32)
        xwant["leaf_index"][keep] = leaf
        xwant["contributions"] = np.zeros((10000,) + contrib.shape[1:], np.float32)
        xwant["contributions"][keep] = contrib
        names = list(want) + list(ON_REQUEST)
        agree(f"{len(keep)} of them with leaf_index and contributions named (pred_leaf, "
              f"pred_contribs)", lambda m, v: via_grpc(m, v, outputs=names), model, x, xwant,
              keep, random.Random(8))


def main():
    global ARGS, grpc, inf, infg
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", choices=["serve", "fresh"])
    ap.add_argument("--kind", choices=sorted(MODELS), required=True)
    for a in ("--http", "--target", "--gen", "--tpuctl", "--data", "--src"):
        ap.add_argument(a, required=True)
    ap.add_argument("--models")
    ARGS = ap.parse_args()
    ARGS.models = ARGS.models or ",".join(MODELS[ARGS.kind])
    ARGS.models = ARGS.models.split(",")
    sys.path.insert(0, ARGS.gen)
    import grpc as g  # noqa: E402
    import grpc_service_pb2 as a  # noqa: E402
    import grpc_service_pb2_grpc as b  # noqa: E402
    grpc, inf, infg = g, a, b
    {"serve": serve, "fresh": fresh}[ARGS.suite]()
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
