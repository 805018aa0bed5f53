// `dspark serve`: the OpenAI-compatible server (src/serve) over a BatchEngine with continuous
// batching and batch-wide speculative verification. One log line per request on stderr.
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "serve/http_server.h"
#include "speculative/batch_engine.h"
#include "speculative/drafters/factory.h"
#include "speculative/speculation.h"
#include "util/log.h"

namespace dspark::cli {

namespace {
struct ServeFlags {
  std::string model;
  std::string alias;
  serve::ServerOptions server;
  int parallel = 4;
  int ctx_size = 0;
  int threads = 0;
  int prefill_chunk = 256;
  std::string chat_template_file;
  DrafterConfig drafter;
  bool no_repack = false;
  DType cache_type = DType::kF16;
  ScheduleOptions schedule;
  bool verbose = false;
  bool cache_prompt = true;
  int cache_ram_mib = 2048;
  int shutdown_timeout_s = 30;
};

// SIGINT/SIGTERM received so far. Async-signal-safe (a lock-free atomic); a watcher thread acts on
// it: the first drains the server, a second cancels what is still running.
std::atomic<int> g_signals{0};

void OnSignal(int) { g_signals.fetch_add(1); }

int RunServe(ServeFlags f) {
  SetLogLevel(f.verbose ? LogLevel::kDebug : LogLevel::kInfo);
  if (f.server.api_key_all && f.server.api_key.empty())
    return Fail(InvalidArgument("serve: --api-key-all protects /metrics and the playground with --api-key; give a key"));
  f.drafter.repack = !f.no_repack;
  auto loaded = LoadModelAndTokenizer(f.model, ModelOptions{!f.no_repack});
  if (!loaded.ok()) return Fail(loaded.status());
  Model& model = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  ThreadPool pool(ThreadCount(f.threads));
  const int n_ctx = ContextSize(f.ctx_size, model);

  f.drafter.n_seq = f.parallel;
  if (f.drafter.type == "synthetic")
    return Fail(InvalidArgument("serve: --spec-type synthetic needs the reference output of one prompt; use it with "
                                "`dspark generate`"));
  SpeculationOptions so{f.drafter, f.schedule, std::nullopt};
  if (!f.schedule.adaptive) so.mode = ScheduleMode::kCut;  // --no-spec-adaptive: no cost model either
  auto spec = BuildSpeculation(std::move(so), model, tok, pool, n_ctx);
  if (!spec.ok()) return Fail(spec.status());
  auto* drafter = &spec->drafter;

  BatchEngineOptions bo;
  bo.n_parallel = f.parallel;
  bo.n_ctx = n_ctx;
  bo.prefill_chunk = f.prefill_chunk;
  bo.kv_type = f.cache_type;
  bo.prompt_cache = f.cache_prompt;
  bo.cache_ram_bytes = static_cast<size_t>(f.cache_ram_mib) << 20;
  if (Status ok = KvCache::Supports(model.config(), f.cache_type); !ok.ok()) return Fail(ok);
  bo.schedule = spec->schedule;
  BatchEngine engine(model, tok, pool, bo, drafter->get());
  if (bo.schedule.adaptive && *drafter != nullptr) {
    // Batch-wide draft admission needs the cost of a target pass by row count: measure it now
    // rather than inside the first request.
    const auto t0 = std::chrono::steady_clock::now();
    const CostModel& cost = engine.cost_model();
    DSPARK_LOG_INFO("serve: profiled target pass cost at {} row counts in {:.1f} s", cost.points().size(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (const auto& [rows, ms] : cost.points()) DSPARK_LOG_DEBUG("serve: target pass of {} rows: {:.3f} ms", rows, ms);
  }

  if (!f.chat_template_file.empty()) {
    auto text = ReadTextFile(f.chat_template_file, "--chat-template-file");
    if (!text.ok()) return Fail(text.status().WithContext("serve: "));
    f.server.chat_template = std::move(*text);
  } else {
    auto tmpl = model.file().GetStringOr("tokenizer.chat_template", "");
    if (!tmpl.ok()) return Fail(tmpl.status());
    f.server.chat_template = *tmpl;
  }
  f.server.spec_type = f.drafter.type;
  f.server.draft_model = f.drafter.type == "none" ? "" : f.drafter.draft_model;
  f.server.n_ctx_train = model.config().n_ctx_train;
  if (!f.alias.empty()) {
    f.server.model_name = f.alias;
  } else {
    const size_t slash = f.model.find_last_of('/');
    f.server.model_name = slash == std::string::npos ? f.model : f.model.substr(slash + 1);
  }
  auto server = serve::HttpServer::Create(engine, tok, f.server);
  if (!server.ok()) return Fail(server.status());
  auto port = (*server)->Bind();
  if (!port.ok()) return Fail(port.status());
  DSPARK_LOG_INFO("serve: {} on http://{}:{} | parallel {} | ctx {} | KV cache {}, {:.0f} MiB | threads {} | spec {} | "
                  "chat template {} | api key {}",
                  f.server.model_name, f.server.host, *port, f.parallel, n_ctx, DTypeName(f.cache_type),
                  engine.cache_bytes() / 1048576.0, pool.num_threads(), f.drafter.type,
                  f.server.chat_template.empty() ? "none" : "yes", f.server.api_key.empty() ? "off" : f.server.api_key_all ? "on (all but /health)" : "on");
  if (!serve::IsLoopbackHost(f.server.host) && f.server.api_key.empty())
    DSPARK_LOG_WARN("serve: listening on {}, which is not a loopback address, without --api-key: anyone who can "
                    "reach it can use it",
                    f.server.host);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::atomic<bool> served{false};
  std::thread watcher([&] {
    while (g_signals.load() == 0 && !served.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (served.load()) return (*server)->Stop();
    DSPARK_LOG_INFO("serve: shutting down (in-flight requests get up to {} s; signal again to cancel them now)",
                    f.shutdown_timeout_s);
    (*server)->Shutdown(std::chrono::seconds(f.shutdown_timeout_s), [] { return g_signals.load() > 1; });
  });
  (*server)->Serve();
  served.store(true);
  watcher.join();
  DSPARK_LOG_INFO("serve: stopped");
  return 0;
}
}  // namespace

Runner RegisterServe(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  f->model = DefaultModelPath();
  f->schedule.adaptive = true;  // batch-wide draft admission: speculation backs off under load
  CLI::App* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching and speculation");
  sub->add_option("-m,--model", f->model, "Target model GGUF")->capture_default_str();
  sub->add_option("--alias", f->alias, "Model name reported by the API (default: the file name)");
  sub->add_option("--host", f->server.host, "Address to bind")->capture_default_str();
  sub->add_option("--port", f->server.port, "Port to bind (0: any free port, printed at start-up)")->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--parallel", f->parallel, "Sequences decoded together (slots)")->capture_default_str()->check(CLI::Range(1, 256));
  sub->add_option("-c,--ctx-size", f->ctx_size, "Context per sequence (default: min(train context, 4096))");
  AddCacheTypeOption(sub, &f->cache_type);
  sub->add_option("-t,--threads", f->threads, "Threads (default: physical cores)");
  AddDrafterFlags(sub, &f->drafter, "none | draft-simple | draft-dspark | draft-dflash | draft-eagle3 | draft-mtp | ngram", /*synthetic=*/false);
  sub->add_option("--api-key", f->server.api_key, "Require \"Authorization: Bearer KEY\" on every /v1 endpoint");
  sub->add_flag("--api-key-all", f->server.api_key_all,
                "With --api-key: also require it on /metrics and the playground (/?key=KEY there); /health stays open");
  sub->add_option("--shutdown-timeout", f->shutdown_timeout_s,
                  "Seconds SIGTERM/SIGINT lets in-flight requests finish before cancelling them (0: at once)")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  sub->add_option("--max-queue", f->server.max_queue, "Requests waiting beyond --parallel before 429")->capture_default_str()->check(CLI::Range(0, 100000));
  sub->add_option("--max-body", f->server.max_body_bytes, "Largest request body in bytes (413 above)")->capture_default_str();
  sub->add_option("--default-max-tokens", f->server.default_max_tokens, "max_tokens when a request gives none")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--prefill-chunk", f->prefill_chunk, "Most prompt tokens per engine step")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  sub->add_flag("--cache-prompt,!--no-cache-prompt", f->cache_prompt,
                "Reuse the KV rows of a request's longest cached prefix (slots, then host memory; default on)");
  sub->add_option("--cache-ram", f->cache_ram_mib,
                  "Host memory (MiB) for cached prefixes that no slot holds any more; 0: slots only")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--chat-template-file", f->chat_template_file, "Jinja chat template (default: the GGUF's tokenizer.chat_template)");
  sub->add_flag("--no-repack", f->no_repack, kNoRepackHelp);
  sub->add_flag("-v,--verbose", f->verbose, "Debug log: one line per engine step (rows, drafts, pass and draft time)");
  sub->add_option("--spec-draft-n-max", f->schedule.n_max, "Most tokens drafted per step")->capture_default_str()->check(CLI::Range(1, 64));
  sub->add_option("--spec-draft-n-min", f->schedule.n_min, "Drop drafts shorter than this")->capture_default_str()->check(CLI::Range(0, 64));
  sub->add_option("--spec-branches", f->schedule.branches, "Token trees: alternatives per draft token verified as leaves beside the chain where they pay (0: chains)")->capture_default_str()->check(CLI::Range(0, 8));
  sub->add_option("--spec-branch-tail", f->schedule.branch_tail, "Token trees: tokens drafted after each alternative (its side chain; n-gram and DSpark drafters), verified where they pay (0: leaves)")->capture_default_str()->check(CLI::Range(0, 16));
  sub->add_option("--spec-draft-p-min", f->schedule.p_min, "Stop drafting below this draft probability")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sub->add_flag("--spec-adaptive,!--no-spec-adaptive", f->schedule.adaptive,
                "Admit draft slots across the batch while expected tokens/ms rises (default on)");
  return [f] { return RunServe(*f); };
}

}  // namespace dspark::cli
