"""Incremental (KV-cached) decoding with the Qwen3 module: greedy generation for samples and the
drafter evaluations. Same math as Qwen3.forward, one chunk of positions at a time."""
import math

import torch

from .model import repeat_kv


class KVCache:
    def __init__(self, n_layer):
        self.k = [None] * n_layer
        self.v = [None] * n_layer
        self.n = 0

    def crop(self, n):
        """Forget positions >= n (rejected draft tokens)."""
        self.k = [None if t is None else t[:, :, :n] for t in self.k]
        self.v = [None if t is None else t[:, :, :n] for t in self.v]
        self.n = min(self.n, n)


@torch.no_grad()
def forward_cached(model, idx, cache: KVCache, return_hidden=False):
    """Logits [B, T, V] of idx [B, T] at positions cache.n .. cache.n + T - 1; extends the cache."""
    c = model.c
    B, T = idx.shape
    p0 = cache.n
    assert p0 + T <= c.n_ctx, f"position {p0 + T} beyond n_ctx {c.n_ctx}"
    cos, sin = model.rope_cos[p0:p0 + T], model.rope_sin[p0:p0 + T]
    x = model.tok_embd(idx)
    # query i (absolute p0 + i) sees keys 0 .. p0 + i
    mask = torch.ones(T, p0 + T, dtype=torch.bool, device=idx.device).triu(p0 + 1)
    rep = c.n_head // c.n_head_kv
    for il, blk in enumerate(model.blocks):
        q, k, v = blk.attn.qkv(blk.attn_norm(x), cos, sin)
        if cache.k[il] is not None:
            k = torch.cat([cache.k[il], k], dim=2)
            v = torch.cat([cache.v[il], v], dim=2)
        cache.k[il], cache.v[il] = k, v
        kk, vv = repeat_kv(k, rep), repeat_kv(v, rep)
        att = (q @ kk.transpose(-1, -2)) / math.sqrt(c.head_dim)
        att = torch.softmax(att.float().masked_fill(mask, float("-inf")), dim=-1).to(q.dtype)
        y = (att @ vv).transpose(1, 2).reshape(B, T, -1)
        x = x + blk.attn.wo(y)
        x = x + blk.ffn(blk.ffn_norm(x))
    cache.n = p0 + T
    logits = model.logits_from_hidden(x)
    return (logits, x) if return_hidden else logits


@torch.no_grad()
def greedy(model, ids, n_new, stop_ids=(2,)):
    """Greedy continuation of the id list `ids` (already with BOS); returns the new ids."""
    cache = KVCache(len(model.blocks))
    n_new = min(n_new, model.c.n_ctx - len(ids))
    logits = forward_cached(model, torch.tensor([ids]), cache)
    out = []
    for _ in range(n_new):
        t = int(logits[0, -1].argmax())
        if t in stop_ids:
            break
        out.append(t)
        if len(out) == n_new:
            break
        logits = forward_cached(model, torch.tensor([[t]]), cache)
    return out
