#include "spec/drafters/dflash_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <limits>

#include "kernels/ops.h"

namespace dspark {

namespace {

// The cache only needs the K/V geometry.
ModelConfig CacheConfig(const DflashConfig& c) {
  ModelConfig m;
  m.n_layer = c.n_layer;
  m.n_head = c.n_head;
  m.n_head_kv = c.n_head_kv;
  m.head_dim = c.head_dim;
  m.head_dim_v = c.head_dim;
  m.n_embd = c.n_embd;
  return m;
}

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

DflashForward::DflashForward(const DflashModel& model, int n_ctx)
    : model_(model), rope_(model.config().rope), cache_(CacheConfig(model.config()), 1, n_ctx + model.config().block_size + 1, DType::kF32) {}

Status DflashForward::Run(const float* feats, int n_ctx_rows, std::span<const int32_t> block, int block_pos0,
                          ThreadPool& pool, BlockOutput* out) {
  const DflashConfig& c = model_.config();
  const DflashWeights& w = model_.weights();
  const int64_t E = c.n_embd;
  const int n_blk = static_cast<int>(block.size());
  const int len0 = cache_.Length(0);
  if (len0 + n_ctx_rows + n_blk > cache_.n_ctx())
    return OutOfRange("spec: dflash draft context full: {} rows + {} new + a block of {} exceed {}", len0, n_ctx_rows,
                      n_blk, cache_.n_ctx());
  for (int32_t t : block)
    if (t < 0 || t >= c.n_vocab) return InvalidArgument("spec: block token {} outside the vocabulary", t);
  const int half = c.head_dim / 2;
  const int kv_dim = c.kv_dim();

  // Context: g = RMSNorm_enc(fc · f [* fc.scale]), then each layer's K/V at positions len0...
  if (n_ctx_rows > 0) {
    g_.resize(static_cast<size_t>(n_ctx_rows) * E);
    kv_.resize(static_cast<size_t>(n_ctx_rows) * kv_dim);
    ops::MatMul(w.fc, feats, n_ctx_rows, g_.data(), pool);
    if (w.fc_scale != 1.0f) ops::Scale(w.fc_scale, static_cast<int64_t>(n_ctx_rows) * E, g_.data());
    RmsRows(g_.data(), w.enc_norm, c.rms_eps, n_ctx_rows, E, g_.data());
    cos_.resize(static_cast<size_t>(n_ctx_rows) * half);
    sin_.resize(static_cast<size_t>(n_ctx_rows) * half);
    for (int i = 0; i < n_ctx_rows; ++i) rope_.Angles(len0 + i, cos_.data() + i * half, sin_.data() + i * half);
    for (int il = 0; il < c.n_layer; ++il) {
      const DflashLayer& L = w.layers[il];
      ops::MatMul(L.wk, g_.data(), n_ctx_rows, kv_.data(), pool);
      for (int i = 0; i < n_ctx_rows; ++i) {
        float* k = kv_.data() + static_cast<size_t>(i) * kv_dim;
        NormRope(rope_, cos_.data() + i * half, sin_.data() + i * half, L.k_norm, c.rms_eps, c.n_head_kv, c.head_dim, k);
        cache_.WriteK(il, 0, len0 + i, k);
      }
      ops::MatMul(L.wv, g_.data(), n_ctx_rows, kv_.data(), pool);
      for (int i = 0; i < n_ctx_rows; ++i)
        cache_.WriteV(il, 0, len0 + i, kv_.data() + static_cast<size_t>(i) * kv_dim);
    }
    cache_.Advance(0, n_ctx_rows);
  }
  if (n_blk == 0) return Status::Ok();

  // Block: pre-norm Qwen3 layers whose attention sees [context ; block].
  const int n_cells = cache_.Length(0);  // block cells follow at n_cells..n_cells+n_blk-1
  const size_t rows = static_cast<size_t>(n_blk);
  x_.resize(rows * E);
  h_.resize(rows * E);
  q_.resize(rows * c.q_dim());
  k_.resize(rows * kv_dim);
  v_.resize(rows * kv_dim);
  att_.resize(rows * c.q_dim());
  tmp_.resize(rows * E);
  gate_.resize(rows * c.n_ff);
  up_.resize(rows * c.n_ff);
  cos_.resize(rows * half);
  sin_.resize(rows * half);
  for (int i = 0; i < n_blk; ++i) {
    const ops::WeightView& e = w.tok_embd;
    const uint8_t* row = static_cast<const uint8_t*>(e.data) + RowBytes(e.type, e.cols) * block[i];
    ops::DequantizeRow(e.type, row, x_.data() + i * E, E);
    rope_.Angles(block_pos0 + i, cos_.data() + i * half, sin_.data() + i * half);
  }
  const int group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // Causal blocks: row i sees the context and block rows 0..i.
  const int n_all = n_cells + n_blk;
  if (c.causal) {
    causal_.assign(rows * rows, 0);
    for (int i = 0; i < n_blk; ++i)
      for (int j = 0; j <= i; ++j) causal_[static_cast<size_t>(i) * n_blk + j] = 1;
  }
  // Rows per attention call: ~16 query heads share each key tile load (as in Model::Forward).
  const int per_unit = std::max(1, 16 / group);
  const int n_units = (n_blk + per_unit - 1) / per_unit;

  for (int il = 0; il < c.n_layer; ++il) {
    const DflashLayer& L = w.layers[il];
    RmsRows(x_.data(), L.attn_norm, c.rms_eps, n_blk, E, h_.data());
    ops::MatMul(L.wq, h_.data(), n_blk, q_.data(), pool);
    ops::MatMul(L.wk, h_.data(), n_blk, k_.data(), pool);
    ops::MatMul(L.wv, h_.data(), n_blk, v_.data(), pool);
    for (int i = 0; i < n_blk; ++i) {
      const float* ct = cos_.data() + i * half;
      const float* st = sin_.data() + i * half;
      NormRope(rope_, ct, st, L.q_norm, c.rms_eps, c.n_head, c.head_dim, q_.data() + static_cast<size_t>(i) * c.q_dim());
      float* k = k_.data() + static_cast<size_t>(i) * kv_dim;
      NormRope(rope_, ct, st, L.k_norm, c.rms_eps, c.n_head_kv, c.head_dim, k);
      cache_.Write(il, 0, n_cells + i, k, v_.data() + static_cast<size_t>(i) * kv_dim);
    }
    // One task per (K/V head, unit of block rows); every row sees the context (cells
    // 0..n_cells-1) and the block rows its mask allows. An attention sink is one more logit per
    // head that contributes no value.
    pool.ParallelFor(static_cast<int64_t>(n_units) * c.n_head_kv, [&](int64_t task, int) {
      const int kvh = static_cast<int>(task / n_units);
      const int r0 = static_cast<int>(task % n_units) * per_unit;
      const int nr = std::min(per_unit, n_blk - r0);
      const size_t head0 = static_cast<size_t>(kvh) * group;
      thread_local std::vector<float> scratch;
      scratch.resize(static_cast<size_t>(ops::AttentionScratch(nr * group, n_all, c.head_dim)));
      ops::Attention(q_.data() + static_cast<size_t>(r0) * c.q_dim() + head0 * c.head_dim, c.q_dim(), nr * group, group,
                     c.head_dim, c.head_dim, cache_.type(), cache_.KTiles(il, 0, kvh), cache_.V(il, 0, kvh, 0),
                     c.head_dim, n_all, c.causal ? n_cells : n_all,
                     c.causal ? causal_.data() + static_cast<size_t>(r0) * n_blk : nullptr, scale,
                     L.attn_sinks.empty() ? nullptr : L.attn_sinks.data() + head0, scratch.data(),
                     att_.data() + static_cast<size_t>(r0) * c.q_dim() + head0 * c.head_dim, c.q_dim());
    });
    ops::MatMul(L.wo, att_.data(), n_blk, tmp_.data(), pool);
    ops::Add(tmp_.data(), static_cast<int64_t>(n_blk) * E, x_.data());
    RmsRows(x_.data(), L.ffn_norm, c.rms_eps, n_blk, E, h_.data());
    ops::MatMul(L.w_gate, h_.data(), n_blk, gate_.data(), pool);
    ops::MatMul(L.w_up, h_.data(), n_blk, up_.data(), pool);
    ops::SiluMul(gate_.data(), up_.data(), static_cast<int64_t>(n_blk) * c.n_ff, gate_.data());
    ops::MatMul(L.w_down, gate_.data(), n_blk, tmp_.data(), pool);
    ops::Add(tmp_.data(), static_cast<int64_t>(n_blk) * E, x_.data());
  }

  out->n_rows = n_blk;
  out->hidden.resize(rows * E);
  RmsRows(x_.data(), w.output_norm, c.rms_eps, n_blk, E, out->hidden.data());
  out->logits.resize(rows * c.n_vocab);
  if (w.d2t.empty()) {
    ops::MatMul(w.output, out->hidden.data(), n_blk, out->logits.data(), pool);
  } else {
    // Reduced vocabulary: logits_full[d2t[j]] = logits_d[j], -inf elsewhere.
    tmp_.resize(rows * c.n_vocab_draft);
    ops::MatMul(w.output, out->hidden.data(), n_blk, tmp_.data(), pool);
    std::fill(out->logits.begin(), out->logits.end(), -std::numeric_limits<float>::infinity());
    for (int i = 0; i < n_blk; ++i)
      for (int j = 0; j < c.n_vocab_draft; ++j)
        out->logits[i * static_cast<size_t>(c.n_vocab) + w.d2t[j]] = tmp_[i * static_cast<size_t>(c.n_vocab_draft) + j];
  }
  return Status::Ok();
}

}  // namespace dspark
