// How the MatMul drivers split a matrix's row groups over a ThreadPool.
#pragma once

#include <algorithm>
#include <cstdint>

#include "util/thread_pool.h"

namespace dspark::kernels {

// Activation rows up to which a MatMul takes one range of row groups per thread (decode,
// verification, small batches). The matrix is then tens of microseconds of work, and each extra
// range's hand-off (a claim on a counter the cores share) costs more than the balance it buys.
// Longer passes (prefill) keep ThreadPool::ParallelRange's several ranges per thread, which even
// out uneven cores.
inline constexpr int64_t kOneRangePerThreadRows = 16;

// Grain for ThreadPool::ParallelRange over `groups` row groups with m activation rows: at least
// min_grain, and for few rows one range per thread, a multiple of `align` groups (a kernel tile).
inline int64_t MatMulGrain(int64_t groups, int64_t align, int64_t min_grain, int64_t m, const ThreadPool& pool) {
  if (m > kOneRangePerThreadRows) return min_grain;
  const int64_t per_thread = (groups + pool.num_threads() - 1) / pool.num_threads();
  return std::max(min_grain, (per_thread + align - 1) / align * align);
}

}  // namespace dspark::kernels
