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

Result<LoadedModel> LoadModelAndTokenizer(const std::string& path);

// The model `make run` and tests use when -m is not given.
std::string DefaultModelPath();

}  // namespace dspark::cli
