// ops::Attention on every attainable Highway target against the double-precision reference run per
// row over the cells that row sees: one row and blocks of rows, groups of 1..9 heads, head sizes that
// are and are not multiples of the vector width, partial key tiles, a shared prefix with arbitrary
// visibility after it, attention sinks, F32, F16 and Q8_0 keys/values, a row that sees nothing and an
// empty context. And the property exact speculation rests on: a row's output is bitwise the same
// computed alone or in a block with other rows.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kv_quant.h"
#include "kernels/ops.h"
#include "kernels/test_hooks.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/test_util.h"
#include "util/fp16.h"

namespace dspark {
namespace {

// Keys of n cells ([n][head_dim], row-major) in the tiled layout of ops::Attention.
template <typename T>
std::vector<T> TileKeys(const std::vector<T>& k, int n, int head_dim) {
  const int tiles = (n + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile;
  std::vector<T> kt(static_cast<size_t>(tiles) * ops::kAttentionKeyTile * head_dim, T{});
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < head_dim; ++i)
      kt[(static_cast<size_t>(t / ops::kAttentionKeyTile) * head_dim + i) * ops::kAttentionKeyTile +
         t % ops::kAttentionKeyTile] = k[static_cast<size_t>(t) * head_dim + i];
  return kt;
}

// Q8_0 blocks as the cache stores them: d = max|x| / 127, q = round(x / d); x8 gets q * d.
float QuantizeBlock(const float* x, int8_t* q, int q_stride, float* x8) {
  float amax = 0.f;
  for (int i = 0; i < ops::kAttentionQ8Block; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
  for (int i = 0; i < ops::kAttentionQ8Block; ++i) {
    q[i * q_stride] = static_cast<int8_t>(std::lround(x[i] * id));
    x8[i] = static_cast<float>(q[i * q_stride]) * d;
  }
  return d;
}

// Keys of n cells ([n][head_dim]) in the Q8_0 tile layout of ops::Attention (per 32-dimension
// block [8 quads][32 cells][4] bytes q + 128, then the cells' scales); k8: their values.
std::vector<uint8_t> TileKeysQ8(const std::vector<float>& k, int n, int head_dim, std::vector<float>& k8) {
  const int tiles = (n + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile;
  const int blocks = head_dim / ops::kAttentionQ8Block;
  std::vector<uint8_t> kt(static_cast<size_t>(tiles) * blocks * ops::kAttentionQ8KeyBlockBytes, 0);
  k8.assign(k.size(), 0.f);
  for (int t = 0; t < n; ++t)
    for (int b = 0; b < blocks; ++b) {
      uint8_t* block = kt.data() + (static_cast<size_t>(t / ops::kAttentionKeyTile) * blocks + b) *
                                       ops::kAttentionQ8KeyBlockBytes;
      const size_t x = static_cast<size_t>(t) * head_dim + b * ops::kAttentionQ8Block;
      int8_t q[ops::kAttentionQ8Block];
      const float d = QuantizeBlock(k.data() + x, q, 1, k8.data() + x);
      const int cell = t % ops::kAttentionKeyTile;
      for (int i = 0; i < ops::kAttentionQ8Block; ++i)
        block[i / 4 * 4 * ops::kAttentionKeyTile + 4 * cell + i % 4] = static_cast<uint8_t>(q[i] + 128);
      std::memcpy(block + ops::kAttentionQ8Block * ops::kAttentionKeyTile + 4 * cell, &d, 4);
    }
  return kt;
}

// The queries as attention over Q8_0 keys sees them: each head's scaled query rounded to Q8_0 per
// 32 dimensions, then unscaled again (the reference applies the scale itself).
std::vector<float> QueriesQ8(const std::vector<float>& q, int head_dim, float scale) {
  std::vector<float> out(q.size()), scaled(ops::kAttentionQ8Block), deq(ops::kAttentionQ8Block);
  int8_t qi[ops::kAttentionQ8Block];
  for (size_t o = 0; o + ops::kAttentionQ8Block <= q.size(); o += ops::kAttentionQ8Block) {
    for (int i = 0; i < ops::kAttentionQ8Block; ++i) scaled[i] = q[o + i] * scale;
    QuantizeBlock(scaled.data(), qi, 1, deq.data());
    for (int i = 0; i < ops::kAttentionQ8Block; ++i) out[o + i] = deq[i] / scale;
  }
  return out;
}

// Values of n cells ([n][head_dim_v]) as Q8_0 rows {f32 d, 32 int8} per block; v8: their values.
std::vector<uint8_t> RowsQ8(const std::vector<float>& v, int n, int head_dim_v, std::vector<float>& v8) {
  const int blocks = head_dim_v / ops::kAttentionQ8Block;
  std::vector<uint8_t> out(static_cast<size_t>(n) * blocks * ops::kAttentionQ8ValueBlockBytes);
  v8.assign(v.size(), 0.f);
  for (int t = 0; t < n; ++t)
    for (int b = 0; b < blocks; ++b) {
      uint8_t* block = out.data() + (static_cast<size_t>(t) * blocks + b) * ops::kAttentionQ8ValueBlockBytes;
      const size_t x = static_cast<size_t>(t) * head_dim_v + b * ops::kAttentionQ8Block;
      const float d = QuantizeBlock(v.data() + x, reinterpret_cast<int8_t*>(block + 4), 1, v8.data() + x);
      std::memcpy(block, &d, 4);
    }
  return out;
}

struct Case {
  int rows, heads_per_row, head_dim, head_dim_v, n, shared;
  bool sinks = false;
};

struct Data {
  Case c;
  std::vector<float> q, k, v, kr, vr, sink_logits;
  std::vector<uint16_t> k16, v16;
  std::vector<float> kt, ktr;
  std::vector<uint16_t> kt16;
  std::vector<uint8_t> kt8, v8;  // Q8_0 layouts (head sizes that are multiples of 32)
  std::vector<float> kr8, vr8;   // the values they hold
  std::vector<float> qr8;        // the queries as scores over Q8_0 keys round them
  std::vector<uint8_t> visible;  // [rows][n - shared]
  bool q8() const { return c.head_dim % ops::kAttentionQ8Block == 0 && c.head_dim_v % ops::kAttentionQ8Block == 0; }
  std::vector<DType> Types() const {
    if (q8()) return {DType::kF32, DType::kF16, DType::kQ8_0};
    return {DType::kF32, DType::kF16};
  }
  explicit Data(const Case& cs) : c(cs) {
    const int n_q = c.rows * c.heads_per_row;
    k = kernels::RandomVector(static_cast<int64_t>(c.n) * c.head_dim + 1, 11 + c.n);
    v = kernels::RandomVector(static_cast<int64_t>(c.n) * c.head_dim_v + 1, 12 + c.n);
    q = kernels::RandomVector(static_cast<int64_t>(n_q) * c.head_dim, 13 + c.n, 2.0f);  // sharp softmax
    sink_logits = kernels::RandomVector(c.heads_per_row, 14 + c.n, 3.0f);
    // F16 cache: the reference sees the same half-rounded values, so the tolerance stays tight.
    k16.resize(k.size());
    v16.resize(v.size());
    kr.resize(k.size());
    vr.resize(v.size());
    for (size_t i = 0; i < k.size(); ++i) kr[i] = F16ToF32(k16[i] = F32ToF16(k[i]));
    for (size_t i = 0; i < v.size(); ++i) vr[i] = F16ToF32(v16[i] = F32ToF16(v[i]));
    kt = TileKeys(k, c.n, c.head_dim);
    kt16 = TileKeys(k16, c.n, c.head_dim);
    if (q8()) {
      kt8 = TileKeysQ8(k, c.n, c.head_dim, kr8);
      v8 = RowsQ8(v, c.n, c.head_dim_v, vr8);
      qr8 = QueriesQ8(q, c.head_dim, Scale());
    }
    std::mt19937 rng(c.n + c.rows);
    visible.assign(static_cast<size_t>(c.rows) * (c.n - c.shared), 1);
    for (auto& x : visible) x = (rng() % 3) != 0;
    if (c.shared == 0 && c.rows > 1)  // the last row sees nothing: zeros, not NaN
      std::fill(visible.end() - c.n, visible.end(), 0);
  }
  bool Sees(int r, int t) const { return t < c.shared || visible[static_cast<size_t>(r) * (c.n - c.shared) + t - c.shared]; }
  const float* Sinks() const { return c.sinks ? sink_logits.data() : nullptr; }
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }
  // ops::Attention over cells [0, n_used) for `rows`, as a caller holding only these rows passes them.
  std::vector<float> Run(DType type, const std::vector<int>& rows, int n_used) const {
    const int hpr = c.heads_per_row;
    const int shared = std::min(c.shared, n_used);
    std::vector<float> qs;
    std::vector<uint8_t> vis;
    for (int r : rows) {
      qs.insert(qs.end(), q.begin() + static_cast<int64_t>(r) * hpr * c.head_dim,
                q.begin() + static_cast<int64_t>(r + 1) * hpr * c.head_dim);
      for (int t = shared; t < n_used; ++t) vis.push_back(Sees(r, t));
    }
    const int n_q = static_cast<int>(rows.size()) * hpr;
    std::vector<float> scratch(ops::AttentionScratch(n_q, n_used, c.head_dim));
    std::vector<float> out(static_cast<size_t>(n_q) * c.head_dim_v, -999.f);
    const void* keys = type == DType::kF16 ? static_cast<const void*>(kt16.data())
                       : type == DType::kQ8_0 ? static_cast<const void*>(kt8.data())
                                              : static_cast<const void*>(kt.data());
    const void* values = type == DType::kF16 ? static_cast<const void*>(v16.data())
                         : type == DType::kQ8_0 ? static_cast<const void*>(v8.data())
                                                : static_cast<const void*>(v.data());
    ops::Attention(qs.data(), static_cast<int64_t>(hpr) * c.head_dim, n_q, hpr, c.head_dim, c.head_dim_v, type, keys,
                   values, c.head_dim_v, n_used, shared,
                   shared == n_used ? nullptr : vis.data(), Scale(), Sinks(), scratch.data(), out.data(),
                   static_cast<int64_t>(hpr) * c.head_dim_v);
    return out;
  }
};

const Case kCases[] = {{1, 2, 128, 128, 520, 520},  {8, 2, 128, 128, 520, 512}, {1, 1, 64, 64, 1, 1},
                       {3, 3, 64, 64, 45, 40},      {11, 2, 80, 80, 19, 0},     {2, 6, 16, 24, 7, 2, true},
                       {2, 1, 7, 9, 5, 5},          {4, 9, 24, 40, 33, 30},     {5, 3, 64, 64, 600, 590, true},
                       {1, 4, 16, 16, 64, 64, true},
                       // 27 heads (a 9-row block with 3 heads per K/V head) and 80: several passes.
                       {9, 3, 64, 64, 300, 292},    {40, 2, 128, 64, 77, 37}};

TEST(Attention, MatchesReferenceOnEveryTarget) {
  for (const Case& c : kCases) {
    const Data data(c);
    const int hpr = c.heads_per_row;
    std::vector<float> want(static_cast<size_t>(c.rows) * hpr * c.head_dim_v, 0.f), want16(want.size(), 0.f),
        want8(want.size(), 0.f);
    for (int r = 0; r < c.rows; ++r) {
      std::vector<int32_t> seen;
      for (int t = 0; t < c.n; ++t)
        if (data.Sees(r, t)) seen.push_back(t);
      if (seen.empty()) continue;
      const int64_t qo = static_cast<int64_t>(r) * hpr;
      ref::AttentionGroup(data.q.data() + qo * c.head_dim, hpr, c.head_dim, c.head_dim_v, data.k.data(), c.head_dim,
                          data.v.data(), c.head_dim_v, seen.data(), static_cast<int>(seen.size()), data.Scale(),
                          data.Sinks(), want.data() + qo * c.head_dim_v);
      ref::AttentionGroup(data.q.data() + qo * c.head_dim, hpr, c.head_dim, c.head_dim_v, data.kr.data(), c.head_dim,
                          data.vr.data(), c.head_dim_v, seen.data(), static_cast<int>(seen.size()), data.Scale(),
                          data.Sinks(), want16.data() + qo * c.head_dim_v);
      if (data.q8())
        ref::AttentionGroup(data.qr8.data() + qo * c.head_dim, hpr, c.head_dim, c.head_dim_v, data.kr8.data(),
                            c.head_dim, data.vr8.data(), c.head_dim_v, seen.data(), static_cast<int>(seen.size()),
                            data.Scale(), data.Sinks(), want8.data() + qo * c.head_dim_v);
    }
    std::vector<int> all(c.rows);
    for (int r = 0; r < c.rows; ++r) all[r] = r;
    kernels::ForEachTarget([&](const std::string& target) {
      for (const DType type : data.Types()) {
        const std::vector<float> got = data.Run(type, all, c.n);
        const std::vector<float>& w = type == DType::kF16 ? want16 : type == DType::kQ8_0 ? want8 : want;
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], w[i], 2e-5 * std::max(1.0f, std::fabs(w[i])))
              << target << " " << DTypeName(type) << " rows=" << c.rows << " hpr=" << hpr << " hd=" << c.head_dim
              << " n=" << c.n << " i=" << i;
      }
    });
  }
}

TEST(Attention, RowAloneEqualsRowInBlockBitwise) {
  for (const Case& c : kCases) {
    if (c.rows < 2) continue;
    const Data data(c);
    const size_t per_row = static_cast<size_t>(c.heads_per_row) * c.head_dim_v;
    std::vector<int> all(c.rows);
    for (int r = 0; r < c.rows; ++r) all[r] = r;
    kernels::ForEachTarget([&](const std::string& target) {
      for (const DType type : data.Types()) {
        const std::vector<float> block = data.Run(type, all, c.n);
        for (int r = 0; r < c.rows; ++r) {
          // Alone, the row holds only the cells up to the last one it sees (as in decode).
          int last = 0;
          for (int t = 0; t < c.n; ++t)
            if (data.Sees(r, t)) last = t + 1;
          if (last == 0) continue;
          const std::vector<float> alone = data.Run(type, {r}, last);
          ASSERT_EQ(0, std::memcmp(alone.data(), block.data() + r * per_row, per_row * sizeof(float)))
              << target << " " << DTypeName(type) << " rows=" << c.rows << " row " << r;
        }
      }
    });
  }
}

// Scores over Q8_0 keys are exact integer sums scaled in one fixed order, so vpdpbusd (AVX-512
// VNNI) and the portable float path give bitwise the same attention on the same target.
TEST(Attention, Q8ScoresVnniEqualsPortableBitwise) {
  int compared = 0;
  for (const Case& c : kCases) {
    const Data data(c);
    if (!data.q8()) continue;
    std::vector<int> all(c.rows);
    for (int r = 0; r < c.rows; ++r) all[r] = r;
    const std::vector<float> vnni = data.Run(DType::kQ8_0, all, c.n);
    kernels::DisableQ8ScoresVnniForTest(true);
    const std::vector<float> portable = data.Run(DType::kQ8_0, all, c.n);
    kernels::DisableQ8ScoresVnniForTest(false);
    ASSERT_EQ(0, std::memcmp(vnni.data(), portable.data(), vnni.size() * sizeof(float)))
        << "rows=" << c.rows << " hpr=" << c.heads_per_row << " hd=" << c.head_dim << " n=" << c.n;
    ++compared;
  }
  EXPECT_GT(compared, 3);
}

TEST(Attention, Q8RoundingIsLroundBitForBit) {
  // Every float step around the halves and integers of [-130, 130], and a dense sweep between.
  std::vector<float> values;
  for (int k = -260; k <= 260; ++k) {
    const float half = 0.5f * static_cast<float>(k);
    float below = half, above = half;
    for (int s = 0; s < 3; ++s) {
      values.push_back(below);
      values.push_back(above);
      below = std::nextafter(below, -1000.f);
      above = std::nextafter(above, 1000.f);
    }
  }
  for (float v = -130.f; v <= 130.f; v += 0.0137f) values.push_back(v);
  for (float v : values) ASSERT_EQ(RoundHalfAway(v), std::lround(v)) << v;
}

TEST(Attention, EmptyContextGivesZeros) {
  const std::vector<float> q(2 * 16, 1.f), k(16), v(16);
  std::vector<float> scratch(ops::AttentionScratch(2, 0, 16) + 1), out(2 * 16, 5.f);
  ops::Attention(q.data(), 32, 2, 2, 16, 16, DType::kF32, k.data(), v.data(), 16, 0, 0, nullptr, 0.25f, nullptr,
                 scratch.data(), out.data(), 32);
  for (float x : out) EXPECT_EQ(x, 0.f);
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// ops::ConvertToF16 rounds exactly like the scalar converter (round to nearest even), including
// the tail past the last full vector, subnormals, overflow to infinity and NaN.
TEST(ConvertToF16, MatchesScalarConversionOnEveryTarget) {
  std::vector<float> x = kernels::RandomVector(1031, 9, 3.0f);
  x[0] = 65520.f;   // rounds to infinity
  x[1] = 1e-7f;     // subnormal half
  x[2] = -0.0f;
  x[3] = std::nanf("");
  x[4] = 2049.f;    // ties to even
  kernels::ForEachTarget([&](const std::string& target) {
    for (int64_t n : {0, 1, 7, 16, 17, 1031}) {
      std::vector<uint16_t> got(n + 1, 0xBEEF);
      ops::ConvertToF16(x.data(), n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        if (std::isnan(x[i])) {
          EXPECT_TRUE(std::isnan(F16ToF32(got[i]))) << target;
        } else {
          ASSERT_EQ(got[i], F32ToF16(x[i])) << target << " i=" << i << " x=" << x[i];
        }
      }
      EXPECT_EQ(got[n], 0xBEEF) << target << ": wrote past n=" << n;
    }
  });
}

}  // namespace
}  // namespace dspark
