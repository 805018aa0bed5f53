// The EAGLE-3 head's forward pass (model/arch/eagle3.h), for many sequences at once.
//
// A job runs rows of one sequence at the positions after those its context holds. Each row is a
// pair (token, g): a committed row's g fuses the target features of its position (Fuse; its token
// is the one after that position), a draft row's g is the previous row's pre-norm output. The rows' K/V enter the context; the caller truncates it back after drafting (cells are
// positions, so rolling back draft rows is a truncation). A job's output is its last row's:
// the pre-norm hidden state (the next draft row's g) and the full-vocabulary logits.
//
// Continuous batching: the rows of every job go through one set of projections; each row attends
// only to its own sequence's cells. The matmul kernels compute a row the same alone or in a batch,
// so a job's output does not depend on the other jobs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/arch/eagle3.h"
#include "model/kv_cache.h"
#include "model/rope.h"
#include "util/thread_pool.h"

namespace dspark {

// One sequence's draft context: the K/V of the rows written so far (cell = position).
class Eagle3Context {
 public:
  // n_cells: most rows the sequence will hold (context plus the longest draft).
  Eagle3Context(const Eagle3Model& model, int n_cells);
  int length() const { return cache_.Length(0); }
  void Reset() { cache_.Clear(0); }
  Status Truncate(int n) { return cache_.Truncate(0, n); }
  // Keeps the first n rows of `from` (this context or another of the same head).
  Status KeepPrefixOf(const Eagle3Context& from, int n) { return cache_.CopyPrefixFrom(from.cache_, 0, 0, n); }
  size_t bytes() const { return cache_.bytes(); }
  int capacity() const { return cache_.n_ctx(); }

 private:
  friend class Eagle3Forward;
  KvCache cache_;
};

struct Eagle3Output {
  std::vector<float> hidden;  // [E]: the last row's pre-norm output
  std::vector<float> logits;  // [V]: the last row's logits (-inf outside a reduced draft vocabulary)
};

struct Eagle3Job {
  Eagle3Context* context = nullptr;
  std::span<const int32_t> tokens;  // one per row
  const float* g = nullptr;  // [rows, E]
  Eagle3Output* out = nullptr;  // null: nothing to return (the rows only enter the context)
};

class Eagle3Forward {
 public:
  explicit Eagle3Forward(const Eagle3Model& model);

  // g = fc([f_L1 ; f_L2 ; f_L3]) (after RMSNorm with norm_before_fc) of n rows of target features
  // [n, 3 E_t] into g [n, E].
  void Fuse(const float* features, int n, float* g, ThreadPool& pool);
  // Errors of one job on its own: no rows or no g, a token outside the vocabulary, a context that
  // would overflow.
  Status Check(const Eagle3Job& job) const;
  // Runs every job in one pass (each must pass Check; nothing runs otherwise).
  Status Run(std::span<const Eagle3Job> jobs, ThreadPool& pool);

 private:
  void Inputs(std::span<const Eagle3Job> jobs, std::span<const int> row0);
  void AttentionLayer(std::span<const Eagle3Job> jobs, std::span<const int> row0, ThreadPool& pool);
  void Ffn(int n_rows, ThreadPool& pool);
  void Outputs(std::span<const Eagle3Job> jobs, std::span<const int> row0, ThreadPool& pool);

  const Eagle3Model& model_;
  Rope rope_;
  // Scratch, reused across calls.
  std::vector<float> feats_, g_, x_, q_, k_, v_, att_, r_, h_, gate_, up_, fused_, cos_, sin_, last_, logits_;
  std::vector<std::vector<uint8_t>> causal_;  // causal_[n]: the [n][n] lower-triangular mask
};

}  // namespace dspark
