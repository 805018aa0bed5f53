// What one generation takes (GenerateOptions) and gives back (GenerateResult, Stats).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dspark/export.h"

namespace dspark::api {

struct GenerateOptions {
  int max_new_tokens = 128;
  // Sampling, as llama.cpp's flags: temperature 0 is greedy decoding (the output then does not
  // depend on the drafter: token for token what the target alone produces); above 0 the output is
  // distributed as the target's own sampling, and a seed reproduces it.
  float temperature = 0.0f;
  int top_k = 0;        // 0: off
  float top_p = 1.0f;   // (0, 1]; 1: off
  float min_p = 0.0f;   // [0, 1); 0: off
  uint64_t seed = 0;
  // false: temperature first, then top-k / top-p / min-p (vLLM's order); true: the filters on the
  // untempered distribution and the temperature last (llama.cpp's default chain).
  bool temperature_last = false;
  std::vector<std::string> stop;  // stop strings; the text ends before the first one found
  bool ignore_eos = false;        // keep going past end-of-generation tokens
  // Text prompts: prepend BOS if the vocabulary asks for it; recognise "<|im_start|>"-style
  // control tokens written in the text.
  bool add_bos = true;
  bool parse_special = false;
  bool speculate = true;  // false: plain decoding for this call, drafter or not
};

enum class StopReason {
  kEos,         // an end-of-generation token (not included in the output)
  kStopString,  // one of GenerateOptions::stop (not included in the text)
  kLength,      // max_new_tokens
  kContext,     // the context (EngineOptions::n_ctx) is full
  kCancelled,   // the token callback returned false (or threw)
};
DSPARK_API const char* StopReasonName(StopReason reason);  // "eos", "stop", "length", "context", "cancelled"

// Speculative decoding statistics of a generation (the engine's SpecStats). Acceptance rate =
// accepted_tokens / drafted_tokens; tau (mean tokens per verification with a draft) = 1 +
// (accepted_tokens + leaves_accepted + tail_accepted) / drafts; acceptance_per_position[i] = the share of drafts whose token i was
// accepted.
struct Stats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t steps = 0;            // target verification steps after the prompt
  int64_t target_calls = 0;     // target forward passes (prompt chunks included)
  int64_t draft_calls = 0;      // drafter forward passes
  int64_t drafts = 0;           // steps that verified a non-empty draft
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  int64_t whole_drafts = 0;     // drafts accepted whole
  int64_t leaves = 0;           // token trees: alternatives verified beside draft tokens
  int64_t leaves_accepted = 0;  // of those, accepted in place of a rejected draft token
  int64_t tail_tokens = 0;      // tokens of the alternatives' tails (side chains) verified
  int64_t tail_accepted = 0;    // of those, accepted after an accepted alternative
  int64_t drafter_fallbacks = 0;  // drafter failures that switched the request to plain decoding
  double acceptance_rate = 0;
  double tau = 1;
  std::vector<double> acceptance_per_position;
  // Time split (ms): the prompt; after it drafting, target verification passes, verification
  // arithmetic and sampling, the rest (detokenising, callbacks); decode_ms is the wall time after
  // the prompt.
  double prompt_ms = 0;
  double draft_ms = 0;
  double verify_ms = 0;
  double sample_ms = 0;
  double other_ms = 0;
  double decode_ms = 0;
  double tokens_per_second = 0;         // generated_tokens / decode time
  double prompt_tokens_per_second = 0;
};

struct GenerateResult {
  std::vector<int32_t> ids;  // generated ids, prompt excluded
  std::string text;          // their text, stop string excluded
  StopReason stop_reason = StopReason::kLength;
  Stats stats;
  // Why a user-written drafter (drafter.h) was dropped for this request, when it was
  // (stats.drafter_fallbacks > 0): its exception's message or the invalid proposal. The output
  // is unaffected: the rest was decoded plainly.
  std::string drafter_error;
};

// Called on the thread running Generate with each committed token and the text it made safe to
// show: empty while a UTF-8 character or a possible stop string is pending, id -1 for the final
// flush. from_draft: an accepted draft token (else the target sampled it). Return false to stop
// (StopReason::kCancelled). An exception thrown here stops the generation and is rethrown by
// Generate.
using TokenCallback = std::function<bool(int32_t id, std::string_view text, bool from_draft)>;

}  // namespace dspark::api
