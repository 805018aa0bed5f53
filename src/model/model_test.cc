// The forward pass on tiny random-weight GGUF files: batching, KV rollback and copies, masks, taps,
// profiling, context and load errors, the Q8_0 KV cache, quantisation. Every architecture against
// a double-precision reference forward pass: arch_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "kernels/ops.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/quantize.h"
#include "model/synth.h"
#include "model/testing/reference.h"
#include "model/testing/tiny_models.h"

namespace dspark {
namespace {

using testing::Prompt;
using testing::RelErr;
using testing::TinySpec;
using testing::WriteTiny;

class TinyQwen3 : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = WriteTiny(TinySpec("qwen3", DType::kF32), "fixture");
    auto m = Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(*m);
  }
  std::vector<float> RunAll(KvCache& cache, int seq, const std::vector<int32_t>& tokens, int start_pos) {
    Batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.Add(tokens[i], start_pos + static_cast<int>(i), seq, true);
    auto o = model_->Forward(b, cache, pool_);
    EXPECT_TRUE(o.ok()) << o.status().message();
    return o.ok() ? o->logits : std::vector<float>{};
  }
  std::string path_;
  std::unique_ptr<Model> model_;
  ThreadPool pool_{2};
};

TEST_F(TinyQwen3, RollbackThenDecodeEqualsFreshRun) {
  const ModelConfig& c = model_->config();
  KvCache cache(c, 1, 64);
  RunAll(cache, 0, {5, 6, 7, 8, 9, 10, 11, 12}, 0);
  ASSERT_TRUE(cache.Truncate(0, 5).ok());
  const auto after = RunAll(cache, 0, {40, 41, 42}, 5);
  KvCache fresh(c, 1, 64);
  const auto all = RunAll(fresh, 0, {5, 6, 7, 8, 9, 40, 41, 42}, 0);
  ASSERT_EQ(after.size(), 3u * c.n_vocab);
  for (size_t i = 0; i < after.size(); ++i) ASSERT_FLOAT_EQ(after[i], all[5 * c.n_vocab + i]);
}

TEST_F(TinyQwen3, SequencesInOneBatchDoNotInteract) {
  const ModelConfig& c = model_->config();
  KvCache solo(c, 1, 64);
  const auto a = RunAll(solo, 0, {3, 4, 5, 6}, 0);
  KvCache shared(c, 3, 64);
  Batch b;
  const int32_t other[] = {100, 101, 102};
  for (int i = 0; i < 4; ++i) {
    b.Add(std::vector<int32_t>{3, 4, 5, 6}[i], i, 2, true);
    if (i < 3) b.Add(other[i], i, 0, false);
  }
  auto o = model_->Forward(b, shared, pool_);
  ASSERT_TRUE(o.ok());
  ASSERT_EQ(o->logit_rows.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(o->logits[i], a[i], 1e-4);
  EXPECT_EQ(shared.Length(2), 4);
  EXPECT_EQ(shared.Length(0), 3);
}

TEST_F(TinyQwen3, ExplicitCausalMaskEqualsDefaultAndBidirectionalDiffers) {
  const ModelConfig& c = model_->config();
  const std::vector<int32_t> toks = {7, 8, 9, 10};
  KvCache c1(c, 1, 64), c2(c, 1, 64), c3(c, 1, 64);
  const auto causal = RunAll(c1, 0, toks, 0);
  Batch b;
  for (int i = 0; i < 4; ++i) b.Add(toks[i], i, 0, true);
  b.mask.assign(16, 0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) b.mask[i * 4 + j] = 1;
  auto o = model_->Forward(b, c2, pool_);
  ASSERT_TRUE(o.ok());
  for (size_t i = 0; i < causal.size(); ++i) ASSERT_FLOAT_EQ(o->logits[i], causal[i]);
  std::fill(b.mask.begin(), b.mask.end(), 1);
  auto bi = model_->Forward(b, c3, pool_);
  ASSERT_TRUE(bi.ok());
  EXPECT_NE(bi->logits[0], causal[0]);  // row 0 now sees the rows after it
}

// A token tree's leaf sees its ancestors and itself, not the chain rows between them; its logits
// are bitwise those plain decoding computes for the same token at the same position, as a chain
// row's are, in every cache type: the engine then commits a leaf's bonus token exactly as plain
// decoding would.
TEST_F(TinyQwen3, TokenTreeLeafRowsEqualPlainDecodingBitwise) {
  const ModelConfig& c = model_->config();
  const std::vector<int32_t> prefix = {5, 6, 7};
  for (DType type : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(type));
    // Anchor 8 at position 3, chain 9 10 11 at 4-6, leaves 40 (beside 9) and 41 (beside 11).
    KvCache tree_cache(c, 1, 64, type);
    RunAll(tree_cache, 0, prefix, 0);
    Batch b;
    const int32_t tokens[] = {8, 9, 10, 11, 40, 41};
    const int32_t pos[] = {3, 4, 5, 6, 4, 6};
    const int parent[] = {-1, 0, 1, 2, 0, 2};
    for (int i = 0; i < 6; ++i) b.Add(tokens[i], pos[i], 0, true);
    b.mask.assign(36, 0);
    for (int r = 0; r < 6; ++r)
      for (int a = r; a >= 0; a = parent[a]) b.mask[r * 6 + a] = 1;
    auto tree = model_->Forward(b, tree_cache, pool_);
    ASSERT_TRUE(tree.ok()) << tree.status().message();
    const size_t v = static_cast<size_t>(c.n_vocab);
    // Plain decoding of each root-to-node path, one row per pass.
    const auto plain_last = [&](const std::vector<int32_t>& path) {
      KvCache cache(c, 1, 64, type);
      RunAll(cache, 0, prefix, 0);
      std::vector<float> last;
      for (size_t i = 0; i < path.size(); ++i) last = RunAll(cache, 0, {path[i]}, 3 + static_cast<int>(i));
      return last;
    };
    const std::vector<std::vector<int32_t>> paths = {{8}, {8, 9}, {8, 9, 10}, {8, 9, 10, 11}, {8, 40}, {8, 9, 10, 41}};
    for (int r = 0; r < 6; ++r) {
      const std::vector<float> want = plain_last(paths[r]);
      ASSERT_EQ(want.size(), v);
      EXPECT_EQ(0, std::memcmp(tree->logits.data() + r * v, want.data(), v * sizeof(float))) << "row " << r;
    }
  }
}

TEST_F(TinyQwen3, ForkedSequenceContinuesIdentically) {
  const ModelConfig& c = model_->config();
  KvCache cache(c, 2, 64);
  RunAll(cache, 0, {1, 2, 3}, 0);
  ASSERT_TRUE(cache.Copy(0, 1).ok());
  const auto a = RunAll(cache, 0, {9}, 3);
  const auto b = RunAll(cache, 1, {9}, 3);
  EXPECT_EQ(a, b);
}

TEST_F(TinyQwen3, TapsReturnResidualStreams) {
  const ModelConfig& c = model_->config();
  KvCache cache(c, 1, 64);
  Batch b;
  b.Add(17, 0, 0, false);
  b.Add(18, 1, 0, true);
  ForwardOptions opt;
  opt.tap_layers = {0, 1, c.n_layer};
  auto o = model_->Forward(b, cache, pool_, opt);
  ASSERT_TRUE(o.ok());
  ASSERT_EQ(o->taps.size(), 3u);
  ASSERT_EQ(o->taps[0].size(), 2u * c.n_embd);
  std::vector<float> embd(c.n_embd);
  const auto& e = model_->weights().tok_embd;
  ops::DequantizeRow(e.type, static_cast<const uint8_t*>(e.data) + RowBytes(e.type, e.cols) * 18, embd.data(), c.n_embd);
  for (int i = 0; i < c.n_embd; ++i) ASSERT_EQ(o->taps[0][c.n_embd + i], embd[i]);
  EXPECT_NE(o->taps[1], o->taps[0]);
}

// ForwardOptions::profile only measures: the logits are the same bitwise, each pass counts once,
// and the phases add up to no more than the passes' wall time (the projections always take some).
TEST_F(TinyQwen3, ProfileTimesPhasesWithoutChangingResults) {
  const ModelConfig& c = model_->config();
  const std::vector<int32_t> toks = {7, 8, 9, 10, 11};
  KvCache plain_cache(c, 1, 64), profiled_cache(c, 1, 64);
  const auto want = RunAll(plain_cache, 0, toks, 0);
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.Add(toks[i], static_cast<int>(i), 0, true);
  ForwardProfile profile;
  ForwardOptions opt;
  opt.profile = &profile;
  const auto t0 = std::chrono::steady_clock::now();
  auto o = model_->Forward(b, profiled_cache, pool_, opt);
  Batch next;
  next.Add(12, static_cast<int>(toks.size()), 0, true);
  auto o2 = model_->Forward(next, profiled_cache, pool_, opt);  // passes accumulate
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(o2.ok());
  ASSERT_EQ(o->logits.size(), want.size());
  EXPECT_EQ(0, std::memcmp(o->logits.data(), want.data(), want.size() * sizeof(float)));
  EXPECT_EQ(profile.passes, 2);
  for (int ph = 0; ph < ForwardProfile::kNumPhases; ++ph) EXPECT_GE(profile.ms[ph], 0.0) << ForwardProfile::Name(ph);
  EXPECT_GT(profile.ms[ForwardProfile::kQkv], 0.0);
  EXPECT_GT(profile.ms[ForwardProfile::kGateUp], 0.0);
  EXPECT_GT(profile.ms[ForwardProfile::kHead], 0.0);
  EXPECT_LE(profile.TotalMs(), wall_ms);
  EXPECT_STREQ(ForwardProfile::Name(ForwardProfile::kAttention), "attention");
}

TEST_F(TinyQwen3, ContextFullIsAClearErrorAndLeavesCacheIntact) {
  const ModelConfig& c = model_->config();
  KvCache cache(c, 1, 4);
  RunAll(cache, 0, {1, 2, 3}, 0);
  Batch b;
  b.Add(4, 3, 0, true);
  b.Add(5, 4, 0, true);
  auto o = model_->Forward(b, cache, pool_);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(o.status().message().find("context full"), std::string::npos);
  EXPECT_EQ(cache.Length(0), 3);
  Batch bad;
  bad.Add(c.n_vocab, 3, 0, true);
  EXPECT_EQ(model_->Forward(bad, cache, pool_).status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelLoad, UnknownArchitectureAndMissingTensorAreClearErrors) {
  const std::string path = testing::TempPath("bad_arch.gguf");
  {
    gguf::Writer w;
    w.SetString("general.architecture", "gpt-j");
    ASSERT_TRUE(w.WriteFile(path).ok());
  }
  auto m = Model::Load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown architecture 'gpt-j'"), std::string::npos) << m.status().message();

  // A good tiny model with one tensor dropped.
  const std::string good = WriteTiny(TinySpec("qwen3", DType::kF32), "dropme");
  auto f = gguf::File::Open(good);
  ASSERT_TRUE(f.ok());
  gguf::Writer w;
  w.CopyMetadataFrom(**f);
  for (const auto& t : (*f)->tensors()) {
    if (t.name == "blk.1.attn_k_norm.weight") continue;
    std::vector<int64_t> ne = t.ne;
    ASSERT_TRUE(w.AddTensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  }
  const std::string dropped = testing::TempPath("dropped.gguf");
  ASSERT_TRUE(w.WriteFile(dropped).ok());
  m = Model::Load(dropped);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.1.attn_k_norm.weight"), std::string::npos) << m.status().message();
}

// block_count is a claim the tensors must back: a file that claims 50 million blocks but holds two
// fails on the first missing tensor, without reserving memory for the blocks it claims first.
TEST(ModelLoad, BlockCountBeyondTheTensorsNamesTheFirstMissingBlock) {
  for (const char* arch : {"qwen3", "qwen3moe", "deepseek2"}) {
    SynthSpec spec = TinySpec(arch, DType::kF32);
    const std::string good = WriteTiny(spec, std::string("blocks_") + arch);
    auto f = gguf::File::Open(good);
    ASSERT_TRUE(f.ok());
    gguf::Writer w;
    w.CopyMetadataFrom(**f);
    w.SetU32(std::string(arch) + ".block_count", 50'000'000);
    for (const auto& t : (*f)->tensors())
      ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
    const std::string bad = testing::TempPath(std::string("many_blocks_") + arch + ".gguf");
    ASSERT_TRUE(w.WriteFile(bad).ok());
    auto m = Model::Load(bad);
    ASSERT_FALSE(m.ok()) << arch;
    EXPECT_EQ(m.status().code(), StatusCode::kNotFound) << m.status().message();
    const std::string first_missing = fmt::format("'blk.{}.attn_norm.weight' is missing", spec.n_layer);
    EXPECT_NE(m.status().message().find(first_missing), std::string::npos) << m.status().message();
  }
}

TEST(ModelLoad, WrongShapeNamesTensorAndExpectation) {
  SynthSpec spec = TinySpec("llama", DType::kF32);
  const std::string good = WriteTiny(spec, "shape");
  auto f = gguf::File::Open(good);
  ASSERT_TRUE(f.ok());
  gguf::Writer w;
  w.CopyMetadataFrom(**f);
  w.SetU32("llama.feed_forward_length", spec.n_ff * 2);  // now every FFN tensor is the wrong shape
  for (const auto& t : (*f)->tensors())
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  const std::string bad = testing::TempPath("badshape.gguf");
  ASSERT_TRUE(w.WriteFile(bad).ok());
  auto m = Model::Load(bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.ffn_gate.weight"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("expected [64, 256]"), std::string::npos) << m.status().message();
}

// A tiny qwen3 whose head size (32) a Q8_0 cache can hold; null (with a test failure) if it does
// not load.
std::unique_ptr<Model> LoadQ8CacheModel(const std::string& name) {
  SynthSpec spec = TinySpec("qwen3", DType::kF32);
  spec.head_dim = 32;
  auto model = Model::Load(WriteTiny(spec, name));
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? std::move(*model) : nullptr;
}

// MoveCell moves one cell's keys and values exactly, in every cache layout (the key tiles are
// transposed; Q8_0 keeps a scale per block and cell).
TEST(KvCacheMoveCell, MovesKeysAndValuesExactlyInEveryLayout) {
  const std::unique_ptr<Model> model = LoadQ8CacheModel("kv_move");
  ASSERT_NE(model, nullptr);
  const ModelConfig& c = model->config();
  const size_t k_size = static_cast<size_t>(c.n_head_kv) * c.head_dim, v_size = static_cast<size_t>(c.n_head_kv) * c.head_dim_v;
  std::vector<std::vector<float>> k(40, std::vector<float>(k_size)), v(40, std::vector<float>(v_size));
  for (int cell = 0; cell < 40; ++cell) {
    for (size_t i = 0; i < k_size; ++i) k[cell][i] = std::sin(0.37f * cell + 0.11f * i) * (1 + cell % 3);
    for (size_t i = 0; i < v_size; ++i) v[cell][i] = std::cos(0.23f * cell + 0.07f * i) * (1 + i % 5);
  }
  for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    SCOPED_TRACE(DTypeName(type));
    // Cell 34 (another key tile) is moved onto cell 5, which held something else.
    KvCache want(c, 2, 64, type), got(c, 2, 64, type);
    for (int cell = 0; cell < 40; ++cell) {
      const int from = cell == 34 ? 5 : cell;
      for (int l = 0; l < c.n_layer; ++l) {
        want.Write(l, 1, cell, k[from].data(), v[from].data());
        got.Write(l, 1, cell, cell == 5 ? k[0].data() : k[from].data(), cell == 5 ? v[0].data() : v[from].data());
      }
    }
    want.Advance(1, 40);
    got.Advance(1, 40);
    ASSERT_TRUE(got.MoveCell(1, 34, 5).ok());
    const auto bytes = [](const void* a, const void* b) {
      return static_cast<size_t>(static_cast<const uint8_t*>(b) - static_cast<const uint8_t*>(a));
    };
    // One head's key tiles: the span between sequence 0's and 1's, over the heads.
    const size_t k_head = bytes(want.KTiles(0, 0, 0), want.KTiles(0, 1, 0)) / c.n_head_kv;
    const size_t v_cells = bytes(want.V(0, 1, 0, 0), want.V(0, 1, 0, 40));
    for (int l = 0; l < c.n_layer; ++l) {
      for (int h = 0; h < c.n_head_kv; ++h) {
        ASSERT_EQ(0, std::memcmp(want.V(l, 1, h, 0), got.V(l, 1, h, 0), v_cells)) << "layer " << l << " head " << h;
        ASSERT_EQ(0, std::memcmp(want.KTiles(l, 1, h), got.KTiles(l, 1, h), k_head)) << "layer " << l << " head " << h;
      }
    }
    EXPECT_FALSE(got.MoveCell(1, 40, 5).ok());  // past the sequence's length
  }
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// The Q8_0 cache (int8 with a scale per 32 elements) stays close to the exact F32 cache, copies a
// sequence exactly (prefix sharing), and rolls back like any other cache.
TEST(KvCacheQ8, CloseToF32CacheCopiesAndRollsBackExactly) {
  const std::unique_ptr<Model> model = LoadQ8CacheModel("kv_q8");
  ASSERT_NE(model, nullptr);
  const ModelConfig& c = model->config();
  ASSERT_TRUE(KvCache::Supports(c, DType::kQ8_0).ok());
  ThreadPool pool(2);
  const auto tokens = Prompt(40, c.n_vocab);
  auto run = [&](KvCache& cache, int seq, int from, int to) {
    Batch b;
    for (int i = from; i < to; ++i) b.Add(tokens[i], i, seq, true);
    auto o = model->Forward(b, cache, pool);
    EXPECT_TRUE(o.ok());
    return o.ok() ? o->logits : std::vector<float>{};
  };
  KvCache exact(c, 1, 64, DType::kF32), half(c, 1, 64, DType::kF16), q8(c, 2, 64, DType::kQ8_0);
  const auto want = run(exact, 0, 0, 40);
  const auto got = run(q8, 0, 0, 40);
  const auto got16 = run(half, 0, 0, 40);
  auto worst_err = [&](const std::vector<float>& logits) {
    double worst = 0;
    for (int t = 0; t < 40; ++t) {
      const std::vector<double> w(want.begin() + t * c.n_vocab, want.begin() + (t + 1) * c.n_vocab);
      worst = std::max(worst, RelErr(logits.data() + t * c.n_vocab, w));
    }
    return worst;
  };
  const double err8 = worst_err(got), err16 = worst_err(got16);
  // This random model amplifies rounding, hence a bound well above float precision; an unscaled or
  // misplaced block gives errors of order 1.
  EXPECT_LT(err8, 3e-2) << "F16 cache: " << err16;
  EXPECT_GT(err8, err16);  // the cache does round, more than F16: this would not notice an F16 cache
  // Copy: sequence 1 continues exactly as sequence 0 would.
  ASSERT_TRUE(q8.Truncate(0, 33).ok());
  ASSERT_TRUE(q8.Copy(0, 1).ok());
  const auto from_copy = run(q8, 1, 33, 40);
  const auto from_original = run(q8, 0, 33, 40);
  ASSERT_EQ(from_copy.size(), from_original.size());
  EXPECT_EQ(0, std::memcmp(from_copy.data(), from_original.data(), from_copy.size() * sizeof(float)));
  // The rolled-back and recomputed rows equal the first run's (cells are rewritten in place).
  for (size_t i = 0; i < from_original.size(); ++i) ASSERT_EQ(from_original[i], got[33 * c.n_vocab + i]) << i;
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// `dspark quantize` to each target: a tiny model (rows of 64, shorter than a K-quant super-block)
// gets llama.cpp's fallback types, every matrix holds the F32 weights to within its type's
// rounding, and the file loads and runs.
TEST(Quantize, EveryTargetWritesLlamaCppFallbacksThatHoldTheWeights) {
  const std::string src = testing::WriteTiny(testing::TinySpec("qwen3", DType::kF32), "quantize_src");
  auto src_file = gguf::File::Open(src);
  ASSERT_TRUE(src_file.ok());
  ThreadPool pool(2);
  struct Expect {
    DType target, matrices;
    double rms;  // bound on rms(dequantised - original) / rms(original)
  };
  for (const Expect e : {Expect{DType::kQ8_0, DType::kQ8_0, 0.01}, Expect{DType::kQ4_0, DType::kQ4_0, 0.12},
                         Expect{DType::kQ4_1, DType::kQ4_1, 0.1}, Expect{DType::kQ5_0, DType::kQ5_0, 0.06},
                         Expect{DType::kQ5_1, DType::kQ5_1, 0.05}, Expect{DType::kQ4_K, DType::kQ5_0, 0.06},
                         Expect{DType::kQ5_K, DType::kQ5_1, 0.05}, Expect{DType::kQ6_K, DType::kQ8_0, 0.01}}) {
    const std::string out = testing::TempPath(std::string("quantize_") + std::string(DTypeName(e.target)) + ".gguf");
    QuantizeReport report;
    ASSERT_TRUE(QuantizeFile(src, out, e.target, &report).ok()) << DTypeName(e.target);
    EXPECT_GT(report.converted, 0);
    auto file = gguf::File::Open(out);
    ASSERT_TRUE(file.ok());
    int matrices = 0;
    for (const auto& t : (*file)->tensors()) {
      if (t.ne.size() < 2 || t.Rows() == 1) continue;
      ASSERT_EQ(t.type, e.matrices) << DTypeName(e.target) << " " << t.name;
      const gguf::TensorInfo* orig = (*src_file)->FindTensor(t.name);
      ASSERT_NE(orig, nullptr) << t.name;
      const int64_t cols = t.ne[0];
      std::vector<float> row(cols);
      double err2 = 0, ref2 = 0;
      for (int64_t r = 0; r < t.Rows(); ++r) {
        ops::DequantizeRow(t.type, t.data + r * RowBytes(t.type, cols), row.data(), cols);
        const auto* w = reinterpret_cast<const float*>(orig->data) + r * cols;
        for (int64_t k = 0; k < cols; ++k) {
          err2 += (row[k] - w[k]) * (row[k] - w[k]);
          ref2 += w[k] * w[k];
        }
      }
      EXPECT_LT(std::sqrt(err2 / ref2), e.rms) << DTypeName(e.target) << " " << t.name;
      ++matrices;
    }
    EXPECT_GT(matrices, 5);
    auto q = Model::Load(out);
    ASSERT_TRUE(q.ok()) << q.status().message();
    KvCache cache((*q)->config(), 1, 32, DType::kF32);
    Batch batch;
    for (int i = 0; i < 4; ++i) batch.Add(i + 1, i, 0, i == 3);
    auto fwd = (*q)->Forward(batch, cache, pool);
    ASSERT_TRUE(fwd.ok());
    for (float x : fwd->logits) ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_EQ(QuantizeTypeForRows(DType::kQ4_K, 512), DType::kQ4_K);
  EXPECT_EQ(QuantizeTypeForRows(DType::kQ4_K, 48), DType::kF16);
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// A model file cut short (an interrupted download or copy) or changed while it loads (a copy still
// being written) is a clear error at load naming the file, never a crash or a model made of mixed
// bytes.
TEST(ModelFile, CutShortOrChangedWhileLoadingIsAClearError) {
  const std::string path = testing::WriteTiny(testing::TinySpec("qwen3", DType::kF32), "changed");
  const auto size = std::filesystem::file_size(path);
  const std::string copy = path + ".cut";
  for (const uintmax_t keep : {size / 2, size - 1, uintmax_t{64}}) {
    std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(copy, keep);
    auto m = Model::Load(copy);
    ASSERT_FALSE(m.ok()) << keep;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << m.status().message();
    EXPECT_NE(m.status().message().find(copy), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status().message();
  }

  // Grown or rewritten between the open and the end of the load.
  for (const bool grow : {true, false}) {
    std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
    auto file = gguf::File::Open(copy);
    ASSERT_TRUE(file.ok()) << file.status().message();
    if (grow) {
      std::ofstream(copy, std::ios::binary | std::ios::app) << "more bytes of a copy still running";
    } else {
      const auto later = std::filesystem::last_write_time(copy) + std::chrono::seconds(1);
      std::filesystem::last_write_time(copy, later);  // rewritten in place, same size
    }
    auto m = Model::FromFile(std::shared_ptr<const gguf::File>(std::move(*file)));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << m.status().message();
    EXPECT_NE(m.status().message().find("changed on disk while it was loading"), std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find(grow ? "bytes when opened" : "rewritten"), std::string::npos)
        << m.status().message();
  }
  // Replacing the file by a rename does not touch the open one: the load goes through.
  std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
  auto file = gguf::File::Open(copy);
  ASSERT_TRUE(file.ok());
  std::filesystem::copy_file(path, copy + ".new", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(copy + ".new", std::ios::binary | std::ios::app) << "another model";
  std::filesystem::rename(copy + ".new", copy);
  EXPECT_TRUE(Model::FromFile(std::shared_ptr<const gguf::File>(std::move(*file))).ok());
  std::filesystem::remove(copy);
}

}  // namespace
}  // namespace dspark
