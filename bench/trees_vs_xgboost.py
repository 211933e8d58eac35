#!/usr/bin/python3
"""tpud's tree ensembles against XGBoost's own CPU predictor, same models, same rows, one run.

usage: bench/trees_vs_xgboost.py BUILD_DIR [--reps N] [--quick] [--no-server] [--json FILE]

1. Models: XGBoost 1.7 (Debian's python3-xgboost) binary:logistic boosters trained here on
   fraud-like data (20 features of mixed scale, 10% missing, about 5% positives) at depth 3
   (100 trees), 6 (200) and 10 (500); --quick: depth 3 (50) and 6 (100). Each is saved with
   Booster.save_model and served by tpud as "format": "xgboost" (buckets 1, 64, 1024).
2. In-process, one thread each, at batch 1, 64 and 1024: tpud through bench/onnx_bench
   (tpu_model_infer after tpu_model_load: the compiled tree program, the strategy it chose
   per bucket, and each strategy forced with TPUD_TREE_STRATEGY=walk|levels|gemm) and XGBoost's
   Booster.inplace_predict (nthread 1, predict_type "value") on a pre-built float32 array of the
   same rows (onnx_bench's generator, re-created here), timed in groups of calls so Python's
   per-call overhead is as small as it gets; the rows' outputs are first checked equal (tpud's
   --io rows against inplace_predict). The two sides run alternately, --reps times each;
   numbers are medians, "tpud/XGB" the median of the paired speed ratios (> 1: tpud faster).
3. With the server part (default): tpud serving the depth-6 model, tpubench closed loop over
   the native protocol and HTTP JSON, 1 and 64 connections, batch 1, 5 s: requests/s and p99.

Prints Markdown tables (and --json FILE: every number). Needs BUILD_DIR/bench/onnx_bench
(cmake -DTPUD_BUILD_BENCH=ON), BUILD_DIR/server/tpud and BUILD_DIR/client/tpubench.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import xgboost as xgb

BATCHES = (1, 64, 1024)
NFEAT = 20


def fraud_data(rng, n):
    x = (rng.normal(size=(n, NFEAT)) * np.linspace(0.5, 3, NFEAT)).astype(np.float32)
    z = np.nan_to_num(x)
    s = 1.3 * z[:, 0] - 0.8 * z[:, 1] + 0.5 * z[:, 2] * z[:, 3] + 0.3 * np.abs(z[:, 4]) + \
        rng.normal(size=n) * 0.7
    y = (s > np.quantile(s, 0.95)).astype(np.float32)
    x[rng.random(size=x.shape) < 0.10] = np.nan
    return x, y


def train(out, name, depth, trees):
    rng = np.random.default_rng(depth * 1000 + trees)
    x, y = fraud_data(rng, 20000)
    b = xgb.train({"objective": "binary:logistic", "max_depth": depth, "eta": 0.1,
                   "nthread": 2, "seed": 1, "base_score": 0.05},
                  xgb.DMatrix(x, label=y), trees)
    d = os.path.join(out, name, "1")
    os.makedirs(d)
    path = os.path.join(d, "xgboost.json")
    b.save_model(path)
    import hashlib
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    with open(os.path.join(d, "model.json"), "w") as f:
        json.dump({"format": "xgboost", "checkpoint": {"file": "xgboost.json", "sha256": sha},
                   "batching": {"max_batch_size": 1024, "buckets": list(BATCHES),
                                "max_queue_delay_us": 200}}, f)
    return d


def onnx_bench_rows(n):
    """onnx_bench's inputs (make_inputs: splitmix64 from 12345, uniform [-2, 2) floats, one
    FP32 input of NFEAT columns, row-major), re-created so both sides see the same rows."""
    m = (1 << 64) - 1
    st = 12345
    out = np.empty(n * NFEAT, dtype=np.float32)
    for i in range(n * NFEAT):
        st = (st + 0x9E3779B97F4A7C15) & m
        z = st
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        z ^= z >> 31
        out[i] = np.float32((z >> 11) * 2.0 ** -53 * 4.0 - 2.0)
    return out.reshape(n, NFEAT)


def run_tpud(bench, models, strategy, io=None, describe=False):
    env = dict(os.environ)
    env.pop("TPUD_TREE_STRATEGY", None)
    if strategy != "auto":
        env["TPUD_TREE_STRATEGY"] = strategy
    cmd = [bench, "--threads", "1", "--batches", ",".join(map(str, BATCHES)), "--slices", "3",
           "--slice-ms", "60"] + [f"{n}={d}" for n, d in models.items()]
    if io:
        cmd += ["--io", io]
    if describe:
        cmd += ["--describe"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    ns = {}
    for line in p.stdout.splitlines():
        r = json.loads(line)
        if r.get("side") == "tpud":
            ns[(r["model"], r["batch"])] = r["ns"]
    return ns, p.stderr


def time_xgb(booster, x, batch, budget_s=0.18):
    """ns per inplace_predict call of `batch` rows, median over 3 slices of grouped calls."""
    xb = np.ascontiguousarray(x[:batch])
    booster.inplace_predict(xb)  # warm-up
    t0 = time.perf_counter()
    calls = 0
    while time.perf_counter() - t0 < 0.02:
        booster.inplace_predict(xb)
        calls += 1
    group = max(1, calls)
    slices = []
    for _ in range(3):
        done, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < budget_s / 3:
            for _ in range(group):
                booster.inplace_predict(xb)
            done += group
        slices.append((time.perf_counter() - t0) / done * 1e9)
    return statistics.median(slices)


def server_part(build, models_dir, model):
    tpud = os.path.join(build, "server", "tpud")
    tpubench = os.path.join(build, "client", "tpubench")
    log = tempfile.NamedTemporaryFile(prefix="tpud-", suffix=".log", delete=False)
    p = subprocess.Popen([tpud, "--models", models_dir, "--port", "0", "--http-port", "0",
                          "--poll-seconds", "0"], stderr=log)
    try:
        nport = hport = None
        for _ in range(200):
            time.sleep(0.05)
            txt = open(log.name).read()
            m1 = re.search(r"listening on [^ ]*:(\d+) \(native", txt)
            m2 = re.search(r"listening on [^ ]*:(\d+) \(http", txt)
            if m1 and m2 and f"'{model}' version 1: ready" in txt:
                nport, hport = m1.group(1), m2.group(1)
                break
        if not nport:
            raise SystemExit("tpud did not come up: " + open(log.name).read()[-2000:])
        rows = []
        for proto, port in (("native", nport), ("http", hport)):
            for conns in (1, 64):
                r = subprocess.run([tpubench, "--addr", f"127.0.0.1:{port}", "--protocol", proto,
                                    "--model", model, "--batch", "1", "-c", str(conns), "-d",
                                    "5", "--json"], capture_output=True, text=True, check=True)
                j = json.loads(r.stdout)
                rows.append((proto, conns, j))
        return rows
    finally:
        p.terminate()
        p.wait()
        os.unlink(log.name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    bench = os.path.join(a.build, "bench", "onnx_bench")
    if not os.access(bench, os.X_OK):
        raise SystemExit(f"{bench} not built (cmake -DTPUD_BUILD_BENCH=ON)")
    grid = [(3, 50), (6, 100)] if a.quick else [(3, 100), (6, 200), (10, 500)]
    work = tempfile.mkdtemp(prefix="trees-bench-")
    try:
        models, boosters = {}, {}
        for depth, trees in grid:
            name = f"d{depth}_t{trees}"
            t0 = time.time()
            models[name] = train(work, name, depth, trees)
            b = xgb.Booster(model_file=os.path.join(models[name], "xgboost.json"))
            b.set_param({"nthread": 1})
            boosters[name] = b
            print(f"trained {name} in {time.time() - t0:.1f} s", file=sys.stderr)
        x = onnx_bench_rows(max(BATCHES))
        # the same answers first: tpud's 64 --io rows against inplace_predict on them
        io = os.path.join(work, "io")
        os.makedirs(io)
        _, desc = run_tpud(bench, models, "auto", io=io, describe=True)
        for name in models:
            man = json.load(open(os.path.join(io, f"{name}.json")))
            xin = np.fromfile(os.path.join(io, man["inputs"][0]["file"]), dtype="<f4")
            xin = xin.reshape(64, NFEAT)
            if not np.array_equal(xin, x[:64]):
                raise SystemExit("onnx_bench's rows are not the ones re-created here")
            out = {o["name"]: np.fromfile(os.path.join(io, o["file"]), dtype="<f4")
                   for o in man["outputs64"]}
            want = boosters[name].inplace_predict(xin, predict_type="margin")
            if not np.array_equal(out["margin"], want.astype(np.float32)):
                raise SystemExit(f"{name}: tpud's margins differ from XGBoost's")
        choice, nogemm = {}, {}
        for line in desc.splitlines():
            m = re.search(r"(\d+) trees.*; no gemm: ([^;]*)", line)
            if m:
                nogemm[int(m.group(1))] = m.group(2).strip()
            m = re.search(r"(\d+) trees.*exact, (levels|node walk|gemm)", line)
            if m:
                choice.setdefault(int(m.group(1)), []).append(m.group(2))
        res = {}
        for rep in range(a.reps):
            for strategy in ("auto", "walk", "levels", "gemm"):
                ns, _ = run_tpud(bench, models, strategy)
                for k, v in ns.items():
                    res.setdefault(("tpud", strategy) + k, []).append(v)
            for name, b in boosters.items():
                for bt in BATCHES:
                    res.setdefault(("xgb", "-", name, bt), []).append(time_xgb(b, x, bt))
            print(f"rep {rep + 1}/{a.reps} done", file=sys.stderr)
        lines = ["| model | batch | tpud rows/s (chosen) | walk | levels | gemm | XGBoost rows/s | "
                 "tpud/XGB |", "|---|---|---|---|---|---|---|---|"]
        table = []
        for name in models:
            trees = int(name.split("_t")[1])
            for i, bt in enumerate(BATCHES):
                med = {s: statistics.median(res[("tpud", s, name, bt)])
                       for s in ("auto", "walk", "levels", "gemm")}
                xg = statistics.median(res[("xgb", "-", name, bt)])
                ratio = statistics.median(x_ / t_ for x_, t_ in
                                          zip(res[("xgb", "-", name, bt)],
                                              res[("tpud", "auto", name, bt)]))
                ch = choice.get(trees, ["?"] * 3)
                ch = ch[i] if i < len(ch) else "?"
                rps = {s: bt / v * 1e9 for s, v in med.items()}
                gm = f"n/a ({nogemm[trees]})" if trees in nogemm else f"{rps['gemm']:,.0f}"
                lines.append(f"| {name} | {bt} | {rps['auto']:,.0f} ({ch}) | {rps['walk']:,.0f}"
                             f" | {rps['levels']:,.0f} | {gm} | {bt / xg * 1e9:,.0f}"
                             f" | {ratio:.2f} |")
                table.append({"model": name, "batch": bt, "tpud_ns": med, "xgb_ns": xg,
                              "ratio": ratio, "chosen": ch})
        print("\n".join(lines))
        out = {"inprocess": table}
        if not a.no_server:
            mid = [n for n in models if n.startswith("d6")][0]
            srv = server_part(a.build, work, mid)
            print(f"\nServer, {mid}, batch 1, 5 s per run:\n")
            print("| protocol | connections | req/s | p50 us | p99 us |\n|---|---|---|---|---|")
            for proto, conns, j in srv:
                lat = j["latency_ms"]
                print(f"| {proto} | {conns} | {j['throughput_rps']:,.0f} | "
                      f"{lat['p50'] * 1000:.0f} | {lat['p99'] * 1000:.0f} |")
            out["server"] = [{"protocol": p_, "connections": c, "rps": j["throughput_rps"],
                              "latency_ms": j["latency_ms"]} for p_, c, j in srv]
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
