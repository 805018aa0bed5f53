// llama: Llama 2 / 3.x, TinyLlama, SmolLM, Mistral (converted as llama, or named mistral).
// RMSNorm, SwiGLU, GQA, "normal" RoPE (llama.cpp's converter permutes Q/K rows so adjacent pairs
// rotate), optional rope_freqs (llama 3.x scaling), optional output.weight (tied otherwise).
// Mixtral is llama with `llama.expert_count`: every FFN a mixture of experts (3-D ffn_*_exps
// tensors, softmax router over ffn_gate_inp, top-k weights normalised).
#include "model/arch/arch.h"

namespace dspark {

namespace {
constexpr ArchTraits kLlamaTraits{.qkv_bias = false, .qk_norm = false, .rope_style = RopeStyle::kNormal};
Result<ModelConfig> ReadLlamaFamily(const gguf::File& file, std::string_view arch) {
  DSPARK_ASSIGN_OR_RETURN(ModelConfig c, ReadDenseHparams(file, arch, kLlamaTraits));
  DSPARK_TRY(ReadMoeHparams(file, arch, /*required=*/false, c));
  if (c.moe.enabled()) {
    // Mixtral as llama.cpp runs it (src/models/llama.cpp): every expert is feed_forward_length wide,
    // whatever an expert_feed_forward_length key says, and the top-k weights are normalised.
    c.moe.n_ff_exp = c.n_ff;
    c.moe.norm_weights = true;
  }
  return c;
}
Result<ModelConfig> ReadLlama(const gguf::File& file) { return ReadLlamaFamily(file, "llama"); }
Result<ModelConfig> ReadMistral(const gguf::File& file) { return ReadLlamaFamily(file, "mistral"); }
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
