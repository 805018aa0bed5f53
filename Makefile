# dspark: the two set-up commands on a fresh Debian 12 machine are `make run` and `make test`.
# Every target installs missing Debian packages first (scripts/install-deps.sh).

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
DSPARK := $(BUILD_DIR)/bin/dspark
MODEL ?= models/ref-target.gguf
PROMPT ?= def fibonacci(n):\n    
N ?= 96

.PHONY: all deps configure build run test bench clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Generates with the bundled reference model and prints speed (and, with a drafter, acceptance).
run: build
	@$(DSPARK) generate -m $(MODEL) -p "$$(printf '$(PROMPT)')" -n $(N)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	@$(DSPARK) bench --plain -m $(MODEL)
	@$(BUILD_DIR)/bench/kernels/kernels_bench --benchmark_min_time=0.2 2>/dev/null || true

clean:
	@rm -rf $(BUILD_DIR)
