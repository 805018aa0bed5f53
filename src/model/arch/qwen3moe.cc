// qwen3moe: Qwen3 mixture-of-experts models (Qwen3-30B-A3B, Qwen3-235B-A22B). Qwen3's attention
// (per-head Q/K RMSNorm, NeoX RoPE) and in every block a mixture of experts instead of the dense
// FFN: a softmax router (ffn_gate_inp), the expert_used_count best experts with their weights
// normalised to sum 1, no shared expert (llama.cpp's src/models/qwen3moe.cpp).
#include "model/arch/arch.h"

namespace dspark {

namespace {
constexpr ArchTraits kQwen3MoeTraits{.qkv_bias = false, .qk_norm = true, .rope_style = RopeStyle::kNeox, .experts = true};
Result<ModelConfig> ReadQwen3Moe(const gguf::File& file) {
  DSPARK_ASSIGN_OR_RETURN(ModelConfig c, ReadDenseHparams(file, "qwen3moe", kQwen3MoeTraits));
  DSPARK_TRY(ReadMoeHparams(file, "qwen3moe", /*required=*/true, c));
  // llama.cpp's qwen3moe always normalises the top-k weights (a scale key still applies).
  c.moe.gating = ExpertGating::kSoftmax;
  c.moe.norm_weights = true;
  return c;
}
}  // namespace

const ArchDescriptor& Qwen3MoeArch() {
  static const ArchDescriptor d{"qwen3moe", kQwen3MoeTraits, &ReadQwen3Moe};
  return d;
}

}  // namespace dspark
