#!/bin/bash
# test_http.sh - the real tpud's HTTP endpoint with curl: every endpoint's status and JSON shape,
# the error statuses, results equal to the native protocol's (tpuctl), /metrics parsed strictly
# and moving, and tpubench over both protocols with no errors. The server must stay live
# throughout. $1 = build directory, $2 = source directory.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
BENCH=$BUILD/client/tpubench
for b in "$TPUD" "$TPUCTL" "$BENCH"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
command -v curl >/dev/null || { echo "curl missing"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/digits" "$WORK/repo/broken/1"
cp -r "$SRC/models/digits/1" "$WORK/repo/digits/1"
echo '{"inputs": []}' > "$WORK/repo/broken/1/model.json"
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }

LOG=$WORK/tpud.log
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --http-max-body-bytes 65536 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
URL=http://127.0.0.1:$HPORT

# req METHOD PATH EXPECTED_STATUS PY_CHECK [curl args...]: the body must be JSON and PY_CHECK
# (a python expression over `j`) true.
req() {
  local method=$1 path=$2 want=$3 check=$4
  shift 4
  local code
  code=$(curl -s -o "$WORK/body" -w '%{http_code}' -X "$method" "$@" "$URL$path")
  if [ "$code" != "$want" ]; then
    fail "$method $path: status $code, expected $want: $(head -c 300 "$WORK/body")"
    return
  fi
  $PY -c "import json,sys; j=json.load(open('$WORK/body')); sys.exit(0 if ($check) else 1)" ||
    fail "$method $path: body does not satisfy '$check': $(head -c 300 "$WORK/body")"
  live
}
live() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v2/health/live")" = 200 ] ||
    fail "server not live after the previous request"
}

# ---- endpoints ----
req GET /v2/health/live 200 'j == {"live": True}'
# "broken" has FAILED: under --strict-readiness (the default) the server is not ready
# (test_readiness.sh covers both modes and every protocol).
req GET /v2/health/ready 503 'j["ready"] is False and "model '"'broken'"' has no ready version" in j["error"]'
req GET /v2 200 'j["name"] == "tpud" and isinstance(j["version"], str) and isinstance(j["extensions"], list)'
req GET /v2/models/digits 200 'j["name"] == "digits" and j["versions"] == ["1"] and j["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}] and j["outputs"][0]["shape"] == [-1, 10]'
req GET /v2/models/digits/versions/1 200 'j["name"] == "digits"'
req GET /v2/models/digits/ready 200 'j["ready"] is True'
req GET /v2/models/digits/versions/1/ready 200 'j["ready"] is True'
req GET /v2/models/digits/versions/7/ready 404 '"error" in j'
req GET /v2/models/broken/ready 503 'j["ready"] is False'
req GET /v2/models/nope 404 '"nope" in j["error"]'
req GET /v2/models/nope/ready 404 '"error" in j'
req GET /v2/nothing/here 404 '"error" in j'
req GET /v2/repository/index 200 'sorted(m["name"] for m in j) == ["broken", "digits"]'
# Triton's model repository extension, with its bodies.
req POST /v2/repository/index 200 '[m["name"] for m in j] == ["digits"] and j[0]["state"] == "READY"' \
  -d '{"ready": true}'
req POST /v2/repository/index 200 'sorted(m["name"] for m in j) == ["broken", "digits"]'
req POST /v2/repository/index 400 '"ready: unexpected field or type" in j["error"]' -d '{"ready": 1}'
req POST /v2/repository/models/digits/unload 200 'j == {}' \
  -d '{"parameters": {"unload_dependents": true}}'
req GET /v2/models/digits/ready 503 'j["ready"] is False'
req POST /v2/repository/models/digits/load 400 '"parameters.config: not supported" in j["error"]' \
  -d '{"parameters": {"config": "{}"}}'
req POST /v2/repository/models/digits/load 200 'j == {}'
req GET /v2/models/digits/ready 200 'j["ready"] is True'
req POST /v2/repository/models/nope/load 404 '"nope" in j["error"]'
req POST /v2/repository/models/digits/unload 400 '"parameters.force" in j["error"]' \
  -d '{"parameters": {"force": true}}'
req GET /v2/repository/models/digits/load 405 '"POST" in j["error"]'
req POST /v2/repository/models/digits/load 400 '"expected a JSON object" in j["error"]' -d '[1]'
req GET /v2/debug/config 200 'j["http-max-body-bytes"] == 65536 and j["bound_http_port"] == '"$HPORT"
# Threads, I/O threads and spin fitted to the usable CPUs (none of them given here): the
# affinity mask (nproc) or fewer, with a cgroup CPU quota.
NCPU=$(nproc)
req GET /v2/debug/config 200 '1 <= j["cpus"]["usable"] <= '"$NCPU"' and j["cpus"]["online"] >= '"$NCPU"' and j["defaults_from_cpus"] == ["threads", "io-threads", "spin-us"] and j["io-threads"] == max(1, min(64, j["cpus"]["usable"] // 4)) and j["threads"] == (j["cpus"]["usable"] - j["io-threads"] if j["cpus"]["usable"] >= 4 else j["cpus"]["usable"]) and j["spin-us"] == (0 if j["cpus"]["usable"] == 1 else 50)'
req GET /v2/debug/engine 200 'isinstance(j["isa"], str) and j["systolic"]["rows"] > 0 and j["spin_us"] in (0, 50)'
grep -q "compute threads (default), .* I/O threads (default), spin .* us (default) (usable CPUs [0-9]* (online" "$LOG" ||
  fail "the start line does not report the CPU-count defaults: $(grep 'tpud starting' "$LOG")"
req GET /v2/debug/models 200 'any(m["name"] == "digits" and m["batching"]["max_batch_size"] == 64 and "stats" in m for m in j)'
req POST /v2/health/live 405 '"error" in j'
req GET /v2/models/digits/infer 405 '"error" in j'

# ---- infer ----
$PY - "$WORK" <<'EOF'
import json, random, sys
w = sys.argv[1]
random.seed(7)
rows = [[random.random() for _ in range(64)] for _ in range(3)]
json.dump({"id": "req-42", "inputs": [{"name": "x", "shape": [3, 64], "datatype": "FP32",
           "data": [v for r in rows for v in r]}]}, open(w + "/flat.json", "w"))
json.dump({"inputs": [{"name": "x", "shape": [3, 64], "datatype": "FP32", "data": rows}],
           "outputs": [{"name": "probs"}]}, open(w + "/nested.json", "w"))
json.dump({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "INT32",
           "data": [i % 3 for i in range(64)]}]}, open(w + "/int32.json", "w"))
json.dump({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32",
           "data": [float(i % 3) for i in range(64)]}]}, open(w + "/int32_as_fp32.json", "w"))
json.dump({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "BOOL",
           "data": [True] * 64}]}, open(w + "/bool.json", "w"))
json.dump({"inputs": [{"name": "x", "shape": [2, 64], "datatype": "FP32",
           "data": [0.5] * 64}]}, open(w + "/short.json", "w"))
json.dump({"inputs": [{"name": "x", "shape": [1, 63], "datatype": "FP32",
           "data": [0.5] * 63}]}, open(w + "/shape.json", "w"))
json.dump({"inputs": [{"name": "y", "shape": [1, 64], "datatype": "FP32",
           "data": [0.5] * 64}]}, open(w + "/wrongname.json", "w"))
json.dump({"inputs": []}, open(w + "/noinput.json", "w"))
json.dump({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}],
           "outputs": [{"name": "nope"}]}, open(w + "/badout.json", "w"))
open(w + "/deep.json", "w").write('{"inputs": ' + "[" * 5000 + "]" * 5000 + "}")
open(w + "/big.json", "w").write('{"inputs": [], "pad": "' + "x" * 100000 + '"}')
EOF
# Triton's configuration and statistics extensions: the statistics move by exactly the
# requests sent (3 of 3 rows and one refused), and the per-bucket counts add up.
req GET /v2/models/digits/config 200 'j["name"] == "digits" and j["max_batch_size"] == 64 and j["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [64]}] and j["output"][0]["dims"] == [10] and j["dynamic_batching"]["preferred_batch_size"] == [1, 8, 32, 64] and j["dynamic_batching"]["max_queue_delay_microseconds"] == 500'
req GET /v2/models/digits/versions/1/config 200 'j["name"] == "digits"'
req GET /v2/models/nope/config 404 '"nope" in j["error"]'
req GET /v2/models/digits/stats 200 'len(j["model_stats"]) == 1 and j["model_stats"][0]["version"] == "1"'
cp "$WORK/body" "$WORK/stats0.json"
for _ in 1 2 3; do
  curl -s -o /dev/null -H 'Content-Type: application/json' --data-binary @"$WORK/flat.json" \
    "$URL/v2/models/digits/infer"
done
curl -s -o /dev/null -H 'Content-Type: application/json' --data-binary @"$WORK/shape.json" \
  "$URL/v2/models/digits/infer"
req GET /v2/models/stats 200 'any(m["name"] == "digits" for m in j["model_stats"])'
req GET /v2/models/digits/versions/1/stats 200 'True'
$PY - "$WORK/stats0.json" "$WORK/body" <<'EOF' || fail "statistics did not move by the requests sent"
import json, sys
a = json.load(open(sys.argv[1]))["model_stats"][0]
b = json.load(open(sys.argv[2]))["model_stats"][0]
d = lambda k: b["inference_stats"][k]["count"] - a["inference_stats"][k]["count"]
assert d("success") == 3 and d("fail") == 1, (d("success"), d("fail"))
assert b["inference_count"] - a["inference_count"] == 9
assert 1 <= b["execution_count"] - a["execution_count"] <= 3
assert sum(s["compute_infer"]["count"] for s in b["batch_stats"]) == b["execution_count"]
assert all(s["batch_size"] in (1, 8, 32, 64) for s in b["batch_stats"])
assert b["inference_stats"]["success"]["ns"] > a["inference_stats"]["success"]["ns"]
assert b["last_inference"] > 1.7e12
print("ok: /v2/models/digits/stats: +3 success, +1 fail, +9 inferences, per-bucket counts add up")
EOF
req POST /v2/models/digits/infer 200 'j["model_name"] == "digits" and j["model_version"] == "1" and j["id"] == "req-42" and j["outputs"][0]["shape"] == [3, 10] and len(j["outputs"][0]["data"]) == 30 and abs(sum(j["outputs"][0]["data"]) - 3) < 1e-4' --data-binary @"$WORK/flat.json"
cp "$WORK/body" "$WORK/http_flat.out"
req POST /v2/models/digits/versions/1/infer 200 'j["outputs"][0]["shape"] == [3, 10]' --data-binary @"$WORK/nested.json"
cp "$WORK/body" "$WORK/http_nested.out"
req POST /v2/models/digits/infer 200 'j["outputs"][0]["shape"] == [1, 10]' --data-binary @"$WORK/int32.json"
cp "$WORK/body" "$WORK/http_int32.out"
req POST /v2/models/digits/infer 200 'j["outputs"][0]["shape"] == [1, 10]' --data-binary @"$WORK/int32_as_fp32.json"
cp "$WORK/body" "$WORK/http_int32_as_fp32.out"
cmp -s "$WORK/http_int32.out" "$WORK/http_int32_as_fp32.out" || fail "INT32 input not converted to FP32 exactly"

# Same request over the native protocol (tpuctl prints the same JSON): equal numerically.
"$TPUCTL" --addr 127.0.0.1:$NPORT infer digits --file "$WORK/flat.json" > "$WORK/native_flat.out" ||
  fail "tpuctl infer failed"
$PY - "$WORK" <<'EOF' || fail "HTTP and native results differ"
import json, sys
w = sys.argv[1]
h = json.load(open(w + "/http_flat.out"))
n = json.load(open(w + "/native_flat.out"))
hn = json.load(open(w + "/http_nested.out"))
assert h["id"] == n["id"] == "req-42", (h.get("id"), n.get("id"))
hd, nd, nn = h["outputs"][0]["data"], n["outputs"][0]["data"], hn["outputs"][0]["data"]
assert len(hd) == len(nd) == len(nn) == 30
assert all(abs(a - b) <= 1e-6 * max(1, abs(b)) for a, b in zip(hd, nd)), (hd, nd)
assert hd == nn, "flat and nested data gave different results"
EOF

# ---- errors: statuses and {"error": ...} bodies ----
req POST /v2/models/nope/infer 404 '"nope" in j["error"]' --data-binary @"$WORK/flat.json"
req POST /v2/models/digits/versions/9/infer 404 '"error" in j' --data-binary @"$WORK/flat.json"
req POST /v2/models/digits/infer 400 '"malformed JSON" in j["error"]' --data-binary '{"inputs": [1,'
req POST /v2/models/digits/infer 400 '"error" in j' --data-binary 'not json'
req POST /v2/models/digits/infer 400 '"error" in j' --data-binary ''
req POST /v2/models/digits/infer 400 '"shape" in j["error"] or "expected" in j["error"]' --data-binary @"$WORK/short.json"
req POST /v2/models/digits/infer 400 '"error" in j and ("64" in j["error"] or "shape" in j["error"])' --data-binary @"$WORK/shape.json"
req POST /v2/models/digits/infer 400 '"FP32" in j["error"]' --data-binary @"$WORK/bool.json"
req POST /v2/models/digits/infer 400 '"error" in j' --data-binary @"$WORK/wrongname.json"
req POST /v2/models/digits/infer 400 '"error" in j' --data-binary @"$WORK/noinput.json"
req POST /v2/models/digits/infer 400 '"error" in j' --data-binary @"$WORK/badout.json"
req POST /v2/models/digits/infer 400 '"deep" in j["error"]' --data-binary @"$WORK/deep.json"
code=$(curl -s -o /dev/null -w '%{http_code}' --data-binary @"$WORK/big.json" "$URL/v2/models/digits/infer")
[ "$code" = 413 ] || fail "oversized body: status $code, expected 413"
live

# ---- keep-alive: one connection serves several requests ----
n=$(curl -s -v "$URL/v2/health/live" "$URL/v2/health/live" "$URL/v2" 2>&1 | grep -c "Re-using existing connection\|Reusing existing connection")
[ "$n" -ge 2 ] || fail "keep-alive: curl did not reuse the connection ($n)"

# ---- /metrics: strict Prometheus text, counters move ----
metrics_check() { # metrics_check FILE: parses strictly, prints "requests_ok batches" for digits
  $PY - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n"), "no final newline"
name_re = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
label_re = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
sample = re.compile(r"^(" + name_re + r")(\{(" + label_re + r")(," + label_re + r")*\})? (\S+)$")
types, helps, samples = {}, set(), []
seen_families, last_family = [], None
for ln, line in enumerate(text.splitlines(), 1):
    if line.startswith("# HELP "):
        m = re.match(r"^# HELP (" + name_re + r") .+$", line); assert m, (ln, line)
        assert m.group(1) not in helps, ("duplicate HELP", line); helps.add(m.group(1))
        continue
    if line.startswith("# TYPE "):
        m = re.match(r"^# TYPE (" + name_re + r") (counter|gauge|histogram|summary|untyped)$", line)
        assert m, (ln, line)
        assert m.group(1) not in types, ("duplicate TYPE", line)
        types[m.group(1)] = m.group(2); seen_families.append(m.group(1)); last_family = m.group(1)
        continue
    assert not line.startswith("#"), (ln, line)
    m = sample.match(line); assert m, ("bad sample line", ln, line)
    name, value = m.group(1), m.group(5)
    float(value.replace("+Inf", "inf"))  # a number
    fam = re.sub(r"_(bucket|sum|count)$", "", name) if types.get(re.sub(r"_(bucket|sum|count)$", "", name)) == "histogram" else name
    assert fam in types, ("sample without TYPE", line)
    assert fam == last_family, ("family samples not contiguous", line)
    assert name.startswith(("tpud_", "process_")), line  # process_*: test_operations.sh
    if types[fam] == "counter": assert name.endswith("_total"), line
    labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
    samples.append((name, labels, float(value.replace("+Inf", "inf"))))
# Histograms: buckets cumulative, ending with +Inf == _count.
hist = {}
for name, labels, v in samples:
    for suf in ("_bucket", "_count", "_sum"):
        if name.endswith(suf) and types.get(name[: -len(suf)]) == "histogram":
            key = (name[: -len(suf)], tuple(sorted((k, x) for k, x in labels.items() if k != "le")))
            hist.setdefault(key, {"b": [], "count": None})
            if suf == "_bucket": hist[key]["b"].append((labels["le"], v))
            if suf == "_count": hist[key]["count"] = v
assert hist, "no histograms"
for key, h in hist.items():
    les = [float(le.replace("+Inf", "inf")) for le, _ in h["b"]]
    assert les == sorted(les) and les[-1] == float("inf"), ("bad le order", key)
    counts = [c for _, c in h["b"]]
    assert counts == sorted(counts), ("buckets not monotonic", key, counts)
    assert counts[-1] == h["count"], ("+Inf != _count", key)
need = ["tpud_requests_total", "tpud_model_requests_total", "tpud_model_request_duration_seconds",
        "tpud_model_queue_duration_seconds", "tpud_model_compute_duration_seconds",
        "tpud_model_batch_rows", "tpud_model_padding_rows_total", "tpud_model_queue_rows",
        "tpud_connections_open", "tpud_connections_accepted_total",
        "tpud_connections_rejected_total", "tpud_engine_info", "tpud_engine_macs_total",
        "tpud_engine_calls_total", "tpud_model_systolic_cycles_total",
        "tpud_model_systolic_utilization", "tpud_model_state", "tpud_build_info",
        "tpud_http_responses_total"]
missing = [n for n in need if n not in types]
assert not missing, ("missing families", missing)
ok = sum(v for n, l, v in samples if n == "tpud_model_requests_total" and l.get("model") == "digits" and l.get("code") == "OK")
batches = sum(v for n, l, v in samples if n == "tpud_model_batches_total" and l.get("model") == "digits")
print(int(ok), int(batches))
EOF
}
curl -s -o "$WORK/m1" -w '%{content_type}\n' "$URL/metrics" > "$WORK/ctype"
grep -q "^text/plain; version=0.0.4" "$WORK/ctype" || fail "/metrics content type: $(cat "$WORK/ctype")"
read -r ok1 b1 < <(metrics_check "$WORK/m1") || fail "/metrics does not parse"
for _ in 1 2 3 4 5; do
  curl -s -o /dev/null --data-binary @"$WORK/flat.json" "$URL/v2/models/digits/infer"
done
curl -s -o "$WORK/m2" "$URL/metrics"
read -r ok2 b2 < <(metrics_check "$WORK/m2") || fail "/metrics does not parse (second scrape)"
[ -n "${ok1:-}" ] && [ -n "${ok2:-}" ] && [ "$ok2" -ge $((ok1 + 5)) ] && [ "$b2" -gt "$b1" ] ||
  fail "/metrics counters did not move: ok $ok1 -> $ok2, batches $b1 -> $b2"

# ---- tpubench, both protocols, 2 s, no errors ----
for proto in http native; do
  port=$HPORT; [ $proto = native ] && port=$NPORT
  "$BENCH" --protocol $proto --addr 127.0.0.1:$port --model digits -c 8 -d 2 --warmup 0.2 --json \
    > "$WORK/bench.$proto" || fail "tpubench $proto exited non-zero: $(cat "$WORK/bench.$proto")"
  $PY -c "import json,sys; j=json.load(open('$WORK/bench.$proto')); sys.exit(0 if j['errors'] == 0 and j['requests'] > 100 and j['latency_ms']['p99'] > 0 else 1)" ||
    fail "tpubench $proto: $(cat "$WORK/bench.$proto" | head -c 400)"
done
"$BENCH" --protocol http --addr 127.0.0.1:$HPORT --rate 500 -d 1 --warmup 0 -c 4 --json > "$WORK/bench.open" ||
  fail "tpubench open loop failed"
live

# ---- graceful stop ----
kill -TERM $PID
wait $PID
rc=$?
[ $rc -eq 0 ] || fail "tpud exited $rc after SIGTERM"
grep -E "ERROR" "$LOG" | grep -v broken && fail "unexpected ERROR lines in the log"

# ---- CPU-count defaults under an affinity mask, and given options kept ----
# one_cpu_config PREFIX... -- TPUD_ARGS...: starts tpud (under PREFIX), saves /v2/debug/config
one_config() {
  local pre=() log=$WORK/tpud.cpus.log
  while [ "$1" != -- ]; do pre+=("$1"); shift; done
  shift
  "${pre[@]}" "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 "$@" 2>"$log" &
  PID=$!
  tpud_ports "$log" $PID || { fail "tpud $* did not start"; return; }
  curl -s -o "$WORK/cfg.json" "http://127.0.0.1:$HPORT/v2/debug/config"
  kill -TERM $PID; wait $PID
}
cfg_check() {
  $PY -c "import json,sys; j=json.load(open('$WORK/cfg.json')); sys.exit(0 if ($1) else 1)" ||
    fail "$2: /v2/debug/config: $(head -c 600 "$WORK/cfg.json")"
}
if command -v taskset >/dev/null && taskset -c 0 true 2>/dev/null; then
  one_config taskset -c 0 -- # one CPU: one compute thread, no spinning
  cfg_check 'j["cpus"]["usable"] == 1 and j["cpus"]["affinity"] == 1 and j["threads"] == 1 and j["io-threads"] == 1 and j["spin-us"] == 0' "taskset -c 0"
fi
one_config -- --threads 3 --spin-us 7
cfg_check 'j["threads"] == 3 and j["spin-us"] == 7 and j["defaults_from_cpus"] == ["io-threads"]' "--threads 3 --spin-us 7"
"$TPUD" --spin-us 100001 2>"$WORK/err" && fail "--spin-us 100001 accepted"
grep -q "spin-us" "$WORK/err" || fail "--spin-us 100001: $(cat "$WORK/err")"

[ $FAIL -eq 0 ] && echo "test_http: ok"
exit $FAIL
