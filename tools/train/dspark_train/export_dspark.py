"""Export the DSpark drafter checkpoint to models/ref-dspark.gguf (llama.cpp `dflash` layout).

Keys and tensors follow shared/research/dspark-llamacpp.md section 1 and Appendix A:
dflash.target_layers = DeepSpec target_layer_ids + 1 (llama.cpp taps layer *inputs*),
dflash.block_size, dflash.sample_from_anchor = true (anchor-first), dflash.has_confidence_head,
tokenizer copied from the target (mask_token_id included). No token_embd / output tensors: the
drafter uses the target's tied embedding table as both.

    /usr/bin/python3 -m dspark_train export-dspark [--ckpt $DSPARK_TRAIN_DIR/dspark/ckpt.pt]
"""
import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from . import gguf_model
from . import gguf_reader
from . import gguf_vocab
from . import gguf_writer as gw
from . import tokenizer as tok
from . import trainutil as tu
from .dspark_model import DSparkConfig
from .paths import DSPARK_GGUF, train_dir

ARCH = "dflash"
_ROOT = {"fc.weight": "fc.weight", "hidden_norm.weight": "enc.output_norm.weight",
         "out_norm.weight": "output_norm.weight", "markov_w1.weight": "markov_w1.weight",
         "markov_w2.weight": "markov_w2.weight", "conf_proj.weight": "conf_proj.weight",
         "conf_proj.bias": "conf_proj.bias"}


def tensor_name(param: str) -> str:
    if param in _ROOT:
        return _ROOT[param]
    return gguf_model.tensor_name(param)  # blocks.N.* -> blk.N.* exactly as for qwen3


def write_dspark(path, state, c: DSparkConfig, sp, name="dspark-ref-dspark", extra=None):
    w = gw.GGUFWriter()
    w.add_str("general.architecture", ARCH)
    w.add_str("general.name", name)
    w.add_u32("general.file_type", 1)
    gguf_model.add_hparams(w, c, ARCH)
    w.add_array(f"{ARCH}.target_layers", gw.INT32, [l + 1 for l in c.target_layer_ids])
    w.add_u32(f"{ARCH}.block_size", c.block_size)
    w.add_bool(f"{ARCH}.sample_from_anchor", True)
    w.add_bool(f"{ARCH}.has_confidence_head", True)
    gguf_vocab.add_tokenizer(w, sp)
    for key, (vtype, value) in (extra or {}).items():
        w.add(key, vtype, value)
    for pname, t in state.items():
        arr = t.detach().float().cpu().numpy()
        # norms, the confidence head and biases stay F32 (tiny, and precision matters for calibration)
        f32 = arr.ndim == 1 or pname.startswith("conf_proj")
        w.add_tensor(tensor_name(pname), arr, gw.GGML_F32 if f32 else gw.GGML_F16)
    w.write(path)


def load_dspark(path):
    """(DSparkConfig, state_dict of float32 tensors) of a file write_dspark wrote: a warm start for
    train-dspark --init when only the GGUF is at hand."""
    f = gguf_reader.read(path)
    md = f.metadata
    if md.get("general.architecture") != ARCH:
        raise ValueError(f"{path}: architecture {md.get('general.architecture')!r}, expected {ARCH}")
    base = gguf_model.config_from_metadata(md, ARCH)
    cfg = DSparkConfig(**{**base.to_dict(), "target_layer_ids": [int(l) - 1 for l in md[f"{ARCH}.target_layers"]],
                          "block_size": int(md[f"{ARCH}.block_size"]),
                          "markov_rank": int(f.tensors["markov_w1.weight"].shape[-1]),
                          "mask_token_id": int(md["tokenizer.ggml.mask_token_id"])})
    root = {v: k for k, v in _ROOT.items()}
    state = {root.get(n) or gguf_model.param_name(n): torch.from_numpy(np.array(a, dtype=np.float32))
             for n, a in f.tensors.items()}
    return cfg, state


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(train_dir() / "dspark" / "ckpt.pt"))
    ap.add_argument("--out", default=str(DSPARK_GGUF))
    a = ap.parse_args(argv)
    ck = tu.load_checkpoint(Path(a.ckpt))
    if ck is None:
        raise SystemExit(f"no checkpoint at {a.ckpt}")
    cfg = DSparkConfig(**ck["config"])
    out = Path(a.out)
    extra = {"dspark.train.steps": (gw.UINT64, ck["step"]),
             "dspark.train.teacher": (gw.STRING, os.path.basename(str(ck.get("teacher", "")))),
             "dspark.train.data": (gw.STRING, os.path.basename(str(ck.get("data", ""))))}
    write_dspark(out, ck["model"], cfg, tok.load(), extra=extra)
    summary = {"file": out.name, "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
               "bytes": out.stat().st_size, "params": sum(v.numel() for v in ck["model"].values()),
               "config": cfg.to_dict(), "steps": ck["step"], "train_args": ck.get("args", {}),
               "exported": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB) and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
