// A loaded GGUF model (dense llama-family architectures: llama, mistral, qwen2, qwen3) and its
// tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dspark/export.h"
#include "dspark/tokenizer.h"

namespace dspark::api {

namespace detail {
struct Access;
}  // namespace detail

struct ModelOptions {
  // Repack the weight matrices into this CPU's SIMD layout at load (faster decoding, a copy of the
  // matrices in memory); false keeps the file's row layout (dspark's --no-repack). Threads are an
  // Engine option (EngineOptions::threads): loading does not compute in parallel.
  bool repack = true;
};

// A summary of the model's hyperparameters (GGUF metadata).
struct ModelInfo {
  std::string arch;  // general.architecture: "llama", "mistral", "qwen2", "qwen3"
  std::string name;  // general.name, "" when absent
  int n_vocab = 0;
  int n_ctx_train = 0;  // the context length it was trained with
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int64_t n_params = 0;  // elements of all weight tensors
};

// A handle: copies share the loaded weights, which stay alive while any copy or any Engine over
// them does. Immutable after Load and thread-safe; several Engines may use one Model at once,
// each from its own thread.
class DSPARK_API Model {
 public:
  // Maps the file, checks every tensor's shape and type, and packs the weights. Throws Error
  // (kNotFound for a missing file; kUnimplemented for an unsupported architecture or tensor
  // type; kInvalidArgument for a DSpark/DFlash drafter file, which drafts for a target and does
  // not run alone: pass it as EngineOptions::drafter.model).
  static Model Load(const std::string& path, const ModelOptions& options = {});

  const ModelInfo& info() const;
  const std::string& path() const;
  Tokenizer tokenizer() const;  // the vocabulary in the same file

 private:
  friend struct detail::Access;
  struct Impl;
  explicit Model(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace dspark::api
