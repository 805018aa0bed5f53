"""Python port of llama.cpp's SentencePiece tokenizer (llm_tokenizer_spm in llama-vocab.cpp),
driven only by the GGUF's tokenizer.ggml.* metadata.

It exists to prove, before the C++ engine does, that the ids the model was trained on (from the
sentencepiece library) are the ids an inference engine reading our GGUF produces:

    /usr/bin/python3 -m dspark_train llama-spm models/ref-target.gguf     # whole validation split

Algorithm: split into UTF-8 characters, then repeatedly merge the adjacent pair whose
concatenation is a vocabulary piece with the highest score (ties: leftmost); a final symbol that is
not a piece is re-split along its merge history, and unknown characters become <0xNN> byte tokens.
"""
import argparse
import heapq
import sys

from . import gguf_reader

SPACE = "\u2581"


class LlamaSpm:
    def __init__(self, metadata: dict):
        md = metadata
        assert md["tokenizer.ggml.model"] == "llama"
        self.tokens = md["tokenizer.ggml.tokens"]
        self.scores = md["tokenizer.ggml.scores"]
        self.types = md["tokenizer.ggml.token_type"]
        self.add_space_prefix = md.get("tokenizer.ggml.add_space_prefix", True)
        self.unk = md.get("tokenizer.ggml.unknown_token_id", 0)
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.byte_token = {}
        for i, (t, ty) in enumerate(zip(self.tokens, self.types)):
            if ty == 6:  # LLAMA_TOKEN_TYPE_BYTE, spelled <0xNN>
                self.byte_token[int(t[3:5], 16)] = i

    @classmethod
    def from_gguf(cls, path):
        return cls(gguf_reader.read(path).metadata)

    def encode(self, text: str):
        if self.add_space_prefix:
            text = " " + text
        text = text.replace(" ", SPACE)
        if not text:
            return []
        # symbols: [text, prev, next]; a merged-away symbol has text None
        sym = [[ch, i - 1, i + 1] for i, ch in enumerate(text)]
        sym[-1][2] = -1
        heap, rev_merge = [], {}

        def try_add(left, right):
            if left == -1 or right == -1:
                return
            s = sym[left][0] + sym[right][0]
            tid = self.index.get(s)
            if tid is None:
                return
            # max-heap on score, ties to the smaller left index (llm_bigram_spm::comparator)
            heapq.heappush(heap, (-self.scores[tid], left, right, s))
            rev_merge[s] = (sym[left][0], sym[right][0])

        for i in range(1, len(sym)):
            try_add(i - 1, i)
        while heap:
            _, left, right, s = heapq.heappop(heap)
            L, R = sym[left], sym[right]
            if L[0] is None or R[0] is None or L[2] != right or L[0] + R[0] != s:
                continue  # outdated bigram
            L[0] = s
            R[0] = None
            L[2] = R[2]
            if R[2] != -1:
                sym[R[2]][1] = left
            try_add(L[1], left)
            try_add(left, L[2])
        out = []
        i = 0
        while i != -1:
            self._resegment(sym[i][0], rev_merge, out)
            i = sym[i][2]
        return out

    def _resegment(self, s, rev_merge, out):
        tid = self.index.get(s)
        if tid is not None:
            out.append(tid)
            return
        parts = rev_merge.get(s)
        if parts is None:
            for b in s.encode("utf-8"):
                out.append(self.byte_token.get(b, self.unk))
            return
        self._resegment(parts[0], rev_merge, out)
        self._resegment(parts[1], rev_merge, out)


def check_split(gguf_path, split="val"):
    """Compare sentencepiece ids with this port's ids on every document of a split."""
    from . import corpus
    from . import tokenizer as tok
    sp = tok.load()
    ll = LlamaSpm.from_gguf(gguf_path)
    bad = []
    n_tok = 0
    for rel, text in corpus.documents(split):
        a, b = sp.encode(text), ll.encode(text)
        n_tok += len(a)
        if a != b:
            k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            bad.append((rel, k, a[k:k + 5], b[k:k + 5]))
    return n_tok, bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", help="GGUF whose tokenizer.ggml.* metadata to use")
    ap.add_argument("split", nargs="?", default="val", help="corpus split to compare (default val)")
    a = ap.parse_args(argv)
    n, bad = check_split(a.gguf, a.split)
    for rel, k, x, y in bad[:10]:
        print(f"MISMATCH {rel} at token {k}: sentencepiece {x} llama.cpp-spm {y}")
    print(f"{a.split}: {n} tokens, {len(bad)} documents differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
