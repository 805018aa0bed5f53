#include "model/synth.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kernels/ops.h"
#include "model/arch/arch.h"
#include "model/quantize.h"
#include "sampling/sampling.h"

namespace dspark {

std::optional<SynthSpec> SynthShape(const std::string& name) {
  SynthSpec s;
  s.matrix_type = DType::kQ8_0;
  s.weight_gain = 1.0f;
  if (name == "qwen3-0.6b") {
    s.arch = "qwen3"; s.n_vocab = 151936; s.n_embd = 1024; s.n_layer = 28; s.n_head = 16; s.n_head_kv = 8;
    s.head_dim = 128; s.n_ff = 3072; s.n_ctx = 40960; s.rope_base = 1000000.0f; s.tied_embeddings = true;
  } else if (name == "qwen3-1.7b") {
    s.arch = "qwen3"; s.n_vocab = 151936; s.n_embd = 2048; s.n_layer = 28; s.n_head = 16; s.n_head_kv = 8;
    s.head_dim = 128; s.n_ff = 6144; s.n_ctx = 40960; s.rope_base = 1000000.0f; s.tied_embeddings = true;
  } else if (name == "llama-3.2-1b") {
    s.arch = "llama"; s.n_vocab = 128256; s.n_embd = 2048; s.n_layer = 16; s.n_head = 32; s.n_head_kv = 8;
    s.head_dim = 64; s.n_ff = 8192; s.n_ctx = 131072; s.rope_base = 500000.0f; s.tied_embeddings = true;
    s.llama3_rope_freqs = true; s.rms_eps = 1e-5f;
  } else if (name == "deepseek-v2-lite") {
    // DeepSeek-V2-Lite's config: 27 blocks, the first dense, 64 routed experts (6 used) and 2
    // shared, softmax gating, weight scale 1, no query LoRA, YaRN x40 over a 4,096-token original.
    s.arch = "deepseek2"; s.n_vocab = 102400; s.n_embd = 2048; s.n_layer = 27; s.n_head = 16; s.n_head_kv = 16;
    s.n_ff = 10944; s.n_ctx = 163840; s.rope_base = 10000.0f; s.tied_embeddings = false; s.rms_eps = 1e-6f;
    s.n_expert = 64; s.n_expert_used = 6; s.n_ff_exp = 1408; s.n_expert_shared = 2; s.n_leading_dense = 1;
    s.expert_weights_norm = false; s.expert_weights_scale = 1.0f;
    s.kv_lora_rank = 512; s.qk_nope_dim = 128; s.qk_rope_dim = 64; s.v_head_dim = 128;
    s.rope_scaling = "yarn"; s.rope_scaling_factor = 40.0f; s.yarn_log_mul = 0.0707f;
  } else if (name == "deepseek-v3-mini") {
    // DeepSeek-V3's design at a small size: query LoRA, sigmoid gating with the selection bias,
    // 8 groups of 8 experts of which 4 groups are used, normalised weights scaled by 2.5.
    s.arch = "deepseek2"; s.n_vocab = 32000; s.n_embd = 1024; s.n_layer = 12; s.n_head = 8; s.n_head_kv = 8;
    s.n_ff = 4096; s.n_ctx = 16384; s.rope_base = 10000.0f; s.tied_embeddings = false; s.rms_eps = 1e-6f;
    s.n_expert = 64; s.n_expert_used = 8; s.n_ff_exp = 512; s.n_expert_shared = 1; s.n_leading_dense = 1;
    s.expert_gating = 2; s.expert_bias = true; s.n_expert_group = 8; s.n_expert_group_used = 4;
    s.expert_weights_norm = true; s.expert_weights_scale = 2.5f;
    s.q_lora_rank = 384; s.kv_lora_rank = 256; s.qk_nope_dim = 64; s.qk_rope_dim = 32; s.v_head_dim = 64;
  } else if (name == "qwen3-30b-a3b") {
    s.arch = "qwen3moe"; s.n_vocab = 151936; s.n_embd = 2048; s.n_layer = 48; s.n_head = 32; s.n_head_kv = 4;
    s.head_dim = 128; s.n_ff = 6144; s.n_ctx = 40960; s.rope_base = 1000000.0f; s.tied_embeddings = false;
    s.n_expert = 128; s.n_expert_used = 8; s.n_ff_exp = 768;
  } else {
    return std::nullopt;
  }
  return s;
}

std::vector<std::string> SynthShapeNames() { return {"qwen3-0.6b", "qwen3-1.7b", "llama-3.2-1b", "qwen3-30b-a3b", "deepseek-v2-lite", "deepseek-v3-mini"};
}

namespace {

// Deterministic normal samples (Box-Muller over xoshiro).
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = rng_.Uniform(), u2 = rng_.Uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2 * M_PI * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2 * M_PI * u2));
  }

 private:
  Rng rng_;
  float spare_ = 0;
  bool has_spare_ = false;
};

uint64_t NameSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h;
}

}  // namespace

void AddToyVocab(gguf::Writer& w, int n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256 && static_cast<int>(tokens.size()) < n_vocab; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  while (static_cast<int>(tokens.size()) < n_vocab) {
    tokens.push_back(fmt::format("\xe2\x96\x81t{}", tokens.size()));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.SetString("tokenizer.ggml.model", "llama");
  w.Set("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
  w.Set("tokenizer.ggml.scores", gguf::Value::F32Array(scores));
  w.Set("tokenizer.ggml.token_type", gguf::Value::I32Array(types));
  w.SetU32("tokenizer.ggml.unknown_token_id", 0);
  w.SetU32("tokenizer.ggml.bos_token_id", 1);
  w.SetU32("tokenizer.ggml.eos_token_id", 2);
}

namespace {

// deepseek2's keys beyond the dense ones: MLA sizes, the DeepSeek mixture, YaRN's log multiplier.
void WriteDeepseekKeys(const SynthSpec& spec, gguf::Writer& w) {
  const std::string a = spec.arch;
  w.SetU32(a + ".attention.kv_lora_rank", spec.kv_lora_rank);
  // Written as 0 without a query LoRA too: llama.cpp requires the key except at V2-Lite's depths
  // (26 or 27 blocks), where it assumes 0, so a shallower --layers file would not load there.
  w.SetU32(a + ".attention.q_lora_rank", spec.q_lora_rank);
  w.SetU32(a + ".rope.dimension_count", spec.qk_rope_dim);
  if (spec.split_kv_b) {
    // As llama.cpp's converter writes split files: key/value_length describe the latent cache.
    w.SetU32(a + ".attention.key_length", spec.kv_lora_rank + spec.qk_rope_dim);
    w.SetU32(a + ".attention.value_length", spec.kv_lora_rank);
    w.SetU32(a + ".attention.key_length_mla", spec.qk_nope_dim + spec.qk_rope_dim);
    w.SetU32(a + ".attention.value_length_mla", spec.v_head_dim);
  } else {
    w.SetU32(a + ".attention.key_length", spec.qk_nope_dim + spec.qk_rope_dim);
    w.SetU32(a + ".attention.value_length", spec.v_head_dim);
  }
  w.SetU32(a + ".expert_shared_count", spec.n_expert_shared);
  w.SetU32(a + ".leading_dense_block_count", spec.n_leading_dense);
  w.SetU32(a + ".expert_gating_func", spec.expert_gating);
  w.Set(a + ".expert_weights_norm", gguf::Value::Bool(spec.expert_weights_norm));
  w.SetF32(a + ".expert_weights_scale", spec.expert_weights_scale);
  if (spec.n_expert_group > 1) {
    w.SetU32(a + ".expert_group_count", spec.n_expert_group);
    w.SetU32(a + ".expert_group_used_count", spec.n_expert_group_used);
  }
  if (spec.yarn_log_mul != 0.0f) w.SetF32(a + ".rope.scaling.yarn_log_multiplier", spec.yarn_log_mul);
}

// One block's MLA tensors, as llama.cpp's converter names and shapes them.
template <typename TensorFn, typename VecFn>
Status WriteMlaTensors(const SynthSpec& spec, int il, TensorFn& tensor, VecFn& vec) {
  auto n = [il](const char* part) { return fmt::format("blk.{}.{}", il, part); };
  const DType t = spec.matrix_type;
  const float g = spec.weight_gain;
  const int64_t q_rows = int64_t{spec.n_head} * (spec.qk_nope_dim + spec.qk_rope_dim);
  if (spec.q_lora_rank > 0) {
    DSPARK_TRY(tensor(n("attn_q_a.weight"), t, spec.n_embd, spec.q_lora_rank, 1, g));
    DSPARK_TRY(vec(n("attn_q_a_norm.weight"), spec.q_lora_rank, 1.0f, 0.1f));
    DSPARK_TRY(tensor(n("attn_q_b.weight"), t, spec.q_lora_rank, q_rows, 1, g));
  } else {
    DSPARK_TRY(tensor(n("attn_q.weight"), t, spec.n_embd, q_rows, 1, g));
  }
  DSPARK_TRY(tensor(n("attn_kv_a_mqa.weight"), t, spec.n_embd, spec.kv_lora_rank + spec.qk_rope_dim, 1, g));
  DSPARK_TRY(vec(n("attn_kv_a_norm.weight"), spec.kv_lora_rank, 1.0f, 0.1f));
  if (spec.split_kv_b) {
    DSPARK_TRY(tensor(n("attn_k_b.weight"), t, spec.qk_nope_dim, spec.kv_lora_rank, spec.n_head, g));
    DSPARK_TRY(tensor(n("attn_v_b.weight"), t, spec.kv_lora_rank, spec.v_head_dim, spec.n_head, g));
  } else {
    DSPARK_TRY(tensor(n("attn_kv_b.weight"), t, spec.kv_lora_rank,
                      int64_t{spec.n_head} * (spec.qk_nope_dim + spec.v_head_dim), 1, g));
  }
  return tensor(n("attn_output.weight"), t, int64_t{spec.n_head} * spec.v_head_dim, spec.n_embd, 1, g);
}

}  // namespace

Status WriteSynthModel(const SynthSpec& spec_in, const gguf::File* vocab, const std::string& path,
                       const std::function<void(uint64_t, uint64_t)>& progress) {
  SynthSpec spec = spec_in;
  if (vocab != nullptr) {
    DSPARK_ASSIGN_OR_RETURN(std::vector<std::string> toks, vocab->GetStringArray("tokenizer.ggml.tokens"));
    spec.n_vocab = static_cast<int>(toks.size());
  }
  if (!ops::CanQuantize(spec.matrix_type))
    return InvalidArgument("synth: cannot write weights of type {}", DTypeName(spec.matrix_type));

  const ArchDescriptor* arch = FindArch(spec.arch);
  if (arch == nullptr) return InvalidArgument("synth: unknown architecture '{}'", spec.arch);
  const bool moe = spec.n_expert > 0;
  if ((spec.arch == "deepseek2") != (spec.kv_lora_rank > 0))
    return InvalidArgument("synth: multi-head latent attention (kv_lora_rank > 0) is deepseek2's, and deepseek2's only");
  if (arch->traits.experts && !moe) return InvalidArgument("synth: {} needs n_expert > 0", spec.arch);
  if (moe && (spec.n_expert_used <= 0 || spec.n_expert_used > spec.n_expert || spec.n_ff_exp <= 0))
    return InvalidArgument("synth: {} experts with {} used and width {} is not a mixture of experts", spec.n_expert,
                           spec.n_expert_used, spec.n_ff_exp);
  gguf::Writer w;
  const std::string a = spec.arch;
  w.SetString("general.architecture", a);
  w.SetString("general.name", fmt::format("dspark-synth-{}", a));
  w.SetU32(a + ".context_length", spec.n_ctx);
  w.SetU32(a + ".embedding_length", spec.n_embd);
  if (spec.n_nextn > 0 && (spec.arch != "deepseek2" || spec.n_expert == 0))
    return InvalidArgument("synth: multi-token-prediction blocks are written for deepseek2 mixtures only");
  w.SetU32(a + ".block_count", spec.n_layer + spec.n_nextn);
  if (spec.n_nextn > 0) w.SetU32(a + ".nextn_predict_layers", spec.n_nextn);
  const bool mla = spec.kv_lora_rank > 0;
  // Mixtral files (llama with experts) give the experts' width as feed_forward_length.
  const bool mixtral = moe && !mla && !arch->traits.experts;
  w.SetU32(a + ".feed_forward_length", mixtral ? spec.n_ff_exp : spec.n_ff);
  w.SetU32(a + ".attention.head_count", spec.n_head);
  // llama.cpp's converter stores MLA with split attn_k_b / attn_v_b as one key/value head (MQA).
  w.SetU32(a + ".attention.head_count_kv", mla && spec.split_kv_b ? 1 : spec.n_head_kv);
  w.SetU32(a + ".attention.key_length", spec.head_dim);
  w.SetU32(a + ".attention.value_length", spec.head_dim);
  w.SetF32(a + ".attention.layer_norm_rms_epsilon", spec.rms_eps);
  w.SetF32(a + ".rope.freq_base", spec.rope_base);
  if (moe) {
    w.SetU32(a + ".expert_count", spec.n_expert);
    w.SetU32(a + ".expert_used_count", spec.n_expert_used);
    if (!mixtral) w.SetU32(a + ".expert_feed_forward_length", spec.n_ff_exp);
  }
  if (mla) WriteDeepseekKeys(spec, w);
  if (spec.rope_scaling != "none") {
    w.SetString(a + ".rope.scaling.type", spec.rope_scaling);
    w.SetF32(a + ".rope.scaling.factor", spec.rope_scaling_factor);
    w.SetU32(a + ".rope.scaling.original_context_length", spec.n_ctx / 4);
  }
  if (vocab != nullptr) {
    w.CopyMetadataFrom(*vocab, "tokenizer.");
  } else {
    AddToyVocab(w, spec.n_vocab);
  }

  // A [cols, rows] matrix, or with n > 1 a 3-D [cols, rows, n] stack of them (expert tensors).
  // Rows that the type's block does not divide take llama.cpp's fallback type, as `dspark quantize`
  // does (DeepSeek-V2-Lite's 1,408-wide experts in a Q4_K file are Q5_0 / Q8_0).
  QuantizeFileFacts facts;  // what `dspark quantize` would read off the finished file
  facts.n_layer = spec.n_layer;
  facts.n_attn_v = mla && spec.split_kv_b ? 0 : spec.n_layer;  // attn_v or attn_kv_b
  facts.n_expert = spec.n_expert;
  facts.has_output = !spec.tied_embeddings;
  const QuantizeTarget target{spec.matrix_type, spec.matrix_mix};
  auto tensor = [&](const std::string& name, DType requested, int64_t cols, int64_t rows, int64_t n,
                    float gain) -> Status {
    if (requested == spec.matrix_type) requested = QuantizeTensorType(target, name, facts);
    const DType type = QuantizeTypeForRows(requested, cols);
    const uint64_t seed = NameSeed(spec.seed, name);
    std::vector<int64_t> ne = {cols, rows};
    if (n > 1) ne.push_back(n);
    return w.AddTensorLazy(name, type, ne, [=](uint8_t* dst) {
      Normal normal(seed);
      std::vector<float> row(cols);
      const float stdev = gain / std::sqrt(static_cast<float>(cols));
      const size_t row_bytes = RowBytes(type, cols);
      for (int64_t r = 0; r < rows * n; ++r) {
        for (float& v : row) v = normal.Next() * stdev;
        ops::QuantizeRow(type, row.data(), dst + r * row_bytes, cols);
      }
    });
  };
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows, float gain) {
    return tensor(name, spec.matrix_type, cols, rows, 1, gain);
  };
  auto vec = [&](const std::string& name, int64_t n, float center, float spread) -> Status {
    std::vector<uint8_t> bytes(n * 4);
    Normal normal(NameSeed(spec.seed, name));
    for (int64_t i = 0; i < n; ++i) {
      const float v = center + spread * normal.Next();
      std::memcpy(bytes.data() + i * 4, &v, 4);
    }
    return w.AddTensor(name, DType::kF32, {n}, std::move(bytes));
  };

  const float g = spec.weight_gain;
  const int q_dim = spec.n_head * spec.head_dim, kv_dim = spec.n_head_kv * spec.head_dim;
  // Embeddings with unit-scale rows so the first RMSNorm sees ordinary magnitudes.
  const float embd_gain = spec.embedding_gain > 0 ? spec.embedding_gain : std::sqrt(static_cast<float>(spec.n_embd));
  DSPARK_TRY(matrix("token_embd.weight", spec.n_embd, spec.n_vocab, embd_gain));
  DSPARK_TRY(vec("output_norm.weight", spec.n_embd, 1.0f, 0.1f));
  if (!spec.tied_embeddings) DSPARK_TRY(matrix("output.weight", spec.n_embd, spec.n_vocab, g));
  if (spec.llama3_rope_freqs) {
    std::vector<uint8_t> bytes(spec.head_dim / 2 * 4);
    for (int i = 0; i < spec.head_dim / 2; ++i) {
      const float f = i < spec.head_dim / 4 ? 1.0f : 1.0f + (i - spec.head_dim / 4) * 0.5f;
      std::memcpy(bytes.data() + i * 4, &f, 4);
    }
    DSPARK_TRY(w.AddTensor("rope_freqs.weight", DType::kF32, {spec.head_dim / 2}, std::move(bytes)));
  }
  for (int il = 0; il < spec.n_layer + spec.n_nextn; ++il) {
    auto n = [il](const char* part) { return fmt::format("blk.{}.{}", il, part); };
    if (il >= spec.n_layer) {
      DSPARK_TRY(matrix(n("nextn.eh_proj.weight"), 2 * spec.n_embd, spec.n_embd, g));
      DSPARK_TRY(vec(n("nextn.enorm.weight"), spec.n_embd, 1.0f, 0.1f));
      DSPARK_TRY(vec(n("nextn.hnorm.weight"), spec.n_embd, 1.0f, 0.1f));
      DSPARK_TRY(vec(n("nextn.shared_head_norm.weight"), spec.n_embd, 1.0f, 0.1f));
    }
    DSPARK_TRY(vec(n("attn_norm.weight"), spec.n_embd, 1.0f, 0.1f));
    DSPARK_TRY(vec(n("ffn_norm.weight"), spec.n_embd, 1.0f, 0.1f));
    const bool dense_ffn = !moe || il < spec.n_leading_dense;
    if (mla) {
      DSPARK_TRY(WriteMlaTensors(spec, il, tensor, vec));
    } else {
      DSPARK_TRY(matrix(n("attn_q.weight"), spec.n_embd, q_dim, g));
      DSPARK_TRY(matrix(n("attn_k.weight"), spec.n_embd, kv_dim, g));
      DSPARK_TRY(matrix(n("attn_v.weight"), spec.n_embd, kv_dim, g));
      DSPARK_TRY(matrix(n("attn_output.weight"), q_dim, spec.n_embd, g));
      if (arch->traits.qkv_bias) {
        DSPARK_TRY(vec(n("attn_q.bias"), q_dim, 0.0f, 0.1f));
        DSPARK_TRY(vec(n("attn_k.bias"), kv_dim, 0.0f, 0.1f));
        DSPARK_TRY(vec(n("attn_v.bias"), kv_dim, 0.0f, 0.1f));
      }
      if (arch->traits.qk_norm) {
        DSPARK_TRY(vec(n("attn_q_norm.weight"), spec.head_dim, 1.0f, 0.1f));
        DSPARK_TRY(vec(n("attn_k_norm.weight"), spec.head_dim, 1.0f, 0.1f));
      }
    }
    if (moe && !dense_ffn) {
      const DType t = spec.matrix_type;
      DSPARK_TRY(tensor(n("ffn_gate_inp.weight"), DType::kF32, spec.n_embd, spec.n_expert, 1, spec.router_gain));
      DSPARK_TRY(tensor(n("ffn_gate_exps.weight"), t, spec.n_embd, spec.n_ff_exp, spec.n_expert, g));
      DSPARK_TRY(tensor(n("ffn_up_exps.weight"), t, spec.n_embd, spec.n_ff_exp, spec.n_expert, g));
      DSPARK_TRY(tensor(n("ffn_down_exps.weight"), t, spec.n_ff_exp, spec.n_embd, spec.n_expert, g));
      if (spec.expert_bias) DSPARK_TRY(vec(n("exp_probs_b.bias"), spec.n_expert, 0.0f, 0.05f));
      if (spec.n_expert_shared > 0) {
        const int64_t width = int64_t{spec.n_expert_shared} * spec.n_ff_exp;
        DSPARK_TRY(matrix(n("ffn_gate_shexp.weight"), spec.n_embd, width, g));
        DSPARK_TRY(matrix(n("ffn_up_shexp.weight"), spec.n_embd, width, g));
        DSPARK_TRY(matrix(n("ffn_down_shexp.weight"), width, spec.n_embd, g));
      }
      continue;
    }
    DSPARK_TRY(matrix(n("ffn_gate.weight"), spec.n_embd, spec.n_ff, g));
    DSPARK_TRY(matrix(n("ffn_up.weight"), spec.n_embd, spec.n_ff, g));
    DSPARK_TRY(matrix(n("ffn_down.weight"), spec.n_ff, spec.n_embd, g));
  }
  return w.WriteFile(path, progress);
}

}  // namespace dspark
