#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "kernels/ops.h"

namespace dspark {

KvCache::KvCache(const ModelConfig& c, int n_seq, int n_ctx, DType type)
    : n_layer_(c.n_layer), n_seq_(n_seq), n_ctx_(n_ctx), n_head_kv_(c.n_head_kv),
      n_cap_((n_ctx + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile * ops::kAttentionKeyTile),
      head_dim_(c.head_dim), head_dim_v_(c.head_dim_v), type_(type), elem_(type == DType::kF16 ? 2 : 4),
      memory_(std::make_unique<HugePageArena>()), length_(n_seq, 0) {
  DSPARK_CHECK_MSG(type == DType::kF16 || type == DType::kF32, "KvCache: type must be F16 or F32");
  k_ = static_cast<uint8_t*>(memory_->Allocate(static_cast<size_t>(c.n_layer) * n_seq * n_cap_ * c.kv_dim() * elem_));
  v_ = static_cast<uint8_t*>(memory_->Allocate(static_cast<size_t>(c.n_layer) * n_seq * n_cap_ * c.v_dim() * elem_));
}

Status KvCache::CheckSeq(int seq) const {
  if (seq < 0 || seq >= n_seq_) return InvalidArgument("kv cache: sequence id {} out of range [0, {})", seq, n_seq_);
  return Status::Ok();
}

Status KvCache::Truncate(int seq, int n) {
  DSPARK_TRY(CheckSeq(seq));
  if (n < 0 || n > length_[seq])
    return InvalidArgument("kv cache: cannot truncate sequence {} of {} cells to {}", seq, length_[seq], n);
  length_[seq] = n;
  return Status::Ok();
}

Status KvCache::Copy(int src, int dst) {
  DSPARK_TRY(CheckSeq(src));
  DSPARK_TRY(CheckSeq(dst));
  if (src == dst) return Status::Ok();
  const size_t n = static_cast<size_t>(length_[src]);
  // Keys: the whole tiles that hold cells [0, n).
  const size_t nk = (n + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile * ops::kAttentionKeyTile;
  for (int l = 0; l < n_layer_; ++l) {
    for (int h = 0; h < n_head_kv_; ++h) {
      std::memcpy(k_ + Offset(l, dst, h, 0) * head_dim_ * elem_, KTiles(l, src, h), nk * head_dim_ * elem_);
      std::memcpy(v_ + Offset(l, dst, h, 0) * head_dim_v_ * elem_, V(l, src, h, 0), n * head_dim_v_ * elem_);
    }
  }
  length_[dst] = length_[src];
  return Status::Ok();
}

void KvCache::Store(const float* src, size_t n, uint8_t* dst) const {
  if (type_ == DType::kF16) {
    ops::ConvertToF16(src, static_cast<int64_t>(n), reinterpret_cast<uint16_t*>(dst));
  } else {
    std::memcpy(dst, src, n * sizeof(float));
  }
}

void KvCache::WriteK(int layer, int seq, int cell, const float* k) {
  // Converted once, then scattered into the cell's lane of its tile: element i at
  // ((cell / 32) * head_dim + i) * 32 + cell % 32.
  uint8_t row[1024 * 4];
  DSPARK_CHECK_MSG(head_dim_ * elem_ <= sizeof(row), "KvCache: head_dim too large");
  const size_t tile = ops::kAttentionKeyTile;
  const size_t first = ((static_cast<size_t>(cell) / tile) * head_dim_ * tile + cell % tile) * elem_;
  for (int h = 0; h < n_head_kv_; ++h) {
    Store(k + h * head_dim_, head_dim_, row);
    uint8_t* dst = k_ + Offset(layer, seq, h, 0) * head_dim_ * elem_ + first;
    if (elem_ == 2) {
      for (size_t i = 0; i < head_dim_; ++i) std::memcpy(dst + i * tile * 2, row + i * 2, 2);
    } else {
      for (size_t i = 0; i < head_dim_; ++i) std::memcpy(dst + i * tile * 4, row + i * 4, 4);
    }
  }
}

void KvCache::WriteV(int layer, int seq, int cell, const float* v) {
  for (int h = 0; h < n_head_kv_; ++h)
    Store(v + h * head_dim_v_, head_dim_v_, v_ + Offset(layer, seq, h, cell) * head_dim_v_ * elem_);
}

void KvCache::ClearAll() { std::fill(length_.begin(), length_.end(), 0); }

}  // namespace dspark
