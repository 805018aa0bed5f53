"""Where the toolkit reads and writes.

Everything large or long-lived that is not committed (token caches, checkpoints, logs) lives in
DSPARK_TRAIN_DIR: by default build/train under the repository root (ignored by git, like the rest
of build/), anywhere else when the variable says so. Committed artefacts live in models/.
"""
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent  # tools/train/dspark_train
TOOLS_DIR = PACKAGE_DIR.parent                  # tools/train
REPO_ROOT = TOOLS_DIR.parent.parent
MODELS_DIR = REPO_ROOT / "models"
TRAIN_DIR = Path(os.environ.get("DSPARK_TRAIN_DIR") or REPO_ROOT / "build" / "train")

# Committed artefacts: the tokenizer and the corpus manifest pin the exact training data.
TOKENIZER_MODEL = MODELS_DIR / "ref-tokenizer.model"
MANIFEST = MODELS_DIR / "corpus-manifest.tsv"
TARGET_GGUF = MODELS_DIR / "ref-target.gguf"
DRAFT_GGUF = MODELS_DIR / "ref-draft.gguf"
DSPARK_GGUF = MODELS_DIR / "ref-dspark.gguf"
EAGLE3_GGUF = MODELS_DIR / "ref-eagle3.gguf"


def train_dir() -> Path:
    TRAIN_DIR.mkdir(parents=True, exist_ok=True)
    return TRAIN_DIR
