"""The tokenizer's ids equal llama.cpp's SPM algorithm on the GGUF metadata (train/inference parity).

    /usr/bin/python3 -m unittest discover -s tools/train/tests -t tools/train
"""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import corpus  # noqa: E402
import gguf_reader  # noqa: E402
import gguf_vocab  # noqa: E402
import gguf_writer as gw  # noqa: E402
import llama_spm  # noqa: E402
import tokenizer as tok  # noqa: E402
from export_golden import TOKENIZER_EDGE_CASES  # noqa: E402


class TestTokenizer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sp = tok.load()
        w = gw.GGUFWriter()
        gguf_vocab.add_tokenizer(w, cls.sp)
        cls.dir = tempfile.TemporaryDirectory()
        p = os.path.join(cls.dir.name, "vocab.gguf")
        w.write(p)
        cls.md = gguf_reader.read(p).metadata
        cls.ll = llama_spm.LlamaSpm(cls.md)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_special_ids(self):
        self.assertEqual(self.sp.get_piece_size(), tok.VOCAB_SIZE)
        self.assertEqual([self.sp.id_to_piece(i) for i in range(4)], ["<unk>", "<s>", "</s>", "<mask>"])
        self.assertTrue(self.sp.is_control(tok.MASK_ID))
        self.assertEqual(self.md["tokenizer.ggml.token_type"][:4], [2, 3, 3, 3])

    def test_whitespace_is_kept(self):
        for s in ["\n", "    ", "        return x\n", "a  b", "\t\n\n"]:
            self.assertEqual(self.sp.decode(self.sp.encode(s)), s)
        self.assertIn("\u2581\u2581\u2581\u2581", [self.sp.id_to_piece(i) for i in self.sp.encode("    x")])
        self.assertNotIn(tok.UNK_ID, self.sp.encode("caf\u00e9 \U0001F600 \x00"))

    def test_llama_spm_matches_sentencepiece(self):
        texts = list(TOKENIZER_EDGE_CASES) + [t for _, t in corpus.documents("val")][:2]
        for t in texts:
            self.assertEqual(self.ll.encode(t), self.sp.encode(t), repr(t[:60]))


if __name__ == "__main__":
    unittest.main()
