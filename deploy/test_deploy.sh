#!/usr/bin/env bash
# test_deploy.sh - `make deploy-test`: the deployment files, built and run for real.
#
#  1. manifests, offline: `haproxy -c` on deploy/haproxy/haproxy.cfg, `docker-compose config` on
#     deploy/compose.yaml, deploy/k8s/*.yaml against the Kubernetes schemas plus the wiring tpud
#     needs (deploy/k8s/validate, `npm ci` then node; also the KServe ServingRuntime and
#     InferenceService in deploy/k8s/kserve, and broken copies that it must refuse), tpud run
#     with the k8s ConfigMap's config.json (TLS, tokens, JSON logs), the shipped config.json files against
#     `tpud --help`, and `systemd-analyze verify` on deploy/systemd/tpud.service;
#  2. deploy/test_failover.sh: three tpud replicas behind HAProxy, one killed under load;
#  3. the container: debian:bookworm and debian:bookworm-slim made with debootstrap when podman's
#     store lacks them (deploy/base_image.sh; no registry is reachable here), the Dockerfile built
#     with `podman build --isolation=chroot --format docker`, and the image run the way the
#     manifests run it (read-only root, no capabilities, a fresh model volume, a mounted config
#     file and a flag): the image's HEALTHCHECK passes, an HTTP inference on the bundled digits
#     model predicts the right classes, the native port answers, the process is not root, and
#     `podman stop` (SIGTERM) ends it with exit 0.
# $1 = build directory holding tpud, tpuctl and tpubench for this machine; $2 = source directory.
# Installs what it needs with deploy/deps.sh deploy. TPUD_IMAGE names the image (default
# localhost/tpud:deploy-test; kept afterwards, so a second run reuses its layers).
set -euo pipefail
BUILD=$(realpath "${1:-build}")
SRC=$(realpath "${2:-.}")
IMAGE=${TPUD_IMAGE:-localhost/tpud:deploy-test}
NAME=tpud-deploy-test-$$
VOLUME=tpud-deploy-test-models-$$
T0=$(date +%s)
lap() { echo "=== [$(($(date +%s) - T0)) s] $*"; }
for b in server/tpud client/tpuctl client/tpubench; do
  [ -x "$BUILD/$b" ] || { echo "test_deploy: $BUILD/$b not built (make build)" >&2; exit 1; }
done
"$SRC/deploy/deps.sh" deploy

WORK=$(mktemp -d)
cleanup() {
  podman rm -f -v -t 0 "$NAME" >/dev/null 2>&1 || true
  podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE

# ---- 1. manifests ----
lap "manifests"
haproxy -c -q -f "$SRC/deploy/haproxy/haproxy.cfg" 2>"$WORK/haproxy-c.log" || {
  cat "$WORK/haproxy-c.log"; echo "FAIL: haproxy -c deploy/haproxy/haproxy.cfg"; exit 1; }
echo "  haproxy -c: deploy/haproxy/haproxy.cfg valid"
docker-compose -f "$SRC/deploy/compose.yaml" config -q ||
  { echo "FAIL: docker-compose config deploy/compose.yaml"; exit 1; }
echo "  docker-compose config: deploy/compose.yaml valid"
(cd "$SRC/deploy/k8s/validate" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
  { echo "FAIL: npm ci in deploy/k8s/validate"; exit 1; }
"$BUILD/server/tpud" --help >"$WORK/tpud-help.txt"
(cd "$SRC/deploy/k8s/validate" && TPUD_HELP="$WORK/tpud-help.txt" node validate.mjs ..) ||
  { echo "FAIL: deploy/k8s manifests"; exit 1; }
# The validator must catch what it is there for: a copy with plain-HTTP probes under TLS, a
# tokens line in the wrong format and a runtime that misses /mnt/models fails, naming each.
cp -r "$SRC/deploy/k8s" "$WORK/k8s-bad"
sed -i 's/, scheme: HTTPS}/}/' "$WORK/k8s-bad/deployment.yaml"
sed -i 's/^    token REPLACE-sha256-hex-of-the-app-token infer fraud-scoring$/    fraud-scoring: some-token/' \
  "$WORK/k8s-bad/secret.yaml"
sed -i 's#"/mnt/models"#"/models"#' "$WORK/k8s-bad/kserve/servingruntime.yaml"
rm -rf "$WORK/k8s-bad/validate"
if (cd "$SRC/deploy/k8s/validate" && node validate.mjs "$WORK/k8s-bad") >"$WORK/bad.log" 2>&1; then
  cat "$WORK/bad.log"; echo "FAIL: the validator passed broken manifests"; exit 1
fi
for want in "readinessProbe: tls-cert is set, so the probe needs scheme HTTPS" \
  'tokens line 3: expected "token <sha256-hex> <infer|admin> <name>"' \
  "args: --models must be /mnt/models"; do
  grep -qF "$want" "$WORK/bad.log" || { cat "$WORK/bad.log"; echo "FAIL: validator did not say: $want"; exit 1; }
done
echo "  validate: broken copies refused (HTTP probes under TLS, a tokens line, the runtime's model path)"
# The ConfigMap's config.json runs: tpud with it (paths moved to a scratch directory, a
# throwaway certificate, a tokens file in the Secret's format) serves HTTPS health without a
# token, refuses an unauthenticated inference 401, answers the token's, and logs JSON lines.
python3 - "$SRC/deploy/k8s/configmap.yaml" "$WORK/k8s-run" <<'EOF'
import json, os, re, sys
text = open(sys.argv[1]).read()
body = text.split("config.json: |", 1)[1]
cfg = json.loads("\n".join(l[4:] for l in body.splitlines() if l.strip()))
w = sys.argv[2]
os.makedirs(w, exist_ok=True)
for k, v in list(cfg.items()):
    if isinstance(v, str) and v.startswith("/etc/"):
        cfg[k] = os.path.join(w, os.path.basename(v))
cfg["models"], cfg["listen"], cfg["port"], cfg["http-port"] = os.path.join(w, "models"), "127.0.0.1", 0, 0
json.dump(cfg, open(os.path.join(w, "config.json"), "w"))
EOF
R=$WORK/k8s-run
mkdir -p "$R/models"
cp -r "$SRC/models/digits" "$R/models/"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$R/tls.key" -out "$R/tls.crt" 2>/dev/null
APPTOK=$(openssl rand -hex 16)
printf '# the Secret format\ntoken %s infer fraud-scoring\n' "$(printf %s "$APPTOK" | sha256sum | cut -d' ' -f1)" >"$R/tokens"
"$BUILD/server/tpud" --config "$R/config.json" 2>"$R/log" &
KPID=$!
HP=
for _ in $(seq 1 100); do
  HP=$(grep -o 'tpud listening on 127.0.0.1:[0-9]* (http' "$R/log" | grep -o ':[0-9]*' | tr -d : || true)
  [ -n "$HP" ] && break
  sleep 0.1
done
[ -n "$HP" ] || { cat "$R/log"; kill $KPID; echo "FAIL: tpud with the ConfigMap's config.json did not start"; exit 1; }
BODY='{"inputs":[{"name":"x","shape":[1,64],"datatype":"FP32","data":['"$(printf '0,%.0s' $(seq 1 63))"'0]}]}'
r1=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$R/tls.crt" "https://127.0.0.1:$HP/v2/health/ready" || true)
r2=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$R/tls.crt" -d "$BODY" "https://127.0.0.1:$HP/v2/models/digits/infer" || true)
r3=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$R/tls.crt" -H "Authorization: Bearer $APPTOK" -d "$BODY" \
  "https://127.0.0.1:$HP/v2/models/digits/infer" || true)
kill -TERM $KPID
wait $KPID || true
json_lines=$(python3 -c "import json,sys; [json.loads(l) for l in open('$R/log')]; print('ok')" 2>&1 || true)
if [ "$r1/$r2/$r3" != "200/401/200" ] || [ "$json_lines" != ok ]; then
  tail -5 "$R/log"; echo "FAIL: the ConfigMap's config: ready $r1, no token $r2, token $r3, JSON log: $json_lines"; exit 1
fi
echo "  configmap config.json runs: HTTPS ready 200 without a token, infer 401 without, 200 with the token; JSON log lines"
# The JSON config files shipped for the container and for systemd name only tpud options.
python3 - "$WORK/tpud-help.txt" "$SRC/deploy/container/config.json" "$SRC/deploy/systemd/config.json" <<'EOF' ||
import json, sys
help_text = open(sys.argv[1]).read()
bad = [(f, k) for f in sys.argv[2:] for k in json.load(open(f)) if f"--{k} " not in help_text]
for f, k in bad: print(f"FAIL: {f}: '{k}' is not a tpud option")
sys.exit(1 if bad else 0)
EOF
  exit 1
echo "  config.json (container, systemd): every key a tpud option"
# systemd-analyze checks the unit's directives and its ExecStart binary (here: this build's).
if command -v systemd-analyze >/dev/null; then
  sed "s#/usr/local/bin/tpud#$BUILD/server/tpud#" "$SRC/deploy/systemd/tpud.service" >"$WORK/tpud.service"
  systemd-analyze verify "$WORK/tpud.service" >"$WORK/verify.log" 2>&1 || true
  if [ -s "$WORK/verify.log" ]; then cat "$WORK/verify.log"; echo "FAIL: systemd-analyze verify tpud.service"; exit 1; fi
  echo "  systemd-analyze verify: deploy/systemd/tpud.service clean"
else
  echo "  systemd-analyze not installed: deploy/systemd/tpud.service not verified"
fi

# ---- 2. failover behind HAProxy ----
lap "failover (deploy/test_failover.sh)"
"$SRC/deploy/test_failover.sh" "$BUILD" "$SRC" | grep -v '^\[ *[0-9.]*s\]'
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL: deploy/test_failover.sh"; exit 1; }

# ---- 3. the container ----
lap "base images"
"$SRC/deploy/base_image.sh"
lap "podman build ($IMAGE)"
# HEALTHCHECK is kept only in the Docker image format.
podman build --isolation=chroot --format docker -q -t "$IMAGE" "$SRC" >"$WORK/build.log" 2>&1 || {
  tail -n 40 "$WORK/build.log"; echo "FAIL: podman build"; exit 1; }
[ "$(podman image inspect "$IMAGE" --format '{{.Config.User}}')" = "10001:10001" ] ||
  { echo "FAIL: the image's USER is not 10001:10001"; exit 1; }
podman image inspect "$IMAGE" --format '{{json .Config.Healthcheck}}' | grep -q /v2/health/ready ||
  { echo "FAIL: the image has no HEALTHCHECK on /v2/health/ready"; exit 1; }
echo "  image: $(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}'), USER 10001:10001, HEALTHCHECK on /v2/health/ready"

lap "podman run"
read -r HPORT NPORT < <(python3 -c '
import socket
a, b = socket.socket(), socket.socket(); a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
# The options the container gets from a mounted file, and one flag on top (flags win).
cat >"$WORK/config.json" <<'EOF'
{"models": "/models", "listen": "0.0.0.0", "port": 8500, "http-port": 8501, "threads": 1,
 "poll-seconds": 0, "log-level": "info"}
EOF
chmod 644 "$WORK/config.json"
# runc (not crun), and limits the host allows (podman's default nofile and nproc exceed them).
# podman starts no timers for HEALTHCHECK without systemd; `podman healthcheck run` below runs
# the image's check by hand, and its complaints about systemd are noise.
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
[ "$nproc" = unlimited ] || [ "$nproc" -gt 8192 ] && nproc=8192
podman run -d --runtime runc --name "$NAME" \
  --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" \
  --read-only --cap-drop ALL --security-opt no-new-privileges \
  -p "127.0.0.1:$HPORT:8501" -p "127.0.0.1:$NPORT:8500" \
  -v "$VOLUME:/models" -v "$WORK/config.json:/etc/tpud/config.json:ro" \
  "$IMAGE" --listen 0.0.0.0 --io-threads 2 >"$WORK/run.log" 2>&1 || {
  cat "$WORK/run.log"; echo "FAIL: podman run"; exit 1; }
healthy=""
for _ in $(seq 1 60); do
  if podman healthcheck run "$NAME" >/dev/null 2>&1; then healthy=1; break; fi
  [ "$(podman inspect "$NAME" --format '{{.State.Running}}')" = true ] || break
  sleep 1
done
[ -n "$healthy" ] || { podman logs "$NAME" 2>&1 | tail -n 20; echo "FAIL: the container never became healthy"; exit 1; }
echo "  HEALTHCHECK (podman healthcheck run): healthy"

FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
URL=http://127.0.0.1:$HPORT
curl -fsS "$URL/v2/health/ready" | grep -q '"ready": *true' || fail "GET /v2/health/ready through the published port"
# Options: the file's threads, the flag's io-threads, listening on every address.
curl -fsS "$URL/v2/debug/config" >"$WORK/config.out" || fail "GET /v2/debug/config"
python3 - "$WORK/config.out" <<'EOF' || fail "the container did not take its options from the file and the flag"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"threads": 1, "io-threads": 2, "poll-seconds": 0, "listen": "0.0.0.0", "models": "/models"}
bad = {k: c.get(k) for k in want if c.get(k) != want[k]}
print("  options: file and flag applied" if not bad else f"  options differ: {bad}")
sys.exit(1 if bad else 0)
EOF
# Inference over HTTP: the dataset's first ten images, from the fresh volume (the image's
# bundled models copied into it); predicted classes must be those the model was exported with.
python3 - "$SRC/tests/data" "$WORK/infer.json" <<'EOF'
import json, sys
x = open(f"{sys.argv[1]}/digits_x.u8", "rb").read()[:10 * 64]
json.dump({"id": "deploy-test", "inputs": [{"name": "x", "shape": [10, 64], "datatype": "FP32",
           "data": list(x)}]}, open(sys.argv[2], "w"))
EOF
if curl -fsS "$URL/v2/models/digits/infer" -H 'Content-Type: application/json' \
     --data-binary @"$WORK/infer.json" >"$WORK/infer.out"; then
  python3 - "$SRC/tests/data" "$WORK/infer.out" <<'EOF' || fail "wrong predictions from the container"
import json, sys
want = list(open(f"{sys.argv[1]}/digits_pred.u8", "rb").read()[:10])
p = json.load(open(sys.argv[2]))["outputs"][0]["data"]
got = [max(range(10), key=lambda k: p[r * 10 + k]) for r in range(10)]
print(f"  HTTP infer digits [10,64]: predicted {got}, expected {want}")
sys.exit(0 if got == want else 1)
EOF
else
  fail "POST /v2/models/digits/infer: $(cat "$WORK/infer.out" 2>/dev/null)"
fi
"$BUILD/client/tpuctl" --addr "127.0.0.1:$NPORT" health >/dev/null &&
  echo "  native port: tpuctl health OK" || fail "tpuctl health on the published native port"
# Not root, seen from inside and from the host.
uid=$(podman exec "$NAME" id -u 2>/dev/null || echo "?")
huser=$(podman top "$NAME" huser 2>/dev/null | awk 'NR == 2 {print $1}')
if [ "$uid" = 10001 ] && [ "$huser" = 10001 ]; then
  echo "  user: uid $uid in the container, $huser on the host"
else
  fail "tpud runs as uid '$uid' (host: '$huser'), expected 10001"
fi
# SIGTERM drains and exits 0 (PRODUCT.md, "Signals and exit").
podman stop -t 20 "$NAME" >/dev/null 2>&1 || true
code=$(podman inspect "$NAME" --format '{{.State.ExitCode}}')
[ "$code" = 0 ] && echo "  podman stop: exit 0" || { fail "podman stop: exit code $code"; podman logs "$NAME" 2>&1 | tail -n 10; }

lap "done"
[ $FAIL -eq 0 ] || exit 1
echo "test_deploy: OK"
