#include "dspark/dspark_models.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "model/synth.h"
#include "sampling/sampling.h"

namespace dspark::testing {

namespace {

uint64_t NameSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h;
}

std::vector<uint8_t> Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Uniform values with standard deviation `stdev` around `center`.
std::vector<float> Values(uint64_t seed, const std::string& name, int64_t n, float center, float stdev) {
  Rng rng(NameSeed(seed, name));
  std::vector<float> v(n);
  for (float& x : v) x = center + static_cast<float>((2.0 * rng.Uniform() - 1.0) * std::sqrt(3.0)) * stdev;
  return v;
}

class TensorWriter {
 public:
  TensorWriter(gguf::Writer& w, uint64_t seed, float gain) : w_(w), seed_(seed), gain_(gain) {}
  // ggml shape {cols, rows}; std gain/sqrt(cols).
  Status Matrix(const std::string& name, int64_t cols, int64_t rows, float gain = 0) {
    const float g = gain > 0 ? gain : gain_;
    return w_.AddTensor(name, DType::kF32, {cols, rows},
                        Bytes(Values(seed_, name, cols * rows, 0.0f, g / std::sqrt(static_cast<float>(cols)))));
  }
  Status Vector(const std::string& name, int64_t n, float center, float spread) {
    return w_.AddTensor(name, DType::kF32, {n}, Bytes(Values(seed_, name, n, center, spread)));
  }
  Status Layer(int il, int n_embd, int n_head, int n_head_kv, int head_dim, int n_ff, bool sinks) {
    auto n = [il](const char* part) { return fmt::format("blk.{}.{}", il, part); };
    DSPARK_TRY(Vector(n("attn_norm.weight"), n_embd, 1.0f, 0.1f));
    DSPARK_TRY(Matrix(n("attn_q.weight"), n_embd, n_head * head_dim));
    DSPARK_TRY(Matrix(n("attn_k.weight"), n_embd, n_head_kv * head_dim));
    DSPARK_TRY(Matrix(n("attn_v.weight"), n_embd, n_head_kv * head_dim));
    DSPARK_TRY(Matrix(n("attn_output.weight"), n_head * head_dim, n_embd));
    DSPARK_TRY(Vector(n("attn_q_norm.weight"), head_dim, 1.0f, 0.1f));
    DSPARK_TRY(Vector(n("attn_k_norm.weight"), head_dim, 1.0f, 0.1f));
    if (sinks) DSPARK_TRY(Vector(n("attn_sinks.weight"), n_head, 0.0f, 1.0f));
    DSPARK_TRY(Vector(n("ffn_norm.weight"), n_embd, 1.0f, 0.1f));
    DSPARK_TRY(Matrix(n("ffn_gate.weight"), n_embd, n_ff));
    DSPARK_TRY(Matrix(n("ffn_up.weight"), n_embd, n_ff));
    DSPARK_TRY(Matrix(n("ffn_down.weight"), n_ff, n_embd));
    return Status::Ok();
  }

 private:
  gguf::Writer& w_;
  uint64_t seed_;
  float gain_;
};

void Hparams(gguf::Writer& w, const std::string& a, int n_embd, int n_layer, int n_ff, int n_head, int n_head_kv,
             int head_dim) {
  w.SetU32(a + ".context_length", 512);
  w.SetU32(a + ".embedding_length", n_embd);
  w.SetU32(a + ".block_count", n_layer);
  w.SetU32(a + ".feed_forward_length", n_ff);
  w.SetU32(a + ".attention.head_count", n_head);
  w.SetU32(a + ".attention.head_count_kv", n_head_kv);
  w.SetU32(a + ".attention.key_length", head_dim);
  w.SetU32(a + ".attention.value_length", head_dim);
  w.SetF32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.SetF32(a + ".rope.freq_base", 10000.0f);
}

// The target's tokenizer, one token renamed if rename_token >= 0.
Status CopyTokenizer(const gguf::File& target, int rename_token, gguf::Writer& w) {
  w.CopyMetadataFrom(target, "tokenizer.");
  if (rename_token < 0) return Status::Ok();
  DSPARK_ASSIGN_OR_RETURN(std::vector<std::string> tokens, target.GetStringArray("tokenizer.ggml.tokens"));
  tokens[rename_token] = "renamed";
  w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
  return Status::Ok();
}

// A reduced draft vocabulary of V_d absolute target ids, a stride-7 walk (unique because 7 is
// coprime with the vocabulary size V).
Status AddD2t(int V_d, int V, gguf::Writer& w) {
  std::vector<uint8_t> b(8 * static_cast<size_t>(V_d));
  for (int j = 0; j < V_d; ++j) {
    const int64_t id = (static_cast<int64_t>(j) * 7 + 3) % V;
    std::memcpy(b.data() + 8 * j, &id, 8);
  }
  return w.AddTensor("d2t", DType::kI64, {V_d}, std::move(b));
}

// The target's hidden size, whatever its architecture.
Result<int64_t> TargetWidth(const gguf::File& target) {
  DSPARK_ASSIGN_OR_RETURN(std::string arch, target.GetString("general.architecture"));
  return target.GetInt(arch + ".embedding_length");
}

}  // namespace

Status WriteTinyTarget(const TinyTargetSpec& s, const std::string& path) {
  gguf::Writer w;
  w.SetString("general.architecture", "qwen3");
  w.SetString("general.name", "dspark-test-target");
  Hparams(w, "qwen3", s.n_embd, s.n_layer, s.n_ff, s.n_head, s.n_head_kv, s.head_dim);
  AddToyVocab(w, s.n_vocab);
  TensorWriter t(w, s.seed, s.weight_gain);
  DSPARK_TRY(t.Matrix("token_embd.weight", s.n_embd, s.n_vocab, s.embd_gain * std::sqrt(static_cast<float>(s.n_embd))));
  if (!s.tied) DSPARK_TRY(t.Matrix("output.weight", s.n_embd, s.n_vocab, s.output_gain));
  DSPARK_TRY(t.Vector("output_norm.weight", s.n_embd, 1.0f, 0.1f));
  for (int il = 0; il < s.n_layer; ++il)
    DSPARK_TRY(t.Layer(il, s.n_embd, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, false));
  return w.WriteFile(path);
}

Status WriteDflash(const DflashSpec& s, const gguf::File& target, const std::string& path) {
  DSPARK_ASSIGN_OR_RETURN(int64_t n_embd_t, TargetWidth(target));
  const gguf::TensorInfo* embd = target.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFound("test: target has no token_embd.weight");
  const int V = static_cast<int>(embd->ne[1]);
  const int E = s.n_embd_override > 0 ? s.n_embd_override : static_cast<int>(n_embd_t);
  const std::string a = "dflash";
  gguf::Writer w;
  w.SetString("general.architecture", s.arch);
  w.SetString("general.name", "dspark-test-draft");
  if (s.write_tokenizer) DSPARK_TRY(CopyTokenizer(target, s.rename_token, w));
  Hparams(w, a, E, s.n_layer, s.n_ff, s.n_head, s.n_head_kv, s.head_dim);
  if (s.write_target_layers) {
    std::vector<int32_t> layers(s.target_layers.begin(), s.target_layers.end());
    w.Set(a + ".target_layers", gguf::Value::I32Array(layers));
  }
  w.SetU32(a + ".block_size", s.block_size);
  w.SetBool(a + ".sample_from_anchor", s.sample_from_anchor);
  if (s.causal) w.SetBool(a + ".attention.causal", true);
  if (s.markov_rank > 0 && s.write_has_conf_key) w.SetBool(a + ".has_confidence_head", s.confidence);
  if (s.mask_token_id >= 0) w.SetU32("tokenizer.ggml.mask_token_id", s.mask_token_id);

  TensorWriter t(w, s.seed, s.gain);
  const int n_feat = E * static_cast<int>(s.target_layers.size());
  DSPARK_TRY(t.Matrix("fc.weight", n_feat, E));
  if (s.fc_scale) DSPARK_TRY(w.AddTensor("fc.scale", DType::kF32, {1}, Bytes({0.75f})));
  DSPARK_TRY(t.Vector("enc.output_norm.weight", E, 1.0f, 0.1f));
  DSPARK_TRY(t.Vector("output_norm.weight", E, 1.0f, 0.1f));
  if (s.own_embd) DSPARK_TRY(t.Matrix("token_embd.weight", E, V, std::sqrt(static_cast<float>(E))));
  const int V_d = s.n_vocab_draft > 0 ? s.n_vocab_draft : V;
  if (s.own_output || s.n_vocab_draft > 0) DSPARK_TRY(t.Matrix("output.weight", E, V_d, 4.0f));
  if (s.n_vocab_draft > 0) {
    DSPARK_TRY(AddD2t(V_d, V, w));
  }
  for (int il = 0; il < s.n_layer; ++il)
    DSPARK_TRY(t.Layer(il, E, s.n_head, s.n_head_kv, s.head_dim, s.n_ff, s.attn_sinks));
  if (s.markov_rank > 0) {
    DSPARK_TRY(t.Matrix("markov_w1.weight", s.markov_rank, V, std::sqrt(static_cast<float>(s.markov_rank))));
    DSPARK_TRY(t.Matrix("markov_w2.weight", s.markov_rank, V_d, 3.0f));
    if (s.markov_scale) DSPARK_TRY(w.AddTensor("markov_w2.scale", DType::kF32, {1}, Bytes({1.5f})));
    if (s.confidence) {
      DSPARK_TRY(t.Matrix("conf_proj.weight", E + s.markov_rank, 1));
      DSPARK_TRY(w.AddTensor("conf_proj.bias", DType::kF32, {1}, Bytes({0.5f})));
    }
  }
  return w.WriteFile(path);
}

Status WriteEagle3(const Eagle3Spec& s, const gguf::File& target, const std::string& path) {
  DSPARK_ASSIGN_OR_RETURN(int64_t n_embd_t, TargetWidth(target));
  const gguf::TensorInfo* embd = target.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFound("test: target has no token_embd.weight");
  const int V = static_cast<int>(embd->ne[1]);
  const int E = s.n_embd_override > 0 ? s.n_embd_override : static_cast<int>(n_embd_t);
  const int E_t = static_cast<int>(n_embd_t);
  const std::string a = "eagle3";
  gguf::Writer w;
  w.SetString("general.architecture", s.arch);
  w.SetString("general.name", "dspark-test-eagle3");
  if (s.write_tokenizer) DSPARK_TRY(CopyTokenizer(target, s.rename_token, w));
  Hparams(w, a, E, s.block_count, s.n_ff, s.n_head, s.n_head_kv, s.head_dim);
  w.SetU32(a + ".vocab_size", V);
  if (s.write_target_layers) {
    std::vector<int32_t> layers(s.target_layers.begin(), s.target_layers.end());
    w.Set(a + ".target_layers", gguf::Value::I32Array(layers));
  }
  w.SetU32(a + ".target_hidden_size", s.target_hidden_override > 0 ? s.target_hidden_override : E_t);
  w.SetBool(a + ".norm_before_residual", s.norm_before_residual);
  w.SetBool(a + ".norm_before_fc", s.norm_before_fc);

  TensorWriter t(w, s.seed, s.gain);
  const int n_feat = E_t * static_cast<int>(s.target_layers.size());
  DSPARK_TRY(t.Matrix("fc.weight", n_feat, E));
  if (s.norm_before_fc && s.write_enc_norm) DSPARK_TRY(t.Vector("enc.output_norm.weight", n_feat, 1.0f, 0.1f));
  DSPARK_TRY(t.Vector("output_norm.weight", E, 1.0f, 0.1f));
  if (s.own_embd) DSPARK_TRY(t.Matrix("token_embd.weight", E, V, std::sqrt(static_cast<float>(E))));
  const int V_d = s.n_vocab_draft > 0 ? s.n_vocab_draft : V;
  if (s.own_output || s.n_vocab_draft > 0) DSPARK_TRY(t.Matrix("output.weight", E, V_d, 4.0f));
  if (s.n_vocab_draft > 0) {
    DSPARK_TRY(AddD2t(V_d, V, w));
  }
  DSPARK_TRY(t.Vector("blk.0.attn_norm.weight", E, 1.0f, 0.1f));
  DSPARK_TRY(t.Vector("blk.0.attn_norm_2.weight", E, 1.0f, 0.1f));
  DSPARK_TRY(t.Matrix("blk.0.attn_q.weight", 2 * E, s.n_head * s.head_dim));
  DSPARK_TRY(t.Matrix("blk.0.attn_k.weight", 2 * E, s.n_head_kv * s.head_dim));
  DSPARK_TRY(t.Matrix("blk.0.attn_v.weight", 2 * E, s.n_head_kv * s.head_dim));
  DSPARK_TRY(t.Matrix("blk.0.attn_output.weight", s.n_head * s.head_dim, E));
  DSPARK_TRY(t.Vector("blk.0.ffn_norm.weight", E, 1.0f, 0.1f));
  DSPARK_TRY(t.Matrix("blk.0.ffn_gate.weight", E, s.n_ff));
  DSPARK_TRY(t.Matrix("blk.0.ffn_up.weight", E, s.n_ff));
  DSPARK_TRY(t.Matrix("blk.0.ffn_down.weight", s.n_ff, E));
  return w.WriteFile(path);
}

TinyTargetSpec GoldenTarget() { return TinyTargetSpec{}; }

DflashSpec GoldenDraft(char which) {
  DflashSpec s;
  if (which == 'a') {
    s.target_layers = {0, 2, 3};
    s.block_size = 5;
    s.seed = 501;
  } else {
    s.sample_from_anchor = false;
    s.n_vocab_draft = 40;
    s.own_embd = true;
    s.attn_sinks = true;
    s.causal = true;
    s.fc_scale = true;
    s.markov_scale = true;
    s.confidence = false;
    s.n_layer = 2;
    s.block_size = 6;
    s.target_layers = {1, 3};
    s.seed = 502;
  }
  return s;
}

Status WriteGoldenModels(const std::string& dir) {
  const std::string target = dir + "/golden_target.gguf";
  DSPARK_TRY(WriteTinyTarget(GoldenTarget(), target));
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> f, gguf::File::Open(target));
  DSPARK_TRY(WriteDflash(GoldenDraft('a'), *f, dir + "/golden_draft_a.gguf"));
  return WriteDflash(GoldenDraft('b'), *f, dir + "/golden_draft_b.gguf");
}

}  // namespace dspark::testing
