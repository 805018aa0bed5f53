#include "speculative/drafters/dspark_heads.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "speculative/token_tree.h"
#include "speculative/verifier.h"

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

// e = W1[prev]: the Markov head's embedding of the token before a slot.
void MarkovEmbedding(const DflashWeights& w, int32_t prev, int rank, float* e) {
  const ops::WeightView& w1 = w.markov_w1;
  ops::DequantizeRow(w1.type, static_cast<const uint8_t*>(w1.data) + RowBytes(w1.type, w1.cols) * prev, e, rank);
}

// z += scale · bias, bias over the draft vocabulary (mapped to the target's through d2t if any).
void AddMarkovBias(const DflashWeights& w, const float* bias, int n_vocab, int n_vocab_draft, float* z) {
  if (w.d2t.empty()) {
    for (int v = 0; v < n_vocab; ++v) z[v] += w.markov_scale * bias[v];
  } else {
    for (int k = 0; k < n_vocab_draft; ++k) z[w.d2t[k]] += w.markov_scale * bias[k];
  }
}

// The biased logits z̃ of block slot `slot` after token `prev` (z + scale · W2·W1[prev]).
void BiasedLogits(const DflashModel& model, const BlockOutput& block, int slot, int32_t prev, ThreadPool& pool,
                  std::vector<float>& e, std::vector<float>& bias, std::vector<float>& z) {
  const DflashConfig& c = model.config();
  const DflashWeights& w = model.weights();
  const int V = c.n_vocab;
  const int Vd = c.n_vocab_draft;
  const int R = c.markov_rank;
  z.assign(block.logits.begin() + static_cast<size_t>(slot) * V, block.logits.begin() + static_cast<size_t>(slot + 1) * V);
  if (R <= 0) return;
  e.resize(R);
  bias.resize(Vd);
  MarkovEmbedding(w, prev, R, e.data());
  ops::MatMul(w.markov_w2, e.data(), 1, bias.data(), pool);
  AddMarkovBias(w, bias.data(), V, Vd, z.data());
}

// Each alternative's tail: the slots after it, chained greedily from it.
void AddTails(const DflashModel& model, const BlockOutput& block, const ChainOptions& options, ThreadPool& pool,
              ChainResult* out) {
  const int first = FirstDraftSlot(model.config());
  const int n_slots = block.n_rows - first;
  std::vector<float> e, bias, z;
  for (int i = 0; i < static_cast<int>(out->branches.size()); ++i)
    for (DraftBranch& b : out->branches[i]) {
      int32_t prev = b.token;
      for (int t = i + 1; t < n_slots && static_cast<int>(b.tail.size()) < options.branch_tail; ++t) {
        BiasedLogits(model, block, first + t, prev, pool, e, bias, z);
        prev = Argmax(z.data(), model.config().n_vocab);
        b.tail.push_back(prev);
      }
    }
}

}  // namespace

Status RunChain(const DflashModel& model, const BlockOutput& block, int32_t anchor, const ChainOptions& options,
                Rng& rng, ThreadPool& pool, ChainResult* out) {
  ChainJob job{&block, anchor, options, &rng, out, Status::Ok()};
  RunChains(model, std::span<ChainJob>(&job, 1), pool);
  return job.status;
}

void RunChains(const DflashModel& model, std::span<ChainJob> jobs, ThreadPool& pool) {
  const DflashConfig& c = model.config();
  const DflashWeights& w = model.weights();
  const int V = c.n_vocab;
  const int Vd = c.n_vocab_draft;
  const int R = c.markov_rank;
  const int64_t E = c.n_embd;
  const int first = FirstDraftSlot(c);
  struct Chain {
    ChainJob* job;
    int n_slots;
    int32_t prev;
  };
  std::vector<Chain> running;
  for (ChainJob& job : jobs) {
    *job.out = ChainResult{};
    job.status = Status::Ok();
    if (job.anchor < 0 || job.anchor >= V) {
      job.status = InvalidArgument("spec: anchor token {} outside the vocabulary", job.anchor);
      continue;
    }
    const int n_slots = std::min(job.options.max_tokens, job.block->n_rows - first);
    if (n_slots > 0) running.push_back({&job, n_slots, job.anchor});
  }

  std::vector<float> z(V), e, bias, q;
  for (int s = 0; !running.empty(); ++s) {
    const int slot = first + s;
    const int n = static_cast<int>(running.size());
    // e_i = W1[prev_i] for every running chain, then their biases in one matmul.
    if (R > 0) {
      e.resize(static_cast<size_t>(n) * R);
      bias.resize(static_cast<size_t>(n) * Vd);
      for (int j = 0; j < n; ++j) MarkovEmbedding(w, running[j].prev, R, e.data() + static_cast<size_t>(j) * R);
      ops::MatMul(w.markov_w2, e.data(), n, bias.data(), pool);
    }
    std::vector<Chain> next;
    for (int j = 0; j < n; ++j) {
      Chain& ch = running[j];
      const ChainOptions& options = ch.job->options;
      const BlockOutput& block = *ch.job->block;
      ChainResult* out = ch.job->out;
      std::copy_n(block.logits.data() + static_cast<size_t>(slot) * V, V, z.data());
      float conf = 1.0f;
      if (R > 0) {
        AddMarkovBias(w, bias.data() + static_cast<size_t>(j) * Vd, V, Vd, z.data());
        if (c.has_confidence) {
          const float logit = ops::Dot(w.conf_w.data(), block.hidden.data() + slot * E, E) +
                              ops::Dot(w.conf_w.data() + E, e.data() + static_cast<size_t>(j) * R, R) + w.conf_b;
          conf = 1.0f / (1.0f + std::exp(-logit));
        }
      }
      // A grammar-constrained chain drafts only tokens the grammar allows; none allowed ends it.
      if (options.constraint != nullptr && !options.constraint->Mask(z.data(), V, options.sampling.greedy())) continue;
      int32_t tok;
      if (options.sampling.greedy()) {
        tok = Argmax(z.data(), V);
      } else {
        ComputeProbs(z.data(), V, options.sampling, &q);
        tok = DrawDraftToken(q, options.sampling, options.position + static_cast<int64_t>(out->tokens.size()),
                             *ch.job->rng);
      }
      // The token's own probability is what schedules and cuts a draft without a confidence head;
      // with one it is not read, and a softmax over the vocabulary per slot is not free.
      const float prob = c.has_confidence ? 0.0f : ProbAt(z.data(), V, tok);
      if (options.stop != nullptr && !options.stop->Keep(c.has_confidence ? conf : prob)) continue;
      out->tokens.push_back(tok);
      if (options.constraint != nullptr) options.constraint->Push(tok);
      out->prob.push_back(prob);
      if (c.has_confidence) out->confidence.push_back(conf);
      if (!options.sampling.greedy()) out->q.push_back(q);
      if (options.keep_logits) out->logits.insert(out->logits.end(), z.begin(), z.end());
      // The slot's next most likely tokens, under the distribution the token was drawn from.
      if (options.branches > 0)
        out->branches.push_back(options.sampling.greedy() ? TopBranches(z.data(), V, tok, options.branches)
                                                          : TopBranches(q, tok, options.branches));
      ch.prev = tok;
      if (s + 1 < ch.n_slots) next.push_back(ch);
    }
    running.swap(next);
  }
  for (ChainJob& job : jobs)
    if (job.status.ok() && job.options.branch_tail > 0) AddTails(model, *job.block, job.options, pool, job.out);
}

}  // namespace dspark
