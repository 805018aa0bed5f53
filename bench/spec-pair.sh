#!/usr/bin/env bash
# Speculation on the memory-bound reference pair, as reported in docs/performance.md ("The bars on
# the pair"): the target's pass costs, each drafter drafting a fixed 8 tokens (acceptance per
# position) and at its documented setting, greedy and at T 0.8 / top-p 0.95, the serving frontier
# of the draft model and EAGLE-3, and with MOE=1 the DSpark drafter on the mixture-of-experts
# target. Builds the pair first (make bench-models, ~2.5 minutes; MOE=1 adds make bench-models-moe,
# ~11 minutes). About 25 minutes on 2 cores (MOE=1: 20 more). Run on a quiet machine; results go
# to $OUT (default bench-out-pair/):
#   bench/spec-pair.sh [OUT]
#   MOE=1 bench/spec-pair.sh [OUT]
OUT="${1:-bench-out-pair}"
source "$(dirname "$0")/pair-env.sh"
mkdir -p "$OUT"
common=(-m "$T" -t 2 --prompts bench/prompts/code-completion.jsonl -n 128 --max-prompts 20 -r 1)
fixed8=(--sweep adaptive=0 --sweep cost=0 --spec-draft-p-min 0 --sweep n-max=8)
sampled=(--temp 0.8 --top-p 0.95)
# What a pass of k rows costs against one: the bound every speed-up below is measured against.
$B bench --plain -m "$T" -t 2 -r 2 --prefill 128 --decode 32 --json >"$OUT/pass-costs.json"
# DSpark: the cut schedule (cost=0: every block verified whole) and the cost schedule.
$B bench --spec "${common[@]}" --spec-type draft-dspark -md $DS --sweep cost=0,1 --sweep n-max=8 -o "$OUT/dspark"
# The draft model and EAGLE-3: fixed 8 tokens and adaptive.
$B bench --spec "${common[@]}" --spec-type draft-simple -md $DM --sweep adaptive=0,1 --sweep cost=0 \
    --spec-draft-p-min 0 --sweep n-max=8 -o "$OUT/draft"
$B bench --spec "${common[@]}" --spec-type draft-eagle3 -md $E3 --sweep adaptive=0,1 --sweep cost=0 \
    --spec-draft-p-min 0 --sweep n-max=8 -o "$OUT/eagle3"
# Sampling: rejection sampling with sampled drafts.
$B bench --spec "${common[@]}" "${sampled[@]}" --spec-type draft-dspark -md $DS --sweep cost=1 --sweep n-max=8 -o "$OUT/dspark-t08"
$B bench --spec "${common[@]}" "${sampled[@]}" --spec-type draft-simple -md $DM --sweep adaptive=1 --sweep n-max=8 -o "$OUT/draft-t08"
$B bench --spec "${common[@]}" "${sampled[@]}" --spec-type draft-eagle3 -md $E3 --sweep adaptive=1 --sweep n-max=8 -o "$OUT/eagle3-t08"
# Serving: plain and speculative requests on one server, prompt cache off so both pay the same
# prefill.
for d in "draft-simple -md $DM" "draft-eagle3 -md $E3"; do
  name=$(echo "$d" | cut -d' ' -f1)
  $B bench --serve start --serve-args "-m $T --spec-type $d --spec-adaptive --spec-draft-n-max 8 --parallel 32 -t 2 --no-cache-prompt" \
      --serve-concurrency 1,8,32 --serve-max-tokens 128 --serve-out "$OUT/serve-$name"
done
if [ "${MOE:-0}" = 1 ]; then
  make --no-print-directory bench-models-moe >/dev/null
  TM=$M/ref-target-moe-Q4_K_M.gguf
  $B bench --plain -m "$TM" -t 2 --prefill 64 --decode 32 --json >"$OUT/moe-pass-costs.json"
  $B bench --spec -m "$TM" -t 2 --prompts bench/prompts/code-completion.jsonl -n 128 --max-prompts 20 -r 1 \
      --spec-type draft-dspark -md $M/ref-dspark-moe-Q8_0.gguf --sweep cost=0,1 --spec-draft-p-min 0 --sweep n-max=3,8 \
      -o "$OUT/moe-dspark"
fi
