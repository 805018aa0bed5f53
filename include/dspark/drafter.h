// Your own drafter. Derive from dspark::api::Drafter and hand it to an Engine
// (EngineOptions::custom_drafter): the engine asks it for a draft each step, verifies the draft
// against the target and keeps what the target agrees with, so the output stays exactly the
// target's (greedy: token for token; sampling: in distribution) whatever the drafter proposes. A
// good drafter only makes it faster.
//
//   class Repeat : public dspark::api::Drafter {
//     std::string Name() const override { return "repeat"; }
//     dspark::api::DraftProposal Propose(const dspark::api::DraftRequest& r) override {
//       dspark::api::DraftProposal p;
//       p.tokens.assign(r.budget, r.context.back());  // the last token, again and again
//       return p;
//     }
//   };
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dspark/export.h"

namespace dspark::api {

namespace detail {
struct Access;
}  // namespace detail

// A read-only view of token ids (std::span<const int32_t>, for C++17 callers).
class TokenView {
 public:
  TokenView() = default;
  TokenView(const int32_t* data, size_t size) : data_(data), size_(size) {}
  const int32_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int32_t* begin() const { return data_; }
  const int32_t* end() const { return data_ + size_; }
  int32_t operator[](size_t i) const { return data_[i]; }
  int32_t back() const { return data_[size_ - 1]; }
  std::vector<int32_t> ToVector() const { return std::vector<int32_t>(begin(), end()); }

 private:
  const int32_t* data_ = nullptr;
  size_t size_ = 0;
};

// The request's sampling (GenerateOptions). A drafter that samples its tokens should sample them
// from SamplingDistribution(its logits, this) and report that distribution as DraftProposal::q.
struct SamplingConfig {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  bool temperature_last = false;
  bool greedy() const { return temperature <= 0.0f; }
};

// The dense distribution the engine samples from for these logits and settings (temperature,
// top-k, top-p, min-p in the request's order; one-hot on the argmax when greedy). n_vocab floats
// summing to 1.
DSPARK_API std::vector<float> SamplingDistribution(const float* logits, int n_vocab, const SamplingConfig& sampling);

class DSPARK_API DraftRequest {
 public:
  int seq = 0;  // the sequence slot (always 0 for an Engine: one request at a time)
  // Every token of the sequence so far, prompt and generated; the last one the target has not
  // processed yet. Continue after it. Valid during the call only.
  TokenView context;
  int budget = 0;  // propose at most this many tokens (more are dropped); >= 1
  SamplingConfig sampling;
  int n_vocab = 0;  // the target's vocabulary size (the length of a q row)

  // A uniform number in [0, 1) from the request's own seeded generator, for drafters that sample:
  // with it, a seeded generation is reproducible.
  double Uniform() const;

 private:
  friend struct detail::Access;
  void* rng_ = nullptr;
};

struct DraftProposal {
  std::vector<int32_t> tokens;  // up to budget ids in [0, n_vocab); empty: no draft this step
  // Optional, one per token: the drafter's probability of (confidence in) the token. With them the
  // engine's schedule ends a draft where it stops paying (EngineOptions::schedule: p_min, adaptive)
  // and learns how they map to acceptance. Without them it drafts up to the budget it asks for.
  std::vector<float> probs;
  // Optional, one per token, only when sampling (not greedy): the dense n_vocab distribution the
  // token was drawn from (SamplingDistribution), so verification can accept it with min(1, p/q).
  // Without it a token counts as proposed with certainty: still exact, but accepted less often
  // when the drafter samples.
  std::vector<std::vector<float>> q;
  int draft_calls = 1;  // what Stats::draft_calls counts for this proposal (your model's passes)
};

// Called by the engine on the thread that runs Generate, one call at a time; share one drafter
// between Engines only if it is thread-safe. A Propose that throws or returns an invalid proposal
// (ids out of range, probs or q of the wrong length) switches that request to plain decoding:
// the output is unaffected, GenerateResult::drafter_error says why and Stats::drafter_fallbacks
// counts it.
class DSPARK_API Drafter {
 public:
  virtual ~Drafter();
  virtual std::string Name() const = 0;
  // A request starts on `seq` (reset per-sequence state here).
  virtual void Begin(int /*seq*/) {}
  // Up to request.budget tokens continuing request.context. Rollback is implicit: the next call's
  // context holds what the target kept.
  virtual DraftProposal Propose(const DraftRequest& request) = 0;
  // The request on `seq` ended.
  virtual void End(int /*seq*/) {}
};

}  // namespace dspark::api
