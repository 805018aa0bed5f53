// Pieces shared by the subcommands: loading a model with its tokenizer.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace dspark::cli {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Result<LoadedModel> LoadModelAndTokenizer(const std::string& path, const ModelOptions& options = {});

// The --no-repack flag help text (generate, bench, serve).
inline constexpr const char* kNoRepackHelp =
    "Keep weights in the file's row layout (skip repacking for this CPU's kernels: less memory, slower decode)";

// The model `make run` and tests use when -m is not given.
std::string DefaultModelPath();

}  // namespace dspark::cli
