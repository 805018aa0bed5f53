"""EAGLE-3: the training-time test computes what drafting computes, exact resume, the eagle3 export
layout, and the numpy reference forward of the file against the PyTorch model.

    cd tools/train && /usr/bin/python3 -m pytest tests/test_eagle3.py
"""
import json
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F

from dspark_train import export_eagle3
from dspark_train import gguf_model
from dspark_train import gguf_reader
from dspark_train import gguf_writer as gw
from dspark_train import ref_forward
from dspark_train import tokenizer as tok
from dspark_train import train_eagle3
from dspark_train.eagle3_model import Eagle3, Eagle3Cache, Eagle3Config, rope_norm
from dspark_train.model import Qwen3, Qwen3Config, rope_tables

from .runs import assert_resume_is_exact, tiny_teacher

TINY_T = Qwen3Config(n_layer=4, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=48, n_ctx=64)
# target_layers 4 = the target's final pre-norm state (llama.cpp taps it through the nextn output)
TINY_E = Eagle3Config(n_embd=32, n_head=4, n_head_kv=2, head_dim=16, n_ff=48, n_ctx=64, target_n_embd=32,
                      target_layers=[1, 2, 4])


def random_pair(cfg=TINY_E, seed=0):
    """A tiny target and an EAGLE-3 head with non-trivial norm gains (fp32, eval mode)."""
    torch.manual_seed(seed)
    target = Qwen3(TINY_T).eval().requires_grad_(False)
    head = Eagle3(cfg).eval()
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
            else:
                p.mul_(4.0)  # larger than the N(0, 0.02) init: attention weights far from uniform
    return target, head


class TestTrainingTimeTest(unittest.TestCase):
    def test_rope_norm_rotates_adjacent_pairs(self):
        cos, sin = rope_tables(4, 8, 10000.0)
        x = torch.tensor([1.0, 2.0, 3.0, 4.0])
        p = 5
        got = rope_norm(x, cos[p], sin[p])
        a0, a1 = p * 1.0, p * 10000.0 ** (-2 / 4)
        want = [1 * np.cos(a0) - 2 * np.sin(a0), 2 * np.cos(a0) + 1 * np.sin(a0),
                3 * np.cos(a1) - 4 * np.sin(a1), 4 * np.cos(a1) + 3 * np.sin(a1)]
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)

    def test_unrolled_steps_equal_kv_cached_drafting(self):
        """Step j of the unrolled forward, anchor t == the j-th draft of sequential KV-cached
        drafting after committed position t, fed the true tokens (fp32, 1e-5)."""
        target, head = random_pair()
        K, T = 4, 20
        x = torch.randint(4, 4096, (2, T), generator=torch.Generator().manual_seed(1))
        embd = target.tok_embd.weight
        with torch.no_grad():
            _, feats = train_eagle3.target_features(target, x, TINY_E.target_layers)
            hs = head.unroll(embd, x, head.encode(feats), K)
        for b in range(2):
            cache = Eagle3Cache()  # kept across anchors: committed rows are reused, drafts cropped
            s = x[b].tolist()
            for t in range(0, T - K):
                toks, logits = head.draft(embd, embd, feats[b:b + 1, :t + 1], s[:t + 2], K,
                                          forced=s[t + 2:t + K + 1], cache=cache)
                for j in range(K):
                    want = head.logits(hs[j][b:b + 1, t:t + 1], embd)[0, 0]
                    torch.testing.assert_close(logits[j], want, atol=1e-5, rtol=1e-5,
                                               msg=f"seq {b} anchor {t} step {j}")
                self.assertEqual(cache.n, t + 1)
        # Steps >= 1 for a subset of the anchors: those anchors' rows are unchanged.
        sub = torch.tensor([0, 3, 4, 11, 15])
        with torch.no_grad():
            hs_sub = head.unroll(embd, x, head.encode(feats), K, sub)
        torch.testing.assert_close(hs_sub[0], hs[0], atol=0, rtol=0)
        for j in range(1, K):
            torch.testing.assert_close(hs_sub[j], hs[j][:, sub], atol=1e-6, rtol=1e-5)

    def test_loss_runs_backprops_and_masks(self):
        target, head = random_pair()
        head.train()
        x = torch.randint(4, 4096, (2, 16), generator=torch.Generator().manual_seed(2))
        m = torch.ones_like(x, dtype=torch.bool)
        loss, met = train_eagle3.ttt_forward(head, target, x, m, 3)
        loss.backward()
        self.assertTrue(torch.isfinite(loss))
        self.assertIsNotNone(head.fc.weight.grad)
        self.assertGreater(float(head.wq.weight.grad.abs().sum()), 0)
        # step j's rows predict x_{t+j+2}: T - j - 2 rows per sequence
        self.assertEqual(met["rows_at_k"], [2 * 14, 2 * 13, 2 * 12])
        m[:, :10] = False  # generated data: only rows predicting positions >= 10
        _, met = train_eagle3.ttt_forward(head, target, x, m, 3)
        self.assertEqual(met["rows_at_k"], [2 * 6, 2 * 6, 2 * 6])
        for kl in met["kl_at_k"]:
            self.assertGreaterEqual(kl, -1e-4)


class TestEagle3Resume(unittest.TestCase):
    def test_eagle3_resume_is_exact(self):
        with tempfile.TemporaryDirectory() as d:
            common = ["--teacher", tiny_teacher(d), "--seq-len", "24", "--batch", "2", "--ttt-steps", "3",
                      "--n-head", "2", "--n-head-kv", "1", "--head-dim", "16", "--n-ff", "32",
                      "--target-layers", "1,2,4", "--steps", "6", "--log-every", "1", "--dtype", "fp32"]
            assert_resume_is_exact(self, train_eagle3.main, common, d)


def f16_state(head):
    """The head's weights rounded as the exporter stores them (matrices F16), so PyTorch and the
    numpy reference compute the same function up to float32 rounding."""
    return {k: (v.half().float() if v.dim() == 2 else v.clone()) for k, v in head.state_dict().items()}


class TestEagle3Export(unittest.TestCase):
    def setUp(self):
        self.target, self.head = random_pair(Eagle3Config(**{**TINY_E.to_dict(), "norm_before_fc": True}))
        self.head.load_state_dict(f16_state(self.head))
        self.target.load_state_dict({k: v.half().float() if v.dim() == 2 else v
                                     for k, v in self.target.state_dict().items()})
        self.tmp = tempfile.TemporaryDirectory()
        self.target_path = os.path.join(self.tmp.name, "target.gguf")
        gguf_model.write_qwen3(self.target_path, self.target.state_dict(), TINY_T, tok.load(), "tiny")

    def tearDown(self):
        self.tmp.cleanup()

    def test_layout(self):
        p = os.path.join(self.tmp.name, "e.gguf")
        export_eagle3.write_eagle3(p, self.head.state_dict(), self.head.c, tok.load())
        f = gguf_reader.read(p)
        md = f.metadata
        self.assertEqual(md["general.architecture"], "eagle3")
        want = {"context_length": 64, "embedding_length": 32, "block_count": 1, "feed_forward_length": 48,
                "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 16,
                "attention.value_length": 16, "rope.dimension_count": 16, "vocab_size": 4096,
                "target_hidden_size": 32}
        for k, v in want.items():
            self.assertEqual(md["eagle3." + k], v, k)
            self.assertEqual(f.types["eagle3." + k], gw.UINT32, k)
        self.assertEqual(md["eagle3.target_layers"], [1, 2, 4])
        self.assertEqual(f.array_types["eagle3.target_layers"], gw.INT32)
        self.assertIs(md["eagle3.norm_before_fc"], True)
        self.assertIs(md["eagle3.norm_before_residual"], False)
        self.assertEqual(f.types["eagle3.rope.freq_base"], gw.FLOAT32)
        self.assertEqual(f.types["eagle3.attention.layer_norm_rms_epsilon"], gw.FLOAT32)
        self.assertEqual(md["tokenizer.ggml.tokens"][:4], ["<unk>", "<s>", "</s>", "<mask>"])
        self.assertEqual(len(md["tokenizer.ggml.tokens"]), 4096)
        # ne = [in, out]; F16 matrices, F32 norms
        shapes = {"fc.weight": ([96, 32], 1), "enc.output_norm.weight": ([96], 0),
                  "blk.0.attn_norm.weight": ([32], 0), "blk.0.attn_norm_2.weight": ([32], 0),
                  "blk.0.attn_q.weight": ([64, 64], 1), "blk.0.attn_k.weight": ([64, 32], 1),
                  "blk.0.attn_v.weight": ([64, 32], 1), "blk.0.attn_output.weight": ([64, 32], 1),
                  "blk.0.ffn_norm.weight": ([32], 0), "blk.0.ffn_gate.weight": ([32, 48], 1),
                  "blk.0.ffn_up.weight": ([32, 48], 1), "blk.0.ffn_down.weight": ([48, 32], 1),
                  "output_norm.weight": ([32], 0)}
        self.assertEqual({n: tuple(i[:2]) for n, i in f.tensor_info.items()},
                         {n: (s, t) for n, (s, t) in shapes.items()})

    def test_own_embeddings_and_d2t(self):
        """--own-embeddings writes token_embd/output; a reduced draft vocabulary writes d2t (I64,
        absolute target ids), and its logits land on those ids (-inf elsewhere)."""
        p = os.path.join(self.tmp.name, "e.gguf")
        embd = self.target.tok_embd.weight.detach()
        d2t = np.sort(np.random.default_rng(0).choice(4096, 100, replace=False)).astype(np.int64)
        export_eagle3.write_eagle3(p, self.head.state_dict(), self.head.c, tok.load(), token_embd=embd,
                                   output=embd[torch.from_numpy(d2t)], d2t=d2t)
        f = gguf_reader.read(p)
        self.assertEqual(f.tensor_info["token_embd.weight"][:2], ([32, 4096], 1))
        self.assertEqual(f.tensor_info["output.weight"][:2], ([32, 100], 1))
        self.assertEqual(f.tensor_info["d2t"][:2], ([100], gw.GGML_I64))
        np.testing.assert_array_equal(f.tensors["d2t"], d2t)
        full = os.path.join(self.tmp.name, "full.gguf")
        export_eagle3.write_eagle3(full, self.head.state_dict(), self.head.c, tok.load(), token_embd=embd, output=embd)
        ids, feats = self.inputs()
        z_d, _ = ref_forward.eagle3_forward(p, feats[:-1], ids[1:])
        z_f, _ = ref_forward.eagle3_forward(full, feats[:-1], ids[1:])
        self.assertTrue(np.all(np.isneginf(np.delete(z_d, d2t, axis=1))))
        np.testing.assert_allclose(z_d[:, d2t], z_f[:, d2t], rtol=1e-12, atol=1e-12)
        # eval_drafters' reading of the file (own tables, d2t) drafts what the numpy graph drafts
        from dspark_train import eval_drafters
        head, own_embd, own_head, back_d2t = eval_drafters.load_eagle3(p)
        np.testing.assert_array_equal(back_d2t.numpy(), d2t)
        n = len(ids) - 1
        toks, zs = head.draft(own_embd, own_head, torch.from_numpy(feats[:n]).float()[None], ids, 3, d2t=back_d2t)
        toks_ref, zs_ref = ref_forward.eagle3_draft(p, feats[:n], ids, 3)
        self.assertEqual(toks, toks_ref)
        self.assertTrue(set(toks) <= set(d2t.tolist()))
        np.testing.assert_allclose(zs.numpy()[:, d2t], zs_ref[:, d2t], rtol=1e-4, atol=1e-4)

    def inputs(self, T=12):
        ids = torch.randint(4, 4096, (1, T), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            _, feats = train_eagle3.target_features(self.target, ids, self.head.c.target_layers)
        return ids[0].tolist(), feats[0].double().numpy()

    def test_numpy_reference_matches_pytorch(self):
        """ref_forward.eagle3_forward (float64, from the GGUF, the target's embedding/head from the
        target GGUF) == Eagle3 (PyTorch): committed rows, then a greedy draft chain."""
        p = os.path.join(self.tmp.name, "e.gguf")
        export_eagle3.write_eagle3(p, self.head.state_dict(), self.head.c, tok.load())
        ids, feats = self.inputs()
        embd = self.target.tok_embd.weight
        n = len(ids) - 1
        z_ref, h_ref = ref_forward.eagle3_forward(p, feats[:n], ids[1:], target=self.target_path)
        with torch.no_grad():
            g = self.head.encode(torch.from_numpy(feats[:n]).float()[None])
            h = self.head.decode(F.embedding(torch.tensor([ids[1:]]), embd), g, torch.arange(n), Eagle3Cache())
            z = self.head.logits(h, embd)[0]
        np.testing.assert_allclose(h[0].numpy(), h_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(z.numpy(), z_ref, rtol=1e-4, atol=1e-4)
        toks_ref, zs_ref = ref_forward.eagle3_draft(p, feats[:n], ids, 4, target=self.target_path)
        toks, zs = self.head.draft(embd, embd, torch.from_numpy(feats[:n]).float()[None], ids, 4)
        self.assertEqual(toks, toks_ref)
        np.testing.assert_allclose(zs.numpy(), zs_ref, rtol=1e-4, atol=1e-4)

    def test_checkpoint_round_trip(self):
        """export-eagle3 of a checkpoint, read back by eval_drafters.load_eagle3: the same weights."""
        from dspark_train import eval_drafters
        ck = os.path.join(self.tmp.name, "ckpt.pt")
        torch.save({"config": self.head.c.to_dict(), "model": self.head.state_dict(), "step": 7,
                    "args": {"steps": 7}, "teacher": "t.gguf", "data": "d"}, ck)
        out = os.path.join(self.tmp.name, "e.gguf")
        export_eagle3.main(["--ckpt", ck, "--out", out])
        summary = json.loads(open(out[:-5] + ".json").read())
        self.assertEqual(summary["config"]["target_layers"], [1, 2, 4])
        self.assertEqual(summary["steps"], 7)
        back, embd, head_w, d2t = eval_drafters.load_eagle3(out)
        self.assertIsNone(embd)
        self.assertIsNone(d2t)
        self.assertEqual(back.c, self.head.c)
        for k, v in self.head.state_dict().items():
            torch.testing.assert_close(back.state_dict()[k], v, rtol=0, atol=0, msg=k)
        # --own-embeddings: the target's tied table as both token_embd and output
        export_eagle3.main(["--ckpt", ck, "--out", out, "--own-embeddings", "--target", self.target_path])
        _, embd, head_w, _ = eval_drafters.load_eagle3(out)
        torch.testing.assert_close(embd, self.target.tok_embd.weight, rtol=0, atol=0)
        torch.testing.assert_close(head_w, self.target.tok_embd.weight, rtol=0, atol=0)
        self.assertIs(json.loads(open(out[:-5] + ".json").read())["own_embeddings"], True)


if __name__ == "__main__":
    unittest.main()
