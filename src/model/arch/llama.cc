// llama: Llama 2 / 3.x, TinyLlama, SmolLM, Mistral (converted as llama). RMSNorm, SwiGLU, GQA,
// "normal" RoPE (llama.cpp's converter permutes Q/K rows so adjacent pairs rotate), optional
// rope_freqs (llama 3.x scaling), optional output.weight (tied embeddings otherwise).
#include "model/arch/arch.h"

namespace dspark {

namespace {

Result<ModelConfig> ReadLlama(const gguf::File& file) {
  ArchTraits traits;
  traits.rope_style = RopeStyle::kNormal;
  return ReadDenseHparams(file, "llama", traits);
}

Result<ModelConfig> ReadMistral(const gguf::File& file) {
  ArchTraits traits;
  traits.rope_style = RopeStyle::kNormal;
  return ReadDenseHparams(file, "mistral", traits);
}

}  // namespace

const ArchDescriptor& LlamaArch() {
  static const ArchDescriptor d{"llama", &ReadLlama};
  return d;
}

const ArchDescriptor& MistralArch() {
  static const ArchDescriptor d{"mistral", &ReadMistral};
  return d;
}

}  // namespace dspark
