"""GGUF writer/reader round trip and the numpy reference forward against PyTorch.

    cd tools/train && /usr/bin/python3 -m pytest tests    # (make test runs them: ctest -L python)
"""
import os
import struct
import tempfile
import unittest

import numpy as np
import torch

from dspark_train import gguf_model
from dspark_train import gguf_reader
from dspark_train import gguf_writer as gw
from dspark_train import ref_forward
from dspark_train import tokenizer as tok
from dspark_train.model import Qwen3, Qwen3Config

TINY = Qwen3Config(vocab_size=4096, n_layer=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=96, n_ctx=64)


class TestGGUFFormat(unittest.TestCase):
    def test_round_trip(self):
        w = gw.GGUFWriter()
        w.add_str("general.architecture", "qwen3")
        w.add_u32("a.u32", 7)
        w.add_u64("a.u64", 1 << 40)
        w.add_f32("a.f32", 0.5)
        w.add_bool("a.bool", False)
        w.add_i32("a.i32", -3)
        w.add_array("a.strs", gw.STRING, ["x", "\n", "▁▁", ""])
        w.add_array("a.f32s", gw.FLOAT32, [1.0, -2.5])
        w.add_array("a.i32s", gw.INT32, [1, 6, 3])
        t1 = np.arange(12, dtype=np.float32).reshape(3, 4)
        t2 = (np.arange(5, dtype=np.float32) / 3).astype(np.float16)
        w.add_tensor("w.weight", t1, gw.GGML_F16)
        w.add_tensor("n.weight", t2, gw.GGML_F32)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.gguf")
            w.write(p)
            with open(p, "rb") as fh:
                raw = fh.read()
            self.assertEqual(raw[:4], b"GGUF")
            self.assertEqual(struct.unpack("<IQQ", raw[4:24]), (3, 2, 9))
            f = gguf_reader.read(p)
            self.assertEqual(f.metadata["a.u32"], 7)
            self.assertEqual(f.types["a.u32"], gw.UINT32)
            self.assertEqual(f.metadata["a.u64"], 1 << 40)
            self.assertEqual(f.metadata["a.f32"], 0.5)
            self.assertIs(f.metadata["a.bool"], False)
            self.assertEqual(f.metadata["a.i32"], -3)
            self.assertEqual(f.metadata["a.strs"], ["x", "\n", "▁▁", ""])
            self.assertEqual(f.metadata["a.f32s"], [1.0, -2.5])
            self.assertEqual(f.metadata["a.i32s"], [1, 6, 3])
            self.assertEqual(f.tensor_info["w.weight"][0], [4, 3])  # ne: innermost first
            self.assertEqual(f.tensor_info["w.weight"][1], gw.GGML_F16)
            np.testing.assert_array_equal(f.tensors["w.weight"], t1.astype(np.float16))
            np.testing.assert_array_equal(f.tensors["n.weight"], t2.astype(np.float32))
            for _, _, off in f.tensor_info.values():
                self.assertEqual(off % 32, 0)
            self.assertEqual(f.data_start % 32, 0)
            self.assertEqual(len(raw), f.data_start + 32 + 32)  # 24 B and 20 B, each padded to 32


class TestQwen3Export(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.model = Qwen3(TINY).eval()
        with torch.no_grad():  # non-trivial norm gains so a swapped norm tensor would show
            for n, p in cls.model.named_parameters():
                if p.dim() == 1:
                    p.copy_(1 + 0.3 * torch.randn_like(p))
        cls.dir = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.dir.name, "tiny.gguf")
        extra = {"dspark.train.tokens": (gw.UINT64, 12345)}
        gguf_model.write_qwen3(cls.path, cls.model.state_dict(), TINY, tok.load(), "tiny", extra)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_metadata_and_names(self):
        f = gguf_reader.read(self.path)
        md = f.metadata
        self.assertEqual(md["general.architecture"], "qwen3")
        self.assertEqual(md["tokenizer.ggml.model"], "llama")
        self.assertIs(md["tokenizer.ggml.add_space_prefix"], False)
        self.assertIs(md["tokenizer.ggml.add_bos_token"], True)
        self.assertEqual(md["tokenizer.ggml.tokens"][tok.MASK_ID], "<mask>")
        self.assertEqual(md["tokenizer.ggml.token_type"][tok.MASK_ID], 3)
        self.assertEqual(md["tokenizer.ggml.tokens"][4 + 0x0A], "<0x0A>")
        self.assertEqual(md["tokenizer.ggml.token_type"][4 + 0x0A], 6)
        self.assertEqual(md["dspark.train.tokens"], 12345)
        self.assertNotIn("output.weight", f.tensors)
        self.assertEqual(f.tensor_info["token_embd.weight"][0], [TINY.n_embd, TINY.vocab_size])
        self.assertEqual(f.tensor_info["blk.0.attn_k.weight"][0], [TINY.n_embd, TINY.n_head_kv * TINY.head_dim])
        self.assertEqual(f.tensor_info["blk.1.ffn_down.weight"][0], [TINY.n_ff, TINY.n_embd])
        self.assertEqual(f.tensor_info["blk.1.attn_q_norm.weight"][1], gw.GGML_F32)
        self.assertEqual(f.tensor_info["blk.1.ffn_up.weight"][1], gw.GGML_F16)
        self.assertEqual(len(f.tensors), 2 + 11 * TINY.n_layer)

    def test_load_back(self):
        cfg, state, md = gguf_model.load_qwen3(self.path)
        self.assertEqual(cfg, TINY)
        for k, v in self.model.state_dict().items():
            np.testing.assert_allclose(state[k].numpy(), v.numpy(), rtol=1e-3, atol=1e-4)

    def test_numpy_forward_matches_pytorch(self):
        cfg, state, _ = gguf_model.load_qwen3(self.path)
        m = Qwen3(cfg).eval()
        m.load_state_dict(state)  # F16-rounded weights, as the GGUF holds them
        ids = [1] + list(np.random.default_rng(1).integers(4, 4096, size=40))
        with torch.no_grad():
            want = m(torch.tensor([ids]))[0].double().numpy()
        got = ref_forward.forward(self.path, ids)
        np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())
        np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


class TestDecode(unittest.TestCase):
    def test_cached_matches_full(self):
        from dspark_train import decode
        torch.manual_seed(0)
        m = Qwen3(TINY).eval()
        ids = torch.randint(4, 4096, (1, 30))
        with torch.no_grad():
            full = m(ids)
        cache = decode.KVCache(TINY.n_layer)
        parts = [decode.forward_cached(m, ids[:, a:b], cache) for a, b in [(0, 11), (11, 12), (12, 30)]]
        torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-4, rtol=1e-4)
        g = decode.greedy(m, ids[0, :10].tolist(), 8, stop_ids=())
        seq = ids[0, :10].tolist()
        for _ in range(8):
            with torch.no_grad():
                seq.append(int(m(torch.tensor([seq]))[0, -1].argmax()))
        self.assertEqual(g, seq[10:])


if __name__ == "__main__":
    unittest.main()
