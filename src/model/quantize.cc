#include "model/quantize.h"

#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"

namespace dspark {

bool IsQuantizeTarget(DType type) {
  switch (type) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: case DType::kF16: case DType::kBF16:
      return true;
    default:
      return false;
  }
}

const char* QuantizeTargetNames() { return "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16, BF16"; }

DType QuantizeTypeForRows(DType target, int64_t cols) {
  if (cols % Info(target).block_size == 0) return target;
  // Rows shorter than a K-quant super-block take llama.cpp's fallbacks (llama_tensor_get_type):
  // Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, which keep about the bits per weight; rows that are
  // not even a multiple of 32 stay F16.
  if (cols % 32 != 0) return DType::kF16;
  switch (target) {
    case DType::kQ4_K: return DType::kQ5_0;
    case DType::kQ5_K: return DType::kQ5_1;
    default: return DType::kQ8_0;
  }
}

void ReencodeMatrix(const ops::WeightView& src, DType type, uint8_t* dst) {
  const int64_t cols = src.cols;
  const size_t src_row = RowBytes(src.type, cols), dst_row = RowBytes(type, cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < src.rows; ++r) {
    ops::DequantizeRow(src.type, static_cast<const uint8_t*>(src.data) + r * src_row, row.data(), cols);
    ops::QuantizeRow(type, row.data(), dst + r * dst_row, cols);
  }
}

Status QuantizeFile(const std::string& in, const std::string& out, DType target, QuantizeReport* report,
                    const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!IsQuantizeTarget(target))
    return InvalidArgument("quantize: unsupported target type '{}' ({})", DTypeName(target), QuantizeTargetNames());
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(in));
  const gguf::File& src = *file;
  gguf::Writer w(src.alignment());
  w.CopyMetadataFrom(src);
  w.SetU32("general.file_type", 0);  // informative only; llama.cpp reads tensor types directly
  QuantizeReport r;
  for (const auto& t : src.tensors()) {
    const bool is_float = t.type == DType::kF32 || t.type == DType::kF16 || t.type == DType::kBF16;
    const DType type = QuantizeTypeForRows(target, t.ne[0]);
    // One-row "matrices" (a DSpark confidence projection {E+R, 1}) are vectors: dot products,
    // not matmuls, and too small for quantisation to save anything.
    if (!is_float || t.ne.size() < 2 || t.Rows() == 1 || t.type == type) {
      DSPARK_TRY(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)));
      ++r.kept;
      continue;
    }
    const gguf::TensorInfo* info = &t;
    DSPARK_TRY(w.AddTensorLazy(t.name, type, t.ne, [info, type](uint8_t* dst) {
      ReencodeMatrix(ops::WeightView{info->data, info->type, info->Rows(), info->ne[0]}, type, dst);
    }));
    ++r.converted;
  }
  DSPARK_TRY(w.WriteFile(out, progress));
  if (report != nullptr) *report = r;
  return Status::Ok();
}

}  // namespace dspark
