// Prometheus text exposition for the server. Request counts and latency histograms are observed
// here; token counts and speculative counters are read from the engine's SpecStats (this file
// formats them and never counts them itself).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "serve/engine_loop.h"
#include "speculative/stats.h"

namespace dspark::serve {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the _bucket / _sum / _count lines of `name`.
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], the last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct EngineGauges {
  int num_running = 0;
  int num_queued = 0;
  int num_in_flight = 0;  // admitted by the server and not finished (running + queued + in hand-off)
  int n_parallel = 0;
};

class Metrics final : public LatencyObserver {
 public:
  Metrics();

  // One finished HTTP request to a /v1 endpoint: its status code and, for generations, the
  // finish reason ("stop", "length", "cancelled", ...; empty for errors).
  void ObserveRequest(int http_status, const std::string& finish_reason, double e2e_seconds);
  void ObserveTimeToFirstToken(double seconds) override;
  void ObserveInterTokenLatency(double seconds) override;

  std::string Render(const SpecStats& cumulative, const EngineGauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> requests_by_status_;
  std::map<std::string, uint64_t> finished_by_reason_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
};

}  // namespace dspark::serve
