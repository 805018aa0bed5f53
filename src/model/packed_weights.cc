#include "model/packed_weights.h"

#include <map>

#include "kernels/scratch.h"
#include "util/log.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace dspark {

void PackedWeights::Pack(const std::vector<ops::WeightView*>& views, int threads) {
  std::unique_ptr<ThreadPool> pool;
  std::map<const void*, const void*> done;  // original rows -> packed copy
  for (ops::WeightView* v : views) {
    if (v == nullptr || v->data == nullptr) continue;
    if (auto it = done.find(v->data); it != done.end()) {
      v->packed = it->second;
      continue;
    }
    const size_t n = ops::PackedBytes(v->type, v->rows, v->cols);
    if (n == 0) continue;
    if (!pool) pool = std::make_unique<ThreadPool>(threads > 0 ? threads : ThreadPool::DefaultThreadCount());
    void* dst = std::aligned_alloc(64, kernels::RoundUp(n, 64));
    DSPARK_CHECK_MSG(dst != nullptr, "PackedWeights: out of memory");
    ops::PackWeights(*v, dst, *pool);
    buffers_.emplace_back(dst);
    bytes_ += n;
    v->packed = dst;
    done.emplace(v->data, dst);
  }
  if (!buffers_.empty())
    DSPARK_LOG_DEBUG("packed {} weight matrices ({:.1f} MiB) for this CPU's kernels", buffers_.size(), bytes_ / 1048576.0);
}

}  // namespace dspark
