"""Golden outputs of the reference target for the C++ engine's tests (tests/data/golden/).

Logits: one small GGUF per fixed token sequence (the engine already reads GGUF), see
tests/data/golden/README.md for the keys. They are computed by PyTorch in float32 from the
weights *as stored in* models/ref-target.gguf and cross-checked against the float64 numpy
reference (ref_forward.py); the largest difference is recorded as golden.ref_max_abs_diff.

DSpark drafter (with --dspark): per fixed context, the block's Markov-biased logits (slots 0-1 in
full, max/logsumexp for all), the greedy draft chain and the confidences, as llama.cpp drafts them.

Tokenizer vectors: ref-vocab.gguf (the tokenizer metadata alone) with .inp/.out files in
llama.cpp's test-tokenizer-0 format (inputs separated by "\\n__ggml_vocab_test__\\n"; one line of
ids per input, no BOS), produced by sentencepiece and checked against llama_spm.py.

    /usr/bin/python3 -m dspark_train export-golden
"""
import argparse
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from . import corpus
from . import gguf_model
from . import gguf_vocab
from . import gguf_writer as gw
from . import llama_spm
from . import ref_forward
from . import tokenizer as tok
from .model import Qwen3
from .paths import REPO_ROOT, TARGET_GGUF

GOLDEN_DIR = REPO_ROOT / "tests" / "data" / "golden"
N_LOGIT_POSITIONS = 4  # full logits are kept for the last positions only (file size)
SHORT_TEXT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'

# Edge cases for the tokenizer, then held-out code.
TOKENIZER_EDGE_CASES = [
    "", " ", "  ", "\n", "\n\n", "\t", " \n  \n", "    ", "        return x\n",
    "x = 1  # comment\n", "12345 + 0.5e-3", "caf\u00e9 \u20ac \U0001F600 \u4e2d\u6587", "<mask>", "<s></s>",
    "\r\n", "a\u00a0b", "def f(*args, **kwargs):\n\tpass\n", "'''\n'''", "    \n        \n",
]


def sequences(sp, n_ctx):
    val = [t for _, t in corpus.documents("val")]
    stream = np.concatenate([np.asarray(tok.encode_doc(sp, t)) for t in val])
    medium = [tok.BOS_ID] + sp.encode(val[0])[:min(200, n_ctx) - 1]
    return {
        "short": [tok.BOS_ID] + sp.encode(SHORT_TEXT),
        "medium": medium,
        "long": stream[:n_ctx].tolist(),  # a full context window, crossing a document boundary
    }


def write_logits(path, model_path, ids):
    cfg, state, _ = gguf_model.load_qwen3(model_path)
    m = Qwen3(cfg).eval()
    m.load_state_dict(state)
    with torch.no_grad():
        logits = m(torch.tensor([ids]))[0].numpy().astype(np.float32)
    ref = ref_forward.forward(model_path, ids)
    diff = float(np.abs(ref - logits).max())
    assert diff < 1e-2, f"PyTorch and numpy reference differ by {diff}"
    assert (ref.argmax(-1) == logits.argmax(-1)).mean() > 0.99
    lse = np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1)) + ref.max(-1)
    pos = list(range(max(0, len(ids) - N_LOGIT_POSITIONS), len(ids)))
    w = gw.GGUFWriter()
    w.add_str("general.type", "dspark-golden")
    w.add_str("golden.model_file", os.path.relpath(model_path, REPO_ROOT))
    w.add_str("golden.model_sha256", hashlib.sha256(Path(model_path).read_bytes()).hexdigest())
    w.add_str("golden.computed_by", "PyTorch float32 on the GGUF's weights (tools/train/dspark_train/export_golden.py)")
    w.add_f32("golden.ref_max_abs_diff", diff)
    w.add_u32("golden.n_tokens", len(ids))
    w.add_array("golden.tokens", gw.INT32, ids)
    w.add_array("golden.argmax", gw.INT32, logits.argmax(-1).tolist())
    w.add_array("golden.max_logit", gw.FLOAT32, logits.max(-1).tolist())
    w.add_array("golden.logsumexp", gw.FLOAT32, lse.astype(np.float32).tolist())
    w.add_array("golden.logit_positions", gw.INT32, pos)
    w.add_tensor("logits", logits[pos], gw.GGML_F32)  # ne = [n_vocab, n_positions]
    w.write(path)
    return diff


def write_dspark(path, target_path, dspark_path, ids):
    """Drafter outputs for context ids[:-1] and anchor ids[-1] (positions 0..n-1 and n), exactly as
    llama.cpp's driver runs one block: per-slot Markov-biased logits, the greedy chain, confidences."""
    from . import eval_drafters
    from . import teacher as teacher_mod
    target = teacher_mod.load_target(target_path)
    ds = eval_drafters.load_dspark(dspark_path)
    n = len(ids) - 1
    with torch.no_grad():
        _, tapped = target.hidden_states(torch.tensor([ids]), taps=tuple(ds.c.target_layer_ids))
        taps = torch.cat([tapped[l] for l in ds.c.target_layer_ids], -1)
        toks, confs, z = ds.draft(target.tok_embd.weight, taps[:, :n], ids[-1], n)
    z = z.numpy().astype(np.float32)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    w = gw.GGUFWriter()
    w.add_str("general.type", "dspark-golden-drafter")
    w.add_str("golden.model_file", os.path.relpath(target_path, REPO_ROOT))
    w.add_str("golden.model_sha256", hashlib.sha256(Path(target_path).read_bytes()).hexdigest())
    w.add_str("golden.drafter_file", os.path.relpath(dspark_path, REPO_ROOT))
    w.add_str("golden.drafter_sha256", hashlib.sha256(Path(dspark_path).read_bytes()).hexdigest())
    w.add_str("golden.computed_by", "PyTorch float32 on the GGUFs' weights (tools/train/dspark_train/export_golden.py)")
    w.add_array("golden.tokens", gw.INT32, ids)          # context (positions 0..n-1), then the anchor
    w.add_u32("golden.anchor_pos", n)
    w.add_array("golden.draft_tokens", gw.INT32, toks)   # greedy Markov chain, slot k predicts pos n+k+1
    w.add_array("golden.confidence", gw.FLOAT32, confs)  # sigmoid(conf_proj [h_k ; W1[prev_k]])
    w.add_array("golden.max_logit", gw.FLOAT32, z.max(-1).tolist())
    w.add_array("golden.logsumexp", gw.FLOAT32, lse.astype(np.float32).tolist())
    w.add_array("golden.logit_slots", gw.INT32, [0, 1])
    w.add_tensor("logits", z[:2], gw.GGML_F32)             # ne = [n_vocab, 2]: slots 0 and 1, biased
    w.write(path)
    return toks


def write_tokenizer_vectors(sp, out_dir: Path):
    w = gw.GGUFWriter()
    w.add_str("general.architecture", "qwen3")
    w.add_str("general.name", "dspark-ref vocabulary")
    gguf_vocab.add_tokenizer(w, sp)
    vocab = out_dir / "ref-vocab.gguf"
    w.write(vocab)
    texts = list(TOKENIZER_EDGE_CASES)
    for _, t in corpus.documents("val"):  # held-out code: the first ~1,500 characters of each file
        lines, n = [], 0
        for line in t.splitlines(keepends=True):
            if n + len(line) > 1500:
                break
            lines.append(line)
            n += len(line)
        texts.append("".join(lines))
    ll = llama_spm.LlamaSpm.from_gguf(vocab)
    outs = []
    for t in texts:
        ids = sp.encode(t)
        assert ids == ll.encode(t), f"sentencepiece and llama.cpp's algorithm disagree on {t[:40]!r}"
        assert "\n__ggml_vocab_test__\n" not in t
        outs.append(" ".join(map(str, ids)))
    (out_dir / "ref-vocab.gguf.inp").write_text("".join(t + "\n__ggml_vocab_test__\n" for t in texts))
    (out_dir / "ref-vocab.gguf.out").write_text("".join(" " + o + "\n" for o in outs))
    return len(texts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(TARGET_GGUF))
    ap.add_argument("--out-dir", default=str(GOLDEN_DIR))
    ap.add_argument("--dspark", default=None, help="also write DSpark drafter outputs (e.g. models/ref-dspark.gguf)")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sp = tok.load()
    n_ctx = gguf_model.load_qwen3(a.model)[0].n_ctx
    for name, ids in sequences(sp, n_ctx).items():
        p = out / f"target-logits-{name}.gguf"
        diff = write_logits(p, a.model, ids)
        print(f"{p}: {len(ids)} tokens, max |torch - numpy| {diff:.2e}, {p.stat().st_size} bytes")
    if a.dspark:
        seqs = sequences(sp, n_ctx)
        for name, ids in (("short", seqs["short"]), ("medium", seqs["medium"][:min(160, n_ctx - 16)])):
            p = out / f"dspark-draft-{name}.gguf"
            toks = write_dspark(p, a.model, a.dspark, ids)
            print(f"{p}: anchor at {len(ids) - 1}, drafts {toks}")
    n = write_tokenizer_vectors(sp, out)
    print(f"tokenizer vectors: {n} texts -> {out}/ref-vocab.gguf.inp/.out")


if __name__ == "__main__":
    main()
