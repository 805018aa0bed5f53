// The EAGLE-3 head's forward pass (model/arch/eagle3.h) as a DraftHead (model/draft_head.h), for
// many sequences at once. A row's state is its g: a committed row's fuses the target features of
// its position (Fuse; its token is the one after that position), a draft row's is the previous
// row's pre-norm output, which is also a job's output state.
//
// Continuous batching: the rows of every job go through one set of projections; each row attends
// only to its own sequence's cells. The matmul kernels compute a row the same alone or in a batch,
// so a job's output does not depend on the other jobs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/arch/eagle3.h"
#include "model/draft_head.h"
#include "model/rope.h"
#include "util/thread_pool.h"

namespace dspark {

class Eagle3Forward final : public DraftHead {
 public:
  explicit Eagle3Forward(const Eagle3Model& model);
  // Owning the head (the drafter's).
  explicit Eagle3Forward(std::unique_ptr<Eagle3Model> model);

  const Eagle3Model& model() const { return model_; }
  std::string_view Name() const override { return "draft-eagle3"; }
  ModelConfig CacheConfig() const override;
  std::vector<int> TapLayers() const override { return model_.config().target_layers; }
  int TapWidth() const override { return model_.config().target_hidden; }
  int StateWidth() const override { return model_.config().n_embd; }
  int n_vocab() const override { return model_.config().n_vocab; }
  int token_offset() const override { return 1; }

  // g = fc([f_L1 ; f_L2 ; f_L3]) (after RMSNorm with norm_before_fc) of n rows of the three taps.
  void Fuse(std::span<const float* const> taps, int n, float* g, ThreadPool& pool) override;
  Status Run(std::span<const HeadJob> jobs, ThreadPool& pool) override;

 private:
  void Inputs(std::span<const HeadJob> jobs, std::span<const int> row0);
  void AttentionLayer(std::span<const HeadJob> jobs, std::span<const int> row0, ThreadPool& pool);
  void Ffn(int n_rows, ThreadPool& pool);
  void Outputs(std::span<const HeadJob> jobs, std::span<const int> row0, ThreadPool& pool);

  std::unique_ptr<Eagle3Model> owned_;
  const Eagle3Model& model_;
  Rope rope_;
  // Scratch, reused across calls.
  std::vector<float> feats_, g_, x_, q_, k_, v_, att_, r_, h_, gate_, up_, fused_, cos_, sin_, last_, logits_;
  std::vector<std::vector<uint8_t>> causal_;  // causal_[n]: the [n][n] lower-triangular mask
};

}  // namespace dspark
