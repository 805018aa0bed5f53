#include "spec/generator.h"

#include <chrono>

#include "spec/stop_strings.h"

namespace dspark {

namespace {
double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Status CheckPromptFits(int prompt_tokens, int n_ctx) {
  if (prompt_tokens == 0) return InvalidArgument("prompt is empty (no tokens after tokenisation)");
  if (prompt_tokens >= n_ctx)
    return OutOfRange("prompt has {} tokens but the context holds {}; shorten it or raise --ctx-size",
                      prompt_tokens, n_ctx);
  return Status::Ok();
}

Result<std::vector<float>> Prefill(Model& model, KvCache& cache, ThreadPool& pool, int seq,
                                   const std::vector<int32_t>& ids, int start_pos, int chunk) {
  if (chunk < 1) chunk = 1;
  std::vector<float> last;
  const int n = static_cast<int>(ids.size());
  for (int b = 0; b < n; b += chunk) {
    const int e = std::min(n, b + chunk);
    Batch batch;
    for (int i = b; i < e; ++i) batch.Add(ids[i], start_pos + i, seq, i == n - 1);
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(batch, cache, pool));
    if (e == n) last = std::move(out.logits);
  }
  return last;
}

Generator::Generator(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int n_ctx)
    : model_(model), tokenizer_(tokenizer), pool_(pool), cache_(model.config(), 1, n_ctx) {}

Result<GenerateResult> Generator::Generate(std::string_view prompt, const GenerateOptions& options,
                                           const TokenCallback& on_token) {
  EncodeOptions eo;
  eo.add_bos = options.add_bos;
  eo.add_eos = false;
  eo.parse_special = options.parse_special;
  return GenerateFromIds(tokenizer_.Encode(prompt, eo), options, on_token);
}

Result<GenerateResult> Generator::GenerateFromIds(const std::vector<int32_t>& prompt_ids,
                                                  const GenerateOptions& options, const TokenCallback& on_token) {
  DSPARK_TRY(ValidateSamplingParams(options.sampling));
  if (options.max_new_tokens < 1) return InvalidArgument("max_new_tokens must be >= 1, got {}", options.max_new_tokens);
  const int n_prompt = static_cast<int>(prompt_ids.size());
  DSPARK_TRY(CheckPromptFits(n_prompt, cache_.n_ctx()));
  const int n_vocab = model_.config().n_vocab;
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= n_vocab) return InvalidArgument("prompt token id {} is outside the vocabulary [0, {})", id, n_vocab);

  GenerateResult result;
  GenerateStats& st = result.stats;
  st.prompt_tokens = n_prompt;
  cache_.Clear(0);

  auto t0 = std::chrono::steady_clock::now();
  DSPARK_ASSIGN_OR_RETURN(std::vector<float> logits, Prefill(model_, cache_, pool_, 0, prompt_ids, 0, options.prefill_chunk));
  st.target_calls += (n_prompt + options.prefill_chunk - 1) / options.prefill_chunk;
  st.prompt_ms = MsSince(t0);

  Rng rng(options.sampling.seed);
  std::vector<float> scratch;
  StreamingDetokenizer detok(tokenizer_);
  StopStringMatcher stops(options.stop);
  t0 = std::chrono::steady_clock::now();
  int pos = n_prompt;
  st.stop_reason = "length";
  for (;;) {
    const int32_t id = SampleToken(logits.data(), n_vocab, options.sampling, rng, &scratch);
    if (!options.ignore_eos && tokenizer_.IsEog(id)) {
      st.stop_reason = "eos";
      break;
    }
    result.ids.push_back(id);
    ++st.generated_tokens;
    const std::string shown = stops.Push(detok.Push(id));
    result.text += shown;
    if (on_token && !on_token(id, shown)) {
      st.stop_reason = "cancelled";
      break;
    }
    if (stops.stopped()) {
      st.stop_reason = "stop";
      break;
    }
    if (st.generated_tokens >= options.max_new_tokens) break;
    if (pos >= cache_.n_ctx()) {
      st.stop_reason = "context";
      break;
    }
    Batch batch;
    batch.Add(id, pos++, 0, true);
    DSPARK_ASSIGN_OR_RETURN(ForwardOutput out, model_.Forward(batch, cache_, pool_));
    ++st.target_calls;
    logits = std::move(out.logits);
  }
  if (st.stop_reason != "stop" && st.stop_reason != "cancelled") {
    std::string tail = stops.Push(detok.Flush());
    tail += stops.Flush();
    result.text += tail;
    if (on_token && !tail.empty()) on_token(-1, tail);
  }
  st.decode_ms = MsSince(t0);
  return result;
}

}  // namespace dspark
