#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/ops.h"
#include "model/swiglu.h"

namespace dspark {

namespace {

// RouteExperts' working rows, per calling thread: routing runs in every mixture block of every
// pass, and these are sized once.
struct RouteScratch {
  std::vector<float> probs, score, group_score;
  std::vector<int32_t> order, group_order;
  std::vector<char> kept;
};

}  // namespace

void RouteExperts(const MoeConfig& moe, const float* logits, int n, int32_t* ids, float* weights, const float* bias) {
  const int n_expert = moe.n_expert, k = moe.n_expert_used;
  const int groups = moe.n_group > 1 ? moe.n_group : 0, per_group = groups > 0 ? n_expert / groups : 0;
  thread_local RouteScratch rs;
  rs.probs.resize(n_expert);
  rs.score.resize(n_expert);
  rs.order.resize(n_expert);
  rs.group_score.resize(groups);
  rs.group_order.resize(groups);
  rs.kept.resize(groups);
  std::vector<float>& probs = rs.probs;
  std::vector<float>& score = rs.score;
  std::vector<int32_t>& order = rs.order;
  std::vector<float>& group_score = rs.group_score;
  std::vector<int32_t>& group_order = rs.group_order;
  const auto better = [](const std::vector<float>& v) {
    return [&v](int32_t a, int32_t b) { return v[a] != v[b] ? v[a] > v[b] : a < b; };
  };
  for (int i = 0; i < n; ++i) {
    const float* l = logits + static_cast<size_t>(i) * n_expert;
    if (moe.gating == ExpertGating::kSoftmax) {
      std::copy(l, l + n_expert, probs.begin());
      ops::Softmax(probs.data(), n_expert);
    } else {
      for (int e = 0; e < n_expert; ++e) probs[e] = 1.0f / (1.0f + std::exp(-l[e]));
    }
    for (int e = 0; e < n_expert; ++e) score[e] = bias != nullptr ? probs[e] + bias[e] : probs[e];
    if (groups > 0) {
      // Each group scores the sum of its two best experts; the experts of all but the best
      // n_group_used groups are out of the running.
      for (int g = 0; g < groups; ++g) {
        const float* sc = score.data() + g * per_group;
        float first = -INFINITY, second = -INFINITY;
        for (int e = 0; e < per_group; ++e) {
          if (sc[e] > first) second = first, first = sc[e];
          else if (sc[e] > second) second = sc[e];
        }
        group_score[g] = per_group > 1 ? first + second : first;
      }
      std::iota(group_order.begin(), group_order.end(), 0);
      std::partial_sort(group_order.begin(), group_order.begin() + moe.n_group_used, group_order.end(),
                        better(group_score));
      std::fill(rs.kept.begin(), rs.kept.end(), 0);
      for (int g = 0; g < moe.n_group_used; ++g) rs.kept[group_order[g]] = 1;
      for (int e = 0; e < n_expert; ++e)
        if (!rs.kept[e / per_group]) score[e] = -INFINITY;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), better(score));
    int32_t* row_ids = ids + static_cast<size_t>(i) * k;
    float* w = weights + static_cast<size_t>(i) * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      row_ids[j] = order[j];
      w[j] = probs[order[j]];
      sum += w[j];
    }
    if (moe.norm_weights && sum > 0.0f)
      for (int j = 0; j < k; ++j) w[j] /= sum;
    if (moe.weights_scale != 0.0f)
      for (int j = 0; j < k; ++j) w[j] *= moe.weights_scale;
  }
}

namespace {

// Per calling thread, reused across passes.
struct MoeScratch {
  std::vector<float> logits, weights, rows_in, gate_up, act, up, rows_out, outs;
  std::vector<int32_t> ids, slots, first, fill;
};

}  // namespace

int MoeFfn(const MoeConfig& moe, const LayerWeights& L, const float* h, int n, int64_t d, float* x,
           ThreadPool& pool) {
  thread_local MoeScratch s;
  const int n_expert = moe.n_expert, k = moe.n_expert_used;
  const int64_t ff = moe.n_ff_exp;
  s.logits.resize(static_cast<size_t>(n) * n_expert);
  ops::MatMul(L.router, h, n, s.logits.data(), pool);
  s.ids.resize(static_cast<size_t>(n) * k);
  s.weights.resize(s.ids.size());
  RouteExperts(moe, s.logits.data(), n, s.ids.data(), s.weights.data(),
               L.exp_probs_b.empty() ? nullptr : L.exp_probs_b.data());

  // The (row, choice) slots of each expert, expert by expert (a counting sort).
  s.first.assign(n_expert + 1, 0);
  for (int32_t e : s.ids) ++s.first[e + 1];
  for (int e = 0; e < n_expert; ++e) s.first[e + 1] += s.first[e];
  s.slots.resize(s.ids.size());
  s.fill.assign(s.first.begin(), s.first.end() - 1);
  for (size_t slot = 0; slot < s.ids.size(); ++slot) s.slots[s.fill[s.ids[slot]]++] = static_cast<int32_t>(slot);

  s.outs.resize(s.ids.size() * d);  // [row * k + choice, n_embd]
  int experts_read = 0;
  for (int e = 0; e < n_expert; ++e) {
    const int m = s.first[e + 1] - s.first[e];
    if (m == 0) continue;
    ++experts_read;
    const int32_t* slots = s.slots.data() + s.first[e];
    s.rows_in.resize(static_cast<size_t>(m) * d);
    for (int r = 0; r < m; ++r)
      std::memcpy(s.rows_in.data() + r * d, h + static_cast<size_t>(slots[r] / k) * d, d * sizeof(float));
    s.act.resize(static_cast<size_t>(m) * ff);
    static const ops::WeightView kNotFused{};
    SwiGluActivation(L.gate_exps[e], L.up_exps[e], L.gate_up_exps.empty() ? kNotFused : L.gate_up_exps[e], ff,
                     s.rows_in.data(), m, s.gate_up, s.up, s.act.data(), pool);
    s.rows_out.resize(static_cast<size_t>(m) * d);
    ops::MatMul(L.down_exps[e], s.act.data(), m, s.rows_out.data(), pool);
    for (int r = 0; r < m; ++r)
      std::memcpy(s.outs.data() + static_cast<size_t>(slots[r]) * d, s.rows_out.data() + r * d, d * sizeof(float));
  }

  // Each row: its experts' outputs times their weights, summed in choice order, onto the residual.
  s.rows_out.resize(d);
  for (int i = 0; i < n; ++i) {
    float* acc = s.rows_out.data();
    const float* out = s.outs.data() + static_cast<size_t>(i) * k * d;
    const float* w = s.weights.data() + static_cast<size_t>(i) * k;
    for (int64_t c = 0; c < d; ++c) acc[c] = out[c] * w[0];
    for (int j = 1; j < k; ++j) ops::Axpy(w[j], out + j * d, d, acc);
    ops::Add(acc, d, x + static_cast<size_t>(i) * d);
  }
  return experts_read;
}

}  // namespace dspark
