#include "spec/engine.h"

#include <algorithm>
#include <chrono>

#include "spec/stop_strings.h"
#include "spec/verifier.h"
#include "util/log.h"

namespace dspark {

namespace {

using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

TapRows MakeTapRows(const ForwardOutput& out, int pos0, int n_rows, int n_embd) {
  TapRows rows;
  rows.pos0 = pos0;
  rows.n_rows = n_rows;
  rows.n_embd = n_embd;
  for (const auto& t : out.taps) rows.taps.push_back(t.data());
  return rows;
}

}  // namespace

Status CheckPromptFits(int prompt_tokens, int n_ctx) {
  if (prompt_tokens == 0) return InvalidArgument("prompt is empty (no tokens after tokenisation)");
  if (prompt_tokens >= n_ctx)
    return OutOfRange("prompt has {} tokens but the context holds {}; shorten it or raise --ctx-size",
                      prompt_tokens, n_ctx);
  return Status::Ok();
}

Result<std::vector<float>> Prefill(Model& model, KvCache& cache, ThreadPool& pool, int seq,
                                   const std::vector<int32_t>& ids, int start_pos, int chunk, const ForwardOptions& fwd,
                                   const std::function<Status(int, const ForwardOutput&)>& on_chunk) {
  if (chunk < 1) chunk = 1;
  std::vector<float> last;
  const int n = static_cast<int>(ids.size());
  for (int b = 0; b < n; b += chunk) {
    const int e = std::min(n, b + chunk);
    Batch batch;
    for (int i = b; i < e; ++i) batch.Add(ids[i], start_pos + i, seq, i == n - 1);
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(batch, cache, pool, fwd));
    if (on_chunk) DSPARK_TRY(on_chunk(start_pos + b, out));
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
  Batch warm;
  for (int i = 0; i < prefix; ++i) warm.Add(token(i), base + i, seq, false);
  if (prefix > 0) DSPARK_TRY(model.Forward(warm, cache, pool).status());
  std::vector<double> ms(max_rows);
  for (int rows = 1; rows <= max_rows; ++rows) {
    double best = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      Batch b;
      for (int i = 0; i < rows; ++i) b.Add(token(prefix + i), base + prefix + i, seq, true);
      const auto t0 = Clock::now();
      DSPARK_TRY(model.Forward(b, cache, pool).status());
      best = std::min(best, MsSince(t0));
      DSPARK_TRY(cache.Truncate(seq, base + prefix));
    }
    ms[rows - 1] = best;
  }
  // Costs are monotone in reality; enforce it so noise cannot make longer drafts look free.
  for (int i = 1; i < max_rows; ++i) ms[i] = std::max(ms[i], ms[i - 1]);
  DSPARK_TRY(cache.Truncate(seq, base));
  return CostModel(std::move(ms));
}

SpeculativeEngine::SpeculativeEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, int n_ctx,
                                     Drafter* drafter, ScheduleOptions schedule)
    : target_(target), tokenizer_(tokenizer), pool_(pool), cache_(target.config(), 1, n_ctx), drafter_(drafter),
      schedule_(schedule) {}

const CostModel& SpeculativeEngine::cost_model() {
  if (cost_.empty()) {
    cache_.Clear(0);
    auto c = ProfileVerifyCost(target_, cache_, pool_, 0, std::max(2, schedule_.n_max + 1));
    if (c.ok()) cost_ = std::move(*c);
    else DSPARK_LOG_WARN("spec: verify-cost profiling failed: {}", c.status().message());
  }
  return cost_;
}

Result<GenerateResult> SpeculativeEngine::Generate(std::string_view prompt, const GenerateOptions& options,
                                                   const TokenCallback& on_token) {
  EncodeOptions eo;
  eo.add_bos = options.add_bos;
  eo.add_eos = false;
  eo.parse_special = options.parse_special;
  return GenerateFromIds(tokenizer_.Encode(prompt, eo), options, on_token);
}

Result<GenerateResult> SpeculativeEngine::GenerateFromIds(const std::vector<int32_t>& prompt_ids,
                                                          const GenerateOptions& options,
                                                          const TokenCallback& on_token) {
  DSPARK_TRY(ValidateSamplingParams(options.sampling));
  if (options.max_new_tokens < 1) return InvalidArgument("max_new_tokens must be >= 1, got {}", options.max_new_tokens);
  const int n_prompt = static_cast<int>(prompt_ids.size());
  DSPARK_TRY(CheckPromptFits(n_prompt, cache_.n_ctx()));
  const ModelConfig& cfg = target_.config();
  const int n_vocab = cfg.n_vocab;
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= n_vocab) return InvalidArgument("prompt token id {} is outside the vocabulary [0, {})", id, n_vocab);

  Drafter* drafter = drafter_;
  ForwardOptions fwd;
  if (drafter != nullptr) fwd.tap_layers = drafter->Needs().target_tap_layers;
  CostModel cost = schedule_.adaptive && drafter != nullptr ? cost_model() : CostModel();
  DraftScheduler scheduler(schedule_, cost);

  GenerateResult result;
  SpecStats& st = result.stats;
  st.prompt_tokens = n_prompt;
  cache_.Clear(0);
  auto fail_drafter = [&](const Status& s) {
    DSPARK_LOG_WARN("spec: drafter '{}' failed, continuing with plain decoding: {}", drafter->Name(), s.message());
    ++st.num_fallbacks;
    drafter = nullptr;
  };
  if (drafter != nullptr) {
    Status s = drafter->Begin(0);
    if (!s.ok()) fail_drafter(s);
  }

  auto t0 = Clock::now();
  auto on_chunk = [&](int pos0, const ForwardOutput& out) -> Status {
    ++st.num_target_calls;
    if (drafter != nullptr && !fwd.tap_layers.empty()) {
      const int rows = static_cast<int>(out.taps.empty() ? 0 : out.taps[0].size() / cfg.n_embd);
      Status s = drafter->ObserveTaps(0, MakeTapRows(out, pos0, rows, cfg.n_embd));
      if (!s.ok()) fail_drafter(s);
    }
    return Status::Ok();
  };
  DSPARK_ASSIGN_OR_RETURN(std::vector<float> logits,
                          Prefill(target_, cache_, pool_, 0, prompt_ids, 0, options.prefill_chunk, fwd, on_chunk));
  st.prompt_ms = MsSince(t0);

  const auto decode_start = Clock::now();
  Rng rng(options.sampling.seed);
  Rng draft_rng(options.sampling.seed ^ 0x5eedd12af7ull);
  StreamingDetokenizer detok(tokenizer_);
  StopStringMatcher stops(options.stop);
  std::vector<int32_t> context = prompt_ids;  // every token so far; the last is the pending anchor
  std::string stop_reason;

  // Commits one token to the output; returns false when generation must end.
  auto emit = [&](int32_t id, TokenSource source) -> bool {
    if (!options.ignore_eos && tokenizer_.IsEog(id)) {
      stop_reason = "eos";
      return false;
    }
    result.ids.push_back(id);
    ++st.generated_tokens;
    const std::string shown = stops.Push(detok.Push(id));
    result.text += shown;
    if (on_token && !on_token(id, shown, source)) {
      stop_reason = "cancelled";
      return false;
    }
    if (stops.stopped()) {
      stop_reason = "stop";
      return false;
    }
    if (st.generated_tokens >= options.max_new_tokens) {
      stop_reason = "length";
      return false;
    }
    return true;
  };

  bool running = true;
  {
    const auto ts = Clock::now();
    std::vector<float> scratch;
    const int32_t first = SampleToken(logits.data(), n_vocab, options.sampling, rng, &scratch);
    st.sample_ms += MsSince(ts);
    context.push_back(first);
    running = emit(first, TokenSource::kTarget);
  }

  while (running) {
    const int n_past = cache_.Length(0);  // the anchor context.back() sits at position n_past
    const int room = cache_.n_ctx() - n_past - 1;
    if (room < 0) {
      stop_reason = "context";
      break;
    }
    // Draft.
    Draft draft;
    int k = 0;
    double draft_ms = 0;
    if (drafter != nullptr) {
      const int remaining = options.max_new_tokens - static_cast<int>(st.generated_tokens);
      const int budget = std::min(scheduler.Budget(room), remaining);
      if (budget > 0) {
        const auto td = Clock::now();
        DraftParams dp;
        dp.budget = budget;
        dp.sampling = options.sampling;
        dp.p_min = schedule_.p_min;
        auto proposed = drafter->Propose(0, context, dp, draft_rng);
        draft_ms = MsSince(td);
        st.draft_ms += draft_ms;
        if (!proposed.ok()) {
          fail_drafter(proposed.status());
        } else {
          draft = std::move(*proposed);
          st.num_draft_calls += draft.forward_passes;
          if (static_cast<int>(draft.tokens.size()) > budget) draft.tokens.resize(budget);
          k = scheduler.Cut(draft);
        }
      }
    }
    // Verify: the anchor and k draft tokens in one target pass.
    Batch batch;
    batch.Add(context.back(), n_past, 0, true);
    for (int i = 0; i < k; ++i) batch.Add(draft.tokens[i], n_past + 1 + i, 0, true);
    const auto tv = Clock::now();
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, target_.Forward(batch, cache_, pool_, fwd));
    st.verify_ms += MsSince(tv);
    ++st.num_target_calls;

    const auto ts = Clock::now();
    const VerifyResult vr = Verify(draft, k, out.logits.data(), n_vocab, options.sampling, rng);
    st.sample_ms += MsSince(ts);
    st.RecordStep(k, vr.num_accepted, draft.survival);
    if (k > 0) scheduler.Observe(k, vr.num_accepted, draft_ms);

    // Keep the anchor and the accepted draft tokens in the cache; drop the rejected rows.
    DSPARK_TRY(cache_.Truncate(0, n_past + 1 + vr.num_accepted));
    if (drafter != nullptr && !fwd.tap_layers.empty()) {
      Status s = drafter->ObserveTaps(0, MakeTapRows(out, n_past, 1 + vr.num_accepted, cfg.n_embd));
      if (!s.ok()) fail_drafter(s);
    }
    for (size_t i = 0; i < vr.tokens.size() && running; ++i) {
      context.push_back(vr.tokens[i]);
      running = emit(vr.tokens[i], static_cast<int>(i) < vr.num_accepted ? TokenSource::kDraft : TokenSource::kTarget);
    }
  }

  if (stop_reason != "stop" && stop_reason != "cancelled") {
    std::string tail = stops.Push(detok.Flush());
    tail += stops.Flush();
    result.text += tail;
    if (on_token && !tail.empty()) on_token(-1, tail, TokenSource::kTarget);
  }
  if (drafter != nullptr) drafter->End(0);
  result.stop_reason = stop_reason;
  st.decode_ms = MsSince(decode_start);
  st.other_ms = std::max(0.0, st.decode_ms - st.draft_ms - st.verify_ms - st.sample_ms);
  cumulative_.Merge(st);
  return result;
}

}  // namespace dspark
