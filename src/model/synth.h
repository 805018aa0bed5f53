// Random-weight models of any dense shape, written as real GGUF files: the tiny models every test
// runs on, and benchmark models of real shapes (Qwen3-0.6B/1.7B, Llama-3.2-1B) with a real
// tokenizer copied from another GGUF. Weights are deterministic in the seed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "util/dtype.h"
#include "util/status.h"

namespace dspark {

struct SynthSpec {
  std::string arch = "qwen3";  // llama, mistral, qwen2, qwen3, qwen3moe
  int n_vocab = 512;
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 16;
  int n_ff = 128;
  // Mixture of experts (qwen3moe, or llama as Mixtral): n_expert > 0 replaces every dense FFN with
  // a router (F32, as llama.cpp's converter writes it) and 3-D expert tensors.
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  // Std of the router's weights relative to 1/sqrt(n_embd): larger values make routing decisive.
  float router_gain = 1.0f;
  int n_ctx = 512;
  float rope_base = 10000.0f;
  float rms_eps = 1e-6f;
  bool tied_embeddings = true;
  bool llama3_rope_freqs = false;  // add a rope_freqs.weight tensor (llama 3.x scaling)
  std::string rope_scaling = "none";  // none | linear | yarn
  float rope_scaling_factor = 1.0f;
  DType matrix_type = DType::kF32;  // 2-D weights (embeddings included)
  uint64_t seed = 1;
  // Std of matrix weights relative to 1/sqrt(cols); large values make greedy decoding decisive.
  float weight_gain = 1.0f;
  // Std of token embeddings relative to 1/sqrt(n_embd); 0 means sqrt(n_embd) (unit-variance
  // elements). With tied embeddings this also sets how peaked the output distribution is.
  float embedding_gain = 0.0f;
};

// Named real shapes for `dspark synth`: qwen3-0.6b, qwen3-1.7b, llama-3.2-1b, qwen3-30b-a3b.
std::optional<SynthSpec> SynthShape(const std::string& name);
std::vector<std::string> SynthShapeNames();

// Writes a small SentencePiece-style vocabulary into `w`: <unk>, <s>, </s>, byte tokens, then
// filler pieces, n_vocab tokens in all (tiny test models; no real text tokenises well with it).
void AddToyVocab(gguf::Writer& w, int n_vocab);

// Writes the model. If `vocab` is given its tokenizer.* metadata is copied and n_vocab is taken
// from it; otherwise a small SentencePiece-style vocabulary (control, byte and filler tokens) is
// generated. progress(done_bytes, total_bytes) reports writing.
Status WriteSynthModel(const SynthSpec& spec, const gguf::File* vocab, const std::string& path,
                       const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace dspark
