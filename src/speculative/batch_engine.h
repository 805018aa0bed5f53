// Continuous batching with batched speculative verification. Up to n_parallel sequences run
// together; each Step() is ONE target forward pass holding every running sequence's anchor and
// admitted draft tokens plus a chunk of newcomers' prompts. Draft slots are admitted across the
// whole batch by predicted survival while the expected committed tokens per millisecond of the
// batch rises (DSpark's production scheduler), so under load it degrades smoothly to plain
// decoding. A request's greedy output does not depend on what else is in the batch.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "model/model.h"
#include "speculative/drafter.h"
#include "speculative/planner.h"
#include "speculative/prompt_cache.h"
#include "speculative/scheduler.h"
#include "speculative/stats.h"
#include "speculative/stop_strings.h"
#include "speculative/verifier.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace dspark {

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  bool add_bos = true;            // only if the vocabulary asks for BOS
  bool parse_special = false;     // recognise "<|im_start|>"-style tokens in the prompt
  bool ignore_eos = false;        // keep going past end-of-generation tokens (benchmarks)
  bool speculate = true;          // false: plain decoding for this request
  // Log-probabilities of the emitted tokens (GenerateResult::logprobs, TokenEvent::logprob): -1
  // none; n >= 0: each token's own and the n most probable alternatives'. They are the target's,
  // over the logits after the request's adjustments (SamplingParams::logit_bias, penalties), at
  // temperature 1: the same for a token accepted from a draft as plain decoding computes.
  int logprobs = -1;
  // Constrained decoding: every token is one the grammar allows (end-of-generation only where the
  // text is complete). The target's rows are masked before sampling and verification, so the
  // output is exactly plain constrained decoding's; a draft token the grammar forbids ends the draft.
  std::shared_ptr<const grammar::Grammar> grammar;
};

enum class TokenSource { kTarget, kDraft };  // sampled by the target vs an accepted draft token

struct GenerateResult {
  std::string text;
  std::vector<int32_t> ids;  // generated ids (prompt excluded)
  // "eos", "stop", "length", "context", "cancelled", "error", "out_of_memory" (no memory for the
  // request: at admission it alone fails; during a step every request then running does)
  std::string stop_reason;
  std::string error;  // set when stop_reason is "error" or "out_of_memory"
  SpecStats stats;
  std::vector<TokenLogprob> logprobs;  // per generated id, when GenerateOptions::logprobs >= 0
};

// One committed token as the engine reports it.
struct TokenEvent {
  int32_t id = -1;        // -1: the final flush of held-back text
  std::string_view text;  // the text it made safe to show (empty while a UTF-8 sequence or a
                          // possible stop string is pending)
  TokenSource source = TokenSource::kTarget;
  const TokenLogprob* logprob = nullptr;  // when GenerateOptions::logprobs >= 0 (null on the flush)
};

// Called on the engine thread with each committed token. Return false to cancel the request.
using TokenCallback = std::function<bool(const TokenEvent&)>;
using DoneCallback = std::function<void(GenerateResult&&)>;

struct BatchEngineOptions {
  int n_parallel = 1;         // sequences running at once (KV cache slots)
  int n_ctx = 2048;           // context per sequence
  int prefill_chunk = 512;    // most prompt rows per step
  DType kv_type = DType::kF16;  // KV cache elements: F16 (half the attention traffic), F32 or Q8_0
  ScheduleOptions schedule;
  VerifyFn verify = &Verify;  // the verification rule (tests swap in broken ones)
  // Prompt cache: a finished request's KV rows stay in its slot, and a new request starts from
  // the longest prefix any slot (or the host store) holds, copying it when it is another slot's.
  // The drafter keeps its state for those rows too (Drafter::BeginWithPrefix). Off: every
  // request starts cold.
  bool prompt_cache = true;
  // Host memory for slot prefixes that new requests would overwrite (0: slots only).
  size_t cache_ram_bytes = 0;
};

class BatchEngine {
 public:
  // `drafter` may be null (plain decoding); it must accept sequence ids in [0, n_parallel).
  BatchEngine(Model& target, const Tokenizer& tokenizer, ThreadPool& pool, BatchEngineOptions options,
              Drafter* drafter = nullptr);
  ~BatchEngine();

  // Thread-safe. Validates and queues a request; on_done is called exactly once (engine thread).
  Result<int64_t> Submit(std::vector<int32_t> prompt, GenerateOptions options, TokenCallback on_token,
                         DoneCallback on_done);
  // Thread-safe. The request stops at the next step boundary (stop_reason "cancelled").
  void Cancel(int64_t request_id);

  // Runs one step: admits queued requests into free slots, drafts, one target pass, verifies,
  // commits. Returns false when there was nothing to do. Engine thread only. Out of memory
  // (std::bad_alloc) never leaves it: the requests it hit end with stop_reason "out_of_memory".
  Result<bool> Step();
  // Steps until every submitted request has finished. Engine thread only.
  Status RunUntilIdle();

  int num_running() const;
  int num_queued() const;
  const SpecStats& cumulative_stats() const { return cumulative_; }
  // Cost of a target pass by row count; profiled on first need (adaptive scheduling).
  const CostModel& cost_model();
  const BatchEngineOptions& options() const { return options_; }
  // Bytes the target's KV cache reserves for all slots.
  size_t cache_bytes() const { return cache_.bytes(); }

 private:
  struct Sequence;
  // What the forward pass of a step produced, for the phases that commit it.
  struct Pass {
    ForwardOutput out;
    double ms = 0;
    std::vector<int> logit_index;  // batch row -> logits row (-1: none)
  };
  void ApplyCancellations();
  void Admit();
  // Sets up `s` for free slot `slot` (may throw std::bad_alloc; Admit fails the request alone).
  void Start(Sequence& s, int slot);
  // Starts `s` on free slot `slot`, reusing the longest cached prefix of its prompt.
  void StartFromCache(Sequence& s, int slot);
  // The phases of a step after admission (may throw std::bad_alloc; Step fails the running requests).
  Result<bool> RunStep();
  // Ends `s` (in its slot) with stop_reason "out_of_memory"; its rows are not kept.
  void FailForMemory(Sequence& s);
  bool WaitsForSharedPrefill(const std::vector<int32_t>& prompt) const;
  // Copying rows from elsewhere pays only for a real gain over what the slot holds itself.
  static constexpr size_t kMinCopyRows = 16;
  // The tokens whose KV rows slot `slot` holds (a free slot: its last request's).
  std::span<const int32_t> CachedTokens(int slot) const;
  double Propose(const std::vector<Sequence*>& decoding, int prompt_rows);
  void PlanVerification(const std::vector<Sequence*>& decoding, int prompt_rows);
  Result<Pass> RunPass(const std::vector<Sequence*>& decoding, const std::vector<Sequence*>& prefilling,
                       double draft_ms);
  void CommitPrompts(const std::vector<Sequence*>& prefilling, const Pass& pass, int n_sequences);
  Result<int> VerifyAndCommit(const std::vector<Sequence*>& decoding, const Pass& pass);
  // The tap rows of `s`'s first n_rows pass rows; where `path` accepted an alternative (its
  // leaf_row >= 0), the chain's rows and then the alternative's and its tail's, gathered into
  // tap_path_.
  TapRows Taps(const Pass& pass, const Sequence& s, int pos0, int n_rows, const VerifyResult* path = nullptr);
  void Finish(Sequence& s, std::string reason);
  // `row`: the adjusted logits the token was drawn from (its log-probabilities).
  // `known_state`: the grammar state after the token when it is already known (accepted draft
  // tokens of a constrained request), taken instead of advancing the grammar again.
  bool Emit(Sequence& s, int32_t id, TokenSource source, const float* row,
            grammar::GrammarState* known_state = nullptr);
  // The logits of n_rows consecutive positions of `s` with its request's adjustments applied
  // (the logits themselves when it has none); row i counts draft[0, i) as generated before it.
  const float* AdjustedRows(Sequence& s, const float* logits, int n_rows, const int32_t* draft);
  int32_t SampleAt(Sequence& s, const float* row);
  // Grammar-constrained requests: cuts `s`'s draft at its first token the grammar forbids and
  // records the grammar state in front of each remaining draft token.
  void ConstrainDraft(Sequence& s);
  // Masks one row to the tokens the grammar allows in `state`. Greedy rows without logprobs are
  // only masked when their argmax is forbidden (the masked argmax is the same otherwise). False:
  // no token can continue and the text cannot end (a grammar the vocabulary cannot spell).
  bool MaskRow(const Sequence& s, const grammar::GrammarState& state, float* row);
  const grammar::TokenMasker& Masker();
  void FailDrafter(Sequence& s, const Status& status);

  Model& target_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  BatchEngineOptions options_;
  Drafter* drafter_;
  std::vector<int> tap_layers_;
  std::vector<std::vector<float>> tap_path_;  // Taps' gathered rows
  KvCache cache_;
  CostModel cost_;
  // Decides every sequence's draft length; null for plain decoding.
  std::unique_ptr<DraftPlanner> planner_;
  SpecStats cumulative_;

  mutable std::mutex mu_;  // guards queue_, cancelled_, next_id_
  std::deque<std::unique_ptr<Sequence>> queue_;
  std::vector<int64_t> cancelled_;
  int64_t next_id_ = 1;
  std::vector<std::unique_ptr<Sequence>> slots_;  // [n_parallel], null = free
  // Prompt cache: per free slot, the tokens of the KV rows its last request left, and when it
  // ended (least recently used slots are overwritten first); the host store behind them.
  std::vector<std::vector<int32_t>> retained_;
  std::vector<char> drafter_rows_valid_;  // the drafter's state of the slot matches `retained_`
  std::vector<int64_t> slot_used_;
  int64_t clock_ = 0;
  PromptStore store_;
  // Grammar-constrained decoding: each token's bytes (control tokens' text; end-of-generation
  // tokens empty) and their trie, built on the first constrained request.
  std::vector<std::string> token_bytes_;
  std::unique_ptr<grammar::TokenMasker> masker_;
  std::atomic<int> running_{0};
};

// Runs `ids` through `model` into sequence `seq` starting at `start_pos` in chunks of `chunk`
// rows and returns the logits of the last row (drafters with their own model use it too).
Result<std::vector<float>> Prefill(Model& model, KvCache& cache, ThreadPool& pool, int seq,
                                   const std::vector<int32_t>& ids, int start_pos, int chunk);

// Checks that a prompt of n tokens fits a context of n_ctx with room for at least one token.
Status CheckPromptFits(int prompt_tokens, int n_ctx);

}  // namespace dspark
