// Scalar twin of ops::MatMul: quantises each activation row with the reference quantiser of the
// type's activation format (Q8_0 or Q8_K), then forms every block's exact integer dot product
// with ggml's formulas and accumulates in double. Plain loops, written straight from the block
// definitions in quant_blocks.h (not from the kernels' decoders), so it checks them.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace dspark::ref {

// The activation format MatMul pairs with a weight type: kQ8_0 for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1,
// kQ8_K for Q4_K/Q5_K/Q6_K, kBF16 for BF16 (the activations rounded to bf16, as ggml), kF32 for
// F32 and F16.
DType ActivationType(DType weight_type);

// y[m, w.rows] = x[m, w.cols] · wᵀ in double. bound (optional, same shape) receives Σ|term| over
// the per-block terms: the scale against which float rounding in the SIMD kernels is judged.
void MatMulRef(const ops::WeightView& w, const float* x, int64_t m, double* y, double* bound);

}  // namespace dspark::ref
