#include "serve/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <condition_variable>
#include <csignal>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <httplib.h>

#include "serve/connection_probe.h"
#include "serve/engine_loop.h"
#include "serve/metrics.h"
#include "serve/openai_schema.h"
#include "serve/playground.h"
#include "serve/chat_prompt.h"
#include "grammar/matcher.h"
#include "template/chat_template.h"
#include "util/log.h"

namespace dspark::serve {

bool BearerMatches(const std::string& header, const std::string& key) {
  const std::string expected = "Bearer " + key;
  // Constant time in the header's content: every byte of the expected value is compared.
  unsigned diff = header.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char h = i < header.size() ? static_cast<unsigned char>(header[i]) : 0;
    diff |= h ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

bool IsLoopbackHost(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) != 1) return false;  // a host name: it may resolve anywhere
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

namespace {
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const char* SourceName(TokenSource s) { return s == TokenSource::kDraft ? "draft" : "target"; }

std::string Dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// What one finished /v1 generation reports to the log and the metrics.
struct Outcome {
  int http_status = 200;
  std::string finish_reason;
  const SpecStats* stats = nullptr;
  std::string error;
};

// One choice of a /v1 request: its engine request, what its stream has sent, and its result.
struct Choice {
  std::shared_ptr<RequestChannel> channel;
  int64_t engine_id = -1;
  uint64_t seed = 0;
  bool first = true;  // no chunk sent yet (the first chat chunk carries the role)
  bool done = false;
  std::optional<LogprobsWriter> logprobs;
  std::optional<ToolCallStreamParser> tools;
  GenerateResult result;
  std::string finish_reason;
};

// The statistics of all choices: the prompt counted once, as OpenAI bills it.
SpecStats MergedStats(const std::vector<Choice>& choices) {
  SpecStats merged;
  for (const Choice& c : choices) merged.Merge(c.result.stats);
  if (!choices.empty()) {
    merged.prompt_tokens = choices[0].result.stats.prompt_tokens;
    merged.prompt_cached_tokens = choices[0].result.stats.prompt_cached_tokens;
  }
  return merged;
}
}  // namespace

struct HttpServer::Impl {
  BatchEngine& engine;
  const Tokenizer& tokenizer;
  ServerOptions opt;
  std::optional<ChatTemplate> chat_template;
  ToolFormat tool_format = ToolFormat::kNone;  // the tool-call syntax the template prints
  Metrics metrics;
  std::unique_ptr<EngineLoop> loop;
  httplib::Server http;
  std::thread serve_thread;
  int port = -1;
  std::string id_prefix;
  std::atomic<uint64_t> next_response{1};
  int64_t created = std::time(nullptr);
  // Shutdown(): set once; new work is refused from then on.
  std::atomic<bool> draining{false};
  // Generations whose HTTP exchange has not ended (a stream's until its last write), which
  // Shutdown() waits for: httplib's stop() would cut a stream short.
  std::mutex active_mu;
  std::condition_variable active_cv;
  int active = 0;

  Impl(BatchEngine& e, const Tokenizer& t, ServerOptions o) : engine(e), tokenizer(t), opt(std::move(o)) {}

  void Routes();
  void HandleGenerate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  // The SSE chunks of one event of choice `index` of `n` (its deltas, or its finish chunk).
  static std::string ChoiceEvents(const ResponseHeader& h, int index, int n, Choice& c, StreamEvent ev,
                                  bool return_tokens);
  void SendError(httplib::Response& res, const ApiError& e) const {
    res.status = e.http_status;
    res.set_content(Dump(e.ToJson()), "application/json");
  }
  void Finished(const std::string& id, const std::string& path, Clock::time_point t0, const Outcome& o);
  void Fail(httplib::Response& res, const std::string& path, Clock::time_point t0, const ApiError& e) {
    SendError(res, e);
    Outcome o;
    o.http_status = e.http_status;
    o.error = e.message;
    Finished("-", path, t0, o);
  }
  // Counts a generation as active until the returned token is released.
  std::shared_ptr<void> EnterGeneration() {
    {
      std::lock_guard<std::mutex> lock(active_mu);
      ++active;
    }
    return std::shared_ptr<void>(this, [](Impl* m) {
      {
        std::lock_guard<std::mutex> lock(m->active_mu);
        --m->active;
      }
      m->active_cv.notify_all();
    });
  }
  std::string NextId(Endpoint endpoint) {
    return fmt::format("{}-{}{}", endpoint == Endpoint::kChatCompletions ? "chatcmpl" : "cmpl", id_prefix,
                       next_response.fetch_add(1));
  }
};

void HttpServer::Impl::Finished(const std::string& id, const std::string& path, Clock::time_point t0, const Outcome& o) {
  const double secs = SecondsSince(t0);
  metrics.ObserveRequest(o.http_status, o.finish_reason, secs);
  if (!opt.log_requests) return;
  if (o.stats == nullptr) {
    DSPARK_LOG_INFO("serve: {} {} {} {:.3f}s error: {}", id, path, o.http_status, secs, o.error);
    return;
  }
  const SpecStats& s = *o.stats;
  DSPARK_LOG_INFO("serve: {} {} {} prompt={} gen={} {:.1f} tok/s tau={:.2f} finish={} {:.3f}s", id, path, o.http_status,
                  s.prompt_tokens, s.generated_tokens, s.tokens_per_second(), s.tau(), o.finish_reason, secs);
}

void HttpServer::Impl::HandleGenerate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const Clock::time_point t0 = Clock::now();
  // Counted before draining is read, so Shutdown() either waits for this request or it is refused.
  std::shared_ptr<void> active_token = EnterGeneration();
  if (draining.load()) {
    res.set_header("Retry-After", "5");
    return Fail(res, req.path, t0, ShuttingDown("the server is shutting down; retry on another instance"));
  }
  ApiRequest r;
  if (auto e = ParseRequest(req.body, endpoint, &r)) return Fail(res, req.path, t0, *e);
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const std::string prompt_field = chat ? "messages" : "prompt";

  std::vector<int32_t> ids;
  if (chat) {
    if (!chat_template)
      return Fail(res, req.path, t0,
                  BadRequest("messages", "no_chat_template",
                             "this model has no chat template (GGUF key tokenizer.chat_template); use /v1/completions "
                             "or start the server with --chat-template-file"));
    Result<ChatPrompt> encoded = EncodeChat(*chat_template, tokenizer, r.messages, r.template_vars);
    if (!encoded.ok())
      return Fail(res, req.path, t0, BadRequest("messages", "template_error", encoded.status().message()));
    ids = std::move(encoded->ids);
  } else if (r.prompt_ids) {
    ids = std::move(*r.prompt_ids);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= tokenizer.n_vocab())
        return Fail(res, req.path, t0,
                    BadRequest(fmt::format("prompt[{}]", i), "out_of_range",
                               fmt::format("token id {} is outside the vocabulary [0, {})", ids[i], tokenizer.n_vocab())));
  } else {
    EncodeOptions eo;
    eo.add_eos = false;
    ids = tokenizer.Encode(r.prompt, eo);
  }
  const int n_ctx = engine.options().n_ctx;
  if (Status s = CheckPromptFits(static_cast<int>(ids.size()), n_ctx); !s.ok())
    return Fail(res, req.path, t0,
                BadRequest(prompt_field, ids.empty() ? "invalid_value" : "context_length_exceeded", s.message()));

  GenerateOptions go;
  const int room = n_ctx - static_cast<int>(ids.size());
  go.max_new_tokens = std::max(1, std::min(r.max_tokens.value_or(opt.default_max_tokens), room));
  go.sampling = r.sampling;
  if (!r.seed_given) go.sampling.seed = FreshSeed();
  go.logprobs = r.logprobs;
  // Structured output, or a tool call the request requires: a grammar masks the output.
  std::string grammar_text = r.grammar;
  std::string grammar_param = r.grammar_param;
  if (chat && !r.tools.empty() &&
      (r.tool_choice.mode == ToolChoiceMode::kRequired || r.tool_choice.mode == ToolChoiceMode::kFunction)) {
    if (!grammar_text.empty())
      return Fail(res, req.path, t0,
                  BadRequest("tool_choice", "invalid_value",
                             fmt::format("a required tool call and '{}' both constrain the output; send one of them",
                                         grammar_param)));
    Result<std::string> calls = ToolCallGrammar(tool_format, r.tools, r.tool_choice, r.parallel_tool_calls);
    if (!calls.ok())
      return Fail(res, req.path, t0,
                  BadRequest("tools", calls.status().code() == StatusCode::kUnimplemented ? "unsupported" : "invalid_value",
                             calls.status().message()));
    grammar_text = std::move(*calls);
    grammar_param = "tool_choice";
  }
  if (!grammar_text.empty()) {
    Result<std::shared_ptr<const grammar::Grammar>> g = grammar::Grammar::Compile(grammar_text);
    if (!g.ok())
      return Fail(res, req.path, t0,
                  BadRequest(grammar_param, "invalid_value", fmt::format("'{}': {}", grammar_param, g.status().message())));
    go.grammar = std::move(*g);
  }
  go.stop = r.stop;
  go.ignore_eos = r.ignore_eos;
  go.speculate = r.speculate;
  const uint64_t go_seed = go.sampling.seed;
  // Tool calls are parsed out of the output when the request offers tools and allows calls.
  const bool parse_tools = chat && !r.tools.empty() && r.tool_choice.mode != ToolChoiceMode::kNone;
  const auto piece = [this](int32_t id) { return tokenizer.TokenToPiece(id, /*render_special=*/true); };

  // One engine request per choice. The choices share the prompt's KV (the engine copies the
  // first one's rows) and each draws from a stream of its own.
  auto choices = std::make_shared<std::vector<Choice>>(r.n);
  for (int i = 0; i < r.n; ++i) {
    Choice& c = (*choices)[i];
    c.channel = std::make_shared<RequestChannel>();
    c.channel->arrival = t0;
    GenerateOptions gi = go;
    gi.sampling.seed = ChoiceSeed(go_seed, i);
    c.seed = gi.sampling.seed;
    if (r.logprobs >= 0) c.logprobs.emplace(endpoint, piece);
    if (parse_tools) c.tools.emplace(tool_format, nlohmann::json(r.tools), c.seed);
    Result<int64_t> engine_id = loop->Submit(ids, std::move(gi), c.channel);
    if (!engine_id.ok()) {
      for (int j = 0; j < i; ++j) loop->Cancel((*choices)[j].engine_id);
      ApiError e;
      if (engine_id.status().code() == StatusCode::kResourceExhausted) {
        e.http_status = 429;
        e.type = "rate_limit_error";
        e.code = "server_busy";
      } else if (engine_id.status().code() == StatusCode::kUnavailable) {
        e = ShuttingDown("");
        res.set_header("Retry-After", "5");
      } else {
        // The engine's checks name what they refuse: a logit_bias id outside the vocabulary, or
        // the prompt.
        e.param = engine_id.status().message().rfind("logit_bias", 0) == 0 ? "logit_bias" : prompt_field;
        e.code = "invalid_value";
      }
      e.message = engine_id.status().message();
      if (e.http_status == 429) res.set_header("Retry-After", "1");
      return Fail(res, req.path, t0, e);
    }
    c.engine_id = *engine_id;
  }
  const auto cancel_all = [this, choices] {
    for (const Choice& c : *choices)
      if (!c.done) loop->Cancel(c.engine_id);
  };

  ResponseHeader h;
  h.id = NextId(endpoint);
  h.created = std::time(nullptr);
  h.model = r.model.empty() ? opt.model_name : r.model;
  h.endpoint = endpoint;
  h.seed = go_seed;

  if (!r.stream) {
    // Nothing is written until the generation ends, so no write can fail when the client hangs
    // up (as it does for streams). httplib 0.11 exposes no connection state: find this request's
    // socket and poll it. It stays open while this handler runs on the connection's thread. If it
    // cannot be found, the generation runs to completion whether or not the client is there.
    const int conn_fd = FindConnectionFd(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    constexpr auto kProbeInterval = std::chrono::milliseconds(100);
    Clock::time_point next_probe = Clock::now() + kProbeInterval;
    bool client_gone = false;
    for (Choice& c : *choices) {
      StreamEvent ev;
      for (;;) {
        if (c.channel->Pop(&ev, kProbeInterval) && ev.kind == StreamEvent::Kind::kDone) break;
        if (conn_fd < 0 || client_gone || Clock::now() < next_probe) continue;
        next_probe = Clock::now() + kProbeInterval;
        if (PeerClosed(conn_fd)) {
          client_gone = true;
          cancel_all();  // the done events follow at the next step boundary
        }
      }
      c.done = true;
      c.result = std::move(ev.result);
    }
    SpecStats merged = MergedStats(*choices);
    Outcome o;
    o.stats = &merged;
    o.finish_reason = FinishReason((*choices)[0].result.stop_reason);
    const bool cancelled = std::any_of(choices->begin(), choices->end(),
                                       [](const Choice& c) { return c.result.stop_reason == "cancelled"; });
    const auto out_of_memory = std::find_if(choices->begin(), choices->end(), [](const Choice& c) {
      return c.result.stop_reason == "out_of_memory";
    });
    if (client_gone) {
      // Nobody reads the answer (a client that only half-closed does). The body must not be
      // empty: the error handler would record an empty 4xx response a second time.
      ApiError e;
      e.http_status = 499;  // nginx's "client closed request", as for streams
      e.code = "client_closed_request";
      e.message = "the client closed the connection; the generation was cancelled";
      SendError(res, e);
      o.http_status = 499;
    } else if (out_of_memory != choices->end()) {
      // Nothing was lost that was promised: the server runs on, and the retry may find memory.
      res.set_header("Retry-After", "5");
      SendError(res, OutOfMemory(out_of_memory->result.error));
      o.http_status = 503;
    } else if (cancelled && draining.load()) {
      res.set_header("Retry-After", "5");
      SendError(res, ShuttingDown("the server shut down before the generation finished (--shutdown-timeout); "
                                  "the generation was cancelled"));
      o.http_status = 503;
    } else if (cancelled) {
      ApiError e;
      e.http_status = 503;
      e.type = "server_error";
      e.code = "cancelled";
      e.message = "the generation was cancelled (engine failure; see the server log)";
      SendError(res, e);
      o.http_status = 503;
    } else {
      nlohmann::json body;
      for (int i = 0; i < r.n; ++i) {
        const GenerateResult& result = (*choices)[i].result;
        nlohmann::json logprobs = nullptr;
        if (r.logprobs >= 0) logprobs = LogprobsWriter(endpoint, piece).Write(result.logprobs);
        nlohmann::json one = Response(h, result.text, FinishReason(result.stop_reason), result.stats,
                                      r.return_tokens ? &result.ids : nullptr, std::move(logprobs));
        nlohmann::json& choice = one["choices"][0];
        choice["index"] = i;
        if (parse_tools) {
          ParsedAssistant parsed = ParseToolCalls(tool_format, result.text, nlohmann::json(r.tools), (*choices)[i].seed);
          if (!parsed.tool_calls.empty()) {
            nlohmann::json& message = choice["message"];
            message["content"] = parsed.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed.content);
            message["tool_calls"] = ToolCallsJson(parsed.tool_calls);
            // A generation cut by max_tokens stays "length", as OpenAI reports it.
            if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
          }
        }
        if (i == 0) {
          body = std::move(one);
        } else {
          body["choices"].push_back(std::move(choice));
        }
      }
      o.finish_reason = body["choices"][0]["finish_reason"].get<std::string>();
      if (r.n > 1) {
        body["usage"] = Usage(merged.prompt_tokens, merged.generated_tokens, merged.prompt_cached_tokens);
        body["dspark"] = SpecJson(merged);
      }
      res.set_content(Dump(body), "application/json");
    }
    return Finished(h.id, req.path, t0, o);
  }

  // Streaming: the content provider runs on this HTTP thread until every choice is done.
  struct StreamState {
    std::shared_ptr<std::vector<Choice>> choices;
    ResponseHeader header;
    std::string path;
    Clock::time_point t0;
    bool finished = false;
    bool return_tokens = false;
    Clock::time_point last_write = Clock::now();
    std::shared_ptr<void> active_token;  // released with the response, after its last write
  };
  auto st = std::make_shared<StreamState>();
  st->active_token = std::move(active_token);
  st->choices = choices;
  st->header = h;
  st->path = req.path;
  st->t0 = t0;
  st->return_tokens = r.return_tokens;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, cancel_all](size_t, httplib::DataSink& sink) -> bool {
        std::vector<Choice>& cs = *st->choices;
        const int n = static_cast<int>(cs.size());
        // Events of every choice that has some; waits on the first running one when none has.
        std::string data;
        bool any = false;
        for (int i = 0; i < n; ++i) {
          Choice& c = cs[i];
          if (c.done) continue;
          StreamEvent ev;
          const auto wait = any ? std::chrono::milliseconds(0) : std::chrono::milliseconds(n == 1 ? 250 : 20);
          if (!c.channel->Pop(&ev, wait)) continue;
          any = true;
          data += ChoiceEvents(st->header, i, n, c, std::move(ev), st->return_tokens);
        }
        const bool all_done = std::all_of(cs.begin(), cs.end(), [](const Choice& c) { return c.done; });
        if (all_done) {
          st->finished = true;
          SpecStats merged = MergedStats(cs);
          if (n > 1) {
            // The usage of all choices in a last chunk of its own, as OpenAI sends it.
            nlohmann::json last = FinalChunk(st->header, "", merged);
            last["choices"] = nlohmann::json::array();
            data += SseEvent(last);
          }
          const bool cut = std::any_of(cs.begin(), cs.end(), [](const Choice& c) { return c.finish_reason == "cancelled"; });
          // OpenAI's clients raise an error on an event carrying one: the text is incomplete.
          const auto oom = std::find_if(cs.begin(), cs.end(), [](const Choice& c) { return c.finish_reason == "out_of_memory"; });
          if (oom != cs.end()) {
            data += SseEvent(OutOfMemory(oom->result.error).ToJson());
          } else if (cut && draining.load()) {
            data += SseEvent(ShuttingDown("the server shut down before the generation finished (--shutdown-timeout)")
                                 .ToJson());
          }
          data += "data: [DONE]\n\n";
          const bool ok = sink.write(data.data(), data.size());
          sink.done();
          Outcome o;
          o.stats = &merged;
          o.finish_reason = cs[0].finish_reason;
          if (!ok) o.http_status = 499;  // client closed the connection
          Finished(st->header.id, st->path, st->t0, o);
          return ok;
        }
        if (data.empty()) {
          if (Clock::now() - st->last_write < std::chrono::milliseconds(250)) return true;
          // An SSE comment while nothing comes (e.g. queued): the write fails once the client is
          // gone, which cancels the request instead of letting it occupy a slot.
          data = ": ping\n\n";
        }
        st->last_write = Clock::now();
        if (sink.write(data.data(), data.size())) return true;
        cancel_all();
        return false;
      },
      [this, st, cancel_all](bool) {
        if (st->finished) return;
        st->finished = true;
        cancel_all();
        Outcome o;
        o.http_status = 499;  // nginx's "client closed request"
        o.finish_reason = "cancelled";
        o.error = "client disconnected mid-stream; generation cancelled";
        Finished(st->header.id, st->path, st->t0, o);
      });
}

std::string HttpServer::Impl::ChoiceEvents(const ResponseHeader& h, int index, int n, Choice& c, StreamEvent ev,
                                           bool return_tokens) {
  // Chunks carry the choice's index; with one choice the finish chunk also carries the usage.
  const auto indexed = [index](nlohmann::json chunk) {
    chunk["choices"][0]["index"] = index;
    return chunk;
  };
  const auto delta_chunk = [&](const ToolStreamEvent& te, const char* source, int32_t token, nlohmann::json logprobs) {
    nlohmann::json chunk = TokenChunk(h, "", source, c.first, token, std::move(logprobs));
    nlohmann::json delta = ToOpenAiDelta(te);
    if (c.first) delta["role"] = "assistant";
    chunk["choices"][0]["delta"] = std::move(delta);
    c.first = false;
    return SseEvent(indexed(std::move(chunk)));
  };
  std::string data;
  if (ev.kind == StreamEvent::Kind::kToken) {
    // With return_tokens or logprobs every token gets a chunk, even one whose text is still held
    // back.
    int32_t token = return_tokens ? ev.id : -1;
    nlohmann::json logprobs = nullptr;
    if (c.logprobs && ev.logprob) logprobs = c.logprobs->Write(std::span(&*ev.logprob, 1));
    if (c.tools) {
      // Content and calls as the parser releases them; a token whose text it holds back still gets
      // its chunk when it carries an id or logprobs.
      std::vector<ToolStreamEvent> events = c.tools->Feed(ev.text);
      if (events.empty() && (token >= 0 || !logprobs.is_null())) events.push_back(ToolStreamEvent{});
      for (const ToolStreamEvent& te : events) {
        data += delta_chunk(te, SourceName(ev.source), token, logprobs);
        token = -1;
        logprobs = nullptr;
      }
      return data;
    }
    if (ev.text.empty() && token < 0 && logprobs.is_null()) return data;
    data = SseEvent(indexed(TokenChunk(h, ev.text, SourceName(ev.source), c.first, token, std::move(logprobs))));
    c.first = false;
    return data;
  }
  c.done = true;
  c.result = std::move(ev.result);
  c.finish_reason = FinishReason(c.result.stop_reason);
  if (c.tools) {
    for (const ToolStreamEvent& te : c.tools->Finish()) data += delta_chunk(te, "target", -1, nullptr);
    if (c.tools->has_tool_calls() && c.finish_reason == "stop") c.finish_reason = "tool_calls";
  }
  nlohmann::json last = indexed(FinalChunk(h, c.finish_reason, c.result.stats));
  if (n > 1) {
    last.erase("usage");
    last.erase("dspark");
  }
  data += SseEvent(last);
  return data;
}

void HttpServer::Impl::Routes() {
  http.set_payload_max_length(opt.max_body_bytes);
  const int threads = opt.http_threads > 0 ? opt.http_threads : engine.options().n_parallel + opt.max_queue + 4;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_keep_alive_timeout(2);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool v1 = req.path.rfind("/v1/", 0) == 0;
    const bool work = v1 || req.path == "/tokenize" || req.path == "/detokenize";
    const bool protected_path = work || (opt.api_key_all && (req.path == "/metrics" || req.path == "/"));
    const bool authorized =
        opt.api_key.empty() || !protected_path || BearerMatches(req.get_header_value("Authorization"), opt.api_key) ||
        (req.path == "/" && req.has_param("key") && BearerMatches("Bearer " + req.get_param_value("key"), opt.api_key));
    if (authorized && work && draining.load()) {
      res.set_header("Retry-After", "5");
      const ApiError e = ShuttingDown("the server is shutting down; retry on another instance");
      if (v1)
        Fail(res, req.path, Clock::now(), e);
      else
        SendError(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (authorized) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.http_status = 401;
    e.type = "authentication_error";
    e.code = "invalid_api_key";
    e.message = "missing or wrong API key: send \"Authorization: Bearer <key>\" (the key given to --api-key)";
    if (v1)
      Fail(res, req.path, Clock::now(), e);
    else
      SendError(res, e);  // the request metrics count generations (/v1) only
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // already an error object
    ApiError e;
    e.http_status = res.status;
    if (res.status == 413) {
      e.code = "body_too_large";
      e.message = fmt::format("request body exceeds the limit of {} bytes", opt.max_body_bytes);
    } else if (res.status == 404) {
      e.code = "not_found";
      e.message = fmt::format("no route for {} {}", req.method, req.path);
    } else {
      e.message = fmt::format("HTTP {}", res.status);
    }
    if (req.path.rfind("/v1/", 0) == 0)
      Fail(res, req.path, Clock::now(), e);
    else
      SendError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = "internal error: " + what;
    Fail(res, req.path, Clock::now(), e);
  });

  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(req, res, Endpoint::kCompletions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(req, res, Endpoint::kChatCompletions);
  });
  // llama.cpp server's tokenizer endpoints (same shapes), for clients that count or inspect tokens.
  http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    TokenizeRequest r;
    if (auto e = ParseTokenizeRequest(req.body, &r)) return SendError(res, *e);
    EncodeOptions eo;
    eo.add_bos = r.add_special;
    eo.add_eos = r.add_special;
    eo.parse_special = r.parse_special;
    const std::vector<int32_t> ids = tokenizer.Encode(r.content, eo);
    nlohmann::json tokens = nlohmann::json::array();
    for (const int32_t id : ids) {
      if (r.with_pieces)
        tokens.push_back({{"id", id}, {"piece", PieceJson(tokenizer.TokenToPiece(id, /*render_special=*/true))}});
      else
        tokens.push_back(id);
    }
    res.set_content(Dump({{"tokens", tokens}}), "application/json");
  });
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    std::vector<int32_t> ids;
    if (auto e = ParseDetokenizeRequest(req.body, tokenizer.n_vocab(), &ids)) return SendError(res, *e);
    // Control tokens render as their text, as llama.cpp's /detokenize does; invalid UTF-8 becomes U+FFFD.
    res.set_content(Dump({{"content", tokenizer.Decode(ids, /*render_special=*/true)}}), "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
    nlohmann::json model = {
        {"id", opt.model_name},
        {"object", "model"},
        {"created", created},
        {"owned_by", "dspark"},
        {"dspark",
         {{"spec_type", opt.spec_type},
          {"n_ctx", engine.options().n_ctx},  // per slot: the most prompt + completion tokens of one request
          {"n_ctx_train", opt.n_ctx_train > 0 ? nlohmann::json(opt.n_ctx_train) : nlohmann::json(nullptr)},
          {"n_vocab", tokenizer.n_vocab()},
          {"parallel", engine.options().n_parallel},
          {"drafter", {{"spec_type", opt.spec_type}, {"draft_model", or_null(opt.draft_model)}}},
          {"chat_template", chat_template.has_value()}}}};
    res.set_content(Dump({{"object", "list"}, {"data", nlohmann::json::array({model})}}), "application/json");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    // Draining: not ready, so a load balancer sends new work elsewhere.
    const bool drain = draining.load();
    if (drain) res.status = 503;
    res.set_content(Dump({{"status", drain ? "draining" : "ok"},
                          {"slots_total", engine.options().n_parallel},
                          {"slots_busy", loop->num_running()},
                          {"queued", loop->num_queued()},
                          {"spec_type", opt.spec_type}}),
                    "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    EngineGauges g;
    g.num_running = loop->num_running();
    g.num_queued = loop->num_queued();
    g.num_in_flight = loop->num_in_flight();
    g.n_parallel = engine.options().n_parallel;
    res.set_content(metrics.Render(loop->cumulative_stats(), g), "text/plain; version=0.0.4");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'");
    const std::string_view html = PlaygroundHtml();
    res.set_content(html.data(), html.size(), "text/html; charset=utf-8");
  });
}

namespace {
// Debian's libcpp-httplib is compiled with a listen backlog of 5, so a burst of clients (32
// connecting at once) overflows the accept queue and some connections die. httplib does not
// expose its socket: find our listening socket by its port and listen() again, which on Linux
// only raises the backlog.
void WidenListenBacklog(int port) {
  for (int fd = 3; fd < 4096; ++fd) {
    int accepting = 0;
    socklen_t len = sizeof(accepting);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(fd, SOMAXCONN);
  }
}
}  // namespace

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Create(BatchEngine& engine, const Tokenizer& tokenizer,
                                                       ServerOptions options) {
  auto impl = std::make_unique<Impl>(engine, tokenizer, std::move(options));
  if (!impl->opt.chat_template.empty()) {
    Result<ChatTemplate> t = ChatTemplate::Parse(impl->opt.chat_template);
    if (!t.ok()) return t.status().WithContext("serve: chat template: ");
    impl->chat_template = std::move(*t);
    impl->tool_format = DetectToolFormat(impl->opt.chat_template);
  }
  std::random_device rd;
  impl->id_prefix = fmt::format("{:08x}-", rd());
  const int max_in_flight = engine.options().n_parallel + std::max(0, impl->opt.max_queue);
  impl->loop = std::make_unique<EngineLoop>(engine, max_in_flight, &impl->metrics);
  impl->Routes();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

Result<int> HttpServer::Bind() {
  // A client that disconnects mid-stream must fail a write, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  Impl& m = *impl_;
  if (m.opt.port == 0) {
    m.port = m.http.bind_to_any_port(m.opt.host);
  } else {
    m.port = m.http.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1;
  }
  if (m.port <= 0)
    return Status(StatusCode::kUnavailable,
                  fmt::format("serve: cannot bind {}:{} (address in use or not local?)", m.opt.host, m.opt.port));
  WidenListenBacklog(m.port);
  m.loop->Start();
  return m.port;
}

void HttpServer::Serve() { impl_->http.listen_after_bind(); }

Result<int> HttpServer::Start() {
  DSPARK_ASSIGN_OR_RETURN(int port, Bind());
  impl_->serve_thread = std::thread([this] { Serve(); });
  // httplib's stop() is a no-op until the accept loop runs: wait for it, so that a Stop() right
  // after Start() cannot leave the serve thread blocked in accept().
  for (int i = 0; i < 10000 && !impl_->http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port;
}

void HttpServer::Shutdown(std::chrono::milliseconds timeout, const std::function<bool()>& cut_short) {
  if (!impl_) return;
  Impl& m = *impl_;
  m.draining.store(true);
  const auto idle = [&m] { return m.active == 0; };
  const Clock::time_point deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(m.active_mu);
  if (!idle()) DSPARK_LOG_INFO("serve: shutting down: waiting up to {} ms for {} requests", timeout.count(), m.active);
  while (!idle() && Clock::now() < deadline && !(cut_short && cut_short()))
    m.active_cv.wait_for(lock, std::chrono::milliseconds(50), idle);
  if (!idle()) {
    DSPARK_LOG_WARN("serve: shutting down: cancelling {} requests still running", m.active);
    // A cancelled request ends at the next engine step and its handler then writes its end. Cancel
    // again while waiting: a handler may be submitting its choices as the first round runs. A
    // client that stops reading must not hold the process forever.
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(10);
    while (!idle() && Clock::now() < give_up) {
      lock.unlock();
      m.loop->CancelAll();
      lock.lock();
      m.active_cv.wait_for(lock, std::chrono::milliseconds(50), idle);
    }
  }
  lock.unlock();
  Stop();
}

void HttpServer::Stop() {
  if (!impl_) return;
  impl_->http.stop();
  impl_->loop->Stop();
  if (impl_->serve_thread.joinable()) impl_->serve_thread.join();
}

int HttpServer::port() const { return impl_->port; }

}  // namespace dspark::serve
