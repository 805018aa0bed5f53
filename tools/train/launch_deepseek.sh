#!/usr/bin/env bash
# Start (or continue) the DeepSeek-architecture reference training (deepseek2 + MTP block,
# train-deepseek) in the background, detached from the terminal (setsid nohup) at the lowest CPU
# priority so the C++ builds sharing the machine stay responsive. Always --resume: a checkpoint in
# $DSPARK_TRAIN_DIR/deepseek continues exactly, none starts a fresh run. The schedule is
# --total-tokens 24e6 (cosine; the qwen3 target reached 2.066 nats/token after 16 M phase-1 + 4 M
# phase-2 tokens, this run sees the phase-2 corpus, the whole stdlib, from the start: ~2.6 epochs of
# its 9.27 M train tokens). Extra arguments go to `dspark_train train-deepseek` (give the same ones
# on every restart: the schedule depends on them). Stop it with `kill $(cat $DSPARK_TRAIN_DIR/deepseek/pid)`:
# it checkpoints first. Then: `dspark_train export-deepseek` -> models/ref-deepseek.gguf + .json.
# Log: $DSPARK_TRAIN_DIR/deepseek/train.log (losses.csv, val.csv beside it).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The same default as dspark_train/paths.py: build/train under the repository root.
TRAIN_DIR="${DSPARK_TRAIN_DIR:-$PWD/build/train}"
export DSPARK_TRAIN_DIR="$TRAIN_DIR"
export PYTHONPATH="$PWD/tools/train${PYTHONPATH:+:$PYTHONPATH}"
OUT="$TRAIN_DIR/deepseek"
mkdir -p "$OUT"
if [ -f "$OUT/pid" ] && kill -0 "$(cat "$OUT/pid")" 2>/dev/null; then
  echo "already running: pid $(cat "$OUT/pid")"; exit 0
fi
setsid nohup nice -n 19 /usr/bin/python3 -m dspark_train train-deepseek --out "$OUT" --resume \
  --total-tokens 24e6 "$@" >> "$OUT/train.log" 2>&1 < /dev/null &
echo $! > "$OUT/pid"
# setsid made a new scheduling autogroup, and nice only orders processes within one: lower the
# group's priority too, so a build in another session keeps the CPU it asks for.
echo 19 > "/proc/$!/autogroup" 2>/dev/null || true
echo "started pid $! (--resume --total-tokens 24e6 $*); log $OUT/train.log"
