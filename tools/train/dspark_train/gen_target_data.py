"""The target's own continuations, the training data of the DSpark drafter (DeepSpec regenerates
its training answers with the target: the drafter must learn the target's distribution, not the
corpus's). Prompts are windows of the train split; continuations are sampled with DeepSpec's
settings (temperature 0.7, top-k 20, top-p 0.8); --temperature 0 takes the target's greedy
continuations (the ones a greedy user's drafts must match). Written in shards, so an interrupted run
continues where it stopped.

Two generators give sequences of the same shape and distribution:
  PyTorch (default): decode.py's cached forward of the teacher GGUF (or checkpoint), batch by batch.
  --engine BIN:      the C++ engine (`BIN serve`, continuous batching, plain decoding) on a local
                     port; prompts go in as token ids and the generated ids come back exactly
                     (dspark.return_tokens). About 10-20x faster on a CPU; only a GGUF teacher.

    nice -n 19 /usr/bin/python3 -m dspark_train gen-target-data     # -> $DSPARK_TRAIN_DIR/target-gen/
    /usr/bin/python3 -m dspark_train gen-target-data --engine build/bin/dspark --out DIR --seed 8 --temperature 0
"""
import argparse
import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from . import decode
from . import teacher as teacher_mod
from . import tokenizer as tok
from . import trainutil as tu
from .paths import TARGET_GGUF, train_dir


def sample(logits, gen, temperature, top_k, top_p):
    """logits [B, V] -> ids [B]; temperature 0 is greedy."""
    if temperature == 0:
        return logits.float().argmax(-1)
    z = logits.float() / temperature
    v, i = z.topk(top_k, dim=-1)
    p = torch.softmax(v, -1)
    keep = (p.cumsum(-1) - p) < top_p  # smallest prefix with mass >= top_p (at least one)
    p = p * keep
    # Drawn on the host with the host generator: the same seed picks the same tokens on any device.
    choice = torch.multinomial((p / p.sum(-1, keepdim=True)).cpu(), 1, generator=gen).to(i.device)
    return i.gather(-1, choice).squeeze(-1)


@torch.no_grad()
def generate(target, prompts, gen_len, gen, temperature, top_k, top_p, amp=None):
    dev = target.tok_embd.weight.device
    prompts = prompts.to(dev)
    cache = decode.KVCache(len(target.blocks))
    with tu.autocast(dev, amp):
        logits = decode.forward_cached(target, prompts, cache)[:, -1]
    out = []
    for _ in range(gen_len):
        t = sample(logits, gen, temperature, top_k, top_p)
        out.append(t)
        with tu.autocast(dev, amp):
            logits = decode.forward_cached(target, t[:, None], cache)[:, -1]
    return torch.cat([prompts, torch.stack(out, 1)], 1).cpu()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EngineGenerator:
    """Generates with `dspark serve` (plain decoding, every sequence of a shard in one batch)."""

    def __init__(self, binary, teacher, parallel, threads, n_ctx, log_path):
        self.port = free_port()
        self.parallel = parallel
        cmd = [str(binary), "serve", "-m", str(teacher), "--port", str(self.port), "--parallel", str(parallel),
               "-t", str(threads), "-c", str(n_ctx), "--max-queue", str(4 * parallel)]
        # The server logs a line per request: into a file, never an unread pipe (a full pipe blocks it).
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"dspark serve exited ({self.proc.returncode}); its log: {log_path}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            if time.time() > deadline:
                self.close()
                raise SystemExit("dspark serve did not become healthy in 120 s")
            time.sleep(0.2)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            if self.proc.poll() is None:
                self.proc.kill()
        self.log.close()

    def one(self, prompt, gen_len, seed, temperature, top_k, top_p):
        body = {"prompt": [int(t) for t in prompt], "max_tokens": gen_len, "temperature": temperature,
                "top_k": top_k, "top_p": top_p, "seed": seed,
                "dspark": {"speculate": False, "ignore_eos": True, "return_tokens": True}}
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                ids = json.loads(r.read())["choices"][0]["tokens"]
        except urllib.error.HTTPError as e:
            raise SystemExit(f"dspark serve answered {e.code}: {e.read()[:500]!r}") from e
        if len(ids) != gen_len:
            raise SystemExit(f"dspark serve returned {len(ids)} tokens, asked for {gen_len}")
        return ids

    def generate(self, prompts, gen_len, seeds, temperature, top_k, top_p):
        with ThreadPoolExecutor(self.parallel) as pool:
            outs = list(pool.map(lambda ps: self.one(ps[0], gen_len, ps[1], temperature, top_k, top_p),
                                 zip(prompts.tolist(), seeds)))
        return torch.cat([prompts, torch.tensor(outs, dtype=torch.int64)], 1)


def main(argv=None):
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
    ap.add_argument("--engine", default=None, help="dspark binary: generate with `dspark serve` instead of PyTorch")
    a = ap.parse_args(argv)
    out = Path(a.out) if a.out else train_dir() / "target-gen"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"prompt_len": a.prompt_len, "gen_len": a.gen_len, "teacher": a.teacher, "temperature": a.temperature,
            "top_k": a.top_k, "top_p": a.top_p, "seed": a.seed}
    if a.engine:
        if not str(a.teacher).endswith(".gguf"):
            raise SystemExit("--engine needs a GGUF teacher")
        meta["generator"] = "dspark serve"
        (out / "meta.json").write_text(json.dumps(meta))
        engine = EngineGenerator(a.engine, a.teacher, a.batch, a.threads, a.prompt_len + a.gen_len, out / "serve.log")
        try:
            write_shards(a, out, lambda prompts, shard: engine.generate(
                prompts, a.gen_len, [(a.seed * 1_000_003 + shard) * a.batch + i for i in range(a.batch)],
                a.temperature, a.top_k, a.top_p))
        finally:
            engine.close()
        return
    dev, amp = tu.setup_device(a.threads, a.dtype)
    (out / "meta.json").write_text(json.dumps(meta))
    # CPU: a bf16 copy of the target; CUDA: fp32 weights under bf16 autocast.
    target = teacher_mod.load_target(a.teacher, amp if dev.type == "cpu" else None).to(dev)
    write_shards(a, out, lambda prompts, shard: generate(
        target, prompts, a.gen_len, torch.Generator().manual_seed(a.seed * 1_000_003 + shard),
        a.temperature, a.top_k, a.top_p, amp if dev.type == "cuda" else None))


def write_shards(a, out, generate_shard):
    """Every missing shard: a.batch prompt windows of the train split (a pure function of (seed,
    shard)), continued by generate_shard(prompts, shard) -> [batch, prompt + gen] ids."""
    train, _ = tok.load_cache("train")
    for shard in range((a.n_seqs + a.batch - 1) // a.batch):
        p = out / f"shard-{shard:05d}.npy"
        if p.exists():
            continue
        rng = np.random.default_rng([a.seed, shard])
        starts = rng.integers(0, len(train) - a.prompt_len, size=a.batch)
        prompts = torch.from_numpy(np.stack([train[s:s + a.prompt_len] for s in starts]).astype(np.int64))
        t0 = time.time()
        seqs = generate_shard(prompts, shard)
        np.save(p.with_suffix(".tmp.npy"), seqs.numpy().astype(np.uint16))
        os.replace(p.with_suffix(".tmp.npy"), p)
        rate = seqs.shape[0] * a.gen_len / (time.time() - t0)
        print(f"{p.name}: {seqs.shape[0]} sequences of {seqs.shape[1]} tokens, {rate:.0f} tok/s", flush=True)


if __name__ == "__main__":
    main()
