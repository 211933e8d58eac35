#!/usr/bin/env bash
# test_failover.sh - scale-out without containers: three tpud replicas on loopback behind
# Debian's HAProxy running deploy/haproxy/haproxy.cfg (the file compose uses, with the replica
# addresses and the listening ports rewritten to free loopback ports). Under steady closed-loop
# load from tpubench (16 connections), replica 2 is killed with SIGKILL and restarted; the test
# counts requests served and failed and holds the failures to what the HAProxy policy in
# haproxy.cfg documents:
#   HTTP (8501, HTTP mode, retries + redispatch + retry-on): no failed request.
#   native (8500, TCP mode): at most the requests in flight on the client connections that HAProxy
#     had on the killed replica while it died, times the pipeline depth; every other request
#     succeeds. Those connections are (a) the ones pinned to it at the kill (its current sessions
#     in HAProxy's statistics) and (b) the ones HAProxy opened to it after the kill that the dying
#     replica's kernel still accepted: a SIGKILLed process's sockets are released one by one, its
#     established connections can close a few milliseconds before its listening socket does, and
#     in that window a connect succeeds (the kernel completes the handshake), HAProxy forwards the
#     request, and the connection is reset when the listening socket goes. In TCP mode no balancer
#     can tell such a connection from a healthy one, nor replay the bytes it sent; leastconn sends
#     the reconnecting clients of the dead replica straight back to it (it has just dropped to no
#     sessions), so (b) is not rare. (b) is measured from HAProxy's counters for that server
#     between the kill and its being marked down: connection attempts (stot) minus the attempts
#     that failed to connect (redispatched: wredis, retried on it: wretr, given up: econ), which
#     HAProxy retried elsewhere, costing no request. A client lands in (b) at most once (its
#     connection lasts until the listening socket closes, which ends the window), so (b) <= (a)
#     and the bound is at most 2 x (a) x depth.
# It also checks that HAProxy saw the replica go down, that the restarted replica serves again,
# and that the replicas' answers agree. $1 = build directory (tpud, tpubench), $2 = source dir.
# Needs haproxy (deploy/deps.sh deploy).
set -euo pipefail
BUILD=${1:-build}
SRC=${2:-.}
TPUD=$BUILD/server/tpud
BENCH=$BUILD/client/tpubench
CFG_SRC=$SRC/deploy/haproxy/haproxy.cfg
DURATION=${FAILOVER_DURATION:-12}   # seconds of measured load per protocol
KILL_AT=${FAILOVER_KILL_AT:-4}      # seconds into the measured load
DOWN_FOR=${FAILOVER_DOWN_FOR:-2}    # seconds the replica stays dead
CONNS=16
DEPTH=1
for b in "$TPUD" "$BENCH"; do [ -x "$b" ] || { echo "test_failover: $b not built" >&2; exit 1; }; done
command -v haproxy >/dev/null || { echo "test_failover: haproxy missing (deploy/deps.sh deploy)" >&2; exit 1; }
command -v curl >/dev/null || { echo "test_failover: curl missing" >&2; exit 1; }

WORK=$(mktemp -d)
PIDS=()
HAP_PID=""
cleanup() {
  for p in "${PIDS[@]}" $HAP_PID; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }

# Ten free loopback ports: 3 replicas x (native, http) + HAProxy's native, http and stats.
# (Held open together so they differ; a port could in principle be taken between here and use.)
read -r -a PORTS < <(python3 - <<'EOF'
import socket
ss = []
for _ in range(9):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ss.append(s)
print(" ".join(str(s.getsockname()[1]) for s in ss))
EOF
)
NPORT=("${PORTS[0]}" "${PORTS[1]}" "${PORTS[2]}")
HPORT=("${PORTS[3]}" "${PORTS[4]}" "${PORTS[5]}")
LB_NATIVE=${PORTS[6]}
LB_HTTP=${PORTS[7]}
LB_STATS=${PORTS[8]}

start_replica() { # $1 = index 0..2
  local i=$1
  "$TPUD" --models "$SRC/models" --listen 127.0.0.1 --port "${NPORT[$i]}" \
    --http-port "${HPORT[$i]}" --threads 1 --poll-seconds 0 >>"$WORK/tpud$i.log" 2>&1 &
  PIDS[$i]=$!
}
wait_ready() { # $1 = index
  for _ in $(seq 1 100); do
    curl -fs -o /dev/null "http://127.0.0.1:${HPORT[$1]}/v2/health/ready" && return 0
    sleep 0.1
  done
  echo "replica $1 did not become ready:"; cat "$WORK/tpud$1.log"; return 1
}
# stat BACKEND SERVER FIELD...: fields of HAProxy's CSV statistics (one snapshot), space-separated;
# an empty field (a counter HAProxy leaves blank) reads as 0.
stat() {
  curl -fs "http://127.0.0.1:$LB_STATS/stats;csv" | python3 -c '
import csv, sys
rows = list(csv.DictReader(l.lstrip("# ") for l in sys.stdin))
r = next(r for r in rows if r["pxname"] == sys.argv[1] and r["svname"] == sys.argv[2])
print(" ".join(r[f] or "0" for f in sys.argv[3:]))
' "$@"
}
wait_status() { # $1 = backend, $2 = server, $3 = UP or DOWN: until HAProxy's check says so (10 s)
  for _ in $(seq 1 100); do
    [ "$(stat "$1" "$2" status 2>/dev/null)" = "$3" ] && return 0
    sleep 0.1
  done
  echo "HAProxy never marked $1/$2 $3"; return 1
}
wait_up() { wait_status "$1" "$2" UP; }

for i in 0 1 2; do start_replica $i; done
for i in 0 1 2; do wait_ready $i; done

# The shipped configuration, pointed at loopback.
python3 - "$CFG_SRC" "$WORK/haproxy.cfg" "${NPORT[*]}" "${HPORT[*]}" "$LB_NATIVE" "$LB_HTTP" \
  "$LB_STATS" <<'EOF'
import re, sys
src, dst, nports, hports, lbn, lbh, lbs = sys.argv[1:]
nports, hports = nports.split(), hports.split()
s = open(src).read()
for i in range(3):
    # Native servers are checked on their replica's HTTP port.
    s = s.replace(f"server tpud{i+1} tpud{i+1}:8500", f"server tpud{i+1} 127.0.0.1:{nports[i]} port {hports[i]}")
    s = s.replace(f"server tpud{i+1} tpud{i+1}:8501", f"server tpud{i+1} 127.0.0.1:{hports[i]}")
for a, b in (("bind :8500", f"bind 127.0.0.1:{lbn}"), ("bind :8501", f"bind 127.0.0.1:{lbh}"),
             ("bind :8404", f"bind 127.0.0.1:{lbs}")):
    assert a in s, a
    s = s.replace(a, b)
assert "tpud1:" not in s and "tpud3:" not in s
open(dst, "w").write(s)
EOF
haproxy -c -q -f "$WORK/haproxy.cfg" || { fail "haproxy -c rejects the generated configuration"; exit 1; }
haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.log" 2>&1 &
HAP_PID=$!
for _ in $(seq 1 50); do curl -fs -o /dev/null "http://127.0.0.1:$LB_STATS/stats" && break; sleep 0.1; done
for s in tpud1 tpud2 tpud3; do wait_up tpud_native $s; wait_up tpud_http $s; done

# The three replicas give the same answer through the balancer.
DIGIT='{"inputs":[{"name":"x","shape":[1,64],"datatype":"FP32","data":[0,0,5,13,9,1,0,0,0,0,13,15,10,15,5,0,0,3,15,2,0,11,8,0,0,4,12,0,0,8,8,0,0,5,8,0,0,9,8,0,0,4,11,0,1,12,7,0,0,2,14,5,10,12,0,0,0,0,6,13,10,0,0,0]}]}'
for i in 0 1 2; do
  curl -fs "http://127.0.0.1:${HPORT[$i]}/v2/models/digits/infer" -d "$DIGIT" >"$WORK/direct$i.json"
done
for _ in 1 2 3; do
  curl -fs "http://127.0.0.1:$LB_HTTP/v2/models/digits/infer" -d "$DIGIT" >>"$WORK/via_lb.json"
  echo >>"$WORK/via_lb.json"
done
python3 - "$WORK" <<'EOF' || fail "replicas or the balancer disagree on the bundled digit"
import json, sys
w = sys.argv[1]
def cls(j): p = j["outputs"][0]["data"]; return max(range(10), key=lambda k: p[k])
got = [cls(json.load(open(f"{w}/direct{i}.json"))) for i in range(3)]
got += [cls(json.loads(l)) for l in open(f"{w}/via_lb.json") if l.strip()]
print("  digit predicted by each replica and through HAProxy:", got)
sys.exit(0 if got == [0] * 6 else 1)
EOF

# run_phase PROTOCOL LB_PORT BACKEND: load, kill replica 2 mid-run, restart it; prints figures.
run_phase() {
  local proto=$1 port=$2 backend=$3
  local down0 stot0 scur served failed reconnects bound late=0
  local tot0 redis0 retr0 econ0 tot1 redis1 retr1 econ1
  down0=$(stat "$backend" tpud2 chkdown)
  "$BENCH" --protocol "$proto" --addr "127.0.0.1:$port" -c $CONNS -D $DEPTH -d "$DURATION" \
    --warmup 1 --json >"$WORK/bench_$proto.json" 2>"$WORK/bench_$proto.err" &
  local bench=$!
  sleep $((1 + KILL_AT))
  read -r scur tot0 redis0 retr0 econ0 < <(stat "$backend" tpud2 scur stot wredis wretr econ)
  kill -KILL "${PIDS[1]}"
  wait "${PIDS[1]}" 2>/dev/null || true
  sleep "$DOWN_FOR"
  # Down before it comes back (else the chkdown check below would race the restart), and the
  # connections HAProxy opened to it since the kill, now that it sends it none.
  wait_status "$backend" tpud2 DOWN || fail "$proto: HAProxy did not mark the killed replica down"
  read -r tot1 redis1 retr1 econ1 < <(stat "$backend" tpud2 stot wredis wretr econ)
  # (HTTP mode counts requests there, not connections; its bound is 0 either way.)
  [ "$proto" = http ] || late=$(((tot1 - tot0) - (redis1 - redis0) - (retr1 - retr0) - (econ1 - econ0)))
  start_replica 1
  wait_ready 1
  wait_up "$backend" tpud2
  stot0=$(stat "$backend" tpud2 stot)
  wait $bench || true   # exit 1 when any request failed: judged below
  read -r served failed reconnects < <(python3 -c '
import json, sys; j = json.load(open(sys.argv[1])); print(j["requests"], j["errors"], j.get("reconnects", 0))
' "$WORK/bench_$proto.json") || { fail "$proto: tpubench gave no result: $(cat "$WORK/bench_$proto.err")"; return; }
  if [ "$proto" = http ]; then
    bound=0
    printf '  %-6s %8d served, %d failed (policy allows 0: HTTP retries), %d reconnects; replica 2 had %s requests in flight at the kill\n' \
      "$proto" "$served" "$failed" "$reconnects" "$scur"
  else
    bound=$(((scur + late) * DEPTH))
    printf '  %-6s %8d served, %d failed (policy allows %d: in flight on its connections, (%d at the kill + %d opened in its teardown) x depth %d), %d reconnects\n' \
      "$proto" "$served" "$failed" "$bound" "$scur" "$late" "$DEPTH" "$reconnects"
    # A client is caught in the teardown window at most once: more means something else.
    [ "$late" -ge 0 ] && [ "$late" -le "$scur" ] ||
      fail "$proto: $late connections opened to the killed replica after the kill, more than its $scur clients"
  fi
  echo "FAILOVER $proto served=$served failed=$failed allowed=$bound at_kill=$scur late=$late" >>"$WORK/figures"
  [ "$failed" -le "$bound" ] || fail "$proto: $failed requests failed, the policy allows $bound"
  [ "$served" -ge $((DURATION * 200)) ] || fail "$proto: only $served requests served in ${DURATION} s"
  [ "$(stat "$backend" tpud2 chkdown)" -gt "$down0" ] ||
    fail "$proto: HAProxy never marked the killed replica down (the kill went unnoticed?)"
  # The restarted replica takes load again (native: only new connections are balanced).
  "$BENCH" --protocol "$proto" --addr "127.0.0.1:$port" -c 6 -n 600 --warmup 0 >/dev/null 2>&1 ||
    fail "$proto: requests failed after the replica came back"
  [ "$(stat "$backend" tpud2 stot)" -gt "$stot0" ] ||
    fail "$proto: the restarted replica served nothing through HAProxy"
}

echo "test_failover: 3 replicas (ports ${NPORT[*]} / ${HPORT[*]}) behind HAProxy (:$LB_NATIVE native, :$LB_HTTP http); $CONNS connections, ${DURATION} s each, replica 2 SIGKILLed at ${KILL_AT} s and restarted ${DOWN_FOR} s later"
run_phase http "$LB_HTTP" tpud_http
run_phase native "$LB_NATIVE" tpud_native
for i in 0 1 2; do kill -0 "${PIDS[$i]}" 2>/dev/null || fail "replica $((i + 1)) died: $(tail -5 "$WORK/tpud$i.log")"; done
kill -0 "$HAP_PID" 2>/dev/null || fail "haproxy died: $(tail -5 "$WORK/haproxy.log")"
if [ $FAIL -ne 0 ]; then
  echo "--- haproxy log (tail)"; tail -n 20 "$WORK/haproxy.log"
  exit 1
fi
echo "test_failover: OK"
