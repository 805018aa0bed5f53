#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace dspark {

namespace {

// ggml_rope_yarn_corr_dim: the dimension index whose wavelength spans n_rot rotations over the
// original context.
float YarnCorrDim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2.0f * static_cast<float>(M_PI))) / (2.0f * std::log(base));
}

float YarnRamp(float low, float high, int i0) {
  const float y = (i0 / 2 - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

}  // namespace

Rope::Rope(const RopeConfig& config) : config_(config) {
  const int half = config_.n_rot / 2;
  inv_freq_.resize(half);
  const float theta_scale = std::pow(config_.freq_base, -2.0f / config_.n_rot);
  float t = 1.0f;
  for (int i = 0; i < half; ++i) {
    const float factor = config_.freq_factors.empty() ? 1.0f : config_.freq_factors[i];
    inv_freq_[i] = t / factor;
    t *= theta_scale;
  }
  if (config_.scaling == RopeScaling::kYarn) {
    const int n_ctx_orig = config_.n_ctx_orig > 0 ? config_.n_ctx_orig : 4096;
    const float start = std::floor(YarnCorrDim(config_.n_rot, n_ctx_orig, config_.yarn_beta_fast, config_.freq_base));
    const float end = std::ceil(YarnCorrDim(config_.n_rot, n_ctx_orig, config_.yarn_beta_slow, config_.freq_base));
    corr_low_ = std::max(0.0f, start);
    corr_high_ = std::min(static_cast<float>(config_.n_rot - 1), end);
  }
}

void Rope::Angles(int pos, float* cos_out, float* sin_out) const {
  const int half = config_.n_rot / 2;
  const float freq_scale = config_.scaling == RopeScaling::kNone ? 1.0f : config_.freq_scale;
  const float ext_factor = config_.scaling == RopeScaling::kYarn ? config_.yarn_ext_factor : 0.0f;
  const float mscale = config_.attn_factor;
  for (int i = 0; i < half; ++i) {
    // Angles in float as ggml computes them, so long positions round the same way.
    const float theta_extrap = static_cast<float>(pos) * inv_freq_[i];
    const float theta_interp = freq_scale * theta_extrap;
    float theta = theta_interp;
    if (ext_factor != 0.0f) {
      const float ramp_mix = YarnRamp(corr_low_, corr_high_, 2 * i) * ext_factor;
      theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
    }
    cos_out[i] = std::cos(theta) * mscale;
    sin_out[i] = std::sin(theta) * mscale;
  }
}

void Rope::Apply(const float* cos_t, const float* sin_t, int n_heads, int head_dim, float* x) const {
  const int half = config_.n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<size_t>(h) * head_dim;
    if (config_.style == RopeStyle::kNeox) {
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_t[i] - b * sin_t[i];
        v[i + half] = a * sin_t[i] + b * cos_t[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cos_t[i] - b * sin_t[i];
        v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
      }
    }
  }
}

}  // namespace dspark
