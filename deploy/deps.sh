#!/usr/bin/env bash
# Installs the Debian 12 packages tpud needs, only those that are missing, with at most one
# `apt-get update`. Safe to run any number of times; a no-op once everything is present.
#
#   deploy/deps.sh           build and test dependencies (what `make test` and `make run` need)
#   deploy/deps.sh bench     also the benchmark anchors (oneDNN, OpenBLAS) and load tools (h2load)
#   deploy/deps.sh fuzz      also clang and its sanitizer runtimes
#   deploy/deps.sh deploy    also what `make deploy-test` needs: podman and buildah (with runc,
#                            not crun), debootstrap for the base image, HAProxy, docker-compose
#                            (manifest check only; no Docker engine) and npm
set -euo pipefail

build_pkgs=(
  cmake make gcc pkg-config
  libevent-dev libprotobuf-c-dev protobuf-c-compiler
  libssl-dev openssl libjansson-dev libcunit1-dev libnghttp2-dev
  zlib1g-dev # gzip/deflate HTTP request bodies (server/front/http_body.c)
  python3 python3-numpy curl
  python3-grpcio python3-h2 protobuf-compiler protobuf-compiler-grpc
  # ONNX's own backend test models (/usr/share/libonnx-testdata): the ONNX decoder's unit
  # suite (tests/server/models/test_onnx.c) decodes every one, and fuzz_onnx seeds from them.
  libonnx-testdata
  # test_trees.sh's fresh rows: 10,000 per model against the libraries themselves (XGBoost's
  # predictor on the fixture's file, scikit-learn's estimators trained again and exported by
  # models/export_sklearn_trees.py, which needs python3-onnx's helper).
  python3-xgboost python3-sklearn python3-onnx
)
# bench/onnx_vs_ort.sh, bench/server_vs_peer.sh: python3-onnx writes their ONNX models, Node runs
# onnxruntime-node (and the peer server, bench/peer), wrk loads both servers over HTTP.
bench_pkgs=(libdnnl-dev libopenblas-dev g++ nghttp2-client python3-onnx nodejs wrk)
fuzz_pkgs=(clang libclang-rt-14-dev)
# runc is listed so that podman's "crun | runc" dependency is met by runc.
deploy_pkgs=(podman buildah runc debootstrap haproxy docker-compose ca-certificates)

want=("${build_pkgs[@]}")
for group in "$@"; do
  case "$group" in
    build) ;;
    bench)
      want+=("${bench_pkgs[@]}")
      command -v npm >/dev/null || want+=(npm)
      ;;
    fuzz) want+=("${fuzz_pkgs[@]}") ;;
    deploy)
      want+=("${deploy_pkgs[@]}")
      # npm ships inside NodeSource's nodejs; Debian's own npm package only where none is found.
      command -v npm >/dev/null || want+=(npm)
      ;;
    *) echo "deps.sh: unknown group '$group' (expected build, bench, fuzz or deploy)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps.sh: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# Try without refreshing the package lists first; update once only if that fails.
if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
