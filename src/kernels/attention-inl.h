// Attention of one query position over cached keys and values, for the query heads that share one
// K/V head (grouped-query attention). Bodies of ops::AttentionGroup, per Highway target.
//
// Why a kernel and not Dot/Axpy per key: at a 512-token context a Qwen3-0.6B decode step made
// ~460k dispatched calls of 128 elements each, and read every K/V row once per query head; the
// step took 1.7x as long as with an empty context. Here each K and V row is read once for the whole
// group, the group's accumulators stay in registers, and there is one dispatch per (row, group).
#if defined(DSPARK_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_ATTENTION_INL_H_
#undef DSPARK_KERNELS_ATTENTION_INL_H_
#else
#define DSPARK_KERNELS_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "hwy/highway.h"
#include "kernels/elementwise-inl.h"  // SoftmaxImpl, LoadTail
#include "util/dtype.h"
#include "util/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Prefetch distance in keys (rows may be scattered cells, which no hardware prefetcher predicts).
inline constexpr int kKeyPrefetch = 4;

template <typename T>
HWY_INLINE void PrefetchRow(const T* p, int n) {
  for (int i = 0; i < n; i += static_cast<int>(64 / sizeof(T))) __builtin_prefetch(p + i);
}

// K/V elements (float or IEEE half) as float vectors.
template <class D>
HWY_INLINE hn::Vec<D> LoadKv(D d, const float* p) { return hn::LoadU(d, p); }
template <class D>
HWY_INLINE hn::Vec<D> LoadKv(D d, const hwy::float16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, D>(), p));
}
HWY_INLINE float KvToFloat(float x) { return x; }
HWY_INLINE float KvToFloat(hwy::float16_t x) {
  uint16_t bits;
  std::memcpy(&bits, &x, 2);
  return F16ToF32(bits);
}
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadKvTail(D d, const T* p, int count) {
  HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
  for (int i = 0; i < count; ++i) buf[i] = KvToFloat(p[i]);
  return hn::Load(d, buf);
}

// scores[h * n + t] = scale * q[h] . K(t) for kQ heads; head_dim a multiple of the lane count or not.
template <int kQ, typename T>
HWY_INLINE void GroupScores(const float* HWY_RESTRICT q, int head_dim, const T* HWY_RESTRICT k,
                            int64_t k_stride, const int32_t* HWY_RESTRICT cells, int n, float scale,
                            float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  for (int t = 0; t < n; ++t) {
    const T* kr = k + cells[t] * k_stride;
    if (t + kKeyPrefetch < n) PrefetchRow(k + cells[t + kKeyPrefetch] * k_stride, head_dim);
    hn::Vec<decltype(d)> acc[kQ];
    for (int h = 0; h < kQ; ++h) acc[h] = hn::Zero(d);
    int i = 0;
    for (; i + N <= head_dim; i += N) {
      const auto kv = LoadKv(d, kr + i);
      for (int h = 0; h < kQ; ++h) acc[h] = hn::MulAdd(hn::LoadU(d, q + h * head_dim + i), kv, acc[h]);
    }
    if (i < head_dim) {
      const auto kv = LoadKvTail(d, kr + i, head_dim - i);
      for (int h = 0; h < kQ; ++h) acc[h] = hn::MulAdd(LoadTail(d, q + h * head_dim + i, head_dim - i), kv, acc[h]);
    }
    for (int h = 0; h < kQ; ++h) scores[h * n + t] = scale * hn::GetLane(hn::SumOfLanes(d, acc[h]));
  }
}

// out[h] = Σ_t p[h * n + t] · V(t) for one column block of kVecs full vectors: the keys stream
// past in the outer loop and kQ x kVecs accumulators stay in registers (kVecs is a template
// argument so the compiler can keep them there).
template <int kQ, int kVecs, typename T>
HWY_INLINE void GroupValuesBlock(const float* HWY_RESTRICT p, int head_dim_v, int c0, const T* HWY_RESTRICT v,
                                 int64_t v_stride, const int32_t* HWY_RESTRICT cells, int n, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  hn::Vec<decltype(d)> acc[kQ][kVecs];
  for (int h = 0; h < kQ; ++h)
    for (int e = 0; e < kVecs; ++e) acc[h][e] = hn::Zero(d);
  for (int t = 0; t < n; ++t) {
    const T* vr = v + cells[t] * v_stride + c0;
    if (t + kKeyPrefetch < n) PrefetchRow(v + cells[t + kKeyPrefetch] * v_stride + c0, kVecs * N);
    for (int h = 0; h < kQ; ++h) {
      const auto ph = hn::Set(d, p[h * n + t]);
      for (int e = 0; e < kVecs; ++e) acc[h][e] = hn::MulAdd(ph, LoadKv(d, vr + e * N), acc[h][e]);
    }
  }
  for (int h = 0; h < kQ; ++h)
    for (int e = 0; e < kVecs; ++e) hn::StoreU(acc[h][e], d, out + h * head_dim_v + c0 + e * N);
}

// out[h] = Σ_t p[h * n + t] · V(t): column blocks of up to half the register file per pass, so a
// V row is read in as few contiguous pieces as the registers allow (narrow strips touch a new page
// per key and strip). Columns past the last full vector take a scalar loop.
template <int kQ, typename T>
HWY_INLINE void GroupValues(const float* HWY_RESTRICT p, int head_dim_v, const T* HWY_RESTRICT v,
                            int64_t v_stride, const int32_t* HWY_RESTRICT cells, int n, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  constexpr int kRegs = hn::MaxLanes(hn::ScalableTag<float>()) >= 16 ? 16 : 8;
  constexpr int kVecs = std::min(8, kRegs / kQ > 0 ? kRegs / kQ : 1);
  int c0 = 0;
  while (c0 + N <= head_dim_v) {
    const int vecs = std::min(kVecs, (head_dim_v - c0) / N);
    switch (vecs) {
      case 1: GroupValuesBlock<kQ, 1, T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
      case 2: GroupValuesBlock<kQ, std::min(2, kVecs), T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
      case 3: GroupValuesBlock<kQ, std::min(3, kVecs), T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
      case 4: GroupValuesBlock<kQ, std::min(4, kVecs), T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
      case 5: GroupValuesBlock<kQ, std::min(5, kVecs), T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
      case 6: GroupValuesBlock<kQ, std::min(6, kVecs), T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
      case 7: GroupValuesBlock<kQ, std::min(7, kVecs), T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
      default: GroupValuesBlock<kQ, std::min(8, kVecs), T>(p, head_dim_v, c0, v, v_stride, cells, n, out); break;
    }
    c0 += std::min(vecs, 8) * N;
  }
  for (; c0 < head_dim_v; ++c0) {
    for (int h = 0; h < kQ; ++h) {
      float o = 0.f;
      for (int t = 0; t < n; ++t) o += p[h * n + t] * KvToFloat(v[cells[t] * v_stride + c0]);
      out[h * head_dim_v + c0] = o;
    }
  }
}

template <int kQ, typename T>
HWY_INLINE void AttentionGroupN(const float* q, int head_dim, int head_dim_v, const T* k, int64_t k_stride,
                                const T* v, int64_t v_stride, const int32_t* cells, int n, float scale,
                                const float* sinks, float* scores, float* out) {
  GroupScores<kQ, T>(q, head_dim, k, k_stride, cells, n, scale, scores);
  for (int h = 0; h < kQ; ++h)
    SoftmaxWithExtra(scores + static_cast<int64_t>(h) * n, n, sinks ? sinks[h] : -std::numeric_limits<float>::infinity());
  GroupValues<kQ, T>(scores, head_dim_v, v, v_stride, cells, n, out);
}

template <typename T>
HWY_INLINE void AttentionGroupT(const float* q, int n_q, int head_dim, int head_dim_v, const T* k, int64_t k_stride,
                                const T* v, int64_t v_stride, const int32_t* cells, int n, float scale,
                                const float* sinks, float* scores, float* out) {
  // Up to 4 heads per pass (4 x 2 value accumulators + loads fit the 16 registers of AVX2); larger
  // groups take several passes over the rows.
  for (int h0 = 0; h0 < n_q; h0 += 4) {
    const float* qh = q + static_cast<int64_t>(h0) * head_dim;
    float* oh = out + static_cast<int64_t>(h0) * head_dim_v;
    const float* sh = sinks ? sinks + h0 : nullptr;
    switch (std::min(4, n_q - h0)) {
      case 1: AttentionGroupN<1, T>(qh, head_dim, head_dim_v, k, k_stride, v, v_stride, cells, n, scale, sh, scores, oh); break;
      case 2: AttentionGroupN<2, T>(qh, head_dim, head_dim_v, k, k_stride, v, v_stride, cells, n, scale, sh, scores, oh); break;
      case 3: AttentionGroupN<3, T>(qh, head_dim, head_dim_v, k, k_stride, v, v_stride, cells, n, scale, sh, scores, oh); break;
      default: AttentionGroupN<4, T>(qh, head_dim, head_dim_v, k, k_stride, v, v_stride, cells, n, scale, sh, scores, oh); break;
    }
  }
}

inline void AttentionGroupImpl(const float* q, int n_q, int head_dim, int head_dim_v, DType kv_type, const void* k,
                               int64_t k_stride, const void* v, int64_t v_stride, const int32_t* cells, int n,
                               float scale, const float* sinks, float* scores, float* out) {
  if (kv_type == DType::kF16) {
    AttentionGroupT(q, n_q, head_dim, head_dim_v, static_cast<const hwy::float16_t*>(k), k_stride,
                    static_cast<const hwy::float16_t*>(v), v_stride, cells, n, scale, sinks, scores, out);
  } else {
    AttentionGroupT(q, n_q, head_dim, head_dim_v, static_cast<const float*>(k), k_stride, static_cast<const float*>(v),
                    v_stride, cells, n, scale, sinks, scores, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
