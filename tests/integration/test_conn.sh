#!/bin/bash
# test_conn.sh - the native port's connection handling against the real tpud (conn_edges.py):
# back-pressure, a fatal frame, the framed and HTTP/2 idle timeouts, the HTTP/2 SETTINGS
# timeout; then a clean SIGTERM exit with no crash or ERROR line in the log.
# $1 = build directory, $2 = source directory. TPUD_WRAP wraps tpud.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
TPUD=$BUILD/server/tpud
[ -x "$TPUD" ] || { echo "$TPUD not built"; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import h2' 2>/dev/null || { echo "python3-h2 missing (deploy/deps.sh installs it)"; exit 1; }

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

LOG=$WORK/tpud.log
${TPUD_WRAP:-} "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --io-threads 1 \
  --poll-seconds 0 --idle-timeout-s 2 --tls-handshake-timeout-s 2 --max-inflight-per-conn 2 \
  --max-unsent-bytes 4096 2>"$LOG" &
PID=$!
PORT=
for _ in $(seq 1 300); do
  PORT=$(sed -n 's/.*tpud listening on 127\.0\.0\.1:\([0-9]*\) (native).*/\1/p' "$LOG" 2>/dev/null)
  [ -n "$PORT" ] && break
  kill -0 $PID 2>/dev/null || break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "tpud did not start:"; cat "$LOG"; exit 1; }

$PY "$SRC/tests/integration/conn_edges.py" "$PORT" || fail "conn_edges.py"

kill -TERM $PID
wait $PID
rc=$?
PID=
[ $rc -eq 0 ] || fail "tpud exited $rc after SIGTERM"
grep -q "tpud stopped" "$LOG" || fail "no 'tpud stopped' line"
if grep -E "Sanitizer|runtime error:|Segmentation|SIGSEGV|SIGABRT|double free| ERROR " "$LOG"; then
  fail "crash signature or ERROR line in the log"
fi
[ $FAIL -eq 0 ] && echo "test_conn: ok"
exit $FAIL
