// Pieces shared by the subcommands: loading a model with its tokenizer.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "model/model.h"
#include "speculative/drafters/factory.h"
#include "tokenizer/tokenizer.h"

namespace dspark::cli {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Result<LoadedModel> LoadModelAndTokenizer(const std::string& path, const ModelOptions& options = {});

// --cache-type / --ctk: the KV cache element type, named as llama.cpp's cache types are.
inline void AddCacheTypeOption(CLI::App* sub, DType* type) {
  static const std::map<std::string, DType> kCacheTypes = {
      {"f16", DType::kF16}, {"f32", DType::kF32}, {"q8_0", DType::kQ8_0}};
  sub->add_option_function<std::string>(
         "--cache-type,--ctk",
         [type](const std::string& name) {
           std::string lower = name;
           std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
           const auto it = kCacheTypes.find(lower);
           if (it == kCacheTypes.end())
             throw CLI::ValidationError("--cache-type", "unknown KV cache type '" + name + "' (f16, f32 or q8_0)");
           *type = it->second;
         },
         "KV cache element type: f16 (half of f32's attention traffic), f32, or q8_0 (int8 with a scale per 32 "
         "elements: 56% of f16's memory and traffic, for long contexts; head sizes that are multiples of 32)")
      ->default_str("f16");
}

// The --no-repack flag help text (generate, bench, serve).
inline constexpr const char* kNoRepackHelp =
    "Keep weights in the file's row layout (skip repacking for this CPU's kernels: less memory, slower decode)";

// The drafter flags generate, bench and serve share (llama.cpp's names): --model-draft/--md,
// --threads-draft/--td, --spec-type (types_help lists the types the command takes),
// --spec-ngram-min/-max, --spec-ngram-first, --spec-dspark-full-block and, with synthetic,
// --spec-synthetic-accept. The scheduling flags differ per command and stay with each.
void AddDrafterFlags(CLI::App* sub, DrafterConfig* drafter, const std::string& types_help, bool synthetic);

// -c/--ctx-size when given, else the model's training context capped at 4096.
inline int ContextSize(int requested, const Model& model) {
  return requested > 0 ? requested : std::min(model.config().n_ctx_train, 4096);
}
// -t/--threads when given, else the physical cores.
inline int ThreadCount(int requested) { return requested > 0 ? requested : ThreadPool::DefaultThreadCount(); }

// The whole of a text file (a prompt, a chat template); `what` names it in the error.
Result<std::string> ReadTextFile(const std::string& path, std::string_view what);

// The model `make run` and tests use when -m is not given.
std::string DefaultModelPath();

}  // namespace dspark::cli
