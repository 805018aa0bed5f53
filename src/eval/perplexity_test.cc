// dspark perplexity's computations: llama.cpp's chunking and scoring, its logits file layout, and
// KL divergence against such a file.
#include "eval/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/testing/tiny_models.h"

namespace dspark {
namespace {

using testing::TinySpec;
using testing::WriteTiny;

class PerplexityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SynthSpec spec = TinySpec("qwen3", DType::kF32);
    spec.embedding_gain = 2.0f;
    f32_path_ = WriteTiny(spec, "ppl_f32");
    spec.matrix_type = DType::kQ8_0;
    q8_path_ = WriteTiny(spec, "ppl_q8");
  }
  void SetUp() override {
    auto m = Model::Load(f32_path_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(*m);
    for (int i = 0; i < 70; ++i) tokens_.push_back(i == 0 ? 1 : 3 + (i * 37 + i / 5) % 290);
    options_.n_ctx = 16;
    options_.n_batch = 6;  // several passes per chunk
    options_.bos_id = 1;
    options_.cache_type = DType::kF32;
  }
  static inline std::string f32_path_, q8_path_;
  std::unique_ptr<Model> model_;
  ThreadPool pool_{2};
  std::vector<int32_t> tokens_;
  PerplexityOptions options_;
};

// The expected value computed another way: each chunk in one pass, every row's log-softmax in
// double, the second half scored.
TEST_F(PerplexityTest, ScoresTheSecondHalfOfEachChunkAsLlamaCpp) {
  auto r = Perplexity(*model_, pool_, tokens_, options_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->n_chunk, 4);  // 70 tokens / 16
  ASSERT_EQ(r->count, 4 * 7);  // positions 8..14 predict 9..15
  const int V = model_->config().n_vocab;
  double nll = 0;
  for (int c = 0; c < 4; ++c) {
    KvCache cache(model_->config(), 1, 16, DType::kF32);
    Batch b;
    for (int i = 0; i < 16; ++i) b.Add(i == 0 ? 1 : tokens_[c * 16 + i], i, 0, true);
    auto out = model_->Forward(b, cache, pool_);
    ASSERT_TRUE(out.ok());
    for (int i = 8; i < 15; ++i) {
      const float* row = out->Logits(i, V);
      double mx = row[0], sum = 0;
      for (int v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
      for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
      nll += -(row[tokens_[c * 16 + i + 1]] - mx - std::log(sum));
    }
  }
  EXPECT_NEAR(r->ppl, std::exp(nll / 28), 1e-4 * r->ppl);
  EXPECT_GT(r->ppl_error, 0);
  EXPECT_EQ(r->running.size(), 4u);
  EXPECT_DOUBLE_EQ(r->running.back(), r->ppl);
  options_.n_chunks = 2;
  auto two = Perplexity(*model_, pool_, tokens_, options_);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->n_chunk, 2);
  EXPECT_DOUBLE_EQ(two->running[1], r->running[1]);  // chunk order and batching do not matter
}

TEST_F(PerplexityTest, WritesLlamaCppsLogitsFileAndReadsItBack) {
  const std::string path = testing::TempPath("base.kld");
  auto r = Perplexity(*model_, pool_, tokens_, options_, path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const int V = model_->config().n_vocab, nv = 2 * ((V + 1) / 2) + 4;
  EXPECT_EQ(std::filesystem::file_size(path), 8u + 12u + 4u * 16 * 4 + 4u * 7 * nv * 2);
  std::ifstream in(path, std::ios::binary);
  auto h = ReadLogitsHeader(in, path);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->n_ctx, 16);
  EXPECT_EQ(h->n_vocab, V);
  EXPECT_EQ(h->n_chunk, 4);
  EXPECT_EQ(std::vector<int32_t>(h->tokens.begin(), h->tokens.end()),
            std::vector<int32_t>(tokens_.begin(), tokens_.begin() + 64));  // as tokenised, BOS not substituted
  // The same model: no divergence beyond the 16-bit rounding of the base, the same top token.
  auto same = KlDivergence(*model_, pool_, path, options_);
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_EQ(same->count, 28);
  EXPECT_EQ(same->n_same_top, 28);
  const auto kld = KlDivergenceResult::MeanAndError(same->sum_kld, same->sum_kld2, same->count);
  EXPECT_LT(std::fabs(kld.first), 1e-5);
  const auto nll = KlDivergenceResult::MeanAndError(same->sum_nll, same->sum_nll2, same->count);
  EXPECT_NEAR(std::exp(nll.first), r->ppl, 1e-4 * r->ppl);
  // Its Q8_0 quantisation diverges measurably, far above that rounding.
  auto q8 = Model::Load(q8_path_);
  ASSERT_TRUE(q8.ok());
  auto quant = KlDivergence(**q8, pool_, path, options_);
  ASSERT_TRUE(quant.ok()) << quant.status().message();
  const double q8_kld = quant->sum_kld / quant->count;
  EXPECT_GT(q8_kld, 1e-5);
  EXPECT_LT(q8_kld, 0.5);
}

TEST_F(PerplexityTest, BadInputsAreClearErrors) {
  auto short_text = Perplexity(*model_, pool_, std::vector<int32_t>(tokens_.begin(), tokens_.begin() + 20), options_);
  ASSERT_FALSE(short_text.ok());
  EXPECT_NE(short_text.status().message().find("needs at least 32"), std::string::npos) << short_text.status().message();

  const std::string junk = testing::TempPath("junk.kld");
  std::ofstream(junk, std::ios::binary) << "not a logits file";
  auto bad = KlDivergence(*model_, pool_, junk, options_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("_logits_"), std::string::npos) << bad.status().message();

  const std::string path = testing::TempPath("trunc.kld");
  ASSERT_TRUE(Perplexity(*model_, pool_, tokens_, options_, path).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  auto truncated = KlDivergence(*model_, pool_, path, options_);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("chunk 4 are truncated"), std::string::npos) << truncated.status().message();

  SynthSpec other = TinySpec("qwen3", DType::kF32, 320);
  auto wider = Model::Load(WriteTiny(other, "ppl_vocab320"));
  ASSERT_TRUE(wider.ok());
  ASSERT_TRUE(Perplexity(*model_, pool_, tokens_, options_, path).ok());
  auto vocab = KlDivergence(**wider, pool_, path, options_);
  ASSERT_FALSE(vocab.ok());
  EXPECT_NE(vocab.status().message().find("vocabulary of 300 tokens, the model has 320"), std::string::npos)
      << vocab.status().message();
}

TEST(Percentile, InterpolatesAsLlamaCpp) {
  const std::vector<float> v = {0, 1, 2, 3, 4};
  EXPECT_FLOAT_EQ(Percentile(v, 0.5f), 2.0f);
  EXPECT_FLOAT_EQ(Percentile(v, 0.99f), 3.96f);
  EXPECT_FLOAT_EQ(Percentile(v, 1.0f), 4.0f);
  EXPECT_FLOAT_EQ(Percentile(v, 0.0f), 0.0f);
}

}  // namespace
}  // namespace dspark
