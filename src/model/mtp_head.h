// DeepSeek's multi-token-prediction block (Model::ForwardNextn) as a DraftHead
// (model/draft_head.h): self-speculation with the target's own nextn block, as llama.cpp's
// draft-mtp runs it. A committed row's state is the target's normed output (output_norm of the
// last layer's output) at the position before the row's; row 0 pairs the first token with a zero
// state. A draft row's state is the previous row's normed output.
//
// A batch of jobs is one pass: each job's rows attend to its own context's cache.
#pragma once

#include "model/draft_head.h"
#include "model/model.h"

namespace dspark {

class MtpHead final : public DraftHead {
 public:
  // The target must outlive the head. Errors: a target without a nextn block.
  static Result<std::unique_ptr<MtpHead>> Create(const Model& target);

  std::string_view Name() const override { return "draft-mtp"; }
  ModelConfig CacheConfig() const override { return target_.NextnCacheConfig(); }
  std::vector<int> TapLayers() const override { return {target_.config().n_layer}; }
  int TapWidth() const override { return target_.config().n_embd; }
  int StateWidth() const override { return target_.config().n_embd; }
  int n_vocab() const override { return target_.config().n_vocab; }
  int token_offset() const override { return 0; }

  // state = output_norm(the last layer's output) of each row.
  void Fuse(std::span<const float* const> taps, int n, float* state, ThreadPool& pool) override;
  Status Run(std::span<const HeadJob> jobs, ThreadPool& pool) override;

 private:
  explicit MtpHead(const Model& target) : target_(target) {}

  const Model& target_;
  // Scratch, reused across calls.
  Batch batch_;
  std::vector<KvCache*> caches_;
  std::vector<float> h_;
};

}  // namespace dspark
