"""Train the DSpark drafter against the frozen target, online (target taps recomputed every step).

Data: --data corpus   random train-split windows, every position supervised;
      --data DIR      target-generated sequences from gen_target_data.py (DeepSpec trains on the
                      target's own outputs): only generated positions are anchors/labels.
Resumable like train_target.py ($DSPARK_TRAIN_DIR/dspark/ckpt.pt).

    nice -n 19 /usr/bin/python3 -m dspark_train train-dspark --teacher models/ref-target.gguf --resume
    /usr/bin/python3 -m dspark_train export-dspark
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

from . import export_dspark
from . import grow_draft
from . import teacher as teacher_mod
from . import tokenizer as tok
from . import trainutil as tu
from .dspark_loss import dspark_forward
from .dspark_model import DSpark, DSparkConfig
from .paths import TARGET_GGUF, train_dir
from .target_data import Data


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default=str(TARGET_GGUF), help="target GGUF or training checkpoint")
    ap.add_argument("--data", default="corpus",
                    help="'corpus', or shard directories from gen_target_data.py (comma-separated: pooled)")
    ap.add_argument("--init", default=None, help="start from this checkpoint's or dflash GGUF's weights (fresh "
                    "optimizer and schedule)")
    ap.add_argument("--grow", type=int, default=0, help="deepen the --init drafter to this many layers, the new ones "
                    "starting as the identity (grow_draft.grow: it drafts what it drafted, with room to learn more)")
    ap.add_argument("--out", default=None, help="run directory (default $DSPARK_TRAIN_DIR/dspark)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--anchors", type=int, default=48, help="anchors per sequence")
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--markov-rank", type=int, default=64)
    ap.add_argument("--target-layers", default="1,4,6", help="DeepSpec ids: output of these target layers")
    tu.add_run_args(ap, lr=6e-4, seed=42)
    ap.add_argument("--warmup-frac", type=float, default=0.04)
    ap.add_argument("--gamma", type=float, default=4.0)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in this run")
    return ap.parse_args(argv)


def warm_start(a):
    """--init (a checkpoint or a dflash GGUF), deepened to --grow layers; None without --init."""
    if not a.init:
        if a.grow:
            raise SystemExit("--grow deepens the --init drafter: give --init")
        return None
    if a.init.endswith(".gguf"):
        c, state = export_dspark.load_dspark(a.init)
        warm = {"config": c.to_dict(), "model": state, "step": 0, "source": a.init}
    else:
        warm = tu.load_warm_start(a.init)
    if a.grow:
        warm["config"], warm["model"] = grow_draft.grow(warm["config"], warm["model"], a.grow)
        warm["source"] += f" grown to {a.grow} layers"
    return warm


def main(argv=None):
    a = parse_args(argv)
    out = Path(a.out) if a.out else train_dir() / "dspark"
    out.mkdir(parents=True, exist_ok=True)
    dev, amp = tu.setup_device(a.threads, a.dtype)
    tu.seed_all(a.seed)
    # CPU: a bf16 teacher and a pure-bf16 replica of the drafter (trainutil.LowPrecisionReplica);
    # CUDA: fp32 weights under autocast.
    cpu_bf16 = amp is not None and dev.type == "cpu"
    target = teacher_mod.load_target(a.teacher, amp if cpu_bf16 else None).to(dev)
    tc = target.c
    cfg = DSparkConfig(vocab_size=tc.vocab_size, n_embd=tc.n_embd, **teacher_mod.drafter_shape(tc), n_ctx=tc.n_ctx,
                       rope_base=tc.rope_base, norm_eps=tc.norm_eps, n_layer=a.n_layer, block_size=a.block_size,
                       markov_rank=a.markov_rank, mask_token_id=tok.MASK_ID,
                       target_layer_ids=[int(v) for v in a.target_layers.split(",")])
    # DeepSpec: AdamW, weight decay 0, warmup 4 % then cosine to 0, clip 1.0.
    ckpt_path = out / "ckpt.pt"
    cfg, model, opt, step = tu.init_or_resume_drafter(DSpark, DSparkConfig, cfg, warm_start(a), ckpt_path, a.resume,
                                                      a.lr, dev)
    # The drafter trained (fresh, warm-started or resumed) must fit its target.
    assert cfg.n_embd == tc.n_embd, f"the drafter is {cfg.n_embd} wide, its target {tc.n_embd}"
    assert max(cfg.target_layer_ids) < tc.n_layer - 1, "llama.cpp cannot tap the target's last layer"
    assert a.seq_len + cfg.block_size <= tc.n_ctx
    print(f"dspark drafter {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params {cfg}", flush=True)
    data = Data(a.data, a.seq_len, a.batch, a.seed)
    log = tu.CsvLog(out / "losses.csv", ["step", "loss", "ce", "l1", "bce", "tau_prob", "conf_abs_err",
                                         "accept_at_k", "lr", "time"])

    def save(step, tokens):
        tu.save_checkpoint(ckpt_path, {"config": cfg.to_dict(), "model": model.state_dict(),
                                       "optimizer": opt.state_dict(), "rng": tu.rng_state(), "step": step,
                                       "args": vars(a), "teacher": a.teacher, "data": a.data})

    loop = tu.TrainLoop(a, model=model, opt=opt, dev=dev, amp=amp, save=save, where=ckpt_path)

    warmup = max(1, int(a.warmup_frac * a.steps))
    while loop.running(step, a.steps):
        lr = tu.cosine_lr(step, a.lr, 0.0, warmup, a.steps)
        x, m = data(step)
        x, m = x.to(dev), m.to(dev)
        gen = torch.Generator().manual_seed(a.seed * 1_000_003 + step)
        loop.begin(lr)
        loss, met = loop.forward(dspark_forward, target, x, m, a.anchors, gen, a.gamma)
        loop.update(loss)
        step += 1
        if step % a.log_every == 0 or step == a.steps:
            log.row(step=step, loss=f"{loss.item():.4f}", ce=f"{met['ce']:.4f}", l1=f"{met['l1']:.4f}",
                    bce=f"{met['bce']:.4f}", tau_prob=f"{met['tau_prob']:.3f}",
                    conf_abs_err=f"{met['conf_abs_err']:.3f}", accept_at_k=json.dumps(met["accept_at_k"]),
                    lr=f"{lr:.2e}", time=int(time.time()))
            print(f"step {step}/{a.steps} loss {loss.item():.3f} ce {met['ce']:.3f} l1 {met['l1']:.3f} "
                  f"tau_prob {met['tau_prob']:.2f} conf_err {met['conf_abs_err']:.3f} "
                  f"accept@k {met['accept_at_k']} lr {lr:.1e} {loop.steps_per_min():.1f} steps/min", flush=True)
        if loop.end(step):
            break
    return loop.finish(step, None, log)


if __name__ == "__main__":
    sys.exit(main())
