"""Train the reference target (qwen3, ~14 M parameters) on the train split of the corpus.

Resumable: a checkpoint (model, optimizer, RNG, step, tokens) is written to
$DSPARK_TRAIN_DIR/target/ckpt.pt every --ckpt-minutes and on SIGTERM/SIGINT. The batch of step s is
a pure function of (seed, s), so the step number is the whole data cursor.

    nice -n 19 /usr/bin/python3 -m dspark_train train-target --resume          # start or continue
    /usr/bin/python3 -m dspark_train train-target --init-from models/ref-target.gguf   # warm start

--init-from loads the weights of our own exported GGUF (fresh optimizer) and continues the token
count from its `dspark.train.tokens` key: the recovery path when the train directory was lost.
"""
import argparse
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

from . import tokenizer as tok
from . import trainutil as tu
from .model import Qwen3, Qwen3Config
from .paths import train_dir


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="run directory (default $DSPARK_TRAIN_DIR/target)")
    ap.add_argument("--resume", action="store_true", help="continue from <out>/ckpt.pt if it exists")
    ap.add_argument("--init-from", default=None, help="warm start from a GGUF written by export_target.py")
    ap.add_argument("--total-tokens", type=float, default=16e6, help="length of the cosine schedule")
    ap.add_argument("--tokens-per-step", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=256, help="sequence length of most steps")
    ap.add_argument("--long-every", type=int, default=4,
                    help="every Nth step uses n_ctx-long sequences so all 1024 positions are trained (0: never)")
    tu.add_run_args(ap, lr=1e-3, seed=1234)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=250, help="steps between validation passes")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in this run (tests)")
    ap.add_argument("--config", default=None, help="JSON of Qwen3Config overrides (tests use a tiny model)")
    return ap.parse_args(argv)


def batch_for_step(data: np.ndarray, step: int, seed: int, seq_len: int, batch: int):
    """Random windows of seq_len + 1 tokens; deterministic in (seed, step)."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - seq_len - 1, size=batch)
    x = np.stack([data[s:s + seq_len + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x)


@torch.no_grad()
def evaluate(model, data: np.ndarray, n_chars: int, dev, amp, window: int):
    """Mean cross-entropy (nats/token) over the whole split in non-overlapping windows of n_ctx,
    and nats/character = total nats / characters of the split's text."""
    model.eval()
    total, count = 0.0, 0
    for s in range(0, len(data) - 1, window):
        x = torch.from_numpy(data[s:s + window + 1].astype(np.int64))[None].to(dev)
        if x.shape[1] < 2:
            break
        with tu.autocast(dev, amp):
            logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        total += loss.item()
        count += x.shape[1] - 1
    model.train()
    # Every token but the first of the stream is predicted once, so total nats cover the text.
    return total / count, total / n_chars


def main(argv=None):
    a = parse_args(argv)
    out = train_dir() / "target" if a.out is None else __import__("pathlib").Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev, amp = tu.setup_device(a.threads, a.dtype)
    tu.seed_all(a.seed)

    cfg = Qwen3Config(**(json.loads(a.config) if a.config else {}))
    model = Qwen3(cfg).to(dev)
    opt = tu.make_adamw(model, a.lr, a.weight_decay)
    step, tokens = 0, 0
    rewarm = None  # (first step, n steps): short warmup after a warm start with a fresh optimizer
    ckpt_path = out / "ckpt.pt"

    restored = tu.resume_qwen3(ckpt_path, a.lr, a.weight_decay, dev) if a.resume else None
    if restored is not None:
        cfg, model, opt, step, tokens = restored
        print(f"resumed from {ckpt_path}: step {step}, {tokens / 1e6:.2f}M tokens", flush=True)
    elif a.init_from:
        from . import gguf_model  # only needed on this path
        cfg, state, meta = gguf_model.load_qwen3(a.init_from)
        model = Qwen3(cfg).to(dev)
        model.load_state_dict(state)
        opt = tu.make_adamw(model, a.lr, a.weight_decay)
        tokens = int(meta.get("dspark.train.tokens", 0))
        step = int(meta.get("dspark.train.steps", tokens // a.tokens_per_step))
        rewarm = (step, 50)
        print(f"warm start from {a.init_from}: {tokens / 1e6:.2f}M tokens, step {step}", flush=True)

    train, _ = tok.load_cache("train")
    val, val_chars = tok.load_cache("val")
    print(f"model {model.num_params() / 1e6:.2f}M params, {cfg}; train {len(train)} tokens; "
          f"device {dev}, amp {amp}", flush=True)

    total_steps = int(a.total_tokens // a.tokens_per_step)
    log = tu.CsvLog(out / "losses.csv", ["step", "tokens", "loss", "lr", "tok_per_s", "seq_len", "time"])
    vlog = tu.CsvLog(out / "val.csv", ["step", "tokens", "val_nats_per_token", "val_nats_per_char", "time"])
    def save(step, tokens):
        tu.save_checkpoint(ckpt_path, {
            "config": cfg.to_dict(), "model": model.state_dict(), "optimizer": opt.state_dict(),
            "rng": tu.rng_state(), "step": step, "tokens": tokens, "args": vars(a)})

    def step_fn(forward, x, step):
        logits = forward(x[:, :-1])
        loss = tu.HardCE.apply(logits.reshape(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
        return loss, loss, lambda: ({}, ""), None

    def eval_fn(m, amp_dtype):
        vt, vc = evaluate(m, val, val_chars, dev, amp_dtype, cfg.n_ctx)
        return (dict(val_nats_per_token=f"{vt:.4f}", val_nats_per_char=f"{vc:.4f}"),
                f"val {vt:.4f} nats/token, {vc:.4f} nats/char")

    # Fresh Adam moments after a warm start: ramp up again instead of jumping to the scheduled lr.
    lr_scale = None if rewarm is None else (lambda s: min(1.0, (s - rewarm[0] + 1) / rewarm[1]))
    return tu.run_lm_training(a, model=model, opt=opt, dev=dev, amp=amp, train=train, n_ctx=cfg.n_ctx,
                              total_steps=total_steps, step=step, tokens=tokens, save=save, where=ckpt_path,
                              batch_fn=batch_for_step, step_fn=step_fn, eval_fn=eval_fn, log=log, vlog=vlog,
                              lr_scale=lr_scale)

if __name__ == "__main__":
    sys.exit(main())
