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

namespace {
// One copy per distinct original rows among `views` (tied matrices share one): make(view) writes
// the copy and returns it, or null to leave the view alone; attach(view, copy) points it there.
template <class Make, class Attach>
void CopyOncePerRows(const std::vector<ops::WeightView*>& views, Make make, Attach attach) {
  std::map<const void*, const void*> done;  // original rows -> copy
  for (ops::WeightView* v : views) {
    if (v == nullptr || v->data == nullptr) continue;
    const void* rows = v->data;
    const auto it = done.find(rows);
    const void* copy = it != done.end() ? it->second : make(*v);
    if (copy == nullptr) continue;
    done.emplace(rows, copy);
    attach(*v, copy);
  }
}

// Packing threads live only while packing: a loaded model holds no idle pool of its own.
std::unique_ptr<ThreadPool> PackingPool(int threads) {
  return std::make_unique<ThreadPool>(threads > 0 ? threads : ThreadPool::DefaultThreadCount());
}
}  // namespace

void PackedWeights::Pack(const std::vector<ops::WeightView*>& views, int threads) {
  std::unique_ptr<ThreadPool> pool;
  CopyOncePerRows(
      views,
      [&](const ops::WeightView& v) -> const void* {
        const size_t n = ops::PackedBytes(v.type, v.rows, v.cols);
        if (n == 0) return nullptr;
        void* dst = Allocate(n);
        if (!pool) pool = PackingPool(threads);
        ops::PackWeights(v, dst, *pool);
        return dst;
      },
      [](ops::WeightView& v, const void* copy) { v.packed = copy; });
  if (matrices_ > 0)
    DSPARK_LOG_DEBUG("packed {} weight matrices ({:.1f} MiB{}) for this CPU's kernels", matrices_, bytes() / 1048576.0,
                     huge_pages() ? ", huge pages" : "");
}

void PackedWeights::CopyUnpacked(const std::vector<ops::WeightView*>& views) {
  CopyOncePerRows(
      views,
      [&](const ops::WeightView& v) -> const void* {
        if (v.packed != nullptr) return nullptr;
        const size_t n = static_cast<size_t>(RowBytes(v.type, v.cols)) * v.rows;
        void* dst = arena_.Allocate(n, 64);
        std::memcpy(dst, v.data, n);
        return dst;
      },
      [](ops::WeightView& v, const void* copy) { v.data = copy; });
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
