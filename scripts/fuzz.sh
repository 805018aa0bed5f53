#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, in build-fuzz/) and fuzzes each,
# starting from its committed corpus. Exits non-zero on any finding (build-fuzz/.../TARGET-crash-*,
# -timeout-, -oom-). FUZZ_TIMEOUT: seconds an input may take (default 1). Three modes:
#   scripts/fuzz.sh [TARGET...]     the CI check (make fuzz): a fixed seed and a fixed number of
#        inputs per target (about 30 s each), from a fresh directory, so every run of a commit
#        tries nearly the same inputs (thread timing varies coverage a little); exploring is the campaign's job, and what it finds is committed
#        to tests/fuzz/corpus as a regression input that every run replays.
#   FUZZ_SECONDS=3600 [FUZZ_FORK=2] scripts/fuzz.sh gguf    explore: random seed, FUZZ_FORK
#        processes (libFuzzer's -fork), the corpus growing in build-fuzz/work/TARGET.
#   scripts/fuzz.sh --campaign [TARGET...]   explore each target in FUZZ_SECONDS (600) chunks on
#        FUZZ_FORK (2) processes until tests/fuzz/campaign.tsv shows 10 M executions or 2 CPU
#        hours for it since its last finding (the bar in tests/fuzz/README.md). That ledger is committed, so a campaign
#        resumes across machines; commit it after each session of fuzzing.
#   scripts/fuzz.sh --ledger        executions and CPU hours per target in the campaign ledger
# Exploring runs append a line to their ledger (build-fuzz/ledger.tsv outside a campaign).
set -euo pipefail
cd "$(dirname "$0")/.."
LEDGER=build-fuzz/ledger.tsv
CAMPAIGN_LEDGER=tests/fuzz/campaign.tsv

if [ "${1:-}" = "--ledger" ]; then
  LEDGER=$CAMPAIGN_LEDGER
  [ -f "$LEDGER" ] || { echo "no fuzzing runs recorded in $LEDGER"; exit 0; }
  # "clean" counts the runs after the target's last finding: a fix restarts the clock of the bar.
  awk -F'\t' 'NR > 1 { t = $3; runs[t] += $7; cs[t] += $6; n[t]++
                        if ($8 == "finding") { bad[t]++; ce[t] = 0; cc[t] = 0 } else { ce[t] += $7; cc[t] += $6 } }
    END { printf "%-10s %6s %14s %10s %9s %16s %12s\n", "target", "runs", "executions", "CPU hours",
                 "findings", "clean executions", "clean hours"
          for (t in runs) printf "%-10s %6d %14d %10.2f %9d %16d %12.2f\n", t, n[t], runs[t], cs[t] / 3600,
                                 bad[t], ce[t], cc[t] / 3600 }' "$LEDGER"
  exit 0
fi

CAMPAIGN=0
if [ "${1:-}" = "--campaign" ]; then
  CAMPAIGN=1
  shift
fi
CHECK=0
if [ "$CAMPAIGN" = 1 ]; then
  SECS=${FUZZ_SECONDS:-600}
  FUZZ_FORK=${FUZZ_FORK:-2}
  LEDGER=$CAMPAIGN_LEDGER
elif [ -n "${FUZZ_SECONDS:-}" ]; then
  SECS=$FUZZ_SECONDS
else
  CHECK=1
  SECS=300  # only a guard: the check stops after its fixed number of inputs
  FUZZ_FORK=0
fi
# The check's inputs per target: about 30 s each on a 2-core CI machine.
declare -A CHECK_RUNS=([gguf]=50000 [tokenizer]=120000 [request]=200000 [jinja]=25000 [grammar]=10000)
TIMEOUT=${FUZZ_TIMEOUT:-1}
FORK=${FUZZ_FORK:-0}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(gguf tokenizer request jinja grammar)
JOBS=${JOBS:-$(nproc)}

# Only Highway's static (scalar) target: the fuzzers exercise parsing and validation, and one
# target builds in a fraction of the time (make test-asan checks the dispatched kernels).
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-DHWY_COMPILE_ONLY_STATIC=1" -DDSPARK_SANITIZE=address,undefined,fuzzer-no-link \
  -DDSPARK_BUILD_TESTS=OFF -DDSPARK_BUILD_BENCH=OFF -DDSPARK_BUILD_PYTHON=OFF -DDSPARK_BUILD_LIBRARY=OFF \
  -DDSPARK_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$JOBS" --target $(printf '%s_fuzz ' "${TARGETS[@]}")

export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/tests/fuzz/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1"
[ -f "$LEDGER" ] || printf 'date\tcommit\ttarget\tseconds\tprocesses\tcpu_seconds\texecutions\tresult\n' >"$LEDGER"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fuzz_target() {  # TARGET: one run; appends to the ledger when exploring; 1 on a finding
  local t=$1 work seeds d log mode procs start result elapsed runs cpu
  work=build-fuzz/work/$t
  mode=(-print_final_stats=1)
  if [ "$CHECK" = 1 ]; then
    work=build-fuzz/check/$t
    rm -rf "$work" "$work"-*
    mode+=(-seed=1 -runs="${CHECK_RUNS[$t]}")
  fi
  mkdir -p "$work"
  seeds=()
  for d in tests/fuzz/corpus/"$t" $([ "$t" = jinja ] && echo tests/data/templates); do
    [ -d "$d" ] && seeds+=("$d")
  done
  log=$work.log
  procs=1
  if [ "$FORK" -gt 0 ]; then
    mode=(-fork="$FORK" -ignore_crashes=0 -ignore_timeouts=0 -ignore_ooms=0)
    procs=$FORK
  fi
  start=$(date +%s)
  # CPU seconds of the fuzzer and its forked jobs: what the bar counts, whatever else ran meanwhile.
  local TIMEFORMAT='%U %S' times
  if { time build-fuzz/fuzz/${t}_fuzz -max_total_time="$SECS" -timeout="$TIMEOUT" -rss_limit_mb=2048 "${mode[@]}" \
       -dict=tests/fuzz/$t.dict -artifact_prefix="$work-" "$work" "${seeds[@]}" >"$log" 2>&1; } 2>"$log.cpu"; then
    result=ok
  else
    result=finding
  fi
  elapsed=$(( $(date +%s) - start ))
  cpu=$(awk '{printf "%d", $1 + $2}' "$log.cpu")
  # libFuzzer times inputs by the wall clock, so a starved process (a campaign under nice while
  # builds run) reports timeouts. Run such an input alone: within the limit, it was the load.
  local artifact
  artifact=$(grep -o "Test unit written to $work-timeout-[0-9a-f]*" "$log" | tail -n 1 | awk '{print $NF}')
  if [ "$result" = finding ] && [ -n "$artifact" ] && ! grep -q -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error' "$log" &&
     build-fuzz/fuzz/${t}_fuzz -timeout="$TIMEOUT" -rss_limit_mb=2048 "$artifact" >"$log.rerun" 2>&1; then
    echo "fuzz $t: an input timed out under load and runs within ${TIMEOUT} s alone ($artifact, kept)"
    result=load-timeout
  fi
  if [ "$FORK" -gt 0 ]; then  # the fork parent's status lines carry the total over its jobs
    runs=$(grep -E '^#[0-9]+:' "$log" | tail -n 1 | sed -E 's/^#([0-9]+):.*/\1/')
  else
    runs=$(grep -m1 '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  fi
  [ "$CHECK" = 1 ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$commit" "$t" "$elapsed" "$procs" "$cpu" "${runs:-0}" "$result" >>"$LEDGER"
  if [ "$result" != finding ]; then
    echo "fuzz $t: ${runs:-?} inputs in ${elapsed} s on $procs process(es) (${cpu} CPU seconds), no finding"
  else
    echo "fuzz $t: FINDING (log: $log)"
    grep -E 'ERROR|violated|runtime error|SUMMARY|Test unit written|INFO: log from the inner' "$log" | head -8
  fi
  [ "$result" != finding ]
}

# Executions and core-seconds the ledger holds for TARGET.
# Executions and CPU seconds of target $1 since its last finding (the bar's clock restarts at a fix).
ledger_totals() {
  awk -F'\t' -v t="$1" 'NR > 1 && $3 == t { if ($8 == "finding") { e = 0; c = 0 } else { e += $7; c += $6 } }
    END { printf "%d %d\n", e, c }' "$LEDGER"
}

status=0
if [ "$CAMPAIGN" = 1 ]; then
  for t in "${TARGETS[@]}"; do
    while read -r execs core_s < <(ledger_totals "$t"); [ "$execs" -lt 10000000 ] && [ "$core_s" -lt 7200 ]; do
      echo "campaign $t: $execs executions, $core_s core-seconds so far"
      fuzz_target "$t" || exit 1
    done
    echo "campaign $t: done ($(ledger_totals "$t" | awk '{print $1 " executions, " $2 " CPU seconds"}'))"
  done
  exit 0
fi
for t in "${TARGETS[@]}"; do
  fuzz_target "$t" || status=1
done
exit $status
