// Re-encoding a GGUF file's weight matrices (`dspark quantize`). Every 2-D float matrix of more
// than one row goes to the requested type; rows that are not a multiple of a K-quant's 256 take
// llama.cpp's fallbacks (QuantizeTypeForRows), rows that no block size divides stay F16. Vectors, one-row matrices (a DSpark
// confidence projection) and already-quantised tensors keep their type; metadata is copied.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/ops.h"
#include "util/dtype.h"
#include "util/status.h"

namespace dspark {

struct QuantizeReport {
  int converted = 0;  // tensors re-encoded
  int kept = 0;       // tensors copied as they were
};

// Types `dspark quantize` writes: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16 and BF16.
bool IsQuantizeTarget(DType type);
// Their names, comma-separated, for messages and --help.
const char* QuantizeTargetNames();
// The type a matrix with rows of `cols` gets when `target` is asked for: target itself when its
// block divides the rows; else Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K (llama.cpp's
// llama_tensor_get_type), and F16 for rows that are not a multiple of 32.
DType QuantizeTypeForRows(DType target, int64_t cols);

// Re-encodes the rows x cols matrix `src` (row layout) as `type` into dst
// (rows * RowBytes(type, cols) bytes); cols must be a multiple of type's block size.
void ReencodeMatrix(const ops::WeightView& src, DType type, uint8_t* dst);

// Writes `in` with its matrices in `type` to `out`. `progress(done, total)` gets bytes written.
Status QuantizeFile(const std::string& in, const std::string& out, DType type, QuantizeReport* report,
                    const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace dspark
