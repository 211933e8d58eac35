#!/bin/bash
# onnx_vs_ort.sh - tpud's ONNX path against ONNX Runtime, and against tpud's own dense chain, on
# the same files, in one run. Prints Markdown tables.
#
#   1. In-process, per model at batch 1 and batch 64: tpud (bench/onnx_bench: tpu_model_infer
#      after tpu_model_load, engine threads 1) and ONNX Runtime (bench/ort/ort_bench.js:
#      onnxruntime-node, CPU provider, intra_op and inter_op threads 1) on the same .onnx files
#      and the same input rows; each side's outputs are checked against the other's first. The
#      two run as separate processes, alternately (tpud, ORT, tpud, ORT, ... REPS of each) on a
#      shared machine; each number is the median over the REPS runs, and "ours/ORT" is the
#      median of the REPS paired ratios of speed (> 1: tpud is faster).
#   2. The same network as a dense chain (model.json layers + safetensors) and as an ONNX graph,
#      in one tpud process, timed in interleaved slices: "graph/dense" is the graph's speed over
#      the dense chain's (>= 1: the graph path is no slower), median of the REPS runs' ratios.
#   3. With SERVER=1 (the default): tpud over HTTP/1.1 JSON (bench/server_bench.sh: tpubench,
#      batching on, 1 and 64 connections) for mlp_bn as a dense chain (BatchNormalization folded)
#      and as the ONNX fixture, alternating run by run; tpud pinned to CPU 0 and tpubench to CPU 1
#      (SERVER_CPUS / CLIENT_CPUS; set them empty for no pinning).
#
# Models: tests/data/onnx/{mlp_bn,fraud,text}_op17, and from bench/onnx_bench_models.py (written
# into BUILD_DIR/onnx_bench_models): digits (models/digits/1 and the same weights as ONNX), a
# 256 -> 1024 -> 1024 -> 256 ReLU MLP (random, fixed seed) in both forms, mlp_bn folded.
#
# usage: bench/onnx_vs_ort.sh [BUILD_DIR] [SRC_DIR]     (make bench runs it; BUILD_DIR=build)
# env:   REPS (default 5), SLICES (per process, default 5), SLICE_MS (default 40),
#        SERVER (1: also part 3; 0: in-process only), DUR / SERVER_REPS (part 3: 5 s, 3 runs)
# Needs: BUILD_DIR/bench/onnx_bench (cmake -DTPUD_BUILD_BENCH=ON), /usr/bin/python3 with
# python3-onnx and numpy, node >= 18 and npm (onnxruntime-node is installed under bench/ort from
# its package-lock.json on first use, with ONNXRUNTIME_NODE_INSTALL=skip: the CPU binaries are
# in the package; its install script would only fetch GPU ones).
set -eu
BUILD=${1:-build}
SRC=${2:-.}
REPS=${REPS:-5}
SLICES=${SLICES:-5}
SLICE_MS=${SLICE_MS:-40}
SERVER=${SERVER:-1}
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
BENCH=$BUILD/bench/onnx_bench
[ -x "$BENCH" ] || { echo "$BENCH not built (cmake -DTPUD_BUILD_BENCH=ON)" >&2; exit 1; }
command -v node >/dev/null ||
  { echo "onnx_vs_ort: node missing (deploy/deps.sh bench)" >&2; exit 1; }
ORTDIR=$SRC/bench/ort
if ! (cd "$ORTDIR" && node -e "require('onnxruntime-node')" 2>/dev/null); then
  echo "onnx_vs_ort: installing onnxruntime-node under $ORTDIR" >&2
  (cd "$ORTDIR" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund >&2)
  (cd "$ORTDIR" && node -e "require('onnxruntime-node')") ||
    { echo "onnx_vs_ort: onnxruntime-node does not load" >&2; exit 1; }
fi

GEN=$BUILD/onnx_bench_models
rm -rf "$GEN"
$PY "$SRC/bench/onnx_bench_models.py" "$GEN" >&2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/io"
FIX=$SRC/tests/data/onnx
# name=version dir; the ONNX ones also run under ORT (model.onnx in the same directory)
DENSE="digits_dense=$GEN/digits_dense/1 big_dense=$GEN/big_dense/1 mlp_bn_dense=$GEN/mlp_bn_dense/1"
ONNX="digits_onnx=$GEN/digits_onnx/1 big_onnx=$GEN/big_onnx/1 mlp_bn_op17=$FIX/mlp_bn_op17/1
      fraud_op17=$FIX/fraud_op17/1 text_op17=$FIX/text_op17/1"
ORT_ARGS=
for m in $ONNX; do ORT_ARGS="$ORT_ARGS ${m%%=*}=$(realpath "${m#*=}/model.onnx")"; done
ORT_ARGS="$ORT_ARGS floor=$(realpath "$GEN/floor.onnx")"
PAIRS="--pair digits_dense,digits_onnx --pair big_dense,big_onnx --pair mlp_bn_dense,mlp_bn_op17"

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$REPS"); do
  io=; [ "$r" = 1 ] && io="--io $WORK/io"
  # shellcheck disable=SC2086
  "$BENCH" --threads 1 --batches 1,64 --slices "$SLICES" --slice-ms "$SLICE_MS" $io $PAIRS \
    $DENSE $ONNX > "$WORK/tpud.$r.jsonl" 2> "$WORK/tpud.err" ||
    { cat "$WORK/tpud.err" "$WORK/tpud.$r.jsonl" >&2; echo "onnx_bench failed" >&2; exit 1; }
  # shellcheck disable=SC2086
  (cd "$ORTDIR" && node ort_bench.js "$WORK/io" "$SLICES" "$SLICE_MS" 1,64 $ORT_ARGS) \
    > "$WORK/ort.$r.jsonl" ||
    { cat "$WORK/ort.$r.jsonl" >&2; echo "ort_bench failed" >&2; exit 1; }
  echo "onnx_vs_ort: run $r of $REPS done" >&2
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
ORTV=$(cd "$ORTDIR" && node -p "require('onnxruntime-node').env.versions.common")
ISA=$(sed -n 's/^onnx_bench: engine threads 1: //p' "$WORK/tpud.err")
echo "#### tpud ONNX vs ONNX Runtime, in-process ($(date -u '+%F %H:%M UTC'))"
echo
echo "$CPU, $(nproc) vCPUs, load average $LOAD0 at start, $LOAD1 at end; tpud engine threads 1" \
  "($ISA); ONNX Runtime $ORTV" \
  "(onnxruntime-node, CPU provider, intra_op = inter_op = 1 thread, Node $(node --version))." \
  "Median of $REPS alternating runs (tpud, ORT, tpud, ...), each the median of $SLICES" \
  "interleaved ${SLICE_MS} ms slices; ours/ORT and graph/dense are speed ratios" \
  "(> 1: the first is faster)."
echo
$PY - "$WORK" "$REPS" <<'PYEOF'
import json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
runs = {"tpud": [], "ort": []}
checks, pairs = {}, {}
for r in range(1, reps + 1):
    for side in ("tpud", "ort"):
        d = {}
        for line in open(f"{work}/{side}.{r}.jsonl"):
            j = json.loads(line)
            if j["side"] in ("tpud", "ort"):
                d[(j["model"], j["batch"])] = j["ns"]
            elif j["side"] == "ort_check":
                checks[j["model"]] = j["max_abs_diff"]
            elif j["side"] == "pair":
                pairs[(j["a"], j["b"])] = j["max_abs_diff"]
        runs[side].append(d)
med = statistics.median

def cell(side, key):
    return med(run[key] for run in runs[side])

def ratio(a_side, a_key, b_side, b_key):  # speed of a over b, median of the paired runs
    v = sorted(runs[b_side][i][b_key] / runs[a_side][i][a_key] for i in range(reps))
    return med(v), v[0], v[-1]

def us(ns):
    return f"{ns / 1000:.2f}" if ns < 100e3 else f"{ns / 1000:.0f}"

def rows_s(ns, b):
    x = b / ns * 1e9
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"

keys = sorted((k for k in runs["ort"][0] if k[0] != "floor"),
              key=lambda k: (k[1], list(runs["ort"][0]).index(k)))
print("| model | batch | tpud µs/call | tpud rows/s | ORT µs/call | ORT rows/s "
      "| ours/ORT (range) | max diff vs ORT |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for m, b in keys:
    t, o = cell("tpud", (m, b)), cell("ort", (m, b))
    q, lo, hi = ratio("tpud", (m, b), "ort", (m, b))
    print(f"| {m} | {b} | {us(t)} | {rows_s(t, b)} | {us(o)} | {rows_s(o, b)} "
          f"| **{q:.2f}** ({lo:.2f}–{hi:.2f}) | {checks.get(m, float('nan')):.1e} |")
floor = {b: cell("ort", ("floor", b)) for b in sorted({k[1] for k in keys})}
print()
print("ORT's per-call floor (`await session.run` of one Identity node, the Node binding and "
      "promise included): " + ", ".join(f"{us(v)} µs at batch {b}" for b, v in floor.items()) +
      "; at batch 1 it is most of ORT's time on the small models.")
print()
print("#### tpud dense chain vs the same network through the ONNX graph path, in-process")
print()
print("| network | batch | dense µs/call | graph µs/call | graph/dense (range) | max diff |")
print("|---|---:|---:|---:|---:|---:|")
for b in sorted({k[1] for k in keys}):
    for (a, g), diff in pairs.items():
        d, t = cell("tpud", (a, b)), cell("tpud", (g, b))
        q, lo, hi = ratio("tpud", (g, b), "tpud", (a, b))
        name = a.replace("_dense", "")
        print(f"| {name} ({a} / {g}) | {b} | {us(d)} | {us(t)} | **{q:.2f}** ({lo:.2f}–{hi:.2f}) "
              f"| {diff:.1e} |")
PYEOF

[ "$SERVER" = 1 ] || exit 0
# Part 3: bench/server_bench.sh reads $SRC/models/$MODEL and sources $SRC/tests/integration;
# a source tree of links gives it the generated models.
SRV=$WORK/srv
mkdir -p "$SRV/models"
ln -s "$(realpath "$SRC/tests")" "$SRV/tests"
ln -s "$(realpath "$GEN/mlp_bn_dense")" "$SRV/models/mlp_bn_dense"
ln -s "$(realpath "$GEN/mlp_bn_onnx")" "$SRV/models/mlp_bn_onnx"
for r in $(seq 1 "${SERVER_REPS:-3}"); do
  for m in mlp_bn_dense mlp_bn_onnx; do
    SERVER_CPUS=${SERVER_CPUS-0} CLIENT_CPUS=${CLIENT_CPUS-1} MODEL=$m PROTOS=http MODES=on \
      CONNS="1 64" REPS=1 DUR=${DUR:-5} THREADS=1 IO_THREADS=1 \
      "$SRC/bench/server_bench.sh" "$BUILD" "$SRV" 2>/dev/null | grep '^http' |
      sed "s/^/$m /" >> "$WORK/server.txt" || true
  done
  echo "onnx_vs_ort: server run $r done" >&2
done
echo
echo "#### tpud over HTTP/1.1 JSON: mlp_bn as a dense chain vs as ONNX ($(date -u '+%F %H:%M UTC'))"
echo
echo "bench/server_bench.sh (tpubench, one request of 1 row at a time per connection, batching" \
  "on, --threads 1 --io-threads 1; tpud pinned to CPU ${SERVER_CPUS-0}, tpubench to" \
  "CPU ${CLIENT_CPUS-1}), ${DUR:-5} s per run," \
  "median of ${SERVER_REPS:-3} alternating runs; cpu µs = tpud's CPU time per request."
echo
$PY - "$WORK/server.txt" <<'PYEOF'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    f = line.replace("|", " ").split()
    # model http on CONNS req/s p50 p99 cpu
    if len(f) < 8:
        continue
    cells.setdefault((f[0], int(f[3])), []).append([float(x) for x in f[4:8]])
print("| conns | dense req/s | ONNX req/s | ONNX/dense | dense p50 ms | ONNX p50 ms "
      "| dense cpu µs/req | ONNX cpu µs/req |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in sorted({k[1] for k in cells}):
    d = cells.get(("mlp_bn_dense", c)); o = cells.get(("mlp_bn_onnx", c))
    if not d or not o:
        continue
    md = [statistics.median(x[i] for x in d) for i in range(4)]
    mo = [statistics.median(x[i] for x in o) for i in range(4)]
    print(f"| {c} | {md[0]:.0f} | {mo[0]:.0f} | {mo[0] / md[0]:.2f} | {md[1]:.3f} | {mo[1]:.3f} "
          f"| {md[3]:.1f} | {mo[3]:.1f} |")
PYEOF
