#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, in build-fuzz/) and, for each,
# replays its committed corpus and fuzzes for FUZZ_SECONDS (default 30). New inputs go to
# build-fuzz/work/TARGET, findings to build-fuzz/work/TARGET-crash-* (or -timeout-, -oom-).
# Exits non-zero on any finding. FUZZ_TIMEOUT: seconds an input may take (default 1).
#   scripts/fuzz.sh                  # every target
#   FUZZ_SECONDS=3600 scripts/fuzz.sh gguf   # one target, an hour
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${FUZZ_SECONDS:-30}
TIMEOUT=${FUZZ_TIMEOUT:-1}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(gguf tokenizer request jinja grammar)
JOBS=${JOBS:-$(nproc)}

# Only Highway's static (scalar) target: the fuzzers exercise parsing and validation, and Debian's
# clang 14 does not build the runtime-dispatched AVX-512 kernels.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-DHWY_COMPILE_ONLY_STATIC=1" -DDSPARK_SANITIZE=address,undefined,fuzzer-no-link \
  -DDSPARK_BUILD_TESTS=OFF -DDSPARK_BUILD_BENCH=OFF -DDSPARK_BUILD_PYTHON=OFF -DDSPARK_BUILD_LIBRARY=OFF \
  -DDSPARK_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$JOBS" --target $(printf '%s_fuzz ' "${TARGETS[@]}")

export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/tests/fuzz/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1"
status=0
for t in "${TARGETS[@]}"; do
  work=build-fuzz/work/$t
  mkdir -p "$work"
  seeds=()
  for d in tests/fuzz/corpus/"$t" $([ "$t" = jinja ] && echo tests/data/templates); do
    [ -d "$d" ] && seeds+=("$d")
  done
  log=build-fuzz/work/$t.log
  if build-fuzz/fuzz/${t}_fuzz -max_total_time="$SECS" -timeout="$TIMEOUT" -rss_limit_mb=2048 \
       -dict=tests/fuzz/$t.dict -artifact_prefix="$work-" -print_final_stats=1 "$work" "${seeds[@]}" >"$log" 2>&1; then
    runs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "fuzz $t: ${runs:-?} inputs in ${SECS} s, no finding"
  else
    echo "fuzz $t: FINDING (log: $log)"
    grep -E 'ERROR|violated|runtime error|SUMMARY|Test unit written' "$log" | head -8
    status=1
  fi
done
exit $status
