#include "model/swiglu.h"

#include <algorithm>

namespace dspark {

void SwiGluActivation(const ops::WeightView& gate, const ops::WeightView& up, const ops::WeightView& gate_up,
                      int n_ff, const float* x, int n, std::vector<float>& fused, std::vector<float>& up_out,
                      float* act, ThreadPool& pool) {
  const size_t ff = static_cast<size_t>(n_ff);
  if (gate_up.rows > 0) {
    fused.resize(std::max(fused.size(), static_cast<size_t>(n) * 2 * ff));
    ops::MatMul(gate_up, x, n, fused.data(), pool);
    for (int i = 0; i < n; ++i) {
      const float* gu = fused.data() + static_cast<size_t>(i) * 2 * ff;
      ops::SiluMul(gu, gu + ff, n_ff, act + static_cast<size_t>(i) * ff);
    }
  } else {
    up_out.resize(std::max(up_out.size(), static_cast<size_t>(n) * ff));
    ops::MatMul(gate, x, n, act, pool);
    ops::MatMul(up, x, n, up_out.data(), pool);
    ops::SiluMul(act, up_out.data(), static_cast<int64_t>(n) * n_ff, act);
  }
}

}  // namespace dspark
