# lib.sh - sourced by the integration scripts (and the server benches): the one copy of
# "wait until tpud announces its ports" and of "generate the Python gRPC stubs".
#
# grpc_stubs SRC OUT PROTO...: the Python message and gRPC stubs of SRC/proto/PROTO... into OUT
# (protoc with grpc_python_plugin; each PROTO's _pb2_grpc.py must appear). Returns 0, or prints
# "FAIL: protoc: ..." and returns 1.
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

grpc_stubs() {
  local src=$1 out=$2 files=() f
  shift 2
  for f in "$@"; do files+=("$src/proto/$f"); done
  mkdir -p "$out"
  if ! protoc -I "$src/proto" --python_out="$out" --grpc_python_out="$out" \
    --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" "${files[@]}" \
    2>"$out/protoc.err"; then
    echo "FAIL: protoc: $(cat "$out/protoc.err")"
    return 1
  fi
  for f in "$@"; do
    [ -f "$out/${f%.proto}_pb2_grpc.py" ] || { echo "FAIL: protoc wrote no ${f%.proto}_pb2_grpc.py"; return 1; }
  done
}
