"""Training batches from the corpus or from target-generated sequences (gen_target_data.py).

DeepSpec trains drafters on the target's own outputs: the states a drafter meets at inference are
the ones the target's continuations lead to, not the corpus's. Shared by train_dspark.py and
train_draft.py.
"""
import json
from pathlib import Path

import numpy as np
import torch

import tokenizer as tok
from train_target import batch_for_step


def load_generated(directory):
    """(sequences [n, T] int64, prompt_len) from a gen_target_data.py shard directory."""
    d = Path(directory)
    prompt_len = json.loads((d / "meta.json").read_text())["prompt_len"]
    gen = np.concatenate([np.load(p) for p in sorted(d.glob("shard-*.npy"))]).astype(np.int64)
    return gen, prompt_len


class Data:
    """Batches (x [b, T], loss_mask [b, T]) deterministic in (seed, step).

    spec 'corpus': random train-split windows of seq_len tokens, every position supervised.
    spec DIR: target-generated sequences; only generated positions (and the last prompt token,
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
