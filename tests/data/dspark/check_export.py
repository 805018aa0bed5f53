"""Cross-check: tools/train's PyTorch DSpark drafter, exported by tools/train/export_dspark.py, gives
the same drafts in the C++ drafter. Not a committed golden (the reference target's vocabulary makes
the outputs large); run it whenever the exporter or the drafter changes:

    PYTHONPATH=tools/train /usr/bin/python3 tests/data/dspark/check_export.py /tmp/dspark_export
    DSPARK_EXPORT_CHECK_DIR=/tmp/dspark_export ./build/tests/dspark_export_check

`make test` runs both (ctest: dspark_export_check, label python). The toolkit is the package
tools/train/dspark_train (on PYTHONPATH); make_golden.py sits beside this script.

It writes DIR/draft.gguf (a randomly initialised DSpark with enlarged head weights, so the Markov
bias and the confidence matter) for models/ref-target.gguf and DIR/golden.json in the format of
tests/data/dspark/golden.json, computed by DSpark.draft() (PyTorch, float32) from target taps of the
float64 reference in make_golden.py. The weights are rounded to what the GGUF stores (F16).
"""
import json
import os
import sys

import numpy as np
import torch

import make_golden  # beside this script (its folder is sys.path[0] when run as a script)
from dspark_train import export_dspark
from dspark_train import tokenizer as tok
from dspark_train.dspark_model import DSpark, DSparkConfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    target_path = os.path.join(ROOT, "models", "ref-target.gguf")
    tmd, tW = make_golden.load(target_path)
    a = "qwen3"
    cfg = DSparkConfig(vocab_size=tW["token_embd.weight"].shape[0], n_embd=tmd[f"{a}.embedding_length"],
                       n_head=tmd[f"{a}.attention.head_count"], n_head_kv=tmd[f"{a}.attention.head_count_kv"],
                       head_dim=tmd[f"{a}.attention.key_length"], n_ff=tmd[f"{a}.feed_forward_length"],
                       n_ctx=tmd[f"{a}.context_length"], rope_base=tmd[f"{a}.rope.freq_base"],
                       norm_eps=float(f"{tmd[f'{a}.attention.layer_norm_rms_epsilon']:.7g}"))
    torch.manual_seed(5)
    m = DSpark(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)  # unit-gain init: outputs far from uniform
            if name == "markov_w1.weight":
                p.mul_(p.shape[1] ** 0.5)
            if name.startswith("conf_proj"):
                p.mul_(3.0)
            if p.dim() == 2 and not name.startswith("conf_proj"):  # what the GGUF stores
                p.copy_(p.half().float())
    draft_path = os.path.join(out_dir, "draft.gguf")
    export_dspark.write_dspark(draft_path, m.state_dict(), cfg, tok.load())

    layers = [l + 1 for l in cfg.target_layer_ids]  # what the file stores
    embd = torch.tensor(np.asarray(tW["token_embd.weight"], dtype=np.float32))
    cases = []
    for prompt in ([1, 100, 2000, 37, 512, 9, 77, 3000, 45, 600, 12], [1, 250, 251]):
        n = len(prompt) - 1
        feats = np.concatenate(make_golden.target_taps(tmd, tW, prompt[:n], layers), axis=1)
        taps = torch.tensor(feats[None], dtype=torch.float32)
        toks, confs, logits = m.draft(embd, taps, prompt[-1], n)
        cases.append({"draft": "export", "prompt": prompt, "split": n // 2, "budget": cfg.block_size,
                      "tokens": toks, "confidence": confs, "biased_logits": make_golden.finite(logits.double().numpy())})
        print(f"prompt {len(prompt)} tokens -> drafts {toks} conf {np.round(confs, 3).tolist()}")
    with open(os.path.join(out_dir, "golden.json"), "w") as fh:
        json.dump({"target": target_path, "draft": draft_path, "cases": cases}, fh)


if __name__ == "__main__":
    main()
