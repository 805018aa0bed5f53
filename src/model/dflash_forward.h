// The DFlash/DSpark backbone forward pass (shared/research/dspark-llamacpp.md §2.4-2.5, §3.2-3.5;
// dspark-training.md §1.3-1.7), for many sequences at once.
//
// One call does what llama.cpp needs two decodes for: it injects newly committed context rows
// (target features f [C, L_t*E] → g = RMSNorm_enc(fc·f) → per layer K = RoPE(k_norm(W_k g)),
// V = W_v g, kept in the sequence's DflashContext at the target positions) and runs the noise
// block [anchor, MASK, ...] through the draft layers. Block queries attend to every context cell
// and to the whole block (bidirectional unless the file says causal); the block's own K/V are
// scratch and never enter the context. Knows no heads (dspark_heads.h) and no engine.
//
// Continuous batching: the context rows of every job go through one set of projections and the
// blocks of every job through the draft layers as rows of one batch, so a server drafting for
// many sequences pays one pass (weights streamed once, one set of barriers), not one per
// sequence. Each block attends only to its own sequence's context. The matmul kernels compute a
// row the same alone or in a batch, so a job's output does not depend on the other jobs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/rope.h"
#include "model/arch/dflash.h"
#include "util/thread_pool.h"

namespace dspark {

struct BlockOutput {
  int n_rows = 0;
  std::vector<float> hidden;  // [n_rows, E]: post final-norm hidden (confidence-head input)
  std::vector<float> logits;  // [n_rows, V]: LM head, d2t-scattered (-inf outside the draft vocab)
};

// One sequence's draft context: K/V of the committed rows whose target features were injected.
class DflashContext {
 public:
  // n_ctx: most context rows the sequence will hold (the target's context size).
  DflashContext(const DflashModel& model, int n_ctx);
  // Context rows committed so far (positions 0 .. length()-1).
  int length() const { return cache_.Length(0); }
  void Reset() { cache_.Clear(0); }
  // Keeps the first n rows of `from` (this context or another of the same model): a request that
  // starts with a prefix the drafter has already seen.
  Status KeepPrefixOf(const DflashContext& from, int n) { return cache_.CopyPrefixFrom(from.cache_, 0, 0, n); }
  size_t bytes() const { return cache_.bytes(); }

 private:
  friend class DflashForward;
  KvCache cache_;  // one sequence: context cells, then scratch cells for the block
};

// One sequence's share of a pass: inject `n_ctx_rows` rows of concatenated target features
// `feats` [n_ctx_rows, L_t*E] at positions context->length()..; then, if `block` is non-empty, run
// the block at positions block_pos0.. into `out`.
struct DflashJob {
  DflashContext* context = nullptr;
  const float* feats = nullptr;
  int n_ctx_rows = 0;
  std::span<const int32_t> block;
  int block_pos0 = 0;
  BlockOutput* out = nullptr;
};

class DflashForward {
 public:
  explicit DflashForward(const DflashModel& model);

  // Errors of one job on its own: the context would overflow, a block token outside the vocabulary.
  Status Check(const DflashJob& job) const;
  // Runs every job in one pass (each must pass Check; nothing runs otherwise).
  Status Run(std::span<const DflashJob> jobs, ThreadPool& pool);

 private:
  void Inject(std::span<const DflashJob> jobs, ThreadPool& pool);
  void RunBlocks(std::span<const DflashJob> jobs, ThreadPool& pool);
  // A unit of block attention: `nr` block rows from r0 of one job (for every K/V head).
  struct AttentionTask {
    int job, r0, nr;
  };
  std::vector<AttentionTask> PrepareBlocks(std::span<const DflashJob> jobs, std::span<const int> row0);
  void BlockAttention(int il, std::span<const DflashJob> jobs, std::span<const int> row0,
                      std::span<const AttentionTask> tasks, ThreadPool& pool);
  void BlockFfn(int il, int n_rows, ThreadPool& pool);
  void WriteOutputs(std::span<const DflashJob> jobs, std::span<const int> row0, ThreadPool& pool);

  const DflashModel& model_;
  Rope rope_;
  // Scratch, reused across calls.
  std::vector<float> feats_, g_, x_, h_, q_, k_, v_, att_, tmp_, gate_, up_, cos_, sin_, hidden_, logits_, fused_;
  // causal_[n]: the [n][n] causal mask of an n-row block of a causal drafter (blocks of one pass
  // may differ in length; ops::Attention reads a job's mask with its own row stride).
  std::vector<std::vector<uint8_t>> causal_;
};

}  // namespace dspark
