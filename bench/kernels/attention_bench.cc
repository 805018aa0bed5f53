// ops::Attention at the shapes of a decode step and of a verification block: one K/V head of the
// bundled target (3 query heads per K/V head, head_dim 64) and of Qwen3-0.6B (2 per K/V head,
// head_dim 128), rows = 1..8 query rows of one sequence over n cached cells, F16 cache. A
// verification block of r rows sees the prefix plus a causal triangle over its own rows, as in the
// engine. Attention/: hot (the head's K/V stays in L2 between iterations); AttentionCold/: cycled
// through 64 MiB of copies, as in a decode step, where the weight stream has evicted the cache
// since the layer last ran.
// Counters: keys = cells scored per second per query head (n · heads / time).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "util/fp16.h"

namespace dspark {
namespace {

void BM_Attention(benchmark::State& state, int heads_per_row, int head_dim, bool cold) {
  const int rows = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  const int n_q = rows * heads_per_row;
  const int tiles = (n + ops::kAttentionKeyTile - 1) / ops::kAttentionKeyTile;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  // Cold: enough copies of the head's K/V to exceed L2, cycled, as in a pass where the weight
  // stream has evicted the cache since the layer's attention last ran.
  const size_t kt_elems = static_cast<size_t>(tiles) * head_dim * ops::kAttentionKeyTile;
  const size_t v_elems = static_cast<size_t>(n) * head_dim;
  const int copies = cold ? static_cast<int>(std::max<size_t>(2, (size_t{64} << 20) / (2 * (kt_elems + v_elems)))) : 1;
  std::vector<uint16_t> kt(kt_elems * copies), v(v_elems * copies);
  for (auto& e : kt) e = F32ToF16(dist(rng));
  for (auto& e : v) e = F32ToF16(dist(rng));
  std::vector<float> q(static_cast<size_t>(n_q) * head_dim), out(q.size());
  for (auto& e : q) e = dist(rng);
  // The block's own rows: row r sees block rows <= r (cells n - rows .. n - 1).
  const int shared = rows > 1 ? n - rows : n;
  std::vector<uint8_t> visible(static_cast<size_t>(rows) * rows);
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < rows; ++t) visible[r * rows + t] = t <= r;
  std::vector<float> scratch(static_cast<size_t>(ops::AttentionScratch(n_q, n, head_dim)));
  const int64_t stride = static_cast<int64_t>(heads_per_row) * head_dim;
  int c = 0;
  for (auto _ : state) {
    ops::Attention(q.data(), stride, n_q, heads_per_row, head_dim, head_dim, DType::kF16, kt.data() + c * kt_elems,
                   v.data() + c * v_elems, head_dim, n, shared, rows > 1 ? visible.data() : nullptr, 0.125f,
                   nullptr, scratch.data(), out.data(), stride);
    benchmark::DoNotOptimize(out.data());
    c = (c + 1) % copies;
  }
  state.counters["keys"] = benchmark::Counter(static_cast<double>(n) * n_q * state.iterations(),
                                              benchmark::Counter::kIsRate);
}

const bool registered = [] {
  struct Shape {
    const char* name;
    int heads_per_row, head_dim;
  };
  for (bool cold : {false, true}) {
    for (const Shape& s : {Shape{"ref_target_g3_d64", 3, 64}, Shape{"qwen06_g2_d128", 2, 128}}) {
      auto* b = benchmark::RegisterBenchmark((std::string(cold ? "AttentionCold/" : "Attention/") + s.name).c_str(),
                                             BM_Attention, s.heads_per_row, s.head_dim, cold);
      b->ArgNames({"rows", "n"});
      for (int n : {256, 1024})
        for (int rows : {1, 2, 3, 4, 6, 8}) b->Args({rows, n});
    }
  }
  return true;
}();

}  // namespace
}  // namespace dspark
