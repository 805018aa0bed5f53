// The engine's DSpark drafter against PyTorch on the bundled pair (models/ref-target.gguf +
// models/ref-dspark.gguf): one block drafted after a fixed context, as exported by
// tools/train/export_golden.py --dspark (tests/data/golden/README.md): the greedy Markov chain,
// the confidences, and the biased logits of every slot. The goldens name the sha256 of both files;
// re-export them with the models.
#include <gtest/gtest.h>

#include "golden/golden_logits.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "speculative/drafters/dspark_drafter.h"
#include "speculative/drafters/factory.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace {

class RefDSparkGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(RefDSparkGolden, ChainConfidenceAndLogitsMatchPyTorch) {
  auto golden = gguf::File::Open(testing::GoldenPath("dspark-draft-" + GetParam() + ".gguf"));
  ASSERT_TRUE(golden.ok()) << golden.status().message();
  const gguf::File& g = **golden;
  auto tf = gguf::File::Open(testing::RefModelPath("ref-target.gguf"));
  ASSERT_TRUE(tf.ok()) << tf.status().message();
  std::shared_ptr<const gguf::File> file(std::move(*tf));
  auto target = Model::FromFile(file);
  ASSERT_TRUE(target.ok()) << target.status().message();
  auto tok = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const int n_vocab = (*target)->config().n_vocab;
  const int n_embd = (*target)->config().n_embd;

  const auto tokens = *g.GetIntArray("golden.tokens");
  const int n = static_cast<int>(*g.GetInt("golden.anchor_pos"));
  const auto want_tokens = *g.GetIntArray("golden.draft_tokens");
  const auto want_conf = *g.GetFloatArray("golden.confidence");
  const auto max_logit = *g.GetFloatArray("golden.max_logit");
  const auto lse = *g.GetFloatArray("golden.logsumexp");
  const auto slots = *g.GetIntArray("golden.logit_slots");
  const gguf::TensorInfo* full = g.FindTensor("logits");
  ASSERT_NE(full, nullptr);
  ASSERT_EQ(full->ne[0], n_vocab) << "golden vocabulary differs from the model's: re-export the goldens";
  ASSERT_EQ(static_cast<int>(tokens.size()), n + 1);

  ThreadPool pool(2);
  DrafterConfig cfg;
  cfg.type = "draft-dspark";
  cfg.draft_model = testing::RefModelPath("ref-dspark.gguf");
  auto d = CreateDrafter(cfg, **target, **tok, pool, n + 64);
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto* ds = static_cast<DSparkDrafter*>(d->get());
  ds->set_keep_logits(true);

  // Target taps of the context rows 0..n-1, as the engine produces them.
  KvCache cache((*target)->config(), 1, n + 64);
  Batch b;
  for (int i = 0; i < n; ++i) b.Add(static_cast<int32_t>(tokens[i]), i, 0, false);
  ForwardOptions fo;
  fo.tap_layers = ds->Needs().target_tap_layers;
  auto out = (*target)->Forward(b, cache, pool, fo);
  ASSERT_TRUE(out.ok()) << out.status().message();
  TapRows rows;
  rows.pos0 = 0;
  rows.n_rows = n;
  rows.n_embd = n_embd;
  for (auto& t : out->taps) rows.taps.push_back(t.data());

  ASSERT_TRUE(ds->Begin(0).ok());
  ASSERT_TRUE(ds->ObserveTaps(0, rows).ok());
  std::vector<int32_t> context(tokens.begin(), tokens.end());
  DraftParams dp;
  dp.budget = static_cast<int>(want_tokens.size());
  Rng rng(1);
  auto draft = ds->Propose(0, context, dp, rng);
  ASSERT_TRUE(draft.ok()) << draft.status().message();
  const ChainResult* ch = ds->last_chain(0);
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(ch->logits.size(), want_tokens.size() * static_cast<size_t>(n_vocab));

  // F16 weights and a float32 engine vs PyTorch float32 in another summation order: logits agree
  // to ~1e-2; a chain token may differ only where PyTorch's top two logits nearly tie (and then
  // the rest of the chain legitimately diverges).
  for (size_t s = 0; s < want_tokens.size(); ++s) {
    SCOPED_TRACE("slot " + std::to_string(s));
    const float* row = ch->logits.data() + s * n_vocab;
    const testing::RowSummary got = testing::ExpectRowMatches(row, n_vocab, max_logit[s], lse[s], 2e-2);
    EXPECT_NEAR(ch->confidence[s], want_conf[s], 5e-3);
    if (draft->tokens[s] != want_tokens[s]) {
      EXPECT_LT(std::abs(row[want_tokens[s]] - got.max), 2e-2) << "chain token differs without a near-tie";
      break;
    }
  }
  const float* want = reinterpret_cast<const float*>(full->data);
  for (size_t k = 0; k < slots.size(); ++k)
    EXPECT_LT(testing::MaxAbsDiff(ch->logits.data() + static_cast<size_t>(slots[k]) * n_vocab, want + k * n_vocab, n_vocab),
              3e-2)
        << "full biased logits of slot " << slots[k];
}

INSTANTIATE_TEST_SUITE_P(Contexts, RefDSparkGolden, ::testing::Values("short", "medium"));

}  // namespace
}  // namespace dspark
