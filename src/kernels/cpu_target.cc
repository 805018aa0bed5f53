#include "kernels/cpu_target.h"

#include <cstdint>
#include <vector>

// First: the compiled target set (AVX3_DL included) must be the kernels', or this file would not
// list the targets they were built for.
#include "kernels/hwy_targets.h"
#include "hwy/targets.h"

namespace dspark::kernels {

std::string UsableCpuTargets() {
  std::string names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (!names.empty()) names += ", ";
    names += hwy::TargetName(t);
  }
  return names;
}

Status RestrictCpuTarget(const std::string& name) {
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return Status::Ok();
    }
  }
  return InvalidArgument("cpu target '{}' is not one this build and CPU can run ({})", name, UsableCpuTargets());
}

std::string CpuTargetName() {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  return targets.empty() ? "none" : hwy::TargetName(targets.front());
}

}  // namespace dspark::kernels
