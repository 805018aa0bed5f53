// qwen3: Qwen3 dense models. No QKV biases; per-head RMSNorm of Q and K (attn_q_norm, attn_k_norm,
// [head_dim]) applied before RoPE; NeoX RoPE; head_dim may differ from n_embd / n_head.
#include "model/arch/arch.h"

namespace dspark {

namespace {
Result<ModelConfig> ReadQwen3(const gguf::File& file) {
  ArchTraits traits;
  traits.qk_norm = true;
  traits.rope_style = RopeStyle::kNeox;
  return ReadDenseHparams(file, "qwen3", traits);
}
}  // namespace

const ArchDescriptor& Qwen3Arch() {
  static const ArchDescriptor d{"qwen3", &ReadQwen3};
  return d;
}

}  // namespace dspark
