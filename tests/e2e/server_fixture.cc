#include "e2e/server_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "model/testing/tiny_models.h"
#include "speculative/drafters/factory.h"

namespace dspark::serve {

using json = nlohmann::json;

namespace {

struct TinyPaths {
  std::string target, q8;
};

// The tiny models are written once per process into its temp directory (per process: ctest runs
// test processes in parallel), which is removed when the process exits.
const TinyPaths& Tiny() {
  static std::once_flag once;
  static TinyPaths paths;
  std::call_once(once, [] {
    SynthSpec target = testing::TinySpec("qwen3", DType::kF32);
    target.seed = 11;
    target.tied_embeddings = false;  // varied greedy output (see tests/lossless)
    target.embedding_gain = 2.0f;
    paths.target = testing::WriteTiny(target, "e2e_target");
    SynthSpec q8 = target;
    q8.matrix_type = DType::kQ8_0;
    paths.q8 = testing::WriteTiny(q8, "e2e_q8");
  });
  return paths;
}

// Wraps a drafter to make it slow or to fail on chosen prompts.
class TestDrafter final : public Drafter {
 public:
  TestDrafter(std::unique_ptr<Drafter> inner, int sleep_ms, std::vector<int32_t> fail_prefix)
      : inner_(std::move(inner)), sleep_ms_(sleep_ms), fail_prefix_(std::move(fail_prefix)) {}
  std::string_view Name() const override { return "test"; }
  DrafterNeeds Needs() const override { return inner_ ? inner_->Needs() : DrafterNeeds{}; }
  Status Begin(int seq) override { return inner_ ? inner_->Begin(seq) : Status::Ok(); }
  Status ObserveTaps(int seq, const TapRows& rows) override { return inner_ ? inner_->ObserveTaps(seq, rows) : Status::Ok(); }
  Result<Draft> Propose(int seq, std::span<const int32_t> ctx, const DraftParams& p, Rng& rng) override {
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (!fail_prefix_.empty() && ctx.size() >= fail_prefix_.size() &&
        std::equal(fail_prefix_.begin(), fail_prefix_.end(), ctx.begin()))
      return Status(StatusCode::kResourceExhausted, "test drafter: out of memory");
    if (!inner_) return Draft{};
    return inner_->Propose(seq, ctx, p, rng);
  }
  void End(int seq) override {
    if (inner_) inner_->End(seq);
  }

 private:
  std::unique_ptr<Drafter> inner_;
  int sleep_ms_;
  std::vector<int32_t> fail_prefix_;
};

}  // namespace

TestServer::~TestServer() {
  if (server) server->Stop();
  server.reset();
  engine.reset();
}

std::unique_ptr<TestServer> StartTestServer(const TestServerConfig& config) {
  auto s = std::make_unique<TestServer>();
  s->config = config;
  auto f = gguf::File::Open(Tiny().target);
  if (!f.ok()) ADD_FAILURE() << f.status().message();
  s->file = std::move(*f);
  auto m = Model::FromFile(s->file);
  if (!m.ok()) ADD_FAILURE() << m.status().message();
  s->model = std::move(*m);
  auto t = Tokenizer::FromGguf(*s->file);
  if (!t.ok()) ADD_FAILURE() << t.status().message();
  s->tokenizer = std::move(*t);
  s->pool = std::make_unique<ThreadPool>(1);

  std::unique_ptr<Drafter> inner;
  std::vector<int32_t> fail_prefix;
  if (config.draft == DraftKind::kQ8Copy) {
    DrafterConfig dc;
    dc.type = "draft-simple";
    dc.draft_model = Tiny().q8;
    dc.n_seq = config.parallel;
    dc.max_draft = 8;
    auto d = CreateDrafter(dc, *s->model, *s->tokenizer, *s->pool, config.n_ctx);
    if (!d.ok()) ADD_FAILURE() << d.status().message();
    inner = std::move(*d);
    EncodeOptions eo;
    eo.add_eos = false;
    fail_prefix = s->tokenizer->Encode("FAIL", eo);
  }
  if (config.draft != DraftKind::kNone)
    s->drafter = std::make_unique<TestDrafter>(std::move(inner), config.draft == DraftKind::kSlowEmpty ? 5 : 0,
                                               std::move(fail_prefix));
  BatchEngineOptions bo;
  bo.n_parallel = config.parallel;
  bo.n_ctx = config.n_ctx;
  bo.prefill_chunk = 64;
  bo.schedule.n_max = 6;
  bo.cache_ram_bytes = config.cache_ram_bytes;
  s->engine = std::make_unique<BatchEngine>(*s->model, *s->tokenizer, *s->pool, bo, s->drafter.get());

  ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.api_key = config.api_key;
  so.api_key_all = config.api_key_all;
  so.model_name = "tiny";
  so.spec_type = config.draft == DraftKind::kQ8Copy ? "draft-simple" : config.draft == DraftKind::kSlowEmpty ? "test" : "none";
  if (config.draft == DraftKind::kQ8Copy) so.draft_model = Tiny().q8;
  so.n_ctx_train = s->model->config().n_ctx_train;
  so.max_queue = config.max_queue;
  so.max_body_bytes = config.max_body_bytes;
  so.chat_template = config.chat_template;
  so.log_requests = false;
  auto server = HttpServer::Create(*s->engine, *s->tokenizer, so);
  if (!server.ok()) ADD_FAILURE() << server.status().message();
  s->server = std::move(*server);
  auto port = s->server->Start();
  if (!port.ok()) ADD_FAILURE() << port.status().message();
  s->port = *port;
  return s;
}

SseStream ParseSse(const std::string& body) {
  SseStream out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      out.done = true;
      continue;
    }
    out.chunks.push_back(nlohmann::json::parse(data));
  }
  return out;
}

RawStream::RawStream(int port, const std::string& path, const std::string& body, const std::string& api_key) {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "connect to port " << port << " failed";
    return;
  }
  std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  if (!api_key.empty()) req += "Authorization: Bearer " + api_key + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  size_t sent = 0;
  while (sent < req.size()) {
    const ssize_t n = send(fd_, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
}

bool RawStream::ReadUntil(const std::string& marker, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  char buf[4096];
  while (received.find(marker) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline || fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    received.append(buf, static_cast<size_t>(n));
  }
  return true;
}

void RawStream::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool WaitFor(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

double MetricValue(const std::string& metrics, const std::string& series) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Server::SetUpTestSuite() {
  // The main server: API key, a real chat template, a draft-model drafter (a Q8 copy of the
  // target, so drafts are mostly accepted), 4 slots.
  TestServerConfig main;
  main.api_key = kKey;
  main.chat_template = ReadFile(std::string(DSPARK_SOURCE_DIR) + "/tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  main.draft = DraftKind::kQ8Copy;
  main.parallel = 4;
  main.max_queue = 32;
  main.max_body_bytes = 64 << 10;
  main_ = StartTestServer(main).release();
  // A plain server: no key, no chat template, one slot, one queue place, and a drafter that
  // sleeps 5 ms per step and proposes nothing, so generations are slow enough to observe.
  TestServerConfig slow;
  slow.draft = DraftKind::kSlowEmpty;
  slow.parallel = 1;
  slow.max_queue = 1;
  slow_ = StartTestServer(slow).release();
  // A server without a drafter: plain decoding, whose seeded samples the library reproduces.
  TestServerConfig plain;
  plain.draft = DraftKind::kNone;
  plain.parallel = 2;
  plain_ = StartTestServer(plain).release();
  // The reference: the same model file loaded once more, decoded outside every engine.
  auto m = Model::FromFile(main_->file);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ref_model_ = std::move(*m).release();
  ref_pool_ = new ThreadPool(1);
}

void Server::TearDownTestSuite() {
  delete main_;
  delete slow_;
  delete plain_;
  delete ref_model_;
  delete ref_pool_;
}

TestServer* Server::main_ = nullptr;
TestServer* Server::slow_ = nullptr;
TestServer* Server::plain_ = nullptr;
Model* Server::ref_model_ = nullptr;
ThreadPool* Server::ref_pool_ = nullptr;

json Completion(const std::string& prompt, int max_tokens, bool stream) {
  return {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"stream", stream}, {"dspark", {{"ignore_eos", true}}}};
}

std::string AsJsonText(const std::string& raw) {
  return json::parse(json(raw).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

}  // namespace dspark::serve
