"""The target's own continuations, the training data of the DSpark drafter (DeepSpec regenerates
its training answers with the target: the drafter must learn the target's distribution, not the
corpus's). Prompts are windows of the train split; continuations are sampled with DeepSpec's
settings (temperature 0.7, top-k 20, top-p 0.8). Written in shards, so an interrupted run
continues where it stopped.

    nice -n 19 /usr/bin/python3 tools/train/gen_target_data.py     # -> $DSPARK_TRAIN_DIR/target-gen/
"""
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode  # noqa: E402
import teacher as teacher_mod  # noqa: E402
import tokenizer as tok  # noqa: E402
import trainutil as tu  # noqa: E402
from paths import TARGET_GGUF, train_dir  # noqa: E402


def sample(logits, gen, temperature, top_k, top_p):
    """logits [B, V] -> ids [B]."""
    z = logits.float() / temperature
    v, i = z.topk(top_k, dim=-1)
    p = torch.softmax(v, -1)
    keep = (p.cumsum(-1) - p) < top_p  # smallest prefix with mass >= top_p (at least one)
    p = p * keep
    choice = torch.multinomial(p / p.sum(-1, keepdim=True), 1, generator=gen)
    return i.gather(-1, choice).squeeze(-1)


@torch.no_grad()
def generate(target, prompts, gen_len, gen, temperature, top_k, top_p):
    cache = decode.KVCache(len(target.blocks))
    logits = decode.forward_cached(target, prompts, cache)[:, -1]
    out = []
    for _ in range(gen_len):
        t = sample(logits, gen, temperature, top_k, top_p)
        out.append(t)
        logits = decode.forward_cached(target, t[:, None], cache)[:, -1]
    return torch.cat([prompts, torch.stack(out, 1)], 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default=str(TARGET_GGUF))
    ap.add_argument("--out", default=None, help="shard directory (default $DSPARK_TRAIN_DIR/target-gen)")
    ap.add_argument("--n-seqs", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen-len", type=int, default=192)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--top-p", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto")
    a = ap.parse_args()
    dev, amp = tu.setup_device(a.threads, a.dtype)
    out = Path(a.out) if a.out else train_dir() / "target-gen"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"prompt_len": a.prompt_len, "gen_len": a.gen_len, "teacher": a.teacher, "temperature": a.temperature,
            "top_k": a.top_k, "top_p": a.top_p, "seed": a.seed}
    (out / "meta.json").write_text(json.dumps(meta))
    target = teacher_mod.load_target(a.teacher, amp if dev.type == "cpu" else None)
    train, _ = tok.load_cache("train")
    for shard in range((a.n_seqs + a.batch - 1) // a.batch):
        p = out / f"shard-{shard:05d}.npy"
        if p.exists():
            continue
        rng = np.random.default_rng([a.seed, shard])
        starts = rng.integers(0, len(train) - a.prompt_len, size=a.batch)
        prompts = torch.from_numpy(np.stack([train[s:s + a.prompt_len] for s in starts]).astype(np.int64))
        gen = torch.Generator().manual_seed(a.seed * 1_000_003 + shard)
        seqs = generate(target, prompts, a.gen_len, gen, a.temperature, a.top_k, a.top_p)
        np.save(p.with_suffix(".tmp.npy"), seqs.numpy().astype(np.uint16))
        os.replace(p.with_suffix(".tmp.npy"), p)
        print(f"{p.name}: {seqs.shape[0]} sequences of {seqs.shape[1]} tokens", flush=True)


if __name__ == "__main__":
    main()
