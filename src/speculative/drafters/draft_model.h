// A second, smaller GGUF model drafting autoregressively with its own KV cache. Its cache keeps
// the longest prefix it shares with the context, so accepted tokens are never recomputed and
// rejected ones are rolled back by truncation. At temperature > 0 each token is sampled from the
// draft's distribution q (after the target's transforms) so rejection sampling keeps the most.
// ProposeBatch drafts for many sequences together: each draft step is one forward pass holding
// one row per drafting sequence (and the catch-up rows of all of them in the first). A proposal
// with DraftParams::max_catch_up may leave a gap: the cache then holds context[0, gap_at), then
// context[gap_at + skipped, ...) at their true positions (one gap at most per sequence).
#pragma once

#include <memory>

#include "model/model.h"
#include "speculative/drafter.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

class DraftModelDrafter final : public Drafter {
 public:
  // Refuses a draft whose vocabulary differs from the target's (see CheckVocabCompatible).
  static Result<std::unique_ptr<DraftModelDrafter>> Create(std::unique_ptr<Model> draft, const Tokenizer& draft_vocab,
                                                           const Tokenizer& target_vocab, ThreadPool& pool, int n_ctx,
                                                           int max_draft = 16, int n_seq = 1);
  std::string_view Name() const override { return "draft-simple"; }
  DrafterNeeds Needs() const override {
    DrafterNeeds n;
    n.max_draft = max_draft_;
    n.asks_before_each_token = true;
    return n;
  }
  Status Begin(int seq) override;
  Status Prefill(int seq, std::span<const int32_t> context) override;
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;
  std::vector<Result<Draft>> ProposeBatch(std::span<const ProposeRequest> requests) override;

 private:
  // Truncates the draft cache of `seq` to its longest common prefix with context[0..upto) (cells
  // after a gap are compared with the context tokens they hold); returns how much of the context
  // the kept cells cover (gap included), i.e. where catching up starts.
  Result<size_t> KeepCommonPrefix(int seq, std::span<const int32_t> context, size_t upto);
  // Before catching up from `covered` to `target`: if that is more than max_rows rows (max_rows >
  // 0), skip all but the last max_rows of them (a gap in the cache) and return where catching up
  // now starts.
  Result<size_t> SkipOldRows(int seq, size_t covered, size_t target, int max_rows);
  // Brings the draft cache of `seq` to context[0..upto): keeps the longest common prefix, runs the
  // rest; returns the logits of the last row run (empty if nothing ran).
  Result<std::vector<float>> SyncCache(int seq, std::span<const int32_t> context, size_t upto, int* passes);

  // A sequence still drafting in ProposeBatch.
  struct Active {
    size_t request;
    int budget;
    int logits_row;  // row of the last pass's logits that continues this draft (-1: own_logits)
  };
  // ProposeBatch's first phase: brings every cache to its context, running at least the last
  // context token (its logits start the draft). Short catch-ups go into `batch`, the first shared
  // pass; long ones run alone now and leave their logits in own_logits. Returns who drafts.
  std::vector<Active> StartDrafts(std::span<const ProposeRequest> requests, std::vector<Result<Draft>>& results,
                                  Batch& batch, std::vector<std::vector<float>>& own_logits);
  DraftModelDrafter(std::unique_ptr<Model> draft, ThreadPool& pool, int n_ctx, int max_draft, int n_seq);

  std::unique_ptr<Model> model_;
  ThreadPool& pool_;
  KvCache cache_;
  std::vector<std::vector<int32_t>> cached_;  // per sequence: tokens whose K/V the draft cache holds
  // Per sequence, the gap (SkipOldRows): cells from gap_at_ on hold context tokens skipped_ further on.
  std::vector<size_t> gap_at_, skipped_;
  int max_draft_;
};

// Draft and target vocabularies must have identical token texts, or differ only by padding
// tokens appended at the end of one of them (at most 128). Errors name the first differing id.
Status CheckVocabCompatible(const Tokenizer& draft, const Tokenizer& target);

}  // namespace dspark
