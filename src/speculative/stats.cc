#include "speculative/stats.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace dspark {

namespace {
template <typename T>
void GrowTo(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n, T{});
}
}  // namespace

void SpecStats::RecordStep(int drafted, int accepted, const std::vector<float>& survival) {
  ++num_steps;
  if (drafted == 0) return;
  ++num_drafts;
  num_draft_tokens += drafted;
  num_accepted_tokens += accepted;
  if (accepted == drafted) ++num_whole_drafts;
  GrowTo(accepted_per_pos, drafted);
  GrowTo(drafted_per_pos, drafted);
  const int predicted = std::min(drafted, static_cast<int>(survival.size()));
  GrowTo(predicted_survival_sum, predicted);
  GrowTo(predicted_per_pos, predicted);
  GrowTo(predicted_accepted_per_pos, predicted);
  for (int i = 0; i < drafted; ++i) {
    ++drafted_per_pos[i];
    if (i < accepted) ++accepted_per_pos[i];
    if (i >= predicted) continue;
    predicted_survival_sum[i] += survival[i];
    ++predicted_per_pos[i];
    if (i < accepted) ++predicted_accepted_per_pos[i];
  }
}

void SpecStats::RecordLeaves(int leaves, int reached, int position, bool accepted, int tail_tokens,
                             int tail_accepted) {
  num_leaf_tokens += leaves;
  num_leaf_reached += reached;
  num_tail_tokens += tail_tokens;
  if (!accepted) return;
  ++num_leaf_accepted;
  num_tail_accepted += tail_accepted;
  GrowTo(leaf_accepted_per_pos, position + 1);
  ++leaf_accepted_per_pos[position];
  GrowTo(tail_accepted_per_pos, tail_accepted);
  for (int t = 0; t < tail_accepted; ++t) ++tail_accepted_per_pos[t];
}

void SpecStats::Merge(const SpecStats& o) {
  prompt_tokens += o.prompt_tokens;
  prompt_cached_tokens += o.prompt_cached_tokens;
  generated_tokens += o.generated_tokens;
  num_steps += o.num_steps;
  num_drafts += o.num_drafts;
  num_draft_tokens += o.num_draft_tokens;
  num_accepted_tokens += o.num_accepted_tokens;
  num_whole_drafts += o.num_whole_drafts;
  num_leaf_tokens += o.num_leaf_tokens;
  num_leaf_reached += o.num_leaf_reached;
  num_leaf_accepted += o.num_leaf_accepted;
  num_tail_tokens += o.num_tail_tokens;
  num_tail_accepted += o.num_tail_accepted;
  GrowTo(accepted_per_pos, o.accepted_per_pos.size());
  GrowTo(drafted_per_pos, o.drafted_per_pos.size());
  GrowTo(predicted_survival_sum, o.predicted_survival_sum.size());
  GrowTo(predicted_per_pos, o.predicted_per_pos.size());
  GrowTo(predicted_accepted_per_pos, o.predicted_accepted_per_pos.size());
  for (size_t i = 0; i < o.accepted_per_pos.size(); ++i) accepted_per_pos[i] += o.accepted_per_pos[i];
  GrowTo(leaf_accepted_per_pos, o.leaf_accepted_per_pos.size());
  GrowTo(tail_accepted_per_pos, o.tail_accepted_per_pos.size());
  for (size_t i = 0; i < o.leaf_accepted_per_pos.size(); ++i) leaf_accepted_per_pos[i] += o.leaf_accepted_per_pos[i];
  for (size_t i = 0; i < o.tail_accepted_per_pos.size(); ++i) tail_accepted_per_pos[i] += o.tail_accepted_per_pos[i];
  for (size_t i = 0; i < o.drafted_per_pos.size(); ++i) drafted_per_pos[i] += o.drafted_per_pos[i];
  for (size_t i = 0; i < o.predicted_survival_sum.size(); ++i) predicted_survival_sum[i] += o.predicted_survival_sum[i];
  for (size_t i = 0; i < o.predicted_per_pos.size(); ++i) predicted_per_pos[i] += o.predicted_per_pos[i];
  for (size_t i = 0; i < o.predicted_accepted_per_pos.size(); ++i)
    predicted_accepted_per_pos[i] += o.predicted_accepted_per_pos[i];
  num_target_calls += o.num_target_calls;
  num_draft_calls += o.num_draft_calls;
  num_fallbacks += o.num_fallbacks;
  prompt_ms += o.prompt_ms;
  draft_ms += o.draft_ms;
  verify_ms += o.verify_ms;
  sample_ms += o.sample_ms;
  other_ms += o.other_ms;
  decode_ms += o.decode_ms;
}

std::vector<double> SpecStats::acceptance_per_position() const {
  std::vector<double> out(accepted_per_pos.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = num_drafts ? double(accepted_per_pos[i]) / num_drafts : 0;
  return out;
}

std::vector<double> SpecStats::kept_per_position() const {
  std::vector<double> out(drafted_per_pos.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = drafted_per_pos[i] ? double(accepted_per_pos[i]) / double(drafted_per_pos[i]) : 0;
  return out;
}

std::vector<SpecStats::SlotCalibration> SpecStats::calibration() const {
  std::vector<SlotCalibration> out(predicted_per_pos.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t n = predicted_per_pos[i];
    out[i].drafts = n;
    if (n == 0) continue;
    out[i].predicted = predicted_survival_sum[i] / static_cast<double>(n);
    out[i].realised = static_cast<double>(predicted_accepted_per_pos[i]) / static_cast<double>(n);
  }
  return out;
}

nlohmann::json SpecStats::ToJson() const {
  nlohmann::json j;
  j["prompt_tokens"] = prompt_tokens;
  j["prompt_cached_tokens"] = prompt_cached_tokens;
  j["generated_tokens"] = generated_tokens;
  j["steps"] = num_steps;
  j["drafts"] = num_drafts;
  j["drafted"] = num_draft_tokens;
  j["accepted"] = num_accepted_tokens;
  j["acceptance_rate"] = acceptance_rate();
  j["whole_drafts"] = num_whole_drafts;
  j["leaves"] = num_leaf_tokens;
  j["leaves_reached"] = num_leaf_reached;
  j["leaves_accepted"] = num_leaf_accepted;
  j["tail_tokens"] = num_tail_tokens;
  j["tail_accepted"] = num_tail_accepted;
  j["leaf_accepted_per_position"] = leaf_accepted_per_pos;
  j["tail_accepted_per_position"] = tail_accepted_per_pos;
  j["tau"] = tau();
  j["accepted_per_position"] = accepted_per_pos;
  j["acceptance_per_position"] = acceptance_per_position();
  std::vector<double> predicted, realised;
  for (const SlotCalibration& c : calibration()) {
    predicted.push_back(c.predicted);
    realised.push_back(c.realised);
  }
  j["predicted_survival_per_position"] = predicted;
  j["realised_survival_per_position"] = realised;
  j["target_calls"] = num_target_calls;
  j["draft_calls"] = num_draft_calls;
  j["fallbacks"] = num_fallbacks;
  j["time_ms"] = {{"prompt", prompt_ms}, {"draft", draft_ms}, {"verify", verify_ms},
                  {"sample", sample_ms}, {"other", other_ms}, {"decode", decode_ms}};
  j["prompt_tokens_per_second"] = prompt_tokens_per_second();
  j["tokens_per_second"] = tokens_per_second();
  return j;
}

}  // namespace dspark
