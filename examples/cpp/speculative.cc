// Speculative generation with a drafter, its statistics, and a check that the output is exactly
// plain greedy decoding's (exit status 1 if not).
//   speculative TARGET.gguf DRAFTER.gguf|ngram [PROMPT] [MAX_NEW_TOKENS]
// DRAFTER: a draft model or a DSpark/DFlash drafter GGUF (the type comes from the file), or
// "ngram" for prompt lookup.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <dspark/dspark.h>

namespace ds = dspark::api;

static void PrintStats(const char* label, const ds::Stats& s) {
  std::printf("%-12s %4lld tokens  %7.1f tok/s  target calls %lld  draft calls %lld\n", label,
              static_cast<long long>(s.generated_tokens), s.tokens_per_second, static_cast<long long>(s.target_calls),
              static_cast<long long>(s.draft_calls));
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TARGET.gguf DRAFTER.gguf|ngram [PROMPT] [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  const std::string drafter = argv[2];
  const std::string prompt = argc > 3 ? argv[3] : "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";
  try {
    ds::Model target = ds::Model::Load(argv[1]);

    ds::EngineOptions eo;
    if (drafter == "ngram") {
      eo.drafter.type = "ngram";
    } else {
      eo.drafter.type = "auto";  // draft-simple, draft-dspark or draft-dflash, from the file
      eo.drafter.model = drafter;
      eo.drafter.ngram_first = true;  // prompt lookup where the text repeats, the drafter elsewhere
    }
    // A fixed schedule: each step drafts up to 4 tokens and verifies them all, so the statistics
    // are the same on every run. schedule.adaptive = true instead chooses each draft's length
    // from measured acceptance and the target's measured cost (and decodes plainly where drafting
    // does not pay on this machine, which makes the statistics depend on its load).
    eo.schedule.n_max = 4;
    eo.schedule.mode = "cut";
    ds::Engine engine(target, eo);

    ds::GenerateOptions go;
    go.max_new_tokens = argc > 4 ? std::atoi(argv[4]) : 96;
    ds::GenerateOptions plain_go = go;
    plain_go.speculate = false;  // the same engine, decoding plainly

    const ds::GenerateResult plain = engine.Generate(prompt, plain_go);
    const ds::GenerateResult spec = engine.Generate(prompt, go);

    std::printf("%s%s\n---\n", prompt.c_str(), spec.text.c_str());
    std::printf("drafter      %s\n", engine.drafter_name().c_str());
    PrintStats("plain", plain.stats);
    PrintStats("speculative", spec.stats);
    const ds::Stats& s = spec.stats;
    std::printf("drafts %lld  drafted %lld  accepted %lld  acceptance %.3f  tau %.2f\n",
                static_cast<long long>(s.drafts), static_cast<long long>(s.drafted_tokens),
                static_cast<long long>(s.accepted_tokens), s.acceptance_rate, s.tau);
    std::printf("acceptance per position:");
    for (double a : s.acceptance_per_position) std::printf(" %.2f", a);
    std::printf("\ntime (ms): prompt %.1f  draft %.1f  verify %.1f  sample %.1f  other %.1f  decode %.1f\n",
                s.prompt_ms, s.draft_ms, s.verify_ms, s.sample_ms, s.other_ms, s.decode_ms);
    if (plain.stats.tokens_per_second > 0)
      std::printf("speed-up %.2fx\n", s.tokens_per_second / plain.stats.tokens_per_second);
    if (spec.ids != plain.ids) {
      std::printf("outputs DIFFER: speculative greedy decoding must equal plain decoding\n");
      return 1;
    }
    std::printf("outputs identical (%zu tokens)\n", spec.ids.size());
  } catch (const ds::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", ds::ErrorCodeName(e.code()), e.what());
    return 1;
  }
  return 0;
}
