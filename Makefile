# Thin wrapper over CMake. `make test` and `make run` install missing Debian packages first
# (deploy/deps.sh), configure a Release build in build/, build, then test or run.
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
WERROR     ?= $(if $(CI),ON,OFF)
CMAKE_ARGS ?=

.PHONY: all deps configure build test run bench bench-onnx bench-peer bench-trees check-vmath check-fpconv clean deploy-test fuzz test-asan test-tsan

all: build

deps:
	@deploy/deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTPUD_WERROR=$(WERROR) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -V

run: build
	@$(BUILD)/server/tpud --models models $(RUN_ARGS)

bench:
	@deploy/deps.sh bench
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTPUD_WERROR=$(WERROR) -DTPUD_BUILD_BENCH=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@$(BUILD)/bench/engine_bench $(BENCH_ARGS)
	@bench/onnx_vs_ort.sh $(BUILD) .
	@env $(PEER_BENCH_ENV) bench/server_vs_peer.sh $(BUILD) .
	@/usr/bin/python3 bench/trees_vs_xgboost.py $(BUILD) $(TREES_BENCH_ARGS)

# Only the tree ensembles against XGBoost's own predictor (bench/trees_vs_xgboost.py);
# TREES_BENCH_ARGS passes its options, e.g. "--quick --reps 1 --no-server".
bench-trees:
	@deploy/deps.sh bench
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTPUD_WERROR=$(WERROR) -DTPUD_BUILD_BENCH=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@/usr/bin/python3 bench/trees_vs_xgboost.py $(BUILD) $(TREES_BENCH_ARGS)

# Only tpud against ONNX Runtime behind Node's http (bench/peer) over the network, side by side:
# bench/server_vs_peer.sh; PEER_BENCH_ENV passes its settings, e.g. "DUR=3 REPS=3 MODELS=big".
bench-peer:
	@deploy/deps.sh bench
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTPUD_WERROR=$(WERROR) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@env $(PEER_BENCH_ENV) bench/server_vs_peer.sh $(BUILD) .

# The vector math's error over every binary32 input, against the bounds engine/kernels/vmath.h
# documents (bench/vmath_check; about 10 minutes per kernel set on 2 vCPUs).
check-vmath: build
	@$(BUILD)/tests/vmath_check --limit --threads $(JOBS)

# Only the ONNX comparison (tpud's graph path vs ONNX Runtime and vs the dense chain):
# bench/onnx_vs_ort.sh; ONNX_BENCH_ENV passes its settings, e.g. "REPS=3 SERVER=0".
bench-onnx:
	@deploy/deps.sh bench
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTPUD_WERROR=$(WERROR) -DTPUD_BUILD_BENCH=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@env $(ONNX_BENCH_ENV) bench/onnx_vs_ort.sh $(BUILD) .

# Every binary32 value through the JSON path's float conversions (proto/tpu_fpconv.c) on 2
# threads: formatted, parsed back to the same bits (bench/fpconv_check.c), and every 64th text
# compared with the old formatter's bytes; FPCONV_ARGS="--legacy 1" compares all of them (slow).
FPCONV_ARGS ?= --legacy 64
check-fpconv: configure
	@cmake --build $(BUILD) -j $(JOBS) --target fpconv_check
	@$(BUILD)/proto/fpconv_check --threads 2 $(FPCONV_ARGS)

# The deployment files built and run for real: container image (podman), manifests validated
# offline, HAProxy failover of three replicas (deploy/test_deploy.sh). Needs `make build` first,
# which it does; installs its own packages (deploy/deps.sh deploy).
deploy-test: build
	@deploy/test_deploy.sh $(BUILD) .

# ---- fuzzing and sanitizers (clang; each in its own build directory) ----
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
SAN_CMAKE = -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPUD_WERROR=OFF $(CMAKE_ARGS)
# Sanitizer verdicts are fatal (halt_on_error), and every report is also written to
# <build>/san/<tool>.<pid>: tpud's stderr inside an integration script is a temporary file the
# script deletes, so the Makefile prints the reports and fails when any were written.
SAN_OPTS = ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:log_path=$(CURDIR)/$(1)/san/asan \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(CURDIR)/$(1)/san/ubsan \
           TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:log_path=$(CURDIR)/$(1)/san/tsan
SAN_CHECK = if ls $(1)/san/* >/dev/null 2>&1; then cat $(1)/san/*; \
              echo "$(1): sanitizer reports above (files in $(1)/san/)" >&2; exit 1; fi
# The suites that start threads (engine pool, batcher, audit writer, repository, client) and the
# integration scripts that drive tpud's I/O threads over loopback.
TSAN_SUITES ?= engine_pool engine server_batcher audit payload repository model tpuclient tpuclient_async server_queue server_sock server_tls net_io dispatch server_fifo
TSAN_SCRIPTS ?= test_server|test_http|test_repository|test_grpc|test_catalogue|test_conn|test_faults|test_replay

# libFuzzer targets (tests/fuzz): build, run each for FUZZ_SECONDS, fail on any finding.
fuzz:
	@deploy/deps.sh fuzz
	@cmake -S . -B build-fuzz $(SAN_CMAKE) -DTPUD_FUZZ=ON -DBUILD_TESTING=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	@tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Every unit suite and integration script under AddressSanitizer + UndefinedBehaviorSanitizer.
# gcc, not clang: clang 14 with -fsanitize=address,undefined spends over 12 CPU minutes on the
# unrolled AVX-512 kernels (engine/kernels/avx512) without finishing; gcc 12 takes about 75 s.
test-asan:
	@deploy/deps.sh fuzz
	@cmake -S . -B build-asan $(SAN_CMAKE) -DCMAKE_C_COMPILER=gcc -DTPUD_SANITIZE=address,undefined \
	  -DCMAKE_C_FLAGS=-fno-sanitize-recover=undefined >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@rm -rf build-asan/san && mkdir -p build-asan/san
	@cd build-asan && $(call SAN_OPTS,build-asan) ctest --output-on-failure || \
	  { cat san/* 2>/dev/null; exit 1; }
	@$(call SAN_CHECK,build-asan)

# The threaded suites and the server integration scripts under ThreadSanitizer.
test-tsan:
	@deploy/deps.sh fuzz
	@cmake -S . -B build-tsan $(SAN_CMAKE) -DTPUD_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS)
	@rm -rf build-tsan/san && mkdir -p build-tsan/san
	@cd build-tsan && $(call SAN_OPTS,build-tsan) ./tests/tpud_unit $(TSAN_SUITES) || \
	  { cat san/* 2>/dev/null; exit 1; }
	@cd build-tsan && $(call SAN_OPTS,build-tsan) ctest --output-on-failure -R '$(TSAN_SCRIPTS)' || \
	  { cat san/* 2>/dev/null; exit 1; }
	@$(call SAN_CHECK,build-tsan)

clean:
	rm -rf $(BUILD)
