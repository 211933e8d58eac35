#!/bin/bash
# test_replay.sh - payload capture and `tpuctl audit replay` through the real tpud (issue 21).
#   A. 10,000+ requests under 64 connections, native and HTTP, mixed batch sizes, every model
#      kind and precision, payloads encrypted (--payload-key): the log verifies, the offline
#      replay reproduces every one; the payload files hold no plaintext tensor bytes (checked
#      against a marker request, found in clear in run B); a wrong key or no key is a clear error;
#      a model that opts out (model.json "payload_capture": false) is not captured.
#   B. a clear store: a flipped byte, a removed payload file, a record rewritten to point at
#      another request's payload, and a version whose checkpoint changed are each reported as such.
#   C. retention: --payload-max-bytes deletes the oldest files (payload_expired records; replay
#      says "payload missing" for those), --payload-max-age deletes by age.
#   D. a model that asks for capture on a server without a store is refused with the reason.
# $1 = build directory, $2 = source directory.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
BENCH=$BUILD/client/tpubench
HELPER=$SRC/tests/integration/replay.py
for b in "$TPUD" "$TPUCTL" "$BENCH"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import numpy' 2>/dev/null || { echo "python3-numpy missing (deploy/deps.sh installs it)"; exit 1; }

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }

# start NAME ARGS...: tpud on free ports with the repository; sets PID, NPORT, HPORT.
start() {
  local name=$1
  shift
  "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 "$@" 2>"$WORK/$name.log" &
  PID=$!
  tpud_ports "$WORK/$name.log" $PID || exit 1
  for m in $MODELS; do
    for _ in $(seq 600); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/v2/models/$m/ready")" = 200 ] && break
      kill -0 $PID 2>/dev/null || break
      sleep 0.1
    done
  done
}
stop() {
  kill -TERM $PID
  wait $PID
  local rc=$?
  PID=
  [ $rc = 0 ] || fail "tpud exited $rc after SIGTERM: $(tail -5 "$WORK/$1.log")"
}
# replay OUT ARGS...: tpuctl audit replay, output to $WORK/OUT; returns its exit status.
replay() {
  local out=$1
  shift
  "$TPUCTL" audit replay "$@" >"$WORK/$out" 2>&1
}

$PY "$SRC/tests/integration/invariance.py" repo "$WORK/repo" ||
  { echo "FAIL: could not write the repository"; exit 1; }
# A model that opts out of capture, and one that asks for it (refused in D only).
cp -r "$WORK/repo/digits" "$WORK/repo/digits_nocap"
$PY - "$WORK/repo/digits_nocap/1/model.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1])); m["payload_capture"] = False
json.dump(m, open(sys.argv[1], "w"))
PYEOF
MODELS=$(cd "$WORK/repo" && ls -d */ | tr -d / | sort)
$PY "$HELPER" bodies "$SRC" "$WORK/bodies" || { echo "FAIL: bodies"; exit 1; }
openssl rand -hex 32 >"$WORK/key"
openssl rand -hex 32 >"$WORK/key2"

echo "-- A: 64 connections, native and HTTP, encrypted store"
mkdir -p "$WORK/a"
start a --threads 2 --audit-log "$WORK/a/audit.log" --payload-dir "$WORK/a/payload" \
  --payload-key "$WORK/key"
# name protocol batch (or @body) : 9 clients x 7 connections = 63, plus the marker's
LOADS="digits:native:1 digits_bf16:http:5 wide_int8:native:3 xgb_fraud_d6:http:13
       xgb_multi_d3:native:1 wide:http:2 digits_int8:native:7 fraud:http:@fraud text_bf16:native:@text"
BPIDS=
i=0
for l in $LOADS; do
  IFS=: read -r m proto batch <<<"$l"
  port=$NPORT
  [ "$proto" = http ] && port=$HPORT
  if [ "${batch#@}" != "$batch" ]; then input=(--input-file "$WORK/bodies/${batch#@}.json")
  else input=(--random-input --batch "$batch"); fi
  "$BENCH" --addr "127.0.0.1:$port" --protocol "$proto" --model "$m" "${input[@]}" -c 7 \
    -n 1120 --warmup 0 --json >"$WORK/a/bench.$i.json" 2>&1 &
  BPIDS="$BPIDS $!"
  i=$((i + 1))
done
curl -s -o "$WORK/a/marker.out" "http://127.0.0.1:$HPORT/v2/models/digits/infer" \
  -d @"$WORK/bodies/marker.json"
for n in 1 2 3; do
  curl -s -o /dev/null "http://127.0.0.1:$HPORT/v2/models/digits_nocap/infer" \
    -d @"$WORK/bodies/marker.json"
done
for p in $BPIDS; do wait "$p" || fail "tpubench failed: $(cat "$WORK"/a/bench.*.json | head -c 600)"; done
stop a
"$TPUCTL" audit verify "$WORK/a/audit.log" >"$WORK/a/verify" 2>&1 ||
  fail "the log does not verify: $(cat "$WORK/a/verify")"
replay a/replay --repository "$WORK/repo" --payload-dir "$WORK/a/payload" \
  --payload-key "$WORK/key" --quiet "$WORK/a/audit.log"
rc=$?
summary=$(tail -1 "$WORK/a/replay")
n=$(sed -n 's/^replayed \([0-9]*\) records: \([0-9]*\) reproduced, 0 mismatched, 0 not replayable.*/\1 \2/p' "$WORK/a/replay")
if [ $rc = 0 ] && [ -n "$n" ] && [ "${n% *}" = "${n#* }" ] && [ "${n% *}" -ge 10000 ]; then
  ok "A: $summary"
else
  fail "A: replay exit $rc: $(head -c 2000 "$WORK/a/replay")"
fi
grep -q "skipped" <<<"$summary" && [ "$(sed -n 's/.*; \([0-9]*\) request records skipped.*/\1/p' <<<"$summary")" -ge 3 ] ||
  fail "A: the opted-out model's requests were captured: $summary"
grep -q '"model":"digits_nocap".*"payload":""' "$WORK/a/audit.log" ||
  fail "A: digits_nocap records should have an empty payload field"
$PY "$HELPER" grep "$WORK/bodies/marker.bin" "$WORK"/a/payload/payload.* >/dev/null &&
  fail "A: the marker's tensor bytes are in the encrypted store in clear"
printf '"inputs":[' >"$WORK/hdr.pat"
$PY "$HELPER" grep "$WORK/hdr.pat" "$WORK"/a/payload/payload.* >/dev/null &&
  fail "A: entry headers are in the encrypted store in clear"
MSEQ=$($PY "$HELPER" seq-of "$WORK/a/audit.log" marker)
replay a/wrongkey --repository "$WORK/repo" --payload-dir "$WORK/a/payload" \
  --payload-key "$WORK/key2" --seq "$MSEQ" "$WORK/a/audit.log"
rc=$?
[ $rc = 1 ] && grep -q "NOT REPLAYABLE: payload key: .*wrong key" "$WORK/a/wrongkey" &&
  ok "A: wrong key: $(head -1 "$WORK/a/wrongkey")" || fail "A: wrong key, exit $rc: $(cat "$WORK/a/wrongkey")"
replay a/nokey --repository "$WORK/repo" --payload-dir "$WORK/a/payload" --seq "$MSEQ" \
  "$WORK/a/audit.log"
rc=$?
[ $rc = 1 ] && grep -q "encrypted with key id [0-9a-f]*: give --payload-key" "$WORK/a/nokey" ||
  fail "A: no key, exit $rc: $(cat "$WORK/a/nokey")"

echo "-- B: tampering, a clear store"
mkdir -p "$WORK/b"
start b --audit-log "$WORK/b/audit.log" --payload-dir "$WORK/b/payload"
"$BENCH" --addr "127.0.0.1:$NPORT" --model digits --batch 3 -c 4 -n 200 --warmup 0 >/dev/null 2>&1 ||
  fail "B: tpubench"
"$BENCH" --addr "127.0.0.1:$HPORT" --protocol http --model fraud \
  --input-file "$WORK/bodies/fraud.json" -c 2 -n 50 --warmup 0 >/dev/null 2>&1 || fail "B: tpubench fraud"
curl -s -o /dev/null "http://127.0.0.1:$HPORT/v2/models/digits/infer" -d @"$WORK/bodies/marker.json"
# against the running server (a copy of the log: the replays are new records in it)
cp "$WORK/b/audit.log" "$WORK/b/server.log"
replay b/server --server "127.0.0.1:$NPORT" --payload-dir "$WORK/b/payload" --quiet "$WORK/b/server.log"
rc=$?
[ $rc = 0 ] && grep -q "^replayed [1-9][0-9]* records: [1-9][0-9]* reproduced, 0 mismatched, 0 not replayable" "$WORK/b/server" &&
  ok "B: against the server: $(tail -1 "$WORK/b/server")" || fail "B: --server, exit $rc: $(tail -3 "$WORK/b/server")"
SF=$($PY "$HELPER" seqs "$WORK/b/audit.log" digits | sed -n 4p)
cp -r "$WORK/b/payload" "$WORK/b/sforged"
$PY "$HELPER" forge "$WORK/b/sforged" "$WORK/b/server.log" "$SF"
replay b/sforge --server "127.0.0.1:$NPORT" --payload-dir "$WORK/b/sforged" --seq "$SF" "$WORK/b/server.log"
rc=$?
[ $rc = 1 ] && grep -q "seq $SF .*MISMATCHED: output 'probs' row 0 element 0: .*(against the server, whose checkpoint and kernel set replay cannot check" "$WORK/b/sforge" ||
  fail "B: forged answer against the server, exit $rc: $(cat "$WORK/b/sforge")"
curl -s "http://127.0.0.1:$HPORT/metrics" >"$WORK/b/metrics"
entries=$(sed -n 's/^tpud_payload_entries_total \([0-9]*\)$/\1/p' "$WORK/b/metrics")
[ -n "$entries" ] && [ "$entries" -ge 251 ] && grep -q '^tpud_payload_bytes [1-9]' "$WORK/b/metrics" ||
  fail "B: /metrics: tpud_payload_entries_total '$entries' (expected >= 251)"
stop b
$PY "$HELPER" grep "$WORK/bodies/marker.bin" "$WORK"/b/payload/payload.* >/dev/null ||
  fail "B: the marker's bytes are not found in the clear store (the check in A could not fail)"
replay b/all --repository "$WORK/repo" --payload-dir "$WORK/b/payload" --quiet "$WORK/b/audit.log" ||
  fail "B: replay of the untouched store: $(tail -3 "$WORK/b/all")"
mapfile -t S < <($PY "$HELPER" seqs "$WORK/b/audit.log" digits)
FSEQ=$($PY "$HELPER" seqs "$WORK/b/audit.log" fraud | sed -n 1p)
# (1) a flipped byte
cp -r "$WORK/b/payload" "$WORK/b/flipped"
$PY "$HELPER" flip "$WORK/b/flipped" "$WORK/b/audit.log" "${S[10]}"
replay b/flip --repository "$WORK/repo" --payload-dir "$WORK/b/flipped" --seq "${S[10]}" "$WORK/b/audit.log"
rc=$?
[ $rc = 1 ] && grep -q "seq ${S[10]} .*NOT REPLAYABLE: payload tampered: .*changed since it was written" "$WORK/b/flip" &&
  ok "B: flipped byte: $(head -1 "$WORK/b/flip")" || fail "B: flipped byte, exit $rc: $(cat "$WORK/b/flip")"
replay b/flip2 --repository "$WORK/repo" --payload-dir "$WORK/b/flipped" --seq "${S[11]}" "$WORK/b/audit.log" ||
  fail "B: the record after the flipped one should still reproduce: $(cat "$WORK/b/flip2")"
# (2) a removed payload
mkdir "$WORK/b/emptied"
replay b/removed --repository "$WORK/repo" --payload-dir "$WORK/b/emptied" --seq "${S[3]}" "$WORK/b/audit.log"
rc=$?
[ $rc = 1 ] && grep -q "seq ${S[3]} .*NOT REPLAYABLE: payload missing: .*No such file" "$WORK/b/removed" &&
  ok "B: removed payload: $(head -1 "$WORK/b/removed")" || fail "B: removed payload, exit $rc: $(cat "$WORK/b/removed")"
# (3) a record pointing at another request's payload (re-hashed, so only the frame's seq tells)
cp "$WORK/b/audit.log" "$WORK/b/repointed.log"
$PY "$HELPER" repoint "$WORK/b/repointed.log" "${S[5]}" "${S[6]}"
replay b/repoint --repository "$WORK/repo" --payload-dir "$WORK/b/payload" --seq "${S[5]}" "$WORK/b/repointed.log"
rc=$?
[ $rc = 1 ] && grep -q "NOT REPLAYABLE: wrong payload: .* is the payload of seq ${S[6]}, not of seq ${S[5]}" "$WORK/b/repoint" &&
  ok "B: wrong pointer: $(head -1 "$WORK/b/repoint")" || fail "B: wrong pointer, exit $rc: $(cat "$WORK/b/repoint")"
# ... and without re-hashing, the record itself is refused
sed -i "s/\"payload\":\"[^\"]*\"/\"payload\":\"payload.00000000000000000001@0\"/" "$WORK/b/repointed.log"
replay b/edited --repository "$WORK/repo" --payload-dir "$WORK/b/payload" --seq "${S[7]}" "$WORK/b/repointed.log"
grep -q "NOT REPLAYABLE: the record fails its hash" "$WORK/b/edited" || fail "B: edited record: $(cat "$WORK/b/edited")"
# (4) a forged answer, consistent in the log and the store: recomputing it tells
cp -r "$WORK/b/payload" "$WORK/b/forged"
cp "$WORK/b/audit.log" "$WORK/b/forged.log"
$PY "$HELPER" forge "$WORK/b/forged" "$WORK/b/forged.log" "${S[8]}"
replay b/forge --repository "$WORK/repo" --payload-dir "$WORK/b/forged" --seq "${S[8]}" "$WORK/b/forged.log"
rc=$?
[ $rc = 1 ] && grep -q "seq ${S[8]} .*MISMATCHED: output 'probs' row 0 element 0: recorded .* (0x[0-9a-f]\{8\}), replay .* (0x[0-9a-f]\{8\})" "$WORK/b/forge" &&
  ok "B: forged answer: $(head -1 "$WORK/b/forge")" || fail "B: forged answer, exit $rc: $(cat "$WORK/b/forge")"
# (5) a kernel set this build or CPU cannot run
cp "$WORK/b/audit.log" "$WORK/b/kernels.log"
$PY "$HELPER" kernels "$WORK/b/kernels.log" "${S[9]}" vliw9
replay b/kernels --repository "$WORK/repo" --payload-dir "$WORK/b/payload" --seq "${S[9]}" "$WORK/b/kernels.log"
grep -q "NOT REPLAYABLE: the record was computed with kernel set \"vliw9\"" "$WORK/b/kernels" ||
  fail "B: unknown kernel set: $(cat "$WORK/b/kernels")"
# (6) the version's checkpoint changed (same weights, other bytes: it would reproduce)
cp -r "$WORK/repo" "$WORK/repo2"
$PY "$HELPER" recheckpoint "$WORK/repo2/digits/1"
replay b/ckpt --repository "$WORK/repo2" --payload-dir "$WORK/b/payload" --seq "${S[2]}" "$WORK/b/audit.log"
rc=$?
[ $rc = 1 ] && grep -q "NOT REPLAYABLE: the version's checkpoint changed: the record was computed with checkpoint SHA-256 [0-9a-f]\{64\}, .* now has [0-9a-f]\{64\}" "$WORK/b/ckpt" &&
  ok "B: checkpoint changed: $(head -c 300 "$WORK/b/ckpt")" || fail "B: checkpoint changed, exit $rc: $(cat "$WORK/b/ckpt")"
replay b/ckpt2 --repository "$WORK/repo2" --payload-dir "$WORK/b/payload" --seq "$FSEQ" "$WORK/b/audit.log" ||
  fail "B: another model's record should still reproduce: $(cat "$WORK/b/ckpt2")"
# (7) a version gone
rm -rf "$WORK/repo2/fraud"
replay b/gone --repository "$WORK/repo2" --payload-dir "$WORK/b/payload" --seq "$FSEQ" "$WORK/b/audit.log"
grep -q "NOT REPLAYABLE: the version does not load from" "$WORK/b/gone" || fail "B: version gone: $(cat "$WORK/b/gone")"
rm -rf "$WORK/repo2"

echo "-- C: retention"
mkdir -p "$WORK/c"
start c --audit-log "$WORK/c/audit.log" --payload-dir "$WORK/c/payload" --payload-max-bytes 300000
"$BENCH" --addr "127.0.0.1:$NPORT" --model digits --batch 4 -c 8 -n 3000 --warmup 0 >/dev/null 2>&1 ||
  fail "C: tpubench"
stop c
size=$(cat "$WORK"/c/payload/payload.* | wc -c)
nexp=$(grep -c '"kind":"payload_expired"' "$WORK/c/audit.log")
[ "$size" -le $((300000 + 65536 + 20000)) ] && [ "$nexp" -ge 20 ] &&
  ok "C: max-bytes: the store holds $size bytes, $nexp payload_expired records" ||
  fail "C: max-bytes: store $size bytes, $nexp payload_expired records"
"$TPUCTL" audit verify "$WORK/c/audit.log" >/dev/null 2>&1 || fail "C: the log does not verify"
replay c/replay --repository "$WORK/repo" --payload-dir "$WORK/c/payload" --quiet "$WORK/c/audit.log"
rc=$?
if [ $rc = 1 ] && grep -q "NOT REPLAYABLE: payload missing" "$WORK/c/replay" &&
   grep -q "^replayed 30[0-9][0-9] records: [1-9][0-9]* reproduced, 0 mismatched" "$WORK/c/replay"; then
  ok "C: $(tail -1 "$WORK/c/replay")"
else
  fail "C: replay after retention, exit $rc: $(tail -3 "$WORK/c/replay")"
fi
mkdir -p "$WORK/c2"
start c2 --audit-log "$WORK/c2/audit.log" --payload-dir "$WORK/c2/payload" --payload-max-age 2
curl -s -o /dev/null "http://127.0.0.1:$HPORT/v2/models/digits/infer" -d @"$WORK/bodies/marker.json"
first=$(ls "$WORK/c2/payload")
for _ in $(seq 80); do
  grep -q '"kind":"payload_expired".*older than --payload-max-age 2 s' "$WORK/c2/audit.log" && break
  sleep 0.1
done
stop c2
[ -n "$first" ] && [ ! -e "$WORK/c2/payload/$first" ] &&
  grep -q '"kind":"payload_expired".*older than --payload-max-age 2 s' "$WORK/c2/audit.log" &&
  ok "C: max-age: $first deleted" || fail "C: max-age: $first still there / no record: $(ls "$WORK/c2/payload")"

echo "-- D: a model that asks for capture, on a server without a store"
$PY - "$WORK/repo/digits_nocap/1/model.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1])); m["payload_capture"] = True
json.dump(m, open(sys.argv[1], "w"))
PYEOF
MODELS=digits
start d --audit-log "$WORK/d.audit.log"
curl -s "http://127.0.0.1:$HPORT/v2/models/digits_nocap/ready" -o /dev/null -w '%{http_code}' >"$WORK/d.code"
stop d
[ "$(cat "$WORK/d.code")" != 200 ] && grep -q "payload_capture.*no payload store" "$WORK/d.log" &&
  ok "D: refused: $(grep -o "model.json asks for.*payload-dir)" "$WORK/d.log" | head -1)" ||
  fail "D: a model asking for capture should not load without a store (HTTP $(cat "$WORK/d.code"))"

[ $FAIL = 0 ] && echo "test_replay: all passed"
exit $FAIL
