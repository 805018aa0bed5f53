// The server's engine thread: runs BatchEngine::Step() while work exists and sleeps on a
// condition variable when idle. HTTP threads submit requests and read their tokens from a
// per-request channel; callbacks run on the engine thread and only push into channels. Bounds
// the requests in flight (running + queued) so a full server answers 429 instead of queueing
// without limit.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "speculative/batch_engine.h"

namespace dspark::serve {

// What the engine thread hands to the HTTP thread of one request.
struct StreamEvent {
  enum class Kind { kToken, kDone };
  Kind kind = Kind::kToken;
  int32_t id = -1;  // -1: the final flush of held-back text
  std::string text;
  TokenSource source = TokenSource::kTarget;
  std::optional<TokenLogprob> logprob;  // when the request asked for logprobs
  GenerateResult result;  // kDone only
};

// A thread-safe single-consumer queue of one request's events, plus its latency timestamps.
class RequestChannel {
 public:
  using Clock = std::chrono::steady_clock;

  void Push(StreamEvent event);
  // Waits up to `timeout` for an event; false on timeout.
  bool Pop(StreamEvent* out, std::chrono::milliseconds timeout);

  Clock::time_point arrival = Clock::now();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
};

// Latency observations the loop reports (metrics implement it; all calls are on the engine thread).
class LatencyObserver {
 public:
  virtual ~LatencyObserver() = default;
  virtual void ObserveTimeToFirstToken(double seconds) = 0;
  virtual void ObserveInterTokenLatency(double seconds) = 0;
};

class EngineLoop {
 public:
  // `max_in_flight`: most requests running or queued at once (>= the engine's n_parallel).
  EngineLoop(BatchEngine& engine, int max_in_flight, LatencyObserver* observer = nullptr);
  ~EngineLoop();  // stops the thread; unfinished requests are cancelled first

  void Start();
  void Stop();

  // Thread-safe. kResourceExhausted when max_in_flight requests are already in flight; the
  // engine's validation errors (prompt too long, bad sampling values) otherwise.
  Result<int64_t> Submit(std::vector<int32_t> prompt, GenerateOptions options, std::shared_ptr<RequestChannel> channel);
  // Thread-safe; the request finishes with stop_reason "cancelled" at the next step boundary.
  void Cancel(int64_t request_id);
  // Thread-safe; Cancel() for every request in flight (the server's shutdown timeout).
  void CancelAll();

  int num_in_flight() const { return in_flight_.load(); }
  int num_running() const { return engine_.num_running(); }
  int num_queued() const { return engine_.num_queued(); }
  int n_parallel() const { return engine_.options().n_parallel; }
  // A copy of the engine's cumulative statistics as of the last finished request.
  SpecStats cumulative_stats() const;

 private:
  void Run();

  BatchEngine& engine_;
  const int max_in_flight_;
  LatencyObserver* observer_;
  std::atomic<int> in_flight_{0};

  std::mutex mu_;  // guards stop_, live_, stats_
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<int64_t> live_;
  SpecStats stats_;
  mutable std::mutex stats_mu_;
  std::thread thread_;
};

}  // namespace dspark::serve
