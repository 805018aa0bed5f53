// Re-encoding a GGUF file's weight matrices (`dspark quantize`). Every 2-D float matrix of more
// than one row goes to the requested type (or, for a mixture such as Q4_K_M, to the type the
// mixture's rule gives that tensor); rows that are not a multiple of a K-quant's 256 take
// llama.cpp's fallbacks (QuantizeTypeForRows), rows that no block size divides stay F16. Vectors,
// one-row matrices (a DSpark confidence projection) and already-quantised tensors keep their type;
// metadata is copied.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/ops.h"
#include "util/dtype.h"
#include "util/status.h"

namespace dspark {

struct QuantizeReport {
  int converted = 0;  // tensors re-encoded
  int kept = 0;       // tensors copied as they were
};

// How the matrices of a file get their types: all the same, or llama.cpp's Q4_K_M mixture.
enum class QuantizeMix { kUniform, kQ4_K_M };

// What `dspark quantize` is asked for: a type name (Q8_0, Q4_K, ...) or a mixture name (Q4_K_M).
struct QuantizeTarget {
  DType type = DType::kQ8_0;  // every matrix's type (kUniform) or the mixture's base type
  QuantizeMix mix = QuantizeMix::kUniform;
};

// Types `dspark quantize` writes: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16 and BF16.
bool IsQuantizeTarget(DType type);
// Their names and the mixtures' (Q4_K_M), comma-separated, for messages and --help.
const char* QuantizeTargetNames();
// A target from its name, case-insensitive ("q4_k_m", "Q8_0"); nullopt for anything else.
std::optional<QuantizeTarget> QuantizeTargetFromName(std::string_view name);
// The type a matrix with rows of `cols` gets when `target` is asked for: target itself when its
// block divides the rows; else Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K (llama.cpp's
// llama_tensor_get_type), and F16 for rows that are not a multiple of 32.
DType QuantizeTypeForRows(DType target, int64_t cols);

// What QuantizeTensorType needs to know about the whole file.
struct QuantizeFileFacts {
  int n_layer = 0;         // 1 + the largest blk.N index
  int n_attn_v = 0;        // attn_v tensors (one per layer in a dense model)
  int n_expert = 0;        // {arch}.expert_count, 0 for a dense model
  bool has_output = false;  // an output.weight of its own (else the embedding is the LM head)
};

// The type `target` gives the matrix `name` (rows of `cols`), before QuantizeTypeForRows' shape
// fallbacks are applied (QuantizeFile applies them). For Q4_K_M this is llama.cpp's rule
// (llama_tensor_get_type in src/llama-quant.cpp): Q4_K everywhere except the LM head (output.weight,
// or token_embd.weight when the embedding is tied) at Q6_K, and attn_v / ffn_down at Q6_K in the
// layers use_more_bits picks (the first and last eighth, and every third layer between);
// 8-expert models get attn_v and attn_k at Q8_0 and attn_output at Q5_K.
DType QuantizeTensorType(const QuantizeTarget& target, std::string_view name, const QuantizeFileFacts& facts);

// Re-encodes the rows x cols matrix `src` (row layout) as `type` into dst
// (rows * RowBytes(type, cols) bytes); cols must be a multiple of type's block size.
void ReencodeMatrix(const ops::WeightView& src, DType type, uint8_t* dst);

// Writes `in` with its matrices quantised as `target` says to `out`. `progress(done, total)` gets
// bytes written.
Status QuantizeFile(const std::string& in, const std::string& out, const QuantizeTarget& target,
                    QuantizeReport* report, const std::function<void(uint64_t, uint64_t)>& progress = {});
// Every matrix in `type`.
Status QuantizeFile(const std::string& in, const std::string& out, DType type, QuantizeReport* report,
                    const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace dspark
