// Plain (non-speculative) generation: tokenise, chunked prefill, then one target pass per token,
// streaming text through a callback. The speculative engine (issue #4) shares its options,
// result and stop handling, and is measured against it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "sampling/sampling.h"
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

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prompt_ms = 0;
  double decode_ms = 0;
  int target_calls = 0;
  std::string stop_reason;  // "eos", "stop", "length", "cancelled"

  double prompt_tok_s() const { return prompt_ms > 0 ? prompt_tokens * 1000.0 / prompt_ms : 0; }
  double decode_tok_s() const { return decode_ms > 0 ? generated_tokens * 1000.0 / decode_ms : 0; }
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> ids;  // generated ids (prompt excluded)
  GenerateStats stats;
};

// Called with each committed token and the text it made safe to show (may be empty while a
// UTF-8 sequence or a possible stop string is pending). Return false to cancel.
using TokenCallback = std::function<bool(int32_t id, std::string_view text)>;

class Generator {
 public:
  // n_ctx: the KV cache size for one sequence (prompt + generated tokens).
  Generator(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int n_ctx);

  Result<GenerateResult> Generate(std::string_view prompt, const GenerateOptions& options,
                                  const TokenCallback& on_token = nullptr);
  Result<GenerateResult> GenerateFromIds(const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                         const TokenCallback& on_token = nullptr);

  int n_ctx() const { return cache_.n_ctx(); }

 private:
  Model& model_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  KvCache cache_;
};

// Runs `ids` through `model` into sequence `seq` of `cache` starting at position `start_pos`, in
// chunks of `chunk` rows, and returns the logits of the last row. Shared by every generator.
Result<std::vector<float>> Prefill(Model& model, KvCache& cache, ThreadPool& pool, int seq,
                                   const std::vector<int32_t>& ids, int start_pos, int chunk);

// Checks that a prompt of n tokens fits a context of n_ctx with room for at least one token.
Status CheckPromptFits(int prompt_tokens, int n_ctx);

}  // namespace dspark
