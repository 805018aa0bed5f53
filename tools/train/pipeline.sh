#!/usr/bin/env bash
# The whole reference-model pipeline, one stage per argument (see tools/train/README.md):
#   tools/train/pipeline.sh data              corpus check + tokenizer + token caches
#   tools/train/pipeline.sh target            start/resume the target in the background
#   tools/train/pipeline.sh target-wait       wait for a background target run, then finish it here
#   tools/train/pipeline.sh export-target     models/ref-target.gguf + golden outputs + model card
#   tools/train/pipeline.sh target-data       the target's own continuations (if missing)
#   tools/train/pipeline.sh draft             distil the draft model (corpus, then target data), export
#   tools/train/pipeline.sh dspark            DSpark drafter on the target data, export (foreground)
#   tools/train/pipeline.sh eval              offline tau of both drafters
#   tools/train/pipeline.sh test              unit tests of the toolkit
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
T=tools/train
TD="${DSPARK_TRAIN_DIR:-/work/dspark-train}"
for stage in "$@"; do
  case "$stage" in
    data)
      $PY $T/corpus.py --check
      [ -f models/ref-tokenizer.model ] || $PY $T/tokenizer.py train
      $PY $T/tokenizer.py stats ;;   # builds missing or stale token caches
    target) $T/launch_target.sh ;;
    target-wait)
      # Trainers exit 3 when a signal stopped them early (checkpoint written): set -e then ends the
      # pipeline instead of exporting a half-trained model.
      if [ -f "$TD/target/pid" ] && kill -0 "$(cat "$TD/target/pid")" 2>/dev/null; then
        echo "waiting for the background target run (pid $(cat "$TD/target/pid"))"
        while kill -0 "$(cat "$TD/target/pid")" 2>/dev/null; do sleep 30; done
      fi
      nice -n 19 $PY $T/train_target.py --resume ;;
    export-target)
      $PY $T/export_target.py
      $PY $T/llama_spm.py models/ref-target.gguf val
      $PY $T/export_golden.py
      $PY $T/model_card.py ;;
    target-data)
      [ -f "$TD/target-gen/meta.json" ] || nice -n 19 $PY $T/gen_target_data.py ;;
    draft)
      nice -n 19 $PY $T/train_draft.py --resume
      nice -n 19 $PY $T/train_draft.py --init "$TD/draft/ckpt.pt" --out "$TD/draft-gen" --data "$TD/target-gen" \
        --lr 1e-3 --total-tokens 8e6 --resume
      $PY $T/export_draft.py --ckpt "$TD/draft-gen/ckpt.pt"
      $PY $T/model_card.py ;;
    dspark)
      nice -n 19 $PY $T/train_dspark.py --data "$TD/target-gen" --resume
      $PY $T/export_dspark.py
      $PY $T/model_card.py ;;
    eval)
      $PY $T/eval_drafters.py --draft models/ref-draft.gguf --dspark models/ref-dspark.gguf --n-prompts 64
      $PY $T/model_card.py ;;
    test) $PY -m unittest discover -s $T/tests -t $T ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
done
