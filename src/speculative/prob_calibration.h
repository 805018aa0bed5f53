// Predicted acceptance of a draft token from the drafter's own probability of it, learnt from
// verification. A distilled draft model's probabilities rank its tokens well but are not
// acceptance rates: a token drafted at a low or middling p is accepted far more often than p says,
// one drafted at a high p nearly always. The scheduler maps each token's probability through a
// logistic fit logit(acceptance) = slope * logit(p) + bias; the product over a draft is that
// draft's predicted survival, per draft rather than averaged over all drafts. Two parameters learn
// from a few dozen drafts and stay monotone; a per-bin hit rate is too noisy across neighbouring
// bins early in a run (neighbours can come out in the wrong order).
#pragma once

#include <array>

namespace dspark {

class ProbCalibration {
 public:
  // Predicted acceptance of a token drafted with probability p, given that the tokens before it
  // were accepted. Before any evidence: logit(acceptance) = logit(p) + kPriorBias (p = 0.5 ->
  // 0.73). A draft token is most often its drafter's argmax, and a matching argmax is accepted
  // whole, so acceptance runs above p: a distilled draft model's fit settles at a slope above 1
  // and a positive bias, and a prior of the identity would underestimate a single request's drafts
  // until the fit had caught up.
  double Acceptance(double p) const;
  // A verified draft token drafted with probability p, reached (the tokens before it accepted).
  void Observe(double p, bool accepted);
  // Acceptance of a reached draft token whose probability is not known yet: the decayed mean of
  // the outcomes observed (prior kPriorMean). A drafter that pays per token asks it whether the
  // next token is worth drafting before it has drafted it (DraftParams::min_survival).
  double MeanAcceptance() const;

 private:
  static constexpr double kPriorBias = 1.0;
  // About how often a distilled draft model's reached tokens are accepted on text it suits.
  static constexpr double kPriorMean = 0.75;
  static constexpr double kPriorMeanWeight = 4.0;
  static constexpr int kBins = 20;
  // Each bin forgets at this rate per observation in it (a memory of ~200 tokens per bin), so the
  // fit follows a change of text or temperature.
  static constexpr double kDecay = 0.005;
  // Refit after this many observations (a fit is a few Newton steps over the bins).
  static constexpr int kRefitEvery = 8;
  void Refit();
  std::array<double, kBins> hits_{}, tries_{};
  double total_ = 0;
  double mean_hits_ = 0, mean_tries_ = 0;  // decayed like a bin, over all bins
  int since_fit_ = 0;
  double slope_ = 1.0, bias_ = kPriorBias;
};

}  // namespace dspark
