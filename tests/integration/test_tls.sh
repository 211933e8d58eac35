#!/bin/bash
# test_tls.sh - TLS, mutual TLS, bearer tokens and roles end to end against the real tpud.
# Every key and certificate is generated here, in a temp dir, with the `openssl` command: a CA,
# a second (foreign) CA, server certificates (the second one for the SIGHUP reload), client
# certificates (one from the foreign CA, one expired, made with `openssl ca -startdate/-enddate`).
# Shows: TLS round trips (tpuctl, openssl s_client with ALPN and version, curl --cacert over
# HTTPS, tpubench); plaintext to the TLS port fails cleanly and the server stays healthy; mTLS
# refuses no certificate, a foreign one and an expired one; the audit log names the certificate;
# roles (infer cannot load/unload, admin can), wrong tokens (UNAUTHENTICATED / 401); SIGHUP swaps
# the certificate and the tokens without dropping an open connection, and a broken certificate
# file on SIGHUP keeps the old one; a handshake flood of half-open and garbage connections does
# not stop a legitimate client.
# $1 = build directory, $2 = source directory.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
BENCH=$BUILD/client/tpubench
for b in "$TPUD" "$TPUCTL" "$BENCH"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
for c in openssl curl; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/repo"
cp -r "$SRC/models/digits" "$SRC/models/matmul" "$WORK/repo/"
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }

# ---- throwaway PKI ----
P=$WORK/pki
mkdir -p "$P/db"
cd "$P" || exit 1
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
ca() { # NAME SUBJECT
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" 2>/dev/null
}
leaf() { # NAME CA CN EXT
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$3" 2>/dev/null
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
    -days 2 -extfile "$1.ext" 2>/dev/null
}
ca ca "tpud test CA"
ca evil "some other CA"
leaf server ca localhost "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf server2 ca localhost "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf alice ca alice "subjectAltName=email:alice@example.com
extendedKeyUsage=clientAuth"
leaf mallory ca mallory "extendedKeyUsage=clientAuth"
leaf eve evil alice "extendedKeyUsage=clientAuth"
# Expired: `openssl ca` takes explicit start and end dates.
key old
openssl req -new -key old.key -out old.csr -subj "/CN=oldtimer" 2>/dev/null
: > db/index.txt
echo 1000 > db/serial
cat > ca.cnf <<EOF
[ca]
default_ca = tca
[tca]
database = $P/db/index.txt
new_certs_dir = $P/db
serial = $P/db/serial
default_md = sha256
policy = anything
unique_subject = no
[anything]
commonName = supplied
EOF
openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in old.csr -out old.pem \
  -startdate 20200101000000Z -enddate 20200201000000Z -notext >/dev/null 2>&1
for f in ca evil server server2 alice mallory eve old; do
  [ -s "$P/$f.pem" ] || { echo "could not generate $f.pem with openssl"; exit 1; }
done
openssl x509 -in old.pem -noout -checkend 0 >/dev/null 2>&1 && { echo "old.pem is not expired"; exit 1; }
cd "$WORK" || exit 1
cp "$P/server.pem" "$WORK/cert.pem"
cp "$P/server.key" "$WORK/cert.key"

ADMIN_TOKEN=admin-$RANDOM$RANDOM$RANDOM
INFER_TOKEN=infer-$RANDOM$RANDOM$RANDOM
hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
cat > "$WORK/tokens" <<EOF
# bearer tokens: SHA-256 of the token, role, name
token $(hash "$ADMIN_TOKEN") admin ops
token $(hash "$INFER_TOKEN") infer app   # the application
cert mallory admin
EOF
grep -q "$ADMIN_TOKEN" "$WORK/tokens" && fail "the tokens file holds a token in clear"

# start [tpud flags...]: starts tpud on free ports; sets PID, NPORT, HPORT, LOG.
start() {
  LOG=$WORK/tpud.$RANDOM.log
  "$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --poll-seconds 0 "$@" 2>"$LOG" &
  PID=$!
  tpud_ports "$LOG" $PID || exit 1
}
stop() {
  kill -TERM "$PID"
  wait "$PID"
  local rc=$?
  [ $rc = 0 ] || fail "tpud exited $rc after SIGTERM: $(tail -5 "$LOG")"
  PID=
}
BODY='{"inputs":[{"name":"x","shape":[1,64],"datatype":"FP32","data":['$($PY -c "print(','.join(['0.5']*64))")']}]}'
CA="--tls-ca $P/ca.pem"
ALICE="--tls-cert $P/alice.pem --tls-key $P/alice.key"
ctl() { "$TPUCTL" --addr 127.0.0.1:$NPORT --timeout 5000 "$@"; }
fingerprint() { # PORT -> the SHA-256 fingerprint of the certificate a new connection sees
  echo | timeout 5 openssl s_client -connect 127.0.0.1:$1 -CAfile "$P/ca.pem" \
    -cert "$P/alice.pem" -key "$P/alice.key" 2>/dev/null | openssl x509 -noout -fingerprint -sha256
}
conns_open() { # native|http -> the tpud_connections_open gauge (admin token over HTTPS)
  curl -s --cacert "$P/ca.pem" -H "Authorization: Bearer $ADMIN_TOKEN" \
    "https://localhost:$HPORT/metrics" | sed -n "s/^tpud_connections_open{protocol=\"$1\"} //p"
}

# ---- 0. start-up errors ----
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --tls-cert "$P/server.pem" \
  --tls-key "$P/alice.key" 2>"$WORK/bad.log"
[ $? = 1 ] && grep -q "tls-key.*mismatch" "$WORK/bad.log" && ok "a key that does not match is a start-up error" ||
  fail "mismatched key: $(cat "$WORK/bad.log")"
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --tls-client-ca "$P/ca.pem" 2>"$WORK/bad.log"
[ $? = 1 ] && grep -q "need --tls-cert" "$WORK/bad.log" && ok "--tls-client-ca without --tls-cert refused" ||
  fail "client CA without cert: $(cat "$WORK/bad.log")"
printf 'token abc infer x\n' > "$WORK/badtokens"
"$TPUD" --models "$WORK/repo" --port 0 --http-port 0 --tokens "$WORK/badtokens" 2>"$WORK/bad.log"
[ $? = 1 ] && grep -q "badtokens:1: token digest must be 64 hex digits" "$WORK/bad.log" &&
  ok "a malformed tokens file names its line" || fail "bad tokens file: $(cat "$WORK/bad.log")"

# ---- 1. TLS + mTLS + tokens ----
start --tls-cert "$WORK/cert.pem" --tls-key "$WORK/cert.key" --tls-client-ca "$P/ca.pem" \
  --tokens "$WORK/tokens" --audit-log "$WORK/audit.log" --tls-handshake-timeout-s 2
grep -q "(native, tls)" "$LOG" && grep -q "(http, tls)" "$LOG" || fail "listening lines do not say tls"

out=$(ctl $CA $ALICE health 2>&1) && [ "$out" = ready ] && ok "tpuctl health over mTLS" ||
  fail "tpuctl health over mTLS: $out"
out=$(echo "$BODY" | ctl $CA $ALICE infer digits - 2>&1)
echo "$out" | grep -q '"model_name":"digits"' && ok "tpuctl infer over mTLS" || fail "infer over mTLS: $out"
out=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$NPORT -CAfile "$P/ca.pem" \
  -cert "$P/alice.pem" -key "$P/alice.key" -alpn h2,tpud/1 2>&1)
echo "$out" | grep -q "ALPN protocol: h2" && echo "$out" | grep -q "^New, TLSv1.3" &&
  echo "$out" | grep -q "Verify return code: 0" &&
  ok "s_client: TLSv1.3, ALPN h2 (gRPC) chosen first, server certificate verifies" ||
  fail "s_client: $(echo "$out" | grep -E 'ALPN|New,|Verify')"
out=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$NPORT -CAfile "$P/ca.pem" \
  -cert "$P/alice.pem" -key "$P/alice.key" -alpn foo,tpud/1 2>&1)
echo "$out" | grep -q "ALPN protocol: tpud/1" && ok "s_client: ALPN tpud/1 when h2 is not offered" ||
  fail "s_client ALPN tpud/1: $(echo "$out" | grep -E 'ALPN|New,')"
out=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$NPORT -CAfile "$P/ca.pem" \
  -cert "$P/alice.pem" -key "$P/alice.key" -tls1_2 2>&1)
echo "$out" | grep -Eq "^New, TLSv1.2, Cipher is ECDHE-ECDSA-(AES(128|256)-GCM|CHACHA20)" &&
  ok "TLS 1.2 works, with an ECDHE AEAD suite" || fail "TLS 1.2: $(echo "$out" | grep -E '^New,')"
# (SECLEVEL=0: this client would refuse TLS 1.1 itself otherwise, and the check could not fail)
out=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$NPORT -tls1_1 -cipher 'DEFAULT@SECLEVEL=0' 2>&1)
echo "$out" | grep -q "^New, (NONE)" && ok "TLS 1.1 refused" || fail "TLS 1.1: $(echo "$out" | grep -E '^New,')"
out=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$NPORT -tls1_2 -cipher AES128-SHA \
  -cert "$P/alice.pem" -key "$P/alice.key" 2>&1)
echo "$out" | grep -q "Cipher is AES128-SHA" && fail "a non-ECDHE CBC suite was accepted" ||
  ok "non-forward-secret CBC suite refused"

# plaintext client to the TLS port: fails cleanly, server stays healthy
out=$(ctl health 2>&1)
rc=$?
[ $rc = 1 ] && ok "plaintext tpuctl to the TLS port fails (exit 1: $out)" || fail "plaintext: rc $rc: $out"
out=$(curl -s -m 5 "http://127.0.0.1:$HPORT/v2/health/ready" -w '%{http_code}')
[ "${out: -3}" != 200 ] && ok "plain HTTP to the HTTPS port gets no answer" || fail "plain HTTP answered 200"
ctl $CA $ALICE health >/dev/null 2>&1 && ok "server healthy after plaintext clients" || fail "unhealthy after plaintext"

# mTLS refusals
for who in none eve old; do
  case $who in
  none) creds= ;;
  *) creds="--tls-cert $P/$who.pem --tls-key $P/$who.key" ;;
  esac
  out=$(ctl $CA $creds health 2>&1)
  rc=$?
  [ $rc = 1 ] && ok "mTLS refuses client certificate '$who' ($out)" || fail "mTLS let '$who' in: rc $rc $out"
done
out=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$NPORT -CAfile "$P/ca.pem" \
  -cert "$P/old.pem" -key "$P/old.key" 2>&1)
echo "$out" | grep -qi "alert certificate expired\|certificate expired" && ok "expired certificate: alert says so" ||
  echo "note: s_client did not print the expired alert"
curl -s -m 5 --cacert "$P/ca.pem" --cert "$P/eve.pem" --key "$P/eve.key" \
  "https://localhost:$HPORT/v2/health/ready" >/dev/null && fail "HTTPS accepted a foreign certificate" ||
  ok "HTTPS refuses a certificate from another CA"
curl -s -m 5 --cacert "$P/ca.pem" --cert "$P/old.pem" --key "$P/old.key" \
  "https://localhost:$HPORT/v2/health/ready" >/dev/null && fail "HTTPS accepted an expired certificate" ||
  ok "HTTPS refuses an expired certificate"
ctl $CA $ALICE health >/dev/null 2>&1 && ok "server healthy after refused handshakes" || fail "unhealthy after refusals"

# HTTPS: health open without a certificate (probes), the rest needs credentials
out=$(curl -s -m 5 --cacert "$P/ca.pem" "https://localhost:$HPORT/v2/health/ready" -w ' %{http_code}')
[ "$out" = '{"ready":true} 200' ] && ok "HTTPS health open to a probe without certificate" || fail "HTTPS health: $out"
code=$(curl -s -m 5 -o "$WORK/h" -D "$WORK/hdr" --cacert "$P/ca.pem" -X POST --data "$BODY" \
  "https://localhost:$HPORT/v2/models/digits/infer" -w '%{http_code}')
[ "$code" = 401 ] && grep -qi '^WWW-Authenticate: Bearer' "$WORK/hdr" &&
  ok "HTTPS infer without credentials: 401 with WWW-Authenticate: Bearer" || fail "no credentials: $code $(cat "$WORK/hdr")"
code=$(curl -s -m 5 -o "$WORK/h" --cacert "$P/ca.pem" --cert "$P/alice.pem" --key "$P/alice.key" \
  -X POST --data "$BODY" "https://localhost:$HPORT/v2/models/digits/infer" -w '%{http_code}')
[ "$code" = 200 ] && ok "curl --cacert --cert: HTTPS infer 200" || fail "HTTPS infer with cert: $code $(cat "$WORK/h")"
code=$(curl -s -m 5 -o "$WORK/h" --cacert "$P/ca.pem" -H "Authorization: Bearer $INFER_TOKEN" \
  -X POST --data "$BODY" "https://localhost:$HPORT/v2/models/digits/infer" -w '%{http_code}')
[ "$code" = 200 ] && ok "HTTPS infer with an infer token and no certificate: 200" || fail "token infer: $code"
code=$(curl -s -m 5 -o "$WORK/h" -D "$WORK/hdr" --cacert "$P/ca.pem" -H "Authorization: Bearer nope" \
  "https://localhost:$HPORT/v2/models/digits" -w '%{http_code}')
[ "$code" = 401 ] && grep -q 'invalid_token' "$WORK/hdr" && ok "HTTPS wrong token: 401 invalid_token" ||
  fail "wrong token over HTTPS: $code"
code=$(curl -s -m 5 -o "$WORK/h" --cacert "$P/ca.pem" -H "Authorization: Bearer $INFER_TOKEN" \
  "https://localhost:$HPORT/v2/debug/config" -w '%{http_code}')
[ "$code" = 403 ] && ok "infer token on /v2/debug: 403" || fail "infer token debug: $code"
code=$(curl -s -m 5 -o /dev/null --cacert "$P/ca.pem" "https://localhost:$HPORT/metrics" -w '%{http_code}')
[ "$code" = 401 ] && ok "/metrics needs credentials by default" || fail "/metrics open: $code"

# roles and tokens on the native port
out=$(ctl $CA $ALICE --token "$INFER_TOKEN" unload matmul 2>&1)
[ $? = 1 ] && echo "$out" | grep -q PERMISSION_DENIED && ok "infer token cannot unload ($out)" || fail "infer unload: $out"
out=$(ctl $CA $ALICE --token "$INFER_TOKEN" load matmul 2>&1)
[ $? = 1 ] && echo "$out" | grep -q PERMISSION_DENIED && ok "infer token cannot load" || fail "infer load: $out"
out=$(ctl $CA $ALICE unload matmul 2>&1)
[ $? = 1 ] && echo "$out" | grep -q PERMISSION_DENIED && ok "certificate with the default role infer cannot unload" ||
  fail "alice unload: $out"
out=$(ctl $CA $ALICE --token "$ADMIN_TOKEN" unload matmul 2>&1) && ok "admin token unloads ($out)" || fail "admin unload: $out"
out=$(ctl $CA --tls-cert "$P/mallory.pem" --tls-key "$P/mallory.key" load matmul 2>&1) &&
  ok "certificate with a 'cert ... admin' line loads ($out)" || fail "mallory load: $out"
out=$(ctl $CA $ALICE --token wrong-token models 2>&1)
[ $? = 1 ] && echo "$out" | grep -q UNAUTHENTICATED && ok "wrong token: UNAUTHENTICATED" || fail "wrong token: $out"
out=$(TPUCTL_TOKEN=$INFER_TOKEN ctl $CA $ALICE models 2>&1) && ok "TPUCTL_TOKEN is used" || fail "TPUCTL_TOKEN: $out"

# the audit log names who asked
grep -q '"client":"CN=alice SAN=email:alice@example.com (127.0.0.1:[0-9]*)".*"model":"digits"' "$WORK/audit.log" &&
  ok "audit log records the certificate identity" || fail "no CN=alice in the audit log: $(tail -3 "$WORK/audit.log")"
grep -q '"client":"token=ops CN=alice[^"]*".*"status":"OK","message":"unload' "$WORK/audit.log" &&
  ok "audit log records the token name of an admin action" || fail "no token=ops unload record"
grep -q '"client":"token=app CN=alice[^"]*".*"status":"PERMISSION_DENIED"' "$WORK/audit.log" &&
  ok "audit log records the refused unload" || fail "no PERMISSION_DENIED record"
"$TPUCTL" audit verify "$WORK/audit.log" >/dev/null && ok "audit log verifies" || fail "audit verify"

# tpubench over TLS (both protocols) with a token
for proto in native http; do
  port=$NPORT
  [ $proto = http ] && port=$HPORT
  out=$("$BENCH" --addr localhost:$port --protocol $proto $CA $ALICE --token "$INFER_TOKEN" -c 4 -n 200 \
    --warmup 0 --json 2>&1)
  echo "$out" | grep -Eq '"requests":2[0-9][0-9],"errors":0,' && ok "tpubench over TLS ($proto): 200 requests, 0 errors" ||
    fail "tpubench $proto: $(echo "$out" | cut -c1-300)"
done

# SIGHUP: a new certificate for new connections; an open connection keeps working
fp1=$(fingerprint $NPORT)
cat > "$WORK/keep.py" <<'EOF'
import http.client, ssl, sys, time, os
ctx = ssl.create_default_context(cafile=sys.argv[2])
ctx.load_cert_chain(sys.argv[3], sys.argv[4])
c = http.client.HTTPSConnection("localhost", int(sys.argv[1]), context=ctx, timeout=10)
body = open(sys.argv[6]).read()
def infer():
    c.request("POST", "/v2/models/digits/infer", body=body)
    r = c.getresponse(); r.read(); return r.status
s1 = infer()
open(sys.argv[5], "w").write("ready\n")
while not os.path.exists(sys.argv[5] + ".go"): time.sleep(0.05)
s2 = infer()
print(s1, s2, c.sock.getpeercert(binary_form=True) is not None)
EOF
echo "$BODY" > "$WORK/body.json"
$PY "$WORK/keep.py" $HPORT "$P/ca.pem" "$P/alice.pem" "$P/alice.key" "$WORK/keep" "$WORK/body.json" \
  > "$WORK/keep.out" 2>&1 &
KPID=$!
for _ in $(seq 1 100); do [ -f "$WORK/keep" ] && break; sleep 0.1; done
cp "$P/server2.pem" "$WORK/cert.pem"
cp "$P/server2.key" "$WORK/cert.key"
NEW_TOKEN=new-$RANDOM$RANDOM
echo "token $(hash "$NEW_TOKEN") infer newcomer" >> "$WORK/tokens"
kill -HUP $PID
for _ in $(seq 1 50); do grep -q "TLS certificate reloaded" "$LOG" && grep -q "SIGHUP: 3 tokens" "$LOG" && break; sleep 0.1; done
touch "$WORK/keep.go"
wait $KPID
[ "$(cat "$WORK/keep.out")" = "200 200 True" ] && ok "an HTTPS connection opened before SIGHUP keeps working" ||
  fail "kept connection: $(cat "$WORK/keep.out")"
fp2=$(fingerprint $NPORT)
want=$(openssl x509 -in "$P/server2.pem" -noout -fingerprint -sha256)
[ -n "$fp1" ] && [ "$fp1" != "$fp2" ] && [ "$fp2" = "$want" ] &&
  ok "after SIGHUP new connections see the new certificate" || fail "fingerprints: before $fp1 after $fp2 want $want"
out=$(ctl $CA $ALICE --token "$NEW_TOKEN" models 2>&1) && ok "a token added before SIGHUP works" || fail "new token: $out"
echo "garbage" > "$WORK/cert.pem"
kill -HUP $PID
for _ in $(seq 1 50); do grep -q "TLS reload failed" "$LOG" && break; sleep 0.1; done
grep -q "TLS reload failed, keeping the current certificate" "$LOG" && [ "$(fingerprint $NPORT)" = "$want" ] &&
  ok "a broken certificate on SIGHUP is logged and the current one kept" || fail "broken reload"

# handshake flood: half-open and garbage connections while a real client works
cat > "$WORK/flood.py" <<'EOF'
import os, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(n):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        if i % 2:
            s.send(os.urandom(512))  # garbage where a ClientHello should be
        elif i % 4 == 0:
            s.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc")  # a ClientHello that never ends
        socks.append(s)
    except OSError:
        pass
print(len(socks), flush=True)
time.sleep(float(sys.argv[3]))
EOF
$PY "$WORK/flood.py" $NPORT 300 6 > "$WORK/flood.out" &
FPID=$!
sleep 1
good=0
for i in $(seq 1 20); do
  ctl $CA $ALICE infer digits --data "$BODY" >/dev/null 2>&1 && good=$((good + 1))
done
[ $good = 20 ] && ok "20 of 20 requests succeeded during a flood of $(cat "$WORK/flood.out") half-open/garbage connections" ||
  fail "only $good of 20 requests succeeded during the flood"
sleep 2.5 # the handshake timeout (2 s) has passed for every flood connection
open=$(conns_open native)
[ -n "$open" ] && [ "$open" -le 2 ] && ok "flood connections were closed by the handshake timeout (open: $open)" ||
  fail "native connections still open after the handshake timeout: '$open'"
kill $FPID 2>/dev/null
wait $FPID 2>/dev/null
ctl $CA $ALICE health >/dev/null 2>&1 && ok "server healthy after the flood" || fail "unhealthy after the flood"
stop

# ---- 2. tokens over TLS without client certificates; HTTP in the clear ----
cp "$P/server.pem" "$WORK/cert.pem"
cp "$P/server.key" "$WORK/cert.key"
start --tls-cert "$WORK/cert.pem" --tls-key "$WORK/cert.key" --tokens "$WORK/tokens" --http-tls=false \
  --auth-open-metrics
grep -q "(http)" "$LOG" && ok "--http-tls=false: plain HTTP next to a TLS native port" || fail "http-tls=false"
out=$(ctl $CA --token "$INFER_TOKEN" health 2>&1) && ok "TLS + token, no client certificate" || fail "token health: $out"
out=$(ctl $CA models 2>&1)
[ $? = 1 ] && echo "$out" | grep -q "UNAUTHENTICATED: missing credentials" && ok "no token: UNAUTHENTICATED" ||
  fail "no token: $out"
out=$(ctl $CA health 2>&1) && ok "health is open without a token" || fail "open health: $out"
out=$(ctl --addr localhost:$NPORT $CA --token "$INFER_TOKEN" health 2>&1) && ok "hostname verification: localhost matches" ||
  fail "localhost: $out"
out=$(ctl $CA --tls-server-name wrong.example --token "$INFER_TOKEN" health 2>&1)
[ $? = 1 ] && echo "$out" | grep -qi "verify" && ok "a name the certificate does not carry is refused ($out)" ||
  fail "wrong name accepted: $out"
code=$(curl -s -o /dev/null "http://127.0.0.1:$HPORT/metrics" -w '%{http_code}')
[ "$code" = 200 ] && ok "--auth-open-metrics: /metrics open" || fail "metrics: $code"
code=$(curl -s -o /dev/null -X POST --data "$BODY" "http://127.0.0.1:$HPORT/v2/models/digits/infer" -w '%{http_code}')
[ "$code" = 401 ] && ok "plain HTTP infer without token: 401" || fail "plain HTTP infer: $code"
stop

# ---- 3. no access control on a non-loopback address: a warning ----
"$TPUD" --models "$WORK/repo" --listen 0.0.0.0 --port 0 --http-port 0 --poll-seconds 0 2>"$WORK/open.log" &
OPID=$!
for _ in $(seq 1 100); do grep -q "listening" "$WORK/open.log" && break; sleep 0.1; done
kill -TERM $OPID
wait $OPID
grep -q "WARN.*without access control" "$WORK/open.log" && ok "binding 0.0.0.0 without auth warns" ||
  fail "no warning: $(head -5 "$WORK/open.log")"

[ $FAIL = 0 ] && echo "test_tls: all passed" || echo "test_tls: FAILED"
exit $FAIL
