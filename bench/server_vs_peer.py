#!/usr/bin/python3
"""Helpers of bench/server_vs_peer.sh: request bodies, the answer check, wrk's output, tables.

    server_vs_peer.py bodies DIR MODEL_JSON NAME BATCH...  write NAME.bBATCH.{json,bin,bin.hlen}
    server_vs_peer.py check [--no-limit] JSON_ANSWER... [--binary BIN_ANSWER HLEN]
                      largest difference between answers (the first is the reference), exits 1
                      above 1e-4 (never with --no-limit); a binary answer must equal the second
                      JSON answer (tpud's) exactly
    server_vs_peer.py wrk                                  wrk --latency output on stdin -> JSON
    server_vs_peer.py tables RUNS_FILE                     Markdown tables from the runs

Bodies hold one fixed set of rows (numpy seed 7, uniform 0..1): the JSON body's numbers are
float32 values written with 9 significant digits (they read back to the same float32), the
binary body (OIP binary tensor extension) has the same bits after its JSON header and asks for
the output in binary too.
"""

import json
import re
import statistics
import struct
import sys

import numpy as np


def bodies(out, model_json, name, batches):
    spec = json.load(open(model_json))
    inp, outp = spec["inputs"][0], spec["outputs"][0]
    width = inp["shape"][1]
    rng = np.random.default_rng(7)
    for b in batches:
        x = rng.random((b, width), dtype=np.float32)
        data = ",".join("%.9g" % v for v in x.ravel())
        base = "%s/%s.b%d" % (out, name, b)
        with open(base + ".json", "w") as f:
            f.write('{"inputs":[{"name":"%s","shape":[%d,%d],"datatype":"FP32","data":[%s]}]}'
                    % (inp["name"], b, width, data))
        head = json.dumps({"inputs": [{"name": inp["name"], "shape": [b, width], "datatype": "FP32",
                                       "parameters": {"binary_data_size": x.nbytes}}],
                           "outputs": [{"name": outp["name"], "parameters": {"binary_data": True}}]},
                          separators=(",", ":")).encode()
        with open(base + ".bin", "wb") as f:
            f.write(head + x.astype("<f4").tobytes())
        with open(base + ".bin.hlen", "w") as f:
            f.write("%d\n" % len(head))


def json_values(path):
    j = json.load(open(path))
    if "outputs" not in j:
        sys.exit("%s: not an answer: %s" % (path, json.dumps(j)[:300]))
    return np.array(j["outputs"][0]["data"], dtype=np.float64).ravel()


def check(args):
    binary = None
    limit = 1e-4
    if "--no-limit" in args:
        args = [a for a in args if a != "--no-limit"]
        limit = float("inf")
    if "--binary" in args:
        i = args.index("--binary")
        binary = (args[i + 1], int(args[i + 2]))
        args = args[:i]
    ref = json_values(args[0])
    worst = 0.0
    for p in args[1:]:
        v = json_values(p)
        if v.shape != ref.shape:
            sys.exit("%s: %d values, %s has %d" % (p, v.size, args[0], ref.size))
        worst = max(worst, float(np.max(np.abs(v - ref))))
    if binary:
        raw = open(binary[0], "rb").read()
        head = json.loads(raw[:binary[1]])
        size = head["outputs"][0]["parameters"]["binary_data_size"]
        got = np.frombuffer(raw[binary[1]:binary[1] + size], dtype="<f4")
        want = json_values(args[1]).astype(np.float32)
        if got.shape != want.shape or not np.array_equal(got, want):
            sys.exit("%s: the binary answer differs from the JSON one" % binary[0])
    print("%.1e" % worst)
    if worst > limit:
        sys.exit("answers differ by %.3g" % worst)


def parse_time(s):
    m = re.match(r"([0-9.]+)(us|ms|s|m)$", s)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[m.group(2)]


def wrk():
    text = sys.stdin.read()
    r = {}
    m = re.search(r"Requests/sec:\s+([0-9.]+)", text)
    n = re.search(r"(\d+) requests in ([0-9.]+)(us|ms|s|m)", text)
    if not m or not n:
        print(json.dumps({"error": text.strip()[-300:]}))
        return
    r["throughput_rps"] = float(m.group(1))
    r["requests"] = int(n.group(1))
    lat = {}
    for q, v in re.findall(r"^\s+(50|99)%\s+(\S+)", text, re.M):
        lat["p" + q] = parse_time(v)
    r["latency_ms"] = lat
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    r["errors"] = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
    print(json.dumps(r))


def med(v):
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def tables(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    cells = {}
    for r in runs:
        cells.setdefault((r["model"], r["batch"], r["conns"]), []).append(r)
    print("| model | rows/request | conns | server | protocol | precision | req/s | p50 ms | p99 ms "
          "| req/s vs peer | p99 vs peer | server CPU µs/req | context switches/req |")
    print("|---|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in cells:
        rs = cells[key]
        peer = {r["rep"]: r for r in rs if r["server"] == "peer" and "throughput_rps" in r}
        order = []
        for r in rs:
            k = (r["server"], r["protocol"], r["precision"])
            if k not in order:
                order.append(k)
        for k in order:
            mine = [r for r in rs if (r["server"], r["protocol"], r["precision"]) == k]
            ok = [r for r in mine if "throughput_rps" in r]
            errs = sum(r.get("errors", 0) for r in ok) + (len(mine) - len(ok))
            rps = med([r["throughput_rps"] for r in ok])
            p50 = med([r["latency_ms"].get("p50", float("nan")) for r in ok])
            p99 = med([r["latency_ms"].get("p99", float("nan")) for r in ok])
            cpu = med([r["cpu_us"] / r["requests"] for r in ok if r["requests"]])
            csw = med([r["ctxsw"] / r["requests"] for r in ok if r["requests"]])
            if k[0] == "peer":
                ratio = p99r = "1"
            else:
                x = [r["throughput_rps"] / peer[r["rep"]]["throughput_rps"] for r in ok if r["rep"] in peer]
                y = [r["latency_ms"]["p99"] / peer[r["rep"]]["latency_ms"]["p99"] for r in ok
                     if r["rep"] in peer]
                ratio = "**%.2f**" % med(x) if x else "-"
                p99r = "%.2f" % med(y) if y else "-"
            note = " (%d errors)" % errs if errs else ""
            print("| %s | %d | %d | %s | %s | %s | %.0f%s | %.3f | %.3f | %s | %s | %.1f | %.2f |"
                  % (key[0], key[1], key[2], k[0], k[1], k[2], rps, note, p50, p99, ratio, p99r,
                     cpu, csw))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "bodies":
        bodies(args[0], args[1], args[2], [int(b) for b in args[3:]])
    elif cmd == "check":
        check(args)
    elif cmd == "wrk":
        wrk()
    elif cmd == "tables":
        tables(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
