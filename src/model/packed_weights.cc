#include "model/packed_weights.h"

#include <cstring>
#include <map>

#include "util/log.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace dspark {

void* PackedWeights::Allocate(size_t n) {
  ++matrices_;
  packed_bytes_ += n;
  return arena_.Allocate(n, 64);
}

void PackedWeights::CopyUnpacked(const std::vector<ops::WeightView*>& views) {
  std::map<const void*, const void*> done;  // original rows -> copy
  for (ops::WeightView* v : views) {
    if (v == nullptr || v->data == nullptr || v->packed != nullptr) continue;
    if (auto it = done.find(v->data); it != done.end()) {
      v->data = it->second;
      continue;
    }
    const size_t n = static_cast<size_t>(RowBytes(v->type, v->cols)) * v->rows;
    void* dst = arena_.Allocate(n, 64);
    std::memcpy(dst, v->data, n);
    done.emplace(v->data, dst);
    v->data = dst;
  }
}

namespace {
// Packing threads live only while packing: a loaded model holds no idle pool of its own.
std::unique_ptr<ThreadPool> PackingPool(int threads) {
  return std::make_unique<ThreadPool>(threads > 0 ? threads : ThreadPool::DefaultThreadCount());
}
}  // namespace

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
    void* dst = Allocate(n);
    if (!pool) pool = PackingPool(threads);
    ops::PackWeights(*v, dst, *pool);
    v->packed = dst;
    done.emplace(v->data, dst);
  }
  if (matrices_ > 0)
    DSPARK_LOG_DEBUG("packed {} weight matrices ({:.1f} MiB{}) for this CPU's kernels", matrices_, bytes() / 1048576.0,
                     huge_pages() ? ", huge pages" : "");
}

bool PackedWeights::PackFused(const std::vector<const ops::WeightView*>& parts, ops::WeightView* fused, int threads) {
  *fused = ops::WeightView();
  if (parts.empty()) return false;
  ops::WeightView all = *parts[0];
  all.rows = 0;
  all.packed = nullptr;
  for (const ops::WeightView* p : parts) {
    if (p->data == nullptr || p->type != all.type || p->cols != all.cols) return false;
    all.rows += p->rows;
  }
  const size_t n = ops::PackedBytes(all.type, all.rows, all.cols);
  if (n == 0) return false;
  // The parts' rows one after another (rows are independent in every layout), packed as one.
  const size_t row_bytes = RowBytes(all.type, all.cols);
  std::vector<uint8_t> rows(row_bytes * all.rows);
  size_t at = 0;
  for (const ops::WeightView* p : parts) {
    std::memcpy(rows.data() + at, p->data, row_bytes * p->rows);
    at += row_bytes * p->rows;
  }
  all.data = rows.data();
  void* dst = Allocate(n);
  ops::PackWeights(all, dst, *PackingPool(threads));
  all.data = nullptr;
  all.packed = dst;
  *fused = all;
  return true;
}

}  // namespace dspark
