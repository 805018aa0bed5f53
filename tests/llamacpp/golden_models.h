// The tiny random models whose outputs llama.cpp computed for tests/data/llamacpp: every
// architecture dspark loads, and for deepseek2 both attention layouts (attn_k_b / attn_v_b and the
// older attn_kv_b), both gating functions and both query paths (attn_q and the query LoRA).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/synth.h"

namespace dspark::testing {

// (name, spec) of every golden model; the files are tests/data/llamacpp/NAME.gguf.
std::vector<std::pair<std::string, SynthSpec>> LlamaCppGoldenModels();

}  // namespace dspark::testing
