"""Train the DeepSeek-architecture reference model (deepseek2: MLA + mixture of experts with a shared
expert, DeepSeek-V3 style, and one MTP block) on the train split of the corpus.

Loss per step: trunk cross-entropy + lambda · MTP cross-entropy (the MTP row q reads (x_q, h_{q-1}),
h the trunk's normed output, h_{-1} = 0, and predicts x_{q+1}, as llama.cpp's draft-mtp runs it;
deepseek_model.py) + alpha · the sequence-wise balance loss. lambda is --mtp-lambda (DeepSeek-V3:
0.3) for the first --mtp-lambda-switch of the schedule, then --mtp-lambda-late (0.1). The MTP
gradient reaches the trunk (as in DeepSeek-V3). Expert balance: DeepSeek-V3's auxiliary-loss-free
selection bias (exp_probs_b, b_i += --bias-update-rate · sign(mean load - load_i) per MoE block after
each step; 0 turns it off) plus the small sequence-wise balance loss (--balance-alpha, V3: 1e-4).
The rate is 1e-2, not V3's 1e-3: V3 trains ~10^5 steps, this run a few thousand, and at 1e-3 a
40-step smoke run (full model) had half the experts of the deeper blocks idle and one taking ~50% of
the choices (max_load 7-8 of at most 8); at 1e-2 max_load fell to ~4 within 60 steps, same loss.

Data, schedule, precision and checkpoints as train-target: random train-split windows of --seq-len
(every --long-every-th step n_ctx long), a cosine schedule over --total-tokens, the batch of step s a
pure function of (seed, s); ckpt.pt (model with the selection biases, optimizer, RNG, step, tokens)
every --ckpt-minutes and on SIGTERM/SIGINT (exit status 3), --resume continues exactly. Every
--eval-every steps: the trunk's validation loss on the whole val split (nats/token and /char) and
the MTP block's loss, top-1 accuracy and top-1 agreement with the trunk (val.csv).
losses.csv: step, tokens, loss (trunk CE), mtp_loss, balance, max_load (the busiest expert's share of
the routed choices over the mean share, worst MoE block), lr, tok/s.

    nice -n 19 /usr/bin/python3 -m dspark_train train-deepseek --resume      # $DSPARK_TRAIN_DIR/deepseek
    /usr/bin/python3 -m dspark_train export-deepseek
"""
import argparse
import json
import sys
from pathlib import Path


from . import tokenizer as tok
from . import trainutil as tu
from .deepseek_model import Deepseek2, DeepseekConfig
from .export_deepseek import evaluate
from .paths import train_dir
from .train_target import batch_for_step


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="run directory (default $DSPARK_TRAIN_DIR/deepseek)")
    ap.add_argument("--resume", action="store_true", help="continue from <out>/ckpt.pt if it exists")
    ap.add_argument("--total-tokens", type=float, default=24e6, help="length of the cosine schedule")
    ap.add_argument("--tokens-per-step", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=256, help="sequence length of most steps")
    ap.add_argument("--long-every", type=int, default=4,
                    help="every Nth step uses n_ctx-long sequences so all positions are trained (0: never)")
    tu.add_run_args(ap, lr=1e-3, seed=1234)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--mtp-lambda", type=float, default=0.3, help="MTP loss weight (DeepSeek-V3: 0.3, then 0.1)")
    ap.add_argument("--mtp-lambda-late", type=float, default=0.1, help="MTP loss weight after the switch")
    ap.add_argument("--mtp-lambda-switch", type=float, default=0.7,
                    help="fraction of the schedule's steps after which --mtp-lambda-late applies")
    ap.add_argument("--bias-update-rate", type=float, default=1e-2,
                    help="aux-loss-free balancing: selection-bias step per update (0: off; DeepSeek-V3: 1e-3 over "
                         "~10^5 steps, ours is 10x for a run of a few thousand steps)")
    ap.add_argument("--balance-alpha", type=float, default=1e-4, help="weight of the sequence-wise balance loss")
    ap.add_argument("--eval-every", type=int, default=250, help="steps between validation passes")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in this run (tests)")
    ap.add_argument("--config", default=None, help="JSON of DeepseekConfig overrides (tests use a tiny model)")
    return ap.parse_args(argv)


def mtp_lambda(a, step, total_steps):
    return a.mtp_lambda if step < a.mtp_lambda_switch * total_steps else a.mtp_lambda_late


def main(argv=None):
    a = parse_args(argv)
    out = train_dir() / "deepseek" if a.out is None else Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev, amp = tu.setup_device(a.threads, a.dtype)
    tu.seed_all(a.seed)

    cfg = DeepseekConfig(**(json.loads(a.config) if a.config else {}))
    step, tokens = 0, 0
    ckpt_path = out / "ckpt.pt"
    ck = tu.load_checkpoint(ckpt_path) if a.resume else None
    if ck is not None:
        cfg = DeepseekConfig(**ck["config"])
    model = Deepseek2(cfg)
    if ck is not None:
        model.load_state_dict(ck["model"])
    model.to(dev)
    opt = tu.make_adamw(model, a.lr, a.weight_decay)
    if ck is not None:
        opt.load_state_dict(ck["optimizer"])
        tu.set_rng_state(ck["rng"])
        step, tokens = ck["step"], ck["tokens"]
        print(f"resumed from {ckpt_path}: step {step}, {tokens / 1e6:.2f}M tokens", flush=True)

    train, _ = tok.load_cache("train")
    val, val_chars = tok.load_cache("val")
    pc = model.param_counts()
    print(f"model {pc['total'] / 1e6:.2f}M params ({pc['active'] / 1e6:.2f}M active), MTP block "
          f"{pc['mtp_total'] / 1e6:.2f}M ({pc['mtp_active'] / 1e6:.2f}M active); {cfg}; train {len(train)} tokens; "
          f"device {dev}, amp {amp}", flush=True)

    total_steps = int(a.total_tokens // a.tokens_per_step)
    log = tu.CsvLog(out / "losses.csv", ["step", "tokens", "loss", "mtp_loss", "balance", "max_load", "lr",
                                         "mtp_lambda", "tok_per_s", "seq_len", "time"])
    vlog = tu.CsvLog(out / "val.csv", ["step", "tokens", "val_nats_per_token", "val_nats_per_char",
                                       "mtp_val_nats_per_token", "mtp_top1_acc", "mtp_top1_agree", "time"])
    def save(step, tokens):
        tu.save_checkpoint(ckpt_path, {
            "config": cfg.to_dict(), "model": model.state_dict(), "optimizer": opt.state_dict(),
            "rng": tu.rng_state(), "step": step, "tokens": tokens, "args": vars(a)})

    def step_fn(forward, x, step):
        logits, mtp_logits, aux = forward(x[:, :-1])
        lam = mtp_lambda(a, step, total_steps)
        y = x[:, 1:].reshape(-1)
        loss = tu.HardCE.apply(logits.reshape(-1, cfg.vocab_size), y)
        total = loss
        mtp_loss = None
        if mtp_logits is not None:
            mtp_loss = tu.HardCE.apply(mtp_logits.reshape(-1, cfg.vocab_size), y)
            total = total + lam * mtp_loss
        if "balance" in aux and a.balance_alpha > 0:
            total = total + a.balance_alpha * aux["balance"].float()

        def describe():
            load = aux["load"].float() if "load" in aux else None
            max_load = (load.max(1).values / load.mean(1)).max().item() if load is not None else 0.0
            fields = dict(mtp_loss=f"{mtp_loss.item():.4f}" if mtp_loss is not None else "",
                          balance=f"{aux['balance'].item():.4f}" if "balance" in aux else "",
                          max_load=f"{max_load:.2f}", mtp_lambda=lam)
            extra = f" mtp {mtp_loss.item():.3f}" if mtp_loss is not None else ""
            return fields, f"{extra} max_load {max_load:.2f}"

        # The selection biases follow the load of this step (aux-loss-free balancing).
        after = (lambda: model.update_expert_bias(aux["load"], a.bias_update_rate)) if "load" in aux else None
        return loss, total, describe, after

    def eval_fn(m, amp_dtype):
        ev = evaluate(m, val, val_chars, cfg.n_ctx, dev, amp_dtype)
        fields = {k: f"{ev.get(k, float('nan')):.4f}" for k in
                  ("val_nats_per_token", "val_nats_per_char", "mtp_val_nats_per_token", "mtp_top1_acc",
                   "mtp_top1_agree")}
        return fields, " ".join(f"{k} {v:.4f}" for k, v in ev.items())

    return tu.run_lm_training(a, model=model, opt=opt, dev=dev, amp=amp, train=train, n_ctx=cfg.n_ctx,
                              total_steps=total_steps, step=step, tokens=tokens, save=save, where=ckpt_path,
                              batch_fn=batch_for_step, step_fn=step_fn, eval_fn=eval_fn, log=log, vlog=vlog)

if __name__ == "__main__":
    sys.exit(main())
