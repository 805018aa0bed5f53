#include "model/arch/dflash.h"

#include <fmt/format.h>

#include "model/arch/draft_file.h"
#include "model/quantize.h"
#include "util/log.h"

namespace dspark {

namespace {

constexpr char kArch[] = "dflash";

std::string Key(const char* k) { return std::string(kArch) + "." + k; }

Status CheckArch(const gguf::File& f) {
  DSPARK_ASSIGN_OR_RETURN(std::string arch, f.GetStringOr("general.architecture", ""));
  if (arch != kArch)
    return InvalidArgument("spec: {}: general.architecture is '{}', not dflash", f.path(), arch);
  if (f.FindTensor("selector_hidden.weight") != nullptr)
    return Unimplemented("spec: {}: DFlash2 drafts (selector_hidden.weight) are not supported", f.path());
  if (*f.GetIntOr(Key("hyper_connection.count"), 0) > 0)
    return Unimplemented("spec: {}: DeepSeek-V4 DSpark drafts (dflash.hyper_connection.count > 0) are not supported",
                         f.path());
  return Status::Ok();
}

// The backbone's tensors: feature fusion, norms, embedding, head (the draft's own or the target's,
// with d2t for a reduced vocabulary) and the draft layers.
Status BindBackbone(const gguf::File& f, const Model& target, DraftBinder& b, DflashConfig& c, DflashWeights& w) {
  const int64_t E = c.n_embd;
  const int64_t n_feat = E * static_cast<int64_t>(c.target_layers.size());
  DSPARK_ASSIGN_OR_RETURN(w.fc, b.Matrix("fc.weight", n_feat, E));
  DSPARK_ASSIGN_OR_RETURN(w.fc_scale, b.Scale("fc.scale"));
  DSPARK_ASSIGN_OR_RETURN(w.enc_norm, b.Vector("enc.output_norm.weight", E));
  DSPARK_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", E));
  DSPARK_ASSIGN_OR_RETURN(DraftVocabHead head, BindVocabHead(f, target, E, b));
  w.tok_embd = head.tok_embd;
  w.output = head.output;
  w.d2t = std::move(head.d2t);
  c.n_vocab_draft = head.n_vocab_draft;

  for (int il = 0; il < c.n_layer; ++il) {  // grown block by block, as BindDenseWeights does
    DflashLayer& l = w.layers.emplace_back();
    auto n = [il](const char* part) { return fmt::format("blk.{}.{}", il, part); };
    DSPARK_ASSIGN_OR_RETURN(l.attn_norm, b.Vector(n("attn_norm.weight"), E));
    DSPARK_ASSIGN_OR_RETURN(l.wq, b.Matrix(n("attn_q.weight"), E, c.q_dim()));
    DSPARK_ASSIGN_OR_RETURN(l.wk, b.Matrix(n("attn_k.weight"), E, c.kv_dim()));
    DSPARK_ASSIGN_OR_RETURN(l.wv, b.Matrix(n("attn_v.weight"), E, c.kv_dim()));
    DSPARK_ASSIGN_OR_RETURN(l.wo, b.Matrix(n("attn_output.weight"), c.q_dim(), E));
    DSPARK_ASSIGN_OR_RETURN(l.q_norm, b.Vector(n("attn_q_norm.weight"), c.head_dim));
    DSPARK_ASSIGN_OR_RETURN(l.k_norm, b.Vector(n("attn_k_norm.weight"), c.head_dim));
    DSPARK_ASSIGN_OR_RETURN(l.attn_sinks, b.Vector(n("attn_sinks.weight"), c.n_head, false));
    DSPARK_ASSIGN_OR_RETURN(l.ffn_norm, b.Vector(n("ffn_norm.weight"), E));
    DSPARK_ASSIGN_OR_RETURN(l.w_gate, b.Matrix(n("ffn_gate.weight"), E, c.n_ff));
    DSPARK_ASSIGN_OR_RETURN(l.w_up, b.Matrix(n("ffn_up.weight"), E, c.n_ff));
    DSPARK_ASSIGN_OR_RETURN(l.w_down, b.Matrix(n("ffn_down.weight"), c.n_ff, E));
  }

  return Status::Ok();
}

// DSpark's heads, where the file has them: the Markov head and the confidence head.
Status BindHeads(const gguf::File& f, DraftBinder& b, DflashConfig& c, DflashWeights& w) {
  const int64_t E = c.n_embd;
  // DSpark heads.
  if (const gguf::TensorInfo* w1 = f.FindTensor("markov_w1.weight")) {
    if (w1->ne.empty()) return InvalidArgument("spec: {}: markov_w1.weight has no dimensions", f.path());
    c.markov_rank = static_cast<int>(w1->ne[0]);
    DSPARK_ASSIGN_OR_RETURN(w.markov_w1, b.Matrix("markov_w1.weight", c.markov_rank, c.n_vocab));
    DSPARK_ASSIGN_OR_RETURN(w.markov_w2, b.Matrix("markov_w2.weight", c.markov_rank, c.n_vocab_draft));
    DSPARK_ASSIGN_OR_RETURN(w.markov_scale, b.Scale("markov_w2.scale"));
  }
  const bool conf_tensor = f.FindTensor("conf_proj.weight") != nullptr;
  DSPARK_ASSIGN_OR_RETURN(bool conf_key, f.GetBoolOr(Key("has_confidence_head"), conf_tensor));
  if (conf_key && !conf_tensor)
    return NotFound("spec: {}: dflash.has_confidence_head is true but tensor 'conf_proj.weight' is missing", f.path());
  c.has_confidence = conf_key && conf_tensor && c.markov_rank > 0;
  if (c.has_confidence) {
    DSPARK_ASSIGN_OR_RETURN(w.conf_w, b.Vector("conf_proj.weight", E + c.markov_rank));
    DSPARK_ASSIGN_OR_RETURN(std::vector<float> bias, b.Vector("conf_proj.bias", 1, false));
    w.conf_b = bias.empty() ? 0.0f : bias[0];
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<DflashModel>> DflashModel::Load(const std::string& path, const Model& target,
                                                       const DflashLoadOptions& options) {
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(path));
  return FromFile(std::shared_ptr<const gguf::File>(std::move(file)), target, options);
}

Result<std::unique_ptr<DflashModel>> DflashModel::FromFile(std::shared_ptr<const gguf::File> file,
                                                           const Model& target, const DflashLoadOptions& options) {
  const gguf::File& f = *file;
  DSPARK_TRY(CheckArch(f));
  std::unique_ptr<DflashModel> m(new DflashModel());
  m->file_ = std::move(file);
  DSPARK_TRY(m->ReadConfig(target.config()));
  DraftBinder b(f, "dflash draft");
  DSPARK_TRY(BindBackbone(f, target, b, m->config_, m->weights_));
  DSPARK_TRY(BindHeads(f, b, m->config_, m->weights_));
  b.WarnUnclaimed();
  const bool own_output = f.FindTensor("output.weight") != nullptr;
  const bool own_head = !own_output && m->ReencodeSharedHead();
  if (options.repack) m->Pack(own_output || own_head);
  // Both files were read to build this drafter (the target's for the shared head).
  DSPARK_TRY(f.CheckUnchanged());
  DSPARK_TRY(target.file().CheckUnchanged());
  return m;
}

Status DflashModel::ReadConfig(const ModelConfig& tc) {
  const gguf::File& f = *file_;
  DflashConfig& c = config_;
  DSPARK_ASSIGN_OR_RETURN(DraftLayerShape shape, ReadDraftLayerShape(f, kArch));
  c.n_embd = shape.n_embd;
  c.n_layer = shape.n_layer;
  c.n_ff = shape.n_ff;
  c.n_head = shape.n_head;
  c.n_head_kv = shape.n_head_kv;
  c.head_dim = shape.head_dim;
  c.rms_eps = shape.rms_eps;
  if (c.n_embd != tc.n_embd)
    return InvalidArgument("spec: {}: draft width dflash.embedding_length = {} differs from the target's hidden size "
                           "{}; a dflash draft must be as wide as its target",
                           f.path(), c.n_embd, tc.n_embd);
  c.rope.style = RopeStyle::kNeox;  // llama.cpp always runs this backbone with NeoX RoPE
  c.rope.n_rot = c.head_dim;
  DSPARK_ASSIGN_OR_RETURN(double base, f.GetFloatOr(Key("rope.freq_base"), 10000.0));
  if (!(base > 1)) return InvalidArgument("spec: {}: dflash.rope.freq_base {} must be > 1", f.path(), base);
  c.rope.freq_base = static_cast<float>(base);
  DSPARK_ASSIGN_OR_RETURN(std::string scaling, f.GetStringOr(Key("rope.scaling.type"), "none"));
  if (scaling != "none")
    return Unimplemented("spec: {}: dflash.rope.scaling.type '{}' is not supported yet (only none)", f.path(), scaling);
  if (f.Has(Key("attention.sliding_window")))
    return Unimplemented("spec: {}: sliding-window dflash drafts are not supported yet", f.path());

  // DFlash / DSpark keys.
  if (!f.Has(Key("target_layers")))
    return NotFound("spec: {}: required key 'dflash.target_layers' is missing", f.path());
  DSPARK_ASSIGN_OR_RETURN(std::vector<int64_t> layers, f.GetIntArray(Key("target_layers")));
  if (layers.empty()) return InvalidArgument("spec: {}: dflash.target_layers is empty", f.path());
  for (int64_t l : layers) {
    if (l < 0 || l > tc.n_layer)
      return OutOfRange("spec: {}: dflash.target_layers has {}, outside the target's layers [0, {}] (the target has "
                        "{} layers; values are stored +1, as the input of that layer)",
                        f.path(), l, tc.n_layer, tc.n_layer);
    c.target_layers.push_back(static_cast<int>(l));
  }
  DSPARK_ASSIGN_OR_RETURN(c.block_size, ReadPositive(f, Key("block_size"), 16));
  DSPARK_ASSIGN_OR_RETURN(bool from_anchor, f.GetBoolOr(Key("sample_from_anchor"), true));
  DSPARK_ASSIGN_OR_RETURN(c.causal, f.GetBoolOr(Key("attention.causal"), false));
  // sample_from_anchor is DSpark's (a Markov-head file's) key; DFlash always drafts in place.
  c.layout = f.FindTensor("markov_w1.weight") != nullptr && from_anchor ? BlockLayout::kAnchorFirst
                                                                        : BlockLayout::kBonusAnchor;
  if (c.max_drafts() < 1)
    return InvalidArgument("spec: {}: dflash.block_size {} leaves no draft slot in the bonus-anchor layout", f.path(),
                           c.block_size);
  c.n_vocab = tc.n_vocab;
  if (!f.Has("tokenizer.ggml.mask_token_id"))
    return NotFound("spec: {}: the draft has no mask token (tokenizer.ggml.mask_token_id); it is the token that fills "
                    "the draft block",
                    f.path());
  DSPARK_ASSIGN_OR_RETURN(int64_t mask, f.GetInt("tokenizer.ggml.mask_token_id"));
  if (mask < 0 || mask >= c.n_vocab)
    return OutOfRange("spec: {}: tokenizer.ggml.mask_token_id {} is outside the embedding table [0, {})", f.path(),
                      mask, c.n_vocab);
  c.mask_token_id = static_cast<int32_t>(mask);
  return Status::Ok();
}

bool DflashModel::ReencodeSharedHead() {
  const DflashWeights& w = weights_;
  return ReencodeSharedHeadInto(w.layers.empty() ? DType::kF32 : w.layers[0].wq.type, weights_.output, own_head_);
}

// The drafter's own matrices; a shared target head arrives already packed with the target.
// markov_w2 runs once per chained slot (null without a Markov head: Pack skips it). Projections
// that read the same activations are also packed fused, as in Model; a matrix a fused copy serves
// is not packed again on its own (blocks read Q/K/V through wqkv, the injection K/V through wkv).
void DflashModel::Pack(bool pack_output) {
  DflashWeights& w = weights_;
  std::vector<ops::WeightView*> views = {&w.fc, &w.markov_w2};
  if (pack_output) views.push_back(&w.output);
  for (DflashLayer& l : w.layers) {
    const bool qkv = packed_.PackFused({&l.wq, &l.wk, &l.wv}, &l.wqkv);
    const bool kv = packed_.PackFused({&l.wk, &l.wv}, &l.wkv);
    const bool gate_up = packed_.PackFused({&l.w_gate, &l.w_up}, &l.w_gate_up);
    if (!qkv) views.push_back(&l.wq);
    if (!qkv || !kv)
      for (ops::WeightView* v : {&l.wk, &l.wv}) views.push_back(v);
    if (!gate_up)
      for (ops::WeightView* v : {&l.w_gate, &l.w_up}) views.push_back(v);
    for (ops::WeightView* v : {&l.wo, &l.w_down}) views.push_back(v);
  }
  packed_.Pack(views);
}

}  // namespace dspark
