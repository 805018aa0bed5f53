// The OpenAI-compatible HTTP server: routes, authentication, body limits, request logging and
// SSE streaming over an EngineLoop. Owns the engine thread; does not own the model, tokenizer or
// BatchEngine. Serves nothing from disk (the playground is compiled in).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "speculative/batch_engine.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace dspark::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (tests)
  std::string api_key;           // non-empty: every /v1 endpoint, /tokenize and /detokenize need
                                 // "Authorization: Bearer <key>"
  // With api_key: /metrics and the playground (/) need it too; the playground also takes it as
  // `/?key=KEY`, since a browser opening a page sends no Authorization header. /health stays open
  // for load balancers.
  bool api_key_all = false;
  std::string model_name = "dspark";  // reported by /v1/models and in responses
  std::string spec_type = "none";     // reported by /health and /v1/models
  std::string draft_model;            // the drafter's model file (-md), reported by /v1/models; empty: none
  int n_ctx_train = 0;                // the model's training context, reported by /v1/models; 0: unknown
  size_t max_body_bytes = 1 << 20;    // larger bodies get 413
  int max_queue = 64;            // requests waiting for a slot beyond --parallel; more get 429
  int http_threads = 0;          // 0: parallel + max_queue + 4
  int default_max_tokens = 512;  // when the request gives no max_tokens (capped by the context)
  bool log_requests = true;      // one line per request on the logger (info)
  // Jinja chat template for /v1/chat/completions; empty: chat requests get a 400 naming the
  // missing template. Parsed once in Create(): a template that does not parse fails start-up.
  std::string chat_template;
};

class HttpServer {
 public:
  static Result<std::unique_ptr<HttpServer>> Create(BatchEngine& engine, const Tokenizer& tokenizer,
                                                    ServerOptions options);
  ~HttpServer();  // Stop()

  // Binds host:port and starts the engine thread; returns the bound port.
  Result<int> Bind();
  // Serves until Stop() (blocking). Call after Bind().
  void Serve();
  // Bind() and Serve() on a background thread (tests and `dspark bench` starting its own server).
  Result<int> Start();
  // Thread-safe; unblocks Serve() and stops the engine thread. Streams still running are cut off
  // without their end: use Shutdown() to let them finish.
  void Stop();
  // Graceful shutdown (thread-safe, blocking). From the call on, new /v1 requests, /tokenize and
  // /detokenize get 503 `shutting_down` with Retry-After, and /health answers 503 "draining".
  // Requests in flight run until they end or `timeout` passes (0: at once); those left are then
  // cancelled and still get a clear end: a stream its finish chunk with finish_reason "cancelled",
  // an error event and [DONE], any other request a 503 `shutting_down`. Then Stop().
  // `cut_short` is polled while waiting; returning true cancels at once (a second signal).
  void Shutdown(std::chrono::milliseconds timeout, const std::function<bool()>& cut_short = {});

  int port() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether binding `host` exposes the server only to this machine: localhost, 127.0.0.0/8, ::1
// (also bracketed or IPv4-mapped). 0.0.0.0 and :: listen on every interface.
bool IsLoopbackHost(const std::string& host);

// Constant-time comparison of an Authorization header with "Bearer <key>".
bool BearerMatches(const std::string& header, const std::string& key);

}  // namespace dspark::serve
