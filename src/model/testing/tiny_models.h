// Tiny random-weight GGUF models for tests (written once per test binary into the temp dir).
#pragma once

#include <string>

#include <memory>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

namespace dspark::testing {

// A path in the test temp dir unique to this process: ctest runs every case as its own process,
// in parallel, and a file rewritten under another process's mmap would crash it (SIGBUS).
std::string TempPath(const std::string& name);

// A small spec of `arch` whose dimensions fit `type`'s block size.
SynthSpec TinySpec(const std::string& arch, DType type, int n_vocab = 300);
// Writes `spec` to <tmp>/dspark_tiny_<tag>.gguf and returns the path (aborts the test on failure).
std::string WriteTiny(const SynthSpec& spec, const std::string& tag);

// A model, its tokenizer and the file both read (test failures are reported, not thrown).
struct LoadedModel {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};
LoadedModel LoadModelForTest(const std::string& path);

}  // namespace dspark::testing
