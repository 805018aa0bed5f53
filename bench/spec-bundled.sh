#!/usr/bin/env bash
# Speculation on the bundled pair, as reported in docs/performance.md: the DSpark drafter
# (fixed n-max grid and the cost schedule), sampling at T = 0.8, the draft model (fixed and adaptive,
# on held-out code and on off-domain text), prompt lookup (alone and in front of both drafters),
# and the serving frontiers of both drafters. Run on a quiet machine; results go to $OUT
# (default bench-out/). TARGET picks the target file, e.g. the BF16 copy that `make run` uses on AMD
# CPUs with AVX-512 BF16 (make drafters writes it there):
#   bench/spec-bundled.sh [OUT]
#   TARGET=build/models/ref-target-bf16.gguf bench/spec-bundled.sh bench-out-bf16
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bin/dspark
OUT="${1:-bench-out}"
P=bench/prompts/code-completion.jsonl
T=${TARGET:-models/ref-target.gguf}
mkdir -p "$OUT"
# The drafters run as Q8_0 copies (make drafters), as `make run` runs them.
make --no-print-directory drafters >/dev/null
DS=build/models/ref-dspark-q8_0.gguf
DM=build/models/ref-draft-q8_0.gguf
common=(-m "$T" -t 2 --prompts "$P" -n 128 --max-prompts 20)
$B bench --spec "${common[@]}" --spec-type draft-dspark -md $DS --sweep n-max=2,3,4,6,8 -r 3 -o "$OUT/dspark-cut"
$B bench --spec "${common[@]}" --spec-type draft-dspark -md $DS --sweep cost=1 --sweep n-max=3,8 -r 3 -o "$OUT/dspark-cost"
$B bench --spec "${common[@]}" --spec-type draft-dspark -md $DS --sweep n-max=8 --temp 0.8 -s 7 -r 1 -o "$OUT/dspark-t08"
$B bench --spec "${common[@]}" --spec-type draft-simple -md $DM --sweep n-max=3,4,5,6 --sweep adaptive=0,1 -r 3 -o "$OUT/draft"
# Prompt lookup in front of the model drafters, and alone.
$B bench --spec "${common[@]}" --spec-type draft-simple -md $DM --spec-ngram-first --sweep n-max=3,6,8 --sweep adaptive=0,1 \
    -r 3 -o "$OUT/draft-lookup"
$B bench --spec "${common[@]}" --spec-type draft-dspark -md $DS --spec-ngram-first --sweep cost=0,1 --sweep n-max=3,8 -r 2 \
    -o "$OUT/dspark-lookup"
$B bench --spec "${common[@]}" --spec-type ngram --sweep n-max=3,6,8 -r 3 -o "$OUT/ngram"
$B bench --spec -m "$T" -t 2 --prompts bench/prompts/repeat-edit.jsonl -n 128 --max-prompts 20 --spec-type ngram \
    --sweep n-max=4,8 -r 2 -o "$OUT/repeat-ngram"
# Text the pair was not trained on (prose, data, other languages): the adaptive schedule must not
# lose to plain decoding on any prompt.
$B bench --spec -m "$T" -t 2 --prompts bench/prompts/off-domain.jsonl -n 128 --spec-type draft-simple -md $DM \
    --sweep n-max=6 --sweep adaptive=1 -r 3 -o "$OUT/draft-off-domain"
$B bench --spec -m "$T" -t 2 --prompts bench/prompts/off-domain.jsonl -n 128 --spec-type draft-simple -md $DM \
    --spec-ngram-first --sweep n-max=8 --sweep adaptive=1 -r 3 -o "$OUT/draft-lookup-off-domain"
$B bench --serve start --serve-args "-m $T --spec-type draft-dspark -md $DS --parallel 32" \
    --serve-concurrency 1 2 4 8 16 32 --serve-out "$OUT/serve-dspark"
$B bench --serve start --serve-args "-m $T --spec-type draft-simple -md $DM --spec-adaptive --spec-draft-n-max 3 --parallel 32" \
    --serve-concurrency 1 2 4 8 16 32 --serve-out "$OUT/serve-draft"
