#include "golden_models.h"

namespace dspark::testing {

namespace {

// 320 tokens (the control and byte tokens of the toy vocabulary, then filler) keep llama.cpp's
// logits files small; 512 positions allow llama-perplexity's 512-token chunks. F32 weights: with
// F16 ones llama.cpp rounds the activations to F16 before each product, and a router's near-tie
// that rounding flips sends a position to another expert, a difference of rounding, not of the
// architecture. The quantised variants keep that noise, measured.
SynthSpec Base(const std::string& arch, DType type = DType::kF32) {
  SynthSpec s;
  s.arch = arch;
  s.n_vocab = 320;
  s.n_embd = 64;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 16;
  s.n_ff = 128;
  s.n_ctx = 512;
  s.matrix_type = type;
  s.weight_gain = 1.5f;
  s.embedding_gain = 3.0f;  // tied logits of std ~3: peaked enough for clear top tokens, not one-hot
  s.seed = 7;
  return s;
}

// DeepSeek-V2-Lite's layout at a tiny size: the first block dense, then 8 experts (2 used) and a
// shared one, softmax gating, no query LoRA, YaRN with the log multiplier.
SynthSpec DeepseekV2(bool split_kv_b) {
  SynthSpec s = Base("deepseek2");
  s.n_layer = 3;
  s.n_head_kv = s.n_head;
  s.kv_lora_rank = 32;
  s.qk_nope_dim = 32;
  s.qk_rope_dim = 16;
  s.v_head_dim = 32;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 32;
  s.n_expert_shared = 1;
  s.n_leading_dense = 1;
  s.expert_gating = 1;
  s.expert_weights_norm = false;
  s.expert_weights_scale = 1.0f;
  s.router_gain = 2.0f;
  s.split_kv_b = split_kv_b;
  s.rope_scaling = "yarn";
  s.rope_scaling_factor = 4.0f;
  s.yarn_log_mul = 0.0707f;
  return s;
}

// DeepSeek-V3's: a query LoRA, sigmoid gating with the selection bias, 4 expert groups of which
// 2 are kept, normalised weights scaled by 2.5.
SynthSpec DeepseekV3(bool split_kv_b) {
  SynthSpec s = DeepseekV2(split_kv_b);
  s.q_lora_rank = 32;
  s.expert_gating = 2;
  s.expert_bias = true;
  s.n_expert_group = 4;
  s.n_expert_group_used = 2;
  s.expert_weights_norm = true;
  s.expert_weights_scale = 2.5f;
  s.rope_scaling = "none";
  s.yarn_log_mul = 0.0f;
  return s;
}

SynthSpec Experts(SynthSpec s) {
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 32;
  s.router_gain = 2.0f;
  return s;
}

}  // namespace

std::vector<std::pair<std::string, SynthSpec>> LlamaCppGoldenModels() {
  std::vector<std::pair<std::string, SynthSpec>> m;
  m.emplace_back("deepseek2-v2", DeepseekV2(/*split_kv_b=*/true));
  m.emplace_back("deepseek2-v2-kv_b", DeepseekV2(/*split_kv_b=*/false));
  m.emplace_back("deepseek2-v3", DeepseekV3(/*split_kv_b=*/true));
  m.emplace_back("deepseek2-v3-kv_b", DeepseekV3(/*split_kv_b=*/false));
  SynthSpec ds_q8 = DeepseekV3(/*split_kv_b=*/true);
  ds_q8.matrix_type = DType::kQ8_0;
  m.emplace_back("deepseek2-v3-q8_0", ds_q8);
  m.emplace_back("qwen3moe", Experts(Base("qwen3moe")));
  m.emplace_back("llama-mixtral", Experts(Base("llama")));
  SynthSpec llama = Base("llama");
  llama.tied_embeddings = false;
  llama.llama3_rope_freqs = true;
  m.emplace_back("llama", llama);
  m.emplace_back("qwen2", Base("qwen2"));
  m.emplace_back("qwen3", Base("qwen3"));
  // K-quant super-blocks need rows of 256.
  SynthSpec q4 = Base("qwen3", DType::kQ4_K);
  q4.n_embd = 256;
  q4.head_dim = 64;
  q4.n_ff = 256;
  m.emplace_back("qwen3-q4_k", q4);
  return m;
}

}  // namespace dspark::testing
