// From user-facing options to a drafter and a schedule: the one place that applies the library's
// speculation policy, so `dspark generate`, `serve`, `bench` and the Python module agree.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/model.h"
#include "speculative/drafter.h"
#include "speculative/drafters/factory.h"
#include "speculative/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace dspark {

struct SpeculationOptions {
  DrafterConfig drafter;     // type "none": plain decoding
  ScheduleOptions schedule;  // n_max, n_min, p_min, adaptive
  // cut or cost; unset: cost-scheduled verification when the drafter has a confidence head and no
  // p_min cut is asked for (the head's survival estimates then choose each verified length), else cut.
  std::optional<ScheduleMode> mode;
};

struct Speculation {
  std::unique_ptr<Drafter> drafter;  // null for plain decoding
  ScheduleOptions schedule;          // with the mode resolved
};

// The --spec-type a drafter file asks for: a `dflash` GGUF is a block drafter, DSpark when it has
// the Markov head (markov_w1.weight, as llama.cpp tells them apart) else DFlash; any other
// architecture is a draft model ("draft-simple"). For callers that take a drafter by its file.
Result<std::string> DraftTypeOfFile(const std::string& path);

// Creates the drafter (its largest block at least schedule.n_max; p_min handed to drafters that
// need a confidence head for it) and resolves the schedule. Cost mode implies adaptive
// scheduling: it needs the target's profiled cost model.
Result<Speculation> BuildSpeculation(SpeculationOptions options, const Model& target, const Tokenizer& target_vocab,
                                     ThreadPool& pool, int n_ctx);

}  // namespace dspark
