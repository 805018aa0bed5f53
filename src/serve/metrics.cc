#include "serve/metrics.h"

#include <fmt/format.h>

namespace dspark::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  *out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  cumulative += counts_.back();
  *out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name, sum_, name, count_);
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e_({0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0}) {}

void Metrics::ObserveRequest(int http_status, const std::string& finish_reason, double e2e_seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_by_status_[http_status];
    if (!finish_reason.empty()) ++finished_by_reason_[finish_reason];
  }
  if (http_status == 200) e2e_.Observe(e2e_seconds);
}

void Metrics::ObserveTimeToFirstToken(double seconds) { ttft_.Observe(seconds); }
void Metrics::ObserveInterTokenLatency(double seconds) { itl_.Observe(seconds); }

namespace {
void Counter(std::string* out, const std::string& name, const std::string& help, double value) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, value);
}
void Gauge(std::string* out, const std::string& name, const std::string& help, double value) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
}
}  // namespace

std::string Metrics::Render(const SpecStats& s, const EngineGauges& g) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out += "# HELP dspark:requests_total HTTP requests to /v1 endpoints by status code.\n"
           "# TYPE dspark:requests_total counter\n";
    if (requests_by_status_.empty()) out += "dspark:requests_total{status=\"200\"} 0\n";
    for (const auto& [status, n] : requests_by_status_)
      out += fmt::format("dspark:requests_total{{status=\"{}\"}} {}\n", status, n);
    out += "# HELP dspark:request_finished_total Finished generations by finish reason.\n"
           "# TYPE dspark:request_finished_total counter\n";
    for (const auto& [reason, n] : finished_by_reason_)
      out += fmt::format("dspark:request_finished_total{{finished_reason=\"{}\"}} {}\n", reason, n);
  }
  Counter(&out, "dspark:prompt_tokens_total", "Prompt tokens processed.", static_cast<double>(s.prompt_tokens));
  Counter(&out, "dspark:prompt_cache_hit_tokens_total", "Prompt tokens whose KV rows came from the prompt cache.",
          static_cast<double>(s.prompt_cached_tokens));
  Counter(&out, "dspark:generation_tokens_total", "Tokens generated.", static_cast<double>(s.generated_tokens));
  Gauge(&out, "dspark:num_requests_running", "Requests occupying a slot.", g.num_running);
  Gauge(&out, "dspark:num_requests_waiting", "Requests queued for a slot (queue depth).", g.num_queued);
  Gauge(&out, "dspark:num_requests_in_flight", "Generation requests accepted and not finished.", g.num_in_flight);
  Gauge(&out, "dspark:slots_busy", "Busy sequence slots.", g.num_running);
  Gauge(&out, "dspark:slots_total", "Sequence slots (--parallel).", g.n_parallel);
  ttft_.Render("dspark:time_to_first_token_seconds", "Time from request arrival to its first token.", &out);
  itl_.Render("dspark:inter_token_latency_seconds", "Time between consecutive tokens of a request.", &out);
  e2e_.Render("dspark:e2e_request_latency_seconds", "Time from arrival to the last byte of a successful request.", &out);
  Counter(&out, "dspark:spec_decode_num_drafts_total", "Verification steps with a non-empty draft.",
          static_cast<double>(s.num_drafts));
  Counter(&out, "dspark:spec_decode_num_draft_tokens_total", "Draft tokens proposed and verified.",
          static_cast<double>(s.num_draft_tokens));
  Counter(&out, "dspark:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          static_cast<double>(s.num_accepted_tokens));
  out += "# HELP dspark:spec_decode_num_accepted_tokens_per_pos_total Drafts whose token at a position was accepted.\n"
         "# TYPE dspark:spec_decode_num_accepted_tokens_per_pos_total counter\n";
  for (size_t i = 0; i < s.accepted_per_pos.size(); ++i)
    out += fmt::format("dspark:spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", i,
                       s.accepted_per_pos[i]);
  Counter(&out, "dspark:spec_decode_num_fallbacks_total", "Drafter failures that switched a request to plain decoding.",
          static_cast<double>(s.num_fallbacks));
  return out;
}

}  // namespace dspark::serve
