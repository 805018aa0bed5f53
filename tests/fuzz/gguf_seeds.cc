// Writes the GGUF fuzzer's seed corpus (tests/fuzz/corpus/gguf): the smallest models of every
// architecture and layout the loader reads, so mutations start from files that load.
#include <cstdio>
#include <string>

#include "model/synth.h"

using namespace dspark;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gguf_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto tiny = [](const std::string& arch) {
    SynthSpec s;
    s.arch = arch;
    s.n_vocab = 16;
    s.n_embd = 16;
    s.n_layer = 1;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.head_dim = 8;
    s.n_ff = 32;
    s.n_ctx = 64;
    s.matrix_type = DType::kF32;
    return s;
  };
  std::vector<std::pair<std::string, SynthSpec>> seeds;
  for (const char* arch : {"llama", "qwen2", "qwen3"}) seeds.emplace_back(arch, tiny(arch));
  SynthSpec untied = tiny("llama");
  untied.tied_embeddings = false;
  untied.rope_scaling = "yarn";
  untied.rope_scaling_factor = 4.0f;
  seeds.emplace_back("llama-untied-yarn", untied);
  SynthSpec q8 = tiny("qwen3");
  q8.n_embd = 32;
  q8.n_ff = 32;
  q8.head_dim = 16;
  q8.matrix_type = DType::kQ8_0;
  seeds.emplace_back("qwen3-q8_0", q8);
  SynthSpec moe = tiny("qwen3moe");
  moe.n_expert = 4;
  moe.n_expert_used = 2;
  moe.n_ff_exp = 8;
  seeds.emplace_back("qwen3moe", moe);
  SynthSpec mla = tiny("deepseek2");
  mla.n_layer = 2;
  mla.n_head_kv = 2;
  mla.kv_lora_rank = 8;
  mla.q_lora_rank = 8;
  mla.qk_nope_dim = 8;
  mla.qk_rope_dim = 4;
  mla.v_head_dim = 8;
  mla.n_expert = 4;
  mla.n_expert_used = 2;
  mla.n_ff_exp = 8;
  mla.n_expert_shared = 1;
  mla.n_leading_dense = 1;
  mla.expert_gating = 2;
  mla.expert_bias = true;
  mla.n_expert_group = 2;
  mla.n_expert_group_used = 1;
  seeds.emplace_back("deepseek2", mla);
  SynthSpec legacy = mla;
  legacy.split_kv_b = false;
  legacy.q_lora_rank = 0;
  seeds.emplace_back("deepseek2-kv_b", legacy);
  SynthSpec mtp = mla;  // a multi-token-prediction block after the trunk
  mtp.n_nextn = 1;
  seeds.emplace_back("deepseek2-nextn", mtp);
  for (const auto& [name, spec] : seeds) {
    const Status s = WriteSynthModel(spec, nullptr, dir + "/" + name + ".gguf");
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), s.message().c_str());
      return 1;
    }
  }
  return 0;
}
