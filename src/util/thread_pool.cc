#include "util/thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define DSPARK_PAUSE() _mm_pause()
#else
#define DSPARK_PAUSE() \
  do {                 \
  } while (0)
#endif

namespace dspark {

namespace {
// Spin iterations before a worker blocks on the condition variable (~50 us on a 3 GHz core).
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(uint64_t generation, int thread_idx) {
  for (;;) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    if ((t >> 32) != (generation & 0xffffffffu)) return;
    const int64_t task = static_cast<int64_t>(t & 0xffffffffu);
    if (task >= num_tasks_.load(std::memory_order_acquire)) return;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
    (*fn_)(task, thread_idx);
    done_tasks_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::WorkerLoop(int thread_idx) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
      DSPARK_PAUSE();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      // Counted before the predicate's check: either ParallelFor sees a sleeper and notifies, or
      // this check sees its new generation (both sides are sequentially consistent).
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    RunTasks(seen, thread_idx);
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  if (num_threads_ == 1 || num_tasks == 1) {
    for (int64_t i = 0; i < num_tasks; ++i) fn(i, 0);
    return;
  }
  const uint64_t gen = ++last_generation_;
  // Invalidate stale claims first, then describe the loop, then publish it.
  ticket_.store((gen & 0xffffffffu) << 32, std::memory_order_release);
  fn_ = &fn;
  done_tasks_.store(0, std::memory_order_relaxed);
  num_tasks_.store(num_tasks, std::memory_order_release);
  // Workers spinning between the loops of a pass see the new generation without a lock or a
  // futex call; only sleeping ones need the condition variable.
  generation_.store(gen, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  RunTasks(gen, 0);
  // Spin briefly for tasks still running on workers, then yield so an oversubscribed machine
  // can schedule them.
  int spins = 0;
  while (done_tasks_.load(std::memory_order_acquire) != num_tasks) {
    if (++spins < 2000) DSPARK_PAUSE();
    else std::this_thread::yield();
  }
}

void ThreadPool::ParallelRange(int64_t n, int64_t grain,
                               const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  // A few chunks per thread balance uneven progress without much hand-out overhead.
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t{num_threads_} * 4);
  if (chunks < 1) chunks = 1;
  const int64_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;
  ParallelFor(chunks, [&](int64_t c, int t) {
    const int64_t begin = c * chunk;
    const int64_t end = std::min(n, begin + chunk);
    fn(begin, end, t);
  });
}

int ThreadPool::DefaultThreadCount() {
  // Count distinct (physical id, core id) pairs; fall back to hardware_concurrency.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(cpuinfo, line)) {
    auto value = [&] { auto p = line.find(':'); return p == std::string::npos ? std::string() : line.substr(p + 1); };
    if (line.rfind("physical id", 0) == 0) phys = value();
    if (line.rfind("core id", 0) == 0) cores.insert({phys, value()});
  }
  int n = static_cast<int>(cores.size());
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return n < 1 ? 1 : n;
}

}  // namespace dspark
