#!/bin/bash
# test_catalogue.sh - the bad-input catalogue (catalogue.py) against the real tpud: malformed
# requests over the framed protocol and gRPC on the native port and HTTP/1.1 JSON on the HTTP
# port, each with its documented status and message, the server answering health after every
# one. Then: the same PID still serving, one start in the log and no crash or ERROR line, the
# audit log (every rejection is recorded) verifying, and a clean SIGTERM exit.
# $1 = build directory, $2 = source directory. TPUD_WRAP (e.g. "valgrind -q") wraps tpud;
# CATALOGUE_STRICT=1 makes the cases marked as known server bugs fail.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
for b in "$TPUD" "$TPUCTL"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
[ -f "$SRC/models/digits/1/model.json" ] || { echo "models/digits/1 missing"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import grpc' 2>/dev/null ||
  { echo "python3-grpcio missing (deploy/deps.sh installs it)"; exit 1; }
$PY -c 'import h2' 2>/dev/null ||
  echo "note: python3-h2 missing: the hand-made HTTP/2 cases are skipped"

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/repo/digits"
cp -r "$SRC/models/digits/1" "$WORK/repo/digits/1"
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }

# --queue-rows 256: a 300-row request is refused as too many rows queued (RESOURCE_EXHAUSTED).
LOG=$WORK/tpud.log
${TPUD_WRAP:-} "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --io-threads 2 \
  --queue-rows 256 --poll-seconds 0 --audit-log "$WORK/audit.log" 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1

$PY "$SRC/tests/integration/catalogue.py" --native-port "$NPORT" --http-port "$HPORT" \
  --pid "$PID" || fail "catalogue.py"

# The same process served every case: alive, started once; then a clean SIGTERM exit, and no
# crash (or sanitizer report, when built with TPUD_SANITIZE) or ERROR line in the whole log.
kill -0 $PID 2>/dev/null || fail "tpud (pid $PID) is gone"
[ "$(grep -c 'tpud starting' "$LOG")" = 1 ] || fail "tpud started more than once"
kill -TERM $PID
wait $PID
rc=$?
PID=
[ $rc -eq 0 ] || fail "tpud exited $rc after SIGTERM"
grep -q "tpud stopped" "$LOG" || fail "no 'tpud stopped' line"
CRASH="Sanitizer|runtime error:|Segmentation|SIGSEGV|SIGABRT|Assertion|double free|stack smashing"
if grep -E "$CRASH|core dumped" "$LOG"; then
  fail "crash signature in the log"
fi
if grep " ERROR " "$LOG"; then fail "ERROR lines in the log"; fi
# Every rejection above went through the audit path: the chain must still verify.
"$TPUCTL" audit verify "$WORK/audit.log" >"$WORK/verify" 2>&1 ||
  fail "tpuctl audit verify: $(cat "$WORK/verify")"

[ $FAIL -eq 0 ] && echo "test_catalogue: ok"
exit $FAIL
