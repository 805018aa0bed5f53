#include "model/mla.h"

#include <cstring>

#include "kernels/ops.h"

namespace dspark {

namespace {

// Per calling thread, reused across passes.
struct MlaScratch {
  std::vector<float> qa, q, head_in, head_out, pe, out, tmp, key;
};

// Copies columns [col, col + width) of each of n rows (row stride `stride`) into dst [n, width].
void Gather(const float* src, int n, int64_t stride, int64_t col, int64_t width, float* dst) {
  for (int i = 0; i < n; ++i) std::memcpy(dst + i * width, src + i * stride + col, width * sizeof(float));
}
void Scatter(const float* src, int n, int64_t width, int64_t stride, int64_t col, float* dst) {
  for (int i = 0; i < n; ++i) std::memcpy(dst + i * stride + col, src + i * width, width * sizeof(float));
}

}  // namespace

void MlaQueries(const ModelConfig& c, const LayerWeights& L, const Rope& rope, const float* h, int n,
                const float* cos_t, const float* sin_t, float* q_out, float* kv, ThreadPool& pool) {
  thread_local MlaScratch s;
  const MlaConfig& m = c.mla;
  const int64_t head_q = m.nope_dim + m.rope_dim;       // a head of the projected query
  const int64_t head_l = m.kv_lora_rank + m.rope_dim;   // a head in the latent space (the cache's key)
  const int half = m.rope_dim / 2;
  s.q.resize(static_cast<size_t>(n) * c.n_head * head_q);
  if (m.q_lora_rank > 0) {
    s.qa.resize(static_cast<size_t>(n) * m.q_lora_rank);
    ops::MatMul(L.wq_a, h, n, s.qa.data(), pool);
    for (int i = 0; i < n; ++i) {
      float* r = s.qa.data() + static_cast<size_t>(i) * m.q_lora_rank;
      ops::RmsNorm(r, L.q_a_norm.data(), c.rms_eps, m.q_lora_rank, r);
    }
    ops::MatMul(L.wq_b, s.qa.data(), n, s.q.data(), pool);
  } else {
    ops::MatMul(L.wq, h, n, s.q.data(), pool);
  }
  // Each head's non-RoPE query into the latent space (wk_b), then its roped RoPE part.
  s.head_in.resize(static_cast<size_t>(n) * m.nope_dim);
  s.head_out.resize(static_cast<size_t>(n) * m.kv_lora_rank);
  s.pe.resize(static_cast<size_t>(n) * m.rope_dim);
  for (int hh = 0; hh < c.n_head; ++hh) {
    Gather(s.q.data(), n, c.n_head * head_q, hh * head_q, m.nope_dim, s.head_in.data());
    ops::MatMul(L.wk_b[hh], s.head_in.data(), n, s.head_out.data(), pool);
    Scatter(s.head_out.data(), n, m.kv_lora_rank, c.n_head * head_l, hh * head_l, q_out);
    Gather(s.q.data(), n, c.n_head * head_q, hh * head_q + m.nope_dim, m.rope_dim, s.pe.data());
    for (int i = 0; i < n; ++i) rope.Apply(cos_t + i * half, sin_t + i * half, 1, m.rope_dim, s.pe.data() + i * m.rope_dim);
    Scatter(s.pe.data(), n, m.rope_dim, c.n_head * head_l, hh * head_l + m.kv_lora_rank, q_out);
  }
  // The latent (normed) and the shared RoPE key: the cache's key [latent, k_pe], value [latent].
  ops::MatMul(L.wkv_a, h, n, kv, pool);
  for (int i = 0; i < n; ++i) {
    float* r = kv + static_cast<size_t>(i) * head_l;
    ops::RmsNorm(r, L.kv_a_norm.data(), c.rms_eps, m.kv_lora_rank, r);
    rope.Apply(cos_t + i * half, sin_t + i * half, 1, m.rope_dim, r + m.kv_lora_rank);
  }
}

void MlaOutput(const ModelConfig& c, const LayerWeights& L, const float* att, int n, float* x, ThreadPool& pool) {
  thread_local MlaScratch s;
  const MlaConfig& m = c.mla;
  s.head_in.resize(static_cast<size_t>(n) * m.kv_lora_rank);
  s.head_out.resize(static_cast<size_t>(n) * m.v_dim);
  s.out.resize(static_cast<size_t>(n) * c.n_head * m.v_dim);
  for (int hh = 0; hh < c.n_head; ++hh) {
    Gather(att, n, int64_t{c.n_head} * m.kv_lora_rank, int64_t{hh} * m.kv_lora_rank, m.kv_lora_rank, s.head_in.data());
    ops::MatMul(L.wv_b[hh], s.head_in.data(), n, s.head_out.data(), pool);
    Scatter(s.head_out.data(), n, m.v_dim, int64_t{c.n_head} * m.v_dim, int64_t{hh} * m.v_dim, s.out.data());
  }
  s.tmp.resize(static_cast<size_t>(n) * c.n_embd);
  ops::MatMul(L.wo, s.out.data(), n, s.tmp.data(), pool);
  ops::Add(s.tmp.data(), static_cast<int64_t>(n) * c.n_embd, x);
}

}  // namespace dspark
