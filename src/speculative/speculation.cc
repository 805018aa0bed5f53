#include "speculative/speculation.h"

#include <algorithm>

namespace dspark {

Result<std::string> DraftTypeOfFile(const std::string& path) {
  DSPARK_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::Open(path));
  DSPARK_ASSIGN_OR_RETURN(std::string arch, file->GetStringOr("general.architecture", ""));
  if (arch == "eagle3") return std::string("draft-eagle3");
  if (arch != "dflash") return std::string("draft-simple");
  return std::string(file->FindTensor("markov_w1.weight") != nullptr ? "draft-dspark" : "draft-dflash");
}

Result<Speculation> BuildSpeculation(SpeculationOptions options, const Model& target, const Tokenizer& target_vocab,
                                     ThreadPool& pool, int n_ctx) {
  Speculation s;
  options.drafter.max_draft = std::max(options.drafter.max_draft, options.schedule.n_max);
  options.drafter.p_min = options.schedule.p_min;
  DSPARK_ASSIGN_OR_RETURN(s.drafter, CreateDrafter(options.drafter, target, target_vocab, pool, n_ctx));
  s.schedule = options.schedule;
  const bool confidence = s.drafter != nullptr && s.drafter->Needs().confidence_head;
  const ScheduleMode mode =
      options.mode.value_or(confidence && options.schedule.p_min == 0 ? ScheduleMode::kCost : ScheduleMode::kCut);
  s.schedule.mode = mode;
  if (mode == ScheduleMode::kCost) s.schedule.adaptive = true;
  return s;
}

}  // namespace dspark
