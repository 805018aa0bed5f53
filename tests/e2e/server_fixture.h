// Helpers for the server end-to-end tests: a server over a tiny random-weight model on a free
// loopback port, SSE parsing, raw-socket streams (to disconnect mid-stream) and metric lookup.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "serve/http_server.h"
#include "spec/batch_engine.h"
#include "spec/drafter.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace dspark::serve {

enum class DraftKind {
  kNone,
  kQ8Copy,     // a Q8_0 copy of the target (mostly accepted); fails on prompts starting "FAIL"
  kSlowEmpty,  // proposes nothing and sleeps 5 ms per call: slow, observable generations
};

struct TestServerConfig {
  std::string api_key;
  std::string chat_template;
  DraftKind draft = DraftKind::kNone;
  int parallel = 4;
  int max_queue = 16;
  int n_ctx = 512;
  size_t max_body_bytes = 1 << 20;
};

struct TestServer {
  TestServerConfig config;
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<BatchEngine> engine;
  std::unique_ptr<HttpServer> server;
  int port = -1;

  ~TestServer();
};

// Writes the tiny models (once per process), loads them and starts a server; aborts the test on failure.
std::unique_ptr<TestServer> StartTestServer(const TestServerConfig& config);

struct SseStream {
  std::vector<nlohmann::json> chunks;  // every "data: {...}" event
  bool done = false;                   // ended with "data: [DONE]"
};
SseStream ParseSse(const std::string& body);

// An HTTP/1.1 POST over a plain socket, so a test can stop reading and close mid-response.
class RawStream {
 public:
  RawStream(int port, const std::string& path, const std::string& body, const std::string& api_key);
  ~RawStream() { Close(); }
  // Reads until `marker` has been received (or 10 s pass / the peer closes).
  bool ReadUntil(const std::string& marker);
  void Close();
  std::string received;

 private:
  int fd_ = -1;
};

// Polls `cond` until it holds or 10 s pass.
bool WaitFor(const std::function<bool()>& cond);

// The value of the sample line starting with `series` ("name" or "name{labels}"); -1 if absent.
double MetricValue(const std::string& metrics, const std::string& series);

std::string ReadFile(const std::string& path);

}  // namespace dspark::serve
