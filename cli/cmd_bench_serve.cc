// Load benchmark against an OpenAI-compatible dspark server: for each concurrency level and for
// plain and speculative decoding (the request extension "dspark": {"speculate": bool} on the
// same server), N clients stream completions back to back. Reports aggregate tok/s, per-user
// tok/s, TTFT and ITL p50/p99, tau; writes JSON, CSV and an SVG of aggregate throughput vs
// per-user speed (the DSpark paper's frontier plot).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/bench_serve.h"
#include "cli/commands.h"

#ifndef DSPARK_SOURCE_DIR
#define DSPARK_SOURCE_DIR "."
#endif

namespace dspark::cli {

struct ServeBenchFlags {
  std::string url;         // http://host:port, or "start" to launch `dspark serve <serve_args>`
  std::string serve_args;  // with --serve start: arguments of the server it launches
  std::string api_key;
  std::string prompts = std::string(DSPARK_SOURCE_DIR) + "/bench/prompts/code-completion.jsonl";
  std::vector<int> concurrency = {1, 2, 4, 8, 16, 32};
  std::vector<std::string> modes = {"plain", "spec"};
  int requests = 0;  // per level; 0 = max(2 * concurrency, 8)
  int max_tokens = 64;
  int max_prompt_chars = 1500;
  std::string out = "bench-serve";
};

namespace {

using Clock = std::chrono::steady_clock;

struct RequestSample {
  bool ok = false;
  int completion_tokens = 0;
  double ttft_s = 0;
  double e2e_s = 0;
  double decode_s = 0;  // first to last token
  std::vector<double> itl_s;
  double tau = 1;
  std::string error;
};

struct LevelResult {
  std::string mode;
  int concurrency = 0;
  int requests = 0, failed = 0;
  double wall_s = 0;
  double aggregate_tok_s = 0;
  double per_user_tok_s = 0;  // mean over requests of tokens / decode time
  double ttft_p50_ms = 0, ttft_p99_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
  double tau = 1;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * (v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

std::vector<std::string> LoadPrompts(const ServeBenchFlags& f) {
  std::vector<std::string> prompts;
  std::ifstream in(f.prompts);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("prompt") || !j["prompt"].is_string()) continue;
    std::string p = j["prompt"].get<std::string>();
    if (static_cast<int>(p.size()) > f.max_prompt_chars) p = p.substr(p.size() - f.max_prompt_chars);
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) {
    std::fprintf(stderr, "dspark: bench: no prompts in %s; using the built-in list\n", f.prompts.c_str());
    prompts = {"def fibonacci(n):\n", "import os\n\ndef list_files(path):\n", "class Stack:\n    def __init__(self):\n",
               "def quicksort(xs):\n", "# Parse a CSV file into dicts\nimport csv\n\ndef read_rows(path):\n",
               "def is_prime(n):\n", "for i in range(10):\n", "def binary_search(a, x):\n"};
  }
  return prompts;
}

struct Target {
  std::string host;
  int port = 80;
};

bool ParseUrl(const std::string& url, Target* t) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  if (rest.rfind("https://", 0) == 0) return false;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) rest = rest.substr(0, slash);
  const size_t colon = rest.rfind(':');
  t->host = rest.substr(0, colon);
  if (colon != std::string::npos) t->port = std::atoi(rest.substr(colon + 1).c_str());
  return !t->host.empty() && t->port > 0;
}

RequestSample OneRequest(const Target& t, const ServeBenchFlags& f, const std::string& prompt, bool speculate) {
  RequestSample s;
  httplib::Client client(t.host, t.port);
  client.set_read_timeout(600, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  if (!f.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + f.api_key);
  nlohmann::json body = {{"prompt", prompt},          {"max_tokens", f.max_tokens}, {"temperature", 0},
                         {"stream", true},            {"dspark", {{"speculate", speculate}, {"ignore_eos", true}}}};
  req.body = body.dump();
  const Clock::time_point t0 = Clock::now();
  Clock::time_point first, last;
  std::string buf;
  bool done = false;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    size_t idx;
    while ((idx = buf.find("\n\n")) != std::string::npos) {
      const std::string event = buf.substr(0, idx);
      buf.erase(0, idx + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      auto j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage")) {
        s.completion_tokens = j["usage"]["completion_tokens"].get<int>();
        if (j.contains("dspark")) s.tau = j["dspark"]["tau"].get<double>();
        continue;
      }
      const Clock::time_point now = Clock::now();
      if (first == Clock::time_point{}) {
        first = now;
        s.ttft_s = std::chrono::duration<double>(now - t0).count();
      } else {
        s.itl_s.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
    return true;
  };
  auto res = client.send(req);
  s.e2e_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!res) {
    s.error = httplib::to_string(res.error());
  } else if (res->status != 200) {
    s.error = fmt::format("HTTP {}", res->status);
  } else if (!done) {
    s.error = "stream ended without [DONE]";
  } else {
    s.ok = true;
    s.decode_s = first == Clock::time_point{} ? 0 : std::chrono::duration<double>(last - first).count();
  }
  return s;
}

LevelResult RunLevel(const Target& t, const ServeBenchFlags& f, const std::vector<std::string>& prompts,
                     const std::string& mode, int concurrency) {
  const int total = f.requests > 0 ? f.requests : std::max(2 * concurrency, 8);
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<RequestSample> samples;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (;;) {
        const int i = next.fetch_add(1);
        if (i >= total) return;
        RequestSample s = OneRequest(t, f, prompts[i % prompts.size()], mode == "spec");
        std::lock_guard<std::mutex> lock(mu);
        samples.push_back(std::move(s));
      }
    });
  }
  for (auto& c : clients) c.join();
  LevelResult r;
  r.mode = mode;
  r.concurrency = concurrency;
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> ttft, itl;
  double tokens = 0, per_user = 0, tau = 0;
  int n_ok = 0;
  for (const RequestSample& s : samples) {
    ++r.requests;
    if (!s.ok) {
      ++r.failed;
      if (r.failed == 1) std::fprintf(stderr, "dspark: bench: request failed: %s\n", s.error.c_str());
      continue;
    }
    ++n_ok;
    tokens += s.completion_tokens;
    ttft.push_back(s.ttft_s * 1000);
    for (double x : s.itl_s) itl.push_back(x * 1000);
    // Per-user decode speed: tokens after the first over the time they took to arrive.
    if (s.decode_s > 0 && s.completion_tokens > 1) per_user += (s.completion_tokens - 1) / s.decode_s;
    tau += s.tau;
  }
  r.aggregate_tok_s = r.wall_s > 0 ? tokens / r.wall_s : 0;
  r.per_user_tok_s = n_ok ? per_user / n_ok : 0;
  r.tau = n_ok ? tau / n_ok : 1;
  r.ttft_p50_ms = Percentile(ttft, 0.5);
  r.ttft_p99_ms = Percentile(ttft, 0.99);
  r.itl_p50_ms = Percentile(itl, 0.5);
  r.itl_p99_ms = Percentile(itl, 0.99);
  return r;
}

// Aggregate throughput (y) against per-user speed (x), one line per mode, points labelled by
// concurrency.
std::string Svg(const std::vector<LevelResult>& results) {
  const double W = 720, H = 480, L = 70, R = 20, T = 40, B = 60;
  double max_x = 1, max_y = 1;
  for (const auto& r : results) {
    max_x = std::max(max_x, r.per_user_tok_s);
    max_y = std::max(max_y, r.aggregate_tok_s);
  }
  max_x *= 1.1;
  max_y *= 1.1;
  auto X = [&](double v) { return L + (W - L - R) * v / max_x; };
  auto Y = [&](double v) { return H - B - (H - T - B) * v / max_y; };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\">dspark serve: aggregate throughput vs per-user speed</text>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">per-user tok/s</text>\n"
      "<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">aggregate tok/s</text>\n",
      W, H, L, L, H - B, W - R, H - B, L, T, L, H - B, (L + W - R) / 2, H - 20, (T + H - B) / 2, (T + H - B) / 2);
  for (int i = 0; i <= 4; ++i) {
    s += fmt::format("<text x=\"{:.0f}\" y=\"{}\" text-anchor=\"middle\">{:.0f}</text>\n", X(max_x * i / 4), H - B + 16, max_x * i / 4);
    s += fmt::format("<text x=\"{}\" y=\"{:.0f}\" text-anchor=\"end\">{:.0f}</text>\n", L - 6, Y(max_y * i / 4) + 4, max_y * i / 4);
  }
  const char* colours[] = {"#4063d8", "#2e9e44", "#c0392b", "#8e44ad"};
  std::vector<std::string> modes;
  for (const auto& r : results)
    if (std::find(modes.begin(), modes.end(), r.mode) == modes.end()) modes.push_back(r.mode);
  for (size_t m = 0; m < modes.size(); ++m) {
    const char* colour = colours[m % 4];
    std::string points;
    for (const auto& r : results) {
      if (r.mode != modes[m]) continue;
      points += fmt::format("{:.1f},{:.1f} ", X(r.per_user_tok_s), Y(r.aggregate_tok_s));
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"/><text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"{}\">c={}</text>\n",
                       X(r.per_user_tok_s), Y(r.aggregate_tok_s), colour, X(r.per_user_tok_s) + 6,
                       Y(r.aggregate_tok_s) - 6, colour, r.concurrency);
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", points, colour);
    s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\" font-size=\"13\">{}</text>\n", W - R - 80, T + 18 * (m + 1), colour, modes[m]);
  }
  return s + "</svg>\n";
}

// A `dspark serve` child process on a free loopback port, stopped (SIGTERM) on destruction.
class ChildServer {
 public:
  ~ChildServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  Status Start(const std::string& args, const std::string& log_path, std::string* url) {
    const int port = FreePort();
    if (port <= 0) return Internal("bench: no free loopback port");
    std::vector<std::string> argv = {"dspark", "serve"};
    std::istringstream in(args);
    for (std::string a; in >> a;) argv.push_back(a == "-md" ? "--model-draft" : a == "-np" ? "--parallel" : a);
    argv.insert(argv.end(), {"--host", "127.0.0.1", "--port", std::to_string(port)});
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return Internal("bench: cannot find the dspark binary (/proc/self/exe)");
    self[n] = 0;
    pid_ = fork();
    if (pid_ < 0) return Internal("bench: fork failed");
    if (pid_ == 0) {
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(self, cargv.data());
      _exit(127);
    }
    *url = fmt::format("http://127.0.0.1:{}", port);
    // Loading and profiling the verify cost take a while on small machines.
    for (int i = 0; i < 3000; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return Status(StatusCode::kUnavailable, fmt::format("bench: the server exited; see {}", log_path));
      }
      httplib::Client probe("127.0.0.1", port);
      auto h = probe.Get("/health");
      if (h && h->status == 200) return Status::Ok();
      usleep(100 * 1000);
    }
    return Status(StatusCode::kUnavailable, fmt::format("bench: the server did not come up in 300 s; see {}", log_path));
  }

 private:
  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = -1;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    close(fd);
    return port;
  }
  pid_t pid_ = -1;
};

}  // namespace

std::shared_ptr<ServeBenchFlags> AddServeBenchFlags(CLI::App* bench) {
  auto f = std::make_shared<ServeBenchFlags>();
  bench->add_option("--serve", f->url,
                    "Load-benchmark a running `dspark serve` at this URL (http://host:port), or `start` to launch one "
                    "with --serve-args");
  bench->add_option("--serve-args", f->serve_args, "Arguments of the server `--serve start` launches, e.g. \"-m T.gguf "
                    "--spec-type draft-simple -md D.gguf --parallel 32\"");
  bench->add_option("--serve-api-key", f->api_key, "API key of the server");
  bench->add_option("--serve-prompts", f->prompts, "JSONL prompt set (field \"prompt\")")->capture_default_str();
  bench->add_option("--serve-concurrency", f->concurrency, "Concurrency levels")->delimiter(',')->capture_default_str();
  bench->add_option("--serve-modes", f->modes, "plain and/or spec")->delimiter(',')->capture_default_str()
      ->check(CLI::IsMember({"plain", "spec"}));
  bench->add_option("--serve-requests", f->requests, "Requests per level (0: max(2 x concurrency, 8))")->capture_default_str();
  bench->add_option("--serve-max-tokens", f->max_tokens, "Tokens generated per request")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  bench->add_option("--serve-out", f->out, "Output prefix for .json, .csv and .svg")->capture_default_str();
  return f;
}

bool ServeBenchRequested(const ServeBenchFlags& f) { return !f.url.empty(); }

int RunServeBench(const ServeBenchFlags& flags) {
  ServeBenchFlags f = flags;
  ChildServer child;
  if (f.url == "start") {
    const std::string log = f.out + ".server.log";
    std::fprintf(stderr, "dspark: bench: starting dspark serve %s (log: %s)\n", f.serve_args.c_str(), log.c_str());
    if (Status s = child.Start(f.serve_args, log, &f.url); !s.ok()) return Fail(s);
  }
  Target t;
  if (!ParseUrl(f.url, &t)) return Fail(InvalidArgument("bench: --serve {}: expected http://host:port", f.url));
  nlohmann::json health;
  {
    httplib::Client probe(t.host, t.port);
    auto h = probe.Get("/health");
    if (!h || h->status != 200)
      return Fail(Status(StatusCode::kUnavailable, fmt::format("bench: no dspark server answers at {}/health", f.url)));
    health = nlohmann::json::parse(h->body, nullptr, false);
  }
  const std::vector<std::string> prompts = LoadPrompts(f);
  std::vector<LevelResult> results;
  std::printf("%-6s %5s %9s %12s %13s %10s %10s %9s %9s %6s %6s\n", "mode", "conc", "requests", "aggr tok/s",
              "user tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "tau", "fail");
  for (int c : f.concurrency) {
    for (const std::string& mode : f.modes) {
      LevelResult r = RunLevel(t, f, prompts, mode, c);
      std::printf("%-6s %5d %9d %12.1f %13.1f %8.0fms %8.0fms %7.1fms %7.1fms %6.2f %6d\n", r.mode.c_str(), r.concurrency,
                  r.requests, r.aggregate_tok_s, r.per_user_tok_s, r.ttft_p50_ms, r.ttft_p99_ms, r.itl_p50_ms,
                  r.itl_p99_ms, r.tau, r.failed);
      std::fflush(stdout);
      results.push_back(r);
    }
  }
  nlohmann::json j = nlohmann::json::array();
  std::string csv = "mode,concurrency,requests,failed,wall_s,aggregate_tok_s,per_user_tok_s,ttft_p50_ms,ttft_p99_ms,itl_p50_ms,itl_p99_ms,tau\n";
  for (const auto& r : results) {
    j.push_back({{"mode", r.mode}, {"concurrency", r.concurrency}, {"requests", r.requests}, {"failed", r.failed},
                 {"wall_s", r.wall_s}, {"aggregate_tok_s", r.aggregate_tok_s}, {"per_user_tok_s", r.per_user_tok_s},
                 {"ttft_p50_ms", r.ttft_p50_ms}, {"ttft_p99_ms", r.ttft_p99_ms}, {"itl_p50_ms", r.itl_p50_ms},
                 {"itl_p99_ms", r.itl_p99_ms}, {"tau", r.tau}});
    csv += fmt::format("{},{},{},{},{:.3f},{:.2f},{:.2f},{:.1f},{:.1f},{:.2f},{:.2f},{:.3f}\n", r.mode, r.concurrency,
                       r.requests, r.failed, r.wall_s, r.aggregate_tok_s, r.per_user_tok_s, r.ttft_p50_ms, r.ttft_p99_ms,
                       r.itl_p50_ms, r.itl_p99_ms, r.tau);
  }
  nlohmann::json doc = {{"url", f.url},         {"server_args", f.serve_args}, {"server", health},
                         {"max_tokens", f.max_tokens}, {"prompts", f.prompts}, {"levels", j}};
  std::ofstream(f.out + ".json") << doc.dump(2) << "\n";
  std::ofstream(f.out + ".csv") << csv;
  std::ofstream(f.out + ".svg") << Svg(results);
  std::fprintf(stderr, "dspark: bench: wrote %s.json, %s.csv, %s.svg\n", f.out.c_str(), f.out.c_str(), f.out.c_str());
  int failed = 0;
  for (const auto& r : results) failed += r.failed;
  return failed == 0 ? 0 : 1;
}

}  // namespace dspark::cli
