#include "sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"

namespace dspark {

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return InvalidArgument("temperature must be a finite number >= 0, got {}", p.temperature);
  if (p.top_k < 0) return InvalidArgument("top_k must be >= 0 (0 disables it), got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgument("top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) return InvalidArgument("min_p must be in [0, 1), got {}", p.min_p);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return InvalidArgument("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return InvalidArgument("presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  if (!(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f))
    return InvalidArgument("repeat_penalty must be a finite number > 0, got {}", p.repeat_penalty);
  if (p.repeat_last_n < -1) return InvalidArgument("repeat_last_n must be >= -1, got {}", p.repeat_last_n);
  for (const auto& [id, bias] : p.logit_bias)
    if (!(bias >= -100.0f && bias <= 100.0f))
      return InvalidArgument("logit_bias for token {} must be in [-100, 100], got {}", id, bias);
  return Status::Ok();
}

std::string_view SamplerOrderName(SamplerOrder order) {
  return order == SamplerOrder::kTemperatureLast ? "temp-last" : "temp-first";
}

Result<SamplerOrder> ParseSamplerOrder(std::string_view name) {
  if (name == "temp-first") return SamplerOrder::kTemperatureFirst;
  if (name == "temp-last") return SamplerOrder::kTemperatureLast;
  return InvalidArgument("sampler order must be temp-first or temp-last, got '{}'", name);
}

namespace {
uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& w : s_) w = SplitMix64(seed);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

Rng KeyedRng(uint64_t seed, int64_t position) {
  // Two rounds of splitmix64 mixing keep nearby (seed, position) pairs unrelated.
  uint64_t x = seed;
  const uint64_t a = SplitMix64(x);
  uint64_t y = a ^ (static_cast<uint64_t>(position) * 0xd1342543de82ef95ull);
  return Rng(SplitMix64(y));
}

void ApplyLogitAdjustments(float* logits, int n_vocab, const SamplingParams& params,
                           std::span<const int32_t> committed, std::span<const int32_t> drafted, size_t n_prompt) {
  for (const auto& [id, bias] : params.logit_bias)
    if (id >= 0 && id < n_vocab) logits[id] += bias;
  const size_t n_total = committed.size() + drafted.size();
  const auto at = [&](size_t i) { return i < committed.size() ? committed[i] : drafted[i - committed.size()]; };
  // The distinct tokens of a span with their counts: sorting a copy keeps this free of an
  // O(n_vocab) table per row.
  thread_local std::vector<int32_t> ids;
  const auto each_count = [&](size_t begin, auto&& fn) {
    ids.clear();
    for (size_t i = begin; i < n_total; ++i) ids.push_back(at(i));
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      if (ids[i] >= 0 && ids[i] < n_vocab) fn(ids[i], static_cast<int>(j - i));
      i = j;
    }
  };
  if (params.repeat_penalty != 1.0f && params.repeat_last_n != 0) {
    const size_t window = params.repeat_last_n < 0 ? n_total : static_cast<size_t>(params.repeat_last_n);
    each_count(n_total - std::min(window, n_total), [&](int32_t id, int) {
      float& l = logits[id];
      l = l > 0 ? l / params.repeat_penalty : l * params.repeat_penalty;
    });
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    each_count(std::min(n_prompt, n_total), [&](int32_t id, int count) {
      logits[id] -= params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
    });
  }
}

TokenLogprob ComputeLogprob(const float* logits, int n_vocab, int32_t id, int n_top) {
  float max_logit = -INFINITY;
  for (int i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - max_logit));
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  TokenLogprob r;
  r.id = id;
  r.logprob = static_cast<float>(static_cast<double>(logits[id]) - log_z);
  n_top = std::clamp(n_top, 0, n_vocab);
  if (n_top > 0) {
    std::vector<int32_t> order(n_vocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n_top, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int k = 0; k < n_top; ++k)
      r.top.emplace_back(order[k], static_cast<float>(static_cast<double>(logits[order[k]]) - log_z));
  }
  return r;
}

int32_t Argmax(const float* logits, int n_vocab) { return static_cast<int32_t>(ops::ArgMax(logits, n_vocab)); }

void ComputeProbs(const float* logits, int n_vocab, const SamplingParams& params, std::vector<float>* probs) {
  std::vector<float>& p = *probs;
  p.assign(n_vocab, 0.0f);
  if (params.greedy()) {
    p[Argmax(logits, n_vocab)] = 1.0f;
    return;
  }
  // The filters read the distribution at the temperature the order puts before them.
  const bool temp_last = params.order == SamplerOrder::kTemperatureLast;
  const float inv_t = temp_last ? 1.0f : 1.0f / params.temperature;
  float max_logit = -INFINITY;
  for (int i = 0; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const float e = std::exp((logits[i] - max_logit) * inv_t);
    p[i] = e;
    sum += e;
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (float& v : p) v *= inv_sum;

  const bool use_top_k = params.top_k > 0 && params.top_k < n_vocab;
  const bool use_top_p = params.top_p < 1.0f;
  if (use_top_k || use_top_p) {
    // Candidates sorted by probability, ties broken by id so the cut is deterministic.
    std::vector<int32_t> order(n_vocab);
    std::iota(order.begin(), order.end(), 0);
    const int keep_max = use_top_k ? params.top_k : n_vocab;
    auto by_prob = [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
    if (keep_max < n_vocab) {
      std::partial_sort(order.begin(), order.begin() + keep_max, order.end(), by_prob);
    } else {
      std::sort(order.begin(), order.end(), by_prob);
    }
    int keep = keep_max;
    if (use_top_p) {
      double cum = 0;
      double kept_mass = 0;
      for (int k = 0; k < keep_max; ++k) kept_mass += p[order[k]];
      for (int k = 0; k < keep_max; ++k) {
        cum += p[order[k]];
        // Nucleus over the top-k survivors, relative to their mass (top-k then top-p).
        if (cum >= params.top_p * kept_mass) {
          keep = k + 1;
          break;
        }
      }
    }
    std::vector<uint8_t> kept(n_vocab, 0);
    for (int k = 0; k < keep; ++k) kept[order[k]] = 1;
    for (int i = 0; i < n_vocab; ++i)
      if (!kept[i]) p[i] = 0.0f;
  }
  if (params.min_p > 0.0f) {
    const float top = *std::max_element(p.begin(), p.end());
    const float cut = params.min_p * top;
    for (float& v : p)
      if (v < cut) v = 0.0f;
  }
  if (temp_last && params.temperature != 1.0f) {
    const float inv_temp = 1.0f / params.temperature;
    for (int i = 0; i < n_vocab; ++i)
      if (p[i] > 0.0f) p[i] = std::exp((logits[i] - max_logit) * inv_temp);
  }
  double total = 0;
  for (float v : p) total += v;
  const float inv_total = static_cast<float>(1.0 / total);
  for (float& v : p) v *= inv_total;
}

int32_t SampleFromWeights(const std::vector<float>& weights, Rng& rng) {
  double total = 0;
  for (float w : weights) total += w;
  double u = rng.Uniform() * total;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    last_nonzero = static_cast<int32_t>(i);
    u -= weights[i];
    if (u < 0) return last_nonzero;
  }
  return last_nonzero;  // rounding left a sliver of mass: take the last candidate
}

int32_t SampleToken(const float* logits, int n_vocab, const SamplingParams& params, Rng& rng,
                    std::vector<float>* scratch) {
  if (params.greedy()) return Argmax(logits, n_vocab);
  ComputeProbs(logits, n_vocab, params, scratch);
  return SampleFromWeights(*scratch, rng);
}

}  // namespace dspark
