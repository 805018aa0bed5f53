// The host half of the prompt cache. A finished request's KV cache stays in its slot for the next
// request that shares a prefix (BatchEngine::Admit); when a slot's rows are about to be
// overwritten by an unrelated request, they move here, to host memory with a byte cap, and come
// back into any slot for a later request that starts with them. Least recently used entries go
// first. Engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "speculative/drafter.h"

namespace dspark {

// Length of the common prefix of two token sequences.
size_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b);

class PromptStore {
 public:
  struct Entry {
    std::vector<int32_t> tokens;  // the tokens whose KV rows `kv` holds (sequence 0)
    std::unique_ptr<KvCache> kv;
    std::unique_ptr<DrafterRows> drafter;  // the drafter's state for those rows (null: none)
    size_t bytes() const { return kv->bytes() + (drafter ? drafter->bytes() : 0); }
  };
  struct Match {
    const Entry* entry = nullptr;
    size_t rows = 0;  // tokens shared with the prompt
  };

  // `capacity_bytes` 0 disables the store.
  PromptStore(const ModelConfig& config, DType kv_type, size_t capacity_bytes)
      : config_(config), kv_type_(kv_type), capacity_(capacity_bytes) {}

  // Keeps the first tokens.size() rows of `seq` of `from` unless an entry already holds them (an
  // entry they extend is replaced). Evicts least recently used entries to fit; an entry larger
  // than the whole capacity is not kept. Without memory for the copy, entries are evicted until it
  // fits; ResourceExhausted when none is left (the rows are then not kept).
  // `drafter` is the drafter's state for the rows (Drafter::SaveRows), kept with them.
  Status Save(std::span<const int32_t> tokens, const KvCache& from, int seq, std::unique_ptr<DrafterRows> drafter);
  // The entry sharing the longest prefix with `prompt` (marked as used), or none.
  Match Find(std::span<const int32_t> prompt);

  size_t bytes() const { return used_; }
  size_t entries() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }
  // Saves that found no memory (each evicted an entry, or dropped the rows when none was left).
  size_t allocation_failures() const { return allocation_failures_; }

 private:
  ModelConfig config_;
  DType kv_type_;
  size_t capacity_;
  size_t used_ = 0;
  size_t allocation_failures_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace dspark
