"""Load a frozen target ("teacher") for distillation: from a training checkpoint or a GGUF."""
from pathlib import Path

import torch

from . import gguf_model
from . import trainutil as tu
from .model import Qwen3, Qwen3Config


def load_target(path, dtype=None):
    """Qwen3 in eval mode with requires_grad off; dtype=torch.bfloat16 for a fast CPU teacher."""
    path = Path(path)
    if path.suffix == ".gguf":
        cfg, state, _ = gguf_model.load_qwen3(path)
    else:
        ck = tu.load_checkpoint(path)
        if ck is None:
            raise SystemExit(f"no checkpoint at {path}")
        cfg, state = Qwen3Config(**ck["config"]), ck["model"]
    m = Qwen3(cfg)
    m.load_state_dict(state)
    m.eval().requires_grad_(False)
    if dtype is not None:
        rope = (m.rope_cos, m.rope_sin)
        m = m.to(dtype)
        m.rope_cos, m.rope_sin = rope  # RoPE tables stay float32
    return m
