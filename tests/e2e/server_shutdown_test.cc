// The server's graceful shutdown and its exposure settings, end to end. In process:
// HttpServer::Shutdown() lets requests in flight finish while new ones get 503 `shutting_down`, and
// cuts what is left after its timeout with a clear end. As a user runs it: `dspark serve` on the
// bundled reference target drains on SIGTERM and exits 0. Also --api-key-all on /metrics and the
// playground, and which hosts count as loopback.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/server_fixture.h"

namespace dspark::serve {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

httplib::Result PostTo(int port, const std::string& path, const std::string& body, const httplib::Headers& h = {}) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  return c.Post(path.c_str(), h, body, "application/json");
}

httplib::Result GetFrom(int port, const std::string& path, const httplib::Headers& h = {}) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  return c.Get(path.c_str(), h);
}

bool Draining(int port) {
  auto r = GetFrom(port, "/health");
  return r && r->status == 503 && json::parse(r->body)["status"] == "draining";
}

// A request arriving while the server drains: 503 shutting_down with Retry-After.
void ExpectRefused(int port) {
  auto r = PostTo(port, "/v1/completions", Completion("too late", 4).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "shutting_down") << r->body;
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  auto t = PostTo(port, "/tokenize", R"({"content": "x"})");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 503) << t->body;
}

// The finish chunk of a one-choice stream (the one carrying finish_reason), or null.
json FinishChunk(const SseStream& s) {
  for (const json& c : s.chunks)
    if (c.contains("choices") && !c["choices"].empty() && !c["choices"][0]["finish_reason"].is_null()) return c;
  return nullptr;
}

bool HasShutdownError(const SseStream& s) {
  for (const json& c : s.chunks)
    if (c.contains("error") && c["error"]["code"] == "shutting_down") return true;
  return false;
}

TestServerConfig SlowConfig() {
  TestServerConfig c;
  c.draft = DraftKind::kSlowEmpty;  // 5 ms per step: a few hundred tokens take seconds
  c.parallel = 2;
  c.max_queue = 2;
  return c;
}

TEST(ServerShutdown, InFlightRequestsFinishAndNewOnesAreRefused) {
  auto s = StartTestServer(SlowConfig());
  RawStream stream(s->port, "/v1/completions", Completion("keep streaming", 200, true).dump(), "");
  ASSERT_TRUE(stream.ReadUntil("data: "));
  std::optional<httplib::Result> plain;
  std::thread plain_client([&] { plain = PostTo(s->port, "/v1/completions", Completion("keep going", 100).dump()); });
  ASSERT_TRUE(WaitFor([&] {
    auto h = GetFrom(s->port, "/health");
    return h && json::parse(h->body)["slots_busy"] == 2;
  }));

  std::thread drain([&] { s->server->Shutdown(60s); });
  ASSERT_TRUE(WaitFor([&] { return Draining(s->port); }));
  ExpectRefused(s->port);

  ASSERT_TRUE(stream.ReadUntil("data: [DONE]")) << stream.received;
  const SseStream sse = ParseSse(stream.received);
  const json last = FinishChunk(sse);
  ASSERT_FALSE(last.is_null()) << stream.received;
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["usage"]["completion_tokens"], 200);
  EXPECT_FALSE(HasShutdownError(sse));
  plain_client.join();
  ASSERT_TRUE(plain && *plain);
  EXPECT_EQ((*plain)->status, 200) << (*plain)->body;
  EXPECT_EQ(json::parse((*plain)->body)["usage"]["completion_tokens"], 100);
  drain.join();
  EXPECT_FALSE(GetFrom(s->port, "/health"));  // stopped: nothing listens any more
}

TEST(ServerShutdown, TimeoutCancelsWhatIsLeftWithAClearEnd) {
  auto s = StartTestServer(SlowConfig());
  RawStream stream(s->port, "/v1/completions", Completion("cut me", 450, true).dump(), "");
  ASSERT_TRUE(stream.ReadUntil("data: "));
  std::optional<httplib::Result> plain;
  std::thread plain_client([&] { plain = PostTo(s->port, "/v1/completions", Completion("cut me too", 450).dump()); });
  ASSERT_TRUE(WaitFor([&] {
    auto h = GetFrom(s->port, "/health");
    return h && json::parse(h->body)["slots_busy"] == 2;
  }));

  const auto t0 = std::chrono::steady_clock::now();
  std::thread drain([&] { s->server->Shutdown(100ms); });
  ASSERT_TRUE(stream.ReadUntil("data: [DONE]")) << stream.received;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);  // 450 tokens would take over 2 s
  stream.Close();  // Shutdown() ends when httplib lets go of idle keep-alive connections
  drain.join();
  const SseStream sse = ParseSse(stream.received);
  EXPECT_TRUE(sse.done);
  const json last = FinishChunk(sse);
  ASSERT_FALSE(last.is_null()) << stream.received;
  EXPECT_EQ(last["choices"][0]["finish_reason"], "cancelled");
  EXPECT_LT(last["usage"]["completion_tokens"].get<int>(), 450);
  EXPECT_TRUE(HasShutdownError(sse)) << stream.received;
  plain_client.join();
  ASSERT_TRUE(plain && *plain);
  EXPECT_EQ((*plain)->status, 503) << (*plain)->body;
  EXPECT_EQ(json::parse((*plain)->body)["error"]["code"], "shutting_down");
}

TEST(ServerExposure, ApiKeyAllCoversMetricsAndPlaygroundNotHealth) {
  TestServerConfig c;
  c.api_key = "sk-all";
  c.api_key_all = true;
  auto s = StartTestServer(c);
  const httplib::Headers key = {{"Authorization", "Bearer sk-all"}};
  const httplib::Headers wrong = {{"Authorization", "Bearer sk-nope"}};
  for (const char* path : {"/metrics", "/"}) {
    auto none = GetFrom(s->port, path);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_EQ(json::parse(none->body)["error"]["code"], "invalid_api_key") << path;
    EXPECT_EQ(GetFrom(s->port, path, wrong)->status, 401) << path;
    EXPECT_EQ(GetFrom(s->port, path, key)->status, 200) << path;
  }
  // A browser opening the playground sends no header: the page takes the key from its URL.
  EXPECT_EQ(GetFrom(s->port, "/?key=sk-all")->status, 200);
  EXPECT_EQ(GetFrom(s->port, "/?key=sk-nope")->status, 401);
  EXPECT_EQ(GetFrom(s->port, "/metrics?key=sk-all")->status, 401);  // metrics: the header only
  EXPECT_EQ(GetFrom(s->port, "/health")->status, 200);               // load balancers need no key
  EXPECT_EQ(PostTo(s->port, "/v1/completions", Completion("x", 2).dump())->status, 401);
  EXPECT_EQ(PostTo(s->port, "/v1/completions", Completion("x", 2).dump(), key)->status, 200);
}

TEST(ServerExposure, ApiKeyAloneLeavesMetricsAndPlaygroundOpen) {
  TestServerConfig c;
  c.api_key = "sk-v1";
  auto s = StartTestServer(c);
  EXPECT_EQ(GetFrom(s->port, "/metrics")->status, 200);
  EXPECT_EQ(GetFrom(s->port, "/")->status, 200);
  EXPECT_EQ(PostTo(s->port, "/v1/completions", Completion("x", 2).dump())->status, 401);
}

TEST(ServerExposure, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "::ffff:127.0.0.1"})
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "example.com", "128.0.0.1", "::ffff:10.0.0.1", ""})
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
}

// `dspark serve` as a user runs it, on the bundled reference target (about 2 ms a token here).
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra) {
    log_ = fs::temp_directory_path() / ("dspark_shutdown_test_" + std::to_string(::getpid()) + ".log");
    std::vector<std::string> args = {DSPARK_CLI, "serve", "-m", std::string(DSPARK_SOURCE_DIR) + "/models/ref-target.gguf",
                                     "--port", "0", "--parallel", "2", "-c", "2048", "-t", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      if (!freopen(log_.c_str(), "w", stderr)) _exit(126);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // The port is in the start-up line: "serve: <model> on http://127.0.0.1:<port> | ...".
    const std::regex re(R"(on http://127\.0\.0\.1:(\d+))");
    WaitFor([&] {
      std::smatch m;
      const std::string log = ReadFile(log_.string());
      if (std::regex_search(log, m, re)) port_ = std::stoi(m[1]);
      return port_ > 0;
    });
  }
  ~ServeProcess() {
    if (pid_ > 0 && exit_code_ == -2) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    fs::remove(log_);
  }
  int port() const { return port_; }
  void Signal(int sig) { kill(pid_, sig); }
  // The exit code, or -1 when it did not exit normally within 30 s.
  int Wait() {
    for (int i = 0; i < 3000 && exit_code_ == -2; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      else std::this_thread::sleep_for(10ms);
    }
    return exit_code_;
  }
  std::string log() const { return ReadFile(log_.string()); }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  int port_ = -1;
  int exit_code_ = -2;
};

TEST(ServeShutdown, SigtermDrainsInFlightStreamAndExitsZero) {
  // The drain is what is tested, not the default --shutdown-timeout (30 s), which an instrumented
  // build on a slow CI machine can run past mid-stream.
  ServeProcess p({"--shutdown-timeout", "600"});
  ASSERT_GT(p.port(), 0) << p.log();
  RawStream stream(p.port(), "/v1/completions", Completion("Once upon a time", 800, true).dump(), "");
  ASSERT_TRUE(stream.ReadUntil("data: ")) << p.log();
  p.Signal(SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return Draining(p.port()); })) << p.log();
  ExpectRefused(p.port());
  // 800 tokens: seconds here, tens of seconds in the sanitizer builds (make test-asan).
  ASSERT_TRUE(stream.ReadUntil("data: [DONE]", 600)) << stream.received;
  const json last = FinishChunk(ParseSse(stream.received));
  ASSERT_FALSE(last.is_null()) << stream.received;
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["usage"]["completion_tokens"], 800);
  EXPECT_EQ(p.Wait(), 0) << p.log();
}

TEST(ServeShutdown, ZeroTimeoutCancelsAtOnceAndExitsZero) {
  ServeProcess p({"--shutdown-timeout", "0"});
  ASSERT_GT(p.port(), 0) << p.log();
  RawStream stream(p.port(), "/v1/completions", Completion("Once upon a time", 1500, true).dump(), "");
  ASSERT_TRUE(stream.ReadUntil("data: ")) << p.log();
  p.Signal(SIGTERM);
  ASSERT_TRUE(stream.ReadUntil("data: [DONE]")) << stream.received;
  const SseStream sse = ParseSse(stream.received);
  const json last = FinishChunk(sse);
  ASSERT_FALSE(last.is_null()) << stream.received;
  EXPECT_EQ(last["choices"][0]["finish_reason"], "cancelled");
  EXPECT_TRUE(HasShutdownError(sse));
  EXPECT_EQ(p.Wait(), 0) << p.log();
}

}  // namespace
}  // namespace dspark::serve
