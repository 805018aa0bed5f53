// `dspark bench --spec`: plain decoding and a grid of speculative settings on the same prompts.
#pragma once

#include <string>
#include <vector>

#include "speculative/drafters/factory.h"
#include "speculative/scheduler.h"

namespace dspark::cli {

struct SpecBenchFlags {
  std::string model;
  std::string prompts_file;
  std::vector<std::string> sweeps;  // "n-max=3,5,7", "p-min=0,0.5", "n-min=0,2", "adaptive=0,1", "cost=0,1"
  DrafterConfig drafter;
  ModelOptions model_options;
  ScheduleOptions schedule;
  float temp = 0.0f;
  float top_p = 1.0f;  // with --temp: nucleus filter (the target's and the drafts' alike)
  uint64_t seed = 0;
  int n_predict = 128;
  int reps = 3;  // runs of each prompt per setting (round-robin); the median counts
  int max_prompts = 20;
  int threads = 0;
  int ctx_size = 0;
  DType cache_type = DType::kF16;  // the target's KV cache
  std::string out = "bench-spec";  // writes OUT.json, OUT.csv, OUT.svg
};

int RunSpecBench(const SpecBenchFlags& flags);

}  // namespace dspark::cli
