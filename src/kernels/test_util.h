// Helpers shared by the kernel tests: run a body once per Highway target that is both compiled
// and supported by this CPU (forcing dispatch with SetSupportedTargetsForTest), and seeded data.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/hwy_targets.h"  // before any Highway header: same target list as the kernels
#include "hwy/targets.h"

namespace dspark::kernels {

// Calls fn(target_name) with dispatch forced to each attainable target in turn, then restores
// normal dispatch. The list always includes AVX3_DL (VNNI) and AVX2 on this project's CI CPUs.
template <class F>
void ForEachTarget(const F& fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn(std::string(hwy::TargetName(target)));
  }
  hwy::SetSupportedTargetsForTest(0);
}

inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace dspark::kernels
