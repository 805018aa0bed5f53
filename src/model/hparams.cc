// Reading the `<arch>.*` hyperparameters shared by the dense llama family, with range checks.
#include <cmath>

#include <fmt/format.h>

#include "kernels/ops.h"
#include "model/arch/arch.h"

namespace dspark {

namespace {

Result<int> PositiveInt(const gguf::File& f, const std::string& key, int64_t fallback = -1) {
  Result<int64_t> v = fallback >= 0 ? f.GetIntOr(key, fallback) : f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v <= 0 || *v > (1 << 26))
    return InvalidArgument("model: {}: '{}' = {} is out of range (expected 1..{})", f.path(), key, *v, 1 << 26);
  return static_cast<int>(*v);
}

}  // namespace

Status ReadRope(const gguf::File& f, const std::string& arch, int head_dim, int n_ctx_train, RopeStyle style,
                RopeConfig& r) {
  auto key = [&](const char* k) { return arch + "." + k; };
  r.style = style;
  DSPARK_ASSIGN_OR_RETURN(r.n_rot, PositiveInt(f, key("rope.dimension_count"), head_dim));
  if (r.n_rot > head_dim || r.n_rot % 2 != 0)
    return InvalidArgument("model: {}: rope.dimension_count {} must be even and <= head_dim {}", f.path(), r.n_rot,
                           head_dim);
  DSPARK_ASSIGN_OR_RETURN(double base, f.GetFloatOr(key("rope.freq_base"), 10000.0));
  if (!(base > 1)) return InvalidArgument("model: {}: rope.freq_base {} must be > 1", f.path(), base);
  r.freq_base = static_cast<float>(base);

  // As llama.cpp reads them: the type defaults to linear, the factor falls back to the older
  // rope.scale_linear, and attn_factor scales cos and sin whatever the type.
  DSPARK_ASSIGN_OR_RETURN(std::string scaling, f.GetStringOr(key("rope.scaling.type"), "linear"));
  DSPARK_ASSIGN_OR_RETURN(double factor, f.GetFloatOr(key("rope.scaling.factor"), 0.0));
  if (factor == 0.0) {
    DSPARK_ASSIGN_OR_RETURN(factor, f.GetFloatOr(key("rope.scale_linear"), 0.0));
  }
  if (factor < 0) return InvalidArgument("model: {}: rope scaling factor {} is negative", f.path(), factor);
  DSPARK_ASSIGN_OR_RETURN(double attn_factor, f.GetFloatOr(key("rope.scaling.attn_factor"), 1.0));
  if (!(attn_factor > 0)) return InvalidArgument("model: {}: rope.scaling.attn_factor {} must be > 0", f.path(), attn_factor);
  r.attn_factor = static_cast<float>(attn_factor);
  if (scaling == "none" || factor == 0.0 || factor == 1.0) {
    r.scaling = RopeScaling::kNone;
  } else if (scaling == "linear") {
    r.scaling = RopeScaling::kLinear;
    r.freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling == "yarn") {
    r.scaling = RopeScaling::kYarn;
    r.freq_scale = static_cast<float>(1.0 / factor);
    DSPARK_ASSIGN_OR_RETURN(int64_t orig, f.GetIntOr(key("rope.scaling.original_context_length"), n_ctx_train));
    r.n_ctx_orig = static_cast<int>(orig);
    r.yarn_ext_factor = 1.0f;
    if (factor > 1.0) r.attn_factor *= 1.0f + 0.1f * std::log(static_cast<float>(factor));
  } else {
    return Unimplemented("model: {}: rope scaling type '{}' is not supported (none, linear, yarn)", f.path(), scaling);
  }
  if (const gguf::TensorInfo* ff = f.FindTensor("rope_freqs.weight")) {
    if (ff->NumElements() != r.n_rot / 2 || Info(ff->type).quantized)
      return InvalidArgument("model: {}: rope_freqs.weight has shape {} type {}, expected [{}] f32", f.path(),
                             ff->ShapeString(), DTypeName(ff->type), r.n_rot / 2);
    r.freq_factors.resize(r.n_rot / 2);
    ops::DequantizeRow(ff->type, ff->data, r.freq_factors.data(), r.n_rot / 2);
  }
  return Status::Ok();
}

Result<ModelConfig> ReadDenseHparams(const gguf::File& f, std::string_view arch_view, const ArchTraits& traits) {
  const std::string arch(arch_view);
  auto key = [&](const char* k) { return arch + "." + k; };
  ModelConfig c;
  c.arch = arch;
  c.traits = traits;
  c.name = *f.GetStringOr("general.name", "");
  DSPARK_ASSIGN_OR_RETURN(c.n_embd, PositiveInt(f, key("embedding_length")));
  DSPARK_ASSIGN_OR_RETURN(c.n_layer, PositiveInt(f, key("block_count")));
  DSPARK_ASSIGN_OR_RETURN(c.n_ff, PositiveInt(f, key("feed_forward_length")));
  DSPARK_ASSIGN_OR_RETURN(c.n_head, PositiveInt(f, key("attention.head_count")));
  DSPARK_ASSIGN_OR_RETURN(c.n_head_kv, PositiveInt(f, key("attention.head_count_kv"), c.n_head));
  DSPARK_ASSIGN_OR_RETURN(c.n_ctx_train, PositiveInt(f, key("context_length"), 2048));
  if (c.n_embd % c.n_head != 0 && !f.Has(key("attention.key_length")))
    return InvalidArgument("model: {}: n_embd {} is not divisible by n_head {} and no key_length is given", f.path(),
                           c.n_embd, c.n_head);
  DSPARK_ASSIGN_OR_RETURN(c.head_dim, PositiveInt(f, key("attention.key_length"), c.n_embd / c.n_head));
  DSPARK_ASSIGN_OR_RETURN(c.head_dim_v, PositiveInt(f, key("attention.value_length"), c.head_dim));
  if (c.n_head % c.n_head_kv != 0)
    return InvalidArgument("model: {}: n_head {} is not a multiple of n_head_kv {}", f.path(), c.n_head, c.n_head_kv);
  DSPARK_ASSIGN_OR_RETURN(double eps, f.GetFloatOr(key("attention.layer_norm_rms_epsilon"), 1e-5));
  if (!(eps > 0 && eps < 1)) return InvalidArgument("model: {}: rms epsilon {} out of range", f.path(), eps);
  c.rms_eps = static_cast<float>(eps);

  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFound("model: {}: required tensor 'token_embd.weight' is missing", f.path());
  if (embd->ne.size() != 2)
    return InvalidArgument("model: {}: token_embd.weight has shape {}, expected 2 dims", f.path(), embd->ShapeString());
  c.n_vocab = static_cast<int>(embd->ne[1]);
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;

  DSPARK_TRY(ReadRope(f, arch, c.head_dim, c.n_ctx_train, traits.rope_style, c.rope));
  return c;
}

Status ReadMoeHparams(const gguf::File& f, std::string_view arch_view, bool required, ModelConfig& c) {
  const std::string arch(arch_view);
  auto key = [&](const char* k) { return arch + "." + k; };
  MoeConfig& m = c.moe;
  DSPARK_ASSIGN_OR_RETURN(int64_t n_expert, f.GetIntOr(key("expert_count"), 0));
  if (n_expert == 0) {
    if (required) return NotFound("model: {}: '{}' is missing or 0: {} is a mixture-of-experts architecture",
                                  f.path(), key("expert_count"), arch);
    return Status::Ok();
  }
  if (n_expert < 0 || n_expert > 4096)
    return InvalidArgument("model: {}: '{}' = {} is out of range (1..4096)", f.path(), key("expert_count"), n_expert);
  m.n_expert = static_cast<int>(n_expert);
  DSPARK_ASSIGN_OR_RETURN(m.n_expert_used, PositiveInt(f, key("expert_used_count")));
  if (m.n_expert_used > m.n_expert)
    return InvalidArgument("model: {}: '{}' = {} exceeds '{}' = {}", f.path(), key("expert_used_count"),
                           m.n_expert_used, key("expert_count"), m.n_expert);
  // As llama.cpp's qwen3moe: without the key, an expert is as wide as the dense FFN split over the
  // used experts (the llama family overrides this: Mixtral's experts are feed_forward_length wide).
  DSPARK_ASSIGN_OR_RETURN(m.n_ff_exp, PositiveInt(f, key("expert_feed_forward_length"), c.n_ff / m.n_expert_used));
  DSPARK_ASSIGN_OR_RETURN(bool norm, f.GetBoolOr(key("expert_weights_norm"), true));
  m.norm_weights = norm;
  DSPARK_ASSIGN_OR_RETURN(double scale, f.GetFloatOr(key("expert_weights_scale"), 0.0));
  if (!(scale >= 0 && scale < 1e6))
    return InvalidArgument("model: {}: '{}' = {} is out of range", f.path(), key("expert_weights_scale"), scale);
  m.weights_scale = static_cast<float>(scale);
  DSPARK_ASSIGN_OR_RETURN(int64_t shared, f.GetIntOr(key("expert_shared_count"), 0));
  DSPARK_ASSIGN_OR_RETURN(int64_t leading, f.GetIntOr(key("leading_dense_block_count"), 0));
  if (shared < 0 || shared > m.n_expert)
    return InvalidArgument("model: {}: '{}' = {} is out of range (0..{})", f.path(), key("expert_shared_count"), shared,
                           m.n_expert);
  if (leading < 0 || leading > c.n_layer)
    return InvalidArgument("model: {}: '{}' = {} is out of range (0..{} blocks)", f.path(),
                           key("leading_dense_block_count"), leading, c.n_layer);
  m.n_shared = static_cast<int>(shared);
  m.n_leading_dense = static_cast<int>(leading);
  DSPARK_ASSIGN_OR_RETURN(int64_t groups, f.GetIntOr(key("expert_group_count"), 0));
  DSPARK_ASSIGN_OR_RETURN(int64_t groups_used, f.GetIntOr(key("expert_group_used_count"), 0));
  if (groups > 1) {
    // As llama.cpp checks them.
    if (groups >= m.n_expert || m.n_expert % groups != 0 || groups_used <= 0 || groups_used >= groups)
      return InvalidArgument("model: {}: {} expert groups of which {} used do not divide {} experts", f.path(), groups,
                             groups_used, m.n_expert);
    if (groups_used * (m.n_expert / groups) < m.n_expert_used)
      return InvalidArgument("model: {}: {} of {} expert groups hold fewer than the {} experts used", f.path(),
                             groups_used, groups, m.n_expert_used);
    m.n_group = static_cast<int>(groups);
    m.n_group_used = static_cast<int>(groups_used);
  }
  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax, 2 sigmoid (0: the architecture's default).
  DSPARK_ASSIGN_OR_RETURN(int64_t gating, f.GetIntOr(key("expert_gating_func"), 1));
  if (gating == 0 || gating == 1) {
    m.gating = ExpertGating::kSoftmax;
  } else if (gating == 2) {
    m.gating = ExpertGating::kSigmoid;
  } else {
    return Unimplemented("model: {}: '{}' = {} is not a gating function dspark knows (1 softmax, 2 sigmoid)",
                         f.path(), key("expert_gating_func"), gating);
  }
  return Status::Ok();
}

}  // namespace dspark
