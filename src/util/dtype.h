// Weight and activation element types, numbered exactly as ggml/GGUF numbers them (ggml_type), with
// their block geometry. Shared by the GGUF reader (to size tensors) and the kernels (to pick a
// dot product). Knows nothing about how a block is laid out inside; see kernels/quant_blocks.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dspark {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};

struct DTypeInfo {
  std::string_view name;  // as llama.cpp prints it: "q4_K", "f16"
  int64_t block_size;     // elements per block
  int64_t block_bytes;    // bytes per block
  bool quantized;
};

// Geometry of a ggml type id, or nullopt for an id this build does not know.
std::optional<DTypeInfo> GetDTypeInfo(uint32_t type_id);
const DTypeInfo& Info(DType type);  // type must be known
inline std::string_view DTypeName(DType type) { return Info(type).name; }
std::optional<DType> DTypeFromName(std::string_view name);  // case-insensitive: "Q4_K", "f16"

// Bytes of one row of n elements; n must be a multiple of the block size.
inline size_t RowBytes(DType type, int64_t n) {
  const DTypeInfo& i = Info(type);
  return static_cast<size_t>(n / i.block_size * i.block_bytes);
}

}  // namespace dspark
