// dspark against llama.cpp on the tiny random models of tests/data/llamacpp (every architecture,
// deepseek2 in each attention layout, gating function and query path, F16 and quantised weights).
// llama.cpp's llama-perplexity scored text.txt on each and saved its logits file
// (--kl-divergence-base); dspark runs the same tokens and must agree: mean KL divergence from
// llama.cpp's distributions <= 0.005 nats over a 512-token chunk, the same top token at (nearly)
// every position, the same perplexity. make_goldens.sh regenerates the data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "eval/perplexity.h"
#include "llamacpp/golden_models.h"
#include "model/model.h"

namespace dspark {
namespace {

const std::string kDir = DSPARK_LLAMACPP_DIR;

struct Golden {
  std::string name;
  double ppl = 0, ppl_error = 0;
};

std::vector<Golden> ReadGoldens() {
  std::vector<Golden> out;
  std::ifstream in(kDir + "/llamacpp.tsv");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream row(line);
    Golden g;
    if (row >> g.name >> g.ppl >> g.ppl_error) out.push_back(g);
  }
  return out;
}

class LlamaCppGolden : public ::testing::TestWithParam<Golden> {};

TEST_P(LlamaCppGolden, AgreesWithLlamaCppLogits) {
  const Golden& g = GetParam();
  auto model = Model::Load(kDir + "/" + g.name + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status().message();
  ThreadPool pool(2);
  PerplexityOptions options;  // llama-perplexity's defaults, as make_goldens.sh ran it: -c 512, F16 cache
  options.n_ctx = 512;
  options.n_batch = 512;
  const std::string base = kDir + "/" + g.name + ".kld";
  auto kld = KlDivergence(**model, pool, base, options);
  ASSERT_TRUE(kld.ok()) << kld.status().message();
  ASSERT_EQ(kld->count, 255) << "one 512-token chunk scores its last 255 positions";

  const auto [mean_kld, kld_error] = KlDivergenceResult::MeanAndError(kld->sum_kld, kld->sum_kld2, kld->count);
  std::vector<float> sorted = kld->kld_values;
  std::sort(sorted.begin(), sorted.end());
  const double same_top = static_cast<double>(kld->n_same_top) / kld->count;
  RecordProperty("mean_kld", std::to_string(mean_kld));
  std::printf("%-20s mean KLD %.6f +/- %.6f, 99%% %.6f, max %.6f, same top %.1f%%\n", g.name.c_str(), mean_kld,
              kld_error, Percentile(sorted, 0.99f), sorted.back(), 100 * same_top);
  // Float weights: the same function up to summation order, so llama.cpp's 16-bit log-probabilities
  // are the floor. Quantised ones: both engines also quantise the activations, each at its own
  // rounding points, and a position can then flip between near-tied tokens.
  const bool quantised = g.name.find("q8_0") != std::string::npos || g.name.find("q4_k") != std::string::npos;
  EXPECT_LE(mean_kld, quantised ? 0.005 : 1e-4);
  EXPECT_LE(Percentile(sorted, 0.99f), quantised ? 0.02 : 1e-3);
  EXPECT_GE(same_top, quantised ? 0.97 : 0.99);

  // Perplexity over the same positions: dspark's equals the estimate llama-perplexity printed.
  const double ppl = std::exp(kld->sum_nll / kld->count);
  EXPECT_NEAR(std::log(ppl), std::log(g.ppl), 0.01) << "dspark " << ppl << ", llama.cpp " << g.ppl;
}

// The data covers every model golden_models.cc defines, so a model cannot drop out unnoticed.
TEST(LlamaCppGoldens, EveryModelHasLlamaCppLogits) {
  std::vector<std::string> have, want;
  for (const Golden& g : ReadGoldens()) have.push_back(g.name);
  for (const auto& [name, spec] : testing::LlamaCppGoldenModels()) want.push_back(name);
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(have, want) << kDir << "/llamacpp.tsv is stale: run tests/llamacpp/make_goldens.sh";
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaCppGolden, ::testing::ValuesIn(ReadGoldens()),
                         [](const ::testing::TestParamInfo<Golden>& info) {
                           std::string n = info.param.name;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace dspark
