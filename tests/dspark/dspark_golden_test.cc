// The DSpark drafter's per-slot hidden states, block logits, Markov-biased logits, chained tokens
// and confidences equal golden values from an independent float64 reference
// (tests/data/dspark/make_golden.py), for both block layouts, d2t, sinks, causal blocks and
// scales, with the target features injected all at once or across two steps; both with the whole
// trained block (llama.cpp's behaviour) and with the drafter's default truncated block (only the
// rows the budget needs: in a bidirectional block the kept rows' outputs change).
#include <filesystem>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "dspark/dspark_models.h"
#include "model/testing/tiny_models.h"
#include "speculative/drafters/dspark_drafter.h"
#include "speculative/drafters/factory.h"

namespace dspark {
namespace {

// float32 backbone vs float64 reference over a few layers.
constexpr double kAbsTol = 2e-3;
constexpr double kRelTol = 2e-3;

void ExpectRowNear(const nlohmann::json& want, const float* got, size_t n, const std::string& what,
                   double tol_scale = 1.0) {
  ASSERT_EQ(want.size(), n) << what;
  for (size_t i = 0; i < n; ++i) {
    if (want[i].is_null()) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << what << " [" << i << "] should be -inf, got " << got[i];
      continue;
    }
    const double w = want[i].get<double>();
    ASSERT_NEAR(got[i], w, (kAbsTol + kRelTol * std::fabs(w)) * tol_scale) << what << " [" << i << "]";
  }
}

class DSparkGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: ctest runs cases in parallel and must not rewrite files another case maps.
    dir_ = testing::TempPath("golden");
    std::filesystem::create_directories(dir_);
    ASSERT_TRUE(testing::WriteGoldenModels(dir_).ok());
    std::ifstream in(std::string(DSPARK_SOURCE_DIR) + "/tests/data/dspark/golden.json");
    ASSERT_TRUE(in.good()) << "missing tests/data/dspark/golden.json";
    golden_ = nlohmann::json::parse(in);
    std::ifstream tin(std::string(DSPARK_SOURCE_DIR) + "/tests/data/dspark/golden_truncated.json");
    ASSERT_TRUE(tin.good()) << "missing tests/data/dspark/golden_truncated.json";
    golden_truncated_ = nlohmann::json::parse(tin);
  }

  static inline std::string dir_;
  static inline nlohmann::json golden_;
  static inline nlohmann::json golden_truncated_;
  ThreadPool pool_{1};
};

// Runs every case of `golden` (drafts named by `draft_path(case)`) against `target_path` and
// compares with the reference; "hidden", "logits" and "block" are optional. full_block: the
// drafter runs the whole trained block (else its default, the rows the budget needs).
void CheckCases(const std::string& target_path, const std::function<std::string(const nlohmann::json&)>& draft_path,
                const nlohmann::json& golden, double tol_scale, ThreadPool& pool_, bool full_block = true) {
  auto tf = gguf::File::Open(target_path);
  ASSERT_TRUE(tf.ok()) << tf.status().message();
  std::shared_ptr<const gguf::File> file(std::move(*tf));
  auto target = Model::FromFile(file);
  ASSERT_TRUE(target.ok()) << target.status().message();
  auto tok = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(tok.ok());
  const int V = (*target)->config().n_vocab;
  const int E = (*target)->config().n_embd;
  ASSERT_GE(golden["cases"].size(), 1u);
  for (const auto& c : golden["cases"]) {
    const std::string which = c["draft"];
    const std::vector<int32_t> prompt = c["prompt"];
    const int split = c["split"];
    const int n = static_cast<int>(prompt.size()) - 1;
    SCOPED_TRACE("draft " + which + ", prompt of " + std::to_string(prompt.size()));
    DrafterConfig cfg;
    cfg.type = "draft-dspark";
    cfg.draft_model = draft_path(c);
    cfg.dspark_full_block = full_block;  // must match how the reference ran the block
    auto d = CreateDrafter(cfg, **target, **tok, pool_, 128);
    ASSERT_TRUE(d.ok()) << d.status().message();
    auto* ds = static_cast<DSparkDrafter*>(d->get());
    ds->set_keep_logits(true);
    // Target taps of the committed rows 0..n-1, as the engine produces them (F32 cache: the
    // numpy reference keeps K/V in full precision).
    KvCache cache((*target)->config(), 1, 128, DType::kF32);
    Batch b;
    for (int i = 0; i < n; ++i) b.Add(prompt[i], i, 0, false);
    ForwardOptions fo;
    fo.tap_layers = ds->Needs().target_tap_layers;
    auto out = (*target)->Forward(b, cache, pool_, fo);
    ASSERT_TRUE(out.ok());
    auto rows = [&](int from, int to) {
      TapRows r;
      r.pos0 = from;
      r.n_rows = to - from;
      r.n_embd = E;
      for (auto& t : out->taps) r.taps.push_back(t.data() + static_cast<size_t>(from) * E);
      return r;
    };

    DraftParams dp;
    dp.budget = c["budget"];
    Rng rng(3);
    for (bool two_steps : {false, true}) {
      SCOPED_TRACE(two_steps ? "injected over two steps" : "injected at once");
      ASSERT_TRUE(ds->Begin(0).ok());
      if (two_steps && split > 0) {
        // A first step whose block must leave no trace in the draft context.
        ASSERT_TRUE(ds->ObserveTaps(0, rows(0, split)).ok());
        std::vector<int32_t> partial(prompt.begin(), prompt.begin() + split + 1);
        ASSERT_TRUE(ds->Propose(0, partial, dp, rng).ok());
        ASSERT_TRUE(ds->ObserveTaps(0, rows(split, n)).ok());
      } else {
        ASSERT_TRUE(ds->ObserveTaps(0, rows(0, n)).ok());
      }
      auto draft = ds->Propose(0, prompt, dp, rng);
      ASSERT_TRUE(draft.ok()) << draft.status().message();
      EXPECT_EQ(draft->forward_passes, 1);
      const BlockOutput* blk = ds->last_block(0);
      const ChainResult* ch = ds->last_chain(0);
      if (c.contains("block")) {
        ASSERT_EQ(blk->n_rows, static_cast<int>(c["block"].size()));
        for (int r = 0; r < blk->n_rows; ++r) {
          ExpectRowNear(c["hidden"][r], blk->hidden.data() + static_cast<size_t>(r) * E, E, "hidden row " + std::to_string(r), tol_scale);
          ExpectRowNear(c["logits"][r], blk->logits.data() + static_cast<size_t>(r) * V, V, "logits row " + std::to_string(r), tol_scale);
        }
      }
      const std::vector<int32_t> want_tokens = c["tokens"];
      EXPECT_EQ(draft->tokens, want_tokens);
      ASSERT_EQ(ch->logits.size(), want_tokens.size() * V);
      for (size_t s = 0; s < want_tokens.size(); ++s)
        ExpectRowNear(c["biased_logits"][s], ch->logits.data() + s * V, V, "biased logits slot " + std::to_string(s), tol_scale);
      const std::vector<double> conf = c["confidence"];
      ASSERT_EQ(ch->confidence.size(), conf.size());
      for (size_t s = 0; s < conf.size(); ++s) EXPECT_NEAR(ch->confidence[s], conf[s], 1e-4 * tol_scale) << "slot " << s;
    }
  }
}


#ifndef DSPARK_EXPORT_CHECK
TEST_F(DSparkGolden, BlockLogitsChainAndConfidenceMatchReference) {
  CheckCases(
      dir_ + "/golden_target.gguf",
      [](const nlohmann::json& c) { return dir_ + "/golden_draft_" + c["draft"].get<std::string>() + ".gguf"; },
      golden_, 1.0, pool_);
}

// The default drafter runs only the block rows the budget needs; the reference drops the same
// trailing MASK rows (as queries, keys and values) and recomputes the block.
TEST_F(DSparkGolden, TruncatedBlockLogitsChainAndConfidenceMatchReference) {
  ASSERT_EQ(golden_truncated_["full_block"], false);
  CheckCases(
      dir_ + "/golden_target.gguf",
      [](const nlohmann::json& c) { return dir_ + "/golden_draft_" + c["draft"].get<std::string>() + ".gguf"; },
      golden_truncated_, 1.0, pool_, /*full_block=*/false);
}

// The truncated goldens exercise what truncation changes: against the whole-block goldens of the
// same draft, prompt and budget, a bidirectional block's kept rows differ beyond the tolerance
// (so a drafter that ran the whole block, or kept the dropped rows in the attention, fails the
// test above), and a causal block's kept rows are the whole block's first rows.
TEST_F(DSparkGolden, TruncatedGoldensDifferFromTheWholeBlockWhereAttentionSeesTheBlock) {
  int shorter = 0, changed = 0;
  for (const auto& t : golden_truncated_["cases"]) {
    for (const auto& f : golden_["cases"]) {
      if (f["draft"] != t["draft"] || f["prompt"] != t["prompt"] || f["budget"] != t["budget"]) continue;
      const size_t rows = t["block"].size();
      ASSERT_LE(rows, f["block"].size());
      if (rows == f["block"].size()) {
        EXPECT_EQ(t["logits"], f["logits"]) << t["draft"] << " budget " << t["budget"];
        continue;
      }
      ++shorter;
      double max_diff = 0, max_tol = 0;
      for (size_t r = 0; r < rows; ++r)
        for (size_t i = 0; i < t["logits"][r].size(); ++i) {
          if (t["logits"][r][i].is_null()) continue;
          const double w = f["logits"][r][i].get<double>();
          max_diff = std::max(max_diff, std::fabs(t["logits"][r][i].get<double>() - w));
          max_tol = std::max(max_tol, kAbsTol + kRelTol * std::fabs(w));
        }
      if (t["draft"] == "b") {  // GoldenDraft('b') has a causal block (tests/dspark/dspark_models.cc)
        EXPECT_LT(max_diff, 1e-6) << "causal block, budget " << t["budget"];
      } else if (max_diff > 10 * max_tol) {
        ++changed;
      }
    }
  }
  EXPECT_GE(shorter, 2);
  EXPECT_GE(changed, 1) << "no bidirectional truncated golden differs from its whole-block golden";
}

#else
// tools/train's PyTorch drafter exported by its exporter. Needs PyTorch: the ctest entry
// dspark_export_check (label python, part of `make test`) runs tests/data/dspark/check_export.py
// to write the directory, then this binary.
TEST_F(DSparkGolden, ExportedPyTorchDrafterMatches) {
  const char* dir = std::getenv("DSPARK_EXPORT_CHECK_DIR");
  ASSERT_NE(dir, nullptr) << "set DSPARK_EXPORT_CHECK_DIR (run tests/data/dspark/check_export.py)";
  std::ifstream in(std::string(dir) + "/golden.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json g = nlohmann::json::parse(in);
  const std::string draft = g["draft"];
  // F16 weights and PyTorch float32 vs float64 taps: looser than the float32 goldens.
  CheckCases(g["target"], [&](const nlohmann::json&) { return draft; }, g, 10.0, pool_);
}
#endif  // DSPARK_EXPORT_CHECK

}  // namespace
}  // namespace dspark
