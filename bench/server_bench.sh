#!/bin/bash
# server_bench.sh - tpud end to end: the framed native protocol and HTTP with tpubench, gRPC
# (HTTP/2 on the native port) with h2load (nghttp2-client: deploy/deps.sh bench), at 1, 8 and 64
# connections (one request at a time on each: gRPC's 64 is 64 connections with one stream
# each), with the model's batching on and off ("off" = a temporary copy of the model with
# max_batch_size 1 and buckets [1]). Prints one table row per cell: the median over REPS runs of
# throughput, p50 and p99. gRPC requests are one fixed random input (h2load sends one body);
# its percentiles come from h2load's per-request log, so the three protocols are measured alike
# from the client's side.
#
# usage: bench/server_bench.sh [BUILD_DIR] [SRC_DIR]
# env:   DUR (s, default 5), REPS (default 3), CONNS ("1 8 64"), PROTOS ("http native"),
#        MODES ("on off"), PROTOS ("http native grpc"), IO_THREADS (default 1), THREADS (default 1),
#        SERVER_CPUS / CLIENT_CPUS (taskset lists; default: no pinning), MODEL (default digits),
#        BUILDS (several build dirs: A/B comparison, their runs interleaved one by one so a
#        shared machine's load hits them alike; tpubench is the first one's)
# Columns: median req/s, p50, p99 and "cpu us" = tpud's CPU time (user + system, from
# /proc/PID/stat, warm-up included) per request: on a machine shared with other work this is
# the steadier measure of the server's cost; req/s moves with whatever else runs.
# Client and server share the machine: on a 2-core box the numbers include the client's cost.
# Measured 2026-11-29, AMD EPYC, 2 vCPUs shared with other sessions' builds and tests (load
# average 6-9 throughout: every number here is perturbed, req/s most; "cpu us" = tpud CPU per
# request is the steadier one). --threads 1 --io-threads 1, digits, DUR 5, REPS 3 (medians),
# before and after interleaved run by run (BUILDS="before after"). "before" = commit 86ce02c;
# "after" = single-pass FP32 JSON parser, one wake-up per batch's completions, condvar signalled
# after unlock, no printf on the serving path (the tree also held TLS work in progress). Pinned: SERVER_CPUS=0 CLIENT_CPUS=1 (tpud's I/O
# and batcher threads share CPU 0); unpinned: req/s only.
#                           pinned                                             unpinned
#   protocol batch conns |  before req/s  after req/s  p50 ms  p99 ms  cpu us/req | before  after
#   http     on       1  |     2744          3059      0.156   3.736  179 -> 119  |   5666   7647
#   http     on       8  |    11667         17440      0.219   5.112   50 -> 28   |   9025  16498
#   http     on      64  |    15800         31690      1.065   8.913   40 -> 16   |  12173  20572
#   native   on       1  |     2928          2985      0.166   4.325  132 -> 131  |   3986   5773
#   native   on       8  |    14690         14662      0.256   5.439   32 -> 32   |  15452   7524*
#   native   on      64  |    21138         24190      1.671   9.961   30 -> 25   |  16542  17694
#   http     off      1  |     2708          3282      0.156   4.260  169 -> 130  |   2476   2720
#   http     off      8  |     9042         14822      0.250   5.308   58 -> 32   |   8837   9994
#   http     off     64  |    10672         19204      2.818  10.879   71 -> 33   |  11145  19479
#   native   off      1  |     3634          3650      0.188   1.966  156 -> 140  |   3465   2567
#   native   off      8  |    12944         13725      0.381   4.391   56 -> 52   |   7905  11697
#   native   off     64  |    14211         14560      4.260  12.190   44 -> 37   |  17618  17034
# (*) noise: a rerun of that cell, pinned, 3 interleaved pairs: before 7.0/9.5/19.7k, after
# 8.9/22.2/23.3k req/s at the same CPU per request (36-41 us). The native path's code is
# nearly unchanged (wake-ups only); its cost is libevent's bufferevent (an epoll_ctl per answer,
# an FIONREAD ioctl per read), which the HTTP path's own connection code does not pay.
# Since then both ports share that connection code (server/sock.c). Measured 2026-11-29, same
# machine, quiet for once (load average 1.5-2), pinned, batching on, DUR 5, REPS 3, interleaved;
# before = main 1bba5cf (bufferevents on the native port), after = sock.c:
#                 req/s before -> after     tpud cpu us/req before -> after
#   native  1      16931 -> 16478              44.1 -> 44.7
#   native  8      43627 -> 58098              22.8 -> 17.0
#   native 64      38310 -> 63969              26.0 -> 15.6
#   grpc    1      12733 -> 13687              48.8 -> 40.0
#   grpc    8      20940 -> 22912              39.4 -> 34.4
#   grpc   64      34856 -> 33007              26.9 -> 21.8
#   http    1      18218 -> 18224              37.9 -> 38.2   (http.c's I/O moved, unchanged)
#   http    8      47874 -> 51552              19.7 -> 19.2
#   http   64      61164 -> 60324              16.2 -> 16.5
# (An earlier run under load average 7-9 gave the same cpu us picture: native 64 27.0 -> 16.8,
# grpc 64 33.0 -> 23.1.) strace at 8 native connections: per request 1 writev + 1 read, no
# epoll_ctl, no ioctl (before: 1 writev, 1 readv, 1 FIONREAD ioctl, 2 epoll_ctl); perf at 64:
# epoll_ctl (11% of tpud's samples, children) and ioctl (4.7%) are gone.
set -u
BUILD=${1:-build-fast}
SRC=${2:-.}
BUILDS=${BUILDS:-$BUILD}
set -- $BUILDS
BENCH=$1/client/tpubench
DUR=${DUR:-5}
REPS=${REPS:-3}
CONNS=${CONNS:-"1 8 64"}
PROTOS=${PROTOS:-"http native grpc"}
MODES=${MODES:-"on off"}
MODEL=${MODEL:-digits}
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
for b in $BUILDS; do [ -x "$b/server/tpud" ] || { echo "$b/server/tpud not built" >&2; exit 1; }; done
[ -x "$BENCH" ] || { echo "$BENCH not built" >&2; exit 1; }
case " $PROTOS " in *" grpc "*)
  command -v h2load >/dev/null || { echo "h2load missing: deploy/deps.sh bench" >&2; exit 1; } ;;
esac
SPIN=; CPIN=
[ -n "${SERVER_CPUS:-}" ] && SPIN="taskset -c $SERVER_CPUS"
[ -n "${CLIENT_CPUS:-}" ] && CPIN="taskset -c $CLIENT_CPUS"

. "$SRC/tests/integration/lib.sh" # tpud_ports
WORK=$(mktemp -d)
PIDS=
trap 'for p in $PIDS; do kill $p 2>/dev/null; done; rm -rf "$WORK"' EXIT

start() { # start REPO TPUD TAG: starts tpud on free ports; sets PID_TAG, HPORT_TAG, NPORT_TAG
  local log=$WORK/tpud.$3.log pid h= n=
  $SPIN "$2" --models "$1" --port 0 --http-port 0 --io-threads "${IO_THREADS:-1}" \
    --threads "${THREADS:-1}" --poll-seconds 0 --log-level info 2>"$log" &
  pid=$!
  tpud_ports "$log" $pid >&2 || exit 1
  h=$HPORT n=$NPORT
  PIDS="$PIDS $pid"
  eval "PID_$3=$pid HPORT_$3=$h NPORT_$3=$n"
}
stop_all() { for p in $PIDS; do kill -TERM $p; wait $p; done; PIDS=; }
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; } # utime + stime, clock ticks

mkdir -p "$WORK/on" "$WORK/off/$MODEL"
cp -r "$SRC/models/$MODEL" "$WORK/on/$MODEL"
cp -r "$SRC/models/$MODEL/1" "$WORK/off/$MODEL/1"
$PY - "$WORK/off/$MODEL/1/model.json" <<'PYEOF'
import json, sys
p = sys.argv[1]; j = json.load(open(p))
j.setdefault("batching", {}).update({"max_batch_size": 1, "buckets": [1]})
json.dump(j, open(p, "w"), indent=1)
PYEOF
# The gRPC request body: a 5-byte gRPC prefix and an inference.ModelInferRequest (hand-encoded:
# model_name = 1, inputs = 5 {name 1, datatype 2, shape 3}, raw_input_contents = 7) with one
# row of random FP32 input of the model's width.
$PY - "$SRC/models/$MODEL/1/model.json" "$MODEL" "$WORK/grpc.body" <<'PYEOF'
import json, random, struct, sys
spec = json.load(open(sys.argv[1]))["inputs"][0]
width = spec["shape"][1]
def varint(n):
    out = b""
    while True:
        b = n & 0x7F; n >>= 7
        if n: out += bytes([b | 0x80])
        else: return out + bytes([b])
def field(num, payload): return varint(num << 3 | 2) + varint(len(payload)) + payload
def s(x): return x.encode()
shape = varint(1) + varint(width)
tensor = field(1, s(spec["name"])) + field(2, s(spec["datatype"])) + field(3, shape)
raw = struct.pack("<%df" % width, *[random.uniform(0, 16) for _ in range(width)])
msg = field(1, s(sys.argv[2])) + field(5, tensor) + field(7, raw)
open(sys.argv[3], "wb").write(b"\0" + struct.pack(">I", len(msg)) + msg)
PYEOF

# run_h2load PORT CONNS: h2load for DUR seconds after 1 s of warm-up; prints tpubench-like JSON.
run_h2load() {
  local log=$WORK/h2load.log out
  rm -f "$log"
  out=$($CPIN h2load -c "$2" -m 1 -D "$DUR" --warm-up-time 1 -d "$WORK/grpc.body" \
    -H 'content-type: application/grpc' -H 'te: trailers' --log-file "$log" \
    "http://127.0.0.1:$1/inference.GRPCInferenceService/ModelInfer" 2>&1) || true
  echo "$out" | $PY -c 'import json, re, sys
text = sys.stdin.read()
m = re.search(r"finished in ([0-9.]+)(m?s), ([0-9.]+) req/s", text)
f = re.search(r"requests: .* (\d+) succeeded, (\d+) failed, (\d+) errored", text)
lat = sorted(int(l.split("\t")[2]) / 1000.0 for l in open(sys.argv[1]) if l.count("\t") == 2
             and l.split("\t")[1] == "200")
if not m or not lat: print(json.dumps({"error": 1})); sys.exit()
pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print(json.dumps({"throughput_rps": float(m.group(3)), "errors": int(f.group(2)) + int(f.group(3)) if f else 0,
                  "latency_ms": {"p50": pct(0.50), "p99": pct(0.99)}}))' "$log"
}

echo "# $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs," \
  "load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
NB=$(echo $BUILDS | wc -w)
[ "$NB" -gt 1 ] && echo "# builds (interleaved run by run, one column group each): $BUILDS"
printf "%-8s %-8s %5s" protocol batching conns
for b in $BUILDS; do printf " | %8s %7s %7s %6s" "req/s" "p50 ms" "p99 ms" "cpu us"; done
echo
for mode in $MODES; do
  i=0
  for b in $BUILDS; do start "$WORK/$mode" "$b/server/tpud" $i; i=$((i + 1)); done
  for proto in $PROTOS; do
    for c in $CONNS; do
      for i in $(seq 0 $((NB - 1))); do : > "$WORK/runs.$i"; done
      for _ in $(seq 1 "$REPS"); do
        for i in $(seq 0 $((NB - 1))); do
          eval "pid=\$PID_$i port=\$HPORT_$i"
          [ "$proto" != http ] && eval "port=\$NPORT_$i"
          t0=$(cpu_ticks $pid)
          if [ "$proto" = grpc ]; then
            out=$(run_h2load "$port" "$c")
          else
            out=$($CPIN "$BENCH" --protocol "$proto" --addr 127.0.0.1:$port --model "$MODEL" \
              --random-input -c "$c" -d "$DUR" --warmup 1 --json 2>/dev/null) || out='{"error":1}'
          fi
          t1=$(cpu_ticks $pid)
          echo "$out" | $PY -c 'import json,sys
try: j = json.load(sys.stdin)
except ValueError: j = {"error": 1}
j["cpu_ticks"] = int(sys.argv[1]); print(json.dumps(j))' $((t1 - t0)) >> "$WORK/runs.$i"
        done
      done
      $PY - "$WORK" "$NB" "$proto" "$mode" "$c" "$DUR" "$(getconf CLK_TCK)" <<'PYEOF'
import json, statistics, sys
work, nb, proto, mode, c, dur, hz = sys.argv[1:8]
line = "%-8s %-8s %5s" % (proto, mode, c)
for i in range(int(nb)):
    runs = [json.loads(l) for l in open("%s/runs.%d" % (work, i)) if l.strip()]
    runs = [j for j in runs if "throughput_rps" in j]
    def med(f):
        v = [f(j) for j in runs]
        return statistics.median(v) if v else float("nan")
    rps = med(lambda j: j["throughput_rps"])
    p50 = med(lambda j: j["latency_ms"]["p50"]); p99 = med(lambda j: j["latency_ms"]["p99"])
    # tpud CPU time over the run (warm-up included) per request served in it, microseconds
    cpu = med(lambda j: j["cpu_ticks"] / float(hz) * 1e6 /
              max(1.0, j["throughput_rps"] * (float(dur) + 1)))
    err = sum(j.get("errors", 0) for j in runs)
    line += " | %8.0f %7.3f %7.3f %6.1f%s" % (rps, p50, p99, cpu, " (errors %d)" % err if err else "")
print(line)
PYEOF
    done
  done
  stop_all
done
echo "# load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
