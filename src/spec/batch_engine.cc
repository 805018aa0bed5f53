#include "spec/batch_engine.h"

#include <algorithm>
#include <chrono>

#include "spec/verifier.h"
#include "util/log.h"

namespace dspark {

namespace {
using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
// Row counts at which the cost of a target pass is measured; others are interpolated.
constexpr int kCostGrid[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128};
// Warm-up before profiling (single-row passes, whichever limit comes first) and rounds over the grid.
constexpr int kCostWarmPasses = 16;
constexpr double kCostWarmMs = 200.0;
constexpr int kCostRounds = 3;
// Context rows a probe's drafter reads before drafting (DraftParams::max_catch_up): enough for the
// next two tokens' local context, a fraction of the rows since the last probe.
constexpr int kProbeCatchUpRows = 32;
}  // namespace

struct BatchEngine::Sequence {
  int64_t id = 0;
  int slot = -1;
  std::vector<int32_t> prompt;
  GenerateOptions options;
  TokenCallback on_token;
  DoneCallback on_done;

  int n_prefilled = 0;          // prompt tokens already in the target cache
  std::vector<int32_t> context; // prompt + generated; the last one is the pending anchor
  Rng rng{0}, draft_rng{0};
  std::unique_ptr<StreamingDetokenizer> detok;
  std::unique_ptr<StopStringMatcher> stops;
  std::unique_ptr<DraftScheduler> scheduler;
  bool use_drafter = false;
  GenerateResult result;
  std::string stop_reason;      // set when finished
  Clock::time_point decode_start;

  // Rows committed while the sequence did not draft (and prompt rows the drafter did not ingest):
  // its next proposal first catches up on them. 0 when it drafted the step before.
  int rows_behind = 0;

  // Per-step scratch.
  Draft draft;
  int k = 0;
  bool asked_drafter = false;   // a draft was asked for this step
  int behind_at_draft = 0;      // rows_behind when it was
  int row0 = 0;                 // first batch row of this sequence in the current pass
  int n_rows = 0;
  double draft_ms = 0;

  bool decoding() const { return n_prefilled == static_cast<int>(prompt.size()); }
};

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

Result<CostModel> ProfileVerifyCost(Model& model, KvCache& cache, ThreadPool& pool, int seq, int max_rows) {
  const int base = cache.Length(seq);
  const int prefix = std::min(32, cache.n_ctx() - base - max_rows);
  if (prefix < 0) return OutOfRange("profiling: no room in the context for {} rows", max_rows);
  const int n_vocab = model.config().n_vocab;
  auto token = [&](int i) { return static_cast<int32_t>((i * 7919 + 1) % n_vocab); };
  if (prefix > 0) {
    Batch warm;
    for (int i = 0; i < prefix; ++i) warm.Add(token(i), base + i, seq, false);
    DSPARK_TRY(model.Forward(warm, cache, pool).status());
  }
  auto pass_ms = [&](int rows) -> Result<double> {
    Batch b;
    for (int i = 0; i < rows; ++i) b.Add(token(prefix + i), base + prefix + i, seq, true);
    const auto t0 = Clock::now();
    DSPARK_TRY(model.Forward(b, cache, pool).status());
    const double ms = MsSince(t0);
    DSPARK_TRY(cache.Truncate(seq, base + prefix));
    return ms;
  };
  // The first passes after loading run up to twice as slow as later ones (bundled target: 0.7-0.9
  // ms against 0.35-0.45 from about the 20th pass on). Profiled cold, the one-row point came out
  // as high as four rows, the monotone clamp below flattened the whole curve, and the scheduler
  // saw verification rows as free and plain decoding as twice its cost: DSpark drafted every step
  // at 0.72-0.85x plain. So: single-row passes first (16, or 200 ms on a big model), then rounds
  // over the whole grid, each row count keeping its fastest pass, so drift hits every count alike.
  const auto warm_start = Clock::now();
  for (int i = 0; i < kCostWarmPasses && MsSince(warm_start) < kCostWarmMs; ++i) DSPARK_TRY(pass_ms(1).status());
  std::vector<std::pair<int, double>> points;
  for (int rows : kCostGrid)
    if (rows <= max_rows) points.emplace_back(rows, 1e300);
  for (int round = 0; round < kCostRounds; ++round)
    for (auto& [rows, best] : points) {
      DSPARK_ASSIGN_OR_RETURN(const double ms, pass_ms(rows));
      best = std::min(best, ms);
    }
  // Costs are monotone in reality; enforce it so noise cannot make more rows look free.
  for (size_t i = 1; i < points.size(); ++i) points[i].second = std::max(points[i].second, points[i - 1].second);
  DSPARK_TRY(cache.Truncate(seq, base));
  return CostModel(std::move(points));
}

BatchEngine::BatchEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, BatchEngineOptions options,
                         Drafter* drafter)
    : target_(target), tokenizer_(tokenizer), pool_(pool), options_(options), drafter_(drafter),
      cache_(target.config(), std::max(1, options.n_parallel), options.n_ctx, options.kv_type) {
  options_.n_parallel = std::max(1, options_.n_parallel);
  options_.prefill_chunk = std::max(1, options_.prefill_chunk);
  if (drafter_ != nullptr) {
    const DrafterNeeds needs = drafter_->Needs();
    tap_layers_ = needs.target_tap_layers;
    options_.schedule.survival_stop = needs.stops_on_survival;
  }
  slots_.resize(options_.n_parallel);
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
  for (int slot = 0; slot < options_.n_parallel && !queue_.empty(); ++slot) {
    if (slots_[slot] != nullptr) continue;
    std::unique_ptr<Sequence> s = std::move(queue_.front());
    queue_.pop_front();
    s->slot = slot;
    cache_.Clear(slot);
    s->context = s->prompt;
    s->rng = Rng(s->options.sampling.seed);
    s->draft_rng = Rng(s->options.sampling.seed ^ 0x5eedd12af7ull);
    s->detok = std::make_unique<StreamingDetokenizer>(tokenizer_);
    s->stops = std::make_unique<StopStringMatcher>(s->options.stop);
    if (!learned_) learned_ = std::make_unique<DraftScheduler>(options_.schedule, &cost_);
    s->scheduler = std::make_unique<DraftScheduler>(learned_->Seed());
    s->result.stats.prompt_tokens = static_cast<int64_t>(s->prompt.size());
    s->use_drafter = drafter_ != nullptr && s->options.speculate;
    if (s->use_drafter) {
      Status st = drafter_->Begin(slot);
      if (!st.ok()) FailDrafter(*s, st);
    }
    slots_[slot] = std::move(s);
    running_.fetch_add(1);
  }
}

bool BatchEngine::Emit(Sequence& s, int32_t id, TokenSource source) {
  if (!s.options.ignore_eos && tokenizer_.IsEog(id)) {
    s.stop_reason = "eos";
    return false;
  }
  s.result.ids.push_back(id);
  ++s.result.stats.generated_tokens;
  const std::string shown = s.stops->Push(s.detok->Push(id));
  s.result.text += shown;
  if (s.on_token && !s.on_token(id, shown, source)) {
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
  if (s.stop_reason != "stop" && s.stop_reason != "cancelled" && s.detok) {
    std::string tail = s.stops->Push(s.detok->Flush());
    tail += s.stops->Flush();
    s.result.text += tail;
    if (s.on_token && !tail.empty()) s.on_token(-1, tail, TokenSource::kTarget);
  }
  if (drafter_ != nullptr && s.use_drafter) drafter_->End(s.slot);
  SpecStats& st = s.result.stats;
  if (s.decode_start != Clock::time_point{}) st.decode_ms = MsSince(s.decode_start);
  st.other_ms = std::max(0.0, st.decode_ms - st.draft_ms - st.verify_ms - st.sample_ms);
  s.result.stop_reason = s.stop_reason;
  cumulative_.Merge(st);
  cache_.Clear(s.slot);
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

Result<bool> BatchEngine::Step() {
  const auto step_start = Clock::now();
  int committed = 0;
  // Cancellations first, so a cancelled request never occupies another pass.
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
  Admit();

  std::vector<Sequence*> decoding, prefilling;
  for (auto& slot : slots_) {
    if (!slot) continue;
    (slot->decoding() ? decoding : prefilling).push_back(slot.get());
  }
  if (decoding.empty() && prefilling.empty()) return false;
  const ModelConfig& cfg = target_.config();
  const int n_vocab = cfg.n_vocab;

  // 1. Draft for every decoding sequence. A sequence's draft competes with the rest of the pass:
  // the other sequences' anchors and this step's prompt rows are in it anyway, so drafting must
  // beat the rate of that pass, not of a lone decode step (under load it rarely does, and the
  // engine falls back to plain decoding by itself).
  std::vector<std::vector<double>> survival(decoding.size());
  const bool batch_scheduling = options_.schedule.adaptive && drafter_ != nullptr;
  int prompt_rows = 0;
  for (Sequence* s : prefilling)
    prompt_rows += std::min(options_.prefill_chunk - prompt_rows, static_cast<int>(s->prompt.size()) - s->n_prefilled);
  // Decoding rows and committed tokens the pass holds so far: every anchor, plus the drafts of the
  // sequences already decided (so that not every sequence decides as if it drafted alone). Prompt
  // rows share the pass but commit nothing now (SharedPass).
  int decode_rows = static_cast<int>(decoding.size());
  double decode_tokens = static_cast<double>(decoding.size());
  std::vector<ProposeRequest> requests;
  std::vector<size_t> requester;  // index into `decoding` of each request
  for (size_t i = 0; i < decoding.size(); ++i) {
    Sequence& s = *decoding[i];
    s.draft = Draft();
    s.k = 0;
    s.draft_ms = 0;
    s.asked_drafter = false;
    const int room = cache_.n_ctx() - cache_.Length(s.slot) - 1;
    if (!s.use_drafter || room <= 0) continue;
    const int remaining = s.options.max_new_tokens - static_cast<int>(s.result.stats.generated_tokens);
    const SharedPass shared{decode_rows - 1, decode_tokens - 1, prompt_rows};
    const int budget = std::min(s.scheduler->Budget(room, shared, s.rows_behind), remaining);
    if (budget <= 0) continue;
    // The rest of the pass counts on the length expected on average (a drafter that stops on
    // survival is asked for more, and usually stops sooner).
    const int planned = std::clamp(s.scheduler->planned(), 1, budget);
    decode_rows += planned;
    for (double a : s.scheduler->MeasuredSurvival(planned)) decode_tokens += a;
    s.asked_drafter = true;
    s.behind_at_draft = s.rows_behind;
    ProposeRequest r;
    r.seq = s.slot;
    r.context = s.context;
    r.params.budget = budget;
    r.params.sampling = s.options.sampling;
    r.params.p_min = options_.schedule.p_min;
    r.params.min_survival = static_cast<float>(s.scheduler->MinSurvival(shared));
    r.params.calibration = &s.scheduler->prob_calibration();
    if (s.scheduler->probing()) r.params.max_catch_up = kProbeCatchUpRows;
    r.rng = &s.draft_rng;
    requests.push_back(r);
    requester.push_back(i);
  }
  // Every drafting sequence in one call: a block drafter runs them all in one pass. Its time is
  // shared equally (each sequence's drafting cost is its share of the batched pass).
  double step_draft_ms = 0;
  if (!requests.empty()) {
    const auto td = Clock::now();
    std::vector<Result<Draft>> proposed = drafter_->ProposeBatch(requests);
    step_draft_ms = MsSince(td);
    for (size_t j = 0; j < requests.size(); ++j) {
      Sequence& s = *decoding[requester[j]];
      s.draft_ms = step_draft_ms / static_cast<double>(requests.size());
      s.result.stats.draft_ms += s.draft_ms;
      if (!proposed[j].ok()) {
        FailDrafter(s, proposed[j].status());
        continue;
      }
      s.draft = std::move(*proposed[j]);
      s.result.stats.num_draft_calls += s.draft.forward_passes;
      const int budget = requests[j].params.budget;
      if (static_cast<int>(s.draft.tokens.size()) > budget) s.draft.tokens.resize(budget);
      s.k = s.scheduler->Cut(s.draft);
      if (batch_scheduling && !s.scheduler->probing()) {
        // Survival for batch admission: the drafter's own estimate, else measured acceptance.
        survival[requester[j]] = s.scheduler->SurvivalOf(s.draft, s.k);
      }
    }
  }
  if (batch_scheduling && !decoding.empty()) {
    const auto k = AdmitDraftSlots(survival, static_cast<int>(decoding.size()), static_cast<double>(decoding.size()),
                                   cost_, prompt_rows);
    for (size_t i = 0; i < decoding.size(); ++i) {
      // A probe is verified whole (DraftScheduler::probing); it has no survival in the admission.
      if (!decoding[i]->scheduler->probing()) decoding[i]->k = std::min(decoding[i]->k, k[i]);
      if (decoding[i]->k < options_.schedule.n_min) decoding[i]->k = 0;
    }
  }

  // 2. One target pass: anchors + drafts, then prompt chunks.
  Batch batch;
  for (Sequence* s : decoding) {
    s->row0 = batch.size();
    const int n_past = cache_.Length(s->slot);
    batch.Add(s->context.back(), n_past, s->slot, true);
    for (int j = 0; j < s->k; ++j) batch.Add(s->draft.tokens[j], n_past + 1 + j, s->slot, true);
    s->n_rows = batch.size() - s->row0;
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
  ForwardOptions fwd;
  fwd.tap_layers = tap_layers_;
  const auto tv = Clock::now();
  DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, target_.Forward(batch, cache_, pool_, fwd));
  const double pass_ms = MsSince(tv);
  // Verification-only passes teach the cost model what rows cost at this depth and load (prefill
  // rows skip the LM head and would skew it).
  if (prefilling.empty() || prefill_budget == options_.prefill_chunk) cost_.Observe(batch.size(), pass_ms);

  DSPARK_LOG_DEBUG("engine step: {} decoding ({} drafting, {} draft rows), {} prompt rows, pass {} rows {:.2f} ms "
                   "(model {:.2f}), drafting {:.2f} ms",
                   decoding.size(),
                   std::count_if(decoding.begin(), decoding.end(), [](const Sequence* s) { return s->k > 0; }),
                   batch.size() - static_cast<int>(decoding.size()) - (options_.prefill_chunk - prefill_budget),
                   options_.prefill_chunk - prefill_budget, batch.size(), pass_ms,
                   cost_.empty() ? 0.0 : cost_.VerifyMs(batch.size()), step_draft_ms);

  // Logits rows come out in batch order; map batch row -> logits row.
  std::vector<int> logit_index(batch.size(), -1);
  for (size_t j = 0; j < out.logit_rows.size(); ++j) logit_index[out.logit_rows[j]] = static_cast<int>(j);
  auto taps_for = [&](const Sequence& s, int pos0, int n_rows) {
    TapRows rows;
    rows.pos0 = pos0;
    rows.n_rows = n_rows;
    rows.n_embd = cfg.n_embd;
    for (const auto& t : out.taps) rows.taps.push_back(t.data() + static_cast<size_t>(s.row0) * cfg.n_embd);
    return rows;
  };

  // 3. Prefill bookkeeping; a finished prompt samples its first token.
  for (Sequence* s : prefilling) {
    if (s->n_rows == 0) continue;
    SpecStats& st = s->result.stats;
    st.prompt_ms += pass_ms;
    ++st.num_target_calls;
    if (s->use_drafter && !tap_layers_.empty()) {
      Status ts = drafter_->ObserveTaps(s->slot, taps_for(*s, s->n_prefilled, s->n_rows));
      if (!ts.ok()) FailDrafter(*s, ts);
    }
    s->n_prefilled += s->n_rows;
    if (!s->decoding()) continue;
    const auto ts0 = Clock::now();
    std::vector<float> scratch;
    const float* logits = out.Logits(logit_index[s->row0 + s->n_rows - 1], n_vocab);
    const int32_t first = SampleToken(logits, n_vocab, s->options.sampling, s->rng, &scratch);
    st.sample_ms += MsSince(ts0);
    s->context.push_back(first);
    // The drafter's own prompt ingestion is prompt processing, as the target's prefill is. Under a
    // load at which drafting does not pay it is skipped: the drafter catches up by itself if the
    // sequence ever drafts, and a busy server does not pay for ingestion it never uses.
    const bool drafting_pays =
        !batch_scheduling || learned_->Pays(SharedPass{static_cast<int>(decoding.size() + prefilling.size()) - 1,
                                                       static_cast<double>(decoding.size() + prefilling.size()) - 1, 0});
    if (s->use_drafter && drafting_pays) {
      const auto tp = Clock::now();
      Status ps = drafter_->Prefill(s->slot, s->context);
      st.prompt_ms += MsSince(tp);
      if (!ps.ok()) FailDrafter(*s, ps);
    } else {
      s->rows_behind = static_cast<int>(s->prompt.size());
    }
    s->decode_start = Clock::now();
    if (!Emit(*s, first, TokenSource::kTarget)) Finish(*s, s->stop_reason);
  }

  // 4. Verify every decoding sequence against its rows' logits.
  for (Sequence* s : decoding) {
    SpecStats& st = s->result.stats;
    st.verify_ms += pass_ms;
    ++st.num_target_calls;
    const int n_past = cache_.Length(s->slot) - s->n_rows;
    const auto ts0 = Clock::now();
    const VerifyResult vr = options_.verify(s->draft, s->k, out.Logits(logit_index[s->row0], n_vocab), n_vocab,
                                   s->options.sampling, s->rng);
    st.sample_ms += MsSince(ts0);
    // The survival the schedule predicted for this draft: a confidence head's own, else the
    // scheduler's estimate from the draft probabilities, so the statistics show how well it predicts.
    std::vector<float> predicted = s->draft.survival;
    if (predicted.empty() && !s->draft.probs.empty() && !s->draft.lookup)
      for (double v : s->scheduler->SurvivalOf(s->draft, s->k)) predicted.push_back(static_cast<float>(v));
    st.RecordStep(s->k, vr.num_accepted, predicted);
    const int proposed = static_cast<int>(s->draft.tokens.size());
    if (proposed > 0) {
      s->scheduler->Observe(s->draft, s->k, vr.num_accepted, s->draft_ms, s->behind_at_draft);
      learned_->Observe(s->draft, s->k, vr.num_accepted, s->draft_ms, s->behind_at_draft);
    }
    // A proposal (even one that came to nothing) brought the drafter up to date.
    s->rows_behind = s->asked_drafter ? 0 : s->rows_behind + static_cast<int>(vr.tokens.size());
    // Keep the anchor and the accepted draft tokens; drop the rejected rows.
    DSPARK_TRY(cache_.Truncate(s->slot, n_past + 1 + vr.num_accepted));
    if (s->use_drafter && !tap_layers_.empty()) {
      Status ts = drafter_->ObserveTaps(s->slot, taps_for(*s, n_past, 1 + vr.num_accepted));
      if (!ts.ok()) FailDrafter(*s, ts);
    }
    bool running = true;
    committed += static_cast<int>(vr.tokens.size());
    for (size_t j = 0; j < vr.tokens.size() && running; ++j) {
      s->context.push_back(vr.tokens[j]);
      running = Emit(*s, vr.tokens[j], static_cast<int>(j) < vr.num_accepted ? TokenSource::kDraft : TokenSource::kTarget);
    }
    if (running && cache_.Length(s->slot) >= cache_.n_ctx()) {
      s->stop_reason = "context";
      running = false;
    }
    if (!running) Finish(*s, s->stop_reason);
  }
  DSPARK_LOG_DEBUG("engine step: committed {} tokens in {:.2f} ms", committed, MsSince(step_start));
  return true;
}

}  // namespace dspark
