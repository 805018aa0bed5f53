// Per-target bodies of the elementwise ops (RmsNorm, Softmax, SiluMul, Add, Dot, Axpy, Scale).
// Included once per Highway target by elementwise.cc; other -inl.h kernels may include it to fuse
// an op without another dispatch. Loops use unaligned loads and a masked tail, so any n and any
// pointer alignment work.
#if defined(DSPARK_KERNELS_ELEMENTWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_ELEMENTWISE_INL_H_
#undef DSPARK_KERNELS_ELEMENTWISE_INL_H_
#else
#define DSPARK_KERNELS_ELEMENTWISE_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "util/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Tails go through a lane-sized stack buffer: Highway 1.0.3 emulates MaskedLoad/BlendedStore on
// SSE4 with full-width accesses, which would touch memory past the end of the arrays.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* p, int64_t count, float fill = 0.f) {
  HWY_ALIGN float buf[hn::MaxLanes(d)];
  for (size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = static_cast<int64_t>(i) < count ? p[i] : fill;
  return hn::Load(d, buf);
}
template <class D>
HWY_INLINE void StoreTail(hn::Vec<D> v, D d, float* p, int64_t count) {
  HWY_ALIGN float buf[hn::MaxLanes(d)];
  hn::Store(v, d, buf);
  for (int64_t i = 0; i < count; ++i) p[i] = buf[i];
}

// Σ a[i]·b[i] with four independent accumulators (hides the 4-cycle FMA latency).
inline float DotF32(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  if (i < n) s1 = hn::MulAdd(LoadTail(d, a + i, n - i), LoadTail(d, b + i, n - i), s1);
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

// y[i] = f(inputs[i]...) over [0, n): full vectors, then one padded tail vector. `f` maps the
// loaded input vectors to the output vector.
template <class D, class F>
HWY_INLINE void Map1(D d, const float* x, int64_t n, float* y, const F& f) {
  const int64_t N = hn::Lanes(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(hn::LoadU(d, x + i)), d, y + i);
  if (i < n) StoreTail(f(LoadTail(d, x + i, n - i)), d, y + i, n - i);
}
template <class D, class F>
HWY_INLINE void Map2(D d, const float* x, const float* z, int64_t n, float* y, const F& f) {
  const int64_t N = hn::Lanes(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(hn::LoadU(d, x + i), hn::LoadU(d, z + i)), d, y + i);
  if (i < n) StoreTail(f(LoadTail(d, x + i, n - i), LoadTail(d, z + i, n - i)), d, y + i, n - i);
}

inline void RmsNormImpl(const float* x, const float* weight, float eps, int64_t n, float* y) {
  const hn::ScalableTag<float> d;
  const float ss = DotF32(x, x, n);
  const auto inv = hn::Set(d, 1.0f / std::sqrt(ss / static_cast<float>(n) + eps));
  Map2(d, x, weight, n, y, [&](auto v, auto w) { return hn::Mul(hn::Mul(v, inv), w); });
}

// max(init, x[0], ..., x[n - 1]).
inline float MaxOf(const float* x, int64_t n, float init) {
  const hn::ScalableTag<float> d;
  const int64_t N = hn::Lanes(d);
  auto vmax = hn::Set(d, init);
  int64_t i = 0;
  for (; i + N <= n; i += N) vmax = hn::Max(vmax, hn::LoadU(d, x + i));
  if (i < n) vmax = hn::Max(vmax, LoadTail(d, x + i, n - i, -std::numeric_limits<float>::infinity()));
  return hn::GetLane(hn::MaxOfLanes(d, vmax));
}

// Softmax over x[0, n) and one more logit `extra` that takes probability mass but has no output
// (an attention sink); extra = -inf is the plain softmax.
inline void SoftmaxWithExtra(float* x, int64_t n, float extra) {
  const hn::ScalableTag<float> d;
  const int64_t N = hn::Lanes(d);
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const float max = MaxOf(x, n, extra);
  int64_t i = 0;
  if (max == kNegInf) {  // everything masked (or n == 0)
    for (int64_t k = 0; k < n; ++k) x[k] = 0.f;
    return;
  }
  const auto vm = hn::Set(d, max);
  auto vsum = hn::Zero(d);
  // exp(-inf) = 0, so masked logits drop out without a branch; the tail pads with -inf too.
  for (i = 0; i + N <= n; i += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, d, x + i);
  }
  if (i < n) {
    const auto e = hn::Exp(d, hn::Sub(LoadTail(d, x + i, n - i, kNegInf), vm));
    vsum = hn::Add(vsum, e);
    StoreTail(e, d, x + i, n - i);
  }
  const float extra_mass = extra == kNegInf ? 0.0f : std::exp(extra - max);
  const auto inv = hn::Set(d, 1.0f / (hn::GetLane(hn::SumOfLanes(d, vsum)) + extra_mass));
  Map1(d, x, n, x, [&](auto v) { return hn::Mul(v, inv); });
}

inline void SoftmaxImpl(float* x, int64_t n) { SoftmaxWithExtra(x, n, -std::numeric_limits<float>::infinity()); }

// The first index of the largest element (n > 0) and, with prob, softmax(x) there: 1 / Σ exp(x -
// max), summed without writing the distribution. Greedy verification takes one argmax per row
// and a greedy model drafter one argmax and its probability per token. For a small draft model a
// scalar loop and a Softmax into a copy would be a noticeable share of the time per drafted token.
inline int64_t ArgMaxImpl(const float* x, int64_t n, float* prob) {
  const hn::ScalableTag<float> d;
  const int64_t N = hn::Lanes(d);
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const float max = MaxOf(x, n, kNegInf);
  int64_t i = 0;
  // The first element equal to the maximum (a row with NaN has none: the last index then).
  int64_t best = n - 1;
  const auto vm_eq = hn::Set(d, max);
  for (i = 0; i + N <= n; i += N) {
    const intptr_t lane = hn::FindFirstTrue(d, hn::Eq(hn::LoadU(d, x + i), vm_eq));
    if (lane >= 0) {
      best = i + lane;
      break;
    }
  }
  if (i + N > n)
    for (; i < n; ++i)
      if (x[i] == max) {
        best = i;
        break;
      }
  if (prob != nullptr) {
    if (max == kNegInf) {
      *prob = 0.0f;
    } else {
      const auto vm = hn::Set(d, max);
      auto vsum = hn::Zero(d);
      for (i = 0; i + N <= n; i += N) vsum = hn::Add(vsum, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm)));
      if (i < n) vsum = hn::Add(vsum, hn::Exp(d, hn::Sub(LoadTail(d, x + i, n - i, kNegInf), vm)));
      *prob = 1.0f / hn::GetLane(hn::SumOfLanes(d, vsum));
    }
  }
  return best;
}

// silu(g) = g / (1 + exp(-g))
inline void SiluMulImpl(const float* gate, const float* up, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const auto one = hn::Set(d, 1.0f);
  Map2(d, gate, up, n, out, [&](auto g, auto u) {
    return hn::Mul(hn::Div(g, hn::Add(one, hn::Exp(d, hn::Neg(g)))), u);
  });
}

inline void AddImpl(const float* x, int64_t n, float* y) {
  const hn::ScalableTag<float> d;
  Map2(d, x, y, n, y, [](auto a, auto b) { return hn::Add(b, a); });
}

inline void AxpyImpl(float alpha, const float* x, int64_t n, float* y) {
  const hn::ScalableTag<float> d;
  const auto a = hn::Set(d, alpha);
  Map2(d, x, y, n, y, [&](auto xv, auto yv) { return hn::MulAdd(a, xv, yv); });
}

inline void ConvertToF16Impl(const float* HWY_RESTRICT x, int64_t n, uint16_t* HWY_RESTRICT dst) {
#if (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX2) || HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  // No F16C: Highway emulates the conversion and saturates overflow to the largest half; the
  // scalar converter rounds (and overflows to infinity) exactly as vcvtps2ph does.
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToF16(x[i]);
#else
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const int64_t N = hn::Lanes(d);
  auto* out = reinterpret_cast<hwy::float16_t*>(dst);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, x + i)), dh, out + i);
  if (i < n) {
    HWY_ALIGN hwy::float16_t buf[hn::MaxLanes(d)];
    hn::Store(hn::DemoteTo(dh, LoadTail(d, x + i, n - i)), dh, buf);
    for (int64_t k = 0; k < n - i; ++k) out[i + k] = buf[k];
  }
#endif
}

inline void ScaleImpl(float alpha, int64_t n, float* x) {
  const hn::ScalableTag<float> d;
  const auto a = hn::Set(d, alpha);
  Map1(d, x, n, x, [&](auto v) { return hn::Mul(a, v); });
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
