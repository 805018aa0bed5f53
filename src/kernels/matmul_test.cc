// MatMul on every weight type and every attainable Highway target against ref::MatMulRef (same
// quantised activations, exact integer block sums), plus a loose check against the float product
// with dequantised weights, which catches errors shared by kernel and reference.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/hwy_targets.h"
#include "hwy/targets.h"

#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/quant_ref.h"
#include "kernels/scratch.h"
#include "kernels/test_hooks.h"
#include "util/fp16.h"
#include "kernels/test_util.h"
#include "kernels/tolerance.h"
#include "util/thread_pool.h"

namespace dspark {
namespace {

struct Weights {
  ops::WeightView view;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> packed_bytes;
  // Packs the weights into the layout MatMul reads on this CPU (view.packed, 64-byte aligned in
  // packed_bytes, whose padding starts as `fill`); false where the type has none here.
  bool Pack(ThreadPool& pool, uint8_t fill = 0) {
    const size_t n = ops::PackedBytes(view.type, view.rows, view.cols);
    if (n == 0) return false;
    packed_bytes.assign(n + 64, fill);
    auto* dst = reinterpret_cast<void*>(kernels::RoundUp(reinterpret_cast<uintptr_t>(packed_bytes.data()), 64));
    ops::PackWeights(view, dst, pool);
    view.packed = dst;
    return true;
  }
};

Weights MakeWeights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  Weights w;
  const size_t rb = RowBytes(t, cols);
  w.bytes.resize(rb * rows);
  const auto f = kernels::RandomVector(rows * cols, seed, 0.05f);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(ops::QuantizeRow(t, f.data() + r * cols, w.bytes.data() + r * rb, cols));
  w.view = {w.bytes.data(), t, rows, cols};
  return w;
}

void ExpectMatchesRef(const ops::WeightView& w, const std::vector<float>& x, int64_t m,
                      ThreadPool& pool, const std::string& target) {
  std::vector<double> ref(m * w.rows), bound(m * w.rows);
  ref::MatMulRef(w, x.data(), m, ref.data(), bound.data());
  std::vector<float> y(m * w.rows, -12345.f);
  ops::MatMul(w, x.data(), m, y.data(), pool);
  const DType act = ref::ActivationType(w.type);
  const bool quant = act != DType::kF32 && act != DType::kBF16;  // BF16: exact products, as F32
  const double tol = quant ? kernels::kMatMulQuantRelTol : kernels::kMatMulFloatRelTol;
  int bad = 0;
  for (int64_t i = 0; i < m * w.rows && bad < 5; ++i) {
    if (!(std::fabs(y[i] - ref[i]) <= tol * bound[i] + 1e-30)) {
      ++bad;
      ADD_FAILURE() << target << " " << DTypeName(w.type) << " rows=" << w.rows
                    << " cols=" << w.cols << " m=" << m << " at [" << i / w.rows << ", "
                    << i % w.rows << "]: got " << y[i] << " want " << ref[i]
                    << " (bound " << bound[i] << ")";
    }
  }
}

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                               DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                               DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

class MatMulTypes : public ::testing::TestWithParam<DType> {};

TEST_P(MatMulTypes, MatchesReferenceOnEveryTarget) {
  const DType t = GetParam();
  ThreadPool pool(2);
  struct Shape {
    int64_t rows, cols;
  };
  // Odd row counts (tile tails), cols multiples of 256 that are and are not multiples of 512.
  for (const Shape s : {Shape{37, 256}, Shape{9, 768}, Shape{64, 1024}}) {
    const Weights w = MakeWeights(t, s.rows, s.cols, 7 + s.rows);
    for (int64_t m : {1, 2, 3, 7, 8, 16, 33}) {
      const auto x = kernels::RandomVector(m * s.cols, 100 + m);
      kernels::ForEachTarget([&](const std::string& target) {
        ExpectMatchesRef(w.view, x, m, pool, target);
      });
    }
  }
}

// Rows of 1, 3 and 5 blocks (widths that are not a multiple of 64 for 32-element blocks, odd
// super-block counts for K-quants): the padding and tail paths of the kernels.
TEST_P(MatMulTypes, OddBlockCounts) {
  const DType t = GetParam();
  ThreadPool pool(2);
  const int64_t block = Info(t).block_size;
  for (int64_t cols : {block, 3 * block, 5 * block}) {
    const Weights w = MakeWeights(t, 11, cols, 21 + cols);
    for (int64_t m : {1, 2, 5, 17}) {
      const auto x = kernels::RandomVector(m * cols, 300 + m);
      kernels::ForEachTarget([&](const std::string& target) { ExpectMatchesRef(w.view, x, m, pool, target); });
    }
  }
}

TEST_P(MatMulTypes, PrefillSizedBatch) {
  const DType t = GetParam();
  ThreadPool pool(2);
  const Weights w = MakeWeights(t, 19, 512, 99);
  const int64_t m = 515;  // 32 full 16-row tiles + a tail of 3
  const auto x = kernels::RandomVector(m * 512, 5);
  kernels::ForEachTarget([&](const std::string& target) { ExpectMatchesRef(w.view, x, m, pool, target); });
}

TEST_P(MatMulTypes, CloseToDequantisedFloatProduct) {
  const DType t = GetParam();
  ThreadPool pool(1);
  const int64_t rows = 21, cols = 512, m = 5;
  const Weights w = MakeWeights(t, rows, cols, 3);
  const auto x = kernels::RandomVector(m * cols, 11);
  std::vector<float> wf(cols), y(m * rows);
  ops::MatMul(w.view, x.data(), m, y.data(), pool);
  for (int64_t r = 0; r < rows; ++r) {
    ops::DequantizeRow(t, w.bytes.data() + r * RowBytes(t, cols), wf.data(), cols);
    for (int64_t j = 0; j < m; ++j) {
      double dot = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        dot += static_cast<double>(wf[k]) * x[j * cols + k];
        mag += std::fabs(static_cast<double>(wf[k]) * x[j * cols + k]);
      }
      // Activation quantisation to 8 bits: relative error ~ 1/127 of each term at worst.
      EXPECT_NEAR(y[j * rows + r], dot, 0.02 * mag) << DTypeName(t) << " r=" << r << " j=" << j;
    }
  }
}

// Weights in the packed layout (ops::PackWeights) give the reference's results for every m (the
// kernels' row chunks of 8 and column tiles) and row counts that are not multiples of
// the 16-row groups. Targets without a packed kernel must ignore `packed` and read the rows.
TEST_P(MatMulTypes, PackedLayoutMatchesReference) {
  const DType t = GetParam();
  ThreadPool pool(2);
  const int64_t block = Info(t).block_size;
  struct Shape {
    int64_t rows, cols;
  };
  int packed_shapes = 0;
  const bool is_float = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
  std::vector<Shape> shapes = {Shape{1, block}, Shape{15, 3 * block}, Shape{16, 17 * block}, Shape{37, 1024},
                               Shape{64, 33 * block}};
  // 963 rows of floats: 61 groups, so each thread's range holds several blocks of 12 groups and the
  // first chunk of rows over a block prefetches the next one (matmul_float-inl.h); a partial block ends it.
  if (is_float) shapes.push_back(Shape{963, 72});
  for (const Shape s : shapes) {
    Weights w = MakeWeights(t, s.rows, s.cols, 40 + s.rows);
    if (w.Pack(pool, 0xCD)) ++packed_shapes;  // garbage padding: the kernel must not need zeros
    // Every row-chunk width of the kernels (1..8; 9-12 in one pass for Q4_K), chunk tails (13), and
    // m past two chunks.
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 33}) {
      const auto x = kernels::RandomVector(m * s.cols, 500 + m);
      for (const bool vex_off : {false, true}) {  // AVX2 with and without AVX-VNNI
        kernels::DisableAvxVnniForTest(vex_off);
        kernels::ForEachTarget([&](const std::string& target) {
          ExpectMatchesRef(w.view, x, m, pool, target + (vex_off ? " (AVX-VNNI off)" : ""));
        });
      }
      kernels::DisableAvxVnniForTest(false);
    }
  }
  // The layout exists for float types everywhere, and for every quantised type on AVX-512 VNNI
  // CPUs; elsewhere MatMul reads the rows.
  if (is_float || (hwy::SupportedTargets() & HWY_AVX3_DL) != 0) {
    EXPECT_EQ(packed_shapes, static_cast<int>(shapes.size()));
  }
}

// Exact speculation needs a row's logits to be bitwise the same whether the row is decoded alone
// (m = 1) or verified in a block: with packed weights every output is one accumulation chain per
// row, whatever m (a verification block, a batch of sequences) and the row-chunk it lands in. Float layouts
// on every target; the quantised ones where this CPU has them (its best target).
TEST(MatMul, PackedRowAloneEqualsRowInBlockBitwise) {
  ThreadPool pool(2);
  const int64_t rows = 37, cols = 4 * 256;
  int checked = 0;
  for (const DType t : kAllTypes) {
    const size_t bytes = ops::PackedBytes(t, rows, cols);
    if (bytes == 0) continue;  // no packed layout for this type on this CPU
    ++checked;
    Weights w = MakeWeights(t, rows, cols, 77);
    w.Pack(pool);
    for (int64_t m : {2, 9, 16, 37}) {
      const auto x = kernels::RandomVector(m * cols, 900 + m);
      const auto check = [&](const std::string& target) {
        std::vector<float> block(m * rows), alone(rows);
        ops::MatMul(w.view, x.data(), m, block.data(), pool);
        for (int64_t j = 0; j < m; ++j) {
          ops::MatMul(w.view, x.data() + j * cols, 1, alone.data(), pool);
          ASSERT_EQ(0, std::memcmp(alone.data(), block.data() + j * rows, rows * sizeof(float)))
              << target << " " << DTypeName(t) << " m=" << m << " row " << j;
        }
      };
      // Every target that reads the packed layout (the float ones everywhere; the quantised ones on
      // AVX-512 VNNI, AVX3 and AVX2).
      kernels::ForEachTarget([&](const std::string& target) {
        if (ops::PackedBytes(t, rows, cols) > 0) check(target);
      });
    }
  }
  EXPECT_GE(checked, 3);  // the float layouts exist on every CPU
}

// The packed quantised kernels of AVX-512 VNNI (vpdpbusd) and of AVX2 / AVX3 (vpmaddubsw) form the
// same integer sums and the same float steps: a model gives the same outputs on either CPU.
TEST(MatMul, PackedQuantisedKernelsAgreeBitwiseAcrossTargets) {
  ThreadPool pool(2);
  const int64_t rows = 37, cols = 2 * 256;
  int compared = 0;
  for (const DType t : kAllTypes) {
    if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) continue;
    const size_t bytes = ops::PackedBytes(t, rows, cols);
    if (bytes == 0) continue;
    Weights w = MakeWeights(t, rows, cols, 5);
    w.Pack(pool);
    for (int64_t m : {1, 3, 9}) {
      const auto x = kernels::RandomVector(m * cols, 40 + m);
      std::vector<float> first;
      std::string first_target;
      // AVX2 with and without AVX-VNNI (vpmaddubsw on CPUs that lack it).
      for (const bool vex_off : {false, true}) {
        kernels::DisableAvxVnniForTest(vex_off);
        kernels::ForEachTarget([&](const std::string& target) {
          if (ops::PackedBytes(t, rows, cols) == 0) return;  // this target reads the rows
          std::vector<float> y(m * rows);
          ops::MatMul(w.view, x.data(), m, y.data(), pool);
          if (first.empty()) {
            first = y;
            first_target = target;
            return;
          }
          ++compared;
          ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
              << DTypeName(t) << " m=" << m << ": " << target << (vex_off ? " (AVX-VNNI off)" : "") << " differs from "
              << first_target;
        });
      }
      kernels::DisableAvxVnniForTest(false);
    }
  }
  if ((hwy::SupportedTargets() & HWY_AVX2) != 0 && (hwy::SupportedTargets() & HWY_AVX3_DL) != 0) {
    EXPECT_GT(compared, 0);
  }
}

// The largest operands every quantised format can hold (every quant bit set, scales at their
// largest) against activations that all quantise to the same extreme: the AVX2 kernels keep
// several byte-product sums in int16 lanes (ShortDots in matmul_packed_simd-inl.h), exact only
// within the bound on operand size; one Dot too many, or a format whose quants are too wide for the
// sum it uses, wraps a lane and misses the exact reference by far.
template <typename Block>
void SetBlockScales(std::vector<uint8_t>& bytes, f16_bits d) {
  auto* blocks = reinterpret_cast<Block*>(bytes.data());
  for (size_t b = 0; b < bytes.size() / sizeof(Block); ++b) {
    blocks[b].d = d;
    if constexpr (requires { blocks[b].dmin; }) blocks[b].dmin = 0;
    if constexpr (requires { blocks[b].m; }) blocks[b].m = 0;
  }
}

TEST(MatMul, QuantisedSumsExactAtLargestOperands) {
  ThreadPool pool(2);
  const int64_t rows = 37, cols = 4 * 256;
  const f16_bits d = F32ToF16(1.0f / 256);
  for (const DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ4_K,
                        DType::kQ5_K, DType::kQ6_K}) {
    Weights w;
    w.bytes.assign(RowBytes(t, cols) * rows, 0xFF);
    switch (t) {
      case DType::kQ4_0: SetBlockScales<BlockQ4_0>(w.bytes, d); break;
      case DType::kQ4_1: SetBlockScales<BlockQ4_1>(w.bytes, d); break;
      case DType::kQ5_0: SetBlockScales<BlockQ5_0>(w.bytes, d); break;
      case DType::kQ5_1: SetBlockScales<BlockQ5_1>(w.bytes, d); break;
      case DType::kQ8_0: SetBlockScales<BlockQ8_0>(w.bytes, d); break;
      case DType::kQ4_K: SetBlockScales<BlockQ4_K>(w.bytes, d); break;
      case DType::kQ5_K: SetBlockScales<BlockQ5_K>(w.bytes, d); break;
      default: SetBlockScales<BlockQ6_K>(w.bytes, d); break;
    }
    w.view = {w.bytes.data(), t, rows, cols};
    w.Pack(pool);
    for (const float sign : {1.0f, -1.0f}) {
      for (int64_t m : {1, 3, 4, 9}) {
        const std::vector<float> x(m * cols, sign);
        for (const bool vex_off : {false, true}) {
          kernels::DisableAvxVnniForTest(vex_off);
          kernels::ForEachTarget([&](const std::string& target) {
            ExpectMatchesRef(w.view, x, m, pool, target + (vex_off ? " (AVX-VNNI off)" : ""));
          });
        }
        kernels::DisableAvxVnniForTest(false);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatMulTypes, ::testing::ValuesIn(kAllTypes),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// BF16 weights multiply activations rounded to bf16 (nearest, ties to even), as ggml's BF16
// vec_dot: with all-ones weights every sum below is exact in f32, so any target or path that used
// the unrounded activations (64.28125) or rounded differently gives another number.
TEST(MatMul, Bf16RoundsActivationsToBf16) {
  ThreadPool pool(2);
  const int64_t rows = 16, cols = 64;
  const std::vector<float> ones(rows * cols, 1.f);
  std::vector<uint16_t> w(rows * cols);
  ASSERT_TRUE(ops::QuantizeRow(DType::kBF16, ones.data(), w.data(), rows * cols));
  std::vector<float> x(3 * cols);
  for (int64_t k = 0; k < 3 * cols; ++k) {
    const int64_t c = k % cols;
    x[k] = c < 16 ? 1.f + 0x1p-8f        // a tie: rounds down to 1 (even)
           : c < 32 ? 1.f + 3 * 0x1p-8f  // a tie: rounds up to 1 + 2^-6 (even)
                    : 1.f + 0x1p-10f;    // below half an ulp: 1
  }
  const float want = 16.f + 16.f * (1.f + 0x1p-6f) + 32.f;  // 64.25
  ops::WeightView view{w.data(), DType::kBF16, rows, cols};
  std::vector<uint8_t> packed(ops::PackedBytes(DType::kBF16, rows, cols) + 64);
  auto* dst = reinterpret_cast<void*>(kernels::RoundUp(reinterpret_cast<uintptr_t>(packed.data()), 64));
  for (bool disable_dot : {false, true}) {
    kernels::DisableBf16DotForTest(disable_dot);
    for (bool use_packed : {false, true}) {
      ops::WeightView v = view;
      if (use_packed) {
        ops::PackWeights(view, dst, pool);
        v.packed = dst;
      }
      kernels::ForEachTarget([&](const std::string& target) {
        for (int64_t m : {1, 3}) {
          std::vector<float> y(m * rows);
          ops::MatMul(v, x.data(), m, y.data(), pool);
          for (int64_t i = 0; i < m * rows; ++i)
            ASSERT_EQ(y[i], want) << target << " packed=" << use_packed << " dot off=" << disable_dot << " m=" << m;
        }
      });
    }
  }
  kernels::DisableBf16DotForTest(false);
}

// On AMD CPUs with AVX-512 BF16 the AVX3_DL target multiplies BF16 with vdpbf16ps and every other
// target with f32 FMAs over the split column pairs; the FMA path must hold on the same CPU too.
// Both against the reference, packed (odd column counts: a padded pair) and in row layout, and a
// row alone bitwise equal to the row in a block.
TEST(MatMul, Bf16DotAndFmaPathsMatchReference) {
  ThreadPool pool(2);
  struct Shape {
    int64_t rows, cols;
  };
  for (bool disable_dot : {false, true}) {
    kernels::DisableBf16DotForTest(disable_dot);
    for (const Shape s : {Shape{37, 255}, Shape{64, 1024}, Shape{5, 3}}) {
      Weights w = MakeWeights(DType::kBF16, s.rows, s.cols, 60 + s.rows);
      std::vector<uint8_t> packed(ops::PackedBytes(DType::kBF16, s.rows, s.cols) + 64);
      auto* dst = reinterpret_cast<void*>(kernels::RoundUp(reinterpret_cast<uintptr_t>(packed.data()), 64));
      ops::PackWeights(w.view, dst, pool);
      ops::WeightView packed_view = w.view;
      packed_view.packed = dst;
      for (int64_t m : {1, 2, 5, 9, 16, 33}) {
        const auto x = kernels::RandomVector(m * s.cols, 700 + m);
        kernels::ForEachTarget([&](const std::string& target) {
          const std::string where = target + (disable_dot ? " (dot off)" : "");
          ExpectMatchesRef(w.view, x, m, pool, where);
          ExpectMatchesRef(packed_view, x, m, pool, where + " packed");
          std::vector<float> block(m * s.rows), alone(s.rows);
          ops::MatMul(packed_view, x.data(), m, block.data(), pool);
          for (int64_t j = 0; j < m; ++j) {
            ops::MatMul(packed_view, x.data() + j * s.cols, 1, alone.data(), pool);
            ASSERT_EQ(0, std::memcmp(alone.data(), block.data() + j * s.rows, s.rows * sizeof(float)))
                << where << " m=" << m << " row " << j;
          }
        });
      }
    }
  }
  kernels::DisableBf16DotForTest(false);
}

// The comparison can fail: corrupting one weight block moves the result of that row far outside
// the tolerance the kernels are held to.
TEST(MatMul, DetectsCorruptedWeights) {
  ThreadPool pool(1);
  Weights w = MakeWeights(DType::kQ4_K, 4, 256, 1);
  const auto x = kernels::RandomVector(256, 2);
  std::vector<double> ref(4), bound(4);
  ref::MatMulRef(w.view, x.data(), 1, ref.data(), bound.data());
  w.bytes[RowBytes(DType::kQ4_K, 256) + 20] ^= 0x77;  // row 1, inside qs
  std::vector<float> y(4);
  ops::MatMul(w.view, x.data(), 1, y.data(), pool);
  EXPECT_LE(std::fabs(y[0] - ref[0]), kernels::kMatMulQuantRelTol * bound[0]);
  EXPECT_GT(std::fabs(y[1] - ref[1]), 100 * kernels::kMatMulQuantRelTol * bound[1]);
}

// Every target's activation quantiser produces exactly the reference quantiser's integers and
// scales (ties included: Q8_0 rounds half away from zero, Q8_K half to even).
TEST(MatMul, ActivationQuantisationBitExactOnEveryTarget) {
  const int64_t cols = 1024;
  auto x = kernels::RandomVector(cols, 77, 3.f);
  x[5] = 0.f;
  for (int i = 256; i < 512; ++i) x[i] = 0.f;          // an all-zero Q8_K super-block
  for (int i = 0; i < 32; ++i) x[512 + i] = (i - 16) * 0.5f;  // exact .5 ties after scaling
  x[512 + 31] = 127.f * 0.5f;
  std::vector<BlockQ8_0> b0(cols / 32);
  std::vector<BlockQ8_K> bk(cols / 256);
  ref::QuantizeRowQ8_0(x.data(), b0.data(), cols);
  ref::QuantizeRowQ8_K(x.data(), bk.data(), cols);
  kernels::ForEachTarget([&](const std::string& target) {
    std::vector<int8_t> q(cols);
    std::vector<float> da(cols / 16), asum(cols / 16);
    kernels::QuantizeActivationsForTest(false, 32, x.data(), cols, q.data(), da.data(), asum.data());
    for (int64_t b = 0; b < cols / 32; ++b) {
      int sum = 0;
      for (int k = 0; k < 32; ++k) {
        ASSERT_EQ(q[32 * b + k], b0[b].qs[k]) << target << " q8_0 at " << 32 * b + k;
        sum += b0[b].qs[k];
      }
      ASSERT_EQ(da[b], F16ToF32(b0[b].d)) << target;
      ASSERT_EQ(asum[b], da[b] * static_cast<float>(sum)) << target;
    }
    for (int sub : {16, 32}) {
      kernels::QuantizeActivationsForTest(true, sub, x.data(), cols, q.data(), da.data(), asum.data());
      for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(q[i], bk[i / 256].qs[i % 256]) << target << " q8_K at " << i;
      for (int64_t s = 0; s < cols / sub; ++s) {
        const auto& blk = bk[s * sub / 256];
        int sum = 0;
        for (int k = (s * sub % 256) / 16; k < (s * sub % 256 + sub) / 16; ++k) sum += blk.bsums[k];
        ASSERT_EQ(da[s], blk.d) << target;
        ASSERT_EQ(asum[s], blk.d * static_cast<float>(sum)) << target;
      }
    }
  });
}

TEST(MatMul, SupportsListedTypes) {
  for (DType t : kAllTypes) EXPECT_TRUE(ops::MatMulSupports(t)) << DTypeName(t);
  EXPECT_FALSE(ops::MatMulSupports(DType::kQ2_K));
  EXPECT_FALSE(ops::MatMulSupports(DType::kQ8_K));
}

TEST(MatMul, TargetsIncludeVnniAndAvx2OnThisCpu) {
  std::vector<std::string> names;
  kernels::ForEachTarget([&](const std::string& n) { names.push_back(n); });
  // Informational: print which targets the suite exercised.
  std::string all;
  for (auto& n : names) all += n + " ";
  RecordProperty("targets", all);
  std::printf("targets exercised: %s\n", all.c_str());
  EXPECT_GE(names.size(), 1u);
}

}  // namespace
}  // namespace dspark
