"""Train the EAGLE-3 drafter (llama.cpp `eagle3` layout) against the frozen target, online, with
EAGLE-3's training-time test.

Per step the target runs on a batch of sequences and gives the three tapped streams (features) and
its logits. The drafter's layer is unrolled K = --ttt-steps times (Eagle3.unroll): step j is every
anchor's j-th draft row, fed the true next token and the previous step's prenorm output, so the
loss sees the states drafting produces, not only the target's. Loss: soft cross-entropy (forward
KL up to the teacher's entropy) of step j's distribution to the target's distribution of the token
it predicts (x_{t+j+2}), steps weighted --step-decay^j, each step a mean over its valid rows.
Logged per step: the soft CE, KL and top-1 agreement with the target's argmax (what greedy
verification accepts).

Data: --data corpus   random train-split windows, every position supervised;
      --data DIR[,..] target-generated sequences (gen_target_data.py): only rows predicting a
                      generated token (or the first one) are in the loss.
Resumable like the other trainers ($DSPARK_TRAIN_DIR/eagle3/ckpt.pt).

    nice -n 19 /usr/bin/python3 -m dspark_train train-eagle3 --data $DSPARK_TRAIN_DIR/target-gen-greedy --resume
    /usr/bin/python3 -m dspark_train export-eagle3
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import teacher as teacher_mod
from . import trainutil as tu
from .eagle3_model import Eagle3, Eagle3Config
from .paths import TARGET_GGUF, train_dir
from .target_data import Data


def tap_ids(target_layers):
    """Qwen3.hidden_states tap ids of GGUF target_layers: layer L's input = layer L-1's output."""
    return tuple(l - 1 for l in target_layers)


def target_features(target, x, target_layers):
    """(final pre-norm state [B, T, E_t], features [B, T, 3 E_t]) of the frozen target."""
    ids = tap_ids(target_layers)
    last, tapped = target.hidden_states(x, taps=ids)
    return last, torch.cat([tapped[i] for i in ids], dim=-1)


def ttt_forward(drafter, target, x, loss_mask, n_steps, step_decay=0.8, metrics=True):
    """x [B, T] ids, loss_mask [B, T] bool (positions whose token may be predicted). Returns
    (loss, metrics). Step j's row for anchor t predicts x_{t+j+2}: its teacher is the target's
    distribution at position t+j+1; it counts when t+j+2 < T and loss_mask[t+j+2]. Only the rows
    that count go through the LM head, and steps >= 1 run only for anchors with such a row (with
    generated data, not for the prompt's: a quarter of their cost). metrics=False: the loss only
    (the per-step statistics cost a few passes over the vocabulary)."""
    B, T = x.shape
    dev = x.device
    embd = target.tok_embd.weight  # our targets tie embedding and LM head
    wdt = drafter.fc.weight.dtype
    with torch.no_grad():
        last, feats = target_features(target, x, drafter.c.target_layers)
        t_logp = F.log_softmax(target.logits_from_hidden(last).float(), -1).view(B * T, -1)  # row i predicts x_{i+1}
        t_p = t_logp.exp()
        if metrics:
            t_ent = -(t_p * t_logp).sum(-1)
            t_top = t_logp.argmax(-1)
        del t_logp
    t = torch.arange(T, device=dev)

    def valid_rows(j, anchors):
        """[B, A] bool: anchor anchors[a]'s step-j row counts."""
        lab = anchors + j + 2
        return (lab < T)[None, :] & loss_mask[:, lab.clamp(max=T - 1)]

    later = torch.zeros(B, T, dtype=torch.bool, device=dev)
    for j in range(1, n_steps):
        later |= valid_rows(j, t)
    anchors = later.any(0).nonzero().squeeze(1)
    hs = drafter.unroll(embd, x, drafter.encode(feats.to(wdt)), n_steps, anchors)
    loss = torch.zeros((), device=dev)
    wsum = 0.0
    ce_k, kl_k, acc_k, n_k = [], [], [], []
    for j, h in enumerate(hs):
        at = t if j == 0 else anchors
        valid = valid_rows(j, at)                                                 # [B, A]
        bi, ai = valid.nonzero(as_tuple=True)
        teach = bi * T + at[ai] + j + 1                                           # the target's row
        z = drafter.logits(h[bi, ai], embd)
        ce = tu.SoftCE.apply(z, t_p[teach])
        n = max(1, len(bi))
        ce_mean = ce.sum() / n
        w = step_decay ** j
        loss = loss + w * ce_mean
        wsum += w
        n_k.append(len(bi))
        if metrics:
            with torch.no_grad():
                ce_k.append(ce_mean.item())
                kl_k.append((ce - t_ent[teach]).sum().item() / n)
                acc_k.append((z.argmax(-1) == t_top[teach]).sum().item() / n)
    loss = loss / wsum
    # Greedy acceptance in expectation if the steps' hits were independent: 1 + sum_k prod_{i<=k} acc_i.
    tau, run = 1.0, 1.0
    for a in acc_k:
        run *= a
        tau += run
    return loss, {"ce_at_k": [round(v, 4) for v in ce_k], "kl_at_k": [round(v, 4) for v in kl_k],
                  "acc_at_k": [round(v, 4) for v in acc_k], "rows_at_k": n_k, "tau_est": round(tau, 3)}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", default=str(TARGET_GGUF), help="target GGUF or training checkpoint")
    ap.add_argument("--data", default="corpus",
                    help="'corpus', or shard directories from gen_target_data.py (comma-separated: pooled)")
    ap.add_argument("--init", default=None, help="start from this checkpoint's weights (fresh optimizer and schedule)")
    ap.add_argument("--out", default=None, help="run directory (default $DSPARK_TRAIN_DIR/eagle3)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--ttt-steps", type=int, default=5, help="draft rows unrolled per anchor (training-time test)")
    ap.add_argument("--step-decay", type=float, default=0.8, help="loss weight of unrolled step j: decay^j")
    ap.add_argument("--target-layers", default="2,5,7",
                    help="eagle3.target_layers: the target's stream entering these layers (0 = embeddings)")
    ap.add_argument("--n-embd", type=int, default=0, help="draft width (default and only choice: the target's, "
                    "whose embedding table the drafter shares)")
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-head-kv", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--n-ff", type=int, default=1024)
    ap.add_argument("--norm-before-fc", action="store_true", help="RMSNorm the features before fc (eagle3.1)")
    ap.add_argument("--norm-before-residual", action="store_true", help="the residual adds hidden_norm(g), not g")
    tu.add_run_args(ap, lr=6e-4, seed=42)
    ap.add_argument("--min-lr-frac", type=float, default=0.05, help="cosine schedule's floor, a fraction of --lr")
    ap.add_argument("--warmup-frac", type=float, default=0.03)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in this run")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    out = Path(a.out) if a.out else train_dir() / "eagle3"
    out.mkdir(parents=True, exist_ok=True)
    dev, amp = tu.setup_device(a.threads, a.dtype)
    tu.seed_all(a.seed)
    # CPU: a bf16 teacher and a pure-bf16 replica of the drafter (trainutil.LowPrecisionReplica);
    # CUDA: fp32 weights under autocast.
    cpu_bf16 = amp is not None and dev.type == "cpu"
    target = teacher_mod.load_target(a.teacher, amp if cpu_bf16 else None).to(dev)
    tc = target.c
    if a.n_embd and a.n_embd != tc.n_embd:
        raise SystemExit(f"--n-embd {a.n_embd}: the drafter embeds with the target's table, {tc.n_embd} wide")
    cfg = Eagle3Config(vocab_size=tc.vocab_size, n_embd=tc.n_embd, n_head=a.n_head, n_head_kv=a.n_head_kv,
                       head_dim=a.head_dim, n_ff=a.n_ff, n_ctx=tc.n_ctx, rope_base=tc.rope_base,
                       norm_eps=tc.norm_eps, target_n_embd=tc.n_embd,
                       target_layers=[int(v) for v in a.target_layers.split(",")],
                       norm_before_fc=a.norm_before_fc, norm_before_residual=a.norm_before_residual)
    assert all(0 <= l <= tc.n_layer for l in cfg.target_layers), f"target_layers beyond 0..{tc.n_layer}"
    assert a.seq_len + a.ttt_steps <= tc.n_ctx
    ckpt_path = out / "ckpt.pt"
    cfg, model, opt, step = tu.init_or_resume_drafter(Eagle3, Eagle3Config, cfg, a.init, ckpt_path, a.resume, a.lr, dev)
    print(f"eagle3 drafter {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params {cfg}", flush=True)
    data = Data(a.data, a.seq_len, a.batch, a.seed)
    log = tu.CsvLog(out / "losses.csv", ["step", "loss", "ce_at_k", "kl_at_k", "acc_at_k", "tau_est", "lr", "time"])

    def save(step, tokens):
        tu.save_checkpoint(ckpt_path, {"config": cfg.to_dict(), "model": model.state_dict(),
                                       "optimizer": opt.state_dict(), "rng": tu.rng_state(), "step": step,
                                       "args": vars(a), "teacher": a.teacher, "data": a.data})

    loop = tu.TrainLoop(a, model=model, opt=opt, dev=dev, amp=amp, save=save, where=ckpt_path)

    warmup = max(1, int(a.warmup_frac * a.steps))
    while loop.running(step, a.steps):
        lr = tu.cosine_lr(step, a.lr, a.lr * a.min_lr_frac, warmup, a.steps)
        x, m = data(step)
        x, m = x.to(dev), m.to(dev)
        loop.begin(lr)
        logging = (step + 1) % a.log_every == 0 or step + 1 == a.steps
        loss, met = loop.forward(ttt_forward, target, x, m, a.ttt_steps, a.step_decay, logging)
        loop.update(loss)
        step += 1
        if logging:
            log.row(step=step, loss=f"{loss.item():.4f}", ce_at_k=json.dumps(met["ce_at_k"]),
                    kl_at_k=json.dumps(met["kl_at_k"]), acc_at_k=json.dumps(met["acc_at_k"]),
                    tau_est=met["tau_est"], lr=f"{lr:.2e}", time=int(time.time()))
            print(f"step {step}/{a.steps} loss {loss.item():.3f} kl@k {met['kl_at_k']} acc@k {met['acc_at_k']} "
                  f"tau_est {met['tau_est']:.2f} lr {lr:.1e} {loop.steps_per_min():.1f} steps/min", flush=True)
        if loop.end(step):
            break
    return loop.finish(step, None, log)


if __name__ == "__main__":
    sys.exit(main())
