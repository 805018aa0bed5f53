"""The tokenizer's ids equal llama.cpp's SPM algorithm on the GGUF metadata (train/inference parity).

    cd tools/train && /usr/bin/python3 -m pytest tests    # (make test runs them: ctest -L python)
"""
import os
import tempfile
import unittest

from dspark_train import corpus
from dspark_train import gguf_reader
from dspark_train import gguf_vocab
from dspark_train import gguf_writer as gw
from dspark_train import llama_spm
from dspark_train import tokenizer as tok
from dspark_train.export_golden import TOKENIZER_EDGE_CASES


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
