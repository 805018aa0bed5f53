#include "spec/drafters/dspark_heads.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace dspark {

int FirstDraftSlot(const DflashConfig& config) { return config.layout == BlockLayout::kAnchorFirst ? 0 : 1; }

namespace {

// softmax(z)[tok] at temperature 1 (-inf entries contribute 0).
float ProbAt(const float* z, int n, int32_t tok) {
  float mx = -INFINITY;
  for (int v = 0; v < n; ++v) mx = std::max(mx, z[v]);
  double sum = 0;
  for (int v = 0; v < n; ++v) sum += std::exp(static_cast<double>(z[v]) - mx);
  return static_cast<float>(std::exp(static_cast<double>(z[tok]) - mx) / sum);
}

}  // namespace

Status RunChain(const DflashModel& model, const BlockOutput& block, int32_t anchor, const ChainOptions& options,
                Rng& rng, ThreadPool& pool, ChainResult* out) {
  const DflashConfig& c = model.config();
  const DflashWeights& w = model.weights();
  const int V = c.n_vocab;
  const int R = c.markov_rank;
  const int64_t E = c.n_embd;
  const int first = FirstDraftSlot(c);
  const int n_slots = std::min(options.max_tokens, block.n_rows - first);
  *out = ChainResult{};
  if (anchor < 0 || anchor >= V) return InvalidArgument("spec: anchor token {} outside the vocabulary", anchor);

  std::vector<float> z(V), e(R), bias_d(c.n_vocab_draft), q;
  int32_t prev = anchor;
  for (int s = 0; s < n_slots; ++s) {
    const int slot = first + s;
    std::copy_n(block.logits.data() + static_cast<size_t>(slot) * V, V, z.data());
    float conf = 1.0f;
    if (R > 0) {
      const ops::WeightView& w1 = w.markov_w1;
      ops::DequantizeRow(w1.type, static_cast<const uint8_t*>(w1.data) + RowBytes(w1.type, w1.cols) * prev, e.data(), R);
      ops::MatMul(w.markov_w2, e.data(), 1, bias_d.data(), pool);
      if (w.d2t.empty()) {
        for (int v = 0; v < V; ++v) z[v] += w.markov_scale * bias_d[v];
      } else {
        for (int j = 0; j < c.n_vocab_draft; ++j) z[w.d2t[j]] += w.markov_scale * bias_d[j];
      }
      if (c.has_confidence) {
        const float logit = ops::Dot(w.conf_w.data(), block.hidden.data() + slot * E, E) +
                            ops::Dot(w.conf_w.data() + E, e.data(), R) + w.conf_b;
        conf = 1.0f / (1.0f + std::exp(-logit));
      }
    }
    int32_t tok;
    if (options.sampling.greedy()) {
      tok = Argmax(z.data(), V);
    } else {
      ComputeProbs(z.data(), V, options.sampling, &q);
      tok = SampleFromWeights(q, rng);
    }
    // The token's own probability is what schedules and cuts a draft without a confidence head;
    // with one it is not read, and a softmax over the vocabulary per slot is not free.
    const float prob = c.has_confidence ? 0.0f : ProbAt(z.data(), V, tok);
    if (options.p_min > 0 && (c.has_confidence ? conf : prob) < options.p_min) break;
    out->tokens.push_back(tok);
    out->prob.push_back(prob);
    if (c.has_confidence) out->confidence.push_back(conf);
    if (!options.sampling.greedy()) out->q.push_back(q);
    if (options.keep_logits) out->logits.insert(out->logits.end(), z.begin(), z.end());
    prev = tok;
  }
  return Status::Ok();
}

}  // namespace dspark
