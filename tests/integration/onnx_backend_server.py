#!/usr/bin/python3
"""ONNX's backend tests through the real server: every test the in-process runner passed was
exported by `onnx_backend --export-repo REPO` as a model version (model.onnx, its first data set
as reference.safetensors, model.json); tpud has loaded REPO and run each reference at load. This
sends each test's inputs over HTTP (OIP v2 JSON), compares every output with ONNX's expected
values at the suite's tolerances (rtol 1e-3, atol 1e-7; integers exactly) and prints
`N passed, M failed, K skipped` with the skips grouped by reason. A test is skipped only for a
reason outside tpud: a version that did not load (listed with its reason, so the count is
visible), or non-finite values, which OIP JSON cannot carry (the server refuses them as input and
as output by design). Exit 1 when any test fails.

Usage: onnx_backend_server.py REPO HTTP_PORT
"""
import collections
import json
import struct
import sys
import urllib.error
import urllib.request

import numpy as np

RTOL, ATOL = 1e-3, 1e-7
ST = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
      "I32": np.int32, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "BF16": np.uint16}
OIP = {"F32": "FP32", "F16": "FP16", "F64": "FP64", "I64": "INT64", "I32": "INT32",
       "I8": "INT8", "U8": "UINT8", "BOOL": "BOOL", "BF16": "BF16"}


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=ST[t["dtype"]]).reshape(t["shape"])
        if t["dtype"] == "BF16":  # bits of the upper half of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = (t["dtype"], arr)
    return out


def post(port, model, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{model}/infer",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def main():
    repo, port = sys.argv[1], int(sys.argv[2])
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/debug/models", timeout=30) as r:
        states = {m["name"]: m for m in json.loads(r.read())}
    passed, failed, skipped = [], [], collections.defaultdict(list)
    for name in sorted(states):
        if name.startswith("pbref"):  # .pb references, checked by test_onnx_backend.sh itself
            continue
        m = states[name]
        if m["state"] != "READY":
            skipped[f"not loaded: {m.get('reason', '')[:140]}"].append(name)
            continue
        ref = read_safetensors(f"{repo}/{name}/1/reference.safetensors")
        ins = [(k[6:], v) for k, v in ref.items() if k.startswith("input.")]
        outs = {k[7:]: v for k, v in ref.items() if k.startswith("output.")}
        if any(dt in ("F32", "F16", "F64", "BF16") and not np.all(np.isfinite(a))
               for dt, a in [v for _, v in ins] + list(outs.values())):
            skipped["non-finite values (OIP JSON carries finite numbers only)"].append(name)
            continue
        body = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": OIP[dt],
                            "data": a.reshape(-1).tolist()} for n, (dt, a) in ins]}
        status, ans = post(port, name, body)
        if status != 200:
            failed.append(f"{name}: HTTP {status}: {ans.get('error', ans)}")
            continue
        got = {o["name"]: o for o in ans["outputs"]}
        bad = None
        for oname, (dt, want) in outs.items():
            o = got.get(oname)
            if o is None:
                bad = f"output '{oname}' missing"
                break
            if o["shape"] != list(want.shape) or o["datatype"] != OIP[dt]:
                bad = f"output '{oname}': {o['datatype']} {o['shape']}, expected {OIP[dt]} " \
                      f"{list(want.shape)}"
                break
            g = np.array(o["data"], dtype=np.float64).reshape(want.shape)
            w = want.astype(np.float64)
            tol = ATOL + RTOL * np.abs(w) if dt in ("F32", "F16", "F64", "BF16") else 0
            err = np.abs(g - w)
            if np.any(err > tol):
                i = int(np.argmax(err - tol))
                bad = f"output '{oname}': element {i} is {g.reshape(-1)[i]}, expected " \
                      f"{w.reshape(-1)[i]}"
                break
        (failed.append(f"{name}: {bad}") if bad else passed.append(name))
    total_skip = sum(len(v) for v in skipped.values())
    print(f"onnx backend tests through the server: {len(passed)} passed, {len(failed)} failed, "
          f"{total_skip} skipped")
    for why, names in sorted(skipped.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(names):4d} skipped: {why}  e.g. {', '.join(names[:3])}")
    for f in failed:
        print(f"  FAIL {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
