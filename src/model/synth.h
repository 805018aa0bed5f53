// Random-weight models of any dense shape, written as real GGUF files: the tiny models every test
// runs on, and benchmark models of real shapes (Qwen3-0.6B/1.7B, Llama-3.2-1B) with a real
// tokenizer copied from another GGUF. Weights are deterministic in the seed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/quantize.h"
#include "util/dtype.h"
#include "util/status.h"

namespace dspark {

struct SynthSpec {
  std::string arch = "qwen3";  // llama, mistral, qwen2, qwen3, qwen3moe, deepseek2
  int n_vocab = 512;
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 16;
  int n_ff = 128;
  // Mixture of experts (qwen3moe, or llama as Mixtral): n_expert > 0 replaces every dense FFN with
  // a router (F32, as llama.cpp's converter writes it) and 3-D expert tensors.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  // Std of the router's weights relative to 1/sqrt(n_embd): larger values make routing decisive.
  float router_gain = 1.0f;
  // DeepSeek's mixture (deepseek2): shared experts, leading dense blocks, gating (1 softmax, 2
  // sigmoid), a selection bias per expert (exp_probs_b), expert groups, weight norm and scale.
  int n_expert_shared = 0;
  int n_leading_dense = 0;
  int expert_gating = 1;
  bool expert_bias = false;
  int n_expert_group = 0;
  int n_expert_group_used = 0;
  bool expert_weights_norm = true;
  float expert_weights_scale = 0.0f;
  // Multi-head latent attention (deepseek2): q_lora_rank 0 = one attn_q; split_kv_b: attn_k_b /
  // attn_v_b (else the older attn_kv_b). head_dim is unused; yarn_log_mul: the file's
  // rope.scaling.yarn_log_multiplier (0: none).
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_dim = 0;
  int qk_rope_dim = 0;
  int v_head_dim = 0;
  bool split_kv_b = true;
  float yarn_log_mul = 0.0f;
  // deepseek2: multi-token-prediction blocks after the trunk (nextn_predict_layers; block_count
  // counts them), each a mixture block with nextn.{eh_proj, enorm, hnorm, shared_head_norm}.
  int n_nextn = 0;
  int n_ctx = 512;
  float rope_base = 10000.0f;
  float rms_eps = 1e-6f;
  bool tied_embeddings = true;
  bool llama3_rope_freqs = false;  // add a rope_freqs.weight tensor (llama 3.x scaling)
  std::string rope_scaling = "none";  // none | linear | yarn
  float rope_scaling_factor = 1.0f;
  DType matrix_type = DType::kF32;  // 2-D weights (embeddings included)
  // kQ4_K_M: matrix_type is Q4_K and each matrix takes the type llama.cpp's Q4_K_M mixture gives
  // it (QuantizeTensorType: Q6_K LM head, attn_v and ffn_down in use_more_bits layers).
  QuantizeMix matrix_mix = QuantizeMix::kUniform;
  uint64_t seed = 1;
  // Std of matrix weights relative to 1/sqrt(cols); large values make greedy decoding decisive.
  float weight_gain = 1.0f;
  // Std of token embeddings relative to 1/sqrt(n_embd); 0 means sqrt(n_embd) (unit-variance
  // elements). With tied embeddings this also sets how peaked the output distribution is.
  float embedding_gain = 0.0f;
};

// Named real shapes for `dspark synth`: qwen3-0.6b, qwen3-1.7b, llama-3.2-1b, qwen3-30b-a3b,
// deepseek-v2-lite, deepseek-v3-mini (a small V3-style model: q LoRA, sigmoid gating with the
// selection bias, expert groups, weight scale).
std::optional<SynthSpec> SynthShape(const std::string& name);
std::vector<std::string> SynthShapeNames();

// Writes a small SentencePiece-style vocabulary into `w`: <unk>, <s>, </s>, byte tokens, then
// filler pieces, n_vocab tokens in all (tiny test models; no real text tokenises well with it).
void AddToyVocab(gguf::Writer& w, int n_vocab);

// Writes the model. If `vocab` is given its tokenizer.* metadata is copied and n_vocab is taken
// from it; otherwise a small SentencePiece-style vocabulary (control, byte and filler tokens) is
// generated. progress(done_bytes, total_bytes) reports writing.
Status WriteSynthModel(const SynthSpec& spec, const gguf::File* vocab, const std::string& path,
                       const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace dspark
