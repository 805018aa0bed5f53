// Single-request generation, plain or speculative: a BatchEngine with one slot, driven to
// completion on the calling thread. The CLI and the tests use it; the server drives a
// BatchEngine with many slots, so a request's output is the same either way.
#pragma once

#include <string_view>
#include <vector>

#include "speculative/batch_engine.h"

namespace dspark {

class SpeculativeEngine {
 public:
  // `drafter` may be null (plain decoding). n_ctx: the target KV cache size (prompt + output);
  // kv_type: its element type (KvCache::Supports must accept it for the target).
  SpeculativeEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, int n_ctx,
                    Drafter* drafter = nullptr, ScheduleOptions schedule = {}, DType kv_type = DType::kF16,
                    int prefill_chunk = 512);
  // The same over explicit options; n_parallel is forced to 1.
  SpeculativeEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, BatchEngineOptions options,
                    Drafter* drafter = nullptr);

  Result<GenerateResult> Generate(std::string_view prompt, const GenerateOptions& options,
                                  const TokenCallback& on_token = nullptr);
  Result<GenerateResult> GenerateFromIds(const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                         const TokenCallback& on_token = nullptr);

  int n_ctx() const { return engine_.options().n_ctx; }
  const SpecStats& cumulative_stats() const { return engine_.cumulative_stats(); }
  const CostModel& cost_model() { return engine_.cost_model(); }

 private:
  const Tokenizer& tokenizer_;
  BatchEngine engine_;
};

}  // namespace dspark
