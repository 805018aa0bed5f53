// A fixture for drafters that read the target's hidden states (DSpark / DFlash, EAGLE-3): a tiny
// target, the target's taps for a prompt handed to a drafter as the engine would, a speculative
// run, and the prompts every such test uses.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dspark/dspark_models.h"
#include "model/testing/tiny_models.h"
#include "speculative/engine.h"

namespace dspark::testing {

class TapDrafterTest : public ::testing::Test {
 protected:
  // Writes the tiny target to `path` (SetUpTestSuite of the derived suite).
  static void WriteTarget(const std::string& path) {
    target_path_ = path;
    ASSERT_TRUE(WriteTinyTarget({}, target_path_).ok());
  }
  void SetUp() override { target_ = LoadModelForTest(target_path_); }

  // The target's taps of `layers` for the committed rows of `prompt` (all but its last token).
  std::vector<std::vector<float>> Taps(const std::vector<int>& layers, const std::vector<int32_t>& prompt) {
    KvCache cache(target_.model->config(), 1, 256);
    Batch b;
    for (size_t i = 0; i + 1 < prompt.size(); ++i) b.Add(prompt[i], static_cast<int>(i), 0, false);
    ForwardOptions fo;
    fo.tap_layers = layers;
    auto out = target_.model->Forward(b, cache, pool_, fo);
    EXPECT_TRUE(out.ok());
    return out.ok() ? out->taps : std::vector<std::vector<float>>{};
  }

  // Starts `seq` on the drafter and hands it the target features of the prompt's committed rows,
  // as the engine does.
  void FeedPrompt(Drafter* d, int seq, const std::vector<int32_t>& prompt) {
    const auto taps = Taps(d->Needs().target_tap_layers, prompt);
    TapRows rows;
    rows.n_rows = static_cast<int>(prompt.size()) - 1;
    rows.n_embd = target_.model->config().n_embd;
    for (auto& t : taps) rows.taps.push_back(t.data());
    ASSERT_TRUE(d->Begin(seq).ok());
    ASSERT_TRUE(d->ObserveTaps(seq, rows).ok());
  }

  GenerateResult Run(Drafter* drafter, const std::vector<int32_t>& prompt, int n, ScheduleOptions so,
                     SamplingParams sampling = {}) {
    SpeculativeEngine engine(*target_.model, *target_.tok, pool_, 256, drafter, so);
    GenerateOptions go;
    go.max_new_tokens = n;
    go.sampling = sampling;
    go.ignore_eos = true;
    auto r = engine.GenerateFromIds(prompt, go);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(*r) : GenerateResult{};
  }

  static std::vector<int32_t> Prompt(int variant) {
    std::vector<int32_t> p = {1};
    for (int i = 0; i < 3 + variant * 4; ++i) p.push_back(3 + (i * (11 + variant * 6) + variant) % 57);
    return p;
  }

  static inline std::string target_path_;
  LoadedModel target_;
  ThreadPool pool_{1};
};

}  // namespace dspark::testing
