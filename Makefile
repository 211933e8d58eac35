# Thin wrapper over CMake. `make test` and `make run` install missing Debian packages first
# (deploy/deps.sh), configure a Release build in build/, build, then test or run.
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
WERROR     ?= $(if $(CI),ON,OFF)
CMAKE_ARGS ?=

.PHONY: all deps configure build test run bench clean

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

clean:
	rm -rf $(BUILD)
