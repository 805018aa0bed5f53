// Tiny random-weight GGUF models for tests (written once per test binary into the temp dir).
#pragma once

#include <string>

#include "model/synth.h"

namespace dspark::testing {

// A path in the test temp dir unique to this process: ctest runs every case as its own process,
// in parallel, and a file rewritten under another process's mmap would crash it (SIGBUS).
std::string TempPath(const std::string& name);

// A small spec of `arch` whose dimensions fit `type`'s block size.
SynthSpec TinySpec(const std::string& arch, DType type, int n_vocab = 300);
// Writes `spec` to <tmp>/dspark_tiny_<tag>.gguf and returns the path (aborts the test on failure).
std::string WriteTiny(const SynthSpec& spec, const std::string& tag);

}  // namespace dspark::testing
