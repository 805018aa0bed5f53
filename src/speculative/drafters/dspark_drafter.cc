#include "speculative/drafters/dspark_drafter.h"

#include <algorithm>
#include <cstring>

#include "speculative/drafters/context_rows.h"

namespace dspark {

namespace {
// Buffered feature rows beyond which prefill chunks are injected immediately (bounds memory).
constexpr int kMaxPendingRows = 512;
}  // namespace

Result<std::unique_ptr<DSparkDrafter>> DSparkDrafter::Create(std::unique_ptr<DflashModel> model, ThreadPool& pool,
                                                             int n_ctx, bool full_block) {
  if (model == nullptr) return InvalidArgument("spec: no dflash model");
  if (n_ctx < 1) return InvalidArgument("spec: context size {} must be positive", n_ctx);
  return std::unique_ptr<DSparkDrafter>(new DSparkDrafter(std::move(model), pool, n_ctx, full_block));
}

DSparkDrafter::DSparkDrafter(std::unique_ptr<DflashModel> model, ThreadPool& pool, int n_ctx, bool full_block)
    : model_(std::move(model)), forward_(*model_), pool_(pool), n_ctx_(n_ctx), full_block_(full_block) {}

DrafterNeeds DSparkDrafter::Needs() const {
  DrafterNeeds n;
  n.target_tap_layers = model_->config().target_layers;
  n.max_draft = model_->config().max_drafts();
  n.confidence_head = model_->config().has_confidence;
  return n;
}

DSparkDrafter::SeqState& DSparkDrafter::State(int seq) {
  SeqState& st = seqs_[seq];
  if (st.ctx == nullptr) st.ctx = std::make_unique<DflashContext>(*model_, n_ctx_);
  return st;
}

Status DSparkDrafter::Begin(int seq) {
  SeqState& st = State(seq);
  st.ctx->Reset();
  st.pending.clear();
  st.pending_rows = 0;
  return Status::Ok();
}

Result<int> DSparkDrafter::BeginWithPrefix(int seq, int from, int rows, const DrafterRows* saved) {
  // The context rows are the target's features: kept where this drafter injected them (rows still
  // pending when a request ended were dropped with it) or saved with the host prompt cache.
  if (from >= 0 && from != seq) {
    auto it = seqs_.find(from);
    if (it != seqs_.end() && it->second.pending_rows > 0) DSPARK_TRY(Flush(it->second));
  }
  const DflashContext* source = PrefixSource<DflashContext, DflashModel>(seqs_, from, saved);
  if (source == nullptr) {
    DSPARK_TRY(Begin(seq));
    return 0;
  }
  const int keep = std::min(rows, source->length());
  SeqState& st = State(seq);  // a std::map: a source inside it stays valid
  st.pending.clear();
  st.pending_rows = 0;
  DSPARK_TRY(st.ctx->KeepPrefixOf(*source, keep));
  return keep;
}

std::unique_ptr<DrafterRows> DSparkDrafter::SaveRows(int seq, int rows) {
  auto it = seqs_.find(seq);
  return SaveContextRows(it == seqs_.end() ? nullptr : it->second.ctx.get(), *model_, rows);
}

void DSparkDrafter::End(int seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  it->second.pending.clear();
  it->second.pending.shrink_to_fit();
  it->second.pending_rows = 0;
}

Status DSparkDrafter::Flush(SeqState& st) {
  if (st.pending_rows == 0) return Status::Ok();
  const DflashJob job{st.ctx.get(), st.pending.data(), st.pending_rows, {}, 0, nullptr};
  DSPARK_TRY(forward_.Run(std::span<const DflashJob>(&job, 1), pool_));
  st.pending.clear();
  st.pending_rows = 0;
  return Status::Ok();
}

Status DSparkDrafter::ObserveTaps(int seq, const TapRows& rows) {
  const DflashConfig& c = model_->config();
  SeqState& st = State(seq);
  const size_t n_taps = c.target_layers.size();
  if (rows.taps.size() != n_taps || rows.n_embd != c.n_embd)
    return InvalidArgument("spec: dspark expects {} taps of width {}, got {} of width {}", n_taps, c.n_embd,
                           rows.taps.size(), rows.n_embd);
  const int expected = st.ctx->length() + st.pending_rows;
  if (rows.pos0 != expected)
    return InvalidArgument("spec: dspark: committed rows start at position {}, but the draft context holds {} rows "
                           "(rows must arrive in order, without gaps)",
                           rows.pos0, expected);
  const size_t width = n_taps * c.n_embd;
  st.pending.resize((st.pending_rows + static_cast<size_t>(rows.n_rows)) * width);
  for (int r = 0; r < rows.n_rows; ++r) {
    float* dst = st.pending.data() + (st.pending_rows + static_cast<size_t>(r)) * width;
    for (size_t t = 0; t < n_taps; ++t)
      std::memcpy(dst + t * c.n_embd, rows.taps[t] + static_cast<size_t>(r) * c.n_embd, c.n_embd * sizeof(float));
  }
  st.pending_rows += rows.n_rows;
  if (st.pending_rows >= kMaxPendingRows) DSPARK_TRY(Flush(st));
  return Status::Ok();
}

Status DSparkDrafter::Prefill(int seq, std::span<const int32_t> context) {
  // Inject the prompt's features now; the first Propose then only drafts.
  SeqState& st = State(seq);
  return st.pending_rows > 0 ? Flush(st) : Status::Ok();
}

Result<Draft> DSparkDrafter::Propose(int seq, std::span<const int32_t> context, const DraftParams& params, Rng& rng) {
  const ProposeRequest request{seq, context, params, &rng};
  return std::move(ProposeBatch(std::span<const ProposeRequest>(&request, 1)).front());
}

std::vector<Result<Draft>> DSparkDrafter::ProposeBatch(std::span<const ProposeRequest> requests) {
  const DflashConfig& c = model_->config();
  std::vector<Result<Draft>> results(requests.size(), Result<Draft>(Draft()));
  // Sequences that draft this step: their blocks [anchor, MASK × (block_size - 1)] at positions
  // n.. (bonus-anchor reads slots 1..) go through one backbone pass with their pending features.
  std::vector<size_t> which;
  std::vector<std::vector<int32_t>> blocks;
  blocks.reserve(requests.size());  // jobs hold spans into these: they must not move
  std::vector<DflashJob> jobs;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposeRequest& r = requests[i];
    SeqState& st = State(r.seq);
    if (r.context.empty() || std::min(r.params.budget, c.max_drafts()) <= 0) continue;
    // The anchor (last context token) sits at position n; rows 0..n-1 must all be known.
    const int n = static_cast<int>(r.context.size()) - 1;
    const int have = st.ctx->length() + st.pending_rows;
    if (have != n) {
      results[i] = InvalidArgument("spec: dspark: the sequence has {} committed rows but the drafter saw features of {}",
                                   n, have);
      continue;
    }
    // Only the block rows the budget needs (unless full_block_). In a causal block that changes
    // nothing. In a bidirectional one a row's K/V feed the others' attention, but the trailing
    // MASK rows carry nothing but their positions: dropping them barely changes per-slot
    // acceptance, at a fraction of the cost.
    const int rows = full_block_ ? c.block_size
                                 : std::min(c.block_size, std::min(r.params.budget, c.max_drafts()) + FirstDraftSlot(c));
    blocks.emplace_back(rows, c.mask_token_id);
    blocks.back()[0] = r.context.back();
    const DflashJob job{st.ctx.get(), st.pending.data(), st.pending_rows, blocks.back(), n, &st.block};
    if (Status s = forward_.Check(job); !s.ok()) {
      results[i] = s;
      blocks.pop_back();
      continue;
    }
    which.push_back(i);
    jobs.push_back(job);
  }
  if (jobs.empty()) return results;
  if (Status s = forward_.Run(jobs, pool_); !s.ok()) {
    for (size_t i : which) results[i] = s;
    return results;
  }

  std::vector<ChainJob> chains(which.size());
  for (size_t j = 0; j < which.size(); ++j) {
    const ProposeRequest& r = requests[which[j]];
    SeqState& st = State(r.seq);
    st.pending.clear();
    st.pending_rows = 0;
    ChainOptions& co = chains[j].options;
    co.max_tokens = std::min(r.params.budget, c.max_drafts());
    co.sampling = r.params.sampling;
    co.stop = r.params.stop;
    co.keep_logits = keep_logits_;
    co.position = r.params.position;
    co.constraint = r.params.constraint;
    co.branches = r.params.branches;
    co.branch_tail = r.params.branch_tail;
    chains[j].block = &st.block;
    chains[j].anchor = r.context.back();
    chains[j].rng = r.rng;
    chains[j].out = &st.chain;
  }
  RunChains(*model_, chains, pool_);

  for (size_t j = 0; j < which.size(); ++j) {
    Result<Draft>& result = results[which[j]];
    if (!chains[j].status.ok()) {
      result = chains[j].status;
      continue;
    }
    ChainResult& chain = *chains[j].out;
    Draft& d = *result;
    d.forward_passes = 1;
    d.tokens = chain.tokens;
    d.q = std::move(chain.q);  // dense [V] rows: hand them over rather than copy
    d.branches = chain.branches;
    if (c.has_confidence) {
      // Survival a_k = c_1···c_k from the confidence head (the p_min cut reads c_k back as a_k / a_{k-1}).
      double a = 1.0;
      for (float conf : chain.confidence) d.survival.push_back(static_cast<float>(a *= conf));
    } else {
      d.probs = chain.prob;  // no calibrated survival: the draft's own probabilities
    }
  }
  return results;
}

const ChainResult* DSparkDrafter::last_chain(int seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second.chain;
}

const BlockOutput* DSparkDrafter::last_block(int seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second.block;
}

}  // namespace dspark
