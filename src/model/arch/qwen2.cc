// qwen2: Qwen2 / Qwen2.5. Like llama plus biases on the Q, K and V projections, NeoX RoPE.
#include "model/arch/arch.h"

namespace dspark {

namespace {
constexpr ArchTraits kQwen2Traits{.qkv_bias = true, .qk_norm = false, .rope_style = RopeStyle::kNeox};
Result<ModelConfig> ReadQwen2(const gguf::File& file) { return ReadDenseHparams(file, "qwen2", kQwen2Traits); }
}  // namespace

const ArchDescriptor& Qwen2Arch() {
  static const ArchDescriptor d{"qwen2", kQwen2Traits, &ReadQwen2};
  return d;
}

}  // namespace dspark
