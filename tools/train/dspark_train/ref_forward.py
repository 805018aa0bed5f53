"""Pure-numpy forward pass of a qwen3 or qwen3moe GGUF, written from llama.cpp's graph (not from
model.py); of an eagle3 drafter (Eagle3Ref: llama.cpp's src/models/eagle3.cpp, not eagle3_model.py);
and of a deepseek2 GGUF with its MTP block (Deepseek2Ref: src/models/deepseek2.cpp's trunk graph
and graph_mtp, MLA in llama.cpp's absorbed form, not deepseek_model.py), with llama.cpp's draft-mtp
driver and llama-speculative-simple's loop (spec_simple_mtp) on top.

It is the independent check that the exported file means what the PyTorch model computes:
same tensor names, orientation (ne = [in, out]), per-head q/k norm, NeoX RoPE, GQA head mapping,
tied output. float64 throughout, so differences to PyTorch are PyTorch's float32 rounding.
qwen3moe (llama.cpp's models/qwen3moe.cpp) has the same attention and, instead of the FFN, a
mixture: softmax over the router's logits, the expert_used_count most probable experts (ties to the
lower index), their probabilities normalised to sum 1, each expert a SwiGLU FFN.

    /usr/bin/python3 -m dspark_train ref-forward models/ref-target.gguf 1 2 3   # prints argmaxes
"""
import argparse

import numpy as np

from . import gguf_reader


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope_neox(x, pos, base):
    """x [T, H, D]: rotate pairs (i, i + D/2) by pos * base^(-2i/D) (GGML_ROPE_TYPE_NEOX)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


class _Float64:
    """A GGUF file's tensors as float64, converted when read (not all at once: an upcycled model's
    expert stacks would take gigabytes)."""

    def __init__(self, f):
        self.t = f.tensors

    def __getitem__(self, name):
        return np.asarray(self.t[name], dtype=np.float64)

    def __contains__(self, name):
        return name in self.t

    def get(self, name, default):
        return self[name] if name in self.t else default


def _swiglu(h, gate, up, down):
    g, u = h @ gate.T, h @ up.T
    return (g / (1 + np.exp(-g)) * u) @ down.T


def route(logits, k):
    """(expert ids [T, k], weights [T, k]): the k most probable experts of softmax(logits) (ties to
    the lower index), their probabilities normalised to sum 1 (qwen3moe always normalises)."""
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, -1)
    return ids, w / w.sum(-1, keepdims=True)


def _moe(h, T, p, k, routes, il):
    """The mixture of experts of block p for the rows of h; each expert's weights converted once."""
    ids, w = route(h @ T[p + "ffn_gate_inp.weight"].T, k)
    if routes is not None:
        routes[il] = ids
    gate, up, down = (T.t[p + n] for n in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"))
    out = np.zeros_like(h)
    for e in np.unique(ids):
        rows, slot = np.nonzero(ids == e)
        y = _swiglu(h[rows], *(np.asarray(t[e], dtype=np.float64) for t in (gate, up, down)))
        out[rows] += w[rows, slot][:, None] * y
    return out


def forward(gguf, ids, arch=None, taps=None, routes=None):
    """Logits [T, n_vocab] for the token ids (positions 0..T-1), float64. With taps (layer indices
    0..n_layer), also the residual stream entering each of those layers, {il: [T, n_embd]}
    (n_layer: the final pre-norm state): llama.cpp's t_layer_inp, what dflash.target_layers name.
    arch: the metadata prefix (default: general.architecture). routes: a dict that receives each
    mixture block's chosen experts, {il: [T, k]}."""
    f = gguf if isinstance(gguf, gguf_reader.GGUFFile) else gguf_reader.read(gguf)
    md, W = f.metadata, _Float64(f)
    arch = arch or md.get("general.architecture", "qwen3")
    if arch == "deepseek2":
        assert taps is None and routes is None, "deepseek2: no taps/routes"
        return Deepseek2Ref(f).trunk(ids)[0]
    n_layer = md[f"{arch}.block_count"]
    n_head, n_head_kv = md[f"{arch}.attention.head_count"], md[f"{arch}.attention.head_count_kv"]
    hd = md[f"{arch}.attention.key_length"]
    eps, base = md[f"{arch}.attention.layer_norm_rms_epsilon"], md[f"{arch}.rope.freq_base"]
    ids = np.asarray(ids)
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    x = W["token_embd.weight"][ids]  # numpy shape [n_vocab, n_embd] = ne [n_embd, n_vocab]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    tapped = {}
    for il in range(n_layer):
        if taps is not None and il in taps:
            tapped[il] = x.copy()
        p = f"blk.{il}."
        h = _rms(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "attn_q.weight"].T).reshape(T, n_head, hd)  # Linear: y = x W^T, W [out, in]
        k = (h @ W[p + "attn_k.weight"].T).reshape(T, n_head_kv, hd)
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, n_head_kv, hd)
        q = _rope_neox(_rms(q, W[p + "attn_q_norm.weight"], eps), pos, base)
        k = _rope_neox(_rms(k, W[p + "attn_k_norm.weight"], eps), pos, base)
        out = np.empty((T, n_head, hd))
        for hh in range(n_head):
            kv = hh // (n_head // n_head_kv)  # ggml broadcasts KV head kv over query heads kv*g..kv*g+g-1
            s = q[:, hh] @ k[:, kv].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(T, -1) @ W[p + "attn_output.weight"].T
        h = _rms(x, W[p + "ffn_norm.weight"], eps)
        if p + "ffn_gate_inp.weight" in W:
            x = x + _moe(h, W, p, md[f"{arch}.expert_used_count"], routes, il)
        else:
            x = x + _swiglu(h, W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"], W[p + "ffn_down.weight"])
    if taps is not None and n_layer in taps:
        tapped[n_layer] = x.copy()
    x = _rms(x, W["output_norm.weight"], eps)
    out_w = W.get("output.weight", W["token_embd.weight"])  # tied when output.weight is absent
    logits = x @ out_w.T
    return logits if taps is None else (logits, tapped)


# -- eagle3 (llama.cpp's src/models/eagle3.cpp) --

def _rope_norm(x, pos, base):
    """x [T, H, D]: rotate adjacent pairs (2i, 2i+1) by pos * base^(-2i/D) (GGML_ROPE_TYPE_NORM)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x2 * c + x1 * s
    return out


class Eagle3Ref:
    """An eagle3 GGUF's encoder and one-layer decoder with a KV cache, float64. The token
    embedding and LM head are the file's own when it has them, else the target's (`target`: its
    GGUF; its output.weight, or its tied token_embd). With d2t, the draft vocabulary's logits are
    scattered to their target ids and every other id is -inf, as llama.cpp's graph does."""

    def __init__(self, gguf, target=None):
        f = gguf if isinstance(gguf, gguf_reader.GGUFFile) else gguf_reader.read(gguf)
        md, W = f.metadata, _Float64(f)
        assert md["general.architecture"] == "eagle3"
        self.W = W
        self.n_head, self.n_head_kv = md["eagle3.attention.head_count"], md["eagle3.attention.head_count_kv"]
        self.hd = md["eagle3.attention.key_length"]
        self.eps, self.base = md["eagle3.attention.layer_norm_rms_epsilon"], md["eagle3.rope.freq_base"]
        self.norm_before_fc = bool(md.get("eagle3.norm_before_fc", False))
        self.norm_before_residual = bool(md.get("eagle3.norm_before_residual", False))
        self.n_vocab = len(md["tokenizer.ggml.tokens"])
        tw = None
        if "token_embd.weight" not in W or "output.weight" not in W:
            if target is None:
                raise ValueError(f"{f.path} has no own token_embd/output: give the target")
            tf = target if isinstance(target, gguf_reader.GGUFFile) else gguf_reader.read(target)
            tw = _Float64(tf)
        self.embd = W["token_embd.weight"] if "token_embd.weight" in W else tw["token_embd.weight"]
        self.head = W["output.weight"] if "output.weight" in W else tw.get("output.weight", tw["token_embd.weight"])
        self.d2t = np.asarray(f.tensors["d2t"]) if "d2t" in f.tensors else None
        self.k = np.zeros((0, self.n_head_kv, self.hd))
        self.v = np.zeros((0, self.n_head_kv, self.hd))

    def encode(self, feats):
        """g [T, E] of the target features [T, 3 E_t]."""
        W = self.W
        x = np.asarray(feats, dtype=np.float64)
        if self.norm_before_fc:
            x = _rms(x, W["enc.output_norm.weight"], self.eps)
        return x @ W["fc.weight"].T

    def crop(self, n):
        self.k, self.v = self.k[:n], self.v[:n]

    def decode(self, tokens, g, pos):
        """Rows (tokens[i], g[i]) at positions pos appended to the cache, each seeing the cached
        rows and the new ones up to itself. Returns (logits [T, n_vocab], prenorm h [T, E])."""
        W, p, eps = self.W, "blk.0.", self.eps
        T = len(tokens)
        pos = np.asarray(pos, dtype=np.float64)
        gn = _rms(g, W[p + "attn_norm_2.weight"], eps)
        x = np.concatenate([_rms(self.embd[np.asarray(tokens)], W[p + "attn_norm.weight"], eps), gn], -1)
        q = _rope_norm((x @ W[p + "attn_q.weight"].T).reshape(T, self.n_head, self.hd), pos, self.base)
        k = _rope_norm((x @ W[p + "attn_k.weight"].T).reshape(T, self.n_head_kv, self.hd), pos, self.base)
        v = (x @ W[p + "attn_v.weight"].T).reshape(T, self.n_head_kv, self.hd)
        n0 = len(self.k)
        self.k, self.v = np.concatenate([self.k, k]), np.concatenate([self.v, v])
        mask = np.triu(np.full((T, n0 + T), -np.inf), n0 + 1)
        out = np.empty((T, self.n_head, self.hd))
        for hh in range(self.n_head):
            kv = hh // (self.n_head // self.n_head_kv)
            s = q[:, hh] @ self.k[:, kv].T / np.sqrt(self.hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (s / s.sum(-1, keepdims=True)) @ self.v[:, kv]
        r = out.reshape(T, -1) @ W[p + "attn_output.weight"].T + (gn if self.norm_before_residual else g)
        h = r + _swiglu(_rms(r, W[p + "ffn_norm.weight"], eps), W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"],
                        W[p + "ffn_down.weight"])
        z = _rms(h, W["output_norm.weight"], eps) @ self.head.T
        if self.d2t is not None:
            full = np.full((T, self.n_vocab), -np.inf)
            full[:, self.d2t] = z
            z = full
        return z, h


def eagle3_forward(gguf, feats, tokens, target=None):
    """Logits [T, n_vocab] and prenorm h [T, E] of the rows (tokens[P], g_P) at positions
    P = 0..T-1 (tokens[P] = t_{P+1}, the token after position P), g from the features [T, 3 E_t]."""
    m = Eagle3Ref(gguf, target)
    return m.decode(tokens, m.encode(feats), np.arange(len(tokens)))


def eagle3_draft(gguf, feats, tokens, n_draft, target=None):
    """Greedy drafting as llama.cpp's driver does it: committed ids tokens [n + 1], features of
    positions 0..n-1; the rows (tokens[P+1], g_P) for P < n, then each draft row (d_i, h of the row
    before) at the next position. Returns (draft ids, their logits [n_draft, n_vocab])."""
    m = Eagle3Ref(gguf, target)
    n = len(tokens) - 1
    z, h = m.decode(tokens[1:], m.encode(np.asarray(feats)[:n]), np.arange(n))
    z, h = z[-1:], h[-1:]
    toks, zs = [], []
    for i in range(n_draft):
        zs.append(z[0])
        toks.append(int(np.argmax(z[0])))
        if i + 1 < n_draft:
            z, h = m.decode([toks[-1]], h, [n + i])
    return toks, np.stack(zs)


# -- deepseek2 (llama.cpp's src/models/deepseek2.cpp: trunk graph and graph_mtp) --

class Deepseek2Ref:
    """A deepseek2 GGUF, float64, with KV caches: the trunk (blocks 0..n_layer-1) and the MTP block
    (block n_layer, deepseek2.nextn_predict_layers = 1) each keep their own latent cache, as
    llama.cpp's target and MTP contexts do. MLA runs in the absorbed form llama.cpp uses: the query's
    non-RoPE part is mapped into the latent space by attn_k_b ([H, kv_lora, nope] as numpy), keys are
    [latent ; rope(k_pe)] shared by all heads, values the latent, and attn_v_b maps each head's
    result back ([H, v, kv_lora]). RoPE NORM (adjacent pairs) over rope.dimension_count dims;
    q.k scaled by 1/sqrt(key_length_mla). Mixture: build_moe_ffn with the file's gating function
    (2 sigmoid, 1 or absent softmax), selection by probs + exp_probs_b, weights the unbiased probs,
    normalised (sum clamped at 2^-14) when expert_weights_norm, times expert_weights_scale unless 0 or
    1; plus the shared experts."""

    A = "deepseek2"

    def __init__(self, gguf):
        f = gguf if isinstance(gguf, gguf_reader.GGUFFile) else gguf_reader.read(gguf)
        md, W = f.metadata, _Float64(f)
        assert md["general.architecture"] == self.A
        k = lambda name, *d: md.get(f"{self.A}.{name}", *d) if d else md[f"{self.A}.{name}"]
        self.W, self.f = W, f
        self.n_nextn = k("nextn_predict_layers", 0)
        self.n_layer = k("block_count") - self.n_nextn
        self.n_head = k("attention.head_count")
        self.r = k("attention.kv_lora_rank")
        self.q_lora = k("attention.q_lora_rank", 0)
        self.n_rot = k("rope.dimension_count")
        self.k_mla, self.v_mla = k("attention.key_length_mla"), k("attention.value_length_mla")
        self.nope = self.k_mla - self.n_rot
        self.eps, self.base = k("attention.layer_norm_rms_epsilon"), k("rope.freq_base")
        self.n_dense = k("leading_dense_block_count", 0)
        self.n_used = k("expert_used_count")
        self.gating = k("expert_gating_func", 0)
        self.w_norm, self.w_scale = k("expert_weights_norm", False), k("expert_weights_scale", 0.0)
        self.embd = W["token_embd.weight"]
        self.head = W.get("output.weight", self.embd)
        self.caches = {}  # block -> (latent [n, r], k_pe [n, n_rot])

    def crop(self, n, mtp=False):
        """Forget positions >= n of the trunk's (or the MTP block's) cache."""
        for il in (range(self.n_layer, self.n_layer + self.n_nextn) if mtp else range(self.n_layer)):
            if il in self.caches:
                self.caches[il] = tuple(a[:n] for a in self.caches[il])

    def _moe(self, h, p):
        W = self.W
        logits = h @ W[p + "ffn_gate_inp.weight"].T
        if self.gating == 2:
            probs = 1 / (1 + np.exp(-logits))
        else:
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
        sel = probs + W[p + "exp_probs_b.bias"] if p + "exp_probs_b.bias" in W else probs
        ids = np.argsort(-sel, axis=-1, kind="stable")[:, :self.n_used]
        w = np.take_along_axis(probs, ids, -1)
        if self.w_norm:
            w = w / np.maximum(w.sum(-1, keepdims=True), 6.103515625e-5)
        if self.w_scale not in (0.0, 1.0):
            w = w * self.w_scale
        gate, up, down = (self.f.tensors[p + n] for n in ("ffn_gate_exps.weight", "ffn_up_exps.weight",
                                                          "ffn_down_exps.weight"))
        out = np.zeros_like(h)
        for e in np.unique(ids):
            rows, slot = np.nonzero(ids == e)
            y = _swiglu(h[rows], *(np.asarray(t[e], dtype=np.float64) for t in (gate, up, down)))
            out[rows] += w[rows, slot][:, None] * y
        return out + _swiglu(h, W[p + "ffn_gate_shexp.weight"], W[p + "ffn_up_shexp.weight"],
                             W[p + "ffn_down_shexp.weight"])

    def layer(self, il, x, pos):
        """Block il on rows x [T, E] at positions pos (appended to block il's cache)."""
        W, p, eps, H = self.W, f"blk.{il}.", self.eps, self.n_head
        T = len(x)
        h = _rms(x, W[p + "attn_norm.weight"], eps)
        if self.q_lora:
            q = _rms(h @ W[p + "attn_q_a.weight"].T, W[p + "attn_q_a_norm.weight"], eps) @ W[p + "attn_q_b.weight"].T
        else:
            q = h @ W[p + "attn_q.weight"].T
        q = q.reshape(T, H, self.k_mla)
        q_pe = _rope_norm(q[..., self.nope:], pos, self.base)
        kv = h @ W[p + "attn_kv_a_mqa.weight"].T
        lat = _rms(kv[:, :self.r], W[p + "attn_kv_a_norm.weight"], eps)
        k_pe = _rope_norm(kv[:, None, self.r:], pos, self.base)[:, 0]
        L0, P0 = self.caches.get(il, (np.zeros((0, self.r)), np.zeros((0, self.n_rot))))
        L, P = np.concatenate([L0, lat]), np.concatenate([P0, k_pe])
        self.caches[il] = (L, P)
        n0 = len(L0)
        q_abs = np.einsum("hrd,thd->thr", W[p + "attn_k_b.weight"], q[..., :self.nope])  # wk_b [H, r, nope]
        Q, K = np.concatenate([q_abs, q_pe], -1), np.concatenate([L, P], -1)            # [T,H,r+rot], [n,r+rot]
        mask = np.triu(np.full((T, n0 + T), -np.inf), n0 + 1)
        s = np.einsum("thc,nc->htn", Q, K) / np.sqrt(self.k_mla) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o_lat = np.einsum("htn,nr->thr", s, L)
        o = np.einsum("hvr,thr->thv", W[p + "attn_v_b.weight"], o_lat)                     # wv_b [H, v, r]
        x = x + o.reshape(T, -1) @ W[p + "attn_output.weight"].T
        h = _rms(x, W[p + "ffn_norm.weight"], eps)
        if il < self.n_dense:
            return x + _swiglu(h, W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"], W[p + "ffn_down.weight"])
        return x + self._moe(h, p)

    def trunk(self, ids, pos0=None):
        """(logits [T, V], h [T, E]) of ids at positions pos0.. (default: after the cached ones); h is
        the normed output (llama.cpp's t_h_nextn, what the MTP block reads)."""
        ids = np.asarray(ids)
        n0 = len(self.caches[0][0]) if (pos0 is None and 0 in self.caches) else (pos0 or 0)
        pos = np.arange(n0, n0 + len(ids), dtype=np.float64)
        x = self.embd[ids]
        for il in range(self.n_layer):
            x = self.layer(il, x, pos)
        h = _rms(x, self.W["output_norm.weight"], self.eps)
        return h @ self.head.T, h

    def mtp(self, ids, h, pos):
        """The MTP block on rows (ids[i], h[i]) at positions pos, appended to its cache: (logits, h')
        with h' = rmsnorm(out, nextn.shared_head_norm or output_norm), the h of a chained row."""
        W, il = self.W, self.n_layer
        p = f"blk.{il}."
        embd = W[p + "nextn.embed_tokens.weight"] if p + "nextn.embed_tokens.weight" in W else self.embd
        e = _rms(embd[np.asarray(ids)], W[p + "nextn.enorm.weight"], self.eps)
        x = np.concatenate([e, _rms(np.asarray(h, dtype=np.float64), W[p + "nextn.hnorm.weight"], self.eps)], -1)
        x = self.layer(il, x @ W[p + "nextn.eh_proj.weight"].T, np.asarray(pos, dtype=np.float64))
        norm = W[p + "nextn.shared_head_norm.weight"] if p + "nextn.shared_head_norm.weight" in W else W["output_norm.weight"]
        hn = _rms(x, norm, self.eps)
        head = W[p + "nextn.shared_head_head.weight"] if p + "nextn.shared_head_head.weight" in W else self.head
        return hn @ head.T, hn


def deepseek2_mtp_forward(gguf, ids):
    """(trunk logits, MTP logits) [T, V] of ids at positions 0..T-1: the MTP row q reads (ids[q],
    h_{q-1}) with h_{-1} = 0 (llama.cpp's draft-mtp convention); both rows q predict ids[q+1]."""
    m = Deepseek2Ref(gguf)
    z, h = m.trunk(ids)
    zm, _ = m.mtp(ids, np.concatenate([np.zeros_like(h[:1]), h[:-1]]), np.arange(len(ids)))
    return z, zm


def deepseek2_mtp_draft(gguf, ids, n_draft):
    """Greedy MTP drafts after the committed ids x_0..x_n (x_n not yet through the trunk), as
    llama.cpp's draft-mtp: rows (x_q, h_{q-1}) for q <= n, then (d_i, h' of the row before).
    Returns (draft ids, logits [n_draft, V])."""
    m = Deepseek2Ref(gguf)
    ids = list(ids)
    n = len(ids) - 1
    _, h = m.trunk(ids[:-1])
    z, hn = m.mtp(ids, np.concatenate([np.zeros_like(h[:1]), h]), np.arange(n + 1))
    toks, zs = [], []
    for i in range(n_draft):
        zs.append(z[-1])
        toks.append(int(np.argmax(z[-1])))
        if i + 1 < n_draft:
            z, hn = m.mtp([toks[-1]], hn[-1:], [n + 1 + i])
    return toks, np.stack(zs)


def spec_simple_mtp(gguf, prompt_ids, n_predict, n_max=3, n_ctx=None, eos=(2,), rounds=None):
    """llama.cpp's llama-speculative-simple with --spec-type draft-mtp (greedy target, p_min 0),
    replayed step by step on Deepseek2Ref: the prompt but its last token through the trunk and the MTP
    block (rows (x_q, h_{q-1})), then per round: draft n_max tokens from (id_last, pending h), verify
    [id_last, drafts] on the trunk, feed those rows to the MTP block (each with the h of the row
    before, the first with the pending h), accept the longest agreeing prefix plus the target's next
    token, keep the h of the last accepted row, drop both caches past the committed positions.
    Returns (generated ids, n_drafted, n_accept) as the tool prints them; `rounds`, a list, receives
    per round {"draft": the n_max drafted ids (before truncation, as the tool's debug log lists
    them), "n_accept", "n_draft" (after truncation), "last": the last accepted id}."""
    m = Deepseek2Ref(gguf)
    n_ctx = n_ctx or 1 << 30
    inp = list(prompt_ids)
    _, h = m.trunk(inp[:-1])
    m.mtp(inp[:-1], np.concatenate([np.zeros_like(h[:1]), h[:-1]]), np.arange(len(inp) - 1))
    pending = h[-1:]
    id_last, n_past = inp[-1], len(inp) - 1
    out, n_pred, n_drafted, n_accept = [], 0, 0, 0
    while True:
        n_draft_max = max(0, min(n_ctx - n_past - 2, n_predict - n_pred - 1))
        draft, hh, tok = [], pending, id_last
        for i in range(n_max):
            z, hn = m.mtp([tok], hh, [n_past + i])
            tok, hh = int(np.argmax(z[0])), hn
            draft.append(tok)
        full = list(draft)
        if n_draft_max > 0:
            draft = draft[:n_draft_max]
        m.crop(n_past, mtp=True)
        batch = [id_last] + draft
        z, hv = m.trunk(batch, n_past)
        m.mtp(batch, np.concatenate([pending, hv[:-1]]), np.arange(n_past, n_past + len(batch)))
        ids = []
        for i in range(len(batch)):
            t = int(np.argmax(z[i]))
            ids.append(t)
            if i >= len(draft) or t != draft[i]:
                break
        pending = hv[len(ids) - 1:len(ids)]
        n_past += len(ids)
        n_drafted += len(draft)
        n_accept += len(ids) - 1
        n_pred += len(ids)
        done = False
        for t in ids:
            id_last = t
            out.append(t)
            if t in eos:
                done = True
                break
        if rounds is not None:
            rounds.append({"draft": full, "n_draft": len(draft), "n_accept": len(ids) - 1, "last": id_last})
        m.crop(n_past)
        m.crop(n_past, mtp=True)
        if n_pred > n_predict or done:
            return out, n_drafted, n_accept


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("ids", nargs="*", type=int, help="token ids")
    a = ap.parse_args(argv)
    logits = forward(a.gguf, a.ids)
    print(logits.argmax(-1).tolist())


if __name__ == "__main__":
    main()
