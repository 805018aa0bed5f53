// Elementwise ops on every attainable Highway target against the scalar twins in ref/ops_ref.h:
// sizes 0..3 vectors plus odd sizes, misaligned pointers, and -inf in Softmax.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/test_util.h"
#include "kernels/tolerance.h"

namespace dspark {
namespace {

const std::vector<int64_t> kSizes = {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 47, 48, 63, 64, 65, 100, 1024, 1031};

// Offsets the data by one float so vector loads are misaligned.
std::vector<float> Misaligned(int64_t n, uint32_t seed, float scale = 1.f) {
  auto v = kernels::RandomVector(n + 1, seed, scale);
  return v;
}

void ExpectNear(const float* got, const float* want, int64_t n, double tol, const std::string& what) {
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(static_cast<double>(want[i]))))
        << what << " i=" << i << " n=" << n;
}

TEST(Elementwise, AllOpsAllTargets) {
  kernels::ForEachTarget([&](const std::string& target) {
    for (int64_t n : kSizes) {
      const std::string what = target + " n=" + std::to_string(n);
      auto a = Misaligned(n, 1 + n), b = Misaligned(n, 2 + n), c = Misaligned(n, 3 + n);
      const float* x = a.data() + 1;
      const float* wgt = b.data() + 1;
      // RmsNorm (in place and out of place)
      if (n > 0) {
        std::vector<float> y(n + 1), yr(n);
        ops::RmsNorm(x, wgt, 1e-6f, n, y.data() + 1);
        ref::RmsNorm(x, wgt, 1e-6f, n, yr.data());
        ExpectNear(y.data() + 1, yr.data(), n, kernels::kTranscendentalRelTol, "RmsNorm " + what);
        std::vector<float> inplace(a);
        ops::RmsNorm(inplace.data() + 1, wgt, 1e-6f, n, inplace.data() + 1);
        ExpectNear(inplace.data() + 1, yr.data(), n, kernels::kTranscendentalRelTol, "RmsNorm in place " + what);
      }
      // Softmax with a masked entry
      {
        std::vector<float> s(a), sr(a.begin() + 1, a.end());
        if (n > 2) s[1 + 2] = sr[2] = -std::numeric_limits<float>::infinity();
        ops::Softmax(s.data() + 1, n);
        ref::Softmax(sr.data(), n);
        ExpectNear(s.data() + 1, sr.data(), n, kernels::kTranscendentalRelTol, "Softmax " + what);
        if (n > 2) {
          EXPECT_EQ(s[1 + 2], 0.f);
        }
      }
      // ArgMax: the first maximum (a tie placed after it) and its softmax probability
      if (n > 0) {
        std::vector<float> v(a.begin() + 1, a.end());
        const int64_t at = (n * 5) / 7;
        v[at] = 9.f;
        if (at + 1 < n) v[n - 1] = 9.f;
        float p = -1.f, pr = -1.f;
        EXPECT_EQ(ops::ArgMax(v.data(), n, &p), at) << what;
        EXPECT_EQ(ref::ArgMax(v.data(), n, &pr), at) << what;
        EXPECT_NEAR(p, pr, kernels::kTranscendentalRelTol * pr) << what;
        EXPECT_EQ(ops::ArgMax(v.data(), n), at) << what;
      }
      // SiluMul (aliasing out = gate)
      {
        std::vector<float> g(a), gr(n);
        ref::SiluMul(x, wgt, n, gr.data());
        ops::SiluMul(g.data() + 1, wgt, n, g.data() + 1);
        ExpectNear(g.data() + 1, gr.data(), n, kernels::kTranscendentalRelTol, "SiluMul " + what);
      }
      // Add, Axpy, Scale
      {
        std::vector<float> y(c), yr(c.begin() + 1, c.end());
        ops::Add(x, n, y.data() + 1);
        ref::Add(x, n, yr.data());
        ExpectNear(y.data() + 1, yr.data(), n, kernels::kElementwiseRelTol, "Add " + what);
        ops::Axpy(-0.75f, x, n, y.data() + 1);
        ref::Axpy(-0.75f, x, n, yr.data());
        ExpectNear(y.data() + 1, yr.data(), n, kernels::kElementwiseRelTol, "Axpy " + what);
        ops::Scale(3.5f, n, y.data() + 1);
        ref::Scale(3.5f, n, yr.data());
        ExpectNear(y.data() + 1, yr.data(), n, kernels::kElementwiseRelTol, "Scale " + what);
      }
      // Dot
      {
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(x[i]) * wgt[i]);
        EXPECT_NEAR(ops::Dot(x, wgt, n), ref::Dot(x, wgt, n), kernels::kReductionRelTol * mag + 1e-30)
            << "Dot " << what;
      }
    }
  });
}

TEST(Elementwise, SoftmaxAllMaskedIsZero) {
  std::vector<float> x(37, -std::numeric_limits<float>::infinity());
  ops::Softmax(x.data(), 37);
  for (float v : x) EXPECT_EQ(v, 0.f);
}

TEST(Elementwise, SoftmaxLargeLogitsStable) {
  std::vector<float> x = {1000.f, 1000.f, -1000.f};
  ops::Softmax(x.data(), 3);
  EXPECT_NEAR(x[0], 0.5f, 1e-6);
  EXPECT_NEAR(x[1], 0.5f, 1e-6);
  EXPECT_EQ(x[2], 0.f);
}

}  // namespace
}  // namespace dspark
