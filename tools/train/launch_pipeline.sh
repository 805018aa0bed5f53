#!/usr/bin/env bash
# Run pipeline stages one after another in the background (default: everything after the data
# step: both phases of the target and the drafters, then the evaluation; see pipeline.sh).
# Every stage resumes from its checkpoint, so after an interruption the same command continues.
#   tools/train/launch_pipeline.sh [STAGE ...]
# Log: $DSPARK_TRAIN_DIR/pipeline.log. Stop (trainers checkpoint first):
#   kill -TERM -- -$(cat $DSPARK_TRAIN_DIR/pipeline.pid)
set -euo pipefail
cd "$(dirname "$0")/../.."
# The same default as dspark_train/paths.py: build/train under the repository root.
TD="${DSPARK_TRAIN_DIR:-$PWD/build/train}"
mkdir -p "$TD"
if [ -f "$TD/pipeline.pid" ] && kill -0 "$(cat "$TD/pipeline.pid")" 2>/dev/null; then
  echo "already running: pid $(cat "$TD/pipeline.pid"); log $TD/pipeline.log"; exit 0
fi
if [ $# -eq 0 ]; then
  set -- target-wait export-target target-data draft dspark target-2 export-target target-data-2 drafters-2 eval
fi
# setsid: the pipeline leads its own process group, so one kill reaches the running trainer too.
setsid nohup tools/train/pipeline.sh "$@" >> "$TD/pipeline.log" 2>&1 < /dev/null &
echo $! > "$TD/pipeline.pid"
echo "started pid $! ($*); log $TD/pipeline.log"
