#!/usr/bin/env bash
# Mixture-of-experts targets against llama.cpp, as reported in docs/performance.md: random-weight
# DeepSeek-V2-Lite (full depth, 27 blocks) and Qwen3-30B-A3B (8 of its 48 blocks, to fit 24 GB)
# in TYPE (default Q4_K_M, llama.cpp's mixture; Q4_K: every matrix), written by `dspark synth` into
# $OUT once (about 10 and 3.5 GB; 15-30 minutes on 2 cores).
# Each model: `dspark bench --plain` and `llama-bench` in alternating runs, 2 threads, prefill 512
# tokens and decode 64, then one table with the ratios, dspark's verify-k pass costs and the
# experts each pass read. Needs a llama.cpp build (../shared/platform-notes.md); on CPUs with AMX,
# build it with -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 (its AMX kernels fault in some VMs).
#   [TYPE=Q4_K] bench/moe-vs-llamacpp.sh LLAMA_CPP_BUILD_DIR [OUT] [PAIRS]
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BENCH=${1:?usage: $0 LLAMA_CPP_BUILD_DIR [OUT] [PAIRS]}/bin/llama-bench
OUT=${2:-bench-out-moe}
PAIRS=${3:-1}
TYPE=${TYPE:-Q4_K_M}
B=build/bin/dspark
mkdir -p "$OUT"
MODELS=(deepseek-v2-lite qwen3-30b-a3b)
declare -A LAYERS=([deepseek-v2-lite]="" [qwen3-30b-a3b]="--layers 8")
for m in "${MODELS[@]}"; do
  f="$OUT/$m-$TYPE.gguf"
  # shellcheck disable=SC2086
  [ -f "$f" ] || $B synth "$m" "$f" --type "$TYPE" ${LAYERS[$m]}
done
for pair in $(seq 1 "$PAIRS"); do
  for m in "${MODELS[@]}"; do
    f="$OUT/$m-$TYPE.gguf"
    $B bench --plain -m "$f" -t 2 --prefill 512 --decode 64 -r 1 --json >"$OUT/$m-$TYPE-dspark-$pair.json" 2>/dev/null
    "$LLAMA_BENCH" -m "$f" -t 2 -p 512 -n 64 -r 1 -o json >"$OUT/$m-$TYPE-llama-$pair.json" 2>/dev/null
  done
done
# Summarised after the runs (an interpreter starting beside a run would compete with its threads).
python3 - "$OUT" "$PAIRS" "$TYPE" "${MODELS[@]}" <<'PY'
import json, sys
out, pairs, typ, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
for m in models:
    for p in range(1, pairs + 1):
        d = json.load(open(f"{out}/{m}-{typ}-dspark-{p}.json"))
        runs = json.load(open(f"{out}/{m}-{typ}-llama-{p}.json"))
        l_pp = next(r["avg_ts"] for r in runs if r["n_prompt"] > 0)
        l_tg = next(r["avg_ts"] for r in runs if r["n_gen"] > 0)
        print(f"{m} {typ} (run {p}): resident {d['resident_bytes'] / 2**30:.2f} GiB, KV {d['kv_cache_bytes_per_token']:.0f} B/token")
        print(f"| | llama.cpp | dspark | ratio |\n|---|---|---|---|")
        print(f"| prefill, 512 tokens | {l_pp:.1f} tok/s | {d['prefill_tok_s']:.1f} tok/s | {d['prefill_tok_s'] / l_pp:.2f}x |")
        print(f"| decode | {l_tg:.1f} tok/s | {d['decode_tok_s']:.1f} tok/s | {d['decode_tok_s'] / l_tg:.2f}x |")
        v, e = d["verify_ms"], d.get("experts_per_block", {})
        ks = sorted(v, key=int)
        print("| rows verified | " + " | ".join(ks) + " |\n|---|" + "---|" * len(ks))
        print("| pass cost / one row | " + " | ".join(f"{v[k] / v['1']:.2f}" for k in ks) + " |")
        if e:
            print("| experts read per block | " + " | ".join(f"{e[k]:.1f}" for k in ks) + " |")
            print("| experts read / one row's | " + " | ".join(f"{e[k] / e['1']:.2f}" for k in ks) + " |")
        print()
PY
