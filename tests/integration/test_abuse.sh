#!/bin/bash
# test_abuse.sh - hostile clients against the real tpud on loopback (issue #10 item 3), while
# well-behaved clients measure what the abuse costs them. The attacks live in abuse.py.
#
# Servers, with limits lowered so that every timeout fires within seconds:
#   A  plaintext: framed protocol and h2c on the native port, HTTP/1.1. Attacks: slowloris
#      (silent partial frames, request heads, prefaces; dribblers at a byte a second), oversized
#      and bad length prefixes, half-sent frames, an HTTP client that never reads, a 1 TB
#      Content-Length, HTTP/2 rapid reset, >grpc-max-streams streams, a header list over
#      grpc-max-header-bytes, CONTINUATION floods, PING and SETTINGS floods from a client that
#      never reads, SETTINGS never acknowledged (silent and chatty), a message over
#      max-message-bytes; then connection floods past --max-connections on both ports and across.
#   B  TLS on both ports: garbage, plaintext, silent and dribbled ClientHellos, ALPN h2 without a
#      SETTINGS acknowledgement.
#   M  MALLOC_MMAP_THRESHOLD_ fixed (freed result buffers leave RSS at once, so RSS measures what
#      tpud holds): clients that never take their answers (framed, never reading; gRPC, never
#      granting flow-control window), asking for 900 KiB MatMul results with 1 KiB requests.
#   C  the control: nobody attacks it.
# Phases: A's connection and HTTP/2 abuse, then A's floods with B's TLS abuse alongside, then M
# alone. The attackers run under nice 10 (they share the 2 CPUs with what they attack).
#
# Well-behaved clients run on the servers under attack during their phase: tpubench open loop
# (native and HTTP on A, TLS on B, native on M) and a gRPC client (abuse.py probe) on A. They
# must see no error, and a p99 latency under P99_MS = 250 ms plus twice the control's: the same
# tpubench against C over the same seconds. The control absorbs what the machine does to every
# process: this is a shared 2-vCPU VM whose other work keeps the load average at 7-10, and there
# the clients saw p99s of 10 ms in one run and 1-2 s in the next, attacked or not, always together
# (open loop charges a client's own scheduling delays to the requests it sends late; the control
# alone measured 130-155 ms at load 7, and up to 1.2 s). On a quiet machine the bound is about
# 260 ms; a server that stalls under abuse shows up as the difference.
#
# Afterwards each server's file descriptors (/proc/PID/fd) must be back to the idle count measured
# before the abuse (+FD_SLACK) and its RSS within RSS_SLACK_MIB of idle (16 MiB for A and B, whose
# allocator may keep some freed memory; 8 MiB for M); it must still answer on every protocol; the
# counters that should have moved in /metrics must have; its log (debug level) must give the
# reasons the clients saw for their connections closing, and hold no ERROR line; and SIGTERM must
# stop it with exit 0. "note:" lines are weaknesses no documented limit promises to prevent; they
# do not fail the test.
# $1 = build directory, $2 = source directory. TPUD_ABUSE_KEEP=1 keeps the work directory (logs,
# the clients' JSON and per-second progress).
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
BENCH=$BUILD/client/tpubench
ABUSE=$SRC/tests/integration/abuse.py
for b in "$TPUD" "$TPUCTL" "$BENCH"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
command -v openssl >/dev/null || { echo "openssl missing"; exit 1; }
command -v curl >/dev/null || { echo "curl missing"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import h2, hpack, hyperframe' 2>/dev/null ||
  { echo "python3-h2 missing (apt-get install python3-h2)"; exit 1; }

P99_MS=250       # well-behaved clients' p99 bound, ms, over twice the control's p99
FD_SLACK=2       # file descriptors over the idle count allowed afterwards
RSS_SLACK_MIB=16 # RSS over idle allowed afterwards (A and B); M: 8
# The limits the attacks are measured against (abuse.py derives its expectations from them).
IDLE=3 HTTP_T=3 HS=2 MAXCONN=48 MAXMSG=1048576 UNSENT=262144 STREAMS=100 HDRS=16384
LIMITS="--idle-timeout-s $IDLE --http-timeout-s $HTTP_T --tls-handshake-timeout-s $HS
  --max-connections $MAXCONN --max-message-bytes $MAXMSG --max-unsent-bytes $UNSENT
  --grpc-max-streams $STREAMS --grpc-max-header-bytes $HDRS --io-threads 1 --poll-seconds 0"
ALIM="--idle-timeout $IDLE --http-timeout $HTTP_T --handshake-timeout $HS --max-connections $MAXCONN
  --max-message $MAXMSG --max-unsent $UNSENT --max-streams $STREAMS"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "${TPUD_ABUSE_KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/repo"
cp -r "$SRC/models/digits" "$SRC/models/matmul" "$WORK/repo/"
cp -r "$SRC/models/matmul" "$WORK/repo/reset" # rapid reset's own model: its counters are the cost
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }
T0=$SECONDS

# A self-signed certificate for B (it is its own CA for the clients).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$WORK/key.pem" \
  -out "$WORK/cert.pem" 2>/dev/null || { echo "openssl could not make a certificate"; exit 1; }

# start NAME [tpud flags...]: starts tpud on free ports; sets NAME_PID, NAME_N, NAME_H, NAME_LOG.
# TPUD_ENV (e.g. MALLOC_MMAP_THRESHOLD_=131072) goes into its environment.
start() {
  local name=$1
  shift
  local log=$WORK/tpud.$name.log
  : >"$log"
  env ${TPUD_ENV:-} "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 $LIMITS "$@" 2>"$log" &
  local pid=$!
  PIDS+=($pid)
  tpud_ports "$log" $pid || { echo "(tpud $name)"; exit 1; }
  local n=$NPORT h=$HPORT
  printf -v "${name}_PID" %s $pid
  printf -v "${name}_N" %s "$n"
  printf -v "${name}_H" %s "$h"
  printf -v "${name}_LOG" %s "$log"
}
fds() { ls /proc/$1/fd 2>/dev/null | wc -l; }
# Under AddressSanitizer (ASAN_OPTIONS set by make test-asan) RSS holds its quarantine, not
# tpud's memory: it reads as 0 there and the Release run checks it.
rss() {
  if [ -n "${ASAN_OPTIONS:-}" ]; then echo 0; return; fi
  awk '/^VmRSS:/ {printf "%d", $2 / 1024}' /proc/$1/status
}
metric() { # FILE NAME{LABELS} -> the value (0 when absent)
  awk -v k="$2" '$1 == k {v = $2} END {printf "%d", v + 0}' "$1"
}
TLS_CA="--tls-ca $WORK/cert.pem"

start A --log-level debug
start B --log-level debug --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem"
TPUD_ENV=MALLOC_MMAP_THRESHOLD_=131072 start M
start C # the control: nobody attacks it
echo "A: native $A_N, http $A_H (pid $A_PID); B (TLS): native $B_N, https $B_H; M: native $M_N"

# ---- idle levels, after one pass of every path (lazily allocated state exists by then) ----
"$BENCH" --addr 127.0.0.1:$A_N -c 2 -n 300 --warmup 0 >/dev/null 2>&1
"$BENCH" --protocol http --addr 127.0.0.1:$A_H -c 2 -n 300 --warmup 0 >/dev/null 2>&1
"$BENCH" --addr 127.0.0.1:$B_N $TLS_CA -c 1 -n 100 --warmup 0 >/dev/null 2>&1
"$BENCH" --addr 127.0.0.1:$M_N -c 1 -n 100 --warmup 0 >/dev/null 2>&1
"$BENCH" --addr 127.0.0.1:$C_N -c 2 -n 300 --warmup 0 >/dev/null 2>&1
$PY "$ABUSE" answers --port $A_N >/dev/null || fail "gRPC does not answer before the abuse"
curl -s "http://127.0.0.1:$A_H/metrics" >"$WORK/metrics.A.0"
curl -s --cacert "$WORK/cert.pem" "https://127.0.0.1:$B_H/metrics" >"$WORK/metrics.B.0"
sleep 1
for s in A B M; do
  eval "pid=\$${s}_PID"
  printf -v "${s}_FD0" %s "$(fds $pid)"
  printf -v "${s}_RSS0" %s "$(rss $pid)"
done
echo "idle: A $A_FD0 fds ${A_RSS0} MiB; B $B_FD0 fds ${B_RSS0} MiB; M $M_FD0 fds ${M_RSS0} MiB"

# ---- well-behaved clients, during the abuse of their server (SIGINT: they print their JSON) ----
declare -A WB
wb_start() { # NAME ARGS...: tpubench open loop
  local name=$1
  shift
  "$BENCH" --warmup 0 -d 600 --json "$@" >"$WORK/wb.$name.json" 2>"$WORK/wb.$name.err" &
  WB[$name]=$!
  PIDS+=($!)
}
wb_stop() { # control NAME...: stops them and judges what they saw against the control
  local name f line ctl=0
  for name in "$@"; do
    if [ "$name" = A-grpc ]; then touch "$WORK/stop"; else kill -INT ${WB[$name]} 2>/dev/null; fi
  done
  for name in "$@"; do wait ${WB[$name]} 2>/dev/null; done
  for name in "$@"; do
    f=$WORK/wb.$name.json
    line=$($PY - "$f" "$P99_MS" "$ctl" <<'EOF'
import json, sys
try:
    r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:
    print("FAIL - no result (%s)" % e); sys.exit()
p99, bad = r["latency_ms"]["p99"], r["errors"]
bound = float(sys.argv[2]) + 2 * float(sys.argv[3])
verdict = "ok" if bad == 0 and r["requests"] >= 50 and p99 <= bound else "FAIL"
print("%s %.0f %d requests, %d errors %s, p50 %.2f ms, p99 %.2f ms, max %.1f ms" % (
    verdict, p99, r["requests"], bad, r.get("errors_by_status", {}), r["latency_ms"]["p50"], p99,
    r["latency_ms"]["max"]))
EOF
)
    local verdict=${line%% *} rest=${line#* }
    local p99=${rest%% *} what=${rest#* }
    if [ $name = control ]; then
      [ "$p99" = - ] && { fail "the control client: $what"; p99=0; }
      ctl=$p99
      echo "control (a tpud nobody attacks, same seconds): $what"
      continue
    fi
    local bound="p99 <= $P99_MS ms + 2 x the control's $ctl ms"
    [ $verdict = ok ] && ok "well-behaved client $name during the abuse: $what (bound $bound)" ||
      { fail "well-behaved client $name during the abuse: $what (bound: no error, $bound)"
        [ -s "$f" ] || tail -3 "$WORK/wb.$name.err"; }
  done
}

# ---- the abuse ----
# abuse GROUP NAME ARGS...: runs an abuse.py group in the background, under nice 10 (it shares
# the 2 CPUs with the servers and the clients that measure them); output in $WORK/NAME.out
abuse() {
  local g=$1 n=$2
  shift 2
  nice -n 10 $PY "$ABUSE" $g $ALIM "$@" >"$WORK/$n.out" 2>&1 &
  eval "AB_$n=\$!"
  PIDS+=($!)
}
collect() { # NAME...: waits for the groups and prints their lines
  local n pid
  for n in "$@"; do
    eval "pid=\$AB_$n"
    wait $pid
    local rc=$?
    sed "s/^/[$n] /" "$WORK/$n.out"
    grep -q '^FAIL' "$WORK/$n.out" && FAIL=1
    [ $rc = 0 ] || grep -q '^FAIL' "$WORK/$n.out" || fail "abuse.py $n exited $rc"
  done
}
wb_start control --addr 127.0.0.1:$C_N -c 2 --rate 100
wb_start A-native --addr 127.0.0.1:$A_N -c 2 --rate 100
wb_start A-http --protocol http --addr 127.0.0.1:$A_H -c 2 --rate 100
wb_start B-tls --addr 127.0.0.1:$B_N $TLS_CA -c 1 --rate 50
$PY "$ABUSE" probe --port $A_N --rate 20 --stop "$WORK/stop" >"$WORK/wb.A-grpc.json" 2>&1 &
WB[A-grpc]=$!
PIDS+=($!)
sleep 0.5
C0=$(awk '{print $14 + $15}' /proc/$A_PID/stat)
abuse conn conn --port $A_N --http-port $A_H --pid $A_PID
abuse h2 h2 --port $A_N --http-port $A_H --pid $A_PID --reset-model reset
collect conn h2
# The flood needs every other client of A off new connections: after conn and h2.
abuse flood flood --port $A_N --http-port $A_H --pid $A_PID
abuse tls tls --port $B_N --http-port $B_H --pid $B_PID
collect flood tls
C1=$(awk '{print $14 + $15}' /proc/$A_PID/stat)
wb_stop control A-native A-http A-grpc B-tls
# M last and alone: the answers it is made to compute and hold (200 MatMuls, 170 MiB) take CPU
# the other servers' clients would otherwise be charged for.
wb_start control --addr 127.0.0.1:$C_N -c 2 --rate 100
wb_start M-native --addr 127.0.0.1:$M_N -c 1 --rate 50
sleep 0.5
abuse memory memory --port $M_N --http-port $M_H --pid $M_PID
collect memory
wb_stop control M-native

echo "tpud A used $(awk -v d=$((C1 - C0)) -v t="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", d / t}') s of CPU during the abuse"

# ---- afterwards: back to idle ----
for s in A B M; do
  eval "pid=\$${s}_PID fd0=\$${s}_FD0 rss0=\$${s}_RSS0"
  slack=$RSS_SLACK_MIB
  [ $s = M ] && slack=8
  for _ in $(seq 1 40); do # the slowest timeouts (3 s, and the HTTP sweep) have passed by then
    [ "$(fds $pid)" -le $((fd0 + FD_SLACK)) ] && [ "$(rss $pid)" -le $((rss0 + slack)) ] && break
    sleep 0.25
  done
  fd1=$(fds $pid) rss1=$(rss $pid)
  [ "$fd1" -le $((fd0 + FD_SLACK)) ] && ok "tpud $s: $fd1 file descriptors after the abuse (idle $fd0)" ||
    fail "tpud $s: $fd1 file descriptors after the abuse, idle was $fd0: $(ls -l /proc/$pid/fd | tail -5)"
  [ "$rss1" -le $((rss0 + slack)) ] && ok "tpud $s: RSS $rss1 MiB after the abuse (idle $rss0, allowed +$slack)" ||
    fail "tpud $s: RSS $rss1 MiB after the abuse, idle was $rss0 MiB (allowed +$slack)"
done

# ---- still serving ----
out=$("$TPUCTL" --addr 127.0.0.1:$A_N --timeout 5000 health 2>&1) && [ "$out" = ready ] &&
  ok "A: tpuctl health (framed): ready" || fail "A: tpuctl health: $out"
out=$(curl -s -m 5 "http://127.0.0.1:$A_H/v2/health/ready")
[ "$out" = '{"ready":true}' ] && ok "A: HTTP ready" || fail "A: HTTP ready: $out"
$PY "$ABUSE" answers --port $A_N | sed 's/^/A: /' | grep -v '^A: ok' && fail "A: gRPC after the abuse" || ok "A: gRPC ServerLive and ModelInfer answer"
out=$("$TPUCTL" --addr 127.0.0.1:$B_N $TLS_CA --timeout 5000 health 2>&1) && [ "$out" = ready ] &&
  ok "B: tpuctl health over TLS: ready" || fail "B: tpuctl health over TLS: $out"
out=$(curl -s -m 5 --cacert "$WORK/cert.pem" "https://127.0.0.1:$B_H/v2/health/ready")
[ "$out" = '{"ready":true}' ] && ok "B: HTTPS ready" || fail "B: HTTPS ready: $out"
out=$("$TPUCTL" --addr 127.0.0.1:$M_N --timeout 5000 matmul --data '{"a": {"shape": [1, 2],
  "datatype": "INT8", "data": [1, 2]}, "b": {"shape": [2, 1], "datatype": "INT8", "data": [3, 4]}}' 2>&1)
echo "$out" | grep -q '"data":\[11\]' && ok "M: MatMul answers" || fail "M: MatMul: $out"

# ---- the server's own view: /metrics and its log ----
curl -s "http://127.0.0.1:$A_H/metrics" >"$WORK/metrics.A.1"
curl -s --cacert "$WORK/cert.pem" "https://127.0.0.1:$B_H/metrics" >"$WORK/metrics.B.1"
delta() { # SERVER METRIC -> after - before
  echo $(($(metric "$WORK/metrics.$1.1" "$2") - $(metric "$WORK/metrics.$1.0" "$2")))
}
moved() { # SERVER METRIC MIN WHY
  local d
  d=$(delta "$1" "$2")
  [ "$d" -ge "$3" ] && ok "$1: $2 +$d ($4)" || fail "$1: $2 moved by $d, expected at least $3 ($4)"
}
moved A tpud_bad_frames_total 9 "bad prefixes, half-sent frames, HTTP/2 protocol errors, unacknowledged SETTINGS"
moved A 'tpud_connections_rejected_total{protocol="native"}' $MAXCONN "the native flood past --max-connections"
moved A 'tpud_connections_rejected_total{protocol="http"}' $MAXCONN "the HTTP flood past --max-connections"
moved A 'tpud_requests_total{code="RESOURCE_EXHAUSTED"}' 6 "oversized prefixes, header list, gRPC message"
moved A 'tpud_requests_total{code="CANCELLED"}' 500 "rapid reset: streams reset before their answer"
moved B tpud_bad_frames_total 3 "TLS handshakes that timed out"
echo "A's log: $(grep -c 'rejected: max-connections reached' "$A_LOG") connections rejected at accept," \
  "$(grep -c 'frame announces\|bad frame flag\|compressed' "$A_LOG") bad prefixes," \
  "$(grep -c 'stream ended inside a frame' "$A_LOG") frames cut short," \
  "$(grep -c 'HTTP/2 error' "$A_LOG") HTTP/2 protocol errors; for example:"
grep -m1 'rejected: max-connections' "$A_LOG"
grep -m1 'stream ended inside a frame' "$A_LOG"
grep -m1 'HTTP/2 error' "$A_LOG"
for s in A B; do
  eval "log=\$${s}_LOG"
  echo "why tpud $s closed connections (its log):"
  sed -n 's/.*connection .* closed: //p' "$log" | sort | uniq -c | sort -rn | sed 's/^/  /'
done
logged() { # SERVER MIN PATTERN WHY: at least MIN log lines match
  local log n
  eval "log=\$${1}_LOG"
  n=$(grep -c -- "$3" "$log")
  [ "$n" -ge "$2" ] && ok "$1's log: $n x '$3' ($4)" ||
    fail "$1's log: $n lines with '$3', expected at least $2 ($4)"
}
logged A 4 "^.*connection [0-9]* from .* closed: idle timeout" "native slowloris and flood"
logged A 2 "closed: HTTP/2 SETTINGS not acknowledged in time" "h2 slowloris, silent client"
logged A 4 "http connection .* closed: \(read\|idle\) timeout" "HTTP slowloris"
logged A 1 "http connection .* closed: write timeout" "the HTTP client that never reads"
logged A 1 "rejected: max-connections reached" "the native flood"
logged B 2 "^.*connection [0-9]* from .* closed: TLS handshake timeout" "silent ClientHellos, native port"
logged B 2 "http connection .* closed: TLS handshake timeout" "silent ClientHellos, HTTPS"
for s in A B M; do
  eval "log=\$${s}_LOG"
  grep ' ERROR ' "$log" && fail "tpud $s logged ERROR lines"
done

# ---- SIGTERM: a clean exit after all that ----
for s in A B M C; do
  eval "pid=\$${s}_PID log=\$${s}_LOG"
  kill -TERM $pid
  for _ in $(seq 1 150); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    fail "tpud $s still running 15 s after SIGTERM"
  else
    wait $pid
    rc=$?
    [ $rc = 0 ] && grep -q "tpud stopped" "$log" && ok "tpud $s: SIGTERM, exit 0" ||
      fail "tpud $s exited $rc after SIGTERM: $(tail -3 "$log")"
  fi
done

echo "test_abuse: $((SECONDS - T0)) s"
[ $FAIL = 0 ] && echo "test_abuse: all passed" || echo "test_abuse: FAILED"
exit $FAIL
