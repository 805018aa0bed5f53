"""qwen3 <-> GGUF: llama.cpp tensor names and hyper-parameter keys for our Qwen3 module.

q/k weights are written unpermuted: llama.cpp's converter permutes them only for the `llama`
architecture (interleaved RoPE); qwen3 uses NeoX RoPE, which model.py implements.
Norm gains are F32 (ggml's norm ops want F32), matrices F16, embeddings tied (no output.weight).
"""
import numpy as np
import torch

from . import gguf_reader
from . import gguf_vocab
from . import gguf_writer as gw
from .model import Qwen3Config

ARCH = "qwen3"

_BLOCK = {  # Qwen3 module suffix -> llama.cpp tensor suffix
    "attn_norm.weight": "attn_norm.weight",
    "attn.wq.weight": "attn_q.weight",
    "attn.wk.weight": "attn_k.weight",
    "attn.wv.weight": "attn_v.weight",
    "attn.wo.weight": "attn_output.weight",
    "attn.q_norm.weight": "attn_q_norm.weight",
    "attn.k_norm.weight": "attn_k_norm.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "ffn.gate.weight": "ffn_gate.weight",
    "ffn.up.weight": "ffn_up.weight",
    "ffn.down.weight": "ffn_down.weight",
}


def tensor_name(param: str) -> str:
    if param == "tok_embd.weight":
        return "token_embd.weight"
    if param == "out_norm.weight":
        return "output_norm.weight"
    if param.startswith("blocks."):
        _, il, rest = param.split(".", 2)
        return f"blk.{il}.{_BLOCK[rest]}"
    raise KeyError(param)


def param_name(tensor: str) -> str:
    inv = {v: k for k, v in _BLOCK.items()}
    if tensor == "token_embd.weight":
        return "tok_embd.weight"
    if tensor == "output_norm.weight":
        return "out_norm.weight"
    _, il, rest = tensor.split(".", 2)
    return f"blocks.{il}.{inv[rest]}"


def add_hparams(w: gw.GGUFWriter, c: Qwen3Config, arch: str = ARCH):
    w.add_u32(f"{arch}.context_length", c.n_ctx)
    w.add_u32(f"{arch}.embedding_length", c.n_embd)
    w.add_u32(f"{arch}.block_count", c.n_layer)
    w.add_u32(f"{arch}.feed_forward_length", c.n_ff)
    w.add_u32(f"{arch}.attention.head_count", c.n_head)
    w.add_u32(f"{arch}.attention.head_count_kv", c.n_head_kv)
    w.add_u32(f"{arch}.attention.key_length", c.head_dim)
    w.add_u32(f"{arch}.attention.value_length", c.head_dim)
    w.add_f32(f"{arch}.rope.freq_base", c.rope_base)
    w.add_f32(f"{arch}.attention.layer_norm_rms_epsilon", c.norm_eps)


def write_qwen3(path, state: dict, c: Qwen3Config, sp, name: str, extra: dict = None):
    """state: the Qwen3 module's state_dict; extra: {key: (gguf type, value)} appended last."""
    w = gw.GGUFWriter()
    w.add_str("general.architecture", ARCH)
    w.add_str("general.name", name)
    w.add_u32("general.file_type", 1)  # LLAMA_FTYPE_MOSTLY_F16
    add_hparams(w, c)
    gguf_vocab.add_tokenizer(w, sp)
    for key, (vtype, value) in (extra or {}).items():
        w.add(key, vtype, value)
    for pname, t in state.items():
        arr = t.detach().float().cpu().numpy()
        w.add_tensor(tensor_name(pname), arr, gw.GGML_F32 if arr.ndim == 1 else gw.GGML_F16)
    w.write(path)


def _f32(v: float) -> float:
    """GGUF stores float32; undo the widening (1e-6 reads back as 9.99999997e-07)."""
    return float(f"{v:.7g}")


def config_from_metadata(md: dict, arch: str = ARCH) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=len(md["tokenizer.ggml.tokens"]),
        n_layer=md[f"{arch}.block_count"],
        n_embd=md[f"{arch}.embedding_length"],
        n_head=md[f"{arch}.attention.head_count"],
        n_head_kv=md[f"{arch}.attention.head_count_kv"],
        head_dim=md[f"{arch}.attention.key_length"],
        n_ff=md[f"{arch}.feed_forward_length"],
        n_ctx=md[f"{arch}.context_length"],
        rope_base=_f32(md[f"{arch}.rope.freq_base"]),
        norm_eps=_f32(md[f"{arch}.attention.layer_norm_rms_epsilon"]),
    )


def load_qwen3(path):
    """(Qwen3Config, state_dict of float32 tensors, metadata dict) from a qwen3 GGUF."""
    f = gguf_reader.read(path)
    if f.metadata.get("general.architecture") != ARCH:
        raise ValueError(f"{path}: architecture {f.metadata.get('general.architecture')!r}, expected {ARCH}")
    cfg = config_from_metadata(f.metadata)
    state = {param_name(n): torch.from_numpy(np.array(a, dtype=np.float32)) for n, a in f.tensors.items()}
    return cfg, state, f.metadata
