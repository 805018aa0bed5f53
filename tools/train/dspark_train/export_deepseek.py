"""Export the DeepSeek-architecture reference checkpoint to models/ref-deepseek.gguf (llama.cpp
`deepseek2` layout, with the MTP block as llama.cpp's graph_mtp reads it) and models/ref-deepseek.json.

Keys (prefix deepseek2., uint32 unless said): context_length, embedding_length, block_count
(trunk blocks + 1 MTP block), feed_forward_length (the leading dense blocks'), vocab_size,
attention.head_count, attention.head_count_kv = 1 and attention.key_length = kv_lora_rank +
qk_rope / value_length = kv_lora_rank (the latent cache, as convert_hf_to_gguf.py writes DeepSeek-V3:
MLA is MQA over the latent), attention.key_length_mla = qk_nope + qk_rope,
attention.value_length_mla = v_head, attention.q_lora_rank, attention.kv_lora_rank,
rope.dimension_count = qk_rope, rope.freq_base (f32), attention.layer_norm_rms_epsilon (f32),
leading_dense_block_count, expert_count, expert_used_count, expert_shared_count,
expert_feed_forward_length, expert_weights_scale (f32), expert_weights_norm (bool),
expert_gating_func (2 sigmoid / 1 softmax), nextn_predict_layers = 1 (absent with --no-mtp).

Tensors (ne = [in, out, ...]; matrices F16, norms and biases F32, the router F32 as the converter
keeps it): token_embd, output_norm (tied head: no output.weight); per block blk.N.: attn_norm,
attn_q_a [E, q_lora], attn_q_a_norm, attn_q_b [q_lora, H (nope + rope)], attn_kv_a_mqa
[E, kv_lora + rope], attn_kv_a_norm, attn_k_b [nope, kv_lora, H], attn_v_b [kv_lora, v, H],
attn_output [H v, E], ffn_norm; dense blocks ffn_{gate,up,down}; MoE blocks ffn_gate_inp [E, n_exp],
exp_probs_b.bias [n_exp] (sigmoid gating), ffn_{gate,up}_exps [E, ff_exp, n_exp],
ffn_down_exps [ff_exp, E, n_exp], ffn_{gate,up}_shexp [E, ff_exp n_shared], ffn_down_shexp.
The MTP block is blk.{n_layer} with the same attention/MoE tensors plus nextn.eh_proj [2E, E],
nextn.enorm, nextn.hnorm, nextn.shared_head_norm; no nextn.embed_tokens / nextn.shared_head_head
(llama.cpp then uses token_embd and the output head). The tokenizer keys are copied verbatim from
models/ref-target.gguf (same vocabulary, the same ids as the training caches).

    /usr/bin/python3 -m dspark_train export-deepseek [--ckpt $DSPARK_TRAIN_DIR/deepseek/ckpt.pt] [--no-mtp]
"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from . import gguf_reader
from . import gguf_writer as gw
from . import tokenizer as tok
from . import trainutil as tu
from .deepseek_model import Deepseek2, DeepseekConfig
from .paths import MANIFEST, MODELS_DIR, TARGET_GGUF, train_dir

ARCH = "deepseek2"
DEEPSEEK_GGUF = MODELS_DIR / "ref-deepseek.gguf"

_ATTN = {  # MLA parameter -> llama.cpp tensor suffix
    "attn_norm.weight": "attn_norm.weight",
    "attn.wq_a.weight": "attn_q_a.weight",
    "attn.q_a_norm.weight": "attn_q_a_norm.weight",
    "attn.wq_b.weight": "attn_q_b.weight",
    "attn.wkv_a.weight": "attn_kv_a_mqa.weight",
    "attn.kv_a_norm.weight": "attn_kv_a_norm.weight",
    "attn.k_b": "attn_k_b.weight",
    "attn.v_b": "attn_v_b.weight",
    "attn.wo.weight": "attn_output.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "ffn.gate.weight": "ffn_gate.weight",
    "ffn.up.weight": "ffn_up.weight",
    "ffn.down.weight": "ffn_down.weight",
    "ffn.router.weight": "ffn_gate_inp.weight",
    "ffn.exp_probs_b": "exp_probs_b.bias",
    "ffn.gate_exps": "ffn_gate_exps.weight",
    "ffn.up_exps": "ffn_up_exps.weight",
    "ffn.down_exps": "ffn_down_exps.weight",
    "ffn.shared.gate.weight": "ffn_gate_shexp.weight",
    "ffn.shared.up.weight": "ffn_up_shexp.weight",
    "ffn.shared.down.weight": "ffn_down_shexp.weight",
}
_MTP = {
    "mtp.enorm.weight": "nextn.enorm.weight",
    "mtp.hnorm.weight": "nextn.hnorm.weight",
    "mtp.eh_proj.weight": "nextn.eh_proj.weight",
    "mtp.head_norm.weight": "nextn.shared_head_norm.weight",
}
_F32_MATRICES = ("ffn_gate_inp.weight",)  # kept F32, as convert_hf_to_gguf.py keeps the router


def tensor_name(param: str, c: DeepseekConfig) -> str:
    if param == "tok_embd.weight":
        return "token_embd.weight"
    if param == "out_norm.weight":
        return "output_norm.weight"
    if param in _MTP:
        return f"blk.{c.n_layer}.{_MTP[param]}"
    if param.startswith("mtp.block."):
        return f"blk.{c.n_layer}.{_ATTN[param[len('mtp.block.'):]]}"
    if param.startswith("blocks."):
        _, il, rest = param.split(".", 2)
        return f"blk.{il}.{_ATTN[rest]}"
    raise KeyError(param)


def param_name(tensor: str, c: DeepseekConfig) -> str:
    if tensor == "token_embd.weight":
        return "tok_embd.weight"
    if tensor == "output_norm.weight":
        return "out_norm.weight"
    _, il, rest = tensor.split(".", 2)
    if int(il) == c.n_layer:
        inv = {v: k for k, v in _MTP.items()}
        return inv[rest] if rest in inv else "mtp.block." + {v: k for k, v in _ATTN.items()}[rest]
    return f"blocks.{il}." + {v: k for k, v in _ATTN.items()}[rest]


def to_file_layout(param: str, t: torch.Tensor) -> np.ndarray:
    """The numpy array the GGUF holds for a parameter: attn_k_b [H, nope, r] -> [H, r, nope] (ne
    [nope, kv_lora, H], as the converter transposes it for llama.cpp's absorbed MLA); all else as is
    (a Linear's [out, in] is ne [in, out]; experts [n_exp, out, in] are ne [in, out, n_exp])."""
    a = t.detach().float().cpu().numpy()
    if param.endswith("attn.k_b"):
        a = np.ascontiguousarray(a.transpose(0, 2, 1))
    return a


def from_file_layout(param: str, a) -> torch.Tensor:
    a = np.array(a, dtype=np.float32)
    if param.endswith("attn.k_b"):
        a = np.ascontiguousarray(a.transpose(0, 2, 1))
    return torch.from_numpy(a)


def file_rounded(state, c: DeepseekConfig):
    """The weights as the GGUF stores them: matrices F16 (the router F32), norms and biases F32."""
    out = {}
    for k, v in state.items():
        keep = v.dim() < 2 or tensor_name(k, c).endswith(_F32_MATRICES)
        out[k] = v.float() if keep else v.half().float()
    return out


def add_hparams(w: gw.GGUFWriter, c: DeepseekConfig, mtp: bool = True):
    a = ARCH
    n_nextn = c.n_nextn if mtp else 0
    w.add_u32(f"{a}.context_length", c.n_ctx)
    w.add_u32(f"{a}.embedding_length", c.n_embd)
    w.add_u32(f"{a}.block_count", c.n_layer + n_nextn)
    w.add_u32(f"{a}.feed_forward_length", c.n_ff)
    w.add_u32(f"{a}.vocab_size", c.vocab_size)
    w.add_u32(f"{a}.attention.head_count", c.n_head)
    w.add_u32(f"{a}.attention.head_count_kv", 1)
    w.add_u32(f"{a}.attention.key_length", c.kv_lora_rank + c.qk_rope_dim)
    w.add_u32(f"{a}.attention.value_length", c.kv_lora_rank)
    w.add_u32(f"{a}.attention.key_length_mla", c.qk_nope_dim + c.qk_rope_dim)
    w.add_u32(f"{a}.attention.value_length_mla", c.v_head_dim)
    w.add_u32(f"{a}.attention.q_lora_rank", c.q_lora_rank)
    w.add_u32(f"{a}.attention.kv_lora_rank", c.kv_lora_rank)
    w.add_f32(f"{a}.attention.layer_norm_rms_epsilon", c.norm_eps)
    w.add_u32(f"{a}.rope.dimension_count", c.qk_rope_dim)
    w.add_f32(f"{a}.rope.freq_base", c.rope_base)
    w.add_u32(f"{a}.leading_dense_block_count", c.n_dense_lead)
    w.add_u32(f"{a}.expert_count", c.n_expert)
    w.add_u32(f"{a}.expert_used_count", c.n_expert_used)
    w.add_u32(f"{a}.expert_shared_count", c.n_expert_shared)
    w.add_u32(f"{a}.expert_feed_forward_length", c.n_ff_exp)
    w.add_f32(f"{a}.expert_weights_scale", c.expert_weights_scale)
    w.add_bool(f"{a}.expert_weights_norm", c.expert_weights_norm)
    w.add_u32(f"{a}.expert_gating_func", 2 if c.gating == "sigmoid" else 1)
    if n_nextn:
        w.add_u32(f"{a}.nextn_predict_layers", n_nextn)


def copy_tokenizer(w: gw.GGUFWriter, src=TARGET_GGUF):
    """Every tokenizer.* key of src, with its type, in its order."""
    f = gguf_reader.read(src)
    for key, value in f.metadata.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = f.types[key]
        if vtype == gw.ARRAY:
            w.add_array(key, f.array_types[key], value)
        else:
            w.add(key, vtype, value)


def write_deepseek2(path, state, c: DeepseekConfig, name="dspark-ref-deepseek", extra=None, mtp=True,
                    tokenizer_from=TARGET_GGUF):
    """state: the Deepseek2 module's state_dict (exp_probs_b included). Returns the file's sha256."""
    w = gw.GGUFWriter()
    w.add_str("general.architecture", ARCH)
    w.add_str("general.name", name)
    w.add_u32("general.file_type", 1)  # LLAMA_FTYPE_MOSTLY_F16
    add_hparams(w, c, mtp)
    copy_tokenizer(w, tokenizer_from)
    for key, (vtype, value) in (extra or {}).items():
        w.add(key, vtype, value)
    for pname, t in state.items():
        if pname.startswith("mtp.") and not mtp:
            continue
        if c.gating != "sigmoid" and pname.endswith("exp_probs_b"):
            continue  # the selection bias is DeepSeek-V3's (sigmoid); softmax gating has none
        tname = tensor_name(pname, c)
        arr = to_file_layout(pname, t)
        f32 = arr.ndim == 1 or tname.endswith(_F32_MATRICES)
        w.add_tensor(tname, arr, gw.GGML_F32 if f32 else gw.GGML_F16)
    return w.write(path)


def _f32(v: float) -> float:
    return float(f"{v:.7g}")


def config_from_metadata(md: dict) -> DeepseekConfig:
    a = ARCH
    n_nextn = md.get(f"{a}.nextn_predict_layers", 0)
    return DeepseekConfig(
        vocab_size=len(md["tokenizer.ggml.tokens"]), n_layer=md[f"{a}.block_count"] - n_nextn,
        n_embd=md[f"{a}.embedding_length"], n_head=md[f"{a}.attention.head_count"],
        q_lora_rank=md[f"{a}.attention.q_lora_rank"], kv_lora_rank=md[f"{a}.attention.kv_lora_rank"],
        qk_nope_dim=md[f"{a}.attention.key_length_mla"] - md[f"{a}.rope.dimension_count"],
        qk_rope_dim=md[f"{a}.rope.dimension_count"], v_head_dim=md[f"{a}.attention.value_length_mla"],
        n_ff=md[f"{a}.feed_forward_length"], n_dense_lead=md[f"{a}.leading_dense_block_count"],
        n_expert=md[f"{a}.expert_count"], n_expert_used=md[f"{a}.expert_used_count"],
        n_expert_shared=md[f"{a}.expert_shared_count"], n_ff_exp=md[f"{a}.expert_feed_forward_length"],
        gating="sigmoid" if md[f"{a}.expert_gating_func"] == 2 else "softmax",
        expert_weights_norm=bool(md[f"{a}.expert_weights_norm"]),
        expert_weights_scale=_f32(md[f"{a}.expert_weights_scale"]), n_nextn=n_nextn,
        n_ctx=md[f"{a}.context_length"], rope_base=_f32(md[f"{a}.rope.freq_base"]),
        norm_eps=_f32(md[f"{a}.attention.layer_norm_rms_epsilon"]))


def load_deepseek2(path):
    """(DeepseekConfig, state_dict, metadata) of a GGUF written by write_deepseek2."""
    f = gguf_reader.read(path)
    if f.metadata.get("general.architecture") != ARCH:
        raise ValueError(f"{path}: architecture {f.metadata.get('general.architecture')!r}, expected {ARCH}")
    c = config_from_metadata(f.metadata)
    state = {}
    for n, a in f.tensors.items():
        p = param_name(n, c)
        state[p] = from_file_layout(p, a)
    moe = [f"blocks.{il}.ffn" for il in range(c.n_dense_lead, c.n_layer)] + (["mtp.block.ffn"] if c.n_nextn else [])
    for m in moe:  # softmax gating: the file has no selection bias, the module a zero one
        state.setdefault(f"{m}.exp_probs_b", torch.zeros(c.n_expert))
    return c, state, f.metadata


@torch.no_grad()
def evaluate(model, data: np.ndarray, n_chars: int, window: int, dev=torch.device("cpu"), amp=None):
    """On the whole split in non-overlapping windows of n_ctx (train_target.evaluate's measure):
    trunk nats/token and nats/char; the MTP block's nats/token, its top-1 accuracy, and its top-1
    agreement with the trunk's argmax at the same row (what greedy verification accepts of a
    one-token draft)."""
    import torch.nn.functional as F
    was = model.training
    model.eval()
    tot = mtot = 0.0
    agree = acc = count = 0
    for s in range(0, len(data) - 1, window):
        x = torch.from_numpy(data[s:s + window + 1].astype(np.int64))[None].to(dev)
        if x.shape[1] < 2:
            break
        with tu.autocast(dev, amp):
            z, zm, _ = model(x[:, :-1])
        y = x[:, 1:].reshape(-1)
        z, zm = z.float().view(-1, z.shape[-1]), (zm.float().view(-1, zm.shape[-1]) if zm is not None else None)
        tot += F.cross_entropy(z, y, reduction="sum").item()
        if zm is not None:
            mtot += F.cross_entropy(zm, y, reduction="sum").item()
            am = zm.argmax(-1)
            agree += (am == z.argmax(-1)).sum().item()
            acc += (am == y).sum().item()
        count += y.numel()
    model.train(was)
    out = {"val_nats_per_token": tot / count, "val_nats_per_char": tot / n_chars}
    if model.mtp is not None:
        out.update(mtp_val_nats_per_token=mtot / count, mtp_top1_agree=agree / count, mtp_top1_acc=acc / count)
    return out


@torch.no_grad()
def greedy(model, ids, n_new, stop_ids=(2,)):
    """Greedy continuation (full recompute per token: the exporter's few samples only)."""
    ids = list(ids)
    out = []
    for _ in range(min(n_new, model.c.n_ctx - len(ids))):
        z, _, _ = model(torch.tensor([ids]), mtp=False)
        t = int(z[0, -1].argmax())
        out.append(t)
        ids.append(t)
        if t in stop_ids:
            break
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default=str(train_dir() / "deepseek" / "ckpt.pt"))
    ap.add_argument("--out", default=str(DEEPSEEK_GGUF))
    ap.add_argument("--name", default="dspark-ref-deepseek")
    ap.add_argument("--no-mtp", action="store_true", help="write the trunk only (no nextn block)")
    ap.add_argument("--n-samples", type=int, default=5, help="greedy samples of held-out prompts in the .json")
    ap.add_argument("--no-eval", action="store_true", help="skip the validation pass (smoke exports)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    dev, _ = tu.setup_device(a.threads, "fp32")
    ck = tu.load_checkpoint(Path(a.ckpt))
    if ck is None:
        raise SystemExit(f"no checkpoint at {a.ckpt}")
    cfg = DeepseekConfig(**ck["config"])
    state = file_rounded(ck["model"], cfg)
    model = Deepseek2(cfg).eval()
    model.load_state_dict(state)
    counts = model.param_counts()
    ev = {}
    if not a.no_eval:
        t0 = time.time()
        val, val_chars = tok.load_cache("val")
        ev = evaluate(model, val, val_chars, cfg.n_ctx)
        ev["val_tokens"], ev["val_chars"] = int(len(val)), val_chars
        print(f"val {json.dumps({k: round(v, 4) for k, v in ev.items()})} ({time.time() - t0:.0f}s)", flush=True)
    extra = {
        "dspark.train.tokens": (gw.UINT64, ck["tokens"]),
        "dspark.train.steps": (gw.UINT64, ck["step"]),
        "dspark.train.corpus_manifest_sha256": (gw.STRING, tu_sha256(MANIFEST)),
        "dspark.train.tokenizer_sha256": (gw.STRING, tok.model_sha256()),
    }
    if ev:
        extra["dspark.eval.val_nats_per_token"] = (gw.FLOAT32, ev["val_nats_per_token"])
        extra["dspark.eval.val_nats_per_char"] = (gw.FLOAT32, ev["val_nats_per_char"])
        if "mtp_val_nats_per_token" in ev:
            extra["dspark.eval.mtp_val_nats_per_token"] = (gw.FLOAT32, ev["mtp_val_nats_per_token"])
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    digest = write_deepseek2(tmp, state, cfg, a.name, extra, mtp=not a.no_mtp)
    os.replace(tmp, out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", flush=True)
    summary = {
        "file": out.name, "sha256": digest, "bytes": out.stat().st_size, "arch": ARCH, "mtp": not a.no_mtp,
        "params": counts["total"], "params_active": counts["active"],
        "params_mtp": counts["mtp_total"] if not a.no_mtp else 0,
        "params_mtp_active": counts["mtp_active"] if not a.no_mtp else 0,
        "config": cfg.to_dict(), "tokens": ck["tokens"], "steps": ck["step"], "train_args": ck.get("args", {}),
        **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in ev.items()},
        "val_precision": "fp32", "corpus_manifest_sha256": tu_sha256(MANIFEST),
        "tokenizer_sha256": tok.model_sha256(),
        "exported": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if a.n_samples:
        from . import prompts
        sp = tok.load()
        fit = [r for r in prompts.code_completion() if len(sp.encode(r["prompt"])) + 65 <= cfg.n_ctx]
        rows = []
        for r in fit[:: max(1, len(fit) // a.n_samples)][:a.n_samples]:
            gen = greedy(model, [tok.BOS_ID] + sp.encode(r["prompt"]), 48)
            rows.append({"id": r["id"], "prompt": r["prompt"], "completion": sp.decode(gen)})
        summary["samples"] = rows
    old = out.with_suffix(".json")
    if old.exists():  # keep notes written by hand across re-exports
        prev = json.loads(old.read_text())
        if "notes" in prev:
            summary["notes"] = prev["notes"]
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    print("wrote", out.with_suffix(".json"))


def tu_sha256(p: Path) -> str:
    import hashlib
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


if __name__ == "__main__":
    main()
