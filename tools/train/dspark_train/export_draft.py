"""Export the distilled draft model to models/ref-draft.gguf (+ .json), as export_target.py does
for the target (same qwen3 layout, val loss of the exported weights).

    /usr/bin/python3 -m dspark_train export-draft
"""
import sys

from . import export_target
from .paths import DRAFT_GGUF, train_dir


def main(argv=None):
    defaults = ["--ckpt", str(train_dir() / "draft" / "ckpt.pt"), "--out", str(DRAFT_GGUF),
                "--name", "dspark-ref-draft", "--n-samples", "0"]
    # later command-line flags override these
    export_target.main(defaults + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
