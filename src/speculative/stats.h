// Speculative decoding statistics. Written only by the engine, right after verification; readers
// (CLI, server metrics, bench) format them. Conventions: acceptance rate = accepted / drafted (the
// chain's tokens); mean acceptance length tau = 1 + (accepted + leaves and tail tokens accepted) / drafts, the
// tokens a step commits (the bonus token counted, as vLLM and llama.cpp do); per-position rate =
// accepted_per_pos[i] / drafts; kept rate per position = accepted_per_pos[i] / drafted_per_pos[i]
// (of the drafts that reached position i, independent of the lengths a schedule chose).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dspark {

struct SpecStats {
  int64_t prompt_tokens = 0;
  int64_t prompt_cached_tokens = 0;  // prompt tokens whose KV came from the prompt cache
  int64_t generated_tokens = 0;
  int64_t num_steps = 0;            // target verification steps (including ones with empty drafts)
  int64_t num_drafts = 0;           // steps with a non-empty draft
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  int64_t num_whole_drafts = 0;     // drafts accepted whole (the target's bonus token followed)
  int64_t num_leaf_tokens = 0;      // token trees: alternatives verified beside draft tokens
  int64_t num_leaf_reached = 0;     // of those, beside a rejected draft token (the ones that could be taken)
  int64_t num_leaf_accepted = 0;    // of those, accepted in place of the rejected draft token
  int64_t num_tail_tokens = 0;      // tokens of the leaves' tails verified (side chains)
  int64_t num_tail_accepted = 0;    // of those, accepted after an accepted leaf
  std::vector<int64_t> accepted_per_pos;  // [i]: drafts whose token i was accepted
  std::vector<int64_t> leaf_accepted_per_pos;  // [i]: drafts whose alternative at position i was accepted
  std::vector<int64_t> tail_accepted_per_pos;  // [t]: of those, the ones whose tail token t was kept
  std::vector<int64_t> drafted_per_pos;   // [i]: drafts that had a token i
  // Calibration, over the drafts whose slot i carried a predicted survival (a confidence head's, or
  // the schedule's estimate from draft probabilities; prompt-lookup drafts carry none):
  std::vector<double> predicted_survival_sum;   // [i]: sum of the predicted survival of slot i
  std::vector<int64_t> predicted_per_pos;       // [i]: drafts with a prediction for slot i
  std::vector<int64_t> predicted_accepted_per_pos;  // [i]: of those, the ones whose token i was accepted
  int64_t num_target_calls = 0;     // target forward passes (prefill chunks included)
  int64_t num_draft_calls = 0;      // drafter forward passes
  int64_t num_fallbacks = 0;        // drafter failures that switched the request to plain decoding
  double prompt_ms = 0;
  double draft_ms = 0;
  double verify_ms = 0;   // target passes after prefill
  double sample_ms = 0;   // verification arithmetic and sampling
  double other_ms = 0;    // detokenising, callbacks, bookkeeping
  double decode_ms = 0;   // wall time after prefill

  // Records one verification step: `drafted` tokens proposed, `accepted` of them kept.
  void RecordStep(int drafted, int accepted, const std::vector<float>& survival);
  // Records a step's token-tree leaves: `leaves` verified, `reached` of them beside the rejected
  // draft token, one of those accepted or not.
  // `position`: the rejected draft token's (where the reached leaves are); `tail_tokens` of the
  // leaves' tails verified, `tail_accepted` of them kept after the accepted leaf.
  void RecordLeaves(int leaves, int reached, int position, bool accepted, int tail_tokens = 0, int tail_accepted = 0);
  void Merge(const SpecStats& other);

  double acceptance_rate() const { return num_draft_tokens ? double(num_accepted_tokens) / num_draft_tokens : 0; }
  double tau() const { return num_drafts ? 1.0 + double(num_accepted_tokens + num_leaf_accepted + num_tail_accepted) / num_drafts : 1.0; }
  double tokens_per_second() const { return decode_ms > 0 ? generated_tokens * 1000.0 / decode_ms : 0; }
  double prompt_tokens_per_second() const { return prompt_ms > 0 ? prompt_tokens * 1000.0 / prompt_ms : 0; }
  std::vector<double> acceptance_per_position() const;  // accepted_per_pos[i] / num_drafts
  std::vector<double> kept_per_position() const;        // accepted_per_pos[i] / drafted_per_pos[i]
  // Per slot, over the drafts that carried a prediction for it: the mean predicted survival and how
  // often the slot survived. Empty when no draft carried one.
  struct SlotCalibration {
    double predicted = 0;
    double realised = 0;
    int64_t drafts = 0;
  };
  std::vector<SlotCalibration> calibration() const;

  nlohmann::json ToJson() const;
};

}  // namespace dspark
