// Tiny random-weight GGUF models for tests (written into the process's temp dir, see
// util/testing/temp_dir.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"
#include "util/testing/temp_dir.h"  // TempPath

namespace dspark::testing {

// A small spec of `arch` whose dimensions fit `type`'s block size.
SynthSpec TinySpec(const std::string& arch, DType type, int n_vocab = 300);
// Writes `spec` to TempPath("tiny_<tag>.gguf") and returns the path (fails the test on error).
// The file is removed with the process's temp directory when the process exits.
std::string WriteTiny(const SynthSpec& spec, const std::string& tag);

// A model, its tokenizer and the file both read (test failures are reported, not thrown).
struct LoadedModel {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};
LoadedModel LoadModelForTest(const std::string& path);

// Plain greedy decoding written independently of the engines: one Forward per token, the first
// largest logit, until n tokens or a context of n_ctx. The reference speculative output must equal.
std::vector<int32_t> ReferenceGreedy(Model& m, ThreadPool& pool, const std::vector<int32_t>& prompt, int n,
                                     int n_ctx = 512);

}  // namespace dspark::testing
