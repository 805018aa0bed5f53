// The EAGLE-3 drafter end to end on tiny random-weight heads in llama.cpp's eagle3 layout: the
// head's forward pass and the drafter's chains against a scalar double-precision reference written
// from the layout (embedding first in the concatenation, adjacent-pair RoPE, the residual from g,
// each draft row fed the previous row's pre-norm state, committed row P paired with token P+1);
// greedy speculative output equal to plain decoding; sampled output equal to plain sampling in
// distribution; batched proposals equal to single ones; the prompt cache; every refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "dspark/drafter_fixture.h"
#include "dspark/dspark_models.h"
#include "model/eagle3_forward.h"
#include "model/testing/tiny_models.h"
#include "speculative/batch_engine.h"
#include "speculative/drafters/head_drafter.h"
#include "speculative/drafters/factory.h"
#include "speculative/engine.h"
#include "speculative/speculation.h"
#include "speculative/testing/sampling_check.h"

namespace dspark {
namespace {

using Loaded = testing::LoadedModel;
using testing::ReferenceGreedy;

std::string Tmp(const std::string& name) { return testing::TempPath("eagle3_test_" + name + ".gguf"); }

// The head computed from the file's tensors alone, in double precision.
class ReferenceHead {
 public:
  ReferenceHead(const gguf::File& head, const gguf::File& target) {
    auto u = [&](const char* k) { return static_cast<int>(*head.GetInt(std::string("eagle3.") + k)); };
    E_ = u("embedding_length");
    n_head_ = u("attention.head_count");
    n_kv_ = u("attention.head_count_kv");
    hd_ = u("attention.key_length");
    n_ff_ = u("feed_forward_length");
    norm_before_residual_ = *head.GetBool("eagle3.norm_before_residual");
    norm_before_fc_ = *head.GetBool("eagle3.norm_before_fc");
    V_ = static_cast<int>(target.FindTensor("token_embd.weight")->ne[1]);
    fc_ = Read(head, "fc.weight");
    if (norm_before_fc_) enc_norm_ = Read(head, "enc.output_norm.weight");
    attn_norm_ = Read(head, "blk.0.attn_norm.weight");
    hidden_norm_ = Read(head, "blk.0.attn_norm_2.weight");
    wq_ = Read(head, "blk.0.attn_q.weight");
    wk_ = Read(head, "blk.0.attn_k.weight");
    wv_ = Read(head, "blk.0.attn_v.weight");
    wo_ = Read(head, "blk.0.attn_output.weight");
    ffn_norm_ = Read(head, "blk.0.ffn_norm.weight");
    gate_ = Read(head, "blk.0.ffn_gate.weight");
    up_ = Read(head, "blk.0.ffn_up.weight");
    down_ = Read(head, "blk.0.ffn_down.weight");
    out_norm_ = Read(head, "output_norm.weight");
    embd_ = Read(head.FindTensor("token_embd.weight") ? head : target, "token_embd.weight");
    const gguf::File& of = head.FindTensor("output.weight") ? head : target;
    output_ = Read(of, of.FindTensor("output.weight") ? "output.weight" : "token_embd.weight");
    if (const gguf::TensorInfo* d2t = head.FindTensor("d2t")) {
      for (int64_t j = 0; j < d2t->ne[0]; ++j) {
        int64_t id;
        std::memcpy(&id, d2t->data + 8 * j, 8);
        d2t_.push_back(static_cast<int>(id));
      }
    }
  }

  // g of one row of target features.
  std::vector<double> Fuse(const std::vector<double>& f) const {
    std::vector<double> x = f;
    if (norm_before_fc_) x = Rms(f, enc_norm_);
    return MatVec(fc_, x, E_);
  }

  // Runs rows (token, g) at the positions after those run before; returns each row's logits, pre-norm states in h.
  std::vector<std::vector<double>> Run(const std::vector<int>& tokens, const std::vector<std::vector<double>>& g,
                                       std::vector<std::vector<double>>* h_out) {
    std::vector<std::vector<double>> logits;
    const int qd = n_head_ * hd_, kvd = n_kv_ * hd_;
    for (size_t p = 0; p < tokens.size(); ++p) {
      std::vector<double> e(embd_.begin() + static_cast<size_t>(tokens[p]) * E_,
                            embd_.begin() + static_cast<size_t>(tokens[p] + 1) * E_);
      std::vector<double> x = Rms(e, attn_norm_);
      const std::vector<double> gn = Rms(g[p], hidden_norm_);
      x.insert(x.end(), gn.begin(), gn.end());
      std::vector<double> q = MatVec(wq_, x, qd), k = MatVec(wk_, x, kvd), v = MatVec(wv_, x, kvd);
      const int pos = static_cast<int>(keys_.size());  // rows sit at consecutive positions
      Rope(q, n_head_, pos);
      Rope(k, n_kv_, pos);
      keys_.push_back(k);
      values_.push_back(v);
      std::vector<double> att(qd, 0.0);
      for (int h = 0; h < n_head_; ++h) {
        const int kvh = h / (n_head_ / n_kv_);
        std::vector<double> s(keys_.size());
        double mx = -1e300;
        for (size_t t = 0; t < keys_.size(); ++t) {
          double dot = 0;
          for (int d = 0; d < hd_; ++d) dot += q[h * hd_ + d] * keys_[t][kvh * hd_ + d];
          s[t] = dot / std::sqrt(static_cast<double>(hd_));
          mx = std::max(mx, s[t]);
        }
        double z = 0;
        for (double& si : s) z += (si = std::exp(si - mx));
        for (size_t t = 0; t < keys_.size(); ++t)
          for (int d = 0; d < hd_; ++d) att[h * hd_ + d] += s[t] / z * values_[t][kvh * hd_ + d];
      }
      std::vector<double> r = MatVec(wo_, att, E_);
      for (int i = 0; i < E_; ++i) r[i] += norm_before_residual_ ? gn[i] : g[p][i];
      const std::vector<double> hn = Rms(r, ffn_norm_);
      const std::vector<double> a = MatVec(gate_, hn, n_ff_), b = MatVec(up_, hn, n_ff_);
      std::vector<double> act(n_ff_);
      for (int i = 0; i < n_ff_; ++i) act[i] = a[i] / (1 + std::exp(-a[i])) * b[i];
      std::vector<double> h = MatVec(down_, act, E_);
      for (int i = 0; i < E_; ++i) h[i] += r[i];
      if (h_out != nullptr) h_out->push_back(h);
      const std::vector<double> ld = MatVec(output_, Rms(h, out_norm_), static_cast<int>(output_.size() / E_));
      std::vector<double> l(V_, -std::numeric_limits<double>::infinity());
      for (size_t j = 0; j < ld.size(); ++j) l[d2t_.empty() ? j : d2t_[j]] = ld[j];
      logits.push_back(l);
    }
    return logits;
  }

  // Forgets the rows run so far (a new sequence).
  void Reset() {
    keys_.clear();
    values_.clear();
  }

  // The greedy chain after committed rows: context tokens x_0..x_n and the fused g of rows 0..n-1.
  std::vector<int32_t> Chain(const std::vector<int32_t>& context, const std::vector<std::vector<double>>& g, int k) {
    Reset();
    std::vector<int> tokens(context.begin() + 1, context.end());
    std::vector<std::vector<double>> hs;
    std::vector<std::vector<double>> logits = Run(tokens, g, &hs);
    std::vector<int32_t> out;
    for (int i = 0; i < k; ++i) {
      const std::vector<double>& l = logits.back();
      const int tok = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
      out.push_back(tok);
      logits = Run({tok}, {hs.back()}, &hs);
    }
    return out;
  }

 private:
  static std::vector<double> Read(const gguf::File& f, const std::string& name) {
    const gguf::TensorInfo* t = f.FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, DType::kF32) << name;
    const float* p = reinterpret_cast<const float*>(t->data);
    return std::vector<double>(p, p + t->NumElements());
  }
  static std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x, int rows) {
    const size_t cols = x.size();
    std::vector<double> y(rows, 0.0);
    for (int r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
    return y;
  }
  static std::vector<double> Rms(const std::vector<double>& x, const std::vector<double>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / x.size() + 1e-6);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
    return y;
  }
  // llama.cpp's normal RoPE: pairs (2i, 2i+1), theta = pos * 10000^(-2i / head_dim).
  void Rope(std::vector<double>& x, int n_heads, int pos) const {
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < hd_ / 2; ++i) {
        const double th = pos * std::pow(10000.0, -2.0 * i / hd_);
        double& a = x[h * hd_ + 2 * i];
        double& b = x[h * hd_ + 2 * i + 1];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(th) - b0 * std::sin(th);
        b = a0 * std::sin(th) + b0 * std::cos(th);
      }
  }

  int E_, n_head_, n_kv_, hd_, n_ff_, V_;
  bool norm_before_residual_, norm_before_fc_;
  std::vector<double> fc_, enc_norm_, attn_norm_, hidden_norm_, wq_, wk_, wv_, wo_, ffn_norm_, gate_, up_, down_,
      out_norm_, embd_, output_;
  std::vector<int> d2t_;
  std::vector<std::vector<double>> keys_, values_;
};

class Eagle3 : public testing::TapDrafterTest {
 protected:
  static void SetUpTestSuite() {
    WriteTarget(Tmp("target"));
    auto f = gguf::File::Open(target_path_);
    ASSERT_TRUE(f.ok());
    for (const auto& [name, spec] : Variants()) ASSERT_TRUE(testing::WriteEagle3(spec, **f, Tmp(name)).ok()) << name;
  }
  // Heads covering every option of the layout.
  static std::vector<std::pair<std::string, testing::Eagle3Spec>> Variants() {
    testing::Eagle3Spec shared;  // the target's embedding and LM head, taps down to the last layer's output
    testing::Eagle3Spec own;     // its own embedding, a reduced vocabulary, both norm options, other taps
    own.own_embd = true;
    own.n_vocab_draft = 40;
    own.norm_before_residual = true;
    own.norm_before_fc = true;
    own.target_layers = {0, 1, 2};
    own.seed = 232;
    testing::Eagle3Spec narrow = own;  // narrower than the target (own head), MHA
    narrow.n_embd_override = 24;
    narrow.own_output = true;
    narrow.n_vocab_draft = 0;
    narrow.n_head = 3;
    narrow.n_head_kv = 3;
    narrow.norm_before_fc = false;
    narrow.seed = 333;
    return {{"shared", shared}, {"own", own}, {"narrow", narrow}};
  }

  Result<std::unique_ptr<Drafter>> Create(const std::string& name, int max_draft = 16) {
    DrafterConfig cfg;
    cfg.type = "draft-eagle3";
    cfg.draft_model = name.find('/') == std::string::npos ? Tmp(name) : name;
    cfg.max_draft = max_draft;
    return CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256);
  }

};

// The forward pass against the reference, row by row, for committed rows run in one pass and
// draft rows run one per pass; and the drafter's greedy chains against the reference's.
TEST_F(Eagle3, HeadAndChainsMatchTheScalarReference) {
  auto tf = gguf::File::Open(target_path_);
  ASSERT_TRUE(tf.ok());
  for (const auto& [name, spec] : Variants()) {
    SCOPED_TRACE(name);
    auto hf = gguf::File::Open(Tmp(name));
    ASSERT_TRUE(hf.ok());
    ReferenceHead ref(**hf, **tf);
    for (int variant = 0; variant < 3; ++variant) {
      const std::vector<int32_t> prompt = Prompt(variant);
      const int n = static_cast<int>(prompt.size()) - 1;
      const auto taps = Taps(spec.target_layers, prompt);
      const int Et = target_.model->config().n_embd;
      std::vector<std::vector<double>> g;
      for (int r = 0; r < n; ++r) {
        std::vector<double> f;
        for (const auto& t : taps) f.insert(f.end(), t.begin() + r * Et, t.begin() + (r + 1) * Et);
        g.push_back(ref.Fuse(f));
      }
      // Forward: the committed rows in one job, then three draft rows one pass each.
      auto model = Eagle3Model::Load(Tmp(name), *target_.model);
      ASSERT_TRUE(model.ok()) << model.status().message();
      Eagle3Forward fw(**model);
      HeadContext ctx(fw, 64);
      const int E = (*model)->config().n_embd;
      std::vector<float> gf(static_cast<size_t>(n) * E);
      std::vector<const float*> tap_rows;
      for (const auto& t : taps) tap_rows.push_back(t.data());
      fw.Fuse(tap_rows, n, gf.data(), pool_);
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < E; ++i) ASSERT_NEAR(gf[r * E + i], g[r][i], 1e-4 * (1 + std::abs(g[r][i])));
      std::vector<int32_t> tokens(prompt.begin() + 1, prompt.end());
      HeadOutput out;
      const HeadJob job{&ctx, tokens, gf.data(), &out};
      ASSERT_TRUE(fw.Run(std::span<const HeadJob>(&job, 1), pool_).ok());
      std::vector<std::vector<double>> hs;
      ref.Reset();
      std::vector<std::vector<double>> want = ref.Run(std::vector<int>(tokens.begin(), tokens.end()), g, &hs);
      for (int step = 0; step < 4; ++step) {
        ASSERT_EQ(out.logits.size(), want.back().size());
        for (size_t v = 0; v < out.logits.size(); ++v) {
          if (std::isinf(want.back()[v])) {
            EXPECT_TRUE(std::isinf(out.logits[v]) && out.logits[v] < 0) << "token " << v << " outside the draft vocab";
          } else {
            ASSERT_NEAR(out.logits[v], want.back()[v], 2e-3 * (1 + std::abs(want.back()[v])))
                << "step " << step << " token " << v;
          }
        }
        for (int i = 0; i < E; ++i) ASSERT_NEAR(out.state[i], hs.back()[i], 1e-3 * (1 + std::abs(hs.back()[i])));
        const int32_t next = static_cast<int32_t>(3 + (step * 13 + variant) % 50);
        const std::vector<float> h = out.state;
        const HeadJob draft{&ctx, std::span<const int32_t>(&next, 1), h.data(), &out};
        ASSERT_TRUE(fw.Run(std::span<const HeadJob>(&draft, 1), pool_).ok());
        want = ref.Run({next}, {hs.back()}, &hs);
      }
      EXPECT_EQ(ctx.length(), n + 4);
      // The drafter: its greedy chain is the reference's.
      auto d = Create(name);
      ASSERT_TRUE(d.ok()) << d.status().message();
      ExpectHeadChain(d->get(), prompt, ref.Chain(prompt, g, 6), name + " prompt " + std::to_string(variant));
    }
  }
}

TEST_F(Eagle3, GreedyEqualsPlainForEveryHeadPromptAndDraftLength) {
  const int n = 24;
  for (const auto& [name, spec] : Variants()) {
    for (int variant = 0; variant < 4; ++variant) {
      const auto prompt = Prompt(variant);
      const auto want = ReferenceGreedy(*target_.model, pool_, prompt, n);
      for (int n_max : {1, 2, 3, 5, 8, 16}) {
        auto d = Create(name);
        ASSERT_TRUE(d.ok()) << d.status().message();
        ScheduleOptions so;
        so.n_max = n_max;
        const GenerateResult r = Run(d->get(), prompt, n, so);
        ASSERT_EQ(r.ids, want) << name << " n_max " << n_max << " prompt " << variant;
        EXPECT_GT(r.stats.num_draft_tokens, 0) << name;
        EXPECT_EQ(r.stats.num_fallbacks, 0) << name;
      }
      for (bool adaptive : {true}) {
        auto d = Create(name);
        ASSERT_TRUE(d.ok());
        ScheduleOptions so;
        so.n_max = 8;
        so.adaptive = adaptive;
        so.branches = 2;
        EXPECT_EQ(Run(d->get(), prompt, n, so).ids, want) << name << " adaptive with branches";
      }
    }
  }
}

TEST_F(Eagle3, FileTypeIsDetectedAndCliNameListed) {
  auto t = DraftTypeOfFile(Tmp("shared"));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "draft-eagle3");
  const auto types = DrafterTypes();
  EXPECT_NE(std::find(types.begin(), types.end(), "draft-eagle3"), types.end());
  auto d = Create("shared");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->Name(), "draft-eagle3");
  EXPECT_EQ((*d)->Needs().target_tap_layers, (std::vector<int>{1, 2, 3}));
}

TEST_F(Eagle3, BatchedProposalsEqualProposalsOneAtATime) {
  for (const auto& [name, spec] : Variants())
    ExpectBatchedProposalsEqualSingle([&, &name = name] { return Create(name); }, name, FullBudgets,
                                      ExpectFullBudget);
}

TEST_F(Eagle3, ConcurrentSequencesAndThePromptCacheStayLossless) {
  auto d = Create("own");
  ASSERT_TRUE(d.ok()) << d.status().message();
  ExpectConcurrentSequencesAndPromptCacheLossless(d->get());
}

TEST(Eagle3Sampling, SampledChainMatchesPlainSamplingInDistribution) {
  testing::TinyTargetSpec ts;
  ts.n_vocab = 16;
  ts.embd_gain = 0.6f;  // flat distributions: many outcomes, many rejections
  const std::string tpath = Tmp("chi_target");
  ASSERT_TRUE(testing::WriteTinyTarget(ts, tpath).ok());
  Loaded target = testing::LoadModelForTest(tpath);
  testing::Eagle3Spec spec;
  spec.gain = 0.5f;
  const std::string dpath = Tmp("chi_head");
  ASSERT_TRUE(testing::WriteEagle3(spec, *target.file, dpath).ok());
  ThreadPool pool(1);
  DrafterConfig cfg;
  cfg.type = "draft-eagle3";
  cfg.draft_model = dpath;
  auto drafter = CreateDrafter(cfg, *target.model, *target.tok, pool, 64);
  ASSERT_TRUE(drafter.ok()) << drafter.status().message();
  testing::ExpectDrafterSamplingMatchesTarget(*target.model, *target.tok, pool, drafter->get());
}

TEST_F(Eagle3, RefusesMismatchedOrMalformedHeads) {
  auto f = gguf::File::Open(target_path_);
  ASSERT_TRUE(f.ok());
  struct Case {
    std::string name;
    testing::Eagle3Spec spec;
    std::string expect;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, auto mutate, std::string expect) {
    testing::Eagle3Spec s;
    mutate(s);
    cases.push_back({std::move(name), s, std::move(expect)});
  };
  add("two_layers", [](auto& s) { s.target_layers = {1, 2}; }, "exactly 3 target layers");
  add("layer_high", [](auto& s) { s.target_layers = {1, 2, 4}; }, "outside the target's layers");
  add("no_layers", [](auto& s) { s.write_target_layers = false; }, "eagle3.target_layers");
  add("hidden", [](auto& s) { s.target_hidden_override = 48; }, "target_hidden_size 48");
  add("blocks", [](auto& s) { s.block_count = 2; }, "exactly one decoder layer");
  add("no_enc_norm", [](auto& s) { s.norm_before_fc = true; s.write_enc_norm = false; }, "enc.output_norm.weight");
  add("narrow_shared", [](auto& s) { s.n_embd_override = 24; }, "no token_embd.weight of its own");
  add("narrow_no_head", [](auto& s) { s.n_embd_override = 24; s.own_embd = true; }, "no output.weight of its own");
  add("tok_renamed", [](auto& s) { s.rename_token = 33; }, "at id 33");
  add("no_tokenizer", [](auto& s) { s.write_tokenizer = false; }, "has no tokenizer");
  add("dflash_arch", [](auto& s) { s.arch = "dflash"; }, "needs an EAGLE-3 head");
  add("ok", [](auto&) {}, "");
  for (const Case& c : cases) {
    const std::string path = Tmp("bad_" + c.name);
    ASSERT_TRUE(testing::WriteEagle3(c.spec, **f, path).ok()) << c.name;
    auto d = Create(path);
    if (c.expect.empty()) {
      EXPECT_TRUE(d.ok()) << c.name << ": " << d.status().message();
      continue;
    }
    ASSERT_FALSE(d.ok()) << c.name;
    EXPECT_NE(d.status().message().find(c.expect), std::string::npos) << c.name << ": " << d.status().message();
    EXPECT_NE(d.status().message().find(path), std::string::npos) << c.name << ": error must name the file";
  }
  // A truncated tensor table: the shape check names the tensor.
  testing::Eagle3Spec s;
  const std::string p = Tmp("bad_shape");
  ASSERT_TRUE(testing::WriteEagle3(s, **f, p).ok());
  auto pf = gguf::File::Open(p);
  ASSERT_TRUE(pf.ok());
  gguf::Writer w;
  w.CopyMetadataFrom(**pf);
  for (const auto& t : (*pf)->tensors()) {
    std::vector<int64_t> ne = t.ne;
    size_t bytes = t.nbytes;
    if (t.name == "blk.0.attn_q.weight") {  // [E, q] instead of [2E, q]: the concatenation is missing
      ne[0] /= 2;
      bytes /= 2;
    }
    ASSERT_TRUE(w.AddTensor(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + bytes)).ok());
  }
  const std::string p2 = Tmp("bad_shape2");
  ASSERT_TRUE(w.WriteFile(p2).ok());
  auto bad = Create(p2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("blk.0.attn_q.weight"), std::string::npos) << bad.status().message();
  // A missing -md.
  DrafterConfig cfg;
  cfg.type = "draft-eagle3";
  EXPECT_FALSE(CreateDrafter(cfg, *target_.model, *target_.tok, pool_, 256).ok());
}

}  // namespace
}  // namespace dspark
