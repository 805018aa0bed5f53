// Dispatch wrappers for the elementwise ops of ops.h; bodies in elementwise-inl.h.
#include <cstring>

#include "kernels/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/elementwise-inl.h"

#if HWY_ONCE
#include "kernels/ops.h"

namespace dspark {
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(ArgMaxImpl);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(DotF32);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(ConvertToF16Impl);

namespace ops {
void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, weight, eps, n, y);
}
void Softmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n); }
int64_t ArgMax(const float* x, int64_t n, float* prob) { return HWY_DYNAMIC_DISPATCH(ArgMaxImpl)(x, n, prob); }
void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulImpl)(gate, up, n, out);
}
void Add(const float* x, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(AddImpl)(x, n, y); }
void SplitColumns(const float* x, int64_t n, std::initializer_list<std::pair<int64_t, float*>> parts) {
  int64_t total = 0;
  for (const auto& [width, y] : parts) total += width;
  int64_t offset = 0;
  for (const auto& [width, y] : parts) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(y + i * width, x + i * total + offset, static_cast<size_t>(width) * sizeof(float));
    offset += width;
  }
}
float Dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotF32)(a, b, n); }
void Axpy(float alpha, const float* x, int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(AxpyImpl)(alpha, x, n, y);
}
void Scale(float alpha, int64_t n, float* x) { HWY_DYNAMIC_DISPATCH(ScaleImpl)(alpha, n, x); }
void ConvertToF16(const float* x, int64_t n, uint16_t* dst) { HWY_DYNAMIC_DISPATCH(ConvertToF16Impl)(x, n, dst); }
}  // namespace ops
}  // namespace dspark
#endif  // HWY_ONCE
