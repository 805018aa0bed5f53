"""Export the EAGLE-3 drafter checkpoint to models/ref-eagle3.gguf (llama.cpp `eagle3` layout).

Keys (prefix eagle3.): the qwen3-style shape keys (context_length .. attention.value_length, rope,
rms eps; block_count 1), rope.dimension_count, vocab_size (the target's), target_layers (INT32: the
stream entering those target layers, as dflash.target_layers), target_hidden_size, and the two
variant flags norm_before_residual / norm_before_fc. The tokenizer is the target's (llama.cpp
compares the two vocabularies), written as export_dspark.py writes it.

Tensors (names as llama.cpp loads them; matrices F16, norms F32): fc.weight [E, 3 E_t],
enc.output_norm.weight (only with norm_before_fc), blk.0.{attn_norm, attn_norm_2, attn_q, attn_k,
attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}.weight, output_norm.weight. Wq/Wk are
written as trained: the model rotates adjacent pairs (llama.cpp's NORM RoPE, eagle3's), so no
permutation. Optional: token_embd.weight / output.weight, the drafter's own (without them
llama.cpp uses the target's), and d2t (I64, absolute target ids of a reduced draft vocabulary).
By default the drafter shares the target's embedding and head and the file has neither;
--own-embeddings copies the target's into it (a file usable with a target of another width, as
inflate writes it).

    /usr/bin/python3 -m dspark_train export-eagle3 [--ckpt $DSPARK_TRAIN_DIR/eagle3/ckpt.pt] [--own-embeddings]
"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from . import gguf_model
from . import gguf_vocab
from . import gguf_writer as gw
from . import tokenizer as tok
from . import trainutil as tu
from .eagle3_model import Eagle3Config
from .paths import EAGLE3_GGUF, TARGET_GGUF, train_dir

ARCH = "eagle3"
# Eagle3 parameter -> llama.cpp tensor
_NAMES = {
    "enc_norm.weight": "enc.output_norm.weight",
    "fc.weight": "fc.weight",
    "attn_norm.weight": "blk.0.attn_norm.weight",
    "hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "wq.weight": "blk.0.attn_q.weight",
    "wk.weight": "blk.0.attn_k.weight",
    "wv.weight": "blk.0.attn_v.weight",
    "wo.weight": "blk.0.attn_output.weight",
    "ffn_norm.weight": "blk.0.ffn_norm.weight",
    "ffn.gate.weight": "blk.0.ffn_gate.weight",
    "ffn.up.weight": "blk.0.ffn_up.weight",
    "ffn.down.weight": "blk.0.ffn_down.weight",
    "out_norm.weight": "output_norm.weight",
}


def tensor_name(param: str) -> str:
    return _NAMES[param]


def param_name(tensor: str) -> str:
    return {v: k for k, v in _NAMES.items()}[tensor]


def _f32(t):
    return t.detach().float().cpu().numpy() if torch.is_tensor(t) else np.asarray(t, dtype=np.float32)


def write_eagle3(path, state, c: Eagle3Config, sp, name="dspark-ref-eagle3", extra=None,
                 token_embd=None, output=None, d2t=None):
    """state: the Eagle3 module's state_dict. token_embd [V, E] / output [V_d, E]: the drafter's own
    embedding and LM head (written F16), d2t [V_d]: the target id of each draft-vocabulary row."""
    if d2t is not None:
        assert output is not None and len(d2t) == output.shape[0], "d2t needs the drafter's own output [V_d, E]"
    w = gw.GGUFWriter()
    w.add_str("general.architecture", ARCH)
    w.add_str("general.name", name)
    w.add_u32("general.file_type", 1)
    gguf_model.add_hparams(w, c, ARCH)
    w.add_u32(f"{ARCH}.rope.dimension_count", c.head_dim)
    w.add_u32(f"{ARCH}.vocab_size", c.vocab_size)
    w.add_array(f"{ARCH}.target_layers", gw.INT32, list(c.target_layers))
    w.add_u32(f"{ARCH}.target_hidden_size", c.target_n_embd)
    w.add_bool(f"{ARCH}.norm_before_residual", c.norm_before_residual)
    w.add_bool(f"{ARCH}.norm_before_fc", c.norm_before_fc)
    gguf_vocab.add_tokenizer(w, sp)
    for key, (vtype, value) in (extra or {}).items():
        w.add(key, vtype, value)
    if token_embd is not None:
        w.add_tensor("token_embd.weight", _f32(token_embd), gw.GGML_F16)
    for pname, t in state.items():
        arr = _f32(t)
        w.add_tensor(tensor_name(pname), arr, gw.GGML_F32 if arr.ndim == 1 else gw.GGML_F16)
    if output is not None:
        w.add_tensor("output.weight", _f32(output), gw.GGML_F16)
    if d2t is not None:
        w.add_tensor("d2t", np.asarray(d2t, dtype=np.int64), gw.GGML_I64)
    return w.write(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(train_dir() / "eagle3" / "ckpt.pt"))
    ap.add_argument("--out", default=str(EAGLE3_GGUF))
    ap.add_argument("--own-embeddings", action="store_true",
                    help="write the target's embedding table and LM head into the file (token_embd, output)")
    ap.add_argument("--target", default=None, help="the target GGUF whose tables --own-embeddings copies "
                    "(default: the checkpoint's teacher, else models/ref-target.gguf)")
    ap.add_argument("--eval-prompts", type=int, default=0,
                    help="then run eval-drafters --eagle3 on this many prompts (records offline tau in the .json)")
    a = ap.parse_args(argv)
    ck = tu.load_checkpoint(Path(a.ckpt))
    if ck is None:
        raise SystemExit(f"no checkpoint at {a.ckpt}")
    cfg = Eagle3Config(**ck["config"])
    out = Path(a.out)
    target_path = a.target or (ck.get("teacher") if str(ck.get("teacher", "")).endswith(".gguf") else None) \
        or str(TARGET_GGUF)
    tables = {}
    if a.own_embeddings:
        from . import gguf_reader
        f = gguf_reader.read(target_path)
        emb = np.asarray(f.tensors["token_embd.weight"], dtype=np.float32)
        head = np.asarray(f.tensors["output.weight"], dtype=np.float32) if "output.weight" in f.tensors else emb
        tables = {"token_embd": emb, "output": head}
    extra = {"dspark.train.steps": (gw.UINT64, ck["step"]),
             "dspark.train.teacher": (gw.STRING, os.path.basename(str(ck.get("teacher", "")))),
             "dspark.train.data": (gw.STRING, ",".join(os.path.basename(p.rstrip("/"))
                                                       for p in str(ck.get("data", "")).split(",")))}
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = write_eagle3(out, ck["model"], cfg, tok.load(), extra=extra, **tables)
    summary = {"file": out.name, "sha256": digest, "bytes": out.stat().st_size,
               "params": sum(v.numel() for v in ck["model"].values()), "config": cfg.to_dict(),
               "own_embeddings": bool(a.own_embeddings), "steps": ck["step"], "train_args": ck.get("args", {}),
               "exported": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    old = out.with_suffix(".json")
    if old.exists():  # keep notes written by hand across re-exports; the evaluation is redone below
        prev = json.loads(old.read_text())
        for k in ("notes", "tokens_all_phases"):
            if k in prev:
                summary[k] = prev[k]
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, sha256 {digest}) and {out.with_suffix('.json')}")
    if a.eval_prompts:
        from . import eval_drafters
        eval_drafters.main(["--target", target_path, "--eagle3", str(out), "--n-prompts", str(a.eval_prompts)])


if __name__ == "__main__":
    main()
