# Sourced by the memory-bound pair's benchmark scripts (spec-pair.sh, tree-pair.sh): strict mode,
# the repository root, the engine binary, the pair's files (built by make bench-models if missing)
# and its drafters.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
B=build/bin/dspark
M=build/models
T=$M/ref-target-1.7b-Q4_K_M.gguf
DS=$M/ref-dspark-1.7b-Q8_0.gguf
E3=$M/ref-eagle3-1.7b-Q8_0.gguf
DM=models/ref-draft.gguf
make --no-print-directory bench-models >/dev/null
