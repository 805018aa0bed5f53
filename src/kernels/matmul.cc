// ops::MatMul and the (de)quantisation entry points: one dynamic dispatch per call to the best
// compiled Highway target. Bodies: matmul_quant-inl.h (quantised weights), matmul_float-inl.h.
#include "kernels/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/matmul_float-inl.h"
#include "kernels/matmul_quant-inl.h"
#include "kernels/matmul_packed-inl.h"

#if HWY_ONCE
#include "kernels/ops.h"
#include "kernels/ref/quant_ref.h"
#include "kernels/test_hooks.h"
#include "util/status.h"

namespace dspark {
HWY_EXPORT(MatMulQuantImpl);
HWY_EXPORT(MatMulFloatImpl);
HWY_EXPORT(MatMulPackedImpl);
HWY_EXPORT(PackedBytesImpl);
HWY_EXPORT(PackWeightsImpl);
HWY_EXPORT(QuantizeActForTest);

namespace kernels {
void QuantizeActivationsForTest(bool k_quant, int sub, const float* x, int64_t cols, int8_t* q,
                                float* da, float* asum) {
  HWY_DYNAMIC_DISPATCH(QuantizeActForTest)(k_quant, sub, x, cols, q, da, asum);
}
}  // namespace kernels

namespace ops {

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
  if (w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(MatMulFloatImpl)(w, x, m, y, pool);
  } else if (w.packed != nullptr) {
    HWY_DYNAMIC_DISPATCH(MatMulPackedImpl)(w, x, m, y, pool);
  } else {
    HWY_DYNAMIC_DISPATCH(MatMulQuantImpl)(w, x, m, y, pool);
  }
}

size_t PackedBytes(DType type, int64_t rows, int64_t cols) {
  return HWY_DYNAMIC_DISPATCH(PackedBytesImpl)(type, rows, cols);
}

void PackWeights(const WeightView& w, void* dst, ThreadPool& pool) {
  DSPARK_CHECK_MSG(PackedBytes(w.type, w.rows, w.cols) > 0, "PackWeights: no packed layout for this type here");
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
