#!/usr/bin/env bash
# KV cache types at a long context, as reported in docs/performance.md (Q8_0 KV cache): a
# random-weight Qwen3-0.6B-shape model (Q5_K, written by `dspark synth`), 4,096 tokens of prompt,
# then decode and verification passes, with the F16 and the Q8_0 cache in alternating runs (a
# shared host's speed drifts between phases: compare within a pair). Results go to $OUT (default
# bench-out-kv/): one JSON per run, and the lines of each run on stdout.
#   bench/kv-cache.sh [OUT] [PAIRS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/bin/dspark
OUT="${1:-bench-out-kv}"
PAIRS="${2:-2}"
MODEL="$OUT/qwen3-0.6b-q5k.gguf"
mkdir -p "$OUT"
[ -f "$MODEL" ] || $B synth qwen3-0.6b "$MODEL" --vocab tests/data/vocab/ggml-vocab-qwen2.gguf --type Q5_K
for pair in $(seq 1 "$PAIRS"); do
  for ct in f16 q8_0; do
    $B bench --plain -m "$MODEL" -t 2 --prefill 4096 --decode 32 --cache-type "$ct" -r 1 --json > "$OUT/$ct-$pair.json" 2>/dev/null
  done
done
# Summarised after the runs (an interpreter starting beside a run would compete with its threads).
python3 - "$OUT" "$PAIRS" <<'PY'
import json, sys
out, pairs = sys.argv[1], int(sys.argv[2])
for pair in range(1, pairs + 1):
    for ct in ("f16", "q8_0"):
        j = json.load(open(f"{out}/{ct}-{pair}.json"))
        v = j["verify_ms"]
        print(f"pair {pair} {ct:5s} KV {j['kv_cache_bytes'] / 2**20:6.1f} MiB | prefill {j['prefill_tok_s']:6.1f} tok/s | "
              f"decode {j['decode_tok_s']:5.1f} tok/s | verify 1/4/9 rows {v['1']:.1f} / {v['4']:.1f} / {v['9']:.1f} ms")
PY
