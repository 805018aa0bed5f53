#include "speculative/drafters/head_drafter.h"

#include <algorithm>

#include "speculative/drafters/context_rows.h"
#include "speculative/drafters/draft_step.h"

namespace dspark {

Result<std::unique_ptr<HeadDrafter>> HeadDrafter::Create(std::unique_ptr<DraftHead> head, ThreadPool& pool,
                                                         int n_ctx, int max_draft) {
  if (head == nullptr) return InvalidArgument("spec: no draft head");
  if (n_ctx < 1) return InvalidArgument("spec: context size {} must be positive", n_ctx);
  if (max_draft < 1) return InvalidArgument("spec: {} max draft {} must be positive", head->Name(), max_draft);
  return std::unique_ptr<HeadDrafter>(new HeadDrafter(std::move(head), pool, n_ctx, max_draft));
}

HeadDrafter::HeadDrafter(std::unique_ptr<DraftHead> head, ThreadPool& pool, int n_ctx, int max_draft)
    : head_(std::move(head)), pool_(pool), n_ctx_(n_ctx), max_draft_(max_draft), lead_(1 - head_->token_offset()) {}

DrafterNeeds HeadDrafter::Needs() const {
  DrafterNeeds n;
  n.target_tap_layers = head_->TapLayers();
  n.max_draft = max_draft_;
  n.asks_before_each_token = true;  // one head pass per drafted token
  return n;
}

HeadDrafter::SeqState& HeadDrafter::State(int seq) {
  SeqState& st = seqs_[seq];
  // Committed rows, and the draft rows of one proposal after them.
  if (st.ctx == nullptr) st.ctx = std::make_unique<HeadContext>(*head_, n_ctx_ + max_draft_ + 1 + lead_);
  return st;
}

void HeadDrafter::Clear(SeqState& st) {
  st.pending.clear();
  st.pending_rows = 0;
  st.tail_pos = -1;
}

Status HeadDrafter::Begin(int seq) {
  SeqState& st = State(seq);
  st.ctx->Reset();
  Clear(st);
  return Status::Ok();
}

Result<int> HeadDrafter::BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) {
  const HeadContext* source = PrefixSource<HeadContext, DraftHead>(seqs_, from, saved);
  // A row also reads a token: EAGLE-3's row P the token P+1, which the new request may not share,
  // so the shared prefix's last row runs again.
  const int keep = source == nullptr ? 0 : std::min(rows - head_->token_offset(), source->length());
  if (FeatureRows(keep) <= 0) {
    DSPARK_TRY(Begin(seq));
    return 0;
  }
  SeqState& st = State(seq);  // a std::map: a source inside it stays valid
  Clear(st);
  DSPARK_TRY(st.ctx->KeepPrefixOf(*source, keep));
  return FeatureRows(keep);
}

std::unique_ptr<DrafterRows> HeadDrafter::SaveRows(int seq, int rows) {
  auto it = seqs_.find(seq);
  return SaveContextRows(it == seqs_.end() ? nullptr : it->second.ctx.get(), *head_, rows);
}

void HeadDrafter::End(int seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  it->second.pending.clear();
  it->second.pending.shrink_to_fit();
  it->second.pending_rows = 0;
}

Status HeadDrafter::ObserveTaps(int seq, const TapRows& rows) {
  SeqState& st = State(seq);
  const size_t n_taps = head_->TapLayers().size();
  if (rows.taps.size() != n_taps || rows.n_embd != head_->TapWidth())
    return InvalidArgument("spec: {} expects {} taps of width {}, got {} of width {}", head_->Name(), n_taps,
                           head_->TapWidth(), rows.taps.size(), rows.n_embd);
  const int expected = FeatureRows(st.rows());
  if (rows.pos0 != expected)
    return InvalidArgument("spec: {}: committed rows start at position {}, but the draft context holds {} rows "
                           "(rows must arrive in order, without gaps)",
                           head_->Name(), rows.pos0, expected);
  if (rows.n_rows <= 0) return Status::Ok();
  if (expected + rows.n_rows > n_ctx_)
    return OutOfRange("spec: {}: {} committed rows exceed the context size {}", head_->Name(), expected + rows.n_rows,
                      n_ctx_);
  const size_t width = static_cast<size_t>(head_->StateWidth());
  if (st.rows() == 0 && lead_ > 0) {  // row 0: the first token with a zero state
    st.pending.assign(width, 0.0f);
    st.pending_rows = 1;
  }
  st.pending.resize((st.pending_rows + static_cast<size_t>(rows.n_rows)) * width);
  head_->Fuse(rows.taps, rows.n_rows, st.pending.data() + static_cast<size_t>(st.pending_rows) * width, pool_);
  st.pending_rows += rows.n_rows;
  return Status::Ok();
}

HeadJob HeadDrafter::PendingJob(SeqState& st, std::span<const int32_t> context) {
  const size_t first = static_cast<size_t>(st.ctx->length() + head_->token_offset());
  return {st.ctx.get(), context.subspan(first, st.pending_rows), st.pending.data(), &st.tail};
}

Status HeadDrafter::RunPending(std::span<const Catchup> seqs) {
  std::vector<HeadJob> jobs;
  for (const Catchup& s : seqs) jobs.push_back(s.job);
  DSPARK_TRY(head_->Run(jobs, pool_));
  for (const Catchup& s : seqs) {
    s.st->tail_pos = s.st->ctx->length() - 1;
    s.st->pending.clear();
    s.st->pending_rows = 0;
  }
  return Status::Ok();
}

Status HeadDrafter::Prefill(int seq, std::span<const int32_t> context) {
  // Run the prompt's rows now; the first Propose then only drafts.
  SeqState& st = State(seq);
  if (st.pending_rows == 0 || static_cast<int>(context.size()) != st.rows() + head_->token_offset())
    return Status::Ok();  // Propose says what is wrong, if anything is
  const Catchup c{&st, PendingJob(st, context)};
  return RunPending(std::span<const Catchup>(&c, 1));
}

Result<Draft> HeadDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  const ProposeRequest request{seq, context, params, &rng};
  return std::move(ProposeBatch(std::span<const ProposeRequest>(&request, 1)).front());
}

std::vector<Result<Draft>> HeadDrafter::ProposeBatch(std::span<const ProposeRequest> requests) {
  std::vector<Result<Draft>> results(requests.size(), Result<Draft>(Draft()));
  struct Active {
    size_t request;
    int budget;
    const HeadOutput* out;  // the output whose logits give the next token
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
    // The last context token sits at position n; the target's rows 0..n-1 must all be known.
    const int n = static_cast<int>(r.context.size()) - 1;
    const int have = FeatureRows(st.rows());
    if (have != n) {
      results[i] = InvalidArgument("spec: {}: the sequence has {} committed rows but the drafter saw features of {}",
                                   head_->Name(), n, have);
      continue;
    }
    if (st.pending_rows > 0) {
      const HeadJob job = PendingJob(st, r.context);
      if (Status s = head_->Check(job); !s.ok()) {
        results[i] = s;
        continue;
      }
      catchups.push_back({&st, job});
      caught_up.push_back(i);
    } else if (st.tail_pos != n - 1 + lead_) {
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
  // its last row, fed the previous row's output state.
  std::vector<HeadOutput> step(requests.size());
  std::vector<float> q;
  std::vector<HeadJob> jobs;
  std::vector<Active> still;
  std::vector<size_t> drafted;  // requests whose contexts hold draft rows
  while (!active.empty()) {
    jobs.clear();
    still.clear();
    for (const Active& a : active) {
      const ProposeRequest& r = requests[a.request];
      Draft& d = *results[a.request];
      if (!DraftNextToken(a.out->logits.data(), head_->n_vocab(), r.params, *r.rng, d, q)) continue;
      if (static_cast<int>(d.tokens.size()) == a.budget) continue;
      // Asked before the next pass, as for the draft model: a pass costs about what a token adds.
      if (r.params.stop != nullptr && !r.params.stop->More(d.probs)) continue;
      SeqState& st = State(r.seq);
      jobs.push_back({st.ctx.get(), std::span<const int32_t>(&d.tokens.back(), 1), a.out->state.data(),
                      &step[a.request]});
      if (d.tokens.size() == 1) drafted.push_back(a.request);
      still.push_back({a.request, a.budget, &step[a.request]});
    }
    if (jobs.empty()) break;
    if (Status s = head_->Run(jobs, pool_); !s.ok()) {
      for (const Active& a : still) results[a.request] = s;
      break;
    }
    for (const Active& a : still) ++results[a.request]->forward_passes;
    active.swap(still);
  }
  // Only committed rows stay: the draft rows' positions belong to whatever verification keeps.
  for (size_t i : drafted) {
    SeqState& st = State(requests[i].seq);
    (void)st.ctx->Truncate(static_cast<int>(requests[i].context.size()) - 1 + lead_);
  }
  return results;
}

}  // namespace dspark
