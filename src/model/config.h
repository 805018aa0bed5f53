// Hyperparameters of a loaded model, read from GGUF metadata by the architecture's file, and the
// traits that let the shared forward pass serve every dense architecture without knowing its name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dspark {

enum class RopeStyle {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]); llama (its converter permutes Q/K to match)
  kNeox,    // rotate halves (x[i], x[i + d/2]); qwen2, qwen3
};

enum class RopeScaling { kNone, kLinear, kYarn };

struct RopeConfig {
  RopeStyle style = RopeStyle::kNormal;
  int n_rot = 0;               // rotated dims per head (rope.dimension_count)
  float freq_base = 10000.0f;
  RopeScaling scaling = RopeScaling::kNone;
  float freq_scale = 1.0f;     // 1 / scaling.factor
  int n_ctx_orig = 0;          // rope.scaling.original_context_length (yarn)
  float yarn_ext_factor = 0.0f;
  // What cos and sin are multiplied by, as llama.cpp nets it out: rope.scaling.attn_factor (any
  // scaling, default 1), times YaRN's 1 + 0.1 ln(factor) for a YaRN factor above 1.
  float attn_factor = 1.0f;
  // YaRN's ramp: llama.cpp reads no keys for these in the architectures dspark runs.
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  std::vector<float> freq_factors;  // rope_freqs.weight (llama 3.x): theta_i /= freq_factors[i]
};

// What the shared forward pass needs to know about an architecture.
struct ArchTraits {
  bool qkv_bias = false;       // qwen2: biases on Q, K, V projections
  bool qk_norm = false;        // qwen3: per-head RMSNorm of Q and K before RoPE
  RopeStyle rope_style = RopeStyle::kNormal;
  bool experts = false;        // qwen3moe: every FFN block is a mixture of experts
};

enum class ExpertGating { kSoftmax, kSigmoid };

// Mixture-of-experts feed-forward blocks (`<arch>.expert_*` keys); n_expert == 0: every block is a
// dense SwiGLU FFN. As llama.cpp's build_moe_ffn: router logits -> gating probabilities -> the
// n_expert_used best -> their probabilities as weights, normalised to sum 1 if norm_weights, times
// weights_scale if it is not 0 -> the weighted sum of the chosen experts' SwiGLU outputs.
struct MoeConfig {
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;  // expert_feed_forward_length: each expert's hidden width
  ExpertGating gating = ExpertGating::kSoftmax;
  bool norm_weights = true;
  float weights_scale = 0.0f;  // 0: no scaling

  bool enabled() const { return n_expert > 0; }
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name, if present
  ArchTraits traits;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;    // attention.key_length
  int head_dim_v = 0;  // attention.value_length
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight: the LM head reuses token_embd
  RopeConfig rope;
  MoeConfig moe;

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  int v_dim() const { return n_head_kv * head_dim_v; }
};

}  // namespace dspark
