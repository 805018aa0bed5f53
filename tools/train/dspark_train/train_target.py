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
import time

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
    stop = tu.StopFlag()
    prog = tu.Progress(total_steps * a.tokens_per_step)
    last_ckpt = time.time()
    steps_this_run = 0

    def checkpoint():
        tu.save_checkpoint(ckpt_path, {
            "config": cfg.to_dict(), "model": model.state_dict(), "optimizer": opt.state_dict(),
            "rng": tu.rng_state(), "step": step, "tokens": tokens, "args": vars(a)})

    # On CPU, bf16 runs as a pure-bf16 replica (see trainutil.LowPrecisionReplica); on CUDA, autocast.
    replica = tu.LowPrecisionReplica(model) if (amp is not None and dev.type == "cpu") else None
    model.train()
    while step < total_steps and not stop.stop:
        long = a.long_every > 0 and step % a.long_every == a.long_every - 1
        T = cfg.n_ctx if long else a.seq_len
        B = max(1, a.tokens_per_step // T)
        x = batch_for_step(train, step, a.seed, T, B).to(dev)
        lr = tu.cosine_lr(step, a.lr, a.min_lr, a.warmup_steps, total_steps)
        if rewarm is not None:  # fresh Adam moments: ramp up again instead of jumping to the scheduled lr
            lr *= min(1.0, (step - rewarm[0] + 1) / rewarm[1])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        if replica is not None:
            replica.pull()
            logits = replica.fast(x[:, :-1])
        else:
            with tu.autocast(dev, amp):
                logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
        loss.backward()
        if replica is not None:
            replica.push_grads()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        step += 1
        steps_this_run += 1
        tokens += B * T
        lv = loss.item()
        line = prog.update(step, tokens, lv, lr)
        if step % a.log_every == 0:
            log.row(step=step, tokens=tokens, loss=f"{lv:.4f}", lr=f"{lr:.3e}",
                    tok_per_s=f"{prog.tok_per_s(tokens):.0f}", seq_len=T, time=int(time.time()))
            if line:
                print(line, flush=True)
        if step % a.eval_every == 0 or step == total_steps:
            if replica is not None:
                replica.pull()
                vt, vc = evaluate(replica.fast, val, val_chars, dev, None, cfg.n_ctx)
            else:
                vt, vc = evaluate(model, val, val_chars, dev, amp, cfg.n_ctx)
            vlog.row(step=step, tokens=tokens, val_nats_per_token=f"{vt:.4f}", val_nats_per_char=f"{vc:.4f}",
                     time=int(time.time()))
            print(f"eval step {step}: val {vt:.4f} nats/token, {vc:.4f} nats/char", flush=True)
        if time.time() - last_ckpt > a.ckpt_minutes * 60:
            checkpoint()
            last_ckpt = time.time()
        if a.max_steps and steps_this_run >= a.max_steps:
            break
    checkpoint()
    log.close()
    vlog.close()
    print(f"checkpoint {ckpt_path}: step {step}, {tokens / 1e6:.2f}M tokens"
          + (" (stopped by signal)" if stop.stop else ""), flush=True)
    return tu.EXIT_STOPPED if stop.stop else 0


if __name__ == "__main__":
    sys.exit(main())
