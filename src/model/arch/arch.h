// The architecture registry: each supported `general.architecture` has one descriptor, defined in
// its own file (llama.cc, qwen2.cc, qwen3.cc, qwen3moe.cc, deepseek2.cc) and listed in registry.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "model/config.h"

namespace dspark {

struct ArchDescriptor {
  std::string_view name;  // general.architecture value
  ArchTraits traits;      // what shared code (forward pass, synth writer) needs to know
  // Reads and range-checks the hyperparameters (`<arch>.*` keys) into a config.
  Result<ModelConfig> (*read_config)(const gguf::File& file);
};

// nullptr for an architecture dspark does not run.
const ArchDescriptor* FindArch(std::string_view name);
std::vector<std::string_view> KnownArchs();

// `<arch>.rope.*` (dimension count, base, linear / YaRN scaling, attn factor) and rope_freqs.weight,
// as llama.cpp reads them, for heads of `head_dim`.
Status ReadRope(const gguf::File& file, const std::string& arch, int head_dim, int n_ctx_train, RopeStyle style,
                RopeConfig& rope);

// The hparams every dense llama-family architecture shares, with `traits` filled in by the caller.
Result<ModelConfig> ReadDenseHparams(const gguf::File& file, std::string_view arch, const ArchTraits& traits);

// The mixture-of-experts keys (`<arch>.expert_count` and the rest) into config.moe; without
// expert_count the model is dense, which is an error when `required`.
Status ReadMoeHparams(const gguf::File& file, std::string_view arch, bool required, ModelConfig& config);

const ArchDescriptor& LlamaArch();
const ArchDescriptor& MistralArch();
const ArchDescriptor& Qwen2Arch();
const ArchDescriptor& Qwen3Arch();
const ArchDescriptor& Qwen3MoeArch();
const ArchDescriptor& Deepseek2Arch();

}  // namespace dspark
