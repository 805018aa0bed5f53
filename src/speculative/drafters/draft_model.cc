#include "speculative/drafters/draft_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "speculative/batch_engine.h"
#include "speculative/drafters/draft_step.h"

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
      gap_at_(n_seq, 0), skipped_(n_seq, 0), max_draft_(max_draft) {}

Status DraftModelDrafter::Begin(int seq) {
  // Keep the cache: the next context likely shares a prefix (same system prompt); Propose trims it.
  return cache_.CheckSeq(seq);
}

Result<size_t> DraftModelDrafter::KeepCommonPrefix(int seq, std::span<const int32_t> context, size_t upto) {
  DSPARK_TRY(cache_.CheckSeq(seq));
  std::vector<int32_t>& cached = cached_[seq];
  size_t& skipped = skipped_[seq];
  const size_t gap_at = gap_at_[seq];
  // The context index a cell holds: past the gap, skipped rows further on.
  const auto index = [&](size_t cell) { return skipped > 0 && cell >= gap_at ? cell + skipped : cell; };
  size_t keep = 0;
  while (keep < cached.size() && index(keep) < upto && cached[keep] == context[index(keep)]) ++keep;
  // The gap stays while the cells before it match and the context reaches past it (the rows it
  // skips are simply not in the cache, whatever they are).
  if (skipped > 0 && (keep < gap_at || gap_at + skipped > upto)) {
    keep = std::min(keep, gap_at);
    skipped = 0;
  }
  DSPARK_TRY(cache_.Truncate(seq, static_cast<int>(keep)));
  cached.resize(keep);
  return keep + skipped;
}

Result<size_t> DraftModelDrafter::SkipOldRows(int seq, size_t covered, size_t target, int max_rows) {
  if (max_rows <= 0 || target <= covered + static_cast<size_t>(max_rows)) return covered;
  std::vector<int32_t>& cached = cached_[seq];
  if (skipped_[seq] > 0) {
    // One gap at most: the cells after it (an older window) go, and the gap widens.
    DSPARK_TRY(cache_.Truncate(seq, static_cast<int>(gap_at_[seq])));
    cached.resize(gap_at_[seq]);
  } else {
    gap_at_[seq] = cached.size();
  }
  const size_t start = target - static_cast<size_t>(max_rows);
  skipped_[seq] = start - gap_at_[seq];
  return start;
}

Result<std::vector<float>> DraftModelDrafter::SyncCache(int seq, std::span<const int32_t> context, size_t upto,
                                                         int* passes) {
  DSPARK_ASSIGN_OR_RETURN(const size_t keep, KeepCommonPrefix(seq, context, upto));
  std::vector<int32_t>& cached = cached_[seq];
  if (keep >= upto) return std::vector<float>();
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
  const ProposeRequest request{seq, context, params, &rng};
  return std::move(ProposeBatch(std::span<const ProposeRequest>(&request, 1)).front());
}

namespace {
// Catch-up rows beyond which a sequence syncs on its own, in prompt-sized chunks, rather than in
// the shared first pass (a newcomer whose prompt the draft has not seen yet).
constexpr size_t kMaxSharedCatchUp = 64;
}  // namespace

std::vector<DraftModelDrafter::Active> DraftModelDrafter::StartDrafts(std::span<const ProposeRequest> requests,
                                                                       std::vector<Result<Draft>>& results, Batch& batch,
                                                                       std::vector<std::vector<float>>& own_logits) {
  std::vector<Active> active;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposeRequest& r = requests[i];
    const int n_ctx_tokens = static_cast<int>(r.context.size());
    const int budget = std::min({r.params.budget, max_draft_, cache_.n_ctx() - n_ctx_tokens});
    if (budget <= 0 || r.context.empty()) continue;
    auto kept = KeepCommonPrefix(r.seq, r.context, r.context.size() - 1);
    if (kept.ok()) kept = SkipOldRows(r.seq, *kept, r.context.size(), r.params.max_catch_up);
    if (!kept.ok()) {
      results[i] = kept.status();
      continue;
    }
    const size_t keep = *kept;
    if (r.context.size() - keep > kMaxSharedCatchUp) {
      Draft& d = *results[i];
      auto logits = SyncCache(r.seq, r.context, r.context.size(), &d.forward_passes);
      if (!logits.ok()) {
        results[i] = logits.status();
        continue;
      }
      own_logits[i] = std::move(*logits);
      active.push_back({i, budget, -1});
      continue;
    }
    std::vector<int32_t>& cached = cached_[r.seq];
    for (size_t t = keep; t < r.context.size(); ++t) {
      batch.Add(r.context[t], static_cast<int>(t), r.seq, t + 1 == r.context.size());
      cached.push_back(r.context[t]);
    }
    active.push_back({i, budget, 0});
  }
  return active;
}

std::vector<Result<Draft>> DraftModelDrafter::ProposeBatch(std::span<const ProposeRequest> requests) {
  const int n_vocab = model_->config().n_vocab;
  std::vector<Result<Draft>> results(requests.size(), Result<Draft>(Draft()));
  Batch batch;
  std::vector<std::vector<float>> own_logits(requests.size());  // sequences that caught up alone
  std::vector<Active> active = StartDrafts(requests, results, batch, own_logits);

  // Draft step by step; each pass holds one row per sequence still drafting.
  std::vector<float> q;
  for (int step = 0; !active.empty(); ++step) {
    ForwardOutput out;
    if (batch.size() > 0) {
      auto pass = model_->Forward(batch, cache_, pool_);
      if (!pass.ok()) {
        // The rows of this pass never reached the cache: forget what it was to hold.
        for (const Active& a : active) {
          const int seq = requests[a.request].seq;
          results[a.request] = pass.status();
          cached_[seq].clear();
          skipped_[seq] = gap_at_[seq] = 0;
          cache_.Clear(seq);
        }
        return results;
      }
      out = std::move(*pass);
      for (const Active& a : active)
        if (a.logits_row >= 0) ++results[a.request]->forward_passes;
    }
    // Logits rows come in batch order, one per sequence that ran a row.
    int next_row = 0;
    for (Active& a : active) {
      if (a.logits_row >= 0) a.logits_row = next_row++;
    }
    batch.Clear();
    std::vector<Active> still;
    for (Active& a : active) {
      const ProposeRequest& r = requests[a.request];
      Draft& d = *results[a.request];
      const float* logits = a.logits_row >= 0 ? out.Logits(a.logits_row, n_vocab) : own_logits[a.request].data();
      if (!DraftNextToken(logits, n_vocab, r.params, *r.rng, d, q)) continue;
      const int32_t tok = d.tokens.back();
      if (static_cast<int>(d.tokens.size()) == a.budget) continue;
      // Asked before drafting the next token, from what it is expected to add: deciding after it
      // (its own probability known) would spend a draft pass, in nearly every draft, on a token
      // that fails the bar and that the planner then drops.
      if (r.params.stop != nullptr && !r.params.stop->More(d.probs)) continue;
      batch.Add(tok, static_cast<int>(r.context.size()) + step, r.seq, true);
      cached_[r.seq].push_back(tok);
      still.push_back({a.request, a.budget, 0});
    }
    active.swap(still);
  }
  return results;
}

}  // namespace dspark
