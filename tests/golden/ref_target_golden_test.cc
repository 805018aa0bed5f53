// The engine against PyTorch on the bundled reference target: logits for fixed token sequences
// exported by tools/train/export_golden.py (tests/data/golden/README.md). The goldens belong to
// the committed models/ref-target.gguf; re-export both together.
#include <gtest/gtest.h>

#include <cmath>

#include "golden/golden_logits.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace dspark {
namespace {

class RefTargetGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(RefTargetGolden, LogitsMatchPyTorch) {
  auto golden = gguf::File::Open(testing::GoldenPath("target-logits-" + GetParam() + ".gguf"));
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  const gguf::File& g = **golden;
  auto model = Model::Load(testing::RefModelPath("ref-target.gguf"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const int n_vocab = (*model)->config().n_vocab;

  const auto tokens = *g.GetIntArray("golden.tokens");
  const auto argmax = *g.GetIntArray("golden.argmax");
  const auto max_logit = *g.GetFloatArray("golden.max_logit");
  const auto lse = *g.GetFloatArray("golden.logsumexp");
  const auto positions = *g.GetIntArray("golden.logit_positions");
  const gguf::TensorInfo* full = g.FindTensor("logits");
  ASSERT_NE(full, nullptr);
  ASSERT_EQ(full->ne[0], n_vocab) << "golden vocabulary differs from the model's: re-export the goldens";

  ThreadPool pool(2);
  KvCache cache((*model)->config(), 1, static_cast<int>(tokens.size()));
  Batch batch;
  for (size_t i = 0; i < tokens.size(); ++i) batch.Add(static_cast<int32_t>(tokens[i]), static_cast<int>(i), 0, true);
  auto out = (*model)->Forward(batch, cache, pool);
  ASSERT_TRUE(out.ok()) << out.status().message();

  int argmax_mismatch = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    SCOPED_TRACE("position " + std::to_string(t));
    const float* row = out->Logits(t, n_vocab);
    // F16 weights, float32 accumulation in a different order than PyTorch: agree to ~1e-2.
    const testing::RowSummary got = testing::ExpectRowMatches(row, n_vocab, max_logit[t], lse[t], 2e-2);
    if (got.argmax != argmax[t]) {
      // Only a near-tie may flip the argmax.
      ++argmax_mismatch;
      EXPECT_LT(std::abs(row[argmax[t]] - got.max), 2e-2);
    }
  }
  EXPECT_LE(argmax_mismatch, 1 + static_cast<int>(tokens.size()) / 100);
  const float* want = reinterpret_cast<const float*>(full->data);
  for (size_t k = 0; k < positions.size(); ++k)
    EXPECT_LT(testing::MaxAbsDiff(out->Logits(positions[k], n_vocab), want + k * n_vocab, n_vocab), 3e-2)
        << "full logits at position " << positions[k];
}

INSTANTIATE_TEST_SUITE_P(Sequences, RefTargetGolden, ::testing::Values("short", "medium", "long"));

}  // namespace
}  // namespace dspark
