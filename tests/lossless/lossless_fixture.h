// The fixture of the lossless tests (lossless_test.cc, request_features_test.cc): tiny random-weight
// qwen3 targets (F32, a one-layer sibling as a draft, a Q8_0 copy), a draft-model drafter maker and
// prompts, with greedy references decoded outside every engine (testing::ReferenceGreedy).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "model/testing/tiny_models.h"
#include "speculative/drafters/draft_model.h"
#include "speculative/engine.h"

namespace dspark::lossless {

using Loaded = testing::LoadedModel;
inline Loaded Load(const std::string& path) { return testing::LoadModelForTest(path); }
using testing::ReferenceGreedy;

class Lossless : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SynthSpec target = testing::TinySpec("qwen3", DType::kF32);
    target.seed = 11;
    // An untied head keeps the model from echoing its input, so greedy output is varied.
    target.tied_embeddings = false;
    target.embedding_gain = 2.0f;
    target_path_ = testing::WriteTiny(target, "lossless_target");
    SynthSpec other = target;
    other.seed = 12;
    other.n_layer = 1;
    other_path_ = testing::WriteTiny(other, "lossless_other");
    SynthSpec q8 = target;
    q8.matrix_type = DType::kQ8_0;
    q8_path_ = testing::WriteTiny(q8, "lossless_q8");
  }
  void SetUp() override { target_ = Load(target_path_); }

  std::unique_ptr<Drafter> DraftModel(const std::string& path, int n_ctx) {
    Loaded d = Load(path);
    auto dr = DraftModelDrafter::Create(std::move(d.model), *d.tok, *target_.tok, pool_, n_ctx, 16);
    EXPECT_TRUE(dr.ok()) << dr.status().message();
    return std::move(*dr);
  }

  GenerateResult Run(Drafter* drafter, const std::vector<int32_t>& prompt, int n, int n_max, int n_ctx = 256,
                     SamplingParams sampling = {}, std::vector<std::string> stop = {}) {
    ScheduleOptions so;
    so.n_max = n_max;
    so.branches = branches_;
    so.branch_tail = branch_tail_;
    so.adaptive = adaptive_;
    SpeculativeEngine engine(*target_.model, *target_.tok, pool_, n_ctx, drafter, so);
    GenerateOptions go;
    go.max_new_tokens = n;
    go.sampling = sampling;
    go.stop = std::move(stop);
    auto r = engine.GenerateFromIds(prompt, go);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : GenerateResult{};
  }

  static std::vector<int32_t> Prompt(int variant) {
    std::vector<int32_t> p = {1};
    for (int i = 0; i < 6 + variant * 5; ++i) p.push_back(3 + (i * (17 + variant * 6) + variant) % 280);
    if (variant == 2)  // repeat-heavy: lets the n-gram drafter find matches
      for (int r = 0; r < 2; ++r) p.insert(p.end(), p.begin() + 1, p.begin() + 9);
    return p;
  }

  static inline std::string target_path_, other_path_, q8_path_;
  Loaded target_;
  ThreadPool pool_{2};
  int branches_ = 0;       // Run's token-tree alternatives per draft token
  int branch_tail_ = 0;    // and the tokens after each (its side chain)
  bool adaptive_ = false;  // Run's schedule: adaptive instead of fixed
};

}  // namespace dspark::lossless
