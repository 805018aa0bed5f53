"""Qwen3 decoder exactly as llama.cpp's `qwen3` architecture computes it (src/models/qwen3.cpp).

Per layer:  x += Wo · attn(rope(qnorm(Wq·n)), rope(knorm(Wk·n)), Wv·n)   with n = rmsnorm(x)
            x += Wdown · (silu(Wgate·m) * Wup·m)                          with m = rmsnorm(x)
then logits = tok_embd · rmsnorm(x) (tied embeddings: no output.weight).
- q/k RMSNorm is per head, over head_dim, before RoPE;
- RoPE is NeoX style (rotate the two halves of each head), which is why q/k weights are exported
  without the interleaving permutation llama.cpp's converter applies to the `llama` architecture;
- no biases anywhere; grouped-query attention (n_head / n_head_kv query heads share one K/V head).
The same module with other sizes is the draft model, and the DSpark drafter reuses its blocks.
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

_HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


@dataclass
class Qwen3Config:
    vocab_size: int = 4096
    n_layer: int = 8
    n_embd: int = 384
    n_head: int = 6
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 1024
    n_ctx: int = 1024
    rope_base: float = 10000.0
    norm_eps: float = 1e-6

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # In the input's dtype: the mean accumulates in float32 inside the reduction even for bf16,
        # and upcasting the whole activation costs two copies per norm (a large share of a CPU step).
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, n_pos, base, device=None):
    """cos/sin [n_pos, head_dim/2] for NeoX RoPE: pair (i, i + head_dim/2) rotates by pos * base^(-2i/d)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim))
    ang = torch.arange(n_pos, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x [..., T, head_dim]; cos/sin [T, head_dim/2]."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


_MASKS = {}


def _future_mask(T, device):
    """[T, T] bool, True above the diagonal (keys in the future), cached per size."""
    key = (T, str(device))
    if key not in _MASKS:
        _MASKS[key] = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
    return _MASKS[key]


def repeat_kv(x, rep):
    """[B, Hkv, T, D] -> [B, Hkv * rep, T, D]; query head h uses KV head h // rep, as in ggml.
    expand + reshape instead of repeat_interleave, whose backward is a slow index_add on CPU."""
    if rep == 1:
        return x
    B, H, T, D = x.shape
    return x[:, :, None].expand(B, H, rep, T, D).reshape(B, H * rep, T, D)


def causal_attention(q, k, v):
    """q [B, H, T, D], k/v [B, H, T, D] (KV heads already repeated) -> [B, H, T, D]."""
    if _HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-1, -2)  # scale the smaller operand
    att = att.masked_fill(_future_mask(T, q.device), float("-inf"))
    # softmax accumulates in float32 internally for bf16 inputs; no explicit upcast (it costs a
    # copy of the [B, H, T, T] scores, the largest tensor of the step)
    return torch.softmax(att, dim=-1) @ v


class Attention(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.c = c
        self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
        self.wk = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wv = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.norm_eps)

    def qkv(self, x, cos, sin):
        """Projected, normed and rotated q [B,H,T,D], k/v [B,Hkv,T,D]."""
        B, T, _ = x.shape
        c = self.c
        q = self.q_norm(self.wq(x).view(B, T, c.n_head, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.wk(x).view(B, T, c.n_head_kv, c.head_dim)).transpose(1, 2)
        v = self.wv(x).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(x, cos, sin)
        rep = self.c.n_head // self.c.n_head_kv
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        y = causal_attention(q, k, v)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.attn = Attention(c)
        self.ffn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.ffn = FeedForward(c)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Qwen3(nn.Module):
    def __init__(self, c: Qwen3Config):
        super().__init__()
        self.c = c
        self.tok_embd = nn.Embedding(c.vocab_size, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.norm_eps)
        cos, sin = rope_tables(c.head_dim, c.n_ctx, c.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        # GPT-2 style: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * n_layer)
        # so the residual stream does not grow with depth.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("wo.weight") or name.endswith("down.weight"):
                    std = 0.02 / math.sqrt(2 * self.c.n_layer)
                nn.init.normal_(p, 0.0, std)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def hidden_states(self, idx, taps=()):
        """Final pre-norm hidden state [B,T,E] and the raw outputs of the layers listed in taps
        (layer il's output = residual stream after block il; -1 = the embeddings)."""
        T = idx.shape[1]
        assert T <= self.c.n_ctx, f"sequence of {T} tokens exceeds n_ctx {self.c.n_ctx}"
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.tok_embd(idx)
        tapped = {}
        if -1 in taps:
            tapped[-1] = x
        for il, blk in enumerate(self.blocks):
            x = blk(x, cos, sin)
            if il in taps:
                tapped[il] = x
        return x, tapped

    def logits_from_hidden(self, x):
        return F.linear(self.out_norm(x), self.tok_embd.weight)

    def forward(self, idx):
        x, _ = self.hidden_states(idx)
        return self.logits_from_hidden(x)
