#include "model/arch/draft_file.h"

#include <cstring>
#include <limits>

#include "model/quantize.h"
#include "util/log.h"

namespace dspark {

namespace {
std::string Shape(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}
}  // namespace

Result<const gguf::TensorInfo*> DraftBinder::Find(const std::string& name, const std::vector<int64_t>& ne,
                                                  bool required) {
  const gguf::TensorInfo* t = f_.FindTensor(name);
  if (t == nullptr) {
    if (!required) return static_cast<const gguf::TensorInfo*>(nullptr);
    return NotFound("spec: {}: required tensor '{}' is missing from the {}", f_.path(), name, kind_);
  }
  claimed_.insert(name);
  std::vector<int64_t> actual = t->ne;
  while (actual.size() > ne.size() && actual.back() == 1) actual.pop_back();
  if (actual != ne)
    return InvalidArgument("spec: {}: tensor '{}' (data at byte {}) has shape {}, expected {}", f_.path(), name,
                           t->file_offset, t->ShapeString(), Shape(ne));
  return t;
}

Result<ops::WeightView> DraftBinder::Matrix(const std::string& name, int64_t cols, int64_t rows, bool required) {
  DSPARK_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name, {cols, rows}, required));
  if (t == nullptr) return ops::WeightView{};
  if (!ops::MatMulSupports(t->type))
    return Unimplemented("spec: {}: tensor '{}' has type {}, which dspark cannot multiply", f_.path(), name,
                         DTypeName(t->type));
  return ops::WeightView{t->data, t->type, rows, cols};
}

Result<std::vector<float>> DraftBinder::Vector(const std::string& name, int64_t n, bool required) {
  DSPARK_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name, {n}, required));
  if (t == nullptr) return std::vector<float>{};
  const bool readable = Info(t->type).quantized ? ops::MatMulSupports(t->type) && n % Info(t->type).block_size == 0
                                                : ops::CanQuantize(t->type);
  if (!readable)
    return Unimplemented("spec: {}: tensor '{}' has type {}, which dspark cannot read as a vector", f_.path(), name,
                         DTypeName(t->type));
  std::vector<float> out(n);
  ops::DequantizeRow(t->type, t->data, out.data(), n);
  return out;
}

Result<float> DraftBinder::Scale(const std::string& name) {
  DSPARK_ASSIGN_OR_RETURN(std::vector<float> v, Vector(name, 1, false));
  return v.empty() ? 1.0f : v[0];
}

void DraftBinder::WarnUnclaimed() const {
  for (const auto& t : f_.tensors())
    if (!claimed_.count(t.name)) DSPARK_LOG_WARN("spec: {}: tensor '{}' is not used by the {}", f_.path(), t.name, kind_);
}

Result<int> ReadPositive(const gguf::File& f, const std::string& key, int64_t fallback) {
  Result<int64_t> v = fallback >= 0 ? f.GetIntOr(key, fallback) : f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v <= 0 || *v > (1 << 26))
    return InvalidArgument("spec: {}: '{}' = {} is out of range (expected 1..{})", f.path(), key, *v, 1 << 26);
  return static_cast<int>(*v);
}

Result<DraftLayerShape> ReadDraftLayerShape(const gguf::File& f, const std::string& arch) {
  auto key = [&](const char* k) { return arch + "." + k; };
  DraftLayerShape c;
  DSPARK_ASSIGN_OR_RETURN(c.n_embd, ReadPositive(f, key("embedding_length")));
  DSPARK_ASSIGN_OR_RETURN(c.n_layer, ReadPositive(f, key("block_count")));
  DSPARK_ASSIGN_OR_RETURN(c.n_ff, ReadPositive(f, key("feed_forward_length")));
  DSPARK_ASSIGN_OR_RETURN(c.n_head, ReadPositive(f, key("attention.head_count")));
  DSPARK_ASSIGN_OR_RETURN(c.n_head_kv, ReadPositive(f, key("attention.head_count_kv"), c.n_head));
  DSPARK_ASSIGN_OR_RETURN(c.head_dim, ReadPositive(f, key("attention.key_length"), c.n_embd / c.n_head));
  DSPARK_ASSIGN_OR_RETURN(int head_dim_v, ReadPositive(f, key("attention.value_length"), c.head_dim));
  if (head_dim_v != c.head_dim)
    return InvalidArgument("spec: {}: {}.attention.value_length {} must equal key_length {}", f.path(), arch,
                           head_dim_v, c.head_dim);
  if (c.n_head % c.n_head_kv != 0)
    return InvalidArgument("spec: {}: n_head {} is not a multiple of n_head_kv {}", f.path(), c.n_head, c.n_head_kv);
  DSPARK_ASSIGN_OR_RETURN(double eps, f.GetFloatOr(key("attention.layer_norm_rms_epsilon"), 1e-6));
  if (!(eps > 0 && eps < 1)) return InvalidArgument("spec: {}: rms epsilon {} out of range", f.path(), eps);
  c.rms_eps = static_cast<float>(eps);
  return c;
}

Result<DraftVocabHead> BindVocabHead(const gguf::File& f, const Model& target, int64_t n_embd, DraftBinder& b) {
  const int n_vocab = target.config().n_vocab;
  const int64_t target_width = target.config().n_embd;
  DraftVocabHead h;
  DSPARK_ASSIGN_OR_RETURN(h.tok_embd, b.Matrix("token_embd.weight", n_embd, n_vocab, false));
  if (h.tok_embd.data == nullptr) {
    if (target_width != n_embd)
      return InvalidArgument("spec: {}: the draft is {} wide but has no token_embd.weight of its own, and the target's "
                             "embedding is {} wide",
                             f.path(), n_embd, target_width);
    h.tok_embd = target.weights().tok_embd;
  }

  const gguf::TensorInfo* d2t = f.FindTensor("d2t");
  const gguf::TensorInfo* out = f.FindTensor("output.weight");
  h.n_vocab_draft = n_vocab;
  if (d2t != nullptr) {
    if (d2t->type != DType::kI64 || d2t->ne.size() != 1)
      return InvalidArgument("spec: {}: tensor 'd2t' has type {} shape {}, expected a 1-D i64 table", f.path(),
                             DTypeName(d2t->type), d2t->ShapeString());
    h.n_vocab_draft = static_cast<int>(std::min<int64_t>(d2t->ne[0], std::numeric_limits<int>::max()));
    if (d2t->ne[0] > n_vocab)
      return InvalidArgument("spec: {}: d2t has {} entries, more than the target vocabulary {}", f.path(), d2t->ne[0],
                             n_vocab);
    if (out == nullptr)
      return InvalidArgument("spec: {}: a reduced vocabulary (d2t) needs the draft's own output.weight", f.path());
    DSPARK_TRY(b.Find("d2t", {h.n_vocab_draft}, true).status());
    std::vector<uint8_t> seen(n_vocab, 0);
    h.d2t.resize(h.n_vocab_draft);
    for (int j = 0; j < h.n_vocab_draft; ++j) {
      int64_t id;
      std::memcpy(&id, d2t->data + 8 * static_cast<size_t>(j), 8);
      if (id < 0 || id >= n_vocab || seen[id])
        return InvalidArgument("spec: {}: d2t[{}] = {} is out of range [0, {}) or repeated", f.path(), j, id, n_vocab);
      seen[id] = 1;
      h.d2t[j] = static_cast<int32_t>(id);
    }
  }
  if (out != nullptr) {
    DSPARK_ASSIGN_OR_RETURN(h.output, b.Matrix("output.weight", n_embd, h.n_vocab_draft));
    h.own_output = true;
  } else {
    if (target_width != n_embd)
      return InvalidArgument("spec: {}: the draft is {} wide but has no output.weight of its own, and the target's LM "
                             "head is {} wide",
                             f.path(), n_embd, target_width);
    h.output = target.weights().output;
  }
  return h;
}

bool ReencodeSharedHeadInto(DType own_type, ops::WeightView& output, std::vector<uint8_t>& storage) {
  if (!Info(own_type).quantized || Info(output.type).quantized || output.cols % Info(own_type).block_size != 0 ||
      !ops::CanQuantize(own_type))
    return false;
  storage.resize(static_cast<size_t>(output.rows) * RowBytes(own_type, output.cols));
  ReencodeMatrix(output, own_type, storage.data());
  output = ops::WeightView{storage.data(), own_type, output.rows, output.cols};
  return true;
}

void ScatterDraftLogits(const float* in, int n_rows, const std::vector<int32_t>& d2t, int n_vocab, float* out) {
  const size_t V = n_vocab;
  if (d2t.empty()) {
    std::memcpy(out, in, static_cast<size_t>(n_rows) * V * sizeof(float));
    return;
  }
  const size_t Vd = d2t.size();
  for (int i = 0; i < n_rows; ++i) {
    float* row = out + i * V;
    std::fill(row, row + V, -std::numeric_limits<float>::infinity());
    for (size_t k = 0; k < Vd; ++k) row[d2t[k]] = in[i * Vd + k];
  }
}

}  // namespace dspark
