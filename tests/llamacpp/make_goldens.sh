#!/usr/bin/env bash
# Regenerates tests/data/llamacpp: writes the tiny models of golden_models.cc and has llama.cpp's
# llama-perplexity score each on text.txt, saving its logits file (--kl-divergence-base), which
# llamacpp_golden_test compares dspark against. Needs a llama.cpp build with llama-perplexity
# (../shared/platform-notes.md: "llama.cpp as a peer"):
#   tests/llamacpp/make_goldens.sh /path/to/llama.cpp/build
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_BUILD=${1:?usage: $0 LLAMA_CPP_BUILD_DIR}
OUT=tests/data/llamacpp
PERPLEXITY=$LLAMA_BUILD/bin/llama-perplexity
[ -x "$PERPLEXITY" ] || { echo "no $PERPLEXITY" >&2; exit 1; }
cmake --build build --target llamacpp_write_models >/dev/null
build/tests/llamacpp_write_models "$OUT" >/dev/null
llama_commit=$(git -C "$LLAMA_BUILD/.." log -1 --format=%h 2>/dev/null || echo unknown)
{
  printf 'name\tppl\tppl_error\tllama_cpp\n'
  for model in "$OUT"/*.gguf; do
    name=$(basename "$model" .gguf)
    log=$(mktemp)
    # --no-repack: llama.cpp's CPU repacking takes 3-D F16 tensors (MLA's attn_k_b / attn_v_b) that
    # no backend then multiplies (GGML_ASSERT(*cur_backend_id != -1)), and a build with AMX
    # segfaults on Q4_K in some VMs; the file's own layout computes the same function.
    "$PERPLEXITY" -m "$model" -f "$OUT/text.txt" -c 512 -b 512 --chunks 1 -t 2 --no-repack \
      --kl-divergence-base "$OUT/$name.kld" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
    ppl=$(grep -o 'Final estimate: PPL = [0-9.]* +/- [0-9.]*' "$log" | awk '{print $5 "\t" $7}')
    [ -n "$ppl" ] || { cat "$log" >&2; exit 1; }
    printf '%s\t%s\t%s\n' "$name" "$ppl" "$llama_commit"
    rm -f "$log"
  done
} >"$OUT/llamacpp.tsv"
column -t "$OUT/llamacpp.tsv"
