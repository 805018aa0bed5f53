"""SentencePiece BPE tokenizer of the reference model family, and the token caches built with it.

Choices (each matters for llama.cpp / dspark compatibility, see shared/platform-notes.md):
- identity normalisation, no extra-whitespace removal, no dummy prefix: the text round-trips
  byte for byte, so the GGUF says tokenizer.ggml.add_space_prefix = false;
- whitespace-only pieces: indentation runs become single tokens (~3 chars/token instead of ~2);
- byte fallback: any character outside the vocabulary becomes <0xNN> pieces, never <unk>;
- no user-defined symbols (llama.cpp pre-splits on them and would tokenise differently);
- <mask> is a control token reserved from the start: the DSpark drafter fills its block with it, so
  target and drafter share one vocabulary and one embedding table.
Ids: <unk>=0, <s>=1, </s>=2, <mask>=3. A document is encoded as [BOS] + ids + [EOS].

    /usr/bin/python3 -m dspark_train tokenizer train     # -> models/ref-tokenizer.model
    /usr/bin/python3 -m dspark_train tokenizer encode    # -> $DSPARK_TRAIN_DIR/tokens-{split}.bin
"""
import argparse
import hashlib
import io
import os
from pathlib import Path

import numpy as np

from . import corpus
from .paths import TOKENIZER_MODEL, train_dir

VOCAB_SIZE = 4096
UNK_ID, BOS_ID, EOS_ID, MASK_ID = 0, 1, 2, 3
MASK_PIECE = "<mask>"
# SentencePiece's trainer sees "sentences"; pieces never cross them. We feed whole lines with their
# '\n' grouped into chunks of at most this many bytes (well under max_sentence_length).
CHUNK_BYTES = 2048


def _chunks(text: str):
    buf, size = [], 0
    for line in text.splitlines(keepends=True):
        n = len(line.encode("utf-8"))
        if buf and size + n > CHUNK_BYTES:
            yield "".join(buf)
            buf, size = [], 0
        buf.append(line)
        size += n
    if buf:
        yield "".join(buf)


def train(out: Path = TOKENIZER_MODEL, vocab_size: int = VOCAB_SIZE):
    import sentencepiece as spm
    docs = corpus.documents("train")
    sentences = [c for _, t in docs for c in _chunks(t)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=0.9995,  # rare characters go to byte fallback instead of using up the vocab
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        max_sentence_length=16384,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=2,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=-1,
        control_symbols=[MASK_PIECE],
        train_extremely_large_corpus=False,
        minloglevel=1,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(model.getvalue())
    sp = load(out)
    assert sp.piece_to_id(MASK_PIECE) == MASK_ID, sp.piece_to_id(MASK_PIECE)
    return sp


def load(path: Path = TOKENIZER_MODEL):
    # imported here so that training from existing token caches (e.g. on a GPU machine with only
    # PyTorch) does not need sentencepiece
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=str(path))


def model_sha256(path: Path = TOKENIZER_MODEL) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def encode_doc(sp, text: str):
    return [BOS_ID] + sp.encode(text) + [EOS_ID]


def encode_split(split: str, manifest: Path = None, sp=None):
    """([BOS] doc [EOS] of every document of the split concatenated, as uint16; its characters).
    With `manifest`, of the files that manifest lists (corpus.documents)."""
    sp = sp or load()
    ids = []
    chars = 0
    for _, text in corpus.documents(split, manifest=manifest):
        ids.extend(encode_doc(sp, text))
        chars += len(text)
    return np.asarray(ids, dtype=np.uint16), chars


def cache_path(split: str) -> Path:
    return train_dir() / f"tokens-{split}.bin"


def build_cache(split: str, sp=None) -> Path:
    """Concatenate [BOS] doc [EOS] for every document of the split into a uint16 file.

    The cache is keyed by the tokenizer's hash and the split's corpus digest (stored alongside),
    so neither a retrained tokenizer nor a changed corpus silently reuses stale ids."""
    arr, chars = encode_split(split, sp=sp)
    p = cache_path(split)
    tmp = p.with_suffix(".tmp")
    arr.tofile(tmp)
    os.replace(tmp, p)
    p.with_suffix(".meta").write_text(f"{model_sha256()} {len(arr)} {chars} {corpus.split_digest(split)}\n")
    return p


def load_cache(split: str):
    """(uint16 token array, number of characters of the split's text); builds it if missing/stale."""
    p = cache_path(split)
    meta = p.with_suffix(".meta")
    key = [model_sha256(), corpus.split_digest(split)]
    if not p.exists() or not meta.exists() or meta.read_text().split()[0::3] != key:
        build_cache(split)
    _, n, chars, _ = meta.read_text().split()
    arr = np.fromfile(p, dtype=np.uint16)
    assert len(arr) == int(n)
    return arr, int(chars)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["train", "encode", "stats"])
    a = ap.parse_args(argv)
    if a.cmd == "train":
        sp = train()
        print("wrote", TOKENIZER_MODEL, "sha256", model_sha256())
    if a.cmd in ("encode", "stats"):
        for s in corpus.SPLITS:
            if a.cmd == "encode":
                build_cache(s)
            arr, chars = load_cache(s)
            print(f"{s}: {len(arr)} tokens, {chars} chars, {chars / len(arr):.2f} chars/token")


if __name__ == "__main__":
    main()
