#include "model/arch/eagle3.h"

#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/draft_file.h"

namespace dspark {

namespace {

constexpr char kArch[] = "eagle3";

std::string Key(const char* k) { return std::string(kArch) + "." + k; }

}  // namespace

Result<std::unique_ptr<Eagle3Model>> Eagle3Model::Load(const std::string& path, const Model& target,
                                                       const Eagle3LoadOptions& options) {
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(path));
  return FromFile(std::shared_ptr<const gguf::File>(std::move(file)), target, options);
}

Result<std::unique_ptr<Eagle3Model>> Eagle3Model::FromFile(std::shared_ptr<const gguf::File> file,
                                                           const Model& target, const Eagle3LoadOptions& options) {
  const gguf::File& f = *file;
  DSPARK_ASSIGN_OR_RETURN(std::string arch, f.GetStringOr("general.architecture", ""));
  if (arch != kArch) return InvalidArgument("spec: {}: general.architecture is '{}', not eagle3", f.path(), arch);
  std::unique_ptr<Eagle3Model> m(new Eagle3Model());
  m->file_ = std::move(file);
  DSPARK_TRY(m->ReadConfig(target.config()));
  DSPARK_TRY(m->Bind(target));
  if (options.repack) m->Pack(f.FindTensor("output.weight") != nullptr || !m->own_head_.empty());
  // Both files were read to build this head (the target's for a shared embedding and LM head).
  DSPARK_TRY(f.CheckUnchanged());
  DSPARK_TRY(target.file().CheckUnchanged());
  return m;
}

Status Eagle3Model::ReadConfig(const ModelConfig& tc) {
  const gguf::File& f = *file_;
  Eagle3Config& c = config_;
  DSPARK_ASSIGN_OR_RETURN(DraftLayerShape shape, ReadDraftLayerShape(f, kArch));
  if (shape.n_layer != 1)
    return InvalidArgument("spec: {}: eagle3.block_count is {}; an EAGLE-3 head has exactly one decoder layer",
                           f.path(), shape.n_layer);
  c.n_embd = shape.n_embd;
  c.n_ff = shape.n_ff;
  c.n_head = shape.n_head;
  c.n_head_kv = shape.n_head_kv;
  c.head_dim = shape.head_dim;
  c.rms_eps = shape.rms_eps;
  DSPARK_ASSIGN_OR_RETURN(int n_ctx_train, ReadPositive(f, Key("context_length"), 2048));
  // llama.cpp runs the head as a llama-family model: adjacent-pair RoPE (its converter permutes
  // Q and K for it).
  DSPARK_TRY(ReadRope(f, kArch, c.head_dim, n_ctx_train, RopeStyle::kNormal, c.rope));

  if (!f.Has(Key("target_layers")))
    return NotFound("spec: {}: required key 'eagle3.target_layers' is missing", f.path());
  DSPARK_ASSIGN_OR_RETURN(std::vector<int64_t> layers, f.GetIntArray(Key("target_layers")));
  if (layers.size() != 3)
    return InvalidArgument("spec: {}: eagle3.target_layers has {} entries; EAGLE-3 fuses exactly 3 target layers",
                           f.path(), layers.size());
  for (int64_t l : layers) {
    if (l < 0 || l > tc.n_layer)
      return OutOfRange("spec: {}: eagle3.target_layers has {}, outside the target's layers [0, {}] (values name the "
                        "input of that layer; {} is the last layer's output)",
                        f.path(), l, tc.n_layer, tc.n_layer);
    c.target_layers.push_back(static_cast<int>(l));
  }
  DSPARK_ASSIGN_OR_RETURN(c.target_hidden, ReadPositive(f, Key("target_hidden_size"), tc.n_embd));
  if (c.target_hidden != tc.n_embd)
    return InvalidArgument("spec: {}: eagle3.target_hidden_size {} differs from the target's hidden size {}; use a "
                           "head trained (or converted) for this target",
                           f.path(), c.target_hidden, tc.n_embd);
  DSPARK_ASSIGN_OR_RETURN(c.norm_before_residual, f.GetBoolOr(Key("norm_before_residual"), false));
  DSPARK_ASSIGN_OR_RETURN(c.norm_before_fc, f.GetBoolOr(Key("norm_before_fc"), false));
  c.n_vocab = tc.n_vocab;
  return Status::Ok();
}

Status Eagle3Model::Bind(const Model& target) {
  const gguf::File& f = *file_;
  Eagle3Config& c = config_;
  Eagle3Weights& w = weights_;
  DraftBinder b(f, "eagle3 draft");
  const int64_t E = c.n_embd;
  DSPARK_ASSIGN_OR_RETURN(w.fc, b.Matrix("fc.weight", c.n_features(), E));
  if (c.norm_before_fc) {
    DSPARK_ASSIGN_OR_RETURN(w.enc_norm, b.Vector("enc.output_norm.weight", c.n_features()));
  }
  DSPARK_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", E));
  DSPARK_ASSIGN_OR_RETURN(DraftVocabHead head, BindVocabHead(f, target, E, b));
  w.tok_embd = head.tok_embd;
  w.output = head.output;
  w.d2t = std::move(head.d2t);
  c.n_vocab_draft = head.n_vocab_draft;

  auto n = [](const char* part) { return fmt::format("blk.0.{}", part); };
  DSPARK_ASSIGN_OR_RETURN(w.attn_norm, b.Vector(n("attn_norm.weight"), E));
  DSPARK_ASSIGN_OR_RETURN(w.hidden_norm, b.Vector(n("attn_norm_2.weight"), E));
  DSPARK_ASSIGN_OR_RETURN(w.wq, b.Matrix(n("attn_q.weight"), 2 * E, c.q_dim()));
  DSPARK_ASSIGN_OR_RETURN(w.wk, b.Matrix(n("attn_k.weight"), 2 * E, c.kv_dim()));
  DSPARK_ASSIGN_OR_RETURN(w.wv, b.Matrix(n("attn_v.weight"), 2 * E, c.kv_dim()));
  DSPARK_ASSIGN_OR_RETURN(w.wo, b.Matrix(n("attn_output.weight"), c.q_dim(), E));
  DSPARK_ASSIGN_OR_RETURN(w.ffn_norm, b.Vector(n("ffn_norm.weight"), E));
  DSPARK_ASSIGN_OR_RETURN(w.w_gate, b.Matrix(n("ffn_gate.weight"), E, c.n_ff));
  DSPARK_ASSIGN_OR_RETURN(w.w_up, b.Matrix(n("ffn_up.weight"), E, c.n_ff));
  DSPARK_ASSIGN_OR_RETURN(w.w_down, b.Matrix(n("ffn_down.weight"), c.n_ff, E));
  (void)b.Find("rope_freqs.weight", {c.rope.n_rot / 2}, false);  // read by ReadRope
  b.WarnUnclaimed();
  if (!head.own_output) ReencodeSharedHeadInto(w.wq.type, w.output, own_head_);
  return Status::Ok();
}

// The head's own matrices (a shared target head arrives packed with the target, unless it was
// re-encoded). Q/K/V and gate/up read the same activations: packed fused, as in Model.
void Eagle3Model::Pack(bool pack_output) {
  Eagle3Weights& w = weights_;
  std::vector<ops::WeightView*> views = {&w.fc, &w.wo, &w.w_down};
  if (pack_output) views.push_back(&w.output);
  if (!packed_.PackFused({&w.wq, &w.wk, &w.wv}, &w.wqkv))
    for (ops::WeightView* v : {&w.wq, &w.wk, &w.wv}) views.push_back(v);
  if (!packed_.PackFused({&w.w_gate, &w.w_up}, &w.w_gate_up))
    for (ops::WeightView* v : {&w.w_gate, &w.w_up}) views.push_back(v);
  packed_.Pack(views);
}

}  // namespace dspark
