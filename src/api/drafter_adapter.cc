#include "api/drafter_adapter.h"

#include <algorithm>
#include <exception>

#include "api/internal.h"

namespace dspark::api {

Drafter::~Drafter() = default;

double DraftRequest::Uniform() const {
  ::dspark::Rng* rng = detail::Access::GetRng(*this);
  if (rng == nullptr) throw Error(ErrorCode::kInvalidArgument, "DraftRequest::Uniform: a request made outside the engine has no generator");
  return rng->Uniform();
}

namespace detail {

namespace {
// A user's exception as the engine's Status (the engine then decodes that request plainly).
Status FromException(std::string_view drafter, std::string_view where) {
  try {
    throw;
  } catch (const std::exception& e) {
    return InvalidArgument("drafter '{}': {} threw: {}", drafter, where, e.what());
  } catch (...) {
    return InvalidArgument("drafter '{}': {} threw a non-std::exception", drafter, where);
  }
}
}  // namespace

DrafterAdapter::DrafterAdapter(std::shared_ptr<api::Drafter> user, int n_vocab, int max_draft)
    : user_(std::move(user)), n_vocab_(n_vocab), max_draft_(max_draft) {
  try {
    name_ = user_->Name();
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("custom drafter: Name() threw: ") + e.what());
  }
  if (name_.empty()) name_ = "custom";
}

DrafterNeeds DrafterAdapter::Needs() const {
  DrafterNeeds n;
  n.max_draft = max_draft_;
  return n;
}

Status DrafterAdapter::Fail(Status status) {
  if (error_.empty()) error_ = status.message();
  return status;
}

Status DrafterAdapter::Begin(int seq) {
  try {
    user_->Begin(seq);
  } catch (...) {
    return Fail(FromException(name_, "Begin"));
  }
  return Status::Ok();
}

void DrafterAdapter::End(int seq) {
  try {
    user_->End(seq);
  } catch (...) {
    (void)Fail(FromException(name_, "End"));  // the request is over: nothing to fall back from
  }
}

Result<Draft> DrafterAdapter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  DraftRequest request;
  request.seq = seq;
  request.context = TokenView(context.data(), context.size());
  request.budget = params.budget;
  request.sampling.temperature = params.sampling.temperature;
  request.sampling.top_k = params.sampling.top_k;
  request.sampling.top_p = params.sampling.top_p;
  request.sampling.min_p = params.sampling.min_p;
  request.sampling.temperature_last = params.sampling.order == SamplerOrder::kTemperatureLast;
  request.n_vocab = n_vocab_;
  Access::SetRng(request, &rng);
  DraftProposal p;
  try {
    p = user_->Propose(request);
  } catch (...) {
    return Fail(FromException(name_, "Propose"));
  }
  const size_t n = p.tokens.size();
  if (!p.probs.empty() && p.probs.size() != n)
    return Fail(InvalidArgument("drafter '{}': {} probs for {} tokens (give one per token or none)", name_,
                                p.probs.size(), n));
  if (!p.q.empty() && p.q.size() != n)
    return Fail(InvalidArgument("drafter '{}': {} q rows for {} tokens (give one per token or none)", name_,
                                p.q.size(), n));

  for (size_t i = 0; i < n; ++i) {
    if (p.tokens[i] < 0 || p.tokens[i] >= n_vocab_)
      return Fail(InvalidArgument("drafter '{}': token {} of the draft is id {}, outside the vocabulary [0, {})", name_,
                                  i, p.tokens[i], n_vocab_));
  }
  for (size_t i = 0; i < p.probs.size(); ++i) {
    if (!(p.probs[i] >= 0.0f && p.probs[i] <= 1.0f))
      return Fail(InvalidArgument("drafter '{}': probs[{}] = {} is not a probability", name_, i, p.probs[i]));
  }

  // The budget, then the planner's stop rule on the reported confidences, as the engine's own
  // drafters apply it while drafting (speculative/drafters/draft_model.cc).
  size_t keep = std::min(n, static_cast<size_t>(std::max(params.budget, 0)));
  if (params.stop != nullptr && !p.probs.empty()) {
    size_t kept = 0;
    while (kept < keep) {
      if (!params.stop->Keep(p.probs[kept])) break;
      ++kept;
      if (kept < keep && !params.stop->More(std::span<const float>(p.probs.data(), kept))) break;
    }
    keep = kept;
  }

  Draft d;
  d.forward_passes = std::max(p.draft_calls, 0);
  d.tokens.assign(p.tokens.begin(), p.tokens.begin() + keep);
  if (!p.probs.empty()) d.probs.assign(p.probs.begin(), p.probs.begin() + keep);
  // q matters only when the target samples: a greedy verification compares with the argmax.
  if (!p.q.empty() && !params.sampling.greedy()) {
    d.q.reserve(keep);
    for (size_t i = 0; i < keep; ++i) {
      std::vector<float>& row = p.q[i];
      if (static_cast<int>(row.size()) != n_vocab_)
        return Fail(InvalidArgument("drafter '{}': q[{}] has {} entries, not n_vocab = {}", name_, i, row.size(),
                                    n_vocab_));
      if (!(row[d.tokens[i]] > 0.0f))
        return Fail(InvalidArgument("drafter '{}': q[{}] gives its own token {} no probability", name_, i,
                                    d.tokens[i]));
      d.q.push_back(std::move(row));
    }
  }
  return d;
}

}  // namespace detail
}  // namespace dspark::api
