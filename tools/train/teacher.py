"""Load a frozen target ("teacher") for distillation: from a training checkpoint or a GGUF."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_model  # noqa: E402
import trainutil as tu  # noqa: E402
from model import Qwen3, Qwen3Config  # noqa: E402


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
