"""dspark_train COMMAND [ARGS...]: runs one step of the toolkit (see tools/train/README.md).

    /usr/bin/python3 -m dspark_train COMMAND --help
"""
import importlib
import sys

# command -> (module, one line). Every module has main(argv); `python3 -m dspark_train.MODULE` works too.
COMMANDS = {
    "corpus": ("corpus", "corpus listing, hash split, manifest (--write-manifest, --check)"),
    "tokenizer": ("tokenizer", "SentencePiece training and token caches (train, encode, stats)"),
    "train-target": ("train_target", "train the reference target (resumable)"),
    "export-target": ("export_target", "target checkpoint -> models/ref-target.gguf (+ .json)"),
    "train-draft": ("train_draft", "distil the draft model from the target (resumable)"),
    "export-draft": ("export_draft", "draft checkpoint -> models/ref-draft.gguf (+ .json)"),
    "grow-draft": ("grow_draft", "deepen a draft checkpoint with identity-initialised layers"),
    "gen-target-data": ("gen_target_data", "the target's own continuations (PyTorch or the C++ engine)"),
    "train-dspark": ("train_dspark", "train the DSpark drafter (resumable)"),
    "export-dspark": ("export_dspark", "DSpark checkpoint -> models/ref-dspark.gguf (dflash)"),
    "train-eagle3": ("train_eagle3", "train the EAGLE-3 drafter, training-time test (resumable)"),
    "export-eagle3": ("export_eagle3", "EAGLE-3 checkpoint -> models/ref-eagle3.gguf (eagle3)"),
    "train-deepseek": ("train_deepseek", "train the DeepSeek-architecture reference (deepseek2 + MTP, resumable)"),
    "export-deepseek": ("export_deepseek", "deepseek checkpoint -> models/ref-deepseek.gguf (deepseek2 + nextn)"),
    "check-deepseek-llamacpp": ("llamacpp_deepseek", "a deepseek2 GGUF's drafts and tokens vs llama.cpp's draft-mtp"),
    "export-golden": ("export_golden", "golden outputs for the C++ tests (tests/data/golden/)"),
    "eval-drafters": ("eval_drafters", "offline acceptance (tau) of the drafters"),
    "prompts": ("prompts", "held-out prompt sets (bench/prompts/)"),
    "model-card": ("model_card", "regenerate models/README.md from models/ref-*.json"),
    "llama-spm": ("llama_spm", "llama.cpp's SPM tokenizer vs sentencepiece on a corpus split"),
    "ref-forward": ("ref_forward", "float64 numpy forward of a qwen3 or deepseek2 GGUF (prints argmaxes)"),
    "set-chat-template": ("set_chat_template", "add/replace tokenizer.chat_template in a GGUF (ChatML by default), tensors untouched"),
    "inflate": ("inflate", "grow the target (and DSpark drafter) to a real model's shape, same predictions"),
}


def usage(out):
    print(__doc__.strip().splitlines()[0], file=out)
    print("\ncommands:", file=out)
    for name, (_, what) in COMMANDS.items():
        print(f"  {name:<16} {what}", file=out)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        usage(sys.stdout)
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"dspark_train: unknown command {name!r}\n", file=sys.stderr)
        usage(sys.stderr)
        return 2
    module = importlib.import_module(f"{__package__}.{COMMANDS[name][0]}")
    sys.argv = [f"dspark_train {name}"] + argv[1:]  # argparse's prog in usage and errors
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
