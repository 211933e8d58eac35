#!/bin/bash
# tls_bench.sh - requests/s over TLS against plaintext, 64 connections, native and HTTP.
#
# Starts two tpud (one plaintext, one with TLS on both ports and a bearer token) on free ports
# over the bundled digits model, then runs tpubench closed loop (64 connections x depth 1, one
# row per request) against each, alternating plaintext and TLS runs so drift on a shared machine
# hits both alike, and prints the median of the runs per configuration. Certificates are
# generated in a temp dir with `openssl` (ECDSA P-256, as a production deployment would use).
#
# usage: bench/tls_bench.sh [BUILD_DIR (default build-tls)] [RUNS (default 5)] [SECONDS (default 5)]
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$SRC/build-tls}" && pwd)
RUNS=${2:-5}
SECS=${3:-5}
TPUD=$BUILD/server/tpud
BENCH=$BUILD/client/tpubench
for b in "$TPUD" "$BENCH"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK" || exit 1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
  -days 1 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key -out srv.csr \
  -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > srv.ext
openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 1 \
  -extfile srv.ext 2>/dev/null
TOKEN=bench-$RANDOM$RANDOM
printf 'token %s infer bench\n' "$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)" > tokens

"$TPUD" --models "$SRC/models" --port 0 --http-port 0 --poll-seconds 0 2>plain.log &
PIDS+=($!)
"$TPUD" --models "$SRC/models" --port 0 --http-port 0 --poll-seconds 0 --tls-cert srv.pem \
  --tls-key srv.key --tokens tokens 2>tls.log &
PIDS+=($!)
for _ in $(seq 1 100); do
  grep -q "(http" plain.log && grep -q "(http, tls)" tls.log && break
  sleep 0.1
done
port() { sed -n "s/.*tpud listening on 127\.0\.0\.1:\([0-9]*\) ($2.*/\1/p" "$1"; }
PN=$(port plain.log native) PH=$(port plain.log http) TN=$(port tls.log native) TH=$(port tls.log http)
[ -n "$PN" ] && [ -n "$TH" ] || { echo "tpud did not start"; cat plain.log tls.log; exit 1; }

run() { # PROTO PORT [tls flags] → req/s
  "$BENCH" --protocol "$1" --addr "localhost:$2" -c 64 -D 1 -d "$SECS" --warmup 1 --json "${@:3}" \
    2>/dev/null | sed -n 's/.*"throughput_rps":\([0-9.]*\).*/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.0f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A R
for i in $(seq 1 "$RUNS"); do
  for proto in native http; do
    p=$PN; t=$TN
    [ $proto = http ] && p=$PH && t=$TH
    R[$proto-plain]+="$(run $proto $p) "
    R[$proto-tls]+="$(run $proto $t --tls-ca ca.pem --token "$TOKEN") "
  done
  echo "run $i/$RUNS done" >&2
done
echo "tpubench closed loop, 64 connections x depth 1, digits (1 row/request), ${SECS}s x $RUNS runs, median req/s:"
printf '%-8s %12s %12s %8s\n' protocol plaintext "TLS+token" ratio
for proto in native http; do
  a=$(echo ${R[$proto-plain]} | tr ' ' '\n' | median)
  b=$(echo ${R[$proto-tls]} | tr ' ' '\n' | median)
  printf '%-8s %12s %12s %7.2f\n' $proto "$a" "$b" "$(echo "$b / $a" | bc -l)"
  echo "  runs: plain [${R[$proto-plain]}] tls [${R[$proto-tls]}]" >&2
done
