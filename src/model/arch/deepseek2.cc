// deepseek2: DeepSeek-V2 / V2-Lite / V3, Moonlight, Kimi-style models (llama.cpp's
// src/models/deepseek2.cpp). Multi-head latent attention (MlaConfig): an optional query LoRA,
// keys and values from one kv_lora_rank latent per token plus decoupled RoPE dimensions, "normal"
// (adjacent-pair) RoPE, the cache keeping only the latent and the RoPE part. Feed-forward:
// leading dense blocks, then mixtures of experts with shared experts, softmax (V2) or sigmoid (V3)
// gating with the exp_probs_b selection bias, group-limited routing, weight normalisation and
// scale. YaRN's attention scale as llama.cpp computes it for this architecture (yarn_log_multiplier).
#include <cmath>

#include "model/arch/arch.h"

namespace dspark {

namespace {

constexpr ArchTraits kDeepseek2Traits{.qkv_bias = false, .qk_norm = false, .rope_style = RopeStyle::kNormal};

Result<int> Dim(const gguf::File& f, const std::string& key, int64_t fallback) {
  DSPARK_ASSIGN_OR_RETURN(int64_t v, fallback >= 0 ? f.GetIntOr(key, fallback) : f.GetInt(key));
  if (v < 0 || v > (1 << 20)) return InvalidArgument("model: {}: '{}' = {} is out of range", f.path(), key, v);
  return static_cast<int>(v);
}

// llama.cpp's get_mscale.
double MScale(double factor, double mscale) { return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

Result<ModelConfig> ReadDeepseek2(const gguf::File& f) {
  const std::string a = "deepseek2";
  auto key = [&](const char* k) { return a + "." + k; };
  DSPARK_ASSIGN_OR_RETURN(ModelConfig c, ReadDenseHparams(f, a, kDeepseek2Traits));
  MlaConfig& m = c.mla;
  DSPARK_ASSIGN_OR_RETURN(m.kv_lora_rank, Dim(f, key("attention.kv_lora_rank"), -1));
  if (m.kv_lora_rank == 0) return InvalidArgument("model: {}: '{}' must be > 0", f.path(), key("attention.kv_lora_rank"));
  DSPARK_ASSIGN_OR_RETURN(m.q_lora_rank, Dim(f, key("attention.q_lora_rank"), 0));
  // Files with split attn_k_b / attn_v_b give the per-head sizes in the *_mla keys (their
  // key_length / value_length describe the latent cache); older files with attn_kv_b give them
  // in key_length / value_length.
  m.split_kv_b = f.Has(key("attention.key_length_mla"));
  int k_dim = c.head_dim;
  m.v_dim = c.head_dim_v;
  if (m.split_kv_b) {
    DSPARK_ASSIGN_OR_RETURN(k_dim, Dim(f, key("attention.key_length_mla"), -1));
    DSPARK_ASSIGN_OR_RETURN(m.v_dim, Dim(f, key("attention.value_length_mla"), -1));
  }
  m.rope_dim = c.rope.n_rot;
  m.nope_dim = k_dim - m.rope_dim;
  if (m.nope_dim < 1 || m.v_dim < 1)
    return InvalidArgument("model: {}: per-head key size {} must exceed rope.dimension_count {}, value size {} > 0",
                           f.path(), k_dim, m.rope_dim, m.v_dim);
  // The latent cache: one key head of latent + RoPE part, the latent as its value.
  c.n_head_kv = 1;
  c.head_dim = m.kv_lora_rank + m.rope_dim;
  c.head_dim_v = m.kv_lora_rank;

  // block_count counts the MTP blocks stored after the trunk; the forward pass runs the trunk.
  DSPARK_ASSIGN_OR_RETURN(c.n_nextn, Dim(f, key("nextn_predict_layers"), 0));
  if (c.n_nextn >= c.n_layer)
    return InvalidArgument("model: {}: '{}' = {} leaves no trunk blocks of block_count {}", f.path(),
                           key("nextn_predict_layers"), c.n_nextn, c.n_layer);
  c.n_layer -= c.n_nextn;

  DSPARK_TRY(ReadMoeHparams(f, a, /*required=*/true, c));
  DSPARK_ASSIGN_OR_RETURN(bool norm, f.GetBoolOr(key("expert_weights_norm"), false));  // llama.cpp's default
  c.moe.norm_weights = norm;
  if (c.moe.n_leading_dense > 0 && !f.Has(key("feed_forward_length")))
    return NotFound("model: {}: '{}' is missing (the leading dense blocks' width)", f.path(), key("feed_forward_length"));

  // YaRN, as llama.cpp nets it out for deepseek2 (llama-context.cpp and models/deepseek2.cpp):
  // cos and sin are scaled by get_mscale(s, m) / get_mscale(s, log_mul) (m = log_mul unless it
  // is 1), and q.k by mscale^2 / sqrt(head size) with mscale = that factor times
  // 1 + 0.1 log_mul ln s. The file stores 0.1 * log_mul.
  DSPARK_ASSIGN_OR_RETURN(double log_mul, f.GetFloatOr(key("rope.scaling.yarn_log_multiplier"), 0.0));
  log_mul /= 0.1;
  const RopeConfig& r = c.rope;
  const double s = r.scaling == RopeScaling::kYarn ? 1.0 / r.freq_scale : 1.0;
  double rope_mscale = 1.0;
  if (r.scaling == RopeScaling::kYarn) {
    rope_mscale = log_mul != 0.0 ? MScale(s, log_mul != 1.0 ? log_mul : 1.0) / MScale(s, log_mul) : MScale(s, 1.0);
  }
  DSPARK_ASSIGN_OR_RETURN(double attn_key, f.GetFloatOr(key("rope.scaling.attn_factor"), 1.0));
  c.rope.attn_factor = static_cast<float>(rope_mscale * attn_key);
  const double mscale = c.rope.attn_factor * (1.0 + 0.1 * log_mul * std::log(s));
  m.kq_scale = static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(k_dim)));
  return c;
}

}  // namespace

const ArchDescriptor& Deepseek2Arch() {
  static const ArchDescriptor d{"deepseek2", kDeepseek2Traits, &ReadDeepseek2};
  return d;
}

}  // namespace dspark
