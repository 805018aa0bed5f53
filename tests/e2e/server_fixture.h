// Helpers for the server end-to-end tests: a server over a tiny random-weight model on a free
// loopback port, SSE parsing, raw-socket streams (to disconnect mid-stream), metric lookup, and
// the `Server` suite fixture with the request helpers the server test files share.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "serve/http_server.h"
#include "speculative/batch_engine.h"
#include "speculative/drafter.h"
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
  bool api_key_all = false;
  std::string chat_template;
  DraftKind draft = DraftKind::kNone;
  int parallel = 4;
  int max_queue = 16;
  int n_ctx = 512;
  size_t max_body_bytes = 1 << 20;
  size_t cache_ram_bytes = 0;  // the host prompt cache (0: slots only)
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
  // Reads until `marker` has been received (or `seconds` pass / the peer closes).
  bool ReadUntil(const std::string& marker, int seconds = 10);
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

// The suite fixture of the server tests (server_test.cc, server_reference_test.cc,
// server_fields_test.cc), started once per test binary. main_: an API key, a real chat template, a
// draft-model drafter (a Q8 copy of the target), 4 slots. slow_: no key, no chat template, one
// slot, one queue place, a drafter that sleeps 5 ms per step. plain_: no drafter. ref_model_: the
// same model file loaded once more, decoded outside every engine.
class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();

  static constexpr const char* kKey = "sk-test-123";
  static TestServer* main_;
  static TestServer* slow_;
  static TestServer* plain_;
  static Model* ref_model_;
  static ThreadPool* ref_pool_;

  static httplib::Headers Auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

  static httplib::Result Post(TestServer* s, const std::string& path, const std::string& body,
                              const httplib::Headers& headers = Auth()) {
    httplib::Client c("127.0.0.1", s->port);
    c.set_read_timeout(60, 0);
    return c.Post(path.c_str(), headers, body, "application/json");
  }
  static httplib::Result Get(TestServer* s, const std::string& path, const httplib::Headers& headers = Auth()) {
    httplib::Client c("127.0.0.1", s->port);
    c.set_read_timeout(60, 0);
    return c.Get(path.c_str(), headers);
  }
};

// A greedy /v1/completions body that ignores end-of-generation (so it runs to max_tokens).
nlohmann::json Completion(const std::string& prompt, int max_tokens, bool stream = false);

// What a JSON string makes of raw text: the server writes JSON with invalid UTF-8 (single bytes
// of the toy byte-level vocabulary) replaced by U+FFFD.
std::string AsJsonText(const std::string& raw);

}  // namespace dspark::serve
