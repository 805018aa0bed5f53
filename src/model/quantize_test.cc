// `dspark quantize` mixtures: llama.cpp's Q4_K_M rule per tensor, on files with K-quant-sized rows
// and on tiny ones that take the shape fallbacks (the uniform types: model_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/testing/tiny_models.h"

namespace dspark {
namespace {

using testing::TinySpec;
using testing::WriteTiny;

TEST(QuantizeMix, NamesParseToATypeOrAMixture) {
  const auto m = QuantizeTargetFromName("q4_k_m");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->type, DType::kQ4_K);
  EXPECT_EQ(m->mix, QuantizeMix::kQ4_K_M);
  const auto u = QuantizeTargetFromName("Q8_0");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->type, DType::kQ8_0);
  EXPECT_EQ(u->mix, QuantizeMix::kUniform);
  EXPECT_FALSE(QuantizeTargetFromName("Q4_K_S").has_value());
  EXPECT_FALSE(QuantizeTargetFromName("I64").has_value());
}

// llama.cpp's use_more_bits for a 28-layer model (Qwen3-1.7B's depth): layers 0-2, 24-27 and
// every third from 5.
TEST(QuantizeMix, Q4KMGivesAttnVAndFfnDownMoreBitsInLlamaCppsLayers) {
  const QuantizeTarget q4km{DType::kQ4_K, QuantizeMix::kQ4_K_M};
  QuantizeFileFacts facts;
  facts.n_layer = facts.n_attn_v = 28;
  facts.has_output = true;
  const std::set<int> more = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27};
  for (int il = 0; il < 28; ++il) {
    const DType want = more.count(il) ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(QuantizeTensorType(q4km, fmt::format("blk.{}.attn_v.weight", il), facts), want) << il;
    EXPECT_EQ(QuantizeTensorType(q4km, fmt::format("blk.{}.ffn_down.weight", il), facts), want) << il;
    for (const char* part : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
      EXPECT_EQ(QuantizeTensorType(q4km, fmt::format("blk.{}.{}.weight", il, part), facts), DType::kQ4_K) << part;
  }
  EXPECT_EQ(QuantizeTensorType(q4km, "output.weight", facts), DType::kQ6_K);
  EXPECT_EQ(QuantizeTensorType(q4km, "token_embd.weight", facts), DType::kQ4_K);
  facts.has_output = false;  // tied: the embedding is the LM head
  EXPECT_EQ(QuantizeTensorType(q4km, "token_embd.weight", facts), DType::kQ6_K);
  facts.n_expert = 8;  // llama.cpp's 8-expert case
  EXPECT_EQ(QuantizeTensorType(q4km, "blk.4.attn_v.weight", facts), DType::kQ8_0);
  EXPECT_EQ(QuantizeTensorType(q4km, "blk.4.attn_k.weight", facts), DType::kQ8_0);
  EXPECT_EQ(QuantizeTensorType(q4km, "blk.4.attn_output.weight", facts), DType::kQ5_K);
  // A uniform target is the type itself whatever the tensor.
  EXPECT_EQ(QuantizeTensorType(QuantizeTarget{DType::kQ8_0}, "output.weight", facts), DType::kQ8_0);
}

// The written file: every tensor in the type the rule gives it (8 layers: more bits in 0, 3, 6, 7),
// with the LM head's Q6_K on output.weight (untied) or on the embedding (tied); it loads and runs.
TEST(QuantizeMix, Q4KMFileHasLlamaCppsTypePerTensorAndRuns) {
  for (const bool tied : {false, true}) {
    SynthSpec spec = TinySpec("qwen3", DType::kQ4_K);  // rows of 256 and 512: K-quant super-blocks
    spec.matrix_type = DType::kF32;
    spec.n_layer = 8;
    spec.tied_embeddings = tied;
    const std::string tag = tied ? "tied" : "untied";
    const std::string src = WriteTiny(spec, "q4km_src_" + tag);
    const std::string out = testing::TempPath("q4km_" + tag + ".gguf");
    QuantizeReport report;
    ASSERT_TRUE(QuantizeFile(src, out, QuantizeTarget{DType::kQ4_K, QuantizeMix::kQ4_K_M}, &report).ok());
    auto file = gguf::File::Open(out);
    ASSERT_TRUE(file.ok()) << file.status().message();
    const std::set<int> more = {0, 3, 6, 7};
    int checked = 0;
    for (const auto& t : (*file)->tensors()) {
      DType want = DType::kQ4_K;
      int il = -1;
      if (t.ne.size() < 2) {
        want = DType::kF32;
      } else if (t.name == "output.weight" || (t.name == "token_embd.weight" && tied)) {
        want = DType::kQ6_K;
      } else if (std::sscanf(t.name.c_str(), "blk.%d.", &il) == 1 &&
                 (t.name.find("attn_v.") != std::string::npos || t.name.find("ffn_down.") != std::string::npos)) {
        want = more.count(il) ? DType::kQ6_K : DType::kQ4_K;
      }
      EXPECT_EQ(DTypeName(t.type), DTypeName(want)) << tag << " " << t.name;
      ++checked;
    }
    EXPECT_EQ(checked, 8 * 11 + 2 + (tied ? 0 : 1));
    EXPECT_EQ(*(*file)->GetIntOr("general.file_type", -1), 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
    auto q = Model::Load(out);
    ASSERT_TRUE(q.ok()) << q.status().message();
    ThreadPool pool(2);
    KvCache cache((*q)->config(), 1, 32, DType::kF32);
    Batch batch;
    for (int i = 0; i < 4; ++i) batch.Add(i + 1, i, 0, i == 3);
    auto fwd = (*q)->Forward(batch, cache, pool);
    ASSERT_TRUE(fwd.ok()) << fwd.status().message();
    for (float x : fwd->logits) ASSERT_TRUE(std::isfinite(x));
  }
}

// `dspark synth --type Q4_K_M` gives every matrix the type `dspark quantize` Q4_K_M gives it, dense,
// mixture-of-experts and MLA (both layouts) alike: benchmark files match what users quantise.
TEST(QuantizeMix, SynthQ4KMMatchesQuantize) {
  struct Case {
    const char* name;
    const char* arch;
    bool split_kv_b;
  };
  for (const Case& c : {Case{"qwen3", "qwen3", true}, Case{"qwen3moe", "qwen3moe", true},
                        Case{"deepseek2", "deepseek2", true}, Case{"deepseek2-kv_b", "deepseek2", false}}) {
    const std::string name = c.name;
    SynthSpec spec = TinySpec(c.arch, DType::kQ4_K);  // rows of 256: K-quant super-blocks
    spec.n_layer = 8;
    spec.split_kv_b = c.split_kv_b;
    spec.matrix_type = DType::kF32;
    const std::string src = WriteTiny(spec, "synth_q4km_src_" + name);
    const std::string quantised = testing::TempPath("synth_q4km_quantised_" + name + ".gguf");
    QuantizeReport report;
    ASSERT_TRUE(QuantizeFile(src, quantised, QuantizeTarget{DType::kQ4_K, QuantizeMix::kQ4_K_M}, &report).ok());
    spec.matrix_type = DType::kQ4_K;
    spec.matrix_mix = QuantizeMix::kQ4_K_M;
    const std::string synth = WriteTiny(spec, "synth_q4km_" + name);
    auto a = gguf::File::Open(quantised);
    auto b = gguf::File::Open(synth);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size()) << name;
    std::set<DType> types;
    for (const auto& t : (*a)->tensors()) {
      const gguf::TensorInfo* u = (*b)->FindTensor(t.name);
      ASSERT_NE(u, nullptr) << name << " " << t.name;
      EXPECT_EQ(DTypeName(u->type), DTypeName(t.type)) << name << " " << t.name;
      types.insert(t.type);
    }
    EXPECT_TRUE(types.count(DType::kQ6_K)) << name << ": the mixture gives some matrices more bits";
    EXPECT_TRUE(types.count(DType::kQ4_K)) << name;
  }
}

// Rows shorter than a super-block take llama.cpp's fallbacks: Q6_K -> Q8_0, Q4_K -> Q5_0.
TEST(QuantizeMix, Q4KMOnShortRowsTakesTheFallbacks) {
  SynthSpec spec = TinySpec("qwen3", DType::kF32);  // n_embd 64
  spec.n_layer = 8;
  const std::string src = WriteTiny(spec, "q4km_short_src");
  const std::string out = testing::TempPath("q4km_short.gguf");
  QuantizeReport report;
  ASSERT_TRUE(QuantizeFile(src, out, QuantizeTarget{DType::kQ4_K, QuantizeMix::kQ4_K_M}, &report).ok());
  auto file = gguf::File::Open(out);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->FindTensor("token_embd.weight")->type, DType::kQ8_0);  // tied LM head
  EXPECT_EQ((*file)->FindTensor("blk.0.attn_v.weight")->type, DType::kQ8_0);
  EXPECT_EQ((*file)->FindTensor("blk.1.attn_v.weight")->type, DType::kQ5_0);
  EXPECT_EQ((*file)->FindTensor("blk.1.attn_q.weight")->type, DType::kQ5_0);
}

}  // namespace
}  // namespace dspark
