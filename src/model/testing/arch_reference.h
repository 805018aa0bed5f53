// The double-precision reference forward pass arch_test.cc checks every architecture against:
// llama.cpp's semantics read from the file's own keys (never the engine's parse), dense, mixture
// and MLA blocks, deepseek2's multi-token-prediction block. Test-only; each includer gets its own copy.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "model/testing/reference.h"

namespace dspark {
namespace {


using testing::Prompt;
using testing::RelErr;
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

}  // namespace
}  // namespace dspark
