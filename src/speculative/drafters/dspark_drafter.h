// The DSpark / DFlash block drafter: a few draft layers over fused target features, one noise
// block per step, the Markov chain and the confidence head (dspark_heads.h).
//
// Per sequence it keeps a draft K/V cache holding exactly the committed rows whose target
// features it has seen. ObserveTaps only buffers the features of newly committed rows (the
// engine never passes rejected rows); Propose injects them and drafts the next block in one
// backbone pass, so every step costs one drafter pass and nothing is ever rolled back. Prefill
// chunks are injected as they arrive once a buffer is large, to bound memory. ProposeBatch does
// the same for every drafting sequence of a server step in ONE backbone pass and one chain.
#pragma once

#include <map>
#include <memory>

#include "speculative/drafter.h"
#include "model/dflash_forward.h"
#include "model/arch/dflash.h"
#include "speculative/drafters/dspark_heads.h"

namespace dspark {

class DSparkDrafter final : public Drafter {
 public:
  // n_ctx: the target's context size. The drafter owns the draft model, which may point into the
  // target's embedding and LM head: the target must outlive the drafter.
  // full_block: run every row of the trained block each step (llama.cpp's behaviour, and what the
  // golden references compute) rather than only the rows the budget needs.
  static Result<std::unique_ptr<DSparkDrafter>> Create(std::unique_ptr<DflashModel> model,
                                                       ThreadPool& pool, int n_ctx, bool full_block = false);

  // The --spec-type of what the file holds: a Markov head makes it DSpark.
  std::string_view Name() const override { return model_->config().markov_rank > 0 ? "draft-dspark" : "draft-dflash"; }
  DrafterNeeds Needs() const override;
  Status Begin(int seq) override;
  Result<int> BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) override;
  std::unique_ptr<DrafterRows> SaveRows(int seq, int rows) override;
  Status ObserveTaps(int seq, const TapRows& rows) override;
  Status Prefill(int seq, std::span<const int32_t> context) override;
  Result<Draft> Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) override;
  std::vector<Result<Draft>> ProposeBatch(std::span<const ProposeRequest> requests) override;
  void End(int seq) override;

  const DflashModel& model() const { return *model_; }
  // The chain of the last Propose on `seq` with its biased logits (for tests and goldens; its q
  // rows were handed to the Draft); keep_logits must be set first.
  void set_keep_logits(bool keep) { keep_logits_ = keep; }
  const ChainResult* last_chain(int seq) const;
  const BlockOutput* last_block(int seq) const;

 private:
  struct SeqState {
    std::unique_ptr<DflashContext> ctx;
    std::vector<float> pending;  // [pending_rows, L_t * E] features of committed rows not yet injected
    int pending_rows = 0;
    BlockOutput block;
    ChainResult chain;
  };

  DSparkDrafter(std::unique_ptr<DflashModel> model, ThreadPool& pool, int n_ctx, bool full_block);
  SeqState& State(int seq);
  Status Flush(SeqState& st);

  std::unique_ptr<DflashModel> model_;
  DflashForward forward_;
  ThreadPool& pool_;
  int n_ctx_;
  bool full_block_;
  bool keep_logits_ = false;
  std::map<int, SeqState> seqs_;
};

}  // namespace dspark
