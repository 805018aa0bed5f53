#include "speculative/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <numeric>

#include "speculative/batch_sequence.h"
#include "speculative/draft_grammar.h"
#include "speculative/token_tree.h"
#include "speculative/verifier.h"
#include "util/fault_injection.h"
#include "util/log.h"

namespace dspark {

namespace {
using Clock = std::chrono::steady_clock;
constexpr const char* kOutOfMemoryMessage = "the server ran out of memory for this request; retry later";
double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace


Status CheckPromptFits(int prompt_tokens, int n_ctx) {
  if (prompt_tokens == 0) return InvalidArgument("prompt is empty (no tokens after tokenisation)");
  if (prompt_tokens >= n_ctx)
    return OutOfRange("prompt has {} tokens but the context holds {}; shorten it or raise --ctx-size",
                      prompt_tokens, n_ctx);
  return Status::Ok();
}

Result<std::vector<float>> Prefill(Model& model, KvCache& cache, ThreadPool& pool, int seq,
                                   const std::vector<int32_t>& ids, int start_pos, int chunk) {
  if (chunk < 1) chunk = 1;
  std::vector<float> last;
  const int n = static_cast<int>(ids.size());
  for (int b = 0; b < n; b += chunk) {
    const int e = std::min(n, b + chunk);
    Batch batch;
    for (int i = b; i < e; ++i) batch.Add(ids[i], start_pos + i, seq, i == n - 1);
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(batch, cache, pool));
    if (e == n) last = std::move(out.logits);
  }
  return last;
}

BatchEngine::BatchEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, BatchEngineOptions options,
                         Drafter* drafter)
    : target_(target), tokenizer_(tokenizer), pool_(pool), options_(options), drafter_(drafter),
      cache_(target.config(), std::max(1, options.n_parallel), options.n_ctx, options.kv_type),
      store_(target.config(), options.kv_type, options.prompt_cache ? options.cache_ram_bytes : 0) {
  options_.n_parallel = std::max(1, options_.n_parallel);
  options_.prefill_chunk = std::max(1, options_.prefill_chunk);
  slots_.resize(options_.n_parallel);
  retained_.resize(options_.n_parallel);
  drafter_rows_valid_.assign(options_.n_parallel, 0);
  slot_used_.assign(options_.n_parallel, 0);
  if (drafter_ != nullptr) {
    const DrafterNeeds needs = drafter_->Needs();
    tap_layers_ = needs.target_tap_layers;
    planner_ = std::make_unique<DraftPlanner>(options_.schedule, &cost_, options_.n_parallel, &needs);
  }
}

BatchEngine::~BatchEngine() = default;

const CostModel& BatchEngine::cost_model() {
  if (cost_.empty()) {
    // Profile on a free slot, or skip (the scheduler then assumes every row costs the same).
    for (int slot = 0; slot < options_.n_parallel; ++slot) {
      if (slots_[slot] != nullptr || cache_.Length(slot) != 0) continue;
      const int max_rows = std::min(128, options_.n_parallel * (options_.schedule.n_max + 1));
      auto c = ProfileVerifyCost(target_, cache_, pool_, slot, std::max(2, max_rows));
      if (c.ok()) cost_ = std::move(*c);
      else DSPARK_LOG_WARN("spec: verify-cost profiling failed: {}", c.status().message());
      break;
    }
  }
  return cost_;
}

int BatchEngine::num_running() const { return running_.load(); }

int BatchEngine::num_queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

Result<int64_t> BatchEngine::Submit(std::vector<int32_t> prompt, GenerateOptions options, TokenCallback on_token,
                                    DoneCallback on_done) {
  DSPARK_TRY(ValidateSamplingParams(options.sampling));
  if (options.max_new_tokens < 1) return InvalidArgument("max_tokens must be >= 1, got {}", options.max_new_tokens);
  DSPARK_TRY(CheckPromptFits(static_cast<int>(prompt.size()), options_.n_ctx));
  const int n_vocab = target_.config().n_vocab;
  for (int32_t id : prompt)
    if (id < 0 || id >= n_vocab) return InvalidArgument("prompt token id {} is outside the vocabulary [0, {})", id, n_vocab);
  for (const auto& [id, bias] : options.sampling.logit_bias)
    if (id < 0 || id >= n_vocab) return InvalidArgument("logit_bias token id {} is outside the vocabulary [0, {})", id, n_vocab);
  if (options.logprobs > 20) return InvalidArgument("logprobs must be <= 20, got {}", options.logprobs);
  auto s = std::make_unique<Sequence>();
  s->prompt = std::move(prompt);
  s->options = std::move(options);
  s->on_token = std::move(on_token);
  s->on_done = std::move(on_done);
  std::lock_guard<std::mutex> lock(mu_);
  s->id = next_id_++;
  const int64_t id = s->id;
  queue_.push_back(std::move(s));
  return id;
}

void BatchEngine::Cancel(int64_t request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.push_back(request_id);
}

void BatchEngine::FailDrafter(Sequence& s, const Status& status) {
  DSPARK_LOG_WARN("spec: request {}: drafter '{}' failed, continuing with plain decoding: {}", s.id,
                  drafter_->Name(), status.message());
  ++s.result.stats.num_fallbacks;
  s.use_drafter = false;
}

void BatchEngine::Admit() {
  const bool adaptive = options_.schedule.adaptive && drafter_ != nullptr;
  if (adaptive) cost_model();  // profile before the first request occupies the cache
  std::lock_guard<std::mutex> lock(mu_);
  while (!queue_.empty()) {
    const std::vector<int32_t>& prompt = queue_.front()->prompt;
    // A request whose prompt shares a long prefix with one still being prefilled (the choices of
    // an n > 1 request, a common system prompt) waits until those rows exist, then copies them
    // instead of computing them a second time.
    if (options_.prompt_cache && WaitsForSharedPrefill(prompt)) break;
    // The free slot holding the longest prefix of the prompt; among equals (none at all, say) the
    // least recently used, whose cached rows are the least likely to be asked for again.
    int slot = -1;
    size_t best = 0;
    for (int i = 0; i < options_.n_parallel; ++i) {
      if (slots_[i] != nullptr) continue;
      const size_t rows = options_.prompt_cache ? CommonPrefix(retained_[i], prompt) : 0;
      if (slot < 0 || rows > best || (rows == best && slot_used_[i] < slot_used_[slot])) {
        slot = i;
        best = rows;
      }
    }
    if (slot < 0) break;
    std::unique_ptr<Sequence> s = std::move(queue_.front());
    queue_.pop_front();
    s->slot = slot;
    Sequence& admitted = *s;
    slots_[slot] = std::move(s);
    running_.fetch_add(1);
    try {
      Start(admitted, slot);
    } catch (const std::bad_alloc&) {
      // This request alone fails; the slot starts clean for the next one.
      DSPARK_LOG_WARN("engine: request {}: out of memory while admitting it; it fails", admitted.id);
      FailForMemory(admitted);
    }
  }
}

void BatchEngine::FailForMemory(Sequence& s) {
  s.result.error = kOutOfMemoryMessage;
  Finish(s, "out_of_memory");
}

// A request's state for its slot: its context, samplers, detokenizer, grammar, and the cached rows
// it starts from.
void BatchEngine::Start(Sequence& s, int slot) {
  MaybeInjectAllocationFailure(FaultPoint::kAdmission);
  s.context = s.prompt;
  s.rng = Rng(s.options.sampling.seed);
  s.draft_rng = Rng(s.options.sampling.seed ^ 0x5eedd12af7ull);
  // The generated text continues the prompt: its first piece keeps a SentencePiece space prefix.
  s.detok = std::make_unique<StreamingDetokenizer>(tokenizer_, false, /*text_start=*/false);
  s.stops = std::make_unique<StopStringMatcher>(s.options.stop);
  if (planner_ != nullptr) planner_->Begin(slot);
  s.result.stats.prompt_tokens = static_cast<int64_t>(s.prompt.size());
  s.use_drafter = drafter_ != nullptr && s.options.speculate;
  if (s.options.grammar != nullptr) {
    Masker();
    s.grammar = s.options.grammar->Start();
  }
  StartFromCache(s, slot);
}

const float* BatchEngine::AdjustedRows(Sequence& s, const float* logits, int n_rows, const int32_t* draft) {
  const bool constrained = s.grammar.has_value();
  if (!s.options.sampling.adjusts_logits() && !constrained) return logits;
  const size_t n_vocab = static_cast<size_t>(target_.config().n_vocab);
  s.rows.assign(logits, logits + static_cast<size_t>(n_rows) * n_vocab);
  for (int i = 0; i < n_rows; ++i) {
    float* row = s.rows.data() + i * n_vocab;
    if (s.options.sampling.adjusts_logits())
      ApplyLogitAdjustments(row, static_cast<int>(n_vocab), s.options.sampling, s.context,
                            std::span<const int32_t>(draft, draft == nullptr ? 0 : i), s.prompt.size());
    if (constrained) {
      const grammar::GrammarState& state = draft != nullptr && i > 0 ? s.draft_states[i] : *s.grammar;
      if (!MaskRow(s, state, row)) s.grammar_dead = true;
    }
  }
  return s.rows.data();
}

const grammar::TokenMasker& BatchEngine::Masker() {
  if (masker_ == nullptr) {
    const int n_vocab = target_.config().n_vocab;
    token_bytes_.resize(n_vocab);
    // Control tokens spell their text (tool-call markers are control tokens in some vocabularies);
    // end-of-generation tokens are allowed by the grammar's completeness alone.
    for (int id = 0; id < n_vocab; ++id)
      token_bytes_[id] = tokenizer_.IsEog(id) ? std::string() : tokenizer_.TokenToPiece(id, /*render_special=*/true);
    masker_ = std::make_unique<grammar::TokenMasker>(token_bytes_);
  }
  return *masker_;
}

bool BatchEngine::MaskRow(const Sequence& s, const grammar::GrammarState& state, float* row) {
  const GrammarVocab vocab{tokenizer_, token_bytes_, Masker()};
  return vocab.Mask(*s.options.grammar, state, row, target_.config().n_vocab,
                    s.options.sampling.greedy() && s.options.logprobs < 0);
}

void BatchEngine::ConstrainDraft(Sequence& s) {
  if (!s.grammar) return;
  Masker();
  const grammar::Grammar& g = *s.options.grammar;
  Draft& d = s.draft;
  size_t keep = 0;
  // The tokens the drafter drew under the constraint are allowed already, their states known.
  if (s.draft_grammar != nullptr) {
    const std::vector<int32_t>& walked = s.draft_grammar->tokens();
    while (keep < d.tokens.size() && keep < walked.size() && walked[keep] == d.tokens[keep]) ++keep;
    s.draft_states.swap(s.draft_grammar->states());
    s.draft_states.resize(keep + 1);
    s.draft_grammar.reset();
  } else {
    s.draft_states.assign(1, *s.grammar);
  }
  // Nothing after an end-of-generation token is emitted, whatever its row says.
  bool ended = keep > 0 && tokenizer_.IsEog(d.tokens[keep - 1]);
  const GrammarVocab vocab{tokenizer_, token_bytes_, Masker()};
  while (!ended && keep < d.tokens.size()) {
    const int32_t id = d.tokens[keep];
    if (!vocab.Allows(g, s.draft_states.back(), id)) break;
    ++keep;
    grammar::GrammarState next = s.draft_states.back();
    ended = tokenizer_.IsEog(id);
    if (!ended) g.Advance(&next, token_bytes_[id]);
    s.draft_states.push_back(std::move(next));
  }
  if (keep == d.tokens.size()) return;
  d.tokens.resize(keep);
  if (d.q.size() > keep) d.q.resize(keep);
  if (d.probs.size() > keep) d.probs.resize(keep);
  if (d.survival.size() > keep) d.survival.resize(keep);
}

int32_t BatchEngine::SampleAt(Sequence& s, const float* row) {
  thread_local std::vector<float> scratch;
  const int n_vocab = target_.config().n_vocab;
  if (!s.options.sampling.keyed) return SampleToken(row, n_vocab, s.options.sampling, s.rng, &scratch);
  Rng rng = KeyedRng(s.options.sampling.seed, s.result.stats.generated_tokens);
  return SampleToken(row, n_vocab, s.options.sampling, rng, &scratch);
}

bool BatchEngine::Emit(Sequence& s, int32_t id, TokenSource source, const float* row,
                       grammar::GrammarState* known_state) {
  if (!s.options.ignore_eos && tokenizer_.IsEog(id)) {
    s.stop_reason = "eos";
    return false;
  }
  if (s.grammar && known_state != nullptr) {
    *s.grammar = std::move(*known_state);
  } else if (s.grammar && !tokenizer_.IsEog(id) && !s.options.grammar->Advance(&*s.grammar, token_bytes_[id])) {
    // Masked rows never sample such a token; a broken mask would otherwise break the promise.
    s.stop_reason = "error";
    s.result.error = "grammar: the sampled token does not continue the constrained text";
    return false;
  }
  s.result.ids.push_back(id);
  ++s.result.stats.generated_tokens;
  const TokenLogprob* logprob = nullptr;
  if (s.options.logprobs >= 0) {
    s.result.logprobs.push_back(ComputeLogprob(row, target_.config().n_vocab, id, s.options.logprobs));
    logprob = &s.result.logprobs.back();
  }
  const std::string shown = s.stops->Push(s.detok->Push(id));
  s.result.text += shown;
  if (s.on_token && !s.on_token(TokenEvent{id, shown, source, logprob})) {
    s.stop_reason = "cancelled";
    return false;
  }
  if (s.stops->stopped()) {
    s.stop_reason = "stop";
    return false;
  }
  if (s.result.stats.generated_tokens >= s.options.max_new_tokens) {
    s.stop_reason = "length";
    return false;
  }
  return true;
}

void BatchEngine::Finish(Sequence& s, std::string reason) {
  if (s.stop_reason.empty()) s.stop_reason = std::move(reason);
  const bool out_of_memory = s.stop_reason == "out_of_memory";
  if (s.stop_reason != "stop" && s.stop_reason != "cancelled" && !out_of_memory && s.detok) {
    std::string tail = s.stops->Push(s.detok->Flush());
    tail += s.stops->Flush();
    s.result.text += tail;
    if (s.on_token && !tail.empty()) s.on_token(TokenEvent{-1, tail, TokenSource::kTarget, nullptr});
  }
  if (drafter_ != nullptr && s.use_drafter) drafter_->End(s.slot);
  SpecStats& st = s.result.stats;
  if (s.decode_start != Clock::time_point{}) st.decode_ms = MsSince(s.decode_start);
  st.other_ms = std::max(0.0, st.decode_ms - st.draft_ms - st.verify_ms - st.sample_ms);
  s.result.stop_reason = s.stop_reason;
  cumulative_.Merge(st);
  // The slot keeps its rows for a later request with the same prefix (the prompt cache), unless a
  // failed step may have left them half-written.
  if (options_.prompt_cache && !out_of_memory) {
    const size_t n = std::min(s.context.size(), static_cast<size_t>(cache_.Length(s.slot)));
    retained_[s.slot].assign(s.context.begin(), s.context.begin() + n);
    drafter_rows_valid_[s.slot] = s.use_drafter;
    slot_used_[s.slot] = ++clock_;
  } else {
    cache_.Clear(s.slot);
    retained_[s.slot].clear();
    drafter_rows_valid_[s.slot] = 0;
  }
  std::unique_ptr<Sequence> owned = std::move(slots_[s.slot]);
  running_.fetch_sub(1);
  if (owned->on_done) owned->on_done(std::move(owned->result));
}

Status BatchEngine::RunUntilIdle() {
  for (;;) {
    DSPARK_ASSIGN_OR_RETURN(bool worked, Step());
    if (!worked) return Status::Ok();
  }
}

// One step: cancellations, admission, then the phases of one target pass. Each phase is a
// function of its own; `Pass` carries what the forward pass produced to the commit phases.
Result<bool> BatchEngine::Step() {
  ApplyCancellations();
  Admit();
  try {
    MaybeInjectAllocationFailure(FaultPoint::kPass);
    return RunStep();
  } catch (const std::bad_alloc&) {
    // The step's state is half-made: every request in a slot fails, and their rows are dropped.
    // Queued requests and the server go on.
    int failed = 0;
    for (auto& slot : slots_) {
      if (!slot) continue;
      FailForMemory(*slot);
      ++failed;
    }
    DSPARK_LOG_WARN("engine: out of memory during a step; {} running request(s) fail", failed);
    return true;
  }
}

Result<bool> BatchEngine::RunStep() {
  const auto step_start = Clock::now();
  std::vector<Sequence*> decoding, prefilling;
  for (auto& slot : slots_) {
    if (!slot) continue;
    (slot->decoding() ? decoding : prefilling).push_back(slot.get());
  }
  if (decoding.empty() && prefilling.empty()) return false;
  int prompt_rows = 0;
  for (Sequence* s : prefilling)
    prompt_rows += std::min(options_.prefill_chunk - prompt_rows, static_cast<int>(s->prompt.size()) - s->n_prefilled);

  const double draft_ms = Propose(decoding, prompt_rows);
  PlanVerification(decoding, prompt_rows);
  DSPARK_ASSIGN_OR_RETURN(const Pass pass, RunPass(decoding, prefilling, draft_ms));
  CommitPrompts(prefilling, pass, static_cast<int>(decoding.size() + prefilling.size()));
  DSPARK_ASSIGN_OR_RETURN(const int committed, VerifyAndCommit(decoding, pass));
  DSPARK_LOG_DEBUG("engine step: committed {} tokens in {:.2f} ms", committed, MsSince(step_start));
  return true;
}

// Cancellations first, so a cancelled request never occupies another pass.
void BatchEngine::ApplyCancellations() {
  std::vector<int64_t> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled.swap(cancelled_);
    for (int64_t id : cancelled) {
      auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& q) { return q->id == id; });
      if (it == queue_.end()) continue;
      std::unique_ptr<Sequence> s = std::move(*it);
      queue_.erase(it);
      s->result.stop_reason = "cancelled";
      if (s->on_done) s->on_done(std::move(s->result));
    }
  }
  for (auto& slot : slots_)
    if (slot && std::find(cancelled.begin(), cancelled.end(), slot->id) != cancelled.end()) Finish(*slot, "cancelled");
}

// Propose: the planner says what to ask each decoding sequence's drafter for; every drafting
// sequence goes to the drafter in one call (a block drafter runs them all in one pass), and each
// is charged an equal share of its time. Returns the drafting time.
double BatchEngine::Propose(const std::vector<Sequence*>& decoding, int prompt_rows) {
  std::vector<PlanSequence> plan(decoding.size());
  for (size_t i = 0; i < decoding.size(); ++i) {
    Sequence& s = *decoding[i];
    s.draft = Draft();
    s.k = 0;
    s.draft_ms = 0;
    s.asked_drafter = false;
    plan[i] = {s.slot, s.use_drafter, cache_.n_ctx() - cache_.Length(s.slot) - 1,
               s.options.max_new_tokens - static_cast<int>(s.result.stats.generated_tokens), s.rows_behind};
  }
  if (drafter_ == nullptr) return 0.0;
  const std::vector<DraftAsk> asks = planner_->Ask(plan, prompt_rows);
  std::vector<ProposeRequest> requests;
  std::vector<Sequence*> requester;
  for (size_t i = 0; i < decoding.size(); ++i) {
    if (asks[i].budget <= 0) continue;
    Sequence& s = *decoding[i];
    s.asked_drafter = true;
    s.behind_at_draft = s.rows_behind;
    ProposeRequest r;
    r.seq = s.slot;
    r.context = s.context;
    r.params.budget = asks[i].budget;
    r.params.sampling = s.options.sampling;
    r.params.stop = asks[i].stop;
    r.params.max_catch_up = asks[i].max_catch_up;
    // Leaf rows would need their own logit adjustments and grammar states: such requests verify
    // chains.
    if (!s.grammar && !s.options.sampling.adjusts_logits()) {
      r.params.branches = asks[i].branches;
      r.params.branch_tail = asks[i].branch_tail;
    }
    r.params.position = s.result.stats.generated_tokens;
    if (s.grammar) {
      s.draft_grammar = std::make_unique<DraftGrammar>(GrammarVocab{tokenizer_, token_bytes_, Masker()},
                                                       *s.options.grammar, *s.grammar);
      r.params.constraint = s.draft_grammar.get();
    }
    r.rng = &s.draft_rng;
    requests.push_back(r);
    requester.push_back(&s);
  }
  if (requests.empty()) return 0.0;
  const auto td = Clock::now();
  std::vector<Result<Draft>> proposed = drafter_->ProposeBatch(requests);
  const double ms = MsSince(td);
  for (size_t j = 0; j < requests.size(); ++j) {
    Sequence& s = *requester[j];
    s.draft_ms = ms / static_cast<double>(requests.size());
    s.result.stats.draft_ms += s.draft_ms;
    if (!proposed[j].ok()) {
      FailDrafter(s, proposed[j].status());
      continue;
    }
    s.draft = std::move(*proposed[j]);
    s.result.stats.num_draft_calls += s.draft.forward_passes;
    ConstrainDraft(s);
  }
  return ms;
}

// Plan: how many tokens of each draft the target verifies (the planner alone decides).
void BatchEngine::PlanVerification(const std::vector<Sequence*>& decoding, int prompt_rows) {
  if (drafter_ == nullptr) return;
  std::vector<PlanSequence> plan(decoding.size());
  std::vector<Draft*> drafts(decoding.size(), nullptr);
  for (size_t i = 0; i < decoding.size(); ++i) {
    Sequence& s = *decoding[i];
    plan[i].slot = s.slot;
    if (s.asked_drafter && s.use_drafter) drafts[i] = &s.draft;
  }
  const std::vector<int> k = planner_->Plan(plan, drafts, prompt_rows);
  for (size_t i = 0; i < decoding.size(); ++i) decoding[i]->k = k[i];
}

// Forward: one target pass holding every decoding sequence's anchor and planned draft tokens, then
// chunks of newcomers' prompts.
Result<BatchEngine::Pass> BatchEngine::RunPass(const std::vector<Sequence*>& decoding,
                                               const std::vector<Sequence*>& prefilling, double draft_ms) {
  Pass pass;
  Batch batch;
  bool trees = false;
  for (Sequence* s : decoding) {
    s->row0 = batch.size();
    const int n_past = cache_.Length(s->slot);
    s->tree = LayoutTree(s->draft, s->k);
    batch.Add(s->context.back(), n_past, s->slot, true);
    for (int j = 0; j < s->k; ++j) batch.Add(s->draft.tokens[j], n_past + 1 + j, s->slot, true);
    for (const TreeLeaf& leaf : s->tree.leaves) {
      const int pos = n_past + s->tree.Depth(leaf.row);  // the alternative's; its tail follows it
      batch.Add(leaf.token, pos, s->slot, true);
      for (size_t j = 0; j < leaf.tail.size(); ++j) batch.Add(leaf.tail[j], pos + 1 + static_cast<int>(j), s->slot, true);
    }
    s->n_rows = batch.size() - s->row0;
    trees = trees || !s->tree.leaves.empty();
  }
  int prefill_budget = options_.prefill_chunk;
  for (Sequence* s : prefilling) {
    s->row0 = batch.size();
    const int n = std::min(prefill_budget, static_cast<int>(s->prompt.size()) - s->n_prefilled);
    for (int j = 0; j < n; ++j) {
      const int pos = s->n_prefilled + j;
      batch.Add(s->prompt[pos], pos, s->slot, pos + 1 == static_cast<int>(s->prompt.size()));
    }
    s->n_rows = n;
    prefill_budget -= n;
  }
  if (trees) {
    // A leaf sees its ancestors only; every other row of the pass stays causal within its sequence
    // (the model never lets rows of different sequences see each other).
    const size_t n = static_cast<size_t>(batch.size());
    batch.mask.assign(n * n, 0);
    for (const Sequence* s : decoding)
      for (int r = 0; r < s->n_rows; ++r)
        for (int c = 0; c < s->n_rows; ++c) batch.mask[(s->row0 + r) * n + s->row0 + c] = s->tree.Sees(r, c);
    for (const Sequence* s : prefilling)
      for (int r = 0; r < s->n_rows; ++r) std::fill_n(batch.mask.begin() + (s->row0 + r) * n + s->row0, r + 1, 1);
  }
  ForwardOptions fwd;
  fwd.tap_layers = tap_layers_;
  const auto tv = Clock::now();
  DSPARK_ASSIGN_OR_RETURN(pass.out, target_.Forward(batch, cache_, pool_, fwd));
  pass.ms = MsSince(tv);
  // Verification-only passes teach the cost model what rows cost at this depth and load (prefill
  // rows skip the LM head and would skew it).
  if (prefilling.empty() || prefill_budget == options_.prefill_chunk) cost_.Observe(batch.size(), pass.ms);

  DSPARK_LOG_DEBUG("engine step: {} decoding ({} drafting, {} draft rows), {} prompt rows, pass {} rows {:.2f} ms "
                   "(model {:.2f}), drafting {:.2f} ms",
                   decoding.size(),
                   std::count_if(decoding.begin(), decoding.end(), [](const Sequence* s) { return s->k > 0; }),
                   batch.size() - static_cast<int>(decoding.size()) - (options_.prefill_chunk - prefill_budget),
                   options_.prefill_chunk - prefill_budget, batch.size(), pass.ms,
                   cost_.empty() ? 0.0 : cost_.VerifyMs(batch.size()), draft_ms);

  // Logits rows come out in batch order; map batch row -> logits row.
  pass.logit_index.assign(batch.size(), -1);
  for (size_t j = 0; j < pass.out.logit_rows.size(); ++j) pass.logit_index[pass.out.logit_rows[j]] = static_cast<int>(j);
  return pass;
}

TapRows BatchEngine::Taps(const Pass& pass, const Sequence& s, int pos0, int n_rows, const VerifyResult* path) {
  TapRows rows;
  rows.pos0 = pos0;
  rows.n_rows = n_rows;
  rows.n_embd = target_.config().n_embd;
  const size_t e = static_cast<size_t>(rows.n_embd);
  if (path == nullptr || path->leaf_row < 0) {
    for (const auto& t : pass.out.taps) rows.taps.push_back(t.data() + s.row0 * e);
    return rows;
  }
  // An accepted alternative: the committed rows are the anchor and the chain's accepted tokens,
  // then the alternative's row and its accepted tail's (contiguous after it).
  const int chain_rows = 1 + path->chain_accepted();
  const int branch_rows = n_rows - chain_rows;
  tap_path_.resize(pass.out.taps.size());
  for (size_t i = 0; i < pass.out.taps.size(); ++i) {
    const float* t = pass.out.taps[i].data() + s.row0 * e;
    tap_path_[i].assign(t, t + chain_rows * e);
    tap_path_[i].insert(tap_path_[i].end(), t + path->leaf_row * e, t + (path->leaf_row + branch_rows) * e);
    rows.taps.push_back(tap_path_[i].data());
  }
  return rows;
}

// Prompt bookkeeping; a finished prompt samples its first token, and the drafter ingests it.
void BatchEngine::CommitPrompts(const std::vector<Sequence*>& prefilling, const Pass& pass, int n_sequences) {
  const int n_vocab = target_.config().n_vocab;
  for (Sequence* s : prefilling) {
    if (s->n_rows == 0) continue;
    SpecStats& st = s->result.stats;
    st.prompt_ms += pass.ms;
    ++st.num_target_calls;
    if (s->use_drafter && !tap_layers_.empty()) {
      Status ts = drafter_->ObserveTaps(s->slot, Taps(pass, *s, s->n_prefilled, s->n_rows));
      if (!ts.ok()) FailDrafter(*s, ts);
    }
    s->n_prefilled += s->n_rows;
    if (!s->decoding()) continue;
    const auto ts0 = Clock::now();
    const float* logits =
        AdjustedRows(*s, pass.out.Logits(pass.logit_index[s->row0 + s->n_rows - 1], n_vocab), 1, nullptr);
    if (s->grammar_dead) {
      s->result.error = "grammar: no token of the vocabulary can continue the constrained text";
      Finish(*s, "error");
      continue;
    }
    const int32_t first = SampleAt(*s, logits);
    st.sample_ms += MsSince(ts0);
    s->context.push_back(first);
    // The drafter's own prompt ingestion is prompt processing, as the target's prefill is. Under a
    // load at which drafting does not pay it is skipped: the drafter catches up by itself if the
    // sequence ever drafts, and a busy server does not pay for ingestion it never uses.
    if (s->use_drafter && planner_->DraftingPays(n_sequences)) {
      const auto tp = Clock::now();
      Status ps = drafter_->Prefill(s->slot, s->context);
      st.prompt_ms += MsSince(tp);
      if (!ps.ok()) FailDrafter(*s, ps);
    } else {
      s->rows_behind = static_cast<int>(s->prompt.size());
    }
    s->decode_start = Clock::now();
    if (!Emit(*s, first, TokenSource::kTarget, logits)) Finish(*s, s->stop_reason);
  }
}

// Verify every decoding sequence against its rows' logits, keep what survived, emit it, and tell
// the planner. Returns the tokens committed.
Result<int> BatchEngine::VerifyAndCommit(const std::vector<Sequence*>& decoding, const Pass& pass) {
  const int n_vocab = target_.config().n_vocab;
  int committed = 0;
  for (Sequence* s : decoding) {
    SpecStats& st = s->result.stats;
    st.verify_ms += pass.ms;
    ++st.num_target_calls;
    const int n_past = cache_.Length(s->slot) - s->n_rows;
    const auto ts0 = Clock::now();
    const float* rows = AdjustedRows(*s, pass.out.Logits(pass.logit_index[s->row0], n_vocab), s->k + 1,
                                     s->draft.tokens.data());
    if (s->grammar_dead) {
      s->result.error = "grammar: no token of the vocabulary can continue the constrained text";
      DSPARK_TRY(cache_.Truncate(s->slot, n_past));
      Finish(*s, "error");
      continue;
    }
    const VerifyResult vr =
        s->options.sampling.keyed
            ? VerifyKeyed(s->draft, s->k, rows, n_vocab, s->options.sampling, s->result.stats.generated_tokens)
            : options_.verify(s->draft, s->k, rows, n_vocab, s->options.sampling, s->rng);
    st.sample_ms += MsSince(ts0);
    // The chain's own accepted tokens, and the rank of a leaf accepted beside the next one.
    const int chain_accepted = vr.chain_accepted();
    const auto [reached_first, reached_end] = s->tree.LeavesAt(chain_accepted);  // beside the rejected token
    int leaf_rank = -1, tail_verified = 0;
    for (int a = reached_first; a < reached_end; ++a)
      if (s->tree.leaves[a].row == vr.leaf_row) {
        leaf_rank = a - reached_first;
        tail_verified = static_cast<int>(s->tree.leaves[a].tail.size());
      }
    if (planner_ != nullptr) {
      // The survival the plan predicted for this draft, so the statistics show how well it predicts.
      st.RecordStep(s->k, chain_accepted, planner_->PredictedSurvival(s->slot, s->draft, s->k));
      planner_->Observe(s->slot, s->draft, s->k, chain_accepted, s->draft_ms, s->behind_at_draft, leaf_rank,
                        tail_verified, vr.tail_accepted);
    } else {
      st.RecordStep(s->k, chain_accepted, {});
    }
    st.RecordLeaves(static_cast<int>(s->tree.leaves.size()), reached_end - reached_first, chain_accepted,
                    vr.leaf_row >= 0, s->tree.tail_rows(), vr.tail_accepted);
    // A proposal (even one that came to nothing) brought the drafter up to date.
    s->rows_behind = s->asked_drafter ? 0 : s->rows_behind + static_cast<int>(vr.tokens.size());
    // Keep the anchor and the accepted draft tokens (an accepted alternative's cells, and its
    // tail's, close up behind the chain's); drop the rejected rows. Each cell moves to a lower one
    // that no later move reads.
    for (int j = chain_accepted; j < vr.num_accepted; ++j)
      DSPARK_TRY(cache_.MoveCell(s->slot, n_past + vr.Row(j), n_past + 1 + j));
    DSPARK_TRY(cache_.Truncate(s->slot, n_past + 1 + vr.num_accepted));
    if (s->use_drafter && !tap_layers_.empty()) {
      Status ts = drafter_->ObserveTaps(s->slot, Taps(pass, *s, n_past, 1 + vr.num_accepted, &vr));
      if (!ts.ok()) FailDrafter(*s, ts);
    }
    bool running = true;
    committed += static_cast<int>(vr.tokens.size());
    for (size_t j = 0; j < vr.tokens.size() && running; ++j) {
      s->context.push_back(vr.tokens[j]);
      const bool accepted = static_cast<int>(j) < vr.num_accepted;
      // An accepted draft token's grammar state is known from checking the draft.
      grammar::GrammarState* known = accepted && s->grammar ? &s->draft_states[j + 1] : nullptr;
      running = Emit(*s, vr.tokens[j], accepted ? TokenSource::kDraft : TokenSource::kTarget,
                     rows + vr.SourceRow(static_cast<int>(j)) * static_cast<size_t>(n_vocab), known);
    }
    if (running && cache_.Length(s->slot) >= cache_.n_ctx()) {
      s->stop_reason = "context";
      running = false;
    }
    if (!running) Finish(*s, s->stop_reason);
  }
  return committed;
}

}  // namespace dspark
