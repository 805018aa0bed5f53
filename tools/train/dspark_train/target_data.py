"""Training batches from the corpus or from target-generated sequences (gen_target_data.py).

DeepSpec trains drafters on the target's own outputs: the states a drafter meets at inference are
the ones the target's continuations lead to, not the corpus's. Shared by train_dspark.py and
train_draft.py.
"""
import json
from pathlib import Path

import numpy as np
import torch

from . import tokenizer as tok
from .train_target import batch_for_step


def load_generated(directories):
    """(sequences [n, T] int64, prompt_len) from gen_target_data.py shard directories (one path, or
    several joined by commas: their sequences are pooled; all must share prompt and sequence length)."""
    seqs, prompt_lens = [], set()
    for d in (Path(p) for p in str(directories).split(",") if p):
        prompt_lens.add(json.loads((d / "meta.json").read_text())["prompt_len"])
        shards = sorted(d.glob("shard-*.npy"))
        if not shards:
            raise SystemExit(f"{d}: no shard-*.npy (run gen_target_data.py first)")
        seqs += [np.load(p) for p in shards]
    if len(prompt_lens) != 1 or len({s.shape[1] for s in seqs}) != 1:
        raise SystemExit(f"{directories}: the directories differ in prompt or sequence length")
    return np.concatenate(seqs).astype(np.int64), prompt_lens.pop()


class Data:
    """Batches (x [b, T], loss_mask [b, T]) deterministic in (seed, step).

    spec 'corpus': random train-split windows of seq_len tokens, every position supervised.
    spec DIR[,DIR...]: target-generated sequences (pooled); only generated positions (and the last prompt token,
    the first anchor at inference) are in the loss mask.
    """

    def __init__(self, spec, seq_len, batch, seed):
        self.seq_len, self.batch, self.seed = seq_len, batch, seed
        if spec == "corpus":
            self.train, _ = tok.load_cache("train")
            self.gen = None
        else:
            self.gen, self.prompt_len = load_generated(spec)
            assert self.gen.shape[1] <= seq_len + 1, "sequences longer than --seq-len"

    def __call__(self, step):
        if self.gen is None:
            x = batch_for_step(self.train, step, self.seed, self.seq_len - 1, self.batch)
            return x, torch.ones_like(x, dtype=torch.bool)
        rng = np.random.default_rng([self.seed, step])
        rows = rng.integers(0, len(self.gen), size=self.batch)
        x = torch.from_numpy(self.gen[rows])
        m = torch.zeros_like(x, dtype=torch.bool)
        m[:, self.prompt_len:] = True
        m[:, self.prompt_len - 1] = True  # the last prompt token is the first anchor (as at inference)
        return x, m
