#!/usr/bin/python3
"""Batch invariance through the real server (issue 21): a row's output bytes do not depend on the
bucket it lands in, the rows batched with it, its position, or the engine's thread count.

    invariance.py repo DIR                  write the test repository (see make_repo)
    invariance.py check PORT ALONE MODEL... check MODELs on tpud's HTTP port; ALONE is a JSON
                                            file of the rows' answers computed alone: written
                                            when absent, compared with when present (so a second
                                            server, with another thread count, must agree)

For each model: a pool of rows (the fixture's reference inputs where it has them, else random
normals), each answered alone (a 1-row request: bucket 1); then requests of every size from 1 to
the largest bucket, rows drawn from the pool at random (so each row sits at random positions
beside random others, in every bucket); then concurrent requests of random sizes that the
batcher merges into shared batches. Every row of every answer must equal its alone answer bit
for bit (FP32 compared as IEEE bits; JSON carries the shortest round-trip form of each value).
"""

import http.client
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import zlib

import numpy as np

BUCKETS = [1, 2, 5, 8, 13, 32, 64]
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 20, 31, 32, 33, 40, 63, 64]
POOL = 8


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    out = {}
    types = {"F32": np.float32, "I64": np.int64}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=types[t["dtype"]]).reshape(
            t["shape"])
    return out


def set_batching(model_json, precision=None, drop_reference=False):
    m = json.load(open(model_json))
    m["batching"] = {"max_batch_size": 64, "buckets": BUCKETS, "max_queue_delay_us": 2000}
    if precision:
        m["precision"] = precision
    if drop_reference:
        m.pop("reference", None)
    json.dump(m, open(model_json, "w"), indent=2)


def make_repo(src, repo):
    """digits (dense, from models/), a wide dense MLP (256 -> 1024 -> 1024 -> 64: large enough
    for two engine threads to split its layers), the ONNX fraud and text fixtures, each in fp32,
    bf16 and int8, and two XGBoost fixtures; every one with buckets BUCKETS."""
    os.makedirs(repo)
    rng = np.random.default_rng(21)
    sd = {"l1.weight": rng.normal(0, 0.06, (1024, 256)), "l1.bias": rng.normal(0, 0.1, 1024),
          "l2.weight": rng.normal(0, 0.03, (1024, 1024)), "l2.bias": rng.normal(0, 0.1, 1024),
          "l3.weight": rng.normal(0, 0.03, (64, 1024)), "l3.bias": rng.normal(0, 0.1, 64)}
    npz = os.path.join(repo, "wide.npz")
    np.savez(npz, **{k: v.astype(np.float32) for k, v in sd.items()})
    for p in ("fp32", "bf16", "int8"):
        sfx = "" if p == "fp32" else "_" + p
        d = os.path.join(repo, "wide" + sfx, "1")
        subprocess.run([sys.executable, os.path.join(src, "tools", "export_model.py"), npz, d,
                        "--activation", "gelu,tanh,softmax", "--precision", p,
                        "--buckets", ",".join(map(str, BUCKETS))], check=True,
                       stdout=subprocess.DEVNULL)
        set_batching(os.path.join(d, "model.json"))
        shutil.copytree(os.path.join(src, "models", "digits", "1"),
                        os.path.join(repo, "digits" + sfx, "1"))
        set_batching(os.path.join(repo, "digits" + sfx, "1", "model.json"), p)
        for m in ("fraud", "text"):
            d = os.path.join(repo, m + sfx, "1")
            shutil.copytree(os.path.join(src, "tests", "data", "onnx", m + "_op13", "1"), d)
            # bf16 and int8 differ from PyTorch by more than the fixture's tolerance
            set_batching(os.path.join(d, "model.json"), p, drop_reference=p != "fp32")
    os.remove(npz)
    for m in ("fraud_d6", "multi_d3"):
        d = os.path.join(repo, "xgb_" + m, "1")
        shutil.copytree(os.path.join(src, "tests", "data", "xgboost", m, "1"), d)
        set_batching(os.path.join(d, "model.json"))


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method, path, body=None):
        """body: a JSON-able dict, or (header dict, raw bytes) for binary tensors."""
        headers = {"Content-Type": "application/json"}
        if isinstance(body, tuple):
            head = json.dumps(body[0]).encode()
            headers = {"Content-Type": "application/octet-stream",
                       "Inference-Header-Content-Length": str(len(head))}
            data = head + body[1]
        else:
            data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("%s %s: %d %s" % (method, path, r.status, data[:300]))
        return json.loads(data)


def pool_rows(src, model, meta):
    """POOL rows: {input name: array of POOL rows}."""
    rng = np.random.default_rng(zlib.crc32(model.encode()))
    base = model.split("_")[0]
    fixture = {"fraud": "tests/data/onnx/fraud_op13", "text": "tests/data/onnx/text_op13",
               "xgb": "tests/data/xgboost/" + model[4:]}.get(base)
    if fixture:
        ref = read_safetensors(os.path.join(src, fixture, "1", "reference.safetensors"))
        pick = rng.choice(ref[next(k for k in ref if k.startswith("input."))].shape[0], POOL,
                          replace=False)
        return {k[6:]: ref[k][pick] for k in ref if k.startswith("input.")}
    out = {}
    for t in meta["inputs"]:
        shape = [POOL] + [d for d in t["shape"][1:]]
        out[t["name"]] = rng.normal(0, 1, shape).astype(np.float32)
    return out


def body(meta, pool, picks):
    """The rows `picks` of the pool as binary tensors (NaN and infinities included)."""
    inputs, raw = [], b""
    for t in meta["inputs"]:
        a = np.ascontiguousarray(pool[t["name"]][picks])
        inputs.append({"name": t["name"], "datatype": t["datatype"], "shape": list(a.shape),
                       "parameters": {"binary_data_size": a.nbytes}})
        raw += a.tobytes()
    return ({"inputs": inputs}, raw)


def row_bits(resp, nrows):
    """[row] -> tuple of (output name, values as bits) for each output."""
    rows = [[] for _ in range(nrows)]
    for o in sorted(resp["outputs"], key=lambda o: o["name"]):
        data = o["data"]
        per = len(data) // nrows
        for i in range(nrows):
            vals = data[i * per:(i + 1) * per]
            if o["datatype"] == "FP32":
                vals = struct.pack("<%df" % per, *vals).hex()
            rows[i].append((o["name"], vals))
    return [tuple(r) for r in rows]


def check_model(port, src, model, alone_saved):
    c = Client(port)
    meta = c.call("GET", "/v2/models/" + model)
    pool = pool_rows(src, model, meta)
    path = "/v2/models/%s/infer" % model
    alone = [row_bits(c.call("POST", path, body(meta, pool, [r])), 1)[0] for r in range(POOL)]
    if model in alone_saved:
        if [list(map(list, r)) for r in alone] != alone_saved[model]:
            return "answers alone differ from the other server's (another thread count)", alone
    rng = random.Random(model)
    checked = [0]
    errors = []

    def send(client, n):
        picks = [rng.randrange(POOL) for _ in range(n)]
        got = row_bits(client.call("POST", path, body(meta, pool, picks)), n)
        for pos, (r, g) in enumerate(zip(picks, got)):
            checked[0] += 1
            if g != alone[r] and not errors:
                errors.append("row %d of a %d-row request (pool row %d) differs from its answer "
                              "alone" % (pos, n, r))

    for n in SIZES:
        send(c, n)
    # Concurrent requests: the batcher merges them into shared batches of every bucket.
    def worker(seed):
        cl = Client(port)
        r = random.Random(seed)
        for _ in range(20):
            send(cl, r.randint(1, 12))
    ths = [threading.Thread(target=worker, args=(model + str(t),)) for t in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errors:
        return errors[0], alone
    return "ok: %s: %d rows in %d requests equal their answers alone" % (
        model, checked[0], len(SIZES) + 160), alone


def main():
    if sys.argv[1] == "repo":
        make_repo(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                  sys.argv[2])
        return 0
    port, alone_file, models = int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    saved = json.load(open(alone_file)) if os.path.exists(alone_file) else {}
    fails = 0
    out = {}
    for m in models:
        msg, alone = check_model(port, src, m, saved)
        out[m] = [list(map(list, r)) for r in alone]
        if not msg.startswith("ok:"):
            msg = "FAIL: %s: %s" % (m, msg)
            fails += 1
        print(msg, flush=True)
    if not saved:
        json.dump(out, open(alone_file, "w"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
