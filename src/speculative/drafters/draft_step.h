// One step of an autoregressive drafter (the draft model, EAGLE-3): from its logits for the next
// position to the next draft token, with what the planner and the verifier need of it.
#pragma once

#include <vector>

#include "speculative/drafter.h"

namespace dspark {

// Draws the next token of `d` from `logits` [n_vocab]: the argmax, or at temperature > 0 a draw
// from q (the target's transforms; keyed requests draw as verification will) after the grammar's
// mask, if the request has one. Appends it with its probability (its confidence), q when sampled,
// and DraftParams::branches alternatives from the distribution it was drawn from. Returns false,
// appending nothing, when the draft ends here: the grammar allows no token, or the stop rule
// (DraftStop::Keep) drops it. `q` is scratch.
bool DraftNextToken(const float* logits, int n_vocab, const DraftParams& params, Rng& rng, Draft& d,
                    std::vector<float>& q);

}  // namespace dspark
