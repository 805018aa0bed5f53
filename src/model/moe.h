// The mixture-of-experts feed-forward block (config.moe): routing and the grouped expert pass.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace dspark {

// Chooses each row's experts from its router logits [n, n_expert]: ids[i * k + j] is row i's j-th
// choice (best first; ties to the lower index) and weights[i * k + j] its weight, k =
// n_expert_used. As llama.cpp's build_moe_ffn: gating probabilities (softmax or sigmoid); the
// selection scores, those plus `bias` [n_expert] where given; with expert groups only the experts
// of the n_group_used groups whose two best scores sum highest; the k best scores; their
// probabilities (without the bias) as weights, normalised to sum 1 (norm_weights) and scaled
// (weights_scale, when not 0).
void RouteExperts(const MoeConfig& moe, const float* logits, int n, int32_t* ids, float* weights,
                  const float* bias = nullptr);

// Adds the block's output for n rows of normed activations h [n, n_embd] to the residual stream x.
// Rows are grouped by expert: each chosen expert's matrices are read once for all the rows that
// chose it (prefill, verification blocks and batches of sequences alike). A row's result does not
// depend on the other rows: each expert's matrix product is row-independent and each row sums its
// experts in its own choice order. Returns how many distinct experts the pass read.
int MoeFfn(const MoeConfig& moe, const LayerWeights& layer, const float* h, int n, int64_t n_embd, float* x,
           ThreadPool& pool);

}  // namespace dspark
