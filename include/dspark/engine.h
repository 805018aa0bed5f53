// Generation, plain or speculative, over a Model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dspark/drafter.h"
#include "dspark/export.h"
#include "dspark/generate.h"
#include "dspark/model.h"

namespace dspark::api {

// A built-in drafter (dspark generate's --spec-type and its flags).
struct DrafterOptions {
  // "none" (plain decoding), "auto" (from `model`: a dflash GGUF with DSpark's Markov head is
  // draft-dspark, one without draft-dflash, an eagle3 GGUF draft-eagle3, any other model
  // draft-simple), "draft-simple" (a smaller model with the target's vocabulary), "draft-dspark",
  // "draft-dflash" (block drafters that read the target's hidden states), "draft-eagle3" (an
  // EAGLE-3 head over three target layers, drafting token by token), "draft-mtp" (a deepseek2
  // target's own multi-token-prediction block; no `model`), "ngram" (prompt lookup).
  std::string type = "none";
  std::string model;  // the drafter's GGUF, for the model drafters
  // Prompt lookup first: where the last n tokens occurred before, propose what followed (free),
  // the model drafter (or EngineOptions::custom_drafter) elsewhere.
  bool ngram_first = false;
  int ngram_min = 2;  // n-gram lengths for "ngram" and ngram_first
  int ngram_max = 4;
  int threads = 0;     // a model drafter's own thread pool; 0: the target's
  bool repack = true;  // as ModelOptions::repack, for the drafter's weights
  bool dspark_full_block = false;  // draft-dspark/dflash: the whole trained block every step
};

// How many tokens each draft has and how many of them are verified (the --spec-draft-* flags).
struct ScheduleOptions {
  int n_max = 8;        // the most tokens per draft
  int n_min = 0;        // shorter drafts are not verified
  float p_min = 0.0f;   // end a draft at a token whose confidence is below this
  // Choose each draft's length from measured acceptance and the target's measured cost; decode
  // plainly where drafting does not pay.
  bool adaptive = false;
  // "" (the library's policy: "cost" for a drafter with a confidence head and p_min 0, else
  // "cut"), "cut" (the draft up to n_max / p_min) or "cost" (the verified prefix with the best
  // expected tokens per ms; implies adaptive).
  std::string mode;
  // Token trees (--spec-branches): each draft token's next most likely alternatives verified beside
  // it in the same pass, in [0, 8] (0: chains); with `adaptive` only those that pay for their rows.
  int branches = 0;
  // Tokens after each alternative (--spec-branch-tail), in [0, 16]: its side chain, verified with
  // it where it pays (n-gram and DSpark drafters propose them; 0: alternatives are leaves).
  int branch_tail = 0;
};

struct EngineOptions {
  int threads = 0;               // 0: this machine's physical cores
  int n_ctx = 0;                 // prompt + output tokens; 0: the model's n_ctx_train, at most 4096
  std::string cache_type = "f16";  // KV cache elements: "f16", "f32" or "q8_0"
  int prefill_chunk = 512;       // most prompt rows per forward pass
  DrafterOptions drafter;
  ScheduleOptions schedule;
  // Your own drafter (drafter.h); when set, drafter.type must be "none" (drafter.ngram_first may
  // put prompt lookup in front of it). The Engine keeps it alive.
  std::shared_ptr<Drafter> custom_drafter;
};

// One request at a time, run to completion on the calling thread. Thread-safe: concurrent calls
// to Generate on one Engine run one after the other. For concurrency use one Engine per thread
// (they may share a Model); each has its own KV cache and thread pool. An engine keeps learning
// its drafter's acceptance and the target's costs across calls.
class DSPARK_API Engine {
 public:
  // Builds the drafter and schedule (throws Error: unknown drafter type, a drafter file that fails
  // to load or whose vocabulary is not the target's, invalid options).
  explicit Engine(const Model& target, const EngineOptions& options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Tokenizes `prompt` with the target's vocabulary (GenerateOptions::add_bos, parse_special) and
  // generates. Throws Error for invalid options, an empty prompt or one that does not fit n_ctx.
  GenerateResult Generate(std::string_view prompt, const GenerateOptions& options = {},
                          const TokenCallback& on_token = nullptr);
  GenerateResult GenerateFromIds(const std::vector<int32_t>& prompt_ids, const GenerateOptions& options = {},
                                 const TokenCallback& on_token = nullptr);

  const Model& model() const;
  Tokenizer tokenizer() const;
  // The drafter's name ("draft-simple", "ngram+draft-dspark", your Drafter's Name(), ...), "" for none.
  std::string drafter_name() const;
  int n_ctx() const;
  int threads() const;
  // The sum of every call's statistics so far.
  Stats cumulative_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspark::api
