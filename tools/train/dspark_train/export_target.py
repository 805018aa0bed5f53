"""Export the target checkpoint to models/ref-target.gguf, evaluate it, and record a summary.

The validation loss is measured on the weights as exported (matrices rounded to F16), so the
number in models/README.md is the file's, not the checkpoint's. Writes models/ref-target.json
(tokens, losses, ten greedy samples of held-out prompts) for model_card.py.

    /usr/bin/python3 -m dspark_train export-target            # from $DSPARK_TRAIN_DIR/target/ckpt.pt
"""
import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import torch

from . import decode
from . import gguf_model
from . import gguf_writer as gw
from . import prompts
from . import tokenizer as tok
from . import trainutil as tu
from .model import Qwen3, Qwen3Config
from .paths import MANIFEST, TARGET_GGUF, train_dir
from .train_target import evaluate


def f16_rounded(state):
    """Matrices as the GGUF stores them (F16), norm gains kept F32."""
    return {k: (v.half().float() if v.dim() >= 2 else v.float()) for k, v in state.items()}


def sha256_file(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def samples(model, sp, n=10, n_new=64):
    """Greedy continuations of n code-completion prompts spread over the test split."""
    fit = [r for r in prompts.code_completion()
           if len(sp.encode(r["prompt"])) + 1 + n_new <= model.c.n_ctx]
    rows = []
    for r in fit[:: max(1, len(fit) // n)][:n]:
        ids = [tok.BOS_ID] + sp.encode(r["prompt"])
        out = decode.greedy(model, ids, n_new)
        rows.append({"id": r["id"], "source": r["source"], "prompt": r["prompt"], "completion": sp.decode(out)})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(train_dir() / "target" / "ckpt.pt"))
    ap.add_argument("--out", default=str(TARGET_GGUF))
    ap.add_argument("--name", default="dspark-ref-target")
    ap.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="fp32",
                    help="precision of the validation pass (fp32: closest to the engine)")
    ap.add_argument("--n-samples", type=int, default=10)
    ap.add_argument("--val-also", default=str(MANIFEST.parent / "corpus-manifest-v1.tsv"),
                    help="also measure the validation files of this manifest (the earlier corpus, without "
                         "the testsuite package; '' to skip)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    dev, amp = tu.setup_device(a.threads, a.dtype)
    ck = tu.load_checkpoint(Path(a.ckpt))
    if ck is None:
        raise SystemExit(f"no checkpoint at {a.ckpt}")
    cfg = Qwen3Config(**ck["config"])
    state = f16_rounded(ck["model"])
    model = Qwen3(cfg).eval()
    model.load_state_dict(state)
    sp = tok.load()

    t0 = time.time()
    val, val_chars = tok.load_cache("val")
    vt, vc = evaluate(model, val, val_chars, dev, amp, cfg.n_ctx)
    print(f"val {vt:.4f} nats/token, {vc:.4f} nats/char ({time.time() - t0:.0f}s)", flush=True)
    also = None
    if a.val_also:
        # The same measure on the validation files of another manifest (run in one stream, as above).
        ids, chars = tok.encode_split("val", Path(a.val_also), sp)
        at, ac = evaluate(model, ids, chars, dev, amp, cfg.n_ctx)
        also = {"manifest": Path(a.val_also).name, "manifest_sha256": sha256_file(Path(a.val_also)),
                "nats_per_token": round(at, 4), "nats_per_char": round(ac, 4), "tokens": int(len(ids)), "chars": chars}
        print(f"val of {also['manifest']}: {at:.4f} nats/token, {ac:.4f} nats/char", flush=True)

    extra = {
        "dspark.train.tokens": (gw.UINT64, ck["tokens"]),
        "dspark.train.steps": (gw.UINT64, ck["step"]),
        "dspark.train.corpus_manifest_sha256": (gw.STRING, sha256_file(MANIFEST)),
        "dspark.train.tokenizer_sha256": (gw.STRING, tok.model_sha256()),
        "dspark.eval.val_nats_per_token": (gw.FLOAT32, vt),
        "dspark.eval.val_nats_per_char": (gw.FLOAT32, vc),
    }
    out = Path(a.out)
    tmp = out.with_suffix(".tmp")
    gguf_model.write_qwen3(tmp, state, cfg, sp, a.name, extra)
    os.replace(tmp, out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", flush=True)

    summary = {
        "file": out.name, "sha256": sha256_file(out), "bytes": out.stat().st_size,
        "params": model.num_params(), "config": cfg.to_dict(),
        "tokens": ck["tokens"], "steps": ck["step"], "train_args": ck.get("args", {}),
        "val_nats_per_token": round(vt, 4), "val_nats_per_char": round(vc, 4),
        "val_tokens": int(len(val)), "val_chars": val_chars, "val_precision": "bf16" if amp else "fp32",
        "corpus_manifest_sha256": sha256_file(MANIFEST), "tokenizer_sha256": tok.model_sha256(),
        **({"val_also": also} if also else {}),
        "exported": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if a.n_samples:
        with torch.no_grad(), tu.autocast(dev, amp):
            summary["samples"] = samples(model, sp, a.n_samples)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print("wrote", out.with_suffix(".json"))


if __name__ == "__main__":
    main()
