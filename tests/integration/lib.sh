# lib.sh - sourced by the integration scripts (and the server benches): the one copy of
# "wait until tpud announces its ports".
#
# tpud_ports LOG PID [native] [TRIES]: waits until tpud (PID, logging to LOG) has announced its
# listeners ("tpud listening on 127.0.0.1:N (native)" and "(http)"; only the native one with
# `native`), polling every 0.1 s up to TRIES times (default 300). Sets NPORT and HPORT. Returns
# 0, or prints "tpud did not start:" and the log and returns 1 (tpud exited, or no ports in time).
tpud_ports() {
  local log=$1 pid=$2 only= tries=300
  [ "${3:-}" = native ] && { only=native; shift; }
  [ -n "${3:-}" ] && tries=$3
  NPORT= HPORT=
  for _ in $(seq 1 "$tries"); do
    NPORT=$(sed -n 's/.*tpud listening on 127\.0\.0\.1:\([0-9]*\) (native.*/\1/p' "$log")
    HPORT=$(sed -n 's/.*tpud listening on 127\.0\.0\.1:\([0-9]*\) (http.*/\1/p' "$log")
    [ -n "$NPORT" ] && { [ -n "$only" ] || [ -n "$HPORT" ]; } && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "tpud did not start:"
  cat "$log"
  return 1
}
