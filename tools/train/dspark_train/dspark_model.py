"""DSpark drafter (DeepSeek DeepSpec recipe) in llama.cpp's `dflash` layout.

A parallel block drafter: for an anchor position p, the block [x_p, MASK x (B-1)] at positions
p .. p+B-1 runs through a few Qwen3 layers whose queries come from the block only, and whose keys and
values are [context ; block]: context K/V come from g = RMSNorm(fc([h_l1 ; h_l2 ; h_l3])), the
target's residual stream after three tapped layers, at every position < p (strictly: the anchor's
own target state does not exist yet at inference). Slot k predicts x_{p+k+1} ("anchor-first").
Inside a block attention is bidirectional. Then:
  logits_k  = tok_embd(target) . RMSNorm(h_k)             (target's tied head, frozen, not stored)
  Markov:   z_k = logits_k + W2 W1[prev_k]                 prev_0 = x_p, prev_k = x_{p+k} (teacher
                                                            forcing) or the previous slot's argmax
  confidence c_k = sigmoid(w . [h_k ; W1[prev_k]] + b)     P(slot k accepted | slots < k accepted)
See shared/research/dspark-training.md sections 1 and 3 and dspark-llamacpp.md sections 1 to 4.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .model import Attention, FeedForward, Qwen3Config, RMSNorm, apply_rope, repeat_kv, rope_tables


@dataclass
class DSparkConfig(Qwen3Config):
    # The backbone hyper-parameters are the target's (fc maps L_t*E -> E, the head is the
    # target's); a drafter has few layers.
    n_layer: int = 2
    # DeepSpec ids: output of target layer l (GGUF dflash.target_layers stores l + 1)
    target_layer_ids: list = field(default_factory=lambda: [1, 4, 6])
    block_size: int = 8
    markov_rank: int = 64
    mask_token_id: int = 3


class DraftAttention(Attention):
    """Qwen3 attention whose K/V are [context (from g) ; block]; the parameters (and their names)
    are model.Attention's, built by its constructor from the DSpark config's matching fields."""

    def kv(self, x, cos, sin):
        """K (normed, rotated) and V [B, Hkv, T, D] of x [B, T, E]."""
        B, T, _ = x.shape
        c = self.c
        k = self.k_norm(self.wk(x).view(B, T, c.n_head_kv, c.head_dim)).transpose(1, 2)
        v = self.wv(x).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        """x [B, Q, E] block stream; ctx_k/v [B, Hkv, T, D]; mask [B or 1, Q, T + Q] bool (True = visible)."""
        B, Q, _ = x.shape
        c = self.c
        q = apply_rope(self.q_norm(self.wq(x).view(B, Q, c.n_head, c.head_dim)).transpose(1, 2), cos, sin)
        bk, bv = self.kv(x, cos, sin)
        k = torch.cat([ctx_k, bk], dim=2)
        v = torch.cat([ctx_v, bv], dim=2)
        rep = c.n_head // c.n_head_kv
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim))
        att = att.masked_fill(~mask[:, None], float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(B, Q, -1))


class DraftBlock(nn.Module):
    def __init__(self, c: DSparkConfig):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.attn = DraftAttention(c)
        self.ffn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.ffn = FeedForward(c)


class DSpark(nn.Module):
    def __init__(self, c: DSparkConfig):
        super().__init__()
        self.c = c
        L = len(c.target_layer_ids)
        self.fc = nn.Linear(L * c.n_embd, c.n_embd, bias=False)
        self.hidden_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.blocks = nn.ModuleList(DraftBlock(c) for _ in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.markov_w1 = nn.Embedding(c.vocab_size, c.markov_rank)
        self.markov_w2 = nn.Linear(c.markov_rank, c.vocab_size, bias=False)
        self.conf_proj = nn.Linear(c.n_embd + c.markov_rank, 1, bias=True)
        cos, sin = rope_tables(c.head_dim, c.n_ctx, c.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        for p in self.parameters():  # HF init: N(0, 0.02) for matrices, norms 1, bias 0
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
        nn.init.zeros_(self.conf_proj.bias)

    def context(self, taps):
        """g [B, T, E] from the concatenated target taps [B, T, L_t*E]."""
        return self.hidden_norm(self.fc(taps))

    def backbone(self, block_emb, block_pos, g, ctx_pos, mask):
        """block_emb [B, Q, E] at positions block_pos [Q] (or [B, Q]); context g [B, T, E] at ctx_pos [T];
        mask [B or 1, Q, T + Q]. Returns h [B, Q, E] after the final norm."""
        cq, sq = self.rope_cos[block_pos], self.rope_sin[block_pos]
        ck, sk = self.rope_cos[ctx_pos], self.rope_sin[ctx_pos]
        if cq.dim() == 3:  # per-batch positions: broadcast over heads
            cq, sq = cq[:, None], sq[:, None]
        x = block_emb
        for blk in self.blocks:
            ctx_k, ctx_v = blk.attn.kv(g, ck, sk)  # no attn_norm on g, as in llama.cpp's injection
            x = x + blk.attn(blk.attn_norm(x), cq, sq, ctx_k, ctx_v, mask)
            x = x + blk.ffn(blk.ffn_norm(x))
        return self.out_norm(x)

    def markov(self, prev):
        """(bias [.., V], W1[prev] [.., R]) for previous-token ids prev."""
        e = self.markov_w1(prev)
        return self.markov_w2(e), e

    def confidence_logit(self, h, e):
        return self.conf_proj(torch.cat([h, e], dim=-1)).squeeze(-1)

    @torch.no_grad()
    def draft(self, embd_weight, taps_ctx, anchor_token, n_pos, n_draft=None, temperature=0.0, gen=None,
              head_weight=None):
        """Inference for one sequence, as llama.cpp's driver does it: context = target taps of positions
        0..n_pos-1 [1, n_pos, L_t*E]; block [anchor, MASK...] at positions n_pos..; Markov chain over the
        block, greedy or (temperature > 0) each token sampled from softmax(z / temperature) with `gen`.
        The target's LM head is embd_weight (tied) unless head_weight [V, E] (the target's own
        output.weight) is given. Returns (draft ids [n], confidences [n], biased logits [n, V])."""
        c = self.c
        nb = n_draft or c.block_size
        dev = embd_weight.device
        ids = torch.tensor([[anchor_token] + [c.mask_token_id] * (nb - 1)], device=dev)
        emb = F.embedding(ids, embd_weight).to(self.fc.weight.dtype)
        g = self.context(taps_ctx)
        mask = torch.ones(1, nb, n_pos + nb, dtype=torch.bool, device=dev)
        h = self.backbone(emb, torch.arange(n_pos, n_pos + nb, device=dev), g, torch.arange(n_pos, device=dev), mask)[0]
        head = embd_weight if head_weight is None else head_weight
        base = F.linear(h, head.to(h.dtype)).float()
        prev = anchor_token
        toks, confs, logits = [], [], []
        for i in range(nb):
            bias, e = self.markov(torch.tensor(prev, device=dev))
            z = base[i] + bias.float()
            confs.append(torch.sigmoid(self.confidence_logit(h[i], e).float()).item())
            if temperature > 0:
                prev = int(torch.multinomial((z / temperature).softmax(-1), 1, generator=gen))
            else:
                prev = int(z.argmax())
            toks.append(prev)
            logits.append(z)
        return toks, confs, torch.stack(logits)
