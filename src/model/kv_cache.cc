#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace dspark {

KvCache::KvCache(const ModelConfig& c, int n_seq, int n_ctx)
    : n_layer_(c.n_layer), n_seq_(n_seq), n_ctx_(n_ctx), n_head_kv_(c.n_head_kv), head_dim_(c.head_dim),
      head_dim_v_(c.head_dim_v),
      k_(static_cast<size_t>(c.n_layer) * n_seq * n_ctx * c.kv_dim()),
      v_(static_cast<size_t>(c.n_layer) * n_seq * n_ctx * c.v_dim()),
      length_(n_seq, 0) {}

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
  const int n = length_[src];
  for (int l = 0; l < n_layer_; ++l) {
    for (int h = 0; h < n_head_kv_; ++h) {
      std::memcpy(K(l, dst, h, 0), K(l, src, h, 0), n * head_dim_ * sizeof(float));
      std::memcpy(V(l, dst, h, 0), V(l, src, h, 0), n * head_dim_v_ * sizeof(float));
    }
  }
  length_[dst] = n;
  return Status::Ok();
}

void KvCache::WriteK(int layer, int seq, int cell, const float* k) {
  for (int h = 0; h < n_head_kv_; ++h) std::memcpy(K(layer, seq, h, cell), k + h * head_dim_, head_dim_ * sizeof(float));
}

void KvCache::WriteV(int layer, int seq, int cell, const float* v) {
  for (int h = 0; h < n_head_kv_; ++h)
    std::memcpy(V(layer, seq, h, cell), v + h * head_dim_v_, head_dim_v_ * sizeof(float));
}

void KvCache::ClearAll() { std::fill(length_.begin(), length_.end(), 0); }

}  // namespace dspark
