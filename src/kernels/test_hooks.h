// Internal entry points exposed only so tests can check per-target pieces of MatMul directly.
#pragma once

#include <cstdint>

namespace dspark::kernels {

// The dispatched target's activation quantiser (matmul_act-inl.h): int8 q[cols], and per
// sub-block of `sub` elements the scale da and da * Σq. k_quant selects Q8_K (else Q8_0, sub 32).
void QuantizeActivationsForTest(bool k_quant, int sub, const float* x, int64_t cols, int8_t* q,
                                float* da, float* asum);

// Turns the AVX-512 BF16 dot-product path of BF16 MatMul off (true) or back on, so that tests check
// the FMA path on a CPU that has the instruction. Not thread-safe against running MatMuls.
void DisableBf16DotForTest(bool disabled);
bool Bf16DotDisabledForTest();

// The same for AVX-VNNI (VEX vpdpbusd) in the AVX2 packed kernels, so that tests check the
// vpmaddubsw path on a CPU that has the instruction.
void DisableAvxVnniForTest(bool disabled);
bool AvxVnniDisabledForTest();

// The same for vpdpbusd scores over Q8_0 keys in attention: the portable path then runs on an
// AVX-512 VNNI CPU, where its scores must equal vpdpbusd's bitwise.
void DisableQ8ScoresVnniForTest(bool disabled);
bool Q8ScoresVnniDisabledForTest();

}  // namespace dspark::kernels
