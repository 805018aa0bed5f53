// ops::MatMul and the (de)quantisation entry points: one dynamic dispatch per call to the best
// compiled Highway target. Bodies: matmul_quant-inl.h (quantised weights), matmul_float-inl.h.
#include "kernels/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/matmul_float-inl.h"
#include "kernels/matmul_bf16-inl.h"
#include "kernels/matmul_quant-inl.h"
#include "kernels/matmul_packed-inl.h"

#if HWY_ONCE
#include <atomic>
#include <cstring>
#include "kernels/ops.h"
#include "kernels/ref/quant_ref.h"
#include "kernels/test_hooks.h"
#include "util/status.h"

namespace dspark {
HWY_EXPORT(MatMulQuantImpl);
HWY_EXPORT(MatMulFloatImpl);
HWY_EXPORT(MatMulBf16Impl);
HWY_EXPORT(Bf16KernelName);
HWY_EXPORT(MatMulPackedImpl);
HWY_EXPORT(PackedBytesImpl);
HWY_EXPORT(PackWeightsImpl);
HWY_EXPORT(QuantizeActForTest);

namespace kernels {
void QuantizeActivationsForTest(bool k_quant, int sub, const float* x, int64_t cols, int8_t* q,
                                float* da, float* asum) {
  HWY_DYNAMIC_DISPATCH(QuantizeActForTest)(k_quant, sub, x, cols, q, da, asum);
}

namespace {
std::atomic<bool> bf16_dot_disabled{false};
std::atomic<bool> avx_vnni_disabled{false};
std::atomic<bool> q8_scores_vnni_disabled{false};
}  // namespace
void DisableBf16DotForTest(bool disabled) { bf16_dot_disabled.store(disabled); }
bool Bf16DotDisabledForTest() { return bf16_dot_disabled.load(std::memory_order_relaxed); }
void DisableAvxVnniForTest(bool disabled) { avx_vnni_disabled.store(disabled); }
bool AvxVnniDisabledForTest() { return avx_vnni_disabled.load(std::memory_order_relaxed); }
void DisableQ8ScoresVnniForTest(bool disabled) { q8_scores_vnni_disabled.store(disabled); }
bool Q8ScoresVnniDisabledForTest() { return q8_scores_vnni_disabled.load(std::memory_order_relaxed); }
}  // namespace kernels

namespace ops {
namespace {
bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Float weights: [group of 16 rows][cols][16] (matmul_float-inl.h), the same on every target;
// BF16: [group of 16 rows][column pair][16][2], odd column counts padded (matmul_bf16-inl.h).
int64_t PackedCols(DType t, int64_t cols) { return t == DType::kBF16 ? (cols + 1) / 2 * 2 : cols; }

void PackFloat(const WeightView& w, void* dst, ThreadPool& pool) {
  const size_t elem = w.type == DType::kF32 ? 4 : 2;
  // Elements of one row that sit side by side in a lane: a column pair for BF16.
  const int64_t lane_elems = w.type == DType::kBF16 ? 2 : 1;
  constexpr int64_t kG = 16;
  const int64_t groups = (w.rows + kG - 1) / kG;
  const int64_t cols_pad = PackedCols(w.type, w.cols);
  auto* out = static_cast<uint8_t*>(dst);
  const auto* in = static_cast<const uint8_t*>(w.data);
  pool.ParallelRange(groups, 4, [&](int64_t gb, int64_t ge, int) {
    for (int64_t g = gb; g < ge; ++g) {
      uint8_t* og = out + static_cast<size_t>(g) * cols_pad * kG * elem;
      std::memset(og, 0, static_cast<size_t>(cols_pad) * kG * elem);
      for (int64_t l = 0; l < kG && g * kG + l < w.rows; ++l) {
        const uint8_t* row = in + static_cast<size_t>(g * kG + l) * w.cols * elem;
        for (int64_t k = 0; k < w.cols; ++k) {
          const int64_t slot = (k / lane_elems * kG + l) * lane_elems + k % lane_elems;
          std::memcpy(og + slot * elem, row + k * elem, elem);
        }
      }
    }
  });
}
}  // namespace

const char* Bf16MatMulKernel() { return HWY_DYNAMIC_DISPATCH(Bf16KernelName)(); }

bool MatMulSupports(DType type) {
  switch (type) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0: case DType::kQ4_0:
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void MatMul(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool& pool) {
  DSPARK_CHECK_MSG(MatMulSupports(w.type), "MatMul: unsupported weight type");
  DSPARK_CHECK_MSG(w.cols % Info(w.type).block_size == 0, "MatMul: cols not a block multiple");
  if (m <= 0 || w.rows <= 0) return;
  DSPARK_CHECK_MSG(w.data != nullptr || w.packed != nullptr, "MatMul: matrix without weights");
  if (w.type == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(MatMulBf16Impl)(w, x, m, y, pool);
  } else if (IsFloat(w.type)) {
    HWY_DYNAMIC_DISPATCH(MatMulFloatImpl)(w, x, m, y, pool);
  } else if (w.packed != nullptr) {
    HWY_DYNAMIC_DISPATCH(MatMulPackedImpl)(w, x, m, y, pool);
  } else {
    HWY_DYNAMIC_DISPATCH(MatMulQuantImpl)(w, x, m, y, pool);
  }
}


size_t PackedBytes(DType type, int64_t rows, int64_t cols) {
  if (IsFloat(type)) {
    if (rows <= 0 || cols <= 0) return 0;
    return static_cast<size_t>((rows + 15) / 16) * 16 * PackedCols(type, cols) * (type == DType::kF32 ? 4 : 2);
  }
  return HWY_DYNAMIC_DISPATCH(PackedBytesImpl)(type, rows, cols);
}

void PackWeights(const WeightView& w, void* dst, ThreadPool& pool) {
  DSPARK_CHECK_MSG(PackedBytes(w.type, w.rows, w.cols) > 0, "PackWeights: no packed layout for this type here");
  if (IsFloat(w.type)) return PackFloat(w, dst, pool);
  HWY_DYNAMIC_DISPATCH(PackWeightsImpl)(w, dst, pool);
}

void DequantizeRow(DType type, const void* src, float* dst, int64_t n) {
  const bool ok = ref::DequantizeRow(type, src, dst, n);
  DSPARK_CHECK_MSG(ok, "DequantizeRow: unsupported type");
}

bool QuantizeRow(DType type, const float* src, void* dst, int64_t n) {
  return ref::QuantizeRow(type, src, dst, n);
}

bool CanQuantize(DType type) { return ref::CanQuantize(type); }

}  // namespace ops
}  // namespace dspark
#endif  // HWY_ONCE
