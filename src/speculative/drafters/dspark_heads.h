// DSpark's two heads on top of one backbone block (shared/research/dspark-llamacpp.md §4.2-4.4,
// dspark-training.md §1.9-1.10), chained slot by slot:
//   e_i   = markov_w1[prev_i]                                   (R floats; prev_first = anchor)
//   z̃_i   = z_i + scale · W2·e_i   (d2t-scattered; z_i = raw LM-head logits of the slot)
//   c_i   = σ(conf_w · [hidden_i ; e_i] + b)                    (hidden = post final norm)
//   d_i   = argmax z̃_i (temperature 0)  or  d_i ~ q_i = transforms(z̃_i) (temperature > 0)
//   prev_{i+1} = d_i
// llama.cpp only chains greedily; sampling each slot from its biased distribution and handing
// q_i to the verifier keeps exact rejection sampling lossless and accepting. Without a Markov head
// (DFlash) the chain degenerates to independent per-slot picks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling.h"
#include "speculative/drafter.h"
#include "model/dflash_forward.h"

namespace dspark {

struct ChainOptions {
  int max_tokens = 16;       // at most this many slots (clamped to the layout's draft slots)
  SamplingParams sampling;   // the target's transforms; greedy chains with argmax
  // Ends the chain before the first slot it does not keep, judged on the slot's confidence c_i
  // (the draft probability without a confidence head). Null: the whole block.
  const DraftStop* stop = nullptr;
  bool keep_logits = false;  // return the biased logits (tests, goldens)
  int64_t position = 0;      // generated position of the first draft token (keyed draws)
  DraftConstraint* constraint = nullptr;  // grammar-constrained requests: masks each slot's logits
  int branches = 0;          // alternatives per token (Draft::branches) from the slot's logits
  // Tokens after each alternative (DraftBranch::tail): the block's later slots, chained from the
  // alternative through the Markov head as the draft is from its own tokens, each the argmax of
  // its biased logits (deterministic, also under sampling). Costs one Markov bias per token, no
  // backbone pass; bounded by the slots the block ran.
  int branch_tail = 0;
};

struct ChainResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> q;  // per token when sampling: the distribution it was drawn from
  std::vector<float> confidence;      // c_i per token (confidence head only)
  std::vector<float> prob;            // softmax(z̃_i)[d_i] at temperature 1 (0 with a confidence head: unused)
  std::vector<float> logits;          // [tokens, V] biased logits z̃_i, if keep_logits
  std::vector<std::vector<DraftBranch>> branches;  // per token, if options.branches > 0
};

// Index of the first block slot that carries a draft token for this layout.
int FirstDraftSlot(const DflashConfig& config);

// Runs the chain over the block's draft slots. `block` comes from DflashForward::Run.
Status RunChain(const DflashModel& model, const BlockOutput& block, int32_t anchor, const ChainOptions& options,
                Rng& rng, ThreadPool& pool, ChainResult* out);

// Chains of several sequences, slot by slot: each slot's Markov bias W2·e_i of every chain still
// running is one matmul (as RunChain for each alone, row for row). A job that fails (bad anchor)
// leaves its result empty and the error in its status.
struct ChainJob {
  const BlockOutput* block = nullptr;
  int32_t anchor = 0;
  ChainOptions options;
  Rng* rng = nullptr;
  ChainResult* out = nullptr;
  Status status;
};
void RunChains(const DflashModel& model, std::span<ChainJob> jobs, ThreadPool& pool);

}  // namespace dspark
