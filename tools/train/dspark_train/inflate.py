"""Function-preserving inflation of a qwen3 target, and of its DSpark drafter, into a larger shape.

The bundled target (8 blocks of width 384) runs from the CPU's cache, where a pass over several
tokens costs nearly as much per token as a pass over one: unlike a real model, whose decoding is
bound by streaming its weights. Inflated to a real model's size (`--shape 1.7b`: width 2304, 28
blocks, 1.6 B parameters, Qwen3-1.7B's size and cost), every token streams gigabytes of weights,
while the model still predicts what the small one does, so the bundled drafters keep their
acceptance.

Width x m, by tiling. Every width-like dimension (residual channels, attention heads, FFN neurons)
is repeated m times, copy-major: [copy 0 | copy 1 | ...]. A matrix's rows are tiled where it
produces such a dimension; its columns are tiled and divided by m where it consumes one. A copy of
an output then sums m equal terms of (input / m): the original output, so every activation of the
inflated model is the tiled original. RMSNorm of m copies of x has x's mean square, so with its
weight tiled it gives the tiled original. Heads stay 64 wide and the per-head q/k norms are kept.
GQA still pairs the right heads: with g = n_head / n_head_kv, q head c*n_head + i (copy c of head i)
reads kv head (c*n_head + i) // g = c*n_head_kv + i // g, copy c of its original kv head. The tied
embedding is untied: token_embd is tiled (a producer of residual channels, not divided) and
output.weight = token_embd tiled / m (a consumer). The F16 rounding of w / m is the only change
to the function (relative 2^-11 at most, none for m a power of two).

Depth, by identity blocks. The original blocks sit spread evenly among the new ones (8 -> 28 at
0, 4, 8, 12, 15, 19, 23, 27); every other block adds zero to the residual stream: its attention
output and FFN down projections are zero, while q/k/v and gate/up are random, N(0, 1/fan_in) from
a fixed seed, so that the block costs what a real one does (quantisation keeps zeros exact).

The DSpark drafter (llama.cpp `dflash` layout) is as wide as its target (it embeds tokens with the
target's table and reads out through the target's head), so its residual stream is tiled with the
same map: fc's columns per tapped layer, conf_proj's hidden part, the norms. Its taps move to the
new index of the same original layer's output. It then drafts, for the inflated target, what it
drafted for the small one. The Markov head (indexed by token ids) is unchanged. Its blocks keep
their own heads and FFN neurons (dflash.attention.key_length says the head size, so heads x 64
need not equal the width): q/k/v and gate/up consume the tiled stream (columns tiled / m), the
attention output and FFN down produce it (rows tiled). A block then costs m times the small one's,
what a drafter of that capacity costs at the target's width, and not m^2, which tiling its heads
and neurons too would add for nothing (`--dspark-tile-blocks` writes that form, for comparison).

An EAGLE-3 head (llama.cpp `eagle3`, `--eagle3`) keeps its own width: its taps move the same way,
fc's input columns are tiled per tap / m (its output is the head's width), and it gets its own
embedding and LM head (the small target's), the inflated target's being m times wider.

Sparse upcycling (`--moe-experts E --moe-used K`, `--shape moe`): a qwen3moe target, every FFN
(the identity blocks' too) replaced by E experts that are each an exact copy of the (inflated) dense
FFN, behind a random router (ffn_gate_inp, F32). qwen3moe normalises the K chosen experts' weights
to sum 1, so the block adds sum_k w_k FFN(x) = FFN(x) whatever the router chooses: the model still
predicts what the small target does, while each token reads K of the E experts, different ones
for different tokens, as a real mixture does. A verification pass over several tokens then reads
the union of their experts: more bytes per pass than one token, the cost that decides whether
speculation pays on a mixture. The router is N(0, s^2) with s = 1 / (sqrt(n_embd) * rms(ffn_norm)),
so its logits over experts have a standard deviation near 1: a spread of weights like a trained
router's (the output does not depend on it).

The output is F16 (F32 vectors and routers), deterministic: the same inputs and arguments give the
same bytes.

    /usr/bin/python3 -m dspark_train inflate --shape 1.7b --out build/models/ref-target-1.7b-F16.gguf \\
        --dspark models/ref-dspark.gguf --dspark-out build/models/ref-dspark-1.7b-F16.gguf \\
        --eagle3 models/ref-eagle3.gguf --eagle3-out build/models/ref-eagle3-1.7b-F16.gguf
    /usr/bin/python3 -m dspark_train inflate --shape moe --out build/models/ref-target-moe-F16.gguf
"""
import argparse
import hashlib
import math
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from . import gguf_reader
from . import gguf_writer as gw
from .paths import DSPARK_GGUF, EAGLE3_GGUF, TARGET_GGUF

# name -> (width multiplier, blocks, experts, experts used; 0 experts: a dense qwen3).
# 1.7b: 2304 wide (36/12 heads of 64, FFN 6144), 28 blocks: 1.60 B parameters, Qwen3-1.7B's weight
# bytes per token (its 151k vocabulary aside).
# moe: 768 wide (12/4 heads of 64), 34 blocks of 64 experts of width 2048, 8 used: 10.3 B parameters,
# 1.35 B active per token (6.2 GB at Q4_K_M), near the dense 1.7b's bytes per token. With 64
# experts and 8 used, ~2 B active would mean ~16 B in all: a 33 GB F16 intermediate and well over
# 20 minutes of single-threaded quantising on 2 cores; this one builds in about 11, and 64 experts
# with 8 used give the same routing statistics (a pass over k tokens reads the union of their
# experts) at any size.
SHAPES = {"1.7b": (6, 28, 0, 0), "moe": (2, 34, 64, 8)}
SEED = 1729

# Per-block tensors, by suffix. Vectors over residual channels or heads are tiled; the per-head
# q/k norms (over head_dim) and per-tensor scales are kept.
_TILED_VECTORS = {"attn_norm.weight", "ffn_norm.weight", "attn_sinks.weight"}
_KEPT_VECTORS = {"attn_q_norm.weight", "attn_k_norm.weight"}
# Every block matrix maps tiled dimensions to tiled dimensions: rows tiled, columns tiled / m.
_MATRICES = {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
             "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}
# The block matrices that write the residual stream (the rest read it). An identity block writes
# nothing into it: these are zero there.
_STREAM_WRITERS = {"attn_output.weight", "ffn_down.weight"}
_ZERO_IN_IDENTITY = _STREAM_WRITERS
# Sparse upcycling: each dense FFN matrix becomes the stack of its expert copies (llama.cpp's names).
_EXPERT_OF = {"ffn_gate.weight": "ffn_gate_exps.weight", "ffn_up.weight": "ffn_up_exps.weight",
              "ffn_down.weight": "ffn_down_exps.weight"}
ROUTER = "ffn_gate_inp.weight"


def block_positions(n_src: int, n_dst: int) -> list:
    """New index of each original block: spread evenly, first and last kept at the ends."""
    if n_dst < n_src:
        raise ValueError(f"--blocks {n_dst} is fewer than the model's {n_src} blocks")
    if n_src == 1:
        return [0]
    return [int(math.floor(i * (n_dst - 1) / (n_src - 1) + 0.5)) for i in range(n_src)]


def tap_index(t: int, pos: list) -> int:
    """dflash.target_layers value t (the stream entering original layer t = original layer t-1's
    output; 0 = the embeddings) for the inflated target: the same original layer's output."""
    return 0 if t == 0 else pos[t - 1] + 1


# -- the channel map: numpy shapes are [out, in] (a Linear weight; ne = [in, out]) --

def tile_vector(v, m):
    return np.tile(np.asarray(v), m)


def tile_matrix(w, m, rows=True, cols=True):
    """Rows tiled (a producer of a tiled dimension), columns tiled / m (a consumer of one). The
    division is done once, in float64, before tiling: every copy holds the same rounded value."""
    a = np.asarray(w, dtype=np.float64)
    if cols:
        a = np.tile(a / m, (1, m))
    if rows:
        a = np.tile(a, (m, 1))
    return a


def tile_fc(w, m, n_taps, rows=True):
    """fc [E, L*E_t] reads the concatenated taps [h_1 | ... | h_L]; each tap block is tiled / m.
    rows: its output is tiled too (the DSpark drafter, as wide as the target); an EAGLE-3 head
    keeps its own width (rows=False)."""
    e = w.shape[0]
    a = np.asarray(w, dtype=np.float64).reshape(e, n_taps, 1, -1) / m
    a = np.broadcast_to(a, (e, n_taps, m, a.shape[-1])).reshape(e, -1)
    return np.tile(a, (m, 1)) if rows else a


def tile_taps_vector(v, m, n_taps):
    """A vector over the concatenated taps (eagle3's enc.output_norm [L*E_t]), tiled per tap."""
    a = np.asarray(v).reshape(n_taps, 1, -1)
    return np.broadcast_to(a, (n_taps, m, a.shape[-1])).reshape(-1)


def tile_conf(w, m, n_embd):
    """conf_proj [1, E + R] reads [hidden ; Markov embedding]: the hidden part tiled / m."""
    a = np.asarray(w, dtype=np.float64)
    return np.concatenate([np.tile(a[:, :n_embd] / m, (1, m)), a[:, n_embd:]], axis=1)


def identity_tensor(suffix, shape, seed, block):
    if suffix in _ZERO_IN_IDENTITY:
        return np.zeros(shape, dtype=np.float16)
    if suffix in _MATRICES:
        # One stream per (seed, block, tensor): a tensor's values do not depend on the others.
        ss = np.random.SeedSequence([seed, block, zlib.crc32(suffix.encode())])
        rng = np.random.Generator(np.random.PCG64(ss))
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / math.sqrt(shape[1]))
    if suffix in _TILED_VECTORS or suffix in _KEPT_VECTORS:
        return np.ones(shape, dtype=np.float32)
    raise ValueError(f"no identity value for a block tensor '{suffix}'")


def router_tensor(n_expert, n_embd, norm_rms, seed, block):
    """ffn_gate_inp [n_expert, n_embd]: N(0, s^2), s = 1 / (sqrt(n_embd) * norm_rms), so that the
    logits of an input of RMS norm_rms (the block's ffn_norm output) spread with std about 1."""
    ss = np.random.SeedSequence([seed, block, zlib.crc32(ROUTER.encode())])
    rng = np.random.Generator(np.random.PCG64(ss))
    scale = 1.0 / (math.sqrt(n_embd) * norm_rms)
    return (rng.standard_normal((n_expert, n_embd)) * scale).astype(np.float32)


def expert_copies(dense, n_expert):
    """[n_expert, *dense.shape]: n_expert copies of the dense matrix, rounded to F16 once."""
    a = np.asarray(dense).astype(np.float16)
    return np.broadcast_to(a[None], (n_expert,) + a.shape)


# -- files --

def _split_block(name):
    """('blk', il, suffix) for blk.N.suffix, else (None, None, name)."""
    if name.startswith("blk."):
        _, il, suffix = name.split(".", 2)
        return "blk", int(il), suffix
    return None, None, name


def _copy_metadata(w, f, replace, add, rename=None):
    """Every key of f in its order and type, with the values in `replace` ({key: value}) and the
    names rename(key) (when given); then the keys in `add` ({key: (gguf type, value)}, arrays as
    (ARRAY, (element type, values)))."""
    for key, value in f.metadata.items():
        value = replace.get(key, value)
        name = rename(key) if rename else key
        if f.types[key] == gw.ARRAY:
            w.add_array(name, f.array_types[key], value)
        else:
            w.add(name, f.types[key], value)
    missing = set(replace) - set(f.metadata)
    if missing:
        raise ValueError(f"{f.path}: no metadata key {sorted(missing)}")
    for key, (vtype, value) in add.items():
        if vtype == gw.ARRAY:
            w.add_array(key, *value)
        else:
            w.add(key, vtype, value)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


class _Bar:
    """One progress line on stderr, redrawn when it grows (a few dozen writes, also in a log file).
    It fills by bytes, not by tensors: an upcycled model's expert stacks are most of the file."""

    def __init__(self, label, sizes):
        self.label, self.shown, self.t0 = label, -1, time.monotonic()
        self.done = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])  # bytes before tensor i

    def __call__(self, i, n, name):
        total = int(self.done[-1])
        filled = int(30 * int(self.done[i]) // max(1, total))
        if filled == self.shown and i != n:
            return
        self.shown = filled
        print(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {int(self.done[i]) / 1e9:.2f}/{total / 1e9:.2f} GB "
              f"{i}/{n} tensors {time.monotonic() - self.t0:.0f} s {name[:28]:<28}",
              end="\n" if i == n else "", file=sys.stderr, flush=True)


def _write(w, out, label):
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    sizes = [int(np.prod(shape, dtype=np.int64)) * np.dtype(gw._GGML_NP[gtype]).itemsize for _, shape, gtype, _ in w.tensors]
    digest = w.write(tmp, progress=_Bar(label, sizes))
    os.replace(tmp, out)
    return digest


def target_writer(f, m, n_blocks, seed, name, source_sha256, n_expert=0, n_used=0):
    """(GGUFWriter of the inflated qwen3 target, block positions); with n_expert, of the upcycled
    qwen3moe target (n_expert copies of each FFN, n_used chosen per token)."""
    md = f.metadata
    arch = md.get("general.architecture")
    if arch != "qwen3":
        raise ValueError(f"{f.path}: architecture {arch!r}; inflate reads qwen3 targets")
    n_src = md["qwen3.block_count"]
    n_head, n_head_kv = md["qwen3.attention.head_count"], md["qwen3.attention.head_count_kv"]
    if n_head % n_head_kv:
        raise ValueError(f"{f.path}: n_head {n_head} is not a multiple of n_head_kv {n_head_kv}")
    if n_expert and not 1 <= n_used <= n_expert:
        raise ValueError(f"{n_used} experts used of {n_expert}: need 1 <= used <= experts")
    pos = block_positions(n_src, n_blocks)
    src_of = {p: i for i, p in enumerate(pos)}
    n_embd, n_ff = md["qwen3.embedding_length"] * m, md["qwen3.feed_forward_length"] * m

    w = gw.GGUFWriter()
    out_arch = "qwen3moe" if n_expert else "qwen3"
    # qwen3moe's keys are qwen3's under its own prefix, plus the experts' (feed_forward_length, the
    # dense width, stays: each expert is that wide).
    moe_keys = {
        "qwen3moe.expert_count": (gw.UINT32, n_expert),
        "qwen3moe.expert_used_count": (gw.UINT32, n_used),
        "qwen3moe.expert_feed_forward_length": (gw.UINT32, n_ff),
    } if n_expert else {}
    _copy_metadata(w, f, {
        "general.architecture": out_arch,
        "general.name": name,
        "qwen3.block_count": n_blocks,
        "qwen3.embedding_length": n_embd,
        "qwen3.feed_forward_length": n_ff,
        "qwen3.attention.head_count": n_head * m,
        "qwen3.attention.head_count_kv": n_head_kv * m,
    }, {
        **moe_keys,
        "dspark.inflate.source_sha256": (gw.STRING, source_sha256),
        "dspark.inflate.width_mult": (gw.UINT32, m),
        "dspark.inflate.seed": (gw.UINT64, seed),
        "dspark.inflate.source_blocks": (gw.ARRAY, (gw.INT32, pos)),  # new index of original block i
    }, rename=lambda k: out_arch + k[len("qwen3"):] if k.startswith("qwen3.") else k)
    T, info = f.tensors, f.tensor_info
    unknown = [n for n in T if not n.startswith("blk.") and n not in ("token_embd.weight", "output_norm.weight",
                                                                      "output.weight")]
    if unknown:
        raise ValueError(f"{f.path}: no inflation rule for tensor(s) {unknown}")
    suffixes = [s for kind, il, s in map(_split_block, T) if kind and il == 0]

    def add(name, src_name, shape, produce):
        w.add_tensor_lazy(name, shape, info[src_name][1], produce)

    # In llama.cpp's converter's order: embedding, blocks, final norm, head.
    emb = T["token_embd.weight"]
    add("token_embd.weight", "token_embd.weight", (emb.shape[0], emb.shape[1] * m),
        lambda: np.tile(np.asarray(emb), (1, m)))  # a producer of residual channels: not divided
    for j in range(n_blocks):
        for s in suffixes:
            src = f"blk.{src_of.get(j, 0)}.{s}"  # an identity block takes block 0's shapes and types
            shape = _inflated_block_shape(s, T[src].shape, m)
            if j in src_of:
                produce = lambda src=src, s=s: _inflate_block_tensor(s, T[src], m)
            else:
                produce = lambda s=s, shape=shape, j=j: identity_tensor(s, shape, seed, j)
            if not (n_expert and s in _EXPERT_OF):
                add(f"blk.{j}.{s}", src, shape, produce)
                continue
            if s == "ffn_gate.weight":  # the router goes first, as llama.cpp's converter writes it
                norm = T[f"blk.{src_of[j]}.ffn_norm.weight"] if j in src_of else np.ones(1)
                norm_rms = float(np.sqrt(np.mean(np.square(np.asarray(norm, dtype=np.float64)))))
                w.add_tensor_lazy(f"blk.{j}.{ROUTER}", (n_expert, n_embd), gw.GGML_F32,
                                  lambda j=j, r=norm_rms: router_tensor(n_expert, n_embd, r, seed, j))
            w.add_tensor_lazy(f"blk.{j}.{_EXPERT_OF[s]}", (n_expert,) + shape, gw.GGML_F16,
                              lambda p=produce: expert_copies(p(), n_expert))
    norm = T["output_norm.weight"]
    add("output_norm.weight", "output_norm.weight", (norm.shape[0] * m,), lambda: tile_vector(norm, m))
    # The LM head consumes residual channels: tiled / m; from the embedding when it was tied.
    head = T["output.weight"] if "output.weight" in T else emb
    w.add_tensor_lazy("output.weight", (head.shape[0], head.shape[1] * m), gw.GGML_F16,
                      lambda: tile_matrix(head, m, rows=False))
    return w, pos


def _matrix_tiling(suffix, keep_inner):
    """(rows tiled, columns tiled) of a block matrix. keep_inner: heads and FFN neurons are kept,
    only the residual stream is tiled (a reader's columns, a writer's rows)."""
    if not keep_inner:
        return True, True
    writes = suffix in _STREAM_WRITERS
    return writes, not writes


def _inflated_block_shape(suffix, shape, m, keep_inner=False):
    if suffix in _MATRICES:
        rows, cols = _matrix_tiling(suffix, keep_inner)
        return (shape[0] * (m if rows else 1), shape[1] * (m if cols else 1))
    if suffix in _TILED_VECTORS:
        return (shape[0] * m,)
    if suffix in _KEPT_VECTORS or suffix.endswith(".scale"):
        return tuple(shape)
    raise ValueError(f"no inflation rule for block tensor '{suffix}'")


def _inflate_block_tensor(suffix, a, m, keep_inner=False):
    if suffix in _MATRICES:
        rows, cols = _matrix_tiling(suffix, keep_inner)
        return tile_matrix(a, m, rows=rows, cols=cols)
    if suffix in _TILED_VECTORS:
        return tile_vector(a, m)
    return np.asarray(a)


def dspark_writer(f, m, n_embd_target, pos, name, source_sha256, tile_blocks=False):
    """GGUFWriter of the DSpark drafter for the inflated target (same channel map, taps moved). Its
    blocks keep their heads and FFN neurons, or with tile_blocks are tiled as the target's are."""
    md = f.metadata
    if md.get("general.architecture") != "dflash":
        raise ValueError(f"{f.path}: architecture {md.get('general.architecture')!r}, expected dflash")
    e = md["dflash.embedding_length"]
    if e != n_embd_target:
        raise ValueError(f"{f.path}: drafter width {e} differs from the target's {n_embd_target}")
    taps = list(md["dflash.target_layers"])
    if max(taps) > len(pos):
        raise ValueError(f"{f.path}: dflash.target_layers {taps} reach past the target's {len(pos)} layers")
    new_taps = [tap_index(t, pos) for t in taps]
    w = gw.GGUFWriter()
    block_mult = m if tile_blocks else 1
    _copy_metadata(w, f, {
        "general.name": name,
        "dflash.embedding_length": e * m,
        "dflash.feed_forward_length": md["dflash.feed_forward_length"] * block_mult,
        "dflash.attention.head_count": md["dflash.attention.head_count"] * block_mult,
        "dflash.attention.head_count_kv": md["dflash.attention.head_count_kv"] * block_mult,
        "dflash.target_layers": new_taps,
    }, {
        # Without them the head size would read as the new width over the kept head count.
        **{f"dflash.attention.{k}_length": (gw.UINT32, e // md["dflash.attention.head_count"])
           for k in ("key", "value") if f"dflash.attention.{k}_length" not in md},
        "dspark.inflate.source_sha256": (gw.STRING, source_sha256),
        "dspark.inflate.width_mult": (gw.UINT32, m),
    })
    T, info = f.tensors, f.tensor_info
    for n, a in T.items():
        kind, _, s = _split_block(n)
        gtype = info[n][1]
        if kind:
            keep = not tile_blocks
            produce = lambda s=s, a=a, keep=keep: _inflate_block_tensor(s, a, m, keep)
            shape = _inflated_block_shape(s, a.shape, m, keep)
        elif n == "fc.weight":
            produce, shape = (lambda a=a: tile_fc(a, m, len(taps))), (a.shape[0] * m, a.shape[1] * m)
        elif n in ("enc.output_norm.weight", "output_norm.weight"):
            produce, shape = (lambda a=a: tile_vector(a, m)), (a.shape[0] * m,)
        elif n == "token_embd.weight":  # a producer of residual channels
            produce, shape = (lambda a=a: np.tile(np.asarray(a), (1, m))), (a.shape[0], a.shape[1] * m)
        elif n == "output.weight":  # a consumer
            produce, shape = (lambda a=a: tile_matrix(a, m, rows=False)), (a.shape[0], a.shape[1] * m)
        elif n == "conf_proj.weight":
            produce, shape = (lambda a=a: tile_conf(a, m, e)), (a.shape[0], a.shape[1] + e * (m - 1))
        elif n in ("markov_w1.weight", "markov_w2.weight", "conf_proj.bias") or n.endswith(".scale"):
            produce, shape = (lambda a=a: np.asarray(a)), a.shape  # token-indexed or width-free
        else:
            raise ValueError(f"{f.path}: no inflation rule for tensor '{n}'")
        w.add_tensor_lazy(n, shape, gtype, produce)
    return w, new_taps


def eagle3_writer(f, m, target, pos, name, source_sha256):
    """GGUFWriter of an EAGLE-3 head (llama.cpp `eagle3`) for the inflated target. The head keeps
    its width: only what reads the target changes. Its taps move to the new index of the same
    original layer's output, fc's input columns follow the tiling (each tap block tiled / m, so fc
    of the tiled taps is fc of the original ones), a norm over the taps (norm_before_fc) is tiled per
    tap, and target_hidden_size is the new width. The inflated target's embedding and LM head are
    m times wider than the head, so the file carries its own: the small target's (token_embd, and
    output.weight or the tied embedding), unless it already had them."""
    md = f.metadata
    if md.get("general.architecture") != "eagle3":
        raise ValueError(f"{f.path}: architecture {md.get('general.architecture')!r}, expected eagle3")
    e_t = target.metadata["qwen3.embedding_length"]
    if md["eagle3.target_hidden_size"] != e_t:
        raise ValueError(f"{f.path}: target_hidden_size {md['eagle3.target_hidden_size']} is not the target's {e_t}")
    taps = list(md["eagle3.target_layers"])
    if max(taps) > len(pos):
        raise ValueError(f"{f.path}: eagle3.target_layers {taps} reach past the target's {len(pos)} layers")
    new_taps = [tap_index(t, pos) for t in taps]
    w = gw.GGUFWriter()
    _copy_metadata(w, f, {
        "general.name": name,
        "eagle3.target_layers": new_taps,
        "eagle3.target_hidden_size": e_t * m,
    }, {
        "dspark.inflate.source_sha256": (gw.STRING, source_sha256),
        "dspark.inflate.width_mult": (gw.UINT32, m),
    })
    T, info = f.tensors, f.tensor_info
    TT = target.tensors
    if "token_embd.weight" not in T or "output.weight" not in T:
        if md["eagle3.embedding_length"] != e_t:
            raise ValueError(f"{f.path}: the head ({md['eagle3.embedding_length']} wide) has no own tables and "
                             f"is not as wide as the target ({e_t}) whose tables it would use")
    if "token_embd.weight" not in T:
        emb = TT["token_embd.weight"]
        w.add_tensor_lazy("token_embd.weight", emb.shape, gw.GGML_F16, lambda: np.asarray(emb))
    for n, a in T.items():
        if n == "fc.weight":
            produce, shape = (lambda a=a: tile_fc(a, m, len(taps), rows=False)), (a.shape[0], a.shape[1] * m)
        elif n == "enc.output_norm.weight":
            produce, shape = (lambda a=a: tile_taps_vector(a, m, len(taps))), (a.shape[0] * m,)
        elif n.startswith("blk.") or n in ("output_norm.weight", "token_embd.weight", "output.weight", "d2t") \
                or n.endswith(".scale"):
            produce, shape = (lambda a=a: np.asarray(a)), a.shape  # the head's own width: unchanged
        else:
            raise ValueError(f"{f.path}: no inflation rule for tensor '{n}'")
        w.add_tensor_lazy(n, shape, info[n][1], produce)
    if "output.weight" not in T:
        head = TT["output.weight"] if "output.weight" in TT else TT["token_embd.weight"]
        w.add_tensor_lazy("output.weight", head.shape, gw.GGML_F16, lambda: np.asarray(head))
    return w, new_taps


def count_parameters(w, n_expert=0, n_used=0):
    """(parameters, parameters a token reads) of a writer's tensors: of an expert stack, the
    n_used experts chosen."""
    total = active = 0
    for name, shape, _, _ in w.tensors:
        n = int(np.prod(shape, dtype=np.int64))
        total += n
        active += n * n_used // n_expert if n_expert and name.endswith("_exps.weight") else n
    return total, active


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_GGUF), help="the qwen3 target to inflate (F16/F32 GGUF)")
    ap.add_argument("--out", help="the inflated target (F16 GGUF); without it only the drafter is converted")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="a named shape: " + ", ".join(
        f"{k} = width x{m}, {b} blocks" + (f", {e} experts ({u} used)" if e else "")
        for k, (m, b, e, u) in SHAPES.items()))
    ap.add_argument("--width-mult", type=int, help="width multiplier (overrides --shape's)")
    ap.add_argument("--blocks", type=int, help="blocks of the inflated target (overrides --shape's)")
    ap.add_argument("--moe-experts", type=int, help="write a qwen3moe target with this many copies of "
                    "each FFN as experts (overrides --shape's; 0: dense)")
    ap.add_argument("--moe-used", type=int, help="experts used per token (with --moe-experts)")
    ap.add_argument("--seed", type=int, default=SEED, help="seed of the identity blocks' random projections")
    ap.add_argument("--name", help="general.name of the inflated target (default: the source's, with the shape)")
    ap.add_argument("--dspark", help=f"also convert this DSpark drafter (dflash GGUF, e.g. {DSPARK_GGUF.name})")
    ap.add_argument("--dspark-out", help="where the converted drafter goes (with --dspark)")
    ap.add_argument("--dspark-tile-blocks", action="store_true", help="tile the drafter's heads and FFN neurons "
                    "as well (m^2 its blocks' cost for the same function; default: they are kept)")
    ap.add_argument("--eagle3", help=f"also convert this EAGLE-3 head (eagle3 GGUF, e.g. {EAGLE3_GGUF.name})")
    ap.add_argument("--eagle3-out", help="where the converted EAGLE-3 head goes (with --eagle3)")
    a = ap.parse_args(argv)
    if bool(a.dspark) != bool(a.dspark_out):
        ap.error("--dspark and --dspark-out go together")
    if bool(a.eagle3) != bool(a.eagle3_out):
        ap.error("--eagle3 and --eagle3-out go together")
    if not a.out and not a.dspark_out and not a.eagle3_out:
        ap.error("nothing to write: give --out, --dspark-out, --eagle3-out or several")

    f = gguf_reader.read(a.target)
    m, n_blocks, n_expert, n_used = SHAPES.get(a.shape, (1, f.metadata["qwen3.block_count"], 0, 0))
    m = a.width_mult or m
    n_blocks = a.blocks or n_blocks
    n_expert = n_expert if a.moe_experts is None else a.moe_experts
    n_used = (n_used if n_expert else 0) if a.moe_used is None else a.moe_used
    if m < 1:
        ap.error("--width-mult must be at least 1")
    if n_expert and not (n_used and 1 <= n_used <= n_expert):
        ap.error(f"--moe-used must be between 1 and the {n_expert} experts")
    if not n_expert and n_used:
        ap.error("--moe-used needs --moe-experts")
    overridden = a.width_mult or a.blocks or a.moe_experts is not None or a.moe_used is not None
    tag = a.shape if a.shape and not overridden else f"x{m}-{n_blocks}L" + (f"-e{n_expert}k{n_used}" if n_expert else "")
    name = a.name or f"{f.metadata.get('general.name', 'model')}-{tag}"

    w, pos = target_writer(f, m, n_blocks, a.seed, name, _sha256(a.target), n_expert, n_used)
    params, active = count_parameters(w, n_expert, n_used)
    experts = f", {n_expert} experts of which {n_used} used per token" if n_expert else ""
    print(f"inflate: {a.target}: width {f.metadata['qwen3.embedding_length']} -> "
          f"{f.metadata['qwen3.embedding_length'] * m}, blocks {f.metadata['qwen3.block_count']} -> {n_blocks} "
          f"(originals at {pos}){experts}, {params / 1e9:.3f} B parameters"
          + (f", {active / 1e9:.3f} B active" if n_expert else ""), file=sys.stderr, flush=True)
    digests = []
    if a.out:
        digests.append((_write(w, a.out, f"inflate {Path(a.out).name}"), a.out))
    if a.dspark:
        d = gguf_reader.read(a.dspark)
        dname = f"{d.metadata.get('general.name', 'dspark')}-{tag}"
        dw, taps = dspark_writer(d, m, f.metadata["qwen3.embedding_length"], pos, dname, _sha256(a.dspark),
                                 tile_blocks=a.dspark_tile_blocks)
        print(f"inflate: {a.dspark}: taps {list(d.metadata['dflash.target_layers'])} -> {taps}",
              file=sys.stderr, flush=True)
        digests.append((_write(dw, a.dspark_out, f"inflate {Path(a.dspark_out).name}"), a.dspark_out))
    if a.eagle3:
        d = gguf_reader.read(a.eagle3)
        ename = f"{d.metadata.get('general.name', 'eagle3')}-{tag}"
        ew, taps = eagle3_writer(d, m, f, pos, ename, _sha256(a.eagle3))
        print(f"inflate: {a.eagle3}: taps {list(d.metadata['eagle3.target_layers'])} -> {taps}",
              file=sys.stderr, flush=True)
        digests.append((_write(ew, a.eagle3_out, f"inflate {Path(a.eagle3_out).name}"), a.eagle3_out))
    for digest, path in digests:
        print(f"{digest}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
