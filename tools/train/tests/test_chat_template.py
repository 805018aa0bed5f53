"""set-chat-template rewrites only tokenizer.chat_template; the exporters write the ChatML template.

    cd tools/train && /usr/bin/python3 -m pytest tests/test_chat_template.py
"""
import hashlib
import json
import os
import tempfile
import unittest

import jinja2
import numpy as np

from dspark_train import gguf_reader
from dspark_train import gguf_vocab
from dspark_train import gguf_writer as gw
from dspark_train import set_chat_template as sct
from dspark_train import tokenizer as tok

KEY = gguf_vocab.CHAT_TEMPLATE_KEY


def tiny_gguf(path):
    w = gw.GGUFWriter()
    w.add_str("general.architecture", "qwen3")
    w.add_u32("qwen3.block_count", 1)
    w.add_str("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", gw.STRING, ["<unk>", "<s>", "</s>", "a"])
    w.add_array("tokenizer.ggml.scores", gw.FLOAT32, [0.0, 0.0, 0.0, -1.5])
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_f32("zzz.after", 0.25)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((4, 8)), gw.GGML_F16)
    w.add_tensor("output_norm.weight", rng.standard_normal(8), gw.GGML_F32)
    w.add_tensor("blk.0.attn_q.weight", rng.standard_normal((3, 8)), gw.GGML_F16)  # 48 B: padded
    w.write(path)


def tensor_bytes(path):
    f = gguf_reader.read(path)
    return {n: (f.tensor_info[n], hashlib.sha256(a.tobytes()).hexdigest()) for n, a in f.tensors.items()}


def without(md, key):
    return [(k, v) for k, v in md.items() if k != key]


class TestSetChatTemplate(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.src = os.path.join(self.dir.name, "in.gguf")
        tiny_gguf(self.src)

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def assert_same_except_template(self, a_path, b_path):
        a, b = gguf_reader.read(a_path), gguf_reader.read(b_path)
        self.assertEqual(without(a.metadata, KEY), without(b.metadata, KEY))  # values and order
        self.assertEqual({k: t for k, t in a.types.items() if k != KEY}, {k: t for k, t in b.types.items() if k != KEY})
        self.assertEqual(tensor_bytes(a_path), tensor_bytes(b_path))
        self.assertEqual(sct.data_sha256(a_path), sct.data_sha256(b_path))
        self.assertEqual(b.data_start % 32, 0)
        return b

    def test_adds_chatml_next_to_the_tokenizer_keys(self):
        out = self.path("out.gguf")
        self.assertEqual(sct.main([self.src, out]), 0)
        f = self.assert_same_except_template(self.src, out)
        self.assertEqual(f.metadata[KEY], gguf_vocab.chatml_template())
        self.assertEqual(f.types[KEY], gw.STRING)
        keys = list(f.metadata)
        self.assertEqual(keys.index(KEY), keys.index("tokenizer.ggml.add_bos_token") + 1)
        self.assertEqual(os.path.getsize(out) - f.data_start, os.path.getsize(self.src) - gguf_reader.read(self.src).data_start)

    def test_replaces_in_place_then_removes(self):
        first = self.path("first.gguf")
        sct.main([self.src, first])
        n_keys = len(gguf_reader.read(first).metadata)
        custom = self.path("t.jinja")
        with open(custom, "w") as fh:
            fh.write("{% for m in messages %}{{ m.content }}{% endfor %}\n")
        sct.main([first, first, "--template", custom])  # in place
        f = self.assert_same_except_template(self.src, first)
        self.assertEqual(f.metadata[KEY], "{% for m in messages %}{{ m.content }}{% endfor %}")
        self.assertEqual(len(f.metadata), n_keys)
        self.assertFalse(os.path.exists(first + ".tmp"))
        gone = self.path("gone.gguf")
        sct.main([first, gone, "--remove"])
        with open(self.src, "rb") as a, open(gone, "rb") as b:
            self.assertEqual(a.read(), b.read())  # back to the original, byte for byte

    def test_rejects_a_file_that_is_not_gguf(self):
        bad = self.path("bad.gguf")
        with open(bad, "wb") as fh:
            fh.write(b"NOPE" + bytes(64))
        with self.assertRaises(ValueError):
            sct.rewrite_metadata(bad, self.path("x.gguf"), {KEY: "x"})
        self.assertFalse(os.path.exists(self.path("x.gguf")))


class TestExportedTemplate(unittest.TestCase):
    def test_exporters_write_chatml(self):
        w = gw.GGUFWriter()
        gguf_vocab.add_tokenizer(w, tok.load())
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "v.gguf")
            w.write(p)
            self.assertEqual(gguf_reader.read(p).metadata[KEY], gguf_vocab.chatml_template())

    def test_renders_chatml_with_hermes_tools(self):
        # As transformers renders chat templates (trim_blocks, lstrip_blocks, tojson without escaping).
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x, **_: json.dumps(x, ensure_ascii=False)
        t = env.from_string(gguf_vocab.chatml_template())
        plain = t.render(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True)
        self.assertEqual(plain, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        out = t.render(messages=msgs, tools=[tool], add_generation_prompt=True)
        self.assertTrue(out.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n"), out)
        self.assertIn("<tools>\n" + json.dumps(tool) + "\n</tools>", out)
        self.assertIn('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                      "</tool_call><|im_end|>\n", out)
        self.assertIn("<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n", out)
        self.assertTrue(out.endswith("<|im_start|>assistant\n"))


if __name__ == "__main__":
    unittest.main()
