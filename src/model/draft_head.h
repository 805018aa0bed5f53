// Draft heads that run on the target's own features, one row per position, each row fed the
// previous row's output state when they draft: EAGLE-3 (eagle3_forward.h) and DeepSeek's
// multi-token-prediction block (mtp_head.h). The drafter that runs them
// (speculative/drafters/head_drafter.h) knows only this interface.
//
// A job runs rows of one sequence at the positions after those its context holds. A row is a pair
// (token, state): a committed row's state comes from the target's features (Fuse), a draft row's is
// the previous row's output state. The rows' K/V enter the context; the caller truncates it back
// after drafting (cells are positions, so rolling back draft rows is a truncation). A job's output
// is its last row's: its output state and the full-vocabulary logits.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace dspark {

class DraftHead;

// One sequence's draft context: the K/V of the rows written so far (cell = position).
class HeadContext {
 public:
  // n_cells: most rows the sequence will hold (context plus the longest draft).
  HeadContext(const DraftHead& head, int n_cells);
  int length() const { return cache_.Length(0); }
  void Reset() { cache_.Clear(0); }
  Status Truncate(int n) { return cache_.Truncate(0, n); }
  // Keeps the first n rows of `from` (this context or another of the same head).
  Status KeepPrefixOf(const HeadContext& from, int n) { return cache_.CopyPrefixFrom(from.cache_, 0, 0, n); }
  size_t bytes() const { return cache_.bytes(); }
  int capacity() const { return cache_.n_ctx(); }
  // For the heads' passes: sequence 0 of a one-sequence cache.
  KvCache& cache() { return cache_; }
  const KvCache& cache() const { return cache_; }

 private:
  KvCache cache_;
};

struct HeadOutput {
  std::vector<float> state;   // [StateWidth()]: the last row's output state (the next draft row's input)
  std::vector<float> logits;  // [n_vocab]: the last row's logits (-inf outside a reduced draft vocabulary)
};

struct HeadJob {
  HeadContext* context = nullptr;
  std::span<const int32_t> tokens;  // one per row
  const float* state = nullptr;     // [rows, StateWidth()]
  HeadOutput* out = nullptr;        // null: nothing to return (the rows only enter the context)
};

class DraftHead {
 public:
  virtual ~DraftHead() = default;

  // The --spec-type that runs this head ("draft-eagle3", "draft-mtp").
  virtual std::string_view Name() const = 0;
  // The shape of a context's KV cache (one layer) and its element type.
  virtual ModelConfig CacheConfig() const = 0;
  virtual DType CacheType() const { return DType::kF32; }
  // The target layers whose input rows Fuse reads (ForwardOptions::tap_layers), each n_embd wide.
  virtual std::vector<int> TapLayers() const = 0;
  virtual int TapWidth() const = 0;
  virtual int StateWidth() const = 0;
  virtual int n_vocab() const = 0;
  // How a row's token lines up with its features. 1 (EAGLE-3): the row at position P pairs the
  // features of P with token P+1. 0 (DeepSeek MTP, as llama.cpp's draft-mtp): the row at position
  // P pairs token P with the features of P-1, and row 0 pairs the first token with a zero state.
  virtual int token_offset() const = 0;

  // The states of n committed rows from their taps: taps[t] is [n, TapWidth()] of TapLayers()[t];
  // state: [n, StateWidth()].
  virtual void Fuse(std::span<const float* const> taps, int n, float* state, ThreadPool& pool) = 0;
  // Errors of one job on its own: no rows or no state, a token outside the vocabulary, a context
  // that would overflow.
  Status Check(const HeadJob& job) const;
  // Runs every job (each must pass Check; nothing runs otherwise).
  virtual Status Run(std::span<const HeadJob> jobs, ThreadPool& pool) = 0;
};

}  // namespace dspark
