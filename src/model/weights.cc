#include "model/weights.h"

#include <set>

#include <fmt/format.h>

namespace dspark {

namespace {

// Claims tensors by name and checks shapes; remembers which names were claimed.
class Binder {
 public:
  Binder(const gguf::File& file, const ModelConfig& config) : file_(file), config_(config) {}

  Result<const gguf::TensorInfo*> Find(const std::string& name, const std::vector<int64_t>& ne,
                                       TensorRequirement req) {
    const gguf::TensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) {
      if (req == TensorRequirement::kOptional) return static_cast<const gguf::TensorInfo*>(nullptr);
      return NotFound("model: {}: required tensor '{}' is missing for architecture {}", file_.path(), name,
                      config_.arch);
    }
    claimed_.insert(name);
    std::vector<int64_t> actual = t->ne;
    // Trailing dims of 1 are equivalent ([n] == [n, 1]).
    while (actual.size() > ne.size() && actual.back() == 1) actual.pop_back();
    if (actual != ne) {
      std::string want = "[";
      for (size_t k = 0; k < ne.size(); ++k) want += (k ? ", " : "") + std::to_string(ne[k]);
      want += "]";
      return InvalidArgument(
          "model: {}: tensor '{}' (data at byte {}) has shape {}, expected {} for {} (n_embd={}, n_head={}, "
          "n_head_kv={}, head_dim={}, n_ff={}, n_vocab={}{})",
          file_.path(), name, t->file_offset, t->ShapeString(), want, config_.arch, config_.n_embd,
          config_.n_head, config_.n_head_kv, config_.head_dim, config_.n_ff, config_.n_vocab,
          config_.moe.enabled()
              ? fmt::format(", n_expert={}, n_ff_exp={}", config_.moe.n_expert, config_.moe.n_ff_exp)
              : std::string());
    }
    return t;
  }

  Result<ops::WeightView> Matrix(const std::string& name, int64_t cols, int64_t rows,
                                 TensorRequirement req = TensorRequirement::kRequired) {
    DSPARK_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name, {cols, rows}, req));
    if (t == nullptr) return ops::WeightView{};
    if (!ops::MatMulSupports(t->type))
      return Unimplemented("model: {}: tensor '{}' has type {}, which dspark cannot multiply yet", file_.path(),
                           name, DTypeName(t->type));
    return ops::WeightView{t->data, t->type, rows, cols};
  }

  // The n matrices [rows, cols] of a 3-D expert tensor [cols, rows, n], one view each.
  Result<std::vector<ops::WeightView>> Experts(const std::string& name, int64_t cols, int64_t rows, int64_t n) {
    DSPARK_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name, {cols, rows, n}, TensorRequirement::kRequired));
    if (!ops::MatMulSupports(t->type))
      return Unimplemented("model: {}: tensor '{}' has type {}, which dspark cannot multiply yet", file_.path(),
                           name, DTypeName(t->type));
    std::vector<ops::WeightView> views;
    const size_t bytes = RowBytes(t->type, cols) * static_cast<size_t>(rows);
    for (int64_t e = 0; e < n; ++e) views.push_back(ops::WeightView{t->data + e * bytes, t->type, rows, cols});
    return views;
  }

  Result<std::vector<float>> Vector(const std::string& name, int64_t n,
                                    TensorRequirement req = TensorRequirement::kRequired) {
    DSPARK_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find(name, {n}, req));
    if (t == nullptr) return std::vector<float>{};
    if (Info(t->type).quantized || !ops::CanQuantize(t->type))
      return Unimplemented("model: {}: vector tensor '{}' has type {}, expected f32/f16/bf16", file_.path(), name,
                           DTypeName(t->type));
    std::vector<float> out(n);
    ops::DequantizeRow(t->type, t->data, out.data(), n);
    return out;
  }

  void ReportUnclaimed(std::vector<std::string>* unclaimed) const {
    if (unclaimed == nullptr) return;
    for (const auto& t : file_.tensors())
      if (!claimed_.count(t.name)) unclaimed->push_back(t.name);
  }

 private:
  const gguf::File& file_;
  const ModelConfig& config_;
  std::set<std::string> claimed_;
};

}  // namespace

namespace {
Status BindAttention(Binder& b, const ModelConfig& c, int il, LayerWeights& l);
Status BindMla(Binder& b, const ModelConfig& c, int il, LayerWeights& l, std::vector<std::vector<float>>& derived);
Status BindFfn(Binder& b, const ModelConfig& c, int il, LayerWeights& l);
}  // namespace

Result<ModelWeights> BindDenseWeights(const gguf::File& file, const ModelConfig& c,
                                      std::vector<std::string>* unclaimed) {
  Binder b(file, c);
  ModelWeights w;
  DSPARK_ASSIGN_OR_RETURN(w.tok_embd, b.Matrix("token_embd.weight", c.n_embd, c.n_vocab));
  DSPARK_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", c.n_embd));
  if (c.tied_embeddings) {
    w.output = w.tok_embd;
  } else {
    DSPARK_ASSIGN_OR_RETURN(w.output, b.Matrix("output.weight", c.n_embd, c.n_vocab));
  }
  // rope_freqs is read into the config by the architecture; claim it here so it is not "unused".
  DSPARK_TRY(b.Find("rope_freqs.weight", {c.rope.n_rot / 2}, TensorRequirement::kOptional).status());

  // Grown block by block: block_count is only a claim until blk.N's tensors are found, and a file
  // that claims millions of blocks must fail on the first missing tensor, not allocate for them all.
  for (int il = 0; il < c.n_layer + c.n_nextn; ++il) {
    LayerWeights& l = w.layers.emplace_back();
    auto n = [il](const char* part) { return fmt::format("blk.{}.{}", il, part); };
    DSPARK_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(n("attn_norm.weight"), c.n_embd));
    DSPARK_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(n("ffn_norm.weight"), c.n_embd));
    if (c.mla.enabled()) {
      DSPARK_TRY(BindMla(b, c, il, l, w.derived));
    } else {
      DSPARK_TRY(BindAttention(b, c, il, l));
    }
    DSPARK_TRY(BindFfn(b, c, il, l));
    if (il >= c.n_layer) {
      NextnWeights& x = w.nextn.emplace_back();
      DSPARK_ASSIGN_OR_RETURN(x.eh_proj, b.Matrix(n("nextn.eh_proj.weight"), 2 * c.n_embd, c.n_embd));
      DSPARK_ASSIGN_OR_RETURN(x.enorm, b.Vector(n("nextn.enorm.weight"), c.n_embd));
      DSPARK_ASSIGN_OR_RETURN(x.hnorm, b.Vector(n("nextn.hnorm.weight"), c.n_embd));
      DSPARK_ASSIGN_OR_RETURN(x.shared_head_norm,
                              b.Vector(n("nextn.shared_head_norm.weight"), c.n_embd, TensorRequirement::kOptional));
      DSPARK_ASSIGN_OR_RETURN(x.embed_tokens, b.Matrix(n("nextn.embed_tokens.weight"), c.n_embd, c.n_vocab,
                                                       TensorRequirement::kOptional));
      DSPARK_ASSIGN_OR_RETURN(x.shared_head_head, b.Matrix(n("nextn.shared_head_head.weight"), c.n_embd, c.n_vocab,
                                                           TensorRequirement::kOptional));
    }
  }
  b.ReportUnclaimed(unclaimed);
  return w;
}

namespace {

std::string TensorName(int il, const char* part) { return fmt::format("blk.{}.{}", il, part); }

}  // namespace

namespace {

Status BindAttention(Binder& b, const ModelConfig& c, int il, LayerWeights& l) {
  auto n = [il](const char* part) { return TensorName(il, part); };
  const auto bias_req = c.traits.qkv_bias ? TensorRequirement::kRequired : TensorRequirement::kOptional;
  const auto norm_req = c.traits.qk_norm ? TensorRequirement::kRequired : TensorRequirement::kOptional;
  {
    DSPARK_ASSIGN_OR_RETURN(l.wq, b.Matrix(n("attn_q.weight"), c.n_embd, c.q_dim()));
    DSPARK_ASSIGN_OR_RETURN(l.wk, b.Matrix(n("attn_k.weight"), c.n_embd, c.kv_dim()));
    DSPARK_ASSIGN_OR_RETURN(l.wv, b.Matrix(n("attn_v.weight"), c.n_embd, c.v_dim()));
    DSPARK_ASSIGN_OR_RETURN(l.wo, b.Matrix(n("attn_output.weight"), int64_t{c.n_head} * c.head_dim_v, c.n_embd));
    DSPARK_ASSIGN_OR_RETURN(l.bq, b.Vector(n("attn_q.bias"), c.q_dim(), bias_req));
    DSPARK_ASSIGN_OR_RETURN(l.bk, b.Vector(n("attn_k.bias"), c.kv_dim(), bias_req));
    DSPARK_ASSIGN_OR_RETURN(l.bv, b.Vector(n("attn_v.bias"), c.v_dim(), bias_req));
    DSPARK_ASSIGN_OR_RETURN(l.q_norm, b.Vector(n("attn_q_norm.weight"), c.head_dim, norm_req));
    DSPARK_ASSIGN_OR_RETURN(l.k_norm, b.Vector(n("attn_k_norm.weight"), c.head_dim, norm_req));
  }
  return Status::Ok();
}

Status BindMla(Binder& b, const ModelConfig& c, int il, LayerWeights& l, std::vector<std::vector<float>>& derived) {
  auto n = [il](const char* part) { return TensorName(il, part); };
  const MlaConfig& m = c.mla;
  const int64_t q_rows = int64_t{c.n_head} * (m.nope_dim + m.rope_dim);
  if (m.q_lora_rank > 0) {
    DSPARK_ASSIGN_OR_RETURN(l.wq_a, b.Matrix(n("attn_q_a.weight"), c.n_embd, m.q_lora_rank));
    DSPARK_ASSIGN_OR_RETURN(l.q_a_norm, b.Vector(n("attn_q_a_norm.weight"), m.q_lora_rank));
    DSPARK_ASSIGN_OR_RETURN(l.wq_b, b.Matrix(n("attn_q_b.weight"), m.q_lora_rank, q_rows));
  } else {
    DSPARK_ASSIGN_OR_RETURN(l.wq, b.Matrix(n("attn_q.weight"), c.n_embd, q_rows));
  }
  DSPARK_ASSIGN_OR_RETURN(l.wkv_a, b.Matrix(n("attn_kv_a_mqa.weight"), c.n_embd, m.kv_lora_rank + m.rope_dim));
  DSPARK_ASSIGN_OR_RETURN(l.kv_a_norm, b.Vector(n("attn_kv_a_norm.weight"), m.kv_lora_rank));
  DSPARK_ASSIGN_OR_RETURN(l.wo, b.Matrix(n("attn_output.weight"), int64_t{c.n_head} * m.v_dim, c.n_embd));
  if (m.split_kv_b) {
    DSPARK_ASSIGN_OR_RETURN(l.wk_b, b.Experts(n("attn_k_b.weight"), m.nope_dim, m.kv_lora_rank, c.n_head));
    DSPARK_ASSIGN_OR_RETURN(l.wv_b, b.Experts(n("attn_v_b.weight"), m.kv_lora_rank, m.v_dim, c.n_head));
    return Status::Ok();
  }
  // The older combined attn_kv_b: per head nope_dim key rows then v_dim value rows, each
  // kv_lora_rank wide. The value rows are used as they are; the key rows are transposed once
  // (F32), since the query is mapped through them the other way.
  const int64_t per_head = m.nope_dim + m.v_dim;
  DSPARK_ASSIGN_OR_RETURN(ops::WeightView kv_b, b.Matrix(n("attn_kv_b.weight"), m.kv_lora_rank, c.n_head * per_head));
  const size_t row_bytes = RowBytes(kv_b.type, kv_b.cols);
  const auto* rows = static_cast<const uint8_t*>(kv_b.data);
  std::vector<float> row(m.kv_lora_rank);
  for (int h = 0; h < c.n_head; ++h) {
    const uint8_t* head = rows + static_cast<size_t>(h) * per_head * row_bytes;
    l.wv_b.push_back(ops::WeightView{head + m.nope_dim * row_bytes, kv_b.type, m.v_dim, m.kv_lora_rank});
    std::vector<float>& t = derived.emplace_back(static_cast<size_t>(m.kv_lora_rank) * m.nope_dim);
    for (int i = 0; i < m.nope_dim; ++i) {
      ops::DequantizeRow(kv_b.type, head + i * row_bytes, row.data(), m.kv_lora_rank);
      for (int r = 0; r < m.kv_lora_rank; ++r) t[static_cast<size_t>(r) * m.nope_dim + i] = row[r];
    }
    l.wk_b.push_back(ops::WeightView{t.data(), DType::kF32, m.kv_lora_rank, m.nope_dim});
  }
  return Status::Ok();
}

Status BindFfn(Binder& b, const ModelConfig& c, int il, LayerWeights& l) {
  auto n = [il](const char* part) { return TensorName(il, part); };
  if (!c.moe.Layer(il)) {
    DSPARK_ASSIGN_OR_RETURN(l.w_gate, b.Matrix(n("ffn_gate.weight"), c.n_embd, c.n_ff));
    DSPARK_ASSIGN_OR_RETURN(l.w_up, b.Matrix(n("ffn_up.weight"), c.n_embd, c.n_ff));
    DSPARK_ASSIGN_OR_RETURN(l.w_down, b.Matrix(n("ffn_down.weight"), c.n_ff, c.n_embd));
    return Status::Ok();
  }
  const MoeConfig& m = c.moe;
  DSPARK_ASSIGN_OR_RETURN(l.router, b.Matrix(n("ffn_gate_inp.weight"), c.n_embd, m.n_expert));
  DSPARK_ASSIGN_OR_RETURN(l.gate_exps, b.Experts(n("ffn_gate_exps.weight"), c.n_embd, m.n_ff_exp, m.n_expert));
  DSPARK_ASSIGN_OR_RETURN(l.up_exps, b.Experts(n("ffn_up_exps.weight"), c.n_embd, m.n_ff_exp, m.n_expert));
  DSPARK_ASSIGN_OR_RETURN(l.down_exps, b.Experts(n("ffn_down_exps.weight"), m.n_ff_exp, c.n_embd, m.n_expert));
  DSPARK_ASSIGN_OR_RETURN(l.exp_probs_b, b.Vector(n("exp_probs_b.bias"), m.n_expert, TensorRequirement::kOptional));
  if (m.n_shared > 0) {
    const int64_t width = int64_t{m.n_shared} * m.n_ff_exp;
    DSPARK_ASSIGN_OR_RETURN(l.gate_shexp, b.Matrix(n("ffn_gate_shexp.weight"), c.n_embd, width));
    DSPARK_ASSIGN_OR_RETURN(l.up_shexp, b.Matrix(n("ffn_up_shexp.weight"), c.n_embd, width));
    DSPARK_ASSIGN_OR_RETURN(l.down_shexp, b.Matrix(n("ffn_down_shexp.weight"), width, c.n_embd));
  }
  return Status::Ok();
}

}  // namespace
}  // namespace dspark
