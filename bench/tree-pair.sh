#!/usr/bin/env bash
# Token trees on the memory-bound reference pair, as reported in docs/performance.md ("Side chains,
# and what trees can gain on these hosts"): the target's pass costs; each drafter drafting a fixed 8 tokens as a chain and as
# trees with every alternative verified (n-gram and DSpark also with 4-token side chains after
# their alternatives), from which bench/tree_bound.py computes the best fixed tree against the best
# fixed chain; then each drafter's adaptive schedule with and without trees, the planner choosing
# each step's shape. Builds the pair first (make bench-models). About 50 minutes on 2 cores with
# AVX2 (less where wide passes are cheaper). Run on a quiet machine; results go to $OUT (default
# bench-out-tree/):
#   bench/tree-pair.sh [OUT]
OUT="${1:-bench-out-tree}"
source "$(dirname "$0")/pair-env.sh"
mkdir -p "$OUT"
declare -A drafter=(
  [dspark]="--spec-type draft-dspark -md $DS"
  [eagle3]="--spec-type draft-eagle3 -md $E3"
  [draft]="--spec-type draft-simple -md $DM"
  [ngram]="--spec-type ngram"
)
prompts=(--prompts bench/prompts/code-completion.jsonl -t 2 -r 1)
fixed8=(--sweep adaptive=0 --sweep cost=0 --spec-draft-p-min 0 --sweep n-max=8)
$B bench --plain -m "$T" -t 2 -r 2 --prefill 128 --decode 32 --json >"$OUT/pass-costs.json"
# Fixed trees: 10 prompts, 96 tokens (a tree with side chains verifies up to 49 rows a pass).
bound=()
for name in dspark eagle3 draft ngram; do
  read -ra d <<<"${drafter[$name]}"
  if [ "$name" = dspark ] || [ "$name" = ngram ]; then
    $B bench --spec -m "$T" "${prompts[@]}" -n 96 --max-prompts 10 "${d[@]}" "${fixed8[@]}" \
        --sweep branches=0,1 --sweep branch-tail=4 -o "$OUT/fx-$name"
    $B bench --spec -m "$T" "${prompts[@]}" -n 96 --max-prompts 10 "${d[@]}" "${fixed8[@]}" \
        --sweep branches=2 -o "$OUT/fx-$name-2"
    bound+=("$name=$OUT/fx-$name.json,$OUT/fx-$name-2.json")
  else
    $B bench --spec -m "$T" "${prompts[@]}" -n 96 --max-prompts 10 "${d[@]}" "${fixed8[@]}" \
        --sweep branches=0,1,2 -o "$OUT/fx-$name"
    bound+=("$name=$OUT/fx-$name.json")
  fi
done
/usr/bin/python3 bench/tree_bound.py --costs "$OUT/pass-costs.json" "${bound[@]}" | tee "$OUT/tree-bound.md"
# The planner's trees against its chains, each drafter at its documented schedule: 20 prompts,
# 128 tokens.
for name in dspark eagle3 draft ngram; do
  read -ra d <<<"${drafter[$name]}"
  case $name in
    dspark) sched=(--sweep cost=1 --sweep n-max=8 --sweep branch-tail=4) ;;
    ngram) sched=(--sweep adaptive=1 --sweep n-max=8 --sweep branch-tail=4) ;;
    *) sched=(--sweep adaptive=1 --sweep n-max=8) ;;
  esac
  $B bench --spec -m "$T" "${prompts[@]}" -n 128 --max-prompts 20 "${d[@]}" "${sched[@]}" \
      --sweep branches=0,1,2 -o "$OUT/tree-$name"
done
