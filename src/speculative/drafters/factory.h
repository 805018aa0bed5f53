// The one place that maps a --spec-type name to a drafter constructor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "speculative/drafter.h"
#include "speculative/drafters/ngram.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

struct DrafterConfig {
  std::string type = "none";   // none | draft-simple | draft-dspark | draft-dflash | draft-eagle3 | draft-mtp | ngram | synthetic
  std::string draft_model;     // -md, for draft-simple, draft-dspark, draft-dflash and draft-eagle3 (draft-mtp: none,
                               // or the target again)
  float p_min = 0.0f;          // draft-dspark: a confidence cut, which needs a confidence head
  int max_draft = 16;
  int n_seq = 1;               // sequences the drafter serves at once (server slots)
  NgramOptions ngram;
  // draft-simple/draft-dspark/draft-dflash: prompt lookup first (with the ngram options), the
  // model drafter only where the context does not repeat (--spec-ngram-first).
  bool ngram_first = false;
  double synthetic_accept = 0.8;
  std::vector<int32_t> synthetic_reference;  // prompt + the target's plain output
  // Threads of a model drafter's own pool (--threads-draft/--td, llama.cpp's -td); 0 or the
  // target's count: share the target's pool. For many-core machines, where a small drafter need
  // not spread over every thread the target uses (a draft model as small as the reference one
  // gains nothing from a second thread).
  int threads = 0;
  bool repack = true;          // pack draft weights for this CPU's kernels (ModelOptions::repack)
  // draft-dspark/draft-dflash: run the whole trained block every step (llama.cpp's behaviour)
  // instead of only the rows the step's budget needs.
  bool dspark_full_block = false;
};

std::vector<std::string> DrafterTypes();

// nullptr for "none". Errors: unknown type (listing the known ones), a draft model that fails to
// load or whose vocabulary differs from the target's.
Result<std::unique_ptr<Drafter>> CreateDrafter(const DrafterConfig& config, const Model& target,
                                               const Tokenizer& target_vocab, ThreadPool& pool, int n_ctx);

}  // namespace dspark
