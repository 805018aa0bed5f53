#include "spec/drafters/lookup_first.h"

namespace dspark {

LookupFirstDrafter::LookupFirstDrafter(NgramOptions lookup, std::unique_ptr<Drafter> model)
    : lookup_(lookup), model_(std::move(model)), name_("ngram+" + std::string(model_->Name())) {}

Draft LookupFirstDrafter::Lookup(std::span<const int32_t> context, const DraftParams& params) const {
  Draft d;
  d.tokens = NgramLookup(context, lookup_.n_min, lookup_.n_max, params.budget);
  d.source = 1;
  return d;
}

Result<Draft> LookupFirstDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  Draft d = Lookup(context, params);
  if (!d.tokens.empty()) return d;
  return model_->Propose(seq, context, params, rng);
}

std::vector<Result<Draft>> LookupFirstDrafter::ProposeBatch(std::span<const ProposeRequest> requests) {
  std::vector<Result<Draft>> out(requests.size(), Result<Draft>(Draft()));
  std::vector<ProposeRequest> rest;
  std::vector<size_t> rest_index;
  for (size_t i = 0; i < requests.size(); ++i) {
    Draft d = Lookup(requests[i].context, requests[i].params);
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
