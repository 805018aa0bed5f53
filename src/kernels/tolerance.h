// Tolerances of the kernel tests, in one place (conventions §4: never literals in tests).
#pragma once

namespace dspark::kernels {

// SIMD vs scalar-reference MatMul over the same quantised activations: the integer block sums
// are exact, so only float rounding of per-block products and their accumulation differ. Relative
// to Σ|term| (see ref::MatMulRef's bound).
inline constexpr double kMatMulQuantRelTol = 2e-5;
// Float-weight MatMul: float FMA accumulation vs double, relative to Σ|w·x|.
inline constexpr double kMatMulFloatRelTol = 2e-6;
// Elementwise ops vs double references, relative to max(1, |value|).
inline constexpr double kElementwiseRelTol = 2e-6;
// Transcendental ops (Softmax, SiluMul use Highway's Exp; ~1 ulp plus accumulation).
inline constexpr double kTranscendentalRelTol = 1e-5;
// Dot and RmsNorm accumulate in float: relative to Σ|a·b|.
inline constexpr double kReductionRelTol = 1e-6;

}  // namespace dspark::kernels
