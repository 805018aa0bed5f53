"""Golden outputs of the DSpark / DFlash drafter, computed independently of the C++ code.

A float64 numpy implementation written from shared/research/dspark-llamacpp.md (§2-§4) and
dspark-training.md (§1): target forward with layer-input taps, fc + enc.output_norm fusion,
context K/V injection, the noise block through Qwen3-style draft layers (q/k norm, NeoX RoPE,
bidirectional or causal block attention, attention sinks), final norm, LM head (draft's own or
the target's), d2t scatter, and the greedy Markov chain with the confidence head.

Regenerate (after changing tests/dspark/dspark_models.cc):
    cmake --build build --target dspark_write_golden_models
    ./build/tests/dspark_write_golden_models /tmp/dspark_golden
    PYTHONPATH=tools/train /usr/bin/python3 tests/data/dspark/make_golden.py /tmp/dspark_golden
which rewrites tests/data/dspark/golden.json (the whole trained block, as llama.cpp runs it) and
tests/data/dspark/golden_truncated.json (the drafter's default: only the block rows the budget
needs), both read by tests/dspark/dspark_golden_test.cc.
"""
import json
import os
import sys

import numpy as np

from dspark_train import gguf_reader  # tools/train on PYTHONPATH

HERE = os.path.dirname(os.path.abspath(__file__))

gguf_reader._GGML_DTYPE.setdefault(27, np.int64)  # d2t is GGML_TYPE_I64


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_neox(x, pos, base):
    """x [T, H, D], pos [T]: rotate (i, i + D/2) by pos * base^(-2i/D)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def load(path):
    f = gguf_reader.read(path)
    W = {k: np.asarray(v, dtype=np.int64 if v.dtype == np.int64 else np.float64) for k, v in f.tensors.items()}
    return f.metadata, W


def target_taps(md, W, ids, layers):
    """Residual stream entering each layer in `layers` (n_layer = after the last layer), [T, E] each."""
    a = "qwen3"
    n_layer, H, Hkv = md[f"{a}.block_count"], md[f"{a}.attention.head_count"], md[f"{a}.attention.head_count_kv"]
    hd, eps, base = md[f"{a}.attention.key_length"], md[f"{a}.attention.layer_norm_rms_epsilon"], md[f"{a}.rope.freq_base"]
    T = len(ids)
    pos = np.arange(T)
    x = W["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    taps = {}
    for il in range(n_layer):
        taps[il] = x.copy()
        p = f"blk.{il}."
        h = rms(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "attn_q.weight"].T).reshape(T, H, hd)
        k = (h @ W[p + "attn_k.weight"].T).reshape(T, Hkv, hd)
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, Hkv, hd)
        q = rope_neox(rms(q, W[p + "attn_q_norm.weight"], eps), pos, base)
        k = rope_neox(rms(k, W[p + "attn_k_norm.weight"], eps), pos, base)
        out = np.empty((T, H, hd))
        for hh in range(H):
            kv = hh // (H // Hkv)
            s = q[:, hh] @ k[:, kv].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(T, -1) @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"], eps)
        g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "ffn_down.weight"].T
    taps[n_layer] = x.copy()
    return [taps[l] for l in layers]


def first_draft_slot(dmd):
    """Block slot of the first draft token: 0 when the anchor's own row predicts it, else 1."""
    return 0 if dmd.get("dflash.sample_from_anchor", True) else 1


def truncated_rows(dmd, budget):
    """Block rows the drafter runs by default: only those the budget's draft slots need."""
    B = dmd["dflash.block_size"]
    first = first_draft_slot(dmd)
    return min(B, min(budget, B - first) + first)


def draft_block(dmd, D, tW, feats, anchor, rows=None):
    """feats [n, L_t*E] for positions 0..n-1; the block [anchor, MASK...] at positions n.. .

    rows: how many block rows to run (default the whole trained block). Fewer rows means the
    dropped trailing MASK rows are absent from the attention altogether (as keys, values and
    queries): in a bidirectional block that changes every kept row's output."""
    a = "dflash"
    H, Hkv = dmd[f"{a}.attention.head_count"], dmd[f"{a}.attention.head_count_kv"]
    hd, eps, base = dmd[f"{a}.attention.key_length"], dmd[f"{a}.attention.layer_norm_rms_epsilon"], dmd[f"{a}.rope.freq_base"]
    B = dmd[f"{a}.block_size"] if rows is None else rows
    causal = bool(dmd.get(f"{a}.attention.causal", False))
    mask_id = dmd["tokenizer.ggml.mask_token_id"]
    n = feats.shape[0]
    g = feats @ D["fc.weight"].T
    if "fc.scale" in D:
        g = g * D["fc.scale"].reshape(-1)[0]
    g = rms(g, D["enc.output_norm.weight"], eps)
    embd = D.get("token_embd.weight", tW["token_embd.weight"])
    block = [anchor] + [mask_id] * (B - 1)
    x = embd[block]
    ctx_pos, blk_pos = np.arange(n), np.arange(n, n + B)
    n_layer = dmd[f"{a}.block_count"]
    for il in range(n_layer):
        p = f"blk.{il}."
        kc = rope_neox(rms((g @ D[p + "attn_k.weight"].T).reshape(n, Hkv, hd), D[p + "attn_k_norm.weight"], eps), ctx_pos, base)
        vc = (g @ D[p + "attn_v.weight"].T).reshape(n, Hkv, hd)
        h = rms(x, D[p + "attn_norm.weight"], eps)
        q = rope_neox(rms((h @ D[p + "attn_q.weight"].T).reshape(B, H, hd), D[p + "attn_q_norm.weight"], eps), blk_pos, base)
        kb = rope_neox(rms((h @ D[p + "attn_k.weight"].T).reshape(B, Hkv, hd), D[p + "attn_k_norm.weight"], eps), blk_pos, base)
        vb = (h @ D[p + "attn_v.weight"].T).reshape(B, Hkv, hd)
        K, V = np.concatenate([kc, kb]), np.concatenate([vc, vb])
        bias = np.zeros((B, n + B))
        if causal:
            bias[:, n:] = np.triu(np.full((B, B), -np.inf), 1)
        sinks = D.get(p + "attn_sinks.weight")
        out = np.empty((B, H, hd))
        for hh in range(H):
            kv = hh // (H // Hkv)
            s = q[:, hh] @ K[:, kv].T / np.sqrt(hd) + bias
            if sinks is not None:  # one extra logit per head that carries no value
                s = np.concatenate([s, np.full((B, 1), sinks[hh])], axis=1)
            s = np.exp(s - s.max(-1, keepdims=True))
            s = s / s.sum(-1, keepdims=True)
            out[:, hh] = s[:, : n + B] @ V[:, kv]
        x = x + out.reshape(B, -1) @ D[p + "attn_output.weight"].T
        h = rms(x, D[p + "ffn_norm.weight"], eps)
        gg, u = h @ D[p + "ffn_gate.weight"].T, h @ D[p + "ffn_up.weight"].T
        x = x + (gg / (1 + np.exp(-gg)) * u) @ D[p + "ffn_down.weight"].T
    hid = rms(x, D["output_norm.weight"], eps)
    V_t = tW["token_embd.weight"].shape[0]
    out_w = D.get("output.weight", tW.get("output.weight", tW["token_embd.weight"]))
    ld = hid @ out_w.T
    if "d2t" in D:
        logits = np.full((B, V_t), -np.inf)
        logits[:, D["d2t"]] = ld
    else:
        logits = ld
    return block, hid, logits


def chain(dmd, D, hid, logits, anchor, budget):
    """Greedy Markov chain with confidences over the layout's draft slots."""
    first = first_draft_slot(dmd)
    B = logits.shape[0]
    V = logits.shape[1]
    scale = D["markov_w2.scale"].reshape(-1)[0] if "markov_w2.scale" in D else 1.0
    prev, toks, zs, confs = anchor, [], [], []
    for slot in range(first, min(B, first + budget)):
        z = logits[slot].copy()
        if "markov_w1.weight" in D:
            e = D["markov_w1.weight"][prev]
            bd = D["markov_w2.weight"] @ e * scale
            if "d2t" in D:
                b = np.zeros(V)
                b[D["d2t"]] = bd
            else:
                b = bd
            z = z + b
            if "conf_proj.weight" in D:
                w = D["conf_proj.weight"].reshape(-1)
                c = float(w @ np.concatenate([hid[slot], e]) + D["conf_proj.bias"].reshape(-1)[0])
                confs.append(1 / (1 + np.exp(-c)))
        tok = int(np.argmax(z))  # first maximum, as dspark::Argmax
        toks.append(tok)
        zs.append(z)
        prev = tok
    return toks, zs, confs


def finite(rows):
    return [[None if not np.isfinite(v) else round(float(v), 7) for v in r] for r in rows]


def run_case(tmd, tW, src, which, prompt, split, budget, truncated):
    dmd, D = load(os.path.join(src, f"golden_draft_{which}.gguf"))
    layers = list(dmd["dflash.target_layers"])
    n = len(prompt) - 1
    feats = np.concatenate(target_taps(tmd, tW, prompt[:n], layers), axis=1)
    anchor = prompt[-1]
    rows = truncated_rows(dmd, budget) if truncated else None
    block, hid, logits = draft_block(dmd, D, tW, feats, anchor, rows)
    toks, zs, confs = chain(dmd, D, hid, logits, anchor, budget)
    case = {"draft": which, "prompt": prompt, "split": split, "budget": budget, "block": block,
            "hidden": finite(hid), "logits": finite(logits), "tokens": toks,
            "biased_logits": finite(zs), "confidence": [round(float(c), 7) for c in confs]}
    note = ""
    if truncated:
        # How far the kept rows are from the same rows of the whole block (0 when causal).
        _, full_hid, full_logits = draft_block(dmd, D, tW, feats, anchor)
        r = len(block)
        fin = np.isfinite(logits)
        note = (f" rows {r}/{dmd['dflash.block_size']}, max |d logit| vs whole block "
                f"{np.abs(logits[fin] - full_logits[:r][fin]).max():.3g}")
    print(f"draft {which}: prompt {len(prompt)} tokens, budget {budget} -> drafts {toks} "
          f"conf {np.round(confs, 3).tolist()}{note}")
    return case


def main():
    src = sys.argv[1]
    tmd, tW = load(os.path.join(src, "golden_target.gguf"))
    cases = [
        ("a", [1, 5, 9, 22, 40, 7, 31, 18, 50], 4, 5),
        ("a", [1, 44], 0, 3),
        ("b", [1, 12, 6, 33, 41, 8, 27, 19, 55, 3, 38, 14], 7, 5),
        ("b", [1, 9, 9, 30, 2], 2, 2),
    ]
    # The drafter's default (truncated) block: only the rows the budget needs. Draft a is
    # bidirectional (kept rows change), draft b causal (kept rows equal the whole block's).
    truncated_cases = cases + [
        ("a", [1, 5, 9, 22, 40, 7, 31, 18, 50], 4, 1),
        ("a", [1, 17, 3, 52, 26, 11], 2, 2),
        ("a", [1, 8, 45, 13, 29, 36, 4], 3, 4),
        ("b", [1, 12, 6, 33, 41, 8, 27, 19, 55, 3, 38, 14], 7, 3),
    ]
    out = [run_case(tmd, tW, src, *c, truncated=False) for c in cases]
    with open(os.path.join(HERE, "golden.json"), "w") as fh:
        json.dump({"generator": "tests/data/dspark/make_golden.py", "cases": out}, fh, separators=(",", ":"))
    print("truncated blocks:")
    out = [run_case(tmd, tW, src, *c, truncated=True) for c in truncated_cases]
    with open(os.path.join(HERE, "golden_truncated.json"), "w") as fh:
        json.dump({"generator": "tests/data/dspark/make_golden.py", "full_block": False, "cases": out}, fh,
                  separators=(",", ":"))


if __name__ == "__main__":
    main()
