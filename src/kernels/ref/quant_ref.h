// Scalar reference (de)quantisers for ggml's block formats. The quantisers follow ggml's
// quantize_row_*_ref functions operation for operation (same rounding, same search loops), so a
// file we write dequantises in llama.cpp exactly as here. They are also the production path of
// ops::QuantizeRow/DequantizeRow: neither is on a per-token hot path.
#pragma once

#include <cstdint>

#include "kernels/quant_blocks.h"
#include "util/dtype.h"

namespace dspark::ref {

void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n);
void QuantizeRowQ8_1(const float* x, BlockQ8_1* y, int64_t n);
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n);
void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n);
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n);
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n);
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n);
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n);
void QuantizeRowQ8_K(const float* x, BlockQ8_K* y, int64_t n);

// Any supported type (F32, F16, BF16 and the block types above); false for others.
bool QuantizeRow(DType type, const float* x, void* y, int64_t n);
bool CanQuantize(DType type);
// Any type above plus Q8_K; false for unknown types.
bool DequantizeRow(DType type, const void* x, float* y, int64_t n);

// ggml's nearest_int: round half to even via the 1.5 * 2^23 trick (|f| <= 2^22).
int NearestInt(float f);

}  // namespace dspark::ref
