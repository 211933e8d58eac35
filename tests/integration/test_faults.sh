#!/bin/bash
# test_faults.sh - what an unlucky operator does to the model repository, against the real tpud
# (issue #15 items 1, 3, 4, 5, 9, 10, 11 and the unreadable new version of 12). Each section
# starts its own tpud and is a regression test of one fault found by adversarial testing:
#   1. descriptors run out (prlimit on the running process) while it rescans: nothing is
#      unloaded, a kept connection is served throughout, a version added meanwhile loads once
#      descriptors are back; memory runs out during a load (RLIMIT_AS): one log line and one
#      audit record, retried with backoff, loaded once memory is back;
#   2. directories made unreadable (chmod 000; tpud runs without CAP_DAC_OVERRIDE): a serving
#      version's, the model's, a new version's: nothing unloads, each is logged once, the new
#      one loads when it can be read;
#   3. model directories with a newline or non-ASCII in their names: skipped with one escaped
#      log line each, /metrics stays valid UTF-8, the others serve;
#   4. FIFOs as model.json, as the checkpoint and as policy.json: refused at once, ModelLoad
#      answers, SIGTERM exits; and as the tokens file or the TLS certificate at a SIGHUP: the
#      reload is refused, the old ones kept, the main loop never blocks;
#   5. a checkpoint truncated and rewritten (cp over it) while it loads: no crash (it was
#      SIGBUS), and it serves the right weights once the copy is whole;
#   6. a checkpoint rewritten in place just after its hash covered the weights: the weights
#      served are always the ones that were hashed;
#   7. a 2 MiB checkpoint whose shapes ask for gigabytes: refused at once with the figures,
#      RSS flat; every model's memory in /metrics and /v2/debug/models;
#   8. SIGTERM during a slow load, after start-up and during it: exit 0 within the drain bound.
# $1 = build directory, $2 = source directory.
set -u
BUILD=$1
SRC=$2
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
FAULTS="$PY $SRC/tests/integration/faults.py"
for b in "$TPUD" "$TPUCTL"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
for c in prlimit setpriv mkfifo openssl curl; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
$PY -c 'import numpy' || { echo "python3-numpy missing (deploy/deps.sh installs it)"; exit 1; }
V1=$SRC/models/digits/1

WORK=$(mktemp -d)
PID=
KAP=
trap 'exec 8>&- 9<&- 2>/dev/null; kill ${KAP:-} 2>/dev/null; [ -n "${PID:-}" ] && kill -9 $PID 2>/dev/null;
      chmod -R u+rwx "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }

start() { # start REPO [tpud args...]: starts tpud (PID, NPORT, HPORT, LOG); WRAP= prefixes it
  local repo=$1
  shift
  LOG=$WORK/tpud.$RANDOM.log
  ${WRAP:-} "$TPUD" --models "$repo" --port 0 --http-port 0 --poll-seconds 1 "$@" 2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID || { PID=; return 1; }
}

stop() { # stop [SECONDS]: SIGTERM, expect exit 0 within SECONDS (default 10); sets STOP_S
  local limit=${1:-10} t0 rc
  t0=$(date +%s.%N)
  kill -TERM $PID
  for _ in $(seq 1 $((limit * 20))); do kill -0 $PID 2>/dev/null || break; sleep 0.05; done
  if kill -0 $PID 2>/dev/null; then
    fail "tpud still running ${limit} s after SIGTERM"
    kill -9 $PID
  fi
  wait $PID
  rc=$?
  STOP_S=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  [ $rc -eq 0 ] || fail "tpud exited $rc after SIGTERM (log: $LOG)"
  PID=
}

ctl() { timeout 15 "$TPUCTL" --addr "127.0.0.1:$NPORT" "$@"; }

state() { # state MODEL VERSION: what `tpuctl models` says (or "none")
  local s
  s=$(ctl models --json 2>/dev/null |
      grep -o "\"name\":\"$1\",\"version\":\"$2\",\"state\":\"[A-Z]*\"" |
      sed 's/.*"state":"\([A-Z]*\)"/\1/')
  echo "${s:-none}"
}

wait_state() { # wait_state MODEL VERSION STATE SECONDS
  for _ in $(seq 1 $(($4 * 10))); do
    [ "$(state "$1" "$2")" = "$3" ] && return 0
    sleep 0.1
  done
  fail "$1 version $2 is $(state "$1" "$2"), not $3, after $4 s"
  return 1
}

limit_for_free() { # limit_for_free K: the RLIMIT_NOFILE that leaves tpud exactly K descriptors
  # (a new descriptor takes the lowest free number, refused at or above the limit: the limit is
  # the K+1-th unused number)
  local used n=0 k=0
  used=" $(ls /proc/$PID/fd | tr '\n' ' ') "
  while :; do
    case $used in *" $n "*) ;; *) [ $k = "$1" ] && { echo $n; return; }; k=$((k + 1)) ;; esac
    n=$((n + 1))
  done
}

copy_digits() { # copy_digits DEST: a complete digits version, placed atomically
  mkdir -p "$(dirname "$1")"
  cp -r "$V1" "$1.tmp" && mv "$1.tmp" "$1"
}

install_watched() { # install_watched STAGED DEST ACTION [ARGS]: watches STAGED's checkpoint
  # (faults.py on-open ACTION), renames STAGED to DEST (a new version the next poll loads) and
  # waits until the action was done on the load's open
  local armed acted
  coproc WATCH { $FAULTS on-open "$1/model.safetensors" "${@:3}"; }
  read -r -t 10 armed <&"${WATCH[0]}"
  [ "$armed" = armed ] || fail "watcher: $armed"
  mv "$1" "$2"
  read -r -t 30 acted <&"${WATCH[0]}"
  [ "$acted" = acted ] || fail "watcher never saw the load open the checkpoint"
  wait "${WATCH_PID:-}" 2>/dev/null
}

no_removal() { # no_removal WHAT: the log must not say a directory was removed
  if grep -q "its directory was removed" "$LOG"; then
    fail "$1: a version was unloaded as removed"
    grep "unloading" "$LOG" | head -3
  fi
}

# ---------------------------------------------------------------------------------------------
echo "== 1. descriptors run out during rescans"
R=$WORK/r1
copy_digits "$R/digits/1"
start "$R" || exit 1
coproc KA { $FAULTS keepalive "$HPORT"; }
KAP=$KA_PID # bash unsets KA_PID when the coproc ends
exec 8>&"${KA[1]}" 9<&"${KA[0]}"
ka() { echo "$*" >&8; local r; read -r -t 15 r <&9; echo "${r:-timeout}"; }
[ "$(ka infer digits)" = 200 ] || fail "kept connection: infer failed before the test"
HARD=$(prlimit --pid $PID --nofile --output=HARD --noheadings | tr -d ' ')
for free in 0 1 2; do
  prlimit --pid $PID --nofile="$(limit_for_free $free)":"$HARD" || fail "prlimit failed"
  [ $free = 0 ] && copy_digits "$R/digits/2" # appears while it cannot be read
  kill -HUP $PID
  sleep 1.5 # the SIGHUP scan and a poll
  r=$(ka ready digits 1)
  [ "$r" = 200 ] || fail "$free free descriptors: version 1 not ready over the kept connection ($r)"
  r=$(ka infer digits)
  [ "$r" = 200 ] || fail "$free free descriptors: infer over the kept connection: $r"
done
prlimit --pid $PID --nofile="$HARD":"$HARD"
wait_state digits 2 READY 10 # now readable: loads, and replaces 1 under the policy
no_removal "descriptors"
grep -q "model repository .*Too many open files.*serving what is loaded" "$LOG" ||
  fail "the unreadable root was not logged"
n=$(grep -c "model 'digits'.*cannot be read (Too many open files)" "$LOG")
[ "$n" -ge 1 ] && [ "$n" -le 4 ] || fail "unreadable directories logged $n times (expected once per problem)"
exec 8>&- 9<&-
kill $KAP 2>/dev/null
wait $KAP 2>/dev/null
KAP=
stop

# Memory runs out during a load (RLIMIT_AS on the running tpud, a 96 MiB checkpoint): the load
# fails for want of memory, not for its files: logged and audited once, retried with backoff,
# and it loads once memory is back, files unchanged.
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then
  # A sanitizer's allocator reserves its own address space: RLIMIT_AS does not make malloc fail.
  echo "  (memory section skipped under a sanitizer)"
else
  R=$WORK/r1b
  copy_digits "$R/digits/1"
  mkdir -p "$R/wide"
  $FAULTS mkmodel "$R/wide/.1" --inputs 64 --outputs 10 --pad 100663296 || exit 1
  start "$R" --audit-log "$WORK/audit1b.log" || exit 1
  AS=$(awk '/VmSize/ {print $2 * 1024}' /proc/$PID/status)
  AS_HARD=$(prlimit --pid $PID --as --output=HARD --noheadings | tr -d ' ')
  prlimit --pid $PID --as=$((AS + (48 << 20))):"$AS_HARD" || fail "prlimit --as failed"
  mv "$R/wide/.1" "$R/wide/1"
  sleep 4.5 # polls every second: without backoff, four or five failed loads
  n=$(grep -c "model 'wide' version 1: load failed: .*out of memory" "$LOG")
  [ "$n" = 1 ] || fail "a load failing for want of memory was logged $n times in 4.5 s (expected once)"
  grep "model 'wide' version 1: load failed" "$LOG" | head -1 | grep -q "will retry (descriptors or memory ran out)" ||
    fail "the memory failure is not called transient: $(grep "'wide' version 1: load failed" "$LOG" | head -1)"
  na=$(grep -c '"kind":"load_failed".*"model":"wide"' "$WORK/audit1b.log")
  [ "$na" = 1 ] || fail "$na load_failed audit records for one transient failure"
  [ "$(state digits 1)" = READY ] || fail "digits not ready while memory ran out"
  prlimit --pid $PID --as="$AS_HARD":"$AS_HARD"
  wait_state wide 1 READY 20 # the next retry (backing off: 8 s at most here), same files
  stop
fi

# ---------------------------------------------------------------------------------------------
echo "== 2. unreadable directories (tpud without CAP_DAC_OVERRIDE)"
R=$WORK/r2
copy_digits "$R/digits/1"
WRAP="setpriv --bounding-set=-dac_override,-dac_read_search" start "$R" || exit 1
chmod 000 "$R/digits/1"
sleep 2.5
[ "$(state digits 1)" = READY ] || fail "a serving version made unreadable: $(state digits 1)"
chmod 755 "$R/digits/1"
chmod 000 "$R/digits"
sleep 2.5
chmod 755 "$R/digits"
[ "$(state digits 1)" = READY ] || fail "the model directory made unreadable: $(state digits 1)"
copy_digits "$R/digits/2"
chmod 000 "$R/digits/2"
sleep 2.5
[ "$(state digits 1)" = READY ] || fail "an unreadable new version displaced version 1"
[ "$(state digits 2)" = none ] || fail "the unreadable version 2 shows as $(state digits 2)"
chmod 755 "$R/digits/2"
wait_state digits 2 READY 10
no_removal "chmod 000"
for what in "model 'digits' version 1: its directory cannot be read (Permission denied)" \
            "model 'digits': its directory cannot be read (Permission denied)" \
            "model 'digits' version 2: its directory cannot be read (Permission denied)"; do
  n=$(grep -cF "$what" "$LOG")
  [ "$n" = 1 ] || fail "'$what' logged $n times, expected once"
done
stop

# ---------------------------------------------------------------------------------------------
echo "== 3. model directory names outside [A-Za-z0-9._-]"
R=$WORK/r3
copy_digits "$R/digits/1"
copy_digits "$R/bad"$'\n'"2026-01-01T00:00:00.000Z ERROR forged/1"
copy_digits "$R/caf"$'\xc3\xa9'"/1"
copy_digits "$R/in"$'\xff'"valid/1"
start "$R" || exit 1
sleep 2.5 # a few polls: each name is logged once
[ "$(state digits 1)" = READY ] || fail "digits not ready next to badly named models"
for n in 'bad\x0a2026-01-01T00:00:00.000Z ERROR forged' 'caf\xc3\xa9' 'in\xffvalid'; do
  c=$(grep -cF "directory '$n' skipped: model names are 1-128 bytes of [A-Za-z0-9._-]" "$LOG")
  [ "$c" = 1 ] || fail "directory '$n': logged $c times, expected once"
done
grep -q "^2026-01-01T00:00:00.000Z ERROR forged" "$LOG" && fail "a directory name forged a log line"
curl -s "127.0.0.1:$HPORT/metrics" >"$WORK/m3"
iconv -f UTF-8 -t UTF-8 "$WORK/m3" >/dev/null 2>&1 || fail "/metrics is not valid UTF-8"
grep -q 'model="digits"' "$WORK/m3" || fail "/metrics lost digits"
grep -qE 'forged|caf|valid"' "$WORK/m3" && fail "/metrics shows a skipped model"
out=$(ctl models) || fail "tpuctl models failed"
echo "$out" | grep -qE "forged|caf|valid" && fail "tpuctl models lists a skipped model"
stop

# ---------------------------------------------------------------------------------------------
echo "== 4. FIFOs where files belong"
R=$WORK/r4
copy_digits "$R/digits/1"
start "$R" || exit 1
mkdir -p "$R/fifo1/1" "$R/fifo2/1"
mkfifo "$R/fifo1/1/model.json"
cp "$V1/model.json" "$R/fifo2/1/"
mkfifo "$R/fifo2/1/model.safetensors"
mkfifo "$R/digits/policy.json"
wait_state fifo1 1 FAILED 5
wait_state fifo2 1 FAILED 5
ctl models | grep -E "^fifo1 +1 +FAILED .*a FIFO, not a regular file" >/dev/null ||
  fail "fifo1's reason does not say FIFO: $(ctl models | grep fifo1)"
t0=$(date +%s)
out=$(ctl load fifo2 2>&1) && fail "tpuctl load fifo2 succeeded"
[ $(($(date +%s) - t0)) -le 5 ] || fail "tpuctl load fifo2 took $(($(date +%s) - t0)) s"
echo "$out" | grep -q "a FIFO, not a regular file" || fail "tpuctl load fifo2 said: $out"
grep -q "model 'digits': policy.json: a FIFO, not a regular file; keeping version policy" "$LOG" ||
  fail "the FIFO policy.json was not refused"
[ "$(state digits 1)" = READY ] || fail "digits not ready next to the FIFOs"
stop 5

# The files a SIGHUP reloads (tokens, TLS certificate): a FIFO in their place is refused and the
# old ones kept; the main loop does not block (SIGTERM still stops it).
R=$WORK/r4b
copy_digits "$R/digits/1"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=t \
  -keyout "$WORK/k.pem" -out "$WORK/c.pem" 2>/dev/null || fail "openssl req"
echo "token $(printf %s secret | sha256sum | cut -d' ' -f1) admin ops" >"$WORK/tokens"
start "$R" --tokens "$WORK/tokens" --tls-cert "$WORK/c.pem" --tls-key "$WORK/k.pem" \
  --http-tls=false || exit 1
rm "$WORK/tokens" "$WORK/c.pem"
mkfifo "$WORK/tokens" "$WORK/c.pem"
kill -HUP $PID
sleep 1
grep -q "tokens file $WORK/tokens: a FIFO, not a regular file" "$LOG" || fail "FIFO tokens file not refused"
grep -q -- "--tls-cert $WORK/c.pem: a FIFO, not a regular file" "$LOG" || fail "FIFO certificate not refused"
r=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer secret" \
  "127.0.0.1:$HPORT/v2/models/digits")
[ "$r" = 200 ] || fail "after the refused reload, the old token: HTTP $r"
stop 5

# ---------------------------------------------------------------------------------------------
echo "== 5. a checkpoint truncated and rewritten while it loads (was SIGBUS)"
R=$WORK/r5
copy_digits "$R/digits/1"
mkdir -p "$R/big"
$FAULTS mkmodel "$R/big/.1" --inputs 64 --outputs 10 --pad 134217728 || exit 1
start "$R" || exit 1
install_watched "$R/big/.1" "$R/big/1" truncate-rewrite
wait_state big 1 READY 15
kill -0 $PID 2>/dev/null || { fail "tpud died (signal $(( $(wait $PID; echo $?) - 128 )))"; PID=; }
if [ -n "$PID" ]; then
  r=$($FAULTS check "$HPORT" big 1 "$R/big/.1.npz")
  [ "$r" = same ] || fail "big after the rewrite: $r"
  grep -q "model 'big' version 1: load failed: .*changed while it was being read" "$LOG" ||
    echo "  (the truncation came after the read finished: no failed load to see)"
  stop
fi

# ---------------------------------------------------------------------------------------------
echo "== 6. weights rewritten in place right after the hash passed them"
R=$WORK/r6
copy_digits "$R/digits/1"
mkdir -p "$R/race"
$FAULTS mkmodel "$R/race/.1" --inputs 64 --outputs 10 --pad 134217728 || exit 1
start "$R" || exit 1
install_watched "$R/race/.1" "$R/race/1" overwrite fc0.weight 15
bad=0
for _ in $(seq 1 30); do # 3 s: the first load and the reload after the change
  r=$($FAULTS check "$HPORT" race 1 "$R/race/.1.npz")
  case $r in same | "status 503" | "status 404") ;; *) bad=$((bad + 1)); last=$r ;; esac
  sleep 0.1
done
[ $bad = 0 ] || fail "race served weights that were not hashed ($bad times; last: $last)"
grep -q "model 'race' version 1: .*SHA-256 mismatch" "$LOG" ||
  fail "the rewritten checkpoint was never refused for its digest"
stop

# ---------------------------------------------------------------------------------------------
echo "== 7. a small file that asks for gigabytes"
R=$WORK/r7
copy_digits "$R/digits/1"
start "$R" || exit 1
rss0=$(awk '/VmRSS/ {print $2}' /proc/$PID/status)
mkdir -p "$R/huge"
$FAULTS mkmodel "$R/huge/.1" --inputs 262144 --outputs 2 --buckets 1,4096 || exit 1
mv "$R/huge/.1" "$R/huge/1"
t0=$(date +%s)
wait_state huge 1 FAILED 8
ctl models | grep -E "^huge +1 +FAILED .*needs [0-9.]+ GiB to load, more than the model memory limit of 2.0 GiB" >/dev/null ||
  fail "huge's reason: $(ctl models | grep huge)"
rss1=$(awk '/VmRSS/ {print $2}' /proc/$PID/status)
[ $((rss1 - rss0)) -lt 102400 ] || fail "RSS grew by $(((rss1 - rss0) / 1024)) MiB refusing huge"
curl -s "127.0.0.1:$HPORT/metrics" | grep -E '^tpud_model_memory_bytes\{model="digits",version="1"\} [1-9][0-9]*$' >/dev/null ||
  fail "no tpud_model_memory_bytes for digits"
curl -s "127.0.0.1:$HPORT/v2/debug/models" | grep -qE '"memory_bytes": ?[1-9]' ||
  fail "/v2/debug/models has no memory_bytes"
grep -qE "model 'digits' version 1: ready in .*memory [0-9.]+ MiB" "$LOG" || fail "no memory in the ready line"
ctl models | grep -qE "^digits +1 +READY +[0-9.]+ MiB" || fail "tpuctl models shows no memory: $(ctl models)"
ctl models --json | grep -qE '"memory_bytes":[1-9]' || fail "tpuctl models --json has no memory_bytes"
stop

# ---------------------------------------------------------------------------------------------
echo "== 8. SIGTERM during a slow load"
R=$WORK/r8
mkdir -p "$R/slow"
# 24 layers of 512x512 and 11 buckets up to 1024: ~14 s to load on the reference kernels.
$FAULTS mkmodel "$R/slow/.1" --inputs 512 --hidden 512 --layers 24 --outputs 10 \
  --buckets 1,2,4,8,16,32,64,128,256,512,1024 || exit 1
copy_digits "$R/digits/1"
export TPUD_ISA=ref
start "$R" --threads 1 --drain-timeout-s 1 || exit 1
mv "$R/slow/.1" "$R/slow/1"
for _ in $(seq 1 50); do grep -q "model 'slow' version 1: loading from" "$LOG" && break; sleep 0.1; done
sleep 1
[ "$(state slow 1)" = LOADING ] || fail "slow is $(state slow 1), not LOADING"
stop 4
echo "  stopped ${STOP_S} s after SIGTERM during a load (--drain-timeout-s 1)"
grep -q "model 'slow' version 1: load abandoned (server stopping)" "$LOG" ||
  fail "the load was not abandoned"
# During start-up: the load runs before the ports are announced.
LOG=$WORK/tpud.startup.log
"$TPUD" --models "$R" --port 0 --http-port 0 --threads 1 --drain-timeout-s 1 2>"$LOG" &
PID=$!
for _ in $(seq 1 50); do grep -q "model 'slow' version 1: loading from" "$LOG" && break; sleep 0.1; done
sleep 1
stop 4
echo "  stopped ${STOP_S} s after SIGTERM during the start-up load"
grep -q "a stop was requested during start-up" "$LOG" || fail "start-up stop not logged"
unset TPUD_ISA

[ $FAIL -eq 0 ] && echo "test_faults: ok"
exit $FAIL
