// Attention of one or several query rows of a sequence over one cached K/V head: the body of
// ops::Attention, per Highway target.
//
// Keys are stored in tiles of 32 cells, transposed ([tile][head_dim][32]), so a vector holds one
// dimension of consecutive keys: scores need no horizontal sums (with one key per vector, a
// Qwen3-0.6B step spent more on reductions than on multiplies), a key tile is loaded once for all
// the heads of all the rows in the call (a verification block shares every load), and each score
// is the same FMA chain whoever else is in the call. Values stay row-major; each V row is read
// once per pass of up to 4 heads (6 with AVX-512) with the accumulators in registers, and a call
// with several rows prefetches them during its first score pass.
#if defined(DSPARK_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSPARK_KERNELS_ATTENTION_INL_H_
#undef DSPARK_KERNELS_ATTENTION_INL_H_
#else
#define DSPARK_KERNELS_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "kernels/elementwise-inl.h"  // SoftmaxWithExtra
#include "kernels/ops.h"               // kAttentionKeyTile
#include "util/dtype.h"
#include "util/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace dspark {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Prefetch distance in value rows.
inline constexpr int kKeyPrefetch = 4;
// Query heads from which the score pass prefetches the values (AttentionT).
inline constexpr int kPrefetchValuesHeads = 6;

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

// Q8_0 K/V (ops::kAttentionQ8Block layouts) are passed as int8_t pointers to their bytes.
// 16 int8 as float vector lanes (the lanes of D; D has at most 16 float lanes).
template <class D>
HWY_INLINE hn::Vec<D> LoadQ8(D d, const int8_t* p) {
  const hn::Rebind<int32_t, D> di;
  return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, D>(), p)));
}

// Bytes of one value row of v_stride elements.
template <typename T>
constexpr int64_t ValueRowBytes(int64_t v_stride) {
  if constexpr (std::is_same_v<T, int8_t>) {
    return v_stride / ops::kAttentionQ8Block * ops::kAttentionQ8ValueBlockBytes;
  } else {
    return v_stride * static_cast<int64_t>(sizeof(T));
  }
}

// Address of element `col` of value row t (for Q8_0: its block's scale, the block holds col).
template <typename T>
HWY_INLINE const uint8_t* ValueAddress(const T* v, int64_t v_stride, int64_t t, int64_t col) {
  const auto* base = reinterpret_cast<const uint8_t*>(v) + t * ValueRowBytes<T>(v_stride);
  if constexpr (std::is_same_v<T, int8_t>) {
    return base + col / ops::kAttentionQ8Block * ops::kAttentionQ8ValueBlockBytes;
  } else {
    return base + col * static_cast<int64_t>(sizeof(T));
  }
}

// The scale of the Q8_0 value block at `a` (ValueAddress), and its int8 elements.
HWY_INLINE float Q8BlockScale(const uint8_t* a) {
  float scale;
  std::memcpy(&scale, a, sizeof(float));
  return scale;
}
HWY_INLINE const int8_t* Q8BlockValues(const uint8_t* a) { return reinterpret_cast<const int8_t*>(a + sizeof(float)); }

// Value row t, columns [col, col + lanes) as floats (a vector never straddles a Q8_0 block: 32
// is a multiple of the lanes).
template <class D, typename T>
HWY_INLINE hn::Vec<D> LoadValue(D d, const T* v, int64_t v_stride, int64_t t, int64_t col) {
  const uint8_t* a = ValueAddress(v, v_stride, t, col);
  if constexpr (std::is_same_v<T, int8_t>) {
    return hn::Mul(LoadQ8(d, Q8BlockValues(a) + col % ops::kAttentionQ8Block), hn::Set(d, Q8BlockScale(a)));
  } else {
    return LoadKv(d, reinterpret_cast<const T*>(a));
  }
}
template <typename T>
HWY_INLINE float ValueElement(const T* v, int64_t v_stride, int64_t t, int64_t col) {
  const uint8_t* a = ValueAddress(v, v_stride, t, col);
  if constexpr (std::is_same_v<T, int8_t>) {
    return static_cast<float>(Q8BlockValues(a)[col % ops::kAttentionQ8Block]) * Q8BlockScale(a);
  } else {
    T x;
    std::memcpy(&x, a, sizeof(T));
    return KvToFloat(x);
  }
}

// Scores of heads [0, kH) of qs against every key tile: scores[h * s_stride + t] = qs[h] · K(t)
// for t < n rounded up to whole tiles (lanes past n hold garbage the caller never reads). Lanes are
// keys, so each score is one FMA chain over the head dimension in order, whatever kH and whichever
// other heads share the pass: a row's attention is bitwise the same alone (decode) or in a block
// (verification), which exact speculative decoding needs. Q8_0 keys (T = int8_t) come in blocks of
// 32 dimensions: each key vector is widened and scaled by its cells' scales once for all kH heads,
// then takes part in the same chain.
template <int kH, typename T>
HWY_NOINLINE void TileScores(const float* HWY_RESTRICT qs, int head_dim, const T* HWY_RESTRICT kt, int n,
                             float* HWY_RESTRICT scores, int64_t s_stride, const uint8_t* v_ahead,
                             int64_t v_tile_bytes) {
  const hn::ScalableTag<float> d;
  constexpr int N = static_cast<int>(hn::MaxLanes(d));
  constexpr int kV = ops::kAttentionKeyTile / N;  // vectors per tile row
  constexpr bool kQ8 = std::is_same_v<T, int8_t>;
  constexpr int64_t kRowBytes = ops::kAttentionKeyTile * static_cast<int64_t>(sizeof(T));
  // A tile is `blocks` blocks of block_dims rows (one dimension of 32 cells each), Q8_0 blocks
  // followed by their cells' scales.
  const int block_dims = kQ8 ? ops::kAttentionQ8Block : head_dim;
  const int blocks = head_dim / block_dims;
  const int64_t block_bytes = kQ8 ? ops::kAttentionQ8KeyBlockBytes : head_dim * kRowBytes;
  const int64_t tile_bytes = blocks * block_bytes;
  const int64_t v_step = v_tile_bytes / head_dim;  // V bytes to prefetch per dimension of a tile
  for (int t0 = 0; t0 < n; t0 += ops::kAttentionKeyTile) {
    const uint8_t* tile = reinterpret_cast<const uint8_t*>(kt) + (t0 / ops::kAttentionKeyTile) * tile_bytes;
    const bool more = t0 + ops::kAttentionKeyTile < n;
    const uint8_t* v_tile = v_ahead == nullptr ? nullptr : v_ahead + (t0 / ops::kAttentionKeyTile) * v_tile_bytes;
    hn::Vec<decltype(d)> acc[kH][kV];
    for (int h = 0; h < kH; ++h)
      for (int v = 0; v < kV; ++v) acc[h][v] = hn::Zero(d);
    for (int b = 0; b < blocks; ++b) {
      const uint8_t* block = tile + b * block_bytes;
      const uint8_t* block_scales = block + ops::kAttentionQ8Block * kRowBytes;  // Q8_0 only
      hn::Vec<decltype(d)> sv[kV];
      if constexpr (kQ8)
        for (int v = 0; v < kV; ++v) sv[v] = hn::LoadU(d, reinterpret_cast<const float*>(block_scales) + v * N);
      for (int i = 0; i < block_dims; ++i) {
        const int dim = b * block_dims + i;
        const uint8_t* row = block + i * kRowBytes;
        // The next tile is one sequential stream: a line ahead per line of rows keeps it coming
        // (and for Q8_0 the two lines of its block's scales).
        if (more && (i * kRowBytes) % 64 == 0) __builtin_prefetch(row + tile_bytes);
        if (kQ8 && more && i < 2) __builtin_prefetch(block_scales + tile_bytes + i * 64);
        // The values of this tile's keys (v_ahead: nullptr for none), spread over its dimensions.
        if (v_ahead != nullptr)
          for (int64_t o = dim * v_step; o < (dim + 1) * v_step; o += 64) __builtin_prefetch(v_tile + o);
        hn::Vec<decltype(d)> kv[kV];
        for (int v = 0; v < kV; ++v) {
          if constexpr (kQ8) {
            kv[v] = hn::Mul(LoadQ8(d, reinterpret_cast<const int8_t*>(row) + v * N), sv[v]);
          } else {
            kv[v] = LoadKv(d, reinterpret_cast<const T*>(row) + v * N);
          }
        }
        for (int h = 0; h < kH; ++h) {
          const auto qv = hn::Set(d, qs[h * head_dim + dim]);
          for (int v = 0; v < kV; ++v) acc[h][v] = hn::MulAdd(qv, kv[v], acc[h][v]);
        }
      }
    }
    for (int h = 0; h < kH; ++h)
      for (int v = 0; v < kV; ++v) hn::StoreU(acc[h][v], d, scores + h * s_stride + t0 + v * N);
  }
}

// TileScores for `rest` (1..kMax) heads in one pass: the template argument is chosen at run time.
template <int kMax, typename T>
HWY_INLINE void ScoresOfRest(int rest, const float* HWY_RESTRICT qs, int head_dim, const T* HWY_RESTRICT kt, int n,
                             float* HWY_RESTRICT scores, int64_t s_stride, const uint8_t* v_ahead,
                             int64_t v_tile_bytes) {
  if constexpr (kMax <= 1) {
    TileScores<1, T>(qs, head_dim, kt, n, scores, s_stride, v_ahead, v_tile_bytes);
  } else {
    if (rest == kMax) return TileScores<kMax, T>(qs, head_dim, kt, n, scores, s_stride, v_ahead, v_tile_bytes);
    ScoresOfRest<kMax - 1, T>(rest, qs, head_dim, kt, n, scores, s_stride, v_ahead, v_tile_bytes);
  }
}

// out[h] = Σ_t p[h * p_stride + t] · V(t) for one column block of kVecs full vectors: the keys
// stream past in the outer loop and kQ x kVecs accumulators stay in registers (kVecs is a template
// argument so the compiler can keep them there). Each output is one chain over t in order.
template <int kQ, int kVecs, typename T>
HWY_INLINE void GroupValuesBlock(const float* HWY_RESTRICT p, int64_t p_stride, int c0, const T* HWY_RESTRICT v,
                                 int64_t v_stride, int n, float* const* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  hn::Vec<decltype(d)> acc[kQ][kVecs];
  for (int h = 0; h < kQ; ++h)
    for (int e = 0; e < kVecs; ++e) acc[h][e] = hn::Zero(d);
  // Bytes of a row's kVecs vectors (Q8_0: the blocks that hold them, scales included).
  const int64_t span = std::is_same_v<T, int8_t>
                           ? ValueRowBytes<T>((kVecs * N + ops::kAttentionQ8Block - 1) / ops::kAttentionQ8Block *
                                              ops::kAttentionQ8Block)
                           : kVecs * N * static_cast<int64_t>(sizeof(T));
  for (int t = 0; t < n; ++t) {
    if (t + kKeyPrefetch < n) {
      const uint8_t* ahead = ValueAddress(v, v_stride, t + kKeyPrefetch, c0);
      for (int64_t o = 0; o < span; o += 64) __builtin_prefetch(ahead + o);
    }
    // Widened (and for Q8_0 scaled) once for every head of the pass.
    hn::Vec<decltype(d)> vv[kVecs];
    for (int e = 0; e < kVecs; ++e) vv[e] = LoadValue(d, v, v_stride, t, c0 + e * N);
    for (int h = 0; h < kQ; ++h) {
      const auto ph = hn::Set(d, p[h * p_stride + t]);
      for (int e = 0; e < kVecs; ++e) acc[h][e] = hn::MulAdd(ph, vv[e], acc[h][e]);
    }
  }
  for (int h = 0; h < kQ; ++h)
    for (int e = 0; e < kVecs; ++e) hn::StoreU(acc[h][e], d, out[h] + c0 + e * N);
}

// out[h] = Σ_t p[h * p_stride + t] · V(t) for kQ heads: column blocks of up to half the register
// file per pass, so a V row is read in as few contiguous pieces as the registers allow. Columns
// past the last full vector take a scalar loop.
template <int kQ, typename T>
HWY_INLINE void GroupValues(const float* HWY_RESTRICT p, int64_t p_stride, int head_dim_v, const T* HWY_RESTRICT v,
                            int64_t v_stride, int n, float* const* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const int N = static_cast<int>(hn::Lanes(d));
  // Accumulators: 24 of AVX-512's 32 registers, 8 of AVX2's 16.
  constexpr int kRegs = hn::MaxLanes(hn::ScalableTag<float>()) >= 16 ? 24 : 8;
  constexpr int kVecs = std::min(8, kRegs / kQ > 0 ? kRegs / kQ : 1);
  int c0 = 0;
  while (c0 + N <= head_dim_v) {
    const int vecs = std::min(kVecs, (head_dim_v - c0) / N);
    switch (vecs) {
      case 1: GroupValuesBlock<kQ, 1, T>(p, p_stride, c0, v, v_stride, n, out); break;
      case 2: GroupValuesBlock<kQ, std::min(2, kVecs), T>(p, p_stride, c0, v, v_stride, n, out); break;
      case 3: GroupValuesBlock<kQ, std::min(3, kVecs), T>(p, p_stride, c0, v, v_stride, n, out); break;
      case 4: GroupValuesBlock<kQ, std::min(4, kVecs), T>(p, p_stride, c0, v, v_stride, n, out); break;
      case 5: GroupValuesBlock<kQ, std::min(5, kVecs), T>(p, p_stride, c0, v, v_stride, n, out); break;
      case 6: GroupValuesBlock<kQ, std::min(6, kVecs), T>(p, p_stride, c0, v, v_stride, n, out); break;
      case 7: GroupValuesBlock<kQ, std::min(7, kVecs), T>(p, p_stride, c0, v, v_stride, n, out); break;
      default: GroupValuesBlock<kQ, std::min(8, kVecs), T>(p, p_stride, c0, v, v_stride, n, out); break;
    }
    c0 += std::min(vecs, 8) * N;
  }
  for (; c0 < head_dim_v; ++c0) {
    for (int h = 0; h < kQ; ++h) {
      float o = 0.f;
      // std::fma, not `o += p * v`: the compiler contracted (or vectorised) that differently per
      // kQ, and a row's result must not depend on how many heads share its pass.
      for (int t = 0; t < n; ++t) o = std::fma(p[h * p_stride + t], ValueElement(v, v_stride, t, c0), o);
      out[h][c0] = o;
    }
  }
}

inline int64_t AttentionScratchImpl(int n_q, int n, int head_dim) {
  const int64_t n_pad = (n + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile * ops::kAttentionKeyTile;
  return static_cast<int64_t>(n_q) * head_dim + static_cast<int64_t>(n_q) * n_pad;
}

template <typename T>
HWY_INLINE void AttentionT(const float* q, int64_t q_stride, int n_q, int heads_per_row, int head_dim,
                           int head_dim_v, const T* kt, const T* v, int64_t v_stride, int n, int shared,
                           const uint8_t* visible, float scale, const float* sinks, float* scratch, float* out,
                           int64_t out_stride) {
  const hn::ScalableTag<float> d;
  constexpr int N = static_cast<int>(hn::MaxLanes(d));
  // Heads per score pass: kH x (tile / N) accumulators fill half the registers (AVX2) or, with
  // AVX-512's 32, three quarters: 12 heads are a 4-row verification block of a model with 3 query
  // heads per K/V head, which then reads and widens each key tile once instead of twice.
  constexpr int kV = ops::kAttentionKeyTile / N;
  constexpr int kH = kV >= 16 ? 1 : (N >= 16 ? 24 : 16) / kV;
  const int64_t n_pad = (n + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile * ops::kAttentionKeyTile;
  float* qs = scratch;                                      // [n_q][head_dim], scaled
  float* sc = qs + static_cast<int64_t>(n_q) * head_dim;    // [n_q][n_pad]
  for (int h = 0; h < n_q; ++h) {
    const float* qh = q + (h / heads_per_row) * q_stride + (h % heads_per_row) * head_dim;
    for (int i = 0; i < head_dim; ++i) qs[h * head_dim + i] = qh[i] * scale;
  }
  if (n == 0) {
    for (int h = 0; h < n_q; ++h)
      std::fill_n(out + (h / heads_per_row) * out_stride + (h % heads_per_row) * head_dim_v, head_dim_v, 0.f);
    return;
  }
  int h0 = 0;
  // With several rows' heads, the first score pass also prefetches V, tile by tile as it reads K,
  // so the value pass finds it in cache: a pass finds a layer's K/V evicted by the weights streamed
  // since the layer last ran (kernels_bench AttentionCold, medians of 5 alternating runs, 4 rows:
  // bundled target 14.1 -> 12.7 us over 256 cells and 54 -> 46 over 1,024, Qwen3-0.6B shape 83 ->
  // 67 over 1,024). A decode row's pass over K is too short to hide the prefetches: with one row
  // they gained nothing and cost the Qwen3-0.6B shape up to 8%.
  const auto* v_ahead = n_q >= kPrefetchValuesHeads ? reinterpret_cast<const uint8_t*>(v) : nullptr;
  const int64_t v_tile_bytes = static_cast<int64_t>(ops::kAttentionKeyTile) * ValueRowBytes<T>(v_stride);
  for (; h0 + kH <= n_q; h0 += kH)
    TileScores<kH, T>(qs + h0 * head_dim, head_dim, kt, n, sc + h0 * n_pad, n_pad, h0 == 0 ? v_ahead : nullptr,
                      v_tile_bytes);
  // The rest in one pass too: a decode step of a model with 3 query heads per KV head (Qwen-style
  // GQA) is all rest, and one head per pass loaded and widened every key tile 3 times.
  if (h0 < n_q)
    ScoresOfRest<kH - 1, T>(n_q - h0, qs + h0 * head_dim, head_dim, kt, n, sc + h0 * n_pad, n_pad,
                            h0 == 0 ? v_ahead : nullptr, v_tile_bytes);

  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int h = 0; h < n_q; ++h) {
    float* sh = sc + h * n_pad;
    if (shared < n) {
      const uint8_t* vis = visible + static_cast<int64_t>(h / heads_per_row) * (n - shared);
      for (int t = shared; t < n; ++t)
        if (!vis[t - shared]) sh[t] = kNegInf;
    }
    SoftmaxWithExtra(sh, n, sinks ? sinks[h % heads_per_row] : kNegInf);
  }

  // Values, up to 4 heads per pass (4 x 2 accumulators + loads fit the 16 registers of AVX2), 6
  // with AVX-512 (6 x 4 accumulators of a 64-wide head + its 4 value vectors fit 32): each pass
  // reads and widens every V row once.
  constexpr int kValueHeads = N >= 16 ? 6 : 4;
  for (int g0 = 0; g0 < n_q; g0 += kValueHeads) {
    float* o[kValueHeads];
    const int cnt = std::min(kValueHeads, n_q - g0);
    for (int j = 0; j < cnt; ++j)
      o[j] = out + ((g0 + j) / heads_per_row) * out_stride + ((g0 + j) % heads_per_row) * head_dim_v;
    const float* p = sc + g0 * n_pad;
    switch (cnt) {
      case 1: GroupValues<1, T>(p, n_pad, head_dim_v, v, v_stride, n, o); break;
      case 2: GroupValues<2, T>(p, n_pad, head_dim_v, v, v_stride, n, o); break;
      case 3: GroupValues<3, T>(p, n_pad, head_dim_v, v, v_stride, n, o); break;
      case 4: GroupValues<4, T>(p, n_pad, head_dim_v, v, v_stride, n, o); break;
      case 5: GroupValues<std::min(5, kValueHeads), T>(p, n_pad, head_dim_v, v, v_stride, n, o); break;
      default: GroupValues<kValueHeads, T>(p, n_pad, head_dim_v, v, v_stride, n, o); break;
    }
  }
}

// Query heads from which a Q8_0 call first widens its keys and values to f32 once (then attends
// as over an F32 cache): every score pass widens and scales the key tiles again, every value pass
// of 6 heads the values, which made prefill over a Q8_0 cache 10-26% slower than over F16. Each
// element is the same int8 * scale product either way, summed in the same order, so a row's result
// does not depend on which path its call took.
inline constexpr int kQ8WidenOnceHeads = 24;

// The Q8_0 keys of cells [0, n) as f32 tiles ([tile][head_dim][32]) and values as f32 rows
// ([n][head_dim_v]).
inline void WidenQ8(const int8_t* kt, const int8_t* v, int64_t v_stride, int head_dim, int head_dim_v, int n,
                    std::vector<float>& k_out, std::vector<float>& v_out) {
  const hn::ScalableTag<float> d;
  constexpr int N = static_cast<int>(hn::MaxLanes(d));
  constexpr int kT = ops::kAttentionKeyTile, kB = ops::kAttentionQ8Block;
  const int tiles = (n + kT - 1) / kT, blocks = head_dim / kB;
  k_out.resize(static_cast<size_t>(tiles) * head_dim * kT);
  for (int t = 0; t < tiles; ++t)
    for (int b = 0; b < blocks; ++b) {
      const int8_t* block = kt + (static_cast<int64_t>(t) * blocks + b) * ops::kAttentionQ8KeyBlockBytes;
      const float* scales = reinterpret_cast<const float*>(block + kB * kT);
      float* dst = k_out.data() + (static_cast<size_t>(t) * head_dim + b * kB) * kT;
      for (int i = 0; i < kB; ++i)
        for (int c = 0; c < kT; c += N)
          hn::StoreU(hn::Mul(LoadQ8(d, block + i * kT + c), hn::LoadU(d, scales + c)), d, dst + i * kT + c);
    }
  v_out.resize(static_cast<size_t>(n) * head_dim_v);
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < head_dim_v; c += N) hn::StoreU(LoadValue(d, v, v_stride, t, c), d, v_out.data() + t * head_dim_v + c);
}

inline void AttentionImpl(const float* q, int64_t q_stride, int n_q, int heads_per_row, int head_dim, int head_dim_v,
                          DType kv_type, const void* kt, const void* v, int64_t v_stride, int n, int shared,
                          const uint8_t* visible, float scale, const float* sinks, float* scratch, float* out,
                          int64_t out_stride) {
  if (kv_type == DType::kQ8_0 && n_q >= kQ8WidenOnceHeads) {
    thread_local std::vector<float> k_wide, v_wide;
    WidenQ8(static_cast<const int8_t*>(kt), static_cast<const int8_t*>(v), v_stride, head_dim, head_dim_v, n, k_wide,
            v_wide);
    AttentionT(q, q_stride, n_q, heads_per_row, head_dim, head_dim_v, k_wide.data(), v_wide.data(), head_dim_v, n,
               shared, visible, scale, sinks, scratch, out, out_stride);
  } else if (kv_type == DType::kQ8_0) {
    AttentionT(q, q_stride, n_q, heads_per_row, head_dim, head_dim_v, static_cast<const int8_t*>(kt),
               static_cast<const int8_t*>(v), v_stride, n, shared, visible, scale, sinks, scratch, out, out_stride);
  } else if (kv_type == DType::kF16) {
    AttentionT(q, q_stride, n_q, heads_per_row, head_dim, head_dim_v, static_cast<const hwy::float16_t*>(kt),
               static_cast<const hwy::float16_t*>(v), v_stride, n, shared, visible, scale, sinks, scratch, out,
               out_stride);
  } else {
    AttentionT(q, q_stride, n_q, heads_per_row, head_dim, head_dim_v, static_cast<const float*>(kt),
               static_cast<const float*>(v), v_stride, n, shared, visible, scale, sinks, scratch, out, out_stride);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dspark
HWY_AFTER_NAMESPACE();

#endif  // include guard
