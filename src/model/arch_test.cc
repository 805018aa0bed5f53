// Every architecture against a straightforward double-precision reference forward pass on
// tiny random-weight GGUF files: each RoPE variant the engine reads and each weight type, over the
// F32 and the default F16 cache (the rest of the model's tests: model_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "kernels/ops.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/testing/reference.h"
#include "model/testing/tiny_models.h"

namespace dspark {
namespace {

using testing::Prompt;
using testing::RelErr;
using testing::TinySpec;
using testing::WriteTiny;
using Matrix = std::vector<double>;

// Dequantised weights of one GGUF tensor as doubles, [rows, cols].
Matrix Weights(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  const int64_t cols = t->ne[0], rows = t->Rows();
  std::vector<float> row(cols);
  Matrix out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    ops::DequantizeRow(t->type, t->data + r * RowBytes(t->type, cols), row.data(), cols);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = row[c];
  }
  return out;
}

std::vector<double> MatVec(const Matrix& w, const std::vector<double>& x, int64_t rows) {
  const int64_t cols = static_cast<int64_t>(x.size());
  std::vector<double> y(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
  return y;
}

std::vector<double> RmsNorm(const std::vector<double>& x, const Matrix& w, double eps, size_t off = 0, size_t n = 0) {
  if (n == 0) n = x.size();
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double inv = 1.0 / std::sqrt(ss / n + eps);
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = x[off + i] * inv * w[i];
  return y;
}

// What the reference knows about each architecture, pinned here and never read from the engine's
// ModelConfig or traits: a reference built on the engine's own parse would agree with its
// mistakes (a llama switched to NeoX RoPE, or rms_eps x 10, would pass). The numbers (dims, eps,
// RoPE base and scaling) come from the file's metadata, read below with llama.cpp's keys,
// defaults and semantics (llama-model.cpp load_hparams, llama-context.cpp, ggml-cpu ops.cpp
// rope_yarn).
struct ArchExpect {
  const char* arch;
  bool neox;        // RoPE rotates (x[i], x[i + n_rot/2]) (LLAMA_ROPE_TYPE_NEOX), else (x[2i], x[2i+1])
  bool qkv_bias;    // attn_{q,k,v}.bias added to the projections
  bool qk_norm;     // per-head RMSNorm of Q and K (attn_{q,k}_norm) before RoPE
  bool rope_freqs;  // rope_freqs.weight (llama 3.x) divides the angles; llama.cpp has none for qwen
  bool moe;         // every FFN a mixture of experts (llama too when the file has expert_count: Mixtral)
};
constexpr ArchExpect kArchExpect[] = {
    {"llama", false, false, false, true, false},
    {"mistral", false, false, false, true, false},
    {"qwen2", true, true, false, false, false},
    {"qwen3", true, false, true, false, false},
    {"qwen3moe", true, false, true, false, true},
    {"deepseek2", false, false, false, false, true},
};

struct RefConfig {
  ArchExpect expect{};
  int n_vocab = 0, n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  int n_nextn = 0;
  double rms_eps = 0;
  bool tied = false;  // no output.weight in the file: the LM head is token_embd
  int n_rot = 0;
  double freq_base = 0, freq_scale = 1, ext_factor = 0;
  double attn_factor = 1;  // what llama.cpp passes to ggml_rope_ext as attn_factor (its mscale)
  double corr_low = 0, corr_high = 0;  // ggml_rope_yarn_corr_dims
  std::vector<double> freq_factors;    // rope_freqs.weight
  // Mixture of experts (llama.cpp's build_moe_ffn: gating probabilities, plus the exp_probs_b
  // bias for selection, the best n_group_used groups by their two best scores, the
  // n_expert_used best, their probabilities as weights, normalised and scaled as the keys say),
  // DeepSeek's shared experts and leading dense blocks.
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool sigmoid = false, norm_w = true;
  double w_scale = 0;
  int n_group = 0, n_group_used = 0, n_shared = 0, n_dense_lead = 0;
  // deepseek2's multi-head latent attention, computed as plain multi-head attention on keys and
  // values decompressed from the latent (llama.cpp's non-absorbed path).
  int q_lora = 0, kv_lora = 0, nope = 0, v_head = 0;
  bool split_kv_b = false;
  double kq_scale = 0;
};

RefConfig ReadRefConfig(const gguf::File& f, const std::string& arch) {
  RefConfig c;
  const ArchExpect* e = nullptr;
  for (const ArchExpect& x : kArchExpect)
    if (arch == x.arch) e = &x;
  EXPECT_NE(e, nullptr) << arch;
  if (e == nullptr) return c;
  c.expect = *e;
  const Result<std::string> file_arch = f.GetString("general.architecture");
  EXPECT_TRUE(file_arch.ok() && *file_arch == arch);
  auto key = [&](const char* k) { return arch + "." + k; };
  auto int_key = [&](const char* k, int64_t fallback = -1) {
    const Result<int64_t> v = fallback < 0 ? f.GetInt(key(k)) : f.GetIntOr(key(k), fallback);
    EXPECT_TRUE(v.ok()) << key(k);
    return v.ok() ? static_cast<int>(*v) : 0;
  };
  auto float_key = [&](const char* k, std::optional<double> fallback = std::nullopt) {
    const Result<double> v = fallback ? f.GetFloatOr(key(k), *fallback) : f.GetFloat(key(k));
    EXPECT_TRUE(v.ok()) << key(k);
    return v.ok() ? *v : 0.0;
  };
  c.n_embd = int_key("embedding_length");
  // block_count counts deepseek2's multi-token-prediction blocks, stored after the trunk.
  c.n_nextn = int_key("nextn_predict_layers", 0);
  c.n_layer = int_key("block_count") - c.n_nextn;
  c.n_ff = int_key("feed_forward_length");
  c.n_head = int_key("attention.head_count");
  if (c.n_head <= 0) return c;  // failed above
  c.n_head_kv = int_key("attention.head_count_kv", c.n_head);
  c.head_dim = int_key("attention.key_length", c.n_embd / c.n_head);
  c.head_dim_v = int_key("attention.value_length", c.n_embd / c.n_head);
  c.rms_eps = float_key("attention.layer_norm_rms_epsilon");  // required by llama.cpp for these
  const int n_ctx_train = int_key("context_length");
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  EXPECT_NE(embd, nullptr);
  if (embd != nullptr) c.n_vocab = static_cast<int>(embd->ne[1]);
  c.tied = f.FindTensor("output.weight") == nullptr;

  c.n_expert = int_key("expert_count", 0);
  EXPECT_TRUE(!c.expect.moe || c.n_expert > 0) << arch << " needs expert_count";
  const bool deepseek = arch == "deepseek2";
  if (c.n_expert > 0) {
    c.n_expert_used = int_key("expert_used_count");
    c.n_ff_exp = int_key("expert_feed_forward_length", c.n_expert_used > 0 ? c.n_ff / c.n_expert_used : 0);
    c.w_scale = float_key("expert_weights_scale", 0.0);
    c.n_group = int_key("expert_group_count", 0);
    c.n_group_used = int_key("expert_group_used_count", 0);
    // qwen3moe and Mixtral always normalise; deepseek2 reads the key (default false) and its
    // gating function (0 or absent: softmax).
    if (deepseek) {
      const Result<bool> norm = f.GetBoolOr(key("expert_weights_norm"), false);
      EXPECT_TRUE(norm.ok());
      c.norm_w = norm.ok() && *norm;
      c.sigmoid = int_key("expert_gating_func", 0) == 2;
      c.n_shared = int_key("expert_shared_count");
      c.n_dense_lead = int_key("leading_dense_block_count", 0);
    }
  }
  if (deepseek) {
    c.kv_lora = int_key("attention.kv_lora_rank");
    c.q_lora = int_key("attention.q_lora_rank", 0);
    c.split_kv_b = f.Has(key("attention.key_length_mla"));
    const int k_head = c.split_kv_b ? int_key("attention.key_length_mla") : c.head_dim;
    c.v_head = c.split_kv_b ? int_key("attention.value_length_mla") : c.head_dim_v;
    c.head_dim = k_head;  // nope + rope: the decompressed heads this reference attends with
  }

  c.n_rot = int_key("rope.dimension_count", c.head_dim);
  c.freq_base = float_key("rope.freq_base", 10000.0);
  // The scaling type defaults to linear; the factor is rope.scaling.factor, else the older
  // rope.scale_linear; type none never scales (llama-context.cpp).
  const Result<std::string> type_key = f.GetStringOr(key("rope.scaling.type"), "linear");
  EXPECT_TRUE(type_key.ok());
  const std::string type = type_key.ok() ? *type_key : "?";
  EXPECT_TRUE(type == "none" || type == "linear" || type == "yarn") << type;
  double factor = float_key("rope.scaling.factor", 0.0);
  if (factor == 0.0) factor = float_key("rope.scale_linear", 0.0);
  c.freq_scale = factor == 0.0 || type == "none" ? 1.0 : 1.0 / factor;
  c.ext_factor = type == "yarn" ? 1.0 : 0.0;
  // llama-context.cpp: with YaRN, yarn_attn_factor = get_mscale(s) / (1 + 0.1 ln s), s = 1 /
  // freq_scale, cancelling the factor ggml's rope_yarn multiplies back in; then
  // *= rope.scaling.attn_factor, for every scaling type.
  c.attn_factor = 1.0;
  if (c.ext_factor != 0.0) {
    const double s = 1.0 / c.freq_scale;
    c.attn_factor = (s <= 1.0 ? 1.0 : 0.1 * std::log(s) + 1.0) / (1.0 + 0.1 * std::log(s));
  }
  c.attn_factor *= float_key("rope.scaling.attn_factor", 1.0);
  // ggml_rope_yarn_corr_dims, with llama.cpp's beta_fast 32 and beta_slow 1 (it reads no
  // yarn_beta_* keys for these architectures) and n_ctx_orig_yarn.
  const int n_ctx_orig = int_key("rope.scaling.original_context_length", n_ctx_train);
  auto corr_dim = [&](double n_rotations) {
    return c.n_rot * std::log(n_ctx_orig / (n_rotations * 2 * M_PI)) / (2 * std::log(c.freq_base));
  };
  c.corr_low = std::max(0.0, std::floor(corr_dim(32.0)));
  c.corr_high = std::min(c.n_rot - 1.0, std::ceil(corr_dim(1.0)));
  if (deepseek) {
    c.nope = c.head_dim - c.n_rot;
    // llama-context.cpp's YaRN attention factor for deepseek2 and models/deepseek2.cpp's kq_scale:
    // the file stores 0.1 * log_mul; get_mscale(s, m) = 1 + 0.1 m ln s (1 for s <= 1).
    const double log_mul = float_key("rope.scaling.yarn_log_multiplier", 0.0) / 0.1;
    const double s = 1.0 / c.freq_scale;
    auto get_mscale = [&](double m) { return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
    c.attn_factor = 1.0;
    if (c.ext_factor != 0.0) {
      c.attn_factor = log_mul != 0.0 ? get_mscale(log_mul != 1.0 ? log_mul : 1.0) / get_mscale(log_mul) : get_mscale(1.0);
      c.attn_factor /= 1.0 + 0.1 * std::log(s);
    }
    c.attn_factor *= float_key("rope.scaling.attn_factor", 1.0);  // as for every architecture
    const double attn_factor_org = c.attn_factor * (1.0 + 0.1 * std::log(s));
    const double mscale = attn_factor_org * (1.0 + 0.1 * log_mul * std::log(s));
    c.kq_scale = mscale * mscale / std::sqrt(static_cast<double>(c.head_dim));
  }
  if (const gguf::TensorInfo* t = f.FindTensor("rope_freqs.weight")) {
    EXPECT_TRUE(c.expect.rope_freqs) << arch << " takes no rope_freqs.weight";
    EXPECT_EQ(t->type, DType::kF32);
    EXPECT_EQ(t->NumElements(), c.n_rot / 2);
    if (t->type == DType::kF32 && t->NumElements() == c.n_rot / 2) {
      std::vector<float> ff(c.n_rot / 2);
      std::memcpy(ff.data(), t->data, ff.size() * sizeof(float));
      c.freq_factors.assign(ff.begin(), ff.end());
    }
  }
  return c;
}

// ggml_rope_ext on the first n_rot elements of one head, in double: theta_extrap = pos *
// base^(-i0/n_rot) / freq_factor[i0/2], theta_interp = freq_scale * theta_extrap, and with YaRN
// (ext_factor != 0) a ramp from extrapolation (dims below corr_low) to interpolation (above
// corr_high) and the magnitude mscale *= 1 + 0.1 ln(1 / freq_scale) (rope_yarn).
void Rope(double* x, int pos, const RefConfig& c) {
  const int half = c.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int i0 = 2 * i;
    double theta_extrap = pos * std::pow(c.freq_base, -static_cast<double>(i0) / c.n_rot);
    if (!c.freq_factors.empty()) theta_extrap /= c.freq_factors[i];
    const double theta_interp = c.freq_scale * theta_extrap;
    double theta = theta_interp, mscale = c.attn_factor;
    if (c.ext_factor != 0.0) {
      const double y = (i0 / 2 - c.corr_low) / std::max(0.001, c.corr_high - c.corr_low);
      const double ramp_mix = (1.0 - std::min(1.0, std::max(0.0, y))) * c.ext_factor;
      theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
      mscale *= 1.0 + 0.1 * std::log(1.0 / c.freq_scale);
    }
    const int a = c.expect.neox ? i : i0, b = c.expect.neox ? i + half : i0 + 1;
    const double x0 = x[a], x1 = x[b], cs = std::cos(theta) * mscale, sn = std::sin(theta) * mscale;
    x[a] = x0 * cs - x1 * sn;
    x[b] = x0 * sn + x1 * cs;
  }
}

using Rows = std::vector<std::vector<double>>;

// Causal multi-head attention of n positions in double: q [t][n_head * d], k [t][n_head_kv * d]
// (d = head_dim), v [t][n_head_kv * dv]; returns [t][n_head * dv].
Rows Attend(const Rows& q, const Rows& k, const Rows& v, int n_head, int n_head_kv, int d, int dv, double scale) {
  const int n = static_cast<int>(q.size());
  Rows out(n, std::vector<double>(static_cast<size_t>(n_head) * dv, 0.0));
  for (int t = 0; t < n; ++t)
    for (int hh = 0; hh < n_head; ++hh) {
      const int kvh = hh / (n_head / n_head_kv);
      std::vector<double> sc(t + 1);
      double mx = -1e300;
      for (int u = 0; u <= t; ++u) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += q[t][hh * d + i] * k[u][kvh * d + i];
        mx = std::max(mx, sc[u] = dot * scale);
      }
      double sum = 0;
      for (double& e : sc) sum += (e = std::exp(e - mx));
      for (int u = 0; u <= t; ++u)
        for (int i = 0; i < dv; ++i) out[t][hh * dv + i] += sc[u] / sum * v[u][kvh * dv + i];
    }
  return out;
}

// One SwiGLU of width ff: gate / up rows from row `row0` of wg / wu ([*, n_embd]), the down
// projection's [n_embd, ff] block starting at element `down0` of wd.
std::vector<double> SwiGluRef(const Matrix& wg, const Matrix& wu, const Matrix& wd, size_t row0, size_t down0,
                              int ff, const std::vector<double>& h) {
  const size_t d = h.size();
  std::vector<double> g(ff, 0.0), u(ff, 0.0), out(d, 0.0);
  for (int r = 0; r < ff; ++r)
    for (size_t i = 0; i < d; ++i) {
      g[r] += wg[(row0 + r) * d + i] * h[i];
      u[r] += wu[(row0 + r) * d + i] * h[i];
    }
  for (int r = 0; r < ff; ++r) g[r] = g[r] / (1 + std::exp(-g[r])) * u[r];
  for (size_t r = 0; r < d; ++r)
    for (int i = 0; i < ff; ++i) out[r] += wd[down0 + r * ff + i] * g[i];
  return out;
}

// Block il's feed-forward output for normed h: dense SwiGLU, or the mixture (and shared experts).
std::vector<double> FfnRef(const gguf::File& f, const RefConfig& c, int il, const std::vector<double>& h) {
  auto w = [&](const char* part) { return Weights(f, fmt::format("blk.{}.{}", il, part)); };
  if (c.n_expert == 0 || il < c.n_dense_lead)
    return SwiGluRef(w("ffn_gate.weight"), w("ffn_up.weight"), w("ffn_down.weight"), 0, 0, c.n_ff, h);
  const Matrix wg = w("ffn_gate_exps.weight"), wu = w("ffn_up_exps.weight"), wd = w("ffn_down_exps.weight");
  std::vector<double> p = MatVec(w("ffn_gate_inp.weight"), h, c.n_expert);
  if (c.sigmoid) {
    for (double& e : p) e = 1.0 / (1.0 + std::exp(-e));
  } else {
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& e : p) sum += (e = std::exp(e - mx));
    for (double& e : p) e /= sum;
  }
  std::vector<double> score = p;
  if (f.FindTensor(fmt::format("blk.{}.exp_probs_b.bias", il)) != nullptr) {
    const Matrix bias = w("exp_probs_b.bias");
    for (int e = 0; e < c.n_expert; ++e) score[e] += bias[e];
  }
  if (c.n_group > 1) {
    const int per = c.n_expert / c.n_group;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < c.n_group; ++g) {
      std::vector<double> in(score.begin() + g * per, score.begin() + (g + 1) * per);
      std::sort(in.rbegin(), in.rend());
      groups.push_back({-(in[0] + (per > 1 ? in[1] : 0.0)), g});
    }
    std::sort(groups.begin(), groups.end());
    std::vector<bool> kept(c.n_group, false);
    for (int g = 0; g < c.n_group_used; ++g) kept[groups[g].second] = true;
    for (int e = 0; e < c.n_expert; ++e)
      if (!kept[e / per]) score[e] = -1e300;
  }
  std::vector<int> order(c.n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  double chosen = 0;
  for (int j = 0; j < c.n_expert_used; ++j) chosen += p[order[j]];
  std::vector<double> out(h.size(), 0.0);
  for (int j = 0; j < c.n_expert_used; ++j) {
    const size_t e = order[j];
    double weight = p[e];
    if (c.norm_w) weight /= chosen;
    if (c.w_scale != 0) weight *= c.w_scale;
    const auto dn = SwiGluRef(wg, wu, wd, e * c.n_ff_exp, e * h.size() * c.n_ff_exp, c.n_ff_exp, h);
    for (size_t i = 0; i < h.size(); ++i) out[i] += weight * dn[i];
  }
  if (c.n_shared > 0) {
    const auto sh = SwiGluRef(w("ffn_gate_shexp.weight"), w("ffn_up_shexp.weight"), w("ffn_down_shexp.weight"), 0, 0,
                              c.n_shared * c.n_ff_exp, h);
    for (size_t i = 0; i < h.size(); ++i) out[i] += sh[i];
  }
  return out;
}

// deepseek2's attention for block il over the normed rows hs: queries, the latent, keys and values
// decompressed per head ([k_nope, k_pe] with k_pe shared by the heads), plain attention.
Rows MlaRef(const gguf::File& f, const RefConfig& c, int il, const Rows& hs) {
  auto w = [&](const char* part) { return Weights(f, fmt::format("blk.{}.{}", il, part)); };
  const int n = static_cast<int>(hs.size()), H = c.n_head, dk = c.nope + c.n_rot;
  Rows q(n), k(n, std::vector<double>(static_cast<size_t>(H) * dk)), v(n, std::vector<double>(static_cast<size_t>(H) * c.v_head));
  const Matrix wkv_a = w("attn_kv_a_mqa.weight"), kv_norm = w("attn_kv_a_norm.weight");
  for (int t = 0; t < n; ++t) {
    q[t] = c.q_lora > 0 ? MatVec(w("attn_q_b.weight"),
                                 RmsNorm(MatVec(w("attn_q_a.weight"), hs[t], c.q_lora), w("attn_q_a_norm.weight"), c.rms_eps),
                                 static_cast<int64_t>(H) * dk)
                        : MatVec(w("attn_q.weight"), hs[t], static_cast<int64_t>(H) * dk);
    for (int hh = 0; hh < H; ++hh) Rope(q[t].data() + hh * dk + c.nope, t, c);
    std::vector<double> kva = MatVec(wkv_a, hs[t], c.kv_lora + c.n_rot);
    const std::vector<double> latent = RmsNorm(kva, kv_norm, c.rms_eps, 0, c.kv_lora);
    Rope(kva.data() + c.kv_lora, t, c);
    for (int hh = 0; hh < H; ++hh) {
      for (int i = 0; i < c.n_rot; ++i) k[t][hh * dk + c.nope + i] = kva[c.kv_lora + i];
      if (c.split_kv_b) {
        // attn_k_b: per head [kv_lora rows, nope cols]; attn_v_b: per head [v rows, kv_lora cols].
        const Matrix kb = w("attn_k_b.weight"), vb = w("attn_v_b.weight");
        for (int i = 0; i < c.nope; ++i)
          for (int r = 0; r < c.kv_lora; ++r)
            k[t][hh * dk + i] += kb[(static_cast<size_t>(hh) * c.kv_lora + r) * c.nope + i] * latent[r];
        for (int j = 0; j < c.v_head; ++j)
          for (int r = 0; r < c.kv_lora; ++r)
            v[t][hh * c.v_head + j] += vb[(static_cast<size_t>(hh) * c.v_head + j) * c.kv_lora + r] * latent[r];
      } else {
        const auto kv = MatVec(w("attn_kv_b.weight"), latent, static_cast<int64_t>(H) * (c.nope + c.v_head));
        for (int i = 0; i < c.nope; ++i) k[t][hh * dk + i] = kv[hh * (c.nope + c.v_head) + i];
        for (int j = 0; j < c.v_head; ++j) v[t][hh * c.v_head + j] = kv[hh * (c.nope + c.v_head) + c.nope + j];
      }
    }
  }
  return Attend(q, k, v, H, H, dk, c.v_head, c.kq_scale);
}

// Block il on the rows x of a single sequence (positions 0..n-1), causal attention, in place.
void ReferenceBlock(const gguf::File& f, const RefConfig& c, int il, Rows& x) {
  const int n = static_cast<int>(x.size());
  const int q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim, v_dim = c.n_head_kv * c.head_dim_v;
  auto w = [&](const char* part) { return Weights(f, fmt::format("blk.{}.{}", il, part)); };
  const Matrix attn_norm = w("attn_norm.weight"), wo = w("attn_output.weight"), ffn_norm = w("ffn_norm.weight");
  Rows hs(n), att;
  for (int t = 0; t < n; ++t) hs[t] = RmsNorm(x[t], attn_norm, c.rms_eps);
  if (c.kv_lora > 0) {
    att = MlaRef(f, c, il, hs);
  } else {
    const Matrix wq = w("attn_q.weight"), wk = w("attn_k.weight"), wv = w("attn_v.weight");
    Matrix bq, bk, bv, qn, kn;
    if (c.expect.qkv_bias) bq = w("attn_q.bias"), bk = w("attn_k.bias"), bv = w("attn_v.bias");
    if (c.expect.qk_norm) qn = w("attn_q_norm.weight"), kn = w("attn_k_norm.weight");
    Rows q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      q[t] = MatVec(wq, hs[t], q_dim);
      k[t] = MatVec(wk, hs[t], kv_dim);
      v[t] = MatVec(wv, hs[t], v_dim);
      if (c.expect.qkv_bias) {
        for (int i = 0; i < q_dim; ++i) q[t][i] += bq[i];
        for (int i = 0; i < kv_dim; ++i) k[t][i] += bk[i];
        for (int i = 0; i < v_dim; ++i) v[t][i] += bv[i];
      }
      if (c.expect.qk_norm) {
        for (int hh = 0; hh < c.n_head; ++hh) {
          auto y = RmsNorm(q[t], qn, c.rms_eps, hh * c.head_dim, c.head_dim);
          std::copy(y.begin(), y.end(), q[t].begin() + hh * c.head_dim);
        }
        for (int hh = 0; hh < c.n_head_kv; ++hh) {
          auto y = RmsNorm(k[t], kn, c.rms_eps, hh * c.head_dim, c.head_dim);
          std::copy(y.begin(), y.end(), k[t].begin() + hh * c.head_dim);
        }
      }
      for (int hh = 0; hh < c.n_head; ++hh) Rope(q[t].data() + hh * c.head_dim, t, c);
      for (int hh = 0; hh < c.n_head_kv; ++hh) Rope(k[t].data() + hh * c.head_dim, t, c);
    }
    att = Attend(q, k, v, c.n_head, c.n_head_kv, c.head_dim, c.head_dim_v, 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  }
  for (int t = 0; t < n; ++t) {
    const auto o = MatVec(wo, att[t], c.n_embd);
    for (int i = 0; i < c.n_embd; ++i) x[t][i] += o[i];
    const auto dn = FfnRef(f, c, il, RmsNorm(x[t], ffn_norm, c.rms_eps));
    for (int i = 0; i < c.n_embd; ++i) x[t][i] += dn[i];
  }
}

Rows Embed(const gguf::File& f, const RefConfig& c, const std::vector<int32_t>& tokens, const char* name) {
  const Matrix embd = Weights(f, name);
  Rows x(tokens.size(), std::vector<double>(c.n_embd));
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int i = 0; i < c.n_embd; ++i) x[t][i] = embd[static_cast<size_t>(tokens[t]) * c.n_embd + i];
  return x;
}

// The trunk's output (before the final norm) of a single sequence.
Rows ReferenceTrunk(const gguf::File& f, const RefConfig& c, const std::vector<int32_t>& tokens) {
  Rows x = Embed(f, c, tokens, "token_embd.weight");
  for (int il = 0; il < c.n_layer; ++il) ReferenceBlock(f, c, il, x);
  return x;
}

// Logits [n_tokens, n_vocab] of a single sequence with causal attention, all in double.
std::vector<std::vector<double>> ReferenceForward(const gguf::File& f, const RefConfig& c,
                                                  const std::vector<int32_t>& tokens) {
  const Rows x = ReferenceTrunk(f, c, tokens);
  const Matrix out_norm = Weights(f, "output_norm.weight");
  const Matrix head = Weights(f, c.tied ? "token_embd.weight" : "output.weight");
  std::vector<std::vector<double>> logits(x.size());
  for (size_t t = 0; t < x.size(); ++t) logits[t] = MatVec(head, RmsNorm(x[t], out_norm, c.rms_eps), c.n_vocab);
  return logits;
}

// deepseek2's first multi-token-prediction block, as llama.cpp's MTP graph: row t pairs token t
// with h[t], x = eh_proj([enorm(embedding) ; hnorm(h)]), block n_layer, then shared_head_norm (its
// own, else output_norm) -> the normed output (*normed) and the LM head.
std::vector<std::vector<double>> ReferenceNextn(const gguf::File& f, const RefConfig& c,
                                                const std::vector<int32_t>& tokens, const Rows& h, Rows* normed) {
  const int il = c.n_layer;
  auto w = [&](const char* part) { return Weights(f, fmt::format("blk.{}.nextn.{}", il, part)); };
  const Matrix eh = w("eh_proj.weight"), enorm = w("enorm.weight"), hnorm = w("hnorm.weight");
  Rows x = Embed(f, c, tokens, "token_embd.weight");
  for (size_t t = 0; t < x.size(); ++t) {
    std::vector<double> cat = RmsNorm(x[t], enorm, c.rms_eps);
    const std::vector<double> hn = RmsNorm(h[t], hnorm, c.rms_eps);
    cat.insert(cat.end(), hn.begin(), hn.end());
    x[t] = MatVec(eh, cat, c.n_embd);
  }
  ReferenceBlock(f, c, il, x);
  const Matrix norm = f.FindTensor(fmt::format("blk.{}.nextn.shared_head_norm.weight", il)) != nullptr
                          ? w("shared_head_norm.weight")
                          : Weights(f, "output_norm.weight");
  const Matrix head = Weights(f, c.tied ? "token_embd.weight" : "output.weight");
  std::vector<std::vector<double>> logits(x.size());
  normed->assign(x.size(), {});
  for (size_t t = 0; t < x.size(); ++t) {
    (*normed)[t] = RmsNorm(x[t], norm, c.rms_eps);
    logits[t] = MatVec(head, (*normed)[t], c.n_vocab);
  }
  return logits;
}
// Tolerances on RelErr, per weight type: 2.1-2.9x the largest error measured over all the cases
// below with that type (64 positions; batched prefill and one-token decode over an F32 cache, and
// the default F16 cache on its own), so none sits within 25% of a passing value and none has more
// than 5x slack. Measured with the kernels dispatched to each target (AVX3_DL, AVX3, AVX2 with
// and without AVX-VNNI, SSE4, SCALAR; AVX3_DL without the BF16 dot product): F32 and F16 weights
// vary with the target in the last digit, the others not at all.
//
//   weights  F32 cache: measured  tolerance   F16 cache: measured  tolerance
//   F32                  2.33e-6     6e-6                1.77e-3     4e-3
//   F16                  2.08e-6     6e-6                1.23e-3     3e-3
//   BF16                 9.59e-3     2e-2                9.27e-3     2e-2
//   Q8_0                 3.64e-2     8e-2                2.97e-2     7e-2
//   Q4_0                 4.17e-2     9e-2                3.72e-2     8e-2
//   Q4_1                 5.06e-2    1.1e-1               4.83e-2    1.1e-1
//   Q5_0                 2.96e-2     7e-2                2.81e-2     7e-2
//   Q5_1                 2.90e-2     7e-2                2.91e-2     7e-2
//   Q4_K                 3.21e-2     7e-2                3.62e-2     8e-2
//   Q5_K                 5.35e-2    1.2e-1               4.33e-2    1.0e-1
//   Q6_K                 3.77e-2     8e-2                3.50e-2     8e-2
//
// Why they differ: F16 weights are exact in float, so both float types see only float32
// accumulation; the F16 cache rounds K and V to 11 significant bits. BF16 weights meet
// activations rounded to bf16, quantised weights activations quantised to 8 bits (Q8_0 / Q8_K),
// as llama.cpp does; that rounding, amplified by this random model, dominates every quantised
// type (Q8_0 weights measure no better than Q5_0). Each engine mutation these cases guard against
// (RoPE layout, rms_eps x 10, linear factor, YaRN ramp, magnitude or attn_factor, llama 3
// frequency factors, biases) raises some F32 case orders of magnitude above its tolerance.
double Tolerance(DType type, bool f16_cache) {
  switch (type) {
    case DType::kF32: return f16_cache ? 4e-3 : 6e-6;
    case DType::kF16: return f16_cache ? 3e-3 : 6e-6;
    case DType::kBF16: return 2e-2;
    case DType::kQ8_0: return f16_cache ? 7e-2 : 8e-2;
    case DType::kQ4_0: return f16_cache ? 8e-2 : 9e-2;
    case DType::kQ4_1: return 1.1e-1;
    case DType::kQ5_0: case DType::kQ5_1: return 7e-2;
    case DType::kQ4_K: return f16_cache ? 8e-2 : 7e-2;
    case DType::kQ5_K: return f16_cache ? 1.0e-1 : 1.2e-1;
    case DType::kQ6_K: return 8e-2;
    default: ADD_FAILURE() << "no tolerance measured for " << DTypeName(type); return 0;
  }
}

enum class RopeVariant {
  kPlain,         // no scaling, no rope_freqs
  kLlama3,        // rope_freqs.weight (llama 3.x frequency factors)
  kLinear,        // rope.scaling.type linear, factor 4
  kLegacyLinear,  // only the older rope.scale_linear = 2 (no type key: llama.cpp's default, linear)
  kYarn,          // rope.scaling.type yarn, factor 4, original context 4096, attn_factor 0.9
  kFactorNoType,  // rope.scaling.factor 4 and no type key (llama.cpp's default type: linear)
  kLinearAttn,    // linear, factor 4, attn_factor 0.9 (applied whatever the scaling type)
  kAttnOnly,      // no scaling, attn_factor 0.9
  kYarnBetas,     // as kYarn, plus yarn_beta_fast 8 / yarn_beta_slow 0.5 (llama.cpp reads neither here)
};

const char* VariantName(RopeVariant v) {
  switch (v) {
    case RopeVariant::kPlain: return "plain";
    case RopeVariant::kLlama3: return "llama3";
    case RopeVariant::kLinear: return "linear";
    case RopeVariant::kLegacyLinear: return "legacylinear";
    case RopeVariant::kYarn: return "yarn";
    case RopeVariant::kFactorNoType: return "factornotype";
    case RopeVariant::kLinearAttn: return "linearattn";
    case RopeVariant::kAttnOnly: return "attnonly";
    case RopeVariant::kYarnBetas: return "yarnbetas";
  }
  return "?";
}

struct Case {
  std::string arch;
  DType type;
  RopeVariant rope;
  // Larger than real models' 1e-5 / 1e-6 so that a wrong eps shows far above float rounding: the
  // change a wrong eps makes is linear in eps, and on 1e-6 an eps x 10 would move the F32 cases
  // only a few times the F32 tolerance.
  float rms_eps;
  // deepseek2's layouts: kMlaLite (no query LoRA, split attn_k_b / attn_v_b, softmax gating, no
  // weight norm, scale 1: V2-Lite), kMlaLegacy (query LoRA, the older combined attn_kv_b),
  // kMlaV3 (query LoRA, sigmoid gating with the selection bias, 4 expert groups of which 2 are
  // used, normalised weights scaled by 2.5).
  int mla = 0;
  int nextn = 0;  // deepseek2: multi-token-prediction blocks after the trunk
};
enum MlaVariant { kMlaLite = 0, kMlaLegacy = 1, kMlaV3 = 2 };

std::string CaseName(const Case& c) {
  const char* mla[] = {"lite", "legacy", "v3"};
  return fmt::format("{}{}_{}_{}{}", c.arch, c.arch == "deepseek2" ? std::string("_") + mla[c.mla] : "",
                     DTypeName(c.type), VariantName(c.rope), c.nextn > 0 ? "_nextn" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

// The case's model: the tiny spec of its arch and type with its RoPE variant, the keys the synth
// writer has no field for added by rewriting the file.
std::string WriteCaseModel(const Case& p) {
  SynthSpec spec = TinySpec(p.arch, p.type);
  spec.rms_eps = p.rms_eps;
  spec.n_nextn = p.nextn;
  if (p.mla == kMlaLegacy) {
    spec.split_kv_b = false;
    spec.q_lora_rank = 32;
  } else if (p.mla == kMlaV3) {
    spec.q_lora_rank = 32;
    spec.expert_gating = 2;
    spec.expert_bias = true;
    spec.n_expert_group = 4;
    spec.n_expert_group_used = 2;
    spec.expert_weights_norm = true;
    spec.expert_weights_scale = 2.5f;
    spec.yarn_log_mul = p.rope == RopeVariant::kYarn ? 0.0707f : 0.0f;
  }
  spec.llama3_rope_freqs = p.rope == RopeVariant::kLlama3;
  std::vector<std::pair<std::string, gguf::Value>> extra;
  switch (p.rope) {
    case RopeVariant::kPlain: case RopeVariant::kLlama3: break;
    case RopeVariant::kLinear:
      spec.rope_scaling = "linear";
      spec.rope_scaling_factor = 4.0f;
      break;
    case RopeVariant::kLegacyLinear:
      extra.emplace_back(p.arch + ".rope.scale_linear", gguf::Value::F32(2.0f));
      break;
    case RopeVariant::kYarn: case RopeVariant::kYarnBetas:
      spec.rope_scaling = "yarn";
      spec.rope_scaling_factor = 4.0f;
      spec.n_ctx = 16384;  // the writer's original_context_length is n_ctx / 4: a ramp over dims 2..6
      extra.emplace_back(p.arch + ".rope.scaling.attn_factor", gguf::Value::F32(0.9f));
      if (p.rope == RopeVariant::kYarnBetas) {
        extra.emplace_back(p.arch + ".rope.scaling.yarn_beta_fast", gguf::Value::F32(8.0f));
        extra.emplace_back(p.arch + ".rope.scaling.yarn_beta_slow", gguf::Value::F32(0.5f));
      }
      break;
    case RopeVariant::kFactorNoType:
      extra.emplace_back(p.arch + ".rope.scaling.factor", gguf::Value::F32(4.0f));
      break;
    case RopeVariant::kLinearAttn:
      spec.rope_scaling = "linear";
      spec.rope_scaling_factor = 4.0f;
      extra.emplace_back(p.arch + ".rope.scaling.attn_factor", gguf::Value::F32(0.9f));
      break;
    case RopeVariant::kAttnOnly:
      extra.emplace_back(p.arch + ".rope.scaling.attn_factor", gguf::Value::F32(0.9f));
      break;
  }
  const std::string path = WriteTiny(spec, CaseName(p));
  if (extra.empty()) return path;
  auto f = gguf::File::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return path;
  gguf::Writer w;
  w.CopyMetadataFrom(**f);
  for (auto& [k, v] : extra) w.Set(k, v);
  for (const auto& t : (*f)->tensors())
    EXPECT_TRUE(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  const std::string out = testing::TempPath("tiny_" + CaseName(p) + "_keys.gguf");
  EXPECT_TRUE(w.WriteFile(out).ok());
  return out;
}

// The file carries the variant the case claims (so a writer change cannot drop the coverage).
void ExpectVariant(const RefConfig& c, const Case& p) {
  const RopeVariant v = p.rope;
  const bool yarn = v == RopeVariant::kYarn || v == RopeVariant::kYarnBetas;
  const bool by4 = v == RopeVariant::kLinear || v == RopeVariant::kLinearAttn || v == RopeVariant::kFactorNoType || yarn;
  EXPECT_EQ(c.freq_factors.empty(), v != RopeVariant::kLlama3);
  EXPECT_EQ(c.freq_scale, v == RopeVariant::kLegacyLinear ? 0.5 : by4 ? 0.25 : 1.0);
  EXPECT_EQ(c.ext_factor, yarn ? 1.0 : 0.0);
  if (yarn) {
    EXPECT_EQ(c.corr_low, 2.0);
    EXPECT_EQ(c.corr_high, 6.0);
  }
  const bool attn = yarn || v == RopeVariant::kLinearAttn || v == RopeVariant::kAttnOnly;
  // deepseek2 nets YaRN's magnitude out its own way (ReadRefConfig); the key still multiplies.
  if (c.expect.moe && c.kv_lora > 0) {
    EXPECT_EQ(c.kq_scale > 0, true);
  } else {
    EXPECT_NEAR(c.attn_factor, attn ? 0.9 : 1.0, 1e-6);
  }
  EXPECT_EQ(c.rms_eps, p.rms_eps);
}

class ArchTest : public ::testing::TestWithParam<Case> {};

// The engine's logits at 64 positions against the double reference: the whole prompt in one
// pass and one token at a time over an F32 cache, then in one pass over the default F16 cache.
TEST_P(ArchTest, ForwardMatchesDoubleReference) {
  constexpr int kTokens = 64;
  const Case& p = GetParam();
  const std::string path = WriteCaseModel(p);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const RefConfig rc = ReadRefConfig((*model)->file(), p.arch);
  ASSERT_FALSE(HasFailure()) << "the reference cannot read the file's hyperparameters";
  ExpectVariant(rc, p);
  const int n_vocab = rc.n_vocab;
  const auto tokens = Prompt(kTokens, n_vocab);
  const auto want = ReferenceForward((*model)->file(), rc, tokens);
  ASSERT_EQ(want.size(), static_cast<size_t>(kTokens));

  struct Worst {
    double err = 0;
    int pos = -1;
    void Add(double e, int t) {
      if (!(e <= err)) err = e, pos = t;  // NaN counts as worst
    }
  };
  ThreadPool pool(2);
  const ModelConfig& ec = (*model)->config();  // sizes the engine's caches only
  Batch batch;
  for (int i = 0; i < kTokens; ++i) batch.Add(tokens[i], i, 0, true);
  KvCache cache(ec, 1, kTokens, DType::kF32);
  auto out = (*model)->Forward(batch, cache, pool);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->logit_rows.size(), static_cast<size_t>(kTokens));
  Worst prefill, decode, f16;
  for (int t = 0; t < kTokens; ++t) prefill.Add(RelErr(out->Logits(t, n_vocab), want[t]), t);

  KvCache cache2(ec, 1, kTokens, DType::kF32);
  for (int t = 0; t < kTokens; ++t) {
    Batch one;
    one.Add(tokens[t], t, 0, true);
    auto o = (*model)->Forward(one, cache2, pool);
    ASSERT_TRUE(o.ok()) << o.status().message();
    decode.Add(RelErr(o->Logits(0, n_vocab), want[t]), t);
  }

  KvCache cache16(ec, 1, kTokens);
  ASSERT_EQ(cache16.type(), DType::kF16);
  auto out16 = (*model)->Forward(batch, cache16, pool);
  ASSERT_TRUE(out16.ok()) << out16.status().message();
  for (int t = 0; t < kTokens; ++t) f16.Add(RelErr(out16->Logits(t, n_vocab), want[t]), t);

  fmt::print("measured {}: prefill {:.3g} (position {}), decode {:.3g} (position {}), F16 cache {:.3g} (position {})\n",
             CaseName(p), prefill.err, prefill.pos, decode.err, decode.pos, f16.err, f16.pos);
  const double tol = Tolerance(p.type, false), tol16 = Tolerance(p.type, true);
  EXPECT_LT(prefill.err, tol) << "prefill, worst at position " << prefill.pos;
  EXPECT_LT(decode.err, tol) << "decode, worst at position " << decode.pos;
  EXPECT_LT(f16.err, tol16) << "F16 cache, worst at position " << f16.pos;
}

constexpr float kEpsA = 1e-3f, kEpsB = 5e-4f;

INSTANTIATE_TEST_SUITE_P(
    AllArchs, ArchTest,
    ::testing::Values(
        // Every RoPE variant the engine reads, with F32 weights (the tightest tolerance).
        Case{"llama", DType::kF32, RopeVariant::kPlain, kEpsA}, Case{"llama", DType::kF32, RopeVariant::kLlama3, kEpsA},
        Case{"llama", DType::kF32, RopeVariant::kLinear, kEpsB}, Case{"mistral", DType::kF32, RopeVariant::kLegacyLinear, kEpsA},
        Case{"qwen2", DType::kF32, RopeVariant::kPlain, kEpsB}, Case{"qwen2", DType::kF32, RopeVariant::kYarn, kEpsA},
        Case{"qwen3", DType::kF32, RopeVariant::kPlain, kEpsA}, Case{"qwen3", DType::kF32, RopeVariant::kYarn, kEpsB},
        // The keys as llama.cpp reads them: a factor without a type, attn_factor without YaRN,
        // YaRN's beta keys (not read for these architectures).
        Case{"llama", DType::kF32, RopeVariant::kFactorNoType, kEpsA},
        Case{"llama", DType::kF32, RopeVariant::kLinearAttn, kEpsB},
        Case{"qwen3", DType::kF32, RopeVariant::kAttnOnly, kEpsA},
        Case{"qwen3", DType::kF32, RopeVariant::kYarnBetas, kEpsA},
        // Every weight type.
        Case{"mistral", DType::kF16, RopeVariant::kPlain, kEpsA}, Case{"qwen3", DType::kF16, RopeVariant::kPlain, kEpsB},
        Case{"qwen3", DType::kBF16, RopeVariant::kPlain, kEpsA}, Case{"qwen3", DType::kQ8_0, RopeVariant::kPlain, kEpsA},
        Case{"llama", DType::kQ4_0, RopeVariant::kLlama3, kEpsA}, Case{"qwen2", DType::kQ4_1, RopeVariant::kPlain, kEpsA},
        Case{"qwen3", DType::kQ5_0, RopeVariant::kPlain, kEpsA}, Case{"qwen3", DType::kQ5_1, RopeVariant::kPlain, kEpsA},
        Case{"qwen3", DType::kQ4_K, RopeVariant::kPlain, kEpsA}, Case{"llama", DType::kQ5_K, RopeVariant::kLlama3, kEpsA},
        Case{"qwen3", DType::kQ6_K, RopeVariant::kPlain, kEpsA},
        // Mixture of experts, in the float types only: with activations rounded to 8 or 16 bits
        // (BF16 and quantised weights) the router logits move by a few hundredths, enough to
        // pick another expert wherever two are that close (as llama.cpp would), and the changed
        // row reaches every later position through attention, which no tolerance on logits
        // describes. The expert products run the kernels every type's dense case checks above;
        // model_test checks the quantised expert path's batch invariance.
        Case{"qwen3moe", DType::kF32, RopeVariant::kPlain, kEpsA}, Case{"qwen3moe", DType::kF16, RopeVariant::kYarn, kEpsB},
        // deepseek2 (multi-head latent attention, DeepSeek's mixture) in its three layouts, with
        // YaRN and its log multiplier on the V3 one.
        Case{"deepseek2", DType::kF32, RopeVariant::kPlain, kEpsA, kMlaLite},
        Case{"deepseek2", DType::kF32, RopeVariant::kPlain, kEpsB, kMlaLegacy},
        Case{"deepseek2", DType::kF32, RopeVariant::kYarn, kEpsA, kMlaV3},
        Case{"deepseek2", DType::kF16, RopeVariant::kPlain, kEpsB, kMlaV3},
        // A multi-token-prediction block after the trunk: the trunk must not run it.
        Case{"deepseek2", DType::kF32, RopeVariant::kYarn, kEpsA, kMlaV3, 1}),
    [](const ::testing::TestParamInfo<Case>& info) { return CaseName(info.param); });

// deepseek2's multi-token-prediction block (Model::ForwardNextn) against the double reference:
// rows of the llama.cpp draft-mtp layout (row t: token t with the trunk's normed output at t-1,
// row 0 with a zero h) in one pass and one row at a time, then a chained row fed the block's own
// normed output. Over an F32 cache; the tolerance is the F32 trunk's.
TEST(NextnTest, MtpBlockMatchesDoubleReference) {
  constexpr int kTokens = 24;
  const Case p{"deepseek2", DType::kF32, RopeVariant::kYarn, kEpsA, kMlaV3, 1};
  auto model = Model::Load(WriteCaseModel(p));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const Model& m = **model;
  ASSERT_EQ(m.config().n_nextn, 1);
  const RefConfig rc = ReadRefConfig(m.file(), p.arch);
  ASSERT_FALSE(HasFailure());
  const int n_vocab = rc.n_vocab, d = rc.n_embd;
  const auto tokens = Prompt(kTokens, n_vocab);
  const Rows trunk = ReferenceTrunk(m.file(), rc, tokens);
  const Matrix out_norm = Weights(m.file(), "output_norm.weight");
  Rows h(kTokens, std::vector<double>(d, 0.0));
  for (int t = 1; t < kTokens; ++t) h[t] = RmsNorm(trunk[t - 1], out_norm, rc.rms_eps);
  // The engine gets the h rounded to float; so does the reference, so only the block's arithmetic differs.
  std::vector<float> hf;
  for (auto& row : h)
    for (double& v : row) hf.push_back(static_cast<float>(v)), v = hf.back();
  Rows normed;
  const auto want = ReferenceNextn(m.file(), rc, tokens, h, &normed);
  const double tol = Tolerance(p.type, false);

  ThreadPool pool(2);
  const ModelConfig cc = m.NextnCacheConfig();
  EXPECT_EQ(cc.n_layer, 1);
  auto err_of = [&](const std::vector<float>& got, const std::vector<double>& ref) {
    return RelErr(got.data(), ref);
  };
  Batch all;
  for (int t = 0; t < kTokens; ++t) all.Add(tokens[t], t, 0, true);
  KvCache cache(cc, 1, kTokens + 1, DType::kF32);
  auto out = m.ForwardNextn(all, hf.data(), cache, pool);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->hidden.size(), static_cast<size_t>(kTokens) * d);
  for (int t = 0; t < kTokens; ++t) {
    EXPECT_LT(RelErr(out->Logits(t, n_vocab), want[t]), tol) << "row " << t;
    EXPECT_LT(err_of(std::vector<float>(out->hidden.begin() + t * d, out->hidden.begin() + (t + 1) * d), normed[t]),
              tol)
        << "normed output, row " << t;
  }
  EXPECT_EQ(cache.Length(0), kTokens);

  KvCache one_cache(cc, 1, kTokens, DType::kF32);
  for (int t = 0; t < kTokens; ++t) {
    Batch one;
    one.Add(tokens[t], t, 0, true);
    auto o = m.ForwardNextn(one, hf.data() + static_cast<size_t>(t) * d, one_cache, pool);
    ASSERT_TRUE(o.ok()) << o.status().message();
    EXPECT_LT(RelErr(o->Logits(0, n_vocab), want[t]), tol) << "row " << t << " alone";
  }

  // A draft row: the next token with the block's own normed output of the last row.
  const int32_t next = (tokens.back() + 5) % n_vocab;
  std::vector<int32_t> chained = tokens;
  chained.push_back(next);
  Rows h2 = h;
  std::vector<float> last(out->hidden.end() - d, out->hidden.end());
  h2.push_back(std::vector<double>(last.begin(), last.end()));
  Rows normed2;
  const auto want2 = ReferenceNextn(m.file(), rc, chained, h2, &normed2);
  Batch draft;
  draft.Add(next, kTokens, 0, true);
  auto o = m.ForwardNextn(draft, last.data(), cache, pool);
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_LT(RelErr(o->Logits(0, n_vocab), want2.back()), tol);

  // A model without the block says so.
  auto plain = Model::Load(WriteCaseModel(Case{"deepseek2", DType::kF32, RopeVariant::kYarn, kEpsA, kMlaV3}));
  ASSERT_TRUE(plain.ok());
  KvCache pc((*plain)->NextnCacheConfig(), 1, 4, DType::kF32);
  auto refused = (*plain)->ForwardNextn(draft, last.data(), pc, pool);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("nextn_predict_layers"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace dspark
