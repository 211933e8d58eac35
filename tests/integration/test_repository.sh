#!/bin/bash
# test_repository.sh - the model repository under steady load, against the real tpud:
#   1. a new version copied in atomically (temp name in the model dir, then rename) becomes the
#      serving one with zero failed requests;
#   2. a version whose files appear non-atomically (model.json first, the checkpoint written
#      slowly) is refused while partial, then serves, with zero failed requests;
#   3. a corrupt next version (bad digest) is refused while the previous keeps serving, and
#      `tpuctl models` shows it FAILED with the reason; fixing its files loads it on the next poll;
#   4. unloading the model under load fails its queued requests with UNAVAILABLE and nothing
#      else; `tpuctl load` brings it back; unloading the serving version (a rollback) under 64
#      native and 16 HTTP connections loads the previous one first: not one request fails;
#      loading a missing version is NOT_FOUND;
#   5. with --poll-seconds 0 nothing is noticed until SIGHUP, which rescans at once; a
#      policy.json {"latest": 2} keeps two versions ready.
# $1 = build directory, $2 = source directory. Set TPUD_WRAP (e.g. "valgrind -q") to wrap tpud.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
LOADGEN=$BUILD/tests/integration/repo_load
TPUCTL=$BUILD/client/tpuctl
for b in "$TPUD" "$LOADGEN" "$TPUCTL"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
V1=$SRC/models/digits/1
[ -f "$V1/model.json" ] || { echo "models/digits/1 missing"; exit 1; }

WORK=$(mktemp -d)
PID=
LPID=
trap 'kill $LPID $PID 2>/dev/null; rm -rf "$WORK"' EXIT
REPO=$WORK/repo
mkdir -p "$REPO/digits"
cp -r "$V1" "$REPO/digits/1"
cp "$SRC/models/README.md" "$REPO/" # files at the top of the repository are ignored
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
# Slower under valgrind: every wait scales.
SCALE=1
[ -n "${TPUD_WRAP:-}" ] && SCALE=10

start() { # start ARGS...: starts tpud, sets PID and PORT
  LOG=$WORK/tpud.$RANDOM.log
  ${TPUD_WRAP:-} "$TPUD" --models "$REPO" --port 0 --http-port 0 --io-threads 2 "$@" 2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID native $((300 * SCALE)) || exit 1
  PORT=$NPORT
}

stop() { # stop: SIGTERM, expect exit 0
  kill -TERM $PID
  wait $PID
  local rc=$?
  [ $rc -eq 0 ] || fail "tpud exited $rc after SIGTERM"
  PID=
}

ctl() { "$TPUCTL" --addr "127.0.0.1:$PORT" "$@"; }

state() { # state VERSION: the state `tpuctl models` shows for digits VERSION (or "none")
  local s
  s=$(ctl models --json | grep -o "\"name\":\"digits\",\"version\":\"$1\",\"state\":\"[A-Z]*\"" |
      sed 's/.*"state":"\([A-Z]*\)"/\1/')
  echo "${s:-none}"
}

wait_state() { # wait_state VERSION STATE SECONDS
  for _ in $(seq 1 $(($3 * 10 * SCALE))); do
    [ "$(state "$1")" = "$2" ] && return 0
    sleep 0.1
  done
  fail "digits version $1 is $(state "$1"), not $2, after $3 s"
  ctl models
  return 1
}

load_start() { # load_start [CONNECTIONS]: steady load on digits (default 8 connections)
  rm -f "$WORK/stop"
  "$LOADGEN" "$PORT" $((120 * SCALE)) "$WORK/stop" "${1:-8}" >"$WORK/load.out" 2>"$WORK/load.err" &
  LPID=$!
  sleep 1
}

load_stop() { # load_stop: stops the load; sets RESULT to its summary line
  sleep 0.5
  touch "$WORK/stop"
  wait $LPID
  LPID=
  RESULT=$(cat "$WORK/load.out")
  echo "  load: $RESULT"
  [ -s "$WORK/load.err" ] && head -5 "$WORK/load.err"
}

field() { echo "$RESULT" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

expect_clean() { # expect_clean LAST_VERSION: no failure of any kind, answers from LAST_VERSION
  [ "$(field ok)" -gt 0 ] || fail "no successful requests"
  [ "$(field other)" = 0 ] && [ "$(field unloading)" = 0 ] && [ "$(field notready)" = 0 ] ||
    fail "requests failed: $RESULT"
  [ "$(field last)" = "$1" ] || fail "the last answer came from version $(field last), not $1"
  [ -n "$(field "v$1")" ] || fail "no answer from version $1"
}

install_version() { # install_version V [CHECKPOINT]: copies v1 under a temp name, renames it
  local tmp=$REPO/digits/$1.partial
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp "$V1/model.json" "$tmp/"
  cp "${2:-$V1/model.safetensors}" "$tmp/model.safetensors"
  mv "$tmp" "$REPO/digits/$1"
}

echo "== 1. atomic copy of version 2 under load"
start --poll-seconds 1
[ "$(state 1)" = READY ] || fail "version 1 not ready at start"
load_start
install_version 2
wait_state 2 READY 10
wait_state 1 UNAVAILABLE 10
load_stop
expect_clean 2
grep -q "model 'digits' version 2: ready in [0-9]* ms (dense, sha256 " "$LOG" || fail "no 'ready in' line"
grep -q "model 'digits' version 1: unloaded" "$LOG" || fail "version 1 was not freed"

echo "== 2. version 3 written non-atomically (model.json first, checkpoint slowly) under load"
load_start
mkdir "$REPO/digits/3"
cp "$V1/model.json" "$REPO/digits/3/"
sleep 1.5
SIZE=$(stat -c %s "$V1/model.safetensors")
CH=$((SIZE / 4 + 1))
for i in 0 1 2 3; do
  dd if="$V1/model.safetensors" of="$REPO/digits/3/model.safetensors" bs=$CH skip=$i seek=$i \
     count=1 conv=notrunc status=none
  sleep 1.2
done
cmp -s "$V1/model.safetensors" "$REPO/digits/3/model.safetensors" || fail "slow copy broken"
wait_state 3 READY 10
wait_state 2 UNAVAILABLE 10
load_stop
expect_clean 3
grep -q "model 'digits' version 3: load failed: .*; will retry when files change" "$LOG" ||
  fail "the partial version 3 was never refused"

echo "== 3. corrupt version 4 is refused; version 3 keeps serving; fixing it loads it"
load_start
cp "$V1/model.safetensors" "$WORK/bad.safetensors"
printf '\x01\x02\x03\x04' | dd of="$WORK/bad.safetensors" bs=1 seek=$((SIZE - 4)) conv=notrunc \
  status=none
install_version 4 "$WORK/bad.safetensors"
wait_state 4 FAILED 10
sleep 1.5 # a few more polls: a failed version is not retried while its files stay the same
load_stop
expect_clean 3
[ "$(state 3)" = READY ] || fail "version 3 stopped serving"
ctl models | grep -E "^digits +4 +FAILED +.*(sha256|SHA-256|digest)" ||
  { fail "tpuctl models does not show version 4 failed with the digest reason"; ctl models; }
n=$(grep -c "model 'digits' version 4: load failed" "$LOG")
[ "$n" = 1 ] || fail "version 4 was tried $n times with unchanged files"
load_start
cp "$V1/model.safetensors" "$REPO/digits/4/.fixed" && mv "$REPO/digits/4/.fixed" \
  "$REPO/digits/4/model.safetensors"
wait_state 4 READY 10
load_stop
expect_clean 4

echo "== 4. unload under load"
load_start
out=$(ctl unload digits) || fail "tpuctl unload failed"
echo "  $out"
[ "$out" = "unloaded digits version 4" ] || fail "unload said '$out'"
sleep 0.5
load_stop
[ "$(field other)" = 0 ] || fail "unload produced failures other than UNAVAILABLE: $RESULT"
[ "$(field notready)" -gt 0 ] || fail "requests after the unload were still served: $RESULT"
echo "  queued requests failed with UNAVAILABLE: $(field unloading)"
wait_state 4 UNAVAILABLE 10
sleep 1.5 # polls must not bring an unloaded model back
[ "$(state 4)" = UNAVAILABLE ] || fail "a poll reloaded the unloaded model"
out=$(ctl load digits) || fail "tpuctl load failed"
[ "$out" = "loaded digits version 4" ] || fail "load said '$out'"
[ "$(state 4)" = READY ] || fail "version 4 not ready after load"

echo "== 4b. rollback under load: unloading the serving version 4 makes 3 serve first"
# 64 native connections and 16 HTTP ones, none of which may see a failure of any kind.
HPORT=$(sed -n 's/.*tpud listening on 127\.0\.0\.1:\([0-9]*\) (http.*/\1/p' "$LOG")
load_start 64
"$BUILD/client/tpubench" --protocol http --addr "127.0.0.1:$HPORT" -c 16 -d $((4 * SCALE)) \
  --warmup 0 --json >"$WORK/http.json" 2>"$WORK/http.err" &
BPID=$!
out=$(ctl unload digits 4) || fail "tpuctl unload digits 4 failed"
[ "$out" = "unloaded digits version 4" ] || fail "unload 4 said '$out'"
[ "$(state 3)" = READY ] || fail "version 3 is $(state 3) right after the unload of 4"
[ "$(state 4)" = UNAVAILABLE ] || fail "version 4 is $(state 4) after its unload"
sleep 1
load_stop
expect_clean 3
wait $BPID && echo "  http: $(grep -o '"requests":[0-9]*,"errors":[0-9]*' "$WORK/http.json")" ||
  fail "HTTP requests failed during the rollback: $(head -c 400 "$WORK/http.json") $(head -3 "$WORK/http.err")"
grep -q "model 'digits' version 4: unloading (unloaded by request); in-flight requests finish first" "$LOG" ||
  fail "the unload of version 4 did not drain: $(grep "version 4: unloading" "$LOG")"
out=$(ctl load digits 4) || fail "tpuctl load digits 4 failed"
[ "$out" = "loaded digits version 4" ] || fail "load 4 said '$out'"
wait_state 3 UNAVAILABLE 10

ctl load digits 9 2>"$WORK/err" && fail "loading a missing version succeeded"
grep -q "no version 9" "$WORK/err" || { fail "load of version 9: $(cat "$WORK/err")"; }
out=$(ctl load digits 1) || fail "tpuctl load digits 1 failed"
[ "$out" = "loaded digits versions 1, 4" ] || fail "load 1 said '$out'"
sleep 1.5
[ "$(state 1)" = READY ] || fail "pinned version 1 was unloaded by a poll"
out=$(ctl unload digits 1) || fail "tpuctl unload digits 1 failed"
[ "$out" = "unloaded digits version 1" ] || fail "unload 1 said '$out'"
[ "$(state 4)" = READY ] || fail "unloading version 1 touched version 4"
stop
grep "ERROR" "$LOG" | grep -v "version [34]: load failed" && fail "unexpected ERROR lines"

echo "== 5. --poll-seconds 0: SIGHUP rescans"
start --poll-seconds 0
wait_state 4 READY 5
install_version 5
sleep 1.5
[ "$(state 5)" = none ] || fail "version 5 noticed without polling or SIGHUP"
kill -HUP $PID
wait_state 5 READY 5
wait_state 4 UNAVAILABLE 5
echo '{"latest": 2}' >"$REPO/digits/policy.json"
kill -HUP $PID
wait_state 4 READY 5
[ "$(state 5)" = READY ] || fail "version 5 not ready under latest 2"
[ "$(state 3)" = UNAVAILABLE ] || fail "version 3 is $(state 3) under latest 2"
echo '{"latest": 0}' >"$REPO/digits/policy.json"
kill -HUP $PID
sleep 1
grep -q "policy.json: \"latest\": expected an integer from 1" "$LOG" || fail "bad policy not logged"
[ "$(state 4)" = READY ] || fail "a bad policy file changed what serves"
stop

[ $FAIL -eq 0 ] && echo "test_repository: ok"
exit $FAIL
