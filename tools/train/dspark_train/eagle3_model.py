"""EAGLE-3 drafter exactly as llama.cpp's `eagle3` architecture computes it (src/models/eagle3.cpp,
driven by common/speculative.cpp's common_speculative_impl_draft_eagle3).

Features: f_P = [h_L1 ; h_L2 ; h_L3], the target's residual stream *entering* layers L1, L2, L3
(GGUF eagle3.target_layers, the dflash.target_layers convention: L = output of layer L-1, 0 = the
embeddings, n_layer = the final pre-norm state).
Encoder (one row per target position): g_P = fc(f_P), or fc(RMSNorm(f_P)) with norm_before_fc.
Decoder, one layer; the row at RoPE position P reads the pair (token t_{P+1}, g_P):
  e  = RMSNorm(embed(t_{P+1}), attn_norm)       gn = RMSNorm(g, attn_norm_2 = "hidden_norm")
  x  = [e ; gn]  (embedding first, 2E wide);    q, k, v = Wq x, Wk x, Wv x  (no q/k norm, no bias)
  RoPE in llama.cpp's NORM style (the `llama` layout): adjacent pairs (x[2i], x[2i+1]) rotate by
       pos * base^(-2i/head_dim). Implemented that way here, so the exporter writes Wq/Wk as they are
       (llama.cpp's converter permutes HF's NeoX-ordered weights into this order; we train in it).
  causal GQA attention over the draft's own KV cache;  r = Wo attn + (gn if norm_before_residual else g)
  h  = r + SwiGLU(RMSNorm(r, ffn_norm))           the "prenorm" output (t_h_nextn)
  logits = LMHead(RMSNorm(h, output_norm))        LMHead and embed: the target's unless the file has its own
Drafting: after the committed rows 0..n-1, the row at position n-1 (the newest token, g_{n-1})
predicts d1 = the token at n+1; the row at n is (d1, h_{n-1}), whose g is the previous row's
prenorm output, and predicts d2; and so on.

Training runs the same layer as EAGLE-3's "training-time test" (`unroll`): K steps, step j being the
j-th draft row of every anchor at once, so the loss sees the states drafting meets.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .model import FeedForward, Qwen3Config, RMSNorm, repeat_kv, rope_tables


@dataclass
class Eagle3Config(Qwen3Config):
    # n_embd, heads, n_ff: the draft layer's; vocab, n_ctx, RoPE and eps: the target's.
    n_layer: int = 1
    target_n_embd: int = 384
    # GGUF convention (eagle3.target_layers): the stream *entering* these target layers.
    target_layers: list = field(default_factory=lambda: [2, 5, 7])
    norm_before_fc: bool = False
    norm_before_residual: bool = False


def rope_norm(x, cos, sin):
    """x [..., T, D]; cos/sin [T, D/2] (broadcastable): GGML_ROPE_TYPE_NORM, the adjacent pair
    (x[2i], x[2i+1]) rotated by pos * base^(-2i/D) (the same angles as model.apply_rope's NeoX
    pairs (i, i + D/2), another pairing of the channels)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)


class Eagle3Cache:
    """The draft's KV cache for one sequence: rows in position order (what llama.cpp's cache holds
    for the draft context; a row sees every cached row and itself)."""

    def __init__(self):
        self.k = self.v = None
        self.n = 0

    def crop(self, n):
        """Forget rows >= n (the previous drafts)."""
        if self.k is not None:
            self.k, self.v = self.k[:, :, :n], self.v[:, :, :n]
        self.n = min(self.n, n)


class Eagle3(nn.Module):
    def __init__(self, c: Eagle3Config):
        super().__init__()
        assert c.n_layer == 1, "eagle3 has exactly one decoder layer"
        assert len(c.target_layers) == 3, "eagle3 taps exactly three target layers"
        self.c = c
        n_in = len(c.target_layers) * c.target_n_embd
        self.enc_norm = RMSNorm(n_in, c.norm_eps) if c.norm_before_fc else None
        self.fc = nn.Linear(n_in, c.n_embd, bias=False)
        self.attn_norm = RMSNorm(c.n_embd, c.norm_eps)      # on the token embedding
        self.hidden_norm = RMSNorm(c.n_embd, c.norm_eps)    # on g (llama.cpp: attn_norm_2)
        self.wq = nn.Linear(2 * c.n_embd, c.n_head * c.head_dim, bias=False)
        self.wk = nn.Linear(2 * c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wv = nn.Linear(2 * c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.ffn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.ffn = FeedForward(c)
        self.out_norm = RMSNorm(c.n_embd, c.norm_eps)
        cos, sin = rope_tables(c.head_dim, c.n_ctx, c.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        for p in self.parameters():  # HF init: N(0, 0.02) for matrices, norms 1
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def encode(self, feats):
        """g [.., E] from the concatenated target features [.., 3 * E_t]."""
        return self.fc(feats if self.enc_norm is None else self.enc_norm(feats))

    def project(self, emb, g, pos):
        """Rows (emb [B, T, E] = embed(t_{P+1}), g [B, T, E]) at positions pos ([T] or [B, T]):
        q [B, H, T, D], k/v [B, Hkv, T, D] (rotated) and the residual input."""
        c = self.c
        B, T, _ = emb.shape
        gn = self.hidden_norm(g)
        x = torch.cat([self.attn_norm(emb), gn], dim=-1)
        q = self.wq(x).view(B, T, c.n_head, c.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        cos, sin = self.rope_cos[pos], self.rope_sin[pos]
        if cos.dim() == 3:  # per-batch positions: broadcast over heads
            cos, sin = cos[:, None], sin[:, None]
        return rope_norm(q, cos, sin), rope_norm(k, cos, sin), v, (gn if c.norm_before_residual else g)

    def finish(self, y, resid):
        """Prenorm output h [B, T, E] from the attention result y [B, H, T, D]."""
        B, _, T, _ = y.shape
        r = self.wo(y.transpose(1, 2).reshape(B, T, -1)) + resid
        return r + self.ffn(self.ffn_norm(r))

    def logits(self, h, head_weight):
        return F.linear(self.out_norm(h), head_weight.to(h.dtype))

    # -- inference: llama.cpp's decoder over its KV cache --

    @torch.no_grad()
    def decode(self, emb, g, pos, cache: Eagle3Cache):
        """Appends the rows (emb, g) at positions pos [T] (one sequence, B = 1) to the cache; each
        row sees the cached rows and the new rows up to itself. Returns their prenorm h [1, T, E]."""
        c = self.c
        q, k, v, resid = self.project(emb, g, pos)
        n0, T = cache.n, q.shape[2]
        if cache.k is not None:
            k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
        cache.k, cache.v, cache.n = k, v, n0 + T
        rep = c.n_head // c.n_head_kv
        att = (q @ repeat_kv(k, rep).transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim))
        future = torch.ones(T, n0 + T, dtype=torch.bool, device=q.device).triu(n0 + 1)
        att = torch.softmax(att.float().masked_fill(future, float("-inf")), dim=-1).to(q.dtype)
        return self.finish(att @ repeat_kv(v, rep), resid)

    @torch.no_grad()
    def draft(self, embd_weight, head_weight, feats, tokens, n_draft, forced=None, cache=None, d2t=None):
        """Greedy drafting for one sequence as llama.cpp's driver does it. tokens [n + 1]: the
        committed ids x_0..x_n (x_n the newest, its target features not known yet); feats
        [1, n, 3 E_t]: the target features of positions 0..n-1. The committed rows (x_{P+1}, g_P) at
        P = 0..n-1 go into the cache (from cache.n on: a cache kept between calls holds the earlier
        ones); the row at n-1 predicts d1, the row at n-1+i is (d_i, prenorm of the row before).
        forced: feed these ids as d_i instead of the argmaxes (the training-time-test check).
        d2t [V_d]: a reduced draft vocabulary's target ids (head_weight [V_d, E]); the logits are
        then scattered to those ids, -inf elsewhere, as llama.cpp does.
        Returns (draft ids [n_draft], logits [n_draft, V] float32); the cache is left with the
        committed rows only."""
        n = len(tokens) - 1
        assert n >= 1, "drafting needs one committed position with target features"
        cache = cache if cache is not None else Eagle3Cache()
        cache.crop(n - 1)  # the newest committed row (the seed) is recomputed, as llama.cpp defers it
        dev = embd_weight.device
        wdt = self.fc.weight.dtype
        p0 = cache.n
        ids = torch.tensor([tokens[p0 + 1:n + 1]], device=dev)
        g = self.encode(feats[:, p0:n].to(wdt))
        h = self.decode(F.embedding(ids, embd_weight).to(wdt), g, torch.arange(p0, n, device=dev), cache)[:, -1:]
        toks, logits = [], []
        for i in range(n_draft):
            z = self.logits(h, head_weight)[0, 0].float()
            if d2t is not None:
                z = torch.full((self.c.vocab_size,), float("-inf"), device=dev).index_copy(0, d2t.to(dev), z)
            logits.append(z)
            toks.append(int(z.argmax()))
            if i + 1 == n_draft:
                break
            nxt = toks[-1] if forced is None else forced[i]
            emb = F.embedding(torch.tensor([[nxt]], device=dev), embd_weight).to(wdt)
            h = self.decode(emb, h, torch.tensor([n + i], device=dev), cache)
        cache.crop(n)
        return toks, torch.stack(logits)

    # -- training: EAGLE-3's training-time test --

    def unroll(self, embd_weight, x, g, n_steps, anchors=None):
        """x [B, T] ids, g [B, T, E] (g_t from position t's target features). Returns the prenorm
        outputs [h^0, ..., h^{K-1}] of K = n_steps draft rows per anchor, all anchors at once:
          step 0:  the row at position t is (x_{t+1}, g_t), causal over the step-0 rows <= t;
          step j:  the row at position t+j is (x_{t+j+1}, h^{j-1}[t]) and sees the step-0 rows at
                   positions <= t and anchor t's rows of steps 1..j (itself included).
        That is drafting after the committed position t, the drafts replaced by the true tokens
        (EAGLE-3 trains so): h^j[t] predicts x_{t+j+2}. h^0 is [B, T, E]; steps j >= 1 run for the
        anchors listed in `anchors` ([A] sorted positions, default all T), h^j [B, A, E]: an
        anchor's chain depends only on the step-0 rows and itself, so leaving out anchors whose
        rows the loss ignores changes nothing for the others. Input ids past the end are clamped
        (the loss masks their rows)."""
        c = self.c
        B, T = x.shape
        dev = x.device
        t = torch.arange(T, device=dev)
        rep = c.n_head // c.n_head_kv
        scale = 1.0 / math.sqrt(c.head_dim)
        wdt = self.fc.weight.dtype
        prev, hs = g, []
        k0 = v0 = None
        kd, vd = [], []  # steps 1..j: one key/value per anchor, [B, H, A, D] each
        for j in range(n_steps):
            if j == 1 and anchors is not None:
                t = anchors
                prev = prev[:, anchors]
            emb = F.embedding(x[:, (t + j + 1).clamp(max=T - 1)], embd_weight).to(wdt)
            q, k, v, resid = self.project(emb, prev, (t + j).clamp(max=c.n_ctx - 1))
            q = q * scale
            if j == 0:
                k0, v0 = repeat_kv(k, rep), repeat_kv(v, rep)
            else:
                kd.append(repeat_kv(k, rep))
                vd.append(repeat_kv(v, rep))
            future = torch.arange(T, device=dev)[None, :] > t[:, None]                 # key s > anchor t
            s = (q @ k0.transpose(-1, -2)).masked_fill(future, float("-inf"))          # [B, H, A, T]
            if kd:
                kk, vv = torch.stack(kd, dim=3), torch.stack(vd, dim=3)               # [B, H, A, j, D]
                sd = (q[:, :, :, None, :] * kk).sum(-1)                               # [B, H, A, j]
                p = torch.softmax(torch.cat([s, sd], dim=-1), dim=-1)
                y = p[..., :T] @ v0 + (p[..., T:, None] * vv).sum(3)
            else:
                y = torch.softmax(s, dim=-1) @ v0
            prev = self.finish(y, resid)
            hs.append(prev)
        return hs
