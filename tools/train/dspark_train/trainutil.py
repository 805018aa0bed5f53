"""Pieces shared by every training script: device/precision choice, schedule, checkpoints, logs."""
import csv
import math
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch


def cpu_has_bf16() -> bool:
    try:
        return "avx512_bf16" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def setup_device(threads: int = 2, dtype: str = "auto"):
    """(device, autocast dtype or None). On CPU with AVX512-BF16, oneDNN's bf16 matmuls are ~20x
    faster than Debian's fp32 BLAS path; elsewhere on CPU we stay in fp32."""
    torch.set_num_threads(threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        dtype = "bf16" if (dev.type == "cuda" or cpu_has_bf16()) else "fp32"
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    return dev, (torch.bfloat16 if dtype == "bf16" else None)


class LowPrecisionReplica:
    """bf16 copy of an fp32 model for CPU training ("pure" bf16 with fp32 master weights).

    CPU autocast re-casts activations around every op, and those copies cost more than the bf16
    matmuls save; running the whole replica in bf16 is ~1.5x faster. The optimizer and the
    checkpoint keep the fp32 master model; gradients are copied back to it after backward.
    Norm statistics and softmax still accumulate in float32 inside the ops."""

    def __init__(self, master, dtype=torch.bfloat16):
        import copy
        self.master = master
        self.fast = copy.deepcopy(master).to(dtype)
        # Buffers (RoPE tables) stay float32: only parameters and activations go low precision.
        for mod_f, mod_m in zip(self.fast.modules(), master.modules()):
            for k, b in mod_m._buffers.items():
                if b is not None:
                    mod_f._buffers[k] = b
        self.pairs = list(zip(self.fast.parameters(), master.parameters()))

    def pull(self):
        with torch.no_grad():
            for f, m in self.pairs:
                f.copy_(m)

    def push_grads(self):
        with torch.no_grad():
            for f, m in self.pairs:
                m.grad = None if f.grad is None else f.grad.float()
                f.grad = None


def autocast(dev, amp_dtype):
    if amp_dtype is None:
        return torch.autocast(dev.type, enabled=False)
    return torch.autocast(dev.type, dtype=amp_dtype)


def seed_all(seed: int):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class SoftCE(torch.autograd.Function):
    """Per row, -sum_v p_v log softmax(z)_v = logsumexp(z) - p.z (p sums to 1), with the gradient
    softmax(z) - p written out: a few passes over the vocabulary in float32 where log_softmax, the
    product and their autograd backward take twice as many (on CPU these vocabulary-wide
    elementwise passes, not the matmuls, were most of a step)."""

    @staticmethod
    def forward(ctx, z, p):
        zf = z.float()
        lse = torch.logsumexp(zf, -1)
        ctx.save_for_backward(z, p, lse)
        return lse - (p * zf).sum(-1)

    @staticmethod
    def backward(ctx, grad):
        z, p, lse = ctx.saved_tensors
        g = (z.float() - lse[:, None]).exp_().sub_(p).mul_(grad[:, None])
        return g.to(z.dtype), None


class HardCE(torch.autograd.Function):
    """The mean over rows of logsumexp(z) - z[y] (F.cross_entropy(z.float(), y)) for logits z [N, V]
    in any float dtype and labels y [N], with the gradient (softmax(z) - onehot(y)) / N written out
    in float32: half the vocabulary-wide passes of the float copy, log_softmax, NLL and their
    autograd backward, which were a sixth of a language-model step on CPU."""

    @staticmethod
    def forward(ctx, z, y):
        zf = z.float()
        lse = torch.logsumexp(zf, -1)
        ctx.save_for_backward(z, y, lse)
        return (lse - zf.gather(-1, y[:, None]).squeeze(-1)).mean()

    @staticmethod
    def backward(ctx, grad):
        z, y, lse = ctx.saved_tensors
        g = (z.float() - lse[:, None]).exp_()
        g.scatter_add_(-1, y[:, None], torch.full_like(y[:, None], -1, dtype=g.dtype))
        return g.mul_(grad / y.shape[0]).to(z.dtype), None


def cosine_lr(step, max_lr, min_lr, warmup, total):
    if step < warmup:
        return max_lr * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * t))


def make_adamw(model, lr, wd, betas=(0.9, 0.95)):
    """AdamW with weight decay on matrices only (norm gains and the like are not decayed)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)


def rng_state():
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(s):
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])


def save_checkpoint(path: Path, obj: dict):
    """Atomic: write to a temp file, keep the previous checkpoint as .prev, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    if path.exists():
        os.replace(path, path.with_suffix(".prev.pt"))
    os.replace(tmp, path)


def load_checkpoint(path: Path):
    for p in (path, path.with_suffix(".prev.pt")):
        if p.exists():
            try:
                return torch.load(p, map_location="cpu")
            except Exception as e:  # a torn write: fall back to the previous one
                print(f"cannot read {p}: {e}", file=sys.stderr)
    return None


def add_run_args(ap, *, lr: float, seed: int) -> None:
    """The options every trainer shares (learning rate, clipping, seed, threads, precision,
    checkpoint cadence, logging); each trainer passes its own lr and seed defaults."""
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto")
    ap.add_argument("--ckpt-minutes", type=float, default=8.0)
    ap.add_argument("--log-every", type=int, default=10)


def resume_qwen3(ckpt_path: Path, lr: float, weight_decay: float, dev):
    """(config, model, optimizer, step, tokens) restored from a Qwen3 training checkpoint (with
    RNG state), or None when there is none. Shared by the target and draft-model trainers."""
    ck = load_checkpoint(ckpt_path)
    if ck is None:
        return None
    from .model import Qwen3, Qwen3Config  # here: trainutil itself stays model-agnostic

    cfg = Qwen3Config(**ck["config"])
    model = Qwen3(cfg).to(dev)
    model.load_state_dict(ck["model"])
    opt = make_adamw(model, lr, weight_decay)
    opt.load_state_dict(ck["optimizer"])
    set_rng_state(ck["rng"])
    return cfg, model, opt, ck["step"], ck["tokens"]


def load_warm_start(path):
    """The checkpoint --init names, with its path as "source"; exits when there is none."""
    warm = load_checkpoint(Path(path))
    if warm is None:
        raise SystemExit(f"--init {path}: no checkpoint there")
    return {**warm, "source": str(path)}


def init_or_resume_drafter(model_cls, cfg_cls, cfg, init, ckpt_path: Path, resume: bool, lr: float, dev):
    """A drafter to train: fresh from `cfg`, warm-started from `init` (a checkpoint path, or the dict
    {config, model, step, source} of one already loaded: its config and weights, a fresh optimizer),
    or resumed from `ckpt_path` (config, weights, optimizer, RNG and
    step). AdamW without weight decay, made after the move to `dev` (its state lives on the
    parameters' device). Returns (cfg, model, optimizer, step)."""
    warm = init if isinstance(init, dict) or not init else load_warm_start(init)
    if warm is not None:
        cfg = cfg_cls(**warm["config"])
    model = model_cls(cfg)
    if warm is not None:
        model.load_state_dict(warm["model"])
        print(f"initialised from {warm['source']} (step {warm['step']})", flush=True)
    ck = load_checkpoint(ckpt_path) if resume else None
    if ck is not None:
        cfg = cfg_cls(**ck["config"])
        model = model_cls(cfg)
        model.load_state_dict(ck["model"])
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    step = 0
    if ck is not None:
        opt.load_state_dict(ck["optimizer"])
        set_rng_state(ck["rng"])
        step = ck["step"]
        print(f"resumed from {ckpt_path}: step {step}", flush=True)
    return cfg, model, opt, step


class CsvLog:
    def __init__(self, path: Path, fields):
        self.path, self.fields = path, fields
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a", newline="")
        self.w = csv.writer(self.f)
        if new:
            self.w.writerow(fields)
            self.f.flush()

    def row(self, **kv):
        self.w.writerow([kv[k] for k in self.fields])
        self.f.flush()

    def close(self):
        self.f.close()


# Exit status of a trainer stopped by SIGTERM/SIGINT before its schedule ended (checkpoint written):
# lets tools/train/pipeline.sh tell "interrupted" from "finished" and not export a half-run.
EXIT_STOPPED = 3


class StopFlag:
    """Turns SIGTERM/SIGINT into a flag so the loop can write a checkpoint before exiting."""

    def __init__(self):
        self.stop = False
        signal.signal(signal.SIGTERM, self._set)
        signal.signal(signal.SIGINT, self._set)

    def _set(self, *_):
        self.stop = True


class Progress:
    """One line per report: tokens, loss (EMA), learning rate, tokens/s, ETA."""

    def __init__(self, total_tokens):
        self.total = total_tokens
        self.t0 = time.time()
        self.tok0 = None
        self.ema = None

    def update(self, step, tokens, loss, lr):
        if self.tok0 is None:
            self.tok0, self.t0 = tokens, time.time()
            return ""
        self.ema = loss if self.ema is None else 0.9 * self.ema + 0.1 * loss
        dt = time.time() - self.t0
        tps = (tokens - self.tok0) / max(dt, 1e-9)
        eta = (self.total - tokens) / max(tps, 1e-9)
        pct = 100.0 * tokens / self.total
        bar = "#" * int(pct / 5) + "." * (20 - int(pct / 5))
        return (f"[{bar}] {pct:5.1f}% step {step} tok {tokens / 1e6:.2f}M loss {loss:.3f} "
                f"(ema {self.ema:.3f}) lr {lr:.2e} {tps:.0f} tok/s eta {eta / 3600:.1f}h")

    def tok_per_s(self, tokens):
        if self.tok0 is None:
            return 0.0
        return (tokens - self.tok0) / max(time.time() - self.t0, 1e-9)


class TrainLoop:
    """What the loop of every trainer shares: SIGTERM/SIGINT become a flag (the run checkpoints and
    exits with EXIT_STOPPED), the forward runs on a pure-bf16 replica on CPU (LowPrecisionReplica) or
    under autocast on CUDA, the update is a clipped optimizer step at the step's learning rate, and
    save(step, tokens) runs every --ckpt-minutes and at the end; --max-steps bounds one run.

        loop = TrainLoop(a, model=..., opt=..., dev=..., amp=..., save=..., where=ckpt_path)
        while loop.running(step, total_steps):
            loop.begin(lr)
            loss = loop.forward(fn, *args)   # fn(module, *args)
            loop.update(loss)
            step += 1 ... logging ...
            if loop.end(step, tokens):
                break
        return loop.finish(step, tokens, *logs)"""

    def __init__(self, a, *, model, opt, dev, amp, save, where):
        self.a, self.model, self.opt, self.dev, self.amp = a, model, opt, dev, amp
        self.save, self.where = save, where
        self.stop = StopFlag()
        self.replica = LowPrecisionReplica(model) if (amp is not None and dev.type == "cpu") else None
        self.t0 = self.last_ckpt = time.time()
        self.steps_this_run = 0

    def running(self, step, total_steps):
        return step < total_steps and not self.stop.stop

    def begin(self, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)

    def forward(self, fn, *args):
        """fn(module, *args) on the bf16 replica (freshly copied from the master) or on the model under
        autocast."""
        if self.replica is not None:
            self.replica.pull()
            return fn(self.replica.fast, *args)
        with autocast(self.dev, self.amp):
            return fn(self.model, *args)

    def update(self, total):
        total.backward()
        if self.replica is not None:
            self.replica.push_grads()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.a.grad_clip)
        self.opt.step()

    def end(self, step, tokens=None):
        """After each step: the periodic checkpoint; True once this run has done its --max-steps."""
        self.steps_this_run += 1
        if time.time() - self.last_ckpt > self.a.ckpt_minutes * 60:
            self.save(step, tokens)
            self.last_ckpt = time.time()
        return bool(self.a.max_steps) and self.steps_this_run >= self.a.max_steps

    def steps_per_min(self):
        return self.steps_this_run * 60 / max(time.time() - self.t0, 1e-9)

    def finish(self, step, tokens, *logs):
        return finish_run(self.save, self.where, step, tokens, self.stop, *logs)


def run_lm_training(a, *, model, opt, dev, amp, train, n_ctx, total_steps, step, tokens, save, where, batch_fn,
                    step_fn, eval_fn, log, vlog, lr_scale=None):
    """The loop of the language-model trainers (train-target, train-deepseek): the batch of step s from
    batch_fn(train, s, seed, T, B) (every --long-every-th step n_ctx long), cosine lr (times
    lr_scale(step) when given), a log row every --log-every steps, a validation pass every
    --eval-every steps and at the end, and the rest of TrainLoop.

    step_fn(forward, x, step) -> (loss, total, describe, after): forward(inputs) runs the model;
    loss (the logged cross-entropy) and total (what is backpropagated) are tensors; describe() ->
    (log fields, text after the progress line) is called on log steps only; after() (or None) runs
    after the optimizer step. eval_fn(model_or_replica, amp) -> (val fields, message).
    Returns EXIT_STOPPED when a signal ended the run early, else 0."""
    loop = TrainLoop(a, model=model, opt=opt, dev=dev, amp=amp, save=save, where=where)
    prog = Progress(total_steps * a.tokens_per_step)

    def forward(inputs):
        return loop.forward(lambda m: m(inputs))

    model.train()
    while loop.running(step, total_steps):
        long = a.long_every > 0 and step % a.long_every == a.long_every - 1
        T = n_ctx if long else a.seq_len
        B = max(1, a.tokens_per_step // T)
        x = batch_fn(train, step, a.seed, T, B).to(dev)
        lr = cosine_lr(step, a.lr, a.min_lr, a.warmup_steps, total_steps)
        if lr_scale is not None:
            lr *= lr_scale(step)
        loop.begin(lr)
        loss, total, describe, after = step_fn(forward, x, step)
        loop.update(total)
        if after is not None:
            after()
        step += 1
        tokens += B * T
        lv = loss.item()
        line = prog.update(step, tokens, lv, lr)
        if step % a.log_every == 0:
            fields, suffix = describe()
            log.row(step=step, tokens=tokens, loss=f"{lv:.4f}", lr=f"{lr:.3e}",
                    tok_per_s=f"{prog.tok_per_s(tokens):.0f}", seq_len=T, time=int(time.time()), **fields)
            if line:
                print(line + suffix, flush=True)
        if step % a.eval_every == 0 or step == total_steps:
            if loop.replica is not None:
                loop.replica.pull()
                fields, message = eval_fn(loop.replica.fast, None)
            else:
                fields, message = eval_fn(model, amp)
            vlog.row(step=step, tokens=tokens, time=int(time.time()), **fields)
            print(f"eval step {step}: {message}", flush=True)
        if loop.end(step, tokens):
            break
    return loop.finish(step, tokens, log, vlog)


def finish_run(save, where, step, tokens, stop, *logs):
    """The end of every trainer: the last checkpoint (at `where`), logs closed, and the exit status.
    tokens is None for trainers that count steps only."""
    save(step, tokens)
    for log in logs:
        log.close()
    seen = f", {tokens / 1e6:.2f}M tokens" if tokens is not None else ""
    print(f"checkpoint {where}: step {step}{seen}" + (" (stopped by signal)" if stop.stop else ""), flush=True)
    return EXIT_STOPPED if stop.stop else 0
