#!/bin/bash
# server_vs_peer.sh - tpud against a peer server on the same models, same machine, same load
# generator, in one run: the peer is ONNX Runtime behind Node's http (bench/peer/server.js, one
# worker process per CPU, OIP v2 REST JSON), tpud serves the same .onnx files.
#
# For each model (digits: 64 -> 64 ReLU -> 10 softmax; big: 256 -> 1024 -> 1024 -> 256 ReLU,
# both from bench/onnx_bench_models.py, the same files on both sides), each request size
# (BATCHES rows per request) and each connection count (CONNS), REPS rounds; a round runs, one
# after the other for DUR seconds each: the peer over JSON, then tpud over JSON, over HTTP with
# binary tensors (the OIP binary extension, answers in binary too) and over the framed native
# protocol, and, at the connection counts in LOWP_CONNS, tpud over JSON and binary with the
# model compiled for int8 and for bf16 (the peer runs fp32 only). Rounds interleave the servers
# (peer, tpud, ..., peer, tpud, ...) so a change in a shared machine's load hits both alike.
# HTTP load is wrk (one thread, -c CONNS, one request in flight per connection, the same body
# every time); the framed protocol's is tpubench (random rows of the same width: wrk speaks
# HTTP only). Before timing, every server's answer to the same rows is checked against the
# peer's (worst difference printed; > 1e-4 fails the run) and tpud's binary answer against its
# JSON one (bit for bit).
# Columns: median req/s, p50, p99 over the rounds; "vs peer" = the median over rounds of
# tpud's req/s over the peer's in the same round (and of p99 over p99); server CPU µs per
# request (user + system from /proc/PID/stat, all the server's processes and threads, over the
# timed run) and context switches per request (voluntary + involuntary, every thread's
# /proc/PID/task/*/status), both over the run.
#
# usage: bench/server_vs_peer.sh [BUILD_DIR] [SRC_DIR]      (make bench runs it)
# env:   DUR (s, default 5), REPS (3), MODELS ("digits big"), BATCHES ("1 32"), CONNS ("1 64"),
#        LOWP_CONNS ("64"; "" for none), PROTOS ("json binary framed"),
#        BUILDS (several build dirs, the same one more than once if you like: each one's tpud is
#        run in every round, rows per build; the first one's tpubench drives the framed
#        protocol), TPUD_ARGS (extra tpud options; by default tpud runs with its own CPU-count
#        defaults), TPUD_ARGS_0, TPUD_ARGS_1, ... (the options of the first, second, ... of
#        BUILDS instead), PEER_WORKERS (default: CPUs)
# Needs: BUILD_DIR/server/tpud and client/tpubench, wrk, node >= 18 and npm (onnxruntime-node is
# installed under bench/peer from its package-lock.json on first use, with
# ONNXRUNTIME_NODE_INSTALL=skip), /usr/bin/python3 with python3-onnx and numpy
# (deploy/deps.sh bench installs them).
set -eu
BUILD=${1:-build}
SRC=${2:-.}
BUILDS=${BUILDS:-$BUILD}
DUR=${DUR:-5}
REPS=${REPS:-3}
MODELS=${MODELS:-"digits big"}
BATCHES=${BATCHES:-"1 32"}
CONNS=${CONNS:-"1 64"}
LOWP_CONNS=${LOWP_CONNS-64}
PROTOS=${PROTOS:-"json binary framed"}
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
HELP=$SRC/bench/server_vs_peer.py
for b in $BUILDS; do
  [ -x "$b/server/tpud" ] || { echo "server_vs_peer: $b/server/tpud not built" >&2; exit 1; }
done
set -- $BUILDS
TPUBENCH=$1/client/tpubench
[ -x "$TPUBENCH" ] || { echo "server_vs_peer: $TPUBENCH not built" >&2; exit 1; }
for t in wrk node npm curl; do
  command -v $t >/dev/null || { echo "server_vs_peer: $t missing (deploy/deps.sh bench)" >&2; exit 1; }
done
PEERDIR=$SRC/bench/peer
if ! (cd "$PEERDIR" && node -e "require('onnxruntime-node')" 2>/dev/null); then
  echo "server_vs_peer: installing onnxruntime-node under $PEERDIR" >&2
  (cd "$PEERDIR" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund >&2)
  (cd "$PEERDIR" && node -e "require('onnxruntime-node')") ||
    { echo "server_vs_peer: onnxruntime-node does not load" >&2; exit 1; }
fi

. "$SRC/tests/integration/lib.sh" # tpud_ports
WORK=$(mktemp -d)
PIDS=
trap 'for p in $PIDS; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT

# The models: the generated ONNX files, served by tpud from a repository of its own with the
# same file at fp32 (NAME), int8 (NAME_int8) and bf16 (NAME_bf16).
$PY "$SRC/bench/onnx_bench_models.py" "$WORK/gen" >/dev/null
mkdir -p "$WORK/repo" "$WORK/bodies" "$WORK/ans"
PEER_MODELS=
for m in $MODELS; do
  [ -d "$WORK/gen/${m}_onnx/1" ] || { echo "server_vs_peer: no model '$m'" >&2; exit 2; }
  for p in fp32 int8 bf16; do
    name=$m; [ $p = fp32 ] || name=${m}_$p
    mkdir -p "$WORK/repo/$name"
    cp -r "$WORK/gen/${m}_onnx/1" "$WORK/repo/$name/1"
    sed -i "s/\"precision\": \"fp32\"/\"precision\": \"$p\"/" "$WORK/repo/$name/1/model.json"
  done
  PEER_MODELS="$PEER_MODELS $m=$WORK/gen/${m}_onnx/1/model.onnx"
  $PY "$HELP" bodies "$WORK/bodies" "$WORK/gen/${m}_onnx/1/model.json" "$m" $BATCHES
done

# The servers, started once and kept for the whole run.
PEERPORT=$(( 20000 + RANDOM % 20000 ))
node "$PEERDIR/server.js" --port $PEERPORT --workers "${PEER_WORKERS:-$(nproc)}" $PEER_MODELS \
  >"$WORK/peer.log" 2>&1 &
PEERPID=$!
PIDS="$PIDS $PEERPID"
for _ in $(seq 100); do grep -q listening "$WORK/peer.log" && break; sleep 0.1; done
grep -q listening "$WORK/peer.log" || { cat "$WORK/peer.log" >&2; exit 1; }
i=0
for b in $BUILDS; do
  eval "args=\${TPUD_ARGS_$i-\${TPUD_ARGS:-}}"
  "$b/server/tpud" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 \
    $args 2>"$WORK/tpud.$i.log" &
  pid=$!
  PIDS="$PIDS $pid"
  tpud_ports "$WORK/tpud.$i.log" $pid >&2 || exit 1
  eval "PID_$i=$pid HPORT_$i=$HPORT NPORT_$i=$NPORT"
  tag="tpud"; [ -n "$args" ] && tag="tpud $args"
  [ $(echo $BUILDS | wc -w) -gt 1 ] && tag="tpud $i: $b${args:+ $args}"
  eval "TAG_$i=\$tag"
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$HPORT/v2/health/ready" >/dev/null && break; sleep 0.1
  done
  i=$((i + 1))
done
NB=$i

# pids PID: the process and its children (the peer's workers)
pids() { echo $1 $(pgrep -P $1 || true); }
# snap PID: "cpu_ticks context_switches" summed over the processes and their threads
snap() {
  local t=0 c=0 p s
  for p in $(pids $1); do
    s=$(awk '{print $14 + $15}' /proc/$p/stat 2>/dev/null || echo 0)
    t=$((t + s))
    s=$(cat /proc/$p/task/*/status 2>/dev/null |
      awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n + 0}')
    c=$((c + s))
  done
  echo $t $c
}
HZ=$(getconf CLK_TCK)

# post URL BODY: one JSON request with curl, the answer on stdout
post() { curl -sf -H 'Content-Type: application/json' --data-binary @"$2" "$1"; }
# post_bin URL BODY HLEN OUT: one binary-tensor request; the answer in OUT, its JSON header's
# length (the answer's Inference-Header-Content-Length) on stdout
post_bin() {
  curl -sf -H 'Content-Type: application/octet-stream' -H "Inference-Header-Content-Length: $3" \
    -D "$4.h" -o "$4" --data-binary @"$2" "$1"
  tr -d '\r' < "$4.h" | awk -F': ' 'tolower($1) == "inference-header-content-length" {print $2}'
}

echo "server_vs_peer: checking the answers" >&2
echo "### Answers checked before timing (worst absolute difference from the peer's)"
echo
for m in $MODELS; do
  for b in $BATCHES; do
    body=$WORK/bodies/$m.b$b
    post "http://127.0.0.1:$PEERPORT/v2/models/$m/infer" $body.json > "$WORK/ans/peer.json"
    line="- $m, $b rows:"
    for i in $(seq 0 $((NB - 1))); do
      eval "hp=\$HPORT_$i"
      for p in fp32 int8 bf16; do
        name=$m; [ $p = fp32 ] || name=${m}_$p
        post "http://127.0.0.1:$hp/v2/models/$name/infer" $body.json > "$WORK/ans/tpud.json"
        bin=
        case " $PROTOS " in *" binary "*) # (a build from before binary tensors runs without)
          hl=$(post_bin "http://127.0.0.1:$hp/v2/models/$name/infer" $body.bin \
            "$(cat $body.bin.hlen)" "$WORK/ans/tpud.bin")
          bin="--binary $WORK/ans/tpud.bin $hl" ;;
        esac
        # int8/bf16 differ from fp32 by more than 1e-4: shown, not held to it
        lim=; [ $p = fp32 ] || lim=--no-limit
        d=$($PY "$HELP" check $lim "$WORK/ans/peer.json" "$WORK/ans/tpud.json" $bin) || exit 1
        sfx=; [ $NB -gt 1 ] && sfx=" $i"
        line="$line tpud$sfx $p $d;"
      done
    done
    echo "$line"
  done
done
echo

RUNS=$WORK/runs.jsonl
: > "$RUNS"
# one SERVER_TAG PID PROTO PRECISION MODEL BATCH CONNS REP PORT: a timed run, a line in RUNS
one() {
  local tag=$1 pid=$2 proto=$3 prec=$4 m=$5 b=$6 c=$7 rep=$8 port=$9 name out s0 s1
  name=$m; [ $prec = fp32 ] || name=${m}_$prec
  s0=$(snap $pid)
  case $proto in
    json)
      out=$(BODY=$WORK/bodies/$m.b$b.json CTYPE=application/json IHCL= \
        wrk -t1 -c$c -d${DUR}s --timeout 30s --latency -s "$WORK/post.lua" \
        "http://127.0.0.1:$port/v2/models/$name/infer" 2>&1 | $PY "$HELP" wrk) ;;
    binary)
      out=$(BODY=$WORK/bodies/$m.b$b.bin CTYPE=application/octet-stream \
        IHCL=$(cat $WORK/bodies/$m.b$b.bin.hlen) \
        wrk -t1 -c$c -d${DUR}s --timeout 30s --latency -s "$WORK/post.lua" \
        "http://127.0.0.1:$port/v2/models/$name/infer" 2>&1 | $PY "$HELP" wrk) ;;
    framed)
      out=$("$TPUBENCH" --protocol native --addr 127.0.0.1:$port --model "$name" --random-input \
        --batch $b -c $c -d $DUR --warmup 0 --json 2>/dev/null) || out='{"error":"tpubench"}' ;;
  esac
  s1=$(snap $pid)
  echo "$out" | $PY -c 'import json, sys
a = sys.argv[1:]
try: j = json.load(sys.stdin)
except ValueError: j = {"error": "no output"}
j = {k: v for k, v in j.items() if k != "histogram"}
t0, c0, t1, c1 = map(int, a[8:12])
j.update(server=a[0], protocol=a[1], precision=a[2], model=a[3], batch=int(a[4]), conns=int(a[5]),
         rep=int(a[6]), cpu_us=(t1 - t0) * 1e6 / int(a[7]), ctxsw=c1 - c0)
print(json.dumps(j))' "$tag" "$proto" "$prec" "$m" "$b" "$c" "$rep" "$HZ" $s0 $s1 >> "$RUNS"
}
cat > "$WORK/post.lua" <<'EOF'
local f = assert(io.open(os.getenv("BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = os.getenv("CTYPE")
local h = os.getenv("IHCL")
if h and h ~= "" then wrk.headers["Inference-Header-Content-Length"] = h end
EOF

T0=$(date -u '+%F %H:%M UTC')
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for m in $MODELS; do
  for b in $BATCHES; do
    for c in $CONNS; do
      echo "server_vs_peer: $m, $b rows/request, $c connections" >&2
      for rep in $(seq 1 $REPS); do
        one peer $PEERPID json fp32 $m $b $c $rep $PEERPORT
        for i in $(seq 0 $((NB - 1))); do
          eval "pid=\$PID_$i hp=\$HPORT_$i np=\$NPORT_$i tag=\$TAG_$i"
          for proto in $PROTOS; do
            port=$hp; [ $proto = framed ] && port=$np
            one "$tag" $pid $proto fp32 $m $b $c $rep $port
          done
          case " $LOWP_CONNS " in *" $c "*)
            for p in int8 bf16; do
              for proto in $PROTOS; do
                [ $proto = framed ] || one "$tag" $pid $proto $p $m $b $c $rep $hp
              done
            done ;;
          esac
        done
      done
    done
  done
done

echo "### tpud vs ONNX Runtime behind Node (bench/server_vs_peer.sh, $T0)"
echo
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load" \
  "average $LOAD0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at end; peer: ONNX Runtime" \
  "$(cd "$PEERDIR" && node -p "require('onnxruntime-node/package.json').version"), Node" \
  "$(node --version), ${PEER_WORKERS:-$(nproc)} workers, 1 intra-op thread each; tpud:" \
  "$(grep -m1 'tpud starting' "$WORK/tpud.0.log" | sed 's/.*tpud starting: models [^,]*, //; s/, port .*//')" \
  "${TPUD_ARGS:+(options: $TPUD_ARGS)}; $DUR s per run, median of $REPS rounds; wrk -t1" \
  "(HTTP), tpubench (framed)."
echo
$PY "$HELP" tables "$RUNS"
