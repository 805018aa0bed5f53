// dspark::api::Engine: a SpeculativeEngine (speculative/engine.h) with its thread pool and the drafter
// BuildSpeculation (speculative/speculation.h) makes from the options, or the user's drafter.
#include <algorithm>
#include <exception>
#include <mutex>
#include <optional>

#include "api/drafter_adapter.h"
#include "api/internal.h"
#include "model/kv_cache.h"
#include "speculative/drafters/lookup_first.h"
#include "speculative/engine.h"
#include "speculative/speculation.h"
#include "util/dtype.h"
#include "util/thread_pool.h"

namespace dspark::api {

namespace {

[[noreturn]] void Invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

Stats ToApi(const SpecStats& s) {
  Stats o;
  o.prompt_tokens = s.prompt_tokens;
  o.generated_tokens = s.generated_tokens;
  o.steps = s.num_steps;
  o.target_calls = s.num_target_calls;
  o.draft_calls = s.num_draft_calls;
  o.drafts = s.num_drafts;
  o.drafted_tokens = s.num_draft_tokens;
  o.accepted_tokens = s.num_accepted_tokens;
  o.whole_drafts = s.num_whole_drafts;
  o.leaves = s.num_leaf_tokens;
  o.leaves_accepted = s.num_leaf_accepted;
  o.tail_tokens = s.num_tail_tokens;
  o.tail_accepted = s.num_tail_accepted;
  o.drafter_fallbacks = s.num_fallbacks;
  o.acceptance_rate = s.acceptance_rate();
  o.tau = s.tau();
  o.acceptance_per_position = s.acceptance_per_position();
  o.prompt_ms = s.prompt_ms;
  o.draft_ms = s.draft_ms;
  o.verify_ms = s.verify_ms;
  o.sample_ms = s.sample_ms;
  o.other_ms = s.other_ms;
  o.decode_ms = s.decode_ms;
  o.tokens_per_second = s.tokens_per_second();
  o.prompt_tokens_per_second = s.prompt_tokens_per_second();
  return o;
}

StopReason ToStopReason(const std::string& r) {
  if (r == "eos") return StopReason::kEos;
  if (r == "stop") return StopReason::kStopString;
  if (r == "length") return StopReason::kLength;
  if (r == "context") return StopReason::kContext;
  if (r == "cancelled") return StopReason::kCancelled;
  throw Error(ErrorCode::kInternal, "generation ended with an unknown stop reason '" + r + "'");
}

DType ParseCacheType(const std::string& name) {
  const std::optional<DType> t = DTypeFromName(name);
  if (t == DType::kF16 || t == DType::kF32 || t == DType::kQ8_0) return *t;
  Invalid("EngineOptions::cache_type: unknown KV cache type '" + name + "' (f16, f32 or q8_0)");
}

// "auto": the drafter a file is (as the Python module decides it).
std::string DraftTypeOf(const std::string& path) {
  if (path.empty()) Invalid("EngineOptions::drafter: type 'auto' needs drafter.model, the drafter's GGUF");
  return detail::Unwrap(DraftTypeOfFile(path));
}

SpeculationOptions ToSpeculation(const EngineOptions& o) {
  const ScheduleOptions& s = o.schedule;
  if (s.n_max < 1 || s.n_max > 64) Invalid("EngineOptions::schedule.n_max must be in [1, 64], got " + std::to_string(s.n_max));
  if (s.n_min < 0 || s.n_min > s.n_max)
    Invalid("EngineOptions::schedule.n_min must be in [0, n_max], got " + std::to_string(s.n_min));
  if (!(s.p_min >= 0.0f && s.p_min < 1.0f))
    Invalid("EngineOptions::schedule.p_min must be in [0, 1), got " + std::to_string(s.p_min));
  if (s.branches < 0 || s.branches > 8)
    Invalid("EngineOptions::schedule.branches must be in [0, 8], got " + std::to_string(s.branches));
  if (s.branch_tail < 0 || s.branch_tail > 16)
    Invalid("EngineOptions::schedule.branch_tail must be in [0, 16], got " + std::to_string(s.branch_tail));
  const DrafterOptions& d = o.drafter;
  if (d.ngram_min < 1 || d.ngram_max < d.ngram_min)
    Invalid("EngineOptions::drafter: n-gram lengths need 1 <= ngram_min <= ngram_max, got " +
            std::to_string(d.ngram_min) + ".." + std::to_string(d.ngram_max));
  if (d.threads < 0) Invalid("EngineOptions::drafter.threads must be >= 0");

  SpeculationOptions so;
  so.drafter.type = d.type == "auto" ? DraftTypeOf(d.model) : d.type;
  if (so.drafter.type == "synthetic")
    Invalid("EngineOptions::drafter: type 'synthetic' is for benchmarks (dspark bench), not a library engine");
  so.drafter.draft_model = d.model;
  so.drafter.ngram = NgramOptions{d.ngram_min, d.ngram_max};
  so.drafter.ngram_first = d.ngram_first;
  so.drafter.threads = d.threads;
  so.drafter.repack = d.repack;
  so.drafter.dspark_full_block = d.dspark_full_block;
  so.schedule.n_max = s.n_max;
  so.schedule.n_min = s.n_min;
  so.schedule.p_min = s.p_min;
  so.schedule.adaptive = s.adaptive;
  so.schedule.branches = s.branches;
  so.schedule.branch_tail = s.branch_tail;
  if (s.mode == "cut") so.mode = ScheduleMode::kCut;
  else if (s.mode == "cost") so.mode = ScheduleMode::kCost;
  else if (!s.mode.empty()) Invalid("EngineOptions::schedule.mode: '" + s.mode + "' is not \"\", \"cut\" or \"cost\"");
  return so;
}

::dspark::GenerateOptions ToInternal(const GenerateOptions& o) {
  ::dspark::GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  SamplingConfig sc;
  sc.temperature = o.temperature;
  sc.top_k = o.top_k;
  sc.top_p = o.top_p;
  sc.min_p = o.min_p;
  sc.temperature_last = o.temperature_last;
  g.sampling = detail::ToInternal(sc);
  g.sampling.seed = o.seed;
  detail::Check(ValidateSamplingParams(g.sampling));
  g.stop = o.stop;
  g.add_bos = o.add_bos;
  g.parse_special = o.parse_special;
  g.ignore_eos = o.ignore_eos;
  g.speculate = o.speculate;
  return g;
}

}  // namespace

struct Engine::Impl {
  explicit Impl(Model m) : model(std::move(m)) {}
  // Declaration order is construction order; destruction runs backwards: the engine goes before
  // the drafter, the drafter before the pool, the pool before the model.
  Model model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<::dspark::Drafter> drafter;  // null: plain decoding
  detail::DrafterAdapter* custom = nullptr;    // the user's drafter inside `drafter`, if any
  std::unique_ptr<SpeculativeEngine> engine;
  std::mutex mu;  // one generation at a time
};

namespace {

// One generation under the engine's lock. A template over the (private) Impl so that it is no
// member of the exported class Engine and stays out of the library's symbol table.
template <typename EngineImpl, typename GenerateFn>
GenerateResult Run(EngineImpl& e, const GenerateFn& generate, const TokenCallback& on_token) {
  std::lock_guard<std::mutex> lock(e.mu);
  if (e.custom != nullptr) e.custom->ClearError();
  // The user's callback runs inside the engine's step: an exception must not unwind through it.
  std::exception_ptr callback_error;
  ::dspark::TokenCallback cb;
  if (on_token) {
    cb = [&](const ::dspark::TokenEvent& t) {
      try {
        return on_token(t.id, t.text, t.source == TokenSource::kDraft);
      } catch (...) {
        callback_error = std::current_exception();
        return false;
      }
    };
  }
  Result<::dspark::GenerateResult> r = generate(*e.engine, cb);
  if (callback_error) std::rethrow_exception(callback_error);
  if (!r.ok()) detail::Throw(r.status());
  if (r->stop_reason == "error") throw Error(ErrorCode::kInternal, "generation failed: " + r->error);
  GenerateResult out;
  out.ids = std::move(r->ids);
  out.text = std::move(r->text);
  out.stop_reason = ToStopReason(r->stop_reason);
  out.stats = ToApi(r->stats);
  if (e.custom != nullptr) out.drafter_error = e.custom->error();
  return out;
}

}  // namespace

Engine::Engine(const Model& target, const EngineOptions& options) : impl_(std::make_unique<Impl>(target)) {
  Impl& e = *impl_;
  ::dspark::Model& model = detail::Access::Internal(target);
  const ::dspark::Tokenizer& tok = detail::Access::InternalTokenizer(target);

  if (options.threads < 0) Invalid("EngineOptions::threads must be >= 0 (0: the physical cores)");
  if (options.prefill_chunk < 1) Invalid("EngineOptions::prefill_chunk must be >= 1");
  const int n_ctx_train = model.config().n_ctx_train > 0 ? model.config().n_ctx_train : 4096;
  const int n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min(n_ctx_train, 4096);
  if (n_ctx < 2) Invalid("EngineOptions::n_ctx must be >= 2 (prompt + output tokens), got " + std::to_string(n_ctx));
  const DType kv_type = ParseCacheType(options.cache_type);
  detail::Check(KvCache::Supports(model.config(), kv_type));

  SpeculationOptions so = ToSpeculation(options);
  const bool custom = options.custom_drafter != nullptr;
  if (custom && so.drafter.type != "none")
    Invalid("EngineOptions: custom_drafter and drafter.type '" + options.drafter.type +
            "' both set; a custom drafter needs drafter.type \"none\"");
  if (custom) so.drafter.ngram_first = false;  // applied below, around the user's drafter

  e.pool = std::make_unique<ThreadPool>(options.threads > 0 ? options.threads : ThreadPool::DefaultThreadCount());
  // The library's policy (speculative/speculation.h) for the built-in drafters; for a user's drafter the
  // same call resolves the schedule as for any drafter without a confidence head.
  Speculation spec = detail::Unwrap(BuildSpeculation(std::move(so), model, tok, *e.pool, n_ctx));
  e.drafter = std::move(spec.drafter);
  if (custom) {
    auto adapter = std::make_unique<detail::DrafterAdapter>(options.custom_drafter, model.config().n_vocab,
                                                            std::max(16, options.schedule.n_max));
    e.custom = adapter.get();
    if (options.drafter.ngram_first)
      e.drafter = std::make_unique<LookupFirstDrafter>(NgramOptions{options.drafter.ngram_min, options.drafter.ngram_max},
                                                       std::move(adapter));
    else
      e.drafter = std::move(adapter);
  }
  BatchEngineOptions eo;
  eo.n_ctx = n_ctx;
  eo.prefill_chunk = options.prefill_chunk;
  eo.kv_type = kv_type;
  eo.schedule = spec.schedule;
  e.engine = std::make_unique<SpeculativeEngine>(model, tok, *e.pool, eo, e.drafter.get());
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

GenerateResult Engine::Generate(std::string_view prompt, const GenerateOptions& options, const TokenCallback& on_token) {
  const ::dspark::GenerateOptions o = ToInternal(options);
  return Run(
      *impl_,
      [&](SpeculativeEngine& engine, const ::dspark::TokenCallback& cb) { return engine.Generate(prompt, o, cb); },
      on_token);
}

GenerateResult Engine::GenerateFromIds(const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                       const TokenCallback& on_token) {
  const ::dspark::GenerateOptions o = ToInternal(options);
  return Run(
      *impl_,
      [&](SpeculativeEngine& engine, const ::dspark::TokenCallback& cb) {
        return engine.GenerateFromIds(prompt_ids, o, cb);
      },
      on_token);
}

const Model& Engine::model() const { return impl_->model; }
Tokenizer Engine::tokenizer() const { return impl_->model.tokenizer(); }
std::string Engine::drafter_name() const { return impl_->drafter ? std::string(impl_->drafter->Name()) : std::string(); }
int Engine::n_ctx() const { return impl_->engine->n_ctx(); }
int Engine::threads() const { return impl_->pool->num_threads(); }

Stats Engine::cumulative_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return ToApi(impl_->engine->cumulative_stats());
}

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kEos: return "eos";
    case StopReason::kStopString: return "stop";
    case StopReason::kLength: return "length";
    case StopReason::kContext: return "context";
    case StopReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

}  // namespace dspark::api
