// BatchEngine's per-request state, shared by the files that implement the engine's concerns
// (batch_engine.cc: admission and the step's phases; batch_engine_prompt_cache.cc: reusing cached
// rows). Private to src/speculative.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "speculative/batch_engine.h"
#include "speculative/draft_grammar.h"
#include "speculative/token_tree.h"

namespace dspark {

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
  bool use_drafter = false;
  GenerateResult result;
  std::string stop_reason;      // set when finished
  std::chrono::steady_clock::time_point decode_start;

  // Rows committed while the sequence did not draft (and prompt rows the drafter did not ingest):
  // its next proposal first catches up on them. 0 when it drafted the step before.
  int rows_behind = 0;

  std::optional<grammar::GrammarState> grammar;  // after the committed tokens (constrained requests)
  bool grammar_dead = false;    // no token could continue the constrained text

  // Per-step scratch.
  std::vector<float> rows;      // adjusted logits (AdjustedRows)
  std::vector<grammar::GrammarState> draft_states;  // grammar state before each draft token
  std::unique_ptr<DraftGrammar> draft_grammar;  // the grammar along the draft being proposed
  Draft draft;
  int k = 0;
  TreeLayout tree;              // the verified draft: its k tokens and the leaves beside them
  bool asked_drafter = false;   // a draft was asked for this step
  int behind_at_draft = 0;      // rows_behind when it was
  int row0 = 0;                 // first batch row of this sequence in the current pass
  int n_rows = 0;
  double draft_ms = 0;

  bool decoding() const { return n_prefilled == static_cast<int>(prompt.size()); }
};

}  // namespace dspark
