// llama: Llama 2 / 3.x, TinyLlama, SmolLM, Mistral (converted as llama, or named mistral).
// RMSNorm, SwiGLU, GQA, "normal" RoPE (llama.cpp's converter permutes Q/K rows so adjacent pairs
// rotate), optional rope_freqs (llama 3.x scaling), optional output.weight (tied otherwise).
#include "model/arch/arch.h"

namespace dspark {

namespace {
constexpr ArchTraits kLlamaTraits{.qkv_bias = false, .qk_norm = false, .rope_style = RopeStyle::kNormal};
Result<ModelConfig> ReadLlama(const gguf::File& file) { return ReadDenseHparams(file, "llama", kLlamaTraits); }
Result<ModelConfig> ReadMistral(const gguf::File& file) { return ReadDenseHparams(file, "mistral", kLlamaTraits); }
}  // namespace

const ArchDescriptor& LlamaArch() {
  static const ArchDescriptor d{"llama", kLlamaTraits, &ReadLlama};
  return d;
}

const ArchDescriptor& MistralArch() {
  static const ArchDescriptor d{"mistral", kLlamaTraits, &ReadMistral};
  return d;
}

}  // namespace dspark
