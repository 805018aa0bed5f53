// Hyperparameters of a loaded model, read from GGUF metadata by the architecture's file, and the
// traits that let the shared forward pass serve every dense architecture without knowing its name.
#pragma once

#include <algorithm>
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
  // DeepSeek: experts every token uses (one SwiGLU of n_shared * n_ff_exp, ffn_*_shexp), the first
  // blocks dense (leading_dense_block_count), and group-limited routing: the experts fall into
  // n_group groups, a token keeps the n_group_used groups whose two best experts score highest
  // (selection scores: gating probabilities plus the per-layer exp_probs_b bias, where present)
  // and chooses its experts among them.
  int n_shared = 0;
  int n_leading_dense = 0;
  int n_group = 0;
  int n_group_used = 0;

  bool enabled() const { return n_expert > 0; }
  bool Layer(int il) const { return enabled() && il >= n_leading_dense; }  // block il is a mixture
};

// DeepSeek's multi-head latent attention (deepseek2): keys and values are rebuilt from one
// kv_lora_rank latent per token, which is all the cache keeps, with rope_dim decoupled RoPE
// dimensions shared by every head. The forward pass works in the latent space as llama.cpp's MLA
// path does: each head's query is mapped into it (q_nope through attn_k_b), attention is a single
// key/value head of kv_lora_rank + rope_dim, and each head's output leaves it through attn_v_b.
struct MlaConfig {
  int q_lora_rank = 0;   // 0: one attn_q projection (V2-Lite); else attn_q_a, its norm, attn_q_b
  int kv_lora_rank = 0;  // 0: not MLA
  int nope_dim = 0;      // per-head query/key dimensions without RoPE
  int rope_dim = 0;      // per-head (query) and shared (key) RoPE dimensions
  int v_dim = 0;         // per-head value dimensions after attn_v_b
  bool split_kv_b = true;  // attn_k_b / attn_v_b; false: the older combined attn_kv_b
  float kq_scale = 0.0f;   // llama.cpp's: mscale^2 / sqrt(nope_dim + rope_dim)

  bool enabled() const { return kv_lora_rank > 0; }
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name, if present
  ArchTraits traits;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;  // trunk blocks: block_count without the nextn blocks
  // DeepSeek's multi-token-prediction blocks (`<arch>.nextn_predict_layers`), stored after the
  // trunk as blk.n_layer...: a decoder block over [enorm(embedding) ; hnorm(h)] through
  // nextn.eh_proj, whose normed output predicts the token after next (Model::ForwardNextn).
  int n_nextn = 0;
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
  // With MLA, n_head_kv is 1, head_dim kv_lora_rank + rope_dim and head_dim_v kv_lora_rank: the
  // shape of the latent cache (KvCache), as llama.cpp treats MLA as multi-query attention.
  MlaConfig mla;

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  int v_dim() const { return n_head_kv * head_dim_v; }
  // The widest dense SwiGLU a pass runs: the FFN (n_ff) where some block is dense, DeepSeek's
  // shared experts (n_shared x n_ff_exp). A mixture-only model's feed_forward_length sizes nothing,
  // and no tensor bounds it: scratch sized by it would be whatever the file claims.
  int64_t dense_ffn_width() const {
    const bool dense_blocks = !moe.enabled() || moe.n_leading_dense > 0;
    return std::max<int64_t>(dense_blocks ? n_ff : 0, static_cast<int64_t>(moe.n_shared) * moe.n_ff_exp);
  }
};

// A config holding only the K/V geometry a KvCache needs (draft heads' own caches): n_layer
// layers of n_head_kv heads of head_dim for keys and values.
inline ModelConfig KvGeometry(int n_layer, int n_head, int n_head_kv, int head_dim, int n_embd) {
  ModelConfig m;
  m.n_layer = n_layer;
  m.n_head = n_head;
  m.n_head_kv = n_head_kv;
  m.head_dim = head_dim;
  m.head_dim_v = head_dim;
  m.n_embd = n_embd;
  return m;
}

}  // namespace dspark
