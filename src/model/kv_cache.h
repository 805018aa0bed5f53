// Per-sequence key/value cache. Each sequence owns `n_ctx` cells per layer; cells fill in order, so
// rolling back rejected draft tokens is `Truncate(seq, n)` and forking a sequence is a copy.
// A cell's RoPE position is whatever the batch row said (positions may repeat in token trees);
// the cell index only orders the cache.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "util/status.h"

namespace dspark {

class KvCache {
 public:
  // n_seq sequences of n_ctx cells each, sized for `config` (K and V stored as float32).
  KvCache(const ModelConfig& config, int n_seq, int n_ctx);

  int n_seq() const { return n_seq_; }
  int n_ctx() const { return n_ctx_; }
  int Length(int seq) const { return length_[seq]; }

  // Keeps the first n cells of `seq` (n <= Length(seq)): drops rejected draft tokens.
  Status Truncate(int seq, int n);
  // Makes `dst` an exact copy of `src` (prefix sharing for forks and parallel requests).
  Status Copy(int src, int dst);
  void Clear(int seq) { length_[seq] = 0; }
  void ClearAll();

  // Pointers to one cell's K [n_head_kv * head_dim] and V [n_head_kv * head_dim_v].
  float* K(int layer, int seq, int cell) { return k_.data() + Offset(layer, seq, cell) * kv_dim_; }
  float* V(int layer, int seq, int cell) { return v_.data() + Offset(layer, seq, cell) * v_dim_; }
  const float* K(int layer, int seq, int cell) const { return k_.data() + Offset(layer, seq, cell) * kv_dim_; }
  const float* V(int layer, int seq, int cell) const { return v_.data() + Offset(layer, seq, cell) * v_dim_; }

  // Used by the forward pass after it wrote `n` new cells of `seq`.
  void Advance(int seq, int n) { length_[seq] += n; }
  Status CheckSeq(int seq) const;

  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  size_t Offset(int layer, int seq, int cell) const {
    return (static_cast<size_t>(layer) * n_seq_ + seq) * n_ctx_ + cell;
  }

  int n_layer_, n_seq_, n_ctx_;
  size_t kv_dim_, v_dim_;
  std::vector<float> k_, v_;
  std::vector<int> length_;
};

}  // namespace dspark
