#!/bin/bash
# test_operations.sh - operations surfaces of the real tpud: --log-format json (every line tpud
# writes to stderr, from start to exit, is one JSON object of time, level and message; a model
# name with quotes, a backslash and bytes that are not UTF-8 stays valid JSON), --log-format
# text unchanged, and the standard process_* Prometheus families on /metrics with sane values
# (CPU time that grows under load, resident memory, open fds that follow connections, max fds
# and open fds as /proc/PID shows them, start time). $1 = build directory, $2 = source directory.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
[ -x "$TPUD" ] || { echo "$TPUD not built"; exit 1; }
command -v curl >/dev/null || { echo "curl missing"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

WORK=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }

# A repository with one good model, one broken (an ERROR/WARN line) and a directory whose name
# is not a model name (quotes, backslash, a byte that is not UTF-8: logged and skipped).
REPO=$WORK/repo
mkdir -p "$REPO/digits" "$REPO/broken/1" "$REPO/"$'we"ird\\\xff name'
cp -r "$SRC/models/digits/1" "$REPO/digits/1"
echo '{"inputs": []}' >"$REPO/broken/1/model.json"

start() { # LOG [tpud flags...]: sets PID, NPORT, HPORT, URL
  local log=$1
  shift
  "$TPUD" --models "$REPO" --port 0 --http-port 0 --poll-seconds 0 "$@" 2>"$log" &
  PID=$!
  tpud_ports "$log" $PID || exit 1
  URL=http://127.0.0.1:$HPORT
}
stop() {
  kill -TERM "$PID" 2>/dev/null
  wait "$PID"
  local rc=$?
  [ $rc = 0 ] || fail "tpud exited $rc after SIGTERM"
  PID=
}

# ---- 1. --log-format json: every line, start to exit ----
start "$WORK/json.log" --log-format json --log-level debug
curl -s -o /dev/null "$URL/v2/health/live"
curl -s -o /dev/null -d '{"inputs": []}' "$URL/v2/models/digits/infer"
kill -HUP $PID # a rescan: more lines
sleep 0.5
stop
$PY - "$WORK/json.log" <<'EOF' && ok "--log-format json: every stderr line is one JSON object" || FAIL=1
import json, re, sys
raw = open(sys.argv[1], "rb").read()
assert raw.endswith(b"\n"), "the log does not end in a newline"
lines = raw.split(b"\n")[:-1]
levels = set()
for n, b in enumerate(lines, 1):
    try:
        j = json.loads(b.decode("utf-8"))  # strict: invalid UTF-8 or JSON fails
    except Exception as e:
        print("FAIL: line %d is not JSON (%s): %r" % (n, e, b[:200])); sys.exit(1)
    if not isinstance(j, dict) or sorted(j) != ["level", "message", "time"]:
        print("FAIL: line %d: keys %r" % (n, sorted(j) if isinstance(j, dict) else j)); sys.exit(1)
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", j["time"]):
        print("FAIL: line %d: time %r" % (n, j["time"])); sys.exit(1)
    if j["level"] not in ("debug", "info", "warn", "error"):
        print("FAIL: line %d: level %r" % (n, j["level"])); sys.exit(1)
    levels.add(j["level"])
msgs = [json.loads(b)["message"] for b in lines]
need = [("starting", r"^tpud starting: models "), ("listening", r"^tpud listening on 127\.0\.0\.1:\d+ \(http"),
        ("broken", r"model 'broken' version 1: load failed"), ("weird name", r"we\\x22ird\\x5c\\xff name"),
        ("stop", r"(?i)stop|exit|drain")]
for what, rx in need:
    if not any(re.search(rx, m) for m in msgs):
        print("FAIL: no %s line in %d lines: %r" % (what, len(lines), msgs[:40])); sys.exit(1)
if len(lines) < 5 or "info" not in levels or not levels & {"warn", "error"}:
    print("FAIL: too few lines or levels: %d %r" % (len(lines), levels)); sys.exit(1)
print("  %d lines, levels %s" % (len(lines), sorted(levels)))
EOF

# ---- 2. --log-format text (the default) is today's format ----
start "$WORK/text.log"
stop
head -1 "$WORK/text.log" | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z INFO  tpud starting' &&
  ! grep -q '^{' "$WORK/text.log" && ok "default log format is text" ||
  fail "text log: $(head -3 "$WORK/text.log")"
"$TPUD" --log-format yaml 2>"$WORK/err"
[ $? = 2 ] && grep -q "log-format.*text or json.*yaml" "$WORK/err" && ok "--log-format yaml refused" ||
  fail "--log-format yaml: $(cat "$WORK/err")"
echo '{"log-format": "json"}' >"$WORK/cfg.json"
start "$WORK/cfg.log" --config "$WORK/cfg.json"
stop
head -1 "$WORK/cfg.log" | $PY -c 'import json,sys; assert json.loads(sys.stdin.read())["level"] == "info"' &&
  ok "config file {\"log-format\": \"json\"}" || fail "config file log-format: $(head -1 "$WORK/cfg.log")"

# ---- 3. process_* on /metrics ----
start "$WORK/metrics.log" --auth-open-metrics
curl -s -o "$WORK/m1" "$URL/metrics"
# Load: CPU time must grow; 20 idle keep-alive connections must show in open fds.
$PY - "$HPORT" "$SRC" <<'EOF'
import http.client, json, sys, time
port, src = int(sys.argv[1]), sys.argv[2]
body = json.dumps({"inputs": [{"name": "x", "shape": [64, 64], "datatype": "FP32",
                               "data": [0.25] * 4096}]})
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
t = time.time()
while time.time() - t < 1.5:
    c.request("POST", "/v2/models/digits/infer", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
EOF
$PY - "$HPORT" "$WORK" "$PID" <<'EOF' || fail "process_* check"
import os, re, socket, sys, time, urllib.request
port, work, pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def scrape():
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    vals, types = {}, {}
    for line in text.splitlines():
        m = re.match(r"^# TYPE (process_\w+) (\w+)$", line)
        if m: types[m.group(1)] = m.group(2)
        m = re.match(r"^(process_\w+) (\S+)$", line)
        if m: vals[m.group(1)] = float(m.group(2))
    return vals, types
first = {}
for line in open(work + "/m1"):
    m = re.match(r"^(process_\w+) (\S+)$", line)
    if m: first[m.group(1)] = float(m.group(2))
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
time.sleep(0.3)
v, types = scrape()
want = {"process_cpu_seconds_total": "counter", "process_resident_memory_bytes": "gauge",
        "process_virtual_memory_bytes": "gauge", "process_start_time_seconds": "gauge",
        "process_open_fds": "gauge", "process_max_fds": "gauge"}
bad = []
for n, t in want.items():
    if types.get(n) != t or n not in v: bad.append("%s: type %s value %s" % (n, types.get(n), v.get(n)))
if bad: print("FAIL:", bad); sys.exit(1)
now = time.time()
checks = [
    ("cpu grew under load", v["process_cpu_seconds_total"] > first["process_cpu_seconds_total"]),
    ("cpu below wall time x cores", v["process_cpu_seconds_total"] < (now - v["process_start_time_seconds"] + 1) * os.cpu_count()),
    ("rss 1 MiB..8 GiB", 1 << 20 < v["process_resident_memory_bytes"] < 8 << 30),
    ("rss <= vsize", v["process_resident_memory_bytes"] <= v["process_virtual_memory_bytes"]),
    ("started in the last 2 min", now - 120 < v["process_start_time_seconds"] <= now + 1),
    ("open fds grew by the 20 connections", v["process_open_fds"] >= first["process_open_fds"] + 20),
    ("open fds <= max", v["process_open_fds"] <= v["process_max_fds"]),
]
# Against what the kernel shows from outside: /proc/PID/limits and /proc/PID/fd.
soft = next(int(l.split()[3]) for l in open("/proc/%d/limits" % pid) if l.startswith("Max open files"))
checks.append(("max fds == /proc/PID/limits soft (%d)" % soft, v["process_max_fds"] == soft))
nfd = len(os.listdir("/proc/%d/fd" % pid))
checks.append(("open fds ~ /proc/PID/fd (%d)" % nfd, abs(v["process_open_fds"] - nfd) <= 3))
for s in socks: s.close()
failed = [c for c, okay in checks if not okay]
print("  process_*: %s" % {k: v[k] for k in sorted(v)})
if failed: print("FAIL:", failed, "first scrape:", first); sys.exit(1)
print("ok: process_* families with sane values (%s)" % ", ".join(c for c, _ in checks))
EOF
stop

[ $FAIL = 0 ] && echo "test_operations: all passed" || echo "test_operations: FAILED"
exit $FAIL
