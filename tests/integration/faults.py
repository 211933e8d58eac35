#!/usr/bin/python3
"""faults.py - helpers of test_faults.sh (files changed under tpud while it loads them).

  mkmodel DIR --inputs N --hidden H --layers L --outputs O --buckets 1,8 [--pad BYTES]
          [--seed S] [--precision fp32]
      Writes DIR/model.json and DIR/model.safetensors (tools/export_model.py's writer): a chain
      of L dense layers N -> H -> ... -> O (no activation), random weights. --pad adds an unused
      tensor "zpad" of that many bytes at the end of the data section (names sort: fc*.bias,
      fc*.weight, then zpad). The weights are also saved to DIR.npz, outside the version
      directory, for `check`.
  check HPORT MODEL VERSION NPZ
      Sends one random row over HTTP and compares the answer with numpy on the weights in NPZ.
      Prints "same" or "differs <max abs diff>"; "status <code>" when not served.
  on-open PATH ACTION [ARG]
      Watches PATH (inotify) and, the first time something opens it, acts:
        truncate-rewrite  truncate to 0 bytes, then write the old bytes back (what cp does)
        overwrite TENSOR  after ARG milliseconds, rewrite TENSOR's bytes in place, negated and
                          scaled (same size, same offsets: only the values change)
      Prints "armed" (flushed) once the watch is set, "acted" after acting; gives up after 60 s.
      PATH may be renamed after "armed": the action goes through a descriptor opened before.
  keepalive HPORT
      One HTTP/1.1 connection, opened at once and kept: reads commands from stdin and answers
      one line each. "infer MODEL" -> the status of a 1-row infer of zeros (width from the
      model's metadata, fetched over the same connection at the first infer); "ready MODEL V"
      -> the status of GET /v2/models/MODEL/versions/V/ready. The connection exists before the
      test takes tpud's descriptors away, so it keeps working when accept() cannot.
"""
import ctypes
import http.client
import json
import os
import select
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from export_model import write_model_dir  # noqa: E402


def mkmodel(args):
    opts = {"--hidden": "16", "--layers": "1", "--buckets": "1,8", "--pad": "0", "--seed": "1",
            "--precision": "fp32"}
    d = args[0]
    for i in range(1, len(args), 2):
        opts[args[i]] = args[i + 1]
    n_in, n_out = int(opts["--inputs"]), int(opts["--outputs"])
    hidden, nl = int(opts["--hidden"]), int(opts["--layers"])
    rng = np.random.default_rng(int(opts["--seed"]))
    widths = [n_in] + [hidden] * (nl - 1) + [n_out]
    tensors, layers = {}, []
    for i in range(nl):
        w = (rng.standard_normal((widths[i + 1], widths[i])) / np.sqrt(widths[i])).astype(np.float32)
        b = rng.standard_normal(widths[i + 1]).astype(np.float32) * np.float32(0.1)
        tensors[f"fc{i}.weight"], tensors[f"fc{i}.bias"] = w, b
        layers.append({"weight": f"fc{i}.weight", "bias": f"fc{i}.bias", "activation": "none"})
    pad = int(opts["--pad"])
    if pad:
        tensors["zpad"] = np.zeros(pad, dtype=np.uint8)
    buckets = [int(x) for x in opts["--buckets"].split(",")]
    write_model_dir(d, tensors, layers, n_in, n_out, precision=opts["--precision"],
                    buckets=buckets)
    np.savez(d.rstrip("/") + ".npz", **{k: v for k, v in tensors.items() if k != "zpad"})


def check(args):
    hport, model, version, npz = args
    t = np.load(npz)
    nl = len([k for k in t.files if k.endswith(".weight")])
    width = t["fc0.weight"].shape[1]
    x = np.random.default_rng(7).standard_normal((1, width)).astype(np.float32)
    y = x.astype(np.float64)
    for i in range(nl):
        y = y @ t[f"fc{i}.weight"].astype(np.float64).T + t[f"fc{i}.bias"]
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, width], "datatype": "FP32",
                                   "data": x.ravel().tolist()}]})
    c = http.client.HTTPConnection("127.0.0.1", int(hport), timeout=10)
    c.request("POST", f"/v2/models/{model}/versions/{version}/infer", body)
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        print(f"status {r.status}")
        return
    got = np.array(json.loads(data)["outputs"][0]["data"], dtype=np.float64)
    diff = float(np.max(np.abs(got - y.ravel())))
    print("same" if diff <= 1e-3 * max(1.0, float(np.max(np.abs(y)))) else f"differs {diff}")


IN_OPEN = 0x20


def on_open(args):
    path, action = args[0], args[1]
    # Our own descriptor, opened before the watch (so it is not the open we wait for), and used
    # for the action: the test renames the directory into place meanwhile.
    fd = os.open(path, os.O_RDWR)
    old = os.pread(fd, os.fstat(fd).st_size, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    ino = libc.inotify_init1(0)
    if ino < 0 or libc.inotify_add_watch(ino, path.encode(), IN_OPEN) < 0:
        sys.exit(f"inotify on {path}: errno {ctypes.get_errno()}")
    print("armed", flush=True)
    r, _, _ = select.select([ino], [], [], 60.0)
    if not r:
        sys.exit("nothing opened " + path)
    os.read(ino, 4096)
    if action == "truncate-rewrite":  # what cp does: O_TRUNC, then the bytes
        os.ftruncate(fd, 0)
        time.sleep(0.2)
        os.pwrite(fd, old, 0)
    elif action == "overwrite":  # the tensor's bytes in place: same size, new values
        tensor, delay_ms = args[2], int(args[3])
        time.sleep(delay_ms / 1000.0)
        n = struct.unpack("<Q", old[:8])[0]
        b, e = json.loads(old[8:8 + n])[tensor]["data_offsets"]
        vals = np.frombuffer(old[8 + n + b:8 + n + e], dtype="<f4")
        os.pwrite(fd, (vals * np.float32(-100)).astype("<f4").tobytes(), 8 + n + b)
    else:
        sys.exit("unknown action " + action)
    os.close(fd)
    print("acted", flush=True)


def keepalive(args):
    c = http.client.HTTPConnection("127.0.0.1", int(args[0]), timeout=10)
    c.connect()
    widths = {}
    for line in sys.stdin:
        w = line.split()
        try:
            if w[0] == "infer":
                if w[1] not in widths:
                    c.request("GET", f"/v2/models/{w[1]}")
                    r = c.getresponse()
                    meta = json.loads(r.read())
                    widths[w[1]] = meta["inputs"][0]["shape"][1]
                n = widths[w[1]]
                c.request("POST", f"/v2/models/{w[1]}/infer", json.dumps(
                    {"inputs": [{"name": "x", "shape": [1, n], "datatype": "FP32",
                                 "data": [0.0] * n}]}))
            else:
                c.request("GET", f"/v2/models/{w[1]}/versions/{w[2]}/ready")
            r = c.getresponse()
            r.read()
            print(r.status, flush=True)
        except Exception as e:  # the test reads one line per command, whatever happens
            print(f"error {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    {"mkmodel": mkmodel, "check": check, "on-open": on_open,
     "keepalive": keepalive}[sys.argv[1]](sys.argv[2:])
