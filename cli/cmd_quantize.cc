// `dspark quantize IN OUT TYPE`: re-encodes every 2-D float weight matrix; vectors stay float32.
#include <cstdio>
#include <cstring>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "util/progress.h"

namespace dspark::cli {

namespace {
struct QuantizeFlags {
  std::string in, out, type;
};

int RunQuantize(const QuantizeFlags& f) {
  const auto target = DTypeFromName(f.type);
  if (!target || !(*target == DType::kQ8_0 || *target == DType::kQ4_0 || *target == DType::kQ4_K ||
                   *target == DType::kQ6_K || *target == DType::kQ5_K || *target == DType::kF16))
    return Fail(InvalidArgument("quantize: unsupported target type '{}' (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, F16)", f.type));
  auto file = gguf::File::Open(f.in);
  if (!file.ok()) return Fail(file.status());
  const gguf::File& src = **file;
  gguf::Writer w(src.alignment());
  w.CopyMetadataFrom(src);
  w.SetU32("general.file_type", 0);  // informative only; llama.cpp reads tensor types directly
  int converted = 0, kept = 0;
  for (const auto& t : src.tensors()) {
    const bool is_float = t.type == DType::kF32 || t.type == DType::kF16 || t.type == DType::kBF16;
    DType type = *target;
    // K-quants need rows of 256; fall back to Q8_0 (as llama.cpp does) where rows are shorter.
    if (t.ne[0] % Info(type).block_size != 0) type = t.ne[0] % 32 == 0 ? DType::kQ8_0 : DType::kF16;
    if (!is_float || t.ne.size() < 2 || t.type == type) {
      Status s = w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes));
      if (!s.ok()) return Fail(s);
      ++kept;
      continue;
    }
    const gguf::TensorInfo* info = &t;
    Status s = w.AddTensorLazy(t.name, type, t.ne, [info, type](uint8_t* dst) {
      const int64_t cols = info->ne[0], rows = info->Rows();
      std::vector<float> row(cols);
      for (int64_t r = 0; r < rows; ++r) {
        ops::DequantizeRow(info->type, info->data + r * RowBytes(info->type, cols), row.data(), cols);
        ops::QuantizeRow(type, row.data(), dst + r * RowBytes(type, cols), cols);
      }
    });
    if (!s.ok()) return Fail(s);
    ++converted;
  }
  ProgressBar bar("quantize");
  Status s = w.WriteFile(f.out, [&](uint64_t d, uint64_t t) { bar.Update(d, t); });
  bar.Finish();
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "dspark: wrote %s: %d tensors quantised to %s, %d kept\n", f.out.c_str(), converted,
               f.type.c_str(), kept);
  return 0;
}
}  // namespace

Runner RegisterQuantize(CLI::App& app) {
  auto f = std::make_shared<QuantizeFlags>();
  CLI::App* sub = app.add_subcommand("quantize", "Quantise a GGUF model's weight matrices");
  sub->add_option("input", f->in, "Input GGUF")->required();
  sub->add_option("output", f->out, "Output GGUF")->required();
  sub->add_option("type", f->type, "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K or F16")->required();
  return [f] { return RunQuantize(*f); };
}

}  // namespace dspark::cli
