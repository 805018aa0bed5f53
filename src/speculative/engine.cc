#include "speculative/engine.h"

namespace dspark {

namespace {
BatchEngineOptions SingleSlot(BatchEngineOptions o) {
  o.n_parallel = 1;
  return o;
}
BatchEngineOptions SingleSlot(int n_ctx, ScheduleOptions schedule, int prefill_chunk, DType kv_type) {
  BatchEngineOptions o;
  o.kv_type = kv_type;
  o.n_ctx = n_ctx;
  o.prefill_chunk = prefill_chunk;
  o.schedule = schedule;
  return SingleSlot(std::move(o));
}
}  // namespace

SpeculativeEngine::SpeculativeEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, int n_ctx,
                                     Drafter* drafter, ScheduleOptions schedule, DType kv_type, int prefill_chunk)
    : tokenizer_(tokenizer),
      engine_(target, tokenizer, pool, SingleSlot(n_ctx, schedule, prefill_chunk, kv_type), drafter) {}

SpeculativeEngine::SpeculativeEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool,
                                     BatchEngineOptions options, Drafter* drafter)
    : tokenizer_(tokenizer), engine_(target, tokenizer, pool, SingleSlot(std::move(options)), drafter) {}

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
  GenerateResult result;
  bool done = false;
  DSPARK_TRY(engine_.Submit(prompt_ids, options, on_token, [&](GenerateResult&& r) {
    result = std::move(r);
    done = true;
  }).status());
  DSPARK_TRY(engine_.RunUntilIdle());
  if (!done) return Internal("spec: request did not finish");
  return result;
}

}  // namespace dspark
