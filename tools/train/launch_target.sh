#!/usr/bin/env bash
# Start (or continue) the target training in the background, at the lowest CPU priority so the
# C++ builds sharing the machine stay responsive. Picks the right way in:
#   checkpoint in $DSPARK_TRAIN_DIR/target  -> --resume (exact continuation)
#   else models/ref-target.gguf exists      -> --init-from it (weights + token count; fresh optimizer)
#   else                                    -> a fresh run
# Extra arguments go to `dspark_train train-target`. Log: $DSPARK_TRAIN_DIR/target/train.log
set -euo pipefail
cd "$(dirname "$0")/../.."
# The same default as dspark_train/paths.py: build/train under the repository root.
TRAIN_DIR="${DSPARK_TRAIN_DIR:-$PWD/build/train}"
export PYTHONPATH="$PWD/tools/train${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$TRAIN_DIR/target"
ARGS=(--resume)
if [ ! -f "$TRAIN_DIR/target/ckpt.pt" ] && [ ! -f "$TRAIN_DIR/target/ckpt.prev.pt" ] && [ -f models/ref-target.gguf ]; then
  ARGS=(--init-from models/ref-target.gguf)
fi
if [ -f "$TRAIN_DIR/target/pid" ] && kill -0 "$(cat "$TRAIN_DIR/target/pid")" 2>/dev/null; then
  echo "already running: pid $(cat "$TRAIN_DIR/target/pid")"; exit 0
fi
nohup nice -n 19 /usr/bin/python3 -m dspark_train train-target "${ARGS[@]}" "$@" \
  >> "$TRAIN_DIR/target/train.log" 2>&1 < /dev/null &
echo $! > "$TRAIN_DIR/target/pid"
echo "started pid $! (${ARGS[*]} $*); log $TRAIN_DIR/target/train.log"
