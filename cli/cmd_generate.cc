// `dspark generate`: streams the generated text to stdout; logs and stats go to stderr.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "spec/generator.h"

namespace dspark::cli {

namespace {
struct GenerateFlags {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  float temp = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int threads = 0;
  int ctx_size = 0;
  std::vector<std::string> stop;
  bool json = false;
  bool parse_special = false;
  bool ignore_eos = false;
};

int RunGenerate(const GenerateFlags& f) {
  auto loaded = LoadModelAndTokenizer(f.model);
  if (!loaded.ok()) return Fail(loaded.status());
  Model& model = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  ThreadPool pool(f.threads > 0 ? f.threads : ThreadPool::DefaultThreadCount());
  const int n_ctx = f.ctx_size > 0 ? f.ctx_size : std::min(model.config().n_ctx_train, 4096);
  Generator gen(model, tok, pool, n_ctx);
  GenerateOptions opt;
  opt.max_new_tokens = f.n_predict;
  opt.sampling = {f.temp, f.top_k, f.top_p, f.min_p, f.seed};
  opt.stop = f.stop;
  opt.parse_special = f.parse_special;
  opt.ignore_eos = f.ignore_eos;
  auto result = gen.Generate(f.prompt, opt, [&](int32_t, std::string_view text) {
    if (!f.json && !text.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!result.ok()) return Fail(result.status());
  const GenerateStats& st = result->stats;
  if (f.json) {
    nlohmann::json j;
    j["text"] = result->text;
    j["ids"] = result->ids;
    j["stats"] = {{"prompt_tokens", st.prompt_tokens},       {"generated_tokens", st.generated_tokens},
                  {"prompt_ms", st.prompt_ms},               {"decode_ms", st.decode_ms},
                  {"prompt_tokens_per_second", st.prompt_tok_s()}, {"tokens_per_second", st.decode_tok_s()},
                  {"target_calls", st.target_calls},         {"stop_reason", st.stop_reason}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "dspark: prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | stop: %s\n",
                 st.prompt_tokens, st.prompt_tok_s(), st.generated_tokens, st.decode_tok_s(), st.stop_reason.c_str());
  }
  return 0;
}
}  // namespace

Runner RegisterGenerate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  f->model = DefaultModelPath();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt");
  sub->add_option("-m,--model", f->model, "Target model GGUF")->capture_default_str();
  sub->add_option("-p,--prompt", f->prompt, "Prompt text")->required();
  sub->add_option("-n,--n-predict", f->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--temp", f->temp, "Temperature (0 = greedy)")->capture_default_str();
  sub->add_option("--top-k", f->top_k, "Top-k (0 = off)")->capture_default_str();
  sub->add_option("--top-p", f->top_p, "Top-p (1 = off)")->capture_default_str();
  sub->add_option("--min-p", f->min_p, "Min-p (0 = off)")->capture_default_str();
  sub->add_option("-s,--seed", f->seed, "Sampling seed")->capture_default_str();
  sub->add_option("-t,--threads", f->threads, "Threads (default: physical cores)");
  sub->add_option("-c,--ctx-size", f->ctx_size, "Context size (default: min(train context, 4096))");
  sub->add_option("--stop", f->stop, "Stop string (repeatable)");
  sub->add_flag("--json", f->json, "Print one JSON object with text, ids and stats");
  sub->add_flag("--parse-special", f->parse_special, "Parse special tokens written in the prompt");
  sub->add_flag("--ignore-eos", f->ignore_eos, "Do not stop at end-of-generation tokens");
  return [f] { return RunGenerate(*f); };
}

}  // namespace dspark::cli
