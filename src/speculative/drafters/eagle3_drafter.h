// The EAGLE-3 drafter: a one-layer head over three fused target layers (model/arch/eagle3.h),
// drafting autoregressively, each step fed its previous step's pre-norm state.
//
// Per sequence it keeps the head's K/V cache holding exactly the committed rows. A committed row
// at position P pairs the target features of P with token P+1, so it can only run once that token
// is known: ObserveTaps fuses the features of newly committed rows (fc, the head's widest matrix,
// runs as the rows arrive) and keeps them pending; Propose runs the pending rows with the tokens
// that follow them, then drafts, each draft row at the next position, and truncates the draft rows
// away again. ProposeBatch runs every drafting sequence's rows of a step in one pass.
#pragma once

#include <map>
#include <memory>

#include "model/arch/eagle3.h"
#include "model/eagle3_forward.h"
#include "speculative/drafter.h"

namespace dspark {

class Eagle3Drafter final : public Drafter {
 public:
  // n_ctx: the target's context size; max_draft: the longest draft it will be asked for. The
  // drafter owns the head, which may point into the target's embedding and LM head: the target
  // must outlive the drafter.
  static Result<std::unique_ptr<Eagle3Drafter>> Create(std::unique_ptr<Eagle3Model> model, ThreadPool& pool,
                                                       int n_ctx, int max_draft);

  std::string_view Name() const override { return "draft-eagle3"; }
  DrafterNeeds Needs() const override;
  Status Begin(int seq) override;
  Result<int> BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) override;
  std::unique_ptr<DrafterRows> SaveRows(int seq, int rows) override;
  Status ObserveTaps(int seq, const TapRows& rows) override;
  Status Prefill(int seq, std::span<const int32_t> context) override;
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;
  std::vector<Result<Draft>> ProposeBatch(std::span<const ProposeRequest> requests) override;
  void End(int seq) override;

  const Eagle3Model& model() const { return *model_; }

 private:
  struct SeqState {
    std::unique_ptr<Eagle3Context> ctx;  // committed rows only, between calls
    std::vector<float> pending;          // [pending_rows, E]: g of committed rows not yet run
    int pending_rows = 0;
    Eagle3Output tail;                   // the output of the last committed row run
    int tail_pos = -1;                   // its position (-1: none)
  };

  Eagle3Drafter(std::unique_ptr<Eagle3Model> model, ThreadPool& pool, int n_ctx, int max_draft);
  SeqState& State(int seq);
  // The pending rows of each sequence with the tokens that follow them (context[P + 1]), one pass.
  struct Catchup {
    SeqState* st;
    std::span<const int32_t> context;
  };
  Status RunPending(std::span<const Catchup> seqs);

  std::unique_ptr<Eagle3Model> model_;
  Eagle3Forward forward_;
  ThreadPool& pool_;
  int n_ctx_;
  int max_draft_;
  std::map<int, SeqState> seqs_;
};

}  // namespace dspark
