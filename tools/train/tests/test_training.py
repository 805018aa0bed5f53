"""Training invariants: exact resume, DSpark train/inference equivalence, anchors and masks, export.

    cd tools/train && /usr/bin/python3 -m pytest tests    # (make test runs them: ctest -L python)
"""
import json
import os
import tempfile
import unittest
from pathlib import Path

import torch
import torch.nn.functional as F

from dspark_train import dspark_loss
from dspark_train import export_dspark
from dspark_train import gguf_reader
from dspark_train import tokenizer as tok
from dspark_train.dspark_model import DSpark, DSparkConfig
from dspark_train.model import Qwen3, Qwen3Config

from .runs import assert_resume_is_exact, tiny_teacher

TINY_T = Qwen3Config(n_layer=4, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=48, n_ctx=64)
TINY_D = DSparkConfig(n_layer=2, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=48, n_ctx=64,
                      target_layer_ids=[0, 1, 2], block_size=4, markov_rank=8)


class TestCrossEntropy(unittest.TestCase):
    """trainutil's hand-written cross-entropies against torch's, value and gradient, from bf16 logits."""

    def test_hard_and_soft_targets(self):
        from dspark_train import trainutil as tu
        torch.manual_seed(0)
        z = (3 * torch.randn(37, 300)).to(torch.bfloat16).requires_grad_(True)
        y = torch.randint(0, 300, (37,))
        y[:5] = 7  # repeated labels
        p = torch.softmax(torch.randn(37, 300), -1)
        for ours, ref in [(lambda: tu.HardCE.apply(z, y), lambda: F.cross_entropy(z.float(), y)),
                          (lambda: tu.SoftCE.apply(z, p).sum(), lambda: -(p * F.log_softmax(z.float(), -1)).sum())]:
            a = ours()
            (g_a,) = torch.autograd.grad(a, z)
            b = ref()
            (g_b,) = torch.autograd.grad(b, z)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(g_a.float(), g_b.float(), rtol=1e-2, atol=1e-4)


class TestResume(unittest.TestCase):
    # Each trainer's run restores model, optimizer (on the parameters' device) and RNG.
    def test_target_resume_is_exact(self):
        from dspark_train import train_target
        cfg = json.dumps(dict(n_layer=1, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=32, n_ctx=64))
        common = ["--config", cfg, "--seq-len", "32", "--tokens-per-step", "128", "--eval-every", "1000",
                  "--log-every", "1", "--total-tokens", "4000", "--dtype", "fp32", "--long-every", "3"]
        with tempfile.TemporaryDirectory() as d:
            assert_resume_is_exact(self, train_target.main, common, d)

    def test_draft_model_resume_is_exact(self):
        from dspark_train import train_draft
        cfg = json.dumps(dict(n_layer=1, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=32, n_ctx=64))
        with tempfile.TemporaryDirectory() as d:
            common = ["--teacher", tiny_teacher(d), "--config", cfg, "--seq-len", "32", "--tokens-per-step", "128",
                      "--eval-every", "4", "--log-every", "1", "--total-tokens", "4000", "--dtype", "fp32",
                      "--long-every", "3"]
            assert_resume_is_exact(self, train_draft.main, common, d)

    def test_dspark_resume_is_exact(self):
        from dspark_train import train_dspark
        with tempfile.TemporaryDirectory() as d:
            common = ["--teacher", tiny_teacher(d), "--seq-len", "24", "--batch", "2", "--anchors", "4",
                      "--n-layer", "1", "--block-size", "4", "--markov-rank", "8", "--target-layers", "0,1,2",
                      "--steps", "6", "--log-every", "1", "--dtype", "fp32"]
            assert_resume_is_exact(self, train_dspark.main, common, d)


class TestGrowDraft(unittest.TestCase):
    def test_grown_model_computes_what_the_original_did(self):
        from dspark_train import grow_draft
        torch.manual_seed(0)
        small = Qwen3(TINY_T)
        config, state = grow_draft.grow(small.c.to_dict(), small.state_dict(), TINY_T.n_layer + 2)
        big = Qwen3(Qwen3Config(**config))
        big.load_state_dict(state)
        x = torch.randint(0, TINY_T.vocab_size, (2, 20))
        self.assertEqual(config["n_layer"], TINY_T.n_layer + 2)
        with torch.no_grad():
            self.assertTrue(torch.equal(small(x), big(x)))
        # The new layers are live: their zeroed projections get gradients.
        big(x).logsumexp(-1).sum().backward()
        self.assertGreater(float(big.blocks[-1].attn.wo.weight.grad.abs().sum()), 0)


class TestDSpark(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.target = Qwen3(TINY_T).eval().requires_grad_(False)
        self.drafter = DSpark(TINY_D).eval()
        with torch.no_grad():
            for p in self.drafter.parameters():
                if p.dim() == 1:
                    p.add_(0.2 * torch.randn_like(p))

    def test_anchor_sampling(self):
        m = torch.zeros(2, 20, dtype=torch.bool)
        m[0, 5:] = True
        m[1, 18:] = True  # a single candidate (p = 18)
        a, keep = dspark_loss.sample_anchors(m, 6, torch.Generator().manual_seed(1))
        self.assertTrue(keep[0].all())
        self.assertTrue(bool((a[0] >= 5).all() and (a[0] <= 18).all()))
        self.assertEqual(a[0].tolist(), sorted(set(a[0].tolist())))
        self.assertEqual(keep[1].tolist(), [True] + [False] * 5)
        self.assertEqual(a[1, 0].item(), 18)

    def test_block_mask(self):
        a, keep = torch.tensor([[3, 7]]), torch.tensor([[True, True]])
        m = dspark_loss.block_mask(a, keep, 10, 2)[0]
        self.assertEqual(m.shape, (4, 14))
        self.assertEqual(m[0, :10].tolist(), [True] * 3 + [False] * 7)   # strictly before the anchor
        self.assertEqual(m[2, :10].tolist(), [True] * 7 + [False] * 3)
        self.assertEqual(m[1, 10:].tolist(), [True, True, False, False])  # own block, both ways
        self.assertEqual(m[3, 10:].tolist(), [False, False, True, True])

    def test_train_matches_inference(self):
        """Training forward (full context + mask) == llama.cpp-style inference (context < p, no mask)."""
        c = TINY_D
        x = torch.randint(4, 4096, (1, 20))
        _, tapped = self.target.hidden_states(x, taps=tuple(c.target_layer_ids))
        taps = torch.cat([tapped[l] for l in c.target_layer_ids], -1)
        p, B = 9, c.block_size
        ids = torch.tensor([[x[0, p].item()] + [c.mask_token_id] * (B - 1)])
        emb = F.embedding(ids, self.target.tok_embd.weight)
        pos = torch.arange(p, p + B)
        with torch.no_grad():
            mask = dspark_loss.block_mask(torch.tensor([[p]]), torch.tensor([[True]]), 20, B)
            h_train = self.drafter.backbone(emb, pos, self.drafter.context(taps), torch.arange(20), mask)
            h_inf = self.drafter.backbone(emb, pos, self.drafter.context(taps[:, :p]), torch.arange(p),
                                          torch.ones(1, B, p + B, dtype=torch.bool))
            torch.testing.assert_close(h_train, h_inf, atol=1e-5, rtol=1e-5)
            toks, confs, z = self.drafter.draft(self.target.tok_embd.weight, taps[:, :p], x[0, p].item(), p)
            bias, e = self.drafter.markov(x[0, p])
            z0 = F.linear(h_train[0, 0], self.target.tok_embd.weight) + bias
            torch.testing.assert_close(z[0], z0, atol=1e-5, rtol=1e-5)
            self.assertEqual(toks[0], int(z0.argmax()))
            self.assertAlmostEqual(confs[0], torch.sigmoid(self.drafter.confidence_logit(h_train[0, 0], e)).item(), 5)

    def test_loss_runs_and_backprops(self):
        x = torch.randint(4, 4096, (2, 24))
        m = torch.ones_like(x, dtype=torch.bool)
        self.drafter.train()
        loss, met = dspark_loss.dspark_forward(self.drafter, self.target, x, m, 5, torch.Generator().manual_seed(0))
        loss.backward()
        self.assertTrue(torch.isfinite(loss))
        self.assertIsNotNone(self.drafter.markov_w1.weight.grad)
        self.assertIsNotNone(self.drafter.conf_proj.weight.grad)
        self.assertEqual(len(met["accept_at_k"]), TINY_D.block_size)
        self.assertTrue(1.0 <= met["tau_prob"] <= 1 + TINY_D.block_size)

    def test_export_layout(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "ds.gguf")
            export_dspark.write_dspark(p, self.drafter.state_dict(), TINY_D, tok.load())
            f = gguf_reader.read(p)
            md = f.metadata
            self.assertEqual(md["general.architecture"], "dflash")
            self.assertEqual(md["dflash.target_layers"], [1, 2, 3])
            self.assertEqual(md["dflash.block_size"], 4)
            self.assertIs(md["dflash.sample_from_anchor"], True)
            self.assertEqual(md["tokenizer.ggml.mask_token_id"], tok.MASK_ID)
            self.assertEqual(f.tensor_info["fc.weight"][0], [3 * 32, 32])
            self.assertEqual(f.tensor_info["markov_w1.weight"][0], [8, 4096])
            self.assertEqual(f.tensor_info["markov_w2.weight"][0], [8, 4096])
            self.assertEqual(f.tensor_info["conf_proj.weight"][0], [32 + 8, 1])
            self.assertEqual(f.tensor_info["conf_proj.bias"][0], [1])
            for n in ("enc.output_norm.weight", "output_norm.weight", "blk.1.attn_k_norm.weight"):
                self.assertIn(n, f.tensors)
            self.assertNotIn("token_embd.weight", f.tensors)
            self.assertNotIn("output.weight", f.tensors)

    def test_gguf_warm_start_and_growth(self):
        """train-dspark --init FILE.gguf --grow N: the file reads back as the drafter it was (up to the
        F16 matrices), and the deepened drafter drafts exactly what it did."""
        from dspark_train import grow_draft
        x = torch.randint(4, 4096, (1, 20))
        from dspark_train import train_dspark
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "ds.gguf")
            export_dspark.write_dspark(p, self.drafter.state_dict(), TINY_D, tok.load())
            cfg, state = export_dspark.load_dspark(p)
            self.assertEqual(train_dspark.main(["--teacher", tiny_teacher(d), "--init", p, "--grow", "3", "--steps", "2",
                                                "--seq-len", "24", "--batch", "2", "--anchors", "4", "--log-every", "1",
                                                "--dtype", "fp32", "--out", f"{d}/g"]), 0)
            self.assertEqual(torch.load(f"{d}/g/ckpt.pt")["config"]["n_layer"], 3)
        self.assertEqual(cfg, TINY_D)
        rounded = {k: v.half().float() if v.dim() == 2 and not k.startswith("conf_proj") else v
                   for k, v in self.drafter.state_dict().items()}
        self.assertEqual(sorted(state), sorted(rounded))
        for k in state:
            torch.testing.assert_close(state[k], rounded[k], rtol=0, atol=0)
        config, grown_state = grow_draft.grow(cfg.to_dict(), state, cfg.n_layer + 2)
        small, grown = DSpark(cfg).eval(), DSpark(DSparkConfig(**config)).eval()
        small.load_state_dict(state)
        grown.load_state_dict(grown_state)
        _, tapped = self.target.hidden_states(x, taps=tuple(cfg.target_layer_ids))
        taps = torch.cat([tapped[l] for l in cfg.target_layer_ids], -1)
        with torch.no_grad():
            a = small.draft(self.target.tok_embd.weight, taps[:, :9], x[0, 9].item(), 9)
            b = grown.draft(self.target.tok_embd.weight, taps[:, :9], x[0, 9].item(), 9)
        self.assertEqual(len(grown.blocks), cfg.n_layer + 2)
        self.assertEqual(a[0], b[0])
        torch.testing.assert_close(a[2], b[2], rtol=1e-6, atol=1e-6)


class TestEngineGenerator(unittest.TestCase):
    """gen_target_data.py --engine: `dspark serve` returns the same greedy continuations as the
    PyTorch decoder of the same GGUF (so either generator makes the same training data)."""

    def test_engine_greedy_matches_pytorch(self):
        import numpy as np
        from dspark_train import gen_target_data
        from dspark_train import teacher
        from dspark_train.paths import REPO_ROOT, TARGET_GGUF
        # ctest passes the binary it built (DSPARK_BIN); by hand, build/bin/dspark (make build).
        binary = Path(os.environ.get("DSPARK_BIN") or REPO_ROOT / "build" / "bin" / "dspark")
        self.assertTrue(binary.is_file(), f"no dspark binary at {binary}: make build, or set DSPARK_BIN")
        self.assertTrue(TARGET_GGUF.is_file(), f"missing {TARGET_GGUF}")
        rng = np.random.default_rng(3)
        prompts = torch.from_numpy(rng.integers(10, 4000, size=(4, 16)).astype(np.int64))
        with tempfile.TemporaryDirectory() as d:
            engine = gen_target_data.EngineGenerator(binary, TARGET_GGUF, 4, 2, 64, os.path.join(d, "serve.log"))
            try:
                got = engine.generate(prompts, 24, [1, 2, 3, 4], 0.0, 20, 0.8)
            finally:
                engine.close()
        target = teacher.load_target(TARGET_GGUF)
        want = gen_target_data.generate(target, prompts, 24, torch.Generator().manual_seed(0), 0.0, 20, 0.8)
        # F16 weights in both; fp32 (PyTorch) and the engine's kernels may split an exact tie
        # differently, so allow one sequence to diverge late, none early.
        same = (got == want).all(1)
        self.assertGreaterEqual(int(same.sum()), 3, f"{got}\n{want}")
        self.assertTrue(bool((got[:, :16 + 8] == want[:, :16 + 8]).all()))


if __name__ == "__main__":
    unittest.main()
