#include "model/testing/tiny_models.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dspark::testing {

SynthSpec TinySpec(const std::string& arch, DType type, int n_vocab) {
  SynthSpec spec;
  spec.arch = arch;
  spec.matrix_type = type;
  const bool super_block = Info(type).block_size == 256;
  spec.n_embd = super_block ? 256 : 64;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.head_dim = super_block ? 64 : 16;
  spec.n_ff = super_block ? 512 : 128;
  spec.n_vocab = n_vocab;
  spec.tied_embeddings = arch != "qwen2";  // cover both LM-head layouts
  spec.llama3_rope_freqs = arch == "llama";
  spec.weight_gain = 1.5f;
  if (arch == "deepseek2") {  // V2-Lite's layout at a tiny size: 3 blocks, the first dense
    spec.n_head_kv = spec.n_head;
    spec.n_layer = 3;
    spec.kv_lora_rank = 32;
    spec.qk_nope_dim = 32;
    spec.qk_rope_dim = 16;
    spec.v_head_dim = 32;
    spec.n_expert = 8;
    spec.n_expert_used = 2;
    spec.n_ff_exp = 32;
    spec.n_expert_shared = 1;
    spec.n_leading_dense = 1;
    spec.expert_weights_norm = false;
    spec.expert_weights_scale = 1.0f;
    spec.router_gain = 2.0f;
    spec.llama3_rope_freqs = false;
  }
  if (arch == "qwen3moe") {  // 8 experts, 2 per token: blocks of a few rows already read most
    spec.n_expert = 8;
    spec.n_expert_used = 2;
    spec.n_ff_exp = super_block ? 256 : 32;
    spec.router_gain = 2.0f;
  }
  return spec;
}

std::string WriteTiny(const SynthSpec& spec, const std::string& tag) {
  const std::string path = TempPath("tiny_" + tag + ".gguf");
  Status s = WriteSynthModel(spec, nullptr, path);
  EXPECT_TRUE(s.ok()) << s.message();
  return path;
}

LoadedModel LoadModelForTest(const std::string& path) {
  LoadedModel l;
  auto f = gguf::File::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return l;
  l.file = std::move(*f);
  auto m = Model::FromFile(l.file);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (m.ok()) l.model = std::move(*m);
  auto t = Tokenizer::FromGguf(*l.file);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (t.ok()) l.tok = std::move(*t);
  return l;
}

std::vector<int32_t> ReferenceGreedy(Model& m, ThreadPool& pool, const std::vector<int32_t>& prompt, int n,
                                     int n_ctx) {
  KvCache cache(m.config(), 1, n_ctx);
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int>(i), 0, i + 1 == prompt.size());
  auto out = m.Forward(b, cache, pool);
  EXPECT_TRUE(out.ok()) << out.status().message();
  std::vector<int32_t> gen;
  int pos = static_cast<int>(prompt.size());
  const int n_vocab = m.config().n_vocab;
  while (out.ok() && static_cast<int>(gen.size()) < n) {
    const float* logits = out->logits.data();
    const int32_t t = static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
    gen.push_back(t);
    if (pos >= n_ctx || static_cast<int>(gen.size()) == n) break;
    Batch one;
    one.Add(t, pos++, 0, true);
    out = m.Forward(one, cache, pool);
    EXPECT_TRUE(out.ok()) << out.status().message();
  }
  return gen;
}

}  // namespace dspark::testing
