#include "model/quantize.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/ops.h"

namespace dspark {

namespace {

bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The N of a "blk.N." tensor name, -1 for a tensor outside the layers.
int LayerOf(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  int il = -1;
  const char* begin = name.data() + kPrefix.size();
  const auto [end, ec] = std::from_chars(begin, name.data() + name.size(), il);
  return ec == std::errc() && end < name.data() + name.size() && *end == '.' ? il : -1;
}

// llama.cpp's use_more_bits (llama_tensor_get_type_impl): the first and last eighth of the layers
// and every third layer between them, where quantisation error hurts most.
bool UseMoreBits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

// llama.cpp's attn_v category (category_is_attn_v): V, or fused projections that contain it.
bool IsAttnV(std::string_view name) {
  return Contains(name, "attn_v.weight") || Contains(name, "attn_qkv.weight") || Contains(name, "attn_kv_b.weight");
}

std::string Upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

// llama_ftype values for general.file_type: llama.cpp prints them ("Q4_K - Medium").
constexpr uint32_t kLlamaFtypeMostlyQ4_K_M = 15;

}  // namespace

bool IsQuantizeTarget(DType type) {
  switch (type) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: case DType::kF16: case DType::kBF16:
      return true;
    default:
      return false;
  }
}

const char* QuantizeTargetNames() { return "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, F16, BF16, Q4_K_M"; }

std::optional<QuantizeTarget> QuantizeTargetFromName(std::string_view name) {
  if (Upper(name) == "Q4_K_M") return QuantizeTarget{DType::kQ4_K, QuantizeMix::kQ4_K_M};
  const std::optional<DType> type = DTypeFromName(name);
  if (!type || !IsQuantizeTarget(*type)) return std::nullopt;
  return QuantizeTarget{*type, QuantizeMix::kUniform};
}

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

DType QuantizeTensorType(const QuantizeTarget& target, std::string_view name, const QuantizeFileFacts& facts) {
  if (target.mix == QuantizeMix::kUniform) return target.type;
  // Q4_K_M. The LM head (the embedding when tied) decides every token: Q6_K.
  if (name == "output.weight" || (name == "token_embd.weight" && !facts.has_output)) return DType::kQ6_K;
  if (name == "token_embd.weight") return target.type;
  const bool moe8 = facts.n_expert == 8;  // llama.cpp's Mixtral-shaped special case
  const int il = LayerOf(name);
  if (IsAttnV(name)) {
    // V is small under GQA and its error is not averaged over heads: more bits cost little.
    if (moe8) return DType::kQ8_0;
    return il >= 0 && UseMoreBits(il, facts.n_attn_v) ? DType::kQ6_K : target.type;
  }
  if (Contains(name, "attn_k.weight")) return moe8 ? DType::kQ8_0 : target.type;
  if (Contains(name, "ffn_down")) return il >= 0 && UseMoreBits(il, facts.n_layer) ? DType::kQ6_K : target.type;
  if (Contains(name, "attn_output.weight")) return moe8 ? DType::kQ5_K : target.type;
  return target.type;
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

Status QuantizeFile(const std::string& in, const std::string& out, const QuantizeTarget& target,
                    QuantizeReport* report, const std::function<void(uint64_t, uint64_t)>& progress) {
  if (!IsQuantizeTarget(target.type))
    return InvalidArgument("quantize: unsupported target type '{}' ({})", DTypeName(target.type),
                           QuantizeTargetNames());
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(in));
  const gguf::File& src = *file;
  QuantizeFileFacts facts;
  for (const auto& t : src.tensors()) {
    facts.n_layer = std::max(facts.n_layer, LayerOf(t.name) + 1);
    facts.n_attn_v += IsAttnV(t.name);
    facts.has_output |= t.name == "output.weight";
  }
  DSPARK_ASSIGN_OR_RETURN(std::string arch, src.GetStringOr("general.architecture", ""));
  DSPARK_ASSIGN_OR_RETURN(int64_t n_expert, src.GetIntOr(arch + ".expert_count", 0));
  facts.n_expert = static_cast<int>(n_expert);

  gguf::Writer w(src.alignment());
  w.CopyMetadataFrom(src);
  // Informative only (llama.cpp reads tensor types directly); a mixture is named as llama.cpp names it.
  w.SetU32("general.file_type", target.mix == QuantizeMix::kQ4_K_M ? kLlamaFtypeMostlyQ4_K_M : 0);
  QuantizeReport r;
  for (const auto& t : src.tensors()) {
    const bool is_float = t.type == DType::kF32 || t.type == DType::kF16 || t.type == DType::kBF16;
    const DType type = QuantizeTypeForRows(QuantizeTensorType(target, t.name, facts), t.ne[0]);
    // One-row "matrices" (a DSpark confidence projection {E+R, 1}) are vectors: dot products,
    // not matmuls, and too small for quantisation to save anything. An MoE router
    // (ffn_gate_inp) stays as written, as llama.cpp keeps it: routing flips on small errors.
    const bool router = Contains(t.name, "ffn_gate_inp.weight");
    if (!is_float || t.ne.size() < 2 || t.Rows() == 1 || router || t.type == type) {
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

Status QuantizeFile(const std::string& in, const std::string& out, DType type, QuantizeReport* report,
                    const std::function<void(uint64_t, uint64_t)>& progress) {
  return QuantizeFile(in, out, QuantizeTarget{type, QuantizeMix::kUniform}, report, progress);
}

}  // namespace dspark
