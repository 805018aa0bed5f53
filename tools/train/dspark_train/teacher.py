"""Load a frozen target ("teacher") for distillation: from a training checkpoint or a GGUF, qwen3 or
deepseek2. Every teacher answers forward(idx) -> logits, hidden_states(idx, taps),
logits_from_hidden(h), tok_embd and c (its config)."""
from pathlib import Path

import torch
from torch import nn

from . import gguf_model
from . import gguf_reader
from . import trainutil as tu
from .deepseek_model import Deepseek2, DeepseekConfig
from .model import Qwen3, Qwen3Config


class DeepseekTeacher(nn.Module):
    """A deepseek2 target as a teacher: its trunk only (forward gives the trunk's logits; the MTP
    block is the target's own drafter, not a teacher's output)."""

    def __init__(self, m: Deepseek2):
        super().__init__()
        self.m = m
        self.c = m.c
        self.tok_embd = m.tok_embd

    def hidden_states(self, idx, taps=()):
        return self.m.hidden_states(idx, taps)

    def logits_from_hidden(self, x):
        return self.m.logits_from_hidden(x)

    def forward(self, idx):
        return self.logits_from_hidden(self.hidden_states(idx)[0])


def drafter_shape(c) -> dict:
    """Attention and FFN shape of a drafter block for target config c: the target's own for qwen3;
    for deepseek2 (MLA has no plain heads) a qwen3 block of the target's width: its head count,
    the bundled target's KV heads and head size, its dense FFN."""
    if isinstance(c, Qwen3Config):
        return dict(n_head=c.n_head, n_head_kv=c.n_head_kv, head_dim=c.head_dim, n_ff=c.n_ff)
    q = Qwen3Config()
    return dict(n_head=c.n_head, n_head_kv=q.n_head_kv, head_dim=q.head_dim, n_ff=c.n_ff)


def load_target(path, dtype=None):
    """The teacher in eval mode with requires_grad off; dtype=torch.bfloat16 for a fast CPU teacher."""
    path = Path(path)
    if path.suffix == ".gguf":
        if gguf_reader.read(path).metadata.get("general.architecture") == "deepseek2":
            from .export_deepseek import load_deepseek2
            cfg, state, _ = load_deepseek2(path)
        else:
            cfg, state, _ = gguf_model.load_qwen3(path)
    else:
        ck = tu.load_checkpoint(path)
        if ck is None:
            raise SystemExit(f"no checkpoint at {path}")
        deepseek = "kv_lora_rank" in ck["config"]
        cfg, state = (DeepseekConfig if deepseek else Qwen3Config)(**ck["config"]), ck["model"]
    if isinstance(cfg, DeepseekConfig):
        m = Deepseek2(cfg)
        m.load_state_dict(state)
        m = DeepseekTeacher(m)
    else:
        m = Qwen3(cfg)
        m.load_state_dict(state)
    m.eval().requires_grad_(False)
    if dtype is not None:
        # RoPE tables stay float32, in whichever module holds them.
        ropes = [(mod, mod.rope_cos, mod.rope_sin) for mod in m.modules() if "rope_cos" in mod._buffers]
        m = m.to(dtype)
        for mod, cos, sin in ropes:
            mod.rope_cos, mod.rope_sin = cos, sin
    return m
