// The generation loop: propose → schedule → one target pass over the anchor and the draft →
// verify → roll back the KV cache → commit and stream. Without a drafter (or with an empty draft)
// a step is exactly plain decoding, so plain and speculative generation share every line that
// touches the target. The engine alone writes statistics and measures time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "sampling/sampling.h"
#include "spec/drafter.h"
#include "spec/scheduler.h"
#include "spec/stats.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace dspark {

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  bool add_bos = true;            // only if the vocabulary asks for BOS
  bool parse_special = false;     // recognise "<|im_start|>"-style tokens in the prompt
  int prefill_chunk = 512;        // rows per prefill pass (bounds scratch memory)
  bool ignore_eos = false;        // keep going past end-of-generation tokens (benchmarks)
};

enum class TokenSource { kTarget, kDraft };  // sampled by the target vs an accepted draft token

struct GenerateResult {
  std::string text;
  std::vector<int32_t> ids;  // generated ids (prompt excluded)
  std::string stop_reason;   // "eos", "stop", "length", "context", "cancelled"
  SpecStats stats;
};

// Called with each committed token and the text it made safe to show (may be empty while a
// UTF-8 sequence or a possible stop string is pending; id -1 for a final flush). Return false
// to cancel.
using TokenCallback = std::function<bool(int32_t id, std::string_view text, TokenSource source)>;

class SpeculativeEngine {
 public:
  // `drafter` may be null (plain decoding). n_ctx: the target KV cache size (prompt + output).
  SpeculativeEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, int n_ctx,
                    Drafter* drafter = nullptr, ScheduleOptions schedule = {});

  Result<GenerateResult> Generate(std::string_view prompt, const GenerateOptions& options,
                                  const TokenCallback& on_token = nullptr);
  Result<GenerateResult> GenerateFromIds(const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                         const TokenCallback& on_token = nullptr);

  int n_ctx() const { return cache_.n_ctx(); }
  const SpecStats& cumulative_stats() const { return cumulative_; }
  // Measured cost of a target pass with k rows (profiled once, on first use in adaptive mode).
  const CostModel& cost_model();

 private:
  Model& target_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  KvCache cache_;
  Drafter* drafter_;
  ScheduleOptions schedule_;
  CostModel cost_;
  SpecStats cumulative_;
};

// Runs `ids` through `model` into sequence `seq` of `cache` starting at position `start_pos`, in
// chunks of `chunk` rows, and returns the logits of the last row; taps (if asked) are passed to
// on_taps per chunk. Shared by every generator.
Result<std::vector<float>> Prefill(Model& model, KvCache& cache, ThreadPool& pool, int seq,
                                   const std::vector<int32_t>& ids, int start_pos, int chunk,
                                   const ForwardOptions& fwd = {},
                                   const std::function<Status(int pos0, const ForwardOutput&)>& on_chunk = nullptr);

// Profiles the cost of one target pass over 1..max_rows rows (all returning logits) on top of a
// short context in sequence `seq`, leaving the cache as it was.
Result<CostModel> ProfileVerifyCost(Model& model, KvCache& cache, ThreadPool& pool, int seq, int max_rows);

// Checks that a prompt of n tokens fits a context of n_ctx with room for at least one token.
Status CheckPromptFits(int prompt_tokens, int n_ctx);

}  // namespace dspark
