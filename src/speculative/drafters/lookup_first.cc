#include "speculative/drafters/lookup_first.h"

#include <algorithm>

namespace dspark {

LookupFirstDrafter::LookupFirstDrafter(NgramOptions lookup, std::unique_ptr<Drafter> model)
    : lookup_(lookup), model_(std::move(model)), name_("ngram+" + std::string(model_->Name())),
      positions_(std::max(model_->Needs().max_draft, 1)), all_(positions_) {}

LookupFirstDrafter::SequenceLookups& LookupFirstDrafter::Sequence(int seq) {
  if (seq >= static_cast<int>(sequences_.size())) sequences_.resize(seq + 1, SequenceLookups{all_.Seed()});
  return sequences_[seq];
}

Status LookupFirstDrafter::Begin(int seq) {
  if (seq < 0) return InvalidArgument("LookupFirstDrafter::Begin: negative sequence {}", seq);
  Sequence(seq) = SequenceLookups{all_.Seed()};
  return model_->Begin(seq);
}

Result<int> LookupFirstDrafter::BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) {
  if (seq < 0) return InvalidArgument("LookupFirstDrafter::BeginWithPrefix: negative sequence {}", seq);
  Sequence(seq) = SequenceLookups{all_.Seed()};
  return model_->BeginWithPrefix(seq, from, rows, saved);
}

std::unique_ptr<DrafterRows> LookupFirstDrafter::SaveRows(int seq, int rows) { return model_->SaveRows(seq, rows); }

void LookupFirstDrafter::End(int seq) {
  if (seq >= 0 && seq < static_cast<int>(sequences_.size())) sequences_[seq].pending.clear();
  model_->End(seq);
}

double LookupFirstDrafter::LookupAcceptance(int seq, int i) const {
  return seq >= 0 && seq < static_cast<int>(sequences_.size()) ? sequences_[seq].accept.Acceptance(i) : 0.0;
}

void LookupFirstDrafter::Judge(SequenceLookups& s, std::span<const int32_t> context) {
  if (s.pending.empty()) return;
  const std::vector<int32_t> pending = std::move(s.pending);
  s.pending.clear();
  if (context.size() <= s.pending_at) return;  // nothing committed since (or another request)
  // The target committed `seen` tokens after the lookup; the lookup survived as far as they agree.
  // A mismatch within them is a rejection; agreement up to the last one seen says nothing of the
  // positions after it.
  const size_t seen = std::min(context.size() - s.pending_at, pending.size());
  size_t agreed = 0;
  while (agreed < seen && context[s.pending_at + agreed] == pending[agreed]) ++agreed;
  const int tried = static_cast<int>(agreed < seen ? agreed + 1 : agreed);
  s.accept.Observe(tried, static_cast<int>(agreed));
  all_.Observe(tried, static_cast<int>(agreed));
}

Draft LookupFirstDrafter::Lookup(int seq, std::span<const int32_t> context, const DraftParams& params) {
  SequenceLookups& s = Sequence(seq);
  Judge(s, context);
  Draft d;
  d.tokens = NgramLookup(context, lookup_.n_min, lookup_.n_max, params.budget);
  if (d.tokens.empty()) return d;
  s.pending = d.tokens;
  s.pending_at = context.size();
  d.survival_measured = true;
  for (double v : s.accept.Survival(static_cast<int>(d.tokens.size()))) d.survival.push_back(static_cast<float>(v));
  return d;
}

Result<Draft> LookupFirstDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  Draft d = Lookup(seq, context, params);
  if (!d.tokens.empty()) return d;
  return model_->Propose(seq, context, params, rng);
}

std::vector<Result<Draft>> LookupFirstDrafter::ProposeBatch(std::span<const ProposeRequest> requests) {
  std::vector<Result<Draft>> out(requests.size(), Result<Draft>(Draft()));
  std::vector<ProposeRequest> rest;
  std::vector<size_t> rest_index;
  for (size_t i = 0; i < requests.size(); ++i) {
    Draft d = Lookup(requests[i].seq, requests[i].context, requests[i].params);
    if (d.tokens.empty()) {
      rest.push_back(requests[i]);
      rest_index.push_back(i);
    } else {
      out[i] = std::move(d);
    }
  }
  if (!rest.empty()) {
    std::vector<Result<Draft>> drafted = model_->ProposeBatch(rest);
    for (size_t j = 0; j < rest.size(); ++j) out[rest_index[j]] = std::move(drafted[j]);
  }
  return out;
}

}  // namespace dspark
