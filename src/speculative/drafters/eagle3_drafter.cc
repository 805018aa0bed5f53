#include "speculative/drafters/eagle3_drafter.h"

#include <algorithm>
#include <cstring>

#include "speculative/drafters/context_rows.h"
#include "speculative/drafters/draft_step.h"

namespace dspark {

Result<std::unique_ptr<Eagle3Drafter>> Eagle3Drafter::Create(std::unique_ptr<Eagle3Model> model, ThreadPool& pool,
                                                             int n_ctx, int max_draft) {
  if (model == nullptr) return InvalidArgument("spec: no eagle3 model");
  if (n_ctx < 1) return InvalidArgument("spec: context size {} must be positive", n_ctx);
  if (max_draft < 1) return InvalidArgument("spec: eagle3 max draft {} must be positive", max_draft);
  return std::unique_ptr<Eagle3Drafter>(new Eagle3Drafter(std::move(model), pool, n_ctx, max_draft));
}

Eagle3Drafter::Eagle3Drafter(std::unique_ptr<Eagle3Model> model, ThreadPool& pool, int n_ctx, int max_draft)
    : model_(std::move(model)), forward_(*model_), pool_(pool), n_ctx_(n_ctx), max_draft_(max_draft) {}

DrafterNeeds Eagle3Drafter::Needs() const {
  DrafterNeeds n;
  n.target_tap_layers = model_->config().target_layers;
  n.max_draft = max_draft_;
  n.asks_before_each_token = true;  // one head pass per drafted token
  return n;
}

Eagle3Drafter::SeqState& Eagle3Drafter::State(int seq) {
  SeqState& st = seqs_[seq];
  // Committed rows, and the draft rows of one proposal after them.
  if (st.ctx == nullptr) st.ctx = std::make_unique<Eagle3Context>(*model_, n_ctx_ + max_draft_ + 1);
  return st;
}

Status Eagle3Drafter::Begin(int seq) {
  SeqState& st = State(seq);
  st.ctx->Reset();
  st.pending.clear();
  st.pending_rows = 0;
  st.tail_pos = -1;
  return Status::Ok();
}

Result<int> Eagle3Drafter::BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) {
  const Eagle3Context* source = PrefixSource<Eagle3Context, Eagle3Model>(seqs_, from, saved);
  // Row P was run with token P+1: the shared prefix's last row paired it with a token the new
  // request may not share, so it is run again.
  const int keep = source == nullptr ? 0 : std::min(rows - 1, source->length());
  if (keep <= 0) {
    DSPARK_TRY(Begin(seq));
    return 0;
  }
  SeqState& st = State(seq);  // a std::map: a source inside it stays valid
  st.pending.clear();
  st.pending_rows = 0;
  st.tail_pos = -1;
  DSPARK_TRY(st.ctx->KeepPrefixOf(*source, keep));
  return keep;
}

std::unique_ptr<DrafterRows> Eagle3Drafter::SaveRows(int seq, int rows) {
  auto it = seqs_.find(seq);
  return SaveContextRows(it == seqs_.end() ? nullptr : it->second.ctx.get(), *model_, rows);
}

void Eagle3Drafter::End(int seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  it->second.pending.clear();
  it->second.pending.shrink_to_fit();
  it->second.pending_rows = 0;
}

Status Eagle3Drafter::ObserveTaps(int seq, const TapRows& rows) {
  const Eagle3Config& c = model_->config();
  SeqState& st = State(seq);
  const size_t n_taps = c.target_layers.size();
  if (rows.taps.size() != n_taps || rows.n_embd != c.target_hidden)
    return InvalidArgument("spec: eagle3 expects {} taps of width {}, got {} of width {}", n_taps, c.target_hidden,
                           rows.taps.size(), rows.n_embd);
  const int expected = st.ctx->length() + st.pending_rows;
  if (rows.pos0 != expected)
    return InvalidArgument("spec: eagle3: committed rows start at position {}, but the draft context holds {} rows "
                           "(rows must arrive in order, without gaps)",
                           rows.pos0, expected);
  if (rows.n_rows <= 0) return Status::Ok();
  if (expected + rows.n_rows > n_ctx_)
    return OutOfRange("spec: eagle3: {} committed rows exceed the context size {}", expected + rows.n_rows, n_ctx_);
  // [n_rows, 3 E_t] features, fused into g right away (the pending rows keep only E floats each).
  const size_t width = n_taps * c.target_hidden;
  thread_local std::vector<float> feats;
  feats.resize(static_cast<size_t>(rows.n_rows) * width);
  for (int r = 0; r < rows.n_rows; ++r)
    for (size_t t = 0; t < n_taps; ++t)
      std::memcpy(feats.data() + r * width + t * c.target_hidden,
                  rows.taps[t] + static_cast<size_t>(r) * c.target_hidden, c.target_hidden * sizeof(float));
  st.pending.resize((st.pending_rows + static_cast<size_t>(rows.n_rows)) * c.n_embd);
  forward_.Fuse(feats.data(), rows.n_rows, st.pending.data() + static_cast<size_t>(st.pending_rows) * c.n_embd,
                pool_);
  st.pending_rows += rows.n_rows;
  return Status::Ok();
}

Status Eagle3Drafter::RunPending(std::span<const Catchup> seqs) {
  std::vector<Eagle3Job> jobs;
  for (const Catchup& s : seqs) {
    const int p0 = s.st->ctx->length();
    // Row P pairs with token P+1.
    jobs.push_back({s.st->ctx.get(), s.context.subspan(p0 + 1, s.st->pending_rows), s.st->pending.data(),
                    &s.st->tail});
  }
  DSPARK_TRY(forward_.Run(jobs, pool_));
  for (const Catchup& s : seqs) {
    s.st->tail_pos = s.st->ctx->length() - 1;
    s.st->pending.clear();
    s.st->pending_rows = 0;
  }
  return Status::Ok();
}

Status Eagle3Drafter::Prefill(int seq, std::span<const int32_t> context) {
  // Run the prompt's rows now; the first Propose then only drafts.
  SeqState& st = State(seq);
  if (st.pending_rows == 0 || static_cast<int>(context.size()) != st.ctx->length() + st.pending_rows + 1)
    return Status::Ok();  // Propose says what is wrong, if anything is
  const Catchup c{&st, context};
  return RunPending(std::span<const Catchup>(&c, 1));
}

Result<Draft> Eagle3Drafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  const ProposeRequest request{seq, context, params, &rng};
  return std::move(ProposeBatch(std::span<const ProposeRequest>(&request, 1)).front());
}

std::vector<Result<Draft>> Eagle3Drafter::ProposeBatch(std::span<const ProposeRequest> requests) {
  const Eagle3Config& c = model_->config();
  std::vector<Result<Draft>> results(requests.size(), Result<Draft>(Draft()));
  struct Active {
    size_t request;
    int budget;
    const Eagle3Output* out;  // the output whose logits give the next token
  };
  // Who drafts: sequences whose committed rows are all known; their pending rows run in one pass.
  std::vector<Active> active;
  std::vector<Catchup> catchups;
  std::vector<size_t> caught_up;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposeRequest& r = requests[i];
    SeqState& st = State(r.seq);
    const int budget = std::min(r.params.budget, max_draft_);
    if (r.context.empty() || budget <= 0) continue;
    // The last context token sits at position n; rows 0..n-1 must all be known.
    const int n = static_cast<int>(r.context.size()) - 1;
    const int have = st.ctx->length() + st.pending_rows;
    if (have != n) {
      results[i] = InvalidArgument("spec: eagle3: the sequence has {} committed rows but the drafter saw features of {}",
                                   n, have);
      continue;
    }
    if (st.pending_rows > 0) {
      const Catchup cu{&st, r.context};
      const Eagle3Job probe{st.ctx.get(), r.context.subspan(st.ctx->length() + 1, st.pending_rows),
                            st.pending.data(), nullptr};
      if (Status s = forward_.Check(probe); !s.ok()) {
        results[i] = s;
        continue;
      }
      catchups.push_back(cu);
      caught_up.push_back(i);
    } else if (st.tail_pos != n - 1) {
      continue;  // nothing committed yet: nothing to draft from
    }
    active.push_back({i, budget, &st.tail});
  }
  if (!catchups.empty()) {
    if (Status s = RunPending(catchups); !s.ok()) {
      for (const Active& a : active) results[a.request] = s;
      return results;
    }
    for (size_t i : caught_up) ++results[i]->forward_passes;
  }

  // Draft step by step; each pass holds one row per sequence still drafting, at the position after
  // its last row, fed the previous row's pre-norm state.
  std::vector<Eagle3Output> step(requests.size());
  std::vector<float> q;
  std::vector<Eagle3Job> jobs;
  std::vector<size_t> drafted;  // requests whose contexts hold draft rows
  while (!active.empty()) {
    jobs.clear();
    std::vector<Active> still;
    for (const Active& a : active) {
      const ProposeRequest& r = requests[a.request];
      Draft& d = *results[a.request];
      if (!DraftNextToken(a.out->logits.data(), c.n_vocab, r.params, *r.rng, d, q)) continue;
      if (static_cast<int>(d.tokens.size()) == a.budget) continue;
      // Asked before the next pass, as for the draft model: a pass costs about what a token adds.
      if (r.params.stop != nullptr && !r.params.stop->More(d.probs)) continue;
      SeqState& st = State(r.seq);
      jobs.push_back({st.ctx.get(), std::span<const int32_t>(&d.tokens.back(), 1), a.out->hidden.data(),
                      &step[a.request]});
      if (d.tokens.size() == 1) drafted.push_back(a.request);
      still.push_back({a.request, a.budget, &step[a.request]});
    }
    if (jobs.empty()) break;
    if (Status s = forward_.Run(jobs, pool_); !s.ok()) {
      for (const Active& a : still) results[a.request] = s;
      break;
    }
    for (const Active& a : still) ++results[a.request]->forward_passes;
    active.swap(still);
  }
  // Only committed rows stay: the draft rows' positions belong to whatever verification keeps.
  for (size_t i : drafted) {
    SeqState& st = State(requests[i].seq);
    (void)st.ctx->Truncate(static_cast<int>(requests[i].context.size()) - 1);
  }
  return results;
}

}  // namespace dspark
