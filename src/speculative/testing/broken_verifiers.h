// Deliberately broken verification rules, the negative controls of the losslessness tests: each
// is a bug a speculative sampler can plausibly have, and each must make the distribution check
// (speculative/testing/sampling_check.h) fail, or that check proves nothing. `dspark generate
// --debug-verifier` runs one, so that a test can show `--compare` catching a difference.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "speculative/verifier.h"

namespace dspark::testing {

enum class VerifierBug {
  kOffByOneQ,       // token i is judged against the draft distribution of token i - 1
  kGreedyBonus,     // the bonus token after a fully accepted draft is the argmax, not a sample
  kResampleFromP,   // a rejected token is replaced by a draw from p, not from norm(max(0, p - q))
  kUnfilteredP,     // the target distribution skips top-k / top-p / min-p (temperature only)
  kAcceptAll,       // every draft token is accepted unchecked
  kLeafAgainstP,    // token trees: an alternative is accepted with its probability under p, not under
                    // the residual left after the draft token's rejection
};

// The names used by --debug-verifier: off-by-one-q, greedy-bonus, resample-from-p, unfiltered-p,
// accept-all, leaf-against-p (which shows only where alternatives are verified: --spec-branches).
std::string_view VerifierBugName(VerifierBug bug);
std::optional<VerifierBug> ParseVerifierBug(std::string_view name);
std::vector<VerifierBug> AllVerifierBugs();

VerifyFn BrokenVerifier(VerifierBug bug);

}  // namespace dspark::testing
