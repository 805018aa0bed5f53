#include "model/dflash_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <limits>

#include "kernels/ops.h"
#include "model/arch/draft_file.h"
#include "model/swiglu.h"

namespace dspark {

namespace {

void RmsRows(const float* x, const std::vector<float>& w, float eps, int n, int64_t d, float* y) {
  for (int i = 0; i < n; ++i) ops::RmsNorm(x + i * d, w.data(), eps, d, y + i * d);
}

// Per-head RMSNorm then RoPE of `n_heads` heads of one row.
void NormRope(const Rope& rope, const float* cos_t, const float* sin_t, const std::vector<float>& norm, float eps,
              int n_heads, int head_dim, float* x) {
  for (int h = 0; h < n_heads; ++h) ops::RmsNorm(x + h * head_dim, norm.data(), eps, head_dim, x + h * head_dim);
  rope.Apply(cos_t, sin_t, n_heads, head_dim, x);
}

}  // namespace

DflashContext::DflashContext(const DflashModel& model, int n_ctx)
    : cache_(KvGeometry(model.config().n_layer, model.config().n_head, model.config().n_head_kv, model.config().head_dim,
                        model.config().n_embd),
             1, n_ctx + model.config().block_size + 1, DType::kF32) {}

DflashForward::DflashForward(const DflashModel& model) : model_(model), rope_(model.config().rope) {}

Status DflashForward::Check(const DflashJob& job) const {
  const DflashConfig& c = model_.config();
  if (job.context == nullptr) return InvalidArgument("spec: dflash job without a context");
  if (!job.block.empty() && job.out == nullptr) return InvalidArgument("spec: dflash block without an output");
  const KvCache& cache = job.context->cache_;
  const int n_blk = static_cast<int>(job.block.size());
  if (cache.Length(0) + job.n_ctx_rows + n_blk > cache.n_ctx())
    return OutOfRange("spec: dflash draft context full: {} rows + {} new + a block of {} exceed {}", cache.Length(0),
                      job.n_ctx_rows, n_blk, cache.n_ctx());
  for (int32_t t : job.block)
    if (t < 0 || t >= c.n_vocab) return InvalidArgument("spec: block token {} outside the vocabulary", t);
  return Status::Ok();
}

Status DflashForward::Run(std::span<const DflashJob> jobs, ThreadPool& pool) {
  for (const DflashJob& job : jobs) DSPARK_TRY(Check(job));
  Inject(jobs, pool);
  RunBlocks(jobs, pool);
  return Status::Ok();
}

void DflashForward::Inject(std::span<const DflashJob> jobs, ThreadPool& pool) {
  const DflashConfig& c = model_.config();
  const DflashWeights& w = model_.weights();
  const int64_t E = c.n_embd;
  const size_t width = c.target_layers.size() * static_cast<size_t>(E);
  const int half = c.head_dim / 2;
  const int kv_dim = c.kv_dim();
  int rows = 0, with_rows = 0;
  for (const DflashJob& job : jobs) {
    rows += job.n_ctx_rows;
    with_rows += job.n_ctx_rows > 0;
  }
  if (rows == 0) return;
  // One job: its buffer as it is; several: their rows stacked into one matrix.
  const float* feats = nullptr;
  if (with_rows == 1) {
    for (const DflashJob& job : jobs)
      if (job.n_ctx_rows > 0) feats = job.feats;
  } else {
    feats_.resize(static_cast<size_t>(rows) * width);
    size_t at = 0;
    for (const DflashJob& job : jobs) {
      std::copy_n(job.feats, static_cast<size_t>(job.n_ctx_rows) * width, feats_.data() + at);
      at += static_cast<size_t>(job.n_ctx_rows) * width;
    }
    feats = feats_.data();
  }

  // g = RMSNorm_enc(fc · f [* fc.scale]), then each layer's K/V at each sequence's next positions.
  g_.resize(static_cast<size_t>(rows) * E);
  ops::MatMul(w.fc, feats, rows, g_.data(), pool);
  if (w.fc_scale != 1.0f) ops::Scale(w.fc_scale, static_cast<int64_t>(rows) * E, g_.data());
  RmsRows(g_.data(), w.enc_norm, c.rms_eps, rows, E, g_.data());
  cos_.resize(static_cast<size_t>(rows) * half);
  sin_.resize(static_cast<size_t>(rows) * half);
  {
    int r = 0;
    for (const DflashJob& job : jobs)
      for (int i = 0; i < job.n_ctx_rows; ++i, ++r)
        rope_.Angles(job.context->length() + i, cos_.data() + r * half, sin_.data() + r * half);
  }
  k_.resize(static_cast<size_t>(rows) * kv_dim);
  v_.resize(static_cast<size_t>(rows) * kv_dim);
  fused_.resize(static_cast<size_t>(rows) * 2 * kv_dim);
  for (int il = 0; il < c.n_layer; ++il) {
    const DflashLayer& L = w.layers[il];
    // K and V of the new rows: one fused MatMul where packed, else one each.
    if (L.wkv.rows > 0) {
      ops::MatMul(L.wkv, g_.data(), rows, fused_.data(), pool);
      ops::SplitColumns(fused_.data(), rows, {{kv_dim, k_.data()}, {kv_dim, v_.data()}});
    } else {
      ops::MatMul(L.wk, g_.data(), rows, k_.data(), pool);
      ops::MatMul(L.wv, g_.data(), rows, v_.data(), pool);
    }
    int r = 0;
    for (const DflashJob& job : jobs) {
      KvCache& cache = job.context->cache_;
      for (int i = 0; i < job.n_ctx_rows; ++i, ++r) {
        float* k = k_.data() + static_cast<size_t>(r) * kv_dim;
        NormRope(rope_, cos_.data() + r * half, sin_.data() + r * half, L.k_norm, c.rms_eps, c.n_head_kv, c.head_dim, k);
        cache.Write(il, 0, cache.Length(0) + i, k, v_.data() + static_cast<size_t>(r) * kv_dim);
      }
    }
  }
  for (const DflashJob& job : jobs) job.context->cache_.Advance(0, job.n_ctx_rows);
}

// Block: pre-norm Qwen3 layers whose attention sees [own context ; own block], for the block rows
// of every job in one batch (row0[j]: job j's first row).
void DflashForward::RunBlocks(std::span<const DflashJob> jobs, ThreadPool& pool) {
  const DflashConfig& c = model_.config();
  std::vector<int> row0(jobs.size() + 1, 0);
  for (size_t j = 0; j < jobs.size(); ++j) row0[j + 1] = row0[j] + static_cast<int>(jobs[j].block.size());
  const int n_rows = row0.back();
  if (n_rows == 0) return;
  const std::vector<AttentionTask> tasks = PrepareBlocks(jobs, row0);
  for (int il = 0; il < c.n_layer; ++il) {
    BlockAttention(il, jobs, row0, tasks, pool);
    BlockFfn(il, n_rows, pool);
  }
  WriteOutputs(jobs, row0, pool);
}

std::vector<DflashForward::AttentionTask> DflashForward::PrepareBlocks(std::span<const DflashJob> jobs,
                                                                       std::span<const int> row0) {
  const DflashConfig& c = model_.config();
  const DflashWeights& w = model_.weights();
  const int64_t E = c.n_embd;
  const int half = c.head_dim / 2;
  const int kv_dim = c.kv_dim();
  const size_t rows = static_cast<size_t>(row0.back());
  x_.resize(rows * E);
  h_.resize(rows * E);
  q_.resize(rows * c.q_dim());
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  att_.resize(rows * c.q_dim());
  tmp_.resize(rows * E);
  gate_.resize(rows * c.n_ff);
  up_.resize(rows * c.n_ff);
  fused_.resize(rows * std::max<size_t>(c.q_dim() + 2 * static_cast<size_t>(kv_dim), 2 * static_cast<size_t>(c.n_ff)));
  cos_.resize(rows * half);
  sin_.resize(rows * half);
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int i = 0; i < static_cast<int>(jobs[j].block.size()); ++i) {
      const int r = row0[j] + i;
      const ops::WeightView& e = w.tok_embd;
      const uint8_t* row = static_cast<const uint8_t*>(e.data) + RowBytes(e.type, e.cols) * jobs[j].block[i];
      ops::DequantizeRow(e.type, row, x_.data() + r * E, E);
      rope_.Angles(jobs[j].block_pos0 + i, cos_.data() + r * half, sin_.data() + r * half);
    }
  }
  const int group = c.n_head / c.n_head_kv;
  // Causal blocks: row i sees the context and block rows 0..i.
  if (c.causal) {
    for (const DflashJob& job : jobs) {
      const size_t n = job.block.size();
      if (causal_.size() <= n) causal_.resize(n + 1);
      if (causal_[n].size() == n * n) continue;
      causal_[n].assign(n * n, 0);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j <= i; ++j) causal_[n][i * n + j] = 1;
    }
  }
  // Rows per attention task: ~16 query heads share each key tile load (as in Model::Forward).
  // Tasks: (job, K/V head, unit of that job's block rows).
  const int per_unit = std::max(1, 16 / group);
  std::vector<AttentionTask> tasks;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int r = 0; r < static_cast<int>(jobs[j].block.size()); r += per_unit)
      tasks.push_back({static_cast<int>(j), r, std::min(per_unit, static_cast<int>(jobs[j].block.size()) - r)});
  return tasks;
}

// One layer's attention over every job's block rows, and its residual.
void DflashForward::BlockAttention(int il, std::span<const DflashJob> jobs, std::span<const int> row0,
                                   std::span<const AttentionTask> tasks, ThreadPool& pool) {
  const DflashConfig& c = model_.config();
  const DflashLayer& L = model_.weights().layers[il];
  const int64_t E = c.n_embd;
  const int half = c.head_dim / 2;
  const int kv_dim = c.kv_dim();
  const int n_rows = row0.back();
  const int group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t n_tasks = static_cast<int64_t>(tasks.size()) * c.n_head_kv;
  RmsRows(x_.data(), L.attn_norm, c.rms_eps, n_rows, E, h_.data());
  if (L.wqkv.rows > 0) {
    ops::MatMul(L.wqkv, h_.data(), n_rows, fused_.data(), pool);
    ops::SplitColumns(fused_.data(), n_rows, {{c.q_dim(), q_.data()}, {kv_dim, k_.data()}, {kv_dim, v_.data()}});
  } else {
    ops::MatMul(L.wq, h_.data(), n_rows, q_.data(), pool);
    ops::MatMul(L.wk, h_.data(), n_rows, k_.data(), pool);
    ops::MatMul(L.wv, h_.data(), n_rows, v_.data(), pool);
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    KvCache& cache = jobs[j].context->cache_;
    const int n_cells = cache.Length(0);  // block cells follow at n_cells..
    for (int i = 0; i < static_cast<int>(jobs[j].block.size()); ++i) {
      const size_t r = static_cast<size_t>(row0[j] + i);
      const float* ct = cos_.data() + r * half;
      const float* st = sin_.data() + r * half;
      NormRope(rope_, ct, st, L.q_norm, c.rms_eps, c.n_head, c.head_dim, q_.data() + r * c.q_dim());
      float* k = k_.data() + r * kv_dim;
      NormRope(rope_, ct, st, L.k_norm, c.rms_eps, c.n_head_kv, c.head_dim, k);
      cache.Write(il, 0, n_cells + i, k, v_.data() + r * kv_dim);
    }
  }
  // Every block row sees its sequence's context (cells 0..n_cells-1) and the block rows its
  // mask allows. An attention sink is one more logit per head that contributes no value.
  pool.ParallelFor(n_tasks, [&](int64_t index, int) {
    const AttentionTask& t = tasks[index / c.n_head_kv];
    const int kvh = static_cast<int>(index % c.n_head_kv);
    const DflashJob& job = jobs[t.job];
    const KvCache& cache = job.context->cache_;
    const int n_cells = cache.Length(0);
    const int n_blk = static_cast<int>(job.block.size());
    const int n_all = n_cells + n_blk;
    const size_t r0 = static_cast<size_t>(row0[t.job] + t.r0);
    const size_t head0 = static_cast<size_t>(kvh) * group;
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>(ops::AttentionScratch(t.nr * group, n_all, c.head_dim)));
    ops::Attention(q_.data() + r0 * c.q_dim() + head0 * c.head_dim, c.q_dim(), t.nr * group, group, c.head_dim,
                   c.head_dim, cache.type(), cache.KTiles(il, 0, kvh), cache.V(il, 0, kvh, 0), c.head_dim, n_all,
                   c.causal ? n_cells : n_all,
                   c.causal ? causal_[n_blk].data() + static_cast<size_t>(t.r0) * n_blk : nullptr, scale,
                   L.attn_sinks.empty() ? nullptr : L.attn_sinks.data() + head0, scratch.data(),
                   att_.data() + r0 * c.q_dim() + head0 * c.head_dim, c.q_dim());
  });
  ops::MatMul(L.wo, att_.data(), n_rows, tmp_.data(), pool);
  ops::Add(tmp_.data(), static_cast<int64_t>(n_rows) * E, x_.data());
}

// One layer's SwiGLU feed-forward over all block rows, and its residual.
void DflashForward::BlockFfn(int il, int n_rows, ThreadPool& pool) {
  const DflashConfig& c = model_.config();
  const DflashLayer& L = model_.weights().layers[il];
  const int64_t E = c.n_embd;
  RmsRows(x_.data(), L.ffn_norm, c.rms_eps, n_rows, E, h_.data());
  SwiGluActivation(L.w_gate, L.w_up, L.w_gate_up, c.n_ff, h_.data(), n_rows, fused_, up_, gate_.data(), pool);
  ops::MatMul(L.w_down, gate_.data(), n_rows, tmp_.data(), pool);
  ops::Add(tmp_.data(), static_cast<int64_t>(n_rows) * E, x_.data());
}

// The final norm and the LM head; each job's rows go to its BlockOutput (d2t-scattered).
void DflashForward::WriteOutputs(std::span<const DflashJob> jobs, std::span<const int> row0, ThreadPool& pool) {
  const DflashConfig& c = model_.config();
  const DflashWeights& w = model_.weights();
  const int64_t E = c.n_embd;
  const int n_rows = row0.back();
  const size_t rows = static_cast<size_t>(n_rows);
  hidden_.resize(rows * E);
  RmsRows(x_.data(), w.output_norm, c.rms_eps, n_rows, E, hidden_.data());
  logits_.resize(rows * c.n_vocab_draft);
  ops::MatMul(w.output, hidden_.data(), n_rows, logits_.data(), pool);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int n_blk = static_cast<int>(jobs[j].block.size());
    if (n_blk == 0) continue;
    BlockOutput* out = jobs[j].out;
    out->n_rows = n_blk;
    out->hidden.assign(hidden_.begin() + row0[j] * E, hidden_.begin() + (row0[j] + n_blk) * E);
    out->logits.resize(static_cast<size_t>(n_blk) * c.n_vocab);
    ScatterDraftLogits(logits_.data() + static_cast<size_t>(row0[j]) * c.n_vocab_draft, n_blk, w.d2t, c.n_vocab,
                       out->logits.data());
  }
}

}  // namespace dspark
