"""inflate.py: the inflated target predicts what the bundled one does (the F16 file as written),
the converted DSpark drafter drafts what it drafted, and the output is deterministic.

Small inflations of the bundled models keep it fast: width x2 with 8 -> 11 blocks (the division by
2 is exact, so this checks the layout: tiling, GQA pairing, identity blocks, untied head, taps),
width x3 (w / 3 is rounded to F16: this checks that the rounding stays harmless), and width x2 with
8 -> 10 blocks upcycled to 4 experts with 2 used (the qwen3moe layout, routing, identity blocks as
mixtures).

    cd tools/train && /usr/bin/python3 -m pytest tests/test_inflate.py
"""
import hashlib
import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

import numpy as np
import torch

from dspark_train import eval_drafters
from dspark_train import gguf_reader
from dspark_train import inflate
from dspark_train import ref_forward
from dspark_train import tokenizer as tok
from dspark_train.paths import DRAFT_GGUF, DSPARK_GGUF, REPO_ROOT, TARGET_GGUF

PROMPTS = REPO_ROOT / "bench" / "prompts" / "code-completion.jsonl"  # the test split: held out


def held_out(n_seqs=2, n_tokens=160):
    """Token ids of held-out code: prompt + reference of a few test-split functions."""
    sp = tok.load()
    recs = [json.loads(line) for line in PROMPTS.read_text().splitlines()]
    seqs = []
    for r in recs[3::7][:n_seqs]:
        seqs.append(([tok.BOS_ID] + sp.encode(r["prompt"] + r["reference"]))[:n_tokens])
    return seqs


def kl_per_token(logits_p, logits_q):
    """KL(p || q) in nats for each row of two logit matrices [T, V]."""
    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    lp, lq = log_softmax(logits_p), log_softmax(logits_q)
    return (np.exp(lp) * (lp - lq)).sum(-1)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_inflate(out_dir, *args, dspark=True, eagle3=None):
    out = os.path.join(out_dir, "target.gguf")
    argv = ["--target", str(TARGET_GGUF), "--out", out, *args]
    if dspark:
        argv += ["--dspark", str(DSPARK_GGUF), "--dspark-out", os.path.join(out_dir, "dspark.gguf")]
    if eagle3:
        argv += ["--eagle3", eagle3, "--eagle3-out", os.path.join(out_dir, "eagle3.gguf")]
    assert inflate.main(argv) == 0
    return out, os.path.join(out_dir, "dspark.gguf")


def random_eagle3(path):
    """An EAGLE-3 head for the bundled target (width 384, taps [2, 5, 7], the norm over the taps
    on), random but fixed: its weights scaled up from the init so that its logits are far from
    flat and a wrong map shows. No own tables: it uses the target's."""
    from dspark_train import export_eagle3
    from dspark_train.eagle3_model import Eagle3, Eagle3Config
    torch.manual_seed(5)
    head = Eagle3(Eagle3Config(target_layers=[2, 5, 7], norm_before_fc=True))
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
            else:
                p.mul_(3.0)
    export_eagle3.write_eagle3(path, head.state_dict(), head.c, tok.load())
    return path


class TestInflateLayout(unittest.TestCase):
    def test_originals_spread_evenly_and_taps_follow_them(self):
        self.assertEqual(inflate.block_positions(8, 28), [0, 4, 8, 12, 15, 19, 23, 27])
        self.assertEqual(inflate.block_positions(8, 11), [0, 1, 3, 4, 6, 7, 9, 10])
        self.assertEqual(inflate.block_positions(8, 8), list(range(8)))
        pos = inflate.block_positions(8, 28)
        # tap t = the stream entering original layer t = original layer t-1's output
        self.assertEqual([inflate.tap_index(t, pos) for t in (0, 2, 5, 7, 8)], [0, 5, 16, 24, 28])
        with self.assertRaises(ValueError):
            inflate.block_positions(8, 7)

    def test_tiles_producers_and_divides_consumers(self):
        w = np.arange(6, dtype=np.float32).reshape(2, 3)
        t = inflate.tile_matrix(w, 2)
        np.testing.assert_array_equal(t, np.block([[w / 2, w / 2], [w / 2, w / 2]]))
        x = np.array([1.0, -2.0, 0.5])
        np.testing.assert_allclose(t @ np.tile(x, 2), np.tile(w @ x, 2))
        fc = np.arange(12, dtype=np.float64).reshape(2, 6)  # E = 2, three taps of 2
        taps = [np.array([1.0, 2.0]), np.array([3.0, -1.0]), np.array([0.5, 4.0])]
        got = inflate.tile_fc(fc, 3, 3) @ np.concatenate([np.tile(h, 3) for h in taps])
        np.testing.assert_allclose(got, np.tile(fc @ np.concatenate(taps), 3))
        conf = np.arange(5, dtype=np.float64).reshape(1, 5)  # E = 2, R = 3
        h, e = np.array([1.0, -1.0]), np.array([2.0, 0.0, 1.0])
        np.testing.assert_allclose(inflate.tile_conf(conf, 3, 2) @ np.concatenate([np.tile(h, 3), e]),
                                   conf @ np.concatenate([h, e]))


class TestInflateBundled(unittest.TestCase):
    """Width x2, 8 -> 11 blocks, target and drafter."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.eagle3_src = random_eagle3(os.path.join(cls.tmp.name, "eagle3-src.gguf"))
        cls.target, cls.dspark = run_inflate(cls.tmp.name, "--width-mult", "2", "--blocks", "11",
                                             eagle3=cls.eagle3_src)
        cls.eagle3 = os.path.join(cls.tmp.name, "eagle3.gguf")
        # The drafter with its heads and neurons tiled too (--dspark-tile-blocks).
        cls.dspark_tiled = os.path.join(cls.tmp.name, "dspark-tiled.gguf")
        assert inflate.main(["--target", str(TARGET_GGUF), "--width-mult", "2", "--blocks", "11", "--dspark",
                             str(DSPARK_GGUF), "--dspark-out", cls.dspark_tiled, "--dspark-tile-blocks"]) == 0
        cls.seqs = held_out()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_metadata_describes_the_new_shape(self):
        src, f = gguf_reader.read(TARGET_GGUF), gguf_reader.read(self.target)
        md = f.metadata
        self.assertEqual(md["general.architecture"], "qwen3")
        self.assertEqual(md["general.name"], src.metadata["general.name"] + "-x2-11L")
        self.assertEqual(md["qwen3.block_count"], 11)
        self.assertEqual(md["qwen3.embedding_length"], 768)
        self.assertEqual(md["qwen3.feed_forward_length"], 2048)
        self.assertEqual(md["qwen3.attention.head_count"], 12)
        self.assertEqual(md["qwen3.attention.head_count_kv"], 4)
        self.assertEqual(md["qwen3.attention.key_length"], 64)
        self.assertEqual(md["general.file_type"], 1)
        self.assertEqual(md["dspark.inflate.source_blocks"], [0, 1, 3, 4, 6, 7, 9, 10])
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                    "tokenizer.ggml.mask_token_id", "qwen3.rope.freq_base"):
            self.assertEqual(md[key], src.metadata[key], key)
            self.assertEqual(f.types[key], src.types[key], key)
        self.assertEqual(f.tensor_info["output.weight"][:2], ([768, 4096], 1))  # untied, F16
        self.assertEqual(f.tensor_info["token_embd.weight"][:2], ([768, 4096], 1))
        self.assertEqual(f.tensor_info["blk.2.attn_q_norm.weight"][:2], ([64], 0))
        self.assertEqual(len(f.tensors), 2 + 11 * 11 + 1)
        # identity blocks write nothing into the residual stream
        for name in ("blk.2.attn_output.weight", "blk.8.ffn_down.weight"):
            self.assertFalse(np.any(f.tensors[name]), name)
        self.assertTrue(np.any(f.tensors["blk.2.attn_q.weight"]))

        d = gguf_reader.read(self.dspark).metadata
        self.assertEqual(d["dflash.target_layers"], [2, 7, 10])  # [2, 5, 7] of the original layers
        self.assertEqual(d["dflash.embedding_length"], 768)
        # The drafter's blocks keep their heads and FFN neurons; only the residual stream widens.
        self.assertEqual(d["dflash.feed_forward_length"], 1024)
        self.assertEqual(d["dflash.attention.head_count"], 6)
        self.assertEqual(d["dflash.attention.head_count_kv"], 2)
        self.assertEqual(d["dflash.attention.key_length"], 64)
        self.assertEqual(d["dflash.block_count"], 2)
        info = gguf_reader.read(self.dspark).tensor_info
        self.assertEqual(info["blk.0.attn_q.weight"][0], [768, 384])     # ne = [in, out]
        self.assertEqual(info["blk.0.attn_output.weight"][0], [384, 768])
        self.assertEqual(info["blk.1.ffn_down.weight"][0], [1024, 768])
        t = gguf_reader.read(self.dspark_tiled)
        self.assertEqual(t.metadata["dflash.feed_forward_length"], 2048)
        self.assertEqual(t.metadata["dflash.attention.head_count"], 12)
        self.assertEqual(t.metadata["dflash.attention.head_count_kv"], 4)
        self.assertEqual(t.tensor_info["blk.0.attn_q.weight"][0], [768, 768])

    def test_next_token_distribution_matches_on_held_out_text(self):
        for ids in self.seqs:
            small = ref_forward.forward(TARGET_GGUF, ids)
            big = ref_forward.forward(self.target, ids)
            kl = kl_per_token(small, big)
            self.assertLessEqual(kl.mean(), 1e-4)
            self.assertLessEqual(kl.max(), 1e-4)
            np.testing.assert_array_equal(small.argmax(-1), big.argmax(-1))

    def test_two_runs_write_identical_bytes(self):
        with tempfile.TemporaryDirectory() as d:
            target, dspark = run_inflate(d, "--width-mult", "2", "--blocks", "11")
            self.assertEqual(sha256(target), sha256(self.target))
            self.assertEqual(sha256(dspark), sha256(self.dspark))
        with tempfile.TemporaryDirectory() as d:  # the seed is what makes it so
            target, _ = run_inflate(d, "--width-mult", "2", "--blocks", "11", "--seed", "7", dspark=False)
            self.assertNotEqual(sha256(target), sha256(self.target))

    def test_drafter_drafts_the_same_for_the_inflated_target(self):
        """DSpark.draft (PyTorch) from float64 target taps: the same tokens and confidences."""
        torch.set_num_threads(2)
        small_d = eval_drafters.load_dspark(DSPARK_GGUF)
        bigs = [eval_drafters.load_dspark(p) for p in (self.dspark, self.dspark_tiled)]
        small_f, big_f = gguf_reader.read(TARGET_GGUF), gguf_reader.read(self.target)
        small_emb = torch.tensor(np.asarray(small_f.tensors["token_embd.weight"], dtype=np.float32))
        big_emb = torch.tensor(np.asarray(big_f.tensors["token_embd.weight"], dtype=np.float32))
        big_head = torch.tensor(np.asarray(big_f.tensors["output.weight"], dtype=np.float32))
        small_taps = list(gguf_reader.read(DSPARK_GGUF).metadata["dflash.target_layers"])
        big_taps = list(gguf_reader.read(self.dspark).metadata["dflash.target_layers"])
        n_drafts = 0
        for ids in self.seqs:
            _, ts = ref_forward.forward(small_f, ids, taps=small_taps)
            _, tb = ref_forward.forward(big_f, ids, taps=big_taps)
            feats_s = torch.tensor(np.concatenate([ts[t] for t in small_taps], -1)[None], dtype=torch.float32)
            feats_b = torch.tensor(np.concatenate([tb[t] for t in big_taps], -1)[None], dtype=torch.float32)
            for p in range(16, len(ids), 24):
                toks_s, conf_s, z_s = small_d.draft(small_emb, feats_s[:, :p], ids[p], p)
                for big_d in bigs:
                    toks_b, conf_b, z_b = big_d.draft(big_emb, feats_b[:, :p], ids[p], p, head_weight=big_head)
                    self.assertEqual(toks_s, toks_b, f"anchor at {p}")
                    np.testing.assert_allclose(conf_s, conf_b, atol=1e-4)
                    np.testing.assert_allclose(z_s.numpy(), z_b.numpy(), atol=2e-3)
                    n_drafts += 1
        self.assertGreaterEqual(n_drafts, 20)

    def test_eagle3_layout(self):
        src, f = gguf_reader.read(self.eagle3_src), gguf_reader.read(self.eagle3)
        md = f.metadata
        self.assertEqual(md["eagle3.target_layers"], [2, 7, 10])  # [2, 5, 7] of the original layers
        self.assertEqual(md["eagle3.target_hidden_size"], 768)
        for key in ("embedding_length", "feed_forward_length", "attention.head_count", "attention.head_count_kv",
                    "block_count", "norm_before_fc", "norm_before_residual"):
            self.assertEqual(md["eagle3." + key], src.metadata["eagle3." + key], key)
        self.assertEqual(md["dspark.inflate.width_mult"], 2)
        self.assertEqual(f.tensor_info["fc.weight"][:2], ([3 * 768, 384], 1))
        self.assertEqual(f.tensor_info["enc.output_norm.weight"][:2], ([3 * 768], 0))
        self.assertEqual(f.tensor_info["token_embd.weight"][:2], ([384, 4096], 1))  # the small target's
        self.assertEqual(f.tensor_info["output.weight"][:2], ([384, 4096], 1))
        t = gguf_reader.read(TARGET_GGUF)
        np.testing.assert_array_equal(f.tensors["token_embd.weight"], t.tensors["token_embd.weight"])
        np.testing.assert_array_equal(f.tensors["output.weight"], t.tensors["token_embd.weight"])  # tied
        for n in src.tensors:
            if n not in ("fc.weight", "enc.output_norm.weight"):
                np.testing.assert_array_equal(f.tensors[n], src.tensors[n], n)

    def test_eagle3_head_predicts_the_same_for_the_inflated_target(self):
        """ref_forward's eagle3 graph (float64): the converted head on the inflated target's taps
        gives the logits of the original head on the small target's taps, and the same drafts."""
        small_f, big_f = gguf_reader.read(TARGET_GGUF), gguf_reader.read(self.target)
        small_e, big_e = gguf_reader.read(self.eagle3_src), gguf_reader.read(self.eagle3)
        small_taps, big_taps = list(small_e.metadata["eagle3.target_layers"]), list(big_e.metadata["eagle3.target_layers"])
        n_drafts = 0
        for ids in self.seqs:
            _, ts = ref_forward.forward(small_f, ids, taps=small_taps)
            _, tb = ref_forward.forward(big_f, ids, taps=big_taps)
            feats_s = np.concatenate([ts[t] for t in small_taps], -1)
            feats_b = np.concatenate([tb[t] for t in big_taps], -1)
            n = len(ids) - 1
            z_s, h_s = ref_forward.eagle3_forward(small_e, feats_s[:n], ids[1:], target=small_f)
            z_b, h_b = ref_forward.eagle3_forward(big_e, feats_b[:n], ids[1:])
            np.testing.assert_allclose(z_b, z_s, atol=1e-4, rtol=0)
            np.testing.assert_allclose(h_b, h_s, atol=1e-4, rtol=0)
            self.assertGreater(float(z_s.std()), 0.5)  # not flat: a wrong map would show
            np.testing.assert_array_equal(z_b.argmax(-1), z_s.argmax(-1))
            for p in range(16, len(ids), 48):
                d_s, _ = ref_forward.eagle3_draft(small_e, feats_s[:p], ids[:p + 1], 4, target=small_f)
                d_b, _ = ref_forward.eagle3_draft(big_e, feats_b[:p], ids[:p + 1], 4)
                self.assertEqual(d_s, d_b, f"anchor at {p}")
                n_drafts += 1
        self.assertGreaterEqual(n_drafts, 4)

    def test_engine_runs_both_pairs_alike(self):
        """build/bin/dspark: plain and DSpark-speculative greedy decoding give the same tokens on the
        small and the inflated pair, with the same drafts and acceptance (cut schedule: the draft
        length does not depend on measured speed)."""
        binary = Path(os.environ.get("DSPARK_BIN") or REPO_ROOT / "build" / "bin" / "dspark")
        self.assertTrue(binary.is_file(), f"no dspark binary at {binary}: make build, or set DSPARK_BIN")
        prompt = 'def fibonacci(n):\\n    """Return the n-th Fibonacci number."""\\n'

        def generate(target, *spec):
            out = subprocess.run([str(binary), "generate", "-m", str(target), "-p", prompt, "-n", "48", "-t", "2",
                                  "--json", *spec], check=True, capture_output=True, text=True).stdout
            return json.loads(out[out.index("{"):])

        spec = ["--spec-type", "draft-dspark", "--spec-schedule", "cut", "--spec-draft-n-max", "4"]
        plain_s, plain_b = generate(TARGET_GGUF), generate(self.target)
        spec_s = generate(TARGET_GGUF, "-md", str(DSPARK_GGUF), *spec)
        spec_b = generate(self.target, "-md", self.dspark, *spec)
        self.assertEqual(plain_s["ids"], plain_b["ids"])
        self.assertEqual(spec_s["ids"], plain_s["ids"])
        self.assertEqual(spec_b["ids"], plain_b["ids"])
        keys = ("drafts", "drafted", "accepted", "accepted_per_position", "steps", "target_calls")
        self.assertEqual({k: spec_s["stats"][k] for k in keys}, {k: spec_b["stats"][k] for k in keys})
        self.assertGreater(spec_s["stats"]["accepted"], 0)
        np.testing.assert_allclose(spec_s["stats"]["predicted_survival_per_position"],
                                   spec_b["stats"]["predicted_survival_per_position"], atol=1e-4)


def generate_json(target, prompt, *args):
    """`dspark generate --json` (greedy) of the built engine, parsed."""
    binary = Path(os.environ.get("DSPARK_BIN") or REPO_ROOT / "build" / "bin" / "dspark")
    if not binary.is_file():
        raise AssertionError(f"no dspark binary at {binary}: make build, or set DSPARK_BIN")
    out = subprocess.run([str(binary), "generate", "-m", str(target), "-p", prompt, "-n", "48", "-t", "2",
                          "--json", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


class TestInflateMoe(unittest.TestCase):
    """Sparse upcycling: width x2, 8 -> 10 blocks, 4 experts with 2 used per token."""

    ARGS = ("--width-mult", "2", "--blocks", "10", "--moe-experts", "4", "--moe-used", "2")

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.target, cls.dspark = run_inflate(cls.tmp.name, *cls.ARGS)
        cls.seqs = held_out()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_qwen3moe_layout(self):
        src, f = gguf_reader.read(TARGET_GGUF), gguf_reader.read(self.target)
        md = f.metadata
        self.assertEqual(md["general.architecture"], "qwen3moe")
        self.assertEqual(md["general.name"], src.metadata["general.name"] + "-x2-10L-e4k2")
        self.assertFalse([k for k in md if k.startswith("qwen3.")])
        for key, value in (("block_count", 10), ("embedding_length", 768), ("feed_forward_length", 2048),
                           ("expert_count", 4), ("expert_used_count", 2), ("expert_feed_forward_length", 2048),
                           ("attention.head_count", 12), ("attention.head_count_kv", 4)):
            self.assertEqual(md["qwen3moe." + key], value, key)
            self.assertEqual(f.types["qwen3moe." + key], 4, key)  # uint32, as llama.cpp writes them
        for key in ("rope.freq_base", "attention.layer_norm_rms_epsilon", "context_length", "attention.key_length"):
            self.assertEqual(md["qwen3moe." + key], src.metadata["qwen3." + key], key)
        self.assertEqual(md["dspark.inflate.source_blocks"], [0, 1, 3, 4, 5, 6, 8, 9])  # 2, 7: identity
        info = f.tensor_info
        self.assertEqual(info["blk.0.ffn_gate_inp.weight"][:2], ([768, 4], 0))  # F32 router
        self.assertEqual(info["blk.0.ffn_gate_exps.weight"][:2], ([768, 2048, 4], 1))
        self.assertEqual(info["blk.0.ffn_up_exps.weight"][:2], ([768, 2048, 4], 1))
        self.assertEqual(info["blk.0.ffn_down_exps.weight"][:2], ([2048, 768, 4], 1))
        self.assertFalse([n for n in info if n.endswith(("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"))])
        self.assertEqual(len(info), 2 + 10 * 12 + 1)
        # every expert is the dense FFN, tiled; an identity block's experts add nothing
        dense = inflate.tile_matrix(src.tensors["blk.1.ffn_down.weight"], 2).astype(np.float16)
        for e in range(4):
            np.testing.assert_array_equal(f.tensors["blk.1.ffn_down_exps.weight"][e], dense)
        self.assertFalse(np.any(f.tensors["blk.2.ffn_down_exps.weight"]))
        self.assertTrue(np.any(f.tensors["blk.2.ffn_gate_exps.weight"]))
        self.assertTrue(np.any(f.tensors["blk.2.ffn_gate_inp.weight"]))

    def test_next_token_distribution_matches_and_routing_varies(self):
        for ids in self.seqs:
            routes = {}
            small = ref_forward.forward(TARGET_GGUF, ids)
            big = ref_forward.forward(self.target, ids, routes=routes)
            kl = kl_per_token(small, big)
            self.assertLessEqual(kl.mean(), 1e-4)
            self.assertLessEqual(kl.max(), 1e-4)
            np.testing.assert_array_equal(small.argmax(-1), big.argmax(-1))
            # Each block, original or identity, uses every expert and most pairs of them: the
            # router spreads tokens, it does not send them all one way.
            self.assertEqual(sorted(routes), list(range(10)))
            for il, chosen in routes.items():
                counts = np.bincount(chosen.ravel(), minlength=4)
                self.assertGreater(counts.min(), len(ids) // 10, f"block {il}: {counts}")
                self.assertGreaterEqual(len({tuple(sorted(c)) for c in chosen}), 5, f"block {il}")

    def test_engine_generates_what_the_small_target_does(self):
        """build/bin/dspark on the upcycled F16 file: the bundled target's greedy tokens, also
        speculatively with the unchanged draft model and with the DSpark drafter converted with the
        target's map."""
        prompt = 'def fibonacci(n):\\n    """Return the n-th Fibonacci number."""\\n'
        small, big = generate_json(TARGET_GGUF, prompt), generate_json(self.target, prompt)
        self.assertEqual(small["ids"], big["ids"])
        spec = generate_json(self.target, prompt, "-md", str(DRAFT_GGUF), "--spec-type", "draft-simple",
                             "--spec-draft-n-max", "4")
        self.assertEqual(spec["ids"], big["ids"])
        self.assertGreater(spec["stats"]["accepted"], 0)
        dspark = generate_json(self.target, prompt, "-md", self.dspark, "--spec-type", "draft-dspark",
                               "--spec-schedule", "cut", "--spec-draft-n-max", "4")
        self.assertEqual(dspark["ids"], big["ids"])
        self.assertGreater(dspark["stats"]["accepted"], 0)

    def test_router_is_seeded_and_the_named_shape_is_what_the_docs_say(self):
        f = gguf_reader.read(TARGET_GGUF)
        r = [inflate.router_tensor(64, 768, 1.0, seed, 3) for seed in (inflate.SEED, inflate.SEED, 7)]
        np.testing.assert_array_equal(r[0], r[1])
        self.assertFalse(np.array_equal(r[0], r[2]))
        self.assertAlmostEqual(float(r[0].std()) * np.sqrt(768), 1.0, delta=0.02)
        m, blocks, experts, used = inflate.SHAPES["moe"]
        w, _ = inflate.target_writer(f, m, blocks, inflate.SEED, "x", "0", experts, used)  # lazy: nothing made
        total, active = inflate.count_parameters(w, experts, used)
        self.assertEqual((m, blocks, experts, used), (2, 34, 64, 8))
        self.assertAlmostEqual(total / 1e9, 10.33, delta=0.01)
        self.assertAlmostEqual(active / 1e9, 1.35, delta=0.01)


class TestInflateRounding(unittest.TestCase):
    def test_width_x3_keeps_the_distribution_through_f16_rounding(self):
        with tempfile.TemporaryDirectory() as d:
            target, _ = run_inflate(d, "--width-mult", "3", dspark=False)
            for ids in held_out(n_seqs=1):
                kl = kl_per_token(ref_forward.forward(TARGET_GGUF, ids), ref_forward.forward(target, ids))
                self.assertLessEqual(kl.mean(), 1e-4)
                self.assertLessEqual(kl.max(), 1e-4)


if __name__ == "__main__":
    unittest.main()
