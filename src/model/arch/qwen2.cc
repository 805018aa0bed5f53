// qwen2: Qwen2 / Qwen2.5. Like llama plus biases on the Q, K and V projections, NeoX RoPE.
#include "model/arch/arch.h"

namespace dspark {

namespace {
Result<ModelConfig> ReadQwen2(const gguf::File& file) {
  ArchTraits traits;
  traits.qkv_bias = true;
  traits.rope_style = RopeStyle::kNeox;
  return ReadDenseHparams(file, "qwen2", traits);
}
}  // namespace

const ArchDescriptor& Qwen2Arch() {
  static const ArchDescriptor d{"qwen2", &ReadQwen2};
  return d;
}

}  // namespace dspark
