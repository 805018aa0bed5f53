"""Distil the draft model (qwen3, 2 layers x 192) from the target, for draft-simple speculation.

Loss: KL(p_target || p_draft) per position on train-split windows (equivalently cross-entropy to
the target's soft distribution), plus --hard-weight x CE to the data. Matching the target's
distribution, not the data, is what raises acceptance. The target runs frozen in bf16.
Resumable like train_target.py ($DSPARK_TRAIN_DIR/draft/ckpt.pt).

--data DIR mixes in target-generated sequences (gen_target_data.py): a --gen-frac share of the steps
distils on the target's own continuations (the states speculation meets), the rest on corpus
windows. --init warm-starts from another run's weights with a fresh optimizer and schedule.

    nice -n 19 /usr/bin/python3 -m dspark_train train-draft --teacher models/ref-target.gguf --resume
    nice -n 19 /usr/bin/python3 -m dspark_train train-draft --init $DSPARK_TRAIN_DIR/draft/ckpt.pt \
        --out $DSPARK_TRAIN_DIR/draft-gen --data $DSPARK_TRAIN_DIR/target-gen --lr 1e-3 --resume
    /usr/bin/python3 -m dspark_train export-draft
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import teacher as teacher_mod
from . import tokenizer as tok
from . import trainutil as tu
from .model import Qwen3, Qwen3Config
from .paths import TARGET_GGUF, train_dir
from .target_data import load_generated
from .train_target import batch_for_step, evaluate

DRAFT_CONFIG = dict(n_layer=2, n_embd=192, n_head=3, n_head_kv=1, head_dim=64, n_ff=512)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default=str(TARGET_GGUF), help="target GGUF or training checkpoint")
    ap.add_argument("--out", default=None, help="run directory (default $DSPARK_TRAIN_DIR/draft)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--total-tokens", type=float, default=6e6)
    ap.add_argument("--tokens-per-step", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--long-every", type=int, default=4)
    tu.add_run_args(ap, lr=2e-3, seed=4321)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--hard-weight", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--config", default=None, help="JSON of draft Qwen3Config overrides")
    ap.add_argument("--data", default="corpus", help="'corpus' or a gen_target_data.py shard directory to mix in")
    ap.add_argument("--gen-frac", type=float, default=0.5, help="share of steps on --data DIR sequences")
    ap.add_argument("--init", default=None, help="start from this checkpoint's weights (fresh optimizer)")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    out = Path(a.out) if a.out else train_dir() / "draft"
    out.mkdir(parents=True, exist_ok=True)
    dev, amp = tu.setup_device(a.threads, a.dtype)
    tu.seed_all(a.seed)
    target = teacher_mod.load_target(a.teacher, amp if dev.type == "cpu" else None).to(dev)
    tc = target.c
    cfg = Qwen3Config(**{**dict(vocab_size=tc.vocab_size, n_ctx=tc.n_ctx, rope_base=tc.rope_base,
                                norm_eps=tc.norm_eps), **DRAFT_CONFIG, **(json.loads(a.config) if a.config else {})})
    if a.init:
        init = tu.load_checkpoint(Path(a.init))
        if init is None:
            raise SystemExit(f"--init {a.init}: no checkpoint there")
        cfg = Qwen3Config(**init["config"])
    model = Qwen3(cfg).to(dev)
    if a.init:
        model.load_state_dict(init["model"])
        print(f"initialised from {a.init} (step {init['step']})", flush=True)
    opt = tu.make_adamw(model, a.lr, a.weight_decay)
    step, tokens = 0, 0
    ckpt_path = out / "ckpt.pt"
    restored = tu.resume_qwen3(ckpt_path, a.lr, a.weight_decay, dev) if a.resume else None
    if restored is not None:
        cfg, model, opt, step, tokens = restored
        print(f"resumed from {ckpt_path}: step {step}", flush=True)
    train, _ = tok.load_cache("train")
    val, val_chars = tok.load_cache("val")
    gen, gen_prompt = load_generated(a.data) if a.data != "corpus" else (None, 0)
    print(f"draft {model.num_params() / 1e6:.2f}M params {cfg}; teacher {a.teacher}", flush=True)

    total_steps = int(a.total_tokens // a.tokens_per_step)
    log = tu.CsvLog(out / "losses.csv", ["step", "tokens", "loss", "kl", "ce", "lr", "tok_per_s", "time"])
    vlog = tu.CsvLog(out / "val.csv", ["step", "tokens", "val_nats_per_token", "val_nats_per_char", "time"])
    prog = tu.Progress(total_steps * a.tokens_per_step)

    def save(step, tokens):
        tu.save_checkpoint(ckpt_path, {
            "config": cfg.to_dict(), "model": model.state_dict(), "optimizer": opt.state_dict(),
            "rng": tu.rng_state(), "step": step, "tokens": tokens, "args": vars(a)})

    loop = tu.TrainLoop(a, model=model, opt=opt, dev=dev, amp=amp, save=save, where=ckpt_path)
    while loop.running(step, total_steps):
        rng = np.random.default_rng([a.seed, step, 1])
        weights = None
        if gen is not None and rng.random() < a.gen_frac:
            T = gen.shape[1] - 1
            B = max(1, a.tokens_per_step // T)
            x = torch.from_numpy(gen[rng.integers(0, len(gen), size=B)]).to(dev)
            weights = torch.zeros(B, T, device=dev)
            weights[:, gen_prompt - 1:] = 1.0  # the target's continuation (from the last prompt token on)
        else:
            long = a.long_every > 0 and step % a.long_every == a.long_every - 1
            T = cfg.n_ctx if long else a.seq_len
            B = max(1, a.tokens_per_step // T)
            x = batch_for_step(train, step, a.seed, T, B).to(dev)
        lr = tu.cosine_lr(step, a.lr, a.min_lr, a.warmup_steps, total_steps)
        with torch.no_grad(), tu.autocast(dev, amp if dev.type == "cuda" else None):
            t_logp = F.log_softmax(target(x[:, :-1]).float(), -1)
        loop.begin(lr)
        logits = loop.forward(lambda m: m(x[:, :-1]))
        d_logp = F.log_softmax(logits.float(), -1)
        kl_pos = (t_logp.exp() * (t_logp - d_logp)).sum(-1)
        kl = kl_pos.mean() if weights is None else (kl_pos * weights).sum() / weights.sum()
        ce = F.nll_loss(d_logp.view(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
        loss = kl + a.hard_weight * ce
        loop.update(loss)
        step += 1
        tokens += B * T
        line = prog.update(step, tokens, loss.item(), lr)
        if step % a.log_every == 0:
            log.row(step=step, tokens=tokens, loss=f"{loss.item():.4f}", kl=f"{kl.item():.4f}",
                    ce=f"{ce.item():.4f}", lr=f"{lr:.3e}", tok_per_s=f"{prog.tok_per_s(tokens):.0f}",
                    time=int(time.time()))
            if line:
                print(line + f" kl {kl.item():.3f}", flush=True)
        if step % a.eval_every == 0 or step == total_steps:
            vt, vc = evaluate(model, val, val_chars, dev, None, cfg.n_ctx)
            vlog.row(step=step, tokens=tokens, val_nats_per_token=f"{vt:.4f}", val_nats_per_char=f"{vc:.4f}",
                     time=int(time.time()))
            print(f"eval step {step}: val {vt:.4f} nats/token", flush=True)
        if loop.end(step, tokens):
            break
    return loop.finish(step, tokens, log, vlog)

if __name__ == "__main__":
    sys.exit(main())
