// The gated activation of a SwiGLU feed-forward block, shared by the draft networks and the
// experts of a mixture: act = silu(x·Wgate) * (x·Wup), row by row.
#pragma once

#include <vector>

#include "kernels/ops.h"
#include "util/thread_pool.h"

namespace dspark {

// act [n, n_ff] for n rows of x: one MatMul through `gate_up` where it is packed fused (rows > 0,
// PackedWeights::PackFused: [gate ; up] per row), else one each through gate and up. `fused` and
// `up_out` are scratch, resized as needed.
void SwiGluActivation(const ops::WeightView& gate, const ops::WeightView& up, const ops::WeightView& gate_up,
                      int n_ff, const float* x, int n, std::vector<float>& fused, std::vector<float>& up_out,
                      float* act, ThreadPool& pool);

}  // namespace dspark
