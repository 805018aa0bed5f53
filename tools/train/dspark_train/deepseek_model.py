"""DeepSeek-V3-style model exactly as llama.cpp's `deepseek2` architecture computes it
(src/models/deepseek2.cpp: the trunk graph and graph_mtp, the multi-token-prediction block).

Trunk, per block (il < n_layer):
  x += Wo · MLA(n)          with n = rmsnorm(x, attn_norm)
  x += FFN(m)               with m = rmsnorm(x, ffn_norm)
  h = rmsnorm(x, output_norm);  logits = tok_embd · h          (tied head: no output.weight)
MLA (multi-head latent attention, query LoRA; llama.cpp computes the "absorbed" form, the same
function):
  q      = Wq_b · rmsnorm(Wq_a · n, q_a_norm)        per head [q_nope (qk_nope) ; q_pe (qk_rope)]
  [c;kpe]= Wkv_a · n                                  c: the kv_lora_rank latent, kpe: one RoPE key
  c      = rmsnorm(c, kv_a_norm)                      (all heads share c and kpe: the cache holds them)
  k_h    = [K_b[h] · c ; rope(kpe)]     v_h = V_b[h] · c
  RoPE on q_pe / kpe only, llama.cpp's NORM style: adjacent pairs (2i, 2i+1) rotate by
  pos · base^(-2i/qk_rope) (HF DeepSeek-V3 de-interleaves then rotates halves, the same rotation
  of the same pairs; llama.cpp's converter does not permute these weights and neither do we).
  score = q·k / sqrt(qk_nope + qk_rope)   (no YaRN: mscale 1)
FFN: blocks il < n_dense_lead are dense SwiGLU (n_ff); the others a mixture of experts plus
  n_expert_shared shared experts (one SwiGLU of width n_expert_shared · n_ff_exp), as
  llama.cpp's build_moe_ffn:
  s      = sigmoid(router · m)  (gating "sigmoid", expert_gating_func 2; or softmax, 1)
  chosen = top-k of s + exp_probs_b   (the selection bias only selects: weights use s)
  w      = s[chosen] / sum(s[chosen]) (expert_weights_norm) · expert_weights_scale
  FFN(m) = sum_j w_j · Expert_{chosen_j}(m) + Shared(m)
MTP block (one, stored as block n_layer, DeepSeek-V3's MTP module / llama.cpp graph_mtp), per row:
  the row at position q reads (token x_q, h_{q-1}), h the trunk's *normed* output (h_nextn, after
  output_norm), and an all-zero h at q = 0 (rmsnorm(0) = 0):
  x0 = eh_proj([rmsnorm(embed(x_q), enorm) ; rmsnorm(h_{q-1}, hnorm)])  (embedding first)
  x  = one deepseek2 block (MLA over the MTP rows' own cache, MoE + shared) on x0
  h' = rmsnorm(x, shared_head_norm);   logits = tok_embd · h'      (row q predicts x_{q+1})
  When drafting, h' is the h of the next draft row (llama.cpp's draft-mtp chains it).
So the MTP row q predicts the same label as the trunk row q: the trunk row q has run the full
depth over x_0..x_q, the MTP row has the trunk's state of x_0..x_{q-1} and one block for x_q.

Expert load balance (DeepSeek-V3): the selection bias exp_probs_b is a buffer, updated after each
optimizer step the auxiliary-loss-free way (update_expert_bias: b_i += rate · sign(mean load -
load_i), per block), plus an optional small sequence-wise balance loss (balance_loss in aux).
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .eagle3_model import rope_norm
from .model import RMSNorm, causal_attention, rope_tables


@dataclass
class DeepseekConfig:
    vocab_size: int = 4096
    n_layer: int = 8            # trunk blocks (block_count in the GGUF adds n_nextn)
    n_embd: int = 384
    n_head: int = 6
    q_lora_rank: int = 192
    kv_lora_rank: int = 128
    qk_nope_dim: int = 64
    qk_rope_dim: int = 32
    v_head_dim: int = 64
    n_ff: int = 1024            # the leading dense blocks' FFN
    n_dense_lead: int = 1       # leading_dense_block_count
    n_expert: int = 16
    n_expert_used: int = 2
    n_expert_shared: int = 1
    n_ff_exp: int = 320
    gating: str = "sigmoid"     # "sigmoid" (V3, with the exp_probs_b selection bias) or "softmax" (V2)
    expert_weights_norm: bool = True
    expert_weights_scale: float = 2.5
    n_nextn: int = 1            # MTP blocks: 0 or 1
    n_ctx: int = 1024
    rope_base: float = 10000.0
    norm_eps: float = 1e-6

    def to_dict(self):
        return asdict(self)

    def __post_init__(self):
        assert self.gating in ("sigmoid", "softmax"), self.gating
        assert self.n_nextn in (0, 1), "llama.cpp's deepseek2 MTP graph runs exactly one nextn block"
        assert self.qk_rope_dim % 2 == 0
        assert 0 <= self.n_dense_lead <= self.n_layer
        assert self.n_nextn == 0 or self.n_expert > 0, "the MTP block's FFN must be a mixture (graph_mtp)"

    @property
    def head_k_dim(self):
        return self.qk_nope_dim + self.qk_rope_dim


class SwiGLU(nn.Module):
    def __init__(self, n_embd, n_ff):
        super().__init__()
        self.gate = nn.Linear(n_embd, n_ff, bias=False)
        self.up = nn.Linear(n_embd, n_ff, bias=False)
        self.down = nn.Linear(n_ff, n_embd, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MLA(nn.Module):
    """Multi-head latent attention with a query LoRA (K_b / V_b kept per head, HF orientation:
    k_b [H, qk_nope, kv_lora], v_b [H, v_head, kv_lora])."""

    def __init__(self, c: DeepseekConfig):
        super().__init__()
        self.c = c
        H = c.n_head
        self.wq_a = nn.Linear(c.n_embd, c.q_lora_rank, bias=False)
        self.q_a_norm = RMSNorm(c.q_lora_rank, c.norm_eps)
        self.wq_b = nn.Linear(c.q_lora_rank, H * c.head_k_dim, bias=False)
        self.wkv_a = nn.Linear(c.n_embd, c.kv_lora_rank + c.qk_rope_dim, bias=False)
        self.kv_a_norm = RMSNorm(c.kv_lora_rank, c.norm_eps)
        self.k_b = nn.Parameter(torch.empty(H, c.qk_nope_dim, c.kv_lora_rank))
        self.v_b = nn.Parameter(torch.empty(H, c.v_head_dim, c.kv_lora_rank))
        self.wo = nn.Linear(H * c.v_head_dim, c.n_embd, bias=False)

    def forward(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        H, r, dn, dr = c.n_head, c.kv_lora_rank, c.qk_nope_dim, c.qk_rope_dim
        q = self.wq_b(self.q_a_norm(self.wq_a(x))).view(B, T, H, dn + dr).transpose(1, 2)
        kv = self.wkv_a(x)
        lat = self.kv_a_norm(kv[..., :r])                                    # [B, T, r]
        k_pe = rope_norm(kv[..., r:][:, None], cos, sin)                     # [B, 1, T, dr]
        q = torch.cat([q[..., :dn], rope_norm(q[..., dn:], cos, sin)], -1)   # [B, H, T, dn + dr]
        k_nope = F.linear(lat, self.k_b.reshape(H * dn, r)).view(B, T, H, dn).transpose(1, 2)
        v = F.linear(lat, self.v_b.reshape(H * c.v_head_dim, r)).view(B, T, H, c.v_head_dim).transpose(1, 2)
        k = torch.cat([k_nope, k_pe.expand(B, H, T, dr)], -1)
        y = causal_attention(q, k, v)  # scale 1/sqrt(q.shape[-1]) = 1/sqrt(qk_nope + qk_rope)
        return self.wo(y.transpose(1, 2).reshape(B, T, H * c.v_head_dim))


class _Permute(torch.autograd.Function):
    """Rows of x in the order `perm`; the backward gathers with the inverse permutation (a plain
    index_select both ways, where indexing's backward is a scatter-add)."""

    @staticmethod
    def forward(ctx, x, perm, inv):
        ctx.save_for_backward(inv)
        return x.index_select(0, perm)

    @staticmethod
    def backward(ctx, g):
        (inv,) = ctx.saved_tensors
        return g.index_select(0, inv), None, None


class MoE(nn.Module):
    """Routed experts (stacked [n_expert, out, in], as the GGUF stores them) plus the shared
    expert(s), llama.cpp's build_moe_ffn + the shared branch of deepseek2.cpp."""

    def __init__(self, c: DeepseekConfig):
        super().__init__()
        self.c = c
        E, ff = c.n_embd, c.n_ff_exp
        self.router = nn.Linear(E, c.n_expert, bias=False)
        # exp_probs_b: only selects (DeepSeek-V3's e_score_correction_bias); not a parameter.
        self.register_buffer("exp_probs_b", torch.zeros(c.n_expert))
        self.gate_exps = nn.Parameter(torch.empty(c.n_expert, ff, E))
        self.up_exps = nn.Parameter(torch.empty(c.n_expert, ff, E))
        self.down_exps = nn.Parameter(torch.empty(c.n_expert, E, ff))
        self.shared = SwiGLU(E, ff * c.n_expert_shared) if c.n_expert_shared > 0 else None
        self.last_load = None     # [n_expert] tokens routed to each expert in the last forward
        self.last_balance = None  # the sequence-wise balance loss of the last forward

    def route(self, x):
        """(expert ids [N, k], weights [N, k] float32, scores [N, n_expert] float32) of rows x [N, E]."""
        c = self.c
        logits = self.router(x).float()
        s = torch.sigmoid(logits) if c.gating == "sigmoid" else torch.softmax(logits, -1)
        sel = s + self.exp_probs_b if c.gating == "sigmoid" else s
        ids = torch.topk(sel.detach(), c.n_expert_used, dim=-1, sorted=True).indices
        w = s.gather(-1, ids)
        if c.expert_weights_norm:
            w = w / w.sum(-1, keepdim=True).clamp_min(6.103515625e-5)  # ggml clamps the sum so
        if c.expert_weights_scale not in (0.0, 1.0):
            w = w * c.expert_weights_scale
        return ids, w, s

    def forward(self, x):
        c = self.c
        B, T, E = x.shape
        k = c.n_expert_used
        xf = x.reshape(B * T, E)
        ids, w, s = self.route(xf)
        flat = ids.reshape(-1)                                        # slot = row * k + j
        order = torch.argsort(flat, stable=True)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(order.numel(), device=order.device)
        counts = torch.bincount(flat, minlength=c.n_expert)
        self.last_load = counts.detach()
        rows = _Permute.apply(xf[:, None, :].expand(B * T, k, E).reshape(B * T * k, E), order, inv)
        outs = []
        gates, ups, downs = self.gate_exps.unbind(0), self.up_exps.unbind(0), self.down_exps.unbind(0)
        for e, part in enumerate(rows.split(counts.tolist())):
            if part.shape[0]:
                outs.append(F.linear(F.silu(F.linear(part, gates[e])) * F.linear(part, ups[e]), downs[e]))
        y = _Permute.apply(torch.cat(outs), inv, order).view(B * T, k, E)
        y = (y * w.to(y.dtype)[..., None]).sum(1)
        if self.shared is not None:
            y = y + self.shared(xf)
        if self.training:
            # DeepSeek-V3's sequence-wise balance loss: sum_i f_i P_i per sequence, f_i the share of
            # the sequence's k T choices that went to expert i (times n_expert / k), P_i the mean
            # normalised score.
            with torch.no_grad():
                f = F.one_hot(ids.view(B, T * k), c.n_expert).sum(1).float() * (c.n_expert / (k * T))
            p = (s / s.sum(-1, keepdim=True)).view(B, T, c.n_expert).mean(1)
            self.last_balance = (f * p).sum(-1).mean()
        return y.view(B, T, E)


class Block(nn.Module):
    def __init__(self, c: DeepseekConfig, moe: bool):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.attn = MLA(c)
        self.ffn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.ffn = MoE(c) if moe else SwiGLU(c.n_embd, c.n_ff)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class MTP(nn.Module):
    """The nextn block: enorm/hnorm/eh_proj in front of a deepseek2 block (MoE), its own head norm
    (nextn.shared_head_norm); embedding and LM head shared with the trunk."""

    def __init__(self, c: DeepseekConfig):
        super().__init__()
        self.enorm = RMSNorm(c.n_embd, c.norm_eps)
        self.hnorm = RMSNorm(c.n_embd, c.norm_eps)
        self.eh_proj = nn.Linear(2 * c.n_embd, c.n_embd, bias=False)
        self.block = Block(c, moe=True)
        self.head_norm = RMSNorm(c.n_embd, c.norm_eps)


class Deepseek2(nn.Module):
    def __init__(self, c: DeepseekConfig):
        super().__init__()
        self.c = c
        self.tok_embd = nn.Embedding(c.vocab_size, c.n_embd)
        self.blocks = nn.ModuleList(Block(c, moe=il >= c.n_dense_lead and c.n_expert > 0)
                                    for il in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.mtp = MTP(c) if c.n_nextn else None
        cos, sin = rope_tables(c.qk_rope_dim, c.n_ctx, c.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        # N(0, 0.02); projections into the residual stream scaled by 1/sqrt(2 n_layer) (model.py's rule)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02
                if name.endswith(("wo.weight", "down.weight", "down_exps")):
                    std /= math.sqrt(2 * self.c.n_layer)
                nn.init.normal_(p, 0.0, std)

    def moe_layers(self):
        """The MoE modules: trunk blocks in order, then the MTP block's."""
        blocks = list(self.blocks) + ([self.mtp.block] if self.mtp is not None else [])
        return [b.ffn for b in blocks if isinstance(b.ffn, MoE)]

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def param_counts(self):
        """{total, active, mtp_total, mtp_active}: trunk parameters (embedding counted once, tied),
        those one token reads (routed experts: n_expert_used of n_expert), and the same for the MTP
        block (its embedding/head are the trunk's)."""
        c = self.c

        def count(mods, active):
            n = 0
            for m in mods:
                for name, p in m.named_parameters():
                    if active and name.split(".")[-1] in ("gate_exps", "up_exps", "down_exps"):
                        n += p.numel() * c.n_expert_used // c.n_expert
                    else:
                        n += p.numel()
            return n

        trunk = [self.tok_embd, self.blocks, self.out_norm]
        mtp = [self.mtp] if self.mtp is not None else []
        return {"total": count(trunk, False), "active": count(trunk, True),
                "mtp_total": count(mtp, False), "mtp_active": count(mtp, True)}

    def hidden_states(self, idx, taps=()):
        """Final pre-norm hidden state [B, T, E] and the raw outputs of the layers listed in taps
        (layer il's output = the residual stream after block il; -1 = the embeddings), as
        Qwen3.hidden_states: what the drafters that read target features (DSpark, EAGLE-3) tap."""
        T = idx.shape[1]
        assert T <= self.c.n_ctx, f"sequence of {T} tokens exceeds n_ctx {self.c.n_ctx}"
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.tok_embd(idx)
        tapped = {-1: x} if -1 in taps else {}
        for il, blk in enumerate(self.blocks):
            x = blk(x, cos, sin)
            if il in taps:
                tapped[il] = x
        return x, tapped

    def logits_from_hidden(self, x):
        return self.head(self.out_norm(x))

    def trunk(self, idx):
        """h [B, T, E]: the trunk's normed output (llama.cpp's h_nextn / result_norm)."""
        return self.out_norm(self.hidden_states(idx)[0])

    def head(self, h):
        return F.linear(h, self.tok_embd.weight)

    def mtp_rows(self, idx, h_in):
        """The MTP block over rows (idx[:, q], h_in[:, q]) at positions q = 0..T-1, causal over the
        rows: (logits [B, T, V], h' [B, T, E] the normed output a chained draft row reads)."""
        m = self.mtp
        T = idx.shape[1]
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        e = self.tok_embd(idx)
        x = m.eh_proj(torch.cat([m.enorm(e), m.hnorm(h_in.to(e.dtype))], dim=-1))
        x = m.block(x, cos, sin)
        h = m.head_norm(x)
        return self.head(h), h

    def forward(self, idx, mtp=True):
        """(trunk logits [B, T, V], MTP logits [B, T, V] or None, aux). Trunk row q and MTP row q
        both predict idx[:, q + 1]. aux: {"load": [n_moe, n_expert] tokens per expert (trunk blocks
        then the MTP block), "balance": the summed sequence-wise balance losses (training only)}."""
        h = self.trunk(idx)
        logits = self.head(h)
        mtp_logits = None
        if mtp and self.mtp is not None:
            # row q reads h_{q-1}; row 0 an all-zero h (llama.cpp's draft-mtp before any target row)
            h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
            mtp_logits, _ = self.mtp_rows(idx, h_prev)
        moes = self.moe_layers() if mtp else [b.ffn for b in self.blocks if isinstance(b.ffn, MoE)]
        aux = {}
        if moes:
            aux["load"] = torch.stack([m.last_load for m in moes])
            if self.training:
                aux["balance"] = sum(m.last_balance for m in moes)
        return logits, mtp_logits, aux

    @torch.no_grad()
    def update_expert_bias(self, load, rate):
        """Auxiliary-loss-free balancing (DeepSeek-V3): per MoE block, raise the selection bias of
        experts that got fewer tokens than the mean, lower it for those that got more. load:
        aux["load"] of the step (rows in moe_layers() order)."""
        if rate <= 0 or self.c.gating != "sigmoid":
            return
        for m, l in zip(self.moe_layers(), load):
            l = l.float().to(m.exp_probs_b.device)
            m.exp_probs_b.add_(rate * torch.sign(l.mean() - l))

    @torch.no_grad()
    def mtp_draft(self, ids, n_draft):
        """Greedy MTP drafting as llama.cpp's draft-mtp does it, for one sequence of committed ids
        x_0..x_n (x_n the newest, not yet run through the trunk): the rows (x_q, h_{q-1}) for
        q = 0..n (h_{-1} = 0), the row at n predicting d_1; then the row (d_i, h' of the previous
        row) at n + i. Returns (draft ids, their logits [n_draft, V])."""
        ids = torch.as_tensor(ids).view(1, -1)
        h = self.trunk(ids[:, :-1])
        rows_h = torch.cat([torch.zeros_like(h[:, :1]), h], dim=1)
        toks, zs = [], []
        for _ in range(n_draft):
            z, hh = self.mtp_rows(ids, rows_h)
            zs.append(z[0, -1].float())
            toks.append(int(z[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([[toks[-1]]])], dim=1)
            rows_h = torch.cat([rows_h, hh[:, -1:]], dim=1)
        return toks, torch.stack(zs)
