// MatMul throughput per weight type at real model shapes, for m = 1 (decode), 2..16 (speculative
// verification) and 512 (prefill), on 1 and 2 threads; plus memory-bandwidth baselines (memcpy and
// a read-only stream) to judge the decode numbers against.
//
// Weights are cycled through enough copies to exceed the last-level cache, so decode is measured
// streaming from DRAM as it is in a real model (one layer's matrices are never re-read hot).
// Counters: bytes_per_second = weight bytes streamed; GFLOPS = 2·m·rows·cols / time.
#include "kernels/hwy_targets.h"  // first: same Highway target list as the kernels

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hwy/targets.h"
#include "kernels/ops.h"
#include "util/thread_pool.h"

namespace dspark {
namespace {

// Bigger than the last-level cache of common desktop and server CPUs.
constexpr size_t kColdBytes = size_t{640} << 20;

ThreadPool& Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

// One quantised matrix replicated `copies` times (kept for the last (type, shape) asked for).
struct WeightSet {
  DType type;
  int64_t rows = 0, cols = 0;
  size_t bytes = 0;  // one copy
  int copies = 0;
  std::vector<uint8_t> data;
  size_t packed_bytes = 0;           // one packed copy (ops::PackedBytes), 0 if none
  std::vector<uint8_t> packed;       // copies x packed_bytes, 64-byte aligned start at packed_base
  uint8_t* packed_base = nullptr;
};

// Whether the current benchmark wants the packed layout (ops::PackWeights) next to the rows.
bool kernels_bench_packed = false;

const WeightSet& Weights(DType type, int64_t rows, int64_t cols) {
  static WeightSet ws;
  static bool ws_packed = false;
  if (ws.type == type && ws.rows == rows && ws.cols == cols && !ws.data.empty() && ws_packed == kernels_bench_packed)
    return ws;
  ws_packed = kernels_bench_packed;
  ws.type = type;
  ws.rows = rows;
  ws.cols = cols;
  ws.bytes = RowBytes(type, cols) * rows;
  ws.copies = static_cast<int>(std::max<size_t>(1, (kColdBytes + ws.bytes - 1) / ws.bytes));
  ws.data.assign(ws.bytes * ws.copies, 0);
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.f, 0.05f);
  std::vector<float> row(cols);
  const size_t rb = RowBytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    ops::QuantizeRow(type, row.data(), ws.data.data() + r * rb, cols);
  }
  for (int c = 1; c < ws.copies; ++c) std::memcpy(ws.data.data() + c * ws.bytes, ws.data.data(), ws.bytes);
  ws.packed_bytes = kernels_bench_packed ? ops::PackedBytes(type, rows, cols) : 0;
  ws.packed.clear();
  ws.packed_base = nullptr;
  if (ws.packed_bytes > 0) {
    ws.packed.assign(ws.packed_bytes * ws.copies + 64, 0);
    ws.packed_base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws.packed.data()) + 63) & ~uintptr_t{63});
    ops::PackWeights(ops::WeightView{ws.data.data(), type, rows, cols}, ws.packed_base, Pool(1));
    for (int c = 1; c < ws.copies; ++c)
      std::memcpy(ws.packed_base + c * ws.packed_bytes, ws.packed_base, ws.packed_bytes);
  }
  return ws;
}

// Where the weights come from: DRAM (copies past the LLC), L2 (one copy, resident after the first
// iteration: the kernel's compute cost) or L3 (copies adding up to a small model such as the bundled
// 28 MB target, which a decode step streams from L3: what verification rows cost on top of it).
enum class Residency { kDram, kL2, kL3 };
constexpr size_t kL3Bytes = size_t{24} << 20;

// packed = true: MatMul reads the packed layout (as a loaded model does on CPUs that have one).
void BM_MatMul(benchmark::State& state, DType type, int64_t rows, int64_t cols, Residency where, bool packed) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  kernels_bench_packed = packed;
  const WeightSet& ws = Weights(type, rows, cols);
  const int copies = where == Residency::kL2   ? 1
                     : where == Residency::kL3 ? std::min<int>(ws.copies, static_cast<int>((kL3Bytes + ws.bytes - 1) / ws.bytes))
                                               : ws.copies;
  std::vector<float> x(m * cols), y(m * rows);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (auto& v : x) v = dist(rng);
  ThreadPool& pool = Pool(threads);
  int c = 0;
  for (auto _ : state) {
    ops::WeightView w{ws.data.data() + c * ws.bytes, type, rows, cols};
    if (ws.packed_base != nullptr) w.packed = ws.packed_base + c * ws.packed_bytes;
    ops::MatMul(w, x.data(), m, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * ws.bytes);
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * m * rows * cols * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

// memcpy of a 256 MiB buffer split over `threads` threads: bytes_per_second counts bytes copied.
void BM_Memcpy(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const size_t n = size_t{256} << 20;
  static std::vector<uint8_t> a(n, 1), b(n, 2);
  ThreadPool& pool = Pool(threads);
  for (auto _ : state) {
    pool.ParallelFor(threads, [&](int64_t t, int) {
      const size_t chunk = n / threads;
      std::memcpy(b.data() + t * chunk, a.data() + t * chunk, chunk);
    });
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n);
}

// Read-only stream (what a decode MatMul does with weights): Σ of 640 MiB of floats.
void BM_ReadStream(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  static std::vector<float> a(kColdBytes / sizeof(float), 1.f);
  ThreadPool& pool = Pool(threads);
  for (auto _ : state) {
    std::vector<float> sums(threads);
    pool.ParallelFor(threads, [&](int64_t t, int) {
      const size_t chunk = a.size() / threads;
      sums[t] = ops::Dot(a.data() + t * chunk, a.data() + t * chunk, static_cast<int64_t>(chunk / 2));
      sums[t] += ops::Dot(a.data() + t * chunk + chunk / 2, a.data() + t * chunk, static_cast<int64_t>(chunk / 2));
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kColdBytes);
}

// One fork-join of the pool with `threads` tasks that do almost nothing: the hand-off cost every
// parallel phase of a forward pass pays (a decode step of the bundled target has ~45 of them).
void BM_ForkJoin(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ThreadPool& pool = Pool(threads);
  std::vector<int64_t> touched(threads * 16);
  for (auto _ : state) {
    pool.ParallelFor(threads, [&](int64_t t, int) { touched[t * 16] += t; });
    benchmark::DoNotOptimize(touched.data());
  }
}

struct Shape {
  const char* name;
  int64_t rows, cols;  // rows = out features, cols = in features
};

void RegisterAll() {
  benchmark::RegisterBenchmark("ForkJoin", BM_ForkJoin)->Arg(2)->UseRealTime();
  benchmark::RegisterBenchmark("Memcpy", BM_Memcpy)->Arg(1)->Arg(2)->UseRealTime();
  benchmark::RegisterBenchmark("ReadStream", BM_ReadStream)->Arg(1)->Arg(2)->UseRealTime();
  // Qwen3-0.6B: n_embd 1024, n_ff 3072 (q/o 1024x1024 per head group); Qwen3-1.7B: 2048 x 6144, and
  // its gate and up projections fused into one matrix as the engine runs them (PackFused).
  const Shape shapes[] = {{"qwen06_up_3072x1024", 3072, 1024},
                          {"qwen06_down_1024x3072", 1024, 3072},
                          {"qwen06_attn_1024x1024", 1024, 1024},
                          {"qwen17_up_6144x2048", 6144, 2048},
                          {"qwen17_gate_up_12288x2048", 12288, 2048}};
  const DType types[] = {DType::kQ8_0, DType::kQ4_K, DType::kQ4_0, DType::kQ6_K, DType::kQ5_K,
                         DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kF16, DType::kBF16,
                         DType::kF32};
  // Cache-resident: a 1024 x 1024 matrix, the bundled models' widest (the draft model's 4096 x 192
  // output head, the target's 2048 x 384 fused gate/up), whose weights stay in L2/L3 between decode
  // steps on most CPUs, and the draft model's fused projections. These show where a second thread
  // stops paying (kMinTaskMacs): at m = 1 a matrix as small as the draft's fused gate/up runs no
  // faster on two threads than on one, while its head does.
  const Shape hot_shapes[] = {{"l2_1024x1024", 1024, 1024},
                              {"ref_draft_head_4096x192", 4096, 192},
                              {"ref_target_gate_up_2048x384", 2048, 384},
                              {"ref_draft_gate_up_1024x192", 1024, 192},
                              {"ref_draft_down_192x512", 192, 512},
                              {"ref_draft_qkv_320x192", 320, 192}};
  // MatMul[Packed][Hot|L3]/<type>/<shape> for every m and 1 and 2 threads (packed only where the type
  // has a packed layout on this CPU).
  const auto add = [](DType t, const Shape& s, Residency where, std::initializer_list<int64_t> ms) {
    for (bool packed : {false, true}) {
      if (packed && ops::PackedBytes(t, s.rows, s.cols) == 0) continue;
      if (!packed && where == Residency::kL3) continue;
      const char* suffix = where == Residency::kL2 ? "Hot/" : where == Residency::kL3 ? "L3/" : "/";
      const std::string name = std::string(packed ? "MatMulPacked" : "MatMul") + suffix + std::string(DTypeName(t)) +
                               "/" + s.name;
      auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_MatMul, t, s.rows, s.cols, where, packed);
      b->ArgNames({"m", "threads"})->UseRealTime();
      for (int threads : {1, 2})
        for (int64_t m : ms) b->Args({m, threads});
    }
  };
  for (DType t : types) {
    for (const Shape& s : shapes) add(t, s, Residency::kDram, {1, 2, 4, 8, 16, 512});
    for (const Shape& s : hot_shapes) {
      add(t, s, Residency::kL2, {1, 2, 3, 4, 8, 16});
      add(t, s, Residency::kL3, {1, 3, 5, 6, 9});
    }
  }
}

}  // namespace
}  // namespace dspark

// DSPARK_BENCH_TARGET=AVX2 (or AVX3, SSE4, ...) restricts dispatch to that Highway target, to
// measure the fallback paths on a machine that has better ones.
int main(int argc, char** argv) {
  if (const char* want = std::getenv("DSPARK_BENCH_TARGET")) {
    for (int64_t t : hwy::SupportedAndGeneratedTargets())
      if (std::string(hwy::TargetName(t)) == want) hwy::SetSupportedTargetsForTest(t);
  }
  dspark::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
