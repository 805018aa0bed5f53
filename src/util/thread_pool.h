// A fixed pool of worker threads that runs data-parallel loops (matmul rows, attention heads).
// The calling thread takes part, so a pool of N threads starts N-1 workers. Workers spin briefly
// before sleeping: decode issues hundreds of small parallel loops per token and a futex wake-up
// per loop would cost more than the loop itself. Publishing a loop to spinning workers takes no
// lock (only sleeping workers need the condition variable), which keeps a fork-join short
// (`kernels_bench --benchmark_filter=ForkJoin` times it). Tasks are claimed one at a time and the
// caller waits for finished tasks, not for workers: on a busy machine a worker that is not
// scheduled in time simply claims nothing, and the caller runs the remaining tasks itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dspark {

class ThreadPool {
 public:
  // num_threads >= 1, counting the caller.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task_idx, thread_idx) for task_idx in [0, num_tasks), tasks handed out dynamically.
  // thread_idx in [0, num_threads()) identifies per-thread scratch. Blocks until all are done.
  // Not re-entrant: fn must not call ParallelFor on the same pool.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t, int)>& fn);

  // Splits [0, n) into contiguous chunks of at least `grain` items, one call per chunk:
  // fn(begin, end, thread_idx).
  void ParallelRange(int64_t n, int64_t grain,
                     const std::function<void(int64_t, int64_t, int)>& fn);

  // Physical cores of this machine (hyper-threads not counted), at least 1.
  static int DefaultThreadCount();

 private:
  void WorkerLoop(int thread_idx);
  void RunTasks(uint64_t generation, int thread_idx);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t last_generation_ = 0;            // caller side only
  std::atomic<uint64_t> generation_{0};     // published loop generation
  // (generation << 32) | next task index: a claim succeeds only for the current generation, so
  // a worker that wakes late can never run a task of a loop that has moved on.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> num_tasks_{0};
  std::atomic<int64_t> done_tasks_{0};
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};            // workers blocked (or about to block) on cv_
};

}  // namespace dspark
