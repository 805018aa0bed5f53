// Attention of one or several query rows of a sequence over one cached K/V head: the body of
// ops::Attention, per Highway target.
//
// Keys are stored in tiles of 32 cells, transposed ([tile][head_dim][32]), so a vector holds one
// dimension of consecutive keys: scores need no horizontal sums (with one key per vector, a
// Qwen3-0.6B step spent more on reductions than on multiplies), a key tile is loaded once for all
// the heads of all the rows in the call (a verification block shares every load), and each score
// is the same FMA chain whoever else is in the call. Values stay row-major; each V row is read
// once per pass of up to 4 heads (6 with AVX-512) with the accumulators in registers, and a call
// with several rows prefetches them during its first score pass. Q8_0 keys are tiled by 4
// dimensions per dword ([8 quads][32 cells][4], see ops.h) so their scores are integer dot products
// of the quantised query (TileScoresQ8).
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
#include "kernels/kv_quant.h"          // QuantizeQ8Block
#include "kernels/matmul_vnni-inl.h"   // DSPARK_HAVE_VNNI, DpbusdBcast, CvtI32
#include "kernels/ops.h"               // kAttentionKeyTile
#include "kernels/test_hooks.h"
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

// Scores of heads [0, kH) of qs against every key tile (float or half keys): scores[h * s_stride +
// t] = qs[h] · K(t) for t < n rounded up to whole tiles (lanes past n hold garbage the caller never
// reads). Lanes are keys, so each score is one FMA chain over the head dimension in order, whatever
// kH and whichever other heads share the pass: a row's attention is bitwise the same alone (decode)
// or in a block (verification), which exact speculative decoding needs. v_ahead (nullptr: none):
// the values of the tiles, prefetched as the keys stream past, v_tile_bytes per tile.
template <int kH, typename T>
HWY_NOINLINE void TileScores(const float* HWY_RESTRICT qs, int head_dim, const T* HWY_RESTRICT kt, int n,
                             float* HWY_RESTRICT scores, int64_t s_stride, const uint8_t* v_ahead,
                             int64_t v_tile_bytes) {
  const hn::ScalableTag<float> d;
  constexpr int N = static_cast<int>(hn::MaxLanes(d));
  constexpr int kV = ops::kAttentionKeyTile / N;  // vectors per tile row
  constexpr int64_t kRowBytes = ops::kAttentionKeyTile * static_cast<int64_t>(sizeof(T));
  const int64_t tile_bytes = head_dim * kRowBytes;
  const int64_t v_step = v_tile_bytes / head_dim;  // V bytes to prefetch per dimension of a tile
  for (int t0 = 0; t0 < n; t0 += ops::kAttentionKeyTile) {
    const uint8_t* tile = reinterpret_cast<const uint8_t*>(kt) + (t0 / ops::kAttentionKeyTile) * tile_bytes;
    const bool more = t0 + ops::kAttentionKeyTile < n;
    const uint8_t* v_tile = v_ahead == nullptr ? nullptr : v_ahead + (t0 / ops::kAttentionKeyTile) * v_tile_bytes;
    hn::Vec<decltype(d)> acc[kH][kV];
    for (int h = 0; h < kH; ++h)
      for (int v = 0; v < kV; ++v) acc[h][v] = hn::Zero(d);
    for (int i = 0; i < head_dim; ++i) {
      const uint8_t* row = tile + i * kRowBytes;
      // The next tile is one sequential stream: a line ahead per line of rows keeps it coming.
      if (more && (i * kRowBytes) % 64 == 0) __builtin_prefetch(row + tile_bytes);
      // The values of this tile's keys (v_ahead: nullptr for none), spread over its dimensions.
      if (v_ahead != nullptr)
        for (int64_t o = i * v_step; o < (i + 1) * v_step; o += 64) __builtin_prefetch(v_tile + o);
      hn::Vec<decltype(d)> kv[kV];
      for (int v = 0; v < kV; ++v) kv[v] = LoadKv(d, reinterpret_cast<const T*>(row) + v * N);
      for (int h = 0; h < kH; ++h) {
        const auto qv = hn::Set(d, qs[h * head_dim + i]);
        for (int v = 0; v < kV; ++v) acc[h][v] = hn::MulAdd(qv, kv[v], acc[h][v]);
      }
    }
    for (int h = 0; h < kH; ++h)
      for (int v = 0; v < kV; ++v) hn::StoreU(acc[h][v], d, scores + h * s_stride + t0 + v * N);
  }
}

// The queries of a call over Q8_0 keys, quantised per head and 32 dimensions (QuantizeQ8Block of
// the scaled query, as llama.cpp quantises activations for its q8_0 dot): head h's q at q + h *
// head_dim (int8, for vpdpbusd) and again as floats at qf + h * head_dim; its scales at d + h *
// blocks and corr = -128 * Σ q per block at corr + h * blocks (removes the keys' +128 offset).
struct QueryQ8 {
  const int8_t* q = nullptr;
  const float* qf = nullptr;
  const float* d = nullptr;
  const int32_t* corr = nullptr;
  int head_dim = 0, blocks = 0;
  QueryQ8 Heads(int h0) const {
    return {q + h0 * head_dim, qf + h0 * head_dim, d + h0 * blocks, corr + h0 * blocks, head_dim, blocks};
  }
};

// Prefetches while scores read quad `quad` of Q8_0 key block b: the same bytes of the next tile
// (next_tile: its distance, 0 for none; two lines per quad, and the two lines of the block's
// scales), and this tile's values (v_tile: nullptr for none), v_step bytes per quad.
HWY_INLINE void PrefetchQ8Quad(const uint8_t* block, int quad, int b, int64_t next_tile, const uint8_t* v_tile,
                               int64_t v_step) {
  constexpr int kQuadBytes = 4 * ops::kAttentionKeyTile;
  if (next_tile > 0) {
    __builtin_prefetch(block + quad * kQuadBytes + next_tile);
    __builtin_prefetch(block + quad * kQuadBytes + 64 + next_tile);
    if (quad < 2) __builtin_prefetch(block + 8 * kQuadBytes + 64 * quad + next_tile);
  }
  if (v_tile != nullptr) {
    const int64_t step = b * 8 + quad;
    for (int64_t o = step * v_step; o < (step + 1) * v_step; o += 64) __builtin_prefetch(v_tile + o);
  }
}

// Scores of heads [0, kH) against Q8_0 key tiles, as TileScores: per cell and 32-dimension block b,
// s_b = Σ q · (k + 128) - 128 Σ q = Σ q · k exactly, then score = Σ_b s_b · (key scale · query
// scale) in block order. Every term and partial sum of s_b is an integer below 2^24, so float FMAs
// over the widened bytes (this portable form) and vpdpbusd (TileScoresQ8Vnni) give the same s_b,
// and a row's scores are bitwise the same on both, alone or in a block.
template <int kH>
HWY_NOINLINE void TileScoresQ8(const QueryQ8& qq, const uint8_t* HWY_RESTRICT kt, int n, float* HWY_RESTRICT scores,
                               int64_t s_stride, const uint8_t* v_ahead, int64_t v_tile_bytes) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::RebindToSigned<decltype(d)> di;
  constexpr int N = static_cast<int>(hn::MaxLanes(d));
  constexpr int kV = ops::kAttentionKeyTile / N;  // cell groups of a tile
  constexpr int kQuadBytes = 4 * ops::kAttentionKeyTile;
  const int64_t tile_bytes = qq.blocks * ops::kAttentionQ8KeyBlockBytes;
  const int64_t v_step = v_tile_bytes / (qq.blocks * 8);  // V bytes to prefetch per quad of a tile
  const auto byte_mask = hn::Set(du, 0xFFu);
  for (int t0 = 0; t0 < n; t0 += ops::kAttentionKeyTile) {
    const uint8_t* tile = kt + (t0 / ops::kAttentionKeyTile) * tile_bytes;
    const bool more = t0 + ops::kAttentionKeyTile < n;
    const uint8_t* v_tile = v_ahead == nullptr ? nullptr : v_ahead + (t0 / ops::kAttentionKeyTile) * v_tile_bytes;
    for (int v = 0; v < kV; ++v) {  // cells [v * N, v * N + N) of the tile
      hn::Vec<decltype(d)> acc[kH];
      for (int h = 0; h < kH; ++h) acc[h] = hn::Zero(d);
      for (int b = 0; b < qq.blocks; ++b) {
        const uint8_t* block = tile + b * ops::kAttentionQ8KeyBlockBytes;
        const float* key_scales = reinterpret_cast<const float*>(block + 8 * kQuadBytes);
        hn::Vec<decltype(d)> sum[kH];
        for (int h = 0; h < kH; ++h) sum[h] = hn::Set(d, static_cast<float>(qq.corr[h * qq.blocks + b]));
        for (int quad = 0; quad < 8; ++quad) {
          const uint8_t* row = block + quad * kQuadBytes;
          if (v == 0) PrefetchQ8Quad(block, quad, b, more ? tile_bytes : 0, v_tile, v_step);
          // N cells' dwords: byte j of each is dimension 4 * quad + j, plus 128.
          const auto w = hn::LoadU(du, reinterpret_cast<const uint32_t*>(row) + v * N);
          const hn::Vec<decltype(d)> kf[4] = {
              hn::ConvertTo(d, hn::BitCast(di, hn::And(w, byte_mask))),
              hn::ConvertTo(d, hn::BitCast(di, hn::And(hn::ShiftRight<8>(w), byte_mask))),
              hn::ConvertTo(d, hn::BitCast(di, hn::And(hn::ShiftRight<16>(w), byte_mask))),
              hn::ConvertTo(d, hn::BitCast(di, hn::ShiftRight<24>(w)))};
          for (int j = 0; j < 4; ++j)
            for (int h = 0; h < kH; ++h)
              sum[h] = hn::MulAdd(hn::Set(d, qq.qf[h * qq.head_dim + b * 32 + 4 * quad + j]), kf[j], sum[h]);
        }
        const auto ks = hn::LoadU(d, key_scales + v * N);
        for (int h = 0; h < kH; ++h) acc[h] = hn::MulAdd(sum[h], hn::Mul(ks, hn::Set(d, qq.d[h * qq.blocks + b])), acc[h]);
      }
      for (int h = 0; h < kH; ++h) hn::StoreU(acc[h], d, scores + h * s_stride + t0 + v * N);
    }
  }
}

#if DSPARK_HAVE_VNNI
// TileScoresQ8 with vpdpbusd: one instruction multiplies 4 dimensions of 16 cells by 4 query bytes
// (16 multiply-adds per float FMA's 1 per lane) into the exact integer s_b; the same float steps
// after it, so the scores are bitwise those of TileScoresQ8.
template <int kH>
DSPARK_VNNI_ATTR HWY_NOINLINE void TileScoresQ8Vnni(const QueryQ8& qq, const uint8_t* HWY_RESTRICT kt, int n,
                                                    float* HWY_RESTRICT scores, int64_t s_stride, const uint8_t* v_ahead,
                                                    int64_t v_tile_bytes) {
  static_assert(ops::kAttentionKeyTile == 32, "two vectors of 16 cells per tile");
  constexpr int kQuadBytes = 4 * ops::kAttentionKeyTile;
  const int64_t tile_bytes = qq.blocks * ops::kAttentionQ8KeyBlockBytes;
  const int64_t v_step = v_tile_bytes / (qq.blocks * 8);
  for (int t0 = 0; t0 < n; t0 += ops::kAttentionKeyTile) {
    const uint8_t* tile = kt + (t0 / ops::kAttentionKeyTile) * tile_bytes;
    const bool more = t0 + ops::kAttentionKeyTile < n;
    const uint8_t* v_tile = v_ahead == nullptr ? nullptr : v_ahead + (t0 / ops::kAttentionKeyTile) * v_tile_bytes;
    __m512 acc[kH][2];
    for (int h = 0; h < kH; ++h) acc[h][0] = acc[h][1] = _mm512_setzero_ps();
    for (int b = 0; b < qq.blocks; ++b) {
      const uint8_t* block = tile + b * ops::kAttentionQ8KeyBlockBytes;
      const auto* key_scales = reinterpret_cast<const float*>(block + 8 * kQuadBytes);
      __m512i sum[kH][2];
      for (int h = 0; h < kH; ++h) sum[h][0] = sum[h][1] = _mm512_set1_epi32(qq.corr[h * qq.blocks + b]);
      for (int quad = 0; quad < 8; ++quad) {
        const uint8_t* row = block + quad * kQuadBytes;
        PrefetchQ8Quad(block, quad, b, more ? tile_bytes : 0, v_tile, v_step);
        const __m512i w0 = _mm512_loadu_si512(row), w1 = _mm512_loadu_si512(row + 64);
        for (int h = 0; h < kH; ++h) {
          const auto* qw = reinterpret_cast<const int32_t*>(qq.q + h * qq.head_dim + b * 32 + 4 * quad);
          DpbusdBcast(sum[h][0], w0, qw);
          DpbusdBcast(sum[h][1], w1, qw);
        }
      }
      const __m512 ks0 = _mm512_loadu_ps(key_scales), ks1 = _mm512_loadu_ps(key_scales + 16);
      for (int h = 0; h < kH; ++h) {
        const __m512 qd = _mm512_set1_ps(qq.d[h * qq.blocks + b]);
        acc[h][0] = _mm512_fmadd_ps(CvtI32(sum[h][0]), _mm512_mul_ps(ks0, qd), acc[h][0]);
        acc[h][1] = _mm512_fmadd_ps(CvtI32(sum[h][1]), _mm512_mul_ps(ks1, qd), acc[h][1]);
      }
    }
    for (int h = 0; h < kH; ++h) {
      _mm512_storeu_ps(scores + h * s_stride + t0, acc[h][0]);
      _mm512_storeu_ps(scores + h * s_stride + t0 + 16, acc[h][1]);
    }
  }
}
#endif  // DSPARK_HAVE_VNNI

// Whether Q8_0 scores run on vpdpbusd here (the same numbers either way; a test turns it off to
// check that).
inline bool UseQ8ScoresVnni() {
#if DSPARK_HAVE_VNNI
  return !kernels::Q8ScoresVnniDisabledForTest();
#else
  return false;
#endif
}

// pass(std::integral_constant<int, k>(), h0) for the `rest` (1..kMax) heads from h0 in one pass:
// the head count is a template argument chosen at run time.
template <int kMax, class Pass>
HWY_INLINE void PassOfRest(int rest, int h0, const Pass& pass) {
  if constexpr (kMax <= 1) {
    pass(std::integral_constant<int, 1>(), h0);
  } else {
    if (rest == kMax) return pass(std::integral_constant<int, kMax>(), h0);
    PassOfRest<kMax - 1>(rest, h0, pass);
  }
}

// Passes of kH heads over n_q heads, then the rest in one pass too: a decode step of a model with 3
// query heads per KV head (Qwen-style GQA) is all rest, and one head per pass loaded and widened
// every key tile 3 times.
template <int kH, class Pass>
HWY_INLINE void ScorePasses(int n_q, const Pass& pass) {
  int h0 = 0;
  for (; h0 + kH <= n_q; h0 += kH) pass(std::integral_constant<int, kH>(), h0);
  if (h0 < n_q) PassOfRest<kH - 1>(n_q - h0, h0, pass);
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

// Scratch floats: the scaled queries [n_q][head_dim], the scores [n_q][n_pad], and for Q8_0 keys
// the quantised queries (int8 [n_q][head_dim], then per head and block a scale and a correction).
inline int64_t AttentionScratchImpl(int n_q, int n, int head_dim) {
  const int64_t n_pad = (n + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile * ops::kAttentionKeyTile;
  const int64_t blocks = (head_dim + ops::kAttentionQ8Block - 1) / ops::kAttentionQ8Block;
  return static_cast<int64_t>(n_q) * head_dim + static_cast<int64_t>(n_q) * n_pad +
         static_cast<int64_t>(n_q) * ((head_dim + 3) / 4 + 2 * blocks);
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
  // With several rows' heads, the first score pass also prefetches V, tile by tile as it reads K,
  // so the value pass finds it in cache: a pass finds a layer's K/V evicted by the weights streamed
  // since the layer last ran (kernels_bench AttentionCold times it). A decode row's pass over K is
  // too short to hide the prefetches, so a single row does without them.
  const auto* v_ahead = n_q >= kPrefetchValuesHeads ? reinterpret_cast<const uint8_t*>(v) : nullptr;
  const int64_t v_tile_bytes = static_cast<int64_t>(ops::kAttentionKeyTile) * ValueRowBytes<T>(v_stride);
  if constexpr (std::is_same_v<T, int8_t>) {
    // Q8_0 keys: the queries quantised per head and 32 dimensions (QueryQ8), as integers and as the
    // same integers in float (qs, which only the scores read).
    QueryQ8 qq;
    qq.head_dim = head_dim;
    qq.blocks = head_dim / ops::kAttentionQ8Block;
    auto* q8 = reinterpret_cast<int8_t*>(sc + static_cast<int64_t>(n_q) * n_pad);
    auto* qd = reinterpret_cast<float*>(q8 + static_cast<int64_t>(n_q) * head_dim);
    auto* qc = reinterpret_cast<int32_t*>(qd + static_cast<int64_t>(n_q) * qq.blocks);
    for (int h = 0; h < n_q; ++h)
      for (int b = 0; b < qq.blocks; ++b) {
        const int64_t o = static_cast<int64_t>(h) * head_dim + b * ops::kAttentionQ8Block;
        qd[h * qq.blocks + b] = QuantizeQ8Block(qs + o, q8 + o);
        int32_t sum = 0;
        for (int i = 0; i < ops::kAttentionQ8Block; ++i) {
          sum += q8[o + i];
          qs[o + i] = static_cast<float>(q8[o + i]);
        }
        qc[h * qq.blocks + b] = -128 * sum;
      }
    qq.q = q8;
    qq.qf = qs;
    qq.d = qd;
    qq.corr = qc;
    const auto* keys = reinterpret_cast<const uint8_t*>(kt);
    if (UseQ8ScoresVnni()) {
#if DSPARK_HAVE_VNNI
      // 2 x kH int32 and 2 x kH float accumulators, 2 key vectors and their scales: 6 heads fill 28
      // of the 32 registers.
      ScorePasses<6>(n_q, [&](auto heads, int h0) {
        TileScoresQ8Vnni<decltype(heads)::value>(qq.Heads(h0), keys, n, sc + h0 * n_pad, n_pad,
                                                 h0 == 0 ? v_ahead : nullptr, v_tile_bytes);
      });
#endif
    } else {
      // kH float sums and accumulators plus 4 widened key vectors: half the registers on AVX2.
      ScorePasses<N >= 16 ? 12 : 4>(n_q, [&](auto heads, int h0) {
        TileScoresQ8<decltype(heads)::value>(qq.Heads(h0), keys, n, sc + h0 * n_pad, n_pad,
                                             h0 == 0 ? v_ahead : nullptr, v_tile_bytes);
      });
    }
  } else {
    ScorePasses<kH>(n_q, [&](auto heads, int h0) {
      TileScores<decltype(heads)::value, T>(qs + h0 * head_dim, head_dim, kt, n, sc + h0 * n_pad, n_pad,
                                            h0 == 0 ? v_ahead : nullptr, v_tile_bytes);
    });
  }

  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int h = 0; h < n_q; ++h) {
    float* sh = sc + h * n_pad;
    const float sink = sinks ? sinks[h % heads_per_row] : kNegInf;
    if (shared == n) {
      SoftmaxWithExtra(sh, n, sink);
      continue;
    }
    // The softmax runs over the row's visible cells packed behind the shared prefix, then scatters
    // back (masked cells get 0). A row's visible cells need not be contiguous (a token tree's leaf
    // sees its ancestors and itself, not the chain between them): packed, each cell's term lands in
    // the vector lane it has when the row is decoded alone, so the softmax sums, and the row's
    // result, are bitwise those of plain decoding. Masked cells in place would add only zeros, but
    // shift the lanes of the cells after them.
    const uint8_t* vis = visible + static_cast<int64_t>(h / heads_per_row) * (n - shared);
    int m = shared;
    for (int t = shared; t < n; ++t)
      if (vis[t - shared]) sh[m++] = sh[t];
    SoftmaxWithExtra(sh, m, sink);
    for (int t = n - 1; t >= shared; --t) sh[t] = vis[t - shared] ? sh[--m] : 0.0f;
  }

  // Values, up to 4 heads per pass (4 x 2 accumulators + loads fit the 16 registers of AVX2), 6
  // with AVX-512 (6 x 4 accumulators of a 64-wide head + its 4 value vectors fit 32): each pass
  // reads and widens every V row once. Q8_0 values cost 3 instructions a vector to widen and
  // scale, as much as a pass's multiply-adds, so with AVX-512 a pass takes 12 heads over narrower
  // column blocks (12 x 2 accumulators): a 5-row verification block of a 2-heads-per-KV-head model
  // widens each value once instead of twice. Every output is one chain over the cells in order
  // whatever the grouping, so the results are the same bitwise.
  constexpr int kValueHeads = N >= 16 ? (std::is_same_v<T, int8_t> ? 12 : 6) : 4;
  for (int g0 = 0; g0 < n_q; g0 += kValueHeads) {
    float* o[kValueHeads];
    const int cnt = std::min(kValueHeads, n_q - g0);
    for (int j = 0; j < cnt; ++j)
      o[j] = out + ((g0 + j) / heads_per_row) * out_stride + ((g0 + j) % heads_per_row) * head_dim_v;
    const float* p = sc + g0 * n_pad;
    PassOfRest<kValueHeads>(cnt, 0, [&](auto heads, int) {
      GroupValues<decltype(heads)::value, T>(p, n_pad, head_dim_v, v, v_stride, n, o);
    });
  }
}

inline void AttentionImpl(const float* q, int64_t q_stride, int n_q, int heads_per_row, int head_dim, int head_dim_v,
                          DType kv_type, const void* kt, const void* v, int64_t v_stride, int n, int shared,
                          const uint8_t* visible, float scale, const float* sinks, float* scratch, float* out,
                          int64_t out_stride) {
  if (kv_type == DType::kQ8_0) {
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
