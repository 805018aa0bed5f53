# dspark: the two set-up commands on a fresh Debian 12 machine are `make run` and `make test`.
# Every target installs missing Debian packages first (scripts/install-deps.sh).

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
DSPARK := $(BUILD_DIR)/bin/dspark
# dspark reads the escapes (\n is a newline, as in llama.cpp's -e); the recipe quotes it with single
# quotes, so it holds none. (Through the shell's $(printf ...) the trailing newline would be lost:
# the last line would then end mid-token, which drafters predict badly.)
PROMPT ?= def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n
N ?= 96
# The pair's prompt: a held-out one of the benchmark set (bench/prompts/code-completion.jsonl, cc-0030).
PAIR_PROMPT ?= bench/prompts/cc-0030.txt
# The fastest setting measured on this pair's held-out prompts (docs/performance.md): prompt lookup
# in front of the draft model, each draft's length chosen adaptively up to 8 (else n-gram lookup
# alone). `make run` then also shows the DSpark drafter (lookup first, its best measured setting:
# 3 tokens per block) when it exists. Drafters run as Q8_0 copies made by `dspark quantize` at build
# time (about half the bytes of F16 to stream per draft pass; verification keeps the output the
# target's, token for token).
Q8 := $(BUILD_DIR)/models
# The target runs as a BF16 copy on AMD CPUs with AVX-512 BF16 (Zen 4, Zen 5): vdpbf16ps multiplies
# at twice the f32 FMA rate there, so prefill and the extra rows of a verification block cost about
# half (BF16 activations, as llama.cpp pairs them). Elsewhere the F16 file itself (Intel's
# vdpbf16ps is no faster than FMAs: kernels/matmul_bf16-inl.h).
ifneq ($(and $(shell grep -m1 -ow avx512_bf16 /proc/cpuinfo 2>/dev/null),$(shell grep -m1 -ow AuthenticAMD /proc/cpuinfo 2>/dev/null)),)
MODEL ?= $(Q8)/ref-target-bf16.gguf
DRAFTERS += $(Q8)/ref-target-bf16.gguf
else
MODEL ?= models/ref-target.gguf
endif
ifneq ($(wildcard models/ref-draft.gguf),)
DRAFTERS += $(Q8)/ref-draft-q8_0.gguf
SPEC ?= --spec-type draft-simple -md $(Q8)/ref-draft-q8_0.gguf --spec-ngram-first --spec-adaptive --spec-draft-n-max 8
else
SPEC ?= --spec-type ngram
endif
ifneq ($(wildcard models/ref-dspark.gguf),)
DRAFTERS += $(Q8)/ref-dspark-q8_0.gguf
SPEC2 ?= --spec-type draft-dspark -md $(Q8)/ref-dspark-q8_0.gguf --spec-ngram-first --spec-schedule cut --spec-draft-n-max 3
endif

# The memory-bound reference pair (docs/reference-pair.md): the bundled target
# inflated to Qwen3-1.7B's size without changing what it predicts (tools/train: `inflate`), with the
# DSpark drafter converted to match; the unchanged draft model serves it as it is. The F16 target
# (3.2 GB) is only the quantiser's input: make deletes it after quantising (.INTERMEDIATE) and does
# not remake it while the quantised files are newer than its sources. The quantised files depend on
# the quantiser's sources, not on the binary, which relinks on any C++ change (minutes of
# re-quantising for nothing).
TRAIN_PYTHON ?= /usr/bin/python3
INFLATE_CMD := PYTHONPATH=tools/train $(TRAIN_PYTHON) -m dspark_train inflate
INFLATE := $(INFLATE_CMD) --shape 1.7b
INFLATE_SRC := $(addprefix tools/train/dspark_train/,inflate.py gguf_reader.py gguf_writer.py)
QUANTIZER_SRC := src/model/quantize.cc src/kernels/ref/quant_ref.cc
BENCH_MODELS := $(addprefix $(Q8)/,ref-target-1.7b-Q4_K_M.gguf ref-target-1.7b-Q8_0.gguf \
                  ref-dspark-1.7b-F16.gguf ref-dspark-1.7b-Q8_0.gguf \
                  ref-eagle3-1.7b-F16.gguf ref-eagle3-1.7b-Q8_0.gguf)
# Its mixture-of-experts counterpart: the same target upcycled to qwen3moe (`inflate --shape moe`:
# width x2, 34 blocks, 64 copies of each FFN as experts, 8 used; 10.3 B parameters, 1.35 B active).
# The F16 intermediate (21 GB) is deleted after quantising; the single-threaded quantiser sets the
# build time.
BENCH_MODELS_MOE := $(addprefix $(Q8)/,ref-target-moe-Q4_K_M.gguf ref-dspark-moe-Q8_0.gguf)

.PHONY: all deps configure build drafters run test test-asan bench bench-models bench-models-moe tsan fuzz soak clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

drafters: build
	@$(MAKE) -s --no-print-directory $(DRAFTERS)

$(Q8)/%-q8_0.gguf: models/%.gguf $(DSPARK)
	@mkdir -p $(Q8)
	@$(DSPARK) quantize $< $@ Q8_0 2>&1 | tail -n 1

$(Q8)/%-bf16.gguf: models/%.gguf $(DSPARK)
	@mkdir -p $(Q8)
	@$(DSPARK) quantize $< $@ BF16 2>&1 | tail -n 1

# Needs only the engine binary (for `dspark quantize`), not the whole build.
bench-models: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target dspark
	@$(MAKE) -s --no-print-directory $(BENCH_MODELS)
	@cd $(Q8) && sha256sum $(notdir $(BENCH_MODELS))

$(Q8)/ref-target-1.7b-F16.gguf: models/ref-target.gguf $(INFLATE_SRC)
	@$(INFLATE) --target $< --out $@

# The drafter's map (width, taps) is the target's; inflate reads the target for it.
$(Q8)/ref-dspark-1.7b-F16.gguf: models/ref-dspark.gguf models/ref-target.gguf $(INFLATE_SRC)
	@$(INFLATE) --target models/ref-target.gguf --dspark $< --dspark-out $@

# The EAGLE-3 head keeps its width: taps moved, fc's columns tiled, and its own embedding and LM
# head (the small target's), since the inflated target's are wider.
$(Q8)/ref-eagle3-1.7b-F16.gguf: models/ref-eagle3.gguf models/ref-target.gguf $(INFLATE_SRC)
	@$(INFLATE) --target models/ref-target.gguf --eagle3 $< --eagle3-out $@

# Written under a temporary name: an interrupted run leaves no file that looks up to date.
$(Q8)/ref-%-1.7b-Q4_K_M.gguf: $(Q8)/ref-%-1.7b-F16.gguf $(QUANTIZER_SRC) | $(DSPARK)
	@$(DSPARK) quantize $< $@.tmp Q4_K_M && mv $@.tmp $@

$(Q8)/ref-%-1.7b-Q8_0.gguf: $(Q8)/ref-%-1.7b-F16.gguf $(QUANTIZER_SRC) | $(DSPARK)
	@$(DSPARK) quantize $< $@.tmp Q8_0 && mv $@.tmp $@

.INTERMEDIATE: $(Q8)/ref-target-1.7b-F16.gguf

bench-models-moe: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target dspark
	@$(MAKE) -s --no-print-directory $(BENCH_MODELS_MOE)
	@cd $(Q8) && sha256sum $(notdir $(BENCH_MODELS_MOE))

$(Q8)/ref-target-moe-F16.gguf: models/ref-target.gguf $(INFLATE_SRC)
	@$(INFLATE_CMD) --shape moe --target $< --out $@

$(Q8)/ref-target-moe-Q4_K_M.gguf: $(Q8)/ref-target-moe-F16.gguf $(QUANTIZER_SRC) | $(DSPARK)
	@$(DSPARK) quantize $< $@.tmp Q4_K_M && mv $@.tmp $@

# The DSpark drafter for the mixture: the same map as the target's (width x2, taps to the original
# layers among 34 blocks), so it drafts for it what it drafts for the bundled target.
$(Q8)/ref-dspark-moe-F16.gguf: models/ref-dspark.gguf models/ref-target.gguf $(INFLATE_SRC)
	@$(INFLATE_CMD) --shape moe --target models/ref-target.gguf --dspark $< --dspark-out $@

$(Q8)/ref-dspark-moe-Q8_0.gguf: $(Q8)/ref-dspark-moe-F16.gguf $(QUANTIZER_SRC) | $(DSPARK)
	@$(DSPARK) quantize $< $@.tmp Q8_0 && mv $@.tmp $@

.INTERMEDIATE: $(Q8)/ref-target-moe-F16.gguf

# Generates with the bundled reference models, speculatively and plain on the same prompt, and
# prints both speeds, the speed-up, acceptance and whether the outputs are identical.
# Then the same on the memory-bound reference pair (built once by bench-models, ~2.5 minutes),
# where verification is nearly free and the speed-up is what a real model gets.
run: drafters bench-models
	@$(DSPARK) generate -m $(MODEL) $(SPEC) --compare -p '$(PROMPT)' -n $(N)
ifneq ($(SPEC2),)
	@echo "---- the same prompt with the DSpark drafter ----"
	@$(DSPARK) generate -m $(MODEL) $(SPEC2) --compare -p '$(PROMPT)' -n $(N)
endif
	@echo "---- the memory-bound reference pair: the target inflated to 1.6 B parameters (Q4_K_M), the same draft model ----"
	@$(DSPARK) generate -m $(Q8)/ref-target-1.7b-Q4_K_M.gguf --spec-type draft-simple -md models/ref-draft.gguf \
	    --spec-adaptive --spec-draft-n-max 8 --compare -f $(PAIR_PROMPT) -n $(N)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: drafters
	@$(DSPARK) bench --plain -m $(MODEL)
	@$(BUILD_DIR)/bin/kernels_bench --benchmark_min_time=0.2

# Soak test of `dspark serve` with the DSpark drafter (bench/soak/README.md): SOAK_SECONDS (600) of
# mixed load from 16 clients; prints the bars as a Markdown table and fails when one is missed.
# ctest runs the 60-second version (soak_short, label e2e).
SOAK_SECONDS ?= 600
soak: build
	@/usr/bin/python3 bench/soak/soak.py --duration $(SOAK_SECONDS) --dspark $(DSPARK)

# libFuzzer targets (tests/fuzz): replays each committed corpus and fuzzes it FUZZ_SECONDS (30).
fuzz: deps
	@scripts/fuzz.sh

# Every test of `make test` on an AddressSanitizer + UndefinedBehaviorSanitizer build of everything
# (build-asan/, the run-time dispatched kernels included): an out-of-bounds access, a leak or
# undefined behaviour fails the test that caused it. clang, the fuzzers' compiler: it builds this
# in well under half of gcc's time, and its instrumentation runs faster. -O1 without debug
# information keeps the build and the run short (reports name functions; rebuild with -g for lines).
# Checks of sampled distributions that must pass run a tenth of their trials here
# (speculative/testing/sampling_check.h). Left out here, run in full by `make test`: six of the seven
# sampling negative controls (each compiles a different deliberate bug into the verifier and runs
# the same harness as the seventh, kept here, at full power, half a minute each under ASan), the
# distribution check of sampling through side chains (the engine's tail rows run here in the greedy
# lossless and DSpark tests, the verifier's tail rule in verifier_test's own distribution checks)
# and the PyTorch toolkit's pytest (Python code; the engine paths its two engine calls take are
# covered here by the C++ tests).
ASAN_EXCLUDE := NegativeControls.*/(off_by_one_q|greedy_bonus|resample_from_p|unfiltered_p|leaf_against_p|unfiltered_q)|TokenTreeTailSampling|^dspark_train_pytest$$
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$(CURDIR)/tests/fuzz/ubsan.supp
test-asan: deps
	@CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 \
	    -DDSPARK_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && $(ASAN_ENV) ctest --output-on-failure -j $(JOBS) -E '$(ASAN_EXCLUDE)'

# ThreadSanitizer build of the concurrent parts (HTTP server, continuous batching, thread pool):
# their tests must run without a race report. Not part of `make test` (a separate, slow build).
# The binaries run side by side (JOBS at a time); a failing one's output is printed.
TSAN_TESTS := util_test speculative_test lossless_test server_test server_faults_test
tsan: deps
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -DDSPARK_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target $(TSAN_TESTS)
	@printf '%s\n' $(TSAN_TESTS) | xargs -P $(JOBS) -I{} sh -c \
	    'TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/{} >build-tsan/{}.log 2>&1 || { cat build-tsan/{}.log; echo "tsan: {} failed"; exit 1; }'
	@echo "tsan: $(TSAN_TESTS) passed"

clean:
	@rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz
