// `dspark generate`: streams the generated text to stdout; logs and statistics go to stderr.
// With --spec-type it decodes speculatively; --compare also runs plain decoding on the same prompt.
#include <algorithm>
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "serve/chat_prompt.h"
#include "util/escapes.h"
#include "util/log.h"
#include "speculative/drafters/factory.h"
#include "speculative/speculation.h"
#include "speculative/engine.h"
#include "speculative/testing/broken_verifiers.h"

namespace dspark::cli {

namespace {
struct GenerateFlags {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  bool escape = true;
  // --chat: the prompt as a user message in the model's chat template.
  bool chat = false;
  std::string system_prompt;
  std::string chat_template_file;
  int n_predict = 128;
  float temp = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  std::string sampler_order = "temp-first";
  int threads = 0;
  int ctx_size = 0;
  DType cache_type = DType::kF16;
  std::vector<std::string> stop;
  bool json = false;
  bool parse_special = false;
  bool ignore_eos = false;
  // Speculation (llama.cpp's flag names).
  DrafterConfig drafter;
  bool no_repack = false;
  ScheduleOptions schedule;
  std::string schedule_mode;  // --spec-schedule: cut | cost; empty = cost with a confidence head
  bool compare = false;
  bool verbose = false;
  // --debug-verifier: a deliberately broken verification rule (speculative/testing/broken_verifiers.h),
  // so that a test can show --compare catching outputs that differ.
  std::string debug_verifier;
};

void PrintStats(const char* label, const GenerateResult& r) {
  const SpecStats& s = r.stats;
  std::fprintf(stderr, "dspark: %s: prompt %lld tokens %.1f tok/s | generated %lld tokens %.1f tok/s | stop: %s\n",
               label, static_cast<long long>(s.prompt_tokens), s.prompt_tokens_per_second(),
               static_cast<long long>(s.generated_tokens), s.tokens_per_second(), r.stop_reason.c_str());
  if (s.num_drafts == 0) return;
  std::string per_pos;
  for (double a : s.acceptance_per_position()) per_pos += fmt::format(" {:.2f}", a);
  std::fprintf(stderr,
               "dspark: %s: drafts %lld, drafted %lld, accepted %lld (%.1f%%), tau %.2f, target calls %lld, draft calls %lld\n"
               "dspark: %s: acceptance per position:%s\n"
               "dspark: %s: time ms: draft %.1f, verify %.1f, sample %.1f, other %.1f\n",
               label, static_cast<long long>(s.num_drafts), static_cast<long long>(s.num_draft_tokens),
               static_cast<long long>(s.num_accepted_tokens), 100 * s.acceptance_rate(), s.tau(),
               static_cast<long long>(s.num_target_calls), static_cast<long long>(s.num_draft_calls), label,
               per_pos.c_str(), label, s.draft_ms, s.verify_ms, s.sample_ms, s.other_ms);
  // Calibration: the mean predicted survival of slot i vs how often slot i survived, over the
  // drafts that carried a prediction (none: no confidence head and no draft probabilities).
  std::string cal;
  const auto calibration = s.calibration();
  for (size_t i = 0; i < calibration.size(); ++i) {
    if (calibration[i].drafts == 0) continue;
    cal += fmt::format(" {}:{:.2f}/{:.2f}", i + 1, calibration[i].predicted, calibration[i].realised);
  }
  if (cal.empty()) return;
  std::fprintf(stderr, "dspark: %s: calibration (slot:predicted/realised survival):%s\n", label, cal.c_str());
}

// The prompt's tokens: as text (a BOS first where the vocabulary adds one), or with --chat as a
// user message (after the system prompt, if any) rendered with the model's chat template, or the
// one in --chat-template-file.
Result<std::vector<int32_t>> PromptIds(const GenerateFlags& f, const Model& model, const Tokenizer& tok) {
  if (!f.chat) {
    EncodeOptions eo;
    eo.add_eos = false;
    eo.parse_special = f.parse_special;
    return tok.Encode(f.prompt, eo);
  }
  std::string source;
  if (!f.chat_template_file.empty()) {
    DSPARK_ASSIGN_OR_RETURN(source, ReadTextFile(f.chat_template_file, "--chat-template-file"));
  } else {
    DSPARK_ASSIGN_OR_RETURN(source, model.file().GetStringOr("tokenizer.chat_template", ""));
    if (source.empty())
      return InvalidArgument("generate --chat: the model has no chat template (GGUF key tokenizer.chat_template); "
                             "give one with --chat-template-file");
  }
  auto tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status().WithContext("generate --chat: ");
  std::vector<ChatMessage> messages;
  if (!f.system_prompt.empty()) messages.push_back({"system", f.system_prompt});
  messages.push_back({"user", f.prompt});
  auto chat = EncodeChat(*tmpl, tok, messages);
  if (!chat.ok()) return chat.status().WithContext("generate --chat: ");
  return std::move(chat->ids);
}

int RunGenerate(GenerateFlags f) {
  if (f.verbose) SetLogLevel(LogLevel::kDebug);
  if (!f.prompt_file.empty()) {
    auto text = ReadTextFile(f.prompt_file, "prompt file");
    if (!text.ok()) return Fail(text.status());
    f.prompt = std::move(*text);
  } else if (f.escape) {
    f.prompt = ProcessEscapes(f.prompt);
    f.system_prompt = ProcessEscapes(f.system_prompt);
  }
  if (!f.chat && (!f.system_prompt.empty() || !f.chat_template_file.empty()))
    return Fail(InvalidArgument("generate: --system-prompt and --chat-template-file need --chat"));
  f.drafter.repack = !f.no_repack;
  auto loaded = LoadModelAndTokenizer(f.model, ModelOptions{!f.no_repack});
  if (!loaded.ok()) return Fail(loaded.status());
  Model& model = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  ThreadPool pool(ThreadCount(f.threads));
  const int n_ctx = ContextSize(f.ctx_size, model);
  GenerateOptions opt;
  opt.max_new_tokens = f.n_predict;
  opt.sampling.temperature = f.temp;
  opt.sampling.top_k = f.top_k;
  opt.sampling.top_p = f.top_p;
  opt.sampling.min_p = f.min_p;
  opt.sampling.seed = f.seed;
  opt.sampling.order = *ParseSamplerOrder(f.sampler_order);  // checked by the flag
  opt.stop = f.stop;
  opt.parse_special = f.parse_special;
  opt.ignore_eos = f.ignore_eos;
  if (Status s = ValidateSamplingParams(opt.sampling); !s.ok()) return Fail(s);

  if (Status ok = KvCache::Supports(model.config(), f.cache_type); !ok.ok()) return Fail(ok);
  SpeculativeEngine plain(model, tok, pool, n_ctx, nullptr, {}, f.cache_type);
  const bool speculative = f.drafter.type != "none";
  auto prompt_ids = PromptIds(f, model, tok);
  if (!prompt_ids.ok()) return Fail(prompt_ids.status());
  std::optional<GenerateResult> plain_result;
  if (f.compare || f.drafter.type == "synthetic") {
    auto r = plain.GenerateFromIds(*prompt_ids, opt);
    if (!r.ok()) return Fail(r.status());
    plain_result = std::move(*r);
    f.drafter.synthetic_reference = *prompt_ids;
    f.drafter.synthetic_reference.insert(f.drafter.synthetic_reference.end(), plain_result->ids.begin(),
                                         plain_result->ids.end());
  }
  SpeculationOptions so{f.drafter, f.schedule, std::nullopt};
  if (f.schedule_mode == "cost") so.mode = ScheduleMode::kCost;
  if (f.schedule_mode == "cut") so.mode = ScheduleMode::kCut;
  auto spec = BuildSpeculation(std::move(so), model, tok, pool, n_ctx);
  if (!spec.ok()) return Fail(spec.status());
  BatchEngineOptions eo;
  eo.n_ctx = n_ctx;
  eo.kv_type = f.cache_type;
  eo.schedule = spec->schedule;
  if (!f.debug_verifier.empty()) {
    const auto bug = testing::ParseVerifierBug(f.debug_verifier);
    if (!bug) return Fail(InvalidArgument("generate: --debug-verifier: unknown rule '{}'", f.debug_verifier));
    eo.verify = testing::BrokenVerifier(*bug);
  }
  SpeculativeEngine engine(model, tok, pool, eo, spec->drafter.get());

  // The text streams as it is generated, except with --compare: the plain run is not streamed, and
  // writing and flushing each token to a pipe would count against speculation alone in the
  // speed-up. Both runs are timed alike and the text is printed after them.
  const bool stream = !f.json && !f.compare;
  auto result = engine.GenerateFromIds(*prompt_ids, opt, [&](const TokenEvent& t) {
    const std::string_view text = t.text;
    if (stream && !text.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!result.ok()) return Fail(result.status());
  if (!f.json && !stream) std::fwrite(result->text.data(), 1, result->text.size(), stdout);
  // End the streamed text's line, so that the statistics on stderr start on their own line.
  if (!f.json && !result->text.empty() && result->text.back() != '\n') {
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  const bool identical = plain_result && plain_result->ids == result->ids;
  // Greedy speculative output must equal plain decoding token for token; a difference is a bug and
  // fails the command. Sampled outputs differ legitimately (they are equal in distribution only).
  const bool differ = f.compare && plain_result && !identical && opt.sampling.greedy();
  const double speedup = plain_result && plain_result->stats.tokens_per_second() > 0
                             ? result->stats.tokens_per_second() / plain_result->stats.tokens_per_second()
                             : 0.0;
  if (f.json) {
    nlohmann::json j;
    j["text"] = result->text;
    j["ids"] = result->ids;
    j["stop_reason"] = result->stop_reason;
    j["spec_type"] = f.drafter.type;
    j["stats"] = result->stats.ToJson();
    if (f.compare && plain_result) {
      j["plain"] = {{"text", plain_result->text}, {"tokens_per_second", plain_result->stats.tokens_per_second()}};
      j["speedup"] = speedup;
      j["identical"] = identical;
    }
    std::printf("%s\n", j.dump().c_str());
    return differ ? 1 : 0;
  }
  std::printf("\n");
  if (f.compare && plain_result) PrintStats("plain", *plain_result);
  PrintStats(speculative ? "speculative" : "plain", *result);
  if (f.compare && plain_result)
    std::fprintf(stderr, "dspark: speed-up %.2fx (%.1f vs %.1f tok/s), outputs %s\n", speedup,
                 result->stats.tokens_per_second(), plain_result->stats.tokens_per_second(),
                 identical ? "identical" : (differ ? "DIFFER" : "differ (sampling: equal in distribution only)"));
  if (differ) return Fail(Internal("generate --compare: greedy speculative output differs from plain decoding"));
  return 0;
}
}  // namespace

Runner RegisterGenerate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  f->model = DefaultModelPath();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt (plain or speculative)");
  sub->add_option("-m,--model", f->model, "Target model GGUF")->capture_default_str();
  auto* prompt = sub->add_option("-p,--prompt", f->prompt, "Prompt text (escapes such as \\n are processed unless --no-escape)");
  auto* file = sub->add_option("-f,--file", f->prompt_file, "Read the prompt from this file (as written, no escapes)");
  prompt->excludes(file);
  sub->add_flag("--chat", f->chat,
                "Send the prompt as a user message in the model's chat template (tokenizer.chat_template), "
                "ready for the assistant's reply");
  sub->add_option("--system-prompt,--sys", f->system_prompt, "With --chat: a system message first");
  sub->add_option("--chat-template-file", f->chat_template_file, "With --chat: this Jinja chat template instead of the model's");
  sub->add_flag("-e,--escape,!--no-escape", f->escape,
                "Process escapes in -p (\\n \\r \\t \\' \\\" \\\\ \\xHH), as llama.cpp does; on by default");
  sub->add_option("-n,--n-predict", f->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  sub->add_option("--temp", f->temp, "Temperature (0 = greedy)")->capture_default_str();
  sub->add_option("--top-k", f->top_k, "Top-k (0 = off)")->capture_default_str();
  sub->add_option("--top-p", f->top_p, "Top-p (1 = off)")->capture_default_str();
  sub->add_option("--min-p", f->min_p, "Min-p (0 = off)")->capture_default_str();
  sub->add_option("-s,--seed", f->seed, "Sampling seed")->capture_default_str();
  sub->add_option("--sampler-order", f->sampler_order,
                  "temp-first: temperature, then top-k / top-p / min-p on the tempered distribution (vLLM, "
                  "OpenAI-style servers); temp-last: the filters on the untempered distribution, then temperature "
                  "(llama.cpp's chain)")
      ->capture_default_str()
      ->check(CLI::IsMember({"temp-first", "temp-last"}));
  sub->add_option("-t,--threads", f->threads, "Threads (default: physical cores)");
  AddDrafterFlags(sub, &f->drafter, "none | draft-simple | draft-dspark | draft-dflash | draft-eagle3 | draft-mtp | ngram | synthetic", /*synthetic=*/true);
  sub->add_option("-c,--ctx-size", f->ctx_size, "Context size (default: min(train context, 4096))");
  AddCacheTypeOption(sub, &f->cache_type);
  sub->add_option("--stop", f->stop, "Stop string (repeatable)");
  sub->add_flag("--json", f->json, "Print one JSON object with text, ids and stats");
  sub->add_flag("--no-repack", f->no_repack, kNoRepackHelp);
  sub->add_flag("--parse-special", f->parse_special, "Parse special tokens written in the prompt");
  sub->add_flag("--ignore-eos", f->ignore_eos, "Do not stop at end-of-generation tokens");
  sub->add_option("--spec-draft-n-max", f->schedule.n_max, "Most tokens drafted per step")->capture_default_str()->check(CLI::Range(1, 64));
  sub->add_option("--spec-draft-n-min", f->schedule.n_min, "Drop drafts shorter than this")->capture_default_str()->check(CLI::Range(0, 64));
  sub->add_option("--spec-branches", f->schedule.branches, "Token trees: alternatives per draft token verified as leaves beside the chain where they pay (0: chains)")->capture_default_str()->check(CLI::Range(0, 8));
  sub->add_option("--spec-branch-tail", f->schedule.branch_tail, "Token trees: tokens drafted after each alternative (its side chain; n-gram and DSpark drafters), verified where they pay (0: leaves)")->capture_default_str()->check(CLI::Range(0, 16));
  sub->add_option("--spec-draft-p-min", f->schedule.p_min, "Stop drafting below this draft probability (draft-dspark: below this confidence)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sub->add_option("--spec-schedule", f->schedule_mode,
                  "cut: verify the draft up to the p-min cut; cost: verify the prefix maximising expected tokens per "
                  "ms (default with a confidence head)")
      ->check(CLI::IsMember({"cut", "cost"}));
  sub->add_flag("--spec-adaptive", f->schedule.adaptive, "Choose each draft's length from measured acceptance and cost (a draft model ends each draft where its calibrated survival stops paying for verification)");
  sub->add_flag("-v,--verbose", f->verbose, "Debug log on stderr: one line per engine step (rows, drafts, pass and draft time)");
  sub->add_flag("--compare", f->compare,
                "Also run plain decoding and report the speed-up and whether outputs match (greedy: exit status 1 "
                "if they differ)");
  // Hidden: checks the checker (tests/cli).
  sub->add_option("--debug-verifier", f->debug_verifier, "Verify with a deliberately broken rule")->group("");
  return [f, prompt, file] {
    if (prompt->count() == 0 && file->count() == 0)
      return Fail(InvalidArgument("generate: give a prompt with -p TEXT or -f FILE"));
    return RunGenerate(*f);
  };
}

}  // namespace dspark::cli
