// Per-sequence key/value cache. Each sequence owns `n_ctx` cells per layer; cells fill in order, so
// rolling back rejected draft tokens is `Truncate(seq, n)` and forking a sequence is a copy.
// A cell's RoPE position is whatever the batch row said (positions may repeat in token trees);
// the cell index only orders the cache.
// Layout: [layer][seq][kv head][...]: each head's cells are contiguous, so attention streams them
// sequentially (interleaving the heads per cell would start every key row of a head on a new
// 4 KiB page at Qwen3-0.6B's shape). Values are [cell][head_dim_v];
// keys are in tiles of ops::kAttentionKeyTile cells, transposed ([tile][head_dim][32]), the layout
// ops::Attention reads (one vector = one dimension of consecutive keys: no horizontal sums, and
// the same arithmetic for a row alone or in a verification block).
// Element type: F16 by default (as llama.cpp's default cache type): half the bytes attention
// streams per token; F32 keeps the projections exactly (the tight reference tests use it); Q8_0
// (head sizes that are multiples of 32) stores each 32 elements as int8 with one f32 scale, as
// llama.cpp's q8_0 cache type: 1.125 bytes per element, so long contexts take 56% of the memory
// and of the attention traffic of F16. Its key tiles keep the transposed layout per 32-dimension
// block: [tile][block][32 dims][32 cells] int8, then [32 cells] f32 scales (ops::Attention);
// values are [cell][block] of {f32 scale, 32 int8}.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "util/dtype.h"
#include "util/huge_page_arena.h"
#include "util/status.h"

namespace dspark {

class KvCache {
 public:
  // n_seq sequences of n_ctx cells each, sized for `config`; type is kF16, kF32 or kQ8_0
  // (Supports must accept the pair).
  KvCache(const ModelConfig& config, int n_seq, int n_ctx, DType type = DType::kF16);
  // Whether a cache of `type` can hold this model's keys and values (the error says why not).
  static Status Supports(const ModelConfig& config, DType type);

  int n_seq() const { return n_seq_; }
  int n_ctx() const { return n_ctx_; }
  int Length(int seq) const { return length_[seq]; }
  DType type() const { return type_; }

  // Keeps the first n cells of `seq` (n <= Length(seq)): drops rejected draft tokens.
  Status Truncate(int seq, int n);
  // Moves cell `from` of `seq` to cell `to` (keys and values of every layer, exactly), leaving
  // `from` as it was: after a token tree's verification the accepted branch's cells close up
  // behind the committed prefix before Truncate drops the rest. Both cells < Length(seq).
  Status MoveCell(int seq, int from, int to);
  // Makes `dst` an exact copy of `src` (prefix sharing for forks and parallel requests).
  Status Copy(int src, int dst);
  // Makes sequence `dst` hold the first n cells of sequence `src` of `from`, a cache of the same
  // model and element type (this one or another, of any size: the prompt cache's host copies).
  Status CopyPrefixFrom(const KvCache& from, int src, int dst, int n);
  // Bytes one cell of one sequence occupies (keys and values of every layer).
  size_t cell_bytes() const;
  void Clear(int seq) { length_[seq] = 0; }
  void ClearAll();

  // One head's keys of every cell in ops::Attention's tiled layout, elements of type().
  const void* KTiles(int layer, int seq, int head) const { return k_ + KHeadOffset(layer, seq, head); }
  // One head's value [head_dim_v] at `cell`, elements of type(); the next cell follows contiguously.
  const void* V(int layer, int seq, int head, int cell) const { return v_ + Offset(layer, seq, head, cell) * v_row_bytes_; }
  // Stores one cell's keys [n_head_kv * head_dim] and values [n_head_kv * head_dim_v] (all heads,
  // as the projections produce them), converting to type().
  void Write(int layer, int seq, int cell, const float* k, const float* v) {
    WriteK(layer, seq, cell, k);
    WriteV(layer, seq, cell, v);
  }
  void WriteK(int layer, int seq, int cell, const float* k);
  void WriteV(int layer, int seq, int cell, const float* v);

  // Used by the forward pass after it wrote `n` new cells of `seq`.
  void Advance(int seq, int n) { length_[seq] += n; }
  Status CheckSeq(int seq) const;

  size_t bytes() const { return memory_->allocated(); }

 private:
  // Element rows (of head_dim or head_dim_v) before `cell` of a head; heads hold n_cap_ cells.
  size_t Offset(int layer, int seq, int head, int cell) const {
    return ((static_cast<size_t>(layer) * n_seq_ + seq) * n_head_kv_ + head) * n_cap_ + cell;
  }
  // Byte offset of one head's key tiles.
  size_t KHeadOffset(int layer, int seq, int head) const {
    return ((static_cast<size_t>(layer) * n_seq_ + seq) * n_head_kv_ + head) * (n_cap_ / kTile) * k_tile_bytes_;
  }
  void Store(const float* src, size_t n, uint8_t* dst) const;

  static constexpr size_t kTile = 32;  // ops::kAttentionKeyTile
  int n_layer_, n_seq_, n_ctx_, n_head_kv_;
  int n_cap_;  // n_ctx rounded up to whole key tiles
  size_t head_dim_, head_dim_v_;
  DType type_;
  size_t elem_;          // bytes per element (F16, F32)
  size_t k_tile_bytes_;  // one head's key tile of kTile cells
  size_t v_row_bytes_;   // one head's value row
  // K and V on huge pages (util/huge_page_arena.h): attention streams them every pass, and the
  // memory is backed (zeroed by the OS) as cells are first written, 2 MiB at a time, instead of all
  // at construction as a std::vector's zero fill would: a long context does not delay start-up,
  // which matters most where page faults are slow (as in many VMs).
  std::unique_ptr<HugePageArena> memory_;
  uint8_t* k_ = nullptr;
  uint8_t* v_ = nullptr;
  std::vector<int> length_;
};

}  // namespace dspark
