// The DFlash/DSpark backbone forward pass for one sequence, with its own context K/V cache
// (shared/research/dspark-llamacpp.md §2.4-2.5, §3.2-3.5; dspark-training.md §1.3-1.7).
//
// One call does what llama.cpp needs two decodes for: it injects newly committed context rows
// (target features f [C, L_t*E] → g = RMSNorm_enc(fc·f) → per layer K = RoPE(k_norm(W_k g)),
// V = W_v g, kept in the cache at the target positions) and runs the noise block
// [anchor, MASK, ...] through the draft layers. Block queries attend to every context cell and
// to the whole block (bidirectional unless the file says causal); the block's own K/V are
// scratch and never enter the cache. Knows no heads (dspark_heads.h) and no engine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/rope.h"
#include "spec/drafters/dflash_weights.h"
#include "util/thread_pool.h"

namespace dspark {

struct BlockOutput {
  int n_rows = 0;
  std::vector<float> hidden;  // [n_rows, E]: post final-norm hidden (confidence-head input)
  std::vector<float> logits;  // [n_rows, V]: LM head, d2t-scattered (-inf outside the draft vocab)
};

class DflashForward {
 public:
  // n_ctx: most context rows the sequence will hold (the target's context size).
  DflashForward(const DflashModel& model, int n_ctx);

  // Context rows committed so far (positions 0 .. context_length()-1).
  int context_length() const { return cache_.Length(0); }
  void Reset() { cache_.Clear(0); }

  // Injects `n_ctx_rows` rows of concatenated target features `feats` [n_ctx_rows, L_t*E] at
  // positions context_length()..; then, if `block` is non-empty, runs the block at positions
  // block_pos0.. and fills `out`. Errors: the context would overflow.
  Status Run(const float* feats, int n_ctx_rows, std::span<const int32_t> block, int block_pos0, ThreadPool& pool,
             BlockOutput* out);

 private:
  const DflashModel& model_;
  Rope rope_;
  KvCache cache_;  // one sequence: context cells, then scratch cells for the block
  // Scratch, reused across calls.
  std::vector<float> g_, kv_, x_, h_, q_, k_, v_, att_, tmp_, gate_, up_, cos_, sin_;
  std::vector<uint8_t> causal_;  // [block row][block row]: the causal mask of a causal drafter
};

}  // namespace dspark
