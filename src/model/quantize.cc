#include "model/quantize.h"

#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"

namespace dspark {

bool IsQuantizeTarget(DType type) {
  return type == DType::kQ8_0 || type == DType::kQ4_0 || type == DType::kQ4_K || type == DType::kQ6_K ||
         type == DType::kQ5_K || type == DType::kF16 || type == DType::kBF16;
}

const char* QuantizeTargetNames() { return "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, F16, BF16"; }

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
    DType type = target;
    // K-quants need rows of 256; fall back to Q8_0 (as llama.cpp does) where rows are shorter.
    if (t.ne[0] % Info(type).block_size != 0) type = t.ne[0] % 32 == 0 ? DType::kQ8_0 : DType::kF16;
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
