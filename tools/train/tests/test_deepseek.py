"""The DeepSeek-architecture reference (deepseek2 + MTP block): PyTorch model == numpy reference of
llama.cpp's graph on the exported GGUF (trunk logits, MTP logits, chained MTP drafts, the
draft-mtp driver), the GGUF layout llama.cpp's loader needs, expert routing and balancing, exact
resume, the exporter's command.

    cd tools/train && /usr/bin/python3 -m pytest tests/test_deepseek.py
"""
import json
import os
import tempfile
import unittest

import numpy as np
import torch

from dspark_train import export_deepseek as ed
from dspark_train import gguf_reader
from dspark_train import gguf_writer as gw
from dspark_train import ref_forward as rf
from dspark_train.deepseek_model import Deepseek2, DeepseekConfig, MoE
from dspark_train.paths import TARGET_GGUF

from .runs import assert_resume_is_exact

TINY = dict(n_layer=3, n_embd=32, n_head=2, q_lora_rank=16, kv_lora_rank=24, qk_nope_dim=8, qk_rope_dim=8,
            v_head_dim=12, n_ff=48, n_dense_lead=1, n_expert=4, n_expert_used=2, n_expert_shared=1, n_ff_exp=16,
            n_ctx=64)


def random_model(seed=0, **over):
    """A tiny model with spread-out weights (so logits and router scores are far from ties), random
    selection biases and norm gains, rounded as the GGUF stores it."""
    torch.manual_seed(seed)
    c = DeepseekConfig(**{**TINY, **over})
    m = Deepseek2(c)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0, 0.2)
            elif n == "tok_embd.weight":
                p.normal_(0.0, 1.0)
            else:
                p.mul_(5.0)
        for moe in m.moe_layers():
            moe.exp_probs_b.normal_(0.0, 0.05)
    m.load_state_dict(ed.file_rounded(m.state_dict(), c))
    return m.eval()


def ids_for(T=20, seed=3):
    return torch.randint(4, 4096, (1, T), generator=torch.Generator().manual_seed(seed))


class TestDeepseekReference(unittest.TestCase):
    """Exported GGUF, read by ref_forward's llama.cpp-style graph (absorbed MLA, float64) vs PyTorch."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def export(self, m, name="m.gguf", **kw):
        p = os.path.join(self.tmp.name, name)
        ed.write_deepseek2(p, m.state_dict(), m.c, **kw)
        return p

    def check_forward(self, m):
        p = self.export(m)
        x = ids_for()
        with torch.no_grad():
            z, zm, _ = m(x)
        z_ref, zm_ref = rf.deepseek2_mtp_forward(p, x[0].tolist())
        np.testing.assert_allclose(z[0].numpy(), z_ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(zm[0].numpy(), zm_ref, rtol=1e-4, atol=1e-4)
        self.assertGreater(np.abs(z_ref).max(), 5.0)  # not a near-uniform function
        self.assertFalse(np.allclose(z_ref, zm_ref, atol=1e-2))
        # the generic entry point (ref-forward) runs the trunk of a deepseek2 file
        np.testing.assert_allclose(rf.forward(p, x[0].tolist()), z_ref, rtol=1e-12, atol=1e-12)
        return p, x

    def test_trunk_and_mtp_logits_match_numpy(self):
        """Sigmoid gating with the selection bias and weights x2.5 (DeepSeek-V3's routing)."""
        m = random_model()
        p, x = self.check_forward(m)
        # the bias selects: the file's routing with the bias zeroed chooses other experts somewhere
        f = gguf_reader.read(p)
        self.assertTrue(np.any(np.asarray(f.tensors["blk.1.exp_probs_b.bias"]) != 0))

    def test_softmax_gating_and_no_weight_norm(self):
        """DeepSeek-V2's routing: softmax, no selection bias in the file, weights unnormalised."""
        m = random_model(seed=1, gating="softmax", expert_weights_norm=False, expert_weights_scale=1.0,
                         n_dense_lead=0, n_expert_shared=2)
        p, _ = self.check_forward(m)
        f = gguf_reader.read(p)
        self.assertFalse(any(n.endswith("exp_probs_b.bias") for n in f.tensors))
        self.assertEqual(f.metadata["deepseek2.expert_gating_func"], 1)

    def test_mtp_row_convention(self):
        """MTP row q reads (x_q, h_{q-1}) with h the trunk's *normed* output and h_{-1} = 0: the
        row's logits computed one row at a time from the trunk's h agree; a shifted-by-one pairing
        or the pre-norm state do not."""
        m = random_model(seed=2)
        x = ids_for(12)
        with torch.no_grad():
            _, zm, _ = m(x)
            h = m.trunk(x)
            pre = h / m.out_norm.weight  # any other state than h: it must change the rows
            z_row, _ = m.mtp_rows(x, torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1))
            z_same, _ = m.mtp_rows(x, h)                                  # (x_q, h_q): wrong pairing
            z_pre, _ = m.mtp_rows(x, torch.cat([torch.zeros_like(h[:, :1]), pre[:, :-1]], 1))
        torch.testing.assert_close(zm, z_row)
        self.assertFalse(torch.allclose(zm, z_same, atol=1e-2))
        self.assertFalse(torch.allclose(zm[:, 1:], z_pre[:, 1:], atol=1e-2))
        torch.testing.assert_close(zm[:, 0], z_pre[:, 0])  # row 0 reads zeros either way

    def test_mtp_draft_chain_matches_numpy_and_driver(self):
        """Chained drafting (each draft row reads the previous MTP row's normed output): PyTorch ==
        numpy's KV-cached MTP block, and the first round of the replayed llama-speculative-simple
        loop drafts the same tokens after the prompt."""
        m = random_model(seed=4)
        p = self.export(m)
        ids = ids_for(10, seed=5)[0].tolist()
        toks, zs = m.mtp_draft(ids, 4)
        toks_ref, zs_ref = rf.deepseek2_mtp_draft(p, ids, 4)
        self.assertEqual(toks, toks_ref)
        np.testing.assert_allclose(zs.numpy(), zs_ref, rtol=1e-4, atol=1e-4)
        rounds = []
        out, n_drafted, n_accept = rf.spec_simple_mtp(p, ids, 8, n_max=3, rounds=rounds)
        self.assertEqual(rounds[0]["draft"], toks[:3])
        # the committed tokens are the trunk's greedy continuation, drafts or not
        greedy, seq = [], list(ids)
        with torch.no_grad():
            for _ in range(len(out)):
                t = int(m(torch.tensor([seq]), mtp=False)[0][0, -1].argmax())
                greedy.append(t)
                seq.append(t)
        self.assertEqual(out, greedy)
        self.assertEqual(n_drafted, sum(r["n_draft"] for r in rounds))
        self.assertEqual(n_accept, len(out) - len(rounds))

    def test_gguf_round_trip(self):
        m = random_model(seed=6)
        c, state, _ = ed.load_deepseek2(self.export(m))
        self.assertEqual(c, m.c)
        for k, v in m.state_dict().items():
            torch.testing.assert_close(state[k], v, rtol=0, atol=0, msg=k)

    def test_no_mtp_export(self):
        m = random_model(seed=7)
        p = self.export(m, mtp=False)
        f = gguf_reader.read(p)
        self.assertEqual(f.metadata["deepseek2.block_count"], TINY["n_layer"])
        self.assertNotIn("deepseek2.nextn_predict_layers", f.metadata)
        self.assertFalse(any(n.startswith(f"blk.{TINY['n_layer']}.") for n in f.tensors))
        x = ids_for()
        with torch.no_grad():
            z, _, _ = m(x, mtp=False)
        np.testing.assert_allclose(z[0].numpy(), rf.forward(p, x[0].tolist()), rtol=1e-4, atol=1e-4)

    def test_layout_llama_cpp_reads(self):
        """Keys (with their GGUF types) and tensor shapes/types as llama.cpp's deepseek2 loader
        (load_arch_hparams / load_arch_tensors) and graph_mtp's assertions need them."""
        m = random_model(seed=8)
        f = gguf_reader.read(self.export(m))
        md, a = f.metadata, "deepseek2."
        E, H, V = 32, 2, 4096
        r, q, nope, rot, v, ff, ffe, n_exp = 24, 16, 8, 8, 12, 48, 16, 4
        u32 = {"context_length": 64, "embedding_length": E, "block_count": 4, "feed_forward_length": ff,
               "vocab_size": V, "attention.head_count": H, "attention.head_count_kv": 1,
               "attention.key_length": r + rot, "attention.value_length": r,
               "attention.key_length_mla": nope + rot, "attention.value_length_mla": v,
               "attention.q_lora_rank": q, "attention.kv_lora_rank": r, "rope.dimension_count": rot,
               "leading_dense_block_count": 1, "expert_count": n_exp, "expert_used_count": 2,
               "expert_shared_count": 1, "expert_feed_forward_length": ffe, "expert_gating_func": 2,
               "nextn_predict_layers": 1}
        for k, val in u32.items():
            self.assertEqual(md[a + k], val, k)
            self.assertEqual(f.types[a + k], gw.UINT32, k)
        for k, val in {"rope.freq_base": 10000.0, "attention.layer_norm_rms_epsilon": 1e-6,
                       "expert_weights_scale": 2.5}.items():
            self.assertAlmostEqual(md[a + k], val, places=6)
            self.assertEqual(f.types[a + k], gw.FLOAT32, k)
        self.assertIs(md[a + "expert_weights_norm"], True)
        self.assertEqual(md["general.architecture"], "deepseek2")
        target = gguf_reader.read(TARGET_GGUF)
        for k, val in target.metadata.items():  # the tokenizer, copied verbatim
            if k.startswith("tokenizer."):
                self.assertEqual(md[k], val, k)
                self.assertEqual(f.types[k], target.types[k], k)
        F32, F16 = gw.GGML_F32, gw.GGML_F16
        want = {"token_embd.weight": ([E, V], F16), "output_norm.weight": ([E], F32)}
        for il in range(4):
            p = f"blk.{il}."
            want.update({p + "attn_norm.weight": ([E], F32), p + "attn_q_a.weight": ([E, q], F16),
                         p + "attn_q_a_norm.weight": ([q], F32), p + "attn_q_b.weight": ([q, H * (nope + rot)], F16),
                         p + "attn_kv_a_mqa.weight": ([E, r + rot], F16), p + "attn_kv_a_norm.weight": ([r], F32),
                         p + "attn_k_b.weight": ([nope, r, H], F16), p + "attn_v_b.weight": ([r, v, H], F16),
                         p + "attn_output.weight": ([H * v, E], F16), p + "ffn_norm.weight": ([E], F32)})
            if il == 0:  # leading dense block
                want.update({p + "ffn_gate.weight": ([E, ff], F16), p + "ffn_up.weight": ([E, ff], F16),
                             p + "ffn_down.weight": ([ff, E], F16)})
            else:
                want.update({p + "ffn_gate_inp.weight": ([E, n_exp], F32), p + "exp_probs_b.bias": ([n_exp], F32),
                             p + "ffn_gate_exps.weight": ([E, ffe, n_exp], F16),
                             p + "ffn_up_exps.weight": ([E, ffe, n_exp], F16),
                             p + "ffn_down_exps.weight": ([ffe, E, n_exp], F16),
                             p + "ffn_gate_shexp.weight": ([E, ffe], F16), p + "ffn_up_shexp.weight": ([E, ffe], F16),
                             p + "ffn_down_shexp.weight": ([ffe, E], F16)})
        p = "blk.3.nextn."  # the MTP block: block_count - 1, shares token_embd and the output head
        want.update({p + "eh_proj.weight": ([2 * E, E], F16), p + "enorm.weight": ([E], F32),
                     p + "hnorm.weight": ([E], F32), p + "shared_head_norm.weight": ([E], F32)})
        self.assertEqual({n: tuple(i[:2]) for n, i in f.tensor_info.items()},
                         {n: (s, t) for n, (s, t) in want.items()})
        # attn_k_b is K_b transposed per head (llama.cpp multiplies q_nope by it into the latent space)
        kb = np.asarray(f.tensors["blk.1.attn_k_b.weight"], dtype=np.float32)
        np.testing.assert_array_equal(kb, m.blocks[1].attn.k_b.detach().numpy().transpose(0, 2, 1))
        # eh_proj's input is [enorm(embedding) ; hnorm(h)]: columns 0..E-1 read the embedding
        np.testing.assert_array_equal(np.asarray(f.tensors[p + "eh_proj.weight"], dtype=np.float32),
                                      m.mtp.eh_proj.weight.detach().numpy())


class TestRouting(unittest.TestCase):
    def test_bias_selects_but_does_not_weight(self):
        m = random_model(seed=9)
        moe = m.blocks[1].ffn
        x = torch.randn(50, TINY["n_embd"])
        with torch.no_grad():
            ids0, w0, s0 = moe.route(x)
            moe.exp_probs_b.zero_()
            moe.exp_probs_b[3] = 10.0  # expert 3 always chosen
            ids, w, s = moe.route(x)
        self.assertTrue(bool((ids == 3).any(-1).all()))
        torch.testing.assert_close(s, s0)
        # weights: the chosen experts' sigmoid scores, normalised to 1, times 2.5
        torch.testing.assert_close(w, s.gather(-1, ids) / s.gather(-1, ids).sum(-1, keepdim=True) * 2.5)
        torch.testing.assert_close(w.sum(-1), torch.full((50,), 2.5))

    def test_aux_loss_free_bias_update(self):
        m = random_model(seed=10)
        m.train()
        for moe in m.moe_layers():
            moe.exp_probs_b.zero_()
        _, _, aux = m(ids_for(40))
        load = aux["load"]
        self.assertEqual(tuple(load.shape), (len(m.moe_layers()), TINY["n_expert"]))
        self.assertTrue(bool((load.sum(1) == 40 * TINY["n_expert_used"]).all()))  # the MTP block's too
        self.assertGreater(float(aux["balance"]), 0)
        m.update_expert_bias(load, 0.01)
        for moe, l in zip(m.moe_layers(), load):
            b = moe.exp_probs_b
            mean = l.float().mean()
            torch.testing.assert_close(b, 0.01 * torch.sign(mean - l.float()))

    def test_expert_dispatch_matches_a_loop(self):
        """The sorted dispatch (and its backward) == a per-token loop over the chosen experts."""
        torch.manual_seed(11)
        c = DeepseekConfig(**TINY)
        moe = MoE(c)
        for p in moe.parameters():
            torch.nn.init.normal_(p, 0, 0.3)
        x = torch.randn(2, 7, c.n_embd, requires_grad=True)
        y = moe(x)
        ids, w, _ = moe.route(x.reshape(-1, c.n_embd))
        ref = []
        for i, row in enumerate(x.reshape(-1, c.n_embd)):
            acc = moe.shared(row)
            for j, e in enumerate(ids[i].tolist()):
                h = torch.nn.functional.silu(moe.gate_exps[e] @ row) * (moe.up_exps[e] @ row)
                acc = acc + w[i, j] * (moe.down_exps[e] @ h)
            ref.append(acc)
        ref = torch.stack(ref).view_as(y)
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
        g1 = torch.autograd.grad(y.square().sum(), [x, moe.gate_exps, moe.router.weight])
        g2 = torch.autograd.grad(ref.square().sum(), [x, moe.gate_exps, moe.router.weight])
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


class TestDeepseekTraining(unittest.TestCase):
    CFG = json.dumps(dict(n_layer=2, n_embd=32, n_head=2, q_lora_rank=16, kv_lora_rank=16, qk_nope_dim=8,
                          qk_rope_dim=8, v_head_dim=8, n_ff=48, n_expert=4, n_expert_used=2, n_ff_exp=16, n_ctx=64))

    def test_resume_is_exact(self):
        """3 + 3 resumed steps log what 6 in one go do: weights, optimizer, RNG and the selection
        biases (updated every step here, so routing depends on them) are all restored."""
        from dspark_train import train_deepseek
        common = ["--config", self.CFG, "--seq-len", "32", "--tokens-per-step", "128", "--eval-every", "1000",
                  "--log-every", "1", "--total-tokens", "4000", "--dtype", "fp32", "--long-every", "3",
                  "--bias-update-rate", "0.01", "--mtp-lambda-switch", "0.1"]
        with tempfile.TemporaryDirectory() as d:
            a = assert_resume_is_exact(self, train_deepseek.main, common, d)
            self.assertEqual([r["mtp_lambda"] for r in a], ["0.3"] * 4 + ["0.1"] * 2)
            ck = torch.load(f"{d}/b/ckpt.pt")
            self.assertTrue(any(float(v.abs().sum()) > 0 for k, v in ck["model"].items() if k.endswith("exp_probs_b")))

            # export-deepseek of that checkpoint: a file the numpy reference reads as PyTorch computes it
            out = f"{d}/x.gguf"
            ed.main(["--ckpt", f"{d}/b/ckpt.pt", "--out", out, "--no-eval", "--n-samples", "0"])
            card = json.loads(open(f"{d}/x.json").read())
            self.assertEqual(card["steps"], 6)
            self.assertTrue(card["mtp"])
            self.assertLess(card["params_active"], card["params"])
            c = DeepseekConfig(**ck["config"])
            m = Deepseek2(c).eval()
            m.load_state_dict(ed.file_rounded(ck["model"], c))
            x = ids_for(16)
            with torch.no_grad():
                z, zm, _ = m(x)
            z_ref, zm_ref = rf.deepseek2_mtp_forward(out, x[0].tolist())
            np.testing.assert_allclose(z[0].numpy(), z_ref, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(zm[0].numpy(), zm_ref, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    unittest.main()


class TestDeepseekTeacher(unittest.TestCase):
    """The deepseek2 target as the teacher of the drafters that read its features (DSpark, EAGLE-3)
    and of the draft model: the trunk's logits and taps, from a checkpoint or a GGUF."""

    CFG = json.dumps(dict(n_layer=4, n_embd=32, n_head=2, q_lora_rank=16, kv_lora_rank=16, qk_nope_dim=8,
                          qk_rope_dim=8, v_head_dim=8, n_ff=48, n_expert=4, n_expert_used=2, n_ff_exp=16, n_ctx=64))

    def test_teacher_is_the_trunk_and_drafters_train_on_it(self):
        from dspark_train import teacher, train_deepseek, train_dspark, train_eagle3
        with tempfile.TemporaryDirectory() as d:
            train_deepseek.main(["--config", self.CFG, "--seq-len", "32", "--tokens-per-step", "128", "--eval-every",
                                 "1000", "--total-tokens", "1000", "--dtype", "fp32", "--out", f"{d}/t",
                                 "--max-steps", "1"])
            ck = torch.load(f"{d}/t/ckpt.pt")
            model = Deepseek2(DeepseekConfig(**ck["config"]))
            model.load_state_dict(ck["model"])
            model.eval()
            x = ids_for(20)
            with torch.no_grad():
                want, _, _ = model(x, mtp=False)
                t = teacher.load_target(f"{d}/t/ckpt.pt")
                self.assertIsInstance(t, teacher.DeepseekTeacher)
                torch.testing.assert_close(t(x), want, rtol=0, atol=0)
                last, taps = t.hidden_states(x, taps=(-1, 1))
                torch.testing.assert_close(t.logits_from_hidden(last), want, rtol=0, atol=0)
                self.assertEqual(sorted(taps), [-1, 1])
                # From the exported file: the same function of the file's (f16-rounded) weights.
                ed.main(["--ckpt", f"{d}/t/ckpt.pt", "--out", f"{d}/t.gguf", "--no-eval", "--n-samples", "0"])
                rounded = Deepseek2(model.c)
                rounded.load_state_dict(ed.file_rounded(model.state_dict(), model.c))
                rounded.eval()
                torch.testing.assert_close(teacher.load_target(f"{d}/t.gguf")(x), rounded(x, mtp=False)[0],
                                           rtol=1e-5, atol=1e-5)
                self.assertEqual(teacher.drafter_shape(model.c)["n_head"], 2)
            common = ["--teacher", f"{d}/t/ckpt.pt", "--seq-len", "24", "--batch", "2", "--steps", "2",
                      "--log-every", "1", "--dtype", "fp32"]
            self.assertEqual(train_dspark.main(common + ["--out", f"{d}/ds", "--anchors", "4", "--n-layer", "1",
                                                         "--block-size", "4", "--markov-rank", "8",
                                                         "--target-layers", "0,1,2"]), 0)
            self.assertEqual(train_eagle3.main(common + ["--out", f"{d}/e3", "--ttt-steps", "2", "--n-head", "2",
                                                         "--n-head-kv", "1", "--head-dim", "16", "--n-ff", "32",
                                                         "--target-layers", "1,2,4"]), 0)
            for run in ("ds", "e3"):
                self.assertEqual(torch.load(f"{d}/{run}/ckpt.pt")["step"], 2)
