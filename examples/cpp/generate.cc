// Plain generation: the text streams to stdout as it is generated, statistics go to stderr.
//   generate MODEL.gguf [PROMPT] [MAX_NEW_TOKENS]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <dspark/dspark.h>

namespace ds = dspark::api;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  const std::string prompt = argc > 2 ? argv[2] : "def fibonacci(n):\n";
  try {
    ds::Model model = ds::Model::Load(argv[1]);
    const ds::ModelInfo& info = model.info();
    std::fprintf(stderr, "%s: %s, %d layers, vocabulary %d, trained context %d, dspark %s on %s\n", argv[1],
                 info.arch.c_str(), info.n_layer, info.n_vocab, info.n_ctx_train, ds::Version(),
                 ds::CpuTarget().c_str());

    ds::Engine engine(model);  // no drafter: plain decoding
    ds::GenerateOptions options;
    options.max_new_tokens = argc > 3 ? std::atoi(argv[3]) : 64;  // greedy: temperature 0
    std::fputs(prompt.c_str(), stdout);
    ds::GenerateResult r = engine.Generate(prompt, options, [](int32_t, std::string_view text, bool) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;  // false would stop here
    });
    std::fputc('\n', stdout);
    std::fprintf(stderr, "%lld tokens (%s), %.1f tokens/s\n", static_cast<long long>(r.stats.generated_tokens),
                 ds::StopReasonName(r.stop_reason), r.stats.tokens_per_second);
  } catch (const ds::Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", ds::ErrorCodeName(e.code()), e.what());
    return 1;
  }
  return 0;
}
