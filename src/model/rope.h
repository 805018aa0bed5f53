// Rotary position embeddings with ggml's exact semantics: normal (adjacent pairs) and NeoX (halves)
// layouts, linear scaling, llama-3 frequency factors, and YaRN (ramp between interpolated and
// extrapolated angles, magnitude correction), as ggml_rope_ext computes them.
#pragma once

#include <vector>

#include "model/config.h"

namespace dspark {

class Rope {
 public:
  explicit Rope(const RopeConfig& config);

  // Fills cos/sin tables [n_rot / 2] for position `pos`.
  void Angles(int pos, float* cos_out, float* sin_out) const;
  // Rotates `n_heads` heads of `head_dim` floats laid out contiguously, using tables from Angles.
  void Apply(const float* cos_t, const float* sin_t, int n_heads, int head_dim, float* x) const;

  int n_rot() const { return config_.n_rot; }

 private:
  RopeConfig config_;
  float corr_low_ = 0, corr_high_ = 0;
  std::vector<float> inv_freq_;  // base^(-2i/n_rot) / freq_factor[i]
};

}  // namespace dspark
