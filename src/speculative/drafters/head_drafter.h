// The drafter of heads that run on the target's features (model/draft_head.h): EAGLE-3 and
// DeepSeek's multi-token prediction. It drafts autoregressively, each step fed its previous step's
// output state, through the same planner and verifier as every drafter.
//
// Per sequence it keeps the head's K/V cache holding exactly the committed rows. A committed row
// can only run once its token is known (EAGLE-3: the token after its features' position; MTP: the
// token at its position, the features being those of the position before): ObserveTaps turns the
// taps of newly committed rows into states right away (EAGLE-3's fc, its widest matrix, runs as
// the rows arrive) and keeps them pending; Propose runs the pending rows with their tokens, then
// drafts, each draft row at the next position, and truncates the draft rows away again.
// ProposeBatch runs every drafting sequence's rows of a step in one head pass.
#pragma once

#include <map>
#include <memory>

#include "model/draft_head.h"
#include "speculative/drafter.h"

namespace dspark {

class HeadDrafter final : public Drafter {
 public:
  // n_ctx: the target's context size; max_draft: the longest draft it will be asked for. A head
  // that reads the target's weights (its embedding, LM head, or the target's own MTP block) needs
  // the target to outlive the drafter.
  static Result<std::unique_ptr<HeadDrafter>> Create(std::unique_ptr<DraftHead> head, ThreadPool& pool, int n_ctx,
                                                     int max_draft);

  std::string_view Name() const override { return head_->Name(); }
  DrafterNeeds Needs() const override;
  Status Begin(int seq) override;
  Result<int> BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) override;
  std::unique_ptr<DrafterRows> SaveRows(int seq, int rows) override;
  Status ObserveTaps(int seq, const TapRows& rows) override;
  Status Prefill(int seq, std::span<const int32_t> context) override;
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;
  std::vector<Result<Draft>> ProposeBatch(std::span<const ProposeRequest> requests) override;
  void End(int seq) override;

  const DraftHead& head() const { return *head_; }

 private:
  struct SeqState {
    std::unique_ptr<HeadContext> ctx;  // committed rows only, between calls
    std::vector<float> pending;        // [pending_rows, state width]: states of committed rows not yet run
    int pending_rows = 0;
    HeadOutput tail;                   // the output of the last committed row run
    int tail_pos = -1;                 // its position (-1: none)
    int rows() const { return ctx->length() + pending_rows; }  // committed rows, run or pending
  };

  HeadDrafter(std::unique_ptr<DraftHead> head, ThreadPool& pool, int n_ctx, int max_draft);
  SeqState& State(int seq);
  void Clear(SeqState& st);
  // Target rows whose features `rows` committed head rows hold (MTP's row 0 holds none).
  int FeatureRows(int rows) const { return rows > 0 ? rows - lead_ : 0; }
  // The committed rows' job: the pending rows with their tokens from `context`.
  HeadJob PendingJob(SeqState& st, std::span<const int32_t> context);
  struct Catchup {
    SeqState* st;
    HeadJob job;  // PendingJob(*st, context): checked, then run
  };
  Status RunPending(std::span<const Catchup> seqs);

  std::unique_ptr<DraftHead> head_;
  ThreadPool& pool_;
  int n_ctx_;
  int max_draft_;
  int lead_;  // 1 when row 0 holds no target features (token_offset 0), else 0
  std::map<int, SeqState> seqs_;
};

}  // namespace dspark
