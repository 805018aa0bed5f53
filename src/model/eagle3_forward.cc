#include "model/eagle3_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "model/arch/draft_file.h"
#include "model/swiglu.h"

namespace dspark {

namespace {

void RmsRows(const float* x, int64_t x_stride, const std::vector<float>& w, float eps, int n, int64_t d, float* y,
             int64_t y_stride) {
  for (int i = 0; i < n; ++i) ops::RmsNorm(x + i * x_stride, w.data(), eps, d, y + i * y_stride);
}

}  // namespace

Eagle3Forward::Eagle3Forward(const Eagle3Model& model) : model_(model), rope_(model.config().rope) {}

Eagle3Forward::Eagle3Forward(std::unique_ptr<Eagle3Model> model)
    : owned_(std::move(model)), model_(*owned_), rope_(model_.config().rope) {}

// The cache only needs the K/V geometry: one layer.
ModelConfig Eagle3Forward::CacheConfig() const {
  const Eagle3Config& c = model_.config();
  return KvGeometry(1, c.n_head, c.n_head_kv, c.head_dim, c.n_embd);
}

Status Eagle3Forward::Run(std::span<const HeadJob> jobs, ThreadPool& pool) {
  for (const HeadJob& job : jobs) DSPARK_TRY(Check(job));
  std::vector<int> row0(jobs.size() + 1, 0);
  for (size_t j = 0; j < jobs.size(); ++j) row0[j + 1] = row0[j] + static_cast<int>(jobs[j].tokens.size());
  if (row0.back() == 0) return Status::Ok();
  Inputs(jobs, row0);
  AttentionLayer(jobs, row0, pool);
  Ffn(row0.back(), pool);
  Outputs(jobs, row0, pool);
  for (const HeadJob& job : jobs) job.context->cache().Advance(0, static_cast<int>(job.tokens.size()));
  return Status::Ok();
}

void Eagle3Forward::Fuse(std::span<const float* const> taps, int n, float* g, ThreadPool& pool) {
  const Eagle3Config& c = model_.config();
  const Eagle3Weights& w = model_.weights();
  const int64_t F = c.n_features();
  const int64_t Et = c.target_hidden;
  feats_.resize(static_cast<size_t>(n) * F);
  for (int r = 0; r < n; ++r)
    for (size_t t = 0; t < taps.size(); ++t)
      std::memcpy(feats_.data() + r * F + t * Et, taps[t] + static_cast<size_t>(r) * Et, Et * sizeof(float));
  const float* features = feats_.data();
  if (c.norm_before_fc) {
    fused_.resize(static_cast<size_t>(n) * F);
    RmsRows(feats_.data(), F, w.enc_norm, c.rms_eps, n, F, fused_.data(), F);
    features = fused_.data();
  }
  ops::MatMul(w.fc, features, n, g, pool);
}

// The decoder input x = [RMSNorm(embed(token)) ; RMSNorm_hidden(g)] of every row (g_ keeps the
// rows' g for the residual).
void Eagle3Forward::Inputs(std::span<const HeadJob> jobs, std::span<const int> row0) {
  const Eagle3Config& c = model_.config();
  const Eagle3Weights& w = model_.weights();
  const int64_t E = c.n_embd;
  const size_t rows = static_cast<size_t>(row0.back());
  g_.resize(rows * E);
  x_.resize(rows * 2 * E);
  for (size_t j = 0; j < jobs.size(); ++j)
    std::copy_n(jobs[j].state, jobs[j].tokens.size() * E, g_.data() + static_cast<size_t>(row0[j]) * E);
  const ops::WeightView& e = w.tok_embd;
  const size_t embd_row = RowBytes(e.type, e.cols);
  std::vector<float>& embd = r_;  // scratch until the residual needs it
  embd.resize(E);
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (size_t i = 0; i < jobs[j].tokens.size(); ++i) {
      const size_t r = row0[j] + i;
      ops::DequantizeRow(e.type, static_cast<const uint8_t*>(e.data) + embd_row * jobs[j].tokens[i], embd.data(), E);
      ops::RmsNorm(embd.data(), w.attn_norm.data(), c.rms_eps, E, x_.data() + r * 2 * E);
      ops::RmsNorm(g_.data() + r * E, w.hidden_norm.data(), c.rms_eps, E, x_.data() + r * 2 * E + E);
    }
  }
}

// Q/K/V of x, RoPE at each row's position, the rows' K/V into their contexts, causal attention
// over the context, the output projection and the residual (g, or RMSNorm_hidden(g)).
void Eagle3Forward::AttentionLayer(std::span<const HeadJob> jobs, std::span<const int> row0, ThreadPool& pool) {
  const Eagle3Config& c = model_.config();
  const Eagle3Weights& w = model_.weights();
  const int64_t E = c.n_embd;
  const int n_rows = row0.back();
  const size_t rows = static_cast<size_t>(n_rows);
  const int kv_dim = c.kv_dim();
  const int half = rope_.n_rot() / 2;
  const int group = c.n_head / c.n_head_kv;
  q_.resize(rows * c.q_dim());
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  if (w.wqkv.rows > 0) {
    fused_.resize(rows * (c.q_dim() + 2 * static_cast<size_t>(kv_dim)));
    ops::MatMul(w.wqkv, x_.data(), n_rows, fused_.data(), pool);
    ops::SplitColumns(fused_.data(), n_rows, {{c.q_dim(), q_.data()}, {kv_dim, k_.data()}, {kv_dim, v_.data()}});
  } else {
    ops::MatMul(w.wq, x_.data(), n_rows, q_.data(), pool);
    ops::MatMul(w.wk, x_.data(), n_rows, k_.data(), pool);
    ops::MatMul(w.wv, x_.data(), n_rows, v_.data(), pool);
  }
  cos_.resize(static_cast<size_t>(half));
  sin_.resize(static_cast<size_t>(half));
  for (size_t j = 0; j < jobs.size(); ++j) {
    KvCache& cache = jobs[j].context->cache();
    const int n_cells = cache.Length(0);
    for (int i = 0; i < static_cast<int>(jobs[j].tokens.size()); ++i) {
      const size_t r = static_cast<size_t>(row0[j] + i);
      rope_.Angles(n_cells + i, cos_.data(), sin_.data());
      rope_.Apply(cos_.data(), sin_.data(), c.n_head, c.head_dim, q_.data() + r * c.q_dim());
      float* k = k_.data() + r * kv_dim;
      rope_.Apply(cos_.data(), sin_.data(), c.n_head_kv, c.head_dim, k);
      cache.Write(0, 0, n_cells + i, k, v_.data() + r * kv_dim);
    }
    const size_t n = jobs[j].tokens.size();
    if (causal_.size() <= n) causal_.resize(n + 1);
    if (causal_[n].size() != n * n) {
      causal_[n].assign(n * n, 0);
      for (size_t a = 0; a < n; ++a)
        for (size_t b = 0; b <= a; ++b) causal_[n][a * n + b] = 1;
    }
  }
  // Tasks: (job, unit of its rows) x K/V head; ~16 query heads share each key tile load.
  struct Task {
    int job, r0, nr;
  };
  const int per_unit = std::max(1, 16 / group);
  std::vector<Task> tasks;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int r = 0; r < static_cast<int>(jobs[j].tokens.size()); r += per_unit)
      tasks.push_back({static_cast<int>(j), r, std::min(per_unit, static_cast<int>(jobs[j].tokens.size()) - r)});
  att_.resize(rows * c.q_dim());
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  pool.ParallelFor(static_cast<int64_t>(tasks.size()) * c.n_head_kv, [&](int64_t index, int) {
    const Task& t = tasks[index / c.n_head_kv];
    const int kvh = static_cast<int>(index % c.n_head_kv);
    const KvCache& cache = jobs[t.job].context->cache();
    const int n_new = static_cast<int>(jobs[t.job].tokens.size());
    const int n_old = cache.Length(0);  // advanced only after the pass
    const int n_all = n_old + n_new;
    const size_t r0 = static_cast<size_t>(row0[t.job] + t.r0);
    const size_t head0 = static_cast<size_t>(kvh) * group;
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(ops::AttentionScratch(t.nr * group, n_all, c.head_dim)));
    ops::Attention(q_.data() + r0 * c.q_dim() + head0 * c.head_dim, c.q_dim(), t.nr * group, group, c.head_dim,
                   c.head_dim, cache.type(), cache.KTiles(0, 0, kvh), cache.V(0, 0, kvh, 0), c.head_dim, n_all, n_old,
                   causal_[n_new].data() + static_cast<size_t>(t.r0) * n_new, scale, nullptr, scratch.data(),
                   att_.data() + r0 * c.q_dim() + head0 * c.head_dim, c.q_dim());
  });
  r_.resize(rows * E);
  ops::MatMul(w.wo, att_.data(), n_rows, r_.data(), pool);
  if (c.norm_before_residual) {
    for (size_t r = 0; r < rows; ++r) ops::Add(x_.data() + r * 2 * E + E, E, r_.data() + r * E);
  } else {
    ops::Add(g_.data(), static_cast<int64_t>(rows) * E, r_.data());
  }
}

// h = r + SwiGLU(RMSNorm(r)): the pre-norm output.
void Eagle3Forward::Ffn(int n_rows, ThreadPool& pool) {
  const Eagle3Config& c = model_.config();
  const Eagle3Weights& w = model_.weights();
  const int64_t E = c.n_embd;
  const size_t rows = static_cast<size_t>(n_rows);
  h_.resize(rows * E);
  RmsRows(r_.data(), E, w.ffn_norm, c.rms_eps, n_rows, E, h_.data(), E);
  gate_.resize(rows * c.n_ff);
  SwiGluActivation(w.w_gate, w.w_up, w.w_gate_up, c.n_ff, h_.data(), n_rows, fused_, up_, gate_.data(), pool);
  ops::MatMul(w.w_down, gate_.data(), n_rows, h_.data(), pool);
  ops::Add(r_.data(), static_cast<int64_t>(rows) * E, h_.data());
}

// Each job's last row: its pre-norm state, and RMSNorm then the LM head (d2t-scattered).
void Eagle3Forward::Outputs(std::span<const HeadJob> jobs, std::span<const int> row0, ThreadPool& pool) {
  const Eagle3Config& c = model_.config();
  const Eagle3Weights& w = model_.weights();
  const int64_t E = c.n_embd;
  std::vector<size_t> which;
  for (size_t j = 0; j < jobs.size(); ++j)
    if (jobs[j].out != nullptr) which.push_back(j);
  if (which.empty()) return;
  const int n = static_cast<int>(which.size());
  last_.resize(static_cast<size_t>(n) * E);
  for (int i = 0; i < n; ++i) {
    const size_t j = which[i];
    const float* h = h_.data() + static_cast<size_t>(row0[j + 1] - 1) * E;
    jobs[j].out->state.assign(h, h + E);
    ops::RmsNorm(h, w.output_norm.data(), c.rms_eps, E, last_.data() + static_cast<size_t>(i) * E);
  }
  logits_.resize(static_cast<size_t>(n) * c.n_vocab_draft);
  ops::MatMul(w.output, last_.data(), n, logits_.data(), pool);
  for (int i = 0; i < n; ++i) {
    HeadOutput* out = jobs[which[i]].out;
    out->logits.resize(c.n_vocab);
    ScatterDraftLogits(logits_.data() + static_cast<size_t>(i) * c.n_vocab_draft, 1, w.d2t, c.n_vocab,
                       out->logits.data());
  }
}

}  // namespace dspark
