"""Export the distilled draft model to models/ref-draft.gguf (+ .json), as export_target.py does
for the target (same qwen3 layout, val loss of the exported weights).

    /usr/bin/python3 tools/train/export_draft.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_target  # noqa: E402
from paths import DRAFT_GGUF, train_dir  # noqa: E402

if __name__ == "__main__":
    defaults = ["--ckpt", str(train_dir() / "draft" / "ckpt.pt"), "--out", str(DRAFT_GGUF),
                "--name", "dspark-ref-draft", "--n-samples", "0"]
    sys.argv[1:1] = defaults  # later command-line flags override these
    export_target.main()
