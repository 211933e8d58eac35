#!/usr/bin/python3
"""Helpers for test_replay.sh (issue 21: payload capture and `tpuctl audit replay`).

    replay.py bodies SRC OUT           request bodies (OIP JSON) for the load: fraud and text
                                       rows from the fixtures' references, and marker.json, a
                                       digits request of distinctive values; marker.bin = the
                                       raw bytes of its input tensor
    replay.py grep PATTERN FILE...     exit 0 when the bytes of PATTERN (a file) occur in a FILE
    replay.py seqs LOG MODEL           seqs of MODEL's captured request records, one a line
    replay.py seq-of LOG REQUEST_ID    the seq of that request's record
    replay.py flip DIR LOG SEQ         flip one byte inside the payload entry of record SEQ
    replay.py repoint LOG SEQ OTHER    make record SEQ point at record OTHER's payload (reference
                                       and digest), its line re-hashed (plain SHA-256): a log a
                                       forger rewrote consistently, for replay to catch
    replay.py forge DIR LOG SEQ        a forger's consistent rewrite of record SEQ's answer: its
                                       first output value + 1 in the (clear) entry, the entry's
                                       digest, output_sha256 and the line's hash to match; only
                                       recomputing the answer can tell
    replay.py kernels LOG SEQ NAME     record SEQ says kernel set NAME (re-hashed)
    replay.py recheckpoint VDIR        rewrite the version's safetensors checkpoint with a
                                       metadata entry (same weights, other bytes) and model.json's
                                       sha256 to match: the checkpoint changed, loads, answers alike
"""

import hashlib
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from invariance import read_safetensors  # noqa: E402

HASH_SEP = ',"hash":"'


def tensor(name, a, dt):
    return {"name": name, "shape": list(a.shape), "datatype": dt,
            "data": a.reshape(-1).tolist()}


def bodies(src, out):
    os.makedirs(out, exist_ok=True)
    for m, rows in (("fraud", 4), ("text", 3)):
        ref = read_safetensors(os.path.join(src, "tests/data/onnx", m + "_op13", "1",
                                            "reference.safetensors"))
        ins = []
        for k in sorted(ref):
            if k.startswith("input."):
                a = ref[k][:rows]
                ins.append(tensor(k[6:], a, "INT64" if a.dtype == np.int64 else "FP32"))
        json.dump({"inputs": ins}, open(os.path.join(out, m + ".json"), "w"))
    # 2 rows of 64 values no model input would hold by chance
    marker = (np.arange(128, dtype=np.float32) * np.float32(0.731) + np.float32(1234.5)).reshape(2, 64)
    json.dump({"id": "marker", "inputs": [tensor("x", marker, "FP32")]},
              open(os.path.join(out, "marker.json"), "w"))
    open(os.path.join(out, "marker.bin"), "wb").write(marker.astype("<f4").tobytes())


def records(log):
    for line in open(log, encoding="utf-8"):
        line = line.rstrip("\n")
        if line:
            yield line, json.loads(line)


def rehash(line):
    cut = line.rindex(HASH_SEP)
    canon = line[:cut] + "}"
    return canon[:-1] + HASH_SEP + hashlib.sha256(canon.encode()).hexdigest() + '"}'


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "bodies":
        bodies(*args)
    elif cmd == "grep":
        pat = open(args[0], "rb").read()
        found = [f for f in args[1:] if pat in open(f, "rb").read()]
        print("found in: %s" % " ".join(found) if found else "not found")
        sys.exit(0 if found else 1)
    elif cmd == "seqs":
        for _, r in records(args[0]):
            if r["kind"] == "request" and r["model"] == args[1] and r.get("payload"):
                print(r["seq"])
    elif cmd == "seq-of":
        for _, r in records(args[0]):
            if r["kind"] == "request" and r["request_id"] == args[1]:
                print(r["seq"])
                return
        sys.exit(1)
    elif cmd == "flip":
        d, log, seq = args[0], args[1], int(args[2])
        r = next(r for _, r in records(log) if r["seq"] == seq)
        name, off = r["payload"].rsplit("@", 1)
        path = os.path.join(d, name)
        data = bytearray(open(path, "rb").read())
        (n,) = struct.unpack("<I", data[int(off) + 4:int(off) + 8])
        at = int(off) + 16 + n - 5  # inside the tensor bytes (or the GCM tag)
        data[at] ^= 0x01
        open(path, "wb").write(bytes(data))
    elif cmd == "repoint":
        log, seq, other = args[0], int(args[1]), int(args[2])
        lines = [l for l, _ in records(log)]
        src = next(r for _, r in records(log) if r["seq"] == other)
        out = []
        for l in lines:
            r = json.loads(l)
            if r["seq"] == seq:
                l = l.replace('"payload":"%s","payload_sha256":"%s"' % (r["payload"],
                                                                       r["payload_sha256"]),
                              '"payload":"%s","payload_sha256":"%s"' % (src["payload"],
                                                                       src["payload_sha256"]))
                l = rehash(l)
            out.append(l)
        open(log, "w").write("\n".join(out) + "\n")
    elif cmd == "forge":
        d, log, seq = args[0], args[1], int(args[2])
        r = next(r for _, r in records(log) if r["seq"] == seq)
        name, off = r["payload"].rsplit("@", 1)
        off = int(off)
        path = os.path.join(d, name)
        data = bytearray(open(path, "rb").read())
        (n,) = struct.unpack("<I", data[off + 4:off + 8])
        e = off + 16
        assert data[e + 5] == 0, "forge needs a clear entry"
        body = e + 32
        (hl,) = struct.unpack("<I", data[body:body + 4])
        head = json.loads(bytes(data[body + 4:body + 4 + hl]))
        t = body + 4 + hl + sum(x["bytes"] for x in head["inputs"])
        (v,) = struct.unpack("<f", data[t:t + 4])
        data[t:t + 4] = struct.pack("<f", v + 1.0)
        outs = bytes(data[t:t + sum(x["bytes"] for x in head["outputs"])])
        open(path, "wb").write(bytes(data))
        entry_sha = hashlib.sha256(bytes(data[e:e + n])).hexdigest()
        out_sha = hashlib.sha256(outs).hexdigest()
        lines = []
        for l, q in records(log):
            if q["seq"] == seq:
                l = l.replace('"output_sha256":"%s"' % q["output_sha256"], '"output_sha256":"%s"' % out_sha)
                l = l.replace('"payload_sha256":"%s"' % q["payload_sha256"], '"payload_sha256":"%s"' % entry_sha)
                l = rehash(l)
            lines.append(l)
        open(log, "w").write("\n".join(lines) + "\n")
    elif cmd == "kernels":
        log, seq, name = args[0], int(args[1]), args[2]
        lines = []
        for l, q in records(log):
            if q["seq"] == seq:
                l = rehash(l.replace('"kernels":"%s"' % q["kernels"], '"kernels":"%s"' % name))
            lines.append(l)
        open(log, "w").write("\n".join(lines) + "\n")
    elif cmd == "recheckpoint":
        vdir = args[0]
        mj = json.load(open(os.path.join(vdir, "model.json")))
        path = os.path.join(vdir, mj["checkpoint"]["file"])
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        head = json.loads(raw[8:8 + n])
        head["__metadata__"] = {"note": "re-exported"}
        h = json.dumps(head).encode()
        h += b" " * (-len(h) % 8)
        new = struct.pack("<Q", len(h)) + h + raw[8 + n:]
        open(path, "wb").write(new)
        mj["checkpoint"]["sha256"] = hashlib.sha256(new).hexdigest()
        json.dump(mj, open(os.path.join(vdir, "model.json"), "w"), indent=2)
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
