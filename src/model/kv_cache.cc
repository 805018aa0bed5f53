#include "model/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kv_quant.h"
#include "kernels/ops.h"

namespace dspark {

namespace {
constexpr size_t kQ8 = ops::kAttentionQ8Block;
}  // namespace

Status KvCache::Supports(const ModelConfig& c, DType type) {
  if (type != DType::kF16 && type != DType::kF32 && type != DType::kQ8_0)
    return InvalidArgument("kv cache: type {} is not supported (f16, f32 or q8_0)", DTypeName(type));
  if (type == DType::kQ8_0 && (c.head_dim % kQ8 != 0 || c.head_dim_v % kQ8 != 0))
    return InvalidArgument("kv cache: q8_0 needs head sizes that are multiples of {} (this model: keys {}, values {})",
                           kQ8, c.head_dim, c.head_dim_v);
  return Status::Ok();
}

KvCache::KvCache(const ModelConfig& c, int n_seq, int n_ctx, DType type)
    : n_layer_(c.n_layer), n_seq_(n_seq), n_ctx_(n_ctx), n_head_kv_(c.n_head_kv),
      n_cap_((n_ctx + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile * ops::kAttentionKeyTile),
      head_dim_(c.head_dim), head_dim_v_(c.head_dim_v), type_(type), elem_(type == DType::kF32 ? 4 : 2),
      memory_(std::make_unique<HugePageArena>()), length_(n_seq, 0) {
  static_assert(kTile == ops::kAttentionKeyTile);
  const Status ok = Supports(c, type);
  DSPARK_CHECK_MSG(ok.ok(), ok.message().c_str());
  if (type == DType::kQ8_0) {
    k_tile_bytes_ = head_dim_ / kQ8 * ops::kAttentionQ8KeyBlockBytes;
    v_row_bytes_ = head_dim_v_ / kQ8 * ops::kAttentionQ8ValueBlockBytes;
  } else {
    k_tile_bytes_ = head_dim_ * kTile * elem_;
    v_row_bytes_ = head_dim_v_ * elem_;
  }
  const size_t heads = static_cast<size_t>(c.n_layer) * n_seq * c.n_head_kv;
  k_ = static_cast<uint8_t*>(memory_->Allocate(heads * (n_cap_ / kTile) * k_tile_bytes_));
  v_ = static_cast<uint8_t*>(memory_->Allocate(heads * n_cap_ * v_row_bytes_));
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
  const size_t tiles = (n + kTile - 1) / kTile;  // the whole tiles that hold cells [0, n)
  for (int l = 0; l < n_layer_; ++l) {
    for (int h = 0; h < n_head_kv_; ++h) {
      std::memcpy(k_ + KHeadOffset(l, dst, h), KTiles(l, src, h), tiles * k_tile_bytes_);
      std::memcpy(v_ + Offset(l, dst, h, 0) * v_row_bytes_, V(l, src, h, 0), n * v_row_bytes_);
    }
  }
  length_[dst] = length_[src];
  return Status::Ok();
}

Status KvCache::CopyPrefixFrom(const KvCache& from, int src, int dst, int n) {
  DSPARK_TRY(from.CheckSeq(src));
  DSPARK_TRY(CheckSeq(dst));
  if (from.n_layer_ != n_layer_ || from.n_head_kv_ != n_head_kv_ || from.head_dim_ != head_dim_ ||
      from.head_dim_v_ != head_dim_v_ || from.type_ != type_)
    return InvalidArgument("kv cache: cannot copy cells between caches of different shapes or types");
  if (n < 0 || n > from.length_[src] || n > n_ctx_)
    return InvalidArgument("kv cache: cannot copy {} cells of a sequence of {} into a context of {}", n,
                           from.length_[src], n_ctx_);
  if (&from == this && src == dst) return Truncate(dst, n);
  const size_t tiles = (static_cast<size_t>(n) + kTile - 1) / kTile;
  for (int l = 0; l < n_layer_; ++l) {
    for (int h = 0; h < n_head_kv_; ++h) {
      std::memcpy(k_ + KHeadOffset(l, dst, h), from.KTiles(l, src, h), tiles * k_tile_bytes_);
      std::memcpy(v_ + Offset(l, dst, h, 0) * v_row_bytes_, from.V(l, src, h, 0), n * v_row_bytes_);
    }
  }
  length_[dst] = n;
  return Status::Ok();
}

Status KvCache::MoveCell(int seq, int from, int to) {
  DSPARK_TRY(CheckSeq(seq));
  if (from < 0 || to < 0 || from >= length_[seq] || to >= length_[seq])
    return InvalidArgument("kv cache: cannot move cell {} to {} in a sequence of {}", from, to, length_[seq]);
  if (from == to) return Status::Ok();
  const size_t lane_from = static_cast<size_t>(from) % kTile, lane_to = static_cast<size_t>(to) % kTile;
  for (int l = 0; l < n_layer_; ++l) {
    for (int h = 0; h < n_head_kv_; ++h) {
      std::memcpy(v_ + Offset(l, seq, h, to) * v_row_bytes_, v_ + Offset(l, seq, h, from) * v_row_bytes_, v_row_bytes_);
      uint8_t* head = k_ + KHeadOffset(l, seq, h);
      const uint8_t* src = head + static_cast<size_t>(from) / kTile * k_tile_bytes_;
      uint8_t* dst = head + static_cast<size_t>(to) / kTile * k_tile_bytes_;
      if (type_ == DType::kQ8_0) {
        // Per 32-dimension block: the cell's dword in each of the 8 dimension quads, then its scale
        // (the layout WriteK stores).
        for (size_t b = 0; b < head_dim_ / kQ8; ++b) {
          const size_t block = b * ops::kAttentionQ8KeyBlockBytes;
          for (size_t g = 0; g < kQ8 / 4; ++g)
            std::memcpy(dst + block + g * 4 * kTile + lane_to * 4, src + block + g * 4 * kTile + lane_from * 4, 4);
          std::memcpy(dst + block + kQ8 * kTile + lane_to * sizeof(float),
                      src + block + kQ8 * kTile + lane_from * sizeof(float), sizeof(float));
        }
        continue;
      }
      for (size_t i = 0; i < head_dim_; ++i)
        std::memcpy(dst + (i * kTile + lane_to) * elem_, src + (i * kTile + lane_from) * elem_, elem_);
    }
  }
  return Status::Ok();
}

size_t KvCache::cell_bytes() const {
  return static_cast<size_t>(n_layer_) * n_head_kv_ * (k_tile_bytes_ / kTile + v_row_bytes_);
}

void KvCache::Store(const float* src, size_t n, uint8_t* dst) const {
  if (type_ == DType::kF16) {
    ops::ConvertToF16(src, static_cast<int64_t>(n), reinterpret_cast<uint16_t*>(dst));
  } else {
    std::memcpy(dst, src, n * sizeof(float));
  }
}

void KvCache::WriteK(int layer, int seq, int cell, const float* k) {
  const size_t lane = static_cast<size_t>(cell) % kTile;
  const size_t tile_offset = static_cast<size_t>(cell) / kTile * k_tile_bytes_;
  for (int h = 0; h < n_head_kv_; ++h) {
    uint8_t* tile = k_ + KHeadOffset(layer, seq, h) + tile_offset;
    const float* kh = k + h * head_dim_;
    if (type_ == DType::kQ8_0) {
      // Per 32-dimension block: the cell's dword in each of the 8 dimension quads ([8][32 cells][4]
      // bytes q + 128, the unsigned operand of vpdpbusd), then its scale.
      for (size_t b = 0; b < head_dim_ / kQ8; ++b) {
        uint8_t* block = tile + b * ops::kAttentionQ8KeyBlockBytes;
        int8_t q[kQ8];
        const float d = QuantizeQ8Block(kh + b * kQ8, q);
        for (size_t i = 0; i < kQ8; ++i)
          block[i / 4 * (4 * kTile) + lane * 4 + i % 4] = static_cast<uint8_t>(q[i] + 128);
        std::memcpy(block + kQ8 * kTile + lane * sizeof(float), &d, sizeof(float));
      }
      continue;
    }
    // Converted once, then scattered into the cell's lane of its tile: element i at
    // (i * 32 + cell % 32) within the tile.
    uint8_t row[1024 * 4];
    DSPARK_CHECK_MSG(head_dim_ * elem_ <= sizeof(row), "KvCache: head_dim too large");
    Store(kh, head_dim_, row);
    uint8_t* dst = tile + lane * elem_;
    // Fixed-size copies: with the element size a run-time value each one would be a memcpy call
    // (128 per head and layer for Qwen3-0.6B).
    const auto scatter = [&](auto elem_tag) {
      using E = decltype(elem_tag);
      for (size_t i = 0; i < head_dim_; ++i) std::memcpy(dst + i * kTile * sizeof(E), row + i * sizeof(E), sizeof(E));
    };
    if (elem_ == 2) {
      scatter(uint16_t{});
    } else {
      scatter(uint32_t{});
    }
  }
}

void KvCache::WriteV(int layer, int seq, int cell, const float* v) {
  for (int h = 0; h < n_head_kv_; ++h) {
    uint8_t* dst = v_ + Offset(layer, seq, h, cell) * v_row_bytes_;
    const float* vh = v + h * head_dim_v_;
    if (type_ == DType::kQ8_0) {
      for (size_t b = 0; b < head_dim_v_ / kQ8; ++b) {
        uint8_t* block = dst + b * ops::kAttentionQ8ValueBlockBytes;
        const float d = QuantizeQ8Block(vh + b * kQ8, reinterpret_cast<int8_t*>(block + sizeof(float)), 1);
        std::memcpy(block, &d, sizeof(float));
      }
    } else {
      Store(vh, head_dim_v_, dst);
    }
  }
}

void KvCache::ClearAll() { std::fill(length_.begin(), length_.end(), 0); }

}  // namespace dspark
