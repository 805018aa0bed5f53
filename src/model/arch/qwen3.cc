// qwen3: Qwen3 dense models. No QKV biases; per-head RMSNorm of Q and K (attn_q_norm, attn_k_norm,
// [head_dim]) applied before RoPE; NeoX RoPE; head_dim may differ from n_embd / n_head.
#include "model/arch/arch.h"

namespace dspark {

namespace {
constexpr ArchTraits kQwen3Traits{.qkv_bias = false, .qk_norm = true, .rope_style = RopeStyle::kNeox};
Result<ModelConfig> ReadQwen3(const gguf::File& file) { return ReadDenseHparams(file, "qwen3", kQwen3Traits); }
}  // namespace

const ArchDescriptor& Qwen3Arch() {
  static const ArchDescriptor d{"qwen3", kQwen3Traits, &ReadQwen3};
  return d;
}

}  // namespace dspark
