#include "serve/engine_loop.h"

#include "util/log.h"

namespace dspark::serve {

void RequestChannel::Push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

bool RequestChannel::Pop(StreamEvent* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  return true;
}

EngineLoop::EngineLoop(BatchEngine& engine, int max_in_flight, LatencyObserver* observer)
    : engine_(engine), max_in_flight_(std::max(max_in_flight, engine.options().n_parallel)), observer_(observer) {}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SpecStats EngineLoop::cumulative_stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

Result<int64_t> EngineLoop::Submit(std::vector<int32_t> prompt, GenerateOptions options,
                                   std::shared_ptr<RequestChannel> channel) {
  {
    // Under mu_ so that once Run() sees stop_ with nothing in flight, nothing new can arrive.
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(StatusCode::kUnavailable, "server is shutting down");
    const int n = in_flight_.load();
    if (n >= max_in_flight_)
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("server is busy: {} requests in flight (limit {}); retry later", n, max_in_flight_));
    in_flight_.fetch_add(1);
  }

  // Per-request latency state, touched only on the engine thread.
  struct Timing {
    bool first = true;
    RequestChannel::Clock::time_point last;
  };
  auto timing = std::make_shared<Timing>();
  auto on_token = [this, channel, timing](const TokenEvent& e) {
    const int32_t id = e.id;
    if (id >= 0 && observer_ != nullptr) {
      const auto now = RequestChannel::Clock::now();
      if (timing->first)
        observer_->ObserveTimeToFirstToken(std::chrono::duration<double>(now - channel->arrival).count());
      else
        observer_->ObserveInterTokenLatency(std::chrono::duration<double>(now - timing->last).count());
      timing->first = false;
      timing->last = now;
    }
    StreamEvent ev;
    ev.kind = StreamEvent::Kind::kToken;
    ev.id = id;
    ev.text = std::string(e.text);
    ev.source = e.source;
    if (e.logprob != nullptr) ev.logprob = *e.logprob;
    channel->Push(std::move(ev));
    return true;
  };
  struct Ids {
    int64_t id = -1;    // set once Submit returns (under mu_)
    bool done = false;  // set by on_done (under mu_)
  };
  auto ids = std::make_shared<Ids>();
  auto on_done = [this, channel, ids](GenerateResult&& result) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_ = engine_.cumulative_stats();  // engine thread: the engine merged this request already
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids->done = true;
      if (ids->id >= 0) live_.erase(ids->id);
    }
    in_flight_.fetch_sub(1);
    StreamEvent ev;
    ev.kind = StreamEvent::Kind::kDone;
    ev.result = std::move(result);
    channel->Push(std::move(ev));
  };
  // The engine may call on_done under its own lock, so ours is not held across Submit.
  Result<int64_t> id = engine_.Submit(std::move(prompt), std::move(options), std::move(on_token), std::move(on_done));
  if (!id.ok()) {
    in_flight_.fetch_sub(1);
    return id;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids->id = *id;
    if (!ids->done) live_.insert(*id);
  }
  cv_.notify_all();
  return id;
}

void EngineLoop::Cancel(int64_t request_id) {
  engine_.Cancel(request_id);
  cv_.notify_all();
}

void EngineLoop::CancelAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t id : live_) engine_.Cancel(id);
  }
  cv_.notify_all();
}

void EngineLoop::Run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || in_flight_.load() > 0; });
      if (stop_) {
        if (in_flight_.load() == 0) return;
        // Finish every request (as cancelled) so no HTTP thread waits forever.
        for (int64_t id : live_) engine_.Cancel(id);
      }
    }
    Result<bool> worked = engine_.Step();
    if (!worked.ok()) {
      DSPARK_LOG_ERROR("serve: engine step failed, cancelling running requests: {}", worked.status().message());
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t id : live_) engine_.Cancel(id);
    } else if (!*worked) {
      // In flight but not yet queued in the engine (Submit is between its two steps): wait briefly.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

}  // namespace dspark::serve
