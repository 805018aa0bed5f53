// Mixture-of-experts blocks: routing as llama.cpp's build_moe_ffn computes it, rows grouped by
// expert with results independent of the batch, the expert union a pass reads, and clear errors
// for malformed expert files. The forward pass against a double reference: arch_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/synth.h"
#include "model/testing/tiny_models.h"

namespace dspark {
namespace {

using testing::TinySpec;
using testing::WriteTiny;

TEST(RouteExperts, SoftmaxTopKNormalisedAsLlamaCpp) {
  MoeConfig m;
  m.n_expert = 4;
  m.n_expert_used = 2;
  const float logits[] = {0.0f, 2.0f, 1.0f, 2.0f};  // a tie between experts 1 and 3
  int32_t ids[2];
  float w[2];
  RouteExperts(m, logits, 1, ids, w);
  EXPECT_EQ(ids[0], 1);  // ties go to the lower index
  EXPECT_EQ(ids[1], 3);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);

  m.norm_weights = false;
  const float two[] = {1.0f, 0.0f, 3.0f, 2.0f};
  RouteExperts(m, two, 1, ids, w);
  const double z = std::exp(1.0) + 1.0 + std::exp(3.0) + std::exp(2.0);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);  // the softmax over all experts, not renormalised
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);

  m.gating = ExpertGating::kSigmoid;
  m.norm_weights = true;
  m.weights_scale = 2.5f;
  RouteExperts(m, two, 1, ids, w);
  const double s3 = 1 / (1 + std::exp(-3.0)), s2 = 1 / (1 + std::exp(-2.0));
  EXPECT_NEAR(w[0], 2.5 * s3 / (s3 + s2), 1e-6);
  EXPECT_NEAR(w[1], 2.5 * s2 / (s3 + s2), 1e-6);
}

// A tiny model: qwen3moe, or llama with experts (Mixtral's layout).
std::string WriteMoe(const std::string& arch, DType type, const std::string& tag) {
  SynthSpec spec = TinySpec("qwen3moe", type);
  spec.arch = arch;
  return WriteTiny(spec, tag);
}

std::vector<float> Logits(Model& m, KvCache& cache, ThreadPool& pool, const Batch& b, int64_t* experts = nullptr) {
  auto o = m.Forward(b, cache, pool);
  EXPECT_TRUE(o.ok()) << o.status().message();
  if (!o.ok()) return {};
  if (experts != nullptr) *experts = o->experts_read;
  return o->logits;
}

class MoeBatch : public ::testing::TestWithParam<std::pair<std::string, DType>> {};

// A sequence's rows give the same logits, bit for bit, one token at a time, as one verification
// block, and in a pass shared with another sequence's block and a third's decode row.
TEST_P(MoeBatch, RowsAreBitwiseIdenticalWhateverTheBatch) {
  const auto& [arch, type] = GetParam();
  const std::string path = WriteMoe(arch, type, fmt::format("moe_batch_{}_{}", arch, DTypeName(type)));
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = **model;
  const ModelConfig& c = m.config();
  ASSERT_TRUE(c.moe.enabled());
  ThreadPool pool(2);
  const std::vector<int32_t> tokens = {5, 17, 33, 2, 90, 41, 7, 64, 12, 3};
  const size_t V = c.n_vocab;

  KvCache single(c, 1, 64);
  std::vector<float> one_by_one;
  for (size_t i = 0; i < tokens.size(); ++i) {
    Batch b;
    b.Add(tokens[i], static_cast<int>(i), 0, true);
    int64_t experts = 0;
    const auto l = Logits(m, single, pool, b, &experts);
    EXPECT_EQ(experts, int64_t{c.moe.n_expert_used} * c.n_layer);  // a decode row reads its k experts
    one_by_one.insert(one_by_one.end(), l.begin(), l.end());
  }

  KvCache block_cache(c, 1, 64);
  Batch block;
  for (size_t i = 0; i < tokens.size(); ++i) block.Add(tokens[i], static_cast<int>(i), 0, true);
  int64_t union_read = 0;
  const auto blocked = Logits(m, block_cache, pool, block, &union_read);
  ASSERT_EQ(blocked.size(), one_by_one.size());
  EXPECT_EQ(std::memcmp(blocked.data(), one_by_one.data(), blocked.size() * sizeof(float)), 0);
  // The block reads each chosen expert once: the union, between k and every expert per block.
  EXPECT_GE(union_read, int64_t{c.moe.n_expert_used} * c.n_layer);
  EXPECT_LE(union_read, int64_t{c.moe.n_expert} * c.n_layer);
  EXPECT_LT(union_read, int64_t{c.moe.n_expert_used} * c.n_layer * static_cast<int64_t>(tokens.size()));

  KvCache shared(c, 3, 64);
  Batch mixed;
  for (size_t i = 0; i < tokens.size(); ++i) {
    mixed.Add(tokens[i], static_cast<int>(i), 1, true);
    mixed.Add(tokens[tokens.size() - 1 - i], static_cast<int>(i), 0, i % 3 == 0);
  }
  mixed.Add(99, 0, 2, true);
  auto o = m.Forward(mixed, shared, pool);
  ASSERT_TRUE(o.ok()) << o.status().message();
  size_t k = 0;
  for (size_t r = 0; r < o->logit_rows.size(); ++r) {
    const BatchRow& row = mixed.rows[o->logit_rows[r]];
    if (row.seq != 1) continue;
    EXPECT_EQ(std::memcmp(o->Logits(r, c.n_vocab), one_by_one.data() + row.pos * V, V * sizeof(float)), 0)
        << "position " << row.pos;
    ++k;
  }
  EXPECT_EQ(k, tokens.size());
}

INSTANTIATE_TEST_SUITE_P(Types, MoeBatch,
                         ::testing::Values(std::pair<std::string, DType>{"qwen3moe", DType::kF32},
                                           std::pair<std::string, DType>{"qwen3moe", DType::kQ8_0},
                                           std::pair<std::string, DType>{"qwen3moe", DType::kQ4_K},
                                           std::pair<std::string, DType>{"qwen3moe", DType::kBF16},
                                           std::pair<std::string, DType>{"llama", DType::kQ6_K},
                                           std::pair<std::string, DType>{"llama", DType::kF16}),
                         [](const auto& info) { return fmt::format("{}_{}", info.param.first, DTypeName(info.param.second)); });

// Rewrites a good tiny file of `arch` with `edit` applied to its metadata and `keep` to its tensors.
std::string Rewrite(const std::string& tag, const std::function<void(gguf::Writer&)>& edit,
                    const std::function<bool(const gguf::TensorInfo&, std::vector<int64_t>&)>& keep = nullptr,
                    const std::string& arch = "qwen3moe") {
  const std::string good = WriteTiny(TinySpec(arch, DType::kF32), arch + "_good");
  auto f = gguf::File::Open(good);
  EXPECT_TRUE(f.ok());
  gguf::Writer w;
  w.CopyMetadataFrom(**f);
  edit(w);
  for (const auto& t : (*f)->tensors()) {
    std::vector<int64_t> ne = t.ne;
    if (keep && !keep(t, ne)) continue;
    size_t bytes = RowBytes(t.type, ne[0]);  // the data of the (possibly reshaped) tensor
    for (size_t d = 1; d < ne.size(); ++d) bytes *= static_cast<size_t>(ne[d]);
    EXPECT_TRUE(w.AddTensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + std::min<size_t>(bytes, t.nbytes))).ok());
  }
  const std::string out = testing::TempPath(tag + ".gguf");
  EXPECT_TRUE(w.WriteFile(out).ok());
  return out;
}

void ExpectLoadError(const std::string& path, const std::vector<std::string>& parts) {
  auto m = Model::Load(path);
  ASSERT_FALSE(m.ok()) << path;
  for (const std::string& p : parts)
    EXPECT_NE(m.status().message().find(p), std::string::npos) << "'" << p << "' not in: " << m.status().message();
}

TEST(MoeLoad, MalformedExpertFilesAreClearErrors) {
  ExpectLoadError(Rewrite("moe_used", [](gguf::Writer& w) { w.SetU32("qwen3moe.expert_used_count", 9); }),
                  {"qwen3moe.expert_used_count", "= 9 exceeds", "qwen3moe.expert_count", "= 8"});
  ExpectLoadError(Rewrite("moe_none", [](gguf::Writer& w) { w.SetU32("qwen3moe.expert_count", 0); }),
                  {"qwen3moe.expert_count", "mixture-of-experts"});
  ExpectLoadError(Rewrite("moe_gating", [](gguf::Writer& w) { w.SetU32("qwen3moe.expert_gating_func", 7); }),
                  {"qwen3moe.expert_gating_func", "= 7"});
  // One expert short: the 3-D tensor's shape is named with what was expected.
  ExpectLoadError(Rewrite("moe_shape", [](gguf::Writer&) {},
                          [](const gguf::TensorInfo& t, std::vector<int64_t>& ne) {
                            if (t.name == "blk.1.ffn_up_exps.weight") ne[2] -= 1;
                            return true;
                          }),
                  {"blk.1.ffn_up_exps.weight", "expected [64, 32, 8]", "n_expert=8"});
  ExpectLoadError(Rewrite("moe_router", [](gguf::Writer&) {},
                          [](const gguf::TensorInfo& t, std::vector<int64_t>&) { return t.name != "blk.0.ffn_gate_inp.weight"; }),
                  {"blk.0.ffn_gate_inp.weight", "missing"});
}

TEST(MoeLoad, MalformedDeepseekFilesAreClearErrors) {
  const auto none = [](const gguf::TensorInfo&, std::vector<int64_t>&) { return true; };
  ExpectLoadError(Rewrite("mla_rank", [](gguf::Writer& w) { w.SetU32("deepseek2.attention.kv_lora_rank", 0); }, none,
                          "deepseek2"),
                  {"deepseek2.attention.kv_lora_rank", "must be > 0"});
  ExpectLoadError(Rewrite("mla_nope", [](gguf::Writer& w) { w.SetU32("deepseek2.attention.key_length_mla", 16); }, none,
                          "deepseek2"),
                  {"key size 16", "rope.dimension_count 16"});
  ExpectLoadError(Rewrite("mla_groups", [](gguf::Writer& w) {
                            w.SetU32("deepseek2.expert_group_count", 3);
                            w.SetU32("deepseek2.expert_group_used_count", 1);
                          }, none, "deepseek2"),
                  {"3 expert groups", "8 experts"});
  ExpectLoadError(Rewrite("mla_kv_a", [](gguf::Writer&) {},
                          [](const gguf::TensorInfo& t, std::vector<int64_t>&) { return t.name != "blk.2.attn_kv_a_mqa.weight"; },
                          "deepseek2"),
                  {"blk.2.attn_kv_a_mqa.weight", "missing"});
  ExpectLoadError(Rewrite("mla_shexp", [](gguf::Writer&) {},
                          [](const gguf::TensorInfo& t, std::vector<int64_t>&) { return t.name != "blk.1.ffn_up_shexp.weight"; },
                          "deepseek2"),
                  {"blk.1.ffn_up_shexp.weight", "missing"});
  // The leading dense block keeps a dense FFN: an expert tensor there is not what the file says.
  ExpectLoadError(Rewrite("mla_dense", [](gguf::Writer&) {},
                          [](const gguf::TensorInfo& t, std::vector<int64_t>&) { return t.name != "blk.0.ffn_gate.weight"; },
                          "deepseek2"),
                  {"blk.0.ffn_gate.weight", "missing"});
}

}  // namespace
}  // namespace dspark
