// A loaded transformer (llama / mistral / qwen2 / qwen3 / qwen3moe / deepseek2) and its batched
// forward pass.
// The model owns the mapped GGUF file and the bound weights; KV caches are owned by callers so one
// model can serve many caches (target, per-request forks).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/packed_weights.h"
#include "model/rope.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace dspark {

struct ModelOptions {
  // Repack matrices into this CPU's packed layout when it has one (model/packed_weights.h). Costs
  // a copy of those matrices in memory; off = the row-layout kernels only (`--no-repack`).
  bool repack = true;
};

class Model {
 public:
  // Opens `path`, finds its architecture, reads hparams and binds every tensor. Errors: unknown
  // architecture (listing the known ones), missing tensor, wrong shape or type.
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const ModelOptions& options = {});
  // Same, for an already opened file (shared with the tokenizer).
  static Result<std::unique_ptr<Model>> FromFile(std::shared_ptr<const gguf::File> file,
                                                 const ModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const gguf::File& file() const { return *file_; }
  std::shared_ptr<const gguf::File> shared_file() const { return file_; }
  const ModelWeights& weights() const { return weights_; }
  // Bytes of weights one decode step streams from memory (for bandwidth accounting).
  uint64_t WeightBytesPerToken() const;
  // Bytes held by packed copies of the weights (0 when not repacked).
  size_t PackedBytes() const { return packed_.bytes(); }
  // Bytes of the row-layout copies of matrices whose type has no packed layout on this CPU.
  size_t CopiedBytes() const { return packed_.copied_bytes(); }
  // Whether the in-memory copies are on transparent huge pages (util/huge_page_arena.h).
  bool WeightsOnHugePages() const { return packed_.huge_pages(); }

  // Runs every row of `batch` through the model, appending each row's K/V to its sequence in
  // `cache`, and returns logits of the rows that asked for them (plus taps). Errors: a sequence
  // whose context would overflow, bad token ids or sequence ids, a malformed mask. On error the
  // cache is unchanged.
  Result<ForwardOutput> Forward(const Batch& batch, KvCache& cache, ThreadPool& pool,
                                const ForwardOptions& options = {});

  // DeepSeek's multi-token prediction (config().n_nextn > 0), as llama.cpp's deepseek2 MTP graph:
  // each row runs the first nextn block on [enorm(embedding of its token) ; hnorm(h of the row)]
  // (h: [rows, n_embd], the trunk's normed output at the position before, or the previous step's
  // `hidden`); rows that ask for logits get them from the block's head norm and head, and their
  // normed output as `hidden`. Batch sequence s keeps its K/V in caches[s], a one-sequence cache
  // made with NextnCacheConfig(), so that draft contexts of any sequences share one pass.
  Result<ForwardOutput> ForwardNextn(const Batch& batch, const float* h, std::span<KvCache* const> caches,
                                     ThreadPool& pool) const;
  // One sequence's rows (sequence 0) in one cache.
  Result<ForwardOutput> ForwardNextn(const Batch& batch, const float* h, KvCache& cache, ThreadPool& pool) const {
    KvCache* one = &cache;
    return ForwardNextn(batch, h, std::span<KvCache* const>(&one, 1), pool);
  }
  // The shape of the nextn block's KV cache: one layer of the trunk's.
  ModelConfig NextnCacheConfig() const;

 private:
  Model() = default;
  // Forward (nextn_h null: the trunk) and ForwardNextn.
  Result<ForwardOutput> Pass(const Batch& batch, const float* nextn_h, std::span<KvCache* const> caches,
                             std::span<const int> slots, ThreadPool& pool, const ForwardOptions& options) const;
  // caches[s] holds batch sequence s in its sequence slots[s].
  Status ValidateBatch(const Batch& batch, std::span<KvCache* const> caches, std::span<const int> slots) const;

  std::shared_ptr<const gguf::File> file_;
  ModelConfig config_;
  ModelWeights weights_;
  PackedWeights packed_;
  std::unique_ptr<Rope> rope_;
};

}  // namespace dspark
