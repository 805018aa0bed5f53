#include "spec/drafters/draft_model.h"

#include <algorithm>
#include <cmath>

#include "spec/batch_engine.h"

namespace dspark {

namespace {
// Vocabularies are padded to multiples of 64/128 for tensor shapes; more than this is not padding.
constexpr int kMaxVocabPadding = 128;
}  // namespace

Status CheckVocabCompatible(const Tokenizer& draft, const Tokenizer& target) {
  const auto& a = draft.tokens();
  const auto& b = target.tokens();
  const size_t common = std::min(a.size(), b.size());
  for (size_t i = 0; i < common; ++i) {
    if (a[i] != b[i])
      return InvalidArgument("spec: draft vocab differs from target at id {} ('{}' vs '{}'); use a draft trained for this target",
                             i, a[i], b[i]);
  }
  const size_t extra = std::max(a.size(), b.size()) - common;
  if (extra > static_cast<size_t>(kMaxVocabPadding))
    return InvalidArgument("spec: draft vocab has {} tokens, target {}; they differ from id {} on by more than {} padding tokens",
                           a.size(), b.size(), common, kMaxVocabPadding);
  return Status::Ok();
}

Result<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::Create(std::unique_ptr<Model> draft,
                                                                     const Tokenizer& draft_vocab,
                                                                     const Tokenizer& target_vocab, ThreadPool& pool,
                                                                     int n_ctx, int max_draft, int n_seq) {
  DSPARK_TRY(CheckVocabCompatible(draft_vocab, target_vocab));
  return std::unique_ptr<DraftModelDrafter>(new DraftModelDrafter(std::move(draft), pool, n_ctx, max_draft, n_seq));
}

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<Model> draft, ThreadPool& pool, int n_ctx, int max_draft,
                                     int n_seq)
    : model_(std::move(draft)), pool_(pool), cache_(model_->config(), n_seq, n_ctx), cached_(n_seq),
      max_draft_(max_draft) {}

Status DraftModelDrafter::Begin(int seq) {
  // Keep the cache: the next context likely shares a prefix (same system prompt); Propose trims it.
  return cache_.CheckSeq(seq);
}

Result<std::vector<float>> DraftModelDrafter::SyncCache(int seq, std::span<const int32_t> context, size_t upto,
                                                         int* passes) {
  DSPARK_TRY(cache_.CheckSeq(seq));
  std::vector<int32_t>& cached = cached_[seq];
  size_t keep = 0;
  while (keep < cached.size() && keep < upto && cached[keep] == context[keep]) ++keep;
  DSPARK_TRY(cache_.Truncate(seq, static_cast<int>(keep)));
  cached.resize(keep);
  if (keep == upto) return std::vector<float>();
  const std::vector<int32_t> fresh(context.begin() + keep, context.begin() + upto);
  DSPARK_ASSIGN_OR_RETURN(std::vector<float> logits,
                          dspark::Prefill(*model_, cache_, pool_, seq, fresh, static_cast<int>(keep), 512));
  *passes += static_cast<int>((fresh.size() + 511) / 512);
  cached.insert(cached.end(), fresh.begin(), fresh.end());
  return logits;
}

Status DraftModelDrafter::Prefill(int seq, std::span<const int32_t> context) {
  if (context.size() < 2 || static_cast<int>(context.size()) > cache_.n_ctx()) return Status::Ok();
  int passes = 0;
  return SyncCache(seq, context, context.size() - 1, &passes).status();
}

Result<Draft> DraftModelDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params,
                                         Rng& rng) {
  Draft d;
  const int n_vocab = model_->config().n_vocab;
  const int n_ctx_tokens = static_cast<int>(context.size());
  const int budget = std::min({params.budget, max_draft_, cache_.n_ctx() - n_ctx_tokens});
  if (budget <= 0 || context.empty()) return d;

  // Reuse the longest common prefix (SyncCache), but run at least the last context token: its
  // logits start the draft.
  DSPARK_TRY(cache_.CheckSeq(seq));
  std::vector<int32_t>& cached = cached_[seq];
  if (cached.size() >= context.size()) cached.resize(context.size() - 1);
  DSPARK_ASSIGN_OR_RETURN(std::vector<float> logits, SyncCache(seq, context, context.size(), &d.forward_passes));

  std::vector<float> q;
  // Confidence uses the draft's untempered distribution, as llama.cpp's p_min does.
  SamplingParams conf_params;
  conf_params.temperature = 1.0f;
  for (int i = 0; i < budget; ++i) {
    int32_t tok;
    float prob;
    if (params.sampling.greedy()) {
      tok = Argmax(logits.data(), n_vocab);
      float mx = logits[tok];
      double z = 0;
      for (int v = 0; v < n_vocab; ++v) z += std::exp(logits[v] - mx);
      prob = static_cast<float>(1.0 / z);
    } else {
      ComputeProbs(logits.data(), n_vocab, params.sampling, &q);
      tok = SampleFromWeights(q, rng);
      prob = q[tok];
    }
    if (params.p_min > 0 && prob < params.p_min) break;
    d.tokens.push_back(tok);
    if (!params.sampling.greedy()) d.q.push_back(q);
    d.probs.push_back(prob);
    if (i + 1 == budget) break;
    Batch b;
    b.Add(tok, n_ctx_tokens + i, seq, true);
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, model_->Forward(b, cache_, pool_));
    ++d.forward_passes;
    cached.push_back(tok);
    logits = std::move(out.logits);
  }
  return d;
}

}  // namespace dspark
