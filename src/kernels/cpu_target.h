// Which SIMD target the kernels dispatch to: the best one this CPU supports, unless restricted
// (`dspark --cpu-target AVX2 ...`) to time or check a fallback path on a machine that has better.
#pragma once

#include <string>

#include "util/status.h"

namespace dspark::kernels {

// Restricts dispatch to the compiled target named `name` (Highway's names: AVX3_DL, AVX3, AVX2,
// SSE4, SSSE3, EMU128, ...). Fails, listing the usable names, when it is unknown or this CPU lacks it.
Status RestrictCpuTarget(const std::string& name);
// The target the kernels dispatch to now.
std::string CpuTargetName();
// The compiled targets this CPU supports, best first, comma-separated.
std::string UsableCpuTargets();

}  // namespace dspark::kernels
